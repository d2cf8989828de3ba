/* Unit tests for the iWARP wire codecs (src/wire/).
 *
 * Every byte vector below was worked out by hand from the RFC figures,
 * not produced by the encoder: MPA frames (RFC 5044 §7.1, RFC 6581 §3),
 * FPDU framing and CRC32c (RFC 5044 §4, RFC 3720 Appendix B.4), DDP and
 * RDMAP headers (RFC 5041 §5, RFC 5040 §4), RFC 7306 atomics and
 * immediate data, TERMINATE (RFC 5040 §4.8). The CRC of the FPDU vector is
 * also recomputed here bit by bit, independently of ISA-L.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "wire/iwarp.h"

/* "MPA ID Req Frame" / "MPA ID Rep Frame" in ASCII */
#define KEY_REQ 0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, \
		0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65
#define KEY_REP 0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, \
		0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d, 0x65

/* ---- MPA request / reply ----------------------------------------------- */

/* Rev 1 request, CRC wanted, no markers, no private data:
 * flags = C (0x40), Rev = 1, PD_Length = 0. */
static const uint8_t mpa_req_v1[] = { KEY_REQ, 0x40, 0x01, 0x00, 0x00 };

static void test_mpa_req_rev1(void **state)
{
	struct mpa_frame f = { .rev = 1, .crc = true }, d;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 20);
	assert_memory_equal(buf, mpa_req_v1, sizeof(mpa_req_v1));

	assert_int_equal(mpa_frame_decode(mpa_req_v1, sizeof(mpa_req_v1), &d), 20);
	assert_false(d.reply);
	assert_false(d.markers);
	assert_true(d.crc);
	assert_false(d.reject);
	assert_int_equal(d.rev, 1);
	assert_false(d.enhanced);
	assert_int_equal(d.pd_len, 0);
	assert_null(d.pd);
}

/* Rev 2 reply, enhanced, CRC, P2P; IRD 16, ORD 4; RTR by WRITE or READ;
 * application private data "hi!".
 *   flags: C 0x40 | Enhanced 0x10 = 0x50; Rev 2; PD_Length 4 + 3 = 7
 *   IRD half: P2P 0x8000 | 16       = 0x8010
 *   ORD half: WRITE 0x8000 | READ 0x4000 | 4 = 0xc004 */
static const uint8_t mpa_rep_v2[] = {
	KEY_REP, 0x50, 0x02, 0x00, 0x07,
	0x80, 0x10, 0xc0, 0x04, 'h', 'i', '!',
};

static void test_mpa_rep_rev2_enhanced(void **state)
{
	struct mpa_frame f = {
		.reply = true, .crc = true, .rev = 2, .enhanced = true,
		.peer2peer = true, .ird = 16, .ord = 4,
		.rtr = MPA_RTR_ZERO_WRITE | MPA_RTR_ZERO_READ,
		.pd = (const uint8_t *)"hi!", .pd_len = 3,
	};
	struct mpa_frame d;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 27);
	assert_memory_equal(buf, mpa_rep_v2, sizeof(mpa_rep_v2));

	assert_int_equal(mpa_frame_decode(mpa_rep_v2, sizeof(mpa_rep_v2), &d), 27);
	assert_true(d.reply);
	assert_true(d.crc);
	assert_false(d.markers);
	assert_false(d.reject);
	assert_int_equal(d.rev, 2);
	assert_true(d.enhanced);
	assert_true(d.peer2peer);
	assert_int_equal(d.ird, 16);
	assert_int_equal(d.ord, 4);
	assert_int_equal(d.rtr, MPA_RTR_ZERO_WRITE | MPA_RTR_ZERO_READ);
	assert_int_equal(d.pd_len, 3);
	assert_ptr_equal(d.pd, mpa_rep_v2 + 24);
	assert_memory_equal(d.pd, "hi!", 3);
}

/* The remaining control bits and the 14-bit limits: markers, RTR by
 * SEND (bit 14 of the IRD half), IRD = ORD = 0x3fff, no P2P.
 *   flags: M 0x80 | Enhanced 0x10 = 0x90; IRD half 0x4000 | 0x3fff;
 *   ORD half 0x3fff */
static void test_mpa_rtr_send_and_limits(void **state)
{
	static const uint8_t want[] = {
		KEY_REQ, 0x90, 0x02, 0x00, 0x04, 0x7f, 0xff, 0x3f, 0xff,
	};
	struct mpa_frame f = {
		.markers = true, .rev = 2, .enhanced = true,
		.ird = 0x3fff, .ord = 0x3fff, .rtr = MPA_RTR_ZERO_SEND,
	};
	struct mpa_frame d;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 24);
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(mpa_frame_decode(want, sizeof(want), &d), 24);
	assert_true(d.markers);
	assert_false(d.peer2peer);
	assert_int_equal(d.rtr, MPA_RTR_ZERO_SEND);
	assert_int_equal(d.ird, 0x3fff);
	assert_int_equal(d.ord, 0x3fff);
	assert_int_equal(d.pd_len, 0);
}

/* Rev 1 reject: flags R (0x20) only, private data "no". */
static const uint8_t mpa_reject[] = { KEY_REP, 0x20, 0x01, 0x00, 0x02, 'n', 'o' };

static void test_mpa_reject(void **state)
{
	struct mpa_frame f = {
		.reply = true, .reject = true, .rev = 1,
		.pd = (const uint8_t *)"no", .pd_len = 2,
	};
	struct mpa_frame d;
	uint8_t buf[64];
	uint8_t req[sizeof(mpa_req_v1)];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 22);
	assert_memory_equal(buf, mpa_reject, sizeof(mpa_reject));
	assert_int_equal(mpa_frame_decode(mpa_reject, sizeof(mpa_reject), &d), 22);
	assert_true(d.reply);
	assert_true(d.reject);
	assert_false(d.crc);
	assert_memory_equal(d.pd, "no", 2);

	/* R is zero in a request and not looked at there */
	f.reply = false;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 22);
	assert_int_equal(buf[16], 0x00);
	memcpy(req, mpa_req_v1, sizeof(req));
	req[16] |= 0x20;
	assert_int_equal(mpa_frame_decode(req, sizeof(req), &d), 20);
	assert_false(d.reject);
}

/* In rev 1 the Enhanced bit is a reserved bit: not checked, and the
 * private data is all the application's. */
static void test_mpa_rev1_ignores_enhanced_bit(void **state)
{
	static const uint8_t in[] = {
		KEY_REQ, 0x5f, 0x01, 0x00, 0x04, 0x80, 0x10, 0xc0, 0x04,
	};
	struct mpa_frame d;

	(void)state;
	assert_int_equal(mpa_frame_decode(in, sizeof(in), &d), 24);
	assert_false(d.enhanced);
	assert_false(d.peer2peer);
	assert_true(d.crc);
	assert_int_equal(d.pd_len, 4);
	assert_ptr_equal(d.pd, in + 20);
}

/* softrnic's reserved flag bits: 0x04 "softrnic extensions" in requests
 * and replies, with 0x01 in replies only (siw echoes a request's flags in
 * its reply), 0x02 "ECE reject" only in a softrnic reject reply. A v2
 * enhanced softrnic request with CRC: 0x40 | 0x10 | 0x04 = 0x54. */
