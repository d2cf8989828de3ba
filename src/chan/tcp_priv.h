/* Private to the TCP channel (tcp.c: setup and lifetime, tcp_tx.c,
 * tcp_rx.c, tcp_direct.c). See tcp.c for the design. */
#ifndef SOFTRNIC_TCP_PRIV_H
#define SOFTRNIC_TCP_PRIV_H

#include "chan/chan.h"
#include "chan/shm.h"
#include "core/qp.h"
#include "progress/progress.h"
#include "wire/iwarp.h"
#include "wire/srext.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define TX_SLOTS	16
#define RX_BUF		(2 * (MPA_MAX_ULPDU + 64))
#define SR_SINK_STAG	0x5352534bU	/* our READ sink tag: responses are
					 * matched by order, placed by offset */
#define HS_TIMEOUT_NS	(60ULL * 1000000000ULL)
#define RETRY_NS	(50ULL * 1000000ULL)
/* A program thread that received on a stream (polling an empty CQ) within
 * POLL_WINDOW_NS owns its receive side: the progress thread stops
 * watching the socket for input and looks again every POLL_CHECK_NS. */
#define POLL_WINDOW_NS	(500ULL * 1000ULL)
#define POLL_CHECK_NS	(1000ULL * 1000ULL)
/* ... every POLL_QUIET_NS instead on a ring still polled with nothing
 * owed (tcp.c, tcp_on_timer): there a stopped poller's input is the
 * peer's to notice (it kicks, shm.h SHM_KICK_NS), and each look wakes a
 * progress thread that takes a busy poller's CPU. */
#define POLL_QUIET_NS	(4ULL * 1000ULL * 1000ULL)
/* A progress thread's receive pass that has run POLL_YIELD_ROUNDS rounds
 * on a ring whose program thread polled within POLL_RECENT_NS leaves the
 * ring to it (tcp_spin.c, leave_to_poller_locked). */
#define POLL_RECENT_NS	(20ULL * 1000ULL * 1000ULL)
#define POLL_YIELD_ROUNDS	16
/* How long an MPA responder waits for the initiator to speak first. */
#define TX_GATE_NS	(50ULL * 1000000ULL)
/* How long an MPA initiator holds its first FPDU towards a plain iWARP
 * responder, unless the responder speaks first (tcp_cm.c: Linux siw). */
#define INIT_GATE_NS	(20ULL * 1000000ULL)
/* How long after the last bytes from a plain iWARP peer our FIN waits
 * (tcp_drain_locked: Linux siw fails a SEND it already sent when our FIN
 * overtakes its send path). */
#define FIN_GRACE_NS	(20ULL * 1000000ULL)
/* How long an shm offerer holds its requests for the peer's ACCEPT or
 * REFUSE (shm.c): they then go into the ring, not on TCP. */
#define SHM_HOLD_NS	(100ULL * 1000000ULL)

enum tcp_state {
	TS_DIALING,		/* connect() in progress */
	TS_REQ_SENT,		/* MPA request sent, waiting for the reply */
	TS_ACCEPTED,		/* accepted, waiting for the MPA request */
	TS_HELD,		/* request read; our QP is not ready yet */
	TS_UP,
	TS_DEAD,
};

struct sr_tcp_ctx {
	pthread_mutex_t lock;
	struct sr_context *ctx;
	struct sr_progress *pg;
	struct sr_pollable lpl;		/* the context's listener */
	struct sr_list streams;		/* every live tcp_chan */
	/* Moves on every change a CQ's poll cache depends on: a stream
	 * listed or unlisted, its state, closed (chan_tcp_poll). */
	atomic_uint gen;
	/* shm.c: the context's descriptor server, for a peer that may not
	 * take our shm descriptors with pidfd_getfd (another user namespace:
	 * `softrnic run` unprivileged): an abstract Unix socket, made at the
	 * first offer, that hands an offered link's memfd and eventfds to
	 * whoever names its token (and is checked at ACCEPT). */
	pthread_mutex_t offers_lock;
	struct sr_list offers;		/* shm links offered, not yet answered */
	struct sr_pollable fdsrv;	/* fd -1: none yet */
	uint64_t fdsrv_name;		/* random: "\0softrnic-shm-%016llx" */
	bool fdsrv_failed;
	/* shm.c: a pidfd for each peer process, shared by all our links to
	 * it (shm_pidfd_open): a descriptor per peer, not per QP. */
	pthread_mutex_t pidfd_lock;
	struct shm_pidfd *pidfds;
	unsigned int npidfds;
};

