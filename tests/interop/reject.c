/* interop_reject: MPA reject with private data, either side.
 *
 *   interop_reject server ADDR PORT   listen; reject the first request with
 *                                     private data "reject-from-server";
 *                                     check the request carried
 *                                     "hello-from-client"
 *   interop_reject client ADDR PORT   connect with "hello-from-client";
 *                                     expect RDMA_CM_EVENT_REJECTED with
 *                                     "reject-from-server"
 *
 * Exit 0 when the private data arrived intact, 1 on a mismatch or error,
 * 2 on a timeout. Uses librdmacm only (rdma_cm private data travels in
 * the MPA request and the MPA reply with the R bit set, RFC 5044 §7.1).
 */
#include "cm_util.h"

#define REQ_PD "hello-from-client"
#define REJ_PD "reject-from-server"

static int server(struct rdma_event_channel *ch, struct addrinfo *ai)
{
	struct rdma_cm_id *lid;
	struct rdma_cm_event *ev;
	int ok;

	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(lid, ai->ai_addr) || rdma_listen(lid, 4))
		die("bind/listen: %s", strerror(errno));
	printf("listening\n");
	fflush(stdout);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	pd_print("REQ_PD", ev->param.conn.private_data, ev->param.conn.private_data_len);
	ok = pd_starts(ev->param.conn.private_data, ev->param.conn.private_data_len, REQ_PD);
	if (rdma_reject(ev->id, REJ_PD, sizeof(REJ_PD)))
		die("rdma_reject: %s", strerror(errno));
	printf("rejected\n");
	rdma_destroy_id(ev->id);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(lid);
	return ok ? 0 : 1;
}

static int client(struct rdma_event_channel *ch, struct addrinfo *ai)
{
	struct rdma_conn_param cp = {
		.private_data = REQ_PD, .private_data_len = sizeof(REQ_PD),
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
	};
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int ok;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, ai->ai_addr, 5000))
		die("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	/* iWARP connects a QP: the MPA request goes out of rdma_connect */
	if (rdma_create_qp(id, NULL, &qa))
		die("rdma_create_qp: %s", strerror(errno));
	if (rdma_connect(id, &cp))
		die("rdma_connect: %s", strerror(errno));
	ev = cm_next(ch);
	if (ev->event != RDMA_CM_EVENT_REJECTED)
		die("expected RDMA_CM_EVENT_REJECTED, got %s (status %d)",
		    rdma_event_str(ev->event), ev->status);
	printf("rejected status=%d\n", ev->status);
	pd_print("REJ_PD", ev->param.conn.private_data, ev->param.conn.private_data_len);
	ok = pd_starts(ev->param.conn.private_data, ev->param.conn.private_data_len, REJ_PD);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct addrinfo *ai;
	int rc;

	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
		die("usage: %s server|client ADDR PORT", argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	ai = cm_addr(argv[2], argv[3]);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	rc = !strcmp(argv[1], "server") ? server(ch, ai) : client(ch, ai);
	freeaddrinfo(ai);
	rdma_destroy_event_channel(ch);
	printf("%s\n", rc ? "MISMATCH" : "OK");
	return rc;
}
