/* The TCP channel's connection setup for QPs connected by hand
 * (DESIGN.md decision 4): every context listens on a TCP port that is the
 * high 16 bits of its QPNs. Of two QPs, the one with the larger (QPN, GID)
 * dials the other's context and sends an MPA request whose private data is
 * a softrnic hello naming both QPNs; the listener matches it to its QP
 * (holding the stream until that QP has reached RTR and points back),
 * answers with an MPA reply, and the stream is up (tcp.c). Work posted
 * meanwhile waits in the channel. RDMA CM streams are set up by librdmacm
 * instead and attached ready (tcp_cm.c).
 */
#include "chan/tcp_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>


/* SOFTRNIC_EXT=0: speak plain RFC iWARP even to a softrnic peer (no ACK,
 * RNR or SEND-with-immediate messages): SEND and WRITE complete once sent,
 * errors arrive as TERMINATE, as towards any iWARP RNIC. */
static bool want_ext(void)
{
	const char *v = getenv("SOFTRNIC_EXT");

	return !v || !*v || *v != '0';
}

static bool want_crc(void)
{
	const char *v = getenv("SOFTRNIC_MPA_CRC");

	return v && *v && *v != '0';
}

static void hs_frame(struct tcp_chan *tc, bool reply, bool reject)
{
	uint8_t pd[SR_HELLO_LEN];
	struct sr_hello hello = {
		.version = 1, .flags = want_ext() ? SR_HELLO_F_EXT : 0,
		.src_qpn = tc->local_qpn, .dst_qpn = tc->peer_qpn,
	};
	struct mpa_frame f = {
		.reply = reply, .reject = reject, .crc = tc->crc, .rev = MPA_REV_2,
		.enhanced = true, .ird = tc->ird, .ord = tc->ord,
		.pd = pd, .pd_len = SR_HELLO_LEN,
	};
	ssize_t n;

	sr_hello_encode(pd, sizeof(pd), &hello);
	n = mpa_frame_encode(tc->hs, sizeof(tc->hs), &f);
	tc->hs_len = n > 0 ? (size_t)n : 0;
	tc->hs_off = 0;
}

/* Write the handshake frame; true when all of it is out. */
static bool hs_write(struct tcp_chan *tc)
{
	while (tc->hs_off < tc->hs_len) {
		ssize_t n = send(tc->pl.fd, tc->hs + tc->hs_off, tc->hs_len - tc->hs_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				want(tc, EPOLLIN | EPOLLOUT);
			return false;
		}
		tc->hs_off += (size_t)n;
	}
	return true;
}

/* Read an MPA frame into rbuf; 1 when f holds one, 0 for "more", <0 bad. */
static int hs_read(struct tcp_chan *tc, struct mpa_frame *f)
{
	ssize_t n, used;

	n = recv(tc->pl.fd, tc->rbuf + tc->rlen, RX_BUF - tc->rlen, MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	tc->rlen += (size_t)n;
	used = mpa_frame_decode(tc->rbuf, tc->rlen, f);
	if (used == -EAGAIN)
		return 0;
	if (used < 0)
		return (int)used;
	/* What follows the frame (none before the reply) stays for rx. */
	return 1;
}

static void hs_consume(struct tcp_chan *tc, const struct mpa_frame *f)
{
	size_t used = MPA_FRAME_HDR_LEN + (f->enhanced ? MPA_RTR_LEN : 0) + f->pd_len;

	memmove(tc->rbuf, tc->rbuf + used, tc->rlen - used);
	tc->rlen -= used;
}

/* The stream is up: start moving what was posted meanwhile. The setup
 * timer comes off without waiting for one firing now: that fire()
 * waits for tc->lock, which we hold (a program thread taking in the
 * handshake, tcp_close's last receive, would wait for it for ever); it
 * then finds the stream up, where the timer only re-checks gates. */
static void tcp_up_locked(struct tcp_chan *tc)
{
	set_state(tc, TS_UP);
	progress_timer_disarm(tc->tctx->pg, &tc->timer);
	want(tc, EPOLLIN);
	shm_offer_locked(tc, tc->dialer);
	tcp_flush_locked(tc);
}

static void dial_start(struct tcp_chan *tc);

static void dial_retry_or_fail(struct tcp_chan *tc, const char *why)
{
	int fd;

	if (progress_now_ns() >= tc->deadline) {
		sr_mutex_unlock(&tc->lock);
		tcp_fail(tc, why);
		sr_mutex_lock(&tc->lock);
		return;
	}
	/* Try again shortly: the peer's process may not be there yet. */
	fd = tc->pl.fd;
	sr_mutex_unlock(&tc->lock);
	progress_del(tc->tctx->pg, &tc->pl);
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD)
		return;		/* shut meanwhile (the QP is being destroyed):
				 * tcp_shut closes the socket, and the stream
				 * must not come back to life and arm its timer */
	tc->pl.fd = -1;
	close(fd);
	tc->events = 0;
	tc->rlen = 0;
	set_state(tc, TS_DIALING);
	tcp_timer_arm_locked(tc, RETRY_NS);
}

