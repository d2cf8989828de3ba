/* Connection manager, one process: event channels, ids, binding, options,
 * address and route resolution (and their errors), devices, event names,
 * rdma_getaddrinfo, QPs made by rdma_create_qp(_ex), private-data limits,
 * and a connection between two ids of one process.
 *
 * Semantics from rdma_cm(7), rdma_create_event_channel(3),
 * rdma_get_cm_event(3), rdma_create_id(3), rdma_bind_addr(3),
 * rdma_resolve_addr(3), rdma_set_option(3), rdma_create_qp(3),
 * rdma_getaddrinfo(3), rdma_get_devices(3) and ABI.md §4.
 */
#include "cm_common.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>

/* An event channel is a pollable descriptor; with O_NONBLOCK an empty
 * channel answers -1/EAGAIN, and an event makes the fd readable. */
static void sub_channel_nonblock(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev = (void *)0x1;
	struct rdma_cm_id *id;
	struct cm_addr a;

	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(ch->fd >= 0, "channel fd %d", ch->fd);
	CHECK(!cm_poll(ch, 50), "a new channel's fd is readable");
	cm_set_nonblock(ch);
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "rdma_get_cm_event on an empty O_NONBLOCK channel: want -1/EAGAIN, "
	      "got errno %d (%s)", errno, strerror(errno));

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0,
	      "rdma_create_id: %s", strerror(errno));
	cm_addr_make(&a, "127.0.0.1", 9);
	CHECK(rdma_resolve_addr(id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "rdma_resolve_addr: %s", strerror(errno));
	/* the event arrives in the background; poll says when */
	CHECK(cm_poll(ch, CM_EVENT_MS), "no event after rdma_resolve_addr");
	ev = NULL;
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev,
	      "rdma_get_cm_event after poll: %s", strerror(errno));
	CHECK(ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id &&
		      ev->status == 0,
	      "got %s status %d", rdma_event_str(ev->event), ev->status);
	cm_ack(ev);
	/* consumed: empty again */
	CHECK(!cm_poll(ch, 50), "fd still readable after the only event");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "second rdma_get_cm_event: want -1/EAGAIN, got errno %d", errno);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
}

/* rdma_create_id: ps and qp_type, context, channel; NULL channel = a
 * synchronous id. */
static void sub_create_id(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *tcp, *udp, *sync;
	int ctx;

	CHECK(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(ch, &tcp, &ctx, RDMA_PS_TCP) == 0,
	      "create PS_TCP: %s", strerror(errno));
	CHECK(tcp->ps == RDMA_PS_TCP && tcp->qp_type == IBV_QPT_RC,
	      "PS_TCP id: ps %#x qp_type %d", tcp->ps, tcp->qp_type);
	CHECK(tcp->context == &ctx && tcp->channel == ch,
	      "context/channel not kept");
	CHECK(!tcp->qp, "new id has a QP");
	CHECK(rdma_create_id(ch, &udp, NULL, RDMA_PS_UDP) == 0,
	      "create PS_UDP: %s", strerror(errno));
	CHECK(udp->ps == RDMA_PS_UDP && udp->qp_type == IBV_QPT_UD,
	      "PS_UDP id: ps %#x qp_type %d", udp->ps, udp->qp_type);
	CHECK(rdma_create_id(NULL, &sync, NULL, RDMA_PS_TCP) == 0,
	      "create synchronous id: %s", strerror(errno));
	CHECK(sync->ps == RDMA_PS_TCP, "sync id ps %#x", sync->ps);

	/* a synchronous resolve returns once done, the event kept in the id */
	struct cm_addr a;
	cm_addr_make(&a, "127.0.0.1", 9);
	CHECK(rdma_resolve_addr(sync, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "sync rdma_resolve_addr: %s", strerror(errno));
	CHECK(sync->verbs, "sync id: verbs not set when resolve returned");
	CHECK(rdma_resolve_route(sync, CM_RESOLVE_MS) == 0,
	      "sync rdma_resolve_route: %s", strerror(errno));

	CHECK(rdma_destroy_id(sync) == 0, "destroy sync id");
	CHECK(rdma_destroy_id(udp) == 0, "destroy udp id");
	CHECK(rdma_destroy_id(tcp) == 0, "destroy tcp id");
	cm_expect_none(ch, 50, "channel after destroying its ids");
	rdma_destroy_event_channel(ch);
}

static struct rdma_cm_id *new_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0,
	      "rdma_create_id: %s", strerror(errno));
	return id;
}

