/* Error semantics: local and remote protection errors, length errors,
 * flushing, posting in the wrong state, memory unmapped under an MR. */
#include "common.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct env {
	struct tctx t;
	struct pair p;
	struct buf sa, sb;
};

static void env_open(struct env *e, unsigned int b_access)
{
	struct pair_opts o = pair_opts_default();

	tctx_open(&e->t);
	pair_create(&e->t, &e->p, &o);
	buf_alloc(&e->t, &e->sa, 16384, ACC_ALL);
	buf_alloc(&e->t, &e->sb, 16384, b_access);
}

static void both_in_err(struct env *e)
{
	CHECK(wait_qp_state(e->p.a.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "requester QP state %d, want ERR", qp_state(e->p.a.qp));
	CHECK(wait_qp_state(e->p.b.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "responder QP state %d, want ERR", qp_state(e->p.b.qp));
}

/* A remote write that must be refused, with WRs queued behind it on both
 * sides: the write fails with REM_ACCESS_ERR, nothing lands, both QPs go to
 * ERR and everything else is flushed. */
static void remote_write_refused(struct env *e, uint8_t *target,
				 uint32_t rkey, uint8_t *region, size_t rlen)
{
	struct ibv_wc wc;
	uint8_t *before = malloc(rlen);

	CHECK(before, "malloc");
	fill_pattern(region, rlen, 1234);
	memcpy(before, region, rlen);
	fill_pattern(e->sa.p, 4096, 99);
	post_recv1(e->p.a.qp, 0xa1, e->sa.p + 8192, 64, e->sa.mr->lkey);
	post_recv1(e->p.a.qp, 0xa2, e->sa.p + 8192, 64, e->sa.mr->lkey);
	post_recv1(e->p.b.qp, 0xb1, e->sb.p, 64, e->sb.mr->lkey);
	post_recv1(e->p.b.qp, 0xb2, e->sb.p, 64, e->sb.mr->lkey);
	CHECK(post_send1(e->p.a.qp, IBV_WR_RDMA_WRITE, 1, e->sa.p, 100,
			 e->sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)target,
			 rkey, 0) == 0, "post bad WRITE");
	CHECK(post_send1(e->p.a.qp, IBV_WR_SEND, 2, e->sa.p, 16,
			 e->sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND behind it");
	CHECK(post_send1(e->p.a.qp, IBV_WR_RDMA_WRITE, 3, e->sa.p, 16,
			 e->sa.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)e->sa.p + 4096, e->sa.mr->rkey, 0) == 0,
	      "post WRITE behind it");
	expect_wc(e->p.a.scq, &wc, 1, IBV_WC_REM_ACCESS_ERR, -1,
		  "refused WRITE at the requester");
	CHECK(wc.qp_num == e->p.a.qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(e->p.a.scq, &wc, 2, IBV_WC_WR_FLUSH_ERR, -1,
		  "SEND queued behind the error");
	expect_wc(e->p.a.scq, &wc, 3, IBV_WC_WR_FLUSH_ERR, -1,
		  "WRITE queued behind the error");
	both_in_err(e);
	expect_wc(e->p.a.rcq, &wc, 0xa1, IBV_WC_WR_FLUSH_ERR, -1,
		  "requester receive 1");
	expect_wc(e->p.a.rcq, &wc, 0xa2, IBV_WC_WR_FLUSH_ERR, -1,
		  "requester receive 2");
	expect_wc(e->p.b.rcq, &wc, 0xb1, IBV_WC_WR_FLUSH_ERR, -1,
		  "responder receive 1 (the SEND must not be delivered)");
	CHECK(wc.qp_num == e->p.b.qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(e->p.b.rcq, &wc, 0xb2, IBV_WC_WR_FLUSH_ERR, -1,
		  "responder receive 2");
	check_bytes(region, before, rlen, "target region after refused WRITE");
	/* a receive posted in ERR is flushed (or refused at post) */
	int rc = post_recv1_rc(e->p.b.qp, 0xb3, e->sb.p, 64, e->sb.mr->lkey);
	if (rc == 0)
		expect_wc(e->p.b.rcq, &wc, 0xb3, IBV_WC_WR_FLUSH_ERR, -1,
			  "receive posted in ERR");
	expect_no_wc(e->p.a.scq, 50, "extra requester completion");
	free(before);
}

static void bad_rkey(void)
{
	struct env e;

	env_open(&e, ACC_ALL);
	remote_write_refused(&e, e.sb.p + 100, ~e.sb.mr->rkey, e.sb.p,
			     e.sb.len);
	exit(0);
}

static void out_of_bounds(void)
{
	struct env e;
	struct buf big;

	env_open(&e, ACC_ALL);
	/* map 4 pages, register only the middle two */
	big.p = mmap(NULL, 16384, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(big.p != MAP_FAILED, "mmap");
	big.mr = ibv_reg_mr(e.t.pd, big.p + 4096, 8192, ACC_ALL);
	CHECK(big.mr, "ibv_reg_mr: %s", strerror(errno));
	/* 100 bytes starting 10 bytes before the end of the MR */
	remote_write_refused(&e, big.p + 4096 + 8192 - 10, big.mr->rkey,
			     big.p, 16384);
	exit(0);
}

static void below_start(void)
{
	struct env e;
	struct buf big;

	env_open(&e, ACC_ALL);
	big.p = mmap(NULL, 16384, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(big.p != MAP_FAILED, "mmap");
	big.mr = ibv_reg_mr(e.t.pd, big.p + 4096, 8192, ACC_ALL);
	CHECK(big.mr, "ibv_reg_mr: %s", strerror(errno));
	remote_write_refused(&e, big.p + 4096 - 50, big.mr->rkey, big.p,
			     16384);
	exit(0);
}

static void no_remote_write(void)
{
	struct env e;

	env_open(&e, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	remote_write_refused(&e, e.sb.p + 100, e.sb.mr->rkey, e.sb.p,
			     e.sb.len);
	exit(0);
}

static void no_remote_read(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	fill_pattern(e.sb.p, 4096, 5);
	memset(e.sa.p, 0xee, 4096);
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_READ, 7, e.sa.p, 4096,
			 e.sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)e.sb.p,
			 e.sb.mr->rkey, 0) == 0, "post READ");
	expect_wc(e.p.a.scq, &wc, 7, IBV_WC_REM_ACCESS_ERR, -1,
		  "READ without REMOTE_READ");
	check_filled(e.sa.p, 0xee, 4096, "local buffer after refused READ");
	both_in_err(&e);
	exit(0);
}

static void no_remote_atomic(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ);
	if (e.t.dattr.atomic_cap == IBV_ATOMIC_NONE)
		SKIP("no atomics");
	uint64_t *target = (uint64_t *)e.sb.p;
	*target = 42;
	CHECK(post_atomic(e.p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 8,
			  (uint64_t *)e.sa.p, e.sa.mr->lkey, (uintptr_t)target,
			  e.sb.mr->rkey, 1, 0) == 0, "post FETCH_AND_ADD");
	expect_wc(e.p.a.scq, &wc, 8, IBV_WC_REM_ACCESS_ERR, -1,
		  "atomic without REMOTE_ATOMIC");
	CHECK(*target == 42, "target changed to %llu",
	      (unsigned long long)*target);
	exit(0);
}

static void bad_lkey(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	memset(e.sb.p, 0xee, 4096);
	post_recv1(e.p.b.qp, 0xb1, e.sb.p, 4096, e.sb.mr->lkey);
	CHECK(post_send1(e.p.a.qp, IBV_WR_SEND, 9, e.sa.p, 100,
			 ~e.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND with a bad lkey");
	expect_wc(e.p.a.scq, &wc, 9, IBV_WC_LOC_PROT_ERR, -1,
		  "SEND with a bad lkey");
	CHECK(wait_qp_state(e.p.a.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "requester not in ERR after a local protection error");
	/* the responder must not have received a successful message */
	struct ibv_wc w2;
	if (poll_one(e.p.b.rcq, &w2, 200))
		CHECK(w2.status != IBV_WC_SUCCESS,
		      "responder got a successful receive of %u bytes",
		      w2.byte_len);
	check_filled(e.sb.p, 0xee, 4096, "responder buffer");
	exit(0);
}

static void local_out_of_range(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	/* valid lkey, but the range runs past the end of the MR */
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_WRITE, 10,
			 e.sa.p + e.sa.len - 10, 100, e.sa.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)e.sb.p, e.sb.mr->rkey,
			 0) == 0, "post WRITE");
	expect_wc(e.p.a.scq, &wc, 10, IBV_WC_LOC_PROT_ERR, -1,
		  "local SGE past the end of its MR");
	check_filled(e.sb.p, 0, 4096, "target of a WRITE with a bad source");
	exit(0);
}

static void recv_too_small(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	memset(e.sb.p, 0xee, 4096);
	post_recv1(e.p.b.qp, 0xb1, e.sb.p, 100, e.sb.mr->lkey);
	CHECK(post_send1(e.p.a.qp, IBV_WR_SEND, 11, e.sa.p, 200,
			 e.sa.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	expect_wc(e.p.b.rcq, &wc, 0xb1, IBV_WC_LOC_LEN_ERR, -1,
		  "receive buffer too small (responder)");
	CHECK(wc.qp_num == e.p.b.qp->qp_num, "qp_num %u", wc.qp_num);
	expect_wc(e.p.a.scq, &wc, 11, IBV_WC_REM_INV_REQ_ERR, -1,
		  "receive buffer too small (requester)");
	both_in_err(&e);
	check_filled(e.sb.p + 100, 0xee, 3996, "past the receive buffer");
	exit(0);
}

static void expect_post_refused(struct ibv_qp *qp, struct buf *b,
				const char *state)
{
	struct ibv_sge sge = { (uintptr_t)b->p, 8, b->mr->lkey };
	struct ibv_send_wr wr2 = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr wr1 = wr2, *bad = NULL;

	wr1.wr_id = 1;
	wr1.next = &wr2;
	int rc = ibv_post_send(qp, &wr1, &bad);
	CHECK(rc != 0, "ibv_post_send in %s succeeded", state);
	CHECK(rc > 0, "ibv_post_send in %s returned %d, want a positive errno",
	      state, rc);
	CHECK(bad == &wr1, "bad_wr in %s is %p, want the first WR %p", state,
	      (void *)bad, (void *)&wr1);
}

static void post_wrong_state(void)
{
	struct tctx t;
	struct buf b;
	struct ibv_qp *qp, *peer;
	struct ibv_cq *cq;
	struct ibv_wc wc;

	tctx_open(&t);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	cq = ibv_create_cq(t.ctx, 64, NULL, NULL, 0);
	CHECK(cq, "create cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(t.pd, &ia);
	peer = ibv_create_qp(t.pd, &ia);
	CHECK(qp && peer, "create qp");
	CHECK(qp_state(qp) == IBV_QPS_RESET, "new QP not in RESET");
	expect_post_refused(qp, &b, "RESET");
	qp_to_init(qp, ACC_ALL);
	expect_post_refused(qp, &b, "INIT");
	/* receives may be posted from INIT on (IBTA Vol 1 §10.3.1 QP states) */
	CHECK(post_recv1_rc(qp, 5, b.p, 64, b.mr->lkey) == 0,
	      "ibv_post_recv in INIT");
	qp_to_rtr(&t, qp, peer->qp_num, IBV_MTU_1024, 0, 1);
	expect_post_refused(qp, &b, "RTR");
	expect_no_wc(cq, 100, "refused posts must not complete");
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(peer) == 0,
	      "destroy qp");
	/* destroying a QP does not generate completions */
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "completion after destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	buf_free(&b);
	tctx_close(&t);
}

/* The unmapped page was mapped again (by malloc, or ASan, or the thread
 * library for TLS) before the transfer: it then went to whatever lives
 * there now, as the program asked. The process's memory is no longer
 * trustworthy: skip without exit handlers (LeakSanitizer crashed reading
 * a thread's TLS the WRITE had covered). */
static void skip_remapped(void)
{
	fprintf(stderr, "SKIP: the unmapped page was mapped again meanwhile\n");
	fflush(stderr);
	_exit(EXIT_SKIP);
}

static int still_unmapped(void *p)
{
	unsigned char v;

	return mincore(p, 4096, &v) == -1 && errno == ENOMEM;
}

static void munmapped_target(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	uint8_t *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED, "mmap");
	struct ibv_mr *mr = ibv_reg_mr(e.t.pd, m + 4096, 4096, ACC_ALL);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	CHECK(munmap(m + 4096, 4096) == 0, "munmap");
	fill_pattern(e.sa.p, 256, 3);
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_WRITE, 12, e.sa.p, 256,
			 e.sa.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)m + 4096 + 100, mr->rkey, 0) == 0,
	      "post WRITE");
	CHECK(poll_one(e.p.a.scq, &wc, DEADLINE_MS),
	      "no completion for a WRITE into unmapped memory");
	if (!still_unmapped(m + 4096))
		skip_remapped();
	CHECK(wc.wr_id == 12 && (wc.status == IBV_WC_REM_ACCESS_ERR ||
				 wc.status == IBV_WC_LOC_PROT_ERR),
	      "WRITE into unmapped memory: wr_id %llu status %s, want REM_ACCESS_ERR or LOC_PROT_ERR",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	/* the neighbours are intact and the process is alive */
	check_filled(m, 0, 4096, "page before");
	check_filled(m + 8192, 0, 4096, "page after");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg of an MR over unmapped memory");
	exit(0);
}

static void munmapped_source(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	uint8_t *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED, "mmap");
	struct ibv_mr *mr = ibv_reg_mr(e.t.pd, m + 4096, 4096, ACC_ALL);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	CHECK(munmap(m + 4096, 4096) == 0, "munmap");
	memset(e.sb.p, 0xee, 4096);
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_WRITE, 13, m + 4096, 256,
			 mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)e.sb.p,
			 e.sb.mr->rkey, 0) == 0, "post WRITE");
	CHECK(poll_one(e.p.a.scq, &wc, DEADLINE_MS),
	      "no completion for a WRITE from unmapped memory");
	if (!still_unmapped(m + 4096))
		skip_remapped();
	CHECK(wc.wr_id == 13 && (wc.status == IBV_WC_LOC_PROT_ERR ||
				 wc.status == IBV_WC_REM_ACCESS_ERR),
	      "WRITE from unmapped memory: wr_id %llu status %s, want LOC_PROT_ERR (or REM_ACCESS_ERR)",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	usleep(50000);
	check_filled(e.sb.p, 0xee, 4096, "target of a WRITE from unmapped memory");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg of an MR over unmapped memory");
	exit(0);
}

