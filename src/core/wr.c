/* The ibv_qp_ex work-request API (ibv_wr_post(3)): wr_start takes the QP
 * lock, each wr_* builds one WQE in the next free slot, wr_complete
 * transmits the batch, wr_abort drops it. A builder error is remembered and
 * reported by wr_complete, as the man page says, and nothing of the batch
 * is posted. */
#include "core/qp.h"

#include <errno.h>
#include <string.h>

static inline struct sr_qp *xqp(struct ibv_qp_ex *q) { return (struct sr_qp *)q; }

/* Every WQE is built as an ibv_send_wr first, then filled like a post:
 * one validation path for both APIs. The SGEs are set by a later call,
 * so the WR is kept in the QP until the next wr_* or wr_complete. */
struct wr_build {
	struct ibv_send_wr wr;
	struct ibv_sge sge[SR_MAX_SGE];
	bool open;
};
static __thread struct wr_build tb;

static void wr_flush_open(struct sr_qp *qp)
{
	int ret;

	if (!tb.open)
		return;
	tb.open = false;
	if (qp->wr_err)
		return;
	ret = sq_fill_locked(qp, &tb.wr);
	if (ret)
		qp->wr_err = -ret;
}

static void wr_new(struct ibv_qp_ex *ibqp, enum ibv_wr_opcode op)
{
	struct sr_qp *qp = xqp(ibqp);

	wr_flush_open(qp);
	memset(&tb.wr, 0, sizeof(tb.wr));
	tb.wr.wr_id = ibqp->wr_id;
	tb.wr.send_flags = ibqp->wr_flags;
	if ((ibqp->wr_flags & SR_SEND_REFUSED) && !qp->wr_err)
		qp->wr_err = EINVAL;	/* (ibv_wr_complete says so) */
	tb.wr.opcode = op;
	tb.wr.sg_list = tb.sge;
	tb.open = true;
}

static void x_start(struct ibv_qp_ex *ibqp)
{
	struct sr_qp *qp = xqp(ibqp);

	sr_mutex_lock(&qp->lock);
	qp->wr_begin = qp->sq_tail;
	qp->wr_err = 0;
	tb.open = false;
	if (qp->state < IBV_QPS_RTS || qp->state > IBV_QPS_ERR)
		qp->wr_err = EINVAL;
}

static int x_complete(struct ibv_qp_ex *ibqp)
{
	struct sr_qp *qp = xqp(ibqp);
	int err;

	wr_flush_open(qp);
	err = qp->wr_err;
	if (err) {
		qp->sq_tail = qp->wr_begin;	/* nothing of the batch posts */
	} else if (qp->state == IBV_QPS_ERR) {
		qp_to_error_locked(qp);
	} else {
		qp_sq_progress_locked(qp);
	}
	sr_mutex_unlock(&qp->lock);
	qp_kick(qp);
	return err;
}

static void x_abort(struct ibv_qp_ex *ibqp)
{
	struct sr_qp *qp = xqp(ibqp);

	tb.open = false;
	qp->sq_tail = qp->wr_begin;
	sr_mutex_unlock(&qp->lock);
}

static void x_send(struct ibv_qp_ex *q) { wr_new(q, IBV_WR_SEND); }
static void x_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	wr_new(q, IBV_WR_SEND_WITH_IMM);
	tb.wr.imm_data = imm;
}
static void x_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	wr_new(q, IBV_WR_SEND_WITH_INV);
	tb.wr.invalidate_rkey = rkey;
}
static void x_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	wr_new(q, IBV_WR_RDMA_WRITE);
	tb.wr.wr.rdma.rkey = rkey;
	tb.wr.wr.rdma.remote_addr = addr;
}
static void x_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_new(q, IBV_WR_RDMA_WRITE_WITH_IMM);
	tb.wr.wr.rdma.rkey = rkey;
	tb.wr.wr.rdma.remote_addr = addr;
	tb.wr.imm_data = imm;
}
static void x_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	wr_new(q, IBV_WR_RDMA_READ);
	tb.wr.wr.rdma.rkey = rkey;
	tb.wr.wr.rdma.remote_addr = addr;
}
static void x_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr,
		      uint64_t compare, uint64_t swap)
{
	wr_new(q, IBV_WR_ATOMIC_CMP_AND_SWP);
	tb.wr.wr.atomic.rkey = rkey;
	tb.wr.wr.atomic.remote_addr = addr;
	tb.wr.wr.atomic.compare_add = compare;
	tb.wr.wr.atomic.swap = swap;
}
static void x_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_new(q, IBV_WR_ATOMIC_FETCH_AND_ADD);
	tb.wr.wr.atomic.rkey = rkey;
	tb.wr.wr.atomic.remote_addr = addr;
	tb.wr.wr.atomic.compare_add = add;
}
/* IBTA 1.5 ATOMIC WRITE: the 8 bytes at atomic_wr are copied now (the
 * caller's buffer need not outlive the call), carried in the atomic
 * fields of the WR and marked as a value (sq_fill_awrite); SGEs set after
 * it are ignored. */
