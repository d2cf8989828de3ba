/* The TCP channel: one TCP stream per connected RC/UC QP, carrying MPA
 * FPDUs (RFC 5044) with DDP/RDMAP messages (RFC 5041, 5040, 7306).
 *
 * Connecting QPs connected by hand (DESIGN.md decision 4): every context
 * listens on a TCP port that is the high 16 bits of its QPNs. Of two QPs,
 * the one with the larger (QPN, GID) dials the other's context and sends
 * an MPA request whose private data is a softrnic hello naming both QPNs;
 * the listener matches it to its QP (holding the stream until that QP has
 * reached RTR and points back), answers with an MPA reply, and the stream
 * is up. Work posted meanwhile waits in the channel.
 *
 * Threads: the progress thread runs every socket event (connect, accept,
 * receive, and sends that had to wait for room); a post sends inline from
 * the caller's thread when the socket takes it. Lock order: QP lock, then
 * channel lock. Inbound messages are parsed under the channel lock and
 * delivered to the core (qp_rx) after it is dropped.
 */
#include "chan/chan.h"
#include "core/qp.h"
#include "progress/progress.h"
#include "wire/iwarp.h"
#include "wire/srext.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define TX_SLOTS	16
#define RX_BUF		(2 * (MPA_MAX_ULPDU + 64))
#define SR_SINK_STAG	0x5352534bU	/* our READ sink tag: responses are
					 * matched by order, placed by offset */
#define HS_TIMEOUT_NS	(60ULL * 1000000000ULL)
#define RETRY_NS	(50ULL * 1000000ULL)

enum tcp_state {
	TS_DIALING,		/* connect() in progress */
	TS_REQ_SENT,		/* MPA request sent, waiting for the reply */
	TS_ACCEPTED,		/* accepted, waiting for the MPA request */
	TS_HELD,		/* request read; our QP is not ready yet */
	TS_UP,
	TS_DEAD,
};
static const char *const tcp_state_name[] = {
	"DIALING", "REQ_SENT", "ACCEPTED", "HELD", "UP", "DEAD",
};

struct sr_tcp_ctx {
	pthread_mutex_t lock;
	struct sr_context *ctx;
	struct sr_progress *pg;
	struct sr_pollable lpl;		/* the context's listener */
	struct sr_list streams;		/* every live tcp_chan */
};

struct tx_fpdu {
	uint8_t hdr[MPA_ULPDU_LEN_SIZE + DDP_HDR_MAX + RDMAP_ATOMIC_REQ_LEN];
	uint8_t trl[MPA_TRAILER_MAX];
	struct iovec iov[3];
	int niov;
	struct sr_msg *done;		/* free once this FPDU is written */
};

/* What an inbound READ or atomic request needs for its response. */
struct rsp_ctx {
	uint32_t msn;
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t req_id;
};

struct tcp_chan {
	struct sr_chan ch;
	struct sr_tcp_ctx *tctx;
	struct sr_list link;		/* tctx->streams */
	struct sr_pollable pl;
	struct sr_timer timer;
	pthread_mutex_t lock;		/* everything below */
	enum tcp_state state;
	bool closed;			/* detached from its QP */
	bool dialer, crc, ext;
	bool peer_bye;			/* the peer said goodbye before closing */
	uint32_t events;		/* epoll events registered */
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
	struct sr_msg *as_tagged;	/* WRITE / READ_RESP being assembled */
	uint32_t as_stag;
	uint64_t as_to;
	uint8_t as_op;
};

static inline struct tcp_chan *to_tc(struct sr_chan *ch)
{
	return container_of(ch, struct tcp_chan, ch);
}

static void tcp_on_event(struct sr_pollable *p, uint32_t events);
static void tcp_on_timer(struct sr_timer *t);
static void tcp_flush_locked(struct tcp_chan *tc);
static void ack_flush_locked(struct tcp_chan *tc);

/* ---- small helpers --------------------------------------------------- */

static void set_state(struct tcp_chan *tc, enum tcp_state s)
{
	sr_dbg("tcp %p QP %#x<->%#x %s -> %s", (void *)tc, tc->local_qpn, tc->peer_qpn,
	       tcp_state_name[tc->state], tcp_state_name[s]);
	tc->state = s;
}

static void want(struct tcp_chan *tc, uint32_t events)
{
	if (tc->pl.fd < 0 || events == tc->events)
		return;
	if (progress_mod(tc->tctx->pg, &tc->pl, events) == 0)
		tc->events = events;
}

static bool fifo_push(uint32_t **buf, uint32_t *head, uint32_t *tail, uint32_t *size,
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

#define FIFO_PUSH(tc, f, v) \
	fifo_push((uint32_t **)&(tc)->f, &(tc)->f##_head, &(tc)->f##_tail, &(tc)->f##_size, \
		  sizeof(*(tc)->f), (v))
#define FIFO_EMPTY(tc, f) ((tc)->f##_head == (tc)->f##_tail)
#define FIFO_FRONT(tc, f) (&(tc)->f[(tc)->f##_head & ((tc)->f##_size - 1)])
#define FIFO_POP(tc, f) ((tc)->f##_head++)

/* ---- context: progress engine and listener ---------------------------- */

static void tcp_accept(struct sr_pollable *p, uint32_t events);

static struct sr_tcp_ctx *tcp_ctx_get(struct sr_context *ctx)
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

static struct tcp_chan *tcp_chan_new(struct sr_tcp_ctx *t, int fd)
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
	atomic_init(&tc->ch.refs, 1);	/* the stream list's */
	tc->tctx = t;
	tc->pl.fd = fd;
	tc->pl.on_event = tcp_on_event;
	tc->timer.fire = tcp_on_timer;
	pthread_mutex_init(&tc->lock, NULL);
	sr_list_init(&tc->txq);
	for (int q = 0; q < DDP_QN_COUNT; q++)
		tc->tx_msn[q] = tc->rx_msn[q] = 1;	/* RFC 5041 §5.1: MSN starts at 1 */
	pthread_mutex_lock(&t->lock);
	sr_list_add_tail(&t->streams, &tc->link);
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
	msg_free(tc->as_tagged);
	free(tc->rd_out);
	free(tc->rsp);
	free(tc->rbuf);
	pthread_mutex_destroy(&tc->lock);
	free(tc);
}

