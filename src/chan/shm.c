/* The same-host channel: setup of the shared rings over a softrnic
 * stream, and the stream's byte I/O once it moved there. See shm.h for
 * the switch and DESIGN.md decision 23 for the layout.
 *
 * Trust: the peer is another softrnic process of our user, one we may
 * usually ptrace (pidfd_getfd and process_vm_readv require it; else the
 * descriptor server below hands the rings over), but it may be buggy or
 * hostile and its memory corrupt. Nothing it writes into the shared pages
 * is used unchecked (shm_ring.c), remote records only ever make us read
 * the peer's memory (mapped records: a memfd of the peer's that we map
 * read-only after checking it), and bytes land in ours only where the
 * core's checks (key, PD, bounds, access) put them, exactly as bytes
 * from a socket do.
 */
#include "chan/shm.h"
#include "chan/shm_map.h"
#include "chan/shm_ring.h"
#include "chan/tcp_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC	0x01021994	/* <linux/magic.h>: memfds live on it */
#endif

#define SHM_MAGIC	0x53524d53U	/* "SRMS" */
#define SHM_VERSION	3	/* 2: mapped records (kind 3); 3: the
				 * descriptor server (fdsrv). A peer of
				 * another version refuses the offer */
#define SHM_HDR_SIZE	4096ULL
#define SHM_RING_SIZE	(256ULL << 10)	/* per direction: large payloads are
					 * pulled, so the rings hold headers
					 * and small messages */
/* Payload pieces from this size on are pulled by the peer, not copied
 * into the ring: one process_vm_readv costs about what a 16 KiB memcpy
 * does, and saves a copy. */
#define SHM_PULL_MIN	(16U * 1024U)
/* Remote records of ours whose outcome we track (more in flight: the
 * extra ones go untracked, and a fault there is not reported). */
#define SHM_PEND	1024
/* The peer's memfds we keep mapped (mapped records), and how long one we
 * could not map is not tried again. */
#define SHM_MAPS	16
#define SHM_MAP_RETRY_NS	(100ULL * 1000 * 1000)

struct chan_stats chan_stats;

/* The first page of the memfd. ctl[0] is the offerer-to-accepter ring,
 * ctl[1] the other; ring i's data is at SHM_HDR_SIZE + i * ring_size. */
struct shm_hdr {
	uint32_t magic, version;
	uint64_t ring_size;
	uint8_t token[16];
	uint8_t pad[32];
	struct shm_ring_ctl ctl[2];
};
_Static_assert(sizeof(struct shm_hdr) <= SHM_HDR_SIZE, "shm header fits its page");

/* OFFER, ACCEPT and SWITCH bodies (host byte order: one host). */
struct shm_offer {
	uint32_t magic, version;
	uint8_t boot_id[16];		/* proves: the same host (boot) */
	uint8_t token[16];		/* in the memfd and at token_addr */
	uint64_t token_addr;		/* in the offerer's memory */
	int32_t pid;
	int32_t memfd, efd_offerer, efd_accepter;	/* fd numbers there */
	uint64_t ring_size;
	uint64_t fdsrv;			/* its descriptor server's name (0: none) */
};
/* What the descriptor server is asked, and answers along with the
 * descriptors (memfd, offerer's eventfd, accepter's eventfd). */
struct shm_fdreq {
	uint32_t magic, version;
	uint8_t token[16];
};
struct shm_accept {
	uint32_t magic, version;
	int32_t pid;
	uint32_t pull_ok;		/* the accepter can read the offerer */
	uint64_t token_addr;		/* the token, in the accepter's memory */
};
struct shm_switch {
	uint32_t magic, version;
	uint32_t pull_ok;		/* the offerer can read the accepter */
	uint32_t pad;
};

/* A memfd of the peer's, mapped read-only (base), or, with base NULL, one
 * we failed to map (not tried again before retry). Key: (fd, ino). */
struct peer_map {
	uint32_t fd;
	uint64_t ino;
	const uint8_t *base;
	uint64_t size;
	uint64_t used;			/* LRU clock; 0: the slot is free */
	uint64_t retry;			/* CLOCK_MONOTONIC ns */
};

struct shm_link {
	void *map;
	size_t map_len;
	int memfd;			/* the offerer's (-1 at the accepter) */
	int efd_own;			/* ours: watched by our progress thread */
	int efd_peer;			/* the peer's: written to wake it */
	int pidfd;			/* the peer, once known */
	pid_t peer_pid;
	bool offerer, watched;
	uint8_t token[16];		/* its address goes to the peer */
	struct shm_ring tx, rx;
	struct shm_ring_io io;
	/* Our remote records of SENDs and WRITEs not yet released, oldest
	 * first: one the peer read as zeros fails its WQE (tc->lock). */
	struct { uint64_t pos; uint32_t msn; } pend[SHM_PEND];
	uint32_t pend_head, pend_tail;
	/* ever wrote a remote record: set before the record is published,
	 * so whoever reads an answer to it sees this set */
	_Atomic bool pulls_sent;
	/* why the rings are unusable (set by either side's lock holder,
	 * read by the other) */
	const char *_Atomic broken;
	/* The consumer's mappings of the peer's memfds (rx_lock). */
	struct peer_map maps[SHM_MAPS];
	uint64_t map_clock;
	int map_last;			/* the slot hit last */
	/* Offerer: listed in offers_t->offers until answered; who took the
	 * descriptors from the server (the first asker only), and whether
	 * anyone else asked. Accepter: it took them from the server. */
	struct sr_tcp_ctx *offers_t;
	struct sr_list offer_link;
	_Atomic pid_t served_pid;
	_Atomic bool served_extra;
	bool via_fdsrv;
};

