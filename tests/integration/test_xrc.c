/* XRC: domains (ibv_open_xrcd), XRC SRQs, XRC_SEND and XRC_RECV QPs and
 * ibv_open_qp, in one process (two contexts, the in-process channel) and
 * between two processes (a TCP stream). Every transfer compares the bytes
 * and checks the completions: a receive completes into the CQ of the SRQ
 * the sender named, with qp_num = the XRC_RECV QP it came through. */
#include "net_common.h"

#include <fcntl.h>

/* ---- helpers ------------------------------------------------------------ */

static struct ibv_xrcd *xrcd_open(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};

	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xsrq_create(struct tctx *t, struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 64, .max_sge = 2 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = t->pd,
		.xrcd = x,
		.cq = cq,
	};
	struct ibv_srq *srq = ibv_create_srq_ex(t->ctx, &a);

	CHECK(srq, "ibv_create_srq_ex(XRC): %s", strerror(errno));
	return srq;
}

static uint32_t srq_num(struct ibv_srq *srq)
{
	uint32_t n = 0;

	CHECK(ibv_get_srq_num(srq, &n) == 0, "ibv_get_srq_num");
	CHECK(n && n <= 0xffffff, "SRQ number %#x", n);
	return n;
}

static struct ibv_qp *tgt_create(struct tctx *t, struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(t->ctx, &a);

	CHECK(qp, "ibv_create_qp_ex(XRC_RECV): %s", strerror(errno));
	CHECK(qp->qp_type == IBV_QPT_XRC_RECV, "qp_type %d", qp->qp_type);
	return qp;
}

static struct ibv_qp *ini_create(struct tctx *t, struct ibv_cq *cq, int wr_api)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = IBV_QPT_XRC_SEND,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = t->pd,
		.send_cq = cq,
		.cap = { .max_send_wr = 32, .max_send_sge = 2 },
	};
	struct ibv_qp *qp;

	if (wr_api) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE;
	}
	qp = ibv_create_qp_ex(t->ctx, &a);
	CHECK(qp, "ibv_create_qp_ex(XRC_SEND): %s", strerror(errno));
	CHECK(a.cap.max_recv_wr == 0, "XRC_SEND max_recv_wr %u", a.cap.max_recv_wr);
	return qp;
}

/* RESET -> INIT -> RTR -> RTS with RC's attribute masks (what pyverbs
 * passes to both halves). */
static void xrc_connect(struct ibv_qp *qp, const union ibv_gid *dgid, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = ACC_ALL,
	};
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS);

	CHECK(rc == 0, "QP %#x to INIT: %s", qp->qp_num, strerror(rc));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 64;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	CHECK(rc == 0, "QP %#x to RTR: %s", qp->qp_num, strerror(rc));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_MAX_QP_RD_ATOMIC);
	CHECK(rc == 0, "QP %#x to RTS: %s", qp->qp_num, strerror(rc));
}

static int post_xrc(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, void *addr,
		    uint32_t len, uint32_t lkey, uint32_t srqn, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = len ? 1 : 0,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0x600dcafe),
	}, *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static void srq_recv(struct ibv_srq *srq, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
}

