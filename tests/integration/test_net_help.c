/* Help (DESIGN.md decision 23, "help"): a large mapped record's copy
 * shared between the two processes of a same-host link. The reader copies
 * the first part; the writer's polling thread copies the rest straight
 * from its memory into the reader's (its memfd, mapped read-write).
 * - writes: A WRITEs 16 MiB into B three times (4 MiB at a time, a
 *   pattern each), busy-polling for each completion, while B's program
 *   only waits (its progress thread places them): B finds every byte, and
 *   A's stats line says it copied some of them for B (shm_helped; asked
 *   only when run alone, as ctest's integration/test_net_help_alone, in
 *   one of three runs: a loaded machine can keep A's poller off the CPUs
 *   while B copies throughout a run, and the test skips if two threads
 *   it then starts do not each get most of a CPU). A polls without a
 *   pause (expect_wc naps).
 * - writes_off: the same with SOFTRNIC_SHM_HELP=0: the bytes arrive, and
 *   nobody helps (shm_helped 0).
 * - send_read: 1 MiB SENDs from A into B's receives (both polling), and
 *   4 MiB READs by B of A's memory while A polls its empty CQ (A writes
 *   the responses, B reads them): byte for byte, and help counted (as
 *   in writes).
 * - bogus: B writes requests on both boards that A must refuse (a source
 *   outside A's shared memory or one that wraps, a file that is not a
 *   memfd, a length beyond any record, a destination beyond B's memfd or
 *   one that wraps), while A polls: A marks each FAILED and does not
 *   crash. A well-formed request (4 KiB of A's buffer into B's) is DONE
 *   with exactly those bytes, nothing next to them; then the link still
 *   carries a 4 MiB WRITE byte for byte.
 * - declined: B declines (FAILED) every request of A's it takes first
 *   while its 16 MiB WRITE, then a SEND, go into A: when the SEND
 *   completes A finds the WRITE whole (A copied those parts itself,
 *   also the ones it had left under way).
 * - declined_fault: the same with a page of A's target inaccessible,
 *   in a part A copies itself only when its slot comes round: the WRITE
 *   fails (A's QP to ERROR, B's SEND not successful), though A's later
 *   copies succeed.
 * - stuck: B takes every request A posts (state TAKEN, as a helper does)
 *   and never finishes one, while its WRITE into A is under way: within
 *   SHM_HELP_WAIT_NS (1 s) A gives up on the link, its QP goes to ERROR
 *   and its posted receive is flushed; nothing hangs.
 */
#include "net_common.h"

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { T_GO = 0x100, T_DONE = 0x200 };

#define PART	(4 * MIB)
#define ROUNDS	3

/* struct shm_hdr (src/chan/shm_priv.h): the two help boards (struct
 * shm_help_board: a line whose first word is the consumer's last posted
 * seq, then SLOTS requests of one line each, request seq in slot seq %
 * SLOTS) follow two struct shm_ring_ctl of 192 bytes from byte 64; in a
 * request: state, src, len, ino, off (u64), fd (u32). */
#define SLOTS		16
#define BOARD_AT(i)	(64 + 2 * 192 + (size_t)(i) * (64 + SLOTS * 64))
#define HELP_AT(i, seq)	(BOARD_AT(i) + 64 + (size_t)((seq) % SLOTS) * 64)
enum { H_STATE = 0, H_SRC = 8, H_LEN = 16, H_INO = 24, H_OFF = 32, H_FD = 40 };
enum { HELP_IDLE, HELP_POSTED, HELP_TAKEN, HELP_DONE, HELP_FAILED };

static _Atomic uint64_t *board_u64(uint8_t *base, int i, uint64_t seq, size_t off)
{
	return (_Atomic uint64_t *)(void *)(base + HELP_AT(i, seq) + off);
}

static _Atomic uint64_t *board_posted(uint8_t *base, int i)
{
	return (_Atomic uint64_t *)(void *)(base + BOARD_AT(i));
}

/* 1000 looks at every request slot of both boards: each POSTED one is
 * moved to phase to (as a helper takes one, or declines it). How many. */
