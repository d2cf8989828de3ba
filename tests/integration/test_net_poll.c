/* A busy poller takes a stream's receive side over from the progress
 * thread (DESIGN.md decision 5); these cases prove that nothing is lost
 * or stalls when it does and when it stops: a ping-pong whose ACKs ride on
 * the replies, a poller that stops polling without replying (the ACK it
 * owes still goes, one-sided traffic still lands), and a poller that goes
 * to sleep in ibv_get_cq_event (it is woken). Two processes over TCP. */
#include "net_common.h"

#include <stdbool.h>

enum { T_GO = 0x10, T_SLEEP, T_IDLE, T_WROTE, T_DONE };

#define ROUNDS 2000
#define MSG 8

/* ---- ping-pong: every message and every send completion arrives -------- */

static void pp_side(struct net_end *n, bool first)
{
	uint8_t *tx = n->b.p, *rx = n->b.p + 4096;
	uint32_t sent = 0, got = 0, sdone = 0;
	struct ibv_wc wc;

	for (int i = 0; i < 16; i++)
		post_recv1(n->qp, 100 + (uint64_t)i, rx + i * 64, 64, n->b.mr->lkey);
	net_sync(n, T_GO);
	if (first) {
		memcpy(tx, &sent, sizeof(sent));
		CHECK(post_send1(n->qp, IBV_WR_SEND, sent, tx, MSG, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post ping 0");
		sent++;
	}
	while (got < ROUNDS) {
		uint32_t v;

		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "message %u: nothing", got);
		CHECK(wc.status == IBV_WC_SUCCESS, "receive %u: %s", got,
		      ibv_wc_status_str(wc.status));
		CHECK(wc.byte_len == MSG, "byte_len %u", wc.byte_len);
		memcpy(&v, rx + (wc.wr_id - 100) * 64, sizeof(v));
		CHECK(v == got, "message %u carries %u", got, v);
		got++;
		post_recv1(n->qp, wc.wr_id, rx + (wc.wr_id - 100) * 64, 64, n->b.mr->lkey);
		net_reap_sends(n, &sdone, 0);
		if (sent < ROUNDS) {
			memcpy(tx + (sent % 16) * 16, &sent, sizeof(sent));
			CHECK(post_send1(n->qp, IBV_WR_SEND, sent, tx + (sent % 16) * 16, MSG,
					 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
			      "post %u", sent);
			sent++;
		}
	}
	/* every SEND completes, though the peer will reply no more */
	net_reap_sends(n, &sdone, ROUNDS);
	net_sync(n, T_DONE);
}

static void pp_a(struct net_end *n) { pp_side(n, true); }
static void pp_b(struct net_end *n) { pp_side(n, false); }

static void sub_ping_pong(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	net_fork_run(&o, pp_a, pp_b);
}

/* ---- the poller goes idle: its owed ACK goes, WRITEs still land --------- */

static void idle_a(struct net_end *n)
{
	uint8_t *rx = n->b.p;
	struct ibv_wc wc;

	for (int i = 0; i < 50; i++)
		post_recv1(n->qp, 100, rx + 64, 64, n->b.mr->lkey);
	post_recv1(n->qp, 1, rx, 64, n->b.mr->lkey);
	memset(rx + 8192, 0, 4096);
	net_put(n, T_GO);
	/* a burst, busy-polled: the stream becomes the poller's */
	for (int i = 0; i < 50; i++)
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1 && wc.wr_id == 100 &&
		      wc.status == IBV_WC_SUCCESS, "burst message %d", i);
	CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "the SEND did not arrive");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 32, "SEND: %s, %u bytes",
	      ibv_wc_status_str(wc.status), wc.byte_len);
	check_pattern(rx, 32, 7, "SEND payload");
	/* Now no verbs call at all: B must still see its completions. */
	net_put(n, T_IDLE);
	net_expect(n, T_WROTE, "B's WRITE completed");
	check_pattern(rx + 8192, 4096, 8, "WRITE landed while A was idle");
	net_put(n, T_DONE);
}

