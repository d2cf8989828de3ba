/* Raw packet QPs, flow steering and RSS (DESIGN.md decision 20): frames
 * between two raw QPs of two contexts with a flow rule (bytes and
 * completions compared), frames that match no rule are not delivered,
 * priorities and DONT_TRAP, a sniffer, RSS spreading frames over WQs by
 * the Toeplitz hash (computed here independently), the errors the man
 * pages give, and EPERM without CAP_NET_RAW. Raw packet QPs need
 * CAP_NET_RAW: without it every subtest but no_cap_net_raw skips. */
#include "common.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/capability.h>

#define FRAME_MAX 2048
#define NSLOT 64

static const uint8_t MAC_A[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a };
static const uint8_t MAC_B[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b };
static const uint8_t MAC_MC[6] = { 0x01, 0x00, 0x5e, 0x00, 0x00, 0x42 };

static bool have_net_raw(void)
{
	int fd = socket(AF_PACKET, SOCK_RAW, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void need_net_raw(void)
{
	if (!have_net_raw())
		SKIP("no CAP_NET_RAW: raw packet QPs are EPERM here (as with the kernel)");
}

struct raw_end {
	struct tctx t;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct buf b;		/* NSLOT receive slots, then send frames */
};

static uint8_t *rslot(struct raw_end *e, int i) { return e->b.p + (size_t)i * FRAME_MAX; }
static uint8_t *sframe(struct raw_end *e) { return e->b.p + (size_t)NSLOT * FRAME_MAX; }

static void raw_open(struct raw_end *e)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	tctx_open(&e->t);
	e->cq = ibv_create_cq(e->t.ctx, 256, NULL, NULL, 0);
	CHECK(e->cq, "ibv_create_cq: %s", strerror(errno));
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = e->cq;
	ia.qp_type = IBV_QPT_RAW_PACKET;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = NSLOT;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
	e->qp = ibv_create_qp(e->t.pd, &ia);
	CHECK(e->qp, "ibv_create_qp(RAW_PACKET): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0, "to INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE) == 0, "to RTR");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE) == 0, "to RTS");
	buf_alloc(&e->t, &e->b, (size_t)(NSLOT + 1) * FRAME_MAX, IBV_ACCESS_LOCAL_WRITE);
}

static void raw_close(struct raw_end *e)
{
	CHECK(ibv_destroy_qp(e->qp) == 0, "ibv_destroy_qp");
	buf_free(&e->b);
	CHECK(ibv_destroy_cq(e->cq) == 0, "ibv_destroy_cq");
	tctx_close(&e->t);
}

static void post_slots(struct raw_end *e, int n)
{
	for (int i = 0; i < n; i++)
		post_recv1(e->qp, 100 + (uint64_t)i, rslot(e, i), FRAME_MAX, e->b.mr->lkey);
}

/* Ethernet | IPv4 | UDP or TCP | pattern, len bytes in all. */
static uint32_t build_frame(uint8_t *p, const uint8_t dst[6], uint32_t src_ip, uint32_t dst_ip,
			    uint8_t proto, uint16_t sport, uint16_t dport, uint32_t len,
			    uint32_t seed)
{
	uint16_t v16;
	uint32_t l4 = proto == IPPROTO_TCP ? 20 : 8;

	memset(p, 0, 14 + 20 + l4);
	memcpy(p, dst, 6);
	memcpy(p + 6, MAC_A, 6);
	v16 = htons(0x0800);
	memcpy(p + 12, &v16, 2);
	p[14] = 0x45;
	v16 = htons((uint16_t)(len - 14));
	memcpy(p + 16, &v16, 2);
	p[22] = 64;
	p[23] = proto;
	src_ip = htonl(src_ip);
	dst_ip = htonl(dst_ip);
	memcpy(p + 26, &src_ip, 4);
	memcpy(p + 30, &dst_ip, 4);
	v16 = htons(sport);
	memcpy(p + 34, &v16, 2);
	v16 = htons(dport);
	memcpy(p + 36, &v16, 2);
	if (proto == IPPROTO_TCP)
		p[46] = 5 << 4;
	fill_pattern(p + 34 + l4, len - 34 - l4, seed);
	return len;
}

