/* Data path of two connected RC QPs in one process: every opcode, message
 * sizes, scatter/gather, inline data, memory windows, solicited events. */
#include "common.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

#define MIB (1u << 20)

static const uint32_t sizes[] = { 0, 1, 4095, 4096, 65537, MIB };

/* a = requester side, b = responder side; each has a 1 MiB + 4 KiB buffer */
struct dp {
	struct tctx t;
	struct pair p;
	struct buf sa, sb;
};

static void dp_open(struct dp *d, const struct pair_opts *o)
{
	struct pair_opts def = pair_opts_default();

	tctx_open(&d->t);
	pair_create(&d->t, &d->p, o ? o : &def);
	buf_alloc(&d->t, &d->sa, MIB + 4096, ACC_ALL);
	buf_alloc(&d->t, &d->sb, MIB + 4096, ACC_ALL);
}

static void dp_close(struct dp *d)
{
	buf_free(&d->sa);
	buf_free(&d->sb);
	pair_destroy(&d->p);
	tctx_close(&d->t);
}

/* After one-sided writes from a: a zero-byte SEND behind them (RC keeps
 * order) tells b that every earlier WRITE has been placed. */
static void sync_b(struct dp *d)
{
	struct ibv_wc wc;

	post_recv1(d->p.b.qp, 0x5151, NULL, 0, 0);
	CHECK(post_send1(d->p.a.qp, IBV_WR_SEND, 0x5150, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post sync send");
	expect_wc(d->p.a.scq, &wc, 0x5150, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "sync send");
	expect_wc(d->p.b.rcq, &wc, 0x5151, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "sync recv");
}

static void send_sizes(void)
{
	struct dp d;
	struct ibv_wc wc;
	char what[64];

	dp_open(&d, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t n = sizes[i];
		snprintf(what, sizeof(what), "SEND %u bytes", n);
		fill_pattern(d.sa.p, n, 100 + (uint32_t)i);
		memset(d.sb.p, 0xee, d.sb.len);
		post_recv1(d.p.b.qp, 1000 + i, d.sb.p, MIB + 16, d.sb.mr->lkey);
		CHECK(post_send1(d.p.a.qp, IBV_WR_SEND, 2000 + i, d.sa.p, n,
				 d.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
				 0) == 0, "%s: post", what);
		expect_wc(d.p.a.scq, &wc, 2000 + i, IBV_WC_SUCCESS,
			  IBV_WC_SEND, what);
		CHECK(wc.qp_num == d.p.a.qp->qp_num, "%s: sender qp_num", what);
		expect_wc(d.p.b.rcq, &wc, 1000 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  what);
		check_recv_wc(&wc, IBV_WC_RECV, n, d.p.b.qp, d.p.a.qp, what);
		CHECK(!(wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)),
		      "%s: wc_flags %#x has IMM/INV", what, wc.wc_flags);
		check_bytes(d.sb.p, d.sa.p, n, what);
		check_filled(d.sb.p + n, 0xee, 16, "bytes past the message");
	}
	dp_close(&d);
}

static void send_imm(void)
{
	struct dp d;
	struct ibv_wc wc;

	dp_open(&d, NULL);
	fill_pattern(d.sa.p, 300, 7);
	post_recv1(d.p.b.qp, 11, d.sb.p, 4096, d.sb.mr->lkey);
	post_recv1(d.p.b.qp, 12, d.sb.p + 4096, 4096, d.sb.mr->lkey);
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND_WITH_IMM, 21, d.sa.p, 300,
			 d.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0xdeadbeef) == 0, "post SEND_WITH_IMM");
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND_WITH_IMM, 22, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0x01020304) == 0,
	      "post zero-length SEND_WITH_IMM");
	expect_wc(d.p.a.scq, &wc, 21, IBV_WC_SUCCESS, IBV_WC_SEND, "sender 1");
	expect_wc(d.p.a.scq, &wc, 22, IBV_WC_SUCCESS, IBV_WC_SEND, "sender 2");
	expect_wc(d.p.b.rcq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 1");
	check_recv_wc(&wc, IBV_WC_RECV, 300, d.p.b.qp, d.p.a.qp, "recv 1");
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "wc_flags %#x lacks WITH_IMM",
	      wc.wc_flags);
	CHECK(wc.imm_data == htobe32(0xdeadbeef),
	      "imm_data %#x, want %#x (network order)", wc.imm_data,
	      htobe32(0xdeadbeef));
	check_bytes(d.sb.p, d.sa.p, 300, "SEND_WITH_IMM payload");
	expect_wc(d.p.b.rcq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	check_recv_wc(&wc, IBV_WC_RECV, 0, d.p.b.qp, d.p.a.qp, "recv 2");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htobe32(0x01020304),
	      "recv 2: wc_flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	dp_close(&d);
}

