/* Addresses: rdma_bind_addr, rdma_resolve_addr/route, rdma_getaddrinfo,
 * rdma_get_devices, rdma_set_option, rdma_get_src/dst_port.
 *
 * An id's port is a real socket's port (DESIGN.md decision 4): binding an
 * RDMA_PS_TCP id binds a TCP socket, which later listens or connects, so
 * the port space is the host's and two processes cannot both take one.
 * RDMA_PS_UDP ids bind a UDP socket. The route to a destination is what
 * the kernel would use for a UDP datagram to it (connect + getsockname);
 * softrnic0's GIDs are the host's addresses, so any local source address
 * is on it.
 */
#include "cm/cm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

socklen_t cm_addr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET: return sizeof(struct sockaddr_in);
	case AF_INET6: return sizeof(struct sockaddr_in6);
	default: return 0;
	}
}

bool cm_addr_multicast(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

bool cm_addr_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return true;
}

static uint16_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

/* softrnic0's GID for an address: the address itself, IPv4 mapped (as
 * RoCE v2 GIDs are, DESIGN.md decision 2). */
void cm_fill_gid(union ibv_gid *gid, const struct sockaddr *sa)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

/* The id is on softrnic0 now: verbs, port and the default PD, and the
 * GIDs of its addresses. Caller holds cm.lock. */
void cm_set_device_locked(struct cm_id *cid)
{
	cid->id.verbs = cm.verbs;
	cid->id.port_num = 1;
	cm_pd_get_locked(cid);
	cm_fill_gid(&cid->id.route.addr.addr.ibaddr.sgid, &cid->id.route.addr.src_addr);
	cm_fill_gid(&cid->id.route.addr.addr.ibaddr.dgid, &cid->id.route.addr.dst_addr);
	cid->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
}

static bool addr_same(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* rdma_cm refuses a second bind to a port an id of the same port space
 * holds unless both asked for REUSEADDR; our sockets all carry
 * SO_REUSEADDR (an rdma_cm port has no TIME_WAIT), so check that here,
 * for this process. Caller holds cm.lock. */
static bool port_taken_locked(struct cm_id *me, const struct sockaddr *sa)
{
	struct sr_list *pos, *tmp;
	uint16_t port = addr_port(sa);

	if (!port)
		return false;
	sr_list_for_each_safe(pos, tmp, &cm.ids) {
		struct cm_id *c = container_of(pos, struct cm_id, link);
		const struct sockaddr *o = &c->id.route.addr.src_addr;

		if (c == me || !c->bound || c->state == CM_DEAD || c->id.ps != me->id.ps ||
		    addr_port(o) != port)
			continue;
		if (me->reuseaddr && c->reuseaddr && c->state != CM_LISTEN)
			continue;
		/* As the kernel's cma_check_port: two wildcards, or the same
		 * address; a wildcard beside a specific address is fine (an
		 * accepted connection keeps its listener's port). */
		if (o->sa_family == sa->sa_family &&
		    ((cm_addr_any(o) && cm_addr_any(sa)) || addr_same(o, sa)))
			return true;
	}
	return false;
}

static void apply_tos(int fd, int family, int tos)
{
	if (tos < 0)
		return;
	if (family == AF_INET)
		setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	else
		setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos));
}

int cm_bind(struct cm_id *cid, const struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	socklen_t len = cm_addr_len(addr), sl = sizeof(ss);
	/* by QP type, as listen and connect go: an rdma_create_ep id may be
	 * UD on RDMA_PS_IB */
	int type = cid->id.qp_type == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
	int fd, one = 1, ret;

	if (!len)
		return addr->sa_family == AF_IB ? -EAFNOSUPPORT : -EINVAL;
	pthread_mutex_lock(&cm.lock);
	if (cid->bound || cid->state != CM_IDLE) {
		pthread_mutex_unlock(&cm.lock);
		return -EINVAL;
	}
	if (port_taken_locked(cid, addr)) {
		pthread_mutex_unlock(&cm.lock);
		return -EADDRINUSE;
	}
	fd = socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		pthread_mutex_unlock(&cm.lock);
		return ret;
	}
	/* A UDP port shared by SO_REUSEADDR would split the datagrams
	 * between its sockets: datagram ids share only when asked to. */
	if (type == SOCK_STREAM || cid->reuseaddr)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6) {
		int v6only = cid->afonly > 0;

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
	}
	apply_tos(fd, addr->sa_family, cid->tos);
	if (bind(fd, addr, len) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		ret = errno == EINVAL ? -EADDRINUSE : -errno;
		close(fd);
		pthread_mutex_unlock(&cm.lock);
		return ret;
	}
	cid->fd = fd;
	cid->bound = true;
	cid->state = CM_BOUND;
	memcpy(&cid->id.route.addr.src_storage, &ss, sl);
	/* Bound to one of softrnic0's addresses: the id is on the device. */
	if (!cm_addr_any(addr))
		cm_set_device_locked(cid);
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

