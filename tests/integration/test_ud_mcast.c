/* UD multicast between two processes on loopback: ibv_attach_mcast maps
 * an IPv4-mapped MGID onto an IP multicast group (chan/udp.h); a send to
 * the group (QPN 0xFFFFFF) reaches every attached QP, in this process
 * and the other, and stops reaching a QP once it detaches. The groups
 * are joined on lo only (SOFTRNIC_UD_MCAST_IF), so nothing leaves the
 * host. */
#include "ud_common.h"

#include <stdlib.h>
#include <time.h>

enum { T_GO = 1, T_DONE, T_POSTED, T_SENT };

#define SLOT (UD_GRH + 256)

static union ibv_gid mgid;

static int lo_index(struct net_end *n)
{
	union ibv_gid lo = { .raw = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 } };
	int i = ud_gid_index(n->t.ctx, &lo);

	CHECK(i >= 0, "no GID for 127.0.0.1");
	return i;
}

static void attach(struct ibv_qp *qp)
{
	int rc = ibv_attach_mcast(qp, &mgid, 0);

	CHECK(rc == 0, "ibv_attach_mcast: %s", strerror(rc));
}

static void mc_a(struct net_end *n)
{
	int lo = lo_index(n);
	struct ibv_ah *ah;
	struct ibv_wc wc;
	uint8_t want[64];

	attach(n->qp);
	CHECK(ibv_attach_mcast(n->qp, &mgid, 0) == 0, "attaching twice is not an error");
	ah = ud_ah(n->t.pd, &mgid, lo);
	post_recv1(n->qp, 100, n->b.p, SLOT, n->b.mr->lkey);
	net_expect(n, T_POSTED, "B attached");
	fill_pattern(n->b.p + 4096, 64, 1);
	CHECK(ud_send(n->qp, ah, 0xffffff, NET_UD_QKEY, 1, n->b.p + 4096, 64, n->b.mr->lkey,
		      IBV_WR_SEND, 0, 0) == 0, "post multicast send");
	expect_wc(n->scq, &wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "multicast send");
	/* This QP is attached too: it hears its own datagram. */
	expect_wc(n->rcq, &wc, 100, IBV_WC_SUCCESS, IBV_WC_RECV, "own multicast datagram");
	CHECK(wc.src_qp == n->qp->qp_num, "src_qp %#x", wc.src_qp);
	fill_pattern(want, 64, 1);
	check_bytes(n->b.p + UD_GRH, want, 64, "own multicast datagram");
	net_put(n, T_SENT);
	net_expect(n, T_POSTED, "B detached one QP");
	CHECK(ibv_detach_mcast(n->qp, &mgid, 0) == 0, "ibv_detach_mcast");
	CHECK(ibv_detach_mcast(n->qp, &mgid, 0) != 0, "detaching twice succeeded");
	fill_pattern(n->b.p + 4096, 64, 2);
	CHECK(ud_send(n->qp, ah, 0xffffff, NET_UD_QKEY, 2, n->b.p + 4096, 64, n->b.mr->lkey,
		      IBV_WR_SEND, 0, 0) == 0, "post multicast send");
	expect_wc(n->scq, &wc, 2, IBV_WC_SUCCESS, IBV_WC_SEND, "multicast send 2");
	net_put(n, T_SENT);
	net_expect(n, T_DONE, "B done");
	ibv_destroy_ah(ah);
}

static void mc_b(struct net_end *n)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = n->scq, .recv_cq = n->rcq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp2 = ibv_create_qp(n->t.pd, &ia);
	union ibv_gid lo = { .raw = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 } };
	uint8_t want[64];
	struct ibv_wc wc;
	int got = 0;

	CHECK(qp2, "second UD QP: %s", strerror(errno));
	net_ud_ready(qp2, 1);
	CHECK(ibv_attach_mcast(n->qp, &lo, 0) == EINVAL, "attach to a unicast GID");
	attach(n->qp);
	attach(qp2);
	post_recv1(n->qp, 100, n->b.p, SLOT, n->b.mr->lkey);
	post_recv1(n->qp, 101, n->b.p + SLOT, SLOT, n->b.mr->lkey);
	post_recv1(qp2, 200, n->b.p + 2 * SLOT, SLOT, n->b.mr->lkey);
	post_recv1(qp2, 201, n->b.p + 3 * SLOT, SLOT, n->b.mr->lkey);
	net_put(n, T_POSTED);
	net_expect(n, T_SENT, "A sent");
	fill_pattern(want, 64, 1);
	for (int i = 0; i < 2; i++) {
		uint8_t *at;

		CHECK(poll_one(n->rcq, &wc, 5000), "multicast receive %d: none", i);
		at = n->b.p + (wc.wr_id == 100 ? 0 : 2 * SLOT);
		CHECK(wc.wr_id == 100 || wc.wr_id == 200, "wr_id %llu", (unsigned long long)wc.wr_id);
		ud_check_recv(&wc, at, wc.wr_id == 100 ? n->qp : qp2, n->peer.qpn, lo.raw,
			      mgid.raw, 64, "multicast receive");
		check_bytes(at + UD_GRH, want, 64, "multicast payload");
		got |= wc.wr_id == 100 ? 1 : 2;
		/* rdma-core answers no multicast message: no unicast GID */
		CHECK(!ibv_create_ah_from_wc(n->t.pd, &wc, (struct ibv_grh *)at, 1),
		      "ibv_create_ah_from_wc on a multicast receive succeeded");
	}
	CHECK(got == 3, "both attached QPs received (%d)", got);
	CHECK(ibv_detach_mcast(qp2, &mgid, 0) == 0, "detach qp2");
	net_put(n, T_POSTED);
	net_expect(n, T_SENT, "A sent again");
	expect_wc(n->rcq, &wc, 101, IBV_WC_SUCCESS, IBV_WC_RECV, "attached QP, second datagram");
	expect_no_wc(n->rcq, 200, "the detached QP");
	/* Destroying an attached QP detaches it. */
	CHECK(ibv_destroy_qp(qp2) == 0, "destroy qp2");
	net_put(n, T_DONE);
}

static void sub_mcast(void)
{
	struct net_opts o = ud_opts();

	net_fork_run(&o, mc_a, mc_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "two_processes", sub_mcast } };
	char port[16];

	/* A group and port of our own, so parallel runs do not meet. */
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	mgid.raw[10] = mgid.raw[11] = 0xff;
	mgid.raw[12] = 239;
	mgid.raw[13] = 255;
	mgid.raw[14] = (uint8_t)rand();
	mgid.raw[15] = (uint8_t)(1 + rand() % 250);
	snprintf(port, sizeof(port), "%d", 20000 + rand() % 20000);
	setenv("SOFTRNIC_UD_MCAST_PORT", port, 1);
	setenv("SOFTRNIC_UD_MCAST_IF", "lo", 1);
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
