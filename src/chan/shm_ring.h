/* The same-host channel's rings (DESIGN.md decision 23, "shm layout").
 *
 * A ring is a single-producer, single-consumer byte ring in shared memory
 * that stands in for one direction of a TCP stream: it carries the same
 * MPA FPDU bytes, in records. An inline record holds stream bytes; a
 * remote record names bytes in the producer's address space that the
 * consumer copies itself with process_vm_readv (one copy, straight into
 * the memory a WRITE or READ response targets); a mapped record names
 * them twice, by address and by where they are in a sealed memfd of the
 * producer's, which the consumer maps read-only and copies from with
 * memcpy (falling back to the address if it cannot map it).
 *
 * Record: 8-byte header {u32 kind, u32 len} (host order: both ends are
 * one host), then for kind 0 (inline) len bytes padded to 8, for kind 1
 * (remote) one u64 address, for kind 3 (mapped) {u64 address, u32 fd,
 * u32 pad (0), u64 inode, u64 offset} (32 bytes), for kind 4 (small) len
 * bytes that are not stream bytes but one whole message the layer above
 * encodes and decodes itself (at most SHM_SMALL_MAX bytes; the
 * byte-stream read stops before it), padded to the end of the 64-byte
 * line (of ring offsets) it ends in. Records start 8-aligned and may
 * wrap (a header never does). Indices are free-running u64 byte counts.
 *
 * Publishing: the producer writes a record's body, then makes sure the
 * header word right after it (where the next record will start) is zero,
 * then stores the record's header word with release. The consumer polls
 * the header word at its position: zero is "nothing yet", anything else
 * is a whole record. So a message costs the consumer one cache line from
 * the producer's core (header and a small body together), not two (a
 * tail index, then the record). The producer keeps one word free beyond
 * what it writes for that zero. After a small record that word starts a
 * line, and the consumer zeroed it as it read the last lap's small record
 * there (it zeroes the first word of each line of a small record before
 * releasing it): the producer then finds it zero and leaves the line
 * alone, so a small message is the lines it is in, written once (a
 * store into the next line as each message was published cost a
 * ping-pong of one-line messages twice the floor). The producer also
 * publishes tail (bytes written), read only when it sleeps (see
 * rx_sleep); the consumer publishes head (bytes released), which the
 * producer reads when it needs room. Both with a release store.
 *
 * Nothing read from shared memory is trusted: the peer may write any
 * value at any time. Every index, kind and length is read once into a
 * local and checked before use; a bad one makes the call fail with
 * -EPROTO, after which the caller drops the stream (QP to ERROR).
 */
#ifndef SOFTRNIC_SHM_RING_H
#define SOFTRNIC_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SHM_REC_HDR	8
#define SHM_REC_INLINE	0
#define SHM_REC_REMOTE	1
/* A remote record the consumer could not pull (the producer's memory was
 * gone): it read zeros instead and wrote this over the record's kind, so
 * the producer, which checks its released remote records before it
 * reuses their space, can fail the work request (IBV_WC_LOC_PROT_ERR) as
 * over TCP. Never valid in a record being read. */
#define SHM_REC_FAULTED	2
/* A remote record that also says where its bytes are in a memfd of the
 * producer's (fd number there, inode, offset): the consumer copies from
 * its own read-only mapping of that memfd if it can, else pulls. */
#define SHM_REC_MAPPED	3
/* A small record (kind 4): one message of the layer above, not stream
 * bytes (shm_ring_write_small, shm_ring_read_small). */
#define SHM_REC_SMALL	4
#define SHM_SMALL_MAX	4160U
/* the most stream bytes one record carries (one FPDU's payload fits) */
#define SHM_REC_MAX	(64U * 1024U)

/* One direction's control block, in shared memory. Producer and consumer
 * fields sit on their own cache lines. */
