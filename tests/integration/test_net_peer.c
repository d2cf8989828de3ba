/* The peer process goes away: killed (SIGKILL) with work outstanding,
 * destroying its QP in an orderly way, tearing everything down while the
 * other side is still writing into it, or exiting (exit(3)) without
 * destroying anything, right after a post, a receive, or its QP's RTS.
 * A is the parent, B the child. See net_common.h. */
#include "net_common.h"

enum { T_READY = 0x100, T_DONE = 0x200, T_CHECKED = 0x300 };

/* Deadline for noticing a lost peer: "a few seconds". */
#define LOST_MS 10000

static void stop_child(struct net_end *n)
{
	int st;

	CHECK(kill(n->peer_pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	CHECK(waitpid(n->peer_pid, &st, WUNTRACED) == n->peer_pid &&
		      WIFSTOPPED(st), "child did not stop");
}

static void kill_child(struct net_end *n)
{
	int st;

	CHECK(kill(n->peer_pid, SIGKILL) == 0, "SIGKILL: %s", strerror(errno));
	while (waitpid(n->peer_pid, &st, 0) < 0 && errno == EINTR)
		;
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	      "child status %#x, want killed by SIGKILL", st);
	net_child_pid = 0;
	n->peer_pid = 0;
}

/* ---- SIGKILL with receives posted and a READ outstanding ----------------- */

static void peer_killed_a(struct net_end *n)
{
	struct ibv_wc wc;

	for (int i = 0; i < 4; i++)
		post_recv1(n->qp, 0xa0 + i, n->b.p + i * 4096, 4096,
			   n->b.mr->lkey);
	/* one READ that works, so the stream is known to be up */
	CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 0x0f, n->b.p + MIB, 4096,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, n->peer.addr,
			 n->peer.rkey, 0) == 0, "post READ");
	expect_wc(n->scq, &wc, 0x0f, IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
		  "READ before the kill");
	net_expect(n, T_READY, "B idle");
	stop_child(n);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 0x10, n->b.p + MIB, MIB,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, n->peer.addr,
			 n->peer.rkey, 0) == 0, "post READ");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x11, n->b.p, 100, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 0x12, n->b.p, 100,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, n->peer.addr,
			 n->peer.rkey, 0) == 0, "post WRITE");
	expect_no_wc(n->scq, 200, "completion while the peer is stopped");
	CHECK(qp_state(n->qp) == IBV_QPS_RTS, "QP left RTS while peer stopped");
	kill_child(n);
	uint64_t t0 = now_ms();

	CHECK(poll_one(n->scq, &wc, LOST_MS),
	      "no completion within %d ms of the peer's death", LOST_MS);
	unsigned ms = (unsigned)(now_ms() - t0);
	CHECK(wc.wr_id == 0x10 && (wc.status == IBV_WC_RETRY_EXC_ERR ||
				   wc.status == IBV_WC_WR_FLUSH_ERR),
	      "head WR: wr_id %#llx status %s, want 0x10 RETRY_EXC_ERR or "
	      "WR_FLUSH_ERR", (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	NOTE("peer SIGKILLed: outstanding READ completed with %s after %u ms",
	     ibv_wc_status_str(wc.status), ms);
	expect_wc(n->scq, &wc, 0x11, IBV_WC_WR_FLUSH_ERR, -1, "SEND behind");
	expect_wc(n->scq, &wc, 0x12, IBV_WC_WR_FLUSH_ERR, -1, "WRITE behind");
	wait_err(n->qp, DEADLINE_MS, "QP after its peer died");
	for (int i = 0; i < 4; i++)
		expect_wc(n->rcq, &wc, 0xa0 + i, IBV_WC_WR_FLUSH_ERR, -1,
			  "posted receive");
	expect_no_wc(n->scq, 50, "extra send completion");
	expect_no_wc(n->rcq, 50, "extra receive completion");
	/* posting in ERR: refused or flushed, never a hang */
	int rc = post_send1(n->qp, IBV_WR_SEND, 0x13, n->b.p, 10,
			    n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0);
	if (rc == 0)
		expect_wc(n->scq, &wc, 0x13, IBV_WC_WR_FLUSH_ERR, -1,
			  "SEND posted in ERR");
}

static void peer_killed_b(struct net_end *n)
{
	fill_pattern(n->b.p, MIB, 3);
	net_put(n, T_READY);
	pause(); /* until killed; the alarm bounds it */
	exit(1);
}

/* SIGKILL in the middle of an 8 MiB SEND stream, no SIGSTOP first */
static void killed_streaming_opts(struct net_opts *o)
{
	o->buf_len = 8 * MIB;
}

static void killed_streaming_a(struct net_end *n)
{
	struct ibv_wc wc;
	int posted = 0, done = 0;

	post_recv1(n->qp, 0xa0, n->b.p, 4096, n->b.mr->lkey);
	net_expect(n, T_READY, "B's receives posted");
	for (int i = 0; i < 16; i++) {
		CHECK(post_send1(n->qp, IBV_WR_SEND, 0x100 + i, n->b.p,
				 8 * MIB, n->b.mr->lkey, IBV_SEND_SIGNALED, 0,
				 0, 0) == 0, "post SEND %d", i);
		posted++;
	}
	/* let a first message complete, then kill B mid-stream */
	expect_wc(n->scq, &wc, 0x100, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "first 8 MiB SEND");
	done = 1;
	uint64_t t0 = now_ms();
	kill_child(n);
	int errs = 0;
	while (done < posted) {
		CHECK(poll_one(n->scq, &wc, LOST_MS),
		      "WR %#x never completed after the peer died",
		      0x100 + done);
		CHECK(wc.wr_id == (uint64_t)(0x100 + done),
		      "completion for %#llx, want %#x (in order)",
		      (unsigned long long)wc.wr_id, 0x100 + done);
		if (wc.status != IBV_WC_SUCCESS) {
			if (!errs)
				CHECK(wc.status == IBV_WC_RETRY_EXC_ERR ||
					      wc.status == IBV_WC_WR_FLUSH_ERR,
				      "first failed WR: %s",
				      ibv_wc_status_str(wc.status));
			else
				CHECK(wc.status == IBV_WC_WR_FLUSH_ERR,
				      "WR %#x after the first error: %s",
				      0x100 + done,
				      ibv_wc_status_str(wc.status));
			errs++;
		} else {
			CHECK(!errs, "success after an error completion");
		}
		done++;
	}
	CHECK(errs > 0, "all 16 SENDs succeeded though B was killed");
	NOTE("%d of %d SENDs failed; all completed %llu ms after the kill",
	     errs, posted, (unsigned long long)(now_ms() - t0));
	wait_err(n->qp, DEADLINE_MS, "QP after its peer died");
	expect_wc(n->rcq, &wc, 0xa0, IBV_WC_WR_FLUSH_ERR, -1, "posted receive");
}

static void killed_streaming_b(struct net_end *n)
{
	/* Receives for 4 of the 16 SENDs only: the rest wait at B (RNR,
	 * rnr_retry 7) when it dies, however fast the stream is, so some
	 * must fail (with all 16 receives posted, a fast enough transport
	 * delivers them all before the kill). */
	for (int i = 0; i < 4; i++)
		post_recv1(n->qp, i, n->b.p, 8 * MIB, n->b.mr->lkey);
	net_put(n, T_READY);
	pause();
	exit(1);
}

/* ---- orderly destroy of the peer's QP ------------------------------------ */

/* Wait for B to end (10 s at most) and check its exit status; A reaped
 * it (net_fork_run does not wait again). */
static void reap_peer(struct net_end *n, const char *who)
{
	int st = net_wait_child(n->peer_pid, 10000);

	net_check_child_status(st, who);
	n->peer_pid = 0;
}

static void quiet_for(struct net_end *n, int ms, const char *when)
{
	char what[128];

	snprintf(what, sizeof(what),
		 "%s: posted receives must not be flushed (IB)", when);
	expect_no_wc(n->rcq, ms, what);
	CHECK(qp_state(n->qp) == IBV_QPS_RTS, "%s: QP state %d, want RTS",
	      when, qp_state(n->qp));
}

static void expect_retry_exc(struct net_end *n, const char *when)
{
	struct ibv_wc wc;
	uint64_t t0 = now_ms();

	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x20, n->b.p, 100, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "%s: post SEND to a destroyed QP", when);
	CHECK(poll_one(n->scq, &wc, LOST_MS),
	      "%s: SEND to a destroyed QP: no completion within %d ms", when,
	      LOST_MS);
	CHECK(wc.wr_id == 0x20 && wc.status == IBV_WC_RETRY_EXC_ERR,
	      "%s: SEND to a destroyed QP: wr_id %#llx status %s, want "
	      "RETRY_EXC_ERR", when, (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	NOTE("%s: SEND to a destroyed QP failed with RETRY_EXC_ERR after %llu ms",
	     when, (unsigned long long)(now_ms() - t0));
	wait_err(n->qp, DEADLINE_MS, "after RETRY_EXC_ERR");
	/* now in ERR: the receives are flushed */
	for (int i = 0; i < 4; i++)
		expect_wc(n->rcq, &wc, 0xa0 + i, IBV_WC_WR_FLUSH_ERR, -1,
			  "receive once the QP is in ERR");
}

/* A's four receives (0xa0...), then its SEND of 1000 bytes of pattern 8
 * (0x1f) to B's receive, completed: traffic first, so the stream is up. */
static void orderly_start(struct net_end *n)
{
	struct ibv_wc wc;

	for (int i = 0; i < 4; i++)
		post_recv1(n->qp, 0xa0 + i, n->b.p + i * 4096, 4096,
			   n->b.mr->lkey);
	fill_pattern(n->b.p + MIB, 1000, 8);
	net_expect(n, T_READY, "B's receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x1f, n->b.p + MIB, 1000,
			 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	expect_wc(n->scq, &wc, 0x1f, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
}

static void orderly_exit_a(struct net_end *n)
{
	orderly_start(n);
	net_expect(n, T_DONE, "B destroyed its QP");
	quiet_for(n, 500, "peer QP destroyed, peer alive");
	net_put(n, T_CHECKED);
	reap_peer(n, "B's orderly exit");
	quiet_for(n, 500, "peer process exited");
	expect_retry_exc(n, "peer exited");
}

/* B's side of orderly_start: its receive, and A's bytes in it. */
static void orderly_recv(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 1, n->b.p, 4096, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_pattern(n->b.p, 1000, 8, "payload");
}

static void orderly_exit_b(struct net_end *n)
{
	orderly_recv(n);
	CHECK(ibv_destroy_qp(n->qp) == 0, "ibv_destroy_qp");
	n->qp = NULL;
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "A checked");
	net_teardown(n);
	exit(0);
}

/* B exits (exit(3)) without destroying anything once it has A's SEND:
 * as if its QP were destroyed (the kernel destroys a process's QPs when
 * it exits), A's QP stays in RTS with its receives posted, and its next
 * SEND fails with IBV_WC_RETRY_EXC_ERR (before: no goodbye came, A's
 * stream ended as lost, its QP went to ERROR and flushed its receives). */
static void exit_orderly_a(struct net_end *n)
{
	orderly_start(n);
	reap_peer(n, "B's exit");
	quiet_for(n, 500, "peer process exited without destroying its QP");
	expect_retry_exc(n, "peer exited without destroying its QP");
}

static void exit_orderly_b(struct net_end *n)
{
	orderly_recv(n);
	exit(0);	/* no ibv_destroy_qp: the process just ends */
}

/* B destroys its QP but keeps its context (and the context's listener)
 * open while A posts. */
static void orderly_alive_a(struct net_end *n)
{
	orderly_start(n);
	net_expect(n, T_DONE, "B destroyed its QP");
	quiet_for(n, 500, "peer QP destroyed, peer alive");
	expect_retry_exc(n, "peer QP destroyed, context open");
	net_put(n, T_CHECKED);
}

static void orderly_alive_b(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 1, n->b.p, 4096, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	CHECK(ibv_destroy_qp(n->qp) == 0, "ibv_destroy_qp");
	n->qp = NULL;
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "A checked");
}

/* ---- destroy everything while the peer is writing into it --------------- */

static void traffic_opts(struct net_opts *o)
{
	o->buf_len = 4 * MIB;
	o->max_send_wr = 64;
}

static void destroy_under_traffic_a(struct net_end *n)
{
	int rc;
	uint8_t *p = n->b.p;
	size_t len = n->b.len;

	net_expect(n, T_READY, "B's WRITEs are landing");
	usleep(100 * 1000);
	rc = ibv_destroy_qp(n->qp);
	CHECK(rc == 0, "ibv_destroy_qp under traffic: %s", strerror(rc));
	n->qp = NULL;
	CHECK(ibv_destroy_cq(n->scq) == 0, "destroy send CQ");
	CHECK(ibv_destroy_cq(n->rcq) == 0, "destroy recv CQ");
	n->scq = n->rcq = NULL;
	rc = ibv_dereg_mr(n->b.mr);
	CHECK(rc == 0, "ibv_dereg_mr under traffic: %s", strerror(rc));
	n->b.mr = NULL;
	/* DESIGN.md 6: once dereg returns, nothing lands in the range */
	uint8_t *snap = malloc(len);
	CHECK(snap, "malloc");
	memcpy(snap, p, len);
	CHECK(ibv_dealloc_pd(n->t.pd) == 0, "ibv_dealloc_pd");
	n->t.pd = NULL;
	CHECK(ibv_close_device(n->t.ctx) == 0, "ibv_close_device");
	n->t.ctx = NULL;
	usleep(300 * 1000);
	check_bytes(p, snap, len, "memory of a deregistered MR");
	free(snap);
	munmap(p, len);
	n->b.p = NULL;
	net_put(n, T_DONE);
	net_expect(n, T_CHECKED, "B saw its WRITEs fail");
}

static void destroy_under_traffic_b(struct net_end *n)
{
	struct ibv_wc wc[16];
	uint64_t posted = 0, completed = 0, t0 = now_ms();
	const uint64_t sig_every = 8;
	int told = 0, failed = 0;
	enum ibv_wc_status first_err = IBV_WC_SUCCESS;
	uint32_t chunk = 64 * KIB;

	fill_pattern(n->b.p, n->b.len, 4);
	while (!failed) {
		CHECK(now_ms() - t0 < 15000,
		      "WRITEs to a destroyed peer never failed (%llu posted)",
		      (unsigned long long)posted);
		/* keep the send queue full */
		int rc = post_send1(n->qp, IBV_WR_RDMA_WRITE, posted,
				    n->b.p + (posted % 64) * chunk, chunk,
				    n->b.mr->lkey,
				    posted % sig_every == sig_every - 1 ?
					    IBV_SEND_SIGNALED : 0,
				    n->peer.addr + (posted % 64) * chunk,
				    n->peer.rkey, 0);
		if (rc == 0)
			posted++;
		else
			CHECK(rc == ENOMEM, "post WRITE: %s", strerror(rc));
		int k = ibv_poll_cq(n->scq, 16, wc);
		CHECK(k >= 0, "poll");
		for (int j = 0; j < k; j++) {
			if (wc[j].status != IBV_WC_SUCCESS && !failed) {
				failed = 1;
				first_err = wc[j].status;
			}
			completed++;
		}
		if (!told && completed >= 16) {
			net_put(n, T_READY);
			told = 1;
		}
		if (rc)
			usleep(100);
	}
	CHECK(told, "no WRITE succeeded before the first error (%s)",
	      ibv_wc_status_str(first_err));
	/* drain: everything else completes (flushed), no hang */
	while (poll_one(n->scq, wc, 300))
		;
	wait_err(n->qp, DEADLINE_MS, "writer after its peer went away");
	NOTE("writer: %llu WRITEs posted; first error %s after %llu ms",
	     (unsigned long long)posted, ibv_wc_status_str(first_err),
	     (unsigned long long)(now_ms() - t0));
	net_expect(n, T_DONE, "A tore down");
	net_put(n, T_CHECKED);
}

/* ---- killed mid-WRITE, then deregister before destroying the QP --------- */

/* B writes large WRITEs into an MR of A's (received straight into it, so
 * the stream holds the MR while a segment is half in); A kills B in the
 * middle, and deregisters that MR while its QP still exists, as qperf
 * does: ibv_dereg_mr must return, not wait for the QP's destruction. */
static void dereg_after_kill_a(struct net_end *n)
{
	size_t len = 64 * MIB;
	uint8_t *dst = malloc(len);
	struct ibv_mr *mr;
	uint64_t t0;

	CHECK(dst, "malloc");
	mr = ibv_reg_mr(n->t.pd, dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "reg_mr: %s", strerror(errno));
	net_put(n, (uintptr_t)dst);
	net_put(n, mr->rkey);
	net_expect(n, T_READY, "B writing");
	usleep(30 * 1000);
	kill_child(n);
	wait_err(n->qp, LOST_MS, "QP after its writer was killed");
	t0 = now_ms();
	alarm(20);	/* a hang here is the bug */
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr: %s", strerror(errno));
	alarm(0);
	NOTE("dereg_mr after the peer died mid-WRITE: %llu ms",
	     (unsigned long long)(now_ms() - t0));
	free(dst);
}

static void dereg_after_kill_b(struct net_end *n)
{
	uint64_t addr = net_get(n);
	uint32_t rkey = (uint32_t)net_get(n);
	struct ibv_wc wc;
	int out = 0;

	net_put(n, T_READY);
	for (;;) {
		/* 4 MiB WRITEs, a few in flight, until killed */
		while (out < 4 && post_send1(n->qp, IBV_WR_RDMA_WRITE, 1, n->b.p, 4 * MIB,
					     n->b.mr->lkey, IBV_SEND_SIGNALED,
					     addr + (uint64_t)(out % 16) * 4 * MIB, rkey, 0) == 0)
			out++;
		if (ibv_poll_cq(n->scq, 1, &wc) == 1)
			out--;
	}
}

static void dereg_after_kill_opts(struct net_opts *o)
{
	o->buf_len = 4 * MIB;
}

/* ---- the peer leaves while its SENDs are held back ----------------------- */

/* B sends more SENDs than A's back-pressure lets in (64 MiB parked, no
 * receive posted), destroys its QP and exits. A's stream does not read
 * while paused, so B's goodbye and FIN sit behind data A will not take:
 * B resets the stream instead, and A's QP goes to ERROR in bounded time,
 * not never (qperf -cm1's server waited for ever for DISCONNECTED). */
static void held_close_a(struct net_end *n)
{
	uint64_t t0;
	int st;

	net_expect(n, T_READY, "B sending");
	/* let the backlog fill and the stream pause */
	usleep(1500 * 1000);
	net_put(n, T_DONE);
	while (waitpid(n->peer_pid, &st, 0) < 0 && errno == EINTR)
		;
	net_child_pid = 0;
	n->peer_pid = 0;
	t0 = now_ms();
	wait_err(n->qp, LOST_MS, "QP whose peer left while held back");
	NOTE("held-back stream: peer's exit noticed after %llu ms",
	     (unsigned long long)(now_ms() - t0));
}

static void held_close_b(struct net_end *n)
{
	struct ibv_wc wc;
	int posted = 0;

	net_put(n, T_READY);
	/* 96 x 1 MiB, more than the 64 MiB A will hold */
	while (posted < 96) {
		if (post_send1(n->qp, IBV_WR_SEND, 1, n->b.p, 1 * MIB, n->b.mr->lkey, 0,
			       0, 0, 0) == 0)
			posted++;
		else
			usleep(1000);
		while (ibv_poll_cq(n->scq, 1, &wc) == 1)
			;
	}
	net_expect(n, T_DONE, "A watching");
	/* an orderly teardown, with everything still in flight */
	CHECK(ibv_destroy_qp(n->qp) == 0, "destroy QP");
	n->qp = NULL;
	_exit(0);
}

static void held_close_opts(struct net_opts *o)
{
	o->buf_len = 1 * MIB;
	o->max_send_wr = 128;
}

/* ---- SQD while a SEND waits for its ACK ----------------------------------- */

/* B is stopped, so A's SEND is written but not acknowledged: RTS->SQD
 * with the notice reports sq_draining 1 and no event; once B runs and
 * acknowledges, the SEND completes, then IBV_EVENT_SQ_DRAINED comes and
 * sq_draining is 0. A SEND posted in SQD waits for RTS. */
static void sqd_drain_a(struct net_end *n)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1 };
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	net_expect(n, T_READY, "B's receives posted");
	/* (one exchange first: the stream is up, so the next SEND is begun
	 * at its post, not held for the connection) */
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0, n->b.p, 100, n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post the first SEND");
	expect_wc(n->scq, &wc, 0, IBV_WC_SUCCESS, IBV_WC_SEND, "the first SEND");
	stop_child(n);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 1, n->b.p, 100, n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post SEND");
	usleep(50 * 1000);	/* written; B cannot answer */
	CHECK(ibv_modify_qp(n->qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0, "RTS->SQD");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 2, n->b.p, 100, n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0,
			 0) == 0, "post SEND in SQD");
	CHECK(ibv_query_qp(n->qp, &a, IBV_QP_STATE, &ia) == 0, "query");
	CHECK(a.qp_state == IBV_QPS_SQD && a.sq_draining == 1, "while draining: %d, sq_draining %u",
	      a.qp_state, a.sq_draining);
	CHECK(!wait_async_event(n->t.ctx, n->qp, IBV_EVENT_SQ_DRAINED, 100), "SQ_DRAINED with a SEND unacknowledged");
	CHECK(kill(n->peer_pid, SIGCONT) == 0, "SIGCONT");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "the SEND begun before SQD");
	CHECK(wait_async_event(n->t.ctx, n->qp, IBV_EVENT_SQ_DRAINED, DEADLINE_MS), "no SQ_DRAINED after the last SEND completed");
	CHECK(ibv_query_qp(n->qp, &a, IBV_QP_STATE, &ia) == 0 && a.sq_draining == 0,
	      "sq_draining %u once drained", a.sq_draining);
	expect_no_wc(n->scq, 100, "the SEND posted in SQD");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	CHECK(ibv_modify_qp(n->qp, &a, IBV_QP_STATE) == 0, "SQD->RTS");
	expect_wc(n->scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "the SEND posted in SQD");
	net_expect(n, T_DONE, "B received both");
}

