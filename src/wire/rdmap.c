/* RDMAP message bodies that follow the DDP header: RDMA Read Request
 * (RFC 5040 §4.4), TERMINATE (RFC 5040 §4.8), Atomic Request/Response
 * and Immediate Data (RFC 7306 §4). Pure functions, see iwarp.h.
 */
#include <errno.h>
#include <string.h>

#include "wire/be.h"
#include "wire/iwarp.h"

/* ---- RDMA Read Request: sink STag/TO, size, source STag/TO ------------- */

ssize_t rdmap_read_req_encode(uint8_t *buf, size_t cap,
			      const struct rdmap_read_req *r)
{
	if (cap < RDMAP_READ_REQ_LEN)
		return -ENOSPC;
	put_be32(buf, r->sink_stag);
	put_be64(buf + 4, r->sink_to);
	put_be32(buf + 12, r->size);
	put_be32(buf + 16, r->src_stag);
	put_be64(buf + 20, r->src_to);
	return RDMAP_READ_REQ_LEN;
}

ssize_t rdmap_read_req_decode(const uint8_t *buf, size_t len,
			      struct rdmap_read_req *r)
{
	if (len < RDMAP_READ_REQ_LEN)
		return -EAGAIN;
	r->sink_stag = get_be32(buf);
	r->sink_to = get_be64(buf + 4);
	r->size = get_be32(buf + 12);
	r->src_stag = get_be32(buf + 16);
	r->src_to = get_be64(buf + 20);
	return RDMAP_READ_REQ_LEN;
}

/* ---- Atomics (RFC 7306 §4) --------------------------------------------- */

#define ATOMIC_AOPCODE_MASK	0x0f	/* low 4 bits of the first word */

ssize_t rdmap_atomic_req_encode(uint8_t *buf, size_t cap,
				const struct rdmap_atomic_req *r)
{
	if (r->op >= RDMAP_ATOMIC_OP_COUNT)
		return -EINVAL;
	if (cap < RDMAP_ATOMIC_REQ_LEN)
		return -ENOSPC;
	put_be32(buf, r->op);	/* reserved bits zero */
	put_be32(buf + 4, r->req_id);
	put_be32(buf + 8, r->stag);
	put_be64(buf + 12, r->to);
	put_be64(buf + 20, r->add_swap);
	put_be64(buf + 28, r->add_swap_mask);
	put_be64(buf + 36, r->compare);
	put_be64(buf + 44, r->compare_mask);
	return RDMAP_ATOMIC_REQ_LEN;
}

ssize_t rdmap_atomic_req_decode(const uint8_t *buf, size_t len,
				struct rdmap_atomic_req *r)
{
	uint8_t op;

	if (len < 4)
		return -EAGAIN;
	op = get_be32(buf) & ATOMIC_AOPCODE_MASK;
	if (op >= RDMAP_ATOMIC_OP_COUNT)
		return -EBADMSG;
	if (len < RDMAP_ATOMIC_REQ_LEN)
		return -EAGAIN;
	r->op = op;
	r->req_id = get_be32(buf + 4);
	r->stag = get_be32(buf + 8);
	r->to = get_be64(buf + 12);
	r->add_swap = get_be64(buf + 20);
	r->add_swap_mask = get_be64(buf + 28);
	r->compare = get_be64(buf + 36);
	r->compare_mask = get_be64(buf + 44);
	return RDMAP_ATOMIC_REQ_LEN;
}

ssize_t rdmap_atomic_resp_encode(uint8_t *buf, size_t cap,
				 const struct rdmap_atomic_resp *r)
{
	if (cap < RDMAP_ATOMIC_RESP_LEN)
		return -ENOSPC;
	put_be32(buf, r->req_id);
	put_be64(buf + 4, r->orig);
	return RDMAP_ATOMIC_RESP_LEN;
}

ssize_t rdmap_atomic_resp_decode(const uint8_t *buf, size_t len,
				 struct rdmap_atomic_resp *r)
{
	if (len < RDMAP_ATOMIC_RESP_LEN)
		return -EAGAIN;
	r->req_id = get_be32(buf);
	r->orig = get_be64(buf + 4);
	return RDMAP_ATOMIC_RESP_LEN;
}

/* ---- Immediate Data (RFC 7306 §4): 8 bytes of ULP data ----------------- */

ssize_t rdmap_imm_encode(uint8_t *buf, size_t cap, const struct rdmap_imm *m)
{
	if (cap < RDMAP_IMM_LEN)
		return -ENOSPC;
	memcpy(buf, m->data, RDMAP_IMM_LEN);
	return RDMAP_IMM_LEN;
}

ssize_t rdmap_imm_decode(const uint8_t *buf, size_t len, struct rdmap_imm *m)
{
	if (len < RDMAP_IMM_LEN)
		return -EAGAIN;
	memcpy(m->data, buf, RDMAP_IMM_LEN);
	return RDMAP_IMM_LEN;
}

/* ---- TERMINATE (RFC 5040 §4.8) ----------------------------------------- */

/* Terminate Control, byte 2: HdrCt is its top three bits. */
#define TERM_HDRCT_M		0x80
#define TERM_HDRCT_D		0x40
#define TERM_HDRCT_R		0x20
#define TERM_SEG_LEN_SIZE	2

/* A copied DDP header is as long as its own T bit says. */
static size_t term_ddp_copy_len(uint8_t ctrl)
{
	return ctrl & 0x80 ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
}

/* RDMAP header bytes beyond the DDP header, for the R bit: only the
 * requests that carry a body of their own have one. */
