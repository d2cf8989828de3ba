/* UD QPs between two processes on this host (DESIGN.md "UD wire format"):
 * sends of every size up to the MTU with bytes compared, completion and
 * GRH fields, replies through ibv_create_ah_from_wc, SEND with immediate,
 * Q_Key checks, the MTU limit, SRQ, the WR API, inline data, and
 * datagrams that find no receive posted. */
#include "ud_common.h"

enum { T_GO = 1, T_DONE, T_POSTED, T_SENT };

#define SLOT (UD_GRH + UD_MTU)
#define SEND_OFF (512 * KIB)

static uint8_t *slot(struct net_end *n, int i)
{
	return n->b.p + (size_t)i * SLOT;
}

static void post_slots(struct net_end *n, struct ibv_qp *qp, int first, int count)
{
	for (int i = first; i < first + count; i++)
		post_recv1(qp, 100 + (uint64_t)i, slot(n, i), SLOT, n->b.mr->lkey);
}

static void send_ok(struct net_end *n, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn,
		    uint32_t qkey, uint64_t wr_id, uint32_t len, uint32_t seed,
		    enum ibv_wr_opcode op, uint32_t imm, unsigned int flags)
{
	struct ibv_wc wc;
	uint8_t *p = n->b.p + SEND_OFF;

	fill_pattern(p, len, seed);
	CHECK(ud_send(qp, ah, qpn, qkey, wr_id, p, len, n->b.mr->lkey, op, imm, flags) == 0,
	      "post UD send of %u bytes", len);
	expect_wc(n->scq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, "UD send completion");
}

/* ---- sizes, fields, reply through ibv_create_ah_from_wc ------------------ */

static const uint32_t sizes[] = { 0, 1, 100, 1024, 2048, 4096 };
#define NSIZES ((int)ARRAY_SIZE(sizes))

static void sizes_a(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_ah *ah;
	uint8_t want[UD_MTU];

	post_slots(n, n->qp, 0, NSIZES);
	net_put(n, T_POSTED);
	for (int i = 0; i < NSIZES; i++) {
		char what[64];

		snprintf(what, sizeof(what), "receive of %u bytes", sizes[i]);
		CHECK(poll_one(n->rcq, &wc, 5000), "%s: no completion", what);
		CHECK(wc.wr_id == 100 + (uint64_t)i, "%s: wr_id %llu", what,
		      (unsigned long long)wc.wr_id);
		ud_check_recv(&wc, slot(n, i), n->qp, n->peer.qpn, n->peer.gid, n->me.gid,
			      sizes[i], what);
		fill_pattern(want, sizes[i], 7 + (uint32_t)i);
		check_bytes(slot(n, i) + UD_GRH, want, sizes[i], what);
	}
	/* Answer the last sender the way udaddy does. */
	ah = ibv_create_ah_from_wc(n->t.pd, &wc, (struct ibv_grh *)slot(n, NSIZES - 1), 1);
	CHECK(ah, "ibv_create_ah_from_wc: %s", strerror(errno));
	{
		struct ibv_ah_attr aa;

		CHECK(ibv_init_ah_from_wc(n->t.ctx, 1, &wc, (struct ibv_grh *)slot(n, NSIZES - 1),
					  &aa) == 0, "ibv_init_ah_from_wc: %s", strerror(errno));
		CHECK(aa.is_global && !memcmp(aa.grh.dgid.raw, n->peer.gid, 16),
		      "ibv_init_ah_from_wc: dgid is not the sender's GID");
		CHECK(ud_gid_index(n->t.ctx, &n->t.gid) == aa.grh.sgid_index,
		      "ibv_init_ah_from_wc: sgid_index %u", aa.grh.sgid_index);
	}
	net_expect(n, T_POSTED, "B posted");
	send_ok(n, n->qp, ah, wc.src_qp, NET_UD_QKEY, 1, 8, 99, IBV_WR_SEND, 0, 0);
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	net_expect(n, T_DONE, "B done");
}

