/* The TCP channel's direct placement (receive side): a tagged segment's
 * or a SEND's payload goes from the stream straight into the memory it is
 * for, with no staging copy. tcp_rx.c parses the headers and calls in. */
#include "chan/tcp_priv.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* Direct placement: a tagged segment's payload goes from the socket
 * straight into the memory it is for (readv), with no staging copy. Only
 * between softrnic peers without CRC (a CRC would have to be computed
 * over memory the application owns), and only when the QP can place now
 * (else the segment goes through the core as a message, in order). */
bool direct_ok(struct tcp_chan *tc)
{
	return tc->ext && !tc->crc;
}

static void send_done(struct tcp_chan *tc, struct rx_out *out);

/* readv straight into the application's registered memory. Under ASan the
 * system call itself, not the libc function ASan intercepts, for the
 * reason tx_sendmsg (tcp_tx.c) gives: that memory may have been unmapped
 * and mapped again by ASan's allocator. A missing page is still EFAULT. */
ssize_t direct_readv(int fd, const struct iovec *iov, int n)
{
#ifdef SR_ASAN
	return (ssize_t)syscall(SYS_readv, fd, iov, n);
#else
	return readv(fd, iov, n);
#endif
}

static void direct_finish(struct tcp_chan *tc, struct rx_out *out)
{
	struct rx_direct *d = &tc->dr;

	for (int i = 0; i < d->nrefs; i++)
		mr_release(&d->refs[i]);
	d->nrefs = 0;
	d->active = false;
	/* (a WRITE's last segment: its earlier segments' parts that the
	 * peer copies for us are in before the core sees it done) */
	if (!d->send_seg && d->msg->op == SR_MSG_WRITE && !(d->msg->flags & SR_MSGF_MORE) &&
	    tc->shm_rx && shm_help_drain(tc))
		d->failed = true;
	if (d->send_seg) {
		tc->sd.failed |= d->failed;
		if (d->send_last)
			send_done(tc, out);
		return;
	}
	d->msg->flags |= d->failed ? SR_MSGF_PLACE_ERR : SR_MSGF_PLACED;
	if (d->msg->op == SR_MSG_READ_RESP && !(d->msg->flags & SR_MSGF_MORE))
		note_answer(tc, d->msg->msn);
	out_add(out, d->msg);
	d->msg = NULL;
}

/* Set up the per-FPDU receive of paylen payload bytes into d->iov (n
 * entries, already filled), copy what rbuf holds, and finish if it is all
 * there. Returns the bytes of rbuf consumed. */
static size_t direct_start(struct tcp_chan *tc, int n, size_t start, size_t paylen,
			   size_t ulen, struct rx_out *out)
{
	struct rx_direct *d = &tc->dr;
	size_t have;

	d->niov = n;
	d->remaining = paylen;
	d->trailer = mpa_pad(ulen) + MPA_CRC_SIZE;
	d->active = true;
	have = sr_min(tc->rlen - start, paylen);
	for (size_t off = 0, i = 0; off < have && !d->failed && i < (size_t)d->niov; i++) {
		size_t take = sr_min(d->iov[i].iov_len, have - off);

		if (mem_write((uintptr_t)d->iov[i].iov_base, tc->rbuf + start + off, take))
			d->failed = true;
		d->iov[i].iov_base = (uint8_t *)d->iov[i].iov_base + take;
		d->iov[i].iov_len -= take;
		off += take;
	}
	d->remaining -= have;
	{
		size_t tr = sr_min(tc->rlen - start - have, d->trailer);

		d->trailer -= tr;
		have += tr;
	}
	if (!d->remaining && !d->trailer)
		direct_finish(tc, out);
	return start + have;
}

/* The last segment of a directly placed SEND is in: hand it to the core. */
static void send_done(struct tcp_chan *tc, struct rx_out *out)
{
	struct rx_send *sd = &tc->sd;
	struct sr_msg *m = sd->msg;

	for (int i = 0; i < sd->n; i++)
		mr_release(&sd->refs[i]);
	sd->n = 0;
	m->flags |= SR_MSGF_PLACED;
	if (sd->failed)
		m->flags |= SR_MSGF_PLACE_ERR;
	if (sd->too_long)
		m->flags |= SR_MSGF_TOO_LONG;
	m->placed = (uint32_t)sd->got;
	m->msn = tc->rx_req_msn++;
	out_add(out, m);
	sd->msg = NULL;
	sd->active = false;
}

