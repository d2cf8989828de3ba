/* The soft RNIC core: device, context, PD, MR/MW key table, CQ, SRQ, QP.
 *
 * Transport-agnostic: it produces and consumes sr_msg (msg.h) through a
 * channel (chan/chan.h). Objects embed the rdma-core base struct first and
 * convert with to_*() helpers. Inside the core, functions return 0 or a
 * negative errno; the verbs layer turns that into each man page's
 * convention.
 */
#ifndef SOFTRNIC_CORE_H
#define SOFTRNIC_CORE_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/types.h>

#include "core/util.h"
#include "core/evq.h"
#include "core/lock.h"

/* ---- device limits (reported by ibv_query_device and enforced) ---------- */
#define SR_MAX_QP	254	/* QPN slots 1..254 per context; see DESIGN 4 */
#define SR_QP_SLOT_NONE	255	/* never a slot: no QPN is ever 0xFFFFFF,
				 * the multicast QPN (DESIGN 4) */
#define SR_MAX_QP_WR	16384
#define SR_MAX_SGE	32
#define SR_MAX_CQ	65536
#define SR_MAX_CQE	(1 << 20)
#define SR_MAX_MR	(1 << 20)
#define SR_MAX_MR_SIZE	UINT64_MAX
#define SR_MAX_PD	65536
#define SR_MAX_RD_ATOM	128
#define SR_MAX_SRQ	4096
#define SR_MAX_SRQ_WR	16384
#define SR_MAX_MW	(1 << 20)
#define SR_MAX_AH	65536
#define SR_MAX_INLINE	4096
#define SR_MIN_INLINE	64	/* a QP's inline room at least (qp.c) */
#define SR_MAX_MSG	(1U << 31)	/* max_msg_sz: 2 GiB */
#define SR_GID_TBL_LEN	32
#define SR_VENDOR_ID	0x736f66	/* "sof": no IEEE OUI of ours */
#define SR_VENDOR_PART	0x5352		/* "SR" */
#define SR_FW_VER	"0.1.0"

struct sr_cq;
struct sr_qp;
struct sr_srq;
struct sr_mr;
struct sr_pd;
struct sr_chan;
struct sr_tcp_ctx;

/* ---- device ------------------------------------------------------------- */
struct sr_device {
	struct ibv_device ibdev;	/* 664 bytes */
	/* Offset 664 is where rdma-core's verbs_device keeps its ops pointer;
	 * libefa/libmlx5 compare it with their own (ABI.md §2). Ours is a
	 * pointer to something they cannot own. */
	const void *ops;
	uint8_t pad[64];
	uint64_t guid;
};

/* One GID table entry, built from the host's addresses at query time. */
struct sr_gid {
	union ibv_gid gid;
	int family;			/* AF_INET or AF_INET6 */
	unsigned int ifindex;
	char ifname[32];
};

int dev_query_gids(struct sr_gid *tbl, int max);
struct sr_device *dev_get(void);
void dev_fill_attr(struct ibv_device_attr *a);
void dev_fill_port_attr(struct ibv_port_attr *a);
bool dev_iwarp(void);

/* ---- key table (MR and MW keys, PD handles), per object space ----------- */
enum sr_key_kind { SR_KEY_MR = 1, SR_KEY_MW = 2, SR_KEY_PD = 3 };

struct sr_keyent {
	uint32_t key;
	int kind;
	void *obj;
};

struct sr_keytab {
	pthread_rwlock_t lock;
	struct sr_keyent *slots;	/* open addressing, power of two */
	uint32_t size, used, tombs;
};

int keytab_init(struct sr_keytab *t);
void keytab_destroy(struct sr_keytab *t);
/* Draw a fresh random key (never 0, never in use) and map it to obj. */
int keytab_insert_random(struct sr_keytab *t, int kind, void *obj, uint32_t *key);
/* Map a chosen key (MW type 2 rebinding); -EEXIST if taken. */
int keytab_insert(struct sr_keytab *t, uint32_t key, int kind, void *obj);
int keytab_remove(struct sr_keytab *t, uint32_t key);
/* Caller holds t->lock for writing. */
int keytab_remove_locked(struct sr_keytab *t, uint32_t key);
/* Caller holds t->lock (read or write). Returns NULL if absent. */
struct sr_keyent *keytab_find_locked(struct sr_keytab *t, uint32_t key);

