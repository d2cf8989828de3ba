/* Queue pairs: the IBTA state machine, the send queue (requester), the
 * receive side (responder) and completion generation. */
#ifndef SOFTRNIC_QP_H
#define SOFTRNIC_QP_H

#include "core/core.h"
#include "core/msg.h"
#include "chan/chan.h"
#include "progress/progress.h"

#include <stddef.h>
#include <sys/uio.h>

/* The destination QPN rdma_init_qp_attr(3) hands a program that moves
 * its own QP (rping -q): 0xFFFFFF is the IB multicast QPN, never an RC
 * peer's, so an RC/UC QP whose RTR names it is connected by the RDMA CM
 * and must not dial a peer by hand (DESIGN.md decision 9). */
#define SR_QPN_CM 0xffffffU

/* Private send flag: a BIND_MW WQE made by ibv_bind_mw (type 1). */
#define SR_SEND_BIND_TYPE1 (1U << 31)
/* Private send flag: an ATOMIC_WRITE WQE holding its 8 bytes in
 * compare_add (the WR API's value, or inline data copied at post). */
#define SR_SEND_AW_VALUE (1U << 30)
/* Send flags a program may not give (EINVAL at post): the private ones,
 * and IBV_SEND_IP_CSUM, whose offload the device does not report (no
 * IBV_DEVICE_RAW_IP_CSUM / IBV_DEVICE_UD_IP_CSUM). Other unknown bits
 * are ignored, as hardware providers do. */
#define SR_SEND_REFUSED (SR_SEND_BIND_TYPE1 | SR_SEND_AW_VALUE | IBV_SEND_IP_CSUM)

enum sr_swqe_state {
	SR_WQE_POSTED,		/* waiting to be transmitted */
	SR_WQE_SENT,		/* transmitted, waiting for the response */
	SR_WQE_DONE,		/* has its final status */
};

/* Receive WQEs a QP lends its channel at once (struct sr_qp lent_wr):
 * one SEND being placed and those of a receive pass (struct rx_out). */
#define SR_LENT_MAX 128

struct sr_swqe {
	uint64_t wr_id;
	uint32_t opcode;		/* enum ibv_wr_opcode */
	uint32_t flags;			/* enum ibv_send_flags */
	uint32_t num_sge;
	uint32_t imm;			/* imm_data (network order) */
	uint32_t inv_rkey;		/* SEND_WITH_INV, LOCAL_INV */
	uint32_t rkey;
	uint64_t remote_addr;
	uint64_t compare_add, swap;	/* ATOMIC_WRITE: compare_add = value */
	struct ibv_mw *mw;		/* BIND_MW */
	uint32_t bind_rkey;
	uint64_t length;		/* bytes the WQE moves */
	uint32_t msn_first;		/* first request msn it used */
	uint32_t msn;			/* last request msn it used */
	uint8_t state;			/* enum sr_swqe_state */
	uint8_t status;			/* enum ibv_wc_status once DONE */
	uint8_t *inl;			/* inline copy (IBV_SEND_INLINE) */
	uint64_t rd_got;		/* READ: response bytes landed */
	uint32_t ud_qpn, ud_qkey;
	uint32_t xrc_srqn;		/* XRC_SEND: the remote SRQ (remote_srqn) */
	/* Set only where they are used, not cleared at post (SWQE_CLEAR):
	 * BIND_MW's window, a UD QP's destination (copied from the AH) */
	struct ibv_mw_bind_info bind_info;
	struct sr_ud_av ud_av;
	struct ibv_sge sge[];		/* cap.max_send_sge entries */
};
/* What a post clears of a WQE: everything before bind_info (the rest is
 * written by the opcode or QP type that reads it). */
#define SWQE_CLEAR offsetof(struct sr_swqe, bind_info)

struct sr_qp {
	struct ibv_qp_ex ibqp;		/* ibv_qp is its prefix */
	struct sr_context *ctx;
	struct sr_pd *pd;
	struct sr_cq *scq, *rcq;
	struct sr_srq *srq;
	sr_mutex lock;			/* everything below */
	enum ibv_qp_state state;
	struct ibv_qp_attr attr;	/* as last modified, for query */
	struct ibv_qp_cap cap;
	bool sq_sig_all;
	uint64_t send_ops_flags;	/* ibv_qp_init_attr_ex, WR API */
	uint32_t slot;