/* A SEND segment (untagged, queue 0) straight into the receive WQE's
 * buffers. At MO 0 the WQE is taken; -EAGAIN sends the whole message down
 * the staged path (no WQE yet: it parks in the core, RNR). */
ssize_t send_begin(struct tcp_chan *tc, struct sr_qp *qp, const struct ddp_hdr *h,
		   size_t hl, size_t ulen, struct rx_out *out)
{
	struct rx_send *sd = &tc->sd;
	struct rx_direct *d = &tc->dr;
	size_t paylen = ulen - hl;
	uint64_t off = h->mo;
	int n = 0;

	if (h->msn != tc->rx_msn[DDP_QN_SEND])
		return -EBADMSG;
	if (h->mo == 0) {
		uint8_t rb[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
		struct sr_rwqe *r = (struct sr_rwqe *)rb;
		struct sr_msg *m;
		uint32_t gen;
		size_t rsz;
		int k;

		if (sd->active || tc->as_untagged)
			return -EBADMSG;
		k = qp_place_send(qp, r, sd->iov, sd->refs, SR_MAX_SGE, &gen);
		if (k == -EAGAIN)
			return -EAGAIN;
		/* (the WQE's own SGEs, not the most there may be) */
		rsz = sizeof(*r) + sr_min(r->num_sge, (uint32_t)SR_MAX_SGE) * sizeof(struct ibv_sge);
		m = msg_alloc(0);
		if (m)
			m->rwqe = msg_rwqe_alloc(rsz);
		if (!m || !m->rwqe) {
			msg_free(m);
			while (k-- > 0)
				mr_release(&sd->refs[k]);
			return -ENOMEM;
		}
		memcpy(m->rwqe, r, rsz);
		m->lent_gen = gen;
		m->op = SR_MSG_SEND;
		send_flags(m, h);
		/* sd->iov and refs were filled by qp_place_send */
		sd->active = true;
		sd->msg = m;
		sd->failed = k < 0;
		sd->too_long = false;
		sd->n = k < 0 ? 0 : k;
		sd->cap = sd->got = 0;
		for (int i = 0; i < sd->n; i++)
			sd->cap += sd->iov[i].iov_len;
	} else if (!sd->active || h->mo != sd->got) {
		return tc->as_untagged ? -EAGAIN : -EBADMSG;
	}
	if (h->last)
		tc->rx_msn[DDP_QN_SEND]++;
	/* the part of the receive buffers this segment covers */
	d->failed = sd->failed || sd->too_long;
	if (off + paylen > sd->cap) {
		sd->too_long = true;
		d->failed = true;
	}
	if (!d->failed)
		n = iov_slice(sd->iov, sd->n, off, paylen, d->iov);
	sd->got += paylen;
	d->nrefs = 0;
	d->send_seg = true;
	d->send_last = h->last;
	return (ssize_t)direct_start(tc, n, MPA_ULPDU_LEN_SIZE + hl, paylen, ulen, out);
}

/* Copy what rbuf already holds of the payload, then leave the rest for
 * direct_step. hdr: the FPDU's decoded header; rbuf starts at its
 * ULPDU_Length field. Returns bytes of rbuf consumed, or -errno. */
ssize_t direct_begin(struct tcp_chan *tc, struct sr_qp *qp, const struct ddp_hdr *h,
		     size_t hl, size_t ulen, struct rx_out *out)
{
	struct rx_direct *d = &tc->dr;
	size_t paylen = ulen - hl;
	size_t start = MPA_ULPDU_LEN_SIZE + hl;
	int n;

	d->failed = false;
	d->nrefs = 0;
	if (!paylen) {
		n = 0;
	} else if (h->opcode == RDMAP_WRITE) {
		n = qp_place_write(qp, h->stag, h->to, (uint32_t)paylen, &d->refs[0]);
		if (n == 0) {
			d->iov[0] = (struct iovec){ (void *)d->refs[0].addr, paylen };
			n = 1;
		}
	} else {
		uint32_t msn;

		sr_mutex_lock(&tc->lock);
		if (FIFO_EMPTY(tc, rd_out)) {
			sr_mutex_unlock(&tc->lock);
			return -EBADMSG;
		}
		msn = *FIFO_FRONT(tc, rd_out);
		sr_mutex_unlock(&tc->lock);
		n = qp_place_read(qp, msn, h->to, (uint32_t)paylen, d->iov, d->refs, SR_MAX_SGE);
	}
	if (n == -EAGAIN)
		return -EAGAIN;		/* cannot place now: take the staged path */
	d->msg = tagged_msg(tc, h, (uint32_t)paylen, 0);
	if (!d->msg) {
		while (n-- > 0)
			mr_release(&d->refs[n]);
		return -EBADMSG;
	}
	d->msg->placed = (uint32_t)paylen;
	if (n < 0) {
		d->failed = true;
		n = 0;
	}
	d->nrefs = n;
	d->send_seg = false;
	return (ssize_t)direct_start(tc, n, start, paylen, ulen, out);
}

/* Receive the rest of a directly placed segment. 1: progress, 0: the
 * socket is empty, <0: stream lost. */
int direct_step(struct tcp_chan *tc, struct rx_out *out)
{
	struct rx_direct *d = &tc->dr;
	ssize_t n;

	if (d->remaining) {
		if (d->failed) {
			n = io_recv(tc, tc->rbuf, sr_min(d->remaining, (size_t)RX_BUF));
		} else {
			struct iovec iov[SR_MAX_SGE];
			int k = 0;

			for (int i = 0; i < d->niov; i++)
				if (d->iov[i].iov_len)
					iov[k++] = d->iov[i];
			/* (a WRITE's segment with more to come may leave the
			 * peer's part of its copy under way) */
			if (tc->shm_rx)
				shm_help_async(tc, !d->send_seg && d->msg &&
						   d->msg->op == SR_MSG_WRITE &&
						   (d->msg->flags & SR_MSGF_MORE));
			n = io_readv(tc, iov, k);
			if (tc->shm_rx)
				shm_help_async(tc, false);
			if (n < 0 && errno == EFAULT) {
				/* the target went away under us: drain, fail */
				d->failed = true;
				return 1;
			}
		}
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->remaining -= (size_t)n;
		tc->rx_placed = true;
		for (int i = 0; i < d->niov && !d->failed; i++) {
			size_t take = sr_min(d->iov[i].iov_len, (size_t)n);

			d->iov[i].iov_base = (uint8_t *)d->iov[i].iov_base + take;
			d->iov[i].iov_len -= take;
			n -= (ssize_t)take;
		}
	} else {
		uint8_t trl[MPA_TRAILER_MAX];

		n = io_recv(tc, trl, d->trailer);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		d->trailer -= (size_t)n;
	}
	if (!d->remaining && !d->trailer)
		direct_finish(tc, out);
	return 1;
}

/* Is a WRITE partly placed (the rest to come)? rx_lock held. */
bool rx_write_under_way(const struct tcp_chan *tc)
{
	return (tc->dr.active && !tc->dr.send_seg && tc->dr.msg && tc->dr.msg->op == SR_MSG_WRITE) ||
	       (tc->as_active && tc->as_op == SR_MSG_WRITE);
}

/* Is more input here now: staged bytes, a placement under way, or (on
 * shm) a record in the ring? (On TCP a read takes all the socket has.)
 * rx_lock held. */
bool rx_more_now(struct tcp_chan *tc)
{
	uint64_t mark;

	if (tc->rlen || tc->dr.active || tc->sd.active)
		return true;
	if (!tc->shm_rx)
		return false;
	mark = shm_rx_mark(tc);
	return (mark & 1) || !shm_rx_idle_at(tc, mark);
}
