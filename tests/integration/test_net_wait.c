/* A program thread blocked in ibv_get_cq_event takes in what its
 * streams bring itself (src/chan/tcp_wait.c, DESIGN.md decision 5):
 * while it waits, the rings (shm) or sockets of the QPs that complete
 * into CQs of its channel are not the progress thread's. These cases
 * prove that they go back to the progress thread intact when the wait
 * ends, however it ends. Two processes; over shm by default, and once
 * more with SOFTRNIC_SHM=0 (sockets).
 *
 * - signal: B's wait (nothing sent yet) ends with EINTR on a signal; then
 *   B waits by poll() on the channel's descriptor, not in
 *   ibv_get_cq_event, so only the progress thread can take A's first
 *   SEND in and raise the event: it does. A's second SEND is waited for
 *   in ibv_get_cq_event again, and comes.
 * - rounds: an event-driven ping-pong of SENDs whose bytes are compared,
 *   a tenth of the rounds or more taken in by a thread waiting for an
 *   event (rx_waited).
 */
#include "net_common.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

enum { T_GO = 0x10, T_DONE = 0x20 };

#define MSG	64
#define ROUNDS	500

/* Every one of len bytes at p is v. */
static void check_pattern_byte(const uint8_t *p, size_t len, uint8_t v, const char *what)
{
	for (size_t i = 0; i < len; i++)
		CHECK(p[i] == v, "%s: byte %zu is %#x, want %#x", what, i, p[i], v);
}

/* Wait for one event of cq's channel (CHECKed), acknowledge it, poll
 * the completion it announces. */
static void event_wc(struct net_end *n, struct ibv_wc *wc, uint64_t id, const char *what)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	CHECK(ibv_get_cq_event(n->ch, &ev_cq, &ev_ctx) == 0, "%s: get_cq_event: %s", what,
	      strerror(errno));
	CHECK(ev_cq == n->rcq, "%s: the event names another CQ", what);
	ibv_ack_cq_events(ev_cq, 1);
	CHECK(poll_one(n->rcq, wc, DEADLINE_MS) == 1, "%s: an event, no completion", what);
	CHECK(wc->wr_id == id && wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_RECV,
	      "%s: wr_id %llu status %s", what, (unsigned long long)wc->wr_id,
	      ibv_wc_status_str(wc->status));
}

/* ---- signal -------------------------------------------------------------- */

static void on_usr1(int sig)
{
	(void)sig;
}

struct kick {
	pthread_t target;
	int ms;
};

static void *kick_main(void *arg)
{
	struct kick *k = arg;

	usleep((useconds_t)k->ms * 1000);
	pthread_kill(k->target, SIGUSR1);
	return NULL;
}

