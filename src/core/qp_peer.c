/* When the peer cannot answer any more: its QP is gone (the stream said
 * so: what is in flight fails once the transport's retries would have run
 * out) or the stream is lost (the head WQE fails at once, the rest are
 * flushed). */
#include "core/qp.h"

/* Fail the head WQE as a transport retry would, then enter ERROR.
 * Caller holds qp->lock. */
void qp_fail_retry_locked(struct sr_qp *qp)
{
	if (qp->sq_head != qp->sq_tail) {
		struct sr_swqe *w = sq_at(qp, qp->sq_head);

		if (w->state != SR_WQE_DONE) {
			if (qp->sq_next == qp->sq_head)
				qp->sq_next++;
			sq_settle_locked(qp, w, IBV_WC_RETRY_EXC_ERR);
		}
	}
	qp_to_error_locked(qp);
}

static void qp_gone_fire(struct sr_timer *t)
{
	struct sr_qp *qp = container_of(t, struct sr_qp, gone_timer);

	sr_mutex_lock(&qp->lock);
	/* peer_gone is cleared by a reset: a reconnected QP is not ours */
	if (qp->peer_gone && qp->sq_head != qp->sq_tail &&
	    qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_SQE)
		qp_fail_retry_locked(qp);
	sr_mutex_unlock(&qp->lock);
}

/* How long IB's transport retries take to run out: 4.096 us x
 * 2^timeout, retry_cnt + 1 times (IBTA 9.7.6.1.3), or 8 s for timeout 0
 * (infinite) so nothing hangs for ever. */
static uint64_t retry_budget_ns(const struct sr_qp *qp)
{
	return qp->attr.timeout ? (4096ULL << qp->attr.timeout) * (qp->attr.retry_cnt + 1ULL)
				: 8000000000ULL;
}

/* The peer QP is gone: what is in flight, or posted from now on, fails
 * as IB's transport retries would, once they run out (retry_budget_ns).
 * Caller holds qp->lock. */
void qp_gone_arm_locked(struct sr_qp *qp)
{
	uint64_t ns = retry_budget_ns(qp);

	if (!qp->rnr_pg)
		qp->rnr_pg = chan_progress(qp->ctx);
	if (!qp->rnr_pg) {
		qp_fail_retry_locked(qp);
		return;
	}
	qp->gone_timer.fire = qp_gone_fire;
	if (!qp->gone_timer.armed)
		progress_timer_arm(qp->rnr_pg, &qp->gone_timer, ns);
}

void qp_chan_gone(struct sr_qp *qp)
{
	sr_mutex_lock(&qp->lock);
	qp->peer_gone = true;
	if (qp->sq_head != qp->sq_tail)
		sr_dbg("QP %#x: the peer destroyed its QP with %u WQEs unanswered",
		       qp->ibqp.qp_base.qp_num, qp->sq_tail - qp->sq_head);
	if (qp->sq_head != qp->sq_tail && qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_SQE)
		qp_gone_arm_locked(qp);
	sr_mutex_unlock(&qp->lock);
}

void qp_chan_lost(struct sr_qp *qp)
{
	sr_mutex_lock(&qp->lock);
	if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET) {
		/* The WQE at the head will never get its answer: it fails as
		 * a transport retry would; the rest are flushed. */
		if (qp->sq_head != qp->sq_next) {
			struct sr_swqe *w = sq_at(qp, qp->sq_head);

			if (w->state == SR_WQE_SENT)
				sq_settle_locked(qp, w, IBV_WC_RETRY_EXC_ERR);
		}
		qp_to_error_locked(qp);
		ctx_async_event(qp->ctx, qp, IBV_EVENT_QP_FATAL);
	}
	sr_mutex_unlock(&qp->lock);
}

