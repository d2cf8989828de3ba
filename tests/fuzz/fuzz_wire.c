/* libFuzzer target for the iWARP wire decoders (src/wire/), built with
 * -fsanitize=fuzzer,address,undefined; run it with tests/fuzz/run.sh.
 *
 * The first input byte picks a decoder, the rest is its input. Whatever
 * a decoder accepts must survive encode and decode again unchanged, and
 * the re-encoded bytes must equal the input in every field that is not
 * reserved. Anything else aborts, which libFuzzer reports as a crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/iwarp.h"
#include "wire/srext.h"
#include "fuzz.h"

/* room for any re-encoded message, the largest FPDU included */
static uint8_t out[MPA_MAX_ULPDU + 16];

static bool decode_error(ssize_t r)
{
	return r == -EAGAIN || r == -EBADMSG || r == -EPROTO;
}

/* ---- MPA --------------------------------------------------------------- */

static bool frame_same(const struct mpa_frame *a, const struct mpa_frame *b)
{
	return a->reply == b->reply && a->markers == b->markers &&
	       a->crc == b->crc && a->reject == b->reject &&
	       a->rev == b->rev && a->enhanced == b->enhanced &&
	       a->peer2peer == b->peer2peer && a->ird == b->ird &&
	       a->ord == b->ord && a->rtr == b->rtr &&
	       a->softrnic == b->softrnic && a->ece_reject == b->ece_reject &&
	       a->pd_len == b->pd_len &&
	       (!a->pd_len || !memcmp(a->pd, b->pd, a->pd_len));
}

static void fuzz_mpa_frame(const uint8_t *p, size_t n)
{
	struct mpa_frame a, b;
	ssize_t r, e;
	uint8_t keep;

	r = mpa_frame_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		return;
	}
	CHECK((size_t)r <= n && r >= MPA_FRAME_HDR_LEN);
	e = mpa_frame_encode(out, sizeof(out), &a);
	CHECK(e == r);
	CHECK(mpa_frame_decode(out, (size_t)e, &b) == e);
	CHECK(frame_same(&a, &b));

	/* byte for byte but for the flag bits that are reserved here */
	/* (0x04 and 0x01 only when they decoded as softrnic's: alone, or
	 * 0x04 without 0x01 in a reply, they are reserved bits) */
	keep = 0xc0 | (a.reply ? 0x20 : 0) | (a.rev == MPA_REV_2 ? 0x10 : 0) |
	       (a.softrnic ? 0x05 : 0) | (a.softrnic && a.reject ? 0x02 : 0);
	CHECK(!memcmp(out, p, MPA_KEY_LEN));
	CHECK((out[16] & keep) == (p[16] & keep));
	CHECK(!memcmp(out + 17, p + 17, (size_t)r - 17));
}

static void fuzz_fpdu(const uint8_t *p, size_t n, bool crc)
{
	struct mpa_fpdu a, b;
	bool pad_zero;
	size_t body;
	ssize_t r, e;

	r = mpa_fpdu_decode(p, n, crc, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		return;
	}
	CHECK((size_t)r == mpa_fpdu_len(a.ulpdu_len) && (size_t)r <= n);
	CHECK(a.ulpdu == p + MPA_ULPDU_LEN_SIZE);
	e = mpa_fpdu_encode(out, sizeof(out), a.ulpdu, a.ulpdu_len, crc);
	CHECK(e == r);
	CHECK(mpa_fpdu_decode(out, (size_t)e, crc, &b) == e);
	CHECK(b.ulpdu_len == a.ulpdu_len);
	body = MPA_ULPDU_LEN_SIZE + a.ulpdu_len;
	CHECK(!memcmp(out, p, body));
	/* the pad goes out as zero; the CRC covers it (RFC 5044 §4) */
	pad_zero = !memcmp(out + body, p + body, mpa_pad(a.ulpdu_len));
	if (!crc)
		CHECK(b.crc == 0);
	else if (pad_zero)
		CHECK(b.crc == a.crc);
}

/* ---- DDP / RDMAP ------------------------------------------------------- */

