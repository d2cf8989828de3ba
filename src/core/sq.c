/* The requester: posting send WRs, transmitting them in order through the
 * channel, and completing them in order (IBTA 10.8: completions of a send
 * queue are returned in the order the WRs were posted). */
#include "core/qp.h"
#include "core/raw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool wqe_signaled(struct sr_qp *qp, struct sr_swqe *w)
{
	return qp->sq_sig_all || (w->flags & IBV_SEND_SIGNALED);
}

static enum ibv_wc_opcode wc_opcode(uint32_t op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
	case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
	case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
	default: return IBV_WC_SEND;
	}
}

void qp_sq_reaped(struct sr_qp *qp, uint32_t upto)
{
	uint32_t cur = atomic_load(&qp->sq_reaped);

	/* Free-running indices: move forward only. */
	while ((int32_t)(upto - cur) > 0 &&
	       !atomic_compare_exchange_weak(&qp->sq_reaped, &cur, upto))
		;
}

/* Complete the WQE at sq_head. Caller holds qp->lock. */
static void sq_complete_one(struct sr_qp *qp, struct sr_swqe *w, enum ibv_wc_status st)
{
	struct ibv_wc wc = {
		.wr_id = w->wr_id,
		.status = st,
		.opcode = wc_opcode(w->opcode),
		.qp_num = qp->ibqp.qp_base.qp_num,
	};

	if (st == IBV_WC_SUCCESS) {
		if (w->opcode == IBV_WR_RDMA_READ)
			wc.byte_len = (uint32_t)w->length;
		else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			 w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			wc.byte_len = 8;
		else
			wc.byte_len = (uint32_t)w->length;
	}
	qp_rx_wc_release(qp);	/* (a batch's receive completions first) */
	cq_push_sq(qp->scq, &wc, qp, qp->sq_head + 1);
}

/* Retire finished WQEs from the head, in order. A WQE that failed moves
 * the QP to ERROR, which flushes the rest. Caller holds qp->lock. */
static void sq_retire_locked(struct sr_qp *qp)
{
	while (qp->sq_head != qp->sq_next) {
		struct sr_swqe *w = sq_at(qp, qp->sq_head);

		if (w->state != SR_WQE_DONE)
			break;
		if (w->status != IBV_WC_SUCCESS) {
			sq_complete_one(qp, w, w->status);
			qp->sq_head++;
			qp_to_error_locked(qp);
			return;
		}
		if (wqe_signaled(qp, w))
			sq_complete_one(qp, w, IBV_WC_SUCCESS);
		qp->sq_head++;
	}
	qp_sqd_check_locked(qp);
}

void qp_sqd_check_locked(struct sr_qp *qp)
{
	/* IBTA 10.3.1 "SQ Drain": the WQEs begun before the transition
	 * have completed (those after it wait for RTS). */
	if (qp->sqd_notify && qp->state == IBV_QPS_SQD && qp->sq_head == qp->sq_next) {
		qp->sqd_notify = false;
		ctx_async_event(qp->ctx, qp, IBV_EVENT_SQ_DRAINED);
	}
}

/* Every WQE not yet completed completes with WR_FLUSH_ERR; the receive
 * queue too (IBTA 10.3.1 "Error state"). Caller holds qp->lock. */
void qp_to_error_locked(struct sr_qp *qp)
{
	/* Before a flush gives the program a buffer back, the channel stops
	 * anyone reading it (a same-host peer pulls SENDs and WRITEs from
	 * the sender's memory). */
	if (qp->chan)
		chan_revoke(qp->chan);
	qp_rx_wc_release(qp);	/* (a batch's receive completions first) */
	if (qp->state != IBV_QPS_ERR) {
		sr_dbg("QP %#x %s -> ERR", qp->ibqp.qp_base.qp_num, sr_qp_state_name[qp->state]);
		qp->state = IBV_QPS_ERR;
		qp->ibqp.qp_base.state = IBV_QPS_ERR;
		qp->attr.qp_state = IBV_QPS_ERR;
		/* IBTA 11.6.3.1 (o11-5.2.x): a QP on an SRQ that enters the
		 * error state reports Last WQE Reached, so the consumer knows
		 * no more SRQ WQEs will complete for it. */
		if (qp->srq)
			ctx_async_event(qp->ctx, qp, IBV_EVENT_QP_LAST_WQE_REACHED);
	}
	while (qp->sq_head != qp->sq_tail) {
		struct sr_swqe *w = sq_at(qp, qp->sq_head);

		sq_complete_one(qp, w, IBV_WC_WR_FLUSH_ERR);
		qp->sq_head++;
	}
	qp->sq_next = qp->sq_tail;
	/* (those the channel took first: they came off the queue first) */
	qp_rx_lent_flush_locked(qp, true);
	if (!qp->srq) {
		while (qp->rq.head != qp->rq.tail) {
			struct sr_rwqe *r = rq_at(&qp->rq, qp->rq.head);
			struct ibv_wc wc = {
				.wr_id = r->wr_id,
				.status = IBV_WC_WR_FLUSH_ERR,
				.opcode = IBV_WC_RECV,
				.qp_num = qp->ibqp.qp_base.qp_num,
			};

			cq_push(qp->rcq, &wc, false);
			qp->rq.head++;
		}
	}
	qp_rx_pending_clear_locked(qp);
}

