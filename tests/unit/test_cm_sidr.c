/* Unit tests for the datagram CM's frames (src/cm/cm_sidr.c): the
 * request and reply as DESIGN.md's "Datagram CM wire format" gives them,
 * and every way a decoder must refuse a datagram. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cm/cm_sidr.h"

static void test_request(void **state)
{
	struct sidr_msg m = { .type = SIDR_REQ, .tid = 0x01020304, .qpn = 0xabcdef,
			      .qkey = 0x01234567, .pd = (const uint8_t *)"hello", .pd_len = 5 };
	static const uint8_t want[] = { 0x53, 0x43, 1, 1, 1, 2, 3, 4, 0, 0xab, 0xcd, 0xef,
					1, 0x23, 0x45, 0x67, 0, 5, 0, 0, 'h', 'e', 'l', 'l', 'o' };
	uint8_t buf[SIDR_FRAME_MAX];
	struct sidr_msg d;
	ssize_t n;

	(void)state;
	n = sidr_encode(buf, sizeof(buf), &m);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(sidr_decode(buf, (size_t)n, &d), 0);
	assert_int_equal(d.type, SIDR_REQ);
	assert_int_equal(d.tid, 0x01020304);
	assert_int_equal(d.qpn, 0xabcdef);
	assert_int_equal(d.qkey, 0x01234567);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.pd_len, 5);
	assert_memory_equal(d.pd, "hello", 5);
}

static void test_reply(void **state)
{
	uint8_t pd[SIDR_REP_PD_MAX];
	struct sidr_msg m = { .type = SIDR_REP, .status = SIDR_REJECT, .tid = 9, .pd = pd,
			      .pd_len = SIDR_REP_PD_MAX };
	uint8_t buf[SIDR_FRAME_MAX];
	struct sidr_msg d;
	ssize_t n;

	(void)state;
	memset(pd, 0x5a, sizeof(pd));
	n = sidr_encode(buf, sizeof(buf), &m);
	assert_int_equal(n, SIDR_HDR_LEN + SIDR_REP_PD_MAX);
	assert_int_equal(sidr_decode(buf, (size_t)n, &d), 0);
	assert_int_equal(d.status, SIDR_REJECT);
	assert_memory_equal(d.pd, pd, sizeof(pd));
	/* no private data: pd NULL */
	m.pd_len = 0;
	m.status = SIDR_SUCCESS;
	n = sidr_encode(buf, sizeof(buf), &m);
	assert_int_equal(n, SIDR_HDR_LEN);
	assert_int_equal(sidr_decode(buf, (size_t)n, &d), 0);
	assert_null(d.pd);
}

static void test_encode_limits(void **state)
{
	uint8_t pd[SIDR_REQ_PD_MAX + 1] = { 0 };
	uint8_t buf[SIDR_FRAME_MAX + 8];
	struct sidr_msg m = { .type = SIDR_REQ, .pd = pd, .pd_len = SIDR_REQ_PD_MAX };

	(void)state;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), SIDR_FRAME_MAX);
	assert_int_equal(sidr_encode(buf, SIDR_FRAME_MAX - 1, &m), -ENOSPC);
	m.pd_len = SIDR_REQ_PD_MAX + 1;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.type = SIDR_REP;
	m.pd_len = SIDR_REP_PD_MAX + 1;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.pd_len = 0;
	m.qpn = 0x1000000;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.qpn = 1;
	m.status = 3;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.type = SIDR_REQ;
	m.status = 1;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.status = 0;
	m.type = 3;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
	m.type = SIDR_REQ;
	m.pd = NULL;
	m.pd_len = 1;
	assert_int_equal(sidr_encode(buf, sizeof(buf), &m), -EINVAL);
}

/* Flip one thing in a good frame: the decoder must refuse it. */
static void test_decode_refuses(void **state)
{
	struct sidr_msg m = { .type = SIDR_REQ, .tid = 1, .qpn = 2, .qkey = 3,
			      .pd = (const uint8_t *)"ab", .pd_len = 2 };
	uint8_t good[SIDR_FRAME_MAX + 1], b[SIDR_FRAME_MAX + 1];
	struct sidr_msg d;
	size_t n = (size_t)sidr_encode(good, sizeof(good), &m);

	(void)state;
	assert_int_equal(sidr_decode(good, n, &d), 0);
	for (size_t len = 0; len < n; len++)
		assert_int_equal(sidr_decode(good, len, &d), -EBADMSG);	/* short */
	memcpy(b, good, n);
	b[n] = 0;
	assert_int_equal(sidr_decode(b, n + 1, &d), -EBADMSG);		/* long */
	struct { size_t at; uint8_t v; } flips[] = {
		{ 0, 0x54 }, { 1, 0 }, { 2, 2 }, { 3, 0 }, { 3, 3 }, { 8, 1 },
		{ 16, 1 }, { 17, 3 }, { 17, 1 }, { 18, 1 }, { 19, 0x80 },
	};
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		memcpy(b, good, n);
		b[flips[i].at] = flips[i].v;
		assert_int_equal(sidr_decode(b, n, &d), -EBADMSG);
	}
	/* a reply with status 3, or more private data than a reply holds */
	memcpy(b, good, n);
	b[3] = SIDR_REP;
	b[16] = 3;
	assert_int_equal(sidr_decode(b, n, &d), -EBADMSG);
	memset(b, 0, sizeof(b));
	memcpy(b, good, SIDR_HDR_LEN);
	b[3] = SIDR_REP;
	b[17] = SIDR_REP_PD_MAX + 1;
	assert_int_equal(sidr_decode(b, SIDR_HDR_LEN + SIDR_REP_PD_MAX + 1, &d), -EBADMSG);
	b[3] = SIDR_REQ;
	assert_int_equal(sidr_decode(b, SIDR_HDR_LEN + SIDR_REP_PD_MAX + 1, &d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_encode_limits),
		cmocka_unit_test(test_decode_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
