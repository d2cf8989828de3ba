/* Process state, event channels, events and ids (rdma_cm(7),
 * rdma_get_cm_event(3), rdma_destroy_id(3)).
 *
 * An event channel is one end of a socketpair that holds one byte exactly
 * while events are queued (as src/core/evq.c does for completion
 * channels), so programs can poll it and set O_NONBLOCK on it. An event
 * counts against the id it is about (for CONNECT_REQUEST: the listener);
 * rdma_destroy_id drops what was never retrieved and waits until what was
 * retrieved is acked, as rdma-core does.
 */
#include "cm/cm.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct cm_state_all cm = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.ids = { &cm.ids, &cm.ids },
	.epfd = -1,
	.wakefd = -1,
};

static pthread_once_t cm_once = PTHREAD_ONCE_INIT;
static int cm_init_err;

uint64_t cm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* SOFTRNIC_EXT=0: plain iWARP even towards a softrnic peer (tcp.c). */
bool cm_want_ext(void)
{
	const char *v = getenv("SOFTRNIC_EXT");

	return !v || !*v || *v != '0';
}

bool cm_want_crc(void)
{
	const char *v = getenv("SOFTRNIC_MPA_CRC");

	return v && *v && *v != '0';
}

/* Open the device once, as librdmacm's ucma_init does: every id of the
 * process shares this context. */
static void cm_init_once(void)
{
	struct ibv_device **list;
	int n = 0;

	sr_log_init();
	list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		cm_init_err = -ENODEV;
		if (list)
			ibv_free_device_list(list);
		return;
	}
	cm.verbs = ibv_open_device(list[0]);
	if (!cm.verbs)
		cm_init_err = errno ? -errno : -ENODEV;
	else
		cm.iwarp = list[0]->transport_type == IBV_TRANSPORT_IWARP;
	ibv_free_device_list(list);
}

int cm_init(void)
{
	pthread_once(&cm_once, cm_init_once);
	return cm_init_err;
}

/* ---- default PD --------------------------------------------------------- */

void cm_pd_get_locked(struct cm_id *cid)
{
	if (cid->has_pd_ref)
		return;
	if (!cm.pd) {
		cm.pd = ibv_alloc_pd(cm.verbs);
		if (!cm.pd)
			return;
	}
	cm.pd_refs++;
	cid->has_pd_ref = true;
	cid->id.pd = cm.pd;
}

void cm_pd_put_locked(struct cm_id *cid)
{
	if (!cid->has_pd_ref)
		return;
	cid->has_pd_ref = false;
	if (--cm.pd_refs != 0)
		return;
	/* The last id on the device lets its XRC domain and default PD go
	 * (rdma-core's ucma_put_device). Busy if the program still has MRs
	 * on the PD, or SRQs or XRC_RECV QPs in the domain: kept then, for
	 * the next id. */
	if (cm.xrcd && ibv_close_xrcd(cm.xrcd) == 0)
		cm.xrcd = NULL;
	if (cm.pd && ibv_dealloc_pd(cm.pd) == 0)
		cm.pd = NULL;
}

int cm_xrcd_get(struct ibv_xrcd **out)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};
	int ret = 0;

	pthread_mutex_lock(&cm.lock);
	if (!cm.xrcd) {
		cm.xrcd = ibv_open_xrcd(cm.verbs, &a);
		if (!cm.xrcd)
			ret = errno ? -errno : -ENOMEM;
	}
	*out = cm.xrcd;
	pthread_mutex_unlock(&cm.lock);
	return ret;
}

/* ---- channels ----------------------------------------------------------- */

struct cm_channel *cm_channel_new(bool sync)
{
	struct cm_channel *c = calloc(1, sizeof(*c));
	int sv[2];

	if (!c)
		return NULL;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(c);
		return NULL;
	}
	c->ch.fd = sv[0];
	c->wfd = sv[1];
	fcntl(c->wfd, F_SETFL, O_NONBLOCK);
	shutdown(c->ch.fd, SHUT_WR);
	sr_list_init(&c->events);
	c->sync = sync;
	return c;
}

void cm_channel_free(struct cm_channel *c)
{
	if (!c)
		return;
	close(c->ch.fd);
	close(c->wfd);
	free(c);
}

static struct cm_channel *to_channel(struct rdma_event_channel *ch)
{
	return container_of(ch, struct cm_channel, ch);
}