/* Stop all I/O on the stream: the progress thread will not run it again
 * once this returns (unless called from that thread, which is then the
 * one running it). Caller holds no channel lock. */
static void tcp_shut(struct tcp_chan *tc)
{
	struct sr_tcp_ctx *t = tc->tctx;
	int fd;

	progress_timer_cancel(t->pg, &tc->timer);
	pthread_mutex_lock(&tc->lock);
	fd = tc->pl.fd;
	if (tc->state != TS_DEAD)
		set_state(tc, TS_DEAD);
	pthread_mutex_unlock(&tc->lock);
	if (fd >= 0) {
		progress_del(t->pg, &tc->pl);
		pthread_mutex_lock(&tc->lock);
		tc->pl.fd = -1;
		pthread_mutex_unlock(&tc->lock);
		close(fd);
	}
}

/* Drop the stream list's reference (once). */
static void tcp_unlist(struct tcp_chan *tc)
{
	struct sr_tcp_ctx *t = tc->tctx;
	bool listed;

	pthread_mutex_lock(&t->lock);
	listed = tc->link.next != &tc->link;
	if (listed)
		sr_list_del(&tc->link);
	pthread_mutex_unlock(&t->lock);
	if (listed)
		chan_put(&tc->ch);
}

/* The stream is lost or broken: tell the QP (outside our lock). */
static void tcp_fail(struct tcp_chan *tc, const char *why)
{
	struct sr_qp *qp;
	bool bye;

	pthread_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD) {
		pthread_mutex_unlock(&tc->lock);
		return;
	}
	qp = tc->closed ? NULL : tc->qp;
	if (qp)
		qp_get(qp);
	bye = tc->peer_bye;
	pthread_mutex_unlock(&tc->lock);
	sr_dbg("tcp %p QP %#x<->%#x %s: %s", (void *)tc, tc->local_qpn, tc->peer_qpn,
	       bye ? "closed by the peer" : "lost", why);
	tcp_shut(tc);
	if (qp) {
		/* A peer that said goodbye destroyed its QP on purpose (IB:
		 * nothing happens until we need it); one that vanished
		 * (killed, reset) takes the QP to ERROR at once. */
		if (bye)
			qp_chan_gone(qp);
		else
			qp_chan_lost(qp);
		qp_put(qp);
	} else {
		tcp_unlist(tc);		/* never attached: nobody else holds it */
	}
}

static void tcp_close(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);

	pthread_mutex_lock(&tc->lock);
	/* Say goodbye (best effort, never blocking): the peer then knows
	 * this was an orderly destroy, not a crash. */
	if (tc->state == TS_UP && tc->ext && tc->pl.fd >= 0) {
		struct sr_msg *m = msg_alloc(0);

		if (m) {
			m->op = SR_MSG_ACK;
			m->status = SR_ST_BYE;
			m->msn = tc->rx_req_msn;
			ack_flush_locked(tc);
			sr_list_add_tail(&tc->txq, &m->link);
			tcp_flush_locked(tc);
		}
	}
	tc->closed = true;
	tc->qp = NULL;
	pthread_mutex_unlock(&tc->lock);
	tcp_shut(tc);
	tcp_unlist(tc);
	chan_put(ch);			/* the QP's reference */
}

/* ---- transmit ------------------------------------------------------------ */

static uint8_t term_of_status(int st, uint8_t *layer, uint8_t *etype)
{
	*layer = TERM_LAYER_RDMAP;
	switch (st) {
	case SR_ST_REM_ACCESS:
		*etype = TERM_RDMAP_ETYPE_REMOTE_PROT;
		return TERM_RDMAP_ECODE_ACCESS;
	case SR_ST_REM_INV_REQ:
		*layer = TERM_LAYER_DDP;
		*etype = TERM_DDP_ETYPE_UNTAGGED;
		return TERM_DDP_ECODE_UT_MSG_TOOLONG;
	default:
		*etype = TERM_RDMAP_ETYPE_REMOTE_OP;
		return TERM_RDMAP_ECODE_UNSPECIFIED;
	}
}

static int status_of_term(const struct rdmap_term *t)
{
	if (t->layer == TERM_LAYER_RDMAP && t->etype == TERM_RDMAP_ETYPE_REMOTE_PROT)
		return SR_ST_REM_ACCESS;
	if (t->layer == TERM_LAYER_DDP && t->etype == TERM_DDP_ETYPE_TAGGED)
		return SR_ST_REM_ACCESS;
	if (t->layer == TERM_LAYER_DDP && t->etype == TERM_DDP_ETYPE_UNTAGGED)
		return SR_ST_REM_INV_REQ;
	return SR_ST_REM_OP;
}

/* Largest payload per FPDU for a header of hlen bytes. */
static uint32_t seg_max(size_t hlen)
{
	return (uint32_t)(MPA_MAX_ULPDU - hlen) & ~3U;
}

