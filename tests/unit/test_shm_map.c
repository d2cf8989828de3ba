/* Unit tests for memfd-backed large regions (src/chan/shm_map.c): what a
 * registration shares and what it leaves private, that the program sees
 * no difference (contents, later writes, the copy back at the last
 * deregistration, fork), that the memfd holds what the address holds, and
 * that a range the program unmapped while registered is only forgotten.
 * What is shared is read from /proc/self/maps, not from the module. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chan/shm_map.h"
#include "core/util.h"

#define MIB (1ul << 20)

static size_t pg(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

enum kind { K_NONE, K_ANON, K_MEMFD, K_OTHER };

/* What backs the page at p: private anonymous memory, our memfd, other. */
static enum kind kind_at(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	enum kind k = K_NONE;
	char line[4096];

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, ino;
		char perms[5], path[4096] = "";

		if (sscanf(line, "%lx-%lx %4s %*x %*x:%*x %lu %4095[^\n]", &lo, &hi,
			   perms, &ino, path) < 4)
			continue;
		if ((uintptr_t)p < lo || (uintptr_t)p >= hi)
			continue;
		if (strstr(path, "memfd:softrnic-mr") && perms[3] == 's')
			k = K_MEMFD;
		else if (ino == 0 && perms[3] == 'p' && (!path[0] || !strcmp(path, "[heap]")))
			k = K_ANON;
		else
			k = K_OTHER;
		break;
	}
	fclose(f);
	return k;
}

/* Every page of [p, p + len) is of kind k. */
static void expect_kind(const void *p, size_t len, enum kind k)
{
	for (size_t o = 0; o < len; o += pg())
		assert_int_equal(kind_at((const char *)p + o), k);
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 131u + seed) ^ (i >> 12));
}

static bool check(const uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)((i * 131u + seed) ^ (i >> 12)))
			return false;
	return true;
}

static uint8_t *anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static int setup(void **state)
{
	unsetenv("SOFTRNIC_SHM_MAP");
	unsetenv("SOFTRNIC_SHM_MAP_MIN");
	unsetenv("SOFTRNIC_SHM");
	return 0;
}

/* An unaligned region: every byte kept, the bytes outside its whole pages
 * (which stay private) included; later writes seen at the address and in
 * the memfd both ways; the copy back keeps them all. */
static void test_contents(void **state)
{
	size_t len = 3 * MIB + 5, all = 4 * MIB;
	uint8_t *m = anon(all), *r = m + 100;
	uint8_t *in = m + pg(), *in_end = m + 3 * MIB;	/* whole pages of r */
	struct shm_map_loc loc;
	struct stat st;
	uint8_t *view;

	fill(m, all, 7);
	assert_true(shm_map_reg(r, len));
	assert_true(check(m, all, 7));
	expect_kind(in, (size_t)(in_end - in), K_MEMFD);
	assert_int_equal(kind_at(m), K_ANON);		/* the partial first page */
	assert_int_equal(kind_at(in_end), K_ANON);	/* and the last */

	/* find: inside, at both ends; not across a partial page */
	assert_true(shm_map_find(in, (size_t)(in_end - in), &loc));
	assert_int_equal(loc.off, 0);
	assert_int_equal(loc.size, (size_t)(in_end - in));
	assert_true(shm_map_find(in + 12345, 100, &loc));
	assert_int_equal(loc.off, 12345);
	assert_false(shm_map_find(in - 1, 2, &loc));
	assert_false(shm_map_find(in_end - 1, 2, &loc));
	assert_false(shm_map_find(m, 10, &loc));
	assert_int_equal(fstat(loc.fd, &st), 0);
	assert_int_equal((uint64_t)st.st_ino, loc.ino);
	assert_int_equal((uint64_t)st.st_size, loc.size);

	/* the memfd holds what the address holds, both ways */
	view = mmap(NULL, loc.size, PROT_READ | PROT_WRITE, MAP_SHARED, loc.fd, 0);
	assert_true(view != MAP_FAILED);
	assert_memory_equal(view, in, loc.size);
	memset(in + 5000, 0x3c, 3000);
	assert_memory_equal(view + 5000, in + 5000, 3000);
	memset(view + 9000, 0xc3, 100);
	assert_int_equal(in[9000], 0xc3);
	assert_int_equal(in[9099], 0xc3);
	/* sealed: it cannot shrink under a peer's mapping */
	assert_int_not_equal(ftruncate(loc.fd, 0), 0);
	munmap(view, loc.size);

	shm_map_unreg(r, len);
	expect_kind(in, (size_t)(in_end - in), K_ANON);
	assert_false(shm_map_find(in, 1, &loc));
	memset(in + 5000, 0x3c, 3000);			/* expected image */
	memset(in + 9000, 0xc3, 100);
	fill(m, all, 9);				/* private again: writable */
	assert_true(check(m, all, 9));
	munmap(m, all);
}