static void idle_b(struct net_end *n)
{
	uint8_t *tx = n->b.p;
	struct ibv_wc wc;
	uint64_t t0;

	fill_pattern(tx, 32, 7);
	fill_pattern(tx + 4096, 4096, 8);
	net_expect(n, T_GO, "A polling");
	for (int i = 0; i < 50; i++) {
		CHECK(post_send1(n->qp, IBV_WR_SEND, 100, tx + 8192, 16, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post burst %d", i);
		CHECK(poll_one(n->scq, &wc, DEADLINE_MS) == 1 && wc.status == IBV_WC_SUCCESS,
		      "burst send %d", i);
	}
	CHECK(post_send1(n->qp, IBV_WR_SEND, 1, tx, 32, n->b.mr->lkey, IBV_SEND_SIGNALED,
			 0, 0, 0) == 0, "post SEND");
	net_expect(n, T_IDLE, "A idle");
	t0 = now_ms();
	/* the ACK A owes comes without A's help, in milliseconds */
	CHECK(poll_one(n->scq, &wc, 2000) == 1, "SEND not acknowledged while A idles");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "SEND: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(now_ms() - t0 < 1000, "ACK took %llu ms", (unsigned long long)(now_ms() - t0));
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 2, tx + 4096, 4096, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr + 8192, n->peer.rkey, 0) == 0,
	      "post WRITE");
	CHECK(poll_one(n->scq, &wc, 2000) == 1, "WRITE not completed while A idles");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "WRITE: %s",
	      ibv_wc_status_str(wc.status));
	net_put(n, T_WROTE);
	net_expect(n, T_DONE, "A checked");
}

static void sub_idle(void)
{
	struct net_opts o = net_opts_default();

	net_fork_run(&o, idle_a, idle_b);
}

/* ---- the poller goes to sleep on its completion channel ----------------- */

static void sleep_a(struct net_end *n)
{
	uint8_t *rx = n->b.p;
	struct ibv_wc wc;
	struct ibv_cq *ecq;
	void *ectx;
	uint64_t t0;

	for (int i = 0; i < 101; i++)
		post_recv1(n->qp, (uint64_t)i, rx + i * 64, 64, n->b.mr->lkey);
	net_put(n, T_GO);
	/* busy-poll through a burst: the stream becomes the poller's */
	for (int i = 0; i < 100; i++) {
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "burst message %d missing", i);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i, "burst %d: %s", i,
		      ibv_wc_status_str(wc.status));
	}
	CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "req_notify_cq");
	CHECK(ibv_poll_cq(n->rcq, 1, &wc) == 0, "a completion raced the arm");
	net_put(n, T_SLEEP);
	t0 = now_ms();
	{
		struct pollfd pfd = { .fd = n->ch->fd, .events = POLLIN };

		CHECK(poll(&pfd, 1, 3000) == 1, "no completion event within 3 s");
	}
	CHECK(ibv_get_cq_event(n->ch, &ecq, &ectx) == 0 && ecq == n->rcq, "get_cq_event");
	ibv_ack_cq_events(ecq, 1);
	CHECK(now_ms() - t0 < 2000, "woken after %llu ms", (unsigned long long)(now_ms() - t0));
	CHECK(ibv_poll_cq(n->rcq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 100,
	      "the SEND that woke us");
	check_pattern(rx + 100 * 64, 48, 9, "SEND after sleeping");
	net_put(n, T_DONE);
}

static void sleep_b(struct net_end *n)
{
	uint8_t *tx = n->b.p;
	struct ibv_wc wc;

	fill_pattern(tx + 4096, 48, 9);
	net_expect(n, T_GO, "A ready");
	for (int i = 0; i < 100; i++) {
		CHECK(post_send1(n->qp, IBV_WR_SEND, (uint64_t)i, tx, 16, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post %d", i);
		CHECK(poll_one(n->scq, &wc, DEADLINE_MS) == 1 && wc.status == IBV_WC_SUCCESS,
		      "burst send %d", i);
	}
	net_expect(n, T_SLEEP, "A asleep");
	usleep(20000);
	CHECK(post_send1(n->qp, IBV_WR_SEND, 100, tx + 4096, 48, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post the wake-up SEND");
	CHECK(poll_one(n->scq, &wc, DEADLINE_MS) == 1 && wc.status == IBV_WC_SUCCESS,
	      "wake-up SEND completion");
	net_expect(n, T_DONE, "A woke");
}

static void sub_sleep(void)
{
	struct net_opts o = net_opts_default();

	o.rcq_chan = 1;
	net_fork_run(&o, sleep_a, sleep_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "ping_pong", sub_ping_pong },
		{ "poller_goes_idle", sub_idle },
		{ "poller_goes_to_sleep", sub_sleep },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