static void send_frame(struct raw_end *e, uint64_t wr_id, uint32_t len)
{
	struct ibv_wc wc;

	CHECK(post_send1(e->qp, IBV_WR_SEND, wr_id, sframe(e), len, e->b.mr->lkey,
			 IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post raw send");
	expect_wc(e->cq, &wc, wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, "raw send completion");
}

/* The receive got exactly the frame in sframe(from). */
static void expect_frame(struct raw_end *to, struct raw_end *from, int slot_i, uint32_t len,
			 const char *what)
{
	struct ibv_wc wc;

	expect_wc(to->cq, &wc, 100 + (uint64_t)slot_i, IBV_WC_SUCCESS, IBV_WC_RECV, what);
	CHECK(wc.byte_len == len, "%s: byte_len %u, want %u", what, wc.byte_len, len);
	CHECK(wc.qp_num == to->qp->qp_num, "%s: qp_num %#x", what, wc.qp_num);
	check_bytes(rslot(to, slot_i), sframe(from), len, what);
}

/* One flow rule, built in place: the attribute, then its specs. */
struct rule {
	struct ibv_flow_attr attr;
	uint8_t specs[256];
	size_t used;
};

static void rule_init(struct rule *r, enum ibv_flow_attr_type type, uint16_t prio, uint32_t flags)
{
	memset(r, 0, sizeof(*r));
	r->attr.type = type;
	r->attr.priority = prio;
	r->attr.port = 1;
	r->attr.flags = flags;
	r->attr.size = sizeof(r->attr);
}

static void *rule_add(struct rule *r, size_t size)
{
	void *s = r->specs + r->used;

	r->used += size;
	r->attr.num_of_specs++;
	r->attr.size += (uint16_t)size;
	return s;
}

static void rule_eth_dst(struct rule *r, const uint8_t mac[6])
{
	struct ibv_flow_spec_eth *s = rule_add(r, sizeof(*s));

	s->type = IBV_FLOW_SPEC_ETH;
	s->size = sizeof(*s);
	memcpy(s->val.dst_mac, mac, 6);
	memset(s->mask.dst_mac, 0xff, 6);
}

static void rule_udp_dport(struct rule *r, enum ibv_flow_spec_type t, uint16_t dport)
{
	struct ibv_flow_spec_tcp_udp *s = rule_add(r, sizeof(*s));

	s->type = t;
	s->size = sizeof(*s);
	s->val.dst_port = htons(dport);
	s->mask.dst_port = 0xffff;
}

static struct ibv_flow *flow_on(struct ibv_qp *qp, struct rule *r)
{
	struct ibv_flow *f = ibv_create_flow(qp, &r->attr);

	CHECK(f, "ibv_create_flow: %s", strerror(errno));
	return f;
}

/* ---- subtests ------------------------------------------------------------ */

/* Bytes and completions between two contexts; a frame for another MAC is
 * not delivered; the sender, which has no rule, receives nothing. */
static void flow_eth(void)
{
	struct raw_end a, b;
	struct ibv_flow *f;
	struct rule r;
	uint32_t lens[] = { 14, 60, 1024, FRAME_MAX };

	need_net_raw();
	raw_open(&a);
	raw_open(&b);
	post_slots(&a, 4);
	post_slots(&b, 8);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	rule_eth_dst(&r, MAC_B);
	f = flow_on(b.qp, &r);
	for (int i = 0; i < (int)ARRAY_SIZE(lens); i++) {
		uint32_t len = lens[i];

		if (len < 34 + 8) {
			/* just a header: what follows the MAC is anything */
			memcpy(sframe(&a), MAC_B, 6);
			fill_pattern(sframe(&a) + 6, len - 6, 7);
		} else {
			build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP,
				    1, 2, len, (uint32_t)i);
		}
		send_frame(&a, 1 + (uint64_t)i, len);
		expect_frame(&b, &a, i, len, "frame for the rule's MAC");
	}
	build_frame(sframe(&a), MAC_MC, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 100, 9);
	send_frame(&a, 10, 100);
	expect_no_wc(b.cq, 200, "frame for another MAC delivered");
	expect_no_wc(a.cq, 50, "QP without a rule received a frame");
	/* the rule gone, nothing arrives any more */
	CHECK(ibv_destroy_flow(f) == 0, "ibv_destroy_flow");
	build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 100, 10);
	send_frame(&a, 11, 100);
	expect_no_wc(b.cq, 200, "frame delivered after its rule was destroyed");
	raw_close(&b);
	raw_close(&a);
}

