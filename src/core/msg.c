#include "core/msg.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *const sr_msg_op_name[SR_MSG_OP_MAX] = {
	[SR_MSG_WRITE] = "WRITE",
	[SR_MSG_READ_REQ] = "READ_REQ",
	[SR_MSG_READ_RESP] = "READ_RESP",
	[SR_MSG_SEND] = "SEND",
	[SR_MSG_TERMINATE] = "TERMINATE",
	[SR_MSG_ATOMIC_REQ] = "ATOMIC_REQ",
	[SR_MSG_ATOMIC_RESP] = "ATOMIC_RESP",
	[SR_MSG_ACK] = "ACK",
	[SR_MSG_IMM] = "IMM",
	[SR_MSG_RNR] = "RNR",
	[SR_MSG_XRC] = "XRC",
	[SR_MSG_ATOMIC_WRITE] = "ATOMIC_WRITE",
};

struct sr_msg *msg_alloc(uint32_t payload_len)
{
	struct sr_msg *m = malloc(sizeof(*m) + payload_len);

	if (!m)
		return NULL;
	memset(m, 0, sizeof(*m));
	sr_list_init(&m->link);
	m->len = payload_len;
	return m;
}

void msg_free(struct sr_msg *m)
{
	if (!m)
		return;
	free(m->rwqe);
	if (m->src) {
		for (int i = 0; i < m->src->n; i++)
			if (m->src->refs[i].users)
				atomic_fetch_sub((atomic_int *)m->src->refs[i].users, 1);
		free(m->src);
	}
	free(m);
}
