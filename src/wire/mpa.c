/* MPA: connection setup frames (RFC 5044 §7.1, RFC 6581 §3) and FPDU
 * framing with CRC32c (RFC 5044 §4). Pure functions, see iwarp.h.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <isa-l/crc.h>

#include "wire/be.h"
#include "wire/iwarp.h"

/* RFC 5044 §7.1 flags byte: M, C, R, then reserved bits, of which
 * RFC 6581 §3 takes the next one to say "the private data starts with
 * the IRD/ORD word" (siw MPA_RR_FLAG_ENHANCED, cxgb4
 * MPA_ENHANCED_RDMA_CONN). */
#define MPA_F_MARKERS		0x80
#define MPA_F_CRC		0x40
#define MPA_F_REJECT		0x20
#define MPA_F_ENHANCED		0x10
/* siw takes 0x08 (GSO_EXP); softrnic takes 0x04, 0x02 and 0x01, see
 * iwarp.h. */
#define MPA_F_SOFTRNIC		0x04
#define MPA_F_ECE_REJECT	0x02
#define MPA_F_SOFTRNIC_REPLY	0x01

#define MPA_OFF_FLAGS		16
#define MPA_OFF_REV		17
#define MPA_OFF_PD_LEN		18

/* RFC 6581 §3 IRD/ORD word: two big-endian halves, each a 14-bit count
 * under two control bits. IRD half: P2P, RTR by zero-length SEND. ORD
 * half: RTR by zero-length WRITE, RTR by zero-length READ. */
#define MPA_V2_P2P		0x8000
#define MPA_V2_RTR_SEND		0x4000
#define MPA_V2_RTR_WRITE	0x8000
#define MPA_V2_RTR_READ		0x4000

/* Bytes the private data takes on the wire, IRD/ORD word included. */
static size_t mpa_pd_wire_len(const struct mpa_frame *f)
{
	return (f->enhanced ? MPA_RTR_LEN : 0) + (size_t)f->pd_len;
}

static bool mpa_frame_valid(const struct mpa_frame *f)
{
	if (f->rev != MPA_REV_1 && f->rev != MPA_REV_2)
		return false;
	if (f->pd_len && !f->pd)
		return false;
	if (f->enhanced && (f->rev != MPA_REV_2 ||
			    f->ird > MPA_IRD_ORD_MAX ||
			    f->ord > MPA_IRD_ORD_MAX ||
			    (f->rtr & ~MPA_RTR_MASK)))
		return false;
	return mpa_pd_wire_len(f) <= MPA_MAX_PD;
}

static uint8_t mpa_flags(const struct mpa_frame *f)
{
	uint8_t flags = 0;

	if (f->markers)
		flags |= MPA_F_MARKERS;
	if (f->crc)
		flags |= MPA_F_CRC;
	/* RFC 5044 §7.1: R is zero in a request */
	if (f->reply && f->reject)
		flags |= MPA_F_REJECT;
	if (f->enhanced)
		flags |= MPA_F_ENHANCED;
	if (f->softrnic)
		flags |= MPA_F_SOFTRNIC;
	/* siw's reply echoes the request's flags, 0x04 included: a softrnic
	 * reply says so with a bit that no softrnic request carries */
	if (f->softrnic && f->reply)
		flags |= MPA_F_SOFTRNIC_REPLY;
	/* meaningful only in a softrnic reject */
	if (f->softrnic && f->reply && f->reject && f->ece_reject)
		flags |= MPA_F_ECE_REJECT;
	return flags;
}

static void mpa_rtr_word_put(uint8_t *p, const struct mpa_frame *f)
{
	uint16_t ird = f->ird, ord = f->ord;

	if (f->peer2peer)
		ird |= MPA_V2_P2P;
	if (f->rtr & MPA_RTR_ZERO_SEND)
		ird |= MPA_V2_RTR_SEND;
	if (f->rtr & MPA_RTR_ZERO_WRITE)
		ord |= MPA_V2_RTR_WRITE;
	if (f->rtr & MPA_RTR_ZERO_READ)
		ord |= MPA_V2_RTR_READ;
	put_be16(p, ird);
	put_be16(p + 2, ord);
}

