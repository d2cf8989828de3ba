/* Large registered regions moved onto memfds a same-host peer can map
 * (DESIGN.md decision 23, "mapped records"; the interface: shm_map.h).
 *
 * A shared range is the whole pages inside one registration, moved once
 * from private anonymous memory onto a sealed memfd at the same address
 * with the same protection. The table of shared ranges is sorted by
 * address and never overlaps; shm_map_find reads it under a read lock.
 *
 * Locks: map.lock serialises everything that changes the table or the
 * address space for it (registration, deregistration, fork); map.tab
 * (writer-preferring, so a busy send path cannot starve a registration)
 * guards the array for shm_map_find. Lock order: lock, then tab.
 *
 * The remaps go through raw system calls: AddressSanitizer's mmap
 * interceptor would clear the shadow of the range (redzones of the heap
 * chunks inside it), and the contents, which is what the shadow
 * describes, do not change.
 */
#include "chan/shm_map.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MAP_MIN_DEFAULT (1ull << 20)
/* Each shared range holds a descriptor open, and the usual soft limit
 * is 1024 for the whole program: beyond this many, regions stay private
 * (their transfers use process_vm_readv). */
#define MAP_MAX_RANGES 128
#define MAP_PIECES 32		/* pieces of a range the program re-protected */

struct map_range {
	uintptr_t start, end;	/* page-aligned */
	int fd;
	uint64_t ino, dev;
	unsigned int refs;	/* registrations counted (map.lock) */
};

static struct {
	pthread_mutex_t lock;
	pthread_rwlock_t tab;
	struct map_range *r;	/* sorted by start (tab) */
	size_t n, cap;
	atomic_size_t live;	/* n, read without a lock: 0 skips the lock */
	bool atfork;		/* the fork handlers are in place */
} map = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.tab = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP,
};

static pthread_once_t map_once = PTHREAD_ONCE_INIT;

/* ---- knobs ------------------------------------------------------------ */

/* SOFTRNIC_SHM_MAP=0, or the same-host channel off (SOFTRNIC_SHM=0, so no
 * peer would map anything), leaves every region private. Read at each
 * registration, like SOFTRNIC_SHM at each connection. */
static bool map_enabled(void)
{
	const char *v = getenv("SOFTRNIC_SHM_MAP");
	const char *s = getenv("SOFTRNIC_SHM");

	return (!v || *v != '0') && (!s || *s != '0');
}

/* SOFTRNIC_SHM_MAP_MIN: bytes, with an optional K, M or G suffix, as
 * SOFTRNIC_DM_SIZE. */
static uint64_t map_min(void)
{
	static atomic_bool warned;
	uint64_t n = MAP_MIN_DEFAULT;

	if (sr_env_size("SOFTRNIC_SHM_MAP_MIN", UINT64_MAX, &n) < 0) {
		if (!atomic_exchange(&warned, true))
			sr_warn("SOFTRNIC_SHM_MAP_MIN=%s ignored (bytes, K/M/G suffix)",
				getenv("SOFTRNIC_SHM_MAP_MIN"));
		return MAP_MIN_DEFAULT;
	}
	return n;
}

/* ---- /proc/self/maps ---------------------------------------------------- */

struct maps_ent {
	uintptr_t lo, hi;
	char perms[5];
	uint64_t off, ino;
	unsigned int major, minor;
	const char *path;	/* "" for anonymous memory */
};

/* A line reader without malloc or stdio (it also runs in a fork child).
 * A line is at most PATH_MAX plus the fields before it. */
struct maps_rd {
	int fd;
	size_t len, pos;
	char buf[8192];
};

static char *maps_line(struct maps_rd *r)
{
	for (;;) {
		char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
		ssize_t n;

		if (nl) {
			char *l = r->buf + r->pos;

			*nl = '\0';
			r->pos = (size_t)(nl + 1 - r->buf);
			return l;
		}
		if (r->pos) {
			memmove(r->buf, r->buf + r->pos, r->len - r->pos);
			r->len -= r->pos;
			r->pos = 0;
		}
		if (r->len == sizeof(r->buf))
			return NULL;		/* no such line: give up */
		do
			n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
		while (n < 0 && errno == EINTR);
		if (n <= 0)
			return NULL;
		r->len += (size_t)n;
	}
}

