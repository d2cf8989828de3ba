/* The same-host channel (DESIGN.md decision 23): once a stream between
 * two softrnic processes on one host is UP, its bytes move to two rings
 * in a shared memfd, and large WRITE, SEND and READ response payloads are
 * pulled by the receiver with process_vm_readv, straight from the
 * sender's registered memory into its own, after its own checks (or
 * copied with memcpy from its read-only mapping of the sender's memfd,
 * where registration put that memory on one: shm_map.h). The TCP
 * socket stays open as the control and liveness path.
 *
 * The switch, over the stream (softrnic ACK messages with a status only
 * this file uses, and a body):
 *   offerer (the dialer, or the CM's active side)  ->  OFFER
 *   accepter: checks, maps, answers ACCEPT (its last bytes on TCP) or
 *             REFUSE (and both stay on TCP)
 *   offerer: reads from the ring after ACCEPT; sends SWITCH (its last
 *            bytes on TCP)
 *   accepter: reads from the ring after SWITCH.
 * So each direction moves at one point of its byte stream, and everything
 * sent before that point is read before anything from the ring.
 *
 * Private to the TCP channel: called with the locks tcp_priv.h names.
 */
#ifndef SOFTRNIC_SHM_H
#define SOFTRNIC_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "chan/shm_small.h"

struct tcp_chan;

/* What the channels carried, for SOFTRNIC_STATS=1 (printed at exit). */
struct chan_stats {
	_Atomic uint64_t tcp_fpdus;	/* FPDUs written to TCP sockets */
	_Atomic uint64_t shm_fpdus;	/* ... and to shm rings */
	_Atomic uint64_t shm_direct;	/* small requests written there
					 * without a message (send_small) */
	_Atomic uint64_t shm_ack_words;	/* lone ACKs that went as the ack
					 * word, not a record (counted in
					 * shm_fpdus too) */
	_Atomic uint64_t shm_pulled;	/* payload bytes pulled from peers */
	_Atomic uint64_t shm_mapped;	/* ... copied from their memfds */
	_Atomic uint64_t shm_links;	/* streams that moved to shm */
	_Atomic uint64_t shm_refused;	/* offers refused (either side) */
	_Atomic uint64_t ud_sent;	/* UD datagrams handed to UDP sockets */
	_Atomic uint64_t ud_received;	/* ... received for a UD QP (delivered or held) */
	_Atomic uint64_t shm_kicks;	/* peers kicked (shm_tx_watch) */
	_Atomic uint64_t shm_graced;	/* records the look after sleep found */
	_Atomic uint64_t tcp_poll_late;	/* TCP input a polling program left
					 * unread until the poll check */
	_Atomic uint64_t shm_left;	/* progress thread passes that left a
					 * busy ring to its program's poller */
	_Atomic uint64_t rx_waited;	/* wake-ups of a ring or socket taken
					 * by a program thread waiting for an
					 * event (tcp_wait.c) */
	_Atomic uint64_t rx_quick;	/* records a polling program thread
					 * delivered in its quick pass
					 * (tcp_fast.c) */
	_Atomic uint64_t shm_fenced;	/* ring writes fenced for a consumer
					 * that does not poll (wake_if) */
	_Atomic uint64_t shm_full;	/* writes that found the ring full
					 * and asked the consumer for a wake
					 * (shm_send) */
	_Atomic uint64_t poll_quiet;	/* looks at a polled ring's stream
					 * taken without its lock (tcp.c,
					 * tcp_quiet_tick) */
	_Atomic uint64_t tcp_out_shm;	/* EPOLLOUT on the socket of a
					 * stream that writes to its ring */
	_Atomic uint64_t shm_helped;	/* payload bytes we copied into a
					 * peer's memory for it (its help
					 * request: shm_help_serve) */
	_Atomic uint64_t poll_foreign;	/* receive passes a poller of one CQ
					 * ran on a stream of other CQs that
					 * nobody polled (tcp_poll.c) */
};
extern struct chan_stats chan_stats;

/* A count (n, or one per message, on the send path): a plain load and
 * store, not a locked add (which cost 4 ns of a 150 ns post, and after a
 * copy would wait for the copy's stores). Two threads counting at once
 * may lose one: these are statistics, never accounting. */
static inline void chan_stat_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static inline void chan_stat_inc(_Atomic uint64_t *c)
{
	chan_stat_add(c, 1);
}

/* A stream that just came UP: offer shm if this end is the offerer and
 * the peer is softrnic. tc->lock held. */
void shm_offer_locked(struct tcp_chan *tc, bool offerer);
/* A context's descriptor server (made at its first offer, for peers that
 * may not use pidfd_getfd on us): set up the fields, and close it. */
struct sr_tcp_ctx;
void shm_ctx_init(struct sr_tcp_ctx *t);
void shm_ctx_close(struct sr_tcp_ctx *t);
/* A control message arrived (status: SR_ST_SHM_*). rx_lock held, not
 * tc->lock. 0, or -EBADMSG: the stream is broken. */
