/* Unit tests for the same-host channel's rings (src/chan/shm_ring.c):
 * a byte stream model (what goes in comes out, in order, across wraps,
 * inline, pulled and mapped), back-pressure, mapped records and their
 * fallback to pulls, and a consumer and producer that meet every
 * impossible value a corrupt or hostile peer can put in the shared
 * memory with -EPROTO, never a crash or a write out of bounds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chan/shm_ring.h"
#include "chan/shm_small.h"

#define RING	16384

struct fixture {
	struct shm_ring_ctl ctl;
	uint8_t data[RING];
	struct shm_ring tx, rx;
	int faults;			/* get/put calls to fail from now on */
};

static int plain_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static int failing_get(void *dst, const void *src, size_t n)
{
	(void)dst;
	(void)src;
	(void)n;
	return -EFAULT;
}

/* In one process, a remote address is just an address. */
static ssize_t local_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	const uint8_t *src = (const uint8_t *)(uintptr_t)raddr;
	size_t done = 0;

	(void)arg;
	for (int i = 0; i < n && done < len; i++) {
		size_t k = dst[i].iov_len < len - done ? dst[i].iov_len : len - done;

		memcpy(dst[i].iov_base, src + done, k);
		done += k;
	}
	return (ssize_t)done;
}

static ssize_t failing_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	(void)arg;
	(void)dst;
	(void)n;
	(void)raddr;
	(void)len;
	errno = EFAULT;
	return -1;
}

static ssize_t gone_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len)
{
	(void)arg;
	(void)dst;
	(void)n;
	(void)raddr;
	(void)len;
	errno = ESRCH;
	return -1;
}

static const struct shm_ring_io io = {
	.put = plain_copy, .get = plain_copy, .pull = local_pull,
};

/* A stand-in for a memfd of the producer's: [base, base + size), as fd
 * MF_FD with inode MF_INO. locate places pieces inside it there; map
 * hands out pointers into it, checking what the channel's shm_io_map checks
 * (the key, off + len within the size). */
#define MF_FD	7
#define MF_INO	4242
static struct {
	const uint8_t *base;
	uint64_t size;
	int located, maps, refused;	/* calls */
	bool refuse;			/* map says no (cannot map it) */
} mf;

static bool mf_locate(void *arg, const void *p, size_t len, struct shm_ring_loc *loc)
{
	const uint8_t *q = p;

	(void)arg;
	mf.located++;
	if (!mf.base || q < mf.base || q + len > mf.base + mf.size)
		return false;
	*loc = (struct shm_ring_loc){ .fd = MF_FD, .ino = MF_INO, .off = (uint64_t)(q - mf.base) };
	return true;
}

static const void *mf_map(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len)
{
	(void)arg;
	mf.maps++;
	if (mf.refuse || !mf.base || fd != MF_FD || ino != MF_INO || off > mf.size ||
	    len > mf.size - off) {
		mf.refused++;
		return NULL;
	}
	return mf.base + off;
}

static const struct shm_ring_io mio = {
	.put = plain_copy, .get = plain_copy, .pull = local_pull,
	.locate = mf_locate, .map = mf_map,
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	shm_ring_init(&f->tx, &f->ctl, f->data, RING);
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	memset(&mf, 0, sizeof(mf));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

static ssize_t put1(struct fixture *f, const void *p, size_t n, uint8_t kind)
{
	struct iovec v = { (void *)p, n };

	return shm_ring_write(&f->tx, &v, &kind, 1, &io, NULL, NULL);
}

static ssize_t get1(struct fixture *f, void *p, size_t n)
{
	struct iovec v = { p, n };

	return shm_ring_read(&f->rx, &v, 1, false, &io);
}

static void roundtrip_inline(void **state)
{
	struct fixture *f = *state;
	uint8_t out[100];

	assert_int_equal(get1(f, out, sizeof(out)), 0);		/* empty */
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	assert_int_equal(put1(f, "hello, ring", 11, SHM_OWN), 11);
	assert_int_equal(shm_ring_pending(&f->rx), 1);
	/* partial reads of one record */
	assert_int_equal(get1(f, out, 5), 5);
	assert_memory_equal(out, "hello", 5);
	assert_int_equal(get1(f, out, sizeof(out)), 6);
	assert_memory_equal(out, ", ring", 6);
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	/* released: the producer sees all the room again */
	assert_int_equal(atomic_load(&f->ctl.head), atomic_load(&f->ctl.tail));
}

/* A record is published by its header word, stored last; the word after
 * it, where the next record will start, is cleared first: stale bytes of
 * an earlier lap there are never taken for a record. */
static void header_publishes(void **state)
{
	struct fixture *f = *state;
	uint8_t out[64];
	uint32_t h[2];

	/* an earlier lap's bytes, which look like records everywhere */
	for (size_t i = 0; i < RING; i += 8) {
		h[0] = SHM_REC_INLINE;
		h[1] = 8;
		memcpy(f->data + i, h, sizeof(h));
	}
	memset(f->data, 0, 8);		/* (the first header: the ring is new) */
	assert_true(shm_ring_empty_at(&f->rx, 0));
	assert_int_equal(put1(f, "abcdefghij", 10, SHM_OWN), 10);
	/* 8 header + 16 padded body: the next header word is at 24 */
	assert_false(shm_ring_empty_at(&f->rx, 0));
	assert_true(shm_ring_empty_at(&f->rx, 24));
	assert_int_equal(get1(f, out, sizeof(out)), 10);
	assert_memory_equal(out, "abcdefghij", 10);
	assert_int_equal(get1(f, out, sizeof(out)), 0);		/* not a record */
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	/* the producer keeps room for that word: a full ring is one word
	 * short of RING */
	{
		static uint8_t big[RING];
		ssize_t k = put1(f, big, sizeof(big), SHM_OWN);

		assert_true(k > 0 && (size_t)k <= RING - 3 * SHM_REC_HDR);
		while ((k = put1(f, "x", 1, SHM_OWN)) > 0)
			;
		assert_int_equal(k, 0);
		assert_true(f->tx.pos - atomic_load(&f->ctl.head) <= RING - SHM_REC_HDR);
		assert_true(shm_ring_empty_at(&f->rx, f->tx.pos));
	}
}

/* A consumer that cannot pull (no_pull): a SHM_PULL piece in a memfd
 * still goes as mapped records, one elsewhere goes inline (read with
 * get: application memory), never as a remote record it could not read. */
static void no_pull_inline(void **state)
{
	struct fixture *f = *state;
	static uint8_t inmf[20000], outside[20000], back[20000];
	struct shm_ring_io np = mio;
	struct iovec v[2] = { { outside, sizeof(outside) }, { inmf, sizeof(inmf) } };
	uint8_t k[2] = { SHM_PULL, SHM_PULL };
	ssize_t w, got = 0;
	uint32_t h[2];

	np.no_pull = true;
	for (size_t i = 0; i < sizeof(inmf); i++) {
		inmf[i] = (uint8_t)(i * 7 + 3);
		outside[i] = (uint8_t)(i * 5 + 1);
	}
	mf.base = inmf;
	mf.size = sizeof(inmf);
	/* (a ring of 4 KiB: the first piece goes inline a record at a time) */
	while (got < (ssize_t)sizeof(outside)) {
		struct iovec o = { back + got, sizeof(back) - (size_t)got };
		ssize_t r;

		w = shm_ring_write(&f->tx, v, k, 1, &np, NULL, NULL);
		assert_true(w > 0);
		memcpy(h, f->data + (f->rx.pos & (RING - 1)), sizeof(h));
		assert_int_equal(h[0], SHM_REC_INLINE);
		v[0].iov_base = (uint8_t *)v[0].iov_base + w;
		v[0].iov_len -= (size_t)w;
		while ((r = shm_ring_read(&f->rx, &o, 1, false, &np)) > 0) {
			got += r;
			o.iov_base = back + got;
			o.iov_len = sizeof(back) - (size_t)got;
		}
		assert_int_equal(r, 0);
	}
	assert_memory_equal(back, outside, sizeof(outside));
	/* the piece in the memfd: a mapped record */
	w = shm_ring_write(&f->tx, &v[1], &k[1], 1, &np, NULL, NULL);
	assert_int_equal(w, sizeof(inmf));
	memcpy(h, f->data + (f->rx.pos & (RING - 1)), sizeof(h));
	assert_int_equal(h[0], SHM_REC_MAPPED);
	{
		struct iovec o = { back, sizeof(back) };

		assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &np), sizeof(inmf));
		assert_memory_equal(back, inmf, sizeof(inmf));
	}
	/* unreadable application memory: -EFAULT, as an SHM_APP piece */
	np.get = failing_get;
	v[0] = (struct iovec){ outside, 64 };
	assert_int_equal(shm_ring_write(&f->tx, v, k, 1, &np, NULL, NULL), -EFAULT);
}