/* Keep "one byte iff non-empty". Caller holds cm.lock. */
static void chan_signal_locked(struct cm_channel *c)
{
	char one = 1;

	while (send(c->wfd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static void chan_unsignal_locked(struct cm_channel *c)
{
	char b;

	while (recv(c->ch.fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EINTR)
		;
}

static void chan_add_locked(struct cm_channel *c, struct cm_event *e)
{
	bool was_empty = sr_list_empty(&c->events);

	sr_list_add_tail(&c->events, &e->link);
	if (was_empty)
		chan_signal_locked(c);
}

static void chan_del_locked(struct cm_channel *c, struct cm_event *e)
{
	sr_list_del(&e->link);
	if (sr_list_empty(&c->events))
		chan_unsignal_locked(c);
}

SR_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_channel *c;
	int ret = cm_init();

	if (ret) {
		errno = -ret;
		return NULL;
	}
	c = cm_channel_new(false);
	return c ? &c->ch : NULL;
}

SR_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cm_channel *c = to_channel(channel);
	struct sr_list *pos, *tmp;
	bool now;

	/* The man page requires every id gone and event acked first; what is
	 * left anyway is dropped, never leaked. */
	pthread_mutex_lock(&cm.lock);
	sr_list_for_each_safe(pos, tmp, &c->events) {
		sr_list_del(pos);
		free(container_of(pos, struct cm_event, link));
	}
	c->dead = true;
	now = c->waiters == 0;
	/* A thread blocked in rdma_get_cm_event sees end-of-file and frees
	 * the channel on its way out; its fd stays open until then, so the
	 * number cannot be reused under it. */
	close(c->wfd);
	c->wfd = -1;
	pthread_mutex_unlock(&cm.lock);
	if (now) {
		close(c->ch.fd);
		free(c);
	}
}

/* The channel was destroyed while this thread waited in it. rdma-core's
 * read on the kernel file stays blocked until the process ends (the file
 * outlives its descriptor while read runs); so does this thread, after
 * freeing the channel if it is the last one out. Takes cm.lock. */
static void __attribute__((noreturn)) chan_orphaned(struct cm_channel *c)
{
	pthread_mutex_lock(&cm.lock);
	if (--c->waiters == 0) {
		close(c->ch.fd);
		free(c);
	}
	pthread_mutex_unlock(&cm.lock);
	for (;;)
		pause();
}

/* ---- events ------------------------------------------------------------- */

static struct cm_event *event_new(struct cm_id *id, int type, int status,
				  const struct rdma_conn_param *conn, const void *pd, size_t pd_len)
{
	struct cm_event *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->owner = id;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	if (conn)
		e->ev.param.conn = *conn;
	if (pd_len > sizeof(e->pd))
		pd_len = sizeof(e->pd);
	if (pd_len)
		memcpy(e->pd, pd, pd_len);
	e->ev.param.conn.private_data = pd_len ? e->pd : NULL;
	e->ev.param.conn.private_data_len = (uint8_t)(pd_len > 255 ? 255 : pd_len);
	return e;
}

int cm_event_push_locked(struct cm_id *id, int type, int status,
			 const struct rdma_conn_param *conn, const void *pd, size_t pd_len)
{
	struct cm_event *e;

	if (id->state == CM_DEAD || !id->id.channel)
		return -EINVAL;
	e = event_new(id, type, status, conn, pd, pd_len);
	if (!e)
		return -ENOMEM;
	sr_dbg("cm id %p: %s status %d", (void *)id, cm_event_name(type), status);
	chan_add_locked(to_channel(id->id.channel), e);
	return 0;
}

int cm_event_push_ud_locked(struct cm_id *owner, struct cm_id *child, int type, int status,
			    const struct rdma_ud_param *ud, const void *pd, size_t pd_len)
{
	struct cm_event *e;

	if (owner->state == CM_DEAD || !owner->id.channel)
		return -EINVAL;
	e = event_new(owner, type, status, NULL, pd, pd_len);
	if (!e)
		return -ENOMEM;
	{
		const void *p = e->ev.param.ud.private_data;
		uint8_t len = e->ev.param.ud.private_data_len;

		e->ev.param.ud = *ud;
		e->ev.param.ud.private_data = pd_len ? p : ud->private_data;
		e->ev.param.ud.private_data_len = len;
	}
	if (child) {
		e->ev.id = &child->id;
		e->ev.listen_id = &owner->id;
		e->child = child;
	}
	sr_dbg("cm id %p: %s status %d (ud)", (void *)owner, cm_event_name(type), status);
	chan_add_locked(to_channel(owner->id.channel), e);
	return 0;
}

int cm_push_request_locked(struct cm_id *listener, struct cm_id *child,
			   const void *pd, size_t pd_len)
{
	struct rdma_conn_param conn = {
		/* RFC 6581: the peer's ORD is what we must answer, its IRD
		 * what we may ask of it (rdma_cm's iWARP mapping) */
		.responder_resources = (uint8_t)sr_min(child->peer_ord, 255),
		.initiator_depth = (uint8_t)sr_min(child->peer_ird, 255),
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	struct cm_event *e;

	e = event_new(listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &conn, pd, pd_len);
	if (!e)
		return -ENOMEM;
	e->ev.id = &child->id;
	e->ev.listen_id = &listener->id;
	e->child = child;
	chan_add_locked(to_channel(listener->id.channel), e);
	return 0;
}

SR_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_channel *c;

	if (!channel || !event)
		return cm_ret(-EINVAL);
	c = to_channel(channel);
	pthread_mutex_lock(&cm.lock);
	c->waiters++;
	pthread_mutex_unlock(&cm.lock);
	for (;;) {
		struct cm_event *e;
		char b;
		/* Blocks, or not, as the program set the fd. */
		ssize_t n = recv(c->ch.fd, &b, 1, MSG_PEEK);
		int err = errno;

		pthread_mutex_lock(&cm.lock);
		if (c->dead) {
			pthread_mutex_unlock(&cm.lock);
			chan_orphaned(c);
		}
		if (n < 0 && err == EINTR) {
			pthread_mutex_unlock(&cm.lock);
			continue;
		}
		if (n < 0) {
			c->waiters--;
			pthread_mutex_unlock(&cm.lock);
			errno = err;
			return -1;	/* EAGAIN with O_NONBLOCK */
		}
		if (sr_list_empty(&c->events)) {
			/* another thread took it */
			pthread_mutex_unlock(&cm.lock);
			continue;
		}
		e = container_of(c->events.next, struct cm_event, link);
		chan_del_locked(c, e);
		e->owner->events_reported++;
		if (e->child)
			e->child->visible = true;
		c->waiters--;
		pthread_mutex_unlock(&cm.lock);
		*event = &e->ev;
		return 0;
	}
}

SR_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cm_event *e;

	if (!event)
		return cm_ret(-EINVAL);
	e = container_of(event, struct cm_event, ev);
	pthread_mutex_lock(&cm.lock);
	e->owner->events_completed++;
	pthread_cond_broadcast(&cm.cond);
	pthread_mutex_unlock(&cm.lock);
	free(e);
	return 0;
}

SR_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	return cm_event_name(event);
}

