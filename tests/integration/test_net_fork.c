/* fork() in a process whose QP talks to another process over TCP: a child
 * that exits (with and without running atexit handlers) and a child that
 * closes every descriptor it inherited leave the parent's connection
 * working: the library never shuts down, unregisters or writes to the
 * parent's sockets from the child. */
#include "net_common.h"

#include <sys/wait.h>

enum { T_GO = 1, T_DONE = 100 };

static void roundtrip(struct net_end *n, int i)
{
	struct ibv_wc wc;

	fill_pattern(n->b.p, 4096, 50 + (uint32_t)i);
	CHECK(post_send1(n->qp, IBV_WR_RDMA_WRITE, 10 + (uint64_t)i, n->b.p, 4096, n->b.mr->lkey,
			 IBV_SEND_SIGNALED, n->peer.addr + 8192, n->peer.rkey, 0) == 0, "post");
	expect_wc(n->scq, &wc, 10 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE,
		  "WRITE after a fork");
}

static void fork_a(struct net_end *n)
{
	net_expect(n, T_GO, "B ready");
	roundtrip(n, 0);
	for (int kind = 0; kind < 3; kind++) {
		pid_t pid = fork();
		int st;

		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			/* the harness's own atexit handler would kill side B */
			net_child_pid = 0;
			if (kind == 0)
				_exit(0);
			if (kind == 2)
				for (int fd = 3; fd < 1024; fd++)
					close(fd);
			exit(0);	/* atexit handlers and destructors run */
		}
		CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "child %d", kind);
		roundtrip(n, 1 + kind);
	}
	net_put(n, T_DONE);
}

static void fork_b(struct net_end *n)
{
	net_put(n, T_GO);
	net_expect(n, T_DONE, "A done");
}

static void sub_fork(void)
{
	struct net_opts o = net_opts_default();

	o.buf_len = 64 * KIB;
	net_fork_run(&o, fork_a, fork_b);
}

int main(int argc, char **argv)
{
	struct subtest tests[] = { { "fork_children", sub_fork } };

	return run_subtests(argc, argv, tests, ARRAY_SIZE(tests));
}