static void on_dialing(struct tcp_chan *tc, uint32_t events)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(tc->pl.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		dial_retry_or_fail(tc, strerror(err));
		return;
	}
	hs_frame(tc, false, false);
	set_state(tc, TS_REQ_SENT);
	if (hs_write(tc))
		want(tc, EPOLLIN);
}

static void on_req_sent(struct tcp_chan *tc, uint32_t events)
{
	struct mpa_frame f;
	struct sr_hello h;
	int r;

	if ((events & EPOLLOUT) && !hs_write(tc))
		return;
	if (tc->hs_off == tc->hs_len)
		want(tc, EPOLLIN);
	if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		return;
	r = hs_read(tc, &f);
	if (r == 0)
		return;
	if (r < 0 || !f.reply || f.markers) {
		dial_retry_or_fail(tc, "MPA reply missing or malformed");
		return;
	}
	if (f.reject) {
		sr_mutex_unlock(&tc->lock);
		tcp_fail(tc, "peer rejected the connection (no such QP)");
		sr_mutex_lock(&tc->lock);
		return;
	}
	tc->ext = want_ext() && sr_hello_decode(f.pd, f.pd_len, &h) > 0 &&
		  (h.flags & SR_HELLO_F_EXT) &&
		  h.src_qpn == tc->peer_qpn;
	tc->ch.acks = tc->ext;
	tc->ch.no_send_imm = !tc->ext;
	tc->crc = f.crc;
	hs_consume(tc, &f);
	tcp_up_locked(tc);
}

/* Find the QP an inbound hello is for. Returns it with a reference, or
 * NULL; *wait says whether it may still become ready (keep the stream). */
static struct sr_qp *match_qp(struct sr_tcp_ctx *t, const struct sr_hello *h, bool *wait)
{
	struct sr_context *ctx = t->ctx;
	struct sr_qp *qp;

	*wait = false;
	if (((h->dst_qpn >> 8) & 0xffff) != ctx->port)
		return NULL;
	pthread_mutex_lock(&ctx->lock);
	qp = ctx->qps[h->dst_qpn & 0xff];
	if (qp && !qp->dying)
		qp_get(qp);
	else
		qp = NULL;
	pthread_mutex_unlock(&ctx->lock);
	if (!qp)
		return NULL;
	sr_mutex_lock(&qp->lock);
	if (qp->state >= IBV_QPS_RTR && qp->state <= IBV_QPS_SQE && !qp->chan &&
	    qp->attr.dest_qp_num == h->src_qpn) {
		sr_mutex_unlock(&qp->lock);
		return qp;
	}
	/* Not there yet (the peer may dial before we reach RTR): hold. */
	*wait = qp->state < IBV_QPS_RTR && !qp->chan;
	sr_mutex_unlock(&qp->lock);
	qp_put(qp);
	return NULL;
}

