/* IBTA 1.5 atomic write (ibv_wr_atomic_write, IBV_WR_ATOMIC_WRITE), in one
 * process (the in-process channel) and between two processes over TCP:
 * the 8 bytes land whole and nothing around them moves, the completion is
 * IBV_WC_ATOMIC_WRITE, a bad rkey, a misaligned target and a region
 * without remote write are refused with the IB completion errors, and a
 * peer without softrnic's extensions (SOFTRNIC_EXT=0) refuses the post
 * with EOPNOTSUPP. docs/COMPAT.md "Atomic write". */
#include "net_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* The kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE; rdma-core 44 predates it. */
#define DEVICE_ATOMIC_WRITE (1ULL << 40)

static const uint8_t V1[8] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88 };
static const uint8_t V2[8] = { 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18 };

/* ---- in one process ---------------------------------------------------- */

struct aenv {
	struct tctx t;
	struct pair p;
	struct ibv_qp_ex *qx;
	struct buf la, rb; /* requester's buffer, responder's buffer */
};

static void aenv_open(struct aenv *e, unsigned int rb_access)
{
	struct pair_opts o = pair_opts_default();

	memset(e, 0, sizeof(*e));
	tctx_open(&e->t);
	pair_create(&e->t, &e->p, &o);
	e->qx = ibv_qp_to_qp_ex(e->p.a.qp);
	CHECK(e->qx, "ibv_qp_to_qp_ex");
	buf_alloc(&e->t, &e->la, 4096, ACC_ALL);
	buf_alloc(&e->t, &e->rb, 4096, rb_access);
}

static void aenv_close(struct aenv *e)
{
	buf_free(&e->la);
	buf_free(&e->rb);
	pair_destroy(&e->p);
	tctx_close(&e->t);
}

static void wr_awrite(struct ibv_qp_ex *qx, uint64_t id, uint32_t rkey,
		      uint64_t raddr, const void *val)
{
	ibv_wr_start(qx);
	qx->wr_id = id;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, rkey, raddr, val);
	int rc = ibv_wr_complete(qx);
	CHECK(rc == 0, "ibv_wr_complete: %s", strerror(rc));
}

/* The capability, and a QP that asks for the op. */
static void capability(void)
{
	struct tctx t;
	struct ibv_device_attr_ex da;

	tctx_open(&t);
	memset(&da, 0, sizeof(da));
	CHECK(ibv_query_device_ex(t.ctx, NULL, &da) == 0, "query_device_ex");
	CHECK(da.device_cap_flags_ex & DEVICE_ATOMIC_WRITE,
	      "device_cap_flags_ex %#llx lacks ATOMIC_WRITE",
	      (unsigned long long)da.device_cap_flags_ex);
	struct ibv_cq *cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create cq");
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = t.pd,
		.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(t.ctx, &ia);
	CHECK(qp, "ibv_create_qp_ex(WITH_ATOMIC_WRITE): %s", strerror(errno));
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	tctx_close(&t);
}

/* ibv_wr_atomic_write: the 8 bytes are taken at the call and land whole,
 * with only remote write on the target (as rdma-core's test registers
 * it); the neighbours stay as they were. */
static void wr_api(void)
{
	struct aenv e;
	struct ibv_wc wc;
	uint8_t val[8], want[64];

	aenv_open(&e, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(e.rb.p, 0xee, 64);
	memcpy(val, V1, 8);
	ibv_wr_start(e.qx);
	e.qx->wr_id = 1;
	e.qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 8, val);
	memset(val, 0, sizeof(val)); /* the value was copied at the call */
	e.qx->wr_id = 2;
	e.qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(e.qx, e.rb.mr->rkey, (uintptr_t)e.rb.p + 24, V2);
	/* an SGE set after it is not its value */
	ibv_wr_set_sge(e.qx, e.la.mr->lkey, (uintptr_t)e.la.p, 8);
	CHECK(ibv_wr_complete(e.qx) == 0, "wr_complete");
	expect_wc(e.p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "first");
	CHECK(wc.qp_num == e.p.a.qp->qp_num, "qp_num %u", wc.qp_num);
	CHECK(wc.byte_len == 8, "byte_len %u", wc.byte_len);
	expect_wc(e.p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "second");
	memset(want, 0xee, sizeof(want));
	memcpy(want + 8, V1, 8);
	memcpy(want + 24, V2, 8);
	check_bytes(e.rb.p, want, 64, "target after two atomic writes");
	expect_no_wc(e.p.b.rcq, 20, "responder completion for a one-sided op");
	aenv_close(&e);
}

