/* Datagram ids and multicast through the connection manager, between two
 * processes (fork: the child is the passive side / the receivers):
 *
 *   connect_v4/v6  RDMA_PS_UDP listen / connect / accept with private data
 *                  both ways; CONNECT_REQUEST carries the requester's QPN
 *                  and Q_Key, ESTABLISHED (active side only) the
 *                  acceptor's and an AH that reaches it: a datagram sent
 *                  with it arrives, bytes compared, and the answer sent
 *                  with ibv_create_ah_from_wc comes back
 *   reject         rdma_reject with private data: UNREACHABLE status 2
 *                  (IB_SIDR_REJECT) and the data, as the kernel reports
 *   no_listener    nobody on the port: UNREACHABLE status 1
 *   sync           a synchronous id (NULL channel) connects
 *   wire           the exchange by hand: malformed requests are dropped
 *                  without an event, a resent request raises one
 *                  CONNECT_REQUEST, the reply's bytes, a request resent
 *                  after the answer is answered again
 *   mcast          two receivers join a group, a send-only sender joins
 *                  it: both receive, the sender does not hear itself; a
 *                  receiver leaves and hears no more
 *   join_errors    join on an RC id, a unicast address, an unbound id,
 *                  twice, bad _ex flags; leave of a group never joined
 *
 * Multicast stays on lo (SOFTRNIC_UD_MCAST_IF), on a group and port of
 * its own.
 */
#include "cm_common.h"
#include "ud_common.h"

#include <stdlib.h>
#include <stdbool.h>
#include <time.h>

#define TAG_REQ 0x7101u
#define TAG_REP 0x7202u
#define TAG_REJ 0x7303u
#define MSG_LEN 200
#define SLOT (UD_GRH + 512)
#define BUF_LEN (16 * KIB)
#define MC_QPN 0xffffffu

static char g_group[64];