static bool shm_enabled(void)
{
	const char *v = getenv("SOFTRNIC_SHM");

	return !v || !*v || *v != '0';
}

/* ---- memory access for the rings ------------------------------------- */

static int io_put(void *dst, const void *src, size_t n)
{
	return mem_write((uintptr_t)dst, src, n);
}

static int io_get(void *dst, const void *src, size_t n)
{
	return mem_read(dst, (uintptr_t)src, n);
}

/* Is the peer still the process we verified? A pid is only reused once
 * its process is gone, so a pull that finished before this says "alive"
 * read the right process. */
static bool peer_alive(const struct shm_link *l)
{
	struct pollfd p = { .fd = l->pidfd, .events = POLLIN };
	int saved = errno, r;

	/* Only a readable pidfd says "exited". A program's signals (qperf's
	 * SIGALRM and SIGIO reach the thread that busy-polls, and pulls)
	 * interrupt poll: that is no verdict, ask again. */
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	errno = saved;
	return r <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

static ssize_t io_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	struct shm_link *l = arg;
	struct iovec r = { (void *)(uintptr_t)raddr, len };
	ssize_t got = process_vm_readv(l->peer_pid, dst, (unsigned long)n, &r, 1, 0);

	if (got > 0 && !peer_alive(l)) {
		errno = ESRCH;
		return -1;
	}
	if (got > 0)
		atomic_fetch_add_explicit(&chan_stats.shm_pulled, (uint64_t)got, memory_order_relaxed);
	return got;
}

/* Producer: is a piece the peer pulls in one of our shared ranges
 * (shm_map.h)? Then it goes as mapped records: the peer may copy it from
 * its own mapping of that memfd. */
static bool io_locate(void *arg, const void *p, size_t len, struct shm_ring_loc *loc)
{
	struct shm_map_loc m;

	(void)arg;
	if (!shm_map_find(p, len, &m) || m.fd < 0 || m.off > m.size || len > m.size - m.off)
		return false;
	*loc = (struct shm_ring_loc){ .fd = (uint32_t)m.fd, .ino = m.ino, .off = m.off };
	return true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Take the peer's fd and map it read-only, if it is what a mapped record
 * may name: a memfd (tmpfs: no hugetlbfs page can be missing when we
 * read) with the record's inode, sealed against shrinking, so that
 * nothing the peer does can take a page from under our mapping: reading
 * it never faults (SIGBUS). NULL if not. */
static const uint8_t *map_peer_fd(struct shm_link *l, uint32_t pfd, uint64_t ino, uint64_t *size)
{
	struct stat st;
	struct statfs sf;
	void *p;
	int fd, seals;

	if (l->pidfd < 0 || pfd > INT32_MAX)
		return NULL;
	fd = (int)syscall(SYS_pidfd_getfd, l->pidfd, (int)pfd, 0);	/* (close-on-exec) */
	if (fd < 0)
		return NULL;
	seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_ino != ino ||
	    st.st_size <= 0 || fstatfs(fd, &sf) || sf.f_type != TMPFS_MAGIC ||
	    seals < 0 || !(seals & F_SEAL_SHRINK)) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	*size = (uint64_t)st.st_size;
	return p;
}

/* Consumer: our pointer to len bytes at off of the peer's memfd (fd, ino),
 * from a small LRU cache of mappings; NULL: pull the record's address
 * instead (a memfd we cannot or may not map is not tried again for a
 * while). rx_lock held.
 *
 * No peer_alive() after a copy from here, unlike io_pull: that check is
 * for a pid, which names whatever process holds it now, and a pull by
 * pid could read a stranger that took a dead peer's pid. The mapping
 * names no pid: it is the memfd itself, taken through the pidfd (which
 * names the verified process, dead or alive: pidfd_getfd fails once it
 * is gone) and checked by inode, and it stays that memfd for as long as
 * we keep it mapped. A copy from it after the peer died reads bytes the
 * peer left there, as bytes still in a socket buffer are read after the
 * sender died; the stream ends on the socket's close anyway. */
static const void *io_map(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len)
{
	struct shm_link *l = arg;
	struct peer_map *m = &l->maps[l->map_last], *victim = NULL;
	uint64_t t;

	if (!(m->used && m->fd == fd && m->ino == ino)) {
		m = NULL;
		for (int i = 0; i < SHM_MAPS; i++) {
			struct peer_map *e = &l->maps[i];

			if (e->used && e->fd == fd && e->ino == ino) {
				m = e;
				break;
			}
			/* the least recently used, a free slot (0) first */
			if (!victim || e->used < victim->used)
				victim = e;
		}
	}
	if (m && !m->base) {
		/* a failure remembered: try again only once it is old */
		t = now_ns();
		if (t < m->retry)
			return NULL;
		victim = m;
		m = NULL;
	}
	if (!m) {
		if (victim->base)
			munmap((void *)victim->base, victim->size);
		memset(victim, 0, sizeof(*victim));
		victim->fd = fd;
		victim->ino = ino;
		victim->base = map_peer_fd(l, fd, ino, &victim->size);
		if (!victim->base) {
			victim->size = 0;
			victim->retry = now_ns() + SHM_MAP_RETRY_NS;
		}
		m = victim;
	}
	m->used = ++l->map_clock;
	l->map_last = (int)(m - l->maps);
	if (!m->base || off > m->size || len > m->size - off)
		return NULL;
	return m->base + off;
}

