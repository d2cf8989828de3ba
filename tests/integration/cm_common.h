/* Helpers for the connection-manager integration tests (cm_*.c).
 *
 * These programs are written against <rdma/rdma_cma.h> and
 * <rdma/rdma_verbs.h> (Debian's rdma-core 44 headers) and linked against
 * softrnic's librdmacm.so.1 and libibverbs.so.1 (tests/CMakeLists.txt).
 * Header-only, like net_common.h, because every other .c file in this
 * folder becomes a test program of its own.
 *
 * Two-process subtests: cm_fork_run() forks; the child is the passive side
 * (server), the parent the active side (client). Neither opens anything
 * before the fork. They share a socketpair for out-of-band steps: the
 * server binds port 0 and tells the client which port it got, and the two
 * sides meet at barriers (net_sync) where a test needs an order. The same
 * side functions run across network namespaces over a plain TCP stream
 * (cm_run_remote), as net_common.h does for the verbs tests.
 *
 * Every wait is bounded: events by CM_EVENT_MS, out-of-band reads by
 * NET_OOB_MS, the child by its own alarm, the parent by run_subtests().
 */
#ifndef INTEG_CM_COMMON_H
#define INTEG_CM_COMMON_H

#include "net_common.h"

#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CM_UNUSED __attribute__((unused))

/* Deadline for one expected CM event. */
#define CM_EVENT_MS 5000
/* rdma_resolve_addr / rdma_resolve_route timeout argument. */
#define CM_RESOLVE_MS 2000

/* IB CM limits the rdma_cm man pages and ABI.md §4 give for RDMA_PS_TCP. */
#define CM_PDATA_REQ_MAX 56
#define CM_PDATA_REP_MAX 196
#define CM_PDATA_REJ_MAX 148

/* IB CM reject reasons that RDMA_CM_EVENT_REJECTED reports as status. */
#define CM_REJ_INVALID_SERVICE_ID 8
#define CM_REJ_CONSUMER_DEFINED 28
#define CM_REJ_VENDOR_OPTION_NOT_SUPPORTED 35

/* ---- addresses --------------------------------------------------------- */

struct cm_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* addr is a numeric IPv4 or IPv6 literal. */
static CM_UNUSED void cm_addr_make(struct cm_addr *a, const char *addr,
				   uint16_t port)
{
	memset(a, 0, sizeof(*a));
	struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;

	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		a->len = sizeof(*s4);
		return;
	}
	CHECK(inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1,
	      "bad address literal %s", addr);
	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(port);
	a->len = sizeof(*s6);
}

static CM_UNUSED struct sockaddr *cm_sa(struct cm_addr *a)
{
	return (struct sockaddr *)&a->ss;
}

static CM_UNUSED uint16_t cm_sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static CM_UNUSED const char *cm_sa_str(const struct sockaddr *sa, char *b,
				       size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
			  ip, sizeof(ip));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6,
			  &((const struct sockaddr_in6 *)sa)->sin6_addr, ip,
			  sizeof(ip));
	snprintf(b, n, "%s port %u (family %d)", ip, cm_sa_port(sa),
		 sa->sa_family);
	return b;
}

/* SKIP unless this host can bind a TCP socket to addr (::1 may be off). */
static CM_UNUSED void cm_require_addr(const char *addr)
{
	struct cm_addr a;

	cm_addr_make(&a, addr, 0);
	int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		SKIP("no socket for %s: %s", addr, strerror(errno));
	if (bind(fd, cm_sa(&a), a.len) != 0) {
		int e = errno;
		close(fd);
		SKIP("cannot bind %s on this host: %s", addr, strerror(e));
	}
	close(fd);
}

/* ---- events ------------------------------------------------------------ */

/* Wait up to ms for the channel's descriptor to become readable: 1 if it
 * did, 0 if not. The descriptor must be pollable (ABI.md §4). */
