/* Helpers for the cross-process integration tests (test_net_*.c).
 *
 * Header-only on purpose: tests/CMakeLists.txt builds every .c file in
 * tests/integration except common.c as its own test program, so shared
 * code that is not common.c lives here, as static functions.
 *
 * A cross-process subtest has two sides, A and B, each a separate process
 * with its own softrnic context, CQs, QP and buffer. net_fork_run() runs one
 * subtest: it forks, the child becomes B and the parent A; both open the
 * device AFTER the fork (no verbs object ever crosses a fork), exchange
 * (GID index 0, QPN, PSN, buffer address/rkey/length) over a socketpair,
 * connect their QPs with ah_attr.is_global = 1 and dgid = the peer's GID,
 * and run their side's function. The socketpair stays open for the test's
 * own out-of-band messages (net_sync, net_put/net_get).
 *
 * The same side functions can run over a plain TCP connection between two
 * unrelated processes (net_tcp_listen / net_tcp_connect): that is how
 * netns.sh runs one side in each network namespace.
 *
 * Bounds: the subtest runner (common.c) arms an alarm in A; B arms its own
 * and dies with its parent (PR_SET_PDEATHSIG). When A fails (CHECK ->
 * exit), an atexit handler kills B by PID and reaps it. Every out-of-band
 * read has a deadline, so a dead peer is a failure, not a hang.
 */
#ifndef INTEG_NET_COMMON_H
#define INTEG_NET_COMMON_H

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NET_UNUSED __attribute__((unused))

#define KIB (1u << 10)
#define MIB (1u << 20)

/* B's own alarm (A's comes from run_subtests). */
#define NET_CHILD_TIMEOUT_S 30
/* Deadline of one out-of-band read. */
#define NET_OOB_MS 20000

enum net_role { NET_A = 0, NET_B = 1 };

struct net_opts {
	enum ibv_qp_type type;
	uint32_t max_send_wr, max_recv_wr;
	uint32_t max_send_sge, max_recv_sge;
	uint32_t max_inline;
	int sq_sig_all;
	unsigned int access;    /* qp_access_flags */
	unsigned int mr_access; /* access of the main buffer */
	size_t buf_len;         /* main buffer */
	int cqe;
	uint8_t rd_atomic;
	int rcq_chan; /* give the receive CQ a completion channel */
	int scq_chan; /* ... the send CQ (the same channel, n->ch) */
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	/* each side enters a user namespace of its own before it opens the
	 * device (as `softrnic run` unprivileged does) */
	int own_userns;
	/* each side gets ENOSYS from pidfd_open and pidfd_getfd (a seccomp
	 * filter), as under valgrind, some sandboxes and kernels before 5.3 */
	int no_pidfd;
	/* the QP takes its receives from an SRQ of max_recv_wr (n->srq) */
	int srq;
};

/* What each side tells the other. */
struct net_info {
	uint8_t gid[16];
	uint32_t qpn;
	uint32_t psn;
	uint64_t addr; /* main buffer */
	uint64_t len;
	uint32_t rkey;
	uint32_t pad;
};

struct net_end {
	enum net_role role;
	int fd;       /* out-of-band stream to the other side */
	pid_t peer_pid; /* A in fork mode: B's pid; else 0 */
	struct net_opts o;
	struct tctx t;
	struct ibv_comp_channel *ch; /* rcq's channel, if o.rcq_chan */
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_srq *srq; /* if o.srq */
	struct buf b;
	struct net_info me, peer;
	union ibv_gid peer_gid;
};

typedef void (*net_side_fn)(struct net_end *n);

static NET_UNUSED struct net_opts net_opts_default(void)
{
	struct net_opts o = {
		.type = IBV_QPT_RC,
		.max_send_wr = 128,
		.max_recv_wr = 128,
		.max_send_sge = 4,
		.max_recv_sge = 4,
		.max_inline = 0,
		.access = ACC_ALL,
		.mr_access = ACC_ALL,
		.buf_len = 4 * MIB,
		.cqe = 512,
		.rd_atomic = 4,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.min_rnr_timer = 12,
	};
	return o;
}

