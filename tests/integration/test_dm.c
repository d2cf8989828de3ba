/* Device memory (ibv_alloc_dm(3), ibv_reg_dm_mr): allocation limits and
 * errors, bytes round-tripping through ibv_memcpy_to/from_dm, a DM MR as
 * a local SGE, and a DM MR as the remote target of RDMA WRITE and READ
 * from another process over TCP.
 *
 * Usage: test_dm [SUBTEST...]
 */
#include "net_common.h"

#include <stdlib.h>

static uint64_t max_dm(struct tctx *t)
{
	struct ibv_device_attr_ex a;

	memset(&a, 0, sizeof(a));
	CHECK(ibv_query_device_ex(t->ctx, NULL, &a) == 0, "ibv_query_device_ex");
	return a.max_dm_size;
}

static struct ibv_dm *dm_alloc(struct tctx *t, size_t len, uint32_t log_align)
{
	struct ibv_alloc_dm_attr a = { .length = len, .log_align_req = log_align };
	struct ibv_dm *dm = ibv_alloc_dm(t->ctx, &a);

	CHECK(dm, "ibv_alloc_dm(%zu, 2^%u): %s", len, log_align, strerror(errno));
	CHECK(dm->context == t->ctx, "dm->context");
	return dm;
}

/* ---- allocation -------------------------------------------------------- */

static void dm_limits(void)
{
	struct tctx t;

	tctx_open(&t);
	uint64_t max = max_dm(&t);
	CHECK(max >= 4096, "max_dm_size %llu: device memory should be on",
	      (unsigned long long)max);

	/* Over the device's size: the man page's "no free device memory". */
	struct ibv_alloc_dm_attr a = { .length = max + 4 };
	errno = 0;
	CHECK(!ibv_alloc_dm(t.ctx, &a) && errno == ENOMEM,
	      "alloc over max_dm_size: errno %d, want ENOMEM", errno);
	/* No optional fields exist: a comp_mask is refused. */
	a.length = 64;
	a.comp_mask = 1;
	errno = 0;
	CHECK(!ibv_alloc_dm(t.ctx, &a) && errno == EINVAL,
	      "alloc with comp_mask 1: errno %d, want EINVAL", errno);
	a.comp_mask = 0;
	a.length = 0;
	errno = 0;
	CHECK(!ibv_alloc_dm(t.ctx, &a) && errno == EINVAL,
	      "alloc of 0 bytes: errno %d, want EINVAL", errno);

	/* The budget is shared: half, then half again fits, a third half
	 * does not, and freeing gives the room back. */
	struct ibv_dm *d1 = dm_alloc(&t, max / 2, 0);
	struct ibv_dm *d2 = dm_alloc(&t, max / 2, 0);
	a.length = max / 2;
	errno = 0;
	CHECK(!ibv_alloc_dm(t.ctx, &a) && errno == ENOMEM,
	      "alloc past the budget: errno %d, want ENOMEM", errno);
	CHECK(d1->handle != d2->handle, "two DMs share handle %u", d1->handle);
	CHECK(ibv_free_dm(d1) == 0, "ibv_free_dm");
	d1 = dm_alloc(&t, max / 2, 6);
	CHECK(ibv_free_dm(d1) == 0 && ibv_free_dm(d2) == 0, "ibv_free_dm");

	/* log_align_req: up to a huge page; silly values are refused. */
	struct ibv_dm *d3 = dm_alloc(&t, 64, 16);
	CHECK(ibv_free_dm(d3) == 0, "ibv_free_dm (aligned 2^16)");
	a.length = 64;
	a.log_align_req = 40;
	errno = 0;
	CHECK(!ibv_alloc_dm(t.ctx, &a) && errno == EINVAL,
	      "log_align_req 40: errno %d, want EINVAL", errno);
	tctx_close(&t);
}

/* ---- copies ------------------------------------------------------------ */