/* ibv_post_send with IBV_WR_ATOMIC_WRITE: wr.rdma names the target, the
 * gather list (8 bytes, registered or inline) the value. */
static void post_send_api(void)
{
	struct aenv e;
	struct ibv_wc wc;
	uint8_t want[32];
	struct ibv_sge two[2];
	struct ibv_send_wr wr, *bad;

	aenv_open(&e, ACC_ALL);
	memset(e.rb.p, 0, 32);
	memcpy(e.la.p, V2, 8);
	CHECK(post_send1(e.p.a.qp, IBV_WR_ATOMIC_WRITE, 1, e.la.p, 8, e.la.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)e.rb.p, e.rb.mr->rkey, 0) == 0,
	      "post registered value");
	expect_wc(e.p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "registered");
	/* two SGEs of 3 + 5 bytes, inline: read at post */
	uint8_t inl[8];
	memcpy(inl, V1, 8);
	two[0] = (struct ibv_sge){ (uintptr_t)inl, 3, 0 };
	two[1] = (struct ibv_sge){ (uintptr_t)inl + 3, 5, 0 };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.opcode = IBV_WR_ATOMIC_WRITE;
	wr.sg_list = two;
	wr.num_sge = 2;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr.wr.rdma.remote_addr = (uintptr_t)e.rb.p + 16;
	wr.wr.rdma.rkey = e.rb.mr->rkey;
	CHECK(ibv_post_send(e.p.a.qp, &wr, &bad) == 0, "post inline value");
	memset(inl, 0, sizeof(inl));
	expect_wc(e.p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "inline");
	memset(want, 0, sizeof(want));
	memcpy(want, V2, 8);
	memcpy(want + 16, V1, 8);
	check_bytes(e.rb.p, want, 32, "target");
	/* anything but exactly 8 bytes is refused at post */
	CHECK(post_send1(e.p.a.qp, IBV_WR_ATOMIC_WRITE, 3, e.la.p, 4, e.la.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)e.rb.p, e.rb.mr->rkey, 0) == EINVAL,
	      "4-byte value accepted");
	CHECK(post_send1(e.p.a.qp, IBV_WR_ATOMIC_WRITE, 4, e.la.p, 16, e.la.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)e.rb.p, e.rb.mr->rkey, 0) == EINVAL,
	      "16-byte value accepted");
	expect_no_wc(e.p.a.scq, 20, "completion of a refused post");
	/* a bad lkey is a local protection error, at completion */
	CHECK(post_send1(e.p.a.qp, IBV_WR_ATOMIC_WRITE, 5, e.la.p, 8, ~e.la.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)e.rb.p, e.rb.mr->rkey, 0) == 0,
	      "post with a bad lkey");
	expect_wc(e.p.a.scq, &wc, 5, IBV_WC_LOC_PROT_ERR, -1, "bad lkey");
	check_bytes(e.rb.p, want, 32, "target after the bad lkey");
	aenv_close(&e);
}

/* A reader on the responder's side never sees a torn value while atomic
 * writes of two different patterns land on the target. */
struct tear {
	volatile uint64_t *target;
	atomic_int stop, started;
	uint64_t a, b, torn, seen;
};

static void *tear_reader(void *arg)
{
	struct tear *t = arg;

	atomic_store(&t->started, 1);
	while (!atomic_load(&t->stop)) {
		uint64_t v = __atomic_load_n(t->target, __ATOMIC_RELAXED);

		if (v != t->a && v != t->b && v != 0)
			t->torn++;
		t->seen++;
	}
	return NULL;
}