/* ---- out of band ------------------------------------------------------- */

static NET_UNUSED void oob_write(int fd, const void *p, size_t len)
{
	const uint8_t *q = p;

	while (len) {
		ssize_t n = send(fd, q, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0, "out-of-band write: %s (did the peer die?)",
		      n < 0 ? strerror(errno) : "0 bytes");
		q += n;
		len -= (size_t)n;
	}
}

static NET_UNUSED void oob_read(int fd, void *p, size_t len, int ms)
{
	uint8_t *q = p;
	uint64_t end = now_ms() + (uint64_t)ms;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)end - (int64_t)now_ms();
		if (left < 0)
			left = 0;
		int r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		CHECK(r > 0, "out-of-band read: nothing from the peer within %d ms",
		      ms);
		ssize_t n = recv(fd, q, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0, "out-of-band read: %s (the peer went away)",
		      n < 0 ? strerror(errno) : "EOF");
		q += n;
		len -= (size_t)n;
	}
}

static NET_UNUSED void net_put(struct net_end *n, uint64_t v)
{
	uint64_t w = htobe64(v);

	oob_write(n->fd, &w, sizeof(w));
}

static NET_UNUSED uint64_t net_get(struct net_end *n)
{
	uint64_t w;

	oob_read(n->fd, &w, sizeof(w), NET_OOB_MS);
	return be64toh(w);
}

/* Expect a specific value from the peer (a step marker). */
static NET_UNUSED void net_expect(struct net_end *n, uint64_t want,
				  const char *what)
{
	uint64_t v = net_get(n);

	CHECK(v == want, "%s: out-of-band value %#llx, want %#llx", what,
	      (unsigned long long)v, (unsigned long long)want);
}

/* Barrier: both sides say tag and wait for the other's. */
static NET_UNUSED void net_sync(struct net_end *n, uint64_t tag)
{
	net_put(n, tag);
	net_expect(n, tag, "sync");
}

/* ---- verbs setup ------------------------------------------------------- */

/* UD: RESET->INIT (Q_Key)->RTR->RTS, the IBTA UD attribute set. */
#define NET_UD_QKEY 0x11111111u
static NET_UNUSED void net_ud_ready(struct ibv_qp *qp, uint32_t psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qkey = NET_UD_QKEY,
	};
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_QKEY);
	CHECK(rc == 0, "UD modify RESET->INIT: %s", strerror(rc));
	a.qp_state = IBV_QPS_RTR;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	CHECK(rc == 0, "UD modify INIT->RTR: %s", strerror(rc));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	CHECK(rc == 0, "UD modify RTR->RTS: %s", strerror(rc));
}

static NET_UNUSED void net_qp_connect(struct net_end *n)
{
	const struct net_opts *o = &n->o;
	uint8_t rd = o->rd_atomic;
	int rc;

	if (n->t.dattr.max_qp_rd_atom && rd > n->t.dattr.max_qp_rd_atom)
		rd = (uint8_t)n->t.dattr.max_qp_rd_atom;
	if (n->t.dattr.max_qp_init_rd_atom &&
	    rd > n->t.dattr.max_qp_init_rd_atom)
		rd = (uint8_t)n->t.dattr.max_qp_init_rd_atom;
	if (o->type == IBV_QPT_UD) {
		net_ud_ready(n->qp, n->me.psn);	/* no peer to name */
		return;
	}

	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = o->access,
	};
	rc = ibv_modify_qp(n->qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS);
	CHECK(rc == 0, "modify RESET->INIT: %s", strerror(rc));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = n->peer.qpn;
	a.rq_psn = n->peer.psn;
	a.max_dest_rd_atomic = rd;
	a.min_rnr_timer = o->min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = n->peer_gid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
		   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (o->type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	rc = ibv_modify_qp(n->qp, &a, mask);
	CHECK(rc == 0, "modify INIT->RTR: %s", strerror(rc));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = n->me.psn;
	a.timeout = o->timeout;
	a.retry_cnt = o->retry_cnt;
	a.rnr_retry = o->rnr_retry;
	a.max_rd_atomic = rd;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (o->type == IBV_QPT_RC)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	rc = ibv_modify_qp(n->qp, &a, mask);
	CHECK(rc == 0, "modify RTR->RTS: %s", strerror(rc));
}

