/* softrnic's extension messages and hello; see srext.h. */
#include "wire/srext.h"

#include <errno.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t ext_qn(uint8_t op)
{
	return op == SR_EXT_ACK || op == SR_EXT_RNR ? SR_EXT_QN : 0;
}

static bool ext_qn_ok(uint8_t op, uint32_t qn, uint32_t msn, uint32_t mo, bool last)
{
	if (op == SR_EXT_ACK && qn == SR_EXT_QN_XRC)
		return msn == 0 && mo <= 0xffffff;	/* XRC header */
	if (op == SR_EXT_ACK && qn == SR_EXT_QN_AWRITE)
		return mo == 0 && last;			/* atomic write: one FPDU */
	return qn == ext_qn(op);
}

ssize_t sr_ext_hdr_encode(uint8_t *buf, size_t cap, const struct ddp_hdr *h)
{
	if (!sr_ext_opcode(h->opcode) || h->tagged ||
	    !ext_qn_ok(h->opcode, h->qn, h->msn, h->mo, h->last))
		return -EINVAL;
	if (cap < DDP_UNTAGGED_HDR_LEN)
		return -ENOSPC;
	/* RFC 5041 §5.1 control: T=0, L, DV=1; RFC 5040 §4.1: RV=1, opcode */
	buf[0] = (uint8_t)((h->last ? 0x40 : 0) | DDP_VERSION);
	buf[1] = (uint8_t)(RDMAP_VERSION << 6 | h->opcode);
	put32(buf + 2, h->inv_stag);
	put32(buf + 6, h->qn);
	put32(buf + 10, h->msn);
	put32(buf + 14, h->mo);
	return DDP_UNTAGGED_HDR_LEN;
}

ssize_t sr_ext_hdr_decode(const uint8_t *buf, size_t len, struct ddp_hdr *h)
{
	if (len < 2)
		return -EAGAIN;
	if ((buf[0] & 0x80) || (buf[0] & 3) != DDP_VERSION || (buf[1] >> 6) != RDMAP_VERSION ||
	    !sr_ext_opcode(buf[1] & 0xf))
		return -EBADMSG;
	if (len < DDP_UNTAGGED_HDR_LEN)
		return -EAGAIN;
	memset(h, 0, sizeof(*h));
	h->opcode = buf[1] & 0xf;
	h->last = buf[0] & 0x40;
	h->inv_stag = get32(buf + 2);
	h->qn = get32(buf + 6);
	h->msn = get32(buf + 10);
	h->mo = get32(buf + 14);
	if (!ext_qn_ok(h->opcode, h->qn, h->msn, h->mo, h->last))
		return -EBADMSG;
	return DDP_UNTAGGED_HDR_LEN;
}

ssize_t sr_awrite_encode(uint8_t *buf, size_t cap, const struct sr_awrite *a)
{
	if (cap < SR_AWRITE_LEN)
		return -ENOSPC;
	put32(buf, (uint32_t)(a->to >> 32));
	put32(buf + 4, (uint32_t)a->to);
	memcpy(buf + 8, a->data, sizeof(a->data));
	return SR_AWRITE_LEN;
}

ssize_t sr_awrite_decode(const uint8_t *buf, size_t len, struct sr_awrite *a)
{
	if (len != SR_AWRITE_LEN)
		return -EBADMSG;
	a->to = (uint64_t)get32(buf) << 32 | get32(buf + 4);
	memcpy(a->data, buf + 8, sizeof(a->data));
	return SR_AWRITE_LEN;
}

ssize_t sr_hello_encode(uint8_t *buf, size_t cap, const struct sr_hello *h)
{
	if (cap < SR_HELLO_LEN)
		return -ENOSPC;
	put32(buf, SR_HELLO_MAGIC);
	buf[4] = h->version;
	buf[5] = h->flags;
	buf[6] = buf[7] = 0;
	put32(buf + 8, h->src_qpn);
	put32(buf + 12, h->dst_qpn);
	return SR_HELLO_LEN;
}

ssize_t sr_hello_decode(const uint8_t *buf, size_t len, struct sr_hello *h)
{
	if (len < SR_HELLO_LEN || get32(buf) != SR_HELLO_MAGIC)
		return -EBADMSG;
	h->version = buf[4];
	h->flags = buf[5];
	h->src_qpn = get32(buf + 8);
	h->dst_qpn = get32(buf + 12);
	if (h->version != 1 || (h->src_qpn | h->dst_qpn) > 0xffffff)
		return -EBADMSG;
	return SR_HELLO_LEN;
}
