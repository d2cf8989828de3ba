/*
 * The small public libibverbs functions that are not verbs on objects:
 * kernel-struct conversions, sysfs helpers, rate conversions, fork
 * control, enum-to-string, L2 address resolution, and the compat entry
 * points kept for binaries linked against libibverbs 1.0.
 *
 * Behaviour follows rdma-core 44 (Debian 12), which these replace: the man
 * pages ibv_rate_to_mult(3), ibv_rate_to_mbps(3), ibv_event_type_str(3),
 * ibv_fork_init(3), and where no man page exists, what the real library
 * returns (the tables below were checked against it value by value).
 */
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/*
 * Several entry points below ignore their arguments by design (fork control,
 * compat stubs); the prototypes still name them, as rdma-core's do.
 */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/*
 * rdma-core declares these in headers Debian does not install
 * (infiniband/marshall.h, infiniband/driver.h); the prototypes are its.
 */
SR_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
					  struct ib_uverbs_ah_attr *src);
SR_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
					  struct ib_uverbs_qp_attr *src);
SR_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
					   struct ib_user_path_rec *src);
SR_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
					 struct ibv_sa_path_rec *src);
SR_EXPORT const char *ibv_get_sysfs_path(void);
SR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file,
				  char *buf, size_t size);
SR_EXPORT int ibv_dontfork_range(void *base, size_t size);
SR_EXPORT int ibv_dofork_range(void *base, size_t size);

/* ------------------------------------------------------------------ */
/* Kernel ABI conversions (rdma-core marshall.c)                        */
/* ------------------------------------------------------------------ */

/*
 * librdmacm and old user-space SA code get these structs from the kernel
 * (rdma/ib_user_verbs.h, rdma/ib_user_sa.h).  The layouts differ from the
 * verbs ones only in field order and width; values, including the
 * big-endian ones (LIDs, P_Key, flow label), are copied as they are.
 */
SR_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
					  struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;

	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

/*
 * qp_state is deliberately not copied, as in rdma-core: the caller
 * (rdma_init_qp_attr) sets the state it asked the kernel about, and takes
 * the attribute mask from the response itself.
 */
SR_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
					  struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;

	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;

	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/* Path records (IBTA Vol 1 §15.2.5.16, SA PathRecord) in both directions. */
SR_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
					   struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

SR_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
					 struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

/* ------------------------------------------------------------------ */
/* sysfs helpers                                                        */
/* ------------------------------------------------------------------ */

static char sysfs_path[IBV_SYSFS_PATH_MAX];
static pthread_once_t sysfs_path_once = PTHREAD_ONCE_INIT;

static void sysfs_path_init(void)
{
	/*
	 * As rdma-core: SYSFS_PATH overrides "/sys", but not in a set-user-ID
	 * program (secure_getenv ignores it there), and loses trailing '/'.
	 */
	const char *env = secure_getenv("SYSFS_PATH");
	size_t len;

	snprintf(sysfs_path, sizeof(sysfs_path), "%s", env ? env : "/sys");
	len = strlen(sysfs_path);
	while (len > 0 && sysfs_path[len - 1] == '/')
		sysfs_path[--len] = '\0';
}

/* The sysfs mount point; the string stays valid for the process lifetime. */
SR_EXPORT const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_path_once, sysfs_path_init);
	return sysfs_path;
}

/*
 * Reads "dir/file" into buf, as a string without its trailing newline, and
 * returns its length, or -1 (errno set) if it cannot be opened or read.
 * Like rdma-core, content that fills the whole buffer without a newline is
 * an error rather than a silently truncated value.  ibv_devinfo uses this
 * for the optional board_id of a device's ibdev_path.
 */
SR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file,
				  char *buf, size_t size)
{
	char path[PATH_MAX];
	ssize_t len;
	int fd, n, err;

	n = snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	do
		len = read(fd, buf, size);
	while (len < 0 && errno == EINTR);
	err = errno;
	close(fd);

	if (len < 0) {
		errno = err;
		return -1;
	}
	if (len > 0 && buf[len - 1] == '\n') {
		buf[--len] = '\0';
	} else if ((size_t)len < size) {
		buf[len] = '\0';
	} else if (size > 0) {
		errno = EOVERFLOW;
		return -1;
	}
	return (int)len;
}