	/* send queue: slots [head, tail) in use; [head, next) transmitted */
	uint8_t *sq_buf;		/* pd_buf_alloc (parent domain allocator) */
	bool sq_custom;
	uint32_t sq_stride, sq_size, sq_max_wr;
	uint32_t sq_head, sq_next, sq_tail;
	/* SQD entered with en_sqd_async_notify: IBV_EVENT_SQ_DRAINED is
	 * owed once every WQE begun before has completed (qp_sqd_check) */
	bool sqd_notify;
	/* IBV_EVENT_COMM_EST raised: a request came in while in RTR (once
	 * per connection; cleared by RESET) */
	bool comm_est;
	_Atomic uint32_t sq_reaped;	/* slots before it are free again */
	uint8_t *inl_buf;		/* sq_size * cap.max_inline_data */
	struct sr_lkey_span lspan;	/* gather's last lkey (sq.c; qp->lock) */
	struct sr_lkey_span rspan;	/* receive's last lkey (rx.c; qp->lock) */
	struct sr_lkey_span wspan;	/* remote WRITE's last rkey (rx.c; qp->lock) */
	uint32_t ssn;			/* next msn to assign */

	/* receive queue (unless srq) */
	struct sr_rq rq;

	/* responder: receive WQEs a channel took to place a SEND straight
	 * into (qp_place_send), not delivered yet, oldest first: their
	 * wr_ids, flushed ahead of the receive queue if the QP goes to ERROR
	 * first (else nothing would ever complete them: the message of a
	 * stream that died, or that comes after). lent_gen counts those
	 * flushes (and resets): a message lent before one is complete. */
	uint64_t lent_wr[SR_LENT_MAX];
	uint32_t lent_head, lent_tail, lent_gen;

	/* responder: inbound requests that wait for a receive WQE (RNR) */
	struct sr_list rx_pending;
	uint64_t rx_pending_bytes;
	uint32_t ud_held;		/* UD: datagrams held in rx_pending */
	uint32_t rx_expect_msn;
	uint32_t rx_last_write_len;	/* for IMM after WRITE (RFC 7306) */
	uint32_t rx_write_acc;		/* bytes of the WRITE being received */

	/* connection */
	bool cm;			/* connected by the RDMA CM (librdmacm):
					 * RTR starts no hand-connect */
	struct sr_chan *chan;
	atomic_int refs;
	bool dying;
	uint32_t async_given;		/* async events handed out */
	bool peer_gone;			/* qp_chan_gone(): no peer any more */
	/* qp_rx_many: positive ACKs of a batch are told to the channel once,
	 * for the last (they are cumulative), before anything else the batch
	 * sends (lock held) */
	bool rx_batch, rx_ack_held;
	uint32_t rx_ack_msn;
	/* ... and its receive completions go to the CQ together (one hold
	 * of its lock), at the batch's end or before any other completion
	 * of this QP's (qp_rx_wc_release) */
	struct sr_cq *rx_wc_cq;
	uint32_t rx_wc_n;
	bool rx_wc_se;
	struct ibv_wc rx_wc[16];

	/* RNR (IBTA 9.7.5.2.8): the responder parked our request msn for
	 * want of a receive WQE; with a finite rnr_retry the WQE fails
	 * with IBV_WC_RNR_RETRY_EXC_ERR when this timer fires first. */
	struct sr_timer rnr_timer;
	struct sr_timer gone_timer;	/* qp_chan_gone: retries run out */
	struct sr_timer dial_timer;	/* qp_undialed_arm_locked */
	uint64_t dial_fail_at;		/* requests posted before any stream
					 * attached fail then (progress_now_ns;
					 * 0: none armed) */
	struct sr_progress *rnr_pg;
	uint32_t rnr_msn;