static CM_UNUSED int cm_poll(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		int64_t left = (int64_t)end - (int64_t)now_ms();
		int r = poll(&pfd, 1, left > 0 ? (int)left : 0);
		if (r < 0 && errno == EINTR)
			continue;
		CHECK(r >= 0, "poll on the event channel fd: %s",
		      strerror(errno));
		CHECK(r == 0 || !(pfd.revents & (POLLNVAL | POLLERR)),
		      "poll on the event channel fd: revents %#x",
		      pfd.revents);
		return r > 0;
	}
}

/* The next event on ch within ms (the caller acks it). */
static CM_UNUSED struct rdma_cm_event *cm_get(struct rdma_event_channel *ch,
					      int ms, const char *what)
{
	struct rdma_cm_event *ev = NULL;

	CHECK(cm_poll(ch, ms), "%s: no CM event within %d ms", what, ms);
	CHECK(rdma_get_cm_event(ch, &ev) == 0,
	      "%s: rdma_get_cm_event: %s", what, strerror(errno));
	CHECK(ev, "%s: rdma_get_cm_event gave no event", what);
	return ev;
}

/* The next event on ch must be type (and, if status >= -1000, carry that
 * status). Returns it unacked. */
#define CM_ANY_STATUS (-100000)
static CM_UNUSED struct rdma_cm_event *
cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
	  int status, const char *what)
{
	struct rdma_cm_event *ev = cm_get(ch, CM_EVENT_MS, what);

	CHECK(ev->event == type, "%s: got %s (status %d), want %s", what,
	      rdma_event_str(ev->event), ev->status, rdma_event_str(type));
	if (status != CM_ANY_STATUS)
		CHECK(ev->status == status, "%s: %s status %d, want %d", what,
		      rdma_event_str(ev->event), ev->status, status);
	return ev;
}

static CM_UNUSED void cm_expect_ack(struct rdma_event_channel *ch,
				    enum rdma_cm_event_type type,
				    const char *what)
{
	struct rdma_cm_event *ev = cm_expect(ch, type, 0, what);

	CHECK(rdma_ack_cm_event(ev) == 0, "%s: rdma_ack_cm_event: %s", what,
	      strerror(errno));
}

static CM_UNUSED void cm_ack(struct rdma_cm_event *ev)
{
	CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event: %s",
	      strerror(errno));
}

/* CHECK that nothing arrives on ch within ms. */
static CM_UNUSED void cm_expect_none(struct rdma_event_channel *ch, int ms,
				     const char *what)
{
	if (!cm_poll(ch, ms))
		return;
	struct rdma_cm_event *ev = NULL;
	if (rdma_get_cm_event(ch, &ev) == 0 && ev)
		CHECK(0, "%s: unexpected event %s (status %d)", what,
		      rdma_event_str(ev->event), ev->status);
	CHECK(0, "%s: the channel fd is readable but holds no event", what);
}

static CM_UNUSED void cm_set_nonblock(struct rdma_event_channel *ch)
{
	int fl = fcntl(ch->fd, F_GETFL);

	CHECK(fl >= 0, "F_GETFL: %s", strerror(errno));
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "F_SETFL: %s",
	      strerror(errno));
}

/* ---- private data ------------------------------------------------------ */

/* What the tests put in the connection private data: a tag that names the
 * connection and the sender's buffer for RDMA WRITE / READ. */
