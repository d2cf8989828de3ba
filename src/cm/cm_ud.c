/* Datagram ids (RDMA_PS_UDP, RDMA_PS_IPOIB): the service ID resolution
 * the IB CM's SIDR gives rdma_cm, over UDP (DESIGN.md decision 18).
 *
 * rdma_connect sends a SIDR_REQ datagram (cm_sidr.h) from the id's own
 * UDP socket, connected to the destination, to the listener's UDP port;
 * the listener raises CONNECT_REQUEST on a new id with param.ud (the
 * requester's QPN, Q_Key and private data). rdma_accept answers a
 * SIDR_REP carrying its QPN and Q_Key and raises nothing on the passive
 * side (as SIDR); the active side gets ESTABLISHED with param.ud: an AH
 * to the listener's address, the QPN, the Q_Key and the private data.
 * rdma_reject answers SIDR_REP status 2, and a port nobody listens on
 * (ICMP port unreachable, after CM_REFUSED_RETRY_MS of retrying, as for
 * RC) is status 1: the kernel reports either as UNREACHABLE with that
 * status, and so do we. UDP loses datagrams: the request is resent with
 * back-off (CM_SIDR_RESEND_MS .. _MAX_MS) CM_SIDR_TRIES times, then it is
 * UNREACHABLE -ETIMEDOUT; the listener answers a resent request from its
 * id's stored reply, and ignores it while the application decides.
 */
#include "cm/cm.h"
#include "cm/cm_sidr.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define CM_SIDR_RESEND_MS	250
#define CM_SIDR_RESEND_MAX_MS	1000
#define CM_SIDR_TRIES		10	/* ~8.75 s in all */
/* Requests a listener holds that the application has not answered. */
#define CM_SIDR_PENDING_MAX	256

static int sgid_index(const union ibv_gid *sgid)
{
	struct ibv_port_attr pa;

	if (ibv_query_port(cm.verbs, 1, &pa))
		return 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;

		if (ibv_query_gid(cm.verbs, 1, i, &g))
			break;
		if (!memcmp(&g, sgid, sizeof(g)))
			return i;
	}
	return 0;
}

void cm_ud_ah_attr(struct cm_id *c, const union ibv_gid *dgid, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->port_num = 1;
	ah->grh.dgid = *dgid;
	ah->grh.sgid_index = (uint8_t)sgid_index(&c->id.route.addr.addr.ibaddr.sgid);
	ah->grh.hop_limit = 64;
	ah->grh.traffic_class = c->tos > 0 ? (uint8_t)c->tos : 0;
}

static bool same_peer(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
	return false;
}

/* The Q_Key a reply or request names: the QP's, else rdma_cm's default. */
static uint32_t qp_qkey(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (qp && !ibv_query_qp(qp, &a, IBV_QP_QKEY, &ia))
		return a.qkey;
	return RDMA_UDP_QKEY;
}

int cm_ud_listen_locked(struct cm_id *cid)
{
	cid->state = CM_LISTEN;
	return cm_thread_watch_locked(cid, EPOLLIN);
}

/* ---- active side ------------------------------------------------------- */

static void ud_fail_locked(struct cm_id *c, int status, const void *pd, size_t pd_len)
{
	struct rdma_ud_param ud = { 0 };

	cm_thread_unwatch_locked(c);
	c->state = CM_FAILED;
	cm_event_push_ud_locked(c, NULL, RDMA_CM_EVENT_UNREACHABLE, status, &ud, pd, pd_len);
}

