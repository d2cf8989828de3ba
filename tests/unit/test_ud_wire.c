/* Unit tests for the UD datagram header and GRH area codecs (wire/ud.h).
 * The byte vectors are written out by hand from the layout in wire/ud.h
 * and DESIGN.md, not produced by the encoder; the IPv4 checksum of the
 * GRH vector was worked out on paper (RFC 1071). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "wire/ud.h"

/* SEND with immediate 0xcafebabe, solicited, flow label 0x12345, from QP
 * 0x0a0b01 to QP 0x0c0d02, Q_Key 0x11111111, 3 payload bytes. */
static const uint8_t hdr_imm[] = {
	0x53, 0x55, 0x01, 0x65,
	0x80, 0x01, 0x23, 0x45,
	0x00, 0x0c, 0x0d, 0x02,
	0x00, 0x0a, 0x0b, 0x01,
	0x11, 0x11, 0x11, 0x11,
	0xca, 0xfe, 0xba, 0xbe,
	0x00, 0x00, 0x00, 0x03,
	'a', 'b', 'c',
};

static void test_decode_vector(void **state)
{
	struct ud_hdr h;

	assert_int_equal(ud_hdr_decode(hdr_imm, sizeof(hdr_imm), &h), UD_HDR_LEN);
	assert_int_equal(h.opcode, UD_OP_SEND_IMM);
	assert_true(h.se);
	assert_int_equal(h.flow_label, 0x12345);
	assert_int_equal(h.dst_qpn, 0x0c0d02);
	assert_int_equal(h.src_qpn, 0x0a0b01);
	assert_int_equal(h.qkey, 0x11111111);
	assert_int_equal(h.imm, 0xcafebabe);
	assert_int_equal(h.len, 3);
}

static void test_encode_vector(void **state)
{
	struct ud_hdr h = {
		.opcode = UD_OP_SEND_IMM, .se = true, .flow_label = 0x12345,
		.dst_qpn = 0x0c0d02, .src_qpn = 0x0a0b01, .qkey = 0x11111111,
		.imm = 0xcafebabe, .len = 3,
	};
	uint8_t b[UD_HDR_LEN];

	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), UD_HDR_LEN);
	assert_memory_equal(b, hdr_imm, UD_HDR_LEN);
	/* a plain SEND carries no immediate, whatever h.imm says */
	h.opcode = UD_OP_SEND;
	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), UD_HDR_LEN);
	assert_int_equal(b[3], 0x64);
	assert_int_equal(b[20] | b[21] | b[22] | b[23], 0);
}

static void test_decode_rejects(void **state)
{
	uint8_t b[UD_HDR_LEN + UD_MAX_PAYLOAD + 1];
	struct ud_hdr h;

	memcpy(b, hdr_imm, sizeof(hdr_imm));
	for (size_t n = 0; n < UD_HDR_LEN; n++)
		assert_int_equal(ud_hdr_decode(b, n, &h), -EBADMSG);
	assert_int_equal(ud_hdr_decode(b, sizeof(hdr_imm) - 1, &h), -EBADMSG);
	assert_int_equal(ud_hdr_decode(b, sizeof(hdr_imm) + 1, &h), -EBADMSG);
#define BAD(off, val, err)						\
	do {								\
		memcpy(b, hdr_imm, sizeof(hdr_imm));			\
		b[off] = (val);						\
		assert_int_equal(ud_hdr_decode(b, sizeof(hdr_imm), &h), err); \
	} while (0)
	BAD(0, 0x54, -EPROTO);		/* magic */
	BAD(1, 0x00, -EPROTO);
	BAD(2, 0x02, -EPROTO);		/* version */
	BAD(3, 0x04, -EPROTO);		/* RC SEND Only */
	BAD(3, 0x66, -EPROTO);
	BAD(4, 0x40, -EPROTO);		/* reserved bits */
	BAD(5, 0x10, -EPROTO);
	BAD(8, 0x01, -EPROTO);		/* destination QPN above 24 bits */
	BAD(12, 0x80, -EPROTO);		/* source QPN above 24 bits */
	/* a payload length above the MTU, even if the datagram has it */
	memcpy(b, hdr_imm, UD_HDR_LEN);
	b[24] = 0; b[25] = 0; b[26] = 0x10; b[27] = 0x01;
	assert_int_equal(ud_hdr_decode(b, UD_HDR_LEN + 4097, &h), -EMSGSIZE);
	b[24] = 0xff;
	assert_int_equal(ud_hdr_decode(b, sizeof(hdr_imm), &h), -EMSGSIZE);
}

static void test_encode_rejects(void **state)
{
	struct ud_hdr h = { .opcode = UD_OP_SEND, .len = 1 };
	uint8_t b[UD_HDR_LEN];

	assert_int_equal(ud_hdr_encode(b, UD_HDR_LEN - 1, &h), -ENOSPC);
	h.dst_qpn = 0x1000000;
	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), -EINVAL);
	h.dst_qpn = 1;
	h.flow_label = 0x100000;
	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), -EINVAL);
	h.flow_label = 0;
	h.len = UD_MAX_PAYLOAD + 1;
	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), -EINVAL);
	h.len = 0;
	h.opcode = 0x04;
	assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), -EINVAL);
}

