/*
 * The /dev view `softrnic run` gives the program it runs.
 *
 * A kernel RDMA device has a character device, /dev/infiniband/uverbsN,
 * named by /sys/class/infiniband_verbs/uverbsN and by ibv_device.dev_name.
 * softrnic's libibverbs never opens it, but some programs look for it
 * before they use a device: UCX's uct_ib skips any device whose node is not
 * a character device that the user may read and write. softrnic0 has no
 * such node, so in the mount namespace sysfs_view.c made we add one:
 *
 *   - where /dev/infiniband does not exist (a host without RDMA hardware),
 *     /dev is covered with a tmpfs that holds every original entry again:
 *     directories and files as recursive bind mounts (so /dev/pts,
 *     /dev/shm and /dev/mqueue are the host's own mounts: softrnic's and
 *     UCX's shared-memory segments in /dev/shm still meet other
 *     processes'), symlinks as copies; plus infiniband/;
 *   - where /dev/infiniband exists but lacks the node, that directory is
 *     covered the same way instead, and /dev stays as it is.
 *
 * The node is a bind mount of /dev/null, a character device anyone may
 * open: inside a user namespace mknod is refused, a bind mount is not, and
 * a made-up device number could name a real device (ib_uverbs' own major
 * is 231). sysfs_view.c writes that device's number into infiniband_verbs/
 * uverbsN/dev, so the two agree, as they do in the kernel. The tmpfs is
 * made read-only, and the mount holding the covered directory a slave
 * first, so nothing propagates back to the host.
 *
 * Not covered: entries that appear in the covered directory after the
 * program started (a loop device made by losetup, a hot-plugged disk) are
 * not seen by it, and it cannot create entries at the top of /dev.
 */
#include "dev_view.h"
#include "view.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEV_DIR "/dev"
#define IB_DIR "/dev/infiniband"
#define DEV_FSNAME "softrnic-dev"
#define DEV_MNT_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

#define say(level, ...) view_say("dev view", level, __VA_ARGS__)

static bool is_chr(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* Put entry `name` of the covered directory (old: an O_PATH descriptor of
 * it) back at dir/name: a symlink as a copy, anything else as a recursive
 * bind mount (recursive, so that mounts below it come along, and because
 * a user namespace refuses a plain bind of a mount with locked children). */
static int restore_entry(int old, const char *dir, const char *name)
{
	char src[PATH_MAX], dst[PATH_MAX], target[PATH_MAX];
	struct stat st;
	ssize_t len;
	int fd;

	if (fstatat(old, name, &st, AT_SYMLINK_NOFOLLOW))
		return -1;
	if (view_join(dst, sizeof(dst), dir, name) ||
	    snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", old, name) >= (int)sizeof(src)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (S_ISLNK(st.st_mode)) {
		len = readlinkat(old, name, target, sizeof(target) - 1);
		if (len < 0)
			return -1;
		target[len] = '\0';
		return symlink(target, dst);
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(dst, 0755))
			return -1;
	} else {
		fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		close(fd);
	}
	return mount(src, dst, NULL, MS_BIND | MS_REC, NULL);
}

/* Cover dir with a tmpfs that holds what dir held, but for the names in
 * skip. 0, or -1 with dir as it was. */
static int cover(const char *dir, char *const *skip, size_t nskip)
{
	struct view_names ents;
	int old, ret = -1;

	if (view_cover("dev view", dir, skip, nskip, DEV_FSNAME, DEV_MNT_FLAGS, &ents, &old))
		return -1;
	for (size_t i = 0; i < ents.n; i++) {
		if (restore_entry(old, dir, ents.v[i])) {
			say(1, "cannot put %s/%s back over the tmpfs: %s", dir, ents.v[i],
			    strerror(errno));
			umount2(dir, MNT_DETACH);	/* the real one again */
			goto close_old;
		}
	}
	ret = 0;
close_old:
	close(old);
	view_names_free(&ents);
	return ret;
}

/* ib/NAME for each name: an empty file with /dev/null bound over it. */
static int place_nodes(int null_fd, char *const *names, size_t n)
{
	char src[64], dst[PATH_MAX];
	int fd;

	snprintf(src, sizeof(src), "/proc/self/fd/%d", null_fd);
	for (size_t i = 0; i < n; i++) {
		if (view_join(dst, sizeof(dst), IB_DIR, names[i])) {
			errno = ENAMETOOLONG;
			return -1;
		}
		fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		close(fd);
		if (mount(src, dst, NULL, MS_BIND, NULL))
			return -1;
	}
	return 0;
}

int dev_view_build(char *const *names, size_t n)
{
	char path[PATH_MAX];
	char **missing;
	const char *dir;
	bool own_ib;		/* /dev/infiniband exists: cover it, not /dev */
	struct stat st;
	size_t nmiss = 0;
	int null_fd = -1, ret = -1;

	missing = calloc(n ? n : 1, sizeof(*missing));
	if (!missing)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (view_join(path, sizeof(path), IB_DIR, names[i]) == 0 && !is_chr(path))
			missing[nmiss++] = names[i];
	if (!nmiss) {
		say(2, "%s has its nodes already", IB_DIR);
		ret = 0;
		goto free_missing;
	}
	if (lstat(IB_DIR, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			say(1, "%s is not a directory: left as it is", IB_DIR);
			goto free_missing;
		}
		own_ib = true;		/* add ours beside what is there */
	} else if (errno == ENOENT) {
		own_ib = false;
	} else {
		say(1, "%s: %s", IB_DIR, strerror(errno));
		goto free_missing;
	}
	null_fd = open("/dev/null", O_PATH | O_CLOEXEC);
	if (null_fd < 0 || fstat(null_fd, &st) || !S_ISCHR(st.st_mode)) {
		say(1, "/dev/null is not a character device here: no %s", IB_DIR);
		goto close_null;
	}
	/* A name that is there but not a character device is replaced. */
	dir = own_ib ? IB_DIR : DEV_DIR;
	if (cover(dir, own_ib ? missing : NULL, own_ib ? nmiss : 0))
		goto close_null;
	if ((!own_ib && mkdir(IB_DIR, 0755)) || place_nodes(null_fd, missing, nmiss) ||
	    mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | DEV_MNT_FLAGS, NULL)) {
		say(1, "cannot add %s/%s (%s): %s left as it was", IB_DIR, missing[0],
		    strerror(errno), dir);
		umount2(dir, MNT_DETACH);
		goto close_null;
	}
	say(2, "%s/%s%s is a character device (/dev/null's), over a tmpfs on %s", IB_DIR,
	    missing[0], nmiss > 1 ? " and others" : "", dir);
	ret = 0;
close_null:
	if (null_fd >= 0)
		close(null_fd);
free_missing:
	free(missing);
	return ret;
}
