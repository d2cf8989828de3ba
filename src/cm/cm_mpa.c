/* Pure CM helpers; see cm_mpa.h. */
#include "cm/cm_mpa.h"

#include <errno.h>
#include <rdma/rdma_cma.h>

#include "wire/be.h"

int cm_pd_limit(bool iwarp, enum cm_pd_kind kind)
{
	/* IB CM private data (IBTA Vol 1 §12.6: REQ 92, REP 196, REJ 148
	 * bytes); rdma_cm puts its own 36-byte header in a REQ only. */
	static const int ib[] = { [CM_PD_REQ] = 92 - 36, [CM_PD_REP] = 196, [CM_PD_REJ] = 148 };

	if (iwarp)
		return MPA_MAX_PD - MPA_RTR_LEN;
	return ib[kind];
}

ssize_t cm_mpa_encode(uint8_t *buf, size_t cap, bool reply, bool reject, bool crc,
		      bool ext, bool ece, uint16_t ird, uint16_t ord,
		      const void *pd, size_t pd_len)
{
	return cm_mpa_encode_rev(buf, cap, MPA_REV_2, reply, reject, crc, ext, ece, ird, ord,
				 0, pd, pd_len);
}

uint8_t cm_mpa_rtr_pick(uint8_t offered)
{
	/* A zero-length WRITE or READ RTR needs nothing from the
	 * application; a zero-length SEND would take one of its receives
	 * (and complete it), so it is the last choice. An offer of none
	 * gets WRITE, as Linux siw's responder proposes. */
	if (offered & MPA_RTR_ZERO_WRITE || !(offered & MPA_RTR_MASK))
		return MPA_RTR_ZERO_WRITE;
	if (offered & MPA_RTR_ZERO_READ)
		return MPA_RTR_ZERO_READ;
	return MPA_RTR_ZERO_SEND;
}

ssize_t cm_mpa_encode_rev(uint8_t *buf, size_t cap, uint8_t rev, bool reply, bool reject,
			  bool crc, bool ext, bool ece, uint16_t ird, uint16_t ord,
			  uint8_t rtr, const void *pd, size_t pd_len)
{
	/* Rev 1 has neither the enhanced IRD/ORD word nor softrnic's flags
	 * (a rev 1 peer is never softrnic: softrnic always asks rev 2). */
	bool v2 = rev != MPA_REV_1;
	struct mpa_frame f = {
		.reply = reply, .reject = reply && reject, .crc = crc,
		.softrnic = v2 && ext, .ece_reject = v2 && ece, .rev = v2 ? MPA_REV_2 : MPA_REV_1,
		.enhanced = v2,
		.peer2peer = v2 && rtr, .rtr = v2 ? rtr & MPA_RTR_MASK : 0,
		.ird = ird > MPA_IRD_ORD_MAX ? MPA_IRD_ORD_MAX : ird,
		.ord = ord > MPA_IRD_ORD_MAX ? MPA_IRD_ORD_MAX : ord,
		.pd = pd, .pd_len = (uint16_t)pd_len,
	};

	if (pd_len > MPA_MAX_PD - MPA_RTR_LEN)
		return -EINVAL;
	return mpa_frame_encode(buf, cap, &f);
}

size_t cm_mpa_need(const uint8_t *buf, size_t len)
{
	uint16_t pd_wire;

	if (len < MPA_FRAME_HDR_LEN)
		return MPA_FRAME_HDR_LEN;
	pd_wire = get_be16(buf + MPA_FRAME_HDR_LEN - 2);
	if (pd_wire > MPA_MAX_PD)
		return CM_MPA_FRAME_MAX + 1;
	return MPA_FRAME_HDR_LEN + pd_wire;
}

int cm_depth(uint8_t want, uint8_t max)
{
	if (want == RDMA_MAX_RESP_RES)
		return max;
	return want > max ? -EINVAL : want;
}

const char *cm_event_name(int event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if (event < 0 || (size_t)event >= sizeof(names) / sizeof(names[0]) || !names[event])
		return "UNKNOWN EVENT";
	return names[event];
}