static int bind_to(struct rdma_cm_id *id, const char *addr, uint16_t port)
{
	struct cm_addr a;

	cm_addr_make(&a, addr, port);
	return rdma_bind_addr(id, cm_sa(&a));
}

/* rdma_bind_addr: port 0 gets a real port; the local address reads back;
 * a local IP sets verbs/port_num; ANY and ::1; EADDRINUSE; a foreign
 * address is refused. */
static void sub_bind(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	char b[96];

	CHECK(ch, "rdma_create_event_channel");
	struct rdma_cm_id *id = new_id(ch);
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind 127.0.0.1:0: %s",
	      strerror(errno));
	uint16_t port = ntohs(rdma_get_src_port(id));
	CHECK(port != 0, "rdma_get_src_port after binding port 0 is 0");
	struct sockaddr *sa = rdma_get_local_addr(id);
	CHECK(sa->sa_family == AF_INET && cm_sa_port(sa) == port &&
		      ((struct sockaddr_in *)sa)->sin_addr.s_addr ==
			      htonl(INADDR_LOOPBACK),
	      "local address %s, want 127.0.0.1 port %u",
	      cm_sa_str(sa, b, sizeof(b)), port);
	CHECK(id->verbs, "bound to a local IP but id->verbs is NULL");
	CHECK(!strcmp(ibv_get_device_name(id->verbs->device),
		      test_device_name()),
	      "id->verbs is %s", ibv_get_device_name(id->verbs->device));
	CHECK(id->port_num == 1, "port_num %u", id->port_num);
	CHECK(id->pd, "bound to a local IP but id->pd is NULL");

	/* same port again: in use (neither id asked for REUSEADDR) */
	struct rdma_cm_id *id2 = new_id(ch);
	errno = 0;
	CHECK(bind_to(id2, "127.0.0.1", port) == -1 && errno == EADDRINUSE,
	      "second bind to 127.0.0.1:%u: want -1/EADDRINUSE, got errno %d",
	      port, errno);
	/* a bound id cannot be bound again */
	CHECK(bind_to(id, "127.0.0.1", 0) == -1, "rebinding a bound id worked");
	CHECK(rdma_destroy_id(id2) == 0, "destroy");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	/* the port is free again once its id is gone */
	id = new_id(ch);
	CHECK(bind_to(id, "127.0.0.1", port) == 0,
	      "bind to %u after its id was destroyed: %s", port,
	      strerror(errno));
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	id = new_id(ch);
	CHECK(bind_to(id, "0.0.0.0", 0) == 0, "bind INADDR_ANY: %s",
	      strerror(errno));
	CHECK(rdma_get_src_port(id) != 0, "INADDR_ANY: no port");
	CHECK(rdma_get_dst_port(id) == 0, "unconnected id has a dst port");
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	id = new_id(ch);
	errno = 0;
	CHECK(bind_to(id, "198.18.255.254", 0) == -1 &&
		      errno == EADDRNOTAVAIL,
	      "bind to an address this host does not have: want "
	      "-1/EADDRNOTAVAIL, got errno %d (%s)", errno, strerror(errno));
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	cm_expect_none(ch, 20, "bind makes no events");
	rdma_destroy_event_channel(ch);
}

