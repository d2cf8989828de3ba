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
 * Biased (DESIGN.md decision 5): even a free lock's compare-and-swap and
 * exchange are locked instructions, each a full barrier that waits for
 * every store before it; the two dozen of an 8-byte ping-pong's round
 * cost about a fifth of it. A lock that one thread keeps taking, one
 * after another, with nobody else, is given to that thread (bias): it
 * then takes it by storing `active` after a look at `bias` (below), and
 * releases it with a plain store. Another thread that wants it takes the
 * mutex, clears `bias`, makes every thread of the process pass a full
 * barrier (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED[_RSEQ]),
 * registered as the library loads) and waits until the owner is out:
 * the owner that stored
 * `active` before that barrier is seen inside, and one that stores it
 * after sees `bias` cleared and takes the mutex. A revocation that the
 * owner's biased takes did not pay for makes the next bias harder to get
 * (lock.c). x86-64 only
 * (stores are seen in order there); elsewhere, and without membarrier,
 * never biased.
 *
 * The owner's take is a restartable sequence (rseq(2), registered for
 * every thread by glibc): "if `bias` is mine, store `active`", which the
 * kernel restarts if the thread loses its CPU, takes a signal or meets the
 * revoker's barrier (MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) between the
 * look and the store. So a thread whose bias is gone cannot store
 * `active` over a new owner's, and the take needs no locked instruction
 * (about 1 ns against 10 for a compare-and-swap here). Without rseq (an
 * old kernel or glibc, valgrind, SOFTRNIC_LOCK_RSEQ=0) the take claims
 * `active` with a compare-and-swap instead, and the bias goes only to
 * threads of the mode the process chose at load.
 *
 * Not recursive, no owner checks, no condition variables: a lock that
 * needs one stays a pthread_mutex_t. Released by the thread that took it
 * (the bias is given, and given up, by who the thread is).
 * Process-private (FUTEX_PRIVATE): not for memory shared with another
 * process. */
#ifndef SOFTRNIC_LOCK_H
#define SOFTRNIC_LOCK_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define SR_LOCK_RSEQ 1
#endif
#endif

typedef struct {
	/* the owner's fields first, together (its take and release touch
	 * only these) */
	_Atomic uintptr_t bias;		/* the owner's sr_self(), or 0 */
	_Atomic uintptr_t active;	/* the owner's sr_self() while it holds
					 * the lock by its bias, else 0 */
	_Atomic uint32_t used;		/* takes by the bias since it was given
					 * (the owner counts) */
	_Atomic uint32_t revoking;	/* a revoker waits for the owner to
					 * leave (a futex: the owner's release
					 * wakes it) */
	_Atomic uint32_t state;		/* the mutex: 0, 1, 2 */
	uint32_t streak;		/* takes in a row by `last` (mutex held) */
	uintptr_t last;			/* (mutex held) */
	uint32_t need;			/* streak that earns the bias, less
					 * SR_BIAS_STREAK (mutex held) */
	int32_t credit;			/* biased takes less revocations' cost
					 * (lock.c; mutex held) */
	bool earned;			/* last gets the bias as it lets go of
					 * the mutex (mutex held) */
} sr_mutex;

#define SR_MUTEX_INIT { 0, 0, 0, 0, 0, 0, 0, 0, 0, false }

/* The slow halves (lock.c). */
void sr_mutex_lock_slow(sr_mutex *m, uintptr_t me);
int sr_mutex_trylock_slow(sr_mutex *m, uintptr_t me);
void sr_mutex_unlock_slow(sr_mutex *m);
void sr_mutex_revoker_wake(sr_mutex *m);

/* The process's threads pass a full barrier (lock.c): 0, or -1 when
 * membarrier is not there (then nothing is biased). */
bool sr_membar_ready(void);
int sr_membar_all(void);
/* Are locks biased in this process? (SOFTRNIC_LOCK_BIAS, membarrier) */
bool sr_lock_bias_on(void);
/* Do biased takes run as restartable sequences? (lock.c: decided as the
 * library loads, for the process's life) */
extern bool sr_lock_rseq;
/* Biased takes the kernel restarted (rseq), for the tests. */
extern uint64_t sr_lock_restarts;

/* This thread, as a number no other live thread has. */
static inline uintptr_t sr_self(void)
{
	uintptr_t t;

#if defined(__x86_64__)
	__asm__("mov %%fs:0, %0" : "=r"(t));	/* the TCB's own address */
#else
	t = 0;
#endif
	return t;
}

static inline void sr_mutex_init(sr_mutex *m)
{
	*m = (sr_mutex)SR_MUTEX_INIT;
}

static inline void sr_mutex_destroy(sr_mutex *m)
{
	(void)m;
}

#ifdef SR_LOCK_RSEQ
/* "If `bias` is me, store me in `active`", as one restartable sequence
 * (rseq(2)): 1 stored, 0 not my bias. The descriptor names the look and
 * the store; should the kernel preempt, signal or (the revoker's barrier)
 * interrupt the thread between the two, it resumes at the abort label,
 * preceded by glibc's signature (RSEQ_SIG, as an undefined instruction's
 * operand), which counts the restart and starts over. The thread's
 * rseq_cs is cleared on the way out, so that it never names this library
 * after a dlclose. */