static size_t term_rdmap_copy_len(uint8_t opcode)
{
	switch (opcode) {
	case RDMAP_READ_REQ:
		return RDMAP_READ_REQ_LEN;
	case RDMAP_ATOMIC_REQ:
		return RDMAP_ATOMIC_REQ_LEN;
	default:
		return 0;
	}
}

size_t rdmap_term_copy_len(const uint8_t *ulpdu, size_t len, bool d, bool r)
{
	size_t n;

	if (!d || !len)
		return 0;
	n = term_ddp_copy_len(ulpdu[0]);
	if (r && len >= 2)
		n += term_rdmap_copy_len(ulpdu[1] & 0x0f);
	return n < len ? n : len;
}

static bool term_valid(const struct rdmap_term *t)
{
	bool any = t->hdr_m || t->hdr_d || t->hdr_r;

	if (t->layer > 0xf || t->etype > 0xf)
		return false;
	if (t->hdrs_len && (!any || !t->hdrs))
		return false;
	if (t->hdr_r && !t->hdr_d)
		return false;
	if (t->hdr_d && (!t->hdrs_len ||
			 t->hdrs_len < term_ddp_copy_len(t->hdrs[0])))
		return false;
	return true;
}

ssize_t rdmap_term_encode(uint8_t *buf, size_t cap, const struct rdmap_term *t)
{
	bool any = t->hdr_m || t->hdr_d || t->hdr_r;
	size_t n = RDMAP_TERM_HDR_LEN;

	if (!term_valid(t))
		return -EINVAL;
	if (any) {
		if (t->hdrs_len > cap)
			return -ENOSPC;
		n += TERM_SEG_LEN_SIZE + t->hdrs_len;
	}
	if (cap < n)
		return -ENOSPC;

	buf[0] = (uint8_t)(t->layer << 4 | t->etype);
	buf[1] = t->ecode;
	buf[2] = (t->hdr_m ? TERM_HDRCT_M : 0) | (t->hdr_d ? TERM_HDRCT_D : 0) |
		 (t->hdr_r ? TERM_HDRCT_R : 0);
	buf[3] = 0;
	if (!any)
		return (ssize_t)n;
	put_be16(buf + RDMAP_TERM_HDR_LEN, t->ddp_seg_len);
	if (t->hdrs_len)
		memcpy(buf + RDMAP_TERM_HDR_LEN + TERM_SEG_LEN_SIZE, t->hdrs,
		       t->hdrs_len);
	return (ssize_t)n;
}

/* Linux siw (drivers/infiniband/sw/siw/iwarp.h, struct iwarp_terminate,
 * checked in 6.1) lays the Terminate Control word out with C bitfields
 * whose order is right only on big-endian hosts. On little-endian ones
 * (x86, arm64) it sends Layer in the low nibble of byte 0 and EType in
 * the high one, and M, D, R as 0x01, 0x02, 0x04 of byte 2, bits RFC 5040
 * §4.8 reserves (sent as zero). So HdrCt bits found only there, with
 * none in their RFC place, can only be siw's layout. siw sets M and D with
 * every error whose layout this changes the meaning of (RDMAP protection
 * errors, DDP buffer errors); the ones it sends without (catastrophic,
 * version, opcode, LLP) map to the same completion status either way
 * (status_of_term() in src/chan/tcp_tx.c), so they stay as they are. */
#define TERM_SIW_M		0x01
#define TERM_SIW_D		0x02
#define TERM_SIW_R		0x04
#define TERM_SIW_HDRCT		(TERM_SIW_M | TERM_SIW_D | TERM_SIW_R)

/* siw's reserved bits (the other 13) are zero: 0x01..0x07 in byte 2 and
 * nothing else there or in byte 3. Any other pattern of reserved bits is
 * ignored, as the RFC asks. */
static bool term_is_siw_layout(const uint8_t *buf)
{
	return (buf[2] & ~TERM_SIW_HDRCT) == 0 && (buf[2] & TERM_SIW_HDRCT) && buf[3] == 0;
}

ssize_t rdmap_term_decode(const uint8_t *buf, size_t len, struct rdmap_term *t)
{
	size_t off = RDMAP_TERM_HDR_LEN + TERM_SEG_LEN_SIZE;

	if (len < RDMAP_TERM_HDR_LEN)
		return -EAGAIN;
	memset(t, 0, sizeof(*t));
	t->ecode = buf[1];
	if (term_is_siw_layout(buf)) {
		t->siw_layout = true;
		t->layer = buf[0] & 0x0f;
		t->etype = buf[0] >> 4;
		t->hdr_m = buf[2] & TERM_SIW_M;
		t->hdr_d = buf[2] & TERM_SIW_D;
		t->hdr_r = buf[2] & TERM_SIW_R;
	} else {
		t->layer = buf[0] >> 4;
		t->etype = buf[0] & 0x0f;
		t->hdr_m = buf[2] & TERM_HDRCT_M;
		t->hdr_d = buf[2] & TERM_HDRCT_D;
		t->hdr_r = buf[2] & TERM_HDRCT_R;
	}
	if (!t->hdr_m && !t->hdr_d && !t->hdr_r)
		return RDMAP_TERM_HDR_LEN;
	if (t->hdr_r && !t->hdr_d)
		return -EBADMSG;
	if (len < off)
		return -EAGAIN;

	t->ddp_seg_len = get_be16(buf + RDMAP_TERM_HDR_LEN);
	t->hdrs_len = len - off;
	t->hdrs = t->hdrs_len ? buf + off : NULL;
	if (t->hdr_d && (!t->hdrs_len ||
			 t->hdrs_len < term_ddp_copy_len(t->hdrs[0])))
		return -EAGAIN;
	return (ssize_t)len;
}
