/* Data path between two processes: every opcode, byte for byte, over the
 * TCP channel (QPs connected by hand with is_global=1 and the peer's GID).
 *
 * Side A (the parent) is the requester, side B (the child) the responder,
 * unless a test says otherwise. See net_common.h.
 *
 * Usage:
 *   test_net_datapath [SUBTEST...]          fork: A and B on this host
 *   test_net_datapath --server PORT         side B of every subtest, the
 *                                           out-of-band exchange over TCP
 *   test_net_datapath --client ADDR PORT    side A, connecting to ADDR:PORT
 */
#include "net_common.h"

#include <stdlib.h>

/* 65536: exactly one maximal FPDU region; 65537 one byte more. */
static const uint32_t sizes[] = { 0, 1, 65536, 65537, MIB, 8 * MIB };

#define BIG_BUF (8 * MIB + 64 * KIB)

enum {
	T_READY = 0x100,
	T_DONE = 0x200,
	T_CHECKED = 0x300,
};

static void big_opts(struct net_opts *o)
{
	o->buf_len = BIG_BUF;
}

/* ---- SEND --------------------------------------------------------------- */

static void send_sizes_a(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		snprintf(what, sizeof(what), "SEND %u bytes", len);
		fill_pattern(n->b.p, len, 100 + (uint32_t)i);
		net_expect(n, T_READY + i, what);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 2000 + i, n->b.p, len,
				 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "%s: post", what);
		expect_wc(n->scq, &wc, 2000 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  what);
		CHECK(wc.qp_num == n->qp->qp_num, "%s: qp_num %u", what,
		      wc.qp_num);
	}
	/* pipelined: five messages in flight at once, B has five receives */
	net_expect(n, T_READY + 99, "pipelined receives posted");
	uint32_t off = 0;
	for (size_t i = 1; i < ARRAY_SIZE(sizes) - 1; i++) {
		fill_pattern(n->b.p + off, sizes[i], 500 + (uint32_t)i);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 2100 + i, n->b.p + off,
				 sizes[i], n->b.mr->lkey, IBV_SEND_SIGNALED, 0,
				 0, 0) == 0, "post pipelined SEND %zu", i);
		off += sizes[i] + 4096;
	}
	for (size_t i = 1; i < ARRAY_SIZE(sizes) - 1; i++)
		expect_wc(n->scq, &wc, 2100 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "pipelined SEND");
	net_expect(n, T_CHECKED, "B checked");
}

static void send_sizes_b(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		snprintf(what, sizeof(what), "SEND %u bytes", len);
		memset(n->b.p, 0xee, n->b.len);
		post_recv1(n->qp, 1000 + i, n->b.p, (uint32_t)n->b.len,
			   n->b.mr->lkey);
		net_put(n, T_READY + i);
		expect_wc(n->rcq, &wc, 1000 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  what);
		net_check_recv(&wc, IBV_WC_RECV, len, n, what);
		CHECK(!(wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)),
		      "%s: wc_flags %#x has IMM/INV", what, wc.wc_flags);
		check_pattern(n->b.p, len, 100 + (uint32_t)i, what);
		check_filled(n->b.p + len, 0xee, 64, "bytes past the message");
	}
	memset(n->b.p, 0xee, n->b.len);
	uint32_t off = 0;
	for (size_t i = 1; i < ARRAY_SIZE(sizes) - 1; i++) {
		post_recv1(n->qp, 1100 + i, n->b.p + off, sizes[i],
			   n->b.mr->lkey);
		off += sizes[i] + 4096;
	}
	net_put(n, T_READY + 99);
	off = 0;
	for (size_t i = 1; i < ARRAY_SIZE(sizes) - 1; i++) {
		snprintf(what, sizeof(what), "pipelined SEND %u bytes",
			 sizes[i]);
		expect_wc(n->rcq, &wc, 1100 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  what);
		net_check_recv(&wc, IBV_WC_RECV, sizes[i], n, what);
		check_pattern(n->b.p + off, sizes[i], 500 + (uint32_t)i, what);
		check_filled(n->b.p + off + sizes[i], 0xee, 4096,
			     "gap after a pipelined message");
		off += sizes[i] + 4096;
	}
	net_put(n, T_CHECKED);
}

static void send_imm_a(struct net_end *n)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, 65537, 7);
	net_expect(n, T_READY, "receives posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_IMM, 21, n->b.p, 300,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0xdeadbeef) == 0, "post SEND_WITH_IMM");
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_IMM, 22, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0x01020304) == 0,
	      "post zero-length SEND_WITH_IMM");
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_IMM, 23, n->b.p, 65537,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post 65537-byte SEND_WITH_IMM, imm 0");
	expect_wc(n->scq, &wc, 21, IBV_WC_SUCCESS, IBV_WC_SEND, "sender 1");
	expect_wc(n->scq, &wc, 22, IBV_WC_SUCCESS, IBV_WC_SEND, "sender 2");
	expect_wc(n->scq, &wc, 23, IBV_WC_SUCCESS, IBV_WC_SEND, "sender 3");
	net_expect(n, T_CHECKED, "B checked");
}

