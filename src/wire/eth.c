/* Ethernet frame parsing for flow steering and the RSS Toeplitz hash
 * (wire/eth.h). */
#include "wire/eth.h"

#include <arpa/inet.h>
#include <string.h>

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;			/* stays in network order */
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static void parse_l4(const uint8_t *p, size_t len, uint8_t proto, struct eth_info *f)
{
	/* RFC 768 / RFC 9293: both start with source and destination port. */
	if (len < 4 || (proto != 6 && proto != 17))
		return;
	if (proto == 6 && len < 20)
		return;
	if (proto == 17 && len < 8)
		return;
	f->has |= proto == 6 ? ETH_HAS_TCP : ETH_HAS_UDP;
	f->sport = get16(p);
	f->dport = get16(p + 2);
}

/* RFC 791 §3.1. A non-first fragment has no L4 header. */
static void parse_ipv4(const uint8_t *p, size_t len, struct eth_info *f)
{
	size_t ihl;

	if (len < 20 || (p[0] >> 4) != 4)
		return;
	ihl = (size_t)(p[0] & 0xf) * 4;
	if (ihl < 20 || ihl > len)
		return;
	f->has |= ETH_HAS_IPV4;
	f->ip4_tos = p[1];
	f->ip4_flags = p[6] >> 5;
	f->ip4_ttl = p[8];
	f->ip4_proto = p[9];
	f->ip4_src = get32(p + 12);
	f->ip4_dst = get32(p + 16);
	if (((p[6] & 0x1f) | p[7]) == 0)
		parse_l4(p + ihl, len - ihl, f->ip4_proto, f);
}

/* RFC 8200 §3: the fixed header only. */
static void parse_ipv6(const uint8_t *p, size_t len, struct eth_info *f)
{
	uint32_t w;

	if (len < 40 || (p[0] >> 4) != 6)
		return;
	f->has |= ETH_HAS_IPV6;
	w = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
	f->ip6_tclass = (uint8_t)(w >> 20);
	w &= 0xfffff;
	/* ibv_flow_ipv6_filter.flow_label is a __be32 of the 20-bit label */
	f->ip6_flow = htonl(w);
	f->ip6_next = p[6];
	f->ip6_hop = p[7];
	memcpy(f->ip6_src, p + 8, 16);
	memcpy(f->ip6_dst, p + 24, 16);
	parse_l4(p + 40, len - 40, f->ip6_next, f);
}

void eth_parse(const uint8_t *frame, size_t len, struct eth_info *f)
{
	size_t off = ETH_HDR_LEN;
	uint16_t type;

	memset(f, 0, sizeof(*f));
	if (len < ETH_HDR_LEN)
		return;
	memcpy(f->dmac, frame, 6);
	memcpy(f->smac, frame + 6, 6);
	type = get16(frame + 12);
	if (type == htons(ETH_TYPE_VLAN) && len >= ETH_HDR_LEN + ETH_VLAN_LEN) {
		f->has |= ETH_HAS_VLAN;
		f->vlan_tag = get16(frame + 14);
		type = get16(frame + 16);
		off += ETH_VLAN_LEN;
	}
	f->ether_type = type;
	if (type == htons(ETH_TYPE_IPV4))
		parse_ipv4(frame + off, len - off, f);
	else if (type == htons(ETH_TYPE_IPV6))
		parse_ipv6(frame + off, len - off, f);
}

/* For each set bit of the input, XOR in the 32 key bits that start at that
 * bit's position (Microsoft RSS specification, "Toeplitz hash"). */
uint32_t eth_toeplitz(const uint8_t *key, size_t key_len, const uint8_t *in, size_t len)
{
	uint32_t hash = 0, window = 0;
	size_t next = 4;		/* next key byte to shift in */

	for (size_t i = 0; i < 4; i++)
		window = (window << 8) | (i < key_len ? key[i] : 0);
	for (size_t i = 0; i < len; i++) {
		uint8_t kb = next < key_len ? key[next] : 0;

		next++;
		for (int b = 7; b >= 0; b--) {
			if (in[i] & (1U << b))
				hash ^= window;
			window = (window << 1) | ((kb >> b) & 1);
		}
	}
	return hash;
}

uint32_t eth_rss_hash(const struct eth_info *f, uint32_t fields,
		      const uint8_t *key, size_t key_len)
{
	uint8_t in[36];
	size_t n = 0;
	bool tcp = f->has & ETH_HAS_TCP, udp = f->has & ETH_HAS_UDP;

	if (f->has & ETH_HAS_IPV4) {
		if (fields & ETH_RSS_SRC_IPV4) {
			memcpy(in + n, &f->ip4_src, 4);
			n += 4;
		}
		if (fields & ETH_RSS_DST_IPV4) {
			memcpy(in + n, &f->ip4_dst, 4);
			n += 4;
		}
	} else if (f->has & ETH_HAS_IPV6) {
		if (fields & ETH_RSS_SRC_IPV6) {
			memcpy(in + n, f->ip6_src, 16);
			n += 16;
		}
		if (fields & ETH_RSS_DST_IPV6) {
			memcpy(in + n, f->ip6_dst, 16);
			n += 16;
		}
	}
	if ((tcp && (fields & ETH_RSS_SRC_PORT_TCP)) || (udp && (fields & ETH_RSS_SRC_PORT_UDP))) {
		memcpy(in + n, &f->sport, 2);
		n += 2;
	}
	if ((tcp && (fields & ETH_RSS_DST_PORT_TCP)) || (udp && (fields & ETH_RSS_DST_PORT_UDP))) {
		memcpy(in + n, &f->dport, 2);
		n += 2;
	}
	return n ? eth_toeplitz(key, key_len, in, n) : 0;
}
