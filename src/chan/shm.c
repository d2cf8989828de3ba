/* The same-host channel: the link between two processes (its rings in a
 * shared memfd, two eventfds) and the stream's byte I/O once it moved
 * there. Setup (offer, accept, switch, the descriptor server) is in
 * shm_setup.c; see shm.h for the switch and DESIGN.md decision 23 for the
 * layout.
 *
 * Trust: the peer is another softrnic process of our user, one we may
 * usually ptrace (pidfd_getfd and process_vm_readv require it; else the
 * descriptor server hands the rings over), but it may be buggy or
 * hostile and its memory corrupt. Nothing it writes into the shared pages
 * is used unchecked (shm_ring.c), remote records only ever make us read
 * the peer's memory (mapped records: a memfd of the peer's that we map
 * read-only after checking it), and bytes land in ours only where the
 * core's checks (key, PD, bounds, access) put them, exactly as bytes
 * from a socket do.
 */
#include "chan/shm_priv.h"
#include "chan/shm_map.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC	0x01021994	/* <linux/magic.h>: memfds live on it */
#endif

struct chan_stats chan_stats;

bool shm_enabled(void)
{
	const char *v = getenv("SOFTRNIC_SHM");

	return !v || !*v || *v != '0';
}

/* ---- memory access for the rings ------------------------------------- */

int shm_io_put(void *dst, const void *src, size_t n)
{
	return mem_write((uintptr_t)dst, src, n);
}

static int io_get(void *dst, const void *src, size_t n)
{
	return mem_read(dst, (uintptr_t)src, n);
}

