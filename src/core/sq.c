/* The requester: transmitting send WRs in order through the channel, and
 * completing them in order (IBTA 10.8: completions of a send queue are
 * returned in the order the WRs were posted). Posting them, and posting
 * receives: sq_post.c. */
#include "core/qp.h"
#include "core/raw.h"
#include "core/sq.h"

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
int sq_sge_addr(struct sr_qp *qp, const struct ibv_sge *s, uintptr_t *a)
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
		ret = sq_sge_addr(qp, s, &a);
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
		if (sq_sge_addr(qp, s, &a))
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
bool sq_beyond_rfc5040(uint32_t op)
{
	return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
	       op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	       op == IBV_WR_ATOMIC_WRITE;
}

/* What only softrnic's extension messages carry (src/wire/srext.h): an
 * atomic write needs a peer that speaks them, which is a peer that acks
 * (the two come together, chan->acks; the in-process channel has both). */
bool sq_needs_ext(struct sr_chan *ch, uint32_t op)
{
	return op == IBV_WR_ATOMIC_WRITE && !ch->acks;
}

/* Would the connected peer refuse a request of this opcode? */
bool sq_peer_refuses(struct sr_chan *ch, uint32_t op)
{
	return (op == IBV_WR_SEND_WITH_IMM && ch->no_send_imm) ||
	       (ch->rfc_only && sq_beyond_rfc5040(op)) || sq_needs_ext(ch, op);
}

/* Hand w, next to send, to the channel as a small request (sq_small):
 * 0 once sent, with the SQ moved past it; else nothing changed. */
int sq_send_small(struct sr_qp *qp, struct sr_swqe *w)
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
		if (sq_peer_refuses(qp->chan, w->opcode)) {
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
