/* The poller's quick pass (src/chan/tcp_fast.c, DESIGN.md decision 23):
 * a program thread polling its CQ delivers a lone small SEND or ACK from
 * the ring without the general receive pass. These cases prove that what
 * it delivers is what the general pass would have: every byte, length,
 * immediate and flag of a ping-pong of SENDs from 0 to 1024 bytes, send
 * completions in order; and SENDs that find no receive WQE wait (the
 * quick pass keeps a copy of its own of a message that lived on its
 * stack) and are delivered, in order and intact, once receives are
 * posted; both also through an SRQ; small WRITEs placed while their
 * target polls, and one with a wrong key refused. The stats line's
 * rx_quick proves the
 * quick pass carried them, and its shm_fenced that a poller's peer writes
 * to it without fences.
 * Two processes on one host (shm). */
#include "net_common.h"

#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/mman.h>

enum { T_GO = 0x20, T_SENT, T_DONE };

#define ROUNDS 1000
#define SLOT 2048		/* bytes per receive buffer */
#define NRECV 16
#define PARKED 16
#define QUIET_ROUNDS 10000

/* The size of round i's message: 0 to the largest small message. */
static uint32_t msg_len(uint32_t i)
{
	static const uint32_t sizes[] = { 8, 0, 1, 24, 100, 512, 1000, 1024, 64, 7 };

	return sizes[i % ARRAY_SIZE(sizes)];
}

static bool has_imm(uint32_t i) { return i % 3 == 1; }

/* Round i's SEND from side a (0) or b (1): its bytes are pattern i*2+b
 * (post_send1 puts the immediate in network order). */
static void send_round(struct net_end *n, uint32_t i, int b)
{
	uint8_t *tx = n->b.p + (size_t)(i % NRECV) * SLOT;
	uint32_t len = msg_len(i);

	fill_pattern(tx, len, i * 2 + (uint32_t)b);
	CHECK(post_send1(n->qp, has_imm(i) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, i, tx, len,
			 n->b.mr->lkey, IBV_SEND_SIGNALED | (i % 4 == 0 ? IBV_SEND_SOLICITED : 0),
			 0, 0, 0xab000000u + i) == 0,
	      "post round %u", i);
}

/* Round i's SEND from the other side, in the receive wc. */
static void check_round(struct net_end *n, const struct ibv_wc *wc, uint32_t i, int from)
{
	char what[48];
	uint8_t *rx = n->b.p + 64 * KIB + ((wc->wr_id - 1000) % NRECV) * SLOT;

	snprintf(what, sizeof(what), "round %u", i);
	CHECK(wc->wr_id == 1000 + i % NRECV, "%s: wr_id %llu, want %u", what,
	      (unsigned long long)wc->wr_id, 1000 + i % NRECV);
	net_check_recv(wc, IBV_WC_RECV, msg_len(i), n, what);
	if (has_imm(i)) {
		CHECK(wc->wc_flags & IBV_WC_WITH_IMM, "%s: no immediate", what);
		CHECK(wc->imm_data == htobe32(0xab000000u + i), "%s: imm %#x", what,
		      be32toh(wc->imm_data));
	} else {
		CHECK(!(wc->wc_flags & IBV_WC_WITH_IMM), "%s: an immediate", what);
	}
	check_pattern(rx, msg_len(i), i * 2 + (uint32_t)from, what);
}

static void post_slot(struct net_end *n, uint32_t i)
{
	struct ibv_sge s = { .addr = (uintptr_t)n->b.p + 64 * KIB + (i % NRECV) * SLOT,
			     .length = SLOT, .lkey = n->b.mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 1000 + i % NRECV, .sg_list = &s, .num_sge = 1 }, *bad;

	if (n->srq)
		CHECK(ibv_post_srq_recv(n->srq, &w, &bad) == 0, "post SRQ receive %u", i);
	else
		post_recv1(n->qp, w.wr_id, (void *)(uintptr_t)s.addr, SLOT, n->b.mr->lkey);
}

/* ---- ping-pong: A sends round i, B checks it and answers with its own --- */