static void send_imm_b(struct net_end *n)
{
	struct ibv_wc wc;

	memset(n->b.p, 0xee, 256 * KIB);
	post_recv1(n->qp, 11, n->b.p, 4096, n->b.mr->lkey);
	post_recv1(n->qp, 12, n->b.p + 4096, 4096, n->b.mr->lkey);
	post_recv1(n->qp, 13, n->b.p + 8192, 128 * KIB, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 1");
	net_check_recv(&wc, IBV_WC_RECV, 300, n, "recv 1");
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "wc_flags %#x lacks WITH_IMM",
	      wc.wc_flags);
	CHECK(wc.imm_data == htobe32(0xdeadbeef),
	      "imm_data %#x, want %#x (network order)", wc.imm_data,
	      htobe32(0xdeadbeef));
	check_pattern(n->b.p, 300, 7, "SEND_WITH_IMM payload");
	check_filled(n->b.p + 300, 0xee, 4096 - 300, "rest of receive 1");
	expect_wc(n->rcq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	net_check_recv(&wc, IBV_WC_RECV, 0, n, "recv 2");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htobe32(0x01020304),
	      "recv 2: wc_flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	check_filled(n->b.p + 4096, 0xee, 4096, "zero-length receive buffer");
	expect_wc(n->rcq, &wc, 13, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 3");
	net_check_recv(&wc, IBV_WC_RECV, 65537, n, "recv 3");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == 0,
	      "recv 3: wc_flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	check_pattern(n->b.p + 8192, 65537, 7, "65537-byte SEND_WITH_IMM");
	net_put(n, T_CHECKED);
}

/* ---- RDMA WRITE ------------------------------------------------------- */

static void write_sizes_a(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		snprintf(what, sizeof(what), "RDMA_WRITE %u bytes", len);
		fill_pattern(n->b.p, len, 200 + (uint32_t)i);
		net_expect(n, T_READY + i, what);
		CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 3000 + i, n->b.p,
				 len, n->b.mr->lkey, IBV_SEND_SIGNALED,
				 n->peer.addr + 8, n->peer.rkey, 0) == 0,
		      "%s: post", what);
		expect_wc(n->scq, &wc, 3000 + i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_WRITE, what);
		CHECK(wc.qp_num == n->qp->qp_num, "%s: qp_num", what);
		a_fence(n);
	}
	net_expect(n, T_CHECKED, "B checked");
}

static void write_sizes_b(struct net_end *n)
{
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		snprintf(what, sizeof(what), "RDMA_WRITE %u bytes", len);
		memset(n->b.p, 0xee, n->b.len);
		net_put(n, T_READY + i);
		b_fence(n);
		check_filled(n->b.p, 0xee, 8, "bytes before the target");
		check_pattern(n->b.p + 8, len, 200 + (uint32_t)i, what);
		check_filled(n->b.p + 8 + len, 0xee, 64,
			     "bytes after the target");
	}
	expect_no_wc(n->rcq, 50, "plain WRITE must not consume a receive");
	net_put(n, T_CHECKED);
}

static void write_imm_a(struct net_end *n)
{
	struct ibv_wc wc;
	const uint32_t len = 70000;

	fill_pattern(n->b.p, 8 * MIB, 9);
	net_expect(n, T_READY, "receives posted");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 51, n->b.p, len,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, n->peer.addr,
			 n->peer.rkey, 0xcafe0001) == 0, "post WRITE_WITH_IMM");
	expect_wc(n->scq, &wc, 51, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "requester");
	net_expect(n, T_CHECKED + 1, "B checked 1");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 52, NULL, 0, 0,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 7) == 0,
	      "post zero-length WRITE_WITH_IMM");
	expect_wc(n->scq, &wc, 52, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "requester 2");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 53, n->b.p,
			 8 * MIB, n->b.mr->lkey, IBV_SEND_SIGNALED,
			 n->peer.addr + 16, n->peer.rkey, 0x80000000u) == 0,
	      "post 8 MiB WRITE_WITH_IMM");
	expect_wc(n->scq, &wc, 53, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "requester 3");
	net_expect(n, T_CHECKED, "B checked");
}

static void write_imm_b(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t *rb = n->b.p + 8 * MIB + 32 * KIB; /* receive buffers */

	memset(n->b.p, 0xee, n->b.len);
	/* receive buffers are small and far from the target: untouched */
	post_recv1(n->qp, 41, rb, 64, n->b.mr->lkey);
	post_recv1(n->qp, 42, rb + 64, 64, n->b.mr->lkey);
	post_recv1(n->qp, 43, rb + 128, 0, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 41, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		  "responder");
	net_check_recv(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 70000, n,
		       "WRITE_WITH_IMM at the responder");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htobe32(0xcafe0001),
	      "wc_flags %#x imm_data %#x", wc.wc_flags, wc.imm_data);
	check_pattern(n->b.p, 70000, 9, "WRITE_WITH_IMM data");
	check_filled(n->b.p + 70000, 0xee, 64, "after WRITE_WITH_IMM data");
	check_filled(rb, 0xee, 192, "receive buffers");
	net_put(n, T_CHECKED + 1);
	expect_wc(n->rcq, &wc, 42, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		  "responder 2 (second receive)");
	net_check_recv(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 0, n,
		       "zero-length WRITE_WITH_IMM");
	CHECK(wc.imm_data == htobe32(7), "imm_data %#x", wc.imm_data);
	expect_wc(n->rcq, &wc, 43, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		  "responder 3 (zero-length receive)");
	net_check_recv(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 8 * MIB, n,
		       "8 MiB WRITE_WITH_IMM");
	CHECK(wc.imm_data == htobe32(0x80000000u), "imm_data %#x",
	      wc.imm_data);
	check_pattern(n->b.p, 16, 9, "first WRITE's bytes before the 8 MiB one");
	check_pattern(n->b.p + 16, 8 * MIB, 9, "8 MiB WRITE_WITH_IMM data");
	check_filled(n->b.p + 16 + 8 * MIB, 0xee, 64, "after it");
	check_filled(rb, 0xee, 192, "receive buffers");
	net_put(n, T_CHECKED);
}

/* ---- RDMA READ -------------------------------------------------------- */

static void read_sizes_a(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t len = sizes[i];
		snprintf(what, sizeof(what), "RDMA_READ %u bytes", len);
		memset(n->b.p, 0xee, n->b.len);
		net_expect(n, T_READY + i, what);
		CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 4000 + i, n->b.p + 3,
				 len, n->b.mr->lkey, IBV_SEND_SIGNALED,
				 n->peer.addr + 4, n->peer.rkey, 0) == 0,
		      "%s: post", what);
		expect_wc(n->scq, &wc, 4000 + i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_READ, what);
		CHECK(wc.qp_num == n->qp->qp_num, "%s: qp_num", what);
		check_filled(n->b.p, 0xee, 3, "bytes before the read");
		check_pattern(n->b.p + 3, len, 300 + (uint32_t)i, what);
		check_filled(n->b.p + 3 + len, 0xee, 64, "bytes past the read");
		net_put(n, T_DONE + i);
	}
	/* several READs in flight at once (up to max_rd_atomic) */
	memset(n->b.p, 0xee, n->b.len);
	net_expect(n, T_READY + 99, "pipelined");
	for (int k = 0; k < 8; k++)
		CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 4100 + k,
				 n->b.p + k * MIB, MIB - 1, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, n->peer.addr + k * MIB,
				 n->peer.rkey, 0) == 0, "post READ %d", k);
	for (int k = 0; k < 8; k++) {
		expect_wc(n->scq, &wc, 4100 + k, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_READ, "pipelined READ");
		check_pattern(n->b.p + k * MIB, MIB - 1, 400 + k,
			      "pipelined READ data");
		check_filled(n->b.p + (k + 1) * MIB - 1, 0xee, 1,
			     "byte after a pipelined READ");
	}
	net_put(n, T_DONE + 99);
}

