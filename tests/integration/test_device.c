/* Device discovery and queries, and fork() safety. */
#include "common.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void device_list(void)
{
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);

	CHECK(l, "ibv_get_device_list: %s", strerror(errno));
	CHECK(n >= 1, "%d devices", n);
	CHECK(l[n] == NULL, "device list not NULL-terminated");
	int found = -1;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), test_device_name()))
			found = i;
	CHECK(found >= 0, "%s not in the device list", test_device_name());
	struct ibv_device *d = l[found];
	CHECK(!strcmp(d->name, test_device_name()), "dev->name %s", d->name);
	CHECK(d->node_type == IBV_NODE_CA || d->node_type == IBV_NODE_RNIC,
	      "node_type %d", d->node_type);
	CHECK(d->transport_type == IBV_TRANSPORT_IB ||
		      d->transport_type == IBV_TRANSPORT_IWARP,
	      "transport_type %d", d->transport_type);
	NOTE("%s: node %s transport %d guid %#llx", d->name,
	     ibv_node_type_str(d->node_type), d->transport_type,
	     (unsigned long long)be64toh(ibv_get_device_guid(d)));
	struct ibv_context *ctx = ibv_open_device(d);
	CHECK(ctx, "ibv_open_device: %s", strerror(errno));
	CHECK(ctx->device == d, "ctx->device");
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(ibv_get_device_guid(d) == da.node_guid,
	      "ibv_get_device_guid %#llx != node_guid %#llx",
	      (unsigned long long)ibv_get_device_guid(d),
	      (unsigned long long)da.node_guid);
	/* a second context on the same device */
	struct ibv_context *ctx2 = ibv_open_device(d);
	CHECK(ctx2 && ctx2 != ctx, "second ibv_open_device");
	CHECK(ibv_close_device(ctx2) == 0, "close second");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(l);
}

static void query_device(void)
{
	struct tctx t;
	struct ibv_device_attr *a;
	struct ibv_device_attr_ex ax;

	tctx_open(&t);
	a = &t.dattr;
	CHECK(a->max_qp > 0 && a->max_mr > 0 && a->max_sge > 0 &&
		      a->max_cqe > 0 && a->max_qp_wr > 0 && a->max_cq > 0 &&
		      a->max_pd > 0 && a->max_mr_size > 0,
	      "limits: qp %d mr %d sge %d cqe %d qp_wr %d cq %d pd %d",
	      a->max_qp, a->max_mr, a->max_sge, a->max_cqe, a->max_qp_wr,
	      a->max_cq, a->max_pd);
	CHECK(a->max_sge >= 4, "max_sge %d < 4", a->max_sge);
	CHECK(a->atomic_cap != IBV_ATOMIC_NONE, "atomic_cap NONE");
	CHECK(a->phys_port_cnt == 1, "phys_port_cnt %u", a->phys_port_cnt);
	CHECK(a->max_qp_rd_atom > 0 && a->max_qp_init_rd_atom > 0,
	      "rd_atom %d init_rd_atom %d", a->max_qp_rd_atom,
	      a->max_qp_init_rd_atom);
	CHECK(a->max_srq > 0 && a->max_srq_wr > 0, "srq %d srq_wr %d",
	      a->max_srq, a->max_srq_wr);
	memset(&ax, 0, sizeof(ax));
	struct ibv_query_device_ex_input in = { 0 };
	int rc = ibv_query_device_ex(t.ctx, &in, &ax);
	CHECK(rc == 0, "ibv_query_device_ex: %s", strerror(rc));
	CHECK(ax.orig_attr.node_guid == a->node_guid &&
		      ax.orig_attr.max_qp == a->max_qp &&
		      ax.orig_attr.max_mr == a->max_mr &&
		      ax.orig_attr.max_sge == a->max_sge &&
		      ax.orig_attr.max_cqe == a->max_cqe &&
		      ax.orig_attr.atomic_cap == a->atomic_cap &&
		      !strcmp(ax.orig_attr.fw_ver, a->fw_ver),
	      "query_device_ex orig_attr differs from query_device");
	NOTE("max_qp %d max_mr %d max_sge %d max_cqe %d atomic %d odp %#llx",
	     a->max_qp, a->max_mr, a->max_sge, a->max_cqe, a->atomic_cap,
	     (unsigned long long)ax.odp_caps.general_caps);
	tctx_close(&t);
}

