/* Error semantics between two processes: remote protection errors, a too
 * small receive buffer. A (the parent) is the requester, B (the child) the
 * responder. After a responder-detected error both QPs end in ERR and
 * everything outstanding on either side is flushed; SENDs ahead of the
 * refused request in one list (one receive batch) all complete first
 * (batch_then_error). See net_common.h. */
#include "net_common.h"

enum { T_READY = 0x100, T_DONE = 0x200, T_CHECKED = 0x300 };

/* ---- a remote WRITE (or READ) that must be refused ---------------------- */

/* B tells A where to aim (addr, rkey) and keeps a copy of region to prove
 * that nothing landed. */
static void refused_a(struct net_end *n, enum ibv_wr_opcode op)
{
	struct ibv_wc wc;
	uint64_t addr = net_get(n);
	uint32_t rkey = (uint32_t)net_get(n);
	uint8_t *sa = n->b.p;

	fill_pattern(sa, 4096, 99);
	memset(sa + 8192, 0xee, 4096);
	post_recv1(n->qp, 0xa1, sa + 12288, 64, n->b.mr->lkey);
	post_recv1(n->qp, 0xa2, sa + 12288, 64, n->b.mr->lkey);
	net_expect(n, T_READY, "B's receives posted");
	CHECK(post_send1(n->qp, op, 1, op == IBV_WR_RDMA_READ ? sa + 8192 : sa,
			 100, n->b.mr->lkey, IBV_SEND_SIGNALED, addr, rkey,
			 0) == 0, "post the bad request");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 2, sa, 16, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND behind it");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 3, sa, 16, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == 0,
	      "post a good WRITE behind it");
	expect_wc(n->scq, &wc, 1, IBV_WC_REM_ACCESS_ERR, -1,
		  "refused request at the requester");
	CHECK(wc.qp_num == n->qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(n->scq, &wc, 2, IBV_WC_WR_FLUSH_ERR, -1,
		  "SEND queued behind the error");
	expect_wc(n->scq, &wc, 3, IBV_WC_WR_FLUSH_ERR, -1,
		  "WRITE queued behind the error");
	wait_err(n->qp, DEADLINE_MS, "requester");
	expect_wc(n->rcq, &wc, 0xa1, IBV_WC_WR_FLUSH_ERR, -1,
		  "requester receive 1");
	expect_wc(n->rcq, &wc, 0xa2, IBV_WC_WR_FLUSH_ERR, -1,
		  "requester receive 2");
	if (op == IBV_WR_RDMA_READ)
		check_filled(sa + 8192, 0xee, 4096,
			     "local buffer of a refused READ");
	expect_no_wc(n->scq, 50, "extra requester completion");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B checked");
}

