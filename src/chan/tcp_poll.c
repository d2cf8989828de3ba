/* Which streams a program thread's empty poll of a CQ receives on
 * (DESIGN.md decision 5): the CQ's own (those of the QPs that complete
 * into it), cached in the CQ by the stream list's generation, and the
 * context's other ring streams that nobody polls ("a poller serves
 * streams nobody polls"); and giving them back when the program arms the
 * CQ to sleep. */
#include "chan/tcp_priv.h"

#include <pthread.h>
#include <string.h>

static bool poll_match(const struct tcp_chan *tc, const struct sr_cq *cq)
{
	const struct sr_qp *qp = tc->qp;

	return tc->state == TS_UP && !tc->closed && qp && (qp->scq == cq || qp->rcq == cq);
}

/* More streams than a CQ caches: look at the list, under its lock. */
static void poll_scan(struct sr_tcp_ctx *t, struct sr_cq *cq)
{
	struct tcp_chan *busy[16];
	struct sr_list *pos, *tmp;
	int n = 0;

	if (pthread_mutex_trylock(&t->lock))
		return;
	sr_list_for_each_safe(pos, tmp, &t->streams) {
		struct tcp_chan *tc = container_of(pos, struct tcp_chan, link);

		if (n == (int)ARRAY_SIZE(busy))
			break;
		if (poll_match(tc, cq)) {
			/* (listed: alive while we hold t->lock) */
			if (tcp_poll_idle(tc, true))
				continue;
			chan_get(&tc->ch);
			busy[n++] = tc;
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++) {
		tcp_rx_poll(busy[i], false);
		chan_put(&busy[i]->ch);
	}
}

/* A stream of another CQ's that a poller of this one may serve: up, with
 * a QP (whether it is on a ring, and polled by nobody, foreign_orphan
 * tells as the poll goes on). */
static bool foreign_match(const struct tcp_chan *tc, const struct sr_cq *cq)
{
	return tc->state == TS_UP && !tc->closed && tc->qp && !poll_match(tc, cq);
}

static void foreign_put(struct sr_cq *cq)
{
	for (int i = 0; i < cq->nforeign; i++)
		chan_put(cq->poll_foreign[i]);
	cq->nforeign = 0;
	cq->foreign_mask = 0;
}

/* The streams of cq, again: false if the list is busy. Under poll_lock. */
static bool poll_refill(struct sr_tcp_ctx *t, struct sr_cq *cq, unsigned int gen)
{
	struct sr_chan *old[ARRAY_SIZE(cq->poll_streams)];
	struct sr_chan *oldf[ARRAY_SIZE(cq->poll_foreign)];
	int nold = sr_max(cq->npoll, 0), noldf = cq->nforeign, n = 0, nf = 0;
	struct sr_list *pos, *tmp;
	bool over = false;

	if (pthread_mutex_trylock(&t->lock))
		return false;
	memcpy(old, cq->poll_streams, sizeof(old[0]) * (size_t)nold);
	memcpy(oldf, cq->poll_foreign, sizeof(oldf[0]) * (size_t)noldf);
	sr_list_for_each_safe(pos, tmp, &t->streams) {
		struct tcp_chan *tc = container_of(pos, struct tcp_chan, link);

		if (foreign_match(tc, cq)) {
			/* (past 16, the others stay the progress thread's) */
			if (nf < (int)ARRAY_SIZE(cq->poll_foreign)) {
				chan_get(&tc->ch);
				cq->poll_foreign[nf++] = &tc->ch;
			}
			continue;
		}
		if (!poll_match(tc, cq))
			continue;
		if (n == (int)ARRAY_SIZE(cq->poll_streams)) {
			over = true;
			break;
		}
		chan_get(&tc->ch);
		cq->poll_streams[n++] = &tc->ch;
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < nold; i++)
		chan_put(old[i]);
	for (int i = 0; i < noldf; i++)
		chan_put(oldf[i]);
	cq->nforeign = nf;
	cq->foreign_mask = 0;
	cq->foreign_polls = 0;
	if (over) {
		for (int i = 0; i < n; i++)
			chan_put(cq->poll_streams[i]);
		foreign_put(cq);	/* (its own streams are enough to scan) */
		n = -1;
	}
	cq->npoll = n;
	cq->poll_gen = gen;
	return true;
}

/* Does nobody poll this stream of another CQ's (DESIGN.md decision 5, "a
 * poller serves streams nobody polls")? On a ring (a socket's look is a
 * system call), no thread waiting for its events (that thread takes its
 * input itself), and no poller of its own CQs within POLL_WINDOW_NS. A
 * racy look: a wrong answer only shares a stream's work for a while. */
static bool foreign_orphan(struct tcp_chan *tc, uint64_t now)
{
	uint64_t own = atomic_load_explicit(&tc->own_poll_ns, memory_order_relaxed);

	return __atomic_load_n(&tc->shm_rx, __ATOMIC_RELAXED) &&
	       !__atomic_load_n(&tc->rx_waiter, __ATOMIC_RELAXED) &&
	       (!own || now - own > POLL_WINDOW_NS);
}

/* The poll of an empty CQ, after its own streams: the streams of other
 * CQs that nobody polls, as a poller of their own would (a WRITE's
 * target QP, whose CQ has nothing to poll for, beside the QP the program
 * polls for messages: on two cores a progress thread that takes them in
 * competes with the busy pollers of both sides, 64 KiB ib_write_bw -R
 * -q 2 went at 2-9 GB/s in most runs, against 27-30 in the others). Who
 * is an orphan is looked at one poll in 64; an orphan's idle look is
 * tcp_poll_idle's. Its poller's stamps make the progress thread leave it
 * to us, and take it back when we stop polling (poll_check_locked). */
static void poll_foreign(struct sr_cq *cq)
{
	uint32_t m;

	if ((cq->foreign_polls++ & 63) == 0) {
		uint64_t now = progress_now_ns();

		m = 0;
		for (int i = 0; i < cq->nforeign; i++)
			if (foreign_orphan(to_tc(cq->poll_foreign[i]), now))
				m |= 1u << i;
		cq->foreign_mask = m;
	}
	for (m = cq->foreign_mask; m; m &= m - 1) {
		struct tcp_chan *tc = to_tc(cq->poll_foreign[__builtin_ctz(m)]);

		if (!tcp_poll_idle(tc, false)) {
			chan_stat_inc(&chan_stats.poll_foreign);
			tcp_rx_poll(tc, true);
		}
	}
}

/* An empty CQ's poll: receive on its streams that have something. The
 * streams are cached in the CQ (with a reference each) while the
 * stream list's generation stays, so the poll of an idle stream takes
 * no lock and no reference. */
void chan_tcp_poll(struct sr_context *ctx, struct sr_cq *cq)
{
	struct sr_tcp_ctx *t = ctx->tcp;
	unsigned int gen;

	if (!t || sr_mutex_trylock(&cq->poll_lock))
		return;
	gen = atomic_load_explicit(&t->gen, memory_order_acquire);
	if ((cq->npoll < 0 || cq->poll_gen != gen) && !poll_refill(t, cq, gen))
		goto out;
	if (cq->npoll < 0)
		poll_scan(t, cq);
	for (int i = 0; i < cq->npoll; i++) {
		struct tcp_chan *tc = to_tc(cq->poll_streams[i]);

		if (!tcp_poll_idle(tc, true))
			tcp_rx_poll(tc, false);
	}
	if (cq->nforeign)
		poll_foreign(cq);
out:
	sr_mutex_unlock(&cq->poll_lock);
}

void chan_tcp_cq_forget(struct sr_cq *cq)
{
	for (int i = 0; i < cq->npoll; i++)
		chan_put(cq->poll_streams[i]);
	cq->npoll = -1;
	foreign_put(cq);
}

void chan_tcp_unpoll(struct sr_context *ctx, struct sr_cq *cq)
{
	struct sr_tcp_ctx *t = ctx->tcp;
	struct tcp_chan *owned[64];
	struct sr_chan *served[ARRAY_SIZE(cq->poll_foreign)];
	struct sr_list *pos, *tmp;
	int n = 0, nserved = 0;

	if (!t)
		return;
	/* (the streams of other CQs its polls served go back too) */
	sr_mutex_lock(&cq->poll_lock);
	for (uint32_t m = cq->foreign_mask; m; m &= m - 1)
		served[nserved++] = cq->poll_foreign[__builtin_ctz(m)];
	cq->foreign_mask = 0;
	cq->foreign_polls = 0;
	sr_mutex_unlock(&cq->poll_lock);
	/* (More than 64 poll-owned streams: the others go back at their
	 * next check, within POLL_CHECK_NS.) */
	pthread_mutex_lock(&t->lock);
	sr_list_for_each_safe(pos, tmp, &t->streams) {
		struct tcp_chan *tc = container_of(pos, struct tcp_chan, link);

		if (n < (int)ARRAY_SIZE(owned) && tc->poll_owned) {
			chan_get(&tc->ch);
			owned[n++] = tc;
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++) {
		struct tcp_chan *tc = owned[i];
		bool ours = false;

		for (int k = 0; k < nserved && !ours; k++)
			ours = served[k] == &tc->ch;
		sr_mutex_lock(&tc->lock);
		if (tc->state == TS_UP && !tc->closed && tc->poll_owned && tc->qp &&
		    (tc->qp->scq == cq || tc->qp->rcq == cq || ours)) {
			atomic_store_explicit(&tc->rx_poll_ns, 0, memory_order_relaxed);
			poll_check_locked(tc);
		}
		sr_mutex_unlock(&tc->lock);
		chan_put(&tc->ch);
	}
}