/* Is [va, va + len) in the region the QP last gathered from through key,
 * which has not changed since? Then where it is in our memory. The copy
 * takes no reference: a region deregistered while it runs (a program
 * error) may still be read from, and a page gone meanwhile is the
 * fault-safe copy's -EFAULT (IBV_WC_LOC_PROT_ERR), as for any address.
 * qp->lock held. */
static bool lspan_hit(const struct sr_qp *qp, uint32_t key, uint64_t va, uint64_t len,
		      uintptr_t *addr)
{
	const struct sr_lkey_span *sp = &qp->lspan;

	if (!sp->key || sp->key != key || sp->gen != mr_gen())
		return false;
	if (!sp->implicit &&
	    (va < sp->iova || len > sp->length || va - sp->iova > sp->length - len))
		return false;
	*addr = sp->vaddr + (uintptr_t)(va - sp->iova);
	return true;
}

/* Where a gather piece is in this process, through the QP's remembered
 * lkey span (looked up and remembered if not that key): 0 and *a, or
 * mr_span's error (-EAGAIN: not this way, the caller takes a reference). */
static int sge_addr(struct sr_qp *qp, const struct ibv_sge *s, uintptr_t *a)
{
	struct sr_lkey_span sp;
	int ret;

	/* (the same key as last time: no lock, no reference) */
	if (lspan_hit(qp, s->lkey, s->addr, s->length, a))
		return 0;
	ret = mr_span(qp->ctx, qp->pd, s->lkey, s->addr, s->length, &sp);
	if (ret)
		return ret;
	qp->lspan = sp;
	*a = sp.vaddr + (uintptr_t)(s->addr - sp.iova);
	return 0;
}

/* Copy a WQE's gather list into buf. Local reads need no access right
 * beyond a valid lkey in the QP's PD (IBTA 10.6.3.3). */
static enum ibv_wc_status gather(struct sr_qp *qp, struct sr_swqe *w, uint8_t *buf)
{
	size_t off = 0;

	if (w->flags & IBV_SEND_INLINE) {
		memcpy(buf, w->inl, w->length);
		return IBV_WC_SUCCESS;
	}
	for (uint32_t i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];
		struct sr_mref r;
		uintptr_t a;
		int ret;

		if (!s->length)
			continue;
		ret = sge_addr(qp, s, &a);
		if (ret && ret != -EAGAIN)
			return IBV_WC_LOC_PROT_ERR;
		if (!ret) {
			if (mem_read(buf + off, a, s->length))
				return IBV_WC_LOC_PROT_ERR;
			off += s->length;
			continue;
		}
		if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length, 0, false, &r))
			return IBV_WC_LOC_PROT_ERR;
		if (mref_read(&r, buf + off, s->length)) {
			mr_release(&r);
			return IBV_WC_LOC_PROT_ERR;
		}
		mr_release(&r);
		off += s->length;
	}
	return IBV_WC_SUCCESS;
}

/* A WQE's gather list as the addresses it names, for a copy straight from
 * there (sq_small): its pieces in iov, how many, or -1 if a key is not
 * one of this process's regions in the QP's PD, or any other case that
 * gather() takes (it then copies, and reports what fails). */
static int gather_iov(struct sr_qp *qp, struct sr_swqe *w, struct iovec *iov)
{
	int n = 0;

	for (uint32_t i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];
		uintptr_t a;

		if (!s->length)
			continue;
		if (sge_addr(qp, s, &a))
			return -1;
		iov[n].iov_base = (void *)a;
		iov[n].iov_len = s->length;
		n++;
	}
	return n;
}

/* Zero copy: the message names the registered memory it sends from (the
 * channel writes it with sendmsg), and keeps that memory busy until the
 * message is freed. Same checks as gather(). */
static enum ibv_wc_status gather_ref(struct sr_qp *qp, struct sr_swqe *w, struct sr_msg *m)
{
	struct sr_msg_src *src = calloc(1, sizeof(*src));

	if (!src)
		return IBV_WC_LOC_QP_OP_ERR;
	m->src = src;
	for (uint32_t i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];
		struct sr_mref r;

		if (!s->length)
			continue;
		if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length, 0, false, &r))
			return IBV_WC_LOC_PROT_ERR;
		src->iov[src->n] = (struct iovec){ (void *)r.addr, s->length };
		src->refs[src->n].addr = r.addr;
		src->refs[src->n].users = r.users;
		src->n++;
	}
	return IBV_WC_SUCCESS;
}

