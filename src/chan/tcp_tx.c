/* The TCP channel's transmit side: sr_msg to FPDUs, written with writev
 * from the posting thread when the socket takes them, else from the
 * progress thread on EPOLLOUT. */
#include "chan/tcp_priv.h"
#include "chan/shm_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- transmit ------------------------------------------------------------ */

/* sendmsg of FPDUs whose payload pieces are the application's registered
 * memory. Under ASan the system call itself, not the libc function ASan
 * intercepts: its interceptor checks every byte sent as if it were ours,
 * but a range the program unmapped while registered may have been mapped
 * again by ASan's allocator, redzones and all (memio.c says why that is
 * the application's business). The kernel still reports a missing page
 * as EFAULT (tx_fault). */
static ssize_t tx_sendmsg(int fd, const struct msghdr *mh, int flags)
{
#ifdef SR_ASAN
	return (ssize_t)syscall(SYS_sendmsg, fd, mh, flags);
#else
	return sendmsg(fd, mh, flags);
#endif
}

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

int status_of_term(const struct rdmap_term *t)
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
struct rsp_ctx *rsp_take(struct tcp_chan *tc, uint32_t msn)
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

int iov_slice(const struct iovec *in, int nin, uint64_t off, uint64_t len, struct iovec *out)
{
	uint64_t pos = 0;
	int n = 0;

	for (int i = 0; i < nin && len; i++) {
		uint64_t l = in[i].iov_len, skip, take;

		if (pos + l <= off) {
			pos += l;
			continue;
		}
		skip = off > pos ? off - pos : 0;
		take = sr_min(l - skip, len);
		out[n++] = (struct iovec){ (uint8_t *)in[i].iov_base + skip, take };
		off += take;
		len -= take;
		pos += l;
	}
	return n;
}

/* The iovecs covering [off, off + len) of a by-reference payload: each
 * one inside a piece of src, so inside memory the core checked against
 * its MR (tests/unit/test_tcp_tx.c holds it to that, since nothing else
 * checks these ranges under ASan: see tx_sendmsg). */
int tx_src_iov(const struct sr_msg_src *src, uint64_t off, uint64_t len, struct iovec *out)
{
	return iov_slice(src->iov, src->n, off, len, out);
}

/* CRC32c of an FPDU (header, payload pieces, pad). Payload in the
 * application's memory is read through mem_read into a bounce buffer, so
 * a page unmapped under us costs a TX fault, not a crash. */
static uint32_t fpdu_crc(const struct iovec *iov, int n, size_t pad, bool app)
{
	static const uint8_t zero[4];
	uint32_t s = mpa_crc_init();

	for (int i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;

		if (i == 0 || !app) {
			s = mpa_crc_update(s, p, len);
			continue;
		}
		while (len) {
			uint8_t b[4096];
			size_t k = sr_min(len, sizeof(b));

			if (mem_read(b, (uintptr_t)p, k))
				memset(b, 0, k);
			s = mpa_crc_update(s, b, k);
			p += k;
			len -= k;
		}
	}
	s = mpa_crc_update(s, zero, pad);
	return mpa_crc_final(s);
}

/* The header of a SEND's FPDU(s): the opcode says solicited event and
 * invalidate (RFC 5040 §4.3), or immediate data (src/wire/srext.h). */
static void send_hdr(const struct tcp_chan *tc, uint32_t flags, uint32_t imm, uint32_t inv_stag,
		     struct ddp_hdr *h)
{
	h->qn = DDP_QN_SEND;
	h->msn = tc->tx_msn[DDP_QN_SEND];
	if (flags & SR_MSGF_IMM) {
		h->opcode = (flags & SR_MSGF_SE) ? SR_EXT_SEND_SE_IMM : SR_EXT_SEND_IMM;
		h->inv_stag = be32toh(imm);
	} else if (flags & SR_MSGF_INV) {
		h->opcode = (flags & SR_MSGF_SE) ? RDMAP_SEND_SE_INV : RDMAP_SEND_INV;
		h->inv_stag = inv_stag;
	} else {
		h->opcode = (flags & SR_MSGF_SE) ? RDMAP_SEND_SE : RDMAP_SEND;
	}
}

