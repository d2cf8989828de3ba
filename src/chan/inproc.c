/* The in-process channel: both QPs live in this process.
 *
 * Each end queues the messages it sends; a kick drains both directions,
 * delivering each message to the receiving QP in the kicking thread. One
 * drainer at a time per pair keeps messages in order and means the core is
 * never re-entered: a response produced while delivering is queued and
 * picked up by the same drain loop. Nothing is held while the core runs
 * except the pair's "delivering to end i" mark, which close() waits out.
 */
#include "chan/chan.h"
#include "core/qp.h"

#include <errno.h>
#include <stdlib.h>

struct inproc_pair;

struct inproc_end {
	struct sr_chan ch;
	struct inproc_pair *pair;
	int idx;
	struct sr_qp *qp;		/* NULL once closed */
	struct sr_list outq;		/* messages towards the other end */
	bool delivering;
};

struct inproc_pair {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct inproc_end end[2];
	bool draining;
	int alive;			/* ends not yet freed */
};

static inline struct inproc_end *to_end(struct sr_chan *ch)
{
	return container_of(ch, struct inproc_end, ch);
}

static void drop_queue(struct sr_list *q)
{
	while (!sr_list_empty(q)) {
		struct sr_msg *m = container_of(q->next, struct sr_msg, link);

		sr_list_del(&m->link);
		msg_free(m);
	}
}

static int inproc_send(struct sr_chan *ch, struct sr_msg *m)
{
	struct inproc_end *e = to_end(ch);
	struct inproc_pair *p = e->pair;

	pthread_mutex_lock(&p->lock);
	if (!p->end[!e->idx].qp) {
		pthread_mutex_unlock(&p->lock);
		msg_free(m);
		return -ENOTCONN;
	}
	sr_list_add_tail(&e->outq, &m->link);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static void inproc_kick(struct sr_chan *ch)
{
	struct inproc_pair *p = to_end(ch)->pair;

	pthread_mutex_lock(&p->lock);
	if (p->draining) {
		/* The active drainer re-checks both queues before it stops. */
		pthread_mutex_unlock(&p->lock);
		return;
	}
	p->draining = true;
	for (;;) {
		struct inproc_end *from = NULL, *to;
		struct sr_msg *m;
		struct sr_qp *qp;

		for (int i = 0; i < 2; i++) {
			if (!sr_list_empty(&p->end[i].outq)) {
				from = &p->end[i];
				break;
			}
		}
		if (!from)
			break;
		m = container_of(from->outq.next, struct sr_msg, link);
		sr_list_del(&m->link);
		to = &p->end[!from->idx];
		qp = to->qp;
		if (!qp) {
			msg_free(m);
			continue;
		}
		to->delivering = true;
		pthread_mutex_unlock(&p->lock);
		if (!qp_rx(qp, m))
			msg_free(m);
		pthread_mutex_lock(&p->lock);
		to->delivering = false;
		pthread_cond_broadcast(&p->cond);
	}
	p->draining = false;
	pthread_mutex_unlock(&p->lock);
}

static void inproc_close(struct sr_chan *ch)
{
	struct inproc_end *e = to_end(ch);
	struct inproc_pair *p = e->pair;
	struct inproc_end *other = &p->end[!e->idx];
	struct sr_qp *me, *peer = NULL;
	bool self;

	pthread_mutex_lock(&p->lock);
	me = e->qp;
	e->qp = NULL;
	self = other->qp == me;
	if (self)
		other->qp = NULL;
	while (e->delivering || (self && other->delivering))
		pthread_cond_wait(&p->cond, &p->lock);
	drop_queue(&e->outq);
	if (other->qp) {
		peer = other->qp;
		qp_get(peer);
	}
	pthread_mutex_unlock(&p->lock);
	if (self)
		chan_put(&other->ch);
	/* An orderly destroy or reset of this end: to the peer, as on IB,
	 * nothing happens until it needs this QP again. */
	if (peer) {
		qp_chan_gone(peer);
		qp_put(peer);
	}
	chan_put(ch);
}

static void inproc_free(struct sr_chan *ch)
{
	struct inproc_end *e = to_end(ch);
	struct inproc_pair *p = e->pair;
	bool last;

	pthread_mutex_lock(&p->lock);
	drop_queue(&e->outq);
	last = --p->alive == 0;
	pthread_mutex_unlock(&p->lock);
	if (last) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->cond);
		free(p);
	}
}

static const struct sr_chan_ops inproc_ops = {
	.name = "inproc",
	.send = inproc_send,
	.kick = inproc_kick,
	.close = inproc_close,
	.free = inproc_free,
};

int chan_inproc_connect(struct sr_qp *a, struct sr_qp *b)
{
	struct inproc_pair *p = calloc(1, sizeof(*p));
	struct sr_qp *qps[2] = { a, b };

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->alive = 2;
	for (int i = 0; i < 2; i++) {
		struct inproc_end *e = &p->end[i];

		e->ch.ops = &inproc_ops;
		e->ch.acks = true;
		atomic_init(&e->ch.refs, 1);
		e->pair = p;
		e->idx = i;
		e->qp = qps[i];
		sr_list_init(&e->outq);
	}
	/* A QP connected to itself uses one end for both directions. */
	sr_mutex_lock(&a->lock);
	a->chan = &p->end[0].ch;
	sr_mutex_unlock(&a->lock);
	if (a == b) {
		/* Loopback: end 1 is never attached; close() of end 0
		 * releases it. */
	} else {
		sr_mutex_lock(&b->lock);
		b->chan = &p->end[1].ch;
		sr_mutex_unlock(&b->lock);
	}
	return 0;
}
