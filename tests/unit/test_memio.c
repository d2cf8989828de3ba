/* Unit tests for the safe copies (src/core/memio.c): copies into and out
 * of application memory that may be unmapped or protected behind our back
 * fail with -EFAULT and never crash, in both modes (the fault guard and
 * SOFTRNIC_SAFE_COPY=syscall), from many threads at once; and a fault
 * that is not ours still reaches the program's handler or kills it.
 *
 * The guard is installed once per process, at the first copy, so every
 * case runs in a forked child that chooses its mode before copying. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"

#ifdef SR_ASAN
#include <fcntl.h>
#include <sanitizer/asan_interface.h>
#endif

/* A child exits 0 when all its checks hold, 1 + the check number else. */
#define CHILD_CHECK(n, cond) do { if (!(cond)) _exit(1 + (n)); } while (0)

static long page(void)
{
	return sysconf(_SC_PAGESIZE);
}

/* Run fn in a child with SOFTRNIC_SAFE_COPY=mode (NULL: default) and
 * return its wait status. Bounded by an alarm in the child. */
static int in_child(const char *mode, void (*fn)(void))
{
	pid_t pid = fork();
	int st = 0;

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		if (mode)
			setenv("SOFTRNIC_SAFE_COPY", mode, 1);
		else
			unsetenv("SOFTRNIC_SAFE_COPY");
		fn();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static void expect_exit0(int st)
{
	if (WIFSIGNALED(st))
		fail_msg("child killed by signal %d", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st))
		fail_msg("child check %d failed", WEXITSTATUS(st) - 1);
}

/* Good copies copy; a missing page, a PROT_NONE page, a read-only page
 * (for writes) and a range that runs off its mapping are -EFAULT. */
static void copies(void)
{
	size_t pg = (size_t)page();
	uint8_t *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t buf[64], big[8192];

	CHILD_CHECK(0, m != MAP_FAILED);
	memset(m, 0xa5, 3 * pg);
	memset(buf, 0x11, sizeof(buf));
	CHILD_CHECK(1, mem_write((uintptr_t)m + 10, buf, sizeof(buf)) == 0);
	CHILD_CHECK(2, m[9] == 0xa5 && m[10] == 0x11 && m[73] == 0x11 && m[74] == 0xa5);
	memset(buf, 0, sizeof(buf));
	CHILD_CHECK(3, mem_read(buf, (uintptr_t)m + 10, sizeof(buf)) == 0);
	CHILD_CHECK(4, buf[0] == 0x11 && buf[63] == 0x11);
	CHILD_CHECK(5, mem_read(buf, (uintptr_t)m, 0) == 0);

	/* page 1 read-only, page 2 unmapped */
	CHILD_CHECK(6, mprotect(m + pg, pg, PROT_READ) == 0);
	CHILD_CHECK(7, munmap(m + 2 * pg, pg) == 0);
	CHILD_CHECK(8, mem_read(buf, (uintptr_t)m + pg, sizeof(buf)) == 0);
	CHILD_CHECK(9, buf[0] == 0xa5);
	CHILD_CHECK(10, mem_write((uintptr_t)m + pg, buf, sizeof(buf)) == -EFAULT);
	CHILD_CHECK(11, m[pg] == 0xa5);	/* nothing written */
	CHILD_CHECK(12, mem_read(buf, (uintptr_t)m + 2 * pg, sizeof(buf)) == -EFAULT);
	CHILD_CHECK(13, mem_write((uintptr_t)m + 2 * pg, buf, sizeof(buf)) == -EFAULT);
	/* straddling: starts mapped, runs into the hole */
	CHILD_CHECK(14, mem_read(big, (uintptr_t)m + 2 * pg - 100, sizeof(big)) == -EFAULT);
	CHILD_CHECK(15, mem_read(buf, 8, sizeof(buf)) == -EFAULT);	/* NULL page */
	CHILD_CHECK(16, mprotect(m, pg, PROT_NONE) == 0);
	CHILD_CHECK(17, mem_read(buf, (uintptr_t)m, 8) == -EFAULT);
	/* and still fine afterwards */
	CHILD_CHECK(18, mem_read(buf, (uintptr_t)m + pg + 8, 8) == 0);
	munmap(m, 2 * pg);
}

