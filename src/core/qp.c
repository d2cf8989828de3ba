/* Queue pairs: creation, destruction, modify/query and linking two QPs
 * through a channel. The send and receive paths are in sq.c and rx.c. */
#include "core/qp.h"
#include "core/raw.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

void qp_get(struct sr_qp *qp)
{
	atomic_fetch_add(&qp->refs, 1);
}

void qp_put(struct sr_qp *qp)
{
	atomic_fetch_sub(&qp->refs, 1);
}

static int qp_check_cap(struct ibv_qp_init_attr_ex *a)
{
	struct ibv_qp_cap *c = &a->cap;

	if (c->max_send_wr > SR_MAX_QP_WR || c->max_send_sge > SR_MAX_SGE ||
	    c->max_inline_data > SR_MAX_INLINE)
		return -EINVAL;
	if (!a->srq && (c->max_recv_wr > SR_MAX_QP_WR || c->max_recv_sge > SR_MAX_SGE))
		return -EINVAL;
	return 0;
}

static int qp_alloc_queues(struct sr_qp *qp, struct ibv_qp_init_attr_ex *a)
{
	struct ibv_qp_cap *c = &qp->cap;
	int ret;

	c->max_send_wr = a->cap.max_send_wr;
	c->max_send_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
	/* Inline room: what was asked, and never less than the SGEs' worth
	 * or 64 bytes. Providers give at least what is asked and often more
	 * (ibv_create_qp(3) reports it back), and programs count on it:
	 * rdma_xclient posts a 16-byte inline SEND on a QP made with
	 * max_inline_data 0 (rxe allows max_send_sge * 16 bytes; mlx5
	 * more). */
	c->max_inline_data = sr_max(a->cap.max_inline_data,
				    sr_max((uint32_t)SR_MIN_INLINE,
					   c->max_send_sge * (uint32_t)sizeof(struct ibv_sge)));
	c->max_inline_data = sr_min(c->max_inline_data, (uint32_t)SR_MAX_INLINE);
	qp->sq_max_wr = c->max_send_wr;
	qp->sq_size = pow2_at_least(c->max_send_wr ? c->max_send_wr : 1);
	qp->sq_stride = (uint32_t)(sizeof(struct sr_swqe) + c->max_send_sge * sizeof(struct ibv_sge));
	qp->sq_stride = (qp->sq_stride + 7) & ~7U;
	qp->sq_buf = pd_buf_alloc(qp->pd, (size_t)qp->sq_size * qp->sq_stride,
				  SR_RES_TYPE_SQ, &qp->sq_custom);
	if (!qp->sq_buf)
		return -ENOMEM;
	if (c->max_inline_data) {
		qp->inl_buf = calloc(qp->sq_size, c->max_inline_data);
		if (!qp->inl_buf)
			goto err_sq;
	}
	if (qp->srq) {
		c->max_recv_wr = 0;
		c->max_recv_sge = 0;
	} else {
		c->max_recv_wr = a->cap.max_recv_wr;
		c->max_recv_sge = a->cap.max_recv_sge ? a->cap.max_recv_sge : 1;
		ret = rq_init_pd(&qp->rq, qp->pd, SR_RES_TYPE_RQ, c->max_recv_wr,
				 c->max_recv_sge);
		if (ret)
			goto err_inl;
	}
	return 0;
err_inl:
	free(qp->inl_buf);
err_sq:
	pd_buf_free(qp->pd, qp->sq_buf, SR_RES_TYPE_SQ, qp->sq_custom);
	return -ENOMEM;
}

/* Which objects each type needs (ibv_create_qp_ex(3)): an XRC_SEND QP
 * sends only (PD and send CQ; no receive queue), an XRC_RECV QP neither
 * sends nor has a receive queue of its own (only its XRC domain). */
