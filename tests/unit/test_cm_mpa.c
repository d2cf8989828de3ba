/* Unit tests for the CM's pure helpers (src/cm/cm_mpa.c): the setup
 * frames a CM connection starts with, the private-data limits, IRD/ORD
 * depth rules and event names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <rdma/rdma_cma.h>

#include "cm/cm_mpa.h"

#define KEY_REQ "MPA ID Req Frame"
#define KEY_REP "MPA ID Rep Frame"

/* A request: rev 2, Enhanced, softrnic flag, CRC; IRD 4 / ORD 2 first,
 * then the application's private data as it is. */
static void test_request(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX];
	struct mpa_frame f;
	ssize_t n;

	(void)state;
	n = cm_mpa_encode(buf, sizeof(buf), false, false, true, true, false, 4, 2, "hello", 5);
	assert_int_equal(n, 20 + 4 + 5);
	assert_memory_equal(buf, KEY_REQ, 16);
	assert_int_equal(buf[16], 0x40 | 0x10 | 0x04);
	assert_int_equal(buf[17], 2);
	assert_int_equal(buf[18], 0);
	assert_int_equal(buf[19], 9);
	assert_int_equal(mpa_frame_decode(buf, (size_t)n, &f), n);
	assert_false(f.reply);
	assert_true(f.crc && f.enhanced && f.softrnic);
	assert_false(f.peer2peer || f.markers);
	assert_int_equal(f.ird, 4);
	assert_int_equal(f.ord, 2);
	assert_int_equal(f.pd_len, 5);
	assert_memory_equal(f.pd, "hello", 5);

	/* a plain iWARP peer: no softrnic flag; "reject" means nothing in
	 * a request */
	n = cm_mpa_encode(buf, sizeof(buf), false, true, false, false, true, 1, 1, NULL, 0);
	assert_int_equal(n, 24);
	assert_int_equal(buf[16], 0x10);
}

static void test_reply_and_reject(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX];
	struct mpa_frame f;
	ssize_t n;

	(void)state;
	n = cm_mpa_encode(buf, sizeof(buf), true, false, false, true, false, 16, 1, "ok", 2);
	assert_int_equal(n, 26);
	assert_memory_equal(buf, KEY_REP, 16);
	assert_int_equal(mpa_frame_decode(buf, (size_t)n, &f), n);
	assert_true(f.reply && f.softrnic);
	assert_false(f.reject || f.ece_reject);
	assert_int_equal(f.ird, 16);

	/* rdma_reject_ece between softrnic peers: R | 0x04 | 0x02, and the
	 * reply's 0x01 */
	n = cm_mpa_encode(buf, sizeof(buf), true, true, false, true, true, 0, 0, "no", 2);
	assert_int_equal(buf[16], 0x20 | 0x10 | 0x04 | 0x02 | 0x01);
	assert_int_equal(mpa_frame_decode(buf, (size_t)n, &f), n);
	assert_true(f.reject && f.ece_reject);
	assert_memory_equal(f.pd, "no", 2);

	/* towards a plain peer the ECE bit is not sent */
	n = cm_mpa_encode(buf, sizeof(buf), true, true, false, false, true, 0, 0, NULL, 0);
	assert_int_equal(buf[16], 0x20 | 0x10);
}

/* MPA allows 512 bytes of private data, 4 of them the IRD/ORD word. */
static void test_pd_limits(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX + 8], pd[600] = { 0 };

	(void)state;
	assert_int_equal(cm_pd_limit(true, CM_PD_REQ), 508);
	assert_int_equal(cm_pd_limit(true, CM_PD_REP), 508);
	assert_int_equal(cm_pd_limit(true, CM_PD_REJ), 508);
	assert_int_equal(cm_pd_limit(false, CM_PD_REQ), 56);
	assert_int_equal(cm_pd_limit(false, CM_PD_REP), 196);
	assert_int_equal(cm_pd_limit(false, CM_PD_REJ), 148);
	assert_int_equal(cm_mpa_encode(buf, sizeof(buf), false, false, false, false, false,
				       1, 1, pd, 508), 20 + 512);
	assert_int_equal(cm_mpa_encode(buf, sizeof(buf), false, false, false, false, false,
				       1, 1, pd, 509), -EINVAL);
	/* depths beyond 14 bits are clamped, never wrapped */
	assert_true(cm_mpa_encode(buf, sizeof(buf), false, false, false, false, false,
				  0xffff, 0x4000, NULL, 0) > 0);
	assert_int_equal(buf[20] & 0x3f, 0x3f);
	assert_int_equal(buf[22] & 0x3f, 0x3f);
}

/* The reader asks for the header, then exactly the frame: never a byte
 * of what follows it. */
static void test_need(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX];
	ssize_t n;

	(void)state;
	n = cm_mpa_encode(buf, sizeof(buf), true, false, false, false, false, 1, 1, "abc", 3);
	assert_int_equal(cm_mpa_need(buf, 0), 20);
	assert_int_equal(cm_mpa_need(buf, 19), 20);
	assert_int_equal(cm_mpa_need(buf, 20), (size_t)n);
	assert_int_equal(cm_mpa_need(buf, (size_t)n), (size_t)n);
	/* PD_Length over 512: more than any frame, so the reader stops */
	buf[18] = 0x02;
	buf[19] = 0x01;
	assert_int_equal(cm_mpa_need(buf, 20), CM_MPA_FRAME_MAX + 1);
}

/* A rev 1 request gets a rev 1 answer (RFC 5044 §7.1): no enhanced
 * IRD/ORD word, no softrnic flags, the private data as it is. */
