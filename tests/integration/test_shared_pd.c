/* Shared PDs: ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3) and
 * their unimports. A second context opened on a dup of the first one's
 * cmd_fd shares its PDs and MRs by handle: imported objects carry the same
 * handles and keys, an imported MR works as a local SGE in the importer's
 * QPs and its rkey works for a peer, unimport leaves the object alone, and
 * destroying through one holder behaves as the man pages say. Across
 * processes, the importer's accesses to an imported MR are the exporter's
 * memory (process_vm_readv/writev). */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN 8192

/* The exporter (a: the tctx's context and PD) and the importer (b). */
struct shared {
	struct tctx t;
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	int cmd_fd;		/* the dup handed to ibv_import_device */
};

static void shared_open(struct shared *s)
{
	tctx_open(&s->t);
	s->cmd_fd = dup(s->t.ctx->cmd_fd);
	CHECK(s->cmd_fd >= 0, "dup(cmd_fd %d): %s", s->t.ctx->cmd_fd,
	      strerror(errno));
	s->ictx = ibv_import_device(s->cmd_fd);
	CHECK(s->ictx, "ibv_import_device: %s", strerror(errno));
	s->ipd = ibv_import_pd(s->ictx, s->t.pd->handle);
	CHECK(s->ipd, "ibv_import_pd(%u): %s", s->t.pd->handle,
	      strerror(errno));
}

static void fd_closed(int fd, const char *what)
{
	CHECK(fcntl(fd, F_GETFD) < 0 && errno == EBADF,
	      "%s: fd %d still open", what, fd);
}

/* One end of an RC connection on a given context and PD. */
static void end_on(struct ibv_context *ctx, struct ibv_pd *pd,
		   struct qp_end *e)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 2, .max_recv_sge = 2 },
	};

	e->scq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	e->rcq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(e->scq && e->rcq, "ibv_create_cq: %s", strerror(errno));
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	e->qp = ibv_create_qp(pd, &ia);
	CHECK(e->qp, "ibv_create_qp: %s", strerror(errno));
}

static void end_free(struct qp_end *e)
{
	CHECK(ibv_destroy_qp(e->qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(e->scq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_cq(e->rcq) == 0, "ibv_destroy_cq");
}

/* p->a on the importer (imported PD), p->b on the exporter (its PD). */
static void cross_pair(struct shared *s, struct pair *p)
{
	struct pair_opts o = pair_opts_default();

	memset(p, 0, sizeof(*p));
	p->t = &s->t;
	end_on(s->ictx, s->ipd, &p->a);
	end_on(s->t.ctx, s->t.pd, &p->b);
	connect_qps(&s->t, p->a.qp, p->b.qp, &o);
}

static void cross_pair_free(struct pair *p)
{
	end_free(&p->a);
	end_free(&p->b);
}

/* Handles and keys are the originals'; addr is NULL (ibv_import_mr(3)). */
static void handles(void)
{
	struct shared s;
	struct buf b;

	shared_open(&s);
	CHECK(s.ictx != s.t.ctx, "import returned the same context");
	CHECK(s.ictx->cmd_fd == s.cmd_fd, "imported cmd_fd %d, want %d",
	      s.ictx->cmd_fd, s.cmd_fd);
	CHECK(s.ipd != s.t.pd, "import returned the same ibv_pd");
	CHECK(s.ipd->handle == s.t.pd->handle && s.ipd->context == s.ictx,
	      "imported PD handle %u ctx %p", s.ipd->handle,
	      (void *)s.ipd->context);

	buf_alloc(&s.t, &b, LEN, ACC_ALL);
	struct ibv_mr *imr = ibv_import_mr(s.ipd, b.mr->handle);

	CHECK(imr, "ibv_import_mr(%u): %s", b.mr->handle, strerror(errno));
	CHECK(imr->handle == b.mr->handle && imr->lkey == b.mr->lkey &&
		      imr->rkey == b.mr->rkey && imr->length == b.mr->length,
	      "imported MR handle %u lkey %#x rkey %#x length %zu",
	      imr->handle, imr->lkey, imr->rkey, imr->length);
	CHECK(imr->addr == NULL && imr->pd == s.ipd && imr->context == s.ictx,
	      "imported MR addr %p pd %p ctx %p", imr->addr, (void *)imr->pd,
	      (void *)imr->context);

	/* A second import of the same objects, even in the same context. */
	struct ibv_pd *ipd2 = ibv_import_pd(s.t.ctx, s.t.pd->handle);

	CHECK(ipd2 && ipd2->handle == s.t.pd->handle, "re-import PD: %s",
	      strerror(errno));

	/* Handles that name nothing, or something of another kind. */
	errno = 0;
	CHECK(!ibv_import_pd(s.ictx, s.t.pd->handle ^ 0x5a5a5a5a) &&
		      errno == EINVAL, "import of a bogus PD handle: errno %d",
	      errno);
	errno = 0;
	CHECK(!ibv_import_mr(s.ipd, s.t.pd->handle) && errno == EINVAL,
	      "a PD handle imported as an MR: errno %d", errno);
	errno = 0;
	CHECK(!ibv_import_pd(s.ictx, b.mr->handle) && errno == EINVAL,
	      "an MR handle imported as a PD: errno %d", errno);

	/* An MR may move to an imported PD (same space), not to a PD of a
	 * context that shares nothing with it. */
	struct tctx other;

	tctx_open(&other);
	CHECK(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_PD, other.pd, NULL, 0,
			   0) == IBV_REREG_MR_ERR_INPUT,
	      "rereg to another context's PD succeeded");
	CHECK(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_PD, s.ipd, NULL, 0, 0) ==
		      0, "rereg to the imported PD: %s", strerror(errno));
	CHECK(ibv_dealloc_pd(s.t.pd) == EBUSY,
	      "the PD is still busy through the import");
	CHECK(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_PD, s.t.pd, NULL, 0, 0) ==
		      0, "rereg back: %s", strerror(errno));
	tctx_close(&other);

	/* Unimports leave the objects to their owners. */
	ibv_unimport_mr(imr);
	ibv_unimport_pd(ipd2);
	ibv_unimport_pd(s.ipd);
	CHECK(ibv_close_device(s.ictx) == 0, "close imported context");
	fd_closed(s.cmd_fd, "ibv_close_device on the import");
	buf_free(&b);
	tctx_close(&s.t);
}

