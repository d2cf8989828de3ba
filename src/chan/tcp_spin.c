/* Who receives on a stream (DESIGN.md decision 5): a program thread's
 * poll of an idle stream, the progress thread leaving a ring to a
 * poller, and the progress thread's watch after one-sided requests
 * (SOFTRNIC_SPIN_US): a stream whose program does not poll has its READs,
 * atomics and WRITEs served by the progress thread, which then watches
 * the stream a moment for the next one rather than sleep. */
#include "chan/tcp_priv.h"

#include <stdlib.h>
#include <sys/ioctl.h>

/* SOFTRNIC_SPIN_US (microseconds, default 20, 0: none). */
static uint64_t spin_ns(void)
{
	static _Atomic int64_t ns = -1;
	int64_t v = atomic_load_explicit(&ns, memory_order_relaxed);

	if (v < 0) {
		uint64_t us = 20;

		if (sr_env_size("SOFTRNIC_SPIN_US", 1000000, &us) < 0) {
			sr_warn("SOFTRNIC_SPIN_US=%s ignored (microseconds, at most 1000000)",
				getenv("SOFTRNIC_SPIN_US"));
			us = 20;
		}
		v = (int64_t)us * 1000;
		atomic_store_explicit(&ns, v, memory_order_relaxed);
	}
	return (uint64_t)v;
}

/* Has input come since the pass that left the ring at mark (shm), or is
 * any waiting in the socket (a system call)? */
static bool rx_input_waits(struct tcp_chan *tc, uint64_t mark)
{
	int n = 0;

	if (tc->shm_rx)
		return !shm_rx_idle_at(tc, mark);	/* (eof and broken too) */
	return ioctl(tc->pl.fd, FIONREAD, &n) != 0 || n > 0;	/* (an error: a pass finds it) */
}

/* A stream whose program does not poll (it sleeps, or waits elsewhere)
 * leaves the progress thread to do what a NIC's own processor would:
 * answer READs and atomics and place WRITEs with no help from the
 * program. Woken for each request, a round trip costs the requester's
 * eventfd write or loopback segment and a CPU's wake-up from idle (8-byte
 * ib_read_lat 5.6 us on shm, 19.4 on TCP). So after a pass that took in
 * such a request, the progress thread watches for the next one for
 * SPIN_US more (on shm the ring's next header word, asking for no wakeup
 * meanwhile; on TCP the socket, with FIONREAD), and sleeps once none came
 * that long, or a pass brought a SEND or immediate data (those involve
 * the program, whose thread then needs the CPU more than a spinning
 * progress thread: ibv_rc_pingpong -e, 8 B, 47-60 us an iteration
 * without, 52-122 with a spin after every pass). It stops at once when a program thread
 * starts polling (poll_owned: the stream is its), and goes back to its
 * other streams and timers after 8 x SPIN_US at most. */
void tcp_rx_spin(struct tcp_chan *tc)
{
	uint64_t limit = spin_ns(), until = 0, end = 0;
	bool shm = false;

	for (;;) {
		uint64_t mark;
		bool onesided;
		/* (shm read after the pass: a SWITCH it took in moves the
		 * stream onto the ring, which this pass then read asking for
		 * no wakeup; the last look below must then ask for one) */
		const char *why = tcp_rx_pass(tc, limit != 0, &onesided, &shm, &mark);

		if (why) {
			tcp_fail(tc, why);
			return;
		}
		if (!limit)
			return;
		if ((shm && (mark & 1)) || !onesided)
			break;	/* (then a pass that may sleep: bytes staged,
				 * or the program is in the loop) */
		if (!until) {
			until = progress_now_ns() + limit;
			/* (the thread serves other streams and timers too) */
			end = until + 7 * limit;
		}
		for (unsigned int n = 1;; n++) {
			if (rx_input_waits(tc, mark))
				break;
			/* (a socket's look is a system call: every time) */
			if (!shm || (n & 63) == 0) {
				bool owned;

				sr_mutex_lock(&tc->lock);
				owned = tc->poll_owned || tc->state != TS_UP || tc->closed;
				sr_mutex_unlock(&tc->lock);
				if (owned)
					return;	/* (a poller asks for no wakeup) */
				/* On TCP, answers that wait for room in the
				 * socket (EPOLLOUT) are sent by the thread's
				 * loop, not this one: 64 KiB ib_read_bw 72 ->
				 * 41-50 Gb/s spinning through them. (On shm
				 * they rarely wait: READ responses name the
				 * payload, the requester pulls it.) */
				if (progress_now_ns() >= until ||
				    (!shm && !atomic_load_explicit(&tc->tx_idle, memory_order_acquire)))
					goto quiet;
			}
			if (shm)
				cpu_relax();
		}
		until = progress_now_ns() + limit;
		if (until > end)
			break;
	}
quiet:
	/* A last look, that asks for a wakeup (a socket's epoll watch is
	 * level-triggered: it reports what came, with no look) */
	if (shm)
		tcp_rx(tc);
}