static void test_rev1_answer(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX];
	struct mpa_frame f;
	ssize_t n;

	(void)state;
	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_1, true, false, true, true, true, 8, 8,
			      MPA_RTR_ZERO_WRITE, "pd", 2);
	assert_int_equal(n, 20 + 2);
	assert_memory_equal(buf, "MPA ID Rep Frame", 16);
	assert_int_equal(buf[16], 0x40);	/* C only */
	assert_int_equal(buf[17], 1);
	assert_int_equal(buf[18] << 8 | buf[19], 2);
	assert_memory_equal(buf + 20, "pd", 2);
	assert_true(mpa_frame_decode(buf, (size_t)n, &f) > 0);
	assert_true(f.reply && f.crc && !f.enhanced && !f.softrnic && f.rev == 1);

	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_1, true, true, false, false, false, 0, 0,
			      0, NULL, 0);
	assert_int_equal(n, 20);
	assert_int_equal(buf[16], 0x20);	/* R only */
	assert_int_equal(buf[17], 1);

	/* rev 2 (or a revision never recorded, 0) stays enhanced */
	n = cm_mpa_encode_rev(buf, sizeof(buf), 0, true, false, false, false, false, 3, 4, 0, NULL, 0);
	assert_int_equal(n, 24);
	assert_int_equal(buf[17], 2);
	assert_true(mpa_frame_decode(buf, (size_t)n, &f) > 0 && f.enhanced && f.ird == 3 && f.ord == 4);
}

/* Peer-to-peer (RFC 6581 §3): a reply that agrees carries P and the one
 * RTR type picked; WRITE first, READ next, SEND last; none in rev 1. */
static void test_p2p_reply(void **state)
{
	uint8_t buf[CM_MPA_FRAME_MAX];
	struct mpa_frame f;
	ssize_t n;

	(void)state;
	/* what Linux siw built with peer_to_peer offers: WRITE | READ */
	assert_int_equal(cm_mpa_rtr_pick(MPA_RTR_ZERO_WRITE | MPA_RTR_ZERO_READ), MPA_RTR_ZERO_WRITE);
	assert_int_equal(cm_mpa_rtr_pick(MPA_RTR_MASK), MPA_RTR_ZERO_WRITE);
	assert_int_equal(cm_mpa_rtr_pick(MPA_RTR_ZERO_READ | MPA_RTR_ZERO_SEND), MPA_RTR_ZERO_READ);
	assert_int_equal(cm_mpa_rtr_pick(MPA_RTR_ZERO_SEND), MPA_RTR_ZERO_SEND);
	assert_int_equal(cm_mpa_rtr_pick(0), MPA_RTR_ZERO_WRITE);

	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_2, true, false, false, false, false, 1, 2,
			      MPA_RTR_ZERO_WRITE, NULL, 0);
	assert_int_equal(n, 24);
	/* IRD 1 with P (0x8000), ORD 2 with the WRITE RTR bit (0x8000) */
	assert_int_equal(buf[20] << 8 | buf[21], 0x8001);
	assert_int_equal(buf[22] << 8 | buf[23], 0x8002);
	assert_true(mpa_frame_decode(buf, (size_t)n, &f) > 0);
	assert_true(f.peer2peer && f.rtr == MPA_RTR_ZERO_WRITE && f.ird == 1 && f.ord == 2);

	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_2, true, false, false, false, false, 1, 2,
			      MPA_RTR_ZERO_READ, NULL, 0);
	assert_int_equal(buf[20] << 8 | buf[21], 0x8001);
	assert_int_equal(buf[22] << 8 | buf[23], 0x4002);
	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_2, true, false, false, false, false, 1, 2,
			      MPA_RTR_ZERO_SEND, NULL, 0);
	assert_int_equal(buf[20] << 8 | buf[21], 0xc001);
	assert_int_equal(buf[22] << 8 | buf[23], 0x0002);

	/* no P2P: neither P nor an RTR bit */
	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_2, true, false, false, false, false, 1, 2,
			      0, NULL, 0);
	assert_int_equal(buf[20] << 8 | buf[21], 0x0001);
	assert_int_equal(buf[22] << 8 | buf[23], 0x0002);

	/* rev 1 has no IRD/ORD word to carry it */
	n = cm_mpa_encode_rev(buf, sizeof(buf), MPA_REV_1, true, false, false, false, false, 1, 2,
			      MPA_RTR_ZERO_WRITE, NULL, 0);
	assert_int_equal(n, 20);
	assert_true(mpa_frame_decode(buf, (size_t)n, &f) > 0 && !f.peer2peer && !f.rtr);
}

static void test_depth(void **state)
{
	(void)state;
	assert_int_equal(cm_depth(RDMA_MAX_RESP_RES, 128), 128);
	assert_int_equal(cm_depth(0, 128), 0);
	assert_int_equal(cm_depth(128, 128), 128);
	assert_int_equal(cm_depth(129, 128), -EINVAL);
}

static void test_event_names(void **state)
{
	(void)state;
	assert_string_equal(cm_event_name(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
	assert_string_equal(cm_event_name(RDMA_CM_EVENT_TIMEWAIT_EXIT),
			    "RDMA_CM_EVENT_TIMEWAIT_EXIT");
	assert_string_equal(cm_event_name(RDMA_CM_EVENT_ADDR_RESOLVED),
			    "RDMA_CM_EVENT_ADDR_RESOLVED");
	assert_string_equal(cm_event_name(-1), "UNKNOWN EVENT");
	assert_string_equal(cm_event_name(1000), "UNKNOWN EVENT");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_reply_and_reject),
		cmocka_unit_test(test_pd_limits),
		cmocka_unit_test(test_need),
		cmocka_unit_test(test_rev1_answer),
		cmocka_unit_test(test_p2p_reply),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_event_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
