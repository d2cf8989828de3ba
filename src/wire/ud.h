/* UD datagrams (DESIGN.md "UD wire format") and the 40-byte GRH area that
 * a UD receive writes at the start of each receive buffer.
 *
 * A UD message is one UDP datagram: a 28-byte softrnic header, then the
 * payload (at most the port MTU, 4096 bytes). Every field is big-endian:
 *
 *   off size
 *    0   2  magic 0x5355 ("SU")
 *    2   1  version (1)
 *    3   1  opcode: IBTA BTH opcodes 0x64 UD SEND Only, 0x65 UD SEND Only
 *           with Immediate (IBTA Vol 1 §9.2, Table 38)
 *    4   4  bit 31 solicited event; bits 19..0 flow label; others 0
 *    8   4  destination QPN (24 bits; 0xFFFFFF = multicast)
 *   12   4  source QPN (24 bits)
 *   16   4  Q_Key
 *   20   4  immediate data (0 without)
 *   24   4  payload length (must equal the datagram's length - 28)
 *
 * Pure functions over bytes: no I/O, no allocation. Fuzzed
 * (tests/fuzz/fuzz_ud.c).
 */
#ifndef SOFTRNIC_WIRE_UD_H
#define SOFTRNIC_WIRE_UD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define UD_MAGIC		0x5355
#define UD_VERSION		1
#define UD_HDR_LEN		28
#define UD_MAX_PAYLOAD		4096		/* the port's active MTU */
#define UD_OP_SEND		0x64
#define UD_OP_SEND_IMM		0x65
#define UD_QPN_MCAST		0xffffffU	/* IBTA: the multicast QPN */
#define UD_QPN_MASK		0xffffffU
#define UD_F_SE			(1U << 31)
#define UD_FLOW_MASK		0xfffffU

struct ud_hdr {
	uint8_t opcode;
	bool se;
	uint32_t flow_label;
	uint32_t dst_qpn;
	uint32_t src_qpn;
	uint32_t qkey;
	uint32_t imm;			/* as carried: network order on the wire,
					 * stored here in host order of the
					 * 32-bit big-endian field */
	uint32_t len;
};

/* Write the header into buf (cap >= UD_HDR_LEN). Returns UD_HDR_LEN, or
 * -EINVAL if a field does not fit its width, -ENOSPC if cap is short. */
ssize_t ud_hdr_encode(uint8_t *buf, size_t cap, const struct ud_hdr *h);
/* Check a whole datagram of len bytes and decode its header. Returns the
 * header length (the payload follows it) or a negative errno:
 * -EBADMSG truncated or length mismatch, -EPROTO bad magic, version,
 * opcode or reserved bits, -EMSGSIZE payload above UD_MAX_PAYLOAD. */
ssize_t ud_hdr_decode(const uint8_t *buf, size_t len, struct ud_hdr *h);

/* The GRH area of a UD receive (struct ibv_grh, 40 bytes), filled as a
 * RoCEv2 device fills it (rdma-core's ibv_init_ah_from_wc reads it so):
 * an IPv6 sender writes the IPv6 header (version 6, next header UDP);
 * an IPv4 sender leaves the first 20 bytes zero and writes the IPv4
 * header, with a valid checksum, in the last 20. Addresses are GIDs
 * (IPv4-mapped for IPv4). paylen is the RoCEv2 UDP payload that would
 * have carried the message: BTH + DETH (+ immediate) + payload + ICRC. */
#define UD_GRH_LEN		40
struct ud_grh_info {
	uint8_t sgid[16], dgid[16];
	uint8_t tclass, hop_limit;
	uint8_t next_hdr;		/* parse only: IPv6 next header */
	uint32_t flow_label;
	uint32_t payload;		/* message bytes */
	bool imm;
};
void ud_grh_build(uint8_t grh[UD_GRH_LEN], const struct ud_grh_info *g);
/* Read a GRH area back: 4 or 6 (the IP version), or -EPROTONOSUPPORT.
 * The same tests as rdma-core's ibv_init_ah_from_wc: not version 6 is
 * IPv4 if the header at byte 20 says 4; version 6 is still IPv4 when
 * the header at byte 20 has IHL 5 and a correct checksum. */
int ud_grh_parse(const uint8_t grh[UD_GRH_LEN], struct ud_grh_info *g);
/* Is this GID an IPv4-mapped (::ffff:a.b.c.d) address? */
bool ud_gid_v4mapped(const uint8_t gid[16]);

/* The sl of a UD receive's work completion on a RoCE port: the L3 header
 * type of the datagram. IBTA Annex A17.4.5.1 (RoCEv2) wants a UD
 * completion to say whether the frame was IPv4, IPv6 or RoCE v1; struct
 * ibv_wc has no field for it, and mlx5 (libmlx5 and the kernel's
 * mlx5_ib, which reads the same CQE bits as the packet type) reports it
 * in sl, where Ethernet has no service level: 0 GRH (RoCE v1), 1 IPv6,
 * 2 IPv4. Programs read it there to know where the destination GID lies
 * in the GRH area (UCX's UD transports do). */
#define UD_WC_SL_IPV6		1
#define UD_WC_SL_IPV4		2

#endif
