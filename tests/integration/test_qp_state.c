/* The IBTA RC QP state machine through ibv_modify_qp / ibv_query_qp:
 * required and allowed attribute masks per transition (IBTA Vol 1 §10.3.1,
 * table "QP state transition properties"; ibv_modify_qp(3)), invalid
 * transitions, ERR/RESET from anywhere, and query returning what was set. */
#include "common.h"

#include <errno.h>
#include <string.h>

#define INIT_REQ (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | \
		  IBV_QP_ACCESS_FLAGS)
#define RTR_REQ (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |           \
		 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |                      \
		 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RTS_REQ (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |     \
		 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

static const char *const st_names[] = { "RESET", "INIT", "RTR", "RTS",
					"SQD",	 "SQE",	 "ERR" };

static const char *stn(int s)
{
	return s >= 0 && s < 7 ? st_names[s] : "?";
}

struct qs {
	struct tctx t;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *peer;
	struct ibv_qp_init_attr ia;
};

static void qs_open(struct qs *q)
{
	tctx_open(&q->t);
	q->cq = ibv_create_cq(q->t.ctx, 64, NULL, NULL, 0);
	CHECK(q->cq, "create cq");
	q->ia = (struct ibv_qp_init_attr){
		.send_cq = q->cq, .recv_cq = q->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 32 },
	};
	q->qp = ibv_create_qp(q->t.pd, &q->ia);
	CHECK(q->qp, "create qp: %s", strerror(errno));
	struct ibv_qp_init_attr ia2 = q->ia;
	q->peer = ibv_create_qp(q->t.pd, &ia2);
	CHECK(q->peer, "create peer qp: %s", strerror(errno));
}

static void qs_close(struct qs *q)
{
	CHECK(ibv_destroy_qp(q->qp) == 0, "destroy qp");
	CHECK(ibv_destroy_qp(q->peer) == 0, "destroy peer");
	CHECK(ibv_destroy_cq(q->cq) == 0, "destroy cq");
	tctx_close(&q->t);
}

static void fill_init(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->port_num = 1;
	a->qp_access_flags = ACC_ALL;
}

static void fill_rtr(struct qs *q, struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = q->peer->qp_num;
	a->rq_psn = 0x11111;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 14;
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = 1;
	a->ah_attr.grh.dgid = q->t.gid;
	a->ah_attr.grh.sgid_index = 0;
	a->ah_attr.grh.hop_limit = 64;
}

static void fill_rts(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->timeout = 18;
	a->retry_cnt = 6;
	a->rnr_retry = 5;
	a->sq_psn = 0x22222;
	a->max_rd_atomic = 1;
}

/* ibv_modify_qp must return want (0 or an errno) and leave the QP in st. */
static void modify_expect(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
			  int want, enum ibv_qp_state st, const char *what)
{
	int rc = ibv_modify_qp(qp, a, mask);

	CHECK(rc == want, "%s: ibv_modify_qp returned %d (%s), want %d (%s)",
	      what, rc, rc ? strerror(rc) : "ok", want,
	      want ? strerror(want) : "ok");
	enum ibv_qp_state now = qp_state(qp);
	CHECK(now == st, "%s: QP is in %s afterwards, want %s", what, stn(now),
	      stn(st));
}

static void to_state(struct qs *q, enum ibv_qp_state st)
{
	struct ibv_qp_attr a;

	if (st == IBV_QPS_RESET)
		return;
	fill_init(&a);
	modify_expect(q->qp, &a, INIT_REQ, 0, IBV_QPS_INIT, "RESET->INIT");
	if (st == IBV_QPS_INIT)
		return;
	fill_rtr(q, &a);
	modify_expect(q->qp, &a, RTR_REQ, 0, IBV_QPS_RTR, "INIT->RTR");
	if (st == IBV_QPS_RTR)
		return;
	fill_rts(&a);
	modify_expect(q->qp, &a, RTS_REQ, 0, IBV_QPS_RTS, "RTR->RTS");
}

