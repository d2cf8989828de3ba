/* Connection manager between two processes (fork: the child listens, the
 * parent connects), on 127.0.0.1 and ::1: connect / accept / reject with
 * private data both ways, negotiated RDMA read depths, ESTABLISHED and
 * DISCONNECTED on both sides, QP states driven by the CM, receives posted
 * before the connection, SEND / RDMA WRITE / RDMA READ with the rkeys
 * carried in the private data, own QPs (rdma_init_qp_attr,
 * CONNECT_RESPONSE, rdma_establish), ECE, rdma_migrate_id, many
 * connections on one listener, the synchronous rdma_create_ep API, XRC
 * through the CM (rdma_create_ep with XRC_SEND / XRC_RECV, an XRC SRQ
 * named in the private data), and teardown in several orders.
 *
 *   cm_conn [SUBTEST...]              every (or the named) subtest, forked
 *   cm_conn --server PORT             the passive side of the remote cases,
 *                                     out-of-band stream on TCP PORT
 *   cm_conn --client ADDR PORT        the active side, CM to ADDR
 * (the last two are how tests/integration/netns.sh runs one side in each
 * network namespace).
 */
#include "cm_common.h"

/* What each side asks for, distinct so that a swap shows. */
#define CLI_INIT_DEPTH 3
#define CLI_RESP_RES 2
#define SRV_RESP_RES 4
#define SRV_INIT_DEPTH 1

#define TAG_REQ 0x1001u
#define TAG_REP 0x2002u
#define TAG_REJ 0x3003u

#define BUF_LEN (64 * KIB)
/* Offsets inside each side's buffer. */
#define OFF_RECV1 0          /* first receive (4 KiB) */
#define OFF_SEND 4096        /* outgoing SEND payload */
#define OFF_WRITE 8192       /* the peer's RDMA WRITE lands here (8 KiB) */
#define OFF_READSRC 16384    /* the peer RDMA READs from here (8 KiB) */
#define OFF_READDST 32768    /* our RDMA READ lands here */
#define OFF_WSRC 40960       /* source of our RDMA WRITE (8 KiB) */
#define OFF_SPARE 49152      /* receives that the disconnect flushes */

enum { SEED_C2S = 1, SEED_S2C, SEED_WRITE, SEED_SRV_SRC, SEED_CLI_SRC };

static const char *g_addr_v4 = "127.0.0.1";
static const char *g_addr_v6 = "::1";

static void check_rts(struct rdma_cm_id *id, const char *who)
{
	CHECK(wait_qp_state(id->qp, IBV_QPS_RTS, 2000),
	      "%s: QP state %d after ESTABLISHED, want RTS (%d)", who,
	      qp_state(id->qp), IBV_QPS_RTS);
}

static void post_read(struct rdma_cm_id *id, uint64_t wr_id,
		      struct cm_buf *b, size_t off, uint32_t len,
		      uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	CHECK(rdma_post_read(id, (void *)(uintptr_t)wr_id, b->p + off, len,
			     b->mr, IBV_SEND_SIGNALED, raddr, rkey) == 0,
	      "rdma_post_read: %s", strerror(errno));
	expect_wc(id->send_cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
		  "RDMA READ");
}

static void post_write(struct rdma_cm_id *id, uint64_t wr_id,
		       struct cm_buf *b, size_t off, uint32_t len,
		       uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	CHECK(rdma_post_write(id, (void *)(uintptr_t)wr_id, b->p + off, len,
			      b->mr, IBV_SEND_SIGNALED, raddr, rkey) == 0,
	      "rdma_post_write: %s", strerror(errno));
	expect_wc(id->send_cq, &wc, wr_id, IBV_WC_SUCCESS,
		  IBV_WC_RDMA_WRITE, "RDMA WRITE");
}

/* After DISCONNECTED: the CM moved the QP to ERROR and the receives still
 * posted come back flushed. */
static void check_flushed(struct rdma_cm_id *id, uint64_t first, int n,
			  const char *who)
{
	struct ibv_wc wc;

	CHECK(wait_qp_state(id->qp, IBV_QPS_ERR, 2000),
	      "%s: QP state %d after DISCONNECTED, want ERR (%d)", who,
	      qp_state(id->qp), IBV_QPS_ERR);
	for (int i = 0; i < n; i++)
		expect_wc(id->recv_cq, &wc, first + (uint64_t)i,
			  IBV_WC_WR_FLUSH_ERR, -1, "flushed receive");
	expect_no_wc(id->recv_cq, 50, "after the flushed receives");
}

/* ---- connect, move data both ways, disconnect ------------------------- */

static void full_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };

	uint16_t port = cm_listen(s, &ch, &lid, 4, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	struct rdma_conn_param req = ev->param.conn;
	CHECK(req.responder_resources == CLI_INIT_DEPTH,
	      "CONNECT_REQUEST responder_resources %u, want the client's "
	      "initiator_depth %u",
	      req.responder_resources, CLI_INIT_DEPTH);
	CHECK(req.initiator_depth == CLI_RESP_RES,
	      "CONNECT_REQUEST initiator_depth %u, want the client's "
	      "responder_resources %u",
	      req.initiator_depth, CLI_RESP_RES);
	struct cm_pdata cp = cm_pdata_get(&req, TAG_REQ, "CONNECT_REQUEST");
	CHECK(cp.rkey && cp.addr && cp.len == BUF_LEN,
	      "client buffer in the request: addr %#llx rkey %#x len %u",
	      (unsigned long long)cp.addr, cp.rkey, cp.len);
	CHECK(ntohs(rdma_get_src_port(id)) == port,
	      "child src port %u, listener's %u", ntohs(rdma_get_src_port(id)),
	      port);
	CHECK(rdma_get_dst_port(id) != 0, "child has no dst port");
	struct sockaddr *peer = rdma_get_peer_addr(id);
	CHECK(peer->sa_family == AF_INET || peer->sa_family == AF_INET6,
	      "child's peer address family %d", peer->sa_family);
	CHECK(cm_sa_port(peer) == ntohs(rdma_get_dst_port(id)),
	      "peer address port %u, dst port %u", cm_sa_port(peer),
	      ntohs(rdma_get_dst_port(id)));
	cm_put(s, ntohs(rdma_get_dst_port(id)));
	cm_ack(ev);

	cm_create_qp(id, "server");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	fill_pattern(b.p + OFF_READSRC, 8192, SEED_SRV_SRC);
	/* receives before accept: the client's SEND, its fence, 2 spare */
	cm_post_recv(id, 11, &b, OFF_RECV1, 4096);
	cm_post_recv(id, 12, &b, OFF_SPARE, 64);
	cm_post_recv(id, 13, &b, OFF_SPARE + 64, 64);
	cm_post_recv(id, 14, &b, OFF_SPARE + 128, 64);
	struct cm_pdata rp = cm_pdata_make(TAG_REP, b.mr);
	struct rdma_conn_param acc = { .private_data = &rp,
				       .private_data_len = sizeof(rp),
				       .responder_resources = SRV_RESP_RES,
				       .initiator_depth = SRV_INIT_DEPTH,
				       .rnr_retry_count = 7 };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "server ESTABLISHED");
	CHECK(ev->id == id, "ESTABLISHED for id %p, want the child %p",
	      (void *)ev->id, (void *)id);
	cm_ack(ev);
	check_rts(id, "server");

	/* SEND client -> server, server -> client */
	cm_recv_check(id, 11, &b, OFF_RECV1, 4096, SEED_C2S,
		      "client's SEND (receive posted before accept)");
	fill_pattern(b.p + OFF_SEND, 3000, SEED_S2C);
	cm_send(id, 21, &b, OFF_SEND, 3000);
	/* the client's RDMA WRITE, fenced by a zero-byte SEND */
	struct ibv_wc wc;
	expect_wc(id->recv_cq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_RECV,
		  "fence after the client's WRITE");
	check_pattern(b.p + OFF_WRITE, 8192, SEED_WRITE,
		      "client's RDMA WRITE into the server");
	/* READ and WRITE the client's buffer, with its rkey */
	post_read(id, 22, &b, OFF_READDST, 8192, cp.addr + OFF_READSRC,
		  cp.rkey);
	check_pattern(b.p + OFF_READDST, 8192, SEED_CLI_SRC,
		      "server's RDMA READ of the client");
	/* what the READ fetched goes back: the client finds its own data */
	post_write(id, 23, &b, OFF_READDST, 8192, cp.addr + OFF_WRITE,
		   cp.rkey);
	cm_sync(s, 0xd0);	/* client checks the WRITE, then disconnects */

	ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
		       "server DISCONNECTED");
	CHECK(ev->id == id, "DISCONNECTED for another id");
	cm_ack(ev);
	check_flushed(id, 13, 2, "server");
	cm_buf_free(&b);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy child");
	CHECK(rdma_destroy_id(lid) == 0, "destroy listener");
	cm_expect_none(ch, 50, "server channel at the end");
	rdma_destroy_event_channel(ch);
}

