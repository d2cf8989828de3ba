/*
 * The sysfs view `softrnic run` gives the program it runs.
 *
 * Some programs do not ask libibverbs about a device but read sysfs:
 * /sys/class/infiniband/<dev>/ports/1/gids/N, .../gid_attrs/types/N and
 * ndevs/N, device/net/<netdev>, node_guid (rdma-core's own test suite, UCX,
 * several test runners). softrnic0 has no kernel device behind it, so
 * before exec'ing the program we enter a mount namespace of our own
 * (CLONE_NEWNS as root; CLONE_NEWUSER|CLONE_NEWNS otherwise, with the
 * caller's uid and gid mapped to themselves) and cover /sys/class with a
 * tmpfs that holds
 *   - a bind mount of every original /sys/class/<x> (net, block, ...), so
 *     nothing else of /sys changes (bind mounts of sysfs, not copies: the
 *     relative links in them still lead to /sys/devices);
 *   - infiniband/<dev>/ and infiniband_verbs/uverbs0/, written from what
 *     libdir's libibverbs.so.1 reports (a child process dlopen()s it, so the
 *     program's process never loaded it twice).
 * The tmpfs is then made read-only. /sys/class is covered as a whole
 * because on a host without RDMA hardware there is no infiniband directory
 * to mount over, and sysfs cannot create one. The mount containing
 * /sys/class is made a slave first, so nothing here propagates back to the
 * host; every other mount keeps its propagation (`ip netns add` run by the
 * program still reaches the host as before). `ip netns exec` remounts /sys
 * and so shows the real one, as it always did.
 *
 * In the same namespace, dev_view.c gives each uverbs device of the view
 * a character device /dev/infiniband/uverbsN, and its infiniband_verbs/
 * uverbsN/dev says which device number that node has.
 *
 * Not covered: classes that appear after the program started, real RDMA
 * devices (only what libibverbs.so.1 lists is shown, as ibv_get_device_list
 * does), and anything under /sys/devices or /sys/bus.
 */
#include "sysfs_view.h"
#include "dev_view.h"
#include "view.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLASS_DIR "/sys/class"
#define VIEW_FSNAME "softrnic-sysfs"
#define GEN_TIMEOUT_MS 10000	/* for the child that queries the library */
#define VIEW_MNT_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

#define say(level, ...) view_say("sysfs view", level, __VA_ARGS__)

/* ---- writing the tree (in the child) ------------------------------------ */

static int put(const char *path, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int put(const char *path, const char *fmt, ...)
{
	va_list ap;
	FILE *f = fopen(path, "we");
	int ok;

	if (!f)
		return -1;
	va_start(ap, fmt);
	ok = vfprintf(f, fmt, ap) >= 0 && fputc('\n', f) != EOF;
	va_end(ap);
	return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int mkdir_in(char *out, size_t len, const char *dir, const char *name)
{
	if (view_join(out, len, dir, name))
		return -1;
	return (mkdir(out, 0755) && errno != EEXIST) ? -1 : 0;
}

static int put_in(const char *dir, const char *name, const char *val)
{
	char p[PATH_MAX];

	return view_join(p, sizeof(p), dir, name) ? -1 : put(p, "%s", val);
}

static void fmt_guid(char *out, size_t len, __be64 g)
{
	uint64_t v = be64toh(g);

	snprintf(out, len, "%04x:%04x:%04x:%04x", (unsigned)(v >> 48) & 0xffff,
		 (unsigned)(v >> 32) & 0xffff, (unsigned)(v >> 16) & 0xffff,
		 (unsigned)v & 0xffff);
}

/* As the kernel prints a GID: eight big-endian 16-bit groups. */
static void fmt_gid(char *out, size_t len, const union ibv_gid *g)
{
	const uint8_t *r = g->raw;

	snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
		 "%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
		 r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* The kernel's "rate" attribute (ib_sysfs.c rate_show). */
static void fmt_rate(char *out, size_t len, uint8_t width, uint8_t speed)
{
	static const struct { uint8_t code; int rate; const char *name; } sp[] = {
		{ 2, 50, " DDR" }, { 4, 100, " QDR" }, { 8, 100, " FDR10" },
		{ 16, 140, " FDR" }, { 32, 250, " EDR" }, { 64, 500, " HDR" },
		{ 128, 1000, " NDR" },
	};
	int w = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 :
		width == 8 ? 12 : width == 16 ? 2 : 0;
	int rate = 25;
	const char *name = "";

	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
		if (sp[i].code == speed) {
			rate = sp[i].rate;
			name = sp[i].name;
		}
	rate *= w;
	snprintf(out, len, "%d%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "",
		 w, name);
}

struct verbs_fns {
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *a);
	/* The exported symbol (48-byte compat layout: everything used here). */
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int idx, union ibv_gid *g);
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t idx,
			    struct ibv_gid_entry *e, uint32_t flags, size_t size);
};