static void initial_reset(void)
{
	struct qs q;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	qs_open(&q);
	CHECK(q.qp->state == IBV_QPS_RESET || q.qp->state == 0,
	      "qp->state %d", q.qp->state);
	memset(&ia, 0, sizeof(ia));
	CHECK(ibv_query_qp(q.qp, &a, IBV_QP_STATE | IBV_QP_CAP, &ia) == 0,
	      "query");
	CHECK(a.qp_state == IBV_QPS_RESET, "new QP in %s", stn(a.qp_state));
	CHECK(ia.qp_type == IBV_QPT_RC && ia.send_cq == q.cq &&
		      ia.recv_cq == q.cq && ia.sq_sig_all == 0,
	      "init_attr from query: type %d send_cq %p", ia.qp_type,
	      (void *)ia.send_cq);
	CHECK(a.cap.max_send_wr == q.ia.cap.max_send_wr &&
		      a.cap.max_recv_wr == q.ia.cap.max_recv_wr &&
		      a.cap.max_send_sge == q.ia.cap.max_send_sge &&
		      a.cap.max_recv_sge == q.ia.cap.max_recv_sge &&
		      a.cap.max_inline_data == q.ia.cap.max_inline_data,
	      "query cap {%u %u %u %u %u} != create cap {%u %u %u %u %u}",
	      a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
	      a.cap.max_recv_sge, a.cap.max_inline_data, q.ia.cap.max_send_wr,
	      q.ia.cap.max_recv_wr, q.ia.cap.max_send_sge,
	      q.ia.cap.max_recv_sge, q.ia.cap.max_inline_data);
	qs_close(&q);
}

static void reset_to_init(void)
{
	struct qs q;
	struct ibv_qp_attr a;
	const int req[] = { IBV_QP_PKEY_INDEX, IBV_QP_PORT,
			    IBV_QP_ACCESS_FLAGS };

	qs_open(&q);
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		fill_init(&a);
		modify_expect(q.qp, &a, INIT_REQ & ~req[i], EINVAL,
			      IBV_QPS_RESET, "RESET->INIT missing a required attr");
	}
	fill_init(&a);
	modify_expect(q.qp, &a, INIT_REQ | IBV_QP_DEST_QPN, EINVAL,
		      IBV_QPS_RESET, "RESET->INIT with DEST_QPN");
	fill_init(&a);
	a.port_num = 2;
	modify_expect(q.qp, &a, INIT_REQ, EINVAL, IBV_QPS_RESET,
		      "RESET->INIT on port 2");
	fill_init(&a);
	a.pkey_index = 4000;
	modify_expect(q.qp, &a, INIT_REQ, EINVAL, IBV_QPS_RESET,
		      "RESET->INIT with pkey_index 4000");
	fill_init(&a);
	modify_expect(q.qp, &a, INIT_REQ, 0, IBV_QPS_INIT, "RESET->INIT");
	/* INIT->INIT may change the access flags */
	fill_init(&a);
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	modify_expect(q.qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, 0,
		      IBV_QPS_INIT, "INIT->INIT");
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(q.qp, &a, IBV_QP_ACCESS_FLAGS, &ia) == 0, "query");
	CHECK(a.qp_access_flags == IBV_ACCESS_REMOTE_WRITE,
	      "access flags %#x after INIT->INIT", a.qp_access_flags);
	qs_close(&q);
}

static void invalid_transitions(void)
{
	struct qs q;
	struct ibv_qp_attr a;

	qs_open(&q);
	fill_rts(&a);
	modify_expect(q.qp, &a, RTS_REQ, EINVAL, IBV_QPS_RESET, "RESET->RTS");
	fill_rtr(&q, &a);
	modify_expect(q.qp, &a, RTR_REQ, EINVAL, IBV_QPS_RESET, "RESET->RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	modify_expect(q.qp, &a, IBV_QP_STATE, EINVAL, IBV_QPS_RESET,
		      "RESET->SQD");
	a.qp_state = (enum ibv_qp_state)42;
	modify_expect(q.qp, &a, IBV_QP_STATE, EINVAL, IBV_QPS_RESET,
		      "RESET->state 42");
	to_state(&q, IBV_QPS_INIT);
	fill_rts(&a);
	modify_expect(q.qp, &a, RTS_REQ, EINVAL, IBV_QPS_INIT, "INIT->RTS");
	to_state(&q, IBV_QPS_RESET);
	qs_close(&q);
}

