/* Receive work queues and RSS indirection tables (ibv_create_wq(3),
 * ibv_modify_wq(3), ibv_create_rwq_ind_table(3)).
 *
 * A WQ is a receive queue with its own CQ and state (RESET, RDY, ERR),
 * reached only through the indirection table of an RSS raw packet QP
 * (core/raw.c). Frames reach it in the thread that sent them.
 */
#include "core/raw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* WQ and table numbers: unique in the process, 24 bits like a QPN. */
static atomic_uint wq_next_num = 1, tbl_next_num = 1;

static int wq_check_init(struct sr_context *ctx, const struct ibv_wq_init_attr *a)
{
	if (a->wq_type != IBV_WQT_RQ)
		return -EOPNOTSUPP;
	if (a->comp_mask & ~(uint32_t)IBV_WQ_INIT_ATTR_FLAGS)
		return -EINVAL;
	/* no VLAN stripping, FCS scatter, delay drop or end padding */
	if ((a->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && a->create_flags)
		return -EOPNOTSUPP;
	if (!a->pd || !a->cq || a->pd->context != &ctx->vctx.context ||
	    a->cq->context != &ctx->vctx.context)
		return -EINVAL;
	if (!a->max_wr || a->max_wr > SR_MAX_QP_WR || a->max_sge > SR_MAX_SGE)
		return -EINVAL;
	return 0;
}

int wq_create(struct sr_context *ctx, struct ibv_wq_init_attr *a, struct sr_wq **out)
{
	struct sr_wq *wq;
	int ret = wq_check_init(ctx, a);

	if (ret)
		return ret;
	wq = calloc(1, sizeof(*wq));
	if (!wq)
		return -ENOMEM;
	ret = rq_init(&wq->rq, a->max_wr, a->max_sge);
	if (ret) {
		free(wq);
		return ret;
	}
	pthread_mutex_init(&wq->lock, NULL);
	wq->ctx = ctx;
	wq->pd = to_pd(a->pd);
	wq->cq = to_cq(a->cq);
	wq->max_wr = a->max_wr;
	atomic_init(&wq->refs, 0);
	wq->ibwq.context = &ctx->vctx.context;
	wq->ibwq.pd = a->pd;
	wq->ibwq.cq = a->cq;
	wq->ibwq.wq_num = atomic_fetch_add(&wq_next_num, 1) & 0xffffff;
	wq->ibwq.handle = wq->ibwq.wq_num;
	wq->ibwq.state = IBV_WQS_RESET;
	wq->ibwq.wq_type = IBV_WQT_RQ;
	pd_get(wq->pd);
	atomic_fetch_add(&wq->cq->refs, 1);
	/* ibv_create_wq(3): the attributes come back as created */
	a->max_sge = wq->rq.max_sge;
	*out = wq;
	return 0;
}

int wq_destroy(struct sr_wq *wq)
{
	if (atomic_load(&wq->refs))
		return -EBUSY;		/* an indirection table names it */
	pthread_mutex_lock(&wq->lock);
	/* its completions stay in the CQ, as a QP's do */
	rq_free(&wq->rq);
	pthread_mutex_unlock(&wq->lock);
	pd_put(wq->pd);
	atomic_fetch_sub(&wq->cq->refs, 1);
	pthread_mutex_destroy(&wq->lock);
	free(wq);
	return 0;
}

/* Every posted receive completes with IBV_WC_WR_FLUSH_ERR. wq->lock held. */
static void wq_flush_locked(struct sr_wq *wq)
{
	while (wq->rq.head != wq->rq.tail) {
		struct sr_rwqe *r = rq_at(&wq->rq, wq->rq.head++);
		struct ibv_wc wc;

		memset(&wc, 0, sizeof(wc));
		wc.wr_id = r->wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.opcode = IBV_WC_RECV;
		wc.qp_num = wq->ibwq.wq_num;
		cq_push(wq->cq, &wc, false);
	}
}

/* ibv_modify_wq(3): RESET -> RDY, RDY -> RDY, any -> ERR, any -> RESET. */
int wq_modify(struct sr_wq *wq, const struct ibv_wq_attr *a)
{
	const uint32_t known = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
	enum ibv_wq_state cur, next;

	if (a->attr_mask & ~known)
		return -EINVAL;
	if ((a->attr_mask & IBV_WQ_ATTR_FLAGS) && a->flags_mask)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&wq->lock);
	cur = wq->ibwq.state;
	next = (a->attr_mask & IBV_WQ_ATTR_STATE) ? a->wq_state : cur;
	if (((a->attr_mask & IBV_WQ_ATTR_CURR_STATE) && a->curr_wq_state != cur) ||
	    next > IBV_WQS_ERR || (next == IBV_WQS_RDY && cur == IBV_WQS_ERR)) {
		pthread_mutex_unlock(&wq->lock);
		return -EINVAL;
	}
	if (next == IBV_WQS_ERR)
		wq_flush_locked(wq);
	else if (next == IBV_WQS_RESET)
		wq->rq.head = wq->rq.tail = 0;	/* discarded, as a QP's RESET */
	wq->ibwq.state = next;
	pthread_mutex_unlock(&wq->lock);
	sr_dbg("WQ %#x state %d -> %d", wq->ibwq.wq_num, cur, next);
	return 0;
}