/* ---- object space (core/space.c) ---------------------------------------- */
/* What a kernel device file is to rdma-core: the space that PD handles and
 * MR keys live in, named by every cmd_fd of the contexts that share it.
 * ibv_open_device makes one; ibv_import_device(cmd_fd) opens a second
 * context on the same one (ibv_import_device(3)), so PDs and MRs can be
 * imported into it by handle. Holders (struct ibv_pd/ibv_mr) of an object
 * that was ever imported are freed with the space, not before: a QP may
 * still name a PD whose ibv_pd the program unimported, and a program may
 * destroy an object through one holder and unimport the others. */
struct sr_space {
	atomic_int refs;		/* contexts that share it */
	struct sr_keytab keys;		/* MR/MW keys and PD handles */
	dev_t fd_dev;			/* identity of the memfd every */
	ino_t fd_ino;			/* ... cmd_fd of it refers to */
	pid_t owner;			/* the process whose memory it maps */
	struct sr_list link;		/* in the process-wide list */
	pthread_mutex_t lock;		/* the graveyard lists, pub */
	struct sr_list grave_pd, grave_mr;
	atomic_int nmr, nmw;
	/* The memfd mapped (xspace.c): the owner publishes its PDs and MRs
	 * there for importers in other processes; NULL if it cannot. */
	struct xsp_map *pub;
	pid_t xpid;			/* a proxy: the exporter's pid; else 0 */
	int pidfd;			/* a proxy: the exporter, or -1 */
};

/* A new space and its cmd_fd (a memfd carrying a header, who owns it, and
 * the table of its PDs and MRs for importers in other processes). */
int space_create(struct sr_space **out, int *cmd_fd);
/* The space a cmd_fd (or a dup of it) names, with a reference taken; for
 * another process's context, a proxy of it (xspace.c). -EBADF not a
 * descriptor, -EPERM no ptrace rights over its owner, -EOPNOTSUPP an
 * owner that could not publish, -ENODEV a context that is gone, -EINVAL
 * anything else. */
int space_find_fd(int fd, struct sr_space **out);
void space_get(struct sr_space *s);
void space_put(struct sr_space *s);

/* ---- spaces across processes (xspace.c) ------------------------------- */
struct xsp_map;
/* Exporter: a memfd for a new space, header written, sized and sealed. */
int xspace_fd_create(void);
/* Exporter: map the memfd's table (after its header is written). */
void xspace_map_owner(struct sr_space *s, int fd);
/* Exporter: publish or withdraw a PD handle or MR key (mr NULL for a
 * PD). Withdrawing waits for importers' copies from the region. */
void xspace_pub(struct sr_space *s, uint32_t key, const struct sr_pd *pd,
		const struct sr_mr *mr);
void xspace_unpub(struct sr_space *s, uint32_t key);
/* Exporter: its last context closed; importers' accesses fail. */
void xspace_unmap(struct sr_space *s, bool owner);
/* Importer: the header of a softrnic memfd from another process. */
int xspace_fd_header(int fd, pid_t *pid);
/* Importer: a proxy space for another process's memfd (list lock held). */
int xspace_proxy(int fd, pid_t pid, struct sr_space *s);
/* Importer: make sure the proxy holds the PD / MR the exporter published
 * under handle (-EINVAL unknown, -EPERM no ptrace right, -ENODEV gone). */
int xspace_import_pd(struct sr_space *s, uint32_t handle);
int xspace_import_mr(struct sr_space *s, uint32_t handle);
/* Importer: is the region still the one imported? */
bool xspace_mr_live(const struct sr_mr *mr);
/* Importer: copy to or from the exporter's region, checked live. */
int xspace_copy(const struct sr_mr *mr, bool write, uintptr_t addr, void *buf, size_t len);

