/* Hostile input on the wire: a peer that speaks just enough MPA to get a
 * stream attached to a QP, then sends junk (random bytes, truncated or
 * oversized frames, bad versions, opcodes, queue numbers, MSNs, keys).
 * The process must survive, the QP must end in ERROR within a bounded
 * time, and the context must still work afterwards. Also junk in place of
 * the MPA request itself. */
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = (uint8_t)v;
}

static int dial(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0, "socket");
	CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;		/* the victim may close on us: fine */
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

/* An MPA rev 2 request (RFC 5044 §7.1, RFC 6581) with softrnic's hello. */
static size_t mpa_request(uint8_t *b, uint32_t src_qpn, uint32_t dst_qpn)
{
	memcpy(b, "MPA ID Req Frame", 16);
	b[16] = 0x10;		/* enhanced */
	b[17] = 2;		/* rev 2 */
	put16(b + 18, 4 + 16);
	put32(b + 20, (4u << 16) | 4u);	/* IRD 4, ORD 4 */
	put32(b + 24, 0x53524e43);	/* "SRNC" */
	b[28] = 1;
	b[29] = 1;
	b[30] = b[31] = 0;
	put32(b + 32, src_qpn);
	put32(b + 36, dst_qpn);
	return 40;
}

static int wait_reply(int fd)
{
	uint8_t r[64];
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, 5000) != 1)
		return -1;
	return (int)recv(fd, r, sizeof(r), 0);
}

/* One kind of junk after a good handshake. */
static size_t junk(uint8_t *b, size_t cap, int kind, unsigned int *seed)
{
	size_t n = 0;

	switch (kind) {
	case 0:		/* random bytes */
		n = 1 + rand_r(seed) % (cap - 1);
		for (size_t i = 0; i < n; i++)
			b[i] = (uint8_t)rand_r(seed);
		return n;
	case 1:		/* ULPDU length far beyond what follows, then EOF */
		put16(b, 0xffff);
		memset(b + 2, 0x41, 100);
		return 102;
	case 2:		/* DDP version 3 */
		put16(b, 18);
		memset(b + 2, 0, 18 + 6);
		b[2] = 0x43;
		b[3] = 0x43;
		return 2 + 18 + 2 + 4;
	case 3:		/* SEND on queue 7, MSN 99 */
		put16(b, 18);
		memset(b + 2, 0, 24);
		b[2] = 0x41;
		b[3] = 0x43;
		put32(b + 8, 7);
		put32(b + 12, 99);
		return 2 + 18 + 2 + 4;
	case 4:		/* tagged WRITE to a random STag and address */
		put16(b, 14 + 64);
		b[2] = 0xc1;
		b[3] = 0x40;
		put32(b + 4, (uint32_t)rand_r(seed));
		put32(b + 8, (uint32_t)rand_r(seed));
		put32(b + 12, (uint32_t)rand_r(seed));
		memset(b + 16, 0x5a, 64);
		memset(b + 80, 0, 2 + 4);
		return 86;
	case 5:		/* READ request for 1 GiB at a random key */
		put16(b, 18 + 28);
		memset(b + 2, 0, 18 + 28 + 6);
		b[2] = 0x41;
		b[3] = 0x41;
		put32(b + 8, 1);
		put32(b + 12, 1);
		put32(b + 28, 1u << 30);
		put32(b + 32, (uint32_t)rand_r(seed));
		return 2 + 18 + 28 + 2 + 4;
	default:	/* a reserved RDMAP opcode (0xc..0xf) outside softrnic's */
		put16(b, 18);
		memset(b + 2, 0, 24);
		b[2] = 0x41;
		b[3] = 0x40 | (0xc + rand_r(seed) % 4);
		put32(b + 8, 9);
		return 2 + 18 + 2 + 4;
	}
}