static void init_to_rtr(void)
{
	struct qs q;
	struct ibv_qp_attr a;
	const int req[] = { IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN,
			    IBV_QP_RQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC,
			    IBV_QP_MIN_RNR_TIMER };
	char what[80];

	qs_open(&q);
	to_state(&q, IBV_QPS_INIT);
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		fill_rtr(&q, &a);
		snprintf(what, sizeof(what), "INIT->RTR without mask bit %#x",
			 req[i]);
		modify_expect(q.qp, &a, RTR_REQ & ~req[i], EINVAL,
			      IBV_QPS_INIT, what);
	}
	fill_rtr(&q, &a);
	a.sq_psn = 5;
	modify_expect(q.qp, &a, RTR_REQ | IBV_QP_SQ_PSN, EINVAL, IBV_QPS_INIT,
		      "INIT->RTR with SQ_PSN (not allowed)");
	fill_rtr(&q, &a);
	a.timeout = 5;
	modify_expect(q.qp, &a, RTR_REQ | IBV_QP_TIMEOUT, EINVAL,
		      IBV_QPS_INIT, "INIT->RTR with TIMEOUT (not allowed)");
	fill_rtr(&q, &a);
	a.ah_attr.grh.sgid_index = 200;
	modify_expect(q.qp, &a, RTR_REQ, EINVAL, IBV_QPS_INIT,
		      "INIT->RTR with sgid_index 200");
	/* optional attributes are accepted */
	fill_rtr(&q, &a);
	a.qp_access_flags = ACC_ALL;
	modify_expect(q.qp, &a, RTR_REQ | IBV_QP_ACCESS_FLAGS |
					IBV_QP_PKEY_INDEX,
		      0, IBV_QPS_RTR, "INIT->RTR with optional attrs");
	qs_close(&q);
}

static void rtr_to_rts(void)
{
	struct qs q;
	struct ibv_qp_attr a;
	const int req[] = { IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
			    IBV_QP_SQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC };
	char what[80];

	qs_open(&q);
	to_state(&q, IBV_QPS_RTR);
	for (size_t i = 0; i < ARRAY_SIZE(req); i++) {
		fill_rts(&a);
		snprintf(what, sizeof(what), "RTR->RTS without mask bit %#x",
			 req[i]);
		modify_expect(q.qp, &a, RTS_REQ & ~req[i], EINVAL, IBV_QPS_RTR,
			      what);
	}
	fill_rts(&a);
	a.path_mtu = IBV_MTU_256;
	modify_expect(q.qp, &a, RTS_REQ | IBV_QP_PATH_MTU, EINVAL, IBV_QPS_RTR,
		      "RTR->RTS with PATH_MTU (not allowed)");
	fill_rts(&a);
	a.dest_qp_num = 77;
	modify_expect(q.qp, &a, RTS_REQ | IBV_QP_DEST_QPN, EINVAL, IBV_QPS_RTR,
		      "RTR->RTS with DEST_QPN (not allowed)");
	fill_rts(&a);
	a.min_rnr_timer = 3;
	modify_expect(q.qp, &a, RTS_REQ | IBV_QP_MIN_RNR_TIMER, 0, IBV_QPS_RTS,
		      "RTR->RTS with MIN_RNR_TIMER (optional)");

	/* RTS->RTS */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.dest_qp_num = 77;
	modify_expect(q.qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, EINVAL,
		      IBV_QPS_RTS, "RTS->RTS with DEST_QPN");
	a.sq_psn = 1;
	modify_expect(q.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, EINVAL,
		      IBV_QPS_RTS, "RTS->RTS with SQ_PSN");
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	a.min_rnr_timer = 20;
	modify_expect(q.qp, &a,
		      IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER,
		      0, IBV_QPS_RTS, "RTS->RTS with ACCESS_FLAGS, MIN_RNR_TIMER");
	/* cur_qp_state must match the current state when given */
	a.cur_qp_state = IBV_QPS_RTS;
	modify_expect(q.qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE, 0,
		      IBV_QPS_RTS, "RTS->RTS with the right CUR_STATE");
	a.cur_qp_state = IBV_QPS_INIT;
	modify_expect(q.qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE, EINVAL,
		      IBV_QPS_RTS, "RTS->RTS with a wrong CUR_STATE");
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(q.qp, &a, IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER,
			   &ia) == 0, "query");
	CHECK(a.qp_access_flags == IBV_ACCESS_REMOTE_READ &&
		      a.min_rnr_timer == 20,
	      "after RTS->RTS: access %#x min_rnr_timer %u", a.qp_access_flags,
	      a.min_rnr_timer);
	/* RTS backwards is not a transition */
	fill_init(&a);
	modify_expect(q.qp, &a, INIT_REQ, EINVAL, IBV_QPS_RTS, "RTS->INIT");
	fill_rtr(&q, &a);
	modify_expect(q.qp, &a, RTR_REQ, EINVAL, IBV_QPS_RTS, "RTS->RTR");
	qs_close(&q);
}

