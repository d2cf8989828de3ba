/* QPs on ids: rdma_create_qp(_ex), rdma_destroy_qp, SRQs,
 * rdma_init_qp_attr, ECE (rdma_create_qp(3), rdma_create_srq(3),
 * rdma_init_qp_attr(3)).
 *
 * A QP the CM creates goes to INIT at once so receives can be posted
 * before rdma_connect/rdma_accept; the CM then takes it to RTR and RTS
 * itself. The attributes it uses are the ones rdma_init_qp_attr gives a
 * program that moves its own QP (rping -q): their destination QPN,
 * SR_QPN_CM (0xFFFFFF), tells softrnic's core not to dial the peer by hand
 * (the CM attaches the connection's own stream instead).
 *
 * XRC, as rdma-core's librdmacm does it: an id of type IBV_QPT_XRC_SEND
 * or XRC_RECV (rdma_create_ep with such an ai_qp_type) gets a QP of that
 * type; an XRC_RECV QP and an XRC SRQ made without a domain get the
 * device's (cm_xrcd_get); rdma_create_srq on an XRC_RECV id makes an XRC
 * SRQ completing into id->recv_cq (made if missing: cq_context = id, with
 * a completion channel), so rdma_get_recv_comp works on it. Both halves
 * go INIT -> RTR -> RTS like RC, with the IB CM's masks for them
 * (cm_qp_attr), and the connection's stream is attached to the XRC_SEND
 * QP on the active side and to the XRC_RECV QP on the passive side: the
 * core then carries XRC over it as over a hand-connected stream
 * (DESIGN.md decision 21). The SRQ number goes in the private data, as
 * rdma_xserver does; nothing in the exchange itself names it.
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
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		a->ah_attr.grh.dgid = cid->id.route.addr.addr.ibaddr.dgid;
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = cid->tos > 0 ? (uint8_t)cid->tos : 0;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		/* The IB CM's cm_init_qp_rtr_attr: the responder's depth and
		 * RNR timer only where there is a responder (not XRC_SEND). */
		if (cid->id.qp_type == IBV_QPT_XRC_SEND)
			return 0;
		a->max_dest_rd_atomic = (uint8_t)sr_max(cid->ird, 1);
		a->min_rnr_timer = 12;
		*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = 0;
		if (cid->id.qp_type == IBV_QPT_UD) {
			*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
			return 0;
		}
		a->timeout = cid->ack_timeout ? cid->ack_timeout : 14;
		/* cm_init_qp_rts_attr: an XRC_RECV QP sends no requests, so
		 * no retry counts or initiator depth */
		if (cid->id.qp_type == IBV_QPT_XRC_RECV) {
			*mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
			return 0;
		}
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

/* One CQ the CM made for the id, and its channel. */
static void drop_cq(struct ibv_cq **cq, struct ibv_comp_channel **ch)
{
	if (*cq)
		ibv_destroy_cq(*cq);
	if (*ch)
		ibv_destroy_comp_channel(*ch);
	*cq = NULL;
	*ch = NULL;
}

/* rdma-core's ucma_destroy_cqs: while the id's XRC SRQ completes into
 * id->recv_cq, the CQs stay (rdma_destroy_srq takes them). */
static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->srq && to_cm(id)->srq_cq)
		return;
	if (id->send_cq == id->recv_cq)
		id->send_cq = NULL;
	if (id->send_cq_channel == id->recv_cq_channel)
		id->send_cq_channel = NULL;
	drop_cq(&id->recv_cq, &id->recv_cq_channel);
	drop_cq(&id->send_cq, &id->send_cq_channel);
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
	if (!*cq) {
		int ret = -errno;

		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		return ret;
	}
	return 0;
}

/* A QP's CQ the attr does not name: the id's, made first if it has none
 * (*made then says so, for the error path). */
static int id_cq(struct rdma_cm_id *id, uint32_t cqe, struct ibv_cq **want,
		 struct ibv_comp_channel **ch, struct ibv_cq **cq, bool *made)
{
	if (*want)
		return 0;
	if (!*cq) {
		int ret = create_cq(id, cqe, ch, cq);

		if (ret)
			return ret;
		*made = true;
	}
	*want = *cq;
	return 0;
}

static bool cm_connected_type(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC || t == IBV_QPT_UC || t == IBV_QPT_XRC_SEND ||
	       t == IBV_QPT_XRC_RECV;
}