	struct sr_raw_qp *raw;		/* IBV_QPT_RAW_PACKET (core/raw.h) */
	/* XRC (core/xrcd.c). An XRC_RECV QP has no PD, CQ or queues of its
	 * own: each request is received into the SRQ of its domain that the
	 * last XRC header (SR_MSG_XRC) named, under that SRQ's PD. */
	struct sr_xdom *xdom;		/* XRC_RECV: its domain */
	struct sr_list xlink;		/* ... in xdom->tgts */
	uint32_t rx_srqn;		/* XRC_RECV: named by the peer, 0 = none */
	struct sr_srq *rx_srq;		/* ... held while one request runs */
	struct sr_chan *xrc_tx_chan;	/* XRC_SEND: channel that was told ... */
	uint32_t xrc_tx_srqn;		/* ... this SRQ number last */
	/* ibv_open_qp(3): another handle on an XRC_RECV QP. A handle made
	 * by ibv_open_qp points at the QP it opens; the QP counts its
	 * handles (itself included) and goes with the last. */
	struct sr_qp *real;		/* opened handle: the QP; else NULL */
	int handles;			/* the QP: handles not yet destroyed */

	/* WR API (ibv_qp_ex) building state */
	uint32_t wr_begin;		/* sq_tail when wr_start was called */
	int wr_err;
	struct sr_swqe *wr_cur;
};

static inline struct sr_qp *to_qp(struct ibv_qp *q) { return (struct sr_qp *)q; }
/* The QP behind a handle (ibv_open_qp hands out more than one). */
static inline struct sr_qp *qp_real(struct sr_qp *qp) { return qp->real ? qp->real : qp; }
static inline enum ibv_qp_type qp_type(const struct sr_qp *qp) { return qp->ibqp.qp_base.qp_type; }
/* Connected, acknowledged transports: RC and the two halves of XRC. */
static inline bool qp_type_reliable(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV;
}
/* PD, SRQ and CQ a request is received with (rx.c): the QP's own, or for
 * an XRC_RECV QP those of the SRQ the request names (qp->rx_srq). */
static inline struct sr_pd *qp_rx_pd(struct sr_qp *qp)
{
	return qp->xdom ? qp->rx_srq->pd : qp->pd;
}
/* ... and the context whose keys that PD's MRs are in (a domain may
 * span the contexts of a process). */
static inline struct sr_context *qp_rx_ctx(struct sr_qp *qp)
{
	return qp->xdom ? to_ctx(qp->rx_srq->ibsrq.context) : qp->ctx;
}
/* May the channel move this QP's payloads straight between the socket and
 * resolved addresses (sendmsg from them, readv into them)? Not in a space
 * imported from another process: its regions' addresses are that
 * process's (sr_mref.xmr), so every copy is staged (decision 22). */
static inline bool qp_zcopy_ok(const struct sr_qp *qp)
{
	/* An XRC_RECV QP resolves keys in its SRQ's context (qp_rx_ctx). */
	return !qp->ctx->space->xpid &&
	       !(qp->xdom && qp->rx_srq && to_ctx(qp->rx_srq->ibsrq.context)->space->xpid);
}
static inline struct sr_swqe *sq_at(struct sr_qp *qp, uint32_t i)
{
	return (struct sr_swqe *)(qp->sq_buf + (size_t)(i & (qp->sq_size - 1)) * qp->sq_stride);
}

extern const char *const sr_qp_state_name[IBV_QPS_UNKNOWN + 1];

int qp_create(struct sr_context *ctx, struct ibv_qp_init_attr_ex *attr, struct sr_qp **out);
int qp_destroy(struct sr_qp *qp);
/* ibv_open_qp(3): a new handle on the XRC_RECV QP qpn of xrcd's domain. */
int qp_open(struct sr_context *ctx, struct ibv_qp_open_attr *attr, struct sr_qp **out);
/* ibv_destroy_qp on any handle: the QP goes with its last handle. */
int qp_destroy_handle(struct sr_qp *h);
int qp_modify(struct sr_qp *qp, struct ibv_qp_attr *attr, int mask);
int qp_query(struct sr_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
/* The IBTA attribute rules (IBTA Vol 1 §11.2.1, table of the kernel's
 * ib_modify_qp_is_ok): does this transition with this mask make sense? */
bool qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
		      enum ibv_qp_state next, int mask);

