/* Shared helpers for the integration tests; see common.h. */
#include "common.h"

#include <poll.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Each subtest gets this long (seconds) before SIGALRM kills it; the whole
 * program stays below the 120 s ctest timeout by refusing to start a subtest
 * once TOTAL_BUDGET_S has been used. */
#define SUBTEST_TIMEOUT_S 25
#define TOTAL_BUDGET_S 90

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- descriptors closed twice ------------------------------------------ */

/* Every close() of a test program, and of softrnic's libraries, which
 * it links, comes here: the executable's symbol comes first. A close that
 * fails with EBADF closed a number nobody held; had another thread taken
 * the number meanwhile, it would have closed that thread's file (rping -q
 * died of it: its dlopen's file was closed under it). close_audit fails
 * the process that made one. */
static volatile int g_close_ebadf;

__attribute__((visibility("default"))) int close(int fd)
{
	int r = (int)syscall(SYS_close, fd);

	if (r < 0 && errno == EBADF)
		__atomic_add_fetch(&g_close_ebadf, 1, __ATOMIC_RELAXED);
	return r;
}

void close_audit(const char *who)
{
	int n = __atomic_load_n(&g_close_ebadf, __ATOMIC_RELAXED);

	CHECK(n == 0, "%s: %d close() calls of descriptors not open "
	      "(closed twice?)", who, n);
}

/* ---- runner ------------------------------------------------------------ */

static int selected(int argc, char **argv, const char *name)
{
	if (argc < 2)
		return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int run_subtests(int argc, char **argv, const struct subtest *t, size_t n)
{
	int nofork = getenv("INTEG_NOFORK") && atoi(getenv("INTEG_NOFORK"));
	uint64_t start = now_ms();
	int pass = 0, fail = 0, skip = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < n; i++) {
		if (!selected(argc, argv, t[i].name))
			continue;
		if (nofork) {
			fprintf(stderr, "--- %s\n", t[i].name);
			t[i].fn();
			printf("[PASS] %s\n", t[i].name);
			pass++;
			continue;
		}
		if (now_ms() - start > TOTAL_BUDGET_S * 1000ull) {
			printf("[FAIL] %s (not run: time budget used up)\n",
			       t[i].name);
			fail++;
			continue;
		}
		fflush(stdout);
		fflush(stderr);
		uint64_t t0 = now_ms();
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			alarm(SUBTEST_TIMEOUT_S);
			t[i].fn();
			close_audit(t[i].name);
			exit(0);
		}
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		unsigned ms = (unsigned)(now_ms() - t0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			printf("[PASS] %s (%u ms)\n", t[i].name, ms);
			pass++;
		} else if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP) {
			printf("[SKIP] %s\n", t[i].name);
			skip++;
		} else if (WIFEXITED(st)) {
			printf("[FAIL] %s (exit %d, %u ms)\n", t[i].name,
			       WEXITSTATUS(st), ms);
			fail++;
		} else {
			int sig = WTERMSIG(st);
			printf("[FAIL] %s (%s%s, %u ms)\n", t[i].name,
			       sig == SIGALRM ? "timed out: " : "killed by ",
			       strsignal(sig), ms);
			fail++;
		}
	}
	printf("%d passed, %d failed, %d skipped\n", pass, fail, skip);
	if (fail)
		return 1;
	if (!pass && skip)
		return EXIT_SKIP;
	return 0;
}

/* ---- device ------------------------------------------------------------ */

const char *test_device_name(void)
{
	const char *e = getenv("INTEG_DEVICE");

	return e && *e ? e : "softrnic0";
}