SR_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	bool made_send = false, made_recv = false;
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
	/* the id has one CQ of each kind (rdma-core checks the same) */
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return cm_ret(-EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	}
	if (!attr->pd)
		return cm_ret(-EINVAL);
	if (attr->qp_type != id->qp_type)
		return cm_ret(-EINVAL);
	/* ucma_create_qp_ex: an XRC_RECV QP without a domain gets the
	 * device's, where rdma_create_srq puts its SRQs too */
	if (attr->qp_type == IBV_QPT_XRC_RECV &&
	    (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
		ret = cm_xrcd_get(&attr->xrcd);
		if (ret)
			return cm_ret(ret);
		attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	ret = id_cq(id, attr->cap.max_recv_wr, &attr->recv_cq, &id->recv_cq_channel,
		    &id->recv_cq, &made_recv);
	if (!ret)
		ret = id_cq(id, attr->cap.max_send_wr, &attr->send_cq, &id->send_cq_channel,
			    &id->send_cq, &made_send);
	if (ret)
		goto err_cq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		ret = -errno;
		goto err_cq;
	}
	if (cm_connected_type(qp->qp_type))
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
	/* only what this call made: an XRC SRQ's CQ stays */
	if (made_send)
		drop_cq(&id->send_cq, &id->send_cq_channel);
	if (made_recv)
		drop_cq(&id->recv_cq, &id->recv_cq_channel);
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
	/* All of it back, as rdma-core does: the CQs and SRQ the CM filled
	 * in, and the QP's actual capabilities. */
	memcpy(qp_init_attr, &a, sizeof(*qp_init_attr));
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

/* An XRC SRQ's CQ (rdma_create_srq(3): "If a completion queue is not
 * specified for an XRC SRQ, then a CQ will be allocated by the rdma_cm"):
 * id->recv_cq, made here if missing. rdma-core makes a new one even when
 * rdma_create_qp made id->recv_cq already (rdma_xserver: the XRC_RECV QP
 * first, then the SRQ) and loses the old one; here the SRQ takes the one
 * the id has, grown to hold the SRQ's receives as well. */
static int srq_cq(struct rdma_cm_id *id, uint32_t max_wr, bool *made)
{
	uint64_t want = max_wr;

	*made = false;
	if (!id->recv_cq) {
		*made = true;
		return create_cq(id, max_wr, &id->recv_cq_channel, &id->recv_cq);
	}
	if (id->qp && id->qp->recv_cq == id->recv_cq)
		want += (uint64_t)id->recv_cq->cqe;	/* its QP's receives too */
	if ((uint64_t)id->recv_cq->cqe < want) {
		int ret = ibv_resize_cq(id->recv_cq, (int)sr_min(want, (uint64_t)INT32_MAX));

		if (ret)
			return -ret;
	}
	return 0;
}

SR_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	bool made_cq = false, cq_ours = false;
	struct ibv_srq *srq;
	int ret;

	/* "An rdma_cm_id may only be associated with a single SRQ." */
	if (!id || !attr || !id->verbs || id->srq)
		return cm_ret(-EINVAL);
	/* (as rdma-core's: the type must be said; rdma_create_srq says it) */
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return cm_ret(-EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		attr->pd = id->pd;
	}
	if (attr->srq_type == IBV_SRQT_XRC) {
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
			ret = cm_xrcd_get(&attr->xrcd);
			if (ret)
				return cm_ret(ret);
		}
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
			ret = srq_cq(id, attr->attr.max_wr, &made_cq);
			if (ret)
				return cm_ret(ret);
			attr->cq = id->recv_cq;
		}
		cq_ours = attr->cq == id->recv_cq;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		ret = errno ? -errno : -ENOMEM;
		if (made_cq)
			drop_cq(&id->recv_cq, &id->recv_cq_channel);
		return cm_ret(ret);
	}
	id->srq = srq;
	to_cm(id)->srq_cq = cq_ours;
	return 0;
}

/* rdma-core's: an XRC SRQ on an XRC_RECV id (rdma_xserver), else basic;
 * the SRQ's actual attributes come back in attr. */
SR_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	int ret;

	if (!id || !attr)
		return cm_ret(-EINVAL);
	memset(&a, 0, sizeof(a));
	memcpy(&a, attr, sizeof(*attr));
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	a.pd = pd;
	ret = rdma_create_srq_ex(id, &a);
	if (!ret)
		memcpy(attr, &a, sizeof(*attr));
	return ret;
}

/* The CQs an XRC SRQ kept go with it, unless the id still has a QP
 * (rdma_destroy_qp takes them then). */
SR_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	struct cm_id *cid;

	if (!id || !id->srq)
		return;
	cid = to_cm(id);
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	if (cid->srq_cq) {
		cid->srq_cq = false;
		if (!id->qp)
			destroy_cqs(id);
	}
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