/* The header of softrnic's ACK or RNR (src/wire/srext.h). */
static void ack_hdr(uint8_t opcode, uint32_t msn, uint8_t status, struct ddp_hdr *h)
{
	h->opcode = opcode;
	h->qn = SR_EXT_QN;
	h->msn = msn;
	h->mo = status;
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

	s->sw = false;

	switch (m->op) {
	case SR_MSG_SEND:
		send_hdr(tc, m->flags, m->imm, m->inv_stag, &h);
		h.mo = tc->cur_off;
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
		if (m->op == SR_MSG_ACK && m->status >= SR_ST_SHM_SWITCH &&
		    m->status <= SR_ST_SHM_OFFER) {
			/* the same-host switch (shm.h): a body, no answer */
			h.opcode = SR_EXT_ACK;
			h.qn = SR_EXT_QN;
			h.mo = m->status;
			chunk = m->len;
			s->sw = m->status == SR_ST_SHM_ACCEPT || m->status == SR_ST_SHM_SWITCH;
			break;
		}
		if (m->op == SR_MSG_TERMINATE || !tc->ext) {
			struct rdmap_term t = { 0 };

			t.ecode = term_of_status(m->status, &t.layer, &t.etype);
			h.opcode = RDMAP_TERMINATE;
			h.qn = DDP_QN_TERMINATE;
			h.msn = tc->tx_msn[DDP_QN_TERMINATE]++;
			hl = rdmap_term_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &t);
			blen = hl > 0 ? (size_t)hl : 0;
		} else {
			ack_hdr(m->op == SR_MSG_ACK ? SR_EXT_ACK : SR_EXT_RNR, m->msn, m->status, &h);
		}
		if (m->op != SR_MSG_RNR)
			rsp_take(tc, m->msn);	/* a failed READ gets no response */
		break;
	case SR_MSG_ATOMIC_WRITE: {
		struct sr_awrite a = { .to = m->to };

		if (!tc->ext)
			return false;	/* softrnic to softrnic only (sq.c refuses) */
		h.opcode = SR_EXT_ACK;
		h.qn = SR_EXT_QN_AWRITE;
		h.msn = m->msn;
		h.inv_stag = m->stag;
		memcpy(a.data, &m->add_swap, sizeof(a.data));
		hl = sr_awrite_encode(p + DDP_UNTAGGED_HDR_LEN, cap - DDP_UNTAGGED_HDR_LEN, &a);
		blen = hl > 0 ? (size_t)hl : 0;
		break;
	}
	case SR_MSG_XRC:
		if (!tc->ext)
			return false;	/* XRC is softrnic to softrnic only */
		h.opcode = SR_EXT_ACK;
		h.qn = SR_EXT_QN_XRC;
		h.mo = m->srqn;
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
		if (chunk && m->src)
			s->niov += tx_src_iov(m->src, tc->cur_off, chunk, &s->iov[1]);
		else if (chunk)
			s->iov[s->niov++] = (struct iovec){ m->payload + tc->cur_off, chunk };
		if (tc->crc)
			crc = fpdu_crc(s->iov, s->niov, mpa_pad(ulen), m->src != NULL);
		s->iov[s->niov++] = (struct iovec){ s->trl, mpa_fpdu_trailer(s->trl, ulen, crc) };
	}
	tc->cur_off += chunk;
	s->msg = m;
	s->done = NULL;
	if (tc->cur_off >= m->len &&
	    (m->op == SR_MSG_SEND || m->op == SR_MSG_WRITE || m->op == SR_MSG_IMM ||
	     m->op == SR_MSG_READ_REQ || m->op == SR_MSG_ATOMIC_REQ ||
	     m->op == SR_MSG_ATOMIC_WRITE)) {
		tc->tx_req_msn = m->msn + 1;
		tc->tx_any = true;
	}
	if (tc->cur_off >= m->len && (m->op != SR_MSG_SEND || h.last) &&
	    (m->op != SR_MSG_WRITE || h.last) && (m->op != SR_MSG_READ_RESP || h.last)) {
		s->done = m;
		tc->cur = NULL;
		tc->cur_off = 0;
	}
	return true;
}

/* May a small ring record (shm_small.h) be written now: the stream on
 * shm between softrnic peers, up, and at a message boundary (nothing
 * queued, half encoded or half written)? tc->lock held. */
