/* Thread domains and parent domains (ibv_alloc_td(3),
 * ibv_alloc_parent_domain(3)): argument checks, reference rules, the
 * application's allocator called for the queue buffers of QPs, SRQs and
 * CQs made on a parent domain (and each buffer freed once), and data
 * moving through QPs on a parent domain with MRs on it and on its PD.
 *
 * Usage: test_parent_domain [SUBTEST...]
 */
#include "common.h"

#include <errno.h>
#include <string.h>

/* ---- a recording allocator --------------------------------------------- */

#define MAX_BUFS 64

struct rec {
	struct ibv_pd *want_pd;		/* the parent domain */
	int mode;			/* 0 allocate, 1 USE_DEFAULT, 2 fail */
	int nalloc, nfree;
	uint64_t types;			/* bit (resource_type & 63) seen */
	struct { void *p; size_t size; uint64_t type; int freed; } b[MAX_BUFS];
};

static void *rec_alloc(struct ibv_pd *pd, void *pd_context, size_t size,
		       size_t alignment, uint64_t resource_type)
{
	struct rec *r = pd_context;

	CHECK(pd == r->want_pd, "alloc: pd %p, want the parent domain %p",
	      (void *)pd, (void *)r->want_pd);
	CHECK(size > 0, "alloc of 0 bytes");
	CHECK(alignment && !(alignment & (alignment - 1)) &&
	      alignment % sizeof(void *) == 0, "alloc: alignment %zu", alignment);
	if (r->mode == 1)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (r->mode == 2)
		return NULL;
	CHECK(r->nalloc < MAX_BUFS, "too many allocations");
	void *p = NULL;
	CHECK(posix_memalign(&p, alignment, size) == 0, "posix_memalign");
	/* Garbage on purpose: the library must not trust the contents. */
	memset(p, 0xa5, size);
	r->b[r->nalloc].p = p;
	r->b[r->nalloc].size = size;
	r->b[r->nalloc].type = resource_type;
	r->nalloc++;
	r->types |= 1ULL << (resource_type & 63);
	return p;
}

static void rec_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	struct rec *r = pd_context;

	CHECK(pd == r->want_pd, "free: pd %p, want %p", (void *)pd, (void *)r->want_pd);
	/* The heap may hand an address out again once it was freed: match
	 * the live allocation. */
	for (int i = 0; i < r->nalloc; i++) {
		if (r->b[i].p != ptr || r->b[i].freed)
			continue;
		CHECK(r->b[i].type == resource_type, "free type %#llx, alloc type %#llx",
		      (unsigned long long)resource_type, (unsigned long long)r->b[i].type);
		r->b[i].freed = 1;
		r->nfree++;
		free(ptr);
		return;
	}
	CHECK(0, "free of %p, which alloc never returned (or freed twice)", ptr);
}

static struct ibv_pd *parent_domain(struct tctx *t, struct ibv_td *td, struct rec *r)
{
	struct ibv_parent_domain_init_attr a = {
		.pd = t->pd,
		.td = td,
		.comp_mask = r ? IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
				 IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT : 0,
		.alloc = r ? rec_alloc : NULL,
		.free = r ? rec_free : NULL,
		.pd_context = r,
	};
	struct ibv_pd *pd = ibv_alloc_parent_domain(t->ctx, &a);

	CHECK(pd, "ibv_alloc_parent_domain: %s", strerror(errno));
	CHECK(pd->context == t->ctx, "parent domain context");
	if (r)
		r->want_pd = pd;
	return pd;
}

static struct ibv_cq_ex *pd_cq(struct tctx *t, struct ibv_pd *pd, int cqe)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = (uint32_t)cqe,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD | IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
		.parent_domain = pd,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(t->ctx, &a);

	CHECK(cq, "ibv_create_cq_ex with a parent domain: %s", strerror(errno));
	return cq;
}

static struct ibv_qp *pd_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq,
			    enum ibv_qp_type type)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = type,
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16,
			 .max_send_sge = 2, .max_recv_sge = srq ? 0 : 2 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(pd->context, &a);

	CHECK(qp, "ibv_create_qp_ex on a parent domain: %s", strerror(errno));
	CHECK(qp->pd == pd, "qp->pd is not the parent domain");
	return qp;
}

/* ---- argument checks and reference rules ------------------------------- */