/* L3/L4 specs: the UDP port decides; a TCP frame with the same ports does
 * not match a UDP spec. */
static void flow_l4(void)
{
	struct raw_end a, b;
	struct ibv_flow *f;
	struct rule r;
	struct ibv_flow_spec_ipv4 *ip;

	need_net_raw();
	raw_open(&a);
	raw_open(&b);
	post_slots(&b, 4);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	ip = rule_add(&r, sizeof(*ip));
	ip->type = IBV_FLOW_SPEC_IPV4;
	ip->size = sizeof(*ip);
	ip->val.dst_ip = htonl(0xc6120001);	/* 198.18.0.1 */
	ip->mask.dst_ip = 0xffffffff;
	rule_udp_dport(&r, IBV_FLOW_SPEC_UDP, 4791);
	f = flow_on(b.qp, &r);
	build_frame(sframe(&a), MAC_B, 0xc6120002, 0xc6120001, IPPROTO_UDP, 5000, 4791, 300, 1);
	send_frame(&a, 1, 300);
	expect_frame(&b, &a, 0, 300, "UDP frame to the rule's address and port");
	build_frame(sframe(&a), MAC_B, 0xc6120002, 0xc6120001, IPPROTO_UDP, 5000, 4792, 300, 2);
	send_frame(&a, 2, 300);
	build_frame(sframe(&a), MAC_B, 0xc6120002, 0xc6120001, IPPROTO_TCP, 5000, 4791, 300, 3);
	send_frame(&a, 3, 300);
	build_frame(sframe(&a), MAC_B, 0xc6120002, 0xc6120009, IPPROTO_UDP, 5000, 4791, 300, 4);
	send_frame(&a, 4, 300);
	expect_no_wc(b.cq, 200, "non-matching frame delivered");
	CHECK(ibv_destroy_flow(f) == 0, "ibv_destroy_flow");
	raw_close(&b);
	raw_close(&a);
}

/* A better priority traps the frame; DONT_TRAP shares it; a sniffer sees
 * everything; ALL_DEFAULT gets only what no rule took. */
static void flow_priority(void)
{
	struct raw_end a, b, c;
	struct ibv_flow *fb, *fc, *fa;
	struct rule r;

	need_net_raw();
	raw_open(&a);
	raw_open(&b);
	raw_open(&c);
	post_slots(&a, 8);
	post_slots(&b, 8);
	post_slots(&c, 8);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 1, 0);
	rule_eth_dst(&r, MAC_B);
	fc = flow_on(c.qp, &r);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	rule_eth_dst(&r, MAC_B);
	fb = flow_on(b.qp, &r);
	rule_init(&r, IBV_FLOW_ATTR_ALL_DEFAULT, 0, 0);
	fa = flow_on(a.qp, &r);

	build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 200, 1);
	send_frame(&a, 1, 200);
	expect_frame(&b, &a, 0, 200, "priority 0 rule");
	expect_no_wc(c.cq, 100, "priority 1 rule got a trapped frame");
	expect_no_wc(a.cq, 50, "default rule got a steered frame");
	build_frame(sframe(&a), MAC_MC, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 200, 2);
	send_frame(&a, 2, 200);
	expect_frame(&a, &a, 0, 200, "default rule gets the unsteered frame");

	CHECK(ibv_destroy_flow(fb) == 0, "ibv_destroy_flow");
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, IBV_FLOW_ATTR_FLAGS_DONT_TRAP);
	rule_eth_dst(&r, MAC_B);
	fb = flow_on(b.qp, &r);
	build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 200, 3);
	send_frame(&a, 3, 200);
	expect_frame(&b, &a, 1, 200, "DONT_TRAP rule");
	expect_frame(&c, &a, 0, 200, "rule after a DONT_TRAP rule");

	CHECK(ibv_destroy_flow(fa) == 0, "ibv_destroy_flow");
	rule_init(&r, IBV_FLOW_ATTR_SNIFFER, 0, 0);
	fa = flow_on(a.qp, &r);
	build_frame(sframe(&a), MAC_MC, 0xc6120001, 0xc6120002, IPPROTO_UDP, 1, 2, 200, 4);
	send_frame(&a, 4, 200);
	expect_frame(&a, &a, 1, 200, "sniffer");
	CHECK(ibv_destroy_flow(fa) == 0 && ibv_destroy_flow(fb) == 0 &&
	      ibv_destroy_flow(fc) == 0, "ibv_destroy_flow");
	raw_close(&c);
	raw_close(&b);
	raw_close(&a);
}

