/* The IBTA QP state machine: which transitions exist and which attributes
 * each must (req) and may (opt) carry, per transport (IBTA Vol 1 §11.2.1,
 * Table 91 "QP State Transition Properties"; the same table the kernel
 * keeps as qp_state_table for ib_modify_qp_is_ok()).
 */
#include "core/qp.h"

const char *const sr_qp_state_name[IBV_QPS_UNKNOWN + 1] = {
	[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
	[IBV_QPS_RTS] = "RTS", [IBV_QPS_SQD] = "SQD", [IBV_QPS_SQE] = "SQE",
	[IBV_QPS_ERR] = "ERR", [IBV_QPS_UNKNOWN] = "UNKNOWN",
};

/* T_RAW: IBV_QPT_RAW_PACKET, whose rows the kernel's qp_state_table
 * has too (RESET->INIT needs the port, nothing else carries anything). */
enum { T_RC, T_UC, T_UD, T_RAW, T_NTYPES };

struct trans {
	bool valid;
	int req[T_NTYPES];
	int opt[T_NTYPES];
};

#define S(x) IBV_QPS_##x
#define M(x) IBV_QP_##x

static const struct trans qp_table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
	[S(RESET)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(INIT)] = {
			.valid = true,
			.req = {
				[T_RC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
				[T_UC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
				[T_UD] = M(PKEY_INDEX) | M(PORT) | M(QKEY),
				[T_RAW] = M(PORT),
			},
		},
	},
	[S(INIT)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(INIT)] = {
			.valid = true,
			.opt = {
				[T_RC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
				[T_UC] = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS),
				[T_UD] = M(PKEY_INDEX) | M(PORT) | M(QKEY),
				[T_RAW] = M(PORT),
			},
		},
		[S(RTR)] = {
			.valid = true,
			.req = {
				[T_RC] = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
					 M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER),
				[T_UC] = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN),
			},
			.opt = {
				[T_RC] = M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX),
				[T_UC] = M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX),
				[T_UD] = M(PKEY_INDEX) | M(QKEY),
			},
		},
	},
	[S(RTR)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(RTS)] = {
			.valid = true,
			.req = {
				[T_RC] = M(SQ_PSN) | M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) |
					 M(MAX_QP_RD_ATOMIC),
				[T_UC] = M(SQ_PSN),
				[T_UD] = M(SQ_PSN),
			},
			.opt = {
				[T_RC] = M(CUR_STATE) | M(ALT_PATH) | M(ACCESS_FLAGS) |
					 M(MIN_RNR_TIMER) | M(PATH_MIG_STATE),
				[T_UC] = M(CUR_STATE) | M(ALT_PATH) | M(ACCESS_FLAGS) |
					 M(PATH_MIG_STATE),
				[T_UD] = M(CUR_STATE) | M(QKEY),
			},
		},
	},
	[S(RTS)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(RTS)] = {
			.valid = true,
			.opt = {
				[T_RC] = M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) |
					 M(PATH_MIG_STATE) | M(MIN_RNR_TIMER),
				[T_UC] = M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) |
					 M(PATH_MIG_STATE),
				[T_UD] = M(CUR_STATE) | M(QKEY),
			},
		},
		[S(SQD)] = {
			.valid = true,
			.opt = {
				[T_RC] = M(EN_SQD_ASYNC_NOTIFY),
				[T_UC] = M(EN_SQD_ASYNC_NOTIFY),
				[T_UD] = M(EN_SQD_ASYNC_NOTIFY),
			},
		},
	},
	[S(SQD)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(RTS)] = {
			.valid = true,
			.opt = {
				[T_RC] = M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) |
					 M(PATH_MIG_STATE) | M(MIN_RNR_TIMER),
				[T_UC] = M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) |
					 M(PATH_MIG_STATE),
				[T_UD] = M(CUR_STATE) | M(QKEY),
			},
		},
		[S(SQD)] = {
			.valid = true,
			.opt = {
				[T_RC] = M(PORT) | M(AV) | M(TIMEOUT) | M(RETRY_CNT) |
					 M(RNR_RETRY) | M(MAX_QP_RD_ATOMIC) |
					 M(MAX_DEST_RD_ATOMIC) | M(ALT_PATH) |
					 M(ACCESS_FLAGS) | M(PKEY_INDEX) | M(MIN_RNR_TIMER) |
					 M(PATH_MIG_STATE),
				[T_UC] = M(AV) | M(ALT_PATH) | M(ACCESS_FLAGS) |
					 M(PKEY_INDEX) | M(PATH_MIG_STATE),
				[T_UD] = M(PKEY_INDEX) | M(QKEY),
			},
		},
	},
	[S(SQE)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
		[S(RTS)] = {
			.valid = true,
			.opt = {
				[T_UC] = M(CUR_STATE) | M(ACCESS_FLAGS),
				[T_UD] = M(CUR_STATE) | M(QKEY),
			},
		},
	},
	[S(ERR)] = {
		[S(RESET)] = { .valid = true },
		[S(ERR)] = { .valid = true },
	},
};

static int type_index(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC: return T_RC;
	case IBV_QPT_UC: return T_UC;
	case IBV_QPT_UD: return T_UD;
	case IBV_QPT_RAW_PACKET: return T_RAW;
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV: return T_RC;	/* with the changes below */
	default: return -1;
	}
}

bool qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
		      enum ibv_qp_state next, int mask)
{
	const struct trans *t;
	int ti = type_index(type);
	int req, opt;

	if (ti < 0 || cur > IBV_QPS_ERR || next > IBV_QPS_ERR)
		return false;
	t = &qp_table[cur][next];
	if (!t->valid)
		return false;
	/* SQE exists for UC and UD only: an RC send error goes to ERR. */
	if (cur == IBV_QPS_SQE && ti == T_RC && next != IBV_QPS_RESET && next != IBV_QPS_ERR)
		return false;
	req = t->req[ti];
	opt = t->opt[ti];
	/* XRC follows RC, less what a half without a responder (XRC_SEND
	 * at RTR) or without a requester (XRC_RECV at RTS) has no use for:
	 * the kernel's table does not require those there. They stay
	 * allowed, as programs (pyverbs) pass RC's masks to both halves. */
	if (type == IBV_QPT_XRC_SEND && cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
		req &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
		opt |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (type == IBV_QPT_XRC_RECV && cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
		req &= ~(IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
		opt |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	mask &= ~IBV_QP_STATE;
	/* IBV_QP_RATE_LIMIT rides along with RTR->RTS and RTS->RTS in the
	 * kernel's table for raw/UD; not ours. */
	if ((mask & req) != req)
		return false;
	if (mask & ~(req | opt))
		return false;
	return true;
}
