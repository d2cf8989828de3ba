/* The UDP channel for UD QPs: see chan/udp.h for the model.
 *
 * Locks: rx_lock (one receiver at a time: the receive buffer and the
 * group list) is taken before a QP lock, never after; tx_lock (the
 * "socket full" state) is taken under a QP lock and takes nothing.
 */
#include "chan/shm.h"
#include "chan/udp.h"
#include "core/qp.h"
#include "progress/progress.h"
#include "wire/ud.h"

#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Datagrams one receive pass takes before it lets others run. */
#define UDP_RX_BATCH	64
#define UDP_RCVBUF	(16 << 20)

enum {
	ST_RX_OK, ST_RX_BAD, ST_RX_NO_QP, ST_RX_STATE, ST_RX_QKEY, ST_RX_NO_WQE,
	ST_TX_OK, ST_TX_LOST, ST_MAX,
};

struct udp_group {
	struct sr_list link;
	struct in6_addr addr;		/* IPv4-mapped for an IPv4 group */
	struct sr_pollable pl;
	struct sr_udp_ctx *u;
	bool dead;			/* unlisted; the handler must not use it */
	uint32_t nqp, cap;
	uint32_t *qpns;			/* attached QPs */
};

struct sr_udp_ctx {
	struct sr_context *ctx;
	struct sr_progress *pg;
	struct sr_pollable pl;		/* the unicast socket */
	int family;			/* AF_INET6 (dual stack) or AF_INET */
	sr_mutex rx_lock;		/* rbuf, groups */
	sr_mutex tx_lock;		/* tx_blocked */
	bool tx_blocked;
	struct sr_list groups;
	uint8_t *rbuf;
	atomic_uint_fast64_t st[ST_MAX];
};

static void udp_count(struct sr_udp_ctx *u, int what)
{
	atomic_fetch_add_explicit(&u->st[what], 1, memory_order_relaxed);
}

static uint16_t mcast_port(void)
{
	const char *v = getenv("SOFTRNIC_UD_MCAST_PORT");
	long p = v ? strtol(v, NULL, 10) : 0;

	return p > 0 && p < 65536 ? (uint16_t)p : SR_UD_MCAST_PORT;
}

/* ---- receive ---------------------------------------------------------------- */

static struct sr_qp *udp_find_qp(struct sr_context *ctx, uint32_t qpn)
{
	struct sr_qp *qp;

	if ((qpn >> 8) != ctx->port)
		return NULL;
	pthread_mutex_lock(&ctx->lock);
	qp = ctx->qps[qpn & 0xff];
	if (qp && !qp->dying && qp->ibqp.qp_base.qp_type == IBV_QPT_UD)
		qp_get(qp);
	else
		qp = NULL;
	pthread_mutex_unlock(&ctx->lock);
	return qp;
}

static void udp_deliver(struct sr_udp_ctx *u, uint32_t qpn, const struct ud_hdr *h,
			const uint8_t *payload, const struct ud_grh_info *g)
{
	static const int verdict_stat[UD_VERDICT_MAX] = {
		[UD_DELIVERED] = ST_RX_OK, [UD_DROP_STATE] = ST_RX_STATE,
		[UD_DROP_QKEY] = ST_RX_QKEY, [UD_DROP_NO_WQE] = ST_RX_NO_WQE,
		[UD_HELD] = ST_RX_OK,
	};
	struct sr_qp *qp = udp_find_qp(u->ctx, qpn);
	enum ud_verdict v;

	if (!qp) {
		udp_count(u, ST_RX_NO_QP);
		return;
	}
	v = ud_deliver(qp, h, payload, g);
	qp_put(qp);
	udp_count(u, verdict_stat[v]);
	if (v == UD_DELIVERED || v == UD_HELD)
		atomic_fetch_add_explicit(&chan_stats.ud_received, 1, memory_order_relaxed);
	if (v != UD_DELIVERED && v != UD_HELD)
		sr_dbg("UD QP %#x: datagram from QP %#x dropped (%d)", qpn, h->src_qpn, (int)v);
}

