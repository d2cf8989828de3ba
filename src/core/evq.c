/* Event queues behind a pollable descriptor; see evq.h for the contract. */
#include "core/evq.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int evq_init(struct sr_evq *q)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	q->fd = sv[0];
	q->wfd = sv[1];
	fcntl(q->wfd, F_SETFL, O_NONBLOCK);
	shutdown(q->fd, SHUT_WR);
	pthread_mutex_init(&q->lock, NULL);
	sr_list_init(&q->events);
	q->count = 0;
	return 0;
}

void evq_destroy(struct sr_evq *q)
{
	struct sr_list *pos, *tmp;

	sr_list_for_each_safe(pos, tmp, &q->events) {
		sr_list_del(pos);
		free(container_of(pos, struct sr_ev, link));
	}
	if (q->fd >= 0)
		close(q->fd);
	if (q->wfd >= 0)
		close(q->wfd);
	q->fd = q->wfd = -1;
	pthread_mutex_destroy(&q->lock);
}

/* Caller holds q->lock. Keep "one byte iff non-empty". */
static void evq_signal_locked(struct sr_evq *q)
{
	char one = 1;

	while (send(q->wfd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static void evq_unsignal_locked(struct sr_evq *q)
{
	char b;

	while (recv(q->fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EINTR)
		;
}

int evq_push(struct sr_evq *q, void *obj, int type, int port)
{
	struct sr_ev *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	ev->obj = obj;
	ev->type = type;
	ev->port = port;
	pthread_mutex_lock(&q->lock);
	if (sr_list_empty(&q->events))
		evq_signal_locked(q);
	sr_list_add_tail(&q->events, &ev->link);
	q->count++;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

bool evq_would_block(struct sr_evq *q)
{
	unsigned int n;
	int fl;

	pthread_mutex_lock(&q->lock);
	n = q->count;
	pthread_mutex_unlock(&q->lock);
	if (n)
		return false;
	fl = fcntl(q->fd, F_GETFL);
	return fl >= 0 && !(fl & O_NONBLOCK);
}

int evq_pop(struct sr_evq *q, struct sr_ev *out)
{
	return evq_pop_cb(q, out, NULL, NULL);
}

int evq_pop_cb(struct sr_evq *q, struct sr_ev *out, void (*got)(const struct sr_ev *, void *),
	       void *arg)
{
	for (;;) {
		char b;
		ssize_t n = recv(q->fd, &b, 1, MSG_PEEK);

		/* EINTR goes back to the caller, as rdma-core's read() of the
		 * event fd does: programs break a wait with a signal. */
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		pthread_mutex_lock(&q->lock);
		if (!sr_list_empty(&q->events)) {
			struct sr_ev *ev = container_of(q->events.next, struct sr_ev, link);

			sr_list_del(&ev->link);
			q->count--;
			if (sr_list_empty(&q->events))
				evq_unsignal_locked(q);
			if (got)
				got(ev, arg);
			pthread_mutex_unlock(&q->lock);
			*out = *ev;
			free(ev);
			return 0;
		}
		/* Another reader took the last event between our peek and
		 * the lock; the byte is gone with it. Wait again. */
		pthread_mutex_unlock(&q->lock);
	}
}

unsigned int evq_remove_obj(struct sr_evq *q, void *obj)
{
	struct sr_list *pos, *tmp;
	unsigned int n = 0;

	pthread_mutex_lock(&q->lock);
	sr_list_for_each_safe(pos, tmp, &q->events) {
		struct sr_ev *ev = container_of(pos, struct sr_ev, link);

		if (ev->obj != obj)
			continue;
		sr_list_del(pos);
		free(ev);
		q->count--;
		n++;
	}
	if (n && sr_list_empty(&q->events))
		evq_unsignal_locked(q);
	pthread_mutex_unlock(&q->lock);
	return n;
}