/* ---- context ------------------------------------------------------------ */
struct sr_context {
	struct verbs_context vctx;	/* ibv_context is its last member */
	pthread_mutex_t lock;
	struct sr_space *space;		/* PDs and MRs; shared by imports */
	int cmd_fd;			/* names the space; owned */
	struct sr_qp *qps[256];		/* by QPN slot */
	uint32_t qp_last;		/* slot handed out last (ctx->lock) */
	uint16_t port;			/* QPN prefix: the context's TCP port */
	int listen_fd;
	/* The UDP twin of listen_fd's port, bound when the context opens so
	 * that its UD QPNs are ours too; chan_udp_open takes it (-1 then). */
	int udp_fd, udp_family;
	struct sr_evq async;
	pid_t owner;			/* pid that opened it (fork safety) */
	struct sr_list link;		/* in the process-wide context list */
	atomic_int npd, ncq, nqp, nsrq, nah;	/* MRs, MWs: per space */
	struct sr_tcp_ctx *tcp;		/* TCP channel state, lazily (chan/tcp.c) */
	struct sr_udp_ctx *udp;		/* UD: UDP socket, lazily (chan/udp.c) */
	atomic_uint_fast64_t mr_bytes;
};

static inline struct sr_context *to_ctx(struct ibv_context *c)
{
	return container_of(c, struct sr_context, vctx.context);
}

int ctx_open(struct sr_device *dev, struct sr_context **out);
/* ibv_import_device(3): a new context on the space cmd_fd names; the
 * context owns cmd_fd from then on (closed by ctx_close). */
int ctx_import(struct sr_device *dev, int cmd_fd, struct sr_context **out);
void ctx_close(struct sr_context *ctx);
/* Look up a QP by number in any context of this process; takes a ref. */
struct sr_qp *ctx_find_qp(uint32_t qpn);
void ctx_async_event(struct sr_context *ctx, void *obj, enum ibv_event_type t);

/* ---- PD, parent domain, TD, MR, MW, AH ----------------------------------- */
/* A thread domain (ibv_alloc_td(3)): a promise that the objects under it
 * are used by one thread at a time. A hint here: every object keeps its
 * locks (the man page allows it: objects stay thread safe regardless). */
struct sr_td {
	struct ibv_td ibtd;
	atomic_int refs;		/* parent domains that use it */
};
static inline struct sr_td *to_td(struct ibv_td *t) { return (struct sr_td *)t; }

typedef void *(*sr_pd_alloc_fn)(struct ibv_pd *pd, void *pd_context, size_t size,
				size_t alignment, uint64_t resource_type);
typedef void (*sr_pd_free_fn)(struct ibv_pd *pd, void *pd_context, void *ptr,
			      uint64_t resource_type);

/* An ibv_pd holder, or a parent domain (ibv_alloc_parent_domain(3)).
 *
 * Holders: the PD object is the holder ibv_alloc_pd returned (obj ==
 * itself); ibv_import_pd makes more holders naming it. Its handle is a
 * key of kind SR_KEY_PD in the space's table.
 *
 * A parent domain is an object of its own (obj == itself) that stands for
 * its PD (prot, a holder) everywhere, adds an optional TD, and may route
 * the queue buffers of the QPs, SRQs and CQs made on it through the
 * application's allocator. */
struct sr_pd {
	struct ibv_pd ibpd;
	struct sr_pd *obj;		/* the PD this holder names */
	struct sr_space *space;
	atomic_int refs;		/* on obj: objects that use the PD,
					 * through any holder */
	atomic_bool shared;		/* on obj: imported at least once */
	bool dead;			/* on obj: deallocated */
	bool buried;			/* holder: on the space's graveyard */
	struct sr_list grave;
	struct sr_pd *prot;		/* parent domain: its PD; else NULL */
	struct sr_td *td;		/* parent domain: its TD, or NULL */
	sr_pd_alloc_fn alloc;		/* parent domain allocators, or NULL */
	sr_pd_free_fn free;
	void *pd_context;
	bool xproc;			/* on obj: another process's PD */
};
static inline struct sr_pd *to_pd(struct ibv_pd *p) { return (struct sr_pd *)p; }
static inline bool pd_is_parent(const struct sr_pd *pd) { return pd->prot != NULL; }
/* The protection domain object a holder or parent domain stands for. */
static inline const struct sr_pd *pd_prot(const struct sr_pd *pd)
{
	return (pd->prot ? pd->prot : pd)->obj;
}
/* Do two PDs (holders, parent domains) grant access to each other's
 * objects? */
