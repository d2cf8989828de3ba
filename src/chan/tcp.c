/* The TCP channel: one TCP stream per connected RC/UC QP, carrying MPA
 * FPDUs (RFC 5044) with DDP/RDMAP messages (RFC 5041, 5040, 7306).
 *
 * This file: the context's listener and progress engine, a stream's
 * lifetime (fail, shut, drain, close), its event and timer handlers once
 * UP, and a busy poller's ownership of its receive side. Setting streams
 * up for QPs connected by hand is tcp_setup.c; RDMA CM streams come ready
 * (tcp_cm.c); sending is tcp_tx.c, receiving tcp_rx.c (direct placement:
 * tcp_direct.c).
 *
 * Threads: the progress thread runs every socket event (connect, accept,
 * receive, and sends that had to wait for room); a post sends inline from
 * the caller's thread when the socket takes it. Lock order: QP lock, then
 * channel lock. Inbound messages are parsed under the channel lock and
 * delivered to the core (qp_rx) after it is dropped.
 */
#include "chan/tcp_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const tcp_state_name[] = {
	"DIALING", "REQ_SENT", "ACCEPTED", "HELD", "UP", "DEAD",
};

static void tcp_on_event(struct sr_pollable *p, uint32_t events);
static void tcp_on_timer(struct sr_timer *t);

/* ---- small helpers --------------------------------------------------- */

void set_state(struct tcp_chan *tc, enum tcp_state s)
{
	sr_dbg("tcp %p QP %#x<->%#x %s -> %s", (void *)tc, tc->local_qpn, tc->peer_qpn,
	       tcp_state_name[tc->state], tcp_state_name[s]);
	tc->state = s;
	atomic_store_explicit(&tc->ch.dialing, s == TS_DIALING, memory_order_relaxed);
	atomic_fetch_add_explicit(&tc->tctx->gen, 1, memory_order_release);
}

void want(struct tcp_chan *tc, uint32_t events)
{
	if (tc->pl.fd < 0 || events == tc->events)
		return;
	if (progress_mod(tc->tctx->pg, &tc->pl, events) == 0)
		tc->events = events;
}

/* Arm the stream's one timer, unless the stream is shut. tcp_shut marks
 * it DEAD under tc->lock before it cancels the timer, and every arm is
 * made here under that lock: so once tcp_shut has cancelled, nothing arms
 * the timer again, and the channel can be freed with no timer of its
 * left in the progress thread. Caller holds tc->lock. */
void tcp_timer_arm_locked(struct tcp_chan *tc, uint64_t delay_ns)
{
	if (tc->shm_grace_at) {
		/* (the look after sleep, shm.c, comes no later for this) */
		uint64_t now = progress_now_ns();

		delay_ns = sr_min(delay_ns, tc->shm_grace_at > now ? tc->shm_grace_at - now : 0);
	}
	if (tc->state != TS_DEAD)
		progress_timer_arm(tc->tctx->pg, &tc->timer, delay_ns);
}

/* The program's poller owns the stream (or no longer): on shm the ring's
 * writer hears of it (shm_polled_locked). */
void poll_own_locked(struct tcp_chan *tc, bool own)
{
	if (tc->poll_owned == own)
		return;
	tc->poll_owned = own;
	if (tc->shm_rx)
		shm_polled_locked(tc, own);
}

/* A program thread's poll took a message off a ring the progress thread
 * still watches: the poller owns the stream from now on, as
 * tcp_shm_event would have made it once woken. A poller that always
 * comes first keeps it from ever being woken (it asks for no wakeup: the
 * ring is never empty for it), and meanwhile the peer fenced every
 * message it wrote (rx_polled) and our ACKs went alone, not with the
 * program's reply. tc->lock held. */
void poll_claim_locked(struct tcp_chan *tc)
{
	if (tc->poll_owned || !tc->shm_rx || tc->rx_waiter || tc->state != TS_UP || tc->closed)
		return;
	/* (stamped: the check POLL_CHECK_NS later finds the poller active
	 * unless it stopped) */
	atomic_store_explicit(&tc->rx_poll_ns, progress_now_ns(), memory_order_relaxed);
	poll_own_locked(tc, true);
	tcp_timer_arm_locked(tc, POLL_CHECK_NS);
}

/* (tcp_rx.c: a lone ACK completed all the QP awaited, so its program will
 * not poll for the reply the peer sends later, and may watch its memory
 * for it; an ACK that comes with the reply leaves the stream to the
 * poller: ib_write_lat's turns. Or a WRITE is half in.) */
void poll_release_locked(struct tcp_chan *tc)
{
	if (tc->poll_owned && tc->state == TS_UP && !tc->closed) {
		poll_own_locked(tc, false);
		want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	}
}