static void signal_a(struct net_end *n)
{
	struct ibv_wc wc;

	for (uint64_t i = 0; i < 2; i++) {
		net_expect(n, T_GO + i, "B waiting");
		memset(n->b.p, (int)(0x41 + i), MSG);
		CHECK(post_send1(n->qp, IBV_WR_SEND, i, n->b.p, MSG, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND %d", (int)i);
		expect_wc(n->scq, &wc, i, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	}
	net_expect(n, T_DONE, "B done");
}

static void signal_b(struct net_end *n)
{
	struct sigaction sa = { .sa_handler = on_usr1 };	/* (no SA_RESTART) */
	struct kick k = { .target = pthread_self(), .ms = 30 };
	struct pollfd pfd = { .fd = n->ch->fd, .events = POLLIN };
	uint8_t *rx = n->b.p + 64 * KIB;
	struct ibv_cq *ev_cq;
	struct ibv_wc wc;
	pthread_t th;
	void *ev_ctx;
	int r;

	post_recv1(n->qp, 10, rx, MSG, n->b.mr->lkey);
	post_recv1(n->qp, 11, rx + MSG, MSG, n->b.mr->lkey);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
	CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "arm");
	CHECK(pthread_create(&th, NULL, kick_main, &k) == 0, "thread");
	errno = 0;
	r = ibv_get_cq_event(n->ch, &ev_cq, &ev_ctx);
	CHECK(r == -1 && errno == EINTR, "a signal ends the wait with EINTR (got %d, %s)", r,
	      strerror(errno));
	pthread_join(th, NULL);
	/* the progress thread's again: it alone raises this event */
	net_put(n, T_GO);
	r = poll(&pfd, 1, DEADLINE_MS);
	CHECK(r == 1 && (pfd.revents & POLLIN), "the channel reports A's SEND (poll %d)", r);
	event_wc(n, &wc, 10, "SEND 1");
	check_pattern_byte(rx, MSG, 0x41, "SEND 1");
	CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "arm");
	net_put(n, T_GO + 1);
	event_wc(n, &wc, 11, "SEND 2");
	check_pattern_byte(rx + MSG, MSG, 0x42, "SEND 2");
	net_put(n, T_DONE);
}

static void sub_signal(void)
{
	struct net_opts o = net_opts_default();

	o.rcq_chan = 1;
	net_fork_run(&o, signal_a, signal_b);
}

/* ---- rounds ---------------------------------------------------------------- */

/* The receive id, the way event-driven programs wait (rcq armed): poll;
 * if empty, wait for an event, acknowledge it, arm again, poll again. An
 * event may announce a completion a poll took already: then the poll
 * after it finds nothing, and the next wait is a real one. */
static void wait_recv(struct net_end *n, struct ibv_wc *wc, uint64_t id, const char *what)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int r;

	while ((r = ibv_poll_cq(n->rcq, 1, wc)) == 0) {
		CHECK(ibv_get_cq_event(n->ch, &ev_cq, &ev_ctx) == 0, "%s: get_cq_event: %s", what,
		      strerror(errno));
		CHECK(ev_cq == n->rcq, "%s: the event names another CQ", what);
		ibv_ack_cq_events(ev_cq, 1);
		CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "%s: arm", what);
	}
	CHECK(r == 1 && wc->wr_id == id && wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_RECV,
	      "%s: poll %d, wr_id %llu status %s", what, r, (unsigned long long)wc->wr_id,
	      ibv_wc_status_str(wc->status));
}

/* One side of the ping-pong: B answers each SEND with the same bytes. */
static void rounds_side(struct net_end *n)
{
	uint8_t *tx = n->b.p, *rx = n->b.p + 64 * KIB;
	bool a = n->role == NET_A;
	struct ibv_wc wc;

	post_recv1(n->qp, 0, rx, MSG, n->b.mr->lkey);
	CHECK(ibv_req_notify_cq(n->rcq, 0) == 0, "arm");
	net_sync(n, T_GO);
	for (int i = 0; i < ROUNDS; i++) {
		char what[32];

		snprintf(what, sizeof(what), "round %d", i);
		if (a) {
			memset(tx, (uint8_t)i, MSG);
			CHECK(post_send1(n->qp, IBV_WR_SEND, (uint64_t)i, tx, MSG, n->b.mr->lkey,
					 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "%s: post", what);
		}
		wait_recv(n, &wc, (uint64_t)i, what);
		check_pattern_byte(rx, MSG, (uint8_t)i, what);
		post_recv1(n->qp, (uint64_t)i + 1, rx, MSG, n->b.mr->lkey);
		if (!a) {
			memcpy(tx, rx, MSG);
			CHECK(post_send1(n->qp, IBV_WR_SEND, (uint64_t)i, tx, MSG, n->b.mr->lkey,
					 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "%s: post the reply", what);
		}
		expect_wc(n->scq, &wc, (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_SEND, what);
	}
	net_sync(n, T_DONE);
}

static void sub_rounds(void)
{
	struct net_opts o = net_opts_default();
	char path[64];
	long long v;
	int st;

	o.rcq_chan = 1;
	st = pair_with_stats(&o, rounds_side, rounds_side, false, path);
	v = stats_sum(path, "rx_waited");
	NOTE("wake-ups taken by a thread waiting for an event (rx_waited): %lld", v);
	stats_done(path, !WIFEXITED(st) || WEXITSTATUS(st) || v < ROUNDS / 10);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the pair failed (status %#x)", st);
	CHECK(v >= ROUNDS / 10, "rx_waited %lld, want %d or more", v, ROUNDS / 10);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "signal", sub_signal },
		{ "rounds", sub_rounds },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
