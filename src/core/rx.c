/* Inbound messages: the responder (requests from the peer) and the
 * requester's half that settles WQEs from responses (ACK, READ_RESP,
 * ATOMIC_RESP, TERMINATE).
 *
 * Every request is checked before one byte moves: QP access rights, key,
 * PD, bounds and MR rights (IBTA 9.7.4.1.6 / RFC 5040 §6.4). A violation is
 * answered with a negative ACK or TERMINATE, the QP enters ERROR, and the
 * requester completes the WQE with the matching remote error.
 */
#include "core/qp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum rx_result { RX_DONE, RX_PARK };

/* The ACK a batch holds goes to the channel now (qp->lock held). */
static void ack_release(struct sr_qp *qp)
{
	if (qp->rx_ack_held) {
		qp->rx_ack_held = false;
		if (qp->chan)
			qp->chan->ops->ack(qp->chan, qp->rx_ack_msn);
	}
}

/* An answer of ours to the channel, behind the ACK a batch holds. */
static int rx_chan_send(struct sr_qp *qp, struct sr_msg *r)
{
	ack_release(qp);
	return chan_send(qp->chan, r);
}

static void respond(struct sr_qp *qp, struct sr_msg *req, int op, int status)
{
	struct sr_msg *r;

	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UC || !qp->chan)
		return;
	/* Without acks the requester learns of errors only by TERMINATE. */
	if ((op == SR_MSG_ACK || op == SR_MSG_RNR) && status == SR_ST_OK && !qp->chan->acks)
		return;
	if (op == SR_MSG_ACK && status == SR_ST_OK && qp->chan->ops->ack) {
		if (qp->rx_batch) {
			/* (a lock of the channel's a message saved: 64-byte
			 * ib_send_bw takes dozens per batch) */
			qp->rx_ack_held = true;
			qp->rx_ack_msn = req->msn;
		} else {
			qp->chan->ops->ack(qp->chan, req->msn);
		}
		return;
	}
	r = msg_alloc(0);
	if (!r)
		return;
	r->op = (uint8_t)(status != SR_ST_OK && !qp->chan->acks ? SR_MSG_TERMINATE : op);
	r->msn = req->msn;
	r->status = (uint8_t)(op == SR_MSG_RNR ? qp->attr.min_rnr_timer : status);
	rx_chan_send(qp, r);
}

/* A responder-side violation: tell the requester, then enter ERROR. */
static void rx_fail(struct sr_qp *qp, struct sr_msg *req, int status,
		    enum ibv_event_type ev)
{
	sr_dbg("QP %#x: %s msn %u rejected (status %d)", qp->ibqp.qp_base.qp_num,
	       sr_msg_op_name[req->op], req->msn, status);
	respond(qp, req, SR_MSG_ACK, status);
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UC)
		return;		/* UC drops bad packets silently (IBTA 9.7.5.2) */
	qp_to_error_locked(qp);
	ctx_async_event(qp->ctx, qp, ev);
}

static bool take_rwqe(struct sr_qp *qp, struct sr_rwqe *out)
{
	if (qp->xdom)
		return srq_take(qp->rx_srq, out) == 0;
	if (qp->srq)
		return srq_take(qp->srq, out) == 0;
	if (qp->rq.head == qp->rq.tail)
		return false;
	memcpy(out, rq_at(&qp->rq, qp->rq.head), qp->rq.stride);
	qp->rq.head++;
	return true;
}

/* The next receive WQE for a request the QP takes now: in place when it
 * is the QP's own (its slot stays ours while we hold the QP lock, which
 * a post needs: no copy), else an SRQ's, copied into buf. NULL if none. */
static struct sr_rwqe *next_rwqe(struct sr_qp *qp, struct sr_rwqe *buf)
{
	if (qp->xdom || qp->srq)
		return take_rwqe(qp, buf) ? buf : NULL;
	if (qp->rq.head == qp->rq.tail)
		return NULL;
	return rq_at(&qp->rq, qp->rq.head++);
}

static void recv_complete(struct sr_qp *qp, struct sr_rwqe *r, struct sr_msg *m,
			  enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc wc = {
		.wr_id = r->wr_id,
		.status = st,
		.opcode = op,
		.qp_num = qp->ibqp.qp_base.qp_num,
		.src_qp = qp->attr.dest_qp_num,
	};

	if (st == IBV_WC_SUCCESS) {
		wc.byte_len = m->len;
		if (m->flags & SR_MSGF_IMM) {
			wc.wc_flags |= IBV_WC_WITH_IMM;
			wc.imm_data = m->imm;
		}
		if (m->flags & SR_MSGF_INV) {
			wc.wc_flags |= IBV_WC_WITH_INV;
			wc.invalidated_rkey = m->inv_stag;
		}
	}
	/* An XRC receive completes into its SRQ's CQ, naming the XRC_RECV
	 * QP it came through (as mlx5 reports it). */
	struct sr_cq *cq = qp->xdom ? qp->rx_srq->cq : qp->rcq;
	bool se = (m->flags & SR_MSGF_SE) != 0;

	if (!qp->rx_batch) {
		cq_push(cq, &wc, se);
		return;
	}
	/* (64-byte ib_send_bw: a lock of the CQ's a message saved) */
	if (qp->rx_wc_n == ARRAY_SIZE(qp->rx_wc) || (qp->rx_wc_n && qp->rx_wc_cq != cq))
		qp_rx_wc_release(qp);
	qp->rx_wc_cq = cq;
	qp->rx_wc_se |= se;
	qp->rx_wc[qp->rx_wc_n++] = wc;
}

