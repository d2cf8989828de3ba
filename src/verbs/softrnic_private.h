/* softrnic's private interface between its libibverbs.so.1 and its
 * librdmacm.so.1 (DESIGN.md decision 9), exported by libibverbs under the
 * SOFTRNIC_PRIVATE_1 version node. Nothing else should call these: they
 * exist so the CM can reach what the public verbs API lacks without a
 * second copy of the core. Conventions as inside: 0 or a negative errno.
 *
 * QPs are named by number, so a program that owns its QP (rping -q passes
 * conn_param->qp_num) is served like one the CM created, and a QP the
 * program destroyed meanwhile is simply not found.
 */
#ifndef SOFTRNIC_PRIVATE_H
#define SOFTRNIC_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct softrnic_stream;

/* A TCP socket the CM connected and negotiated MPA on (RFC 5044 §7.1,
 * RFC 6581): the data stream starts with the byte after the MPA frame. */
struct softrnic_stream_attr {
	int fd;			/* the stream takes it over on success */
	bool crc;		/* MPA CRC agreed */
	bool ext;		/* both ends set the softrnic flag (0x04) */
	bool plain;		/* the peer is known not to be softrnic: work
				 * requests beyond RFC 5040 RDMAP (immediate
				 * data, atomics) fail at post time */
	bool responder;		/* we sent the MPA reply: towards a plain
				 * iWARP peer, send nothing before its first
				 * FPDU (RFC 5044 §7.1.2, RFC 6581 §1) */
	bool rtr_wait;		/* our reply agreed to peer-to-peer mode:
				 * send nothing before the initiator's RTR
				 * (RFC 6581 §3), however long it takes */
	uint16_t ird, ord;	/* as negotiated */
	const void *rx;		/* bytes already read past the MPA frame */
	size_t rx_len;
	/* Called at most once when the stream ends other than by
	 * softrnic_stream_disconnect (peer disconnect or goodbye: orderly;
	 * reset, loss: not); the QP is in ERROR already. Runs in a libibverbs
	 * thread: it must not call the functions below. */
	void (*ended)(void *arg, bool orderly);
	void *arg;
};

/* Mark QP qpn as connected by the CM: moving it to RTR starts no
 * hand-connect (the CM attaches its stream instead). */
int softrnic_qp_set_cm(uint32_t qpn);
/* Attach the stream to QP qpn (in RTR or RTS). On success *out holds a
 * reference the caller drops with softrnic_stream_release. */
int softrnic_stream_attach(uint32_t qpn, const struct softrnic_stream_attr *a,
			   struct softrnic_stream **out);
/* rdma_disconnect: send what is queued and a goodbye, close, QP to ERROR.
 * Once it returns, ended() is not running and will not run. */
void softrnic_stream_disconnect(struct softrnic_stream *s);
/* Forget ended() (waiting for a running call to return), drop the ref. */
void softrnic_stream_release(struct softrnic_stream *s);

#endif
