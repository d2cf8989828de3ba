/* A peer that keeps scribbling on the shared rings while both sides move
 * data (DESIGN.md decision 23; issue 8: "whose shared memory is corrupted
 * by a buggy or hostile peer, cannot crash the survivor or make it write
 * outside its registered memory"). test_net_shm's `corrupt` fills the
 * area with garbage once, with nothing under way; here the garbage comes
 * while records are written and read, a few bytes at a time:
 *
 * - scribble: once both rings have carried a record, a thread of B's
 *   writes random bytes at random places of the shared area (through a
 *   mapping of its own, which outlives the library's: anywhere; or, in
 *   rounds of a second style, also in the header's indices and help
 *   boards and just ahead of a ring's head; or, in a third, often in
 *   the help boards),
 *   sparse for a while, then dense, while A posts SENDs of 64 B and 3 KiB, WRITEs of 4
 *   and 40 KiB and READs of 8 and 64 KiB (small records, inline and
 *   pulled ones, READ responses) and B answers every SEND with one. Both
 *   processes read what the other side's library and B's thread wrote.
 *   Neither may crash or hang: every request and receive posted
 *   completes, with success or, once the QP is in ERROR, an error
 *   (flushed), each within DEADLINE_MS; the QP that survived the run is
 *   moved to ERROR to flush the rest. A's memory that no peer may write
 *   (an unregistered page, and a region registered for local access
 *   only) is untouched; both exit cleanly. Three rounds, three seeds.
 * - scribble_uc: the same on UC QPs (WRITEs with immediate data where RC
 *   READs): no answers, a request complete once written, messages that
 *   find no receive dropped; B answers SENDs, and receives with
 *   immediate data, as they come.
 */
#include "net_common.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { T_USED = 0x100, T_GO = 0x200, T_DONE = 0x300 };

#define XFER (1 * MIB)		/* the traffic's part of each buffer */
#define RUN_MS 700		/* A's posting, per round */
#define SPARSE_MS 250		/* B's thread: a byte every 200 us, then bursts */
#define A_WINDOW 16		/* A's requests under way */
#define RECVS 32		/* receives each side keeps posted */

static uint64_t seed_of_round;

