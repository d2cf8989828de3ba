/* Unit tests for the TCP channel's transmit ranges (src/chan/tcp_tx.c):
 * the pieces of a zero-copy payload that one FPDU sends. They are read
 * by the kernel (sendmsg) and by the fault probe (tx_fault, through the
 * safe copy), and under ASan neither is checked any more (tx_sendmsg,
 * src/core/memio.c), so the ranges themselves are held here to staying
 * inside the registered pieces the core handed over, in order, covering
 * exactly the bytes asked for. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "chan/tcp_priv.h"

/* The payload byte at logical offset o: pieces are filled with this, so a
 * piece from the wrong place or offset shows as a wrong byte. */
static uint8_t pat(uint64_t o)
{
	return (uint8_t)(o * 7 + (o >> 8) + 1);
}

/* Pieces of the given lengths, each in its own allocation (so ASan
 * also catches a byte read past any one of them), filled with pat(). */
static void src_make(struct sr_msg_src *src, const uint32_t *lens, int n)
{
	uint64_t o = 0;

	memset(src, 0, sizeof(*src));
	for (int i = 0; i < n; i++) {
		uint8_t *p = malloc(lens[i] ? lens[i] : 1);

		assert_non_null(p);
		for (uint32_t k = 0; k < lens[i]; k++)
			p[k] = pat(o + k);
		src->iov[i] = (struct iovec){ p, lens[i] };
		o += lens[i];
	}
	src->n = n;
}

static void src_drop(struct sr_msg_src *src)
{
	for (int i = 0; i < src->n; i++)
		free(src->iov[i].iov_base);
}

/* [off, off + len) through tx_src_iov: every piece inside one source
 * piece, no more pieces than the source has, the bytes in order. */
static void check_range(const struct sr_msg_src *src, uint64_t off, uint64_t len)
{
	struct iovec out[SR_MSG_SRC_MAX];
	uint64_t o = off, total = 0;
	int n;

	memset(out, 0, sizeof(out));
	n = tx_src_iov(src, off, len, out);
	assert_true(n >= 0 && n <= src->n);
	for (int k = 0; k < n; k++) {
		const uint8_t *b = out[k].iov_base;
		uintptr_t a = (uintptr_t)b;
		bool inside = false;

		assert_true(out[k].iov_len > 0);
		for (int i = 0; i < src->n && !inside; i++) {
			uintptr_t pa = (uintptr_t)src->iov[i].iov_base;

			inside = a >= pa && a + out[k].iov_len <= pa + src->iov[i].iov_len;
		}
		if (!inside)
			fail_msg("off %llu len %llu: piece %d [%p, +%zu) outside the source",
				 (unsigned long long)off, (unsigned long long)len, k,
				 out[k].iov_base, out[k].iov_len);
		for (size_t j = 0; j < out[k].iov_len; j++)
			if (b[j] != pat(o + j))
				fail_msg("off %llu len %llu: byte %llu wrong",
					 (unsigned long long)off, (unsigned long long)len,
					 (unsigned long long)(o + j));
		o += out[k].iov_len;
		total += out[k].iov_len;
	}
	assert_int_equal(total, len);
}

/* Every FPDU of a message, at the segment size tx_encode uses for a
 * tagged message, and at a few odd sizes. */
static void check_message(const uint32_t *lens, int n)
{
	static const uint32_t segs[] = { 65520, 65476, 4096, 1000, 1, 7 };
	struct sr_msg_src src;
	uint64_t total = 0;

	src_make(&src, lens, n);
	for (int i = 0; i < n; i++)
		total += lens[i];
	for (size_t s = 0; s < ARRAY_SIZE(segs); s++) {
		if (segs[s] < 1000 && total > 20000)
			continue;	/* byte-sized steps over big messages: slow, nothing new */
		for (uint64_t off = 0; off < total; off += segs[s])
			check_range(&src, off, sr_min((uint64_t)segs[s], total - off));
	}
	check_range(&src, total, 0);
	src_drop(&src);
}

static void test_one_piece(void **state)
{
	static const uint32_t one[] = { 256 * 1024 };
	static const uint32_t small[] = { 5 };

	(void)state;
	check_message(one, 1);
	check_message(small, 1);
}

/* Boundaries that fall on, just before and just after a piece's end. */
static void test_boundaries(void **state)
{
	static const uint32_t a[] = { 65520, 65520, 1 };
	static const uint32_t b[] = { 65519, 2, 65519 };
	static const uint32_t c[] = { 1, 1, 1, 1, 65520, 3 };
	static const uint32_t d[] = { 4096, 0, 4096, 0, 0, 100 };

	(void)state;
	check_message(a, ARRAY_SIZE(a));
	check_message(b, ARRAY_SIZE(b));
	check_message(c, ARRAY_SIZE(c));
	check_message(d, ARRAY_SIZE(d));
}

/* Random gather lists up to SR_MSG_SRC_MAX pieces, and random ranges in
 * them (seeded: a failure repeats). */
static void test_random(void **state)
{
	unsigned int seed = 12345;

	(void)state;
	for (int round = 0; round < 100; round++) {
		uint32_t lens[SR_MSG_SRC_MAX];
		int n = 1 + rand_r(&seed) % SR_MSG_SRC_MAX;
		struct sr_msg_src src;
		uint64_t total = 0;

		for (int i = 0; i < n; i++) {
			lens[i] = rand_r(&seed) % 4 ? 1 + (uint32_t)(rand_r(&seed) % 9000)
						   : (uint32_t)(rand_r(&seed) % 3);
			total += lens[i];
		}
		check_message(lens, n);
		src_make(&src, lens, n);
		for (int k = 0; k < 20 && total; k++) {
			uint64_t off = (uint64_t)rand_r(&seed) % total;

			check_range(&src, off, 1 + (uint64_t)rand_r(&seed) % sr_min(total - off, 70000));
		}
		src_drop(&src);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_piece),
		cmocka_unit_test(test_boundaries),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