bool fifo_push(uint32_t **buf, uint32_t *head, uint32_t *tail, uint32_t *size,
		      size_t elem, const void *v)
{
	if (*tail - *head == *size) {
		uint32_t nsize = *size ? *size * 2 : 16;
		uint8_t *nb = malloc(nsize * elem);

		if (!nb)
			return false;
		for (uint32_t i = 0; i < *tail - *head; i++)
			memcpy(nb + i * elem, (uint8_t *)*buf + ((*head + i) & (*size - 1)) * elem, elem);
		free(*buf);
		*buf = (uint32_t *)nb;
		*tail -= *head;
		*head = 0;
		*size = nsize;
	}
	memcpy((uint8_t *)*buf + (*tail & (*size - 1)) * elem, v, elem);
	(*tail)++;
	return true;
}


/* ---- context: progress engine and listener ---------------------------- */

struct sr_tcp_ctx *tcp_ctx_get(struct sr_context *ctx)
{
	struct sr_tcp_ctx *t;

	pthread_mutex_lock(&ctx->lock);
	t = ctx->tcp;
	if (t) {
		pthread_mutex_unlock(&ctx->lock);
		return t;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		goto out;
	pthread_mutex_init(&t->lock, NULL);
	sr_list_init(&t->streams);
	shm_ctx_init(t);
	t->ctx = ctx;
	t->pg = progress_create();
	if (!t->pg) {
		free(t);
		t = NULL;
		goto out;
	}
	t->lpl.fd = ctx->listen_fd;
	t->lpl.on_event = tcp_accept;
	if (progress_add(t->pg, &t->lpl, EPOLLIN)) {
		progress_destroy(t->pg);
		free(t);
		t = NULL;
		goto out;
	}
	ctx->tcp = t;
out:
	pthread_mutex_unlock(&ctx->lock);
	return t;
}

/* ---- lifetime -------------------------------------------------------------- */

static const struct sr_chan_ops tcp_ops;

struct tcp_chan *tcp_chan_new(struct sr_tcp_ctx *t, int fd)
{
	struct tcp_chan *tc = calloc(1, sizeof(*tc));

	if (!tc)
		return NULL;
	tc->rbuf = malloc(RX_BUF);
	if (!tc->rbuf) {
		free(tc);
		return NULL;
	}
	tc->ch.ops = &tcp_ops;
	tc->ch.zcopy = true;	/* sendmsg straight from registered memory */
	atomic_init(&tc->ch.refs, 1);	/* the stream list's */
	tc->tctx = t;
	tc->pl.fd = fd;
	tc->pl.on_event = tcp_on_event;
	tc->epl.fd = -1;
	atomic_init(&tc->rx_mark, 1);
	tc->timer.fire = tcp_on_timer;
	sr_mutex_init(&tc->lock);
	sr_mutex_init(&tc->rx_lock);
	sr_list_init(&tc->txq);
	for (int q = 0; q < DDP_QN_COUNT; q++)
		tc->tx_msn[q] = tc->rx_msn[q] = 1;	/* RFC 5041 §5.1: MSN starts at 1 */
	pthread_mutex_lock(&t->lock);
	sr_list_add_tail(&t->streams, &tc->link);
	atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
	pthread_mutex_unlock(&t->lock);
	return tc;
}

static void drop_msgs(struct sr_list *q)
{
	while (!sr_list_empty(q)) {
		struct sr_msg *m = container_of(q->next, struct sr_msg, link);

		sr_list_del(&m->link);
		msg_free(m);
	}
}

static void tcp_free(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);

	drop_msgs(&tc->txq);
	msg_free(tc->cur);
	for (uint32_t i = tc->slot_head; i != tc->slot_tail; i++)
		if (tc->slot[i % TX_SLOTS].done && tc->slot[i % TX_SLOTS].done != tc->cur)
			msg_free(tc->slot[i % TX_SLOTS].done);
	msg_free(tc->as_untagged);
	msg_free(tc->dr.msg);
	msg_free(tc->sd.msg);
	for (int i = 0; i < tc->sd.n; i++)
		mr_release(&tc->sd.refs[i]);
	for (int i = 0; i < tc->dr.nrefs; i++)
		mr_release(&tc->dr.refs[i]);
	free(tc->rd_out);
	free(tc->rsp);
	free(tc->rbuf);
	shm_free(tc);
	sr_mutex_destroy(&tc->lock);
	sr_mutex_destroy(&tc->rx_lock);
	free(tc);
}

/* The stream is shut: give back the MRs a half-placed segment or SEND
 * holds (tcp_direct.c), or the program's ibv_dereg_mr
 * would wait for them until it destroys the QP, which programs do after
 * deregistering (qperf). Caller holds no stream lock. Whatever the QP
 * (hand-connected or CM), nothing on a dead stream moves again. */
