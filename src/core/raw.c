/* Raw packet QPs (IBV_QPT_RAW_PACKET; core/raw.h, DESIGN.md decision 20).
 *
 * Send: sq_fill takes the WQE as for any QP; progress gathers its frame
 * under the QP lock, completes the WQE (the NIC is done with the buffer)
 * and queues the frame in the QP's outbox; qp_kick, with no QP lock held,
 * hands the outbox to the port switch (core/flow.c), which may deliver to
 * this very QP or to any other: that is why it must run unlocked.
 * Receive: a frame the switch gives a QP takes its next receive WQE (or
 * SRQ's) and completes on its receive CQ; none posted, it is dropped.
 */
#include "core/raw.h"
#include "chan/packet.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The kernel's uverbs asks for CAP_NET_RAW in the device's network
 * namespace; opening a packet socket asks the very same question. */
bool raw_cap_net_raw(void)
{
	int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static uint32_t rss_fields(uint64_t ib)
{
	static const struct { uint64_t ib; uint32_t eth; } map[] = {
		{ IBV_RX_HASH_SRC_IPV4, ETH_RSS_SRC_IPV4 },
		{ IBV_RX_HASH_DST_IPV4, ETH_RSS_DST_IPV4 },
		{ IBV_RX_HASH_SRC_IPV6, ETH_RSS_SRC_IPV6 },
		{ IBV_RX_HASH_DST_IPV6, ETH_RSS_DST_IPV6 },
		{ IBV_RX_HASH_SRC_PORT_TCP, ETH_RSS_SRC_PORT_TCP },
		{ IBV_RX_HASH_DST_PORT_TCP, ETH_RSS_DST_PORT_TCP },
		{ IBV_RX_HASH_SRC_PORT_UDP, ETH_RSS_SRC_PORT_UDP },
		{ IBV_RX_HASH_DST_PORT_UDP, ETH_RSS_DST_PORT_UDP },
	};
	uint32_t r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (ib & map[i].ib)
			r |= map[i].eth;
	return r;
}

#define RSS_KNOWN_FIELDS (IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | \
			  IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 | \
			  IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP | \
			  IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP)

static int rss_check(const struct ibv_qp_init_attr_ex *a)
{
	const struct ibv_rx_hash_conf *h = &a->rx_hash_conf;
	bool hash = a->comp_mask & IBV_QP_INIT_ATTR_RX_HASH;
	bool tbl = a->comp_mask & IBV_QP_INIT_ATTR_IND_TABLE;

	if (!hash && !tbl)
		return 0;
	/* an RSS QP needs both; it has no send queue and no SRQ */
	if (!hash || !tbl || !a->rwq_ind_tbl || a->srq)
		return -EINVAL;
	if (h->rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ)
		return -EOPNOTSUPP;
	/* inner (tunnelled) headers and the IPsec SPI are not hashed here */
	if (h->rx_hash_fields_mask & ~(uint64_t)RSS_KNOWN_FIELDS)
		return -EOPNOTSUPP;
	/* the 40-byte key of Microsoft's RSS, as mlx5 requires */
	if (h->rx_hash_key_len != ETH_RSS_KEY_LEN || !h->rx_hash_key)
		return -EINVAL;
	return 0;
}

int raw_qp_check(struct ibv_qp_init_attr_ex *a)
{
	if (!raw_cap_net_raw())
		return -EPERM;
	return rss_check(a);
}

int raw_qp_init(struct sr_qp *qp, struct ibv_qp_init_attr_ex *a)
{
	struct sr_raw_qp *raw = calloc(1, sizeof(*raw));

	if (!raw)
		return -ENOMEM;
	pthread_mutex_init(&raw->tx_lock, NULL);
	sr_list_init(&raw->outbox);
	atomic_init(&raw->nflows, 0);
	if (a->comp_mask & IBV_QP_INIT_ATTR_IND_TABLE) {
		raw->tbl = to_ind_tbl(a->rwq_ind_tbl);
		memcpy(raw->key, a->rx_hash_conf.rx_hash_key, ETH_RSS_KEY_LEN);
		raw->hash_fields = rss_fields(a->rx_hash_conf.rx_hash_fields_mask);
		atomic_fetch_add(&raw->tbl->refs, 1);
	}
	/* an RSS QP never sends, but frames from the wire reach it too */
	raw->uplink = chan_packet_get();
	qp->raw = raw;
	return 0;
}