static void sizes_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);
	struct ibv_wc wc;
	uint8_t want[8];

	net_expect(n, T_POSTED, "A posted");
	for (int i = 0; i < NSIZES; i++)
		send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 10 + (uint64_t)i, sizes[i],
			7 + (uint32_t)i, IBV_WR_SEND, 0, 0);
	post_slots(n, n->qp, 0, 1);
	net_put(n, T_POSTED);
	CHECK(poll_one(n->rcq, &wc, 5000), "reply: no completion");
	ud_check_recv(&wc, slot(n, 0), n->qp, n->peer.qpn, n->peer.gid, n->me.gid, 8, "reply");
	fill_pattern(want, 8, 99);
	check_bytes(slot(n, 0) + UD_GRH, want, 8, "reply");
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	net_put(n, T_DONE);
}

/* ---- SEND with immediate, inline, scattered receive ---------------------- */

static void imm_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t want[300];
	/* A receive scattered over two SGEs, the GRH area alone in the first. */
	struct ibv_sge sge[2] = {
		{ (uintptr_t)slot(n, 1), UD_GRH, n->b.mr->lkey },
		{ (uintptr_t)slot(n, 2), SLOT, n->b.mr->lkey },
	};
	struct ibv_recv_wr rw = { .wr_id = 42, .sg_list = sge, .num_sge = 2 }, *bad;

	post_slots(n, n->qp, 0, 1);
	CHECK(ibv_post_recv(n->qp, &rw, &bad) == 0, "post scattered receive");
	net_put(n, T_POSTED);
	expect_wc(n->rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "SEND with immediate");
	ud_check_recv(&wc, slot(n, 0), n->qp, n->peer.qpn, n->peer.gid, n->me.gid, 16, "imm");
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "no IBV_WC_WITH_IMM");
	CHECK(wc.imm_data == htobe32(0xdeadbeef), "imm_data %#x", be32toh(wc.imm_data));
	expect_wc(n->rcq, &wc, 42, IBV_WC_SUCCESS, IBV_WC_RECV, "inline SEND");
	ud_check_recv(&wc, slot(n, 1), n->qp, n->peer.qpn, n->peer.gid, n->me.gid, 300, "inline");
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "inline SEND has IBV_WC_WITH_IMM");
	fill_pattern(want, 300, 5);
	check_bytes(slot(n, 2), want, 300, "inline SEND scattered after the GRH");
	net_expect(n, T_DONE, "B done");
}

static void imm_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);

	net_expect(n, T_POSTED, "A posted");
	send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 1, 16, 3, IBV_WR_SEND_WITH_IMM,
		0xdeadbeef, IBV_SEND_SOLICITED);
	send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 2, 300, 5, IBV_WR_SEND, 0,
		IBV_SEND_INLINE);
	ibv_destroy_ah(ah);
	net_put(n, T_DONE);
}

/* ---- Q_Key ------------------------------------------------------------------ */

static void qkey_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t want[64];

	post_slots(n, n->qp, 0, 2);
	net_put(n, T_POSTED);
	net_expect(n, T_SENT, "B sent with a wrong Q_Key");
	expect_no_wc(n->rcq, 300, "a datagram with the wrong Q_Key");
	net_put(n, T_GO);
	expect_wc(n->rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "right Q_Key");
	fill_pattern(want, 64, 2);
	check_bytes(slot(n, 0) + UD_GRH, want, 64, "the datagram with the right Q_Key");
	expect_wc(n->rcq, &wc, 101, IBV_WC_SUCCESS, IBV_WC_RECV, "QP's own Q_Key");
	fill_pattern(want, 64, 3);
	check_bytes(slot(n, 1) + UD_GRH, want, 64, "the datagram sent with the QP's Q_Key");
	net_expect(n, T_DONE, "B done");
}

