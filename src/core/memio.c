/* Copies into and out of application memory that never crash.
 *
 * softrnic never pins (DESIGN.md decision 6), so a registered range may be
 * unmapped or made read-only behind its back. Two ways to copy safely:
 *
 *  - "fault" (the default): memcpy under a guard. A SIGSEGV/SIGBUS taken
 *    while this thread copies for us ends the copy, which fails with
 *    EFAULT (on x86-64 the handler knows the copy by the faulting
 *    instruction's address and resumes after it; elsewhere it jumps back
 *    to a setjmp the thread left in its slot); any other fault goes on to the handler that
 *    was there before ours (or the default action), so the program's own
 *    crashes stay its own. The handler is installed once, at the first
 *    copy. A copy then costs what memcpy costs: the syscall below costs
 *    about a microsecond even for 8 bytes, on every small SEND and twice
 *    per ping-pong round trip.
 *  - "syscall": process_vm_readv/writev on our own pid, which copies
 *    through the kernel's page walk and reports EFAULT. Chosen with
 *    SOFTRNIC_SAFE_COPY=syscall (docs/CONFIG.md), and when the handler
 *    cannot be installed.
 *
 * Where the syscall is refused too (a seccomp profile), plain memcpy: correct
 * for well-behaved programs, and the only choice left.
 */
#include "core/core.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

static int pvm_state;		/* 0 unknown, 1 usable, -1 refused */

/* Under AddressSanitizer (SR_ASAN) the application's side of a copy is
 * not checked: it is memory that may be gone by design, and a range the
 * program unmapped while it was still registered can since have been
 * mapped again, by ASan's own allocator among others, whose redzones ASan
 * would report as an overflow of ours (test_net_fault: the receive buffer
 * of a stream accepted after the munmap lands in the hole). What that
 * memory holds is the application's business, as it is for the kernel's
 * page walk of the syscall copy. Our own side (buf) is still checked, in
 * full, before the copy. Other builds copy with plain memcpy. */
#ifdef SR_ASAN
void __asan_loadN(uintptr_t addr, size_t size);	/* ASan's own range checks */
void __asan_storeN(uintptr_t addr, size_t size);

/* Neither instrumented nor the intercepted memcpy (the interceptor checks
 * both ranges). The barrier keeps the compiler from turning the loop
 * back into a memcpy call. */
__attribute__((no_sanitize("address")))
static void app_copy(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

#if defined(__x86_64__)
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(len) : : "memory");
#else
	for (; len; len--) {
		*d++ = *s++;
		__asm__ volatile("" : : : "memory");
	}
#endif
}
#else
#define app_copy memcpy
#endif

/* Our own memory through the kernel: process_vm_* on ourselves. */
static int pvm_copy(bool write, uintptr_t app, void *buf, size_t len)
{
	int ret = mem_xcopy((pid_t)sr_getpid(), write, app, buf, len);

	if (ret == -EPERM || ret == -ESRCH) {
		pvm_state = -1;		/* refused (seccomp, ENOSYS): never again */
		return -ENOSYS;
	}
	if (!ret)
		pvm_state = 1;
	return ret;
}

/* ---- the fault guard ----------------------------------------------------- */

/* Each thread that copies (elsewhere than on x86-64) or writes through a
 * remembered region owns a slot here from then to its exit (a thread-
 * specific key's destructor frees it): its thread id, and, only while it
 * copies, where to jump. A table, not a __thread
 * variable, for the handler: it must not touch TLS (a dlopen'ed
 * library's TLS may be allocated on first use, and the handler also runs
 * for faults of threads that never copied for us). A copy then claims
 * nothing: it stores a pointer and clears it, which the handler, running
 * on the same thread, reads. More threads than slots copy through the
 * system call. */
#define GUARD_SLOTS 256
static struct {
	_Atomic pid_t tid;
	/* odd while the thread writes through a remembered region
	 * (mem_write_at_gen), which mem_quiesce waits out */
	_Atomic uint32_t pseq;
	sigjmp_buf *jb;
} __attribute__((aligned(64))) guards[GUARD_SLOTS];	/* a line each: threads
							 * store into their own */
_Static_assert(sizeof(guards[0]) == 64, "a guard slot per cache line");
static struct sigaction guard_prev_segv, guard_prev_bus;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static atomic_bool guard_done;	/* guard_install has run (guard_ready) */
static pthread_key_t guard_key;
static bool guard_on;

