/* Unit tests for softrnic's extension headers (src/wire/srext.c): the
 * byte layouts DESIGN.md documents, worked out by hand, and the frames a
 * decoder must refuse. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "wire/srext.h"

/* ACK of request msn 0x01020304, status 2: control 0x41 (L, DV 1), RDMAP
 * 0x4e (RV 1, opcode 0xe), RsvdULP 0, QN 4, MSN, MO = status. */
static void test_ack_bytes(void **state)
{
	static const uint8_t want[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x4e, 0, 0, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4, 0, 0, 0, 2,
	};
	struct ddp_hdr h = { .last = true, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN,
			     .msn = 0x01020304, .mo = 2 };
	uint8_t buf[32];

	(void)state;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), DDP_UNTAGGED_HDR_LEN);
	assert_memory_equal(buf, want, sizeof(want));
	memset(&h, 0xa5, sizeof(h));
	assert_int_equal(sr_ext_hdr_decode(want, sizeof(want), &h), DDP_UNTAGGED_HDR_LEN);
	assert_int_equal(h.opcode, SR_EXT_ACK);
	assert_int_equal(h.qn, SR_EXT_QN);
	assert_int_equal(h.msn, 0x01020304);
	assert_int_equal(h.mo, 2);
}

/* XRC header naming SRQ 0xabcdef: opcode 0xe on queue 5, MSN 0, MO the
 * SRQ number. */
static void test_xrc_bytes(void **state)
{
	static const uint8_t want[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x4e, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0xab, 0xcd, 0xef,
	};
	struct ddp_hdr h = { .last = true, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN_XRC,
			     .mo = 0xabcdef };
	uint8_t buf[32];

	(void)state;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), DDP_UNTAGGED_HDR_LEN);
	assert_memory_equal(buf, want, sizeof(want));
	memset(&h, 0, sizeof(h));
	assert_int_equal(sr_ext_hdr_decode(want, sizeof(want), &h), DDP_UNTAGGED_HDR_LEN);
	assert_int_equal(h.opcode, SR_EXT_ACK);
	assert_int_equal(h.qn, SR_EXT_QN_XRC);
	assert_int_equal(h.mo, 0xabcdef);
	assert_int_equal(h.msn, 0);
}

/* An XRC header must carry MSN 0 and a 24-bit SRQ number; queue 5 means
 * nothing for the other opcodes. */
static void test_xrc_rejects(void **state)
{
	uint8_t b[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x4e, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1,
	};
	struct ddp_hdr h = { .last = true, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN_XRC,
			     .mo = 0x1000000 };
	uint8_t c[DDP_UNTAGGED_HDR_LEN];
	uint8_t buf[32];

	(void)state;
	assert_int_equal(sr_ext_hdr_decode(b, sizeof(b), &h), DDP_UNTAGGED_HDR_LEN);
	memcpy(c, b, sizeof(c));
	c[13] = 1;				/* MSN 1 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, b, sizeof(c));
	c[14] = 1;				/* SRQ number above 24 bits */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, b, sizeof(c));
	c[1] = 0x4f;				/* RNR on queue 5 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, b, sizeof(c));
	c[9] = 7;				/* no queue 7 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);

	h = (struct ddp_hdr){ .last = true, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN_XRC,
			      .mo = 0x1000000 };
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h.mo = 1;
	h.msn = 7;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h.msn = 0;
	h.opcode = SR_EXT_RNR;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
}

/* Atomic write of the bytes 11..18 to STag 0x0a0b0c0d, TO
 * 0x0102030405060708, request msn 9: control 0x41, RDMAP 0x4e, RsvdULP =
 * the STag, QN 6, MSN 9, MO 0; then the 16-byte body, TO big-endian and
 * the 8 bytes as given. */
