/* libFuzzer target for the same-host channel's ring consumer and producer
 * (src/chan/shm_ring.c); tests/fuzz/run.sh builds and runs it.
 *
 * The input is what a hostile peer controls: the first 16 bytes are the
 * shared tail and head, the next two bytes the sizes of the reads, the
 * rest the ring's bytes. The consumer reads until it stops: every read
 * returns at most what was asked for, or -EPROTO/-EIO, and never
 * touches memory outside the ring and its own buffer (ASan); a remote
 * record's address is handed to the pull callback, which here refuses
 * it without looking, as process_vm_readv would for a bad address (the
 * record then reads as zeros, and its kind is overwritten: in the ring). The
 * producer then writes against the same hostile head.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/shm_ring.h"
#include "fuzz.h"

#define RING 1024

static int copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static ssize_t refuse(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	(void)arg;
	(void)dst;
	(void)n;
	(void)raddr;
	(void)len;
	errno = EFAULT;
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct shm_ring_io io = { copy, copy, refuse, NULL };
	struct shm_ring_ctl ctl;
	uint8_t *ring = calloc(1, RING), out[300];
	struct shm_ring r;
	uint64_t tail, head;
	size_t want;

	if (!ring || size < 18) {
		free(ring);
		return 0;
	}
	memcpy(&tail, data, 8);
	memcpy(&head, data + 8, 8);
	want = 1 + data[16];
	memcpy(ring, data + 18, size - 18 < RING ? size - 18 : RING);
	memset(&ctl, 0, sizeof(ctl));
	atomic_store(&ctl.tail, tail);
	atomic_store(&ctl.head, head);

	shm_ring_init(&r, &ctl, ring, RING);
	for (int i = 0; i < 64; i++) {
		struct iovec v = { out, want < sizeof(out) ? want : sizeof(out) };
		ssize_t k = shm_ring_read(&r, &v, 1, data[17] & 1, &io);

		CHECK(k == -EPROTO || (k >= 0 && (size_t)k <= v.iov_len));
		if (k <= 0)
			break;
	}
	/* the producer against the same head */
	shm_ring_init(&r, &ctl, ring, RING);
	r.pos = tail;
	{
		uint8_t kinds[2] = { SHM_OWN, SHM_PULL };
		struct iovec v[2] = { { out, sizeof(out) }, { out, 100 } };
		ssize_t k = shm_ring_write(&r, v, kinds, 2, &io, NULL, NULL);

		CHECK(k == -EPROTO || (k >= 0 && (size_t)k <= sizeof(out) + 100));
	}
	free(ring);
	return 0;
}