void tctx_open(struct tctx *t)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_device *dev = NULL;

	memset(t, 0, sizeof(*t));
	CHECK(list, "ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), test_device_name()))
			dev = list[i];
	CHECK(dev, "device %s not found among %d devices", test_device_name(),
	      num);
	t->ctx = ibv_open_device(dev);
	CHECK(t->ctx, "ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	CHECK(ibv_query_device(t->ctx, &t->dattr) == 0, "ibv_query_device");
	CHECK(ibv_query_port(t->ctx, 1, &t->pattr) == 0, "ibv_query_port");
	int rc = ibv_query_gid(t->ctx, 1, 0, &t->gid);
	if (rc) {
		/* no IP address on this host: nothing can be connected */
		SKIP("ibv_query_gid(port 1, index 0) failed (%d): no GID", rc);
	}
	t->pd = ibv_alloc_pd(t->ctx);
	CHECK(t->pd, "ibv_alloc_pd: %s", strerror(errno));
}

void tctx_close(struct tctx *t)
{
	if (t->pd)
		CHECK(ibv_dealloc_pd(t->pd) == 0, "ibv_dealloc_pd");
	if (t->ctx)
		CHECK(ibv_close_device(t->ctx) == 0, "ibv_close_device");
	memset(t, 0, sizeof(*t));
}

/* ---- QPs --------------------------------------------------------------- */

struct pair_opts pair_opts_default(void)
{
	struct pair_opts o = {
		.max_send_wr = 128,
		.max_recv_wr = 128,
		.max_send_sge = 4,
		.max_recv_sge = 4,
		.access = ACC_ALL,
		.mtu = IBV_MTU_4096,
		.cqe = 512,
		.rd_atomic = 4,
		.psn_a = 0x1234,
		.psn_b = 0xabcde,
	};
	return o;
}

void qp_to_init(struct ibv_qp *qp, unsigned int access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = access,
	};
	int rc = ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	CHECK(rc == 0, "modify RESET->INIT: %s", strerror(rc));
}

void qp_to_rtr(struct tctx *t, struct ibv_qp *qp, uint32_t dest_qpn,
	       enum ibv_mtu mtu, uint32_t rq_psn, uint8_t rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = dest_qpn,
		.rq_psn = rq_psn,
		.max_dest_rd_atomic = rd_atomic,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = 1,
			.grh = {
				.dgid = t->gid,
				.sgid_index = 0,
				.hop_limit = 64,
			},
		},
	};
	int rc = ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
	CHECK(rc == 0, "modify INIT->RTR: %s", strerror(rc));
}

void qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = sq_psn,
		.max_rd_atomic = rd_atomic,
	};
	int rc = ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	CHECK(rc == 0, "modify RTR->RTS: %s", strerror(rc));
}

void connect_qps(struct tctx *t, struct ibv_qp *a, struct ibv_qp *b,
		 const struct pair_opts *o)
{
	uint8_t rd = o->rd_atomic;

	if (t->dattr.max_qp_rd_atom && rd > t->dattr.max_qp_rd_atom)
		rd = (uint8_t)t->dattr.max_qp_rd_atom;
	qp_to_init(a, o->access);
	qp_to_init(b, o->access);
	qp_to_rtr(t, a, b->qp_num, o->mtu, o->psn_b, rd);
	qp_to_rtr(t, b, a->qp_num, o->mtu, o->psn_a, rd);
	qp_to_rts(a, o->psn_a, rd);
	qp_to_rts(b, o->psn_b, rd);
}

static void end_create(struct tctx *t, struct qp_end *e,
		       const struct pair_opts *o, struct ibv_srq *srq,
		       struct ibv_comp_channel *rch, void *rctx)
{
	e->scq = ibv_create_cq(t->ctx, o->cqe, NULL, NULL, 0);
	CHECK(e->scq, "ibv_create_cq: %s", strerror(errno));
	e->rcq = ibv_create_cq(t->ctx, o->cqe, rctx, rch, 0);
	CHECK(e->rcq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr ia = {
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.srq = srq,
		.cap = {
			.max_send_wr = o->max_send_wr,
			.max_recv_wr = srq ? 0 : o->max_recv_wr,
			.max_send_sge = o->max_send_sge,
			.max_recv_sge = srq ? 0 : o->max_recv_sge,
			.max_inline_data = o->max_inline,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = o->sq_sig_all,
	};
	e->qp = ibv_create_qp(t->pd, &ia);
	CHECK(e->qp, "ibv_create_qp: %s", strerror(errno));
	CHECK(ia.cap.max_send_wr >= o->max_send_wr &&
		      ia.cap.max_send_sge >= o->max_send_sge &&
		      ia.cap.max_inline_data >= o->max_inline,
	      "ibv_create_qp returned caps below the request");
	CHECK(e->qp->qp_type == IBV_QPT_RC && e->qp->pd == t->pd &&
		      e->qp->send_cq == e->scq && e->qp->recv_cq == e->rcq,
	      "ibv_qp fields not filled in");
}

void pair_create(struct tctx *t, struct pair *p, const struct pair_opts *o)
{
	memset(p, 0, sizeof(*p));
	p->t = t;
	end_create(t, &p->a, o, NULL, NULL, NULL);
	end_create(t, &p->b, o, o->srq_b, o->chan_b, o->rcq_ctx_b);
	CHECK(p->a.qp->qp_num != p->b.qp->qp_num, "two QPs share qp_num %u",
	      p->a.qp->qp_num);
	connect_qps(t, p->a.qp, p->b.qp, o);
}

static void end_destroy(struct qp_end *e)
{
	int rc;

	if (e->qp) {
		rc = ibv_destroy_qp(e->qp);
		CHECK(rc == 0, "ibv_destroy_qp: %s", strerror(rc));
	}
	if (e->scq) {
		rc = ibv_destroy_cq(e->scq);
		CHECK(rc == 0, "ibv_destroy_cq: %s", strerror(rc));
	}
	if (e->rcq) {
		rc = ibv_destroy_cq(e->rcq);
		CHECK(rc == 0, "ibv_destroy_cq: %s", strerror(rc));
	}
	memset(e, 0, sizeof(*e));
}

void pair_destroy(struct pair *p)
{
	end_destroy(&p->a);
	end_destroy(&p->b);
}

enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	CHECK(rc == 0, "ibv_query_qp: %s", strerror(rc));
	return a.qp_state;
}

int wait_qp_state(struct ibv_qp *qp, enum ibv_qp_state st, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		if (qp_state(qp) == st)
			return 1;
		if (now_ms() > end)
			return 0;
		usleep(1000);
	}
}