static void tcp_release_dead(struct tcp_chan *tc)
{
	sr_mutex_lock(&tc->rx_lock);
	for (int i = 0; i < tc->sd.n; i++)
		mr_release(&tc->sd.refs[i]);
	tc->sd.n = 0;
	tc->sd.active = false;
	for (int i = 0; i < tc->dr.nrefs; i++)
		mr_release(&tc->dr.refs[i]);
	tc->dr.nrefs = 0;
	tc->dr.active = false;
	sr_mutex_unlock(&tc->rx_lock);
	/* ... and the sends still queued, which hold theirs (zero copy) */
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD) {
		while (!sr_list_empty(&tc->txq)) {
			struct sr_msg *m = container_of(tc->txq.next, struct sr_msg, link);

			sr_list_del(&m->link);
			msg_free(m);
		}
		for (uint32_t i = tc->slot_head; i != tc->slot_tail; i++)
			if (tc->slot[i % TX_SLOTS].done && tc->slot[i % TX_SLOTS].done != tc->cur)
				msg_free(tc->slot[i % TX_SLOTS].done);
		msg_free(tc->cur);
		tc->cur = NULL;
		tc->slot_head = tc->slot_tail;
	}
	sr_mutex_unlock(&tc->lock);
}

/* Stop all I/O on the stream: the progress thread will not run it again
 * once this returns (unless called from that thread, which is then the
 * one running it). Caller holds no channel lock. Any thread may call it,
 * any number of times, concurrently: the first does the work; a second
 * waits for it to finish, except the progress thread, which the first
 * may be waiting for (progress_del) and which is then the thread running
 * the stream anyway. */
void tcp_shut(struct tcp_chan *tc)
{
	struct sr_tcp_ctx *t = tc->tctx;
	bool first;
	int fd;

	sr_mutex_lock(&tc->lock);
	fd = tc->pl.fd;
	if (tc->state != TS_DEAD)
		set_state(tc, TS_DEAD);
	first = !tc->shut;
	tc->shut = true;
	sr_mutex_unlock(&tc->lock);
	/* what the peer has not pulled of ours is not its to read now */
	shm_revoke(tc);
	if (!first) {
		if (!progress_in_thread(t->pg))
			while (!atomic_load_explicit(&tc->shut_done, memory_order_acquire))
				sched_yield();
		tcp_release_dead(tc);
		return;
	}
	/* After DEAD, not before: a handler that ran in between (input on
	 * a stream a poller had just used) re-armed the poll-ownership check
	 * after it was cancelled, and the timer fired on the freed channel.
	 * DEAD stops every arm (tcp_timer_arm_locked); this takes out one
	 * armed before, and waits for one running. */
	progress_timer_cancel(t->pg, &tc->timer);
	if (fd >= 0) {
		progress_del(t->pg, &tc->pl);
		sr_mutex_lock(&tc->lock);
		tc->pl.fd = -1;
		sr_mutex_unlock(&tc->lock);
		close(fd);
	}
	shm_shut(tc);
	atomic_store_explicit(&tc->shut_done, true, memory_order_release);
	tcp_release_dead(tc);
}

/* Drop the stream list's reference (once). */
void tcp_unlist(struct tcp_chan *tc)
{
	struct sr_tcp_ctx *t = tc->tctx;
	bool listed;

	pthread_mutex_lock(&t->lock);
	listed = tc->link.next != &tc->link;
	if (listed) {
		sr_list_del(&tc->link);
		atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
	}
	pthread_mutex_unlock(&t->lock);
	if (listed)
		chan_put(&tc->ch);
}

/* The stream is lost or broken: tell the QP (outside our lock). */
void tcp_fail(struct tcp_chan *tc, const char *why)
{
	struct sr_qp *qp;
	bool bye, cm;

	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD) {
		sr_mutex_unlock(&tc->lock);
		return;
	}
	/* Ours until we are done: once tcp_shut has taken the socket out
	 * of the progress engine, a concurrent tcp_close (the program
	 * destroying the QP) no longer waits for this handler, and may drop
	 * every other reference. */
	chan_get(&tc->ch);
	qp = tc->closed ? NULL : tc->qp;
	if (qp)
		qp_get(qp);
	bye = tc->peer_bye;
	cm = tc->cm;
	sr_mutex_unlock(&tc->lock);
	sr_dbg("tcp %p QP %#x<->%#x %s: %s", (void *)tc, tc->local_qpn, tc->peer_qpn,
	       bye ? "closed by the peer" : "lost", why);
	tcp_shut(tc);
	if (qp) {
		/* A peer that said goodbye destroyed its QP on purpose (IB:
		 * nothing happens until we need it); one that vanished
		 * (killed, reset) takes the QP to ERROR at once. */
		if (cm)
			tcp_cm_ended(tc, qp, bye);	/* tcp_cm.c */
		else if (bye)
			qp_chan_gone(qp);
		else
			qp_chan_lost(qp);
		qp_put(qp);
	} else {
		tcp_unlist(tc);		/* never attached: nobody else holds it */
	}
	chan_put(&tc->ch);
}

