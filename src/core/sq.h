/* What sq.c (the requester's transmission and completion) and sq_post.c
 * (posting) share. qp->lock held for all. */
#ifndef SOFTRNIC_CORE_SQ_H
#define SOFTRNIC_CORE_SQ_H

#include "core/qp.h"

/* Where a gather piece is in this process, through the QP's remembered
 * lkey span: 0 and *a, or mr_span's error (-EAGAIN: not this way). */
int sq_sge_addr(struct sr_qp *qp, const struct ibv_sge *s, uintptr_t *a);
/* Opcodes RFC 5040 has not (RFC 7306's and softrnic's own). */
bool sq_beyond_rfc5040(uint32_t op);
/* Does op need softrnic's extension messages on this channel? */
bool sq_needs_ext(struct sr_chan *ch, uint32_t op);
/* Does the channel's peer refuse op (it cannot carry it)? */
bool sq_peer_refuses(struct sr_chan *ch, uint32_t op);
/* Send the WQE w at sq_next as a small request (sq_small), noting it
 * SENT: 0, or -EAGAIN with nothing changed. */
int sq_send_small(struct sr_qp *qp, struct sr_swqe *w);

#endif