/* Pop answered request contexts up to (and including) msn. */
static struct rsp_ctx *rsp_take(struct tcp_chan *tc, uint32_t msn)
{
	while (!FIFO_EMPTY(tc, rsp)) {
		struct rsp_ctx *r = FIFO_FRONT(tc, rsp);

		FIFO_POP(tc, rsp);
		if (r->msn == msn)
			return r;
		if ((int32_t)(r->msn - msn) > 0)
			return NULL;
	}
	return NULL;
}

/* Encode the next FPDU of tc->cur into slot s. Caller holds tc->lock.
 * Returns false (and drops the message) if it cannot be encoded. */
static bool tx_encode(struct tcp_chan *tc, struct tx_fpdu *s)
{
	struct sr_msg *m = tc->cur;
	struct ddp_hdr h = { .last = true };
	uint8_t *p = s->hdr + MPA_ULPDU_LEN_SIZE;
	size_t cap = sizeof(s->hdr) - MPA_ULPDU_LEN_SIZE, blen = 0;
	uint32_t chunk = 0, crc = 0;
	ssize_t hl;

	switch (m->op) {
	case SR_MSG_SEND:
		h.qn = DDP_QN_SEND;
		h.msn = tc->tx_msn[DDP_QN_SEND];
		h.mo = tc->cur_off;
		if (m->flags & SR_MSGF_IMM) {
			h.opcode = (m->flags & SR_MSGF_SE) ? SR_EXT_SEND_SE_IMM : SR_EXT_SEND_IMM;
			h.inv_stag = be32toh(m->imm);
		} else if (m->flags & SR_MSGF_INV) {
			h.opcode = (m->flags & SR_MSGF_SE) ? RDMAP_SEND_SE_INV : RDMAP_SEND_INV;
			h.inv_stag = m->inv_stag;
		} else {
			h.opcode = (m->flags & SR_MSGF_SE) ? RDMAP_SEND_SE : RDMAP_SEND;
		}
		chunk = sr_min(m->len - tc->cur_off, seg_max(DDP_UNTAGGED_HDR_LEN));
		h.last = tc->cur_off + chunk == m->len;
		if (h.last)
			tc->tx_msn[DDP_QN_SEND]++;
		break;
	case SR_MSG_WRITE:
	case SR_MSG_READ_RESP: {
		h.tagged = true;
		h.opcode = m->op == SR_MSG_WRITE ? RDMAP_WRITE : RDMAP_READ_RESP;
		h.stag = m->stag;
		h.to = m->to + tc->cur_off;
		chunk = sr_min(m->len - tc->cur_off, seg_max(DDP_TAGGED_HDR_LEN));
		h.last = tc->cur_off + chunk == m->len;
		break;
	}
	case SR_MSG_IMM: {
		struct rdmap_imm im = { { 0 } };

		h.opcode = (m->flags & SR_MSGF_SE) ? RDMAP_IMM_SE : RDMAP_IMM;
		h.qn = DDP_QN_SEND;
		h.msn = tc->tx_msn[DDP_QN_SEND]++;
		memcpy(im.data, &m->imm, 4);
		hl = rdmap_imm_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &im);
		blen = hl > 0 ? (size_t)hl : 0;
		break;
	}
	case SR_MSG_READ_REQ: {
		struct rdmap_read_req r = {
			.sink_stag = SR_SINK_STAG, .sink_to = 0, .size = m->rd_len,
			.src_stag = m->stag, .src_to = m->to,
		};

		h.opcode = RDMAP_READ_REQ;
		h.qn = DDP_QN_READ_REQ;
		h.msn = tc->tx_msn[DDP_QN_READ_REQ]++;
		hl = rdmap_read_req_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &r);
		blen = hl > 0 ? (size_t)hl : 0;
		if (!FIFO_PUSH(tc, rd_out, &m->msn))
			return false;
		break;
	}
	case SR_MSG_ATOMIC_REQ: {
		struct rdmap_atomic_req a = {
			.req_id = m->msn, .stag = m->stag, .to = m->to,
		};

		if (m->atomic_op == SR_ATOMIC_CMP_SWP) {
			a.op = RDMAP_ATOMIC_CMP_SWAP;
			a.add_swap = m->add_swap;
			a.add_swap_mask = ~0ULL;
			a.compare = m->compare;
			a.compare_mask = ~0ULL;
		} else {
			a.op = RDMAP_ATOMIC_FETCH_ADD;
			a.add_swap = m->add_swap;
		}
		h.opcode = RDMAP_ATOMIC_REQ;
		h.qn = DDP_QN_ATOMIC_REQ;
		h.msn = tc->tx_msn[DDP_QN_ATOMIC_REQ]++;
		hl = rdmap_atomic_req_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &a);
		blen = hl > 0 ? (size_t)hl : 0;
		break;
	}
	case SR_MSG_ATOMIC_RESP: {
		struct rsp_ctx *r = rsp_take(tc, m->msn);
		struct rdmap_atomic_resp a = { .req_id = r ? r->req_id : m->msn, .orig = m->orig };

		h.opcode = RDMAP_ATOMIC_RESP;
		h.qn = DDP_QN_ATOMIC_RESP;
		h.msn = tc->tx_msn[DDP_QN_ATOMIC_RESP]++;
		hl = rdmap_atomic_resp_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &a);
		blen = hl > 0 ? (size_t)hl : 0;
		break;
	}
	case SR_MSG_TERMINATE:
	case SR_MSG_ACK:
	case SR_MSG_RNR:
		if (m->op == SR_MSG_TERMINATE || !tc->ext) {
			struct rdmap_term t = { 0 };

			t.ecode = term_of_status(m->status, &t.layer, &t.etype);
			h.opcode = RDMAP_TERMINATE;
			h.qn = DDP_QN_TERMINATE;
			h.msn = tc->tx_msn[DDP_QN_TERMINATE]++;
			hl = rdmap_term_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &t);
			blen = hl > 0 ? (size_t)hl : 0;
		} else {
			h.opcode = m->op == SR_MSG_ACK ? SR_EXT_ACK : SR_EXT_RNR;
			h.qn = SR_EXT_QN;
			h.msn = m->msn;
			h.mo = m->status;
		}
		if (m->op != SR_MSG_RNR)
			rsp_take(tc, m->msn);	/* a failed READ gets no response */
		break;
	default:
		return false;
	}
	if (m->op == SR_MSG_READ_RESP && tc->cur_off == 0) {
		struct rsp_ctx *r = rsp_take(tc, m->msn);

		if (r) {
			m->stag = r->sink_stag;
			m->to = r->sink_to;
			h.stag = m->stag;
			h.to = m->to;
		}
	}
	hl = sr_ext_opcode(h.opcode) ? sr_ext_hdr_encode(p, cap, &h) : ddp_hdr_encode(p, cap, &h);
	if (hl < 0)
		return false;
	{
		size_t ulen = (size_t)hl + blen + chunk;

		s->hdr[0] = (uint8_t)(ulen >> 8);
		s->hdr[1] = (uint8_t)ulen;
		s->iov[0] = (struct iovec){ s->hdr, MPA_ULPDU_LEN_SIZE + (size_t)hl + blen };
		s->niov = 1;
		if (chunk)
			s->iov[s->niov++] = (struct iovec){ m->payload + tc->cur_off, chunk };
		if (tc->crc) {
			uint8_t zero[3] = { 0 };
			struct iovec civ[3] = { s->iov[0], s->niov > 1 ? s->iov[1] : (struct iovec){ 0 },
						{ zero, mpa_pad(ulen) } };

			crc = mpa_crc(civ, 3);
		}
		s->iov[s->niov++] = (struct iovec){ s->trl, mpa_fpdu_trailer(s->trl, ulen, crc) };
	}
	tc->cur_off += chunk;
	s->done = NULL;
	if (tc->cur_off >= m->len && (m->op != SR_MSG_SEND || h.last) &&
	    (m->op != SR_MSG_WRITE || h.last) && (m->op != SR_MSG_READ_RESP || h.last)) {
		s->done = m;
		tc->cur = NULL;
		tc->cur_off = 0;
	}
	return true;
}

