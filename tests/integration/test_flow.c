/* Flow and ordering: a SEND waiting for a receive (RNR retry 7 = forever),
 * long in-order message streams, QPs on two contexts, and several threads
 * driving QPs of one context at once. */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* rnr_retry 7 retries forever: a SEND posted before its receive completes
 * successfully once the receive is posted (IBTA 9.7.5.2.8). */
static void rnr_wait(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 8192, ACC_ALL);
	fill_pattern(b.p, 1000, 1);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 1, b.p, 1000, b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, b.p, 10, b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	expect_no_wc(p.a.scq, 300, "SEND completed with no receive posted");
	CHECK(qp_state(p.a.qp) == IBV_QPS_RTS && qp_state(p.b.qp) == IBV_QPS_RTS,
	      "a missing receive moved a QP out of RTS");
	post_recv1(p.b.qp, 11, b.p + 4096, 2000, b.mr->lkey);
	expect_wc(p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND after the receive was posted");
	expect_wc(p.b.rcq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 1000, p.b.qp, p.a.qp, "late receive");
	check_bytes(b.p + 4096, b.p, 1000, "payload");
	expect_no_wc(p.a.scq, 200, "second SEND before its receive");
	post_recv1(p.b.qp, 12, b.p + 4096, 2000, b.mr->lkey);
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "second SEND");
	expect_wc(p.b.rcq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_RECV, "recv 2");
	CHECK(wc.byte_len == 10, "byte_len %u", wc.byte_len);
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

/* 2000 SENDs of varying sizes, mixed with WRITEs: receives complete in
 * order, each with its own bytes. */
static void ordered_stream(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf src, dst;
	struct ibv_wc wc;
	const int N = 2000, SLOT = 9000;

	o.max_send_wr = 256;
	o.max_recv_wr = 256;
	o.cqe = 1024;
	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &src, (size_t)64 * SLOT, ACC_ALL);
	buf_alloc(&t, &dst, (size_t)64 * SLOT, ACC_ALL);
	fill_pattern(src.p, src.len, 5);
	int posted_r = 0, posted_s = 0, done_r = 0, done_s = 0;
	while (done_r < N) {
		/* keep at most 64 messages in flight (64 buffer slots) */
		while (posted_r < N && posted_r - done_r < 64) {
			post_recv1(p.b.qp, (uint64_t)posted_r,
				   dst.p + (size_t)(posted_r % 64) * SLOT, SLOT,
				   dst.mr->lkey);
			posted_r++;
		}
		while (posted_s < posted_r && posted_s - done_s < 64) {
			uint32_t len = (uint32_t)((posted_s * 7919) % SLOT);
			int rc = post_send1(p.a.qp, IBV_WR_SEND,
					    (uint64_t)posted_s,
					    src.p + (size_t)(posted_s % 64) * SLOT,
					    len, src.mr->lkey, IBV_SEND_SIGNALED,
					    0, 0, 0);
			CHECK(rc == 0, "post send %d: %s", posted_s,
			      strerror(rc));
			posted_s++;
		}
		while (ibv_poll_cq(p.a.scq, 1, &wc) == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS &&
				      wc.wr_id == (uint64_t)done_s,
			      "send completion %llu (%s), want %d",
			      (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status), done_s);
			done_s++;
		}
		CHECK(poll_one(p.b.rcq, &wc, DEADLINE_MS),
		      "no receive completion %d", done_r);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)done_r,
		      "receive completion %llu (%s), want %d in order",
		      (unsigned long long)wc.wr_id,
		      ibv_wc_status_str(wc.status), done_r);
		uint32_t len = (uint32_t)((done_r * 7919) % SLOT);
		CHECK(wc.byte_len == len, "message %d: byte_len %u want %u",
		      done_r, wc.byte_len, len);
		size_t off = (size_t)(done_r % 64) * SLOT;
		check_bytes(dst.p + off, src.p + off, len, "stream message");
		done_r++;
	}
	while (done_s < N) {
		expect_wc(p.a.scq, &wc, (uint64_t)done_s, IBV_WC_SUCCESS,
			  IBV_WC_SEND, "tail send completion");
		done_s++;
	}
	buf_free(&src);
	buf_free(&dst);
	pair_destroy(&p);
	tctx_close(&t);
}

