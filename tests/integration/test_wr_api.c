/* The ibv_qp_ex work-request API (ibv_wr_post(3)): ibv_wr_start, one call
 * per opcode, the SGE and inline setters, ibv_wr_complete and ibv_wr_abort. */
#include "common.h"

#include <errno.h>
#include <string.h>

#define OPS                                                                    \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |                  \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |      \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |        \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

struct wenv {
	struct tctx t;
	struct pair p;
	struct ibv_qp_ex *qx;
	struct buf la, rb; /* requester's local buffer, responder's buffer */
};

static struct ibv_qp *create_qp_ex(struct wenv *e, struct ibv_cq *scq,
				   struct ibv_cq *rcq, int sig_all)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64,
			 .max_send_sge = 4, .max_recv_sge = 4,
			 .max_inline_data = 128 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD |
			     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->t.pd,
		.send_ops_flags = OPS,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(e->t.ctx, &ia);
	CHECK(qp, "ibv_create_qp_ex(PD|SEND_OPS_FLAGS): %s", strerror(errno));
	CHECK(ia.cap.max_inline_data >= 128, "max_inline_data %u",
	      ia.cap.max_inline_data);
	return qp;
}

static void wenv_open(struct wenv *e, int sig_all)
{
	struct pair_opts o = pair_opts_default();

	memset(e, 0, sizeof(*e));
	tctx_open(&e->t);
	e->p.t = &e->t;
	for (int i = 0; i < 2; i++) {
		struct qp_end *q = i ? &e->p.b : &e->p.a;
		q->scq = ibv_create_cq(e->t.ctx, 256, NULL, NULL, 0);
		q->rcq = ibv_create_cq(e->t.ctx, 256, NULL, NULL, 0);
		CHECK(q->scq && q->rcq, "create cq");
		q->qp = create_qp_ex(e, q->scq, q->rcq, sig_all);
	}
	connect_qps(&e->t, e->p.a.qp, e->p.b.qp, &o);
	e->qx = ibv_qp_to_qp_ex(e->p.a.qp);
	CHECK(e->qx, "ibv_qp_to_qp_ex returned NULL");
	CHECK(&e->qx->qp_base == e->p.a.qp, "qp_ex does not embed the qp");
	buf_alloc(&e->t, &e->la, 65536, ACC_ALL);
	buf_alloc(&e->t, &e->rb, 65536, ACC_ALL);
}

static void wenv_close(struct wenv *e)
{
	buf_free(&e->la);
	buf_free(&e->rb);
	pair_destroy(&e->p);
	tctx_close(&e->t);
}

static void next_wr(struct ibv_qp_ex *qx, uint64_t id, unsigned flags)
{
	qx->wr_id = id;
	qx->wr_flags = flags;
}

