/* Device memory (ibv_alloc_dm(3)).
 *
 * On a NIC, DM is on-chip memory the device reaches without a PCIe round
 * trip. Here it is host memory owned by the device: an anonymous mapping
 * per allocation, charged to one process-wide budget (max_dm_size,
 * SOFTRNIC_DM_SIZE) so that exceeding it fails as the man page says. DM
 * registered with ibv_reg_dm_mr is an ordinary zero-based MR over that
 * mapping (mr.c), so the data path needs nothing new.
 *
 * ibv_memcpy_to/from_dm copy through mem_read/mem_write. The mapping is
 * ours and lives until the last MR and import on it are gone, so the DM
 * side never faults; the application's side may (a bad host_addr is
 * EFAULT, not a crash).
 */
#include "core/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DM_DEFAULT_SIZE	(256 * 1024)	/* a ConnectX MEMIC's worth */
#define DM_MAX_SIZE	(1ULL << 30)	/* what SOFTRNIC_DM_SIZE may ask */
#define DM_MAX_LOG_ALIGN 21		/* 2 MiB: a huge page */
/* Copies are 4-byte granular, as on mlx5 MEMIC, which the suite's
 * DMTest and DeviceMemoryAPITest check: offset and length must be
 * multiples of 4. */
#define DM_ALIGN	4

static pthread_mutex_t dm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_list dm_list = { &dm_list, &dm_list };	/* allocated DMs */
static uint64_t dm_used;				/* bytes charged */
static uint64_t dm_limit;
static pthread_once_t dm_once = PTHREAD_ONCE_INIT;

/* SOFTRNIC_DM_SIZE: bytes, with an optional K, M or G suffix; 0 turns
 * device memory off (max_dm_size 0, ibv_alloc_dm ENOMEM). */
static void dm_init_limit(void)
{
	uint64_t n;

	dm_limit = DM_DEFAULT_SIZE;
	switch (sr_env_size("SOFTRNIC_DM_SIZE", DM_MAX_SIZE, &n)) {
	case 1:
		dm_limit = n & ~(uint64_t)(DM_ALIGN - 1);
		break;
	case -1:
		sr_warn("SOFTRNIC_DM_SIZE=%s ignored (bytes up to 1G, K/M/G suffix)",
			getenv("SOFTRNIC_DM_SIZE"));
		break;
	}
}

uint64_t dm_max_size(void)
{
	pthread_once(&dm_once, dm_init_limit);
	return dm_limit;
}

static int dm_copy_check(struct sr_dm *dm, uint64_t off, size_t len)
{
	if ((off | len) & (DM_ALIGN - 1))
		return EINVAL;
	if (off > dm->length || len > dm->length - off)
		return EFAULT;
	return 0;
}

/* ibv_memcpy_to_dm(3): 0 or the failure reason (positive). */
static int dm_copy_to(struct ibv_dm *ibdm, uint64_t off, const void *host, size_t len)
{
	struct sr_dm *dm = to_dm(ibdm);
	int ret = dm_copy_check(dm, off, len);

	if (ret || !len)
		return ret;
	/* The DM is ours; the application's buffer is what may fault. */
	return mem_read(dm->buf + off, (uintptr_t)host, len) ? EFAULT : 0;
}

static int dm_copy_from(void *host, struct ibv_dm *ibdm, uint64_t off, size_t len)
{
	struct sr_dm *dm = to_dm(ibdm);
	int ret = dm_copy_check(dm, off, len);

	if (ret || !len)
		return ret;
	return mem_write((uintptr_t)host, dm->buf + off, len) ? EFAULT : 0;
}

static void dm_init_obj(struct sr_dm *dm, struct sr_context *ctx)
{
	dm->ibdm.context = &ctx->vctx.context;
	dm->ibdm.memcpy_to_dm = dm_copy_to;
	dm->ibdm.memcpy_from_dm = dm_copy_from;
	dm->ibdm.comp_mask = IBV_DM_MASK_HANDLE;
}

/* Charge the budget and give the DM a handle no other live DM has. */
static int dm_publish(struct sr_dm *dm)
{
	struct sr_list *pos, *tmp;
	uint32_t h;
	int ret = 0;

	pthread_mutex_lock(&dm_lock);
	if (dm->mapped > dm_limit - sr_min(dm_limit, dm_used)) {
		ret = -ENOMEM;
		goto out;
	}
again:
	h = sr_random32();
	sr_list_for_each_safe(pos, tmp, &dm_list)
		if (container_of(pos, struct sr_dm, link)->ibdm.handle == h)
			goto again;
	dm->ibdm.handle = h;
	dm_used += dm->mapped;
	sr_list_add_tail(&dm_list, &dm->link);
out:
	pthread_mutex_unlock(&dm_lock);
	return ret;
}

