/* Connections: rdma_listen, rdma_connect, rdma_accept, rdma_reject,
 * rdma_establish, rdma_disconnect, and the CM thread that runs their I/O.
 *
 * On the wire (DESIGN.md decision 4): a CM connection is a TCP connection
 * to the listener's own port carrying an MPA request and reply (RFC 5044
 * §7.1, RFC 6581 enhanced mode with IRD/ORD) whose private data is the
 * application's, as Linux's iWARP CM sends it. Both ends set reserved
 * flag 0x04 when they speak softrnic's extensions (cm_mpa.h); if both
 * did, the stream uses them. After the exchange the socket is handed to
 * the QP (softrnic_stream_attach) and carries FPDUs from the next byte.
 *
 * The CM thread: one per process, asleep in epoll_wait when idle. It
 * watches listening sockets, connecting sockets and sockets whose MPA
 * frame is still being read, each with a deadline. epoll data is an id's
 * serial, looked up under cm.lock, so an id destroyed meanwhile is never
 * touched. Frames are read exactly (header, then PD_Length bytes), so no
 * byte of the data stream is read by the CM.
 */
#include "cm/cm.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

static void *cm_thread(void *arg);

/* ---- the CM thread ------------------------------------------------------- */

static int thread_start_locked(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	sigset_t all, old;
	int ret;

	if (cm.thread_started)
		return 0;
	cm.epfd = epoll_create1(EPOLL_CLOEXEC);
	cm.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cm.epfd < 0 || cm.wakefd < 0 || epoll_ctl(cm.epfd, EPOLL_CTL_ADD, cm.wakefd, &ev))
		goto err;
	/* The program's signals are for its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&cm.thread, NULL, cm_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		goto err;
	pthread_detach(cm.thread);
	cm.thread_started = true;
	return 0;
err:
	if (cm.epfd >= 0)
		close(cm.epfd);
	if (cm.wakefd >= 0)
		close(cm.wakefd);
	cm.epfd = cm.wakefd = -1;
	return -ENOMEM;
}

void cm_thread_wake(void)
{
	uint64_t one = 1;

	if (cm.wakefd >= 0 && write(cm.wakefd, &one, sizeof(one)) < 0) {
		/* the counter is non-zero already: the thread will wake */
	}
}

int cm_thread_watch_locked(struct cm_id *cid, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = cid->serial };
	int ret = thread_start_locked();

	if (ret)
		return ret;
	if (epoll_ctl(cm.epfd, EPOLL_CTL_MOD, cid->fd, &ev) &&
	    epoll_ctl(cm.epfd, EPOLL_CTL_ADD, cid->fd, &ev))
		return -errno;
	cm_thread_wake();		/* deadlines may have changed */
	return 0;
}

void cm_thread_unwatch_locked(struct cm_id *cid)
{
	if (cm.epfd >= 0 && cid->fd >= 0)
		epoll_ctl(cm.epfd, EPOLL_CTL_DEL, cid->fd, NULL);
	cid->deadline_ms = 0;
}

static struct cm_id *find_serial_locked(uint64_t serial)
{
	struct sr_list *pos, *tmp;

	sr_list_for_each_safe(pos, tmp, &cm.ids) {
		struct cm_id *c = container_of(pos, struct cm_id, link);

		if (c->serial == serial && c->state != CM_DEAD)
			return c;
	}
	return NULL;
}

/* An id that never reached the application (a connection that failed
 * before CONNECT_REQUEST) is freed by the thread itself. */
static void drop_hidden_locked(struct cm_id *c, struct sr_list *dead)
{
	c->state = CM_DEAD;
	cm_thread_unwatch_locked(c);
	sr_list_del(&c->link);
	sr_list_add_tail(dead, &c->link);
}

static void fail_active_locked(struct cm_id *c, int type, int status,
			       const void *pd, size_t pd_len)
{
	cm_thread_unwatch_locked(c);
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
	c->state = CM_FAILED;
	cm_event_push_locked(c, type, status, NULL, pd, pd_len);
}

