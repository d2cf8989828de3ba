/* The same-host channel's small messages: see shm_small.h. */
#include "chan/shm_small.h"

#include <errno.h>
#include <string.h>

int shm_small_decode(const void *buf, size_t len, struct shm_small *h)
{
	const uint8_t send_only = SHM_SMALL_F_SE | SHM_SMALL_F_IMM | SHM_SMALL_F_INV;
	const uint8_t imm_inv = SHM_SMALL_F_IMM | SHM_SMALL_F_INV;

	if (len < sizeof(*h))
		return -EBADMSG;
	memcpy(h, buf, sizeof(*h));
	if (h->len != len - sizeof(*h) || h->len > SHM_SMALL_PAYLOAD ||
	    (h->flags & ~(SHM_SMALL_F_ACK | send_only)) || (h->flags & imm_inv) == imm_inv)
		return -EBADMSG;
	if (h->op == SHM_SMALL_SEND)
		return 0;
	if (h->op == SHM_SMALL_WRITE && !(h->flags & send_only))
		return 0;
	if (h->op == SHM_SMALL_ACK && h->flags == SHM_SMALL_F_ACK && !h->len && !h->msn &&
	    !h->word && !h->to)
		return 0;
	return -EBADMSG;
}