struct tx_fpdu {
	uint8_t hdr[MPA_ULPDU_LEN_SIZE + DDP_HDR_MAX + RDMAP_ATOMIC_REQ_LEN];
	uint8_t trl[MPA_TRAILER_MAX];
	struct iovec iov[2 + SR_MSG_SRC_MAX];
	int niov;
	struct sr_msg *msg;		/* the message it is part of */
	struct sr_msg *done;		/* free once this FPDU is written */
	bool sw;			/* our last FPDU on TCP (shm.h) */
};

/* What an inbound READ or atomic request needs for its response. */
struct rsp_ctx {
	uint32_t msn;
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t req_id;
};

/* A tagged segment whose payload is being received straight into the
 * application's memory (tcp_direct.c). */
struct rx_direct {
	bool active, failed;
	struct sr_msg *msg;		/* delivered when the segment is in */
	bool send_seg;			/* a segment of tc->sd (no own refs) */
	bool send_last;
	struct iovec iov[SR_MAX_SGE];	/* where the rest goes */
	int niov;
	struct sr_mref refs[SR_MAX_SGE];
	int nrefs;
	size_t remaining;		/* payload bytes still in the socket */
	size_t trailer;			/* pad + CRC bytes after them */
};

/* A SEND whose receive WQE was taken at its first segment: each segment
 * is placed at its MO in that WQE's buffers (tcp_direct.c). */
struct rx_send {
	bool active, failed, too_long;
	struct sr_msg *msg;		/* delivered at the last segment */
	struct iovec iov[SR_MAX_SGE];	/* the receive buffers, whole */
	struct sr_mref refs[SR_MAX_SGE];
	int n;
	uint64_t cap, got;
};

