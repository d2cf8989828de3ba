/* Same host, one user-space copy: large registered regions backed by a
 * memfd that a same-host peer can map (DESIGN.md decision 23, "mapped
 * records").
 *
 * process_vm_readv copies in the kernel a page at a time (about a
 * quarter of a user-space memcpy here). A peer that can map the sender's
 * source memory copies it with memcpy instead. Application memory is
 * private, so at registration the whole pages inside a large region that
 * lie in private anonymous read-write memory are moved onto a sealed
 * memfd (contents copied, same address, same protection); the peer takes
 * that memfd with pidfd_getfd and maps it read-only. Deregistration
 * moves the pages back to private anonymous memory, and a forked child
 * gets private copies of every shared range (as the kernel copies pinned
 * pages at fork), so the program sees no difference.
 *
 * Registration never fails because of this module: a range it cannot
 * share simply stays private, and its transfers use process_vm_readv.
 */
#ifndef SOFTRNIC_SHM_MAP_H
#define SOFTRNIC_SHM_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a piece of our memory lives in a shared range's memfd. */
struct shm_map_loc {
	int fd;			/* the memfd's number in this process */
	uint64_t ino;		/* its inode (fd numbers are reused) */
	uint64_t off;		/* offset of the piece's first byte in it */
	uint64_t size;		/* the memfd's size (sealed: cannot shrink) */
};

/* Registration of [addr, addr + len) (a plain MR; not implicit, not
 * device memory): share its whole inner pages if the region is large
 * enough (SOFTRNIC_SHM_MAP_MIN) and sharing is on (SOFTRNIC_SHM_MAP).
 * A range already shared by an earlier registration is counted again.
 * True if this registration was counted (its range is shared): only such
 * a registration calls shm_map_unreg. */
bool shm_map_reg(void *addr, size_t len);
/* Its deregistration (same arguments as the shm_map_reg call that
 * returned true): the last one moves the pages back to private memory. */
void shm_map_unreg(void *addr, size_t len);
/* Is [p, p + len) wholly inside one shared range? Fills *loc if so.
 * Lock-free enough for the send path (a read lock at most). */
bool shm_map_find(const void *p, size_t len, struct shm_map_loc *loc);

#endif
