/* sr_msg: one RDMAP message as the core sees it, before any wire encoding.
 *
 * Each request carries the requester's message sequence number (msn); the
 * responder answers every request, in order, with a response naming that
 * msn (ACK for SEND/WRITE, READ_RESP, ATOMIC_RESP) or with TERMINATE. The
 * ops map one-to-one onto RDMAP opcodes (RFC 5040 §4.3, RFC 7306 §8); ACK
 * and RNR are softrnic-to-softrnic additions, negotiated per channel, which
 * let a requester report the responder's verdict in the completion as IB
 * hardware does. An ACK with status OK is cumulative: it settles every SEND
 * and WRITE up to its msn. A WRITE with immediate is two requests, WRITE
 * then IMM (as RFC 7306 carries it), so one WQE may span two msns.
 */
#ifndef SOFTRNIC_MSG_H
#define SOFTRNIC_MSG_H

#include <stdint.h>
#include "core/util.h"

#include <sys/uio.h>

#define SR_MSG_SRC_MAX 32	/* = SR_MAX_SGE */

enum sr_msg_op {
	SR_MSG_WRITE,
	SR_MSG_READ_REQ,
	SR_MSG_READ_RESP,
	SR_MSG_SEND,
	SR_MSG_TERMINATE,
	SR_MSG_ATOMIC_REQ,
	SR_MSG_ATOMIC_RESP,
	SR_MSG_ACK,
	SR_MSG_IMM,		/* RFC 7306 Immediate Data, after a WRITE */
	SR_MSG_RNR,		/* responder parked a request: no receive WQE */
	/* XRC header (IBTA's XRCETH, said once instead of per packet): the
	 * requests that follow, until the next one, are for the XRC SRQ
	 * numbered srqn. Not a request: no msn, no answer. */
	SR_MSG_XRC,
	/* IBTA 1.5 ATOMIC WRITE: the 8 bytes in add_swap (as they are to
	 * land, not a number) stored at (stag, to) in one piece; answered by
	 * an ACK, like a WRITE. Softrnic peers only (srext.h). */
	SR_MSG_ATOMIC_WRITE,
	SR_MSG_OP_MAX,
};
extern const char *const sr_msg_op_name[SR_MSG_OP_MAX];

enum sr_msg_flags {
	SR_MSGF_SE = 1 << 0,		/* solicited event */
	SR_MSGF_IMM = 1 << 1,		/* carries immediate data */
	SR_MSGF_INV = 1 << 2,		/* SEND with invalidate: inv_stag */
	/* WRITE and READ_RESP may arrive a segment at a time (a TCP stream
	 * delivers FPDUs): MORE marks all but the last; "to" is where the
	 * segment goes (READ_RESP: its offset in the read). */
	SR_MSGF_MORE = 1 << 3,
	/* The channel already placed the payload (placed bytes) through
	 * qp_place_write / qp_place_read, or failed to (PLACE_ERR). */
	SR_MSGF_PLACED = 1 << 4,
	SR_MSGF_PLACE_ERR = 1 << 5,
	/* SEND placed into rwqe (qp_place_send) overflowed it */
	SR_MSGF_TOO_LONG = 1 << 6,
	/* sending from msg->src hit a bad page: the rest went as zeros and
	 * the WQE fails with IBV_WC_LOC_PROT_ERR (qp_tx_fault) */
	SR_MSGF_TX_FAULT = 1 << 7,
	/* no answer will come (UC, plain iWARP): the WQE is complete once
	 * this message has been written to the stream (qp_tx_written) */
	SR_MSGF_DONE_ON_TX = 1 << 8,
};

/* Verdicts a responder returns (ACK, TERMINATE). */
enum sr_status {
	SR_ST_OK = 0,
	SR_ST_REM_ACCESS,	/* key, PD, bounds or access right */
	SR_ST_REM_INV_REQ,	/* malformed, or receive buffer too small */
	SR_ST_REM_OP,		/* responder could not complete the op */
	SR_ST_RNR,		/* no receive WQE (not used as a verdict yet) */
	SR_ST_FATAL,		/* stream lost */
	SR_ST_BYE = 0xff,	/* ACK status on the wire only: the peer QP is
				 * being destroyed in an orderly way */
	/* ACK statuses on the wire only, with a body: the same-host
	 * channel's switch (chan/shm.h) */
	SR_ST_SHM_OFFER = 0xfe,
	SR_ST_SHM_ACCEPT = 0xfd,
	SR_ST_SHM_REFUSE = 0xfc,
	SR_ST_SHM_SWITCH = 0xfb,
};

/* A TERMINATE that cannot name its request is about the oldest one. */
#define SR_MSN_OLDEST UINT32_MAX

struct sr_msg {
	struct sr_list link;
	uint8_t op;
	uint16_t flags;
	uint8_t status;			/* ACK, TERMINATE */
	uint8_t atomic_op;		/* SR_ATOMIC_* */
	uint8_t small;			/* from msg.c's cache: 1 + its class (msg_free) */
	uint32_t msn;
	uint32_t stag;			/* WRITE/READ_REQ/ATOMIC: remote key */
	uint64_t to;			/* ... and remote address */
	uint32_t imm;			/* network order, as the application gave */
	uint32_t inv_stag;
	uint32_t rd_len;		/* READ_REQ: bytes asked for */
	uint32_t srqn;			/* XRC: the SRQ number */
	uint64_t add_swap, compare;	/* ATOMIC_REQ; add_swap: ATOMIC_WRITE */
	uint64_t orig;			/* ATOMIC_RESP */
	uint32_t placed;		/* SR_MSGF_PLACED: bytes placed */
	struct sr_rwqe *rwqe;		/* SEND placed directly: its receive
					 * WQE (owned, from msg_rwqe_alloc;
					 * freed with the msg) */
	uint32_t lent_gen;		/* ... lent as the QP's lent_gen was */
	/* Payload by reference (zero copy): len bytes in the application's
	 * registered memory, kept busy (refs) until the message is freed. */
	struct sr_msg_src *src;
	uint32_t len;			/* payload bytes */
	uint8_t payload[];
};

struct sr_rwqe;
struct sr_mref;

struct sr_msg_src {
	int n;
	struct iovec iov[SR_MSG_SRC_MAX];
	struct sr_mref_slot { uintptr_t addr; void *users; } refs[SR_MSG_SRC_MAX];
};

struct sr_msg *msg_alloc(uint32_t payload_len);
void msg_free(struct sr_msg *m);
/* Room for len payload bytes (len >= m->len; the payload kept): m
 * itself or a new block (m is then gone), NULL if out of memory (m
 * unchanged). Never realloc a message directly: it may be cached. */
struct sr_msg *msg_grow(struct sr_msg *m, uint32_t len);
/* Room for a receive WQE of size bytes (at most SR_MAX_SGE SGEs), for
 * msg->rwqe; NULL if larger or out of memory. */
struct sr_rwqe *msg_rwqe_alloc(size_t size);

#endif
