/* Device contexts: what ibv_open_device returns, and the process-wide
 * registry that lets a QP number find its QP.
 *
 * A context's PDs and MRs live in its object space (space.c), which
 * ibv_import_device shares with a second context through cmd_fd.
 *
 * Each context owns a listening TCP socket; its port is the high 16 bits of
 * every QPN the context hands out (QPN = port << 8 | slot, DESIGN.md
 * decision 4), so (GID, QPN) exchanged out of band is a full address.
 */
#include "core/qp.h"
#include "chan/chan.h"
#include "chan/udp.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_list ctx_list = { &ctx_list, &ctx_list };

static int ctx_listen_once(struct sr_context *ctx)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t alen = sizeof(a);
	int fd, off = 0;

	/* Dual-stack: one port for IPv4 and IPv6 peers alike. */
	fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0) {
		struct sockaddr_in a4 = { .sin_family = AF_INET };

		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) < 0)
			goto err;
	}
	if (listen(fd, 128) < 0)
		goto err;
	if (getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
		goto err;
	ctx->listen_fd = fd;
	ctx->port = ntohs(a.sin6_port);	/* sin_port sits at the same offset */
	return 0;
err:
	{
		int e = errno;

		close(fd);
		return -e;
	}
}

/* The context's TCP listener on a port whose UDP twin is free too: the
 * port is the QPN prefix of its RC and UD QPs alike (DESIGN.md decision
 * 4). The kernel picks the TCP port; another process may hold that
 * number in UDP (another context's UD QPs), so try again, keeping the
 * refused listeners until the end so the kernel cannot offer the same
 * port twice. */
static int ctx_listen(struct sr_context *ctx)
{
	int refused[32], nref = 0, ret;

	for (;;) {
		ret = ctx_listen_once(ctx);
		if (ret)
			break;
		ctx->udp_fd = chan_udp_reserve(ctx->port, &ctx->udp_family);
		if (ctx->udp_fd >= 0 || ctx->udp_fd != -EADDRINUSE ||
		    nref == (int)ARRAY_SIZE(refused)) {
			/* Not EADDRINUSE (no UDP here, say): UD QPs will say
			 * so when made; RC needs only the TCP port. */
			if (ctx->udp_fd < 0)
				ctx->udp_fd = -1;
			break;
		}
		refused[nref++] = ctx->listen_fd;
		ctx->listen_fd = -1;
	}
	while (nref)
		close(refused[--nref]);
	return ret;
}

/* A context on @space (whose reference it takes over, even when it
 * fails), named by @cmd_fd (which it owns once it succeeds). */
static int ctx_open_on(struct sr_device *dev, struct sr_space *space, int cmd_fd,
		       struct sr_context **out)
{
	struct sr_context *ctx;
	long ncpu;
	int ret;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		ret = -ENOMEM;
		goto err_space;
	}
	ctx->listen_fd = -1;
	ctx->udp_fd = -1;
	ctx->space = space;
	ctx->cmd_fd = cmd_fd;
	pthread_mutex_init(&ctx->lock, NULL);
	ret = evq_init(&ctx->async);
	if (ret)
		goto err_evq;
	ret = ctx_listen(ctx);
	if (ret)
		goto err_listen;
	ctx->owner = getpid();
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	ctx->vctx.context.device = &dev->ibdev;
	/* ibv_import_device(3): a dup of cmd_fd opens the same objects. */
	ctx->vctx.context.cmd_fd = cmd_fd;
	ctx->vctx.context.async_fd = ctx->async.fd;
	ctx->vctx.context.num_comp_vectors = ncpu > 0 ? (int)sr_min(ncpu, 64) : 1;
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	pthread_mutex_lock(&ctx_list_lock);
	sr_list_add_tail(&ctx_list, &ctx->link);
	pthread_mutex_unlock(&ctx_list_lock);
	sr_dbg("context %p open, QPN prefix port %u", (void *)ctx, ctx->port);
	*out = ctx;
	return 0;

