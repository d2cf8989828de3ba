/* Unit tests for messages (src/core/msg.c): the per-thread cache of
 * messages (two sizes) and receive-WQE copies, and msg_grow, which must keep a cached
 * block's size (an assembling message starts empty and grows). Under
 * AddressSanitizer the cache is compiled out and these run on malloc. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/msg.h"

static void fill(struct sr_msg *m, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		m->payload[i] = (uint8_t)(i * 7 + 1);
}

static void check(const struct sr_msg *m, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(m->payload[i], (uint8_t)(i * 7 + 1));
}

/* A message assembled from pieces, as tcp_rx does: empty, then grown. */
static struct sr_msg *assemble(uint32_t step, uint32_t total)
{
	struct sr_msg *m = msg_alloc(0);

	assert_non_null(m);
	while (m->len < total) {
		uint32_t n = m->len + step > total ? total : m->len + step;
		struct sr_msg *g = msg_grow(m, n);

		assert_non_null(g);
		m = g;
		fill(m, m->len, n);
		m->len = n;
	}
	return m;
}

static void grow_keeps_payload(void **state)
{
	(void)state;
	for (uint32_t step = 1; step <= 300; step += 37) {
		struct sr_msg *m = assemble(step, 1000);

		assert_int_equal(m->len, 1000);
		check(m, 1000);
		msg_free(m);
	}
}

/* Grown a little (below the cached size), freed, and taken again many
 * times: every reuse must hold a full small payload (ASan-free builds
 * would corrupt the heap here if a shrunken block were cached). */
static void cached_blocks_keep_their_size(void **state)
{
	(void)state;
	for (int round = 0; round < 200; round++) {
		struct sr_msg *a = assemble(3, 9), *b;

		check(a, 9);
		msg_free(a);
		b = msg_alloc(64);
		assert_non_null(b);
		fill(b, 0, 64);
		check(b, 64);
		assert_int_equal(b->len, 64);
		msg_free(b);
	}
}

static void rwqe_copies(void **state)
{
	size_t max = sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge);
	struct sr_msg *m[100];

	(void)state;
	assert_null(msg_rwqe_alloc(max + 1));
	for (int i = 0; i < 100; i++) {
		m[i] = msg_alloc(0);
		assert_non_null(m[i]);
		m[i]->rwqe = msg_rwqe_alloc(max);
		assert_non_null(m[i]->rwqe);
		memset(m[i]->rwqe, i, max);
	}
	for (int i = 0; i < 100; i++) {
		const uint8_t *p = (const uint8_t *)m[i]->rwqe;

		for (size_t k = 0; k < max; k++)
			assert_int_equal(p[k], (uint8_t)i);
		msg_free(m[i]);
	}
}

/* Taken in one thread, freed in another (a completion on another
 * thread): the block joins the freeing thread's cache, which goes when
 * that thread exits. */
static void *free_them(void *arg)
{
	struct sr_msg **m = arg;

	for (int i = 0; i < 100; i++)
		msg_free(m[i]);
	return NULL;
}

static void freed_by_another_thread(void **state)
{
	struct sr_msg *m[100];
	pthread_t t;

	(void)state;
	for (int i = 0; i < 100; i++) {
		m[i] = msg_alloc((uint32_t)(i % 65));
		assert_non_null(m[i]);
		fill(m[i], 0, m[i]->len);
	}
	assert_int_equal(pthread_create(&t, NULL, free_them, m), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 0; i < 100; i++) {
		m[i] = msg_alloc(64);
		assert_non_null(m[i]);
		fill(m[i], 0, 64);
	}
	for (int i = 0; i < 100; i++) {
		check(m[i], 64);
		msg_free(m[i]);
	}
}

/* Messages of up to 4 KiB come from the cache's other class: taken and
 * freed in mixed sizes of both, every block must hold its whole payload
 * (filled all at once, then checked: two blocks that overlapped, or one
 * of the smaller class handed out for a larger payload, would show), and
 * one grown within its class stays, beyond it moves with its bytes. */
static void two_classes(void **state)
{
	enum { N = 80 };
	struct sr_msg *m[N];

	(void)state;
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < N; i++) {
			uint32_t len = (uint32_t)((i * 997 + round * 131) % 4097);

			m[i] = msg_alloc(len);
			assert_non_null(m[i]);
			assert_int_equal(m[i]->len, len);
			memset(m[i]->payload, i + round, len);
		}
		for (int i = 0; i < N; i++) {
			for (uint32_t k = 0; k < m[i]->len; k++)
				assert_int_equal(m[i]->payload[k], (uint8_t)(i + round));
			msg_free(m[i]);
		}
	}
	m[0] = msg_alloc(1000);
	assert_non_null(m[0]);
	fill(m[0], 0, 1000);
	m[1] = msg_grow(m[0], 4096);
	assert_non_null(m[1]);
	check(m[1], 1000);
	m[1]->len = 1000;
	m[2] = msg_grow(m[1], 6000);
	assert_non_null(m[2]);
	check(m[2], 1000);
	fill(m[2], 1000, 6000);
	m[2]->len = 6000;
	check(m[2], 6000);
	msg_free(m[2]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grow_keeps_payload),
		cmocka_unit_test(cached_blocks_keep_their_size),
		cmocka_unit_test(rwqe_copies),
		cmocka_unit_test(freed_by_another_thread),
		cmocka_unit_test(two_classes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
