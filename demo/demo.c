/* softrnic-demo: a tour of the verbs API on softrnic0, in one process.
 *
 * Two RC QPs on one device are connected to each other by hand, the way
 * most RDMA programs do it (GID + QPN, no connection manager), and then
 * move data with each kind of operation. Every step is checked, not just
 * posted: the program exits 1 at the first thing that is not as it should
 * be, and 0 if all went well.
 *
 * Written only against <infiniband/verbs.h>; run it with
 *	softrnic run -- softrnic-demo
 * or directly when it was linked against softrnic's libibverbs.
 */
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEVICE		"softrnic0"
#define PORT		1
#define DEADLINE_MS	5000
#define BUF_SIZE	4096

/* Offsets into each side's buffer, one region per step. */
#define OFF_SEND	0
#define OFF_WRITE	1024
#define OFF_READ	2048
#define OFF_ATOMIC	3072
#define OFF_BADKEY	3584

#define ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Stop at the first failed check: later steps would only add noise. */
#define CHECK(cond, ...)                                                \
	do {                                                            \
		if (!(cond)) {                                          \
			printf("FAILED: ");                             \
			printf(__VA_ARGS__);                            \
			printf("\n");                                   \
			exit(1);                                        \
		}                                                       \
	} while (0)

struct side {
	struct ibv_cq *cq;		/* send and receive completions */
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Wait for the next completion on cq, at most DEADLINE_MS. */
static void wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	uint64_t end = now_ms() + DEADLINE_MS;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now_ms() < end)
		;
	CHECK(n >= 0, "%s: ibv_poll_cq returned %d", what, n);
	CHECK(n == 1, "%s: no completion within %d ms", what, DEADLINE_MS);
}

/* Wait for a completion that must be successful, with this wr_id/opcode. */
static void expect_ok(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t wr_id,
		      enum ibv_wc_opcode op, const char *what)
{
	wait_wc(cq, wc, what);
	CHECK(wc->status == IBV_WC_SUCCESS, "%s: completion status %s", what,
	      ibv_wc_status_str(wc->status));
	CHECK(wc->wr_id == wr_id, "%s: wr_id %llu, want %llu", what,
	      (unsigned long long)wc->wr_id, (unsigned long long)wr_id);
	CHECK(wc->opcode == op, "%s: opcode %d, want %d", what, wc->opcode, op);
}

static void fill(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0, "ibv_query_qp");
	return attr.qp_state;
}

/* ---- device ------------------------------------------------------------ */

static const char *link_layer_str(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	default: return "unspecified";
	}
}

static int mtu_bytes(enum ibv_mtu mtu)
{
	return 128 << mtu;	/* IBV_MTU_256 is 1 */
}

static void gid_str(const union ibv_gid *gid, char *out, size_t len)
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (!memcmp(gid->raw, v4mapped, sizeof(v4mapped)))
		inet_ntop(AF_INET, &gid->raw[12], out, (socklen_t)len);
	else
		inet_ntop(AF_INET6, gid->raw, out, (socklen_t)len);
}

static struct ibv_context *open_device(union ibv_gid *gid)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	char gs[INET6_ADDRSTRLEN];
	int n;

	list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list: no devices");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), DEVICE))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx, "cannot open %s (is this softrnic's libibverbs?)", DEVICE);

	CHECK(ibv_query_device(ctx, &dattr) == 0, "ibv_query_device");
	CHECK(ibv_query_port(ctx, PORT, &pattr) == 0, "ibv_query_port");
	CHECK(ibv_query_gid(ctx, PORT, 0, gid) == 0, "ibv_query_gid");
	gid_str(gid, gs, sizeof(gs));
	printf("device %s: fw %s, node GUID %016llx, %d QPs, atomics %s\n",
	       DEVICE, dattr.fw_ver, (unsigned long long)be64toh(dattr.node_guid),
	       dattr.max_qp, dattr.atomic_cap == IBV_ATOMIC_NONE ? "no" : "yes");
	printf("port %d: %s, MTU %d, link layer %s, GID[0] %s\n", PORT,
	       ibv_port_state_str(pattr.state), mtu_bytes(pattr.active_mtu),
	       link_layer_str(pattr.link_layer), gs);
	CHECK(pattr.state == IBV_PORT_ACTIVE, "port is not active");
	CHECK(dattr.atomic_cap != IBV_ATOMIC_NONE, "device has no atomics");
	return ctx;
}

/* ---- connecting two QPs by hand ---------------------------------------- */

static void side_create(struct ibv_context *ctx, struct ibv_pd *pd, struct side *s)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};

	s->cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq");
	init.send_cq = init.recv_cq = s->cq;
	s->qp = ibv_create_qp(pd, &init);
	CHECK(s->qp, "ibv_create_qp");
	s->buf = calloc(1, BUF_SIZE);
	CHECK(s->buf, "out of memory");
	s->mr = ibv_reg_mr(pd, s->buf, BUF_SIZE, ACCESS_ALL);
	CHECK(s->mr, "ibv_reg_mr");
}