struct shm_ring_ctl {
	_Atomic uint64_t tail;		/* producer: bytes published */
	/* The producer's latest positive ACK that went alone, not in a
	 * record (SHM_ACK_SET | MSN; 0: none yet): cumulative, so the last
	 * one is all that counts, and it needs no order with the records
	 * (shm.c, shm_send_ack). */
	_Atomic uint64_t ack;
	uint8_t pad0[48];
	_Atomic uint64_t head;		/* consumer: bytes released */
	uint8_t pad1[56];
	/* The consumer is going to sleep: the producer writes the
	 * consumer's eventfd after its next publish (and clears this). */
	_Atomic uint32_t rx_sleep;
	/* The producer found the ring full: the consumer writes the
	 * producer's eventfd after its next release (and clears this). */
	_Atomic uint32_t tx_sleep;
	/* The producer saw what it wrote wait, unread, for SHM_KICK_NS while
	 * the consumer did not sleep: it set this and wrote the consumer's
	 * eventfd. The consumer's progress thread then reads at once, even
	 * where it had left the ring to a polling program thread (which may
	 * be waiting by watching memory, not by polling). */
	_Atomic uint32_t kick;
	/* The consumer's program thread polls (reads) the ring, and the
	 * progress thread does not sleep on it: the producer may look at
	 * rx_sleep without a fence first (shm.c, wake_if). 0 from a consumer
	 * that never sets it: then it always fences. */
	_Atomic uint32_t rx_polled;
	/* The producer takes back its remote records (shm_ring_revoke):
	 * their bytes are the program's again (its QP flushed their WQEs,
	 * or is gone). A pull that finishes after this is set fails. 0 from
	 * a producer that never sets it. */
	_Atomic uint32_t revoked;
	uint8_t pad2[44];
};

/* Where a piece's bytes are in a memfd of the producer's. */
struct shm_ring_loc {
	uint32_t fd;			/* its number in the producer */
	uint64_t ino;			/* its inode (fd numbers are reused) */
	uint64_t off;			/* offset of the piece's first byte */
};

/* How a ring end touches memory that is not the ring. The channel uses
 * the fault-safe copies and process_vm_readv; the unit test plain ones. */
struct shm_ring_io {
	/* copy into / out of application memory; 0 or -EFAULT */
	int (*put)(void *dst, const void *src, size_t n);
	int (*get)(void *dst, const void *src, size_t n);
	/* copy len bytes at the producer's address raddr into dst (n
	 * pieces): bytes copied, or -1 with errno (ESRCH: the producer is
	 * gone; anything else: that memory or ours cannot be accessed) */
	ssize_t (*pull)(void *arg, const struct iovec *dst, int n, uint64_t raddr, size_t len);
	void *arg;
	/* Producer (may be NULL): are the len bytes at p, a SHM_PULL piece,
	 * in a memfd the consumer may map? true and *loc if so: the piece
	 * then goes as mapped records. */
	bool (*locate)(void *arg, const void *p, size_t len, struct shm_ring_loc *loc);
	/* Consumer (may be NULL): our pointer to the len bytes at offset off
	 * of the producer's memfd (its fd number, inode), or NULL if it
	 * cannot be mapped, or not that far (off + len beyond its size):
	 * the record's address is pulled instead. Valid until the next call.
	 * Reading it never faults (the callee made sure of that: a sealed
	 * memfd cannot shrink under the mapping). */
	const void *(*map)(void *arg, uint32_t fd, uint64_t ino, uint64_t off, size_t len);
	/* Consumer (may be NULL): copy len bytes of a mapped record from
	 * src (map's pointer; the producer has them at raddr) into dst
	 * (application memory), with the producer's help if it can (loc:
	 * where src is in the producer's memfd): len (the producer's part
	 * may still be under way: the callee settles it), 0 if it did not
	 * (the caller copies), -EFAULT (dst faulted), -EPROTO (the
	 * producer broke the help protocol). */
	ssize_t (*help)(void *arg, void *dst, const void *src, size_t len, uint64_t raddr,
			const struct shm_ring_loc *loc);
	/* Producer: the consumer cannot pull. A SHM_PULL piece that locate
	 * does not place in a memfd then goes inline (read with get). */
	bool no_pull;
};

