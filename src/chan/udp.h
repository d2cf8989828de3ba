/* The UDP channel (DESIGN.md decision 4, "UD wire format"): every context
 * that has a UD QP owns one UDP socket bound to the same port number as
 * its TCP listener, so a UD QPN = (port << 8) | slot is a complete
 * address together with a GID, as for RC. Datagrams carry a small header
 * (wire/ud.h) naming the destination QPN, which demultiplexes them.
 *
 * Multicast groups are IP multicast groups (an IPv4-mapped MGID, or the
 * ff0e::ffff:a.b.c.d form, is an IPv4 group; any other ff00::/8 GID an
 * IPv6 one), carried to one well-known UDP port (SOFTRNIC_UD_MCAST_PORT,
 * default 4792) on which every attached context of every process holds
 * a socket bound to the group with SO_REUSEADDR/SO_REUSEPORT, so each
 * gets its own copy.
 *
 * Receiving runs in the progress thread, and in a program thread that
 * polls an empty CQ (chan_udp_poll, DESIGN.md decision 5); one receiver
 * at a time. Datagram loss is UD's normal semantics: what cannot be
 * delivered is counted and dropped, nothing waits for it.
 */
#ifndef SOFTRNIC_CHAN_UDP_H
#define SOFTRNIC_CHAN_UDP_H

#include "core/core.h"

#include <sys/uio.h>

#define SR_UD_MCAST_PORT	4792

/* Bind a UDP socket on port (the context's TCP port), dual-stack where
 * the host has IPv6: the fd (*family: AF_INET6 or AF_INET), or -errno
 * (-EADDRINUSE: another socket has that UDP port). */
int chan_udp_reserve(uint16_t port, int *family);
/* Open the context's UDP socket (once) and register it with the progress
 * engine. -EADDRINUSE if the UDP port twin of the TCP listener is taken. */
int chan_udp_open(struct sr_context *ctx);
/* Context teardown (before the progress engine goes). */
void chan_udp_ctx_close(struct sr_context *ctx);
/* An empty CQ was polled: receive what waits, in the caller's thread. */
void chan_udp_poll(struct sr_context *ctx, struct sr_cq *cq);

/* Send one datagram (iov: header, then payload) to dst_qpn at av.
 * 0: the socket took it. -EAGAIN: the socket is full; the progress
 * thread runs the context's UD send queues again when it has room.
 * -EFAULT: a payload page is not readable. Any other error: the network
 * refused it; UD treats that as a lost datagram (counted). */
int chan_udp_send(struct sr_context *ctx, const struct sr_ud_av *av, uint32_t dst_qpn,
		  const struct iovec *iov, int iovcnt);

/* An MGID as an IP group: true if g is multicast; *addr is the group as
 * an IPv6 address (IPv4-mapped for IPv4 groups). */
bool chan_udp_mgid(const union ibv_gid *g, struct in6_addr *addr);

/* ibv_attach_mcast / ibv_detach_mcast. -EINVAL not a multicast GID,
 * -ENOENT (detach) not attached; attach twice is not an error. */
int chan_udp_attach(struct sr_qp *qp, const union ibv_gid *mgid);
int chan_udp_detach(struct sr_qp *qp, const union ibv_gid *mgid);
void chan_udp_detach_all(struct sr_qp *qp);

/* What the UDP channel counted since the context was opened. */
struct sr_udp_stats {
	uint64_t rx_ok;			/* became a receive completion */
	uint64_t rx_bad;		/* truncated, oversized, bad header */
	uint64_t rx_no_qp;		/* no such QPN here, or not attached */
	uint64_t rx_state;		/* QP not able to receive */
	uint64_t rx_qkey;		/* Q_Key mismatch */
	uint64_t rx_no_wqe;		/* no receive posted */
	uint64_t tx_ok, tx_lost;	/* datagrams sent / refused by the network */
};
void chan_udp_stats(struct sr_context *ctx, struct sr_udp_stats *out);

#endif