static void test_mpa_softrnic_flags(void **state)
{
	static const uint8_t want[] = {
		KEY_REQ, 0x54, 0x02, 0x00, 0x05, 0x00, 0x01, 0x00, 0x02, 'x',
	};
	struct mpa_frame f = {
		.crc = true, .rev = 2, .enhanced = true, .softrnic = true,
		.ece_reject = true,	/* not a reject: not sent */
		.ird = 1, .ord = 2, .pd = (const uint8_t *)"x", .pd_len = 1,
	};
	struct mpa_frame d;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 25);
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(mpa_frame_decode(want, sizeof(want), &d), 25);
	assert_true(d.softrnic);
	assert_false(d.ece_reject);
	assert_int_equal(d.ird, 1);
	assert_int_equal(d.ord, 2);

	/* a request that also carries 0x01 is not softrnic's */
	memcpy(buf, want, sizeof(want));
	buf[16] |= 0x01;
	assert_int_equal(mpa_frame_decode(buf, sizeof(want), &d), 25);
	assert_false(d.softrnic);

	/* a softrnic reply: 0x04 | 0x01; siw's echo of our request (0x04
	 * without 0x01) is not one */
	f.reply = true;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 25);
	assert_int_equal(buf[16], 0x55);
	assert_int_equal(mpa_frame_decode(buf, 25, &d), 25);
	assert_true(d.reply && d.softrnic);
	buf[16] = 0x54;
	assert_int_equal(mpa_frame_decode(buf, 25, &d), 25);
	assert_true(d.reply);
	assert_false(d.softrnic);

	/* a softrnic ECE reject: R 0x20 | 0x04 | 0x02 | 0x01 */
	f.reject = true;
	f.enhanced = false;
	f.crc = false;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 21);
	assert_int_equal(buf[16], 0x27);
	assert_int_equal(mpa_frame_decode(buf, 21, &d), 21);
	assert_true(d.reject && d.softrnic && d.ece_reject);

	/* 0x02 means nothing without 0x04, nor outside a reject */
	buf[16] = 0x23;
	assert_int_equal(mpa_frame_decode(buf, 21, &d), 21);
	assert_false(d.softrnic);
	assert_false(d.ece_reject);
	buf[16] = 0x07;
	assert_int_equal(mpa_frame_decode(buf, 21, &d), 21);
	assert_true(d.softrnic);
	assert_false(d.ece_reject);

	/* a plain iWARP frame leaves both clear */
	assert_int_equal(mpa_frame_decode(mpa_rep_v2, sizeof(mpa_rep_v2), &d), 27);
	assert_false(d.softrnic);
}

static void test_mpa_decode_rejects(void **state)
{
	uint8_t b[sizeof(mpa_rep_v2)];
	struct mpa_frame d;
	size_t i;

	(void)state;
	/* wrong key: as soon as the first differing byte is in */
	memcpy(b, mpa_req_v1, 20);
	b[0] = 'X';
	assert_int_equal(mpa_frame_decode(b, 1, &d), -EBADMSG);
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EBADMSG);
	memcpy(b, mpa_req_v1, 20);
	b[9] = 'x';		/* neither 'q' nor 'p' */
	assert_int_equal(mpa_frame_decode(b, 9, &d), -EAGAIN);
	assert_int_equal(mpa_frame_decode(b, 10, &d), -EBADMSG);
	memcpy(b, mpa_req_v1, 20);
	b[15] = 'E';
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EBADMSG);

	/* PD_Length 513 > 512, even before the private data is in */
	memcpy(b, mpa_req_v1, 20);
	b[18] = 0x02;
	b[19] = 0x01;
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EBADMSG);
	b[19] = 0x00;		/* 512 is fine: wait for it */
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EAGAIN);

	/* Rev 0 (pre-RFC drafts) and 3 */
	memcpy(b, mpa_req_v1, 20);
	b[17] = 0;
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EPROTO);
	b[17] = 3;
	assert_int_equal(mpa_frame_decode(b, 20, &d), -EPROTO);

	/* enhanced but too little private data for the IRD/ORD word */
	memcpy(b, mpa_rep_v2, sizeof(b));
	b[19] = 3;
	assert_int_equal(mpa_frame_decode(b, sizeof(b), &d), -EBADMSG);

	/* every truncation of a valid frame asks for more */
	for (i = 0; i < sizeof(mpa_rep_v2); i++)
		assert_int_equal(mpa_frame_decode(mpa_rep_v2, i, &d), -EAGAIN);
}

static void test_mpa_encode_rejects(void **state)
{
	uint8_t pd[MPA_MAX_PD + 1] = { 0 };
	struct mpa_frame f = { .rev = 1, .pd = pd, .pd_len = MPA_MAX_PD };
	uint8_t buf[600];

	(void)state;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 532);
	assert_int_equal(mpa_frame_encode(buf, 531, &f), -ENOSPC);
	f.pd_len = MPA_MAX_PD + 1;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	/* 508 + the IRD/ORD word = 512 fits, 509 does not */
	f.rev = 2;
	f.enhanced = true;
	f.pd_len = 508;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), 532);
	f.pd_len = 509;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.pd_len = 0;
	f.ird = 0x4000;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.ird = 0;
	f.ord = 0x4000;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.ord = 0;
	f.rtr = 8;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.rtr = 0;
	f.rev = 1;		/* enhanced needs rev 2 */
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.enhanced = false;
	f.rev = 0;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.rev = 3;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
	f.rev = 1;
	f.pd = NULL;
	f.pd_len = 1;
	assert_int_equal(mpa_frame_encode(buf, sizeof(buf), &f), -EINVAL);
}

/* ---- FPDU framing and CRC32c ------------------------------------------- */

/* RFC 5044 §4: pad so that 2 + ULPDU + pad is a multiple of 4. */
static void test_mpa_pad_and_len(void **state)
{
	static const size_t pad[9] = { 2, 1, 0, 3, 2, 1, 0, 3, 2 };
	static const size_t fpdu[9] = { 8, 8, 8, 12, 12, 12, 12, 16, 16 };
	size_t n;

	(void)state;
	for (n = 0; n <= 8; n++) {
		assert_int_equal(mpa_pad(n), pad[n]);
		assert_int_equal(mpa_fpdu_len(n), fpdu[n]);
	}
	assert_int_equal(mpa_fpdu_len(MPA_MAX_ULPDU), 2 + 0xffff + 3 + 4);
}