struct tcp_chan {
	struct sr_chan ch;
	struct sr_tcp_ctx *tctx;
	struct sr_list link;		/* tctx->streams */
	struct sr_pollable pl;
	struct sr_timer timer;
	/* Receive state is used by one thread at a time: the progress
	 * thread, or a program thread polling an empty CQ (rx_lock). */
	sr_mutex rx_lock;
	sr_mutex lock;			/* everything below */
	enum tcp_state state;
	bool closed;			/* detached from its QP */
	/* tcp_shut has begun (set once, under lock); shut_done when it has
	 * taken the socket out and closed it. Two threads shut a stream
	 * at once (the program's disconnect, the progress thread seeing the
	 * peer's FIN): only the first closes the descriptor. A second
	 * close() would hit whatever the number was given to meanwhile (a
	 * dlopen's file in another thread: pthread_exit then aborts with
	 * "libgcc_s.so.1 must be installed"). */
	bool shut;
	_Atomic bool shut_done;
	bool dialer, crc, ext;
	bool peer_bye;			/* the peer said goodbye before closing */
	bool rx_paused;			/* back-pressure: the QP's backlog is full */
	/* A program thread is busy-polling a CQ of this QP and receives on
	 * the stream itself: the progress thread does not watch for input
	 * (no wakeup, no lock contention per message) and the ACK owed for
	 * what the poller took in may wait for the program's next post or
	 * poll, so it rides along with the reply (tcp_rx.c). */
	bool poll_owned;
	/* The receive pass the progress thread runs now was kicked
	 * (shm_kicked) on a poll-owned stream: its program thread may be
	 * watching memory for what the pass places, and will post a reply
	 * at once; a lone ACK the pass owes then waits a moment for it
	 * (tc->lock). */
	bool rx_kicked;
	/* A program thread waiting in ibv_get_cq_event sleeps on our
	 * eventfd or socket for input, not the progress thread
	 * (tcp_wait.c). tc->lock. */
	bool rx_waiter;
	_Atomic uint64_t rx_poll_ns;	/* when a program thread last received */
	_Atomic unsigned int polls;	/* polls of it, for stamping 1 in 64 */
	/* when a poller of the stream's own CQs last stamped rx_poll_ns
	 * (a poller of another CQ serves the stream only without one) */
	_Atomic uint64_t own_poll_ns;
	/* The pass under way is a poller's of another CQ (rx_lock): the
	 * program does not poll for what it delivers, so no ACK waits for
	 * the program's reply. */
	bool rx_foreign;
	/* A pass placed payload bytes straight into their target (a
	 * large SEND, WRITE or READ response: microseconds a pass): a
	 * poller's pass then stamps rx_poll_ns itself, as 64 such polls
	 * can outlast POLL_WINDOW_NS (rx_lock). */
	bool rx_placed;
	/* Nothing to write and nothing owed (no ACK pending, queue and slots
	 * empty, no faults to report, not paused): set under tc->lock where
	 * a flush found it so, cleared under it wherever work is queued. A
	 * poller on a ring with nothing in it returns at once, without a
	 * lock, while this holds (tcp_rx_poll). */
	_Atomic bool tx_idle;
	/* The last post was held (tx_hold) and nothing else waits for a
	 * kick: the kick that follows it has nothing to do. Set by tcp_send,
	 * cleared with tx_idle and by every flush. */
	_Atomic bool tx_held;
	/* After the last receive pass on shm: the ring position it read up
	 * to, or 1 (odd) if it left anything behind (bytes staged, a segment
	 * or record half read) or the stream is not on shm. A poller whose
	 * ring tail still equals it, with tx_idle, has nothing to do and
	 * takes no lock of the stream (chan_tcp_poll). */
	_Atomic uint64_t rx_mark;
	/* requests sent but not yet answered (ACK, READ/atomic response):
	 * while some are, a post does not write at once; the answer's arrival
	 * flushes everything posted meanwhile in one write */
	uint32_t tx_req_msn, rx_ans_msn;
	bool tx_any;
	bool tx_urgent;			/* an answer is queued: never hold it */
	bool rc;			/* the QP is RC: requests get answers */
	bool tx_gate;			/* towards a plain iWARP peer: nothing
					 * goes out until the peer's first
					 * bytes arrive, or TX_GATE_NS (an MPA
					 * responder) or INIT_GATE_NS (an
					 * initiator) has passed (tcp_cm.c) */
	bool tx_gate_init;		/* that gate is an initiator's: a
					 * disconnect opens it */
	bool tx_gate_rtr;		/* that gate waits for a peer-to-peer
					 * initiator's RTR: no time limit */
	_Atomic uint64_t rx_last_ns;	/* when bytes last came in (plain iWARP
					 * peers only: see FIN_GRACE_NS) */
	/* requests whose payload could not be read (SR_MSGF_TX_FAULT), for
	 * the QP, told after the channel lock is dropped */
	uint32_t faults[16];
	int nfaults;
	/* the last request written that expected no answer (DONE_ON_TX) */
	bool tx_written;
	uint32_t tx_written_msn;
	uint32_t events;		/* epoll events registered */
	/* A stream the RDMA CM negotiated (tcp_cm.c): when it ends for any
	 * reason but the CM's own disconnect, the QP goes to ERROR and
	 * cm_ended (if still set) is called once, from the thread that saw
	 * the end; cm_busy while it runs. */
	bool cm, cm_busy;
	void (*cm_ended)(void *arg, bool orderly);
	void *cm_arg;
	struct sr_qp *qp;
	uint32_t local_qpn, peer_qpn;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	uint64_t deadline;
	uint16_t ird, ord;