static void pp_run(struct net_end *n, uint32_t rounds)
{
	int me = n->role == NET_A ? 0 : 1;
	uint32_t sdone = 0;
	struct ibv_wc wc;

	for (uint32_t i = 0; i < NRECV; i++)
		post_slot(n, i);
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < rounds; i++) {
		if (!me)
			send_round(n, i, me);
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "round %u: nothing", i);
		check_round(n, &wc, i, !me);
		post_slot(n, i);
		if (me)
			send_round(n, i, me);
		net_reap_sends(n, &sdone, 0);
	}
	net_reap_sends(n, &sdone, rounds);
	net_sync(n, T_DONE);
}

static void pp_side(struct net_end *n) { pp_run(n, ROUNDS); }
static void pp_long_side(struct net_end *n) { pp_run(n, QUIET_ROUNDS); }

static void sub_pingpong(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	pair_count(&o, pp_side, pp_side, "rx_quick", ROUNDS / 4, 4 * ROUNDS,
		   "records delivered by a poller's quick pass in " STR(ROUNDS) " rounds");
}

/* The same ping-pong: each side's poller takes the stream from its
 * progress thread (which it always comes before, so never lets wake) and
 * says so in the ring (rx_polled): the peer's writes then need no fence.
 * Before, one side of every pair wrote every message with one. */
static void sub_unfenced(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	pair_count(&o, pp_side, pp_side, "shm_fenced", 0, ROUNDS / 4,
		   "ring writes fenced in " STR(ROUNDS) " rounds, both sides");
}

/* The same ping-pong, longer (a tenth of a second or more): the progress
 * threads' look at streams their pollers own comes every POLL_QUIET_NS
 * without the stream's lock while both keep polling and owe nothing
 * (tcp_quiet_tick; poll_quiet in the stats lines). Before, every
 * millisecond with it: a progress thread woken that took a poller's CPU,
 * and the poller's bias revoked. */
static void sub_quiet(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	pair_count(&o, pp_long_side, pp_long_side, "poll_quiet", 2, LLONG_MAX,
		   "quiet looks at polled streams in " STR(QUIET_ROUNDS) " rounds");
}

/* ---- no receive posted: the SENDs wait, then arrive intact, in order ---- */

static void park_a(struct net_end *n)
{
	struct ibv_wc wc;

	/* (the count is B's alone: A's quick passes take ACKs) */
	unsetenv("SOFTRNIC_STATS");
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < PARKED; i++) {
		send_round(n, i, 0);
		usleep(3000);	/* (one record at a time: each alone in the ring) */
	}
	net_sync(n, T_SENT);
	for (uint32_t i = 0; i < PARKED; i++)
		expect_wc(n->scq, &wc, i, IBV_WC_SUCCESS, IBV_WC_SEND, "parked SEND");
	net_sync(n, T_DONE);
}

static void park_b(struct net_end *n)
{
	uint64_t end;
	struct ibv_wc wc;

	net_sync(n, T_GO);
	/* Poll the empty CQ while A sends: the quick pass takes each SEND
	 * and finds no receive WQE for it. */
	end = now_ms() + PARKED * 3 + 200;
	while (now_ms() < end)
		CHECK(ibv_poll_cq(n->rcq, 1, &wc) == 0, "a completion with no receive posted");
	net_sync(n, T_SENT);
	for (uint32_t i = 0; i < PARKED; i++)
		post_slot(n, i);
	for (uint32_t i = 0; i < PARKED; i++) {
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "parked SEND %u: nothing", i);
		check_round(n, &wc, i, 0);
	}
	net_sync(n, T_DONE);
}

/* ---- small WRITEs: each side watches its memory, polling its empty CQ ---- */

static uint8_t *win(struct net_end *n, uint32_t i)
{
	return n->b.p + 64 * KIB + (size_t)(i % NRECV) * SLOT;
}

static uint32_t wlen(uint32_t i)
{
	return msg_len(i) ? msg_len(i) : 1;	/* (a byte to watch for) */
}

/* The last byte of round i's WRITE from side `from`. */
static uint8_t last_of(uint32_t i, int from)
{
	uint8_t b[SLOT];

	fill_pattern(b, wlen(i), i * 2 + (uint32_t)from);
	return b[wlen(i) - 1];
}

/* Round i's window made ready: its last byte not what round i writes. */
static void win_clear(struct net_end *n, uint32_t i, int from)
{
	memset(win(n, i), (uint8_t)~last_of(i, from), SLOT);
}