/* A model: a long stream of random pieces (own, application, pulled or
 * mapped) written and read in random sizes through a small ring: the
 * bytes out are exactly the bytes in. */
static void model(struct fixture *f, const struct shm_ring_io *rio, bool in_memfd)
{
	enum { TOTAL = 1 << 20 };
	uint8_t *src = malloc(TOTAL), *dst = malloc(TOTAL);
	size_t in = 0, out = 0;
	unsigned int seed = 12345;

	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < TOTAL; i++)
		src[i] = (uint8_t)(i * 7 + (i >> 9));
	if (in_memfd) {
		/* all but the first 100 KiB (those pieces are pulled) */
		mf.base = src + 100 * 1024;
		mf.size = TOTAL - 100 * 1024;
	}
	while (out < TOTAL) {
		if (in < TOTAL && rand_r(&seed) % 2) {
			struct iovec v[4];
			uint8_t k[4];
			int n = 1 + rand_r(&seed) % 4;
			size_t at = in;
			ssize_t w;

			for (int i = 0; i < n; i++) {
				size_t len = 1 + (size_t)rand_r(&seed) % 1500;

				if (at + len > TOTAL)
					len = TOTAL - at;
				v[i] = (struct iovec){ src + at, len };
				k[i] = (uint8_t)(rand_r(&seed) % 3);
				at += len;
			}
			w = shm_ring_write(&f->tx, v, k, n, rio, NULL, NULL);
			assert_true(w >= 0);
			in += (size_t)w;
		} else {
			struct iovec v[2];
			size_t a = 1 + (size_t)rand_r(&seed) % 700, b = (size_t)rand_r(&seed) % 300;
			ssize_t r;

			if (out + a > TOTAL)
				a = TOTAL - out;
			if (out + a + b > TOTAL)
				b = TOTAL - out - a;
			v[0] = (struct iovec){ dst + out, a };
			v[1] = (struct iovec){ dst + out + a, b };
			r = shm_ring_read(&f->rx, v, 2, rand_r(&seed) % 2, rio);
			assert_true(r >= 0);
			assert_true(out + (size_t)r <= in);
			out += (size_t)r;
		}
	}
	assert_memory_equal(src, dst, TOTAL);
	assert_int_equal(f->rx.inlined + f->rx.pulled + f->rx.mapped, TOTAL);
	assert_true(f->rx.pulled > 0);
	if (in_memfd)
		assert_true(f->rx.mapped > f->rx.pulled);
	else
		assert_int_equal(f->rx.mapped, 0);
	assert_int_equal(f->rx.faults, 0);
	mf.base = NULL;
	free(src);
	free(dst);
}

static void model_stream(void **state)
{
	model(*state, &io, false);
}

/* The same with a memfd under most of the source: its pulled pieces go
 * as mapped records and are copied from the "mapping". */
static void model_stream_mapped(void **state)
{
	model(*state, &mio, true);
	assert_true(mf.maps > 0);
	assert_int_equal(mf.refused, 0);
}

static void full_ring(void **state)
{
	struct fixture *f = *state;
	static uint8_t big[3 * RING], out[3 * RING];
	size_t in = 0, got = 0;
	ssize_t w;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)i;
	w = put1(f, big, sizeof(big), SHM_OWN);
	assert_true(w > 0 && w <= RING - 8);
	in = (size_t)w;
	assert_int_equal(put1(f, big + in, 100, SHM_OWN), 0);	/* full */
	while (got < sizeof(big)) {
		ssize_t r = get1(f, out + got, sizeof(out) - got);

		assert_true(r >= 0);
		got += (size_t)r;
		if (in < sizeof(big)) {
			w = put1(f, big + in, sizeof(big) - in, SHM_OWN);
			assert_true(w >= 0);
			in += (size_t)w;
		}
	}
	assert_memory_equal(big, out, sizeof(big));
}

/* shm_ring_fits says whether pieces go whole as one inline record now
 * (the channel's small requests, tcp_send_small, rely on it): exactly at
 * the edge of the room, after the consumer released (a head the producer
 * must read again), and never for an impossible head. */
static void fits_whole(void **state)
{
	struct fixture *f = *state;
	static uint8_t buf[RING], out[RING];
	uint8_t k[3] = { SHM_OWN, SHM_OWN, SHM_OWN };
	struct iovec v[3] = { { "ab", 2 }, { buf, 90 }, { "cdefgh", 6 } };
	size_t n = 0;

	/* record header, padded body, the cleared word after it */
	assert_true(shm_ring_fits(&f->tx, RING - 16));
	assert_false(shm_ring_fits(&f->tx, RING - 15));
	assert_false(shm_ring_fits(&f->tx, SHM_REC_MAX + 1));
	memset(buf, 0x3c, sizeof(buf));
	assert_true(shm_ring_fits(&f->tx, 98));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, NULL, NULL), 98);
	assert_false(shm_ring_empty_at(&f->rx, 0));
	assert_true(shm_ring_empty_at(&f->rx, SHM_REC_HDR + 104));	/* one record */
	while (shm_ring_fits(&f->tx, 200)) {
		assert_int_equal(put1(f, buf, 200, SHM_OWN), 200);
		n++;
	}
	assert_true(n > 10);
	assert_true(put1(f, buf, 200, SHM_OWN) < 200);	/* would not have gone whole */
	while (get1(f, out, sizeof(out)) > 0)
		;
	/* released: fits reads the head again */
	assert_true(shm_ring_fits(&f->tx, RING - 16 - 256));
	/* more than half written since, and more asked than that leaves: the
	 * head is read, and is impossible */
	assert_int_equal(put1(f, buf, RING - 1024, SHM_OWN), RING - 1024);
	atomic_store(&f->ctl.head, f->tx.pos + 8);	/* ahead of the tail */
	assert_false(shm_ring_fits(&f->tx, 1200));
	assert_int_equal(put1(f, buf, 1200, SHM_OWN), -EPROTO);
}