/* Where a READ response or atomic result will land must be writable. */
static enum ibv_wc_status check_sink(struct sr_qp *qp, struct sr_swqe *w)
{
	for (uint32_t i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];
		struct sr_mref r;

		if (!s->length)
			continue;
		if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length,
			       IBV_ACCESS_LOCAL_WRITE, false, &r))
			return IBV_WC_LOC_PROT_ERR;
		mr_release(&r);
	}
	return IBV_WC_SUCCESS;
}

static enum ibv_wc_status local_op(struct sr_qp *qp, struct sr_swqe *w)
{
	if (w->opcode == IBV_WR_LOCAL_INV)
		return mw_invalidate(qp->ctx, qp->pd, w->inv_rkey) ? IBV_WC_MW_BIND_ERR
								    : IBV_WC_SUCCESS;
	/* BIND_MW: type 2 windows through a WQE (ibv_post_send(3)); type 1
	 * only through ibv_bind_mw(), which marks its WQE. */
	if (!w->mw || (w->mw->type != IBV_MW_TYPE_2 && !(w->flags & SR_SEND_BIND_TYPE1)))
		return IBV_WC_MW_BIND_ERR;
	return mw_bind(qp, to_mw(w->mw), w->bind_rkey, &w->bind_info) ? IBV_WC_MW_BIND_ERR
								     : IBV_WC_SUCCESS;
}

/* XRC_SEND: the requests of w are for XRC SRQ w->xrc_srqn. Tell the
 * channel when that differs from what it was last told (SR_MSG_XRC, the
 * XRCETH said once rather than in every packet). Caller holds qp->lock. */
static int sq_xrc_header(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_msg *m;

	if (qp_type(qp) != IBV_QPT_XRC_SEND ||
	    (qp->xrc_tx_chan == qp->chan && qp->xrc_tx_srqn == w->xrc_srqn))
		return 0;
	m = msg_alloc(0);
	if (!m)
		return -ENOMEM;
	m->op = SR_MSG_XRC;
	m->srqn = w->xrc_srqn;
	qp->xrc_tx_chan = qp->chan;
	qp->xrc_tx_srqn = w->xrc_srqn;
	return chan_send(qp->chan, m);
}

/* Build the message for one WQE. Returns NULL with *st set on a local
 * error, or NULL with *st == SUCCESS if memory ran out (retry later). */
static struct sr_msg *build_msg(struct sr_qp *qp, struct sr_swqe *w, enum ibv_wc_status *st)
{
	bool carries = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM ||
		       w->opcode == IBV_WR_SEND_WITH_INV || w->opcode == IBV_WR_RDMA_WRITE ||
		       w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	struct sr_msg *m;

	/* Large payloads go by reference where the channel takes that. */
	bool by_ref = carries && qp->chan->zcopy && qp_zcopy_ok(qp) &&
		      !(w->flags & IBV_SEND_INLINE) && w->length >= 4096;

	*st = IBV_WC_SUCCESS;
	m = msg_alloc(carries && !by_ref ? (uint32_t)w->length : 0);
	if (!m)
		return NULL;
	m->msn = w->msn;
	if (w->flags & IBV_SEND_SOLICITED)
		m->flags |= SR_MSGF_SE;
	switch (w->opcode) {
	case IBV_WR_SEND_WITH_IMM:
		m->flags |= SR_MSGF_IMM;
		m->imm = w->imm;
		/* fall through */
	case IBV_WR_SEND:
		m->op = SR_MSG_SEND;
		break;
	case IBV_WR_SEND_WITH_INV:
		m->op = SR_MSG_SEND;
		m->flags |= SR_MSGF_INV;
		m->inv_stag = w->inv_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		/* the IMM request follows (sq_send_imm) */
	case IBV_WR_RDMA_WRITE:
		m->op = SR_MSG_WRITE;
		m->stag = w->rkey;
		m->to = w->remote_addr;
		break;
	case IBV_WR_RDMA_READ:
		m->op = SR_MSG_READ_REQ;
		m->stag = w->rkey;
		m->to = w->remote_addr;
		m->rd_len = (uint32_t)w->length;
		*st = check_sink(qp, w);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		m->op = SR_MSG_ATOMIC_REQ;
		m->atomic_op = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? SR_ATOMIC_CMP_SWP
								     : SR_ATOMIC_FETCH_ADD;
		m->stag = w->rkey;
		m->to = w->remote_addr;
		m->compare = w->compare_add;
		m->add_swap = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? w->swap : w->compare_add;
		*st = check_sink(qp, w);
		break;
	case IBV_WR_ATOMIC_WRITE:
		/* The 8 bytes travel as they are (bytes, not a number). */
		m->op = SR_MSG_ATOMIC_WRITE;
		m->stag = w->rkey;
		m->to = w->remote_addr;
		if (w->flags & SR_SEND_AW_VALUE)
			m->add_swap = w->compare_add;
		else
			*st = gather(qp, w, (uint8_t *)&m->add_swap);
		break;
	}
	if (*st == IBV_WC_SUCCESS && by_ref) {
		*st = gather_ref(qp, w, m);
		m->len = (uint32_t)w->length;
	} else if (*st == IBV_WC_SUCCESS && carries) {
		*st = gather(qp, w, m->payload);
	}
	if (*st != IBV_WC_SUCCESS) {
		msg_free(m);
		return NULL;
	}
	return m;
}

