/* softrnic's librdmacm.so.1: the RDMA connection manager (DESIGN.md,
 * src/cm/). Files:
 *   cm_core.c    process state, event channels, events, ids, sync ids
 *   cm_addr.c    bind, address/route resolution, getaddrinfo, options
 *   cm_conn.c    the CM thread, listen, connect/accept/reject/disconnect
 *   cm_qp.c      rdma_create_qp(_ex), SRQs (XRC too), rdma_init_qp_attr, ECE
 *   cm_ep.c      rdma_create_ep / get_request / destroy_ep, migrate
 *   cm_ud.c      datagram ids (RDMA_PS_UDP/IPOIB): SIDR-like connect/accept
 *   cm_mcast.c   rdma_join_multicast(_ex), rdma_leave_multicast
 *   cm_stubs.c   rsocket: ENOSYS for now
 *   cm_mpa.c     pure helpers (frames, limits), unit-tested
 *   cm_sidr.c    the datagram exchange's frames, pure, unit-tested
 *
 * One mutex (cm.lock) guards every id, channel and event; it is never held
 * while calling into libibverbs for anything that can call back (stream
 * attach/disconnect, QP modify), because a stream's end is reported to us
 * from libibverbs' own threads (cm_stream_ended) and takes cm.lock.
 * Inside, functions return 0 or a negative errno; the rdma_* entry points
 * turn that into -1 and errno (cm_ret).
 */
#ifndef SOFTRNIC_CM_H
#define SOFTRNIC_CM_H

#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/util.h"
#include "cm/cm_mpa.h"
#include "verbs/softrnic_private.h"

/* How long a listener waits for a connection's MPA request, and an
 * active side for the connect plus the MPA reply (RFC 5044 §7.1 leaves
 * the timer to the implementation; Linux iw_cm/siw use 10 s for MPA). */
#define CM_MPA_TIMEOUT_MS	10000
#define CM_CONNECT_TIMEOUT_MS	30000
#define CM_MAX_DEPTH		128	/* SR_MAX_RD_ATOM */
/* The IB CM's time-wait after a disconnect, before TIMEWAIT_EXIT: a
 * packet lifetime or two on a real fabric; short, but not immediate, so
 * programs that destroy the id right after disconnecting never see it. */
#define CM_TIMEWAIT_MS		200
/* A refused TCP connect is retried for this long before REJECTED (8):
 * programs such as qperf tell the peer their port between rdma_bind_addr
 * and rdma_listen, a window an IB REQ crossing a fabric rarely hits but a
 * loopback SYN does. */
#define CM_REFUSED_RETRY_MS	500
#define CM_REDIAL_MS		20

enum cm_state {
	CM_IDLE,
	CM_BOUND,
	CM_ADDR_RESOLVED,
	CM_ROUTE_RESOLVED,
	CM_LISTEN,
	CM_DIALING,		/* active: TCP connect in progress */
	CM_REQ_SENT,		/* active: MPA request out, reading the reply */
	CM_REQ_READ,		/* passive: accepted, reading the MPA request */
	CM_CONNECT_REQ,		/* passive: CONNECT_REQUEST raised */
	CM_RESPONSE,		/* active, no QP: CONNECT_RESPONSE raised */
	CM_ATTACHING,		/* handing the socket to the QP */
	CM_CONNECTED,
	CM_DISCONNECTED,
	CM_FAILED,		/* rejected, refused, unreachable */
	CM_DEAD,		/* being destroyed */
};

struct cm_channel {
	struct rdma_event_channel ch;	/* fd: the application's end */
	int wfd;			/* ours: one byte iff events are queued */
	struct sr_list events;		/* struct cm_event, queued */
	bool sync;			/* the private channel of a sync id */
	/* Threads inside rdma_get_cm_event: a channel destroyed under them
	 * (rping's CM thread at exit) is freed by the last one to leave. */
	int waiters;
	bool dead;
};

struct cm_id;