/* The values survive the round trip exactly (a second region, written
 * between registration and deregistration only at the address). */
static void test_roundtrip(void **state)
{
	size_t len = 2 * MIB;
	uint8_t *m = anon(len);

	fill(m, len, 1);
	assert_true(shm_map_reg(m, len));
	expect_kind(m, len, K_MEMFD);
	assert_true(check(m, len, 1));
	fill(m, len, 2);
	shm_map_unreg(m, len);
	expect_kind(m, len, K_ANON);
	assert_true(check(m, len, 2));
	munmap(m, len);
}

/* A large region the program barely touched: its untouched pages read as
 * zeros, and cost the memfd nothing. */
static void test_sparse(void **state)
{
	size_t len = 64 * MIB;
	uint8_t *m = anon(len);
	struct shm_map_loc loc;
	struct stat st;

	m[0] = 1;
	m[len / 2 + 7] = 2;
	assert_true(shm_map_reg(m, len));
	assert_true(shm_map_find(m, len, &loc));
	assert_int_equal(fstat(loc.fd, &st), 0);
	assert_true((size_t)st.st_blocks * 512 < 4 * MIB);
	assert_int_equal(m[0], 1);
	assert_int_equal(m[len / 2 + 7], 2);
	assert_int_equal(m[len - 1], 0);
	assert_int_equal(m[len / 4], 0);
	m[len - 1] = 3;
	shm_map_unreg(m, len);
	expect_kind(m, pg(), K_ANON);
	assert_int_equal(m[0], 1);
	assert_int_equal(m[len / 2 + 7], 2);
	assert_int_equal(m[len - 1], 3);
	assert_int_equal(m[len / 4], 0);
	munmap(m, len);
}

/* Below SOFTRNIC_SHM_MAP_MIN (1 MiB by default): private. */
static void test_small(void **state)
{
	size_t len = MIB - 1;
	uint8_t *m = anon(2 * MIB);

	assert_false(shm_map_reg(m, len));
	expect_kind(m, len, K_ANON);
	assert_false(shm_map_reg(m, 64 << 10));
	setenv("SOFTRNIC_SHM_MAP_MIN", "64K", 1);
	assert_true(shm_map_reg(m, 64 << 10));
	expect_kind(m, 64 << 10, K_MEMFD);
	shm_map_unreg(m, 64 << 10);
	/* whole pages inside: none */
	setenv("SOFTRNIC_SHM_MAP_MIN", "0", 1);
	assert_false(shm_map_reg(m + 1, pg()));
	setenv("SOFTRNIC_SHM_MAP_MIN", "junk", 1);	/* ignored: 1 MiB */
	assert_false(shm_map_reg(m, 64 << 10));
	assert_true(shm_map_reg(m, MIB));
	shm_map_unreg(m, MIB);
	unsetenv("SOFTRNIC_SHM_MAP_MIN");
	expect_kind(m, 2 * MIB, K_ANON);
	munmap(m, 2 * MIB);
}