static void gid_from_sa(uint8_t gid[16], const struct sockaddr_storage *ss)
{
	memset(gid, 0, 16);
	if (ss->ss_family == AF_INET) {
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	}
}

/* What the IP headers said: destination, hop limit, traffic class. */
static void read_cmsgs(struct msghdr *msg, struct ud_grh_info *g)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		int v;

		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			memset(g->dgid, 0, 10);
			g->dgid[10] = g->dgid[11] = 0xff;
			memcpy(g->dgid + 12, &pi.ipi_addr, 4);
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			memcpy(g->dgid, &pi.ipi6_addr, 16);
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			g->hop_limit = (uint8_t)v;
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
			g->tclass = *(const uint8_t *)CMSG_DATA(c);
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			g->hop_limit = (uint8_t)v;
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			g->tclass = (uint8_t)v;
		}
	}
}

/* Receive one datagram from fd (grp: the group socket it is, or NULL)
 * and deliver it. Caller holds rx_lock. 0, or -EAGAIN when none waits. */
static int udp_rx_one(struct sr_udp_ctx *u, int fd, struct udp_group *grp)
{
	union {
		struct cmsghdr align;
		uint8_t buf[256];
	} cbuf;
	struct sockaddr_storage from;
	struct iovec iov = { u->rbuf, UD_HDR_LEN + UD_MAX_PAYLOAD + 1 };
	struct msghdr msg = {
		.msg_name = &from, .msg_namelen = sizeof(from),
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf),
	};
	struct ud_grh_info g = { 0 };
	struct ud_hdr h;
	ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);

	if (n < 0)
		return errno == EINTR ? 0 : -EAGAIN;
	/* Oversized (truncated by us), or not one of ours: count and drop. */
	if ((msg.msg_flags & MSG_TRUNC) || ud_hdr_decode(u->rbuf, (size_t)n, &h) < 0) {
		udp_count(u, ST_RX_BAD);
		return 0;
	}
	gid_from_sa(g.sgid, &from);
	if (grp)
		memcpy(g.dgid, &grp->addr, 16);
	g.hop_limit = 64;
	read_cmsgs(&msg, &g);
	g.flow_label = h.flow_label;
	g.payload = h.len;
	g.imm = h.opcode == UD_OP_SEND_IMM;
	if (!grp) {
		udp_deliver(u, h.dst_qpn, &h, u->rbuf + UD_HDR_LEN, &g);
		return 0;
	}
	/* IBTA 10.5.2.x: a multicast message names QPN 0xFFFFFF and goes to
	 * every QP attached to the group. */
	if (h.dst_qpn != UD_QPN_MCAST || grp->dead) {
		udp_count(u, ST_RX_NO_QP);
		return 0;
	}
	for (uint32_t i = 0; i < grp->nqp; i++)
		udp_deliver(u, grp->qpns[i], &h, u->rbuf + UD_HDR_LEN, &g);
	return 0;
}

static void udp_rx_batch_locked(struct sr_udp_ctx *u, int fd, struct udp_group *grp)
{
	for (int i = 0; i < UDP_RX_BATCH; i++)
		if (udp_rx_one(u, fd, grp))
			break;
}