static int tmpfile_fd(char *path)
{
	int fd;

	strcpy(path, "/tmp/softrnic-xrcd-XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
	return fd;
}

/* ---- one process -------------------------------------------------------- */

/* A sender context (a) and a receiver context (b), connected in-process:
 * b has an XRC_RECV QP and two XRC SRQs, each with its own CQ. */
struct xl {
	struct tctx a, b;
	struct ibv_cq *acq, *bcq1, *bcq2;
	struct ibv_xrcd *xrcd;
	struct ibv_srq *srq1, *srq2;
	struct ibv_qp *ini, *tgt;
	struct buf sa, sb;
};

static void xl_open(struct xl *x, int wr_api)
{
	memset(x, 0, sizeof(*x));
	tctx_open(&x->a);
	tctx_open(&x->b);
	x->acq = ibv_create_cq(x->a.ctx, 64, NULL, NULL, 0);
	x->bcq1 = ibv_create_cq(x->b.ctx, 64, NULL, NULL, 0);
	x->bcq2 = ibv_create_cq(x->b.ctx, 64, NULL, NULL, 0);
	CHECK(x->acq && x->bcq1 && x->bcq2, "ibv_create_cq: %s", strerror(errno));
	x->xrcd = xrcd_open(x->b.ctx, -1, O_CREAT);
	CHECK(x->xrcd, "ibv_open_xrcd(fd -1): %s", strerror(errno));
	x->srq1 = xsrq_create(&x->b, x->xrcd, x->bcq1);
	x->srq2 = xsrq_create(&x->b, x->xrcd, x->bcq2);
	x->ini = ini_create(&x->a, x->acq, wr_api);
	x->tgt = tgt_create(&x->b, x->xrcd);
	xrc_connect(x->tgt, &x->a.gid, x->ini->qp_num);
	xrc_connect(x->ini, &x->b.gid, x->tgt->qp_num);
	buf_alloc(&x->a, &x->sa, 64 * KIB, ACC_ALL);
	buf_alloc(&x->b, &x->sb, 64 * KIB, ACC_ALL);
}

static void xl_close(struct xl *x)
{
	CHECK(ibv_destroy_qp(x->ini) == 0, "destroy XRC_SEND");
	CHECK(ibv_destroy_qp(x->tgt) == 0, "destroy XRC_RECV");
	CHECK(ibv_destroy_srq(x->srq1) == 0, "destroy SRQ 1");
	CHECK(ibv_destroy_srq(x->srq2) == 0, "destroy SRQ 2");
	CHECK(ibv_close_xrcd(x->xrcd) == 0, "ibv_close_xrcd");
	buf_free(&x->sa);
	buf_free(&x->sb);
	ibv_destroy_cq(x->acq);
	ibv_destroy_cq(x->bcq1);
	ibv_destroy_cq(x->bcq2);
	tctx_close(&x->a);
	tctx_close(&x->b);
}

/* SENDs to each of two SRQs (legacy post_send): the bytes land in the
 * named SRQ's buffer and complete into that SRQ's CQ only. */
static void send_two_srqs(void)
{
	struct ibv_wc wc;
	struct xl x;

	xl_open(&x, 0);
	for (int i = 0; i < 4; i++) {
		struct ibv_srq *srq = i & 1 ? x.srq2 : x.srq1;
		struct ibv_cq *cq = i & 1 ? x.bcq2 : x.bcq1, *other = i & 1 ? x.bcq1 : x.bcq2;
		uint32_t len = 1000 + 3000 * (uint32_t)i;
		enum ibv_wr_opcode op = i >= 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;

		fill_pattern(x.sa.p, len, 7 + (uint32_t)i);
		memset(x.sb.p, 0xee, x.sb.len);
		srq_recv(srq, 100 + i, x.sb.p, 32 * KIB, x.sb.mr->lkey);
		CHECK(post_xrc(x.ini, op, 200 + i, x.sa.p, len, x.sa.mr->lkey,
			       srq_num(srq), 0, 0) == 0, "post XRC SEND %d", i);
		expect_wc(x.acq, &wc, 200 + i, IBV_WC_SUCCESS, IBV_WC_SEND, "XRC SEND");
		CHECK(wc.qp_num == x.ini->qp_num, "send qp_num %#x", wc.qp_num);
		expect_wc(cq, &wc, 100 + i, IBV_WC_SUCCESS, IBV_WC_RECV, "XRC receive");
		check_recv_wc(&wc, IBV_WC_RECV, len, x.tgt, x.ini, "XRC receive");
		CHECK(!!(wc.wc_flags & IBV_WC_WITH_IMM) == (op == IBV_WR_SEND_WITH_IMM),
		      "wc_flags %#x", wc.wc_flags);
		if (op == IBV_WR_SEND_WITH_IMM)
			CHECK(wc.imm_data == htobe32(0x600dcafe), "imm %#x", wc.imm_data);
		check_bytes(x.sb.p, x.sa.p, len, "XRC SEND payload");
		check_filled(x.sb.p + len, 0xee, 16, "bytes past the message");
		expect_no_wc(other, 20, "the other SRQ's CQ");
	}
	xl_close(&x);
}

/* The WR API with ibv_wr_set_xrc_srqn, a WRITE (under the SRQ's PD) and
 * a SEND behind it. */
static void wr_api_write_send(void)
{
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;
	struct xl x;

	xl_open(&x, 1);
	qx = ibv_qp_to_qp_ex(x.ini);
	CHECK(qx, "ibv_qp_to_qp_ex");
	fill_pattern(x.sa.p, 8 * KIB, 41);
	memset(x.sb.p, 0, x.sb.len);
	srq_recv(x.srq2, 0x77, x.sb.p + 32 * KIB, 4 * KIB, x.sb.mr->lkey);
	ibv_wr_start(qx);
	qx->wr_id = 0x51;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, x.sb.mr->rkey, (uintptr_t)x.sb.p);
	ibv_wr_set_xrc_srqn(qx, srq_num(x.srq2));
	ibv_wr_set_sge(qx, x.sa.mr->lkey, (uintptr_t)x.sa.p, 4 * KIB);
	qx->wr_id = 0x52;
	ibv_wr_send_imm(qx, htobe32(0x1234));
	ibv_wr_set_xrc_srqn(qx, srq_num(x.srq2));
	ibv_wr_set_sge(qx, x.sa.mr->lkey, (uintptr_t)x.sa.p + 4 * KIB, 4 * KIB);
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_complete");
	expect_wc(x.acq, &wc, 0x51, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "XRC WRITE");
	expect_wc(x.acq, &wc, 0x52, IBV_WC_SUCCESS, IBV_WC_SEND, "XRC SEND_IMM");
	expect_wc(x.bcq2, &wc, 0x77, IBV_WC_SUCCESS, IBV_WC_RECV, "XRC receive");
	check_recv_wc(&wc, IBV_WC_RECV, 4 * KIB, x.tgt, x.ini, "XRC receive");
	CHECK(wc.imm_data == htobe32(0x1234), "imm %#x", wc.imm_data);
	check_bytes(x.sb.p, x.sa.p, 4 * KIB, "XRC WRITE payload");
	check_bytes(x.sb.p + 32 * KIB, x.sa.p + 4 * KIB, 4 * KIB, "XRC SEND payload");
	xl_close(&x);
}

