/* The same-host channel's rings: see shm_ring.h. Pure memory code (no
 * system calls but through shm_ring_io), unit-tested and fuzzed.
 *
 * Locking: a ring end has one user at a time. The producer end is used
 * under its stream's channel lock, the consumer end under its rx_lock.
 */
#include "chan/shm_ring.h"

#include <errno.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static uint64_t pad8(uint64_t x)
{
	return (x + 7) & ~7ULL;
}

void shm_ring_init(struct shm_ring *r, struct shm_ring_ctl *ctl, uint8_t *data, uint64_t size)
{
	memset(r, 0, sizeof(*r));
	r->ctl = ctl;
	r->data = data;
	r->size = size;
}

/* The ring offset of stream position pos, and how many bytes follow it
 * before the ring wraps. */
static uint64_t ring_off(const struct shm_ring *r, uint64_t pos, uint64_t *room)
{
	uint64_t off = pos & (r->size - 1);

	*room = r->size - off;
	return off;
}

/* Copy n bytes into the ring at pos (wrapping); get: the application's
 * memory, read fault-safely. 0 or -EFAULT. */
static int ring_in(struct shm_ring *r, uint64_t pos, const uint8_t *src, size_t n,
		   int (*get)(void *, const void *, size_t))
{
	while (n) {
		uint64_t room, off = ring_off(r, pos, &room);
		size_t k = n < room ? n : (size_t)room;

		if (get) {
			if (get(r->data + off, src, k))
				return -EFAULT;
		} else {
			memcpy(r->data + off, src, k);
		}
		pos += k;
		src += k;
		n -= k;
	}
	return 0;
}

/* Copy n bytes out of the ring at pos (wrapping); put: into the
 * application's memory, fault-safely. 0 or -EFAULT. */
static int ring_out(const struct shm_ring *r, uint64_t pos, uint8_t *dst, size_t n,
		    int (*put)(void *, const void *, size_t))
{
	while (n) {
		uint64_t room, off = ring_off(r, pos, &room);
		size_t k = n < room ? n : (size_t)room;

		if (put) {
			if (put(dst, r->data + off, k))
				return -EFAULT;
		} else {
			memcpy(dst, r->data + off, k);
		}
		pos += k;
		dst += k;
		n -= k;
	}
	return 0;
}

#define SHM_LINE	64ULL		/* a cache line */

/* The header word of the record at pos (8-aligned: never wraps). */
static uint64_t *hdr_word(const struct shm_ring *r, uint64_t pos)
{
	return (uint64_t *)(void *)(r->data + (pos & (r->size - 1)));
}

/* Publish the record at pos, whose body is written and which ends at
 * end: first make sure the header word after it is zero (where the next
 * record will start: the consumer must find nothing there until that one
 * is published), then store this header, with release, last.
 *
 * The word is stored only if it is not zero already. Where end starts a
 * line (after every small record: shm_ring_write_small), the consumer
 * zeroed that word as it read the last lap's record there
 * (shm_ring_read_small), so the line is not written now: a store into
 * the next line as a message is published cost a small-message ping-pong
 * twice the time of one line moved each way (docs/PERFORMANCE.md,
 * "small records end their lines"). Mid-line, the word shares the
 * record's last line. */
static void put_hdr(struct shm_ring *r, uint64_t pos, uint32_t kind, uint32_t len, uint64_t end)
{
	uint32_t h[2] = { kind, len };
	uint64_t w, *next = hdr_word(r, end);

	memcpy(&w, h, sizeof(w));
	if ((end & (SHM_LINE - 1)) || __atomic_load_n(next, __ATOMIC_RELAXED))
		__atomic_store_n(next, 0, __ATOMIC_RELAXED);
	__atomic_store_n(hdr_word(r, pos), w, __ATOMIC_RELEASE);
}

/* The bytes a small record of len bytes at pos takes in the ring: its
 * header and body, padded to the end of the line it ends in, so that the
 * next record starts a line (SHM_LINE: ring offsets; the ring's data is
 * page-aligned in both processes). A message that fits a line then moves
 * as one line, and the consumer, which polls the next header word, waits
 * in a line of its own that the producer writes once. */