static bool small_ok_locked(const struct tcp_chan *tc)
{
	return tc->shm_tx && tc->ext && tc->state == TS_UP && !tc->closed && !tc->tx_gate &&
	       !tc->shm_sw_pending && !tc->cur && sr_list_empty(&tc->txq) &&
	       tc->slot_head == tc->slot_tail;
}

/* On shm, the ACK owed goes alone as the ring's ack word (shm_send_ack),
 * without an FPDU to encode here and parse there, nor a record. True if
 * it went. tc->lock held. */
static bool ack_small_locked(struct tcp_chan *tc)
{
	if (!tc->shm_tx || !tc->ext || tc->state != TS_UP || tc->closed || tc->tx_gate ||
	    !shm_send_ack(tc, tc->ack_msn))
		return false;
	tc->ack_pending = false;
	rsp_take(tc, tc->ack_msn);
	chan_stat_inc(&chan_stats.shm_fpdus);
	chan_stat_inc(&chan_stats.shm_ack_words);
	return true;
}

/* Queue a pending cumulative ACK ahead of anything else. */

void ack_flush_locked(struct tcp_chan *tc)
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

/* sendmsg said EFAULT: the first byte not yet written is in a payload
 * piece whose page is gone (our own header and trailer cannot fault).
 * Send zeros in its place, so the framing stays whole, and mark the
 * message: its WQE will fail with IBV_WC_LOC_PROT_ERR. */
static bool tx_fault(struct tcp_chan *tc)
{
	static const uint8_t zeros[MPA_MAX_ULPDU];
	static __thread uint8_t probe[MPA_MAX_ULPDU];
	bool found = false;

	/* Which piece faulted is not said: read every payload piece still to
	 * go through the safe copy, and replace the unreadable ones. */
	for (uint32_t i = tc->slot_head; i != tc->slot_tail; i++) {
		struct tx_fpdu *s = &tc->slot[i % TX_SLOTS];

		for (int k = 1; k < s->niov - 1; k++) {
			if (!s->iov[k].iov_len || s->iov[k].iov_base == (void *)zeros)
				continue;
			if (!mem_read(probe, (uintptr_t)s->iov[k].iov_base, s->iov[k].iov_len))
				continue;
			s->iov[k].iov_base = (void *)zeros;
			if (s->msg)
				s->msg->flags |= SR_MSGF_TX_FAULT;
			found = true;
		}
	}
	return found;
}

/* Tell the QP about requests sent with a fault. Caller holds no lock. */
void tcp_tx_faults(struct tcp_chan *tc)
{
	uint32_t f[ARRAY_SIZE(tc->faults)], written;
	bool any_written;
	struct sr_qp *qp;
	int n;

	sr_mutex_lock(&tc->lock);
	n = tc->nfaults;
	memcpy(f, tc->faults, sizeof(f));
	tc->nfaults = 0;
	any_written = tc->tx_written;
	written = tc->tx_written_msn;
	tc->tx_written = false;
	qp = tc->closed ? NULL : tc->qp;
	if (qp && (n || any_written))
		qp_get(qp);
	sr_mutex_unlock(&tc->lock);
	if (!qp || (!n && !any_written))
		return;
	for (int i = 0; i < n; i++)
		qp_tx_fault(qp, f[i]);
	if (any_written)
		qp_tx_written(qp, written);
	qp_put(qp);
}

/* May the peer pull this message's payload from our memory after we
 * wrote it (shm.h)? Only if the message settles when the peer answers
 * it, which it does after the pull: a SEND or WRITE whose WQE completes
 * on the peer's ACK, or a READ response. */
static bool settles_on_answer(const struct tcp_chan *tc, const struct sr_msg *m)
{
	if (!m || !m->src)
		return false;
	if (m->op == SR_MSG_READ_RESP)
		return true;
	return (m->op == SR_MSG_SEND || m->op == SR_MSG_WRITE) && tc->ch.acks && tc->rc &&
	       !(m->flags & SR_MSGF_DONE_ON_TX);
}

static enum shm_pull_use pull_use(const struct tcp_chan *tc, const struct sr_msg *m)
{
	if (m->op == SR_MSG_READ_RESP)
		return SHM_PULL_RESP;
	if (m->op == SR_MSG_WRITE && (int32_t)(tc->tx_req_msn - tc->rx_ans_msn) >= SHM_STREAM_REQS)
		return SHM_PULL_STREAM;
	return SHM_PULL_REQ;
}

