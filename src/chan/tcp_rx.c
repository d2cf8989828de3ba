/* The TCP channel's receive side: FPDUs from the stream into sr_msg,
 * delivered to the core from the progress thread. */
#include "chan/tcp_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- receive ------------------------------------------------------------- */

/* The stream's bytes come from the socket, or from the ring once the peer
 * moved there (shm.h): same conventions as recv and readv. */
ssize_t io_recv(struct tcp_chan *tc, void *buf, size_t len)
{
	if (tc->shm_rx) {
		struct iovec v = { buf, len };

		return shm_recv(tc, &v, 1, false);
	}
	return recv(tc->pl.fd, buf, len, MSG_DONTWAIT);
}

/* iov: the application's memory */
ssize_t io_readv(struct tcp_chan *tc, const struct iovec *iov, int n)
{
	if (tc->shm_rx)
		return shm_recv(tc, iov, n, true);
	return direct_readv(tc->pl.fd, iov, n);
}

/* Append body bytes to an assembling message (realloc as it grows). */
static struct sr_msg *as_append(struct sr_msg *m, const uint8_t *p, uint32_t n)
{
	struct sr_msg *nm;
	size_t len = (size_t)m->len + n;

	if (len > SR_MAX_MSG)
		return NULL;
	nm = msg_grow(m, (uint32_t)len);
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

/* Bookkeeping for one tagged segment (WRITE or READ_RESP): checks that
 * it (seglen payload bytes) continues the message in progress, and makes
 * the core message for it, with room for len payload bytes. Segments are delivered one by one
 * (SR_MSGF_MORE on all but the last), never assembled. */
struct sr_msg *tagged_msg(struct tcp_chan *tc, const struct ddp_hdr *h, uint32_t seglen,
			  uint32_t len)
{
	uint8_t op = h->opcode == RDMAP_WRITE ? SR_MSG_WRITE : SR_MSG_READ_RESP;
	struct sr_msg *m;
	uint32_t msn;

	if (!tc->as_active) {
		tc->as_active = true;
		tc->as_op = op;
		tc->as_stag = h->stag;
		tc->as_to = h->to;
	} else if (tc->as_op != op || tc->as_stag != h->stag || tc->as_to != h->to) {
		return NULL;		/* segments of a message are in order */
	}
	if (op == SR_MSG_WRITE) {
		msn = tc->rx_req_msn;
	} else {
		/* READ responses come back in the order of the requests (RFC
		 * 5040 §5.1): they answer the oldest outstanding READ. */
		sr_mutex_lock(&tc->lock);
		if (FIFO_EMPTY(tc, rd_out)) {
			sr_mutex_unlock(&tc->lock);
			return NULL;
		}
		msn = *FIFO_FRONT(tc, rd_out);
		if (h->last)
			FIFO_POP(tc, rd_out);
		sr_mutex_unlock(&tc->lock);
	}
	m = msg_alloc(len);
	if (!m)
		return NULL;
	m->op = op;
	m->msn = msn;
	m->stag = h->stag;
	/* a READ sink offset counts from the sink TO we sent, 0 */
	m->to = h->to;
	if (!h->last)
		m->flags |= SR_MSGF_MORE;
	tc->as_to += seglen;
	if (h->last) {
		tc->as_active = false;
		if (op == SR_MSG_WRITE)
			tc->rx_req_msn++;
	}
	return m;
}

/* An answer to request msn came in (answers come in request order). It
 * is noted here (rx_lock) and told to the transmit side once per pass,
 * under the channel lock the pass takes anyway (ans_apply_locked). */
void note_answer(struct tcp_chan *tc, uint32_t msn)
{
	if (!tc->rx_ans_new || (int32_t)(msn - tc->rx_ans_got) > 0)
		tc->rx_ans_got = msn;
	tc->rx_ans_new = true;
}

/* Caller holds both locks. */
void ans_apply_locked(struct tcp_chan *tc)
{
	if (!tc->rx_ans_new)
		return;
	if ((int32_t)(tc->rx_ans_got + 1 - tc->rx_ans_msn) > 0)
		tc->rx_ans_msn = tc->rx_ans_got + 1;
	tc->rx_ans_new = false;
}

/* What a SEND's opcode and header say about it (RFC 5040 §4.3; softrnic's
 * SEND with immediate carries imm_data in RsvdULP, srext.h). */
void send_flags(struct sr_msg *m, const struct ddp_hdr *h)
{
	if (h->opcode == RDMAP_SEND_SE || h->opcode == RDMAP_SEND_SE_INV ||
	    h->opcode == SR_EXT_SEND_SE_IMM)
		m->flags |= SR_MSGF_SE;
	if (h->opcode == RDMAP_SEND_INV || h->opcode == RDMAP_SEND_SE_INV) {
		m->flags |= SR_MSGF_INV;
		m->inv_stag = h->inv_stag;
	}
	if (h->opcode == SR_EXT_SEND_IMM || h->opcode == SR_EXT_SEND_SE_IMM) {
		m->flags |= SR_MSGF_IMM;
		m->imm = htobe32(h->inv_stag);
	}
}

/* Queue what an inbound READ or atomic request needs for its response. */
static bool rsp_push(struct tcp_chan *tc, const struct rsp_ctx *rc)
{
	bool ok;

	sr_mutex_lock(&tc->lock);
	ok = FIFO_PUSH(tc, rsp, rc);
	sr_mutex_unlock(&tc->lock);
	return ok;
}

void ack_fold(struct tcp_chan *tc, struct rx_out *out, uint32_t msn)
{
	if (!out->ack || (int32_t)(msn - out->ack_msn) > 0)
		out->ack_msn = msn;
	out->ack = true;
	note_answer(tc, msn);
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
		if (h.mo == 0 && h.last) {
			/* a whole SEND in one FPDU: one block, one copy */
			if (tc->as_untagged)
				return -EBADMSG;
			m = msg_alloc((uint32_t)blen);
			if (!m)
				return -ENOMEM;
			m->op = SR_MSG_SEND;
			send_flags(m, &h);
			memcpy(m->payload, body, blen);
			m->msn = tc->rx_req_msn++;
			break;
		}
		if (h.mo == 0) {
			if (tc->as_untagged)
				return -EBADMSG;
			tc->as_untagged = as_start(SR_MSG_SEND);
			if (!tc->as_untagged)
				return -ENOMEM;
			send_flags(tc->as_untagged, &h);
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
	case RDMAP_READ_RESP:
		m = tagged_msg(tc, &h, (uint32_t)blen, (uint32_t)blen);
		if (!m)
			return -EBADMSG;
		memcpy(m->payload, body, blen);
		break;
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
		if (!rsp_push(tc, &rc)) {
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
		if (!rsp_push(tc, &rc)) {
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
		if (h.qn == SR_EXT_QN_AWRITE) {
			struct sr_awrite a;

			if (sr_awrite_decode(body, blen, &a) < 0)
				return -EBADMSG;
			m = as_start(SR_MSG_ATOMIC_WRITE);
			if (!m)
				return -ENOMEM;
			m->stag = h.inv_stag;
			m->to = a.to;
			memcpy(&m->add_swap, a.data, sizeof(a.data));
			/* numbered in order with the other requests; the
			 * header's MSN says the same, for the logs */
			m->msn = tc->rx_req_msn++;
			break;
		}
		if (h.qn == SR_EXT_QN_XRC) {
			m = as_start(SR_MSG_XRC);
			if (!m)
				return -ENOMEM;
			m->srqn = h.mo;
			break;
		}
		if (h.mo == SR_ST_BYE) {
			tc->peer_bye = true;
			break;
		}
		if (h.mo >= SR_ST_SHM_SWITCH && h.mo <= SR_ST_SHM_OFFER)
			return shm_ctl(tc, (uint8_t)h.mo, body, blen) ? -EBADMSG : 0;
		if (h.mo == SR_ST_OK && !out->answers) {
			ack_fold(tc, out, h.msn);
			return 0;
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
		out_add(out, m);
	if (m && (m->op == SR_MSG_ACK || m->op == SR_MSG_ATOMIC_RESP ||
		  (m->op == SR_MSG_READ_RESP && !(m->flags & SR_MSGF_MORE))))
		note_answer(tc, m->msn);
	return 0;
}

/* A SEND of one small segment, wholly in rbuf: the staged path delivers
 * it with one QP lock (receive WQE taken and filled together), where
 * direct placement takes the WQE under one and delivers under another. */
#define STAGED_SEND_MAX 256
static bool small_whole_send(const struct tcp_chan *tc, const uint8_t *p, size_t avail,
			     size_t ulen)
{
	return !tc->sd.active && (p[2] & 0x40) && ulen <= STAGED_SEND_MAX &&
	       avail >= mpa_fpdu_len(ulen);
}

/* direct_begin/send_begin work on an FPDU at the start of rbuf: drop
 * what was consumed before it (only then: small FPDUs never move). */
static void rbuf_front(struct tcp_chan *tc, size_t *off)
{
	if (!*off)
		return;
	memmove(tc->rbuf, tc->rbuf + *off, tc->rlen - *off);
	tc->rlen -= *off;
	*off = 0;
}

/* May a SEND take its receive WQE before what out holds is delivered?
 * Only if out holds nothing but SENDs placed whole into the WQEs they
 * took, in order, that change nothing else when delivered (no error, no
 * invalidation): then a read of many small SENDs is delivered in one
 * batch, not one per pass. */
static bool sends_only(const struct rx_out *out)
{
	for (int i = 0; i < out->n; i++) {
		const struct sr_msg *m = out->m[i];

		if (m->op != SR_MSG_SEND || !(m->flags & SR_MSGF_PLACED) ||
		    (m->flags & (SR_MSGF_PLACE_ERR | SR_MSGF_TOO_LONG | SR_MSGF_INV)))
			return false;
	}
	return true;
}

/* Parse FPDUs out of rbuf (only the progress thread touches rx state). */
static int rx_parse(struct tcp_chan *tc, struct sr_qp *qp, struct rx_out *out)
{
	size_t off = 0;
	int ret = 0;

	while (out->n < (int)ARRAY_SIZE(out->m) && !tc->dr.active) {
		const uint8_t *p = tc->rbuf + off;
		size_t avail = tc->rlen - off, ulen;
		struct mpa_fpdu f;
		ssize_t n;

		if (avail < MPA_ULPDU_LEN_SIZE + DDP_TAGGED_HDR_LEN)
			break;

		ulen = (size_t)p[0] << 8 | p[1];
		/* A tagged segment not wholly here yet goes straight to its
		 * target; deliver what came before it first, in order. */
		if ((p[2] & 0x80) && direct_ok(tc) && ulen >= DDP_TAGGED_HDR_LEN &&
		    avail < mpa_fpdu_len(ulen)) {
			struct ddp_hdr h;

			if (out->n || out->ack)
				break;
			if (ddp_hdr_decode(p + MPA_ULPDU_LEN_SIZE, ulen, &h) != DDP_TAGGED_HDR_LEN) {
				ret = -EBADMSG;
				break;
			}
			rbuf_front(tc, &off);
			n = direct_begin(tc, qp, &h, DDP_TAGGED_HDR_LEN, ulen, out);
			if (n == -EAGAIN)
				goto staged;
			if (n < 0) {
				ret = (int)n;
				break;
			}
			off += (size_t)n;
			continue;
		}
		/* SEND segments go straight into the receive WQE (only once
		 * the whole header is here: it names the queue and MO). */
		if (!(p[2] & 0x80) && direct_ok(tc) && ulen >= DDP_UNTAGGED_HDR_LEN &&
		    avail >= MPA_ULPDU_LEN_SIZE + DDP_UNTAGGED_HDR_LEN && !tc->as_untagged) {
			uint8_t op = p[3] & 0xf;
			struct ddp_hdr h;
			ssize_t hl;

			if ((op == RDMAP_SEND || op == RDMAP_SEND_SE || op == RDMAP_SEND_INV ||
			     op == RDMAP_SEND_SE_INV || op == SR_EXT_SEND_IMM || op == SR_EXT_SEND_SE_IMM) &&
			    !(small_whole_send(tc, p, avail, ulen))) {
				if (!tc->sd.active && !sends_only(out))
					break;	/* deliver what came first */
				hl = sr_ext_opcode(op) ? sr_ext_hdr_decode(p + 2, ulen, &h)
						       : ddp_hdr_decode(p + 2, ulen, &h);
				if (hl != DDP_UNTAGGED_HDR_LEN) {
					ret = -EBADMSG;
					break;
				}
				rbuf_front(tc, &off);
				n = send_begin(tc, qp, &h, (size_t)hl, ulen, out);
				if (n == -EAGAIN)
					goto staged;
				if (n < 0) {
					ret = (int)n;
					break;
				}
				off += (size_t)n;
				continue;
			}
		}
staged:
		/* (rbuf_front may have moved the FPDU to the start) */
		p = tc->rbuf + off;
		avail = tc->rlen - off;
		n = mpa_fpdu_decode(p, avail, tc->crc, &f);
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

/* RFC 5040 §5.3: a malformed frame ends the stream with TERMINATE. The
 * reason to end it, for the caller (after rx_lock). */
static const char *rx_terminate(struct tcp_chan *tc)
{
	struct sr_msg *t = msg_alloc(0);

	if (t) {
		t->op = SR_MSG_TERMINATE;
		t->status = SR_ST_REM_OP;
		tcp_send(&tc->ch, t);
		tcp_kick_now(tc);
	}
	return "protocol error";
}

/* Read and deliver, holding rx_lock (the receive state's owner); the
 * channel lock guards only what tx shares. Returns why the stream must
 * end, or NULL: the caller ends it after dropping rx_lock, since ending it
 * waits for the progress thread, which may be waiting for rx_lock. */
/* The initiator's first bytes are in: what we held back may go. */
static void open_tx_gate(struct tcp_chan *tc)
{
	sr_mutex_lock(&tc->lock);
	tc->tx_gate = false;
	sr_mutex_unlock(&tc->lock);
	tcp_kick_now(tc);
}

/* How many bytes to read into rbuf now. From a socket, all it takes (one
 * system call). From the ring, a few KiB beyond what is staged, or as
 * much as the first FPDU staged needs: each pass delivers at most
 * ARRAY_SIZE(rx_out.m) messages and moves what it did not parse to the
 * front of rbuf, so reading 100 KiB of small messages at once costs a
 * memmove of most of it per pass. */
#define SHM_RX_CHUNK	4096U
static size_t rx_want(const struct tcp_chan *tc)
{
	size_t lim = SHM_RX_CHUNK;

	if (!tc->shm_rx)
		return RX_BUF - tc->rlen;
	if (tc->rlen >= MPA_ULPDU_LEN_SIZE)
		lim = sr_max(lim, mpa_fpdu_len((size_t)tc->rbuf[0] << 8 | tc->rbuf[1]));
	return lim > tc->rlen ? sr_min(lim - tc->rlen, RX_BUF - tc->rlen) : 0;
}

/* Is there nothing to write but a positive ACK? tc->lock held. */
bool only_ack_owed(const struct tcp_chan *tc)
{
	return sr_list_empty(&tc->txq) && !tc->cur && tc->slot_head == tc->slot_tail;
}

/* The end of a kicked pass (tc->rx_kicked): the stream's program thread
 * had left polling, likely to watch memory for what this pass placed, and
 * replies as soon as it sees it. A lone positive ACK owed then waits
 * SHM_KICK_ACK_NS to ride with that reply, as after a poller's pass;
 * sent at once, the peer's poller would take it alone and move on to
 * watching memory itself, and the peer's next message would need a kick
 * in its turn, and so on. True if it waits (the timer sends it). */
static bool kicked_defer(struct tcp_chan *tc, bool owed_before)
{
	bool defer;

	sr_mutex_lock(&tc->lock);
	defer = ((tc->rx_kicked && tc->poll_owned) || (!tc->shm_rx && poller_active(tc))) &&
		!owed_before && tc->state == TS_UP &&
		!tc->closed && tc->ack_pending && only_ack_owed(tc);
	tc->rx_kicked = false;
	if (defer)
		tcp_timer_arm_locked(tc, SHM_KICK_ACK_NS);
	sr_mutex_unlock(&tc->lock);
	return defer;
}

/* Parts of a WRITE's segments that the peer copies for us (shm help) are
 * still under way, and this round delivers something other than such a
 * segment (a peer that sends anything before a WRITE's last segment):
 * they are settled first, and a part that could not be placed fails the
 * WRITE (the segments here, or the next one). rx_lock held. */
static void help_settle_out(struct tcp_chan *tc, struct rx_out *out)
{
	bool only_more = true;	/* (an ACK answers our requests: no order with these) */

	for (int i = 0; i < out->n && only_more; i++)
		only_more = out->m[i]->op == SR_MSG_WRITE && (out->m[i]->flags & SR_MSGF_MORE);
	if (only_more || !shm_help_drain(tc))
		return;
	for (int i = 0; i < out->n; i++)
		if (out->m[i]->op == SR_MSG_WRITE)
			out->m[i]->flags |= SR_MSGF_PLACE_ERR;
}

/* How many more rounds a poller's pass runs, after one that delivered,
 * while more input is here already (rx_more_now); while a WRITE is under
 * way, up to POLL_MORE_WRITE (an FPDU or more a round: 64 MiB or more). */
#define POLL_MORE_ROUNDS	8
#define POLL_MORE_WRITE		1024

/* poller: a program thread polling an empty CQ. It returns as soon as a
 * read delivered something (the program wants its completion), and on a
 * poll-owned stream leaves the ACK owed pending: the program's reply, if
 * it posts one, carries it in the same write; its next empty poll, or the
 * progress thread's check (POLL_CHECK_NS), sends it otherwise. */
static const char *tcp_rx_locked(struct tcp_chan *tc, bool poller)
{
	unsigned int more = 0;		/* a poller's rounds after delivering */
	unsigned int rounds = 0;	/* a long stream flushes answers now
					 * and then, not only once drained */
	bool owed_before;		/* an ACK already waited one poll: it
					 * waits no longer (a one-way stream
					 * would starve its sender) */

	bool locked = true;		/* (the first round's check is made
					 * under this lock) */

	sr_mutex_lock(&tc->lock);
	owed_before = tc->ack_pending;
	tc->rx_poller = poller;

	for (;;) {
		struct rx_out out;	/* (m[] not zeroed: 512 bytes a pass) */
		struct sr_qp *qp;
		ssize_t n = 0;
		int perr = 0, derr = 0;
		bool eof = false, progress = false, got, small_next = false, quiet, wmore;
		size_t rwant;

		out.n = 0;
		out.ack = out.answers = false;
		out.ack_msn = 0;
		if (!locked)
			sr_mutex_lock(&tc->lock);
		locked = false;
		if (tc->state != TS_UP || tc->closed) {
			sr_mutex_unlock(&tc->lock);
			return NULL;
		}
		if (!poller && rounds && rounds % POLL_YIELD_ROUNDS == 0 && leave_to_poller_locked(tc)) {
			sr_mutex_unlock(&tc->lock);
			tcp_kick_now(tc);	/* (answers owed so far) */
			return NULL;
		}
		qp = tc->qp;
		sr_mutex_unlock(&tc->lock);
		/* Back-pressure: with too much parked at the QP, read no more
		 * until receives are posted (tcp_kick resumes). */
		if (!tc->dr.active && qp_rx_congested(qp)) {
			sr_mutex_lock(&tc->lock);
			tc->rx_paused = true;
			tx_busy_locked(tc);
			want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
			sr_mutex_unlock(&tc->lock);
			tcp_kick_now(tc);	/* answers owed so far go now */
			return NULL;
		}

		/* On shm, bytes already here go first: a header that came
		 * behind a message delivered last round starts its direct
		 * placement before the next read, which would otherwise pull
		 * the payload into rbuf rather than into its target. */
		if (tc->shm_rx && !tc->dr.active && tc->rlen) {
			bool was = tc->dr.active;

			perr = rx_parse(tc, qp, &out);
			progress = tc->dr.active != was;
		}
		if (perr) {
			/* (ends the stream below) */
		} else if (tc->dr.active) {
			derr = direct_step(tc, &out);
			progress |= derr > 0;
			if (derr < 0)
				eof = true;
		} else if (tc->rlen < RX_BUF && !(rwant = rx_want(tc))) {
			/* (on shm: enough staged for this round) */
		} else if (tc->rlen < RX_BUF) {
			bool boundary = tc->shm_rx && !tc->rlen && !tc->as_untagged && !tc->as_active &&
					!tc->sd.active;
			/* At a message boundary on shm, small messages first
			 * (a read of stream bytes stops in front of one) */
			int taken = boundary ? small_run(tc, &out) : 0;

			if (taken > 0)
				progress = true;
			else if (taken == -EPIPE)
				eof = true;
			else if (taken < 0)
				perr = taken;
			else
				n = io_recv(tc, tc->rbuf + tc->rlen, rwant);
			if (taken) {
				/* (done) */
			} else if (n < 0 && errno == ENOMSG) {
				/* A small message next: one that came after our
				 * look is taken in the next round; behind staged
				 * bytes, once they are delivered (bytes that never
				 * make whole FPDUs before it, or a message in
				 * progress: a broken peer). */
				small_next = true;
				if (boundary)
					progress = true;
				else if (!tc->rlen)
					perr = -EBADMSG;
			} else if (n > 0) {
				tc->rlen += (size_t)n;
				progress = true;
				if (!tc->ext)
					atomic_store_explicit(&tc->rx_last_ns, progress_now_ns(),
							      memory_order_relaxed);
				if (tc->tx_gate)
					open_tx_gate(tc);
			} else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
				eof = true;
			}
		}
		if (!tc->dr.active && !perr)
			perr = rx_parse(tc, qp, &out);
		if (small_next && tc->rlen && !out.n && !out.ack && !tc->dr.active && !perr)
			perr = -EBADMSG;	/* (a partial FPDU, then a small one) */
		if (tc->shm_rx) {
			uint64_t aw;

			/* (the peer's lone ACK, its ring's ack word: answers
			 * nothing out of order, shm_send_ack) */
			if (shm_ack_peek(tc, &aw)) {
				shm_ack_take(tc, aw);
				ack_fold(tc, &out, (uint32_t)aw);
			}
		}
		got = out.n || out.ack;
		if (got)
			progress = true;

		if (got && tc->shm_rx && shm_pulls_sent(tc)) {
			/* a payload of ours the peer found gone fails its WQE
			 * before the peer's answer to it settles it */
			sr_mutex_lock(&tc->lock);
			shm_faults_locked(tc);
			sr_mutex_unlock(&tc->lock);
			if (tc->nfaults)
				tcp_tx_faults(tc);
		}
		if (got && tc->rx_nosleep) {
			for (int i = 0; i < out.n; i++) {
				uint8_t op = out.m[i]->op;

				if (op == SR_MSG_READ_REQ || op == SR_MSG_ATOMIC_REQ ||
				    op == SR_MSG_WRITE)
					tc->rx_onesided = true;
				else if (op == SR_MSG_SEND || op == SR_MSG_IMM)
					tc->rx_twosided = true;
			}
		}
		quiet = true;	/* (ACKs and one-sided requests only) */
		wmore = false;	/* (a WRITE's segment, more to come) */
		for (int i = 0; i < out.n && poller; i++) {
			uint8_t op = out.m[i]->op;

			quiet &= op == SR_MSG_WRITE || op == SR_MSG_READ_REQ ||
				 op == SR_MSG_ATOMIC_REQ || op == SR_MSG_ATOMIC_WRITE;
			wmore = op == SR_MSG_WRITE && (out.m[i]->flags & SR_MSGF_MORE);
		}
		if (got && tc->shm_rx && shm_help_pending(tc))
			help_settle_out(tc, &out);
		if (got)
			qp_rx_many(qp, out.m, out.n, out.ack ? &out.ack_msn : NULL);
		if (got && !poller && !out.n && !tc->shm_rx && qp_awaits_nothing(qp)) {
			sr_mutex_lock(&tc->lock);
			poll_release_locked(tc);
			sr_mutex_unlock(&tc->lock);
		}
		if (tc->rx_ans_new && !(poller && got && !eof && !perr)) {
			/* (a poller's pass does it below, with its other look) */
			sr_mutex_lock(&tc->lock);
			ans_apply_locked(tc);
			sr_mutex_unlock(&tc->lock);
		}
		if (perr)
			return rx_terminate(tc);
		if (poller && got && !eof && quiet && rx_more_now(tc) && qp_awaits_nothing(qp) &&
		    (++more <= POLL_MORE_ROUNDS ||
		     ((wmore || rx_write_under_way(tc)) && more <= POLL_MORE_WRITE))) {
			/* This round brought ACKs or one-sided requests only,
			 * and more is here already: take it in before
			 * returning. The peer's WRITE often follows the ACK
			 * the program polls for, and the program then watches
			 * its memory for that WRITE, not polling (ib_write_lat
			 * beyond 256 bytes: on shm every message waited for a
			 * kick, 50-70 us), and the rest of a WRITE the
			 * program waits for is taken in whole (512 KiB: ten
			 * FPDUs). A round of SENDs or READ responses returns at
			 * once: the program has its completions; so does a
			 * QP that awaits more completions (the program polls
			 * again: 64 KiB ib_write_bw -b on shm lost a fifth
			 * of its rate to a poller that went on). */
			continue;
		}
		if (poller && got && !eof) {
			/* (TCP: a lone ACK that completed all the QP awaited) */
			bool defer, idle = !tc->shm_rx && !out.n && qp_awaits_nothing(qp);

			sr_mutex_lock(&tc->lock);
			ans_apply_locked(tc);
			if (idle || (!tc->shm_rx && rx_write_under_way(tc) && qp_awaits_nothing(qp)))
				poll_release_locked(tc);
			else if (!quiet)
				poll_claim_locked(tc);	/* (completions it polls for) */
			/* (TCP: also on a stream not left to pollers yet, with
			 * the stream's timer to send it; no poll check would) */
			defer = (tc->poll_owned || !tc->shm_rx) && !tc->rx_foreign && !owed_before &&
				only_ack_owed(tc);
			if (defer && !tc->poll_owned && tc->ack_pending)
				tcp_timer_arm_locked(tc, SHM_KICK_ACK_NS);
			if (!defer && tc->state == TS_UP && !tc->closed)
				tcp_flush_locked(tc);
			sr_mutex_unlock(&tc->lock);
			if (!defer)
				tcp_kick(&tc->ch);
			return NULL;
		}
		if (!progress && !eof && kicked_defer(tc, owed_before))
			return NULL;
		/* Answers go out once the socket is drained (or with every
		 * full batch), not per message: one cumulative ACK for all
		 * the SENDs one read brought in. */
		if (eof || !progress || out.n == (int)ARRAY_SIZE(out.m) || ++rounds % 16 == 0)
			tcp_kick_now(tc);
		if (eof)
			return shm_broken(tc) ? shm_broken(tc) : "peer closed the stream";
		if (!progress) {
			if (!tc->shm_rx && rx_write_under_way(tc) && qp_awaits_nothing(qp)) {
				/* TCP: the rest of a WRITE is still to come, and its
				 * program may not poll for it (it may watch memory):
				 * not left to a poller (nor by the progress thread's
				 * read that handed the stream to one) */
				sr_mutex_lock(&tc->lock);
				poll_release_locked(tc);
				sr_mutex_unlock(&tc->lock);
			}
			return NULL;
		}
	}
}

/* Publish where this pass left the ring (tc->rx_mark). rx_lock held. */
static void rx_mark_update(struct tcp_chan *tc)
{
	uint64_t mark = 1;

	if (tc->shm_rx && !tc->rlen && !tc->dr.active && !tc->sd.active && !tc->as_untagged &&
	    !tc->as_active)
		mark = shm_rx_mark(tc);
	atomic_store_explicit(&tc->rx_mark, mark, memory_order_release);
}

void tcp_rx(struct tcp_chan *tc)
{
	const char *why;

	sr_mutex_lock(&tc->rx_lock);
	why = tcp_rx_locked(tc, false);
	rx_mark_update(tc);
	sr_mutex_unlock(&tc->rx_lock);
	if (why)
		tcp_fail(tc, why);
}

const char *tcp_rx_pass(struct tcp_chan *tc, bool nosleep, bool *onesided, bool *shm,
			uint64_t *mark)
{
	const char *why;

	sr_mutex_lock(&tc->rx_lock);
	tc->rx_nosleep = nosleep;
	tc->rx_onesided = tc->rx_twosided = false;
	why = tcp_rx_locked(tc, false);
	tc->rx_nosleep = false;
	*onesided = tc->rx_onesided && !tc->rx_twosided;
	*shm = tc->shm_rx;
	rx_mark_update(tc);
	*mark = atomic_load_explicit(&tc->rx_mark, memory_order_relaxed);
	sr_mutex_unlock(&tc->rx_lock);
	return why;
}

void tcp_rx_try(struct tcp_chan *tc)
{
	const char *why;

	if (sr_mutex_trylock(&tc->rx_lock))
		return;
	why = tcp_rx_locked(tc, false);
	rx_mark_update(tc);
	sr_mutex_unlock(&tc->rx_lock);
	if (why)
		tcp_fail(tc, why);
}

void tcp_rx_poll(struct tcp_chan *tc, bool foreign)
{
	const char *why;
	int fast;

	if (sr_mutex_trylock(&tc->rx_lock))
		return;
	tc->rx_foreign = foreign;
	fast = tcp_rx_fast(tc);
	why = fast > 0 ? NULL : fast < 0 ? rx_terminate(tc) : tcp_rx_locked(tc, true);
	rx_mark_update(tc);
	if (tc->rx_placed) {
		/* (a pass that placed payload takes microseconds: 64 such
		 * polls can outlast POLL_WINDOW_NS, and the stamp with them) */
		tc->rx_placed = false;
		atomic_store_explicit(&tc->rx_poll_ns, progress_now_ns(), memory_order_relaxed);
	}
	tc->rx_foreign = false;	/* (only while a foreign pass runs) */
	sr_mutex_unlock(&tc->rx_lock);
	if (why)
		tcp_fail(tc, why);
}