/* The GID of an address: IPv4 mapped, IPv6 as it is (RoCE v2). */
static void cm_fill_want(union ibv_gid *g, const struct sockaddr *sa)
{
	memset(g, 0, sizeof(*g));
	if (sa->sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else {
		memcpy(g->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

static void ud_resolve(struct cm_side *s, uint16_t port, struct rdma_event_channel **ch,
		       struct rdma_cm_id **id)
{
	struct cm_addr a;

	*ch = rdma_create_event_channel();
	CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(*ch, id, (void *)0xc11e, RDMA_PS_UDP) == 0, "rdma_create_id: %s",
	      strerror(errno));
	cm_addr_make(&a, s->addr, port);
	CHECK(rdma_resolve_addr(*id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0,
	      "rdma_resolve_addr %s: %s", s->addr, strerror(errno));
	cm_expect_ack(*ch, RDMA_CM_EVENT_ADDR_RESOLVED, "resolve addr");
	CHECK(rdma_resolve_route(*id, CM_RESOLVE_MS) == 0, "rdma_resolve_route: %s",
	      strerror(errno));
	cm_expect_ack(*ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve route");
}

/* A UD QP through rdma_create_qp: INIT -> RTR -> RTS at once, Q_Key
 * RDMA_UDP_QKEY (ABI.md §4). */
static void ud_create_qp(struct rdma_cm_id *id, const char *what)
{
	struct ibv_qp_init_attr a = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	CHECK(rdma_create_qp(id, NULL, &a) == 0, "%s: rdma_create_qp: %s", what,
	      strerror(errno));
	CHECK(id->qp && id->qp->qp_type == IBV_QPT_UD, "%s: no UD QP", what);
	CHECK(qp_state(id->qp) == IBV_QPS_RTS, "%s: UD QP in state %d, want RTS", what,
	      qp_state(id->qp));
	CHECK(ibv_query_qp(id->qp, &qa, IBV_QP_QKEY, &qia) == 0, "%s: ibv_query_qp", what);
	CHECK(qa.qkey == RDMA_UDP_QKEY, "%s: Q_Key %#x, want %#x", what, qa.qkey, RDMA_UDP_QKEY);
}

static void check_gid(struct rdma_cm_id *id, int idx, const union ibv_gid *want, const char *what)
{
	union ibv_gid g;

	CHECK(ibv_query_gid(id->verbs, 1, idx, &g) == 0, "%s: ibv_query_gid %d", what, idx);
	CHECK(!memcmp(&g, want, sizeof(g)), "%s: sgid_index %d is not the id's source GID",
	      what, idx);
}

static void send_ud(struct rdma_cm_id *id, struct cm_buf *b, struct ibv_ah *ah, uint32_t qpn,
		    uint32_t qkey, uint32_t seed, uint64_t wr_id)
{
	struct ibv_wc wc;

	fill_pattern(b->p + 4 * SLOT, MSG_LEN, seed);
	CHECK(ud_send(id->qp, ah, qpn, qkey, wr_id, b->p + 4 * SLOT, MSG_LEN, b->mr->lkey,
		      IBV_WR_SEND, 0, 0) == 0, "post UD send");
	expect_wc(id->send_cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, "UD send");
}

static void recv_ud(struct rdma_cm_id *id, struct cm_buf *b, uint64_t wr_id, uint32_t seed,
		    uint32_t src_qpn, struct ibv_wc *wc, const char *what)
{
	uint8_t want[MSG_LEN];

	expect_wc(id->recv_cq, wc, wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, what);
	CHECK(wc->byte_len == UD_GRH + MSG_LEN, "%s: byte_len %u", what, wc->byte_len);
	CHECK(wc->src_qp == src_qpn, "%s: src_qp %#x, want %#x", what, wc->src_qp, src_qpn);
	fill_pattern(want, MSG_LEN, seed);
	check_bytes(b->p + (wr_id % 4) * SLOT + UD_GRH, want, MSG_LEN, what);
}

/* ---- connect / accept ----------------------------------------------------- */

static void srv_listen_ud(struct cm_side *s, struct rdma_event_channel **ch,
			  struct rdma_cm_id **lid)
{
	struct cm_addr a;

	*ch = rdma_create_event_channel();
	CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(*ch, lid, (void *)0x5e5e, RDMA_PS_UDP) == 0, "rdma_create_id: %s",
	      strerror(errno));
	cm_addr_make(&a, s->addr, 0);
	CHECK(rdma_bind_addr(*lid, cm_sa(&a)) == 0, "rdma_bind_addr %s: %s", s->addr,
	      strerror(errno));
	CHECK(rdma_listen(*lid, 4) == 0, "rdma_listen on a PS_UDP id: %s", strerror(errno));
	cm_put_port(s, ntohs(rdma_get_src_port(*lid)));
}

static struct rdma_cm_event *srv_request(struct rdma_event_channel *ch, struct rdma_cm_id *lid,
					 uint32_t tag, uint32_t cli_qpn)
{
	struct rdma_cm_event *ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, "UD request");
	struct rdma_cm_id *id = ev->id;

	CHECK(ev->listen_id == lid && id && id != lid, "CONNECT_REQUEST ids");
	CHECK(id->ps == RDMA_PS_UDP && id->qp_type == IBV_QPT_UD, "child ps %#x qp_type %d",
	      id->ps, id->qp_type);
	CHECK(id->verbs && id->pd && id->channel == ch, "child not on the device/channel");
	CHECK(ev->param.ud.qp_num == cli_qpn, "request qp_num %#x, want the requester's %#x",
	      ev->param.ud.qp_num, cli_qpn);
	CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY, "request qkey %#x", ev->param.ud.qkey);
	CHECK(ev->param.ud.private_data_len == sizeof(struct cm_pdata),
	      "request private_data_len %u", ev->param.ud.private_data_len);
	cm_pdata_get((const struct rdma_conn_param *)&ev->param.ud, tag, "request private data");
	return ev;
}

static void srv_connect(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_pdata pd = cm_pdata_make(TAG_REP, NULL);
	struct rdma_conn_param cp = { .private_data = &pd, .private_data_len = sizeof(pd) };
	uint8_t big[137] = { 0 };
	struct cm_buf b;
	struct ibv_wc wc;
	struct ibv_ah *ah;
	uint32_t cli_qpn;

	srv_listen_ud(s, &ch, &lid);
	cli_qpn = (uint32_t)cm_getv(s);
	ev = srv_request(ch, lid, TAG_REQ, cli_qpn);
	id = ev->id;
	cm_ack(ev);
	ud_create_qp(id, "server");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	cm_post_recv(id, 0, &b, 0, SLOT);
	cp.private_data = big;
	cp.private_data_len = sizeof(big);
	CHECK(rdma_accept(id, &cp) && errno == EINVAL, "accept with 137 bytes of private data");
	cp.private_data = &pd;
	cp.private_data_len = sizeof(pd);
	CHECK(rdma_accept(id, &cp) == 0, "rdma_accept: %s", strerror(errno));
	CHECK(rdma_accept(id, &cp) && errno == EINVAL, "a second rdma_accept succeeded");
	cm_put(s, id->qp->qp_num);
	/* SIDR: nothing more on the passive side */
	cm_expect_none(ch, 300, "after a UD accept");
	recv_ud(id, &b, 0, 11, cli_qpn, &wc, "client's datagram");
	ah = ibv_create_ah_from_wc(id->pd, &wc, (struct ibv_grh *)b.p, id->port_num);
	CHECK(ah, "ibv_create_ah_from_wc: %s", strerror(errno));
	send_ud(id, &b, ah, wc.src_qp, RDMA_UDP_QKEY, 12, 100);
	cm_sync(s, 0x1d1d);
	ibv_destroy_ah(ah);
	cm_buf_free(&b);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy child");
	CHECK(rdma_destroy_id(lid) == 0, "destroy listener");
	rdma_destroy_event_channel(ch);
}

static void cli_connect(struct cm_side *s)
{
	uint16_t port = cm_get_port(s);
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct cm_pdata pd = cm_pdata_make(TAG_REQ, NULL);
	struct rdma_conn_param cp = { .private_data = &pd, .private_data_len = sizeof(pd) };
	uint8_t big[181] = { 0 };
	union ibv_gid want;
	struct cm_buf b;
	struct ibv_wc wc;
	struct ibv_ah *ah;
	uint32_t srv_qpn;

	ud_resolve(s, port, &ch, &id);
	ud_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	cm_post_recv(id, 1, &b, SLOT, SLOT);
	cp.private_data = big;
	cp.private_data_len = sizeof(big);
	CHECK(rdma_connect(id, &cp) && errno == EINVAL, "connect with 181 bytes of private data");
	cp.private_data = &pd;
	cp.private_data_len = sizeof(pd);
	cm_put(s, id->qp->qp_num);
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "UD ESTABLISHED");
	srv_qpn = (uint32_t)cm_getv(s);
	CHECK(ev->id == id, "ESTABLISHED for another id");
	CHECK(ev->param.ud.qp_num == srv_qpn, "ESTABLISHED qp_num %#x, want %#x",
	      ev->param.ud.qp_num, srv_qpn);
	CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY, "ESTABLISHED qkey %#x", ev->param.ud.qkey);
	CHECK(ev->param.ud.private_data_len == sizeof(pd), "reply private_data_len %u",
	      ev->param.ud.private_data_len);
	cm_pdata_get((const struct rdma_conn_param *)&ev->param.ud, TAG_REP, "reply private data");
	CHECK(ev->param.ud.ah_attr.is_global, "ah_attr not global");
	CHECK(ev->param.ud.ah_attr.port_num == 1, "ah_attr port %u", ev->param.ud.ah_attr.port_num);
	cm_fill_want(&want, rdma_get_peer_addr(id));
	CHECK(!memcmp(&ev->param.ud.ah_attr.grh.dgid, &want, sizeof(want)),
	      "ah_attr dgid is not the listener's GID");
	cm_fill_want(&want, rdma_get_local_addr(id));
	check_gid(id, ev->param.ud.ah_attr.grh.sgid_index, &want, "ESTABLISHED ah_attr");
	ah = ibv_create_ah(id->pd, &ev->param.ud.ah_attr);
	CHECK(ah, "ibv_create_ah from ESTABLISHED: %s", strerror(errno));
	send_ud(id, &b, ah, ev->param.ud.qp_num, ev->param.ud.qkey, 11, 200);
	cm_ack(ev);
	recv_ud(id, &b, 1, 12, srv_qpn, &wc, "server's answer");
	CHECK(rdma_disconnect(id) && errno == EINVAL, "rdma_disconnect on a UD id");
	cm_sync(s, 0x1d1d);
	ibv_destroy_ah(ah);
	cm_buf_free(&b);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_connect_v4(void)
{
	cm_fork_run("127.0.0.1", srv_connect, cli_connect);
}

static void sub_connect_v6(void)
{
	cm_require_addr("::1");
	cm_fork_run("::1", srv_connect, cli_connect);
}

/* ---- reject, nobody listening, sync ----------------------------------------- */

static void srv_reject(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_pdata pd = cm_pdata_make(TAG_REJ, NULL);

	srv_listen_ud(s, &ch, &lid);
	ev = srv_request(ch, lid, TAG_REQ, 0);
	id = ev->id;
	cm_ack(ev);
	CHECK(rdma_reject(id, &pd, sizeof(pd)) == 0, "rdma_reject: %s", strerror(errno));
	CHECK(rdma_accept(id, NULL) && errno == EINVAL, "accept after reject");
	cm_sync(s, 0x2e2e);
	CHECK(rdma_destroy_id(id) == 0, "destroy child");
	CHECK(rdma_destroy_id(lid) == 0, "destroy listener");
	rdma_destroy_event_channel(ch);
}

static void cli_reject(struct cm_side *s)
{
	uint16_t port = cm_get_port(s);
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct cm_pdata pd = cm_pdata_make(TAG_REQ, NULL);
	struct rdma_conn_param cp = { .private_data = &pd, .private_data_len = sizeof(pd) };

	ud_resolve(s, port, &ch, &id);
	/* no QP: the request names conn_param->qp_num (0 here) */
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_UNREACHABLE, 2, "rejected UD request");
	CHECK(ev->param.ud.private_data_len == sizeof(pd), "reject private_data_len %u",
	      ev->param.ud.private_data_len);
	cm_pdata_get((const struct rdma_conn_param *)&ev->param.ud, TAG_REJ, "reject private data");
	cm_ack(ev);
	cm_sync(s, 0x2e2e);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_reject(void)
{
	cm_fork_run("127.0.0.1", srv_reject, cli_reject);
}

static void sub_no_listener(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct cm_side s = { .addr = "127.0.0.1" };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint64_t t0;

	/* a UDP port nobody holds */
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &al) == 0, "free UDP port");
	close(fd);
	ud_resolve(&s, ntohs(a.sin_port), &ch, &id);
	t0 = now_ms();
	CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));
	cm_ack(cm_expect(ch, RDMA_CM_EVENT_UNREACHABLE, 1, "UD connect to nobody"));
	CHECK(now_ms() - t0 < 3000, "UNREACHABLE after %llu ms",
	      (unsigned long long)(now_ms() - t0));
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void srv_sync(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;

	srv_listen_ud(s, &ch, &lid);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, "request");
	id = ev->id;
	cm_ack(ev);
	ud_create_qp(id, "server");
	CHECK(rdma_accept(id, NULL) == 0, "rdma_accept: %s", strerror(errno));
	cm_put(s, id->qp->qp_num);
	cm_sync(s, 0x3f3f);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
}