bool tcp_poll_idle(struct tcp_chan *tc, bool own)
{
	/* The clock is read on one poll in 64: a busy poller polls far more
	 * often than POLL_WINDOW_NS, and a stale stamp only hands the stream
	 * back to the progress thread sooner. */
	unsigned int polls = atomic_load_explicit(&tc->polls, memory_order_relaxed);
	uint64_t mark;

	/* (a lost count between two pollers only moves the next stamp) */
	atomic_store_explicit(&tc->polls, polls + 1, memory_order_relaxed);
	mark = atomic_load_explicit(&tc->rx_mark, memory_order_acquire);
	if ((polls & 63) == 0 || !atomic_load_explicit(&tc->rx_poll_ns, memory_order_relaxed)) {
		uint64_t now = progress_now_ns();

		atomic_store_explicit(&tc->rx_poll_ns, now, memory_order_relaxed);
		if (own)
			atomic_store_explicit(&tc->own_poll_ns, now, memory_order_relaxed);
		if (!(mark & 1))
			shm_tx_watch(tc, now);	/* (an even mark: rings set up) */
	}
	if (mark & 1)
		return false;
	shm_help_serve(tc);	/* (a look at one word, unless asked) */
	return atomic_load_explicit(&tc->tx_idle, memory_order_acquire) && shm_rx_idle_at(tc, mark);
}

/* The progress thread's pass on a ring, every POLL_YIELD_ROUNDS rounds
 * (input keeps coming): is there a program thread that polls this
 * stream's CQ and has polled within POLL_RECENT_NS? Then the ring is left
 * to it (as tcp_shm_event does when woken: the check hands it back in
 * POLL_CHECK_NS if the program is gone) and the pass ends. Its stamp
 * may be milliseconds old only because this thread took the CPU from it:
 * on two CPUs two busy programs and one receiving progress thread share
 * them, and the progress thread kept receiving (a kick, or a wake-up
 * while the stamp was stale, started it) as long as input came: 64 KiB
 * ib_send_bw on shm ran at 30-45 Gb/s in half the runs, 65-95 in the
 * others. A kicked pass (its program may watch memory, not poll) goes on
 * while a WRITE is under way. tc->lock held. */
bool leave_to_poller_locked(struct tcp_chan *tc)
{
	uint64_t last = atomic_load_explicit(&tc->rx_poll_ns, memory_order_relaxed);

	if (!tc->shm_rx || !last || progress_now_ns() - last >= POLL_RECENT_NS ||
	    (tc->rx_kicked && rx_write_under_way(tc)) || tc->rx_waiter)
		return false;
	if (!tc->poll_owned) {
		poll_own_locked(tc, true);
		tcp_timer_arm_locked(tc, POLL_CHECK_NS);
	}
	tc->rx_kicked = false;
	chan_stat_inc(&chan_stats.shm_left);
	return true;
}