/* One QP on each of two contexts of the device. */
static void two_contexts(void)
{
	struct tctx t1, t2;
	struct ibv_cq *cq1, *cq2;
	struct ibv_qp *q1, *q2;
	struct pair_opts o = pair_opts_default();
	struct buf b1, b2;
	struct ibv_wc wc;

	tctx_open(&t1);
	tctx_open(&t2);
	cq1 = ibv_create_cq(t1.ctx, 64, NULL, NULL, 0);
	cq2 = ibv_create_cq(t2.ctx, 64, NULL, NULL, 0);
	CHECK(cq1 && cq2, "create cqs");
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	ia.send_cq = ia.recv_cq = cq1;
	q1 = ibv_create_qp(t1.pd, &ia);
	ia.send_cq = ia.recv_cq = cq2;
	q2 = ibv_create_qp(t2.pd, &ia);
	CHECK(q1 && q2, "create qps: %s", strerror(errno));
	CHECK(q1->qp_num != q2->qp_num, "same qp_num on two contexts");
	qp_to_init(q1, ACC_ALL);
	qp_to_init(q2, ACC_ALL);
	qp_to_rtr(&t1, q1, q2->qp_num, IBV_MTU_1024, o.psn_b, 1);
	qp_to_rtr(&t2, q2, q1->qp_num, IBV_MTU_1024, o.psn_a, 1);
	qp_to_rts(q1, o.psn_a, 1);
	qp_to_rts(q2, o.psn_b, 1);
	buf_alloc(&t1, &b1, 65536, ACC_ALL);
	buf_alloc(&t2, &b2, 65536, ACC_ALL);
	fill_pattern(b1.p, 65536, 8);
	post_recv1(q2, 1, b2.p, 65536, b2.mr->lkey);
	CHECK(post_send1(q1, IBV_WR_SEND, 2, b1.p, 40000, b1.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "send");
	expect_wc(cq1, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(cq2, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_recv_wc(&wc, IBV_WC_RECV, 40000, q2, q1, "cross-context");
	check_bytes(b2.p, b1.p, 40000, "cross-context SEND");
	CHECK(post_send1(q2, IBV_WR_RDMA_READ, 3, b2.p + 40000, 20000,
			 b2.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)b1.p + 100,
			 b1.mr->rkey, 0) == 0, "read");
	expect_wc(cq2, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(b2.p + 40000, b1.p + 100, 20000, "cross-context READ");
	/* a key of one context's PD is not valid on the other's */
	CHECK(post_send1(q1, IBV_WR_RDMA_WRITE, 4, b1.p, 8, b1.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)b1.p, b1.mr->rkey,
			 0) == 0, "write");
	expect_wc(cq1, &wc, 4, IBV_WC_REM_ACCESS_ERR, -1,
		  "WRITE with an rkey of the requester's own PD");
	exit(0);
}

struct worker {
	struct tctx *t;
	struct pair p;
	struct buf src, dst;
	int n;
	char err[256];
};

/* Runs in a thread: no CHECK (it exits the process); report in w->err. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct ibv_wc wc;
	unsigned outstanding = 0;
	uint64_t next_done = 31;

	for (int i = 0; i < w->n; i++) {
		if (i % 32 == 0) {
			while (outstanding >= 2) {
				if (!poll_one(w->p.a.scq, &wc, DEADLINE_MS)) {
					snprintf(w->err, sizeof(w->err),
						 "stalled at %d", i);
					return NULL;
				}
				if (wc.status != IBV_WC_SUCCESS ||
				    wc.wr_id != next_done) {
					snprintf(w->err, sizeof(w->err),
						 "wr_id %llu status %s, want %llu",
						 (unsigned long long)wc.wr_id,
						 ibv_wc_status_str(wc.status),
						 (unsigned long long)next_done);
					return NULL;
				}
				next_done += 32;
				outstanding--;
			}
		}
		size_t off = (size_t)(i % 256) * 256;
		int sig = i % 32 == 31;
		struct ibv_sge sge = { (uintptr_t)w->src.p + off, 256,
				       w->src.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = sig ? IBV_SEND_SIGNALED : 0,
		}, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)w->dst.p + off;
		wr.wr.rdma.rkey = w->dst.mr->rkey;
		int rc = ibv_post_send(w->p.a.qp, &wr, &bad);
		if (rc) {
			snprintf(w->err, sizeof(w->err), "post %d: %s", i,
				 strerror(rc));
			return NULL;
		}
		outstanding += sig;
	}
	while (outstanding) {
		if (!poll_one(w->p.a.scq, &wc, DEADLINE_MS) ||
		    wc.status != IBV_WC_SUCCESS) {
			snprintf(w->err, sizeof(w->err), "final completion");
			return NULL;
		}
		outstanding--;
	}
	return NULL;
}

static void threads(void)
{
	enum { NT = 4 };
	struct tctx t;
	struct worker w[NT];
	pthread_t th[NT];
	struct pair_opts o = pair_opts_default();
	struct ibv_wc wc;

	o.max_send_wr = 64;
	tctx_open(&t);
	memset(w, 0, sizeof(w));
	for (int i = 0; i < NT; i++) {
		w[i].t = &t;
		w[i].n = 20000;
		pair_create(&t, &w[i].p, &o);
		buf_alloc(&t, &w[i].src, 65536, ACC_ALL);
		buf_alloc(&t, &w[i].dst, 65536, ACC_ALL);
		fill_pattern(w[i].src.p, 65536, (uint32_t)i + 40);
	}
	for (int i = 0; i < NT; i++)
		CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0,
		      "pthread_create");
	for (int i = 0; i < NT; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < NT; i++) {
		CHECK(!w[i].err[0], "thread %d: %s", i, w[i].err);
		post_recv1(w[i].p.b.qp, 1, NULL, 0, 0);
		CHECK(post_send1(w[i].p.a.qp, IBV_WR_SEND, 2, NULL, 0, 0,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "send");
		expect_wc(w[i].p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "sync");
		expect_wc(w[i].p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "sync");
		check_bytes(w[i].dst.p, w[i].src.p, 65536, "thread's target");
	}
	for (int i = 0; i < NT; i++) {
		buf_free(&w[i].src);
		buf_free(&w[i].dst);
		pair_destroy(&w[i].p);
	}
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(rnr_wait),
	SUBTEST(ordered_stream),
	SUBTEST(two_contexts),
	SUBTEST(threads),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