int raw_qp_destroy_check(struct sr_qp *qp)
{
	/* as uverbs: a flow holds its QP */
	return atomic_load(&qp->raw->nflows) ? -EBUSY : 0;
}

void raw_qp_fini(struct sr_qp *qp)
{
	struct sr_raw_qp *raw = qp->raw;
	struct sr_list *pos, *tmp;

	if (!raw)
		return;
	sr_list_for_each_safe(pos, tmp, &raw->outbox) {
		sr_list_del(pos);
		msg_free(container_of(pos, struct sr_msg, link));
	}
	if (raw->tbl)
		atomic_fetch_sub(&raw->tbl->refs, 1);
	if (raw->uplink)
		chan_packet_put();
	pthread_mutex_destroy(&raw->tx_lock);
	free(raw);
	qp->raw = NULL;
}

/* ---- send ---------------------------------------------------------------- */

int raw_sq_fill_locked(struct sr_qp *qp, struct sr_swqe *w, const struct ibv_send_wr *wr)
{
	/* ibv_post_send(3): a raw packet QP sends plain SENDs (no TSO here) */
	if (raw_qp_is_rss(qp) || wr->opcode != IBV_WR_SEND)
		return -EINVAL;
	if (w->length < ETH_HDR_LEN || w->length > SR_RAW_MAX_FRAME)
		return -EINVAL;
	return 0;
}

/* Copy the WQE's frame into m. */
static enum ibv_wc_status raw_gather(struct sr_qp *qp, struct sr_swqe *w, struct sr_msg *m)
{
	uint32_t off = 0;

	if (w->flags & IBV_SEND_INLINE) {
		memcpy(m->payload, w->inl, w->length);
		return IBV_WC_SUCCESS;
	}
	for (uint32_t i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];
		struct sr_mref ref;
		int ret;

		if (!s->length)
			continue;
		if (mr_resolve(qp->ctx, qp->pd, s->lkey, s->addr, s->length, 0, false, &ref))
			return IBV_WC_LOC_PROT_ERR;
		ret = mref_read(&ref, m->payload + off, s->length);
		mr_release(&ref);
		if (ret)
			return IBV_WC_LOC_PROT_ERR;
		off += s->length;
	}
	return IBV_WC_SUCCESS;
}

void raw_sq_progress_locked(struct sr_qp *qp)
{
	while (qp->state == IBV_QPS_RTS && qp->sq_next != qp->sq_tail) {
		struct sr_swqe *w = sq_at(qp, qp->sq_next);
		struct sr_msg *m = msg_alloc((uint32_t)w->length);
		enum ibv_wc_status st = m ? raw_gather(qp, w, m) : IBV_WC_LOC_QP_OP_ERR;

		if (st == IBV_WC_SUCCESS)
			sr_list_add_tail(&qp->raw->outbox, &m->link);
		else
			msg_free(m);
		w->state = SR_WQE_SENT;
		qp->sq_next++;
		sq_settle_locked(qp, w, st);
	}
}

void raw_tx_flush(struct sr_qp *qp)
{
	struct sr_raw_qp *raw = qp->raw;

	pthread_mutex_lock(&raw->tx_lock);
	for (;;) {
		struct sr_msg *m = NULL;

		sr_mutex_lock(&qp->lock);
		if (!sr_list_empty(&raw->outbox)) {
			m = container_of(raw->outbox.next, struct sr_msg, link);
			sr_list_del(&m->link);
		}
		sr_mutex_unlock(&qp->lock);
		if (!m)
			break;
		/* the QPs of this process first, then the wire (a NIC's
		 * loopback and uplink; which comes first is invisible) */
		raw_switch(m->payload, m->len);
		if (raw->uplink)
			chan_packet_send(m->payload, m->len);
		msg_free(m);
	}
	pthread_mutex_unlock(&raw->tx_lock);
}