static void full_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };
	struct ibv_wc wc;

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, (void *)0xc11e);
	cm_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	fill_pattern(b.p + OFF_READSRC, 8192, SEED_CLI_SRC);
	cm_post_recv(id, 31, &b, OFF_RECV1, 4096);
	cm_post_recv(id, 32, &b, OFF_SPARE, 64);
	struct cm_pdata rq = cm_pdata_make(TAG_REQ, b.mr);
	struct rdma_conn_param cp = { .private_data = &rq,
				      .private_data_len = sizeof(rq),
				      .initiator_depth = CLI_INIT_DEPTH,
				      .responder_resources = CLI_RESP_RES,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	uint16_t seen = (uint16_t)cm_getv(s);
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "client ESTABLISHED");
	CHECK(ev->id == id && ev->id->context == (void *)0xc11e,
	      "ESTABLISHED for another id");
	struct rdma_conn_param rep = ev->param.conn;
	struct cm_pdata sp = cm_pdata_get(&rep, TAG_REP, "ESTABLISHED");
	CHECK(sp.rkey && sp.addr && sp.len == BUF_LEN,
	      "server buffer in the reply: addr %#llx rkey %#x len %u",
	      (unsigned long long)sp.addr, sp.rkey, sp.len);
	CHECK(rep.responder_resources == SRV_INIT_DEPTH &&
		      rep.initiator_depth == SRV_RESP_RES,
	      "ESTABLISHED responder_resources %u initiator_depth %u, want "
	      "the server's initiator_depth %u / responder_resources %u",
	      rep.responder_resources, rep.initiator_depth, SRV_INIT_DEPTH,
	      SRV_RESP_RES);
	cm_ack(ev);
	check_rts(id, "client");
	CHECK(ntohs(rdma_get_dst_port(id)) == port, "dst port %u, want %u",
	      ntohs(rdma_get_dst_port(id)), port);
	CHECK(ntohs(rdma_get_src_port(id)) == seen,
	      "src port %u, the server sees the client at port %u",
	      ntohs(rdma_get_src_port(id)), seen);

	fill_pattern(b.p + OFF_SEND, 4096, SEED_C2S);
	cm_send(id, 41, &b, OFF_SEND, 4096);
	cm_recv_check(id, 31, &b, OFF_RECV1, 3000, SEED_S2C,
		      "server's SEND (receive posted before connect)");
	fill_pattern(b.p + OFF_WSRC, 8192, SEED_WRITE);
	post_write(id, 42, &b, OFF_WSRC, 8192, sp.addr + OFF_WRITE, sp.rkey);
	CHECK(rdma_post_send(id, (void *)43, NULL, 0, NULL,
			     IBV_SEND_SIGNALED) == 0,
	      "post fence");
	expect_wc(id->send_cq, &wc, 43, IBV_WC_SUCCESS, IBV_WC_SEND, "fence");
	post_read(id, 44, &b, OFF_READDST, 8192, sp.addr + OFF_READSRC,
		  sp.rkey);
	check_pattern(b.p + OFF_READDST, 8192, SEED_SRV_SRC,
		      "client's RDMA READ of the server");
	cm_sync(s, 0xd0);
	check_pattern(b.p + OFF_WRITE, 8192, SEED_CLI_SRC,
		      "server's RDMA WRITE into the client");

	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s",
	      strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
		       "client DISCONNECTED");
	CHECK(ev->id == id, "DISCONNECTED for another id");
	cm_ack(ev);
	check_flushed(id, 32, 1, "client");
	/* teardown: MR, QP (and its CQs), id, channel */
	cm_buf_free(&b);
	rdma_destroy_qp(id);
	CHECK(!id->qp, "rdma_destroy_qp left id->qp set");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	cm_expect_none(ch, 50, "client channel at the end");
	rdma_destroy_event_channel(ch);
}

static void sub_connect_v4(void)
{
	cm_fork_run(g_addr_v4, full_server, full_client);
}

static void sub_connect_v6(void)
{
	cm_require_addr(g_addr_v6);
	cm_fork_run(g_addr_v6, full_server, full_client);
}

/* ---- what a CONNECT_REQUEST carries ------------------------------------ */

/* ABI.md §4 lists the request's conn param fields programs read. An MPA
 * request carries no QPN and no retry counts (the kernel's iWARP CM
 * reports none either), so softrnic reports qp_num 0 and retry and
 * rnr_retry 7, as docs/COMPAT.md says; srq is 0 for a QP without SRQ. */
static void fields_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	struct rdma_conn_param c = ev->param.conn;
	cm_ack(ev);
	uint32_t qpn = (uint32_t)cm_getv(s);
	CHECK(rdma_reject(id, NULL, 0) == 0, "rdma_reject: %s",
	      strerror(errno));
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	cm_sync(s, 0xf1);
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	NOTE("request: qp_num %#x (client QP %#x) srq %u retry %u rnr_retry "
	     "%u flow_control %u",
	     c.qp_num, qpn, c.srq, c.retry_count, c.rnr_retry_count,
	     c.flow_control);
	CHECK(c.qp_num == 0, "CONNECT_REQUEST qp_num %#x (the client's QP is %#x): "
	      "an MPA request names none", c.qp_num, qpn);
	CHECK(c.srq == 0, "CONNECT_REQUEST srq %u for a QP without SRQ",
	      c.srq);
	CHECK(c.retry_count == 7 && c.rnr_retry_count == 7,
	      "CONNECT_REQUEST retry_count %u rnr_retry_count %u, want 7 / 7 "
	      "(docs/COMPAT.md)",
	      c.retry_count, c.rnr_retry_count);
}

static void fields_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 5,
				      .rnr_retry_count = 6 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	cm_put(s, id->qp->qp_num);
	struct rdma_cm_event *ev = cm_expect(
		ch, RDMA_CM_EVENT_REJECTED, CM_REJ_CONSUMER_DEFINED, "REJECTED");
	cm_ack(ev);
	cm_sync(s, 0xf1);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_request_fields(void)
{
	cm_fork_run(g_addr_v4, fields_server, fields_client);
}

/* ---- reject ------------------------------------------------------------ */

static int g_use_ece_reject;

static void reject_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	uint8_t pd[CM_PDATA_REJ_MAX + 1];

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	cm_pdata_get(&ev->param.conn, TAG_REQ, "CONNECT_REQUEST");
	cm_ack(ev);
	fill_pattern(pd, sizeof(pd), TAG_REJ);
	errno = 0;
	CHECK(rdma_reject(id, pd, CM_PDATA_REJ_MAX + 1) == -1 &&
		      errno == EINVAL,
	      "rdma_reject with %d bytes of private data: want -1/EINVAL, "
	      "got errno %d",
	      CM_PDATA_REJ_MAX + 1, errno);
	if (g_use_ece_reject)
		CHECK(rdma_reject_ece(id, pd, 100) == 0,
		      "rdma_reject_ece: %s", strerror(errno));
	else
		CHECK(rdma_reject(id, pd, 100) == 0, "rdma_reject: %s",
		      strerror(errno));
	CHECK(rdma_destroy_id(id) == 0, "destroy the rejected id");
	cm_sync(s, 0xe1);
	cm_expect_none(ch, 100, "after a reject");
	CHECK(rdma_destroy_id(lid) == 0, "destroy listener");
	rdma_destroy_event_channel(ch);
}

static void reject_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	struct cm_pdata rq = cm_pdata_make(TAG_REQ, NULL);
	struct rdma_conn_param cp = { .private_data = &rq,
				      .private_data_len = sizeof(rq),
				      .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	int want = g_use_ece_reject ? CM_REJ_VENDOR_OPTION_NOT_SUPPORTED :
				      CM_REJ_CONSUMER_DEFINED;
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, want, "REJECTED");
	CHECK(ev->id == id, "REJECTED for another id");
	CHECK(ev->param.conn.private_data &&
		      ev->param.conn.private_data_len >= 100,
	      "REJECTED private data: %p len %u, want 100 bytes",
	      ev->param.conn.private_data, ev->param.conn.private_data_len);
	check_pattern(ev->param.conn.private_data, 100, TAG_REJ,
		      "reject private data");
	cm_ack(ev);
	cm_sync(s, 0xe1);
	cm_expect_none(ch, 100, "after REJECTED");
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_reject(void)
{
	g_use_ece_reject = 0;
	cm_fork_run(g_addr_v4, reject_server, reject_client);
}

static void sub_reject_ece(void)
{
	g_use_ece_reject = 1;
	cm_fork_run(g_addr_v4, reject_server, reject_client);
}

/* ---- nobody listening --------------------------------------------------- */

/* A port nobody listens on: REJECTED with reason 8 (invalid service ID),
 * as rdma-core over RoCE reports it and docs/COMPAT.md (rdma_connect)
 * promises. (Over iWARP the kernel would say REJECTED or UNREACHABLE with
 * -ECONNREFUSED; softrnic presents a RoCE device.) */
static void sub_no_listener(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct cm_addr a;

	/* a port that was free a moment ago and that nobody listens on */
	cm_addr_make(&a, g_addr_v4, 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t len = a.len;
	CHECK(fd >= 0 && bind(fd, cm_sa(&a), a.len) == 0 &&
		      getsockname(fd, cm_sa(&a), &len) == 0,
	      "pick a port");
	uint16_t port = cm_sa_port(cm_sa(&a));
	struct cm_side s = { .fd = -1, .addr = g_addr_v4 };

	/* keep the socket bound (not listening): nobody else gets the port */
	cm_resolve(&s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = cm_get(ch, CM_EVENT_MS, "no listener");
	CHECK(ev->event == RDMA_CM_EVENT_REJECTED &&
		      ev->status == CM_REJ_INVALID_SERVICE_ID,
	      "connect to a port with no listener: %s status %d; want "
	      "REJECTED status 8",
	      rdma_event_str(ev->event), ev->status);
	CHECK(ev->id == id, "REJECTED for another id");
	cm_ack(ev);
	close(fd);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

/* ---- private data at and over the limits ------------------------------ */

static void limits_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	uint8_t pd[CM_PDATA_REP_MAX + 1];

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	CHECK(ev->param.conn.private_data_len >= CM_PDATA_REQ_MAX,
	      "request private_data_len %u, want %d",
	      ev->param.conn.private_data_len, CM_PDATA_REQ_MAX);
	check_pattern(ev->param.conn.private_data, CM_PDATA_REQ_MAX, 0x56,
		      "56 bytes of request private data");
	cm_ack(ev);
	cm_create_qp(id, "server");
	fill_pattern(pd, sizeof(pd), 0xc4);
	struct rdma_conn_param acc = { .private_data = pd,
				       .private_data_len = sizeof(pd),
				       .responder_resources = 1,
				       .initiator_depth = 1 };
	errno = 0;
	CHECK(rdma_accept(id, &acc) == -1 && errno == EINVAL,
	      "rdma_accept with %zu bytes of private data: want -1/EINVAL, "
	      "got errno %d",
	      sizeof(pd), errno);
	acc.private_data_len = CM_PDATA_REP_MAX;
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept with %d bytes: %s",
	      CM_PDATA_REP_MAX, strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
	cm_expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, "server DISCONNECTED");
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void limits_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	uint8_t pd[CM_PDATA_REQ_MAX + 1];

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	fill_pattern(pd, sizeof(pd), 0x56);
	struct rdma_conn_param cp = { .private_data = pd,
				      .private_data_len = sizeof(pd),
				      .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL,
	      "rdma_connect with %zu bytes: want -1/EINVAL, got errno %d",
	      sizeof(pd), errno);
	cp.private_data_len = CM_PDATA_REQ_MAX;
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect with %d bytes: %s",
	      CM_PDATA_REQ_MAX, strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "client ESTABLISHED");
	CHECK(ev->param.conn.private_data_len >= CM_PDATA_REP_MAX,
	      "reply private_data_len %u, want %d",
	      ev->param.conn.private_data_len, CM_PDATA_REP_MAX);
	check_pattern(ev->param.conn.private_data, CM_PDATA_REP_MAX, 0xc4,
		      "196 bytes of reply private data");
	cm_ack(ev);
	cm_close(ch, id, 1);
	rdma_destroy_event_channel(ch);
}