#define CM_PD_MAGIC 0x5c3a11edu
struct cm_pdata {
	uint32_t magic;
	uint32_t tag;
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

static CM_UNUSED struct cm_pdata cm_pdata_make(uint32_t tag,
					       const struct ibv_mr *mr)
{
	struct cm_pdata p = { .magic = htobe32(CM_PD_MAGIC),
			      .tag = htobe32(tag) };

	if (mr) {
		p.addr = htobe64((uintptr_t)mr->addr);
		p.rkey = htobe32(mr->rkey);
		p.len = htobe32((uint32_t)mr->length);
	}
	return p;
}

/* Decode and CHECK the private data an event carried. */
static CM_UNUSED struct cm_pdata cm_pdata_get(const struct rdma_conn_param *c,
					      uint32_t want_tag,
					      const char *what)
{
	struct cm_pdata p;

	CHECK(c->private_data, "%s: no private data", what);
	CHECK(c->private_data_len >= sizeof(p),
	      "%s: private_data_len %u, want >= %zu", what,
	      c->private_data_len, sizeof(p));
	memcpy(&p, c->private_data, sizeof(p));
	p.magic = be32toh(p.magic);
	p.tag = be32toh(p.tag);
	p.addr = be64toh(p.addr);
	p.rkey = be32toh(p.rkey);
	p.len = be32toh(p.len);
	CHECK(p.magic == CM_PD_MAGIC, "%s: private data magic %#x, want %#x",
	      what, p.magic, CM_PD_MAGIC);
	CHECK(p.tag == want_tag, "%s: private data tag %#x, want %#x", what,
	      p.tag, want_tag);
	return p;
}

/* ---- QPs --------------------------------------------------------------- */

static CM_UNUSED struct ibv_qp_init_attr cm_qp_attr(void)
{
	struct ibv_qp_init_attr a = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64,
			 .max_send_sge = 2, .max_recv_sge = 2 },
	};
	return a;
}

/* rdma_create_qp with the default PD and library-made CQs, then CHECK
 * what rdma_create_qp(3) and ABI.md §4 promise about the id. */
static CM_UNUSED void cm_create_qp(struct rdma_cm_id *id, const char *what)
{
	struct ibv_qp_init_attr a = cm_qp_attr();

	CHECK(rdma_create_qp(id, NULL, &a) == 0, "%s: rdma_create_qp: %s",
	      what, strerror(errno));
	CHECK(id->qp, "%s: id->qp not set", what);
	CHECK(id->pd, "%s: id->pd (default PD) not set", what);
	CHECK(id->qp->pd == id->pd, "%s: QP's PD is not id->pd", what);
	CHECK(id->send_cq && id->recv_cq, "%s: CQs not set (send %p recv %p)",
	      what, (void *)id->send_cq, (void *)id->recv_cq);
	CHECK(id->send_cq_channel && id->recv_cq_channel,
	      "%s: CQ channels not set", what);
	CHECK(id->qp->send_cq == id->send_cq && id->qp->recv_cq == id->recv_cq,
	      "%s: the QP's CQs are not id->send_cq/recv_cq", what);
	CHECK(a.send_cq == id->send_cq && a.recv_cq == id->recv_cq,
	      "%s: rdma_create_qp did not report the CQs it made in its attr",
	      what);
	CHECK(id->send_cq->cq_context == id && id->recv_cq->cq_context == id,
	      "%s: auto-created CQ's cq_context is not the id", what);
	CHECK(id->qp->qp_type == IBV_QPT_RC, "%s: qp_type %d", what,
	      id->qp->qp_type);
	CHECK(id->qp->context == id->verbs, "%s: QP context != id->verbs",
	      what);
	CHECK(qp_state(id->qp) == IBV_QPS_INIT,
	      "%s: new CM QP in state %d, want INIT (%d)", what,
	      qp_state(id->qp), IBV_QPS_INIT);
}

/* One registered buffer on an id's PD. */
struct cm_buf {
	uint8_t *p;
	size_t len;
	struct ibv_mr *mr;
};

static CM_UNUSED void cm_buf_alloc(struct cm_buf *b, struct ibv_pd *pd,
				   size_t len)
{
	b->len = len;
	b->p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(b->p != MAP_FAILED, "mmap %zu: %s", len, strerror(errno));
	b->mr = ibv_reg_mr(pd, b->p, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ);
	CHECK(b->mr, "ibv_reg_mr: %s", strerror(errno));
}

static CM_UNUSED void cm_buf_free(struct cm_buf *b)
{
	if (b->mr)
		CHECK(ibv_dereg_mr(b->mr) == 0, "ibv_dereg_mr");
	if (b->p && b->p != MAP_FAILED)
		munmap(b->p, b->len);
	memset(b, 0, sizeof(*b));
}

/* ---- the two processes ------------------------------------------------- */