static void junk_after_handshake(void)
{
	struct tctx t;
	unsigned int seed = 12345;

	tctx_open(&t);
	for (int round = 0; round < 70; round++) {
		struct ibv_cq *cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		struct ibv_qp *qp;
		uint8_t b[4096];
		uint32_t fake = 0xfffff0;	/* larger QPN: the fake peer dials */
		int fd, st = -1;

		CHECK(cq, "cq");
		qp = ibv_create_qp(t.pd, &ia);
		CHECK(qp, "qp");
		qp_to_init(qp, ACC_ALL);
		qp_to_rtr(&t, qp, fake, IBV_MTU_4096, 0, 1);
		qp_to_rts(qp, 0, 1);
		fd = dial((uint16_t)(qp->qp_num >> 8));
		send_all(fd, b, mpa_request(b, fake, qp->qp_num));
		CHECK(wait_reply(fd) > 0, "round %d: no MPA reply", round);
		send_all(fd, b, junk(b, sizeof(b), round % 7, &seed));
		/* An incomplete frame is no error while more may come (kinds 0
		 * and 1 may be one): those end with EOF. The others must be
		 * caught as protocol errors on their own, without it. */
		if (round % 2 || round % 7 <= 1)
			shutdown(fd, SHUT_WR);
		/* a protocol violation ends in ERROR, soon */
		for (int i = 0; i < 200 && st != IBV_QPS_ERR; i++) {
			st = qp_state(qp);
			if (st != IBV_QPS_ERR)
				usleep(10000);
		}
		CHECK(st == IBV_QPS_ERR, "round %d (kind %d): QP in state %d, not ERR",
		      round, round % 7, st);
		close(fd);
		CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
		CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	}
	tctx_close(&t);
}

/* softrnic's XRC header (DESIGN.md "Extension messages on the wire"),
 * built by hand: opcode 0xe on queue 5, MSN, MO = SRQ number; no CRC. */
static size_t xrc_hdr(uint8_t *b, uint32_t msn, uint32_t srqn)
{
	memset(b, 0, 24);
	put16(b, 18);
	b[2] = 0x41;
	b[3] = 0x4e;
	put32(b + 8, 5);
	put32(b + 12, msn);
	put32(b + 16, srqn);
	return 24;
}

/* A SEND Last of 8 bytes "xrc-data" on queue 0, MSN 1, MO 0; no CRC. */
static size_t send8(uint8_t *b)
{
	memset(b, 0, 32);
	put16(b, 18 + 8);
	b[2] = 0x41;
	b[3] = 0x43;
	put32(b + 12, 1);
	memcpy(b + 20, "xrc-data", 8);
	return 32;
}

/* A fake peer speaking the XRC header: to an RC QP (not its to take),
 * to an XRC_RECV QP without one, naming no SRQ, or malformed: ERROR each
 * time. The last case is the control: the frame as documented, naming a
 * real SRQ, is received into that SRQ. */