void qp_rx_wc_release(struct sr_qp *qp)
{
	if (!qp->rx_wc_n)
		return;
	cq_push_many(qp->rx_wc_cq, qp->rx_wc, (int)qp->rx_wc_n, qp->rx_wc_se);
	qp->rx_wc_n = 0;
	qp->rx_wc_se = false;
}

/* Write n bytes at addr under key through a remembered region (*sp: the
 * QP's of its last receive lkey, or of its last WRITE's rkey), with
 * rights need, looking the key up once if it is not the one remembered
 * (DESIGN.md decision 6): 0, -EFAULT (a bad page), or -EAGAIN (not this
 * way: the caller takes a reference). */
static int span_write(struct sr_qp *qp, struct sr_lkey_span *sp, uint32_t key, uint64_t addr,
		      int need, const uint8_t *src, uint32_t n)
{
	const struct sr_pd *pd = qp_rx_pd(qp);

	for (int tries = 0; tries < 2; tries++) {
		int ret;

		if (sp->key == key && sp->pd == pd && (sp->access & need) == need &&
		    (sp->implicit || (addr >= sp->iova && n <= sp->length &&
				      addr - sp->iova <= sp->length - n))) {
			ret = mem_write_at_gen(sp->vaddr + (uintptr_t)(addr - sp->iova), src, n,
					       sp->gen);
			if (ret != -EAGAIN)
				return ret;
		}
		if (tries || mr_span(qp_rx_ctx(qp), qp_rx_pd(qp), key, addr, n, sp)) {
			sp->key = 0;
			return -EAGAIN;
		}
	}
	return -EAGAIN;
}

/* Scatter a SEND payload into a receive WQE. */
static enum ibv_wc_status scatter(struct sr_qp *qp, struct sr_rwqe *r, struct sr_msg *m)
{
	uint64_t room = 0, off = 0;

	for (uint32_t i = 0; i < r->num_sge; i++)
		room += r->sge[i].length;
	if (m->len > room)
		return IBV_WC_LOC_LEN_ERR;
	for (uint32_t i = 0; i < r->num_sge && off < m->len; i++) {
		struct ibv_sge *s = &r->sge[i];
		uint32_t n = (uint32_t)sr_min((uint64_t)s->length, m->len - off);
		struct sr_mref ref;

		if (!n)
			continue;
		switch (span_write(qp, &qp->rspan, s->lkey, s->addr, IBV_ACCESS_LOCAL_WRITE,
				   m->payload + off, n)) {
		case 0:
			off += n;
			continue;
		case -EFAULT:
			return IBV_WC_LOC_PROT_ERR;
		}
		if (mr_resolve(qp_rx_ctx(qp), qp_rx_pd(qp), s->lkey, s->addr, n,
			       IBV_ACCESS_LOCAL_WRITE, false, &ref))
			return IBV_WC_LOC_PROT_ERR;
		if (mref_write(&ref, m->payload + off, n)) {
			mr_release(&ref);
			return IBV_WC_LOC_PROT_ERR;
		}
		mr_release(&ref);
		off += n;
	}
	return IBV_WC_SUCCESS;
}