/* ------------------------------------------------------------------ */
/* Static rates (ibv_rate_to_mult(3), ibv_rate_to_mbps(3))             */
/* ------------------------------------------------------------------ */

/*
 * One row per enum ibv_rate value.  mult is the rate as a multiple of
 * 2.5 Gb/s, or -1 where rdma-core defines none (the 64b/66b rates, and 100
 * to 300 Gb/s, are not multiples it lists).  mbps is the exact data rate
 * (FDR 14.0625 Gb/s is 14062, EDR 25.78125 Gb/s is 25781, ...).
 */
static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rate_table[] = {
	{ IBV_RATE_2_5_GBPS,	1,	2500 },
	{ IBV_RATE_5_GBPS,	2,	5000 },
	{ IBV_RATE_10_GBPS,	4,	10000 },
	{ IBV_RATE_20_GBPS,	8,	20000 },
	{ IBV_RATE_30_GBPS,	12,	30000 },
	{ IBV_RATE_40_GBPS,	16,	40000 },
	{ IBV_RATE_60_GBPS,	24,	60000 },
	{ IBV_RATE_80_GBPS,	32,	80000 },
	{ IBV_RATE_120_GBPS,	48,	120000 },
	{ IBV_RATE_14_GBPS,	-1,	14062 },
	{ IBV_RATE_56_GBPS,	-1,	56250 },
	{ IBV_RATE_112_GBPS,	-1,	112500 },
	{ IBV_RATE_168_GBPS,	-1,	168750 },
	{ IBV_RATE_25_GBPS,	-1,	25781 },
	{ IBV_RATE_100_GBPS,	-1,	103125 },
	{ IBV_RATE_200_GBPS,	-1,	206250 },
	{ IBV_RATE_300_GBPS,	-1,	309375 },
	{ IBV_RATE_28_GBPS,	11,	28125 },
	{ IBV_RATE_50_GBPS,	20,	53125 },
	{ IBV_RATE_400_GBPS,	160,	425000 },
	{ IBV_RATE_600_GBPS,	240,	637500 },
	{ IBV_RATE_800_GBPS,	320,	850000 },
	{ IBV_RATE_1200_GBPS,	480,	1275000 },
};

/* Returns -1 for IBV_RATE_MAX and anything unknown, as the man page says. */
SR_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(rate_table); i++)
		if (rate_table[i].rate == rate)
			return rate_table[i].mult;
	return -1;
}

/* Returns IBV_RATE_MAX for a multiple that names no rate. */
SR_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	size_t i;

	if (mult <= 0)
		return IBV_RATE_MAX;
	for (i = 0; i < ARRAY_SIZE(rate_table); i++)
		if (rate_table[i].mult == mult)
			return rate_table[i].rate;
	return IBV_RATE_MAX;
}

SR_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(rate_table); i++)
		if (rate_table[i].rate == rate)
			return rate_table[i].mbps;
	return -1;
}

/* Exact match only, like rdma-core: 100000 is not a rate, 103125 is. */
SR_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(rate_table); i++)
		if (rate_table[i].mbps == mbps)
			return rate_table[i].rate;
	return IBV_RATE_MAX;
}

/* ------------------------------------------------------------------ */
/* fork support (ibv_fork_init(3))                                      */
/* ------------------------------------------------------------------ */

/*
 * rdma-core marks registered memory MADV_DONTFORK so that pinned pages are
 * not copied-on-write away from the HCA in the parent after fork(); the
 * price is that the child cannot touch those buffers at all.  softrnic
 * never pins: it reads and writes registered memory through the process's
 * own mappings at the moment of each transfer, so there is nothing to
 * protect, and changing the advice would only break forked children (e.g.
 * a child that reads a receive buffer).  Both calls therefore succeed and
 * change nothing.  libmlx5 imports them; the MR verbs need not call them.
 */