static void x_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *d)
{
	wr_new(q, IBV_WR_ATOMIC_WRITE);
	tb.wr.send_flags |= SR_SEND_AW_VALUE;
	tb.wr.wr.atomic.rkey = rkey;
	tb.wr.wr.atomic.remote_addr = addr;
	memcpy(&tb.wr.wr.atomic.compare_add, d, 8);
}
static void x_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	wr_new(q, IBV_WR_LOCAL_INV);
	tb.wr.invalidate_rkey = rkey;
}
static void x_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
		      const struct ibv_mw_bind_info *bi)
{
	wr_new(q, IBV_WR_BIND_MW);
	tb.wr.bind_mw.mw = mw;
	tb.wr.bind_mw.rkey = rkey;
	tb.wr.bind_mw.bind_info = *bi;
}

static void x_unsupported(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = xqp(q);

	wr_flush_open(qp);
	qp->wr_err = EOPNOTSUPP;
}
static void x_send_tso(struct ibv_qp_ex *q, void *h, uint16_t hs, uint16_t mss) { x_unsupported(q); }
static void x_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	/* ibv_wr_set_ud_addr(3): the address of the WR just started */
	if (!tb.open)
		return;
	tb.wr.wr.ud.ah = ah;
	tb.wr.wr.ud.remote_qpn = qpn;
	tb.wr.wr.ud.remote_qkey = qkey;
}
static void x_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	/* ibv_wr_set_xrc_srqn(3): the remote SRQ of the WR just started */
	if (!tb.open)
		return;
	tb.wr.qp_type.xrc.remote_srqn = srqn;
}

static void x_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
	if (!tb.open)
		return;
	tb.sge[0] = (struct ibv_sge){ .addr = addr, .length = len, .lkey = lkey };
	tb.wr.num_sge = 1;
}

static void x_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	if (!tb.open)
		return;
	if (n > SR_MAX_SGE) {
		xqp(q)->wr_err = EINVAL;
		return;
	}
	if (n)
		memcpy(tb.sge, sg, n * sizeof(*sg));
	tb.wr.num_sge = (int)n;
}

static void x_set_inline_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *b)
{
	if (!tb.open)
		return;
	if (n > SR_MAX_SGE) {
		xqp(q)->wr_err = EINVAL;
		return;
	}
	/* Inline buffers are plain memory; sq_fill copies them at once. */
	for (size_t i = 0; i < n; i++)
		tb.sge[i] = (struct ibv_sge){ .addr = (uintptr_t)b[i].addr,
					      .length = (uint32_t)b[i].length };
	tb.wr.num_sge = (int)n;
	tb.wr.send_flags |= IBV_SEND_INLINE;
}

static void x_set_inline(struct ibv_qp_ex *q, void *addr, size_t len)
{
	struct ibv_data_buf b = { .addr = addr, .length = len };

	x_set_inline_list(q, 1, &b);
}

void qp_init_wr_ops(struct sr_qp *qp)
{
	struct ibv_qp_ex *x = &qp->ibqp;

	x->comp_mask = 0;
	x->wr_start = x_start;
	x->wr_complete = x_complete;
	x->wr_abort = x_abort;
	x->wr_send = x_send;
	x->wr_send_imm = x_send_imm;
	x->wr_send_inv = x_send_inv;
	x->wr_rdma_write = x_write;
	x->wr_rdma_write_imm = x_write_imm;
	x->wr_rdma_read = x_read;
	x->wr_atomic_cmp_swp = x_cmp_swp;
	x->wr_atomic_fetch_add = x_fetch_add;
	x->wr_local_inv = x_local_inv;
	x->wr_bind_mw = x_bind_mw;
	x->wr_send_tso = x_send_tso;
	x->wr_atomic_write = x_atomic_write;
	x->wr_set_ud_addr = x_ud_addr;
	x->wr_set_xrc_srqn = x_xrc_srqn;
	x->wr_set_sge = x_set_sge;
	x->wr_set_sge_list = x_set_sge_list;
	x->wr_set_inline_data = x_set_inline;
	x->wr_set_inline_data_list = x_set_inline_list;
}
