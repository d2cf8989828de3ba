/* Memory regions and memory windows.
 *
 * Registration never pins: a region is a (PD, iova, length, vaddr, access)
 * record behind a random key, and every access goes through mr_resolve(),
 * which checks key, PD, bounds and rights before one byte moves (DESIGN.md
 * decision 6). A resolved range keeps its MR or MW busy (users count);
 * deregistration waits until no placement is running.
 */
#include "core/qp.h"
#include "chan/shm_map.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define ACC_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		    IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_KNOWN (IBV_ACCESS_LOCAL_WRITE | ACC_REMOTE | IBV_ACCESS_MW_BIND | \
		   IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | \
		   IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING | \
		   IBV_ACCESS_OPTIONAL_RANGE)

/* ibv_reg_mr(3): remote write or remote atomic need local write. */
static int access_ok(int access)
{
	if (access & ~ACC_KNOWN)
		return -EINVAL;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	return 0;
}

static void mr_set_range(struct sr_mr *mr, void *addr, size_t len, uint64_t iova)
{
	mr->implicit = (addr == NULL && len == SIZE_MAX);
	mr->vaddr = (uintptr_t)addr;
	mr->iova = mr->implicit ? 0 : iova;
	mr->length = len;
	mr->ibmr.addr = addr;
	mr->ibmr.length = len;
}

/* Give a filled-in region its key and count it: from here on, remote
 * peers can reach it. */
static int mr_publish(struct sr_pd *pd, struct sr_mr *mr, struct sr_mr **out)
{
	struct sr_space *space = pd->space;
	uint32_t key;
	int ret;

	if (atomic_load(&space->nmr) >= SR_MAX_MR) {
		free(mr);
		return -ENOMEM;
	}
	mr->obj = mr;
	mr->space = space;
	sr_list_init(&mr->grave);
	mr->pd = pd;
	ret = keytab_insert_random(&space->keys, SR_KEY_MR, mr, &key);
	if (ret) {
		free(mr);
		return ret;
	}
	mr->ibmr.context = pd->ibpd.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	mr->ibmr.handle = key;		/* ibv_import_mr(3) finds it by this */
	xspace_pub(space, key, pd, mr);
	pd_get(pd);
	atomic_fetch_add(&space->nmr, 1);
	*out = mr;
	return 0;
}

int mr_reg(struct sr_pd *pd, void *addr, size_t len, uint64_t iova,
	   int access, struct sr_mr **out)
{
	struct sr_mr *mr;
	int ret;

	if (pd->obj->dead)
		return -EINVAL;		/* deallocated through another holder */
	ret = access_ok(access);
	if (ret)
		return ret;
	if (addr == NULL && len == SIZE_MAX) {
		/* Implicit ODP (ibv_reg_mr(3)): the whole address space. */
		if (!(access & IBV_ACCESS_ON_DEMAND))
			return -EINVAL;
	} else if (len == 0 || (uintptr_t)addr + len < (uintptr_t)addr) {
		return -EINVAL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->access = access;
	mr_set_range(mr, addr, len, iova);
	ret = mr_publish(pd, mr, out);
	/* Large plain regions go onto a memfd a same-host peer maps (never
	 * a reason to fail). Nobody has the key yet. */
	if (!ret && !mr->implicit)
		mr->mapped = shm_map_reg(addr, len);
	return ret;
}

int mr_reg_dm(struct sr_pd *pd, struct sr_dm *dm, uint64_t offset, size_t len,
	      int access, struct sr_mr **out)
{
	struct sr_dm *mem = dm->orig ? dm->orig : dm;
	struct sr_mr *mr;
	int ret;

	/* ibv_reg_dm_mr(3): DM regions are zero based, and lie inside the
	 * DM. A zero length is a valid, empty region (the suite registers
	 * one; mlx5 accepts it). */
	if (pd->obj->dead)
		return -EINVAL;		/* deallocated through another holder */
	ret = access_ok(access);
	if (ret)
		return ret;
	if (!(access & IBV_ACCESS_ZERO_BASED) ||
	    (access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB)))
		return -EINVAL;
	if (offset > mem->length || len > mem->length - offset)
		return -EINVAL;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->access = access;
	mr_set_range(mr, mem->buf + offset, len, 0);
	/* ibv_mr.addr of a zero-based region is its first address: 0. */
	mr->ibmr.addr = NULL;
	mr->dm = mem;
	atomic_fetch_add(&mem->refs, 1);
	ret = mr_publish(pd, mr, out);
	if (ret)
		atomic_fetch_sub(&mem->refs, 1);
	return ret;
}

