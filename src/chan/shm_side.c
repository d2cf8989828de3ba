/* The side channel of a same-host link: see shm_side.h. */
#include "chan/shm_side.h"

#include <errno.h>
#include <fcntl.h>
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

bool shm_side_send(struct shm_side *s, int fd, uint64_t ino)
{
	struct side_msg m = { .magic = SIDE_MAGIC, .version = SIDE_VERSION,
			      .pfd = (uint32_t)fd, .ino = ino };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int sfd = atomic_load_explicit(&s->fd, memory_order_relaxed);
	ssize_t n;

	if (sfd < 0 || fd < 0)
		return false;
	for (int i = 0; i < s->nsent; i++)
		if (s->sent[i].pfd == (uint32_t)fd && s->sent[i].ino == ino)
			return true;
	if (s->nsent == SHM_SIDE_MAX)
		return false;
	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	do
		n = sendmsg(sfd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(m))
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
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct side_msg m;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	int fds[4], nfds = 0;
	ssize_t n;

	do
		n = recvmsg(sfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (nfds < 4)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if (n == (ssize_t)sizeof(m) && nfds == 1 && !(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) &&
	    m.magic == SIDE_MAGIC && m.version == SIDE_VERSION && s->ngot < SHM_SIDE_MAX) {
		s->got[s->ngot].pfd = m.pfd;
		s->got[s->ngot].ino = m.ino;
		s->got[s->ngot].fd = fds[0];
		s->ngot++;
		return 1;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
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
