/* Receive queues: the ring used by a QP's own RQ and by shared RQs. */
#include "core/core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

int rq_init_pd(struct sr_rq *q, struct sr_pd *pd, uint64_t type, uint32_t max_wr,
	       uint32_t max_sge)
{
	q->max_sge = max_sge ? max_sge : 1;
	q->stride = (uint32_t)(sizeof(struct sr_rwqe) + q->max_sge * sizeof(struct ibv_sge));
	q->size = pow2_at_least(max_wr ? max_wr : 1);
	q->head = q->tail = 0;
	q->pd = pd;
	q->res_type = type;
	q->buf = pd_buf_alloc(pd, (size_t)q->size * q->stride, type, &q->custom);
	return q->buf ? 0 : -ENOMEM;
}

int rq_init(struct sr_rq *q, uint32_t max_wr, uint32_t max_sge)
{
	return rq_init_pd(q, NULL, SR_RES_TYPE_RQ, max_wr, max_sge);
}

void rq_free(struct sr_rq *q)
{
	pd_buf_free(q->pd, q->buf, q->res_type, q->custom);
	q->buf = NULL;
}

/* Caller holds the queue's lock. */
int rq_post(struct sr_rq *q, const struct ibv_recv_wr *wr, uint32_t max_wr)
{
	struct sr_rwqe *w;

	if (q->tail - q->head >= max_wr)
		return -ENOMEM;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge)
		return -EINVAL;
	w = rq_at(q, q->tail);
	w->wr_id = wr->wr_id;
	w->num_sge = (uint32_t)wr->num_sge;
	if (wr->num_sge)
		memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
	q->tail++;
	return 0;
}

int srq_create(struct sr_pd *pd, struct ibv_srq_init_attr *attr, struct sr_srq **out)
{
	struct sr_context *ctx = to_ctx(pd->ibpd.context);
	struct sr_srq *srq;
	int ret;

	if (!attr->attr.max_wr || attr->attr.max_wr > SR_MAX_SRQ_WR ||
	    attr->attr.max_sge > SR_MAX_SGE || attr->attr.srq_limit > attr->attr.max_wr)
		return -EINVAL;
	if (atomic_load(&ctx->nsrq) >= SR_MAX_SRQ)
		return -ENOMEM;
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return -ENOMEM;
	ret = rq_init_pd(&srq->rq, pd, SR_RES_TYPE_SRQ, attr->attr.max_wr, attr->attr.max_sge);
	if (ret) {
		free(srq);
		return ret;
	}
	sr_mutex_init(&srq->lock);
	srq->max_wr = attr->attr.max_wr;
	srq->limit = attr->attr.srq_limit;
	srq->pd = pd;
	srq->srqn = srqn_alloc();
	srq->ibsrq.context = pd->ibpd.context;
	srq->ibsrq.srq_context = attr->srq_context;
	srq->ibsrq.pd = &pd->ibpd;
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	/* Report what we gave (ibv_create_srq(3): at least what was asked). */
	attr->attr.max_sge = srq->rq.max_sge;
	pd_get(pd);
	atomic_fetch_add(&ctx->nsrq, 1);
	*out = srq;
	return 0;
}

int srq_create_xrc(struct sr_pd *pd, struct sr_xrcd *xrcd, struct sr_cq *cq,
		   struct ibv_srq_init_attr *attr, struct sr_srq **out)
{
	struct sr_srq *srq;
	int ret;

	if (to_ctx(cq->ibcq.context) != to_ctx(pd->ibpd.context))
		return -EINVAL;
	ret = srq_create(pd, attr, &srq);
	if (ret)
		return ret;
	srq->cq = cq;
	atomic_fetch_add(&cq->refs, 1);
	srq->xdom = xrcd->dom;
	xdom_add_srq(srq->xdom, srq);
	*out = srq;
	return 0;
}

int srq_destroy(struct sr_srq *srq)
{
	struct sr_context *ctx = to_ctx(srq->ibsrq.context);

	if (atomic_load(&srq->refs))
		return -EBUSY;
	if (srq->xdom) {
		xdom_del_srq(srq->xdom, srq);
		atomic_fetch_sub(&srq->cq->refs, 1);
	}
	evq_remove_obj(&ctx->async, srq);
	pd_put(srq->pd);
	atomic_fetch_sub(&ctx->nsrq, 1);
	rq_free(&srq->rq);
	sr_mutex_destroy(&srq->lock);
	pthread_mutex_destroy(&srq->ibsrq.mutex);
	pthread_cond_destroy(&srq->ibsrq.cond);
	free(srq);
	return 0;
}

int srq_modify(struct sr_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	int ret = 0;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return -EINVAL;
	sr_mutex_lock(&srq->lock);
	if (mask & IBV_SRQ_MAX_WR) {
		/* Resize (IBV_DEVICE_SRQ_RESIZE): keep the posted WQEs. */
		uint32_t n = srq->rq.tail - srq->rq.head;
		struct sr_rq nq;

		if (!attr->max_wr || attr->max_wr > SR_MAX_SRQ_WR || attr->max_wr < n) {
			ret = -EINVAL;
			goto out;
		}
		ret = rq_init_pd(&nq, srq->pd, SR_RES_TYPE_SRQ, attr->max_wr, srq->rq.max_sge);
		if (ret)
			goto out;
		for (uint32_t i = 0; i < n; i++)
			memcpy(rq_at(&nq, i), rq_at(&srq->rq, srq->rq.head + i), srq->rq.stride);
		nq.tail = n;
		rq_free(&srq->rq);
		srq->rq = nq;
		srq->max_wr = attr->max_wr;
	}
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->max_wr) {
			ret = -EINVAL;
			goto out;
		}
		srq->limit = attr->srq_limit;
	}
out:
	sr_mutex_unlock(&srq->lock);
	return ret;
}

int srq_query(struct sr_srq *srq, struct ibv_srq_attr *attr)
{
	sr_mutex_lock(&srq->lock);
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->limit;
	sr_mutex_unlock(&srq->lock);
	return 0;
}

int srq_post_recv(struct sr_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int ret = 0;

	sr_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		ret = rq_post(&srq->rq, wr, srq->max_wr);
		if (ret) {
			*bad = wr;
			break;
		}
	}
	sr_mutex_unlock(&srq->lock);
	return ret;
}

int srq_take(struct sr_srq *srq, struct sr_rwqe *out)
{
	bool limit_hit = false;
	uint32_t left;

	sr_mutex_lock(&srq->lock);
	if (srq->rq.head == srq->rq.tail) {
		sr_mutex_unlock(&srq->lock);
		return -EAGAIN;
	}
	memcpy(out, rq_at(&srq->rq, srq->rq.head), srq->rq.stride);
	srq->rq.head++;
	left = srq->rq.tail - srq->rq.head;
	/* ibv_modify_srq(3): the limit event fires once, when the number of
	 * WQEs drops below the limit; the limit is then disarmed (zero). */
	if (srq->limit && left < srq->limit) {
		srq->limit = 0;
		limit_hit = true;
	}
	sr_mutex_unlock(&srq->lock);
	if (limit_hit)
		ctx_async_event(to_ctx(srq->ibsrq.context), srq, IBV_EVENT_SRQ_LIMIT_REACHED);
	return 0;
}
