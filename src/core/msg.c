#include "core/msg.h"
#include "core/core.h"
#include "chan/chan.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *const sr_msg_op_name[SR_MSG_OP_MAX] = {
	[SR_MSG_WRITE] = "WRITE",
	[SR_MSG_READ_REQ] = "READ_REQ",
	[SR_MSG_READ_RESP] = "READ_RESP",
	[SR_MSG_SEND] = "SEND",
	[SR_MSG_TERMINATE] = "TERMINATE",
	[SR_MSG_ATOMIC_REQ] = "ATOMIC_REQ",
	[SR_MSG_ATOMIC_RESP] = "ATOMIC_RESP",
	[SR_MSG_ACK] = "ACK",
	[SR_MSG_IMM] = "IMM",
	[SR_MSG_RNR] = "RNR",
	[SR_MSG_XRC] = "XRC",
	[SR_MSG_ATOMIC_WRITE] = "ATOMIC_WRITE",
};

/* Steady-state traffic allocates and frees a message (and, for a SEND
 * placed directly, a copy of its receive WQE) per request: a small cache
 * per thread keeps those off malloc. Blocks of three fixed sizes, a bounded
 * free list of each; a thread's list is freed when it exits (key
 * destructor) and the exiting thread's at unload. A block may be freed by
 * another thread than the one that took it: it joins that thread's list.
 * Under AddressSanitizer there is no cache, so use after free is caught. */
#define MSG_SMALL 256		/* payload bytes of a cached message: the
				 * small SENDs a receive stages whole
				 * (tcp_rx.c) and small WRITEs */
#define MSG_BIG SR_SMALL_MAX	/* ... of the other size: a same-host
				 * small record's (up to 4 KiB), which a
				 * stream of them allocates per message
				 * (malloc and free of 4 KiB cost a tenth
				 * of ib_send_bw's 4 KiB rate) */
#define MC_MAX 64		/* blocks kept per size, per thread */
#define MC_RWQE_SIZE (sizeof(struct sr_rwqe) + SR_MAX_SGE * sizeof(struct ibv_sge))

enum { MC_MSG, MC_BIG, MC_RWQE, MC_N };

#ifndef SR_ASAN
struct mc_blk { struct mc_blk *next; };

static const size_t mc_size[MC_N] = {
	[MC_MSG] = sizeof(struct sr_msg) + MSG_SMALL,
	[MC_BIG] = sizeof(struct sr_msg) + MSG_BIG,
	[MC_RWQE] = MC_RWQE_SIZE,
};

/* The default TLS model, not initial-exec: the library is also
 * dlopen'ed (Python's pyverbs imports it), and glibc's static TLS surplus
 * may be gone by then ("cannot allocate memory in static TLS block",
 * which the pyverbs suite hit). */
static __thread struct msg_cache {
	struct mc_blk *head[MC_N];
	uint32_t n[MC_N];
	bool reg, dead;
} mc;

static pthread_key_t mc_key;
static pthread_once_t mc_once = PTHREAD_ONCE_INIT;
static atomic_bool mc_key_ok;

static void mc_drain(struct msg_cache *c)
{
	for (int i = 0; i < MC_N; i++) {
		while (c->head[i]) {
			struct mc_blk *b = c->head[i];

			c->head[i] = b->next;
			free(b);
		}
		c->n[i] = 0;
	}
}

/* Thread exit: free the list, and cache nothing more in this thread. */
static void mc_thread_exit(void *arg)
{
	struct msg_cache *c = arg;

	c->dead = true;
	mc_drain(c);
}

static void mc_key_init(void)
{
	mc_key_ok = pthread_key_create(&mc_key, mc_thread_exit) == 0;
}

__attribute__((destructor)) static void mc_fini(void)
{
	mc.dead = true;
	mc_drain(&mc);
	if (mc_key_ok) {
		mc_key_ok = false;
		pthread_key_delete(mc_key);
	}
}

static inline void *mc_get(int cls)
{
	struct mc_blk *b = mc.head[cls];

	if (likely(b)) {
		mc.head[cls] = b->next;
		mc.n[cls]--;
		return b;
	}
	return malloc(mc_size[cls]);
}

static inline void mc_put(int cls, void *p)
{
	struct mc_blk *b = p;

	if (unlikely(!mc.reg)) {
		if (mc.dead)
			goto out;
		pthread_once(&mc_once, mc_key_init);
		if (!mc_key_ok || pthread_setspecific(mc_key, &mc) != 0) {
			mc.dead = true;
			goto out;
		}
		mc.reg = true;
	}
	if (unlikely(mc.dead || mc.n[cls] >= MC_MAX))
		goto out;
	b->next = mc.head[cls];
	mc.head[cls] = b;
	mc.n[cls]++;
	return;
out:
	free(p);
}
#endif

struct sr_msg *msg_alloc(uint32_t payload_len)
{
	struct sr_msg *m;
	uint8_t small = 0;	/* (1 + the cache class it came from) */

#ifndef SR_ASAN
	if (payload_len <= MSG_SMALL) {
		m = mc_get(MC_MSG);
		small = 1 + MC_MSG;
	} else if (payload_len <= MSG_BIG) {
		m = mc_get(MC_BIG);
		small = 1 + MC_BIG;
	} else
#endif
		m = malloc(sizeof(*m) + payload_len);
	if (!m)
		return NULL;
	memset(m, 0, sizeof(*m));
	sr_list_init(&m->link);
	m->len = payload_len;
	m->small = small;
	return m;
}

struct sr_msg *msg_grow(struct sr_msg *m, uint32_t len)
{
#ifndef SR_ASAN
	/* A cached block must keep its size: realloc could shrink it (an
	 * assembling message starts empty), and the cache would hand it out
	 * again for its class's bytes. */
	if (m->small) {
		int cls = m->small - 1;
		struct sr_msg *nm;

		if (len <= (cls == MC_MSG ? MSG_SMALL : MSG_BIG))
			return m;
		nm = malloc(sizeof(*nm) + len);
		if (!nm)
			return NULL;
		memcpy(nm, m, sizeof(*m) + m->len);
		nm->small = 0;
		mc_put(cls, m);
		return nm;
	}
#endif
	return realloc(m, sizeof(*m) + len);
}

struct sr_rwqe *msg_rwqe_alloc(size_t size)
{
	if (size > MC_RWQE_SIZE)
		return NULL;
#ifndef SR_ASAN
	return mc_get(MC_RWQE);
#else
	return malloc(size);
#endif
}

void msg_free(struct sr_msg *m)
{
	if (!m)
		return;
	if (m->src) {
		for (int i = 0; i < m->src->n; i++)
			if (m->src->refs[i].users)
				atomic_fetch_sub((atomic_int *)m->src->refs[i].users, 1);
		free(m->src);
	}
#ifndef SR_ASAN
	if (m->rwqe)
		mc_put(MC_RWQE, m->rwqe);
	if (m->small) {
		mc_put(m->small - 1, m);
		return;
	}
#else
	free(m->rwqe);
#endif
	free(m);
}