static bool maps_parse(char *l, struct maps_ent *e)
{
	char *p;

	e->lo = (uintptr_t)strtoull(l, &p, 16);
	if (*p != '-')
		return false;
	e->hi = (uintptr_t)strtoull(p + 1, &p, 16);
	if (*p != ' ' || strlen(p) < 6 || p[5] != ' ')
		return false;
	memcpy(e->perms, p + 1, 4);
	e->perms[4] = '\0';
	e->off = strtoull(p + 6, &p, 16);
	e->major = (unsigned int)strtoul(p, &p, 16);
	if (*p != ':')
		return false;
	e->minor = (unsigned int)strtoul(p + 1, &p, 16);
	e->ino = strtoull(p, &p, 10);
	while (*p == ' ')
		p++;
	e->path = p;
	return true;
}

typedef bool (*maps_ok_fn)(const struct maps_ent *e, void *arg);

/* Do mappings cover every byte of [start, end), each one passing ok()?
 * 1 yes, 0 no, negative errno when the table cannot be read. (malloc is
 * safe in a fork child's handler too: glibc resets its locks first.) */
static int maps_walk(uintptr_t start, uintptr_t end, maps_ok_fn ok, void *arg)
{
	struct maps_rd *r = malloc(sizeof(*r));
	uintptr_t at = start;
	int ret;
	char *l;

	if (!r)
		return -ENOMEM;
	r->len = r->pos = 0;
	r->fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		ret = -errno;
		free(r);
		return ret;
	}
	while (at < end && (l = maps_line(r))) {
		struct maps_ent e;

		if (!maps_parse(l, &e))
			break;
		if (e.hi <= at)
			continue;
		if (e.lo > at || !ok(&e, arg))
			break;			/* a hole, or a mapping we refuse */
		at = e.hi;
	}
	ret = at >= end;
	close(r->fd);
	free(r);
	return ret;
}

/* Private, anonymous, read-write, not a stack, not hugetlb (whose
 * mappings name a file: "/anon_hugepage"). */
static bool maps_private_anon(const struct maps_ent *e, void *arg)
{
	return !strcmp(e->perms, "rw-p") && e->ino == 0 && e->major == 0 &&
	       e->minor == 0 && (!*e->path || !strcmp(e->path, "[heap]"));
}

/* ---- sharing a range ---------------------------------------------------- */

static long page_size(void)
{
	return sysconf(_SC_PAGESIZE);
}

/* The whole pages inside [addr, addr + len); false if there are none. */
static bool inner_pages(const void *addr, size_t len, uintptr_t *s, uintptr_t *e)
{
	uintptr_t pg = (uintptr_t)page_size(), a = (uintptr_t)addr;

	if (a + len < a || a > UINTPTR_MAX - pg)
		return false;
	*s = (a + pg - 1) & ~(pg - 1);
	*e = (a + len) & ~(pg - 1);
	return *s < *e;
}

static void *raw_mmap(uintptr_t addr, size_t len, int prot, int flags, int fd)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, 0L);
}

static void *raw_mremap(void *old, size_t len, uintptr_t to)
{
	return (void *)syscall(SYS_mremap, old, len, len,
			       MREMAP_MAYMOVE | MREMAP_FIXED, to);
}

#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)

/* Copy [start, start + size) of the program's memory to dst (a fresh
 * mapping of the memfd), page runs at a time: pages that were never
 * touched (neither present nor swapped: they read as zeros) stay holes
 * of the memfd, so a large region the program barely uses costs no
 * memory. Without /proc/self/pagemap, all of it. The program's side is
 * a safe copy (mem_read): it may unmap the region under us. */
static int copy_in(char *dst, uintptr_t start, size_t size)
{
	size_t pg = (size_t)page_size(), npg = size / pg, run = SIZE_MAX;
	uint64_t ent[512];
	int pm, ret = 0;

	pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (pm < 0)
		return mem_read(dst, start, size);
	for (size_t base = 0; base < npg && !ret; base += ARRAY_SIZE(ent)) {
		size_t n = sr_min(npg - base, ARRAY_SIZE(ent));
		off_t at = (off_t)((start / pg + base) * sizeof(ent[0]));

		if (pread(pm, ent, n * sizeof(ent[0]), at) != (ssize_t)(n * sizeof(ent[0]))) {
			/* unreadable: copy the rest whole */
			if (run == SIZE_MAX)
				run = base;
			break;
		}
		for (size_t k = 0; k < n; k++) {
			bool used = ent[k] & (PM_PRESENT | PM_SWAPPED);

			if (used && run == SIZE_MAX) {
				run = base + k;
			} else if (!used && run != SIZE_MAX) {
				ret = mem_read(dst + run * pg, start + run * pg,
					       (base + k - run) * pg);
				run = SIZE_MAX;
				if (ret)
					break;
			}
		}
	}
	if (!ret && run != SIZE_MAX)
		ret = mem_read(dst + run * pg, start + run * pg, (npg - run) * pg);
	close(pm);
	return ret;
}