static void read_sizes_b(struct net_end *n)
{
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		snprintf(what, sizeof(what), "RDMA_READ %u bytes", sizes[i]);
		memset(n->b.p, 0x77, n->b.len);
		fill_pattern(n->b.p + 4, sizes[i], 300 + (uint32_t)i);
		net_put(n, T_READY + i);
		net_expect(n, T_DONE + i, what);
	}
	for (int k = 0; k < 8; k++)
		fill_pattern(n->b.p + k * MIB, MIB, 400 + k);
	net_put(n, T_READY + 99);
	net_expect(n, T_DONE + 99, "pipelined READs");
	expect_no_wc(n->rcq, 50, "READ must not consume a receive");
}

/* ---- IBV_SEND_FENCE ---------------------------------------------------- */

/* A READ of 1 MiB and, in the same post, a fenced SEND of the last 64
 * bytes it fetches: the SEND carries what the READ brought (it waited for
 * the READ's answer), which B compares with its own memory. */
static void fence_a(struct net_end *n)
{
	struct ibv_send_wr rd, sd, *bad = NULL;
	struct ibv_sge rs, ss;
	struct ibv_wc wc;

	memset(n->b.p, 0xee, MIB);
	net_expect(n, T_READY, "B filled, its receive posted");
	rs = (struct ibv_sge){ (uintptr_t)n->b.p, MIB, n->b.mr->lkey };
	ss = (struct ibv_sge){ (uintptr_t)n->b.p + MIB - 64, 64, n->b.mr->lkey };
	rd = (struct ibv_send_wr){ .wr_id = 10, .sg_list = &rs, .num_sge = 1, .next = &sd,
				   .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };
	rd.wr.rdma.remote_addr = n->peer.addr;
	rd.wr.rdma.rkey = n->peer.rkey;
	sd = (struct ibv_send_wr){ .wr_id = 11, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE };
	CHECK(ibv_post_send(n->qp, &rd, &bad) == 0, "post READ + fenced SEND");
	expect_wc(n->scq, &wc, 10, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ");
	expect_wc(n->scq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_SEND, "fenced SEND");
	net_expect(n, T_DONE, "B checked");
}

static void fence_b(struct net_end *n)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, MIB, 77);
	post_recv1(n->qp, 1, n->b.p + MIB, 64, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "fenced SEND");
	net_check_recv(&wc, IBV_WC_RECV, 64, n, "fenced SEND");
	check_bytes(n->b.p + MIB, n->b.p + MIB - 64, 64, "the fenced SEND (what the READ fetched)");
	net_put(n, T_DONE);
}

/* ---- atomics ---------------------------------------------------------- */

#define ATOM_OFF 64