/* A small SEND or WRITE of an RC QP whose peer acks, handed to the
 * channel without a message (chan.h, send_small): 0 once written; else
 * nothing was done, and the WQE goes the usual way (which also reports
 * what made its gather fail). */
static int sq_small(struct sr_qp *qp, struct sr_swqe *w)
{
	struct iovec iov[SR_MAX_SGE];
	uint8_t buf[SR_SMALL_MAX];
	struct sr_small r = {
		.op = SR_MSG_SEND, .msn = w->msn, .len = (uint32_t)w->length, .payload = buf,
		.flags = (w->flags & IBV_SEND_SOLICITED) ? SR_MSGF_SE : 0,
	};

	if (!qp->chan->ops->send_small || w->length > SR_SMALL_MAX || !qp->chan->acks ||
	    qp_type(qp) != IBV_QPT_RC)
		return -EAGAIN;
	switch (w->opcode) {
	case IBV_WR_SEND:
		break;
	case IBV_WR_SEND_WITH_IMM:
		r.flags |= SR_MSGF_IMM;
		r.imm = w->imm;
		break;
	case IBV_WR_SEND_WITH_INV:
		r.flags |= SR_MSGF_INV;
		r.inv_stag = w->inv_rkey;
		break;
	case IBV_WR_RDMA_WRITE:
		r.op = SR_MSG_WRITE;
		r.stag = w->rkey;
		r.to = w->remote_addr;
		break;
	default:
		return -EAGAIN;
	}
	if (w->flags & IBV_SEND_INLINE) {
		r.payload = w->inl;
	} else if ((r.niov = gather_iov(qp, w, iov)) > 0) {
		/* (the channel reads the registered memory itself: one copy
		 * less; a page gone there fails its write, and the usual
		 * way then reports it) */
		r.iov = iov;
	} else if (r.niov < 0) {
		r.niov = 0;
		if (gather(qp, w, buf) != IBV_WC_SUCCESS)
			return -EAGAIN;
	}
	return qp->chan->ops->send_small(qp->chan, &r);
}

/* RFC 7306: a WRITE with immediate is the WRITE, then an Immediate Data
 * request that consumes a receive WQE at the responder. */
static int sq_send_imm(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_msg *m = msg_alloc(0);

	if (!m)
		return -ENOMEM;
	m->op = SR_MSG_IMM;
	m->flags = SR_MSGF_IMM | ((w->flags & IBV_SEND_SOLICITED) ? SR_MSGF_SE : 0);
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UC || !qp->chan->acks)
		m->flags |= SR_MSGF_DONE_ON_TX;
	m->imm = w->imm;
	m->msn = w->msn;
	return chan_send(qp->chan, m);
}

/* What a peer that speaks RFC 5040 RDMAP only cannot honour: SEND with
 * immediate (no RDMAP form), and RFC 7306's Immediate Data and atomics,
 * which Linux siw answers with a TERMINATE (unknown opcode); IBTA 1.5
 * atomic write has no iWARP form at all. */
static bool beyond_rfc5040(uint32_t op)
{
	return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
	       op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	       op == IBV_WR_ATOMIC_WRITE;
}

/* What only softrnic's extension messages carry (src/wire/srext.h): an
 * atomic write needs a peer that speaks them, which is a peer that acks
 * (the two come together, chan->acks; the in-process channel has both). */
static bool needs_ext(struct sr_chan *ch, uint32_t op)
{
	return op == IBV_WR_ATOMIC_WRITE && !ch->acks;
}

/* Would the connected peer refuse a request of this opcode? */
static bool peer_refuses(struct sr_chan *ch, uint32_t op)
{
	return (op == IBV_WR_SEND_WITH_IMM && ch->no_send_imm) ||
	       (ch->rfc_only && beyond_rfc5040(op)) || needs_ext(ch, op);
}

/* Hand w, next to send, to the channel as a small request (sq_small):
 * 0 once sent, with the SQ moved past it; else nothing changed. */
static int sq_send_small(struct sr_qp *qp, struct sr_swqe *w)
{
	w->msn_first = w->msn = qp->ssn;
	if (sq_small(qp, w))
		return -EAGAIN;
	qp->ssn++;
	qp->sq_next++;
	w->state = SR_WQE_SENT;
	return 0;
}

/* READ (and atomic) requests sent and not yet answered. */
static uint32_t reads_out(struct sr_qp *qp)
{
	uint32_t n = 0;

	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++) {
		struct sr_swqe *w = sq_at(qp, i);

		n += w->state == SR_WQE_SENT &&
		     (w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		      w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD);
	}
	return n;
}