static void cli_sync(struct cm_side *s)
{
	uint16_t port = cm_get_port(s);
	struct rdma_cm_id *id;
	struct cm_addr a;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP) == 0, "sync id: %s", strerror(errno));
	cm_addr_make(&a, s->addr, port);
	CHECK(rdma_resolve_addr(id, NULL, cm_sa(&a), CM_RESOLVE_MS) == 0, "resolve addr");
	CHECK(rdma_resolve_route(id, CM_RESOLVE_MS) == 0, "resolve route");
	ud_create_qp(id, "sync client");
	CHECK(rdma_connect(id, NULL) == 0, "sync rdma_connect: %s", strerror(errno));
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "sync connect: id->event is not ESTABLISHED");
	CHECK(id->event->param.ud.qp_num == (uint32_t)cm_getv(s), "sync ESTABLISHED qp_num");
	cm_sync(s, 0x3f3f);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
}

static void sub_sync(void)
{
	cm_fork_run("127.0.0.1", srv_sync, cli_sync);
}

/* ---- the exchange on the wire (DESIGN.md "Datagram CM wire format") ---- */

static size_t sidr_frame(uint8_t *f, uint8_t type, uint32_t tid, uint32_t qpn, uint32_t qkey,
			 uint8_t status, const char *pd)
{
	size_t n = strlen(pd);

	memset(f, 0, 20);
	f[0] = 0x53;
	f[1] = 0x43;
	f[2] = 1;
	f[3] = type;
	for (int i = 0; i < 4; i++) {
		f[4 + i] = (uint8_t)(tid >> (24 - 8 * i));
		f[8 + i] = (uint8_t)(qpn >> (24 - 8 * i));
		f[12 + i] = (uint8_t)(qkey >> (24 - 8 * i));
	}
	f[16] = status;
	f[17] = (uint8_t)n;
	memcpy(f + 20, pd, n);
	return 20 + n;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void srv_wire(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp = { .private_data = "ok", .private_data_len = 2 };

	srv_listen_ud(s, &ch, &lid);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, "hand-made request");
	id = ev->id;
	CHECK(ev->param.ud.qp_num == 0x123456 && ev->param.ud.qkey == 0x1111,
	      "request qp_num %#x qkey %#x", ev->param.ud.qp_num, ev->param.ud.qkey);
	CHECK(ev->param.ud.private_data_len == 3 && !memcmp(ev->param.ud.private_data, "hi!", 3),
	      "request private data");
	cm_ack(ev);
	ud_create_qp(id, "server");
	CHECK(rdma_accept(id, &cp) == 0, "rdma_accept: %s", strerror(errno));
	cm_put(s, id->qp->qp_num);
	/* neither the garbage nor the resent request raised anything */
	cm_expect_none(ch, 300, "after garbage and a resent request");
	cm_sync(s, 0x5a5a);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
}

