/* Private to the same-host channel (shm.c: the link and its I/O;
 * shm_setup.c: offering, accepting, the descriptor server): the shared
 * page's layout, the setup messages and the link. See shm.h. */
#ifndef SOFTRNIC_SHM_PRIV_H
#define SOFTRNIC_SHM_PRIV_H

#include "chan/shm.h"
#include "chan/shm_ring.h"
#include "chan/shm_side.h"
#include "chan/tcp_priv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHM_MAGIC	0x53524d53U	/* "SRMS" */
#define SHM_VERSION	12	/* 2: mapped records (kind 3); 3: the
				 * descriptor server (fdsrv); 4: records
				 * published by their header word
				 * (shm_ring.h); 5: small records (kind
				 * 4, struct shm_small); 6: kicks
				 * (shm_ring_ctl.kick); 7: small records
				 * of up to 1 KiB of payload; 8: small
				 * records end lines, whose first words
				 * the consumer zeroes; 9: help boards
				 * (struct shm_help); 10: a board is
				 * SHM_HELP_SLOTS requests (struct
				 * shm_help_board); 11: small records of
				 * up to 4 KiB of payload; 12: the ack
				 * word (shm_ring_ctl.ack). A peer of
				 * another version refuses the offer */
#define SHM_HDR_SIZE	4096ULL
#define SHM_RING_SIZE	(256ULL << 10)	/* per direction: large payloads are
					 * pulled, so the rings hold headers
					 * and small messages */
/* Payload pieces from this size on are pulled by the peer, not copied
 * into the ring: one process_vm_readv costs about what a 16 KiB memcpy
 * does, and saves a copy. A SEND's or WRITE's from 12 KiB: a record the
 * peer copies out of the ring was written into it by our core just
 * before, and crosses between the cores line by line, where a pull
 * reads the source as it lies (12 KiB ib_write_bw 7-10 -> 14-14.5 GB/s,
 * ib_send_lat 2.16 -> 2.00 us); a READ response's from 16 KiB (12 KiB
 * ib_read_bw lost a fifth pulled). */
#define SHM_PULL_MIN	(16U * 1024U)
#define SHM_PULL_MIN_REQ	(12U * 1024U)
/* ... and a WRITE's in a stream (shm.h SHM_PULL_STREAM): the pull's
 * system call costs a lone WRITE's latency (8 KiB ib_write_lat 1.8 ->
 * 2.3 us), not a stream's rate (8 KiB ib_write_bw +12 %, 10 KiB +32 %);
 * SENDs pulled from 6-8 KiB lost a tenth (docs/PERFORMANCE.md) */
#define SHM_PULL_MIN_STREAM	(6U * 1024U)
/* Remote records of ours whose outcome we track (more in flight: the
 * extra ones go untracked, and a fault there is not reported). */
#define SHM_PEND	1024
/* The peer's memfds we keep mapped (mapped records), and how long one we
 * could not map is not tried again. */
#define SHM_MAPS	16
#define SHM_MAP_RETRY_NS	(100ULL * 1000 * 1000)

/* A mapped record's copy shared with its producer (DESIGN.md decision
 * 23, "help"): from this many bytes the consumer asks; it copies the first
 * part itself, the producer's polling thread the rest, straight from its
 * own memory into the consumer's memfd, which it maps read-write. How
 * long the consumer spins for a part the producer took before it yields
 * its CPU between looks (the producer may have lost its CPU to us), and
 * before the link counts as broken (a peer stopped mid-copy, or lying). */
#define SHM_HELP_MIN	(32U * 1024U)
#define SHM_HELP_SPIN_NS	(20ULL * 1000)
#define SHM_HELP_UNTAKEN	16
#define SHM_HELP_WAIT_NS	(1000ULL * 1000 * 1000)

/* The board of one ring's help: SHM_HELP_SLOTS requests, request seq
 * (counted by the ring's consumer from 1) in slot seq % SHM_HELP_SLOTS.
 * The consumer writes a request, then its state POSTED, then posted =
 * seq; its producer, when posted moved, takes each request it has not
 * looked at (state TAKEN by compare-and-swap, then DONE or FAILED once it
 * copied); the consumer takes one back (RECLAIMED, the same way) that
 * the producer had not taken by the time it needs the part, or the
 * slot. state is seq << 8 | phase. Neither side trusts what the other
 * wrote: the producer checks each request and looks at most at a
 * board's worth a time, the consumer copies a part itself on anything
 * but its own request's DONE. */