/* Queue a pending cumulative ACK ahead of anything else. */
static void ack_flush_locked(struct tcp_chan *tc)
{
	struct sr_msg *a;

	if (!tc->ack_pending)
		return;
	a = msg_alloc(0);
	if (!a)
		return;
	a->op = SR_MSG_ACK;
	a->msn = tc->ack_msn;
	a->status = SR_ST_OK;
	sr_list_add_tail(&tc->txq, &a->link);
	tc->ack_pending = false;
}

/* Write what we can. Caller holds tc->lock; state is UP. */
static void tcp_flush_locked(struct tcp_chan *tc)
{
	for (;;) {
		struct iovec iov[TX_SLOTS * 3];
		int n = 0;
		ssize_t w;

		if (sr_list_empty(&tc->txq) && !tc->cur)
			ack_flush_locked(tc);
		while (tc->slot_tail - tc->slot_head < TX_SLOTS) {
			if (!tc->cur) {
				if (sr_list_empty(&tc->txq))
					break;
				tc->cur = container_of(tc->txq.next, struct sr_msg, link);
				sr_list_del(&tc->cur->link);
				tc->cur_off = 0;
			}
			if (!tx_encode(tc, &tc->slot[tc->slot_tail % TX_SLOTS])) {
				msg_free(tc->cur);
				tc->cur = NULL;
				continue;
			}
			tc->slot_tail++;
		}
		if (tc->slot_head == tc->slot_tail) {
			want(tc, EPOLLIN);
			return;
		}
		for (uint32_t i = tc->slot_head; i != tc->slot_tail; i++) {
			struct tx_fpdu *s = &tc->slot[i % TX_SLOTS];

			for (int k = 0; k < s->niov; k++)
				if (s->iov[k].iov_len)
					iov[n++] = s->iov[k];
		}
		w = writev(tc->pl.fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				want(tc, EPOLLIN | EPOLLOUT);
			/* other errors: the read side sees the loss */
			return;
		}
		while (w > 0 && tc->slot_head != tc->slot_tail) {
			struct tx_fpdu *s = &tc->slot[tc->slot_head % TX_SLOTS];
			bool whole = true;

			for (int k = 0; k < s->niov && w > 0; k++) {
				size_t take = sr_min((size_t)w, s->iov[k].iov_len);

				s->iov[k].iov_base = (uint8_t *)s->iov[k].iov_base + take;
				s->iov[k].iov_len -= take;
				w -= (ssize_t)take;
			}
			for (int k = 0; k < s->niov; k++)
				whole &= s->iov[k].iov_len == 0;
			if (!whole)
				break;
			msg_free(s->done);
			s->done = NULL;
			tc->slot_head++;
		}
	}
}