static void fuzz_ddp_hdr(const uint8_t *p, size_t n)
{
	struct ddp_hdr a, b;
	struct rdmap_term t;
	bool rsvd_ulp;
	size_t skip;
	ssize_t r, e;

	r = ddp_hdr_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		/* every rejection that saw two bytes has a TERMINATE */
		if (r == -EBADMSG && n >= 2)
			CHECK(ddp_hdr_term_error(p, n, &t) == 0);
		return;
	}
	CHECK((size_t)r == ddp_hdr_len(a.opcode) && (size_t)r <= n);
	CHECK(ddp_hdr_term_error(p, n, &t) == -EINVAL);
	e = ddp_hdr_encode(out, sizeof(out), &a);
	CHECK(e == r);
	CHECK(ddp_hdr_decode(out, (size_t)e, &b) == e);
	CHECK(a.opcode == b.opcode && a.tagged == b.tagged &&
	      a.last == b.last && a.stag == b.stag && a.to == b.to &&
	      a.inv_stag == b.inv_stag && a.qn == b.qn && a.msn == b.msn &&
	      a.mo == b.mo);
	/* T, L, DV and RV, opcode; STag/TO or QN/MSN/MO */
	CHECK((out[0] & 0xc3) == (p[0] & 0xc3));
	CHECK((out[1] & 0xcf) == (p[1] & 0xcf));
	rsvd_ulp = !a.tagged && a.opcode != RDMAP_SEND_INV &&
		   a.opcode != RDMAP_SEND_SE_INV;
	skip = rsvd_ulp ? 6 : 2;
	CHECK(!memcmp(out + skip, p + skip, (size_t)r - skip));
}

static void fuzz_read_req(const uint8_t *p, size_t n)
{
	struct rdmap_read_req a;
	ssize_t r;

	r = rdmap_read_req_decode(p, n, &a);
	if (r < 0) {
		CHECK(r == -EAGAIN && n < RDMAP_READ_REQ_LEN);
		return;
	}
	CHECK(r == RDMAP_READ_REQ_LEN);
	CHECK(rdmap_read_req_encode(out, sizeof(out), &a) == r);
	CHECK(!memcmp(out, p, (size_t)r));
}

static void fuzz_atomic_req(const uint8_t *p, size_t n)
{
	struct rdmap_atomic_req a, b;
	ssize_t r;

	r = rdmap_atomic_req_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		return;
	}
	CHECK(r == RDMAP_ATOMIC_REQ_LEN && a.op < RDMAP_ATOMIC_OP_COUNT);
	CHECK(rdmap_atomic_req_encode(out, sizeof(out), &a) == r);
	CHECK(rdmap_atomic_req_decode(out, (size_t)r, &b) == r);
	CHECK(a.op == b.op && a.req_id == b.req_id && a.stag == b.stag &&
	      a.to == b.to && a.add_swap == b.add_swap &&
	      a.add_swap_mask == b.add_swap_mask && a.compare == b.compare &&
	      a.compare_mask == b.compare_mask);
	/* all but the 28 reserved bits in front of AOpCode */
	CHECK((out[3] & 0x0f) == (p[3] & 0x0f));
	CHECK(!memcmp(out + 4, p + 4, (size_t)r - 4));
}

static void fuzz_atomic_resp(const uint8_t *p, size_t n)
{
	struct rdmap_atomic_resp a;
	ssize_t r;

	r = rdmap_atomic_resp_decode(p, n, &a);
	if (r < 0) {
		CHECK(r == -EAGAIN && n < RDMAP_ATOMIC_RESP_LEN);
		return;
	}
	CHECK(rdmap_atomic_resp_encode(out, sizeof(out), &a) == r);
	CHECK(!memcmp(out, p, (size_t)r));
}

static void fuzz_imm(const uint8_t *p, size_t n)
{
	struct rdmap_imm a;
	ssize_t r;

	r = rdmap_imm_decode(p, n, &a);
	if (r < 0) {
		CHECK(r == -EAGAIN && n < RDMAP_IMM_LEN);
		return;
	}
	CHECK(rdmap_imm_encode(out, sizeof(out), &a) == r);
	CHECK(!memcmp(out, p, (size_t)r));
}