/* A get that faults inside bad[], as a gather list's piece on a page the
 * application unmapped; it counts its calls. */
static int get_calls;
static uint8_t bad[200];
static int get_faults_in_bad(void *dst, const void *src, size_t n)
{
	get_calls++;
	if ((const uint8_t *)src >= bad && (const uint8_t *)src < bad + sizeof(bad))
		return -EFAULT;
	memcpy(dst, src, n);
	return 0;
}

/* shm_ring_write_small_app: the application's pieces go through get, ours
 * do not; a piece that faults publishes nothing (the reader finds the
 * ring empty, the tail has not moved), and the next record is whole,
 * also where a body wraps. */
static void small_app_fault(void **state)
{
	struct fixture *f = *state;
	uint8_t hdr[24], p1[100], in[SHM_SMALL_MAX];
	struct iovec v[3] = { { hdr, sizeof(hdr) }, { p1, sizeof(p1) }, { bad, sizeof(bad) } };
	uint64_t tail;

	memset(hdr, 1, sizeof(hdr));
	memset(p1, 2, sizeof(p1));
	for (int lap = 0; lap < 2; lap++) {
		get_calls = 0;
		tail = atomic_load(&f->ctl.tail);
		assert_int_equal(shm_ring_write_small_app(&f->tx, v, 3, 324, 1, get_faults_in_bad),
				 -EFAULT);
		assert_int_equal(atomic_load(&f->ctl.tail), tail);
		assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 0);
		get_calls = 0;
		assert_int_equal(shm_ring_write_small_app(&f->tx, v, 2, 124, 1, get_faults_in_bad),
				 124);
		assert_true(get_calls >= 1 && get_calls <= 2);	/* (not the header) */
		assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 124);
		assert_memory_equal(in, hdr, sizeof(hdr));
		assert_memory_equal(in + sizeof(hdr), p1, sizeof(p1));
		/* the second lap's records wrap at the ring's end */
		while (RING - (f->tx.pos % RING) > 64) {
			assert_int_equal(shm_ring_write_small(&f->tx, v, 1, sizeof(hdr)), sizeof(hdr));
			assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), sizeof(hdr));
		}
	}
}

/* Small records (kind 4) among stream bytes: the byte reader stops in
 * front of one (-ENOMSG when it has read nothing), shm_ring_read_small
 * takes it whole, in order, across the ring's end, and takes nothing
 * else. */
static void small_records(void **state)
{
	struct fixture *f = *state;
	uint8_t a[300], b[SHM_SMALL_MAX], out[1000], in[SHM_SMALL_MAX];
	struct iovec two[2] = { { b, 10 }, { b + 10, 90 } };
	uint64_t left;

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(0xff - i);
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 0);	/* empty */
	assert_int_equal(put1(f, a, 40, SHM_OWN), 40);
	assert_int_equal(shm_ring_write_small(&f->tx, two, 2, 100), 100);
	assert_int_equal(put1(f, a + 40, 60, SHM_OWN), 60);
	/* stream bytes first: the small reader takes none of them */
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 0);
	assert_int_equal(get1(f, out, sizeof(out)), 40);
	assert_memory_equal(out, a, 40);
	assert_int_equal(get1(f, out, sizeof(out)), -ENOMSG);
	assert_int_equal(get1(f, out, sizeof(out)), -ENOMSG);	/* (still there) */
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 100);
	assert_memory_equal(in, b, 100);
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 0);
	assert_int_equal(get1(f, out, sizeof(out)), 60);
	assert_memory_equal(out, a + 40, 60);
	assert_int_equal(atomic_load(&f->ctl.head), f->tx.pos);	/* all released */
	/* across the end of the ring: stream bytes up to 16 bytes before it,
	 * then a small record whose body wraps */
	left = RING - (f->tx.pos % RING);
	while (left > 300 + 16) {
		assert_int_equal(put1(f, a, 300 - 8, SHM_OWN), 300 - 8);
		assert_int_equal(get1(f, out, sizeof(out)), 300 - 8);
		left = RING - (f->tx.pos % RING);
	}
	assert_int_equal(put1(f, a, left - 16 - 8, SHM_OWN), (ssize_t)(left - 16 - 8));
	assert_int_equal(get1(f, out, sizeof(out)), (ssize_t)(left - 16 - 8));
	assert_int_equal(RING - (f->tx.pos % RING), 16);
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ b, SHM_SMALL_MAX }, 1,
					      SHM_SMALL_MAX), SHM_SMALL_MAX);
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), SHM_SMALL_MAX);
	assert_memory_equal(in, b, SHM_SMALL_MAX);
	/* what the producer refuses: no bytes, too many, a length that is not
	 * the pieces'; and a full ring takes nothing */
	assert_int_equal(shm_ring_write_small(&f->tx, two, 0, 0), -EINVAL);
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ b, SHM_SMALL_MAX }, 1,
					      SHM_SMALL_MAX + 1), -EINVAL);
	assert_int_equal(shm_ring_write_small(&f->tx, two, 2, 99), -EINVAL);
	while (shm_ring_write_small(&f->tx, two, 2, 100) == 100)
		;
	assert_int_equal(shm_ring_write_small(&f->tx, two, 2, 100), 0);
	/* (each takes two lines, 128 bytes, and the word after it free) */
	assert_true(f->tx.pos - atomic_load(&f->ctl.head) > RING - 128 - 8);
}

/* A small record ends its line: the next record starts a line, whose
 * first word the consumer zeroed as it read the last lap's record there,
 * so the producer does not write it as it publishes (put_hdr) and a
 * message moves as the lines it is in. Where that word is not zero (the
 * last lap had stream bytes there), the producer clears it first. */
static void small_lines(void **state)
{
	struct fixture *f = *state;
	uint8_t a[64], in[SHM_SMALL_MAX];
	uint64_t w = ~0ULL;

	memset(a, 0x5a, sizeof(a));
	assert_int_equal(put1(f, a, 40, SHM_OWN), 40);		/* 48 bytes */
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ a, 32 }, 1, 32), 32);
	assert_int_equal(f->tx.pos, 128);	/* 48 + 8 + 32 = 88, to the line's end */
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ a, 56 }, 1, 56), 56);
	assert_int_equal(f->tx.pos, 192);	/* exactly a line */
	/* a stale word where the next one goes: cleared before it is published */
	memcpy(f->data + 256, &w, sizeof(w));
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ a, 8 }, 1, 8), 8);
	assert_int_equal(f->tx.pos, 256);
	memcpy(&w, f->data + 256, sizeof(w));
	assert_int_equal(w, 0);
	assert_int_equal(get1(f, in, sizeof(in)), 40);
	/* read: each record's line-start words are zero, the rest left */
	memset(f->data + 320, 0x11, 8);
	for (int i = 0; i < 3; i++)
		assert_true(shm_ring_read_small(&f->rx, in, sizeof(in)) > 0);
	assert_int_equal(f->rx.pos, 256);
	for (int line = 1; line < 4; line++) {
		memcpy(&w, f->data + 64 * line, sizeof(w));
		assert_int_equal(w, 0);
	}
	assert_int_equal(f->data[64 + 8], 0x5a);		/* a body byte */
	memcpy(&w, f->data, sizeof(w));
	assert_int_not_equal(w, 0);			/* (the inline record's) */
	assert_int_equal(f->data[320], 0x11);		/* beyond what was read */
}