static void mpa_rtr_word_get(const uint8_t *p, struct mpa_frame *f)
{
	uint16_t ird = get_be16(p), ord = get_be16(p + 2);

	f->peer2peer = ird & MPA_V2_P2P;
	f->ird = ird & MPA_IRD_ORD_MAX;
	f->ord = ord & MPA_IRD_ORD_MAX;
	f->rtr = 0;
	if (ird & MPA_V2_RTR_SEND)
		f->rtr |= MPA_RTR_ZERO_SEND;
	if (ord & MPA_V2_RTR_WRITE)
		f->rtr |= MPA_RTR_ZERO_WRITE;
	if (ord & MPA_V2_RTR_READ)
		f->rtr |= MPA_RTR_ZERO_READ;
}

ssize_t mpa_frame_encode(uint8_t *buf, size_t cap, const struct mpa_frame *f)
{
	size_t pd_wire, n;
	uint8_t *p;

	if (!mpa_frame_valid(f))
		return -EINVAL;
	pd_wire = mpa_pd_wire_len(f);
	n = MPA_FRAME_HDR_LEN + pd_wire;
	if (cap < n)
		return -ENOSPC;

	memcpy(buf, f->reply ? MPA_KEY_REP : MPA_KEY_REQ, MPA_KEY_LEN);
	buf[MPA_OFF_FLAGS] = mpa_flags(f);
	buf[MPA_OFF_REV] = f->rev;
	put_be16(buf + MPA_OFF_PD_LEN, (uint16_t)pd_wire);
	p = buf + MPA_FRAME_HDR_LEN;
	if (f->enhanced) {
		mpa_rtr_word_put(p, f);
		p += MPA_RTR_LEN;
	}
	if (f->pd_len)
		memcpy(p, f->pd, f->pd_len);
	return (ssize_t)n;
}

/* Which key the first bytes can still be: 1 request, 2 reply, 3 both
 * (too short to tell), 0 neither. */
static int mpa_key_match(const uint8_t *buf, size_t len)
{
	size_t n = len < MPA_KEY_LEN ? len : MPA_KEY_LEN;
	int m = 0;

	if (!memcmp(buf, MPA_KEY_REQ, n))
		m |= 1;
	if (!memcmp(buf, MPA_KEY_REP, n))
		m |= 2;
	return m;
}

static void mpa_frame_fill(const uint8_t *buf, uint16_t pd_wire,
			   struct mpa_frame *f)
{
	uint8_t flags = buf[MPA_OFF_FLAGS];
	const uint8_t *pd = buf + MPA_FRAME_HDR_LEN;

	memset(f, 0, sizeof(*f));
	f->reply = !memcmp(buf, MPA_KEY_REP, MPA_KEY_LEN);
	f->markers = flags & MPA_F_MARKERS;
	f->crc = flags & MPA_F_CRC;
	f->reject = f->reply && (flags & MPA_F_REJECT);
	f->softrnic = (flags & MPA_F_SOFTRNIC) &&
		      (f->reply ? (flags & MPA_F_SOFTRNIC_REPLY) != 0
				: !(flags & MPA_F_SOFTRNIC_REPLY));
	f->ece_reject = f->softrnic && f->reject && (flags & MPA_F_ECE_REJECT);
	f->rev = buf[MPA_OFF_REV];
	/* in rev 1 the Enhanced bit is reserved: not checked */
	f->enhanced = f->rev == MPA_REV_2 && (flags & MPA_F_ENHANCED);
	if (f->enhanced) {
		mpa_rtr_word_get(pd, f);
		pd += MPA_RTR_LEN;
		pd_wire -= MPA_RTR_LEN;
	}
	f->pd_len = pd_wire;
	f->pd = pd_wire ? pd : NULL;
}

ssize_t mpa_frame_decode(const uint8_t *buf, size_t len, struct mpa_frame *f)
{
	uint16_t pd_wire;
	uint8_t rev;

	if (!len)
		return -EAGAIN;
	if (!mpa_key_match(buf, len))
		return -EBADMSG;
	if (len < MPA_FRAME_HDR_LEN)
		return -EAGAIN;

	rev = buf[MPA_OFF_REV];
	if (rev != MPA_REV_1 && rev != MPA_REV_2)
		return -EPROTO;
	pd_wire = get_be16(buf + MPA_OFF_PD_LEN);
	if (pd_wire > MPA_MAX_PD)
		return -EBADMSG;
	if (rev == MPA_REV_2 && (buf[MPA_OFF_FLAGS] & MPA_F_ENHANCED) &&
	    pd_wire < MPA_RTR_LEN)
		return -EBADMSG;
	if (len < MPA_FRAME_HDR_LEN + (size_t)pd_wire)
		return -EAGAIN;

	mpa_frame_fill(buf, pd_wire, f);
	return MPA_FRAME_HDR_LEN + pd_wire;
}

