/* XRC domains (ibv_open_xrcd(3)), XRC SRQ numbers and the lookups the
 * receive path makes: which SRQ of an XRC_RECV QP's domain a request is
 * for (IBTA Vol 1 §9.8 / Annex A14, "XRC").
 *
 * A domain opened with fd -1 belongs to its one handle. A domain opened on
 * a file is named by the file's inode (st_dev, st_ino): every handle opened
 * on that inode in this process, from any context, shares it, as every
 * process shares the one kernel object on real hardware. Domains do not
 * span processes here (the objects they hold live in one process's
 * memory); an XRC_SEND QP reaches an XRC_RECV QP in another process
 * through the wire all the same, which is what XRC is for.
 */
#include "core/qp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>

static pthread_mutex_t xrcd_lock = PTHREAD_MUTEX_INITIALIZER;	/* domains, opens */
static struct sr_list xdoms = { &xdoms, &xdoms };
static atomic_uint srqn_next = 1;

/* SRQ numbers are 24 bits on the wire, like QPNs; 0 means "none". */
uint32_t srqn_alloc(void)
{
	uint32_t n;

	do
		n = atomic_fetch_add(&srqn_next, 1) & 0xffffff;
	while (!n);
	return n;
}

static struct sr_xdom *xdom_new(bool anon, dev_t dev, ino_t ino)
{
	struct sr_xdom *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	pthread_mutex_init(&d->lock, NULL);
	sr_list_init(&d->srqs);
	sr_list_init(&d->tgts);
	sr_list_init(&d->link);
	d->anon = anon;
	d->dev = dev;
	d->ino = ino;
	return d;
}

static struct sr_xdom *xdom_find_locked(dev_t dev, ino_t ino)
{
	struct sr_list *pos, *tmp;

	sr_list_for_each_safe(pos, tmp, &xdoms) {
		struct sr_xdom *d = container_of(pos, struct sr_xdom, link);

		if (d->dev == dev && d->ino == ino)
			return d;
	}
	return NULL;
}

/* The kernel's ib_uverbs_open_xrcd rules: fd -1 or a file's inode; without
 * O_CREAT the inode must have a domain already, with O_EXCL it must not
 * (both EINVAL, as uverbs answers); a bad fd is EBADF. */
static int xdom_lookup(const struct ibv_xrcd_init_attr *a, struct sr_xdom **out)
{
	struct sr_xdom *d;
	struct stat st;

	if (a->fd == -1) {
		if (a->oflags != O_CREAT)
			return -EINVAL;
		*out = xdom_new(true, 0, 0);
		return *out ? 0 : -ENOMEM;
	}
	if (fstat(a->fd, &st))
		return -errno;
	d = xdom_find_locked(st.st_dev, st.st_ino);
	if (!d && !(a->oflags & O_CREAT))
		return -EINVAL;
	if (d && (a->oflags & O_EXCL))
		return -EINVAL;
	if (!d) {
		d = xdom_new(false, st.st_dev, st.st_ino);
		if (!d)
			return -ENOMEM;
		sr_list_add_tail(&xdoms, &d->link);
	}
	*out = d;
	return 0;
}

int xrcd_open(struct sr_context *ctx, const struct ibv_xrcd_init_attr *a, struct sr_xrcd **out)
{
	struct sr_xrcd *x;
	struct sr_xdom *d = NULL;
	int ret;

	/* rdma-core's ibv_cmd_open_xrcd: unknown bits are EOPNOTSUPP, and
	 * both FD and OFLAGS must be given. */
	if (a->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))
		return -EOPNOTSUPP;
	if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
		return -EINVAL;
	if (a->oflags & ~(O_CREAT | O_EXCL))
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	pthread_mutex_lock(&xrcd_lock);
	ret = xdom_lookup(a, &d);
	if (!ret)
		d->opens++;
	pthread_mutex_unlock(&xrcd_lock);
	if (ret) {
		free(x);
		return ret;
	}
	x->ibxrcd.context = &ctx->vctx.context;
	x->dom = d;
	sr_dbg("XRCD %p opened (domain %p, %s)", (void *)x, (void *)d, d->anon ? "private" : "inode");
	*out = x;
	return 0;
}

int xrcd_close(struct sr_xrcd *x)
{
	struct sr_xdom *d = x->dom;
	bool last;

	pthread_mutex_lock(&xrcd_lock);
	pthread_mutex_lock(&d->lock);
	/* The last handle cannot go while SRQs or QPs still use the domain
	 * (uverbs: the XRCD's use count). */
	if (d->opens == 1 && d->users) {
		pthread_mutex_unlock(&d->lock);
		pthread_mutex_unlock(&xrcd_lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&d->lock);
	last = --d->opens == 0;
	if (last && !d->anon)
		sr_list_del(&d->link);
	pthread_mutex_unlock(&xrcd_lock);
	sr_dbg("XRCD %p closed (domain %p%s)", (void *)x, (void *)d, last ? ", gone" : "");
	if (last) {
		pthread_mutex_destroy(&d->lock);
		free(d);
	}
	free(x);
	return 0;
}

void xdom_add_srq(struct sr_xdom *d, struct sr_srq *srq)
{
	pthread_mutex_lock(&d->lock);
	sr_list_add_tail(&d->srqs, &srq->xlink);
	d->users++;
	pthread_mutex_unlock(&d->lock);
}

void xdom_del_srq(struct sr_xdom *d, struct sr_srq *srq)
{
	pthread_mutex_lock(&d->lock);
	sr_list_del(&srq->xlink);
	d->users--;
	pthread_mutex_unlock(&d->lock);
	/* A receive that found it before it was unlisted finishes first. */
	while (atomic_load(&srq->users))
		sched_yield();
}

void xdom_add_tgt(struct sr_xdom *d, struct sr_qp *qp)
{
	pthread_mutex_lock(&d->lock);
	sr_list_add_tail(&d->tgts, &qp->xlink);
	d->users++;
	pthread_mutex_unlock(&d->lock);
}

void xdom_del_tgt(struct sr_xdom *d, struct sr_qp *qp)
{
	pthread_mutex_lock(&d->lock);
	sr_list_del(&qp->xlink);
	d->users--;
	pthread_mutex_unlock(&d->lock);
}

struct sr_srq *xdom_srq_get(struct sr_xdom *d, uint32_t srqn)
{
	struct sr_srq *found = NULL;
	struct sr_list *pos, *tmp;

	if (!srqn)
		return NULL;
	pthread_mutex_lock(&d->lock);
	sr_list_for_each_safe(pos, tmp, &d->srqs) {
		struct sr_srq *srq = container_of(pos, struct sr_srq, xlink);

		if (srq->srqn == srqn) {
			atomic_fetch_add(&srq->users, 1);
			found = srq;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return found;
}

void xdom_srq_put(struct sr_srq *srq)
{
	atomic_fetch_sub(&srq->users, 1);
}

void xdom_resume(struct sr_xdom *d)
{
	struct sr_qp **list = NULL;
	struct sr_list *pos, *tmp;
	int n = 0, cap = 0;

	pthread_mutex_lock(&d->lock);
	sr_list_for_each_safe(pos, tmp, &d->tgts)
		cap++;
	if (cap)
		list = calloc((size_t)cap, sizeof(*list));
	sr_list_for_each_safe(pos, tmp, &d->tgts) {
		struct sr_qp *qp = container_of(pos, struct sr_qp, xlink);

		if (!list || qp->dying)
			continue;
		qp_get(qp);
		list[n++] = qp;
	}
	pthread_mutex_unlock(&d->lock);
	qp_resume_parked(list, n);
	free(list);
}