/* The copy back: fill dst (fresh private memory) from the memfd's data,
 * skipping its holes (SEEK_DATA), so what was never written costs
 * nothing here either. pread, not a mapping: a shmem read fault would
 * allocate the holes, and the program may have made pages unreadable. */
static int copy_out(int fd, char *dst, size_t size)
{
	off_t at = 0, end = (off_t)size;

	while (at < end) {
		off_t data = lseek(fd, at, SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO)
			return 0;		/* holes to the end */
		if (data < 0) {
			data = at;		/* no SEEK_DATA: copy all */
			hole = end;
		} else {
			hole = lseek(fd, data, SEEK_HOLE);
			if (hole < 0 || hole > end)
				hole = end;
		}
		while (data < hole) {
			ssize_t n = pread(fd, dst + data, (size_t)(hole - data), data);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			data += n;
		}
		at = hole;
	}
	return 0;
}

/* After a failed MAP_FIXED (which may have unmapped what was there):
 * put a private copy of tmp back unless the original is still there. */
static void share_undo(uintptr_t start, size_t size, const void *tmp)
{
	void *p;

	if (maps_walk(start, start + size, maps_private_anon, NULL) == 1)
		return;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		memcpy(p, tmp, size);
		if (raw_mremap(p, size, start) != MAP_FAILED)
			return;
		munmap(p, size);
	}
	sr_log(SR_LOG_ERR, "shm_map: %#lx+%zu lost its memory (%s)",
	       (unsigned long)start, size, strerror(errno));
}

/* Move [start, end) onto a new sealed memfd, at the same address. */
static int range_share(uintptr_t start, uintptr_t end, struct map_range *out)
{
	size_t size = end - start;
	const char *why;
	struct stat st;
	void *tmp;
	int fd, err;

	err = maps_walk(start, end, maps_private_anon, NULL);
	if (err != 1) {
		why = "not all private anonymous read-write memory";
		err = err ? err : -EPERM;
		goto fail;
	}
	fd = memfd_create("softrnic-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		why = "memfd_create";
		err = -errno;
		goto fail;
	}
	/* Sealed against shrinking: a peer's mapping can never lose its
	 * pages under it (SIGBUS); against growing, as the size is all a
	 * peer checks. Not yet against further seals: before it goes to a
	 * peer that has no ptrace access to us, it is sealed against writes
	 * through new mappings (shm_side_send), and then against seals. */
	if (ftruncate(fd, (off_t)size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, &st)) {
		why = "sizing and sealing the memfd";
		err = -errno;
		goto err_close_fd;
	}
	tmp = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED) {
		why = "mmap";
		err = -errno;
		goto err_close_fd;
	}
	err = copy_in(tmp, start, size);
	if (err) {
		why = "copy";
		goto err_unmap_tmp;
	}
	if (raw_mmap(start, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		     fd) == MAP_FAILED) {
		why = "mmap over the region";
		err = -errno;
		share_undo(start, size, tmp);
		goto err_unmap_tmp;
	}
	munmap(tmp, size);
	out->start = start;
	out->end = end;
	out->fd = fd;
	out->ino = st.st_ino;
	out->dev = st.st_dev;
	out->refs = 1;
	sr_dbg("shm_map: %#lx+%zu shared (memfd %d)", (unsigned long)start, size, fd);
	return 0;

err_unmap_tmp:
	munmap(tmp, size);
err_close_fd:
	close(fd);
fail:
	sr_dbg("shm_map: %#lx+%zu stays private: %s: %s", (unsigned long)start,
	       size, why, strerror(-err));
	return err;
}

/* ---- moving a range back -------------------------------------------------- */

struct own_arg {
	const struct map_range *r;
	struct { uintptr_t lo, hi; int prot; } pc[MAP_PIECES];
	int n;
};

/* A mapping of our memfd, at its offset from the range's start (the
 * program may have re-protected parts of it: those are noted). */