static int qp_check_objs(struct ibv_qp_init_attr_ex *a, bool rss)
{
	int ret;

	if (rss && a->qp_type != IBV_QPT_RAW_PACKET)
		return -EINVAL;		/* RSS is for raw packet QPs */
	switch (a->qp_type) {
	case IBV_QPT_RAW_PACKET:
		ret = raw_qp_check(a);	/* EPERM without CAP_NET_RAW */
		if (ret)
			return ret;
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd)
			return -EINVAL;
		if (rss) {
			/* an RSS QP receives into its WQs only: no queues,
			 * no CQs (what it was given for them is ignored) */
			memset(&a->cap, 0, sizeof(a->cap));
			a->send_cq = a->recv_cq = NULL;
			return 0;
		}
		return a->send_cq && a->recv_cq ? 0 : -EINVAL;
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_UD:
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd)
			return -EINVAL;
		return a->send_cq && a->recv_cq ? 0 : -EINVAL;
	case IBV_QPT_XRC_SEND:
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq)
			return -EINVAL;
		a->recv_cq = NULL;
		a->srq = NULL;
		a->cap.max_recv_wr = a->cap.max_recv_sge = 0;
		return 0;
	case IBV_QPT_XRC_RECV:
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd)
			return -EINVAL;
		a->pd = NULL;
		a->send_cq = a->recv_cq = NULL;
		a->srq = NULL;
		memset(&a->cap, 0, sizeof(a->cap));
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

static const char *qp_type_name(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	case IBV_QPT_XRC_SEND: return "XRC_SEND";
	case IBV_QPT_XRC_RECV: return "XRC_RECV";
	case IBV_QPT_RAW_PACKET: return "raw packet";
	default: return "?";
	}
}