static void query_port(void)
{
	struct tctx t;
	struct ibv_port_attr *p;

	tctx_open(&t);
	p = &t.pattr;
	CHECK(p->state == IBV_PORT_ACTIVE, "port state %s",
	      ibv_port_state_str(p->state));
	CHECK(p->link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %u",
	      p->link_layer);
	CHECK(p->active_mtu == IBV_MTU_4096, "active_mtu %d", p->active_mtu);
	CHECK(p->max_mtu >= IBV_MTU_4096, "max_mtu %d", p->max_mtu);
	CHECK(p->gid_tbl_len > 0, "gid_tbl_len %d", p->gid_tbl_len);
	CHECK(p->pkey_tbl_len > 0, "pkey_tbl_len %u", p->pkey_tbl_len);
	CHECK(p->max_msg_sz >= (1u << 20), "max_msg_sz %u", p->max_msg_sz);
	struct ibv_port_attr bad;
	CHECK(ibv_query_port(t.ctx, 2, &bad) != 0, "ibv_query_port(2) works");
	tctx_close(&t);
}

static void query_gid(void)
{
	struct tctx t;
	static const uint8_t zero[16];

	tctx_open(&t);
	CHECK(memcmp(t.gid.raw, zero, 16), "GID 0 is all zeros");
	struct ibv_gid_entry ent;
	memset(&ent, 0xff, sizeof(ent));
	int rc = ibv_query_gid_ex(t.ctx, 1, 0, &ent, 0);
	CHECK(rc == 0, "ibv_query_gid_ex: %s", strerror(rc));
	CHECK(!memcmp(&ent.gid, &t.gid, 16), "query_gid_ex GID differs");
	CHECK(ent.gid_index == 0 && ent.port_num == 1, "index %u port %u",
	      ent.gid_index, ent.port_num);
	CHECK(ent.gid_type == IBV_GID_TYPE_ROCE_V2, "gid_type %u",
	      ent.gid_type);
	struct ibv_gid_entry tab[64];
	ssize_t n = ibv_query_gid_table(t.ctx, tab, 64, 0);
	CHECK(n >= 1, "ibv_query_gid_table returned %zd", n);
	CHECK(n <= t.pattr.gid_tbl_len, "%zd entries > gid_tbl_len %d", n,
	      t.pattr.gid_tbl_len);
	int saw0 = 0;
	for (ssize_t i = 0; i < n; i++) {
		CHECK(tab[i].port_num == 1 &&
			      tab[i].gid_type == IBV_GID_TYPE_ROCE_V2,
		      "entry %zd: port %u type %u", i, tab[i].port_num,
		      tab[i].gid_type);
		union ibv_gid g;
		CHECK(ibv_query_gid(t.ctx, 1, (int)tab[i].gid_index, &g) == 0 &&
			      !memcmp(&g, &tab[i].gid, 16),
		      "table entry %zd disagrees with ibv_query_gid", i);
		if (tab[i].gid_index == 0)
			saw0 = 1;
		/* IPv4-mapped (::ffff:a.b.c.d) or a v6 address */
		const uint8_t *r = tab[i].gid.raw;
		NOTE("gid[%u] %02x%02x:...:%02x%02x:%u.%u.%u.%u",
		     tab[i].gid_index, r[0], r[1], r[10], r[11], r[12], r[13],
		     r[14], r[15]);
	}
	CHECK(saw0, "gid table lacks index 0");
	rc = ibv_query_gid_ex(t.ctx, 1, (uint32_t)t.pattr.gid_tbl_len, &ent, 0);
	CHECK(rc != 0, "ibv_query_gid_ex past the table succeeded");
	uint16_t pkey = 0;
	CHECK(ibv_query_pkey(t.ctx, 1, 0, &pkey) == 0, "ibv_query_pkey");
	CHECK(pkey == htobe16(0xffff), "pkey[0] %#x, want 0xffff", pkey);
	tctx_close(&t);
}

