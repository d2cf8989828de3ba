/* Object spaces across processes: the table an exporter publishes in its
 * cmd_fd's memfd, and the proxy space an importer in another process
 * builds from it (DESIGN.md decision 22).
 *
 * A cmd_fd passed to another process (SCM_RIGHTS, or inherited over fork)
 * names a space whose key table and regions live in the exporter's memory.
 * The importer cannot use that table (its pointers and locks are the
 * exporter's), so the exporter keeps what an importer needs in the memfd
 * itself: one entry per PD handle and MR key, with the MR's PD handle,
 * iova, length, address, access and a generation. It always does, whether
 * or not anyone imports: that costs ibv_reg_mr a mutex and a few stores into
 * a shared mapping (no system call), and leaves no window in which an
 * importer could miss a registration made before it arrived.
 *
 * The importer's proxy is a space of its own, found by the memfd's inode
 * like any other and holding proxy PDs and MRs made from the entries. A
 * proxy MR's address is the exporter's: every copy goes through
 * process_vm_readv/writev to the exporter's pid (mref_read/mref_write),
 * after checking, with the entry's users count raised, that the entry
 * still holds the generation imported. The exporter's deregistration marks
 * the entry dead and then waits for that count to fall, as it waits for
 * its own placements (decision 6), so no copy lands in memory that has
 * been given back. The wait is bounded: an importer killed inside a copy
 * leaves its count behind, and must not hang the exporter.
 */
#include "core/core.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define XSP_MAGIC "softrnic-space-2"
#define XSP_SLOTS 65536u		/* power of two */
#define XSP_MAX_LIVE (XSP_SLOTS / 4 * 3)	/* keep probes short */
#define XSP_WAIT_NS 1000000000LL	/* bound on a withdraw's wait */

enum { XS_EMPTY = 0, XS_LIVE = 1, XS_DEAD = 2 };

struct xsp_hdr {
	char magic[16];
	int32_t pid;			/* the exporter */
	uint32_t nslots;		/* 0 until the exporter mapped it */
	_Atomic uint32_t closed;	/* the exporter's space is gone */
	uint32_t pad0;
	uint64_t nonce;			/* random, also readable ... */
	uint64_t self;			/* ... at this address in the exporter */
	uint8_t pad[16];
};

/* One published PD or MR. key, state and gen are read without a lock; the
 * rest is written only while the entry is not LIVE, and readers check
 * state and gen again after copying it (a sequence lock). */
struct xsp_ent {
	_Atomic uint32_t state;
	_Atomic uint32_t key;		/* PD handle or MR key */
	_Atomic uint64_t gen;
	uint32_t kind;			/* SR_KEY_PD or SR_KEY_MR */
	uint32_t pd;			/* an MR's PD handle */
	uint64_t iova, length, vaddr;
	int32_t access;
	uint32_t implicit;
	_Atomic int32_t users;		/* importers' copies running */
	uint32_t pad;
};

_Static_assert(sizeof(struct xsp_hdr) == 64, "memfd header layout");
_Static_assert(sizeof(struct xsp_ent) == 64, "memfd entry layout");

#define XSP_LEN (sizeof(struct xsp_hdr) + (size_t)XSP_SLOTS * sizeof(struct xsp_ent))

struct xsp_map {
	struct xsp_hdr *hdr;
	struct xsp_ent *ent;
	uint32_t live;			/* exporter, under space lock */
	uint64_t gen;			/* exporter: last generation given */
};

static uint32_t xsp_hash(uint32_t key)
{
	key ^= key >> 16;
	key *= 0x45d9f3bU;
	key ^= key >> 16;
	return key;
}

/* The LIVE slot of key, or -1. Withdrawn slots stay DEAD (tombstones) so
 * that a probe does not stop short of a later one. */
static int64_t xsp_find(const struct xsp_map *m, uint32_t key)
{
	uint32_t mask = XSP_SLOTS - 1;

	for (uint32_t i = xsp_hash(key) & mask, n = 0; n < XSP_SLOTS; i = (i + 1) & mask, n++) {
		struct xsp_ent *e = &m->ent[i];
		uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);

		if (st == XS_EMPTY)
			return -1;
		if (st == XS_LIVE && atomic_load_explicit(&e->key, memory_order_relaxed) == key)
			return i;
	}
	return -1;
}

/* ---- the exporter ------------------------------------------------------- */

/* Does this process write s's table? Not a proxy's, and not the parent's
 * in a forked child: the mapping is shared with the parent, whose
 * importers must not see the child's objects (or the child's close). */
