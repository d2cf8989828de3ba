/* sr_mutex's slow halves (lock.h), and the process-wide barrier its bias
 * needs.
 *
 * The mutex is Drepper's third ("Futexes Are Tricky", 2011): a thread
 * that finds the lock held marks it 2 ("someone may wait") and sleeps
 * while it stays 2; the holder's release sees the 2 and wakes one
 * sleeper, which takes the lock as 2 again (it cannot know whether others
 * still sleep: at worst one wake-up too many).
 *
 * The bias (lock.h): whoever takes the mutex first takes the lock from a
 * biased owner (bias_revoke); a thread that then took it SR_BIAS_STREAK
 * times in a row (plus `need`) gets the bias. A revocation costs the
 * revoker a membarrier (14 us here with the other vCPU busy: 1400 biased
 * takes' worth) and the owner an interrupt (a few hundred takes' worth),
 * SR_BIAS_PAID between the two. So the lock keeps an account (`credit`):
 * each revocation adds the owner's biased takes and subtracts
 * SR_BIAS_PAID; in debt, the next bias needs as many more takes in a row
 * as the debt, and a streak that another thread's take cuts short pays
 * the debt back (the takes it kept from the bias). Two threads that take
 * turns soon stop handing the bias back and forth; the credit is capped,
 * so a long good run does not excuse many bad ones. The progress
 * thread's look at a stream a program polls, once a millisecond
 * (sometimes twice in a few microseconds), revokes the program thread's
 * bias each time: worth it, at a thousand takes and more a millisecond
 * (without the pay-back, a debt above that was never repaid: the lock
 * stayed unbiased for good, in one run of three).
 */
#include "core/lock.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SR_BIAS_STREAK	16
#define SR_BIAS_MAX	(1U << 22)
#define SR_BIAS_PAID	1024
#define SR_BIAS_CREDIT	(8 * SR_BIAS_PAID)

/* ---- membarrier ------------------------------------------------------ */

/* Registered as the library loads, before a second thread runs: in a
 * process of one thread that is at once, where with more threads the
 * kernel waits for a grace period (10-20 ms here). */
static atomic_bool membar_ok;

bool sr_lock_rseq;
uint64_t sr_lock_restarts;
/* SOFTRNIC_LOCK_BIAS=0 (docs/CONFIG.md): nothing is biased. */
static bool bias_off;
static bool rseq_off;	/* SOFTRNIC_LOCK_RSEQ=0 */

#ifdef SR_LOCK_RSEQ
/* Has the kernel this thread's rseq area (glibc registers one for every
 * thread; -1 or -2 in cpu_id: not registered, or refused)? */
static bool rseq_thread_ok(uintptr_t me)
{
	const struct rseq *rs = (const struct rseq *)(me + (uintptr_t)__rseq_offset);

	return __rseq_size && (int32_t)atomic_load_explicit((_Atomic uint32_t *)&rs->cpu_id,
							     memory_order_relaxed) >= 0;
}
#endif