static void write_sizes(void)
{
	struct dp d;
	struct ibv_wc wc;
	char what[64];

	dp_open(&d, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t n = sizes[i];
		snprintf(what, sizeof(what), "RDMA_WRITE %u bytes", n);
		fill_pattern(d.sa.p, n, 200 + (uint32_t)i);
		memset(d.sb.p, 0xee, d.sb.len);
		CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE, 3000 + i, d.sa.p,
				 n, d.sa.mr->lkey, IBV_SEND_SIGNALED,
				 (uintptr_t)d.sb.p + 8, d.sb.mr->rkey, 0) == 0,
		      "%s: post", what);
		expect_wc(d.p.a.scq, &wc, 3000 + i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_WRITE, what);
		CHECK(wc.qp_num == d.p.a.qp->qp_num, "%s: qp_num", what);
		sync_b(&d);
		check_filled(d.sb.p, 0xee, 8, "bytes before the target");
		check_bytes(d.sb.p + 8, d.sa.p, n, what);
		check_filled(d.sb.p + 8 + n, 0xee, 16, "bytes after the target");
	}
	expect_no_wc(d.p.b.rcq, 50, "plain WRITE must not consume a receive");
	dp_close(&d);
}

static void write_imm(void)
{
	struct dp d;
	struct ibv_wc wc;
	const uint32_t n = 70000;

	dp_open(&d, NULL);
	fill_pattern(d.sa.p, n, 9);
	memset(d.sb.p, 0xee, d.sb.len);
	/* the receive buffer is small and far from the target: untouched */
	post_recv1(d.p.b.qp, 41, d.sb.p + MIB, 64, d.sb.mr->lkey);
	post_recv1(d.p.b.qp, 42, d.sb.p + MIB + 64, 64, d.sb.mr->lkey);
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 51, d.sa.p, n,
			 d.sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)d.sb.p,
			 d.sb.mr->rkey, 0xcafe0001) == 0, "post WRITE_WITH_IMM");
	expect_wc(d.p.a.scq, &wc, 51, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "requester");
	expect_wc(d.p.b.rcq, &wc, 41, IBV_WC_SUCCESS,
		  IBV_WC_RECV_RDMA_WITH_IMM, "responder");
	check_recv_wc(&wc, IBV_WC_RECV_RDMA_WITH_IMM, n, d.p.b.qp, d.p.a.qp,
		      "WRITE_WITH_IMM at the responder");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htobe32(0xcafe0001),
	      "wc_flags %#x imm_data %#x", wc.wc_flags, wc.imm_data);
	check_bytes(d.sb.p, d.sa.p, n, "WRITE_WITH_IMM data");
	check_filled(d.sb.p + MIB, 0xee, 128, "receive buffers");
	/* zero-length WRITE_WITH_IMM also consumes a receive */
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 52, NULL, 0, 0,
			 IBV_SEND_SIGNALED, (uintptr_t)d.sb.p, d.sb.mr->rkey,
			 7) == 0, "post zero-length WRITE_WITH_IMM");
	expect_wc(d.p.a.scq, &wc, 52, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "requester 2");
	expect_wc(d.p.b.rcq, &wc, 42, IBV_WC_SUCCESS,
		  IBV_WC_RECV_RDMA_WITH_IMM, "responder 2 (second receive)");
	check_recv_wc(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 0, d.p.b.qp, d.p.a.qp,
		      "zero-length WRITE_WITH_IMM");
	CHECK(wc.imm_data == htobe32(7), "imm_data %#x", wc.imm_data);
	dp_close(&d);
}

