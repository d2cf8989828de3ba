/* Unit tests for completion queues (src/core/cq.c), without any QP: the
 * ring, overflow, resize, arming for the next / next solicited completion
 * (ibv_req_notify_cq(3), IBTA Vol 1 §11.4.2.2) and the ibv_cq_ex poll
 * family. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct fix {
	struct sr_context *ctx;
	struct sr_comp_channel ch;
};

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	assert_true(fl >= 0);
	assert_int_equal(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f || ctx_open(dev_get(), &f->ctx))
		return -1;
	if (evq_init(&f->ch.evq))
		return -1;
	f->ch.ibch.context = &f->ctx->vctx.context;
	f->ch.ibch.fd = f->ch.evq.fd;
	f->ch.ibch.refcnt = 0;
	/* Tests read both event queues without blocking. */
	set_nonblock(f->ch.evq.fd);
	set_nonblock(f->ctx->async.fd);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	assert_int_equal(atomic_load(&f->ch.refs), 0);	/* every CQ destroyed */
	evq_destroy(&f->ch.evq);
	ctx_close(f->ctx);
	free(f);
	return 0;
}

static struct sr_cq *mk_cq(struct fix *f, int cqe, bool with_channel)
{
	struct sr_cq *cq = NULL;

	assert_int_equal(cq_create(f->ctx, cqe, with_channel ? &f->ch : NULL, 0, &cq), 0);
	assert_non_null(cq);
	return cq;
}

static struct ibv_wc wc_of(uint64_t id)
{
	struct ibv_wc wc = {
		.wr_id = id,
		.status = IBV_WC_SUCCESS,
		.opcode = IBV_WC_RECV,
		.byte_len = (uint32_t)id * 3,
		.qp_num = 0x1234,
	};
	return wc;
}

static void push_id(struct sr_cq *cq, uint64_t id)
{
	struct ibv_wc wc = wc_of(id);

	assert_int_equal(cq_push(cq, &wc, false), 0);
}

/* Poll exactly n entries, in one or more calls, and check they are ids
 * first, first+1, ... */
static void poll_ids(struct sr_cq *cq, uint64_t first, int n)
{
	struct ibv_wc wc[16];
	int got = 0;

	while (got < n) {
		int want = sr_min(n - got, (int)ARRAY_SIZE(wc));
		int r = cq_poll(cq, want, wc);

		assert_int_equal(r, want);
		for (int i = 0; i < r; i++) {
			assert_int_equal(wc[i].wr_id, first + (uint64_t)got + (uint64_t)i);
			assert_int_equal(wc[i].byte_len, (uint32_t)(first + got + i) * 3);
		}
		got += r;
	}
}

static int cq_count(struct sr_cq *cq)
{
	return (int)(cq->tail - cq->head);
}

/* How many events are queued on an evq, popping them all; each must be
 * about obj (and of type @type). */
static int drain_events(struct sr_evq *q, void *obj, int type)
{
	struct sr_ev ev;
	int n = 0, r;

	while ((r = evq_pop(q, &ev)) == 0) {
		assert_ptr_equal(ev.obj, obj);
		assert_int_equal(ev.type, type);
		n++;
	}
	assert_int_equal(r, -EAGAIN);
	return n;
}

static bool fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* ---- ring -------------------------------------------------------------- */

static void test_create_args(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = NULL;

	assert_int_equal(cq_create(f->ctx, 0, NULL, 0, &cq), -EINVAL);
	assert_int_equal(cq_create(f->ctx, -1, NULL, 0, &cq), -EINVAL);
	assert_int_equal(cq_create(f->ctx, SR_MAX_CQE + 1, NULL, 0, &cq), -EINVAL);
	assert_int_equal(cq_create(f->ctx, 4, NULL, -1, &cq), -EINVAL);
	assert_int_equal(cq_create(f->ctx, 4, NULL,
				   f->ctx->vctx.context.num_comp_vectors, &cq), -EINVAL);
	assert_null(cq);
	cq = mk_cq(f, 4, true);
	assert_int_equal(cq->ibcq.cqe, 4);
	assert_int_equal(atomic_load(&f->ch.refs), 1);
	assert_int_equal(cq_destroy(cq), 0);
	assert_int_equal(atomic_load(&f->ch.refs), 0);
}