SR_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return cm_ret(-EINVAL);
	return cm_ret(cm_bind(to_cm(id), addr));
}

/* The local address the kernel would send from towards dst. */
int cm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage d;
	int ret = 0;

	if (fd < 0)
		return -errno;
	memcpy(&d, dst, cm_addr_len(dst));
	/* any port will do for a route lookup */
	if (d.ss_family == AF_INET && !((struct sockaddr_in *)&d)->sin_port)
		((struct sockaddr_in *)&d)->sin_port = htons(9);
	if (d.ss_family == AF_INET6 && !((struct sockaddr_in6 *)&d)->sin6_port)
		((struct sockaddr_in6 *)&d)->sin6_port = htons(9);
	if (connect(fd, (struct sockaddr *)&d, cm_addr_len(dst)) < 0 ||
	    getsockname(fd, (struct sockaddr *)src, &len) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

SR_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	bool sync_id;
	struct sockaddr_storage src, any;
	struct cm_id *cid;
	socklen_t dlen;
	int ret, status;

	if (!id || !dst_addr)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	dlen = cm_addr_len(dst_addr);
	if (!dlen)
		return cm_ret(dst_addr->sa_family == AF_IB ? -EAFNOSUPPORT : -EINVAL);
	if (!cid->bound) {
		if (src_addr && src_addr->sa_family) {
			ret = cm_bind(cid, src_addr);
		} else {
			memset(&any, 0, sizeof(any));
			any.ss_family = dst_addr->sa_family;
			ret = cm_bind(cid, (struct sockaddr *)&any);
		}
		if (ret)
			return cm_ret(ret);
	}
	pthread_mutex_lock(&cm.lock);
	if (cid->state != CM_BOUND && cid->state != CM_ADDR_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	if (id->route.addr.src_addr.sa_family != dst_addr->sa_family) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	memcpy(&id->route.addr.dst_storage, dst_addr, dlen);
	/* A multicast destination (mckey) needs no route from an id bound
	 * to an address: the group is joined on that address's interface. */
	if (cm_addr_multicast(dst_addr) && !cm_addr_any(&id->route.addr.src_addr)) {
		memcpy(&src, &id->route.addr.src_storage, sizeof(src));
		status = 0;
	} else {
		status = cm_route_src(dst_addr, &src);
	}
	if (!status) {
		/* A wildcard bind takes the source the route gives it. */
		if (cm_addr_any(&id->route.addr.src_addr)) {
			uint16_t port = addr_port(&id->route.addr.src_addr);

			memcpy(&id->route.addr.src_storage, &src, cm_addr_len((struct sockaddr *)&src));
			if (src.ss_family == AF_INET)
				id->route.addr.src_sin.sin_port = htons(port);
			else
				id->route.addr.src_sin6.sin6_port = htons(port);
		}
		cid->state = CM_ADDR_RESOLVED;
		cm_set_device_locked(cid);
		ret = cm_event_push_locked(cid, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, NULL, 0);
	} else {
		/* No route: the kernel would report it after its ARP/ND
		 * attempt; there is nothing to wait for here. */
		ret = cm_event_push_locked(cid, RDMA_CM_EVENT_ADDR_ERROR, status, NULL, NULL, 0);
	}
	sync_id = cid->sync;
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return cm_ret(ret);
	return cm_ret(cm_complete(cid, sync_id));
}

SR_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	bool sync_id;
	struct cm_id *cid;
	int ret;

	if (!id)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	pthread_mutex_lock(&cm.lock);
	if (cid->state != CM_ADDR_RESOLVED && cid->state != CM_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return cm_ret(-EINVAL);
	}
	cid->state = CM_ROUTE_RESOLVED;
	if (!cm.iwarp) {
		/* RoCE: one path record, as the kernel reports for IP routes */
		struct ibv_sa_path_rec *p = &cid->path;

		memset(p, 0, sizeof(*p));
		p->sgid = id->route.addr.addr.ibaddr.sgid;
		p->dgid = id->route.addr.addr.ibaddr.dgid;
		p->pkey = htons(0xffff);
		p->hop_limit = 64;
		p->reversible = 1;
		p->numb_path = 1;
		p->mtu_selector = 2;
		p->mtu = IBV_MTU_1024;
		p->rate_selector = 2;
		p->rate = 3;
		p->packet_life_time_selector = 2;
		p->packet_life_time = 14;
		p->traffic_class = cid->tos > 0 ? (uint8_t)cid->tos : 0;
		id->route.path_rec = p;
		id->route.num_paths = 1;
	}
	ret = cm_event_push_locked(cid, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL, 0);
	sync_id = cid->sync;
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return cm_ret(ret);
	return cm_ret(cm_complete(cid, sync_id));
}