SR_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

SR_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

/* ------------------------------------------------------------------ */
/* enum to string (ibv_event_type_str(3))                               */
/* ------------------------------------------------------------------ */

/*
 * The strings are rdma-core 44's, byte for byte: programs print them and
 * tests compare logs against the real library.  Anything outside a table
 * is "unknown".
 */
static const char *const node_type_names[] = {
	[IBV_NODE_CA]		= "InfiniBand channel adapter",
	[IBV_NODE_SWITCH]	= "InfiniBand switch",
	[IBV_NODE_ROUTER]	= "InfiniBand router",
	[IBV_NODE_RNIC]		= "iWARP NIC",
	[IBV_NODE_USNIC]	= "usNIC",
	[IBV_NODE_USNIC_UDP]	= "usNIC UDP",
	[IBV_NODE_UNSPECIFIED]	= "unspecified",
};

static const char *const port_state_names[] = {
	[IBV_PORT_NOP]		= "no state change (NOP)",
	[IBV_PORT_DOWN]		= "down",
	[IBV_PORT_INIT]		= "init",
	[IBV_PORT_ARMED]	= "armed",
	[IBV_PORT_ACTIVE]	= "active",
	[IBV_PORT_ACTIVE_DEFER]	= "active defer",
};

static const char *const event_type_names[] = {
	[IBV_EVENT_CQ_ERR]		= "CQ error",
	[IBV_EVENT_QP_FATAL]		= "local work queue catastrophic error",
	[IBV_EVENT_QP_REQ_ERR]		= "invalid request local work queue error",
	[IBV_EVENT_QP_ACCESS_ERR]	= "local access violation work queue error",
	[IBV_EVENT_COMM_EST]		= "communication established",
	[IBV_EVENT_SQ_DRAINED]		= "send queue drained",
	[IBV_EVENT_PATH_MIG]		= "path migrated",
	[IBV_EVENT_PATH_MIG_ERR]	= "path migration request error",
	[IBV_EVENT_DEVICE_FATAL]	= "local catastrophic error",
	[IBV_EVENT_PORT_ACTIVE]		= "port active",
	[IBV_EVENT_PORT_ERR]		= "port error",
	[IBV_EVENT_LID_CHANGE]		= "LID change",
	[IBV_EVENT_PKEY_CHANGE]		= "P_Key change",
	[IBV_EVENT_SM_CHANGE]		= "SM change",
	[IBV_EVENT_SRQ_ERR]		= "SRQ catastrophic error",
	[IBV_EVENT_SRQ_LIMIT_REACHED]	= "SRQ limit reached",
	[IBV_EVENT_QP_LAST_WQE_REACHED]	= "last WQE reached",
	[IBV_EVENT_CLIENT_REREGISTER]	= "client reregistration",
	[IBV_EVENT_GID_CHANGE]		= "GID table change",
	[IBV_EVENT_WQ_FATAL]		= "WQ fatal",
};

static const char *const wc_status_names[] = {
	[IBV_WC_SUCCESS]		= "success",
	[IBV_WC_LOC_LEN_ERR]		= "local length error",
	[IBV_WC_LOC_QP_OP_ERR]		= "local QP operation error",
	[IBV_WC_LOC_EEC_OP_ERR]		= "local EE context operation error",
	[IBV_WC_LOC_PROT_ERR]		= "local protection error",
	[IBV_WC_WR_FLUSH_ERR]		= "Work Request Flushed Error",
	[IBV_WC_MW_BIND_ERR]		= "memory management operation error",
	[IBV_WC_BAD_RESP_ERR]		= "bad response error",
	[IBV_WC_LOC_ACCESS_ERR]		= "local access error",
	[IBV_WC_REM_INV_REQ_ERR]	= "remote invalid request error",
	[IBV_WC_REM_ACCESS_ERR]		= "remote access error",
	[IBV_WC_REM_OP_ERR]		= "remote operation error",
	[IBV_WC_RETRY_EXC_ERR]		= "transport retry counter exceeded",
	[IBV_WC_RNR_RETRY_EXC_ERR]	= "RNR retry counter exceeded",
	[IBV_WC_LOC_RDD_VIOL_ERR]	= "local RDD violation error",
	[IBV_WC_REM_INV_RD_REQ_ERR]	= "remote invalid RD request",
	[IBV_WC_REM_ABORT_ERR]		= "aborted error",
	[IBV_WC_INV_EECN_ERR]		= "invalid EE context number",
	[IBV_WC_INV_EEC_STATE_ERR]	= "invalid EE context state",
	[IBV_WC_FATAL_ERR]		= "fatal error",
	[IBV_WC_RESP_TIMEOUT_ERR]	= "response timeout error",
	[IBV_WC_GENERAL_ERR]		= "general error",
	[IBV_WC_TM_ERR]			= "TM error",
	[IBV_WC_TM_RNDV_INCOMPLETE]	= "TM software rendezvous",
};

