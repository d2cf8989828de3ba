/* Object lifetimes and resource verbs: PD/MR/CQ/SRQ/completion channel,
 * rereg, ODP, extended CQs, CQ events, SRQ limit events. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>

static void simple_pair(struct tctx *t, struct pair *p)
{
	struct pair_opts o = pair_opts_default();

	tctx_open(t);
	pair_create(t, p, &o);
}

/* WRITE len bytes from src to raddr/rkey, then a SEND so b knows it is
 * placed; returns the requester status of the WRITE. */
static enum ibv_wc_status write_sync(struct pair *p, void *src, uint32_t len,
				     uint32_t lkey, uint64_t raddr,
				     uint32_t rkey)
{
	struct ibv_wc wc;

	CHECK(post_send1(p->a.qp, IBV_WR_RDMA_WRITE, 0x77, src, len, lkey,
			 IBV_SEND_SIGNALED, raddr, rkey, 0) == 0, "post WRITE");
	CHECK(poll_one(p->a.scq, &wc, DEADLINE_MS), "no WRITE completion");
	CHECK(wc.wr_id == 0x77, "wr_id %llu", (unsigned long long)wc.wr_id);
	if (wc.status != IBV_WC_SUCCESS)
		return wc.status;
	post_recv1(p->b.qp, 0x78, NULL, 0, 0);
	CHECK(post_send1(p->a.qp, IBV_WR_SEND, 0x79, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p->a.scq, &wc, 0x79, IBV_WC_SUCCESS, IBV_WC_SEND, "sync send");
	expect_wc(p->b.rcq, &wc, 0x78, IBV_WC_SUCCESS, IBV_WC_RECV, "sync recv");
	return IBV_WC_SUCCESS;
}

static void pd_busy(void)
{
	struct tctx t;
	struct buf b, b2;

	tctx_open(&t);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	int rc = ibv_dealloc_pd(t.pd);
	CHECK(rc == EBUSY, "ibv_dealloc_pd with an MR returned %d (%s), want EBUSY",
	      rc, strerror(rc));
	buf_alloc(&t, &b2, 4096, ACC_ALL); /* the PD still works */
	struct ibv_cq *cq = ibv_create_cq(t.ctx, 8, NULL, NULL, 0);
	CHECK(cq, "create cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(t.pd, &ia);
	CHECK(qp, "ibv_create_qp on the PD after a refused dealloc");
	buf_free(&b);
	buf_free(&b2);
	rc = ibv_dealloc_pd(t.pd);
	CHECK(rc == EBUSY, "ibv_dealloc_pd with a QP returned %d, want EBUSY",
	      rc);
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	tctx_close(&t); /* deallocs the PD: must now succeed */
}

static void cq_busy(void)
{
	struct tctx t;
	struct pair p;

	simple_pair(&t, &p);
	int rc = ibv_destroy_cq(p.a.scq);
	CHECK(rc == EBUSY, "ibv_destroy_cq in use returned %d (%s), want EBUSY",
	      rc, strerror(rc));
	/* still usable */
	struct buf b;
	struct ibv_wc wc;
	buf_alloc(&t, &b, 4096, ACC_ALL);
	CHECK(post_send1(p.a.qp, IBV_WR_RDMA_WRITE, 5, b.p, 8, b.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)b.p + 64, b.mr->rkey,
			 0) == 0, "post");
	expect_wc(p.a.scq, &wc, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "CQ after refused destroy");
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static void channel_busy(void)
{
	struct tctx t;

	tctx_open(&t);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(t.ctx);
	CHECK(ch, "create channel");
	CHECK(ch->context == t.ctx && ch->fd >= 0, "channel fields");
	struct ibv_cq *cq = ibv_create_cq(t.ctx, 8, NULL, ch, 0);
	CHECK(cq && cq->channel == ch, "create cq on channel");
	int rc = ibv_destroy_comp_channel(ch);
	CHECK(rc == EBUSY, "ibv_destroy_comp_channel with a CQ returned %d (%s), want EBUSY",
	      rc, strerror(rc));
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	tctx_close(&t);
}

static void srq_busy(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();

	tctx_open(&t);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(t.pd, &sa);
	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	o.srq_b = srq;
	pair_create(&t, &p, &o);
	int rc = ibv_destroy_srq(srq);
	CHECK(rc == EBUSY, "ibv_destroy_srq with a QP returned %d (%s), want EBUSY",
	      rc, strerror(rc));
	pair_destroy(&p);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	tctx_close(&t);
}

static void mr_keys(void)
{
	struct tctx t;
	struct buf b[16];
	int sequential = 1, big = 0;

	tctx_open(&t);
	for (int i = 0; i < 16; i++)
		buf_alloc(&t, &b[i], 4096, ACC_ALL);
	for (int i = 0; i < 16; i++) {
		for (int j = 0; j < i; j++) {
			CHECK(b[i].mr->lkey != b[j].mr->lkey,
			      "two MRs share lkey %#x", b[i].mr->lkey);
			CHECK(b[i].mr->rkey != b[j].mr->rkey,
			      "two MRs share rkey %#x", b[i].mr->rkey);
		}
		if (b[i].mr->rkey > 0xfffff)
			big = 1;
		if (i >= 2 && b[i].mr->rkey - b[i - 1].mr->rkey !=
				      b[1].mr->rkey - b[0].mr->rkey)
			sequential = 0;
	}
	CHECK(!sequential && big,
	      "rkeys look like small sequential numbers (%#x, %#x, %#x, ...)",
	      b[0].mr->rkey, b[1].mr->rkey, b[2].mr->rkey);
	/* a deregistered key is not handed out again at once */
	uint32_t old = b[0].mr->rkey;
	buf_free(&b[0]);
	buf_alloc(&t, &b[0], 4096, ACC_ALL);
	CHECK(b[0].mr->rkey != old, "rkey %#x reused right after dereg", old);
	for (int i = 0; i < 16; i++)
		buf_free(&b[i]);
	tctx_close(&t);
}

static void reg_mr_access(void)
{
	struct tctx t;
	static uint8_t mem[8192];
	const int bad[] = { IBV_ACCESS_REMOTE_WRITE,
			    IBV_ACCESS_REMOTE_ATOMIC,
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };

	tctx_open(&t);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(t.pd, mem, sizeof(mem), bad[i]);
		CHECK(!mr && errno == EINVAL,
		      "ibv_reg_mr(access %#x without LOCAL_WRITE): mr %p errno %d, want NULL/EINVAL",
		      bad[i], (void *)mr, errno);
	}
	struct ibv_mr *mr = ibv_reg_mr(t.pd, mem, sizeof(mem),
				       IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "REMOTE_READ alone is allowed: %s", strerror(errno));
	CHECK(mr->length == sizeof(mem) && mr->addr == mem &&
		      mr->context == t.ctx,
	      "mr fields");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	tctx_close(&t);
}

static void rereg_mr(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, b1, b2;

	simple_pair(&t, &p);
	buf_alloc(&t, &src, 4096, ACC_ALL);
	buf_alloc(&t, &b1, 4096, IBV_ACCESS_LOCAL_WRITE);
	b2 = b1;
	b2.p = aligned_alloc(4096, 8192);
	CHECK(b2.p, "alloc");
	memset(b2.p, 0, 8192);
	fill_pattern(src.p, 4096, 1);

	int rc = ibv_rereg_mr(b1.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      ACC_ALL);
	CHECK(rc == 0, "rereg CHANGE_ACCESS returned %d", rc);
	CHECK(write_sync(&p, src.p, 256, src.mr->lkey, (uintptr_t)b1.p + 8,
			 b1.mr->rkey) == IBV_WC_SUCCESS,
	      "WRITE after rereg added REMOTE_WRITE failed");
	check_bytes(b1.p + 8, src.p, 256, "WRITE into the rereg'd MR");

	memset(b1.p, 0, 4096);
	rc = ibv_rereg_mr(b1.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2.p,
			  8192, 0);
	CHECK(rc == 0, "rereg CHANGE_TRANSLATION returned %d", rc);
	CHECK(b1.mr->addr == b2.p && b1.mr->length == 8192,
	      "mr addr/length not updated: %p %zu", b1.mr->addr,
	      b1.mr->length);
	CHECK(write_sync(&p, src.p, 4096, src.mr->lkey, (uintptr_t)b2.p + 4000,
			 b1.mr->rkey) == IBV_WC_SUCCESS,
	      "WRITE into the new translation failed");
	check_bytes(b2.p + 4000, src.p, 4096, "WRITE into new translation");
	check_filled(b1.p, 0, 4096, "old translation");

	/* moved to another PD: the QP's PD no longer matches */
	struct ibv_pd *pd2 = ibv_alloc_pd(t.ctx);
	CHECK(pd2, "alloc pd");
	rc = ibv_rereg_mr(b1.mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
	CHECK(rc == 0, "rereg CHANGE_PD returned %d", rc);
	CHECK(b1.mr->pd == pd2, "mr->pd not updated");
	memset(b2.p, 0, 8192);
	enum ibv_wc_status st = write_sync(&p, src.p, 64, src.mr->lkey,
					   (uintptr_t)b2.p, b1.mr->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR,
	      "WRITE to an MR of another PD: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	check_filled(b2.p, 0, 8192, "MR of another PD");
	exit(0);
}

/* SEND n bytes at src through lkey into b's buffer; the requester's
 * status (the receive is checked only on success). */
static enum ibv_wc_status send_sync(struct pair *p, void *src, uint32_t n, uint32_t lkey,
				    struct buf *dst, uint64_t id)
{
	struct ibv_wc wc;

	post_recv1(p->b.qp, id, dst->p, (uint32_t)dst->len, dst->mr->lkey);
	CHECK(post_send1(p->a.qp, IBV_WR_SEND, id, src, n, lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	CHECK(poll_one(p->a.scq, &wc, DEADLINE_MS), "no SEND completion");
	CHECK(wc.wr_id == id, "wr_id %llu", (unsigned long long)wc.wr_id);
	if (wc.status == IBV_WC_SUCCESS) {
		expect_wc(p->b.rcq, &wc, id, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
		CHECK(wc.byte_len == n, "byte_len %u, want %u", wc.byte_len, n);
	}
	return wc.status;
}

/* A QP remembers the last lkey it gathered through (no lock, no
 * reference on the next SEND from it): a re-registration or a
 * deregistration in between must be seen all the same. */
static void lkey_changes(void)
{
	struct tctx t;
	struct pair p;
	struct buf a, dst;
	uint8_t *moved = aligned_alloc(4096, 8192);
	enum ibv_wc_status st;

	CHECK(moved, "alloc");
	simple_pair(&t, &p);
	buf_alloc(&t, &a, 4096, ACC_ALL);
	buf_alloc(&t, &dst, 4096, ACC_ALL);
	fill_pattern(a.p, 4096, 11);
	fill_pattern(moved, 8192, 12);
	CHECK(send_sync(&p, a.p, 512, a.mr->lkey, &dst, 1) == IBV_WC_SUCCESS, "first SEND");
	check_bytes(dst.p, a.p, 512, "SEND from a");
	CHECK(send_sync(&p, a.p + 1024, 512, a.mr->lkey, &dst, 2) == IBV_WC_SUCCESS,
	      "second SEND (the remembered key)");
	check_bytes(dst.p, a.p + 1024, 512, "second SEND from a");
	/* the same key, another translation: the new bytes, from the new
	 * range (past the old one's end) */
	CHECK(ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, 8192, ACC_ALL) == 0,
	      "rereg CHANGE_TRANSLATION");
	CHECK(send_sync(&p, moved + 6000, 512, a.mr->lkey, &dst, 3) == IBV_WC_SUCCESS,
	      "SEND from the new translation");
	check_bytes(dst.p, moved + 6000, 512, "SEND after rereg");
	/* deregistered: the key is dead, however recently used */
	uint32_t dead = a.mr->lkey;

	CHECK(send_sync(&p, moved, 64, dead, &dst, 4) == IBV_WC_SUCCESS, "SEND before dereg");
	CHECK(ibv_dereg_mr(a.mr) == 0, "dereg");
	a.mr = NULL;
	st = send_sync(&p, moved, 64, dead, &dst, 5);
	CHECK(st == IBV_WC_LOC_PROT_ERR, "SEND through a deregistered lkey: %s, want LOC_PROT_ERR",
	      ibv_wc_status_str(st));
	exit(0);
}

/* ... and the last lkey it received into (no lock, no reference on the
 * next receive through it): a receive after a re-registration lands in
 * the new translation, one through a deregistered key fails and writes
 * nothing, however recently the key was used. */
static void recv_lkey_changes(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, d;
	uint8_t *moved = aligned_alloc(4096, 8192), *old;
	struct ibv_wc wc;
	uint32_t dead;

	CHECK(moved, "alloc");
	simple_pair(&t, &p);
	buf_alloc(&t, &src, 4096, ACC_ALL);
	buf_alloc(&t, &d, 4096, ACC_ALL);
	fill_pattern(src.p, 4096, 21);
	old = d.p;
	for (uint64_t id = 1; id <= 2; id++) {
		memset(d.p, 0, 4096);
		CHECK(send_sync(&p, src.p + id * 100, 300, src.mr->lkey, &d, id) == IBV_WC_SUCCESS,
		      "SEND %llu", (unsigned long long)id);
		check_bytes(d.p, src.p + id * 100, 300, "received (the remembered key)");
	}
	/* the same key, another translation */
	memset(old, 0xee, 4096);
	memset(moved, 0xdd, 8192);
	CHECK(ibv_rereg_mr(d.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, 8192, ACC_ALL) == 0,
	      "rereg CHANGE_TRANSLATION");
	post_recv1(p.b.qp, 3, moved + 5000, 1000, d.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 3, src.p, 300, src.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post SEND");
	expect_wc(p.a.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND after rereg");
	expect_wc(p.b.rcq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RECV, "receive after rereg");
	check_bytes(moved + 5000, src.p, 300, "received into the new translation");
	check_filled(moved, 0xdd, 5000, "the new translation before the receive");
	check_filled(old, 0xee, 4096, "the old translation");
	/* deregistered: nothing is written through the dead key */
	dead = d.mr->lkey;
	CHECK(ibv_dereg_mr(d.mr) == 0, "dereg");
	d.mr = NULL;
	memset(moved, 0xdd, 8192);
	post_recv1(p.b.qp, 4, moved, 1000, dead);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 4, src.p, 300, src.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post SEND");
	CHECK(poll_one(p.b.rcq, &wc, DEADLINE_MS), "no receive completion");
	CHECK(wc.wr_id == 4 && wc.status == IBV_WC_LOC_PROT_ERR,
	      "receive through a deregistered lkey: wr_id %llu %s, want LOC_PROT_ERR",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	check_filled(moved, 0xdd, 8192, "memory behind a deregistered lkey");
	check_filled(old, 0xee, 4096, "the old translation");
	exit(0);
}

/* A re-registration that takes the local write right away: the next
 * receive through the remembered key fails and writes nothing. */
static void recv_access_change(void)
{
	struct tctx t;
	struct pair p;
	struct buf src, d;
	struct ibv_wc wc;

	simple_pair(&t, &p);
	buf_alloc(&t, &src, 4096, ACC_ALL);
	buf_alloc(&t, &d, 4096, ACC_ALL);
	fill_pattern(src.p, 4096, 22);
	CHECK(send_sync(&p, src.p, 300, src.mr->lkey, &d, 1) == IBV_WC_SUCCESS, "SEND");
	check_bytes(d.p, src.p, 300, "received");
	CHECK(ibv_rereg_mr(d.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) == 0,
	      "rereg CHANGE_ACCESS to none");
	memset(d.p, 0xdd, 4096);
	post_recv1(p.b.qp, 2, d.p, 1000, d.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, src.p, 300, src.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post SEND");
	CHECK(poll_one(p.b.rcq, &wc, DEADLINE_MS), "no receive completion");
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_LOC_PROT_ERR,
	      "receive into a region without local write: wr_id %llu %s, want LOC_PROT_ERR",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	check_filled(d.p, 0xdd, 4096, "a region without local write");
	exit(0);
}

/* An async event taken by one thread while another destroys its QP: the
 * destroy either drops the event (not yet taken) or waits for its
 * acknowledgement (taken), never frees the QP between the two (ASan saw
 * UCX's async thread acknowledge an event of a freed QP). Each QP is on
 * an SRQ, so moving it to ERR raises IBV_EVENT_QP_LAST_WQE_REACHED. */
static struct tctx race_t;
static _Atomic bool race_stop;

static void *race_events(void *arg)
{
	struct pollfd pf = { race_t.ctx->async_fd, POLLIN, 0 };

	(void)arg;
	while (!atomic_load(&race_stop)) {
		struct ibv_async_event ev;

		if (poll(&pf, 1, 10) != 1)
			continue;
		if (ibv_get_async_event(race_t.ctx, &ev) == 0)
			ibv_ack_async_event(&ev);
	}
	return NULL;
}

static void async_destroy_race(void)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	pthread_t th;
	int flags;

	tctx_open(&race_t);
	flags = fcntl(race_t.ctx->async_fd, F_GETFL);
	CHECK(flags >= 0 && fcntl(race_t.ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0,
	      "async fd non-blocking");
	cq = ibv_create_cq(race_t.ctx, 16, NULL, NULL, 0);
	srq = ibv_create_srq(race_t.pd, &sa);
	CHECK(cq && srq, "cq, srq");
	CHECK(pthread_create(&th, NULL, race_events, NULL) == 0, "thread");
	for (int i = 0; i < 2000; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_send_sge = 1 },
		};
		struct ibv_qp *qp = ibv_create_qp(race_t.pd, &ia);

		CHECK(qp, "create qp %d: %s", i, strerror(errno));
		CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "to ERR");
		if (i & 1)
			sched_yield();
		CHECK(ibv_destroy_qp(qp) == 0, "destroy qp %d", i);
	}
	atomic_store(&race_stop, true);
	pthread_join(th, NULL);
	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0, "destroy srq, cq");
	exit(0);
}

static void dmabuf(void)
{
	struct tctx t;

	tctx_open(&t);
	errno = 0;
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(t.pd, 0, 4096, 0, -1,
					      IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mr, "ibv_reg_dmabuf_mr(fd -1) returned an MR");
	CHECK(errno != 0, "ibv_reg_dmabuf_mr failed without errno");
	NOTE("ibv_reg_dmabuf_mr: %s", strerror(errno));
	tctx_close(&t);
}

static void odp(void)
{
	struct tctx t;
	struct pair p;
	struct buf src;
	const int acc = ACC_ALL | IBV_ACCESS_ON_DEMAND;

	simple_pair(&t, &p);
	buf_alloc(&t, &src, 4096, ACC_ALL);
	fill_pattern(src.p, 4096, 2);

	/* explicit ODP MR */
	uint8_t *m = calloc(1, 65536);
	CHECK(m, "calloc");
	struct ibv_mr *mr = ibv_reg_mr(t.pd, m, 65536, acc);
	CHECK(mr, "ibv_reg_mr(ON_DEMAND): %s", strerror(errno));
	struct ibv_sge sge = { (uintptr_t)m, 65536, mr->lkey };
	int rc = ibv_advise_mr(t.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
			       IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	CHECK(rc == 0, "ibv_advise_mr returned %d (%s)", rc, strerror(rc));
	CHECK(write_sync(&p, src.p, 4096, src.mr->lkey, (uintptr_t)m + 30000,
			 mr->rkey) == IBV_WC_SUCCESS, "WRITE into an ODP MR");
	check_bytes(m + 30000, src.p, 4096, "ODP MR");

	/* implicit ODP: the whole address space */
	struct ibv_mr *imr = ibv_reg_mr(t.pd, NULL, SIZE_MAX, acc);
	CHECK(imr, "implicit ODP ibv_reg_mr(NULL, SIZE_MAX): %s",
	      strerror(errno));
	uint8_t *heap = malloc(10000);
	uint8_t stack[512];
	CHECK(heap, "malloc");
	memset(heap, 0, 10000);
	memset(stack, 0, sizeof(stack));
	CHECK(write_sync(&p, src.p, 4096, src.mr->lkey, (uintptr_t)heap + 3333,
			 imr->rkey) == IBV_WC_SUCCESS,
	      "WRITE into heap memory through the implicit MR");
	check_bytes(heap + 3333, src.p, 4096, "heap via implicit MR");
	CHECK(write_sync(&p, src.p, 100, src.mr->lkey, (uintptr_t)stack + 7,
			 imr->rkey) == IBV_WC_SUCCESS,
	      "WRITE into stack memory through the implicit MR");
	check_bytes(stack + 7, src.p, 100, "stack via implicit MR");
	/* and as a local key: WRITE from unregistered heap memory */
	fill_pattern(heap, 10000, 3);
	CHECK(write_sync(&p, heap, 10000, imr->lkey, (uintptr_t)m,
			 mr->rkey) == IBV_WC_SUCCESS,
	      "WRITE sourced through the implicit MR's lkey");
	check_bytes(m, heap, 10000, "source via implicit MR");
	CHECK(ibv_dereg_mr(imr) == 0 && ibv_dereg_mr(mr) == 0, "dereg");
	buf_free(&src);
	pair_destroy(&p);
	tctx_close(&t);
	free(m);
	free(heap);
}

static void channel_nonblock(void)
{
	struct tctx t;
	struct ibv_cq *cq;
	void *cctx;

	tctx_open(&t);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(t.ctx);
	CHECK(ch, "create channel");
	struct ibv_cq *mine = ibv_create_cq(t.ctx, 8, NULL, ch, 0);
	CHECK(mine, "create cq");
	CHECK(ibv_req_notify_cq(mine, 0) == 0, "arm");
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0,
	      "fcntl O_NONBLOCK");
	errno = 0;
	uint64_t t0 = now_ms();
	int rc = ibv_get_cq_event(ch, &cq, &cctx);
	CHECK(rc == -1 && errno == EAGAIN,
	      "ibv_get_cq_event on an empty non-blocking channel: rc %d errno %d (%s), want -1/EAGAIN",
	      rc, errno, strerror(errno));
	CHECK(now_ms() - t0 < 1000, "non-blocking get_cq_event blocked");
	CHECK(ibv_destroy_cq(mine) == 0, "destroy cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	tctx_close(&t);
}

static void cq_events(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;
	int cookie;

	tctx_open(&t);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(t.ctx);
	CHECK(ch, "create channel");
	o.chan_b = ch;
	o.rcq_ctx_b = &cookie;
	pair_create(&t, &p, &o);
	CHECK(p.b.rcq->cq_context == &cookie && p.b.rcq->channel == ch,
	      "cq fields");
	buf_alloc(&t, &b, 4096, ACC_ALL);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	for (int i = 0; i < 3; i++) {
		CHECK(ibv_req_notify_cq(p.b.rcq, 0) == 0, "arm");
		CHECK(poll(&pfd, 1, 0) == 0, "event before any completion");
		post_recv1(p.b.qp, i, b.p, 64, b.mr->lkey);
		CHECK(post_send1(p.a.qp, IBV_WR_SEND, 100 + i, b.p + 64, 64,
				 b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "post send");
		CHECK(poll(&pfd, 1, DEADLINE_MS) == 1,
		      "no completion event %d within %d ms", i, DEADLINE_MS);
		struct ibv_cq *ecq = NULL;
		void *ectx = NULL;
		CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0, "get_cq_event");
		CHECK(ecq == p.b.rcq && ectx == &cookie,
		      "event names cq %p ctx %p, want %p %p", (void *)ecq,
		      ectx, (void *)p.b.rcq, (void *)&cookie);
		expect_wc(p.b.rcq, &wc, (uint64_t)i, IBV_WC_SUCCESS,
			  IBV_WC_RECV, "recv");
		expect_wc(p.a.scq, &wc, 100 + (uint64_t)i, IBV_WC_SUCCESS,
			  IBV_WC_SEND, "send");
	}
	CHECK(poll(&pfd, 1, 100) == 0, "extra event without arming");
	ibv_ack_cq_events(p.b.rcq, 3);
	buf_free(&b);
	pair_destroy(&p); /* ibv_destroy_cq waits for acks: all 3 acked */
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	tctx_close(&t);
}

static void cq_ex(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&t);
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
			    IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(t.ctx, &ca);
	CHECK(cqx, "ibv_create_cq_ex: %s", strerror(errno));
	memset(&p, 0, sizeof(p));
	p.t = &t;
	p.a.scq = ibv_create_cq(t.ctx, 64, NULL, NULL, 0);
	p.b.scq = ibv_create_cq(t.ctx, 64, NULL, NULL, 0);
	p.a.rcq = ibv_create_cq(t.ctx, 64, NULL, NULL, 0);
	p.b.rcq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	ia.send_cq = p.a.scq;
	ia.recv_cq = p.a.rcq;
	p.a.qp = ibv_create_qp(t.pd, &ia);
	ia.send_cq = p.b.scq;
	ia.recv_cq = p.b.rcq;
	p.b.qp = ibv_create_qp(t.pd, &ia);
	CHECK(p.a.scq && p.b.scq && p.a.rcq && p.a.qp && p.b.qp, "setup");
	connect_qps(&t, p.a.qp, p.b.qp, &o);
	buf_alloc(&t, &b, 8192, ACC_ALL);

	struct ibv_poll_cq_attr pa = { 0 };
	int rc = ibv_start_poll(cqx, &pa);
	CHECK(rc == ENOENT, "ibv_start_poll on an empty CQ returned %d, want ENOENT",
	      rc); /* and end_poll must not be called */

	for (int i = 0; i < 3; i++)
		post_recv1(p.b.qp, 10 + i, b.p + i * 1024, 1024, b.mr->lkey);
	for (int i = 0; i < 3; i++) {
		CHECK(post_send1(p.a.qp, IBV_WR_SEND_WITH_IMM, 20 + i,
				 b.p + 4096, 100 + i, b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0xabc0 + i) == 0,
		      "post send");
		expect_wc(p.a.scq, &wc, 20 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "send");
	}
	uint64_t end = now_ms() + DEADLINE_MS;
	while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && now_ms() < end)
		usleep(100);
	CHECK(rc == 0, "ibv_start_poll returned %d", rc);
	uint64_t last_ts = 0;
	for (int i = 0; i < 3; i++) {
		if (i) {
			end = now_ms() + DEADLINE_MS;
			while ((rc = ibv_next_poll(cqx)) == ENOENT &&
			       now_ms() < end)
				usleep(100);
			CHECK(rc == 0, "ibv_next_poll #%d returned %d", i, rc);
		}
		CHECK(cqx->wr_id == 10u + i && cqx->status == IBV_WC_SUCCESS,
		      "cq_ex #%d: wr_id %llu status %s", i,
		      (unsigned long long)cqx->wr_id,
		      ibv_wc_status_str(cqx->status));
		CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV, "opcode %d",
		      ibv_wc_read_opcode(cqx));
		CHECK(ibv_wc_read_byte_len(cqx) == 100u + i, "byte_len %u",
		      ibv_wc_read_byte_len(cqx));
		CHECK(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM,
		      "wc_flags %#x", ibv_wc_read_wc_flags(cqx));
		CHECK(ibv_wc_read_imm_data(cqx) == htobe32(0xabc0 + i),
		      "imm %#x", ibv_wc_read_imm_data(cqx));
		CHECK(ibv_wc_read_qp_num(cqx) == p.b.qp->qp_num, "qp_num %u",
		      ibv_wc_read_qp_num(cqx));
		uint32_t sq = ibv_wc_read_src_qp(cqx);
		CHECK(sq == 0 || sq == p.a.qp->qp_num, "src_qp %u", sq);
		uint64_t ts = ibv_wc_read_completion_ts(cqx);
		CHECK(ts != 0 && ts >= last_ts,
		      "completion timestamp %llu (previous %llu)",
		      (unsigned long long)ts, (unsigned long long)last_ts);
		last_ts = ts;
	}
	CHECK(ibv_next_poll(cqx) == ENOENT, "a fourth completion");
	ibv_end_poll(cqx);
	/* the plain ibv_poll_cq works on the same CQ */
	post_recv1(p.b.qp, 30, b.p, 1024, b.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 31, b.p + 4096, 5, b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post send");
	expect_wc(p.b.rcq, &wc, 30, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "ibv_poll_cq on a cq_ex");
	check_recv_wc(&wc, IBV_WC_RECV, 5, p.b.qp, p.a.qp, "cq_ex via poll_cq");
	expect_wc(p.a.scq, &wc, 31, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static void resize_cq(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;

	o.cqe = 16;
	tctx_open(&t);
	pair_create(&t, &p, &o);
	CHECK(p.a.scq->cqe >= 16, "cqe %d", p.a.scq->cqe);
	int rc = ibv_resize_cq(p.a.scq, 300);
	CHECK(rc == 0, "ibv_resize_cq(300): %s", strerror(rc));
	CHECK(p.a.scq->cqe >= 300, "cqe %d after resize to 300",
	      p.a.scq->cqe);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	for (int i = 0; i < 100; i++)
		CHECK(post_send1(p.a.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, b.p,
				 8, b.mr->lkey, IBV_SEND_SIGNALED,
				 (uintptr_t)b.p + 1024, b.mr->rkey, 0) == 0,
		      "post %d", i);
	usleep(200000); /* let all 100 land in the CQ before polling */
	for (int i = 0; i < 100; i++)
		expect_wc(p.a.scq, &wc, (uint64_t)i, IBV_WC_SUCCESS,
			  IBV_WC_RDMA_WRITE, "completion after resize");
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static void srq(void)
{
	struct tctx t;
	struct pair p1, p2;
	struct pair_opts o = pair_opts_default();
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&t);
	struct ibv_srq_init_attr sa = {
		.srq_context = &t,
		.attr = { .max_wr = 16, .max_sge = 1 },
	};
	struct ibv_srq *srq = ibv_create_srq(t.pd, &sa);
	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	CHECK(sa.attr.max_wr >= 16, "srq max_wr %u", sa.attr.max_wr);
	o.srq_b = srq;
	pair_create(&t, &p1, &o);
	pair_create(&t, &p2, &o);
	buf_alloc(&t, &b, 65536, ACC_ALL);
	for (int i = 0; i < 10; i++) {
		struct ibv_sge sge = { (uintptr_t)b.p + (size_t)i * 1024, 1024,
				       b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 500 + i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;
		CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "post srq recv");
	}
	uint8_t *msg = b.p + 32768;
	int used[10] = { 0 };
	struct pair *pp[2] = { &p1, &p2 };
	for (int i = 0; i < 6; i++) {
		struct pair *p = pp[i % 2];
		if (i == 4) {
			struct ibv_srq_attr la = { .srq_limit = 5 };
			int rc = ibv_modify_srq(srq, &la, IBV_SRQ_LIMIT);
			CHECK(rc == 0, "ibv_modify_srq(LIMIT 5): %s",
			      strerror(rc));
			CHECK(ibv_query_srq(srq, &la) == 0 && la.srq_limit == 5,
			      "query srq_limit %u", la.srq_limit);
			struct pollfd pf = { t.ctx->async_fd, POLLIN, 0 };
			CHECK(poll(&pf, 1, 100) == 0,
			      "async event with 6 WQEs left and limit 5");
		}
		fill_pattern(msg + i * 128, 128, (uint32_t)i);
		CHECK(post_send1(p->a.qp, IBV_WR_SEND, 600 + i, msg + i * 128,
				 128, b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
				 0) == 0, "post send");
		expect_wc(p->a.scq, &wc, 600 + i, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "send");
		expect_wc(p->b.rcq, &wc, 500 + i, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "SRQ receive (FIFO)");
		check_recv_wc(&wc, IBV_WC_RECV, 128, p->b.qp, p->a.qp,
			      "SRQ receive");
		int slot = (int)(wc.wr_id - 500);
		CHECK(!used[slot], "WQE %d used twice", slot);
		used[slot] = 1;
		check_bytes(b.p + slot * 1024, msg + i * 128, 128,
			    "SRQ payload");
	}
	/* 4 WQEs left < limit 5: IBV_EVENT_SRQ_LIMIT_REACHED */
	struct pollfd pf = { t.ctx->async_fd, POLLIN, 0 };
	uint64_t end = now_ms() + DEADLINE_MS;
	int got = 0;
	while (!got && now_ms() < end) {
		if (poll(&pf, 1, 100) != 1)
			continue;
		struct ibv_async_event ev;
		CHECK(ibv_get_async_event(t.ctx, &ev) == 0,
		      "ibv_get_async_event");
		if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
			CHECK(ev.element.srq == srq, "event for another SRQ");
			got = 1;
		} else {
			NOTE("other async event %s",
			     ibv_event_type_str(ev.event_type));
		}
		ibv_ack_async_event(&ev);
	}
	CHECK(got, "no IBV_EVENT_SRQ_LIMIT_REACHED within %d ms", DEADLINE_MS);
	pair_destroy(&p1);
	pair_destroy(&p2);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	buf_free(&b);
	tctx_close(&t);
}

/* A QP attached to an SRQ that enters ERR reports
 * IBV_EVENT_QP_LAST_WQE_REACHED (IBTA Vol 1, affiliated asynchronous
 * events: Last WQE Reached). */
static void srq_last_wqe(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();

	tctx_open(&t);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(t.pd, &sa);
	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	o.srq_b = srq;
	pair_create(&t, &p, &o);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(p.b.qp, &a, IBV_QP_STATE) == 0, "to ERR");
	struct pollfd pf = { t.ctx->async_fd, POLLIN, 0 };
	uint64_t end = now_ms() + DEADLINE_MS;
	int got = 0;
	while (!got && now_ms() < end) {
		if (poll(&pf, 1, 100) != 1)
			continue;
		struct ibv_async_event ev;
		CHECK(ibv_get_async_event(t.ctx, &ev) == 0, "get_async_event");
		if (ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
			CHECK(ev.element.qp == p.b.qp, "event for another QP");
			got = 1;
		}
		ibv_ack_async_event(&ev);
	}
	CHECK(got, "no IBV_EVENT_QP_LAST_WQE_REACHED within %d ms",
	      DEADLINE_MS);
	pair_destroy(&p);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	tctx_close(&t);
}

/* Is the page at p backed by softrnic's memfd (DESIGN.md decision 23,
 * "mapped records") rather than private memory? */
static bool mapped_at(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	bool m = false;

	CHECK(f, "open /proc/self/maps");
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
		    (uintptr_t)p >= lo && (uintptr_t)p < hi) {
			m = strstr(line, "memfd:softrnic-mr") != NULL;
			break;
		}
	}
	fclose(f);
	return m;
}

/* Large registrations move onto a memfd and back; the program sees its
 * bytes throughout; rereg moves the sharing with the translation. */
static void mr_mapped(void)
{
	size_t len = 4u << 20;
	struct tctx t;
	struct ibv_mr *m1, *m2;
	uint8_t *a, *b;

	tctx_open(&t);
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(a != MAP_FAILED && b != MAP_FAILED, "mmap");
	memset(a, 0x5a, len);
	memset(b, 0xa5, len);
	m1 = ibv_reg_mr(t.pd, a, len, IBV_ACCESS_LOCAL_WRITE);
	m2 = ibv_reg_mr(t.pd, a, len, IBV_ACCESS_LOCAL_WRITE);
	CHECK(m1 && m2, "reg");
	CHECK(mapped_at(a) && mapped_at(a + len - 1), "a 4 MiB region is not on a memfd");
	CHECK(a[0] == 0x5a && a[len - 1] == 0x5a, "contents lost at registration");
	a[7] = 1;
	CHECK(ibv_dereg_mr(m2) == 0, "dereg");
	CHECK(mapped_at(a), "the first of two deregistrations unshared the region");
	CHECK(ibv_rereg_mr(m1, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, len,
			   IBV_ACCESS_LOCAL_WRITE) == 0, "rereg");
	CHECK(!mapped_at(a), "rereg left the old range on the memfd");
	CHECK(mapped_at(b), "rereg did not share the new range");
	CHECK(a[7] == 1 && a[0] == 0x5a && a[len - 1] == 0x5a, "contents lost at rereg");
	a[0] = 2;			/* writable private memory again */
	CHECK(ibv_dereg_mr(m1) == 0, "dereg");
	CHECK(!mapped_at(b), "the last deregistration left the region shared");
	CHECK(b[0] == (uint8_t)0xa5 && b[len - 1] == (uint8_t)0xa5, "contents lost at dereg");
	/* a small one stays private */
	m1 = ibv_reg_mr(t.pd, a, 64 << 10, IBV_ACCESS_LOCAL_WRITE);
	CHECK(m1 && !mapped_at(a), "a 64 KiB region was shared");
	CHECK(ibv_dereg_mr(m1) == 0, "dereg");
	munmap(a, len);
	munmap(b, len);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(pd_busy),	   SUBTEST(cq_busy),	  SUBTEST(channel_busy),
	SUBTEST(srq_busy),	   SUBTEST(mr_keys),	  SUBTEST(reg_mr_access),
	SUBTEST(rereg_mr),	   SUBTEST(lkey_changes),  SUBTEST(recv_lkey_changes), SUBTEST(recv_access_change), SUBTEST(async_destroy_race),  SUBTEST(dmabuf),	  SUBTEST(odp),
	SUBTEST(channel_nonblock), SUBTEST(cq_events),	  SUBTEST(cq_ex),
	SUBTEST(resize_cq),	   SUBTEST(srq),	  SUBTEST(srq_last_wqe),
	SUBTEST(mr_mapped),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
