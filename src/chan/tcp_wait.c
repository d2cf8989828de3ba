/* A program thread that blocks for a completion event receives on its
 * streams itself (DESIGN.md decision 5, "a program thread waiting for an
 * event").
 *
 * The peer's message wakes the progress thread (a ring's eventfd, or the
 * socket), which takes it in, makes the completion, and writes the
 * completion channel, which wakes the program thread blocked in
 * ibv_get_cq_event: two wake-ups a message and two threads passing it
 * on. While a program thread waits in ibv_get_cq_event, the streams
 * whose QPs complete into CQs of that channel are taken from the
 * progress thread instead (a ring's eventfd leaves its epoll set; a
 * socket keeps only EPOLLRDHUP there) and the waiting thread sleeps on
 * them and on the channel together: the peer's message wakes the thread
 * that wants the event, which receives as the progress thread would (on
 * a ring its pass asks the peer for the next wake-up itself, rx_sleep)
 * and finds the event queued. On the way out the streams go back to the
 * progress thread, whose epoll is level-triggered: what came meanwhile
 * is seen at once, and a ring left with input gets a wake-up of its own.
 */
#include "chan/tcp_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#define WAIT_STREAMS	16

struct waited {
	struct tcp_chan *tc;
	int fd;			/* our dup of the stream's eventfd (shm) or
				 * socket: the stream may close its own
				 * meanwhile, and its number be reused */
	bool shm;
	bool held;		/* still ours (not given back early) */
};

/* Does tc's QP complete into a CQ of chan? */
static bool on_channel(const struct tcp_chan *tc, const struct ibv_comp_channel *chan)
{
	const struct sr_qp *qp = tc->qp;

	return qp && ((qp->rcq && qp->rcq->ibcq.channel == chan) ||
		      (qp->scq && qp->scq->ibcq.channel == chan));
}

/* May a waiter on chan take tc? Not a socket held back (read no more
 * until receives are posted: its input would wake us for nothing).
 * tc->lock held. */
static bool wait_match(const struct tcp_chan *tc, const struct ibv_comp_channel *chan)
{
	return tc->state == TS_UP && !tc->closed && !tc->rx_waiter && on_channel(tc, chan) &&
	       (tc->shm_rx || (tc->pl.fd >= 0 && !tc->rx_paused));
}

/* The progress thread no longer watches tc for input (on false), or again.
 * tc->lock held. 0 or -errno. */
static int wait_watch_locked(struct tcp_chan *tc, bool shm, bool on)
{
	if (shm)
		return shm_watch_locked(tc, on);
	/* (the socket: rx_events leaves EPOLLIN out while rx_waiter) */
	want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	return !on == !(tc->events & EPOLLIN) ? 0 : -EIO;
}

/* What the progress thread does on an event of the stream (tcp_shm_event,
 * tcp_on_event), but never leave it to a poller: nobody polls while we
 * wait. False if the stream is no longer one to wait on. */
