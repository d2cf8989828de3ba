/* The datagram CM's exchange (DESIGN.md decision 18, "Datagram CM wire
 * format"): what rdma_connect on an RDMA_PS_UDP/IPOIB id sends to the
 * listener's UDP port, and what rdma_accept/rdma_reject answer, as the IB
 * CM's SIDR REQ and SIDR REP do. Pure functions over byte buffers, no
 * I/O: unit-tested (tests/unit/test_cm_sidr.c).
 */
#ifndef SOFTRNIC_CM_SIDR_H
#define SOFTRNIC_CM_SIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SIDR_MAGIC	0x5343		/* "SC" */
#define SIDR_VERSION	1
#define SIDR_HDR_LEN	20
#define SIDR_REQ	1
#define SIDR_REP	2

/* Private data limits, as rdma_cm's over the IB CM: a SIDR REQ leaves 180
 * bytes after rdma_cm's 36-byte header, a SIDR REP 136. */
#define SIDR_REQ_PD_MAX	180
#define SIDR_REP_PD_MAX	136
#define SIDR_FRAME_MAX	(SIDR_HDR_LEN + SIDR_REQ_PD_MAX)

/* SIDR REP status (IBTA Vol 1 §12.11.1, the kernel's ib_cm_sidr_status);
 * an UNREACHABLE event carries it as its status. */
#define SIDR_SUCCESS		0
#define SIDR_UNSUPPORTED	1	/* nobody listens there */
#define SIDR_REJECT		2	/* rdma_reject */

#define SIDR_QPN_MAX	0xffffffU

struct sidr_msg {
	uint8_t type;		/* SIDR_REQ or SIDR_REP */
	uint8_t status;		/* REP only */
	uint32_t tid;		/* the requester's transaction id */
	uint32_t qpn;		/* REQ: the requester's QP; REP: the answering QP */
	uint32_t qkey;
	const uint8_t *pd;	/* into the decoded buffer */
	uint8_t pd_len;
};

/* Encode m into buf: the frame's length, or -EINVAL (private data over
 * the type's limit, QPN over 24 bits, unknown type or status) or
 * -ENOSPC. */
ssize_t sidr_encode(uint8_t *buf, size_t cap, const struct sidr_msg *m);

/* Decode a datagram of exactly len bytes: 0, or -EBADMSG for anything
 * malformed (short, long, other magic or version, unknown type, status
 * in a REQ or unknown in a REP, reserved bits, QPN over 24 bits, a
 * length byte that disagrees with the size, private data over the
 * type's limit). */
int sidr_decode(const uint8_t *buf, size_t len, struct sidr_msg *m);

#endif
