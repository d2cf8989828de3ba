/* The one device, softrnic0: identity, limits, and the GID table built from
 * the host's IP addresses at every query (DESIGN.md decision 2). */
#include "core/core.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sr_device sr_dev;
static pthread_once_t sr_dev_once = PTHREAD_ONCE_INIT;
/* What libefa/libmlx5 find at verbs_device.ops: ours, not theirs. */
static const char sr_dev_ops_tag[] = "softrnic";

bool dev_iwarp(void)
{
	const char *t = getenv("SOFTRNIC_TRANSPORT");

	return t && !strcmp(t, "iwarp");
}

static void dev_init(void)
{
	struct sr_device *d = &sr_dev;
	uint32_t r = sr_random32();
	const char *guid;

	sr_log_init();
	d->ops = sr_dev_ops_tag;
	if (dev_iwarp()) {
		d->ibdev.node_type = IBV_NODE_RNIC;
		d->ibdev.transport_type = IBV_TRANSPORT_IWARP;
	} else {
		d->ibdev.node_type = IBV_NODE_CA;
		d->ibdev.transport_type = IBV_TRANSPORT_IB;
	}
	strcpy(d->ibdev.name, "softrnic0");
	strcpy(d->ibdev.dev_name, "uverbs0");
	strcpy(d->ibdev.dev_path, "/sys/class/infiniband_verbs/uverbs0");
	strcpy(d->ibdev.ibdev_path, "/sys/class/infiniband/softrnic0");
	/* A stable-looking EUI-64 in a locally administered range; the low
	 * bits vary so two hosts rarely share one. `softrnic run` passes the
	 * one its sysfs view shows (SOFTRNIC_GUID), so that the program, its
	 * children and /sys/class/infiniband agree (docs/CONFIG.md). */
	d->guid = 0x0253520000000000ULL | r;
	guid = getenv("SOFTRNIC_GUID");
	if (guid && *guid) {
		char *end;
		unsigned long long v = strtoull(guid, &end, 16);

		if (!*end && v && v != ULLONG_MAX)
			d->guid = v;
	}
}

struct sr_device *dev_get(void)
{
	pthread_once(&sr_dev_once, dev_init);
	return &sr_dev;
}

static void gid_from_addr(union ibv_gid *g, const struct sockaddr *sa)
{
	memset(g, 0, sizeof(*g));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		/* IPv4-mapped IPv6, as RoCE v2 GIDs for IPv4 addresses are. */
		g->raw[10] = 0xff;
		g->raw[11] = 0xff;
		memcpy(&g->raw[12], &in->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		memcpy(g->raw, &in6->sin6_addr, 16);
	}
}

/* Order: non-loopback IPv4 first (so index 0 is what perftest and the
 * pingpongs pick by default), then loopback IPv4, then IPv6. */
static int gid_rank(const struct ifaddrs *ifa)
{
	bool lo = ifa->ifa_flags & IFF_LOOPBACK;

	if (ifa->ifa_addr->sa_family == AF_INET)
		return lo ? 1 : 0;
	return lo ? 3 : 2;
}

int dev_query_gids(struct sr_gid *tbl, int max)
{
	struct ifaddrs *ifs, *ifa;
	int n = 0;

	if (getifaddrs(&ifs) < 0)
		return 0;
	for (int rank = 0; rank < 4; rank++) {
		for (ifa = ifs; ifa && n < max; ifa = ifa->ifa_next) {
			if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP))
				continue;
			if (ifa->ifa_addr->sa_family != AF_INET &&
			    ifa->ifa_addr->sa_family != AF_INET6)
				continue;
			if (gid_rank(ifa) != rank)
				continue;
			gid_from_addr(&tbl[n].gid, ifa->ifa_addr);
			tbl[n].family = ifa->ifa_addr->sa_family;
			tbl[n].ifindex = if_nametoindex(ifa->ifa_name);
			snprintf(tbl[n].ifname, sizeof(tbl[n].ifname), "%s", ifa->ifa_name);
			n++;
		}
	}
	freeifaddrs(ifs);
	return n;
}

void dev_fill_attr(struct ibv_device_attr *a)
{
	struct sr_device *d = dev_get();

	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", SR_FW_VER);
	a->node_guid = htobe64(d->guid);
	a->sys_image_guid = htobe64(d->guid);
	a->max_mr_size = SR_MAX_MR_SIZE;
	a->page_size_cap = 0xfffff000;		/* 4 KiB and up */
	a->vendor_id = SR_VENDOR_ID;
	a->vendor_part_id = SR_VENDOR_PART;
	a->hw_ver = 1;
	a->max_qp = SR_MAX_QP;
	a->max_qp_wr = SR_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SHUTDOWN_PORT |
			      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_CHANGE_PHY_PORT |
			      IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS |
			      IBV_DEVICE_XRC;
	a->max_sge = SR_MAX_SGE;
	a->max_sge_rd = SR_MAX_SGE;
	a->max_cq = SR_MAX_CQ;
	a->max_cqe = SR_MAX_CQE;
	a->max_mr = SR_MAX_MR;
	a->max_pd = SR_MAX_PD;
	a->max_qp_rd_atom = SR_MAX_RD_ATOM;
	a->max_ee_rd_atom = 0;
	a->max_res_rd_atom = SR_MAX_RD_ATOM * SR_MAX_QP;
	a->max_qp_init_rd_atom = SR_MAX_RD_ATOM;
	a->max_ee_init_rd_atom = 0;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_mw = SR_MAX_MW;
	/* UD multicast (chan/udp.c): a group is a socket per context. */
	a->max_mcast_grp = 1024;
	a->max_mcast_qp_attach = SR_MAX_QP;
	a->max_total_mcast_qp_attach = 1024 * SR_MAX_QP;
	a->max_ah = SR_MAX_AH;
	a->max_srq = SR_MAX_SRQ;
	a->max_srq_wr = SR_MAX_SRQ_WR;
	a->max_srq_sge = SR_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

void dev_fill_port_attr(struct ibv_port_attr *a)
{
	struct sr_gid g[SR_GID_TBL_LEN];

	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = SR_GID_TBL_LEN;
	a->port_cap_flags = IBV_PORT_CM_SUP;
	a->max_msg_sz = SR_MAX_MSG;
	a->bad_pkey_cntr = 0;
	a->qkey_viol_cntr = 0;
	a->pkey_tbl_len = 1;
	a->lid = 0;
	a->sm_lid = 0;
	a->lmc = 0;
	a->max_vl_num = 1;
	a->sm_sl = 0;
	a->subnet_timeout = 0;
	a->init_type_reply = 0;
	a->active_width = 2;		/* 4X */
	a->active_speed = 32;		/* EDR-class: 25 Gb/s per lane */
	a->phys_state = 5;		/* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	a->flags = IBV_QPF_GRH_REQUIRED;
	a->port_cap_flags2 = 0;
	(void)g;
}
