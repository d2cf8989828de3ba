/* Copies into and out of application memory that never crash.
 *
 * softrnic never pins (DESIGN.md decision 6), so a registered range may be
 * unmapped or made read-only behind its back. process_vm_readv/writev on
 * our own pid copies through the kernel's page walk and reports EFAULT for
 * such pages instead of delivering SIGSEGV, at memcpy speed for large
 * copies. Where the syscall is refused (a seccomp profile), fall back to
 * plain memcpy: correct for well-behaved programs, and the only choice.
 */
#include "core/core.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int pvm_state;		/* 0 unknown, 1 usable, -1 refused */
/* Below this size the syscall costs more than it protects against for
 * addresses we have just validated as mapped once; but we cannot know the
 * mapping is still there, so copy through the kernel at every size. */

static int pvm_copy(bool write, uintptr_t app, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)app, .iov_len = len };
	pid_t self = (pid_t)sr_getpid();

	while (len) {
		ssize_t n = write ? process_vm_writev(self, &local, 1, &remote, 1, 0)
				  : process_vm_readv(self, &local, 1, &remote, 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOSYS || errno == EPERM) {
				pvm_state = -1;
				return -ENOSYS;
			}
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
	pvm_state = 1;
	return 0;
}

int mem_read(void *dst, uintptr_t src, size_t len)
{
	if (!len)
		return 0;
	if (pvm_state >= 0) {
		int ret = pvm_copy(false, src, dst, len);

		if (ret != -ENOSYS)
			return ret;
	}
	memcpy(dst, (const void *)src, len);
	return 0;
}

int mem_write(uintptr_t dst, const void *src, size_t len)
{
	if (!len)
		return 0;
	if (pvm_state >= 0) {
		int ret = pvm_copy(true, dst, (void *)src, len);

		if (ret != -ENOSYS)
			return ret;
	}
	memcpy((void *)dst, src, len);
	return 0;
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
	} else {
		nv = v + cmp_or_add;
	}
	ret = mem_write(addr, &nv, sizeof(nv));
out:
	pthread_mutex_unlock(&atomic_lock);
	return ret;
}
