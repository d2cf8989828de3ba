/* bench/ring_lat.c: where the same-host latency goes, below the verbs.
 *
 * Two processes (fork) on shared memory ping-pong an 8-byte message and
 * report the one-way time (median of rounds):
 *   floor     a cache line written by one side and spun on by the other:
 *             what any shared-memory transport pays at least (UCX's
 *             ucp_am_lat is close to it);
 *   shm_ring  softrnic's ring (src/chan/shm_ring.c): an 8-byte inline
 *             record written with shm_ring_write, read with shm_ring_read,
 *             as the shm channel does, without MPA framing, locks or the
 *             verbs around it;
 *   small N   with a third argument (sizes, comma-separated): a small
 *             record of N bytes (shm_ring_write_small/read_small, as a
 *             SEND or WRITE of N - 24 bytes goes: struct shm_small is 24
 *             bytes), for each N. Where records end decides how many
 *             cache lines a message moves (docs/PERFORMANCE.md).
 * bench/shm.sh measures the whole path (ib_send_lat) in the same terms;
 * the differences say what the ring costs and what the layers above it
 * cost.
 *
 * usage: ring_lat [iterations per round (100000)] [rounds (5)] [sizes]
 * Built by bench/shm.sh: cc -O2 -I src bench/ring_lat.c src/chan/shm_ring.c
 */
#define _GNU_SOURCE
#include "chan/shm_ring.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING_SIZE (64 * 1024)

struct shared {
	_Alignas(64) _Atomic uint64_t ping;
	_Alignas(64) _Atomic uint64_t pong;
	_Alignas(64) struct shm_ring_ctl ctl[2];
	_Alignas(64) uint8_t data[2][RING_SIZE];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int plain_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static const struct shm_ring_io io = { .put = plain_copy, .get = plain_copy };

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* --- floor: one line each way ------------------------------------------- */

static void floor_side(struct shared *s, int pinger, uint64_t iters)
{
	for (uint64_t i = 1; i <= iters; i++) {
		if (pinger) {
			atomic_store_explicit(&s->ping, i, memory_order_release);
			while (atomic_load_explicit(&s->pong, memory_order_acquire) != i)
				;
		} else {
			while (atomic_load_explicit(&s->ping, memory_order_acquire) != i)
				;
			atomic_store_explicit(&s->pong, i, memory_order_release);
		}
	}
}

/* --- softrnic's ring: 8-byte inline records ------------------------------- */

static int ring_side(struct shared *s, int pinger, uint64_t iters)
{
	struct shm_ring tx, rx;
	uint64_t msg = 0, got;
	uint8_t kind = SHM_OWN;

	shm_ring_init(&tx, &s->ctl[pinger ? 0 : 1], s->data[pinger ? 0 : 1], RING_SIZE);
	shm_ring_init(&rx, &s->ctl[pinger ? 1 : 0], s->data[pinger ? 1 : 0], RING_SIZE);
	for (uint64_t i = 1; i <= iters; i++) {
		struct iovec out = { &msg, sizeof(msg) }, in = { &got, sizeof(got) };
		ssize_t k;

		if (pinger) {
			msg = i;
			if (shm_ring_write(&tx, &out, &kind, 1, &io, NULL, NULL) != sizeof(msg))
				return -1;
		}
		while ((k = shm_ring_read(&rx, &in, 1, false, &io)) == 0)
			;
		if (k != sizeof(got) || got != i)
			return -1;
		if (!pinger) {
			msg = i;
			if (shm_ring_write(&tx, &out, &kind, 1, &io, NULL, NULL) != sizeof(msg))
				return -1;
		}
	}
	return 0;
}

/* --- small records of len bytes ------------------------------------------ */

static int small_side(struct shared *s, int pinger, uint64_t iters, size_t len)
{
	struct shm_ring tx, rx;
	uint8_t msg[SHM_SMALL_MAX] = { 0 }, got[SHM_SMALL_MAX];
	struct iovec out = { msg, len };

	shm_ring_init(&tx, &s->ctl[pinger ? 0 : 1], s->data[pinger ? 0 : 1], RING_SIZE);
	shm_ring_init(&rx, &s->ctl[pinger ? 1 : 0], s->data[pinger ? 1 : 0], RING_SIZE);
	for (uint64_t i = 1; i <= iters; i++) {
		ssize_t k;

		memcpy(msg, &i, sizeof(i));
		if (pinger && shm_ring_write_small(&tx, &out, 1, len) != (ssize_t)len)
			return -1;
		while ((k = shm_ring_read_small(&rx, got, sizeof(got))) == 0)
			;
		if (k != (ssize_t)len || memcmp(got, &i, sizeof(i)))
			return -1;
		if (!pinger && shm_ring_write_small(&tx, &out, 1, len) != (ssize_t)len)
			return -1;
	}
	return 0;
}

/* One side of mode 0 (floor), 1 (inline record) or 2 (small, len). */
static int side(struct shared *s, int mode, int pinger, uint64_t iters, size_t len)
{
	if (mode == 2)
		return small_side(s, pinger, iters, len);
	if (mode == 1)
		return ring_side(s, pinger, iters);
	floor_side(s, pinger, iters);
	return 0;
}

/* One round of a test in two processes: one-way ns per message. */
static double round_ns(struct shared *s, int mode, uint64_t iters, size_t len)
{
	uint64_t t0, t1;
	pid_t pid;
	int st;

	memset(s, 0, sizeof(*s));
	pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		alarm(60);
		_exit(side(s, mode, 0, iters, len) ? 1 : 0);
	}
	t0 = now_ns();
	if (side(s, mode, 1, iters, len)) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fprintf(stderr, "ring_lat: the ring lost or changed a message\n");
		exit(1);
	}
	t1 = now_ns();
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "ring_lat: the other side failed\n");
		exit(1);
	}
	return (double)(t1 - t0) / (double)iters / 2.0;
}