static void cli_wire(struct cm_side *s)
{
	uint16_t port = cm_get_port(s);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint8_t f[512], rep[512], rep2[512];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n, n2;
	size_t len;
	uint32_t srv_qpn;

	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "UDP socket");
	/* malformed requests: dropped, never answered, never an event */
	len = sidr_frame(f, 1, 7, 1, 1, 0, "x");
	CHECK(send(fd, f, 0, 0) == 0, "send empty");
	CHECK(send(fd, f, 19, 0) == 19, "send short");
	f[0] = 0x54;
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send bad magic");
	len = sidr_frame(f, 1, 7, 1, 1, 0, "x");
	f[2] = 2;
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send bad version");
	len = sidr_frame(f, 3, 7, 1, 1, 0, "x");
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send bad type");
	len = sidr_frame(f, 1, 7, 1, 1, 1, "x");
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send a status in a request");
	len = sidr_frame(f, 1, 7, 0x1000000, 1, 0, "x");
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send a 25-bit QPN");
	len = sidr_frame(f, 1, 7, 1, 1, 0, "xy");
	CHECK(send(fd, f, len - 1, 0) == (ssize_t)len - 1, "send a length mismatch");
	len = sidr_frame(f, 2, 7, 1, 1, 0, "x");
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "send a reply to the listener");
	memset(f, 0xff, sizeof(f));
	CHECK(send(fd, f, sizeof(f), 0) == (ssize_t)sizeof(f), "send 512 bytes of 0xff");
	/* the real one, twice (a resend): one request */
	len = sidr_frame(f, 1, 0xabcdef01, 0x123456, 0x1111, 0, "hi!");
	CHECK(send(fd, f, len, 0) == (ssize_t)len && send(fd, f, len, 0) == (ssize_t)len,
	      "send request");
	CHECK(poll(&pfd, 1, CM_EVENT_MS) == 1, "no SIDR reply");
	n = recv(fd, rep, sizeof(rep), 0);
	srv_qpn = (uint32_t)cm_getv(s);
	CHECK(n == 22, "reply of %zd bytes, want 22", n);
	CHECK(rep[0] == 0x53 && rep[1] == 0x43 && rep[2] == 1 && rep[3] == 2, "reply header");
	CHECK(rd32(rep + 4) == 0xabcdef01, "reply tid");
	CHECK(rd32(rep + 8) == srv_qpn, "reply qpn");
	CHECK(rd32(rep + 12) == RDMA_UDP_QKEY, "reply qkey");
	CHECK(rep[16] == 0 && rep[17] == 2 && !memcmp(rep + 20, "ok", 2), "reply status/data");
	/* a request resent after the answer is answered again, the same */
	CHECK(send(fd, f, len, 0) == (ssize_t)len, "resend request");
	while (poll(&pfd, 1, CM_EVENT_MS) == 1) {
		n2 = recv(fd, rep2, sizeof(rep2), 0);
		CHECK(n2 == n && !memcmp(rep, rep2, (size_t)n), "the second reply differs");
		if (poll(&pfd, 1, 200) == 0)
			break;
	}
	cm_sync(s, 0x5a5a);
	close(fd);
}