/* model_mixed's consumer side: what was written, in order. */
struct mixed {
	uint8_t *src, *dst;
	size_t in, out, ns, got;
	uint64_t at[4096];		/* stream offset where small k comes */
	uint16_t len[4096];
};

static void mixed_msg(uint8_t *msg, size_t k, size_t len)
{
	memset(msg, (int)(k & 0xff), len);
	memcpy(msg, &k, len < sizeof(k) ? len : sizeof(k));
}

/* One read of the consumer's (up to want stream bytes, or the small
 * record due now): false if nothing was there. */
static bool mixed_read(struct fixture *f, struct mixed *m, size_t want)
{
	uint8_t in[SHM_SMALL_MAX], msg[SHM_SMALL_MAX];
	size_t limit = m->got < m->ns ? m->at[m->got] : m->in;
	ssize_t r;

	if (m->got < m->ns && m->out == m->at[m->got]) {
		r = shm_ring_read_small(&f->rx, in, sizeof(in));
		if (r > 0) {
			assert_int_equal(r, m->len[m->got]);
			mixed_msg(msg, m->got, (size_t)r);
			assert_memory_equal(in, msg, (size_t)r);
			m->got++;
			return true;
		}
		assert_int_equal(r, 0);
	}
	r = get1(f, m->dst + m->out, want);
	if (r == -ENOMSG) {
		assert_true(m->got < m->ns && m->out == m->at[m->got]);
		return false;
	}
	assert_true(r >= 0);
	assert_true(m->out + (size_t)r <= limit);
	m->out += (size_t)r;
	return r > 0;
}

/* Stream bytes and small records mixed at random, across many laps, the
 * stream's bytes made of words that read as records' headers: every
 * byte and message comes out once, in order, and no stale word is taken
 * for a record (the words the producer and the consumer clear). The
 * consumer often empties the ring, so it polls where the producer will
 * write next, right after a small record too. */
static void model_mixed(void **state)
{
	struct fixture *f = *state;
	enum { TOTAL = 1 << 19, SMALLS = 4096 };
	struct mixed *m = calloc(1, sizeof(*m));
	uint8_t msg[SHM_SMALL_MAX];
	unsigned int seed = 777;
	uint32_t fake[2] = { SHM_REC_SMALL, 24 };

	assert_non_null(m);
	m->src = malloc(TOTAL);
	m->dst = malloc(TOTAL);
	assert_non_null(m->src);
	assert_non_null(m->dst);
	for (size_t i = 0; i + 8 <= TOTAL; i += 8) {
		fake[1] = 8 + (uint32_t)(i % 64);
		memcpy(m->src + i, fake, sizeof(fake));
	}
	while (m->in < TOTAL || m->ns < SMALLS || m->out < TOTAL || m->got < m->ns) {
		int op = rand_r(&seed) % 4;

		if (op == 0 && m->in < TOTAL) {
			/* (lengths that keep the stream words aligned in the
			 * ring, so that headers land on the fake words) */
			size_t len = 8 * (1 + (size_t)rand_r(&seed) % 40);
			struct iovec v;
			uint8_t k = SHM_OWN;
			ssize_t w;

			if (m->in + len > TOTAL)
				len = TOTAL - m->in;
			v = (struct iovec){ m->src + m->in, len };
			w = shm_ring_write(&f->tx, &v, &k, 1, &io, NULL, NULL);
			assert_true(w >= 0);
			m->in += (size_t)w;
		} else if (op == 1 && m->ns < SMALLS) {
			size_t len = 1 + (size_t)rand_r(&seed) %
					 (rand_r(&seed) % 4 ? 64 : SHM_SMALL_MAX);
			ssize_t w;

			mixed_msg(msg, m->ns, len);
			w = shm_ring_write_small(&f->tx, &(struct iovec){ msg, len }, 1, len);
			assert_true(w == 0 || w == (ssize_t)len);
			if (w) {
				assert_int_equal(f->tx.pos % 64, 0);
				m->at[m->ns] = m->in;
				m->len[m->ns++] = (uint16_t)len;
			}
		} else if (op == 2) {
			mixed_read(f, m, 1 + (size_t)rand_r(&seed) % 500);
		} else {
			while (mixed_read(f, m, TOTAL - m->out))
				;
		}
	}
	assert_int_equal(m->got, SMALLS);
	assert_memory_equal(m->src, m->dst, TOTAL);
	free(m->src);
	free(m->dst);
	free(m);
}

/* The poller's look (shm_ring_small_alone): the first body byte of the
 * next record only if it is small and nothing is published behind it;
 * a look never moves the reader. */
static void small_alone(void **state)
{
	struct fixture *f = *state;
	uint8_t a[64], in[SHM_SMALL_MAX];
	uint32_t hdr[2] = { SHM_REC_SMALL, SHM_SMALL_MAX + 1 };

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i + 7);
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);		/* empty */
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ a, 24 }, 1, 24), 24);
	assert_int_equal(shm_ring_small_alone(&f->rx), 7);
	assert_int_equal(shm_ring_small_alone(&f->rx), 7);		/* (a look) */
	assert_int_equal(shm_ring_write_small(&f->tx, &(struct iovec){ a + 1, 24 }, 1, 24), 24);
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);		/* one behind it */
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 24);
	assert_int_equal(shm_ring_small_alone(&f->rx), 8);
	assert_int_equal(put1(f, a, 40, SHM_OWN), 40);
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), 24);
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);		/* stream bytes */
	assert_int_equal(get1(f, in, sizeof(in)), 40);
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);
	/* a length no small record has: not one (the reader says why) */
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	memset(f->data, 0, 64);
	memcpy(f->data, hdr, sizeof(hdr));
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);
	hdr[1] = 0;
	memcpy(f->data, hdr, sizeof(hdr));
	assert_int_equal(shm_ring_small_alone(&f->rx), -1);
}

/* Impossible small records: -EPROTO from both readers, and from the small
 * reader one longer than the caller takes. */