/* 192.0.2.1 -> 192.0.2.2, TTL 64, TOS 0, 100 payload bytes with an
 * immediate: total length 20 + 8 + 12 + 8 + 4 + 100 + 4 = 156 (0x9c).
 * Checksum: 0x4500 + 0x009c + 0x4000 + 0x4011 + 0xc000 + 0x0201 + 0xc000
 * + 0x0202 = 0x249b0 -> 0x49b2 -> ~ = 0xb64d. */
static const uint8_t grh_v4[UD_GRH_LEN] = {
	[20] = 0x45, 0x00, 0x00, 0x9c, 0x00, 0x00, 0x40, 0x00,
	0x40, 0x11, 0xb6, 0x4d, 192, 0, 2, 1, 192, 0, 2, 2,
};

static const struct ud_grh_info info_v4 = {
	.sgid = { [10] = 0xff, [11] = 0xff, 192, 0, 2, 1 },
	.dgid = { [10] = 0xff, [11] = 0xff, 192, 0, 2, 2 },
	.hop_limit = 64, .payload = 100, .imm = true,
};

static void test_grh_v4(void **state)
{
	uint8_t g[UD_GRH_LEN];
	struct ud_grh_info back;

	ud_grh_build(g, &info_v4);
	assert_memory_equal(g, grh_v4, UD_GRH_LEN);
	assert_int_equal(ud_grh_parse(g, &back), 4);
	assert_memory_equal(back.sgid, info_v4.sgid, 16);
	assert_memory_equal(back.dgid, info_v4.dgid, 16);
	assert_int_equal(back.hop_limit, 64);
	/* a corrupt checksum under a version-6 word is not IPv4 (rdma-core) */
	memcpy(g, grh_v4, UD_GRH_LEN);
	g[0] = 0x60;
	assert_int_equal(ud_grh_parse(g, &back), 4);
	g[31] ^= 1;
	assert_int_equal(ud_grh_parse(g, &back), 6);
	memset(g, 0, sizeof(g));
	assert_int_equal(ud_grh_parse(g, &back), -EPROTONOSUPPORT);
}

static void test_grh_v6(void **state)
{
	struct ud_grh_info in = {
		.sgid = { 0xfd, 0, [15] = 1 }, .dgid = { 0xfd, 0, [15] = 2 },
		.tclass = 0xa5, .hop_limit = 7, .flow_label = 0xabcde, .payload = 10,
	}, back;
	uint8_t g[UD_GRH_LEN];

	ud_grh_build(g, &in);
	/* 6 | a5 | abcde, paylen 8+12+8+10+4 = 42, next header UDP, hop 7 */
	assert_int_equal(g[0], 0x6a);
	assert_int_equal(g[1], 0x5a);
	assert_int_equal(g[2], 0xbc);
	assert_int_equal(g[3], 0xde);
	assert_int_equal(g[4], 0);
	assert_int_equal(g[5], 42);
	assert_int_equal(g[6], 17);
	assert_int_equal(g[7], 7);
	assert_memory_equal(g + 8, in.sgid, 16);
	assert_memory_equal(g + 24, in.dgid, 16);
	assert_int_equal(ud_grh_parse(g, &back), 6);
	assert_int_equal(back.tclass, 0xa5);
	assert_int_equal(back.flow_label, 0xabcde);
	assert_int_equal(back.next_hdr, 17);
	assert_memory_equal(back.sgid, in.sgid, 16);
	assert_memory_equal(back.dgid, in.dgid, 16);
}

static void test_round_trip(void **state)
{
	uint8_t b[UD_HDR_LEN + 64];

	for (uint32_t i = 0; i < 2000; i++) {
		struct ud_hdr h = {
			.opcode = i & 1 ? UD_OP_SEND_IMM : UD_OP_SEND, .se = i & 2,
			.flow_label = (i * 2654435761u) & UD_FLOW_MASK,
			.dst_qpn = (i * 40503u) & UD_QPN_MASK, .src_qpn = (i * 7919u) & UD_QPN_MASK,
			.qkey = i * 0x9e3779b9u, .imm = i & 1 ? ~i : 0, .len = i % 64,
		}, back;

		assert_int_equal(ud_hdr_encode(b, sizeof(b), &h), UD_HDR_LEN);
		assert_int_equal(ud_hdr_decode(b, UD_HDR_LEN + h.len, &back), UD_HDR_LEN);
		assert_int_equal(back.opcode, h.opcode);
		assert_int_equal(back.se, h.se);
		assert_int_equal(back.flow_label, h.flow_label);
		assert_int_equal(back.dst_qpn, h.dst_qpn);
		assert_int_equal(back.src_qpn, h.src_qpn);
		assert_int_equal(back.qkey, h.qkey);
		assert_int_equal(back.imm, h.imm);
		assert_int_equal(back.len, h.len);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_vector),
		cmocka_unit_test(test_encode_vector),
		cmocka_unit_test(test_decode_rejects),
		cmocka_unit_test(test_encode_rejects),
		cmocka_unit_test(test_grh_v4),
		cmocka_unit_test(test_grh_v6),
		cmocka_unit_test(test_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