/* Has the peer shut its end of this socket (or reset it)? */
static bool socket_ended(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The drain's pause: unlocked (so that our progress thread takes in what
 * the peer writes meanwhile). False if the stream failed meanwhile: there
 * is nothing left to close. */
static bool drain_nap_locked(struct tcp_chan *tc, useconds_t us)
{
	sr_mutex_unlock(&tc->lock);
	usleep(us);
	sr_mutex_lock(&tc->lock);
	return tc->state == TS_UP && tc->pl.fd >= 0;
}

/* Before closing: write what is queued (answers the peer is owed, the
 * goodbye), waiting at most a second for room (and for the peer to pull
 * what is ours), then send FIN. Caller holds tc->lock, which the waits
 * let go of (drain_nap_locked): a stream that fails meanwhile returns
 * at once. */
void tcp_drain_locked(struct tcp_chan *tc)
{
	uint64_t until = progress_now_ns() + 1000000000ULL, last;

	/* An initiator's gate only waits out siw's accept; what was posted
	 * before a disconnect still goes. */
	if (tc->tx_gate_init)
		tc->tx_gate = false;
	tc->shm_hold_until = 0;	/* nor do requests wait for the shm switch */
	for (;;) {
		struct pollfd pfd = { .fd = tc->pl.fd, .events = POLLOUT };
		uint64_t now;

		tcp_flush_locked(tc);
		if (tc->tx_gate || only_ack_owed(tc))
			break;
		now = progress_now_ns();
		if (tc->shm_tx) {
			/* A full ring: the peer's reader frees it, unless it
			 * has closed its end. (Held locked, a peer draining
			 * towards us at the same time, both ends of qperf's
			 * uc_bi_bw flooding as they close, waited for us as we
			 * waited for it, a second each.) */
			if (now >= until || shm_broken(tc) || socket_ended(tc->pl.fd))
				break;
			if (!drain_nap_locked(tc, 100))
				return;
			continue;
		}
		if (now >= until || poll(&pfd, 1, (int)((until - now) / 1000000) + 1) <= 0 ||
		    (pfd.revents & (POLLERR | POLLHUP)))
			break;
	}
	/* The ring holds remote records: the peer reads their bytes from our
	 * memory when it comes to them, and after we exit it cannot (a pull
	 * from a dead process ends its stream as lost, and its QP flushes a
	 * receive of a message we had sent whole: ibv_srq_pingpong's server
	 * exits with its last SENDs in the ring, the client failed). A NIC
	 * would have put them on the wire: wait, the same second, for the
	 * peer to take them, unless it has closed its end. (What the peer
	 * writes back meanwhile, its ACKs, must be taken in, or its ring to
	 * us fills and it stops reading ours.) */
	while (shm_pulls_owed(tc) && progress_now_ns() < until && !socket_ended(tc->pl.fd))
		if (!drain_nap_locked(tc, 50))
			return;
	/* Our FIN goes behind what the socket has not sent yet. A peer that
	 * stopped reading (back-pressure: its receive window is shut) would
	 * never see it, and would wait for ever for a peer that is gone:
	 * give what is left the same second, then reset the stream instead. */
	for (;;) {
		int unsent = 0;

		if (ioctl(tc->pl.fd, SIOCOUTQNSD, &unsent) < 0 || unsent <= 0)
			break;
		if (progress_now_ns() >= until) {
			struct linger abort_close = { .l_onoff = 1, .l_linger = 0 };

			sr_dbg("tcp %p: %d bytes the peer does not take: reset", (void *)tc, unsent);
			setsockopt(tc->pl.fd, SOL_SOCKET, SO_LINGER, &abort_close,
				   sizeof(abort_close));
			return;
		}
		usleep(1000);
	}
	/* Linux siw fails a SEND that it has already put on the wire (with
	 * IBV_WC_LOC_QP_OP_ERR) when our FIN is processed before its send
	 * path is done with the WQE (siw_qp_sq_process finds tx_suspend
	 * set). A program that answers a message and closes at once (the
	 * closing exchange of perftest) hits that window on a loaded peer:
	 * towards a plain iWARP peer, the FIN waits until FIN_GRACE_NS after
	 * the last bytes that came in. */
	last = atomic_load_explicit(&tc->rx_last_ns, memory_order_relaxed);
	if (!tc->ext && last) {
		uint64_t now = progress_now_ns(), at = last + FIN_GRACE_NS;

		if (now < at)
			usleep((useconds_t)((at - now) / 1000));
	}
	shutdown(tc->pl.fd, SHUT_WR);
}

