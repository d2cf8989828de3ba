/* Helpers for the UD integration tests (ud_*.c): two processes through
 * net_fork_run (net_common.h) with UD QPs, address handles to the peer,
 * and the checks every UD receive completion must pass. Header-only, for
 * the reason net_common.h gives. */
#ifndef INTEG_UD_COMMON_H
#define INTEG_UD_COMMON_H

#include "net_common.h"

#include <infiniband/verbs.h>

#define UD_GRH 40
#define UD_MTU 4096

static NET_UNUSED struct net_opts ud_opts(void)
{
	struct net_opts o = net_opts_default();

	o.type = IBV_QPT_UD;
	o.max_send_sge = 2;
	o.max_recv_sge = 2;
	o.buf_len = 1 * MIB;
	return o;
}

/* An AH to a GID (sgid_index: ours to send from). */
static NET_UNUSED struct ibv_ah *ud_ah(struct ibv_pd *pd, const union ibv_gid *dgid,
				       int sgid_index)
{
	struct ibv_ah_attr a = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = *dgid, .sgid_index = (uint8_t)sgid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &a);

	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	return ah;
}

static NET_UNUSED int ud_send(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn,
			      uint32_t qkey, uint64_t wr_id, void *addr, uint32_t len,
			      uint32_t lkey, enum ibv_wr_opcode op, uint32_t imm,
			      unsigned int flags)
{
	struct ibv_sge sge = { (uintptr_t)addr, len, lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = op, .send_flags = flags | IBV_SEND_SIGNALED,
		.imm_data = htobe32(imm),
	}, *bad = NULL;
	int rc;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	rc = ibv_post_send(qp, &wr, &bad);
	CHECK(rc == 0 || bad == &wr, "ibv_post_send failed (%d) without bad_wr", rc);
	return rc;
}

/* The index of a GID in our table, or -1. */
static NET_UNUSED int ud_gid_index(struct ibv_context *ctx, const union ibv_gid *g)
{
	union ibv_gid x;

	for (int i = 0; i < 32; i++) {
		if (ibv_query_gid(ctx, 1, i, &x))
			break;
		if (!memcmp(&x, g, sizeof(x)))
			return i;
	}
	return -1;
}

static NET_UNUSED int ud_is_v4(const uint8_t *g)
{
	static const uint8_t p[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g, p, 12);
}

static NET_UNUSED uint16_t ud_csum(const uint8_t *h)
{
	uint32_t s = 0;

	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)(h[i] << 8 | h[i + 1]);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* A successful UD receive of len bytes from src (QPN, GID) to dst_gid:
 * wc fields as ibv_poll_cq(3) gives them for UD, and the GRH area as a
 * RoCEv2 device writes it (IPv4 header in the last 20 bytes). */
static NET_UNUSED void ud_check_recv(const struct ibv_wc *wc, const uint8_t *grh,
				     struct ibv_qp *me, uint32_t src_qpn,
				     const uint8_t *sgid, const uint8_t *dgid,
				     uint32_t len, const char *what)
{
	CHECK(wc->status == IBV_WC_SUCCESS, "%s: status %s", what, ibv_wc_status_str(wc->status));
	CHECK(wc->opcode == IBV_WC_RECV, "%s: opcode %d", what, wc->opcode);
	CHECK(wc->byte_len == len + UD_GRH, "%s: byte_len %u, want %u", what, wc->byte_len,
	      len + UD_GRH);
	CHECK(wc->wc_flags & IBV_WC_GRH, "%s: no IBV_WC_GRH", what);
	CHECK(wc->qp_num == me->qp_num, "%s: qp_num %#x", what, wc->qp_num);
	CHECK(wc->src_qp == src_qpn, "%s: src_qp %#x, want %#x", what, wc->src_qp, src_qpn);
	CHECK(wc->pkey_index == 0 && wc->slid == 0 && wc->dlid_path_bits == 0,
	      "%s: pkey_index %u slid %u path bits %u", what, wc->pkey_index, wc->slid,
	      wc->dlid_path_bits);
	/* sl: the L3 header type, as mlx5 reports it on RoCE (2 IPv4, 1 IPv6). */
	CHECK(wc->sl == (ud_is_v4(sgid) ? 2 : 1), "%s: sl %u for an IPv%d sender", what,
	      wc->sl, ud_is_v4(sgid) ? 4 : 6);
	if (ud_is_v4(sgid)) {
		const uint8_t *ip = grh + 20;

		CHECK(ip[0] == 0x45, "%s: IPv4 header byte 0 %#x", what, ip[0]);
		CHECK(ip[9] == 17, "%s: IPv4 protocol %u", what, ip[9]);
		CHECK(ud_csum(ip) == 0, "%s: IPv4 header checksum wrong", what);
		CHECK(!memcmp(ip + 12, sgid + 12, 4), "%s: IPv4 source", what);
		CHECK(!memcmp(ip + 16, dgid + 12, 4), "%s: IPv4 destination", what);
		CHECK(ip[8] > 0, "%s: TTL 0", what);
	} else {
		CHECK(grh[0] >> 4 == 6, "%s: GRH version %u", what, grh[0] >> 4);
		CHECK(grh[6] == 17, "%s: next header %u", what, grh[6]);
		CHECK(!memcmp(grh + 8, sgid, 16), "%s: GRH sgid", what);
		CHECK(!memcmp(grh + 24, dgid, 16), "%s: GRH dgid", what);
	}
}

#endif