static bool maps_ours(const struct maps_ent *e, void *arg)
{
	struct own_arg *a = arg;
	int prot = (e->perms[0] == 'r' ? PROT_READ : 0) |
		   (e->perms[1] == 'w' ? PROT_WRITE : 0) |
		   (e->perms[2] == 'x' ? PROT_EXEC : 0);

	if (e->ino != a->r->ino || e->major != major(a->r->dev) ||
	    e->minor != minor(a->r->dev) || e->perms[3] != 's' ||
	    e->lo < a->r->start || e->off != e->lo - a->r->start)
		return false;
	if (prot == (PROT_READ | PROT_WRITE))
		return true;
	if (a->n == MAP_PIECES)
		return false;		/* too many: leave it shared */
	a->pc[a->n].lo = e->lo;
	a->pc[a->n].hi = e->hi;
	a->pc[a->n].prot = prot;
	a->n++;
	return true;
}

/* Private anonymous memory again, with the memfd's contents and each
 * piece's protection; then the descriptor goes (if the program has not
 * closed it and reused its number). A range the program unmapped (and
 * perhaps mapped something else at) is only forgotten. */
static void range_release(const struct map_range *r)
{
	size_t size = r->end - r->start;
	struct own_arg *a = malloc(sizeof(*a));
	const char *why = NULL;
	struct stat st;
	void *p = MAP_FAILED;
	int w;

	if (!a) {
		why = "out of memory";
		goto close_fd;
	}
	a->r = r;
	a->n = 0;
	w = maps_walk(r->start, r->end, maps_ours, a);
	if (w != 1) {
		why = w == 0 ? "no longer (all) mapped here: forgotten" :
			       "cannot read /proc/self/maps";
		goto close_fd;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || copy_out(r->fd, p, size) ||
	    raw_mremap(p, size, r->start) == MAP_FAILED) {
		why = "cannot copy back: left shared";
		goto close_fd;
	}
	p = MAP_FAILED;				/* moved into place */
	for (int i = 0; i < a->n; i++)
		mprotect((void *)a->pc[i].lo, a->pc[i].hi - a->pc[i].lo, a->pc[i].prot);
close_fd:
	if (p != MAP_FAILED)
		munmap(p, size);
	free(a);
	if (!fstat(r->fd, &st) && st.st_ino == r->ino && st.st_dev == r->dev)
		close(r->fd);
	if (why)
		sr_dbg("shm_map: %#lx+%zu %s", (unsigned long)r->start, size, why);
	else
		sr_dbg("shm_map: %#lx+%zu private again", (unsigned long)r->start, size);
}

/* ---- the table -------------------------------------------------------------- */

