/* Internal header of the libibverbs ABI surface. */
#ifndef SOFTRNIC_VERBS_H
#define SOFTRNIC_VERBS_H

#include "core/qp.h"

/* rdma-core's provider-private GID type (driver.h), which ibv_devinfo
 * imports through ibv_query_gid_type@IBVERBS_PRIVATE_34. */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

/* ibv_query_port@IBVERBS_1.1 fills the pre-2017 layout: ibv_port_attr up
 * to phys_state, without link_layer and what follows (ABI.md §3). */
#define SR_COMPAT_PORT_ATTR_LEN 48

void verbs_init_ops(struct sr_context *ctx);
void verbs_init_domain_ops(struct verbs_context *v);
/* XRC (verbs/xrc.c) */
void verbs_init_xrc_ops(struct sr_context *ctx);
struct ibv_srq *sr_create_srq_xrc(struct ibv_context *context, struct ibv_srq_init_attr_ex *a);
int sr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t attr_size);
int sr_query_port(struct ibv_context *context, uint8_t port_num,
		  struct ibv_port_attr *attr, size_t len);
/* Flow steering, WQs, RSS (verbs/raw.c). */
void verbs_init_raw_ops(struct verbs_context *v);
void verbs_raw_caps(struct ibv_device_attr_ex *a);
void verbs_async_event_got(struct ibv_async_event *ev);
void verbs_async_event_ack(struct ibv_async_event *ev);

/* The edge convention for verbs returning an int: positive errno. */
static inline int sr_err(int ret)
{
	return ret < 0 ? -ret : ret;
}

/* For verbs returning a pointer: NULL and errno. */
#define SR_FAIL_NULL(ret) do { errno = -(ret); return NULL; } while (0)

#endif
