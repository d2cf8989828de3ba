/* The synchronous helpers rdma_server/rdma_client use (rdma_create_ep(3),
 * rdma_get_request(3), rdma_destroy_ep(3)) and rdma_migrate_id(3). */
#include "cm/cm.h"

#include <stdlib.h>
#include <string.h>

#define EP_RESOLVE_MS 2000	/* what rdma-core's rdma_create_ep uses */

static int passive_ep(struct rdma_cm_id *id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		      struct ibv_qp_init_attr *qp_init_attr)
{
	struct cm_id *cid = to_cm(id);

	if (qp_init_attr) {
		cid->ep_qp_attr = malloc(sizeof(*qp_init_attr));
		if (!cid->ep_qp_attr)
			return -1;
		*cid->ep_qp_attr = *qp_init_attr;
		cid->ep_qp_attr->qp_type = id->qp_type;
	}
	cid->ep_pd = pd;
	if (res->ai_src_addr)
		return rdma_bind_addr(id, res->ai_src_addr);
	return 0;
}

static enum rdma_port_space ep_ps(const struct rdma_addrinfo *res)
{
	return res->ai_port_space ? (enum rdma_port_space)res->ai_port_space : RDMA_PS_TCP;
}

/* The id takes the QP type of the address info, as rdma-core's
 * rdma_create_ep does (rdma_create_id2): IBV_QPT_XRC_SEND or XRC_RECV on
 * RDMA_PS_IB for XRC (rdma_xclient / rdma_xserver -c x). An address info
 * a program filled in itself may leave it 0: the port space's then, as
 * rdma_create_id would give. */
static enum ibv_qp_type ep_qp_type(const struct rdma_addrinfo *res)
{
	enum rdma_port_space ps = ep_ps(res);

	if (res->ai_qp_type)
		return (enum ibv_qp_type)res->ai_qp_type;
	return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

SR_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			     struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cm_id *cid;
	int ret;

	if (!id || !res)
		return cm_ret(-EINVAL);
	if (res->ai_connect_len > MPA_MAX_PD)
		return cm_ret(-EINVAL);
	ret = cm_create_id(NULL, &cm_id, NULL, ep_ps(res), ep_qp_type(res));
	if (ret)
		return cm_ret(ret);
	cid = to_cm(cm_id);
	if (res->ai_flags & RAI_PASSIVE) {
		if (passive_ep(cm_id, res, pd, qp_init_attr))
			goto err;
		*id = cm_id;
		return 0;
	}
	if (rdma_resolve_addr(cm_id, res->ai_src_len ? res->ai_src_addr : NULL,
			      res->ai_dst_addr, EP_RESOLVE_MS))
		goto err;
	if (rdma_resolve_route(cm_id, EP_RESOLVE_MS))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = cm_id->qp_type;
		if (rdma_create_qp(cm_id, pd, qp_init_attr))
			goto err;
	}
	if (res->ai_connect_len) {
		memcpy(cid->ep_connect, res->ai_connect, res->ai_connect_len);
		cid->ep_connect_len = res->ai_connect_len;
	}
	*id = cm_id;
	return 0;
err:
	ret = errno;
	rdma_destroy_ep(cm_id);
	errno = ret;
	return -1;
}

SR_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

SR_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l;
	struct rdma_cm_event *ev;
	int ret;

	if (!listen || !id)
		return cm_ret(-EINVAL);
	l = to_cm(listen);
	if (!l->sync)
		return cm_ret(-EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	if (ev->status) {
		ret = ev->status < 0 ? ev->status : -EPROTO;
		goto err;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = -EINVAL;
		goto err;
	}
	if (l->ep_qp_attr) {
		struct ibv_qp_init_attr attr = *l->ep_qp_attr;

		if (rdma_create_qp(ev->id, l->ep_pd, &attr)) {
			ret = -errno;
			rdma_reject(ev->id, NULL, 0);
			rdma_destroy_id(ev->id);
			goto err;
		}
	}
	*id = ev->id;
	(*id)->event = ev;	/* acked by the child's next call, as rdma-core does */
	return 0;
err:
	rdma_ack_cm_event(ev);
	return cm_ret(ret);
}

SR_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cm_channel *from, *to;
	struct sr_list moved, *pos, *tmp;
	struct cm_id *cid;
	bool was_sync;

	if (!id)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	to = channel ? container_of(channel, struct cm_channel, ch) : cm_channel_new(true);
	if (!to)
		return cm_ret(-ENOMEM);
	if (cid->sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	sr_list_init(&moved);
	pthread_mutex_lock(&cm.lock);
	cm_busy_take_locked(cid);
	from = container_of(id->channel, struct cm_channel, ch);
	was_sync = cid->sync;
	/* What was not retrieved yet moves with the id, in order. */
	sr_list_for_each_safe(pos, tmp, &from->events) {
		struct cm_event *e = container_of(pos, struct cm_event, link);

		if (e->owner != cid)
			continue;
		sr_list_del(pos);
		sr_list_add_tail(&moved, pos);
	}
	if (sr_list_empty(&from->events)) {
		char b;

		while (recv(from->ch.fd, &b, 1, MSG_DONTWAIT) > 0)
			;
	}
	/* ... and what was retrieved from the old channel is acked first */
	while (cid->events_completed < cid->events_reported)
		pthread_cond_wait(&cm.cond, &cm.lock);
	id->channel = &to->ch;
	cid->sync = channel == NULL;
	sr_list_for_each_safe(pos, tmp, &moved) {
		bool was_empty = sr_list_empty(&to->events);
		char one = 1;

		sr_list_del(pos);
		sr_list_add_tail(&to->events, pos);
		if (was_empty)
			while (send(to->wfd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
				;
	}
	cm_busy_drop_locked(cid);
	pthread_mutex_unlock(&cm.lock);
	if (was_sync)
		cm_channel_free(from);
	return 0;
}