int qp_post_send(struct sr_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
/* In SQD with a drain notice owed and nothing begun left outstanding:
 * raise IBV_EVENT_SQ_DRAINED (once). Caller holds qp->lock. */
void qp_sqd_check_locked(struct sr_qp *qp);
int qp_post_recv(struct sr_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void qp_init_wr_ops(struct sr_qp *qp);

/* Called by channels. qp_rx: one inbound message; returns true if the QP
 * kept it (the channel must not free it). Takes the QP lock itself. */
bool qp_rx(struct sr_qp *qp, struct sr_msg *m);
/* The same for n messages in order, under one hold of the QP lock; frees
 * those the QP does not keep. ack (may be NULL): a positive cumulative
 * ACK for msn *ack, without its message, that came before them. */
void qp_rx_many(struct sr_qp *qp, struct sr_msg **m, int n, const uint32_t *ack);
/* The same for one message the caller lends (m may be NULL: the ACK
 * alone): m is the caller's, on its stack; if the QP keeps it (it waits
 * for a receive WQE), the QP keeps a copy of its own. */
void qp_rx_lent(struct sr_qp *qp, struct sr_msg *m, const uint32_t *ack);
/* The same for a SEND, its plain case in one pass (rx.c). */
void qp_rx_lent_send(struct sr_qp *qp, struct sr_msg *m, const uint32_t *ack);
void qp_chan_lost(struct sr_qp *qp);
/* The peer QP was destroyed or reset in an orderly way. As on IB, the QP
 * stays as it is (receives stay posted) until it next needs the peer:
 * then its head WQE fails with IBV_WC_RETRY_EXC_ERR. Work already in
 * flight fails at once. */
void qp_chan_gone(struct sr_qp *qp);
/* Send-queue progress: transmit what can go; caller holds qp->lock. */
void qp_sq_progress_locked(struct sr_qp *qp);
/* After unlocking: let the channel move what was queued. */
void qp_kick(struct sr_qp *qp);
/* qp_kick's halves, for a caller that holds qp->lock already: the
 * channel, referenced, if a kick would do anything (else NULL); then,
 * with the lock dropped, the kick and the reference's release (NULL:
 * nothing). */
static inline struct sr_chan *qp_kick_take_locked(struct sr_qp *qp)
{
	struct sr_chan *ch = qp->chan;

	if (!ch || !chan_kick_needed(ch))
		return NULL;
	chan_get(ch);
	return ch;
}

static inline void qp_kick_give(struct sr_chan *ch)
{
	if (ch) {
		chan_kick(ch);
		chan_put(ch);
	}
}
/* Enter ERROR: flush every WQE; caller holds qp->lock. */
void qp_to_error_locked(struct sr_qp *qp);
/* The receive completions a batch holds go to their CQ now (lock held). */
void qp_rx_wc_release(struct sr_qp *qp);
void qp_get(struct sr_qp *qp);
void qp_put(struct sr_qp *qp);



/* Internal to the core (sq.c / rx.c / wr.c). */
struct sr_swqe *sq_find_sent_locked(struct sr_qp *qp, uint32_t msn);
void sq_ack_upto_locked(struct sr_qp *qp, uint32_t msn);
void sq_settle_locked(struct sr_qp *qp, struct sr_swqe *w, enum ibv_wc_status st);
int sq_fill_locked(struct sr_qp *qp, const struct ibv_send_wr *wr);
void qp_rx_resume_locked(struct sr_qp *qp);
void qp_resume_parked(struct sr_qp **list, int n);
void qp_fail_retry_locked(struct sr_qp *qp);
void qp_gone_arm_locked(struct sr_qp *qp);
/* An RC or UC QP in RTS with requests posted and no stream attached yet
 * (the peer is to dial it, or its local peer to link): if none attaches
 * within their budget, RC's fail as IB's transport retries would, as
 * towards a peer QP that never reached RTR, and UC's complete unsent (as
 * sent and lost). */
void qp_undialed_arm_locked(struct sr_qp *qp);
/* A channel could not read the payload of request msn (a page unmapped
 * under a by-reference send): the WQE fails with IBV_WC_LOC_PROT_ERR. */
void qp_tx_fault(struct sr_qp *qp, uint32_t msn);
/* Requests up to msn that expect no answer (SR_MSGF_DONE_ON_TX) have been
 * written: their WQEs are complete. */
void qp_tx_written(struct sr_qp *qp, uint32_t msn);
void qp_rnr_arm_locked(struct sr_qp *qp, uint32_t msn, uint8_t timer);
/* Drop every parked request. Caller holds qp->lock. */
void qp_rx_pending_clear_locked(struct sr_qp *qp);
/* The receive WQEs lent to the channel (qp_place_send) and not delivered:
 * completed as flushed (complete), or forgotten (a reset), and every
 * message that would deliver one made stale. qp->lock held. */
void qp_rx_lent_flush_locked(struct sr_qp *qp, bool complete);
/* Requests parked for receive WQEs hold more than SR_RX_BACKLOG bytes: a
 * channel should stop reading from the peer until receives are posted
 * (back-pressure, so no peer can make us buffer without bound). */
#define SR_RX_BACKLOG (64U << 20)
bool qp_rx_congested(struct sr_qp *qp);
/* Can no completion come to this QP now: every send WQE completed, no
 * receive posted (nor an SRQ, nor XRC)? A hint, read without the QP
 * lock. */
bool qp_awaits_nothing(struct sr_qp *qp);

/* Direct placement for channels that receive into application memory.
 * qp_place_write: where a WRITE segment of len bytes at (stag, to) goes,
 * checked as rx_write checks it; -EAGAIN if the QP cannot place now (it
 * is not receiving, or earlier requests wait for receive WQEs): deliver
 * the segment as a message instead. qp_place_read: the same for the READ
 * whose request had this msn, at offset off of its scatter list; fills up
 * to max iovecs and references (release them with mr_release). */
int qp_place_write(struct sr_qp *qp, uint32_t stag, uint64_t to, uint32_t len,
		   struct sr_mref *ref);
/* A SEND about to arrive: takes the next receive WQE into r (room for
 * SR_MAX_SGE) and resolves its buffers. -EAGAIN: none now, deliver the
 * SEND as a message (it parks); -EFAULT: r was taken but a buffer is not
 * writable (complete it with SR_MSGF_PLACE_ERR). A WQE taken is lent:
 * *gen goes into the message (msg->lent_gen) that delivers it; should
 * the QP go to ERROR first, it is flushed then, and that message's
 * delivery completes nothing. */
int qp_place_send(struct sr_qp *qp, struct sr_rwqe *r, struct iovec *iov,
		  struct sr_mref *refs, int max, uint32_t *gen);
int qp_place_read(struct sr_qp *qp, uint32_t msn, uint64_t off, uint32_t len,
		  struct iovec *iov, struct sr_mref *refs, int max);

/* ---- UD QPs (core/ud.c) ---------------------------------------------------
 * A UD QP sends and receives datagrams through its context's UDP socket
 * (chan/udp.c); it has no channel. */
struct ud_hdr;
struct ud_grh_info;
/* Before a UD QP exists: its context's socket must. */
int ud_qp_create(struct sr_context *ctx);
/* Destroy: leave the multicast groups it joined (as uverbs does). */
void ud_qp_destroy(struct sr_qp *qp);
/* Post: the UD half of sq_fill (address, Q_Key, MTU). qp->lock held. */
int ud_sq_fill_locked(struct sr_qp *qp, struct sr_swqe *w, const struct ibv_send_wr *wr);
/* Transmit what is posted; caller holds qp->lock. */
void ud_sq_progress_locked(struct sr_qp *qp);

/* Why a datagram did not become a receive completion (the channel counts). */
enum ud_verdict {
	UD_DELIVERED,
	UD_DROP_STATE,		/* QP not in RTR/RTS/SQD/SQE, or not UD */
	UD_DROP_QKEY,		/* Q_Key mismatch (IBTA 10.2.5: silently) */
	UD_DROP_NO_WQE,		/* no receive posted, none held: UD has no RNR */
	UD_HELD,		/* no receive posted yet: held for one */
	UD_VERDICT_MAX,
};
/* One inbound datagram for qp; takes the QP lock itself. */
/* Receives were posted: complete held datagrams. qp->lock held. */
void ud_held_drain_locked(struct sr_qp *qp);
enum ud_verdict ud_deliver(struct sr_qp *qp, const struct ud_hdr *h, const uint8_t *payload,
			   const struct ud_grh_info *g);
#endif
