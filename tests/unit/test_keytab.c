/* Unit tests for the MR/MW key table (src/core/keytab.c).
 *
 * Keys come from the whole 32-bit space at random (DESIGN.md decision 6):
 * never 0, never a key in use, not sequential. The table is an
 * open-addressing hash with tombstones; growth and removal must keep every
 * live key findable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define NKEYS 100000

static int setup(void **state)
{
	struct sr_keytab *t = calloc(1, sizeof(*t));

	if (!t || keytab_init(t))
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct sr_keytab *t = *state;

	keytab_destroy(t);
	free(t);
	return 0;
}

/* The object a key maps to: a distinct pointer per index, never
 * dereferenced. */
static void *obj_of(size_t i)
{
	return (void *)(uintptr_t)(0x1000 + i * 16);
}

static struct sr_keyent *find(struct sr_keytab *t, uint32_t key)
{
	struct sr_keyent *e;

	pthread_rwlock_rdlock(&t->lock);
	e = keytab_find_locked(t, key);
	pthread_rwlock_unlock(&t->lock);
	return e;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* 100k random keys: never 0, all distinct, every one still maps to its
 * own object after all the growth it took to hold them. */
static void test_random_keys_unique_and_findable(void **state)
{
	struct sr_keytab *t = *state;
	uint32_t *keys = malloc(NKEYS * sizeof(*keys));
	uint32_t *sorted = malloc(NKEYS * sizeof(*sorted));
	uint32_t size0 = t->size;

	assert_non_null(keys);
	assert_non_null(sorted);
	for (size_t i = 0; i < NKEYS; i++) {
		assert_int_equal(keytab_insert_random(t, SR_KEY_MR, obj_of(i), &keys[i]), 0);
		assert_int_not_equal(keys[i], 0);
	}
	assert_int_equal(t->used, NKEYS);
	assert_true(t->size > size0);
	/* Load factor stays below 3/4, size a power of two. */
	assert_true((uint64_t)t->used * 4 <= (uint64_t)t->size * 3);
	assert_int_equal(t->size & (t->size - 1), 0);

	memcpy(sorted, keys, NKEYS * sizeof(*keys));
	qsort(sorted, NKEYS, sizeof(*sorted), cmp_u32);
	for (size_t i = 1; i < NKEYS; i++)
		assert_int_not_equal(sorted[i - 1], sorted[i]);

	for (size_t i = 0; i < NKEYS; i++) {
		struct sr_keyent *e = find(t, keys[i]);

		assert_non_null(e);
		assert_int_equal(e->key, keys[i]);
		assert_int_equal(e->kind, SR_KEY_MR);
		assert_ptr_equal(e->obj, obj_of(i));
	}
	free(sorted);
	free(keys);
}

/* Consecutive keys must not be near each other: a guessed neighbour of a
 * known key should not be a live key. With uniform 32-bit keys the chance
 * that two consecutive keys lie within 256 of each other is ~1.2e-7. */
static void test_random_keys_not_sequential(void **state)
{
	struct sr_keytab *t = *state;
	uint32_t prev = 0, key;
	size_t close = 0, n = 20000;
	uint64_t bits_or = 0, bits_and = UINT32_MAX;

	for (size_t i = 0; i < n; i++) {
		assert_int_equal(keytab_insert_random(t, SR_KEY_MW, obj_of(i), &key), 0);
		if (i) {
			uint32_t d = key > prev ? key - prev : prev - key;

			if (d < 256)
				close++;
		}
		bits_or |= key;
		bits_and &= key;
		prev = key;
	}
	assert_true(close < n / 100);
	/* Every bit position takes both values somewhere: keys use the whole
	 * 32-bit space, not an index plus a tag. */
	assert_int_equal(bits_or, UINT32_MAX);
	assert_int_equal(bits_and, 0);
}

/* Chosen keys (MW type 2 style: only the low byte differs) keep their
 * objects across growth too. */
static void test_chosen_keys_survive_growth(void **state)
{
	struct sr_keytab *t = *state;
	const uint32_t base = 0xabc00000;
	const size_t n = 5000;

	for (size_t i = 0; i < n; i++)
		assert_int_equal(keytab_insert(t, base + (uint32_t)i, SR_KEY_MW, obj_of(i)), 0);
	assert_int_equal(t->used, n);
	for (size_t i = 0; i < n; i++) {
		struct sr_keyent *e = find(t, base + (uint32_t)i);

		assert_non_null(e);
		assert_int_equal(e->kind, SR_KEY_MW);
		assert_ptr_equal(e->obj, obj_of(i));
	}
	assert_null(find(t, base + (uint32_t)n));
	assert_null(find(t, base - 1));
}

static void test_insert_existing_key_eexist(void **state)
{
	struct sr_keytab *t = *state;
	uint32_t key;
	struct sr_keyent *e;

	assert_int_equal(keytab_insert_random(t, SR_KEY_MR, obj_of(1), &key), 0);
	assert_int_equal(keytab_insert(t, key, SR_KEY_MW, obj_of(2)), -EEXIST);
	/* The existing mapping is untouched. */
	e = find(t, key);
	assert_non_null(e);
	assert_int_equal(e->kind, SR_KEY_MR);
	assert_ptr_equal(e->obj, obj_of(1));
	assert_int_equal(t->used, 1);

	assert_int_equal(keytab_insert(t, 0x12345678, SR_KEY_MW, obj_of(3)), 0);
	assert_int_equal(keytab_insert(t, 0x12345678, SR_KEY_MW, obj_of(4)), -EEXIST);
	assert_ptr_equal(find(t, 0x12345678)->obj, obj_of(3));
	assert_int_equal(t->used, 2);
}

static void test_key_zero_rejected(void **state)
{
	struct sr_keytab *t = *state;

	assert_int_equal(keytab_insert(t, 0, SR_KEY_MR, obj_of(0)), -EINVAL);
	assert_int_equal(t->used, 0);
	assert_null(find(t, 0));
	assert_int_equal(keytab_remove(t, 0), -ENOENT);
	/* Still 0 after a tombstone exists (tombs have key 0 internally). */
	assert_int_equal(keytab_insert(t, 77, SR_KEY_MR, obj_of(1)), 0);
	assert_int_equal(keytab_remove(t, 77), 0);
	assert_null(find(t, 0));
	assert_int_equal(keytab_remove(t, 0), -ENOENT);
}

static void test_remove_then_find_fails(void **state)
{
	struct sr_keytab *t = *state;
	uint32_t keys[1000];

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		assert_int_equal(keytab_insert_random(t, SR_KEY_MR, obj_of(i), &keys[i]), 0);
	/* Remove every other key: the removed ones are gone, the rest (some
	 * of which probe past the new tombstones) are all still there. */
	for (size_t i = 0; i < ARRAY_SIZE(keys); i += 2)
		assert_int_equal(keytab_remove(t, keys[i]), 0);
	assert_int_equal(t->used, ARRAY_SIZE(keys) / 2);
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		struct sr_keyent *e = find(t, keys[i]);

		if (i % 2 == 0) {
			assert_null(e);
		} else {
			assert_non_null(e);
			assert_ptr_equal(e->obj, obj_of(i));
		}
	}
	/* A second remove of the same key fails. */
	assert_int_equal(keytab_remove(t, keys[0]), -ENOENT);
	/* A removed key can be inserted again. */
	assert_int_equal(keytab_insert(t, keys[0], SR_KEY_MW, obj_of(9999)), 0);
	assert_ptr_equal(find(t, keys[0])->obj, obj_of(9999));
}