int dm_alloc(struct sr_context *ctx, const struct ibv_alloc_dm_attr *attr, struct sr_dm **out)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t limit = dm_max_size();
	struct sr_dm *dm;
	size_t mapped;
	int ret;

	/* ibv_alloc_dm_attr has no optional fields in rdma-core 44. */
	if (!attr || attr->comp_mask || attr->log_align_req > DM_MAX_LOG_ALIGN)
		return -EINVAL;
	/* Over the device's size, or over what is left of it: the man
	 * page's "no more free device memory left". */
	if (!attr->length || attr->length > limit)
		return attr->length ? -ENOMEM : -EINVAL;
	/* The charge is what the allocation takes: whole 4-byte words,
	 * rounded up to the alignment asked for. */
	mapped = (attr->length + DM_ALIGN - 1) & ~(size_t)(DM_ALIGN - 1);
	if (attr->log_align_req > 2) {
		size_t a = (size_t)1 << attr->log_align_req;

		mapped = (mapped + a - 1) & ~(a - 1);
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm)
		return -ENOMEM;
	dm->length = attr->length;
	dm->mapped = mapped;
	/* An anonymous mapping is page aligned, which covers every
	 * log_align_req up to the page size; a larger one maps more and
	 * trims (the charge stays what was asked). */
	if (((size_t)1 << attr->log_align_req) > page) {
		size_t a = (size_t)1 << attr->log_align_req;
		size_t total = ((mapped + page - 1) & ~(page - 1)) + a;
		uint8_t *p = mmap(NULL, total, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uintptr_t base;

		if (p == MAP_FAILED)
			goto err_map;
		base = ((uintptr_t)p + a - 1) & ~(uintptr_t)(a - 1);
		if (base > (uintptr_t)p)
			munmap(p, base - (uintptr_t)p);
		total -= base - (uintptr_t)p;
		dm->buf = (uint8_t *)base;
		if (total > ((mapped + page - 1) & ~(page - 1))) {
			size_t keep = (mapped + page - 1) & ~(page - 1);

			munmap(dm->buf + keep, total - keep);
		}
	} else {
		dm->buf = mmap(NULL, mapped, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (dm->buf == MAP_FAILED)
			goto err_map;
	}
	/* No MADV_DONTFORK: nothing is pinned or DMA-mapped, so a forked
	 * child's copy-on-write copy is harmless (DESIGN.md, fork). */
	dm_init_obj(dm, ctx);
	ret = dm_publish(dm);
	if (ret) {
		munmap(dm->buf, mapped);
		free(dm);
		return ret;
	}
	sr_dbg("DM %#x: %zu bytes (align 2^%u)", dm->ibdm.handle, dm->length,
	       attr->log_align_req);
	*out = dm;
	return 0;

err_map:
	free(dm);
	return -ENOMEM;
}

int dm_free(struct sr_dm *dm)
{
	/* ibv_alloc_dm(3): fails while an MR (or, here, an import) still
	 * uses it. */
	if (atomic_load(&dm->refs))
		return -EBUSY;
	if (dm->orig)
		return -EINVAL;		/* an import: ibv_unimport_dm */
	pthread_mutex_lock(&dm_lock);
	sr_list_del(&dm->link);
	dm_used -= dm->mapped;
	pthread_mutex_unlock(&dm_lock);
	munmap(dm->buf, dm->mapped);
	sr_dbg("DM %#x freed", dm->ibdm.handle);
	free(dm);
	return 0;
}

/* ibv_import_dm(3): another context of this process names a DM by its
 * handle. The import shares the memory and holds the original, which
 * ibv_free_dm refuses (EBUSY) until it is unimported. */
int dm_import(struct sr_context *ctx, uint32_t handle, struct sr_dm **out)
{
	struct sr_list *pos, *tmp;
	struct sr_dm *orig = NULL, *dm;

	/* A context imported from another process: its DMs are that
	 * process's memory, and a forked child's list holds only copies. */
	if (ctx->space->xpid)
		return -EOPNOTSUPP;
	dm = calloc(1, sizeof(*dm));
	if (!dm)
		return -ENOMEM;
	pthread_mutex_lock(&dm_lock);
	sr_list_for_each_safe(pos, tmp, &dm_list) {
		struct sr_dm *d = container_of(pos, struct sr_dm, link);

		if (d->ibdm.handle == handle) {
			orig = d;
			atomic_fetch_add(&orig->refs, 1);
			break;
		}
	}
	pthread_mutex_unlock(&dm_lock);
	if (!orig) {
		free(dm);
		return -EINVAL;
	}
	dm->orig = orig;
	dm->buf = orig->buf;
	dm->length = orig->length;
	dm->mapped = orig->mapped;
	sr_list_init(&dm->link);
	dm_init_obj(dm, ctx);
	dm->ibdm.handle = handle;
	*out = dm;
	return 0;
}

void dm_unimport(struct sr_dm *dm)
{
	if (!dm || !dm->orig)
		return;
	atomic_fetch_sub(&dm->orig->refs, 1);
	free(dm);
}