static void corrupt_small(void **state)
{
	struct fixture *f = *state;
	uint8_t in[SHM_SMALL_MAX], out[64];
	uint32_t hdr[2] = { SHM_REC_SMALL, SHM_SMALL_MAX + 1 };

	memcpy(f->data, hdr, sizeof(hdr));
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), -EPROTO);
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
	hdr[1] = 0;
	memcpy(f->data, hdr, sizeof(hdr));
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	assert_int_equal(shm_ring_read_small(&f->rx, in, sizeof(in)), -EPROTO);
	hdr[1] = 100;
	memcpy(f->data, hdr, sizeof(hdr));
	shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	assert_int_equal(shm_ring_read_small(&f->rx, in, 99), -EPROTO);
	assert_int_equal(atomic_load(&f->ctl.head), 0);		/* nothing released */
}

/* The small message decoder takes what a softrnic peer writes and
 * nothing else. */
static void small_decode(void **state)
{
	uint8_t buf[sizeof(struct shm_small) + SHM_SMALL_PAYLOAD + 8] = { 0 };
	struct shm_small h, ok = { .op = SHM_SMALL_SEND, .len = 8,
				   .flags = SHM_SMALL_F_ACK | SHM_SMALL_F_SE | SHM_SMALL_F_IMM };
	struct {
		uint8_t op, flags;
		uint16_t len;
		size_t total;
	} bad[] = {
		{ SHM_SMALL_SEND, 0, 8, sizeof(h) + 7 },		/* length */
		{ SHM_SMALL_SEND, 0, 8, sizeof(h) + 9 },
		{ SHM_SMALL_SEND, 0, 0, sizeof(h) - 1 },		/* no header */
		{ SHM_SMALL_SEND, 0, SHM_SMALL_PAYLOAD + 1, sizeof(h) + SHM_SMALL_PAYLOAD + 1 },
		{ SHM_SMALL_SEND, 0x10, 8, sizeof(h) + 8 },		/* unknown flag */
		{ SHM_SMALL_SEND, SHM_SMALL_F_IMM | SHM_SMALL_F_INV, 8, sizeof(h) + 8 },
		{ SHM_SMALL_WRITE, SHM_SMALL_F_SE, 8, sizeof(h) + 8 },	/* SEND's flags */
		{ SHM_SMALL_WRITE, SHM_SMALL_F_INV, 8, sizeof(h) + 8 },
		{ 0, 0, 8, sizeof(h) + 8 },				/* op */
		{ 4, 0, 8, sizeof(h) + 8 },
		{ SHM_SMALL_ACK, 0, 0, sizeof(h) },			/* ACK: no F_ACK */
		{ SHM_SMALL_ACK, SHM_SMALL_F_ACK, 8, sizeof(h) + 8 },	/* a payload */
		{ SHM_SMALL_ACK, SHM_SMALL_F_ACK | SHM_SMALL_F_SE, 0, sizeof(h) },
	};

	(void)state;
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h) + 8, &h), 0);
	assert_int_equal(h.op, SHM_SMALL_SEND);
	assert_int_equal(h.len, 8);
	ok = (struct shm_small){ .op = SHM_SMALL_WRITE, .flags = SHM_SMALL_F_ACK,
				 .len = SHM_SMALL_PAYLOAD, .word = 0x1234, .to = 99 };
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h) + SHM_SMALL_PAYLOAD, &h), 0);
	assert_int_equal(h.to, 99);
	ok.len = 0;
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h), &h), 0);	/* a 0-byte WRITE */
	/* an ACK alone: F_ACK and its MSN, every other field 0 */
	ok = (struct shm_small){ .op = SHM_SMALL_ACK, .flags = SHM_SMALL_F_ACK, .ack_msn = 77 };
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h), &h), 0);
	assert_int_equal(h.ack_msn, 77);
	ok.msn = 1;
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h), &h), -EBADMSG);
	ok.msn = 0;
	ok.word = 1;
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h), &h), -EBADMSG);
	ok.word = 0;
	ok.to = 1;
	memcpy(buf, &ok, sizeof(ok));
	assert_int_equal(shm_small_decode(buf, sizeof(h), &h), -EBADMSG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct shm_small b = { .op = bad[i].op, .flags = bad[i].flags, .len = bad[i].len };

		memcpy(buf, &b, sizeof(b));
		assert_int_equal(shm_small_decode(buf, bad[i].total, &h), -EBADMSG);
	}
}

/* A reader stops in front of a remote record once it has bytes, so the
 * channel can place the payload after a header directly. */
static void stops_before_remote(void **state)
{
	struct fixture *f = *state;
	uint8_t payload[3000], out[4000];
	struct iovec v[3] = { { "HDR", 3 }, { payload, sizeof(payload) }, { "TR", 2 } };
	uint8_t k[3] = { SHM_OWN, SHM_PULL, SHM_OWN };

	memset(payload, 0x5a, sizeof(payload));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, NULL, NULL), 3005);
	assert_int_equal(get1(f, out, sizeof(out)), 3);
	assert_memory_equal(out, "HDR", 3);
	/* ... and reads on into inline bytes after it */
	assert_int_equal(get1(f, out, sizeof(out)), 3002);
	assert_memory_equal(out, payload, 3000);
	assert_memory_equal(out + 3000, "TR", 2);
	assert_int_equal(f->rx.pulled, 3000);
}

static void app_fault(void **state)
{
	struct fixture *f = *state;
	struct shm_ring_io bad = io;
	struct iovec v[2] = { { "ab", 2 }, { "cd", 2 } };
	uint8_t k[2] = { SHM_APP, SHM_APP };
	uint8_t out[8];

	bad.get = failing_get;
	/* the first piece unreadable: nothing written */
	assert_int_equal(shm_ring_write(&f->tx, v, k, 2, &bad, NULL, NULL), -EFAULT);
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	/* own bytes first: they go, the fault waits for the next call */
	k[0] = SHM_OWN;
	assert_int_equal(shm_ring_write(&f->tx, v, k, 2, &bad, NULL, NULL), 2);
	assert_int_equal(get1(f, out, sizeof(out)), 2);
}

/* A remote record whose memory the producer no longer has reads as
 * zeros, and the producer learns which one; a producer that is gone
 * (ESRCH) ends the stream. */
static void pull_fault(void **state)
{
	struct fixture *f = *state;
	struct shm_ring_io bad = io;
	uint8_t src[5000], out[6000];
	struct iovec v[3] = { { "H", 1 }, { src, sizeof(src) }, { src, 100 } };
	uint8_t k[3] = { SHM_OWN, SHM_PULL, SHM_PULL };
	struct shm_rec_note notes[4];
	int nn = 4;
	struct iovec o = { out, sizeof(out) };

	memset(src, 0x77, sizeof(src));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, notes, &nn), 5101);
	assert_int_equal(nn, 2);
	assert_int_equal(notes[0].piece, 1);
	assert_int_equal(notes[1].piece, 2);
	assert_int_equal(get1(f, out, 1), 1);
	bad.pull = failing_pull;
	memset(out, 0x55, sizeof(out));
	/* (the reader stops in front of the second remote record) */
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), 5000);
	for (size_t i = 0; i < 5000; i++)
		assert_int_equal(out[i], 0);
	assert_int_equal(f->rx.faults, 1);
	/* released: the producer sees the mark on the first, not yet on
	 * the second */
	assert_true(shm_ring_released(&f->tx) > notes[0].pos);
	assert_true(shm_ring_faulted(&f->tx, notes[0].pos));
	bad.pull = gone_pull;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), -EIO);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &io), 100);
	assert_memory_equal(out, src, 100);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
}

