/* Hostile datagrams at a UD QP's UDP port (DESIGN.md decision 8): empty,
 * truncated, oversized, bad magic/version/opcode/reserved bits, a length
 * that lies, unknown QPNs, random bytes. Each is counted and dropped; the
 * process and the QP carry on, and a well-formed datagram written by hand
 * from DESIGN.md's "UD wire format" is then received. */
#include "ud_common.h"

#include <stdlib.h>

#define QKEY 0x11111111u

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

/* A header as DESIGN.md lays it out. */
static size_t hdr(uint8_t *b, uint32_t dst, uint32_t src, uint32_t qkey, uint32_t len)
{
	b[0] = 'S';
	b[1] = 'U';
	b[2] = 1;
	b[3] = 0x64;
	put32(b + 4, 0);
	put32(b + 8, dst);
	put32(b + 12, src);
	put32(b + 16, qkey);
	put32(b + 20, 0);
	put32(b + 24, len);
	return 28;
}

static void sub_garbage(void)
{
	struct tctx t;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct buf b;
	struct ibv_wc wc;
	static uint8_t d[70000];
	struct sockaddr_in to = { .sin_family = AF_INET };
	int fd;

	tctx_open(&t);
	cq = ibv_create_cq(t.ctx, 64, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	qp = ibv_create_qp(t.pd, &ia);
	CHECK(qp, "ibv_create_qp(UD): %s", strerror(errno));
	net_ud_ready(qp, 1);
	buf_alloc(&t, &b, 64 * 8192, ACC_ALL);
	for (int i = 0; i < 64; i++)
		post_recv1(qp, (uint64_t)i, b.p + i * 8192, 8192, b.mr->lkey);

	fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0, "socket");
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	to.sin_port = htons((uint16_t)(qp->qp_num >> 8));
#define SEND(len) sendto(fd, d, (len), 0, (struct sockaddr *)&to, sizeof(to))
	SEND(0);
	SEND(1);
	SEND(27);
	hdr(d, qp->qp_num, 1, QKEY, 0);
	d[0] = 'X';
	SEND(28);					/* bad magic */
	hdr(d, qp->qp_num, 1, QKEY, 0);
	d[2] = 2;
	SEND(28);					/* version 2 */
	hdr(d, qp->qp_num, 1, QKEY, 0);
	d[3] = 0x0a;
	SEND(28);					/* an RC opcode */
	hdr(d, qp->qp_num, 1, QKEY, 0);
	d[5] = 0x40;
	SEND(28);					/* reserved bits */
	hdr(d, qp->qp_num, 1, QKEY, 100);
	SEND(28 + 50);					/* length lies */
	hdr(d, qp->qp_num, 1, QKEY, 5000);
	SEND(28 + 5000);				/* above the MTU */
	hdr(d, qp->qp_num, 1, QKEY, 60000);
	SEND(28 + 60000);				/* far above */
	hdr(d, qp->qp_num | 0x1000000, 1, QKEY, 0);
	SEND(28);					/* QPN above 24 bits */
	hdr(d, (qp->qp_num & ~0xffu) | 0xfe, 1, QKEY, 0);
	SEND(28);					/* no such slot */
	hdr(d, qp->qp_num ^ 0x100, 1, QKEY, 0);
	SEND(28);					/* another context's port */
	hdr(d, 0xffffff, 1, QKEY, 0);
	SEND(28);					/* multicast QPN, unicast */
	srand(1);
	for (int i = 0; i < 300; i++) {
		size_t len = (size_t)rand() % 5000;

		for (size_t j = 0; j < len; j++)
			d[j] = (uint8_t)rand();
		if (i % 3 == 0)
			hdr(d, qp->qp_num, (uint32_t)rand() & 0xffffff, QKEY, (uint32_t)rand() % 6000);
		SEND(len);
	}
	/* Every random datagram that happened to be well-formed is a valid
	 * receive; drain those, then send one known good datagram. */
	usleep(100 * 1000);
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		CHECK(wc.status == IBV_WC_SUCCESS, "a random datagram completed with %s",
		      ibv_wc_status_str(wc.status));
	CHECK(qp_state(qp) == IBV_QPS_RTS, "QP left RTS");
	hdr(d, qp->qp_num, 0x123456, QKEY, 5);
	memcpy(d + 28, "hello", 5);
	CHECK(SEND(33) == 33, "send the good datagram");
	CHECK(poll_one(cq, &wc, 5000), "the good datagram did not arrive");
	{
		uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };
		uint8_t *at = b.p + wc.wr_id * 8192;

		ud_check_recv(&wc, at, qp, 0x123456, lo, lo, 5, "hand-made datagram");
		check_bytes(at + UD_GRH, "hello", 5, "hand-made datagram");
	}
	close(fd);
	CHECK(ibv_destroy_qp(qp) == 0, "destroy");
	buf_free(&b);
	ibv_destroy_cq(cq);
	tctx_close(&t);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "garbage_then_good", sub_garbage } };

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