/* Toeplitz, the textbook way: for each set input bit i, XOR in the 32
 * key bits starting at bit i (independent of the library's code). */
static uint32_t toeplitz(const uint8_t *key, const uint8_t *in, size_t len)
{
	uint32_t h = 0;

	for (size_t i = 0; i < len * 8; i++) {
		uint32_t k = 0;

		if (!(in[i / 8] & (0x80 >> (i % 8))))
			continue;
		for (size_t j = 0; j < 32; j++)
			if (key[(i + j) / 8] & (0x80 >> ((i + j) % 8)))
				k |= 1U << (31 - j);
		h ^= k;
	}
	return h;
}

#define RSS_LOG 2
#define RSS_N (1 << RSS_LOG)

/* 32 frames with different source addresses land on the WQ the hash
 * names, each on that WQ's CQ, bytes intact; they spread. */
static void rss_spread(void)
{
	static const uint8_t key[40] = {
		0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
		0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
		0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
		0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
	};
	struct raw_end a, s;
	struct ibv_cq *cq[RSS_N];
	struct ibv_wq *wq[RSS_N];
	struct ibv_rwq_ind_table *tbl;
	struct ibv_qp *rss;
	struct ibv_flow *f;
	struct rule r;
	int got[RSS_N] = { 0 }, used = 0;

	need_net_raw();
	raw_open(&a);
	tctx_open(&s.t);
	buf_alloc(&s.t, &s.b, (size_t)(NSLOT + 1) * FRAME_MAX, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < RSS_N; i++) {
		struct ibv_wq_init_attr wa = {
			.wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1,
			.pd = s.t.pd,
		};
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };

		cq[i] = ibv_create_cq(s.t.ctx, 64, NULL, NULL, 0);
		CHECK(cq[i], "ibv_create_cq");
		wa.cq = cq[i];
		wq[i] = ibv_create_wq(s.t.ctx, &wa);
		CHECK(wq[i], "ibv_create_wq: %s", strerror(errno));
		CHECK(ibv_modify_wq(wq[i], &m) == 0 && wq[i]->state == IBV_WQS_RDY, "WQ to RDY");
		for (int j = 0; j < 32; j++) {
			struct ibv_sge sge = { (uintptr_t)rslot(&s, 32 + j), FRAME_MAX, s.b.mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = (uint64_t)(i << 8 | j), .sg_list = &sge,
						  .num_sge = 1 }, *bad;

			/* each WQ's j-th receive uses slot 32 + j: frames are
			 * checked as they arrive, one at a time */
			CHECK(ibv_post_wq_recv(wq[i], &rw, &bad) == 0, "ibv_post_wq_recv");
		}
	}
	{
		struct ibv_rwq_ind_table_init_attr ta = { .log_ind_tbl_size = RSS_LOG, .ind_tbl = wq };
		struct ibv_qp_init_attr_ex qa = {
			.qp_type = IBV_QPT_RAW_PACKET,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH |
				     IBV_QP_INIT_ATTR_IND_TABLE,
			.pd = s.t.pd,
			.rx_hash_conf = {
				.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ,
				.rx_hash_key_len = sizeof(key), .rx_hash_key = (uint8_t *)key,
				.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
						       IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP,
			},
		};

		tbl = ibv_create_rwq_ind_table(s.t.ctx, &ta);
		CHECK(tbl, "ibv_create_rwq_ind_table: %s", strerror(errno));
		qa.rwq_ind_tbl = tbl;
		rss = ibv_create_qp_ex(s.t.ctx, &qa);
		CHECK(rss, "ibv_create_qp_ex(RSS): %s", strerror(errno));
	}
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	rule_eth_dst(&r, MAC_B);
	f = flow_on(rss, &r);
	for (int i = 0; i < 32; i++) {
		uint32_t src = 0xc6120000 + (uint32_t)i * 1021, dst = 0xc6130001;
		uint16_t sp = (uint16_t)(1000 + i), dp = 4791;
		uint8_t in[12];
		uint32_t v, want;
		struct ibv_wc wc;
		char what[64];

		build_frame(sframe(&a), MAC_B, src, dst, IPPROTO_UDP, sp, dp, 128, (uint32_t)i);
		memcpy(in, sframe(&a) + 26, 8);		/* source, destination */
		memcpy(in + 8, sframe(&a) + 34, 4);	/* source, destination port */
		v = toeplitz(key, in, sizeof(in));
		want = v & (RSS_N - 1);
		send_frame(&a, 1 + (uint64_t)i, 128);
		snprintf(what, sizeof(what), "frame %d on WQ %u", i, want);
		expect_wc(cq[want], &wc, (uint64_t)(want << 8 | got[want]), IBV_WC_SUCCESS,
			  IBV_WC_RECV, what);
		CHECK(wc.byte_len == 128 && wc.qp_num == wq[want]->wq_num,
		      "%s: byte_len %u qp_num %#x (WQ %#x)", what, wc.byte_len, wc.qp_num,
		      wq[want]->wq_num);
		check_bytes(rslot(&s, 32 + got[want]), sframe(&a), 128, what);
		used += !got[want]++;
	}
	for (int i = 0; i < RSS_N; i++)
		expect_no_wc(cq[i], 20, "a frame completed twice");
	CHECK(used >= 2, "32 frames all hashed to one WQ");
	NOTE("per WQ: %d %d %d %d", got[0], got[1], got[2], got[3]);

	/* what is in use cannot go */
	CHECK(ibv_destroy_rwq_ind_table(tbl) == EBUSY, "destroy a table in use");
	CHECK(ibv_destroy_wq(wq[0]) == EBUSY, "destroy a WQ in a table");
	CHECK(ibv_destroy_qp(rss) == EBUSY, "destroy a QP with a flow");
	{
		struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

		CHECK(ibv_modify_qp(rss, &qa, IBV_QP_STATE | IBV_QP_PORT) == EOPNOTSUPP,
		      "modify an RSS QP");
	}
	CHECK(ibv_destroy_flow(f) == 0 && ibv_destroy_qp(rss) == 0, "flow, RSS QP");
	CHECK(ibv_destroy_rwq_ind_table(tbl) == 0, "ibv_destroy_rwq_ind_table");
	for (int i = 0; i < RSS_N; i++) {
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_ERR };
		struct ibv_wc wc;
		int n = 0;

		/* ERR flushes what is left */
		CHECK(ibv_modify_wq(wq[i], &m) == 0, "WQ to ERR");
		while (poll_one(cq[i], &wc, 100)) {
			CHECK(wc.status == IBV_WC_WR_FLUSH_ERR, "flush status %d", wc.status);
			n++;
		}
		CHECK(n == 32 - got[i], "WQ %d flushed %d, want %d", i, n, 32 - got[i]);
		CHECK(ibv_destroy_wq(wq[i]) == 0 && ibv_destroy_cq(cq[i]) == 0, "WQ, CQ");
	}
	buf_free(&s.b);
	tctx_close(&s.t);
	raw_close(&a);
}