/* ---- memory ------------------------------------------------------------ */

void buf_alloc(struct tctx *t, struct buf *b, size_t len, unsigned int access)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t sz = len ? (len + pg - 1) / pg * pg : pg;

	b->p = mmap(NULL, sz, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(b->p != MAP_FAILED, "mmap: %s", strerror(errno));
	b->len = len;
	b->mr = ibv_reg_mr(t->pd, b->p, len ? len : 1, access);
	CHECK(b->mr, "ibv_reg_mr(len %zu, access %#x): %s", len, access,
	      strerror(errno));
	CHECK(b->mr->addr == b->p && b->mr->pd == t->pd,
	      "ibv_mr addr/pd not filled in");
}

void buf_free(struct buf *b)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t sz = b->len ? (b->len + pg - 1) / pg * pg : pg;

	if (b->mr) {
		int rc = ibv_dereg_mr(b->mr);
		CHECK(rc == 0, "ibv_dereg_mr: %s", strerror(rc));
	}
	if (b->p)
		munmap(b->p, sz);
	memset(b, 0, sizeof(*b));
}

void fill_pattern(void *p, size_t len, uint32_t seed)
{
	uint8_t *q = p;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		q[i] = (uint8_t)(x >> 16);
	}
}

size_t find_mismatch(const void *a, const void *b, size_t len)
{
	const uint8_t *x = a, *y = b;

	if (!memcmp(a, b, len))
		return (size_t)-1;
	for (size_t i = 0; i < len; i++)
		if (x[i] != y[i])
			return i;
	return (size_t)-1;
}

void check_bytes(const void *got, const void *want, size_t len,
		 const char *what)
{
	size_t i = find_mismatch(got, want, len);

	CHECK(i == (size_t)-1,
	      "%s: %zu bytes differ starting at offset %zu (got %#x, want %#x)",
	      what, len, i, ((const uint8_t *)got)[i],
	      ((const uint8_t *)want)[i]);
}

void check_filled(const void *p, uint8_t v, size_t len, const char *what)
{
	const uint8_t *q = p;

	for (size_t i = 0; i < len; i++)
		CHECK(q[i] == v, "%s: byte %zu is %#x, want %#x", what, i,
		      q[i], v);
}

/* ---- posting ----------------------------------------------------------- */

int post_send1(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
	       void *addr, uint32_t len, uint32_t lkey, unsigned int flags,
	       uint64_t raddr, uint32_t rkey, uint32_t imm_or_inv)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)addr, .length = len, .lkey = lkey
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = len ? &sge : NULL,
		.num_sge = len ? 1 : 0,
		.opcode = op,
		.send_flags = flags,
	}, *bad = NULL;

	if (op == IBV_WR_SEND_WITH_INV || op == IBV_WR_LOCAL_INV)
		wr.invalidate_rkey = imm_or_inv;
	else
		wr.imm_data = htobe32(imm_or_inv);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	int rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		CHECK(bad == &wr, "ibv_post_send failed (%d) without bad_wr",
		      rc);
	return rc;
}

int post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
		uint64_t *result, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)result, .length = 8, .lkey = lkey
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad = NULL;

	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

int post_recv1_rc(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		  uint32_t lkey)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)addr, .length = len, .lkey = lkey
	};
	struct ibv_recv_wr wr = {
		.wr_id = wr_id,
		.sg_list = len ? &sge : NULL,
		.num_sge = len ? 1 : 0,
	}, *bad = NULL;

	return ibv_post_recv(qp, &wr, &bad);
}