static void dm_copy(void)
{
	struct tctx t;
	enum { LEN = 4096 };
	uint8_t in[LEN], out[LEN];

	tctx_open(&t);
	struct ibv_dm *dm = dm_alloc(&t, LEN, 3);

	/* Fresh DM reads as zeros. */
	memset(out, 0xee, sizeof(out));
	CHECK(ibv_memcpy_from_dm(out, dm, 0, LEN) == 0, "memcpy_from_dm");
	check_filled(out, 0, LEN, "fresh DM");

	fill_pattern(in, LEN, 7);
	CHECK(ibv_memcpy_to_dm(dm, 0, in, LEN) == 0, "memcpy_to_dm whole");
	memset(out, 0, sizeof(out));
	CHECK(ibv_memcpy_from_dm(out, dm, 0, LEN) == 0, "memcpy_from_dm whole");
	check_bytes(out, in, LEN, "DM round trip");

	/* A piece in the middle, read back at its offset and around it. */
	fill_pattern(in, 100, 8);
	CHECK(ibv_memcpy_to_dm(dm, 1024, in, 100) == 0, "memcpy_to_dm at 1024");
	CHECK(ibv_memcpy_from_dm(out, dm, 1024, 100) == 0, "memcpy_from_dm at 1024");
	check_bytes(out, in, 100, "DM piece");

	/* 4-byte granularity and bounds (errors are returned, not errno). */
	CHECK(ibv_memcpy_to_dm(dm, 1, in, 4) == EINVAL, "unaligned offset");
	CHECK(ibv_memcpy_to_dm(dm, 0, in, 3) == EINVAL, "unaligned length");
	CHECK(ibv_memcpy_from_dm(out, dm, 2, 4) == EINVAL, "unaligned read offset");
	CHECK(ibv_memcpy_to_dm(dm, LEN, in, 4) == EFAULT, "write past the end");
	CHECK(ibv_memcpy_from_dm(out, dm, LEN - 4, 8) == EFAULT, "read past the end");
	CHECK(ibv_memcpy_from_dm(out, dm, UINT64_MAX - 3, 8) == EFAULT,
	      "offset that wraps");
	/* A bad host buffer is an error, not a crash. */
	void *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED, "mmap");
	CHECK(ibv_memcpy_to_dm(dm, 0, hole, 64) == EFAULT, "copy from an unreadable page");
	CHECK(ibv_memcpy_from_dm(hole, dm, 0, 64) == EFAULT, "copy to an unreadable page");
	munmap(hole, 4096);
	/* ... and the failed copies left the DM alone. */
	CHECK(ibv_memcpy_from_dm(out, dm, 1024, 100) == 0, "memcpy_from_dm");
	check_bytes(out, in, 100, "DM after failed copies");
	CHECK(ibv_free_dm(dm) == 0, "ibv_free_dm");
	tctx_close(&t);
}

/* ---- DM MRs ------------------------------------------------------------ */

