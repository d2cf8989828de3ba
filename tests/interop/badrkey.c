/* interop_badrkey: a one-sided operation to a bad rkey must fail on the
 * requester with IBV_WC_REM_ACCESS_ERR (RFC 5040 §7: the responder sends
 * TERMINATE, here from siw or to siw).
 *
 *   interop_badrkey server ADDR PORT N    accept N connections one after
 *                                         the other; each gets a 4 KiB
 *                                         buffer (remote read + write),
 *                                         advertised as {addr, rkey} in
 *                                         the accept's private data
 *   interop_badrkey client ADDR PORT write|read
 *                                         one good operation (must
 *                                         succeed), then the same with the
 *                                         rkey flipped, then a good READ
 *   interop_badrkey client ADDR PORT ext  towards a peer that is not
 *                                         softrnic: SEND and WRITE with
 *                                         immediate, both atomics and
 *                                         atomic write must fail at post
 *                                         time (EOPNOTSUPP),
 *                                         then a WRITE read back with a
 *                                         READ must carry the bytes, and
 *                                         8 READs posted at once must all
 *                                         succeed with an ORD of 1
 *
 * The client prints every completion and exits 0 if the good operation
 * succeeded and one of the two that follow the bad one completed with
 * IBV_WC_REM_ACCESS_ERR. (Over iWARP a WRITE to a peer without ACKs may
 * complete once sent, and the TERMINATE then fails the next request; a
 * READ always waits for its answer.) In ext mode it exits 0 if every
 * refusal and the round trip were as said. 1 otherwise, 2 on a timeout.
 */
#include "cm_util.h"

#include <stdint.h>
#include <time.h>

#define BUF_LEN 4096

struct adv {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return qa;
}

static int server(struct rdma_event_channel *ch, struct addrinfo *ai, int n)
{
	struct rdma_cm_id *lid;
	struct ibv_mr *mr = NULL;
	static char buf[BUF_LEN];
	int done = 0;

	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(lid, ai->ai_addr) || rdma_listen(lid, 4))
		die("bind/listen: %s", strerror(errno));
	printf("listening\n");
	while (done < n) {
		struct rdma_cm_event *ev = cm_next(ch);
		struct rdma_cm_id *id = ev->id;

		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct ibv_qp_init_attr qa = qp_attr();
			struct adv a;
			struct rdma_conn_param cp = {
				.private_data = &a, .private_data_len = sizeof(a),
				.responder_resources = 1, .initiator_depth = 1,
			};

			if (rdma_create_qp(id, NULL, &qa))
				die("rdma_create_qp: %s", strerror(errno));
			memset(buf, 'S', sizeof(buf));
			mr = ibv_reg_mr(id->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
			if (!mr)
				die("ibv_reg_mr: %s", strerror(errno));
			a = (struct adv){ htobe64((uintptr_t)buf), htobe32(mr->rkey), htobe32(BUF_LEN) };
			if (rdma_accept(id, &cp))
				die("rdma_accept: %s", strerror(errno));
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			printf("established\n");
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			printf("disconnected (buffer starts \"%.8s\")\n", buf);
			rdma_ack_cm_event(ev);
			rdma_disconnect(id);
			rdma_destroy_qp(id);
			if (mr)
				ibv_dereg_mr(mr);
			mr = NULL;
			rdma_destroy_id(id);
			done++;
			continue;
		default:
			printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
			break;
		}
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_id(lid);
	return 0;
}

/* Poll one completion within IO_TIMEOUT_MS. */
static struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct timespec t0, t;
	struct ibv_wc wc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int r = ibv_poll_cq(cq, 1, &wc);

		if (r < 0)
			die("ibv_poll_cq: %d", r);
		if (r == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > IO_TIMEOUT_MS) {
			fprintf(stderr, "timeout waiting for a completion\n");
			exit(2);
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr, void *buf,
		uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	}, *bad;

	return ibv_post_send(qp, &wr, &bad);
}

/* The work requests RFC 5040 RDMAP has no form for (or Linux siw does
 * not speak, RFC 7306): each must be refused by ibv_post_send. */
static int refusals(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, const struct adv *a)
{
	static const struct {
		enum ibv_wr_opcode op;
		const char *name;
	} ops[] = {
		{ IBV_WR_SEND_WITH_IMM, "SEND_WITH_IMM" },
		{ IBV_WR_RDMA_WRITE_WITH_IMM, "RDMA_WRITE_WITH_IMM" },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, "ATOMIC_FETCH_AND_ADD" },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, "ATOMIC_CMP_AND_SWP" },
		{ IBV_WR_ATOMIC_WRITE, "ATOMIC_WRITE" },	/* IBTA 1.5: no iWARP form */
	};
	int ok = 1;

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1, .opcode = ops[i].op,
			.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0x1234),
		}, *bad = NULL;
		int r;

		if (ops[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD || ops[i].op == IBV_WR_ATOMIC_CMP_AND_SWP) {
			wr.wr.atomic.remote_addr = a->addr;
			wr.wr.atomic.compare_add = 1;
			wr.wr.atomic.rkey = a->rkey;
		} else {
			wr.wr.rdma.remote_addr = a->addr;
			wr.wr.rdma.rkey = a->rkey;
		}
		r = ibv_post_send(qp, &wr, &bad);
		printf("post %s: %s\n", ops[i].name, r ? strerror(r) : "accepted");
		ok &= r == EOPNOTSUPP && bad == &wr;
	}
	return ok;
}