/* One side of a two-process subtest. */
struct cm_side {
	int fd;            /* out-of-band stream to the other side */
	const char *addr;  /* server: address to bind; client: to connect */
	pid_t peer_pid;    /* client in fork mode: the server's pid */
	int remote;        /* running across namespaces (cm_run_remote) */
};

typedef void (*cm_side_fn)(struct cm_side *s);

/* Server: tell the client the port; client: learn it. */
static CM_UNUSED void cm_put_port(struct cm_side *s, uint16_t port)
{
	net_put(&(struct net_end){ .fd = s->fd }, 0x90700000u | port);
}

static CM_UNUSED uint16_t cm_get_port(struct cm_side *s)
{
	uint64_t v = net_get(&(struct net_end){ .fd = s->fd });

	CHECK((v & 0xffff0000u) == 0x90700000u && (v & 0xffff),
	      "out-of-band: bad port message %#llx", (unsigned long long)v);
	return (uint16_t)(v & 0xffff);
}

static CM_UNUSED void cm_sync(struct cm_side *s, uint64_t tag)
{
	net_sync(&(struct net_end){ .fd = s->fd }, tag);
}

static CM_UNUSED void cm_put(struct cm_side *s, uint64_t v)
{
	net_put(&(struct net_end){ .fd = s->fd }, v);
}

static CM_UNUSED uint64_t cm_getv(struct cm_side *s)
{
	return net_get(&(struct net_end){ .fd = s->fd });
}

/* Run server in a child process and client here, both with s.addr. */
static CM_UNUSED void cm_fork_run(const char *addr, cm_side_fn server,
				  cm_side_fn client)
{
	int fd;
	pid_t pid = net_fork_side(&fd);

	if (pid == 0) {
		struct cm_side s = { .fd = fd, .addr = addr };

		server(&s);
		close_audit("server side");
		exit(0);
	}
	struct cm_side s = { .fd = fd, .addr = addr, .peer_pid = pid };

	client(&s);
	int st = net_wait_child(pid, 10000);
	net_check_child_status(st, "server side");
	close(fd);
}

/* ---- a listening server and a connecting client ------------------------ */

/* Server: channel, id bound to addr port 0, listening; port sent to the
 * client. Returns the port. */
static CM_UNUSED uint16_t cm_listen(struct cm_side *s,
				    struct rdma_event_channel **ch,
				    struct rdma_cm_id **lid, int backlog,
				    uint16_t fixed_port)
{
	struct cm_addr a;

	*ch = rdma_create_event_channel();
	CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(*ch, lid, (void *)0x5e5e, RDMA_PS_TCP) == 0,
	      "rdma_create_id: %s", strerror(errno));
	cm_addr_make(&a, s->addr, fixed_port);
	CHECK(rdma_bind_addr(*lid, cm_sa(&a)) == 0, "rdma_bind_addr %s: %s",
	      s->addr, strerror(errno));
	CHECK(rdma_listen(*lid, backlog) == 0, "rdma_listen: %s",
	      strerror(errno));
	uint16_t port = ntohs(rdma_get_src_port(*lid));
	CHECK(port != 0, "rdma_get_src_port after binding port %u gave 0",
	      fixed_port);
	if (fixed_port)
		CHECK(port == fixed_port, "bound port %u, src_port %u",
		      fixed_port, port);
	cm_put_port(s, port);
	return port;
}

/* Client: channel, id, address and route resolved to s->addr:port. */
static CM_UNUSED void cm_resolve(struct cm_side *s, uint16_t port,
				 struct rdma_event_channel **ch,
				 struct rdma_cm_id **id, void *ctx)
{
	struct cm_addr a;

