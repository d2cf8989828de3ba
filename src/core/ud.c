/* Unreliable Datagram QPs: address handles, the UD send queue and the
 * receive side (IBTA Vol 1 §9.8 and §10.2.5; ibv_post_send(3) "UD").
 *
 * A UD send is one datagram of at most the port MTU, handed to the
 * context's UDP socket (chan/udp.c) in the poster's thread, and complete
 * once the socket took it. Nothing acknowledges it: a datagram that finds
 * no receive WQE, the wrong Q_Key or a QP that cannot receive is dropped
 * at the receiver and counted, as hardware does.
 */
#include "core/qp.h"
#include "chan/udp.h"
#include "wire/ud.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- address handles ---------------------------------------------------- */

int ah_create(struct sr_pd *pd, const struct ibv_ah_attr *attr, struct sr_ah **out)
{
	struct sr_context *ctx = to_ctx(pd->ibpd.context);
	struct sr_gid tbl[SR_GID_TBL_LEN];
	struct sr_ah *ah;
	struct in6_addr grp;
	int n;

	if (attr->port_num != 1)
		return -EINVAL;
	/* RoCE: a destination is an IP address, so the AH needs a GRH
	 * (the port reports IBV_QPF_GRH_REQUIRED). */
	if (!attr->is_global)
		return -EINVAL;
	n = dev_query_gids(tbl, SR_GID_TBL_LEN);
	if (attr->grh.sgid_index >= n)
		return -EINVAL;
	if (atomic_load(&ctx->nah) >= SR_MAX_AH)
		return -ENOMEM;
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return -ENOMEM;
	ah->attr = *attr;
	ah->av.sgid = tbl[attr->grh.sgid_index].gid;
	ah->av.ifindex = tbl[attr->grh.sgid_index].ifindex;
	ah->av.hop_limit = attr->grh.hop_limit;
	ah->av.tclass = attr->grh.traffic_class;
	ah->av.flow_label = attr->grh.flow_label & UD_FLOW_MASK;
	ah->av.mcast = chan_udp_mgid(&attr->grh.dgid, &grp);
	ah->av.dst.in6.sin6_family = AF_INET6;
	if (ah->av.mcast)
		ah->av.dst.in6.sin6_addr = grp;
	else
		memcpy(&ah->av.dst.in6.sin6_addr, attr->grh.dgid.raw, 16);
	if (IN6_IS_ADDR_LINKLOCAL(&ah->av.dst.in6.sin6_addr) ||
	    IN6_IS_ADDR_MC_LINKLOCAL(&ah->av.dst.in6.sin6_addr) ||
	    IN6_IS_ADDR_MC_NODELOCAL(&ah->av.dst.in6.sin6_addr))
		ah->av.dst.in6.sin6_scope_id = ah->av.ifindex;
	ah->av.dst_len = sizeof(ah->av.dst.in6);
	ah->ibah.context = pd->ibpd.context;
	ah->ibah.pd = &pd->ibpd;
	ah->ibah.handle = sr_random32();
	pd_get(pd);
	atomic_fetch_add(&ctx->nah, 1);
	*out = ah;
	return 0;
}

void ah_destroy(struct sr_ah *ah)
{
	pd_put(to_pd(ah->ibah.pd));
	atomic_fetch_sub(&to_ctx(ah->ibah.context)->nah, 1);
	free(ah);
}

/* ---- QP lifetime -------------------------------------------------------- */

int ud_qp_create(struct sr_context *ctx)
{
	return chan_udp_open(ctx);
}

void ud_qp_destroy(struct sr_qp *qp)
{
	chan_udp_detach_all(qp);
}

/* ---- send ---------------------------------------------------------------- */