static int tcp_send(struct sr_chan *ch, struct sr_msg *m)
{
	struct tcp_chan *tc = to_tc(ch);

	pthread_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD || tc->closed) {
		pthread_mutex_unlock(&tc->lock);
		msg_free(m);
		return -ENOTCONN;
	}
	/* Positive ACKs are cumulative: keep only the latest, send it when
	 * the queue drains (one per batch of inbound requests). */
	if (m->op == SR_MSG_ACK && m->status == SR_ST_OK && tc->ext) {
		tc->ack_pending = true;
		tc->ack_msn = m->msn;
		pthread_mutex_unlock(&tc->lock);
		msg_free(m);
		return 0;
	}
	if (m->op == SR_MSG_ACK && m->status == SR_ST_OK) {
		pthread_mutex_unlock(&tc->lock);
		msg_free(m);
		return 0;
	}
	ack_flush_locked(tc);
	sr_list_add_tail(&tc->txq, &m->link);
	pthread_mutex_unlock(&tc->lock);
	return 0;
}

static void tcp_kick(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);

	pthread_mutex_lock(&tc->lock);
	if (tc->state == TS_UP && !tc->closed)
		tcp_flush_locked(tc);
	pthread_mutex_unlock(&tc->lock);
}

static const struct sr_chan_ops tcp_ops = {
	.name = "tcp",
	.send = tcp_send,
	.kick = tcp_kick,
	.close = tcp_close,
	.free = tcp_free,
};

/* ---- receive ------------------------------------------------------------- */

struct rx_out {
	struct sr_msg *m[64];
	int n;
};

/* Append body bytes to an assembling message (realloc as it grows). */
static struct sr_msg *as_append(struct sr_msg *m, const uint8_t *p, uint32_t n)
{
	struct sr_msg *nm;
	size_t len = (size_t)m->len + n;

	if (len > SR_MAX_MSG)
		return NULL;
	nm = realloc(m, sizeof(*m) + len);
	if (!nm)
		return NULL;
	memcpy(nm->payload + nm->len, p, n);
	nm->len = (uint32_t)len;
	return nm;
}

static struct sr_msg *as_start(uint8_t op)
{
	struct sr_msg *m = msg_alloc(0);

	if (m)
		m->op = op;
	return m;
}

/* One whole FPDU's ULPDU. Returns 0, or -EBADMSG for a protocol error
 * (the caller sends TERMINATE and drops the stream). */
