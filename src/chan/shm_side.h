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
#include <sys/types.h>

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

/* SCM_RIGHTS, for the side channel and the descriptor server
 * (shm_setup.c). Send len bytes at p with n descriptors (at most
 * SHM_FDS_MAX): sendmsg's result. Receive at most len bytes into p and
 * the descriptors that come with them into fds (close-on-exec; *nfds
 * says how many): recvmsg's result, or -1 if the bytes or the
 * descriptors were cut short or more than max came (all closed then). */
#define SHM_FDS_MAX	4
ssize_t shm_fds_send(int sock, const void *p, size_t len, const int *fds, int n, int flags);
ssize_t shm_fds_recv(int sock, void *p, size_t len, int *fds, int max, int *nfds, int flags);

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