void post_recv1(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		uint32_t lkey)
{
	int rc = post_recv1_rc(qp, wr_id, addr, len, lkey);

	CHECK(rc == 0, "ibv_post_recv: %s", strerror(rc));
}

/* ---- completions ------------------------------------------------------- */

int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	unsigned spins = 0;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return 1;
		if (++spins % 256 == 0) {
			if (now_ms() > end)
				return 0;
			usleep(20);
		}
	}
}

static const char *const wc_op_names[] = {
	[IBV_WC_SEND] = "SEND",
	[IBV_WC_RDMA_WRITE] = "RDMA_WRITE",
	[IBV_WC_RDMA_READ] = "RDMA_READ",
	[IBV_WC_COMP_SWAP] = "COMP_SWAP",
	[IBV_WC_FETCH_ADD] = "FETCH_ADD",
	[IBV_WC_BIND_MW] = "BIND_MW",
	[IBV_WC_LOCAL_INV] = "LOCAL_INV",
	[IBV_WC_TSO] = "TSO",
};

const char *wc_opcode_str(int op)
{
	if (op == IBV_WC_RECV)
		return "RECV";
	if (op == IBV_WC_RECV_RDMA_WITH_IMM)
		return "RECV_RDMA_WITH_IMM";
	if (op >= 0 && (size_t)op < ARRAY_SIZE(wc_op_names) && wc_op_names[op])
		return wc_op_names[op];
	return "?";
}

void expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t wr_id,
	       enum ibv_wc_status status, int opcode, const char *what)
{
	struct ibv_wc tmp;

	if (!wc)
		wc = &tmp;
	memset(wc, 0xa5, sizeof(*wc));
	CHECK(poll_one(cq, wc, DEADLINE_MS),
	      "%s: no completion within %d ms (want wr_id %#llx, %s)", what,
	      DEADLINE_MS, (unsigned long long)wr_id,
	      ibv_wc_status_str(status));
	CHECK(wc->status == status && wc->wr_id == wr_id,
	      "%s: got wr_id %#llx status %s (%d) vendor_err %#x; want wr_id %#llx status %s",
	      what, (unsigned long long)wc->wr_id,
	      ibv_wc_status_str(wc->status), wc->status, wc->vendor_err,
	      (unsigned long long)wr_id, ibv_wc_status_str(status));
	if (status == IBV_WC_SUCCESS && opcode >= 0)
		CHECK((int)wc->opcode == opcode, "%s: opcode %s (%d), want %s",
		      what, wc_opcode_str(wc->opcode), wc->opcode,
		      wc_opcode_str(opcode));
}

void expect_no_wc(struct ibv_cq *cq, int ms, const char *what)
{
	struct ibv_wc wc;

	CHECK(!poll_one(cq, &wc, ms),
	      "%s: unexpected completion wr_id %#llx status %s opcode %s",
	      what, (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status), wc_opcode_str(wc.opcode));
}

void check_recv_wc(const struct ibv_wc *wc, int opcode, uint32_t byte_len,
		   struct ibv_qp *local, struct ibv_qp *remote,
		   const char *what)
{
	CHECK(wc->status == IBV_WC_SUCCESS, "%s: status %s", what,
	      ibv_wc_status_str(wc->status));
	CHECK((int)wc->opcode == opcode, "%s: opcode %s (%d), want %s", what,
	      wc_opcode_str(wc->opcode), wc->opcode, wc_opcode_str(opcode));
	CHECK(wc->byte_len == byte_len, "%s: byte_len %u, want %u", what,
	      wc->byte_len, byte_len);
	CHECK(wc->qp_num == local->qp_num, "%s: qp_num %u, want %u", what,
	      wc->qp_num, local->qp_num);
	CHECK(wc->src_qp == 0 || wc->src_qp == remote->qp_num,
	      "%s: src_qp %u, want %u (or 0: RC leaves it undefined)", what,
	      wc->src_qp, remote->qp_num);
}

int wait_async_event(struct ibv_context *ctx, const void *obj, enum ibv_event_type type, int ms)
{
	struct pollfd pf = { ctx->async_fd, POLLIN, 0 };
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end) {
		struct ibv_async_event ev;
		int got;

		if (poll(&pf, 1, 20) != 1)
			continue;
		CHECK(ibv_get_async_event(ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
		got = ev.event_type == type && (const void *)ev.element.qp == obj;
		ibv_ack_async_event(&ev);
		if (got)
			return 1;
	}
	return 0;
}