/* After the refusals the QP still works: a WRITE, read back. */
static int round_trip(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, const struct adv *a)
{
	struct ibv_wc wc;
	int ok = 1;

	memcpy(buf, "interop-plain-peer-write-0123456789abcdefghijklmnopqrstuvwxyz!!", 64);
	memset(buf + 64, 0, 64);
	if (post(qp, IBV_WR_RDMA_WRITE, mr, buf, a->addr, a->rkey, 1) ||
	    post(qp, IBV_WR_RDMA_READ, mr, buf + 64, a->addr, a->rkey, 2))
		die("post: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		wc = poll_one(qp->send_cq);
		printf("wr %llu: %s\n", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		ok &= wc.status == IBV_WC_SUCCESS;
	}
	ok &= !memcmp(buf, buf + 64, 64);
	printf("read back %s\n", memcmp(buf, buf + 64, 64) ? "DIFFERS" : "matches");

	/* Eight READs posted at once with an ORD of 1 (initiator_depth 1,
	 * siw's IRD 1): softrnic must send them one at a time, or siw's read
	 * queue overflows ("IRQ exceeded") and it ends the connection. */
	memset(buf + 128, 0, 8 * 64);
	for (int i = 0; i < 8; i++)
		if (post(qp, IBV_WR_RDMA_READ, mr, buf + 128 + 64 * i, a->addr, a->rkey, 10 + i))
			die("post READ %d: %s", i, strerror(errno));
	for (int i = 0; i < 8; i++) {
		wc = poll_one(qp->send_cq);
		ok &= wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(10 + i);
		if (wc.status != IBV_WC_SUCCESS)
			printf("READ burst wr %llu: %s\n", (unsigned long long)wc.wr_id,
			       ibv_wc_status_str(wc.status));
		ok &= !memcmp(buf, buf + 128 + 64 * i, 64);
	}
	printf("READ burst %s\n", ok ? "ok (8 of 8, in order, bytes match)" : "FAILED");
	return ok;
}

static int client(struct rdma_event_channel *ch, struct addrinfo *ai, int write)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct ibv_qp_init_attr qa = qp_attr();
	enum ibv_wr_opcode op = write == 1 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
	static char buf[BUF_LEN];
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct adv a;
	int rem_access = 0, flushed = 0, good;
	struct ibv_wc wc;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, ai->ai_addr, 5000))
		die("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (rdma_create_qp(id, NULL, &qa))
		die("rdma_create_qp: %s", strerror(errno));
	memset(buf, 'C', sizeof(buf));
	mr = ibv_reg_mr(id->qp->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr: %s", strerror(errno));
	if (rdma_connect(id, &cp))
		die("rdma_connect: %s", strerror(errno));
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	if (ev->param.conn.private_data_len < sizeof(a))
		die("accept private data too short: %u", ev->param.conn.private_data_len);
	memcpy(&a, ev->param.conn.private_data, sizeof(a));
	rdma_ack_cm_event(ev);
	a.addr = be64toh(a.addr);
	a.rkey = be32toh(a.rkey);
	printf("peer buffer 0x%llx rkey 0x%x\n", (unsigned long long)a.addr, a.rkey);
	if (write == 2) {
		good = refusals(id->qp, mr, buf, &a);
		good &= round_trip(id->qp, mr, buf, &a);
		rdma_disconnect(id);
		rdma_destroy_qp(id);
		ibv_dereg_mr(mr);
		rdma_destroy_id(id);
		printf("%s\n", good ? "OK" : "FAIL");
		return good ? 0 : 1;
	}

	if (post(id->qp, op, mr, buf, a.addr, a.rkey, 1))
		die("post good: %s", strerror(errno));
	wc = poll_one(id->qp->send_cq);
	printf("good %s: %s\n", write == 1 ? "WRITE" : "READ", ibv_wc_status_str(wc.status));
	good = wc.status == IBV_WC_SUCCESS;

	/* The bad one, then a good READ that must not succeed after it. */
	if (post(id->qp, op, mr, buf, a.addr, a.rkey ^ 0x00ff00ffU, 2) ||
	    post(id->qp, IBV_WR_RDMA_READ, mr, buf, a.addr, a.rkey, 3))
		die("post bad: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		wc = poll_one(id->qp->send_cq);
		printf("wr %llu: %s (%d)\n", (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(wc.status), wc.status);
		rem_access |= wc.status == IBV_WC_REM_ACCESS_ERR;
		/* A WRITE has no answer in iWARP: it completed when sent, and
		 * siw's TERMINATE for it puts the QP in ERROR whenever it
		 * comes. If the READ was still queued then, it is flushed,
		 * which also proves it did not succeed after the bad WRITE. */
		flushed |= write == 1 && wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR;
	}
	rdma_disconnect(id);
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	rdma_destroy_id(id);
	printf("%s\n", good && (rem_access || flushed) ? "OK" : "FAIL");
	return good && (rem_access || flushed) ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct addrinfo *ai;
	int rc;

	if (argc != 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
		die("usage: %s server ADDR PORT N | client ADDR PORT write|read|ext", argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	ai = cm_addr(argv[2], argv[3]);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (!strcmp(argv[1], "server"))
		rc = server(ch, ai, atoi(argv[4]));
	else
		rc = client(ch, ai, !strcmp(argv[4], "write") ? 1 : !strcmp(argv[4], "ext") ? 2 : 0);
	freeaddrinfo(ai);
	rdma_destroy_event_channel(ch);
	return rc;
}
