/* Small helpers shared by every layer: intrusive lists, logging, checks. */
#ifndef SOFTRNIC_UTIL_H
#define SOFTRNIC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define SR_EXPORT __attribute__((visibility("default")))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define sr_min(a, b) ((a) < (b) ? (a) : (b))
#define sr_max(a, b) ((a) > (b) ? (a) : (b))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Built with AddressSanitizer (gcc says so with __SANITIZE_ADDRESS__,
 * clang with __has_feature). Copies and socket I/O on the application's
 * registered memory then bypass ASan's checks of that memory, which may
 * be gone or reused by design (src/core/memio.c says why). */
#if defined(__SANITIZE_ADDRESS__)
#define SR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SR_ASAN 1
#endif
#endif

/* Doubly linked intrusive list, circular with a sentinel head. */
struct sr_list {
	struct sr_list *next, *prev;
};

static inline void sr_list_init(struct sr_list *h) { h->next = h->prev = h; }
static inline bool sr_list_empty(const struct sr_list *h) { return h->next == h; }
static inline void sr_list_add_tail(struct sr_list *h, struct sr_list *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}
static inline void sr_list_del(struct sr_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}
#define sr_list_for_each_safe(pos, tmp, head) \
	for (pos = (head)->next, tmp = pos->next; pos != (head); pos = tmp, tmp = pos->next)

/* Logging to stderr: SOFTRNIC_DEBUG=0..3 (errors, warnings, info, debug). */
enum sr_log_level { SR_LOG_ERR = 0, SR_LOG_WARN = 1, SR_LOG_INFO = 2, SR_LOG_DBG = 3 };
extern int sr_log_level;
void sr_log_init(void);
void sr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define sr_dbg(...)  do { if (unlikely(sr_log_level >= SR_LOG_DBG)) sr_log(SR_LOG_DBG, __VA_ARGS__); } while (0)
#define sr_info(...) do { if (sr_log_level >= SR_LOG_INFO) sr_log(SR_LOG_INFO, __VA_ARGS__); } while (0)
#define sr_warn(...) do { if (sr_log_level >= SR_LOG_WARN) sr_log(SR_LOG_WARN, __VA_ARGS__); } while (0)

/* A size knob (SOFTRNIC_DM_SIZE, SOFTRNIC_SHM_MAP_MIN): bytes, with an
 * optional K, M or G suffix. 1: set and valid (*out), 0: unset or empty,
 * -1: set but not a size of at most max (the caller warns and keeps its
 * default). */
int sr_env_size(const char *name, uint64_t max, uint64_t *out);

/* Random 32-bit value from the kernel's CSPRNG (getrandom), for keys. */
uint32_t sr_random32(void);

/* getpid() without a system call: cached, and refreshed in a forked
 * child (pthread_atfork), so hot paths can tell a child from its parent. */
int sr_getpid(void);

#endif