static unsigned int board_answer(uint8_t *base, uint64_t to)
{
	unsigned int n = 0;

	for (int k = 0; k < 1000; k++) {
		for (int j = 0; j < 2 * SLOTS; j++) {
			_Atomic uint64_t *st = board_u64(base, j / SLOTS, (uint64_t)j, H_STATE);
			uint64_t s = atomic_load(st);

			if ((s & 0xff) == HELP_POSTED &&
			    atomic_compare_exchange_strong(st, &s, (s & ~0xffULL) | to))
				n++;
		}
	}
	return n;
}

/* One SEND each way: the link has switched to shm by the time both
 * sides look (the switch follows the first messages). */
static void ping(struct net_end *n, uint64_t id)
{
	struct ibv_wc wc;
	size_t off = n->o.buf_len - 4 * KIB;

	post_recv1(n->qp, id, n->b.p + off + 2 * KIB, 64, n->b.mr->lkey);
	net_put(n, T_GO + id);
	net_expect(n, T_GO + id, "peer's receive posted");
	CHECK(post_send1(n->qp, IBV_WR_SEND, id, n->b.p + off, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	expect_wc(n->scq, &wc, id, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND");
	expect_wc(n->rcq, &wc, id, IBV_WC_SUCCESS, IBV_WC_RECV, "RECV");
}

/* Poll cq (nothing may complete there) until the peer says want: our
 * program thread is the one that helps. */
static void poll_until(struct net_end *n, struct ibv_cq *cq, uint64_t want, const char *what)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };
	uint64_t end = now_ms() + DEADLINE_MS;
	struct ibv_wc wc;

	for (unsigned int i = 0;; i++) {
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "%s: a completion while waiting", what);
		if ((i & 255) == 255 && poll(&p, 1, 0) == 1)
			break;
		CHECK(now_ms() < end, "%s: nothing from the peer within %d ms", what, DEADLINE_MS);
	}
	net_expect(n, want, what);
}

/* expect_wc, polling without a pause (expect_wc's naps every 256 polls
 * would leave most requests to be taken back): the writer's program
 * thread is the one that helps. */
static void spin_wc(struct ibv_cq *cq, uint64_t id, int opcode, const char *what)
{
	uint64_t end = now_ms() + DEADLINE_MS;
	struct ibv_wc wc;
	int n;

	for (unsigned int i = 0; (n = ibv_poll_cq(cq, 1, &wc)) == 0; i++)
		CHECK((i & 4095) || now_ms() < end, "%s: no completion within %d ms", what,
		      DEADLINE_MS);
	CHECK(n == 1, "%s: ibv_poll_cq returned %d", what, n);
	CHECK(wc.wr_id == id && wc.status == IBV_WC_SUCCESS && (int)wc.opcode == opcode,
	      "%s: wr_id %llu %s opcode %d", what, (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status), wc.opcode);
}

/* ---- writes --------------------------------------------------------------- */

static void writes_a(struct net_end *n)
{
	ping(n, 1);
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < 4; i++) {
			uint64_t id = 10 + (uint64_t)(r * 4 + i);

			fill_pattern(n->b.p + i * PART, PART, (uint32_t)(100 + r * 4 + i));
			CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, id, n->b.p + i * PART, PART,
					 n->b.mr->lkey, IBV_SEND_SIGNALED,
					 n->peer.addr + (uint64_t)i * PART, n->peer.rkey, 0) == 0,
			      "post WRITE");
			spin_wc(n->scq, id, IBV_WC_RDMA_WRITE, "WRITE 4 MiB");
		}
		net_put(n, T_DONE + (uint64_t)r);
		net_expect(n, T_DONE + 16 + (uint64_t)r, "B checked");
	}
}

static void writes_b(struct net_end *n)
{
	char what[32];

	ping(n, 1);
	for (int r = 0; r < ROUNDS; r++) {
		net_expect(n, T_DONE + (uint64_t)r, "A's WRITEs done");
		for (int i = 0; i < 4; i++) {
			snprintf(what, sizeof(what), "WRITE %d of round %d", i, r);
			check_pattern(n->b.p + i * PART, PART, (uint32_t)(100 + r * 4 + i), what);
		}
		net_put(n, T_DONE + 16 + (uint64_t)r);
	}
}