/* Attach an accepted stream to its QP and answer. tc->lock held. */
static bool accept_try(struct tcp_chan *tc)
{
	struct sr_hello h = { .version = 1, .src_qpn = tc->peer_qpn, .dst_qpn = tc->local_qpn };
	struct sr_qp *qp;
	bool wait, attached;

	qp = match_qp(tc->tctx, &h, &wait);
	if (!qp) {
		if (wait) {
			set_state(tc, TS_HELD);
			want(tc, EPOLLIN);	/* EOF from an impatient peer */
			return false;
		}
		sr_dbg("tcp %p: no QP %#x for peer QP %#x: reject", (void *)tc,
		       tc->local_qpn, tc->peer_qpn);
		hs_frame(tc, true, true);
		tc->fail_after_hs = true;
		set_state(tc, TS_REQ_SENT);
		if (hs_write(tc)) {
			sr_mutex_unlock(&tc->lock);
			tcp_fail(tc, "rejected");
			sr_mutex_lock(&tc->lock);
		}
		return false;
	}
	tc->ird = qp->attr.max_dest_rd_atomic;
	tc->ord = qp->attr.max_rd_atomic;
	tc->rc = qp_type_reliable(qp->ibqp.qp_base.qp_type);
	tc->qp = qp;
	chan_get(&tc->ch);			/* the QP's reference */
	sr_mutex_unlock(&tc->lock);
	/* Checked again where it counts: the program may be destroying the
	 * QP right now (qp_destroy marks it dying under its lock before it
	 * looks for a channel to close). A stream attached after that look
	 * would hold the QP's reference for ever (a leak ASan found in
	 * test_xrc tcp_no_ext, 1 run in 10) and point at a freed QP. */
	sr_mutex_lock(&qp->lock);
	attached = !qp->dying && !qp->chan && qp->state >= IBV_QPS_RTR &&
		   qp->state <= IBV_QPS_SQE;
	if (attached)
		qp->chan = &tc->ch;
	sr_mutex_unlock(&qp->lock);
	if (!attached) {
		sr_mutex_lock(&tc->lock);
		tc->qp = NULL;
		sr_mutex_unlock(&tc->lock);
		chan_put(&tc->ch);		/* never given to the QP */
		qp_put(qp);
		tcp_fail(tc, "the QP went away while the stream was accepted");
		sr_mutex_lock(&tc->lock);
		return false;
	}
	sr_mutex_lock(&tc->lock);
	/* Unless shut meanwhile (the QP destroyed as soon as it had the
	 * stream): a DEAD stream stays dead. */
	if (tc->state != TS_DEAD) {
		hs_frame(tc, true, false);
		hs_write(tc);
		tcp_up_locked(tc);
	}
	sr_mutex_unlock(&tc->lock);
	/* Work posted before the stream existed can go now. */
	sr_mutex_lock(&qp->lock);
	qp_sq_progress_locked(qp);
	sr_mutex_unlock(&qp->lock);
	qp_kick(qp);
	qp_put(qp);
	sr_mutex_lock(&tc->lock);
	return true;
}

static void on_accepted(struct tcp_chan *tc, uint32_t events)
{
	struct mpa_frame f;
	struct sr_hello h;
	int r = hs_read(tc, &f);

	if (r == 0)
		return;
	if (r < 0 || f.reply || f.markers ||
	    sr_hello_decode(f.pd, f.pd_len, &h) < 0) {
		/* Not a softrnic peer connecting a QP by hand: RDMA CM
		 * connections to this port are not ours (they go to the
		 * application's own CM port). */
		sr_mutex_unlock(&tc->lock);
		tcp_fail(tc, "not a softrnic hello");
		sr_mutex_lock(&tc->lock);
		return;
	}
	tc->local_qpn = h.dst_qpn;
	tc->peer_qpn = h.src_qpn;
	tc->ext = want_ext() && (h.flags & SR_HELLO_F_EXT) != 0;
	tc->ch.acks = tc->ext;
	tc->ch.no_send_imm = !tc->ext;
	tc->crc = f.crc || want_crc();
	hs_consume(tc, &f);
	accept_try(tc);
}