static void sub_wire(void)
{
	cm_fork_run("127.0.0.1", srv_wire, cli_wire);
}

/* ---- multicast ------------------------------------------------------------ */

struct mc_node {
	struct rdma_cm_id *id;
	struct cm_buf b;
	struct ibv_ah *ah;
	uint32_t qpn, qkey;
};

static void mc_join(struct rdma_event_channel *ch, struct mc_node *n, bool sendonly,
		    const char *what)
{
	struct cm_addr src, grp;
	struct rdma_cm_event *ev;
	union ibv_gid mgid;

	CHECK(rdma_create_id(ch, &n->id, n, RDMA_PS_UDP) == 0, "%s: create id", what);
	cm_addr_make(&src, "127.0.0.1", 0);
	cm_addr_make(&grp, g_group, 0);
	CHECK(rdma_bind_addr(n->id, cm_sa(&src)) == 0, "%s: bind: %s", what, strerror(errno));
	CHECK(rdma_resolve_addr(n->id, cm_sa(&src), cm_sa(&grp), CM_RESOLVE_MS) == 0,
	      "%s: resolve the group: %s", what, strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, what);
	ud_create_qp(n->id, what);
	cm_buf_alloc(&n->b, n->id->pd, BUF_LEN);
	for (int i = 0; i < 4; i++)
		cm_post_recv(n->id, (uint64_t)i, &n->b, (size_t)i * SLOT, SLOT);
	if (sendonly) {
		struct rdma_cm_join_mc_attr_ex x = {
			.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
			.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
			.addr = cm_sa(&grp),
		};

		CHECK(rdma_join_multicast_ex(n->id, &x, n) == 0, "%s: join_ex: %s", what,
		      strerror(errno));
	} else {
		CHECK(rdma_join_multicast(n->id, cm_sa(&grp), n) == 0, "%s: join: %s", what,
		      strerror(errno));
	}
	ev = cm_expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, 0, what);
	CHECK(ev->id == n->id, "%s: MULTICAST_JOIN for another id", what);
	CHECK(ev->param.ud.private_data == n, "%s: private_data %p is not the join context %p",
	      what, ev->param.ud.private_data, (void *)n);
	CHECK(ev->param.ud.qp_num == MC_QPN, "%s: qp_num %#x", what, ev->param.ud.qp_num);
	CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY, "%s: qkey %#x", what, ev->param.ud.qkey);
	CHECK(ev->param.ud.ah_attr.is_global, "%s: AH not global", what);
	cm_fill_want(&mgid, cm_sa(&grp));
	CHECK(!memcmp(&ev->param.ud.ah_attr.grh.dgid, &mgid, sizeof(mgid)),
	      "%s: dgid is not ::ffff:%s", what, g_group);
	check_gid(n->id, ev->param.ud.ah_attr.grh.sgid_index,
		  &(union ibv_gid){ .raw = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 } }, what);
	n->ah = ibv_create_ah(n->id->pd, &ev->param.ud.ah_attr);
	CHECK(n->ah, "%s: ibv_create_ah from MULTICAST_JOIN: %s", what, strerror(errno));
	n->qpn = ev->param.ud.qp_num;
	n->qkey = ev->param.ud.qkey;
	cm_ack(ev);
}

