/* QPs on ids: rdma_create_qp(_ex), rdma_destroy_qp, SRQs,
 * rdma_init_qp_attr, ECE (rdma_create_qp(3), rdma_init_qp_attr(3)).
 *
 * A QP the CM creates goes to INIT at once so receives can be posted
 * before rdma_connect/rdma_accept; the CM then takes it to RTR and RTS
 * itself. The attributes it uses are the ones rdma_init_qp_attr gives a
 * program that moves its own QP (rping -q): their destination QPN,
 * SR_QPN_CM (0xFFFFFF), tells softrnic's core not to dial the peer by hand
 * (the CM attaches the connection's own stream instead).
 */
#include "cm/cm.h"

#include <stdlib.h>
#include <string.h>

#define SR_QPN_CM 0xffffffU	/* src/core/qp.h */

/* The attributes for the transition to a->qp_state (INIT, RTR or RTS),
 * with the IB masks softrnic's QP state machine checks (it presents a
 * RoCE device by default, and enforces the same masks for iWARP). */
int cm_qp_attr(struct cm_id *cid, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_state want = a->qp_state;

	memset(a, 0, sizeof(*a));
	a->qp_state = want;
	switch (want) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = 1;
		if (cid->id.qp_type == IBV_QPT_UD) {
			a->qkey = RDMA_UDP_QKEY;
			*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		} else {
			a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
			*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		if (cid->id.qp_type == IBV_QPT_UD) {
			*mask = IBV_QP_STATE;
			return 0;
		}
		a->path_mtu = IBV_MTU_1024;
		a->dest_qp_num = SR_QPN_CM;
		a->rq_psn = 0;
		a->max_dest_rd_atomic = (uint8_t)sr_max(cid->ird, 1);
		a->min_rnr_timer = 12;
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		a->ah_attr.grh.dgid = cid->id.route.addr.addr.ibaddr.dgid;
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = cid->tos > 0 ? (uint8_t)cid->tos : 0;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = 0;
		if (cid->id.qp_type == IBV_QPT_UD) {
			*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
			return 0;
		}
		a->timeout = cid->ack_timeout ? cid->ack_timeout : 14;
		a->retry_cnt = 7;
		a->rnr_retry = 7;
		a->max_rd_atomic = (uint8_t)sr_max(cid->ord, 1);
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		return 0;
	default:
		return -EINVAL;
	}
}

SR_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return cm_ret(-EINVAL);
	if (!id->verbs)
		return cm_ret(-EINVAL);
	return cm_ret(cm_qp_attr(to_cm(id), qp_attr, qp_attr_mask));
}

static int qp_move(struct cm_id *cid, struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	int mask, ret;

	ret = cm_qp_attr(cid, &a, &mask);
	if (ret)
		return ret;
	ret = ibv_modify_qp(qp, &a, mask);
	return ret ? -ret : 0;
}

/* Accept / reply: RTR then RTS with the negotiated depths. */
int cm_qp_to_rts(struct cm_id *cid, struct ibv_qp *qp)
{
	int ret = 0;

	if (qp->state == IBV_QPS_INIT)
		ret = qp_move(cid, qp, IBV_QPS_RTR);
	if (!ret && qp->state == IBV_QPS_RTR)
		ret = qp_move(cid, qp, IBV_QPS_RTS);
	return ret;
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq == id->recv_cq)
			id->send_cq = NULL;
		id->recv_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel == id->recv_cq_channel)
			id->send_cq_channel = NULL;
		id->recv_cq_channel = NULL;
	}
	if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
	}
	if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
	}
}

/* rdma-core's ucma_create_cqs: a missing CQ gets its own completion
 * channel, cq_context = id, so rdma_get_send/recv_comp work. */
static int create_cq(struct rdma_cm_id *id, uint32_t cqe, struct ibv_comp_channel **ch,
		     struct ibv_cq **cq)
{
	*ch = ibv_create_comp_channel(id->verbs);
	if (!*ch)
		return -errno;
	*cq = ibv_create_cq(id->verbs, (int)sr_max(cqe, 1U), id, *ch, 0);
	if (!*cq)
		return -errno;
	return 0;
}

SR_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *cid;
	struct ibv_qp *qp;
	int ret;

	if (!id || !attr)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	if (!id->verbs || id->qp)
		return cm_ret(-EINVAL);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) && attr->pd && attr->pd->context != id->verbs)
		return cm_ret(-EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	}
	if (!attr->pd)
		return cm_ret(-EINVAL);
	if (attr->qp_type != id->qp_type)
		return cm_ret(-EINVAL);
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	if (!attr->recv_cq) {
		ret = create_cq(id, attr->cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq);
		if (ret)
			goto err_cq;
		attr->recv_cq = id->recv_cq;
	}
	if (!attr->send_cq) {
		ret = create_cq(id, attr->cap.max_send_wr, &id->send_cq_channel, &id->send_cq);
		if (ret)
			goto err_cq;
		attr->send_cq = id->send_cq;
	}
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		ret = -errno;
		goto err_cq;
	}
	if (qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_UC)
		softrnic_qp_set_cm(qp->qp_num);
	ret = qp_move(cid, qp, IBV_QPS_INIT);
	if (!ret && qp->qp_type == IBV_QPT_UD)
		ret = cm_qp_to_rts(cid, qp);
	if (ret) {
		ibv_destroy_qp(qp);
		goto err_cq;
	}
	id->qp = qp;
	return 0;
err_cq:
	destroy_cqs(id);
	return cm_ret(ret ? ret : -ENOMEM);
}

SR_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex a;
	int ret;

	if (!id || !qp_init_attr)
		return cm_ret(-EINVAL);
	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	ret = rdma_create_qp_ex(id, &a);
	if (ret)
		return ret;
	qp_init_attr->cap = a.cap;
	return 0;
}

SR_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id);
}

SR_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs)
		return cm_ret(-EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
		attr->srq_type = IBV_SRQT_BASIC;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		attr->pd = id->pd;
	}
	if (attr->srq_type != IBV_SRQT_BASIC)
		return cm_ret(-EOPNOTSUPP);
	srq = ibv_create_srq(attr->pd, (struct ibv_srq_init_attr *)&attr->srq_context);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

SR_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs)
		return cm_ret(-EINVAL);
	srq = ibv_create_srq(pd ? pd : id->pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

SR_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* ---- ECE (rdma_set_local_ece(3)) ---------------------------------------- */

/* ECE is for programs that own their QP: once the CM holds one it sets
 * ECE itself, so these are EINVAL then (ABI.md §4). softrnic has no ECE
 * options to negotiate: what the peer offered reads back as zero. */
SR_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece || id->qp)
		return cm_ret(-EINVAL);
	pthread_mutex_lock(&cm.lock);
	to_cm(id)->local_ece = *ece;
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

SR_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece || id->qp)
		return cm_ret(-EINVAL);
	pthread_mutex_lock(&cm.lock);
	*ece = to_cm(id)->remote_ece;
	pthread_mutex_unlock(&cm.lock);
	return 0;
}