static int rx_ulpdu(struct tcp_chan *tc, const uint8_t *u, size_t ulen, struct rx_out *out)
{
	struct ddp_hdr h;
	const uint8_t *body;
	size_t blen;
	ssize_t hl;
	struct sr_msg *m = NULL;

	if (ulen < 2)
		return -EBADMSG;
	if (tc->ext && sr_ext_opcode(u[1] & 0xf))
		hl = sr_ext_hdr_decode(u, ulen, &h);
	else
		hl = ddp_hdr_decode(u, ulen, &h);
	if (hl < 0)
		return -EBADMSG;
	body = u + hl;
	blen = ulen - (size_t)hl;
	if (!h.tagged && h.qn < DDP_QN_COUNT && h.opcode != SR_EXT_ACK && h.opcode != SR_EXT_RNR) {
		/* RFC 5041 §5.3: MSNs per queue, in order. */
		if (h.msn != tc->rx_msn[h.qn])
			return -EBADMSG;
		if (h.last || h.qn != DDP_QN_SEND)
			tc->rx_msn[h.qn]++;
	}

	switch (h.opcode) {
	case RDMAP_SEND:
	case RDMAP_SEND_SE:
	case RDMAP_SEND_INV:
	case RDMAP_SEND_SE_INV:
	case SR_EXT_SEND_IMM:
	case SR_EXT_SEND_SE_IMM:
		if (h.mo == 0) {
			if (tc->as_untagged)
				return -EBADMSG;
			tc->as_untagged = as_start(SR_MSG_SEND);
			if (!tc->as_untagged)
				return -ENOMEM;
			if (h.opcode == RDMAP_SEND_SE || h.opcode == RDMAP_SEND_SE_INV ||
			    h.opcode == SR_EXT_SEND_SE_IMM)
				tc->as_untagged->flags |= SR_MSGF_SE;
			if (h.opcode == RDMAP_SEND_INV || h.opcode == RDMAP_SEND_SE_INV) {
				tc->as_untagged->flags |= SR_MSGF_INV;
				tc->as_untagged->inv_stag = h.inv_stag;
			}
			if (h.opcode == SR_EXT_SEND_IMM || h.opcode == SR_EXT_SEND_SE_IMM) {
				tc->as_untagged->flags |= SR_MSGF_IMM;
				tc->as_untagged->imm = htobe32(h.inv_stag);
			}
		} else if (!tc->as_untagged || h.mo != tc->as_untagged->len) {
			return -EBADMSG;
		}
		if (blen) {
			struct sr_msg *nm = as_append(tc->as_untagged, body, (uint32_t)blen);

			if (!nm)
				return -EBADMSG;
			tc->as_untagged = nm;
		}
		if (h.last) {
			m = tc->as_untagged;
			tc->as_untagged = NULL;
			m->msn = tc->rx_req_msn++;
		}
		break;
	case RDMAP_WRITE:
	case RDMAP_READ_RESP: {
		uint8_t op = h.opcode == RDMAP_WRITE ? SR_MSG_WRITE : SR_MSG_READ_RESP;

		if (!tc->as_tagged) {
			tc->as_tagged = as_start(op);
			if (!tc->as_tagged)
				return -ENOMEM;
			tc->as_op = op;
			tc->as_stag = h.stag;
			tc->as_to = h.to;
		} else if (tc->as_op != op || tc->as_stag != h.stag ||
			   tc->as_to + tc->as_tagged->len != h.to) {
			return -EBADMSG;
		}
		if (blen) {
			struct sr_msg *nm = as_append(tc->as_tagged, body, (uint32_t)blen);

			if (!nm)
				return -EBADMSG;
			tc->as_tagged = nm;
		}
		if (!h.last)
			break;
		m = tc->as_tagged;
		tc->as_tagged = NULL;
		m->stag = tc->as_stag;
		m->to = tc->as_to;
		if (op == SR_MSG_WRITE) {
			m->msn = tc->rx_req_msn++;
		} else {
			/* READ responses come back in the order of the requests
			 * (RFC 5040 §5.1): match the oldest outstanding. */
			if (FIFO_EMPTY(tc, rd_out)) {
				msg_free(m);
				return -EBADMSG;
			}
			m->msn = *FIFO_FRONT(tc, rd_out);
			FIFO_POP(tc, rd_out);
		}
		break;
	}
	case RDMAP_IMM:
	case RDMAP_IMM_SE: {
		struct rdmap_imm im;

		if (rdmap_imm_decode(body, blen, &im) < 0)
			return -EBADMSG;
		m = as_start(SR_MSG_IMM);
		if (!m)
			return -ENOMEM;
		m->flags = SR_MSGF_IMM | (h.opcode == RDMAP_IMM_SE ? SR_MSGF_SE : 0);
		memcpy(&m->imm, im.data, 4);
		m->msn = tc->rx_req_msn++;
		break;
	}
	case RDMAP_READ_REQ: {
		struct rdmap_read_req r;
		struct rsp_ctx rc;

		if (rdmap_read_req_decode(body, blen, &r) < 0)
			return -EBADMSG;
		m = as_start(SR_MSG_READ_REQ);
		if (!m)
			return -ENOMEM;
		m->stag = r.src_stag;
		m->to = r.src_to;
		m->rd_len = r.size;
		m->msn = tc->rx_req_msn++;
		rc = (struct rsp_ctx){ .msn = m->msn, .sink_stag = r.sink_stag, .sink_to = r.sink_to };
		if (!FIFO_PUSH(tc, rsp, &rc)) {
			msg_free(m);
			return -ENOMEM;
		}
		break;
	}
	case RDMAP_ATOMIC_REQ: {
		struct rdmap_atomic_req a;
		struct rsp_ctx rc;

		if (rdmap_atomic_req_decode(body, blen, &a) < 0)
			return -EBADMSG;
		/* IB verbs offer unmasked compare-swap and fetch-add only. */
		if (!((a.op == RDMAP_ATOMIC_CMP_SWAP && a.compare_mask == ~0ULL &&
		       a.add_swap_mask == ~0ULL) ||
		      (a.op == RDMAP_ATOMIC_FETCH_ADD && a.add_swap_mask == 0)))
			return -EBADMSG;
		m = as_start(SR_MSG_ATOMIC_REQ);
		if (!m)
			return -ENOMEM;
		m->atomic_op = a.op == RDMAP_ATOMIC_CMP_SWAP ? SR_ATOMIC_CMP_SWP : SR_ATOMIC_FETCH_ADD;
		m->stag = a.stag;
		m->to = a.to;
		m->add_swap = a.add_swap;
		m->compare = a.compare;
		m->msn = tc->rx_req_msn++;
		rc = (struct rsp_ctx){ .msn = m->msn, .req_id = a.req_id };
		if (!FIFO_PUSH(tc, rsp, &rc)) {
			msg_free(m);
			return -ENOMEM;
		}
		break;
	}
	case RDMAP_ATOMIC_RESP: {
		struct rdmap_atomic_resp a;

		if (rdmap_atomic_resp_decode(body, blen, &a) < 0)
			return -EBADMSG;
		m = as_start(SR_MSG_ATOMIC_RESP);
		if (!m)
			return -ENOMEM;
		m->msn = a.req_id;
		m->orig = a.orig;
		break;
	}
	case RDMAP_TERMINATE: {
		struct rdmap_term t;

		if (rdmap_term_decode(body, blen, &t) < 0)
			return -EBADMSG;
		m = as_start(SR_MSG_TERMINATE);
		if (!m)
			return -ENOMEM;
		m->msn = SR_MSN_OLDEST;
		m->status = (uint8_t)status_of_term(&t);
		sr_dbg("tcp %p: TERMINATE layer %u etype %u ecode %#x", (void *)tc,
		       t.layer, t.etype, t.ecode);
		break;
	}
	case SR_EXT_ACK:
		if (h.mo == SR_ST_BYE) {
			tc->peer_bye = true;
			break;
		}
		/* fall through */
	case SR_EXT_RNR:
		m = as_start(h.opcode == SR_EXT_ACK ? SR_MSG_ACK : SR_MSG_RNR);
		if (!m)
			return -ENOMEM;
		m->msn = h.msn;
		m->status = (uint8_t)h.mo;
		break;
	default:
		return -EBADMSG;
	}
	if (m)
		out->m[out->n++] = m;
	return 0;
}

/* Parse whole FPDUs out of rbuf. Caller holds tc->lock. */
static int rx_parse(struct tcp_chan *tc, struct rx_out *out)
{
	size_t off = 0;
	int ret = 0;

	while (out->n < (int)ARRAY_SIZE(out->m)) {
		struct mpa_fpdu f;
		ssize_t n = mpa_fpdu_decode(tc->rbuf + off, tc->rlen - off, tc->crc, &f);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			ret = -EBADMSG;
			break;
		}
		ret = rx_ulpdu(tc, f.ulpdu, f.ulpdu_len, out);
		if (ret)
			break;
		off += (size_t)n;
	}
	memmove(tc->rbuf, tc->rbuf + off, tc->rlen - off);
	tc->rlen -= off;
	return ret;
}