static void sqd_drain_b(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 0, n->b.p + 8192, 4096, n->b.mr->lkey);
	post_recv1(n->qp, 1, n->b.p, 4096, n->b.mr->lkey);
	post_recv1(n->qp, 2, n->b.p + 4096, 4096, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0, IBV_WC_SUCCESS, IBV_WC_RECV, "the first SEND");
	expect_wc(n->rcq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RECV, "the SEND begun before SQD");
	expect_wc(n->rcq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RECV, "SEND posted in SQD");
	net_put(n, T_DONE);
}

/* ---- table --------------------------------------------------------------- */

struct pcase {
	const char *name;
	void (*opts)(struct net_opts *o);
	net_side_fn a, b;
};

#define CASE(name, opts) { #name, opts, name##_a, name##_b }

/* ---- SIGKILL in the middle of a SEND being placed ----------------------- */

/* B's SEND of 256 MiB lands straight in A's first receive (the channel
 * took its WQE: direct placement); once its first bytes are there, A
 * kills B. Both receives complete, in order, with errors, within
 * LOST_MS: the one half filled too (the channel held its WQE, and the
 * QP's flush on ERROR once missed it: it never completed). */
#define MID_SEND (256 * MIB)

static void mid_send_opts(struct net_opts *o)
{
	o->buf_len = MID_SEND;
}

