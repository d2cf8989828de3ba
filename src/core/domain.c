/* Protection domains, parent domains and thread domains.
 *
 * A parent domain (ibv_alloc_parent_domain(3)) is an sr_pd of its own that
 * stands for its protection domain (pd->prot) wherever a PD is compared:
 * an MR registered on the parent domain serves a QP made on the plain PD
 * and the other way round, as on hardware, where both carry the same
 * kernel PD. What it adds is a thread domain (a hint here, see core.h) and
 * the application's allocator for the queue buffers of the QPs, SRQs and
 * CQs created on it.
 */
#include "core/core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A parent domain is an object of its own, not in the space's key table:
 * it cannot be imported (ibv_import_pd names PDs only). */
void pd_init(struct sr_pd *pd, struct ibv_context *context)
{
	pd->ibpd.context = context;
	pd->ibpd.handle = sr_random32();
	pd->obj = pd;
	pd->space = to_ctx(context)->space;
	sr_list_init(&pd->grave);
}

int pd_alloc_parent(struct sr_context *ctx, struct ibv_parent_domain_init_attr *attr,
		    struct sr_pd **out)
{
	const uint32_t known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			       IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	struct sr_pd *base, *pd;

	if (!attr || (attr->comp_mask & ~known) || !attr->pd)
		return -EINVAL;
	base = to_pd(attr->pd);
	/* The PD must be a real one of this context; a parent domain of a
	 * parent domain has no meaning (mlx5 refuses it too). */
	if (attr->pd->context != &ctx->vctx.context || pd_is_parent(base))
		return -EINVAL;
	if (attr->td && attr->td->context != &ctx->vctx.context)
		return -EINVAL;
	if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	    (!attr->alloc || !attr->free))
		return -EINVAL;
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd_init(pd, &ctx->vctx.context);
	pd->prot = base;
	pd->td = attr->td ? to_td(attr->td) : NULL;
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		pd->alloc = attr->alloc;
		pd->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		pd->pd_context = attr->pd_context;
	pd_get(base);
	if (pd->td)
		atomic_fetch_add(&pd->td->refs, 1);
	*out = pd;
	return 0;
}


int td_alloc(struct sr_context *ctx, struct ibv_td_init_attr *attr, struct sr_td **out)
{
	struct sr_td *td;

	/* No optional fields exist in rdma-core 44's ibv_td_init_attr. */
	if (!attr || attr->comp_mask)
		return -EINVAL;
	td = calloc(1, sizeof(*td));
	if (!td)
		return -ENOMEM;
	td->ibtd.context = &ctx->vctx.context;
	*out = td;
	return 0;
}

int td_dealloc(struct sr_td *td)
{
	/* ibv_alloc_td(3): resources created with the TD go first. */
	if (atomic_load(&td->refs))
		return -EBUSY;
	free(td);
	return 0;
}

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

void *pd_buf_alloc(struct sr_pd *pd, size_t size, uint64_t type, bool *custom)
{
	void *p;

	*custom = false;
	if (pd && pd->alloc) {
		p = pd->alloc(&pd->ibpd, pd->pd_context, size, page_size(), type);
		if (p != IBV_ALLOCATOR_USE_DEFAULT) {
			/* NULL is the allocator's error (the man page). The
			 * buffer should come zeroed; make sure, the rings
			 * rely on it. */
			if (p) {
				memset(p, 0, size);
				*custom = true;
			}
			return p;
		}
	}
	return calloc(1, size);
}

void pd_buf_free(struct sr_pd *pd, void *p, uint64_t type, bool custom)
{
	if (!p)
		return;
	if (custom)
		pd->free(&pd->ibpd, pd->pd_context, p, type);
	else
		free(p);
}