/* Open the device, create everything, exchange addresses, connect. */
static NET_UNUSED void net_setup(struct net_end *n)
{
	const struct net_opts *o = &n->o;

	tctx_open(&n->t);
	if (o->rcq_chan || o->scq_chan) {
		n->ch = ibv_create_comp_channel(n->t.ctx);
		CHECK(n->ch, "ibv_create_comp_channel: %s", strerror(errno));
	}
	n->scq = ibv_create_cq(n->t.ctx, o->cqe, NULL, o->scq_chan ? n->ch : NULL, 0);
	CHECK(n->scq, "ibv_create_cq: %s", strerror(errno));
	n->rcq = ibv_create_cq(n->t.ctx, o->cqe, n, o->rcq_chan ? n->ch : NULL, 0);
	CHECK(n->rcq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr ia = {
		.send_cq = n->scq,
		.recv_cq = n->rcq,
		.cap = {
			.max_send_wr = o->max_send_wr,
			.max_recv_wr = o->max_recv_wr,
			.max_send_sge = o->max_send_sge,
			.max_recv_sge = o->max_recv_sge,
			.max_inline_data = o->max_inline,
		},
		.qp_type = o->type,
		.sq_sig_all = o->sq_sig_all,
	};
	if (o->srq) {
		struct ibv_srq_init_attr sa = {
			.attr = { .max_wr = o->max_recv_wr, .max_sge = o->max_recv_sge },
		};

		n->srq = ibv_create_srq(n->t.pd, &sa);
		CHECK(n->srq, "ibv_create_srq: %s", strerror(errno));
		ia.srq = n->srq;
	}
	n->qp = ibv_create_qp(n->t.pd, &ia);
	CHECK(n->qp, "ibv_create_qp(type %d): %s", o->type, strerror(errno));
	CHECK(ia.cap.max_inline_data >= o->max_inline,
	      "max_inline_data %u < %u", ia.cap.max_inline_data,
	      o->max_inline);
	buf_alloc(&n->t, &n->b, o->buf_len, o->mr_access);

	memset(&n->me, 0, sizeof(n->me));
	memcpy(n->me.gid, n->t.gid.raw, 16);
	n->me.qpn = htobe32(n->qp->qp_num);
	n->me.psn = htobe32(n->role == NET_A ? 0x1234u : 0xabcdeu);
	n->me.addr = htobe64((uintptr_t)n->b.p);
	n->me.len = htobe64(n->b.len);
	n->me.rkey = htobe32(n->b.mr->rkey);
	oob_write(n->fd, &n->me, sizeof(n->me));
	oob_read(n->fd, &n->peer, sizeof(n->peer), NET_OOB_MS);
	/* keep both in host order from here on */
	n->me.qpn = n->qp->qp_num;
	n->me.psn = n->role == NET_A ? 0x1234u : 0xabcdeu;
	n->me.addr = (uintptr_t)n->b.p;
	n->me.len = n->b.len;
	n->me.rkey = n->b.mr->rkey;
	n->peer.qpn = be32toh(n->peer.qpn);
	n->peer.psn = be32toh(n->peer.psn);
	n->peer.addr = be64toh(n->peer.addr);
	n->peer.len = be64toh(n->peer.len);
	n->peer.rkey = be32toh(n->peer.rkey);
	memcpy(n->peer_gid.raw, n->peer.gid, 16);
	if (getenv("INTEG_NET_VERBOSE"))
		NOTE("side %c: pid %d QPN %#x, peer QPN %#x (%s dials)",
		     n->role == NET_A ? 'A' : 'B', (int)getpid(), n->me.qpn,
		     n->peer.qpn, n->me.qpn > n->peer.qpn ? "this side" :
							  "the peer");
	net_qp_connect(n);
	/* Diagnostic knob: INTEG_NET_WARMUP=1 makes each side exchange one
	 * zero-byte SEND before the test, so the test starts on a stream that
	 * is known to be up (tells "posted while connecting" bugs apart). */
	if (getenv("INTEG_NET_WARMUP") && atoi(getenv("INTEG_NET_WARMUP"))) {
		struct ibv_wc wc;

		post_recv1(n->qp, 0x3a3a, NULL, 0, 0);
		net_sync(n, 0x3a3a);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 0x3a3b, NULL, 0, 0,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0,
		      "post warm-up SEND");
		expect_wc(n->rcq, &wc, 0x3a3a, IBV_WC_SUCCESS, IBV_WC_RECV,
			  "warm-up receive");
		expect_wc(n->scq, &wc, 0x3a3b, IBV_WC_SUCCESS, IBV_WC_SEND,
			  "warm-up SEND");
		net_sync(n, 0x3a3c);
	}
}