/* How the ring takes piece k of slot s (shm_ring_write's kinds). */
static uint8_t piece_kind(const struct tcp_chan *tc, const struct tx_fpdu *s, int k)
{
	if (k == 0 || k == s->niov - 1 || !s->msg || !s->msg->src)
		return SHM_OWN;
	if (settles_on_answer(tc, s->msg) &&
	    shm_pullable(tc, s->iov[k].iov_base, s->iov[k].iov_len, pull_use(tc, s->msg)))
		return SHM_PULL;
	return SHM_APP;
}

/* A request of ours (it gets an answer, or at least needs none from us
 * to let the peer go on); everything else answers the peer. */
static bool msg_is_req(const struct sr_msg *m)
{
	return m->op == SR_MSG_SEND || m->op == SR_MSG_WRITE || m->op == SR_MSG_IMM ||
	       m->op == SR_MSG_READ_REQ || m->op == SR_MSG_ATOMIC_REQ || m->op == SR_MSG_XRC ||
	       m->op == SR_MSG_ATOMIC_WRITE;
}

/* Do we hold our requests for the shm answer (shm.c)? Ends the hold once
 * it is due, whoever flushes first (the timer also does). */
static bool shm_holding(struct tcp_chan *tc)
{
	if (!tc->shm_hold_until)
		return false;
	if (progress_now_ns() < tc->shm_hold_until)
		return true;
	tc->shm_hold_until = 0;
	sr_dbg("tcp %p QP %#x: shm: no answer to the offer in time: sending on TCP",
	       (void *)tc, tc->local_qpn);
	return false;
}

/* While held: the first message of txq that is not a request (a control
 * message, a READ or atomic response, a NAK, an RNR, a TERMINATE, the
 * cumulative ACK), or NULL. Answers may pass our requests (they are
 * independent of them, as a responder's and a requester's packets are on
 * one RC QP), and must: the peer may wait for them. In order among
 * themselves. */
static struct sr_msg *unheld_first(struct tcp_chan *tc)
{
	for (struct sr_list *p = tc->txq.next; p != &tc->txq; p = p->next) {
		struct sr_msg *m = container_of(p, struct sr_msg, link);

		if (!msg_is_req(m))
			return m;
	}
	if (!tc->ack_pending)
		return NULL;
	ack_flush_locked(tc);
	return tc->ack_pending ? NULL : container_of(tc->txq.prev, struct sr_msg, link);
}

void tcp_hold_timer_locked(struct tcp_chan *tc)
{
	if (!tc->shm_hold_until)
		return;
	if (progress_now_ns() >= tc->shm_hold_until) {
		tcp_flush_locked(tc);	/* (ends the hold) */
		return;
	}
	/* The stream's one timer fired for another use. Poll checks (every
	 * POLL_CHECK_NS while poll_owned) come sooner and look again. */
	if (!tc->poll_owned)
		tcp_timer_arm_locked(tc, tc->shm_hold_until - progress_now_ns());
}