	/* handshake bytes still to write */
	uint8_t hs[MPA_FRAME_HDR_LEN + MPA_RTR_LEN + SR_HELLO_LEN];
	size_t hs_len, hs_off;
	bool fail_after_hs;		/* a reject: close once written */

	/* transmit */
	struct sr_list txq;
	struct sr_msg *cur;
	uint32_t cur_off;
	struct tx_fpdu slot[TX_SLOTS];
	uint32_t slot_head, slot_tail;
	uint32_t tx_msn[DDP_QN_COUNT];
	bool ack_pending;
	uint32_t ack_msn;
	uint32_t *rd_out;		/* msns of our READs awaiting responses */
	uint32_t rd_out_head, rd_out_tail, rd_out_size;
	struct rsp_ctx *rsp;		/* inbound READs/atomics to answer */
	uint32_t rsp_head, rsp_tail, rsp_size;

	/* receive */
	uint8_t *rbuf;
	size_t rlen;
	uint32_t rx_msn[DDP_QN_COUNT];
	uint32_t rx_req_msn;
	struct sr_msg *as_untagged;	/* SEND being assembled */
	bool as_active;			/* a tagged message is in progress: */
	uint8_t as_op;			/* ... WRITE or READ_RESP */
	uint32_t as_stag;
	uint64_t as_to;			/* where its next segment must go */
	struct rx_direct dr;		/* segment being placed directly */
	struct rx_send sd;		/* SEND being placed directly */
	bool rx_poller;			/* a poller's pass (rx_lock) */
	bool rx_nosleep;		/* a pass that asks for no wakeup:
					 * the progress thread watches the
					 * ring after it (rx_lock) */
	bool rx_onesided;		/* ... and it took a READ, an atomic
					 * or a WRITE in (rx_lock), */
	bool rx_twosided;		/* ... or a SEND or an immediate */
	bool rx_ans_new;		/* answers came in this pass, up to */
	uint32_t rx_ans_got;		/* ... this request (for rx_ans_msn) */

	/* The same-host channel (shm.c): the rings, once offered or
	 * accepted; each direction moves at one point of its stream. */
	struct shm_link *shm;
	bool shm_tx;			/* we write to the ring (tc->lock) */
	bool shm_sw_pending;		/* the switch FPDU is not written yet */
	bool shm_rx;			/* we read from the ring (set under both
					 * locks: either one reads it) */
	bool shm_pull_ok;		/* the peer pulls our large payloads */
	bool shm_map_ok;		/* ... or maps them, if in a memfd we
					 * send it on the side channel */
	/* We offered and the answer is not in yet: until then (CLOCK_
	 * MONOTONIC ns; 0: no hold), our requests wait in txq, so that what
	 * is posted right after connecting goes into the ring; answers and
	 * the control messages do not wait (tcp_flush_locked). tc->lock. */
	uint64_t shm_hold_until;
	/* Our ring's polling stopped (shm_polled_locked): the next sleep on
	 * it arms a look at the ring at shm_grace_at (CLOCK_MONOTONIC ns; 0:
	 * none due), for a record the writer's unfenced look at rx_sleep
	 * overtook (shm.c, wake_if). shm_grace_at: tc->lock. */
	_Atomic bool shm_grace_due;
	uint64_t shm_grace_at;
	_Atomic bool shm_eof;		/* the socket ended: drain, then end */
	/* our tx ring's revoked word, once we write to the ring (shm_revoke) */
	_Atomic uint32_t *_Atomic shm_revoke;
	struct sr_pollable epl;		/* our eventfd */
};

/* Work was queued (or may be owed): an empty poll must take the slow
 * path. tc->lock held. */
static inline void tx_busy_locked(struct tcp_chan *tc)
{
	atomic_store_explicit(&tc->tx_idle, false, memory_order_relaxed);
	atomic_store_explicit(&tc->tx_held, false, memory_order_relaxed);
}

static inline struct tcp_chan *to_tc(struct sr_chan *ch)
{
	return container_of(ch, struct tcp_chan, ch);
}

