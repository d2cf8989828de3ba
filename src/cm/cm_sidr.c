/* The datagram CM's SIDR-like request and reply (cm_sidr.h). */
#include "cm/cm_sidr.h"

#include <errno.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t pd_max(uint8_t type)
{
	return type == SIDR_REQ ? SIDR_REQ_PD_MAX : SIDR_REP_PD_MAX;
}

ssize_t sidr_encode(uint8_t *buf, size_t cap, const struct sidr_msg *m)
{
	size_t len;

	if ((m->type != SIDR_REQ && m->type != SIDR_REP) || m->qpn > SIDR_QPN_MAX ||
	    m->pd_len > pd_max(m->type) || (m->pd_len && !m->pd) ||
	    (m->type == SIDR_REQ && m->status) || m->status > SIDR_REJECT)
		return -EINVAL;
	len = SIDR_HDR_LEN + m->pd_len;
	if (len > cap)
		return -ENOSPC;
	memset(buf, 0, SIDR_HDR_LEN);
	put16(buf, SIDR_MAGIC);
	buf[2] = SIDR_VERSION;
	buf[3] = m->type;
	put32(buf + 4, m->tid);
	put32(buf + 8, m->qpn);
	put32(buf + 12, m->qkey);
	buf[16] = m->status;
	buf[17] = m->pd_len;
	if (m->pd_len)
		memcpy(buf + SIDR_HDR_LEN, m->pd, m->pd_len);
	return (ssize_t)len;
}

int sidr_decode(const uint8_t *buf, size_t len, struct sidr_msg *m)
{
	memset(m, 0, sizeof(*m));
	if (len < SIDR_HDR_LEN || len > SIDR_FRAME_MAX)
		return -EBADMSG;
	if (get16(buf) != SIDR_MAGIC || buf[2] != SIDR_VERSION)
		return -EBADMSG;
	m->type = buf[3];
	if (m->type != SIDR_REQ && m->type != SIDR_REP)
		return -EBADMSG;
	m->tid = get32(buf + 4);
	m->qpn = get32(buf + 8);
	m->qkey = get32(buf + 12);
	m->status = buf[16];
	m->pd_len = buf[17];
	if (m->qpn > SIDR_QPN_MAX || buf[18] || buf[19])
		return -EBADMSG;
	if ((m->type == SIDR_REQ && m->status) || m->status > SIDR_REJECT)
		return -EBADMSG;
	if (m->pd_len > pd_max(m->type) || len != SIDR_HDR_LEN + (size_t)m->pd_len)
		return -EBADMSG;
	m->pd = m->pd_len ? buf + SIDR_HDR_LEN : NULL;
	return 0;
}