static struct net_opts help_opts(void)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 4 * PART + 64 * KIB;	/* (shared: SOFTRNIC_SHM_MAP_MIN) */
	return o;
}

/* Are two CPUs free? Two threads spin for 100 ms; each must have run for
 * most of it. (Help needs the writer's poller on one while the reader
 * copies on the other.) */
static void *spin100(void *arg)
{
	struct timespec t0, t;
	uint64_t *ran = arg;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < 100000000LL);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	*ran = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
	return NULL;
}

static bool two_cpus_free(void)
{
	uint64_t a = 0, b = 0;
	pthread_t t;

	CHECK(pthread_create(&t, NULL, spin100, &a) == 0, "pthread_create");
	spin100(&b);
	pthread_join(t, NULL);
	NOTE("two threads spinning 100 ms ran %llu and %llu ms", (unsigned long long)a,
	     (unsigned long long)b);
	return a >= 70 && b >= 70;
}

/* Run the pair: its bytes are checked, and if the test runs alone (ctest's
 * integration/test_net_help_alone: help needs the writer's poller on a
 * CPU while the reader copies, which other tests' processes can prevent
 * throughout a short run) the help counted must be some, in one of three
 * runs. */
static void pair_helped(net_side_fn fa, net_side_fn fb, const char *what)
{
	struct net_opts o = help_opts();
	bool alone = getenv("INTEG_ALONE") != NULL;
	char path[64];

	for (int run = 1;; run++) {
		int st = pair_with_stats(&o, fa, fb, false, path);
		long long v = stats_sum(path, "shm_helped");
		bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;

		NOTE("%s (shm_helped), run %d: %lld", what, run, v);
		stats_done(path, !ok || (alone && v < 1 && run == 3));
		CHECK(ok, "the pair failed (status %#x)", st);
		if (!alone || v >= 1)
			return;
		if (run < 3)
			continue;
		if (!two_cpus_free())
			SKIP("the CPUs are busy: nothing to help with");
		CHECK(0, "%s: nothing copied by the writer in 3 runs", what);
	}
}

static void sub_writes(void)
{
	pair_helped(writes_a, writes_b, "bytes A copied for B, " STR(ROUNDS) " x 16 MiB of WRITEs");
}

static void sub_writes_off(void)
{
	struct net_opts o = help_opts();

	setenv("SOFTRNIC_SHM_HELP", "0", 1);
	pair_count(&o, writes_a, writes_b, "shm_helped", 0, 0,
		   "bytes copied for the peer with SOFTRNIC_SHM_HELP=0");
	unsetenv("SOFTRNIC_SHM_HELP");
}

/* ---- send_read ------------------------------------------------------------ */

#define SENDS	8