void qp_sq_progress_locked(struct sr_qp *qp)
{
	bool is_uc = qp->ibqp.qp_base.qp_type == IBV_QPT_UC;

	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UD) {
		ud_sq_progress_locked(qp);	/* datagrams: core/ud.c */
		return;
	}
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_RAW_PACKET) {
		raw_sq_progress_locked(qp);	/* frames: core/raw.c */
		return;
	}

	if (qp->peer_gone && qp->state == IBV_QPS_RTS && qp->sq_next != qp->sq_tail) {
		qp_gone_arm_locked(qp);
		return;
	}
	while (qp->state == IBV_QPS_RTS && qp->chan && qp->sq_next != qp->sq_tail) {
		struct sr_swqe *w = sq_at(qp, qp->sq_next);
		enum ibv_wc_status st;
		struct sr_msg *m;

		/* IBV_SEND_FENCE (ibv_post_send(3)): not before every READ
		 * and atomic posted ahead of it is answered, so that a SEND
		 * from what a READ fetched sends what it fetched (the answer
		 * resumes the SQ: rx_response). */
		if ((w->flags & IBV_SEND_FENCE) && reads_out(qp))
			break;
		if (w->opcode == IBV_WR_LOCAL_INV || w->opcode == IBV_WR_BIND_MW) {
			w->status = local_op(qp, w);
			w->state = SR_WQE_DONE;
			qp->sq_next++;
			continue;
		}
		if (qp_type(qp) == IBV_QPT_XRC_SEND && !qp->chan->acks) {
			/* XRC needs softrnic's XRC header, which only a
			 * softrnic peer speaks (src/wire/srext.h). */
			w->status = IBV_WC_LOC_QP_OP_ERR;
			w->state = SR_WQE_DONE;
			qp->sq_next++;
			break;
		}
		if (peer_refuses(qp->chan, w->opcode)) {
			/* The peer speaks RFC iWARP, which has no SEND with
			 * immediate (or, Linux siw, no RFC 7306 either): fail
			 * it here rather than send what the peer would
			 * reject. Posted before the stream was up, or it
			 * would have failed at post time (sq_fill). */
			w->status = IBV_WC_LOC_QP_OP_ERR;
			w->state = SR_WQE_DONE;
			qp->sq_next++;
			break;
		}
		/* At the peer's IRD the SQ waits, in order, for an answer
		 * (rx_response resumes it). */
		if (qp->chan->max_reads &&
		    (w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		     w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
		    reads_out(qp) >= qp->chan->max_reads)
			break;
		if (!sq_send_small(qp, w))
			continue;
		m = build_msg(qp, w, &st);
		if (!m) {
			if (st == IBV_WC_SUCCESS)
				break;		/* out of memory: try again later */
			w->status = st;
			w->state = SR_WQE_DONE;
			qp->sq_next++;
			break;
		}
		if (sq_xrc_header(qp, w)) {
			msg_free(m);
			qp_fail_retry_locked(qp);
			return;
		}
		qp->ssn++;
		qp->sq_next++;
		w->state = SR_WQE_SENT;
		if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			w->msn = qp->ssn++;
		/* Without responder acks (UC, or a peer that sends none), a
		 * SEND or WRITE is complete once handed to the transport. */
		if ((is_uc || !qp->chan->acks) &&
		    (m->op == SR_MSG_SEND || m->op == SR_MSG_WRITE || m->op == SR_MSG_IMM)) {
			if (qp->chan->zcopy) {
				/* A stream: complete once written (the payload may
				 * be read from the application's memory until
				 * then, and a fast poster must not outrun TCP). */
				m->flags |= SR_MSGF_DONE_ON_TX;
			} else {
				w->state = SR_WQE_DONE;
				w->status = IBV_WC_SUCCESS;
			}
		}
		if (chan_send(qp->chan, m) ||
		    (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && sq_send_imm(qp, w))) {
			/* The stream is gone: as on IB, the request times
			 * out, after the transport timeout, not at once. The
			 * channel may not have told us yet (a peer that
			 * destroyed its QP: qp_chan_gone runs after the
			 * stream is marked dead), and a program that posts
			 * its last reply as the peer leaves must see what it
			 * would see on IB: its other requests complete, this
			 * one fails later. A lost stream (qp_chan_lost)
			 * ends the QP sooner anyway. */
			qp->peer_gone = true;
			qp_gone_arm_locked(qp);
			return;
		}
	}
	/* (no stream yet, or one still dialing a peer nobody answers for:
	 * what waits for it waits a bounded time) */
	if (!qp->chan || atomic_load_explicit(&qp->chan->dialing, memory_order_relaxed))
		qp_undialed_arm_locked(qp);
	sq_retire_locked(qp);
}

/* Called with qp->lock held by the responder-side code when a response
 * settles the WQE with this msn. */
