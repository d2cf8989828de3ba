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
	c[9] = 6;				/* no queue 6 */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ack_bytes),
		cmocka_unit_test(test_xrc_bytes),
		cmocka_unit_test(test_xrc_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
