/* Channels carry sr_msg between two connected QPs (DESIGN.md, src/chan/).
 *
 * One small ops table per transport, like Valkey's ConnectionType:
 *   send  - queue one message towards the peer. May be called with the
 *           sending QP's lock held; never calls back into the core. Takes
 *           ownership of the message, also on error.
 *   ack   - optional: as send of a positive ACK for msn, without the
 *           message (the channel only notes that one is owed).
 *   send_small - optional: as send of a small SEND or WRITE (struct
 *           sr_small), without the message, written at once; -EAGAIN,
 *           with nothing done, when it cannot go that way now (the
 *           caller then builds the message and calls send).
 *   kick  - move queued messages. Called with no QP lock held; may deliver
 *           inbound messages to the core (qp_rx) in the caller's thread.
 *   idle  - optional: a kick now would do nothing (a look, no lock), so
 *           that a poster may skip it, and the reference it would take
 *           for it, while it still holds the QP lock (chan_kick_needed).
 *   close - the QP is going away or being reset: stop delivering to it
 *           and tell the peer. After close returns, the channel never
 *           touches that QP again. Drops the QP's reference.
 *   free  - the last reference is gone.
 * A channel notifies its QP of a lost peer with qp_chan_lost(). Whoever
 * uses a channel outside the QP lock holds a reference (chan_get/put).
 */
#ifndef SOFTRNIC_CHAN_H
#define SOFTRNIC_CHAN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>
#include "core/msg.h"

struct sr_context;
struct sr_cq;

struct sr_qp;
struct sr_chan;

/* A whole SEND or WRITE of at most SR_SMALL_MAX bytes (send_small). */
#define SR_SMALL_MAX 4096
struct sr_small {
	uint8_t op;			/* SR_MSG_SEND or SR_MSG_WRITE */
	uint32_t flags;			/* SR_MSGF_SE, _IMM, _INV (SEND) */
	uint32_t msn;
	uint32_t imm;			/* big-endian, as in sr_msg */
	uint32_t inv_stag;
	uint32_t stag;			/* WRITE */
	uint64_t to;
	const void *payload;		/* our own memory */
	uint32_t len;
	/* or, if niov, the application's memory, read fault-safely (a
	 * registered gather list, its keys checked) */
	const struct iovec *iov;
	int niov;
};

struct sr_chan_ops {
	const char *name;
	int (*send)(struct sr_chan *ch, struct sr_msg *m);
	int (*ack)(struct sr_chan *ch, uint32_t msn);
	int (*send_small)(struct sr_chan *ch, const struct sr_small *r);
	void (*kick)(struct sr_chan *ch);
	bool (*idle)(struct sr_chan *ch);
	void (*close)(struct sr_chan *ch);
	void (*free)(struct sr_chan *ch);
	/* The QP flushes its WQEs: their buffers are the program's again,
	 * and nothing of them may be read after this returns (a channel
	 * whose peer reads our memory: shm). Under qp->lock: no lock taken.
	 * NULL: nothing to do. */
	void (*revoke)(struct sr_chan *ch);
	/* Requests wait while the channel is still dialing its peer
	 * (dialing): give up within ns from now, failing the channel as a
	 * lost peer (qp_chan_lost), if nobody has answered the dial by then.
	 * Under qp->lock. NULL: a channel that never dials. */
	void (*await)(struct sr_chan *ch, uint64_t ns);
};

struct sr_chan {
	const struct sr_chan_ops *ops;
	struct sr_qp *qp;		/* the local end */
	bool acks;			/* peer answers SEND/WRITE with ACK */
	bool no_send_imm;		/* cannot carry SEND with immediate (RFC
					 * iWARP has none): such WQEs fail */
	bool rfc_only;			/* the peer speaks RFC 5040 RDMAP only
					 * (Linux siw): no RFC 7306 immediate
					 * data or atomics either; posting them
					 * fails with EOPNOTSUPP */
	bool zcopy;			/* takes payload by reference (msg->src) */
	/* still dialing a peer that has not answered (nobody listens
	 * there yet): the channel's own, read by the QP without its lock */
	_Atomic bool dialing;
	uint16_t max_reads;		/* the peer's IRD as the MPA exchange
					 * agreed: READ requests unanswered at
					 * once, at most (0: no limit) */
	atomic_int refs;
};

static inline int chan_send(struct sr_chan *ch, struct sr_msg *m) { return ch->ops->send(ch, m); }
static inline void chan_kick(struct sr_chan *ch) { ch->ops->kick(ch); }
/* Would a kick do anything? (Two locked instructions and a call a post
 * saved: 64-byte ib_send_bw on shm, docs/PERFORMANCE.md.) */