static void sub_pdata_limits(void)
{
	cm_fork_run(g_addr_v4, limits_server, limits_client);
}

/* ---- own QPs: rdma_init_qp_attr, CONNECT_RESPONSE, rdma_establish ----- */

static int g_ece;
#define ECE_CLI_VENDOR 0x15b3u
#define ECE_CLI_OPTS 0x5u
#define ECE_SRV_OPTS 0x1u

struct own {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct cm_buf b;
};

static void own_create(struct rdma_cm_id *id, struct own *o)
{
	o->pd = ibv_alloc_pd(id->verbs);
	CHECK(o->pd, "ibv_alloc_pd: %s", strerror(errno));
	o->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	CHECK(o->cq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr a = cm_qp_attr();
	a.send_cq = a.recv_cq = o->cq;
	o->qp = ibv_create_qp(o->pd, &a);
	CHECK(o->qp, "ibv_create_qp: %s", strerror(errno));
	cm_buf_alloc(&o->b, o->pd, BUF_LEN);
	CHECK(!id->qp, "an own QP must not appear in id->qp");
}

static void own_modify(struct rdma_cm_id *id, struct own *o,
		       enum ibv_qp_state st)
{
	struct ibv_qp_attr a = { .qp_state = st };
	int mask = 0;

	CHECK(rdma_init_qp_attr(id, &a, &mask) == 0,
	      "rdma_init_qp_attr(state %d): %s", st, strerror(errno));
	CHECK(a.qp_state == st && (mask & IBV_QP_STATE),
	      "rdma_init_qp_attr(state %d) gave state %d mask %#x", st,
	      a.qp_state, mask);
	int rc = ibv_modify_qp(o->qp, &a, mask);
	CHECK(rc == 0, "ibv_modify_qp to %d with rdma_init_qp_attr's mask "
		       "%#x: %s",
	      st, mask, strerror(rc));
	CHECK(qp_state(o->qp) == st, "QP state %d, want %d", qp_state(o->qp),
	      st);
}

static void own_destroy(struct own *o)
{
	cm_buf_free(&o->b);
	CHECK(ibv_destroy_qp(o->qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(o->cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dealloc_pd(o->pd) == 0, "ibv_dealloc_pd");
}

static void own_recv(struct own *o, uint64_t wr_id, size_t off, uint32_t len)
{
	post_recv1(o->qp, wr_id, o->b.p + off, len, o->b.mr->lkey);
}

static void own_send(struct own *o, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_wc wc;

	CHECK(post_send1(o->qp, IBV_WR_SEND, wr_id, o->b.p + off, len,
			 o->b.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
	      "post SEND");
	expect_wc(o->cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, "own SEND");
}

static void own_expect_recv(struct own *o, uint64_t wr_id, size_t off,
			    uint32_t len, uint32_t seed, const char *what)
{
	struct ibv_wc wc;

	expect_wc(o->cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, what);
	CHECK(wc.byte_len == len, "%s: byte_len %u", what, wc.byte_len);
	check_pattern(o->b.p + off, len, seed, what);
}

static void own_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct own o = { 0 };

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	struct cm_pdata cp =
		cm_pdata_get(&ev->param.conn, TAG_REQ, "CONNECT_REQUEST");
	cm_ack(ev);
	if (g_ece) {
		struct ibv_ece e = { 0 };
		CHECK(rdma_get_remote_ece(id, &e) == 0,
		      "rdma_get_remote_ece: %s", strerror(errno));
		e.vendor_id = ECE_CLI_VENDOR;
		e.options = ECE_SRV_OPTS;
		CHECK(rdma_set_local_ece(id, &e) == 0,
		      "rdma_set_local_ece: %s", strerror(errno));
	}
	own_create(id, &o);
	fill_pattern(o.b.p + OFF_READSRC, 8192, SEED_SRV_SRC);
	own_modify(id, &o, IBV_QPS_INIT);
	own_recv(&o, 11, OFF_RECV1, 4096);
	own_modify(id, &o, IBV_QPS_RTR);
	own_modify(id, &o, IBV_QPS_RTS);
	struct cm_pdata rp = cm_pdata_make(TAG_REP, o.b.mr);
	struct rdma_conn_param acc = { .private_data = &rp,
				       .private_data_len = sizeof(rp),
				       .responder_resources = 1,
				       .initiator_depth = 1,
				       .qp_num = o.qp->qp_num };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	/* ESTABLISHED once the client calls rdma_establish */
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
	own_expect_recv(&o, 11, OFF_RECV1, 2048, SEED_C2S, "client's SEND");
	fill_pattern(o.b.p + OFF_SEND, 1000, SEED_S2C);
	own_send(&o, 21, OFF_SEND, 1000);
	(void)cp;
	cm_expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, "server DISCONNECTED");
	own_destroy(&o);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void own_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct own o = { 0 };

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	if (g_ece) {
		struct ibv_ece e = { .vendor_id = ECE_CLI_VENDOR,
				     .options = ECE_CLI_OPTS };
		CHECK(rdma_set_local_ece(id, &e) == 0,
		      "rdma_set_local_ece: %s", strerror(errno));
	}
	own_create(id, &o);
	own_modify(id, &o, IBV_QPS_INIT);
	own_recv(&o, 31, OFF_RECV1, 4096);
	struct cm_pdata rq = cm_pdata_make(TAG_REQ, o.b.mr);
	struct rdma_conn_param cp = { .private_data = &rq,
				      .private_data_len = sizeof(rq),
				      .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7,
				      .qp_num = o.qp->qp_num };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	/* no QP on the id: CONNECT_RESPONSE, not ESTABLISHED */
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, 0,
		       "CONNECT_RESPONSE (own QP)");
	struct cm_pdata sp =
		cm_pdata_get(&ev->param.conn, TAG_REP, "CONNECT_RESPONSE");
	cm_ack(ev);
	if (g_ece) {
		struct ibv_ece e = { 0 };
		CHECK(rdma_get_remote_ece(id, &e) == 0,
		      "rdma_get_remote_ece: %s", strerror(errno));
	}
	own_modify(id, &o, IBV_QPS_RTR);
	own_modify(id, &o, IBV_QPS_RTS);
	CHECK(rdma_establish(id) == 0, "rdma_establish: %s", strerror(errno));
	fill_pattern(o.b.p + OFF_SEND, 2048, SEED_C2S);
	own_send(&o, 41, OFF_SEND, 2048);
	own_expect_recv(&o, 31, OFF_RECV1, 1000, SEED_S2C, "server's SEND");
	/* the own QP's access flags come from rdma_init_qp_attr: a READ */
	struct ibv_wc wc;
	CHECK(post_send1(o.qp, IBV_WR_RDMA_READ, 42, o.b.p + OFF_READDST, 8192,
			 o.b.mr->lkey, IBV_SEND_SIGNALED,
			 sp.addr + OFF_READSRC, sp.rkey, 0) == 0,
	      "post READ");
	expect_wc(o.cq, &wc, 42, IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
		  "READ over an own QP");
	check_pattern(o.b.p + OFF_READDST, 8192, SEED_SRV_SRC,
		      "READ over an own QP");
	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s",
	      strerror(errno));
	ev = cm_get(ch, CM_EVENT_MS, "client DISCONNECTED");
	CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED,
	      "client after rdma_disconnect: %s", rdma_event_str(ev->event));
	cm_ack(ev);
	own_destroy(&o);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void sub_own_qp(void)
{
	g_ece = 0;
	cm_fork_run(g_addr_v4, own_server, own_client);
}

static void sub_ece(void)
{
	/* the calls refused once the id has a QP */
	struct rdma_cm_id *id;
	struct ibv_ece e = { .vendor_id = ECE_CLI_VENDOR, .options = 1 };
	struct cm_addr a;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "create");
	cm_addr_make(&a, g_addr_v4, 0);
	CHECK(rdma_bind_addr(id, cm_sa(&a)) == 0, "bind");
	CHECK(rdma_set_local_ece(id, &e) == 0, "set_local_ece, no QP: %s",
	      strerror(errno));
	cm_create_qp(id, "qp");
	errno = 0;
	CHECK(rdma_set_local_ece(id, &e) == -1 && errno == EINVAL,
	      "rdma_set_local_ece with id->qp: want -1/EINVAL, got errno %d",
	      errno);
	errno = 0;
	CHECK(rdma_get_remote_ece(id, &e) == -1 && errno == EINVAL,
	      "rdma_get_remote_ece with id->qp: want -1/EINVAL, got errno %d",
	      errno);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");

	/* set and get around a connection: both succeed (docs/COMPAT.md:
	 * the values are kept, not carried, so what comes back is not
	 * checked) */
	g_ece = 1;
	cm_fork_run(g_addr_v4, own_server, own_client);
}