static bool wait_event(struct waited *w)
{
	struct tcp_chan *tc = w->tc;
	uint64_t v;
	bool up;

	if (w->shm && read(w->fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing written since the last read */
	}
	sr_mutex_lock(&tc->lock);
	up = tc->state == TS_UP && !tc->closed;
	if (up) {
		tcp_flush_locked(tc);
		if (w->shm)
			(void)shm_kicked(tc);	/* (a kick asks for a read: we read) */
	}
	sr_mutex_unlock(&tc->lock);
	if (!up)
		return false;
	chan_stat_inc(&chan_stats.rx_waited);
	if (tc->nfaults || tc->tx_written)
		tcp_tx_faults(tc);
	tcp_rx(tc);
	sr_mutex_lock(&tc->lock);
	/* (a socket held back, or ended, stays readable: not ours to poll) */
	up = tc->state == TS_UP && !tc->closed && (w->shm || !tc->rx_paused);
	sr_mutex_unlock(&tc->lock);
	return up;
}

/* Take the streams a waiter on chan may take (up to WAIT_STREAMS): a
 * reference and a dup of the descriptor of each, in w. How many. */
static int wait_take(struct sr_tcp_ctx *t, const struct ibv_comp_channel *chan, struct waited *w)
{
	struct tcp_chan *cand[WAIT_STREAMS];
	struct sr_list *pos, *tmp;
	int n = 0, k = 0;

	pthread_mutex_lock(&t->lock);
	sr_list_for_each_safe(pos, tmp, &t->streams) {
		struct tcp_chan *tc = container_of(pos, struct tcp_chan, link);

		if (n == WAIT_STREAMS)
			break;
		/* (listed: alive while we hold t->lock; a look without its
		 * lock, matched again under it below: a stream's QP and its
		 * CQs stay while it is UP) */
		if (tc->state == TS_UP && !tc->closed && on_channel(tc, chan)) {
			chan_get(&tc->ch);
			cand[n++] = tc;
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++) {
		struct tcp_chan *tc = cand[i];
		bool shm = false;
		int fd = -1;

		sr_mutex_lock(&tc->lock);
		if (wait_match(tc, chan)) {
			shm = tc->shm_rx;
			fd = fcntl(shm ? tc->epl.fd : tc->pl.fd, F_DUPFD_CLOEXEC, 0);
		}
		if (fd >= 0) {
			/* A stream left to a poller: the empty poll a program
			 * makes after arming, before it sleeps, stamps it as
			 * polled, and the progress thread then leaves it to
			 * that poller, gone to sleep here (arming gave back
			 * what polls had before: chan_tcp_unpoll). Ours. */
			atomic_store_explicit(&tc->rx_poll_ns, 0, memory_order_relaxed);
			poll_own_locked(tc, false);
			tc->rx_waiter = true;
			if (wait_watch_locked(tc, shm, false)) {
				tc->rx_waiter = false;
				wait_watch_locked(tc, shm, true);
				close(fd);
				fd = -1;
			}
		}
		sr_mutex_unlock(&tc->lock);
		if (fd < 0) {
			chan_put(&tc->ch);
			continue;
		}
		w[k++] = (struct waited){ .tc = tc, .fd = fd, .shm = shm, .held = true };
	}
	return k;
}

static void wait_give_back(struct waited *w)
{
	struct tcp_chan *tc = w->tc;
	uint64_t mark = atomic_load_explicit(&tc->rx_mark, memory_order_acquire);

	if (!w->held)
		return;
	w->held = false;
	sr_mutex_lock(&tc->lock);
	tc->rx_waiter = false;
	if (tc->state == TS_UP && !tc->closed && !wait_watch_locked(tc, w->shm, true) && w->shm &&
	    ((mark & 1) || !shm_rx_idle_at(tc, mark)))
		shm_self_wake(tc);	/* input our last pass left in the ring
					 * (it stopped early): the progress
					 * thread's now (a socket's input is
					 * seen at once: level-triggered) */
	sr_mutex_unlock(&tc->lock);
	close(w->fd);
	chan_put(&tc->ch);
}

int chan_tcp_wait(struct sr_context *ctx, const struct ibv_comp_channel *chan, int evfd)
{
	struct sr_tcp_ctx *t = ctx->tcp;
	struct waited w[WAIT_STREAMS];
	struct pollfd pfd[WAIT_STREAMS + 1];
	int n, ret = 0;

	if (!t || ctx->owner != sr_getpid())
		return 0;	/* (a forked child: nothing here is its own) */
	n = wait_take(t, chan, w);
	if (!n)
		return 0;
	for (int i = 0; i < n; i++)
		pfd[i + 1].revents = POLLIN;	/* (a first pass on each) */
	for (;;) {
		pfd[0] = (struct pollfd){ .fd = evfd, .events = POLLIN };
		for (int i = 0; i < n; i++) {
			if (w[i].held && pfd[i + 1].revents && !wait_event(&w[i]))
				wait_give_back(&w[i]);
			pfd[i + 1] = (struct pollfd){ .fd = w[i].held ? w[i].fd : -1,
						      .events = POLLIN };
		}
		if (poll(pfd, (nfds_t)n + 1, -1) < 0) {
			/* a signal ends the wait, as it ends a read of the
			 * channel; anything else leaves it to that read */
			ret = errno == EINTR ? -EINTR : 0;
			break;
		}
		if (pfd[0].revents)
			break;		/* an event (or the channel's end) */
	}
	for (int i = 0; i < n; i++)
		wait_give_back(&w[i]);
	return ret;
}