/* What the man pages make errors. */
static void raw_errors(void)
{
	struct raw_end a;
	struct rule r;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	need_net_raw();
	raw_open(&a);
	/* a frame shorter than an Ethernet header; a non-SEND opcode */
	memset(&wr, 0, sizeof(wr));
	sge = (struct ibv_sge){ (uintptr_t)sframe(&a), 10, a.b.mr->lkey };
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr, "10-byte frame");
	sge.length = 64;
	wr.opcode = IBV_WR_RDMA_WRITE;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL, "RDMA WRITE on a raw QP");
	/* unsupported spec, bad port, egress */
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	{
		struct ibv_flow_spec_tunnel *t = rule_add(&r, sizeof(*t));

		t->type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
		t->size = sizeof(*t);
	}
	errno = 0;
	CHECK(!ibv_create_flow(a.qp, &r.attr) && errno == EOPNOTSUPP, "VXLAN spec: %d", errno);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	r.attr.port = 2;
	errno = 0;
	CHECK(!ibv_create_flow(a.qp, &r.attr) && errno == EINVAL, "port 2: %d", errno);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, IBV_FLOW_ATTR_FLAGS_EGRESS);
	errno = 0;
	CHECK(!ibv_create_flow(a.qp, &r.attr) && errno == EOPNOTSUPP, "egress: %d", errno);
	raw_close(&a);
}