/* IBTA 1.5 atomic write over XRC: checked under the named SRQ's PD, the
 * 8 bytes land whole, no receive is consumed. */
static void wr_api_atomic_write(void)
{
	static const uint8_t val[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t want[32] = { 0 };
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;
	struct xl x;

	xl_open(&x, 1);
	qx = ibv_qp_to_qp_ex(x.ini);
	CHECK(qx, "ibv_qp_to_qp_ex");
	memset(x.sb.p, 0, 32);
	ibv_wr_start(qx);
	qx->wr_id = 0x61;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, x.sb.mr->rkey, (uintptr_t)x.sb.p + 8, val);
	ibv_wr_set_xrc_srqn(qx, srq_num(x.srq1));
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_complete");
	expect_wc(x.acq, &wc, 0x61, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, "XRC atomic write");
	memcpy(want + 8, val, 8);
	check_bytes(x.sb.p, want, 32, "XRC atomic write target");
	expect_no_wc(x.bcq1, 20, "a receive completion for a one-sided op");
	xl_close(&x);
}

/* No receive posted yet: the SEND waits (RNR, rnr_retry 7) and completes
 * once the SRQ gets a receive. */
static void rnr_then_recv(void)
{
	struct ibv_wc wc;
	struct xl x;

	xl_open(&x, 0);
	fill_pattern(x.sa.p, 512, 3);
	CHECK(post_xrc(x.ini, IBV_WR_SEND, 9, x.sa.p, 512, x.sa.mr->lkey,
		       srq_num(x.srq1), 0, 0) == 0, "post");
	expect_no_wc(x.bcq1, 50, "receive before one is posted");
	srq_recv(x.srq1, 8, x.sb.p, 4 * KIB, x.sb.mr->lkey);
	expect_wc(x.bcq1, &wc, 8, IBV_WC_SUCCESS, IBV_WC_RECV, "parked SEND");
	expect_wc(x.acq, &wc, 9, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	check_bytes(x.sb.p, x.sa.p, 512, "parked SEND payload");
	xl_close(&x);
}

/* A SEND naming no SRQ of the XRC_RECV QP's domain: an SRQ number that
 * does not exist, or an SRQ of another domain. The requester gets
 * IBV_WC_REM_ACCESS_ERR, the XRC_RECV QP enters ERROR, no SRQ receives. */
static void bad_srqn_case(int other_domain)
{
	struct ibv_xrcd *x2 = NULL;
	struct ibv_srq *s2 = NULL;
	struct ibv_cq *cq2;
	struct ibv_wc wc;
	uint32_t srqn;
	struct xl x;

	xl_open(&x, 0);
	cq2 = ibv_create_cq(x.b.ctx, 8, NULL, NULL, 0);
	CHECK(cq2, "ibv_create_cq");
	if (other_domain) {
		x2 = xrcd_open(x.b.ctx, -1, O_CREAT);
		CHECK(x2, "second XRCD");
		s2 = xsrq_create(&x.b, x2, cq2);
		srq_recv(s2, 1, x.sb.p, 4 * KIB, x.sb.mr->lkey);
		srqn = srq_num(s2);
	} else {
		srqn = srq_num(x.srq1) ^ 0x800000;	/* nobody's */
	}
	srq_recv(x.srq1, 2, x.sb.p, 4 * KIB, x.sb.mr->lkey);
	CHECK(post_xrc(x.ini, IBV_WR_SEND, 3, x.sa.p, 64, x.sa.mr->lkey, srqn, 0, 0) == 0,
	      "post");
	expect_wc(x.acq, &wc, 3, IBV_WC_REM_ACCESS_ERR, -1, "SEND to a foreign SRQ");
	CHECK(wait_qp_state(x.tgt, IBV_QPS_ERR, DEADLINE_MS), "XRC_RECV QP not in ERROR");
	expect_no_wc(x.bcq1, 20, "SRQ 1");
	expect_no_wc(cq2, 20, "the other domain's SRQ");
	if (s2) {
		CHECK(ibv_close_xrcd(x2) == EBUSY, "close of a domain with an SRQ: not EBUSY");
		CHECK(ibv_destroy_srq(s2) == 0, "destroy SRQ");
		CHECK(ibv_close_xrcd(x2) == 0, "close second XRCD");
	}
	ibv_destroy_cq(cq2);
	xl_close(&x);
}

static void bad_srqn(void) { bad_srqn_case(0); }
static void domain_mismatch(void) { bad_srqn_case(1); }

/* ibv_open_xrcd(3) fd/oflags rules, and one domain per inode: a second
 * context opening the same file reaches the first one's XRC_RECV QP
 * (ibv_open_qp) and SRQ; the domain outlives the handle that made it. */
static void xrcd_semantics(void)
{
	struct ibv_xrcd_init_attr bad = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
	struct ibv_xrcd *x1, *x2, *xp, *xo;
	struct ibv_qp_open_attr oa;
	struct ibv_qp *tgt, *h, *ini;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_srq *srq;
	struct ibv_cq *cq, *acq;
	struct tctx a, b;
	struct buf sa, sb;
	struct ibv_wc wc;
	char path[64], path2[64];
	int fd, fd2;

	tctx_open(&a);
	tctx_open(&b);
	fd = tmpfile_fd(path);
	fd2 = tmpfile_fd(path2);
	errno = 0;
	CHECK(!ibv_open_xrcd(a.ctx, &bad) && errno == EINVAL, "no OFLAGS: errno %d", errno);
	CHECK(!xrcd_open(a.ctx, -1, 0) && errno == EINVAL, "fd -1 without O_CREAT");
	CHECK(!xrcd_open(a.ctx, fd, 0) && errno == EINVAL, "no domain, no O_CREAT");
	CHECK(!xrcd_open(a.ctx, 9999, O_CREAT) && errno == EBADF, "bad fd: errno %d", errno);
	x1 = xrcd_open(a.ctx, fd, O_CREAT | O_EXCL);
	CHECK(x1, "O_CREAT|O_EXCL on a new inode: %s", strerror(errno));
	CHECK(!xrcd_open(b.ctx, fd, O_CREAT | O_EXCL) && errno == EINVAL, "O_EXCL again");
	x2 = xrcd_open(b.ctx, fd, 0);	/* the same inode, another context */
	CHECK(x2, "second open of the inode: %s", strerror(errno));
	xo = xrcd_open(b.ctx, fd2, O_CREAT);
	CHECK(xo, "another inode");
	xp = xrcd_open(b.ctx, -1, O_CREAT);
	CHECK(xp, "private domain");

	/* XRC_RECV QP and SRQ made through different handles of one domain */
	cq = ibv_create_cq(b.ctx, 16, NULL, NULL, 0);
	acq = ibv_create_cq(b.ctx, 16, NULL, NULL, 0);
	CHECK(cq && acq, "ibv_create_cq");
	tgt = tgt_create(&a, x1);
	srq = xsrq_create(&b, x2, cq);
	memset(&oa, 0, sizeof(oa));
	oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
		       IBV_QP_OPEN_ATTR_CONTEXT;
	oa.qp_num = tgt->qp_num;
	oa.qp_type = IBV_QPT_XRC_RECV;
	oa.qp_context = &oa;
	oa.xrcd = xo;
	CHECK(!ibv_open_qp(b.ctx, &oa) && errno == EINVAL, "open_qp from another domain");
	oa.xrcd = xp;
	CHECK(!ibv_open_qp(b.ctx, &oa) && errno == EINVAL, "open_qp from a private domain");
	oa.xrcd = x2;
	oa.qp_num = tgt->qp_num ^ 0x80;
	CHECK(!ibv_open_qp(b.ctx, &oa) && errno == ENOENT, "open_qp of no QP: errno %d", errno);
	oa.qp_num = tgt->qp_num;
	h = ibv_open_qp(b.ctx, &oa);
	CHECK(h, "ibv_open_qp: %s", strerror(errno));
	CHECK(h->qp_num == tgt->qp_num && h->qp_type == IBV_QPT_XRC_RECV &&
	      h->qp_context == &oa && h->context == b.ctx, "opened handle fields");
	/* the creator's handle goes first; the QP stays for the other */
	CHECK(ibv_destroy_qp(tgt) == 0, "destroy the creating handle");
	CHECK(ibv_close_xrcd(x1) == 0, "close the first handle (the domain stays)");

	ini = ini_create(&b, acq, 0);
	xrc_connect(h, &b.gid, ini->qp_num);	/* modify through the handle */
	xrc_connect(ini, &a.gid, h->qp_num);
	CHECK(ibv_query_qp(h, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi) == 0, "query the handle");
	CHECK(qa.qp_state == IBV_QPS_RTS && qi.qp_type == IBV_QPT_XRC_RECV &&
	      qa.cap.max_send_wr == 0 && qa.cap.max_recv_wr == 0, "query: state %d", qa.qp_state);
	buf_alloc(&b, &sa, 4 * KIB, ACC_ALL);
	buf_alloc(&b, &sb, 4 * KIB, ACC_ALL);
	fill_pattern(sa.p, 3000, 5);
	srq_recv(srq, 11, sb.p, 4 * KIB, sb.mr->lkey);
	CHECK(post_xrc(ini, IBV_WR_SEND, 12, sa.p, 3000, sa.mr->lkey, srq_num(srq), 0, 0) == 0,
	      "post");
	expect_wc(acq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	expect_wc(cq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV, "receive");
	check_recv_wc(&wc, IBV_WC_RECV, 3000, h, ini, "receive");
	check_bytes(sb.p, sa.p, 3000, "payload");

	/* XRC QPs have no receive queue; an XRC_RECV QP no send queue */
	{
		struct ibv_recv_wr rw = { .wr_id = 1 }, *rb;
		struct ibv_send_wr sw = { .wr_id = 1, .opcode = IBV_WR_SEND }, *sbad;

		CHECK(ibv_post_recv(ini, &rw, &rb) == EINVAL, "post_recv on XRC_SEND");
		CHECK(ibv_post_recv(h, &rw, &rb) == EINVAL, "post_recv on XRC_RECV");
		CHECK(ibv_post_send(h, &sw, &sbad) == EINVAL, "post_send on XRC_RECV");
		struct ibv_qp_ex *hx = ibv_qp_to_qp_ex(h);

		ibv_wr_start(hx);
		hx->wr_id = 1;
		ibv_wr_send(hx);
		CHECK(ibv_wr_complete(hx) != 0, "WR API on an opened XRC_RECV handle");
	}
	CHECK(ibv_close_xrcd(x2) == EBUSY, "close of the last handle with objects: not EBUSY");
	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(h) == 0, "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
	CHECK(ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(xo) == 0 && ibv_close_xrcd(xp) == 0,
	      "close");
	/* the inode's domain is gone with its last handle */
	CHECK(!xrcd_open(a.ctx, fd, 0) && errno == EINVAL, "domain outlived its handles");
	buf_free(&sa);
	buf_free(&sb);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(acq);
	close(fd);
	close(fd2);
	unlink(path);
	unlink(path2);
	tctx_close(&a);
	tctx_close(&b);
}

/* ---- two processes over TCP ------------------------------------------- */

/* Side B (receiver) makes the XRC_RECV QP and two SRQs and tells A the QP
 * and SRQ numbers, its GID, buffer address and rkey; A (sender) makes the
 * XRC_SEND QP. SENDs to each SRQ and a WRITE, then a SEND to an SRQ
 * number B does not have: REM_ACCESS_ERR. */
struct xinfo {
	uint8_t gid[16];
	uint32_t qpn, srqn1, srqn2, rkey;
	uint64_t addr;
};

static void tcp_side_b(int fd)
{
	struct net_end n = { .role = NET_B, .fd = fd };
	struct ibv_cq *cq1, *cq2;
	struct ibv_srq *s1, *s2;
	struct ibv_xrcd *x;
	struct ibv_qp *tgt;
	struct xinfo me, peer;
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&n.t);
	cq1 = ibv_create_cq(n.t.ctx, 16, NULL, NULL, 0);
	cq2 = ibv_create_cq(n.t.ctx, 16, NULL, NULL, 0);
	CHECK(cq1 && cq2, "B: ibv_create_cq");
	x = xrcd_open(n.t.ctx, -1, O_CREAT);
	CHECK(x, "B: ibv_open_xrcd");
	s1 = xsrq_create(&n.t, x, cq1);
	s2 = xsrq_create(&n.t, x, cq2);
	tgt = tgt_create(&n.t, x);
	buf_alloc(&n.t, &b, 256 * KIB, ACC_ALL);
	memcpy(me.gid, n.t.gid.raw, 16);
	me.qpn = tgt->qp_num;
	me.srqn1 = srq_num(s1);
	me.srqn2 = srq_num(s2);
	me.rkey = b.mr->rkey;
	me.addr = (uintptr_t)b.p;
	oob_write(fd, &me, sizeof(me));
	oob_read(fd, &peer, sizeof(peer), NET_OOB_MS);
	memcpy(n.peer_gid.raw, peer.gid, 16);
	srq_recv(s1, 1, b.p + 128 * KIB, 64 * KIB, b.mr->lkey);
	srq_recv(s2, 2, b.p + 192 * KIB, 64 * KIB, b.mr->lkey);
	xrc_connect(tgt, &n.peer_gid, peer.qpn);
	expect_wc(cq1, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "B: SEND to SRQ 1");
	CHECK(wc.byte_len == 40000 && wc.qp_num == tgt->qp_num, "B: byte_len %u qp_num %#x",
	      wc.byte_len, wc.qp_num);
	check_pattern(b.p + 128 * KIB, 40000, 1, "B: SRQ 1 payload");
	expect_wc(cq2, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RECV, "B: SEND_IMM to SRQ 2");
	CHECK(wc.byte_len == 100 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      wc.imm_data == htobe32(0x600dcafe), "B: SEND_IMM fields");
	check_pattern(b.p + 192 * KIB, 100, 2, "B: SRQ 2 payload");
	net_expect(&n, 0x3, "B: A's WRITE completed");
	check_pattern(b.p, 100 * KIB, 3, "B: WRITE payload");
	CHECK(wait_qp_state(tgt, IBV_QPS_ERR, DEADLINE_MS), "B: XRC_RECV QP not in ERROR");
	expect_no_wc(cq1, 20, "B: SRQ 1 after the bad SEND");
	net_sync(&n, 0x4);
	CHECK(ibv_destroy_qp(tgt) == 0, "B: destroy QP");
	CHECK(ibv_destroy_srq(s1) == 0 && ibv_destroy_srq(s2) == 0, "B: destroy SRQs");
	CHECK(ibv_close_xrcd(x) == 0, "B: close XRCD");
	buf_free(&b);
	ibv_destroy_cq(cq1);
	ibv_destroy_cq(cq2);
	tctx_close(&n.t);
}

static void tcp_side_a(int fd)
{
	struct net_end n = { .role = NET_A, .fd = fd };
	struct xinfo me, peer;
	struct ibv_qp *ini;
	struct ibv_cq *cq;
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&n.t);
	cq = ibv_create_cq(n.t.ctx, 16, NULL, NULL, 0);
	CHECK(cq, "A: ibv_create_cq");
	ini = ini_create(&n.t, cq, 0);
	buf_alloc(&n.t, &b, 256 * KIB, ACC_ALL);
	memset(&me, 0, sizeof(me));
	memcpy(me.gid, n.t.gid.raw, 16);
	me.qpn = ini->qp_num;
	oob_write(fd, &me, sizeof(me));
	oob_read(fd, &peer, sizeof(peer), NET_OOB_MS);
	memcpy(n.peer_gid.raw, peer.gid, 16);
	xrc_connect(ini, &n.peer_gid, peer.qpn);

	fill_pattern(b.p, 40000, 1);
	CHECK(post_xrc(ini, IBV_WR_SEND, 11, b.p, 40000, b.mr->lkey, peer.srqn1, 0, 0) == 0,
	      "A: post SEND");
	expect_wc(cq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_SEND, "A: SEND to SRQ 1");
	fill_pattern(b.p + 64 * KIB, 100, 2);
	CHECK(post_xrc(ini, IBV_WR_SEND_WITH_IMM, 12, b.p + 64 * KIB, 100, b.mr->lkey,
		       peer.srqn2, 0, 0) == 0, "A: post SEND_IMM");
	expect_wc(cq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_SEND, "A: SEND_IMM to SRQ 2");
	fill_pattern(b.p + 128 * KIB, 100 * KIB, 3);
	CHECK(post_xrc(ini, IBV_WR_RDMA_WRITE, 13, b.p + 128 * KIB, 100 * KIB, b.mr->lkey,
		       peer.srqn1, peer.addr, peer.rkey) == 0, "A: post WRITE");
	expect_wc(cq, &wc, 13, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "A: WRITE");
	net_put(&n, 0x3);
	CHECK(post_xrc(ini, IBV_WR_SEND, 14, b.p, 10, b.mr->lkey,
		       peer.srqn1 ^ peer.srqn2 ^ 0x400000, 0, 0) == 0, "A: post bad SEND");
	expect_wc(cq, &wc, 14, IBV_WC_REM_ACCESS_ERR, -1, "A: SEND to no SRQ");
	net_sync(&n, 0x4);
	CHECK(ibv_destroy_qp(ini) == 0, "A: destroy QP");
	buf_free(&b);
	ibv_destroy_cq(cq);
	tctx_close(&n.t);
}