static void sub_bind_ipv6(void)
{
	struct rdma_event_channel *ch;
	char b[96];

	cm_require_addr("::1");
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	struct rdma_cm_id *id = new_id(ch);
	CHECK(bind_to(id, "::1", 0) == 0, "bind [::1]:0: %s", strerror(errno));
	uint16_t port = ntohs(rdma_get_src_port(id));
	struct sockaddr *sa = rdma_get_local_addr(id);
	CHECK(port && sa->sa_family == AF_INET6 && cm_sa_port(sa) == port &&
		      IN6_IS_ADDR_LOOPBACK(
			      &((struct sockaddr_in6 *)sa)->sin6_addr),
	      "local address %s", cm_sa_str(sa, b, sizeof(b)));
	CHECK(id->verbs, "bound to ::1 but id->verbs is NULL");
	CHECK(rdma_listen(id, 4) == 0, "listen on ::1: %s", strerror(errno));
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	id = new_id(ch);
	CHECK(bind_to(id, "::", 0) == 0, "bind [::]:0: %s", strerror(errno));
	CHECK(rdma_get_src_port(id) != 0, "[::]: no port");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void set_int(struct rdma_cm_id *id, int opt, int v, const char *name)
{
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, opt, &v, sizeof(v)) == 0,
	      "rdma_set_option(%s=%d): %s", name, v, strerror(errno));
}

/* rdma_set_option: TOS, ACK_TIMEOUT (uint8_t), REUSEADDR and AFONLY (int,
 * before binding), with the binding behaviour they promise. */
static void sub_options(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	uint8_t u8;

	CHECK(ch, "rdma_create_event_channel");
	struct rdma_cm_id *id = new_id(ch);
	u8 = 32;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &u8,
			      sizeof(u8)) == 0,
	      "TOS: %s", strerror(errno));
	u8 = 14;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			      &u8, sizeof(u8)) == 0,
	      "ACK_TIMEOUT: %s", strerror(errno));
	int v = 1;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, 0x7777, &v, sizeof(v)) == -1,
	      "an unknown option name was accepted");
	CHECK(rdma_set_option(id, 0x7777, RDMA_OPTION_ID_TOS, &u8,
			      sizeof(u8)) == -1,
	      "an unknown option level was accepted");
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v,
			      1) == -1 && errno == EINVAL,
	      "REUSEADDR with optlen 1: want -1/EINVAL, got errno %d", errno);

	/* REUSEADDR on both ids: two non-listening ids share a port */
	set_int(id, RDMA_OPTION_ID_REUSEADDR, 1, "REUSEADDR");
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind: %s", strerror(errno));
	uint16_t port = ntohs(rdma_get_src_port(id));
	struct rdma_cm_id *id2 = new_id(ch);
	set_int(id2, RDMA_OPTION_ID_REUSEADDR, 1, "REUSEADDR");
	CHECK(bind_to(id2, "127.0.0.1", port) == 0,
	      "REUSEADDR on both: second bind to %u: %s", port,
	      strerror(errno));
	CHECK(rdma_destroy_id(id2) == 0, "destroy");
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* AFONLY: [::]:P v6-only leaves 0.0.0.0:P free */
	int have6 = 1;
	struct cm_addr a6;
	cm_addr_make(&a6, "::", 0);
	int s6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s6 < 0 || bind(s6, cm_sa(&a6), a6.len) != 0)
		have6 = 0;
	if (s6 >= 0)
		close(s6);
	if (have6) {
		id = new_id(ch);
		set_int(id, RDMA_OPTION_ID_AFONLY, 1, "AFONLY");
		CHECK(bind_to(id, "::", 0) == 0, "bind [::]:0: %s",
		      strerror(errno));
		CHECK(rdma_listen(id, 2) == 0, "listen: %s", strerror(errno));
		port = ntohs(rdma_get_src_port(id));
		id2 = new_id(ch);
		CHECK(bind_to(id2, "0.0.0.0", port) == 0,
		      "AFONLY [::]:%u, then 0.0.0.0:%u: %s", port, port,
		      strerror(errno));
		CHECK(rdma_listen(id2, 2) == 0, "listen: %s", strerror(errno));
		CHECK(rdma_destroy_id(id2) == 0, "destroy");
		CHECK(rdma_destroy_id(id) == 0, "destroy");
		/* AFONLY 0: [::]:P also covers IPv4, so 0.0.0.0:P is taken */
		id = new_id(ch);
		set_int(id, RDMA_OPTION_ID_AFONLY, 0, "AFONLY");
		CHECK(bind_to(id, "::", 0) == 0, "bind [::]:0: %s",
		      strerror(errno));
		CHECK(rdma_listen(id, 2) == 0, "listen: %s", strerror(errno));
		port = ntohs(rdma_get_src_port(id));
		id2 = new_id(ch);
		errno = 0;
		CHECK(bind_to(id2, "0.0.0.0", port) == -1 &&
			      errno == EADDRINUSE,
		      "dual-stack [::]:%u then 0.0.0.0:%u: want "
		      "-1/EADDRINUSE, got errno %d",
		      port, port, errno);
		CHECK(rdma_destroy_id(id2) == 0, "destroy");
		CHECK(rdma_destroy_id(id) == 0, "destroy");
	} else {
		NOTE("no IPv6: AFONLY binding behaviour not checked");
	}
	rdma_destroy_event_channel(ch);
}

