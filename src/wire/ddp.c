/* DDP segment headers (RFC 5041 §5) with the RDMAP control field and
 * Invalidate STag that live inside them (RFC 5040 §4.1, RFC 7306 §4).
 * Pure functions, see iwarp.h.
 */
#include <errno.h>
#include <string.h>

#include "wire/be.h"
#include "wire/iwarp.h"

/* RFC 5041 §5.1: byte 0 is T | L | Rsvd (4 bits) | DV (2 bits).
 * RFC 5040 §4.1: byte 1 is RV (2 bits) | Rsv (2 bits) | Opcode (4 bits). */
#define DDP_F_TAGGED		0x80
#define DDP_F_LAST		0x40
#define DDP_DV_MASK		0x03
#define RDMAP_RV_SHIFT		6
#define RDMAP_OPCODE_MASK	0x0f

/* Untagged header offsets (RFC 5041 §5.3); tagged ones (§5.2). */
#define DDP_OFF_RSVDULP		2
#define DDP_OFF_QN		6
#define DDP_OFF_MSN		10
#define DDP_OFF_MO		14
#define DDP_OFF_STAG		2
#define DDP_OFF_TO		6

/* Per opcode: tagged or not, and the untagged queue (RFC 5040 §4.2 table,
 * RFC 7306 §4). Reserved opcodes have valid == false. */
struct rdmap_opinfo {
	bool valid;
	bool tagged;
	bool inv_stag;		/* RsvdULP carries an Invalidate STag */
	int8_t qn;
};

static const struct rdmap_opinfo rdmap_ops[RDMAP_OPCODE_MAX] = {
	[RDMAP_WRITE] = { true, true, false, -1 },
	[RDMAP_READ_REQ] = { true, false, false, DDP_QN_READ_REQ },
	[RDMAP_READ_RESP] = { true, true, false, -1 },
	[RDMAP_SEND] = { true, false, false, DDP_QN_SEND },
	[RDMAP_SEND_INV] = { true, false, true, DDP_QN_SEND },
	[RDMAP_SEND_SE] = { true, false, false, DDP_QN_SEND },
	[RDMAP_SEND_SE_INV] = { true, false, true, DDP_QN_SEND },
	[RDMAP_TERMINATE] = { true, false, false, DDP_QN_TERMINATE },
	[RDMAP_IMM] = { true, false, false, DDP_QN_SEND },
	[RDMAP_IMM_SE] = { true, false, false, DDP_QN_SEND },
	[RDMAP_ATOMIC_REQ] = { true, false, false, DDP_QN_ATOMIC_REQ },
	[RDMAP_ATOMIC_RESP] = { true, false, false, DDP_QN_ATOMIC_RESP },
};

static const struct rdmap_opinfo *rdmap_op(uint8_t opcode)
{
	if (opcode >= RDMAP_OPCODE_MAX || !rdmap_ops[opcode].valid)
		return NULL;
	return &rdmap_ops[opcode];
}

size_t ddp_hdr_len(uint8_t opcode)
{
	const struct rdmap_opinfo *op = rdmap_op(opcode);

	if (!op)
		return 0;
	return op->tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
}

int ddp_opcode_qn(uint8_t opcode)
{
	const struct rdmap_opinfo *op = rdmap_op(opcode);

	return op ? op->qn : -1;
}

ssize_t ddp_hdr_encode(uint8_t *buf, size_t cap, const struct ddp_hdr *h)
{
	const struct rdmap_opinfo *op = rdmap_op(h->opcode);
	size_t n;

	if (!op || op->tagged != h->tagged)
		return -EINVAL;
	if (!h->tagged && h->qn != (uint32_t)op->qn)
		return -EINVAL;
	n = ddp_hdr_len(h->opcode);
	if (cap < n)
		return -ENOSPC;

	buf[0] = (h->tagged ? DDP_F_TAGGED : 0) | (h->last ? DDP_F_LAST : 0) |
		 DDP_VERSION;
	buf[1] = RDMAP_VERSION << RDMAP_RV_SHIFT | h->opcode;
	if (h->tagged) {
		put_be32(buf + DDP_OFF_STAG, h->stag);
		put_be64(buf + DDP_OFF_TO, h->to);
	} else {
		/* RFC 5040 §4.1: RsvdULP is zero unless it is the
		 * Invalidate STag */
		put_be32(buf + DDP_OFF_RSVDULP, op->inv_stag ? h->inv_stag : 0);
		put_be32(buf + DDP_OFF_QN, h->qn);
		put_be32(buf + DDP_OFF_MSN, h->msn);
		put_be32(buf + DDP_OFF_MO, h->mo);
	}
	return (ssize_t)n;
}

/* The checks that need only the two control bytes, in the order RFC 5041
 * §7 and RFC 5040 §7 report them: DDP version, RDMAP version, opcode. */