static inline bool pd_same(const struct sr_pd *a, const struct sr_pd *b)
{
	return pd_prot(a) == pd_prot(b);
}
static inline void pd_get(struct sr_pd *pd) { atomic_fetch_add(&pd->obj->refs, 1); }
static inline void pd_put(struct sr_pd *pd) { atomic_fetch_sub(&pd->obj->refs, 1); }

void pd_init(struct sr_pd *pd, struct ibv_context *context);
int pd_alloc_parent(struct sr_context *ctx, struct ibv_parent_domain_init_attr *attr,
		    struct sr_pd **out);
int td_alloc(struct sr_context *ctx, struct ibv_td_init_attr *attr, struct sr_td **out);
int td_dealloc(struct sr_td *td);

/* Queue buffers (SQ, RQ, SRQ and CQ rings), zero-filled: from the parent
 * domain's alloc() when it has one and does not answer
 * IBV_ALLOCATOR_USE_DEFAULT, else from the heap. *custom says which, for
 * pd_buf_free. pd may be NULL. Call only from the application's thread
 * (create, resize, destroy): alloc() and free() are its code. The
 * resource types are documented in docs/COMPAT.md. */
enum {
	SR_RES_TYPE_SQ = 1,
	SR_RES_TYPE_RQ = 2,
	SR_RES_TYPE_SRQ = 3,
	SR_RES_TYPE_CQ = 4,
};
void *pd_buf_alloc(struct sr_pd *pd, size_t size, uint64_t type, bool *custom);
void pd_buf_free(struct sr_pd *pd, void *p, uint64_t type, bool custom);

/* Device memory (ibv_alloc_dm(3)): host memory owned by the device, with
 * a process-wide budget (SOFTRNIC_DM_SIZE, docs/CONFIG.md). An imported
 * DM (ibv_import_dm) points at the one it names. */
struct sr_dm {
	struct ibv_dm ibdm;
	struct sr_dm *orig;		/* import: the allocated DM, else NULL */
	uint8_t *buf;			/* page-aligned, mapped length */
	size_t length;			/* what was asked */
	size_t mapped;
	atomic_int refs;		/* MRs on it, imports of it */
	struct sr_list link;		/* in the process-wide DM list */
};
static inline struct sr_dm *to_dm(struct ibv_dm *d) { return (struct sr_dm *)d; }

uint64_t dm_max_size(void);
int dm_alloc(struct sr_context *ctx, const struct ibv_alloc_dm_attr *attr, struct sr_dm **out);
int dm_free(struct sr_dm *dm);
int dm_import(struct sr_context *ctx, uint32_t handle, struct sr_dm **out);
void dm_unimport(struct sr_dm *dm);

int pd_alloc(struct sr_context *ctx, struct sr_pd **out);
/* Free a PD holder or a parent domain: -EBUSY while anything uses it;
 * -EINVAL if destroyed already through another holder (only
 * ibv_unimport_pd is left then). */
int pd_dealloc(struct sr_pd *pd);
int pd_import(struct sr_context *ctx, uint32_t handle, struct sr_pd **out);
void pd_unimport(struct sr_pd *pd);

/* An ibv_mr holder; as with PDs, the region is the holder ibv_reg_mr
 * returned and ibv_import_mr makes more holders naming it (handle = key).
 * Every field below obj is the region's, meaningful on obj only. */
struct sr_mr {
	struct ibv_mr ibmr;
	struct sr_mr *obj;		/* the region this holder names */
	struct sr_space *space;
	bool buried;			/* holder: on the space's graveyard */
	struct sr_list grave;
	atomic_bool shared;		/* imported at least once */
	bool dead;			/* deregistered */
	struct sr_pd *pd;		/* holder it was registered through */
	uint64_t iova;			/* first address the keys address */
	uint64_t length;
	uintptr_t vaddr;		/* process address backing iova */
	int access;
	bool implicit;			/* whole address space (implicit ODP) */
	struct sr_dm *dm;		/* ibv_reg_dm_mr: the DM it maps */
	bool mapped;			/* counted by shm_map_reg (chan/shm_map.h) */
	atomic_int users;		/* placements running + bound MWs */
	atomic_int mw_binds;
	/* Another process's region (ibv_import_mr through its cmd_fd):
	 * vaddr is in that process, and the published entry it was read
	 * from (slot, generation) must still hold it at every access. */
	bool xproc;
	uint32_t xslot;
	uint64_t xgen;
};
static inline struct sr_mr *to_mr(struct ibv_mr *m) { return (struct sr_mr *)m; }
/* The region an ibv_mr names (itself, or the original of an import). */
static inline struct sr_mr *mr_obj(struct ibv_mr *m) { return to_mr(m)->obj; }