static void killed_mid_send_a(struct net_end *n)
{
	volatile uint64_t *first = (volatile uint64_t *)n->b.p;
	struct ibv_wc wc;
	uint64_t t0, deadline;

	memset(n->b.p, 0, 4096);
	post_recv1(n->qp, 0xb0, n->b.p, MID_SEND, n->b.mr->lkey);
	post_recv1(n->qp, 0xb1, n->b.p, MID_SEND, n->b.mr->lkey);
	net_put(n, T_READY);
	deadline = now_ms() + DEADLINE_MS;
	while (!*first && now_ms() < deadline)
		;
	CHECK(*first, "no byte of B's SEND landed");
	t0 = now_ms();
	kill_child(n);
	for (uint64_t id = 0xb0; id <= 0xb1; id++) {
		CHECK(poll_one(n->rcq, &wc, LOST_MS),
		      "receive %#llx never completed after the peer died mid-SEND",
		      (unsigned long long)id);
		CHECK(wc.wr_id == id, "receive completion for %#llx, want %#llx (in order)",
		      (unsigned long long)wc.wr_id, (unsigned long long)id);
		CHECK(wc.status != IBV_WC_SUCCESS, "receive %#llx: success, from a SEND cut short",
		      (unsigned long long)id);
	}
	NOTE("both receives completed %llu ms after the kill (the first: %s)",
	     (unsigned long long)(now_ms() - t0), "an error");
	wait_err(n->qp, DEADLINE_MS, "QP after its peer died");
}

