/* The per-context progress engine (DESIGN.md decision 5): one thread that
 * sleeps in epoll_wait until a descriptor is ready or a timer is due, and
 * runs the handler registered for it. Handlers run in the progress thread
 * with no core lock held; they may take QP and channel locks.
 *
 * Started lazily (the first time something registers), so a context that
 * never talks to the network has no thread. A forked child has no progress
 * thread and never touches the parent's epoll set.
 */
#ifndef SOFTRNIC_PROGRESS_H
#define SOFTRNIC_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/util.h"

struct sr_progress;

/* A descriptor watched by the engine. */
struct sr_pollable {
	int fd;
	void (*on_event)(struct sr_pollable *p, uint32_t events);
};

/* A one-shot timer: fires once at its deadline unless cancelled first. */
struct sr_timer {
	struct sr_list link;
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC */
	bool armed;
	void (*fire)(struct sr_timer *t);
};

struct sr_progress *progress_create(void);
/* Stops the thread (waits for a running handler to return) and frees. */
void progress_destroy(struct sr_progress *pg);
int progress_add(struct sr_progress *pg, struct sr_pollable *p, uint32_t events);
int progress_mod(struct sr_progress *pg, struct sr_pollable *p, uint32_t events);
/* After del returns, the handler of p is not running and will not run. */
void progress_del(struct sr_progress *pg, struct sr_pollable *p);
void progress_timer_arm(struct sr_progress *pg, struct sr_timer *t, uint64_t delay_ns);
/* The same, unless t is armed to fire sooner already (a timer of several
 * uses: none is put off by another). */
void progress_timer_arm_by(struct sr_progress *pg, struct sr_timer *t, uint64_t delay_ns);
/* After cancel returns, t's fire() is not running and will not run. */
void progress_timer_cancel(struct sr_progress *pg, struct sr_timer *t);
/* Take t off the schedule, without waiting for a fire() already running:
 * for a caller holding a lock that fire() takes (it would wait for ever).
 * A fire() that was running goes on, and must find nothing to do. */
void progress_timer_disarm(struct sr_progress *pg, struct sr_timer *t);
/* Is the caller the progress thread itself? */
bool progress_in_thread(struct sr_progress *pg);
uint64_t progress_now_ns(void);

#endif
