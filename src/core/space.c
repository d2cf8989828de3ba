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
 * The memfd holds a small header (magic, owner pid). A descriptor passed to
 * another process still identifies the space, but its memory (the regions
 * behind the keys) is the owner's: importing there is refused with
 * EOPNOTSUPP, which the header lets us tell from a descriptor that is not
 * ours at all (docs/COMPAT.md).
 */
#include "core/core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPACE_MAGIC "softrnic-space-1"

struct space_hdr {
	char magic[16];
	int32_t pid;
};

static pthread_mutex_t space_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_list space_list = { &space_list, &space_list };

static int space_fd_open(void)
{
	struct space_hdr h = { .pid = getpid() };
	int fd;

	memcpy(h.magic, SPACE_MAGIC, sizeof(h.magic));
	fd = memfd_create("softrnic-cmd", MFD_CLOEXEC);
	if (fd >= 0) {
		if (pwrite(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h))
			return fd;
		close(fd);
	}
	/* No memfd (old kernel, seccomp): any descriptor with an inode of
	 * its own still names the space within the process. */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

int space_create(struct sr_space **out, int *cmd_fd)
{
	struct sr_space *s;
	struct stat st;
	int fd, ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	ret = keytab_init(&s->keys);
	if (ret)
		goto err_free;
	fd = space_fd_open();
	if (fd < 0) {
		ret = fd;
		goto err_keys;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto err_fd;
	}
	s->fd_dev = st.st_dev;
	s->fd_ino = st.st_ino;
	s->owner = getpid();
	atomic_init(&s->refs, 1);
	pthread_mutex_init(&s->lock, NULL);
	sr_list_init(&s->grave_pd);
	sr_list_init(&s->grave_mr);
	pthread_mutex_lock(&space_list_lock);
	sr_list_add_tail(&space_list, &s->link);
	pthread_mutex_unlock(&space_list_lock);
	*out = s;
	*cmd_fd = fd;
	return 0;

err_fd:
	close(fd);
err_keys:
	keytab_destroy(&s->keys);
err_free:
	free(s);
	return ret;
}

/* Why a descriptor names no space of ours: see space_find_fd. */
static int space_fd_why(int fd)
{
	struct space_hdr h;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, SPACE_MAGIC, sizeof(h.magic)))
		return -EINVAL;
	return h.pid == getpid() ? -ENODEV : -EOPNOTSUPP;
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

		if (s->fd_dev != st.st_dev || s->fd_ino != st.st_ino)
			continue;
		/* A forked child sees its parent's spaces in its copy of
		 * memory, but the regions behind them are not its own. */
		if (s->owner != getpid()) {
			ret = -EOPNOTSUPP;
			break;
		}
		space_get(s);
		*out = s;
		break;
	}
	pthread_mutex_unlock(&space_list_lock);
	if (ret || *out)
		return ret;
	return space_fd_why(fd);
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
	space_free_graves(s);
	keytab_destroy(&s->keys);
	pthread_mutex_destroy(&s->lock);
	free(s);
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
	/* ibv_alloc_pd(3): fails if any other object still uses the PD,
	 * whichever context it was made in. */
	if (atomic_load(&obj->refs))
		return -EBUSY;
	/* Once the handle is out, no import can find the PD; one that found
	 * it before marked it shared under the same lock, seen below. */
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

	if (atomic_load(&ctx->npd) >= SR_MAX_PD)
		return -ENOMEM;
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pthread_rwlock_wrlock(&t->lock);
	e = keytab_find_locked(t, handle);
	if (!e || e->kind != SR_KEY_PD || !e->obj) {
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