static void not_torn(void)
{
	struct aenv e;
	struct ibv_wc wc;
	struct tear tr = { 0 };
	pthread_t th;

	aenv_open(&e, ACC_ALL);
	memcpy(&tr.a, V1, 8);
	memcpy(&tr.b, V2, 8);
	tr.target = (volatile uint64_t *)(e.rb.p + 512);
	*tr.target = 0;
	CHECK(pthread_create(&th, NULL, tear_reader, &tr) == 0, "pthread_create");
	while (!atomic_load(&tr.started))
		sched_yield();
	for (int i = 0; i < 20000; i++) {
		wr_awrite(e.qx, (uint64_t)i, e.rb.mr->rkey, (uintptr_t)tr.target,
			  i & 1 ? V2 : V1);
		expect_wc(e.p.a.scq, &wc, (uint64_t)i, IBV_WC_SUCCESS,
			  IBV_WC_ATOMIC_WRITE, "atomic write");
	}
	atomic_store(&tr.stop, 1);
	pthread_join(th, NULL);
	CHECK(tr.torn == 0, "%llu torn values in %llu reads",
	      (unsigned long long)tr.torn, (unsigned long long)tr.seen);
	CHECK(*tr.target == tr.b, "last value %#llx", (unsigned long long)*tr.target);
	if (getenv("INTEG_VERBOSE"))
		NOTE("%llu reads of the target, none torn", (unsigned long long)tr.seen);
	/* ... and it orders with fetch-and-add on the same word */
	uint64_t *old = (uint64_t *)e.la.p;
	CHECK(post_atomic(e.p.a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 7, old, e.la.mr->lkey,
			  (uintptr_t)tr.target, e.rb.mr->rkey, 1, 0) == 0, "post FAA");
	expect_wc(e.p.a.scq, &wc, 7, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "FAA");
	CHECK(*old == tr.b && *tr.target == tr.b + 1, "FAA saw %#llx, left %#llx",
	      (unsigned long long)*old, (unsigned long long)*tr.target);
	aenv_close(&e);
}

/* Refusals: the requester's WQE fails with the IB status, the responder's
 * QP enters ERROR, the target does not change. */
static void refused(unsigned int rb_access, int bad_key, size_t off,
		    enum ibv_wc_status want)
{
	struct aenv e;
	struct ibv_wc wc;
	uint8_t before[64];

