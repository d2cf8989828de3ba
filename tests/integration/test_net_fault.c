/* A source buffer unmapped after its WRITE was posted but before the bytes
 * left (the channel sends straight from registered memory): the WQE
 * completes with IBV_WC_LOC_PROT_ERR (or succeeds if it had already left),
 * the stream stays framed, and nothing crashes. Two processes over TCP. */
#include "net_common.h"

#include <sys/mman.h>

enum { T_GO = 1, T_DONE };

static void fault_a(struct net_end *n)
{
	size_t len = 256 * KIB;
	uint8_t *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int got = 0, faulted = 0;

	CHECK(src != MAP_FAILED, "mmap");
	memset(src, 0x5a, len);
	mr = ibv_reg_mr(n->t.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	net_expect(n, T_GO, "B ready");
	/* a big WRITE first, so the next one waits behind it */
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 1, n->b.p, 3 * MIB, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr, n->peer.rkey, 0) == 0, "post 1");
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 2, src, (uint32_t)len, mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr + 3 * MIB, n->peer.rkey, 0) == 0, "post 2");
	CHECK(munmap(src, len) == 0, "munmap");
	while (got < 2 && poll_one(n->scq, &wc, 5000) == 1) {
		got++;
		if (wc.wr_id == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "WRITE 1: %s", ibv_wc_status_str(wc.status));
		} else {
			CHECK(wc.wr_id == 2, "wr_id %llu", (unsigned long long)wc.wr_id);
			CHECK(wc.status == IBV_WC_LOC_PROT_ERR || wc.status == IBV_WC_SUCCESS,
			      "WRITE from unmapped memory: %s", ibv_wc_status_str(wc.status));
			faulted = wc.status == IBV_WC_LOC_PROT_ERR;
		}
	}
	CHECK(got == 2, "only %d completions", got);
	if (faulted)
		CHECK(qp_state(n->qp) == IBV_QPS_ERR, "QP not in ERR after LOC_PROT_ERR");
	printf("  note: WRITE from unmapped memory %s\n",
	       faulted ? "failed with LOC_PROT_ERR" : "had left before the unmap");
	net_put(n, T_DONE);
	ibv_dereg_mr(mr);
}

static void fault_b(struct net_end *n)
{
	net_put(n, T_GO);
	net_expect(n, T_DONE, "A done");
}

static void sub_fault(void)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 4 * MIB;
	net_fork_run(&o, fault_a, fault_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "unmapped_source", sub_fault } };

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