static void atomics_skip(struct net_end *n)
{
	if (n->t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("device reports atomic_cap NONE");
}

static void atomic_a(struct net_end *n, enum ibv_wr_opcode op, uint64_t id,
		     uint64_t cmp_add, uint64_t swap, uint64_t want_res,
		     const char *what)
{
	struct ibv_wc wc;
	uint64_t *res = (uint64_t *)(n->b.p + 4096);

	*res = 0x5a5a5a5a5a5a5a5aull;
	CHECK(post_atomic(n->qp, op, id, res, n->b.mr->lkey,
			  n->peer.addr + ATOM_OFF, n->peer.rkey, cmp_add,
			  swap) == 0, "post %s", what);
	expect_wc(n->scq, &wc, id, IBV_WC_SUCCESS,
		  op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP :
						    IBV_WC_FETCH_ADD, what);
	CHECK(*res == want_res, "%s: result %#llx, want the original %#llx",
	      what, (unsigned long long)*res, (unsigned long long)want_res);
	check_filled(n->b.p + 4096 + 8, 0, 64, "bytes after the result");
}

static void atomics_a(struct net_end *n)
{
	atomics_skip(n);
	net_expect(n, T_READY, "target set");
	atomic_a(n, IBV_WR_ATOMIC_CMP_AND_SWP, 61, 0x1111111111111111ull,
		 0x2222222222222222ull, 0x1111111111111111ull, "CAS (match)");
	atomic_a(n, IBV_WR_ATOMIC_CMP_AND_SWP, 62, 0x99, 0x3333333333333333ull,
		 0x2222222222222222ull, "CAS (mismatch)");
	atomic_a(n, IBV_WR_ATOMIC_FETCH_AND_ADD, 63, 5, 0,
		 0x2222222222222222ull, "FAA");
	net_put(n, T_DONE);
	net_expect(n, T_READY + 1, "target set to ~0");
	atomic_a(n, IBV_WR_ATOMIC_FETCH_AND_ADD, 64, 2, 0, ~0ull,
		 "FAA (wraps)");
	/* 1000 increments back to back, results in distinct slots */
	struct ibv_wc wc;
	uint64_t *res = (uint64_t *)(n->b.p + 8192);
	for (int i = 0; i < 1000; i++) {
		CHECK(post_atomic(n->qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1000 + i,
				  res + i, n->b.mr->lkey,
				  n->peer.addr + ATOM_OFF, n->peer.rkey, 1,
				  0) == 0, "post FAA %d", i);
		if (i % 64 == 63)
			for (int k = i - 63; k <= i; k++)
				expect_wc(n->scq, &wc, 1000 + k,
					  IBV_WC_SUCCESS, IBV_WC_FETCH_ADD,
					  "FAA burst");
	}
	for (int k = 960; k < 1000; k++)
		expect_wc(n->scq, &wc, 1000 + k, IBV_WC_SUCCESS,
			  IBV_WC_FETCH_ADD, "FAA burst");
	for (int i = 0; i < 1000; i++)
		CHECK(res[i] == 1 + (uint64_t)i, "FAA %d returned %llu", i,
		      (unsigned long long)res[i]);
	net_put(n, T_DONE + 1);
}

static void atomics_b(struct net_end *n)
{
	volatile uint64_t *target = (uint64_t *)(n->b.p + ATOM_OFF);

	atomics_skip(n);
	*target = 0x1111111111111111ull;
	net_put(n, T_READY);
	net_expect(n, T_DONE, "three atomics");
	CHECK(*target == 0x2222222222222227ull,
	      "target %#llx after CAS, CAS (mismatch), FAA +5, want %#llx",
	      (unsigned long long)*target, 0x2222222222222227ull);
	*target = ~0ull;
	net_put(n, T_READY + 1);
	net_expect(n, T_DONE + 1, "FAA wrap and burst");
	CHECK(*target == 1001, "target %llu after wrap and 1000 FAA, want 1001",
	      (unsigned long long)*target);
	check_filled(n->b.p, 0, ATOM_OFF, "bytes before the atomic target");
	check_filled(n->b.p + ATOM_OFF + 8, 0, 64,
		     "bytes after the atomic target");
}

/* ---- scatter/gather ---------------------------------------------------- */

static const uint32_t g_off[3] = { 0, 5000, 20000 };
static const uint32_t g_len[3] = { 100, 3000, 5000 }; /* 8100 */
static const uint32_t s_off[4] = { 0, 3000, 6000, 20000 };
static const uint32_t s_len[4] = { 1000, 1, 7000, 500 };

static void sge_lists_a(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge g[3];
	uint8_t *s = n->b.p;

	for (int i = 0; i < 3; i++)
		g[i] = (struct ibv_sge){ (uintptr_t)s + g_off[i], g_len[i],
					 n->b.mr->lkey };
	fill_pattern(s, 30000, 77);

	/* SEND: gather 3 -> scatter 4 */
	net_expect(n, T_READY, "4-SGE receive posted");
	wr = (struct ibv_send_wr){ .wr_id = 72, .sg_list = g, .num_sge = 3,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post 3-SGE send");
	expect_wc(n->scq, &wc, 72, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	net_expect(n, T_CHECKED, "B checked the SEND");

	/* RDMA_WRITE: gather 3 -> contiguous */
	wr.wr_id = 73;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = n->peer.addr + 10;
	wr.wr.rdma.rkey = n->peer.rkey;
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post 3-SGE write");
	expect_wc(n->scq, &wc, 73, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	a_fence(n);
	net_expect(n, T_CHECKED + 1, "B checked the WRITE");

	/* RDMA_READ: contiguous -> scatter into 3 */
	memset(s, 0, 30000);
	net_expect(n, T_READY + 1, "READ source filled");
	wr.wr_id = 74;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = n->peer.addr;
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post 3-SGE read");
	expect_wc(n->scq, &wc, 74, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	net_put(n, T_DONE + 1);
	uint8_t want[8100];
	fill_pattern(want, 8100, 78);
	check_bytes(s, want, 100, "READ SGE 0");
	check_bytes(s + 5000, want + 100, 3000, "READ SGE 1");
	check_bytes(s + 20000, want + 3100, 5000, "READ SGE 2");
	check_filled(s + 100, 0, 4900, "gap after READ SGE 0");
	check_filled(s + 8000, 0, 12000, "gap after READ SGE 1");
	check_filled(s + 25000, 0, 5000, "after READ SGE 2");

	/* SEND with 4 SGEs, two of them empty, into one receive of 3 SGEs
	 * whose first has room for exactly one byte */
	struct ibv_sge g4[4] = {
		{ (uintptr_t)s, 0, n->b.mr->lkey },
		{ (uintptr_t)s + 1, 65536, n->b.mr->lkey },
		{ (uintptr_t)s, 0, n->b.mr->lkey },
		{ (uintptr_t)s + 70000, 1, n->b.mr->lkey },
	};
	fill_pattern(s, 80000, 79);
	net_expect(n, T_READY + 2, "receive posted");
	wr = (struct ibv_send_wr){ .wr_id = 75, .sg_list = g4, .num_sge = 4,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post 4-SGE send");
	expect_wc(n->scq, &wc, 75, IBV_WC_SUCCESS, IBV_WC_SEND, "4-SGE send");
	net_expect(n, T_CHECKED + 2, "B checked");
}

static void sge_lists_b(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge sc[4];
	uint8_t *r = n->b.p;
	uint8_t want[8100], got[8100];

	{
		uint8_t *src = malloc(30000);
		CHECK(src, "malloc");
		fill_pattern(src, 30000, 77);
		for (int i = 0, o = 0; i < 3; o += g_len[i], i++)
			memcpy(want + o, src + g_off[i], g_len[i]);
		free(src);
	}
	for (int i = 0; i < 4; i++)
		sc[i] = (struct ibv_sge){ (uintptr_t)r + s_off[i], s_len[i],
					  n->b.mr->lkey };
	memset(r, 0, 30000);
	rwr = (struct ibv_recv_wr){ .wr_id = 71, .sg_list = sc, .num_sge = 4 };
	CHECK(ibv_post_recv(n->qp, &rwr, &rbad) == 0, "post 4-SGE recv");
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 71, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	net_check_recv(&wc, IBV_WC_RECV, 8100, n, "SGE recv");
	memcpy(got, r, 1000);
	memcpy(got + 1000, r + 3000, 1);
	memcpy(got + 1001, r + 6000, 7000);
	memcpy(got + 8001, r + 20000, 99);
	check_bytes(got, want, 8100, "scattered SEND");
	check_filled(r + 1000, 0, 2000, "gap after SGE 0");
	check_filled(r + 3001, 0, 2999, "gap after SGE 1");
	check_filled(r + 13000, 0, 7000, "gap after SGE 2");
	check_filled(r + 20099, 0, 401, "unused tail of SGE 3");
	memset(r, 0, 30000);
	net_put(n, T_CHECKED);

	b_fence(n);
	check_bytes(r + 10, want, 8100, "gathered WRITE");
	check_filled(r, 0, 10, "before WRITE");
	check_filled(r + 8110, 0, 100, "after WRITE");
	net_put(n, T_CHECKED + 1);

	fill_pattern(r, 8100, 78);
	net_put(n, T_READY + 1);
	net_expect(n, T_DONE + 1, "A's READ done");

	memset(r, 0xee, 200000);
	struct ibv_sge sc3[3] = {
		{ (uintptr_t)r, 1, n->b.mr->lkey },
		{ (uintptr_t)r + 1000, 40000, n->b.mr->lkey },
		{ (uintptr_t)r + 50000, 100000, n->b.mr->lkey },
	};
	rwr = (struct ibv_recv_wr){ .wr_id = 76, .sg_list = sc3, .num_sge = 3 };
	CHECK(ibv_post_recv(n->qp, &rwr, &rbad) == 0, "post 3-SGE recv");
	net_put(n, T_READY + 2);
	expect_wc(n->rcq, &wc, 76, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	net_check_recv(&wc, IBV_WC_RECV, 65537, n, "3-SGE recv");
	uint8_t *src = malloc(80000), *w2 = malloc(65537);
	CHECK(src && w2, "malloc");
	fill_pattern(src, 80000, 79);
	memcpy(w2, src + 1, 65536);
	w2[65536] = src[70000];
	check_bytes(r, w2, 1, "3-SGE recv, SGE 0");
	check_filled(r + 1, 0xee, 999, "gap after SGE 0");
	check_bytes(r + 1000, w2 + 1, 40000, "3-SGE recv, SGE 1");
	check_filled(r + 41000, 0xee, 9000, "gap after SGE 1");
	check_bytes(r + 50000, w2 + 40001, 25536, "3-SGE recv, SGE 2");
	check_filled(r + 75536, 0xee, 1000, "after the message");
	free(src);
	free(w2);
	net_put(n, T_CHECKED + 2);
}

/* ---- inline ------------------------------------------------------------ */

static void inline_opts(struct net_opts *o)
{
	o->max_inline = 256;
}

static void inline_data_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t src[256], keep[256];
	struct ibv_send_wr wr, *bad;

	fill_pattern(keep, 256, 5);
	memcpy(src, keep, 256);
	net_expect(n, T_READY, "receives posted");
	/* src is on the stack and not registered: inline ignores the lkey */
	CHECK(post_send1(n->qp, IBV_WR_SEND, 82, src, 256, 0,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0) == 0,
	      "post inline SEND");
	memset(src, 0xff, sizeof(src)); /* copied at post: must not matter */
	memcpy(src, keep, 256);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 83, src, 200, 0xdeadbeef,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE,
			 n->peer.addr + 1000, n->peer.rkey, 0) == 0,
	      "post inline WRITE");
	memset(src, 0xab, sizeof(src));
	/* inline with two SGEs, and an inline zero-length SEND_WITH_IMM */
	memcpy(src, keep, 256);
	struct ibv_sge g[2] = { { (uintptr_t)src, 10, 0 },
				{ (uintptr_t)src + 100, 90, 0 } };
	wr = (struct ibv_send_wr){ .wr_id = 84, .sg_list = g, .num_sge = 2,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED |
						 IBV_SEND_INLINE };
	CHECK(ibv_post_send(n->qp, &wr, &bad) == 0, "post 2-SGE inline SEND");
	memset(src, 0xcd, sizeof(src));
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_IMM, 85, NULL, 0, 0,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0x55) == 0,
	      "post zero-length inline SEND_WITH_IMM");
	for (int id = 82; id <= 85; id++)
		expect_wc(n->scq, &wc, id, IBV_WC_SUCCESS, -1, "inline");
	a_fence(n);
	net_expect(n, T_CHECKED, "B checked");
}

static void inline_data_b(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t keep[256];

	fill_pattern(keep, 256, 5);
	memset(n->b.p, 0xee, 8192);
	post_recv1(n->qp, 81, n->b.p, 4096, n->b.mr->lkey);
	post_recv1(n->qp, 86, n->b.p + 4096, 1024, n->b.mr->lkey);
	post_recv1(n->qp, 87, n->b.p + 6000, 1024, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 81, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	net_check_recv(&wc, IBV_WC_RECV, 256, n, "inline recv");
	check_bytes(n->b.p, keep, 256, "inline SEND payload (copied at post)");
	expect_wc(n->rcq, &wc, 86, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	net_check_recv(&wc, IBV_WC_RECV, 100, n, "2-SGE inline recv");
	check_bytes(n->b.p + 4096, keep, 10, "2-SGE inline SGE 0");
	check_bytes(n->b.p + 4106, keep + 100, 90, "2-SGE inline SGE 1");
	expect_wc(n->rcq, &wc, 87, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 3");
	net_check_recv(&wc, IBV_WC_RECV, 0, n, "zero-length inline");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0x55),
	      "inline imm: flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	b_fence(n);
	check_bytes(n->b.p + 1000, keep, 200, "inline WRITE payload");
	check_filled(n->b.p + 1200, 0xee, 64, "after the inline WRITE");
	net_put(n, T_CHECKED);
}

/* ---- SEND_WITH_INV on a type-2 memory window -------------------------- */

static void send_inv_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint64_t mwaddr = net_get(n);
	uint32_t rkey = (uint32_t)net_get(n);

	if (mwaddr == 0)
		SKIP("side B: no type-2 memory windows");
	fill_pattern(n->b.p, 512, 31);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 0x3001, n->b.p, 512,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, mwaddr + 100, rkey,
			 0) == 0, "post WRITE via MW");
	expect_wc(n->scq, &wc, 0x3001, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "WRITE via bound MW");
	a_fence(n);
	net_expect(n, T_READY, "receive posted");
	fill_pattern(n->b.p, 200, 33);
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_INV, 92, n->b.p, 200,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, rkey) == 0,
	      "post SEND_WITH_INV");
	expect_wc(n->scq, &wc, 92, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND_WITH_INV at the requester");
	net_expect(n, T_CHECKED, "B checked");
	/* the window is invalid now */
	fill_pattern(n->b.p, 512, 32);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 0x3002, n->b.p, 512,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, mwaddr + 100, rkey,
			 0) == 0, "post WRITE via invalidated MW");
	expect_wc(n->scq, &wc, 0x3002, IBV_WC_REM_ACCESS_ERR, -1,
		  "WRITE with an invalidated MW rkey");
	wait_err(n->qp, DEADLINE_MS, "requester after REM_ACCESS_ERR");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED + 1, "B checked the refused WRITE");
}

