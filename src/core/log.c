/* Logging and small utilities. */
#include "core/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

int sr_log_level = SR_LOG_ERR;

void sr_log_init(void)
{
	const char *v = getenv("SOFTRNIC_DEBUG");

	if (!v || !*v)
		return;
	sr_log_level = atoi(v);
	if (sr_log_level <= 0)
		sr_log_level = (v[0] == '0') ? SR_LOG_ERR : SR_LOG_DBG;
}

void sr_log(int level, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char buf[512];
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "softrnic[%d] %s: ", (int)getpid(),
		     names[level < 0 ? 0 : level > 3 ? 3 : level]);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
}

static int sr_pid;

static void sr_pid_refresh(void)
{
	sr_pid = (int)getpid();
}

__attribute__((constructor)) static void sr_pid_init(void)
{
	sr_pid_refresh();
	pthread_atfork(NULL, NULL, sr_pid_refresh);
}

int sr_getpid(void)
{
	return sr_pid;
}

uint32_t sr_random32(void)
{
	uint32_t v;

	while (getrandom(&v, sizeof(v), 0) != sizeof(v))
		;
	return v;
}

int sr_env_size(const char *name, uint64_t max, uint64_t *out)
{
	const char *v = getenv(name);
	unsigned long long n;
	unsigned int shift = 0;
	char *end;

	if (!v || !*v)
		return 0;
	if (*v == '-')
		return -1;
	errno = 0;
	n = strtoull(v, &end, 0);
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || end == v || errno || n > (max >> shift))
		return -1;
	*out = (uint64_t)n << shift;
	return 1;
}
