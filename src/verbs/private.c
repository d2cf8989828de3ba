/*
 * IBVERBS_PRIVATE_34: the provider-internal interface of rdma-core 44.
 *
 * rdma-core's provider libraries (libmlx5.so.1, libefa.so.1, ...) import
 * these names, and programs such as perftest and libfabric are linked
 * against those providers with BIND_NOW.  So every name must exist or the
 * program does not start (ABI.md §2), even though softrnic never loads a
 * provider and never hands one a device: its only device is built by the
 * core, not matched from sysfs.
 *
 * What they do here:
 *  - ibv_cmd_* and execute_ioctl marshal a verb into a uverbs write() or
 *    ioctl() on /dev/infiniband/uverbsN.  softrnic has no kernel side, so
 *    they fail with EOPNOTSUPP, in the convention of each rdma-core function
 *    (a positive errno for most; -1 with errno for ibv_cmd_poll_cq).
 *  - The context and driver helpers fail (NULL + errno EOPNOTSUPP) or do
 *    nothing, since no provider context is ever created through them.
 *  - verbs_init_cq works for real: it only touches the public struct ibv_cq.
 *  - __verbs_log prints only when SOFTRNIC_DEBUG is set.
 *
 * The prototypes follow rdma-core 44's libibverbs/driver.h and cmd_ioctl.h.
 * Structs that are private to rdma-core (verbs_mr, verbs_qp, command and
 * response buffers, ...) are passed as void *: on x86-64 only the symbol,
 * the argument registers and the return value matter, and none of these
 * stubs looks inside them.  ibv_query_gid_type, the one name of this node
 * that softrnic honours, lives with the device code.
 */
#include "core/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* The stubs exist for their symbol; their arguments are ignored on purpose. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/*
 * Data, not a function: providers read it (a 1-byte bool in rdma-core 44) to
 * decide whether destroying objects of a disassociated device may succeed.
 * softrnic devices are never disassociated, so nothing here reads it.
 */
SR_EXPORT bool verbs_allow_disassociate_destroy;

/*
 * Only the first member of rdma-core's struct verbs_device_ops is read (for
 * a debug line); the rest of the provider's struct is none of our business.
 */
struct verbs_device_ops {
	const char *name;
};

/*
 * Every provider calls this from a constructor when it is loaded (the
 * PROVIDER_DRIVER macro of driver.h).  softrnic does not use providers: its
 * device is its own, so registration is accepted and ignored.
 */
SR_EXPORT void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
	sr_dbg("ignoring rdma-core provider '%s'",
	       ops && ops->name ? ops->name : "?");
}

/*
 * rdma-core's logging entry for providers (the verbs_log() macro).  libefa
 * calls it with a context it does not own when it meets a foreign device
 * (ABI.md §2), so @ctx is never dereferenced.  Quiet unless SOFTRNIC_DEBUG
 * is set, whatever VERBS_LOG_LEVEL says: softrnic has one logging knob.
 */
SR_EXPORT __attribute__((format(printf, 3, 4)))
void __verbs_log(struct verbs_context *ctx, uint32_t level,
		 const char *fmt, ...)
{
	/* VERBS_LOG_ERR=1 .. VERBS_LOG_DEBUG=4 -> SR_LOG_ERR .. SR_LOG_DBG */
	int sr_level = level <= 1 ? SR_LOG_ERR : level >= 4 ? SR_LOG_DBG :
		       (int)level - 1;
	const char *dbg = getenv("SOFTRNIC_DEBUG");
	int saved_errno = errno;
	char buf[512];
	va_list ap;
	size_t n;

	/* SOFTRNIC_DEBUG=0 keeps only the core's own error lines */
	if (!dbg || !*dbg || !strcmp(dbg, "0") || !fmt ||
	    sr_level > sr_log_level)
		return;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);

	/* provider messages end in '\n'; sr_log adds its own */
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	sr_log(sr_level, "provider: %s", buf);
	errno = saved_errno;	/* verbs_log() promises errno is preserved */
}

/*
 * Context and device helpers.  A provider's alloc_context() calls
 * verbs_init_and_alloc_context(); only libibverbs calls a provider's
 * alloc_context(), and softrnic never does, so these fail.
 */