struct sr_swqe *sq_find_sent_locked(struct sr_qp *qp, uint32_t msn)
{
	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++) {
		struct sr_swqe *w = sq_at(qp, i);

		if (w->state != SR_WQE_SENT)
			continue;
		if (msn == SR_MSN_OLDEST || msn - w->msn_first <= w->msn - w->msn_first)
			return w;
	}
	return NULL;
}

static bool wqe_acked_by_ack(const struct sr_swqe *w)
{
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_ATOMIC_WRITE:
		return true;
	default:
		return false;
	}
}

/* A positive ACK is cumulative: every SEND and WRITE up to msn is done.
 * READs and atomics in between are settled by their own responses. */
void sq_ack_upto_locked(struct sr_qp *qp, uint32_t msn)
{
	for (uint32_t i = qp->sq_head; i != qp->sq_next; i++) {
		struct sr_swqe *w = sq_at(qp, i);

		if ((int32_t)(w->msn_first - msn) > 0)
			break;
		if (w->state == SR_WQE_SENT && wqe_acked_by_ack(w) &&
		    (int32_t)(w->msn - msn) <= 0) {
			w->state = SR_WQE_DONE;
			w->status = IBV_WC_SUCCESS;
		}
	}
	sq_retire_locked(qp);
}

void sq_settle_locked(struct sr_qp *qp, struct sr_swqe *w, enum ibv_wc_status st)
{
	w->state = SR_WQE_DONE;
	w->status = st;
	sq_retire_locked(qp);
}

/* ---- posting ------------------------------------------------------------- */

static int check_opcode(struct sr_qp *qp, uint32_t op)
{
	bool uc = qp->ibqp.qp_base.qp_type == IBV_QPT_UC;

	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_LOCAL_INV:
	case IBV_WR_BIND_MW:
		return 0;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_WRITE:
		return uc ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

static bool sq_state_accepts(struct sr_qp *qp)
{
	/* ibv_post_send(3): RTS, SQD, SQE and ERR accept; ERR flushes. An
	 * XRC_RECV QP has no send queue. */
	return qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_ERR &&
	       qp_type(qp) != IBV_QPT_XRC_RECV;
}

/* IBTA 1.5 ATOMIC WRITE: 8 bytes to (rkey, remote_addr). The WR API
 * hands the value itself (wr.c puts it in wr.atomic.compare_add and marks
 * the WR SR_SEND_AW_VALUE); ibv_post_send names it as a WRITE names its
 * payload: wr.rdma and a gather list of exactly 8 bytes, registered
 * (read at transmit, as a WRITE's) or IBV_SEND_INLINE (read now). A value
 * the WQE holds is in compare_add, marked SR_SEND_AW_VALUE. */
static int sq_fill_awrite(struct sr_swqe *w, const struct ibv_send_wr *wr, uint64_t len)
{
	size_t off = 0;

	w->length = 8;
	if (wr->send_flags & SR_SEND_AW_VALUE) {
		w->rkey = wr->wr.atomic.rkey;
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->compare_add = wr->wr.atomic.compare_add;
		return 0;
	}
	if (len != 8)
		return -EINVAL;
	w->rkey = wr->wr.rdma.rkey;
	w->remote_addr = wr->wr.rdma.remote_addr;
	if (!(wr->send_flags & IBV_SEND_INLINE))
		return 0;
	for (int i = 0; i < wr->num_sge; i++) {
		if (mem_read((uint8_t *)&w->compare_add + off, wr->sg_list[i].addr,
			     wr->sg_list[i].length))
			return -EFAULT;
		off += wr->sg_list[i].length;
	}
	w->flags = (w->flags & ~(uint32_t)IBV_SEND_INLINE) | SR_SEND_AW_VALUE;
	return 0;
}

/* Fill the next free slot from @wr; caller holds qp->lock. */
static int sq_fill(struct sr_qp *qp, const struct ibv_send_wr *wr)
{
	struct sr_swqe *w;
	uint64_t len = 0;
	uint32_t slot;
	int ret;

	if (qp->sq_tail - atomic_load(&qp->sq_reaped) >= qp->sq_max_wr)
		return -ENOMEM;
	ret = check_opcode(qp, wr->opcode);
	if (ret)
		return ret;
	/* A connected peer known not to be softrnic (the MPA exchange
	 * told): refuse now, with a reason, what it cannot honour. */
	if (qp->chan && ((qp->chan->rfc_only && beyond_rfc5040(wr->opcode)) ||
			 needs_ext(qp->chan, wr->opcode)))
		return -EOPNOTSUPP;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return -EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > SR_MAX_MSG)
		return -EINVAL;
	slot = qp->sq_tail & (qp->sq_size - 1);
	w = sq_at(qp, qp->sq_tail);
	memset(w, 0, SWQE_CLEAR);
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->flags = wr->send_flags;
	w->length = len;
	switch (wr->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (wr->num_sge != 1 || wr->sg_list[0].length < 8)
			return -EINVAL;
		w->rkey = wr->wr.atomic.rkey;
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		w->length = 8;
		break;
	case IBV_WR_RDMA_READ:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		w->rkey = wr->wr.rdma.rkey;
		w->remote_addr = wr->wr.rdma.remote_addr;
		break;
	case IBV_WR_LOCAL_INV:
	case IBV_WR_SEND_WITH_INV:
		w->inv_rkey = wr->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW:
		w->mw = wr->bind_mw.mw;
		w->bind_rkey = wr->bind_mw.rkey;
		w->bind_info = wr->bind_mw.bind_info;
		break;
	case IBV_WR_ATOMIC_WRITE:
		ret = sq_fill_awrite(w, wr, len);
		if (ret)
			return ret;
		break;
	default:
		break;
	}
	if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		w->imm = wr->imm_data;
	if (wr->opcode == IBV_WR_ATOMIC_WRITE && (w->flags & SR_SEND_AW_VALUE)) {
		w->num_sge = 0;		/* the WQE holds its 8 bytes */
	} else if (w->flags & IBV_SEND_INLINE) {
		size_t off = 0;

		if (wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			return -EINVAL;
		if (len > qp->cap.max_inline_data)
			return -EINVAL;
		w->inl = qp->inl_buf + (size_t)slot * qp->cap.max_inline_data;
		/* Inline data is the application's own memory, read now,
		 * without a key (ibv_post_send(3), IBV_SEND_INLINE). */
		for (int i = 0; i < wr->num_sge; i++) {
			if (mem_read(w->inl + off, wr->sg_list[i].addr, wr->sg_list[i].length))
				return -EFAULT;
			off += wr->sg_list[i].length;
		}
		w->num_sge = 0;
	} else {
		w->num_sge = (uint32_t)wr->num_sge;
		if (wr->num_sge)
			memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
	}
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UD) {
		ret = ud_sq_fill_locked(qp, w, wr);	/* core/ud.c */
		if (ret)
			return ret;
	}
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_RAW_PACKET) {
		ret = raw_sq_fill_locked(qp, w, wr);	/* core/raw.c */
		if (ret)
			return ret;
	}
	if (qp_type(qp) == IBV_QPT_XRC_SEND)
		w->xrc_srqn = wr->qp_type.xrc.remote_srqn;
	w->state = SR_WQE_POSTED;
	qp->sq_tail++;
	return 0;
}