/* ---- rdma_migrate_id: the accepted id's events move ------------------- */

static void migrate_server(struct cm_side *s)
{
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	cm_ack(ev);
	ch2 = rdma_create_event_channel();
	CHECK(ch2, "second channel");
	CHECK(rdma_migrate_id(id, ch2) == 0, "rdma_migrate_id: %s",
	      strerror(errno));
	CHECK(id->channel == ch2, "id->channel not the new channel");
	cm_create_qp(id, "server");
	cm_buf_alloc(&b, id->pd, 4096);
	cm_post_recv(id, 1, &b, 0, 4096);
	struct rdma_conn_param acc = { .responder_resources = 1,
				       .initiator_depth = 1 };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	ev = cm_expect(ch2, RDMA_CM_EVENT_ESTABLISHED, 0,
		       "ESTABLISHED on the new channel");
	CHECK(ev->id == id, "ESTABLISHED for another id");
	cm_ack(ev);
	cm_expect_none(ch, 100, "listener channel after the migration");
	cm_recv_check(id, 1, &b, 0, 512, 77, "SEND after migration");
	ev = cm_expect(ch2, RDMA_CM_EVENT_DISCONNECTED, 0,
		       "DISCONNECTED on the new channel");
	cm_ack(ev);
	cm_expect_none(ch, 50, "listener channel");
	cm_buf_free(&b);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	rdma_destroy_event_channel(ch2);
	/* and back: a listener moved to a new channel gets its requests there */
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void migrate_client(struct cm_side *s)
{
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_id *id;
	struct cm_buf b = { 0 };

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	/* the active side too: migrate before connecting */
	ch2 = rdma_create_event_channel();
	CHECK(ch2, "second channel");
	CHECK(rdma_migrate_id(id, ch2) == 0, "rdma_migrate_id: %s",
	      strerror(errno));
	rdma_destroy_event_channel(ch);	/* nothing refers to it any more */
	cm_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, 4096);
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	cm_expect_ack(ch2, RDMA_CM_EVENT_ESTABLISHED, "client ESTABLISHED");
	fill_pattern(b.p, 512, 77);
	cm_send(id, 2, &b, 0, 512);
	cm_buf_free(&b);
	cm_close(ch2, id, 1);
	rdma_destroy_event_channel(ch2);
}

static void sub_migrate(void)
{
	cm_fork_run(g_addr_v4, migrate_server, migrate_client);
}

/* ---- many connections on one listener ---------------------------------- */

#define NCONN 6

static int find_id(struct rdma_cm_id **ids, int n, struct rdma_cm_id *id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return i;
	return -1;
}

static void multi_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *ids[NCONN] = { 0 };
	struct cm_buf b[NCONN] = { 0 };
	int tag_of[NCONN];
	struct rdma_cm_event *ev;

	cm_listen(s, &ch, &lid, NCONN + 2, 0);
	/* requests and ESTABLISHED events interleave on the one channel */
	int nreq = 0, est = 0;
	while (nreq < NCONN || est < NCONN) {
		ev = cm_get(ch, CM_EVENT_MS, "accepting many");
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			CHECK(find_id(ids, nreq, ev->id) >= 0,
			      "ESTABLISHED for an unknown id");
			cm_ack(ev);
			est++;
			continue;
		}
		CHECK(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST,
		      "server: unexpected %s status %d",
		      rdma_event_str(ev->event), ev->status);
		CHECK(nreq < NCONN, "more than %d requests", NCONN);
		CHECK(ev->listen_id == lid && ev->id != lid,
		      "request: listen_id/id");
		int i = nreq++;
		struct cm_pdata p;
		CHECK(ev->param.conn.private_data_len >= sizeof(p),
		      "request %d: no private data", i);
		memcpy(&p, ev->param.conn.private_data, sizeof(p));
		int tag = (int)be32toh(p.tag) - 100;
		CHECK(tag >= 0 && tag < NCONN, "request %d: tag %d", i, tag);
		for (int j = 0; j < i; j++)
			CHECK(tag_of[j] != tag, "tag %d requested twice", tag);
		tag_of[i] = tag;
		ids[i] = ev->id;
		cm_ack(ev);
		cm_create_qp(ids[i], "server");
		cm_buf_alloc(&b[i], ids[i]->pd, 4096);
		cm_post_recv(ids[i], 1, &b[i], 0, 4096);
		struct cm_pdata rp = cm_pdata_make(1000 + (uint32_t)tag, NULL);
		struct rdma_conn_param acc = { .private_data = &rp,
					       .private_data_len = sizeof(rp),
					       .responder_resources = 1,
					       .initiator_depth = 1 };
		CHECK(rdma_accept(ids[i], &acc) == 0, "rdma_accept %d: %s", i,
		      strerror(errno));
	}
	for (int i = 0; i < NCONN; i++)
		cm_recv_check(ids[i], 1, &b[i], 0, 100 + (uint32_t)tag_of[i],
			      (uint32_t)tag_of[i], "SEND on its own connection");
	cm_sync(s, 0xa1);
	for (int n = 0; n < NCONN; n++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
			       "server DISCONNECTED");
		int i = find_id(ids, NCONN, ev->id);
		CHECK(i >= 0, "DISCONNECTED for an unknown id");
		cm_ack(ev);
		cm_buf_free(&b[i]);
		rdma_destroy_qp(ids[i]);
		CHECK(rdma_destroy_id(ids[i]) == 0, "destroy");
		ids[i] = NULL;
	}
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void multi_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *ids[NCONN];
	struct cm_buf b[NCONN] = { 0 };
	struct rdma_cm_event *ev;
	struct cm_addr a;

	uint16_t port = cm_get_port(s);
	ch = rdma_create_event_channel();
	CHECK(ch, "channel");
	cm_addr_make(&a, s->addr, port);
	for (int i = 0; i < NCONN; i++) {
		CHECK(rdma_create_id(ch, &ids[i], (void *)(uintptr_t)(i + 1),
				     RDMA_PS_TCP) == 0,
		      "create");
		CHECK(rdma_resolve_addr(ids[i], NULL, cm_sa(&a),
					CM_RESOLVE_MS) == 0,
		      "resolve");
	}
	/* the ids' events interleave: drive each one by what arrives */
	int est = 0;
	while (est < NCONN) {
		ev = cm_get(ch, CM_EVENT_MS, "connecting many ids");
		int i = find_id(ids, NCONN, ev->id);
		CHECK(i >= 0, "event %s for an unknown id",
		      rdma_event_str(ev->event));
		CHECK(ev->status == 0, "id %d: %s status %d", i,
		      rdma_event_str(ev->event), ev->status);
		if (ev->event == RDMA_CM_EVENT_ADDR_RESOLVED) {
			CHECK(rdma_resolve_route(ev->id, CM_RESOLVE_MS) == 0,
			      "route");
			cm_ack(ev);
		} else if (ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED) {
			cm_ack(ev);
			cm_create_qp(ids[i], "client");
			cm_buf_alloc(&b[i], ids[i]->pd, 4096);
			struct cm_pdata rq = cm_pdata_make(100 + (uint32_t)i, NULL);
			struct rdma_conn_param cp = {
				.private_data = &rq,
				.private_data_len = sizeof(rq),
				.initiator_depth = 1,
				.responder_resources = 1,
				.retry_count = 7,
				.rnr_retry_count = 7
			};
			CHECK(rdma_connect(ids[i], &cp) == 0,
			      "rdma_connect %d: %s", i, strerror(errno));
		} else {
			CHECK(ev->event == RDMA_CM_EVENT_ESTABLISHED,
			      "id %d: unexpected %s", i,
			      rdma_event_str(ev->event));
			CHECK(ev->id->context == (void *)(uintptr_t)(i + 1),
			      "context");
			cm_pdata_get(&ev->param.conn, 1000 + (uint32_t)i,
				     "reply on its own connection");
			cm_ack(ev);
			est++;
		}
	}
	for (int i = 0; i < NCONN; i++) {
		fill_pattern(b[i].p, 100 + (uint32_t)i, (uint32_t)i);
		cm_send(ids[i], 2, &b[i], 0, 100 + (uint32_t)i);
	}
	cm_sync(s, 0xa1);
	for (int i = 0; i < NCONN; i++)
		CHECK(rdma_disconnect(ids[i]) == 0, "disconnect %d", i);
	for (int n = 0; n < NCONN; n++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
			       "client DISCONNECTED");
		int i = find_id(ids, NCONN, ev->id);
		CHECK(i >= 0, "unknown id");
		cm_ack(ev);
	}
	for (int i = 0; i < NCONN; i++) {
		cm_buf_free(&b[i]);
		rdma_destroy_qp(ids[i]);
		CHECK(rdma_destroy_id(ids[i]) == 0, "destroy");
	}
	rdma_destroy_event_channel(ch);
}

static void sub_multi(void)
{
	cm_fork_run(g_addr_v4, multi_server, multi_client);
}

/* ---- the synchronous API: rdma_getaddrinfo + rdma_create_ep ---------- */