SR_EXPORT void *_verbs_init_and_alloc_context(struct ibv_device *device,
					      int cmd_fd, size_t alloc_size,
					      struct verbs_context *ctx_offset,
					      uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT struct ibv_context *verbs_open_device(struct ibv_device *device,
						void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/*
 * Copies a provider's op table into a context it allocated with
 * _verbs_init_and_alloc_context().  That never succeeds here, so any context
 * reaching this is softrnic's own, whose ops the core owns: copy nothing.
 */
SR_EXPORT void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
}

/* Undoes _verbs_init_and_alloc_context(), which never succeeded: nothing. */
SR_EXPORT void verbs_uninit_context(struct verbs_context *context)
{
}

/*
 * Fills in the generic part of a CQ a provider created, as ibv_create_cq()
 * does for the CQ it returns (ibv_create_cq(3): cq_context and channel are
 * the caller's).  It returns void in rdma-core 44.  It is implemented for
 * real because it only uses public verbs.h fields, so the core may call it
 * too: the channel's reference is taken under the context mutex, as
 * ibv_destroy_comp_channel() expects when it checks refcnt.
 */
SR_EXPORT void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
			     struct ibv_comp_channel *channel, void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

/*
 * Reads an attribute of a provider's sysfs device (struct verbs_sysfs_dev),
 * which only libibverbs' sysfs scan creates.  softrnic's device has no sysfs
 * node and no verbs_sysfs_dev, so the attribute is simply not there.
 */
SR_EXPORT __attribute__((format(printf, 4, 5)))
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
			      const char *fnfmt, ...)
{
	errno = sysfs_dev ? ENOENT : EINVAL;
	return -1;
}

/*
 * ioctl() command buffers (cmd_ioctl.h).  execute_ioctl() returns a positive
 * errno like the other commands.  __ioctl_final_num_attrs() sizes a stack
 * buffer for a command plus the attributes of buffers linked to it; since
 * no command is ever executed, linked buffers contribute nothing and the
 * caller's own count is the honest, small answer.
 */
SR_EXPORT int execute_ioctl(struct ibv_context *context, void *cmd)
{
	return EOPNOTSUPP;
}

SR_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
					       void *link)
{
	return num_attrs;
}

/*
 * The uverbs write()/ioctl() commands.  Grouped by object as in driver.h.
 * Each returns EOPNOTSUPP: there is no /dev/infiniband/uverbsN behind
 * softrnic to send them to.
 */
#define SR_NO_KERNEL EOPNOTSUPP

/* Device and context */
SR_EXPORT int ibv_cmd_get_context(struct verbs_context *context, void *cmd,
				  size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_query_context(struct ibv_context *ctx, void *driver)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int
ibv_cmd_query_device_any(struct ibv_context *context,
			 const struct ibv_query_device_ex_input *input,
			 struct ibv_device_attr_ex *attr, size_t attr_size,
			 void *resp, size_t *resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
				 struct ibv_port_attr *port_attr, void *cmd,
				 size_t cmd_size)
{
	return SR_NO_KERNEL;
}

/* PD, XRCD */
SR_EXPORT int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd,
			       void *cmd, size_t cmd_size, void *resp,
			       size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_open_xrcd(struct ibv_context *context, void *xrcd,
				int vxrcd_size, struct ibv_xrcd_init_attr *attr,
				void *cmd, size_t cmd_size, void *resp,
				size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_close_xrcd(void *xrcd)
{
	return SR_NO_KERNEL;
}

/* MR, MW, DM */
SR_EXPORT int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			     uint64_t hca_va, int access, void *vmr, void *cmd,
			     size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_rereg_mr(void *vmr, uint32_t flags, void *addr,
			       size_t length, uint64_t hca_va, int access,
			       struct ibv_pd *pd, void *cmd, size_t cmd_sz,
			       void *resp, size_t resp_sz)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_dereg_mr(void *vmr)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_query_mr(struct ibv_pd *pd, void *vmr, uint32_t mr_handle)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_advise_mr(struct ibv_pd *pd,
				enum ibv_advise_mr_advice advice,
				uint32_t flags, struct ibv_sge *sg_list,
				uint32_t num_sge)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				    size_t length, uint64_t iova, int fd,
				    int access, void *vmr)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type,
			       struct ibv_mw *mw, void *cmd, size_t cmd_size,
			       void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_alloc_dm(struct ibv_context *ctx,
			       const struct ibv_alloc_dm_attr *dm_attr,
			       void *dm, void *link)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_free_dm(void *dm)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, void *dm, uint64_t offset,
				size_t length, unsigned int access, void *vmr,
				void *link)
{
	return SR_NO_KERNEL;
}