#if defined(__x86_64__)
/* x86-64: a copy whose fault the handler turns into a return of -EFAULT
 * by where it happened: anywhere in sr_fixup_copy, whose only memory
 * accesses are the copy's own loads and stores, so no setjmp and no table
 * per copy. The handler resumes at sr_fixup_copy_out (a ret: the routine
 * never touches the stack) with eax set. Up to 64 bytes it copies with
 * two or four overlapping moves of the widest size that fits (a
 * message's 8 or 64 bytes, several times a message: `rep movsb` costs
 * 4.5 ns there on AMD Zen, the moves 1.5); beyond that `rep movsb`, as
 * the kernel's own user copies. A fault may leave part of dst written. */
int sr_fixup_copy(void *dst, const void *src, size_t n);
extern const char sr_fixup_copy_end[], sr_fixup_copy_out[];
__asm__(".text\n"
	".p2align 4\n"
	".globl sr_fixup_copy\n"
	".hidden sr_fixup_copy\n"
	".type sr_fixup_copy, @function\n"
	"sr_fixup_copy:\n"
	"	xor %eax, %eax\n"
	"	cmp $16, %rdx\n"
	"	ja 3f\n"
	"	cmp $8, %rdx\n"
	"	jb 1f\n"
	/* 8..16 */
	"	mov (%rsi), %rcx\n"
	"	mov -8(%rsi,%rdx), %r8\n"
	"	mov %rcx, (%rdi)\n"
	"	mov %r8, -8(%rdi,%rdx)\n"
	"	ret\n"
	"1:	cmp $4, %rdx\n"
	"	jb 2f\n"
	/* 4..7 */
	"	mov (%rsi), %ecx\n"
	"	mov -4(%rsi,%rdx), %r8d\n"
	"	mov %ecx, (%rdi)\n"
	"	mov %r8d, -4(%rdi,%rdx)\n"
	"	ret\n"
	/* 0..3: bytes 0, n / 2 and n - 1 */
	"2:	test %rdx, %rdx\n"
	"	jz 9f\n"
	"	mov %rdx, %r9\n"
	"	shr $1, %r9\n"
	"	movzbl (%rsi), %ecx\n"
	"	movzbl (%rsi,%r9), %r10d\n"
	"	movzbl -1(%rsi,%rdx), %r8d\n"
	"	mov %cl, (%rdi)\n"
	"	mov %r10b, (%rdi,%r9)\n"
	"	mov %r8b, -1(%rdi,%rdx)\n"
	"	ret\n"
	"3:	cmp $32, %rdx\n"
	"	ja 4f\n"
	/* 17..32 */
	"	movdqu (%rsi), %xmm0\n"
	"	movdqu -16(%rsi,%rdx), %xmm1\n"
	"	movdqu %xmm0, (%rdi)\n"
	"	movdqu %xmm1, -16(%rdi,%rdx)\n"
	"	ret\n"
	"4:	cmp $64, %rdx\n"
	"	ja 5f\n"
	/* 33..64 */
	"	movdqu (%rsi), %xmm0\n"
	"	movdqu 16(%rsi), %xmm1\n"
	"	movdqu -32(%rsi,%rdx), %xmm2\n"
	"	movdqu -16(%rsi,%rdx), %xmm3\n"
	"	movdqu %xmm0, (%rdi)\n"
	"	movdqu %xmm1, 16(%rdi)\n"
	"	movdqu %xmm2, -32(%rdi,%rdx)\n"
	"	movdqu %xmm3, -16(%rdi,%rdx)\n"
	"	ret\n"
	"5:	mov %rdx, %rcx\n"
	"	rep movsb\n"
	".globl sr_fixup_copy_out\n"
	".hidden sr_fixup_copy_out\n"
	"sr_fixup_copy_out:\n"
	"9:	ret\n"
	".globl sr_fixup_copy_end\n"
	".hidden sr_fixup_copy_end\n"
	"sr_fixup_copy_end:\n"
	".size sr_fixup_copy, .-sr_fixup_copy\n");

static bool fixup(void *uc)
{
	ucontext_t *u = uc;
	uintptr_t ip;

	if (!u)
		return false;
	ip = (uintptr_t)u->uc_mcontext.gregs[REG_RIP];
	if (ip < (uintptr_t)sr_fixup_copy || ip >= (uintptr_t)sr_fixup_copy_end)
		return false;
	u->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)sr_fixup_copy_out;
	u->uc_mcontext.gregs[REG_RAX] = -EFAULT;
	return true;
}
#endif

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *prev = sig == SIGBUS ? &guard_prev_bus : &guard_prev_segv;
	pid_t tid = gettid();

#if defined(__x86_64__)
	if (fixup(uc))
		return;