/* Not private anonymous read-write memory: private. */
static void test_not_anon(void **state)
{
	size_t len = 2 * MIB;
	char path[] = "/tmp/softrnic-shm-map-XXXXXX";
	int fd = mkstemp(path);
	uint8_t *f, *ro, *sh, *mixed;

	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	f = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	assert_true(f != MAP_FAILED);
	assert_false(shm_map_reg(f, len));
	assert_int_equal(kind_at(f), K_OTHER);
	munmap(f, len);
	close(fd);

	ro = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(ro != MAP_FAILED);
	assert_false(shm_map_reg(ro, len));
	munmap(ro, len);

	sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	assert_false(shm_map_reg(sh, len));
	assert_int_equal(kind_at(sh), K_OTHER);
	munmap(sh, len);

	/* one read-only page in the middle: all of it stays as it was */
	mixed = anon(len);
	fill(mixed, len, 3);
	assert_int_equal(mprotect(mixed + MIB, pg(), PROT_READ), 0);
	assert_false(shm_map_reg(mixed, len));
	expect_kind(mixed, MIB, K_ANON);
	assert_true(check(mixed, len, 3));
	munmap(mixed, len);

	/* a hole */
	mixed = anon(len);
	munmap(mixed + MIB, pg());
	assert_false(shm_map_reg(mixed, len));
	expect_kind(mixed, MIB, K_ANON);
	munmap(mixed, len);
}

/* Two registrations of one range (and one inside it) count; the last
 * deregistration makes it private; a partial overlap stays private. */
static void test_refcount(void **state)
{
	size_t len = 4 * MIB;
	uint8_t *m = anon(len + 2 * MIB), *tail;
	struct shm_map_loc loc;

	fill(m, len + 2 * MIB, 5);
	tail = malloc(2 * MIB);
	assert_non_null(tail);
	memcpy(tail, m + len, 2 * MIB);
	assert_true(shm_map_reg(m, len));
	assert_true(shm_map_reg(m, len));
	assert_true(shm_map_reg(m + MIB, MIB));		/* inside */
	assert_false(shm_map_reg(m + 3 * MIB, 2 * MIB));	/* across the end */
	expect_kind(m + len, 2 * MIB, K_ANON);
	shm_map_unreg(m + MIB, MIB);
	shm_map_unreg(m, len);
	expect_kind(m, len, K_MEMFD);
	assert_true(shm_map_find(m, len, &loc));
	fill(m, len, 6);
	shm_map_unreg(m, len);
	expect_kind(m, len, K_ANON);
	assert_false(shm_map_find(m, 1, &loc));
	assert_true(check(m, len, 6));
	assert_memory_equal(m + len, tail, 2 * MIB);	/* never moved */
	free(tail);
	/* once private, a new registration shares again */
	assert_true(shm_map_reg(m, len));
	shm_map_unreg(m, len);
	/* deregistering what was never counted changes nothing */
	shm_map_unreg(m, len);
	expect_kind(m, len, K_ANON);
	munmap(m, len + 2 * MIB);
}

/* The program unmapped the region while registered and mapped something
 * else there: deregistration leaves that alone and closes the memfd. */
