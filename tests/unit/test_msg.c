/* Unit tests for messages (src/core/msg.c): the per-thread cache of small
 * messages and receive-WQE copies, and msg_grow, which must keep a cached
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grow_keeps_payload),
		cmocka_unit_test(cached_blocks_keep_their_size),
		cmocka_unit_test(rwqe_copies),
		cmocka_unit_test(freed_by_another_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