static void send_read_a(struct net_end *n)
{
	ping(n, 1);
	net_expect(n, T_GO + 50, "B's receives posted");
	for (int i = 0; i < SENDS; i++) {
		fill_pattern(n->b.p + i * MIB, MIB, (uint32_t)(200 + i));
		CHECK(post_send1(n->qp, IBV_WR_SEND, 20 + (uint64_t)i, n->b.p + i * MIB, MIB,
				 n->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	}
	for (int i = 0; i < SENDS; i++)
		spin_wc(n->scq, 20 + (uint64_t)i, IBV_WC_SEND, "SEND 1 MiB");
	fill_pattern(n->b.p + 8 * MIB, 2 * PART, 300);
	net_put(n, T_GO + 51);
	/* B READs 8 MiB of ours: we write the responses, and help */
	poll_until(n, n->scq, T_DONE, "B's READs");
}

static void send_read_b(struct net_end *n)
{
	struct ibv_wc wc;
	char what[32];

	ping(n, 1);
	memset(n->b.p, 0xee, SENDS * MIB);
	for (int i = 0; i < SENDS; i++)
		post_recv1(n->qp, 30 + (uint64_t)i, n->b.p + i * MIB, MIB, n->b.mr->lkey);
	net_put(n, T_GO + 50);
	for (int i = 0; i < SENDS; i++) {
		snprintf(what, sizeof(what), "SEND %d", i);
		expect_wc(n->rcq, &wc, 30 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV, what);
		CHECK(wc.byte_len == MIB, "%s: %u bytes", what, wc.byte_len);
		check_pattern(n->b.p + i * MIB, MIB, (uint32_t)(200 + i), what);
	}
	net_expect(n, T_GO + 51, "A filled");
	memset(n->b.p + 8 * MIB, 0, 2 * PART);
	for (int i = 0; i < 2; i++)
		CHECK(post_send1(n->qp, IBV_WR_RDMA_READ, 40 + (uint64_t)i,
				 n->b.p + 8 * MIB + i * PART, PART, n->b.mr->lkey, IBV_SEND_SIGNALED,
				 n->peer.addr + 8 * MIB + (uint64_t)i * PART, n->peer.rkey, 0) == 0,
		      "post READ");
	for (int i = 0; i < 2; i++)
		expect_wc(n->scq, &wc, 40 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
			  "READ 4 MiB");
	check_pattern(n->b.p + 8 * MIB, 2 * PART, 300, "READ 8 MiB");
	net_put(n, T_DONE);
}

static void sub_send_read(void)
{
	pair_helped(send_read_a, send_read_b,
		    "bytes copied for the peer, 8 SENDs of 1 MiB and 2 READs of 4 MiB");
}

/* ---- bogus ---------------------------------------------------------------- */

static void bogus_a(struct net_end *n)
{
	struct ibv_wc wc;

	ping(n, 1);
	fill_pattern(n->b.p, 4096, 399);
	poll_until(n, n->rcq, T_DONE, "B's requests");
	/* still linked: a WRITE lands whole */
	fill_pattern(n->b.p, PART, 400);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 50, n->b.p, PART, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == 0, "post WRITE");
	expect_wc(n->scq, &wc, 50, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "WRITE after the requests");
	net_put(n, T_DONE + 1);
	net_expect(n, T_DONE + 2, "B checked");
}

/* Where our memory at p is in a memfd of ours (the registration put the
 * region on one: src/chan/shm_map.c): its fd number, inode, offset. */
static void own_memfd(const void *p, int *fd, uint64_t *ino, uint64_t *off)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	CHECK(f, "open /proc/self/maps");
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, pgoff, inode;

		if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &lo, &hi, &pgoff, &inode) != 4 ||
		    (uintptr_t)p < lo || (uintptr_t)p >= hi || !strstr(line, "/memfd:"))
			continue;
		*ino = inode;
		*off = pgoff + ((uintptr_t)p - lo);
		found = true;
	}
	fclose(f);
	CHECK(found, "B's buffer is not on a memfd");
	for (*fd = 0; *fd < 1024; (*fd)++) {
		struct stat st;

		if (!fstat(*fd, &st) && S_ISREG(st.st_mode) && (uint64_t)st.st_ino == *ino)
			return;
	}
	CHECK(0, "no fd of B's for its buffer's memfd (inode %llu)", (unsigned long long)*ino);
}

/* Post one request on both boards; the one A serves must come back
 * with phase want (the other nobody serves: taken back). */