static void read_sizes(void)
{
	struct dp d;
	struct ibv_wc wc;
	char what[64];

	dp_open(&d, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint32_t n = sizes[i];
		snprintf(what, sizeof(what), "RDMA_READ %u bytes", n);
		fill_pattern(d.sb.p + 4, n, 300 + (uint32_t)i);
		memset(d.sa.p, 0xee, d.sa.len);
		CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_READ, 4000 + i, d.sa.p,
				 n, d.sa.mr->lkey, IBV_SEND_SIGNALED,
				 (uintptr_t)d.sb.p + 4, d.sb.mr->rkey, 0) == 0,
		      "%s: post", what);
		expect_wc(d.p.a.scq, &wc, 4000 + i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_READ, what);
		CHECK(wc.qp_num == d.p.a.qp->qp_num, "%s: qp_num", what);
		check_bytes(d.sa.p, d.sb.p + 4, n, what);
		check_filled(d.sa.p + n, 0xee, 16, "bytes past the read");
	}
	expect_no_wc(d.p.b.rcq, 50, "READ must not consume a receive");
	dp_close(&d);
}

/* IBV_SEND_FENCE: a SEND of what a READ posted ahead of it fetches
 * (both in one post) sends what the READ fetched, not what was there
 * before; unfenced requests behind an outstanding READ go at once. */