static void write_round(struct net_end *n, uint32_t i, int b)
{
	uint8_t *tx = n->b.p + (size_t)(i % NRECV) * SLOT;
	uint32_t len = wlen(i);

	fill_pattern(tx, len, i * 2 + (uint32_t)b);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, i, tx, len, n->b.mr->lkey,
			 IBV_SEND_SIGNALED | (len <= 64 ? IBV_SEND_INLINE : 0),
			 n->peer.addr + 64 * KIB + (i % NRECV) * SLOT, n->peer.rkey, 0) == 0,
	      "post WRITE %u", i);
}

/* As ib_write_lat waits: on its memory; polling the empty receive CQ
 * meanwhile, which is what lets the quick pass place the WRITE. */
static void write_wait(struct net_end *n, uint32_t i, int from)
{
	volatile uint8_t *last = win(n, i) + wlen(i) - 1;
	uint64_t end = now_ms() + DEADLINE_MS;
	char what[48];
	struct ibv_wc wc;

	while (*last != last_of(i, from)) {
		CHECK(ibv_poll_cq(n->rcq, 1, &wc) == 0, "round %u: a receive completion", i);
		CHECK(now_ms() < end, "round %u: the WRITE did not land", i);
	}
	snprintf(what, sizeof(what), "WRITE round %u", i);
	check_pattern(win(n, i), wlen(i), i * 2 + (uint32_t)from, what);
}

static void wr_side(struct net_end *n)
{
	int me = n->role == NET_A ? 0 : 1;
	uint32_t sdone = 0;

	if (me)
		win_clear(n, 0, 0);
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < ROUNDS; i++) {
		if (!me) {
			win_clear(n, i, 1);	/* (B writes round i after ours) */
			write_round(n, i, 0);
		}
		write_wait(n, i, !me);
		if (me) {
			win_clear(n, i + 1, 0);	/* (A writes it after our reply) */
			write_round(n, i, 1);
		}
		net_reap(n, &sdone, 0, IBV_WC_RDMA_WRITE);
	}
	net_reap(n, &sdone, ROUNDS, IBV_WC_RDMA_WRITE);
	net_sync(n, T_DONE);
}

static void wr_side_a(struct net_end *n)
{
	unsetenv("SOFTRNIC_STATS");	/* (the count is B's) */
	wr_side(n);
}

/* ---- lone ACKs as the ring's ack word ----------------------------------- */

#define ACK_ROUNDS 400

/* A: SENDs one at a time, each waited for: the first half by polling the
 * send CQ (the quick pass takes B's ACK word), the second half by its
 * completion event alone, with no poll before it (only the progress
 * thread, woken by B's store, can take the word then: without the wakeup
 * the event never comes). Every completion successful and in order. */
static void ackw_a(struct net_end *n)
{
	uint32_t sdone = 0;

	unsetenv("SOFTRNIC_STATS");	/* (the count is B's) */
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < ACK_ROUNDS; i++) {
		struct ibv_wc wc;

		if (i < ACK_ROUNDS / 2) {
			send_round(n, i, 0);
			net_reap_sends(n, &sdone, i + 1);
			continue;
		}
		CHECK(ibv_req_notify_cq(n->scq, 0) == 0, "round %u: ibv_req_notify_cq", i);
		send_round(n, i, 0);
		struct pollfd pfd = { .fd = n->ch->fd, .events = POLLIN };
		struct ibv_cq *cq;
		void *cq_ctx;

		CHECK(poll(&pfd, 1, DEADLINE_MS) == 1, "round %u: no completion event", i);
		CHECK(ibv_get_cq_event(n->ch, &cq, &cq_ctx) == 0 && cq == n->scq,
		      "round %u: ibv_get_cq_event", i);
		ibv_ack_cq_events(cq, 1);
		CHECK(ibv_poll_cq(n->scq, 1, &wc) == 1, "round %u: an event, no completion", i);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i && wc.opcode == IBV_WC_SEND,
		      "round %u: %s wr_id %llu", i, ibv_wc_status_str(wc.status),
		      (unsigned long long)wc.wr_id);
		sdone++;
	}
	net_sync(n, T_DONE);
}

/* B: takes each SEND, checks its bytes, sends nothing. */
static void ackw_b(struct net_end *n)
{
	struct ibv_wc wc;

	for (uint32_t i = 0; i < NRECV; i++)
		post_slot(n, i);
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < ACK_ROUNDS; i++) {
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "round %u: nothing", i);
		check_round(n, &wc, i, 0);
		post_slot(n, i);
	}
	net_sync(n, T_DONE);
}