static void killed_mid_send_b(struct net_end *n)
{
	fill_pattern(n->b.p, MID_SEND, 9);
	net_expect(n, T_READY, "A's receives posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 1, n->b.p, MID_SEND, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	pause();
	exit(1);
}

/* ---- a SEND the peer has not taken when we destroy our QP ---------------- */

/* Over shm a SEND of 16 KiB or more goes as a remote record: the receiver
 * copies the bytes from the sender's memory when it comes to them. A
 * program may reuse (or free) its buffer once ibv_destroy_qp returns, and
 * exit: a NIC would have sent the bytes, so the destroy waits (a second at
 * most) for the peer to take them. Here B is stopped when A posts and
 * destroys, and resumed 200 ms into the destroy; A then overwrites its
 * buffer. B's receive must complete with A's bytes of the post (it got
 * the overwrite, and ibv_srq_pingpong's client, whose server had exited,
 * ended its QP as lost and flushed the receive). 512 KiB: a pull (the
 * region is below SOFTRNIC_SHM_MAP_MIN). */
#define EXIT_SEND (512 * 1024)

static void exit_send_opts(struct net_opts *o)
{
	o->buf_len = EXIT_SEND;
}

/* A: one small SEND first (the stream is up, and over shm), then B is
 * stopped and a SEND of EXIT_SEND bytes of pattern seed posted (0x41). */
static void send_to_stopped(struct net_end *n, uint32_t seed)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, EXIT_SEND, seed);
	net_expect(n, T_READY, "B's receives posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x40, n->b.p, 1000, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post small SEND");
	expect_wc(n->scq, &wc, 0x40, IBV_WC_SUCCESS, IBV_WC_SEND, "small SEND");
	net_expect(n, T_DONE, "B took the small SEND");
	stop_child(n);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x41, n->b.p, EXIT_SEND, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
}

