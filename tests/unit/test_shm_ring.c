/* Unit tests for the same-host channel's rings (src/chan/shm_ring.c):
 * a byte stream model (what goes in comes out, in order, across wraps,
 * inline and pulled), back-pressure, and a consumer and producer that
 * meet every impossible value a corrupt or hostile peer can put in the
 * shared memory with -EPROTO, never a crash or a write out of bounds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chan/shm_ring.h"

#define RING	4096

struct fixture {
	struct shm_ring_ctl ctl;
	uint8_t data[RING];
	struct shm_ring tx, rx;
	int faults;			/* get/put calls to fail from now on */
};

static int plain_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static int failing_get(void *dst, const void *src, size_t n)
{
	(void)dst;
	(void)src;
	(void)n;
	return -EFAULT;
}

/* In one process, a remote address is just an address. */
static ssize_t local_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	const uint8_t *src = (const uint8_t *)(uintptr_t)raddr;
	size_t done = 0;

	(void)arg;
	for (int i = 0; i < n && done < len; i++) {
		size_t k = dst[i].iov_len < len - done ? dst[i].iov_len : len - done;

		memcpy(dst[i].iov_base, src + done, k);
		done += k;
	}
	return (ssize_t)done;
}

static ssize_t failing_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	(void)arg;
	(void)dst;
	(void)n;
	(void)raddr;
	(void)len;
	errno = EFAULT;
	return -1;
}

static ssize_t gone_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	(void)arg;
	(void)dst;
	(void)n;
	(void)raddr;
	(void)len;
	errno = ESRCH;
	return -1;
}

static const struct shm_ring_io io = { plain_copy, plain_copy, local_pull, NULL };

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	shm_ring_init(&f->tx, &f->ctl, f->data, RING);
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

static ssize_t put1(struct fixture *f, const void *p, size_t n, uint8_t kind)
{
	struct iovec v = { (void *)p, n };

	return shm_ring_write(&f->tx, &v, &kind, 1, &io, NULL, NULL);
}

static ssize_t get1(struct fixture *f, void *p, size_t n)
{
	struct iovec v = { p, n };

	return shm_ring_read(&f->rx, &v, 1, false, &io);
}

static void roundtrip_inline(void **state)
{
	struct fixture *f = *state;
	uint8_t out[100];

	assert_int_equal(get1(f, out, sizeof(out)), 0);		/* empty */
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	assert_int_equal(put1(f, "hello, ring", 11, SHM_OWN), 11);
	assert_int_equal(shm_ring_pending(&f->rx), 1);
	/* partial reads of one record */
	assert_int_equal(get1(f, out, 5), 5);
	assert_memory_equal(out, "hello", 5);
	assert_int_equal(get1(f, out, sizeof(out)), 6);
	assert_memory_equal(out, ", ring", 6);
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	/* released: the producer sees all the room again */
	assert_int_equal(atomic_load(&f->ctl.head), atomic_load(&f->ctl.tail));
}

/* A model: a long stream of random pieces (own, application, pulled)
 * written and read in random sizes through a small ring: the bytes out
 * are exactly the bytes in. */
static void model_stream(void **state)
{
	struct fixture *f = *state;
	enum { TOTAL = 1 << 20 };
	uint8_t *src = malloc(TOTAL), *dst = malloc(TOTAL);
	size_t in = 0, out = 0;
	unsigned int seed = 12345;

	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < TOTAL; i++)
		src[i] = (uint8_t)(i * 7 + (i >> 9));
	while (out < TOTAL) {
		if (in < TOTAL && rand_r(&seed) % 2) {
			struct iovec v[4];
			uint8_t k[4];
			int n = 1 + rand_r(&seed) % 4;
			size_t at = in;
			ssize_t w;

			for (int i = 0; i < n; i++) {
				size_t len = 1 + (size_t)rand_r(&seed) % 1500;

				if (at + len > TOTAL)
					len = TOTAL - at;
				v[i] = (struct iovec){ src + at, len };
				k[i] = (uint8_t)(rand_r(&seed) % 3);
				at += len;
			}
			w = shm_ring_write(&f->tx, v, k, n, &io, NULL, NULL);
			assert_true(w >= 0);
			in += (size_t)w;
		} else {
			struct iovec v[2];
			size_t a = 1 + (size_t)rand_r(&seed) % 700, b = (size_t)rand_r(&seed) % 300;
			ssize_t r;

			if (out + a > TOTAL)
				a = TOTAL - out;
			if (out + a + b > TOTAL)
				b = TOTAL - out - a;
			v[0] = (struct iovec){ dst + out, a };
			v[1] = (struct iovec){ dst + out + a, b };
			r = shm_ring_read(&f->rx, v, 2, rand_r(&seed) % 2, &io);
			assert_true(r >= 0);
			assert_true(out + (size_t)r <= in);
			out += (size_t)r;
		}
	}
	assert_memory_equal(src, dst, TOTAL);
	free(src);
	free(dst);
}

