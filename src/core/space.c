/* Object spaces and protection domains: what cmd_fd names, and how a PD
 * is shared between the contexts of one space.
 *
 * The kernel keeps a process's verbs objects in the device file it opened;
 * every dup of that file's descriptor (cmd_fd) reaches the same objects,
 * which is how ibv_import_device(3), ibv_import_pd(3) and ibv_import_mr(3)
 * share them. softrnic has no device file, so a space stands in for it: a
 * key table (PD handles, MR and MW keys) shared by the contexts opened on
 * it, named by a memfd. Every context's cmd_fd is that memfd or a dup of
 * it, so an importer finds the space by the descriptor's inode, whatever
 * number dup() or SCM_RIGHTS gave it.
 *
 * The memfd holds a header (magic, owner pid) and a table where the owner
 * publishes its PD handles and MR keys. A descriptor passed to another
 * process still identifies the space, but its regions are the owner's
 * memory: the importer builds a proxy space from the table, whose MRs it
 * reaches with process_vm_readv/writev (xspace.c, docs/COMPAT.md).
 */
#include "core/core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t space_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_list space_list = { &space_list, &space_list };

static int space_fd_open(void)
{
	int fd = xspace_fd_create();

	if (fd >= 0)
		return fd;
	/* No memfd (old kernel, seccomp): any descriptor with an inode of
	 * its own still names the space within the process. */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

/* What every space starts with, local or a proxy. */
static struct sr_space *space_alloc(const struct stat *st)
{
	struct sr_space *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (keytab_init(&s->keys)) {
		free(s);
		return NULL;
	}
	s->fd_dev = st->st_dev;
	s->fd_ino = st->st_ino;
	s->owner = getpid();
	s->pidfd = -1;
	atomic_init(&s->refs, 1);
	pthread_mutex_init(&s->lock, NULL);
	sr_list_init(&s->grave_pd);
	sr_list_init(&s->grave_mr);
	return s;
}

static void space_free_graves(struct sr_space *s);

static void space_free(struct sr_space *s)
{
	xspace_unmap(s, !s->xpid);
	space_free_graves(s);
	keytab_destroy(&s->keys);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int space_create(struct sr_space **out, int *cmd_fd)
{
	struct sr_space *s;
	struct stat st;
	int fd;

	fd = space_fd_open();
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !(s = space_alloc(&st))) {
		close(fd);
		return -ENOMEM;
	}
	/* Publish PDs and MRs for importers in other processes. */
	xspace_map_owner(s, fd);
	pthread_mutex_lock(&space_list_lock);
	sr_list_add_tail(&space_list, &s->link);
	pthread_mutex_unlock(&space_list_lock);
	*out = s;
	*cmd_fd = fd;
	return 0;
}

/* A descriptor no space of this process answers to: another process's
 * context (build a proxy of it), or why not. List lock held, so that two
 * imports of one descriptor share one proxy. */
static int space_fd_other(int fd, const struct stat *st, struct sr_space **out)
{
	struct sr_space *s;
	pid_t pid;
	int ret;

	ret = xspace_fd_header(fd, &pid);
	if (ret)
		return ret;
	if (pid == getpid())
		return -ENODEV;		/* ours, and gone */
	s = space_alloc(st);
	if (!s)
		return -ENOMEM;
	ret = xspace_proxy(fd, pid, s);
	if (ret) {
		space_free(s);
		return ret;
	}
	sr_list_add_tail(&space_list, &s->link);
	*out = s;
	return 0;
}

int space_find_fd(int fd, struct sr_space **out)
{
	struct sr_list *pos, *tmp;
	struct stat st;
	int ret = 0;

	if (fstat(fd, &st) < 0)
		return -EBADF;
	*out = NULL;
	pthread_mutex_lock(&space_list_lock);
	sr_list_for_each_safe(pos, tmp, &space_list) {
		struct sr_space *s = container_of(pos, struct sr_space, link);

		/* A forked child sees its parent's spaces in its copy of
		 * memory, but the regions behind them are not its own: it
		 * imports them as any other process does. */
		if (s->fd_dev != st.st_dev || s->fd_ino != st.st_ino ||
		    s->owner != getpid())
			continue;
		space_get(s);
		*out = s;
		break;
	}
	if (!*out)
		ret = space_fd_other(fd, &st, out);
	pthread_mutex_unlock(&space_list_lock);
	return ret;
}

void space_get(struct sr_space *s)
{
	atomic_fetch_add(&s->refs, 1);
}

static void space_free_graves(struct sr_space *s)
{
	struct sr_list *pos, *tmp;

	sr_list_for_each_safe(pos, tmp, &s->grave_mr)
		free(container_of(pos, struct sr_mr, grave));
	sr_list_for_each_safe(pos, tmp, &s->grave_pd)
		free(container_of(pos, struct sr_pd, grave));
}

void space_put(struct sr_space *s)
{
	/* The list lock orders the last put against space_find_fd taking
	 * a reference from the list. */
	pthread_mutex_lock(&space_list_lock);
	if (atomic_fetch_sub(&s->refs, 1) != 1) {
		pthread_mutex_unlock(&space_list_lock);
		return;
	}
	sr_list_del(&s->link);
	pthread_mutex_unlock(&space_list_lock);
	space_free(s);
}

/* Keep a holder's memory until the space goes (see struct sr_space). */
static void space_bury_pd(struct sr_space *s, struct sr_pd *pd)
{
	pthread_mutex_lock(&s->lock);
	if (!pd->buried) {
		pd->buried = true;
		sr_list_add_tail(&s->grave_pd, &pd->grave);
	}
	pthread_mutex_unlock(&s->lock);
}

/* ---- protection domains ------------------------------------------------ */

int pd_alloc(struct sr_context *ctx, struct sr_pd **out)
{
	struct sr_pd *pd;
	uint32_t handle;
	int ret;

	if (atomic_load(&ctx->npd) >= SR_MAX_PD)
		return -ENOMEM;
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd->obj = pd;
	pd->space = ctx->space;
	sr_list_init(&pd->grave);
	/* The handle is a key of the space's table: unique among its PDs
	 * (and its MR keys), and found by ibv_import_pd in any context. */
	ret = keytab_insert_random(&ctx->space->keys, SR_KEY_PD, pd, &handle);
	if (ret) {
		free(pd);
		return ret;
	}
	pd->ibpd.context = &ctx->vctx.context;
	pd->ibpd.handle = handle;
	xspace_pub(ctx->space, handle, pd, NULL);
	atomic_fetch_add(&ctx->npd, 1);
	*out = pd;
	return 0;
}

int pd_dealloc(struct sr_pd *pd)
{
	struct sr_pd *obj = pd->obj;
	struct sr_space *s = pd->space;

	if (pd_is_parent(pd)) {
		/* ibv_alloc_parent_domain(3): freed with ibv_dealloc_pd, once
		 * nothing made on it remains */
		if (atomic_load(&pd->refs))
			return -EBUSY;
		pd_put(pd->prot);
		if (pd->td)
			atomic_fetch_sub(&pd->td->refs, 1);
		free(pd);
		return 0;
	}
	if (obj->dead)
		return -EINVAL;
	/* Another process's PD: only its owner can destroy it. */
	if (obj->xproc)
		return -EOPNOTSUPP;
	/* ibv_alloc_pd(3): fails if any other object still uses the PD,
	 * whichever context it was made in. */
	if (atomic_load(&obj->refs))
		return -EBUSY;
	/* Once the handle is out, no import can find the PD; one that found
	 * it before marked it shared under the same lock, seen below. */
	xspace_unpub(s, obj->ibpd.handle);
	keytab_remove(&s->keys, obj->ibpd.handle);
	obj->dead = true;
	atomic_fetch_sub(&to_ctx(pd->ibpd.context)->npd, 1);
	if (!atomic_load(&obj->shared)) {
		free(pd);		/* never imported: pd == obj */
		return 0;
	}
	/* ibv_import_pd(3): the other holders may only be unimported now;
	 * they and the PD stay readable until the space goes. */
	space_bury_pd(s, pd);
	space_bury_pd(s, obj);
	return 0;
}

int pd_import(struct sr_context *ctx, uint32_t handle, struct sr_pd **out)
{
	struct sr_keytab *t = &ctx->space->keys;
	struct sr_keyent *e;
	struct sr_pd *pd, *obj;
	int xret = 0;

	if (atomic_load(&ctx->npd) >= SR_MAX_PD)
		return -ENOMEM;

	/* Imported from another process: the proxy of the PD it published
	 * (the first import makes it). -EINVAL: not published, which is
	 * fine for a PD this process made on the proxy space, and not for
	 * a proxy whose PD is gone. */
	if (ctx->space->xpid) {
		xret = xspace_import_pd(ctx->space, handle);
		if (xret && xret != -EINVAL)
			return xret;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pthread_rwlock_wrlock(&t->lock);
	e = keytab_find_locked(t, handle);
	if (!e || e->kind != SR_KEY_PD || !e->obj ||
	    (xret && ((struct sr_pd *)e->obj)->xproc)) {
		pthread_rwlock_unlock(&t->lock);
		free(pd);
		return -EINVAL;
	}
	obj = e->obj;
	atomic_store(&obj->shared, true);
	pthread_rwlock_unlock(&t->lock);

	pd->obj = obj;
	pd->space = ctx->space;
	sr_list_init(&pd->grave);
	pd->ibpd.context = &ctx->vctx.context;
	pd->ibpd.handle = handle;
	atomic_fetch_add(&ctx->npd, 1);
	*out = pd;
	return 0;
}

void pd_unimport(struct sr_pd *pd)
{
	/* ibv_unimport_pd(3): the holder goes, the PD stays. Objects made
	 * through this holder may still point at it, so it is buried, not
	 * freed; and the PD, now held elsewhere or nowhere, is shared. */
	atomic_store(&pd->obj->shared, true);
	atomic_fetch_sub(&to_ctx(pd->ibpd.context)->npd, 1);
	space_bury_pd(pd->space, pd);
}