/* Requests beyond the QP's capabilities are refused at post time, with
 * bad_wr pointing at the offending WR and nothing queued. */
static void post_beyond_caps(void)
{
	struct env e;
	struct ibv_wc wc;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	env_open(&e, ACC_ALL);
	CHECK(ibv_query_qp(e.p.a.qp, &a, IBV_QP_CAP, &ia) == 0, "query");
	uint32_t nsge = a.cap.max_send_sge + 1, nrsge = a.cap.max_recv_sge + 1;
	struct ibv_sge *sg = calloc(nsge + nrsge, sizeof(*sg));
	CHECK(sg, "calloc");
	for (uint32_t i = 0; i < nsge + nrsge; i++)
		sg[i] = (struct ibv_sge){ (uintptr_t)e.sa.p + i * 16, 16,
					  e.sa.mr->lkey };
	struct ibv_send_wr ok = { .wr_id = 1, .sg_list = sg, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	ok.wr.rdma.remote_addr = (uintptr_t)e.sb.p;
	ok.wr.rdma.rkey = e.sb.mr->rkey;
	struct ibv_send_wr big = ok, *bad = NULL;
	big.wr_id = 2;
	big.num_sge = (int)nsge;
	ok.next = &big;
	int rc = ibv_post_send(e.p.a.qp, &ok, &bad);
	CHECK(rc != 0, "post with %u SGEs (max_send_sge %u) succeeded", nsge,
	      a.cap.max_send_sge);
	CHECK(bad == &big, "bad_wr %p, want the second WR %p", (void *)bad,
	      (void *)&big);
	/* the first WR of the list was posted */
	expect_wc(e.p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "WR before the refused one");
	expect_no_wc(e.p.a.scq, 50, "refused WR");

	struct ibv_recv_wr rw = { .wr_id = 3, .sg_list = sg,
				  .num_sge = (int)nrsge }, *rbad = NULL;
	rc = ibv_post_recv(e.p.b.qp, &rw, &rbad);
	CHECK(rc != 0 && rbad == &rw,
	      "post_recv with %u SGEs (max %u): rc %d bad %p", nrsge,
	      a.cap.max_recv_sge, rc, (void *)rbad);

	/* inline beyond max_inline_data */
	uint32_t il = a.cap.max_inline_data + 1;
	uint8_t *ibuf = calloc(1, il);
	CHECK(ibuf, "calloc");
	rc = post_send1(e.p.a.qp, IBV_WR_SEND, 4, ibuf, il, 0,
			IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0);
	CHECK(rc != 0, "inline SEND of %u bytes (max_inline_data %u) accepted",
	      il, a.cap.max_inline_data);

	/* receive queue overflow: max_recv_wr receives fit, one more not */
	CHECK(ibv_query_qp(e.p.b.qp, &a, IBV_QP_CAP, &ia) == 0, "query");
	for (uint32_t i = 0; i < a.cap.max_recv_wr; i++)
		CHECK(post_recv1_rc(e.p.b.qp, 100 + i, e.sb.p, 64,
				    e.sb.mr->lkey) == 0,
		      "receive %u of max_recv_wr %u refused", i,
		      a.cap.max_recv_wr);
	rc = post_recv1_rc(e.p.b.qp, 99, e.sb.p, 64, e.sb.mr->lkey);
	CHECK(rc == ENOMEM, "receive beyond max_recv_wr %u: rc %d, want ENOMEM",
	      a.cap.max_recv_wr, rc);
	/* the QPs still work */
	CHECK(post_send1(e.p.a.qp, IBV_WR_SEND, 5, e.sa.p, 10, e.sa.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "send");
	expect_wc(e.p.a.scq, &wc, 5, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(e.p.b.rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	free(sg);
	free(ibuf);
	exit(0);
}

/* Send flags: IBV_SEND_IP_CSUM (no checksum offload is reported) and
 * the bits softrnic keeps for itself are EINVAL at post, bad_wr the WR;
 * an undefined bit is ignored, as hardware providers do; the QP goes on.
 * ibv_bind_mw refuses them too. */
static void refused_flags(void)
{
	static const unsigned int refused[] = { IBV_SEND_IP_CSUM, 1U << 30, 1U << 31 };
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		struct ibv_sge sg = { (uintptr_t)e.sa.p, 8, e.sa.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 10 + i, .sg_list = &sg, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED | refused[i] }, *bad = NULL;

		wr.wr.rdma.remote_addr = (uintptr_t)e.sb.p;
		wr.wr.rdma.rkey = e.sb.mr->rkey;
		CHECK(ibv_post_send(e.p.a.qp, &wr, &bad) == EINVAL && bad == &wr,
		      "send_flags %#x: not EINVAL with bad_wr set", refused[i]);
	}
	expect_no_wc(e.p.a.scq, 50, "refused WRs");
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_WRITE, 20, e.sa.p, 8, e.sa.mr->lkey,
			 IBV_SEND_SIGNALED | (1U << 20), (uintptr_t)e.sb.p, e.sb.mr->rkey, 0) == 0,
	      "an undefined send flag refused");
	expect_wc(e.p.a.scq, &wc, 20, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "undefined flag ignored");

	struct ibv_mw *mw = ibv_alloc_mw(e.t.pd, IBV_MW_TYPE_1);

	if (mw) {
		struct ibv_mw_bind b = { .wr_id = 21, .send_flags = IBV_SEND_IP_CSUM,
					 .bind_info = { .mr = e.sb.mr, .addr = (uintptr_t)e.sb.p,
							.length = 64,
							.mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };

		CHECK(ibv_bind_mw(e.p.a.qp, mw, &b) == EINVAL, "ibv_bind_mw with IP_CSUM not EINVAL");
		ibv_dealloc_mw(mw);
	}
	exit(0);
}

/* The responder of a refused remote access reports an affiliated async
 * event: IBV_EVENT_QP_ACCESS_ERR (ibv_get_async_event(3): "Local access
 * violation error"; IBTA Local Access Violation Work Queue Error). */
static void responder_access_event(void)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, ACC_ALL);
	CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_WRITE, 1, e.sa.p, 8,
			 e.sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)e.sb.p,
			 ~e.sb.mr->rkey, 0) == 0, "post WRITE");
	expect_wc(e.p.a.scq, &wc, 1, IBV_WC_REM_ACCESS_ERR, -1, "bad rkey");
	CHECK(wait_async_event(e.t.ctx, e.p.b.qp, IBV_EVENT_QP_ACCESS_ERR, DEADLINE_MS),
	      "no IBV_EVENT_QP_ACCESS_ERR for the responder QP within %d ms", DEADLINE_MS);
	exit(0);
}