static NET_UNUSED void net_teardown(struct net_end *n)
{
	int rc;

	if (n->qp) {
		rc = ibv_destroy_qp(n->qp);
		CHECK(rc == 0, "ibv_destroy_qp: %s", strerror(rc));
	}
	if (n->srq) {
		rc = ibv_destroy_srq(n->srq);
		CHECK(rc == 0, "ibv_destroy_srq: %s", strerror(rc));
	}
	if (n->scq) {
		rc = ibv_destroy_cq(n->scq);
		CHECK(rc == 0, "ibv_destroy_cq: %s", strerror(rc));
	}
	if (n->rcq) {
		rc = ibv_destroy_cq(n->rcq);
		CHECK(rc == 0, "ibv_destroy_cq: %s", strerror(rc));
	}
	if (n->ch)
		CHECK(ibv_destroy_comp_channel(n->ch) == 0,
		      "ibv_destroy_comp_channel");
	if (n->b.mr)
		buf_free(&n->b);
	tctx_close(&n->t);
	n->qp = NULL;
	n->srq = NULL;
	n->scq = n->rcq = NULL;
	n->ch = NULL;
}

/* ---- common steps ---------------------------------------------------- */

#define TAG_FENCE 0xfe11ce00u

/* A zero-byte SEND from A behind one-sided operations: once B has its
 * receive completion, everything A did before has been placed (RC order).
 * a_fence and b_fence run together, one on each side. */
static NET_UNUSED void a_fence(struct net_end *n)
{
	struct ibv_wc wc;

	net_expect(n, TAG_FENCE, "fence: B's receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0xfe0, NULL, 0, 0,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post fence SEND");
	expect_wc(n->scq, &wc, 0xfe0, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "fence SEND");
}

static NET_UNUSED void b_fence(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 0xfe1, NULL, 0, 0);
	net_put(n, TAG_FENCE);
	expect_wc(n->rcq, &wc, 0xfe1, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "fence receive");
}

/* Receive-side checks against the peer (another process). */
static NET_UNUSED void net_check_recv(const struct ibv_wc *wc, int opcode,
				      uint32_t byte_len, struct net_end *n,
				      const char *what)
{
	CHECK(wc->status == IBV_WC_SUCCESS, "%s: status %s", what,
	      ibv_wc_status_str(wc->status));
	CHECK((int)wc->opcode == opcode, "%s: opcode %s (%d), want %s", what,
	      wc_opcode_str(wc->opcode), wc->opcode, wc_opcode_str(opcode));
	CHECK(wc->byte_len == byte_len, "%s: byte_len %u, want %u", what,
	      wc->byte_len, byte_len);
	CHECK(wc->qp_num == n->qp->qp_num, "%s: qp_num %u, want %u", what,
	      wc->qp_num, n->qp->qp_num);
	CHECK(wc->src_qp == 0 || wc->src_qp == n->peer.qpn,
	      "%s: src_qp %u, want %u (or 0: RC leaves it undefined)", what,
	      wc->src_qp, n->peer.qpn);
}

