/* iWARP on the wire: MPA (RFC 5044, RFC 6581), DDP (RFC 5041), RDMAP
 * (RFC 5040, RFC 7306). Pure encode/decode functions over byte buffers:
 * no I/O, no allocation, no global state (DESIGN.md, src/wire/). Every
 * decoder bounds-checks what it reads and is fuzzed (tests/fuzz/).
 *
 * Decoders return the number of bytes consumed (> 0), -EAGAIN if the
 * buffer is too short to decide, or -EBADMSG (-EPROTO for a known but
 * unsupported feature) if the bytes are not a valid frame.
 * Encoders return the number of bytes written, or -ENOSPC if cap is
 * too small, or -EINVAL for values that cannot be encoded.
 *
 * Every multi-byte field is big-endian on the wire, except the MPA CRC
 * (see mpa_crc_put()). Reserved bits are written as zero and ignored on
 * receipt, as the RFCs ask, so decode(encode(x)) == x but encode(decode(b))
 * may differ from b in reserved bits.
 */
#ifndef SOFTRNIC_IWARP_H
#define SOFTRNIC_IWARP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- MPA request / reply frames (RFC 5044 §7.1, RFC 6581 §3) ----------- */
#define MPA_KEY_LEN		16
#define MPA_KEY_REQ		"MPA ID Req Frame"	/* 16 bytes, no NUL */
#define MPA_KEY_REP		"MPA ID Rep Frame"
#define MPA_FRAME_HDR_LEN	20	/* key + flags + Rev + PD_Length */
#define MPA_MAX_PD		512	/* RFC 5044 §7.1: private data limit */
#define MPA_RTR_LEN		4	/* RFC 6581 §3: IRD/ORD word */
#define MPA_REV_1		1	/* RFC 5044 */
#define MPA_REV_2		2	/* RFC 6581: enhanced connection setup */
#define MPA_IRD_ORD_MAX		0x3fff	/* 14-bit IRD and ORD fields */

/* RFC 6581 §3: how the peer may send the ready-to-receive (RTR) message,
 * the first FPDU of a peer-to-peer connection. On the wire SEND is bit
 * 14 of the IRD half, WRITE and READ are bits 15 and 14 of the ORD half
 * (siw: MPA_V2_ZERO_LENGTH_RTR, MPA_V2_RDMA_WRITE_RTR, ..._READ_RTR). */
enum mpa_rtr_flags {
	MPA_RTR_ZERO_SEND = 1 << 0,	/* RTR by zero-length SEND */
	MPA_RTR_ZERO_WRITE = 1 << 1,	/* ... RDMA WRITE */
	MPA_RTR_ZERO_READ = 1 << 2,	/* ... RDMA READ */
	MPA_RTR_MASK = 7,
};

struct mpa_frame {
	bool reply;		/* "MPA ID Rep Frame" vs "MPA ID Req Frame" */
	bool markers;		/* M */
	bool crc;		/* C */
	bool reject;		/* R (replies only; ignored in requests) */
	/* Reserved bits of the flags byte that softrnic uses between its own
	 * peers (siw already takes 0x10 Enhanced and 0x08 GSO_EXP): 0x04 says
	 * "softrnic extensions" (ACK, RNR, SEND with immediate: srext.h) and
	 * is set in a request and its reply when the sender speaks them; a
	 * peer that leaves it clear is plain iWARP. A reply carries 0x01 with
	 * it, a request never does: Linux siw echoes every flag bit of the
	 * request in its reply, so 0x04 alone in a reply proves nothing
	 * (docs/INTEROP.md). 0x02, only in a softrnic reject reply, says the
	 * reject is rdma_reject_ece's (IB reason 35) rather than the
	 * consumer's (28). Other RNICs ignore reserved bits (RFC 5044 §7.1:
	 * "set to zero ... ignored on receive"). */
	bool softrnic;
	bool ece_reject;
	uint8_t rev;		/* 1 or 2 */
	/* RFC 6581 enhanced mode: rev 2 with the Enhanced flag (0x10 of the
	 * flags byte), and the IRD/ORD word as the first 4 bytes of the
	 * private data. The flag is reserved (ignored) in rev 1. The four
	 * fields below are sent only when enhanced, and decode as zero
	 * otherwise. */
	bool enhanced;
	bool peer2peer;		/* P2P bit: the peer wants an RTR message */
	uint16_t ird, ord;	/* 14-bit values */
	uint8_t rtr;		/* enum mpa_rtr_flags */
	/* the application's private data (after the IRD/ORD word if any) */
	const uint8_t *pd;
	uint16_t pd_len;
};