#endif
	for (int i = 0; i < GUARD_SLOTS; i++) {
		if (atomic_load_explicit(&guards[i].tid, memory_order_relaxed) == tid &&
		    guards[i].jb) {
			sigjmp_buf *jb = guards[i].jb;

			guards[i].jb = NULL;
			siglongjmp(*jb, 1);
		}
	}
	/* Not ours: what would have happened without us. */
	if (prev->sa_flags & SA_SIGINFO) {
		if (prev->sa_sigaction)
			prev->sa_sigaction(sig, si, uc);
		return;
	}
	if (prev->sa_handler == SIG_DFL || prev->sa_handler == SIG_IGN) {
		/* the faulting instruction runs again and takes the default */
		signal(sig, SIG_DFL);
		return;
	}
	prev->sa_handler(sig);
}

/* A thread that owned a slot ends. */
static void guard_release(void *v)
{
	int slot = (int)(uintptr_t)v - 1;

	guards[slot].jb = NULL;
	atomic_store_explicit(&guards[slot].tid, 0, memory_order_release);
}

/* The writers' half of the Dekker with mem_quiesce (mem_write_at_gen)
 * would cost a full fence per received message. With membarrier (Linux
 * 4.14; lock.c registers it as the library loads) the rare half makes
 * every thread of the process fence instead (once per deregistration),
 * and a writer only keeps the compiler from reordering: a writer that
 * looked at the generation before the quiescer's barrier had its "I
 * write" made visible by it, and one that looks after sees the new
 * generation. */

/* In a forked child only the forking thread is left, under another
 * thread id than the one its slot names: every slot is free again. */
static void guard_child(void)
{
	memset(guards, 0, sizeof(guards));
	pthread_setspecific(guard_key, NULL);
}

static void guard_install(void)
{
	const char *mode = getenv("SOFTRNIC_SAFE_COPY");
	struct sigaction sa;

	if (mode && !strcmp(mode, "syscall"))
		return;
	if (pthread_key_create(&guard_key, guard_release))
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_handler;
	/* NODEFER: the jump out leaves the signal mask as it was, so
	 * sigsetjmp need not save it (no syscall per copy). */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &guard_prev_segv))
		return;
	if (sigaction(SIGBUS, &sa, &guard_prev_bus)) {
		sigaction(SIGSEGV, &guard_prev_segv, NULL);
		return;
	}
	pthread_atfork(NULL, NULL, guard_child);
	guard_on = true;
}

static void guard_install_once(void)
{
	guard_install();
	atomic_store_explicit(&guard_done, true, memory_order_release);
}

/* The guard installed (or found impossible: guard_on says which): a
 * load, not pthread_once's call, once it has been (two a message). */
static inline void guard_ready(void)
{
	if (!atomic_load_explicit(&guard_done, memory_order_acquire))
		pthread_once(&guard_once, guard_install_once);
}

/* This thread's slot, claimed at its first copy; -1 if none is free.
 * (Kept as the key's value, not in a __thread variable: a shared
 * library's TLS costs a __tls_get_addr call per look.) */
__attribute__((noinline)) static int guard_slot(void)
{
	void *v = pthread_getspecific(guard_key);
	pid_t tid;

	if (v)
		return (int)(uintptr_t)v - 1;
	tid = gettid();
	for (int i = 0; i < GUARD_SLOTS; i++) {
		int k = (int)(((unsigned int)tid + (unsigned int)i) % GUARD_SLOTS);
		pid_t none = 0;

		if (atomic_compare_exchange_strong(&guards[k].tid, &none, tid)) {
			if (pthread_setspecific(guard_key, (void *)(uintptr_t)(k + 1))) {
				atomic_store(&guards[k].tid, 0);
				return -1;
			}
			return k;
		}
	}
	return -1;
}

/* memcpy, or -EFAULT if a page of either side is missing or protected;
 * -EAGAIN (not on x86-64) if this thread has no guard slot (the caller
 * copies another way). */
static int guarded_copy(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	return sr_fixup_copy(dst, src, len);
#else
	sigjmp_buf jb;
	int slot = guard_slot();

	if (slot < 0)
		return -EAGAIN;
	if (sigsetjmp(jb, 0))
		return -EFAULT;		/* the handler cleared jb */
	guards[slot].jb = &jb;
	atomic_signal_fence(memory_order_seq_cst);
	app_copy(dst, src, len);
	atomic_signal_fence(memory_order_seq_cst);
	guards[slot].jb = NULL;
	return 0;
#endif
}