/* A one-way stream of SENDs, each waited for: B's ACKs go alone, as its
 * ring's ack word (0 of them before it), and A takes them both ways. */
static void sub_ack_words(void)
{
	struct net_opts o = net_opts_default();

	o.scq_chan = 1;
	pair_count(&o, ackw_a, ackw_b, "shm_ack_words", ACK_ROUNDS / 2, 2 * ACK_ROUNDS,
		   "lone ACKs B sent as its ack word in " STR(ACK_ROUNDS) " SENDs");
}

/* 1000 rounds of WRITEs of 1 to 1024 bytes, inline and not, each side
 * polling while it waits: every byte lands, every WRITE completes in
 * order, and B's quick pass took A's WRITE records (997; A's ACKs go
 * alone, as its ring's ack word, which is not a record; none without
 * WRITEs in the quick pass). */
static void sub_writes(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	pair_count(&o, wr_side_a, wr_side, "rx_quick", ROUNDS - ROUNDS / 10, ROUNDS,
		   "records B's quick pass took in " STR(ROUNDS) " rounds of WRITEs");
}

/* A small WRITE with a wrong key, to a peer that polls: refused there (its
 * QP goes to ERROR, its receive flushed), REM_ACCESS_ERR here, and not a
 * byte of the region changed. Nearly always the quick pass refuses it
 * (B's rx_quick 1: 0 without WRITEs in the quick pass). */
/* Polling all the while (so that the quick pass may take what comes),
 * until the receive wr_id completes, flushed: the QP went to ERROR. */
static void expect_flushed(struct net_end *n, uint64_t wr_id)
{
	uint64_t end = now_ms() + DEADLINE_MS;
	struct ibv_wc wc;
	int got = 0;

	while (!got && now_ms() < end)
		got = ibv_poll_cq(n->rcq, 1, &wc);
	CHECK(got == 1 && wc.wr_id == wr_id && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "the receive flushed (got %d, status %d)", got, got ? (int)wc.status : -1);
}

static void bad_a(struct net_end *n)
{
	struct ibv_wc wc;

	unsetenv("SOFTRNIC_STATS");	/* (the count is B's) */
	net_sync(n, T_GO);
	usleep(20000);	/* (B polls by now) */
	fill_pattern(n->b.p, 16, 5);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 1, n->b.p, 16, n->b.mr->lkey,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, n->peer.addr + 64 * KIB,
			 ~n->peer.rkey, 0) == 0, "post the WRITE");
	expect_wc(n->scq, &wc, 1, IBV_WC_REM_ACCESS_ERR, -1, "WRITE with a wrong key");
	net_sync(n, T_DONE);
}

static void bad_b(struct net_end *n)
{
	memset(win(n, 0), 0x5a, SLOT);
	post_recv1(n->qp, 0xb1, win(n, 1), 64, n->b.mr->lkey);
	net_sync(n, T_GO);
	expect_flushed(n, 0xb1);
	check_filled(win(n, 0), 0x5a, SLOT, "the window after the refused WRITE");
	net_sync(n, T_DONE);
}

static void sub_write_refused(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	/* (B's progress thread, woken for the record, may take it first
	 * when B's poll is off the CPU: a busy machine) */
	pair_count(&o, bad_a, bad_b, "rx_quick", 0, 1,
		   "records B's quick pass took (the refused WRITE)");
}

/* ---- a WRITE's remembered key: a region gone, or its rights cut ---- */

enum { T_WROTE = 0x41, T_CHANGED };

/* A writes twice with B's key of a second region, each while B polls:
 * the first lands; between the two, B deregisters that region (or takes
 * its remote write right away); the second must be refused
 * (REM_ACCESS_ERR) and change nothing, though the QP remembered the key
 * from the first. */