static bool xsp_mine(const struct sr_space *s)
{
	return s->pub && !s->xpid && s->owner == (pid_t)sr_getpid();
}

int xspace_fd_create(void)
{
	struct xsp_hdr h = { .pid = getpid() };
	int fd;

	memcpy(h.magic, XSP_MAGIC, sizeof(h.magic));
	fd = memfd_create("softrnic-cmd", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* Sized once and sealed: an importer maps it whole, and nobody that
	 * holds the descriptor can shrink it under that mapping (SIGBUS). */
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    ftruncate(fd, (off_t)XSP_LEN) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

void xspace_map_owner(struct sr_space *s, int fd)
{
	struct xsp_map *m = calloc(1, sizeof(*m));
	void *p;

	if (!m)
		return;
	p = mmap(NULL, XSP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		/* Nothing published: importers elsewhere get EOPNOTSUPP. */
		free(m);
		return;
	}
	m->hdr = p;
	m->ent = (struct xsp_ent *)(m->hdr + 1);
	if (memcmp(m->hdr->magic, XSP_MAGIC, sizeof(m->hdr->magic))) {
		munmap(p, XSP_LEN);
		free(m);
		return;
	}
	m->hdr->nonce = ((uint64_t)sr_random32() << 32) | sr_random32();
	m->hdr->self = (uintptr_t)m->hdr;
	m->hdr->nslots = XSP_SLOTS;
	s->pub = m;
}

void xspace_pub(struct sr_space *s, uint32_t key, const struct sr_pd *pd,
		const struct sr_mr *mr)
{
	struct xsp_map *m = s->pub;
	uint32_t mask = XSP_SLOTS - 1, i;
	struct xsp_ent *e;

	if (!xsp_mine(s))
		return;
	pthread_mutex_lock(&s->lock);
	if (m->live >= XSP_MAX_LIVE) {
		pthread_mutex_unlock(&s->lock);
		sr_dbg("space: table full, key %#x not published (not importable "
		       "by another process)", key);
		return;
	}
	for (i = xsp_hash(key) & mask;; i = (i + 1) & mask)
		if (atomic_load_explicit(&m->ent[i].state, memory_order_relaxed) != XS_LIVE)
			break;
	e = &m->ent[i];
	/* Sequence-lock writer: the new generation is visible before any
	 * field changes, so a reader that copied a mix sees it changed. */
	atomic_store_explicit(&e->gen, ++m->gen, memory_order_relaxed);
	atomic_store_explicit(&e->key, key, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	e->kind = mr ? SR_KEY_MR : SR_KEY_PD;
	e->pd = pd_prot(pd)->ibpd.handle;
	if (mr) {
		e->iova = mr->iova;
		e->length = mr->length;
		e->vaddr = mr->vaddr;
		e->access = mr->access;
		e->implicit = mr->implicit;
	}
	atomic_store_explicit(&e->state, XS_LIVE, memory_order_release);
	m->live++;
	pthread_mutex_unlock(&s->lock);
}

static int64_t ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void xspace_unpub(struct sr_space *s, uint32_t key)
{
	struct xsp_map *m = s->pub;
	struct xsp_ent *e;
	int64_t i, until;

	if (!xsp_mine(s))
		return;
	pthread_mutex_lock(&s->lock);
	i = xsp_find(m, key);
	if (i < 0) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	e = &m->ent[i];
	/* seq_cst against the importer's users increment then state load:
	 * either it sees DEAD, or we see its count. */
	atomic_store(&e->state, XS_DEAD);
	m->live--;
	pthread_mutex_unlock(&s->lock);
	if (!atomic_load(&e->users))
		return;
	until = ns_now() + XSP_WAIT_NS;
	while (atomic_load(&e->users) > 0) {
		if (ns_now() > until) {
			sr_dbg("space: key %#x withdrawn with %d importer copies "
			       "unfinished (an importer died in one?)", key,
			       atomic_load(&e->users));
			break;
		}
		sched_yield();
	}
}

void xspace_unmap(struct sr_space *s, bool owner)
{
	struct xsp_map *m = s->pub;

	if (!m)
		return;
	if (owner && xsp_mine(s))
		atomic_store(&m->hdr->closed, 1);
	munmap(m->hdr, XSP_LEN);
	free(m);
	s->pub = NULL;
	if (s->pidfd >= 0)
		close(s->pidfd);
	s->pidfd = -1;
}

/* ---- the importer ------------------------------------------------------- */

int xspace_fd_header(int fd, pid_t *pid)
{
	struct xsp_hdr h;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, XSP_MAGIC, sizeof(h.magic)))
		return -EINVAL;
	*pid = h.pid;
	/* The kernel would keep the objects for the dup; the exporter's
	 * space is gone here (docs/COMPAT.md). */
	if (atomic_load(&h.closed))
		return -ENODEV;
	if (h.nslots != XSP_SLOTS)
		return -EOPNOTSUPP;	/* the exporter could not publish */
	return 0;
}

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Has the exporter exited? Its pid could then name another process. */
static bool xsp_gone(const struct sr_space *s)
{
	struct pollfd p = { .fd = s->pidfd, .events = POLLIN };

	return s->pidfd >= 0 && poll(&p, 1, 0) > 0;
}

int xspace_proxy(int fd, pid_t pid, struct sr_space *s)
{
	struct xsp_map *m;
	struct stat st;
	uint64_t nonce;
	int seals, ret;
	void *p;

	/* Map it only if nobody can shrink it under us (SIGBUS). */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) ||
	    (size_t)st.st_size < XSP_LEN)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	p = mmap(NULL, XSP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		goto err_free;
	}
	m->hdr = p;
	m->ent = (struct xsp_ent *)(m->hdr + 1);
	s->pidfd = pidfd_open_compat(pid);
	/* Is pid the process that wrote this memfd, and may we read it?
	 * Its copy of the header holds the nonce: another process at that
	 * pid (reused, another pid namespace) does not. */
	ret = mem_xcopy(pid, false, (uintptr_t)(m->hdr->self + offsetof(struct xsp_hdr, nonce)),
			&nonce, sizeof(nonce));
	if (!ret && nonce != m->hdr->nonce)
		ret = -ESRCH;
	if (!ret && xsp_gone(s))
		ret = -ESRCH;
	if (ret) {
		sr_dbg("space: cannot import pid %d's context: %s%s", (int)pid,
		       strerror(-ret), ret == -EPERM ? " (process_vm_readv needs "
		       "ptrace rights: same uid, and Yama's ptrace_scope 0 or "
		       "PR_SET_PTRACER in the exporter)" : "");
		ret = ret == -EPERM ? -EPERM : -ENODEV;
		goto err_unmap;
	}
	s->pub = m;
	s->xpid = pid;
	return 0;