int shm_ctl(struct tcp_chan *tc, uint8_t status, const uint8_t *body, size_t len);
/* Write iov to the ring like sendmsg: bytes written, or -1 with errno
 * (EAGAIN full, EFAULT first piece unreadable, EPROTO corrupt). kinds[]
 * as shm_ring_write's; msns[]: for a piece the peer pulls, the msn of
 * the SEND or WRITE it belongs to, else SHM_NO_MSN. tc->lock held. */
#define SHM_NO_MSN UINT32_MAX
ssize_t shm_send(struct tcp_chan *tc, const struct iovec *iov, const uint8_t *kinds,
		 const uint32_t *msns, int n);
/* Write one small message (struct shm_small and its payload: n pieces
 * of our own bytes, len in all) to the ring as one small record, whole or
 * not at all: len, 0 if the ring has no room for it now, or -1 with
 * errno (EPROTO: broken; EFAULT: a piece from iov[app] on, which are
 * the application's memory, faulted, and nothing was written). Only at
 * a message boundary of the stream. tc->lock held. */
ssize_t shm_send_small(struct tcp_chan *tc, const struct iovec *iov, int n, size_t len, int app);
/* A positive ACK owed that goes alone (tcp_tx.c, ack_small_locked): as
 * the ring's ack word (shm_ring_ctl.ack), a store and the wakeup check of
 * a record, in place of a small record the peer reads, decodes and
 * releases (one for every message of a one-way stream). Cumulative, it
 * needs no place in the stream: ACKs were always allowed to pass queued
 * answers (ack_flush_locked), and a READ's or atomic's WQE completes by
 * its response, not by an ACK. False on a broken ring. tc->lock held. */
bool shm_send_ack(struct tcp_chan *tc, uint32_t msn);
/* The peer's ack word, if it changed since we last took it: true and the
 * word in *word (its MSN: the low 32 bits). Then shm_ack_take once it is
 * delivered. Acquire: a fault the peer marked on a record of ours before
 * the ACK (shm_faults_locked) is seen. rx_lock held. */
bool shm_ack_peek(const struct tcp_chan *tc, uint64_t *word);
void shm_ack_take(struct tcp_chan *tc, uint64_t word);
#define SHM_ACK_SET	(1ULL << 32)
/* Pieces the peer pulled and found gone (it read zeros) fail their WQE
 * as over TCP: their msns go to tc->faults (tcp_tx_faults tells the
 * QP). Call before answers from the peer are delivered. tc->lock held. */
void shm_faults_locked(struct tcp_chan *tc);
/* Have we ever written a remote record on this stream (so that
 * shm_faults_locked may find something)? No lock needed: read after an
 * answer came in, it sees every record that answer could be to. */
bool shm_pulls_sent(const struct tcp_chan *tc);
/* Does the peer, alive and reading, still have to pull bytes of remote
 * records we wrote (they are in our memory: not after we exit, nor once
 * the program reuses a buffer it had us send)? tc->lock held. */
bool shm_pulls_owed(const struct tcp_chan *tc);
/* We write to the ring from now on: shm_revoke may take back what we
 * write (tc->lock held). */
void shm_revoke_arm(struct tcp_chan *tc);
/* Take back our remote records the peer has not read (shm_ring_revoke):
 * the QP flushed their WQEs, or the stream is over, and the program may
 * write into those buffers again. No lock; nothing before the switch. */
void shm_revoke(struct tcp_chan *tc);
/* The last shm_send found the ring full, and the consumer has released
 * nothing since: the next would write nothing (a look at one word).
 * tc->lock held. */
bool shm_tx_stuck(struct tcp_chan *tc);
/* Read like recv/readv: bytes, 0 at the end (the socket ended and the
 * ring is empty), or -1 with errno (EAGAIN empty, ENOMSG a small message
 * comes next: shm_recv_small, EFAULT could not place into iov, EPROTO
 * corrupt ring or unreadable peer). rx_lock held. */
ssize_t shm_recv(struct tcp_chan *tc, const struct iovec *iov, int n, bool app);
/* If a small message comes next (shm_ring_small_begin/_end): its first n
 * bytes into hdr and its length; 0: none next (or nothing), -1: the ring
 * is broken (shm_broken says why). Then end: n bytes of it from off into
 * dst, and the release. rx_lock held. */
ssize_t shm_recv_small_begin(struct tcp_chan *tc, void *hdr, size_t n);
void shm_recv_small_end(struct tcp_chan *tc, void *dst, size_t off, size_t n);
/* The first byte (struct shm_small's op) of the small message next, if
 * it is the last one published; else -1 (also on a broken ring). A look
 * for the poller's quick pass (tcp_fast.c), rx_lock held. */
int shm_small_alone(const struct tcp_chan *tc);
/* Anything in the ring to read (a record, or one half read), or broken?
 * rx_lock held. */
bool shm_rx_pending(struct tcp_chan *tc);
/* After one or more shm_recv_small that read something: a producer that
 * waits for room is woken if there is enough now (once per batch: the
 * look takes a full fence). */