static void fence(void)
{
	struct ibv_send_wr rd = { 0 }, sd = { 0 }, *bad = NULL;
	struct ibv_sge rs, ss;
	struct ibv_wc wc;
	struct dp d;

	dp_open(&d, NULL);
	fill_pattern(d.sb.p, MIB, 601);
	memset(d.sa.p, 0xee, MIB);
	post_recv1(d.p.b.qp, 1, d.sb.p + MIB, 64, d.sb.mr->lkey);
	rs = (struct ibv_sge){ (uintptr_t)d.sa.p, MIB, d.sa.mr->lkey };
	ss = (struct ibv_sge){ (uintptr_t)d.sa.p + MIB - 64, 64, d.sa.mr->lkey };
	rd = (struct ibv_send_wr){ .wr_id = 10, .sg_list = &rs, .num_sge = 1, .next = &sd,
				   .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };
	rd.wr.rdma.remote_addr = (uintptr_t)d.sb.p;
	rd.wr.rdma.rkey = d.sb.mr->rkey;
	sd = (struct ibv_send_wr){ .wr_id = 11, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE };
	CHECK(ibv_post_send(d.p.a.qp, &rd, &bad) == 0, "post READ + fenced SEND");
	expect_wc(d.p.a.scq, &wc, 10, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ");
	expect_wc(d.p.a.scq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_SEND, "fenced SEND");
	expect_wc(d.p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "fenced SEND received");
	CHECK(wc.byte_len == 64, "byte_len %u", wc.byte_len);
	check_bytes(d.sb.p + MIB, d.sb.p + MIB - 64, 64, "the fenced SEND's payload (what the READ fetched)");
	dp_close(&d);
}

static void atomics(void)
{
	struct dp d;
	struct ibv_wc wc;

	dp_open(&d, NULL);
	if (d.t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("device reports atomic_cap NONE");
	uint64_t *res = (uint64_t *)d.sa.p;
	uint64_t *target = (uint64_t *)(d.sb.p + 64);
	uint64_t raddr = (uintptr_t)target;

	*target = 0x1111111111111111ull;
	*res = 0;
	CHECK(post_atomic(d.p.a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, 61, res,
			  d.sa.mr->lkey, raddr, d.sb.mr->rkey,
			  0x1111111111111111ull, 0x2222222222222222ull) == 0,
	      "post CMP_AND_SWP");
	expect_wc(d.p.a.scq, &wc, 61, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP,
		  "CMP_AND_SWP (match)");
	CHECK(*res == 0x1111111111111111ull, "CAS result %#llx, want original",
	      (unsigned long long)*res);
	CHECK(*target == 0x2222222222222222ull, "CAS target %#llx, want swap",
	      (unsigned long long)*target);

	*res = 0;
	CHECK(post_atomic(d.p.a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, 62, res,
			  d.sa.mr->lkey, raddr, d.sb.mr->rkey, 0x99,
			  0x3333333333333333ull) == 0, "post CMP_AND_SWP");
	expect_wc(d.p.a.scq, &wc, 62, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP,
		  "CMP_AND_SWP (mismatch)");
	CHECK(*res == 0x2222222222222222ull, "CAS result %#llx, want original",
	      (unsigned long long)*res);
	CHECK(*target == 0x2222222222222222ull,
	      "mismatched CAS changed target to %#llx",
	      (unsigned long long)*target);

	*res = 0;
	CHECK(post_atomic(d.p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 63, res,
			  d.sa.mr->lkey, raddr, d.sb.mr->rkey, 5, 0) == 0,
	      "post FETCH_AND_ADD");
	expect_wc(d.p.a.scq, &wc, 63, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD,
		  "FETCH_AND_ADD");
	CHECK(*res == 0x2222222222222222ull, "FAA result %#llx, want original",
	      (unsigned long long)*res);
	CHECK(*target == 0x2222222222222227ull, "FAA target %#llx",
	      (unsigned long long)*target);
	/* wraps modulo 2^64 */
	*target = ~0ull;
	CHECK(post_atomic(d.p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 64, res,
			  d.sa.mr->lkey, raddr, d.sb.mr->rkey, 2, 0) == 0,
	      "post FETCH_AND_ADD");
	expect_wc(d.p.a.scq, &wc, 64, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "FAA 2");
	CHECK(*res == ~0ull && *target == 1, "FAA wrap: res %#llx target %#llx",
	      (unsigned long long)*res, (unsigned long long)*target);
	check_filled(d.sb.p, 0, 64, "bytes before the atomic target");
	check_filled(d.sb.p + 72, 0, 64, "bytes after the atomic target");
	dp_close(&d);
}

/* 3 gather SGEs at the requester, 4 scatter SGEs at the responder. */
static void sge_lists(void)
{
	struct dp d;
	struct ibv_wc wc;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;

	dp_open(&d, NULL);
	uint8_t *s = d.sa.p, *r = d.sb.p;
	uint32_t lk = d.sa.mr->lkey, rk = d.sb.mr->lkey;
	struct ibv_sge g[3] = {
		{ (uintptr_t)s, 100, lk },
		{ (uintptr_t)s + 5000, 3000, lk },
		{ (uintptr_t)s + 20000, 5000, lk },
	};
	struct ibv_sge sc[4] = {
		{ (uintptr_t)r, 1000, rk },
		{ (uintptr_t)r + 3000, 1, rk },
		{ (uintptr_t)r + 6000, 7000, rk },
		{ (uintptr_t)r + 20000, 500, rk },
	};
	uint8_t want[8100], got[8100];

	fill_pattern(s, 30000, 77);
	memcpy(want, s, 100);
	memcpy(want + 100, s + 5000, 3000);
	memcpy(want + 3100, s + 20000, 5000);

	/* SEND gather -> scatter */
	memset(r, 0, 30000);
	rwr = (struct ibv_recv_wr){ .wr_id = 71, .sg_list = sc, .num_sge = 4 };
	CHECK(ibv_post_recv(d.p.b.qp, &rwr, &rbad) == 0, "post 4-SGE recv");
	wr = (struct ibv_send_wr){ .wr_id = 72, .sg_list = g, .num_sge = 3,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(d.p.a.qp, &wr, &bad) == 0, "post 3-SGE send");
	expect_wc(d.p.a.scq, &wc, 72, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(d.p.b.rcq, &wc, 71, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 8100, d.p.b.qp, d.p.a.qp, "SGE recv");
	memcpy(got, r, 1000);
	memcpy(got + 1000, r + 3000, 1);
	memcpy(got + 1001, r + 6000, 7000);
	memcpy(got + 8001, r + 20000, 99);
	check_bytes(got, want, 8100, "scattered SEND");
	check_filled(r + 1000, 0, 2000, "gap after SGE 0");
	check_filled(r + 3001, 0, 2999, "gap after SGE 1");
	check_filled(r + 13000, 0, 7000, "gap after SGE 2");
	check_filled(r + 20099, 0, 401, "unused tail of SGE 3");

	/* RDMA_WRITE gather -> contiguous */
	memset(r, 0, 30000);
	wr.wr_id = 73;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)r + 10;
	wr.wr.rdma.rkey = d.sb.mr->rkey;
	CHECK(ibv_post_send(d.p.a.qp, &wr, &bad) == 0, "post 3-SGE write");
	expect_wc(d.p.a.scq, &wc, 73, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "write");
	sync_b(&d);
	check_bytes(r + 10, want, 8100, "gathered WRITE");
	check_filled(r, 0, 10, "before WRITE");
	check_filled(r + 8110, 0, 100, "after WRITE");

	/* RDMA_READ contiguous -> scatter into 3 SGEs */
	memset(s, 0, 30000);
	fill_pattern(r, 8100, 78);
	wr.wr_id = 74;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)r;
	CHECK(ibv_post_send(d.p.a.qp, &wr, &bad) == 0, "post 3-SGE read");
	expect_wc(d.p.a.scq, &wc, 74, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(s, r, 100, "READ SGE 0");
	check_bytes(s + 5000, r + 100, 3000, "READ SGE 1");
	check_bytes(s + 20000, r + 3100, 5000, "READ SGE 2");
	check_filled(s + 100, 0, 4900, "gap after READ SGE 0");
	check_filled(s + 8000, 0, 12000, "gap after READ SGE 1");
	dp_close(&d);
}

static void inline_data(void)
{
	struct pair_opts o = pair_opts_default();
	struct dp d;
	struct ibv_wc wc;
	uint8_t src[64], want[64];

	o.max_inline = 64;
	dp_open(&d, &o);
	fill_pattern(want, 64, 5);
	memcpy(src, want, 64);
	memset(d.sb.p, 0, 4096);
	post_recv1(d.p.b.qp, 81, d.sb.p, 4096, d.sb.mr->lkey);
	/* src is on the stack and not registered: inline ignores the lkey */
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND, 82, src, 64, 0,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0) == 0,
	      "post inline SEND");
	memset(src, 0xff, sizeof(src));
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE, 83, want, 64, 0,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE,
			 (uintptr_t)d.sb.p + 1000, d.sb.mr->rkey, 0) == 0,
	      "post inline WRITE");
	uint8_t keep[64];
	memcpy(keep, want, 64);
	memset(want, 0xab, 64);
	expect_wc(d.p.a.scq, &wc, 82, IBV_WC_SUCCESS, IBV_WC_SEND, "inline send");
	expect_wc(d.p.a.scq, &wc, 83, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "inline write");
	expect_wc(d.p.b.rcq, &wc, 81, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 64, d.p.b.qp, d.p.a.qp, "inline recv");
	check_bytes(d.sb.p, keep, 64, "inline SEND payload (copied at post)");
	sync_b(&d);
	check_bytes(d.sb.p + 1000, keep, 64, "inline WRITE payload");
	dp_close(&d);
}

