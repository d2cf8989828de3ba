/* Several program threads on one QP, two processes on one host (shm; once
 * more over TCP): A's three threads post SENDs at once while a fourth
 * reaps the send CQ; B's two threads poll the same receive CQ and post
 * the receives back. Every QP, CQ and stream lock is then taken by one
 * thread after another, which is what takes a biased lock from its
 * owner (src/core/lock.h) again and again: the test proves that nothing
 * is lost, doubled, reordered within a thread or damaged meanwhile, and
 * that every send completes. */
#include "net_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

enum { T_GO = 0x30, T_DONE };

#define SENDERS 3
#define PER_SENDER 10000
#define INFLIGHT 48		/* A's unacked SENDs, all threads */
#define NRECV 64
#define SLOT 64
#define MSG_LEN 32

/* A message: its thread, its number within the thread, then a pattern
 * of both. */
static void fill_msg(uint8_t *p, uint32_t t, uint32_t seq)
{
	memcpy(p, &t, 4);
	memcpy(p + 4, &seq, 4);
	fill_pattern(p + 8, MSG_LEN - 8, t * 1000003u + seq);
}

/* The first failure of a side's threads, and the word to stop. */
struct fails {
	atomic_bool stop;
	pthread_mutex_t lock;
	char err[160];
};

static void fail_once(struct fails *f, const char *what)
{
	pthread_mutex_lock(&f->lock);
	if (!f->err[0])
		snprintf(f->err, sizeof(f->err), "%s", what);
	pthread_mutex_unlock(&f->lock);
	atomic_store(&f->stop, true);
}

/* ---- A: three posting threads and a reaper ---------------------------- */

struct a_ctx {
	struct net_end *n;
	atomic_int inflight;
	atomic_uint_fast64_t done[SENDERS];
	struct fails f;
};

struct a_arg {
	struct a_ctx *c;
	uint32_t t;
};

static void *a_sender(void *arg)
{
	struct a_arg *a = arg;
	struct a_ctx *c = a->c;
	uint8_t msg[MSG_LEN];

	for (uint32_t seq = 0; seq < PER_SENDER && !atomic_load(&c->f.stop); seq++) {
		uint64_t end = now_ms() + DEADLINE_MS;
		unsigned int waits = 0;

		while (atomic_fetch_add(&c->inflight, 1) >= INFLIGHT) {
			atomic_fetch_sub(&c->inflight, 1);
			if (atomic_load(&c->f.stop))
				return NULL;
			if ((++waits & 1023) == 0 && now_ms() > end) {
				fail_once(&c->f, "no send completion for a while");
				return NULL;
			}
			sched_yield();
		}
		fill_msg(msg, a->t, seq);
		/* (inline: the bytes are read now, msg may change at once) */
		if (post_send1(c->n->qp, IBV_WR_SEND, ((uint64_t)a->t << 32) | seq, msg, MSG_LEN,
			       c->n->b.mr->lkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0)) {
			fail_once(&c->f, "ibv_post_send failed");
			return NULL;
		}
	}
	return NULL;
}

static void *a_reaper(void *arg)
{
	struct a_ctx *c = arg;
	uint64_t want = (uint64_t)SENDERS * PER_SENDER, got = 0, end = now_ms() + 4 * DEADLINE_MS;
	uint64_t next[SENDERS] = { 0 };
	struct ibv_wc wc[16];
	unsigned int idle = 0;

	while (got < want && !atomic_load(&c->f.stop)) {
		int k = ibv_poll_cq(c->n->scq, 16, wc);

		if (k < 0) {
			fail_once(&c->f, "ibv_poll_cq failed");
			break;
		}
		for (int i = 0; i < k; i++) {
			uint32_t t = (uint32_t)(wc[i].wr_id >> 32), seq = (uint32_t)wc[i].wr_id;

			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND) {
				fail_once(&c->f, "a send completion failed");
				return NULL;
			}
			/* one QP: each thread's SENDs complete in its order */
			if (t >= SENDERS || seq != next[t]) {
				fail_once(&c->f, "a send completion out of order");
				return NULL;
			}
			next[t]++;
			atomic_fetch_add(&c->done[t], 1);
			atomic_fetch_sub(&c->inflight, 1);
		}
		got += (uint64_t)k;
		if (!k && (++idle & 1023) == 0 && now_ms() > end) {
			fail_once(&c->f, "send completions missing");
			break;
		}
	}
	return NULL;
}

