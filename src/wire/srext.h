/* softrnic's own RDMAP messages, sent only where both ends of a stream are
 * softrnic (the MPA exchange says so, see chan/tcp.c). They use opcodes
 * RFC 5040/7306 leave reserved (0xc..0xf) and an untagged header laid out
 * like RFC 5041's, on queue 4, which no RFC message uses. A peer that is
 * not softrnic never sees them. */
#ifndef SOFTRNIC_SREXT_H
#define SOFTRNIC_SREXT_H

#include "wire/iwarp.h"

enum sr_ext_opcode {
	SR_EXT_SEND_IMM = 0xc,		/* SEND with immediate (IB semantics): QN 0,
					 * imm_data in RsvdULP */
	SR_EXT_SEND_SE_IMM = 0xd,
	SR_EXT_ACK = 0xe,		/* QN 4, MSN = request msn, MO = status */
	SR_EXT_RNR = 0xf,		/* QN 4, MSN = request msn, MO = RNR timer */
};
#define SR_EXT_QN 4
/* The XRC header (DESIGN.md "softrnic's extension messages"): opcode
 * SR_EXT_ACK on queue 5, MSN 0, MO = the XRC SRQ number (24 bits) that
 * the requests after it, until the next one, are for. */
#define SR_EXT_QN_XRC 5
/* IBTA 1.5 ATOMIC WRITE (DESIGN.md "Extension messages on the wire"):
 * opcode SR_EXT_ACK on queue 6, MSN = request msn, MO 0, RsvdULP = the
 * STag; one FPDU (L set) whose body is SR_AWRITE_LEN bytes: the TO, big
 * endian, then the 8 bytes to write, as they are to land. Answered by an
 * ACK like a WRITE. */
#define SR_EXT_QN_AWRITE 6
#define SR_AWRITE_LEN 16
struct sr_awrite {
	uint64_t to;
	uint8_t data[8];
};

static inline bool sr_ext_opcode(uint8_t op)
{
	return op >= SR_EXT_SEND_IMM && op <= SR_EXT_RNR;
}

/* Same conventions as ddp_hdr_encode/decode; h->opcode is an
 * sr_ext_opcode, h->inv_stag carries the immediate for SEND_IMM and the
 * STag for an atomic write. */
ssize_t sr_ext_hdr_encode(uint8_t *buf, size_t cap, const struct ddp_hdr *h);
ssize_t sr_ext_hdr_decode(const uint8_t *buf, size_t len, struct ddp_hdr *h);
/* The body of an atomic write; the decoder wants exactly SR_AWRITE_LEN
 * bytes (-EBADMSG otherwise) and an 8-byte aligned TO is the responder's
 * business, not the decoder's (a misaligned one is a verdict, not a
 * malformed frame). */
ssize_t sr_awrite_encode(uint8_t *buf, size_t cap, const struct sr_awrite *a);
ssize_t sr_awrite_decode(const uint8_t *buf, size_t len, struct sr_awrite *a);

/* The hello softrnic puts in the MPA private data of a connection made
 * for QPs connected by hand (no RDMA CM): who talks to whom. */
#define SR_HELLO_MAGIC		0x53524e43	/* "SRNC" */
#define SR_HELLO_LEN		16
#define SR_HELLO_F_EXT		1		/* speaks the messages above */
struct sr_hello {
	uint8_t version;
	uint8_t flags;
	uint32_t src_qpn, dst_qpn;
};
ssize_t sr_hello_encode(uint8_t *buf, size_t cap, const struct sr_hello *h);
ssize_t sr_hello_decode(const uint8_t *buf, size_t len, struct sr_hello *h);

#endif