static enum rx_result rx_send(struct sr_qp *qp, struct sr_msg *m)
{
	uint8_t rbuf[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
	struct sr_rwqe *r;
	enum ibv_wc_status st;

	if (m->rwqe) {
		/* placed by the channel (qp_place_send); flushed already if
		 * the QP was in ERROR since (or reset) */
		if (m->lent_gen != qp->lent_gen || qp->lent_head == qp->lent_tail)
			return RX_DONE;
		qp->lent_head++;
		r = m->rwqe;
		m->len = m->placed;
		st = (m->flags & SR_MSGF_TOO_LONG) ? IBV_WC_LOC_LEN_ERR :
		     (m->flags & SR_MSGF_PLACE_ERR) ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
	} else {
		r = next_rwqe(qp, (struct sr_rwqe *)rbuf);
		if (!r)
			return RX_PARK;
		st = scatter(qp, r, m);
	}
	if (st == IBV_WC_SUCCESS && (m->flags & SR_MSGF_INV) &&
	    mw_invalidate(qp_rx_ctx(qp), qp_rx_pd(qp), m->inv_stag))
		st = IBV_WC_REM_INV_REQ_ERR;
	if (st != IBV_WC_SUCCESS) {
		/* IBTA 9.7.5.2.x: a too-short receive buffer is the
		 * requester's invalid request; a bad local key is ours. */
		recv_complete(qp, r, m, IBV_WC_RECV, st);
		rx_fail(qp, m, st == IBV_WC_LOC_PROT_ERR ? SR_ST_REM_OP : SR_ST_REM_INV_REQ,
			st == IBV_WC_LOC_PROT_ERR ? IBV_EVENT_QP_FATAL : IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
	/* The ACK is queued before the completion can be seen: a program
	 * that destroys its QP right after polling it still sends it. */
	respond(qp, m, SR_MSG_ACK, SR_ST_OK);
	recv_complete(qp, r, m, IBV_WC_RECV, IBV_WC_SUCCESS);
	return RX_DONE;
}

/* Resolve a remote key for this QP's PD, with the QP's and the region's
 * rights both required (IBTA 10.6.3.3 / 10.2.4). */
static int rx_resolve(struct sr_qp *qp, struct sr_msg *m, uint64_t len, int need,
		      struct sr_mref *ref)
{
	if (!(qp->attr.qp_access_flags & need))
		return -EACCES;
	return mr_resolve(qp_rx_ctx(qp), qp_rx_pd(qp), m->stag, m->to, len, need, true, ref);
}

static enum rx_result rx_write(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_mref ref = { 0 };
	bool placed;

	if (m->flags & SR_MSGF_PLACE_ERR) {
		rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
		return RX_DONE;
	}
	placed = m->flags & SR_MSGF_PLACED;
	qp->rx_write_acc += placed ? m->placed : m->len;
	if (m->len && !placed && (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) {
		/* (the key of the last WRITE, remembered: no key table, no
		 * reference; windows and the rest take the table's way) */
		int ret = span_write(qp, &qp->wspan, m->stag, m->to, IBV_ACCESS_REMOTE_WRITE,
				     m->payload, m->len);

		if (ret == -EFAULT) {
			rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return RX_DONE;
		}
		placed = !ret;
	}
	if (m->len && !placed) {
		if (rx_resolve(qp, m, m->len, IBV_ACCESS_REMOTE_WRITE, &ref)) {
			rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return RX_DONE;
		}
		if (mref_write(&ref, m->payload, m->len)) {
			mr_release(&ref);
			rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return RX_DONE;
		}
		mr_release(&ref);
	}
	if (m->flags & SR_MSGF_MORE)
		return RX_DONE;
	qp->rx_last_write_len = qp->rx_write_acc;
	qp->rx_write_acc = 0;
	respond(qp, m, SR_MSG_ACK, SR_ST_OK);
	return RX_DONE;
}

int qp_place_send(struct sr_qp *qp, struct sr_rwqe *r, struct iovec *iov,
		  struct sr_mref *refs, int max, uint32_t *gen)
{
	int n = 0;

	sr_mutex_lock(&qp->lock);
	/* XRC receives take the staged path (rx_request finds their SRQ),
	 * and so does all of a context imported from another process: its
	 * regions may be that process's memory (qp_zcopy_ok). */
	if (qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE || qp->xdom ||
	    !qp_zcopy_ok(qp) || qp->lent_tail - qp->lent_head >= SR_LENT_MAX ||
	    !sr_list_empty(&qp->rx_pending) || !take_rwqe(qp, r)) {
		sr_mutex_unlock(&qp->lock);
		return -EAGAIN;
	}
	qp->lent_wr[qp->lent_tail++ % SR_LENT_MAX] = r->wr_id;
	*gen = qp->lent_gen;
	for (uint32_t i = 0; i < r->num_sge && i < (uint32_t)max; i++) {
		struct ibv_sge *s = &r->sge[i];

		if (!s->length)
			continue;
		if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length,
			       IBV_ACCESS_LOCAL_WRITE, false, &refs[n])) {
			while (n--)
				mr_release(&refs[n]);
			sr_mutex_unlock(&qp->lock);
			return -EFAULT;
		}
		iov[n].iov_base = (void *)refs[n].addr;
		iov[n].iov_len = s->length;
		n++;
	}
	sr_mutex_unlock(&qp->lock);
	return n;
}

int qp_place_write(struct sr_qp *qp, uint32_t stag, uint64_t to, uint32_t len,
		   struct sr_mref *ref)
{
	int ret;

	sr_mutex_lock(&qp->lock);
	if (qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE || qp->xdom ||
	    !qp_zcopy_ok(qp) || !sr_list_empty(&qp->rx_pending)) {
		sr_mutex_unlock(&qp->lock);
		return -EAGAIN;
	}
	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
		ret = -EACCES;
	else
		ret = mr_resolve(qp->ctx, qp->pd, stag, to, len, IBV_ACCESS_REMOTE_WRITE, true, ref);
	sr_mutex_unlock(&qp->lock);
	return ret;
}

/* The scatter-list pieces covering [off, off + len) of a READ's sink. */
static int read_sink(struct sr_qp *qp, struct sr_swqe *w, uint64_t off, uint64_t len,
		     struct iovec *iov, struct sr_mref *refs, int max)
{
	uint64_t pos = 0;
	int n = 0;

	if (off > w->length || len > w->length - off)
		return -ERANGE;
	for (uint32_t i = 0; i < w->num_sge && len; i++) {
		struct ibv_sge *s = &w->sge[i];
		uint64_t take, skip;

		if (pos + s->length <= off) {
			pos += s->length;
			continue;
		}
		skip = off > pos ? off - pos : 0;
		take = sr_min((uint64_t)s->length - skip, len);
		if (n == max ||
		    mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr + skip, take,
			       IBV_ACCESS_LOCAL_WRITE, false, &refs[n])) {
			while (n--)
				mr_release(&refs[n]);
			return -EACCES;
		}
		iov[n].iov_base = (void *)refs[n].addr;
		iov[n].iov_len = take;
		n++;
		off += take;
		len -= take;
		pos += s->length;
	}
	return n;
}

int qp_place_read(struct sr_qp *qp, uint32_t msn, uint64_t off, uint32_t len,
		  struct iovec *iov, struct sr_mref *refs, int max)
{
	struct sr_swqe *w;
	int ret = -EAGAIN;