	*ch = rdma_create_event_channel();
	CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(*ch, id, ctx, RDMA_PS_TCP) == 0,
	      "rdma_create_id: %s", strerror(errno));
	CHECK((*id)->context == ctx, "id->context not kept");
	CHECK((*id)->channel == *ch, "id->channel not set");
	cm_addr_make(&a, s->addr, port);
	CHECK(rdma_resolve_addr(*id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "rdma_resolve_addr %s: %s", s->addr, strerror(errno));
	struct rdma_cm_event *ev =
		cm_expect(*ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "resolve addr");
	CHECK(ev->id == *id, "ADDR_RESOLVED for another id");
	cm_ack(ev);
	CHECK((*id)->verbs, "id->verbs not set after ADDR_RESOLVED");
	CHECK((*id)->pd, "id->pd not set after ADDR_RESOLVED");
	CHECK(rdma_resolve_route(*id, CM_RESOLVE_MS) == 0,
	      "rdma_resolve_route: %s", strerror(errno));
	cm_expect_ack(*ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve route");
}

/* Wait for a CONNECT_REQUEST on the listener's channel; returns it unacked
 * after the checks every request must pass. */
static CM_UNUSED struct rdma_cm_event *
cm_expect_request(struct rdma_event_channel *ch, struct rdma_cm_id *lid)
{
	struct rdma_cm_event *ev =
		cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0,
			  "connect request");

	CHECK(ev->listen_id == lid, "CONNECT_REQUEST: listen_id %p, want %p",
	      (void *)ev->listen_id, (void *)lid);
	CHECK(ev->id && ev->id != lid,
	      "CONNECT_REQUEST: id must be a new id, not the listener");
	CHECK(ev->id->channel == ch,
	      "CONNECT_REQUEST: child's channel is not the listener's");
	CHECK(ev->id->context == lid->context,
	      "CONNECT_REQUEST: child's context %p, listener's %p",
	      ev->id->context, lid->context);
	CHECK(ev->id->ps == RDMA_PS_TCP, "child ps %#x", ev->id->ps);
	CHECK(ev->id->verbs, "CONNECT_REQUEST: child id->verbs not set");
	CHECK(ev->id->pd, "CONNECT_REQUEST: child id->pd not set");
	CHECK(ev->id->port_num == 1, "child port_num %u", ev->id->port_num);
	return ev;
}

/* Disconnect, wait DISCONNECTED; destroy QP, id, channel. */
static CM_UNUSED void cm_close(struct rdma_event_channel *ch,
			       struct rdma_cm_id *id, int disconnect)
{
	if (disconnect) {
		CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s",
		      strerror(errno));
		cm_expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, "disconnect");
	}
	if (id->qp)
		rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s",
	      strerror(errno));
}

/* ---- data -------------------------------------------------------------- */

static CM_UNUSED void cm_post_recv(struct rdma_cm_id *id, uint64_t wr_id,
				   struct cm_buf *b, size_t off, uint32_t len)
{
	CHECK(rdma_post_recv(id, (void *)(uintptr_t)wr_id, b->p + off, len,
			     b->mr) == 0,
	      "rdma_post_recv: %s", strerror(errno));
}

static CM_UNUSED void cm_send(struct rdma_cm_id *id, uint64_t wr_id,
			      struct cm_buf *b, size_t off, uint32_t len)
{
	struct ibv_wc wc;

	CHECK(rdma_post_send(id, (void *)(uintptr_t)wr_id, b->p + off, len,
			     b->mr, IBV_SEND_SIGNALED) == 0,
	      "rdma_post_send: %s", strerror(errno));
	expect_wc(id->send_cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND");
}

/* Wait for receive wr_id carrying len bytes of fill_pattern(seed). */
static CM_UNUSED void cm_recv_check(struct rdma_cm_id *id, uint64_t wr_id,
				    struct cm_buf *b, size_t off, uint32_t len,
				    uint32_t seed, const char *what)
{
	struct ibv_wc wc;

	expect_wc(id->recv_cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, what);
	CHECK(wc.byte_len == len, "%s: byte_len %u, want %u", what,
	      wc.byte_len, len);
	CHECK(wc.qp_num == id->qp->qp_num, "%s: qp_num %u, want %u", what,
	      wc.qp_num, id->qp->qp_num);
	check_pattern(b->p + off, len, seed, what);
}

#endif