/* ---- the link -------------------------------------------------------------- */

static void offer_unlist(struct shm_link *l)
{
	struct sr_tcp_ctx *t = l->offers_t;

	if (!t)
		return;
	pthread_mutex_lock(&t->offers_lock);
	sr_list_del(&l->offer_link);
	pthread_mutex_unlock(&t->offers_lock);
	l->offers_t = NULL;
}

static void link_free(struct shm_link *l)
{
	if (!l)
		return;
	offer_unlist(l);	/* before its descriptors go */
	for (int i = 0; i < SHM_MAPS; i++)
		if (l->maps[i].base)
			munmap((void *)l->maps[i].base, l->maps[i].size);
	if (l->map)
		munmap(l->map, l->map_len);
	if (l->memfd >= 0)
		close(l->memfd);
	if (l->efd_own >= 0)
		close(l->efd_own);
	if (l->efd_peer >= 0)
		close(l->efd_peer);
	if (l->pidfd >= 0)
		close(l->pidfd);
	free(l);
}

static struct shm_link *link_alloc(void)
{
	struct shm_link *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->memfd = l->efd_own = l->efd_peer = l->pidfd = -1;
	l->io = (struct shm_ring_io){ .put = io_put, .get = io_get, .pull = io_pull, .arg = l,
				      .locate = io_locate, .map = io_map };
	return l;
}

/* Ring i of a mapped link. */
static void link_rings(struct shm_link *l, int tx, int rx, uint64_t ring_size)
{
	struct shm_hdr *h = l->map;
	uint8_t *base = (uint8_t *)l->map + SHM_HDR_SIZE;

	shm_ring_init(&l->tx, &h->ctl[tx], base + (uint64_t)tx * ring_size, ring_size);
	shm_ring_init(&l->rx, &h->ctl[rx], base + (uint64_t)rx * ring_size, ring_size);
}

static int read_boot_id(uint8_t id[16])
{
	char s[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;
	int k = 0;

	if (fd < 0)
		return -errno;
	n = read(fd, s, sizeof(s) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	s[n] = 0;
	memset(id, 0, 16);
	for (int i = 0; s[i] && k < 32; i++) {
		int v = s[i] >= '0' && s[i] <= '9' ? s[i] - '0'
		      : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;

		if (v < 0)
			continue;
		id[k / 2] |= (uint8_t)(v << (k % 2 ? 0 : 4));
		k++;
	}
	return k == 32 ? 0 : -EIO;
}

/* The offerer's side: a memfd with the header and two rings, and two
 * eventfds. */
static struct shm_link *link_create(void)
{
	struct shm_link *l = link_alloc();
	struct shm_hdr *h;

	if (!l)
		return NULL;
	l->offerer = true;
	l->map_len = SHM_HDR_SIZE + 2 * SHM_RING_SIZE;
	l->memfd = memfd_create("softrnic-shm", MFD_CLOEXEC);
	if (l->memfd < 0 || ftruncate(l->memfd, (off_t)l->map_len))
		goto fail;
	l->map = mmap(NULL, l->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, l->memfd, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		goto fail;
	}
	l->efd_own = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->efd_peer = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->efd_own < 0 || l->efd_peer < 0)
		goto fail;
	if (getrandom(l->token, sizeof(l->token), 0) != (ssize_t)sizeof(l->token))
		goto fail;
	h = l->map;
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->ring_size = SHM_RING_SIZE;
	memcpy(h->token, l->token, sizeof(h->token));
	/* Both readers start as sleepers: the first bytes in a ring wake
	 * its reader's progress thread, whoever read the switch message (a
	 * poller asks for no wakeups, and may stop polling right after). */
	atomic_init(&h->ctl[0].rx_sleep, 1);
	atomic_init(&h->ctl[1].rx_sleep, 1);
	link_rings(l, 0, 1, SHM_RING_SIZE);
	return l;
fail:
	link_free(l);
	return NULL;
}

/* ---- the descriptor server ------------------------------------------------ */

/* pidfd_getfd needs ptrace access to the offerer. Two programs that
 * `softrnic run` started unprivileged live in sibling user namespaces,
 * where the kernel refuses it (each has every capability in its own
 * namespace, none in the other's), as it does under some ptrace policies.
 * For them the offerer's context keeps an abstract Unix socket with a
 * random name, told in the offer: asked with the token of a link still on
 * offer, it sends that link's memfd and eventfds (SCM_RIGHTS), once, to a
 * process of our uid. The asker checks the sender is the offer's pid; we
 * check, at ACCEPT, that the accepter is who took them and that nobody
 * else asked (the name can be listed in /proc/net/unix). Such a link
 * cannot pull either (process_vm_readv needs the same access): payloads
 * go inline, one copy more, still no system call per message. */
#define FDSRV_TIMEOUT_US	200000

static socklen_t fdsrv_addr(uint64_t name, struct sockaddr_un *a)
{
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "softrnic-shm-%016llx",
		     (unsigned long long)name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void sock_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = FDSRV_TIMEOUT_US };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int send_fds(int c, const struct shm_fdreq *r, const int fds[3])
{
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)r, sizeof(*r) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(3 * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, 3 * sizeof(int));
	return sendmsg(c, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* One asker: its request, then the link's descriptors if it names one on
 * offer that nobody took yet. */
static void fdsrv_serve(struct sr_tcp_ctx *t, int c)
{
	struct shm_fdreq q;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	struct sr_list *pos, *tmp;

	sock_timeouts(c);
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.uid != geteuid())
		return;
	if (recv(c, &q, sizeof(q), 0) != (ssize_t)sizeof(q) || q.magic != SHM_MAGIC ||
	    q.version != SHM_VERSION)
		return;
	pthread_mutex_lock(&t->offers_lock);
	sr_list_for_each_safe(pos, tmp, &t->offers) {
		struct shm_link *l = container_of(pos, struct shm_link, offer_link);
		int fds[3] = { l->memfd, l->efd_own, l->efd_peer };

		if (memcmp(l->token, q.token, sizeof(q.token)))
			continue;
		if (atomic_load(&l->served_pid) || cr.pid <= 0)
			atomic_store(&l->served_extra, true);
		else if (!send_fds(c, &q, fds))
			atomic_store(&l->served_pid, cr.pid);
		break;
	}
	pthread_mutex_unlock(&t->offers_lock);
}

static void fdsrv_event(struct sr_pollable *p, uint32_t events)
{
	struct sr_tcp_ctx *t = container_of(p, struct sr_tcp_ctx, fdsrv);

	(void)events;
	for (;;) {
		int c = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0)
			return;
		fdsrv_serve(t, c);
		close(c);
	}
}