int qp_create(struct sr_context *ctx, struct ibv_qp_init_attr_ex *ua, struct sr_qp **out)
{
	struct ibv_qp_init_attr_ex la = *ua, *a = &la;	/* the caller's stays as given */
	struct sr_qp *qp;
	bool rss = a->comp_mask & (IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE);
	uint32_t slot;
	int ret;

	ret = qp_check_objs(a, rss);
	if (ret)
		return ret;
	ret = qp_check_cap(a);
	if (ret)
		return ret;
	if (a->qp_type == IBV_QPT_UD) {
		ret = ud_qp_create(ctx);	/* the context's UDP socket */
		if (ret)
			return ret;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->ctx = ctx;
	qp->pd = a->pd ? to_pd(a->pd) : NULL;
	qp->scq = a->send_cq ? to_cq(a->send_cq) : NULL;
	qp->rcq = a->recv_cq ? to_cq(a->recv_cq) : NULL;
	qp->handles = 1;
	if (a->qp_type == IBV_QPT_XRC_RECV)
		qp->xdom = to_xrcd(a->xrcd)->dom;
	qp->srq = a->srq ? to_srq(a->srq) : NULL;
	qp->sq_sig_all = a->sq_sig_all;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
		qp->send_ops_flags = a->send_ops_flags;
	ret = qp_alloc_queues(qp, a);
	if (ret)
		goto err_free;
	if (a->qp_type == IBV_QPT_RAW_PACKET) {
		ret = raw_qp_init(qp, a);
		if (ret)
			goto err_queues;
	}
	/* XRC halves: no receive queue; an XRC_RECV QP no send queue either */
	if (a->qp_type == IBV_QPT_XRC_RECV)
		memset(&qp->cap, 0, sizeof(qp->cap));
	else if (a->qp_type == IBV_QPT_XRC_SEND)
		qp->cap.max_recv_wr = qp->cap.max_recv_sge = 0;
	sr_mutex_init(&qp->lock);
	sr_list_init(&qp->rx_pending);
	atomic_init(&qp->refs, 1);
	qp->state = IBV_QPS_RESET;

	/* The slot after the last one handed out, not the lowest free one:
	 * a QP number is not reused at once, so a stream still being set up
	 * for a QP just destroyed (its dial names both QP numbers) cannot be
	 * taken for the next QP's, when both ends create again. */
	pthread_mutex_lock(&ctx->lock);
	for (uint32_t i = 0; i < SR_MAX_QP; i++) {
		slot = (ctx->qp_last + i) % SR_MAX_QP + 1;
		if (!ctx->qps[slot])
			break;
		slot = SR_MAX_QP + 1;
	}
	if (slot > SR_MAX_QP) {
		pthread_mutex_unlock(&ctx->lock);
		ret = -ENOMEM;
		goto err_raw;
	}
	ctx->qps[slot] = qp;
	ctx->qp_last = slot;
	qp->slot = slot;
	pthread_mutex_unlock(&ctx->lock);

	qp->ibqp.qp_base.context = &ctx->vctx.context;
	qp->ibqp.qp_base.qp_context = a->qp_context;
	qp->ibqp.qp_base.pd = a->pd;
	qp->ibqp.qp_base.send_cq = qp->scq ? a->send_cq : NULL;
	qp->ibqp.qp_base.recv_cq = qp->rcq ? a->recv_cq : NULL;
	qp->ibqp.qp_base.srq = a->srq;
	qp->ibqp.qp_base.qp_num = ((uint32_t)ctx->port << 8) | slot;
	qp->ibqp.qp_base.handle = qp->ibqp.qp_base.qp_num;
	qp->ibqp.qp_base.state = IBV_QPS_RESET;
	qp->ibqp.qp_base.qp_type = a->qp_type;
	pthread_mutex_init(&qp->ibqp.qp_base.mutex, NULL);
	pthread_cond_init(&qp->ibqp.qp_base.cond, NULL);
	qp_init_wr_ops(qp);

	if (qp->pd)
		pd_get(qp->pd);
	if (qp->scq)
		atomic_fetch_add(&qp->scq->refs, 1);
	if (qp->rcq)
		atomic_fetch_add(&qp->rcq->refs, 1);
	if (qp->srq)
		atomic_fetch_add(&qp->srq->refs, 1);
	if (qp->xdom)
		xdom_add_tgt(qp->xdom, qp);
	atomic_fetch_add(&ctx->nqp, 1);
	ua->cap = qp->cap;
	sr_dbg("QP %#x created (%s)", qp->ibqp.qp_base.qp_num, qp_type_name(a->qp_type));
	*out = qp;
	return 0;

err_raw:
	raw_qp_fini(qp);
	sr_mutex_destroy(&qp->lock);
err_queues:
	rq_free(&qp->rq);
	free(qp->inl_buf);
	pd_buf_free(qp->pd, qp->sq_buf, SR_RES_TYPE_SQ, qp->sq_custom);
err_free:
	free(qp);
	return ret;
}

/* Detach the channel. It stays attached while it closes: a closing
 * channel may still deliver what already arrived and send the answers
 * (chan/tcp.c), which needs qp->chan. */
static void qp_unlink(struct sr_qp *qp)
{
	struct sr_chan *ch;

	sr_mutex_lock(&qp->lock);
	ch = qp->chan;
	if (ch)
		chan_get(ch);
	sr_mutex_unlock(&qp->lock);
	if (!ch)
		return;
	chan_close(ch);
	sr_mutex_lock(&qp->lock);
	if (qp->chan == ch)
		qp->chan = NULL;
	sr_mutex_unlock(&qp->lock);
	chan_put(ch);
}

int qp_destroy(struct sr_qp *qp)
{
	struct sr_context *ctx = qp->ctx;

	if (qp->raw && raw_qp_destroy_check(qp))
		return -EBUSY;		/* a flow is attached (core/flow.c) */
	pthread_mutex_lock(&ctx->lock);
	qp->dying = true;
	ctx->qps[qp->slot] = NULL;
	pthread_mutex_unlock(&ctx->lock);
	/* ... and under its own lock, before qp_unlink looks for a channel:
	 * a stream attaching checks it there (tcp_setup.c accept_try). */
	sr_mutex_lock(&qp->lock);
	qp->dying = true;
	sr_mutex_unlock(&qp->lock);
	if (qp->xdom)
		xdom_del_tgt(qp->xdom, qp);	/* before the refs drain below */

	qp_unlink(qp);
	if (qp->ibqp.qp_base.qp_type == IBV_QPT_UD)
		ud_qp_destroy(qp);
	/* Lookups that found it before it was unlisted finish first. One
	 * of them may be a channel telling it that its peer left, which arms
	 * a timer (qp_chan_gone): so the timers are cancelled after, when
	 * nobody else holds the QP and nothing can arm them again. */
	while (atomic_load(&qp->refs) > 1)
		sched_yield();
	if (qp->rnr_pg) {
		progress_timer_cancel(qp->rnr_pg, &qp->rnr_timer);
		progress_timer_cancel(qp->rnr_pg, &qp->gone_timer);
		progress_timer_cancel(qp->rnr_pg, &qp->dial_timer);
	}
	sr_mutex_lock(&qp->lock);
	qp->state = IBV_QPS_RESET;
	qp_rx_pending_clear_locked(qp);
	sr_mutex_unlock(&qp->lock);
	evq_remove_obj(&ctx->async, qp);
	if (qp->scq) {
		cq_forget_qp(qp->scq, qp);
		atomic_fetch_sub(&qp->scq->refs, 1);
	}
	raw_qp_fini(qp);
	if (qp->pd)
		pd_put(qp->pd);
	if (qp->rcq)
		atomic_fetch_sub(&qp->rcq->refs, 1);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->refs, 1);
	atomic_fetch_sub(&ctx->nqp, 1);
	sr_dbg("QP %#x destroyed", qp->ibqp.qp_base.qp_num);
	rq_free(&qp->rq);
	free(qp->inl_buf);
	pd_buf_free(qp->pd, qp->sq_buf, SR_RES_TYPE_SQ, qp->sq_custom);
	sr_mutex_destroy(&qp->lock);
	pthread_mutex_destroy(&qp->ibqp.qp_base.mutex);
	pthread_cond_destroy(&qp->ibqp.qp_base.cond);
	free(qp);
	return 0;
}