static void resolve_ok(const char *addr)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct cm_addr a;
	char b[96];

	CHECK(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(ch, &id, (void *)0x77, RDMA_PS_TCP) == 0,
	      "rdma_create_id");
	cm_addr_make(&a, addr, 4791);
	CHECK(rdma_resolve_addr(id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "rdma_resolve_addr %s: %s", addr, strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "ADDR_RESOLVED");
	CHECK(ev->id == id && ev->listen_id == NULL,
	      "ADDR_RESOLVED: id %p listen_id %p", (void *)ev->id,
	      (void *)ev->listen_id);
	CHECK(ev->id->context == (void *)0x77, "event id context");
	cm_ack(ev);
	CHECK(id->verbs && !strcmp(ibv_get_device_name(id->verbs->device),
				   test_device_name()),
	      "after ADDR_RESOLVED: verbs %p", (void *)id->verbs);
	CHECK(id->port_num == 1, "port_num %u", id->port_num);
	CHECK(id->pd && id->pd->context == id->verbs,
	      "after ADDR_RESOLVED: pd %p", (void *)id->pd);
	struct sockaddr *dst = rdma_get_peer_addr(id);
	CHECK(dst->sa_family == a.ss.ss_family && cm_sa_port(dst) == 4791,
	      "dst address %s", cm_sa_str(dst, b, sizeof(b)));
	CHECK(ntohs(rdma_get_dst_port(id)) == 4791, "dst port %u",
	      ntohs(rdma_get_dst_port(id)));
	struct sockaddr *src = rdma_get_local_addr(id);
	CHECK(src->sa_family == a.ss.ss_family,
	      "src address family %d after resolving %s", src->sa_family,
	      addr);
	CHECK(rdma_resolve_route(id, CM_RESOLVE_MS) == 0,
	      "rdma_resolve_route: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, "ROUTE_RESOLVED");
	CHECK(ev->id == id, "ROUTE_RESOLVED for another id");
	cm_ack(ev);
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* resolve from an explicit source address */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	struct cm_addr s;
	cm_addr_make(&s, addr, 0);
	CHECK(rdma_resolve_addr(id, cm_sa(&s), cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "rdma_resolve_addr with src: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED (src)");
	CHECK(id->verbs, "verbs");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_resolve_v4(void)
{
	resolve_ok("127.0.0.1");
}

static void sub_resolve_v6(void)
{
	cm_require_addr("::1");
	resolve_ok("::1");
}

/* In a fresh network namespace with only lo up there is no route to
 * 198.18.0.1: rdma_resolve_addr either fails at once or, as rdma-core
 * does, reports ADDR_ERROR with a negative errno, within its timeout. */
static void sub_resolve_unreachable(void)
{
	if (unshare(CLONE_NEWNET) != 0)
		SKIP("unshare(CLONE_NEWNET): %s (needs root)", strerror(errno));
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = { 0 };

	CHECK(s >= 0, "socket");
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	CHECK(ioctl(s, SIOCGIFFLAGS, &ifr) == 0, "SIOCGIFFLAGS lo");
	ifr.ifr_flags |= IFF_UP;
	CHECK(ioctl(s, SIOCSIFFLAGS, &ifr) == 0, "SIOCSIFFLAGS lo up: %s",
	      strerror(errno));
	close(s);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct cm_addr a;

	CHECK(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	cm_addr_make(&a, "198.18.0.1", 4791);
	uint64_t t0 = now_ms();
	errno = 0;
	if (rdma_resolve_addr(id, NULL, cm_sa(&a), 1000) != 0) {
		NOTE("rdma_resolve_addr failed at once: %s", strerror(errno));
		CHECK(errno != 0, "-1 without errno");
	} else {
		struct rdma_cm_event *ev = cm_get(ch, 3000, "ADDR_ERROR");
		CHECK(ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status < 0,
		      "no route: got %s status %d, want ADDR_ERROR with "
		      "-errno",
		      rdma_event_str(ev->event), ev->status);
		NOTE("ADDR_ERROR status %d (%s) after %llu ms", ev->status,
		     strerror(-ev->status),
		     (unsigned long long)(now_ms() - t0));
		cm_ack(ev);
	}
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* a synchronous id reports the same failure as -1 */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "create sync");
	errno = 0;
	CHECK(rdma_resolve_addr(id, NULL, cm_sa(&a), 1000) == -1 && errno,
	      "sync resolve of an unreachable address: want -1/errno, got "
	      "errno %d",
	      errno);
	CHECK(rdma_destroy_id(id) == 0, "destroy sync");
	rdma_destroy_event_channel(ch);
}

/* rdma_get_devices: a NULL-terminated list holding softrnic0's context,
 * the same one an id bound to a local address uses. */
static void sub_devices(void)
{
	int n = -1;
	struct ibv_context **list = rdma_get_devices(&n);

	CHECK(list, "rdma_get_devices: %s", strerror(errno));
	CHECK(n >= 1, "rdma_get_devices: %d devices", n);
	CHECK(list[n] == NULL, "list not NULL-terminated");
	int found = -1;
	for (int i = 0; i < n; i++) {
		CHECK(list[i] && list[i]->device, "entry %d", i);
		if (!strcmp(ibv_get_device_name(list[i]->device),
			    test_device_name()))
			found = i;
	}
	CHECK(found >= 0, "%s not among rdma_get_devices", test_device_name());
	struct ibv_device_attr da;
	CHECK(ibv_query_device(list[found], &da) == 0,
	      "ibv_query_device on the returned context");

	struct rdma_cm_id *id;
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "create");
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind");
	CHECK(id->verbs == list[found],
	      "an id's verbs (%p) is not the context rdma_get_devices "
	      "returned (%p)",
	      (void *)id->verbs, (void *)list[found]);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_free_devices(list);
	list = rdma_get_devices(NULL);
	CHECK(list && list[0], "rdma_get_devices(NULL)");
	rdma_free_devices(list);
}

static void sub_event_str(void)
{
	static const struct {
		enum rdma_cm_event_type t;
		const char *s;
	} names[] = {
		{ RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED" },
		{ RDMA_CM_EVENT_ADDR_ERROR, "RDMA_CM_EVENT_ADDR_ERROR" },
		{ RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_ROUTE_RESOLVED" },
		{ RDMA_CM_EVENT_ROUTE_ERROR, "RDMA_CM_EVENT_ROUTE_ERROR" },
		{ RDMA_CM_EVENT_CONNECT_REQUEST, "RDMA_CM_EVENT_CONNECT_REQUEST" },
		{ RDMA_CM_EVENT_CONNECT_RESPONSE,
		  "RDMA_CM_EVENT_CONNECT_RESPONSE" },
		{ RDMA_CM_EVENT_CONNECT_ERROR, "RDMA_CM_EVENT_CONNECT_ERROR" },
		{ RDMA_CM_EVENT_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE" },
		{ RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_REJECTED" },
		{ RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED" },
		{ RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED" },
		{ RDMA_CM_EVENT_DEVICE_REMOVAL, "RDMA_CM_EVENT_DEVICE_REMOVAL" },
		{ RDMA_CM_EVENT_MULTICAST_JOIN, "RDMA_CM_EVENT_MULTICAST_JOIN" },
		{ RDMA_CM_EVENT_MULTICAST_ERROR,
		  "RDMA_CM_EVENT_MULTICAST_ERROR" },
		{ RDMA_CM_EVENT_ADDR_CHANGE, "RDMA_CM_EVENT_ADDR_CHANGE" },
		{ RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const char *s = rdma_event_str(names[i].t);
		CHECK(s && !strcmp(s, names[i].s), "rdma_event_str(%d) = %s",
		      names[i].t, s ? s : "(null)");
	}
	const char *s = rdma_event_str((enum rdma_cm_event_type)1000);
	CHECK(s && *s, "rdma_event_str(1000) gave no string");
}

static void sub_getaddrinfo(void)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	char b[96];

	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res) == 0 && res,
	      "rdma_getaddrinfo passive: %s", strerror(errno));
	CHECK(res->ai_src_addr && res->ai_src_len >= sizeof(struct sockaddr_in),
	      "passive: no ai_src_addr");
	CHECK(res->ai_src_addr->sa_family == AF_INET &&
		      cm_sa_port(res->ai_src_addr) == 7471,
	      "passive src %s", cm_sa_str(res->ai_src_addr, b, sizeof(b)));
	CHECK(res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC,
	      "ps %d qp_type %d", res->ai_port_space, res->ai_qp_type);
	CHECK(res->ai_flags & RAI_PASSIVE, "RAI_PASSIVE not kept");
	rdma_freeaddrinfo(res);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	res = NULL;
	CHECK(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res) == 0 && res,
	      "rdma_getaddrinfo active: %s", strerror(errno));
	CHECK(res->ai_dst_addr && res->ai_dst_addr->sa_family == AF_INET &&
		      cm_sa_port(res->ai_dst_addr) == 7471,
	      "active: ai_dst_addr %s",
	      res->ai_dst_addr ? cm_sa_str(res->ai_dst_addr, b, sizeof(b)) :
				 "(none)");
	CHECK(res->ai_qp_type == IBV_QPT_RC, "qp_type %d", res->ai_qp_type);
	rdma_freeaddrinfo(res);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_UDP;
	res = NULL;
	CHECK(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res) == 0 && res,
	      "rdma_getaddrinfo UDP: %s", strerror(errno));
	CHECK(res->ai_port_space == RDMA_PS_UDP && res->ai_qp_type == IBV_QPT_UD,
	      "PS_UDP: ps %d qp_type %d", res->ai_port_space, res->ai_qp_type);
	rdma_freeaddrinfo(res);

	if (getenv("INTEG_NO_IPV6") == NULL) {
		memset(&hints, 0, sizeof(hints));
		hints.ai_port_space = RDMA_PS_TCP;
		res = NULL;
		if (rdma_getaddrinfo("::1", "7471", &hints, &res) == 0) {
			CHECK(res && res->ai_dst_addr &&
				      res->ai_dst_addr->sa_family == AF_INET6,
			      "::1: family");
			CHECK(res->ai_family == AF_INET6, "::1: ai_family %d",
			      res->ai_family);
			rdma_freeaddrinfo(res);
		}
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	res = NULL;
	CHECK(rdma_getaddrinfo("no-such-host.invalid", "7471", &hints, &res) != 0,
	      "RAI_NUMERICHOST accepted a host name");
}

/* No node and no service: the addresses come from the hints (libfabric's
 * verbs provider resolves its peers this way, rdma_getaddrinfo(3): "node
 * and service ... at least one must be provided" or the hints' addresses). */
static void sub_getaddrinfo_hints(void)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct cm_addr dst, src;
	char b[96];

	cm_addr_make(&dst, "127.0.0.1", 7471);
	cm_addr_make(&src, "127.0.0.1", 0);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_family = AF_INET;
	hints.ai_dst_addr = cm_sa(&dst);
	hints.ai_dst_len = dst.len;
	CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0 && res,
	      "rdma_getaddrinfo(NULL, NULL, hints with ai_dst_addr): %s",
	      strerror(errno));
	CHECK(res->ai_dst_addr && res->ai_dst_len == dst.len &&
		      !memcmp(res->ai_dst_addr, cm_sa(&dst), dst.len),
	      "ai_dst_addr %s, want the hints' 127.0.0.1 port 7471",
	      res->ai_dst_addr ? cm_sa_str(res->ai_dst_addr, b, sizeof(b)) :
				 "(none)");
	CHECK(res->ai_qp_type == IBV_QPT_RC, "qp_type %d", res->ai_qp_type);
	rdma_freeaddrinfo(res);

	/* passive, source from the hints */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_family = AF_INET;
	hints.ai_src_addr = cm_sa(&src);
	hints.ai_src_len = src.len;
	res = NULL;
	CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0 && res,
	      "rdma_getaddrinfo(NULL, NULL, RAI_PASSIVE hints with "
	      "ai_src_addr): %s",
	      strerror(errno));
	CHECK(res->ai_src_addr && res->ai_src_addr->sa_family == AF_INET,
	      "passive: no ai_src_addr");
	rdma_freeaddrinfo(res);
}

/* rdma_create_qp / _ex on an id with an address: default PD, auto CQs,
 * INIT state; CQs in use by the QP cannot go; a second QP is refused. */
static void sub_create_qp(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;

	CHECK(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	struct ibv_qp_init_attr a = cm_qp_attr();
	CHECK(rdma_create_qp(id, NULL, &a) == -1,
	      "rdma_create_qp on an id with no device worked");
	CHECK(!id->qp, "failed rdma_create_qp left id->qp set");
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind");
	cm_create_qp(id, "rdma_create_qp");
	a = cm_qp_attr();
	errno = 0;
	CHECK(rdma_create_qp(id, NULL, &a) == -1 && errno == EINVAL,
	      "second rdma_create_qp: want -1/EINVAL, got errno %d", errno);
	int rc = ibv_destroy_cq(id->recv_cq);
	CHECK(rc == EBUSY, "ibv_destroy_cq of the QP's CQ: %d, want EBUSY",
	      rc);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* _ex, PD in the comp_mask but NULL: the default PD is used */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind");
	struct ibv_qp_init_attr_ex x = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
	};
	CHECK(rdma_create_qp_ex(id, &x) == 0, "rdma_create_qp_ex: %s",
	      strerror(errno));
	CHECK(id->qp && id->qp->pd == id->pd && id->send_cq && id->recv_cq,
	      "rdma_create_qp_ex: qp %p pd %p", (void *)id->qp,
	      (void *)id->pd);
	CHECK(qp_state(id->qp) == IBV_QPS_INIT, "state %d", qp_state(id->qp));
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* the application's own PD and CQs are used as given */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	CHECK(bind_to(id, "127.0.0.1", 0) == 0, "bind");
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	CHECK(pd && cq, "own pd/cq");
	a = cm_qp_attr();
	a.send_cq = a.recv_cq = cq;
	CHECK(rdma_create_qp(id, pd, &a) == 0, "rdma_create_qp own pd/cq: %s",
	      strerror(errno));
	CHECK(id->qp->pd == pd, "QP not on the given PD");
	CHECK(id->qp->send_cq == cq && id->qp->recv_cq == cq,
	      "QP not on the given CQ");
	rdma_destroy_qp(id);
	CHECK(ibv_destroy_cq(cq) == 0, "destroy own cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc own pd");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

/* Private data longer than the IB CM allows for a REQ is refused before
 * anything is sent. */
static void sub_pdata_limit_connect(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct cm_addr a;
	uint8_t pd[255] = { 0 };	/* private_data_len is a uint8_t */

	CHECK(ch, "channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
	cm_addr_make(&a, "127.0.0.1", 9);
	CHECK(rdma_resolve_addr(id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "resolve");
	cm_expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "addr");
	CHECK(rdma_resolve_route(id, CM_RESOLVE_MS) == 0, "route");
	cm_expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route");
	cm_create_qp(id, "qp");
	struct rdma_conn_param cp = { .private_data = pd,
				      .private_data_len = sizeof(pd),
				      .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL,
	      "rdma_connect with %zu bytes of private data: want -1/EINVAL, "
	      "got errno %d",
	      sizeof(pd), errno);
	cp.private_data_len = CM_PDATA_REQ_MAX + 1;
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL,
	      "rdma_connect with %d bytes of private data (limit %d): want "
	      "-1/EINVAL, got errno %d",
	      CM_PDATA_REQ_MAX + 1, CM_PDATA_REQ_MAX, errno);
	cm_expect_none(ch, 100, "a refused rdma_connect");
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

/* Two ids of one process connected to each other through 127.0.0.1: both
 * see ESTABLISHED, a SEND arrives, both see DISCONNECTED. */
static void sub_same_process(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	struct cm_addr a;
	struct cm_buf cb = { 0 }, sb = { 0 };

	CHECK(ch, "channel");
	lid = new_id(ch);
	CHECK(bind_to(lid, "127.0.0.1", 0) == 0, "bind");
	CHECK(rdma_listen(lid, 1) == 0, "listen");
	uint16_t port = ntohs(rdma_get_src_port(lid));
	cid = new_id(ch);
	cm_addr_make(&a, "127.0.0.1", port);
	CHECK(rdma_resolve_addr(cid, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "resolve");
	cm_expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "addr");
	CHECK(rdma_resolve_route(cid, CM_RESOLVE_MS) == 0, "route");
	cm_expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route");
	cm_create_qp(cid, "client qp");
	cm_buf_alloc(&cb, cid->pd, 4096);
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(cid, &cp) == 0, "connect: %s", strerror(errno));
	ev = cm_expect_request(ch, lid);
	sid = ev->id;
	cm_ack(ev);
	cm_create_qp(sid, "server qp");
	cm_buf_alloc(&sb, sid->pd, 4096);
	cm_post_recv(sid, 1, &sb, 0, 4096);
	CHECK(rdma_accept(sid, &cp) == 0, "accept: %s", strerror(errno));
	/* both ESTABLISHED events come on the one channel, in either order */
	int est_c = 0, est_s = 0;
	for (int i = 0; i < 2; i++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "ESTABLISHED");
		est_c += ev->id == cid;
		est_s += ev->id == sid;
		cm_ack(ev);
	}
	CHECK(est_c == 1 && est_s == 1, "ESTABLISHED for client %d server %d",
	      est_c, est_s);
	fill_pattern(cb.p, 1000, 7);
	cm_send(cid, 2, &cb, 0, 1000);
	cm_recv_check(sid, 1, &sb, 0, 1000, 7, "same-process SEND");
	CHECK(rdma_disconnect(cid) == 0, "disconnect");
	int dc = 0, ds = 0;
	for (int i = 0; i < 2; i++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
			       "DISCONNECTED");
		dc += ev->id == cid;
		ds += ev->id == sid;
		cm_ack(ev);
	}
	CHECK(dc == 1 && ds == 1, "DISCONNECTED for client %d server %d", dc,
	      ds);
	cm_buf_free(&cb);
	cm_buf_free(&sb);
	rdma_destroy_qp(sid);
	rdma_destroy_qp(cid);
	CHECK(rdma_destroy_id(sid) == 0, "destroy");
	CHECK(rdma_destroy_id(cid) == 0, "destroy");
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	static const struct subtest tests[] = {
		SUBTEST(sub_channel_nonblock),
		SUBTEST(sub_create_id),
		SUBTEST(sub_bind),
		SUBTEST(sub_bind_ipv6),
		SUBTEST(sub_options),
		SUBTEST(sub_resolve_v4),
		SUBTEST(sub_resolve_v6),
		SUBTEST(sub_resolve_unreachable),
		SUBTEST(sub_devices),
		SUBTEST(sub_event_str),
		SUBTEST(sub_getaddrinfo),
		SUBTEST(sub_getaddrinfo_hints),
		SUBTEST(sub_create_qp),
		SUBTEST(sub_pdata_limit_connect),
		SUBTEST(sub_same_process),
	};

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