static void test_poll_empty(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 4, false);
	struct ibv_wc wc[4];

	assert_int_equal(cq_poll(cq, 4, wc), 0);
	assert_int_equal(cq_poll(cq, 0, wc), 0);
	assert_int_equal(cq_poll(cq, -1, wc), -EINVAL);
	push_id(cq, 1);
	assert_int_equal(cq_poll(cq, 0, wc), 0);	/* n = 0 takes nothing */
	assert_int_equal(cq_poll(cq, 4, wc), 1);
	assert_int_equal(cq_poll(cq, 4, wc), 0);
	assert_int_equal(cq_destroy(cq), 0);
}

/* FIFO order through many trips around the ring, with push and poll
 * batches of varying size so the ring is entered and left at every
 * offset, including full. */
static void test_order_and_wraparound(void **state)
{
	struct fix *f = *state;
	static const int sizes[] = { 1, 5, 7, 8, 13 };

	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		int cqe = sizes[s];
		struct sr_cq *cq = mk_cq(f, cqe, false);
		uint64_t next_push = 0, next_poll = 0;

		for (int round = 0; round < 20000; round++) {
			int room = cqe - cq_count(cq);
			int np = 1 + (round * 7) % cqe, nq;

			np = sr_min(np, room);
			for (int i = 0; i < np; i++)
				push_id(cq, next_push++);
			assert_int_equal(cq_count(cq), (int)(next_push - next_poll));
			nq = 1 + (round * 5) % cqe;
			nq = sr_min(nq, cq_count(cq));
			poll_ids(cq, next_poll, nq);
			next_poll += (uint64_t)nq;
		}
		/* Fill to the brim, empty, twice more. */
		for (int k = 0; k < 2; k++) {
			poll_ids(cq, next_poll, cq_count(cq));
			next_poll = next_push;
			for (int i = 0; i < cqe; i++)
				push_id(cq, next_push++);
			poll_ids(cq, next_poll, cqe);
			next_poll = next_push;
		}
		assert_true(next_push > 20000);
		assert_false(cq->overflowed);
		assert_int_equal(cq_destroy(cq), 0);
	}
}

/* The ring indices are free-running 32-bit counters. After 2^32
 * completions they wrap; order must survive that too. Rather than
 * pushing 4 billion completions, start the (empty) ring just below the
 * wrap, which is exactly the state those completions leave behind. */
static void test_index_wrap_32bit(void **state)
{
	struct fix *f = *state;
	static const int sizes[] = { 7, 4, 5 };	/* ring slots 8, 5, 6 */
	char err[256] = "";

	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		int cqe = sizes[s];
		struct sr_cq *cq = mk_cq(f, cqe, false);
		uint64_t id = 0, polled = 0;

		cq->head = cq->tail = UINT32_MAX - 2;
		for (int round = 0; round < 4 && !err[0]; round++) {
			struct ibv_wc wc[8];

			for (int i = 0; i < cqe; i++)
				push_id(cq, id++);
			assert_int_equal(cq_poll(cq, cqe, wc), cqe);
			for (int i = 0; i < cqe && !err[0]; i++)
				if (wc[i].wr_id != polled + (uint64_t)i)
					snprintf(err, sizeof(err),
						 "cqe %d (ring of %u slots), round %d: entry %d "
						 "has wr_id %llu, want %llu (tail now %u)",
						 cqe, cq->size, round, i,
						 (unsigned long long)wc[i].wr_id,
						 (unsigned long long)(polled + (uint64_t)i), cq->tail);
			polled = id;
		}
		if (!err[0])
			assert_true(cq->tail < 100);	/* we did cross the wrap */
		assert_int_equal(cq_destroy(cq), 0);
		if (err[0])
			fail_msg("%s", err);
	}
}

/* ---- overflow ---------------------------------------------------------- */