/* Write what we can. Caller holds tc->lock; state is UP. */
void tcp_flush_locked(struct tcp_chan *tc)
{
	bool hold;

	/* (it may leave faults or written requests for the kick to tell) */
	atomic_store_explicit(&tc->tx_held, false, memory_order_relaxed);
	if (tc->tx_gate)
		return;		/* tcp_rx opens it at the first byte in */
	hold = shm_holding(tc);
	for (;;) {
		struct iovec iov[TX_SLOTS * (2 + SR_MSG_SRC_MAX)];
		uint8_t kinds[TX_SLOTS * (2 + SR_MSG_SRC_MAX)];
		uint32_t msns[TX_SLOTS * (2 + SR_MSG_SRC_MAX)];
		int n = 0;
		ssize_t w;

		if (sr_list_empty(&tc->txq) && !tc->cur && !(tc->ack_pending && ack_small_locked(tc)))
			ack_flush_locked(tc);
		/* Nothing is encoded behind our last FPDU on TCP until it is
		 * written: what follows it goes to the ring. */
		while (tc->slot_tail - tc->slot_head < TX_SLOTS && !tc->shm_sw_pending) {
			if (!tc->cur) {
				if (sr_list_empty(&tc->txq))
					break;
				tc->cur = hold ? unheld_first(tc)
					       : container_of(tc->txq.next, struct sr_msg, link);
				if (!tc->cur)
					break;	/* only held requests */
				sr_list_del(&tc->cur->link);
				tc->cur_off = 0;
			}
			if (!tx_encode(tc, &tc->slot[tc->slot_tail % TX_SLOTS])) {
				msg_free(tc->cur);
				tc->cur = NULL;
				continue;
			}
			if (tc->slot[tc->slot_tail % TX_SLOTS].sw)
				tc->shm_sw_pending = true;
			tc->slot_tail++;
		}
		if (tc->slot_head == tc->slot_tail) {
			tc->tx_urgent = false;
			want(tc, rx_events(tc));
			atomic_store_explicit(&tc->tx_idle,
					      sr_list_empty(&tc->txq) && !tc->cur && !tc->ack_pending &&
					      !tc->rx_paused && !tc->nfaults && !tc->tx_written,
					      memory_order_relaxed);
			return;
		}
		/* (a full ring that has not moved: the pieces' kinds and the
		 * write would be done again for nothing, in every poll of a
		 * program that waits for the peer to copy) */
		if (tc->shm_tx && shm_tx_stuck(tc))
			return;
		for (uint32_t i = tc->slot_head; i != tc->slot_tail; i++) {
			struct tx_fpdu *s = &tc->slot[i % TX_SLOTS];

			for (int k = 0; k < s->niov; k++) {
				if (!s->iov[k].iov_len)
					continue;
				if (tc->shm_tx) {
					kinds[n] = piece_kind(tc, s, k);
					msns[n] = s->msg && (s->msg->op == SR_MSG_SEND ||
							     s->msg->op == SR_MSG_WRITE)
						  ? s->msg->msn : SHM_NO_MSN;
				}
				iov[n++] = s->iov[k];
			}
		}
		if (tc->shm_tx) {
			w = shm_send(tc, iov, kinds, msns, n);
		} else {
			/* sendmsg, not writev: MSG_NOSIGNAL, or a peer that
			 * went away would kill the program with SIGPIPE. */
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };

			w = tx_sendmsg(tc->pl.fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		if (w < 0 && errno == EFAULT && tx_fault(tc))
			continue;
		if (w < 0) {
			if (errno == EINTR)
				continue;
			/* (a full ring wakes us through the eventfd) */
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && !tc->shm_tx)
				want(tc, rx_events(tc) | EPOLLOUT);
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
			chan_stat_inc(tc->shm_tx ? &chan_stats.shm_fpdus : &chan_stats.tcp_fpdus);
			if (s->sw) {
				/* our last bytes on TCP: the rest goes to the ring,
				 * and room in the socket means nothing to us now (a
				 * wait for it, armed while requests posted before
				 * the switch filled the socket, fired in every
				 * epoll_wait while the ring stayed full: the progress
				 * thread spun, taking the stream's lock, one CPU
				 * from two busy programs, in a quarter of 16 MiB
				 * ib_write_bw runs) */
				s->sw = false;
				tc->shm_tx = true;
				shm_revoke_arm(tc);
				tc->shm_sw_pending = false;
				want(tc, tc->events & ~(uint32_t)EPOLLOUT);
			}
			/* Only our own requests have a WQE to fail (a READ
			 * response read from unmapped memory went as zeros:
			 * docs/COMPAT.md). */
			if (s->done && (s->done->flags & SR_MSGF_TX_FAULT) &&
			    (s->done->op == SR_MSG_SEND || s->done->op == SR_MSG_WRITE) &&
			    tc->nfaults < (int)ARRAY_SIZE(tc->faults))
				tc->faults[tc->nfaults++] = s->done->msn;
			if (s->done && (s->done->flags & SR_MSGF_DONE_ON_TX) &&
			    !(s->done->flags & SR_MSGF_TX_FAULT)) {
				tc->tx_written = true;
				tc->tx_written_msn = s->done->msn;
			}
			msg_free(s->done);
			s->done = NULL;
			tc->slot_head++;
		}
	}
}

static bool tx_hold(struct tcp_chan *tc);

