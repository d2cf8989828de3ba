/* libFuzzer target for the same-host channel's ring consumer and producer
 * (src/chan/shm_ring.c); tests/fuzz/run.sh builds and runs it.
 *
 * The input is what a hostile peer controls: the first 16 bytes are the
 * shared tail (here: where the producer part starts) and head, the next
 * two bytes the sizes of the reads, the rest the ring's bytes, header
 * words included (the consumer goes by those). The consumer reads until it stops: every read
 * returns at most what was asked for, or -EPROTO/-EIO, and never
 * touches memory outside the ring and its own buffer (ASan); a remote
 * record's address is handed to the pull callback, which here refuses
 * it without looking, as process_vm_readv would for a bad address (the
 * record then reads as zeros, and its kind is overwritten: in the ring). A
 * mapped record's fd, inode and offset are handed to the map callback,
 * which, like the channel's, gives a pointer only for a known memfd (fd
 * 3, inode 7: a 4 KiB stand-in) and an offset and length inside it (ASan
 * checks that the copy stays there), else NULL (pulled: zeros). The
 * producer then writes against the same hostile head, a piece of the
 * stand-in going as mapped records, and a small record. A small record
 * (kind 4) stops the byte reader (-ENOMSG) and is taken with
 * shm_ring_read_small into a buffer as large as the channel's (24 +
 * SHM_SMALL_PAYLOAD bytes: a longer one is -EPROTO, ASan checks the copy
 * stays inside),
 * then decoded as the channel does (src/chan/shm_small.c): a message it
 * accepts says exactly how much payload follows its header (none for an
 * ACK alone). Or (a bit of the input) the channel's two steps: the
 * header with shm_ring_small_begin, decoded, then the body it names with
 * shm_ring_small_end into a buffer of exactly that size (ASan checks the
 * copy stays inside), or none for a header the decoder refuses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan/shm_ring.h"
#include "chan/shm_small.h"
#include "fuzz.h"

#define RING 1024
#define MEMFD 4096

static uint8_t memfd[MEMFD];

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

static bool locate(void *arg, const void *p, size_t len, struct shm_ring_loc *loc)
{
	const uint8_t *q = p;

	(void)arg;
	if (q < memfd || q + len > memfd + MEMFD)
		return false;
	*loc = (struct shm_ring_loc){ .fd = 3, .ino = 7, .off = (uint64_t)(q - memfd) };
	return true;
}

static const void *map(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len)
{
	(void)arg;
	if (fd != 3 || ino != 7 || off > MEMFD || len > MEMFD - off)
		return NULL;
	return memfd + off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct shm_ring_io io = {
		.put = copy, .get = copy, .pull = refuse, .locate = locate, .map = map,
	};
	struct shm_ring_ctl ctl;
	uint8_t *ring = calloc(1, RING), out[300];
	uint8_t small[sizeof(struct shm_small) + SHM_SMALL_PAYLOAD];
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
		/* (the poller's look: a byte, or -1; it never moves the reader) */
		int op = shm_ring_small_alone(&r);
		uint64_t pos = r.pos;
		ssize_t k;

		CHECK(op >= -1 && op <= 255 && r.pos == pos);
		k = shm_ring_read(&r, &v, 1, data[17] & 1, &io);
		if (k == -ENOMSG && (data[17] & 2)) {
			/* the channel's way: the header first, decoded, then
			 * the body it names straight into a buffer of its size */
			uint8_t hb[sizeof(struct shm_small)];
			struct shm_small h;
			uint8_t *body;

			k = shm_ring_small_begin(&r, hb, sizeof(hb));
			CHECK(k == -EPROTO || k > 0);
			if (k < 0)
				break;
			if (shm_small_decode(hb, (size_t)k, &h)) {
				shm_ring_small_end(&r, NULL, 0, 0);
				continue;
			}
			CHECK(sizeof(h) + h.len == (size_t)k && h.len <= SHM_SMALL_PAYLOAD);
			body = malloc(h.len ? h.len : 1);
			if (!body)
				break;
			shm_ring_small_end(&r, body, sizeof(h), h.len);
			free(body);
			CHECK(shm_ring_small_alone(&r) >= -1);
			continue;
		}
		if (k == -ENOMSG) {
			struct shm_small h;

			k = shm_ring_read_small(&r, small, sizeof(small));
			CHECK(k == -EPROTO || (k > 0 && (size_t)k <= sizeof(small)));
			if (k < 0)
				break;
			if (!shm_small_decode(small, (size_t)k, &h))
				CHECK(sizeof(h) + h.len == (size_t)k && h.len <= SHM_SMALL_PAYLOAD &&
				      (h.op == SHM_SMALL_SEND || h.op == SHM_SMALL_WRITE ||
				       (h.op == SHM_SMALL_ACK && !h.len &&
					h.flags == SHM_SMALL_F_ACK)));
			continue;
		}
		CHECK(k == -EPROTO || (k >= 0 && (size_t)k <= v.iov_len));
		if (k <= 0)
			break;
	}
	/* the producer against the same head */
	shm_ring_init(&r, &ctl, ring, RING);
	r.pos = tail;
	{
		uint8_t kinds[3] = { SHM_OWN, SHM_PULL, SHM_PULL };
		struct iovec v[3] = { { out, sizeof(out) }, { out, 100 }, { memfd + 8, 200 } };
		ssize_t k = shm_ring_write(&r, v, kinds, 3, &io, NULL, NULL);

		CHECK(k == -EPROTO || (k >= 0 && (size_t)k <= sizeof(out) + 300));
		if (k >= 0) {
			struct iovec sv = { out, 1 + (size_t)data[16] };

			k = shm_ring_write_small(&r, &sv, 1, sv.iov_len);
			CHECK(k == -EPROTO || k == 0 || k == (ssize_t)sv.iov_len);
		}
	}
	free(ring);
	return 0;
}