err_unmap:
	if (s->pidfd >= 0)
		close(s->pidfd);
	s->pidfd = -1;
	munmap(p, XSP_LEN);
err_free:
	free(m);
	return ret;
}

/* Copy the LIVE entry of key (of kind) out of the table. Returns its
 * slot, or -1. */
static int64_t xsp_read(const struct xsp_map *m, uint32_t key, uint32_t kind,
			struct xsp_ent *out)
{
	for (int tries = 0; tries < 16; tries++) {
		int64_t i = xsp_find(m, key);
		struct xsp_ent *e;
		uint64_t gen;

		if (i < 0)
			return -1;
		e = &m->ent[i];
		gen = atomic_load_explicit(&e->gen, memory_order_acquire);
		out->kind = e->kind;
		out->pd = e->pd;
		out->iova = e->iova;
		out->length = e->length;
		out->vaddr = e->vaddr;
		out->access = e->access;
		out->implicit = e->implicit;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&e->state, memory_order_relaxed) != XS_LIVE ||
		    atomic_load_explicit(&e->gen, memory_order_relaxed) != gen ||
		    atomic_load_explicit(&e->key, memory_order_relaxed) != key)
			continue;	/* changed while we copied */
		atomic_store_explicit(&out->gen, gen, memory_order_relaxed);
		return out->kind == kind ? i : -1;
	}
	return -1;
}

static void xsp_bury_pd(struct sr_space *s, struct sr_pd *pd)
{
	pthread_mutex_lock(&s->lock);
	pd->buried = true;
	sr_list_add_tail(&s->grave_pd, &pd->grave);
	pthread_mutex_unlock(&s->lock);
}

int xspace_import_pd(struct sr_space *s, uint32_t handle)
{
	struct xsp_ent c;
	struct sr_pd *pd;
	int ret;

	if (!s->pub || xsp_read(s->pub, handle, SR_KEY_PD, &c) < 0)
		return -EINVAL;
	/* The proxy object: what holders point at and PD checks compare.
	 * No program holds it, so it lives with the space. */
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd->obj = pd;
	pd->space = s;
	pd->xproc = true;
	atomic_init(&pd->shared, true);
	sr_list_init(&pd->grave);
	pd->ibpd.handle = handle;
	ret = keytab_insert(&s->keys, handle, SR_KEY_PD, pd);
	if (ret) {
		free(pd);
		return ret == -EEXIST ? 0 : ret;	/* another thread's */
	}
	xsp_bury_pd(s, pd);
	return 0;
}