static void bogus_post(uint8_t *base, uint64_t seq, uint64_t src, uint64_t len, uint64_t ino,
		       uint64_t off, uint32_t fd, int want, const char *what)
{
	uint64_t end = now_ms() + DEADLINE_MS;
	bool failed = false;

	for (int i = 0; i < 2; i++) {
		atomic_store(board_u64(base, i, seq, H_SRC), src);
		atomic_store(board_u64(base, i, seq, H_LEN), len);
		atomic_store(board_u64(base, i, seq, H_INO), ino);
		atomic_store(board_u64(base, i, seq, H_OFF), off);
		atomic_store((_Atomic uint32_t *)(void *)(base + HELP_AT(i, seq) + H_FD), fd);
		atomic_store(board_u64(base, i, seq, H_STATE), seq << 8 | HELP_POSTED);
		atomic_store(board_posted(base, i), seq);
	}
	while (!failed && now_ms() < end) {
		for (int i = 0; i < 2; i++) {
			uint64_t s = atomic_load(board_u64(base, i, seq, H_STATE));

			CHECK(s == (seq << 8 | HELP_POSTED) || s == (seq << 8 | HELP_TAKEN) ||
			      s == (seq << 8 | (uint64_t)want),
			      "%s: board %d reads %#llx", what, i, (unsigned long long)s);
			failed |= s == (seq << 8 | (uint64_t)want);
		}
		usleep(100);
	}
	CHECK(failed, "%s: A did not answer %s within %d ms", what,
	      want == HELP_DONE ? "DONE" : "FAILED", DEADLINE_MS);
	for (int i = 0; i < 2; i++)
		atomic_store(board_u64(base, i, seq, H_STATE), seq << 8 | HELP_IDLE);
}

static void bogus_b(struct net_end *n)
{
	uint8_t *base = NULL, *dst = n->b.p + 64 * KIB;
	uint64_t a = n->peer.addr, ino, off;
	int fd;

	ping(n, 1);
	CHECK(shm_mapping(&base) >= 4 * KIB, "B: no shared rings");
	own_memfd(dst, &fd, &ino, &off);
	bogus_post(base, 1001, 0x1000, 4096, ino, off, (uint32_t)fd, HELP_FAILED,
		   "a source outside A's shared memory");
	bogus_post(base, 1002, a, 4096, 1, 0, 0, HELP_FAILED, "a destination that is not a memfd");
	bogus_post(base, 1003, a, 1ULL << 40, ino, off, (uint32_t)fd, HELP_FAILED,
		   "a length beyond any record");
	bogus_post(base, 1004, UINT64_MAX - 100, 4096, ino, off, (uint32_t)fd, HELP_FAILED,
		   "a source that wraps");
	bogus_post(base, 1005, a, 4096, ino, 1ULL << 40, (uint32_t)fd, HELP_FAILED,
		   "a destination beyond B's memfd");
	bogus_post(base, 1006, a, 4096, ino, UINT64_MAX - 100, (uint32_t)fd, HELP_FAILED,
		   "a destination that wraps");
	/* A well-formed one: A copies 4 KiB of its buffer (its pattern)
	 * into ours, and nothing next to it */
	memset(dst - 4 * KIB, 0xee, 12 * KIB);
	bogus_post(base, 1007, a, 4096, ino, off, (uint32_t)fd, HELP_DONE, "a good request");
	check_pattern(dst, 4096, 399, "A's 4 KiB, copied on request");
	check_filled(dst - 4 * KIB, 0xee, 4 * KIB, "before them");
	check_filled(dst + 4 * KIB, 0xee, 4 * KIB, "after them");
	memset(n->b.p, 0, PART);
	net_put(n, T_DONE);
	net_expect(n, T_DONE + 1, "A's WRITE done");
	check_pattern(n->b.p, PART, 400, "WRITE after the requests");
	net_put(n, T_DONE + 2);
}

static void sub_bogus(void)
{
	struct net_opts o = help_opts();

	net_fork_run(&o, bogus_a, bogus_b);
}

/* ---- stuck ---------------------------------------------------------------- */