int mem_write_at_gen(uintptr_t dst, const void *src, size_t len, uint64_t gen)
{
	int slot, ret;
	uint32_t seq;

	guard_ready();
	if (!guard_on || (slot = guard_slot()) < 0)
		return -EAGAIN;
#ifdef SR_ASAN
	__asan_loadN((uintptr_t)src, len);
#endif
	/* Dekker with mem_quiesce: we say we write, then look at the
	 * generation; it moves the generation, then looks at us. */
	seq = atomic_load_explicit(&guards[slot].pseq, memory_order_relaxed);
	atomic_store_explicit(&guards[slot].pseq, seq + 1, memory_order_relaxed);
	if (sr_membar_ready())
		atomic_signal_fence(memory_order_seq_cst);	/* (membarrier) */
	else
		atomic_thread_fence(memory_order_seq_cst);
	if (mr_gen() != gen)
		ret = -EAGAIN;
	else
		ret = guarded_copy((void *)dst, src, len);
	atomic_store_explicit(&guards[slot].pseq, seq + 2, memory_order_release);
	return ret;
}

void mem_quiesce(void)
{
	/* (every slot, installed or not: a few microseconds, once per
	 * deregistration) */
	atomic_thread_fence(memory_order_seq_cst);
	if (sr_membar_ready() && sr_membar_all()) {
		/* (registered, it does not fail; should it, writers that did
		 * not fence are done within microseconds: wait that out) */
		usleep(1000);
	}
	for (int i = 0; i < GUARD_SLOTS; i++) {
		uint32_t seq = atomic_load_explicit(&guards[i].pseq, memory_order_acquire);

		if (!(seq & 1))
			continue;
		/* (a write of at most a receive's size, or a fault) */
		while (atomic_load_explicit(&guards[i].pseq, memory_order_acquire) == seq)
			sched_yield();
	}
}

static int safe_copy(bool write, uintptr_t app, void *buf, size_t len)
{
	if (!len)
		return 0;
#ifdef SR_ASAN
	if (write)
		__asan_loadN((uintptr_t)buf, len);
	else
		__asan_storeN((uintptr_t)buf, len);
#endif
	guard_ready();
	if (guard_on) {
		int ret = write ? guarded_copy((void *)app, buf, len)
				: guarded_copy(buf, (const void *)app, len);

		if (ret != -EAGAIN)
			return ret;
	}
	if (pvm_state >= 0) {
		int ret = pvm_copy(write, app, buf, len);

		if (ret != -ENOSYS)
			return ret;
	}
	if (write)
		app_copy((void *)app, buf, len);
	else
		app_copy(buf, (const void *)app, len);
	return 0;
}

int mem_read(void *dst, uintptr_t src, size_t len)
{
	return safe_copy(false, src, dst, len);
}

int mem_write(uintptr_t dst, const void *src, size_t len)
{
	return safe_copy(true, dst, (void *)src, len);
}

/* Atomics are atomic with respect to other softrnic atomics (IBV_ATOMIC_HCA):
 * one process-wide lock orders them, and the safe copies keep a bad
 * address from crashing us. */
static pthread_mutex_t atomic_lock = PTHREAD_MUTEX_INITIALIZER;

int mem_atomic(uintptr_t addr, int op, uint64_t cmp_or_add, uint64_t swap, uint64_t *orig)
{
	uint64_t v, nv;
	int ret;

	pthread_mutex_lock(&atomic_lock);
	ret = mem_read(&v, addr, sizeof(v));
	if (ret)
		goto out;
	*orig = v;
	if (op == SR_ATOMIC_CMP_SWP) {
		if (v != cmp_or_add)
			goto out;
		nv = swap;
	} else if (op == SR_ATOMIC_WRITE) {
		nv = swap;
	} else {
		nv = v + cmp_or_add;
	}
	ret = mem_write(addr, &nv, sizeof(nv));
out:
	pthread_mutex_unlock(&atomic_lock);
	return ret;
}

/* ---- another process's memory (decision 22) ------------------------------ */

/* (pvm_copy uses it on ourselves) */
int mem_xcopy(pid_t pid, bool write, uintptr_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)addr, .iov_len = len };

	while (len) {
		ssize_t n = write ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
				  : process_vm_readv(pid, &local, 1, &remote, 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EPERM || errno == EACCES)
				return -EPERM;
			if (errno == ESRCH || errno == ENOSYS)
				return -ESRCH;
			return -EFAULT;
		}
		if (n == 0)
			return -EFAULT;		/* partial: next page is bad */
		len -= (size_t)n;
		local.iov_base = (char *)local.iov_base + n;
		local.iov_len = len;
		remote.iov_base = (char *)remote.iov_base + n;
		remote.iov_len = len;
	}
	return 0;
}

int mref_read(const struct sr_mref *r, void *dst, size_t len)
{
	if (r->xmr)
		return xspace_copy(r->xmr, false, r->addr, dst, len);
	return mem_read(dst, r->addr, len);
}

int mref_write(const struct sr_mref *r, const void *src, size_t len)
{
	if (r->xmr)
		return xspace_copy(r->xmr, true, r->addr, (void *)src, len);
	return mem_write(r->addr, src, len);
}