/* The producer takes its remote records back (its QP flushed their
 * WQEs): one not read yet fails (-EIO), and so does one whose pull the
 * revoke lands in the middle of; what was read before is unchanged. */
static struct shm_ring *revoke_in_pull;

static ssize_t revoking_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr,
			     size_t len)
{
	ssize_t got = local_pull(arg, dst, n, raddr, len);

	shm_ring_revoke(revoke_in_pull);
	return got;
}

static void revoked(void **state)
{
	struct fixture *f = *state;
	struct shm_ring_io mid = io;
	uint8_t src[5000], out[6000];
	struct iovec v[3] = { { src, sizeof(src) }, { "T", 1 }, { src, 200 } };
	uint8_t k[3] = { SHM_PULL, SHM_OWN, SHM_PULL };

	memset(src, 0x31, sizeof(src));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, NULL, NULL), 5201);
	/* revoked while the first is pulled: its bytes do not count */
	revoke_in_pull = &f->tx;
	mid.pull = revoking_pull;
	struct iovec o = { out, sizeof(out) };

	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &mid), -EIO);
	assert_int_equal(f->rx.pulled, 0);
	/* and for good: the plain pull fails too */
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &io), -EIO);
}

/* ... and one read before the revoke is delivered as it was read; inline
 * bytes still go. */
static void revoked_after(void **state)
{
	struct fixture *f = *state;
	uint8_t src[5000], out[6000];
	struct iovec v[3] = { { src, sizeof(src) }, { "T", 1 }, { src, 200 } };
	uint8_t k[3] = { SHM_PULL, SHM_OWN, SHM_PULL };

	memset(src, 0x32, sizeof(src));
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &io, NULL, NULL), 5201);
	assert_int_equal(get1(f, out, 5000), 5000);
	assert_memory_equal(out, src, 5000);
	shm_ring_revoke(&f->tx);
	assert_int_equal(get1(f, out, sizeof(out)), 1);
	assert_int_equal(out[0], 'T');
	assert_int_equal(get1(f, out, sizeof(out)), -EIO);
}

/* A pulled piece in a memfd goes as mapped records (40 bytes: kind 3,
 * len, address, fd, pad, inode, offset), read from the mapping; the
 * reader stops in front of one as in front of a remote record. */
static void mapped_record(void **state)
{
	struct fixture *f = *state;
	static uint8_t memfd[2 * SHM_REC_MAX + 4096];
	uint8_t *payload = memfd + 1000, out[4096];
	size_t plen = SHM_REC_MAX + 3000;
	static uint8_t big[SHM_REC_MAX + 3000];
	struct iovec v[3] = { { "HDR", 3 }, { payload, plen }, { "TR", 2 } };
	uint8_t k[3] = { SHM_OWN, SHM_PULL, SHM_OWN };
	struct shm_rec_note notes[4];
	int nn = 4;
	uint32_t h[2];
	uint64_t body[4];
	size_t got = 0;

	for (size_t i = 0; i < sizeof(memfd); i++)
		memfd[i] = (uint8_t)(i * 13 + 1);
	mf.base = memfd;
	mf.size = sizeof(memfd);
	assert_int_equal(shm_ring_write(&f->tx, v, k, 3, &mio, notes, &nn), (ssize_t)plen + 5);
	assert_int_equal(mf.located, 1);		/* once per piece */
	assert_int_equal(nn, 2);			/* two records: 64 KiB + the rest */
	assert_int_equal(notes[0].piece, 1);
	assert_int_equal(notes[1].piece, 1);
	assert_int_equal(notes[0].pos, 16);		/* after "HDR" inline */
	assert_int_equal(notes[1].pos, 16 + 40);
	/* the records, as the layout says */
	memcpy(h, f->data + 16, 8);
	memcpy(body, f->data + 24, 32);
	assert_int_equal(h[0], SHM_REC_MAPPED);
	assert_int_equal(h[1], SHM_REC_MAX);
	assert_int_equal(body[0], (uint64_t)(uintptr_t)payload);
	assert_int_equal((uint32_t)body[1], MF_FD);
	assert_int_equal(body[1] >> 32, 0);		/* pad */
	assert_int_equal(body[2], MF_INO);
	assert_int_equal(body[3], 1000);
	memcpy(h, f->data + 56, 8);
	memcpy(body, f->data + 64, 32);
	assert_int_equal(h[0], SHM_REC_MAPPED);
	assert_int_equal(h[1], 3000);
	assert_int_equal(body[0], (uint64_t)(uintptr_t)(payload + SHM_REC_MAX));
	assert_int_equal(body[3], 1000 + SHM_REC_MAX);

	assert_int_equal(get1(f, out, sizeof(out)), 3);
	assert_memory_equal(out, "HDR", 3);
	/* copied from the mapping (the counters say so), into application
	 * memory (put) */
	while (got < plen) {
		struct iovec o = { big + got, plen - got };
		ssize_t r = shm_ring_read(&f->rx, &o, 1, true, &mio);

		assert_true(r > 0);
		got += (size_t)r;
	}
	assert_memory_equal(big, payload, plen);
	assert_int_equal(get1(f, out, sizeof(out)), 2);
	assert_memory_equal(out, "TR", 2);
	assert_int_equal(f->rx.mapped, plen);
	assert_int_equal(f->rx.pulled, 0);
	assert_false(shm_ring_faulted(&f->tx, notes[0].pos));
	/* a piece outside the memfd: remote records, as before */
	mf.located = 0;
	v[1] = (struct iovec){ big, 100 };
	k[0] = k[2] = SHM_OWN;
	assert_int_equal(shm_ring_write(&f->tx, &v[1], &k[1], 1, &mio, NULL, NULL), 100);
	memcpy(h, f->data + (f->rx.pos & (RING - 1)), 8);
	assert_int_equal(h[0], SHM_REC_REMOTE);
	assert_int_equal(get1(f, out, sizeof(out)), 100);
	assert_int_equal(f->rx.pulled, 100);
}

/* A mapping that cannot be had (io->map NULL, or it says no): the
 * record's address is pulled instead, byte for byte. */