static uint64_t small_size(uint64_t pos, uint64_t len)
{
	uint64_t end = pos + SHM_REC_HDR + len;

	return ((end + SHM_LINE - 1) & ~(SHM_LINE - 1)) - pos;
}

/* ---- producer ------------------------------------------------------------ */

/* Ask now, for writing, for the lines the next records will go to:
 * [pos + 64, pos + 512), within the free space. The consumer still caches
 * them from the last lap, so the first store to one waits for that copy
 * to be invalidated (a round trip between the cores), and the next
 * locked instruction (the channel lock's release, a fence) waits for the
 * store: a round trip per message, which with the vCPUs far apart held
 * 64 B ib_send_bw at ~3 Mpps (docs/PERFORMANCE.md). Asked for a few
 * messages early, the invalidations overlap the work in between (7.5
 * Mpps). The line at pos is left to the consumer, which polls it for the
 * next header. A prefetch changes nothing the consumer can see. */
#if defined(__x86_64__) || defined(__i386__)
static _Atomic int have_prefetchw = -1;

static void prefetch_lines(const struct shm_ring *r, uint64_t from, uint64_t to)
{
	int have = atomic_load_explicit(&have_prefetchw, memory_order_relaxed);

	if (have < 0) {
		unsigned int a, b, c = 0, d;

		/* CPUID 0x80000001 ECX bit 8: PREFETCHW (every thread that
		 * asks finds the same) */
		have = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1U << 8));
		atomic_store_explicit(&have_prefetchw, have, memory_order_relaxed);
	}
	if (!have)
		return;
	/* (asm: __builtin_prefetch emits it only in code built for it) */
	for (uint64_t a = from; a < to; a += 64)
		__asm__ volatile("prefetchw %0" : : "m"(r->data[a & (r->size - 1)]));
}
#else
static void prefetch_lines(const struct shm_ring *r, uint64_t from, uint64_t to)
{
	for (uint64_t a = from; a < to; a += 64)
		__builtin_prefetch(&r->data[a & (r->size - 1)], 1, 3);
}
#endif

#define PREFETCH_FROM	64
#define PREFETCH_TO	512

/* (every line of the window each time: a line asked for once, messages
 * before it is written, was taken back by then; with the vCPUs far apart
 * asking once per line gained nothing) */
static void prefetch_ahead(const struct shm_ring *r)
{
	uint64_t end = r->pos + PREFETCH_TO, lim = r->seen_head + r->size;

	if (end > lim)
		end = lim;	/* (unread records beyond: the consumer's) */
	prefetch_lines(r, (r->pos + PREFETCH_FROM) & ~63ULL, end);
}

/* The body of a mapped record after its header (32 bytes). */
struct mapped_body {
	uint64_t addr;
	uint32_t fd, pad;
	uint64_t ino, off;
};
_Static_assert(sizeof(struct mapped_body) == 32, "mapped record body: 32 bytes");
#define REMOTE_SIZE	(SHM_REC_HDR + 8)
#define MAPPED_SIZE	(SHM_REC_HDR + sizeof(struct mapped_body))

/* One remote record for (part of) a piece: 16 bytes in the ring; or, with
 * loc (where addr is in a memfd), a mapped record: 40 bytes. */
static uint64_t write_remote(struct shm_ring *r, uint64_t pos, const uint8_t *addr, uint32_t len,
			     const struct shm_ring_loc *loc)
{
	uint64_t a = (uint64_t)(uintptr_t)addr;

	if (loc) {
		struct mapped_body b = {
			.addr = a, .fd = loc->fd, .ino = loc->ino, .off = loc->off,
		};

		ring_in(r, pos + SHM_REC_HDR, (const uint8_t *)&b, sizeof(b), NULL);
		put_hdr(r, pos, SHM_REC_MAPPED, len, pos + MAPPED_SIZE);
		return MAPPED_SIZE;
	}
	ring_in(r, pos + SHM_REC_HDR, (const uint8_t *)&a, sizeof(a), NULL);
	put_hdr(r, pos, SHM_REC_REMOTE, len, pos + REMOTE_SIZE);
	return REMOTE_SIZE;
}