static void dm_mr_reg(void)
{
	struct tctx t;
	const unsigned int acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;

	tctx_open(&t);
	struct ibv_dm *dm = dm_alloc(&t, 256, 0);
	struct ibv_mr *mr = ibv_reg_dm_mr(t.pd, dm, 64, 128, acc);
	CHECK(mr, "ibv_reg_dm_mr: %s", strerror(errno));
	CHECK(mr->addr == NULL && mr->length == 128 && mr->pd == t.pd,
	      "DM MR addr %p length %zu", mr->addr, mr->length);
	/* Freeing the DM under an MR fails (ibv_alloc_dm(3) NOTES). */
	CHECK(ibv_free_dm(dm) == EBUSY, "ibv_free_dm with an MR: want EBUSY");

	errno = 0;
	CHECK(!ibv_reg_dm_mr(t.pd, dm, 0, 260, acc) && errno == EINVAL,
	      "DM MR past the DM: errno %d", errno);
	errno = 0;
	CHECK(!ibv_reg_dm_mr(t.pd, dm, 200, 60, acc) && errno == EINVAL,
	      "DM MR from offset 200 + 60 > 256: errno %d", errno);
	errno = 0;
	CHECK(!ibv_reg_dm_mr(t.pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "DM MR without IBV_ACCESS_ZERO_BASED: errno %d", errno);
	errno = 0;
	CHECK(!ibv_reg_dm_mr(t.pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED |
			     IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "remote write without local write: errno %d", errno);
	struct ibv_mr *empty = ibv_reg_dm_mr(t.pd, dm, 0, 0, acc);
	CHECK(empty, "an empty DM MR: %s", strerror(errno));
	CHECK(ibv_dereg_mr(empty) == 0, "dereg empty");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_free_dm(dm) == 0, "ibv_free_dm after the MR went");
	tctx_close(&t);
}

/* A DM MR as a local SGE: SEND from DM into host memory, then RDMA READ
 * from host memory into DM, on an in-process pair. */
static void dm_local_sge(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf hb;
	struct ibv_wc wc;
	enum { LEN = 2048 };
	uint8_t want[LEN], got[LEN];

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &hb, LEN, ACC_ALL);
	struct ibv_dm *dm = dm_alloc(&t, LEN, 0);
	struct ibv_mr *mr = ibv_reg_dm_mr(t.pd, dm, 0, LEN,
					  IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_dm_mr: %s", strerror(errno));

	fill_pattern(want, LEN, 21);
	CHECK(ibv_memcpy_to_dm(dm, 0, want, LEN) == 0, "memcpy_to_dm");
	post_recv1(p.b.qp, 1, hb.p, LEN, hb.mr->lkey);
	/* SGE addresses of a zero-based MR are offsets: 512 bytes from 1024. */
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, (void *)(uintptr_t)1024, 512, mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND from DM");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND from DM");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "receive");
	CHECK(wc.byte_len == 512, "byte_len %u", wc.byte_len);
	check_bytes(hb.p, want + 1024, 512, "SEND from DM");

	fill_pattern(hb.p, LEN, 22);
	CHECK(post_send1(p.a.qp, IBV_WR_RDMA_READ, 3, (void *)(uintptr_t)0, LEN, mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)hb.p, hb.mr->rkey, 0) == 0,
	      "post READ into DM");
	expect_wc(p.a.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ into DM");
	CHECK(ibv_memcpy_from_dm(got, dm, 0, LEN) == 0, "memcpy_from_dm");
	check_bytes(got, hb.p, LEN, "READ into DM");

	/* An SGE past the DM MR is a local protection error. */
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 4, (void *)(uintptr_t)(LEN - 8), 16,
			 mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND past DM MR");
	expect_wc(p.a.scq, &wc, 4, IBV_WC_LOC_PROT_ERR, -1, "SEND past the DM MR");

	pair_destroy(&p);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	CHECK(ibv_free_dm(dm) == 0, "free dm");
	buf_free(&hb);
	tctx_close(&t);
}

/* Atomics on DM (what log_align_req is for): FETCH_ADD and CMP_SWP on an
 * 8-byte-aligned DM word, the result landing in host memory. */
static void dm_atomics(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf hb;
	struct ibv_wc wc;
	uint64_t v = 1000, got;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &hb, 4096, ACC_ALL);
	struct ibv_dm *dm = dm_alloc(&t, 64, 3);
	struct ibv_mr *mr = ibv_reg_dm_mr(t.pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED |
					  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "ibv_reg_dm_mr (atomic): %s", strerror(errno));
	CHECK(ibv_memcpy_to_dm(dm, 16, &v, 8) == 0, "memcpy_to_dm");

	uint64_t *res = (uint64_t *)hb.p;
	CHECK(post_atomic(p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, res, hb.mr->lkey,
			  16, mr->rkey, 5, 0) == 0, "post FETCH_ADD");
	expect_wc(p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "FETCH_ADD on DM");
	CHECK(*res == 1000, "FETCH_ADD returned %llu", (unsigned long long)*res);
	CHECK(post_atomic(p.a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, 2, res, hb.mr->lkey,
			  16, mr->rkey, 1005, 7) == 0, "post CMP_SWP");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, "CMP_SWP on DM");
	CHECK(*res == 1005, "CMP_SWP returned %llu", (unsigned long long)*res);
	CHECK(ibv_memcpy_from_dm(&got, dm, 16, 8) == 0, "memcpy_from_dm");
	CHECK(got == 7, "DM word %llu after the atomics, want 7", (unsigned long long)got);

	pair_destroy(&p);
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_free_dm(dm) == 0, "dereg, free");
	buf_free(&hb);
	tctx_close(&t);
}