/* CHECK that len bytes at p hold fill_pattern(seed). */
static NET_UNUSED void check_pattern(const void *p, size_t len, uint32_t seed,
				     const char *what)
{
	if (!len)
		return;
	uint8_t *want = malloc(len);

	CHECK(want, "malloc %zu", len);
	fill_pattern(want, len, seed);
	check_bytes(p, want, len, what);
	free(want);
}

static NET_UNUSED void wait_err(struct ibv_qp *qp, int ms, const char *what)
{
	CHECK(wait_qp_state(qp, IBV_QPS_ERR, ms), "%s: QP state %d, want ERR",
	      what, qp_state(qp));
}

/* ---- running the two sides -------------------------------------------- */

static pid_t net_child_pid;

static void net_kill_child(void)
{
	pid_t pid = net_child_pid;

	if (pid > 0) {
		net_child_pid = 0;
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

/* Wait up to ms for the child to exit; returns its wait status, or -1
 * (after killing it) if it did not. */
static NET_UNUSED int net_wait_child(pid_t pid, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			if (net_child_pid == pid)
				net_child_pid = 0;
			return st;
		}
		if (r < 0 && errno != EINTR)
			return -1;
		if (now_ms() > end) {
			net_kill_child();
			return -1;
		}
		usleep(2000);
	}
}

static NET_UNUSED void net_check_child_status(int st, const char *what)
{
	CHECK(st != -1, "%s: side B did not exit in time", what);
	if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP)
		SKIP("side B skipped");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "%s: side B %s %d", what,
	      WIFEXITED(st) ? "exited with status" : "was killed by signal",
	      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* Run one subtest in two processes. Side functions may end with the QP in
 * any state; unless they exit themselves, the common teardown runs. */
/* Fork the side-B process of a two-process subtest: returns its pid in the
 * parent (side A), 0 in the child, *fd the out-of-band stream to the
 * other side. The child dies with its parent and is bounded by an alarm;
 * an atexit handler kills it if A fails. */
static NET_UNUSED void net_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t len = (ssize_t)strlen(text);

	CHECK(fd >= 0 && write(fd, text, (size_t)len) == len, "write %s: %s", path,
	      strerror(errno));
	close(fd);
}

/* Enter a user namespace of our own, ourselves mapped to its root (as
 * `softrnic run` does for its sysfs view when unprivileged). Skips the
 * subtest where the system has none to give. */
static NET_UNUSED void net_enter_userns(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	char map[64];

	if (unshare(CLONE_NEWUSER))
		SKIP("no user namespace here: %s", strerror(errno));
	net_write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	net_write_file("/proc/self/uid_map", map);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	net_write_file("/proc/self/gid_map", map);
}

/* pidfd_open and pidfd_getfd fail with ENOSYS from now on (x86-64 and
 * aarch64 numbers: the same there). */
static NET_UNUSED void net_block_pidfd(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	};
	struct sock_fprog prog = { .len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f };

	CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs: %s", strerror(errno));
	CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0, "seccomp: %s", strerror(errno));
	CHECK(syscall(SYS_pidfd_open, getpid(), 0) < 0 && errno == ENOSYS, "pidfd_open not blocked");
}

static NET_UNUSED pid_t net_fork_side(int *fd)
{
	static int registered;
	int sv[2];
	pid_t parent = getpid(), pid;

	signal(SIGPIPE, SIG_IGN);
	if (!registered) {
		atexit(net_kill_child);
		registered = 1;
	}
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
	      "socketpair: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		net_child_pid = 0;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		alarm(NET_CHILD_TIMEOUT_S);
		close(sv[0]);
		*fd = sv[1];
		return 0;
	}
	net_child_pid = pid;
	close(sv[1]);
	*fd = sv[0];
	return pid;
}