/* Requests posted that no stream carries yet: a QP connected by hand
 * (reliable or not), in RTS, whose stream the peer has not opened (it
 * dials us) or is not up (ours), with WQEs its channel has not taken.
 * The program sees an RTS QP as connected, as on hardware, where the
 * NIC sends within microseconds of the post. */
static bool qp_unsent(struct sr_qp *qp)
{
	return qp->state == IBV_QPS_RTS && !qp->peer_gone && qp->sq_next != qp->sq_tail &&
	       (qp_type(qp) == IBV_QPT_RC || qp_type(qp) == IBV_QPT_UC);
}

/* Does a QP of ctx wait for its peer to dial it, with requests posted?
 * (true also when a lock is busy: look again) */
static bool ctx_unsent(struct sr_context *ctx)
{
	bool owed = false;

	if (pthread_mutex_trylock(&ctx->lock))
		return true;
	for (int i = 1; i <= SR_MAX_QP && !owed; i++) {
		struct sr_qp *qp = ctx->qps[i];

		if (!qp || qp->dying)
			continue;
		if (sr_mutex_trylock(&qp->lock)) {
			owed = true;
			continue;
		}
		owed = !qp->chan && qp_unsent(qp);
		sr_mutex_unlock(&qp->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
	return owed;
}

/* Does the exit have to wait for this stream? Up or on its way up
 * (dialing, or waiting for the MPA request or reply), with requests of
 * its QP queued or still posted, an ACK owed, a payload the peer has
 * still to pull from us, or bytes the kernel has not sent: a process
 * that ends with input unread (a control message of the peer's, say)
 * closes its socket with a reset, which drops them. tc->lock held. */
static bool exit_owed_locked(struct tcp_chan *tc)
{
	bool owed;
	int unsent = 0;

	if (tc->closed || tc->state == TS_DEAD || socket_ended(tc->pl.fd))
		return false;
	if (!only_ack_owed(tc) || tc->ack_pending)
		return true;
	if (tc->state == TS_UP &&
	    (shm_pulls_owed(tc) || (ioctl(tc->pl.fd, SIOCOUTQNSD, &unsent) == 0 && unsent > 0)))
		return true;
	if (!tc->qp)
		return false;	/* (an accepted stream not matched yet:
				 * its QP is ctx_unsent's) */
	if (sr_mutex_trylock(&tc->qp->lock))
		return true;
	owed = qp_unsent(tc->qp);
	sr_mutex_unlock(&tc->qp->lock);
	return owed;
}

/* The exit's wait: true once no stream of ctx owes anything
 * (exit_owed_locked), false at the deadline. */
static bool exit_wait(struct sr_tcp_ctx *t, struct sr_context *ctx, uint64_t deadline)
{
	for (;;) {
		bool owed = ctx_unsent(ctx);

		/* (try-locks: a program thread may hold a lock as exit runs,
		 * and never let go: then the deadline ends the wait) */
		if (pthread_mutex_trylock(&t->lock)) {
			if (progress_now_ns() >= deadline)
				return false;
			usleep(50);
			continue;
		}
		for (struct sr_list *p = t->streams.next; p != &t->streams && !owed; p = p->next) {
			struct tcp_chan *tc = container_of(p, struct tcp_chan, link);

			if (sr_mutex_trylock(&tc->lock)) {
				owed = true;	/* (look again) */
				continue;
			}
			/* (an ACK owed goes now: deferred, it would wait
			 * for a reply or a timer that never comes, and the
			 * peer's WQE fail for a message we took; the rest
			 * must be written, sent by the kernel, and pulled if
			 * on the ring: exit_owed_locked) */
			if (tc->state == TS_UP && !tc->closed && tc->ack_pending)
				tcp_flush_locked(tc);
			owed = exit_owed_locked(tc);
			sr_mutex_unlock(&tc->lock);
		}
		pthread_mutex_unlock(&t->lock);
		if (!owed)
			return true;
		if (progress_now_ns() >= deadline)
			return false;
		usleep(50);
	}
}

void bye_queue_locked(struct tcp_chan *tc)
{
	struct sr_msg *m = tc->ext ? msg_alloc(0) : NULL;

	ack_flush_locked(tc);
	if (m) {
		m->op = SR_MSG_ACK;
		m->status = SR_ST_BYE;
		m->msn = tc->rx_req_msn;
		sr_list_add_tail(&tc->txq, &m->link);
	}
	tx_busy_locked(tc);
}

void chan_tcp_exit_drain(struct sr_context *ctx, uint64_t deadline)
{
	struct sr_tcp_ctx *t = ctx->tcp;

	if (!t || !exit_wait(t, ctx, deadline))
		return;
	/* All delivered: as if the QPs were destroyed (a kernel destroys
	 * them when a process exits), each up stream says goodbye, and the
	 * exit waits for that to be sent too. (Streams busy now are left
	 * as they are: the peer takes them for lost.) */
	if (pthread_mutex_trylock(&t->lock))
		return;
	for (struct sr_list *p = t->streams.next; p != &t->streams; p = p->next) {
		struct tcp_chan *tc = container_of(p, struct tcp_chan, link);

		if (sr_mutex_trylock(&tc->lock))
			continue;
		if (tc->state == TS_UP && !tc->closed && tc->pl.fd >= 0) {
			bye_queue_locked(tc);
			tcp_flush_locked(tc);
		}
		sr_mutex_unlock(&tc->lock);
	}
	pthread_mutex_unlock(&t->lock);
	(void)exit_wait(t, ctx, deadline);
}

static void tcp_revoke(struct sr_chan *ch)
{
	shm_revoke(to_tc(ch));
}

static void tcp_close(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);

	/* What already arrived is taken in and answered first, as a NIC
	 * would have done before the QP went away: a peer's SEND that sat
	 * in our socket is then acknowledged, not failed. */
	if (tc->tctx->ctx->owner == sr_getpid())
		tcp_rx(tc);
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_UP && tc->pl.fd >= 0 && tc->tctx->ctx->owner == sr_getpid()) {
		bye_queue_locked(tc);
		tcp_drain_locked(tc);
	}
	tc->closed = true;
	tc->qp = NULL;
	atomic_fetch_add_explicit(&tc->tctx->gen, 1, memory_order_release);
	sr_mutex_unlock(&tc->lock);
	/* A program thread may be receiving for this QP right now (a CQ
	 * poll): wait it out; it sees "closed" before its next delivery. */
	sr_mutex_lock(&tc->rx_lock);
	sr_mutex_unlock(&tc->rx_lock);
	tcp_shut(tc);
	tcp_unlist(tc);
	chan_put(ch);			/* the QP's reference */
}