/* Indexes a sparse name table; negative values wrap to huge and miss. */
static const char *enum_name(const char *const *names, size_t n,
			     unsigned int v)
{
	return v < n && names[v] ? names[v] : "unknown";
}

SR_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	return enum_name(node_type_names, ARRAY_SIZE(node_type_names),
			 (unsigned int)node_type);
}

SR_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	return enum_name(port_state_names, ARRAY_SIZE(port_state_names),
			 (unsigned int)port_state);
}

SR_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
	return enum_name(event_type_names, ARRAY_SIZE(event_type_names),
			 (unsigned int)event);
}

SR_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	return enum_name(wc_status_names, ARRAY_SIZE(wc_status_names),
			 (unsigned int)status);
}

/* ------------------------------------------------------------------ */
/* L2 address of a RoCE destination                                     */
/* ------------------------------------------------------------------ */

/*
 * rdma-core asks the kernel's neighbour table (netlink) for the MAC behind
 * attr->grh.dgid, for providers that build Ethernet headers themselves
 * (libmlx5 calls it from create_ah).  softrnic's link layer carries iWARP
 * over TCP/UDP sockets: no frame it sends holds a MAC, so a neighbour
 * lookup would only add a blocking netlink round trip that can fail.
 * Instead the answer is derived from the GID, deterministically:
 *
 *   IPv4 multicast (IPv4-mapped, or ff0e::ffff:a.b.c.d as RoCE encodes it)
 *	01:00:5e + low 23 bits of the group (RFC 1112 §6.4)
 *   IPv6 multicast (ff00::/8)	33:33 + last 32 bits (RFC 2464 §7)
 *   IPv4-mapped unicast	02:00:a:b:c:d
 *   other unicast		02 + last 40 bits of the GID
 *
 * 02 is a locally administered unicast prefix, so it never names real
 * hardware.  *vid is 0xffff, rdma-core's "no VLAN".  Like rdma-core, the
 * source GID index is checked with ibv_query_gid() first and its failure
 * returned; on success 0 is returned.
 */
