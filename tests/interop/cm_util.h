/* Small helpers shared by the interop programs in tests/interop/. They
 * are written against rdma-core's public <rdma/rdma_cma.h> only, so the
 * same binary runs on the host through `softrnic run` and in the siw-vm
 * guest against Debian's librdmacm and the kernel's siw. Every wait is
 * bounded: a program that gets no answer exits 2 instead of hanging. */
#ifndef SOFTRNIC_INTEROP_CM_UTIL_H
#define SOFTRNIC_INTEROP_CM_UTIL_H

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#define IO_TIMEOUT_MS 30000

#define die(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

/* The next CM event, or exit 2 after IO_TIMEOUT_MS. */
static inline struct rdma_cm_event *cm_next(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, IO_TIMEOUT_MS) != 1) {
		fprintf(stderr, "timeout waiting for a CM event\n");
		exit(2);
	}
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

/* Wait for one event of type want; anything else is fatal. */
static inline struct rdma_cm_event *cm_expect(struct rdma_event_channel *ch,
					      enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = cm_next(ch);

	if (ev->event != want)
		die("expected %s, got %s (status %d)", rdma_event_str(want),
		    rdma_event_str(ev->event), ev->status);
	return ev;
}

static inline struct addrinfo *cm_addr(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM },
			*ai;
	int r = getaddrinfo(host, port, &hints, &ai);

	if (r)
		die("getaddrinfo %s:%s: %s", host, port, gai_strerror(r));
	return ai;
}

/* Print private data as text (it is text in these tests) for the log. */
static inline void pd_print(const char *tag, const void *pd, size_t len)
{
	const char *s = pd;
	size_t n = len;

	while (n && s[n - 1] == '\0')
		n--;
	printf("%s len=%zu data=\"%.*s\"\n", tag, len, (int)n, s ? s : "");
	fflush(stdout);
}

/* 1 if the private data starts with the NUL-terminated string want.
 * (Transports may pad private data: IB pads it to a fixed size.) */
static inline int pd_starts(const void *pd, size_t len, const char *want)
{
	size_t n = strlen(want) + 1;

	return pd && len >= n && !memcmp(pd, want, n);
}

#endif