struct sr_mw {
	struct ibv_mw ibmw;
	struct sr_pd *pd;
	struct sr_mr *mr;		/* bound MR, or NULL */
	uint64_t addr, length;
	int access;
	struct sr_qp *qp;		/* type 2: QP it is bound through */
	atomic_int users;
};
static inline struct sr_mw *to_mw(struct ibv_mw *m) { return (struct sr_mw *)m; }

/* A UD destination, resolved once when the AH is made (core/ud.c) and
 * copied into each send WQE, so an AH may go as soon as the post returns. */
struct sr_ud_av {
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} dst;				/* port set per send, from the QPN */
	socklen_t dst_len;
	bool mcast;			/* dgid is a multicast group */
	union ibv_gid sgid;		/* the source GID (sgid_index) */
	unsigned int ifindex;		/* ... and its interface */
	uint8_t hop_limit, tclass;
	uint32_t flow_label;
};

struct sr_ah {
	struct ibv_ah ibah;
	struct ibv_ah_attr attr;
	struct sr_ud_av av;
};

/* ---- UD (core/ud.c) ----------------------------------------------------- */
int ah_create(struct sr_pd *pd, const struct ibv_ah_attr *attr, struct sr_ah **out);
void ah_destroy(struct sr_ah *ah);

/* A resolved memory range: process address and the object kept busy. */
struct sr_mref {
	uintptr_t addr;
	atomic_int *users;		/* decrement when done */
	struct sr_mr *xmr;		/* another process's region: addr is
					 * there, copy with mref_read/write,
					 * never dereference; else NULL */
};

/* Access check + translation for an lkey (local SGE) or rkey (remote):
 * every byte of [va, va+len) must lie in the region, PD must match, and
 * the region must grant @need (IBV_ACCESS_* bits; 0 for local read).
 * Returns 0, -EACCES (key/pd/access) or -ERANGE (bounds). */
int mr_resolve(struct sr_context *ctx, struct sr_pd *pd, uint32_t key,
	       uint64_t va, uint64_t len, int need, bool remote,
	       struct sr_mref *out);
void mr_release(struct sr_mref *r);
/* What an access through an lkey needs, remembered by a QP so that its
 * next one with the same key takes no lock and no reference: the
 * region's bounds, rights and PD and where it is in our memory, valid
 * while mr_gen() still reads gen, read before the look-up (every
 * deregistration and re-registration in the process moves it once the
 * region is out of the key table or changed, before it returns). A
 * gather reads through it (sq.c); a receive writes through it only with
 * mem_write_at_gen, which deregistration waits for (rx.c). */
struct sr_lkey_span {
	uint32_t key;			/* 0: nothing remembered */
	bool implicit;			/* the whole address space */
	int access;			/* IBV_ACCESS_* of the region */
	const struct sr_pd *pd;
	uint64_t gen;
	uint64_t iova, length;
	uintptr_t vaddr;		/* where iova is */
};
uint64_t mr_gen(void);
/* Move the generation (a registration changes): mr.c, and tests. */
void mr_gen_bump(void);
/* mr_resolve for a local read (need 0), filling *sp instead of taking a
 * reference; -EACCES/-ERANGE as mr_resolve, -EAGAIN for a region that
 * cannot be remembered (another process's). */
int mr_span(struct sr_context *ctx, struct sr_pd *pd, uint32_t key, uint64_t va, uint64_t len,
	    struct sr_lkey_span *sp);
int mr_reg(struct sr_pd *pd, void *addr, size_t len, uint64_t iova,
	   int access, struct sr_mr **out);
/* ibv_reg_dm_mr(3): a zero-based region over [offset, offset+len) of a
 * DM, usable as a local SGE and, with remote rights, as an RDMA target. */
int mr_reg_dm(struct sr_pd *pd, struct sr_dm *dm, uint64_t offset, size_t len,
	      int access, struct sr_mr **out);