/* Bind a type-2 MW over b's buffer by posting BIND_MW on b; returns the
 * MW's new rkey, or SKIPs if the device has no type-2 MWs. */
static uint32_t bind_mw2_acc(struct dp *d, struct ibv_mw **mwp, struct ibv_mr *mr,
			     uint8_t *addr, size_t len, unsigned int extra)
{
	struct ibv_mw *mw = ibv_alloc_mw(d->t.pd, IBV_MW_TYPE_2);
	struct ibv_wc wc;

	if (!mw && errno == EOPNOTSUPP)
		SKIP("ibv_alloc_mw(IBV_MW_TYPE_2): EOPNOTSUPP");
	CHECK(mw, "ibv_alloc_mw(TYPE_2): %s", strerror(errno));
	CHECK(mw->type == IBV_MW_TYPE_2 && mw->pd == d->t.pd, "mw fields");
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {
		.wr_id = 0xb1d,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags =
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | extra;
	int rc = ibv_post_send(d->p.b.qp, &wr, &bad);
	CHECK(rc == 0, "post BIND_MW: %s", strerror(rc));
	expect_wc(d->p.b.scq, &wc, 0xb1d, IBV_WC_SUCCESS, IBV_WC_BIND_MW,
		  "BIND_MW");
	*mwp = mw;
	return rkey;
}

static uint32_t bind_mw2(struct dp *d, struct ibv_mw **mwp, struct ibv_mr *mr,
			 uint8_t *addr, size_t len)
{
	return bind_mw2_acc(d, mwp, mr, addr, len, 0);
}

static void write_via_mw_ok(struct dp *d, uint8_t *target, uint32_t rkey)
{
	struct ibv_wc wc;

	fill_pattern(d->sa.p, 512, 31);
	CHECK(post_send1(d->p.a.qp, IBV_WR_RDMA_WRITE, 0x3001, d->sa.p, 512,
			 d->sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)target,
			 rkey, 0) == 0, "post WRITE via MW");
	expect_wc(d->p.a.scq, &wc, 0x3001, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "WRITE via bound MW");
	sync_b(d);
	check_bytes(target, d->sa.p, 512, "WRITE via MW");
}