/* ---- CRC32c ------------------------------------------------------------ */

/* ISA-L's crc32_iscsi() is the raw reflected CRC32c register update (like
 * the kernel's crc32c()): no initial or final inversion of its own. So
 * the iSCSI CRC is ~crc32_iscsi(buf, len, ~0), and an update chains by
 * passing the previous raw value back in. Its length is an int. */
uint32_t mpa_crc_update(uint32_t state, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len) {
		int n = len > INT_MAX ? INT_MAX : (int)len;

		state = crc32_iscsi((unsigned char *)p, n, state);
		p += n;
		len -= (size_t)n;
	}
	return state;
}

uint32_t mpa_crc(const struct iovec *iov, int iovcnt)
{
	uint32_t s = mpa_crc_init();
	int i;

	for (i = 0; i < iovcnt; i++)
		s = mpa_crc_update(s, iov[i].iov_base, iov[i].iov_len);
	return mpa_crc_final(s);
}

/* RFC 5044 §4 sends the CRC as iSCSI does: RFC 3720 Appendix B.4 shows
 * 32 zero bytes with CRC value 0x8a9136aa sent as aa 36 91 8a, least
 * significant byte first. */
void mpa_crc_put(uint8_t out[4], uint32_t crc)
{
	out[0] = (uint8_t)crc;
	out[1] = (uint8_t)(crc >> 8);
	out[2] = (uint8_t)(crc >> 16);
	out[3] = (uint8_t)(crc >> 24);
}

uint32_t mpa_crc_get(const uint8_t in[4])
{
	return (uint32_t)in[0] | (uint32_t)in[1] << 8 |
	       (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

/* ---- FPDUs ------------------------------------------------------------- */

size_t mpa_fpdu_trailer(uint8_t out[MPA_TRAILER_MAX], size_t ulpdu_len,
			uint32_t crc)
{
	size_t pad = mpa_pad(ulpdu_len);

	memset(out, 0, pad);	/* RFC 5044 §4: pad bytes are zero */
	mpa_crc_put(out + pad, crc);
	return pad + MPA_CRC_SIZE;
}

ssize_t mpa_fpdu_encode(uint8_t *buf, size_t cap, const uint8_t *ulpdu,
			size_t ulpdu_len, bool crc)
{
	size_t n, body;
	uint32_t c = 0;

	if (ulpdu_len > MPA_MAX_ULPDU || (ulpdu_len && !ulpdu))
		return -EINVAL;
	n = mpa_fpdu_len(ulpdu_len);
	if (cap < n)
		return -ENOSPC;

	put_be16(buf, (uint16_t)ulpdu_len);
	if (ulpdu_len)
		memcpy(buf + MPA_ULPDU_LEN_SIZE, ulpdu, ulpdu_len);
	body = MPA_ULPDU_LEN_SIZE + ulpdu_len;
	memset(buf + body, 0, mpa_pad(ulpdu_len));
	body += mpa_pad(ulpdu_len);
	if (crc)
		c = mpa_crc_final(mpa_crc_update(mpa_crc_init(), buf, body));
	mpa_crc_put(buf + body, c);
	return (ssize_t)n;
}

ssize_t mpa_fpdu_decode(const uint8_t *buf, size_t len, bool crc,
			struct mpa_fpdu *f)
{
	size_t n, body;
	uint16_t ulen;

	if (len < MPA_ULPDU_LEN_SIZE)
		return -EAGAIN;
	ulen = get_be16(buf);
	n = mpa_fpdu_len(ulen);
	if (len < n)
		return -EAGAIN;

	body = n - MPA_CRC_SIZE;
	f->ulpdu = buf + MPA_ULPDU_LEN_SIZE;
	f->ulpdu_len = ulen;
	f->crc = mpa_crc_get(buf + body);
	if (crc &&
	    f->crc != mpa_crc_final(mpa_crc_update(mpa_crc_init(), buf, body)))
		return -EBADMSG;
	return (ssize_t)n;
}