/* CQ */
SR_EXPORT int ibv_cmd_create_cq(struct ibv_context *context, int cqe,
				struct ibv_comp_channel *channel,
				int comp_vector, struct ibv_cq *cq, void *cmd,
				size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_create_cq_ex(struct ibv_context *context,
				   const struct ibv_cq_init_attr_ex *cq_attr,
				   void *cq, void *cmd, size_t cmd_size,
				   void *resp, size_t resp_size,
				   uint32_t cmd_flags)
{
	return SR_NO_KERNEL;
}

/* ibv_poll_cq(3) convention, as rdma-core's: a negative count is failure. */
SR_EXPORT int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	errno = EOPNOTSUPP;
	return -1;
}

SR_EXPORT int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, void *cmd,
				size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_modify_cq(struct ibv_cq *cq,
				struct ibv_modify_cq_attr *attr, void *cmd,
				size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	return SR_NO_KERNEL;
}

/* SRQ */
SR_EXPORT int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq,
				 struct ibv_srq_init_attr *attr, void *cmd,
				 size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_create_srq_ex(struct ibv_context *context, void *srq,
				    struct ibv_srq_init_attr_ex *attr_ex,
				    void *cmd, size_t cmd_size, void *resp,
				    size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_modify_srq(struct ibv_srq *srq,
				 struct ibv_srq_attr *srq_attr,
				 int srq_attr_mask, void *cmd, size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_query_srq(struct ibv_srq *srq,
				struct ibv_srq_attr *srq_attr, void *cmd,
				size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	return SR_NO_KERNEL;
}

/* QP */
SR_EXPORT int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp,
				struct ibv_qp_init_attr *attr, void *cmd,
				size_t cmd_size, void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_create_qp_ex(struct ibv_context *context, void *qp,
				   struct ibv_qp_init_attr_ex *attr_ex,
				   void *cmd, size_t cmd_size, void *resp,
				   size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_create_qp_ex2(struct ibv_context *context, void *qp,
				    struct ibv_qp_init_attr_ex *qp_attr,
				    void *cmd, size_t cmd_size, void *resp,
				    size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_open_qp(struct ibv_context *context, void *qp,
			      int vqp_sz, struct ibv_qp_open_attr *attr,
			      void *cmd, size_t cmd_size, void *resp,
			      size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr,
			       int attr_mask,
			       struct ibv_qp_init_attr *qp_init_attr,
			       void *cmd, size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
				int attr_mask, void *cmd, size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr,
				   int attr_mask, void *cmd, size_t cmd_size,
				   void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	return SR_NO_KERNEL;
}

/*
 * Posting: ibv_post_send(3) says bad_wr points at the first work request
 * that was not posted.  None was, so that is the first one.
 */
SR_EXPORT int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
				struct ibv_send_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
				struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
				    struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return SR_NO_KERNEL;
}

/* AH, multicast */
SR_EXPORT int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah,
				struct ibv_ah_attr *attr, void *resp,
				size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				   uint16_t lid)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				   uint16_t lid)
{
	return SR_NO_KERNEL;
}

/* Flow steering, flow actions */
SR_EXPORT int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id,
				  struct ibv_flow_attr *flow_attr, void *ucmd,
				  size_t ucmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_flow(struct ibv_flow *flow_id)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int
ibv_cmd_create_flow_action_esp(struct ibv_context *ctx,
			       struct ibv_flow_action_esp_attr *attr,
			       void *flow_action, void *driver)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int
ibv_cmd_modify_flow_action_esp(void *flow_action,
			       struct ibv_flow_action_esp_attr *attr,
			       void *driver)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_flow_action(void *action)
{
	return SR_NO_KERNEL;
}

/* WQ, RSS indirection tables */
SR_EXPORT int ibv_cmd_create_wq(struct ibv_context *context,
				struct ibv_wq_init_attr *wq_init_attr,
				struct ibv_wq *wq, void *cmd, size_t cmd_size,
				void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr,
				void *cmd, size_t cmd_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_wq(struct ibv_wq *wq)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int
ibv_cmd_create_rwq_ind_table(struct ibv_context *context,
			     struct ibv_rwq_ind_table_init_attr *init_attr,
			     struct ibv_rwq_ind_table *rwq_ind_table,
			     void *resp, size_t resp_size)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *table)
{
	return SR_NO_KERNEL;
}

/* Counters */
SR_EXPORT int ibv_cmd_create_counters(struct ibv_context *context,
				      struct ibv_counters_init_attr *init_attr,
				      void *vcounters, void *link)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_destroy_counters(void *vcounters)
{
	return SR_NO_KERNEL;
}

SR_EXPORT int ibv_cmd_read_counters(void *vcounters, uint64_t *counters_value,
				    uint32_t ncounters, uint32_t flags,
				    void *link)
{
	return SR_NO_KERNEL;
}