int tcp_send(struct sr_chan *ch, struct sr_msg *m)
{
	struct tcp_chan *tc = to_tc(ch);
	bool req;

	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD || tc->closed) {
		sr_mutex_unlock(&tc->lock);
		msg_free(m);
		return -ENOTCONN;
	}
	tx_busy_locked(tc);
	/* Positive ACKs are cumulative: keep only the latest, send it when
	 * the queue drains (one per batch of inbound requests). */
	req = msg_is_req(m);
	if (!req)
		tc->tx_urgent = true;	/* answers are never held back */
	if (m->op == SR_MSG_ACK && m->status == SR_ST_OK && tc->ext) {
		tc->ack_pending = true;
		tc->ack_msn = m->msn;
		sr_mutex_unlock(&tc->lock);
		msg_free(m);
		return 0;
	}
	if (m->op == SR_MSG_ACK && m->status == SR_ST_OK) {
		sr_mutex_unlock(&tc->lock);
		msg_free(m);
		return 0;
	}
	ack_flush_locked(tc);
	sr_list_add_tail(&tc->txq, &m->link);
	/* On shm a request goes into the ring now, unless held (tx_hold):
	 * one lock for the post, and the kick that follows finds nothing
	 * to do. (Answers wait for the kick: one write per batch.) */
	if (req && tc->shm_tx && tc->state == TS_UP) {
		if (!tx_hold(tc))
			tcp_flush_locked(tc);
		else if (!tc->rx_paused && !tc->nfaults && !tc->tx_written)
			atomic_store_explicit(&tc->tx_held, true, memory_order_relaxed);
	}
	sr_mutex_unlock(&tc->lock);
	return 0;
}

/* A small request straight into the ring (chan.h, send_small): with the
 * ACK owed before it, one small message (struct shm_small, shm_small.h) in
 * place of the FPDUs tcp_send and tcp_flush_locked would write, without
 * a message, a slot or the iovec arrays. Only on a same-host stream that
 * is up with nothing else to write (the order of the stream: a small
 * record comes at a message boundary), and only when the ring takes it
 * whole; -EAGAIN otherwise, with nothing changed. */
int tcp_send_small(struct sr_chan *ch, const struct sr_small *r)
{
	struct tcp_chan *tc = to_tc(ch);
	struct shm_small h = { .len = (uint16_t)r->len };
	struct iovec iov[1 + SR_MAX_SGE];	/* (filled as far as used: a post's
						 * path) */
	int n = r->len ? 2 : 1;
	bool ack;

	/* (a stream not on shm, looked at without the lock: a post tries
	 * this up to three times on its way to the usual one) */
	if (r->len > SR_SMALL_MAX || r->niov > SR_MAX_SGE ||
	    !__atomic_load_n(&tc->shm_tx, __ATOMIC_RELAXED))
		return -EAGAIN;
	iov[0] = (struct iovec){ &h, sizeof(h) };
	if (r->niov) {
		/* (the gather list itself: the ring write reads it
		 * fault-safely) */
		if (r->niov == 1)
			iov[1] = r->iov[0];	/* (a post's one piece: no call) */
		else
			memcpy(&iov[1], r->iov, sizeof(iov[0]) * (size_t)r->niov);
		n = 1 + r->niov;
	} else {
		iov[1] = (struct iovec){ (void *)r->payload, r->len };
	}
	sr_mutex_lock(&tc->lock);
	/* (requests also wait out a hold and the faults to report first) */
	if (!small_ok_locked(tc) || tc->shm_hold_until || tc->nfaults || tc->tx_written)
		goto again;
	ack = tc->ack_pending;
	if (ack) {
		h.flags |= SHM_SMALL_F_ACK;
		h.ack_msn = tc->ack_msn;
	}
	if (r->op == SR_MSG_SEND) {
		h.op = SHM_SMALL_SEND;
		h.msn = tc->tx_msn[DDP_QN_SEND];
		if (r->flags & SR_MSGF_SE)
			h.flags |= SHM_SMALL_F_SE;
		if (r->flags & SR_MSGF_IMM) {
			h.flags |= SHM_SMALL_F_IMM;
			h.word = r->imm;
		} else if (r->flags & SR_MSGF_INV) {
			h.flags |= SHM_SMALL_F_INV;
			h.word = r->inv_stag;
		}
	} else {
		h.op = SHM_SMALL_WRITE;
		h.word = r->stag;
		h.to = r->to;
	}
	if (shm_send_small(tc, iov, n, sizeof(h) + r->len, r->niov ? 1 : n) <= 0)
		goto again;	/* (broken: the usual way queues it, and the
				 * stream's end fails it; a gather that
				 * faulted: the usual way fails it) */
	/* written: what tcp_send, tx_encode and the flush note */
	tx_busy_locked(tc);
	if (ack) {
		tc->ack_pending = false;
		rsp_take(tc, tc->ack_msn);
		chan_stat_inc(&chan_stats.shm_fpdus);
	}
	if (r->op == SR_MSG_SEND)
		tc->tx_msn[DDP_QN_SEND]++;
	tc->tx_req_msn = r->msn + 1;
	tc->tx_any = true;
	chan_stat_inc(&chan_stats.shm_fpdus);
	chan_stat_inc(&chan_stats.shm_direct);
	tc->tx_urgent = false;
	/* (the write may have found faults of earlier records to report) */
	atomic_store_explicit(&tc->tx_idle, !tc->rx_paused && !tc->nfaults && !tc->tx_written,
			      memory_order_relaxed);
	sr_mutex_unlock(&tc->lock);
	return 0;
again:
	sr_mutex_unlock(&tc->lock);
	return -EAGAIN;
}