int wq_post_recv(struct sr_wq *wq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int ret = 0;

	pthread_mutex_lock(&wq->lock);
	for (; wr; wr = wr->next) {
		ret = rq_post(&wq->rq, wr, wq->max_wr);
		if (ret) {
			*bad = wr;
			break;
		}
	}
	if (wq->ibwq.state == IBV_WQS_ERR)
		wq_flush_locked(wq);
	pthread_mutex_unlock(&wq->lock);
	return ret;
}

void wq_rx(struct sr_wq *wq, const uint8_t *frame, uint32_t len)
{
	pthread_mutex_lock(&wq->lock);
	/* No receive posted or not ready: dropped, as a NIC drops it. */
	if (wq->ibwq.state == IBV_WQS_RDY && wq->rq.head != wq->rq.tail) {
		struct sr_rwqe *r = rq_at(&wq->rq, wq->rq.head++);

		raw_complete(wq->ctx, wq->pd, wq->cq, r, frame, len, wq->ibwq.wq_num);
	}
	pthread_mutex_unlock(&wq->lock);
}

/* ---- indirection tables ------------------------------------------------- */

int ind_tbl_create(struct sr_context *ctx, struct ibv_rwq_ind_table_init_attr *a,
		   struct sr_ind_tbl **out)
{
	struct sr_ind_tbl *t;
	uint32_t size;

	if (a->comp_mask || a->log_ind_tbl_size > SR_MAX_IND_TBL_LOG || !a->ind_tbl)
		return -EINVAL;
	size = 1U << a->log_ind_tbl_size;
	for (uint32_t i = 0; i < size; i++)
		if (!a->ind_tbl[i] || a->ind_tbl[i]->context != &ctx->vctx.context)
			return -EINVAL;
	t = calloc(1, sizeof(*t) + size * sizeof(t->wqs[0]));
	if (!t)
		return -ENOMEM;
	t->size = size;
	atomic_init(&t->refs, 0);
	for (uint32_t i = 0; i < size; i++) {
		t->wqs[i] = to_wq(a->ind_tbl[i]);
		atomic_fetch_add(&t->wqs[i]->refs, 1);
	}
	t->ibtbl.context = &ctx->vctx.context;
	t->ibtbl.ind_tbl_num = (int)(atomic_fetch_add(&tbl_next_num, 1) & 0xffffff);
	t->ibtbl.ind_tbl_handle = t->ibtbl.ind_tbl_num;
	*out = t;
	return 0;
}

int ind_tbl_destroy(struct sr_ind_tbl *t)
{
	if (atomic_load(&t->refs))
		return -EBUSY;		/* an RSS QP uses it */
	for (uint32_t i = 0; i < t->size; i++)
		atomic_fetch_sub(&t->wqs[i]->refs, 1);
	free(t);
	return 0;
}