static void test_overflow(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 4, false);
	struct ibv_wc wc = wc_of(99);
	struct sr_ev ev;

	assert_int_equal(evq_pop(&f->ctx->async, &ev), -EAGAIN);
	for (int i = 0; i < 4; i++)
		push_id(cq, (uint64_t)i);
	assert_int_equal(cq_push(cq, &wc, false), -ENOSPC);
	assert_true(fd_readable(f->ctx->async.fd));
	assert_int_equal(evq_pop(&f->ctx->async, &ev), 0);
	assert_ptr_equal(ev.obj, cq);
	assert_int_equal(ev.type, IBV_EVENT_CQ_ERR);
	/* The entries already queued are intact; the refused one is not in
	 * the ring. */
	assert_int_equal(cq_count(cq), 4);
	assert_int_equal(cq_push(cq, &wc, true), -ENOSPC);
	poll_ids(cq, 0, 4);
	assert_int_equal(cq_poll(cq, 1, &wc), 0);
	/* The CQ is in error: IBV_EVENT_CQ_ERR was reported once, not once
	 * per refused completion. */
	assert_int_equal(drain_events(&f->ctx->async, cq, IBV_EVENT_CQ_ERR), 0);
	assert_int_equal(cq_destroy(cq), 0);
}

/* IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (UCX asks for it): an overrun loses
 * the completion but raises no CQ error, and the CQ goes on. */
static void test_overflow_ignored(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 2, false);
	struct ibv_wc wc = wc_of(99);

	cq->ignore_overrun = true;
	push_id(cq, 0);
	push_id(cq, 1);
	assert_int_equal(cq_push(cq, &wc, false), -ENOSPC);
	assert_false(fd_readable(f->ctx->async.fd));
	poll_ids(cq, 0, 2);
	push_id(cq, 2);
	poll_ids(cq, 2, 1);
	assert_int_equal(drain_events(&f->ctx->async, NULL, 0), 0);
	assert_int_equal(cq_destroy(cq), 0);
}

/* cq_destroy takes the CQ's events off the async queue too: nobody can
 * be handed a pointer to a freed CQ. */
static void test_destroy_drops_async_events(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 1, false);
	struct ibv_wc wc = wc_of(1);

	push_id(cq, 0);
	assert_int_equal(cq_push(cq, &wc, false), -ENOSPC);
	assert_true(fd_readable(f->ctx->async.fd));
	assert_int_equal(cq_destroy(cq), 0);
	assert_false(fd_readable(f->ctx->async.fd));
	assert_int_equal(drain_events(&f->ctx->async, NULL, 0), 0);
}

/* ---- resize ------------------------------------------------------------ */

static void test_resize(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 4, false);
	struct ibv_wc wc = wc_of(1000);

	/* Make the queued entries straddle the end of the ring first. */
	for (int i = 0; i < 4; i++)
		push_id(cq, (uint64_t)i);
	poll_ids(cq, 0, 3);
	for (int i = 4; i < 7; i++)
		push_id(cq, (uint64_t)i);
	assert_int_equal(cq_count(cq), 4);	/* ids 3..6 */

	/* Grow: the entries stay, in order, and the new room is usable. */
	assert_int_equal(cq_resize(cq, 10), 0);
	assert_int_equal(cq->ibcq.cqe, 10);
	assert_int_equal(cq_count(cq), 4);
	for (int i = 7; i < 13; i++)
		push_id(cq, (uint64_t)i);
	assert_int_equal(cq_count(cq), 10);
	assert_int_equal(cq_push(cq, &wc, false), -ENOSPC);

	/* Shrinking below the number queued is refused and changes nothing. */
	assert_int_equal(cq_resize(cq, 9), -EINVAL);
	assert_int_equal(cq_resize(cq, 1), -EINVAL);
	assert_int_equal(cq->ibcq.cqe, 10);
	assert_int_equal(cq_count(cq), 10);

	/* Shrinking to exactly the number queued is fine. */
	poll_ids(cq, 3, 2);	/* 5..12 left: 8 */
	assert_int_equal(cq_resize(cq, 8), 0);
	assert_int_equal(cq->ibcq.cqe, 8);
	assert_int_equal(cq_push(cq, &wc, false), -ENOSPC);
	poll_ids(cq, 5, 8);

	/* Out-of-range sizes. */
	assert_int_equal(cq_resize(cq, 0), -EINVAL);
	assert_int_equal(cq_resize(cq, SR_MAX_CQE + 1), -EINVAL);
	assert_int_equal(cq->ibcq.cqe, 8);

	/* And the resized ring keeps FIFO order through wraparound. */
	for (uint64_t id = 100; id < 1100; id += 5) {
		for (uint64_t i = 0; i < 5; i++)
			push_id(cq, id + i);
		poll_ids(cq, id, 5);
	}
	assert_int_equal(cq_destroy(cq), 0);
}