static void ep_server(struct cm_side *s)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct rdma_cm_id *lid, *id;
	struct ibv_qp_init_attr attr = cm_qp_attr();
	uint8_t buf[4096];
	struct ibv_wc wc;

	attr.sq_sig_all = 1;
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(s->addr, "0", &hints, &res) == 0,
	      "rdma_getaddrinfo: %s", strerror(errno));
	CHECK(rdma_create_ep(&lid, res, NULL, &attr) == 0,
	      "rdma_create_ep (passive): %s", strerror(errno));
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(lid, 2) == 0, "rdma_listen: %s", strerror(errno));
	cm_put_port(s, ntohs(rdma_get_src_port(lid)));

	CHECK(rdma_get_request(lid, &id) == 0, "rdma_get_request: %s",
	      strerror(errno));
	CHECK(id->qp, "rdma_get_request: the child has no QP though "
		      "rdma_create_ep had qp_init_attr");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST,
	      "child id->event does not hold the CONNECT_REQUEST");
	cm_pdata_get(&id->event->param.conn, TAG_REQ, "sync request");
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
	CHECK(mr, "rdma_reg_msgs: %s", strerror(errno));
	CHECK(rdma_post_recv(id, (void *)1, buf, sizeof(buf), mr) == 0,
	      "rdma_post_recv");
	CHECK(rdma_accept(id, NULL) == 0, "sync rdma_accept: %s",
	      strerror(errno));
	CHECK(qp_state(id->qp) == IBV_QPS_RTS,
	      "QP state %d when the sync accept returned", qp_state(id->qp));
	CHECK(rdma_get_recv_comp(id, &wc) == 1, "rdma_get_recv_comp: %s",
	      strerror(errno));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 1500 &&
		      wc.wr_id == 1,
	      "receive: status %s len %u", ibv_wc_status_str(wc.status),
	      wc.byte_len);
	check_pattern(buf, 1500, 61, "sync client's SEND");
	fill_pattern(buf, 700, 62);
	CHECK(rdma_post_send(id, (void *)2, buf, 700, mr, 0) == 0,
	      "rdma_post_send");
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "rdma_get_send_comp");
	cm_sync(s, 0xb1);
	rdma_disconnect(id);
	CHECK(rdma_dereg_mr(mr) == 0, "rdma_dereg_mr");
	rdma_destroy_ep(id);

	/* second request: rejected; the client's sync connect fails */
	CHECK(rdma_get_request(lid, &id) == 0, "rdma_get_request 2: %s",
	      strerror(errno));
	CHECK(rdma_reject(id, "no", 3) == 0, "rdma_reject: %s",
	      strerror(errno));
	rdma_destroy_ep(id);
	cm_sync(s, 0xb2);
	rdma_destroy_ep(lid);
}

static void ep_client(struct cm_side *s)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr attr = cm_qp_attr();
	uint8_t buf[4096];
	char port[8];
	struct ibv_wc wc;

	attr.sq_sig_all = 1;
	snprintf(port, sizeof(port), "%u", cm_get_port(s));
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(s->addr, port, &hints, &res) == 0,
	      "rdma_getaddrinfo: %s", strerror(errno));
	CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0,
	      "rdma_create_ep (active): %s", strerror(errno));
	CHECK(id->qp && id->pd && id->verbs && id->send_cq && id->recv_cq,
	      "active ep: qp %p pd %p", (void *)id->qp, (void *)id->pd);
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
	CHECK(mr, "rdma_reg_msgs");
	CHECK(rdma_post_recv(id, (void *)3, buf, sizeof(buf), mr) == 0,
	      "rdma_post_recv before connect");
	struct cm_pdata rq = cm_pdata_make(TAG_REQ, NULL);
	struct rdma_conn_param cp = { .private_data = &rq,
				      .private_data_len = sizeof(rq),
				      .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "sync rdma_connect: %s",
	      strerror(errno));
	CHECK(qp_state(id->qp) == IBV_QPS_RTS,
	      "QP state %d when the sync connect returned", qp_state(id->qp));
	uint8_t out[1500];
	fill_pattern(out, sizeof(out), 61);
	struct ibv_mr *omr = rdma_reg_msgs(id, out, sizeof(out));
	CHECK(omr, "rdma_reg_msgs out");
	CHECK(rdma_post_send(id, (void *)4, out, sizeof(out), omr, 0) == 0,
	      "rdma_post_send");
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.wr_id == 4,
	      "rdma_get_send_comp");
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.byte_len == 700 && wc.wr_id == 3,
	      "rdma_get_recv_comp: status %d len %u", wc.status, wc.byte_len);
	check_pattern(buf, 700, 62, "sync server's SEND");
	cm_sync(s, 0xb1);
	rdma_disconnect(id);
	CHECK(rdma_dereg_mr(omr) == 0 && rdma_dereg_mr(mr) == 0, "dereg");
	rdma_destroy_ep(id);

	/* rdma_create_ep filled the attr in with the CQs it made (as
	 * rdma-core does); they went with the ep: a fresh attr, as a
	 * program written for rdma-core must pass. */
	CHECK(attr.send_cq && attr.recv_cq, "rdma_create_ep did not report its CQs in the attr");
	attr = cm_qp_attr();
	attr.sq_sig_all = 1;
	CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0,
	      "rdma_create_ep 2: %s", strerror(errno));
	errno = 0;
	CHECK(rdma_connect(id, NULL) == -1 && errno == ECONNREFUSED,
	      "sync rdma_connect to a rejecting server: want "
	      "-1/ECONNREFUSED, got errno %d (%s)",
	      errno, strerror(errno));
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_REJECTED,
	      "id->event after a sync reject: %s",
	      id->event ? rdma_event_str(id->event->event) : "(none)");
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	cm_sync(s, 0xb2);
}

static void sub_create_ep(void)
{
	cm_fork_run(g_addr_v4, ep_server, ep_client);
}

/* ---- XRC through the CM: rdma_create_ep with XRC_SEND / XRC_RECV ------ */

/* As rdma_xserver / rdma_xclient -c x do it (rdma-core's librdmacm): the
 * address info asks for RDMA_PS_IB and an XRC QP type, rdma_create_ep
 * gives the ids that type, rdma_get_request makes the server's XRC_RECV
 * QP, rdma_create_srq on it an XRC SRQ completing into id->recv_cq, and
 * the server tells the client the SRQ number in the accept's private
 * data. SENDs from the client's XRC_SEND QP naming it land in that SRQ
 * and complete on id->recv_cq with qp_num = the XRC_RECV QP. A second
 * connection names an SRQ number nobody has: the requester gets
 * IBV_WC_REM_ACCESS_ERR and the XRC_RECV QP goes to ERROR, as with
 * hand-connected XRC (docs/COMPAT.md), and nothing lands. Teardown in
 * both orders (QP first via rdma_destroy_ep; SRQ first). */
#define XRC_BIG 3000
#define XRC_SMALL 16

static uint32_t xrc_srqn_get(struct rdma_cm_id *id)
{
	uint32_t n = 0;

	CHECK(ibv_get_srq_num(id->srq, &n) == 0 && n, "ibv_get_srq_num: %u",
	      n);
	return n;
}

/* One accepted XRC connection on the sync listener: XRC_RECV QP, XRC
 * SRQ with nrecv receives posted, accepted with the SRQ number. */
static struct rdma_cm_id *xrc_accept(struct rdma_cm_id *lid, uint8_t *buf,
				     size_t len, struct ibv_mr **mr, int nrecv)
{
	struct rdma_cm_id *id;
	struct ibv_qp_attr qa;
	int mask;

	CHECK(rdma_get_request(lid, &id) == 0, "rdma_get_request: %s",
	      strerror(errno));
	CHECK(id->qp_type == IBV_QPT_XRC_RECV && id->ps == RDMA_PS_IB,
	      "child id: qp_type %d ps %#x, want XRC_RECV on RDMA_PS_IB",
	      id->qp_type, id->ps);
	CHECK(id->qp && id->qp->qp_type == IBV_QPT_XRC_RECV,
	      "rdma_get_request: QP %p of type %d, want XRC_RECV",
	      (void *)id->qp, id->qp ? (int)id->qp->qp_type : -1);
	CHECK(qp_state(id->qp) == IBV_QPS_INIT, "XRC_RECV QP in state %d",
	      qp_state(id->qp));
	CHECK(!id->srq, "an SRQ before rdma_create_srq");
	{
		/* rdma-core's rdma_create_srq_ex wants the type said */
		struct ibv_srq_init_attr_ex ex = { .comp_mask = IBV_SRQ_INIT_ATTR_PD };

		ex.attr.max_wr = 8;
		ex.attr.max_sge = 1;
		errno = 0;
		CHECK(rdma_create_srq_ex(id, &ex) == -1 && errno == EINVAL && !id->srq,
		      "rdma_create_srq_ex without IBV_SRQ_INIT_ATTR_TYPE: errno %d, want EINVAL",
		      errno);
	}

	struct ibv_srq_init_attr sa = {
		.srq_context = id,
		.attr = { .max_wr = 8, .max_sge = 1 },
	};
	CHECK(rdma_create_srq(id, NULL, &sa) == 0, "rdma_create_srq: %s",
	      strerror(errno));
	CHECK(id->srq, "rdma_create_srq: id->srq not set");
	CHECK(sa.attr.max_wr >= 8, "rdma_create_srq: max_wr %u back",
	      sa.attr.max_wr);
	CHECK(id->srq->srq_context == id, "SRQ context not kept");
	/* an XRC SRQ: it has a number, and completes into id->recv_cq,
	 * which the CM made with a channel, cq_context = id */
	CHECK(id->recv_cq && id->recv_cq_channel &&
		      id->recv_cq->cq_context == id &&
		      id->recv_cq->channel == id->recv_cq_channel,
	      "XRC SRQ: id->recv_cq %p channel %p", (void *)id->recv_cq,
	      (void *)id->recv_cq_channel);
	/* rdma_get_request made it for the QP's one receive: it must
	 * hold the SRQ's now */
	CHECK(id->recv_cq->cqe >= 8, "id->recv_cq has %d entries for an "
	      "SRQ of 8", id->recv_cq->cqe);
	errno = 0;
	CHECK(rdma_create_srq(id, NULL, &sa) == -1 && errno == EINVAL,
	      "a second SRQ on the id: errno %d, want EINVAL", errno);

	/* the IB CM's attributes for the XRC_RECV half: no requester */
	qa.qp_state = IBV_QPS_RTS;
	CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0, "rdma_init_qp_attr");
	CHECK(mask == (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT),
	      "XRC_RECV RTS mask %#x", mask);

	*mr = rdma_reg_msgs(id, buf, len);
	CHECK(*mr, "rdma_reg_msgs: %s", strerror(errno));
	for (int i = 0; i < nrecv; i++)
		CHECK(rdma_post_recv(id, (void *)(uintptr_t)(100 + i),
				     buf + (size_t)i * 4096, 4096, *mr) == 0,
		      "rdma_post_recv to the XRC SRQ: %s", strerror(errno));

	uint32_t srqn = htonl(xrc_srqn_get(id));
	struct rdma_conn_param p = { .private_data = &srqn,
				     .private_data_len = sizeof(srqn) };
	CHECK(rdma_accept(id, &p) == 0, "rdma_accept: %s", strerror(errno));
	CHECK(qp_state(id->qp) == IBV_QPS_RTS,
	      "XRC_RECV QP state %d after accept, want RTS",
	      qp_state(id->qp));
	return id;
}

