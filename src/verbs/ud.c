/* libibverbs ABI: address handles and multicast attachment, for UD QPs
 * (core/ud.c, chan/udp.c). */
#include "verbs/verbs.h"
#include "chan/udp.h"
#include "wire/ud.h"

#include <errno.h>
#include <string.h>

SR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sr_ah *ah;
	int ret;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	ret = ah_create(to_pd(pd), attr, &ah);
	if (ret)
		SR_FAIL_NULL(ret);
	return &ah->ibah;
}

SR_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	ah_destroy(container_of(ibah, struct sr_ah, ibah));
	return 0;
}

/* Which GID table entry holds gid? -1 if none. */
static int gid_index(const uint8_t gid[16])
{
	struct sr_gid tbl[SR_GID_TBL_LEN];
	int n = dev_query_gids(tbl, SR_GID_TBL_LEN);

	for (int i = 0; i < n; i++)
		if (!memcmp(tbl[i].gid.raw, gid, 16))
			return i;
	return -1;
}

/* ibv_init_ah_from_wc(3), the way rdma-core does it for a RoCEv2 port:
 * the GRH area says IPv4 or IPv6 (wire/ud.h), the reply goes to the
 * sender's address from the GID the message was sent to. A message
 * received through a multicast group has no unicast GID to answer from:
 * EINVAL, as rdma-core. Without IBV_WC_GRH only the LID fields are set
 * (and ibv_create_ah then refuses, RoCE needing a GRH). */
SR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
				  struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah_attr)
{
	struct ud_grh_info g;
	int ver, idx;

	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->port_num = port_num;
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	if (!grh) {
		errno = EINVAL;
		return -1;
	}
	ah_attr->is_global = 1;
	ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & UD_FLOW_MASK;
	ver = ud_grh_parse((const uint8_t *)grh, &g);
	if (ver < 0) {
		errno = -ver;
		return -1;
	}
	/* Multicast GIDs are never in the GID table. */
	if ((ver == 4 && (g.dgid[12] & 0xf0) == 0xe0) || (ver == 6 && g.dgid[0] == 0xff)) {
		errno = EINVAL;
		return -1;
	}
	/* Our GIDs are RoCEv2: an IPv6 GRH must say UDP (0x1b is RoCEv1). */
	if (ver == 6 && g.next_hdr != IPPROTO_UDP) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	idx = gid_index(g.dgid);
	if (idx < 0) {
		errno = EINVAL;
		return -1;
	}
	memcpy(ah_attr->grh.dgid.raw, g.sgid, 16);
	ah_attr->grh.sgid_index = (uint8_t)idx;
	ah_attr->grh.hop_limit = g.hop_limit;
	ah_attr->grh.traffic_class = g.tclass;
	return 0;
}

SR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					       struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* ibv_attach_mcast(3): UD QPs only; the LID is meaningless on RoCE. */
SR_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid || qp->qp_type != IBV_QPT_UD)
		return EINVAL;
	return sr_err(chan_udp_attach(to_qp(qp), gid));
}

SR_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid || qp->qp_type != IBV_QPT_UD)
		return EINVAL;
	return sr_err(chan_udp_detach(to_qp(qp), gid));
}