/* Reflected CRC32c (Castagnoli, 0x82f63b78) one bit at a time: an
 * independent check of the ISA-L path. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t len)
{
	uint32_t c = 0xffffffff;
	int k;

	while (len--) {
		c ^= *p++;
		for (k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78 & (0u - (c & 1)));
	}
	return ~c;
}

static uint32_t crc_of(const void *p, size_t len)
{
	struct iovec v = { .iov_base = (void *)p, .iov_len = len };

	return mpa_crc(&v, 1);
}

static void test_crc_kat(void **state)
{
	static const uint8_t wire_123[4] = { 0x83, 0x92, 0x06, 0xe3 };
	uint8_t z[32], ff[32], up[32], down[32], out[4];
	struct iovec v[3];
	uint32_t s;
	int i;

	(void)state;
	/* the CRC32c check value */
	assert_int_equal(crc_of("123456789", 9), 0xe3069283);
	assert_int_equal(crc32c_bitwise((const uint8_t *)"123456789", 9),
			 0xe3069283);
	mpa_crc_put(out, 0xe3069283);
	assert_memory_equal(out, wire_123, 4);
	assert_int_equal(mpa_crc_get(wire_123), 0xe3069283);

	/* RFC 3720 Appendix B.4, CRC bytes as sent */
	memset(z, 0, sizeof(z));
	memset(ff, 0xff, sizeof(ff));
	for (i = 0; i < 32; i++) {
		up[i] = (uint8_t)i;
		down[i] = (uint8_t)(31 - i);
	}
	mpa_crc_put(out, crc_of(z, 32));
	assert_memory_equal(out, ((uint8_t[]){ 0xaa, 0x36, 0x91, 0x8a }), 4);
	mpa_crc_put(out, crc_of(ff, 32));
	assert_memory_equal(out, ((uint8_t[]){ 0x43, 0xab, 0xa8, 0x62 }), 4);
	mpa_crc_put(out, crc_of(up, 32));
	assert_memory_equal(out, ((uint8_t[]){ 0x4e, 0x79, 0xdd, 0x46 }), 4);
	mpa_crc_put(out, crc_of(down, 32));
	assert_memory_equal(out, ((uint8_t[]){ 0x5c, 0xdb, 0x3f, 0x11 }), 4);

	/* split over an iovec, and incrementally */
	v[0] = (struct iovec){ .iov_base = "1234", .iov_len = 4 };
	v[1] = (struct iovec){ .iov_base = "", .iov_len = 0 };
	v[2] = (struct iovec){ .iov_base = "56789", .iov_len = 5 };
	assert_int_equal(mpa_crc(v, 3), 0xe3069283);
	s = mpa_crc_init();
	for (i = 0; i < 9; i++)
		s = mpa_crc_update(s, &"123456789"[i], 1);
	assert_int_equal(mpa_crc_final(s), 0xe3069283);
	assert_int_equal(mpa_crc(NULL, 0), 0);
}

/* A SEND of "pong!" as one FPDU: ULPDU = 18-byte untagged header (last,
 * SEND, QN 0, MSN 1, MO 0) + 5 bytes = 23 = 0x0017; pad 3; CRC over the
 * 28 bytes before it, least significant byte first. */
static const uint8_t fpdu_pong[] = {
	0x00, 0x17,
	0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	'p', 'o', 'n', 'g', '!',
	0x00, 0x00, 0x00,
	0xc1, 0x0c, 0xa8, 0x9b,
};

static void test_fpdu_kat(void **state)
{
	uint8_t buf[64], bad[sizeof(fpdu_pong)], tr[MPA_TRAILER_MAX];
	struct mpa_fpdu f;
	size_t i;

	(void)state;
	assert_int_equal(crc32c_bitwise(fpdu_pong, 28), 0x9ba80cc1);
	assert_int_equal(crc_of(fpdu_pong, 28), 0x9ba80cc1);

	assert_int_equal(mpa_fpdu_encode(buf, sizeof(buf), fpdu_pong + 2, 23,
					 true), 32);
	assert_memory_equal(buf, fpdu_pong, sizeof(fpdu_pong));
	assert_int_equal(mpa_fpdu_encode(buf, 31, fpdu_pong + 2, 23, true),
			 -ENOSPC);

	assert_int_equal(mpa_fpdu_decode(fpdu_pong, sizeof(fpdu_pong), true, &f),
			 32);
	assert_ptr_equal(f.ulpdu, fpdu_pong + 2);
	assert_int_equal(f.ulpdu_len, 23);
	assert_int_equal(f.crc, 0x9ba80cc1);
	for (i = 0; i < sizeof(fpdu_pong); i++)
		assert_int_equal(mpa_fpdu_decode(fpdu_pong, i, true, &f), -EAGAIN);

	/* a flipped payload bit fails only when CRC is on */
	memcpy(bad, fpdu_pong, sizeof(bad));
	bad[22] ^= 0x01;
	assert_int_equal(mpa_fpdu_decode(bad, sizeof(bad), true, &f), -EBADMSG);
	assert_int_equal(mpa_fpdu_decode(bad, sizeof(bad), false, &f), 32);

	/* without CRC the field is still sent, as zero */
	assert_int_equal(mpa_fpdu_encode(buf, sizeof(buf), fpdu_pong + 2, 23,
					 false), 32);
	assert_memory_equal(buf, fpdu_pong, 28);
	assert_memory_equal(buf + 28, ((uint8_t[]){ 0, 0, 0, 0 }), 4);

	/* the trailer for writev users */
	assert_int_equal(mpa_fpdu_trailer(tr, 23, 0x9ba80cc1), 7);
	assert_memory_equal(tr, fpdu_pong + 25, 7);
	assert_int_equal(mpa_fpdu_trailer(tr, 2, 0x01020304), 4);
	assert_memory_equal(tr, ((uint8_t[]){ 4, 3, 2, 1 }), 4);

	assert_int_equal(mpa_fpdu_encode(buf, sizeof(buf), NULL, 0x10000, true),
			 -EINVAL);
}

/* ---- DDP / RDMAP headers ----------------------------------------------- */

static void check_hdr(const struct ddp_hdr *h, const uint8_t *want,
		      size_t len)
{
	uint8_t buf[DDP_HDR_MAX + 4];
	struct ddp_hdr d;

	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), h), len);
	assert_memory_equal(buf, want, len);
	assert_int_equal(ddp_hdr_decode(want, len, &d), len);
	assert_int_equal(d.opcode, h->opcode);
	assert_int_equal(d.tagged, h->tagged);
	assert_int_equal(d.last, h->last);
	assert_int_equal(d.stag, h->tagged ? h->stag : 0);
	assert_true(d.to == (h->tagged ? h->to : 0));
	assert_int_equal(d.inv_stag, h->inv_stag);
	assert_int_equal(d.qn, h->tagged ? 0 : h->qn);
	assert_int_equal(d.msn, h->tagged ? 0 : h->msn);
	assert_int_equal(d.mo, h->tagged ? 0 : h->mo);
}

/* Untagged SEND, last segment.
 *   byte 0: T 0 | L 1 (0x40) | Rsvd 0 | DV 01        = 0x41
 *   byte 1: RV 01 (0x40) | Rsv 0 | opcode 0011        = 0x43
 *   RsvdULP 0, QN 0, MSN 0x11223344, MO 0x55667788 */
static void test_hdr_send(void **state)
{
	static const uint8_t want[] = {
		0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
	};
	static const uint8_t want_se_mid[] = {	/* SEND_SE, not last */
		0x01, 0x45, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x10, 0x00,
	};
	struct ddp_hdr h = {
		.opcode = RDMAP_SEND, .last = true, .qn = DDP_QN_SEND,
		.msn = 0x11223344, .mo = 0x55667788,
	};

	(void)state;
	check_hdr(&h, want, sizeof(want));
	h = (struct ddp_hdr){ .opcode = RDMAP_SEND_SE, .msn = 7, .mo = 4096 };
	check_hdr(&h, want_se_mid, sizeof(want_se_mid));
}

