/* Unit tests for qp_transition_ok() (src/core/qp_state.c) against the IBTA
 * QP state transition table (IBTA Vol 1 §11.2.1, Table 91 "QP State
 * Transition Properties"; the kernel keeps the same table as
 * qp_state_table for ib_modify_qp_is_ok()).
 *
 * The expected table below is written out here on purpose, independently
 * of the one in qp_state.c, so that a typo in either shows up.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "core/qp.h"

#define S(x) IBV_QPS_##x
#define M(x) IBV_QP_##x

enum { RC, UC, UD, NTYPES };

static const enum ibv_qp_type qpt[NTYPES] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
static const char *const qpt_name[NTYPES] = { "RC", "UC", "UD" };
static const char *const st_name[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN" };

/* Every attribute bit a modify can carry (besides IBV_QP_STATE). */
static const int attr_bits[] = {
	M(CUR_STATE), M(EN_SQD_ASYNC_NOTIFY), M(ACCESS_FLAGS), M(PKEY_INDEX),
	M(PORT), M(QKEY), M(AV), M(PATH_MTU), M(TIMEOUT), M(RETRY_CNT),
	M(RNR_RETRY), M(RQ_PSN), M(MAX_QP_RD_ATOMIC), M(ALT_PATH),
	M(MIN_RNR_TIMER), M(SQ_PSN), M(MAX_DEST_RD_ATOMIC), M(PATH_MIG_STATE),
	M(CAP), M(DEST_QPN), M(RATE_LIMIT),
};

struct expect {
	enum ibv_qp_state cur, next;
	bool valid[NTYPES];
	int req[NTYPES];
	int opt[NTYPES];
};

#define ALL3 { true, true, true }
#define RTS_OPT_RC (M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) | M(PATH_MIG_STATE) | M(MIN_RNR_TIMER))
#define RTS_OPT_UC (M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) | M(PATH_MIG_STATE))
#define RTS_OPT_UD (M(CUR_STATE) | M(QKEY))

/* The transitions Table 91 lists besides any->RESET and any->ERR. */
static const struct expect table[] = {
	{ S(RESET), S(INIT), ALL3,
	  .req = { [RC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
		   [UC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
		   [UD] = M(PKEY_INDEX) | M(PORT) | M(QKEY) } },
	{ S(INIT), S(INIT), ALL3,
	  .opt = { [RC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
		   [UC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
		   [UD] = M(PKEY_INDEX) | M(PORT) | M(QKEY) } },
	{ S(INIT), S(RTR), ALL3,
	  .req = { [RC] = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
			  M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER),
		   [UC] = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN),
		   [UD] = 0 },
	  .opt = { [RC] = M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX),
		   [UC] = M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX),
		   [UD] = M(PKEY_INDEX) | M(QKEY) } },
	{ S(RTR), S(RTS), ALL3,
	  .req = { [RC] = M(SQ_PSN) | M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) |
			  M(MAX_QP_RD_ATOMIC),
		   [UC] = M(SQ_PSN),
		   [UD] = M(SQ_PSN) },
	  .opt = { [RC] = M(CUR_STATE) | M(ALT_PATH) | M(ACCESS_FLAGS) |
			  M(MIN_RNR_TIMER) | M(PATH_MIG_STATE),
		   [UC] = RTS_OPT_UC, [UD] = RTS_OPT_UD } },
	{ S(RTS), S(RTS), ALL3,
	  .opt = { [RC] = RTS_OPT_RC, [UC] = RTS_OPT_UC, [UD] = RTS_OPT_UD } },
	{ S(RTS), S(SQD), ALL3,
	  .opt = { [RC] = M(EN_SQD_ASYNC_NOTIFY), [UC] = M(EN_SQD_ASYNC_NOTIFY),
		   [UD] = M(EN_SQD_ASYNC_NOTIFY) } },
	{ S(SQD), S(RTS), ALL3,
	  .opt = { [RC] = RTS_OPT_RC, [UC] = RTS_OPT_UC, [UD] = RTS_OPT_UD } },
	{ S(SQD), S(SQD), ALL3,
	  .opt = { [RC] = M(PORT) | M(AV) | M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) |
			  M(MAX_QP_RD_ATOMIC) | M(MAX_DEST_RD_ATOMIC) | M(ALT_PATH) |
			  M(ACCESS_FLAGS) | M(PKEY_INDEX) | M(MIN_RNR_TIMER) |
			  M(PATH_MIG_STATE),
		   [UC] = M(AV) | M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX) |
			  M(PATH_MIG_STATE),
		   [UD] = M(PKEY_INDEX) | M(QKEY) } },
	/* SQE exists for UC and UD only: an RC send queue error takes the
	 * whole QP to ERR (IBTA Vol 1 §10.3.1, "Send Queue Error"). */
	{ S(SQE), S(RTS), { false, true, true },
	  .opt = { [UC] = M(CUR_STATE) | M(ACCESS_FLAGS),
		   [UD] = M(CUR_STATE) | M(QKEY) } },
};

