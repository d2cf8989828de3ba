/* sr_mutex: the lock of the data path's objects (QP, CQ, stream).
 *
 * A mutex of three states on a futex (0 free, 1 held, 2 held and perhaps
 * waited for): taking a free one is one compare-and-swap, releasing one
 * nobody waits for is one exchange, both inline. A post or a poll takes a
 * dozen such locks, nearly always free; glibc's pthread_mutex_lock and
 * _unlock cost about 80 instructions a pair there, through two calls
 * (docs/PERFORMANCE.md). A waiter sleeps in the kernel, as with a
 * default pthread mutex (no spinning: on two vCPUs the holder may be the
 * thread a spinner keeps from running).
 *
 * Not recursive, no owner checks, no condition variables: a lock that
 * needs one stays a pthread_mutex_t. Process-private (FUTEX_PRIVATE): not
 * for memory shared with another process. */
#ifndef SOFTRNIC_LOCK_H
#define SOFTRNIC_LOCK_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct {
	_Atomic uint32_t state;
} sr_mutex;

#define SR_MUTEX_INIT { 0 }

/* The contended halves (lock.c). */
void sr_mutex_wait(sr_mutex *m);
void sr_mutex_wake(sr_mutex *m);

static inline void sr_mutex_init(sr_mutex *m)
{
	atomic_init(&m->state, 0);
}

static inline void sr_mutex_destroy(sr_mutex *m)
{
	(void)m;
}

static inline void sr_mutex_lock(sr_mutex *m)
{
	uint32_t free_ = 0;

	if (!__builtin_expect(atomic_compare_exchange_strong_explicit(
				      &m->state, &free_, 1, memory_order_acquire,
				      memory_order_relaxed), 1))
		sr_mutex_wait(m);
}

/* 0 if taken, EBUSY if held (as pthread_mutex_trylock). */
static inline int sr_mutex_trylock(sr_mutex *m)
{
	uint32_t free_ = 0;

	return atomic_compare_exchange_strong_explicit(&m->state, &free_, 1, memory_order_acquire,
						       memory_order_relaxed) ? 0 : EBUSY;
}

static inline void sr_mutex_unlock(sr_mutex *m)
{
	if (__builtin_expect(atomic_exchange_explicit(&m->state, 0, memory_order_release) != 1, 0))
		sr_mutex_wake(m);
}

#endif