/* SEND with Invalidate: RsvdULP carries the STag 0xdeadbeef (RFC 5040
 * §4.1); SEND_SE_INV likewise with opcode 0110. */
static void test_hdr_send_inv(void **state)
{
	static const uint8_t want[] = {
		0x41, 0x44, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t want_se[] = {
		0x41, 0x46, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00,
		0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
	};
	struct ddp_hdr h = {
		.opcode = RDMAP_SEND_INV, .last = true, .inv_stag = 0xdeadbeef,
		.msn = 2,
	};

	(void)state;
	check_hdr(&h, want, sizeof(want));
	h = (struct ddp_hdr){ .opcode = RDMAP_SEND_SE_INV, .last = true,
			      .inv_stag = 0x01020304, .msn = 0xffffffff };
	check_hdr(&h, want_se, sizeof(want_se));
}

/* READ request (QN 1), TERMINATE (QN 2), and the RFC 7306 messages:
 * Immediate Data (QN 0), Atomic Request (QN 1), Atomic Response (QN 3). */
static void test_hdr_untagged_queues(void **state)
{
	static const uint8_t rreq[] = {
		0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t term[] = {
		0x41, 0x47, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t imm_se[] = {
		0x41, 0x49, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t areq[] = {
		0x41, 0x4a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t aresp[] = {
		0x41, 0x4b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
		0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00,
	};
	struct ddp_hdr h;

	(void)state;
	h = (struct ddp_hdr){ .opcode = RDMAP_READ_REQ, .last = true,
			      .qn = DDP_QN_READ_REQ, .msn = 9 };
	check_hdr(&h, rreq, sizeof(rreq));
	h = (struct ddp_hdr){ .opcode = RDMAP_TERMINATE, .last = true,
			      .qn = DDP_QN_TERMINATE, .msn = 1 };
	check_hdr(&h, term, sizeof(term));
	h = (struct ddp_hdr){ .opcode = RDMAP_IMM_SE, .last = true,
			      .qn = DDP_QN_SEND, .msn = 3 };
	check_hdr(&h, imm_se, sizeof(imm_se));
	h = (struct ddp_hdr){ .opcode = RDMAP_ATOMIC_REQ, .last = true,
			      .qn = DDP_QN_ATOMIC_REQ, .msn = 10 };
	check_hdr(&h, areq, sizeof(areq));
	h = (struct ddp_hdr){ .opcode = RDMAP_ATOMIC_RESP, .last = true,
			      .qn = DDP_QN_ATOMIC_RESP, .msn = 5 };
	check_hdr(&h, aresp, sizeof(aresp));
}

/* Tagged WRITE, not last: byte 0 = T (0x80) | DV 01 = 0x81, byte 1 =
 * 0x40 | 0000; STag 0x12345678, TO 0x0123456789abcdef. Last WRITE and
 * READ response: byte 0 = 0xc1. */
static void test_hdr_tagged(void **state)
{
	static const uint8_t wr[] = {
		0x81, 0x40, 0x12, 0x34, 0x56, 0x78,
		0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
	};
	static const uint8_t wr_last[] = {
		0xc1, 0x40, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	};
	static const uint8_t rresp[] = {
		0xc1, 0x42, 0x00, 0x00, 0x00, 0x01,
		0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	struct ddp_hdr h = {
		.opcode = RDMAP_WRITE, .tagged = true, .stag = 0x12345678,
		.to = 0x0123456789abcdefULL,
	};

	(void)state;
	check_hdr(&h, wr, sizeof(wr));
	h = (struct ddp_hdr){ .opcode = RDMAP_WRITE, .tagged = true,
			      .last = true, .stag = 0xffffffff, .to = ~0ULL };
	check_hdr(&h, wr_last, sizeof(wr_last));
	h = (struct ddp_hdr){ .opcode = RDMAP_READ_RESP, .tagged = true,
			      .last = true, .stag = 1, .to = 1ULL << 63 };
	check_hdr(&h, rresp, sizeof(rresp));
}

static void test_hdr_tables(void **state)
{
	uint8_t op;

	(void)state;
	for (op = 0; op < RDMAP_OPCODE_MAX; op++) {
		size_t want = op >= RDMAP_OPCODE_COUNT ? 0 :
			      (op == RDMAP_WRITE || op == RDMAP_READ_RESP) ? 14 : 18;

		assert_int_equal(ddp_hdr_len(op), want);
	}
	assert_int_equal(ddp_hdr_len(0xff), 0);
	assert_int_equal(ddp_opcode_qn(RDMAP_WRITE), -1);
	assert_int_equal(ddp_opcode_qn(RDMAP_READ_RESP), -1);
	assert_int_equal(ddp_opcode_qn(RDMAP_SEND), 0);
	assert_int_equal(ddp_opcode_qn(RDMAP_SEND_SE_INV), 0);
	assert_int_equal(ddp_opcode_qn(RDMAP_IMM), 0);
	assert_int_equal(ddp_opcode_qn(RDMAP_READ_REQ), 1);
	assert_int_equal(ddp_opcode_qn(RDMAP_ATOMIC_REQ), 1);
	assert_int_equal(ddp_opcode_qn(RDMAP_TERMINATE), 2);
	assert_int_equal(ddp_opcode_qn(RDMAP_ATOMIC_RESP), 3);
	assert_int_equal(ddp_opcode_qn(0xc), -1);
}

/* Reserved bits are ignored on receipt: DDP Rsvd (0x3c), RDMAP Rsv
 * (0x30), RsvdULP of a plain SEND. */
static void test_hdr_reserved_ignored(void **state)
{
	static const uint8_t in[] = {
		0x7d, 0x73, 0xaa, 0xbb, 0xcc, 0xdd, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	};
	struct ddp_hdr d;

	(void)state;
	assert_int_equal(ddp_hdr_decode(in, sizeof(in), &d), 18);
	assert_int_equal(d.opcode, RDMAP_SEND);
	assert_true(d.last);
	assert_false(d.tagged);
	assert_int_equal(d.inv_stag, 0);
}

static void test_hdr_decode_rejects(void **state)
{
	uint8_t b[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	};
	uint8_t w[DDP_TAGGED_HDR_LEN] = { 0xc1, 0x40 };
	struct ddp_hdr d;
	uint8_t v, op;
	size_t i;

	(void)state;
	/* truncated */
	for (i = 0; i < sizeof(b); i++)
		assert_int_equal(ddp_hdr_decode(b, i, &d), -EAGAIN);
	for (i = 0; i < sizeof(w); i++)
		assert_int_equal(ddp_hdr_decode(w, i, &d), -EAGAIN);

	/* DDP version 0, 2, 3: visible in one byte */
	for (v = 0; v < 4; v++) {
		if (v == 1)
			continue;
		b[0] = 0x40 | v;
		assert_int_equal(ddp_hdr_decode(b, 1, &d), -EBADMSG);
		assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	}
	b[0] = 0x41;

	/* RDMAP version 0, 2, 3 */
	for (v = 0; v < 4; v++) {
		if (v == 1)
			continue;
		b[1] = (uint8_t)(v << 6 | RDMAP_SEND);
		assert_int_equal(ddp_hdr_decode(b, 2, &d), -EBADMSG);
	}
	b[1] = 0x43;

	/* T bit inconsistent with the opcode, both ways */
	b[0] = 0xc1;
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	b[0] = 0x41;
	w[0] = 0x41;
	assert_int_equal(ddp_hdr_decode(w, sizeof(w), &d), -EBADMSG);
	w[0] = 0xc1;

	/* reserved opcodes 0xc..0xf, tagged or not */
	for (op = RDMAP_OPCODE_COUNT; op < RDMAP_OPCODE_MAX; op++) {
		b[1] = 0x40 | op;
		assert_int_equal(ddp_hdr_decode(b, 2, &d), -EBADMSG);
		b[0] = 0xc1;
		assert_int_equal(ddp_hdr_decode(b, 2, &d), -EBADMSG);
		b[0] = 0x41;
	}
	b[1] = 0x43;

	/* untagged QN that does not belong to the opcode */
	b[9] = 1;				/* SEND on QN 1 */
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	b[1] = 0x40 | RDMAP_READ_REQ;		/* READ_REQ on QN 1: fine */
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), 18);
	b[9] = 0;				/* READ_REQ on QN 0 */
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	b[1] = 0x40 | RDMAP_TERMINATE;		/* TERMINATE on QN 0 */
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	b[1] = 0x40 | RDMAP_ATOMIC_RESP;	/* ATOMIC_RESP on QN 1 */
	b[9] = 1;
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
	b[6] = 1;				/* QN 0x01000003 */
	b[9] = 3;
	assert_int_equal(ddp_hdr_decode(b, sizeof(b), &d), -EBADMSG);
}

static void test_hdr_encode_rejects(void **state)
{
	struct ddp_hdr h = { .opcode = RDMAP_SEND, .tagged = true };
	uint8_t buf[32];

	(void)state;
	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h = (struct ddp_hdr){ .opcode = RDMAP_WRITE };
	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h = (struct ddp_hdr){ .opcode = RDMAP_SEND, .qn = 1 };
	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h = (struct ddp_hdr){ .opcode = 0xc };
	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h), -EINVAL);
	h = (struct ddp_hdr){ .opcode = RDMAP_SEND };
	assert_int_equal(ddp_hdr_encode(buf, 17, &h), -ENOSPC);
	h = (struct ddp_hdr){ .opcode = RDMAP_WRITE, .tagged = true };
	assert_int_equal(ddp_hdr_encode(buf, 13, &h), -ENOSPC);
	assert_int_equal(ddp_hdr_encode(buf, 14, &h), 14);
	/* Invalidate STag is sent only by the invalidating opcodes */
	h = (struct ddp_hdr){ .opcode = RDMAP_SEND, .inv_stag = 0x55 };
	assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h), 18);
	assert_memory_equal(buf + 2, ((uint8_t[]){ 0, 0, 0, 0 }), 4);
}