#define FIFO_PUSH(tc, f, v) \
	fifo_push((uint32_t **)&(tc)->f, &(tc)->f##_head, &(tc)->f##_tail, &(tc)->f##_size, \
		  sizeof(*(tc)->f), (v))
#define FIFO_EMPTY(tc, f) ((tc)->f##_head == (tc)->f##_tail)
#define FIFO_FRONT(tc, f) (&(tc)->f[(tc)->f##_head & ((tc)->f##_size - 1)])
#define FIFO_POP(tc, f) ((tc)->f##_head++)

bool fifo_push(uint32_t **buf, uint32_t *head, uint32_t *tail, uint32_t *size,
	       size_t elem, const void *v);
void set_state(struct tcp_chan *tc, enum tcp_state s);
void want(struct tcp_chan *tc, uint32_t events);
/* The program's poller owns the stream (or no longer); on shm the ring's
 * writer hears of it. tc->lock held. */
void poll_own_locked(struct tcp_chan *tc, bool own);
void poll_claim_locked(struct tcp_chan *tc);
/* TCP: nobody will poll for what comes next on this stream (a lone ACK
 * completed all its QP awaited, or a WRITE is half in): the progress
 * thread watches the socket again. tc->lock held. */
void poll_release_locked(struct tcp_chan *tc);
/* Is a WRITE partly placed, the rest to come? rx_lock held (tcp_direct.c). */
bool rx_write_under_way(const struct tcp_chan *tc);
/* Is more input here now (staged, a placement under way, a record in the
 * ring)? rx_lock held (tcp_direct.c). */
bool rx_more_now(struct tcp_chan *tc);
/* The only way to arm tc->timer: not once the stream is DEAD (tcp_shut).
 * Caller holds tc->lock. */
void tcp_timer_arm_locked(struct tcp_chan *tc, uint64_t delay_ns);
void tcp_fail(struct tcp_chan *tc, const char *why);

/* tcp_setup.c: streams of QPs connected by hand, until they are UP */
void tcp_accept(struct sr_pollable *p, uint32_t events);	/* the listener */
void tcp_setup_event_locked(struct tcp_chan *tc, uint32_t events);
void tcp_setup_timer_locked(struct tcp_chan *tc);
/* The input interest the stream should have now: EPOLLIN, or while it
 * does not read (back-pressure, a poller owns it, a program thread
 * waiting for an event reads it: tcp_wait.c) EPOLLRDHUP, so that a peer
 * that closes is still noticed. */
static inline uint32_t rx_events(const struct tcp_chan *tc)
{
	/* (once the peer writes to the ring, the socket only says when it
	 * ends) */
	return tc->rx_paused || tc->poll_owned || tc->shm_rx || tc->rx_waiter ? EPOLLRDHUP : EPOLLIN;
}
/* Has a program thread received on this stream lately (DESIGN.md 5)? */
static inline bool poller_active(const struct tcp_chan *tc)
{
	uint64_t last = atomic_load_explicit(&tc->rx_poll_ns, memory_order_relaxed);

	return last && progress_now_ns() - last < POLL_WINDOW_NS;
}
/* The eventfd of a stream on shm (tcp.c): data or room in a ring. */
void tcp_shm_event(struct sr_pollable *p, uint32_t events);

struct sr_tcp_ctx *tcp_ctx_get(struct sr_context *ctx);
/* A new stream on fd (-1: none yet), listed in t->streams (one ref). */
struct tcp_chan *tcp_chan_new(struct sr_tcp_ctx *t, int fd);
/* Stop all I/O and close the socket; caller holds no channel lock. */
void tcp_shut(struct tcp_chan *tc);
/* Drop the stream list's reference (once). */
void tcp_unlist(struct tcp_chan *tc);
/* Write what is queued (at most a second), then FIN. tc->lock held. */
void tcp_drain_locked(struct tcp_chan *tc);
void tune_socket(int fd, const struct sr_qp *qp);