static void mr_wait_idle(atomic_int *users, int floor)
{
	while (atomic_load(users) > floor)
		sched_yield();
}

/* Keep a holder's memory until the space goes (see struct sr_space). */
static void mr_bury(struct sr_mr *mr)
{
	struct sr_space *s = mr->space;

	pthread_mutex_lock(&s->lock);
	if (!mr->buried) {
		mr->buried = true;
		sr_list_add_tail(&s->grave_mr, &mr->grave);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Moves once a region is out of the key table (deregistered) or has
 * changed (re-registered), before either call returns: see struct
 * sr_lkey_span. (Not before the change: a lookup between a bump and the
 * change would remember the old region under the new generation.) */
static _Atomic uint64_t mr_generation = 1;

uint64_t mr_gen(void)
{
	return atomic_load_explicit(&mr_generation, memory_order_acquire);
}

void mr_gen_bump(void)
{
	atomic_fetch_add_explicit(&mr_generation, 1, memory_order_seq_cst);
}

int mr_dereg(struct sr_mr *holder)
{
	struct sr_mr *mr = holder->obj;
	struct sr_space *s = mr->space;

	/* ibv_import_mr(3): once one holder destroyed the region, the
	 * others may only be unimported. */
	if (mr->dead)
		return -EINVAL;
	/* Another process's region: only its owner can destroy it. */
	if (mr->xproc)
		return -EOPNOTSUPP;
	/* A type 1 MW bound to it keeps it alive (ibv_dereg_mr(3): EBUSY). */
	if (atomic_load(&mr->mw_binds))
		return -EBUSY;
	/* Importers in other processes first: this waits for their copies
	 * from the region, as mr_wait_idle below does for ours. */
	xspace_unpub(s, mr->ibmr.lkey);
	keytab_remove(&s->keys, mr->ibmr.lkey);
	mr_gen_bump();
	mem_quiesce();		/* receives writing through a remembered key */
	mr_wait_idle(&mr->users, 0);
	if (mr->mapped)
		shm_map_unreg((void *)mr->vaddr, (size_t)mr->length);
	mr->mapped = false;
	if (mr->dm)
		atomic_fetch_sub(&mr->dm->refs, 1);
	mr->dead = true;
	pd_put(mr->pd);
	atomic_fetch_sub(&s->nmr, 1);
	/* An import that found the key before it went marked the region
	 * shared under the table's lock, which keytab_remove took after. */
	if (!atomic_load(&mr->shared)) {
		free(mr);		/* never imported: holder == mr */
		return 0;
	}
	mr_bury(holder);
	mr_bury(mr);
	return 0;
}

int mr_import(struct sr_pd *pd, uint32_t handle, struct sr_mr **out)
{
	struct sr_keytab *t = &pd->space->keys;
	struct sr_keyent *e;
	struct sr_mr *h, *mr;
	int xret = 0;

	/* Imported from another process: a proxy of the region it
	 * published (space.c's pd_import says why -EINVAL goes on). */
	if (pd->space->xpid) {
		xret = xspace_import_mr(pd->space, handle);
		if (xret && xret != -EINVAL)
			return xret;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	pthread_rwlock_wrlock(&t->lock);
	e = keytab_find_locked(t, handle);
	if (!e || e->kind != SR_KEY_MR || !e->obj ||
	    (xret && ((struct sr_mr *)e->obj)->xproc)) {
		pthread_rwlock_unlock(&t->lock);
		free(h);
		return -EINVAL;
	}
	mr = e->obj;
	atomic_store(&mr->shared, true);
	h->ibmr.lkey = mr->ibmr.lkey;
	h->ibmr.rkey = mr->ibmr.rkey;
	h->ibmr.length = mr->ibmr.length;
	pthread_rwlock_unlock(&t->lock);

	/* The region keeps its own PD for access checks; the holder names
	 * the importer's. ibv_import_mr(3): addr is not applicable, NULL. */
	h->obj = mr;
	h->space = pd->space;
	sr_list_init(&h->grave);
	h->ibmr.context = pd->ibpd.context;
	h->ibmr.pd = &pd->ibpd;
	h->ibmr.addr = NULL;
	h->ibmr.handle = handle;
	*out = h;
	return 0;
}

void mr_unimport(struct sr_mr *holder)
{
	/* ibv_unimport_mr(3): the holder goes, the region stays (and, if
	 * this was the last holder, lives until the space goes). */
	atomic_store(&holder->obj->shared, true);
	mr_bury(holder);
}

int mr_rereg(struct sr_mr *mr, int flags, struct sr_pd *pd, void *addr,
	     size_t len, int access)
{
	struct sr_space *space = mr->space;
	int ret;

	/* pd means something only with CHANGE_PD (pyverbs passes garbage
	 * without it). */
	if (mr->dead || ((flags & IBV_REREG_MR_CHANGE_PD) &&
			 (pd->obj->dead || pd->space != space)))
		return -EINVAL;
	if (mr->xproc)
		return -EOPNOTSUPP;	/* another process's region */
	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS))
		return -EINVAL;
	if (!flags)
		return -EINVAL;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		ret = access_ok(access);
		if (ret)
			return ret;
	}
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !len))
		return -EINVAL;
	/* A DM region maps its DM; it has no host address to move to. */
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && mr->dm)
		return -EINVAL;
	if (atomic_load(&mr->mw_binds))
		return -EBUSY;

	/* Take the key out while the record changes, so no access sees a
	 * half-updated region; then publish under a fresh key, as hardware
	 * that reissues keys does. */
	pthread_rwlock_wrlock(&space->keys.lock);
	{
		struct sr_keyent *e = keytab_find_locked(&space->keys, mr->ibmr.lkey);

		if (e)
			e->obj = NULL;
	}
	pthread_rwlock_unlock(&space->keys.lock);
	/* Importers elsewhere keep the old record: they import again. */
	xspace_unpub(space, mr->ibmr.lkey);
	mr_wait_idle(&mr->users, 0);

	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		if (mr->mapped)
			shm_map_unreg((void *)mr->vaddr, (size_t)mr->length);
		mr_set_range(mr, addr, len, (uint64_t)(uintptr_t)addr);
		mr->mapped = !mr->implicit && shm_map_reg(addr, len);
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		mr->access = access;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		pd_put(mr->pd);
		mr->pd = pd;
		mr->ibmr.pd = &pd->ibpd;
		pd_get(pd);
	}
	pthread_rwlock_wrlock(&space->keys.lock);
	{
		struct sr_keyent *e = keytab_find_locked(&space->keys, mr->ibmr.lkey);

		if (e)
			e->obj = mr;
	}
	pthread_rwlock_unlock(&space->keys.lock);
	mr_gen_bump();
	mem_quiesce();		/* ... through the old translation */
	xspace_pub(space, mr->ibmr.lkey, mr->pd, mr);
	return 0;
}

