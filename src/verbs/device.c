/* libibverbs ABI: the device list, contexts, device and port queries, the
 * async event queue and fork support. Thin: arguments are checked here and
 * the core does the work; errors follow each man page. */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_query_port

SR_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(2, sizeof(*l));

	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &dev_get()->ibdev;
	if (num)
		*num = 1;
	return l;
}

SR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SR_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

SR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return 0;
}

SR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(dev_get()->guid);
}

SR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sr_context *ctx;
	int ret;

	if (device != &dev_get()->ibdev) {
		errno = ENODEV;
		return NULL;
	}
	ret = ctx_open(dev_get(), &ctx);
	if (ret) {
		errno = -ret;
		return NULL;
	}
	verbs_init_ops(ctx);
	return &ctx->vctx.context;
}

SR_EXPORT int ibv_close_device(struct ibv_context *context)
{
	ctx_close(to_ctx(context));
	return 0;
}

/* ibv_import_device(3): a second context on the objects of the one whose
 * cmd_fd was dup'ed; it owns cmd_fd and ibv_close_device closes it. From
 * another process, a context on a proxy of that process's objects
 * (core/xspace.c). */
SR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct sr_context *ctx;
	int ret;

	ret = ctx_import(dev_get(), cmd_fd, &ctx);
	if (ret) {
		errno = -ret;
		return NULL;
	}
	verbs_init_ops(ctx);
	return &ctx->vctx.context;
}

SR_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	dev_fill_attr(attr);
	return 0;
}

#define SR_DEVICE_ATOMIC_WRITE (1ULL << 40)

int sr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;

	if (in && in->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	dev_fill_attr(&a.orig_attr);
	a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
		IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE;
	/* UD sends and receives copy through the same unpinned path. */
	a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
	/* XRC moves data exactly as RC does; its receives are SRQ receives. */
	a.xrc_odp_caps = a.odp_caps.per_transport_caps.rc_odp_caps;
	a.completion_timestamp_mask = UINT64_MAX;
	a.hca_core_clock = 1000000;		/* kHz: timestamps are ns */
	/* IBTA 1.5 atomic write (ibv_wr_atomic_write, IBV_WR_ATOMIC_WRITE):
	 * the kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE, which rdma-core 44's
	 * headers predate (later ones name it). */
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags | SR_DEVICE_ATOMIC_WRITE;
	a.max_dm_size = dm_max_size();	/* core/dm.c, SOFTRNIC_DM_SIZE */
	a.phys_port_cnt_ex = 1;
	verbs_raw_caps(&a);
	memcpy(attr, &a, sr_min(attr_size, sizeof(a)));
	return 0;
}

SR_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			     struct _compat_ibv_port_attr *attr)
{
	struct ibv_port_attr a;

	/* The exported symbol carries the old 48-byte layout (ABI.md §3);
	 * the header's inline goes through vctx->query_port. */
	if (port_num != 1) {
		errno = EINVAL;
		return EINVAL;
	}
	dev_fill_port_attr(&a);
	memcpy(attr, &a, SR_COMPAT_PORT_ATTR_LEN);
	return 0;
}

int sr_query_port(struct ibv_context *context, uint8_t port_num,
		  struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;

	if (port_num != 1)
		return EINVAL;
	dev_fill_port_attr(&a);
	memcpy(attr, &a, sr_min(len, sizeof(a)));
	return 0;
}

static int gid_entry(int index, struct sr_gid *out)
{
	struct sr_gid tbl[SR_GID_TBL_LEN];
	int n = dev_query_gids(tbl, SR_GID_TBL_LEN);

	if (index < 0 || index >= SR_GID_TBL_LEN)
		return -EINVAL;
	if (index >= n)
		return -ENODATA;
	*out = tbl[index];
	return 0;
}

SR_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			    union ibv_gid *gid)
{
	struct sr_gid g;
	int ret;

	if (port_num != 1)
		return -1;
	ret = gid_entry(index, &g);
	if (ret == -EINVAL)
		return -1;
	/* An empty table entry reads as zero, as sysfs shows it. */
	if (ret)
		memset(gid, 0, sizeof(*gid));
	else
		*gid = g.gid;
	return 0;
}

SR_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				 unsigned int index, enum ibv_gid_type_sysfs *type)
{
	struct sr_gid g;

	if (port_num != 1 || gid_entry((int)index, &g)) {
		errno = EINVAL;
		return -1;
	}
	*type = IBV_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

static void fill_gid_entry(struct ibv_gid_entry *e, int index, const struct sr_gid *g)
{
	memset(e, 0, sizeof(*e));
	e->gid = g->gid;
	e->gid_index = (uint32_t)index;
	e->port_num = 1;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = g->ifindex;
}

SR_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
				uint32_t gid_index, struct ibv_gid_entry *entry,
				uint32_t flags, size_t entry_size)
{
	struct sr_gid g;
	int ret;

	if (flags || port_num != 1 || entry_size < sizeof(*entry))
		return EINVAL;
	ret = gid_entry((int)gid_index, &g);
	if (ret)
		return -ret;
	fill_gid_entry(entry, (int)gid_index, &g);
	return 0;
}

SR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
				       struct ibv_gid_entry *entries, size_t max_entries,
				       uint32_t flags, size_t entry_size)
{
	struct sr_gid tbl[SR_GID_TBL_LEN];
	int n;

	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	n = dev_query_gids(tbl, SR_GID_TBL_LEN);
	if ((size_t)n > max_entries)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		fill_gid_entry((struct ibv_gid_entry *)((char *)entries + (size_t)i * entry_size),
			       i, &tbl[i]);
	return n;
}

SR_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
			     __be16 *pkey)
{
	if (port_num != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

SR_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (port_num != 1)
		return -EINVAL;
	/* Only the default partition; full and limited membership match. */
	if ((be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	return -ENOENT;
}

/* ---- async events --------------------------------------------------------- */

/* The event taken off the queue, as the program sees it, counted for
 * the destroy of its object, under the queue's lock (evq_pop_cb): a
 * destroy that took the object's events off the queue first then sees
 * this one counted, and waits for its acknowledgement. */
static void async_event_got(const struct sr_ev *ev, void *arg)
{
	struct ibv_async_event *event = arg;

	memset(event, 0, sizeof(*event));
	event->event_type = (enum ibv_event_type)ev->type;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = ev->obj;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = ev->obj;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		event->element.port_num = ev->port;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		event->element.qp = ev->obj;
		break;
	}
	verbs_async_event_got(event);
}

SR_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct sr_context *ctx = to_ctx(context);
	struct sr_ev ev;
	int ret = evq_pop_cb(&ctx->async, &ev, async_event_got, event);

	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

SR_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	verbs_async_event_ack(event);
}

/* ---- fork ------------------------------------------------------------------ */

/* Nothing is pinned and no DMA mapping exists, so a forked child cannot
 * corrupt the parent's registrations: fork support is always on. */
SR_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}