static inline bool chan_kick_needed(struct sr_chan *ch)
{
	return !ch->ops->idle || !ch->ops->idle(ch);
}
static inline void chan_close(struct sr_chan *ch) { ch->ops->close(ch); }
static inline void chan_revoke(struct sr_chan *ch)
{
	if (ch->ops->revoke)
		ch->ops->revoke(ch);
}
static inline void chan_get(struct sr_chan *ch) { atomic_fetch_add(&ch->refs, 1); }
static inline void chan_put(struct sr_chan *ch)
{
	if (atomic_fetch_sub(&ch->refs, 1) == 1)
		ch->ops->free(ch);
}

/* In-process channel: both QPs live in this process. Creates both ends
 * and attaches them to a and b (qp->chan). Caller holds neither QP lock. */
int chan_inproc_connect(struct sr_qp *a, struct sr_qp *b);

/* TCP channel (chan/tcp.c): QP connected by hand to a peer in another
 * process or on another host. Decides who dials from (QPN, GID), attaches
 * a channel to the QP at once (work posted meanwhile waits in it) and
 * brings the stream up in the background. Between two softrnic processes
 * of one host the stream's bytes then move to shared memory (chan/shm.h),
 * behind the same ops. Caller holds no QP lock. */
int chan_tcp_connect(struct sr_qp *qp);
/* A QP changed state: streams accepted for it may now be matched. */
void chan_tcp_qp_ready(struct sr_context *ctx);
/* Context teardown: the progress thread, listener and unmatched streams. */
void chan_tcp_ctx_close(struct sr_context *ctx);
/* The process exits (exit(3), the library's destructor) with QPs it did
 * not destroy: until deadline (CLOCK_MONOTONIC ns), let the progress
 * thread write what is queued and not yet in a socket or ring, and the
 * peers pull what our rings still name in our memory (tcp.c). */
void chan_tcp_exit_drain(struct sr_context *ctx, uint64_t deadline);
/* A program polled cq and found it empty: receive what waits on the
 * streams of QPs that complete into it, in the caller's thread, so a busy
 * poller does not wait for the progress thread to wake (DESIGN.md 5). */
void chan_tcp_poll(struct sr_context *ctx, struct sr_cq *cq);
/* A program armed cq for an event (it is about to sleep): the streams its
 * polling took over from the progress thread go back to it. */
void chan_tcp_unpoll(struct sr_context *ctx, struct sr_cq *cq);
/* A program thread is about to block in ibv_get_cq_event on chan, whose
 * event queue's descriptor is evfd (blocking, nothing queued): it sleeps
 * on the streams (rings or sockets) of the QPs that complete into chan's
 * CQs as well, and receives on them itself, until evfd is readable
 * (tcp_wait.c). 0, or -EINTR (a signal). */
struct ibv_comp_channel;
int chan_tcp_wait(struct sr_context *ctx, const struct ibv_comp_channel *chan, int evfd);
/* The CQ goes: drop the streams its polls kept (chan_tcp_poll). */
void chan_tcp_cq_forget(struct sr_cq *cq);
/* RDMA CM streams (chan/tcp_cm.c, DESIGN.md decision 9): librdmacm
 * connects a TCP socket and negotiates MPA itself, then hands the socket
 * to the QP. The stream starts UP with what MPA agreed; rx holds bytes
 * already read past the MPA frame (at most MPA_MAX_ULPDU). ended(arg,
 * orderly) is called at most once, from a progress or program thread,
 * when the stream ends other than by chan_tcp_cm_disconnect (the QP is
 * then in ERROR already); it must not call back into the channel. */
struct chan_cm_params {
	int fd;				/* connected; the channel owns it on success */
	bool crc, ext;
	bool plain;			/* the peer is not softrnic (chan->rfc_only) */
	bool responder;			/* sent the MPA reply (see tx_gate) */
	bool rtr_wait;			/* responder in peer-to-peer mode (RFC
					 * 6581 §3): hold until the initiator's
					 * RTR, with no time limit */
	uint16_t ird, ord;
	const uint8_t *rx;
	size_t rx_len;
	void (*ended)(void *arg, bool orderly);
	void *arg;
};
/* Attach to qp (which becomes CM-managed): returns the channel with a
 * reference for the caller in *out. Caller holds no QP lock. */
int chan_tcp_cm_attach(struct sr_qp *qp, const struct chan_cm_params *p, struct sr_chan **out);
/* rdma_disconnect: take in what arrived, send what is queued and a
 * goodbye, close; the QP goes to ERROR (flushing). No ended() call runs
 * or will run once this returns. Idempotent. */
void chan_tcp_cm_disconnect(struct sr_chan *ch);
/* Forget ended() (waiting out a running call) and drop the reference. */
void chan_tcp_cm_release(struct sr_chan *ch);

/* The context's progress engine (started on first use), for timers. */
struct sr_progress *chan_progress(struct sr_context *ctx);

#endif
