/* evq: a queue of events behind a pollable file descriptor.
 *
 * Completion channels and the async event queue are real file descriptors
 * (DESIGN.md decision 5): programs poll() them, set O_NONBLOCK on them and
 * block in read. The fd is one end of a stream socketpair that holds one
 * byte exactly while the queue is non-empty (level-triggered, under the
 * queue lock), so poll() says readable iff events are pending, however
 * many there are. A consumer waits with recv(MSG_PEEK) (blocking or not, as
 * the application set the fd), pops one event under the lock, and takes
 * the byte back (MSG_DONTWAIT) when the queue becomes empty. Removing
 * events (a CQ being destroyed) does the same.
 */
#ifndef SOFTRNIC_EVQ_H
#define SOFTRNIC_EVQ_H

#include <pthread.h>
#include <stdbool.h>
#include "core/util.h"

struct sr_ev {
	struct sr_list link;
	void *obj;		/* what the event is about (CQ, QP, SRQ, ...) */
	int type;		/* enum ibv_event_type for async events */
	int port;
};

struct sr_evq {
	int fd;		/* the application's end */
	int wfd;	/* our end, non-blocking */
	pthread_mutex_t lock;
	struct sr_list events;
	unsigned int count;
};

int evq_init(struct sr_evq *q);
void evq_destroy(struct sr_evq *q);
/* Queue one event; returns -ENOMEM if it cannot be recorded. */
int evq_push(struct sr_evq *q, void *obj, int type, int port);
/* Take one event, blocking unless the fd is O_NONBLOCK: 0 or -errno
 * (-EAGAIN when non-blocking and empty, -EINTR when a signal came). */
int evq_pop(struct sr_evq *q, struct sr_ev *out);
/* evq_pop, calling got(event, arg) under the queue's lock once the event
 * is taken: whoever removes an object's events (evq_remove_obj) before
 * it waits for the object's events to be acknowledged then either finds
 * the event still queued or sees what got counted, never neither. */
int evq_pop_cb(struct sr_evq *q, struct sr_ev *out, void (*got)(const struct sr_ev *, void *),
	       void *arg);
/* Would evq_pop block now: nothing queued, and the application left its
 * descriptor blocking? (A hint: an event may come right after.) */
bool evq_would_block(struct sr_evq *q);
/* Drop every event whose obj is @obj; returns how many. */
unsigned int evq_remove_obj(struct sr_evq *q, void *obj);

#endif
