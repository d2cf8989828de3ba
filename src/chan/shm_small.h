/* The same-host channel's small messages (DESIGN.md decision 23): a whole
 * SEND or WRITE of at most SHM_SMALL_PAYLOAD bytes, with the positive
 * cumulative ACK owed before it, as one small ring record (shm_ring.h,
 * kind 4) in place of MPA FPDUs: this header, then len payload bytes.
 * Or a positive ACK alone (op SHM_SMALL_ACK: flags F_ACK, nothing else).
 * Host order (both ends are one host). The producer writes one only at a
 * message boundary of the stream; it carries exactly what the FPDUs
 * would, and both sides count the same MSNs for it. Pure code: the
 * decoder is unit-tested and fuzzed (tests/fuzz/fuzz_shm_ring.c). */
#ifndef SOFTRNIC_SHM_SMALL_H
#define SOFTRNIC_SHM_SMALL_H

#include <stddef.h>
#include <stdint.h>

struct shm_small {
	uint8_t op;			/* SHM_SMALL_SEND, _WRITE or _ACK */
	uint8_t flags;			/* SHM_SMALL_F_* */
	uint16_t len;			/* payload bytes after this header */
	uint32_t ack_msn;		/* F_ACK: the ACK, which comes first */
	uint32_t msn;			/* SEND: its DDP MSN (queue 0) */
	uint32_t word;			/* SEND: immediate data (big-endian) or
					 * the STag to invalidate; WRITE: the
					 * STag */
	uint64_t to;			/* WRITE: the tagged offset */
};
_Static_assert(sizeof(struct shm_small) == 24, "struct shm_small: 24 bytes, no padding");

#define SHM_SMALL_SEND		1
#define SHM_SMALL_WRITE		2
#define SHM_SMALL_ACK		3	/* F_ACK; len, msn, word, to 0 */
#define SHM_SMALL_F_ACK		0x01
#define SHM_SMALL_F_SE		0x02	/* SEND only */
#define SHM_SMALL_F_IMM		0x04	/* SEND only; not with INV */
#define SHM_SMALL_F_INV		0x08	/* SEND only; not with IMM */
/* the most payload bytes one carries (chan.h's SR_SMALL_MAX) */
#define SHM_SMALL_PAYLOAD	4096

/* A small message of len bytes at buf (our own copy of the record):
 * 0 and its header in *h (the payload is buf + sizeof(*h), h->len
 * bytes), or -EBADMSG if it is not one a softrnic peer writes. What it
 * says is checked against the stream's state by the caller (MSNs, a
 * message in progress). */
int shm_small_decode(const void *buf, size_t len, struct shm_small *h);

#endif
