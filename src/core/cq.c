/* Completion queues: a ring of work completions under a mutex, arming for
 * the next (or next solicited) completion, and the ibv_cq_ex poll family.
 */
#include "core/core.h"
#include "chan/chan.h"
#include "chan/udp.h"

#include <unistd.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Ring slots: a power of two at least cqe, so free-running 32-bit
 * indices stay right across their wrap. The CQ still holds exactly cqe
 * completions (ibcq.cqe), so overflow happens where the program sized it. */
static uint32_t cq_slots(int cqe)
{
	uint32_t n = 1;

	while (n < (uint32_t)cqe)
		n <<= 1;
	return n;
}

int cq_create(struct sr_context *ctx, int cqe, struct sr_comp_channel *ch,
	      int comp_vector, struct sr_cq **out)
{
	return cq_create_pd(ctx, cqe, ch, comp_vector, NULL, out);
}

int cq_create_pd(struct sr_context *ctx, int cqe, struct sr_comp_channel *ch,
		 int comp_vector, struct sr_pd *pd, struct sr_cq **out)
{
	struct sr_cq *cq;

	if (cqe < 1 || cqe > SR_MAX_CQE)
		return -EINVAL;
	if (comp_vector < 0 || comp_vector >= ctx->vctx.context.num_comp_vectors)
		return -EINVAL;
	if (atomic_load(&ctx->ncq) >= SR_MAX_CQ)
		return -ENOMEM;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->size = cq_slots(cqe);
	cq->pd = pd;
	cq->ring = pd_buf_alloc(pd, cq->size * sizeof(*cq->ring), SR_RES_TYPE_CQ,
				&cq->ring_custom);
	if (!cq->ring) {
		free(cq);
		return -ENOMEM;
	}
	sr_mutex_init(&cq->lock);
	sr_mutex_init(&cq->poll_lock);
	cq->ibcq.context = &ctx->vctx.context;
	cq->ibcq.channel = ch ? &ch->ibch : NULL;
	cq->ibcq.cqe = cqe;
	cq->comp_vector = comp_vector;
	cq->npoll = -1;
	pthread_mutex_init(&cq->ibcq.mutex, NULL);
	pthread_cond_init(&cq->ibcq.cond, NULL);
	if (ch)
		atomic_fetch_add(&ch->refs, 1);
	if (pd)
		pd_get(pd);
	atomic_fetch_add(&ctx->ncq, 1);
	cq_init_ex_ops(cq);
	*out = cq;
	return 0;
}

int cq_destroy(struct sr_cq *cq)
{
	struct sr_context *ctx = to_ctx(cq->ibcq.context);
	struct sr_comp_channel *ch = cq->ibcq.channel ? to_chan(cq->ibcq.channel) : NULL;

	if (atomic_load(&cq->refs))
		return -EBUSY;
	/* Events still queued on the channel for this CQ go away with it;
	 * events handed out but not acknowledged are the application's to
	 * ack first (ibv_get_cq_event(3)). */
	if (ch)
		evq_remove_obj(&ch->evq, cq);
	evq_remove_obj(&ctx->async, cq);
	if (ch)
		atomic_fetch_sub(&ch->refs, 1);
	if (cq->pd)
		pd_put(cq->pd);
	atomic_fetch_sub(&ctx->ncq, 1);
	chan_tcp_cq_forget(cq);
	sr_mutex_destroy(&cq->lock);
	sr_mutex_destroy(&cq->poll_lock);
	pthread_mutex_destroy(&cq->ibcq.mutex);
	pthread_cond_destroy(&cq->ibcq.cond);
	pd_buf_free(cq->pd, cq->ring, SR_RES_TYPE_CQ, cq->ring_custom);
	free(cq);
	return 0;
}