static void mc_done(struct mc_node *n)
{
	ibv_destroy_ah(n->ah);
	cm_buf_free(&n->b);
	rdma_destroy_qp(n->id);
	CHECK(rdma_destroy_id(n->id) == 0, "destroy a multicast id");
}

enum { MC_JOINED = 0x4c01, MC_SENT1, MC_LEFT, MC_SENT2, MC_DONE };

static void mc_receivers(struct cm_side *s)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct mc_node r[2] = { 0 };
	struct cm_addr grp;
	struct ibv_wc wc;
	uint32_t snd_qpn;

	CHECK(ch, "channel");
	mc_join(ch, &r[0], false, "receiver 1");
	mc_join(ch, &r[1], false, "receiver 2");
	cm_put(s, MC_JOINED);
	snd_qpn = (uint32_t)cm_getv(s);
	CHECK(cm_getv(s) == MC_SENT1, "sender: sent");
	recv_ud(r[0].id, &r[0].b, 0, 21, snd_qpn, &wc, "receiver 1, datagram 1");
	recv_ud(r[1].id, &r[1].b, 0, 21, snd_qpn, &wc, "receiver 2, datagram 1");
	cm_addr_make(&grp, g_group, 0);
	CHECK(rdma_leave_multicast(r[1].id, cm_sa(&grp)) == 0, "leave: %s", strerror(errno));
	CHECK(rdma_leave_multicast(r[1].id, cm_sa(&grp)) && errno == EADDRNOTAVAIL,
	      "a second leave: errno %d", errno);
	cm_put(s, MC_LEFT);
	CHECK(cm_getv(s) == MC_SENT2, "sender: sent again");
	recv_ud(r[0].id, &r[0].b, 1, 22, snd_qpn, &wc, "receiver 1, datagram 2");
	expect_no_wc(r[1].id->recv_cq, 300, "receiver 2 after leaving");
	cm_put(s, MC_DONE);
	/* receiver 1 is still joined: destroying its id leaves */
	mc_done(&r[0]);
	mc_done(&r[1]);
	rdma_destroy_event_channel(ch);
}

