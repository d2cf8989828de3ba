/* Names librdmacm.so.1 must export that softrnic does not implement yet
 * (docs/COMPAT.md): programs linked with BIND_NOW need every one to start.
 *
 * rsockets (rsocket(7)) need a byte stream protocol of their own over RC
 * QPs: every call fails with ENOSYS, except rpoll and rselect. Those are
 * poll(2) and select(2) for descriptors that are not rsockets (rping,
 * ucmatose, udaddy and mckey poll their event channel with rpoll), and no
 * descriptor is an rsocket here, so they are exactly poll and select.
 */
#include "cm/cm.h"

#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define ENOSYS_INT { errno = ENOSYS; return -1; }

SR_EXPORT int rsocket(int domain, int type, int protocol) ENOSYS_INT
SR_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen) ENOSYS_INT
SR_EXPORT int rlisten(int socket, int backlog) ENOSYS_INT
SR_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen) ENOSYS_INT
SR_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen) ENOSYS_INT
SR_EXPORT int rshutdown(int socket, int how) ENOSYS_INT
SR_EXPORT int rclose(int socket) ENOSYS_INT
SR_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags) ENOSYS_INT
SR_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen) ENOSYS_INT
SR_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags) ENOSYS_INT
SR_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags) ENOSYS_INT
SR_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen) ENOSYS_INT
SR_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags) ENOSYS_INT
SR_EXPORT ssize_t rread(int socket, void *buf, size_t count) ENOSYS_INT
SR_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt) ENOSYS_INT
SR_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count) ENOSYS_INT
SR_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt) ENOSYS_INT
SR_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen) ENOSYS_INT
SR_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen) ENOSYS_INT
SR_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval,
			  socklen_t optlen) ENOSYS_INT
SR_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval,
			  socklen_t *optlen) ENOSYS_INT
SR_EXPORT int rfcntl(int socket, int cmd, ... /* arg */) ENOSYS_INT
SR_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags,
		       off_t offset) ENOSYS_INT
SR_EXPORT int riounmap(int socket, void *buf, size_t len) ENOSYS_INT
SR_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	errno = ENOSYS;
	return (size_t)-1;
}

SR_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

SR_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		      struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}