/* ucma_complete: a sync id's call waits for its event, keeps it in
 * id->event (acked by the next call or destroy) and turns a failure into
 * -errno (REJECTED: ECONNREFUSED). */
int cm_complete(struct cm_id *cid, bool sync)
{
	struct rdma_cm_event *ev;

	if (!sync)
		return 0;
	if (cid->id.event) {
		rdma_ack_cm_event(cid->id.event);
		cid->id.event = NULL;
	}
	if (rdma_get_cm_event(cid->id.channel, &ev))
		return -errno;
	cid->id.event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return -ECONNREFUSED;
		/* ucma_complete: a positive status (a SIDR reply's) is errno */
		return ev->status < 0 ? ev->status : -ev->status;
	}
	return 0;
}

/* ---- ids ---------------------------------------------------------------- */

struct cm_id *cm_id_new_locked(struct cm_channel *ch, void *context,
			       enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_id *cid = calloc(1, sizeof(*cid));

	if (!cid)
		return NULL;
	cid->id.channel = ch ? &ch->ch : NULL;
	cid->id.context = context;
	cid->id.ps = ps;
	cid->id.qp_type = qpt;
	cid->fd = -1;
	cid->tos = -1;
	cid->afonly = -1;
	cid->serial = ++cm.next_serial;
	cid->ird = cid->ord = 1;
	sr_list_add_tail(&cm.ids, &cid->link);
	return cid;
}