	if (!qp_zcopy_ok(qp))
		return -EAGAIN;
	sr_mutex_lock(&qp->lock);
	w = qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_SQE ? sq_find_sent_locked(qp, msn) : NULL;
	if (w && w->opcode == IBV_WR_RDMA_READ)
		ret = read_sink(qp, w, off, len, iov, refs, max);
	sr_mutex_unlock(&qp->lock);
	return ret;
}

/* RFC 7306 §6.x Immediate Data after a WRITE: consumes a receive WQE and
 * completes it as IB's RDMA WRITE with immediate, whose byte_len is the
 * length of the WRITE just placed. */
static enum rx_result rx_imm(struct sr_qp *qp, struct sr_msg *m)
{
	uint8_t rbuf[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
	struct sr_rwqe *r = next_rwqe(qp, (struct sr_rwqe *)rbuf);

	if (!r)
		return RX_PARK;
	respond(qp, m, SR_MSG_ACK, SR_ST_OK);
	m->len = qp->rx_last_write_len;
	recv_complete(qp, r, m, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS);
	m->len = 0;
	return RX_DONE;
}

static enum rx_result rx_read(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_mref ref = { 0 };
	struct sr_msg *r;
	/* A large response goes by reference, read by the channel straight
	 * from the registered memory (as a SEND's payload does). */
	bool by_ref = qp->chan && qp->chan->zcopy && qp_zcopy_ok(qp) && m->rd_len >= 4096;

	r = msg_alloc(by_ref ? 0 : m->rd_len);
	if (r && by_ref) {
		r->src = calloc(1, sizeof(*r->src));
		if (!r->src) {
			msg_free(r);
			r = NULL;
		}
	}
	if (!r) {
		rx_fail(qp, m, SR_ST_REM_OP, IBV_EVENT_QP_FATAL);
		return RX_DONE;
	}
	if (by_ref) {
		if (rx_resolve(qp, m, m->rd_len, IBV_ACCESS_REMOTE_READ, &ref)) {
			msg_free(r);
			rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return RX_DONE;
		}
		r->src->n = 1;
		r->src->iov[0] = (struct iovec){ (void *)ref.addr, m->rd_len };
		r->src->refs[0].addr = ref.addr;
		r->src->refs[0].users = ref.users;
		r->len = m->rd_len;
	} else if (m->rd_len) {
		if (rx_resolve(qp, m, m->rd_len, IBV_ACCESS_REMOTE_READ, &ref) ||
		    mref_read(&ref, r->payload, m->rd_len)) {
			mr_release(&ref);
			msg_free(r);
			rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return RX_DONE;
		}
		mr_release(&ref);
	}
	r->op = SR_MSG_READ_RESP;
	r->msn = m->msn;
	rx_chan_send(qp, r);
	return RX_DONE;
}

static enum rx_result rx_atomic(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_mref ref = { 0 };
	struct sr_msg *r;
	uint64_t orig = 0;

	/* IBTA 9.4.5: the target must be 8-byte aligned. */
	if (m->to & 7) {
		rx_fail(qp, m, SR_ST_REM_INV_REQ, IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
	/* Another process's region: its atomics are ordered by its own
	 * lock, which we cannot take (docs/COMPAT.md). */
	if (rx_resolve(qp, m, 8, IBV_ACCESS_REMOTE_ATOMIC, &ref) || ref.xmr ||
	    mem_atomic(ref.addr, m->atomic_op, m->atomic_op == SR_ATOMIC_CMP_SWP ? m->compare
									      : m->add_swap,
		       m->add_swap, &orig)) {
		mr_release(&ref);
		rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
		return RX_DONE;
	}
	mr_release(&ref);
	r = msg_alloc(0);
	if (!r)
		return RX_DONE;
	r->op = SR_MSG_ATOMIC_RESP;
	r->msn = m->msn;
	r->orig = orig;
	rx_chan_send(qp, r);
	return RX_DONE;
}

/* IBTA 1.5 ATOMIC WRITE: 8 bytes stored in one piece, atomic with respect
 * to the other atomics (mem_atomic). The target must be 8-byte aligned
 * (as for atomics, IBTA 9.4.5: else Invalid Request), and it is checked
 * as an RDMA WRITE of 8 bytes is: the QP and the region must allow
 * IBV_ACCESS_REMOTE_WRITE (IBTA 1.5 treats it as a write; rxe checks the
 * same, and rdma-core's test registers its MR with remote write only).
 * Answered with an ACK, like a WRITE. */
static enum rx_result rx_atomic_write(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_mref ref = { 0 };
	uint64_t orig;

	if (m->to & 7) {
		rx_fail(qp, m, SR_ST_REM_INV_REQ, IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
	/* Not on another process's region (ref.xmr): its atomics are
	 * ordered by that process's lock, and ref.addr is not ours. */
	if (rx_resolve(qp, m, 8, IBV_ACCESS_REMOTE_WRITE, &ref) || ref.xmr ||
	    mem_atomic(ref.addr, SR_ATOMIC_WRITE, 0, m->add_swap, &orig)) {
		mr_release(&ref);
		rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
		return RX_DONE;
	}
	mr_release(&ref);
	respond(qp, m, SR_MSG_ACK, SR_ST_OK);
	return RX_DONE;
}

static enum rx_result rx_request_one(struct sr_qp *qp, struct sr_msg *m)
{
	/* No responder resources (max_dest_rd_atomic 0): the QP takes no
	 * READ or atomic request. An invalid request, as rxe and hardware
	 * NAK it. (The CM gives its QPs one at least, cm_qp.c.) */
	if ((m->op == SR_MSG_READ_REQ || m->op == SR_MSG_ATOMIC_REQ) &&
	    !qp->attr.max_dest_rd_atomic) {
		rx_fail(qp, m, SR_ST_REM_INV_REQ, IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
	switch (m->op) {
	case SR_MSG_SEND: return rx_send(qp, m);
	case SR_MSG_WRITE: return rx_write(qp, m);
	case SR_MSG_READ_REQ: return rx_read(qp, m);
	case SR_MSG_ATOMIC_REQ: return rx_atomic(qp, m);
	case SR_MSG_IMM: return rx_imm(qp, m);
	case SR_MSG_ATOMIC_WRITE: return rx_atomic_write(qp, m);
	default:
		rx_fail(qp, m, SR_ST_REM_INV_REQ, IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
}

/* XRC_RECV: each request is received into the SRQ the last XRC header
 * named, if that SRQ is in the QP's domain (IBTA Annex A14: else the
 * request is NAKed, Remote Access Error, as a bad key would be). */
static enum rx_result rx_request_xrc(struct sr_qp *qp, struct sr_msg *m)
{
	enum rx_result r;

	if (m->op == SR_MSG_XRC) {
		qp->rx_srqn = m->srqn;
		return RX_DONE;
	}
	qp->rx_srq = xdom_srq_get(qp->xdom, qp->rx_srqn);
	if (!qp->rx_srq) {
		sr_dbg("QP %#x: no XRC SRQ %#x in its domain", qp->ibqp.qp_base.qp_num,
		       qp->rx_srqn);
		rx_fail(qp, m, SR_ST_REM_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
		return RX_DONE;
	}
	r = rx_request_one(qp, m);
	xdom_srq_put(qp->rx_srq);
	qp->rx_srq = NULL;
	return r;
}

static enum rx_result rx_request(struct sr_qp *qp, struct sr_msg *m)
{
	if (qp->xdom)
		return rx_request_xrc(qp, m);
	/* XRC headers are for XRC_RECV QPs; an XRC_SEND QP takes no requests */
	if (m->op == SR_MSG_XRC || qp_type(qp) == IBV_QPT_XRC_SEND) {
		rx_fail(qp, m, SR_ST_REM_INV_REQ, IBV_EVENT_QP_REQ_ERR);
		return RX_DONE;
	}
	return rx_request_one(qp, m);
}

static enum ibv_wc_status status_to_wc(int st)
{
	switch (st) {
	case SR_ST_OK: return IBV_WC_SUCCESS;
	case SR_ST_REM_ACCESS: return IBV_WC_REM_ACCESS_ERR;
	case SR_ST_REM_INV_REQ: return IBV_WC_REM_INV_REQ_ERR;
	case SR_ST_RNR: return IBV_WC_RNR_RETRY_EXC_ERR;
	case SR_ST_FATAL: return IBV_WC_RETRY_EXC_ERR;
	default: return IBV_WC_REM_OP_ERR;
	}
}

/* Land a READ response in the WQE's scatter list. */
/* Land (a segment of) a READ response at its offset in the WQE's scatter
 * list. Returns SUCCESS while more is to come. */
static enum ibv_wc_status land_read(struct sr_qp *qp, struct sr_swqe *w, struct sr_msg *m)
{
	uint32_t got = (m->flags & SR_MSGF_PLACED) ? m->placed : m->len;

	if (m->flags & SR_MSGF_PLACE_ERR)
		return IBV_WC_LOC_PROT_ERR;
	if (m->to != w->rd_got)
		return IBV_WC_BAD_RESP_ERR;	/* out of order or overlapping */
	if (!(m->flags & SR_MSGF_PLACED) && m->len) {
		struct iovec iov[SR_MAX_SGE];
		struct sr_mref refs[SR_MAX_SGE];
		int n = read_sink(qp, w, m->to, m->len, iov, refs, SR_MAX_SGE);
		size_t off = 0;
		int bad = 0;

		if (n == -ERANGE)
			return IBV_WC_BAD_RESP_ERR;
		if (n < 0)
			return IBV_WC_LOC_PROT_ERR;
		for (int i = 0; i < n; i++) {
			bad |= mref_write(&refs[i], m->payload + off, iov[i].iov_len);
			off += iov[i].iov_len;
			mr_release(&refs[i]);
		}
		if (bad)
			return IBV_WC_LOC_PROT_ERR;
	}
	w->rd_got += got;
	if (!(m->flags & SR_MSGF_MORE) && w->rd_got != w->length)
		return IBV_WC_BAD_RESP_ERR;
	return IBV_WC_SUCCESS;
}

/* IBTA 9.7.5.2.8 Table 45: the RNR NAK timer field, in microseconds. */
static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520,
};

static void qp_rnr_fire(struct sr_timer *t)
{
	struct sr_qp *qp = container_of(t, struct sr_qp, rnr_timer);
	struct sr_swqe *w;
	bool term = false;

	sr_mutex_lock(&qp->lock);
	w = qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD ?
		sq_find_sent_locked(qp, qp->rnr_msn) : NULL;
	if (w) {
		sr_dbg("QP %#x: RNR retries exhausted for msn %u", qp->ibqp.qp_base.qp_num,
		       qp->rnr_msn);
		/* The responder still holds the request: make it drop it. */
		if (qp->chan) {
			struct sr_msg *tm = msg_alloc(0);

			if (tm) {
				tm->op = SR_MSG_TERMINATE;
				tm->msn = SR_MSN_OLDEST;
				tm->status = SR_ST_RNR;
				term = rx_chan_send(qp, tm) == 0;
			}
		}
		sq_settle_locked(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
	}
	sr_mutex_unlock(&qp->lock);
	if (term)
		qp_kick(qp);
}

/* The responder parked request msn. rnr_retry 7 waits for ever (IBTA
 * 9.7.5.2.8); otherwise the request fails after rnr_retry waits of the
 * responder's RNR timer. Caller holds qp->lock. */
void qp_rnr_arm_locked(struct sr_qp *qp, uint32_t msn, uint8_t timer)
{
	uint64_t ns;

	if (qp->attr.rnr_retry >= 7)
		return;
	if (!qp->rnr_pg)
		qp->rnr_pg = chan_progress(qp->ctx);
	if (!qp->rnr_pg)
		return;
	qp->rnr_msn = msn;
	qp->rnr_timer.fire = qp_rnr_fire;
	ns = (uint64_t)rnr_timer_us[timer & 31] * 1000 * qp->attr.rnr_retry;
	progress_timer_arm(qp->rnr_pg, &qp->rnr_timer, ns);
}

static void rx_response(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_swqe *w;
	enum ibv_wc_status st = IBV_WC_SUCCESS;

	if (m->op == SR_MSG_ACK && m->status == SR_ST_OK) {
		sq_ack_upto_locked(qp, m->msn);
		return;
	}
	if (m->op == SR_MSG_RNR) {
		qp_rnr_arm_locked(qp, m->msn, m->status);
		return;
	}
	w = sq_find_sent_locked(qp, m->msn);

	if (!w) {
		if (m->op == SR_MSG_TERMINATE) {
			qp_to_error_locked(qp);
			ctx_async_event(qp->ctx, qp, IBV_EVENT_QP_FATAL);
		}
		return;		/* stale or unsolicited response: ignore */
	}
	switch (m->op) {
	case SR_MSG_ACK:
	case SR_MSG_TERMINATE:
		st = status_to_wc(m->status);
		if (m->op == SR_MSG_TERMINATE && st == IBV_WC_SUCCESS)
			st = IBV_WC_REM_OP_ERR;
		break;
	case SR_MSG_READ_RESP:
		st = w->opcode == IBV_WR_RDMA_READ ? land_read(qp, w, m) : IBV_WC_BAD_RESP_ERR;
		if (st == IBV_WC_SUCCESS && (m->flags & SR_MSGF_MORE))
			return;		/* more segments to come */
		break;
	case SR_MSG_ATOMIC_RESP: {
		struct sr_mref ref;

		if (w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
		    w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
			st = IBV_WC_BAD_RESP_ERR;
			break;
		}
		if (mr_resolve(qp->ctx, qp->pd, w->sge[0].lkey, w->sge[0].addr, 8,
			       IBV_ACCESS_LOCAL_WRITE, false, &ref)) {
			st = IBV_WC_LOC_PROT_ERR;
			break;
		}
		if (mref_write(&ref, &m->orig, 8))
			st = IBV_WC_LOC_PROT_ERR;
		mr_release(&ref);
		break;
	}
	}
	sq_settle_locked(qp, w, st);
	/* An answer frees a slot of the peer's IRD, and may be the last a
	 * fenced request waited for: work that waited goes now (the
	 * channel flushes it after this delivery). */
	if (qp->chan && qp->state == IBV_QPS_RTS && qp->sq_next != qp->sq_tail)
		qp_sq_progress_locked(qp);
}

void qp_rx_lent_flush_locked(struct sr_qp *qp, bool complete)
{
	for (; complete && qp->lent_head != qp->lent_tail; qp->lent_head++) {
		struct ibv_wc wc = {
			.wr_id = qp->lent_wr[qp->lent_head % SR_LENT_MAX],
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_WC_RECV,
			.qp_num = qp->ibqp.qp_base.qp_num,
		};

		cq_push(qp->rcq, &wc, false);
	}
	qp->lent_head = qp->lent_tail;
	qp->lent_gen++;
}

void qp_rx_pending_clear_locked(struct sr_qp *qp)
{
	while (!sr_list_empty(&qp->rx_pending)) {
		struct sr_msg *m = container_of(qp->rx_pending.next, struct sr_msg, link);

		sr_list_del(&m->link);
		msg_free(m);
	}
	qp->rx_pending_bytes = 0;
	qp->ud_held = 0;
}

bool qp_rx_congested(struct sr_qp *qp)
{
	/* A hint, read without the QP lock (once per receive pass and per
	 * kick): a stale value pauses or resumes one pass late, and the
	 * next pass or kick looks again. */
	return __atomic_load_n(&qp->rx_pending_bytes, __ATOMIC_RELAXED) > SR_RX_BACKLOG;
}

bool qp_awaits_nothing(struct sr_qp *qp)
{
	/* (a stale value misjudges one pass: the next looks again) */
	return !qp->srq && !qp->xdom &&
	       __atomic_load_n(&qp->sq_head, __ATOMIC_RELAXED) ==
		       __atomic_load_n(&qp->sq_tail, __ATOMIC_RELAXED) &&
	       __atomic_load_n(&qp->rq.head, __ATOMIC_RELAXED) ==
		       __atomic_load_n(&qp->rq.tail, __ATOMIC_RELAXED);
}

/* Process parked requests in order until one must wait again. */
static void rx_drain_pending_locked(struct sr_qp *qp)
{
	while (!sr_list_empty(&qp->rx_pending) && qp->state != IBV_QPS_ERR) {
		struct sr_msg *m = container_of(qp->rx_pending.next, struct sr_msg, link);

		sr_list_del(&m->link);
		qp->rx_pending_bytes -= sizeof(*m) + m->len;
		if (rx_request(qp, m) == RX_PARK) {
			qp->rx_pending_bytes += sizeof(*m) + m->len;
			/* back at the head: sr_list has no add_head, so
			 * splice by hand */
			m->link.next = qp->rx_pending.next;
			m->link.prev = &qp->rx_pending;
			qp->rx_pending.next->prev = &m->link;
			qp->rx_pending.next = &m->link;
			return;
		}
		msg_free(m);
	}
}

void qp_rx_resume_locked(struct sr_qp *qp)
{
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UD)
		ud_held_drain_locked(qp);
	else
		rx_drain_pending_locked(qp);
}

/* A receive WQE appeared where these QPs take theirs (an SRQ): let what
 * they parked for want of one through. Drops the references the caller
 * took on each; call with no lock held. */
void qp_resume_parked(struct sr_qp **list, int n)
{
	for (int i = 0; i < n; i++) {
		bool resumed;

		sr_mutex_lock(&list[i]->lock);
		resumed = !sr_list_empty(&list[i]->rx_pending);
		if (resumed)
			qp_rx_resume_locked(list[i]);
		sr_mutex_unlock(&list[i]->lock);
		if (resumed)
			qp_kick(list[i]);
		qp_put(list[i]);
	}
}

static bool is_response(uint8_t op)
{
	return op == SR_MSG_ACK || op == SR_MSG_READ_RESP || op == SR_MSG_ATOMIC_RESP ||
	       op == SR_MSG_TERMINATE || op == SR_MSG_RNR;
}

static bool qp_rx_locked(struct sr_qp *qp, struct sr_msg *m)
{
	bool kept = false;

	if (m->op >= SR_MSG_OP_MAX)
		return false;
	if (is_response(m->op)) {
		if (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD ||
		    qp->state == IBV_QPS_SQE)
			rx_response(qp, m);
		else if (m->op == SR_MSG_TERMINATE && qp->state == IBV_QPS_RTR)
			qp_to_error_locked(qp);
		goto out;
	}
	/* Requests need a receive side: RTR and later, not ERROR. */
	if (qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE)
		goto out;
	/* IBTA 11.6.3: the first request of a connection found the QP in
	 * RTR (its program has not moved it to RTS yet): communication is
	 * established, an affiliated asynchronous event of the QP. */
	if (qp->state == IBV_QPS_RTR && !qp->comm_est && !qp->xdom) {
		qp->comm_est = true;
		ctx_async_event(qp->ctx, qp, IBV_EVENT_COMM_EST);
	}
	if (!sr_list_empty(&qp->rx_pending) || rx_request(qp, m) == RX_PARK) {
		/* UC has no RNR: a message with no receive WQE is dropped
		 * (IBTA 9.7.5.2.4 for UC). */
		if (qp->ibqp.qp_base.qp_type == IBV_QPT_UC)
			goto out;
		/* Tell the requester once per parked head request: its
		 * rnr_retry decides how long it will wait. */
		if (sr_list_empty(&qp->rx_pending))
			respond(qp, m, SR_MSG_RNR, SR_ST_OK);
		/* RNR: keep it, in order, until a receive WQE is posted.
		 * With rnr_retry 7 (infinite) this is exactly what the
		 * requester's retries would achieve. */
		sr_list_add_tail(&qp->rx_pending, &m->link);
		qp->rx_pending_bytes += sizeof(*m) + m->len;
		kept = true;
	}
out:
	return kept;
}

bool qp_rx(struct sr_qp *qp, struct sr_msg *m)
{
	bool kept;

	sr_mutex_lock(&qp->lock);
	kept = qp_rx_locked(qp, m);
	sr_mutex_unlock(&qp->lock);
	return kept;
}

void qp_rx_many(struct sr_qp *qp, struct sr_msg **m, int n, const uint32_t *ack)
{
	sr_mutex_lock(&qp->lock);
	/* (what qp_rx_locked does with an ACK message of status OK) */
	if (ack && (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD ||
		    qp->state == IBV_QPS_SQE))
		sq_ack_upto_locked(qp, *ack);
	qp->rx_batch = n > 1;	/* (one message: nothing to save, and a
				 * ping-pong's latency pays for the hold) */
	for (int i = 0; i < n; i++)
		if (!qp_rx_locked(qp, m[i]))
			msg_free(m[i]);
	qp->rx_batch = false;
	ack_release(qp);
	qp_rx_wc_release(qp);
	sr_mutex_unlock(&qp->lock);
}

/* A lent message the QP parked (rx_pending) is replaced there by a copy
 * of its own. Out of memory, it is lost: the QP cannot go on. */
static void rx_keep_lent(struct sr_qp *qp, struct sr_msg *m)
{
	struct sr_msg *h = msg_alloc(m->len);
	uint8_t small;

	if (!h) {
		sr_list_del(&m->link);
		qp->rx_pending_bytes -= sizeof(*m) + m->len;
		qp_to_error_locked(qp);
		ctx_async_event(qp->ctx, qp, IBV_EVENT_QP_FATAL);
		return;
	}
	small = h->small;
	memcpy(h, m, sizeof(*m) + m->len);
	h->small = small;
	h->link.prev->next = &h->link;
	h->link.next->prev = &h->link;
}

void qp_rx_lent(struct sr_qp *qp, struct sr_msg *m, const uint32_t *ack)
{
	sr_mutex_lock(&qp->lock);
	if (ack && (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD ||
		    qp->state == IBV_QPS_SQE))
		sq_ack_upto_locked(qp, *ack);
	if (m && qp_rx_locked(qp, m))
		rx_keep_lent(qp, m);
	sr_mutex_unlock(&qp->lock);
}

/* qp_rx_lent of a SEND the poller's quick pass took (tcp_fast.c), the
 * plain case in one pass: an RC QP in RTS, its own receive queue, nothing
 * parked, a receive WQE of one piece that holds it and a key remembered
 * (the span of the last receive's): the ACK it carries settles our SQ,
 * its bytes go into the receive, the ACK we owe is queued, then the
 * completion, as rx_send does. Anything else, and a write that does not
 * go through the remembered span, is qp_rx_locked's from where it is. */
void qp_rx_lent_send(struct sr_qp *qp, struct sr_msg *m, const uint32_t *ack)
{
	struct sr_rwqe *r;

	sr_mutex_lock(&qp->lock);
	if (qp->state != IBV_QPS_RTS || qp->srq || qp->xdom || qp_type(qp) != IBV_QPT_RC ||
	    !qp->chan || !qp->chan->acks || !qp->chan->ops->ack || m->op != SR_MSG_SEND ||
	    (m->flags & SR_MSGF_INV) || !sr_list_empty(&qp->rx_pending) ||
	    qp->rq.head == qp->rq.tail) {
		sr_mutex_unlock(&qp->lock);
		qp_rx_lent(qp, m, ack);
		return;
	}
	if (ack)
		sq_ack_upto_locked(qp, *ack);
	r = rq_at(&qp->rq, qp->rq.head);
	if (qp->state == IBV_QPS_RTS && r->num_sge == 1 && m->len <= r->sge[0].length &&
	    (!m->len || !span_write(qp, &qp->rspan, r->sge[0].lkey, r->sge[0].addr,
				    IBV_ACCESS_LOCAL_WRITE, m->payload, m->len))) {
		qp->rq.head++;
		qp->chan->ops->ack(qp->chan, m->msn);
		recv_complete(qp, r, m, IBV_WC_RECV, IBV_WC_SUCCESS);
	} else if (qp_rx_locked(qp, m)) {
		rx_keep_lent(qp, m);
	}
	sr_mutex_unlock(&qp->lock);
}

void qp_tx_fault(struct sr_qp *qp, uint32_t msn)
{
	struct sr_swqe *w;

	sr_mutex_lock(&qp->lock);
	w = sq_find_sent_locked(qp, msn);
	if (w)
		sq_settle_locked(qp, w, IBV_WC_LOC_PROT_ERR);
	sr_mutex_unlock(&qp->lock);
	qp_kick(qp);
}

void qp_tx_written(struct sr_qp *qp, uint32_t msn)
{
	sr_mutex_lock(&qp->lock);
	if (qp->state >= IBV_QPS_RTS && qp->state <= IBV_QPS_SQE)
		sq_ack_upto_locked(qp, msn);
	sr_mutex_unlock(&qp->lock);
}