static void test_hdr_term_error(void **state)
{
	uint8_t b[DDP_UNTAGGED_HDR_LEN] = {
		0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	struct rdmap_term t;

	(void)state;
	assert_int_equal(ddp_hdr_term_error(b, sizeof(b), &t), -EINVAL);
	assert_int_equal(ddp_hdr_term_error(b, 1, &t), -EINVAL);

	b[0] = 0x42;		/* untagged, DDP version 2 */
	assert_int_equal(ddp_hdr_term_error(b, 2, &t), 0);
	assert_int_equal(t.layer, TERM_LAYER_DDP);
	assert_int_equal(t.etype, TERM_DDP_ETYPE_UNTAGGED);
	assert_int_equal(t.ecode, TERM_DDP_ECODE_UT_INVALID_VERSION);
	assert_false(t.hdr_m || t.hdr_d || t.hdr_r);
	b[0] = 0xc0;		/* tagged, DDP version 0 */
	assert_int_equal(ddp_hdr_term_error(b, 2, &t), 0);
	assert_int_equal(t.etype, TERM_DDP_ETYPE_TAGGED);
	assert_int_equal(t.ecode, TERM_DDP_ECODE_T_INVALID_VERSION);

	b[0] = 0x41;
	b[1] = 0x83;		/* RDMAP version 2 */
	assert_int_equal(ddp_hdr_term_error(b, 2, &t), 0);
	assert_int_equal(t.layer, TERM_LAYER_RDMAP);
	assert_int_equal(t.etype, TERM_RDMAP_ETYPE_REMOTE_OP);
	assert_int_equal(t.ecode, TERM_RDMAP_ECODE_VERSION);

	b[1] = 0x4f;		/* reserved opcode */
	assert_int_equal(ddp_hdr_term_error(b, 2, &t), 0);
	assert_int_equal(t.ecode, TERM_RDMAP_ECODE_OPCODE);
	b[1] = 0x40;		/* WRITE without T */
	assert_int_equal(ddp_hdr_term_error(b, 2, &t), 0);
	assert_int_equal(t.ecode, TERM_RDMAP_ECODE_OPCODE);

	b[1] = 0x43;
	b[9] = 2;		/* SEND on QN 2 */
	assert_int_equal(ddp_hdr_term_error(b, sizeof(b), &t), 0);
	assert_int_equal(t.layer, TERM_LAYER_DDP);
	assert_int_equal(t.etype, TERM_DDP_ETYPE_UNTAGGED);
	assert_int_equal(t.ecode, TERM_DDP_ECODE_UT_INVALID_QN);
	assert_true(t.hdr_m && t.hdr_d && !t.hdr_r);
}

/* ---- RDMAP bodies ------------------------------------------------------ */

/* Sink STag, sink TO, size, source STag, source TO chosen so that the 28
 * bytes read 0x01..0x1c. */
static void test_read_req(void **state)
{
	struct rdmap_read_req r = {
		.sink_stag = 0x01020304, .sink_to = 0x05060708090a0b0cULL,
		.size = 0x0d0e0f10, .src_stag = 0x11121314,
		.src_to = 0x15161718191a1b1cULL,
	};
	struct rdmap_read_req d;
	uint8_t want[RDMAP_READ_REQ_LEN], buf[64];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(want); i++)
		want[i] = (uint8_t)(i + 1);
	assert_int_equal(rdmap_read_req_encode(buf, sizeof(buf), &r), 28);
	assert_memory_equal(buf, want, 28);
	assert_int_equal(rdmap_read_req_encode(buf, 27, &r), -ENOSPC);
	assert_int_equal(rdmap_read_req_decode(want, 28, &d), 28);
	assert_int_equal(d.sink_stag, r.sink_stag);
	assert_true(d.sink_to == r.sink_to);
	assert_int_equal(d.size, r.size);
	assert_int_equal(d.src_stag, r.src_stag);
	assert_true(d.src_to == r.src_to);
	for (i = 0; i < 28; i++)
		assert_int_equal(rdmap_read_req_decode(want, i, &d), -EAGAIN);
}