/* The ping-pong's post: the one WQE just filled is all the SQ has to
 * send, on an RC QP in RTS, and it is a SEND or WRITE the channel may take
 * as a small request (sq_small). Sent as qp_sq_progress_locked would send
 * it, without its general cases: 0; else -EAGAIN, nothing changed (the
 * general way follows). Nothing else becomes done here, so there is
 * nothing to retire. qp->lock held. */
static int sq_send_one_small(struct sr_qp *qp)
{
	struct sr_swqe *w = sq_at(qp, qp->sq_next);

	if (qp->state != IBV_QPS_RTS || qp_type(qp) != IBV_QPT_RC || !qp->chan ||
	    qp->peer_gone || qp->sq_next + 1 != qp->sq_tail || (w->flags & IBV_SEND_FENCE) ||
	    (w->opcode != IBV_WR_SEND && w->opcode != IBV_WR_SEND_WITH_IMM &&
	     w->opcode != IBV_WR_RDMA_WRITE) ||
	    peer_refuses(qp->chan, w->opcode))
		return -EAGAIN;
	return sq_send_small(qp, w);
}

/* The post of one small request straight to the channel (DESIGN.md
 * decision 23, "a post's one pass"): a lone SEND, SEND with immediate or
 * WRITE of at most SR_SMALL_MAX bytes in one piece (a registered SGE, or
 * inline), on an RC QP in RTS with nothing else to send, whose channel
 * takes small requests. What sq_fill and sq_send_one_small would do for
 * it, in one pass and without their general cases: 0, sent, with the WQE
 * in the SQ as SENT; else nothing changed but the WQE slot past the tail
 * (the general way then does it all, and reports what it finds wrong):
 * -EBUSY if the channel refused it (a full ring, a stream not on shm: the
 * general way need not offer it again as sq_send_one_small would), else
 * -EAGAIN. The inline bytes are read as the ring takes them, in this
 * call, as sq_fill would read them. qp->lock held. */
