/* What every fuzz target shares: libFuzzer's entry point and an
 * invariant check that aborts (libFuzzer then keeps the input). */
#ifndef SOFTRNIC_FUZZ_H
#define SOFTRNIC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)							\
	do {								\
		if (!(c)) {						\
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n",	\
				__FILE__, __LINE__, #c);		\
			abort();					\
		}							\
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