/* (chan.h, await: a dialer's stream fails at its deadline, on its next
 * refused dial, every RETRY_NS) */
static void tcp_await(struct sr_chan *ch, uint64_t ns)
{
	struct tcp_chan *tc = to_tc(ch);
	uint64_t by = progress_now_ns() + ns;

	sr_mutex_lock(&tc->lock);
	if (tc->dialer && tc->state == TS_DIALING && by < tc->deadline)
		tc->deadline = by;
	sr_mutex_unlock(&tc->lock);
}

static const struct sr_chan_ops tcp_ops = {
	.name = "tcp",
	.send = tcp_send,
	.ack = tcp_ack,
	.send_small = tcp_send_small,
	.kick = tcp_kick,
	.idle = tcp_idle,
	.close = tcp_close,
	.free = tcp_free,
	.revoke = tcp_revoke,
	.await = tcp_await,
};

/* A stream on shm had a socket event: has the socket ended? EPOLLIN may
 * be stale (raised for the bytes of the switch message, read since by
 * another thread), so it counts only if the socket says so. */
static bool shm_socket_ended(struct tcp_chan *tc, uint32_t events)
{
	uint8_t b;
	ssize_t n;

	if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		return true;
	if (!(events & EPOLLIN))
		return false;
	n = recv(tc->pl.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
		return false;
	}
	return true;	/* the end, an error, or bytes after the switch */
}

static void tcp_on_event_ref(struct tcp_chan *tc, uint32_t events);

/* The handler runs with a reference held: a handler that fails the stream
 * (tcp_fail, which takes the socket out of the progress engine) no longer
 * holds up a concurrent tcp_close, which may then drop every other
 * reference while the handler still uses the channel (the setup paths
 * take tc->lock again after tcp_fail). Until tcp_shut has deleted the
 * socket from the engine (waiting for a handler running in another
 * thread), an event always finds the channel alive, so the get is safe. */
static void tcp_on_event(struct sr_pollable *p, uint32_t events)
{
	struct tcp_chan *tc = container_of(p, struct tcp_chan, pl);

	chan_get(&tc->ch);
	tcp_on_event_ref(tc, events);
	chan_put(&tc->ch);
}

