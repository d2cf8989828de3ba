/* The same-host channel's help board (DESIGN.md decision 23, "one
 * copy"): a consumer whose copy of a mapped record's payload lands in
 * one of its own shared ranges posts part of it on its board, and the
 * producer, which can map that range too, copies that part while the
 * consumer copies the rest. The producer serves the board from its polls
 * (shm_help_serve); the consumer settles each part before anything can
 * see the message done. Moved from shm.c as it was.
 */
#include "chan/shm_priv.h"
#include "chan/shm_map.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>

void shm_help_setup(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;
	const char *v = getenv("SOFTRNIC_SHM_HELP");

	/* Both ways need pidfd_getfd, which needs the ptrace access that
	 * pulling proves: the peer's of us, and ours of it. */
	l->help_ok = tc->shm_pull_ok && l->pidfd >= 0 && !l->via_fdsrv && !(v && *v == '0');
}

/* Consumer (rx_lock): our own copy of an outstanding part (the producer
 * declined, failed, or wrote something we did not ask for), from the
 * producer's memfd mapped again (the record's mapping may have been
 * replaced since) or else pulled from its address. 0 or -EFAULT. */
static int help_copy_self(struct shm_link *l, const struct shm_help_part *p)
{
	const void *src = shm_io_map(l, p->loc.fd, p->loc.ino, p->loc.off, p->len);
	struct iovec v = { p->dst, p->len };

	if (src)
		return shm_io_put(p->dst, src, p->len);
	return shm_io_pull(l, &v, 1, p->raddr, p->len) == (ssize_t)p->len ? 0 : -EFAULT;
}

/* Consumer (rx_lock): settle request seq, the oldest outstanding: take it
 * back if the producer has not taken it, wait for it if it is copying,
 * copy it ourselves on anything but its DONE. The producer's share
 * follows: less when it comes late (the request waits untaken, or it is
 * still copying when we need it: at the reuse of its slot, or in
 * sync), more when it was done in time. 0, -EFAULT (our memory), or
 * -EPROTO (the producer took a part and did not finish it). */
static int help_settle(struct shm_link *l, uint64_t seq, bool tail)
{
	struct shm_help *b = &l->help_post->slot[seq % SHM_HELP_SLOTS];
	const struct shm_help_part *p = &l->help_out[seq % SHM_HELP_SLOTS];
	uint64_t s = seq << 8 | SHM_HELP_POSTED, start = 0;
	int ret = 0;

	l->help_settled = seq;
	if (atomic_compare_exchange_strong_explicit(&b->state, &s, seq << 8 | SHM_HELP_RECLAIMED,
						    memory_order_relaxed, memory_order_relaxed)) {
		if (l->help_idle < SHM_HELP_UNTAKEN)
			l->help_idle++;
		if (l->help_part > 4)
			l->help_part--;
		goto ourselves;
	}
	l->help_idle = 0;
	if (s == (seq << 8 | SHM_HELP_DONE)) {
		if (l->help_part < 48)
			l->help_part++;
	} else if (!tail && l->help_part > 4) {
		l->help_part--;
	}
	/* Taken: the producer copies at most 3/4 of SHM_REC_MAX, a few
	 * microseconds, unless it lost its CPU, maybe to us: after
	 * SHM_HELP_SPIN_NS we yield ours. */
	for (unsigned int spins = 0; s == (seq << 8 | SHM_HELP_TAKEN); spins++) {
		if ((spins & 63) == 63) {
			uint64_t t = progress_now_ns();

			if (!start) {
				start = t;
			} else if (t - start >= SHM_HELP_SPIN_NS) {
				if (t - start >= SHM_HELP_WAIT_NS) {
					l->broken = "the peer took a copy and did not finish it";
					return -EPROTO;
				}
				if (!shm_peer_alive(l))
					goto ourselves;	/* (it writes no more) */
				sched_yield();
			}
		}
		cpu_relax();
		s = atomic_load_explicit(&b->state, memory_order_acquire);
	}
	if (s == (seq << 8 | SHM_HELP_DONE))
		return 0;
ourselves:
	/* (declined, failed, or anything the producer should not have written) */
	if (help_copy_self(l, p))
		ret = -EFAULT;
	return ret;
}

static int shm_help_drain_link(struct shm_link *l)
{
	int ret = l->help_fault ? -EFAULT : 0;

	l->help_fault = false;
	while (l->help_settled != l->help_seq) {
		int e = help_settle(l, l->help_settled + 1, true);

		if (e == -EPROTO)
			return e;
		if (e)
			ret = e;
	}
	return ret;
}

int shm_help_drain(struct tcp_chan *tc)
{
	return tc->shm ? shm_help_drain_link(tc->shm) : 0;
}

bool shm_help_pending(const struct tcp_chan *tc)
{
	return tc->shm && tc->shm->help_settled != tc->shm->help_seq;
}

void shm_help_async(struct tcp_chan *tc, bool on)
{
	if (tc->shm)
		tc->shm->help_async = on;
}

/* Consumer (rx_lock): a mapped record's len bytes, src -> dst, where dst
 * (application memory, checked by the core) lies in one of our shared
 * ranges, so the producer can write it too. We post the last part on our
 * board, then copy the first. Two cores copy twice what one does (a
 * 16 MiB copy split over two threads here: 228 -> 382 Gb/s with memcpy,
 * 292 -> 440 with rep movsb); the producer's share (help_part) follows
 * how late it comes. A segment of a WRITE with more to come leaves the
 * part outstanding (help_async), settled when its board slot comes
 * round again or when the WRITE's last segment is in (shm_help_drain,
 * before anything can see the WRITE done): the producer sees a request
 * 0.5-1 us after it is posted (the line crossing, its own program's
 * calls between its looks), which a wait per 64 KiB record paid every
 * time. Anything else settles at once. Returns len, 0 to let the caller
 * copy, -EFAULT, -EPROTO. */