err_listen:
	evq_destroy(&ctx->async);
err_evq:
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
err_space:
	space_put(space);
	return ret;
}

int ctx_open(struct sr_device *dev, struct sr_context **out)
{
	struct sr_space *space;
	int ret, fd;

	ret = space_create(&space, &fd);
	if (ret)
		return ret;
	ret = ctx_open_on(dev, space, fd, out);
	if (ret)
		close(fd);
	return ret;
}

/* exit(3) with QPs not destroyed: a peer on this host has not yet taken
 * the large SENDs and WRITEs it was sent, which it reads from our memory
 * (DESIGN.md decision 23), and cannot once we are gone: its stream would
 * end as lost. Over TCP the kernel still holds such bytes after exit; so
 * here the exit waits for the peers to take them, a second at most in
 * all, as ibv_destroy_qp does. (Not after _exit or a signal: nothing
 * runs then; the peers see a crash.) */
__attribute__((destructor)) static void ctx_exit_drain(void)
{
	uint64_t deadline = progress_now_ns() + 1000000000ULL;

	/* (a program thread may hold the list's lock as exit runs: a
	 * millisecond for it, no more) */
	for (int i = 0; pthread_mutex_trylock(&ctx_list_lock); i++) {
		if (i == 20)
			return;
		usleep(50);
	}
	for (struct sr_list *p = ctx_list.next; p != &ctx_list; p = p->next) {
		struct sr_context *ctx = container_of(p, struct sr_context, link);

		if (ctx->owner == sr_getpid())
			chan_tcp_exit_drain(ctx, deadline);
	}
	pthread_mutex_unlock(&ctx_list_lock);
}

int ctx_import(struct sr_device *dev, int cmd_fd, struct sr_context **out)
{
	struct sr_space *space;
	int ret;

	ret = space_find_fd(cmd_fd, &space);
	if (ret)
		return ret;
	return ctx_open_on(dev, space, cmd_fd, out);
}

void ctx_close(struct sr_context *ctx)
{
	pthread_mutex_lock(&ctx_list_lock);
	sr_list_del(&ctx->link);
	pthread_mutex_unlock(&ctx_list_lock);
	chan_udp_ctx_close(ctx);	/* before the progress engine goes */
	chan_tcp_ctx_close(ctx);
	/* A forked child closing a context must not touch the parent's
	 * sockets beyond its own copies of the descriptors; close() on a
	 * copy is exactly that, and shutdown() is never called. */
	if (ctx->listen_fd >= 0)
		close(ctx->listen_fd);
	if (ctx->udp_fd >= 0)
		close(ctx->udp_fd);
	close(ctx->cmd_fd);
	evq_destroy(&ctx->async);
	space_put(ctx->space);
	pthread_mutex_destroy(&ctx->vctx.context.mutex);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

struct sr_qp *ctx_find_qp(uint32_t qpn)
{
	uint32_t port = (qpn >> 8) & 0xffff, slot = qpn & 0xff;
	struct sr_qp *qp = NULL;
	struct sr_list *pos, *tmp;

	pthread_mutex_lock(&ctx_list_lock);
	sr_list_for_each_safe(pos, tmp, &ctx_list) {
		struct sr_context *ctx = container_of(pos, struct sr_context, link);

		if (ctx->port != port)
			continue;
		pthread_mutex_lock(&ctx->lock);
		qp = ctx->qps[slot];
		if (qp && !qp->dying)
			qp_get(qp);
		else
			qp = NULL;
		pthread_mutex_unlock(&ctx->lock);
		break;
	}
	pthread_mutex_unlock(&ctx_list_lock);
	return qp;
}

void ctx_async_event(struct sr_context *ctx, void *obj, enum ibv_event_type t)
{
	sr_dbg("async event %d on %p", (int)t, obj);
	evq_push(&ctx->async, obj, (int)t, 1);
}
