/* Shared helpers for the integration tests.
 *
 * Every test program is written only against <infiniband/verbs.h>. A program
 * is a list of subtests; run_subtests() runs each one in its own child process
 * with an alarm, so a crash or a hang in one subtest is reported by name and
 * the others still run. Inside a subtest, CHECK() fails the subtest (exit 1)
 * and SKIP() skips it (exit 77).
 *
 * Environment:
 *   INTEG_DEVICE   device name to open (default softrnic0)
 *   INTEG_NOFORK=1 run subtests in-process (stops at the first failure)
 *   argv[1..]      run only the subtests with these names
 */
#ifndef INTEG_COMMON_H
#define INTEG_COMMON_H

#include <infiniband/verbs.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define EXIT_SKIP 77

/* Default deadline for one expected completion or event. */
#define DEADLINE_MS 5000

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: (%s) ", __FILE__,       \
				__LINE__, #cond);                             \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			fflush(stderr);                                       \
			exit(1);                                              \
		}                                                             \
	} while (0)

#define SKIP(...)                                                             \
	do {                                                                  \
		fprintf(stderr, "SKIP %s:%d: ", __FILE__, __LINE__);          \
		fprintf(stderr, __VA_ARGS__);                                 \
		fputc('\n', stderr);                                          \
		fflush(stderr);                                               \
		exit(EXIT_SKIP);                                              \
	} while (0)

#define NOTE(...)                                                             \
	do {                                                                  \
		fprintf(stderr, "  note: ");                                  \
		fprintf(stderr, __VA_ARGS__);                                 \
		fputc('\n', stderr);                                          \
	} while (0)

/* Fail (CHECK) if this process closed a descriptor that was not open:
 * every test process's close() counts those (common.c). The runner calls
 * it after each subtest; two-process helpers in their second process. */
void close_audit(const char *who);

/* ---- subtest runner ---------------------------------------------------- */

struct subtest {
	const char *name;
	void (*fn)(void);
};
#define SUBTEST(f) { #f, f }

/* Returns the process exit status for main(): 0 all passed (or some
 * skipped), 1 any failure, 77 if every subtest skipped. */
int run_subtests(int argc, char **argv, const struct subtest *t, size_t n);

/* ---- device / context -------------------------------------------------- */

struct tctx {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid; /* port 1, index 0 */
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
};

const char *test_device_name(void);
void tctx_open(struct tctx *t);
void tctx_close(struct tctx *t);

/* ---- QP pairs ---------------------------------------------------------- */

struct pair_opts {
	uint32_t max_send_wr, max_recv_wr;
	uint32_t max_send_sge, max_recv_sge;
	uint32_t max_inline;
	int sq_sig_all;
	unsigned int access; /* qp_access_flags on both QPs */
	enum ibv_mtu mtu;
	int cqe;
	uint8_t rd_atomic; /* max_rd_atomic and max_dest_rd_atomic */
	uint32_t psn_a, psn_b; /* initial send PSN of each side */
	struct ibv_srq *srq_b; /* optional SRQ for side b */
	struct ibv_comp_channel *chan_b; /* optional channel for b's recv CQ */
	void *rcq_ctx_b; /* cq_context of b's recv CQ */
};

struct qp_end {
	struct ibv_qp *qp;
	struct ibv_cq *scq; /* send completions */
	struct ibv_cq *rcq; /* receive completions */
};

struct pair {
	struct tctx *t;
	struct qp_end a, b;
};

struct pair_opts pair_opts_default(void);

/* Create CQs and QPs for both ends and connect them RESET->INIT->RTR->RTS. */
void pair_create(struct tctx *t, struct pair *p, const struct pair_opts *o);
void pair_destroy(struct pair *p);

/* Individual transitions (CHECK on failure). */
void qp_to_init(struct ibv_qp *qp, unsigned int access);
void qp_to_rtr(struct tctx *t, struct ibv_qp *qp, uint32_t dest_qpn,
	       enum ibv_mtu mtu, uint32_t rq_psn, uint8_t rd_atomic);
void qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t rd_atomic);
/* Connect two existing RESET QPs (both on t's context) to each other. */
void connect_qps(struct tctx *t, struct ibv_qp *a, struct ibv_qp *b,
		 const struct pair_opts *o);

enum ibv_qp_state qp_state(struct ibv_qp *qp);
/* Wait until the QP reaches state; returns 1 if it did before ms. */
int wait_qp_state(struct ibv_qp *qp, enum ibv_qp_state st, int ms);

/* ---- memory ------------------------------------------------------------ */

struct buf {
	uint8_t *p;
	size_t len;
	struct ibv_mr *mr;
};

/* Page-aligned allocation, zero-filled, registered with access. */
void buf_alloc(struct tctx *t, struct buf *b, size_t len, unsigned int access);
void buf_free(struct buf *b);

#define ACC_ALL                                                               \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                   \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

void fill_pattern(void *p, size_t len, uint32_t seed);
/* Returns the index of the first mismatch, or (size_t)-1 if all match. */
size_t find_mismatch(const void *a, const void *b, size_t len);
/* CHECK that len bytes at got equal want, reporting the first difference. */
void check_bytes(const void *got, const void *want, size_t len,
		 const char *what);
/* CHECK that all len bytes at p equal v. */
void check_filled(const void *p, uint8_t v, size_t len, const char *what);

/* ---- posting ----------------------------------------------------------- */

/* One-SGE send WR (len 0 => num_sge 0). Returns ibv_post_send's result. */
int post_send1(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
	       void *addr, uint32_t len, uint32_t lkey, unsigned int flags,
	       uint64_t raddr, uint32_t rkey, uint32_t imm_or_inv);
int post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
		uint64_t *result, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		uint64_t compare_add, uint64_t swap);
/* One-SGE receive (len 0 => num_sge 0); CHECKs success. */
void post_recv1(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		uint32_t lkey);
int post_recv1_rc(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		  uint32_t lkey);

/* ---- completions ------------------------------------------------------- */

uint64_t now_ms(void);
/* Poll for one completion until ms elapse: 1 got one, 0 timed out. CHECKs
 * that ibv_poll_cq never returns a negative value. */
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms);
/* Wait for one completion and CHECK wr_id, status and (if opcode >= 0)
 * opcode; for error statuses only wr_id/status/qp_num are checked, as the
 * ibv_poll_cq man page says the rest are undefined. */
void expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t wr_id,
	       enum ibv_wc_status status, int opcode, const char *what);
/* CHECK that no completion arrives within ms. */
void expect_no_wc(struct ibv_cq *cq, int ms, const char *what);
/* Wait up to ms for an async event of type about obj (a QP, CQ or SRQ:
 * compared as the event's element pointer), acknowledging every event
 * taken: 1 if it came, 0 if not. */
int wait_async_event(struct ibv_context *ctx, const void *obj, enum ibv_event_type type, int ms);
/* Receive-side checks: status success, opcode, byte_len, qp_num; src_qp,
 * which the man page defines only for UD, must be 0 or the sender's QPN. */
void check_recv_wc(const struct ibv_wc *wc, int opcode, uint32_t byte_len,
		   struct ibv_qp *local, struct ibv_qp *remote,
		   const char *what);

const char *wc_opcode_str(int op);

#endif