static void full_ring(void **state)
{
	struct fixture *f = *state;
	static uint8_t big[3 * RING], out[3 * RING];
	size_t in = 0, got = 0;
	ssize_t w;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)i;
	w = put1(f, big, sizeof(big), SHM_OWN);
	assert_true(w > 0 && w <= RING - 8);
	in = (size_t)w;
	assert_int_equal(put1(f, big + in, 100, SHM_OWN), 0);	/* full */
	while (got < sizeof(big)) {
		ssize_t r = get1(f, out + got, sizeof(out) - got);

		assert_true(r >= 0);
		got += (size_t)r;
		if (in < sizeof(big)) {
			w = put1(f, big + in, sizeof(big) - in, SHM_OWN);
			assert_true(w >= 0);
			in += (size_t)w;
		}
	}
	assert_memory_equal(big, out, sizeof(big));
}

/* A reader stops in front of a remote record once it has bytes, so the
 * channel can place the payload after a header directly. */
static void stops_before_remote(void **state)
{
	struct fixture *f = *state;
	uint8_t payload[3000], out[4000];
	struct iovec v[3] = { { "HDR", 3 }, { payload, sizeof(payload) }, { "TR", 2 } };
	uint8_t k[3] = { SHM_OWN, SHM_PULL, SHM_OWN };

	memset(payload, 0x5a, sizeof(payload));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, NULL, NULL), 3005);
	assert_int_equal(get1(f, out, sizeof(out)), 3);
	assert_memory_equal(out, "HDR", 3);
	/* ... and reads on into inline bytes after it */
	assert_int_equal(get1(f, out, sizeof(out)), 3002);
	assert_memory_equal(out, payload, 3000);
	assert_memory_equal(out + 3000, "TR", 2);
	assert_int_equal(f->rx.pulled, 3000);
}

static void app_fault(void **state)
{
	struct fixture *f = *state;
	struct shm_ring_io bad = io;
	struct iovec v[2] = { { "ab", 2 }, { "cd", 2 } };
	uint8_t k[2] = { SHM_APP, SHM_APP };
	uint8_t out[8];

	bad.get = failing_get;
	/* the first piece unreadable: nothing written */
	assert_int_equal(shm_ring_write(&f->tx, v, k, 2, &bad, NULL, NULL), -EFAULT);
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	/* own bytes first: they go, the fault waits for the next call */
	k[0] = SHM_OWN;
	assert_int_equal(shm_ring_write(&f->tx, v, k, 2, &bad, NULL, NULL), 2);
	assert_int_equal(get1(f, out, sizeof(out)), 2);
}

/* A remote record whose memory the producer no longer has reads as
 * zeros, and the producer learns which one; a producer that is gone
 * (ESRCH) ends the stream. */
