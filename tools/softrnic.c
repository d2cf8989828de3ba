/*
 * softrnic: the command-line front end.
 *
 *   softrnic run [--] CMD [ARGS...]   run CMD on softrnic's libibverbs.so.1
 *   softrnic --help | --version
 *
 * `run` puts softrnic's library directory first in LD_LIBRARY_PATH and execs
 * CMD in place, so the program's own exit status (or the signal that killed
 * it) is what the caller sees. Before the exec it gives CMD a private mount
 * namespace in which /sys/class/infiniband shows softrnic0 (sysfs_view.c)
 * and /dev/infiniband/uverbs0 is a character device (dev_view.c);
 * unprivileged through a user namespace where the system allows one, else
 * skipped. Nothing here needs root or stays resident. Subcommands live in
 * one table; add a line there (and a function) for each new one (`stat`, …).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sysfs_view.h"

#ifndef SOFTRNIC_VERSION
#define SOFTRNIC_VERSION "unknown"
#endif

/* Exit codes, following the shell's conventions for a command it runs. */
enum {
	EXIT_USAGE = 2,		/* bad invocation, or softrnic is not built */
	EXIT_NOEXEC = 126,	/* CMD found but could not be executed */
	EXIT_NOTFOUND = 127,	/* CMD not found */
};

/* The library every RDMA program loads first; its presence marks a libdir. */
#define SENTINEL_LIB "libibverbs.so.1"

struct command {
	const char *name;
	const char *args;
	const char *summary;
	int (*run)(int argc, char **argv);	/* argv[0] is the command name */
};

static int cmd_run(int argc, char **argv);

static const struct command commands[] = {
	{ "run", "[--] CMD [ARGS...]",
	  "run CMD with softrnic's libibverbs.so.1 (via LD_LIBRARY_PATH)", cmd_run },
};

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static void usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: softrnic COMMAND [ARGS...]\n"
		     "       softrnic --help | --version\n\ncommands:\n");
	for (i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(out, "  %s %s\n      %s\n", commands[i].name,
			commands[i].args, commands[i].summary);
	fprintf(out, "\nenvironment:\n"
		     "  SOFTRNIC_LIBDIR   library directory to use (default: ../lib next to\n"
		     "                    this executable)\n"
		     "  SOFTRNIC_DEBUG    log level 0-3 of the library (see docs/CONFIG.md)\n"
		     "  SOFTRNIC_SYSFS    0: no /sys/class/infiniband view of softrnic0 and no\n"
		     "                    /dev/infiniband/uverbs0 for CMD\n");
}

/*
 * Where softrnic's libraries are: $SOFTRNIC_LIBDIR if set, else ../lib
 * relative to this executable (build/bin/softrnic -> build/lib). The answer
 * is made absolute so that a program that changes directory before it
 * dlopen()s still finds it. Returns 0, or -1 after printing why.
 */
static int find_libdir(char *out, size_t outlen)
{
	const char *env = getenv("SOFTRNIC_LIBDIR");
	char exe[PATH_MAX], cand[PATH_MAX];
	ssize_t n;
	char *slash;
	int i;

	if (env && *env) {
		if (strlen(env) >= sizeof(cand)) {
			fprintf(stderr, "softrnic: SOFTRNIC_LIBDIR is too long\n");
			return -1;
		}
		strcpy(cand, env);
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n < 0 || (size_t)n >= sizeof(exe) - 1) {
			fprintf(stderr, "softrnic: cannot find own executable "
				"(/proc/self/exe): %s; set SOFTRNIC_LIBDIR\n",
				n < 0 ? strerror(errno) : "path too long");
			return -1;
		}
		exe[n] = '\0';
		/* Strip "/softrnic", then "/bin". */
		for (i = 0; i < 2; i++) {
			slash = strrchr(exe, '/');
			if (!slash)
				break;
			*slash = '\0';
		}
		if (snprintf(cand, sizeof(cand), "%s/lib", exe) >= (int)sizeof(cand)) {
			fprintf(stderr, "softrnic: library path too long\n");
			return -1;
		}
	}

	if (!realpath(cand, exe)) {
		fprintf(stderr, "softrnic: library directory %s: %s\n", cand,
			strerror(errno));
		return -1;
	}
	if (strlen(exe) >= outlen) {
		fprintf(stderr, "softrnic: library path too long\n");
		return -1;
	}
	strcpy(out, exe);
	return 0;
}