/* One inline record whose len bytes (n pieces of our own) fit whole at
 * r->pos without wrapping: write and publish it. */
static void write_inline(struct shm_ring *r, const struct iovec *iov, int n, uint64_t len)
{
	uint64_t pos = r->pos;
	uint8_t *d = r->data + (pos & (r->size - 1)) + SHM_REC_HDR;

	for (int i = 0; i < n; i++) {
		memcpy(d, iov[i].iov_base, iov[i].iov_len);
		d += iov[i].iov_len;
	}
	r->pos = pos + SHM_REC_HDR + pad8(len);
	put_hdr(r, pos, SHM_REC_INLINE, (uint32_t)len, r->pos);
	atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
	prefetch_ahead(r);
}

bool shm_ring_fits(struct shm_ring *r, size_t len)
{
	uint64_t need = SHM_REC_HDR + pad8(len) + SHM_REC_HDR, used;

	if (len > SHM_REC_MAX)
		return false;
	if (r->size - (r->pos - r->seen_head) >= need && r->pos - r->seen_head <= r->size)
		return true;
	/* (as shm_ring_write: what we saw is never ahead of the truth) */
	used = r->pos - atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	if (used > r->size)
		return false;	/* (corrupt: shm_ring_write says so) */
	r->seen_head = r->pos - used;
	return r->size - used >= need;
}

ssize_t shm_ring_write_small(struct shm_ring *r, const struct iovec *iov, int n, size_t len)
{
	return shm_ring_write_small_app(r, iov, n, len, n, NULL);
}

ssize_t shm_ring_write_small_app(struct shm_ring *r, const struct iovec *iov, int n, size_t len,
				 int app, int (*get)(void *, const void *, size_t))
{
	uint64_t used, total = 0, pos = r->pos, size = small_size(pos, len);
	uint64_t need = size + SHM_REC_HDR;

	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (!len || len > SHM_SMALL_MAX || total != len)
		return -EINVAL;
	/* (as shm_ring_write: what we saw is never ahead of the truth) */
	used = pos - r->seen_head;
	if (used > r->size || r->size - used < need) {
		used = pos - atomic_load_explicit(&r->ctl->head, memory_order_acquire);
		if (used > r->size)
			return -EPROTO;
		r->seen_head = pos - used;
		if (r->size - used < need)
			return 0;
	}
	/* (a piece that faults leaves bytes where nothing is published:
	 * the next record writes over them) */
	if ((pos & (r->size - 1)) + SHM_REC_HDR + len <= r->size) {
		uint8_t *d = r->data + (pos & (r->size - 1)) + SHM_REC_HDR;

		for (int i = 0; i < n; d += iov[i].iov_len, i++) {
			if (i < app || !get)
				memcpy(d, iov[i].iov_base, iov[i].iov_len);
			else if (get(d, iov[i].iov_base, iov[i].iov_len))
				return -EFAULT;
		}
	} else {
		/* The body wraps (a header never does: both are 8-aligned). */
		for (int i = 0, off = 0; i < n; off += (int)iov[i].iov_len, i++)
			if (ring_in(r, pos + SHM_REC_HDR + (uint64_t)off, iov[i].iov_base,
				    iov[i].iov_len, i < app ? NULL : get))
				return -EFAULT;
	}
	r->pos = pos + size;
	put_hdr(r, pos, SHM_REC_SMALL, (uint32_t)len, r->pos);
	atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
	prefetch_ahead(r);
	return (ssize_t)len;
}