static void xrc_server(struct cm_side *s)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct rdma_cm_id *lid, *id;
	struct ibv_qp_init_attr attr;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint8_t *buf = calloc(1, 4 * 4096);

	CHECK(buf, "calloc");
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_IB;
	hints.ai_qp_type = IBV_QPT_XRC_RECV;
	CHECK(rdma_getaddrinfo(s->addr, "0", &hints, &res) == 0,
	      "rdma_getaddrinfo: %s", strerror(errno));
	CHECK(res->ai_qp_type == IBV_QPT_XRC_RECV &&
		      res->ai_port_space == RDMA_PS_IB,
	      "rdma_getaddrinfo: qp_type %d ps %#x", res->ai_qp_type,
	      res->ai_port_space);
	CHECK(rdma_create_ep(&lid, res, NULL, &attr) == 0,
	      "rdma_create_ep (passive, XRC_RECV): %s", strerror(errno));
	rdma_freeaddrinfo(res);
	CHECK(lid->qp_type == IBV_QPT_XRC_RECV,
	      "rdma_create_ep: id qp_type %d, want XRC_RECV (%d)",
	      lid->qp_type, IBV_QPT_XRC_RECV);
	CHECK(rdma_listen(lid, 2) == 0, "rdma_listen: %s", strerror(errno));
	cm_put_port(s, ntohs(rdma_get_src_port(lid)));

	/* 1: two SENDs into the SRQ named in the private data */
	id = xrc_accept(lid, buf, 4 * 4096, &mr, 2);
	CHECK(rdma_get_recv_comp(id, &wc) == 1, "rdma_get_recv_comp: %s",
	      strerror(errno));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
		      wc.wr_id == 100 && wc.byte_len == XRC_BIG,
	      "XRC receive 1: %s opcode %d wr_id %llu len %u",
	      ibv_wc_status_str(wc.status), wc.opcode,
	      (unsigned long long)wc.wr_id, wc.byte_len);
	CHECK(wc.qp_num == id->qp->qp_num,
	      "XRC receive: qp_num %#x, want the XRC_RECV QP %#x", wc.qp_num,
	      id->qp->qp_num);
	check_pattern(buf, XRC_BIG, 71, "XRC SEND 1");
	CHECK(rdma_get_recv_comp(id, &wc) == 1, "rdma_get_recv_comp 2");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 101 &&
		      wc.byte_len == XRC_SMALL && wc.qp_num == id->qp->qp_num,
	      "XRC receive 2: %s wr_id %llu len %u qp_num %#x",
	      ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id,
	      wc.byte_len, wc.qp_num);
	check_pattern(buf + 4096, XRC_SMALL, 72, "XRC SEND 2 (inline)");
	cm_sync(s, 0x71);
	rdma_disconnect(id);
	CHECK(rdma_dereg_mr(mr) == 0, "rdma_dereg_mr");
	rdma_destroy_ep(id);	/* QP, then the SRQ and its CQs, then the id */

	/* 2: the client names an SRQ number nobody has */
	id = xrc_accept(lid, buf, 4 * 4096, &mr, 1);
	cm_sync(s, 0x74);	/* accept checked RTS: the client may post */
	cm_sync(s, 0x72);	/* the client posted it */
	CHECK(wait_qp_state(id->qp, IBV_QPS_ERR, 5000),
	      "XRC_RECV QP state %d after a SEND to no SRQ, want ERROR",
	      qp_state(id->qp));
	expect_no_wc(id->recv_cq, 100, "the SRQ after a SEND to no SRQ");
	cm_sync(s, 0x73);
	rdma_disconnect(id);
	CHECK(rdma_dereg_mr(mr) == 0, "rdma_dereg_mr 2");
	/* the other order: SRQ (its CQs stay for the QP), then the rest */
	rdma_destroy_srq(id);
	CHECK(!id->srq, "rdma_destroy_srq left id->srq");
	rdma_destroy_ep(id);
	rdma_destroy_ep(lid);
	free(buf);
}

static void xrc_client(struct cm_side *s)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
	struct ibv_qp_init_attr attr;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct ibv_qp_attr qa;
	struct rdma_cm_id *id;
	struct ibv_wc wc;
	char port[8];
	int mask;
	uint8_t big[XRC_BIG], small[XRC_SMALL];

	snprintf(port, sizeof(port), "%u", cm_get_port(s));
	hints.ai_port_space = RDMA_PS_IB;
	hints.ai_qp_type = IBV_QPT_XRC_SEND;
	CHECK(rdma_getaddrinfo(s->addr, port, &hints, &res) == 0,
	      "rdma_getaddrinfo: %s", strerror(errno));

	for (int round = 0; round < 2; round++) {
		/* fresh each time: rdma-core writes the CQs it made back */
		memset(&attr, 0, sizeof(attr));
		attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
		attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
		attr.sq_sig_all = 1;
		CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0,
		      "rdma_create_ep (active, XRC_SEND): %s", strerror(errno));
		CHECK(id->qp_type == IBV_QPT_XRC_SEND && id->ps == RDMA_PS_IB,
		      "id qp_type %d ps %#x, want XRC_SEND on RDMA_PS_IB",
		      id->qp_type, id->ps);
		CHECK(id->qp && id->qp->qp_type == IBV_QPT_XRC_SEND &&
			      id->send_cq && id->qp->send_cq == id->send_cq,
		      "active ep: QP %p type %d", (void *)id->qp,
		      id->qp ? (int)id->qp->qp_type : -1);
		CHECK(attr.qp_type == IBV_QPT_XRC_SEND,
		      "qp_init_attr.qp_type %d after rdma_create_ep",
		      attr.qp_type);
		/* the IB CM's attributes for the XRC_SEND half: no responder */
		qa.qp_state = IBV_QPS_RTR;
		CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0,
		      "rdma_init_qp_attr");
		CHECK(!(mask & (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) &&
			      (mask & IBV_QP_DEST_QPN),
		      "XRC_SEND RTR mask %#x", mask);
		struct ibv_mr *mr = rdma_reg_msgs(id, big, sizeof(big));
		CHECK(mr, "rdma_reg_msgs: %s", strerror(errno));
		CHECK(rdma_connect(id, NULL) == 0, "sync rdma_connect: %s",
		      strerror(errno));
		CHECK(qp_state(id->qp) == IBV_QPS_RTS,
		      "XRC_SEND QP state %d after connect", qp_state(id->qp));
		CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED &&
			      id->event->param.conn.private_data_len >= 4,
		      "no ESTABLISHED with the SRQ number");
		uint32_t srqn = ntohl(*(const uint32_t *)
					      id->event->param.conn.private_data);
		CHECK(srqn && srqn <= 0xffffff, "SRQ number %#x", srqn);

		if (round == 0) {
			fill_pattern(big, sizeof(big), 71);
			memset(&wr, 0, sizeof(wr));
			sge = (struct ibv_sge){ .addr = (uintptr_t)big,
						.length = sizeof(big),
						.lkey = mr->lkey };
			wr.wr_id = 1;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.qp_type.xrc.remote_srqn = srqn;
			CHECK(ibv_post_send(id->qp, &wr, &bad) == 0,
			      "post XRC SEND");
			CHECK(rdma_get_send_comp(id, &wc) == 1 &&
				      wc.status == IBV_WC_SUCCESS &&
				      wc.wr_id == 1 && wc.opcode == IBV_WC_SEND,
			      "XRC SEND 1: %s", ibv_wc_status_str(wc.status));
			/* rdma_xclient's: 16 inline bytes, lkey 0 */
			fill_pattern(small, sizeof(small), 72);
			sge = (struct ibv_sge){ .addr = (uintptr_t)small,
						.length = sizeof(small) };
			wr.wr_id = 2;
			wr.send_flags = IBV_SEND_INLINE;
			CHECK(ibv_post_send(id->qp, &wr, &bad) == 0,
			      "post inline XRC SEND");
			CHECK(rdma_get_send_comp(id, &wc) == 1 &&
				      wc.status == IBV_WC_SUCCESS && wc.wr_id == 2,
			      "XRC SEND 2: %s", ibv_wc_status_str(wc.status));
			cm_sync(s, 0x71);
		} else {
			cm_sync(s, 0x74);
			memset(&wr, 0, sizeof(wr));
			sge = (struct ibv_sge){ .addr = (uintptr_t)big,
						.length = 64,
						.lkey = mr->lkey };
			wr.wr_id = 3;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.qp_type.xrc.remote_srqn = srqn ^ 0x800000;
			CHECK(ibv_post_send(id->qp, &wr, &bad) == 0,
			      "post XRC SEND to no SRQ");
			cm_sync(s, 0x72);
			CHECK(rdma_get_send_comp(id, &wc) == 1, "send comp");
			CHECK(wc.wr_id == 3 && wc.status == IBV_WC_REM_ACCESS_ERR,
			      "SEND to no SRQ: %s (wr_id %llu), want "
			      "IBV_WC_REM_ACCESS_ERR",
			      ibv_wc_status_str(wc.status),
			      (unsigned long long)wc.wr_id);
			CHECK(wait_qp_state(id->qp, IBV_QPS_ERR, 2000),
			      "XRC_SEND QP state %d after the error, want ERROR",
			      qp_state(id->qp));
			cm_sync(s, 0x73);
		}
		rdma_disconnect(id);
		CHECK(rdma_dereg_mr(mr) == 0, "rdma_dereg_mr");
		rdma_destroy_ep(id);
	}
	rdma_freeaddrinfo(res);
}