static void refused_b(struct net_end *n, uint64_t target, uint32_t rkey,
		      uint8_t *region, size_t rlen)
{
	struct ibv_wc wc;
	uint8_t *before = malloc(rlen);

	CHECK(before, "malloc");
	fill_pattern(region, rlen, 1234);
	memcpy(before, region, rlen);
	post_recv1(n->qp, 0xb1, n->b.p + 65536, 64, n->b.mr->lkey);
	post_recv1(n->qp, 0xb2, n->b.p + 65536, 64, n->b.mr->lkey);
	net_put(n, target);
	net_put(n, rkey);
	net_put(n, T_READY);
	net_expect(n, T_DONE, "A saw its completions");
	wait_err(n->qp, DEADLINE_MS, "responder");
	expect_wc(n->rcq, &wc, 0xb1, IBV_WC_WR_FLUSH_ERR, -1,
		  "responder receive 1 (the SEND behind must not arrive)");
	CHECK(wc.qp_num == n->qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(n->rcq, &wc, 0xb2, IBV_WC_WR_FLUSH_ERR, -1,
		  "responder receive 2");
	check_bytes(region, before, rlen, "target region after the refusal");
	/* a receive posted in ERR is flushed (or refused at post) */
	int rc = post_recv1_rc(n->qp, 0xb3, n->b.p + 65536, 64,
			       n->b.mr->lkey);
	if (rc == 0)
		expect_wc(n->rcq, &wc, 0xb3, IBV_WC_WR_FLUSH_ERR, -1,
			  "receive posted in ERR");
	expect_no_wc(n->rcq, 50, "extra responder completion");
	free(before);
	net_put(n, T_CHECKED);
}

static void bad_rkey_a(struct net_end *n)
{
	refused_a(n, IBV_WR_RDMA_WRITE);
}

static void bad_rkey_b(struct net_end *n)
{
	refused_b(n, (uintptr_t)n->b.p + 100, ~n->b.mr->rkey, n->b.p, 65536);
}

/* 4 pages mapped, the middle two registered */
static struct ibv_mr *middle_mr(struct net_end *n, uint8_t **map)
{
	*map = mmap(NULL, 16384, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(*map != MAP_FAILED, "mmap");
	struct ibv_mr *mr = ibv_reg_mr(n->t.pd, *map + 4096, 8192, ACC_ALL);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	return mr;
}

static void out_of_bounds_b(struct net_end *n)
{
	uint8_t *map;
	struct ibv_mr *mr = middle_mr(n, &map);

	/* 100 bytes starting 10 bytes before the end of the MR */
	refused_b(n, (uintptr_t)map + 4096 + 8192 - 10, mr->rkey, map, 16384);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	munmap(map, 16384);
}

static void below_start_b(struct net_end *n)
{
	uint8_t *map;
	struct ibv_mr *mr = middle_mr(n, &map);

	refused_b(n, (uintptr_t)map + 4096 - 50, mr->rkey, map, 16384);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	munmap(map, 16384);
}

#define out_of_bounds_a bad_rkey_a
#define below_start_a bad_rkey_a

static void no_write_opts(struct net_opts *o)
{
	o->mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
}

#define no_remote_write_a bad_rkey_a
static void no_remote_write_b(struct net_end *n)
{
	refused_b(n, (uintptr_t)n->b.p + 100, n->b.mr->rkey, n->b.p, 65536);
}

/* the MR a READ targets lacks REMOTE_READ */
static void no_read_opts(struct net_opts *o)
{
	o->mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
}

static void no_remote_read_a(struct net_end *n)
{
	refused_a(n, IBV_WR_RDMA_READ);
}

#define no_remote_read_b no_remote_write_b

#define bad_rkey_read_a no_remote_read_a
#define bad_rkey_read_b bad_rkey_b

/* ---- atomics without REMOTE_ATOMIC --------------------------------------- */

static void no_atomic_opts(struct net_opts *o)
{
	o->mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ;
}

static void no_remote_atomic_a(struct net_end *n)
{
	struct ibv_wc wc;
	uint64_t *res = (uint64_t *)n->b.p;

	if (n->t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("no atomics");
	*res = 77;
	net_expect(n, T_READY, "target set");
	CHECK(post_atomic(n->qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, res,
			  n->b.mr->lkey, n->peer.addr + 64, n->peer.rkey, 1,
			  0) == 0, "post FETCH_AND_ADD");
	expect_wc(n->scq, &wc, 8, IBV_WC_REM_ACCESS_ERR, -1,
		  "atomic without REMOTE_ATOMIC");
	CHECK(*res == 77, "result buffer changed to %llu",
	      (unsigned long long)*res);
	wait_err(n->qp, DEADLINE_MS, "requester");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B checked");
}

static void no_remote_atomic_b(struct net_end *n)
{
	volatile uint64_t *target = (uint64_t *)(n->b.p + 64);

	if (n->t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("no atomics");
	*target = 42;
	net_put(n, T_READY);
	net_expect(n, T_DONE, "A's atomic refused");
	wait_err(n->qp, DEADLINE_MS, "responder");
	CHECK(*target == 42, "target changed to %llu",
	      (unsigned long long)*target);
	net_put(n, T_CHECKED);
}

/* ---- receive buffer too small ------------------------------------------- */

static void recv_too_small_a(struct net_end *n)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, 200, 5);
	post_recv1(n->qp, 0xa1, n->b.p + 4096, 64, n->b.mr->lkey);
	net_expect(n, T_READY, "B's receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 11, n->b.p, 200, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 12, n->b.p, 10, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND 2");
	expect_wc(n->scq, &wc, 11, IBV_WC_REM_INV_REQ_ERR, -1,
		  "receive buffer too small (requester)");
	expect_wc(n->scq, &wc, 12, IBV_WC_WR_FLUSH_ERR, -1,
		  "SEND behind the error");
	wait_err(n->qp, DEADLINE_MS, "requester");
	expect_wc(n->rcq, &wc, 0xa1, IBV_WC_WR_FLUSH_ERR, -1,
		  "requester's receive");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B checked");
}

static void recv_too_small_b(struct net_end *n)
{
	struct ibv_wc wc;

	memset(n->b.p, 0xee, 8192);
	post_recv1(n->qp, 0xb1, n->b.p, 100, n->b.mr->lkey);
	post_recv1(n->qp, 0xb2, n->b.p + 4096, 4096, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0xb1, IBV_WC_LOC_LEN_ERR, -1,
		  "receive buffer too small (responder)");
	CHECK(wc.qp_num == n->qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(n->rcq, &wc, 0xb2, IBV_WC_WR_FLUSH_ERR, -1,
		  "the next receive is flushed, not filled by SEND 2");
	wait_err(n->qp, DEADLINE_MS, "responder");
	check_filled(n->b.p + 100, 0xee, 8192 - 100,
		     "past the small receive buffer");
	net_expect(n, T_DONE, "A checked");
	net_put(n, T_CHECKED);
}

/* ---- good SENDs, then a refused WRITE, in one list ----------------------- */

/* B's receive pass takes them together (one read, or one batch of small
 * ring records): the SENDs' positive ACK, which the batch hands the
 * channel once for the last, must still come before the refusal, so A
 * completes every SEND and only then fails the WRITE. */
#define BATCH_SENDS 12

static void batch_then_error_a(struct net_end *n)
{
	struct ibv_send_wr wr[BATCH_SENDS + 2], *bad = NULL;
	struct ibv_sge sge[BATCH_SENDS + 2];
	uint64_t addr = net_get(n);
	uint32_t rkey = (uint32_t)net_get(n);
	struct ibv_wc wc;

	net_expect(n, T_READY, "B's receives posted");
	for (int i = 0; i < BATCH_SENDS + 2; i++) {
		sge[i] = (struct ibv_sge){ (uintptr_t)n->b.p + (size_t)i * 64, 32, n->b.mr->lkey };
		fill_pattern(n->b.p + (size_t)i * 64, 32, 40 + (uint32_t)i);
		wr[i] = (struct ibv_send_wr){ .wr_id = 10 + (uint64_t)i, .sg_list = &sge[i],
					      .num_sge = 1, .opcode = IBV_WR_SEND,
					      .send_flags = IBV_SEND_SIGNALED,
					      .next = i + 1 < BATCH_SENDS + 2 ? &wr[i + 1] : NULL };
	}
	wr[BATCH_SENDS].opcode = IBV_WR_RDMA_WRITE;
	wr[BATCH_SENDS].wr.rdma.remote_addr = addr;
	wr[BATCH_SENDS].wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(n->qp, wr, &bad) == 0, "post the list");
	for (int i = 0; i < BATCH_SENDS; i++)
		expect_wc(n->scq, &wc, 10 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "SEND ahead of the refused WRITE");
	expect_wc(n->scq, &wc, 10 + BATCH_SENDS, IBV_WC_REM_ACCESS_ERR, -1, "refused WRITE");
	expect_wc(n->scq, &wc, 11 + BATCH_SENDS, IBV_WC_WR_FLUSH_ERR, -1,
		  "SEND behind the refused WRITE");
	wait_err(n->qp, DEADLINE_MS, "requester");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B checked");
}

static void batch_then_error_b(struct net_end *n)
{
	struct ibv_wc wc;

	for (int i = 0; i < BATCH_SENDS + 1; i++)
		post_recv1(n->qp, 0xc0 + (uint64_t)i, n->b.p + 65536 + (size_t)i * 64, 64,
			   n->b.mr->lkey);
	net_put(n, (uintptr_t)n->b.p);
	net_put(n, ~n->b.mr->rkey);
	net_put(n, T_READY);
	net_expect(n, T_DONE, "A saw its completions");
	for (int i = 0; i < BATCH_SENDS; i++) {
		expect_wc(n->rcq, &wc, 0xc0 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "SEND ahead of the refused WRITE");
		CHECK(wc.byte_len == 32, "RECV %d: %u bytes", i, wc.byte_len);
		check_pattern(n->b.p + 65536 + (size_t)i * 64, 32, 40 + (uint32_t)i, "SEND");
	}
	expect_wc(n->rcq, &wc, 0xc0 + BATCH_SENDS, IBV_WC_WR_FLUSH_ERR, -1,
		  "the receive the SEND behind must not fill");
	wait_err(n->qp, DEADLINE_MS, "responder");
	net_put(n, T_CHECKED);
}

/* ---- table --------------------------------------------------------------- */

struct ecase {
	const char *name;
	void (*opts)(struct net_opts *o);
	net_side_fn a, b;
};

#define CASE(name, opts) { #name, opts, name##_a, name##_b }

static const struct ecase cases[] = {
	CASE(bad_rkey, NULL),
	CASE(out_of_bounds, NULL),
	CASE(below_start, NULL),
	CASE(no_remote_write, no_write_opts),
	CASE(no_remote_read, no_read_opts),
	CASE(bad_rkey_read, NULL),
	CASE(no_remote_atomic, no_atomic_opts),
	CASE(recv_too_small, NULL),
	CASE(batch_then_error, NULL),
};

static void run_case(size_t i)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 256 * KIB;
	if (cases[i].opts)
		cases[i].opts(&o);
	net_fork_run(&o, cases[i].a, cases[i].b);
}

#define SUB(i) static void sub##i(void) { run_case(i); }
SUB(0) SUB(1) SUB(2) SUB(3) SUB(4) SUB(5) SUB(6) SUB(7) SUB(8)

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ cases[0].name, sub0 }, { cases[1].name, sub1 },
		{ cases[2].name, sub2 }, { cases[3].name, sub3 },
		{ cases[4].name, sub4 }, { cases[5].name, sub5 },
		{ cases[6].name, sub6 }, { cases[7].name, sub7 },
		{ cases[8].name, sub8 },
	};
	_Static_assert(ARRAY_SIZE(tests) == ARRAY_SIZE(cases), "table");
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