/* Read more of the MPA frame into c->hs: 1 complete, 0 more to come,
 * <0 the connection is lost. Never reads past the frame. */
static int read_frame(struct cm_id *c)
{
	for (;;) {
		size_t need = cm_mpa_need(c->hs, c->hs_len);
		ssize_t n;

		if (need > CM_MPA_FRAME_MAX)
			return -EBADMSG;
		if (c->hs_len >= need)
			return 1;
		n = recv(c->fd, c->hs + c->hs_len, need - c->hs_len, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->hs_len += (size_t)n;
	}
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	/* A setup frame is at most 532 bytes into a fresh connection: it
	 * fits the socket buffer, so a short write means a broken peer. */
	while (len) {
		ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void on_listen(struct cm_id *l)
{
	for (;;) {
		struct sockaddr_storage peer, me;
		socklen_t pl = sizeof(peer), ml = sizeof(me);
		int fd = accept4(l->fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct cm_id *c;
		int one = 1;

		if (fd < 0)
			return;
		getsockname(fd, (struct sockaddr *)&me, &ml);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = cm_id_new_locked(NULL, l->id.context, l->id.ps, l->id.qp_type);
		if (!c) {
			close(fd);
			continue;
		}
		c->id.channel = l->id.channel;
		c->listener = l;
		c->fd = fd;
		c->bound = true;
		c->tos = l->tos;
		c->ack_timeout = l->ack_timeout;
		memcpy(&c->id.route.addr.src_storage, &me, ml);
		memcpy(&c->id.route.addr.dst_storage, &peer, pl);
		c->state = CM_REQ_READ;
		c->deadline_ms = cm_now_ms() + CM_MPA_TIMEOUT_MS;
		if (cm_thread_watch_locked(c, EPOLLIN)) {
			struct sr_list dead;

			sr_list_init(&dead);
			drop_hidden_locked(c, &dead);
			cm_id_free(c);
		}
	}
}

/* Passive: the MPA request is in. */
static void on_request(struct cm_id *c, struct sr_list *dead)
{
	struct mpa_frame f;
	struct cm_id *l = c->listener;
	int r = read_frame(c);

	if (r == 0)
		return;
	if (r < 0 || !l || l->state != CM_LISTEN ||
	    mpa_frame_decode(c->hs, c->hs_len, &f) < 0 || f.reply || f.markers) {
		sr_dbg("cm: dropping a connection without a valid MPA request (%d)", r);
		drop_hidden_locked(c, dead);
		return;
	}
	cm_thread_unwatch_locked(c);
	c->peer_rev = f.rev;		/* we answer in it */
	c->rtr = f.enhanced && f.peer2peer ? cm_mpa_rtr_pick(f.rtr) : 0;
	c->peer_ird = f.enhanced ? f.ird : 1;
	c->peer_ord = f.enhanced ? f.ord : 1;
	/* rdma-core keeps these as the accept defaults */
	c->ird = (uint16_t)sr_min(c->peer_ord, CM_MAX_DEPTH);
	c->ord = (uint16_t)sr_min(c->peer_ird, CM_MAX_DEPTH);
	c->crc = f.crc || cm_want_crc();
	c->ext = f.softrnic && cm_want_ext();
	/* our reply will offer the flag; a request without it is not
	 * from a softrnic that wants extensions, and SOFTRNIC_EXT=0 in a
	 * softrnic peer is its own choice: either way, RFC iWARP only */
	c->plain = !f.softrnic && cm_want_ext();
	c->state = CM_CONNECT_REQ;
	if (l->sync) {
		/* a sync listener's children are sync ids (rdma_get_request) */
		struct cm_channel *ch = cm_channel_new(true);

		if (!ch) {
			drop_hidden_locked(c, dead);
			return;
		}
		c->id.channel = &ch->ch;
		c->sync = true;
	}
	cm_set_device_locked(c);
	if (cm_push_request_locked(l, c, f.pd, f.pd_len))
		drop_hidden_locked(c, dead);
}

/* The TCP connect failed. A refusal is retried for a short while (see
 * CM_REFUSED_RETRY_MS), then it is IB's "invalid service ID" reject. */
static void dial_failed_locked(struct cm_id *c, int err)
{
	if (err == ECONNREFUSED && cm_now_ms() < c->refused_until) {
		cm_thread_unwatch_locked(c);
		close(c->fd);
		c->fd = -1;
		c->redial_ms = cm_now_ms() + CM_REDIAL_MS;
		c->deadline_ms = c->refused_until + CM_CONNECT_TIMEOUT_MS;
		cm_thread_wake();
		return;
	}
	if (err == ECONNREFUSED)
		fail_active_locked(c, RDMA_CM_EVENT_REJECTED, CM_REJ_INVALID_SERVICE_ID, NULL, 0);
	else
		fail_active_locked(c, RDMA_CM_EVENT_UNREACHABLE, -err, NULL, 0);
}

/* Active: the TCP connect finished; send the MPA request. */
static void on_dialed(struct cm_id *c)
{
	int err = 0, ret;
	socklen_t len = sizeof(err);
	ssize_t n;

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	if (err) {
		dial_failed_locked(c, err);
		return;
	}
	n = (ssize_t)c->hs_len;
	ret = write_all(c->fd, c->hs, (size_t)n);
	if (ret) {
		fail_active_locked(c, RDMA_CM_EVENT_CONNECT_ERROR, ret, NULL, 0);
		return;
	}
	c->hs_len = 0;
	c->state = CM_REQ_SENT;
	cm_thread_watch_locked(c, EPOLLIN);
}

static void fill_conn(struct cm_id *c, struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = (uint8_t)sr_min(c->peer_ord, 255);
	p->initiator_depth = (uint8_t)sr_min(c->peer_ird, 255);
	p->flow_control = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static void attach_done_locked(struct cm_id *c, int ret, struct softrnic_stream *s,
			       const struct rdma_conn_param *p, const void *pd, size_t pd_len);

/* Active: the MPA reply is in. */
static void on_reply(struct cm_id *c)
{
	struct rdma_conn_param p;
	struct mpa_frame f;
	struct softrnic_stream *s = NULL;
	struct ibv_qp *qp;
	int r = read_frame(c), ret;

	if (r == 0)
		return;
	if (r < 0 || mpa_frame_decode(c->hs, c->hs_len, &f) < 0 || !f.reply || f.markers) {
		fail_active_locked(c, RDMA_CM_EVENT_CONNECT_ERROR, r < 0 ? r : -EPROTO, NULL, 0);
		return;
	}
	if (f.reject) {
		fail_active_locked(c, RDMA_CM_EVENT_REJECTED,
				   f.ece_reject ? CM_REJ_VENDOR_OPTION_NOT_SUPPORTED :
						  CM_REJ_CONSUMER_DEFINED, f.pd, f.pd_len);
		return;
	}
	cm_thread_unwatch_locked(c);
	c->peer_ird = f.enhanced ? f.ird : 1;
	c->peer_ord = f.enhanced ? f.ord : 1;
	/* RFC 6581 §3: never more reads outstanding than the peer takes */
	if (f.enhanced)
		c->ord = (uint16_t)sr_min(c->ord, c->peer_ird);
	c->crc = f.crc;
	c->ext = f.softrnic && cm_want_ext();
	c->plain = !f.softrnic && cm_want_ext();	/* it ignored our flag */
	fill_conn(c, &p);
	qp = c->id.qp;
	if (!qp) {
		/* The program owns its QP: it moves it and calls
		 * rdma_establish (rdma_connect(3), CONNECT_RESPONSE). */
		c->state = CM_RESPONSE;
		c->resp = p;
		cm_event_push_locked(c, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &p, f.pd, f.pd_len);
		return;
	}
	/* Hand the socket to the QP outside the lock (the stream may end
	 * at once and report it, taking cm.lock). */
	c->state = CM_ATTACHING;
	cm_busy_take_locked(c);
	pthread_mutex_unlock(&cm.lock);
	ret = cm_qp_to_rts(c, qp);
	if (!ret) {
		struct softrnic_stream_attr a = {
			.fd = c->fd, .crc = c->crc, .ext = c->ext, .plain = c->plain,
			.ird = c->ird, .ord = c->ord,
			.ended = cm_stream_ended, .arg = c,
		};

		ret = softrnic_stream_attach(qp->qp_num, &a, &s);
	}
	pthread_mutex_lock(&cm.lock);
	attach_done_locked(c, ret, s, &p, f.pd, f.pd_len);
	cm_busy_drop_locked(c);
}

/* After an attach (accept, reply, establish): ESTABLISHED, or an error. */
static void attach_done_locked(struct cm_id *c, int ret, struct softrnic_stream *s,
			       const struct rdma_conn_param *p, const void *pd, size_t pd_len)
{
	if (ret) {
		fail_active_locked(c, RDMA_CM_EVENT_CONNECT_ERROR, ret, NULL, 0);
		return;
	}
	c->fd = -1;			/* the stream owns it */
	c->stream = s;
	if (c->state == CM_DEAD)
		return;
	c->state = CM_CONNECTED;
	if (p)
		cm_event_push_locked(c, RDMA_CM_EVENT_ESTABLISHED, 0, p, pd, pd_len);
	if (c->ended_early) {
		c->state = CM_DISCONNECTED;
		cm_event_push_locked(c, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
	}
}

static void on_event_locked(struct cm_id *c, uint32_t events, struct sr_list *dead)
{
	if (c->id.qp_type == IBV_QPT_UD) {
		/* datagram ids: cm_ud.c */
		if (c->state == CM_LISTEN)
			cm_ud_on_listen_locked(c);
		else if (c->state == CM_REQ_SENT)
			cm_ud_on_reply_locked(c);
		else
			cm_thread_unwatch_locked(c);
		return;
	}
	switch (c->state) {
	case CM_LISTEN:
		on_listen(c);
		break;
	case CM_REQ_READ:
		on_request(c, dead);
		break;
	case CM_DIALING:
		on_dialed(c);
		break;
	case CM_REQ_SENT:
		on_reply(c);
		break;
	default:
		/* nothing to watch any more */
		cm_thread_unwatch_locked(c);
		break;
	}
}

static int dial_locked(struct cm_id *c);

/* The refused connect's retry: a new socket on the same source address
 * and port (a TCP socket is not reusable after a failed connect). */
static void redial_locked(struct cm_id *c)
{
	const struct sockaddr *src = &c->id.route.addr.src_addr;
	int one = 1, ret;

	c->redial_ms = 0;
	c->fd = socket(src->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		fail_active_locked(c, RDMA_CM_EVENT_UNREACHABLE, -errno, NULL, 0);
		return;
	}
	setsockopt(c->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (src->sa_family == AF_INET6) {
		int v6only = c->afonly > 0;

		setsockopt(c->fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
	}
	if (bind(c->fd, src, cm_addr_len(src)) < 0) {
		fail_active_locked(c, RDMA_CM_EVENT_UNREACHABLE, -errno, NULL, 0);
		return;
	}
	ret = dial_locked(c);
	if (ret)
		fail_active_locked(c, RDMA_CM_EVENT_UNREACHABLE, ret, NULL, 0);
}

static void on_timeouts_locked(uint64_t now, struct sr_list *dead, int *wait_ms)
{
	struct sr_list *pos, *tmp;
	uint64_t next = 0;

	sr_list_for_each_safe(pos, tmp, &cm.ids) {
		struct cm_id *c = container_of(pos, struct cm_id, link);

		if (c->timewait_ms && c->state != CM_DEAD) {
			if (c->timewait_ms <= now) {
				c->timewait_ms = 0;
				cm_event_push_locked(c, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL, NULL, 0);
			} else if (!next || c->timewait_ms < next) {
				next = c->timewait_ms;
			}
		}
		if (c->redial_ms && c->state == CM_DIALING) {
			if (c->redial_ms <= now)
				redial_locked(c);
			else if (!next || c->redial_ms < next)
				next = c->redial_ms;
		}
		if (!c->deadline_ms || c->state == CM_DEAD)
			continue;
		if (c->deadline_ms <= now && c->state == CM_REQ_SENT &&
		    c->id.qp_type == IBV_QPT_UD)
			cm_ud_on_timer_locked(c, now);	/* resend, or give up */
		if (!c->deadline_ms)
			continue;
		if (c->deadline_ms > now) {
			if (!next || c->deadline_ms < next)
				next = c->deadline_ms;
			continue;
		}
		if (c->state == CM_REQ_READ)
			drop_hidden_locked(c, dead);
		else if (c->state == CM_DIALING || c->state == CM_REQ_SENT)
			fail_active_locked(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		else
			c->deadline_ms = 0;
	}
	*wait_ms = next ? (int)sr_min(next - now, 60000ULL) : -1;
}

static void *cm_thread(void *arg)
{
	struct epoll_event evs[32];
	int wait_ms = -1;

	for (;;) {
		struct sr_list dead, *pos, *tmp;
		int n = epoll_wait(cm.epfd, evs, ARRAY_SIZE(evs), wait_ms);

		sr_list_init(&dead);
		pthread_mutex_lock(&cm.lock);
		for (int i = 0; i < n; i++) {
			struct cm_id *c;

			if (evs[i].data.u64 == 0) {
				uint64_t v;

				if (read(cm.wakefd, &v, sizeof(v)) < 0) {
					/* spurious: nothing to do */
				}
				continue;
			}
			c = find_serial_locked(evs[i].data.u64);
			if (c && !c->busy)
				on_event_locked(c, evs[i].events, &dead);
		}
		on_timeouts_locked(cm_now_ms(), &dead, &wait_ms);
		pthread_mutex_unlock(&cm.lock);
		sr_list_for_each_safe(pos, tmp, &dead) {
			struct cm_id *c = container_of(pos, struct cm_id, link);

			sr_list_del(pos);
			pthread_mutex_lock(&cm.lock);
			cm_pd_put_locked(c);
			pthread_mutex_unlock(&cm.lock);
			cm_id_free(c);
		}
	}
	return arg;
}

/* ---- the stream's end ----------------------------------------------------- */

/* From libibverbs (softrnic_stream_attr.ended): the peer disconnected,
 * or the connection broke. The QP is in ERROR already. */
void cm_stream_ended(void *arg, bool orderly)
{
	struct cm_id *c = arg;

	pthread_mutex_lock(&cm.lock);
	if (c->state == CM_ATTACHING) {
		c->ended_early = true;
	} else if (c->state == CM_CONNECTED) {
		c->state = CM_DISCONNECTED;
		cm_event_push_locked(c, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
	}
	pthread_mutex_unlock(&cm.lock);
}

/* ---- rdma_listen ------------------------------------------------------------ */

SR_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cm_id *cid;
	int ret;

	if (!id)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	if (!cid->bound) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = cm_bind(cid, (struct sockaddr *)&any);
		if (ret)
			return cm_ret(ret);
	}
	pthread_mutex_lock(&cm.lock);
	if (cid->state != CM_BOUND) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	if (id->qp_type == IBV_QPT_UD) {
		ret = cm_ud_listen_locked(cid);
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(ret);
	}
	if (listen(cid->fd, backlog > 0 ? backlog : 128) < 0) {
		ret = -errno;
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(ret);
	}
	cid->state = CM_LISTEN;
	ret = cm_thread_watch_locked(cid, EPOLLIN);
	pthread_mutex_unlock(&cm.lock);
	return cm_ret(ret);
}

/* ---- rdma_connect ----------------------------------------------------------- */

static int depths(struct cm_id *c, const struct rdma_conn_param *p)
{
	int ird = cm_depth(p->responder_resources, CM_MAX_DEPTH);
	int ord = cm_depth(p->initiator_depth, CM_MAX_DEPTH);

	if (ird < 0 || ord < 0)
		return -EINVAL;
	c->ird = (uint16_t)ird;
	c->ord = (uint16_t)ord;
	return 0;
}

SR_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	bool sync_id;
	struct cm_id *c;
	const void *pd = NULL;
	size_t pd_len = 0;
	ssize_t n;
	int ret;

	if (!id)
		return cm_ret(-EINVAL);
	c = to_cm(id);
	if (id->qp_type == IBV_QPT_UD)
		return cm_ret(cm_ud_connect(c, conn_param));
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	if (conn_param) {
		ret = depths(c, conn_param);
		if (ret)
			goto out;
		pd = conn_param->private_data;
		pd_len = conn_param->private_data_len;
		c->qpn = id->qp ? id->qp->qp_num : conn_param->qp_num;
	} else {
		c->ird = c->ord = CM_MAX_DEPTH;
		if (c->ep_connect_len) {
			pd = c->ep_connect;
			pd_len = c->ep_connect_len;
		}
		c->qpn = id->qp ? id->qp->qp_num : 0;
	}
	if (pd_len > (size_t)cm_pd_limit(cm.iwarp, CM_PD_REQ) || (pd_len && !pd)) {
		ret = -EINVAL;
		goto out;
	}
	n = cm_mpa_encode(c->hs, sizeof(c->hs), false, false, cm_want_crc(), cm_want_ext(),
			  false, c->ird, c->ord, pd, pd_len);
	if (n < 0) {
		ret = (int)n;
		goto out;
	}
	c->hs_len = (size_t)n;
	c->state = CM_DIALING;
	c->deadline_ms = cm_now_ms() + CM_CONNECT_TIMEOUT_MS;
	c->refused_until = cm_now_ms() + CM_REFUSED_RETRY_MS;
	ret = dial_locked(c);
out:
	sync_id = c->sync;
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return cm_ret(ret);
	return cm_ret(cm_complete(c, sync_id));
}

/* Start the TCP connect of c->fd; its end comes to on_dialed. */
static int dial_locked(struct cm_id *c)
{
	const struct sockaddr *dst = &c->id.route.addr.dst_addr;

	if (connect(c->fd, dst, cm_addr_len(dst)) < 0 && errno != EINPROGRESS) {
		/* loopback may refuse at once */
		dial_failed_locked(c, errno);
		return 0;
	}
	return cm_thread_watch_locked(c, EPOLLOUT);
}

/* ---- rdma_accept / rdma_reject / rdma_establish ------------------------------ */

SR_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	bool sync_id;
	struct softrnic_stream *s = NULL;
	struct rdma_conn_param est = { 0 };
	uint8_t frame[CM_MPA_FRAME_MAX];
	const void *pd = NULL;
	size_t pd_len = 0;
	uint32_t qpn;
	struct cm_id *c;
	ssize_t n;
	int ret;

	if (!id)
		return cm_ret(-EINVAL);
	c = to_cm(id);
	if (id->qp_type == IBV_QPT_UD)
		return cm_ret(cm_ud_accept(c, conn_param));
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_CONNECT_REQ) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	if (conn_param) {
		ret = depths(c, conn_param);
		if (ret)
			goto unlock;
		pd = conn_param->private_data;
		pd_len = conn_param->private_data_len;
	}
	qpn = id->qp ? id->qp->qp_num : conn_param ? conn_param->qp_num : 0;
	if (pd_len > (size_t)cm_pd_limit(cm.iwarp, CM_PD_REP) || (pd_len && !pd) || !qpn) {
		ret = -EINVAL;
		goto unlock;
	}
	/* RFC 6581 §3: our ORD no more than the peer's IRD */
	c->ord = (uint16_t)sr_min(c->ord, c->peer_ird);
	n = cm_mpa_encode_rev(frame, sizeof(frame), c->peer_rev, true, false, c->crc,
			      cm_want_ext(), false, c->ird, c->ord, c->rtr, pd, pd_len);
	if (n < 0) {
		ret = (int)n;
		goto unlock;
	}
	c->qpn = qpn;
	c->state = CM_ATTACHING;
	cm_busy_take_locked(c);
	fill_conn(c, &est);
	pthread_mutex_unlock(&cm.lock);

	/* The reply goes out before the QP can send a byte on the stream. */
	ret = id->qp ? cm_qp_to_rts(c, id->qp) : 0;
	if (!ret)
		ret = write_all(c->fd, frame, (size_t)n);
	if (!ret) {
		struct softrnic_stream_attr a = {
			.fd = c->fd, .crc = c->crc, .ext = c->ext, .plain = c->plain, .responder = true,
			.rtr_wait = c->rtr != 0,
			.ird = c->ird, .ord = c->ord, .ended = cm_stream_ended, .arg = c,
		};

		ret = softrnic_stream_attach(qpn, &a, &s);
	}
	pthread_mutex_lock(&cm.lock);
	attach_done_locked(c, ret, s, ret ? NULL : &est, NULL, 0);
	sync_id = c->sync;
	cm_busy_drop_locked(c);
	pthread_mutex_unlock(&cm.lock);
	if (ret) {
		sr_dbg("cm id %p: accept: %s", (void *)c, strerror(-ret));
		return cm_ret(ret);
	}
	return cm_ret(cm_complete(c, sync_id));
unlock:
	pthread_mutex_unlock(&cm.lock);
	sr_dbg("cm id %p: accept refused: %s", (void *)c, strerror(-ret));
	return cm_ret(ret);
}

static int reject(struct rdma_cm_id *id, const void *pd, uint8_t pd_len, bool ece)
{
	uint8_t frame[CM_MPA_FRAME_MAX];
	struct cm_id *c;
	bool plain;
	ssize_t n;
	int ret, fd;

	if (!id)
		return -EINVAL;
	c = to_cm(id);
	if (id->qp_type == IBV_QPT_UD)
		return cm_ud_reject(c, pd, pd_len);	/* a SIDR reply, as the kernel's */
	if (pd_len > cm_pd_limit(cm.iwarp, CM_PD_REJ) || (pd_len && !pd))
		return -EINVAL;
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_CONNECT_REQ) {
		pthread_mutex_unlock(&cm.lock);
		return -EINVAL;
	}
	n = cm_mpa_encode_rev(frame, sizeof(frame), c->peer_rev, true, true, c->crc, c->ext, ece,
			      0, 0, 0, pd, pd_len);
	ret = n < 0 ? (int)n : write_all(c->fd, frame, (size_t)n);
	fd = c->fd;
	plain = c->plain;
	c->fd = -1;
	c->state = CM_FAILED;
	pthread_mutex_unlock(&cm.lock);
	/* The socket closes after the reject either way (RFC 5044 §7.1.1).
	 * Linux siw, reading the reject, can take a FIN right behind it for
	 * a reset and lose the private data (docs/INTEROP.md, S9): towards a
	 * plain iWARP peer the FIN follows 20 ms later. */
	if (plain)
		usleep(20000);
	shutdown(fd, SHUT_WR);
	close(fd);
	return ret;
}

SR_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			  uint8_t private_data_len)
{
	return cm_ret(reject(id, private_data, private_data_len, false));
}

SR_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return cm_ret(reject(id, private_data, private_data_len, true));
}

/* Active side without a QP of the CM's: the program moved its QP to RTS
 * after CONNECT_RESPONSE; give it the stream (rdma_establish(3)). */
SR_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct softrnic_stream *s = NULL;
	struct cm_id *c;
	uint32_t qpn;
	int ret;

	if (!id)
		return cm_ret(-EINVAL);
	c = to_cm(id);
	pthread_mutex_lock(&cm.lock);
	if (c->state != CM_RESPONSE || id->qp) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	qpn = c->qpn;
	c->state = CM_ATTACHING;
	cm_busy_take_locked(c);
	pthread_mutex_unlock(&cm.lock);
	{
		struct softrnic_stream_attr a = {
			.fd = c->fd, .crc = c->crc, .ext = c->ext, .plain = c->plain,
			.ird = c->ird, .ord = c->ord,
			.ended = cm_stream_ended, .arg = c,
		};

		ret = qpn ? softrnic_stream_attach(qpn, &a, &s) : -EINVAL;
	}
	pthread_mutex_lock(&cm.lock);
	/* no ESTABLISHED here: the active side had CONNECT_RESPONSE */
	attach_done_locked(c, ret, s, NULL, NULL, 0);
	cm_busy_drop_locked(c);
	pthread_mutex_unlock(&cm.lock);
	return cm_ret(ret);
}

/* rdma_notify(3) forwards a QP's first-data event to an IB CM waiting
 * for an RTU; the stream here is up once attached, so nothing waits. */
SR_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (!id)
		return cm_ret(-EINVAL);
	return 0;
}