static int load_verbs(const char *libdir, struct verbs_fns *f)
{
	static const char *const names[] = {
		"ibv_get_device_list", "ibv_free_device_list", "ibv_open_device",
		"ibv_close_device", "ibv_query_device", "ibv_query_port",
		"ibv_query_gid", "_ibv_query_gid_ex",
	};
	void **slot[] = {
		(void **)&f->get_device_list, (void **)&f->free_device_list,
		(void **)&f->open_device, (void **)&f->close_device,
		(void **)&f->query_device, (void **)&f->query_port,
		(void **)&f->query_gid, (void **)&f->query_gid_ex,
	};
	char path[PATH_MAX];
	void *h;

	if (view_join(path, sizeof(path), libdir, "libibverbs.so.1"))
		return -1;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		say(1, "dlopen %s: %s", path, dlerror());
		return -1;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*slot[i] = dlsym(h, names[i]);
		if (!*slot[i]) {
			say(1, "%s: no %s", path, names[i]);
			return -1;
		}
	}
	return 0;
}

static const char *port_state_str(int s)
{
	static const char *const n[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
					 "ACTIVE_DEFER" };

	return (s >= 0 && s < 6) ? n[s] : "<unknown>";
}

static const char *phys_state_str(int s)
{
	static const char *const n[] = { "<unknown>", "Sleep", "Polling", "Disabled",
					 "PortConfigurationTraining", "LinkUp",
					 "LinkErrorRecovery", "Phy Test" };

	return (s >= 0 && s < 8) ? n[s] : "<unknown>";
}

/* ports/1/gids/N, gid_attrs/types/N, gid_attrs/ndevs/N for the whole table;
 * empty entries read as zeros and have no type or ndev, as in the kernel's
 * view (where reading those fails). *ndev0 = the netdev of GID 0. */
static int write_gids(const struct verbs_fns *f, struct ibv_context *ctx, const char *port,
		      int tbl_len, char *ndev0, size_t ndev0_len)
{
	char gids[PATH_MAX], attrs[PATH_MAX], types[PATH_MAX], ndevs[PATH_MAX];
	char idx[16], txt[64], ifname[IF_NAMESIZE];

	if (mkdir_in(gids, sizeof(gids), port, "gids") ||
	    mkdir_in(attrs, sizeof(attrs), port, "gid_attrs") ||
	    mkdir_in(types, sizeof(types), attrs, "types") ||
	    mkdir_in(ndevs, sizeof(ndevs), attrs, "ndevs"))
		return -1;
	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		union ibv_gid zero;

		snprintf(idx, sizeof(idx), "%d", i);
		memset(&e, 0, sizeof(e));
		memset(&zero, 0, sizeof(zero));
		if (f->query_gid_ex(ctx, 1, (uint32_t)i, &e, 0, sizeof(e))) {
			fmt_gid(txt, sizeof(txt), &zero);
			if (put_in(gids, idx, txt))
				return -1;
			continue;
		}
		fmt_gid(txt, sizeof(txt), &e.gid);
		if (put_in(gids, idx, txt) ||
		    put_in(types, idx, e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" :
			   "IB/RoCE v1"))
			return -1;
		if (e.ndev_ifindex && if_indextoname(e.ndev_ifindex, ifname)) {
			if (put_in(ndevs, idx, ifname))
				return -1;
			if (!*ndev0)
				snprintf(ndev0, ndev0_len, "%s", ifname);
		}
	}
	return 0;
}