int ud_sq_fill_locked(struct sr_qp *qp, struct sr_swqe *w, const struct ibv_send_wr *wr)
{
	struct sr_ah *ah;

	/* ibv_post_send(3): UD carries SEND and SEND_WITH_IMM only. */
	if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)
		return -EINVAL;
	/* IBTA C10-93.1.1 forbids emitting a message above the port MTU and
	 * forbids an error completion for it; refusing the post keeps both
	 * rules and tells the program at once (rxe instead completes it
	 * successfully without sending: docs/COMPAT.md). */
	if (w->length > UD_MAX_PAYLOAD)
		return -EINVAL;
	if (!wr->wr.ud.ah || wr->wr.ud.ah->context != qp->ibqp.qp_base.context ||
	    wr->wr.ud.remote_qpn > UD_QPN_MASK)
		return -EINVAL;
	ah = container_of(wr->wr.ud.ah, struct sr_ah, ibah);
	w->ud_av = ah->av;
	w->ud_qpn = wr->wr.ud.remote_qpn;
	/* IBTA 10.2.5 / ibv_post_send(3): a Q_Key with the high-order bit
	 * set means "use the QP's own Q_Key". */
	w->ud_qkey = (wr->wr.ud.remote_qkey & 0x80000000U) ? qp->attr.qkey
							     : wr->wr.ud.remote_qkey;
	return 0;
}

/* Send one WQE. Returns 0 (settled), -EAGAIN (the socket is full: leave
 * it posted). */
static int ud_send_one(struct sr_qp *qp, struct sr_swqe *w)
{
	struct iovec iov[1 + SR_MAX_SGE];
	struct sr_mref refs[SR_MAX_SGE];
	uint8_t hdr[UD_HDR_LEN];
	struct ud_hdr h = {
		.opcode = w->opcode == IBV_WR_SEND_WITH_IMM ? UD_OP_SEND_IMM : UD_OP_SEND,
		.se = (w->flags & IBV_SEND_SOLICITED) != 0,
		.flow_label = w->ud_av.flow_label,
		.dst_qpn = w->ud_qpn,
		.src_qpn = qp->ibqp.qp_base.qp_num,
		.qkey = w->ud_qkey,
		.imm = be32toh(w->imm),
		.len = (uint32_t)w->length,
	};
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	uint8_t bounce[SR_MAX_INLINE];	/* UD messages are at most the MTU */
	size_t bounced = 0;
	int n = 1, nref = 0, ret;

	if (ud_hdr_encode(hdr, sizeof(hdr), &h) < 0) {
		st = IBV_WC_LOC_QP_OP_ERR;
		goto settle;
	}
	iov[0] = (struct iovec){ hdr, sizeof(hdr) };
	if (w->flags & IBV_SEND_INLINE) {
		if (w->length)
			iov[n++] = (struct iovec){ w->inl, w->length };
	} else {
		/* Straight from registered memory: sendmsg copies it, and a
		 * page unmapped under us is EFAULT, not a crash (DESIGN 12). */
		for (uint32_t i = 0; i < w->num_sge; i++) {
			struct ibv_sge *s = &w->sge[i];

			if (!s->length)
				continue;
			if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length, 0, false,
				       &refs[nref])) {
				st = IBV_WC_LOC_PROT_ERR;
				goto release;
			}
			if (refs[nref].xmr) {
				/* Another process's memory: staged (decision
				 * 22); a UD message fits the bounce buffer. */
				if (bounced + s->length > sizeof(bounce) ||
				    mref_read(&refs[nref], bounce + bounced, s->length)) {
					nref++;
					st = IBV_WC_LOC_PROT_ERR;
					goto release;
				}
				iov[n++] = (struct iovec){ bounce + bounced, s->length };
				bounced += s->length;
			} else {
				iov[n++] = (struct iovec){ (void *)refs[nref].addr, s->length };
			}
			nref++;
		}
	}
	ret = chan_udp_send(qp->ctx, &w->ud_av, w->ud_qpn, iov, n);
	if (ret == -EAGAIN) {
		while (nref--)
			mr_release(&refs[nref]);
		return -EAGAIN;
	}
	if (ret == -EFAULT)
		st = IBV_WC_LOC_PROT_ERR;
	/* Any other failure is the network's: a lost datagram. */
release:
	while (nref--)
		mr_release(&refs[nref]);