int cq_resize(struct sr_cq *cq, int cqe)
{
	struct sr_cqe *nr, *old;
	uint32_t n, i;
	bool custom, old_custom;

	if (cqe < 1 || cqe > SR_MAX_CQE)
		return -EINVAL;
	/* The new ring is allocated outside the lock: it may come from the
	 * parent domain's allocator, which is the application's code. */
	nr = pd_buf_alloc(cq->pd, cq_slots(cqe) * sizeof(*nr), SR_RES_TYPE_CQ, &custom);
	if (!nr)
		return -ENOMEM;
	sr_mutex_lock(&cq->lock);
	n = cq->tail - cq->head;
	if ((uint32_t)cqe < n) {
		sr_mutex_unlock(&cq->lock);
		pd_buf_free(cq->pd, nr, SR_RES_TYPE_CQ, custom);
		return -EINVAL;
	}
	for (i = 0; i < n; i++)
		nr[i] = cq->ring[(cq->head + i) & (cq->size - 1)];
	old = cq->ring;
	old_custom = cq->ring_custom;
	cq->ring = nr;
	cq->ring_custom = custom;
	cq->size = cq_slots(cqe);
	cq->head = 0;
	cq->tail = n;
	cq->ibcq.cqe = cqe;
	sr_mutex_unlock(&cq->lock);
	pd_buf_free(cq->pd, old, SR_RES_TYPE_CQ, old_custom);
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cq_add(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited,
		  struct sr_qp *qp, uint32_t upto);

int cq_push(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	return cq_add(cq, wc, solicited, NULL, 0);
}

int cq_push_sq(struct sr_cq *cq, const struct ibv_wc *wc, struct sr_qp *qp, uint32_t upto)
{
	return cq_add(cq, wc, false, qp, upto);
}

void cq_forget_qp(struct sr_cq *cq, struct sr_qp *qp)
{
	sr_mutex_lock(&cq->lock);
	for (uint32_t i = cq->head; i != cq->tail; i++)
		if (cq->ring[i & (cq->size - 1)].sq_qp == qp)
			cq->ring[i & (cq->size - 1)].sq_qp = NULL;
	sr_mutex_unlock(&cq->lock);
}

void cq_clean_qp(struct sr_cq *cq, uint32_t qp_num)
{
	uint32_t w;

	sr_mutex_lock(&cq->lock);
	w = cq->head;
	for (uint32_t r = cq->head; r != cq->tail; r++) {
		struct sr_cqe *e = &cq->ring[r & (cq->size - 1)];

		if (e->wc.qp_num == qp_num)
			continue;
		if (w != r)
			cq->ring[w & (cq->size - 1)] = *e;
		w++;
	}
	cq->tail = w;
	sr_mutex_unlock(&cq->lock);
}

static inline void cqe_reap(struct sr_cqe *e)
{
	if (e->sq_qp)
		qp_sq_reaped(e->sq_qp, e->sq_upto);
}

static int cq_add(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited,
		  struct sr_qp *qp, uint32_t upto)
{
	struct sr_context *ctx = to_ctx(cq->ibcq.context);
	struct sr_comp_channel *ch = cq->ibcq.channel ? to_chan(cq->ibcq.channel) : NULL;
	bool notify = false, overflow = false;
	struct sr_cqe *e;

	sr_mutex_lock(&cq->lock);
	if (cq->tail - cq->head >= (uint32_t)cq->ibcq.cqe) {
		/* IBTA 11.4.2.1: overflow is a CQ error, reported async;
		 * IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN asked for none. Either
		 * way the completion is lost; its send slots are freed, as
		 * its poll would have freed them, so the SQ goes on. */
		overflow = !cq->overflowed && !cq->ignore_overrun;
		cq->overflowed = true;
		sr_mutex_unlock(&cq->lock);
		if (qp)
			qp_sq_reaped(qp, upto);
		if (overflow) {
			sr_warn("CQ %p overflow", (void *)cq);
			ctx_async_event(ctx, cq, IBV_EVENT_CQ_ERR);
		}
		return -ENOSPC;
	}
	e = &cq->ring[cq->tail & (cq->size - 1)];
	e->wc = *wc;
	/* (the clock only for a CQ that asked for stamps: it costs more
	 * than the rest of a completion) */
	e->ts = cq->wc_flags_ex & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
				   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) ? now_ns() : 0;
	e->sq_qp = qp;
	e->sq_upto = upto;
	cq->tail++;
	if (cq->armed == 1 || (cq->armed == 2 && (solicited || wc->status != IBV_WC_SUCCESS))) {
		cq->armed = 0;
		notify = ch != NULL;
	}
	sr_mutex_unlock(&cq->lock);
	if (notify)
		evq_push(&ch->evq, cq, 0, 0);
	return 0;
}