/* One SEND each way, receives at off. */
static void ping(struct net_end *n, uint64_t id)
{
	struct ibv_wc wc;

	post_recv1(n->qp, id, n->b.p + XFER + 8 * KIB, 64, n->b.mr->lkey);
	net_sync(n, T_USED - 0x80 + id);
	CHECK(post_send1(n->qp, IBV_WR_SEND, id, n->b.p + XFER, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(n->scq, &wc, id, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	expect_wc(n->rcq, &wc, id, IBV_WC_SUCCESS, IBV_WC_RECV, "RECV");
}

/* Completions of one CQ, none waited for: each is counted off *left
 * (every completion is of something posted: a count that goes below
 * zero is a completion from nowhere); an error status sets *err (and
 * the first one *first). */
static int reap(struct ibv_cq *cq, int *left, bool *err, struct ibv_wc *first)
{
	struct ibv_wc wc[16];
	int k = ibv_poll_cq(cq, 16, wc);

	CHECK(k >= 0, "ibv_poll_cq: %d", k);
	for (int i = 0; i < k; i++) {
		(*left)--;
		CHECK(*left >= 0, "a completion nothing was posted for (wr_id %llu, %s)",
		      (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
		if (wc[i].status != IBV_WC_SUCCESS) {
			if (first && first->status == IBV_WC_SUCCESS)
				*first = wc[i];
			*err = true;
		}
	}
	return k;
}

/* Everything still posted completes, each within DEADLINE_MS of the one
 * before: the QP is moved to ERROR first (if it is not there already),
 * which flushes what it has not done. */
static void drain(struct net_end *n, int sends, int recvs, const char *who)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	bool err = false;
	uint64_t last = now_ms();

	CHECK(ibv_modify_qp(n->qp, &a, IBV_QP_STATE) == 0, "%s: to ERROR", who);
	while (sends || recvs) {
		int got = reap(n->scq, &sends, &err, NULL) + reap(n->rcq, &recvs, &err, NULL);

		if (got)
			last = now_ms();
		CHECK(now_ms() - last < DEADLINE_MS,
		      "%s: %d requests and %d receives never completed", who, sends, recvs);
	}
}

/* ---- A: the traffic ------------------------------------------------------ */

static int post_op(struct net_end *n, uint64_t i)
{
	uint8_t *src = n->b.p + (i % 8) * 64 * KIB;
	uint64_t peer = n->peer.addr + ((i * 7) % 8) * 64 * KIB;
	int e;

	switch (i % 6) {
	case 0:
	case 3:
		e = post_send1(n->qp, IBV_WR_SEND, i, src, i % 6 ? 3000 : 64, n->b.mr->lkey,
			       IBV_SEND_SIGNALED, 0, 0, 0);
		break;
	case 1:
	case 4:
		e = post_send1(n->qp, IBV_WR_RDMA_WRITE, i, src, i % 6 == 1 ? 4 * KIB : 40 * KIB,
			       n->b.mr->lkey, IBV_SEND_SIGNALED, peer, n->peer.rkey, 0);
		break;
	default:
		/* (UC has no READs: a WRITE with immediate data instead) */
		if (n->o.type == IBV_QPT_UC)
			e = post_send1(n->qp, IBV_WR_RDMA_WRITE_WITH_IMM, i, src,
				       i % 6 == 2 ? 8 * KIB : 64 * KIB, n->b.mr->lkey,
				       IBV_SEND_SIGNALED, peer, n->peer.rkey, (uint32_t)i);
		else
			e = post_send1(n->qp, IBV_WR_RDMA_READ, i, src,
				       i % 6 == 2 ? 8 * KIB : 64 * KIB, n->b.mr->lkey,
				       IBV_SEND_SIGNALED, peer, n->peer.rkey, 0);
		break;
	}
	return e;
}

static void scribble_a(struct net_end *n)
{
	/* memory no peer may write: a page never registered, and a region
	 * registered for local access only (its keys are never told) */
	uint8_t *page = mmap(NULL, 4 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
	uint8_t *local = mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *lmr;
	int sends = 0, recvs = 0;
	uint64_t i = 0, start, end, posted = 0;
	bool err = false;
	struct ibv_wc first = { .status = IBV_WC_SUCCESS };

	CHECK(page != MAP_FAILED && local != MAP_FAILED, "mmap");
	memset(page, 0xa5, 4 * KIB);
	memset(local, 0x5a, 64 * KIB);
	lmr = ibv_reg_mr(n->t.pd, local, 64 * KIB, IBV_ACCESS_LOCAL_WRITE);
	CHECK(lmr, "ibv_reg_mr (local only): %s", strerror(errno));
	fill_pattern(n->b.p, XFER, 31);

	net_until_used_a(n, ping);
	if (!net_get(n)) {
		/* (B found no descriptor of the rings to map them itself) */
		net_check_child_status(net_wait_child(n->peer_pid, 10000), "B");
		n->peer_pid = 0;
		SKIP("B has no descriptor of the rings (not root, and the library keeps none)");
	}
	for (; recvs < RECVS; recvs++)
		post_recv1(n->qp, 1000 + (uint64_t)recvs, n->b.p + XFER + 16 * KIB, 64,
			   n->b.mr->lkey);
	net_sync(n, T_GO);
	start = now_ms();
	end = start + RUN_MS;
	while (now_ms() < end && !err) {
		while (sends < A_WINDOW && !err) {
			/* (a QP in ERROR may refuse a post: nothing is owed then) */
			if (post_op(n, i++)) {
				err = true;
				break;
			}
			sends++;
			posted++;
		}
		reap(n->scq, &sends, &err, &first);
		if (reap(n->rcq, &recvs, &err, NULL) && !err)
			while (recvs < RECVS &&
			       !post_recv1_rc(n->qp, 1000 + (uint64_t)recvs,
					      n->b.p + XFER + 16 * KIB, 64, n->b.mr->lkey))
				recvs++;
	}
	NOTE("A, seed %llu: %llu requests posted; %s after %llu ms%s%s",
	     (unsigned long long)seed_of_round, (unsigned long long)posted,
	     err ? "the QP broke" : "the QP survived", (unsigned long long)(now_ms() - start),
	     err && first.status != IBV_WC_SUCCESS ? ", first error " : "",
	     err && first.status != IBV_WC_SUCCESS ? ibv_wc_status_str(first.status) : "");
	drain(n, sends, recvs, "A");
	check_filled(page, 0xa5, 4 * KIB, "A's unregistered page");
	check_filled(local, 0x5a, 64 * KIB, "A's region registered for local access only");
	CHECK(ibv_dereg_mr(lmr) == 0, "ibv_dereg_mr");
	munmap(page, 4 * KIB);
	munmap(local, 64 * KIB);
	net_put(n, T_DONE);
	net_expect(n, T_DONE + 1, "B drained");
}

/* ---- B: answers, and the thread that scribbles --------------------------- */

struct scribbler {
	uint8_t *p;
	size_t len;
	unsigned int seed;
	int style;		/* 0: anywhere; 1: aimed, some of the time;
				 * 2: the help boards, some of the time */
	atomic_bool stop;
	uint64_t writes;
};

static void *scribble(void *arg)
{
	struct scribbler *s = arg;
	uint64_t dense = now_ms() + SPARSE_MS;

	while (!atomic_load(&s->stop)) {
		bool burst = now_ms() >= dense;
		int n = burst ? 64 : 1;

		for (int k = 0; k < n; k++) {
			size_t at = 16 + (size_t)rand_r(&s->seed) % (s->len - 24);
			unsigned int where = s->style == 1 ? (unsigned int)rand_r(&s->seed) % 16 : 0;
			uint64_t size, head;

			/* Past the magic: anywhere (records, stale or not);
			 * in rounds of the second style also in the header
			 * (indices, flags, the help boards), one in 16, and
			 * just ahead of a ring's head (the records to be read
			 * next), two in 16: those break the link within a few
			 * ms, the first style's in a quarter of a second. The
			 * third style writes the help boards (the header past
			 * its indices) one time in four: requests posted,
			 * taken, done. */
			if (s->style == 2 && rand_r(&s->seed) % 4 == 0) {
				at = 448 + (size_t)rand_r(&s->seed) % (4 * KIB - 448 - 8);
			} else if (where == 1) {
				at = 16 + (size_t)rand_r(&s->seed) % (4 * KIB - 24);
			} else if (where == 2 || where == 3) {
				int i = rand_r(&s->seed) & 1;

				memcpy(&size, s->p + 8, sizeof(size));
				memcpy(&head, s->p + 128 + 192 * i, sizeof(head));
				if (size && !(size & (size - 1)) && 4 * KIB + 2 * size <= s->len)
					at = 4 * KIB + (size_t)i * size +
					     ((head + (uint64_t)(rand_r(&s->seed) % 512)) & (size - 1));
			}
			if (at > s->len - 8)
				at = s->len - 8;

			if (rand_r(&s->seed) & 1)
				s->p[at] = (uint8_t)rand_r(&s->seed);
			else
				memset(s->p + (at & ~(size_t)7), (uint8_t)rand_r(&s->seed), 8);
			s->writes++;
		}
		nanosleep(&(struct timespec){ 0, burst ? 50000 : 200000 }, NULL);
	}
	return NULL;
}

static bool oob_ready(struct net_end *n)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static void scribble_b(struct net_end *n)
{
	struct scribbler s = { .seed = (unsigned int)seed_of_round,
			       .style = (int)(seed_of_round % 3) };
	uint8_t *base = NULL;
	pthread_t t;
	int fd, sends = 0, recvs = 0, answered = 0;
	bool err = false;
	size_t len = net_until_used_b(n, ping, &base);

	fd = shm_rings_fd(base, len);
	net_put(n, fd >= 0);
	if (fd < 0)
		return;
	s.p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(s.p != MAP_FAILED, "mmap the rings: %s", strerror(errno));
	close(fd);
	s.len = len;
	for (; recvs < RECVS; recvs++)
		post_recv1(n->qp, 2000 + (uint64_t)recvs, n->b.p + XFER + 16 * KIB, 64 * KIB,
			   n->b.mr->lkey);
	net_sync(n, T_GO);
	CHECK(pthread_create(&t, NULL, scribble, &s) == 0, "pthread_create");
	while (!oob_ready(n)) {
		struct ibv_wc wc[16];
		int k = ibv_poll_cq(n->rcq, 16, wc);

		CHECK(k >= 0, "ibv_poll_cq: %d", k);
		for (int i = 0; i < k; i++) {
			recvs--;
			if (wc[i].status != IBV_WC_SUCCESS) {
				err = true;
				continue;
			}
			if (err)
				continue;
			/* each SEND answered with one (the other ring) */
			if (post_send1(n->qp, IBV_WR_SEND, 3000 + (uint64_t)answered,
				       n->b.p + XFER + 32 * KIB, 64, n->b.mr->lkey,
				       IBV_SEND_SIGNALED, 0, 0, 0) == 0) {
				sends++;
				answered++;
			}
			if (!post_recv1_rc(n->qp, 2000, n->b.p + XFER + 16 * KIB, 64 * KIB,
					   n->b.mr->lkey))
				recvs++;
		}
		reap(n->scq, &sends, &err, NULL);
	}
	atomic_store(&s.stop, true);
	CHECK(pthread_join(t, NULL) == 0, "pthread_join");
	munmap(s.p, len);
	net_expect(n, T_DONE, "A done");
	NOTE("B: %llu scribbles, %d SENDs answered, %s", (unsigned long long)s.writes, answered,
	     err ? "the QP broke" : "the QP survived");
	drain(n, sends, recvs, "B");
	net_put(n, T_DONE + 1);
}

static void scribble_rounds(enum ibv_qp_type type)
{
	struct net_opts o = net_opts_default();

	o.buf_len = XFER + 128 * KIB;
	o.max_send_wr = 64;
	o.max_recv_wr = 64;
	o.type = type;
	/* (CHAOS_ROUNDS=n for more, CHAOS_SEED=s for others: a search, not
	 * part of the suite; a subtest has 25 s) */
	int rounds = getenv("CHAOS_ROUNDS") ? atoi(getenv("CHAOS_ROUNDS")) : 3;
	uint64_t base = getenv("CHAOS_SEED") ? strtoull(getenv("CHAOS_SEED"), NULL, 0) : 1000;

	for (int round = 0; round < rounds; round++) {
		seed_of_round = base + (uint64_t)round * 7919;	/* (every style in 3 rounds) */
		net_fork_run(&o, scribble_a, scribble_b);
	}
}

static void sub_scribble(void)
{
	scribble_rounds(IBV_QPT_RC);
}

static void sub_scribble_uc(void)
{
	scribble_rounds(IBV_QPT_UC);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "scribble", sub_scribble },
		{ "scribble_uc", sub_scribble_uc },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