settle:
	w->state = SR_WQE_SENT;
	qp->sq_next++;
	sq_settle_locked(qp, w, st);
	return 0;
}

void ud_sq_progress_locked(struct sr_qp *qp)
{
	while (qp->state == IBV_QPS_RTS && qp->sq_next != qp->sq_tail) {
		if (ud_send_one(qp, sq_at(qp, qp->sq_next)) == -EAGAIN)
			break;
	}
}

/* ---- receive ------------------------------------------------------------- */

static bool ud_take_rwqe(struct sr_qp *qp, struct sr_rwqe *out)
{
	if (qp->srq)
		return srq_take(qp->srq, out) == 0;
	if (qp->rq.head == qp->rq.tail)
		return false;
	memcpy(out, rq_at(&qp->rq, qp->rq.head), qp->rq.stride);
	qp->rq.head++;
	return true;
}

/* Scatter the GRH area, then the payload, over the WQE's list. */
static enum ibv_wc_status ud_scatter(struct sr_qp *qp, struct sr_rwqe *r,
				     const uint8_t *grh, const uint8_t *payload, uint32_t len)
{
	const struct iovec src[2] = { { (void *)grh, UD_GRH_LEN }, { (void *)payload, len } };
	uint64_t room = 0;
	size_t si = 0, soff = 0;

	for (uint32_t i = 0; i < r->num_sge; i++)
		room += r->sge[i].length;
	if (room < (uint64_t)UD_GRH_LEN + len)
		return IBV_WC_LOC_LEN_ERR;
	for (uint32_t i = 0; i < r->num_sge && si < 2; i++) {
		struct ibv_sge *s = &r->sge[i];
		uint32_t doff = 0;

		while (doff < s->length && si < 2) {
			size_t n = sr_min((size_t)(s->length - doff), src[si].iov_len - soff);
			struct sr_mref ref;

			if (n) {
				if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr + doff, n,
					       IBV_ACCESS_LOCAL_WRITE, false, &ref))
					return IBV_WC_LOC_PROT_ERR;
				if (mref_write(&ref, (const uint8_t *)src[si].iov_base + soff, n)) {
					mr_release(&ref);
					return IBV_WC_LOC_PROT_ERR;
				}
				mr_release(&ref);
			}
			doff += (uint32_t)n;
			soff += n;
			if (soff == src[si].iov_len) {
				si++;
				soff = 0;
			}
		}
	}
	return IBV_WC_SUCCESS;
}

/* Complete one datagram into a receive WQE. qp->lock held. */
static void ud_complete_locked(struct sr_qp *qp, struct sr_rwqe *r, const struct ud_hdr *h,
			       const uint8_t *payload, const struct ud_grh_info *g)
{
	uint8_t grh[UD_GRH_LEN];
	struct ibv_wc wc;
	enum ibv_wc_status st;

	ud_grh_build(grh, g);
	st = ud_scatter(qp, r, grh, payload, h->len);
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = r->wr_id;
	wc.status = st;
	wc.opcode = IBV_WC_RECV;
	wc.qp_num = qp->ibqp.qp_base.qp_num;
	if (st == IBV_WC_SUCCESS) {
		/* ibv_poll_cq(3): for UD, byte_len counts the GRH area too;
		 * slid and dlid_path_bits are 0 on RoCE, and sl says IPv4
		 * or IPv6 as on mlx5 (wire/ud.h). */
		wc.byte_len = UD_GRH_LEN + h->len;
		wc.src_qp = h->src_qpn;
		wc.sl = ud_gid_v4mapped(g->sgid) ? UD_WC_SL_IPV4 : UD_WC_SL_IPV6;
		wc.wc_flags = IBV_WC_GRH;
		wc.pkey_index = 0;
		if (h->opcode == UD_OP_SEND_IMM) {
			wc.wc_flags |= IBV_WC_WITH_IMM;
			wc.imm_data = htobe32(h->imm);
		}
	}
	/* A receive buffer too small (or not writable) completes in error,
	 * but the QP keeps running: a peer's datagram must not be able to
	 * take it down (DESIGN.md decision 8; mlx5 would enter ERROR). */
	cq_push(qp->rcq, &wc, h->se);
}