int mr_rereg(struct sr_mr *mr, int flags, struct sr_pd *pd, void *addr,
	     size_t len, int access);
/* Deregister the region @mr names; -EINVAL if that was done already
 * through another holder, -EBUSY while a type 1 MW is bound to it. */
int mr_dereg(struct sr_mr *mr);
int mr_import(struct sr_pd *pd, uint32_t handle, struct sr_mr **out);
void mr_unimport(struct sr_mr *mr);
int mw_alloc(struct sr_pd *pd, enum ibv_mw_type type, struct sr_mw **out);
int mw_dealloc(struct sr_mw *mw);
/* Bind (type 1 through ibv_bind_mw, type 2 through a BIND_MW WQE). */
int mw_bind(struct sr_qp *qp, struct sr_mw *mw, uint32_t new_rkey,
	    const struct ibv_mw_bind_info *bi);
/* Invalidate an MW (type 2) by rkey: local or via SEND_WITH_INV. */
int mw_invalidate(struct sr_context *ctx, struct sr_pd *pd, uint32_t rkey);

/* Safe copies into and out of application memory: an unmapped or
 * read-only page gives -EFAULT rather than a crash. */
int mem_read(void *dst, uintptr_t src, size_t len);
int mem_write(uintptr_t dst, const void *src, size_t len);
/* mem_write into a region remembered at MR generation gen (struct
 * sr_lkey_span): -EAGAIN, with nothing written, once the generation has
 * moved (look the key up again) or where such writes cannot be told
 * apart (SOFTRNIC_SAFE_COPY=syscall). mem_quiesce, called by whoever
 * moves the generation, returns once every such write that may have
 * seen the old one has ended. */
int mem_write_at_gen(uintptr_t dst, const void *src, size_t len, uint64_t gen);
void mem_quiesce(void);
/* The same for a resolved range, which may be another process's
 * (sr_mref.xmr): copies there go through process_vm_readv/writev. */
int mref_read(const struct sr_mref *r, void *dst, size_t len);
int mref_write(const struct sr_mref *r, const void *src, size_t len);
/* process_vm_readv/writev on another process: 0, -EFAULT (a bad page),
 * -EPERM (no ptrace right over it), -ESRCH (gone). */
int mem_xcopy(pid_t pid, bool write, uintptr_t addr, void *buf, size_t len);
/* 8-byte atomics on application memory, atomic among softrnic atomics.
 * SR_ATOMIC_WRITE stores swap (IBTA 1.5 ATOMIC WRITE). */
int mem_atomic(uintptr_t addr, int op, uint64_t cmp_or_add, uint64_t swap, uint64_t *orig);
enum { SR_ATOMIC_CMP_SWP = 1, SR_ATOMIC_FETCH_ADD = 2, SR_ATOMIC_WRITE = 3 };

/* ---- CQ ---------------------------------------------------------------- */
struct sr_comp_channel {
	struct ibv_comp_channel ibch;
	struct sr_evq evq;
	atomic_int refs;		/* CQs that use it */
};
static inline struct sr_comp_channel *to_chan(struct ibv_comp_channel *c)
{
	return container_of(c, struct sr_comp_channel, ibch);
}

struct sr_cqe {
	struct ibv_wc wc;
	uint64_t ts;			/* completion timestamp, ns */
	struct sr_qp *sq_qp;		/* send CQE: its QP, until reaped */
	uint32_t sq_upto;		/* ... and the SQ index after it */
};