static void xrc_headers(void)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1, .oflags = O_CREAT,
	};
	struct ibv_xrcd *x;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct buf rb;
	struct tctx t;
	uint32_t srqn;

	tctx_open(&t);
	x = ibv_open_xrcd(t.ctx, &xa);
	CHECK(x, "ibv_open_xrcd: %s", strerror(errno));
	cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(cq, "cq");
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC, .pd = t.pd, .xrcd = x, .cq = cq,
	};
	srq = ibv_create_srq_ex(t.ctx, &sa);
	CHECK(srq && ibv_get_srq_num(srq, &srqn) == 0, "XRC SRQ: %s", strerror(errno));
	buf_alloc(&t, &rb, 4096, ACC_ALL);
	for (int kind = 0; kind < 5; kind++) {
		struct ibv_qp_init_attr_ex ia = {
			.qp_type = kind ? IBV_QPT_XRC_RECV : IBV_QPT_RC,
			.comp_mask = kind ? IBV_QP_INIT_ATTR_XRCD : IBV_QP_INIT_ATTR_PD,
			.pd = t.pd, .xrcd = x, .send_cq = cq, .recv_cq = cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		uint32_t fake = 0xfffff0;	/* larger QPN: the fake peer dials */
		struct ibv_qp *qp = ibv_create_qp_ex(t.ctx, &ia);
		uint8_t b[256];
		size_t n = 0;
		int fd, st = -1;

		CHECK(qp, "kind %d: create QP: %s", kind, strerror(errno));
		qp_to_init(qp, ACC_ALL);
		qp_to_rtr(&t, qp, fake, IBV_MTU_4096, 0, 1);
		qp_to_rts(qp, 0, 1);
		fd = dial((uint16_t)(qp->qp_num >> 8));
		send_all(fd, b, mpa_request(b, fake, qp->qp_num));
		CHECK(wait_reply(fd) > 0, "kind %d: no MPA reply", kind);
		if (kind == 0 || kind == 4)
			n = xrc_hdr(b, 0, srqn);
		else if (kind == 2)
			n = xrc_hdr(b, 0, srqn ^ 0x800000);
		else if (kind == 3)
			n = xrc_hdr(b, 7, srqn);
		n += send8(b + n);
		if (kind == 4) {
			struct ibv_sge sge = { (uintptr_t)rb.p, 64, rb.mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = 44, .sg_list = &sge, .num_sge = 1 }, *bad;
			struct ibv_wc wc;

			CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "post SRQ receive");
			send_all(fd, b, n);
			expect_wc(cq, &wc, 44, IBV_WC_SUCCESS, IBV_WC_RECV, "hand-made XRC SEND");
			CHECK(wc.byte_len == 8 && wc.qp_num == qp->qp_num, "byte_len %u qp_num %#x",
			      wc.byte_len, wc.qp_num);
			check_bytes(rb.p, "xrc-data", 8, "hand-made XRC SEND payload");
			CHECK(qp_state(qp) == IBV_QPS_RTS, "QP state %d after a good XRC SEND",
			      qp_state(qp));
		} else {
			send_all(fd, b, n);
			for (int i = 0; i < 200 && st != IBV_QPS_ERR; i++) {
				st = qp_state(qp);
				if (st != IBV_QPS_ERR)
					usleep(10000);
			}
			CHECK(st == IBV_QPS_ERR, "kind %d: QP in state %d, not ERR", kind, st);
			expect_no_wc(cq, 10, "no receive for a refused XRC SEND");
		}
		close(fd);
		CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	}
	buf_free(&rb);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_close_xrcd(x) == 0, "close XRCD");
	tctx_close(&t);
}

/* softrnic's atomic write (DESIGN.md "Extension messages on the wire"),
 * built by hand: control (L, DV 1), opcode 0xe on queue 6, RsvdULP =
 * STag, MSN 0, MO; body blen bytes, the first 16 the TO (big-endian) and
 * the value; zero pad and CRC field. Returns the FPDU's length. */
static size_t awrite_frame(uint8_t *b, uint8_t ctl, uint32_t stag, uint32_t mo,
			   uint64_t to, const uint8_t *val, size_t blen)
{
	size_t n = 2 + 18 + blen;

	memset(b, 0, 64);
	put16(b, (uint16_t)(18 + blen));
	b[2] = ctl;
	b[3] = 0x4e;
	put32(b + 4, stag);
	put32(b + 8, 6);
	put32(b + 16, mo);
	if (blen >= 8) {
		put32(b + 20, (uint32_t)(to >> 32));
		put32(b + 24, (uint32_t)to);
	}
	if (blen >= 16)
		memcpy(b + 28, val, 8);
	return n + (4 - n % 4) % 4 + 4;
}

/* A fake peer sending atomic writes: malformed (body not 16 bytes, L
 * clear, MO set) or refused (misaligned) ones end in ERROR with the
 * target untouched; the control case, as documented, lands its 8 bytes
 * and the QP stays in RTS. */