int xspace_import_mr(struct sr_space *s, uint32_t handle)
{
	struct sr_keyent *e;
	struct xsp_ent c;
	struct sr_pd *pd;
	struct sr_mr *mr;
	int64_t slot;
	uint8_t probe;
	int ret;

	slot = s->pub ? xsp_read(s->pub, handle, SR_KEY_MR, &c) : -1;
	if (slot < 0)
		return -EINVAL;
	ret = xspace_import_pd(s, c.pd);
	if (ret)
		return ret;
	pthread_rwlock_rdlock(&s->keys.lock);
	e = keytab_find_locked(&s->keys, c.pd);
	pd = e && e->kind == SR_KEY_PD ? e->obj : NULL;
	pthread_rwlock_unlock(&s->keys.lock);
	if (!pd || !pd->xproc)
		return -EINVAL;
	/* ibv_import_mr fails now, with a clear errno, rather than every
	 * access later. An unmapped page (EFAULT) is fine: regions are
	 * on-demand (decision 6); EPERM is not. */
	if (!c.implicit && c.length) {
		ret = mem_xcopy(s->xpid, false, (uintptr_t)c.vaddr, &probe, 1);
		if (ret == -EPERM || ret == -ESRCH) {
			sr_dbg("space: import of MR %#x from pid %d: process_vm_readv: %s",
			       handle, (int)s->xpid, strerror(-ret));
			return ret == -EPERM ? -EPERM : -ENODEV;
		}
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->obj = mr;
	mr->space = s;
	mr->pd = pd;
	sr_list_init(&mr->grave);
	atomic_init(&mr->shared, true);
	mr->iova = c.iova;
	mr->length = c.length;
	mr->vaddr = (uintptr_t)c.vaddr;
	mr->access = c.access;
	mr->implicit = c.implicit;
	mr->xproc = true;
	mr->xslot = (uint32_t)slot;
	mr->xgen = atomic_load_explicit(&c.gen, memory_order_relaxed);
	mr->ibmr.lkey = mr->ibmr.rkey = mr->ibmr.handle = handle;
	mr->ibmr.length = c.length;
	/* A proxy of an older record of the key (the exporter re-registered
	 * it) gives way; its holders keep failing. Any other entry stays. */
	ret = 0;
	pthread_rwlock_wrlock(&s->keys.lock);
	e = keytab_find_locked(&s->keys, handle);
	if (e && e->kind == SR_KEY_MR && e->obj && ((struct sr_mr *)e->obj)->xproc &&
	    ((struct sr_mr *)e->obj)->xgen != mr->xgen)
		e->obj = mr;
	else if (e)
		ret = -EEXIST;
	pthread_rwlock_unlock(&s->keys.lock);
	if (!e)
		ret = keytab_insert(&s->keys, handle, SR_KEY_MR, mr);
	if (ret) {
		free(mr);
		return ret == -EEXIST ? 0 : ret;	/* another thread's */
	}
	pthread_mutex_lock(&s->lock);
	mr->buried = true;
	sr_list_add_tail(&s->grave_mr, &mr->grave);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

bool xspace_mr_live(const struct sr_mr *mr)
{
	const struct xsp_map *m = mr->space->pub;
	struct xsp_ent *e = &m->ent[mr->xslot];

	return !atomic_load(&m->hdr->closed) &&
	       atomic_load(&e->state) == XS_LIVE &&
	       atomic_load(&e->gen) == mr->xgen;
}

int xspace_copy(const struct sr_mr *mr, bool write, uintptr_t addr, void *buf, size_t len)
{
	const struct sr_space *s = mr->space;
	struct xsp_ent *e = &s->pub->ent[mr->xslot];
	int ret;

	if (!len)
		return 0;
	/* Counted before checked: the exporter marks the entry dead, then
	 * waits for the count (xspace_unpub). */
	atomic_fetch_add(&e->users, 1);
	if (!xspace_mr_live(mr) || xsp_gone(s))
		ret = -EFAULT;
	else
		ret = mem_xcopy(s->xpid, write, addr, buf, len);
	atomic_fetch_sub(&e->users, 1);
	return ret ? -EFAULT : 0;
}
