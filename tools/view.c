/* Helpers shared by `softrnic run`'s sysfs and /dev views (tools/view.h). */
#include "view.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

int view_debug_level(void)
{
	const char *v = getenv("SOFTRNIC_DEBUG");
	char *end;
	long l;

	if (!v || !*v)
		return 0;
	l = strtol(v, &end, 10);
	return *end ? 3 : (int)l;
}

void view_say(const char *view, int level, const char *fmt, ...)
{
	va_list ap;

	if (view_debug_level() < level)
		return;
	fprintf(stderr, "softrnic: %s: ", view);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int view_join(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int view_isolate(const char *path)
{
	char p[PATH_MAX];
	char *slash;

	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -1;
	for (;;) {
		if (mount(NULL, *p ? p : "/", NULL, MS_SLAVE, NULL) == 0)
			return 0;
		if (errno != EINVAL || !*p)
			break;
		slash = strrchr(p, '/');
		if (!slash)
			break;
		*slash = '\0';		/* "/sys/class" -> "/sys" -> "" (= "/") */
	}
	view_say("view", 1, "cannot make the mount of %s a slave: %s", path, strerror(errno));
	return -1;
}

void view_names_free(struct view_names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

static int skipped(const char *name, char *const *skip, size_t nskip)
{
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 1;
	for (size_t i = 0; i < nskip; i++)
		if (!strcmp(name, skip[i]))
			return 1;
	return 0;
}

int view_list(const char *dir, char *const *skip, size_t nskip, struct view_names *out)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	out->v = NULL;
	out->n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char **nv;

		if (skipped(e->d_name, skip, nskip))
			continue;
		nv = realloc(out->v, (out->n + 1) * sizeof(*nv));
		if (!nv || !(nv[out->n] = strdup(e->d_name))) {
			if (nv)
				out->v = nv;
			closedir(d);
			view_names_free(out);
			errno = ENOMEM;
			return -1;
		}
		out->v = nv;
		out->n++;
	}
	closedir(d);
	return 0;
}

int view_cover(const char *view, const char *dir, char *const *skip, size_t nskip,
	       const char *fsname, unsigned long flags, struct view_names *names, int *old)
{
	if (view_isolate(dir))
		return -1;
	if (view_list(dir, skip, nskip, names)) {
		view_say(view, 1, "cannot list %s: %s", dir, strerror(errno));
		return -1;
	}
	*old = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*old < 0)
		goto free_names;
	if (mount(fsname, dir, "tmpfs", flags, "mode=0755,size=1m")) {
		view_say(view, 1, "mount tmpfs on %s: %s", dir, strerror(errno));
		close(*old);
		goto free_names;
	}
	return 0;
free_names:
	view_names_free(names);
	return -1;
}