static NET_UNUSED void net_fork_run(const struct net_opts *o, net_side_fn fa,
				    net_side_fn fb)
{
	struct net_end n;
	int fd;
	pid_t pid = net_fork_side(&fd);

	memset(&n, 0, sizeof(n));
	n.fd = fd;
	n.o = *o;
	if (pid == 0) {
		n.role = NET_B;
		if (o->own_userns)
			net_enter_userns();
		if (o->no_pidfd)
			net_block_pidfd();
		net_setup(&n);
		fb(&n);
		net_teardown(&n);
		close_audit("side B");
		exit(0);
	}
	n.role = NET_A;
	n.peer_pid = pid;
	if (o->own_userns)
		net_enter_userns();
	if (o->no_pidfd)
		net_block_pidfd();
	net_setup(&n);
	fa(&n);
	if (n.qp)
		net_teardown(&n);
	/* a side A that reaped B itself (peer death tests) clears peer_pid */
	if (n.peer_pid) {
		int st = net_wait_child(pid, 10000);
		net_check_child_status(st, "after the test");
	}
	close(fd);
}

/* Reap the send completions of requests posted with wr_id 0, 1, 2, ...
 * in order: those there now (upto 0), or every one below upto, each
 * waited for. Each must be a successful completion of the next wr_id,
 * of opcode op; *done counts. */
static NET_UNUSED void net_reap(struct net_end *n, uint32_t *done, uint32_t upto,
				enum ibv_wc_opcode op)
{
	struct ibv_wc wc;

	for (;;) {
		if (upto) {
			if (*done >= upto)
				return;
			CHECK(poll_one(n->scq, &wc, DEADLINE_MS) == 1, "send completion %u missing",
			      *done);
		} else if (ibv_poll_cq(n->scq, 1, &wc) != 1) {
			return;
		}
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == *done && wc.opcode == op,
		      "send completion %u: %s wr_id %llu opcode %d", *done,
		      ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id, wc.opcode);
		(*done)++;
	}
}

/* net_reap of SENDs. */
static NET_UNUSED void net_reap_sends(struct net_end *n, uint32_t *done, uint32_t upto)
{
	net_reap(n, done, upto, IBV_WC_SEND);
}

/* The shared area (rings) of this process's same-host streams, if mapped:
 * base and size. */
static NET_UNUSED size_t shm_mapping(uint8_t **base)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	size_t len = 0;

	CHECK(f, "open /proc/self/maps");
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (!strstr(line, "/memfd:softrnic-shm") || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		*base = (uint8_t *)lo;
		len = hi - lo;
		break;
	}
	fclose(f);
	return len;
}

/* Both rings of the shared area (shm_mapping) have carried a record: a
 * line of each that is not all zeros (a small record's header word is
 * zeroed again as it is read, its body is left), so the switch is done
 * both ways. Before it, a scribble there would be written over by the
 * rings' first records and never be seen (the offerer maps the rings at
 * the offer; the first SENDs may still go on TCP). The rings follow the
 * 4 KiB header, two of a size. */
static NET_UNUSED bool shm_line_used(const uint8_t *p)
{
	for (int i = 0; i < 64; i++)
		if (p[i])
			return true;
	return false;
}

static NET_UNUSED bool shm_rings_used(const uint8_t *base, size_t len)
{
	size_t ring = (len - 4 * KIB) / 2;

	return shm_line_used(base + 4 * KIB) && shm_line_used(base + 4 * KIB + ring);
}

/* A descriptor of the rings' memfd (the shared area at base, len bytes),
 * read-write: one the library keeps (the offerer does), or the mapping's
 * (/proc/self/map_files, CAP_SYS_ADMIN); -1 if neither. */
/* Pings (ping: the test's own, one SEND each way) until B has seen both
 * rings of the shared area carry a record (shm_rings_used): what a test
 * then writes there is read, not written over by the switch's first
 * records. A's side; net_until_used_b runs beside it and tells. */