/* Encode a whole request/reply frame; f->pd/pd_len is the application's
 * private data (the IRD/ORD word is added when f->enhanced). */
ssize_t mpa_frame_encode(uint8_t *buf, size_t cap, const struct mpa_frame *f);
/* Decode a whole frame: needs MPA_FRAME_HDR_LEN + PD_Length bytes;
 * f->pd points into buf. A key that matches neither request nor reply is
 * -EBADMSG as soon as the first differing byte is in; PD_Length > 512
 * is -EBADMSG; a Rev other than 1 or 2 is -EPROTO (RFC 5044 §7.1: the
 * receiver closes the connection). */
ssize_t mpa_frame_decode(const uint8_t *buf, size_t len, struct mpa_frame *f);

/* ---- FPDUs (RFC 5044 §4): ULPDU_Length | ULPDU | pad | CRC32c ----------- */
#define MPA_ULPDU_LEN_SIZE	2
#define MPA_CRC_SIZE		4
#define MPA_MAX_ULPDU		0xffff	/* 16-bit ULPDU_Length */
#define MPA_TRAILER_MAX		(3 + MPA_CRC_SIZE)	/* pad + CRC */

/* Markers (RFC 5044 §4) are not supported: the CM must not request
 * them and must reject a peer that does (siw does the same). */

static inline size_t mpa_pad(size_t ulpdu_len)
{
	return (4 - ((MPA_ULPDU_LEN_SIZE + ulpdu_len) & 3)) & 3;
}
/* Bytes on the wire for a ULPDU of this length (CRC field always sent). */
static inline size_t mpa_fpdu_len(size_t ulpdu_len)
{
	return MPA_ULPDU_LEN_SIZE + ulpdu_len + mpa_pad(ulpdu_len) + MPA_CRC_SIZE;
}

/* CRC32c (RFC 5044 §4, computed as iSCSI does, RFC 3385 / RFC 3720
 * §12.1) over the whole FPDU minus its CRC field: the 2-byte length, the
 * ULPDU and the pad. The value returned is the CRC as a number, the one
 * CRC32c test vectors quote (0xE3069283 for "123456789"); it goes on the
 * wire least significant byte first, see mpa_crc_put().
 *
 * Incremental form, for FPDUs that arrive or leave in pieces:
 *	s = mpa_crc_init(); s = mpa_crc_update(s, p, n); ...; crc = mpa_crc_final(s);
 */
static inline uint32_t mpa_crc_init(void)
{
	return 0xffffffff;
}
uint32_t mpa_crc_update(uint32_t state, const void *buf, size_t len);
static inline uint32_t mpa_crc_final(uint32_t state)
{
	return ~state;
}
uint32_t mpa_crc(const struct iovec *iov, int iovcnt);
/* The 4 CRC bytes to append, given the value from mpa_crc(): least
 * significant byte first, as RFC 3720 Appendix B.4 shows the iSCSI
 * digest on the wire and as siw sends it (put_unaligned_le32). */
void mpa_crc_put(uint8_t out[4], uint32_t crc);
uint32_t mpa_crc_get(const uint8_t in[4]);

/* Pad and CRC field for a ULPDU of ulpdu_len bytes: writes mpa_pad() zero
 * bytes then the CRC (pass 0 when CRC was not negotiated: RFC 5044 §4
 * still sends the field). Returns the number of bytes written (4..7). */
size_t mpa_fpdu_trailer(uint8_t out[MPA_TRAILER_MAX], size_t ulpdu_len,
			uint32_t crc);

/* A whole FPDU held in one buffer (control messages, tests, the fuzzer). */
struct mpa_fpdu {
	const uint8_t *ulpdu;	/* points into the decoded buffer */
	uint16_t ulpdu_len;
	uint32_t crc;		/* the CRC field as received */
};
/* Encode ULPDU_Length | ulpdu | pad | CRC (zero unless crc). */
ssize_t mpa_fpdu_encode(uint8_t *buf, size_t cap, const uint8_t *ulpdu,
			size_t ulpdu_len, bool crc);
/* Needs mpa_fpdu_len(ULPDU_Length) bytes; with crc, a CRC mismatch is
 * -EBADMSG (RFC 5044 §4; TERMINATE with TERM_LLP_ECODE_CRC). Pad
 * contents are not checked. */