void shm_ctx_init(struct sr_tcp_ctx *t)
{
	pthread_mutex_init(&t->offers_lock, NULL);
	sr_list_init(&t->offers);
	t->fdsrv.fd = -1;
	t->fdsrv.on_event = fdsrv_event;
}

/* The context's server, made at its first offer. tc->lock held. */
static uint64_t fdsrv_get(struct sr_tcp_ctx *t)
{
	struct sockaddr_un a;
	uint64_t name = 0;
	socklen_t len;
	int fd;

	pthread_mutex_lock(&t->offers_lock);
	if (t->fdsrv.fd >= 0 || t->fdsrv_failed)
		goto out;
	t->fdsrv_failed = true;		/* unless all goes well */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	if (getrandom(&name, sizeof(name), 0) != (ssize_t)sizeof(name) || !name) {
		close(fd);
		goto out;
	}
	len = fdsrv_addr(name, &a);
	if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 16)) {
		close(fd);
		goto out;
	}
	t->fdsrv.fd = fd;
	if (progress_add(t->pg, &t->fdsrv, EPOLLIN)) {
		t->fdsrv.fd = -1;
		close(fd);
		goto out;
	}
	t->fdsrv_name = name;
	t->fdsrv_failed = false;
out:
	name = t->fdsrv.fd >= 0 ? t->fdsrv_name : 0;
	pthread_mutex_unlock(&t->offers_lock);
	return name;
}

void shm_ctx_close(struct sr_tcp_ctx *t)
{
	if (t->fdsrv.fd >= 0) {
		progress_del(t->pg, &t->fdsrv);
		close(t->fdsrv.fd);
		t->fdsrv.fd = -1;
	}
	pthread_mutex_destroy(&t->offers_lock);
}

/* Accepter: ask the offerer's server for the link's descriptors. 0, or
 * -1 (nothing taken). */
static int fdsrv_fetch(const struct shm_offer *o, int fds[3])
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct shm_fdreq q = { .magic = SHM_MAGIC, .version = SHM_VERSION }, r;
	struct iovec iov = { &r, sizeof(r) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct sockaddr_un a;
	struct cmsghdr *cm;
	struct ucred cr;
	socklen_t crl = sizeof(cr), len;
	int c, got = 0, ret = -1;
	ssize_t n;

	fds[0] = fds[1] = fds[2] = -1;
	if (!o->fdsrv)
		return -1;
	c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c < 0)
		return -1;
	sock_timeouts(c);
	len = fdsrv_addr(o->fdsrv, &a);
	memcpy(q.token, o->token, sizeof(q.token));
	if (connect(c, (struct sockaddr *)&a, len) ||
	    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.pid != o->pid ||
	    send(c, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q))
		goto out;
	memset(&u, 0, sizeof(u));
	do
		n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (got < 3)
				fds[got++] = fd;
			else
				close(fd);
		}
	}
	if (n == (ssize_t)sizeof(r) && got == 3 && !(mh.msg_flags & MSG_CTRUNC) &&
	    r.magic == SHM_MAGIC && !memcmp(r.token, o->token, sizeof(r.token)))
		ret = 0;
out:
	if (ret)
		for (int i = 0; i < got; i++) {
			close(fds[i]);
			fds[i] = -1;
		}
	close(c);
	return ret;
}

/* Queue a control message (an ACK with an SR_ST_SHM_* status and a
 * body) ahead of what is queued (behind the message being written): the
 * switch is wherever its FPDU lands in the byte stream, and the sooner it
 * comes, the less goes the slow way. tc->lock held. */
static bool ctl_queue_locked(struct tcp_chan *tc, uint8_t status, const void *body, size_t len)
{
	struct sr_msg *m = msg_alloc((uint32_t)len);

	if (!m)
		return false;
	m->op = SR_MSG_ACK;
	m->status = status;
	memcpy(m->payload, body, len);
	sr_list_add_tail(tc->txq.next, &m->link);	/* before the first */
	tc->tx_urgent = true;
	tx_busy_locked(tc);
	return true;
}

