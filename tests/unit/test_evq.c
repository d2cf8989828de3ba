/* Unit tests for event queues (src/core/evq.c): the events behind the
 * completion channel and async event file descriptors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/evq.h"

static int setup(void **state)
{
	struct sr_evq *q = calloc(1, sizeof(*q));

	if (!q || evq_init(q))
		return -1;
	*state = q;
	return 0;
}

static int teardown(void **state)
{
	struct sr_evq *q = *state;

	evq_destroy(q);
	free(q);
	return 0;
}

static void set_nonblock(struct sr_evq *q)
{
	int fl = fcntl(q->fd, F_GETFL);

	assert_true(fl >= 0);
	assert_int_equal(fcntl(q->fd, F_SETFL, fl | O_NONBLOCK), 0);
}

/* Is the application's fd readable right now? */
static bool fd_readable(struct sr_evq *q)
{
	struct pollfd p = { .fd = q->fd, .events = POLLIN };
	int n = poll(&p, 1, 0);

	assert_true(n >= 0);
	return n == 1 && (p.revents & POLLIN);
}

#define OBJ(n) ((void *)(uintptr_t)(0x1000 * (n)))

static void test_push_pop_order(void **state)
{
	struct sr_evq *q = *state;
	struct sr_ev ev;

	set_nonblock(q);
	for (int i = 0; i < 100; i++)
		assert_int_equal(evq_push(q, OBJ(i + 1), i, i % 3), 0);
	assert_int_equal(q->count, 100);
	assert_true(fd_readable(q));
	for (int i = 0; i < 100; i++) {
		assert_int_equal(evq_pop(q, &ev), 0);
		assert_ptr_equal(ev.obj, OBJ(i + 1));
		assert_int_equal(ev.type, i);
		assert_int_equal(ev.port, i % 3);
	}
	assert_int_equal(q->count, 0);
	assert_false(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), -EAGAIN);
}

static void test_nonblocking_pop_empty(void **state)
{
	struct sr_evq *q = *state;
	struct sr_ev ev;

	set_nonblock(q);
	assert_false(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), -EAGAIN);
	/* And again after the queue has been used and drained. */
	assert_int_equal(evq_push(q, OBJ(1), 5, 1), 0);
	assert_true(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), 0);
	assert_int_equal(ev.type, 5);
	assert_int_equal(evq_pop(q, &ev), -EAGAIN);
}

static void test_remove_obj(void **state)
{
	struct sr_evq *q = *state;
	struct sr_ev ev;

	set_nonblock(q);
	/* Interleaved: A B A C A B */
	assert_int_equal(evq_push(q, OBJ(1), 10, 1), 0);
	assert_int_equal(evq_push(q, OBJ(2), 11, 1), 0);
	assert_int_equal(evq_push(q, OBJ(1), 12, 1), 0);
	assert_int_equal(evq_push(q, OBJ(3), 13, 1), 0);
	assert_int_equal(evq_push(q, OBJ(1), 14, 1), 0);
	assert_int_equal(evq_push(q, OBJ(2), 15, 1), 0);

	assert_int_equal(evq_remove_obj(q, OBJ(1)), 3);
	assert_int_equal(q->count, 3);
	assert_int_equal(evq_remove_obj(q, OBJ(1)), 0);
	assert_int_equal(evq_remove_obj(q, OBJ(9)), 0);

	/* What is left comes out in order, and nothing more. */
	assert_int_equal(evq_pop(q, &ev), 0);
	assert_ptr_equal(ev.obj, OBJ(2));
	assert_int_equal(ev.type, 11);
	assert_int_equal(evq_pop(q, &ev), 0);
	assert_ptr_equal(ev.obj, OBJ(3));
	assert_int_equal(ev.type, 13);
	assert_int_equal(evq_pop(q, &ev), 0);
	assert_ptr_equal(ev.obj, OBJ(2));
	assert_int_equal(ev.type, 15);
	assert_false(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), -EAGAIN);
}

/* Removing the only object's events leaves the fd quiet: a poll()ing
 * application is not woken for events that no longer exist. */