static void side_a(struct net_end *n)
{
	static struct a_ctx c;
	struct a_arg args[SENDERS];
	pthread_t th[SENDERS], reaper;

	memset(&c, 0, sizeof(c));
	c.n = n;
	pthread_mutex_init(&c.f.lock, NULL);
	net_sync(n, T_GO);
	CHECK(pthread_create(&reaper, NULL, a_reaper, &c) == 0, "pthread_create");
	for (uint32_t t = 0; t < SENDERS; t++) {
		args[t] = (struct a_arg){ &c, t };
		CHECK(pthread_create(&th[t], NULL, a_sender, &args[t]) == 0, "pthread_create");
	}
	for (int t = 0; t < SENDERS; t++)
		pthread_join(th[t], NULL);
	pthread_join(reaper, NULL);
	CHECK(!c.f.err[0], "A: %s", c.f.err);
	for (int t = 0; t < SENDERS; t++)
		CHECK(atomic_load(&c.done[t]) == PER_SENDER, "A: thread %d: %llu of %d completed", t,
		      (unsigned long long)atomic_load(&c.done[t]), PER_SENDER);
	net_sync(n, T_DONE);
}

/* ---- B: two threads poll one receive CQ and post the receives back ---- */

struct b_ctx {
	struct net_end *n;
	atomic_uint_fast64_t got;
	/* times each message was seen (a thread takes its completions in
	 * CQ order, and the CQ is in arrival order: what one poller sees of
	 * a sender only goes up) */
	uint8_t *seen;	/* SENDERS * PER_SENDER */
	struct fails f;
};

static void b_post(struct net_end *n, uint64_t slot)
{
	post_recv1(n->qp, slot, n->b.p + slot * SLOT, SLOT, n->b.mr->lkey);
}

static void *b_poller(void *arg)
{
	struct b_ctx *c = arg;
	uint64_t want = (uint64_t)SENDERS * PER_SENDER, end = now_ms() + 4 * DEADLINE_MS;
	int64_t last[SENDERS];
	struct ibv_wc wc[8];
	unsigned int idle = 0;

	for (int t = 0; t < SENDERS; t++)
		last[t] = -1;
	while (atomic_load(&c->got) < want && !atomic_load(&c->f.stop)) {
		int k = ibv_poll_cq(c->n->rcq, 8, wc);

		if (k < 0) {
			fail_once(&c->f, "ibv_poll_cq failed");
			break;
		}
		if (!k && (++idle & 1023) == 0 && now_ms() > end) {
			fail_once(&c->f, "receive completions missing");
			break;
		}
		for (int i = 0; i < k; i++) {
			const uint8_t *p = c->n->b.p + wc[i].wr_id * SLOT;
			uint8_t expect[MSG_LEN];
			uint32_t t, seq;

			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV ||
			    wc[i].byte_len != MSG_LEN || wc[i].wr_id >= NRECV) {
				fail_once(&c->f, "a receive completion failed or is wrong");
				return NULL;
			}
			memcpy(&t, p, 4);
			memcpy(&seq, p + 4, 4);
			if (t >= SENDERS || seq >= PER_SENDER) {
				fail_once(&c->f, "a message names no sender");
				return NULL;
			}
			fill_msg(expect, t, seq);
			if (memcmp(expect, p, MSG_LEN)) {
				fail_once(&c->f, "a message's bytes are damaged");
				return NULL;
			}
			if ((int64_t)seq <= last[t]) {
				fail_once(&c->f, "a sender's messages out of order");
				return NULL;
			}
			last[t] = seq;
			if (c->seen[t * PER_SENDER + seq]++) {
				fail_once(&c->f, "a message arrived twice");
				return NULL;
			}
			b_post(c->n, wc[i].wr_id);
			atomic_fetch_add(&c->got, 1);
		}
	}
	return NULL;
}

static void side_b(struct net_end *n)
{
	static struct b_ctx c;
	pthread_t th[2];

	memset(&c, 0, sizeof(c));
	c.n = n;
	c.seen = calloc(SENDERS, PER_SENDER);
	CHECK(c.seen, "calloc");
	pthread_mutex_init(&c.f.lock, NULL);
	for (uint64_t s = 0; s < NRECV; s++)
		b_post(n, s);
	net_sync(n, T_GO);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&th[i], NULL, b_poller, &c) == 0, "pthread_create");
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK(!c.f.err[0], "B: %s", c.f.err);
	CHECK(atomic_load(&c.got) == (uint64_t)SENDERS * PER_SENDER, "B: %llu messages",
	      (unsigned long long)atomic_load(&c.got));
	for (size_t i = 0; i < (size_t)SENDERS * PER_SENDER; i++)
		CHECK(c.seen[i] == 1, "B: message %zu of sender %zu seen %d times", i % PER_SENDER,
		      i / PER_SENDER, c.seen[i]);
	free(c.seen);
	net_sync(n, T_DONE);
}

static void sub_threads(void)
{
	struct net_opts o = net_opts_default();

	o.max_inline = 64;
	o.max_recv_wr = NRECV;
	o.rnr_retry = 7;
	net_fork_run(&o, side_a, side_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "threads", sub_threads } };

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