static void key_a(struct net_end *n)
{
	uint64_t addr, rkey;
	struct ibv_wc wc;

	net_sync(n, T_GO);
	addr = net_get(n);
	rkey = net_get(n);
	fill_pattern(n->b.p, 64, 71);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 1, n->b.p, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, addr, (uint32_t)rkey, 0) == 0,
	      "post the first WRITE");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "first WRITE");
	net_sync(n, T_WROTE);
	net_expect(n, T_CHANGED, "B changed the region");
	usleep(20000);	/* (B polls again by now) */
	fill_pattern(n->b.p, 64, 72);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 2, n->b.p, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED | IBV_SEND_INLINE, addr, (uint32_t)rkey, 0) == 0,
	      "post the second WRITE");
	expect_wc(n->scq, &wc, 2, IBV_WC_REM_ACCESS_ERR, -1, "WRITE through the old key");
	net_sync(n, T_DONE);
}

static void key_b(struct net_end *n, bool dereg)
{
	uint8_t *region = n->b.p + 1 * MIB;
	struct ibv_mr *mr = ibv_reg_mr(n->t.pd, region, 4096, ACC_ALL);
	uint64_t end;
	struct ibv_wc wc;

	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	memset(region, 0, 4096);
	post_recv1(n->qp, 0xb1, win(n, 1), 64, n->b.mr->lkey);
	net_sync(n, T_GO);
	net_put(n, (uintptr_t)region);
	net_put(n, mr->rkey);
	end = now_ms() + DEADLINE_MS;
	while (region[63] == 0 && now_ms() < end)
		CHECK(ibv_poll_cq(n->rcq, 1, &wc) == 0, "a receive completion");
	net_sync(n, T_WROTE);	/* (A's first WRITE done) */
	check_pattern(region, 64, 71, "the first WRITE");
	if (dereg)
		CHECK(ibv_dereg_mr(mr) == 0, "dereg: %s", strerror(errno));
	else
		CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE) == 0, "rereg: %s", strerror(errno));
	memset(region, 0x77, 4096);
	net_put(n, T_CHANGED);
	expect_flushed(n, 0xb1);
	check_filled(region, 0x77, 4096, "the region after the refused WRITE");
	if (!dereg)
		CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	net_sync(n, T_DONE);
}

static void dereg_b(struct net_end *n) { key_b(n, true); }
static void rereg_b(struct net_end *n) { key_b(n, false); }

static void sub_write_after_dereg(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	net_fork_run(&o, key_a, dereg_b);
}

static void sub_write_after_rereg(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	net_fork_run(&o, key_a, rereg_b);
}

static void sub_srq_pingpong(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	o.srq = 1;
	pair_count(&o, pp_side, pp_side, "rx_quick", ROUNDS / 4, 4 * ROUNDS,
		   "records delivered by a poller's quick pass in " STR(ROUNDS) " rounds, SRQs");
}

static void sub_parked(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	/* (a bound for a loaded machine: B's poller, descheduled, leaves
	 * some to its progress thread's general pass; 8-16 seen, 15-16 on an
	 * idle machine; with both CPUs busy besides, once 0 of 16: up to
	 * three pairs) */
	pair_count_tries(&o, park_a, park_b, "rx_quick", PARKED / 8, PARKED,
			 "SENDs B's quick pass took with no receive posted, of " STR(PARKED), 3);
}

/* The same through an SRQ with nothing posted to it. */
static void sub_srq_parked(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	o.srq = 1;
	pair_count_tries(&o, park_a, park_b, "rx_quick", PARKED / 8, PARKED,
			 "SENDs B's quick pass took with an empty SRQ, of " STR(PARKED), 3);
}

/* ---- the one-pass post and receive, at their edges ---------------------- */

/* (sq_post_small, qp_rx_lent_send: DESIGN.md decision 23, "one pass") A
 * ping-pong whose requests and receives step off the one-pass paths now
 * and then, and must then be what the general way makes of them: the
 * receive of every fifth round in two pieces, of every fifth + 2 through
 * a second region over the same bytes (another key); every other round's
 * SEND inline; every 50 rounds A first posts what a post must refuse, with
 * nothing sent: inline beyond max_inline_data, more pieces than
 * max_send_sge (EINVAL), inline from a page it may not read (EFAULT), one
 * beyond a full SQ (ENOMEM). Every byte of every round is checked on both
 * sides, in order. Then a SEND larger than B's receive: LOC_LEN_ERR at B,
 * REM_INV_REQ_ERR at A, as rx_send fails it. */
#define EDGE_ROUNDS 400
#define EDGE_GAP 5

struct edge {
	struct ibv_mr *mr2;	/* the receive windows again */
	struct ibv_qp_cap cap;
	uint8_t *noread;	/* a PROT_NONE page */
};