	aenv_open(&e, rb_access);
	fill_pattern(e.rb.p, 64, 5);
	memcpy(before, e.rb.p, 64);
	wr_awrite(e.qx, 9, bad_key ? ~e.rb.mr->rkey : e.rb.mr->rkey,
		  (uintptr_t)e.rb.p + off, V1);
	expect_wc(e.p.a.scq, &wc, 9, want, -1, "refused atomic write");
	CHECK(wait_qp_state(e.p.b.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "responder state %d, want ERR", qp_state(e.p.b.qp));
	CHECK(wait_qp_state(e.p.a.qp, IBV_QPS_ERR, DEADLINE_MS),
	      "requester state %d, want ERR", qp_state(e.p.a.qp));
	check_bytes(e.rb.p, before, 64, "target of a refused atomic write");
	aenv_close(&e);
}

static void bad_rkey(void)
{
	refused(ACC_ALL, 1, 8, IBV_WC_REM_ACCESS_ERR);
}

static void misaligned(void)
{
	refused(ACC_ALL, 0, 12, IBV_WC_REM_INV_REQ_ERR);
}

/* Remote atomic is not remote write: IBTA 1.5 checks it as a write. */
static void no_remote_write(void)
{
	refused(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		0, 8, IBV_WC_REM_ACCESS_ERR);
}

/* ---- two processes over TCP --------------------------------------------- */

enum { T_READY = 0x100, T_DONE = 0x200, T_CHECKED = 0x300 };

/* A writes B's buffer through both APIs; B checks it after a fence. */
static void net_lands_a(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(n->qp);
	uint8_t *l = n->b.p;

	CHECK(qx, "ibv_qp_to_qp_ex");
	net_expect(n, T_READY, "B's target set");
	for (int i = 0; i < 64; i++) {
		uint8_t v[8];

		memset(v, i + 1, 8);
		v[0] = (uint8_t)i;
		wr_awrite(qx, (uint64_t)i, n->peer.rkey, n->peer.addr + (uint64_t)i * 16, v);
	}
	memcpy(l, V2, 8);
	CHECK(post_send1(n->qp, IBV_WR_ATOMIC_WRITE, 100, l, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr + 2048, n->peer.rkey, 0) == 0,
	      "post_send ATOMIC_WRITE");
	for (int i = 0; i < 64; i++)
		expect_wc(n->scq, &wc, (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE,
			  "WR API atomic write over TCP");
	expect_wc(n->scq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE,
		  "post_send atomic write over TCP");
	a_fence(n);
	net_expect(n, T_CHECKED, "B checked");
}

static void net_lands_b(struct net_end *n)
{
	uint8_t want[4096];

	memset(n->b.p, 0xee, sizeof(want));
	memset(want, 0xee, sizeof(want));
	for (int i = 0; i < 64; i++) {
		memset(want + i * 16, i + 1, 8);
		want[i * 16] = (uint8_t)i;
	}
	memcpy(want + 2048, V2, 8);
	net_put(n, T_READY);
	b_fence(n);
	check_bytes(n->b.p, want, sizeof(want), "B's buffer after atomic writes");
	expect_no_wc(n->rcq, 20, "extra responder completion");
	net_put(n, T_CHECKED);
}

/* B says where to aim; A's atomic write must fail with want; B's target
 * is unchanged and its QP in ERROR. */
static enum ibv_wc_status net_want;

static void net_refused_a(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(n->qp);
	uint64_t addr = net_get(n);
	uint32_t rkey = (uint32_t)net_get(n);

	net_expect(n, T_READY, "B ready");
	wr_awrite(qx, 1, rkey, addr, V1);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 2, n->b.p, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == 0,
	      "post a WRITE behind it");
	expect_wc(n->scq, &wc, 1, net_want, -1, "refused atomic write over TCP");
	expect_wc(n->scq, &wc, 2, IBV_WC_WR_FLUSH_ERR, -1, "WRITE behind it");
	wait_err(n->qp, DEADLINE_MS, "requester");
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B checked");
}

static void net_refused_b_at(struct net_end *n, uint8_t *region, uint64_t target,
			     uint32_t rkey)
{
	uint8_t before[256];

	fill_pattern(region, sizeof(before), 77);
	memcpy(before, region, sizeof(before));
	net_put(n, target);
	net_put(n, rkey);
	net_put(n, T_READY);
	net_expect(n, T_DONE, "A saw its completions");
	wait_err(n->qp, DEADLINE_MS, "responder");
	check_bytes(region, before, sizeof(before), "B's target after the refusal");
	net_put(n, T_CHECKED);
}

static void net_bad_rkey_b(struct net_end *n)
{
	net_refused_b_at(n, n->b.p, (uintptr_t)n->b.p + 64, ~n->b.mr->rkey);
}

static void net_misaligned_b(struct net_end *n)
{
	net_refused_b_at(n, n->b.p, (uintptr_t)n->b.p + 68, n->b.mr->rkey);
}

static void net_no_write_b(struct net_end *n)
{
	uint8_t *p = n->b.p + 65536;
	struct ibv_mr *mr = ibv_reg_mr(n->t.pd, p, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
				       IBV_ACCESS_REMOTE_READ);

	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	net_refused_b_at(n, p, (uintptr_t)p + 64, mr->rkey);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
}

/* SOFTRNIC_EXT=0 on both sides: a plain iWARP stream, no extension
 * messages, so the post is refused (EOPNOTSUPP, bad_wr set) once the
 * stream is up; the QP stays usable. */
static void net_plain_a(struct net_end *n)
{
	struct ibv_wc wc;
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(n->qp);
	uint8_t *l = n->b.p;

	/* a SEND that B receives proves the stream is up */
	net_expect(n, T_READY, "B's receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 1, NULL, 0, 0, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	net_expect(n, T_DONE, "B got the SEND");
	memcpy(l, V1, 8);
	CHECK(post_send1(n->qp, IBV_WR_ATOMIC_WRITE, 2, l, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == EOPNOTSUPP,
	      "ibv_post_send(ATOMIC_WRITE) towards a plain iWARP peer");
	ibv_wr_start(qx);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, n->peer.rkey, n->peer.addr, V1);
	int rc = ibv_wr_complete(qx);
	CHECK(rc == EOPNOTSUPP, "ibv_wr_complete: %d, want EOPNOTSUPP", rc);
	expect_no_wc(n->scq, 50, "completion of a refused post");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 4, l, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr + 8, n->peer.rkey, 0) == 0,
	      "post WRITE after the refusal");
	expect_wc(n->scq, &wc, 4, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE");
	a_fence(n);
	net_expect(n, T_CHECKED, "B checked");
}

static void net_plain_b(struct net_end *n)
{
	struct ibv_wc wc;
	uint8_t want[16] = { 0 };

	memset(n->b.p, 0, 16);
	post_recv1(n->qp, 0xb1, NULL, 0, 0);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0xb1, IBV_WC_SUCCESS, IBV_WC_RECV, "SEND");
	net_put(n, T_DONE);
	b_fence(n);
	memcpy(want + 8, V1, 8);
	check_bytes(n->b.p, want, 16, "only the WRITE landed");
	net_put(n, T_CHECKED);
}

