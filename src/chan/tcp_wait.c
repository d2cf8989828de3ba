/* A program thread that blocks for a completion event receives on its
 * rings itself (DESIGN.md decision 5, "a program thread waiting for an
 * event").
 *
 * On shm the peer wakes a receiver through an eventfd that the progress
 * thread sleeps on; the progress thread then takes the message in, makes
 * the completion, and writes the completion channel, which wakes the
 * program thread blocked in ibv_get_cq_event: two wake-ups a message and
 * two threads passing it on. While a program thread waits in
 * ibv_get_cq_event, the shm streams whose QPs complete into CQs of that
 * channel are taken from the progress thread instead (their eventfd
 * leaves its epoll set) and the waiting thread sleeps on their eventfds
 * and on the channel together: the peer's write wakes the thread that
 * wants the event, which receives as the progress thread would (its pass
 * asks the peer for the next wake-up itself, rx_sleep) and finds the
 * event queued. On the way out the eventfds go back to the progress
 * thread, whose epoll is level-triggered: a wake-up that came meanwhile
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
	int fd;			/* our dup of the stream's eventfd: the
				 * stream may close its own meanwhile, and
				 * its number be reused */
};

/* May a waiter on chan take tc? Not a ring a poller has (another thread
 * polls the CQ: arming it gave back the rings the waiter's own polls
 * had, chan_tcp_unpoll). tc->lock held. */
static bool wait_match(const struct tcp_chan *tc, const struct ibv_comp_channel *chan)
{
	const struct sr_qp *qp = tc->qp;

	return tc->state == TS_UP && !tc->closed && tc->shm_rx && qp && !tc->poll_owned &&
	       !tc->rx_waiter &&
	       ((qp->rcq && qp->rcq->ibcq.channel == chan) ||
		(qp->scq && qp->scq->ibcq.channel == chan));
}

/* What the progress thread does on our eventfd (tcp_shm_event), but
 * never leave the ring to a poller: nobody polls while we wait. */
static void wait_event(struct waited *w)
{
	struct tcp_chan *tc = w->tc;
	uint64_t v;
	bool up;

	if (read(w->fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing written since the last read */
	}
	pthread_mutex_lock(&tc->lock);
	up = tc->state == TS_UP && !tc->closed;
	if (up) {
		tcp_flush_locked(tc);
		(void)shm_kicked(tc);	/* (a kick asks for a read: we read) */
	}
	pthread_mutex_unlock(&tc->lock);
	if (!up)
		return;
	chan_stat_inc(&chan_stats.shm_waited);
	if (tc->nfaults || tc->tx_written)
		tcp_tx_faults(tc);
	tcp_rx(tc);
}

/* Take the streams a waiter on chan may take (up to WAIT_STREAMS): a
 * reference and a dup of the eventfd of each, in w. How many. */
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
		/* (listed: alive while we hold t->lock; matched again under
		 * the stream's own lock below) */
		if (tc->shm_rx && tc->state == TS_UP && !tc->closed) {
			chan_get(&tc->ch);
			cand[n++] = tc;
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++) {
		struct tcp_chan *tc = cand[i];
		int fd = -1;

		pthread_mutex_lock(&tc->lock);
		if (wait_match(tc, chan)) {
			fd = fcntl(tc->epl.fd, F_DUPFD_CLOEXEC, 0);
			if (fd >= 0 && shm_watch_locked(tc, false)) {
				close(fd);
				fd = -1;
			}
		}
		tc->rx_waiter = fd >= 0;
		pthread_mutex_unlock(&tc->lock);
		if (fd < 0) {
			chan_put(&tc->ch);
			continue;
		}
		w[k].tc = tc;
		w[k++].fd = fd;
	}
	return k;
}

static void wait_give_back(struct waited *w, int n)
{
	for (int i = 0; i < n; i++) {
		struct tcp_chan *tc = w[i].tc;
		uint64_t mark = atomic_load_explicit(&tc->rx_mark, memory_order_acquire);

		pthread_mutex_lock(&tc->lock);
		tc->rx_waiter = false;
		if (tc->state == TS_UP && !tc->closed && !shm_watch_locked(tc, true) &&
		    ((mark & 1) || !shm_rx_idle_at(tc, mark)))
			shm_self_wake(tc);	/* input our last pass left
						 * (it stopped early): the
						 * progress thread's now */
		pthread_mutex_unlock(&tc->lock);
		close(w[i].fd);
		chan_put(&tc->ch);
	}
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
		for (int i = 0; i < n; i++)
			if (pfd[i + 1].revents)
				wait_event(&w[i]);
		pfd[0] = (struct pollfd){ .fd = evfd, .events = POLLIN };
		for (int i = 0; i < n; i++)
			pfd[i + 1] = (struct pollfd){ .fd = w[i].fd, .events = POLLIN };
		if (poll(pfd, (nfds_t)n + 1, -1) < 0) {
			/* a signal ends the wait, as it ends a read of the
			 * channel; anything else leaves it to that read */
			ret = errno == EINTR ? -EINTR : 0;
			break;
		}
		if (pfd[0].revents)
			break;		/* an event (or the channel's end) */
	}
	wait_give_back(w, n);
	return ret;
}