ssize_t shm_io_help(void *arg, void *dst, const void *src, size_t len, uint64_t raddr,
		    const struct shm_ring_loc *loc)
{
	struct shm_link *l = arg;
	struct shm_help *b;
	struct shm_help_part *p;
	struct shm_map_loc me;
	size_t theirs, mine;
	uint64_t seq;
	bool faulted;
	int e;

	if (!l->help_ok || len < SHM_HELP_MIN)
		return 0;
	/* A producer that let SHM_HELP_UNTAKEN requests in a row be taken back
	 * (nobody polls there) is asked again only every SHM_HELP_UNTAKEN-th
	 * record: the look costs a lookup and a split copy. */
	if (l->help_idle >= SHM_HELP_UNTAKEN && ++l->help_idle % SHM_HELP_UNTAKEN)
		return 0;
	if (!shm_map_find(dst, len, &me) || me.fd < 0 || me.off > me.size ||
	    len > me.size - me.off)
		return 0;
	seq = (l->help_seq + 1) & (UINT64_MAX >> 8);
	/* The slot's last request first (its copy may map again: src is
	 * looked up afresh after it). */
	if (l->help_seq - l->help_settled >= SHM_HELP_SLOTS) {
		e = help_settle(l, l->help_settled + 1, false);
		if (e == -EPROTO)
			return e;
		if (e)
			l->help_fault = true;
		src = shm_io_map(l, loc->fd, loc->ino, loc->off, len);
		if (!src)
			return 0;
	}
	theirs = (len * l->help_part / 64) & ~(size_t)63;
	mine = len - theirs;
	l->help_seq = seq;
	p = &l->help_out[seq % SHM_HELP_SLOTS];
	*p = (struct shm_help_part){ .dst = (uint8_t *)dst + mine, .len = theirs,
				     .raddr = raddr + mine, .loc = *loc };
	p->loc.off += mine;
	b = &l->help_post->slot[seq % SHM_HELP_SLOTS];
	atomic_store_explicit(&b->src, raddr + mine, memory_order_relaxed);
	atomic_store_explicit(&b->len, theirs, memory_order_relaxed);
	atomic_store_explicit(&b->ino, me.ino, memory_order_relaxed);
	atomic_store_explicit(&b->off, me.off + mine, memory_order_relaxed);
	atomic_store_explicit(&b->fd, (uint32_t)me.fd, memory_order_relaxed);
	atomic_store_explicit(&b->state, seq << 8 | SHM_HELP_POSTED, memory_order_release);
	atomic_store_explicit(&l->help_post->posted, seq, memory_order_release);
	faulted = shm_io_put(dst, src, mine) != 0;
	if (!l->help_async || faulted) {
		/* (a part that could not be placed, this one's or an earlier
		 * segment's, fails the message: -EFAULT, never a short copy
		 * that a read of the rest would make whole) */
		e = shm_help_drain_link(l);
		if (e == -EPROTO)
			return e;
		if (faulted || e)
			return -EFAULT;
	}
	return (ssize_t)len;
}

void shm_help_serve(struct tcp_chan *tc)
{
	struct shm_link *l = tc->shm;
	struct shm_help_board *bd = l->help_serve;
	uint64_t posted = atomic_load_explicit(&bd->posted, memory_order_acquire);

	if (posted == l->help_served || !l->help_ok || pthread_mutex_trylock(&l->help_lock))
		return;
	/* (the consumer's count is not trusted: at most a board's worth a
	 * look, the newest) */
	posted = atomic_load_explicit(&bd->posted, memory_order_acquire);
	if (posted - l->help_served > SHM_HELP_SLOTS)
		l->help_served = posted - SHM_HELP_SLOTS;
	while (l->help_served != posted) {
		uint64_t seq = ++l->help_served, src, len, ino, off;
		struct shm_help *b = &bd->slot[seq % SHM_HELP_SLOTS];
		uint64_t s = seq << 8 | SHM_HELP_POSTED;
		struct shm_map_loc m;
		uint8_t *dst;
		bool ok;

		if (!atomic_compare_exchange_strong_explicit(&b->state, &s, seq << 8 | SHM_HELP_TAKEN,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;	/* (taken back, or not what we were told) */
		/* (read once; the consumer does not change them while we
		 * hold the request, and if it does, only its own copy is
		 * wrong) */
		src = atomic_load_explicit(&b->src, memory_order_relaxed);
		len = atomic_load_explicit(&b->len, memory_order_relaxed);
		ino = atomic_load_explicit(&b->ino, memory_order_relaxed);
		off = atomic_load_explicit(&b->off, memory_order_relaxed);
		/* Only from our own shared memory (what the peer maps
		 * anyway), only into its memfd, inside it (shm_cache_map checks
		 * off + len). */
		ok = len && len <= SHM_REC_MAX && src + len > src &&
		     shm_map_find((const void *)(uintptr_t)src, (size_t)len, &m);
		dst = ok ? shm_cache_map(l, l->wmaps, &l->wmap_clock, &l->wmap_last,
					 PROT_READ | PROT_WRITE,
					 atomic_load_explicit(&b->fd, memory_order_relaxed), ino, off,
					 (size_t)len)
			 : NULL;
		ok = dst && !mem_read(dst, (uintptr_t)src, (size_t)len);
		if (ok)
			chan_stat_add(&chan_stats.shm_helped, len);
		atomic_store_explicit(&b->state, seq << 8 | (ok ? SHM_HELP_DONE : SHM_HELP_FAILED),
				      memory_order_release);
	}
	pthread_mutex_unlock(&l->help_lock);
}