static void side_destroy(struct side *s)
{
	CHECK(ibv_destroy_qp(s->qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_dereg_mr(s->mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(s->cq) == 0, "ibv_destroy_cq");
	free(s->buf);
}

/* RESET -> INIT -> RTR -> RTS, pointing qp at the QP numbered dest_qpn
 * behind GID gid (both QPs live here, so it is our own GID). */
static void connect_qp(struct ibv_qp *qp, const union ibv_gid *gid, uint32_t dest_qpn)
{
	struct ibv_qp_attr init = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = PORT,
		.qp_access_flags = ACCESS_ALL,
	};
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_4096,
		.dest_qp_num = dest_qpn,
		.rq_psn = 0,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = PORT,
			.grh = { .dgid = *gid, .sgid_index = 0, .hop_limit = 64 },
		},
	};
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS,
		.sq_psn = 0,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 4,
	};

	CHECK(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "modify to INIT");
	CHECK(ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "modify to RTR");
	CHECK(ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_MAX_QP_RD_ATOMIC) == 0, "modify to RTS");
}

/* ---- posting ------------------------------------------------------------ */

/* One-SGE send-queue WR from a's buffer at off. */
static void post(struct side *a, struct ibv_send_wr *wr, uint64_t wr_id,
		 size_t off, uint32_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(a->buf + off), .length = len, .lkey = a->mr->lkey,
	};
	struct ibv_send_wr *bad;
	int ret;

	wr->wr_id = wr_id;
	wr->sg_list = &sge;
	wr->num_sge = 1;
	ret = ibv_post_send(a->qp, wr, &bad);
	CHECK(ret == 0, "ibv_post_send: %s", strerror(ret));
}

static void post_rdma(struct side *a, enum ibv_wr_opcode op, uint64_t wr_id,
		      size_t off, uint32_t len, struct side *b, size_t roff, uint32_t rkey)
{
	struct ibv_send_wr wr = { .opcode = op };

	wr.wr.rdma.remote_addr = (uintptr_t)(b->buf + roff);
	wr.wr.rdma.rkey = rkey;
	post(a, &wr, wr_id, off, len);
}

static void post_atomic(struct side *a, enum ibv_wr_opcode op, uint64_t wr_id,
			size_t off, struct side *b, size_t roff,
			uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = { .opcode = op };

	wr.wr.atomic.remote_addr = (uintptr_t)(b->buf + roff);
	wr.wr.atomic.rkey = b->mr->rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	post(a, &wr, wr_id, off, sizeof(uint64_t));
}

/* ---- the steps ---------------------------------------------------------- */

static void step_send_imm(struct side *a, struct side *b)
{
	const uint32_t len = 64, imm = 0x1234;
	struct ibv_sge sge = {
		.addr = (uintptr_t)(b->buf + OFF_SEND), .length = len, .lkey = b->mr->lkey,
	};
	struct ibv_recv_wr rwr = { .wr_id = 100, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htobe32(imm) };
	struct ibv_wc wc;

	CHECK(ibv_post_recv(b->qp, &rwr, &rbad) == 0, "ibv_post_recv");
	fill(a->buf + OFF_SEND, len, 1);
	post(a, &wr, 1, OFF_SEND, len);
	expect_ok(a->cq, &wc, 1, IBV_WC_SEND, "SEND");
	expect_ok(b->cq, &wc, 100, IBV_WC_RECV, "RECV");
	CHECK(wc.byte_len == len, "RECV byte_len %u, want %u", wc.byte_len, len);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "RECV without IBV_WC_WITH_IMM");
	CHECK(be32toh(wc.imm_data) == imm, "imm %#x, want %#x", be32toh(wc.imm_data), imm);
	CHECK(wc.qp_num == b->qp->qp_num, "RECV qp_num %#x", wc.qp_num);
	CHECK(!memcmp(a->buf + OFF_SEND, b->buf + OFF_SEND, len), "received bytes differ");
	printf("SEND %u bytes + imm %#x -> RECV completion ok, bytes match\n", len, imm);
}

static void step_write(struct side *a, struct side *b)
{
	const uint32_t len = 512;
	struct ibv_wc wc;

	fill(a->buf + OFF_WRITE, len, 2);
	post_rdma(a, IBV_WR_RDMA_WRITE, 2, OFF_WRITE, len, b, OFF_WRITE, b->mr->rkey);
	expect_ok(a->cq, &wc, 2, IBV_WC_RDMA_WRITE, "RDMA WRITE");
	CHECK(!memcmp(a->buf + OFF_WRITE, b->buf + OFF_WRITE, len), "written bytes differ");
	CHECK(ibv_poll_cq(b->cq, 1, &wc) == 0, "RDMA WRITE made a completion at the target");
	printf("RDMA WRITE %u bytes -> remote memory matches, no completion at the target\n", len);
}