static void edge_init(struct net_end *n, struct edge *e)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;

	e->mr2 = ibv_reg_mr(n->b.mr->pd, n->b.p + 64 * KIB, NRECV * SLOT, IBV_ACCESS_LOCAL_WRITE);
	CHECK(e->mr2, "second region");
	CHECK(ibv_query_qp(n->qp, &qa, IBV_QP_CAP, &ia) == 0, "query QP");
	e->cap = qa.cap;
	e->noread = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(e->noread != MAP_FAILED, "mmap");
}

/* The receive for round j (the slot post_slot would post). */
static void edge_recv(struct net_end *n, struct edge *e, uint32_t j)
{
	uint8_t *rx = win(n, j);
	struct ibv_sge s[2] = { { (uintptr_t)rx, SLOT, n->b.mr->lkey } };
	struct ibv_recv_wr w = { .wr_id = 1000 + j % NRECV, .sg_list = s, .num_sge = 1 }, *bad;

	if (j % 5 == 1) {
		/* (a gap of EDGE_GAP bytes between the two, that stays) */
		s[0].length = 3;
		s[1] = (struct ibv_sge){ (uintptr_t)rx + 3 + EDGE_GAP, SLOT - 3 - EDGE_GAP,
					 n->b.mr->lkey };
		memset(rx + 3, 0x77, EDGE_GAP);
		w.num_sge = 2;
	} else if (j % 5 == 3) {
		s[0].lkey = e->mr2->lkey;
	}
	CHECK(ibv_post_recv(n->qp, &w, &bad) == 0, "post receive for round %u", j);
}

/* check_round, for a receive in two pieces (edge_recv) */
static void edge_check(struct net_end *n, const struct ibv_wc *wc, uint32_t i, int from)
{
	uint8_t *rx = win(n, i), want[SLOT];
	uint32_t len = msg_len(i), first = len < 3 ? len : 3;

	if (i % 5 != 1) {
		check_round(n, wc, i, from);
		return;
	}
	CHECK(wc->wr_id == 1000 + i % NRECV, "round %u: wr_id %llu", i,
	      (unsigned long long)wc->wr_id);
	net_check_recv(wc, IBV_WC_RECV, len, n, "a receive in two pieces");
	fill_pattern(want, len, i * 2 + (uint32_t)from);
	check_bytes(rx, want, first, "the first piece");
	check_filled(rx + 3, 0x77, EDGE_GAP, "between the pieces");
	check_bytes(rx + 3 + EDGE_GAP, want + first, len - first, "the second piece");
}

static void edge_send(struct net_end *n, uint32_t i, int b)
{
	uint8_t *tx = n->b.p + (size_t)(i % NRECV) * SLOT;
	uint32_t len = msg_len(i);
	unsigned int fl = IBV_SEND_SIGNALED;

	if ((i & 1) && len <= 64)
		fl |= IBV_SEND_INLINE;
	fill_pattern(tx, len, i * 2 + (uint32_t)b);
	CHECK(post_send1(n->qp, has_imm(i) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, i, tx, len,
			 n->b.mr->lkey, fl, 0, 0, 0xab000000u + i) == 0,
	      "post round %u", i);
}

/* A's refusals: each post fails with nothing queued or sent (B's next
 * message is still the next round's). outstanding: A's SENDs not yet
 * reaped. */
