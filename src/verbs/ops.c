/* The context's ops tables: the data-path entry points that verbs.h calls
 * through ibv_context.ops, and the extended verbs_context ops (ABI.md §3).
 */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *a);
struct ibv_qp *sr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a);

static int op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return cq_poll(to_cq(cq), n, wc);
}

static int op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return sr_err(cq_arm(to_cq(cq), solicited_only));
}

static int op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct ibv_send_wr *dummy;

	/* ibv_post_send(3): bad_wr is always set on failure. */
	for (struct ibv_send_wr *w = wr; w; w = w->next)
		if ((w->opcode == IBV_WR_BIND_MW && w->bind_mw.mw &&
		     w->bind_mw.mw->type != IBV_MW_TYPE_2) ||
		    (w->send_flags & SR_SEND_REFUSED)) {
			*(bad ? bad : &dummy) = w;
			return EINVAL;
		}
	return sr_err(qp_post_send(qp_real(to_qp(qp)), wr, bad ? bad : &dummy));
}

static int op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	return sr_err(qp_post_recv(qp_real(to_qp(qp)), wr, bad ? bad : &dummy));
}

/* Posting to an SRQ may satisfy a QP that parked an inbound SEND for
 * want of a receive WQE: let every QP of the context that uses this SRQ
 * look again. */
static void srq_resume_qps(struct sr_srq *srq)
{
	struct sr_context *ctx = to_ctx(srq->ibsrq.context);
	struct sr_qp *list[SR_MAX_QP];
	int n = 0;

	if (srq->xdom) {
		xdom_resume(srq->xdom);	/* XRC_RECV QPs, in any context */
		return;
	}
	if (!atomic_load(&srq->refs))
		return;
	pthread_mutex_lock(&ctx->lock);
	for (int i = 1; i <= SR_MAX_QP; i++) {
		struct sr_qp *qp = ctx->qps[i];

		if (qp && qp->srq == srq && !qp->dying) {
			qp_get(qp);
			list[n++] = qp;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	qp_resume_parked(list, n);
}

static int op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;
	int ret = srq_post_recv(to_srq(srq), wr, bad ? bad : &dummy);

	srq_resume_qps(to_srq(srq));
	return sr_err(ret);
}

static struct ibv_mw *op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sr_mw *mw;
	int ret = mw_alloc(to_pd(pd), type, &mw);

	if (ret)
		SR_FAIL_NULL(ret);
	return &mw->ibmw;
}

static int op_dealloc_mw(struct ibv_mw *mw)
{
	return sr_err(mw_dealloc(to_mw(mw)));
}

/* ibv_bind_mw(3), type 1: posted like a WR so it completes in order with
 * IBV_WC_BIND_MW; the rkey does not change for type 1 windows. */
static int op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr = {
		.wr_id = b->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = b->send_flags | SR_SEND_BIND_TYPE1,
		.bind_mw = { .mw = mw, .rkey = mw->rkey, .bind_info = b->bind_info },
	};
	struct ibv_send_wr *bad;

	if (b->send_flags & SR_SEND_REFUSED)
		return EINVAL;
	if (b->bind_info.mr && !(mr_obj(b->bind_info.mr)->access & IBV_ACCESS_MW_BIND))
		return EINVAL;
	return sr_err(qp_post_send(to_qp(qp), &wr, &bad));
}

static int op_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
			struct ibv_sge *sg, uint32_t n)
{
	/* ibv_advise_mr(3): prefetching is a hint; nothing is ever
	 * faulted lazily here beyond what the kernel does, so accept. */
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH)
		return EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		struct sr_mref r;
		int need = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? IBV_ACCESS_LOCAL_WRITE : 0;

		if (mr_resolve(to_ctx(pd->context), to_pd(pd), sg[i].lkey, sg[i].addr,
			       sg[i].length, need, false, &r))
			return EINVAL;
		mr_release(&r);
	}
	return 0;
}

static struct ibv_srq *op_create_srq_ex(struct ibv_context *context,
					struct ibv_srq_init_attr_ex *a)
{
	struct ibv_srq_init_attr sa;
	struct sr_srq *srq;
	int ret;

	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC)
		return sr_create_srq_xrc(context, a);
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd) {
		errno = EINVAL;
		return NULL;
	}
	sa.srq_context = a->srq_context;
	sa.attr = a->attr;
	ret = srq_create(to_pd(a->pd), &sa, &srq);
	if (ret)
		SR_FAIL_NULL(ret);
	a->attr = sa.attr;
	return &srq->ibsrq;
}

static int op_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr)
{
	/* Moderation is a latency/interrupt trade-off; accepted, and
	 * completions are always reported at once. */
	if (attr->attr_mask & ~(uint32_t)IBV_CQ_ATTR_MODERATE)
		return EINVAL;
	return 0;
}

void verbs_init_ops(struct sr_context *ctx)
{
	struct verbs_context *v = &ctx->vctx;
	struct ibv_context_ops *o = &v->context.ops;

	o->poll_cq = op_poll_cq;
	o->req_notify_cq = op_req_notify_cq;
	o->post_send = op_post_send;
	o->post_recv = op_post_recv;
	o->post_srq_recv = op_post_srq_recv;
	o->alloc_mw = op_alloc_mw;
	o->dealloc_mw = op_dealloc_mw;
	o->bind_mw = op_bind_mw;

	v->sz = sizeof(*v);
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	v->query_port = sr_query_port;
	v->query_device_ex = sr_query_device_ex;
	v->create_cq_ex = sr_create_cq_ex;
	v->create_qp_ex = sr_create_qp_ex;
	v->create_srq_ex = op_create_srq_ex;
	v->advise_mr = op_advise_mr;
	v->modify_cq = op_modify_cq;
	verbs_init_domain_ops(v);	/* TD, parent domain, DM: domain.c */
	verbs_init_raw_ops(v);
	verbs_init_xrc_ops(ctx);
}

/* Async event accounting: destroy waits until what was handed out is
 * acknowledged (ibv_get_async_event(3)). */
void verbs_async_event_got(struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct sr_cq *cq = to_cq(ev->element.cq);

		pthread_mutex_lock(&cq->ibcq.mutex);
		cq->async_given++;
		pthread_mutex_unlock(&cq->ibcq.mutex);
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct sr_srq *srq = to_srq(ev->element.srq);

		pthread_mutex_lock(&srq->ibsrq.mutex);
		srq->async_given++;
		pthread_mutex_unlock(&srq->ibsrq.mutex);
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct sr_qp *qp = to_qp(ev->element.qp);

		pthread_mutex_lock(&qp->ibqp.qp_base.mutex);
		qp->async_given++;
		pthread_mutex_unlock(&qp->ibqp.qp_base.mutex);
		break;
	}
	default:
		break;
	}
}

void verbs_async_event_ack(struct ibv_async_event *ev)
{
	pthread_mutex_t *m = NULL;
	pthread_cond_t *c = NULL;
	uint32_t *n = NULL;

	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		m = &ev->element.cq->mutex;
		c = &ev->element.cq->cond;
		n = &ev->element.cq->async_events_completed;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		m = &ev->element.srq->mutex;
		c = &ev->element.srq->cond;
		n = &ev->element.srq->events_completed;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		m = &ev->element.qp->mutex;
		c = &ev->element.qp->cond;
		n = &ev->element.qp->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(m);
	(*n)++;
	pthread_cond_signal(c);
	pthread_mutex_unlock(m);
}