/* Has the process behind this pidfd exited? */
static bool pidfd_exited(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int saved = errno, r;

	/* Only a readable pidfd says "exited". A program's signals (qperf's
	 * SIGALRM and SIGIO reach the thread that busy-polls, and pulls)
	 * interrupt poll: that is no verdict, ask again. */
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	errno = saved;
	return r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

/* Is the peer still the process we verified? A pid is only reused once
 * its process is gone, so a pull that finished before this says "alive"
 * read the right process. */
bool shm_peer_alive(const struct shm_link *l)
{
	return !pidfd_exited(l->pidfd);
}

ssize_t shm_io_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	struct shm_link *l = arg;
	struct iovec r = { (void *)(uintptr_t)raddr, len };
	ssize_t got = process_vm_readv(l->peer_pid, dst, (unsigned long)n, &r, 1, 0);

	if (got > 0 && !shm_peer_alive(l)) {
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
	struct shm_link *l = arg;
	struct shm_map_loc m;

	if (!shm_map_find(p, len, &m) || m.fd < 0 || m.off > m.size || len > m.size - m.off)
		return false;
	/* (a peer that cannot take it with pidfd_getfd gets it first) */
	if (atomic_load_explicit(&l->side.fd, memory_order_relaxed) >= 0 &&
	    !shm_side_send(&l->side, m.fd, m.ino))
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

/* Take the peer's fd and map it (read-only; read-write to help), if it is
 * what a mapped record or a help request may name: a memfd (tmpfs: no
 * hugetlbfs page can be missing when we touch it) with the record's
 * inode, sealed against shrinking, so that nothing the peer does can
 * take a page from under our mapping: touching it never faults (SIGBUS).
 * A writable view of the peer is not inherited by a child we fork.
 * NULL if not. */
static uint8_t *map_peer_fd(struct shm_link *l, uint32_t pfd, uint64_t ino, uint64_t *size,
			    int prot)
{
	struct stat st;
	struct statfs sf;
	void *p;
	int fd, seals;

	if (atomic_load_explicit(&l->side.fd, memory_order_relaxed) >= 0)
		fd = shm_side_take(&l->side, pfd, ino);	/* (sent to us, or not at all) */
	else if (l->pidfd < 0 || pfd > INT32_MAX)
		return NULL;
	else
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
	p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	if ((prot & PROT_WRITE) && madvise(p, (size_t)st.st_size, MADV_DONTFORK)) {
		munmap(p, (size_t)st.st_size);
		return NULL;
	}
	*size = (uint64_t)st.st_size;
	return p;
}

/* Consumer: our pointer to len bytes at off of the peer's memfd (fd, ino),
 * from a small LRU cache of mappings; NULL: pull the record's address
 * instead (a memfd we cannot or may not map is not tried again for a
 * while). rx_lock held.
 *
 * No shm_peer_alive() after a copy from here, unlike shm_io_pull: that check is
 * for a pid, which names whatever process holds it now, and a pull by
 * pid could read a stranger that took a dead peer's pid. The mapping
 * names no pid: it is the memfd itself, taken through the pidfd (which
 * names the verified process, dead or alive: pidfd_getfd fails once it
 * is gone) and checked by inode, and it stays that memfd for as long as
 * we keep it mapped. A copy from it after the peer died reads bytes the
 * peer left there, as bytes still in a socket buffer are read after the
 * sender died; the stream ends on the socket's close anyway. */
uint8_t *shm_cache_map(struct shm_link *l, struct peer_map *maps, uint64_t *clock, int *last,
		       int prot, uint32_t fd, uint64_t ino, uint64_t off, size_t len)
{
	struct peer_map *m = &maps[*last], *victim = NULL;
	uint64_t t;

	if (!(m->used && m->fd == fd && m->ino == ino)) {
		m = NULL;
		for (int i = 0; i < SHM_MAPS; i++) {
			struct peer_map *e = &maps[i];

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
			munmap(victim->base, victim->size);
		memset(victim, 0, sizeof(*victim));
		victim->fd = fd;
		victim->ino = ino;
		victim->base = map_peer_fd(l, fd, ino, &victim->size, prot);
		if (!victim->base) {
			victim->size = 0;
			victim->retry = now_ns() + SHM_MAP_RETRY_NS;
		}
		m = victim;
	}
	m->used = ++*clock;
	*last = (int)(m - maps);
	if (!m->base || off > m->size || len > m->size - off)
		return NULL;
	return m->base + off;
}

const void *shm_io_map(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len)
{
	struct shm_link *l = arg;

	return shm_cache_map(l, l->maps, &l->map_clock, &l->map_last, PROT_READ, fd, ino, off, len);
}

/* ---- the link -------------------------------------------------------------- */

void shm_offer_unlist(struct shm_link *l)
{
	struct sr_tcp_ctx *t = l->offers_t;

	if (!t)
		return;
	pthread_mutex_lock(&t->offers_lock);
	sr_list_del(&l->offer_link);
	pthread_mutex_unlock(&t->offers_lock);
	l->offers_t = NULL;
}

int shm_pidfd_open(struct sr_tcp_ctx *t, struct shm_link *l, pid_t pid)
{
	struct shm_pidfd *e = NULL, *n;
	int fd = -1;

	pthread_mutex_lock(&t->pidfd_lock);
	for (unsigned int i = 0; i < t->npidfds && !e; i++)
		if (t->pidfds[i].pid == pid && !pidfd_exited(t->pidfds[i].fd))
			e = &t->pidfds[i];
	if (!e) {
		fd = (int)syscall(SYS_pidfd_open, pid, 0);
		n = fd >= 0 ? realloc(t->pidfds, sizeof(*n) * (t->npidfds + 1)) : NULL;
		if (!n) {
			if (fd >= 0) {
				/* (out of memory: the link's own, not shared) */
				l->pidfd = fd;
				l->pidfd_t = NULL;
			}
			pthread_mutex_unlock(&t->pidfd_lock);
			return fd;
		}
		t->pidfds = n;
		e = &n[t->npidfds++];
		*e = (struct shm_pidfd){ .pid = pid, .fd = fd };
	}
	e->refs++;
	l->pidfd = e->fd;
	l->pidfd_t = t;
	pthread_mutex_unlock(&t->pidfd_lock);
	return l->pidfd;
}

/* The link's share given back. */
static void pidfd_close(struct shm_link *l)
{
	struct sr_tcp_ctx *t = l->pidfd_t;

	if (!t) {
		close(l->pidfd);
		return;
	}
	pthread_mutex_lock(&t->pidfd_lock);
	for (unsigned int i = 0; i < t->npidfds; i++) {
		if (t->pidfds[i].fd != l->pidfd)
			continue;
		if (!--t->pidfds[i].refs) {
			close(t->pidfds[i].fd);
			t->pidfds[i] = t->pidfds[--t->npidfds];
		}
		break;
	}
	pthread_mutex_unlock(&t->pidfd_lock);
}

void shm_link_free(struct shm_link *l)
{
	if (!l)
		return;
	shm_offer_unlist(l);	/* before its descriptors go */
	for (int i = 0; i < SHM_MAPS; i++) {
		if (l->maps[i].base)
			munmap(l->maps[i].base, l->maps[i].size);
		if (l->wmaps[i].base)
			munmap(l->wmaps[i].base, l->wmaps[i].size);
	}
	pthread_mutex_destroy(&l->help_lock);
	if (l->map)
		munmap(l->map, l->map_len);
	if (l->memfd >= 0)
		close(l->memfd);
	if (l->efd_own >= 0)
		close(l->efd_own);
	if (l->efd_peer >= 0)
		close(l->efd_peer);
	if (l->pidfd >= 0)
		pidfd_close(l);
	shm_side_close(&l->side);
	free(l);
}

struct shm_link *shm_link_alloc(void)
{
	struct shm_link *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->memfd = l->efd_own = l->efd_peer = l->pidfd = -1;
	shm_side_init(&l->side);
	pthread_mutex_init(&l->help_lock, NULL);
	l->help_part = 32;
	/* (no_pull until the switch says the peer can) */
	l->io = (struct shm_ring_io){ .put = shm_io_put, .get = io_get, .pull = shm_io_pull, .arg = l,
				      .locate = io_locate, .map = shm_io_map, .help = shm_io_help,
				      .no_pull = true };
	return l;
}

/* Ring i of a mapped link. */
void shm_link_rings(struct shm_link *l, int tx, int rx, uint64_t ring_size)
{
	struct shm_hdr *h = l->map;
	uint8_t *base = (uint8_t *)l->map + SHM_HDR_SIZE;

	shm_ring_init(&l->tx, &h->ctl[tx], base + (uint64_t)tx * ring_size, ring_size);
	shm_ring_init(&l->rx, &h->ctl[rx], base + (uint64_t)rx * ring_size, ring_size);
	l->help_serve = &h->help[tx];
	l->help_post = &h->help[rx];
}

/* ---- I/O ----------------------------------------------------------------- */

static void wake(int efd)
{
	uint64_t one = 1;
	ssize_t n = write(efd, &one, sizeof(one));

	(void)n;	/* EAGAIN: the counter is full, a wakeup is pending */
}

/* The writer's half of rx_sleep, after a record is written: Dekker with
 * the reader's "sleep, then look again" (shm_recv), each side storing its
 * own index or flag, fencing, then reading the other's. Except while the
 * reader says a program thread polls the ring (rx_polled): then no fence
 * (one per post cost 64-byte ib_send_bw ~4% of its message rate), and the
 * look may see rx_sleep clear while the record is not yet visible to a
 * reader just going to sleep. The reader, once its polling stops, looks
 * at the ring once more SHM_SLEEP_GRACE_NS later (shm_polled_locked):
 * such a record waits at most that long; no wakeup is lost. */
static void wake_if(struct shm_ring_ctl *ctl, int efd)
{
	_Atomic uint32_t *flag = &ctl->rx_sleep;

	if (!atomic_load_explicit(&ctl->rx_polled, memory_order_relaxed)) {
		atomic_thread_fence(memory_order_seq_cst);
		chan_stat_inc(&chan_stats.shm_fenced);
	}
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
 * wake early or late.
 *
 * Looked at only as the released position enters another sixteenth of
 * the ring (SHM_WAKE_PARTS): the fence that pairs with the producer's
 * (shm_send) would otherwise wait, after every message read, for the
 * stores before it, among them the ring line the read zeroed
 * (shm_ring_read_small), which the producer's core holds. Still none
 * lost: the producer sleeps only on a ring with less than a record's
 * room free, so after its fence at least fifteen sixteenths are unread,
 * and the consumer that reads them down past half enters a new
 * sixteenth with half or less unread, and looks. */
#define SHM_WAKE_PARTS	16
static void wake_producer(struct shm_link *l)
{
	/* (the ring's size is a power of two: a mask, not a division) */
	uint64_t used, part = l->rx.pos & ~(l->rx.size / SHM_WAKE_PARTS - 1);

	if (part == l->wake_part)
		return;
	l->wake_part = part;
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

bool shm_pulls_owed(const struct tcp_chan *tc)
{
	const struct shm_link *l = tc->shm;

	/* (revoked: the peer cannot take them any more) */
	return l && tc->shm_tx && !l->broken &&
	       !atomic_load_explicit(&l->tx.ctl->revoked, memory_order_relaxed) &&
	       (int64_t)(l->pull_hi - shm_ring_released(&l->tx)) > 0 && shm_peer_alive(l);
}

void shm_revoke_arm(struct tcp_chan *tc)
{
	atomic_store_explicit(&tc->shm_revoke, &tc->shm->tx.ctl->revoked, memory_order_release);
}

void shm_revoke(struct tcp_chan *tc)
{
	_Atomic uint32_t *w = atomic_load_explicit(&tc->shm_revoke, memory_order_acquire);

	if (w)
		atomic_store_explicit(w, 1, memory_order_seq_cst);
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

/* The peer made our ring's head impossible: the rings are done with
 * (the receive side ends the stream). -1, errno EPROTO. */
static ssize_t head_broken(struct tcp_chan *tc)
{
	tc->shm->broken = "corrupt ring (head)";
	shm_self_wake(tc);
	errno = EPROTO;
	return -1;
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
		if (nn > 0)
			l->pull_hi = l->tx.pos;
		if (k > 0) {
			wake_if(l->tx.ctl, l->efd_peer);
			return k;
		}
		if (k == -EFAULT) {
			errno = EFAULT;
			return -1;
		}
		if (k < 0)
			return head_broken(tc);
		if (slept) {
			l->tx_stuck_head = l->tx.seen_head;
			l->tx_stuck = true;
			errno = EAGAIN;
			return -1;
		}
		/* Full: ask for a wakeup, then look once more. */
		chan_stat_inc(&chan_stats.shm_full);
		atomic_store_explicit(&l->tx.ctl->tx_sleep, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		slept = true;
	}
}

bool shm_tx_stuck(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;

	if (!l->tx_stuck)
		return false;
	if (atomic_load_explicit(&l->tx.ctl->head, memory_order_relaxed) == l->tx_stuck_head &&
	    !l->broken)
		return true;
	l->tx_stuck = false;
	return false;
}

ssize_t shm_send_small(struct tcp_chan *tc, const struct iovec *iov, int n, size_t len, int app)
{
	struct shm_link *l = tc->shm;
	ssize_t k;

	/* before the space of released records is written again */
	shm_faults_locked(tc);
	if (l->broken) {
		errno = EPROTO;
		return -1;
	}
	k = shm_ring_write_small_app(&l->tx, iov, n, len, app, io_get);
	if (k == 0)
		return 0;
	if (k == -EINVAL || k == -EFAULT) {
		errno = (int)-k;
		return -1;
	}
	if (k < 0)
		return head_broken(tc);
	wake_if(l->tx.ctl, l->efd_peer);
	return k;
}

bool shm_send_ack(struct tcp_chan *tc, uint32_t msn)
{
	struct shm_link *l = tc->shm;

	if (l->broken)
		return false;
	atomic_store_explicit(&l->tx.ctl->ack, SHM_ACK_SET | msn, memory_order_release);
	wake_if(l->tx.ctl, l->efd_peer);
	return true;
}

bool shm_ack_peek(const struct tcp_chan *tc, uint64_t *word)
{
	const struct shm_link *l = tc->shm;
	uint64_t w = atomic_load_explicit(&l->rx.ctl->ack, memory_order_acquire);

	if (w == atomic_load_explicit(&l->ack_seen, memory_order_relaxed))
		return false;
	*word = w;
	return true;
}

void shm_ack_take(struct tcp_chan *tc, uint64_t word)
{
	atomic_store_explicit(&tc->shm->ack_seen, word, memory_order_relaxed);
}

void shm_polled_locked(struct tcp_chan *tc, bool polled)
{
	atomic_store_explicit(&tc->shm->rx.ctl->rx_polled, polled, memory_order_relaxed);
	if (!polled)
		atomic_store_explicit(&tc->shm_grace_due, true, memory_order_relaxed);
}

/* The first sleep on the ring since its polling stopped: look again
 * SHM_SLEEP_GRACE_NS later (wake_if). rx_lock held, not tc->lock. */
static void grace_arm(struct tcp_chan *tc)
{
	sr_mutex_lock(&tc->lock);
	if (atomic_exchange_explicit(&tc->shm_grace_due, false, memory_order_relaxed) &&
	    tc->state == TS_UP && !tc->closed) {
		tc->shm_grace_at = progress_now_ns() + SHM_SLEEP_GRACE_NS;
		progress_timer_arm_by(tc->tctx->pg, &tc->timer, SHM_SLEEP_GRACE_NS);
	}
	sr_mutex_unlock(&tc->lock);
}

void shm_grace_check_locked(struct tcp_chan *tc, uint64_t now)
{
	uint64_t mark;

	if (!tc->shm_grace_at)
		return;
	if (now < tc->shm_grace_at) {
		/* (the timer fired for another use first) */
		progress_timer_arm_by(tc->tctx->pg, &tc->timer, tc->shm_grace_at - now);
		return;
	}
	tc->shm_grace_at = 0;
	mark = atomic_load_explicit(&tc->rx_mark, memory_order_acquire);
	if (tc->shm_rx && ((mark & 1) || !shm_rx_idle_at(tc, mark))) {
		chan_stat_inc(&chan_stats.shm_graced);
		shm_self_wake(tc);
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
			chan_stat_add(&chan_stats.shm_mapped, l->rx.mapped - mapped);
		if (k > 0) {
			wake_producer(l);
			return k;
		}
		if (k == -EFAULT || k == -ENOMSG) {
			errno = (int)-k;
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
		if (slept || tc->rx_poller || tc->rx_nosleep) {
			uint64_t w;

			if (slept && atomic_load_explicit(&tc->shm_grace_due, memory_order_relaxed))
				grace_arm(tc);
			/* (an ACK word stored after this pass looked at it and
			 * before the sleep was asked for: the peer may not have
			 * seen rx_sleep, so the pass that takes it comes now) */
			if (slept && shm_ack_peek(tc, &w))
				shm_self_wake(tc);
			errno = EAGAIN;
			return -1;
		}
		atomic_store_explicit(&l->rx.ctl->rx_sleep, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		slept = true;
	}
}

_Static_assert(SR_SMALL_MAX == SHM_SMALL_PAYLOAD, "chan.h's small requests are small messages");
_Static_assert(sizeof(struct shm_small) + SHM_SMALL_PAYLOAD <= SHM_SMALL_MAX,
	       "a small message fits a small record");

ssize_t shm_recv_small_begin(struct tcp_chan *tc, void *hdr, size_t n)
{
	struct shm_link *l = tc->shm;
	ssize_t k;

	if (l->broken)
		return -1;
	k = shm_ring_small_begin(&l->rx, hdr, n);
	if (k < 0)
		l->broken = "corrupt ring";
	return k < 0 ? -1 : k;
}

void shm_recv_small_end(struct tcp_chan *tc, void *dst, size_t off, size_t n)
{
	shm_ring_small_end(&tc->shm->rx, dst, off, n);
}

int shm_small_alone(const struct tcp_chan *tc)
{
	const struct shm_link *l = tc->shm;

	return l->broken ? -1 : shm_ring_small_alone(&l->rx);
}

bool shm_rx_pending(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;

	return l->broken || shm_ring_pending(&l->rx);
}

void shm_recv_small_done(struct tcp_chan *tc)
{
	wake_producer(tc->shm);
}

uint64_t shm_rx_mark(const struct tcp_chan *tc)
{
	const struct shm_link *l = tc->shm;

	return l->rx.rec ? 1 : l->rx.pos;	/* (records are 8-aligned) */
}

bool shm_rx_idle_at(const struct tcp_chan *tc, uint64_t mark)
{
	const struct shm_link *l = tc->shm;

	return shm_ring_empty_at(&l->rx, mark) &&
	       atomic_load_explicit(&l->rx.ctl->ack, memory_order_relaxed) ==
		       atomic_load_explicit(&l->ack_seen, memory_order_relaxed) &&
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

void shm_tx_watch(struct tcp_chan *tc, uint64_t now)
{
	struct shm_link *l = tc->shm;

	if (!l->tx.ctl || !shm_ring_stalled(&l->tx, now, SHM_KICK_NS))
		return;
	atomic_store_explicit(&l->tx.ctl->kick, 1, memory_order_relaxed);
	wake(l->efd_peer);	/* (a system call: the store is seen first) */
	chan_stat_inc(&chan_stats.shm_kicks);
}

bool shm_kicked(struct tcp_chan *tc)
{
	struct shm_ring_ctl *c = tc->shm ? tc->shm->rx.ctl : NULL;

	return c && atomic_load_explicit(&c->kick, memory_order_relaxed) &&
	       atomic_exchange_explicit(&c->kick, 0, memory_order_relaxed);
}

bool shm_pullable(const struct tcp_chan *tc, const void *p, size_t len, enum shm_pull_use use)
{
	static const size_t least[] = {
		[SHM_PULL_RESP] = SHM_PULL_MIN,
		[SHM_PULL_REQ] = SHM_PULL_MIN_REQ,
		[SHM_PULL_STREAM] = SHM_PULL_MIN_STREAM,
	};
	struct shm_map_loc m;
	uint8_t b;

	if (len < least[use])
		return false;
	/* (a peer that cannot pull may still map what is in a memfd) */
	if (!tc->shm_pull_ok && !(tc->shm_map_ok && shm_map_find(p, len, &m)))
		return false;
	/* A buffer already unmapped goes inline, where the copy finds the
	 * fault at once. Its first and last bytes are probed (a system call
	 * per piece, msync, cost more than the copy saved); a hole in the
	 * middle, or an unmap after this, is found by the peer's pull, which
	 * reads zeros and marks the record: shm_faults_locked. Either way
	 * the WQE fails with IBV_WC_LOC_PROT_ERR, as over TCP. */
	return !mem_read(&b, (uintptr_t)p, 1) && !mem_read(&b, (uintptr_t)p + len - 1, 1);
}

int shm_watch_locked(struct tcp_chan *tc, bool on)
{
	/* (after shm_shut, which takes no lock, the eventfd is out of the
	 * set: the change fails with ENOENT, and changes nothing) */
	if (!tc->shm || tc->epl.fd < 0)
		return -ENOENT;
	return progress_mod(tc->tctx->pg, &tc->epl, on ? EPOLLIN : 0);
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
	shm_link_free(tc->shm);
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
		"shm_mapped %llu shm_links %llu shm_refused %llu ud_sent %llu ud_received %llu "
		"shm_direct %llu shm_kicks %llu shm_graced %llu tcp_poll_late %llu shm_left %llu "
		"rx_waited %llu rx_quick %llu shm_fenced %llu shm_full %llu poll_quiet %llu "
		"shm_helped %llu tcp_out_shm %llu poll_foreign %llu shm_ack_words %llu\n",
		(int)getpid(), (unsigned long long)t, (unsigned long long)s,
		(unsigned long long)atomic_load(&chan_stats.shm_pulled),
		(unsigned long long)atomic_load(&chan_stats.shm_mapped),
		(unsigned long long)atomic_load(&chan_stats.shm_links),
		(unsigned long long)atomic_load(&chan_stats.shm_refused),
		(unsigned long long)us, (unsigned long long)ur,
		(unsigned long long)atomic_load(&chan_stats.shm_direct),
		(unsigned long long)atomic_load(&chan_stats.shm_kicks),
		(unsigned long long)atomic_load(&chan_stats.shm_graced),
		(unsigned long long)atomic_load(&chan_stats.tcp_poll_late),
		(unsigned long long)atomic_load(&chan_stats.shm_left),
		(unsigned long long)atomic_load(&chan_stats.rx_waited),
		(unsigned long long)atomic_load(&chan_stats.rx_quick),
		(unsigned long long)atomic_load(&chan_stats.shm_fenced),
		(unsigned long long)atomic_load(&chan_stats.shm_full),
		(unsigned long long)atomic_load(&chan_stats.poll_quiet),
		(unsigned long long)atomic_load(&chan_stats.shm_helped),
		(unsigned long long)atomic_load(&chan_stats.tcp_out_shm),
		(unsigned long long)atomic_load(&chan_stats.poll_foreign),
		(unsigned long long)atomic_load(&chan_stats.shm_ack_words));
}
