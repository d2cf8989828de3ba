/* XRC verbs (ibv_open_xrcd(3), ibv_create_srq_ex(3) with IBV_SRQT_XRC,
 * ibv_get_srq_num(3), ibv_open_qp(3)): argument checks at the edge, the
 * domain logic in core/xrcd.c. XRC QPs themselves are made by
 * ibv_create_qp_ex (verbs.c). */
#include "verbs/verbs.h"

#include <errno.h>

static struct ibv_xrcd *op_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *a)
{
	struct sr_xrcd *x;
	int ret;

	if (!a) {
		errno = EINVAL;
		return NULL;
	}
	ret = xrcd_open(to_ctx(context), a, &x);
	if (ret)
		SR_FAIL_NULL(ret);
	return &x->ibxrcd;
}

static int op_close_xrcd(struct ibv_xrcd *xrcd)
{
	return sr_err(xrcd_close(to_xrcd(xrcd)));
}

static int op_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	*srq_num = to_srq(srq)->srqn;
	return 0;
}

static struct ibv_qp *op_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *a)
{
	struct sr_qp *qp;
	int ret = qp_open(to_ctx(context), a, &qp);

	if (ret)
		SR_FAIL_NULL(ret);
	return &qp->ibqp.qp_base;
}

/* ibv_create_srq_ex(3), IBV_SRQT_XRC: the PD, XRC domain and CQ are all
 * required; receives complete into that CQ. */
struct ibv_srq *sr_create_srq_xrc(struct ibv_context *context, struct ibv_srq_init_attr_ex *a)
{
	const uint32_t need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq_init_attr sa;
	struct sr_srq *srq;
	int ret;

	if ((a->comp_mask & need) != need || !a->pd || !a->xrcd || !a->cq ||
	    a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	sa.srq_context = a->srq_context;
	sa.attr = a->attr;
	ret = srq_create_xrc(to_pd(a->pd), to_xrcd(a->xrcd), to_cq(a->cq), &sa, &srq);
	if (ret)
		SR_FAIL_NULL(ret);
	a->attr = sa.attr;
	return &srq->ibsrq;
}

void verbs_init_xrc_ops(struct sr_context *ctx)
{
	struct verbs_context *v = &ctx->vctx;

	v->open_xrcd = op_open_xrcd;
	v->close_xrcd = op_close_xrcd;
	v->get_srq_num = op_get_srq_num;
	v->open_qp = op_open_qp;
}