void shm_recv_small_done(struct tcp_chan *tc);
/* Why the rings cannot be used any more, or NULL. */
const char *shm_broken(const struct tcp_chan *tc);
/* Where our reading of the ring stands (rx_lock held): the position
 * read up to, or 1 if a record is half read. */
uint64_t shm_rx_mark(const struct tcp_chan *tc);
/* Nothing to read since mark (shm_rx_mark's, even): the ring's tail is
 * still there, no ack word is new, it is not broken, the socket has not
 * ended. No lock. */
bool shm_rx_idle_at(const struct tcp_chan *tc, uint64_t mark);
/* Wake our own progress thread (it then runs a receive pass). */
void shm_self_wake(struct tcp_chan *tc);
/* A program thread starts or stops polling the ring we read (poll_owned):
 * tell the writer (rx_polled), which then writes without a fence (shm.c,
 * wake_if); once stopped, the next sleep on the ring looks at it once
 * more SHM_SLEEP_GRACE_NS later, for a record of such a write that the
 * sleep missed. tc->lock held, shm_rx. */
void shm_polled_locked(struct tcp_chan *tc, bool polled);
/* A store leaves the writer's store buffer within a microsecond at worst:
 * this bounds the delay of the rare record that raced with the sleep. */
#define SHM_SLEEP_GRACE_NS	(50ULL * 1000)
/* The stream's timer fired (tcp_on_timer): time for that look? Then wake
 * our own progress thread if the ring holds something. tc->lock held. */
void shm_grace_check_locked(struct tcp_chan *tc, uint64_t now);
/* What we wrote may wait this long unread before the peer's progress
 * thread is kicked to read it (shm_tx_watch): its program thread, which
 * polled a moment ago and so was left the ring, may now be waiting by
 * watching memory, where only the progress thread can place a WRITE. A
 * polling program reads within a microsecond or two, unless it lost its
 * CPU for a while: at 20 us, 1300-4300 kicks in 3 s of a 64-byte
 * ib_send_bw here, each waking a progress thread on two vCPUs that two
 * pollers keep busy, which took a poller's CPU in turn (a 99th
 * percentile of 0.73-1.56 us in 8-byte ib_send_lat); at 50 us 3-10
 * times fewer, the 99th percentile 0.62-1.13 (docs/PERFORMANCE.md). */
#define SHM_KICK_NS	(50ULL * 1000)
/* ... and the lone ACK that kicked pass owes waits this long for the
 * program's reply to carry it (tcp_rx.c, kicked_defer). */
#define SHM_KICK_ACK_NS	(20ULL * 1000)
/* A program thread polls (now: its clock): has the peer left what we
 * wrote unread for SHM_KICK_NS? Then kick it (shm_ring_ctl.kick). Only
 * with the rings set up (shm_rx). No lock. */
void shm_tx_watch(struct tcp_chan *tc, uint64_t now);
/* Did the peer kick us since we last asked (and clear it)? */
bool shm_kicked(struct tcp_chan *tc);
/* A program thread polls (rings set up): has the peer, reading a large
 * mapped record we wrote, asked us to copy part of it (struct shm_help)?
 * Then copy it. A look at one word otherwise. No lock. */
void shm_help_serve(struct tcp_chan *tc);
/* Consumer (rx_lock): may the parts the producer copies for the next
 * reads be left under way (a WRITE's segments)? Off: each read's part is
 * settled before the read returns. */
void shm_help_async(struct tcp_chan *tc, bool on);
/* Consumer (rx_lock): are parts of ours under way? */
bool shm_help_pending(const struct tcp_chan *tc);
/* Consumer (rx_lock): settle every part under way (wait for the
 * producer's, copy the ones it did not take): before anything can see
 * the bytes as placed. 0, -EFAULT (some could not be placed: our memory
 * faulted), -EPROTO (the link is broken). */
int shm_help_drain(struct tcp_chan *tc);
/* What a payload piece that the peer may pull belongs to: it sets the
 * least size worth a pull (shm_priv.h SHM_PULL_MIN*). */
enum shm_pull_use {
	SHM_PULL_RESP,			/* a READ response */
	SHM_PULL_REQ,			/* a SEND or WRITE */
	SHM_PULL_STREAM,		/* a WRITE behind SHM_STREAM_REQS others
					 * unanswered: a stream, where a pull
					 * costs no one a wait */
};
#define SHM_STREAM_REQS	8
/* Should the payload piece at p (len bytes, the application's memory)
 * of a message that settles only when answered be pulled by the peer? */
bool shm_pullable(const struct tcp_chan *tc, const void *p, size_t len, enum shm_pull_use use);
/* A program thread waiting for an event sleeps on our eventfd instead of
 * the progress thread (on false), or no longer (tcp_wait.c): 0, or
 * -errno (-ENOENT: not on shm, or shut). tc->lock held. */
int shm_watch_locked(struct tcp_chan *tc, bool on);
/* The stream is shut: stop watching the eventfd. No channel lock held. */
void shm_shut(struct tcp_chan *tc);
/* The last reference is gone: unmap and close. */
void shm_free(struct tcp_chan *tc);

#endif