/* A responder without responder resources (max_dest_rd_atomic 0) takes
 * no READ or atomic: the requester gets REM_INV_REQ_ERR, its buffer and
 * the target are untouched, the responder gets IBV_EVENT_QP_REQ_ERR, and
 * both QPs go to ERROR. Once connected with one, the same READ works. */
static void no_responder_resources(void)
{
	struct env e;
	struct pair_opts o = pair_opts_default();
	struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
	struct ibv_wc wc;
	bool atomics;

	env_open(&e, ACC_ALL);
	atomics = e.t.dattr.atomic_cap != IBV_ATOMIC_NONE;
	for (int op = 0; op < (atomics ? 2 : 1); op++) {
		for (int rd = 0; rd < 2; rd++) {
			uint64_t *target = (uint64_t *)e.sb.p;

			CHECK(ibv_modify_qp(e.p.a.qp, &reset, IBV_QP_STATE) == 0 &&
			      ibv_modify_qp(e.p.b.qp, &reset, IBV_QP_STATE) == 0, "RESET");
			qp_to_init(e.p.a.qp, o.access);
			qp_to_init(e.p.b.qp, o.access);
			qp_to_rtr(&e.t, e.p.a.qp, e.p.b.qp->qp_num, o.mtu, o.psn_b, 1);
			qp_to_rtr(&e.t, e.p.b.qp, e.p.a.qp->qp_num, o.mtu, o.psn_a, (uint8_t)rd);
			qp_to_rts(e.p.a.qp, o.psn_a, 1);
			qp_to_rts(e.p.b.qp, o.psn_b, 1);
			fill_pattern(e.sb.p, 64, 9);
			memset(e.sa.p, 0xee, 64);
			if (op == 0)
				CHECK(post_send1(e.p.a.qp, IBV_WR_RDMA_READ, 3, e.sa.p, 64,
						 e.sa.mr->lkey, IBV_SEND_SIGNALED, (uintptr_t)e.sb.p,
						 e.sb.mr->rkey, 0) == 0, "post READ");
			else
				CHECK(post_atomic(e.p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 3,
						  (uint64_t *)e.sa.p, e.sa.mr->lkey, (uintptr_t)target,
						  e.sb.mr->rkey, 1, 0) == 0, "post FETCH_AND_ADD");
			if (rd) {
				uint8_t want[64];

				expect_wc(e.p.a.scq, &wc, 3, IBV_WC_SUCCESS, -1,
					  "with a responder resource");
				fill_pattern(want, 64, 9);
				if (op == 0)
					check_bytes(e.sa.p, want, 64, "READ");
				continue;
			}
			expect_wc(e.p.a.scq, &wc, 3, IBV_WC_REM_INV_REQ_ERR, -1,
				  "without responder resources");
			check_filled(e.sa.p, 0xee, op == 0 ? 64 : 8, "local buffer after the refusal");
			if (op == 1) {
				uint8_t want[64];

				fill_pattern(want, 64, 9);
				check_bytes(e.sb.p, want, 64, "atomic target after the refusal");
			}
			CHECK(wait_async_event(e.t.ctx, e.p.b.qp, IBV_EVENT_QP_REQ_ERR, DEADLINE_MS),
			      "no IBV_EVENT_QP_REQ_ERR for the responder");
			both_in_err(&e);
		}
	}
	exit(0);
}