/* Is [va, va+len) inside [base, base+size)? Overflow-proof. */
static bool in_range(uint64_t base, uint64_t size, uint64_t va, uint64_t len)
{
	if (va < base)
		return false;
	if (len > size)
		return false;
	return va - base <= size - len;
}

int mr_resolve(struct sr_context *ctx, struct sr_pd *pd, uint32_t key,
	       uint64_t va, uint64_t len, int need, bool remote,
	       struct sr_mref *out)
{
	struct sr_keytab *t = &ctx->space->keys;
	uint64_t base;
	struct sr_keyent *e;
	int ret = -EACCES;

	pthread_rwlock_rdlock(&t->lock);
	e = keytab_find_locked(t, key);
	if (!e || !e->obj)
		goto out;
	if (e->kind == SR_KEY_MR) {
		struct sr_mr *mr = e->obj;

		/* A remote access must use the rkey; an lkey used remotely
		 * is the same value here, so the rights decide. */
		if (!pd_same(mr->pd, pd))
			goto out;
		if ((mr->access & need) != need)
			goto out;
		if (!mr->implicit && !in_range(mr->iova, mr->length, va, len)) {
			ret = -ERANGE;
			goto out;
		}
		/* Another process's region its owner withdrew. */
		if (mr->xproc && !xspace_mr_live(mr))
			goto out;
		out->addr = mr->vaddr + (uintptr_t)(va - mr->iova);
		out->xmr = mr->xproc ? mr : NULL;
		out->users = &mr->users;
		atomic_fetch_add(&mr->users, 1);
		ret = 0;
	} else if (e->kind == SR_KEY_MW) {
		struct sr_mw *mw = e->obj;

		/* Windows are for remote access only (IBTA 10.6.7). */
		if (!remote || !mw->mr)
			goto out;
		/* Type 2 windows are bound to a QP's PD; type 1 to the MR's. */
		if (!pd_same(mw->pd, pd))
			goto out;
		if ((mw->access & need) != need)
			goto out;
		/* A zero-based window is addressed from 0 (IBV_ACCESS_ZERO_BASED
		 * at bind), any other by the region's addresses. */
		base = (mw->access & IBV_ACCESS_ZERO_BASED) ? 0 : mw->addr;
		if (!in_range(base, mw->length, va, len)) {
			ret = -ERANGE;
			goto out;
		}
		if (mw->mr->xproc && !xspace_mr_live(mw->mr))
			goto out;
		out->addr = mw->mr->vaddr + (uintptr_t)(mw->addr + (va - base) - mw->mr->iova);
		out->xmr = mw->mr->xproc ? mw->mr : NULL;
		out->users = &mw->mr->users;
		atomic_fetch_add(&mw->mr->users, 1);
		ret = 0;
	}
out:
	pthread_rwlock_unlock(&t->lock);
	(void)remote;
	return ret;
}