enum ddp_ctrl_err {
	DDP_CTRL_OK,
	DDP_CTRL_DDP_VERSION,
	DDP_CTRL_RDMAP_VERSION,
	DDP_CTRL_OPCODE,
};

static enum ddp_ctrl_err ddp_ctrl_check(const uint8_t *buf)
{
	const struct rdmap_opinfo *op;
	bool tagged = buf[0] & DDP_F_TAGGED;

	if ((buf[0] & DDP_DV_MASK) != DDP_VERSION)
		return DDP_CTRL_DDP_VERSION;
	if (buf[1] >> RDMAP_RV_SHIFT != RDMAP_VERSION)
		return DDP_CTRL_RDMAP_VERSION;
	op = rdmap_op(buf[1] & RDMAP_OPCODE_MASK);
	if (!op || op->tagged != tagged)
		return DDP_CTRL_OPCODE;
	return DDP_CTRL_OK;
}

static void ddp_hdr_fill(const uint8_t *buf, struct ddp_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->opcode = buf[1] & RDMAP_OPCODE_MASK;
	h->tagged = buf[0] & DDP_F_TAGGED;
	h->last = buf[0] & DDP_F_LAST;
	if (h->tagged) {
		h->stag = get_be32(buf + DDP_OFF_STAG);
		h->to = get_be64(buf + DDP_OFF_TO);
		return;
	}
	if (rdmap_ops[h->opcode].inv_stag)
		h->inv_stag = get_be32(buf + DDP_OFF_RSVDULP);
	h->qn = get_be32(buf + DDP_OFF_QN);
	h->msn = get_be32(buf + DDP_OFF_MSN);
	h->mo = get_be32(buf + DDP_OFF_MO);
}

ssize_t ddp_hdr_decode(const uint8_t *buf, size_t len, struct ddp_hdr *h)
{
	size_t n;

	if (len < 2) {
		/* a wrong DDP version is visible in the first byte */
		if (len && (buf[0] & DDP_DV_MASK) != DDP_VERSION)
			return -EBADMSG;
		return -EAGAIN;
	}
	if (ddp_ctrl_check(buf) != DDP_CTRL_OK)
		return -EBADMSG;
	n = ddp_hdr_len(buf[1] & RDMAP_OPCODE_MASK);
	if (len < n)
		return -EAGAIN;

	ddp_hdr_fill(buf, h);
	if (!h->tagged && h->qn != (uint32_t)rdmap_ops[h->opcode].qn)
		return -EBADMSG;
	return (ssize_t)n;
}

static void term_set(struct rdmap_term *t, uint8_t layer, uint8_t etype,
		     uint8_t ecode)
{
	t->layer = layer;
	t->etype = etype;
	t->ecode = ecode;
}

int ddp_hdr_term_error(const uint8_t *buf, size_t len, struct rdmap_term *t)
{
	bool tagged;

	if (len < 2)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	tagged = buf[0] & DDP_F_TAGGED;

	switch (ddp_ctrl_check(buf)) {
	case DDP_CTRL_DDP_VERSION:	/* RFC 5041 §7.2 */
		if (tagged)
			term_set(t, TERM_LAYER_DDP, TERM_DDP_ETYPE_TAGGED,
				 TERM_DDP_ECODE_T_INVALID_VERSION);
		else
			term_set(t, TERM_LAYER_DDP, TERM_DDP_ETYPE_UNTAGGED,
				 TERM_DDP_ECODE_UT_INVALID_VERSION);
		return 0;
	case DDP_CTRL_RDMAP_VERSION:	/* RFC 5040 §4.8 */
		term_set(t, TERM_LAYER_RDMAP, TERM_RDMAP_ETYPE_REMOTE_OP,
			 TERM_RDMAP_ECODE_VERSION);
		return 0;
	case DDP_CTRL_OPCODE:
		term_set(t, TERM_LAYER_RDMAP, TERM_RDMAP_ETYPE_REMOTE_OP,
			 TERM_RDMAP_ECODE_OPCODE);
		return 0;
	case DDP_CTRL_OK:
		break;
	}
	if (tagged || len < DDP_UNTAGGED_HDR_LEN)
		return -EINVAL;
	if (get_be32(buf + DDP_OFF_QN) ==
	    (uint32_t)rdmap_ops[buf[1] & RDMAP_OPCODE_MASK].qn)
		return -EINVAL;
	/* RFC 5041 §7.2: untagged buffer error, invalid QN; the header
	 * layout is known, so it is copied (M, D) */
	term_set(t, TERM_LAYER_DDP, TERM_DDP_ETYPE_UNTAGGED,
		 TERM_DDP_ECODE_UT_INVALID_QN);
	t->hdr_m = true;
	t->hdr_d = true;
	return 0;
}