static void test_copies_guard(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, copies));
}

static void test_copies_syscall(void **state)
{
	(void)state;
	expect_exit0(in_child("syscall", copies));
}

/* Every size up to past the short copies' widest moves (sr_fixup_copy
 * on x86-64: 1-3, 4-7, 8-16, 17-32, 33-64 bytes, then rep movsb): a copy
 * that ends at the last byte before a hole copies exactly its bytes and
 * no neighbour; one that ends a byte into the hole is -EFAULT, reading
 * and writing. */
static void sizes(void)
{
	size_t pg = (size_t)page();
	uint8_t *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *end, src[160], dst[160 + 2];

	CHILD_CHECK(0, m != MAP_FAILED);
	CHILD_CHECK(1, munmap(m + pg, pg) == 0);
	end = m + pg;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	for (size_t n = 0; n <= 130; n++) {
		memset(m, 0xa5, pg);
		CHILD_CHECK(2, mem_write((uintptr_t)(end - n), src, n) == 0);
		CHILD_CHECK(3, !memcmp(end - n, src, n) && end[-(long)n - 1] == 0xa5);
		memset(dst, 0x5a, sizeof(dst));
		CHILD_CHECK(4, mem_read(dst + 1, (uintptr_t)(end - n), n) == 0);
		CHILD_CHECK(5, !memcmp(dst + 1, src, n) && dst[0] == 0x5a && dst[n + 1] == 0x5a);
		if (!n)
			continue;
		CHILD_CHECK(6, mem_write((uintptr_t)(end - n + 1), src, n) == -EFAULT);
		CHILD_CHECK(7, mem_read(dst, (uintptr_t)(end - n + 1), n) == -EFAULT);
	}
	munmap(m, pg);
}

static void test_sizes(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, sizes));
	expect_exit0(in_child("syscall", sizes));
}

/* Atomics on a bad address fail the same way. */
static void atomics(void)
{
	uint64_t *v = mmap(NULL, (size_t)page(), PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t orig = 0;

	CHILD_CHECK(0, v != MAP_FAILED);
	*v = 5;
	CHILD_CHECK(1, mem_atomic((uintptr_t)v, SR_ATOMIC_FETCH_ADD, 3, 0, &orig) == 0);
	CHILD_CHECK(2, orig == 5 && *v == 8);
	CHILD_CHECK(3, mem_atomic((uintptr_t)v, SR_ATOMIC_CMP_SWP, 8, 42, &orig) == 0);
	CHILD_CHECK(4, orig == 8 && *v == 42);
	CHILD_CHECK(5, mprotect(v, (size_t)page(), PROT_READ) == 0);
	CHILD_CHECK(6, mem_atomic((uintptr_t)v, SR_ATOMIC_FETCH_ADD, 1, 0, &orig) == -EFAULT);
	CHILD_CHECK(7, *v == 42);
	CHILD_CHECK(8, munmap(v, (size_t)page()) == 0);
	CHILD_CHECK(9, mem_atomic((uintptr_t)v, SR_ATOMIC_FETCH_ADD, 1, 0, &orig) == -EFAULT);
}

static void test_atomics(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, atomics));
	expect_exit0(in_child("syscall", atomics));
}

/* Many threads faulting and copying at once: each sees its own result. */
#define NTHREADS 8
static uint8_t *hole;
static _Atomic int thread_bad;

static void *copier(void *arg)
{
	uint8_t good[256], out[256];
	uintptr_t me = (uintptr_t)arg;

	memset(good, (int)me, sizeof(good));
	for (int i = 0; i < 20000; i++) {
		if (mem_read(out, (uintptr_t)hole + (size_t)(i % 64), 16) != -EFAULT)
			thread_bad = 1;
		if (mem_read(out, (uintptr_t)good, sizeof(good)) || out[255] != (uint8_t)me)
			thread_bad = 2;
	}
	return NULL;
}

static void threads(void)
{
	pthread_t t[NTHREADS];

	hole = mmap(NULL, (size_t)page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHILD_CHECK(0, hole != MAP_FAILED);
	for (uintptr_t i = 0; i < NTHREADS; i++)
		CHILD_CHECK(1, pthread_create(&t[i], NULL, copier, (void *)i) == 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	CHILD_CHECK(2, thread_bad == 0);
}

static void test_threads(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, threads));
}