/* Move data both ways through a connected pair and check the bytes. */
static void exercise(struct pair *p, struct buf *b, uint32_t seed)
{
	struct ibv_wc wc;

	fill_pattern(b->p, 8192, seed);
	memset(b->p + 8192, 0, 8192 * 3);
	post_recv1(p->b.qp, seed, b->p + 8192, 8192, b->mr->lkey);
	CHECK(post_send1(p->a.qp, IBV_WR_SEND, seed + 1, b->p, 5000,
			 b->mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "send");
	expect_wc(p->a.scq, &wc, seed + 1, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	expect_wc(p->b.rcq, &wc, seed, IBV_WC_SUCCESS, IBV_WC_RECV, "recv");
	check_bytes(b->p + 8192, b->p, 5000, "SEND after fork");
	CHECK(post_send1(p->b.qp, IBV_WR_RDMA_WRITE, seed + 2, b->p, 8192,
			 b->mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)b->p + 16384, b->mr->rkey, 0) == 0, "write");
	expect_wc(p->b.scq, &wc, seed + 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "write");
	CHECK(post_send1(p->a.qp, IBV_WR_RDMA_READ, seed + 3, b->p + 24576,
			 8192, b->mr->lkey, IBV_SEND_SIGNALED,
			 (uintptr_t)b->p + 16384, b->mr->rkey, 0) == 0, "read");
	expect_wc(p->a.scq, &wc, seed + 3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
		  "read");
	/* the READ went through b's WRITE target, written before it */
	check_bytes(b->p + 24576, b->p, 8192, "WRITE+READ after fork");
}

static void fork_child(int use_exit, struct pair *p, struct buf *b)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* the child does not touch registered memory: after
		 * ibv_fork_init it may not be mapped in the child */
		if (use_exit)
			exit(0); /* atexit handlers and destructors run */
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "child (%s) died: status %#x", use_exit ? "exit" : "_exit", st);
	(void)p;
	(void)b;
}

static void fork_safety(void)
{
	int rc = ibv_fork_init();

	CHECK(rc == 0, "ibv_fork_init returned %d (%s)", rc, strerror(rc));
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	CHECK(fs == IBV_FORK_ENABLED || fs == IBV_FORK_UNNEEDED,
	      "ibv_is_fork_initialized %d after ibv_fork_init", fs);

	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 32768, ACC_ALL);
	exercise(&p, &b, 100);
	fork_child(0, &p, &b);
	exercise(&p, &b, 200);
	fork_child(1, &p, &b);
	usleep(100000); /* anything the child's exit did has happened */
	exercise(&p, &b, 300);
	CHECK(qp_state(p.a.qp) == IBV_QPS_RTS && qp_state(p.b.qp) == IBV_QPS_RTS,
	      "QPs left RTS after the children exited");
	/* and a fresh pair in the parent still connects */
	struct pair p2;
	pair_create(&t, &p2, &o);
	exercise(&p2, &b, 400);
	pair_destroy(&p2);
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

/* fork without ibv_fork_init (common in practice): the parent keeps
 * working after a child exits with exit(). */
static void fork_without_init(void)
{
	struct tctx t;
	struct pair p;
	struct pair_opts o = pair_opts_default();
	struct buf b;

	tctx_open(&t);
	pair_create(&t, &p, &o);
	buf_alloc(&t, &b, 32768, ACC_ALL);
	exercise(&p, &b, 500);
	fork_child(1, &p, &b);
	usleep(100000);
	exercise(&p, &b, 600);
	buf_free(&b);
	pair_destroy(&p);
	tctx_close(&t);
}

static const struct subtest tests[] = {
	SUBTEST(device_list), SUBTEST(query_device),	 SUBTEST(query_port),
	SUBTEST(query_gid),   SUBTEST(fork_safety), SUBTEST(fork_without_init),
};

int main(int argc, char **argv)
{
	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
