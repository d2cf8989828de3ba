/* Raw packet QPs, flow steering, receive WQs and RSS (DESIGN.md decision
 * 20; ibv_create_qp(3) IBV_QPT_RAW_PACKET, ibv_create_flow(3),
 * ibv_create_wq(3), ibv_create_rwq_ind_table(3)).
 *
 * A raw packet QP's send WQE is one whole Ethernet frame; its receives
 * get whole frames. Between them sits the port switch (core/flow.c), one
 * per process: a sent frame is offered to every flow rule of the process,
 * and the QPs whose rules take it receive a copy. A QP without a rule
 * receives nothing, as on a NIC. An RSS QP (created with rx_hash_conf and
 * an indirection table) has no queues of its own: the Toeplitz hash of
 * the frame picks one WQ of its table, and the frame completes on that
 * WQ's CQ.
 */
#ifndef SOFTRNIC_RAW_H
#define SOFTRNIC_RAW_H

#include "core/qp.h"
#include "wire/eth.h"

/* A frame is at most the port MTU plus its Ethernet header and one VLAN
 * tag; at least the Ethernet header. */
#define SR_RAW_MAX_FRAME	(4096 + ETH_HDR_LEN + ETH_VLAN_LEN)
#define SR_MAX_FLOWS		4096	/* per process */
#define SR_MAX_WQ		4096	/* per context */
#define SR_MAX_IND_TBL_LOG	8	/* at most 256 entries */
#define SR_MAX_FLOW_SPECS	8

/* ---- receive WQs and indirection tables (core/wq.c) --------------------- */
struct sr_wq {
	struct ibv_wq ibwq;		/* ibwq.state is the WQ's state */
	struct sr_context *ctx;
	struct sr_pd *pd;
	struct sr_cq *cq;
	pthread_mutex_t lock;		/* rq and state */
	struct sr_rq rq;
	uint32_t max_wr;
	atomic_int refs;		/* indirection tables naming it */
};
static inline struct sr_wq *to_wq(struct ibv_wq *w) { return (struct sr_wq *)w; }

struct sr_ind_tbl {
	struct ibv_rwq_ind_table ibtbl;
	uint32_t size;			/* power of two */
	atomic_int refs;		/* RSS QPs using it */
	struct sr_wq *wqs[];
};
static inline struct sr_ind_tbl *to_ind_tbl(struct ibv_rwq_ind_table *t)
{
	return (struct sr_ind_tbl *)t;
}

int wq_create(struct sr_context *ctx, struct ibv_wq_init_attr *a, struct sr_wq **out);
int wq_modify(struct sr_wq *wq, const struct ibv_wq_attr *a);
int wq_destroy(struct sr_wq *wq);
int wq_post_recv(struct sr_wq *wq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* One frame for the WQ: completes on its CQ if it is ready and has a
 * receive posted, else is dropped. */
void wq_rx(struct sr_wq *wq, const uint8_t *frame, uint32_t len);
int ind_tbl_create(struct sr_context *ctx, struct ibv_rwq_ind_table_init_attr *a,
		   struct sr_ind_tbl **out);
int ind_tbl_destroy(struct sr_ind_tbl *t);

/* ---- raw packet QPs (core/raw.c) ---------------------------------------- */
struct sr_raw_qp {
	struct sr_ind_tbl *tbl;		/* RSS QP: steers into these WQs */
	uint8_t key[ETH_RSS_KEY_LEN];
	uint32_t hash_fields;		/* ETH_RSS_* */
	atomic_int nflows;		/* flows attached: destroy is EBUSY */
	bool uplink;			/* frames also leave on SOFTRNIC_RAW_IF
					 * (chan/packet.h) */
	pthread_mutex_t tx_lock;	/* one thread hands frames to the
					 * switch at a time, in post order */
	struct sr_list outbox;		/* frames sent, not yet switched
					 * (sr_msg, under qp->lock) */
};

/* Does the process have CAP_NET_RAW (in its network namespace)? A raw
 * packet QP and a flow need it, as with the kernel's uverbs. */
bool raw_cap_net_raw(void);
/* qp_create for IBV_QPT_RAW_PACKET: checks (EPERM, RSS attributes) and
 * the raw state; qp->raw is set on success. */
int raw_qp_init(struct sr_qp *qp, struct ibv_qp_init_attr_ex *a);
/* Checks for attributes before anything is allocated. */
int raw_qp_check(struct ibv_qp_init_attr_ex *a);
static inline bool raw_qp_is_rss(const struct sr_qp *qp)
{
	return qp->raw && qp->raw->tbl;
}
/* Destroy: -EBUSY while flows are attached; else frees the raw state. */
int raw_qp_destroy_check(struct sr_qp *qp);
void raw_qp_fini(struct sr_qp *qp);
/* Post: the raw half of sq_fill (opcode, frame size). qp->lock held. */
int raw_sq_fill_locked(struct sr_qp *qp, struct sr_swqe *w, const struct ibv_send_wr *wr);
/* Transmit: gather each posted frame, complete its WQE. qp->lock held. */
void raw_sq_progress_locked(struct sr_qp *qp);
/* After unlocking: hand the gathered frames to the port switch. */
void raw_tx_flush(struct sr_qp *qp);
/* One frame the switch gave this QP (RSS: to one of its WQs). */
void raw_qp_rx(struct sr_qp *qp, const uint8_t *frame, uint32_t len, const struct eth_info *f);
/* Scatter a frame over a receive WQE and complete it on cq as
 * qp_num. Caller holds the lock of the queue r came from. */
void raw_complete(struct sr_context *ctx, struct sr_pd *pd, struct sr_cq *cq,
		  const struct sr_rwqe *r, const uint8_t *frame, uint32_t len,
		  uint32_t qp_num);

/* ---- flow rules and the port switch (core/flow.c) ----------------------- */
struct sr_flow;
int flow_create(struct sr_qp *qp, const struct ibv_flow_attr *attr, struct sr_flow **out);
int flow_destroy(struct sr_flow *fl);
struct ibv_flow *flow_ib(struct sr_flow *fl);
struct sr_flow *to_flow(struct ibv_flow *f);
/* Offer one frame to every rule of the process. */
void raw_switch(const uint8_t *frame, uint32_t len);

#endif