void cm_busy_take_locked(struct cm_id *cid)
{
	while (cid->busy)
		pthread_cond_wait(&cm.cond, &cm.lock);
	cid->busy = true;
}

void cm_busy_drop_locked(struct cm_id *cid)
{
	cid->busy = false;
	pthread_cond_broadcast(&cm.cond);
}

/* Free an id nobody else can reach any more (unlisted, no events). */
void cm_id_free(struct cm_id *cid)
{
	if (cid->stream) {
		softrnic_stream_disconnect(cid->stream);
		softrnic_stream_release(cid->stream);
	}
	if (cid->fd >= 0)
		close(cid->fd);
	if (cid->sync && cid->id.channel)
		cm_channel_free(to_channel(cid->id.channel));
	free(cid->ep_qp_attr);
	free(cid);
}

int cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		 enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_channel *ch = channel ? to_channel(channel) : NULL;
	struct cm_id *cid;
	int ret = cm_init();

	if (ret)
		return ret;
	if (!id)
		return -EINVAL;
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		break;
	default:
		return -EINVAL;
	}
	if (!ch) {
		ch = cm_channel_new(true);
		if (!ch)
			return -ENOMEM;
	}
	pthread_mutex_lock(&cm.lock);
	cid = cm_id_new_locked(ch, context, ps, qpt);
	if (cid) {
		cid->sync = ch->sync;
		cid->visible = true;
	}
	pthread_mutex_unlock(&cm.lock);
	if (!cid) {
		if (ch->sync)
			cm_channel_free(ch);
		return -ENOMEM;
	}
	*id = &cid->id;
	return 0;
}

SR_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	enum ibv_qp_type qpt = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;

	return cm_ret(cm_create_id(channel, id, context, ps, qpt));
}

/* Drop the events of cid that were never retrieved, and the ids of the
 * connection requests among them (rdma-core's kernel side does the same:
 * ucma_cleanup_ctx_events). Returns those ids, unlisted, in *dead.
 * Caller holds cm.lock. */
static void drop_events_locked(struct cm_id *cid, struct sr_list *dead)
{
	struct sr_list *pos, *tmp;

	if (!cid->id.channel)
		return;
	sr_list_for_each_safe(pos, tmp, &to_channel(cid->id.channel)->events) {
		struct cm_event *e = container_of(pos, struct cm_event, link);

		if (e->owner != cid)
			continue;
		chan_del_locked(to_channel(cid->id.channel), e);
		if (e->child) {
			e->child->state = CM_DEAD;
			cm_thread_unwatch_locked(e->child);
			sr_list_del(&e->child->link);
			sr_list_add_tail(dead, &e->child->link);
		}
		free(e);
	}
}

SR_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cm_id *cid;
	struct sr_list dead, *pos, *tmp;

	if (!id)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	cm_mcast_leave_all(cid);
	sr_list_init(&dead);
	pthread_mutex_lock(&cm.lock);
	cm_busy_take_locked(cid);
	cid->state = CM_DEAD;
	cm_thread_unwatch_locked(cid);
	drop_events_locked(cid, &dead);
	/* Connections still reading their MPA request die with their
	 * listener; accepted ids already handed out merely lose it. */
	sr_list_for_each_safe(pos, tmp, &cm.ids) {
		struct cm_id *c = container_of(pos, struct cm_id, link);

		if (c->listener != cid)
			continue;
		c->listener = NULL;
		if (!c->visible && c->state == CM_REQ_READ) {
			c->state = CM_DEAD;
			cm_thread_unwatch_locked(c);
			sr_list_del(&c->link);
			sr_list_add_tail(&dead, &c->link);
		}
	}
	while (cid->events_completed < cid->events_reported)
		pthread_cond_wait(&cm.cond, &cm.lock);
	sr_list_del(&cid->link);
	cm_pd_put_locked(cid);
	pthread_mutex_unlock(&cm.lock);

	sr_list_for_each_safe(pos, tmp, &dead) {
		struct cm_id *c = container_of(pos, struct cm_id, link);

		sr_list_del(pos);
		pthread_mutex_lock(&cm.lock);
		cm_pd_put_locked(c);
		pthread_mutex_unlock(&cm.lock);
		cm_id_free(c);
	}
	cm_id_free(cid);
	return 0;
}