void cq_push_many(struct sr_cq *cq, const struct ibv_wc *wc, int n, bool solicited)
{
	struct sr_comp_channel *ch = cq->ibcq.channel ? to_chan(cq->ibcq.channel) : NULL;
	bool notify = false, overflow = false, errors = false;
	bool stamp = cq->wc_flags_ex & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
					IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
	uint64_t ts = stamp ? now_ns() : 0;
	int i;

	sr_mutex_lock(&cq->lock);
	for (i = 0; i < n; i++) {
		struct sr_cqe *e;

		if (cq->tail - cq->head >= (uint32_t)cq->ibcq.cqe) {
			/* (as in cq_add: the rest is lost, reported once) */
			overflow = !cq->overflowed && !cq->ignore_overrun;
			cq->overflowed = true;
			break;
		}
		e = &cq->ring[cq->tail & (cq->size - 1)];
		e->wc = wc[i];
		e->ts = ts;
		e->sq_qp = NULL;
		e->sq_upto = 0;
		cq->tail++;
		errors |= wc[i].status != IBV_WC_SUCCESS;
	}
	if (i && (cq->armed == 1 || (cq->armed == 2 && (solicited || errors)))) {
		cq->armed = 0;
		notify = ch != NULL;
	}
	sr_mutex_unlock(&cq->lock);
	if (overflow) {
		sr_warn("CQ %p overflow", (void *)cq);
		ctx_async_event(to_ctx(cq->ibcq.context), cq, IBV_EVENT_CQ_ERR);
	}
	if (notify)
		evq_push(&ch->evq, cq, 0, 0);
}

static bool cq_empty(struct sr_cq *cq)
{
	return cq->head == cq->tail;	/* a racy peek is fine: a hint */
}

/* An empty CQ: let the channels receive in this thread (no lock held). */
static void cq_progress(struct sr_cq *cq)
{
	struct sr_context *ctx = to_ctx(cq->ibcq.context);

	if (ctx->tcp && ctx->owner == sr_getpid())
		chan_tcp_poll(ctx, cq);
	if (ctx->udp && ctx->owner == sr_getpid())
		chan_udp_poll(ctx, cq);		/* UD datagrams (chan/udp.c) */
}

int cq_poll(struct sr_cq *cq, int n, struct ibv_wc *wc)
{
	int i = 0;

	if (n < 0)
		return -EINVAL;
	if (cq_empty(cq)) {
		cq_progress(cq);
		/* still nothing: as if polled a moment earlier, no lock */
		if (cq_empty(cq))
			return 0;
	}
	sr_mutex_lock(&cq->lock);
	while (i < n && cq->head != cq->tail) {
		struct sr_cqe *e = &cq->ring[cq->head & (cq->size - 1)];

		wc[i++] = e->wc;
		cqe_reap(e);
		cq->head++;
	}
	sr_mutex_unlock(&cq->lock);
	return i;
}

int cq_arm(struct sr_cq *cq, int solicited_only)
{
	struct sr_context *ctx = to_ctx(cq->ibcq.context);

	/* The program will sleep until an event: nobody polls any more. */
	if (ctx->tcp && ctx->owner == sr_getpid())
		chan_tcp_unpoll(ctx, cq);
	sr_mutex_lock(&cq->lock);
	/* Arming for "next" wins over "solicited" (ibv_req_notify_cq(3)). */
	if (!solicited_only)
		cq->armed = 1;
	else if (cq->armed != 1)
		cq->armed = 2;
	sr_mutex_unlock(&cq->lock);
	return 0;
}

/* ---- ibv_cq_ex: the lock is held from start_poll to end_poll ---------- */

static inline struct sr_cq *ex_cq(struct ibv_cq_ex *c) { return (struct sr_cq *)c; }