static void membar_register(void)
{
	atomic_store(&membar_ok,
		     syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0);
#ifdef SR_LOCK_RSEQ
	/* (the mode is the process's for its life: a forked child keeps
	 * its parent's; one whose registration fails has no bias then) */
	if (!rseq_off && !bias_off && rseq_thread_ok(sr_self()) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
		sr_lock_rseq = true;
	else if (sr_lock_rseq)
		atomic_store(&membar_ok, false);
#endif
}

/* (a forked child registers again: one thread then, so at once) */
__attribute__((constructor)) static void membar_init(void)
{
	const char *v = getenv("SOFTRNIC_LOCK_BIAS");

	bias_off = v && !strcmp(v, "0");
	v = getenv("SOFTRNIC_LOCK_RSEQ");
	rseq_off = v && !strcmp(v, "0");
	membar_register();
	pthread_atfork(NULL, NULL, membar_register);
}

bool sr_lock_bias_on(void)
{
	return !bias_off && sr_membar_ready();
}

bool sr_membar_ready(void)
{
	return atomic_load_explicit(&membar_ok, memory_order_relaxed);
}

int sr_membar_all(void)
{
	if (atomic_load(&membar_ok) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return 0;
	/* (registered, it does not fail; should it, nothing relies on it
	 * from now on: the callers fence themselves) */
	atomic_store(&membar_ok, false);
	return -1;
}

/* The revoker's barrier: with rseq takes, also the restart of any take
 * under way between its look at `bias` and its store (lock.h). */
static int membar_bias(void)
{
#ifdef SR_LOCK_RSEQ
	if (sr_lock_rseq) {
		if (atomic_load(&membar_ok) &&
		    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
			return 0;
		atomic_store(&membar_ok, false);
		return -1;
	}
#endif
	return sr_membar_all();
}

/* ---- the mutex ------------------------------------------------------- */

static void mutex_wait(sr_mutex *m)
{
	while (atomic_exchange_explicit(&m->state, 2, memory_order_acquire) != 0)
		/* (returns at once if it is no longer 2; EINTR: look again) */
		syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

/* (a look first: threads that spin on a trylock, two pollers of one CQ,
 * would otherwise take the line from each other with every try) */
static bool mutex_try(sr_mutex *m)
{
	uint32_t free_ = 0;

	if (atomic_load_explicit(&m->state, memory_order_relaxed))
		return false;
	return atomic_compare_exchange_strong_explicit(&m->state, &free_, 1, memory_order_acquire,
						       memory_order_relaxed);
}

void sr_mutex_unlock_slow(sr_mutex *m)
{
	/* (given as the mutex goes, not as it was taken: a trylock of the
	 * holder's own, meanwhile, finds it held) */
	if (m->earned) {
		m->earned = false;
		atomic_store_explicit(&m->used, 0, memory_order_relaxed);
		atomic_store_explicit(&m->bias, m->last, memory_order_relaxed);
	}
	if (atomic_exchange_explicit(&m->state, 0, memory_order_release) != 1)
		syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- the bias (mutex held) ------------------------------------------- */

/* Take the lock from a biased owner: after the barrier the owner either
 * shows in `active` or sees `bias` cleared. With wait, until it is out;
 * without, EBUSY while it is in (the bias stays revoked: whoever takes
 * the mutex next waits it out). */
static int bias_revoke(sr_mutex *m, uintptr_t me, bool wait)
{
	uintptr_t b = atomic_load_explicit(&m->bias, memory_order_relaxed);

	if (b && b != me) {
		atomic_store_explicit(&m->bias, 0, memory_order_relaxed);
		/* (before the barrier: an owner still inside then sees it as
		 * it leaves, and wakes us) */
		atomic_store_explicit(&m->revoking, 1, memory_order_relaxed);
		if (membar_bias()) {
			/* (no barrier: stores reach the others within
			 * microseconds; wait that out) */
			atomic_thread_fence(memory_order_seq_cst);
			usleep(1000);
		}
		int64_t c = (int64_t)m->credit +
			    atomic_load_explicit(&m->used, memory_order_relaxed) - SR_BIAS_PAID;

		c = c > SR_BIAS_CREDIT ? SR_BIAS_CREDIT : c < -(int64_t)SR_BIAS_MAX ? -(int64_t)SR_BIAS_MAX : c;
		m->credit = (int32_t)c;
		m->need = c >= 0 ? 0 : (uint32_t)-c;
		m->streak = 0;
	}
	/* Out already, or wait: the owner's release looks at `revoking`
	 * after it stores `active` (the same Dekker as the bias, the same
	 * barrier: a release before it is seen out, one after it sees the
	 * flag), clears it and wakes us. (The timeout only bounds a wait
	 * that should never be long.) */
	while (atomic_load_explicit(&m->active, memory_order_acquire)) {
		struct timespec ms = { 0, 1000000 };

		if (!wait)
			return EBUSY;	/* (the owner clears the flag) */
		syscall(SYS_futex, &m->revoking, FUTEX_WAIT_PRIVATE, 1, &ms, NULL, 0);
	}
	atomic_store_explicit(&m->revoking, 0, memory_order_relaxed);
	return 0;
}

void sr_mutex_revoker_wake(sr_mutex *m)
{
	if (atomic_exchange_explicit(&m->revoking, 0, memory_order_relaxed))
		syscall(SYS_futex, &m->revoking, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* A take in a row by the same thread: enough of them earn the bias. */
static void bias_earn(sr_mutex *m, uintptr_t me)
{
	if (!me || !sr_lock_bias_on())
		return;
#ifdef SR_LOCK_RSEQ
	if (sr_lock_rseq && !rseq_thread_ok(me))
		return;		/* (its takes could not be restarted) */
#endif
	if (m->last != me) {
		/* The last thread's streak, cut short: takes the debt kept
		 * from its bias, which pay the debt back (the progress
		 * thread's look once a millisecond cuts every streak) */
		if (m->credit < 0) {
			m->credit = m->streak >= (uint32_t)-m->credit ? 0 : m->credit + (int32_t)m->streak;
			m->need = (uint32_t)-m->credit;
		}
		m->last = me;
		m->streak = 1;
		return;
	}
	if (++m->streak >= SR_BIAS_STREAK + m->need) {
		m->streak = 0;
		m->earned = true;
	}
}

void sr_mutex_lock_slow(sr_mutex *m, uintptr_t me)
{
	if (!mutex_try(m))
		mutex_wait(m);
	bias_revoke(m, me, true);
	bias_earn(m, me);
}

int sr_mutex_trylock_slow(sr_mutex *m, uintptr_t me)
{
	if (!mutex_try(m))
		return EBUSY;
	if (bias_revoke(m, me, false)) {
		sr_mutex_unlock_slow(m);
		return EBUSY;
	}
	bias_earn(m, me);
	return 0;
}