/* A datagram that found no receive WQE is held (in qp->rx_pending, as an
 * sr_msg whose payload starts with its header and GRH facts) until the
 * program posts one, up to UD_HELD_MAX datagrams and UD_HELD_BYTES; past
 * that it is lost, as UD allows. A NIC would drop it at once, but on a
 * host whose CPUs the sender shares, "no WQE yet" mostly means that the
 * receiving program has not run yet: holding it is the datagram arriving
 * a little later, which UD allows as well. Not for SRQ-attached QPs,
 * whose receives are posted to the SRQ, not to them. */
#define UD_HELD_MAX	4096
#define UD_HELD_BYTES	(32U << 20)

struct ud_held {
	struct ud_hdr h;
	struct ud_grh_info g;
};

static bool ud_hold_locked(struct sr_qp *qp, const struct ud_hdr *h, const uint8_t *payload,
			   const struct ud_grh_info *g)
{
	struct sr_msg *m;
	struct ud_held *u;

	if (qp->srq || qp->ud_held >= UD_HELD_MAX ||
	    qp->rx_pending_bytes + sizeof(*m) + sizeof(*u) + h->len > UD_HELD_BYTES)
		return false;
	m = msg_alloc((uint32_t)sizeof(*u) + h->len);
	if (!m)
		return false;
	u = (struct ud_held *)m->payload;
	u->h = *h;
	u->g = *g;
	memcpy(m->payload + sizeof(*u), payload, h->len);
	sr_list_add_tail(&qp->rx_pending, &m->link);
	qp->rx_pending_bytes += sizeof(*m) + m->len;
	qp->ud_held++;
	return true;
}

void ud_held_drain_locked(struct sr_qp *qp)
{
	uint8_t rbuf[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
	struct sr_rwqe *r = (struct sr_rwqe *)rbuf;

	if (qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE) {
		qp_rx_pending_clear_locked(qp);
		qp->ud_held = 0;
		return;
	}
	while (!sr_list_empty(&qp->rx_pending) && ud_take_rwqe(qp, r)) {
		struct sr_msg *m = container_of(qp->rx_pending.next, struct sr_msg, link);
		struct ud_held *u = (struct ud_held *)m->payload;

		sr_list_del(&m->link);
		qp->rx_pending_bytes -= sizeof(*m) + m->len;
		qp->ud_held--;
		ud_complete_locked(qp, r, &u->h, m->payload + sizeof(*u), &u->g);
		msg_free(m);
	}
}

enum ud_verdict ud_deliver(struct sr_qp *qp, const struct ud_hdr *h, const uint8_t *payload,
			   const struct ud_grh_info *g)
{
	uint8_t rbuf[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
	struct sr_rwqe *r = (struct sr_rwqe *)rbuf;

	sr_mutex_lock(&qp->lock);
	if (qp->ibqp.qp_base.qp_type != IBV_QPT_UD ||
	    qp->state < IBV_QPS_RTR || qp->state > IBV_QPS_SQE) {
		sr_mutex_unlock(&qp->lock);
		return UD_DROP_STATE;
	}
	/* IBTA 10.2.5 (C10-15): a datagram whose Q_Key differs from the
	 * QP's is dropped silently. */
	if (h->qkey != qp->attr.qkey) {
		sr_mutex_unlock(&qp->lock);
		return UD_DROP_QKEY;
	}
	/* Datagrams held earlier go first, in order. */
	ud_held_drain_locked(qp);
	if (!sr_list_empty(&qp->rx_pending) || !ud_take_rwqe(qp, r)) {
		bool held = ud_hold_locked(qp, h, payload, g);

		sr_mutex_unlock(&qp->lock);
		/* UD has no RNR: past the hold, the datagram is lost. */
		return held ? UD_HELD : UD_DROP_NO_WQE;
	}
	ud_complete_locked(qp, r, h, payload, g);
	sr_mutex_unlock(&qp->lock);
	return UD_DELIVERED;
}