static void fuzz_term(const uint8_t *p, size_t n)
{
	struct rdmap_term a, b;
	ssize_t r, e;
	int bits;

	for (bits = 0; bits < 4; bits++)
		CHECK(rdmap_term_copy_len(p, n, bits & 1, bits & 2) <= n);

	r = rdmap_term_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		return;
	}
	CHECK((size_t)r <= n);
	e = rdmap_term_encode(out, sizeof(out), &a);
	CHECK(e == r);
	CHECK(rdmap_term_decode(out, (size_t)e, &b) == e);
	CHECK(a.layer == b.layer && a.etype == b.etype &&
	      a.ecode == b.ecode && a.hdr_m == b.hdr_m &&
	      a.hdr_d == b.hdr_d && a.hdr_r == b.hdr_r &&
	      a.ddp_seg_len == b.ddp_seg_len && a.hdrs_len == b.hdrs_len &&
	      (!a.hdrs_len || !memcmp(a.hdrs, b.hdrs, a.hdrs_len)));
	/* all but the 13 reserved bits after HdrCt (siw's layout, which
	 * decodes to the same fields, is re-encoded the RFC's way) */
	CHECK(a.siw_layout || (!memcmp(out, p, 2) && (out[2] & 0xe0) == (p[2] & 0xe0)));
	CHECK(!b.siw_layout);
	CHECK(!memcmp(out + 4, p + 4, (size_t)r - 4));
}

/* The body of an atomic write (wire/srext.h): exactly 16 bytes, which
 * survive decode and encode unchanged. */
static void fuzz_awrite(const uint8_t *p, size_t n)
{
	struct sr_awrite a, b;
	ssize_t r, e;

	r = sr_awrite_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r) && n != SR_AWRITE_LEN);
		return;
	}
	CHECK(r == SR_AWRITE_LEN && n == SR_AWRITE_LEN);
	e = sr_awrite_encode(out, sizeof(out), &a);
	CHECK(e == r);
	CHECK(!memcmp(out, p, (size_t)r));
	CHECK(sr_awrite_decode(out, (size_t)e, &b) == e);
	CHECK(a.to == b.to && !memcmp(a.data, b.data, sizeof(a.data)));
}

/* softrnic's extension headers (wire/srext.h): ACK, RNR, SEND with
 * immediate, the XRC header and the atomic write (whose body, the rest of
 * the input, goes through its own decoder). */
static void fuzz_ext_hdr(const uint8_t *p, size_t n)
{
	struct ddp_hdr a, b;
	ssize_t r, e;

	r = sr_ext_hdr_decode(p, n, &a);
	if (r < 0) {
		CHECK(decode_error(r));
		return;
	}
	CHECK(r == DDP_UNTAGGED_HDR_LEN && (size_t)r <= n && sr_ext_opcode(a.opcode));
	if (a.qn == SR_EXT_QN_XRC)
		CHECK(a.opcode == SR_EXT_ACK && a.msn == 0 && a.mo <= 0xffffff);
	if (a.qn == SR_EXT_QN_AWRITE) {
		CHECK(a.opcode == SR_EXT_ACK && a.mo == 0 && a.last);
		fuzz_awrite(p + r, n - (size_t)r);
	}
	e = sr_ext_hdr_encode(out, sizeof(out), &a);
	CHECK(e == r);
	CHECK(sr_ext_hdr_decode(out, (size_t)e, &b) == e);
	CHECK(a.opcode == b.opcode && a.last == b.last && a.inv_stag == b.inv_stag &&
	      a.qn == b.qn && a.msn == b.msn && a.mo == b.mo);
	/* L, DV and RV, opcode; then every field */
	CHECK((out[0] & 0xc3) == (p[0] & 0xc3));
	CHECK((out[1] & 0xcf) == (p[1] & 0xcf));
	CHECK(!memcmp(out + 2, p + 2, (size_t)r - 2));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data + 1;
	size_t n;

	if (!size)
		return 0;
	n = size - 1;
	switch (data[0] % 10) {
	case 0:
		fuzz_mpa_frame(p, n);
		break;
	case 1:
		fuzz_fpdu(p, n, false);
		break;
	case 2:
		fuzz_fpdu(p, n, true);
		break;
	case 3:
		fuzz_ddp_hdr(p, n);
		break;
	case 4:
		fuzz_read_req(p, n);
		break;
	case 5:
		fuzz_atomic_req(p, n);
		break;
	case 6:
		fuzz_atomic_resp(p, n);
		break;
	case 7:
		fuzz_term(p, n);
		break;
	case 8:
		fuzz_imm(p, n);
		break;
	default:
		fuzz_ext_hdr(p, n);
		break;
	}
	return 0;
}
