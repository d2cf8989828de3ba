/* QPs destroyed while their stream is busy: the peer still writing into
 * them, and a program thread busy-polling the CQ and now and then arming
 * it (ibv_req_notify_cq), so the progress thread keeps taking the stream's
 * receive side away from itself and back, arming the stream's 1 ms
 * poll-ownership check each time (DESIGN.md decision 5), while the
 * program destroys the QP. Nothing of a destroyed stream may stay armed in
 * the progress thread: after each destroy, side A waits past that check
 * with the context still open, so a timer left armed on a freed stream
 * fires on freed memory (under ASan: heap-use-after-free in
 * run_due_timers). Many rounds, bounded in time. Two processes over TCP. */
#include "net_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

enum { T_ROUND = 0x7e000000, T_STOP = 0x7f000000, T_DONE = 0x7f800000 };

/* Rounds: as many as fit in the budget, at most MAX_ROUNDS. */
#define MAX_ROUNDS 400
#define BUDGET_MS 8000
#define WRITE_LEN 4096
#define B_INFLIGHT 16

struct poller {
	struct net_end *n;
	_Atomic bool stop;
};

/* A program thread polling A's receive CQ (empty: the peer only writes),
 * which receives on the stream itself, and arming it every so often,
 * which hands the stream back to the progress thread. */
static void *poll_main(void *arg)
{
	struct poller *p = arg;
	struct ibv_wc wc[4];

	for (unsigned int i = 0; !atomic_load(&p->stop); i++) {
		CHECK(ibv_poll_cq(p->n->rcq, 4, wc) >= 0, "ibv_poll_cq");
		if (i % 64 == 63)
			CHECK(ibv_req_notify_cq(p->n->rcq, 0) == 0, "ibv_req_notify_cq");
	}
	return NULL;
}

/* A fresh QP on the same CQs, connected to the peer's fresh QP. */
static void new_qp(struct net_end *n)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = n->scq,
		.recv_cq = n->rcq,
		.cap = {
			.max_send_wr = n->o.max_send_wr,
			.max_recv_wr = n->o.max_recv_wr,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.qp_type = IBV_QPT_RC,
	};
	uint32_t mine, theirs;

	n->qp = ibv_create_qp(n->t.pd, &ia);
	CHECK(n->qp, "ibv_create_qp: %s", strerror(errno));
	mine = htobe32(n->qp->qp_num);
	oob_write(n->fd, &mine, sizeof(mine));
	oob_read(n->fd, &theirs, sizeof(theirs), NET_OOB_MS);
	n->me.qpn = n->qp->qp_num;
	n->peer.qpn = be32toh(theirs);
	net_qp_connect(n);
}

static void destroy_qp(struct net_end *n)
{
	int rc = ibv_destroy_qp(n->qp);

	CHECK(rc == 0, "ibv_destroy_qp: %s", strerror(rc));
	n->qp = NULL;
}

static void busy_a(struct net_end *n)
{
	struct poller p = { .n = n };
	uint64_t end = now_ms() + BUDGET_MS;
	unsigned int seed = (unsigned int)getpid(), rounds = 0;
	pthread_t th;

	CHECK(pthread_create(&th, NULL, poll_main, &p) == 0, "pthread_create");
	for (;;) {
		bool last = rounds + 1 == MAX_ROUNDS || now_ms() >= end;

		if (rounds)
			new_qp(n);
		net_put(n, last ? T_ROUND | 1 : T_ROUND);
		net_expect(n, T_ROUND, "B writing");
		/* destroy at a different point of the traffic each round */
		usleep((useconds_t)(rand_r(&seed) % 2000));
		destroy_qp(n);
		/* past POLL_CHECK_NS, with the progress thread running */
		usleep(3000);
		net_put(n, T_STOP);
		net_expect(n, T_DONE, "B done");
		rounds++;
		if (last)
			break;
	}
	atomic_store(&p.stop, true);
	pthread_join(th, NULL);
	NOTE("%u rounds", rounds);
	net_teardown(n);
}

static void busy_b(struct net_end *n)
{
	for (unsigned int round = 0;; round++) {
		uint64_t v, posted = 0, done = 0;
		bool last, stop = false;
		struct ibv_wc wc[8];

		if (round)
			new_qp(n);
		v = net_get(n);
		CHECK((v & ~1ULL) == T_ROUND, "round marker %#llx", (unsigned long long)v);
		last = v & 1;
		/* The stream is up at both ends before A may destroy its QP:
		 * a dial still on its way would otherwise reach A's next QP,
		 * which has the same QPN (the lowest free slot) and the same
		 * peer QPN, and be taken for its stream. */
		CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 0, n->b.p, 8, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == 0,
		      "post first WRITE");
		CHECK(poll_one(n->scq, wc, DEADLINE_MS) == 1 && wc[0].status == IBV_WC_SUCCESS,
		      "round %u: first WRITE", round);
		net_put(n, T_ROUND);
		/* write until A says stop; A destroys its QP meanwhile, so
		 * anything may fail from some point on */
		while (!stop) {
			struct pollfd pfd = { .fd = n->fd, .events = POLLIN };
			int k;

			if (posted - done < B_INFLIGHT &&
			    post_send1(n->qp, IBV_WR_RDMA_WRITE, posted, n->b.p, WRITE_LEN,
				       n->b.mr->lkey, IBV_SEND_SIGNALED,
				       n->peer.addr + (posted % 64) * WRITE_LEN, n->peer.rkey,
				       0) == 0)
				posted++;
			k = ibv_poll_cq(n->scq, 8, wc);
			CHECK(k >= 0, "ibv_poll_cq");
			done += (uint64_t)k;
			stop = poll(&pfd, 1, 0) == 1;
		}
		net_expect(n, T_STOP, "A's stop");
		destroy_qp(n);
		while (ibv_poll_cq(n->scq, 8, wc) > 0)
			;
		net_put(n, T_DONE);
		if (last)
			break;
	}
}

static void sub_busy_destroy(void)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 64 * WRITE_LEN;
	net_fork_run(&o, busy_a, busy_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "busy_destroy", sub_busy_destroy } };

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
