/* Unit tests for Ethernet frame parsing and the RSS Toeplitz hash
 * (wire/eth.h). The hash vectors are the published ones of Microsoft's
 * "Verifying the RSS Hash Calculation" (its key, five IPv4/TCP flows,
 * the IPv4-only and the IPv4+TCP hash of each); frames are written out
 * byte by byte here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "wire/eth.h"

static const uint8_t ms_key[40] = {
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
	0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
	0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
	0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

static const struct {
	uint8_t dst[4];
	uint16_t dport;
	uint8_t src[4];
	uint16_t sport;
	uint32_t h_ip, h_tcp;
} ms_v4[] = {
	{ { 161, 142, 100, 80 }, 1766, { 66, 9, 149, 187 }, 2794, 0x323e8fc2, 0x51ccc178 },
	{ { 65, 69, 140, 83 }, 4739, { 199, 92, 111, 2 }, 14230, 0xd718262a, 0xc626b0ea },
	{ { 12, 22, 207, 184 }, 38024, { 24, 19, 198, 95 }, 12898, 0xd2d0a5de, 0x5c2b394a },
	{ { 209, 142, 163, 6 }, 2217, { 38, 27, 205, 30 }, 48228, 0x82989176, 0xafc7327f },
	{ { 202, 188, 127, 2 }, 1303, { 153, 39, 163, 191 }, 44251, 0x5d1809c5, 0x10e828a2 },
};

/* Ethernet (optionally 802.1Q) | IPv4, IHL 5 | TCP header; returns len. */
static size_t v4_tcp_frame(uint8_t *f, const uint8_t src[4], const uint8_t dst[4],
			   uint16_t sport, uint16_t dport, int vlan)
{
	size_t o = 12;

	memset(f, 0, 128);
	memcpy(f, "\x01\x00\x5e\x00\x00\x01", 6);
	memcpy(f + 6, "\x02\x00\x00\x00\x00\x02", 6);
	if (vlan) {
		memcpy(f + 12, "\x81\x00\xa0\x07", 4);	/* PCP 5, VID 7 */
		o = 16;
	}
	f[o] = 0x08;
	f[o + 1] = 0x00;
	o += 2;
	f[o] = 0x45;
	f[o + 1] = 0x10;			/* TOS */
	f[o + 6] = 0x40;			/* DF */
	f[o + 8] = 64;
	f[o + 9] = 6;
	memcpy(f + o + 12, src, 4);
	memcpy(f + o + 16, dst, 4);
	o += 20;
	f[o] = (uint8_t)(sport >> 8);
	f[o + 1] = (uint8_t)sport;
	f[o + 2] = (uint8_t)(dport >> 8);
	f[o + 3] = (uint8_t)dport;
	f[o + 12] = 5 << 4;
	return o + 20;
}

static void test_toeplitz_ms_vectors(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(ms_v4) / sizeof(ms_v4[0]); i++) {
		uint8_t f[128];
		size_t len = v4_tcp_frame(f, ms_v4[i].src, ms_v4[i].dst, ms_v4[i].sport,
					  ms_v4[i].dport, (int)(i & 1));
		struct eth_info e;

		eth_parse(f, len, &e);
		assert_true(e.has & ETH_HAS_IPV4);
		assert_true(e.has & ETH_HAS_TCP);
		assert_int_equal(eth_rss_hash(&e, ETH_RSS_SRC_IPV4 | ETH_RSS_DST_IPV4,
					      ms_key, sizeof(ms_key)), ms_v4[i].h_ip);
		assert_int_equal(eth_rss_hash(&e, ETH_RSS_SRC_IPV4 | ETH_RSS_DST_IPV4 |
					      ETH_RSS_SRC_PORT_TCP | ETH_RSS_DST_PORT_TCP,
					      ms_key, sizeof(ms_key)), ms_v4[i].h_tcp);
		/* UDP port fields do not apply to a TCP frame */
		assert_int_equal(eth_rss_hash(&e, ETH_RSS_SRC_IPV4 | ETH_RSS_DST_IPV4 |
					      ETH_RSS_SRC_PORT_UDP | ETH_RSS_DST_PORT_UDP,
					      ms_key, sizeof(ms_key)), ms_v4[i].h_ip);
		/* nor IPv6 fields to an IPv4 frame: nothing left, hash 0 */
		assert_int_equal(eth_rss_hash(&e, ETH_RSS_SRC_IPV6, ms_key, sizeof(ms_key)), 0);
	}
}