static void sub_xrc(void)
{
	cm_fork_run(g_addr_v4, xrc_server, xrc_client);
}

/* ---- teardown orders ---------------------------------------------------- */

/* The client destroys QP and id without rdma_disconnect; the server, which
 * meanwhile destroyed its listener and tried to destroy a CQ in use, sees
 * DISCONNECTED with its receives flushed. */
static void abrupt_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	cm_ack(ev);
	cm_create_qp(id, "server");
	cm_buf_alloc(&b, id->pd, 4096);
	cm_post_recv(id, 1, &b, 0, 4096);
	cm_post_recv(id, 2, &b, 0, 4096);
	struct rdma_conn_param acc = { .responder_resources = 1,
				       .initiator_depth = 1 };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
	/* the listener goes first; the accepted connection lives on */
	CHECK(rdma_destroy_id(lid) == 0, "destroy the listener");
	int rc = ibv_destroy_cq(id->send_cq);
	CHECK(rc == EBUSY, "ibv_destroy_cq of a CQ in use: %d, want EBUSY",
	      rc);
	cm_recv_check(id, 1, &b, 0, 64, 5, "SEND after the listener went");
	/* the MR may go while the QP lives */
	CHECK(ibv_dereg_mr(b.mr) == 0, "dereg with the QP alive");
	b.mr = NULL;
	cm_sync(s, 0xc1);
	ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
		       "DISCONNECTED when the peer destroyed its id");
	CHECK(ev->id == id, "DISCONNECTED for another id");
	cm_ack(ev);
	check_flushed(id, 2, 1, "server");
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	cm_buf_free(&b);
	rdma_destroy_event_channel(ch);
}

static void abrupt_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct cm_buf b = { 0 };

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, 4096);
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "client ESTABLISHED");
	fill_pattern(b.p, 64, 5);
	cm_send(id, 9, &b, 0, 64);
	cm_sync(s, 0xc1);
	/* no rdma_disconnect: QP then id, with an MR still registered */
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy a connected id");
	cm_buf_free(&b);
	rdma_destroy_event_channel(ch);
}

static void sub_teardown_abrupt(void)
{
	cm_fork_run(g_addr_v4, abrupt_server, abrupt_client);
}

/* The server process dies while connected: the client sees DISCONNECTED
 * (its QP in ERROR) within a bounded time, and can still tear down. */
static void die_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;

	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	cm_ack(ev);
	cm_create_qp(id, "server");
	struct rdma_conn_param acc = { .responder_resources = 1,
				       .initiator_depth = 1 };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
	cm_sync(s, 0xc2);
	_exit(0);	/* no teardown at all */
}

static void die_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct cm_buf b = { 0 };

	uint16_t port = cm_get_port(s);
	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, 4096);
	cm_post_recv(id, 1, &b, 0, 4096);
	struct rdma_conn_param cp = { .initiator_depth = 1,
				      .responder_resources = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "client ESTABLISHED");
	cm_sync(s, 0xc2);
	struct rdma_cm_event *ev = cm_get(ch, 15000, "after the server died");
	CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED,
	      "peer process died: got %s status %d, want DISCONNECTED",
	      rdma_event_str(ev->event), ev->status);
	cm_ack(ev);
	check_flushed(id, 1, 1, "client");
	cm_buf_free(&b);
	cm_close(ch, id, 0);
	rdma_destroy_event_channel(ch);
}

static void sub_peer_dies(void)
{
	cm_fork_run(g_addr_v4, die_server, die_client);
}

/* ---- a peer that is not softrnic --------------------------------------- */

/* The server plays a plain iWARP RNIC (SOFTRNIC_EXT=0: its MPA reply
 * carries no softrnic flag, as Linux siw's does not). The client then
 * knows its peer speaks RFC 5040 RDMAP only, and refuses at post time
 * what that cannot carry (docs/COMPAT.md); the QP keeps working. */
static void plain_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };

	setenv("SOFTRNIC_EXT", "0", 1);
	cm_listen(s, &ch, &lid, 1, 0);
	ev = cm_expect_request(ch, lid);
	id = ev->id;
	cm_ack(ev);
	cm_create_qp(id, "plain server");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	fill_pattern(b.p + OFF_READSRC, 4096, SEED_SRV_SRC);
	struct cm_pdata rp = cm_pdata_make(TAG_REP, b.mr);
	struct rdma_conn_param acc = { .private_data = &rp, .private_data_len = sizeof(rp),
				       .responder_resources = 1, .initiator_depth = 1 };
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "plain server ESTABLISHED");
	cm_expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, "plain server DISCONNECTED");
	check_pattern(b.p + OFF_WRITE, 4096, SEED_WRITE, "the client's WRITE, after its refusals");
	rdma_disconnect(id);
	rdma_destroy_qp(id);
	cm_buf_free(&b);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(rdma_destroy_id(lid) == 0, "destroy");
	rdma_destroy_event_channel(ch);
}

static void plain_client(struct cm_side *s)
{
	static const enum ibv_wr_opcode beyond[] = {
		IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM,
		IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP,
		IBV_WR_ATOMIC_WRITE,	/* IBTA 1.5: softrnic's extensions only */
	};
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct cm_buf b = { 0 };
	uint16_t port = cm_get_port(s);

	cm_resolve(s, port, &ch, &id, NULL);
	cm_create_qp(id, "client");
	cm_buf_alloc(&b, id->pd, BUF_LEN);
	struct rdma_conn_param con = { .responder_resources = 1, .initiator_depth = 1,
				       .retry_count = 7 };
	CHECK(rdma_connect(id, &con) == 0, "rdma_connect: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, "client ESTABLISHED");
	struct cm_pdata sp = cm_pdata_get(&ev->param.conn, TAG_REP, "ESTABLISHED");
	cm_ack(ev);

	for (size_t i = 0; i < ARRAY_SIZE(beyond); i++) {
		struct ibv_sge sge = { (uintptr_t)b.p, 8, b.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = 70 + i, .sg_list = &sge, .num_sge = 1, .opcode = beyond[i],
			.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(7),
		}, *bad = NULL;

		if (beyond[i] == IBV_WR_ATOMIC_FETCH_AND_ADD || beyond[i] == IBV_WR_ATOMIC_CMP_AND_SWP) {
			wr.wr.atomic.remote_addr = sp.addr;
			wr.wr.atomic.rkey = sp.rkey;
		} else {
			wr.wr.rdma.remote_addr = sp.addr;
			wr.wr.rdma.rkey = sp.rkey;
		}
		int r = ibv_post_send(id->qp, &wr, &bad);
		CHECK(r == EOPNOTSUPP && bad == &wr,
		      "opcode %d towards a plain iWARP peer: ibv_post_send %d (%s), bad_wr %s; "
		      "want EOPNOTSUPP at this WR", beyond[i], r, strerror(r),
		      bad == &wr ? "this WR" : "other");
	}
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(id->send_cq, 1, &wc) == 0, "a refused WR left a completion");
	/* the QP still works: a WRITE, and a READ of the server's data */
	fill_pattern(b.p + OFF_WSRC, 4096, SEED_WRITE);
	post_write(id, 81, &b, OFF_WSRC, 4096, sp.addr + OFF_WRITE, sp.rkey);
	post_read(id, 82, &b, OFF_READDST, 4096, sp.addr + OFF_READSRC, sp.rkey);
	check_pattern(b.p + OFF_READDST, 4096, SEED_SRV_SRC, "READ from the plain server");
	cm_close(ch, id, 1);
	cm_buf_free(&b);
	rdma_destroy_event_channel(ch);
}

static void sub_plain_peer(void)
{
	cm_fork_run(g_addr_v4, plain_server, plain_client);
}

/* ---- main --------------------------------------------------------------- */

/* ---- both ends disconnect at once --------------------------------------- */

/* Each side disconnects in the same instant as its peer, so its own
 * rdma_disconnect and its progress thread (which sees the peer's FIN)
 * shut the stream together. Only one of them may close the socket: the
 * second close() fails with EBADF, or closes whatever the number was
 * given to in between. rping -q once died of that ("libgcc_s.so.1 must
 * be installed for pthread_exit to work": its dlopen's file closed under
 * it). Every test process counts such closes (common.c, close_audit). */
#define RACE_ROUNDS 300

/* Disconnect (after the peer is ready to), then DISCONNECTED; on odd
 * rounds the QP goes to ERROR by hand first, as rping -q does. */
