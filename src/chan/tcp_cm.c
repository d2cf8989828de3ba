/* TCP streams brought up by the RDMA CM (DESIGN.md decisions 4 and 9).
 *
 * librdmacm dials or accepts on the application's own port and runs the
 * MPA request/reply exchange itself (src/cm/). What it then holds is a
 * connected socket and what MPA agreed: CRC, IRD/ORD, and whether both ends
 * set softrnic's extension flag. This file turns that into an ordinary
 * tcp_chan in the UP state attached to the QP, so the data path is the
 * one hand-connected QPs use (tcp_tx.c, tcp_rx.c), and reports the end of
 * the stream back to the CM, which raises RDMA_CM_EVENT_DISCONNECTED.
 *
 * Unlike a hand-connected QP, whose peer leaving in an orderly way leaves
 * it alone until it next needs the peer (qp_chan_gone), a CM QP goes to
 * ERROR when its connection ends, flushing its queues: that is what
 * rdma_disconnect(3) promises on both sides.
 */
#include "chan/tcp_priv.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* The connection is over: ERROR, without the QP_FATAL async event a lost
 * hand-connected stream raises (a disconnect is no fault). */
static void cm_qp_error(struct sr_qp *qp)
{
	sr_mutex_lock(&qp->lock);
	if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET)
		qp_to_error_locked(qp);
	sr_mutex_unlock(&qp->lock);
}

void tcp_cm_ended(struct tcp_chan *tc, struct sr_qp *qp, bool orderly)
{
	void (*cb)(void *, bool);
	void *arg;

	cm_qp_error(qp);
	sr_mutex_lock(&tc->lock);
	cb = tc->cm_ended;
	arg = tc->cm_arg;
	tc->cm_ended = NULL;
	tc->cm_busy = cb != NULL;
	sr_mutex_unlock(&tc->lock);
	if (!cb)
		return;
	cb(arg, orderly);
	sr_mutex_lock(&tc->lock);
	tc->cm_busy = false;
	sr_mutex_unlock(&tc->lock);
}

/* No ended() call runs or will run after this. */
static void cm_quiet(struct tcp_chan *tc)
{
	sr_mutex_lock(&tc->lock);
	tc->cm_ended = NULL;
	while (tc->cm_busy) {
		sr_mutex_unlock(&tc->lock);
		sched_yield();
		sr_mutex_lock(&tc->lock);
	}
	sr_mutex_unlock(&tc->lock);
}