static void edge_refusals(struct net_end *n, struct edge *e, uint32_t outstanding)
{
	struct ibv_sge sg[2] = { { (uintptr_t)n->b.p, e->cap.max_inline_data + 1, n->b.mr->lkey },
				 { (uintptr_t)n->b.p + 4096, 8, n->b.mr->lkey } };
	struct ibv_send_wr wr = { .wr_id = 9000, .sg_list = sg, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad = NULL;
	uint32_t fill = e->cap.max_send_wr - outstanding;
	struct ibv_wc wc;
	int rc;

	rc = ibv_post_send(n->qp, &wr, &bad);
	CHECK(rc == EINVAL && bad == &wr, "inline beyond max_inline_data: %d", rc);
	sg[0].length = 8;
	wr.num_sge = (int)e->cap.max_send_sge + 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	CHECK(e->cap.max_send_sge == 1, "max_send_sge %u", e->cap.max_send_sge);
	rc = ibv_post_send(n->qp, &wr, &bad);
	CHECK(rc == EINVAL, "more pieces than max_send_sge: %d", rc);
	wr.num_sge = 1;
	sg[0].addr = (uintptr_t)e->noread;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	rc = ibv_post_send(n->qp, &wr, &bad);
	CHECK(rc == EFAULT, "inline from a page we may not read: %d", rc);
	/* a full SQ: empty WRITEs, the last signaled (its completion frees
	 * the others' slots), then one more */
	for (uint32_t k = 0; k < fill; k++)
		CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 9100 + k, NULL, 0, 0,
				 k + 1 == fill ? IBV_SEND_SIGNALED : 0, n->peer.addr,
				 n->peer.rkey, 0) == 0,
		      "WRITE %u of %u to fill the SQ", k, fill);
	rc = post_send1(n->qp, IBV_WR_SEND, 9001, n->b.p, 8, n->b.mr->lkey, IBV_SEND_SIGNALED,
			0, 0, 0);
	CHECK(rc == ENOMEM, "a SEND beyond a full SQ: %d", rc);
	/* (the SENDs outstanding complete first, in order) */
	for (uint32_t k = 0; k < outstanding + 1; k++) {
		CHECK(poll_one(n->scq, &wc, DEADLINE_MS) == 1, "send completion %u", k);
		CHECK(wc.status == IBV_WC_SUCCESS, "send completion %u: status %d", k, wc.status);
	}
	CHECK(wc.wr_id == 9100 + fill - 1, "the filling WRITE completes last (%llu)",
	      (unsigned long long)wc.wr_id);
}

static void edge_side(struct net_end *n)
{
	int me = n->role == NET_A ? 0 : 1;
	uint32_t sent = 0, sdone = 0;
	struct edge e;
	struct ibv_wc wc;

	edge_init(n, &e);
	for (uint32_t j = 0; j < NRECV; j++)
		edge_recv(n, &e, j);
	net_sync(n, T_GO);
	for (uint32_t i = 0; i < EDGE_ROUNDS; i++) {
		if (!me && i % 50 == 7) {
			edge_refusals(n, &e, sent - sdone);
			sdone = sent;
		}
		if (!me) {
			edge_send(n, i, me);
			sent++;
		}
		CHECK(poll_one(n->rcq, &wc, DEADLINE_MS) == 1, "round %u: nothing", i);
		edge_check(n, &wc, i, !me);
		edge_recv(n, &e, i + NRECV);
		if (me) {
			edge_send(n, i, me);
			sent++;
		}
		net_reap_sends(n, &sdone, 0);
	}
	net_reap_sends(n, &sdone, sent);
	net_sync(n, T_SENT);
	/* a SEND larger than B's next receive (one piece of SLOT bytes) */
	if (!me) {
		fill_pattern(n->b.p, 3000, 7);
		CHECK(post_send1(n->qp, IBV_WR_SEND, 9500, n->b.p, 3000, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post the SEND too large");
		expect_wc(n->scq, &wc, 9500, IBV_WC_REM_INV_REQ_ERR, -1, "SEND too large (A)");
	} else {
		expect_wc(n->rcq, &wc, 1000 + EDGE_ROUNDS % NRECV, IBV_WC_LOC_LEN_ERR, -1,
			  "SEND too large (B)");
	}
	ibv_dereg_mr(e.mr2);
	munmap(e.noread, 4096);
	net_sync(n, T_DONE);
}

static void sub_edges(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	o.max_send_sge = 1;
	o.max_send_wr = 16;
	o.max_recv_sge = 2;
	pair_count(&o, edge_side, edge_side, "rx_quick", EDGE_ROUNDS / 4, 4 * EDGE_ROUNDS,
		   "records delivered by a poller's quick pass in " STR(EDGE_ROUNDS) " rounds");
}

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "pingpong", sub_pingpong },
		{ "unfenced", sub_unfenced },
		{ "quiet", sub_quiet },
		{ "writes", sub_writes },
		{ "ack_words", sub_ack_words },
		{ "write_refused", sub_write_refused },
		{ "write_after_dereg", sub_write_after_dereg },
		{ "write_after_rereg", sub_write_after_rereg },
		{ "parked", sub_parked },
		{ "srq_pingpong", sub_srq_pingpong },
		{ "srq_parked", sub_srq_parked },
		{ "edges", sub_edges },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
