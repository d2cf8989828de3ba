/* Selective signaling: a send queue of 64 with sq_sig_all = 0 must keep
 * moving when only every 32nd WR is signaled, and must refuse (ENOMEM) a WR
 * beyond its depth when nothing has been reaped. */
#include "common.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define DEPTH 64
#define EVERY 32
#define TOTAL 100000
#define MSG 64
#define SLOTS 1024 /* distinct target offsets */

static void setup(struct tctx *t, struct pair *p, struct buf *src,
		  struct buf *dst)
{
	struct pair_opts o = pair_opts_default();

	o.max_send_wr = DEPTH;
	o.sq_sig_all = 0;
	tctx_open(t);
	pair_create(t, p, &o);
	buf_alloc(t, src, SLOTS * MSG, ACC_ALL);
	buf_alloc(t, dst, SLOTS * MSG, ACC_ALL);
}

static void many_writes(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, dst;
	struct ibv_wc wc;
	uint64_t next_done = EVERY - 1; /* wr_id of the next signaled WR */
	unsigned outstanding = 0; /* signaled WRs posted but not reaped */
	uint64_t start = now_ms();

	setup(&t, &p, &src, &dst);
	fill_pattern(src.p, src.len, 1);
	for (uint64_t i = 0; i < TOTAL; i++) {
		int sig = (i % EVERY) == EVERY - 1;
		/* DEPTH / EVERY signaled WRs cover the whole queue: reap one
		 * before starting a batch that would exceed the depth. */
		if (i % EVERY == 0) {
			while (outstanding >= DEPTH / EVERY) {
				CHECK(poll_one(p.a.scq, &wc, DEADLINE_MS),
				      "stalled: no completion for wr %llu within %d ms (posted %llu)",
				      (unsigned long long)next_done,
				      DEADLINE_MS, (unsigned long long)i);
				CHECK(wc.status == IBV_WC_SUCCESS &&
					      wc.wr_id == next_done &&
					      wc.opcode == IBV_WC_RDMA_WRITE &&
					      wc.qp_num == p.a.qp->qp_num,
				      "wr_id %llu status %s opcode %s, want wr_id %llu SUCCESS RDMA_WRITE",
				      (unsigned long long)wc.wr_id,
				      ibv_wc_status_str(wc.status),
				      wc_opcode_str(wc.opcode),
				      (unsigned long long)next_done);
				next_done += EVERY;
				outstanding--;
			}
		}
		size_t off = (i % SLOTS) * MSG;
		int rc = post_send1(p.a.qp, IBV_WR_RDMA_WRITE, i, src.p + off,
				    MSG, src.mr->lkey,
				    sig ? IBV_SEND_SIGNALED : 0,
				    (uintptr_t)dst.p + off, dst.mr->rkey, 0);
		CHECK(rc == 0, "ibv_post_send #%llu: %s (outstanding signaled %u)",
		      (unsigned long long)i, strerror(rc), outstanding);
		if (sig)
			outstanding++;
		CHECK(now_ms() - start < 60000, "too slow: %llu WRs in 60 s",
		      (unsigned long long)i);
	}
	while (outstanding) {
		CHECK(poll_one(p.a.scq, &wc, DEADLINE_MS),
		      "no final completion for wr %llu",
		      (unsigned long long)next_done);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == next_done,
		      "final: wr_id %llu status %s",
		      (unsigned long long)wc.wr_id,
		      ibv_wc_status_str(wc.status));
		next_done += EVERY;
		outstanding--;
	}
	expect_no_wc(p.a.scq, 50, "unsignaled WRs must not complete");
	/* a SEND behind the writes proves they were all placed */
	post_recv1(p.b.qp, 1, NULL, 0, 0);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, NULL, 0, 0, IBV_SEND_SIGNALED,
			 0, 0, 0) == 0, "post final send");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "final recv");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "final send");
	check_bytes(dst.p, src.p, src.len, "target after 100000 writes");
	NOTE("%d writes in %llu ms", TOTAL,
	     (unsigned long long)(now_ms() - start));
	buf_free(&src);
	buf_free(&dst);
	pair_destroy(&p);
	tctx_close(&t);
}