/* Data through an imported MR: as a local SGE in the importer's QP, and
 * its rkey for the peer; and an MR registered through the imported PD
 * serves the exporter's QPs. */
static void datapath(void)
{
	struct shared s;
	struct buf src, dst, ib;
	struct pair p;
	struct ibv_wc wc;
	uint8_t want[LEN];

	shared_open(&s);
	buf_alloc(&s.t, &src, LEN, ACC_ALL);
	buf_alloc(&s.t, &dst, LEN, ACC_ALL);
	struct ibv_mr *isrc = ibv_import_mr(s.ipd, src.mr->handle);

	CHECK(isrc, "ibv_import_mr: %s", strerror(errno));
	/* Registered in the importer, through the imported PD. */
	uint8_t *ibuf = calloc(1, LEN);

	CHECK(ibuf, "calloc");
	ib.p = ibuf;
	ib.len = LEN;
	ib.mr = ibv_reg_mr(s.ipd, ibuf, LEN, ACC_ALL);
	CHECK(ib.mr, "ibv_reg_mr on the imported PD: %s", strerror(errno));
	cross_pair(&s, &p);

	/* SEND from the importer, gathering through the imported lkey. */
	fill_pattern(src.p, LEN, 1);
	post_recv1(p.b.qp, 1, dst.p, LEN, dst.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 2, src.p, LEN, isrc->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.a.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(p.b.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	CHECK(wc.byte_len == LEN, "byte_len %u", wc.byte_len);
	check_bytes(dst.p, src.p, LEN, "SEND through the imported lkey");

	/* The peer WRITEs with the imported rkey into the importer's QP. */
	fill_pattern(dst.p, LEN, 2);
	memcpy(want, dst.p, LEN);
	CHECK(post_send1(p.b.qp, IBV_WR_RDMA_WRITE, 3, dst.p, LEN,
			 dst.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)src.p, isrc->rkey, 0) == 0, "post WRITE");
	expect_wc(p.b.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	/* A SEND after it: placed in order, so the WRITE is in memory. */
	post_recv1(p.a.qp, 4, NULL, 0, 0);
	CHECK(post_send1(p.b.qp, IBV_WR_SEND, 5, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.b.scq, &wc, 5, IBV_WC_SUCCESS, IBV_WC_SEND, "sync send");
	expect_wc(p.a.rcq, &wc, 4, IBV_WC_SUCCESS, IBV_WC_RECV, "sync recv");
	check_bytes(src.p, want, LEN, "WRITE through the imported rkey");

	/* The peer READs it back through the same rkey. */
	memset(dst.p, 0, LEN);
	CHECK(post_send1(p.b.qp, IBV_WR_RDMA_READ, 6, dst.p, LEN,
			 dst.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)src.p, isrc->rkey, 0) == 0, "post READ");
	expect_wc(p.b.scq, &wc, 6, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(dst.p, want, LEN, "READ through the imported rkey");

	/* The importer WRITEs into an exporter MR through the exporter's
	 * QP, from an MR it registered on the imported PD. */
	fill_pattern(ibuf, LEN, 3);
	CHECK(post_send1(p.a.qp, IBV_WR_RDMA_WRITE, 7, ibuf, LEN,
			 ib.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)dst.p, dst.mr->rkey, 0) == 0, "post WRITE");
	expect_wc(p.a.scq, &wc, 7, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	memset(src.p, 0, LEN);
	CHECK(post_send1(p.b.qp, IBV_WR_RDMA_READ, 8, src.p, LEN,
			 src.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)ibuf, ib.mr->rkey, 0) == 0, "post READ");
	expect_wc(p.b.scq, &wc, 8, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(dst.p, ibuf, LEN, "WRITE from the importer's MR");
	check_bytes(src.p, ibuf, LEN, "READ of the importer's MR");

	/* Re-registering through the import moves the region for every
	 * holder: the same rkey now reads the new buffer. */
	uint8_t *moved = calloc(1, LEN);

	CHECK(moved, "calloc");
	fill_pattern(moved, LEN, 5);
	CHECK(ibv_rereg_mr(isrc, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved,
			   LEN, 0) == 0, "ibv_rereg_mr through the import: %s",
	      strerror(errno));
	CHECK(isrc->addr == moved && src.mr->addr == moved,
	      "after rereg: import addr %p, original addr %p, want %p",
	      isrc->addr, src.mr->addr, (void *)moved);
	memset(dst.p, 0, LEN);
	CHECK(post_send1(p.b.qp, IBV_WR_RDMA_READ, 10, dst.p, LEN,
			 dst.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)moved, src.mr->rkey, 0) == 0, "post READ");
	expect_wc(p.b.scq, &wc, 10, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(dst.p, moved, LEN, "READ after rereg through the import");

	/* An MR of an unrelated PD is still out of reach: the PD check is
	 * by PD, not by "any PD of the space". */
	struct ibv_pd *other = ibv_alloc_pd(s.ictx);

	CHECK(other, "ibv_alloc_pd");
	struct ibv_mr *omr = ibv_reg_mr(other, ibuf, LEN, ACC_ALL);

	CHECK(omr, "ibv_reg_mr");
	CHECK(post_send1(p.b.qp, IBV_WR_RDMA_WRITE, 9, dst.p, 64,
			 dst.mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)ibuf, omr->rkey, 0) == 0, "post WRITE");
	expect_wc(p.b.scq, &wc, 9, IBV_WC_REM_ACCESS_ERR, -1,
		  "WRITE to another PD's MR");

	cross_pair_free(&p);
	CHECK(ibv_dereg_mr(omr) == 0, "dereg");
	CHECK(ibv_dealloc_pd(other) == 0, "dealloc");
	CHECK(ibv_dereg_mr(ib.mr) == 0, "dereg the importer's MR");
	free(ibuf);
	ibv_unimport_mr(isrc);
	ibv_unimport_pd(s.ipd);
	CHECK(ibv_close_device(s.ictx) == 0, "close imported context");
	buf_free(&src);
	buf_free(&dst);
	free(moved);
	tctx_close(&s.t);
}

/* The PD is one object whichever holder is used: anything made through
 * either keeps it busy; destroying through one leaves the other holders
 * only to unimport (ibv_import_pd(3), ibv_import_mr(3)). */
static void destroy_rules(void)
{
	struct shared s;
	struct qp_end e;
	int rc;

	shared_open(&s);
	/* A QP on the imported PD keeps the original busy. */
	end_on(s.ictx, s.ipd, &e);
	rc = ibv_dealloc_pd(s.t.pd);
	CHECK(rc == EBUSY, "dealloc with a QP on the import: %d, want EBUSY",
	      rc);
	/* Unimport while the QP lives: the QP keeps working and its
	 * destruction later touches nothing freed. */
	ibv_unimport_pd(s.ipd);
	end_free(&e);

	/* An MR on the original keeps the imported holder's dealloc busy. */
	s.ipd = ibv_import_pd(s.ictx, s.t.pd->handle);
	CHECK(s.ipd, "re-import: %s", strerror(errno));
	uint8_t *mem = calloc(1, LEN);
	struct ibv_mr *mr = ibv_reg_mr(s.t.pd, mem, LEN, ACC_ALL);

	CHECK(mem && mr, "ibv_reg_mr: %s", strerror(errno));
	rc = ibv_dealloc_pd(s.ipd);
	CHECK(rc == EBUSY, "dealloc through the import with an MR: %d", rc);

	/* Deregistering through the import destroys the region: the key
	 * is gone, and the original holder may only be unimported. */
	struct ibv_mr *imr = ibv_import_mr(s.ipd, mr->handle);

	CHECK(imr, "ibv_import_mr: %s", strerror(errno));
	CHECK(ibv_dereg_mr(imr) == 0, "dereg through the import");
	rc = ibv_dereg_mr(mr);
	CHECK(rc == EINVAL, "dereg of a destroyed region: %d, want EINVAL", rc);
	errno = 0;
	CHECK(!ibv_import_mr(s.ipd, mr->handle) && errno == EINVAL,
	      "import of a destroyed region: errno %d", errno);
	ibv_unimport_mr(mr);

	/* Unimporting the original MR leaves the region registered. */
	mr = ibv_reg_mr(s.t.pd, mem, LEN, ACC_ALL);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	uint32_t h = mr->handle, rkey = mr->rkey;

	ibv_unimport_mr(mr);
	imr = ibv_import_mr(s.ipd, h);
	CHECK(imr && imr->rkey == rkey, "import after unimport: %s",
	      strerror(errno));
	CHECK(ibv_dereg_mr(imr) == 0, "dereg through the last holder");

	/* Now the PD is free: dealloc through the import destroys it. */
	CHECK(ibv_dealloc_pd(s.ipd) == 0, "dealloc through the import");
	rc = ibv_dealloc_pd(s.t.pd);
	CHECK(rc == EINVAL, "dealloc of a destroyed PD: %d, want EINVAL", rc);
	errno = 0;
	CHECK(!ibv_import_pd(s.ictx, s.t.pd->handle) && errno == EINVAL,
	      "import of a destroyed PD: errno %d", errno);
	ibv_unimport_pd(s.t.pd);
	s.t.pd = NULL;
	free(mem);
	CHECK(ibv_close_device(s.ictx) == 0, "close imported context");
	tctx_close(&s.t);
}

/* The objects belong to the space, not to the context that made them:
 * the importer keeps using them after the exporter's context is closed. */
static void exporter_closes(void)
{
	struct shared s;
	struct buf src;
	struct qp_end a, b;
	struct ibv_wc wc;
	struct pair_opts o = pair_opts_default();

	shared_open(&s);
	buf_alloc(&s.t, &src, LEN, ACC_ALL);
	struct ibv_mr *imr = ibv_import_mr(s.ipd, src.mr->handle);

	CHECK(imr, "ibv_import_mr: %s", strerror(errno));
	struct ibv_mr *orig = src.mr;
	struct ibv_pd *opd = s.t.pd;

	/* The exporter walks away without destroying anything. */
	ibv_unimport_mr(orig);
	ibv_unimport_pd(opd);
	CHECK(ibv_close_device(s.t.ctx) == 0, "close the exporter");

	end_on(s.ictx, s.ipd, &a);
	end_on(s.ictx, s.ipd, &b);
	uint8_t *dst = calloc(1, LEN);
	struct ibv_mr *dmr = ibv_reg_mr(s.ipd, dst, LEN, ACC_ALL);

	CHECK(dst && dmr, "ibv_reg_mr: %s", strerror(errno));
	connect_qps(&s.t, a.qp, b.qp, &o);
	fill_pattern(src.p, LEN, 4);
	CHECK(post_send1(a.qp, IBV_WR_RDMA_WRITE, 1, src.p, LEN, imr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)dst, dmr->rkey, 0) == 0,
	      "post WRITE");
	expect_wc(a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	memset(src.p, 0, LEN);
	CHECK(post_send1(b.qp, IBV_WR_RDMA_READ, 2, src.p, LEN, imr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)dst, dmr->rkey, 0) == 0,
	      "post READ");
	expect_wc(b.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(src.p, dst, LEN, "round trip after the exporter closed");

	end_free(&a);
	end_free(&b);
	CHECK(ibv_dereg_mr(dmr) == 0, "dereg");
	CHECK(ibv_dereg_mr(imr) == 0, "dereg the exporter's MR via import");
	CHECK(ibv_dealloc_pd(s.ipd) == 0, "dealloc the PD via import");
	CHECK(ibv_close_device(s.ictx) == 0, "close the importer");
	free(dst);
	src.mr = NULL;		/* deregistered above, through the import */
	buf_free(&src);
}

static void send_fd(int sock, int fd)
{
	char byte = 0, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	memset(cbuf, 0, sizeof(cbuf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	CHECK(sendmsg(sock, &m, 0) == 1, "sendmsg: %s", strerror(errno));
}

static int recv_fd(int sock)
{
	char byte, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* What cannot be imported, and the errno that says why: not a descriptor,
 * not a softrnic one, a context that is gone. Another process's context
 * imports, whether the descriptor was inherited or came through
 * SCM_RIGHTS (the cross-process subtest below uses it). */
static void import_errors(void)
{
	struct tctx t;
	int pfd[2], sv[2], keep, status;

	errno = 0;
	CHECK(!ibv_import_device(-1) && errno == EBADF, "fd -1: errno %d",
	      errno);
	CHECK(pipe(pfd) == 0, "pipe");
	errno = 0;
	CHECK(!ibv_import_device(pfd[0]) && errno == EINVAL,
	      "a pipe: errno %d", errno);
	CHECK(fcntl(pfd[0], F_GETFD) >= 0, "a failed import closed the fd");
	close(pfd[0]);
	close(pfd[1]);

	tctx_open(&t);
	keep = dup(t.ctx->cmd_fd);
	CHECK(keep >= 0, "dup");
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	/* Yama's ptrace_scope 1 would let only our ancestors read us. */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	pid_t pid = fork();

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		struct ibv_context *c;
		struct ibv_pd *pd;
		int code = 0, fd;

		/* Inherited across fork: the parent's space, by proxy. */
		c = ibv_import_device(keep);
		if (!c)
			code |= 1;
		pd = c ? ibv_import_pd(c, t.pd->handle) : NULL;
		if (!pd)
			code |= 4;
		errno = 0;
		if (c && (ibv_import_pd(c, t.pd->handle ^ 1) || errno != EINVAL))
			code |= 8;
		if (pd) {
			errno = 0;
			if (ibv_dealloc_pd(pd) != EOPNOTSUPP)
				code |= 16;
			ibv_unimport_pd(pd);
		}
		if (c)
			ibv_close_device(c);
		/* Received from a process whose context we never saw. */
		fd = recv_fd(sv[1]);
		c = fd >= 0 ? ibv_import_device(fd) : NULL;
		if (!c)
			code |= 2;
		else
			ibv_close_device(c);
		_exit(code);
	}
	/* A context the child's memory has never seen. */
	struct ibv_context *late = ibv_open_device(t.ctx->device);

	CHECK(late, "ibv_open_device: %s", strerror(errno));
	send_fd(sv[0], late->cmd_fd);
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "child: status %#x (1: inherited fd, 2: passed fd, 4: PD, "
	      "8: unknown PD, 16: dealloc)", status);
	close(sv[0]);
	close(sv[1]);
	CHECK(ibv_close_device(late) == 0, "close");

	/* A dup that outlived its context. */
	tctx_close(&t);
	errno = 0;
	CHECK(!ibv_import_device(keep) && errno == ENODEV,
	      "a closed context's fd: errno %d", errno);
	close(keep);
}

/* ---- across processes ---------------------------------------------------- */

#define XLEN 16384		/* above 4 KiB: the zero-copy paths' size */

/* What the exporter tells the importer, with its cmd_fd. */
struct xmsg {
	uint32_t pd_handle, mr_handle, qpn;
	uint64_t addr;
};

static void xsend(int sock, const void *p, size_t len)
{
	CHECK(write(sock, p, len) == (ssize_t)len, "write: %s", strerror(errno));
}

static void xrecv(int sock, void *p, size_t len)
{
	CHECK(read(sock, p, len) == (ssize_t)len, "read: %s", strerror(errno));
}

static void xconnect(struct tctx *t, struct ibv_qp *qp, uint32_t dest)
{
	qp_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		   IBV_ACCESS_REMOTE_ATOMIC);
	qp_to_rtr(t, qp, dest, IBV_MTU_1024, 0, 4);
	qp_to_rts(qp, 0, 4);
}

/* Process B: imports A's context, PD and MR; SENDs from the MR to A and
 * to a QP of its own; serves A's WRITE and READ on the rkey; after A
 * deregisters, fails cleanly. */
static void ximporter(int sock)
{
	struct qp_end x, p, q;
	struct tctx t = { 0 };
	struct ibv_pd *ipd;
	struct ibv_mr *imr, *rimr, *lmr;
	struct ibv_wc wc;
	struct xmsg m;
	uint8_t *want, *lbuf;
	char go;
	int fd;

	fd = recv_fd(sock);
	CHECK(fd >= 0, "no cmd_fd received");
	xrecv(sock, &m, sizeof(m));
	t.ctx = ibv_import_device(fd);
	CHECK(t.ctx, "ibv_import_device from another process: %s", strerror(errno));
	CHECK(ibv_query_gid(t.ctx, 1, 0, &t.gid) == 0, "ibv_query_gid");
	CHECK(ibv_query_device(t.ctx, &t.dattr) == 0, "ibv_query_device");
	ipd = ibv_import_pd(t.ctx, m.pd_handle);
	CHECK(ipd && ipd->handle == m.pd_handle, "ibv_import_pd: %s", strerror(errno));
	imr = ibv_import_mr(ipd, m.mr_handle);
	CHECK(imr, "ibv_import_mr: %s", strerror(errno));
	CHECK(imr->lkey == m.mr_handle && imr->rkey == m.mr_handle &&
	      imr->length == XLEN && !imr->addr, "imported MR: lkey %#x rkey %#x "
	      "length %zu addr %p", imr->lkey, imr->rkey, imr->length, imr->addr);
	want = malloc(XLEN);
	lbuf = calloc(1, XLEN);
	CHECK(want && lbuf, "malloc");
	fill_pattern(want, XLEN, 1);
	lmr = ibv_reg_mr(ipd, lbuf, XLEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(lmr, "ibv_reg_mr on the imported PD: %s", strerror(errno));

	/* x: TCP to A's QP; p -> q: within this process. */
	end_on(t.ctx, ipd, &x);
	end_on(t.ctx, ipd, &p);
	end_on(t.ctx, ipd, &q);
	xsend(sock, &x.qp->qp_num, sizeof(x.qp->qp_num));
	xconnect(&t, x.qp, m.qpn);
	xconnect(&t, p.qp, q.qp->qp_num);
	xconnect(&t, q.qp, p.qp->qp_num);

	/* SEND gathered from A's memory, to a QP of ours... */
	post_recv1(q.qp, 1, lbuf, XLEN, lmr->lkey);
	CHECK(post_send1(p.qp, IBV_WR_SEND, 2, (void *)(uintptr_t)m.addr, XLEN,
			 imr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "send from import");
	expect_wc(q.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv in importer");
	CHECK(wc.byte_len == XLEN, "byte_len %u", wc.byte_len);
	check_bytes(lbuf, want, XLEN, "SEND from the imported MR (importer's QP)");

	/* ... and to A's, over TCP; A compares. */
	CHECK(post_send1(x.qp, IBV_WR_SEND, 3, (void *)(uintptr_t)m.addr, XLEN,
			 imr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(x.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_SEND, "send to exporter");

	/* A WRITEs and READs through the rkey; we only serve. Then it
	 * re-registers: the record we imported is withdrawn, and a new
	 * import sees the new one (what A's READ left: pattern 3). */
	xrecv(sock, &go, 1);
	CHECK(go == 'r', "exporter says %c", go);
	rimr = ibv_import_mr(ipd, m.mr_handle);
	CHECK(rimr, "ibv_import_mr after rereg: %s", strerror(errno));
	fill_pattern(want, XLEN, 3);
	post_recv1(q.qp, 5, lbuf, XLEN, lmr->lkey);
	CHECK(post_send1(p.qp, IBV_WR_SEND, 6, (void *)(uintptr_t)m.addr, XLEN,
			 rimr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.scq, &wc, 6, IBV_WC_SUCCESS, IBV_WC_SEND, "send after rereg");
	expect_wc(q.rcq, &wc, 5, IBV_WC_SUCCESS, IBV_WC_RECV, "recv after rereg");
	check_bytes(lbuf, want, XLEN, "SEND from the re-imported MR");
	xsend(sock, "R", 1);
	xrecv(sock, &go, 1);
	CHECK(go == 'd', "exporter says %c", go);

	/* A deregistered: the region is gone for us too. */
	CHECK(post_send1(p.qp, IBV_WR_SEND, 4, (void *)(uintptr_t)m.addr, 64,
			 rimr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.scq, &wc, 4, IBV_WC_LOC_PROT_ERR, -1, "send after dereg");
	errno = 0;
	CHECK(!ibv_import_mr(ipd, m.mr_handle) && errno == EINVAL,
	      "import after dereg: errno %d", errno);
	errno = 0;
	CHECK(ibv_dereg_mr(rimr) == EOPNOTSUPP, "dereg of another process's MR");
	xsend(sock, "w", 1);
	/* A's WRITE to the dead rkey errs the connection; wait for A. */
	xrecv(sock, &go, 1);

	end_free(&x);
	end_free(&p);
	end_free(&q);
	CHECK(ibv_dereg_mr(lmr) == 0, "dereg own MR");
	ibv_unimport_mr(imr);
	ibv_unimport_mr(rimr);
	ibv_unimport_pd(ipd);
	CHECK(ibv_close_device(t.ctx) == 0, "close imported context");
	free(want);
	free(lbuf);
}

static void cross_process(void)
{
	struct tctx t;
	struct qp_end y;
	struct buf a, yb;
	struct ibv_wc wc;
	struct xmsg m;
	uint32_t xqpn;
	int sv[2], status;
	char go;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid_t pid = fork();

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		ximporter(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	/* Yama's ptrace_scope 1 would let only our ancestors read us. */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	tctx_open(&t);
	buf_alloc(&t, &a, XLEN, ACC_ALL);
	buf_alloc(&t, &yb, XLEN, ACC_ALL);
	fill_pattern(a.p, XLEN, 1);
	end_on(t.ctx, t.pd, &y);
	m = (struct xmsg){ .pd_handle = t.pd->handle, .mr_handle = a.mr->handle,
			   .qpn = y.qp->qp_num, .addr = (uintptr_t)a.p };
	send_fd(sv[0], t.ctx->cmd_fd);
	xsend(sv[0], &m, sizeof(m));
	xrecv(sv[0], &xqpn, sizeof(xqpn));
	xconnect(&t, y.qp, xqpn);

	/* B's SEND, gathered from our buffer by B. */
	post_recv1(y.qp, 1, yb.p, XLEN, yb.mr->lkey);
	expect_wc(y.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv from importer");
	CHECK(wc.byte_len == XLEN, "byte_len %u", wc.byte_len);
	check_bytes(yb.p, a.p, XLEN, "SEND from the imported MR (exporter's QP)");

	/* WRITE through B, by the imported rkey: lands in our buffer. */
	fill_pattern(yb.p, XLEN, 2);
	CHECK(post_send1(y.qp, IBV_WR_RDMA_WRITE, 2, yb.p, XLEN, yb.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)a.p, a.mr->rkey, 0) == 0,
	      "post WRITE");
	expect_wc(y.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	check_bytes(a.p, yb.p, XLEN, "WRITE by rkey through the importer");

	/* READ through B: B reads our buffer for us. */
	fill_pattern(a.p, XLEN, 3);
	memset(yb.p, 0, XLEN);
	CHECK(post_send1(y.qp, IBV_WR_RDMA_READ, 3, yb.p, XLEN, yb.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)a.p, a.mr->rkey, 0) == 0,
	      "post READ");
	expect_wc(y.scq, &wc, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	check_bytes(yb.p, a.p, XLEN, "READ by rkey through the importer");

	/* Re-registered (same key): B imports the new record. */
	CHECK(ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   ACC_ALL) == 0, "ibv_rereg_mr: %s", strerror(errno));
	xsend(sv[0], "r", 1);
	xrecv(sv[0], &go, 1);
	CHECK(go == 'R', "importer says %c", go);

	/* Deregistered here: B's accesses fail, and B's responder refuses
	 * our WRITE to the rkey (last on this connection: it ends it). */
	CHECK(ibv_dereg_mr(a.mr) == 0, "dereg");
	a.mr = NULL;
	xsend(sv[0], "d", 1);
	xrecv(sv[0], &go, 1);
	CHECK(go == 'w', "importer says %c", go);
	/* The rkey is dead for B's responder too. */
	memset(a.p, 0x5a, XLEN);
	CHECK(post_send1(y.qp, IBV_WR_RDMA_WRITE, 4, yb.p, 64, yb.mr->lkey,
			 IBV_SEND_SIGNALED, (uintptr_t)a.p, m.mr_handle, 0) == 0,
	      "post WRITE");
	expect_wc(y.scq, &wc, 4, IBV_WC_REM_ACCESS_ERR, -1, "write after dereg");
	check_filled(a.p, 0x5a, XLEN, "buffer after the refused WRITE");
	xsend(sv[0], "e", 1);
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "importer: status %#x", status);
	close(sv[0]);
	end_free(&y);
	buf_free(&a);
	buf_free(&yb);
	tctx_close(&t);
}

/* The exporter exits: the importer's SGEs fail, nothing crashes, and a
 * new import says the exporter is gone. Here the child exports. */
static void exporter_exits(void)
{
	struct tctx t = { 0 };
	struct qp_end p, q;
	struct ibv_pd *ipd;
	struct ibv_mr *imr, *lmr;
	struct ibv_wc wc;
	struct xmsg m;
	uint8_t *lbuf;
	int sv[2], status;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	pid_t pid = fork();

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		struct tctx a;
		struct buf b;
		char go;

		close(sv[0]);
		prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
		tctx_open(&a);
		buf_alloc(&a, &b, XLEN, ACC_ALL);
		fill_pattern(b.p, XLEN, 7);
		m = (struct xmsg){ .pd_handle = a.pd->handle,
				   .mr_handle = b.mr->handle,
				   .addr = (uintptr_t)b.p };
		send_fd(sv[1], a.ctx->cmd_fd);
		xsend(sv[1], &m, sizeof(m));
		xrecv(sv[1], &go, 1);
		_exit(0);	/* no cleanup: as if it crashed */
	}
	close(sv[1]);
	int fd = recv_fd(sv[0]);

	CHECK(fd >= 0, "no cmd_fd");
	xrecv(sv[0], &m, sizeof(m));
	t.ctx = ibv_import_device(fd);
	CHECK(t.ctx, "ibv_import_device: %s", strerror(errno));
	CHECK(ibv_query_gid(t.ctx, 1, 0, &t.gid) == 0, "ibv_query_gid");
	ipd = ibv_import_pd(t.ctx, m.pd_handle);
	CHECK(ipd, "ibv_import_pd: %s", strerror(errno));
	imr = ibv_import_mr(ipd, m.mr_handle);
	CHECK(imr, "ibv_import_mr: %s", strerror(errno));
	lbuf = calloc(1, XLEN);
	CHECK(lbuf, "calloc");
	lmr = ibv_reg_mr(ipd, lbuf, XLEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(lmr, "ibv_reg_mr: %s", strerror(errno));
	end_on(t.ctx, ipd, &p);
	end_on(t.ctx, ipd, &q);
	xconnect(&t, p.qp, q.qp->qp_num);
	xconnect(&t, q.qp, p.qp->qp_num);
	post_recv1(q.qp, 1, lbuf, XLEN, lmr->lkey);
	CHECK(post_send1(p.qp, IBV_WR_SEND, 2, (void *)(uintptr_t)m.addr, XLEN,
			 imr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(q.rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");

	xsend(sv[0], "q", 1);
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(post_send1(p.qp, IBV_WR_SEND, 3, (void *)(uintptr_t)m.addr, 64,
			 imr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(p.scq, &wc, 3, IBV_WC_LOC_PROT_ERR, -1, "send after exit");
	errno = 0;
	CHECK(!ibv_import_mr(ipd, m.mr_handle) && errno == ENODEV,
	      "import after exit: errno %d", errno);
	close(sv[0]);
	end_free(&p);
	end_free(&q);
	CHECK(ibv_dereg_mr(lmr) == 0, "dereg");
	ibv_unimport_mr(imr);
	ibv_unimport_pd(ipd);
	CHECK(ibv_close_device(t.ctx) == 0, "close");
	free(lbuf);
}

static const struct subtest tests[] = {
	SUBTEST(handles),
	SUBTEST(datapath),
	SUBTEST(destroy_rules),
	SUBTEST(exporter_closes),
	SUBTEST(import_errors),
	SUBTEST(cross_process),
	SUBTEST(exporter_exits),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
