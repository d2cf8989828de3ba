/* Unit tests for sr_mutex (src/core/lock.h, lock.c): mutual exclusion with
 * more threads than CPUs (so that holders are preempted and waiters sleep
 * in the kernel), trylock, and a waiter woken by the release it waits
 * for. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "core/lock.h"

#define THREADS 6
#define ROUNDS 20000

static sr_mutex big = SR_MUTEX_INIT;
static uint64_t counter;		/* guarded by big, deliberately plain */
static atomic_int inside;		/* threads inside the section at once */
static atomic_int overlap;		/* times one found another inside */

static void *hammer(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		sr_mutex_lock(&big);
		if (atomic_fetch_add(&inside, 1))
			atomic_fetch_add(&overlap, 1);
		counter++;
		/* now and then give the CPU away while holding it: the
		 * others then find it held and sleep on the futex */
		if (i % 512 == 0)
			sched_yield();
		atomic_fetch_sub(&inside, 1);
		sr_mutex_unlock(&big);
	}
	return NULL;
}

static void exclusion(void **state)
{
	pthread_t t[THREADS];

	(void)state;
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(counter, (uint64_t)THREADS * ROUNDS);
	assert_int_equal(atomic_load(&overlap), 0);
	/* released by all: free, no waiter marked */
	assert_int_equal(atomic_load(&big.state), 0);
}

static void trylock(void **state)
{
	sr_mutex m;

	(void)state;
	sr_mutex_init(&m);
	assert_int_equal(sr_mutex_trylock(&m), 0);
	assert_int_equal(sr_mutex_trylock(&m), EBUSY);
	sr_mutex_unlock(&m);
	assert_int_equal(sr_mutex_trylock(&m), 0);
	sr_mutex_unlock(&m);
	sr_mutex_destroy(&m);
}

static sr_mutex held = SR_MUTEX_INIT;
static atomic_int got;

static void *waiter(void *arg)
{
	(void)arg;
	sr_mutex_lock(&held);
	atomic_store(&got, 1);
	sr_mutex_unlock(&held);
	return NULL;
}

/* A waiter sleeps (the state says so) until the holder lets go, and the
 * release wakes it. */
static void wakeup(void **state)
{
	struct timespec ms = { 0, 1000000 };
	pthread_t t;
	int i;

	(void)state;
	sr_mutex_lock(&held);
	assert_int_equal(pthread_create(&t, NULL, waiter, NULL), 0);
	for (i = 0; i < 5000 && atomic_load(&held.state) != 2; i++)
		nanosleep(&ms, NULL);
	assert_int_equal(atomic_load(&held.state), 2);
	nanosleep(&ms, NULL);
	assert_int_equal(atomic_load(&got), 0);
	sr_mutex_unlock(&held);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(atomic_load(&got), 1);
	assert_int_equal(atomic_load(&held.state), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exclusion),
		cmocka_unit_test(trylock),
		cmocka_unit_test(wakeup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
