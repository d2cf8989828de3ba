/* libFuzzer target for the datagram CM's request/reply decoder
 * (src/cm/cm_sidr.c); tests/fuzz/run.sh builds and runs it.
 *
 * The input is one UDP datagram as a listener or a requester would
 * receive it. Whatever the decoder accepts must stay inside the input
 * and re-encode to exactly the same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/cm_sidr.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[SIDR_FRAME_MAX];
	struct sidr_msg m;
	ssize_t n;

	if (sidr_decode(data, size, &m))
		return 0;
	CHECK(size >= SIDR_HDR_LEN && size <= SIDR_FRAME_MAX);
	CHECK(m.pd_len == size - SIDR_HDR_LEN);
	CHECK(!m.pd_len || (m.pd == data + SIDR_HDR_LEN));
	n = sidr_encode(out, sizeof(out), &m);
	CHECK(n == (ssize_t)size);
	CHECK(!memcmp(out, data, size));
	return 0;
}