static void test_parse_v4_vlan(void **state)
{
	uint8_t f[128];
	const uint8_t src[4] = { 10, 0, 0, 1 }, dst[4] = { 10, 0, 0, 2 };
	size_t len = v4_tcp_frame(f, src, dst, 1234, 80, 1);
	struct eth_info e;

	(void)state;
	eth_parse(f, len, &e);
	assert_int_equal(e.has, ETH_HAS_VLAN | ETH_HAS_IPV4 | ETH_HAS_TCP);
	assert_memory_equal(e.dmac, "\x01\x00\x5e\x00\x00\x01", 6);
	assert_memory_equal(e.smac, "\x02\x00\x00\x00\x00\x02", 6);
	assert_int_equal(e.vlan_tag, htons(0xa007));
	assert_int_equal(e.ether_type, htons(0x0800));
	assert_int_equal(e.ip4_src, htonl(0x0a000001));
	assert_int_equal(e.ip4_dst, htonl(0x0a000002));
	assert_int_equal(e.ip4_proto, 6);
	assert_int_equal(e.ip4_tos, 0x10);
	assert_int_equal(e.ip4_ttl, 64);
	assert_int_equal(e.ip4_flags, 2);	/* DF */
	assert_int_equal(e.sport, htons(1234));
	assert_int_equal(e.dport, htons(80));
	assert_true(eth_is_multicast(&e));
	/* cut inside the TCP header: IPv4 still there, no ports */
	eth_parse(f, len - 1, &e);
	assert_int_equal(e.has, ETH_HAS_VLAN | ETH_HAS_IPV4);
	assert_int_equal(e.sport, 0);
	/* cut inside the Ethernet header: nothing */
	eth_parse(f, 13, &e);
	assert_int_equal(e.has, 0);
	assert_int_equal(e.ether_type, 0);
}

static void test_parse_v4_fragment(void **state)
{
	uint8_t f[128];
	const uint8_t a[4] = { 1, 1, 1, 1 };
	size_t len = v4_tcp_frame(f, a, a, 1, 2, 0);
	struct eth_info e;

	(void)state;
	f[14 + 7] = 0x10;			/* fragment offset 16: no L4 */
	eth_parse(f, len, &e);
	assert_int_equal(e.has, ETH_HAS_IPV4);
	f[14 + 7] = 0;
	f[14] = 0x44;				/* IHL 4: not IPv4 at all */
	eth_parse(f, len, &e);
	assert_int_equal(e.has, 0);
	assert_int_equal(e.ether_type, htons(0x0800));
}

static void test_parse_v6_udp(void **state)
{
	uint8_t f[14 + 40 + 8 + 4];
	struct eth_info e;

	(void)state;
	memset(f, 0, sizeof(f));
	memcpy(f, "\x33\x33\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x86\xdd", 14);
	/* version 6, traffic class 0xab, flow label 0x12345 */
	memcpy(f + 14, "\x6a\xb1\x23\x45\x00\x0c\x11\x05", 8);
	f[14 + 8] = 0xa0;			/* source a000::1 */
	f[14 + 23] = 1;
	f[14 + 24] = 0xb0;			/* destination b000::2 */
	f[14 + 39] = 2;
	memcpy(f + 54, "\x04\xd2\x16\x2e\x00\x0c\x00\x00", 8);	/* 1234 -> 5678 */
	eth_parse(f, sizeof(f), &e);
	assert_int_equal(e.has, ETH_HAS_IPV6 | ETH_HAS_UDP);
	assert_int_equal(e.ip6_tclass, 0xab);
	assert_int_equal(e.ip6_flow, htonl(0x12345));
	assert_int_equal(e.ip6_next, 17);
	assert_int_equal(e.ip6_hop, 5);
	assert_int_equal(e.ip6_src[0], 0xa0);
	assert_int_equal(e.ip6_dst[15], 2);
	assert_int_equal(e.sport, htons(1234));
	assert_int_equal(e.dport, htons(5678));
	/* the IPv6 hash covers 16 + 16 + 2 + 2 bytes: any key bit past the
	 * 36th byte's 32-bit window is unused, so a 40-byte key suffices */
	assert_int_not_equal(eth_rss_hash(&e, ETH_RSS_SRC_IPV6 | ETH_RSS_DST_IPV6 |
					  ETH_RSS_SRC_PORT_UDP | ETH_RSS_DST_PORT_UDP,
					  ms_key, sizeof(ms_key)), 0);
}

/* Toeplitz is linear: the hash of a XOR b is the XOR of the hashes. */
static void test_toeplitz_linear(void **state)
{
	uint8_t a[12], b[12], x[12];

	(void)state;
	for (int i = 0; i < 12; i++) {
		a[i] = (uint8_t)(i * 37 + 1);
		b[i] = (uint8_t)(i * 91 + 7);
		x[i] = a[i] ^ b[i];
	}
	assert_int_equal(eth_toeplitz(ms_key, 40, x, 12),
			 eth_toeplitz(ms_key, 40, a, 12) ^ eth_toeplitz(ms_key, 40, b, 12));
	/* the first input bit alone selects the key's first 32 bits */
	memset(a, 0, sizeof(a));
	a[0] = 0x80;
	assert_int_equal(eth_toeplitz(ms_key, 40, a, 12), 0x6d5a56da);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_toeplitz_ms_vectors),
		cmocka_unit_test(test_parse_v4_vlan),
		cmocka_unit_test(test_parse_v4_fragment),
		cmocka_unit_test(test_parse_v6_udp),
		cmocka_unit_test(test_toeplitz_linear),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