/* tc->lock held. */
static void dial_start(struct tcp_chan *tc)
{
	int fd = socket(tc->peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		tcp_timer_arm_locked(tc, RETRY_NS);
		return;
	}
	tune_socket(fd, tc->qp);
	tc->pl.fd = fd;
	tc->events = EPOLLOUT;
	if (connect(fd, (struct sockaddr *)&tc->peer, tc->peerlen) < 0 && errno != EINPROGRESS) {
		sr_dbg("tcp %p: connect: %s", (void *)tc, strerror(errno));
	}
	if (progress_add(tc->tctx->pg, &tc->pl, EPOLLOUT)) {
		close(fd);
		tc->pl.fd = -1;
		tcp_timer_arm_locked(tc, RETRY_NS);
		return;
	}
	/* The overall deadline for the handshake. */
	tcp_timer_arm_locked(tc, tc->deadline > progress_now_ns() ? tc->deadline - progress_now_ns() : 0);
}

void tcp_accept(struct sr_pollable *p, uint32_t events)
{
	struct sr_tcp_ctx *t = container_of(p, struct sr_tcp_ctx, lpl);

	for (;;) {
		int fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct tcp_chan *tc;

		if (fd < 0)
			return;
		tune_socket(fd, NULL);
		tc = tcp_chan_new(t, fd);
		if (!tc) {
			close(fd);
			continue;
		}
		sr_mutex_lock(&tc->lock);
		tc->state = TS_ACCEPTED;
		tc->events = EPOLLIN;
		tc->deadline = progress_now_ns() + HS_TIMEOUT_NS;
		if (progress_add(t->pg, &tc->pl, EPOLLIN)) {
			sr_mutex_unlock(&tc->lock);
			tcp_fail(tc, "epoll");
			continue;
		}
		tcp_timer_arm_locked(tc, HS_TIMEOUT_NS);
		sr_mutex_unlock(&tc->lock);
	}
}

/* Events of a stream still being set up (tcp.c hands them over). Called
 * with tc->lock held; returns with it released. */
void tcp_setup_event_locked(struct tcp_chan *tc, uint32_t events)
{
	switch (tc->state) {
	case TS_DIALING:
		on_dialing(tc, events);
		break;
	case TS_REQ_SENT:
		if (tc->fail_after_hs) {
			if (hs_write(tc) || (events & (EPOLLHUP | EPOLLERR))) {
				sr_mutex_unlock(&tc->lock);
				tcp_fail(tc, "rejected");
				return;
			}
			break;
		}
		on_req_sent(tc, events);
		if (tc->state == TS_UP) {
			bool rx = tc->rlen != 0;

			sr_mutex_unlock(&tc->lock);
			/* FPDUs that came in with the MPA reply are already
			 * read: epoll will not announce them again. */
			if (rx)
				tcp_rx(tc);
			tcp_kick(&tc->ch);	/* completes what went out */
			return;
		}
		break;
	case TS_ACCEPTED:
		on_accepted(tc, events);
		break;
	case TS_HELD: {
		char b;

		if (recv(tc->pl.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
			sr_mutex_unlock(&tc->lock);
			tcp_fail(tc, "peer gave up");
			return;
		}
		break;
	}
	default:
		break;
	}
	sr_mutex_unlock(&tc->lock);
}

/* The stream's timer while it is being set up: dial again, or give up.
 * Called with tc->lock held; returns with it released. */
void tcp_setup_timer_locked(struct tcp_chan *tc)
{
	if (tc->state == TS_DIALING && tc->pl.fd < 0) {
		dial_start(tc);
	} else if (tc->state != TS_UP && tc->state != TS_DEAD) {
		sr_mutex_unlock(&tc->lock);
		tcp_fail(tc, "connection setup timed out");
		return;
	}
	sr_mutex_unlock(&tc->lock);
}

/* ---- public ------------------------------------------------------------- */

static int gid_to_sockaddr(const union ibv_gid *g, uint16_t port, unsigned int scope,
			   struct sockaddr_storage *ss, socklen_t *len)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(ss, 0, sizeof(*ss));
	if (!memcmp(g->raw, v4mapped, 12)) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		memcpy(&in->sin_addr, &g->raw[12], 4);
		*len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		memcpy(&in6->sin6_addr, g->raw, 16);
		if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
			in6->sin6_scope_id = scope;
		*len = sizeof(*in6);
	}
	return 0;
}