static const struct expect *lookup(enum ibv_qp_state cur, enum ibv_qp_state next)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		if (table[i].cur == cur && table[i].next == next)
			return &table[i];
	return NULL;
}

static bool ok(int t, enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
	return qp_transition_ok(qpt[t], cur, next, mask);
}

/* Fail the test with the transition in the message (cmocka's own message
 * would only say "false"). */
#define expect_ok(t, cur, next, mask, want)                                   \
	do {                                                                  \
		bool got_ = ok(t, cur, next, mask);                           \
		if (got_ != (want))                                           \
			fail_msg("%s %s->%s mask %#x: got %s, want %s",       \
				 qpt_name[t], st_name[cur], st_name[next],    \
				 (unsigned int)(mask), got_ ? "ok" : "refused", \
				 (want) ? "ok" : "refused");                  \
	} while (0)

/* Each valid transition with exactly its required mask passes, with or
 * without IBV_QP_STATE (cur == next modifies often leave it out), and with
 * each optional bit and all of them together. */
static void test_valid_with_required_mask(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		const struct expect *e = &table[i];

		for (int t = 0; t < NTYPES; t++) {
			if (!e->valid[t])
				continue;
			expect_ok(t, e->cur, e->next, M(STATE) | e->req[t], true);
			expect_ok(t, e->cur, e->next, M(STATE) | e->req[t] | e->opt[t], true);
			if (e->cur == e->next)
				expect_ok(t, e->cur, e->next, e->req[t], true);
			for (size_t b = 0; b < ARRAY_SIZE(attr_bits); b++)
				if (e->opt[t] & attr_bits[b])
					expect_ok(t, e->cur, e->next,
						  M(STATE) | e->req[t] | attr_bits[b], true);
		}
	}
}

static void test_missing_required_bit_fails(void **state)
{
	int checked = 0;

	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		const struct expect *e = &table[i];

		for (int t = 0; t < NTYPES; t++) {
			if (!e->valid[t])
				continue;
			for (size_t b = 0; b < ARRAY_SIZE(attr_bits); b++) {
				int bit = attr_bits[b];

				if (!(e->req[t] & bit))
					continue;
				/* Even with every optional bit present. */
				expect_ok(t, e->cur, e->next,
					  (M(STATE) | e->req[t] | e->opt[t]) & ~bit, false);
				expect_ok(t, e->cur, e->next, (M(STATE) | e->req[t]) & ~bit, false);
				checked++;
			}
		}
	}
	/* RESET->INIT 3x3, INIT->RTR 6+4, RTR->RTS 5+1+1 */
	assert_int_equal(checked, 9 + 10 + 7);
}

static void test_unknown_optional_bit_fails(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		const struct expect *e = &table[i];

		for (int t = 0; t < NTYPES; t++) {
			if (!e->valid[t])
				continue;
			for (size_t b = 0; b < ARRAY_SIZE(attr_bits); b++) {
				int bit = attr_bits[b];

				if ((e->req[t] | e->opt[t]) & bit)
					continue;
				expect_ok(t, e->cur, e->next, M(STATE) | e->req[t] | bit, false);
			}
		}
	}
	/* A few named ones, for the reader. */
	expect_ok(RC, S(RESET), S(INIT), M(STATE) | M(PKEY_INDEX) | M(PORT) |
		  M(ACCESS_FLAGS) | M(QKEY), false);
	expect_ok(UD, S(RESET), S(INIT), M(STATE) | M(PKEY_INDEX) | M(PORT) |
		  M(QKEY) | M(ACCESS_FLAGS), false);
	expect_ok(UC, S(RTR), S(RTS), M(STATE) | M(SQ_PSN) | M(TIMEOUT), false);
	expect_ok(UD, S(INIT), S(RTR), M(STATE) | M(AV), false);
}