/* The context's UD QPs may send again: the socket has room. */
static void udp_tx_resume(struct sr_udp_ctx *u)
{
	struct sr_context *ctx = u->ctx;
	struct sr_qp *list[SR_MAX_QP];
	int n = 0;

	sr_mutex_lock(&u->tx_lock);
	u->tx_blocked = false;
	progress_mod(u->pg, &u->pl, EPOLLIN);
	sr_mutex_unlock(&u->tx_lock);
	pthread_mutex_lock(&ctx->lock);
	for (int i = 1; i <= SR_MAX_QP; i++) {
		struct sr_qp *qp = ctx->qps[i];

		if (qp && !qp->dying && qp->ibqp.qp_base.qp_type == IBV_QPT_UD) {
			qp_get(qp);
			list[n++] = qp;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	for (int i = 0; i < n; i++) {
		sr_mutex_lock(&list[i]->lock);
		ud_sq_progress_locked(list[i]);
		sr_mutex_unlock(&list[i]->lock);
		qp_put(list[i]);
	}
}

static void udp_on_event(struct sr_pollable *p, uint32_t events)
{
	struct sr_udp_ctx *u = container_of(p, struct sr_udp_ctx, pl);

	if (events & EPOLLOUT)
		udp_tx_resume(u);
	if (events & (EPOLLIN | EPOLLERR)) {
		sr_mutex_lock(&u->rx_lock);
		udp_rx_batch_locked(u, p->fd, NULL);
		sr_mutex_unlock(&u->rx_lock);
	}
}

static void group_on_event(struct sr_pollable *p, uint32_t events)
{
	struct udp_group *grp = container_of(p, struct udp_group, pl);
	struct sr_udp_ctx *u = grp->u;

	sr_mutex_lock(&u->rx_lock);
	udp_rx_batch_locked(u, p->fd, grp);
	sr_mutex_unlock(&u->rx_lock);
}

void chan_udp_poll(struct sr_context *ctx, struct sr_cq *cq)
{
	struct sr_udp_ctx *u = ctx->udp;
	struct sr_list *pos, *tmp;

	/* Whoever holds rx_lock is receiving already. */
	if (!u || sr_mutex_trylock(&u->rx_lock))
		return;
	udp_rx_batch_locked(u, u->pl.fd, NULL);
	sr_list_for_each_safe(pos, tmp, &u->groups) {
		struct udp_group *grp = container_of(pos, struct udp_group, link);

		udp_rx_batch_locked(u, grp->pl.fd, grp);
	}
	sr_mutex_unlock(&u->rx_lock);
	(void)cq;
}

/* ---- send ------------------------------------------------------------------- */

/* Source address, interface, hop limit and traffic class of one datagram,
 * as ancillary data (ip(7) IP_PKTINFO/IP_TTL/IP_TOS, ipv6(7)). */
static size_t tx_cmsgs(uint8_t *buf, size_t cap, const struct sr_ud_av *av, bool v4)
{
	struct msghdr msg = { .msg_control = buf, .msg_controllen = cap };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	bool src_v4 = ud_gid_v4mapped(av->sgid.raw);
	int ttl = av->hop_limit, tos = av->tclass;
	size_t len = 0;

	memset(buf, 0, cap);
	if (v4) {
		struct in_pktinfo pi = { 0 };

		/* Multicast leaves by the source GID's interface; unicast by
		 * the route, from the source GID's address. */
		if (av->mcast)
			pi.ipi_ifindex = (int)av->ifindex;
		if (src_v4)
			memcpy(&pi.ipi_spec_dst, av->sgid.raw + 12, 4);
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
		len += CMSG_SPACE(sizeof(pi));
		c = (struct cmsghdr *)(buf + len);
		if (ttl) {
			c->cmsg_level = IPPROTO_IP;
			c->cmsg_type = IP_TTL;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &ttl, sizeof(int));
			len += CMSG_SPACE(sizeof(int));
			c = (struct cmsghdr *)(buf + len);
		}
		if (tos) {
			c->cmsg_level = IPPROTO_IP;
			c->cmsg_type = IP_TOS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &tos, sizeof(int));
			len += CMSG_SPACE(sizeof(int));
		}
		return len;
	}
	{
		struct in6_pktinfo pi = { 0 };

		if (av->mcast || av->dst.in6.sin6_scope_id)
			pi.ipi6_ifindex = av->ifindex;
		if (!src_v4)
			memcpy(&pi.ipi6_addr, av->sgid.raw, 16);
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
		len += CMSG_SPACE(sizeof(pi));
		c = (struct cmsghdr *)(buf + len);
	}
	if (ttl) {
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_HOPLIMIT;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &ttl, sizeof(int));
		len += CMSG_SPACE(sizeof(int));
		c = (struct cmsghdr *)(buf + len);
	}
	if (tos) {
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_TCLASS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &tos, sizeof(int));
		len += CMSG_SPACE(sizeof(int));
	}
	return len;
}