/* More threads than the guard has slots (256), all alive at once: each
 * still gets its own results (x86-64 needs no slot to copy; elsewhere
 * the extra ones copy through the system call). */
#define MANY 300
static pthread_barrier_t many_bar;

static void *many_copier(void *arg)
{
	uint8_t good[32], out[32];

	memset(good, (int)(uintptr_t)arg, sizeof(good));
	pthread_barrier_wait(&many_bar);	/* all alive */
	if (mem_read(out, (uintptr_t)hole, sizeof(out)) != -EFAULT)
		thread_bad = 1;
	if (mem_read(out, (uintptr_t)good, sizeof(good)) || out[31] != good[31])
		thread_bad = 2;
	if (mem_write((uintptr_t)hole + 8, good, 8) != -EFAULT)
		thread_bad = 3;
	pthread_barrier_wait(&many_bar);	/* (no slot freed before all copied) */
	return NULL;
}

static void many_threads(void)
{
	static pthread_t t[MANY];
	pthread_attr_t a;

	hole = mmap(NULL, (size_t)page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHILD_CHECK(0, hole != MAP_FAILED);
	CHILD_CHECK(1, pthread_barrier_init(&many_bar, NULL, MANY) == 0);
	CHILD_CHECK(2, pthread_attr_init(&a) == 0 && pthread_attr_setstacksize(&a, 64 << 10) == 0);
	for (uintptr_t i = 0; i < MANY; i++)
		CHILD_CHECK(3, pthread_create(&t[i], &a, many_copier, (void *)(i + 1)) == 0);
	for (int i = 0; i < MANY; i++)
		pthread_join(t[i], NULL);
	CHILD_CHECK(4, thread_bad == 0);
}

static void test_many_threads(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, many_threads));
}

/* A fault of the program's own, after the guard is in: the program's
 * handler installed before ours still runs ... */
static void own_handler(int sig)
{
	(void)sig;
	_exit(42);
}

static void chained(void)
{
	uint8_t b[8];
	volatile uint8_t *bad = mmap(NULL, (size_t)page(), PROT_NONE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	signal(SIGSEGV, own_handler);
	CHILD_CHECK(1, bad != MAP_FAILED);
	CHILD_CHECK(0, mem_read(b, (uintptr_t)bad, sizeof(b)) == -EFAULT);	/* installs ours */
	(void)*bad;
	_exit(3);
}

static void test_chained(void **state)
{
	int st = in_child(NULL, chained);

	(void)state;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 42);
}

/* ... and without one, the program dies of its SIGSEGV as it would have. */
static void crashes(void)
{
	uint8_t b[8];
	volatile uint8_t *bad = mmap(NULL, (size_t)page(), PROT_NONE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	signal(SIGSEGV, SIG_DFL);
	CHILD_CHECK(1, bad != MAP_FAILED);
	CHILD_CHECK(0, mem_read(b, (uintptr_t)bad, sizeof(b)) == -EFAULT);
	(void)*bad;
	_exit(3);
}

static void test_crashes(void **state)
{
	int st = in_child(NULL, crashes);

	(void)state;
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSEGV);
}

/* Writes through a remembered region (mem_write_at_gen): at the current
 * MR generation they write (or fail with -EFAULT on a bad page); at any
 * other, or without the guard, they write nothing and say -EAGAIN. With
 * none in flight, mem_quiesce returns at once. */