struct cm_event {
	struct rdma_cm_event ev;
	struct sr_list link;
	struct cm_id *owner;		/* counts it (the listener for a request) */
	struct cm_id *child;		/* CONNECT_REQUEST: the new id */
	uint8_t pd[MPA_MAX_PD];
};

struct cm_id {
	struct rdma_cm_id id;
	struct sr_list link;		/* cm.ids */
	enum cm_state state;
	bool sync;			/* created with a NULL channel */
	bool visible;			/* handed to the application */
	bool busy;			/* a call is using it outside cm.lock */
	uint64_t serial;		/* epoll handle (stale ones are ignored) */
	uint32_t events_reported, events_completed;

	int fd;				/* the TCP (or UDP) socket, until attached */
	bool bound;
	/* rdma_set_option */
	int tos;			/* -1: not set */
	bool reuseaddr;
	int afonly;			/* -1: not set */
	uint8_t ack_timeout;
	bool has_pd_ref;		/* holds a reference on the default PD */
	struct ibv_sa_path_rec path;

	/* connection */
	struct cm_id *listener;		/* passive: where it came from */
	uint64_t deadline_ms;		/* MPA/connect timer, 0 = none */
	uint64_t timewait_ms;		/* TIMEWAIT_EXIT due, 0 = none */
	uint64_t redial_ms;		/* dial again then (refused), 0 = none */
	uint64_t refused_until;		/* keep redialing a refusal until then */
	uint8_t hs[CM_MPA_FRAME_MAX + 1];	/* frame being read or written */
	size_t hs_len;
	uint16_t ird, ord;		/* ours (responder_resources, initiator_depth) */
	uint16_t peer_ird, peer_ord;
	bool crc, ext;			/* as negotiated */
	uint8_t peer_rev;		/* the MPA request's revision (1 or 2) */
	uint8_t rtr;			/* peer-to-peer: the RTR type our reply
					 * picks (enum mpa_rtr_flags), 0: none */
	bool plain;			/* the peer is not softrnic (it did not
					 * answer our softrnic flag): RFC iWARP
					 * only, say Linux siw */
	uint32_t qpn;			/* the QP the stream goes to */
	struct softrnic_stream *stream;
	bool ended_early;		/* the stream ended while ATTACHING */
	bool disc_called;		/* rdma_disconnect was called */
	bool timewait_sent;
	struct ibv_ece local_ece, remote_ece;
	struct rdma_conn_param resp;	/* CONNECT_RESPONSE kept for establish */

	/* rdma_create_ep */
	struct ibv_qp_init_attr *ep_qp_attr;	/* passive: for get_request */
	struct ibv_pd *ep_pd;
	uint8_t ep_connect[MPA_MAX_PD];
	size_t ep_connect_len;
	/* id->srq is an XRC SRQ completing into id->recv_cq, which the CM
	 * made or gave it: the id's CQs outlive its QP until
	 * rdma_destroy_srq (cm_qp.c) */
	bool srq_cq;

	/* datagram ids (cm_ud.c, cm_mcast.c) */
	uint32_t sidr_tid;		/* the request's transaction id */
	uint32_t peer_qpn, peer_qkey;	/* from the request / reply */
	int sidr_tries;			/* requests sent so far */
	struct cm_mc *mcs;		/* joined groups */
};

static inline struct cm_id *to_cm(struct rdma_cm_id *id)
{
	return container_of(id, struct cm_id, id);
}

struct cm_state_all {
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* events acked, calls done */
	struct sr_list ids;
	uint64_t next_serial;
	/* the CM thread */
	int epfd, wakefd;
	pthread_t thread;
	bool thread_started;
	/* the device: one context and one default PD for the process */
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	int pd_refs;
	/* rdma-core's per-device XRC domain (ucma_get_xrcd): opened on first
	 * use, closed with the default PD (cm_xrcd_get) */
	struct ibv_xrcd *xrcd;
	bool iwarp;
};

extern struct cm_state_all cm;

static inline int cm_ret(int ret)
{
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}

uint64_t cm_now_ms(void);
int cm_init(void);
bool cm_want_ext(void);
bool cm_want_crc(void);