int chan_udp_send(struct sr_context *ctx, const struct sr_ud_av *av, uint32_t dst_qpn,
		  const struct iovec *iov, int iovcnt)
{
	struct sr_udp_ctx *u = ctx->udp;
	union {
		struct cmsghdr align;
		uint8_t buf[128];
	} cbuf;
	union {
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} dst;
	uint16_t port = av->mcast ? mcast_port() : (uint16_t)(dst_qpn >> 8);
	bool v4 = ud_gid_v4mapped(av->dst.in6.sin6_addr.s6_addr);
	struct msghdr msg = { .msg_name = &dst, .msg_iov = (struct iovec *)iov,
			      .msg_iovlen = (size_t)iovcnt };
	ssize_t n;

	if (!u)
		return -ENOTCONN;
	if (u->family == AF_INET) {
		if (!v4) {
			udp_count(u, ST_TX_LOST);
			return -EAFNOSUPPORT;
		}
		memset(&dst.in, 0, sizeof(dst.in));
		dst.in.sin_family = AF_INET;
		memcpy(&dst.in.sin_addr, av->dst.in6.sin6_addr.s6_addr + 12, 4);
		dst.in.sin_port = htons(port);
		msg.msg_namelen = sizeof(dst.in);
	} else {
		dst.in6 = av->dst.in6;
		dst.in6.sin6_port = htons(port);
		msg.msg_namelen = sizeof(dst.in6);
	}
	msg.msg_control = cbuf.buf;
	msg.msg_controllen = tx_cmsgs(cbuf.buf, sizeof(cbuf.buf), av, v4);
	n = sendmsg(u->pl.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && errno == EINVAL) {
		/* The source GID's address went away, or the kernel refuses a
		 * control message: send it the plain way. */
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		n = sendmsg(u->pl.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	if (n >= 0) {
		udp_count(u, ST_TX_OK);
		atomic_fetch_add_explicit(&chan_stats.ud_sent, 1, memory_order_relaxed);
		return 0;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK) {
		sr_mutex_lock(&u->tx_lock);
		if (!u->tx_blocked && progress_mod(u->pg, &u->pl, EPOLLIN | EPOLLOUT) == 0)
			u->tx_blocked = true;
		sr_mutex_unlock(&u->tx_lock);
		/* Without the progress engine nobody would resume us. */
		if (u->tx_blocked)
			return -EAGAIN;
	}
	if (errno == EFAULT)
		return -EFAULT;
	udp_count(u, ST_TX_LOST);
	sr_dbg("UD: datagram to QP %#x lost: %s", dst_qpn, strerror(errno));
	return -errno;
}

/* ---- context ---------------------------------------------------------------- */

static void rx_opts(int fd, int family)
{
	int one = 1, sz = UDP_RCVBUF;

	/* Past net.core.rmem_max where allowed (CAP_NET_ADMIN): a burst of
	 * full-MTU datagrams from a sender that shares our CPUs outruns a
	 * receiver that has not been scheduled yet. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	/* IPv4 datagrams (also on a dual-stack socket) report through the
	 * IP options, IPv6 ones through the IPv6 options. */
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
	if (family == AF_INET6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
	}
}

/* The UDP twin of the context's TCP listener: same port, same families. */
int chan_udp_reserve(uint16_t port, int *family)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT,
				   .sin6_port = htons(port) };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd, off = 0, e;

	fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0) {
			*family = AF_INET6;
			return fd;
		}
		e = errno;
		close(fd);
		if (e == EADDRINUSE)
			return -e;
	}
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	*family = AF_INET;
	return fd;
}