static void at_gen(void)
{
	uint8_t *m = mmap(NULL, (size_t)page(), PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t src[16];
	uint64_t gen = mr_gen();
	bool guard = !getenv("SOFTRNIC_SAFE_COPY");

	CHILD_CHECK(0, m != MAP_FAILED);
	memset(src, 0x42, sizeof(src));
	CHILD_CHECK(1, mem_write_at_gen((uintptr_t)m + 8, src, sizeof(src), gen + 1) == -EAGAIN);
	CHILD_CHECK(2, m[8] == 0);
	CHILD_CHECK(3, mem_write_at_gen((uintptr_t)m + 8, src, sizeof(src), gen) ==
			       (guard ? 0 : -EAGAIN));
	CHILD_CHECK(4, m[8] == (guard ? 0x42 : 0) && m[23] == (guard ? 0x42 : 0) && m[24] == 0);
	mem_quiesce();
	CHILD_CHECK(5, mprotect(m, (size_t)page(), PROT_READ) == 0);
	CHILD_CHECK(6, mem_write_at_gen((uintptr_t)m, src, sizeof(src), gen) ==
			       (guard ? -EFAULT : -EAGAIN));
	mem_quiesce();		/* (the fault ended that write too) */
	CHILD_CHECK(7, mem_write_at_gen((uintptr_t)m + 100, src, 1, gen) == (guard ? -EFAULT : -EAGAIN));
	munmap(m, (size_t)page());
}

static void test_at_gen(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, at_gen));
	expect_exit0(in_child("syscall", at_gen));
}

/* The handshake itself, raced: a writer thread writes its generation
 * through mem_write_at_gen as a receive would (at the generation it read,
 * looked up again now and then; 64 KiB a write, so that each is long),
 * while this thread moves the generation and waits (mem_quiesce), then
 * clears the area's last word, the one a write stores last, and watches
 * it for longer than a write takes. Nothing may land there with an older
 * generation than the one moved to: every write either saw the move and
 * wrote nothing, or ended before mem_quiesce returned. (mem_quiesce
 * without its wait: thousands of stale words in most runs.) */
#define RACE_ROUNDS 2000
#define RACE_WORDS 8192
static _Atomic uint64_t race_area[RACE_WORDS];
static atomic_bool race_stop;

static void *race_writer(void *arg)
{
	static uint64_t src[RACE_WORDS];

	(void)arg;
	while (!atomic_load(&race_stop)) {
		uint64_t g = mr_gen();

		for (int i = 0; i < RACE_WORDS; i++)
			src[i] = g;
		for (int i = 0; i < 16; i++)
			if (mem_write_at_gen((uintptr_t)race_area, src, sizeof(src), g) == -EAGAIN)
				break;
	}
	return NULL;
}

static void gen_race(void)
{
	pthread_t t;
	int stale = 0;

	CHILD_CHECK(0, pthread_create(&t, NULL, race_writer, NULL) == 0);
	for (int r = 0; r < RACE_ROUNDS; r++) {
		uint64_t moved;

		mr_gen_bump();
		moved = mr_gen();
		mem_quiesce();
		atomic_store(&race_area[RACE_WORDS - 1], 0);
		for (int i = 0; i < 20000; i++) {
			uint64_t v = atomic_load(&race_area[RACE_WORDS - 1]);

			if (v && v < moved)
				stale++;
		}
	}
	atomic_store(&race_stop, true);
	CHILD_CHECK(1, pthread_join(t, NULL) == 0);
	CHILD_CHECK(2, stale == 0);
}

static void test_gen_race(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, gen_race));
}

/* A process that copied, then forked: the child's faults are still
 * caught (the thread id the guard names is the child's, not the one the
 * forking thread had in its parent), in the child's first thread and in
 * a thread it starts. */
static void *fork_copier(void *arg)
{
	uint8_t b[16];

	(void)arg;
	return (void *)(uintptr_t)(mem_read(b, (uintptr_t)hole, sizeof(b)) == -EFAULT);
}