static void err_and_reset_from_any(void)
{
	const enum ibv_qp_state from[] = { IBV_QPS_RESET, IBV_QPS_INIT,
					   IBV_QPS_RTR, IBV_QPS_RTS };
	struct qs q;
	struct ibv_qp_attr a;
	char what[64];

	qs_open(&q);
	for (size_t i = 0; i < ARRAY_SIZE(from); i++) {
		to_state(&q, from[i]);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_ERR;
		snprintf(what, sizeof(what), "%s->ERR", stn(from[i]));
		modify_expect(q.qp, &a, IBV_QP_STATE, 0, IBV_QPS_ERR, what);
		/* ERR accepts only RESET and ERR */
		fill_init(&a);
		modify_expect(q.qp, &a, INIT_REQ, EINVAL, IBV_QPS_ERR,
			      "ERR->INIT");
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_ERR;
		modify_expect(q.qp, &a, IBV_QP_STATE, 0, IBV_QPS_ERR,
			      "ERR->ERR");
		a.qp_state = IBV_QPS_RESET;
		modify_expect(q.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET,
			      "ERR->RESET");
		to_state(&q, from[i]);
		a.qp_state = IBV_QPS_RESET;
		snprintf(what, sizeof(what), "%s->RESET", stn(from[i]));
		modify_expect(q.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET, what);
	}
	qs_close(&q);
}

static void sqd(void)
{
	struct qs q;
	struct ibv_qp_attr a;

	qs_open(&q);
	to_state(&q, IBV_QPS_RTS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	int rc = ibv_modify_qp(q.qp, &a, IBV_QP_STATE);
	CHECK(rc == 0, "RTS->SQD: %s", strerror(rc));
	/* the SQ is empty, so draining finishes at once (SQD, or SQD-draining
	 * reported as SQD) */
	CHECK(wait_qp_state(q.qp, IBV_QPS_SQD, DEADLINE_MS),
	      "QP in %s after RTS->SQD", stn(qp_state(q.qp)));
	a.qp_state = IBV_QPS_RTS;
	modify_expect(q.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RTS, "SQD->RTS");
	qs_close(&q);
}

/* SQD with en_sqd_async_notify: IBV_EVENT_SQ_DRAINED once what was begun
 * has completed (here: nothing), sq_draining 0 then; a SEND posted in
 * SQD waits for RTS, then goes; without the notice, no event. */
static void sqd_drained(void)
{
	struct tctx t;
	struct pair p;
	struct buf b;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1 };
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	tctx_open(&t);
	struct pair_opts o = pair_opts_default();
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	CHECK(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0, "RTS->SQD");
	CHECK(wait_async_event(t.ctx, p.a.qp, IBV_EVENT_SQ_DRAINED, DEADLINE_MS),
	      "no IBV_EVENT_SQ_DRAINED within %d ms", DEADLINE_MS);
	CHECK(ibv_query_qp(p.a.qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE, &ia) == 0, "query");
	CHECK(a.qp_state == IBV_QPS_SQD && !a.sq_draining, "query in SQD: %s, draining %u",
	      stn(a.qp_state), a.sq_draining);
	post_recv1(p.b.qp, 1, b.p + 2048, 64, b.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, b.p, 16, b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post in SQD");
	expect_no_wc(p.a.scq, 100, "a SEND posted in SQD");
	expect_no_wc(p.b.rcq, 10, "a SEND posted in SQD, at the peer");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	CHECK(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE) == 0, "SQD->RTS");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "the SEND, in RTS again");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "the SEND, at the peer");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_SQD };
	CHECK(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE) == 0, "RTS->SQD without the notice");
	CHECK(!wait_async_event(t.ctx, p.a.qp, IBV_EVENT_SQ_DRAINED, 200), "SQ_DRAINED not asked for");
	exit(0);
}