int chan_udp_open(struct sr_context *ctx)
{
	struct sr_udp_ctx *u;
	int fd, ret = 0;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->udp)
		goto out;
	u = calloc(1, sizeof(*u));
	if (!u) {
		ret = -ENOMEM;
		goto out;
	}
	u->rbuf = malloc(UD_HDR_LEN + UD_MAX_PAYLOAD + 1);
	if (ctx->udp_fd >= 0) {
		fd = ctx->udp_fd;	/* reserved when the context opened */
		u->family = ctx->udp_family;
		ctx->udp_fd = -1;
	} else {
		fd = chan_udp_reserve(ctx->port, &u->family);
	}
	if (!u->rbuf || fd < 0) {
		ret = fd < 0 ? fd : -ENOMEM;
		free(u->rbuf);
		free(u);
		if (ret == -EADDRINUSE)
			sr_warn("UD: UDP port %u (this context's QPN prefix) is taken", ctx->port);
		goto out;
	}
	rx_opts(fd, u->family);
	u->ctx = ctx;
	u->pl.fd = fd;
	u->pl.on_event = udp_on_event;
	sr_mutex_init(&u->rx_lock);
	sr_mutex_init(&u->tx_lock);
	sr_list_init(&u->groups);
	ctx->udp = u;
out:
	pthread_mutex_unlock(&ctx->lock);
	if (ret)
		return ret;
	/* The progress engine outside ctx->lock: it takes that lock. */
	u = ctx->udp;
	sr_mutex_lock(&u->tx_lock);
	if (!u->pg) {
		u->pg = chan_progress(ctx);
		if (!u->pg || progress_add(u->pg, &u->pl, EPOLLIN)) {
			u->pg = NULL;
			ret = -ENOMEM;
		}
	}
	sr_mutex_unlock(&u->tx_lock);
	return ret;
}

static void group_free(struct sr_udp_ctx *u, struct udp_group *grp)
{
	if (u->pg)
		progress_del(u->pg, &grp->pl);
	close(grp->pl.fd);
	free(grp->qpns);
	free(grp);
}

void chan_udp_ctx_close(struct sr_context *ctx)
{
	struct sr_udp_ctx *u = ctx->udp;

	if (!u)
		return;
	for (;;) {
		struct udp_group *grp = NULL;

		sr_mutex_lock(&u->rx_lock);
		if (!sr_list_empty(&u->groups)) {
			grp = container_of(u->groups.next, struct udp_group, link);
			sr_list_del(&grp->link);
			grp->dead = true;
		}
		sr_mutex_unlock(&u->rx_lock);
		if (!grp)
			break;
		group_free(u, grp);
	}
	if (u->pg)
		progress_del(u->pg, &u->pl);
	close(u->pl.fd);
	{
		struct sr_udp_stats s;

		chan_udp_stats(ctx, &s);
		sr_dbg("UD context port %u: rx %llu, dropped: bad %llu, no QP %llu, state %llu, "
		       "Q_Key %llu, no WQE %llu; tx %llu, lost %llu", ctx->port,
		       (unsigned long long)s.rx_ok, (unsigned long long)s.rx_bad,
		       (unsigned long long)s.rx_no_qp, (unsigned long long)s.rx_state,
		       (unsigned long long)s.rx_qkey, (unsigned long long)s.rx_no_wqe,
		       (unsigned long long)s.tx_ok, (unsigned long long)s.tx_lost);
	}
	sr_mutex_destroy(&u->rx_lock);
	sr_mutex_destroy(&u->tx_lock);
	free(u->rbuf);
	free(u);
	ctx->udp = NULL;
}

void chan_udp_stats(struct sr_context *ctx, struct sr_udp_stats *out)
{
	struct sr_udp_ctx *u = ctx->udp;

	memset(out, 0, sizeof(*out));
	if (!u)
		return;
	out->rx_ok = atomic_load(&u->st[ST_RX_OK]);
	out->rx_bad = atomic_load(&u->st[ST_RX_BAD]);
	out->rx_no_qp = atomic_load(&u->st[ST_RX_NO_QP]);
	out->rx_state = atomic_load(&u->st[ST_RX_STATE]);
	out->rx_qkey = atomic_load(&u->st[ST_RX_QKEY]);
	out->rx_no_wqe = atomic_load(&u->st[ST_RX_NO_WQE]);
	out->tx_ok = atomic_load(&u->st[ST_TX_OK]);
	out->tx_lost = atomic_load(&u->st[ST_TX_LOST]);
}

/* ---- multicast -------------------------------------------------------------- */