static void write_via_mw_denied(struct dp *d, uint8_t *target, uint32_t rkey)
{
	struct ibv_wc wc;
	uint8_t before[512];

	memcpy(before, target, 512);
	fill_pattern(d->sa.p, 512, 32);
	CHECK(post_send1(d->p.a.qp, IBV_WR_RDMA_WRITE, 0x3002, d->sa.p, 512,
			 d->sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)target,
			 rkey, 0) == 0, "post WRITE via invalidated MW");
	expect_wc(d->p.a.scq, &wc, 0x3002, IBV_WC_REM_ACCESS_ERR, -1,
		  "WRITE with an invalidated MW rkey");
	check_bytes(target, before, 512, "target after denied WRITE");
}

static void mw_send_inv(void)
{
	struct dp d;
	struct ibv_wc wc;
	struct ibv_mw *mw;
	struct buf mwb;

	dp_open(&d, NULL);
	buf_alloc(&d.t, &mwb, 8192, ACC_ALL | IBV_ACCESS_MW_BIND);
	uint32_t rkey = bind_mw2(&d, &mw, mwb.mr, mwb.p, 4096);
	CHECK(rkey != mwb.mr->rkey, "MW rkey equals the MR rkey");
	write_via_mw_ok(&d, mwb.p + 100, rkey);

	fill_pattern(d.sa.p, 200, 33);
	post_recv1(d.p.b.qp, 91, d.sb.p, 4096, d.sb.mr->lkey);
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND_WITH_INV, 92, d.sa.p, 200,
			 d.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0, rkey) == 0,
	      "post SEND_WITH_INV");
	expect_wc(d.p.a.scq, &wc, 92, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND_WITH_INV at the requester");
	expect_wc(d.p.b.rcq, &wc, 91, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "SEND_WITH_INV at the responder");
	check_recv_wc(&wc, IBV_WC_RECV, 200, d.p.b.qp, d.p.a.qp,
		      "SEND_WITH_INV");
	CHECK(wc.wc_flags & IBV_WC_WITH_INV, "wc_flags %#x lacks WITH_INV",
	      wc.wc_flags);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "wc_flags %#x has WITH_IMM",
	      wc.wc_flags);
	CHECK(wc.invalidated_rkey == rkey, "invalidated_rkey %#x, want %#x",
	      wc.invalidated_rkey, rkey);
	check_bytes(d.sb.p, d.sa.p, 200, "SEND_WITH_INV payload");
	write_via_mw_denied(&d, mwb.p + 100, rkey);
	exit(0); /* QPs are in error now; process exit cleans up */
}

/* A zero-based window (IBV_ACCESS_ZERO_BASED at bind) is addressed from
 * 0: a WRITE and a READ at offset 100 reach the window's byte 100; the
 * region's own address of that byte is out of the window's range. */
static void mw_zero_based(void)
{
	struct dp d;
	struct ibv_wc wc;
	struct ibv_mw *mw;
	struct buf mwb;

	dp_open(&d, NULL);
	buf_alloc(&d.t, &mwb, 8192, ACC_ALL | IBV_ACCESS_MW_BIND);
	memset(mwb.p, 0xee, 8192);
	uint32_t rkey = bind_mw2_acc(&d, &mw, mwb.mr, mwb.p + 4096, 4096, IBV_ACCESS_ZERO_BASED);
	fill_pattern(d.sa.p, 512, 34);
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE, 1, d.sa.p, 512, d.sa.mr->lkey,
			 IBV_SEND_SIGNALED, 100, rkey, 0) == 0, "post WRITE at offset 100");
	expect_wc(d.p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE via a zero-based MW");
	sync_b(&d);
	check_bytes(mwb.p + 4096 + 100, d.sa.p, 512, "zero-based WRITE");
	check_filled(mwb.p, 0xee, 4096 + 100, "before the WRITE");
	memset(d.sa.p + 1024, 0, 512);
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_READ, 2, d.sa.p + 1024, 512, d.sa.mr->lkey,
			 IBV_SEND_SIGNALED, 100, rkey, 0) == 0, "post READ at offset 100");
	expect_wc(d.p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ via a zero-based MW");
	check_bytes(d.sa.p + 1024, d.sa.p, 512, "zero-based READ");
	CHECK(post_send1(d.p.a.qp, IBV_WR_RDMA_WRITE, 3, d.sa.p, 8, d.sa.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)mwb.p + 4096 + 100, rkey, 0) == 0,
	      "post WRITE at the absolute address");
	expect_wc(d.p.a.scq, &wc, 3, IBV_WC_REM_ACCESS_ERR, -1, "an absolute address, zero-based MW");
	exit(0); /* QPs are in error now */
}