static NET_UNUSED void net_until_used_a(struct net_end *n, void (*ping)(struct net_end *, uint64_t))
{
	for (uint64_t id = 1;; id++) {
		ping(n, id);
		if (net_get(n))
			return;
		CHECK(id < 64, "the rings carried nothing in %d rounds", (int)id);
	}
}

/* ... B's side: the shared area's base (*base) and size. */
static NET_UNUSED size_t net_until_used_b(struct net_end *n, void (*ping)(struct net_end *, uint64_t),
					  uint8_t **base)
{
	for (uint64_t id = 1;; id++) {
		size_t len;
		bool used;

		ping(n, id);
		len = shm_mapping(base);
		used = len && shm_rings_used(*base, len);
		net_put(n, used);
		if (used)
			return len;
		CHECK(id < 64, "the rings carried nothing in %d rounds", (int)id);
	}
}

static NET_UNUSED int shm_rings_fd(const uint8_t *base, size_t len)
{
	char path[128], link[256];

	for (int i = 3; i < 1024; i++) {
		ssize_t k;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
		k = readlink(path, link, sizeof(link) - 1);
		if (k > 0) {
			link[k] = 0;
			if (strstr(link, "memfd:softrnic-shm"))
				return open(path, O_RDWR | O_CLOEXEC);
		}
	}
	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
		 (unsigned long)(uintptr_t)base, (unsigned long)(uintptr_t)(base + len));
	return open(path, O_RDWR | O_CLOEXEC);
}

/* ---- counts: the stats line each side prints (SOFTRNIC_STATS=1) -------- */

/* The sum of FIELD over the stats lines in the file at path; -1 if none. */
static NET_UNUSED long long stats_sum(const char *path, const char *field)
{
	FILE *f = fopen(path, "r");
	char line[512];
	long long v = -1;

	CHECK(f, "open %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *p, key[64];

		if (strncmp(line, "softrnic stats:", 15))
			continue;
		snprintf(key, sizeof(key), " %s ", field);
		p = strstr(line, key);
		if (p)
			v = (v < 0 ? 0 : v) + strtoll(p + strlen(key), NULL, 10);
	}
	fclose(f);
	return v;
}

/* Run the pair in a process of its own whose stderr, with the stats line
 * each side prints at exit (SOFTRNIC_STATS=1), goes to a new file named
 * in path: the pair's wait status. no_map: SOFTRNIC_SHM_MAP=0 there. */
static NET_UNUSED int pair_with_stats(const struct net_opts *o, net_side_fn fa, net_side_fn fb, bool no_map,
			   char path[64])
{
	pid_t pid;
	int fd, st;

	snprintf(path, 64, "/tmp/softrnic-shm-stats.XXXXXX");
	fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
	fflush(stderr);
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		setenv("SOFTRNIC_STATS", "1", 1);
		if (no_map)
			setenv("SOFTRNIC_SHM_MAP", "0", 1);
		CHECK(dup2(fd, 2) == 2, "dup2");
		net_fork_run(o, fa, fb);
		exit(0);
	}
	close(fd);
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	return st;
}

/* Done with pair_with_stats' file: shown first if show (a failure's
 * context). */
static NET_UNUSED void stats_done(const char *path, bool show)
{
	char cmd[128];

	if (show) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", path);
		if (system(cmd)) {
			/* (shown what there is) */
		}
	}
	unlink(path);
}

/* Run the pair with stats lines, and sum field over both: the pair must
 * pass and the sum be within [lo, hi] (both lines shown otherwise). what
 * names the count in the note and in a failure. */
#define STR_(x) #x
#define STR(x) STR_(x)	/* (a round count, in what's text) */

/* The same, run again (up to tries runs in all) while a pair that
 * passed counted too few: for a count that a run reaches only most of
 * the time (a scheduler's choice decides it), never for a failed pair. */
