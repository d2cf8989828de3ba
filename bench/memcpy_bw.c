/* bench/memcpy_bw: the copy rate of one core, the ceiling of a one-copy
 * transfer. Copies SIZE bytes (default 16 MiB) between two buffers that
 * were touched first, for about a second, and prints GB/s (10^9 bytes per
 * second) of the median of ten rounds. Built by bench/shm.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 16u << 20;
	char *a = malloc(size), *b = malloc(size);
	double r[10];

	if (!a || !b)
		return 1;
	memset(a, 1, size);
	memset(b, 2, size);
	for (int k = 0; k < 10; k++) {
		double t0 = now(), t;
		int n = 0;

		do {
			memcpy(k % 2 ? a : b, k % 2 ? b : a, size);
			n++;
			t = now() - t0;
		} while (t < 0.1);
		r[k] = (double)size * n / t / 1e9;
	}
	qsort(r, 10, sizeof(r[0]), cmp);
	printf("%.2f\n", (r[4] + r[5]) / 2);
	return a[0] + b[0] == 0;
}