/* RFC 7306 atomic request: Reserved | AOpCode (CmpSwap = 0010), Request
 * Identifier, Remote STag, Remote TO, Swap, Swap Mask, Compare, Compare
 * Mask. */
static const uint8_t areq_cmpswap[RDMAP_ATOMIC_REQ_LEN] = {
	0x00, 0x00, 0x00, 0x02,
	0xa1, 0xa2, 0xa3, 0xa4,
	0xb1, 0xb2, 0xb3, 0xb4,
	0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8,
	0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8,
	0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
};

static void test_atomic_req(void **state)
{
	struct rdmap_atomic_req r = {
		.op = RDMAP_ATOMIC_CMP_SWAP, .req_id = 0xa1a2a3a4,
		.stag = 0xb1b2b3b4, .to = 0xc1c2c3c4c5c6c7c8ULL,
		.add_swap = 0xd1d2d3d4d5d6d7d8ULL, .add_swap_mask = ~0ULL,
		.compare = 0xe1e2e3e4e5e6e7e8ULL,
		.compare_mask = 0xffffffff00000000ULL,
	};
	struct rdmap_atomic_req d;
	uint8_t buf[64], in[RDMAP_ATOMIC_REQ_LEN];
	size_t i;

	(void)state;
	assert_int_equal(rdmap_atomic_req_encode(buf, sizeof(buf), &r), 52);
	assert_memory_equal(buf, areq_cmpswap, 52);
	assert_int_equal(rdmap_atomic_req_decode(areq_cmpswap, 52, &d), 52);
	assert_int_equal(d.op, r.op);
	assert_int_equal(d.req_id, r.req_id);
	assert_int_equal(d.stag, r.stag);
	assert_true(d.to == r.to);
	assert_true(d.add_swap == r.add_swap);
	assert_true(d.add_swap_mask == r.add_swap_mask);
	assert_true(d.compare == r.compare);
	assert_true(d.compare_mask == r.compare_mask);

	/* FetchAdd is AOpCode 0000, Swap 0001 */
	r.op = RDMAP_ATOMIC_FETCH_ADD;
	assert_int_equal(rdmap_atomic_req_encode(buf, sizeof(buf), &r), 52);
	assert_memory_equal(buf, ((uint8_t[]){ 0, 0, 0, 0 }), 4);
	r.op = RDMAP_ATOMIC_SWAP;
	assert_int_equal(rdmap_atomic_req_encode(buf, sizeof(buf), &r), 52);
	assert_memory_equal(buf, ((uint8_t[]){ 0, 0, 0, 1 }), 4);

	/* reserved bits ignored; reserved AOpCodes refused */
	memcpy(in, areq_cmpswap, sizeof(in));
	in[0] = 0xff;
	in[3] = 0xf2;
	assert_int_equal(rdmap_atomic_req_decode(in, 52, &d), 52);
	assert_int_equal(d.op, RDMAP_ATOMIC_CMP_SWAP);
	in[3] = 0x03;
	assert_int_equal(rdmap_atomic_req_decode(in, 4, &d), -EBADMSG);
	in[3] = 0x0f;
	assert_int_equal(rdmap_atomic_req_decode(in, 52, &d), -EBADMSG);
	r.op = 3;
	assert_int_equal(rdmap_atomic_req_encode(buf, sizeof(buf), &r), -EINVAL);
	r.op = 0;
	assert_int_equal(rdmap_atomic_req_encode(buf, 51, &r), -ENOSPC);

	for (i = 0; i < 52; i++)
		assert_int_equal(rdmap_atomic_req_decode(areq_cmpswap, i, &d),
				 -EAGAIN);
}

/* Atomic response: Original Request Identifier, Original Remote Data. */
static void test_atomic_resp(void **state)
{
	static const uint8_t want[] = {
		0xa1, 0xa2, 0xa3, 0xa4,
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
	};
	struct rdmap_atomic_resp r = {
		.req_id = 0xa1a2a3a4, .orig = 0x0102030405060708ULL,
	};
	struct rdmap_atomic_resp d;
	uint8_t buf[32];
	size_t i;

	(void)state;
	assert_int_equal(rdmap_atomic_resp_encode(buf, sizeof(buf), &r), 12);
	assert_memory_equal(buf, want, 12);
	assert_int_equal(rdmap_atomic_resp_encode(buf, 11, &r), -ENOSPC);
	assert_int_equal(rdmap_atomic_resp_decode(want, 12, &d), 12);
	assert_int_equal(d.req_id, r.req_id);
	assert_true(d.orig == r.orig);
	for (i = 0; i < 12; i++)
		assert_int_equal(rdmap_atomic_resp_decode(want, i, &d), -EAGAIN);
}

static void test_imm(void **state)
{
	struct rdmap_imm m = { .data = { 0xca, 0xfe, 0xba, 0xbe } }, d;
	uint8_t buf[16];

	(void)state;
	assert_int_equal(rdmap_imm_encode(buf, sizeof(buf), &m), 8);
	assert_memory_equal(buf, ((uint8_t[]){ 0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 0 }), 8);
	assert_int_equal(rdmap_imm_encode(buf, 7, &m), -ENOSPC);
	assert_int_equal(rdmap_imm_decode(buf, 7, &d), -EAGAIN);
	assert_int_equal(rdmap_imm_decode(buf, 8, &d), 8);
	assert_memory_equal(&d, &m, sizeof(d));
}

/* ---- TERMINATE --------------------------------------------------------- */

/* DDP layer error on an untagged SEND that came on QN 2: Terminate
 * Control = Layer 1 | EType 2 (0x12), ErrCode 0x01 (invalid QN),
 * HdrCt M|D (0xc0), 0; DDP Segment Length 0x0020; the offending 18-byte
 * DDP header. */
static const uint8_t term_qn[] = {
	0x12, 0x01, 0xc0, 0x00,
	0x00, 0x20,
	0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
	0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
};

/* RDMAP remote protection error (invalid STag) on a READ request:
 * 0x01, 0x00, HdrCt M|D|R (0xe0); Segment Length 46 = 18 + 28; the DDP
 * header and the 28-byte Read Request header. */
static uint8_t term_rreq[4 + 2 + 18 + 28] = {
	0x01, 0x00, 0xe0, 0x00,
	0x00, 0x2e,
	0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
	0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	/* the read request body follows, filled in by the test */
};

static void test_term_copied_ddp(void **state)
{
	struct rdmap_term t = {
		.layer = TERM_LAYER_DDP, .etype = TERM_DDP_ETYPE_UNTAGGED,
		.ecode = TERM_DDP_ECODE_UT_INVALID_QN,
		.hdr_m = true, .hdr_d = true, .ddp_seg_len = 0x20,
	};
	struct rdmap_term d;
	uint8_t ulpdu[0x20] = { 0 };
	uint8_t buf[64];
	size_t i;

	(void)state;
	memcpy(ulpdu, term_qn + 6, 18);
	t.hdrs = ulpdu;
	t.hdrs_len = rdmap_term_copy_len(ulpdu, sizeof(ulpdu), true, false);
	assert_int_equal(t.hdrs_len, 18);
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), 24);
	assert_memory_equal(buf, term_qn, sizeof(term_qn));
	assert_int_equal(rdmap_term_encode(buf, 23, &t), -ENOSPC);

	assert_int_equal(rdmap_term_decode(term_qn, sizeof(term_qn), &d), 24);
	assert_int_equal(d.layer, 1);
	assert_int_equal(d.etype, 2);
	assert_int_equal(d.ecode, 1);
	assert_true(d.hdr_m && d.hdr_d && !d.hdr_r);
	assert_int_equal(d.ddp_seg_len, 0x20);
	assert_ptr_equal(d.hdrs, term_qn + 6);
	assert_int_equal(d.hdrs_len, 18);
	for (i = 0; i < sizeof(term_qn); i++)
		assert_int_equal(rdmap_term_decode(term_qn, i, &d), -EAGAIN);
}