/* cm_core.c; _locked: caller holds cm.lock */
int cm_event_push_locked(struct cm_id *id, int type, int status,
			 const struct rdma_conn_param *conn, const void *pd, size_t pd_len);
int cm_push_request_locked(struct cm_id *listener, struct cm_id *child,
			   const void *pd, size_t pd_len);
struct cm_id *cm_id_new_locked(struct cm_channel *ch, void *context,
			       enum rdma_port_space ps, enum ibv_qp_type qpt);
void cm_id_free(struct cm_id *cid);
/* rdma-core's rdma_create_id2: an id whose QP type is qpt, whatever ps
 * would give (rdma_create_ep takes it from res->ai_qp_type). */
int cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		 enum rdma_port_space ps, enum ibv_qp_type qpt);
/* Wait for the event a sync id's call produces (ucma_complete). sync:
 * cid->sync as the caller read it under cm.lock, before the event it
 * pushed was visible: an async id may be destroyed by another thread as
 * soon as that event is, so cm_complete must not look at it then. */
int cm_complete(struct cm_id *cid, bool sync);
struct cm_channel *cm_channel_new(bool sync);
void cm_channel_free(struct cm_channel *c);
void cm_pd_get_locked(struct cm_id *cid);
void cm_pd_put_locked(struct cm_id *cid);
/* The device's XRC domain, opened (fd -1, O_CREAT) on first use; for the
 * XRC_RECV QPs and XRC SRQs the CM makes without one. Takes cm.lock. */
int cm_xrcd_get(struct ibv_xrcd **out);
/* Wait until no call is using the id outside the lock, then take it. */
void cm_busy_take_locked(struct cm_id *cid);
void cm_busy_drop_locked(struct cm_id *cid);

/* cm_addr.c */
int cm_bind(struct cm_id *cid, const struct sockaddr *addr);
bool cm_addr_any(const struct sockaddr *sa);
bool cm_addr_multicast(const struct sockaddr *sa);
socklen_t cm_addr_len(const struct sockaddr *sa);
void cm_fill_gid(union ibv_gid *gid, const struct sockaddr *sa);
void cm_set_device_locked(struct cm_id *cid);

/* cm_conn.c */
int cm_thread_watch_locked(struct cm_id *cid, uint32_t events);
void cm_thread_unwatch_locked(struct cm_id *cid);
void cm_thread_wake(void);
void cm_stream_ended(void *arg, bool orderly);

/* cm_core.c: a datagram event (param.ud). With child, a CONNECT_REQUEST
 * for owner (the listener). Private data is copied; with pd_len 0,
 * ud->private_data is passed as it is (the multicast join context). */
int cm_event_push_ud_locked(struct cm_id *owner, struct cm_id *child, int type, int status,
			    const struct rdma_ud_param *ud, const void *pd, size_t pd_len);

/* cm_addr.c */
int cm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src);

/* cm_ud.c: called by cm_conn.c for ids whose qp_type is UD */
int cm_ud_listen_locked(struct cm_id *cid);
int cm_ud_connect(struct cm_id *c, const struct rdma_conn_param *p);
int cm_ud_accept(struct cm_id *c, const struct rdma_conn_param *p);
int cm_ud_reject(struct cm_id *c, const void *pd, uint8_t pd_len);
void cm_ud_on_listen_locked(struct cm_id *l);
void cm_ud_on_reply_locked(struct cm_id *c);
/* The request's resend timer (c->deadline_ms) expired. */
void cm_ud_on_timer_locked(struct cm_id *c, uint64_t now);
/* An AH to the id's peer (dgid) from the id's source GID. */
void cm_ud_ah_attr(struct cm_id *c, const union ibv_gid *dgid, struct ibv_ah_attr *ah);

/* cm_mcast.c: rdma_destroy_id leaves every group first. */
void cm_mcast_leave_all(struct cm_id *cid);

/* cm_qp.c */
int cm_qp_to_rts(struct cm_id *cid, struct ibv_qp *qp);
int cm_qp_attr(struct cm_id *cid, struct ibv_qp_attr *a, int *mask);

#endif