/* Send (or resend) the request in c->hs and arm the next resend. */
static void send_req_locked(struct cm_id *c, uint64_t now)
{
	uint64_t wait = CM_SIDR_RESEND_MS << sr_min(c->sidr_tries, 4);

	if (send(c->fd, c->hs, c->hs_len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		sr_dbg("cm id %p: SIDR request: %s", (void *)c, strerror(errno));
	c->sidr_tries++;
	c->deadline_ms = now + sr_min(wait, (uint64_t)CM_SIDR_RESEND_MAX_MS);
	cm_thread_wake();
}

/* ICMP port unreachable: nobody listens there (yet). */
static void refused_locked(struct cm_id *c, uint64_t now)
{
	if (now < c->refused_until) {
		/* resend soon; a refused request is not a lost one */
		if (c->sidr_tries > 0)
			c->sidr_tries--;
		c->deadline_ms = now + CM_REDIAL_MS;
		cm_thread_wake();
		return;
	}
	ud_fail_locked(c, SIDR_UNSUPPORTED, NULL, 0);
}

void cm_ud_on_timer_locked(struct cm_id *c, uint64_t now)
{
	if (c->sidr_tries >= CM_SIDR_TRIES) {
		ud_fail_locked(c, -ETIMEDOUT, NULL, 0);
		return;
	}
	send_req_locked(c, now);
}

void cm_ud_on_reply_locked(struct cm_id *c)
{
	for (;;) {
		uint8_t buf[SIDR_FRAME_MAX + 1];
		struct rdma_ud_param ud = { 0 };
		struct sidr_msg m;
		ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNREFUSED) {
			refused_locked(c, cm_now_ms());
			if (c->state != CM_REQ_SENT)
				return;
			continue;
		}
		if (n < 0)
			return;
		/* The socket is connected: only the listener's port gets here. */
		if ((size_t)n > SIDR_FRAME_MAX || sidr_decode(buf, (size_t)n, &m) ||
		    m.type != SIDR_REP || m.tid != c->sidr_tid ||
		    (m.status == SIDR_SUCCESS && !m.qpn)) {
			sr_dbg("cm id %p: dropping a bad SIDR reply (%zd bytes)", (void *)c, n);
			continue;
		}
		if (m.status != SIDR_SUCCESS) {
			ud_fail_locked(c, m.status, m.pd, m.pd_len);
			return;
		}
		cm_thread_unwatch_locked(c);
		c->peer_qpn = m.qpn;
		c->peer_qkey = m.qkey;
		c->state = CM_CONNECTED;
		cm_ud_ah_attr(c, &c->id.route.addr.addr.ibaddr.dgid, &ud.ah_attr);
		ud.qp_num = m.qpn;
		ud.qkey = m.qkey;
		cm_event_push_ud_locked(c, NULL, RDMA_CM_EVENT_ESTABLISHED, 0, &ud, m.pd, m.pd_len);
		return;
	}
}

int cm_ud_connect(struct cm_id *c, const struct rdma_conn_param *p)
{
	bool sync_id;
	struct rdma_cm_id *id = &c->id;
	struct sidr_msg m = { .type = SIDR_REQ };
	const struct sockaddr *dst = &id->route.addr.dst_addr;
	size_t pd_len = 0;
	ssize_t n;
	int ret = 0;

	m.qpn = id->qp ? id->qp->qp_num : p ? p->qp_num : 0;
	m.qkey = qp_qkey(id->qp);
	if (p) {
		m.pd = p->private_data;
		pd_len = p->private_data_len;
	} else if (c->ep_connect_len) {
		m.pd = c->ep_connect;
		pd_len = c->ep_connect_len;
	}
	if (pd_len > SIDR_REQ_PD_MAX || (pd_len && !m.pd) || m.qpn > SIDR_QPN_MAX)
		return -EINVAL;
	m.pd_len = (uint8_t)pd_len;
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_ROUTE_RESOLVED || c->fd < 0) {
		ret = -EINVAL;
		goto out;
	}
	if (getrandom(&m.tid, sizeof(m.tid), GRND_NONBLOCK) != sizeof(m.tid))
		m.tid = (uint32_t)(c->serial * 2654435761u ^ cm_now_ms());
	n = sidr_encode(c->hs, sizeof(c->hs), &m);
	if (n < 0) {
		ret = (int)n;
		goto out;
	}
	/* Connected: replies come only from there, and a port nobody
	 * listens on comes back as ECONNREFUSED. */
	if (connect(c->fd, dst, cm_addr_len(dst)) < 0) {
		ret = -errno;
		goto out;
	}
	c->hs_len = (size_t)n;
	c->sidr_tid = m.tid;
	c->sidr_tries = 0;
	c->state = CM_REQ_SENT;
	c->refused_until = cm_now_ms() + CM_REFUSED_RETRY_MS;
	ret = cm_thread_watch_locked(c, EPOLLIN);
	if (!ret)
		send_req_locked(c, cm_now_ms());
	else
		c->state = CM_ROUTE_RESOLVED;
out:
	sync_id = c->sync;
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return ret;
	return cm_complete(c, sync_id);
}

/* ---- passive side ------------------------------------------------------ */

static void drop_child_locked(struct cm_id *c)
{
	sr_list_del(&c->link);
	cm_pd_put_locked(c);
	cm_id_free(c);
}