/* IBV_EVENT_COMM_EST: a's first request comes while a is still in RTR; b,
 * in RTS by then, and a once in RTS, raise none; a connection after RESET
 * raises it again. */
static void comm_est(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	for (int round = 0; round < 2; round++) {
		modify_expect(p.a.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET, "a->RESET");
		modify_expect(p.b.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET, "b->RESET");
		/* (pair_create's connection raised its own: drained here) */
		while (wait_async_event(t.ctx, p.a.qp, IBV_EVENT_COMM_EST, 50))
			;
		qp_to_init(p.a.qp, o.access);
		qp_to_init(p.b.qp, o.access);
		qp_to_rtr(&t, p.a.qp, p.b.qp->qp_num, o.mtu, o.psn_b, 1);
		qp_to_rtr(&t, p.b.qp, p.a.qp->qp_num, o.mtu, o.psn_a, 1);
		qp_to_rts(p.b.qp, o.psn_b, 1);
		fill_pattern(b.p, 64, (uint32_t)round);
		post_recv1(p.a.qp, 1, b.p + 1024, 64, b.mr->lkey);
		CHECK(post_send1(p.b.qp, IBV_WR_SEND, 2, b.p, 64, b.mr->lkey, IBV_SEND_SIGNALED, 0,
				 0, 0) == 0, "post SEND to a QP in RTR");
		expect_wc(p.a.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "receive in RTR");
		check_bytes(b.p + 1024, b.p, 64, "SEND received in RTR");
		expect_wc(p.b.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND to a QP in RTR");
		CHECK(wait_async_event(t.ctx, p.a.qp, IBV_EVENT_COMM_EST, DEADLINE_MS),
		      "round %d: no IBV_EVENT_COMM_EST for the QP in RTR", round);
		qp_to_rts(p.a.qp, o.psn_a, 1);
		post_recv1(p.a.qp, 3, b.p + 1024, 64, b.mr->lkey);
		post_recv1(p.b.qp, 4, b.p + 2048, 64, b.mr->lkey);
		CHECK(post_send1(p.b.qp, IBV_WR_SEND, 5, b.p, 64, b.mr->lkey, IBV_SEND_SIGNALED, 0,
				 0, 0) == 0 &&
		      post_send1(p.a.qp, IBV_WR_SEND, 6, b.p, 64, b.mr->lkey, IBV_SEND_SIGNALED, 0,
				 0, 0) == 0, "post SENDs both ways in RTS");
		expect_wc(p.a.rcq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RECV, "receive in RTS");
		expect_wc(p.b.rcq, &wc, 4, IBV_WC_SUCCESS, IBV_WC_RECV, "receive in RTS");
		expect_wc(p.b.scq, &wc, 5, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
		expect_wc(p.a.scq, &wc, 6, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
		CHECK(!wait_async_event(t.ctx, p.a.qp, IBV_EVENT_COMM_EST, 100),
		      "a second IBV_EVENT_COMM_EST for one connection");
		CHECK(!wait_async_event(t.ctx, p.b.qp, IBV_EVENT_COMM_EST, 100),
		      "IBV_EVENT_COMM_EST for a QP in RTS");
	}
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static void query_returns_values(void)
{
	struct qs q;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	qs_open(&q);
	/* responder depth (RTR) is bounded by max_qp_rd_atom, initiator
	 * depth (RTS) by max_qp_init_rd_atom */
	int mr = q.t.dattr.max_qp_rd_atom, mi = q.t.dattr.max_qp_init_rd_atom;
	CHECK(mr >= 1 && mi >= 1, "max_qp_rd_atom %d max_qp_init_rd_atom %d",
	      mr, mi);
	uint8_t drd = (uint8_t)(mr >= 4 ? 4 : mr);
	uint8_t ird = (uint8_t)(mi >= 2 ? 2 : mi);
	fill_init(&a);
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;
	modify_expect(q.qp, &a, INIT_REQ, 0, IBV_QPS_INIT, "RESET->INIT");
	fill_rtr(&q, &a);
	a.max_dest_rd_atomic = drd;
	modify_expect(q.qp, &a, RTR_REQ, 0, IBV_QPS_RTR, "INIT->RTR");
	fill_rts(&a);
	a.max_rd_atomic = ird;
	modify_expect(q.qp, &a, RTS_REQ, 0, IBV_QPS_RTS, "RTR->RTS");

	memset(&a, 0x5a, sizeof(a));
	memset(&ia, 0x5a, sizeof(ia));
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		   IBV_QP_ACCESS_FLAGS | IBV_QP_AV | IBV_QP_PATH_MTU |
		   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		   IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		   IBV_QP_CAP;
	CHECK(ibv_query_qp(q.qp, &a, mask, &ia) == 0, "ibv_query_qp");
#define EQ(field, want)                                                        \
	CHECK((uint64_t)(a.field) == (uint64_t)(want),                         \
	      "query " #field " = %llu (%#llx), want %llu",                    \
	      (unsigned long long)(a.field), (unsigned long long)(a.field),    \
	      (unsigned long long)(want))
	EQ(qp_state, IBV_QPS_RTS);
	EQ(pkey_index, 0);
	EQ(port_num, 1);
	EQ(qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ);
	EQ(path_mtu, IBV_MTU_1024);
	EQ(dest_qp_num, q.peer->qp_num);
	EQ(rq_psn, 0x11111);
	EQ(sq_psn, 0x22222);
	EQ(max_dest_rd_atomic, drd);
	EQ(max_rd_atomic, ird);
	EQ(min_rnr_timer, 14);
	EQ(timeout, 18);
	EQ(retry_cnt, 6);
	EQ(rnr_retry, 5);
	EQ(ah_attr.is_global, 1);
	EQ(ah_attr.port_num, 1);
	EQ(ah_attr.grh.sgid_index, 0);
	CHECK(!memcmp(&a.ah_attr.grh.dgid, &q.t.gid, 16), "query dgid differs");
	EQ(cap.max_send_wr, q.ia.cap.max_send_wr);
	EQ(cap.max_recv_wr, q.ia.cap.max_recv_wr);
	EQ(cap.max_send_sge, q.ia.cap.max_send_sge);
	EQ(cap.max_recv_sge, q.ia.cap.max_recv_sge);
	EQ(cap.max_inline_data, q.ia.cap.max_inline_data);
#undef EQ
	CHECK(ia.qp_type == IBV_QPT_RC && ia.send_cq == q.cq,
	      "init attr from query");
	qs_close(&q);
}

/* A connected pair taken back to RESET and connected again moves data. */
static void reconnect_after_reset(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	for (int round = 0; round < 2; round++) {
		fill_pattern(b.p, 100, (uint32_t)round);
		post_recv1(p.b.qp, 10 + round, b.p + 1000, 100, b.mr->lkey);
		CHECK(post_send1(p.a.qp, IBV_WR_SEND, 20 + round, b.p, 100,
				 b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "post send");
		expect_wc(p.a.scq, &wc, 20 + round, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "send");
		expect_wc(p.b.rcq, &wc, 10 + round, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "recv");
		check_bytes(b.p + 1000, b.p, 100, "payload");
		if (round)
			break;
		modify_expect(p.a.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET,
			      "a->RESET");
		modify_expect(p.b.qp, &a, IBV_QP_STATE, 0, IBV_QPS_RESET,
			      "b->RESET");
		CHECK(ibv_poll_cq(p.a.scq, 1, &wc) == 0 &&
			      ibv_poll_cq(p.b.rcq, 1, &wc) == 0,
		      "completion left after RESET");
		o.psn_a = 77;
		o.psn_b = 99;
		connect_qps(&t, p.a.qp, p.b.qp, &o);
	}
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(initial_reset),	       SUBTEST(reset_to_init),
	SUBTEST(invalid_transitions),  SUBTEST(init_to_rtr),
	SUBTEST(rtr_to_rts),	       SUBTEST(err_and_reset_from_any),
	SUBTEST(sqd),		       SUBTEST(query_returns_values),
	SUBTEST(sqd_drained),	       SUBTEST(comm_est),
	SUBTEST(reconnect_after_reset),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