void shm_offer_locked(struct tcp_chan *tc, bool offerer)
{
	struct shm_offer o = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_link *l;

	/* Only between softrnic ends (the ACK extension says so); a plain
	 * iWARP peer (siw) never sees this. */
	if (!offerer || !tc->ext || !tc->ch.acks || tc->shm || tc->state != TS_UP)
		return;
	if (!shm_enabled()) {
		sr_dbg("tcp %p QP %#x: shm: off (SOFTRNIC_SHM=0)", (void *)tc, tc->local_qpn);
		return;
	}
	l = link_create();
	if (!l || read_boot_id(o.boot_id)) {
		sr_dbg("tcp %p QP %#x: shm: no offer: %s", (void *)tc, tc->local_qpn,
		       l ? "no boot id" : strerror(errno));
		link_free(l);
		return;
	}
	memcpy(o.token, l->token, sizeof(o.token));
	o.token_addr = (uint64_t)(uintptr_t)l->token;
	o.pid = (int32_t)getpid();
	o.memfd = l->memfd;
	o.efd_offerer = l->efd_own;
	o.efd_accepter = l->efd_peer;
	o.ring_size = SHM_RING_SIZE;
	o.fdsrv = fdsrv_get(tc->tctx);
	if (o.fdsrv) {
		pthread_mutex_lock(&tc->tctx->offers_lock);
		sr_list_add_tail(&tc->tctx->offers, &l->offer_link);
		l->offers_t = tc->tctx;
		pthread_mutex_unlock(&tc->tctx->offers_lock);
	}
	if (!ctl_queue_locked(tc, SR_ST_SHM_OFFER, &o, sizeof(o))) {
		link_free(l);
		return;
	}
	tc->shm = l;
	/* Our requests wait for the answer (a round trip), bounded: what
	 * the program posts right after connecting then goes into the ring
	 * rather than ahead of the switch on TCP. */
	tc->shm_hold_until = progress_now_ns() + SHM_HOLD_NS;
	tcp_timer_arm_locked(tc, SHM_HOLD_NS);
	sr_dbg("tcp %p QP %#x: shm: offered", (void *)tc, tc->local_qpn);
}

/* ---- accepting an offer ------------------------------------------------- */

static bool is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = 0;
	return strcmp(link, "anon_inode:[eventfd]") == 0;
}

static int getfd(int pidfd, int32_t fd)
{
	if (fd < 0)
		return -1;
	return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* Can we read the token at addr in pid? (the check process_vm_readv
 * itself needs; proves the right process too) */
static bool token_readable(pid_t pid, uint64_t addr, const uint8_t token[16])
{
	uint8_t got[16];
	struct iovec lv = { got, sizeof(got) }, rv = { (void *)(uintptr_t)addr, sizeof(got) };

	return process_vm_readv(pid, &lv, 1, &rv, 1, 0) == (ssize_t)sizeof(got) &&
	       memcmp(got, token, sizeof(got)) == 0;
}

/* Take the offered memfd and eventfds from the offerer and check them.
 * Returns NULL and the link, or why not. */
static const char *attach(const struct shm_offer *o, struct shm_link **out)
{
	struct shm_link *l;
	struct shm_hdr *h;
	uint8_t boot[16];
	struct stat st;
	const char *why = NULL;
	int memfd = -1;

	if (o->magic != SHM_MAGIC || o->version != SHM_VERSION)
		return "unknown offer version";
	if (o->ring_size < 65536 || o->ring_size > (64ULL << 20) ||
	    (o->ring_size & (o->ring_size - 1)))
		return "bad ring size";
	if (read_boot_id(boot) || memcmp(boot, o->boot_id, sizeof(boot)))
		return "another host";
	l = link_alloc();
	if (!l)
		return "out of memory";
	l->peer_pid = o->pid;
	l->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)o->pid, 0);
	if (l->pidfd < 0) {
		why = "pidfd_open failed (another pid namespace?)";
		goto fail;
	}
	memfd = getfd(l->pidfd, o->memfd);
	l->efd_peer = getfd(l->pidfd, o->efd_offerer);
	l->efd_own = getfd(l->pidfd, o->efd_accepter);
	if ((memfd < 0 || l->efd_peer < 0 || l->efd_own < 0) && errno == EPERM) {
		/* no ptrace access: ask the offerer's descriptor server */
		int fds[3];

		if (memfd >= 0)
			close(memfd);
		if (l->efd_peer >= 0)
			close(l->efd_peer);
		if (l->efd_own >= 0)
			close(l->efd_own);
		memfd = l->efd_peer = l->efd_own = -1;
		if (fdsrv_fetch(o, fds)) {
			why = "pidfd_getfd not permitted (ptrace access), and the offerer's "
			      "descriptor server did not answer";
			goto fail;
		}
		memfd = fds[0];
		l->efd_peer = fds[1];
		l->efd_own = fds[2];
		l->via_fdsrv = true;
	}
	if (memfd < 0 || l->efd_peer < 0 || l->efd_own < 0) {
		why = "pidfd_getfd failed";
		goto fail;
	}
	if (!is_eventfd(l->efd_peer) || !is_eventfd(l->efd_own)) {
		why = "not eventfds";
		goto fail;
	}
	l->map_len = SHM_HDR_SIZE + 2 * o->ring_size;
	if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != l->map_len) {
		why = "memfd of the wrong size";
		goto fail;
	}
	l->map = mmap(NULL, l->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		why = "mmap failed";
		goto fail;
	}
	h = l->map;
	if (h->magic != SHM_MAGIC || h->ring_size != o->ring_size ||
	    memcmp(h->token, o->token, sizeof(o->token))) {
		why = "token mismatch";
		goto fail;
	}
	/* (From the server: the sender was the offer's pid, and it sent the
	 * token. We cannot read its memory, and will not pull.) */
	if (!l->via_fdsrv && !token_readable(l->peer_pid, o->token_addr, o->token)) {
		why = "process_vm_readv not permitted or wrong process";
		goto fail;
	}
	memcpy(l->token, o->token, sizeof(l->token));
	close(memfd);
	link_rings(l, 1, 0, o->ring_size);
	*out = l;
	return NULL;