/* ---- rdma_getaddrinfo(3) ------------------------------------------------- */

static int gai_errno(int e)
{
	switch (e) {
	case EAI_MEMORY: return -ENOMEM;
	case EAI_SYSTEM: return -errno;
	case EAI_FAMILY: return -EAFNOSUPPORT;
	default: return -EADDRNOTAVAIL;
	}
}

static void *dup_mem(const void *p, size_t n)
{
	void *q = malloc(n);

	if (q)
		memcpy(q, p, n);
	return q;
}

SR_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* No node or service: the addresses in the hints are the answer (as
 * rdma-core does; libfabric's verbs provider calls it so). */
static int addrinfo_from_hints(const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *r;

	if (!hints || (!hints->ai_src_len && !hints->ai_dst_len))
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->ai_flags = hints->ai_flags;
	r->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
			   hints->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	r->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type :
			r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (hints->ai_src_len && hints->ai_src_addr) {
		r->ai_src_addr = dup_mem(hints->ai_src_addr, hints->ai_src_len);
		r->ai_src_len = hints->ai_src_len;
		r->ai_family = hints->ai_src_addr->sa_family;
	}
	if (hints->ai_dst_len && hints->ai_dst_addr) {
		r->ai_dst_addr = dup_mem(hints->ai_dst_addr, hints->ai_dst_len);
		r->ai_dst_len = hints->ai_dst_len;
		r->ai_family = hints->ai_dst_addr->sa_family;
	}
	if ((r->ai_src_len && !r->ai_src_addr) || (r->ai_dst_len && !r->ai_dst_addr)) {
		rdma_freeaddrinfo(r);
		return -ENOMEM;
	}
	*res = r;
	return 0;
}

SR_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *head = NULL, **tail = &head;
	struct addrinfo h = { 0 }, *ai = NULL, *a;
	int ps = RDMA_PS_TCP, qpt = IBV_QPT_RC, flags = 0, ret;

	if (!res)
		return cm_ret(-EINVAL);
	if (!node && !service)
		return cm_ret(addrinfo_from_hints(hints, res));
	if (hints) {
		flags = hints->ai_flags;
		if (hints->ai_port_space)
			ps = hints->ai_port_space;
		else if (hints->ai_qp_type == IBV_QPT_UD)
			ps = RDMA_PS_UDP;
		if (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB)
			qpt = IBV_QPT_UD;
		if (hints->ai_qp_type)
			qpt = hints->ai_qp_type;
		h.ai_family = hints->ai_family == AF_IB ? AF_UNSPEC : hints->ai_family;
	}
	h.ai_socktype = qpt == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
	if (flags & RAI_PASSIVE)
		h.ai_flags |= AI_PASSIVE;
	if (flags & RAI_NUMERICHOST)
		h.ai_flags |= AI_NUMERICHOST;
	if (!(flags & RAI_PASSIVE))
		h.ai_flags |= AI_CANONNAME;
	ret = getaddrinfo(node, service, &h, &ai);
	if (ret)
		return cm_ret(gai_errno(ret));
	for (a = ai; a; a = a->ai_next) {
		struct rdma_addrinfo *r;

		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		r = calloc(1, sizeof(*r));
		if (!r)
			goto nomem;
		*tail = r;
		tail = &r->ai_next;
		r->ai_flags = flags;
		r->ai_family = a->ai_family;
		r->ai_qp_type = qpt;
		r->ai_port_space = ps;
		if (flags & RAI_PASSIVE) {
			r->ai_src_addr = dup_mem(a->ai_addr, a->ai_addrlen);
			r->ai_src_len = a->ai_addrlen;
			if (!r->ai_src_addr)
				goto nomem;
		} else {
			r->ai_dst_addr = dup_mem(a->ai_addr, a->ai_addrlen);
			r->ai_dst_len = a->ai_addrlen;
			if (!r->ai_dst_addr)
				goto nomem;
			if (a->ai_canonname)
				r->ai_dst_canonname = strdup(a->ai_canonname);
			/* The source address a hint named goes along. */
			if (hints && hints->ai_src_addr && hints->ai_src_len) {
				r->ai_src_addr = dup_mem(hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
		/* rdma-core's getaddrinfo returns one entry per address,
		 * socktype fixed: the first of each family is enough. */
		break;
	}
	freeaddrinfo(ai);
	if (!head)
		return cm_ret(-EADDRNOTAVAIL);
	*res = head;
	return 0;
nomem:
	freeaddrinfo(ai);
	rdma_freeaddrinfo(head);
	return cm_ret(-ENOMEM);
}

/* ---- devices, ports, options ------------------------------------------- */

SR_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list;
	int ret = cm_init();

	if (ret) {
		if (num_devices)
			*num_devices = 0;
		errno = -ret;
		return NULL;
	}
	list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = cm.verbs;
	if (num_devices)
		*num_devices = 1;
	return list;
}

SR_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

SR_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;

	return sa->sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port :
	       sa->sa_family == AF_INET ? id->route.addr.src_sin.sin_port : 0;
}

SR_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;

	return sa->sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port :
	       sa->sa_family == AF_INET ? id->route.addr.dst_sin.sin_port : 0;
}