static void td_and_pd_rules(void)
{
	struct tctx t;

	tctx_open(&t);
	struct ibv_td_init_attr tda = { .comp_mask = 1 };
	errno = 0;
	CHECK(!ibv_alloc_td(t.ctx, &tda) && errno == EINVAL,
	      "ibv_alloc_td with comp_mask 1: errno %d, want EINVAL", errno);
	tda.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(t.ctx, &tda);
	CHECK(td && td->context == t.ctx, "ibv_alloc_td: %s", strerror(errno));

	struct ibv_parent_domain_init_attr a = { .pd = NULL };
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(t.ctx, &a) && errno == EINVAL,
	      "parent domain without a PD: errno %d", errno);
	a.pd = t.pd;
	a.comp_mask = 1u << 7;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(t.ctx, &a) && errno == EINVAL,
	      "parent domain with an unknown comp_mask bit: errno %d", errno);
	a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	a.alloc = rec_alloc;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(t.ctx, &a) && errno == EINVAL,
	      "allocators without free(): errno %d", errno);

	struct ibv_pd *pd = parent_domain(&t, td, NULL);
	a.pd = pd;
	a.comp_mask = 0;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(t.ctx, &a) && errno == EINVAL,
	      "parent domain of a parent domain: errno %d", errno);

	/* Each holds what it was built from. */
	CHECK(ibv_dealloc_td(td) == EBUSY, "ibv_dealloc_td under a parent domain: want EBUSY");
	CHECK(ibv_dealloc_pd(t.pd) == EBUSY, "ibv_dealloc_pd under a parent domain: want EBUSY");

	/* A CQ takes a parent domain, not a plain PD. */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = t.pd,
	};
	errno = 0;
	CHECK(!ibv_create_cq_ex(t.ctx, &ca) && errno == EINVAL,
	      "CQ with a plain PD as parent domain: errno %d", errno);
	struct ibv_cq_ex *cq = pd_cq(&t, pd, 8);
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "parent domain dealloc under a CQ: want EBUSY");
	struct ibv_qp *qp = pd_qp(pd, ibv_cq_ex_to_cq(cq), NULL, IBV_QPT_RC);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == EBUSY, "CQ under a QP");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");

	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc parent domain");
	CHECK(ibv_dealloc_td(td) == 0, "dealloc td");
	tctx_close(&t);
}

/* ---- the allocator ----------------------------------------------------- */

static void allocators_called(void)
{
	struct tctx t;
	struct rec r;

	memset(&r, 0, sizeof(r));
	tctx_open(&t);
	struct ibv_pd *pd = parent_domain(&t, NULL, &r);

	struct ibv_cq_ex *cq = pd_cq(&t, pd, 64);
	CHECK(r.nalloc == 1 && (r.types & (1u << 4)), "CQ ring: %d allocations", r.nalloc);
	CHECK((r.b[0].type >> 32) == 0, "resource type %#llx: upper half is the driver id, 0",
	      (unsigned long long)r.b[0].type);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq on a parent domain: %s", strerror(errno));
	CHECK(r.nalloc == 2 && (r.types & (1u << 3)), "SRQ: %d allocations", r.nalloc);
	struct ibv_qp *qp = pd_qp(pd, ibv_cq_ex_to_cq(cq), NULL, IBV_QPT_RC);
	CHECK(r.nalloc == 4 && (r.types & (1u << 1)) && (r.types & (1u << 2)),
	      "QP: SQ and RQ from the allocator (%d allocations)", r.nalloc);
	struct ibv_qp *uqp = pd_qp(pd, ibv_cq_ex_to_cq(cq), srq, IBV_QPT_UD);
	CHECK(r.nalloc == 5, "UD QP on an SRQ: its SQ only (%d allocations)", r.nalloc);

	/* Resizing a CQ takes a new ring and gives the old one back. */
	CHECK(ibv_resize_cq(ibv_cq_ex_to_cq(cq), 200) == 0, "resize cq");
	CHECK(r.nalloc == 6 && r.nfree == 1 && r.b[0].freed, "resize: %d allocs, %d frees",
	      r.nalloc, r.nfree);
	struct ibv_srq_attr sattr = { .max_wr = 64 };
	CHECK(ibv_modify_srq(srq, &sattr, IBV_SRQ_MAX_WR) == 0, "resize srq");
	CHECK(r.nalloc == 7 && r.nfree == 2, "SRQ resize: %d allocs, %d frees", r.nalloc, r.nfree);

	CHECK(ibv_destroy_qp(uqp) == 0 && ibv_destroy_qp(qp) == 0, "destroy qps");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
	CHECK(r.nfree == r.nalloc, "%d buffers allocated, %d freed", r.nalloc, r.nfree);

	/* USE_DEFAULT: the library allocates, and never calls free(). */
	r.mode = 1;
	int before = r.nfree;
	cq = pd_cq(&t, pd, 16);
	qp = pd_qp(pd, ibv_cq_ex_to_cq(cq), NULL, IBV_QPT_RC);
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy");
	CHECK(r.nfree == before, "free() called for default allocations");

	/* NULL from alloc() fails the creation, with nothing left over. */
	r.mode = 2;
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd,
	};
	errno = 0;
	CHECK(!ibv_create_cq_ex(t.ctx, &ca) && errno == ENOMEM,
	      "CQ with a failing allocator: errno %d, want ENOMEM", errno);
	CHECK(ibv_dealloc_pd(pd) == 0, "parent domain: nothing holds it");
	tctx_close(&t);
}

