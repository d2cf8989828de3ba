/* The pure parts of the connection manager (cm_mpa.c): the MPA frames a
 * CM connection starts with, what the IB/iWARP CMs allow as private data,
 * IRD/ORD rules, and event names. No I/O, no state: unit-tested in
 * tests/unit/test_cm_mpa.c.
 */
#ifndef SOFTRNIC_CM_MPA_H
#define SOFTRNIC_CM_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/iwarp.h"

/* The longest MPA request/reply/reject softrnic reads or writes. */
#define CM_MPA_FRAME_MAX	(MPA_FRAME_HDR_LEN + MPA_MAX_PD)

/* IB reject reasons REJECTED events carry (IBTA Vol 1 §12.6.7.2, the
 * kernel's ib_cm_rej_reason): what rdma_cm reports on RoCE/IB. */
#define CM_REJ_INVALID_SERVICE_ID	8	/* nobody listens */
#define CM_REJ_CONSUMER_DEFINED		28	/* rdma_reject */
#define CM_REJ_VENDOR_OPTION_NOT_SUPPORTED 35	/* rdma_reject_ece */

enum cm_pd_kind { CM_PD_REQ, CM_PD_REP, CM_PD_REJ };

/* How much private data rdma_connect/accept/reject may carry: on RoCE/IB
 * what the IB CM's REQ/REP/REJ leave after rdma_cm's 36-byte header for
 * REQ (56, 196, 148 bytes); on iWARP what MPA leaves after the enhanced
 * IRD/ORD word (508). */
int cm_pd_limit(bool iwarp, enum cm_pd_kind kind);

/* One connection-setup frame: a request (reply false), a reply, or a
 * reject (a reply with R set). ext sets softrnic's flag; ece marks a
 * softrnic reject as rdma_reject_ece's. Always MPA rev 2, enhanced
 * (RFC 6581), no markers, no P2P. -EINVAL for private data over 508. */
ssize_t cm_mpa_encode(uint8_t *buf, size_t cap, bool reply, bool reject, bool crc,
		      bool ext, bool ece, uint16_t ird, uint16_t ord,
		      const void *pd, size_t pd_len);
/* The same at revision rev: a responder answers in the request's revision
 * (RFC 5044 §7.1, RFC 6581 §3). Rev 1 carries no IRD/ORD word and none
 * of softrnic's flags (ext, ece are ignored). rtr non-zero (enum
 * mpa_rtr_flags) sets the P2P bit and those RTR bits: a reply that agrees
 * to peer-to-peer mode carries the one RTR type it picked (rev 2 only). */
ssize_t cm_mpa_encode_rev(uint8_t *buf, size_t cap, uint8_t rev, bool reply, bool reject,
			  bool crc, bool ext, bool ece, uint16_t ird, uint16_t ord,
			  uint8_t rtr, const void *pd, size_t pd_len);
/* A responder's choice among the RTR types a peer-to-peer request offers
 * (RFC 6581 §3: exactly one): zero-length WRITE, else READ, else SEND;
 * WRITE when the request offers none. */
uint8_t cm_mpa_rtr_pick(uint8_t offered);

/* How many bytes the frame starting at buf takes in all, given the len
 * read so far: the header length until the header is in, then header +
 * PD_Length (so the reader never reads past the frame). A PD_Length over
 * 512 gives CM_MPA_FRAME_MAX + 1: the decoder rejects it. */
size_t cm_mpa_need(const uint8_t *buf, size_t len);

/* responder_resources / initiator_depth as rdma_connect/accept take them:
 * RDMA_MAX_RESP_RES (0xff) asks for the device maximum; more than the
 * maximum otherwise is -EINVAL. */
int cm_depth(uint8_t want, uint8_t max);

/* rdma_event_str(3): names for every event, "UNKNOWN EVENT" otherwise. */
const char *cm_event_name(int event);

#endif