static void pipe_put(int fd, char c)
{
	CHECK(write(fd, &c, 1) == 1, "pipe write");
}

static char pipe_get(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c = 0;

	CHECK(poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 1, "no word from the other process");
	return c;
}

/* Receiver: a rule for MAC_B; the two matching frames arrive with their
 * bytes, the one for another MAC in between does not. */
static void uplink_receiver(int rd, int wr)
{
	struct raw_end b;
	struct rule r;
	struct ibv_flow *f;

	raw_open(&b);
	post_slots(&b, 4);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	rule_eth_dst(&r, MAC_B);
	f = flow_on(b.qp, &r);
	pipe_put(wr, 'R');
	for (int i = 0; i < 2; i++) {
		uint32_t seed = i ? 3 : 1;

		/* the expected frame, built here as the sender builds it */
		build_frame(sframe(&b), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 7, 8, 700, seed);
		expect_frame(&b, &b, i, 700, "frame from the other process");
	}
	expect_no_wc(b.cq, 200, "frame for another MAC, or a copy, delivered");
	CHECK(ibv_destroy_flow(f) == 0, "ibv_destroy_flow");
	raw_close(&b);
	pipe_put(wr, 'D');
	(void)rd;
}

/* SOFTRNIC_RAW_IF=lo: frames reach a raw QP of another process; the
 * sender's own rule gets each of its frames once (its copy coming back
 * in through lo is recognised). */
static void uplink_two_processes(void)
{
	int to_child[2], to_parent[2], st;
	struct raw_end a;
	struct rule r;
	struct ibv_flow *f;
	pid_t pid;

	need_net_raw();
	CHECK(setenv("SOFTRNIC_RAW_IF", "lo", 1) == 0, "setenv");
	CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(30);
		uplink_receiver(to_child[0], to_parent[1]);
		_exit(0);
	}
	raw_open(&a);
	post_slots(&a, 8);
	rule_init(&r, IBV_FLOW_ATTR_NORMAL, 0, 0);
	rule_eth_dst(&r, MAC_B);
	f = flow_on(a.qp, &r);
	CHECK(pipe_get(to_parent[0], DEADLINE_MS) == 'R', "receiver ready");
	build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 7, 8, 700, 1);
	send_frame(&a, 1, 700);
	expect_frame(&a, &a, 0, 700, "own rule, first frame");
	build_frame(sframe(&a), MAC_MC, 0xc6120001, 0xc6120002, IPPROTO_UDP, 7, 8, 700, 2);
	send_frame(&a, 2, 700);
	build_frame(sframe(&a), MAC_B, 0xc6120001, 0xc6120002, IPPROTO_UDP, 7, 8, 700, 3);
	send_frame(&a, 3, 700);
	expect_frame(&a, &a, 1, 700, "own rule, third frame");
	CHECK(pipe_get(to_parent[0], 10000) == 'D', "receiver done");
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "receiver failed (status %#x)", st);
	expect_no_wc(a.cq, 100, "own frame delivered twice");
	CHECK(ibv_destroy_flow(f) == 0, "ibv_destroy_flow");
	raw_close(&a);
}