static void mapped_fallback(void **state)
{
	struct fixture *f = *state;
	static uint8_t memfd[8192];
	uint8_t out[8192];
	struct iovec v = { memfd + 8, 5000 };
	uint8_t k = SHM_PULL;
	struct shm_ring_io nomap = mio;
	struct iovec o = { out, sizeof(out) };

	for (size_t i = 0; i < sizeof(memfd); i++)
		memfd[i] = (uint8_t)(i ^ 0x3c);
	mf.base = memfd;
	mf.size = sizeof(memfd);
	assert_int_equal(shm_ring_write(&f->tx, &v, &k, 1, &mio, NULL, NULL), 5000);
	mf.refuse = true;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &mio), 5000);
	assert_memory_equal(out, memfd + 8, 5000);
	assert_int_equal(mf.refused, 1);
	assert_int_equal(f->rx.pulled, 5000);
	assert_int_equal(f->rx.mapped, 0);
	/* no map callback at all */
	mf.refuse = false;
	nomap.map = NULL;
	assert_int_equal(shm_ring_write(&f->tx, &v, &k, 1, &mio, NULL, NULL), 5000);
	memset(out, 0, sizeof(out));
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, true, &nomap), 5000);
	assert_memory_equal(out, memfd + 8, 5000);
	assert_int_equal(f->rx.pulled, 10000);
	/* a record whose offset goes past the memfd's end (a lying
	 * producer): the mapping side says no, the address is pulled */
	assert_int_equal(shm_ring_write(&f->tx, &v, &k, 1, &mio, NULL, NULL), 5000);
	{
		uint64_t off = sizeof(memfd) - 100;

		memcpy(f->data + ((f->rx.pos + 32) & (RING - 1)), &off, 8);
	}
	mf.refused = 0;
	memset(out, 0, sizeof(out));
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &mio), 5000);
	assert_int_equal(mf.refused, 1);
	assert_memory_equal(out, memfd + 8, 5000);
	assert_int_equal(f->rx.mapped, 0);
	/* a producer without locate: remote records */
	nomap = mio;
	nomap.locate = NULL;
	assert_int_equal(shm_ring_write(&f->tx, &v, &k, 1, &nomap, NULL, NULL), 5000);
	{
		uint32_t h[2];

		memcpy(h, f->data + (f->rx.pos & (RING - 1)), 8);
		assert_int_equal(h[0], SHM_REC_REMOTE);
	}
}

/* A mapped record that cannot be mapped nor pulled reads as zeros and
 * is marked for the producer (kind 2), as a remote record is; a producer
 * that is gone ends the stream. */
static void mapped_fault(void **state)
{
	struct fixture *f = *state;
	static uint8_t memfd[8192];
	uint8_t out[8192];
	struct iovec v[2] = { { memfd, 3000 }, { memfd + 4000, 200 } };
	uint8_t k[2] = { SHM_PULL, SHM_PULL };
	struct shm_rec_note notes[4];
	int nn = 4;
	struct shm_ring_io bad = mio;
	struct iovec o = { out, sizeof(out) };

	memset(memfd, 0x66, sizeof(memfd));
	mf.base = memfd;
	mf.size = sizeof(memfd);
	assert_int_equal(shm_ring_write(&f->tx, v, k, 2, &mio, notes, &nn), 3200);
	assert_int_equal(nn, 2);
	mf.refuse = true;
	bad.pull = failing_pull;
	memset(out, 0x55, sizeof(out));
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), 3000);
	for (size_t i = 0; i < 3000; i++)
		assert_int_equal(out[i], 0);
	assert_int_equal(f->rx.faults, 1);
	assert_int_equal(f->rx.mapped, 0);
	assert_true(shm_ring_released(&f->tx) > notes[0].pos);
	assert_true(shm_ring_faulted(&f->tx, notes[0].pos));
	bad.pull = gone_pull;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), -EIO);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
	/* mapped again: read from the mapping, not marked */
	mf.refuse = false;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &bad), 200);
	assert_memory_equal(out, memfd + 4000, 200);
	assert_int_equal(f->rx.mapped, 200);
	assert_false(shm_ring_faulted(&f->tx, notes[1].pos));
}

static int failing_put(void *dst, const void *src, size_t n)
{
	(void)dst;
	(void)src;
	(void)n;
	return -EFAULT;
}

/* Our target faults while copying from the mapping: -EFAULT, nothing
 * consumed (the caller fails what it placed), as for inline bytes; if
 * the mapping itself faults (it should not), the pull decides. */
static void mapped_put_fault(void **state)
{
	struct fixture *f = *state;
	static uint8_t memfd[4096];
	uint8_t out[4096];
	struct iovec v = { memfd, 2000 };
	uint8_t k = SHM_PULL;
	struct shm_ring_io bad = mio;
	struct iovec o = { out, sizeof(out) };

	memset(memfd, 0x42, sizeof(memfd));
	mf.base = memfd;
	mf.size = sizeof(memfd);
	assert_int_equal(shm_ring_write(&f->tx, &v, &k, 1, &mio, NULL, NULL), 2000);
	bad.put = failing_put;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, true, &bad), -EFAULT);
	assert_int_equal(shm_ring_pending(&f->rx), 1);
	assert_int_equal(f->rx.faults, 0);
	/* the source's probe faults too: pulled (which here writes with
	 * memcpy, the test's stand-in for process_vm_readv) */
	bad.get = failing_get;
	assert_int_equal(shm_ring_read(&f->rx, &o, 1, true, &bad), 2000);
	assert_memory_equal(out, memfd, 2000);
	assert_int_equal(f->rx.pulled, 2000);
	assert_int_equal(f->rx.mapped, 0);
}

/* Impossible mapped records: -EPROTO. */
static void corrupt_mapped(void **state)
{
	struct fixture *f = *state;
	uint8_t out[64];
	struct iovec o = { out, sizeof(out) };
	struct {
		uint32_t kind, len;
		uint64_t addr;
		uint32_t fd, pad;
		uint64_t ino, off;
	} bad[] = {
		{ SHM_REC_MAPPED, 0, 0, MF_FD, 0, MF_INO, 0 },		/* no bytes */
		{ SHM_REC_MAPPED, SHM_REC_MAX + 1, 0, MF_FD, 0, MF_INO, 0 },
		{ SHM_REC_MAPPED, 16, 0, MF_FD, 1, MF_INO, 0 },		/* pad */
		{ SHM_REC_MAPPED, 16, 0, MF_FD, 0, MF_INO, UINT64_MAX - 8 },	/* wraps */
		{ 5, 16, 0, MF_FD, 0, MF_INO, 0 },			/* no kind 5 */
		{ SHM_REC_FAULTED, 16, 0, MF_FD, 0, MF_INO, 0 },
	};

	mf.base = out;
	mf.size = sizeof(out);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		shm_ring_init(&f->rx, &f->ctl, f->data, RING);
		memcpy(f->data, &bad[i], 40);
		assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &mio), -EPROTO);
	}
	assert_int_equal(mf.maps, 0);
	/* the largest offset that does not wrap is the mapping's business:
	 * refused there, then pulled (from address 0: nothing, zeros) */
	{
		struct shm_ring_io safe = mio;

		safe.pull = failing_pull;
		shm_ring_init(&f->rx, &f->ctl, f->data, RING);
		bad[0].len = 16;
		bad[0].off = UINT64_MAX - 16;
		memcpy(f->data, &bad[0], 40);
		memset(out, 1, sizeof(out));
		assert_int_equal(shm_ring_read(&f->rx, &o, 1, false, &safe), 16);
		assert_int_equal(mf.refused, 1);
		assert_int_equal(out[0], 0);
		assert_int_equal(f->rx.faults, 1);
	}
}