static void stuck_a(struct net_end *n)
{
	struct ibv_wc wc;

	ping(n, 1);
	post_recv1(n->qp, 60, n->b.p + PART, 64, n->b.mr->lkey);
	net_put(n, T_GO + 60);
	/* B's WRITE: our progress thread places it, posts a request, and
	 * waits for B's part, which never comes */
	CHECK(poll_one(n->rcq, &wc, 3 * DEADLINE_MS), "no completion after B stalled a copy");
	CHECK(wc.wr_id == 60 && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "receive after B stalled a copy: wr_id %llu %s, want it flushed",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	wait_err(n->qp, DEADLINE_MS, "A after B stalled a copy");
	net_put(n, T_DONE);
}

static void stuck_b(struct net_end *n)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };
	uint64_t end = now_ms() + 3 * DEADLINE_MS, next = 0;
	uint8_t *base = NULL;
	unsigned int taken = 0, posted = 0;

	ping(n, 1);
	CHECK(shm_mapping(&base) >= 4 * KIB, "B: no shared rings");
	net_expect(n, T_GO + 60, "A's receive posted");
	fill_pattern(n->b.p, PART, 500);
	/* No verb but posts meanwhile: a poll of ours would serve A's
	 * requests. Another WRITE every 50 ms until one was taken (on a
	 * loaded machine A may have taken all back before we looked). */
	for (unsigned int i = 0; poll(&p, 1, 0) == 0; i++) {
		if (!taken && posted < 120 && now_ms() >= next) {
			CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 61, n->b.p, PART, n->b.mr->lkey,
					 0, n->peer.addr, n->peer.rkey, 0) == 0, "post WRITE");
			posted++;
			next = now_ms() + 50;
		}
		taken += board_answer(base, HELP_TAKEN);
		CHECK(now_ms() < end, "A did not give up within %d ms (%u WRITEs, %u taken)",
		      3 * DEADLINE_MS, posted, taken);
	}
	net_expect(n, T_DONE, "A's QP in ERROR");
	CHECK(taken >= 1, "B took none of A's requests");
	NOTE("B took %u of A's requests (%u WRITEs) and finished none", taken, posted);
}

static void sub_stuck(void)
{
	struct net_opts o = help_opts();

	net_fork_run(&o, stuck_a, stuck_b);
}

/* ---- declined ------------------------------------------------------------- */

/* B's 16 MiB WRITE, then a SEND, into A, whose program polls for the
 * SEND: A must find the WRITE whole when the SEND completes, though B
 * declines (FAILED, nothing copied) every request of A's it can take
 * first: A copies those parts itself, from B's memfd, before anything
 * sees the WRITE done, also the parts it left under way while it went on
 * to the WRITE's next segments. */
static void declined_a(struct net_end *n)
{
	struct ibv_wc wc;

	ping(n, 1);
	do {
		memset(n->b.p, 0, 4 * PART);
		post_recv1(n->qp, 70, n->b.p + 4 * PART, 64, n->b.mr->lkey);
		net_put(n, T_GO + 70);
		expect_wc(n->rcq, &wc, 70, IBV_WC_SUCCESS, IBV_WC_RECV, "SEND after the WRITE");
		check_pattern(n->b.p, 4 * PART, 700, "WRITE whose parts B declined");
		net_put(n, T_DONE);
	} while (net_get(n));	/* (B saw none of our requests: again) */
}

/* (Up to DECLINED_ROUNDS rounds, until B saw one of A's requests: on a
 * loaded machine A may take every part back before B looks; a CI run
 * once had none declined.) */
#define DECLINED_ROUNDS	10

static void declined_b(struct net_end *n)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };
	uint64_t end = now_ms() + 3 * DEADLINE_MS;
	uint8_t *base = NULL;
	unsigned int failed = 0, round;

	ping(n, 1);
	CHECK(shm_mapping(&base) >= 4 * KIB, "B: no shared rings");
	for (round = 1;; round++) {
		net_expect(n, T_GO + 70, "A's receive posted");
		fill_pattern(n->b.p, 4 * PART, 700);
		CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 71, n->b.p, 4 * PART, n->b.mr->lkey, 0,
				 n->peer.addr, n->peer.rkey, 0) == 0, "post WRITE");
		CHECK(post_send1(n->qp, IBV_WR_SEND, 72, n->b.p + 4 * PART, 64, n->b.mr->lkey,
				 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
		/* no verb meanwhile: a poll of ours would serve A's requests */
		while (poll(&p, 1, 0) == 0) {
			failed += board_answer(base, HELP_FAILED);
			CHECK(now_ms() < end, "A did not take the WRITE within %d ms (%u declined)",
			      3 * DEADLINE_MS, failed);
		}
		net_expect(n, T_DONE, "A checked");
		spin_wc(n->scq, 72, IBV_WC_SEND, "SEND after the WRITE");
		if (failed || round == DECLINED_ROUNDS)
			break;
		net_put(n, 1);
		end = now_ms() + 3 * DEADLINE_MS;
	}
	net_put(n, 0);
	CHECK(failed >= 1, "B declined none of A's requests in %u rounds", round);
	NOTE("B declined %u of A's requests (%u rounds)", failed, round);
}