/* Transitions that are not in the table, with any plausible mask. */
static void test_invalid_transitions_fail(void **state)
{
	static const struct {
		int t;
		enum ibv_qp_state cur, next;
	} named[] = {
		{ RC, S(RESET), S(RTR) }, { RC, S(RESET), S(RTS) },
		{ RC, S(INIT), S(RTS) }, { RC, S(RTR), S(RTR) },
		{ RC, S(ERR), S(INIT) }, { UC, S(RESET), S(RTR) },
		{ UC, S(INIT), S(RTS) }, { UD, S(RESET), S(RTS) },
		{ UD, S(ERR), S(INIT) }, { UD, S(RTR), S(RTR) },
	};
	int masks[64], nmasks = 0, all = 0;

	for (size_t b = 0; b < ARRAY_SIZE(attr_bits); b++)
		all |= attr_bits[b];
	masks[nmasks++] = M(STATE);
	masks[nmasks++] = M(STATE) | all;
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		for (int t = 0; t < NTYPES; t++)
			if (nmasks < (int)ARRAY_SIZE(masks))
				masks[nmasks++] = M(STATE) | table[i].req[t];

	for (size_t i = 0; i < ARRAY_SIZE(named); i++)
		for (int m = 0; m < nmasks; m++)
			expect_ok(named[i].t, named[i].cur, named[i].next, masks[m], false);

	/* Exhaustively: every (cur, next) pair that is neither in the table
	 * nor ->RESET / ->ERR is refused for every type and mask. */
	for (int t = 0; t < NTYPES; t++)
		for (int cur = S(RESET); cur <= S(ERR); cur++)
			for (int next = S(RESET); next <= S(ERR); next++) {
				const struct expect *e = lookup(cur, next);

				if (next == S(RESET) || next == S(ERR) || (e && e->valid[t]))
					continue;
				if (e)	/* SQE->RTS for RC: its own test */
					continue;
				for (int m = 0; m < nmasks; m++)
					expect_ok(t, cur, next, masks[m], false);
			}

	/* Out-of-range states are refused, not indexed. */
	expect_ok(RC, S(UNKNOWN), S(RESET), M(STATE), false);
	expect_ok(RC, S(RTS), S(UNKNOWN), M(STATE), false);
}

/* RC has no SQE state, so SQE->RTS does not exist for RC. */
static void test_rc_sqe_to_rts_fails(void **state)
{
	expect_ok(RC, S(SQE), S(RTS), M(STATE), false);
	expect_ok(RC, S(SQE), S(RTS), M(STATE) | M(CUR_STATE), false);
	expect_ok(RC, S(SQE), S(RTS), M(STATE) | M(CUR_STATE) | M(ACCESS_FLAGS), false);
}

/* Any state -> RESET and any state -> ERR need nothing but the state, for
 * every type; any attribute on top is refused (Table 91 lists none). */
static void test_any_to_reset_and_err(void **state)
{
	for (int t = 0; t < NTYPES; t++)
		for (int cur = S(RESET); cur <= S(ERR); cur++) {
			expect_ok(t, cur, S(RESET), M(STATE), true);
			expect_ok(t, cur, S(ERR), M(STATE), true);
			expect_ok(t, cur, S(RESET), M(STATE) | M(ACCESS_FLAGS), false);
			expect_ok(t, cur, S(ERR), M(STATE) | M(QKEY), false);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_with_required_mask),
		cmocka_unit_test(test_missing_required_bit_fails),
		cmocka_unit_test(test_unknown_optional_bit_fails),
		cmocka_unit_test(test_invalid_transitions_fail),
		cmocka_unit_test(test_rc_sqe_to_rts_fails),
		cmocka_unit_test(test_any_to_reset_and_err),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
