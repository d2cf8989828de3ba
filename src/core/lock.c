/* sr_mutex's contended halves (lock.h): Drepper's third mutex ("Futexes
 * Are Tricky", 2011). A thread that finds the lock held marks it 2
 * ("someone may wait") and sleeps while it stays 2; the holder's release
 * sees the 2 and wakes one sleeper, which takes the lock as 2 again (it
 * cannot know whether others still sleep: at worst one wake-up too many). */
#include "core/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void sr_mutex_wait(sr_mutex *m)
{
	while (atomic_exchange_explicit(&m->state, 2, memory_order_acquire) != 0)
		/* (returns at once if it is no longer 2; EINTR: look again) */
		syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void sr_mutex_wake(sr_mutex *m)
{
	syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
