/* Small records (struct shm_small) in: what the receive pass makes of a
 * run of them (small_run), and a polling program thread's quick pass over
 * a ring (DESIGN.md decision 23, "the poller's quick pass"): when the
 * next record is a small SEND,
 * a small WRITE or a lone ACK and nothing is published behind it (a
 * ping-pong's message, a sender's ACK), it is delivered without the
 * general receive pass
 * (tcp_rx.c): no message allocated (the SEND lives on this stack unless
 * it must wait for a receive WQE), no staging, one hold of the QP lock
 * and two of the stream's. What it delivers, and the ACK it leaves owed,
 * are exactly what tcp_rx_locked's poller pass would have made of the
 * same record (small_take, then qp_rx_many, then its end); anything else
 * (a batch, staged bytes, a stream not up) is left to that pass,
 * untouched. */
#include "chan/tcp_priv.h"
#include "chan/shm_small.h"

#include <string.h>

/* The message a small SEND or WRITE record (h, its MSN checked; no
 * segment of a message under way) makes, into m (zeroed, its length
 * set), counting the MSNs its FPDUs would: a WRITE as tagged_msg makes
 * a whole one. */
static void small_msg(struct tcp_chan *tc, const struct shm_small *h, struct sr_msg *m)
{
	if (h->op == SHM_SMALL_WRITE) {
		m->op = SR_MSG_WRITE;
		m->msn = tc->rx_req_msn++;
		m->stag = h->word;
		m->to = h->to;
		return;
	}
	tc->rx_msn[DDP_QN_SEND]++;
	m->op = SR_MSG_SEND;
	if (h->flags & SHM_SMALL_F_SE)
		m->flags |= SR_MSGF_SE;
	if (h->flags & SHM_SMALL_F_IMM) {
		m->flags |= SR_MSGF_IMM;
		m->imm = h->word;
	}
	if (h->flags & SHM_SMALL_F_INV) {
		m->flags |= SR_MSGF_INV;
		m->inv_stag = h->word;
	}
	m->msn = tc->rx_req_msn++;
}

/* A small message from the ring (struct shm_small, shm_small.h) at a message
 * boundary: what its FPDUs would have made (rx_ulpdu), with the same MSNs
 * counted. out has room for two more. 1: taken, 0: none next, -EBADMSG
 * malformed (the stream ends with TERMINATE), -ENOMEM, -EPIPE: the ring
 * is broken. */
static int small_take(struct tcp_chan *tc, struct rx_out *out)
{
	uint8_t hb[sizeof(struct shm_small)];
	struct shm_small h;
	struct sr_msg *m, *ack = NULL;
	ssize_t k = shm_recv_small_begin(tc, hb, sizeof(hb));
	int ret = -EBADMSG;

	if (k <= 0)
		return k < 0 ? -EPIPE : 0;
	/* (the header's copy is ours: decoded once, from it; the body goes
	 * straight into its message, and the record is released with it) */
	if (shm_small_decode(hb, (size_t)k, &h))
		goto drop;
	/* RFC 5041 §5.3: MSNs per queue, in order; no message in progress */
	if (h.op == SHM_SMALL_SEND ? tc->as_untagged || h.msn != tc->rx_msn[DDP_QN_SEND]
				   : tc->as_active)
		goto drop;
	/* (everything allocated before anything is counted: a failure
	 * leaves the stream as it was, ending it) */
	if ((h.flags & SHM_SMALL_F_ACK) && out->answers) {
		ack = msg_alloc(0);
		if (ack)
			ack->op = SR_MSG_ACK;
		if (!ack) {
			ret = -ENOMEM;
			goto drop;
		}
	}
	m = NULL;
	if (h.op != SHM_SMALL_ACK) {
		m = msg_alloc(h.len);
		if (!m) {
			ret = -ENOMEM;
			goto drop;
		}
	}
	shm_recv_small_end(tc, m ? m->payload : NULL, sizeof(h), m ? h.len : 0);
	if (h.flags & SHM_SMALL_F_ACK) {
		if (!ack) {
			ack_fold(tc, out, h.ack_msn);
		} else {
			ack->msn = h.ack_msn;
			ack->status = SR_ST_OK;
			out_add(out, ack);
			note_answer(tc, ack->msn);
		}
	}
	if (!m)
		return 1;
	small_msg(tc, &h, m);
	out_add(out, m);
	return 1;
drop:
	if (ack)
		msg_free(ack);
	shm_recv_small_end(tc, NULL, 0, 0);
	return ret;
}

/* Small messages, as many as come and out takes (as a read of FPDUs
 * would bring): how many, or small_take's error. */
int small_run(struct tcp_chan *tc, struct rx_out *out)
{
	int taken = 0;

	while (out->n + 2 <= (int)ARRAY_SIZE(out->m)) {
		int e = small_take(tc, out);

		if (e < 0) {
			taken = e;
			break;
		}
		if (!e)
			break;
		taken++;
	}
	if (taken)
		shm_recv_small_done(tc);
	return taken;
}