static void awrite_frames(void)
{
	static const uint8_t val[8] = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4 };
	struct tctx t;
	struct ibv_cq *cq;
	struct buf rb;

	tctx_open(&t);
	cq = ibv_create_cq(t.ctx, 16, NULL, NULL, 0);
	CHECK(cq, "cq");
	buf_alloc(&t, &rb, 4096, ACC_ALL);
	for (int kind = 0; kind < 6; kind++) {
		struct ibv_qp_init_attr ia = {
			.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		uint32_t fake = 0xfffff0;	/* larger QPN: the fake peer dials */
		struct ibv_qp *qp = ibv_create_qp(t.pd, &ia);
		uint64_t to = (uintptr_t)rb.p + 64;
		uint8_t b[128];
		size_t n;
		int fd, st = -1;

		CHECK(qp, "kind %d: create QP: %s", kind, strerror(errno));
		memset(rb.p, 0xee, 256);
		qp_to_init(qp, ACC_ALL);
		qp_to_rtr(&t, qp, fake, IBV_MTU_4096, 0, 1);
		qp_to_rts(qp, 0, 1);
		fd = dial((uint16_t)(qp->qp_num >> 8));
		send_all(fd, b, mpa_request(b, fake, qp->qp_num));
		CHECK(wait_reply(fd) > 0, "kind %d: no MPA reply", kind);
		switch (kind) {
		case 0: n = awrite_frame(b, 0x41, rb.mr->rkey, 0, to, val, 16); break;
		case 1: n = awrite_frame(b, 0x41, rb.mr->rkey, 0, to, val, 15); break;
		case 2: n = awrite_frame(b, 0x01, rb.mr->rkey, 0, to, val, 16); break;
		case 3: n = awrite_frame(b, 0x41, rb.mr->rkey, 8, to, val, 16); break;
		case 4: n = awrite_frame(b, 0x41, rb.mr->rkey, 0, to + 4, val, 16); break;
		default: n = awrite_frame(b, 0x41, rb.mr->rkey, 0, to, val, 17); break;
		}
		send_all(fd, b, n);
		if (kind == 0) {
			for (int i = 0; i < 200 && memcmp(rb.p + 64, val, 8); i++)
				usleep(10000);
			check_bytes(rb.p + 64, val, 8, "hand-made atomic write");
			check_filled(rb.p, 0xee, 64, "before the target");
			check_filled(rb.p + 72, 0xee, 256 - 72, "after the target");
			CHECK(qp_state(qp) == IBV_QPS_RTS, "QP state %d after a good atomic write",
			      qp_state(qp));
		} else {
			for (int i = 0; i < 200 && st != IBV_QPS_ERR; i++) {
				st = qp_state(qp);
				if (st != IBV_QPS_ERR)
					usleep(10000);
			}
			CHECK(st == IBV_QPS_ERR, "kind %d: QP in state %d, not ERR", kind, st);
			check_filled(rb.p, 0xee, 256, "target of a refused atomic write");
		}
		close(fd);
		CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	}
	buf_free(&rb);
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	tctx_close(&t);
}

/* Junk where the MPA request should be: the stream is dropped, nothing
 * else happens, and a real pair still works afterwards. */
static void junk_instead_of_mpa(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	unsigned int seed = 777;
	struct buf b;
	struct ibv_wc wc;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	for (int i = 0; i < 50; i++) {
		uint8_t junkb[600];
		int fd = dial((uint16_t)(p.a.qp->qp_num >> 8));
		size_t n = 1 + rand_r(&seed) % sizeof(junkb);

		for (size_t k = 0; k < n; k++)
			junkb[k] = (uint8_t)rand_r(&seed);
		if (i % 5 == 0)
			memcpy(junkb, "MPA ID Req Frame", 16 < n ? 16 : n);
		send_all(fd, junkb, n);
		close(fd);
	}
	buf_alloc(&t, &b, 8192, ACC_ALL);
	fill_pattern(b.p, 100, 5);
	post_recv1(p.b.qp, 2, b.p + 4096, 200, b.mr->lkey);
	CHECK(post_send1(p.a.qp, IBV_WR_SEND, 1, b.p, 100, b.mr->lkey, IBV_SEND_SIGNALED,
			 0, 0, 0) == 0, "post");
	expect_wc(p.a.scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "SEND after the junk");
	expect_wc(p.b.rcq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_RECV, "RECV after the junk");
	check_bytes(b.p + 4096, b.p, 100, "payload");
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(junk_after_handshake),
	SUBTEST(xrc_headers),
	SUBTEST(awrite_frames),
	SUBTEST(junk_instead_of_mpa),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
