/* Multicast: rdma_join_multicast(3), rdma_join_multicast_ex(3),
 * rdma_leave_multicast(3) on datagram ids (DESIGN.md decision 18).
 *
 * A group is an IP multicast address. Its MGID is the one the kernel's
 * rdma_cm gives it on RoCE v2 (cma_iboe_set_mgid): an IPv4 group as
 * ::ffff:a.b.c.d, an IPv6 group as it is; softrnic's UD channel joins the
 * IP group behind that MGID (chan/udp.c). There is no SA and no MLID on
 * RoCE: the join completes at once with MULTICAST_JOIN, param.ud holding
 * an AH to the group (global, dgid = MGID, dlid 0), QPN 0xFFFFFF, the
 * port space's Q_Key and, as rdma-core delivers it, the join's context
 * pointer as private_data. The id's QP, if it has one, is attached
 * unless the join is send-only; a failed attach is MULTICAST_ERROR.
 * Leaving detaches; rdma_destroy_id leaves every group.
 */
#include "cm/cm.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define CM_MC_QPN 0xffffffU

struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	void *context;
	bool sendonly;
	uint32_t qpn;		/* the QP attached, 0 if none */
};

static bool same_group(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

static struct cm_mc **find_locked(struct cm_id *c, const struct sockaddr *addr)
{
	struct cm_mc **pp;

	for (pp = &c->mcs; *pp; pp = &(*pp)->next)
		if (same_group((struct sockaddr *)&(*pp)->addr, addr))
			return pp;
	return NULL;
}

static int join(struct rdma_cm_id *id, const struct sockaddr *addr, bool sendonly, void *context)
{
	bool sync_id;
	struct rdma_ud_param ud = { 0 };
	struct cm_mc *mc;
	struct ibv_qp *qp;
	struct cm_id *c;
	socklen_t len;
	int ret = 0;

	if (!id || !addr)
		return -EINVAL;
	c = to_cm(id);
	len = cm_addr_len(addr);
	if (!len)
		return addr->sa_family == AF_IB ? -EAFNOSUPPORT : -EINVAL;
	if (!cm_addr_multicast(addr) || id->qp_type != IBV_QPT_UD)
		return -EINVAL;
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return -ENOMEM;
	memcpy(&mc->addr, addr, len);
	cm_fill_gid(&mc->mgid, addr);
	mc->context = context;
	mc->sendonly = sendonly;

	pthread_mutex_lock(&cm.lock);
	/* as the kernel: an id on the device, bound or resolved */
	if (!id->verbs || (c->state != CM_BOUND && c->state != CM_ADDR_RESOLVED &&
			   c->state != CM_ROUTE_RESOLVED))
		ret = -EINVAL;
	else if (find_locked(c, addr))
		ret = -EADDRINUSE;
	if (ret) {
		pthread_mutex_unlock(&cm.lock);
		free(mc);
		return ret;
	}
	mc->next = c->mcs;
	c->mcs = mc;
	qp = id->qp;
	cm_busy_take_locked(c);
	pthread_mutex_unlock(&cm.lock);

	if (qp && !sendonly) {
		ret = ibv_attach_mcast(qp, &mc->mgid, 0);
		ret = ret ? -ret : 0;
	}

	pthread_mutex_lock(&cm.lock);
	if (qp && !sendonly && !ret)
		mc->qpn = qp->qp_num;
	cm_ud_ah_attr(c, &mc->mgid, &ud.ah_attr);
	ud.qp_num = CM_MC_QPN;
	ud.qkey = RDMA_UDP_QKEY;
	ud.private_data = context;
	if (ret)
		sr_dbg("cm id %p: attaching QP %#x to a group: %s", (void *)c, qp->qp_num,
		       strerror(-ret));
	ret = cm_event_push_ud_locked(c, NULL, ret ? RDMA_CM_EVENT_MULTICAST_ERROR :
				      RDMA_CM_EVENT_MULTICAST_JOIN, ret, &ud, NULL, 0);
	sync_id = c->sync;
	cm_busy_drop_locked(c);
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return ret;
	return cm_complete(c, sync_id);
}

SR_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return cm_ret(join(id, addr, false, context));
}

SR_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				     struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	struct rdma_cm_join_mc_attr_ex *a = mc_join_attr;

	if (!a)
		return cm_ret(-EINVAL);
	if (a->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return cm_ret(-EOPNOTSUPP);
	if (!(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    a->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return cm_ret(-EINVAL);
	return cm_ret(join(id, a->addr, a->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
			   context));
}

static void detach(struct ibv_qp *qp, struct cm_mc *mc)
{
	/* Only the QP attached: the id may hold another one by now (the
	 * attached one's destruction detached it already). */
	if (mc->qpn && qp && qp->qp_num == mc->qpn)
		ibv_detach_mcast(qp, &mc->mgid, 0);
}

SR_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_mc **pp, *mc;
	struct ibv_qp *qp;
	struct cm_id *c;

	if (!id || !addr || !cm_addr_len(addr))
		return cm_ret(-EINVAL);
	c = to_cm(id);
	pthread_mutex_lock(&cm.lock);
	pp = find_locked(c, addr);
	if (!pp) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EADDRNOTAVAIL);
	}
	mc = *pp;
	*pp = mc->next;
	qp = id->qp;
	pthread_mutex_unlock(&cm.lock);
	detach(qp, mc);
	free(mc);
	return 0;
}

void cm_mcast_leave_all(struct cm_id *c)
{
	struct cm_mc *mc;
	struct ibv_qp *qp;

	pthread_mutex_lock(&cm.lock);
	mc = c->mcs;
	c->mcs = NULL;
	qp = c->id.qp;
	pthread_mutex_unlock(&cm.lock);
	while (mc) {
		struct cm_mc *next = mc->next;

		detach(qp, mc);
		free(mc);
		mc = next;
	}
}