static void test_awrite_bytes(void **state)
{
	static const uint8_t want_hdr[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x4e, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 6, 0, 0, 0, 9, 0, 0, 0, 0,
	};
	static const uint8_t want_body[SR_AWRITE_LEN] = {
		1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18,
	};
	struct ddp_hdr h = { .last = true, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN_AWRITE,
			     .msn = 9, .inv_stag = 0x0a0b0c0d };
	struct sr_awrite a = { .to = 0x0102030405060708ULL,
			       .data = { 11, 12, 13, 14, 15, 16, 17, 18 } };
	uint8_t buf[32];

	(void)state;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), DDP_UNTAGGED_HDR_LEN);
	assert_memory_equal(buf, want_hdr, sizeof(want_hdr));
	assert_int_equal(sr_awrite_encode(buf, sizeof(buf), &a), SR_AWRITE_LEN);
	assert_memory_equal(buf, want_body, sizeof(want_body));
	assert_int_equal(sr_awrite_encode(buf, SR_AWRITE_LEN - 1, &a), -ENOSPC);

	memset(&h, 0xa5, sizeof(h));
	assert_int_equal(sr_ext_hdr_decode(want_hdr, sizeof(want_hdr), &h), DDP_UNTAGGED_HDR_LEN);
	assert_int_equal(h.opcode, SR_EXT_ACK);
	assert_int_equal(h.qn, SR_EXT_QN_AWRITE);
	assert_int_equal(h.msn, 9);
	assert_int_equal(h.mo, 0);
	assert_int_equal(h.inv_stag, 0x0a0b0c0d);
	assert_true(h.last);
	memset(&a, 0, sizeof(a));
	assert_int_equal(sr_awrite_decode(want_body, sizeof(want_body), &a), SR_AWRITE_LEN);
	assert_true(a.to == 0x0102030405060708ULL);
	assert_memory_equal(a.data, want_body + 8, 8);
}

/* An atomic write is one FPDU with MO 0 and a 16-byte body; queue 6 is
 * for it alone. */
static void test_awrite_rejects(void **state)
{
	static const uint8_t good[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x4e, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	uint8_t c[DDP_UNTAGGED_HDR_LEN], body[SR_AWRITE_LEN + 1] = { 0 }, buf[32];
	struct ddp_hdr h;
	struct sr_awrite a;

	(void)state;
	assert_int_equal(sr_ext_hdr_decode(good, sizeof(good), &h), DDP_UNTAGGED_HDR_LEN);
	memcpy(c, good, sizeof(c));
	c[0] = 0x01;				/* L clear: not one FPDU */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, good, sizeof(c));
	c[17] = 8;				/* MO not 0 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, good, sizeof(c));
	c[1] = 0x4f;				/* RNR on queue 6 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, good, sizeof(c));
	c[1] = 0x4c;				/* SEND with immediate on queue 6 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);
	memcpy(c, good, sizeof(c));
	c[9] = 7;				/* no queue 7 */
	assert_int_equal(sr_ext_hdr_decode(c, sizeof(c), &h), -EBADMSG);

	assert_int_equal(sr_awrite_decode(body, SR_AWRITE_LEN, &a), SR_AWRITE_LEN);
	assert_int_equal(sr_awrite_decode(body, SR_AWRITE_LEN - 1, &a), -EBADMSG);
	assert_int_equal(sr_awrite_decode(body, SR_AWRITE_LEN + 1, &a), -EBADMSG);
	assert_int_equal(sr_awrite_decode(body, 0, &a), -EBADMSG);

	h = (struct ddp_hdr){ .last = false, .opcode = SR_EXT_ACK, .qn = SR_EXT_QN_AWRITE };
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h.last = true;
	h.mo = 1;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h.mo = 0;
	h.opcode = SR_EXT_RNR;
	assert_int_equal(sr_ext_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ack_bytes),
		cmocka_unit_test(test_xrc_bytes),
		cmocka_unit_test(test_xrc_rejects),
		cmocka_unit_test(test_awrite_bytes),
		cmocka_unit_test(test_awrite_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