ssize_t shm_ring_write(struct shm_ring *r, const struct iovec *iov, const uint8_t *kinds, int n,
		       const struct shm_ring_io *io, struct shm_rec_note *notes, int *nnotes)
{
	uint64_t pos = r->pos, head = r->seen_head, used, free;
	size_t written = 0, off = 0, loc_at = 0;
	int i = 0, noted = 0, maxnotes = notes ? *nnotes : 0, loc_piece = -1, inl_piece = -1;
	bool fault = false, mapped = false;
	struct shm_ring_loc loc = { 0 };

	/* (every return says how many notes: a corrupt head returns before
	 * anything is written, and the caller read the capacity it passed
	 * as a count of garbage notes: test_net_chaos crashed on it) */
	if (notes)
		*nnotes = 0;
	/* (what we saw is never ahead of the truth: free space is only
	 * underestimated, and with half the ring free a record fits) */
	if (pos - head > r->size / 2)
		head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	used = pos - head;
	/* the consumer cannot have released what was never published */
	if (used > r->size)
		return -EPROTO;
	r->seen_head = head;
	/* (the header word after the last record is cleared too) */
	free = r->size - used < SHM_REC_HDR ? 0 : r->size - used - SHM_REC_HDR;
	if (n <= 4) {
		/* The common case, a few FPDUs of our own bytes (a small
		 * message): one inline record, if it fits whole and does not
		 * wrap, written without the general loop's bookkeeping. */
		uint64_t len = 0;

		for (i = 0; i < n && kinds[i] == SHM_OWN; i++)
			len += iov[i].iov_len;
		if (i == n && len && len <= SHM_REC_MAX && free >= SHM_REC_HDR + pad8(len) &&
		    (pos & (r->size - 1)) + SHM_REC_HDR + len <= r->size) {
			write_inline(r, iov, n, len);
			if (notes)
				*nnotes = 0;
			return (ssize_t)len;
		}
		i = 0;
	}
	while (i < n && !fault) {
		uint64_t cap, len = 0, start = pos;

		if (off == iov[i].iov_len) {
			i++;
			off = 0;
			continue;
		}
		if (kinds[i] == SHM_PULL) {
			uint32_t take = (uint32_t)(iov[i].iov_len - off < SHM_REC_MAX
						   ? iov[i].iov_len - off : SHM_REC_MAX);
			struct shm_ring_loc here;
			uint64_t size;

			/* once per piece: is the rest of it in a memfd? */
			if (loc_piece != i) {
				loc_piece = i;
				loc_at = off;
				mapped = io->locate &&
					 io->locate(io->arg, (const uint8_t *)iov[i].iov_base + off,
						    iov[i].iov_len - off, &loc);
			}
			size = mapped ? MAPPED_SIZE : REMOTE_SIZE;
			if (!mapped && io->no_pull) {
				/* (nothing the consumer could pull: inline) */
				inl_piece = i;
				goto inline_rec;
			}
			if (free < size)
				break;
			if (noted < maxnotes)
				notes[noted++] = (struct shm_rec_note){ pos, i };
			here = loc;
			here.off += off - loc_at;
			pos += write_remote(r, pos, (const uint8_t *)iov[i].iov_base + off, take,
					    mapped ? &here : NULL);
			free -= size;
			written += take;
			off += take;
			continue;
		}
inline_rec:
		/* an inline record: the bytes of consecutive copied pieces */
		if (free < SHM_REC_HDR + 8)
			break;
		cap = (free - SHM_REC_HDR) & ~7ULL;
		if (cap > SHM_REC_MAX)
			cap = SHM_REC_MAX;
		while (i < n && (kinds[i] != SHM_PULL || i == inl_piece) && len < cap) {
			size_t take = iov[i].iov_len - off;

			if (take > cap - len)
				take = (size_t)(cap - len);
			if (ring_in(r, start + SHM_REC_HDR + len, (const uint8_t *)iov[i].iov_base + off,
				    take, kinds[i] != SHM_OWN ? io->get : NULL)) {
				fault = true;
				break;
			}
			len += take;
			off += take;
			if (off == iov[i].iov_len) {
				i++;
				off = 0;
			}
		}
		if (!len)
			break;
		pos = start + SHM_REC_HDR + pad8(len);
		put_hdr(r, start, SHM_REC_INLINE, (uint32_t)len, pos);
		free -= SHM_REC_HDR + pad8(len);
		written += len;
	}
	if (pos != r->pos) {
		r->pos = pos;
		atomic_store_explicit(&r->ctl->tail, pos, memory_order_release);
		prefetch_ahead(r);
	}
	if (notes)
		*nnotes = noted;
	if (fault && !written)
		return -EFAULT;
	return (ssize_t)written;
}