static inline bool sr_rseq_claim(sr_mutex *m, uintptr_t me)
{
	uint64_t *cs = (uint64_t *)(me + (uintptr_t)__rseq_offset + offsetof(struct rseq, rseq_cs));

again:
	__asm__ goto(".pushsection __rseq_cs, \"aw\"\n\t"
		     ".balign 32\n\t"
		     "661:\n\t"
		     ".long 0, 0\n\t"	/* version, flags */
		     ".quad 662f, (663f - 662f), 664f\n\t"
		     ".popsection\n\t"
		     "leaq 661b(%%rip), %%rax\n\t"
		     "movq %%rax, %[cs]\n\t"
		     "662:\n\t"
		     "cmpq %[me], %[bias]\n\t"
		     "jne %l[mine_not]\n\t"
		     "movq %[me], %[active]\n\t"	/* the commit */
		     "663:\n\t"
		     ".pushsection __rseq_failure, \"ax\"\n\t"
		     ".byte 0x0f, 0xb9, 0x3d\n\t"	/* ud1 <sig>(%%rip), %%edi */
		     ".long %c[sig]\n\t"
		     "664:\n\t"
		     "lock incq %[restarts]\n\t"
		     "jmp %l[again]\n\t"
		     ".popsection"
		     :
		     : [cs] "m"(*cs), [me] "r"(me), [bias] "m"(*(uintptr_t *)&m->bias),
		       [active] "m"(*(uintptr_t *)&m->active), [sig] "i"(RSEQ_SIG),
		       [restarts] "m"(sr_lock_restarts)
		     : "memory", "cc", "rax"
		     : mine_not, again);
	*(volatile uint64_t *)cs = 0;
	return true;
mine_not:
	*(volatile uint64_t *)cs = 0;
	return false;
}
#endif

/* The owner's way in: 1 if it holds the lock now.
 *
 * A thread that read `bias` as its own and then lost its CPU may still be
 * the owner in its own eyes after the bias was revoked and given to
 * another thread, now inside; a plain store of its `active` would
 * overwrite the new owner's, and its failure path's zero would then tell
 * the next revoker nobody is inside (tests/unit/test_lock `bias_turns`:
 * two threads taking turns at full speed found each other inside within
 * seconds). So the look and the store are one restartable sequence
 * (above), or else `active` is claimed with a compare-and-swap (one
 * locked instruction per take). The release costs none either way. */
static inline bool sr_mutex_biased_take(sr_mutex *m, uintptr_t me)
{
#if defined(__x86_64__)
	uintptr_t none = 0;

	if (!me || atomic_load_explicit(&m->bias, memory_order_relaxed) != me)
		return false;
#ifdef SR_LOCK_RSEQ
	if (sr_lock_rseq) {
		if (!sr_rseq_claim(m, me))
			return false;
		/* (the revoker's barrier comes after our store, or restarted
		 * us: no second look at `bias` is needed) */
		atomic_store_explicit(&m->used,
				      atomic_load_explicit(&m->used, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		return true;
	}
#endif
	if (!atomic_compare_exchange_strong_explicit(&m->active, &none, me, memory_order_acquire,
						     memory_order_relaxed))
		return false;	/* (a thread whose bias is gone, on its way out) */
	if (__builtin_expect(atomic_load_explicit(&m->bias, memory_order_acquire) == me, 1)) {
		/* (only the owner writes it while it has the bias) */
		atomic_store_explicit(&m->used,
				      atomic_load_explicit(&m->used, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		return true;
	}
	atomic_store_explicit(&m->active, 0, memory_order_release);
	if (atomic_load_explicit(&m->revoking, memory_order_relaxed))
		sr_mutex_revoker_wake(m);
#else
	(void)m;
	(void)me;
#endif
	return false;
}

static inline void sr_mutex_lock(sr_mutex *m)
{
	uintptr_t me = sr_self();

	if (!sr_mutex_biased_take(m, me))
		sr_mutex_lock_slow(m, me);
}

/* 0 if taken, EBUSY if held (as pthread_mutex_trylock), also by this
 * thread. */
static inline int sr_mutex_trylock(sr_mutex *m)
{
	uintptr_t me = sr_self();

	if (me && atomic_load_explicit(&m->active, memory_order_relaxed) == me)
		return EBUSY;
	return sr_mutex_biased_take(m, me) ? 0 : sr_mutex_trylock_slow(m, me);
}

static inline void sr_mutex_unlock(sr_mutex *m)
{
	uintptr_t me = sr_self();

	if (me && atomic_load_explicit(&m->active, memory_order_relaxed) == me) {
		atomic_store_explicit(&m->active, 0, memory_order_release);
		/* (a revoker that stored `revoking` before its barrier is
		 * seen here if it did not see us out: lock.c) */
		if (__builtin_expect(atomic_load_explicit(&m->revoking, memory_order_relaxed), 0))
			sr_mutex_revoker_wake(m);
		return;
	}
	sr_mutex_unlock_slow(m);
}

#endif