/* ---- arming (ibv_req_notify_cq) -------------------------------------- */

static void test_no_event_unarmed(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);
	struct ibv_wc wc = wc_of(1);

	assert_int_equal(cq_push(cq, &wc, false), 0);
	assert_int_equal(cq_push(cq, &wc, true), 0);
	assert_false(fd_readable(f->ch.evq.fd));
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 0);
	assert_int_equal(cq_destroy(cq), 0);
}

static void test_arm_next(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);

	assert_int_equal(cq_arm(cq, 0), 0);
	assert_false(fd_readable(f->ch.evq.fd));
	push_id(cq, 1);
	assert_true(fd_readable(f->ch.evq.fd));
	/* One event per arming: the second completion raises nothing. */
	push_id(cq, 2);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	assert_false(fd_readable(f->ch.evq.fd));

	/* Re-armed, the next completion raises the next event. */
	assert_int_equal(cq_arm(cq, 0), 0);
	push_id(cq, 3);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	poll_ids(cq, 1, 3);
	assert_int_equal(cq_destroy(cq), 0);
}

static void test_arm_solicited(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);
	struct ibv_wc wc = wc_of(1);

	assert_int_equal(cq_arm(cq, 1), 0);
	/* A successful unsolicited completion does not fire... */
	assert_int_equal(cq_push(cq, &wc, false), 0);
	assert_int_equal(cq_push(cq, &wc, false), 0);
	assert_false(fd_readable(f->ch.evq.fd));
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 0);
	/* ...and does not disarm: the solicited one then fires. */
	assert_int_equal(cq_push(cq, &wc, true), 0);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	/* Fired once; solicited completions after it raise nothing. */
	assert_int_equal(cq_push(cq, &wc, true), 0);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 0);
	assert_int_equal(cq_poll(cq, 8, (struct ibv_wc[8]){ 0 }), 4);
	assert_int_equal(cq_destroy(cq), 0);
}

/* IBTA Vol 1 §11.4.2.2: an unsuccessful completion fires a
 * solicited-only arming too. */
static void test_arm_solicited_error_completion(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);
	struct ibv_wc wc = wc_of(1);

	assert_int_equal(cq_arm(cq, 1), 0);
	wc.status = IBV_WC_REM_ACCESS_ERR;
	assert_int_equal(cq_push(cq, &wc, false), 0);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);

	assert_int_equal(cq_arm(cq, 1), 0);
	wc.status = IBV_WC_WR_FLUSH_ERR;
	assert_int_equal(cq_push(cq, &wc, false), 0);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	assert_int_equal(cq_destroy(cq), 0);
}

/* Arming for "next" and for "solicited" together means "next"
 * (ibv_req_notify_cq(3)), in either order. */
static void test_arm_next_wins(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);

	assert_int_equal(cq_arm(cq, 0), 0);
	assert_int_equal(cq_arm(cq, 1), 0);
	push_id(cq, 1);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);

	assert_int_equal(cq_arm(cq, 1), 0);
	assert_int_equal(cq_arm(cq, 0), 0);
	push_id(cq, 2);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	assert_int_equal(cq_destroy(cq), 0);
}

/* Events still queued for a destroyed CQ leave the channel with it. */
static void test_destroy_drops_channel_events(void **state)
{
	struct fix *f = *state;
	struct sr_cq *a = mk_cq(f, 8, true), *b = mk_cq(f, 8, true);

	assert_int_equal(cq_arm(a, 0), 0);
	assert_int_equal(cq_arm(b, 0), 0);
	push_id(a, 1);
	push_id(b, 1);
	assert_int_equal(atomic_load(&f->ch.refs), 2);
	assert_int_equal(cq_destroy(a), 0);
	assert_int_equal(drain_events(&f->ch.evq, b, 0), 1);	/* b's only */
	assert_int_equal(cq_arm(b, 0), 0);
	push_id(b, 2);
	assert_int_equal(cq_destroy(b), 0);
	assert_false(fd_readable(f->ch.evq.fd));
}