fail:
	if (memfd >= 0)
		close(memfd);
	link_free(l);
	return why;
}

/* Our eventfd goes into the progress engine. tc->lock held. */
static bool watch_locked(struct tcp_chan *tc, struct shm_link *l)
{
	tc->epl.fd = l->efd_own;
	tc->epl.on_event = tcp_shm_event;
	if (progress_add(tc->tctx->pg, &tc->epl, EPOLLIN))
		return false;
	l->watched = true;
	return true;
}

static void refused(struct tcp_chan *tc, const char *who, const char *why)
{
	atomic_fetch_add_explicit(&chan_stats.shm_refused, 1, memory_order_relaxed);
	sr_dbg("tcp %p QP %#x: shm: %s, staying on TCP: %s", (void *)tc, tc->local_qpn, who, why);
}

static void linked(struct tcp_chan *tc)
{
	atomic_fetch_add_explicit(&chan_stats.shm_links, 1, memory_order_relaxed);
	sr_dbg("tcp %p QP %#x<->%#x: shm: data path moves to shared memory (pull %d)",
	       (void *)tc, tc->local_qpn, tc->peer_qpn, tc->shm_pull_ok);
}

static int on_offer(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_accept a = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_offer o;
	struct shm_link *l = NULL;
	const char *why;
	bool ok;

	if (len != sizeof(o))
		return -EBADMSG;
	memcpy(&o, body, sizeof(o));
	if (!shm_enabled())
		why = "SOFTRNIC_SHM=0 here";
	else if (tc->shm)
		why = "offered twice";
	else
		why = attach(&o, &l);
	pthread_mutex_lock(&tc->lock);
	if (!why && !watch_locked(tc, l))
		why = "epoll";
	if (why) {
		pthread_mutex_unlock(&tc->lock);
		link_free(l);
		refused(tc, "refused the offer", why);
		pthread_mutex_lock(&tc->lock);
		ok = ctl_queue_locked(tc, SR_ST_SHM_REFUSE, &a, sizeof(a));
		pthread_mutex_unlock(&tc->lock);
		tcp_kick_now(tc);
		return ok ? 0 : -ENOMEM;
	}
	a.pid = (int32_t)getpid();
	a.pull_ok = !l->via_fdsrv;	/* token_readable() proved it */
	a.token_addr = (uint64_t)(uintptr_t)l->token;
	tc->shm = l;
	/* ACCEPT is our last message on TCP: tcp_flush_locked moves our
	 * writes to the ring once it is written. */
	ok = ctl_queue_locked(tc, SR_ST_SHM_ACCEPT, &a, sizeof(a));
	pthread_mutex_unlock(&tc->lock);
	tcp_kick_now(tc);
	return ok ? 0 : -ENOMEM;
}

static int on_accept(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_switch s = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_link *l = tc->shm;
	struct shm_accept a;
	bool ok;

	if (!l || !l->offerer || len != sizeof(a) || tc->shm_rx)
		return -EBADMSG;
	memcpy(&a, body, sizeof(a));
	if (a.magic != SHM_MAGIC || a.version != SHM_VERSION)
		return -EBADMSG;
	offer_unlist(l);	/* the server hands it out no more */
	/* Whoever took the descriptors from our server must be the accepter,
	 * alone: another process holding our rings could write into them
	 * as the peer. The peer has moved to the ring already: end the
	 * stream (QP to ERROR). */
	if (atomic_load(&l->served_extra) ||
	    (atomic_load(&l->served_pid) && atomic_load(&l->served_pid) != a.pid)) {
		refused(tc, "the offer was taken", "another process asked for the descriptors");
		return -EPROTO;
	}
	/* The accepter pulls from us if it said it can; we from it if we
	 * can read its copy of the token (an asymmetric ptrace policy
	 * leaves that direction inline). */
	l->peer_pid = a.pid;
	l->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)a.pid, 0);
	s.pull_ok = l->pidfd >= 0 && token_readable(l->peer_pid, a.token_addr, l->token);
	if (!s.pull_ok)
		sr_dbg("tcp %p QP %#x: shm: cannot read the peer: its payloads come inline",
		       (void *)tc, tc->local_qpn);
	pthread_mutex_lock(&tc->lock);
	if (!watch_locked(tc, l)) {
		pthread_mutex_unlock(&tc->lock);
		return -ENOMEM;	/* the peer moved already: the stream ends */
	}
	/* Everything the accepter sends from now on is in the ring. What we
	 * held goes there too, behind SWITCH. */
	tc->shm_rx = true;
	tc->shm_hold_until = 0;
	tc->shm_pull_ok = a.pull_ok != 0;
	want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	ok = ctl_queue_locked(tc, SR_ST_SHM_SWITCH, &s, sizeof(s));
	pthread_mutex_unlock(&tc->lock);
	linked(tc);
	tcp_kick_now(tc);
	return ok ? 0 : -ENOMEM;
}