static void qkey_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);

	net_expect(n, T_POSTED, "A posted");
	/* The sender's completion is a success: nothing tells it. */
	send_ok(n, n->qp, ah, n->peer.qpn, 0x22222222, 1, 64, 1, IBV_WR_SEND, 0, 0);
	net_put(n, T_SENT);
	net_expect(n, T_GO, "A saw nothing");
	send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 2, 64, 2, IBV_WR_SEND, 0, 0);
	/* High bit set: the QP's own Q_Key (IBTA 10.2.5). */
	send_ok(n, n->qp, ah, n->peer.qpn, 0x80000000u, 3, 64, 3, IBV_WR_SEND, 0, 0);
	ibv_destroy_ah(ah);
	net_put(n, T_DONE);
}

/* ---- the MTU --------------------------------------------------------------- */

static void mtu_a(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(n->qp);
	struct ibv_port_attr pa;
	int rc;

	CHECK(ibv_query_port(n->t.ctx, 1, &pa) == 0, "ibv_query_port");
	CHECK(pa.active_mtu == IBV_MTU_4096, "active_mtu %d", pa.active_mtu);
	net_expect(n, T_POSTED, "B posted");
	rc = ud_send(n->qp, ah, n->peer.qpn, NET_UD_QKEY, 1, n->b.p + SEND_OFF, UD_MTU + 1,
		     n->b.mr->lkey, IBV_WR_SEND, 0, 0);
	CHECK(rc == EINVAL, "a UD send above the MTU: ibv_post_send returned %d, want EINVAL", rc);
	expect_no_wc(n->scq, 100, "the refused send");
	/* The WR API refuses it the same way, at wr_complete. */
	ibv_wr_start(qx);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, n->peer.qpn, NET_UD_QKEY);
	ibv_wr_set_sge(qx, n->b.mr->lkey, (uintptr_t)n->b.p + SEND_OFF, UD_MTU + 1);
	rc = ibv_wr_complete(qx);
	CHECK(rc == EINVAL, "ibv_wr_complete above the MTU returned %d", rc);
	/* Exactly the MTU goes, and the QP is fine. */
	send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 3, UD_MTU, 11, IBV_WR_SEND, 0, 0);
	CHECK(qp_state(n->qp) == IBV_QPS_RTS, "QP left RTS");
	ibv_destroy_ah(ah);
	net_expect(n, T_DONE, "B done");
}

static void mtu_b(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t want[UD_MTU];

	post_slots(n, n->qp, 0, 1);
	net_put(n, T_POSTED);
	expect_wc(n->rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "MTU-sized datagram");
	ud_check_recv(&wc, slot(n, 0), n->qp, n->peer.qpn, n->peer.gid, n->me.gid, UD_MTU, "MTU");
	fill_pattern(want, UD_MTU, 11);
	check_bytes(slot(n, 0) + UD_GRH, want, UD_MTU, "MTU-sized datagram");
	net_put(n, T_DONE);
}

/* ---- no receive posted: dropped; traffic after it flows -------------------- */

/* Datagrams that find no receive WQE are held for the QP until it posts
 * some (docs/COMPAT.md), in order, up to 1024; past that UD loses them. */
#define NORECV_FLOOD 5000