bool chan_udp_mgid(const union ibv_gid *g, struct in6_addr *addr)
{
	/* ff0e::ffff:a.b.c.d: how RoCE (v1) writes an IPv4 group as a GID */
	static const uint8_t v4_in_v6[12] = { 0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *r = g->raw;

	memset(addr, 0, sizeof(*addr));
	if (ud_gid_v4mapped(r) || !memcmp(r, v4_in_v6, 12)) {
		if ((r[12] & 0xf0) != 0xe0)		/* 224.0.0.0/4 */
			return false;
		addr->s6_addr[10] = addr->s6_addr[11] = 0xff;
		memcpy(addr->s6_addr + 12, r + 12, 4);
		return true;
	}
	if (r[0] != 0xff)
		return false;
	memcpy(addr->s6_addr, r, 16);
	return true;
}

/* The interfaces a group is joined on: SOFTRNIC_UD_MCAST_IF (names, comma
 * separated), else every interface that has a GID. Returns how many. */
static int mcast_ifaces(unsigned int *idx, int max)
{
	const char *env = getenv("SOFTRNIC_UD_MCAST_IF");
	int n = 0;

	if (env && *env) {
		char buf[256], *save = NULL;

		snprintf(buf, sizeof(buf), "%s", env);
		for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
			unsigned int i = if_nametoindex(t);

			if (i)
				idx[n++] = i;
		}
		return n;
	}
	{
		struct sr_gid tbl[SR_GID_TBL_LEN];
		int ng = dev_query_gids(tbl, SR_GID_TBL_LEN);

		for (int i = 0; i < ng && n < max; i++) {
			bool seen = false;

			for (int j = 0; j < n; j++)
				seen |= idx[j] == tbl[i].ifindex;
			if (!seen && tbl[i].ifindex)
				idx[n++] = tbl[i].ifindex;
		}
	}
	return n;
}

/* A socket bound to the group's address on the multicast port, joined on
 * the chosen interfaces; shared with other sockets (other contexts and
 * processes) that are bound the same way, each getting every datagram. */
static int group_socket(const struct in6_addr *addr)
{
	unsigned int ifs[SR_GID_TBL_LEN];
	int nif = mcast_ifaces(ifs, SR_GID_TBL_LEN);
	bool v4 = ud_gid_v4mapped(addr->s6_addr);
	int fd, one = 1, zero = 0, joined = 0, e;

	fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	rx_opts(fd, v4 ? AF_INET : AF_INET6);
	if (v4) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(mcast_port()) };

		memcpy(&a.sin_addr, addr->s6_addr + 12, 4);
		/* Only the groups this socket joined (ip(7)). */
		setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			goto err;
		for (int i = 0; i < nif; i++) {
			struct ip_mreqn m = { .imr_ifindex = (int)ifs[i] };

			memcpy(&m.imr_multiaddr, addr->s6_addr + 12, 4);
			joined += setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)) == 0;
		}
	} else {
		struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = *addr,
					  .sin6_port = htons(mcast_port()) };

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof(zero));
		if ((IN6_IS_ADDR_MC_LINKLOCAL(addr) || IN6_IS_ADDR_MC_NODELOCAL(addr)) && nif)
			a.sin6_scope_id = ifs[0];
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			goto err;
		for (int i = 0; i < nif; i++) {
			struct ipv6_mreq m = { .ipv6mr_multiaddr = *addr, .ipv6mr_interface = ifs[i] };

			joined += setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &m, sizeof(m)) == 0;
		}
	}
	if (!joined) {
		errno = EADDRNOTAVAIL;
		goto err;
	}
	return fd;
err:
	e = errno;
	close(fd);
	return -e;
}