struct sr_cq {
	struct ibv_cq_ex ibcq;		/* ibv_cq is its prefix */
	sr_mutex lock;
	struct sr_cqe *ring;
	uint32_t size;			/* slots = cqe + 1 */
	uint32_t head, tail;		/* free-running */
	int armed;			/* 0, 1 = next, 2 = solicited only */
	bool overflowed;
	bool ignore_overrun;		/* IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN */
	atomic_int refs;		/* QPs/SRQs that use it */
	uint64_t wc_flags_ex;		/* cq_ex: which fields were asked for */
	struct sr_cqe *cur;		/* cq_ex: entry being read */
	uint32_t events_pending;	/* comp events handed out */
	uint32_t async_given;		/* async events handed out */
	int comp_vector;
	struct sr_pd *pd;		/* parent domain (IBV_CQ_INIT_ATTR_MASK_PD) */
	bool ring_custom;		/* ring came from its alloc() */
	/* chan/tcp.c: the streams an empty poll looks at, each with a
	 * reference, as the context's stream list was at generation
	 * poll_gen (npoll < 0: none cached); held by the thread polling
	 * them (the others return: trylock; biased to a lone poller, no
	 * locked instruction an empty poll) */
	sr_mutex poll_lock;
	int npoll;
	unsigned int poll_gen;
	struct sr_chan *poll_streams[16];
	/* The context's other streams on rings (with a reference each, same
	 * generation; DESIGN.md decision 5, "a poller serves streams nobody
	 * polls"): bit i of foreign_mask, looked at one poll in 64, says
	 * poll_foreign[i] had no program thread polling its own CQs then. */
	int nforeign;
	uint32_t foreign_mask;
	unsigned int foreign_polls;
	struct sr_chan *poll_foreign[16];
};
static inline struct sr_cq *to_cq(struct ibv_cq *c) { return (struct sr_cq *)c; }

int cq_create(struct sr_context *ctx, int cqe, struct sr_comp_channel *ch,
	      int comp_vector, struct sr_cq **out);
/* The same, with a parent domain (ibv_create_cq_ex, IBV_CQ_INIT_ATTR_MASK_PD):
 * the ring comes from its allocator and the CQ holds it. */
int cq_create_pd(struct sr_context *ctx, int cqe, struct sr_comp_channel *ch,
		 int comp_vector, struct sr_pd *pd, struct sr_cq **out);
int cq_destroy(struct sr_cq *cq);
int cq_resize(struct sr_cq *cq, int cqe);
/* Add one completion; raises the channel event if armed. solicited: the
 * completion is for a message with the solicited event bit. */
int cq_push(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited);
/* A send-queue completion: when polled, it frees the QP's SQ slots up to
 * sq_upto (a WR's slot is busy until its completion, or a later one, is
 * reaped, as on hardware; so a CQ sized to the SQ never overflows). */
int cq_push_sq(struct sr_cq *cq, const struct ibv_wc *wc, struct sr_qp *qp, uint32_t sq_upto);
/* n completions in order under one hold of the CQ's lock, as n cq_push
 * (solicited: any of them is for a solicited message). */
void cq_push_many(struct sr_cq *cq, const struct ibv_wc *wc, int n, bool solicited);
/* The QP is going away: its CQEs stay, but no longer point at it. */
void cq_forget_qp(struct sr_cq *cq, struct sr_qp *qp);
void qp_sq_reaped(struct sr_qp *qp, uint32_t upto);
/* Modify to RESET: drop the QP's completions not yet polled, as mlx5 and
 * the kernel's cq_clean do, so a reused QP does not see stale flushes. */
void cq_clean_qp(struct sr_cq *cq, uint32_t qp_num);
int cq_poll(struct sr_cq *cq, int n, struct ibv_wc *wc);
int cq_arm(struct sr_cq *cq, int solicited_only);
void cq_init_ex_ops(struct sr_cq *cq);

/* ---- SRQ ---------------------------------------------------------------- */
struct sr_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	struct ibv_sge sge[];		/* max_sge of the queue */
};

struct sr_rq {
	uint8_t *buf;			/* size * stride */
	uint32_t stride, size, max_sge;
	uint32_t head, tail;		/* free-running; head = next to consume */
	struct sr_pd *pd;		/* whose allocator buf came from, or NULL */
	uint64_t res_type;
	bool custom;
};

static inline struct sr_rwqe *rq_at(struct sr_rq *q, uint32_t i)
{
	return (struct sr_rwqe *)(q->buf + (size_t)(i & (q->size - 1)) * q->stride);
}

struct sr_xdom;

struct sr_srq {
	struct ibv_srq ibsrq;
	sr_mutex lock;
	struct sr_rq rq;
	uint32_t max_wr;		/* what the application asked for */
	uint32_t limit;
	struct sr_pd *pd;
	atomic_int refs;		/* QPs attached */
	uint32_t async_given;
	uint32_t srqn;			/* ibv_get_srq_num: unique in the process */
	/* XRC SRQs (IBV_SRQT_XRC): no QP is attached; XRC_RECV QPs of the
	 * same domain deliver into it the requests that name srqn, and its
	 * receives complete into its own CQ (core/xrcd.c). */
	struct sr_xdom *xdom;		/* NULL for a basic SRQ */
	struct sr_cq *cq;
	struct sr_list xlink;		/* in xdom->srqs */
	atomic_int users;		/* requests being received into it */
};
static inline struct sr_srq *to_srq(struct ibv_srq *s) { return (struct sr_srq *)s; }

