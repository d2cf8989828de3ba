/* Unit tests for the progress engine's timers (src/progress/progress.c):
 * arm, arm unless sooner, cancel, and disarm, which must not wait for a fire() that waits for
 * the caller (tcp_up_locked holds the stream lock its timer takes). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "progress/progress.h"

struct tmr {
	struct sr_timer t;
	pthread_mutex_t *lock;		/* fire() takes it, if set */
	atomic_int entered, fired;
};

static void tmr_fire(struct sr_timer *t)
{
	struct tmr *x = container_of(t, struct tmr, t);

	atomic_fetch_add(&x->entered, 1);
	if (x->lock) {
		pthread_mutex_lock(x->lock);
		pthread_mutex_unlock(x->lock);
	}
	atomic_fetch_add(&x->fired, 1);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Wait up to ms for *v to reach want. */
static bool wait_for(atomic_int *v, int want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (atomic_load(v) >= want)
			return true;
		sleep_ms(1);
	}
	return atomic_load(v) >= want;
}

static void fires_once(void **state)
{
	struct sr_progress *pg = progress_create();
	struct tmr x = { .t.fire = tmr_fire };

	(void)state;
	assert_non_null(pg);
	progress_timer_arm(pg, &x.t, 1000000);	/* 1 ms */
	assert_true(wait_for(&x.fired, 1, 2000));
	sleep_ms(20);
	assert_int_equal(atomic_load(&x.fired), 1);
	progress_destroy(pg);
}

/* progress_timer_arm_by: never puts off a sooner deadline, brings a later
 * one forward (a timer of several uses: tcp_chan's). */
static void arm_by_keeps_the_sooner_deadline(void **state)
{
	struct sr_progress *pg = progress_create();
	struct tmr x = { .t.fire = tmr_fire }, y = { .t.fire = tmr_fire };

	(void)state;
	assert_non_null(pg);
	progress_timer_arm(pg, &x.t, 5000000);		/* 5 ms */
	progress_timer_arm_by(pg, &x.t, 10000000000ULL);	/* not 10 s */
	assert_true(wait_for(&x.fired, 1, 2000));
	progress_timer_arm(pg, &y.t, 10000000000ULL);	/* 10 s ... */
	progress_timer_arm_by(pg, &y.t, 5000000);	/* ... now 5 ms */
	assert_true(wait_for(&y.fired, 1, 2000));
	sleep_ms(20);
	assert_int_equal(atomic_load(&x.fired), 1);
	assert_int_equal(atomic_load(&y.fired), 1);
	progress_destroy(pg);
}

static void cancel_and_disarm_stop_an_armed_timer(void **state)
{
	struct sr_progress *pg = progress_create();
	struct tmr a = { .t.fire = tmr_fire }, b = { .t.fire = tmr_fire };

	(void)state;
	assert_non_null(pg);
	progress_timer_arm(pg, &a.t, 50000000);	/* 50 ms */
	progress_timer_arm(pg, &b.t, 50000000);
	progress_timer_cancel(pg, &a.t);
	progress_timer_disarm(pg, &b.t);
	assert_false(a.t.armed);
	assert_false(b.t.armed);
	sleep_ms(120);
	assert_int_equal(atomic_load(&a.entered), 0);
	assert_int_equal(atomic_load(&b.entered), 0);
	/* and they can be armed again */
	progress_timer_arm(pg, &b.t, 0);
	assert_true(wait_for(&b.fired, 1, 2000));
	progress_destroy(pg);
}

/* fire() is running and waits for a lock this thread holds: disarm
 * returns at once (cancel would wait for ever), and fire() finishes
 * once the lock is let go. */
static void disarm_does_not_wait_for_a_running_fire(void **state)
{
	struct sr_progress *pg = progress_create();
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct tmr x = { .t.fire = tmr_fire, .lock = &m };

	(void)state;
	assert_non_null(pg);
	pthread_mutex_lock(&m);
	progress_timer_arm(pg, &x.t, 0);
	assert_true(wait_for(&x.entered, 1, 2000));
	progress_timer_disarm(pg, &x.t);	/* must return */
	assert_int_equal(atomic_load(&x.fired), 0);
	pthread_mutex_unlock(&m);
	assert_true(wait_for(&x.fired, 1, 2000));
	/* now cancel returns too: nothing is running */
	progress_timer_cancel(pg, &x.t);
	progress_destroy(pg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fires_once),
		cmocka_unit_test(arm_by_keeps_the_sooner_deadline),
		cmocka_unit_test(cancel_and_disarm_stop_an_armed_timer),
		cmocka_unit_test(disarm_does_not_wait_for_a_running_fire),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