static void race_disconnect(struct cm_side *s, struct rdma_event_channel *ch,
			    struct rdma_cm_id *id, int round)
{
	if (round & 1) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		CHECK(ibv_modify_qp(id->qp, &a, IBV_QP_STATE) == 0,
		      "round %d: modify to ERR", round);
	}
	cm_sync(s, 0xd15c0000u + (unsigned)round);
	CHECK(rdma_disconnect(id) == 0, "round %d: rdma_disconnect: %s", round,
	      strerror(errno));
	struct rdma_cm_event *ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
					     "DISCONNECTED, both ends at once");
	CHECK(ev->id == id, "DISCONNECTED for another id");
	cm_ack(ev);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "round %d: rdma_destroy_id: %s", round,
	      strerror(errno));
	cm_sync(s, 0xd15d0000u + (unsigned)round);	/* both done */
}

static void race_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid;

	cm_listen(s, &ch, &lid, 4, 0);
	for (int r = 0; r < RACE_ROUNDS; r++) {
		struct rdma_cm_event *ev = cm_expect_request(ch, lid);
		struct rdma_cm_id *id = ev->id;

		cm_ack(ev);
		cm_create_qp(id, "server");
		struct rdma_conn_param acc = { .responder_resources = 1,
					       .initiator_depth = 1 };
		CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s",
		      strerror(errno));
		cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
		race_disconnect(s, ch, id, r);
	}
	CHECK(rdma_destroy_id(lid) == 0, "destroy the listener");
	rdma_destroy_event_channel(ch);
}

static void race_client(struct cm_side *s)
{
	uint16_t port = cm_get_port(s);

	for (int r = 0; r < RACE_ROUNDS; r++) {
		struct rdma_event_channel *ch;
		struct rdma_cm_id *id;

		cm_resolve(s, port, &ch, &id, NULL);
		cm_create_qp(id, "client");
		struct rdma_conn_param cp = { .initiator_depth = 1,
					      .responder_resources = 1,
					      .retry_count = 7,
					      .rnr_retry_count = 7 };
		CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s",
		      strerror(errno));
		cm_expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, "client ESTABLISHED");
		race_disconnect(s, ch, id, r);
		rdma_destroy_event_channel(ch);
	}
}

static void sub_disconnect_race(void)
{
	cm_fork_run(g_addr_v4, race_server, race_client);
}

/* ---- a side that exits without rdma_disconnect ------------------------- */

/* The server exits (exit(3): no rdma_disconnect, no destroy) the moment
 * it has the client's two SENDs (a small one, and one of EXIT_LEN that a
 * same-host server pulls from the client's memory): the client's SENDs
 * complete successfully (the server's ACKs go before it does) and the
 * client gets DISCONNECTED. exit_send: the server posts its two SENDs as
 * the connection is ESTABLISHED and exits without waiting for them; the
 * client gets both, whole, then DISCONNECTED. */
#define EXIT_LEN	(512 * 1024)

/* Either side's QP, buffer and two receives (11: 1000 bytes at EXIT_LEN,
 * 12: EXIT_LEN bytes at 0), before the connection is made. */
static void exit_qp(struct rdma_cm_id *id, struct cm_buf *b, const char *who)
{
	cm_create_qp(id, who);
	cm_buf_alloc(b, id->pd, EXIT_LEN + 4096);
	cm_post_recv(id, 11, b, EXIT_LEN, 1000);
	cm_post_recv(id, 12, b, 0, EXIT_LEN);
}

static struct rdma_cm_id *exit_accept(struct cm_side *s, struct rdma_event_channel **ch,
				      struct cm_buf *b)
{
	struct rdma_cm_id *lid, *id;
	struct rdma_cm_event *ev;
	struct rdma_conn_param acc = { .responder_resources = 1, .initiator_depth = 1,
				       .rnr_retry_count = 7 };

	cm_listen(s, ch, &lid, 4, 0);
	ev = cm_expect_request(*ch, lid);
	id = ev->id;
	cm_ack(ev);
	exit_qp(id, b, "server");
	CHECK(rdma_accept(id, &acc) == 0, "rdma_accept: %s", strerror(errno));
	cm_expect_ack(*ch, RDMA_CM_EVENT_ESTABLISHED, "server ESTABLISHED");
	return id;
}

static struct rdma_cm_id *exit_connect(struct cm_side *s, struct rdma_event_channel **ch,
				       struct cm_buf *b)
{
	struct rdma_cm_id *id;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };

	cm_resolve(s, cm_get_port(s), ch, &id, NULL);
	exit_qp(id, b, "client");
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: %s", strerror(errno));
	cm_expect_ack(*ch, RDMA_CM_EVENT_ESTABLISHED, "client ESTABLISHED");
	return id;
}

static void exit_post_two(struct rdma_cm_id *id, struct cm_buf *b, uint32_t seed)
{
	fill_pattern(b->p + EXIT_LEN, 1000, seed);
	fill_pattern(b->p, EXIT_LEN, seed + 1);
	CHECK(rdma_post_send(id, (void *)11, b->p + EXIT_LEN, 1000, b->mr, IBV_SEND_SIGNALED) == 0,
	      "rdma_post_send: %s", strerror(errno));
	CHECK(rdma_post_send(id, (void *)12, b->p, EXIT_LEN, b->mr, IBV_SEND_SIGNALED) == 0,
	      "rdma_post_send: %s", strerror(errno));
}

static void exit_recv_two(struct rdma_cm_id *id, struct cm_buf *b, uint32_t seed)
{
	cm_recv_check(id, 11, b, EXIT_LEN, 1000, seed, "small SEND");
	cm_recv_check(id, 12, b, 0, EXIT_LEN, seed + 1, "large SEND");
}

/* The client's end: DISCONNECTED for the server's exit, then teardown. */
static void exit_client_end(struct rdma_event_channel *ch, struct rdma_cm_id *id,
			    struct cm_buf *b)
{
	cm_expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED, "the server's exit");
	cm_close(ch, id, 0);
	cm_buf_free(b);
	rdma_destroy_event_channel(ch);
}

static void exit_recv_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct cm_buf b = { 0 };
	struct rdma_cm_id *id = exit_accept(s, &ch, &b);

	exit_recv_two(id, &b, 40);
	exit(0);	/* no rdma_disconnect: the process just ends */
}

static void exit_recv_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct cm_buf b = { 0 };
	struct ibv_wc wc;
	struct rdma_cm_id *id = exit_connect(s, &ch, &b);

	exit_post_two(id, &b, 40);
	expect_wc(id->send_cq, &wc, 11, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "small SEND to a server that exited once it had it");
	expect_wc(id->send_cq, &wc, 12, IBV_WC_SUCCESS, IBV_WC_SEND,
		  "SEND to a server that exited once it had it");
	exit_client_end(ch, id, &b);
}

static void sub_exit_recv(void)
{
	cm_fork_run(g_addr_v4, exit_recv_server, exit_recv_client);
}

static void exit_send_server(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct cm_buf b = { 0 };
	struct rdma_cm_id *id = exit_accept(s, &ch, &b);

	exit_post_two(id, &b, 50);
	exit(0);	/* no completions awaited, no rdma_disconnect */
}

static void exit_send_client(struct cm_side *s)
{
	struct rdma_event_channel *ch;
	struct cm_buf b = { 0 };
	struct rdma_cm_id *id = exit_connect(s, &ch, &b);

	exit_recv_two(id, &b, 50);
	exit_client_end(ch, id, &b);
}

static void sub_exit_send(void)
{
	cm_fork_run(g_addr_v4, exit_send_server, exit_send_client);
}

struct cm_case {
	const char *name;
	cm_side_fn server, client;
};

static const struct cm_case remote_cases[] = {
	{ "connect", full_server, full_client },
	{ "own_qp", own_server, own_client },
	{ "multi", multi_server, multi_client },
	{ "reject", reject_server, reject_client },
	{ "xrc", xrc_server, xrc_client },
};

/* One side of every remote case over an out-of-band TCP stream. */
static int cm_run_remote(int fd, int server, const char *addr)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < ARRAY_SIZE(remote_cases); i++) {
		struct cm_side s = { .fd = fd, .addr = addr, .remote = 1 };
		uint64_t t0 = now_ms();

		cm_sync(&s, 0xca5e00u + i);
		(server ? remote_cases[i].server : remote_cases[i].client)(&s);
		printf("[PASS] %s (%s, %u ms)\n", remote_cases[i].name,
		       server ? "server" : "client",
		       (unsigned)(now_ms() - t0));
	}
	cm_sync(&(struct cm_side){ .fd = fd }, 0xca5eeeu);
	printf("%zu passed\n", ARRAY_SIZE(remote_cases));
	return 0;
}

int main(int argc, char **argv)
{
	static const struct subtest tests[] = {
		SUBTEST(sub_connect_v4),
		SUBTEST(sub_connect_v6),
		SUBTEST(sub_request_fields),
		SUBTEST(sub_reject),
		SUBTEST(sub_reject_ece),
		SUBTEST(sub_no_listener),
		SUBTEST(sub_pdata_limits),
		SUBTEST(sub_own_qp),
		SUBTEST(sub_ece),
		SUBTEST(sub_migrate),
		SUBTEST(sub_multi),
		SUBTEST(sub_exit_recv),
		SUBTEST(sub_exit_send),
		SUBTEST(sub_create_ep),
		SUBTEST(sub_xrc),
		SUBTEST(sub_teardown_abrupt),
		SUBTEST(sub_peer_dies),
		SUBTEST(sub_plain_peer),
		SUBTEST(sub_disconnect_race),
	};

	if (argc >= 3 && !strcmp(argv[1], "--server")) {
		alarm(120);
		int fd = net_tcp_listen_accept((uint16_t)atoi(argv[2]), 30000);
		return cm_run_remote(fd, 1, "0.0.0.0");
	}
	if (argc >= 4 && !strcmp(argv[1], "--client")) {
		alarm(120);
		int fd = net_tcp_connect(argv[2], (uint16_t)atoi(argv[3]),
					 30000);
		return cm_run_remote(fd, 0, argv[2]);
	}
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