/* Attribute values that are wrong whatever the transition. */
static int qp_check_attr(struct sr_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return -EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return -EINVAL;
	if ((mask & IBV_QP_PATH_MTU) &&
	    (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return -EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SR_MAX_RD_ATOM)
		return -EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SR_MAX_RD_ATOM)
		return -EINVAL;
	/* Programs pass their MR access flags here (ON_DEMAND, ...); only
	 * the remote bits mean anything for a QP, the rest are ignored as the
	 * kernel does. Unknown bits are an error. */
	if ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~0x3fffffffU))
		return -EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return -EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return -EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)
		return -EINVAL;
	if ((mask & IBV_QP_AV) && a->ah_attr.port_num && a->ah_attr.port_num != 1)
		return -EINVAL;
	if ((mask & IBV_QP_AV) && a->ah_attr.is_global &&
	    a->ah_attr.grh.sgid_index >= SR_GID_TBL_LEN)
		return -EINVAL;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != qp->state)
		return -EINVAL;
	return 0;
}

static void qp_store_attr(struct sr_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct ibv_qp_attr *s = &qp->attr;

#define KEEP(m, f) do { if (mask & (m)) s->f = a->f; } while (0)
	KEEP(IBV_QP_PKEY_INDEX, pkey_index);
	KEEP(IBV_QP_PORT, port_num);
	KEEP(IBV_QP_ACCESS_FLAGS, qp_access_flags);
	KEEP(IBV_QP_QKEY, qkey);
	KEEP(IBV_QP_AV, ah_attr);
	KEEP(IBV_QP_PATH_MTU, path_mtu);
	KEEP(IBV_QP_DEST_QPN, dest_qp_num);
	KEEP(IBV_QP_RQ_PSN, rq_psn);
	KEEP(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	KEEP(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
	KEEP(IBV_QP_SQ_PSN, sq_psn);
	KEEP(IBV_QP_TIMEOUT, timeout);
	KEEP(IBV_QP_RETRY_CNT, retry_cnt);
	KEEP(IBV_QP_RNR_RETRY, rnr_retry);
	KEEP(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	KEEP(IBV_QP_ALT_PATH, alt_ah_attr);
	KEEP(IBV_QP_ALT_PATH, alt_pkey_index);
	KEEP(IBV_QP_ALT_PATH, alt_port_num);
	KEEP(IBV_QP_ALT_PATH, alt_timeout);
	KEEP(IBV_QP_PATH_MIG_STATE, path_mig_state);
	KEEP(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
#undef KEEP
}

/* Discard every WQE without a completion (modify to RESET, IBTA 10.3.1). */
static void qp_reset_locked(struct sr_qp *qp)
{
	/* Completions already queued keep their data but must not move the
	 * indices we restart from zero. */
	if (qp->scq)
		cq_clean_qp(qp->scq, qp->ibqp.qp_base.qp_num);
	if (qp->rcq && qp->rcq != qp->scq)
		cq_clean_qp(qp->rcq, qp->ibqp.qp_base.qp_num);
	qp->rx_srqn = 0;
	qp->xrc_tx_chan = NULL;
	qp->sq_head = qp->sq_next = qp->sq_tail = 0;
	atomic_store(&qp->sq_reaped, 0);
	qp->rq.head = qp->rq.tail = 0;
	qp_rx_lent_flush_locked(qp, false);
	qp->ssn = 0;
	qp->rx_expect_msn = 0;
	qp->peer_gone = false;
	qp->dial_fail_at = 0;
	qp_rx_pending_clear_locked(qp);
	memset(&qp->attr, 0, sizeof(qp->attr));
}

static void qp_set_state_locked(struct sr_qp *qp, enum ibv_qp_state s)
{
	sr_dbg("QP %#x %s -> %s", qp->ibqp.qp_base.qp_num,
	       sr_qp_state_name[qp->state], sr_qp_state_name[s]);
	qp->state = s;
	qp->ibqp.qp_base.state = s;
}

/* Both ends point at each other and can receive: join them. Only local
 * peers for now; the TCP channel takes remote ones. */
static pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;

static bool can_link(struct sr_qp *qp)
{
	return qp->state >= IBV_QPS_RTR && qp->state <= IBV_QPS_SQE && !qp->chan;
}

/* Is the peer's GID one of this host's addresses (or absent: no GRH)? */
static bool peer_is_local(struct sr_qp *qp)
{
	struct sr_gid tbl[SR_GID_TBL_LEN];
	union ibv_gid dgid;
	int n;

	sr_mutex_lock(&qp->lock);
	if (!qp->attr.ah_attr.is_global) {
		sr_mutex_unlock(&qp->lock);
		return true;
	}
	dgid = qp->attr.ah_attr.grh.dgid;
	sr_mutex_unlock(&qp->lock);
	n = dev_query_gids(tbl, SR_GID_TBL_LEN);
	for (int i = 0; i < n; i++)
		if (!memcmp(&tbl[i].gid, &dgid, sizeof(dgid)))
			return true;
	return false;
}

/* RC to RC, UC to UC, and an XRC_SEND QP to an XRC_RECV QP. */
static bool types_pair(enum ibv_qp_type a, enum ibv_qp_type b)
{
	if (a == IBV_QPT_XRC_SEND || a == IBV_QPT_XRC_RECV)
		return a != b && (b == IBV_QPT_XRC_SEND || b == IBV_QPT_XRC_RECV);
	return a == b;
}

static void qp_try_link(struct sr_qp *qp)
{
	struct sr_qp *peer = NULL;
	uint32_t me = qp->ibqp.qp_base.qp_num;
	bool linked = false;

	/* A peer in this process: the in-process channel. Anywhere else: a
	 * TCP stream, dialed or awaited (DESIGN.md decision 4). */
	if (peer_is_local(qp))
		peer = ctx_find_qp(qp->attr.dest_qp_num);
	if (!peer) {
		int ret = chan_tcp_connect(qp);

		if (ret)
			sr_warn("QP %#x: cannot start a TCP stream: %s", me, strerror(-ret));
		return;
	}
	pthread_mutex_lock(&link_lock);
	sr_mutex_lock(&qp->lock);
	if (peer != qp)
		sr_mutex_lock(&peer->lock);
	if (can_link(qp) && can_link(peer) && peer->attr.dest_qp_num == me &&
	    types_pair(qp_type(qp), qp_type(peer)))
		linked = true;
	if (peer != qp)
		sr_mutex_unlock(&peer->lock);
	sr_mutex_unlock(&qp->lock);
	if (linked && chan_inproc_connect(qp, peer) != 0)
		linked = false;
	pthread_mutex_unlock(&link_lock);
	if (linked) {
		/* Work the other QP posted in RTS while it waited for us
		 * goes now (as a stream's attach lets it go: tcp_setup.c). */
		struct sr_qp *ends[2] = { qp, peer };

		for (int i = 0; i < (peer != qp ? 2 : 1); i++) {
			sr_mutex_lock(&ends[i]->lock);
			qp_sq_progress_locked(ends[i]);
			sr_mutex_unlock(&ends[i]->lock);
			qp_kick(ends[i]);
		}
	}
	qp_put(peer);
}

int qp_modify(struct sr_qp *qp, struct ibv_qp_attr *a, int mask)
{
	enum ibv_qp_state cur, next;
	bool link = false, unlink = false;
	int ret;

	/* An RSS QP has no state to move (mlx5 refuses too): its WQs have. */
	if (raw_qp_is_rss(qp))
		return -EOPNOTSUPP;
	sr_mutex_lock(&qp->lock);
	cur = qp->state;
	next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	ret = qp_check_attr(qp, a, mask);
	if (!ret && !qp_transition_ok(qp->ibqp.qp_base.qp_type, cur, next, mask))
		ret = -EINVAL;
	if (ret) {
		sr_mutex_unlock(&qp->lock);
		sr_dbg("QP %#x modify %s -> %s mask %#x rejected",
		       qp->ibqp.qp_base.qp_num, sr_qp_state_name[cur],
		       sr_qp_state_name[next], mask);
		return ret;
	}
	if (next == IBV_QPS_RESET) {
		unlink = qp->chan != NULL;
		qp_reset_locked(qp);
		qp->comm_est = false;
	}
	qp_store_attr(qp, a, mask);
	if (next != cur) {
		if (next == IBV_QPS_ERR) {
			qp_to_error_locked(qp);
		} else {
			qp_set_state_locked(qp, next);
			if (next == IBV_QPS_SQD) {
				qp->sqd_notify = (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) &&
						 a->en_sqd_async_notify;
				qp_sqd_check_locked(qp);	/* (already drained) */
			} else {
				qp->sqd_notify = false;
			}
			/* UD and raw packet QPs have no peer to link to
			 * (core/ud.c, core/raw.c); the CM brings up its
			 * own QPs' streams. */
			if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT &&
			    qp->ibqp.qp_base.qp_type != IBV_QPT_UD &&
			    qp->ibqp.qp_base.qp_type != IBV_QPT_RAW_PACKET &&
			    !qp->cm && qp->attr.dest_qp_num != SR_QPN_CM)
				link = true;
			if (next == IBV_QPS_RTS)
				qp_sq_progress_locked(qp);
		}
	}
	qp->attr.qp_state = qp->state;
	sr_mutex_unlock(&qp->lock);

	if (unlink)
		qp_unlink(qp);
	if (link)
		qp_try_link(qp);
	qp_kick(qp);
	return 0;
}

int qp_query(struct sr_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	sr_mutex_lock(&qp->lock);
	*a = qp->attr;
	a->qp_state = qp->state;
	a->cur_qp_state = qp->state;
	a->cap = qp->cap;
	/* (WQEs begun before SQD still outstanding) */
	a->sq_draining = qp->state == IBV_QPS_SQD && qp->sq_head != qp->sq_next;
	a->port_num = qp->attr.port_num ? qp->attr.port_num : 1;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->ibqp.qp_base.qp_context;
		init->send_cq = qp->ibqp.qp_base.send_cq;
		init->recv_cq = qp->ibqp.qp_base.recv_cq;
		init->srq = qp->ibqp.qp_base.srq;
		init->cap = qp->cap;
		init->qp_type = qp->ibqp.qp_base.qp_type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	sr_mutex_unlock(&qp->lock);
	(void)mask;
	return 0;
}

void qp_kick(struct sr_qp *qp)
{
	struct sr_chan *ch;

	if (qp->raw) {
		raw_tx_flush(qp);	/* frames to the port switch */
		return;
	}

	sr_mutex_lock(&qp->lock);
	ch = qp_kick_take_locked(qp);
	sr_mutex_unlock(&qp->lock);
	qp_kick_give(ch);
}


/* ---- ibv_open_qp(3) ------------------------------------------------------ */

static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;	/* sr_qp.handles */

int qp_open(struct sr_context *ctx, struct ibv_qp_open_attr *a, struct sr_qp **out)
{
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	struct sr_qp *qp, *h;

	if (a->comp_mask & ~(uint32_t)(need | IBV_QP_OPEN_ATTR_CONTEXT))
		return -EINVAL;
	if ((a->comp_mask & need) != need || !a->xrcd || a->qp_type != IBV_QPT_XRC_RECV)
		return -EINVAL;
	qp = ctx_find_qp(a->qp_num);
	if (!qp)
		return -ENOENT;
	/* Only an XRC_RECV QP of the same domain can be opened. */
	if (qp_type(qp) != IBV_QPT_XRC_RECV || qp->xdom != to_xrcd(a->xrcd)->dom) {
		qp_put(qp);
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		qp_put(qp);
		return -ENOMEM;
	}
	pthread_mutex_lock(&handle_lock);
	if (!qp->handles) {		/* its last handle is being destroyed */
		pthread_mutex_unlock(&handle_lock);
		free(h);
		qp_put(qp);
		return -ENOENT;
	}
	qp->handles++;
	pthread_mutex_unlock(&handle_lock);
	h->real = qp;
	h->ctx = ctx;
	h->ibqp.qp_base = qp->ibqp.qp_base;
	h->ibqp.qp_base.context = &ctx->vctx.context;
	h->ibqp.qp_base.qp_context = (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? a->qp_context : NULL;
	pthread_mutex_init(&h->ibqp.qp_base.mutex, NULL);
	pthread_cond_init(&h->ibqp.qp_base.cond, NULL);
	/* The handle itself stays in RESET with no queues: the WR API on
	 * it fails cleanly (an XRC_RECV QP sends nothing anyway). */
	sr_mutex_init(&h->lock);
	qp_init_wr_ops(h);
	qp_put(qp);
	*out = h;
	return 0;
}

int qp_destroy_handle(struct sr_qp *h)
{
	struct sr_qp *qp = qp_real(h);
	bool last;
	int ret;

	pthread_mutex_lock(&handle_lock);
	last = --qp->handles == 0;
	pthread_mutex_unlock(&handle_lock);
	/* The creator's handle is the QP itself: it stays, receiving, until
	 * the last opened handle goes (the program no longer uses it). */
	if (last) {
		ret = qp_destroy(qp);
		if (ret) {
			/* still in use (a flow holds it): the handle stays */
			pthread_mutex_lock(&handle_lock);
			qp->handles++;
			pthread_mutex_unlock(&handle_lock);
			return ret;
		}
	}
	if (h != qp) {
		sr_mutex_destroy(&h->lock);
		pthread_mutex_destroy(&h->ibqp.qp_base.mutex);
		pthread_cond_destroy(&h->ibqp.qp_base.cond);
		free(h);
	}
	return 0;
}