static struct ibv_qp *rc_qp(struct tctx *t, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(t->pd, &ia);

	CHECK(qp, "create_qp: %s", strerror(errno));
	return qp;
}

/* A context, a 4 KiB buffer, a CQ and an RC QP on it in INIT: no_peer's
 * and no_peer_dial's start. */
static struct ibv_qp *alone_qp(struct tctx *t, struct buf *b, struct ibv_cq **cq)
{
	struct ibv_qp *qp;

	tctx_open(t);
	buf_alloc(t, b, 4096, ACC_ALL);
	*cq = ibv_create_cq(t->ctx, 16, NULL, NULL, 0);
	CHECK(*cq, "create_cq");
	qp = rc_qp(t, *cq);
	qp_to_init(qp, ACC_ALL);
	return qp;
}

/* no_peer's and no_peer_dial's end: two SENDs posted on qp (in RTS, its
 * peer absent); the first fails with IBV_WC_RETRY_EXC_ERR a second or
 * more later, the next is flushed, the QP is in ERROR. Then all goes. */
static void sends_fail_unanswered(struct tctx *t, struct buf *b, struct ibv_cq *cq,
				  struct ibv_qp *qp, const char *what)
{
	struct ibv_wc wc;
	uint64_t t0;

	CHECK(post_send1(qp, IBV_WR_SEND, 1, b->p, 64, b->mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	CHECK(post_send1(qp, IBV_WR_SEND, 2, b->p, 64, b->mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	t0 = now_ms();
	expect_wc(cq, &wc, 1, IBV_WC_RETRY_EXC_ERR, -1, what);
	CHECK(now_ms() - t0 >= 900, "%s: failed after %llu ms, before the second a dial may take",
	      what, (unsigned long long)(now_ms() - t0));
	expect_wc(cq, &wc, 2, IBV_WC_WR_FLUSH_ERR, -1, "the SEND behind it");
	CHECK(wait_qp_state(qp, IBV_QPS_ERR, DEADLINE_MS), "QP state %d, want ERR", qp_state(qp));
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	buf_free(b);
	tctx_close(t);
}

/* SENDs posted on an RC QP whose peer never comes (connected by hand to a
 * QPN larger than its own, which would dial it; nobody has that QPN):
 * the first fails with IBV_WC_RETRY_EXC_ERR once the transport's retries
 * would have run out (and a second has passed, for the dial), as towards
 * a peer QP that never reached RTR on IB, the next is flushed. Before,
 * they waited for ever. */
static void no_peer(void)
{
	struct tctx t;
	struct buf b;
	struct ibv_cq *cq;
	struct ibv_qp *qp = alone_qp(&t, &b, &cq);
	qp_to_init(qp, ACC_ALL);
	qp_to_rtr(&t, qp, qp->qp_num + 1, IBV_MTU_1024, 0, 1);
	qp_to_rts(qp, 0, 1);
	sends_fail_unanswered(&t, &b, cq, qp, "SEND towards a peer that never came");
}

/* The same where we dial (connected by hand to a QPN below ours, at an
 * address where nobody listens: 127.0.0.1, the port of QPN 0x100): each
 * dial is refused, and the SENDs fail as in no_peer, after the same
 * second, not after the 60 s a dial may wait for its peer to come up. */
static void no_peer_dial(void)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = 0x100,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = 1,
			.grh = { .hop_limit = 64 },
		},
	};
	struct tctx t;
	struct buf b;
	struct ibv_cq *cq;
	struct ibv_qp *qp = alone_qp(&t, &b, &cq);

	CHECK(qp->qp_num > 0x100, "QPN %#x: we would not dial", qp->qp_num);
	/* ::ffff:127.0.0.1 */
	a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 127;
	a.ah_attr.grh.dgid.raw[15] = 1;
	CHECK(ibv_modify_qp(qp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0,
	      "modify INIT->RTR");
	qp_to_rts(qp, 0, 1);
	sends_fail_unanswered(&t, &b, cq, qp, "SEND towards a peer nobody listens for");
}

/* The same on UC, which has no retries and no answers: after a second
 * with no peer, the SENDs complete (as sent and lost, as on IB towards a
 * QP that is not there) and the QP stays in RTS. Before, they waited for
 * ever. */
static void no_peer_uc(void)
{
	struct ibv_qp_init_attr ia = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_UC };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	struct tctx t;
	struct buf b;
	struct ibv_wc wc;
	struct ibv_qp *qp;
	uint64_t t0;

	tctx_open(&t);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	ia.send_cq = ia.recv_cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(ia.send_cq, "create_cq");
	qp = ibv_create_qp(t.pd, &ia);
	CHECK(qp, "create_qp: %s", strerror(errno));
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS) == 0, "UC to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num + 1;
	a.ah_attr = (struct ibv_ah_attr){ .is_global = 1, .port_num = 1,
					  .grh = { .dgid = t.gid, .hop_limit = 64 } };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) == 0, "UC to RTR");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UC to RTS");
	for (uint64_t id = 1; id <= 2; id++)
		CHECK(post_send1(qp, IBV_WR_SEND, id, b.p, 64, b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
				 0) == 0, "post UC SEND");
	t0 = now_ms();
	expect_wc(ia.send_cq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "UC SEND towards nobody");
	CHECK(now_ms() - t0 >= 900, "completed after %llu ms, before the second a dial may take",
	      (unsigned long long)(now_ms() - t0));
	expect_wc(ia.send_cq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "the UC SEND behind it");
	CHECK(qp_state(qp) == IBV_QPS_RTS, "UC QP state %d, want RTS", qp_state(qp));
	ibv_destroy_qp(qp);
	ibv_destroy_cq(ia.send_cq);
	buf_free(&b);
	tctx_close(&t);
}