static void tcp_two_processes(void)
{
	int fd, st;
	pid_t pid = net_fork_side(&fd);

	if (pid == 0) {
		tcp_side_b(fd);
		exit(0);
	}
	tcp_side_a(fd);
	st = net_wait_child(pid, 10000);
	net_check_child_status(st, "side B");
	close(fd);
}

/* SOFTRNIC_EXT=0 on both sides: the stream speaks plain iWARP, which has
 * no XRC header, so an XRC WR fails locally (docs/CONFIG.md). */
static void tcp_no_ext(void)
{
	struct ibv_qp *qp;
	struct ibv_xrcd *x;
	struct ibv_cq *cq;
	struct xinfo me = { 0 }, peer;
	struct tctx t;
	struct buf b;
	struct ibv_wc wc;
	int fd, st;
	pid_t pid;

	setenv("SOFTRNIC_EXT", "0", 1);
	pid = net_fork_side(&fd);
	tctx_open(&t);
	cq = ibv_create_cq(t.ctx, 8, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	if (pid == 0) {
		struct net_end n = { .role = NET_B, .fd = fd };

		x = xrcd_open(t.ctx, -1, O_CREAT);
		CHECK(x, "B: ibv_open_xrcd");
		qp = tgt_create(&t, x);
		n.t = t;
		memcpy(me.gid, t.gid.raw, 16);
		me.qpn = qp->qp_num;
		oob_write(fd, &me, sizeof(me));
		oob_read(fd, &peer, sizeof(peer), NET_OOB_MS);
		xrc_connect(qp, (union ibv_gid *)peer.gid, peer.qpn);
		net_sync(&n, 0x9);
		CHECK(ibv_destroy_qp(qp) == 0 && ibv_close_xrcd(x) == 0, "B: teardown");
		ibv_destroy_cq(cq);
		tctx_close(&t);
		exit(0);
	}
	struct net_end n = { .role = NET_A, .fd = fd };

	qp = ini_create(&t, cq, 0);
	buf_alloc(&t, &b, 4096, ACC_ALL);
	memcpy(me.gid, t.gid.raw, 16);
	me.qpn = qp->qp_num;
	oob_write(fd, &me, sizeof(me));
	oob_read(fd, &peer, sizeof(peer), NET_OOB_MS);
	xrc_connect(qp, (union ibv_gid *)peer.gid, peer.qpn);
	CHECK(post_xrc(qp, IBV_WR_SEND, 5, b.p, 16, b.mr->lkey, 1, 0, 0) == 0, "post");
	expect_wc(cq, &wc, 5, IBV_WC_LOC_QP_OP_ERR, -1, "XRC SEND without extensions");
	n.t = t;
	net_sync(&n, 0x9);
	CHECK(ibv_destroy_qp(qp) == 0, "destroy");
	buf_free(&b);
	ibv_destroy_cq(cq);
	tctx_close(&t);
	st = net_wait_child(pid, 10000);
	net_check_child_status(st, "side B");
	close(fd);
}

int main(int argc, char **argv)
{
	static const struct subtest tests[] = {
		SUBTEST(send_two_srqs),
		SUBTEST(wr_api_write_send),
		SUBTEST(wr_api_atomic_write),
		SUBTEST(rnr_then_recv),
		SUBTEST(bad_srqn),
		SUBTEST(domain_mismatch),
		SUBTEST(xrcd_semantics),
		SUBTEST(tcp_two_processes),
		SUBTEST(tcp_no_ext),
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