/* Read and deliver. Called from the progress thread. */
static void tcp_rx(struct tcp_chan *tc)
{
	for (;;) {
		struct rx_out out = { .n = 0 };
		struct sr_qp *qp;
		ssize_t n = 0;
		int perr;
		bool eof = false;

		pthread_mutex_lock(&tc->lock);
		if (tc->state != TS_UP || tc->closed) {
			pthread_mutex_unlock(&tc->lock);
			return;
		}
		if (tc->rlen < RX_BUF) {
			n = recv(tc->pl.fd, tc->rbuf + tc->rlen, RX_BUF - tc->rlen, MSG_DONTWAIT);
			if (n > 0)
				tc->rlen += (size_t)n;
			else if (n == 0)
				eof = true;
			else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				eof = true;
		}
		perr = rx_parse(tc, &out);
		qp = tc->qp;
		pthread_mutex_unlock(&tc->lock);

		for (int i = 0; i < out.n; i++)
			if (!qp_rx(qp, out.m[i]))
				msg_free(out.m[i]);
		if (perr) {
			/* RFC 5040 §5.3: a malformed frame ends the stream
			 * with TERMINATE. */
			struct sr_msg *t = msg_alloc(0);

			if (t) {
				t->op = SR_MSG_TERMINATE;
				t->status = SR_ST_REM_OP;
				tcp_send(&tc->ch, t);
				tcp_kick(&tc->ch);
			}
			tcp_fail(tc, "protocol error");
			return;
		}
		tcp_kick(&tc->ch);
		if (eof) {
			tcp_fail(tc, n == 0 ? "peer closed the stream" : strerror(errno));
			return;
		}
		if (n <= 0 && out.n < (int)ARRAY_SIZE(out.m))
			return;
	}
}

/* ---- connection setup ------------------------------------------------------ */

static bool want_crc(void)
{
	const char *v = getenv("SOFTRNIC_MPA_CRC");

	return v && *v && *v != '0';
}

static void hs_frame(struct tcp_chan *tc, bool reply, bool reject)
{
	uint8_t pd[SR_HELLO_LEN];
	struct sr_hello hello = {
		.version = 1, .flags = SR_HELLO_F_EXT,
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

/* The stream is up: start moving what was posted meanwhile. */
static void tcp_up_locked(struct tcp_chan *tc)
{
	set_state(tc, TS_UP);
	progress_timer_cancel(tc->tctx->pg, &tc->timer);
	want(tc, EPOLLIN);
	tcp_flush_locked(tc);
}

static void dial_start(struct tcp_chan *tc);

static void dial_retry_or_fail(struct tcp_chan *tc, const char *why)
{
	int fd;

	if (progress_now_ns() >= tc->deadline) {
		pthread_mutex_unlock(&tc->lock);
		tcp_fail(tc, why);
		pthread_mutex_lock(&tc->lock);
		return;
	}
	/* Try again shortly: the peer's process may not be there yet. */
	fd = tc->pl.fd;
	pthread_mutex_unlock(&tc->lock);
	progress_del(tc->tctx->pg, &tc->pl);
	close(fd);
	pthread_mutex_lock(&tc->lock);
	tc->pl.fd = -1;
	tc->events = 0;
	tc->rlen = 0;
	set_state(tc, TS_DIALING);
	progress_timer_arm(tc->tctx->pg, &tc->timer, RETRY_NS);
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
		pthread_mutex_unlock(&tc->lock);
		tcp_fail(tc, "peer rejected the connection (no such QP)");
		pthread_mutex_lock(&tc->lock);
		return;
	}
	tc->ext = sr_hello_decode(f.pd, f.pd_len, &h) > 0 && (h.flags & SR_HELLO_F_EXT) &&
		  h.src_qpn == tc->peer_qpn;
	tc->ch.acks = tc->ext;
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
	pthread_mutex_lock(&qp->lock);
	if (qp->state >= IBV_QPS_RTR && qp->state <= IBV_QPS_SQE && !qp->chan &&
	    qp->attr.dest_qp_num == h->src_qpn) {
		pthread_mutex_unlock(&qp->lock);
		return qp;
	}
	/* Not there yet (the peer may dial before we reach RTR): hold. */
	*wait = qp->state < IBV_QPS_RTR && !qp->chan;
	pthread_mutex_unlock(&qp->lock);
	qp_put(qp);
	return NULL;
}

/* Attach an accepted stream to its QP and answer. tc->lock held. */
static bool accept_try(struct tcp_chan *tc)
{
	struct sr_hello h = { .version = 1, .src_qpn = tc->peer_qpn, .dst_qpn = tc->local_qpn };
	struct sr_qp *qp;
	bool wait;

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
			pthread_mutex_unlock(&tc->lock);
			tcp_fail(tc, "rejected");
			pthread_mutex_lock(&tc->lock);
		}
		return false;
	}
	tc->ird = qp->attr.max_dest_rd_atomic;
	tc->ord = qp->attr.max_rd_atomic;
	tc->qp = qp;
	chan_get(&tc->ch);			/* the QP's reference */
	pthread_mutex_unlock(&tc->lock);
	pthread_mutex_lock(&qp->lock);
	qp->chan = &tc->ch;
	pthread_mutex_unlock(&qp->lock);
	pthread_mutex_lock(&tc->lock);
	hs_frame(tc, true, false);
	hs_write(tc);
	tcp_up_locked(tc);
	pthread_mutex_unlock(&tc->lock);
	/* Work posted before the stream existed can go now. */
	pthread_mutex_lock(&qp->lock);
	qp_sq_progress_locked(qp);
	pthread_mutex_unlock(&qp->lock);
	qp_kick(qp);
	qp_put(qp);
	pthread_mutex_lock(&tc->lock);
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
		pthread_mutex_unlock(&tc->lock);
		tcp_fail(tc, "not a softrnic hello");
		pthread_mutex_lock(&tc->lock);
		return;
	}
	tc->local_qpn = h.dst_qpn;
	tc->peer_qpn = h.src_qpn;
	tc->ext = (h.flags & SR_HELLO_F_EXT) != 0;
	tc->ch.acks = tc->ext;
	tc->crc = f.crc || want_crc();
	hs_consume(tc, &f);
	accept_try(tc);
}