/* Linux siw's TERMINATE on x86 (iwarp.h bitfields, docs/INTEROP.md): an
 * RDMAP remote protection error (invalid STag) on a READ request, as
 * siw 6.1 sent it to softrnic: Layer and EType swapped (0x10 for Layer 0
 * EType 1) and M|D|R as 0x07 of byte 2; then the Segment Length and the
 * 18 + 28 header bytes, as in the RFC. */
static void test_term_siw_layout(void **state)
{
	uint8_t b[sizeof(term_rreq)];
	struct rdmap_term d;

	(void)state;
	memcpy(b, term_rreq, sizeof(b));
	b[0] = 0x10;
	b[2] = 0x07;
	assert_int_equal(rdmap_term_decode(b, sizeof(b), &d), 52);
	assert_true(d.siw_layout);
	assert_int_equal(d.layer, TERM_LAYER_RDMAP);
	assert_int_equal(d.etype, TERM_RDMAP_ETYPE_REMOTE_PROT);
	assert_int_equal(d.ecode, TERM_RDMAP_ECODE_INV_STAG);
	assert_true(d.hdr_m && d.hdr_d && d.hdr_r);
	assert_int_equal(d.ddp_seg_len, 46);
	assert_int_equal(d.hdrs_len, 46);
	assert_ptr_equal(d.hdrs, b + 6);

	/* siw's DDP tagged-buffer error (WRITE to a bad STag): 0x11 reads
	 * the same both ways; M|D (0x03) then 2 + 14 bytes */
	{
		static const uint8_t w[4 + 2 + 14] = { 0x11, 0x00, 0x03, 0x00, 0x00, 0x40, 0x81, 0x40 };

		assert_int_equal(rdmap_term_decode(w, sizeof(w), &d), (ssize_t)sizeof(w));
		assert_true(d.siw_layout && d.hdr_m && d.hdr_d && !d.hdr_r);
		assert_int_equal(d.layer, TERM_LAYER_DDP);
		assert_int_equal(d.etype, TERM_DDP_ETYPE_TAGGED);
		assert_int_equal(d.hdrs_len, 14);
		assert_int_equal(rdmap_term_decode(w, sizeof(w) - 1, &d), -EAGAIN);
	}
	/* without HdrCt bits the layout cannot be told: read as the RFC
	 * says (siw's "unknown opcode" TERMINATE, 20 06 00 00, as captured) */
	assert_int_equal(rdmap_term_decode((const uint8_t[]){ 0x20, 0x06, 0x00, 0x00 }, 4, &d), 4);
	assert_false(d.siw_layout);
	assert_int_equal(d.layer, 2);
	assert_int_equal(d.etype, 0);
	/* an RFC sender's HdrCt wins over stray reserved bits */
	b[0] = 0x01;
	b[2] = 0xe7;
	assert_int_equal(rdmap_term_decode(b, sizeof(b), &d), 52);
	assert_false(d.siw_layout);
	assert_int_equal(d.layer, TERM_LAYER_RDMAP);
	assert_int_equal(d.etype, TERM_RDMAP_ETYPE_REMOTE_PROT);
}

static void test_term_copied_rdmap(void **state)
{
	struct rdmap_read_req r = { .sink_stag = 0x1234, .size = 64 };
	struct rdmap_term t = {
		.layer = TERM_LAYER_RDMAP, .etype = TERM_RDMAP_ETYPE_REMOTE_PROT,
		.ecode = TERM_RDMAP_ECODE_INV_STAG,
		.hdr_m = true, .hdr_d = true, .hdr_r = true, .ddp_seg_len = 46,
	};
	struct rdmap_term d;
	uint8_t buf[128];

	(void)state;
	assert_int_equal(rdmap_read_req_encode(term_rreq + 24, 28, &r), 28);
	/* a whole READ request ULPDU is copied: 18 + 28 */
	t.hdrs = term_rreq + 6;
	t.hdrs_len = rdmap_term_copy_len(t.hdrs, 46, true, true);
	assert_int_equal(t.hdrs_len, 46);
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), 52);
	assert_memory_equal(buf, term_rreq, sizeof(term_rreq));

	assert_int_equal(rdmap_term_decode(term_rreq, sizeof(term_rreq), &d), 52);
	assert_int_equal(d.layer, TERM_LAYER_RDMAP);
	assert_int_equal(d.etype, TERM_RDMAP_ETYPE_REMOTE_PROT);
	assert_int_equal(d.ecode, TERM_RDMAP_ECODE_INV_STAG);
	assert_true(d.hdr_m && d.hdr_d && d.hdr_r);
	assert_int_equal(d.ddp_seg_len, 46);
	assert_int_equal(d.hdrs_len, 46);

	/* copy rules: R adds nothing for a SEND, 52 for an atomic
	 * request; a tagged header is 14; never more than there is */
	assert_int_equal(rdmap_term_copy_len(term_qn + 6, 32, true, true), 18);
	assert_int_equal(rdmap_term_copy_len((uint8_t[]){ 0x41, 0x4a }, 100,
					     true, true), 70);
	assert_int_equal(rdmap_term_copy_len((uint8_t[]){ 0xc1, 0x40 }, 100,
					     true, true), 14);
	assert_int_equal(rdmap_term_copy_len(term_rreq + 6, 20, true, true), 20);
	assert_int_equal(rdmap_term_copy_len(term_rreq + 6, 46, false, false), 0);
}