/* B: its two receives (0x50 for the small SEND, 0x51), the small one
 * taken; then A stops it. */
static void recv_stopped(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 0x50, n->b.p, 1000, n->b.mr->lkey);
	post_recv1(n->qp, 0x51, n->b.p, EXIT_SEND, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0x50, IBV_WC_SUCCESS, IBV_WC_RECV, "small SEND");
	net_put(n, T_DONE);
}

struct resume { pid_t pid; int ms; };

static void *resume_later(void *arg)
{
	const struct resume *r = arg;

	usleep((useconds_t)r->ms * 1000);
	kill(r->pid, SIGCONT);
	return NULL;
}

static void destroy_after_send_a(struct net_end *n)
{
	struct resume r = { n->peer_pid, 200 };
	pthread_t th;
	uint64_t t0;

	send_to_stopped(n, 10);
	CHECK(pthread_create(&th, NULL, resume_later, &r) == 0, "pthread_create");
	t0 = now_ms();
	CHECK(ibv_destroy_qp(n->qp) == 0, "ibv_destroy_qp");
	n->qp = NULL;
	NOTE("ibv_destroy_qp returned after %llu ms (B resumed at %d ms)",
	     (unsigned long long)(now_ms() - t0), r.ms);
	/* the program's buffer is its own again */
	memset(n->b.p, 0xee, EXIT_SEND);
	pthread_join(th, NULL);
	reap_peer(n, "B");
	net_teardown(n);	/* (the QP is gone: run_case would skip it) */
}