/* ---- DM MR as a remote target, two processes over TCP ------------------ */

#define DM_LEN (64 * 1024)
enum { T_DM = 0xd0, T_WRITTEN = 0xd1, T_CHECKED = 0xd2, T_FILLED = 0xd3, T_READ = 0xd4 };

/* B owns a DM MR with remote rights and tells A its rkey; A WRITEs into it
 * and READs from it. Offsets are from the region's start (zero based). */
static void remote_a(struct net_end *n)
{
	struct ibv_wc wc;

	net_expect(n, T_DM, "B's DM");
	uint32_t rkey = (uint32_t)net_get(n);

	fill_pattern(n->b.p, DM_LEN, 31);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 1, n->b.p, DM_LEN, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, rkey, 0) == 0, "post WRITE to DM");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE to DM");
	a_fence(n);
	net_put(n, T_WRITTEN);
	net_expect(n, T_CHECKED, "B checked the WRITE");

	net_expect(n, T_FILLED, "B filled its DM");
	memset(n->b.p, 0, DM_LEN);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 2, n->b.p, DM_LEN - 4096,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 4096, rkey, 0) == 0,
	      "post READ from DM");
	expect_wc(n->scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ from DM");
	check_pattern(n->b.p, DM_LEN - 4096, 33, "READ from the peer's DM");

	/* Past the region: the peer refuses it; the QP breaks. */
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 3, n->b.p, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, DM_LEN - 32, rkey, 0) == 0,
	      "post WRITE past DM");
	expect_wc(n->scq, &wc, 3, IBV_WC_REM_ACCESS_ERR, -1, "WRITE past the DM MR");
	net_put(n, T_READ);
}

static void remote_b(struct net_end *n)
{
	uint8_t *tmp = malloc(DM_LEN);
	struct ibv_dm *dm = dm_alloc(&n->t, DM_LEN, 12);
	struct ibv_mr *mr = ibv_reg_dm_mr(n->t.pd, dm, 0, DM_LEN,
					  IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
					  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);

	CHECK(tmp, "malloc");
	CHECK(mr, "ibv_reg_dm_mr (remote rights): %s", strerror(errno));
	net_put(n, T_DM);
	net_put(n, mr->rkey);

	b_fence(n);
	net_expect(n, T_WRITTEN, "A's WRITE");
	CHECK(ibv_memcpy_from_dm(tmp, dm, 0, DM_LEN) == 0, "memcpy_from_dm");
	check_pattern(tmp, DM_LEN, 31, "WRITE into the DM");
	net_put(n, T_CHECKED);

	fill_pattern(tmp, DM_LEN - 4096, 33);
	CHECK(ibv_memcpy_to_dm(dm, 4096, tmp, DM_LEN - 4096) == 0, "memcpy_to_dm");
	net_put(n, T_FILLED);
	net_expect(n, T_READ, "A done");
	/* The refused WRITE placed nothing. */
	CHECK(ibv_memcpy_from_dm(tmp, dm, 4096, DM_LEN - 4096) == 0, "memcpy_from_dm");
	check_pattern(tmp, DM_LEN - 4096, 33, "DM after the refused WRITE");

	CHECK(ibv_dereg_mr(mr) == 0, "dereg DM MR");
	CHECK(ibv_free_dm(dm) == 0, "free DM");
	free(tmp);
}

static void dm_remote(void)
{
	struct net_opts o = net_opts_default();

	o.buf_len = DM_LEN;
	o.retry_cnt = 1;
	net_fork_run(&o, remote_a, remote_b);
}

static const struct subtest tests[] = {
	SUBTEST(dm_limits), SUBTEST(dm_copy), SUBTEST(dm_mr_reg),
	SUBTEST(dm_local_sge), SUBTEST(dm_atomics), SUBTEST(dm_remote),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
