/* Helpers shared by the views `softrnic run` builds in the program's mount
 * namespace: the sysfs view (sysfs_view.c) and the /dev view (dev_view.c). */
#ifndef SOFTRNIC_TOOLS_VIEW_H
#define SOFTRNIC_TOOLS_VIEW_H

#include <stddef.h>

/* SOFTRNIC_DEBUG as the library reads it (docs/CONFIG.md): not a number = 3. */
int view_debug_level(void);

/* "softrnic: VIEW: message" on stderr when SOFTRNIC_DEBUG >= level. */
void view_say(const char *view, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* out = dir "/" name; -1 when it does not fit. */
int view_join(char *out, size_t len, const char *dir, const char *name);

/* A list of directory entry names. */
struct view_names {
	char **v;
	size_t n;
};

/* The entries of dir but ".", ".." and the nskip names in skip. 0 or -1. */
int view_list(const char *dir, char *const *skip, size_t nskip, struct view_names *out);
void view_names_free(struct view_names *s);

/*
 * Stop what we mount on `path` from propagating to the host: make the
 * mount that holds it a slave (MS_SLAVE fails with EINVAL on a path that
 * is not a mount point, so each parent is tried in turn, up to "/").
 * Only that mount: every other mount keeps its propagation. 0 or -1.
 */
int view_isolate(const char *path);

/*
 * The start both views share: isolate dir (view_isolate), list what it
 * holds but the skip names into *names, open it (O_PATH) as *old, and
 * mount a tmpfs named fsname (flags: MS_* bits) over it. 0, or -1 with
 * dir as it was and nothing to free; the caller then fills the tmpfs,
 * and on its own failure unmounts it (umount2 MNT_DETACH). Either way
 * it closes *old and frees *names when done. view: for messages.
 */
int view_cover(const char *view, const char *dir, char *const *skip, size_t nskip,
	       const char *fsname, unsigned long flags, struct view_names *names, int *old);

#endif