/* ---- data -------------------------------------------------------------- */

/* An in-process RC pair on a parent domain: SEND between MRs on the parent
 * domain, RDMA WRITE from an MR on the plain PD into one on the parent
 * domain (the same protection domain), byte for byte. */
static void data_on_parent_domain(void)
{
	struct tctx t;
	struct rec r;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf src, dst, plain;
	struct ibv_wc wc;
	enum { LEN = 65536 };

	memset(&r, 0, sizeof(r));
	tctx_open(&t);
	struct ibv_pd *base = t.pd;
	struct ibv_pd *pd = parent_domain(&t, NULL, &r);

	buf_alloc(&t, &plain, LEN, ACC_ALL);	/* on the plain PD */
	t.pd = pd;
	pair_create(&t, &p, &o);
	CHECK(r.nalloc >= 4, "the pair's QPs used the allocator (%d buffers)", r.nalloc);
	buf_alloc(&t, &src, LEN, ACC_ALL);
	buf_alloc(&t, &dst, LEN, ACC_ALL);

	fill_pattern(src.p, LEN, 41);
	post_recv1(p.b.qp, 1, dst.p, LEN, dst.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, src.p, LEN, src.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "RECV");
	check_recv_wc(&wc, IBV_WC_RECV, LEN, p.b.qp, p.a.qp, "RECV");
	check_bytes(dst.p, src.p, LEN, "SEND on a parent domain");

	fill_pattern(plain.p, LEN, 42);
	CHECK(post_send1(p.a.qp, IBV_WR_RDMA_WRITE, 3, plain.p, LEN, plain.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)dst.p, dst.mr->rkey, 0) == 0,
	      "post WRITE");
	expect_wc(p.a.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE");
	CHECK(post_send1(p.a.qp, IBV_WR_RDMA_READ, 4, src.p, LEN, src.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)plain.p, plain.mr->rkey, 0) == 0,
	      "post READ");
	expect_wc(p.a.scq, &wc, 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "READ");
	check_bytes(dst.p, plain.p, LEN, "WRITE from the plain PD's MR");
	check_bytes(src.p, plain.p, LEN, "READ of the plain PD's MR");

	pair_destroy(&p);
	buf_free(&src);
	buf_free(&dst);
	CHECK(r.nfree == r.nalloc, "%d buffers allocated, %d freed", r.nalloc, r.nfree);
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc parent domain");
	t.pd = base;
	buf_free(&plain);
	tctx_close(&t);
}

/* MRs of another PD stay out of reach of a QP on a parent domain. */
static void other_pd_refused(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf mine, theirs;
	struct ibv_wc wc;

	tctx_open(&t);
	struct ibv_pd *base = t.pd;
	struct ibv_pd *other = ibv_alloc_pd(t.ctx);
	CHECK(other, "ibv_alloc_pd");
	struct ibv_pd *pd = parent_domain(&t, NULL, NULL);

	t.pd = pd;
	pair_create(&t, &p, &o);
	buf_alloc(&t, &mine, 4096, ACC_ALL);
	t.pd = other;
	buf_alloc(&t, &theirs, 4096, ACC_ALL);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 5, theirs.p, 64, theirs.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.a.scq, &wc, 5, IBV_WC_LOC_PROT_ERR, -1, "SEND from another PD's MR");
	pair_destroy(&p);
	buf_free(&mine);
	buf_free(&theirs);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_dealloc_pd(other) == 0, "dealloc");
	t.pd = base;
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(td_and_pd_rules), SUBTEST(allocators_called),
	SUBTEST(data_on_parent_domain), SUBTEST(other_pd_refused),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