/* ---- ibv_cq_ex poll family --------------------------------------------- */

static void test_ex_poll(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, false);
	struct ibv_cq_ex *x = &cq->ibcq;
	struct ibv_poll_cq_attr attr = { 0 };
	struct ibv_wc in[3] = {
		{ .wr_id = 0x1111, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
		  .byte_len = 4096, .imm_data = htobe32(0xcafe), .qp_num = 0x10203,
		  .src_qp = 0x40506, .wc_flags = IBV_WC_WITH_IMM, .slid = 7, .sl = 3,
		  .dlid_path_bits = 1 },
		{ .wr_id = 0x2222, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_READ,
		  .byte_len = 12, .qp_num = 0x10204 },
		{ .wr_id = 0x3333, .status = IBV_WC_REM_ACCESS_ERR, .opcode = IBV_WC_RDMA_WRITE,
		  .vendor_err = 0x42, .qp_num = 0x10205 },
	};
	uint64_t ts0;

	/* as ibv_create_cq_ex does when the stamps are asked for (without
	 * them a completion is not stamped: reading one is not allowed) */
	cq->wc_flags_ex = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	assert_int_equal(x->start_poll(x, &attr), ENOENT);
	/* start_poll returning ENOENT released the lock: pushing works. */
	for (size_t i = 0; i < ARRAY_SIZE(in); i++)
		assert_int_equal(cq_push(cq, &in[i], false), 0);

	assert_int_equal(x->start_poll(x, &attr), 0);
	assert_int_equal(x->wr_id, 0x1111);
	assert_int_equal(x->status, IBV_WC_SUCCESS);
	assert_int_equal(x->read_opcode(x), IBV_WC_RECV_RDMA_WITH_IMM);
	assert_int_equal(x->read_byte_len(x), 4096);
	assert_int_equal(be32toh(x->read_imm_data(x)), 0xcafe);
	assert_int_equal(x->read_qp_num(x), 0x10203);
	assert_int_equal(x->read_src_qp(x), 0x40506);
	assert_int_equal(x->read_wc_flags(x), IBV_WC_WITH_IMM);
	assert_int_equal(x->read_slid(x), 7);
	assert_int_equal(x->read_sl(x), 3);
	assert_int_equal(x->read_dlid_path_bits(x), 1);
	ts0 = x->read_completion_ts(x);
	assert_true(ts0 > 0);
	assert_true(x->read_completion_wallclock_ns(x) > 1500000000ULL * 1000000000ULL);

	assert_int_equal(x->next_poll(x), 0);
	assert_int_equal(x->wr_id, 0x2222);
	assert_int_equal(x->status, IBV_WC_SUCCESS);
	assert_int_equal(x->read_opcode(x), IBV_WC_RDMA_READ);
	assert_int_equal(x->read_byte_len(x), 12);
	assert_int_equal(x->read_qp_num(x), 0x10204);
	assert_true(x->read_completion_ts(x) >= ts0);

	assert_int_equal(x->next_poll(x), 0);
	assert_int_equal(x->wr_id, 0x3333);
	assert_int_equal(x->status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(x->read_vendor_err(x), 0x42);
	assert_int_equal(x->read_qp_num(x), 0x10205);

	assert_int_equal(x->next_poll(x), ENOENT);
	x->end_poll(x);

	/* Everything was consumed, and the lock is free again. */
	assert_int_equal(cq_poll(cq, 3, in), 0);
	assert_int_equal(x->start_poll(x, &attr), ENOENT);
	assert_int_equal(x->start_poll(x, NULL), ENOENT);
	push_id(cq, 1);
	assert_int_equal(cq_destroy(cq), 0);
}

/* Ending a poll early leaves the rest for the next reader, in order, for
 * the ex API and ibv_poll_cq alike. */
