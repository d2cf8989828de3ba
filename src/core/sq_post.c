/* The posting of send and receive WRs (ibv_post_send(3),
 * ibv_post_recv(3)): checked and entered in the queues, and a lone small
 * request handed to the channel in one pass (DESIGN.md decision 11). The
 * queues' transmission and completion: sq.c. */
#include "core/qp.h"
#include "core/raw.h"
#include "core/sq.h"

#include <errno.h>
#include <string.h>

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
	if (qp->chan && ((qp->chan->rfc_only && sq_beyond_rfc5040(wr->opcode)) ||
			 sq_needs_ext(qp->chan, wr->opcode)))
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
	    sq_peer_refuses(qp->chan, w->opcode))
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
		if (sq_peer_refuses(ch, op))
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
		else if (sq_sge_addr(qp, &wr->sg_list[0], &a))
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
	ch = qp->raw ? NULL : qp_kick_take_locked(qp);
	sr_mutex_unlock(&qp->lock);
	if (qp->raw)
		qp_kick(qp);
	else
		qp_kick_give(ch);
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
