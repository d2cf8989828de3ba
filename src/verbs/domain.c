/* libibverbs ABI: thread domains, parent domains and device memory.
 *
 * The verbs.h inlines ibv_alloc_td, ibv_dealloc_td, ibv_alloc_parent_domain,
 * ibv_alloc_dm, ibv_free_dm and ibv_reg_dm_mr call these through the
 * verbs_context ops (ABI.md §3); ibv_memcpy_to/from_dm call the pointers
 * in struct ibv_dm (core/dm.c). ibv_import_dm and ibv_unimport_dm are
 * exported functions (IBVERBS_1.13).
 */
#include "verbs/verbs.h"

#include <errno.h>

static struct ibv_td *op_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	struct sr_td *td;
	int ret = td_alloc(to_ctx(context), attr, &td);

	if (ret)
		SR_FAIL_NULL(ret);
	return &td->ibtd;
}

static int op_dealloc_td(struct ibv_td *td)
{
	return sr_err(td_dealloc(to_td(td)));
}

static struct ibv_pd *op_alloc_parent_domain(struct ibv_context *context,
					     struct ibv_parent_domain_init_attr *attr)
{
	struct sr_pd *pd;
	int ret = pd_alloc_parent(to_ctx(context), attr, &pd);

	if (ret)
		SR_FAIL_NULL(ret);
	return &pd->ibpd;
}

static struct ibv_dm *op_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	struct sr_dm *dm;
	int ret = dm_alloc(to_ctx(context), attr, &dm);

	if (ret)
		SR_FAIL_NULL(ret);
	return &dm->ibdm;
}

static int op_free_dm(struct ibv_dm *dm)
{
	return sr_err(dm_free(to_dm(dm)));
}

static struct ibv_mr *op_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t offset,
				   size_t length, unsigned int access)
{
	struct sr_mr *mr;
	int ret;

	if (!dm) {
		errno = EINVAL;
		return NULL;
	}
	/* As ibv_reg_mr: the optional-range bits are hints. */
	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	ret = mr_reg_dm(to_pd(pd), to_dm(dm), offset, length, (int)access, &mr);
	if (ret)
		SR_FAIL_NULL(ret);
	return &mr->ibmr;
}

void verbs_init_domain_ops(struct verbs_context *v)
{
	v->alloc_td = op_alloc_td;
	v->dealloc_td = op_dealloc_td;
	v->alloc_parent_domain = op_alloc_parent_domain;
	v->alloc_dm = op_alloc_dm;
	v->free_dm = op_free_dm;
	v->reg_dm_mr = op_reg_dm_mr;
}

/* ibv_import_dm(3): a DM of another context of this process, by handle
 * (its context comes from ibv_import_device). */
SR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	struct sr_dm *dm;
	int ret;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	ret = dm_import(to_ctx(context), dm_handle, &dm);
	if (ret)
		SR_FAIL_NULL(ret);
	return &dm->ibdm;
}

SR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	dm_unimport(dm ? to_dm(dm) : NULL);
}