int chan_tcp_cm_attach(struct sr_qp *qp, const struct chan_cm_params *p, struct sr_chan **out)
{
	struct sr_tcp_ctx *t = tcp_ctx_get(qp->ctx);
	struct tcp_chan *tc;
	int ret;

	if (!t)
		return -ENOMEM;
	if (p->fd < 0 || p->rx_len > RX_BUF)
		return -EINVAL;
	tc = tcp_chan_new(t, p->fd);
	if (!tc)
		return -ENOMEM;

	sr_mutex_lock(&tc->lock);
	tc->cm = true;
	tc->cm_ended = p->ended;
	tc->cm_arg = p->arg;
	tc->qp = qp;
	tc->local_qpn = qp->ibqp.qp_base.qp_num;
	tc->rc = qp_type_reliable(qp->ibqp.qp_base.qp_type);
	tc->crc = p->crc;
	tc->ext = p->ext;
	/* MPA's initiator speaks first (RFC 6581 §1): a responder waits
	 * for its first FPDU; Linux siw as the initiator fails a stream whose
	 * first responder bytes come right behind the MPA reply. Programs
	 * whose server speaks first (ucmatose) would then wait for ever
	 * without RTR, which siw never sends: after TX_GATE_NS the gate
	 * opens anyway (tcp_on_timer). softrnic initiators need no wait.
	 *
	 * Linux siw as the responder has the opposite trouble: siw_accept()
	 * sends the MPA reply first and moves the socket under the QP
	 * after, and an FPDU landing in between is left unread in siw's
	 * socket until more bytes come. A program that sends one message
	 * and waits for the answer (rping, perftest's handshake) then waits
	 * for ever. So an initiator towards a plain iWARP peer holds its
	 * first FPDU for INIT_GATE_NS, or until the responder speaks (siw
	 * sends only once its socket is the QP's). */
	tc->tx_gate = !p->ext && !p->rx_len;
	tc->tx_gate_init = tc->tx_gate && !p->responder;
	/* Peer-to-peer mode (RFC 6581 §3): the initiator's RTR comes
	 * first, so the gate waits for it with no time limit (Linux siw
	 * built with peer_to_peer sends it right after our reply). */
	tc->tx_gate_rtr = tc->tx_gate && p->responder && p->rtr_wait;
	tc->ch.acks = p->ext;
	tc->ch.no_send_imm = !p->ext;
	tc->ch.rfc_only = p->plain && !p->ext;
	/* RFC 6581 §3: never more READs outstanding than the responder's
	 * IRD (our ORD): Linux siw ends the stream with a TERMINATE when
	 * its read queue overflows. A softrnic responder queues any number,
	 * so with extensions there is no limit. */
	tc->ch.max_reads = p->ext ? 0 : (p->ord ? p->ord : 1);
	tc->ird = p->ird;
	tc->ord = p->ord;
	if (p->rx_len)
		memcpy(tc->rbuf, p->rx, p->rx_len);
	tc->rlen = p->rx_len;
	/* UP before the progress thread can see it: its first event must
	 * find a data stream, not a handshake. */
	set_state(tc, TS_UP);
	sr_mutex_unlock(&tc->lock);

	sr_mutex_lock(&qp->lock);
	if (qp->chan || qp->dying || qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE) {
		ret = qp->chan ? -EBUSY : -EINVAL;
		sr_mutex_unlock(&qp->lock);
		goto err_unlist;
	}
	qp->cm = true;
	chan_get(&tc->ch);			/* the QP's reference */
	qp->chan = &tc->ch;
	tune_socket(p->fd, qp);
	sr_mutex_unlock(&qp->lock);

	sr_mutex_lock(&tc->lock);
	if (progress_add(t->pg, &tc->pl, EPOLLIN)) {
		tc->cm_ended = NULL;	/* the caller learns from the return */
		sr_mutex_unlock(&tc->lock);
		/* Attached: the QP's own teardown closes the socket now. */
		tcp_fail(tc, "epoll");
		*out = NULL;
		return -ENOMEM;
	}
	tc->events = EPOLLIN;
	if (tc->tx_gate && !tc->tx_gate_rtr)
		tcp_timer_arm_locked(tc, tc->tx_gate_init ? INIT_GATE_NS : TX_GATE_NS);
	shm_offer_locked(tc, !p->responder);
	tcp_flush_locked(tc);
	sr_mutex_unlock(&tc->lock);

	sr_dbg("tcp %p QP %#x: CM stream up (crc %d ext %d ird %u ord %u)", (void *)tc,
	       tc->local_qpn, tc->crc, tc->ext, tc->ird, tc->ord);
	/* Work posted before the stream existed can go now. */
	sr_mutex_lock(&qp->lock);
	qp_sq_progress_locked(qp);
	sr_mutex_unlock(&qp->lock);
	qp_kick(qp);
	/* Bytes that came with the MPA frame are read already: epoll will
	 * not announce them again. */
	if (tc->rlen)
		tcp_rx_try(tc);
	chan_get(&tc->ch);			/* the caller's */
	*out = &tc->ch;
	return 0;

err_unlist:
	/* The caller keeps the socket on failure. */
	sr_mutex_lock(&tc->lock);
	tc->pl.fd = -1;
	tc->cm_ended = NULL;
	tc->qp = NULL;
	set_state(tc, TS_DEAD);
	sr_mutex_unlock(&tc->lock);
	tcp_unlist(tc);
	return ret;
}

void chan_tcp_cm_disconnect(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);
	bool mine = tc->tctx->ctx->owner == sr_getpid();
	struct sr_qp *qp;

	cm_quiet(tc);
	/* What already arrived is the application's, as on tcp_close. */
	if (mine)
		tcp_rx(tc);
	sr_mutex_lock(&tc->lock);
	qp = tc->closed ? NULL : tc->qp;
	if (qp)
		qp_get(qp);
	if (tc->state == TS_UP && tc->pl.fd >= 0 && mine) {
		bye_queue_locked(tc);
		tcp_drain_locked(tc);
	}
	sr_mutex_unlock(&tc->lock);
	sr_mutex_lock(&tc->rx_lock);
	sr_mutex_unlock(&tc->rx_lock);
	tcp_shut(tc);
	/* The dead channel stays attached until the QP is destroyed or
	 * reset (qp_unlink then closes it), as after a lost stream. */
	if (qp) {
		cm_qp_error(qp);
		qp_put(qp);
	}
}

void chan_tcp_cm_release(struct sr_chan *ch)
{
	cm_quiet(to_tc(ch));
	chan_put(ch);
}