static void forked(void)
{
	uint8_t good[16] = { 7 }, b[16];
	pthread_t t;
	void *ok = NULL;
	pid_t pid;
	int st = 0;

	hole = mmap(NULL, (size_t)page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHILD_CHECK(0, hole != MAP_FAILED);
	CHILD_CHECK(1, mem_read(b, (uintptr_t)good, sizeof(b)) == 0);	/* guard in use */
	CHILD_CHECK(2, mem_read(b, (uintptr_t)hole, sizeof(b)) == -EFAULT);
	pid = fork();
	CHILD_CHECK(3, pid >= 0);
	if (pid == 0) {
		CHILD_CHECK(4, mem_read(b, (uintptr_t)hole, sizeof(b)) == -EFAULT);
		CHILD_CHECK(5, mem_read(b, (uintptr_t)good, sizeof(b)) == 0 && b[0] == 7);
		CHILD_CHECK(6, pthread_create(&t, NULL, fork_copier, NULL) == 0);
		pthread_join(t, &ok);
		CHILD_CHECK(7, ok != NULL);
		CHILD_CHECK(8, mem_write((uintptr_t)hole, good, sizeof(good)) == -EFAULT);
		_exit(0);
	}
	CHILD_CHECK(9, waitpid(pid, &st, 0) == pid);
	if (WIFSIGNALED(st))
		_exit(1 + 10);		/* the grandchild crashed */
	if (WEXITSTATUS(st))
		_exit(WEXITSTATUS(st));
	/* and the parent's guard still works */
	CHILD_CHECK(11, mem_read(b, (uintptr_t)hole, sizeof(b)) == -EFAULT);
}

static void test_forked(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, forked));
}

#ifdef SR_ASAN
/* Under ASan, the application's side of a copy is the application's: a
 * range ASan holds to be poisoned (a program's unmapped buffer that ASan's
 * allocator mapped again has redzones) is copied, not reported
 * (test_net_fault) ... */
static void asan_app_side(void)
{
	size_t pg = (size_t)page();
	uint8_t *m = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t buf[64];

	CHILD_CHECK(0, m != MAP_FAILED);
	memset(m, 0x5c, pg);
	ASAN_POISON_MEMORY_REGION(m, pg);
	CHILD_CHECK(1, mem_read(buf, (uintptr_t)m + 8, sizeof(buf)) == 0);
	CHILD_CHECK(2, buf[0] == 0x5c && buf[63] == 0x5c);
	memset(buf, 0x77, sizeof(buf));
	CHILD_CHECK(3, mem_write((uintptr_t)m + 100, buf, sizeof(buf)) == 0);
	ASAN_UNPOISON_MEMORY_REGION(m, pg);
	CHILD_CHECK(4, m[99] == 0x5c && m[100] == 0x77 && m[163] == 0x77 && m[164] == 0x5c);
	munmap(m, pg);
}

static void test_asan_app_side(void **state)
{
	(void)state;
	expect_exit0(in_child(NULL, asan_app_side));
	expect_exit0(in_child("syscall", asan_app_side));
}

/* ... but our own side is still checked: a read into a buffer one byte
 * too small, or a write from one, is an ASan report (the child dies). */
static void asan_own_read(void)
{
	uint8_t app[64] = { 0 };
	uint8_t *own = malloc(16);
	int null = open("/dev/null", O_WRONLY);

	CHILD_CHECK(5, own && null >= 0);
	dup2(null, 2);		/* the report is expected: keep it out of the log */
	mem_read(own, (uintptr_t)app, 17);
	_exit(0);
}

static void asan_own_write(void)
{
	uint8_t app[64] = { 0 };
	uint8_t *own = malloc(16);
	int null = open("/dev/null", O_WRONLY);

	CHILD_CHECK(5, own && null >= 0);
	memset(own, 1, 16);
	dup2(null, 2);
	mem_write((uintptr_t)app, own, 17);
	_exit(0);
}

static void expect_report(int st)
{
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		fail_msg("an overflow of our own buffer went unreported");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 1 + 5)
		fail_msg("child setup failed");
}

static void test_asan_own_side(void **state)
{
	(void)state;
	expect_report(in_child(NULL, asan_own_read));
	expect_report(in_child(NULL, asan_own_write));
	expect_report(in_child("syscall", asan_own_read));
	expect_report(in_child("syscall", asan_own_write));
}
#else
static void test_asan_app_side(void **state)
{
	(void)state;
	skip();		/* ASan builds only */
}

static void test_asan_own_side(void **state)
{
	(void)state;
	skip();
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copies_guard),
		cmocka_unit_test(test_copies_syscall),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_atomics),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_many_threads),
		cmocka_unit_test(test_chained),
		cmocka_unit_test(test_crashes),
		cmocka_unit_test(test_forked),
		cmocka_unit_test(test_at_gen),
		cmocka_unit_test(test_gen_race),
		cmocka_unit_test(test_asan_app_side),
		cmocka_unit_test(test_asan_own_side),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