/* Every opcode in one batch. */
static void all_opcodes(void)
{
	struct wenv e;
	struct ibv_wc wc;
	struct ibv_qp_ex *qx;
	uint8_t *l, *r;

	wenv_open(&e, 0);
	if (e.t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("no atomics");
	qx = e.qx;
	l = e.la.p;
	r = e.rb.p;
	uint32_t lk = e.la.mr->lkey, rk = e.rb.mr->rkey;
	uint64_t rb = (uintptr_t)r;
	fill_pattern(l, 16384, 1);
	fill_pattern(r + 40000, 3000, 2); /* READ source */
	*(uint64_t *)(r + 60000) = 100;	  /* atomic target */
	uint8_t inl[40];
	fill_pattern(inl, sizeof(inl), 3);
	uint8_t inl_copy[40];
	memcpy(inl_copy, inl, sizeof(inl));
	struct ibv_sge three[3] = {
		{ (uintptr_t)l, 10, lk },
		{ (uintptr_t)l + 1000, 20, lk },
		{ (uintptr_t)l + 2000, 30, lk },
	};
	for (int i = 0; i < 4; i++)
		post_recv1(e.p.b.qp, 900 + i, r + 20000 + i * 1024, 1024,
			   e.rb.mr->lkey);

	ibv_wr_start(qx);
	next_wr(qx, 1, IBV_SEND_SIGNALED);
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, lk, (uintptr_t)l, 100);
	next_wr(qx, 2, IBV_SEND_SIGNALED);
	ibv_wr_send_imm(qx, htobe32(0x1234));
	ibv_wr_set_sge_list(qx, 3, three);
	next_wr(qx, 3, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(qx, rk, rb + 100);
	ibv_wr_set_sge(qx, lk, (uintptr_t)l + 3000, 5000);
	next_wr(qx, 4, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write_imm(qx, rk, rb + 10000, htobe32(0x5678));
	ibv_wr_set_sge(qx, lk, (uintptr_t)l + 9000, 777);
	next_wr(qx, 5, IBV_SEND_SIGNALED);
	ibv_wr_rdma_read(qx, rk, rb + 40000);
	ibv_wr_set_sge(qx, lk, (uintptr_t)l + 20000, 3000);
	next_wr(qx, 6, IBV_SEND_SIGNALED);
	ibv_wr_atomic_cmp_swp(qx, rk, rb + 60000, 100, 200);
	ibv_wr_set_sge(qx, lk, (uintptr_t)l + 30000, 8);
	next_wr(qx, 7, IBV_SEND_SIGNALED);
	ibv_wr_atomic_fetch_add(qx, rk, rb + 60000, 11);
	ibv_wr_set_sge(qx, lk, (uintptr_t)l + 30008, 8);
	next_wr(qx, 8, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, inl, sizeof(inl));
	int rc = ibv_wr_complete(qx);
	CHECK(rc == 0, "ibv_wr_complete returned %d (%s)", rc, strerror(rc));
	memset(inl, 0, sizeof(inl)); /* inline data was copied */

	const int ops[] = { IBV_WC_SEND,       IBV_WC_SEND,
			    IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE,
			    IBV_WC_RDMA_READ,  IBV_WC_COMP_SWAP,
			    IBV_WC_FETCH_ADD,  IBV_WC_SEND };
	for (int i = 0; i < 8; i++) {
		expect_wc(e.p.a.scq, &wc, (uint64_t)i + 1, IBV_WC_SUCCESS,
			  ops[i], "WR API requester");
		CHECK(wc.qp_num == e.p.a.qp->qp_num, "qp_num %u", wc.qp_num);
	}
	/* responder: send, send_imm, write_imm, inline send */
	expect_wc(e.p.b.rcq, &wc, 900, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 1");
	check_recv_wc(&wc, IBV_WC_RECV, 100, e.p.b.qp, e.p.a.qp, "send");
	check_bytes(r + 20000, l, 100, "ibv_wr_send payload");
	expect_wc(e.p.b.rcq, &wc, 901, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	check_recv_wc(&wc, IBV_WC_RECV, 60, e.p.b.qp, e.p.a.qp, "send_imm");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0x1234),
	      "send_imm flags %#x imm %#x", wc.wc_flags, wc.imm_data);
	check_bytes(r + 21024, l, 10, "sge list 0");
	check_bytes(r + 21034, l + 1000, 20, "sge list 1");
	check_bytes(r + 21054, l + 2000, 30, "sge list 2");
	expect_wc(e.p.b.rcq, &wc, 902, IBV_WC_SUCCESS,
		  IBV_WC_RECV_RDMA_WITH_IMM, "recv 3");
	check_recv_wc(&wc, IBV_WC_RECV_RDMA_WITH_IMM, 777, e.p.b.qp, e.p.a.qp,
		      "write_imm");
	CHECK(wc.imm_data == htobe32(0x5678), "write_imm imm %#x",
	      wc.imm_data);
	expect_wc(e.p.b.rcq, &wc, 903, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 4");
	check_recv_wc(&wc, IBV_WC_RECV, 40, e.p.b.qp, e.p.a.qp, "inline send");
	check_bytes(r + 23072, inl_copy, 40, "inline payload");
	check_bytes(r + 100, l + 3000, 5000, "rdma_write");
	check_bytes(r + 10000, l + 9000, 777, "rdma_write_imm");
	check_bytes(l + 20000, r + 40000, 3000, "rdma_read");
	CHECK(*(uint64_t *)(l + 30000) == 100 &&
		      *(uint64_t *)(l + 30008) == 200 &&
		      *(uint64_t *)(r + 60000) == 211,
	      "atomics: cas old %llu faa old %llu final %llu",
	      (unsigned long long)*(uint64_t *)(l + 30000),
	      (unsigned long long)*(uint64_t *)(l + 30008),
	      (unsigned long long)*(uint64_t *)(r + 60000));
	wenv_close(&e);
}

static void inline_list(void)
{
	struct wenv e;
	struct ibv_wc wc;
	char a[] = "hello, ", b[] = "inline ", c[] = "world";
	struct ibv_data_buf bl[3] = {
		{ a, 7 }, { b, 7 }, { c, 5 },
	};

	wenv_open(&e, 0);
	post_recv1(e.p.b.qp, 1, e.rb.p, 256, e.rb.mr->lkey);
	ibv_wr_start(e.qx);
	next_wr(e.qx, 10, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	ibv_wr_send(e.qx);
	ibv_wr_set_inline_data_list(e.qx, 3, bl);
	next_wr(e.qx, 11, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 1000);
	ibv_wr_set_inline_data_list(e.qx, 3, bl);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete");
	memset(a, 'x', 7);
	memset(b, 'x', 7);
	memset(c, 'x', 5);
	expect_wc(e.p.a.scq, &wc, 10, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(e.p.a.scq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "write");
	expect_wc(e.p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 19, e.p.b.qp, e.p.a.qp, "inline list");
	check_bytes(e.rb.p, "hello, inline world", 19, "inline list SEND");
	check_bytes(e.rb.p + 1000, "hello, inline world", 19,
		    "inline list WRITE");
	wenv_close(&e);
}

/* ibv_wr_abort discards everything since ibv_wr_start. */
static void abort_batch(void)
{
	struct wenv e;
	struct ibv_wc wc;

	wenv_open(&e, 0);
	fill_pattern(e.la.p, 1024, 9);
	memset(e.la.p + 2048, 0xaa, 64);
	post_recv1(e.p.b.qp, 1, e.rb.p, 1024, e.rb.mr->lkey);
	post_recv1(e.p.b.qp, 2, e.rb.p + 1024, 1024, e.rb.mr->lkey);

	ibv_wr_start(e.qx);
	next_wr(e.qx, 20, IBV_SEND_SIGNALED);
	ibv_wr_send(e.qx);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p + 2048, 64);
	next_wr(e.qx, 21, IBV_SEND_SIGNALED);
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 4096);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p + 2048, 64);
	ibv_wr_abort(e.qx);
	expect_no_wc(e.p.a.scq, 200, "aborted WRs");
	expect_no_wc(e.p.b.rcq, 10, "aborted SEND delivered");
	check_filled(e.rb.p + 4096, 0, 64, "target of an aborted WRITE");

	/* the queue is usable and the first receive is still there */
	ibv_wr_start(e.qx);
	next_wr(e.qx, 22, IBV_SEND_SIGNALED);
	ibv_wr_send(e.qx);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 300);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete");
	expect_wc(e.p.a.scq, &wc, 22, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(e.p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "first receive after abort");
	check_recv_wc(&wc, IBV_WC_RECV, 300, e.p.b.qp, e.p.a.qp, "after abort");
	check_bytes(e.rb.p, e.la.p, 300, "payload after abort");
	expect_no_wc(e.p.a.scq, 50, "extra completion");
	wenv_close(&e);
}

/* Selective signaling with wr_flags; several batches. */
static void batches_unsignaled(void)
{
	struct wenv e;
	struct ibv_wc wc;

	wenv_open(&e, 0);
	fill_pattern(e.la.p, 65536, 4);
	for (int batch = 0; batch < 100; batch++) {
		ibv_wr_start(e.qx);
		for (int i = 0; i < 16; i++) {
			uint64_t id = (uint64_t)batch * 16 + i;
			next_wr(e.qx, id, i == 15 ? IBV_SEND_SIGNALED : 0);
			size_t off = (size_t)(id % 64) * 1024;
			ibv_wr_rdma_write(e.qx, e.rb.mr->rkey,
					  (uintptr_t)e.rb.p + off);
			ibv_wr_set_sge(e.qx, e.la.mr->lkey,
				       (uintptr_t)e.la.p + off, 1024);
		}
		int rc = ibv_wr_complete(e.qx);
		CHECK(rc == 0, "batch %d: wr_complete %d", batch, rc);
		expect_wc(e.p.a.scq, &wc, (uint64_t)batch * 16 + 15,
			  IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "batch tail");
	}
	post_recv1(e.p.b.qp, 1, NULL, 0, 0);
	ibv_wr_start(e.qx);
	next_wr(e.qx, 5000, IBV_SEND_SIGNALED);
	ibv_wr_send(e.qx);
	ibv_wr_set_sge_list(e.qx, 0, NULL);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete");
	expect_wc(e.p.a.scq, &wc, 5000, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(e.p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 0, e.p.b.qp, e.p.a.qp, "zero send");
	check_bytes(e.rb.p, e.la.p, 65536, "after 1600 WR-API writes");
	wenv_close(&e);
}

/* An error in a batch is reported at completion time with the WR's id. */
static void batch_error(void)
{
	struct wenv e;
	struct ibv_wc wc;

	wenv_open(&e, 1); /* sq_sig_all: every WR completes */
	ibv_wr_start(e.qx);
	e.qx->wr_id = 30;
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	e.qx->wr_id = 31;
	ibv_wr_rdma_write(e.qx, ~e.rb.mr->rkey, (uintptr_t)e.rb.p + 64);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	e.qx->wr_id = 32;
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 128);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete");
	expect_wc(e.p.a.scq, &wc, 30, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "good WR before the bad one");
	expect_wc(e.p.a.scq, &wc, 31, IBV_WC_REM_ACCESS_ERR, -1, "bad rkey");
	expect_wc(e.p.a.scq, &wc, 32, IBV_WC_WR_FLUSH_ERR, -1, "flushed");
	exit(0);
}

/* A flag the device does not offer (IBV_SEND_IP_CSUM: no checksum
 * offload is reported) fails the batch at ibv_wr_complete with EINVAL,
 * and nothing of it is posted; the QP goes on. */
static void refused_flags(void)
{
	struct wenv e;
	struct ibv_wc wc;

	wenv_open(&e, 1);
	ibv_wr_start(e.qx);
	e.qx->wr_id = 40;
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	e.qx->wr_id = 41;
	e.qx->wr_flags = IBV_SEND_IP_CSUM;
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 64);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	CHECK(ibv_wr_complete(e.qx) == EINVAL, "wr_complete with IBV_SEND_IP_CSUM: not EINVAL");
	expect_no_wc(e.p.a.scq, 50, "a refused batch");
	ibv_wr_start(e.qx);
	e.qx->wr_id = 42;
	e.qx->wr_flags = 0;
	ibv_wr_rdma_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p);
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete after a refused batch");
	expect_wc(e.p.a.scq, &wc, 42, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "the next batch");
	exit(0);
}

static const struct subtest tests[] = {
	SUBTEST(all_opcodes),	     SUBTEST(inline_list),
	SUBTEST(abort_batch),	     SUBTEST(batches_unsignaled),
	SUBTEST(batch_error),	     SUBTEST(refused_flags),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