int mr_span(struct sr_context *ctx, struct sr_pd *pd, uint32_t key, uint64_t va, uint64_t len,
	    struct sr_lkey_span *sp)
{
	struct sr_keytab *t = &ctx->space->keys;
	uint64_t gen = mr_gen();	/* (before the look: a change after it
					 * moves it on) */
	struct sr_keyent *e;
	struct sr_mr *mr;
	int ret = -EACCES;

	pthread_rwlock_rdlock(&t->lock);
	e = keytab_find_locked(t, key);
	if (!e || !e->obj || e->kind != SR_KEY_MR)
		goto out;
	mr = e->obj;
	if (!pd_same(mr->pd, pd))
		goto out;
	if (!mr->implicit && !in_range(mr->iova, mr->length, va, len)) {
		ret = -ERANGE;
		goto out;
	}
	if (mr->xproc) {
		ret = -EAGAIN;		/* (xspace_mr_live on every access) */
		goto out;
	}
	*sp = (struct sr_lkey_span){ .key = key, .implicit = mr->implicit, .access = mr->access,
				     .pd = pd, .gen = gen, .iova = mr->iova,
				     .length = mr->length, .vaddr = mr->vaddr };
	ret = 0;
out:
	pthread_rwlock_unlock(&t->lock);
	return ret;
}

void mr_release(struct sr_mref *r)
{
	if (r->users) {
		atomic_fetch_sub(r->users, 1);
		r->users = NULL;
	}
}

/* ---- memory windows ------------------------------------------------------ */

int mw_alloc(struct sr_pd *pd, enum ibv_mw_type type, struct sr_mw **out)
{
	struct sr_space *space = pd->space;
	struct sr_mw *mw;
	uint32_t key;
	int ret;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		return -EINVAL;
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return -ENOMEM;
	mw->pd = pd;
	ret = keytab_insert_random(&space->keys, SR_KEY_MW, mw, &key);
	if (ret) {
		free(mw);
		return ret;
	}
	mw->ibmw.context = pd->ibpd.context;
	mw->ibmw.pd = &pd->ibpd;
	mw->ibmw.rkey = key;
	mw->ibmw.handle = key;
	mw->ibmw.type = type;
	pd_get(pd);
	atomic_fetch_add(&space->nmw, 1);
	*out = mw;
	return 0;
}

static void mw_unbind(struct sr_mw *mw)
{
	if (mw->mr) {
		atomic_fetch_sub(&mw->mr->mw_binds, 1);
		mw->mr = NULL;
	}
	mw->length = 0;
	mw->access = 0;
}

