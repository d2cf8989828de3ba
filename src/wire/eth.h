/* Ethernet frames as raw packet QPs send and receive them: the header
 * fields that flow steering matches on (ibv_create_flow(3)) and the
 * Toeplitz hash that RSS spreads frames with (ibv_create_qp_ex(3),
 * rx_hash_conf; Microsoft's "Verifying the RSS Hash Calculation").
 *
 * A frame is parsed once into eth_info: Ethernet II, at most one 802.1Q
 * tag, then IPv4 (options skipped, first fragment only for ports) or IPv6
 * (fixed header; no extension headers walked), then TCP or UDP ports.
 * Whatever is absent or truncated is simply not "present": a frame is
 * never rejected for what it carries, since a NIC delivers any frame.
 *
 * Pure functions over bytes: no I/O, no allocation. Fuzzed
 * (tests/fuzz/fuzz_eth.c).
 */
#ifndef SOFTRNIC_WIRE_ETH_H
#define SOFTRNIC_WIRE_ETH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETH_HDR_LEN		14
#define ETH_VLAN_LEN		4
#define ETH_TYPE_IPV4		0x0800
#define ETH_TYPE_IPV6		0x86dd
#define ETH_TYPE_VLAN		0x8100
#define ETH_RSS_KEY_LEN		40	/* 320 bits: enough for IPv6 + ports */

enum {
	ETH_HAS_VLAN = 1 << 0,
	ETH_HAS_IPV4 = 1 << 1,
	ETH_HAS_IPV6 = 1 << 2,
	ETH_HAS_TCP = 1 << 3,
	ETH_HAS_UDP = 1 << 4,
};

/* Multi-byte fields are kept as they are on the wire (big-endian bytes),
 * like the ibv_flow_spec_* values they are compared with. */
struct eth_info {
	uint32_t has;			/* ETH_HAS_* */
	uint8_t dmac[6], smac[6];
	uint16_t ether_type;		/* network order; inner type if tagged */
	uint16_t vlan_tag;		/* network order TCI, if ETH_HAS_VLAN */
	/* IPv4 */
	uint32_t ip4_src, ip4_dst;	/* network order */
	uint8_t ip4_proto, ip4_tos, ip4_ttl, ip4_flags;
	/* IPv6 */
	uint8_t ip6_src[16], ip6_dst[16];
	uint32_t ip6_flow;		/* network order, 20 bits */
	uint8_t ip6_next, ip6_tclass, ip6_hop;
	/* TCP or UDP */
	uint16_t sport, dport;		/* network order */
};

/* Parse a frame of len bytes. Always succeeds; fields of layers that are
 * absent stay zero and their ETH_HAS_ bit clear. */
void eth_parse(const uint8_t *frame, size_t len, struct eth_info *f);

static inline bool eth_is_multicast(const struct eth_info *f)
{
	return f->dmac[0] & 1;		/* group bit: multicast and broadcast */
}

/* The RSS hash input fields (the ibv_rx_hash_fields bits they stand
 * for are translated by the caller, which knows verbs.h). */
enum {
	ETH_RSS_SRC_IPV4 = 1 << 0,
	ETH_RSS_DST_IPV4 = 1 << 1,
	ETH_RSS_SRC_IPV6 = 1 << 2,
	ETH_RSS_DST_IPV6 = 1 << 3,
	ETH_RSS_SRC_PORT_TCP = 1 << 4,
	ETH_RSS_DST_PORT_TCP = 1 << 5,
	ETH_RSS_SRC_PORT_UDP = 1 << 6,
	ETH_RSS_DST_PORT_UDP = 1 << 7,
};

/* Toeplitz hash of in[0..len) under key (key_len bytes; bits beyond it
 * count as zero). */
uint32_t eth_toeplitz(const uint8_t *key, size_t key_len, const uint8_t *in, size_t len);

/* The RSS hash of a frame: the Toeplitz hash over the selected fields the
 * frame has, in the order Microsoft's RSS specification gives (source
 * address, destination address, source port, destination port). Fields of
 * a layer the frame lacks are left out; with none left, the hash is 0. */
uint32_t eth_rss_hash(const struct eth_info *f, uint32_t fields,
		      const uint8_t *key, size_t key_len);

#endif
