/* The side channel of a same-host link whose descriptors came through the
 * descriptor server (shm_setup.c): that Unix connection, kept open, on
 * which each side passes the other the memfds its mapped records will
 * name (DESIGN.md decision 23). A sender passes a memfd before the first
 * record that names it; a SEQPACKET message is queued whole when sendmsg
 * returns, so the receiver finds it there when it meets the record, and
 * never waits.
 *
 * What arrives is the peer's and is not trusted: a message that is not
 * exactly one announcement with one descriptor is dropped (its
 * descriptors closed), at most SHM_SIDE_MAX are kept, and what the
 * receiver maps is checked by its caller (shm.c: map_peer_fd) as a memfd
 * taken with pidfd_getfd is.
 */
#ifndef SOFTRNIC_SHM_SIDE_H
#define SOFTRNIC_SHM_SIDE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* memfds per link and direction (more go inline) */
#define SHM_SIDE_MAX	32

struct shm_side {
	_Atomic int fd;			/* the connection (-1: none), non-blocking */
	/* sender: the memfds passed, by our number and inode (tc->lock) */
	struct { uint32_t pfd; uint64_t ino; } sent[SHM_SIDE_MAX];
	int nsent;
	/* receiver: those received, by the sender's number and inode, and
	 * ours (rx_lock) */
	struct { uint32_t pfd; uint64_t ino; int fd; } got[SHM_SIDE_MAX];
	int ngot;
};

void shm_side_init(struct shm_side *s);
/* Close the connection and every descriptor received. */
void shm_side_close(struct shm_side *s);
/* Sender: has the peer got memfd fd (inode ino), or can it have it now
 * (without blocking)? */
bool shm_side_send(struct shm_side *s, int fd, uint64_t ino);
/* Receiver: take what has arrived, then a descriptor of ours (a new one,
 * close-on-exec, for the caller to close) for the sender's memfd (pfd,
 * ino), or -1. */
int shm_side_take(struct shm_side *s, uint32_t pfd, uint64_t ino);

#endif