/* ---- receive ------------------------------------------------------------- */

/* Scatter len bytes over the WQE's list; the status it completes with. */
static enum ibv_wc_status raw_scatter(struct sr_context *ctx, struct sr_pd *pd,
				      const struct sr_rwqe *r, const uint8_t *frame,
				      uint32_t len)
{
	uint64_t room = 0;
	uint32_t off = 0;

	for (uint32_t i = 0; i < r->num_sge; i++)
		room += r->sge[i].length;
	if (room < len)
		return IBV_WC_LOC_LEN_ERR;
	for (uint32_t i = 0; i < r->num_sge && off < len; i++) {
		uint32_t n = sr_min(r->sge[i].length, len - off);
		struct sr_mref ref;
		int ret;

		if (!n)
			continue;
		if (mr_resolve(ctx, pd, r->sge[i].lkey, r->sge[i].addr, n,
			       IBV_ACCESS_LOCAL_WRITE, false, &ref))
			return IBV_WC_LOC_PROT_ERR;
		ret = mref_write(&ref, frame + off, n);
		mr_release(&ref);
		if (ret)
			return IBV_WC_LOC_PROT_ERR;
		off += n;
	}
	return IBV_WC_SUCCESS;
}

void raw_complete(struct sr_context *ctx, struct sr_pd *pd, struct sr_cq *cq,
		  const struct sr_rwqe *r, const uint8_t *frame, uint32_t len,
		  uint32_t qp_num)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = r->wr_id;
	wc.status = raw_scatter(ctx, pd, r, frame, len);
	wc.opcode = IBV_WC_RECV;
	wc.qp_num = qp_num;
	/* ibv_poll_cq(3): byte_len is the whole frame; no checksum was
	 * verified, so no IBV_WC_IP_CSUM_OK; slid, sl, src_qp are 0 on
	 * Ethernet. A frame too large for the buffer fails its WQE only: a
	 * frame from anywhere must not take the QP down (decision 8). */
	if (wc.status == IBV_WC_SUCCESS)
		wc.byte_len = len;
	cq_push(cq, &wc, false);
}

static bool raw_take_rwqe(struct sr_qp *qp, struct sr_rwqe *out)
{
	if (qp->srq)
		return srq_take(qp->srq, out) == 0;
	if (qp->rq.head == qp->rq.tail)
		return false;
	memcpy(out, rq_at(&qp->rq, qp->rq.head), qp->rq.stride);
	qp->rq.head++;
	return true;
}

void raw_qp_rx(struct sr_qp *qp, const uint8_t *frame, uint32_t len, const struct eth_info *f)
{
	uint8_t rbuf[sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge)];
	struct sr_rwqe *r = (struct sr_rwqe *)rbuf;
	struct sr_raw_qp *raw = qp->raw;

	/* An RSS QP has no state of its own to receive in (modify is not
	 * supported on it, as on mlx5): its WQs' states decide. */
	if (raw->tbl) {
		uint32_t h = eth_rss_hash(f, raw->hash_fields, raw->key, ETH_RSS_KEY_LEN);

		wq_rx(raw->tbl->wqs[h & (raw->tbl->size - 1)], frame, len);
		return;
	}
	sr_mutex_lock(&qp->lock);
	if (qp->state >= IBV_QPS_RTR && qp->state <= IBV_QPS_SQE && raw_take_rwqe(qp, r))
		raw_complete(qp->ctx, qp->pd, qp->rcq, r, frame, len, qp->ibqp.qp_base.qp_num);
	sr_mutex_unlock(&qp->lock);
}