static int on_refuse(struct tcp_chan *tc)
{
	struct shm_link *l;

	pthread_mutex_lock(&tc->lock);
	l = tc->shm;
	if (!l || !l->offerer || tc->shm_rx) {
		pthread_mutex_unlock(&tc->lock);
		return -EBADMSG;
	}
	tc->shm = NULL;
	tc->shm_hold_until = 0;		/* what we held goes on TCP */
	tx_busy_locked(tc);
	pthread_mutex_unlock(&tc->lock);
	offer_unlist(l);
	refused(tc, "the peer refused", "see its debug log");
	link_free(l);
	tcp_kick_now(tc);
	return 0;
}

static int on_switch(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_switch s;

	if (!tc->shm || tc->shm->offerer || tc->shm_rx || len != sizeof(s))
		return -EBADMSG;
	memcpy(&s, body, sizeof(s));
	if (s.magic != SHM_MAGIC || s.version != SHM_VERSION)
		return -EBADMSG;
	pthread_mutex_lock(&tc->lock);
	tc->shm_rx = true;
	tc->shm_pull_ok = s.pull_ok != 0;
	want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	pthread_mutex_unlock(&tc->lock);
	linked(tc);
	return 0;
}

int shm_ctl(struct tcp_chan *tc, uint8_t status, const uint8_t *body, size_t len)
{
	switch (status) {
	case SR_ST_SHM_OFFER:
		return on_offer(tc, body, len);
	case SR_ST_SHM_ACCEPT:
		return on_accept(tc, body, len);
	case SR_ST_SHM_REFUSE:
		return on_refuse(tc);
	case SR_ST_SHM_SWITCH:
		return on_switch(tc, body, len);
	default:
		return -EBADMSG;
	}
}

/* ---- I/O ----------------------------------------------------------------- */

static void wake(int efd)
{
	uint64_t one = 1;
	ssize_t n = write(efd, &one, sizeof(one));

	(void)n;	/* EAGAIN: the counter is full, a wakeup is pending */
}

/* Dekker with the other side's "sleep, then look again": each side
 * stores its own index or flag, fences, then reads the other's. */
static void wake_if(_Atomic uint32_t *flag, int efd)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(flag, memory_order_relaxed) &&
	    atomic_exchange_explicit(flag, 0, memory_order_relaxed))
		wake(efd);
}

/* The consumer's half of tx_sleep, with hysteresis: the producer that
 * found the ring full is woken once half of it is free again, not after
 * every record read (each wake is a system call here and a context
 * switch there; a 16 MiB WRITE is 256 records). No wake-up is lost: a
 * consumer that reads on drains the ring below half, and one that stops
 * reading for good ends the stream, which the producer hears of anyway.
 * The tail is the producer's and untrusted: a bad one only makes the
 * wake early or late. */
static void wake_producer(struct shm_link *l)
{
	uint64_t used;

	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&l->rx.ctl->tx_sleep, memory_order_relaxed))
		return;
	used = atomic_load_explicit(&l->rx.ctl->tail, memory_order_relaxed) - l->rx.pos;
	if (used > l->rx.size / 2 && used <= l->rx.size)
		return;
	if (atomic_exchange_explicit(&l->rx.ctl->tx_sleep, 0, memory_order_relaxed))
		wake(l->efd_peer);
}

bool shm_pulls_sent(const struct tcp_chan *tc)
{
	return tc->shm && atomic_load_explicit(&tc->shm->pulls_sent, memory_order_acquire);
}

void shm_faults_locked(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;
	uint64_t head;

	if (!l || !tc->shm_tx || l->pend_head == l->pend_tail)
		return;
	head = shm_ring_released(&l->tx);
	while (l->pend_head != l->pend_tail) {
		uint32_t i = l->pend_head % SHM_PEND;

		if ((int64_t)(head - l->pend[i].pos) <= 0)
			break;		/* not read yet */
		if (shm_ring_faulted(&l->tx, l->pend[i].pos) &&
		    tc->nfaults < (int)ARRAY_SIZE(tc->faults))
			tc->faults[tc->nfaults++] = l->pend[i].msn;
		l->pend_head++;
	}
}

/* Track the remote records just written whose piece belongs to a WQE. */
static void note_pulls(struct shm_link *l, const struct shm_rec_note *notes, int nn,
		       const uint32_t *msns)
{
	for (int j = 0; j < nn; j++) {
		uint32_t msn = msns[notes[j].piece];

		if (msn == SHM_NO_MSN || l->pend_tail - l->pend_head == SHM_PEND)
			continue;
		l->pend[l->pend_tail % SHM_PEND].pos = notes[j].pos;
		l->pend[l->pend_tail % SHM_PEND].msn = msn;
		l->pend_tail++;
	}
}