int tcp_rx_fast(struct tcp_chan *tc)
{
	uint8_t hb[sizeof(struct shm_small)];
	union {
		struct sr_msg m;
		uint8_t bytes[sizeof(struct sr_msg) + SHM_SMALL_PAYLOAD];
	} u;
	struct sr_msg *m = NULL;
	struct shm_small h = { .op = SHM_SMALL_ACK };
	struct sr_qp *qp;
	bool owed_before, defer, word;
	uint64_t aw = 0;
	uint32_t ack_msn = 0;
	int op;
	ssize_t k;

	/* at a message boundary of the stream, nothing staged */
	if (!tc->shm_rx || tc->rlen || tc->dr.active || tc->sd.active || tc->as_untagged ||
	    tc->as_active)
		return 0;
	/* (a lone ACK as the ring's ack word: taken as a lone ACK record
	 * is, alone or with the record; with other input, by the general
	 * pass) */
	word = shm_ack_peek(tc, &aw);
	op = shm_small_alone(tc);
	if (op != SHM_SMALL_SEND && op != SHM_SMALL_WRITE && op != SHM_SMALL_ACK) {
		if (!word || shm_rx_pending(tc))
			return 0;
		op = -1;
	}
	sr_mutex_lock(&tc->lock);
	if (tc->state != TS_UP || tc->closed) {
		sr_mutex_unlock(&tc->lock);
		return 0;
	}
	qp = tc->qp;
	owed_before = tc->ack_pending;
	tc->rx_poller = true;
	/* (a SEND: the program polls for it; not a lone ACK: after the
	 * completion it brings, the program may watch its memory for the
	 * peer's WRITE, which the progress thread must then place) */
	if (op == SHM_SMALL_SEND)
		poll_claim_locked(tc);
	sr_mutex_unlock(&tc->lock);
	/* (back-pressure: the general pass holds the stream) */
	if (qp_rx_congested(qp))
		return 0;

	if (op >= 0) {
		k = shm_recv_small_begin(tc, hb, sizeof(hb));
		if (k <= 0)
			return 0;	/* (changed under our look, or broken:
					 * the general pass reads what is
					 * there) */
		/* (the header's copy is ours: decoded once, from it; the body
		 * goes straight into the message; RFC 5041 §5.3: SEND MSNs in
		 * order) */
		if (shm_small_decode(hb, (size_t)k, &h) ||
		    (h.op == SHM_SMALL_SEND && h.msn != tc->rx_msn[DDP_QN_SEND])) {
			shm_recv_small_end(tc, NULL, 0, 0);
			return -EBADMSG;
		}
		if (h.op != SHM_SMALL_ACK) {
			m = &u.m;
			memset(m, 0, sizeof(*m));
			sr_list_init(&m->link);
			m->len = h.len;
			small_msg(tc, &h, m);	/* (no segment under way:
						 * as_active) */
			shm_recv_small_end(tc, m->payload, sizeof(h), h.len);
		} else {
			shm_recv_small_end(tc, NULL, 0, 0);
		}
	}
	if (h.flags & SHM_SMALL_F_ACK)
		ack_msn = h.ack_msn;
	if (word) {
		/* (cumulative: the later of the two) */
		shm_ack_take(tc, aw);
		if (!(h.flags & SHM_SMALL_F_ACK) || (int32_t)((uint32_t)aw - ack_msn) > 0)
			ack_msn = (uint32_t)aw;
		h.flags |= SHM_SMALL_F_ACK;
	}
	if (h.flags & SHM_SMALL_F_ACK)
		note_answer(tc, ack_msn);
	if (shm_pulls_sent(tc)) {
		/* a payload of ours the peer found gone fails its WQE
		 * before the peer's answer to it settles it */
		sr_mutex_lock(&tc->lock);
		shm_faults_locked(tc);
		sr_mutex_unlock(&tc->lock);
		if (tc->nfaults)
			tcp_tx_faults(tc);
	}
	/* (parts of a WRITE's copy under way: a broken peer's message
	 * before the WRITE's last segment; they go in first) */
	if (m && shm_help_pending(tc))
		(void)shm_help_drain(tc);
	if (m && m->op == SR_MSG_SEND)
		qp_rx_lent_send(qp, m, (h.flags & SHM_SMALL_F_ACK) ? &ack_msn : NULL);
	else
		qp_rx_lent(qp, m, (h.flags & SHM_SMALL_F_ACK) ? &ack_msn : NULL);
	if (op >= 0) {
		shm_recv_small_done(tc);
		chan_stat_inc(&chan_stats.rx_quick);
	}

	/* The end of a poller's pass (tcp_rx_locked): the answers it brought
	 * go to the transmit side; an ACK we owe for the first time waits
	 * for the program's reply on a stream left to its poller. */
	sr_mutex_lock(&tc->lock);
	ans_apply_locked(tc);
	defer = tc->poll_owned && !tc->rx_foreign && !owed_before && only_ack_owed(tc);
	if (!defer && tc->state == TS_UP && !tc->closed)
		tcp_flush_locked(tc);
	sr_mutex_unlock(&tc->lock);
	if (!defer)
		tcp_kick(&tc->ch);
	return 1;
}