static void tcp_on_event_ref(struct tcp_chan *tc, uint32_t events)
{
	sr_mutex_lock(&tc->lock);
	switch (tc->state) {
	case TS_DIALING:
	case TS_REQ_SENT:
	case TS_ACCEPTED:
	case TS_HELD:
		tcp_setup_event_locked(tc, events);	/* tcp_setup.c; unlocks */
		return;
	case TS_UP:
		if (tc->shm_rx && shm_socket_ended(tc, events)) {
			/* The peer writes to the ring: the socket can only
			 * end. Take in what the ring holds, then end. */
			bool paused = tc->rx_paused;

			atomic_store_explicit(&tc->shm_eof, true, memory_order_release);
			poll_own_locked(tc, false);
			want(tc, tc->events & EPOLLOUT);
			sr_mutex_unlock(&tc->lock);
			if (paused)
				tcp_fail(tc, "peer closed the stream while it was held back");
			else
				tcp_rx(tc);
			return;
		}
		if (events & EPOLLOUT) {
			/* (room in the socket of a stream that writes to its
			 * ring: a wait left armed; counted, for the tests) */
			if (tc->shm_tx)
				chan_stat_inc(&chan_stats.tcp_out_shm);
			tcp_flush_locked(tc);
		}
		if ((events & EPOLLIN) && !(events & (EPOLLHUP | EPOLLERR)) && !tc->closed &&
		    poller_active(tc)) {
			/* A program thread is polling for this stream's
			 * completions and receives itself: stop competing with
			 * it (wakeups, locks) until it stops. (Not once the QP
			 * is going: it has no poller any more.) */
			bool take = !tc->shm_rx;

			poll_own_locked(tc, true);
			want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
			tcp_timer_arm_locked(tc, POLL_CHECK_NS);
			sr_mutex_unlock(&tc->lock);
			/* TCP: what woke us is read now all the same (the
			 * program may wait for it by watching its memory, not
			 * by polling: ib_write_lat); the ACK owed may wait for
			 * its reply (kicked_defer) */
			if (take)
				tcp_rx(tc);
			return;
		}
		if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !(tc->events & EPOLLIN)) {
			if (tc->rx_paused) {
				/* The peer closed or reset while we held its
				 * data back: nobody will take it now (IB: the
				 * peer disconnected; what it sent is lost). */
				sr_mutex_unlock(&tc->lock);
				tcp_fail(tc, "peer closed the stream while it was held back");
				return;
			}
			/* a poller owned it: take it back and read to the end */
			poll_own_locked(tc, false);
			want(tc, tc->events | rx_events(tc));
		}
		sr_mutex_unlock(&tc->lock);
		if (tc->nfaults || tc->tx_written)
			tcp_tx_faults(tc);
		if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			tcp_rx(tc);
		else if (events & EPOLLIN)
			tcp_rx_spin(tc);
		return;
	case TS_DEAD:
		break;
	}
	sr_mutex_unlock(&tc->lock);
}

/* Our eventfd (shm.h): the peer wrote to a ring we sleep on, made room
 * in one we wait to write to, or we woke ourselves. */