int mw_dealloc(struct sr_mw *mw)
{
	struct sr_space *space = mw->pd->space;

	keytab_remove(&space->keys, mw->ibmw.rkey);
	mw_unbind(mw);
	pd_put(mw->pd);
	atomic_fetch_sub(&space->nmw, 1);
	free(mw);
	return 0;
}

/* IBTA Vol 1 §10.6.7.2: bind a window to (part of) an MR with MW_BIND
 * rights. Type 1 keeps its rkey; type 2 takes the new key the consumer
 * made with ibv_inc_rkey() (only the low 8 bits may change). */
int mw_bind(struct sr_qp *qp, struct sr_mw *mw, uint32_t new_rkey,
	    const struct ibv_mw_bind_info *bi)
{
	struct sr_keytab *t = &mw->pd->space->keys;
	struct sr_mr *mr = bi->mr ? mr_obj(bi->mr) : NULL;
	int access = (int)bi->mw_access_flags;
	int ret = 0;

	/* Local write on a window means nothing (windows are for remote
	 * access) and programs pass it anyway; ignore it. */
	access &= ~IBV_ACCESS_LOCAL_WRITE;
	if (access & ~(ACC_REMOTE | IBV_ACCESS_ZERO_BASED))
		return -EINVAL;
	if (mr) {
		if (!(mr->access & IBV_ACCESS_MW_BIND))
			return -EACCES;
		if (mr->dead)
			return -EINVAL;
		if (!pd_same(mr->pd, mw->pd) || (qp && !pd_same(qp->pd, mw->pd)))
			return -EACCES;
		/* A window cannot grant what the region does not have, and
		 * remote write/atomic need local write on the region. */
		if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		    !(mr->access & IBV_ACCESS_LOCAL_WRITE))
			return -EACCES;
		if (bi->length && !mr->implicit &&
		    !in_range(mr->iova, mr->length, bi->addr, bi->length))
			return -ERANGE;
	}
	if (mw->ibmw.type == IBV_MW_TYPE_2) {
		if ((new_rkey & ~0xffU) != (mw->ibmw.rkey & ~0xffU))
			return -EINVAL;
		if (mw->mr && mw->qp)
			return -EINVAL;		/* still valid: invalidate first */
	}
	pthread_rwlock_wrlock(&t->lock);
	if (mw->ibmw.type == IBV_MW_TYPE_2 && new_rkey != mw->ibmw.rkey) {
		struct sr_keyent *e = keytab_find_locked(t, new_rkey);

		if (e) {
			ret = -EINVAL;
			goto unlock;
		}
		/* Rekey: drop the old entry; the new one is added below. */
		keytab_remove_locked(t, mw->ibmw.rkey);
	}
	pthread_rwlock_unlock(&t->lock);
	if (mw->ibmw.type == IBV_MW_TYPE_2 && new_rkey != mw->ibmw.rkey) {
		ret = keytab_insert(t, new_rkey, SR_KEY_MW, mw);
		if (ret)
			return ret;
		mw->ibmw.rkey = new_rkey;
	}
	pthread_rwlock_wrlock(&t->lock);
	mw_unbind(mw);
	if (mr && bi->length) {
		mw->mr = mr;
		atomic_fetch_add(&mr->mw_binds, 1);
		mw->addr = bi->addr;
		mw->length = bi->length;
		mw->access = access;
		mw->qp = mw->ibmw.type == IBV_MW_TYPE_2 ? qp : NULL;
	}
unlock:
	pthread_rwlock_unlock(&t->lock);
	return ret;
}

int mw_invalidate(struct sr_context *ctx, struct sr_pd *pd, uint32_t rkey)
{
	struct sr_keytab *t = &ctx->space->keys;
	struct sr_keyent *e;
	int ret = -EINVAL;

	pthread_rwlock_wrlock(&t->lock);
	e = keytab_find_locked(t, rkey);
	if (e && e->kind == SR_KEY_MW) {
		struct sr_mw *mw = e->obj;

		/* Only type 2 windows are invalidated by a WR (IBTA 10.6.7.2.6). */
		if (mw->ibmw.type == IBV_MW_TYPE_2 && pd_same(mw->pd, pd)) {
			mw_unbind(mw);
			mw->qp = NULL;
			ret = 0;
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return ret;
}