/* TCP through lo as fast as it goes, from two threads of this process,
 * until blast_stop: the kernel's own frames on the interface the raw
 * QPs use. */
static _Atomic bool blast_stop;

static void *blast_pump(void *arg)
{
	static char buf[64 << 10];
	int fd = (int)(intptr_t)arg;

	while (!atomic_load(&blast_stop))
		if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) < 0)
			break;
	return NULL;
}

static void *blast_drain(void *arg)
{
	static char buf[64 << 10];
	int fd = (int)(intptr_t)arg;

	while (recv(fd, buf, sizeof(buf), 0) > 0)
		;
	return NULL;
}

static void blast_start(pthread_t t[2], int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
	      getsockname(l, (struct sockaddr *)&a, &al) == 0, "listen on lo");
	fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fds[0] >= 0 && connect(fds[0], (struct sockaddr *)&a, sizeof(a)) == 0, "connect");
	fds[1] = accept(l, NULL, NULL);
	CHECK(fds[1] >= 0, "accept");
	close(l);
	atomic_store(&blast_stop, false);
	CHECK(pthread_create(&t[0], NULL, blast_pump, (void *)(intptr_t)fds[0]) == 0 &&
	      pthread_create(&t[1], NULL, blast_drain, (void *)(intptr_t)fds[1]) == 0, "threads");
}

static void blast_end(pthread_t t[2], int fds[2])
{
	atomic_store(&blast_stop, true);
	pthread_join(t[0], NULL);
	shutdown(fds[0], SHUT_WR);
	pthread_join(t[1], NULL);
	close(fds[0]);
	close(fds[1]);
}

/* The same with lo busy with TCP meanwhile: the packet socket must not
 * lose the raw frames among the kernel's (it drops those, which carry
 * destination MAC 0, before they fill its buffer). */
static void uplink_busy_lo(void)
{
	pthread_t t[2];
	int fds[2];

	need_net_raw();
	blast_start(t, fds);
	usleep(200 * 1000);	/* at full speed */
	uplink_two_processes();
	blast_end(t, fds);
}

/* Without CAP_NET_RAW a raw packet QP is EPERM, as the kernel's. */
static void no_cap_net_raw(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	struct ibv_qp_init_attr ia;
	struct tctx t;
	struct ibv_cq *cq;

	if (have_net_raw()) {
		/* drop it from this (forked) subtest's effective set */
		CHECK(syscall(SYS_capget, &h, d) == 0, "capget");
		d[CAP_NET_RAW / 32].effective &= ~(1U << (CAP_NET_RAW % 32));
		CHECK(syscall(SYS_capset, &h, d) == 0, "capset");
		CHECK(!have_net_raw(), "CAP_NET_RAW still effective");
	}
	tctx_open(&t);
	cq = ibv_create_cq(t.ctx, 4, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RAW_PACKET;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	errno = 0;
	CHECK(!ibv_create_qp(t.pd, &ia) && errno == EPERM, "raw QP without CAP_NET_RAW: %s",
	      strerror(errno));
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	tctx_close(&t);
}

int main(int argc, char **argv)
{
	static const struct subtest t[] = {
		SUBTEST(flow_eth),
		SUBTEST(flow_l4),
		SUBTEST(flow_priority),
		SUBTEST(rss_spread),
		SUBTEST(raw_errors),
		SUBTEST(uplink_two_processes),
		SUBTEST(uplink_busy_lo),
		SUBTEST(no_cap_net_raw),
	};

	return run_subtests(argc, argv, t, ARRAY_SIZE(t));
}