int chan_tcp_connect(struct sr_qp *qp)
{
	struct sr_context *ctx = qp->ctx;
	struct sr_tcp_ctx *t = tcp_ctx_get(ctx);
	struct sr_gid gids[SR_GID_TBL_LEN], me = { 0 };
	union ibv_gid peer_gid = { 0 };
	uint32_t my_qpn = qp->ibqp.qp_base.qp_num, peer_qpn;
	struct tcp_chan *tc;
	bool dial, global;
	int n, cmp;

	if (!t)
		return -ENOMEM;
	sr_mutex_lock(&qp->lock);
	peer_qpn = qp->attr.dest_qp_num;
	global = qp->attr.ah_attr.is_global;
	if (global)
		peer_gid = qp->attr.ah_attr.grh.dgid;
	n = dev_query_gids(gids, SR_GID_TBL_LEN);
	if (global && qp->attr.ah_attr.grh.sgid_index < n)
		me = gids[qp->attr.ah_attr.grh.sgid_index];
	sr_mutex_unlock(&qp->lock);

	/* Without a GRH there is no IP address to reach: the peer is on
	 * this host (a program connecting by LID on one machine). */
	if (!global) {
		peer_gid.raw[10] = peer_gid.raw[11] = 0xff;
		peer_gid.raw[12] = 127;
		peer_gid.raw[15] = 1;
		me.gid = peer_gid;
	}
	/* The larger (QPN, GID) dials: both ends compute the same answer. */
	cmp = my_qpn > peer_qpn ? 1 : my_qpn < peer_qpn ? -1 : memcmp(&me.gid, &peer_gid, sizeof(peer_gid));
	dial = cmp > 0;
	sr_dbg("QP %#x -> QP %#x: %s", my_qpn, peer_qpn, dial ? "dialing" : "waiting for the peer");
	if (!dial) {
		/* A stream the peer opened before we reached RTR may wait. */
		chan_tcp_qp_ready(ctx);
		return 0;
	}
	tc = tcp_chan_new(t, -1);
	if (!tc)
		return -ENOMEM;
	chan_get(&tc->ch);			/* the QP's reference */
	sr_mutex_lock(&tc->lock);
	tc->dialer = true;
	tc->rc = qp_type_reliable(qp->ibqp.qp_base.qp_type);
	/* Only a softrnic peer connects QPs by hand (an iWARP peer needs
	 * the CM), so ACKs are expected from the first post on; the MPA
	 * reply confirms it. */
	tc->ch.acks = tc->ext = want_ext();
	tc->ch.no_send_imm = !tc->ext;
	tc->qp = qp;
	tc->local_qpn = my_qpn;
	tc->peer_qpn = peer_qpn;
	tc->crc = want_crc();
	tc->ird = qp->attr.max_dest_rd_atomic;
	tc->ord = qp->attr.max_rd_atomic;
	gid_to_sockaddr(&peer_gid, (uint16_t)(peer_qpn >> 8), me.ifindex, &tc->peer, &tc->peerlen);
	tc->deadline = progress_now_ns() + HS_TIMEOUT_NS;
	tc->state = TS_DIALING;
	atomic_store_explicit(&tc->ch.dialing, true, memory_order_relaxed);
	sr_mutex_unlock(&tc->lock);

	sr_mutex_lock(&qp->lock);
	qp->chan = &tc->ch;
	sr_mutex_unlock(&qp->lock);

	sr_mutex_lock(&tc->lock);
	dial_start(tc);
	sr_mutex_unlock(&tc->lock);
	return 0;
}

void chan_tcp_qp_ready(struct sr_context *ctx)
{
	struct sr_tcp_ctx *t = ctx->tcp;
	struct tcp_chan *held[64];
	struct sr_list *pos, *tmp;
	int n = 0;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	sr_list_for_each_safe(pos, tmp, &t->streams) {
		struct tcp_chan *tc = container_of(pos, struct tcp_chan, link);

		if (n < (int)ARRAY_SIZE(held) && tc->state == TS_HELD) {
			chan_get(&tc->ch);
			held[n++] = tc;
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++) {
		sr_mutex_lock(&held[i]->lock);
		if (held[i]->state == TS_HELD)
			accept_try(held[i]);
		sr_mutex_unlock(&held[i]->lock);
		chan_put(&held[i]->ch);
	}
}