enum { SHM_HELP_IDLE, SHM_HELP_POSTED, SHM_HELP_TAKEN, SHM_HELP_DONE, SHM_HELP_FAILED,
       SHM_HELP_RECLAIMED };
#define SHM_HELP_SLOTS	16
struct shm_help {
	_Atomic uint64_t state;
	_Atomic uint64_t src;		/* the part, in the producer's memory */
	_Atomic uint64_t len;
	_Atomic uint64_t ino, off;	/* where it goes: the consumer's memfd */
	_Atomic uint32_t fd;		/* ... by its number there */
	uint8_t pad[20];
};
_Static_assert(sizeof(struct shm_help) == 64, "a help request is one line");
struct shm_help_board {
	_Atomic uint64_t posted;	/* the consumer's last request's seq */
	uint8_t pad[56];
	struct shm_help slot[SHM_HELP_SLOTS];
};

/* The consumer's own record of an outstanding part: where it goes, and
 * where its bytes are (the producer's memfd, else its address). */
struct shm_help_part {
	uint8_t *dst;
	size_t len;
	uint64_t raddr;
	struct shm_ring_loc loc;
};

/* The first page of the memfd. ctl[0] is the offerer-to-accepter ring,
 * ctl[1] the other; ring i's data is at SHM_HDR_SIZE + i * ring_size.
 * help[i] is ring i's board. */
struct shm_hdr {
	uint32_t magic, version;
	uint64_t ring_size;
	uint8_t token[16];
	uint8_t pad[32];
	struct shm_ring_ctl ctl[2];
	struct shm_help_board help[2];
};
_Static_assert(sizeof(struct shm_hdr) <= SHM_HDR_SIZE, "shm header fits its page");
_Static_assert(offsetof(struct shm_hdr, help) == 448 && sizeof(struct shm_help_board) == 1088,
	       "help boards where DESIGN.md's layout says");

/* OFFER, ACCEPT and SWITCH bodies (host byte order: one host). */
struct shm_offer {
	uint32_t magic, version;
	uint8_t boot_id[16];		/* proves: the same host (boot) */
	uint8_t token[16];		/* in the memfd and at token_addr */
	uint64_t token_addr;		/* in the offerer's memory */
	int32_t pid;
	int32_t memfd, efd_offerer, efd_accepter;	/* fd numbers there */
	uint64_t ring_size;
	uint64_t fdsrv;			/* its descriptor server's name (0: none) */
};
/* What the descriptor server is asked, and answers along with the
 * descriptors (memfd, offerer's eventfd, accepter's eventfd). */
struct shm_fdreq {
	uint32_t magic, version;
	uint8_t token[16];
};
struct shm_accept {
	uint32_t magic, version;
	int32_t pid;
	uint32_t pull_ok;		/* the accepter can read the offerer */
	uint64_t token_addr;		/* the token, in the accepter's memory */
	uint32_t map_ok;		/* ... can take its memfds (side channel) */
	uint32_t pad;
};
struct shm_switch {
	uint32_t magic, version;
	uint32_t pull_ok;		/* the offerer can read the accepter */
	uint32_t map_ok;		/* ... can take its memfds (side channel) */
};


/* A memfd of the peer's, mapped read-only (base), or, with base NULL, one
 * we failed to map (not tried again before retry). Key: (fd, ino). */
struct peer_map {
	uint32_t fd;
	uint64_t ino;
	uint8_t *base;
	uint64_t size;
	uint64_t used;			/* LRU clock; 0: the slot is free */
	uint64_t retry;			/* CLOCK_MONOTONIC ns */
};