static void norecv_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t want[32];
	int got = 0;

	net_put(n, T_GO);
	net_expect(n, T_SENT, "B sent three");
	usleep(200 * 1000);
	post_slots(n, n->qp, 0, 4);
	for (int i = 0; i < 3; i++) {
		expect_wc(n->rcq, &wc, 100 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "a held datagram");
		fill_pattern(want, 32, 30 + (uint32_t)i);
		check_bytes(slot(n, i) + UD_GRH, want, 32, "a held datagram, in order");
	}
	expect_no_wc(n->rcq, 100, "a fourth datagram");
	net_put(n, T_POSTED);
	expect_wc(n->rcq, &wc, 103, IBV_WC_SUCCESS, IBV_WC_RECV, "the datagram after them");
	fill_pattern(want, 32, 40);
	check_bytes(slot(n, 3) + UD_GRH, want, 32, "the datagram after them");
	expect_no_wc(n->rcq, 100, "anything else");

	/* A flood with no receive posted: at most 4096 are kept. */
	net_put(n, T_GO);
	net_expect(n, T_SENT, "B flooded");
	usleep(200 * 1000);
	for (int round = 0; round < NORECV_FLOOD / 100 + 1; round++) {
		post_slots(n, n->qp, 0, 100);
		for (int k = 0; k < 100; k++) {
			if (poll_one(n->rcq, &wc, 200) != 1)
				goto drained;
			CHECK(wc.status == IBV_WC_SUCCESS, "flood: %s", ibv_wc_status_str(wc.status));
			got++;
		}
	}
drained:
	CHECK(got > 0 && got <= 4096, "%d of %d flooded datagrams kept", got, NORECV_FLOOD);
	printf("  note: %d of %d datagrams sent with no receive posted were kept\n", got,
	       NORECV_FLOOD);
	CHECK(qp_state(n->qp) == IBV_QPS_RTS, "QP left RTS");
	net_put(n, T_DONE);
}

static void norecv_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);

	net_expect(n, T_GO, "A ready");
	for (int i = 0; i < 3; i++)
		send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 1 + (uint64_t)i, 32,
			30 + (uint32_t)i, IBV_WR_SEND, 0, 0);
	net_put(n, T_SENT);
	net_expect(n, T_POSTED, "A posted");
	send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 9, 32, 40, IBV_WR_SEND, 0, 0);
	net_expect(n, T_GO, "A ready for the flood");
	for (int i = 0; i < NORECV_FLOOD; i++) {
		send_ok(n, n->qp, ah, n->peer.qpn, NET_UD_QKEY, 10, 32, 50, IBV_WR_SEND, 0, 0);
		if (i % 64 == 63)
			usleep(1000);	/* the receiver's socket keeps up */
	}
	net_put(n, T_SENT);
	ibv_destroy_ah(ah);
	net_expect(n, T_DONE, "A done");
}

/* ---- SRQ, and a second UD QP on one context --------------------------------- */

static void srq_a(struct net_end *n)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(n->t.pd, &sa);
	struct ibv_qp *qp2;
	struct ibv_wc wc;
	int seen = 0;

	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	struct ibv_qp_init_attr ia = {
		.send_cq = n->scq, .recv_cq = n->rcq, .srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	qp2 = ibv_create_qp(n->t.pd, &ia);
	CHECK(qp2, "ibv_create_qp(UD, SRQ): %s", strerror(errno));
	net_ud_ready(qp2, 1);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)slot(n, i), SLOT, n->b.mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 200 + (uint64_t)i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;

		CHECK(ibv_post_srq_recv(srq, &rw, &bad) == 0, "ibv_post_srq_recv");
	}
	net_put(n, qp2->qp_num);
	for (int i = 0; i < 4; i++) {
		CHECK(poll_one(n->rcq, &wc, 5000), "SRQ receive %d: no completion", i);
		CHECK(wc.wr_id >= 200 && wc.wr_id < 204, "wr_id %llu", (unsigned long long)wc.wr_id);
		ud_check_recv(&wc, slot(n, (int)(wc.wr_id - 200)), qp2, n->peer.qpn, n->peer.gid,
			      n->me.gid, 128, "SRQ receive");
		seen |= 1 << (wc.wr_id - 200);
	}
	CHECK(seen == 15, "SRQ WQEs used: %#x", seen);
	expect_no_wc(n->rcq, 100, "the net QP, which was not addressed");
	net_expect(n, T_DONE, "B done");
	CHECK(ibv_destroy_qp(qp2) == 0, "destroy SRQ QP");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
}