/* rdma_set_option(3); lengths and names checked as the kernel's ucma does
 * (wrong size EINVAL, unknown name or level ENOSYS). */
SR_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname,
			      void *optval, size_t optlen)
{
	struct cm_id *cid;
	int ret = 0;

	if (!id || !optval)
		return cm_ret(-EINVAL);
	cid = to_cm(id);
	if (level == RDMA_OPTION_IB)
		return cm_ret(optname == RDMA_OPTION_IB_PATH ? -EINVAL : -ENOSYS);
	if (level != RDMA_OPTION_ID)
		return cm_ret(-ENOSYS);
	pthread_mutex_lock(&cm.lock);
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (optlen != sizeof(uint8_t)) {
			ret = -EINVAL;
			break;
		}
		cid->tos = *(uint8_t *)optval;
		if (cid->fd >= 0)
			apply_tos(cid->fd, id->route.addr.src_addr.sa_family, cid->tos);
		break;
	case RDMA_OPTION_ID_REUSEADDR:
		if (optlen != sizeof(int)) {
			ret = -EINVAL;
			break;
		}
		/* like the kernel: only before the id is bound */
		if (cid->bound)
			ret = -EINVAL;
		else
			cid->reuseaddr = *(int *)optval != 0;
		break;
	case RDMA_OPTION_ID_AFONLY:
		if (optlen != sizeof(int)) {
			ret = -EINVAL;
			break;
		}
		if (cid->bound)
			ret = -EINVAL;
		else
			cid->afonly = *(int *)optval != 0;
		break;
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (optlen != sizeof(uint8_t)) {
			ret = -EINVAL;
			break;
		}
		cid->ack_timeout = *(uint8_t *)optval;
		break;
	default:
		ret = -ENOSYS;
	}
	pthread_mutex_unlock(&cm.lock);
	return cm_ret(ret);
}
