/* The side channel of a same-host link: see shm_side.h. */
#include "chan/shm_side.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SIDE_MAGIC	0x44535253U	/* "SRSD" */
#define SIDE_VERSION	1
/* What one take reads at most: a peer that keeps writing cannot keep the
 * receiver here. */
#define SIDE_DRAIN	(2 * SHM_SIDE_MAX)

/* One announcement: a memfd (SCM_RIGHTS) and what records call it. */
struct side_msg {
	uint32_t magic, version;
	uint32_t pfd, pad;		/* its number in the sender */
	uint64_t ino;
};

ssize_t shm_fds_send(int sock, const void *p, size_t len, const int *fds, int n, int flags)
{
	union {
		char buf[CMSG_SPACE(SHM_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)p, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t r;

	if (n < 0 || n > SHM_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	memset(&u, 0, sizeof(u));
	if (n) {
		struct cmsghdr *cm;

		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	}
	do
		r = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r;
}

ssize_t shm_fds_recv(int sock, void *p, size_t len, int *fds, int max, int *nfds, int flags)
{
	union {
		char buf[CMSG_SPACE(SHM_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { p, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	int got[SHM_FDS_MAX], n = 0;
	bool extra = false;
	ssize_t r;

	*nfds = 0;
	memset(&u, 0, sizeof(u));
	do
		r = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return r;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (n < max && n < SHM_FDS_MAX) {
				got[n++] = fd;
			} else {
				close(fd);
				extra = true;
			}
		}
	}
	if (extra || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		for (int i = 0; i < n; i++)
			close(got[i]);
		errno = EMSGSIZE;
		return -1;
	}
	memcpy(fds, got, (size_t)n * sizeof(int));
	*nfds = n;
	return r;
}

void shm_side_init(struct shm_side *s)
{
	memset(s, 0, sizeof(*s));
	atomic_init(&s->fd, -1);
}

void shm_side_close(struct shm_side *s)
{
	int fd = atomic_load(&s->fd);

	if (fd >= 0)
		close(fd);
	atomic_store(&s->fd, -1);
	for (int i = 0; i < s->ngot; i++)
		close(s->got[i].fd);
	s->ngot = 0;
}

/* What goes on the side channel goes to a peer that has no ptrace access
 * to us (else it would have taken it with pidfd_getfd): the descriptor
 * it gets is the memfd's own, read-write, and any descriptor can open it
 * again for writing. So the memfd is sealed first against writes through
 * any new mapping or descriptor (F_SEAL_FUTURE_WRITE: our own mapping,
 * made before, stays writable), and then against seals: the peer can
 * map it only to read, write(2) and hole punching fail, and what it
 * places in our memory is still only what our own checks allow
 * (DESIGN.md decision 23: pull, not push). A memfd that cannot be sealed
 * (a kernel before 5.1) is not sent: its records go inline. */
static bool seal_for_peer(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals >= 0 && (seals & F_SEAL_FUTURE_WRITE) && (seals & F_SEAL_SEAL))
		return true;
	return fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0;
}

bool shm_side_send(struct shm_side *s, int fd, uint64_t ino)
{
	struct side_msg m = { .magic = SIDE_MAGIC, .version = SIDE_VERSION,
			      .pfd = (uint32_t)fd, .ino = ino };
	int sfd = atomic_load_explicit(&s->fd, memory_order_relaxed);

	if (sfd < 0 || fd < 0)
		return false;
	for (int i = 0; i < s->nsent; i++)
		if (s->sent[i].pfd == (uint32_t)fd && s->sent[i].ino == ino)
			return true;
	if (s->nsent == SHM_SIDE_MAX || !seal_for_peer(fd) ||
	    shm_fds_send(sfd, &m, sizeof(m), &fd, 1, MSG_DONTWAIT) != (ssize_t)sizeof(m))
		return false;
	s->sent[s->nsent].pfd = (uint32_t)fd;
	s->sent[s->nsent].ino = ino;
	s->nsent++;
	return true;
}

/* One message off the connection: 1 (taken or dropped), 0 (nothing
 * there, or the connection is gone). */
static int take_one(struct shm_side *s, int sfd)
{
	struct side_msg m;
	int fds[1], nfds;
	ssize_t n = shm_fds_recv(sfd, &m, sizeof(m), fds, 1, &nfds, MSG_DONTWAIT);

	if (n < 0)
		return errno == EMSGSIZE;	/* (dropped, closed) */
	if (n == 0)
		return 0;
	if (n == (ssize_t)sizeof(m) && nfds == 1 && m.magic == SIDE_MAGIC &&
	    m.version == SIDE_VERSION && s->ngot < SHM_SIDE_MAX) {
		s->got[s->ngot].pfd = m.pfd;
		s->got[s->ngot].ino = m.ino;
		s->got[s->ngot].fd = fds[0];
		s->ngot++;
		return 1;
	}
	if (nfds)
		close(fds[0]);
	return 1;
}

int shm_side_take(struct shm_side *s, uint32_t pfd, uint64_t ino)
{
	int sfd = atomic_load_explicit(&s->fd, memory_order_relaxed);

	for (int k = 0; sfd >= 0 && k < SIDE_DRAIN && take_one(s, sfd); k++)
		;
	for (int i = 0; i < s->ngot; i++)
		if (s->got[i].pfd == pfd && s->got[i].ino == ino)
			return fcntl(s->got[i].fd, F_DUPFD_CLOEXEC, 0);
	return -1;
}