static void test_unmapped(void **state)
{
	size_t len = 2 * MIB;
	uint8_t *m = anon(len), *n;
	struct shm_map_loc loc;
	struct stat st;

	fill(m, len, 11);
	assert_true(shm_map_reg(m, len));
	assert_true(shm_map_find(m, len, &loc));
	munmap(m, len);
	n = mmap(m, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	assert_ptr_equal(n, m);
	fill(n, len, 12);
	shm_map_unreg(m, len);
	assert_true(check(n, len, 12));
	expect_kind(n, len, K_ANON);
	assert_false(shm_map_find(m, 1, &loc));
	/* the memfd is closed (its number free, or someone else's now) */
	assert_true(fstat(loc.fd, &st) != 0 || st.st_ino != loc.ino);
	munmap(n, len);

	/* a file mapped there instead: untouched too */
	m = anon(len);
	assert_true(shm_map_reg(m, len));
	munmap(m, len);
	{
		char path[] = "/tmp/softrnic-shm-map-XXXXXX";
		int fd = mkstemp(path);

		assert_true(fd >= 0);
		unlink(path);
		assert_int_equal(ftruncate(fd, (off_t)len), 0);
		n = mmap(m, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
		assert_ptr_equal(n, m);
		fill(n, len, 13);
		shm_map_unreg(m, len);
		assert_int_equal(kind_at(n), K_OTHER);
		assert_true(check(n, len, 13));
		munmap(n, len);
		close(fd);
	}
}

/* A part re-protected while registered keeps its protection after the
 * copy back (and is read through the memfd, not the address). */
static void test_reprotected(void **state)
{
	size_t len = 2 * MIB;
	uint8_t *m = anon(len);

	fill(m, len, 21);
	assert_true(shm_map_reg(m, len));
	assert_int_equal(mprotect(m + MIB, pg(), PROT_NONE), 0);
	shm_map_unreg(m, len);
	expect_kind(m, MIB, K_ANON);
	assert_int_equal(mprotect(m + MIB, pg(), PROT_READ | PROT_WRITE), 0);
	assert_true(check(m, len, 21));
	munmap(m, len);
}

/* fork: the child gets private copies (its writes unseen by the parent,
 * the parent's after the fork unseen by it); the parent stays shared. */
static void test_fork(void **state)
{
	size_t len = 2 * MIB;
	uint8_t *m = anon(len);
	struct shm_map_loc loc;
	int go[2], st;
	pid_t pid;

	fill(m, len, 31);
	assert_true(shm_map_reg(m, len));
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;

		alarm(20);
		if (kind_at(m) != K_ANON || shm_map_find(m, 1, &loc))
			_exit(1);
		if (!check(m, len, 31))
			_exit(2);
		if (read(go[0], &c, 1) != 1)
			_exit(3);
		if (!check(m, len, 31))		/* the parent wrote since */
			_exit(4);
		fill(m, len, 33);
		/* a registration in the child shares in the child */
		if (!shm_map_reg(m, len) || kind_at(m) != K_MEMFD)
			_exit(5);
		shm_map_unreg(m, len);
		_exit(check(m, len, 33) ? 0 : 6);
	}
	fill(m, len, 32);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("child killed by signal %d", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(check(m, len, 32));
	expect_kind(m, len, K_MEMFD);
	assert_true(shm_map_find(m, len, &loc));
	shm_map_unreg(m, len);
	expect_kind(m, len, K_ANON);
	assert_true(check(m, len, 32));
	close(go[0]);
	close(go[1]);
	munmap(m, len);
}

/* SOFTRNIC_SHM_MAP=0 or SOFTRNIC_SHM=0: nothing is shared. */
static void test_disabled(void **state)
{
	size_t len = 2 * MIB;
	uint8_t *m = anon(len);

	setenv("SOFTRNIC_SHM_MAP", "0", 1);
	assert_false(shm_map_reg(m, len));
	expect_kind(m, len, K_ANON);
	unsetenv("SOFTRNIC_SHM_MAP");
	setenv("SOFTRNIC_SHM", "0", 1);
	assert_false(shm_map_reg(m, len));
	expect_kind(m, len, K_ANON);
	unsetenv("SOFTRNIC_SHM");
	setenv("SOFTRNIC_SHM_MAP", "1", 1);
	assert_true(shm_map_reg(m, len));
	shm_map_unreg(m, len);
	unsetenv("SOFTRNIC_SHM_MAP");
	munmap(m, len);
}

/* Registrations of distinct regions from several threads while another
 * looks them up: each ends private with its contents (TSan and ASan
 * builds check the locking). */
#define NTHR 3
#define ROUNDS 40

static atomic_bool stop;

static void *regger(void *arg)
{
	uint8_t *m = arg;
	size_t len = MIB + pg();

	for (int i = 0; i < ROUNDS; i++) {
		struct shm_map_loc loc;

		fill(m, len, (uint32_t)i);
		if (!shm_map_reg(m, len))
			return (void *)1;
		if (!shm_map_find(m + 100, 100, &loc) || loc.off != 100)
			return (void *)2;
		m[5] ^= 0xff;
		m[5] ^= 0xff;
		shm_map_unreg(m, len);
		if (!check(m, len, (uint32_t)i))
			return (void *)3;
	}
	return NULL;
}

static void *finder(void *arg)
{
	uint8_t **ms = arg;
	unsigned long hits = 0;

	while (!atomic_load(&stop)) {
		struct shm_map_loc loc;

		for (int t = 0; t < NTHR; t++)
			hits += shm_map_find(ms[t] + 4096, 4096, &loc);
	}
	return (void *)hits;
}

static void test_threads(void **state)
{
	uint8_t *ms[NTHR];
	pthread_t th[NTHR], f;
	void *ret;

	for (int t = 0; t < NTHR; t++)
		ms[t] = anon(MIB + pg());
	atomic_store(&stop, false);
	assert_int_equal(pthread_create(&f, NULL, finder, ms), 0);
	for (int t = 0; t < NTHR; t++)
		assert_int_equal(pthread_create(&th[t], NULL, regger, ms[t]), 0);
	for (int t = 0; t < NTHR; t++) {
		assert_int_equal(pthread_join(th[t], &ret), 0);
		assert_null(ret);
	}
	atomic_store(&stop, true);
	assert_int_equal(pthread_join(f, &ret), 0);
	for (int t = 0; t < NTHR; t++) {
		expect_kind(ms[t], MIB, K_ANON);
		munmap(ms[t], MIB + pg());
	}
}

#ifndef SR_ASAN
/* Is the page at p in the brk heap? */
static bool in_heap(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	bool h = false;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
		    (uintptr_t)p >= lo && (uintptr_t)p < hi) {
			h = strstr(line, "[heap]") != NULL;
			break;
		}
	}
	fclose(f);
	return h;
}
#endif