static void destroy_after_send_b(struct net_end *n)
{
	struct ibv_wc wc;

	recv_stopped(n);
	/* (stopped here, and resumed) */
	expect_wc(n->rcq, &wc, 0x51, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "a SEND whose sender destroyed its QP right after the post");
	CHECK(wc.byte_len == EXIT_SEND, "byte_len %u, want %u", wc.byte_len, EXIT_SEND);
	check_pattern(n->b.p, EXIT_SEND, 10, "payload (the sender reused its buffer after "
		      "ibv_destroy_qp)");
	net_teardown(n);
	exit(0);
}

/* The sender exits (exit(3)) right after the post, its QP not destroyed:
 * with the stream on shm both ways (both_ways), B stops A, posts the SEND, has a helper resume A 200 ms later, and
 * exits. Over shm A pulls the payload from B's memory when it comes to
 * it, so B's exit waits for that (the library's destructor), as
 * ibv_destroy_qp does; A must receive B's bytes (before: B was gone, A's
 * pull failed, its stream ended as lost and the receive was flushed).
 * Over TCP the kernel holds the bytes. */
static void wait_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	uint64_t end = now_ms() + DEADLINE_MS;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (;;) {
		FILE *f = fopen(path, "r");
		size_t k = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[k] = 0;
		p = strrchr(buf, ')');
		if (p && p[1] == ' ' && p[2] == 'T')
			return;
		CHECK(now_ms() < end, "A did not stop");
		usleep(1000);
	}
}

/* SENDs both ways until both rings carried a record (over shm: the
 * switch is behind both ends), or 64 rounds (TCP). */