bool shm_ring_faulted(const struct shm_ring *r, uint64_t pos)
{
	uint32_t kind;

	ring_out(r, pos, (uint8_t *)&kind, sizeof(kind), NULL);
	return kind == SHM_REC_FAULTED;
}

uint64_t shm_ring_released(const struct shm_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);

	return r->pos - head > r->size ? r->pos : head;
}

void shm_ring_revoke(struct shm_ring *r)
{
	/* (seq_cst: before the flushes that give the program its buffers
	 * back, against the consumer's fence after its copy) */
	atomic_store_explicit(&r->ctl->revoked, 1, memory_order_seq_cst);
}

/* ---- consumer ------------------------------------------------------------ */

/* Read and check the next record's header. 1: r->rec is set up, 0: the
 * ring is empty, -EPROTO. */
static int next_record(struct shm_ring *r)
{
	/* A header is published last, over a word that was zero (put_hdr):
	 * once it reads non-zero, the record is all there. */
	uint64_t w = __atomic_load_n(hdr_word(r, r->pos), __ATOMIC_ACQUIRE), size;
	uint32_t h[2];

	if (!w)
		return 0;
	memcpy(h, &w, sizeof(h));
	if (h[1] == 0 || h[1] > SHM_REC_MAX)
		return -EPROTO;
	if (h[0] == SHM_REC_INLINE)
		size = SHM_REC_HDR + pad8(h[1]);
	else if (h[0] == SHM_REC_SMALL && h[1] <= SHM_SMALL_MAX)
		size = small_size(r->pos, h[1]);
	else if (h[0] == SHM_REC_REMOTE)
		size = REMOTE_SIZE;
	else if (h[0] == SHM_REC_MAPPED)
		size = MAPPED_SIZE;
	else
		return -EPROTO;
	r->rec_addr = 0;
	r->rec_fd = 0;
	r->rec_ino = r->rec_moff = 0;
	if (h[0] == SHM_REC_REMOTE) {
		ring_out(r, r->pos + SHM_REC_HDR, (uint8_t *)&r->rec_addr, 8, NULL);
	} else if (h[0] == SHM_REC_MAPPED) {
		struct mapped_body b;

		ring_out(r, r->pos + SHM_REC_HDR, (uint8_t *)&b, sizeof(b), NULL);
		/* (the mapping side checks off + len against the memfd's
		 * size; here only that it does not wrap) */
		if (b.pad || b.off > UINT64_MAX - h[1])
			return -EPROTO;
		r->rec_addr = b.addr;
		r->rec_fd = b.fd;
		r->rec_ino = b.ino;
		r->rec_moff = b.off;
	}
	r->rec = true;
	r->rec_fault = false;
	r->rec_kind = h[0];
	r->rec_len = h[1];
	r->rec_off = 0;
	r->rec_size = size;
	return 1;
}

/* Up to `want` bytes of iov from (di, doff) on, as at most max pieces. */
static int iov_window(const struct iovec *iov, int n, int di, size_t doff, size_t want,
		      struct iovec *out, int max)
{
	int k = 0;

	while (di < n && want && k < max) {
		size_t take = iov[di].iov_len - doff;

		if (take > want)
			take = want;
		if (take)
			out[k++] = (struct iovec){ (uint8_t *)iov[di].iov_base + doff, take };
		want -= take;
		di++;
		doff = 0;
	}
	return k;
}

/* Zeros in place of a remote record's bytes the producer no longer has,
 * as the TCP channel sends zeros for a source that faults (the stream
 * stays framed); the record is marked for the producer. */