struct shm_link {
	void *map;
	size_t map_len;
	int memfd;			/* the offerer's (-1 at the accepter) */
	int efd_own;			/* ours: watched by our progress thread */
	int efd_peer;			/* the peer's: written to wake it */
	int pidfd;			/* the peer, once known: shared with
					 * our other links to it, from
					 * pidfd_t's cache (shm_pidfd_open) */
	struct sr_tcp_ctx *pidfd_t;
	pid_t peer_pid;
	bool offerer, watched;
	uint8_t token[16];		/* its address goes to the peer */
	struct shm_ring tx, rx;
	struct shm_ring_io io;
	uint64_t wake_part;		/* rx: wake_producer's last look (rx_lock) */
	/* rx: the peer's ack word as last taken (written under rx_lock;
	 * read without it by shm_rx_idle_at) */
	_Atomic uint64_t ack_seen;
	/* Our remote records of SENDs and WRITEs not yet released, oldest
	 * first: one the peer read as zeros fails its WQE (tc->lock). */
	struct { uint64_t pos; uint32_t msn; } pend[SHM_PEND];
	uint32_t pend_head, pend_tail;
	/* ever wrote a remote record: set before the record is published,
	 * so whoever reads an answer to it sees this set */
	_Atomic bool pulls_sent;
	/* our tx position after the last remote record written: the peer
	 * pulls from our memory until its head passes this (tc->lock) */
	uint64_t pull_hi;
	/* shm_send found the ring full with the consumer's head here
	 * (tx_stuck): until it moves, another try writes nothing either
	 * (tc->lock) */
	uint64_t tx_stuck_head;
	bool tx_stuck;
	/* why the rings are unusable (set by either side's lock holder,
	 * read by the other) */
	const char *_Atomic broken;
	/* The consumer's mappings of the peer's memfds (rx_lock). */
	struct peer_map maps[SHM_MAPS];
	uint64_t map_clock;
	int map_last;			/* the slot hit last */
	/* Help (SHM_HELP_MIN): the board we post on as our rx ring's
	 * consumer, our last request's seq and the last one settled, our
	 * record of those between (help_out, by slot), and whether the
	 * current read may leave its part outstanding (help_async; a
	 * part of ours failed since the last drain: help_fault) (all
	 * rx_lock); the board of our tx ring, which we serve, and the last
	 * request there we looked at; the peer's memfds we write into when
	 * we help, mapped read-write (help_lock, taken with trylock).
	 * help_ok: the peer can map our memfds by pidfd_getfd (it pulls
	 * from us), and help is on (SOFTRNIC_SHM_HELP). */
	struct shm_help_board *help_post, *help_serve;
	uint64_t help_seq, help_settled, help_served;
	struct shm_help_part help_out[SHM_HELP_SLOTS];
	unsigned int help_part;		/* the producer's share, in 64ths */
	unsigned int help_idle;		/* requests taken back in a row */
	bool help_ok, help_async, help_fault;
	pthread_mutex_t help_lock;
	struct peer_map wmaps[SHM_MAPS];
	uint64_t wmap_clock;
	int wmap_last;
	/* Offerer: listed in offers_t->offers until answered; who took the
	 * descriptors from the server (the first asker only), and whether
	 * anyone else asked. Accepter: it took them from the server. */
	struct sr_tcp_ctx *offers_t;
	struct sr_list offer_link;
	_Atomic pid_t served_pid;
	_Atomic bool served_extra;
	bool via_fdsrv;
	/* The descriptor server's connection, kept as the side channel
	 * (shm_side.h; its fd is set before served_pid). */
	struct shm_side side;
};

/* shm.c */
/* One pidfd per peer process (sr_tcp_ctx.pidfds): the link's own share
 * of pid's (l->pidfd, l->pidfd_t; -1 and errno if pidfd_open fails), and
 * its share given back (the last one closes it). A cached pidfd whose
 * process has exited is not handed out again: a new process with the
 * same pid gets its own. */
struct shm_pidfd {
	pid_t pid;
	int fd;
	unsigned int refs;
};
int shm_pidfd_open(struct sr_tcp_ctx *t, struct shm_link *l, pid_t pid);
bool shm_enabled(void);
struct shm_link *shm_link_alloc(void);
void shm_link_free(struct shm_link *l);
void shm_link_rings(struct shm_link *l, int tx, int rx, uint64_t ring_size);
/* Off the offerer's list of links on offer (the descriptor server's). */
void shm_offer_unlist(struct shm_link *l);
/* The rings' memory access (struct shm_ring_io's put and pull), a
 * mapping of the peer's memfd (io's map; shm_cache_map: through one of the
 * link's caches), and whether the peer is still the process verified. */
int shm_io_put(void *dst, const void *src, size_t n);
ssize_t shm_io_pull(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len);
const void *shm_io_map(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len);
uint8_t *shm_cache_map(struct shm_link *l, struct peer_map *maps, uint64_t *clock, int *last,
		       int prot, uint32_t fd, uint64_t ino, uint64_t off, size_t len);
bool shm_peer_alive(const struct shm_link *l);

/* shm_help.c */
/* The switch told whether the peer pulls from us (tc->shm_pull_ok): set
 * help_ok. tc->lock held, before the rings are read. */
void shm_help_setup(struct tcp_chan *tc);
/* io's help (struct shm_ring_io): the consumer's copy of a mapped record
 * shared with the producer. */
ssize_t shm_io_help(void *arg, void *dst, const void *src, size_t len, uint64_t raddr,
		    const struct shm_ring_loc *loc);

#endif