static int libdir_has_verbs(const char *libdir)
{
	char path[PATH_MAX];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/" SENTINEL_LIB, libdir) >= (int)sizeof(path))
		return 0;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * LD_LIBRARY_PATH = libdir[:old]. An empty entry would mean the current
 * directory to ld.so, so none is added when there was no old value; and
 * nothing changes when libdir already leads (a nested `softrnic run`).
 */
static int prepend_library_path(const char *libdir)
{
	const char *old = getenv("LD_LIBRARY_PATH");
	size_t len = strlen(libdir);
	char *val;
	int ret;

	if (!old || !*old)
		return setenv("LD_LIBRARY_PATH", libdir, 1);
	if (strncmp(old, libdir, len) == 0 && (old[len] == ':' || old[len] == '\0'))
		return 0;

	val = malloc(len + 1 + strlen(old) + 1);
	if (!val)
		return -1;
	sprintf(val, "%s:%s", libdir, old);
	ret = setenv("LD_LIBRARY_PATH", val, 1);
	free(val);
	return ret;
}

static int cmd_run(int argc, char **argv)
{
	char libdir[PATH_MAX];
	int i = 1, err;

	if (i < argc && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (i < argc && !strcmp(argv[i], "--"))
		i++;
	else if (i < argc && argv[i][0] == '-') {
		fprintf(stderr, "softrnic: run: unknown option '%s' "
			"(use `softrnic run -- CMD` for a command starting with '-')\n",
			argv[i]);
		usage(stderr);
		return EXIT_USAGE;
	}
	if (i >= argc) {
		fprintf(stderr, "softrnic: run: no command given\n");
		usage(stderr);
		return EXIT_USAGE;
	}

	if (find_libdir(libdir, sizeof(libdir)) < 0)
		return EXIT_USAGE;
	if (!libdir_has_verbs(libdir)) {
		fprintf(stderr, "softrnic: %s has no " SENTINEL_LIB
			" (build softrnic first, or set SOFTRNIC_LIBDIR)\n", libdir);
		return EXIT_USAGE;
	}
	if (prepend_library_path(libdir) || setenv("SOFTRNIC_RUN", "1", 1)) {
		fprintf(stderr, "softrnic: setenv: %s\n", strerror(errno));
		return EXIT_USAGE;
	}

	/* The program sees softrnic0 in /sys/class and /dev/infiniband too,
	 * where the system lets us (tools/sysfs_view.c, dev_view.c); without
	 * the views it runs all the same. */
	if (sysfs_view_setup(libdir) == -2) {
		fprintf(stderr, "softrnic: run: entered a user namespace but could not "
			"map uid %u into it; set SOFTRNIC_SYSFS=0\n", (unsigned)geteuid());
		return EXIT_USAGE;
	}

	execvp(argv[i], &argv[i]);

	/* Only reached when exec failed: report it the way a shell does. */
	err = errno;
	fprintf(stderr, "softrnic: %s: %s\n", argv[i], strerror(err));
	return (err == EACCES || err == EPERM || err == ENOEXEC || err == EISDIR) ?
	       EXIT_NOEXEC : EXIT_NOTFOUND;
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("softrnic %s\n", SOFTRNIC_VERSION);
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);

	fprintf(stderr, "softrnic: unknown %s '%s'\n",
		argv[1][0] == '-' ? "option" : "command", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