/* UC has no atomics (IBTA 9.4.5): refused at post, on a QP in RTS. */
static void net_uc_a(struct net_end *n)
{
	CHECK(n->qp->qp_type == IBV_QPT_UC, "qp_type %d", n->qp->qp_type);
	memcpy(n->b.p, V1, 8);
	CHECK(post_send1(n->qp, IBV_WR_ATOMIC_WRITE, 1, n->b.p, 8, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == EINVAL,
	      "UC atomic write not refused");
	expect_no_wc(n->scq, 20, "completion of a refused post");
	net_sync(n, T_DONE);
}

static void net_uc_b(struct net_end *n)
{
	net_sync(n, T_DONE);
}

static void net_run_type(enum ibv_qp_type type, net_side_fn a, net_side_fn b)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 256 * KIB;
	o.type = type;
	if (type == IBV_QPT_UC)
		o.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	net_fork_run(&o, a, b);
}

static void net_run(net_side_fn a, net_side_fn b)
{
	net_run_type(IBV_QPT_RC, a, b);
}

static void uc_refused(void)
{
	net_run_type(IBV_QPT_UC, net_uc_a, net_uc_b);
}

static void net_lands(void)
{
	net_run(net_lands_a, net_lands_b);
}

static void net_bad_rkey(void)
{
	net_want = IBV_WC_REM_ACCESS_ERR;
	net_run(net_refused_a, net_bad_rkey_b);
}

static void net_misaligned(void)
{
	net_want = IBV_WC_REM_INV_REQ_ERR;
	net_run(net_refused_a, net_misaligned_b);
}

static void net_no_remote_write(void)
{
	net_want = IBV_WC_REM_ACCESS_ERR;
	net_run(net_refused_a, net_no_write_b);
}

static void net_plain_peer(void)
{
	setenv("SOFTRNIC_EXT", "0", 1);	/* both sides: they fork from here */
	net_run(net_plain_a, net_plain_b);
}

static const struct subtest tests[] = {
	SUBTEST(capability),	  SUBTEST(wr_api),
	SUBTEST(post_send_api),	  SUBTEST(uc_refused),
	SUBTEST(not_torn),	  SUBTEST(bad_rkey),
	SUBTEST(misaligned),	  SUBTEST(no_remote_write),
	SUBTEST(net_lands),	  SUBTEST(net_bad_rkey),
	SUBTEST(net_misaligned),  SUBTEST(net_no_remote_write),
	SUBTEST(net_plain_peer),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