ssize_t mpa_fpdu_decode(const uint8_t *buf, size_t len, bool crc,
			struct mpa_fpdu *f);

/* ---- DDP + RDMAP headers (RFC 5041 §5, RFC 5040 §4) --------------------- */
#define DDP_VERSION		1	/* DV, RFC 5041 §5.1 */
#define RDMAP_VERSION		1	/* RV, RFC 5040 §4.1 */

/* RFC 5040 §4.2, RFC 7306 §4 */
enum rdmap_opcode {
	RDMAP_WRITE = 0x0,
	RDMAP_READ_REQ = 0x1,
	RDMAP_READ_RESP = 0x2,
	RDMAP_SEND = 0x3,
	RDMAP_SEND_INV = 0x4,
	RDMAP_SEND_SE = 0x5,
	RDMAP_SEND_SE_INV = 0x6,
	RDMAP_TERMINATE = 0x7,
	/* RFC 7306. It has no Write-with-Immediate or Send-with-Immediate
	 * opcode: an IB-style WRITE_WITH_IMM is an RDMA Write followed by
	 * an Immediate Data message (8 bytes of ULP data, untagged, QN 0,
	 * consuming one receive buffer like a Send). */
	RDMAP_IMM = 0x8,		/* Immediate Data */
	RDMAP_IMM_SE = 0x9,		/* Immediate Data with Solicited Event */
	RDMAP_ATOMIC_REQ = 0xa,
	RDMAP_ATOMIC_RESP = 0xb,
	RDMAP_OPCODE_COUNT = 0xc,	/* 0xc..0xf are reserved */
	RDMAP_OPCODE_MAX = 0x10,	/* size of the 4-bit opcode space */
};

/* Untagged queue numbers (RFC 5040 §4.2 table, RFC 7306 §4). Atomic
 * Requests share queue 1, and with it the MSN sequence and the IRD/ORD
 * credits, with RDMA Read Requests; Atomic Responses get queue 3.
 * Immediate Data messages use queue 0 like Sends. */
enum ddp_queue {
	DDP_QN_SEND = 0,
	DDP_QN_READ_REQ = 1,
	DDP_QN_TERMINATE = 2,
	DDP_QN_ATOMIC_REQ = 1,
	DDP_QN_ATOMIC_RESP = 3,
	DDP_QN_COUNT = 4,
};

/* ctrl (1) + RDMAP ctrl (1) + STag (4) + TO (8) */
#define DDP_TAGGED_HDR_LEN	14
/* ctrl (1) + RDMAP ctrl (1) + RsvdULP / Invalidate STag (4) + QN (4) +
 * MSN (4) + MO (4) */
#define DDP_UNTAGGED_HDR_LEN	18
#define DDP_HDR_MAX		DDP_UNTAGGED_HDR_LEN

struct ddp_hdr {
	uint8_t opcode;		/* enum rdmap_opcode */
	bool tagged;		/* T */
	bool last;		/* L */
	/* tagged */
	uint32_t stag;
	uint64_t to;
	/* untagged */
	uint32_t inv_stag;	/* RsvdULP: Invalidate STag (SEND_INV) */
	uint32_t qn, msn, mo;
};

/* Header length for an opcode (tagged or untagged), 0 if unknown. */
size_t ddp_hdr_len(uint8_t opcode);
/* The untagged queue of an opcode (enum ddp_queue), -1 if tagged or
 * unknown. */
int ddp_opcode_qn(uint8_t opcode);
/* The encoder checks what the decoder checks (T and QN match the
 * opcode); inv_stag is sent only with SEND_INV / SEND_SE_INV. */
ssize_t ddp_hdr_encode(uint8_t *buf, size_t cap, const struct ddp_hdr *h);
/* Checks DDP version 1, RDMAP version 1, T bit matching the opcode, the
 * queue number matching the opcode for untagged messages. The version
 * and opcode checks need only the first two bytes. */
ssize_t ddp_hdr_decode(const uint8_t *buf, size_t len, struct ddp_hdr *h);

/* ---- RDMAP message bodies (after the DDP header) ------------------------ */
#define RDMAP_READ_REQ_LEN	28	/* RFC 5040 §4.4 */
struct rdmap_read_req {
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	uint32_t src_stag;
	uint64_t src_to;
};
ssize_t rdmap_read_req_encode(uint8_t *buf, size_t cap, const struct rdmap_read_req *r);
ssize_t rdmap_read_req_decode(const uint8_t *buf, size_t len, struct rdmap_read_req *r);