static void step_read(struct side *a, struct side *b)
{
	const uint32_t len = 512;
	struct ibv_wc wc;

	fill(b->buf + OFF_READ, len, 3);
	post_rdma(a, IBV_WR_RDMA_READ, 3, OFF_READ, len, b, OFF_READ, b->mr->rkey);
	expect_ok(a->cq, &wc, 3, IBV_WC_RDMA_READ, "RDMA READ");
	CHECK(wc.byte_len == len, "RDMA READ byte_len %u, want %u", wc.byte_len, len);
	CHECK(!memcmp(a->buf + OFF_READ, b->buf + OFF_READ, len), "read bytes differ");
	printf("RDMA READ %u bytes -> local memory matches remote\n", len);
}

static void step_atomics(struct side *a, struct side *b)
{
	uint64_t *target = (uint64_t *)(b->buf + OFF_ATOMIC);
	uint64_t *result = (uint64_t *)(a->buf + OFF_ATOMIC);
	struct ibv_wc wc;

	*target = 100;
	*result = 0;
	post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 4, OFF_ATOMIC, b, OFF_ATOMIC, 5, 0);
	expect_ok(a->cq, &wc, 4, IBV_WC_FETCH_ADD, "FETCH_AND_ADD");
	CHECK(*result == 100, "FETCH_AND_ADD returned %llu, want 100",
	      (unsigned long long)*result);
	CHECK(*target == 105, "FETCH_AND_ADD left %llu, want 105",
	      (unsigned long long)*target);
	printf("ATOMIC FETCH_AND_ADD +5 -> returned 100, remote now 105\n");

	post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, 5, OFF_ATOMIC, b, OFF_ATOMIC,
		    105, 0xfeedfacecafebeefULL);
	expect_ok(a->cq, &wc, 5, IBV_WC_COMP_SWAP, "CMP_AND_SWP");
	CHECK(*result == 105, "CMP_AND_SWP returned %llu, want 105",
	      (unsigned long long)*result);
	CHECK(*target == 0xfeedfacecafebeefULL, "CMP_AND_SWP left %#llx",
	      (unsigned long long)*target);
	printf("ATOMIC CMP_AND_SWP 105 -> 0xfeedfacecafebeef: returned 105, swapped\n");

	post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, 6, OFF_ATOMIC, b, OFF_ATOMIC, 105, 0);
	expect_ok(a->cq, &wc, 6, IBV_WC_COMP_SWAP, "CMP_AND_SWP (mismatch)");
	CHECK(*result == 0xfeedfacecafebeefULL, "CMP_AND_SWP returned %#llx",
	      (unsigned long long)*result);
	CHECK(*target == 0xfeedfacecafebeefULL, "mismatched CMP_AND_SWP swapped anyway");
	printf("ATOMIC CMP_AND_SWP 105 -> 0 (remote differs): returned current value, not swapped\n");
}

static void step_bad_rkey(struct side *a, struct side *b)
{
	const uint32_t len = 64, bad_rkey = b->mr->rkey ^ 0x00a5a500;
	struct ibv_wc wc;

	fill(a->buf + OFF_BADKEY, len, 4);
	memset(b->buf + OFF_BADKEY, 0xee, len);
	post_rdma(a, IBV_WR_RDMA_WRITE, 7, OFF_BADKEY, len, b, OFF_BADKEY, bad_rkey);
	wait_wc(a->cq, &wc, "RDMA WRITE with a wrong rkey");
	CHECK(wc.wr_id == 7, "wr_id %llu, want 7", (unsigned long long)wc.wr_id);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "status %s, want %s",
	      ibv_wc_status_str(wc.status), ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	for (uint32_t i = 0; i < len; i++)
		CHECK(b->buf[OFF_BADKEY + i] == 0xee, "a write with a wrong rkey changed remote memory");
	CHECK(qp_state(a->qp) == IBV_QPS_ERR, "QP %#x is in state %d, not ERR",
	      a->qp->qp_num, qp_state(a->qp));
	printf("RDMA WRITE with wrong rkey %#x -> %s, remote memory untouched, QP %#x now ERR\n",
	       bad_rkey, ibv_wc_status_str(wc.status), a->qp->qp_num);
}

int main(void)
{
	struct side a, b;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ctx = open_device(&gid);
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	side_create(ctx, pd, &a);
	side_create(ctx, pd, &b);
	connect_qp(a.qp, &gid, b.qp->qp_num);
	connect_qp(b.qp, &gid, a.qp->qp_num);
	CHECK(qp_state(a.qp) == IBV_QPS_RTS && qp_state(b.qp) == IBV_QPS_RTS, "QPs not in RTS");
	printf("QP %#x <-> QP %#x connected by hand (GID index 0), both RTS\n",
	       a.qp->qp_num, b.qp->qp_num);

	step_send_imm(&a, &b);
	step_write(&a, &b);
	step_read(&a, &b);
	step_atomics(&a, &b);
	step_bad_rkey(&a, &b);

	side_destroy(&a);
	side_destroy(&b);
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("all checks passed\n");
	return 0;
}