static void send_inv_b(struct net_end *n)
{
	struct ibv_wc wc;
	struct buf mwb;
	struct ibv_mw *mw = ibv_alloc_mw(n->t.pd, IBV_MW_TYPE_2);

	if (!mw) {
		int e = errno;
		net_put(n, 0);
		net_put(n, 0);
		if (e == EOPNOTSUPP)
			SKIP("ibv_alloc_mw(IBV_MW_TYPE_2): EOPNOTSUPP");
		CHECK(0, "ibv_alloc_mw(TYPE_2): %s", strerror(e));
	}
	buf_alloc(&n->t, &mwb, 8192, ACC_ALL | IBV_ACCESS_MW_BIND);
	memset(mwb.p, 0xee, 8192);
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {
		.wr_id = 0xb1d,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mwb.mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)mwb.p;
	wr.bind_mw.bind_info.length = 4096;
	wr.bind_mw.bind_info.mw_access_flags =
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	int rc = ibv_post_send(n->qp, &wr, &bad);
	CHECK(rc == 0, "post BIND_MW: %s", strerror(rc));
	expect_wc(n->scq, &wc, 0xb1d, IBV_WC_SUCCESS, IBV_WC_BIND_MW,
		  "BIND_MW");
	CHECK(rkey != mwb.mr->rkey, "MW rkey equals the MR rkey");
	net_put(n, (uintptr_t)mwb.p);
	net_put(n, rkey);
	b_fence(n);
	check_filled(mwb.p, 0xee, 100, "before the MW WRITE");
	check_pattern(mwb.p + 100, 512, 31, "WRITE via MW");
	check_filled(mwb.p + 612, 0xee, 8192 - 612, "after the MW WRITE");

	memset(n->b.p, 0xee, 4096);
	post_recv1(n->qp, 91, n->b.p, 4096, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 91, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "SEND_WITH_INV at the responder");
	net_check_recv(&wc, IBV_WC_RECV, 200, n, "SEND_WITH_INV");
	CHECK(wc.wc_flags & IBV_WC_WITH_INV, "wc_flags %#x lacks WITH_INV",
	      wc.wc_flags);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "wc_flags %#x has WITH_IMM",
	      wc.wc_flags);
	CHECK(wc.invalidated_rkey == rkey, "invalidated_rkey %#x, want %#x",
	      wc.invalidated_rkey, rkey);
	check_pattern(n->b.p, 200, 33, "SEND_WITH_INV payload");
	net_put(n, T_CHECKED);
	net_expect(n, T_DONE, "A's refused WRITE");
	wait_err(n->qp, DEADLINE_MS, "responder after the refused WRITE");
	check_pattern(mwb.p + 100, 512, 31, "MW target after a refused WRITE");
	net_put(n, T_CHECKED + 1);
	CHECK(ibv_destroy_qp(n->qp) == 0, "destroy qp");
	n->qp = NULL;
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	buf_free(&mwb);
}