/* Index of the last range starting at or before p, or -1 (tab or lock). */
static ptrdiff_t range_at(uintptr_t p)
{
	size_t lo = 0, hi = map.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (map.r[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (ptrdiff_t)lo - 1;
}

/* The range holding all of [s, e), or -1. */
static ptrdiff_t range_holding(uintptr_t s, uintptr_t e)
{
	ptrdiff_t i = range_at(s);

	return i >= 0 && e <= map.r[i].end ? i : -1;
}

static bool range_overlaps(uintptr_t s, uintptr_t e)
{
	ptrdiff_t i = range_at(e - 1);

	return i >= 0 && map.r[i].end > s;
}

static bool table_reserve(void)
{
	struct map_range *r;
	size_t cap;

	if (map.n < map.cap)
		return true;
	cap = map.cap ? map.cap * 2 : 16;
	pthread_rwlock_wrlock(&map.tab);
	r = realloc(map.r, cap * sizeof(*r));
	if (r) {
		map.r = r;
		map.cap = cap;
	}
	pthread_rwlock_unlock(&map.tab);
	return r != NULL;
}

static void table_insert(const struct map_range *nr)
{
	size_t i = (size_t)(range_at(nr->start) + 1);

	pthread_rwlock_wrlock(&map.tab);
	memmove(&map.r[i + 1], &map.r[i], (map.n - i) * sizeof(map.r[0]));
	map.r[i] = *nr;
	map.n++;
	atomic_store(&map.live, map.n);
	pthread_rwlock_unlock(&map.tab);
}

static void table_remove(size_t i)
{
	pthread_rwlock_wrlock(&map.tab);
	memmove(&map.r[i], &map.r[i + 1], (map.n - i - 1) * sizeof(map.r[0]));
	map.n--;
	atomic_store(&map.live, map.n);
	pthread_rwlock_unlock(&map.tab);
}

/* ---- fork ------------------------------------------------------------------- */

/* A fork waits for a registration in progress and for readers, so the
 * child sees a whole table and free locks. The parent then waits for the
 * child to have taken its copies (the pipe's end in the child closes
 * once it has): the forking thread's stores after fork returns must not
 * reach the child's image, as they would not with private memory. */
static int map_fork_wait = -1, map_fork_done = -1;

static void map_prepare(void)
{
	int p[2];

	pthread_mutex_lock(&map.lock);
	pthread_rwlock_wrlock(&map.tab);
	if (map.n && !pipe2(p, O_CLOEXEC)) {
		map_fork_wait = p[0];
		map_fork_done = p[1];
	}
}

static void map_parent(void)
{
	if (map_fork_wait >= 0) {
		char c;

		close(map_fork_done);
		while (read(map_fork_wait, &c, 1) < 0 && errno == EINTR)
			;
		close(map_fork_wait);
		map_fork_wait = map_fork_done = -1;
	}
	pthread_rwlock_unlock(&map.tab);
	pthread_mutex_unlock(&map.lock);
}

/* The child (one thread, before fork returns in it) gets private copies
 * of every shared range, as it would of private memory, and closes its
 * copies of the descriptors. */
static void map_child(void)
{
	if (map_fork_wait >= 0)
		close(map_fork_wait);
	for (size_t i = 0; i < map.n; i++)
		range_release(&map.r[i]);
	map.n = 0;
	atomic_store(&map.live, 0);
	if (map_fork_done >= 0)
		close(map_fork_done);	/* the parent goes on */
	map_fork_wait = map_fork_done = -1;
	/* Fresh locks, not unlocks: glibc's rwlock knows its writer by
	 * thread id, and the child's thread has another. */
	map.tab = (pthread_rwlock_t)PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
	map.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

static void map_init(void)
{
	map.atfork = pthread_atfork(map_prepare, map_parent, map_child) == 0;
}

/* ---- the interface -------------------------------------------------------- */

bool shm_map_reg(void *addr, size_t len)
{
	struct map_range nr;
	uintptr_t s, e;
	ptrdiff_t i;
	bool counted = false;

	if (!map_enabled() || len < map_min() || !inner_pages(addr, len, &s, &e))
		return false;
	pthread_once(&map_once, map_init);
	if (!map.atfork)
		return false;		/* a fork child would share our pages */
	pthread_mutex_lock(&map.lock);
	i = range_holding(s, e);
	if (i >= 0) {
		map.r[i].refs++;
		counted = true;
	} else if (range_overlaps(s, e)) {
		sr_dbg("shm_map: %#lx+%zu stays private: overlaps a shared range",
		       (unsigned long)s, (size_t)(e - s));
	} else if (map.n >= MAP_MAX_RANGES) {
		sr_dbg("shm_map: %#lx+%zu stays private: %d ranges shared already",
		       (unsigned long)s, (size_t)(e - s), MAP_MAX_RANGES);
	} else if (table_reserve() && !range_share(s, e, &nr)) {
		table_insert(&nr);
		counted = true;
	}
	pthread_mutex_unlock(&map.lock);
	return counted;
}

void shm_map_unreg(void *addr, size_t len)
{
	struct map_range r;
	uintptr_t s, e;
	ptrdiff_t i;

	if (!inner_pages(addr, len, &s, &e))
		return;
	pthread_mutex_lock(&map.lock);
	i = range_holding(s, e);
	if (i >= 0 && --map.r[i].refs == 0) {
		r = map.r[i];
		/* Out of the table first: from here, sends pull with
		 * process_vm_readv, which reads the same bytes. */
		table_remove((size_t)i);
		range_release(&r);
	}
	pthread_mutex_unlock(&map.lock);
}

bool shm_map_find(const void *p, size_t len, struct shm_map_loc *loc)
{
	uintptr_t a = (uintptr_t)p;
	bool hit = false;
	ptrdiff_t i;

	if (!atomic_load_explicit(&map.live, memory_order_relaxed))
		return false;
	pthread_rwlock_rdlock(&map.tab);
	i = range_at(a);
	if (i >= 0 && a < map.r[i].end && len <= map.r[i].end - a) {
		loc->fd = map.r[i].fd;
		loc->ino = map.r[i].ino;
		loc->off = a - map.r[i].start;
		loc->size = map.r[i].end - map.r[i].start;
		hit = true;
	}
	pthread_rwlock_unlock(&map.tab);
	return hit;
}
