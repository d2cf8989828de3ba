/* RNR with a finite rnr_retry (IBTA 9.7.5.2.8): a SEND that finds no
 * receive WQE waits rnr_retry times the responder's RNR timer, then fails
 * with IBV_WC_RNR_RETRY_EXC_ERR; a receive posted within that time lets
 * it through. */
#include "common.h"

#include <string.h>
#include <unistd.h>

struct rnr_pair {
	struct tctx t;
	struct qp_end a, b;
	struct buf buf;
};

static struct ibv_qp *mk_qp(struct tctx *t, struct qp_end *e)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	e->scq = ibv_create_cq(t->ctx, 64, NULL, NULL, 0);
	e->rcq = ibv_create_cq(t->ctx, 64, NULL, NULL, 0);
	CHECK(e->scq && e->rcq, "create cq");
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	e->qp = ibv_create_qp(t->pd, &ia);
	CHECK(e->qp, "create qp");
	return e->qp;
}

/* a has rnr_retry, b's min_rnr_timer sets how long each wait is. */
static void setup(struct rnr_pair *p, uint8_t rnr_retry, uint8_t b_rnr_timer)
{
	struct ibv_qp_attr a;

	tctx_open(&p->t);
	mk_qp(&p->t, &p->a);
	mk_qp(&p->t, &p->b);
	qp_to_init(p->a.qp, ACC_ALL);
	qp_to_init(p->b.qp, ACC_ALL);
	qp_to_rtr(&p->t, p->a.qp, p->b.qp->qp_num, IBV_MTU_4096, 0, 1);
	qp_to_rtr(&p->t, p->b.qp, p->a.qp->qp_num, IBV_MTU_4096, 0, 1);
	/* b's RNR timer is a responder attribute: set it again (RTR->RTS). */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	a.min_rnr_timer = b_rnr_timer;
	CHECK(ibv_modify_qp(p->b.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER) == 0, "b to RTS");
	a.rnr_retry = rnr_retry;
	CHECK(ibv_modify_qp(p->a.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "a to RTS");
	buf_alloc(&p->t, &p->buf, 8192, ACC_ALL);
}

static void teardown(struct rnr_pair *p)
{
	buf_free(&p->buf);
	ibv_destroy_qp(p->a.qp);
	ibv_destroy_qp(p->b.qp);
	ibv_destroy_cq(p->a.scq);
	ibv_destroy_cq(p->a.rcq);
	ibv_destroy_cq(p->b.scq);
	ibv_destroy_cq(p->b.rcq);
	tctx_close(&p->t);
}

/* rnr_retry 2 with a 0.64 ms timer: the SEND fails fast, the QP errs. */
static void rnr_exhausted(void)
{
	struct rnr_pair p;
	struct ibv_wc wc;
	uint64_t t0;

	setup(&p, 2, 12);
	t0 = now_ms();
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 1, p.buf.p, 100, p.buf.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	CHECK(poll_one(p.a.scq, &wc, 5000) == 1, "no completion for the SEND");
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
	      "wr_id %llu status %s, want RNR retry exceeded",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	CHECK(now_ms() - t0 < 2000, "took %llu ms", (unsigned long long)(now_ms() - t0));
	CHECK(qp_state(p.a.qp) == IBV_QPS_ERR, "requester not in ERR");
	/* The responder dropped the request: a receive posted now stays
	 * unused (or is flushed if the responder is in ERR too). */
	post_recv1_rc(p.b.qp, 9, p.buf.p + 4096, 200, p.buf.mr->lkey);
	if (poll_one(p.b.rcq, &wc, 200) == 1)
		CHECK(wc.status == IBV_WC_WR_FLUSH_ERR, "the dropped SEND was delivered (%s)",
		      ibv_wc_status_str(wc.status));
	teardown(&p);
}

/* rnr_retry 0: no retry at all. */
static void rnr_zero(void)
{
	struct rnr_pair p;
	struct ibv_wc wc;

	setup(&p, 0, 31);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 1, p.buf.p, 10, p.buf.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	CHECK(poll_one(p.a.scq, &wc, 2000) == 1, "no completion");
	CHECK(wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "status %s", ibv_wc_status_str(wc.status));
	teardown(&p);
}

/* rnr_retry 3 with 491 ms per wait: a receive posted after 100 ms lets the
 * SEND through. */
static void rnr_recovers(void)
{
	struct rnr_pair p;
	struct ibv_wc wc;

	setup(&p, 3, 31);
	fill_pattern(p.buf.p, 100, 7);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 1, p.buf.p, 100, p.buf.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	usleep(100000);
	post_recv1(p.b.qp, 9, p.buf.p + 4096, 200, p.buf.mr->lkey);
	expect_wc(p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND after a late receive");
	expect_wc(p.b.rcq, &wc, 9, IBV_WC_SUCCESS, IBV_WC_RECV, "receive");
	check_bytes(p.buf.p + 4096, p.buf.p, 100, "payload");
	teardown(&p);
}

int main(int argc, char **argv)
{
	static const struct subtest tests[] = {
		{ "rnr_exhausted", rnr_exhausted },
		{ "rnr_zero", rnr_zero },
		{ "rnr_recovers", rnr_recovers },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