static void mc_sender(struct cm_side *s)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct mc_node n = { 0 };

	CHECK(ch, "channel");
	CHECK(cm_getv(s) == MC_JOINED, "receivers joined");
	mc_join(ch, &n, true, "send-only sender");
	cm_put(s, n.id->qp->qp_num);
	send_ud(n.id, &n.b, n.ah, n.qpn, n.qkey, 21, 300);
	cm_put(s, MC_SENT1);
	/* send-only: not attached, so it does not hear its own datagram */
	expect_no_wc(n.id->recv_cq, 300, "the send-only member");
	CHECK(cm_getv(s) == MC_LEFT, "receiver 2 left");
	send_ud(n.id, &n.b, n.ah, n.qpn, n.qkey, 22, 301);
	cm_put(s, MC_SENT2);
	CHECK(cm_getv(s) == MC_DONE, "receivers done");
	mc_done(&n);
	rdma_destroy_event_channel(ch);
}

static void sub_mcast(void)
{
	cm_fork_run("127.0.0.1", mc_receivers, mc_sender);
}

static void sub_join_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *rc, *ud;
	struct cm_addr src, grp, uni;
	struct rdma_cm_join_mc_attr_ex x = { 0 };

	CHECK(ch, "channel");
	cm_addr_make(&src, "127.0.0.1", 0);
	cm_addr_make(&grp, g_group, 0);
	cm_addr_make(&uni, "127.0.0.2", 0);
	CHECK(rdma_create_id(ch, &rc, NULL, RDMA_PS_TCP) == 0, "RC id");
	CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0, "UD id");
	CHECK(rdma_join_multicast(ud, cm_sa(&grp), NULL) && errno == EINVAL,
	      "join on an unbound id: errno %d", errno);
	CHECK(rdma_bind_addr(rc, cm_sa(&src)) == 0 && rdma_bind_addr(ud, cm_sa(&src)) == 0, "bind");
	CHECK(rdma_join_multicast(rc, cm_sa(&grp), NULL) && errno == EINVAL,
	      "join on an RC id: errno %d", errno);
	CHECK(rdma_join_multicast(ud, cm_sa(&uni), NULL) && errno == EINVAL,
	      "join of a unicast address: errno %d", errno);
	x.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	x.addr = cm_sa(&grp);
	CHECK(rdma_join_multicast_ex(ud, &x, NULL) && errno == EINVAL, "join_ex without flags");
	x.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	x.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	CHECK(rdma_join_multicast_ex(ud, &x, NULL) && errno == EINVAL, "join_ex, bad flags");
	CHECK(rdma_leave_multicast(ud, cm_sa(&grp)) && errno == EADDRNOTAVAIL,
	      "leave before joining: errno %d", errno);
	/* no QP yet: the join completes, nothing to attach */
	CHECK(rdma_join_multicast(ud, cm_sa(&grp), (void *)0x77) == 0, "join: %s", strerror(errno));
	CHECK(rdma_join_multicast(ud, cm_sa(&grp), NULL) && errno == EADDRINUSE, "join twice");
	{
		struct rdma_cm_event *ev = cm_expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, 0, "join");

		CHECK(ev->param.ud.private_data == (void *)0x77, "join context");
		cm_ack(ev);
	}
	CHECK(rdma_leave_multicast(ud, cm_sa(&grp)) == 0, "leave: %s", strerror(errno));
	cm_expect_none(ch, 100, "after leave");
	CHECK(rdma_destroy_id(rc) == 0 && rdma_destroy_id(ud) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	static const struct subtest tests[] = {
		SUBTEST(sub_connect_v4), SUBTEST(sub_connect_v6), SUBTEST(sub_reject),
		SUBTEST(sub_no_listener), SUBTEST(sub_sync), SUBTEST(sub_wire), SUBTEST(sub_mcast),
		SUBTEST(sub_join_errors),
	};
	char port[16];

	/* a group and port of our own, so parallel runs do not meet */
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	snprintf(g_group, sizeof(g_group), "239.255.%d.%d", rand() % 256, 1 + rand() % 250);
	snprintf(port, sizeof(port), "%d", 20000 + rand() % 20000);
	setenv("SOFTRNIC_UD_MCAST_PORT", port, 1);
	setenv("SOFTRNIC_UD_MCAST_IF", "lo", 1);
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