/* ---- rdma_disconnect ---------------------------------------------------------- */

SR_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct softrnic_stream *s;
	struct cm_id *c;
	bool raise;

	if (!id)
		return cm_ret(-EINVAL);
	c = to_cm(id);
	/* A datagram id holds no connection: nothing to tear down, and its
	 * QP stays usable (the kernel's SIDR has no DREQ either). */
	if (id->qp_type == IBV_QPT_UD)
		return cm_ret(-EINVAL);
	pthread_mutex_lock(&cm.lock);
	switch (c->state) {
	case CM_CONNECTED:
	case CM_DISCONNECTED:
	case CM_RESPONSE:
		break;
	default:
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	cm_busy_take_locked(c);
	raise = c->state == CM_CONNECTED;
	s = c->stream;
	c->stream = NULL;
	pthread_mutex_unlock(&cm.lock);

	/* Flush, goodbye, close: the QP is in ERROR, its work flushed,
	 * before DISCONNECTED is seen (rdma_disconnect(3)). */
	if (s) {
		softrnic_stream_disconnect(s);
		softrnic_stream_release(s);
	} else if (id->qp) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
	}

	pthread_mutex_lock(&cm.lock);
	if (c->fd >= 0) {		/* CONNECT_RESPONSE never established */
		close(c->fd);
		c->fd = -1;
	}
	c->disc_called = true;
	if (c->state != CM_DEAD) {
		if (raise || c->state == CM_RESPONSE)
			cm_event_push_locked(c, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
		c->state = CM_DISCONNECTED;
		/* The IB CM's time-wait ends after both sides are done
		 * (DREQ/DREP); rdma_cm raises TIMEWAIT_EXIT then, on IB and
		 * RoCE. The iWARP CM has no time-wait and no such event. */
		if (!cm.iwarp && !c->timewait_sent && !thread_start_locked()) {
			c->timewait_sent = true;
			c->timewait_ms = cm_now_ms() + CM_TIMEWAIT_MS;
			cm_thread_wake();
		}
	}
	cm_busy_drop_locked(c);
	pthread_mutex_unlock(&cm.lock);
	return 0;
}