/* tcp_cm.c: a CM stream ended (tcp_fail, no lock held, qp referenced). */
void tcp_cm_ended(struct tcp_chan *tc, struct sr_qp *qp, bool orderly);

/* tcp_tx.c: caller holds tc->lock for the _locked ones */
int tcp_send(struct sr_chan *ch, struct sr_msg *m);
int tcp_ack(struct sr_chan *ch, uint32_t msn);
int tcp_send_small(struct sr_chan *ch, const struct sr_small *r);
void tcp_kick(struct sr_chan *ch);
bool tcp_idle(struct sr_chan *ch);
/* Flush now, whatever is in flight (the receive path, after answers). */
void tcp_kick_now(struct tcp_chan *tc);
void tcp_tx_faults(struct tcp_chan *tc);
void tcp_flush_locked(struct tcp_chan *tc);
/* The stream's timer fired (tcp_on_timer): end an shm hold that is due
 * and flush, or arm the timer again for it. */
void tcp_hold_timer_locked(struct tcp_chan *tc);
void ack_flush_locked(struct tcp_chan *tc);
/* The pieces of src that hold payload bytes [off, off + len), into out
 * (at most src->n). Returns how many. */
int tx_src_iov(const struct sr_msg_src *src, uint64_t off, uint64_t len, struct iovec *out);
/* The same over a plain vector (in: nin pieces): the pieces of
 * [off, off + len), into out (at most nin). */
int iov_slice(const struct iovec *in, int nin, uint64_t off, uint64_t len, struct iovec *out);
int status_of_term(const struct rdmap_term *t);
struct rsp_ctx *rsp_take(struct tcp_chan *tc, uint32_t msn);

/* What one receive pass hands to the core (tcp_rx.c). */
struct rx_out {
	struct sr_msg *m[64];
	int n;
	/* A positive cumulative ACK (the commonest answer) that came before
	 * any other answer in this batch: taken as its msn alone, without a
	 * message, and applied before m[] (answers stay in order among
	 * themselves; requests are independent of them). */
	bool ack;
	uint32_t ack_msn;
	bool answers;			/* m[] holds an answer: ACKs after it
					 * go as messages, in order */
};

static inline void out_add(struct rx_out *out, struct sr_msg *m)
{
	if (m->op == SR_MSG_ACK || m->op == SR_MSG_RNR || m->op == SR_MSG_READ_RESP ||
	    m->op == SR_MSG_ATOMIC_RESP || m->op == SR_MSG_TERMINATE)
		out->answers = true;
	out->m[out->n++] = m;
}

/* tcp_rx.c, for tcp_direct.c: read from the stream (socket or ring) into
 * our buffer, or (io_readv) into application memory; the core message
 * for a tagged segment; a SEND's flags from its header; an answer to
 * request msn came in. */
ssize_t io_recv(struct tcp_chan *tc, void *buf, size_t len);
ssize_t io_readv(struct tcp_chan *tc, const struct iovec *iov, int n);
struct sr_msg *tagged_msg(struct tcp_chan *tc, const struct ddp_hdr *h, uint32_t seglen,
			  uint32_t len);
void send_flags(struct sr_msg *m, const struct ddp_hdr *h);
void note_answer(struct tcp_chan *tc, uint32_t msn);
/* tcp_rx.c: the answers noted this pass go to the transmit side (both
 * locks held); is nothing but a positive ACK owed (tc->lock held)? */
void ans_apply_locked(struct tcp_chan *tc);
bool only_ack_owed(const struct tcp_chan *tc);
/* tcp.c: say goodbye (best effort, never blocking): the ACK owed, then
 * the goodbye, queued and the stream made busy; the peer then knows this
 * was an orderly end, not a crash (its QP stays in RTS, as when a peer
 * QP is destroyed on IB). tc->lock held, stream up. */
void bye_queue_locked(struct tcp_chan *tc);
/* tcp_rx.c: a positive cumulative ACK for msn that comes ahead of any
 * other answer in out: kept as its msn (the latest covers the others). */