/* ---- unsignaled WRs ------------------------------------------------------ */

#define UNSIG_N 20000
#define UNSIG_EVERY 64
#define UNSIG_SLOTS 1024 /* target slots at B */

static void unsig_opts(struct net_opts *o)
{
	o->max_send_wr = 128;
	o->cqe = 256;
}

/* The signaled WR after signaled WR x (~0 when x was the last). */
static uint64_t next_signaled(uint64_t x)
{
	if (x == UNSIG_N - 1)
		return ~0ull;
	return x + UNSIG_EVERY < UNSIG_N ? x + UNSIG_EVERY : UNSIG_N - 1;
}

static void unsignaled_a(struct net_end *n)
{
	struct ibv_wc wc[16];
	uint64_t *src = (uint64_t *)n->b.p; /* 8192 source slots */
	uint64_t next_sig = UNSIG_EVERY - 1, t0 = now_ms(), last = now_ms();
	int full = 0;

	net_expect(n, T_READY, "B ready");
	for (uint32_t i = 0; i < UNSIG_N;) {
		int sig = (i % UNSIG_EVERY == UNSIG_EVERY - 1) ||
			  i == UNSIG_N - 1;
		src[i % 8192] = 0x5100000000000000ull | i;
		int rc = post_send1(n->qp, IBV_WR_RDMA_WRITE, i,
				    &src[i % 8192], 8, n->b.mr->lkey,
				    sig ? IBV_SEND_SIGNALED : 0,
				    n->peer.addr + (i % UNSIG_SLOTS) * 8,
				    n->peer.rkey, 0);
		if (rc == 0) {
			i++;
			last = now_ms();
		} else {
			CHECK(rc == ENOMEM, "post WRITE %u: %s", i,
			      strerror(rc));
			full++;
			CHECK(now_ms() - last < DEADLINE_MS,
			      "send queue full for %d ms at WR %u: stalled",
			      DEADLINE_MS, i);
		}
		int k = ibv_poll_cq(n->scq, 16, wc);
		CHECK(k >= 0, "ibv_poll_cq %d", k);
		for (int j = 0; j < k; j++) {
			CHECK(wc[j].status == IBV_WC_SUCCESS,
			      "WRITE %llu: %s", (unsigned long long)wc[j].wr_id,
			      ibv_wc_status_str(wc[j].status));
			CHECK(wc[j].wr_id == next_sig,
			      "completion for WR %llu, want the signaled WR %llu",
			      (unsigned long long)wc[j].wr_id,
			      (unsigned long long)next_sig);
			next_sig = next_signaled(next_sig);
		}
	}
	while (next_sig != ~0ull) {
		CHECK(poll_one(n->scq, wc, DEADLINE_MS),
		      "no completion for signaled WR %llu",
		      (unsigned long long)next_sig);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == next_sig,
		      "completion wr_id %llu status %s, want %llu",
		      (unsigned long long)wc[0].wr_id,
		      ibv_wc_status_str(wc[0].status),
		      (unsigned long long)next_sig);
		next_sig = next_signaled(next_sig);
	}
	NOTE("%d WRITEs, 1 in %d signaled: %llu ms, send queue full %d times",
	     UNSIG_N, UNSIG_EVERY, (unsigned long long)(now_ms() - t0), full);
	expect_no_wc(n->scq, 20, "extra completion");
	a_fence(n);
	net_expect(n, T_CHECKED, "B checked");
}