/* A ring end: the shared control block and data, and the private state
 * of the side that owns it. */
struct shm_ring {
	struct shm_ring_ctl *ctl;
	uint8_t *data;
	uint64_t size;			/* power of two, multiple of 8 */
	uint64_t pos;			/* producer: tail; consumer: head (ours) */
	/* producer: the consumer's head as we last read it. Read again
	 * only when that leaves less than half the ring free: the consumer
	 * writes it after every record, and reading it on every write cost
	 * a cache line moved between the two processes' cores per
	 * message, on the sender's critical path. */
	uint64_t seen_head;
	/* consumer: the record being read */
	bool rec;
	uint32_t rec_kind, rec_len, rec_off;
	uint64_t rec_addr;		/* remote record: producer address */
	uint32_t rec_fd;		/* mapped record: memfd number, */
	uint64_t rec_ino, rec_moff;	/* ... inode, offset of byte 0 */
	uint64_t rec_size;		/* the record's bytes in the ring */
	bool rec_fault;			/* ... unreadable: the rest reads as zeros */
	/* producer, shm_ring_stalled's (any thread: a race only answers
	 * true twice): the consumer's head as last seen, since when it has
	 * not moved with bytes unread (0: none unread), answered true;
	 * when it last looked, and our tail then */
	_Atomic uint64_t watch_head, watch_ns, watch_at, watch_tail;
	_Atomic bool watch_told;
	/* statistics: bytes pulled (remote or mapped records read with
	 * pull), copied from a mapping (mapped records), read inline or as
	 * zeros; remote records read as zeros */
	uint64_t pulled, mapped, inlined, faults;
};

void shm_ring_init(struct shm_ring *r, struct shm_ring_ctl *ctl, uint8_t *data, uint64_t size);

/* What one piece of a write is (shm_ring_write's kinds[]). */
enum shm_piece {
	SHM_OWN,			/* the channel's bytes: copied */
	SHM_APP,			/* application memory: copied fault-safely */
	SHM_PULL,			/* application memory the peer may pull
					 * (or map: io->locate) */
};

/* A remote or mapped record written: where it starts, for which piece. */
struct shm_rec_note {
	uint64_t pos;
	int piece;
};

/* Producer: write up to the whole of iov (n pieces) as records and
 * publish them. Returns stream bytes written (0: the ring is full),
 * -EFAULT if the first piece is application memory that cannot be read
 * (nothing written), -EPROTO if the shared head is impossible. If notes
 * is not NULL, the first *nnotes remote (or mapped) records written are
 * noted there (*nnotes: its size in, the number noted out). A SHM_PULL
 * piece that io->locate places in a memfd goes as mapped records, any
 * other as remote records. */
ssize_t shm_ring_write(struct shm_ring *r, const struct iovec *iov, const uint8_t *kinds, int n,
		       const struct shm_ring_io *io, struct shm_rec_note *notes, int *nnotes);

/* Producer: would len stream bytes of SHM_OWN pieces go now as one
 * inline record, whole? (Then shm_ring_write writes them so.) */
bool shm_ring_fits(struct shm_ring *r, size_t len);

/* Producer: write n pieces of our own bytes (len in all, 1 to
 * SHM_SMALL_MAX) as one small record, whole or not at all: len, 0 if it
 * does not fit now, -EINVAL for a bad len, -EPROTO if the shared head is
 * impossible. */
ssize_t shm_ring_write_small(struct shm_ring *r, const struct iovec *iov, int n, size_t len);
/* The same, with the pieces from iov[app] on in the application's memory,
 * copied with get (0 or -EFAULT): -EFAULT, nothing published, if one
 * faults. */