/* A SEND posted on an RC QP in RTS whose peer, a QP of this process,
 * reaches RTR 5 ms later (within the transport's retries): it goes when
 * the two link, and arrives. Before, the in-process link left it in the
 * send queue for ever. */
static void late_peer(void)
{
	struct tctx t;
	struct buf b;
	struct ibv_wc wc;
	struct ibv_cq *cq, *cq2;
	struct ibv_qp *qp, *late;

	tctx_open(&t);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	cq2 = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(cq2, "create_cq");
	qp = rc_qp(&t, cq);
	late = rc_qp(&t, cq2);
	CHECK(late->qp_num == qp->qp_num + 1, "QPNs %#x, %#x: not in a row", qp->qp_num,
	      late->qp_num);
	qp_to_init(qp, ACC_ALL);
	qp_to_init(late, ACC_ALL);
	post_recv1(late, 3, b.p + 1024, 64, b.mr->lkey);
	qp_to_rtr(&t, qp, late->qp_num, IBV_MTU_1024, 0, 1);
	qp_to_rts(qp, 0, 1);
	fill_pattern(b.p, 64, 17);
	CHECK(post_send1(qp, IBV_WR_SEND, 4, b.p, 64, b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	usleep(5000);
	qp_to_rtr(&t, late, qp->qp_num, IBV_MTU_1024, 0, 1);
	qp_to_rts(late, 0, 1);
	expect_wc(cq, &wc, 4, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND to a peer 5 ms late");
	expect_wc(cq2, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RECV, "its receive");
	check_bytes(b.p + 1024, b.p, 64, "the late peer's bytes");
	ibv_destroy_qp(late);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq2);
	ibv_destroy_cq(cq);
	buf_free(&b);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(bad_lkey),	    SUBTEST(local_out_of_range),
	SUBTEST(bad_rkey),	    SUBTEST(out_of_bounds),
	SUBTEST(below_start),	    SUBTEST(no_remote_write),
	SUBTEST(no_remote_read),    SUBTEST(no_remote_atomic),
	SUBTEST(recv_too_small),    SUBTEST(post_wrong_state),
	SUBTEST(munmapped_target),  SUBTEST(munmapped_source),
	SUBTEST(post_beyond_caps),  SUBTEST(responder_access_event),
	SUBTEST(refused_flags),	    SUBTEST(no_responder_resources),
	SUBTEST(no_peer),	    SUBTEST(no_peer_uc),
	SUBTEST(late_peer),	    SUBTEST(no_peer_dial),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