static void unsignaled_b(struct net_end *n)
{
	uint64_t *dst = (uint64_t *)n->b.p;

	memset(n->b.p, 0, 16384);
	net_put(n, T_READY);
	b_fence(n);
	for (uint32_t s = 0; s < UNSIG_SLOTS; s++) {
		uint32_t last = s + (UNSIG_N - 1 - s) / UNSIG_SLOTS * UNSIG_SLOTS;
		CHECK(dst[s] == (0x5100000000000000ull | last),
		      "slot %u holds %#llx, want the last WRITE %u", s,
		      (unsigned long long)dst[s], last);
	}
	check_filled(n->b.p + UNSIG_SLOTS * 8, 0, 4096, "after the slots");
	net_put(n, T_CHECKED);
}

/* ---- solicited events with a completion channel ---------------------- */

static void chan_opts(struct net_opts *o)
{
	o->rcq_chan = 1;
}

static void solicited_a(struct net_end *n)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, 64, 1);
	net_expect(n, T_READY, "B armed (solicited only)");
	for (int i = 0; i < 2; i++) {
		CHECK(post_send1(n->qp, IBV_WR_SEND, 200 + i, n->b.p, 8,
				 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "post unsolicited send");
		expect_wc(n->scq, &wc, 200 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "unsolicited send");
	}
	net_put(n, T_DONE);
	net_expect(n, T_READY + 1, "B about to block in ibv_get_cq_event");
	usleep(300 * 1000);
	CHECK(post_send1(n->qp, IBV_WR_SEND_WITH_IMM, 202, n->b.p, 8,
			 n->b.mr->lkey, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
			 0, 0, 0x50) == 0, "post solicited send");
	expect_wc(n->scq, &wc, 202, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "solicited send");
	/* second round: armed for any completion, woken by a plain SEND */
	net_expect(n, T_READY + 2, "B armed (any) and about to block");
	usleep(300 * 1000);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 203, n->b.p, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	expect_wc(n->scq, &wc, 203, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	net_expect(n, T_CHECKED, "B checked");
}

static void get_event(struct net_end *n, const char *what)
{
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	uint64_t t0 = now_ms();

	/* blocks: the alarm bounds it */
	CHECK(ibv_get_cq_event(n->ch, &ev_cq, &ev_ctx) == 0,
	      "%s: ibv_get_cq_event: %s", what, strerror(errno));
	unsigned ms = (unsigned)(now_ms() - t0);
	CHECK(ev_cq == n->rcq && ev_ctx == n, "%s: event for the wrong CQ",
	      what);
	ibv_ack_cq_events(ev_cq, 1);
	CHECK(ms >= 150, "%s: ibv_get_cq_event returned after %u ms, before "
	      "the other process sent (it waits 300 ms)", what, ms);
	NOTE("%s: woken after %u ms", what, ms);
}

static void solicited_b(struct net_end *n)
{
	struct ibv_wc wc;
	struct pollfd pfd = { .fd = n->ch->fd, .events = POLLIN };

	for (int i = 0; i < 4; i++)
		post_recv1(n->qp, 100 + i, n->b.p + i * 64, 64, n->b.mr->lkey);
	CHECK(ibv_req_notify_cq(n->rcq, 1) == 0, "req_notify_cq(solicited)");
	net_put(n, T_READY);
	net_expect(n, T_DONE, "unsolicited sends completed");
	CHECK(poll(&pfd, 1, 300) == 0,
	      "channel fd became readable after unsolicited completions only");
	net_put(n, T_READY + 1);
	get_event(n, "solicited SEND");
	expect_wc(n->rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 1");
	expect_wc(n->rcq, &wc, 101, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	expect_wc(n->rcq, &wc, 102, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "solicited recv");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0x50),
	      "solicited recv: flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	CHECK(poll(&pfd, 1, 0) == 0, "a second event is queued");
	CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "req_notify_cq(any)");
	net_put(n, T_READY + 2);
	get_event(n, "plain SEND");
	expect_wc(n->rcq, &wc, 103, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 4");
	check_pattern(n->b.p + 3 * 64, 8, 1, "payload");
	net_put(n, T_CHECKED);
}

/* ---- RNR: SEND posted before the receive -------------------------------- */

static void rnr_a(struct net_end *n)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, 100000, 3);
	net_expect(n, T_READY, "B connected, no receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x77, n->b.p, 100000,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	/* rnr_retry 7: retried until the receive is there */
	expect_no_wc(n->scq, 500, "SEND completed before any receive posted");
	CHECK(qp_state(n->qp) == IBV_QPS_RTS, "requester left RTS during RNR");
	net_put(n, T_DONE);
	expect_wc(n->scq, &wc, 0x77, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND once the receive is posted");
	net_expect(n, T_CHECKED, "B checked");
}

static void rnr_b(struct net_end *n)
{
	struct ibv_wc wc;

	net_put(n, T_READY);
	net_expect(n, T_DONE, "A's SEND waiting");
	expect_no_wc(n->rcq, 100, "a receive completion with no receive");
	memset(n->b.p, 0xee, 200000);
	post_recv1(n->qp, 0x78, n->b.p, 200000, n->b.mr->lkey);
	expect_wc(n->rcq, &wc, 0x78, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "the receive posted late");
	net_check_recv(&wc, IBV_WC_RECV, 100000, n, "late receive");
	check_pattern(n->b.p, 100000, 3, "payload after RNR");
	check_filled(n->b.p + 100000, 0xee, 64, "after the payload");
	net_put(n, T_CHECKED);
}

/* ---- UC ---------------------------------------------------------------- */

static void uc_opts(struct net_opts *o)
{
	o->type = IBV_QPT_UC;
	o->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	o->mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	o->buf_len = 2 * MIB + 64 * KIB;
}

static const uint32_t uc_sizes[] = { 0, 1, 65536, 65537, MIB };

static void uc_pair_a(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	for (size_t i = 0; i < ARRAY_SIZE(uc_sizes); i++) {
		snprintf(what, sizeof(what), "UC SEND %u bytes", uc_sizes[i]);
		fill_pattern(n->b.p, uc_sizes[i], 600 + (uint32_t)i);
		net_expect(n, T_READY + i, what);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 10 + i, n->b.p,
				 uc_sizes[i], n->b.mr->lkey, IBV_SEND_SIGNALED,
				 0, 0, 0) == 0, "%s: post", what);
		expect_wc(n->scq, &wc, 10 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  what);
		net_expect(n, T_CHECKED + i, what);
	}
	for (size_t i = 0; i < ARRAY_SIZE(uc_sizes); i++) {
		snprintf(what, sizeof(what), "UC WRITE %u bytes", uc_sizes[i]);
		fill_pattern(n->b.p, uc_sizes[i], 700 + (uint32_t)i);
		net_expect(n, T_READY + 50 + i, what);
		CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 50 + i, n->b.p,
				 uc_sizes[i], n->b.mr->lkey, IBV_SEND_SIGNALED,
				 n->peer.addr + 8, n->peer.rkey, 0) == 0,
		      "%s: post", what);
		expect_wc(n->scq, &wc, 50 + i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_WRITE, what);
		/* UC completes on send; the fence SEND follows in order */
		a_fence(n);
		net_expect(n, T_CHECKED + 50 + i, what);
	}
	/* WRITE_WITH_IMM over UC */
	fill_pattern(n->b.p, 5000, 800);
	net_expect(n, T_READY + 99, "receive for WRITE_WITH_IMM");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 99, n->b.p, 5000,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, n->peer.addr,
			 n->peer.rkey, 0x1234) == 0, "post UC WRITE_WITH_IMM");
	expect_wc(n->scq, &wc, 99, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "UC WRITE_WITH_IMM");
	net_expect(n, T_CHECKED + 99, "B checked");
}