/* Unsignaled WRs hold their slots until a later signaled WR is reaped. */
static void overpost_enomem(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, dst;
	struct ibv_wc wc;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	setup(&t, &p, &src, &dst);
	CHECK(ibv_query_qp(p.a.qp, &a, IBV_QP_CAP, &ia) == 0, "query cap");
	uint32_t depth = a.cap.max_send_wr;
	CHECK(depth >= DEPTH && depth < 100000, "max_send_wr %u", depth);
	for (uint32_t i = 0; i < depth; i++) {
		int rc = post_send1(p.a.qp, IBV_WR_RDMA_WRITE, i, src.p, MSG,
				    src.mr->lkey,
				    i == depth - 1 ? IBV_SEND_SIGNALED : 0,
				    (uintptr_t)dst.p, dst.mr->rkey, 0);
		CHECK(rc == 0, "post #%u of %u: %s", i, depth, strerror(rc));
	}
	/* give the engine time to finish them: the slots stay taken anyway */
	usleep(100000);
	int rc = post_send1(p.a.qp, IBV_WR_RDMA_WRITE, 999, src.p, MSG,
			    src.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)dst.p,
			    dst.mr->rkey, 0);
	CHECK(rc == ENOMEM, "post beyond max_send_wr %u returned %d (%s), want ENOMEM",
	      depth, rc, strerror(rc));
	expect_wc(p.a.scq, &wc, depth - 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "signaled WR at the end of the queue");
	/* the failed post must not have consumed anything */
	expect_no_wc(p.a.scq, 50, "after the refused post");
	for (uint32_t i = 0; i < depth; i++) {
		rc = post_send1(p.a.qp, IBV_WR_RDMA_WRITE, 1000 + i, src.p,
				MSG, src.mr->lkey,
				i == depth - 1 ? IBV_SEND_SIGNALED : 0,
				(uintptr_t)dst.p, dst.mr->rkey, 0);
		CHECK(rc == 0, "post #%u after reaping: %s", i, strerror(rc));
	}
	expect_wc(p.a.scq, &wc, 1000 + depth - 1, IBV_WC_SUCCESS,
		  IBV_WC_RDMA_WRITE, "second round");
	buf_free(&src);
	buf_free(&dst);
	pair_destroy(&p);
	tctx_close(&t);
}

/* A list of WRs in one ibv_post_send call, only the last signaled. */
static void chained_list(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, dst;
	struct ibv_wc wc;
	struct ibv_send_wr wr[32], *bad = NULL;
	struct ibv_sge sge[32];

	setup(&t, &p, &src, &dst);
	fill_pattern(src.p, src.len, 3);
	for (int round = 0; round < 200; round++) {
		for (int i = 0; i < 32; i++) {
			size_t off = (size_t)((round * 32 + i) % SLOTS) * MSG;
			sge[i] = (struct ibv_sge){ (uintptr_t)src.p + off, MSG,
						   src.mr->lkey };
			wr[i] = (struct ibv_send_wr){
				.wr_id = (uint64_t)round * 32 + i,
				.next = i < 31 ? &wr[i + 1] : NULL,
				.sg_list = &sge[i],
				.num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = i == 31 ? IBV_SEND_SIGNALED : 0,
			};
			wr[i].wr.rdma.remote_addr = (uintptr_t)dst.p + off;
			wr[i].wr.rdma.rkey = dst.mr->rkey;
		}
		int rc = ibv_post_send(p.a.qp, wr, &bad);
		CHECK(rc == 0, "round %d: post list: %s", round, strerror(rc));
		expect_wc(p.a.scq, &wc, (uint64_t)round * 32 + 31,
			  IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "list tail");
	}
	post_recv1(p.b.qp, 1, NULL, 0, 0);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, NULL, 0, 0, IBV_SEND_SIGNALED,
			 0, 0, 0) == 0, "post send");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	check_bytes(dst.p, src.p, (size_t)200 * 32 * MSG < src.len
					 ? (size_t)200 * 32 * MSG
					 : src.len,
		    "target after chained writes");
	buf_free(&src);
	buf_free(&dst);
	pair_destroy(&p);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(many_writes),
	SUBTEST(overpost_enomem),
	SUBTEST(chained_list),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