void tcp_shm_event(struct sr_pollable *p, uint32_t events)
{
	struct tcp_chan *tc = container_of(p, struct tcp_chan, epl);
	uint64_t v;
	bool rx;

	(void)events;
	if (read(p->fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: another read took it; nothing is lost */
	}
	sr_mutex_lock(&tc->lock);
	if (tc->state != TS_UP || tc->closed) {
		sr_mutex_unlock(&tc->lock);
		return;
	}
	tcp_flush_locked(tc);
	if (tc->shm_rx && !tc->poll_owned && !tc->rx_waiter && poller_active(tc)) {
		/* a program thread polls this QP's CQ: leave the ring to it
		 * (it asks for no wakeups) until it stops */
		poll_own_locked(tc, true);
		tcp_timer_arm_locked(tc, POLL_CHECK_NS);
	}
	/* (kicked: the peer saw what it wrote wait unread while we had left
	 * the ring to a program thread; read it now) */
	tc->rx_kicked = tc->poll_owned && tc->shm_rx && shm_kicked(tc);
	rx = !tc->poll_owned || tc->rx_kicked || shm_broken(tc);
	sr_mutex_unlock(&tc->lock);
	if (tc->nfaults || tc->tx_written)
		tcp_tx_faults(tc);
	if (rx && !tc->rx_kicked)
		tcp_rx_spin(tc);
	else if (rx)
		tcp_rx(tc);
}

/* A stream the poller owns: still polled? If not, watch it again (what
 * waits in the socket is then announced at once). Either way, an ACK the
 * poller left owed goes now. tc->lock held. */
void poll_check_locked(struct tcp_chan *tc)
{
	if (poller_active(tc)) {
		tcp_timer_arm_locked(tc, POLL_CHECK_NS);
	} else {
		int n = 0;

		/* (TCP: input the program left unread this long, counted) */
		if (!tc->shm_rx && ioctl(tc->pl.fd, FIONREAD, &n) == 0 && n > 0)
			chan_stat_inc(&chan_stats.tcp_poll_late);
		poll_own_locked(tc, false);
		want(tc, tc->events | rx_events(tc));
		if (tc->shm_rx)
			shm_self_wake(tc);	/* a pass that asks for wakeups */
	}
	if (tc->ack_pending)
		tcp_flush_locked(tc);
}

/* The stream's timer, on a ring its program polls, with nothing owed and
 * nothing else due: look again in POLL_QUIET_NS, without the stream's
 * lock (its poller holds the bias: taking it costs a membarrier and the
 * bias's re-earning). True if that was so. Each look at 1 ms woke a
 * progress thread that took a CPU from one of the two busy pollers of a
 * ping-pong here, once in about a thousand round trips: the 99.9th
 * percentile of 8-byte ib_send_lat was 23-38 us, now 3-9
 * (docs/PERFORMANCE.md). What the look guards, with it 4 ms away: input
 * a poller left (on shm the peer kicks after SHM_KICK_NS) and an ACK
 * owed (not now; one deferred later, for the program's reply to carry,
 * waits for this look only if its poller stops polling too).
 *
 * (The fields are the stream lock's: read here without it, a stale
 * value only sends this look the locked way, or delays it a tick. The
 * timer is re-armed before the state is looked at again: a stream
 * going DEAD meanwhile either is seen so here, or disarms the timer
 * after this arm, waiting this fire out.) */
static bool tcp_quiet_tick(struct tcp_chan *tc)
{
	if (__atomic_load_n(&tc->state, __ATOMIC_ACQUIRE) != TS_UP ||
	    !__atomic_load_n(&tc->shm_rx, __ATOMIC_RELAXED) ||
	    !__atomic_load_n(&tc->poll_owned, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&tc->closed, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&tc->ack_pending, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&tc->tx_gate, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&tc->shm_hold_until, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&tc->shm_grace_at, __ATOMIC_RELAXED) || !poller_active(tc))
		return false;
	/* (by then, not at: a thread that armed it sooner since, under
	 * the lock, keeps its time) */
	progress_timer_arm_by(tc->tctx->pg, &tc->timer, POLL_QUIET_NS);
	if (__atomic_load_n(&tc->state, __ATOMIC_ACQUIRE) == TS_DEAD)
		progress_timer_disarm(tc->tctx->pg, &tc->timer);
	chan_stat_inc(&chan_stats.poll_quiet);
	return true;
}

static void tcp_on_timer(struct sr_timer *t)
{
	struct tcp_chan *tc = container_of(t, struct tcp_chan, timer);

	if (tcp_quiet_tick(tc))
		return;
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_UP) {
		if (tc->tx_gate && !tc->tx_gate_rtr) {
			/* the peer did not speak first: speak anyway */
			tc->tx_gate = false;
			tcp_flush_locked(tc);
		}
		if (tc->poll_owned && !tc->closed)
			poll_check_locked(tc);
		else if (tc->ack_pending && !tc->closed)
			tcp_flush_locked(tc);	/* (kicked_defer's) */
		tcp_hold_timer_locked(tc);
		shm_grace_check_locked(tc, progress_now_ns());
	} else if (tc->state != TS_DEAD) {
		tcp_setup_timer_locked(tc);		/* tcp_setup.c; unlocks */
		return;
	}
	sr_mutex_unlock(&tc->lock);
}

void tune_socket(int fd, const struct sr_qp *qp)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	if (qp && qp->attr.timeout) {
		/* IBTA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout,
		 * tried retry_cnt + 1 times. A silent peer is lost after that
		 * (never less than 5 s: TCP, not a NIC, is retransmitting). */
		uint64_t us = (4096ULL << qp->attr.timeout) / 1000 * (qp->attr.retry_cnt + 1);
		unsigned int ms = (unsigned int)sr_min(sr_max(us / 1000, 5000ULL), 600000ULL);
		int idle = (int)sr_max(ms / 3000, 1U), intvl = 1, cnt = 3;

		setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
}


/* ---- public ------------------------------------------------------------- */

/* (which streams a CQ's poll takes: tcp_poll.c) */

struct sr_progress *chan_progress(struct sr_context *ctx)
{
	struct sr_tcp_ctx *t = tcp_ctx_get(ctx);

	return t ? t->pg : NULL;
}



void chan_tcp_ctx_close(struct sr_context *ctx)
{
	struct sr_tcp_ctx *t = ctx->tcp;

	if (!t)
		return;
	/* No new stream first: one the listener accepted after the loop
	 * below had looked would be left behind (ASan: test_xrc tcp_no_ext
	 * leaked the stream of a peer that dialed as the context closed). */
	progress_del(t->pg, &t->lpl);
	/* Unmatched streams die with the context; streams still attached to
	 * QPs the program did not destroy are shut with it. */
	for (;;) {
		struct tcp_chan *tc = NULL;

		pthread_mutex_lock(&t->lock);
		if (!sr_list_empty(&t->streams)) {
			tc = container_of(t->streams.next, struct tcp_chan, link);
			chan_get(&tc->ch);
		}
		pthread_mutex_unlock(&t->lock);
		if (!tc)
			break;
		tcp_shut(tc);
		tcp_unlist(tc);
		chan_put(&tc->ch);
	}
	shm_ctx_close(t);
	progress_destroy(t->pg);
	pthread_mutex_destroy(&t->lock);
	free(t);
	ctx->tcp = NULL;
}
