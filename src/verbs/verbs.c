/* libibverbs ABI: PD, MR, MW, completion channels, CQ, SRQ, QP, AH. */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ---- PD ---------------------------------------------------------------- */

SR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct sr_pd *pd;
	int ret;

	ret = pd_alloc(to_ctx(context), &pd);
	if (ret)
		SR_FAIL_NULL(ret);
	return &pd->ibpd;
}

/* Deallocates parent domains too (ibv_alloc_parent_domain(3)). */
SR_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	return sr_err(pd_dealloc(to_pd(ibpd)));
}

/* ibv_import_pd(3): another holder of a PD of the context's space, by
 * handle: same handle, same protection domain for every access check. */
SR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	struct sr_pd *pd;
	int ret;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	ret = pd_import(to_ctx(context), pd_handle, &pd);
	if (ret)
		SR_FAIL_NULL(ret);
	return &pd->ibpd;
}

SR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	if (pd)
		pd_unimport(to_pd(pd));
}

/* ---- MR ----------------------------------------------------------------- */

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, unsigned int access)
{
	struct sr_mr *mr;
	int ret;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	/* IBV_ACCESS_OPTIONAL_RANGE bits are hints a provider may ignore. */
	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	ret = mr_reg(to_pd(pd), addr, length, iova, (int)access, &mr);
	if (ret)
		SR_FAIL_NULL(ret);
	return &mr->ibmr;
}

SR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					 uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/* ibv_reg_dmabuf_mr(3): no device memory to map a dma-buf into. */
SR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					   uint64_t iova, int fd, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			   size_t length, int access)
{
	int ret;

	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)
		return IBV_REREG_MR_ERR_INPUT;
	ret = mr_rereg(mr_obj(mr), flags, pd ? to_pd(pd) : NULL, addr, length, access);
	if (ret) {
		errno = -ret;
		return ret == -EBUSY ? IBV_REREG_MR_ERR_DONT_FORK_NEW : IBV_REREG_MR_ERR_INPUT;
	}
	/* Through an imported holder: the region changed; the holder the
	 * program passed shows it too, as rdma-core updates the ibv_mr. */
	if (to_mr(mr) != mr_obj(mr)) {
		if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
			mr->addr = addr;
			mr->length = length;
		}
		if (flags & IBV_REREG_MR_CHANGE_PD)
			mr->pd = pd;
	}
	return 0;
}

SR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	return sr_err(mr_dereg(to_mr(mr)));
}

/* ibv_import_mr(3): another holder of a region of the PD's space, by
 * handle; its lkey and rkey are the region's, its addr NULL. */
SR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	struct sr_mr *mr;
	int ret;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	ret = mr_import(to_pd(pd), mr_handle, &mr);
	if (ret)
		SR_FAIL_NULL(ret);
	return &mr->ibmr;
}

SR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	if (mr)
		mr_unimport(to_mr(mr));
}

/* ---- completion channels and CQs ---------------------------------------- */

SR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct sr_comp_channel *ch = calloc(1, sizeof(*ch));
	int ret;

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ret = evq_init(&ch->evq);
	if (ret) {
		free(ch);
		SR_FAIL_NULL(ret);
	}
	ch->ibch.context = context;
	ch->ibch.fd = ch->evq.fd;
	ch->ibch.refcnt = 0;
	return &ch->ibch;
}

SR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sr_comp_channel *ch = to_chan(channel);

	if (atomic_load(&ch->refs))
		return EBUSY;
	evq_destroy(&ch->evq);
	free(ch);
	return 0;
}

static struct ibv_cq *create_cq(struct ibv_context *context, int cqe, void *cq_context,
				struct ibv_comp_channel *channel, int comp_vector,
				struct ibv_pd *pd)
{
	struct sr_cq *cq;
	int ret;

	ret = cq_create_pd(to_ctx(context), cqe, channel ? to_chan(channel) : NULL,
			   comp_vector, pd ? to_pd(pd) : NULL, &cq);
	if (ret)
		SR_FAIL_NULL(ret);
	cq->ibcq.cq_context = cq_context;
	return (struct ibv_cq *)&cq->ibcq;
}

SR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	return create_cq(context, cqe, cq_context, channel, comp_vector, NULL);
}

struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *a)
{
	struct ibv_cq *cq;
	struct ibv_pd *pd = NULL;
	const uint64_t known = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

	if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	/* A CQ takes a parent domain, not a plain PD (as mlx5): what it
	 * gets from one is the allocator for its ring. */
	if (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
		pd = a->parent_domain;
		if (!pd || pd->context != context || !pd_is_parent(to_pd(pd))) {
			errno = EINVAL;
			return NULL;
		}
	}
	if (a->wc_flags & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (a->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
				    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = create_cq(context, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector, pd);
	if (!cq)
		return NULL;
	to_cq(cq)->wc_flags_ex = a->wc_flags;
	to_cq(cq)->ignore_overrun = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
				    (a->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
	return &to_cq(cq)->ibcq;
}

SR_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	return sr_err(cq_resize(to_cq(cq), cqe));
}

SR_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sr_cq *cq = to_cq(ibcq);
	int ret;

	if (atomic_load(&cq->refs))
		return EBUSY;
	/* ibv_get_cq_event(3): destroy waits until every event handed out
	 * was acknowledged. Acking more than was handed out is the
	 * program's bug, and must not turn into a hang here. Events not yet
	 * handed out go first: one taken meanwhile is counted (evq_pop_cb). */
	if (ibcq->channel)
		evq_remove_obj(&to_chan(ibcq->channel)->evq, cq);
	evq_remove_obj(&to_ctx(ibcq->context)->async, cq);
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed < cq->events_pending ||
	       ibcq->async_events_completed < cq->async_given)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	ret = cq_destroy(cq);
	return sr_err(ret);
}

/* A completion event taken off its channel: counted for ibv_destroy_cq,
 * under the channel's lock (evq_pop_cb). */
static void cq_event_got(const struct sr_ev *ev, void *arg)
{
	struct sr_cq *c = ev->obj;

	(void)arg;
	pthread_mutex_lock(&c->ibcq.mutex);
	c->events_pending++;
	pthread_mutex_unlock(&c->ibcq.mutex);
}

SR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
			       void **cq_context)
{
	struct sr_comp_channel *ch = to_chan(channel);
	struct sr_ev ev;
	struct sr_cq *c;
	int ret = 0, e = errno;

	/* Nothing queued, and the descriptor blocks: the waiting thread
	 * takes in what the streams of the channel's QPs bring itself (its
	 * own wake-up, not the progress thread's and then ours) */
	if (evq_would_block(&ch->evq))
		ret = chan_tcp_wait(to_ctx(channel->context), channel, ch->evq.fd);
	errno = e;	/* (as a read that succeeds leaves it) */
	if (!ret)
		ret = evq_pop_cb(&ch->evq, &ev, cq_event_got, NULL);
	if (ret) {
		errno = -ret;
		return -1;
	}
	c = ev.obj;
	*cq = (struct ibv_cq *)c;
	*cq_context = c->ibcq.cq_context;
	return 0;
}

SR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- SRQ ---------------------------------------------------------------- */

SR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sr_srq *srq;
	int ret = srq_create(to_pd(pd), attr, &srq);

	if (ret)
		SR_FAIL_NULL(ret);
	return &srq->ibsrq;
}

SR_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	return sr_err(srq_modify(to_srq(srq), attr, mask));
}

SR_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	return sr_err(srq_query(to_srq(srq), attr));
}

SR_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sr_srq *srq = to_srq(ibsrq);

	if (atomic_load(&srq->refs))
		return EBUSY;
	evq_remove_obj(&to_ctx(ibsrq->context)->async, srq);	/* (as ibv_destroy_cq) */
	pthread_mutex_lock(&ibsrq->mutex);
	while (ibsrq->events_completed < srq->async_given)
		pthread_cond_wait(&ibsrq->cond, &ibsrq->mutex);
	pthread_mutex_unlock(&ibsrq->mutex);
	return sr_err(srq_destroy(srq));
}

/* ---- QP ----------------------------------------------------------------- */

struct ibv_qp *sr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_RX_HASH |
			       IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_XRCD;
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
			     IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
			     IBV_QP_EX_WITH_ATOMIC_WRITE;
	struct sr_qp *qp;
	int ret;

	if (a->comp_mask & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~ops)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_PD) && a->pd && a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	ret = qp_create(to_ctx(context), a, &qp);
	if (ret)
		SR_FAIL_NULL(ret);
	return &qp->ibqp.qp_base;
}

SR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *qp;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, attr, sizeof(*attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	qp = sr_create_qp_ex(pd->context, &a);
	if (qp)
		attr->cap = a.cap;
	return qp;
}

SR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return &to_qp(qp)->ibqp;
}

SR_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			   struct ibv_qp_init_attr *init_attr)
{
	return sr_err(qp_query(qp_real(to_qp(qp)), attr, attr_mask, init_attr));
}

SR_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	return sr_err(qp_modify(qp_real(to_qp(qp)), attr, attr_mask));
}

SR_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sr_qp *qp = to_qp(ibqp);

	evq_remove_obj(&to_ctx(ibqp->context)->async, qp);	/* (as ibv_destroy_cq) */
	pthread_mutex_lock(&ibqp->mutex);
	while (ibqp->events_completed < qp->async_given)
		pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
	pthread_mutex_unlock(&ibqp->mutex);
	return sr_err(qp_destroy_handle(qp));
}

/* ibv_query_qp_data_in_order(3): placement is in order, always. */
SR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	/* flags must be 0 in rdma-core 44; anything else is not ours to
	 * promise. */
	return flags ? 0 : 1;
}

/* ECE is an IB CM feature with nothing to negotiate here (ibv_set_ece(3)). */
SR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

SR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* AH and multicast verbs: verbs/ud.c */