static void ex_load(struct sr_cq *cq)
{
	cq->cur = &cq->ring[cq->head & (cq->size - 1)];
	cq->ibcq.status = cq->cur->wc.status;
	cq->ibcq.wr_id = cq->cur->wc.wr_id;
	cqe_reap(cq->cur);
	cq->head++;
}

static int ex_start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
	struct sr_cq *cq = ex_cq(ibcq);

	if (attr && attr->comp_mask)
		return EINVAL;
	if (cq_empty(cq)) {
		cq_progress(cq);
		if (cq_empty(cq))
			return ENOENT;
	}
	sr_mutex_lock(&cq->lock);
	if (cq->head == cq->tail) {
		sr_mutex_unlock(&cq->lock);
		return ENOENT;
	}
	ex_load(cq);
	return 0;
}

static int ex_next_poll(struct ibv_cq_ex *ibcq)
{
	struct sr_cq *cq = ex_cq(ibcq);

	if (cq->head == cq->tail)
		return ENOENT;
	ex_load(cq);
	return 0;
}

static void ex_end_poll(struct ibv_cq_ex *ibcq)
{
	struct sr_cq *cq = ex_cq(ibcq);

	cq->cur = NULL;
	sr_mutex_unlock(&cq->lock);
}

#define CUR(ibcq) (ex_cq(ibcq)->cur->wc)
static enum ibv_wc_opcode ex_opcode(struct ibv_cq_ex *c) { return CUR(c).opcode; }
static uint32_t ex_vendor_err(struct ibv_cq_ex *c) { return CUR(c).vendor_err; }
static uint32_t ex_byte_len(struct ibv_cq_ex *c) { return CUR(c).byte_len; }
static __be32 ex_imm_data(struct ibv_cq_ex *c) { return CUR(c).imm_data; }
static uint32_t ex_qp_num(struct ibv_cq_ex *c) { return CUR(c).qp_num; }
static uint32_t ex_src_qp(struct ibv_cq_ex *c) { return CUR(c).src_qp; }
static unsigned int ex_wc_flags(struct ibv_cq_ex *c) { return CUR(c).wc_flags; }
static uint32_t ex_slid(struct ibv_cq_ex *c) { return CUR(c).slid; }
static uint8_t ex_sl(struct ibv_cq_ex *c) { return CUR(c).sl; }
static uint8_t ex_dlid_path_bits(struct ibv_cq_ex *c) { return CUR(c).dlid_path_bits; }
static uint64_t ex_ts(struct ibv_cq_ex *c) { return ex_cq(c)->cur->ts; }
static uint16_t ex_cvlan(struct ibv_cq_ex *c) { return 0; }
static uint32_t ex_flow_tag(struct ibv_cq_ex *c) { return 0; }
static void ex_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *ti)
{
	memset(ti, 0, sizeof(*ti));
}
static uint64_t ex_wallclock(struct ibv_cq_ex *c)
{
	/* The stored stamp is monotonic; convert by today's offset. */
	struct timespec m, r;

	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &r);
	return ex_cq(c)->cur->ts + ((uint64_t)r.tv_sec * 1000000000ULL + (uint64_t)r.tv_nsec) -
	       ((uint64_t)m.tv_sec * 1000000000ULL + (uint64_t)m.tv_nsec);
}

void cq_init_ex_ops(struct sr_cq *cq)
{
	struct ibv_cq_ex *x = &cq->ibcq;

	x->start_poll = ex_start_poll;
	x->next_poll = ex_next_poll;
	x->end_poll = ex_end_poll;
	x->read_opcode = ex_opcode;
	x->read_vendor_err = ex_vendor_err;
	x->read_byte_len = ex_byte_len;
	x->read_imm_data = ex_imm_data;
	x->read_qp_num = ex_qp_num;
	x->read_src_qp = ex_src_qp;
	x->read_wc_flags = ex_wc_flags;
	x->read_slid = ex_slid;
	x->read_sl = ex_sl;
	x->read_dlid_path_bits = ex_dlid_path_bits;
	x->read_completion_ts = ex_ts;
	x->read_cvlan = ex_cvlan;
	x->read_flow_tag = ex_flow_tag;
	x->read_tm_info = ex_tm_info;
	x->read_completion_wallclock_ns = ex_wallclock;
}