static ssize_t zeros(struct shm_ring *r, const struct iovec *dst, int k, size_t take, bool app,
		     const struct shm_ring_io *io)
{
	static const uint8_t z[4096];
	uint32_t mark = SHM_REC_FAULTED;
	size_t done = 0;

	if (!r->rec_fault) {
		r->rec_fault = true;
		r->faults++;
		ring_in(r, r->pos, (const uint8_t *)&mark, sizeof(mark), NULL);
	}
	for (int j = 0; j < k && done < take; j++) {
		for (size_t o = 0; o < dst[j].iov_len && done < take;) {
			size_t c = dst[j].iov_len - o;

			c = c < sizeof(z) ? c : sizeof(z);
			c = c < take - done ? c : take - done;
			if (app ? io->put((uint8_t *)dst[j].iov_base + o, z, c)
				: (memcpy((uint8_t *)dst[j].iov_base + o, z, c), 0))
				return done ? (ssize_t)done : -EFAULT;
			o += c;
			done += c;
		}
	}
	return (ssize_t)done;
}

/* A remote record's bytes: pull them from the producer. The kernel does
 * not say whose memory faulted: a failed pull is tried again into a
 * bounce buffer, which tells ours (-EFAULT) from the producer's (zeros). */
static ssize_t pull(struct shm_ring *r, const struct iovec *dst, int k, size_t take, bool app,
		    const struct shm_ring_io *io)
{
	uint8_t probe[256];
	struct iovec piov = { probe, take < sizeof(probe) ? take : sizeof(probe) };
	ssize_t got;

	if (r->rec_fault)
		return zeros(r, dst, k, take, app, io);
	got = io->pull(io->arg, dst, k, r->rec_addr + r->rec_off, take);
	if (got > 0)
		return got;
	if (errno == ESRCH)
		return -EIO;
	got = io->pull(io->arg, &piov, 1, r->rec_addr + r->rec_off, piov.iov_len);
	if (got == (ssize_t)piov.iov_len)
		return -EFAULT;
	if (got < 0 && errno == ESRCH)
		return -EIO;
	return zeros(r, dst, k, take, app, io);
}

/* A mapped record's bytes, from our read-only mapping of the producer's
 * memfd (io->map), with put if app: our target may be gone. Returns bytes
 * copied, -EFAULT if our memory faulted first, or 0: no mapping (or a
 * fault the mapping should not have), pull instead. */
static ssize_t copy_mapped(struct shm_ring *r, const struct iovec *dst, int k, size_t take,
			   bool app, const struct shm_ring_io *io)
{
	const uint8_t *src;
	size_t done = 0;

	if (!io->map || r->rec_fault)
		return 0;
	/* (next_record made sure this does not wrap) */
	src = io->map(io->arg, r->rec_fd, r->rec_ino, r->rec_moff + r->rec_off, take);
	if (!src)
		return 0;
	if (io->help && app && k == 1 && dst[0].iov_len >= take) {
		struct shm_ring_loc loc = { r->rec_fd, r->rec_ino, r->rec_moff + r->rec_off };
		ssize_t h = io->help(io->arg, dst[0].iov_base, src, take, r->rec_addr + r->rec_off,
				     &loc);

		if (h)
			return h;
	}
	for (int j = 0; j < k && done < take; j++) {
		size_t c = dst[j].iov_len < take - done ? dst[j].iov_len : take - done;
		uint8_t probe[256];

		if (app ? !io->put(dst[j].iov_base, src + done, c)
			: (memcpy(dst[j].iov_base, src + done, c), true)) {
			done += c;
			continue;
		}
		if (done)
			break;
		/* Whose page faulted? Not the mapping's (io->map's promise),
		 * but should it be, the pull decides. */
		if (io->get(probe, src, c < sizeof(probe) ? c : sizeof(probe)))
			return 0;
		return -EFAULT;
	}
	return (ssize_t)done;
}