/* malloc'ed memory: in the brk heap (glibc, below its mmap threshold),
 * or in malloc's own mappings (ASan's allocator). */
static void test_heap(void **state)
{
	size_t len = 3 * MIB + 123;
	uint8_t *p;

#ifndef SR_ASAN
	mallopt(M_MMAP_THRESHOLD, 16 << 20);
#endif
	p = malloc(len);
	assert_non_null(p);
#ifndef SR_ASAN
	assert_true(in_heap(p + len / 2));
#endif
	fill(p, len, 41);
	assert_true(shm_map_reg(p, len));
	assert_true(check(p, len, 41));
	assert_int_equal(kind_at(p + MIB), K_MEMFD);
	fill(p, len, 42);
	shm_map_unreg(p, len);
	assert_true(check(p, len, 42));
#ifndef SR_ASAN
	assert_true(in_heap(p + len / 2));	/* and the heap again */
#endif
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_contents, setup),
		cmocka_unit_test_setup(test_roundtrip, setup),
		cmocka_unit_test_setup(test_sparse, setup),
		cmocka_unit_test_setup(test_small, setup),
		cmocka_unit_test_setup(test_not_anon, setup),
		cmocka_unit_test_setup(test_refcount, setup),
		cmocka_unit_test_setup(test_unmapped, setup),
		cmocka_unit_test_setup(test_reprotected, setup),
		cmocka_unit_test_setup(test_fork, setup),
		cmocka_unit_test_setup(test_disabled, setup),
		cmocka_unit_test_setup(test_threads, setup),
		cmocka_unit_test_setup(test_heap, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