static void on_sidr_req(struct cm_id *l, const struct sidr_msg *m,
			const struct sockaddr_storage *peer, socklen_t pl)
{
	struct rdma_ud_param ud = { 0 };
	struct sr_list *pos, *tmp;
	struct cm_id *c;
	int pending = 0;

	sr_list_for_each_safe(pos, tmp, &cm.ids) {
		c = container_of(pos, struct cm_id, link);
		if (c->listener != l || c->state == CM_DEAD)
			continue;
		if (c->sidr_tid == m->tid && same_peer(&c->id.route.addr.dst_addr,
							(const struct sockaddr *)peer)) {
			/* a resent request: answer again if answered */
			if (c->hs_len)
				sendto(l->fd, c->hs, c->hs_len, MSG_DONTWAIT | MSG_NOSIGNAL,
				       (const struct sockaddr *)peer, pl);
			return;
		}
		if (c->state == CM_CONNECT_REQ)
			pending++;
	}
	if (pending >= CM_SIDR_PENDING_MAX) {
		sr_dbg("cm id %p: %d SIDR requests pending, dropping one", (void *)l, pending);
		return;
	}
	c = cm_id_new_locked(NULL, l->id.context, l->id.ps, l->id.qp_type);
	if (!c)
		return;
	c->id.channel = l->id.channel;
	c->listener = l;
	c->bound = true;
	c->tos = l->tos;
	memcpy(&c->id.route.addr.src_storage, &l->id.route.addr.src_storage,
	       sizeof(c->id.route.addr.src_storage));
	memcpy(&c->id.route.addr.dst_storage, peer, pl);
	if (cm_addr_any(&c->id.route.addr.src_addr)) {
		/* a wildcard listener: the address the answer leaves from */
		struct sockaddr_storage src;
		uint16_t port = l->id.route.addr.src_sin.sin_port;	/* same offset in sin6 */

		if (!cm_route_src((const struct sockaddr *)peer, &src) &&
		    src.ss_family == l->id.route.addr.src_addr.sa_family) {
			memcpy(&c->id.route.addr.src_storage, &src, sizeof(src));
			c->id.route.addr.src_sin.sin_port = port;
		}
	}
	c->sidr_tid = m->tid;
	c->peer_qpn = m->qpn;
	c->peer_qkey = m->qkey;
	c->state = CM_CONNECT_REQ;
	if (l->sync) {
		struct cm_channel *ch = cm_channel_new(true);

		if (!ch) {
			drop_child_locked(c);
			return;
		}
		c->id.channel = &ch->ch;
		c->sync = true;
	}
	cm_set_device_locked(c);
	cm_ud_ah_attr(c, &c->id.route.addr.addr.ibaddr.dgid, &ud.ah_attr);
	ud.qp_num = m->qpn;
	ud.qkey = m->qkey;
	if (cm_event_push_ud_locked(l, c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &ud, m->pd, m->pd_len))
		drop_child_locked(c);
}

void cm_ud_on_listen_locked(struct cm_id *l)
{
	/* A bounded batch per wake-up: the socket stays readable. */
	for (int i = 0; i < 64; i++) {
		uint8_t buf[SIDR_FRAME_MAX + 1];
		struct sockaddr_storage peer;
		socklen_t pl = sizeof(peer);
		struct sidr_msg m;
		ssize_t n = recvfrom(l->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&peer, &pl);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;
		if ((size_t)n > SIDR_FRAME_MAX || sidr_decode(buf, (size_t)n, &m) ||
		    m.type != SIDR_REQ || pl > sizeof(peer) ||
		    (peer.ss_family != AF_INET && peer.ss_family != AF_INET6)) {
			sr_dbg("cm id %p: dropping a bad SIDR request (%zd bytes)", (void *)l, n);
			continue;
		}
		on_sidr_req(l, &m, &peer, pl);
	}
}

/* Answer the request: the reply is kept in c->hs for resent requests. */
static int send_rep_locked(struct cm_id *c, const struct sidr_msg *m)
{
	const struct sockaddr *dst = &c->id.route.addr.dst_addr;
	ssize_t n = sidr_encode(c->hs, sizeof(c->hs), m);

	if (n < 0)
		return (int)n;
	/* The answer leaves from the port the request went to. */
	if (!c->listener || c->listener->fd < 0)
		return -ENOTCONN;
	c->hs_len = (size_t)n;
	if (sendto(c->listener->fd, c->hs, c->hs_len, MSG_DONTWAIT | MSG_NOSIGNAL, dst,
		   cm_addr_len(dst)) < 0)
		sr_dbg("cm id %p: SIDR reply: %s", (void *)c, strerror(errno));
	return 0;
}

int cm_ud_accept(struct cm_id *c, const struct rdma_conn_param *p)
{
	struct rdma_cm_id *id = &c->id;
	struct sidr_msg m = { .type = SIDR_REP, .status = SIDR_SUCCESS, .tid = 0 };
	size_t pd_len = p ? p->private_data_len : 0;
	int ret;

	m.qpn = id->qp ? id->qp->qp_num : p ? p->qp_num : 0;
	m.qkey = qp_qkey(id->qp);
	m.pd = p ? p->private_data : NULL;
	if (!m.qpn || m.qpn > SIDR_QPN_MAX || pd_len > SIDR_REP_PD_MAX || (pd_len && !m.pd))
		return -EINVAL;
	m.pd_len = (uint8_t)pd_len;
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_CONNECT_REQ) {
		pthread_mutex_unlock(&cm.lock);
		return -EINVAL;
	}
	m.tid = c->sidr_tid;
	ret = send_rep_locked(c, &m);
	if (!ret)
		c->state = CM_CONNECTED;	/* no ESTABLISHED here (SIDR) */
	pthread_mutex_unlock(&cm.lock);
	return ret;
}

int cm_ud_reject(struct cm_id *c, const void *pd, uint8_t pd_len)
{
	struct sidr_msg m = { .type = SIDR_REP, .status = SIDR_REJECT, .pd = pd, .pd_len = pd_len };
	int ret;

	if (pd_len > SIDR_REP_PD_MAX || (pd_len && !pd))
		return -EINVAL;
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_CONNECT_REQ) {
		pthread_mutex_unlock(&cm.lock);
		return -EINVAL;
	}
	m.tid = c->sidr_tid;
	ret = send_rep_locked(c, &m);
	c->state = CM_FAILED;
	pthread_mutex_unlock(&cm.lock);
	return ret;
}