static void test_remove_missing_enoent(void **state)
{
	struct sr_keytab *t = *state;
	uint32_t key;

	assert_int_equal(keytab_remove(t, 0xdeadbeef), -ENOENT);
	assert_int_equal(keytab_insert_random(t, SR_KEY_MR, obj_of(1), &key), 0);
	assert_int_equal(keytab_remove(t, key ^ 1), -ENOENT);
	assert_int_equal(keytab_remove(t, key + 256), -ENOENT);
	assert_int_equal(t->used, 1);
	assert_non_null(find(t, key));
}

/* A tombstone is taken again by the next insert that probes through it,
 * and insert/remove churn never grows the table. */
static void test_tombstones_reused(void **state)
{
	struct sr_keytab *t = *state;
	const uint32_t key = 0x5eed1234;
	struct sr_keyent *e1, *e2;
	uint32_t size0 = t->size;

	assert_int_equal(keytab_insert(t, key, SR_KEY_MR, obj_of(1)), 0);
	e1 = find(t, key);
	assert_non_null(e1);
	assert_int_equal(keytab_remove(t, key), 0);
	assert_int_equal(t->tombs, 1);
	assert_int_equal(t->used, 0);
	assert_int_equal(keytab_insert(t, key, SR_KEY_MR, obj_of(2)), 0);
	e2 = find(t, key);
	assert_ptr_equal(e2, e1);	/* same slot: the tombstone */
	assert_int_equal(t->tombs, 0);
	assert_int_equal(t->used, 1);
	assert_int_equal(keytab_remove(t, key), 0);

	/* 100k register/deregister cycles with at most a handful live keys:
	 * the table stays at its initial size (tombstones are reused or
	 * swept by a same-size rehash, never accumulated into growth). */
	for (size_t i = 0; i < 100000; i++) {
		uint32_t k[4];

		for (size_t j = 0; j < 4; j++)
			assert_int_equal(keytab_insert_random(t, SR_KEY_MR, obj_of(j), &k[j]), 0);
		for (size_t j = 0; j < 4; j++)
			assert_int_equal(keytab_remove(t, k[j]), 0);
	}
	assert_int_equal(t->used, 0);
	assert_int_equal(t->size, size0);
	assert_true((uint64_t)(t->used + t->tombs) * 4 <= (uint64_t)t->size * 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_random_keys_unique_and_findable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_keys_not_sequential, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chosen_keys_survive_growth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_insert_existing_key_eexist, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_zero_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_then_find_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_missing_enoent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tombstones_reused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