static bool is_remote(uint32_t kind)
{
	return kind == SHM_REC_REMOTE || kind == SHM_REC_MAPPED;
}

/* Copy from the current record into iov at (di, doff). Returns bytes;
 * *mapped: they came from a mapping. */
static ssize_t read_piece(struct shm_ring *r, const struct iovec *iov, int n, int di, size_t doff,
			  size_t want, bool app, const struct shm_ring_io *io, bool *mapped)
{
	size_t take = r->rec_len - r->rec_off, done = 0;

	*mapped = false;
	if (take > want)
		take = want;
	if (is_remote(r->rec_kind)) {
		struct iovec w[64];
		int k = iov_window(iov, n, di, doff, take, w, 64);
		size_t room = 0;
		ssize_t got;

		for (int j = 0; j < k; j++)
			room += w[j].iov_len;
		if (room < take)
			take = room;
		got = 0;
		if (r->rec_kind == SHM_REC_MAPPED) {
			got = copy_mapped(r, w, k, take, app, io);
			*mapped = got > 0;
		}
		if (!got)
			got = pull(r, w, k, take, app, io);
		/* Copied, then checked: a copy that the revoke did not see
		 * through read the bytes before the program had them back. */
		atomic_thread_fence(memory_order_seq_cst);
		if (got > 0 && atomic_load_explicit(&r->ctl->revoked, memory_order_relaxed))
			return -EIO;
		return got;
	}
	while (done < take && di < n) {
		size_t k = iov[di].iov_len - doff;

		if (k > take - done)
			k = take - done;
		if (ring_out(r, r->pos + SHM_REC_HDR + r->rec_off + done,
			     (uint8_t *)iov[di].iov_base + doff, k, app ? io->put : NULL))
			return done ? (ssize_t)done : -EFAULT;
		done += k;
		di++;
		doff = 0;
	}
	return (ssize_t)done;
}

ssize_t shm_ring_read(struct shm_ring *r, const struct iovec *iov, int n, bool app,
		      const struct shm_ring_io *io)
{
	size_t want = 0, got = 0, doff = 0;
	bool released = false, mapped;
	int di = 0;
	ssize_t ret = 0;

	for (int j = 0; j < n; j++)
		want += iov[j].iov_len;
	while (got < want) {
		ssize_t k;

		if (!r->rec) {
			int e = next_record(r);

			if (e <= 0) {
				ret = e;
				break;
			}
		}
		if (is_remote(r->rec_kind) && got)
			break;
		if (r->rec_kind == SHM_REC_SMALL) {
			ret = -ENOMSG;	/* (returned only if nothing was read) */
			break;
		}
		k = read_piece(r, iov, n, di, doff, want - got, app, io, &mapped);
		if (k < 0) {
			ret = k;
			break;
		}
		if (mapped)
			r->mapped += (uint64_t)k;
		else if (is_remote(r->rec_kind) && !r->rec_fault)
			r->pulled += (uint64_t)k;
		else
			r->inlined += (uint64_t)k;
		got += (size_t)k;
		r->rec_off += (uint32_t)k;
		for (size_t adv = (size_t)k; adv;) {
			size_t s = iov[di].iov_len - doff;

			if (s > adv)
				s = adv;
			adv -= s;
			doff += s;
			if (doff == iov[di].iov_len) {
				di++;
				doff = 0;
			}
		}
		if (r->rec_off == r->rec_len) {
			r->pos += r->rec_size;
			r->rec = false;
			released = true;
		}
	}
	if (released)
		atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
	if (got)
		return (ssize_t)got;
	return ret;
}

ssize_t shm_ring_small_begin(struct shm_ring *r, void *hdr, size_t n)
{
	if (!r->rec) {
		int e = next_record(r);

		if (e <= 0)
			return e;
	}
	if (r->rec_kind != SHM_REC_SMALL)
		return 0;
	ring_out(r, r->pos + SHM_REC_HDR, hdr, n < r->rec_len ? n : r->rec_len, NULL);
	return (ssize_t)r->rec_len;
}