static NET_UNUSED void pair_count_tries(const struct net_opts *o, net_side_fn fa, net_side_fn fb,
					const char *field, long long lo, long long hi,
					const char *what, int tries)
{
	for (int run = 1;; run++) {
		char path[64];
		int st = pair_with_stats(o, fa, fb, false, path);
		long long v = stats_sum(path, field);
		bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;

		NOTE("%s (%s): %lld%s", what, field, v, run > 1 ? " (run again)" : "");
		if (ok && v < lo && run < tries) {
			stats_done(path, false);
			continue;
		}
		stats_done(path, !ok || v < lo || v > hi);
		CHECK(ok, "the pair failed (status %#x)", st);
		CHECK(v >= lo && v <= hi, "%s (%s): %lld, want %lld to %lld", what, field, v, lo,
		      hi);
		return;
	}
}

static NET_UNUSED void pair_count(const struct net_opts *o, net_side_fn fa, net_side_fn fb,
		       const char *field, long long lo, long long hi, const char *what)
{
	pair_count_tries(o, fa, fb, field, lo, hi, what, 1);
}

/* ---- plain TCP out-of-band (two unrelated processes, e.g. netns) ------- */

static NET_UNUSED int net_tcp_listen_accept(uint16_t port, int ms)
{
	int one = 1;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };

	CHECK(l >= 0, "socket: %s", strerror(errno));
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	      "bind port %u: %s", port, strerror(errno));
	CHECK(listen(l, 1) == 0, "listen: %s", strerror(errno));
	printf("listening on port %u\n", port);
	fflush(stdout);
	struct pollfd pfd = { .fd = l, .events = POLLIN };
	CHECK(poll(&pfd, 1, ms) == 1, "no client within %d ms", ms);
	int fd = accept(l, NULL, NULL);
	CHECK(fd >= 0, "accept: %s", strerror(errno));
	close(l);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static NET_UNUSED int net_tcp_connect(const char *addr, uint16_t port, int ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	uint64_t end = now_ms() + (uint64_t)ms;
	int one = 1;

	CHECK(inet_pton(AF_INET, addr, &sa.sin_addr) == 1,
	      "bad IPv4 address %s", addr);
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		CHECK(fd >= 0, "socket: %s", strerror(errno));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof(one));
			return fd;
		}
		int e = errno;
		close(fd);
		CHECK(now_ms() < end, "connect %s:%u: %s", addr, port,
		      strerror(e));
		usleep(100000);
	}
}

struct net_case {
	const char *name;
	void (*opts)(struct net_opts *o); /* may be NULL */
	net_side_fn a, b;
};

/* Run every case (or those named in names[0..nnames)) as one side over an
 * existing out-of-band stream; returns the exit status for main(). */
static NET_UNUSED int net_run_remote(int fd, enum net_role role,
				     const struct net_case *c, size_t ncase)
{
	int pass = 0;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < ncase; i++) {
		struct net_end n;

		memset(&n, 0, sizeof(n));
		n.role = role;
		n.fd = fd;
		n.o = net_opts_default();
		if (c[i].opts)
			c[i].opts(&n.o);
		net_sync(&n, 0x5e0000u + i);
		uint64_t t0 = now_ms();
		net_setup(&n);
		if (i == 0) {
			char me[64], peer[64];

			inet_ntop(AF_INET6, n.me.gid, me, sizeof(me));
			inet_ntop(AF_INET6, n.peer.gid, peer, sizeof(peer));
			printf("side %c: local GID %s, peer GID %s\n",
			       role == NET_A ? 'A' : 'B', me, peer);
		}
		(role == NET_A ? c[i].a : c[i].b)(&n);
		/* also when the side destroyed its QP itself: CQs, MR and
		 * context are still ours to release */
		net_teardown(&n);
		printf("[PASS] %s (side %c, %u ms)\n", c[i].name,
		       role == NET_A ? 'A' : 'B', (unsigned)(now_ms() - t0));
		pass++;
	}
	net_sync(&(struct net_end){ .fd = fd }, 0x5eeeeeu);
	printf("%d passed\n", pass);
	return 0;
}

#endif