ssize_t shm_send(struct tcp_chan *tc, const struct iovec *iov, const uint8_t *kinds,
		 const uint32_t *msns, int n)
{
	struct shm_link *l = tc->shm;
	bool slept = false;
	ssize_t k;

	/* before the space of released records is written again */
	shm_faults_locked(tc);
	if (!atomic_load_explicit(&l->pulls_sent, memory_order_relaxed))
		for (int i = 0; i < n; i++)
			if (kinds[i] == SHM_PULL) {
				atomic_store_explicit(&l->pulls_sent, true, memory_order_relaxed);
				break;
			}
	for (;;) {
		struct shm_rec_note notes[128];
		int nn = (int)ARRAY_SIZE(notes);

		if (l->broken) {
			errno = EPROTO;
			return -1;
		}
		k = shm_ring_write(&l->tx, iov, kinds, n, &l->io, notes, &nn);
		note_pulls(l, notes, nn, msns);
		if (k > 0) {
			wake_if(&l->tx.ctl->rx_sleep, l->efd_peer);
			return k;
		}
		if (k == -EFAULT) {
			errno = EFAULT;
			return -1;
		}
		if (k < 0) {
			l->broken = "corrupt ring (head)";
			shm_self_wake(tc);	/* the receive side ends the stream */
			errno = EPROTO;
			return -1;
		}
		if (slept) {
			errno = EAGAIN;
			return -1;
		}
		/* Full: ask for a wakeup, then look once more. */
		atomic_store_explicit(&l->tx.ctl->tx_sleep, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		slept = true;
	}
}

ssize_t shm_recv(struct tcp_chan *tc, const struct iovec *iov, int n, bool app)
{
	struct shm_link *l = tc->shm;
	bool slept = false;

	for (;;) {
		bool eof = atomic_load_explicit(&tc->shm_eof, memory_order_acquire);
		ssize_t k;

		if (l->broken) {
			errno = EPROTO;
			return -1;
		}
		uint64_t mapped = l->rx.mapped;

		k = shm_ring_read(&l->rx, iov, n, app, &l->io);
		if (l->rx.mapped != mapped)
			atomic_fetch_add_explicit(&chan_stats.shm_mapped, l->rx.mapped - mapped,
						  memory_order_relaxed);
		if (k > 0) {
			wake_producer(l);
			return k;
		}
		if (k == -EFAULT) {
			errno = EFAULT;
			return -1;
		}
		if (k < 0) {
			l->broken = k == -EIO ? "the peer is gone" : "corrupt ring";
			errno = EPROTO;
			return -1;
		}
		if (eof)
			return 0;	/* the socket ended, and the ring is empty */
		/* A busy poller does not sleep: only a receive pass of the
		 * progress thread asks for a wakeup. */
		if (slept || tc->rx_poller) {
			errno = EAGAIN;
			return -1;
		}
		atomic_store_explicit(&l->rx.ctl->rx_sleep, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		slept = true;
	}
}

uint64_t shm_rx_mark(const struct tcp_chan *tc)
{
	const struct shm_link *l = tc->shm;

	return l->rx.rec ? 1 : l->rx.pos;	/* (records are 8-aligned) */
}

bool shm_rx_idle_at(const struct tcp_chan *tc, uint64_t mark)
{
	const struct shm_link *l = tc->shm;

	return atomic_load_explicit(&l->rx.ctl->tail, memory_order_relaxed) == mark &&
	       !atomic_load_explicit(&tc->shm_eof, memory_order_acquire) && !l->broken;
}

const char *shm_broken(const struct tcp_chan *tc)
{
	return tc->shm ? tc->shm->broken : NULL;
}

void shm_self_wake(struct tcp_chan *tc)
{
	if (tc->shm && tc->shm->efd_own >= 0)
		wake(tc->shm->efd_own);
}

bool shm_pullable(const struct tcp_chan *tc, const void *p, size_t len)
{
	uint8_t b;

	if (!tc->shm_pull_ok || len < SHM_PULL_MIN)
		return false;
	/* A buffer already unmapped goes inline, where the copy finds the
	 * fault at once. Its first and last bytes are probed (a system call
	 * per piece, msync, cost more than the copy saved); a hole in the
	 * middle, or an unmap after this, is found by the peer's pull, which
	 * reads zeros and marks the record: shm_faults_locked. Either way
	 * the WQE fails with IBV_WC_LOC_PROT_ERR, as over TCP. */
	return !mem_read(&b, (uintptr_t)p, 1) && !mem_read(&b, (uintptr_t)p + len - 1, 1);
}

void shm_shut(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;

	if (l && l->watched) {
		progress_del(tc->tctx->pg, &tc->epl);
		l->watched = false;
	}
}

void shm_free(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;

	if (l && (l->rx.pulled || l->rx.mapped || l->rx.inlined))
		sr_dbg("tcp %p QP %#x: shm: read %llu bytes inline, %llu pulled, %llu mapped, "
		       "%llu as zeros", (void *)tc, tc->local_qpn,
		       (unsigned long long)l->rx.inlined, (unsigned long long)l->rx.pulled,
		       (unsigned long long)l->rx.mapped, (unsigned long long)l->rx.faults);
	link_free(tc->shm);
	tc->shm = NULL;
}

/* SOFTRNIC_STATS=1: one line on stderr at exit, if anything moved. */
__attribute__((destructor)) static void shm_stats_print(void)
{
	const char *v = getenv("SOFTRNIC_STATS");
	uint64_t t = atomic_load(&chan_stats.tcp_fpdus), s = atomic_load(&chan_stats.shm_fpdus);
	uint64_t us = atomic_load(&chan_stats.ud_sent), ur = atomic_load(&chan_stats.ud_received);

	if (!v || strcmp(v, "1") ||
	    (!t && !s && !us && !ur && !atomic_load(&chan_stats.shm_refused)))
		return;
	fprintf(stderr, "softrnic stats: pid %d tcp_fpdus %llu shm_fpdus %llu shm_pulled %llu "
		"shm_mapped %llu shm_links %llu shm_refused %llu ud_sent %llu ud_received %llu\n",
		(int)getpid(), (unsigned long long)t, (unsigned long long)s,
		(unsigned long long)atomic_load(&chan_stats.shm_pulled),
		(unsigned long long)atomic_load(&chan_stats.shm_mapped),
		(unsigned long long)atomic_load(&chan_stats.shm_links),
		(unsigned long long)atomic_load(&chan_stats.shm_refused),
		(unsigned long long)us, (unsigned long long)ur);
}