static void sub_declined(void)
{
	struct net_opts o = help_opts();

	net_fork_run(&o, declined_a, declined_b);
}

/* ---- declined_fault ---------------------------------------------------------- */

/* As declined, but a page of A's target is inaccessible: one in the part
 * A posts of the WRITE's tenth segment (segments of 65520 bytes, the
 * largest an FPDU carries; the sender's share is 32/64 for the first 16
 * requests: bytes 622496-655199), so A copies it itself only when its
 * slot comes round, sixteen segments later. It faults there, and the WRITE
 * must fail (A's QP to ERROR, its receive not completed successfully),
 * though all of A's later copies succeed. */
#define FAULT_PAGE	(155 * 4 * KIB)

static void declined_fault_a(struct net_end *n)
{
	struct ibv_wc wc;

	ping(n, 1);
	memset(n->b.p, 0, 4 * PART);
	CHECK(mprotect(n->b.p + FAULT_PAGE, 4 * KIB, PROT_NONE) == 0, "mprotect");
	post_recv1(n->qp, 80, n->b.p + 4 * PART, 64, n->b.mr->lkey);
	net_put(n, T_GO + 80);
	CHECK(poll_one(n->rcq, &wc, 3 * DEADLINE_MS), "no completion after the faulted WRITE");
	CHECK(wc.wr_id == 80 && wc.status != IBV_WC_SUCCESS,
	      "receive after a WRITE that could not be placed: wr_id %llu %s, want an error",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	wait_err(n->qp, DEADLINE_MS, "A after a WRITE that could not be placed");
	CHECK(mprotect(n->b.p + FAULT_PAGE, 4 * KIB, PROT_READ | PROT_WRITE) == 0, "mprotect");
	net_put(n, T_DONE);
}

static void declined_fault_b(struct net_end *n)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };
	uint64_t end = now_ms() + 3 * DEADLINE_MS;
	uint8_t *base = NULL;
	struct ibv_wc wc;

	ping(n, 1);
	CHECK(shm_mapping(&base) >= 4 * KIB, "B: no shared rings");
	net_expect(n, T_GO + 80, "A's receive posted");
	fill_pattern(n->b.p, 4 * PART, 800);
	/* (256 whole segments: the last one, which settles at once, also
	 * asks for help) */
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 81, n->b.p, 256 * 65520, n->b.mr->lkey, 0,
			 n->peer.addr, n->peer.rkey, 0) == 0, "post WRITE");
	CHECK(post_send1(n->qp, IBV_WR_SEND, 82, n->b.p + 4 * PART, 64, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post SEND");
	while (poll(&p, 1, 0) == 0) {
		board_answer(base, HELP_FAILED);
		CHECK(now_ms() < end, "A did not end within %d ms", 3 * DEADLINE_MS);
	}
	net_expect(n, T_DONE, "A in ERROR");
	CHECK(poll_one(n->scq, &wc, 3 * DEADLINE_MS), "no completion for the SEND");
	CHECK(wc.status != IBV_WC_SUCCESS, "SEND after a WRITE A could not place: %s",
	      ibv_wc_status_str(wc.status));
}

static void sub_declined_fault(void)
{
	struct net_opts o = help_opts();

	net_fork_run(&o, declined_fault_a, declined_fault_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = {
		{ "writes", sub_writes },
		{ "writes_off", sub_writes_off },
		{ "send_read", sub_send_read },
		{ "bogus", sub_bogus },
		{ "stuck", sub_stuck },
		{ "declined", sub_declined },
		{ "declined_fault", sub_declined_fault },
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