/* tcp_send of a positive ACK, without the message: the same steps. */
int tcp_ack(struct sr_chan *ch, uint32_t msn)
{
	struct tcp_chan *tc = to_tc(ch);

	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_DEAD || tc->closed) {
		sr_mutex_unlock(&tc->lock);
		return -ENOTCONN;
	}
	tx_busy_locked(tc);
	tc->tx_urgent = true;
	if (tc->ext) {
		tc->ack_pending = true;
		tc->ack_msn = msn;
	}
	sr_mutex_unlock(&tc->lock);
	return 0;
}

void tcp_kick_now(struct tcp_chan *tc)
{
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_UP && !tc->closed)
		tcp_flush_locked(tc);
	sr_mutex_unlock(&tc->lock);
	tcp_kick(&tc->ch);
}

/* Coalescing, like Nagle's algorithm one level up: with requests in
 * flight to a softrnic peer (which always answers, and promptly), a post
 * leaves its message queued; the next answer flushes the whole batch. A
 * lone request, or one towards a peer without answers, goes at once.
 * Not on shm: there a write is no system call, and holding made sender
 * and receiver take turns (each idle while the other worked): 64-byte
 * ib_send_bw 3.6 Mpps held, 6.0 not. */
static bool tx_hold(struct tcp_chan *tc)
{
	/* UC requests get no answers: nothing would release them */
	return !tc->shm_tx && tc->ext && tc->ch.acks && tc->tx_any && !tc->tx_urgent && tc->rc &&
	       (int32_t)(tc->tx_req_msn - tc->rx_ans_msn) > 0 &&
	       !progress_in_thread(tc->tctx->pg);
}

/* Nothing queued, owed, paused or to report (a post on shm wrote its
 * message in tcp_send), or the post before this kick was held with
 * nothing else to do: a kick has nothing to do. */
bool tcp_idle(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);

	return atomic_load_explicit(&tc->tx_idle, memory_order_acquire) ||
	       atomic_load_explicit(&tc->tx_held, memory_order_acquire);
}

void tcp_kick(struct sr_chan *ch)
{
	struct tcp_chan *tc = to_tc(ch);
	bool resume = false;

	struct sr_qp *qp = NULL;

	if (tcp_idle(ch))
		return;
	sr_mutex_lock(&tc->lock);
	if (tc->state == TS_UP && !tc->closed) {
		if (!tx_hold(tc))
			tcp_flush_locked(tc);
		resume = tc->rx_paused;
		if (resume) {
			qp = tc->qp;
			qp_get(qp);
		}
	}
	sr_mutex_unlock(&tc->lock);
	if (tc->nfaults || tc->tx_written)
		tcp_tx_faults(tc);
	/* Receives may have been posted: read again if the backlog let us. */
	if (resume) {
		if (!qp_rx_congested(qp)) {
			sr_mutex_lock(&tc->lock);
			tc->rx_paused = false;
			want(tc, tc->events | rx_events(tc));
			sr_mutex_unlock(&tc->lock);
			tcp_rx_try(tc);
		}
		qp_put(qp);
	}
}