static void srq_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);
	uint32_t qpn = (uint32_t)net_get(n);

	for (int i = 0; i < 4; i++)
		send_ok(n, n->qp, ah, qpn, NET_UD_QKEY, 1 + (uint64_t)i, 128, 50, IBV_WR_SEND, 0, 0);
	ibv_destroy_ah(ah);
	net_put(n, T_DONE);
}

/* ---- the WR API (what perftest uses) ----------------------------------------- */

static void wrapi_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint32_t qpn;

	post_slots(n, n->qp, 0, 2);
	net_put(n, T_POSTED);
	qpn = (uint32_t)net_get(n);
	for (int i = 0; i < 2; i++) {
		expect_wc(n->rcq, &wc, 100 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV, "WR API send");
		ud_check_recv(&wc, slot(n, i), n->qp, qpn, n->peer.gid, n->me.gid, 256, "WR API");
		CHECK(!!(wc.wc_flags & IBV_WC_WITH_IMM) == i, "WR API: IBV_WC_WITH_IMM on %d", i);
	}
	CHECK(wc.imm_data == htobe32(77), "imm %#x", be32toh(wc.imm_data));
	net_expect(n, T_DONE, "B done");
}

static void wrapi_b(struct net_end *n)
{
	struct ibv_ah *ah = ud_ah(n->t.pd, &n->peer_gid, 0);
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = n->scq, .recv_cq = n->rcq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = n->t.pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(n->t.ctx, &ia);
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;

	CHECK(qp, "ibv_create_qp_ex(UD): %s", strerror(errno));
	net_ud_ready(qp, 1);
	qx = ibv_qp_to_qp_ex(qp);
	fill_pattern(n->b.p + SEND_OFF, 256, 60);
	net_expect(n, T_POSTED, "A posted");
	net_put(n, qp->qp_num);
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, n->peer.qpn, NET_UD_QKEY);
	ibv_wr_set_sge(qx, n->b.mr->lkey, (uintptr_t)n->b.p + SEND_OFF, 256);
	qx->wr_id = 2;
	ibv_wr_send_imm(qx, htobe32(77));
	ibv_wr_set_ud_addr(qx, ah, n->peer.qpn, NET_UD_QKEY);
	ibv_wr_set_sge(qx, n->b.mr->lkey, (uintptr_t)n->b.p + SEND_OFF, 256);
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_complete");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "WR API send 1");
	expect_wc(n->scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "WR API send 2");
	net_put(n, T_DONE);
	CHECK(ibv_destroy_qp(qp) == 0, "destroy WR API QP");
	ibv_destroy_ah(ah);
}

static void sub_sizes(void) { struct net_opts o = ud_opts(); net_fork_run(&o, sizes_a, sizes_b); }
static void sub_imm(void) { struct net_opts o = ud_opts(); o.max_inline = 512; net_fork_run(&o, imm_a, imm_b); }
static void sub_qkey(void) { struct net_opts o = ud_opts(); net_fork_run(&o, qkey_a, qkey_b); }
static void sub_mtu(void) { struct net_opts o = ud_opts(); net_fork_run(&o, mtu_a, mtu_b); }
static void sub_norecv(void) { struct net_opts o = ud_opts(); net_fork_run(&o, norecv_a, norecv_b); }
static void sub_srq(void) { struct net_opts o = ud_opts(); net_fork_run(&o, srq_a, srq_b); }
static void sub_wrapi(void) { struct net_opts o = ud_opts(); net_fork_run(&o, wrapi_a, wrapi_b); }

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "sizes_grh_reply", sub_sizes },
		{ "imm_inline_scatter", sub_imm },
		{ "qkey", sub_qkey },
		{ "mtu", sub_mtu },
		{ "no_recv_held", sub_norecv },
		{ "srq", sub_srq },
		{ "wr_api", sub_wrapi },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