static void test_ex_poll_partial(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, false);
	struct ibv_cq_ex *x = &cq->ibcq;
	struct ibv_poll_cq_attr attr = { 0 };
	struct ibv_poll_cq_attr bad = { .comp_mask = 1 };

	for (uint64_t i = 0; i < 5; i++)
		push_id(cq, i);
	assert_int_equal(x->start_poll(x, &bad), EINVAL);
	assert_int_equal(x->start_poll(x, &attr), 0);
	assert_int_equal(x->wr_id, 0);
	assert_int_equal(x->next_poll(x), 0);
	assert_int_equal(x->wr_id, 1);
	assert_int_equal(x->read_byte_len(x), 3);
	x->end_poll(x);
	poll_ids(cq, 2, 1);
	assert_int_equal(x->start_poll(x, &attr), 0);
	assert_int_equal(x->wr_id, 3);
	x->end_poll(x);
	poll_ids(cq, 4, 1);
	assert_int_equal(x->start_poll(x, &attr), ENOENT);
	assert_int_equal(cq_destroy(cq), 0);
}

/* cq_push_many (a receive batch's completions): in order, one event per
 * arming for the batch (next: any; solicited: one solicited or failed
 * among them), and an overflow keeps the first ones and reports once. */
static void test_push_many(void **state)
{
	struct fix *f = *state;
	struct sr_cq *cq = mk_cq(f, 8, true);
	struct ibv_wc wc[6];
	struct sr_ev ev;

	for (int i = 0; i < 6; i++)
		wc[i] = wc_of(10 + (uint64_t)i);
	/* unarmed: no event */
	cq_push_many(cq, wc, 3, true);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 0);
	poll_ids(cq, 10, 3);
	/* armed for the next: one event for the whole batch */
	assert_int_equal(cq_arm(cq, 0), 0);
	cq_push_many(cq, wc, 3, false);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	poll_ids(cq, 10, 3);
	/* armed for solicited: a batch of unsolicited successes raises none,
	 * and leaves the arming; one with a solicited message does */
	assert_int_equal(cq_arm(cq, 1), 0);
	cq_push_many(cq, wc, 2, false);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 0);
	cq_push_many(cq, wc + 2, 2, true);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	poll_ids(cq, 10, 4);
	/* ... and so does one with a failed completion in it */
	assert_int_equal(cq_arm(cq, 1), 0);
	wc[4].status = IBV_WC_LOC_LEN_ERR;
	cq_push_many(cq, wc + 3, 3, false);
	assert_int_equal(drain_events(&f->ch.evq, cq, 0), 1);
	{
		struct ibv_wc out[3];

		assert_int_equal(cq_poll(cq, 3, out), 3);
		assert_int_equal(out[0].wr_id, 13);
		assert_int_equal(out[1].wr_id, 14);
		assert_int_equal(out[1].status, IBV_WC_LOC_LEN_ERR);
		assert_int_equal(out[2].wr_id, 15);
	}
	wc[4].status = IBV_WC_SUCCESS;
	/* overflow: 8 fit of 5 + 6; the first three of the second batch are
	 * kept, the rest lost, one CQ error */
	cq_push_many(cq, wc, 5, false);
	assert_int_equal(evq_pop(&f->ctx->async, &ev), -EAGAIN);
	cq_push_many(cq, wc, 6, false);
	assert_int_equal(cq_count(cq), 8);
	assert_int_equal(evq_pop(&f->ctx->async, &ev), 0);
	assert_ptr_equal(ev.obj, cq);
	assert_int_equal(ev.type, IBV_EVENT_CQ_ERR);
	poll_ids(cq, 10, 5);
	poll_ids(cq, 10, 3);
	assert_int_equal(cq_destroy(cq), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_create_args),
		T(test_poll_empty),
		T(test_order_and_wraparound),
		T(test_index_wrap_32bit),
		T(test_overflow),
		T(test_overflow_ignored),
		T(test_destroy_drops_async_events),
		T(test_resize),
		T(test_no_event_unarmed),
		T(test_arm_next),
		T(test_arm_solicited),
		T(test_arm_solicited_error_completion),
		T(test_arm_next_wins),
		T(test_destroy_drops_channel_events),
		T(test_ex_poll),
		T(test_ex_poll_partial),
		T(test_push_many),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