void shm_ring_small_end(struct shm_ring *r, void *dst, size_t off, size_t n)
{
	if (!r->rec || r->rec_kind != SHM_REC_SMALL)
		return;
	/* (the caller's bounds come from its own copy of the header: a
	 * body the record does not hold is not read) */
	if (off <= r->rec_len && n <= r->rec_len - off && n)
		ring_out(r, r->pos + SHM_REC_HDR + off, dst, n, NULL);
	r->inlined += r->rec_len;
	/* Zero the words that start its lines, where a record of the next
	 * lap may start after a small one: the producer finds them zero and
	 * leaves them (put_hdr). Before the release: then the space is the
	 * producer's again. */
	for (uint64_t a = (r->pos + SHM_LINE - 1) & ~(SHM_LINE - 1); a < r->pos + r->rec_size;
	     a += SHM_LINE)
		__atomic_store_n(hdr_word(r, a), 0, __ATOMIC_RELAXED);
	r->pos += r->rec_size;
	r->rec = false;
	atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

ssize_t shm_ring_read_small(struct shm_ring *r, void *buf, size_t cap)
{
	ssize_t k = shm_ring_small_begin(r, buf, 0);

	if (k <= 0)
		return k;
	if ((size_t)k > cap)
		return -EPROTO;
	shm_ring_small_end(r, buf, 0, (size_t)k);
	return k;
}

int shm_ring_small_alone(const struct shm_ring *r)
{
	uint64_t w, after;
	uint32_t h[2];

	if (r->rec)
		return -1;
	w = __atomic_load_n(hdr_word(r, r->pos), __ATOMIC_ACQUIRE);
	memcpy(h, &w, sizeof(h));
	if (h[0] != SHM_REC_SMALL || !h[1] || h[1] > SHM_SMALL_MAX)
		return -1;
	after = r->pos + small_size(r->pos, h[1]);
	if (__atomic_load_n(hdr_word(r, after), __ATOMIC_RELAXED))
		return -1;
	return r->data[(r->pos + SHM_REC_HDR) & (r->size - 1)];
}

int shm_ring_pending(struct shm_ring *r)
{
	return r->rec || !shm_ring_empty_at(r, r->pos);
}

bool shm_ring_empty_at(const struct shm_ring *r, uint64_t pos)
{
	return !__atomic_load_n(hdr_word(r, pos & ~7ULL), __ATOMIC_ACQUIRE);
}

bool shm_ring_stalled(struct shm_ring *r, uint64_t now, uint64_t limit)
{
	uint64_t head, tail, since = atomic_load_explicit(&r->watch_ns, memory_order_relaxed);

	if (now - atomic_load_explicit(&r->watch_at, memory_order_relaxed) < limit / 4)
		return false;
	atomic_store_explicit(&r->watch_at, now, memory_order_relaxed);
	/* While we keep writing the consumer is not looked at: the head's
	 * line is its, written after every record it reads, and each look
	 * costs both sides a miss (far-apart cores: 8-byte ib_send_lat
	 * 0.54 -> 0.57 us, looking every 5 us). A stall shows once our
	 * writes stop: we wait for an answer, or the ring is full. */
	tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
	if (tail != atomic_load_explicit(&r->watch_tail, memory_order_relaxed)) {
		atomic_store_explicit(&r->watch_tail, tail, memory_order_relaxed);
		atomic_store_explicit(&r->watch_ns, 0, memory_order_relaxed);
		return false;
	}
	head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
	if (head == tail || !since || head != atomic_load_explicit(&r->watch_head, memory_order_relaxed)) {
		/* nothing unread, or the consumer moved: watch from now */
		atomic_store_explicit(&r->watch_head, head, memory_order_relaxed);
		atomic_store_explicit(&r->watch_ns, head == tail ? 0 : now, memory_order_relaxed);
		atomic_store_explicit(&r->watch_told, false, memory_order_relaxed);
		return false;
	}
	return now - since >= limit &&
	       !atomic_exchange_explicit(&r->watch_told, true, memory_order_relaxed);
}