/* RFC 7306 §4 atomic request: Reserved (28 bits) | AOpCode (4 bits),
 * Request Identifier, Remote STag, Remote Tagged Offset, then four 64-bit
 * operands. Masks follow RFC 7306: an unmasked CmpSwap sends all-ones
 * compare and swap masks; an unmasked FetchAdd sends an all-zero add
 * mask (no field boundaries). */
#define RDMAP_ATOMIC_REQ_LEN	52
#define RDMAP_ATOMIC_RESP_LEN	12	/* Original Request Id + Value */
enum rdmap_atomic_op {
	RDMAP_ATOMIC_FETCH_ADD = 0,
	RDMAP_ATOMIC_SWAP = 1,
	RDMAP_ATOMIC_CMP_SWAP = 2,
	RDMAP_ATOMIC_OP_COUNT = 3,	/* 3..15 reserved: -EBADMSG */
};
struct rdmap_atomic_req {
	uint8_t op;		/* enum rdmap_atomic_op */
	uint32_t req_id;
	uint32_t stag;
	uint64_t to;
	uint64_t add_swap, add_swap_mask;
	uint64_t compare, compare_mask;
};
struct rdmap_atomic_resp {
	uint32_t req_id;
	uint64_t orig;
};
ssize_t rdmap_atomic_req_encode(uint8_t *buf, size_t cap, const struct rdmap_atomic_req *r);
ssize_t rdmap_atomic_req_decode(const uint8_t *buf, size_t len, struct rdmap_atomic_req *r);
ssize_t rdmap_atomic_resp_encode(uint8_t *buf, size_t cap, const struct rdmap_atomic_resp *r);
ssize_t rdmap_atomic_resp_decode(const uint8_t *buf, size_t len, struct rdmap_atomic_resp *r);

/* RFC 7306 Immediate Data body: 8 opaque bytes. An IB-style program's
 * imm_data (__be32, already in network order) travels as the first 4
 * bytes, the other 4 are zero. */
#define RDMAP_IMM_LEN 8
struct rdmap_imm {
	uint8_t data[RDMAP_IMM_LEN];
};
ssize_t rdmap_imm_encode(uint8_t *buf, size_t cap, const struct rdmap_imm *m);
ssize_t rdmap_imm_decode(const uint8_t *buf, size_t len, struct rdmap_imm *m);

/* TERMINATE (RFC 5040 §4.8): Terminate Control (Layer 4 bits, EType 4,
 * Error Code 8, HdrCt M D R 3, reserved 13), then, when any HdrCt bit
 * is set, the 16-bit DDP Segment Length (valid if M) followed by the
 * copied headers of the offending segment: its DDP header if D (14 or
 * 18 bytes, by its T bit), then its RDMAP header if R (the 28-byte Read
 * Request or 52-byte Atomic Request body; nothing more for other
 * opcodes, whose RDMAP fields live in the DDP header). siw always sets M
 * with D; so does softrnic. */
#define RDMAP_TERM_HDR_LEN	4	/* Terminate Control */
enum rdmap_term_layer { TERM_LAYER_RDMAP = 0, TERM_LAYER_DDP = 1, TERM_LAYER_LLP = 2 };
struct rdmap_term {
	uint8_t layer, etype, ecode;
	bool hdr_m, hdr_d, hdr_r;	/* which headers are copied */
	uint16_t ddp_seg_len;		/* the offending ULPDU_Length */
	const uint8_t *hdrs;		/* copied headers, in the frame */
	size_t hdrs_len;
	/* decode only: the Terminate Control word came in Linux siw's
	 * little-endian bitfield layout (see rdmap_term_decode()); the
	 * fields above are what it meant. Ignored by the encoder. */
	bool siw_layout;
};
/* Encode: hdrs_len must be 0 unless D or R, R needs D, and with D the
 * copied DDP header must be whole. */
ssize_t rdmap_term_encode(uint8_t *buf, size_t cap, const struct rdmap_term *t);
/* Decode a whole TERMINATE body (the ULPDU minus its 18-byte DDP
 * header): with D or R set, t->hdrs is everything after the DDP Segment
 * Length, as received. Tolerates Linux siw's byte order of the
 * Terminate Control word (docs/INTEROP.md): HdrCt bits that appear only
 * in the reserved bits of byte 2 where siw puts them. */