int rq_init(struct sr_rq *q, uint32_t max_wr, uint32_t max_sge);
/* The same, with the buffer from pd's allocator (pd_buf_alloc). */
int rq_init_pd(struct sr_rq *q, struct sr_pd *pd, uint64_t type, uint32_t max_wr,
	       uint32_t max_sge);
void rq_free(struct sr_rq *q);
int rq_post(struct sr_rq *q, const struct ibv_recv_wr *wr, uint32_t max_wr);
int srq_create(struct sr_pd *pd, struct ibv_srq_init_attr *attr, struct sr_srq **out);
/* An XRC SRQ (ibv_create_srq_ex(3), IBV_SRQT_XRC) in xrcd's domain. */
struct sr_xrcd;
int srq_create_xrc(struct sr_pd *pd, struct sr_xrcd *xrcd, struct sr_cq *cq,
		   struct ibv_srq_init_attr *attr, struct sr_srq **out);
int srq_destroy(struct sr_srq *srq);
int srq_modify(struct sr_srq *srq, struct ibv_srq_attr *attr, int mask);
int srq_query(struct sr_srq *srq, struct ibv_srq_attr *attr);
int srq_post_recv(struct sr_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Take the next WQE (copied to out, which has room for max_sge); 0 or
 * -EAGAIN when empty. Raises SRQ_LIMIT_REACHED when it crosses the limit. */
int srq_take(struct sr_srq *srq, struct sr_rwqe *out);

/* ---- XRC domains (core/xrcd.c) ------------------------------------------
 * A domain (sr_xdom) groups XRC SRQs and XRC_RECV QPs: a request that
 * arrives on an XRC_RECV QP is received into the SRQ it names, if that SRQ
 * is in the QP's domain. Each ibv_open_xrcd returns its own handle
 * (sr_xrcd); handles opened on the same inode (fd) share one domain in
 * this process, as they share one kernel object on real hardware. */
struct sr_xdom {
	pthread_mutex_t lock;		/* srqs, tgts, users */
	struct sr_list link;		/* process-wide list (inode domains) */
	bool anon;			/* fd -1: private to its handle */
	dev_t dev;
	ino_t ino;
	int opens;			/* handles; under the global xrcd lock */
	int users;			/* SRQs and XRC_RECV QPs in it */
	struct sr_list srqs;
	struct sr_list tgts;		/* XRC_RECV QPs (sr_qp.xlink) */
};

struct sr_xrcd {
	struct ibv_xrcd ibxrcd;
	struct sr_xdom *dom;
};
static inline struct sr_xrcd *to_xrcd(struct ibv_xrcd *x) { return (struct sr_xrcd *)x; }

int xrcd_open(struct sr_context *ctx, const struct ibv_xrcd_init_attr *a, struct sr_xrcd **out);
int xrcd_close(struct sr_xrcd *x);
/* Objects in a domain: they keep it alive (close of the last handle
 * fails with EBUSY while any remains). */
void xdom_add_srq(struct sr_xdom *d, struct sr_srq *srq);
/* Unlist, then wait until no receive runs into it. */
void xdom_del_srq(struct sr_xdom *d, struct sr_srq *srq);
struct sr_qp;
void xdom_add_tgt(struct sr_xdom *d, struct sr_qp *qp);
void xdom_del_tgt(struct sr_xdom *d, struct sr_qp *qp);
/* The domain's SRQ numbered srqn, held for one receive (xdom_srq_put). */
struct sr_srq *xdom_srq_get(struct sr_xdom *d, uint32_t srqn);
void xdom_srq_put(struct sr_srq *srq);
/* Receives were posted to one of d's SRQs: XRC_RECV QPs that parked
 * requests for want of one look again. */
void xdom_resume(struct sr_xdom *d);
uint32_t srqn_alloc(void);

#endif