static void mw_local_inv(void)
{
	struct dp d;
	struct ibv_wc wc;
	struct ibv_mw *mw;
	struct buf mwb;

	dp_open(&d, NULL);
	buf_alloc(&d.t, &mwb, 8192, ACC_ALL | IBV_ACCESS_MW_BIND);
	uint32_t rkey = bind_mw2(&d, &mw, mwb.mr, mwb.p, 4096);
	write_via_mw_ok(&d, mwb.p + 2000, rkey);
	CHECK(post_send1(d.p.b.qp, IBV_WR_LOCAL_INV, 0x1c1, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, rkey) == 0, "post LOCAL_INV");
	expect_wc(d.p.b.scq, &wc, 0x1c1, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV,
		  "LOCAL_INV");
	write_via_mw_denied(&d, mwb.p + 2000, rkey);
	CHECK(wait_qp_state(d.p.a.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "requester QP not in ERR after REM_ACCESS_ERR");
	exit(0);
}

/* Solicited-only notification: unsolicited completions must not wake the
 * channel; the solicited one must. */
static void solicited(void)
{
	struct pair_opts o = pair_opts_default();
	struct dp d;
	struct ibv_wc wc;
	struct ibv_comp_channel *ch;
	struct pollfd pfd;

	tctx_open(&d.t);
	ch = ibv_create_comp_channel(d.t.ctx);
	CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
	o.chan_b = ch;
	pair_create(&d.t, &d.p, &o);
	buf_alloc(&d.t, &d.sa, 4096, ACC_ALL);
	buf_alloc(&d.t, &d.sb, 4096, ACC_ALL);
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };

	for (int i = 0; i < 3; i++)
		post_recv1(d.p.b.qp, 100 + i, d.sb.p + i * 64, 64,
			   d.sb.mr->lkey);
	CHECK(ibv_req_notify_cq(d.p.b.rcq, 1) == 0, "req_notify_cq(solicited)");
	for (int i = 0; i < 2; i++) {
		CHECK(post_send1(d.p.a.qp, IBV_WR_SEND, 200 + i, d.sa.p, 8,
				 d.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "post unsolicited send");
		expect_wc(d.p.a.scq, &wc, 200 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "unsolicited send");
		expect_wc(d.p.b.rcq, &wc, 100 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "unsolicited recv");
	}
	CHECK(poll(&pfd, 1, 300) == 0,
	      "channel fd became readable after unsolicited completions only");
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND, 202, d.sa.p, 8, d.sa.mr->lkey,
			 IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, 0, 0, 0) == 0,
	      "post solicited send");
	CHECK(poll(&pfd, 1, DEADLINE_MS) == 1 && (pfd.revents & POLLIN),
	      "no event on the channel within %d ms of a solicited completion",
	      DEADLINE_MS);
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = (void *)1;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "ibv_get_cq_event");
	CHECK(ev_cq == d.p.b.rcq && ev_ctx == NULL, "event for the wrong CQ");
	ibv_ack_cq_events(ev_cq, 1);
	expect_wc(d.p.b.rcq, &wc, 102, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "solicited recv");
	expect_wc(d.p.a.scq, &wc, 202, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "solicited send");
	/* not re-armed: another solicited message must not raise an event */
	post_recv1(d.p.b.qp, 103, d.sb.p, 64, d.sb.mr->lkey);
	CHECK(post_send1(d.p.a.qp, IBV_WR_SEND, 203, d.sa.p, 8, d.sa.mr->lkey,
			 IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, 0, 0, 0) == 0,
	      "post send");
	expect_wc(d.p.b.rcq, &wc, 103, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	CHECK(poll(&pfd, 1, 200) == 0, "event without re-arming the CQ");
	expect_wc(d.p.a.scq, &wc, 203, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	buf_free(&d.sa);
	buf_free(&d.sb);
	pair_destroy(&d.p);
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy comp channel");
	tctx_close(&d.t);
}

static const struct subtest tests[] = {
	SUBTEST(send_sizes),  SUBTEST(send_imm),     SUBTEST(write_sizes),
	SUBTEST(write_imm),   SUBTEST(read_sizes),   SUBTEST(atomics),
	SUBTEST(sge_lists),   SUBTEST(inline_data),  SUBTEST(mw_send_inv),
	SUBTEST(mw_local_inv), SUBTEST(solicited),    SUBTEST(fence),
	SUBTEST(mw_zero_based),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