static int sq_post_small(struct sr_qp *qp, const struct ibv_send_wr *wr)
{
	struct sr_chan *ch = qp->chan;
	const uint32_t op = wr->opcode, fl = wr->send_flags;
	struct sr_small r = { .op = SR_MSG_SEND, .msn = qp->ssn };
	struct iovec iov;
	struct sr_swqe *w;
	uint32_t len = 0;
	uintptr_t a;

	if (qp->state != IBV_QPS_RTS || qp_type(qp) != IBV_QPT_RC || !ch || qp->peer_gone ||
	    qp->sq_next != qp->sq_tail || !ch->ops->send_small || !ch->acks ||
	    (uint32_t)wr->num_sge > 1 || (uint32_t)wr->num_sge > qp->cap.max_send_sge ||
	    (fl & IBV_SEND_FENCE) ||
	    qp->sq_tail - atomic_load_explicit(&qp->sq_reaped, memory_order_acquire) >=
		    qp->sq_max_wr)
		return -EAGAIN;
	if (wr->num_sge) {
		len = wr->sg_list[0].length;
		if (len > SR_SMALL_MAX || ((fl & IBV_SEND_INLINE) && len > qp->cap.max_inline_data))
			return -EAGAIN;
	}
	switch (op) {
	case IBV_WR_SEND:
		break;
	case IBV_WR_SEND_WITH_IMM:
		if (peer_refuses(ch, op))
			return -EAGAIN;
		r.flags = SR_MSGF_IMM;
		r.imm = wr->imm_data;
		break;
	case IBV_WR_RDMA_WRITE:
		r.op = SR_MSG_WRITE;
		r.stag = wr->wr.rdma.rkey;
		r.to = wr->wr.rdma.remote_addr;
		break;
	default:
		return -EAGAIN;
	}
	if (fl & IBV_SEND_SOLICITED)
		r.flags |= SR_MSGF_SE;
	r.len = len;
	if (len) {
		/* (inline: the program's memory, without a key; else the
		 * region the key names, in the QP's PD) */
		if (fl & IBV_SEND_INLINE)
			a = (uintptr_t)wr->sg_list[0].addr;
		else if (sge_addr(qp, &wr->sg_list[0], &a))
			return -EAGAIN;
		iov = (struct iovec){ (void *)a, len };
		r.iov = &iov;
		r.niov = 1;
	}
	w = sq_at(qp, qp->sq_tail);
	if (ch->ops->send_small(ch, &r))
		return -EBUSY;
	memset(w, 0, SWQE_CLEAR);
	w->wr_id = wr->wr_id;
	w->opcode = op;
	w->flags = fl;
	w->length = len;
	w->imm = r.imm;
	w->rkey = r.stag;
	w->remote_addr = r.to;
	if (wr->num_sge && !(fl & IBV_SEND_INLINE)) {
		w->num_sge = 1;
		w->sge[0] = wr->sg_list[0];
	}
	w->msn_first = w->msn = qp->ssn++;
	w->state = SR_WQE_SENT;
	qp->sq_tail++;
	qp->sq_next++;
	return 0;
}

int qp_post_send(struct sr_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sr_chan *ch;
	int ret = 0, small = -EAGAIN;

	sr_mutex_lock(&qp->lock);
	if (wr && !wr->next) {
		small = sq_post_small(qp, wr);
		if (!small)
			goto out;
	}
	if (!sq_state_accepts(qp)) {
		ret = -EINVAL;
		*bad = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		ret = sq_fill(qp, wr);
		if (ret) {
			*bad = wr;
			break;
		}
	}
	if (qp->state == IBV_QPS_ERR)
		qp_to_error_locked(qp);
	else if (ret || small == -EBUSY || sq_send_one_small(qp))
		qp_sq_progress_locked(qp);	/* (which offers send_small a
						 * refused request once more) */
out:
	/* qp_kick, without taking the QP lock again, and only if the
	 * channel has something to do (on shm a post's request is in the
	 * ring already) */
	ch = qp->raw ? NULL : qp->chan;
	if (ch && chan_kick_needed(ch))
		chan_get(ch);
	else
		ch = NULL;
	sr_mutex_unlock(&qp->lock);
	if (ch) {
		chan_kick(ch);
		chan_put(ch);
	} else if (qp->raw) {
		qp_kick(qp);
	}
	return ret;
}

/* Used by the WR API (wr.c): fill from a prepared ibv_send_wr. */
int sq_fill_locked(struct sr_qp *qp, const struct ibv_send_wr *wr)
{
	return sq_fill(qp, wr);
}

int qp_post_recv(struct sr_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	bool resumed = false;
	int ret = 0;

	sr_mutex_lock(&qp->lock);
	if (qp->srq || qp->state == IBV_QPS_RESET || qp_type(qp) == IBV_QPT_XRC_SEND ||
	    qp_type(qp) == IBV_QPT_XRC_RECV) {
		/* ibv_post_recv(3): not on an SRQ-attached QP; RESET refuses;
		 * XRC QPs have no receive queue (receives go to XRC SRQs). */
		ret = -EINVAL;
		*bad = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		ret = rq_post(&qp->rq, wr, qp->cap.max_recv_wr);
		if (ret) {
			*bad = wr;
			break;
		}
	}
	/* Only a receive that let parked requests through has answers to
	 * send (and may lift back-pressure): kick the channel then, not for
	 * every receive a program posts. */
	resumed = !sr_list_empty(&qp->rx_pending);
	if (qp->state == IBV_QPS_ERR)
		qp_to_error_locked(qp);
	else
		qp_rx_resume_locked(qp);
out:
	sr_mutex_unlock(&qp->lock);
	if (resumed)
		qp_kick(qp);
	return ret;
}