int main(int argc, char **argv)
{
	uint64_t iters = argc > 1 ? strtoull(argv[1], NULL, 0) : 100000;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	size_t len[16];
	int nlen = 0;
	double fl[64], rg[64], sm[16][64];

	for (char *p = argc > 3 ? argv[3] : NULL; p && *p && nlen < 16; nlen++) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);

		if (end == p || !v || v > SHM_SMALL_MAX || (*end && *end != ',')) {
			nlen = -1;
			break;
		}
		len[nlen] = v;
		p = *end ? end + 1 : end;
	}
	if (s == MAP_FAILED || rounds < 1 || rounds > 64 || !iters || nlen < 0) {
		fprintf(stderr, "usage: ring_lat [iterations] [rounds <= 64] [sizes: 1-%u, comma-separated]\n",
			SHM_SMALL_MAX);
		return 2;
	}
	for (int r = 0; r < rounds; r++) {	/* interleaved */
		fl[r] = round_ns(s, 0, iters, 0);
		rg[r] = round_ns(s, 1, iters, 0);
		for (int i = 0; i < nlen; i++)
			sm[i][r] = round_ns(s, 2, iters, len[i]);
	}
	qsort(fl, (size_t)rounds, sizeof(fl[0]), cmp_double);
	qsort(rg, (size_t)rounds, sizeof(rg[0]), cmp_double);
	printf("floor (one cache line each way): %.3f us one-way\n", fl[rounds / 2] / 1000.0);
	printf("shm_ring (8-byte inline record):  %.3f us one-way (%.2f x floor)\n",
	       rg[rounds / 2] / 1000.0, rg[rounds / 2] / fl[rounds / 2]);
	for (int i = 0; i < nlen; i++) {
		qsort(sm[i], (size_t)rounds, sizeof(sm[i][0]), cmp_double);
		printf("small record %4zu B (%4zu in the ring): %.3f us one-way (%.2f x floor)\n", len[i],
		       (size_t)SHM_REC_HDR + ((len[i] + 7) & ~(size_t)7), sm[i][rounds / 2] / 1000.0,
		       sm[i][rounds / 2] / fl[rounds / 2]);
	}
	return 0;
}