static void qp_undialed_fire(struct sr_timer *t)
{
	struct sr_qp *qp = container_of(t, struct sr_qp, dial_timer);
	uint64_t now = progress_now_ns();

	sr_mutex_lock(&qp->lock);
	if (qp->dial_fail_at && !qp->chan && qp->sq_head != qp->sq_tail &&
	    qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_SQE) {
		if (now < qp->dial_fail_at) {
			/* (armed for a sooner wait, before a reset: the rest) */
			progress_timer_arm(qp->rnr_pg, &qp->dial_timer, qp->dial_fail_at - now);
		} else if (qp_type(qp) == IBV_QPT_UC) {
			/* UC: sent and lost, as on IB towards a QP that is
			 * not there (no answer ever tells); a later post
			 * waits again. Not a local operation, which only
			 * runs in order, on a channel. */
			sr_dbg("QP %#x: no stream from QP %#x within a second: %u UC WQEs "
			       "complete unsent", qp->ibqp.qp_base.qp_num, qp->attr.dest_qp_num,
			       qp->sq_tail - qp->sq_next);
			while (qp->sq_next != qp->sq_tail) {
				struct sr_swqe *w = sq_at(qp, qp->sq_next);

				if (w->opcode == IBV_WR_LOCAL_INV || w->opcode == IBV_WR_BIND_MW)
					break;
				qp->sq_next++;
				sq_settle_locked(qp, w, IBV_WC_SUCCESS);
			}
			qp->dial_fail_at = 0;
		} else {
			sr_dbg("QP %#x: no stream from QP %#x within the transport's retries: "
			       "%u WQEs fail", qp->ibqp.qp_base.qp_num, qp->attr.dest_qp_num,
			       qp->sq_tail - qp->sq_head);
			qp_fail_retry_locked(qp);
		}
	}
	sr_mutex_unlock(&qp->lock);
}

void qp_undialed_arm_locked(struct sr_qp *qp)
{
	uint64_t ns;

	if (qp->dial_fail_at || (qp_type(qp) != IBV_QPT_RC && qp_type(qp) != IBV_QPT_UC) ||
	    qp->state != IBV_QPS_RTS || qp->sq_head == qp->sq_tail)
		return;
	if (qp->chan) {
		/* Our own dial, refused so far (nobody listens there): the
		 * channel gives up by the same time, failing the head WQE
		 * with IBV_WC_RETRY_EXC_ERR (qp_chan_lost). RC only: a UC
		 * dialer's requests wait for its dial (HS_TIMEOUT_NS). */
		if (qp_type(qp) != IBV_QPT_RC || !qp->attr.timeout || !qp->chan->ops->await ||
		    !atomic_load_explicit(&qp->chan->dialing, memory_order_relaxed))
			return;
		ns = sr_max(retry_budget_ns(qp), 1000000000ULL);
		qp->dial_fail_at = progress_now_ns() + ns;
		qp->chan->ops->await(qp->chan, ns);
		return;
	}
	if (!qp->rnr_pg)
		qp->rnr_pg = chan_progress(qp->ctx);
	if (!qp->rnr_pg)
		return;		/* (no progress thread: they wait, as before) */
	/* A second at least: IB has no connection to set up, we do, and a
	 * peer's dial on a loaded machine may take that long (UC, which has
	 * no retries: the second). RC with timeout 0 (infinite): as long as
	 * a dialer waits for its peer, tcp_priv.h HS_TIMEOUT_NS. */
	if (qp_type(qp) == IBV_QPT_UC)
		ns = 1000000000ULL;
	else if (qp->attr.timeout)
		ns = sr_max(retry_budget_ns(qp), 1000000000ULL);
	else
		ns = 60000000000ULL;
	qp->dial_fail_at = progress_now_ns() + ns;
	qp->dial_timer.fire = qp_undialed_fire;
	/* (armed for a wait before a reset: it fires at the sooner, and
	 * looks again) */
	progress_timer_arm_by(qp->rnr_pg, &qp->dial_timer, ns);
}