SR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
					  struct ibv_ah_attr *attr,
					  uint8_t eth_mac[ETHERNET_LL_SIZE],
					  uint16_t *vid)
{
	static const uint8_t v4_mapped[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	static const uint8_t v4_mcast[12] = {
		0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	const uint8_t *g = attr->grh.dgid.raw;
	union ibv_gid sgid;
	int err;

	err = ibv_query_gid(context, attr->port_num, attr->grh.sgid_index,
			    &sgid);
	if (err)
		return err;

	if (!memcmp(g, v4_mcast, 12) ||
	    (!memcmp(g, v4_mapped, 12) && (g[12] & 0xf0) == 0xe0)) {
		eth_mac[0] = 0x01;
		eth_mac[1] = 0x00;
		eth_mac[2] = 0x5e;
		eth_mac[3] = g[13] & 0x7f;
		eth_mac[4] = g[14];
		eth_mac[5] = g[15];
	} else if (g[0] == 0xff) {
		eth_mac[0] = 0x33;
		eth_mac[1] = 0x33;
		memcpy(&eth_mac[2], &g[12], 4);
	} else if (!memcmp(g, v4_mapped, 12)) {
		eth_mac[0] = 0x02;
		eth_mac[1] = 0x00;
		memcpy(&eth_mac[2], &g[12], 4);
	} else {
		eth_mac[0] = 0x02;
		memcpy(&eth_mac[1], &g[11], 5);
	}

	if (vid)
		*vid = 0xffff;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Compat entry points                                                  */
/* ------------------------------------------------------------------ */

/*
 * name@IBVERBS_1.0 (non-default): what a binary linked against libibverbs
 * 1.0 (2006) binds.  Those programs pass structs with the 1.0 layouts
 * (struct ibv_context_1_0, ibv_pd_1_0, ... in rdma-core's compat-1_0.c),
 * which differ from today's, so aliasing them to the current functions
 * would corrupt memory; rdma-core wraps each object instead.  No Debian 12
 * program imports any of them (ABI.md §1), so here each one exists only to
 * keep such a binary loadable, and fails with ENOSYS the way its prototype
 * reports failure: NULL, -1 or a positive errno, as the 1.1 function does.
 *
 * The implementation names are hidden by the version script's "local: *";
 * they need default visibility only so that the .symver alias is exported.
 */
#define SR_COMPAT(impl, name, node) \
	__asm__(".symver " #impl "," #name "@" node)

static void *compat_null(void)
{
	errno = ENOSYS;
	return NULL;
}

static int compat_minus1(void)
{
	errno = ENOSYS;
	return -1;
}

static int compat_errno(void)
{
	errno = ENOSYS;
	return ENOSYS;
}

/* Device list and device (NULL, or -1 for close as ibv_close_device(3)) */
SR_EXPORT void **sr_compat10_get_device_list(int *num)
{
	if (num)
		*num = 0;
	return compat_null();
}
SR_COMPAT(sr_compat10_get_device_list, ibv_get_device_list, "IBVERBS_1.0");

/* Takes only what the 1.0 ibv_get_device_list hands out: never anything. */
SR_EXPORT void sr_compat10_free_device_list(void **list)
{
}
SR_COMPAT(sr_compat10_free_device_list, ibv_free_device_list, "IBVERBS_1.0");

SR_EXPORT const char *sr_compat10_get_device_name(void *device)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_get_device_name, ibv_get_device_name, "IBVERBS_1.0");

SR_EXPORT __be64 sr_compat10_get_device_guid(void *device)
{
	errno = ENOSYS;
	return 0;
}
SR_COMPAT(sr_compat10_get_device_guid, ibv_get_device_guid, "IBVERBS_1.0");

SR_EXPORT void *sr_compat10_open_device(void *device)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_open_device, ibv_open_device, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_close_device(void *context)
{
	return compat_minus1();
}
SR_COMPAT(sr_compat10_close_device, ibv_close_device, "IBVERBS_1.0");

/* Async events (ibv_get_async_event(3): -1 on error) */
SR_EXPORT int sr_compat10_get_async_event(void *context,
					  struct ibv_async_event *event)
{
	return compat_minus1();
}
SR_COMPAT(sr_compat10_get_async_event, ibv_get_async_event, "IBVERBS_1.0");

SR_EXPORT void sr_compat10_ack_async_event(struct ibv_async_event *event)
{
}
SR_COMPAT(sr_compat10_ack_async_event, ibv_ack_async_event, "IBVERBS_1.0");

/* Queries (query_device/port: errno; query_gid/pkey: -1) */
SR_EXPORT int sr_compat10_query_device(void *context,
				       struct ibv_device_attr *device_attr)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_query_device, ibv_query_device, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_query_port(void *context, uint8_t port_num,
				     struct ibv_port_attr *port_attr)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_query_port, ibv_query_port, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_query_gid(void *context, uint8_t port_num,
				    int index, union ibv_gid *gid)
{
	return compat_minus1();
}
SR_COMPAT(sr_compat10_query_gid, ibv_query_gid, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_query_pkey(void *context, uint8_t port_num,
				     int index, __be16 *pkey)
{
	return compat_minus1();
}
SR_COMPAT(sr_compat10_query_pkey, ibv_query_pkey, "IBVERBS_1.0");

/* PD and MR */
SR_EXPORT void *sr_compat10_alloc_pd(void *context)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_alloc_pd, ibv_alloc_pd, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_dealloc_pd(void *pd)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_dealloc_pd, ibv_dealloc_pd, "IBVERBS_1.0");

SR_EXPORT void *sr_compat10_reg_mr(void *pd, void *addr, size_t length,
				   int access)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_reg_mr, ibv_reg_mr, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_dereg_mr(void *mr)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_dereg_mr, ibv_dereg_mr, "IBVERBS_1.0");

/* CQ and completion events (ibv_get_cq_event(3): -1 on error) */
SR_EXPORT void *sr_compat10_create_cq(void *context, int cqe, void *cq_context,
				      struct ibv_comp_channel *channel,
				      int comp_vector)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_create_cq, ibv_create_cq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_resize_cq(void *cq, int cqe)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_resize_cq, ibv_resize_cq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_destroy_cq(void *cq)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_destroy_cq, ibv_destroy_cq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_get_cq_event(struct ibv_comp_channel *channel,
				       void **cq, void **cq_context)
{
	return compat_minus1();
}
SR_COMPAT(sr_compat10_get_cq_event, ibv_get_cq_event, "IBVERBS_1.0");

SR_EXPORT void sr_compat10_ack_cq_events(void *cq, unsigned int nevents)
{
}
SR_COMPAT(sr_compat10_ack_cq_events, ibv_ack_cq_events, "IBVERBS_1.0");

/* SRQ */
SR_EXPORT void *sr_compat10_create_srq(void *pd,
				       struct ibv_srq_init_attr *srq_init_attr)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_create_srq, ibv_create_srq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_modify_srq(void *srq, struct ibv_srq_attr *srq_attr,
				     int srq_attr_mask)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_modify_srq, ibv_modify_srq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_query_srq(void *srq, struct ibv_srq_attr *srq_attr)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_query_srq, ibv_query_srq, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_destroy_srq(void *srq)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_destroy_srq, ibv_destroy_srq, "IBVERBS_1.0");

/* QP */
SR_EXPORT void *sr_compat10_create_qp(void *pd, void *qp_init_attr)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_create_qp, ibv_create_qp, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_query_qp(void *qp, struct ibv_qp_attr *attr,
				   int attr_mask, void *init_attr)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_query_qp, ibv_query_qp, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_modify_qp(void *qp, struct ibv_qp_attr *attr,
				    int attr_mask)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_modify_qp, ibv_modify_qp, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_destroy_qp(void *qp)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_destroy_qp, ibv_destroy_qp, "IBVERBS_1.0");

/* AH and multicast */
SR_EXPORT void *sr_compat10_create_ah(void *pd, struct ibv_ah_attr *attr)
{
	return compat_null();
}
SR_COMPAT(sr_compat10_create_ah, ibv_create_ah, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_destroy_ah(void *ah)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_destroy_ah, ibv_destroy_ah, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_attach_mcast(void *qp, union ibv_gid *gid,
				       uint16_t lid)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_attach_mcast, ibv_attach_mcast, "IBVERBS_1.0");

SR_EXPORT int sr_compat10_detach_mcast(void *qp, union ibv_gid *gid,
				       uint16_t lid)
{
	return compat_errno();
}
SR_COMPAT(sr_compat10_detach_mcast, ibv_detach_mcast, "IBVERBS_1.0");

/*
 * ibv_register_driver@IBVERBS_1.1 has no default version: providers have
 * registered through the private verbs_register_driver_34 since rdma-core
 * 13.  Old libfabric usnic providers still call it, so it stays as a
 * no-op, exactly as in rdma-core.
 */
SR_EXPORT void sr_compat11_register_driver(const char *name, void *init_func)
{
}
SR_COMPAT(sr_compat11_register_driver, ibv_register_driver, "IBVERBS_1.1");
