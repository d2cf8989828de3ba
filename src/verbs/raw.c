/* libibverbs ABI: flow steering, receive WQs and RSS indirection tables,
 * for raw packet QPs (core/raw.h). verbs.h reaches all of them through
 * the verbs_context ops set here; the raw packet QP itself is created by
 * ibv_create_qp/ibv_create_qp_ex (verbs/verbs.c). */
#include "verbs/verbs.h"
#include "core/raw.h"

#include <errno.h>

static struct ibv_flow *op_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr)
{
	struct sr_flow *fl;
	int ret;

	if (!qp || !attr) {
		errno = EINVAL;
		return NULL;
	}
	ret = flow_create(to_qp(qp), attr, &fl);
	if (ret)
		SR_FAIL_NULL(ret);
	return flow_ib(fl);
}

static int op_destroy_flow(struct ibv_flow *flow)
{
	return sr_err(flow_destroy(to_flow(flow)));
}

static int op_post_wq_recv(struct ibv_wq *wq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	return sr_err(wq_post_recv(to_wq(wq), wr, bad ? bad : &dummy));
}

static struct ibv_wq *op_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *attr)
{
	struct sr_wq *wq;
	int ret;

	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	ret = wq_create(to_ctx(context), attr, &wq);
	if (ret)
		SR_FAIL_NULL(ret);
	/* verbs.h's ibv_create_wq sets wq_context, the mutex and cond */
	wq->ibwq.post_recv = op_post_wq_recv;
	return &wq->ibwq;
}

static int op_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr)
{
	if (!attr)
		return EINVAL;
	return sr_err(wq_modify(to_wq(wq), attr));
}

static int op_destroy_wq(struct ibv_wq *wq)
{
	return sr_err(wq_destroy(to_wq(wq)));
}

static struct ibv_rwq_ind_table *op_create_rwq_ind_table(struct ibv_context *context,
							 struct ibv_rwq_ind_table_init_attr *attr)
{
	struct sr_ind_tbl *t;
	int ret;

	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	ret = ind_tbl_create(to_ctx(context), attr, &t);
	if (ret)
		SR_FAIL_NULL(ret);
	return &t->ibtbl;
}

static int op_destroy_rwq_ind_table(struct ibv_rwq_ind_table *t)
{
	return sr_err(ind_tbl_destroy(to_ind_tbl(t)));
}

void verbs_init_raw_ops(struct verbs_context *v)
{
	v->ibv_create_flow = op_create_flow;
	v->ibv_destroy_flow = op_destroy_flow;
	v->create_wq = op_create_wq;
	v->modify_wq = op_modify_wq;
	v->destroy_wq = op_destroy_wq;
	v->create_rwq_ind_table = op_create_rwq_ind_table;
	v->destroy_rwq_ind_table = op_destroy_rwq_ind_table;
}

/* ibv_query_device_ex(3): what RSS and raw packet QPs can do here. */
void verbs_raw_caps(struct ibv_device_attr_ex *a)
{
	a->rss_caps.supported_qpts = 1U << IBV_QPT_RAW_PACKET;
	a->rss_caps.max_rwq_indirection_tables = SR_MAX_WQ;
	a->rss_caps.max_rwq_indirection_table_size = 1U << SR_MAX_IND_TBL_LOG;
	a->rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	a->rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
		IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 |
		IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
		IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
	a->max_wq_type_rq = SR_MAX_WQ;
	a->raw_packet_caps = 0;		/* no VLAN stripping, FCS, checksums */
}