/* Every impossible value in shared memory is -EPROTO. */
static void corrupt_indices(void **state)
{
	struct fixture *f = *state;
	uint8_t out[64];
	uint32_t h[2];

	/* The tail is not what the consumer goes by (the header word is):
	 * one past anything the ring can hold, or behind, changes nothing. */
	atomic_store(&f->ctl.tail, RING + 8);
	assert_int_equal(get1(f, out, sizeof(out)), 0);
	assert_int_equal(shm_ring_pending(&f->rx), 0);
	atomic_store(&f->ctl.tail, (uint64_t)-8);
	assert_int_equal(get1(f, out, sizeof(out)), 0);
	/* unknown kinds, a kind the consumer never reads (FAULTED), zero
	 * and huge lengths (an all-zero header is no record yet) */
	uint32_t bad[][2] = { { 7, 8 }, { 0, SHM_REC_MAX + 1 }, { 1, 0 }, { 3, 0 },
			      { SHM_REC_FAULTED, 8 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		shm_ring_init(&f->rx, &f->ctl, f->data, RING);
		memcpy(h, bad[i], sizeof(h));
		memcpy(f->data, h, sizeof(h));
		assert_int_equal(get1(f, out, sizeof(out)), -EPROTO);
		assert_true(shm_ring_pending(&f->rx) != 0);
	}
	/* the producer: a head the consumer cannot have written, found
	 * when the producer next reads it (it needs room: less than half
	 * the ring is free by what it saw) */
	static uint8_t big[RING / 2];
	atomic_store(&f->ctl.tail, 0);
	atomic_store(&f->ctl.head, 0);
	shm_ring_init(&f->tx, &f->ctl, f->data, RING);
	assert_int_equal(put1(f, big, sizeof(big), SHM_OWN), sizeof(big));
	atomic_store(&f->ctl.head, RING / 2 + 64);	/* ahead of the tail */
	assert_int_equal(put1(f, "x", 1, SHM_OWN), -EPROTO);
	atomic_store(&f->ctl.head, (uint64_t)-RING);	/* behind by more than the ring */
	assert_int_equal(put1(f, "x", 1, SHM_OWN), -EPROTO);
	/* ... and says it noted nothing (the caller reads its notes by the
	 * count: left at the capacity it passed, it read garbage) */
	struct shm_rec_note notes[4];
	struct iovec v = { big, 65536 };
	uint8_t kind = SHM_PULL;
	int nn = 4;

	memset(notes, 0xee, sizeof(notes));
	assert_int_equal(shm_ring_write(&f->tx, &v, &kind, 1, &io, notes, &nn), -EPROTO);
	assert_int_equal(nn, 0);
}

/* Random bytes in the whole shared area: every read ends in bytes that
 * fit the caller's buffer, nothing, or -EPROTO. */
static void random_garbage(void **state)
{
	struct fixture *f = *state;
	unsigned int seed = 99;
	uint8_t out[300];

	/* a mapped record's offset is mostly garbage: out of the mapping's
	 * bounds (refused: pulled, zeros), or in it (copied) */
	mf.base = f->data;
	mf.size = RING;
	for (int round = 0; round < 20000; round++) {
		ssize_t r;

		for (size_t i = 0; i < 64; i++)
			f->data[rand_r(&seed) % RING] = (uint8_t)rand_r(&seed);
		if (round % 3 == 0) {
			uint32_t kl[2] = { (uint32_t)rand_r(&seed) % 4, (uint32_t)rand_r(&seed) % 600 };

			memcpy(f->data + (f->rx.pos & (RING - 1) & ~7U), kl, sizeof(kl));
		}
		{
			struct shm_ring_io safe = mio;
			struct iovec v = { out, 1 + (size_t)rand_r(&seed) % sizeof(out) };

			/* remote records point at nothing real: zeros */
			safe.pull = failing_pull;
			r = shm_ring_read(&f->rx, &v, 1, false, &safe);
			assert_true(r == -EPROTO || (r >= 0 && (size_t)r <= v.iov_len));
		}
		if (r < 0)
			shm_ring_init(&f->rx, &f->ctl, f->data, RING);
	}
}

/* The producer's stall watch: true once the consumer has left published
 * bytes unread for the limit while we wrote nothing more, once per
 * stall, never for an empty or moving ring; it looks at most every
 * limit / 4. */
static void stall_watch(void **state)
{
	struct fixture *f = *state;
	uint8_t a[64] = { 1 }, out[64];
	const uint64_t us = 1000;

#define STALLED(t) shm_ring_stalled(&f->tx, (t) * us, 20 * us)
	assert_false(STALLED(1000));				/* empty */
	assert_false(STALLED(2000));
	assert_int_equal(put1(f, a, 10, SHM_OWN), 10);
	assert_false(STALLED(3000));		/* we wrote: not looked at */
	assert_false(STALLED(3005));				/* watch starts */
	assert_false(STALLED(3015));
	assert_false(STALLED(3024));
	assert_false(STALLED(3027));		/* too soon to look again */
	assert_true(STALLED(3029));
	assert_false(STALLED(3050));				/* told once */
	assert_int_equal(put1(f, a, 10, SHM_OWN), 10);		/* we write */
	assert_false(STALLED(3100));		/* again: a new watch */
	assert_false(STALLED(3110));
	assert_true(STALLED(3130));
	/* the consumer reads one record: the head moved, a new watch */
	assert_int_equal(get1(f, out, 10), 10);
	assert_false(STALLED(3140));
	assert_false(STALLED(3150));
	assert_true(STALLED(3160));
	/* all read: nothing to watch, however long */
	assert_int_equal(get1(f, out, 10), 10);
	assert_false(STALLED(3200));
	assert_false(STALLED(9000));
	/* writes that keep coming are never a stall; once they stop, the
	 * stall is told again */
	for (uint64_t t = 9100; t < 9200; t += 10) {
		assert_int_equal(put1(f, a, 10, SHM_OWN), 10);
		assert_false(STALLED(t));
	}
	assert_false(STALLED(9210));
	assert_false(STALLED(9220));
	assert_true(STALLED(9230));
	/* a consumer head the producer never wrote up to (a broken peer):
	 * only an answer, no harm */
	atomic_store(&f->ctl.head, f->tx.pos + 4096);
	assert_false(STALLED(9240));
	assert_true(STALLED(9270));
#undef STALLED
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(roundtrip_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(header_publishes, setup, teardown),
		cmocka_unit_test_setup_teardown(no_pull_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(model_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(full_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(small_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(fits_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(stops_before_remote, setup, teardown),
		cmocka_unit_test_setup_teardown(small_records, setup, teardown),
		cmocka_unit_test_setup_teardown(small_app_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(small_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(model_mixed, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_small, setup, teardown),
		cmocka_unit_test(small_decode),
		cmocka_unit_test_setup_teardown(stall_watch, setup, teardown),
		cmocka_unit_test_setup_teardown(app_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(pull_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(model_stream_mapped, setup, teardown),
		cmocka_unit_test_setup_teardown(mapped_record, setup, teardown),
		cmocka_unit_test_setup_teardown(mapped_fallback, setup, teardown),
		cmocka_unit_test_setup_teardown(revoked, setup, teardown),
		cmocka_unit_test_setup_teardown(revoked_after, setup, teardown),
		cmocka_unit_test_setup_teardown(mapped_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(mapped_put_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_mapped, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_indices, setup, teardown),
		cmocka_unit_test_setup_teardown(random_garbage, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