static void uc_pair_b(struct net_end *n)
{
	struct ibv_wc wc;
	char what[64];

	CHECK(n->qp->qp_type == IBV_QPT_UC, "qp_type %d", n->qp->qp_type);
	for (size_t i = 0; i < ARRAY_SIZE(uc_sizes); i++) {
		snprintf(what, sizeof(what), "UC SEND %u bytes", uc_sizes[i]);
		memset(n->b.p, 0xee, n->b.len);
		post_recv1(n->qp, 10 + i, n->b.p, 2 * MIB, n->b.mr->lkey);
		net_put(n, T_READY + i);
		expect_wc(n->rcq, &wc, 10 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  what);
		net_check_recv(&wc, IBV_WC_RECV, uc_sizes[i], n, what);
		check_pattern(n->b.p, uc_sizes[i], 600 + (uint32_t)i, what);
		check_filled(n->b.p + uc_sizes[i], 0xee, 64, "after it");
		net_put(n, T_CHECKED + i);
	}
	for (size_t i = 0; i < ARRAY_SIZE(uc_sizes); i++) {
		snprintf(what, sizeof(what), "UC WRITE %u bytes", uc_sizes[i]);
		memset(n->b.p, 0xee, n->b.len);
		net_put(n, T_READY + 50 + i);
		b_fence(n);
		check_filled(n->b.p, 0xee, 8, "before the target");
		check_pattern(n->b.p + 8, uc_sizes[i], 700 + (uint32_t)i, what);
		check_filled(n->b.p + 8 + uc_sizes[i], 0xee, 64, "after it");
		net_put(n, T_CHECKED + 50 + i);
	}
	memset(n->b.p, 0xee, n->b.len);
	post_recv1(n->qp, 99, n->b.p + MIB, 16, n->b.mr->lkey);
	net_put(n, T_READY + 99);
	expect_wc(n->rcq, &wc, 99, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		  "UC WRITE_WITH_IMM");
	net_check_recv(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 5000, n,
		       "UC WRITE_WITH_IMM");
	CHECK(wc.imm_data == htobe32(0x1234), "imm %#x", wc.imm_data);
	check_pattern(n->b.p, 5000, 800, "UC WRITE_WITH_IMM data");
	net_put(n, T_CHECKED + 99);
}

/* ---- table --------------------------------------------------------------- */

#define CASE(name, opts) { #name, opts, name##_a, name##_b }

static const struct net_case cases[] = {
	CASE(send_sizes, big_opts),
	CASE(send_imm, NULL),
	CASE(write_sizes, big_opts),
	CASE(write_imm, big_opts),
	CASE(read_sizes, big_opts),
	CASE(fence, big_opts),
	CASE(atomics, NULL),
	CASE(sge_lists, NULL),
	CASE(inline_data, inline_opts),
	CASE(send_inv, NULL),
	CASE(unsignaled, unsig_opts),
	CASE(solicited, chan_opts),
	CASE(rnr, NULL),
	CASE(uc_pair, uc_opts),
};

static void run_case(size_t i)
{
	struct net_opts o = net_opts_default();

	if (cases[i].opts)
		cases[i].opts(&o);
	net_fork_run(&o, cases[i].a, cases[i].b);
}

#define SUB(i) static void sub##i(void) { run_case(i); }
SUB(0) SUB(1) SUB(2) SUB(3) SUB(4) SUB(5) SUB(6) SUB(7) SUB(8) SUB(9)
SUB(10) SUB(11) SUB(12) SUB(13)

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ cases[0].name, sub0 },   { cases[1].name, sub1 },
		{ cases[2].name, sub2 },   { cases[3].name, sub3 },
		{ cases[4].name, sub4 },   { cases[5].name, sub5 },
		{ cases[6].name, sub6 },   { cases[7].name, sub7 },
		{ cases[8].name, sub8 },   { cases[9].name, sub9 },
		{ cases[10].name, sub10 }, { cases[11].name, sub11 },
		{ cases[12].name, sub12 }, { cases[13].name, sub13 },
	};
	_Static_assert(ARRAY_SIZE(tests) == ARRAY_SIZE(cases), "table");

	if (argc >= 3 && !strcmp(argv[1], "--server")) {
		alarm(120);
		int fd = net_tcp_listen_accept((uint16_t)atoi(argv[2]), 30000);
		return net_run_remote(fd, NET_B, cases, ARRAY_SIZE(cases));
	}
	if (argc >= 4 && !strcmp(argv[1], "--client")) {
		alarm(120);
		int fd = net_tcp_connect(argv[2], (uint16_t)atoi(argv[3]),
					 30000);
		return net_run_remote(fd, NET_A, cases, ARRAY_SIZE(cases));
	}
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