int chan_udp_attach(struct sr_qp *qp, const union ibv_gid *mgid)
{
	struct sr_context *ctx = qp->ctx;
	struct sr_udp_ctx *u = ctx->udp;
	uint32_t qpn = qp->ibqp.qp_base.qp_num;
	struct udp_group *grp = NULL;
	struct in6_addr addr;
	struct sr_list *pos, *tmp;
	int ret = 0, fd;

	if (!chan_udp_mgid(mgid, &addr))
		return -EINVAL;
	if (!u || !u->pg)
		return -ENOMEM;
	sr_mutex_lock(&u->rx_lock);
	sr_list_for_each_safe(pos, tmp, &u->groups) {
		struct udp_group *g = container_of(pos, struct udp_group, link);

		if (!memcmp(&g->addr, &addr, sizeof(addr)))
			grp = g;
	}
	if (!grp) {
		fd = group_socket(&addr);
		if (fd < 0) {
			ret = fd;
			goto out;
		}
		grp = calloc(1, sizeof(*grp));
		if (!grp) {
			close(fd);
			ret = -ENOMEM;
			goto out;
		}
		grp->addr = addr;
		grp->u = u;
		grp->pl.fd = fd;
		grp->pl.on_event = group_on_event;
		sr_list_add_tail(&u->groups, &grp->link);
		/* Registered under rx_lock: its handler waits for the lock. */
		if (progress_add(u->pg, &grp->pl, EPOLLIN)) {
			sr_list_del(&grp->link);
			close(fd);
			free(grp);
			ret = -ENOMEM;
			goto out;
		}
	}
	for (uint32_t i = 0; i < grp->nqp; i++)
		if (grp->qpns[i] == qpn)
			goto out;		/* attached already: not an error */
	if (grp->nqp == grp->cap) {
		uint32_t ncap = grp->cap ? grp->cap * 2 : 4;
		uint32_t *n = realloc(grp->qpns, ncap * sizeof(*n));

		if (!n) {
			ret = -ENOMEM;
			goto out;
		}
		grp->qpns = n;
		grp->cap = ncap;
	}
	grp->qpns[grp->nqp++] = qpn;
	sr_dbg("UD QP %#x attached to a group (%u QPs here)", qpn, grp->nqp);
out:
	sr_mutex_unlock(&u->rx_lock);
	return ret;
}

/* Remove qpn from the group matching addr (NULL: every group). Groups
 * left empty are unlisted into *gone for the caller to free outside the
 * lock (progress_del waits for a handler that may wait for rx_lock). */
static int detach_locked(struct sr_udp_ctx *u, const struct in6_addr *addr, uint32_t qpn,
			 struct sr_list *gone)
{
	struct sr_list *pos, *tmp;
	int ret = -ENOENT;

	sr_list_for_each_safe(pos, tmp, &u->groups) {
		struct udp_group *g = container_of(pos, struct udp_group, link);

		if (addr && memcmp(&g->addr, addr, sizeof(*addr)))
			continue;
		for (uint32_t i = 0; i < g->nqp; i++) {
			if (g->qpns[i] != qpn)
				continue;
			g->qpns[i] = g->qpns[--g->nqp];
			ret = 0;
			break;
		}
		if (!g->nqp) {
			sr_list_del(&g->link);
			g->dead = true;
			sr_list_add_tail(gone, &g->link);
		}
	}
	return ret;
}

static int udp_detach(struct sr_qp *qp, const struct in6_addr *addr)
{
	struct sr_udp_ctx *u = qp->ctx->udp;
	struct sr_list gone;
	int ret;

	if (!u)
		return -ENOENT;
	sr_list_init(&gone);
	sr_mutex_lock(&u->rx_lock);
	ret = detach_locked(u, addr, qp->ibqp.qp_base.qp_num, &gone);
	sr_mutex_unlock(&u->rx_lock);
	while (!sr_list_empty(&gone)) {
		struct udp_group *g = container_of(gone.next, struct udp_group, link);

		sr_list_del(&g->link);
		group_free(u, g);
	}
	return ret;
}

int chan_udp_detach(struct sr_qp *qp, const union ibv_gid *mgid)
{
	struct in6_addr addr;

	if (!chan_udp_mgid(mgid, &addr))
		return -EINVAL;
	return udp_detach(qp, &addr);
}

void chan_udp_detach_all(struct sr_qp *qp)
{
	udp_detach(qp, NULL);
}