static int write_port(const struct verbs_fns *f, struct ibv_context *ctx, const char *dev,
		      char *ndev0, size_t ndev0_len)
{
	struct ibv_port_attr pa;
	char ports[PATH_MAX], port[PATH_MAX], pkeys[PATH_MAX], txt[64];
	int phys;

	memset(&pa, 0, sizeof(pa));
	if (f->query_port(ctx, 1, &pa))
		return -1;
	phys = pa.phys_state ? pa.phys_state : (pa.state == IBV_PORT_ACTIVE ? 5 : 3);
	if (mkdir_in(ports, sizeof(ports), dev, "ports") ||
	    mkdir_in(port, sizeof(port), ports, "1") ||
	    mkdir_in(pkeys, sizeof(pkeys), port, "pkeys"))
		return -1;
	snprintf(txt, sizeof(txt), "%d: %s", pa.state, port_state_str(pa.state));
	if (put_in(port, "state", txt))
		return -1;
	snprintf(txt, sizeof(txt), "%d: %s", phys, phys_state_str(phys));
	if (put_in(port, "phys_state", txt))
		return -1;
	if (put_in(port, "link_layer",
		   pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet"))
		return -1;
	fmt_rate(txt, sizeof(txt), pa.active_width, pa.active_speed);
	if (put_in(port, "rate", txt))
		return -1;
	snprintf(txt, sizeof(txt), "0x%x", pa.lid);
	if (put_in(port, "lid", txt))
		return -1;
	snprintf(txt, sizeof(txt), "0x%x", pa.sm_lid);
	if (put_in(port, "sm_lid", txt))
		return -1;
	snprintf(txt, sizeof(txt), "%u", pa.lmc);
	if (put_in(port, "lid_mask_count", txt))
		return -1;
	snprintf(txt, sizeof(txt), "%u", pa.sm_sl);
	if (put_in(port, "sm_sl", txt))
		return -1;
	snprintf(txt, sizeof(txt), "0x%08x", pa.port_cap_flags);
	if (put_in(port, "cap_mask", txt) || put_in(pkeys, "0", "0xffff"))
		return -1;
	return write_gids(f, ctx, port, pa.gid_tbl_len, ndev0, ndev0_len);
}

static int write_device(const struct verbs_fns *f, struct ibv_device *d, const char *root)
{
	struct ibv_context *ctx = f->open_device(d);
	struct ibv_device_attr da;
	char ib[PATH_MAX], dev[PATH_MAX], hw[PATH_MAX], net[PATH_MAX], p[PATH_MAX];
	char uv[PATH_MAX], uvd[PATH_MAX], txt[128], ndev0[IF_NAMESIZE] = "";
	char link[PATH_MAX];
	int ret = -1;

	if (!ctx) {
		say(1, "cannot open %s: %s", d->name, strerror(errno));
		return -1;
	}
	memset(&da, 0, sizeof(da));
	if (f->query_device(ctx, &da))
		goto close;
	if (mkdir_in(ib, sizeof(ib), root, "infiniband") ||
	    mkdir_in(dev, sizeof(dev), ib, d->name) ||
	    mkdir_in(hw, sizeof(hw), dev, "device") ||
	    mkdir_in(net, sizeof(net), hw, "net"))
		goto close;
	snprintf(txt, sizeof(txt), "%d: %s", d->node_type,
		 d->node_type == IBV_NODE_RNIC ? "RNIC" : "CA");
	if (put_in(dev, "node_type", txt))
		goto close;
	fmt_guid(txt, sizeof(txt), da.node_guid);
	if (put_in(dev, "node_guid", txt))
		goto close;
	fmt_guid(txt, sizeof(txt), da.sys_image_guid);
	if (put_in(dev, "sys_image_guid", txt) || put_in(dev, "fw_ver", da.fw_ver) ||
	    put_in(dev, "hca_type", "softrnic") || put_in(dev, "node_desc", d->name) ||
	    put_in(hw, "numa_node", "-1"))
		goto close;
	snprintf(txt, sizeof(txt), "0x%x", da.hw_ver);
	if (put_in(dev, "hw_rev", txt))
		goto close;
	if (write_port(f, ctx, dev, ndev0, sizeof(ndev0)))
		goto close;
	/* device/net/<netdev of GID 0> -> /sys/class/net/<netdev>: one netdev,
	 * like a RoCE function's; the suite takes the first one listed. */
	if (*ndev0) {
		snprintf(link, sizeof(link), "../../../../net/%s", ndev0);
		if (view_join(p, sizeof(p), net, ndev0) || symlink(link, p))
			goto close;
	}
	if (mkdir_in(uv, sizeof(uv), root, "infiniband_verbs") ||
	    put_in(uv, "abi_version", "6") ||
	    mkdir_in(uvd, sizeof(uvd), uv, d->dev_name) ||
	    put_in(uvd, "ibdev", d->name) || put_in(uvd, "abi_version", "1"))
		goto close;
	ret = 0;
close:
	if (ret)
		say(1, "writing %s's tree failed: %s", d->name, strerror(errno));
	f->close_device(ctx);
	return ret;
}

/* The child: dlopen the library and write every device it lists. */
static int write_tree(const char *libdir, const char *root)
{
	struct verbs_fns f;
	struct ibv_device **list;
	int n = 0, ret = 0;

	if (load_verbs(libdir, &f))
		return -1;
	list = f.get_device_list(&n);
	if (!list || n == 0) {
		say(1, "%s/libibverbs.so.1 lists no device", libdir);
		return -1;
	}
	for (int i = 0; i < n && !ret; i++)
		ret = write_device(&f, list[i], root);
	f.free_device_list(list);
	return ret;
}

/* Runs write_tree in a child (bounded in time); 0 when it succeeded. */
static int generate(const char *libdir, const char *root)
{
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	pid_t pid;
	int status, waited;

	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(write_tree(libdir, root) ? 1 : 0);
	for (waited = 0; waited < GEN_TIMEOUT_MS; waited += 10) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : -1;
		if (r < 0 && errno != EINTR)
			return -1;
		nanosleep(&tick, NULL);
	}
	say(1, "querying the library took over %d ms; gave up", GEN_TIMEOUT_MS);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

/* ---- the namespace and the mounts --------------------------------------- */

static int write_proc(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

/*
 * Enter a mount namespace. 0 ok; -1 refused (nothing changed); -2 in a
 * user namespace whose uid map could not be written (cannot be undone).
 */
static int enter_namespace(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	char map[64];

	if (uid == 0) {
		if (unshare(CLONE_NEWNS) == 0)
			return 0;
		say(1, "unshare(CLONE_NEWNS) refused (%s): running without it",
		    strerror(errno));
		return -1;
	}
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) {
		say(1, "unshare(CLONE_NEWUSER|CLONE_NEWNS) refused (%s; user namespaces "
		    "disabled here?): running without it", strerror(errno));
		return -1;
	}
	/* The program keeps seeing its own uid and gid (not root): an execve
	 * by a non-zero uid drops the capabilities the namespace granted. */
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (write_proc("/proc/self/uid_map", map))
		return -2;
	if (write_proc("/proc/self/setgroups", "deny") && errno != ENOENT)
		return -2;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (write_proc("/proc/self/gid_map", map))
		return -2;
	return 0;
}

/* Bind every original class back over the tmpfs; `old` is an O_PATH
 * descriptor of the covered /sys/class. */
static int bind_classes(int old, const struct view_names *s)
{
	char src[PATH_MAX], dst[PATH_MAX];

	for (size_t i = 0; i < s->n; i++) {
		snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", old, s->v[i]);
		if (view_join(dst, sizeof(dst), CLASS_DIR, s->v[i]) ||
		    (mkdir(dst, 0755) && errno != EEXIST) ||
		    mount(src, dst, NULL, MS_BIND | MS_REC, NULL)) {
			say(1, "bind %s over the view: %s", s->v[i], strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* Each process draws softrnic0's GUID at random unless SOFTRNIC_GUID names
 * one: hand the program the GUID the view shows. */
static void pass_guid(void)
{
	char p[PATH_MAX], buf[64], hex[17], *o = hex;
	FILE *f;

	if (getenv("SOFTRNIC_GUID"))
		return;		/* the child used it already */
	if (snprintf(p, sizeof(p), "%s/infiniband/softrnic0/node_guid", CLASS_DIR) >=
	    (int)sizeof(p) || !(f = fopen(p, "re")))
		return;
	if (fgets(buf, sizeof(buf), f)) {
		for (const char *c = buf; *c && o < hex + 16; c++)
			if (*c != ':' && *c != '\n')
				*o++ = *c;
		*o = '\0';
		if (o == hex + 16)
			setenv("SOFTRNIC_GUID", hex, 1);
	}
	fclose(f);
}

/*
 * /dev/infiniband/uverbsN for each uverbs device of the view (dev_view.c),
 * and its infiniband_verbs/uverbsN/dev ("major:minor", as the kernel's)
 * naming that node. Called before the view is made read-only; a /dev view
 * that cannot be made leaves the sysfs view as it is.
 */
static void add_dev_nodes(void)
{
	static const char uverbs[] = CLASS_DIR "/infiniband_verbs";
	char p[PATH_MAX], txt[32];
	struct view_names all;
	struct stat st;
	char **devs;
	size_t n = 0;

	if (view_list(uverbs, NULL, 0, &all))
		return;
	devs = calloc(all.n ? all.n : 1, sizeof(*devs));
	if (!devs)
		goto free_all;
	for (size_t i = 0; i < all.n; i++)	/* directories; not abi_version */
		if (!view_join(p, sizeof(p), uverbs, all.v[i]) && !stat(p, &st) &&
		    S_ISDIR(st.st_mode))
			devs[n++] = all.v[i];
	if (!n || dev_view_build(devs, n))
		goto free_devs;
	for (size_t i = 0; i < n; i++) {
		char dir[PATH_MAX];

		if (view_join(p, sizeof(p), "/dev/infiniband", devs[i]) || stat(p, &st) ||
		    !S_ISCHR(st.st_mode) || view_join(dir, sizeof(dir), uverbs, devs[i]))
			continue;
		snprintf(txt, sizeof(txt), "%u:%u", major(st.st_rdev), minor(st.st_rdev));
		if (put_in(dir, "dev", txt))
			say(1, "writing %s/dev: %s", dir, strerror(errno));
	}
free_devs:
	free(devs);
free_all:
	view_names_free(&all);
}

static int build_view(const char *libdir)
{
	/* Every class but ours stays as it is. */
	static char *const ours[] = { "infiniband", "infiniband_verbs" };
	struct view_names classes;
	int old, ret = -1;

	if (view_cover("sysfs view", CLASS_DIR, ours, 2, VIEW_FSNAME, VIEW_MNT_FLAGS, &classes,
		       &old))
		return -1;
	if (generate(libdir, CLASS_DIR) || bind_classes(old, &classes))
		goto undo;
	add_dev_nodes();	/* before read-only: it writes uverbsN/dev */
	if (mount(NULL, CLASS_DIR, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | VIEW_MNT_FLAGS,
		  NULL))
		goto undo;
	pass_guid();
	ret = 0;
	goto close_old;
undo:
	say(1, "cannot build the view (%s): running without it", strerror(errno));
	umount2(CLASS_DIR, MNT_DETACH);	/* the real /sys/class again */
close_old:
	close(old);
	view_names_free(&classes);
	return ret;
}

int sysfs_view_setup(const char *libdir)
{
	const char *knob = getenv("SOFTRNIC_SYSFS");
	int ret;

	if (knob && !strcmp(knob, "0")) {
		say(2, "off (SOFTRNIC_SYSFS=0)");
		return -1;
	}
	ret = enter_namespace();
	if (ret)
		return ret;
	if (build_view(libdir))
		return -1;
	say(2, "%s/infiniband holds what %s/libibverbs.so.1 reports", CLASS_DIR, libdir);
	return 0;
}