ssize_t rdmap_term_decode(const uint8_t *buf, size_t len, struct rdmap_term *t);
/* How many bytes of an offending ULPDU (which starts with its DDP
 * header) a TERMINATE copies for these D and R bits: at most len. */
size_t rdmap_term_copy_len(const uint8_t *ulpdu, size_t len, bool d, bool r);
/* Why ddp_hdr_decode() rejected these bytes, as the TERMINATE to send
 * (RFC 5041 §7, RFC 5040 §7): sets layer/etype/ecode and the HdrCt bits
 * the error calls for (none for version and opcode errors, whose header
 * layout is unknown; M and D for a bad queue number), and clears the
 * rest of *t. Returns 0, or -EINVAL if the header is valid or too short
 * to judge. */
int ddp_hdr_term_error(const uint8_t *buf, size_t len, struct rdmap_term *t);

/* Error types/codes used by softrnic (RFC 5040 §4.8, RFC 5041 §7.2,
 * RFC 5044, RFC 6581) */
enum {
	/* RDMAP layer, etype 0: local catastrophic; 1: remote protection;
	 * 2: remote operation */
	TERM_RDMAP_ETYPE_CATASTROPHIC = 0,
	TERM_RDMAP_ETYPE_REMOTE_PROT = 1,
	TERM_RDMAP_ETYPE_REMOTE_OP = 2,
	TERM_RDMAP_ECODE_INV_STAG = 0x00,
	TERM_RDMAP_ECODE_BASE_BOUNDS = 0x01,
	TERM_RDMAP_ECODE_ACCESS = 0x02,
	TERM_RDMAP_ECODE_STAG_PD = 0x03,
	TERM_RDMAP_ECODE_TO_WRAP = 0x04,
	TERM_RDMAP_ECODE_VERSION = 0x05,
	TERM_RDMAP_ECODE_OPCODE = 0x06,
	TERM_RDMAP_ECODE_CATASTROPHIC_STREAM = 0x07,
	TERM_RDMAP_ECODE_CATASTROPHIC_GLOBAL = 0x08,
	TERM_RDMAP_ECODE_CANT_INVALIDATE = 0x09,
	TERM_RDMAP_ECODE_UNSPECIFIED = 0xff,
	/* DDP layer, etype 1: tagged buffer error, 2: untagged buffer error */
	TERM_DDP_ETYPE_CATASTROPHIC = 0,
	TERM_DDP_ETYPE_TAGGED = 1,
	TERM_DDP_ETYPE_UNTAGGED = 2,
	TERM_DDP_ETYPE_RSVD = 3,
	TERM_DDP_ECODE_T_INVALID_STAG = 0x00,
	TERM_DDP_ECODE_T_BASE_BOUNDS = 0x01,
	TERM_DDP_ECODE_T_STAG_NOT_ASSOC = 0x02,
	TERM_DDP_ECODE_T_TO_WRAP = 0x03,
	TERM_DDP_ECODE_T_INVALID_VERSION = 0x04,
	TERM_DDP_ECODE_UT_INVALID_QN = 0x01,
	TERM_DDP_ECODE_UT_INVALID_MSN_NOBUF = 0x02,
	TERM_DDP_ECODE_UT_INVALID_MSN_RANGE = 0x03,
	TERM_DDP_ECODE_UT_INVALID_MO = 0x04,
	TERM_DDP_ECODE_UT_MSG_TOOLONG = 0x05,
	TERM_DDP_ECODE_UT_INVALID_VERSION = 0x06,
	/* LLP (MPA) layer, etype 0; codes 5..7 come from RFC 6581 */
	TERM_LLP_ETYPE_MPA = 0,
	TERM_LLP_ECODE_TCP_LOST = 0x01,
	TERM_LLP_ECODE_CRC = 0x02,
	TERM_LLP_ECODE_MARKER = 0x03,	/* Marker / ULPDU_Length mismatch */
	TERM_LLP_ECODE_BAD_REQ_REP = 0x04,
	TERM_LLP_ECODE_CATASTROPHIC = 0x05,
	TERM_LLP_ECODE_IRD = 0x06,	/* insufficient IRD resources */
	TERM_LLP_ECODE_NO_RTR = 0x07,	/* no matching RTR option */
};

#endif