static void test_remove_obj_fd_not_readable(void **state)
{
	struct sr_evq *q = *state;
	struct sr_ev ev;

	set_nonblock(q);
	for (int i = 0; i < 5; i++)
		assert_int_equal(evq_push(q, OBJ(7), 0, 0), 0);
	assert_true(fd_readable(q));
	assert_int_equal(evq_remove_obj(q, OBJ(7)), 5);
	assert_int_equal(q->count, 0);
	assert_false(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), -EAGAIN);

	/* The queue still works afterwards. */
	assert_int_equal(evq_push(q, OBJ(8), 3, 1), 0);
	assert_true(fd_readable(q));
	assert_int_equal(evq_pop(q, &ev), 0);
	assert_ptr_equal(ev.obj, OBJ(8));
	assert_false(fd_readable(q));
}

/* evq.h: the fd's count equals the number of queued events. An
 * application that reads its async events late (or a burst: every QP of
 * a context going to error) must still be told about every one of them;
 * a poll()ing or blocking reader must never see a quiet fd while events
 * are queued. */
static void test_many_events_all_signalled(void **state)
{
	struct sr_evq *q = *state;
	const int n = 1000;
	struct sr_ev ev;
	int popped = 0, r;

	set_nonblock(q);
	for (int i = 0; i < n; i++)
		assert_int_equal(evq_push(q, OBJ(i + 1), i, 1), 0);
	assert_int_equal(q->count, n);
	while ((r = evq_pop(q, &ev)) == 0) {
		if (ev.obj != OBJ(popped + 1))
			fail_msg("event %d is about %p, want %p", popped, ev.obj, OBJ(popped + 1));
		popped++;
	}
	assert_int_equal(r, -EAGAIN);
	if (popped != n)
		fail_msg("pushed %d events, a non-blocking reader got %d and then EAGAIN "
			 "with %u still queued (fd readable: %d)",
			 n, popped, q->count, fd_readable(q));
	assert_int_equal(q->count, 0);
}

struct popper {
	struct sr_evq *q;
	struct sr_ev ev;
	int ret;
	atomic_bool done;
};

static void *pop_thread(void *arg)
{
	struct popper *p = arg;

	p->ret = evq_pop(p->q, &p->ev);
	atomic_store(&p->done, true);
	return NULL;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* A pop on a blocking fd sleeps until another thread pushes. */
static void test_blocking_pop_woken_by_push(void **state)
{
	struct sr_evq *q = *state;
	struct popper p = { .q = q, .ret = -1 };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, pop_thread, &p), 0);
	sleep_ms(100);
	assert_false(atomic_load(&p.done));	/* still blocked: nothing queued */
	assert_int_equal(evq_push(q, OBJ(42), 7, 1), 0);
	for (int i = 0; i < 200 && !atomic_load(&p.done); i++)
		sleep_ms(5);
	assert_true(atomic_load(&p.done));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.ret, 0);
	assert_ptr_equal(p.ev.obj, OBJ(42));
	assert_int_equal(p.ev.type, 7);
	assert_int_equal(p.ev.port, 1);
	assert_int_equal(q->count, 0);
}

/* A blocked reader whose wake-up is taken back by evq_remove_obj keeps
 * waiting for a real event instead of returning garbage. */
static void test_blocking_pop_skips_removed(void **state)
{
	struct sr_evq *q = *state;
	struct popper p = { .q = q, .ret = -1 };
	pthread_t th;

	assert_int_equal(evq_push(q, OBJ(1), 1, 1), 0);
	assert_int_equal(evq_remove_obj(q, OBJ(1)), 1);
	assert_int_equal(pthread_create(&th, NULL, pop_thread, &p), 0);
	sleep_ms(100);
	assert_false(atomic_load(&p.done));
	assert_int_equal(evq_push(q, OBJ(2), 2, 1), 0);
	for (int i = 0; i < 200 && !atomic_load(&p.done); i++)
		sleep_ms(5);
	assert_true(atomic_load(&p.done));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.ret, 0);
	assert_ptr_equal(p.ev.obj, OBJ(2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_push_pop_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nonblocking_pop_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_obj, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_obj_fd_not_readable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_events_all_signalled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blocking_pop_woken_by_push, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blocking_pop_skips_removed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