static void both_ways(struct net_end *n)
{
	struct ibv_wc wc;

	for (uint64_t id = 1;; id++) {
		uint8_t *base = NULL;
		size_t len = shm_mapping(&base);
		uint64_t used = len && shm_rings_used(base, len), peer;

		post_recv1(n->qp, 0x60, n->b.p + 4096, 64, n->b.mr->lkey);
		net_sync(n, 0x1000 + id);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 0x61, n->b.p, 64, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
		expect_wc(n->scq, &wc, 0x61, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
		expect_wc(n->rcq, &wc, 0x60, IBV_WC_SUCCESS, IBV_WC_RECV, "RECV");
		net_put(n, used);
		peer = net_get(n);
		if ((used && peer) || id == 64)
			return;
	}
}

static void exit_after_send_a(struct net_end *n)
{
	struct ibv_wc wc;

	both_ways(n);
	recv_stopped(n);
	/* (stopped by B here, and resumed by its helper) */
	expect_wc(n->rcq, &wc, 0x51, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "a SEND whose sender exited right after the post");
	CHECK(wc.byte_len == EXIT_SEND, "byte_len %u, want %u", wc.byte_len, EXIT_SEND);
	check_pattern(n->b.p, EXIT_SEND, 12, "payload of a sender that exited");
	reap_peer(n, "B");
}

static void exit_after_send_b(struct net_end *n)
{
	struct ibv_wc wc;
	pid_t a = getppid(), helper;

	both_ways(n);
	fill_pattern(n->b.p, EXIT_SEND, 12);
	net_expect(n, T_READY, "A's receives posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x40, n->b.p, 1000, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post small SEND");
	expect_wc(n->scq, &wc, 0x40, IBV_WC_SUCCESS, IBV_WC_SEND, "small SEND");
	net_expect(n, T_DONE, "A took the small SEND");
	CHECK(kill(a, SIGSTOP) == 0, "SIGSTOP A: %s", strerror(errno));
	wait_stopped(a);
	fill_pattern(n->b.p, EXIT_SEND, 12);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x41, n->b.p, EXIT_SEND, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	usleep(20 * 1000);	/* (into the ring) */
	helper = fork();
	CHECK(helper >= 0, "fork");
	if (helper == 0) {
		/* (holds none of B's descriptors: B's end goes as B does) */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		usleep(200 * 1000);
		kill(a, SIGCONT);
		_exit(0);
	}
	exit(0);	/* no ibv_destroy_qp: the process just ends */
}

/* The same with the QP moved to ERROR instead: the SEND is flushed, the
 * program writes into its buffer, then B runs. B may not deliver the
 * overwrite: its receive completes with A's bytes of the post, or fails,
 * or never completes (the peer's QP went away mid-message). */
static void error_after_send_a(struct net_end *n)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc;

	send_to_stopped(n, 11);
	usleep(20 * 1000);	/* (into the ring) */
	CHECK(ibv_modify_qp(n->qp, &attr, IBV_QP_STATE) == 0, "modify to ERR");
	expect_wc(n->scq, &wc, 0x41, IBV_WC_WR_FLUSH_ERR, -1, "SEND flushed by ERR");
	memset(n->b.p, 0xee, EXIT_SEND);
	CHECK(kill(n->peer_pid, SIGCONT) == 0, "SIGCONT");
	reap_peer(n, "B");
}

static void error_after_send_b(struct net_end *n)
{
	struct ibv_wc wc;

	recv_stopped(n);
	/* (stopped here, and resumed) */
	if (!poll_one(n->rcq, &wc, 2000)) {
		NOTE("no receive completion in 2 s");
	} else if (wc.status == IBV_WC_SUCCESS) {
		CHECK(wc.wr_id == 0x51 && wc.byte_len == EXIT_SEND, "wr_id %#llx byte_len %u",
		      (unsigned long long)wc.wr_id, wc.byte_len);
		check_pattern(n->b.p, EXIT_SEND, 11, "payload (the sender's QP flushed the SEND, "
			      "and the program wrote into its buffer)");
		NOTE("the receive completed with the bytes of the post");
	} else {
		NOTE("the receive completed with %s", ibv_wc_status_str(wc.status));
	}
	net_teardown(n);
	exit(0);
}

/* The sender exits (exit(3), no ibv_destroy_qp) the moment its QP is in
 * RTS and its two SENDs are posted, a small one and one of EXIT_SEND
 * bytes: on a host where the stream moves to shm, that is while the
 * offer, the switch and the accept are under way (or just after), so the
 * exit's drain must wait for the handshake's end or the stream's, and
 * what the SENDs carried must arrive either way (over TCP the kernel
 * holds it). B waits `early_delay_us` before its posts: each run of
 * the subtest tries a few, so the exit meets the handshake at different
 * steps. */
static unsigned int early_delay_us;

static void exit_early_a(struct net_end *n)
{
	struct ibv_wc wc;

	post_recv1(n->qp, 0x50, n->b.p + EXIT_SEND, 1000, n->b.mr->lkey);
	post_recv1(n->qp, 0x51, n->b.p, EXIT_SEND, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0x50, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "a small SEND whose sender exited right after posting it");
	CHECK(wc.byte_len == 1000, "byte_len %u, want 1000", wc.byte_len);
	expect_wc(n->rcq, &wc, 0x51, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "a large SEND whose sender exited right after posting it");
	CHECK(wc.byte_len == EXIT_SEND, "byte_len %u, want %u", wc.byte_len, EXIT_SEND);
	check_pattern(n->b.p + EXIT_SEND, 1000, 13, "small payload of a sender that exited");
	check_pattern(n->b.p, EXIT_SEND, 14, "large payload of a sender that exited");
	reap_peer(n, "B");
}

static void exit_early_b(struct net_end *n)
{
	fill_pattern(n->b.p + EXIT_SEND, 1000, 13);
	fill_pattern(n->b.p, EXIT_SEND, 14);
	net_expect(n, T_READY, "A's receives posted");
	if (early_delay_us)
		usleep(early_delay_us);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x40, n->b.p + EXIT_SEND, 1000, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post small SEND");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x41, n->b.p, EXIT_SEND, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	exit(0);	/* no ibv_destroy_qp: the process just ends */
}

