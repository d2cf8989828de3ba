/* UD datagram header and GRH area codecs (wire/ud.h). */
#include "wire/ud.h"
#include "wire/be.h"

#include <errno.h>
#include <string.h>

/* RoCEv2 framing a UD message would have had, for the GRH's lengths:
 * UDP header, BTH, DETH, immediate, ICRC (IBTA Annex A17). */
#define ROCE_UDP_LEN	8
#define ROCE_BTH_LEN	12
#define ROCE_DETH_LEN	8
#define ROCE_IMM_LEN	4
#define ROCE_ICRC_LEN	4
#define IPV4_HDR_LEN	20
#define IPPROTO_UDP_NR	17

ssize_t ud_hdr_encode(uint8_t *buf, size_t cap, const struct ud_hdr *h)
{
	if (cap < UD_HDR_LEN)
		return -ENOSPC;
	if ((h->opcode != UD_OP_SEND && h->opcode != UD_OP_SEND_IMM) ||
	    h->flow_label > UD_FLOW_MASK || h->dst_qpn > UD_QPN_MASK ||
	    h->src_qpn > UD_QPN_MASK || h->len > UD_MAX_PAYLOAD)
		return -EINVAL;
	put_be16(buf, UD_MAGIC);
	buf[2] = UD_VERSION;
	buf[3] = h->opcode;
	put_be32(buf + 4, (h->se ? UD_F_SE : 0) | h->flow_label);
	put_be32(buf + 8, h->dst_qpn);
	put_be32(buf + 12, h->src_qpn);
	put_be32(buf + 16, h->qkey);
	put_be32(buf + 20, h->opcode == UD_OP_SEND_IMM ? h->imm : 0);
	put_be32(buf + 24, h->len);
	return UD_HDR_LEN;
}

ssize_t ud_hdr_decode(const uint8_t *buf, size_t len, struct ud_hdr *h)
{
	uint32_t w;

	if (len < UD_HDR_LEN)
		return -EBADMSG;
	if (get_be16(buf) != UD_MAGIC || buf[2] != UD_VERSION)
		return -EPROTO;
	h->opcode = buf[3];
	if (h->opcode != UD_OP_SEND && h->opcode != UD_OP_SEND_IMM)
		return -EPROTO;
	w = get_be32(buf + 4);
	if (w & ~(UD_F_SE | UD_FLOW_MASK))
		return -EPROTO;
	h->se = (w & UD_F_SE) != 0;
	h->flow_label = w & UD_FLOW_MASK;
	h->dst_qpn = get_be32(buf + 8);
	h->src_qpn = get_be32(buf + 12);
	if (h->dst_qpn > UD_QPN_MASK || h->src_qpn > UD_QPN_MASK)
		return -EPROTO;
	h->qkey = get_be32(buf + 16);
	h->imm = get_be32(buf + 20);
	h->len = get_be32(buf + 24);
	if (h->len > UD_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (h->len != len - UD_HDR_LEN)
		return -EBADMSG;
	return UD_HDR_LEN;
}

bool ud_gid_v4mapped(const uint8_t gid[16])
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(gid, prefix, sizeof(prefix));
}

/* RFC 791 header checksum: one's complement sum of the 16-bit words. */
static uint16_t ipv4_csum(const uint8_t *h)
{
	uint32_t sum = 0;

	for (int i = 0; i < IPV4_HDR_LEN; i += 2)
		sum += get_be16(h + i);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

void ud_grh_build(uint8_t grh[UD_GRH_LEN], const struct ud_grh_info *g)
{
	uint32_t roce = ROCE_UDP_LEN + ROCE_BTH_LEN + ROCE_DETH_LEN +
			(g->imm ? ROCE_IMM_LEN : 0) + g->payload + ROCE_ICRC_LEN;

	memset(grh, 0, UD_GRH_LEN);
	if (ud_gid_v4mapped(g->sgid)) {
		uint8_t *ip = grh + UD_GRH_LEN - IPV4_HDR_LEN;

		ip[0] = 0x45;				/* version 4, IHL 5 */
		ip[1] = g->tclass;
		put_be16(ip + 2, (uint16_t)(IPV4_HDR_LEN + roce));
		put_be16(ip + 6, 0x4000);		/* DF, as RoCEv2 sends */
		ip[8] = g->hop_limit;
		ip[9] = IPPROTO_UDP_NR;
		memcpy(ip + 12, g->sgid + 12, 4);
		memcpy(ip + 16, g->dgid + 12, 4);
		put_be16(ip + 10, ipv4_csum(ip));
		return;
	}
	put_be32(grh, 6U << 28 | (uint32_t)g->tclass << 20 | (g->flow_label & UD_FLOW_MASK));
	put_be16(grh + 4, (uint16_t)roce);
	grh[6] = IPPROTO_UDP_NR;
	grh[7] = g->hop_limit;
	memcpy(grh + 8, g->sgid, 16);
	memcpy(grh + 24, g->dgid, 16);
}

static void v4mapped(uint8_t gid[16], const uint8_t *addr)
{
	memset(gid, 0, 10);
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, addr, 4);
}

int ud_grh_parse(const uint8_t grh[UD_GRH_LEN], struct ud_grh_info *g)
{
	const uint8_t *ip = grh + UD_GRH_LEN - IPV4_HDR_LEN;
	uint32_t w = get_be32(grh);
	bool v4;

	memset(g, 0, sizeof(*g));
	if (w >> 28 != 6) {
		if (ip[0] >> 4 != 4)
			return -EPROTONOSUPPORT;
		v4 = true;
	} else {
		/* A checksum of 0 over a header whose own sum is in it. */
		v4 = (ip[0] & 0xf) == 5 && ipv4_csum(ip) == 0;
	}
	if (v4) {
		v4mapped(g->sgid, ip + 12);
		v4mapped(g->dgid, ip + 16);
		g->tclass = ip[1];
		g->hop_limit = ip[8];
		return 4;
	}
	g->tclass = (uint8_t)(w >> 20);
	g->flow_label = w & UD_FLOW_MASK;
	g->next_hdr = grh[6];
	g->hop_limit = grh[7];
	memcpy(g->sgid, grh + 8, 16);
	memcpy(g->dgid, grh + 24, 16);
	return 6;
}