static void pull_fault(void **state)
{
	struct fixture *f = *state;
	struct shm_ring_io bad = io;
	uint8_t src[5000], out[6000];
	struct iovec v[3] = { { "H", 1 }, { src, sizeof(src) }, { src, 100 } };
	uint8_t k[3] = { SHM_OWN, SHM_PULL, SHM_PULL };
	struct shm_rec_note notes[4];
	int nn = 4;
	struct iovec o = { out, sizeof(out) };

	memset(src, 0x77, sizeof(src));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, notes, &nn), 5101);
	assert_int_equal(nn, 2);
	assert_int_equal(notes[0].piece, 1);
	assert_int_equal(notes[1].piece, 2);
	assert_int_equal(get1(f, out, 1), 1);
	bad.pull = failing_pull;
	memset(out, 0x55, sizeof(out));
	/* (the reader stops in front of the second remote record) */
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), 5000);
	for (size_t i = 0; i < 5000; i++)
		assert_int_equal(out[i], 0);
	assert_int_equal(f->rx.faults, 1);
	/* released: the producer sees the mark on the first, not yet on
	 * the second */
	assert_true(shm_ring_released(&f->tx) > notes[0].pos);
	assert_true(shm_ring_faulted(&f->tx, notes[0].pos));
	bad.pull = gone_pull;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), -EIO);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &io), 100);
	assert_memory_equal(out, src, 100);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
}

/* Every impossible value in shared memory is -EPROTO. */
static void corrupt_indices(void **state)
{
	struct fixture *f = *state;
	uint8_t out[64];
	uint32_t h[2];

	/* tail past what the ring can hold */
	atomic_store(&f->ctl.tail, RING + 8);
	assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
	assert_int_equal(shm_ring_pending(&f->rx), -EPROTO);
	/* tail behind head */
	atomic_store(&f->ctl.tail, (uint64_t)-8);
	assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
	/* a partial record header */
	atomic_store(&f->ctl.tail, 4);
	assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
	/* unknown kind, zero and huge lengths, a record longer than what
	 * was published */
	uint32_t bad[][2] = { { 7, 8 }, { 0, 0 }, { 0, SHM_REC_MAX + 1 }, { 0, 64 }, { 1, 0 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		shm_ring_init(&f->rx, &f->ctl, f->data, RING);
		memcpy(h, bad[i], sizeof(h));
		memcpy(f->data, h, sizeof(h));
		atomic_store(&f->ctl.tail, 16);
		assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
	}
	/* the producer: a head the consumer cannot have written */
	atomic_store(&f->ctl.head, 64);
	assert_int_equal(put1(f, "x", 1, SHM_OWN), -EPROTO);
}

/* Random bytes in the whole shared area: every read ends in bytes that
 * fit the caller's buffer, nothing, or -EPROTO. */
static void random_garbage(void **state)
{
	struct fixture *f = *state;
	unsigned int seed = 99;
	uint8_t out[300];

	for (int round = 0; round < 20000; round++) {
		ssize_t r;

		for (size_t i = 0; i < 64; i++)
			f->data[rand_r(&seed) % RING] = (uint8_t)rand_r(&seed);
		if (round % 3 == 0) {
			uint32_t kl[2] = { (uint32_t)rand_r(&seed) % 3, (uint32_t)rand_r(&seed) % 600 };

			memcpy(f->data + (f->rx.pos & (RING - 1) & ~7U), kl, sizeof(kl));
		}
		if (round % 5 == 0)
			atomic_store(&f->ctl.tail, f->rx.pos + (uint64_t)(rand_r(&seed) % (RING + 64)));
		{
			struct shm_ring_io safe = io;
			struct iovec v = { out, 1 + (size_t)rand_r(&seed) % sizeof(out) };

			/* remote records point at nothing real: zeros */
			safe.pull = failing_pull;
			r = shm_ring_read(&f->rx, &v, 1, false, &safe);
			assert_true(r == -EPROTO || (r >= 0 && (size_t)r <= v.iov_len));
		}
		if (r < 0)
			shm_ring_init(&f->rx, &f->ctl, f->data, RING);
		atomic_store(&f->ctl.tail, f->rx.pos);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(roundtrip_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(model_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(full_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(stops_before_remote, setup, teardown),
		cmocka_unit_test_setup_teardown(app_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(pull_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_indices, setup, teardown),
		cmocka_unit_test_setup_teardown(random_garbage, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