void ack_fold(struct tcp_chan *tc, struct rx_out *out, uint32_t msn);
/* tcp_fast.c: at a message boundary of a ring, the small messages that
 * come next, as many as out takes with room for two more each (what
 * their FPDUs would have made): how many, 0 if none, -EBADMSG malformed
 * (the stream ends with TERMINATE), -ENOMEM, -EPIPE the ring is broken.
 * rx_lock held. */
int small_run(struct tcp_chan *tc, struct rx_out *out);
/* tcp_fast.c: a poller's quick pass (rx_lock held): 1 if it delivered the
 * next record, 0 if it left everything to tcp_rx_locked, -EBADMSG if the
 * record it took is malformed (the stream ends with TERMINATE). */
int tcp_rx_fast(struct tcp_chan *tc);

/* tcp_direct.c: direct placement. direct_ok: may this stream place
 * directly (softrnic peer, no CRC)? send_begin/direct_begin start a SEND
 * or tagged segment whose header rbuf holds (bytes of rbuf consumed,
 * -EAGAIN: take the staged path, or -errno); direct_step receives the
 * rest (1 progress, 0 nothing to read, <0 stream lost); direct_readv is
 * readv into application memory. */
bool direct_ok(struct tcp_chan *tc);
ssize_t direct_readv(int fd, const struct iovec *iov, int n);
ssize_t send_begin(struct tcp_chan *tc, struct sr_qp *qp, const struct ddp_hdr *h,
		   size_t hl, size_t ulen, struct rx_out *out);
ssize_t direct_begin(struct tcp_chan *tc, struct sr_qp *qp, const struct ddp_hdr *h,
		     size_t hl, size_t ulen, struct rx_out *out);
int direct_step(struct tcp_chan *tc, struct rx_out *out);

/* tcp_rx.c: called from the progress thread */
void tcp_rx(struct tcp_chan *tc);
/* The same from a program thread: does nothing if another thread is
 * receiving on this stream right now. */
void tcp_rx_try(struct tcp_chan *tc);
/* The same for a program thread polling an empty CQ: takes in what one
 * read brings and returns, leaving the ACK owed to ride on the program's
 * next post when the stream is poll-owned (foreign: the thread polls
 * another CQ, and nothing waits for a reply). */
void tcp_rx_poll(struct tcp_chan *tc, bool foreign);
/* The progress thread's receive pass on a stream that no program thread
 * polls: after one that took in a READ, an atomic or a WRITE, it watches
 * the stream for SOFTRNIC_SPIN_US before it sleeps (tcp_spin.c). */
void tcp_rx_spin(struct tcp_chan *tc);
/* tcp_rx_spin's pass (takes rx_lock): with nosleep it asks the ring for
 * no wakeup. *onesided: it took in a READ, an atomic or a WRITE and no
 * SEND or immediate data; *shm: the stream reads the ring now; *mark:
 * rx_mark after it. NULL, or why the stream must end (tcp_fail). */
const char *tcp_rx_pass(struct tcp_chan *tc, bool nosleep, bool *onesided, bool *shm,
			uint64_t *mark);
/* Would tcp_rx_poll find nothing to do on this stream (a ring with nothing
 * new, nothing staged, nothing to write)? A lock-free look, safe while
 * the stream is listed; false when unsure. Stamps the poll (POLL_WINDOW),
 * and own_poll_ns too for a poller of the stream's own CQs (own). */
bool tcp_poll_idle(struct tcp_chan *tc, bool own);
/* The progress thread's receive pass, every POLL_YIELD_ROUNDS rounds:
 * leave the ring to a program thread that polls (tcp_spin.c)? tc->lock. */
bool leave_to_poller_locked(struct tcp_chan *tc);
/* tcp.c: a stream the poller owns, still polled? If not, it goes back to
 * the progress thread; an ACK the poller left owed goes now. tc->lock. */
void poll_check_locked(struct tcp_chan *tc);

/* A spinning thread's pause. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