static void tcp_on_event(struct sr_pollable *p, uint32_t events)
{
	struct tcp_chan *tc = container_of(p, struct tcp_chan, pl);

	pthread_mutex_lock(&tc->lock);
	switch (tc->state) {
	case TS_DIALING:
		on_dialing(tc, events);
		break;
	case TS_REQ_SENT:
		if (tc->fail_after_hs) {
			if (hs_write(tc) || (events & (EPOLLHUP | EPOLLERR))) {
				pthread_mutex_unlock(&tc->lock);
				tcp_fail(tc, "rejected");
				return;
			}
			break;
		}
		on_req_sent(tc, events);
		break;
	case TS_ACCEPTED:
		on_accepted(tc, events);
		break;
	case TS_HELD: {
		char b;

		if (recv(tc->pl.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
			pthread_mutex_unlock(&tc->lock);
			tcp_fail(tc, "peer gave up");
			return;
		}
		break;
	}
	case TS_UP:
		if (events & EPOLLOUT)
			tcp_flush_locked(tc);
		pthread_mutex_unlock(&tc->lock);
		if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
			tcp_rx(tc);
		return;
	case TS_DEAD:
		break;
	}
	pthread_mutex_unlock(&tc->lock);
}

static void tcp_on_timer(struct sr_timer *t)
{
	struct tcp_chan *tc = container_of(t, struct tcp_chan, timer);

	pthread_mutex_lock(&tc->lock);
	if (tc->state == TS_DIALING && tc->pl.fd < 0) {
		dial_start(tc);
	} else if (tc->state != TS_UP && tc->state != TS_DEAD) {
		pthread_mutex_unlock(&tc->lock);
		tcp_fail(tc, "connection setup timed out");
		return;
	}
	pthread_mutex_unlock(&tc->lock);
}

static void tune_socket(int fd, const struct sr_qp *qp)
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

/* tc->lock held. */
static void dial_start(struct tcp_chan *tc)
{
	int fd = socket(tc->peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		progress_timer_arm(tc->tctx->pg, &tc->timer, RETRY_NS);
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
		progress_timer_arm(tc->tctx->pg, &tc->timer, RETRY_NS);
		return;
	}
	/* The overall deadline for the handshake. */
	progress_timer_arm(tc->tctx->pg, &tc->timer,
			   tc->deadline > progress_now_ns() ? tc->deadline - progress_now_ns() : 0);
}

static void tcp_accept(struct sr_pollable *p, uint32_t events)
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
		pthread_mutex_lock(&tc->lock);
		tc->state = TS_ACCEPTED;
		tc->events = EPOLLIN;
		tc->deadline = progress_now_ns() + HS_TIMEOUT_NS;
		if (progress_add(t->pg, &tc->pl, EPOLLIN)) {
			pthread_mutex_unlock(&tc->lock);
			tcp_fail(tc, "epoll");
			continue;
		}
		progress_timer_arm(t->pg, &tc->timer, HS_TIMEOUT_NS);
		pthread_mutex_unlock(&tc->lock);
	}
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
	pthread_mutex_lock(&qp->lock);
	peer_qpn = qp->attr.dest_qp_num;
	global = qp->attr.ah_attr.is_global;
	if (global)
		peer_gid = qp->attr.ah_attr.grh.dgid;
	n = dev_query_gids(gids, SR_GID_TBL_LEN);
	if (global && qp->attr.ah_attr.grh.sgid_index < n)
		me = gids[qp->attr.ah_attr.grh.sgid_index];
	pthread_mutex_unlock(&qp->lock);

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
	pthread_mutex_lock(&tc->lock);
	tc->dialer = true;
	tc->qp = qp;
	tc->local_qpn = my_qpn;
	tc->peer_qpn = peer_qpn;
	tc->crc = want_crc();
	tc->ird = qp->attr.max_dest_rd_atomic;
	tc->ord = qp->attr.max_rd_atomic;
	gid_to_sockaddr(&peer_gid, (uint16_t)(peer_qpn >> 8), me.ifindex, &tc->peer, &tc->peerlen);
	tc->deadline = progress_now_ns() + HS_TIMEOUT_NS;
	tc->state = TS_DIALING;
	pthread_mutex_unlock(&tc->lock);

	pthread_mutex_lock(&qp->lock);
	qp->chan = &tc->ch;
	pthread_mutex_unlock(&qp->lock);

	pthread_mutex_lock(&tc->lock);
	dial_start(tc);
	pthread_mutex_unlock(&tc->lock);
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
		pthread_mutex_lock(&held[i]->lock);
		if (held[i]->state == TS_HELD)
			accept_try(held[i]);
		pthread_mutex_unlock(&held[i]->lock);
		chan_put(&held[i]->ch);
	}
}

void chan_tcp_ctx_close(struct sr_context *ctx)
{
	struct sr_tcp_ctx *t = ctx->tcp;

	if (!t)
		return;
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
	progress_del(t->pg, &t->lpl);
	progress_destroy(t->pg);
	pthread_mutex_destroy(&t->lock);
	free(t);
	ctx->tcp = NULL;
}