ssize_t shm_ring_write_small_app(struct shm_ring *r, const struct iovec *iov, int n, size_t len,
				 int app, int (*get)(void *, const void *, size_t));

/* Producer: was the remote (or mapped) record at pos (already released:
 * pos is below the shared head) read as zeros? Only valid until that
 * space is written again. */
bool shm_ring_faulted(const struct shm_ring *r, uint64_t pos);
/* Producer: the consumer's head, checked (-EPROTO as a huge value is not
 * returned: an impossible head reads as our own tail). */
uint64_t shm_ring_released(const struct shm_ring *r);
/* Producer: take back every remote record not read yet; the consumer's
 * read of one fails (-EIO), its pull whole or not. Those read before
 * this returned read the bytes as they were. For good. */
void shm_ring_revoke(struct shm_ring *r);

/* Consumer: read up to the whole of iov (n pieces; app: application
 * memory, written fault-safely) and release what was consumed. Stops
 * before a remote record once something was read, so that a caller
 * reading headers gets the chance to place the payload directly.
 * A mapped record is copied from io->map's pointer if it gives one, else
 * pulled as a remote record. A remote record whose memory the producer
 * no longer has reads as zeros (and is marked SHM_REC_FAULTED). Stops
 * before a small record. Returns bytes read (0: the ring is empty),
 * -ENOMSG if the next record is a small one (nothing read), -EFAULT if
 * the first byte could not be placed into iov (nothing consumed), -EIO if
 * the producer is gone (ESRCH from pull) or took its remote records back
 * (shm_ring_revoke) before a copy of one was over, -EPROTO for a corrupt
 * ring. */
ssize_t shm_ring_read(struct shm_ring *r, const struct iovec *iov, int n, bool app,
		      const struct shm_ring_io *io);

/* Consumer: if the next record is a small one, copy it into buf (cap at
 * least SHM_SMALL_MAX) and release it. Returns its length, 0 if the ring
 * is empty or the next record (or the rest of the current one) is not
 * small, -EPROTO for a corrupt ring. The copy is ours: the producer
 * cannot change what the caller decodes. */
ssize_t shm_ring_read_small(struct shm_ring *r, void *buf, size_t cap);

/* The same in two steps, so that the body goes straight where its header
 * says: begin copies the first n bytes (or all, if fewer) of the next
 * record, if it is a small one, into hdr and returns the record's length
 * (0 and -EPROTO as above), leaving it unread; end copies n bytes from
 * off of the body begun into dst (nothing of what lies beyond the
 * record) and releases it. The copies are ours: the caller decodes hdr,
 * and takes its bounds from there. */
ssize_t shm_ring_small_begin(struct shm_ring *r, void *hdr, size_t n);
void shm_ring_small_end(struct shm_ring *r, void *dst, size_t off, size_t n);

/* Consumer: the first body byte of the next record, if that record is a
 * small one and the last published (nothing after it yet); else -1. A
 * look, not a read: the producer may change what it saw, so
 * shm_ring_read_small checks everything again. */
int shm_ring_small_alone(const struct shm_ring *r);

/* Producer, any thread, at time now (ns): has the consumer left what we
 * published unread, its head not moving, for limit ns or more, while we
 * wrote nothing more? True once per such stall (until the head moves).
 * Looks at most every limit / 4 (false in between), so a stall is told
 * within 1.5 limit of our last write by a caller that asks often. The
 * head is the consumer's: a bad one only makes the answer wrong. */
bool shm_ring_stalled(struct shm_ring *r, uint64_t now, uint64_t limit);

/* Consumer: is anything unread? (-EPROTO: corrupt) */
int shm_ring_pending(struct shm_ring *r);
/* Consumer: is no record published at stream position pos (where the
 * next record will start)? A lock-free look at the one header word. */
bool shm_ring_empty_at(const struct shm_ring *r, uint64_t pos);

#endif
