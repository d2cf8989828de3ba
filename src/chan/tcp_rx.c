/* The TCP channel's receive side: FPDUs from the stream into sr_msg,
 * delivered to the core from the progress thread. */
#include "chan/tcp_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

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
void tcp_rx(struct tcp_chan *tc)
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