static void exit_early_opts(struct net_opts *o)
{
	o->buf_len = EXIT_SEND + 4096;
}

/* (UC: nothing is acknowledged, so the exit waits only for what it has
 * not written or the peer has not pulled) */
static void exit_early_uc_opts(struct net_opts *o)
{
	exit_early_opts(o);
	o->type = IBV_QPT_UC;
}

static void exit_early_uc_a(struct net_end *n) { exit_early_a(n); }
static void exit_early_uc_b(struct net_end *n) { exit_early_b(n); }

/* The receiver exits (exit(3), its QP not destroyed) the moment its
 * receives complete: the sender's SENDs were delivered, so they complete
 * successfully, as on hardware, where the receiving NIC acknowledges a
 * message before the program even sees it. After SENDs both ways (over
 * shm: the rings in use, B's poller owns its stream), a SEND the
 * receiver pulls from the sender over shm, then a small one, which B's
 * polling takes in and whose ACK it keeps for a reply of B's to carry
 * (before: none came, and A's SEND failed with IBV_WC_RETRY_EXC_ERR
 * once B was gone). */
static void exit_after_recv_a(struct net_end *n)
{
	struct ibv_wc wc;

	both_ways(n);
	fill_pattern(n->b.p + EXIT_SEND, 1000, 15);
	fill_pattern(n->b.p, EXIT_SEND, 16);
	net_expect(n, T_READY, "B's receives posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x41, n->b.p, EXIT_SEND, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(n->scq, &wc, 0x41, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "a SEND whose receiver exited once it had it");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 0x40, n->b.p + EXIT_SEND, 1000, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post small SEND");
	expect_wc(n->scq, &wc, 0x40, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "a small SEND whose receiver exited once it had it");
	reap_peer(n, "B");
}

static void exit_after_recv_b(struct net_end *n)
{
	struct ibv_wc wc;

	both_ways(n);
	post_recv1(n->qp, 0x51, n->b.p, EXIT_SEND, n->b.mr->lkey);
	post_recv1(n->qp, 0x50, n->b.p + EXIT_SEND, 1000, n->b.mr->lkey);
	net_put(n, T_READY);
	expect_wc(n->rcq, &wc, 0x51, IBV_WC_SUCCESS, IBV_WC_RECV, "SEND");
	expect_wc(n->rcq, &wc, 0x50, IBV_WC_SUCCESS, IBV_WC_RECV, "small SEND");
	check_pattern(n->b.p, EXIT_SEND, 16, "payload");
	check_pattern(n->b.p + EXIT_SEND, 1000, 15, "small payload");
	exit(0);	/* no ibv_destroy_qp: the process just ends */
}

static const struct pcase cases[] = {
	CASE(peer_killed, NULL),
	CASE(killed_streaming, killed_streaming_opts),
	CASE(orderly_exit, NULL),
	CASE(orderly_alive, NULL),
	CASE(destroy_under_traffic, traffic_opts),
	CASE(dereg_after_kill, dereg_after_kill_opts),
	CASE(held_close, held_close_opts),
	CASE(sqd_drain, NULL),
	CASE(killed_mid_send, mid_send_opts),
	CASE(destroy_after_send, exit_send_opts),
	CASE(error_after_send, exit_send_opts),
	CASE(exit_after_send, exit_send_opts),
	CASE(exit_early, exit_early_opts),
	CASE(exit_early_uc, exit_early_uc_opts),
	CASE(exit_after_recv, exit_early_opts),
	CASE(exit_orderly, NULL),
};

static void run_case(size_t i)
{
	struct net_opts o = net_opts_default();

	if (cases[i].opts)
		cases[i].opts(&o);
	if (cases[i].a != exit_early_a && cases[i].a != exit_early_uc_a) {
		net_fork_run(&o, cases[i].a, cases[i].b);
		return;
	}
	/* (each delay a pair of its own; the child's exit ends each) */
	static const unsigned int delays[] = { 0, 0, 100, 300, 1000, 3000 };

	for (size_t k = 0; k < ARRAY_SIZE(delays); k++) {
		early_delay_us = delays[k];
		net_fork_run(&o, cases[i].a, cases[i].b);
	}
}

#define SUB(i) static void sub##i(void) { run_case(i); }
SUB(0) SUB(1) SUB(2) SUB(3) SUB(4) SUB(5) SUB(6) SUB(7) SUB(8) SUB(9) SUB(10) SUB(11)
SUB(12) SUB(13) SUB(14) SUB(15)

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ cases[0].name, sub0 }, { cases[1].name, sub1 },
		{ cases[2].name, sub2 }, { cases[3].name, sub3 },
		{ cases[4].name, sub4 }, { cases[5].name, sub5 },
		{ cases[6].name, sub6 }, { cases[7].name, sub7 },
		{ cases[8].name, sub8 }, { cases[9].name, sub9 },
		{ cases[10].name, sub10 }, { cases[11].name, sub11 },
		{ cases[12].name, sub12 }, { cases[13].name, sub13 },
		{ cases[14].name, sub14 }, { cases[15].name, sub15 },
	};
	_Static_assert(ARRAY_SIZE(tests) == ARRAY_SIZE(cases), "table");
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