static void test_term_plain_and_rejects(void **state)
{
	/* RDMAP catastrophic, stream (0x07), no headers */
	static const uint8_t plain[] = { 0x00, 0x07, 0x00, 0x00 };
	struct rdmap_term t = { .ecode = TERM_RDMAP_ECODE_CATASTROPHIC_STREAM };
	struct rdmap_term d;
	uint8_t buf[64], in[8];

	(void)state;
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), 4);
	assert_memory_equal(buf, plain, 4);
	assert_int_equal(rdmap_term_decode(plain, 4, &d), 4);
	assert_int_equal(d.ecode, 7);
	assert_null(d.hdrs);

	/* LLP layer 2: byte 0 = 0x20; reserved bits ignored on receipt */
	memcpy(in, ((uint8_t[]){ 0x20, 0x02, 0x1f, 0xff }), 4);
	assert_int_equal(rdmap_term_decode(in, 4, &d), 4);
	assert_int_equal(d.layer, TERM_LAYER_LLP);
	assert_int_equal(d.ecode, TERM_LLP_ECODE_CRC);

	/* R without D */
	memcpy(in, ((uint8_t[]){ 0x00, 0x00, 0x20, 0x00, 0x00, 0x00 }), 6);
	assert_int_equal(rdmap_term_decode(in, 6, &d), -EBADMSG);
	/* D with less than the copied DDP header */
	memcpy(in, ((uint8_t[]){ 0x10, 0x00, 0x40, 0x00, 0x00, 0x00, 0xc1, 0x40 }), 8);
	assert_int_equal(rdmap_term_decode(in, 8, &d), -EAGAIN);

	/* encoder refusals */
	t.layer = 0x10;
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), -EINVAL);
	t.layer = 0;
	t.etype = 0x10;
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), -EINVAL);
	t.etype = 0;
	t.hdrs = term_qn + 6;
	t.hdrs_len = 18;	/* headers without any HdrCt bit */
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), -EINVAL);
	t.hdr_r = true;		/* R without D */
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), -EINVAL);
	t.hdr_r = false;
	t.hdr_d = true;
	t.hdrs_len = 17;	/* short DDP header */
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), -EINVAL);
	t.hdrs_len = 18;
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), 24);
	/* M alone: the Segment Length is there, nothing copied */
	t = (struct rdmap_term){ .hdr_m = true, .ddp_seg_len = 9 };
	assert_int_equal(rdmap_term_encode(buf, sizeof(buf), &t), 6);
	assert_memory_equal(buf, ((uint8_t[]){ 0, 0, 0x80, 0, 0, 9 }), 6);
}

/* ---- round trips through every encoder --------------------------------- */

static void test_round_trip_hdrs(void **state)
{
	uint8_t buf[DDP_HDR_MAX];
	struct ddp_hdr h, d;
	uint8_t op;
	int last;

	(void)state;
	for (op = 0; op < RDMAP_OPCODE_COUNT; op++) {
		for (last = 0; last < 2; last++) {
			memset(&h, 0, sizeof(h));
			h.opcode = op;
			h.last = last;
			h.tagged = ddp_opcode_qn(op) < 0;
			if (h.tagged) {
				h.stag = 0x9abcdef0u + op;
				h.to = 0xfedcba9876543210ULL - op;
			} else {
				h.qn = (uint32_t)ddp_opcode_qn(op);
				h.msn = 0x80000000u | op;
				h.mo = 0x7fffffffu - op;
				if (op == RDMAP_SEND_INV || op == RDMAP_SEND_SE_INV)
					h.inv_stag = 0x13579bdf;
			}
			assert_int_equal(ddp_hdr_encode(buf, sizeof(buf), &h),
					 ddp_hdr_len(op));
			assert_int_equal(ddp_hdr_decode(buf, sizeof(buf), &d),
					 ddp_hdr_len(op));
			assert_memory_equal(&d, &h, sizeof(d));
		}
	}
}

static void test_round_trip_mpa(void **state)
{
	static const uint8_t pd[MPA_MAX_PD] = { 1, 2, 3 };
	struct mpa_frame f, d;
	uint8_t buf[MPA_FRAME_HDR_LEN + MPA_MAX_PD];
	unsigned int bits;

	(void)state;
	for (bits = 0; bits < 256; bits++) {
		memset(&f, 0, sizeof(f));
		f.reply = bits & 1;
		f.markers = bits & 2;
		f.crc = bits & 4;
		f.reject = f.reply && (bits & 8);
		f.enhanced = bits & 16;
		f.rev = f.enhanced || (bits & 32) ? 2 : 1;
		if (f.enhanced) {
			f.peer2peer = bits & 64;
			f.ird = (uint16_t)(bits * 61 & MPA_IRD_ORD_MAX);
			f.ord = (uint16_t)(bits * 127 & MPA_IRD_ORD_MAX);
			f.rtr = bits & MPA_RTR_MASK;
		}
		f.pd_len = (uint16_t)(bits & 128 ? (f.enhanced ? 508 : 512) : bits);
		f.pd = f.pd_len ? pd : NULL;
		assert_true(mpa_frame_encode(buf, sizeof(buf), &f) > 0);
		assert_int_equal(mpa_frame_decode(buf, sizeof(buf), &d),
				 MPA_FRAME_HDR_LEN + f.pd_len +
				 (f.enhanced ? MPA_RTR_LEN : 0));
		assert_int_equal(d.pd_len, f.pd_len);
		if (f.pd_len)
			assert_memory_equal(d.pd, f.pd, f.pd_len);
		d.pd = f.pd;
		assert_memory_equal(&d, &f, sizeof(d));
	}
}

static void test_round_trip_fpdu(void **state)
{
	uint8_t ulpdu[64], buf[128];
	struct mpa_fpdu f;
	size_t n;

	(void)state;
	for (n = 0; n < sizeof(ulpdu); n++)
		ulpdu[n] = (uint8_t)(n * 7);
	for (n = 0; n <= sizeof(ulpdu); n++) {
		assert_int_equal(mpa_fpdu_encode(buf, sizeof(buf), ulpdu, n, true),
				 mpa_fpdu_len(n));
		assert_int_equal(mpa_fpdu_decode(buf, sizeof(buf), true, &f),
				 mpa_fpdu_len(n));
		assert_int_equal(f.ulpdu_len, n);
		if (n)
			assert_memory_equal(f.ulpdu, ulpdu, n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mpa_req_rev1),
		cmocka_unit_test(test_mpa_rep_rev2_enhanced),
		cmocka_unit_test(test_mpa_rtr_send_and_limits),
		cmocka_unit_test(test_mpa_reject),
		cmocka_unit_test(test_mpa_softrnic_flags),
		cmocka_unit_test(test_mpa_rev1_ignores_enhanced_bit),
		cmocka_unit_test(test_mpa_decode_rejects),
		cmocka_unit_test(test_mpa_encode_rejects),
		cmocka_unit_test(test_mpa_pad_and_len),
		cmocka_unit_test(test_crc_kat),
		cmocka_unit_test(test_fpdu_kat),
		cmocka_unit_test(test_hdr_send),
		cmocka_unit_test(test_hdr_send_inv),
		cmocka_unit_test(test_hdr_untagged_queues),
		cmocka_unit_test(test_hdr_tagged),
		cmocka_unit_test(test_hdr_tables),
		cmocka_unit_test(test_hdr_reserved_ignored),
		cmocka_unit_test(test_hdr_decode_rejects),
		cmocka_unit_test(test_hdr_encode_rejects),
		cmocka_unit_test(test_hdr_term_error),
		cmocka_unit_test(test_read_req),
		cmocka_unit_test(test_atomic_req),
		cmocka_unit_test(test_atomic_resp),
		cmocka_unit_test(test_imm),
		cmocka_unit_test(test_term_copied_ddp),
		cmocka_unit_test(test_term_copied_rdmap),
		cmocka_unit_test(test_term_siw_layout),
		cmocka_unit_test(test_term_plain_and_rejects),
		cmocka_unit_test(test_round_trip_hdrs),
		cmocka_unit_test(test_round_trip_mpa),
		cmocka_unit_test(test_round_trip_fpdu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
