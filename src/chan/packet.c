/* The packet channel (chan/packet.h): AF_PACKET on SOFTRNIC_RAW_IF. */
#include "chan/packet.h"
#include "core/raw.h"

#include <errno.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/filter.h>

/* Own frames that may still come back in (loopback): fingerprints. */
#define PK_RECENT	512
#define PK_POLL_MS	100	/* how soon the thread notices it must stop */

static struct {
	pthread_mutex_t lock;		/* everything below */
	int users;
	int fd;
	pthread_t thread;
	_Atomic bool stop;
	bool warned;
	bool loopback;			/* own frames come back in */
	uint64_t recent[PK_RECENT];	/* 0 = free */
	uint32_t recent_next;
	_Atomic uint64_t tx_ok, tx_drop, rx_ok, rx_own;
} pk = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* FNV-1a over the frame, never 0. */
static uint64_t fingerprint(const uint8_t *p, uint32_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ len;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h ? h : 1;
}

/* Was this frame sent by us and not yet seen back? Consumes the match. */
static bool pk_own(uint64_t fp)
{
	bool own = false;

	pthread_mutex_lock(&pk.lock);
	for (uint32_t i = 0; i < PK_RECENT; i++)
		if (pk.recent[i] == fp) {
			pk.recent[i] = 0;
			own = true;
			break;
		}
	pthread_mutex_unlock(&pk.lock);
	return own;
}

static void *pk_rx_thread(void *arg)
{
	static uint8_t buf[SR_RAW_MAX_FRAME + 64];
	struct pollfd p = { .fd = (int)(intptr_t)arg, .events = POLLIN };

	while (!atomic_load(&pk.stop)) {
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		ssize_t n;

		if (poll(&p, 1, PK_POLL_MS) <= 0)
			continue;
		n = recvfrom(p.fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
			     (struct sockaddr *)&from, &fl);
		if (n < ETH_HDR_LEN || n > SR_RAW_MAX_FRAME)
			continue;	/* nothing, a runt, or too big for us */
		/* our own transmissions show up as OUTGOING copies */
		if (from.sll_pkttype == PACKET_OUTGOING)
			continue;
		if (pk_own(fingerprint(buf, (uint32_t)n))) {
			atomic_fetch_add(&pk.rx_own, 1);
			continue;
		}
		atomic_fetch_add(&pk.rx_ok, 1);
		raw_switch(buf, (uint32_t)n);
	}
	return NULL;
}

static int pk_open(const char *ifname)
{
	struct sockaddr_ll sll;
	struct ifreq ifr;
	unsigned int idx = if_nametoindex(ifname);
	int fd, ret;

	if (!idx)
		return -ENODEV;
	fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (fd < 0)
		return -errno;
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = (int)idx;
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll))) {
		ret = -errno;
		close(fd);
		return ret;
	}
	/* The socket sees every frame of the interface (on lo: every TCP
	 * byte of every program), and frames that do not fit its buffer are
	 * dropped: no copies of what we send (the receive loop skipped them
	 * anyway, Linux 4.20+), and room for bursts (the forced size needs
	 * CAP_NET_ADMIN, which a program with CAP_NET_RAW often has). */
	{
		int one = 1, sz = 4 << 20;

		setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	pk.loopback = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_LOOPBACK);
	if (pk.loopback) {
		/* On lo the kernel's own traffic (every TCP and UDP byte of
		 * every program on the host) carries destination MAC 0, which
		 * no raw QP frame of ours does: the kernel drops it before it
		 * fills our buffer (a busy lo lost raw frames that way). */
		static struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),		/* dst MAC 0..3 */
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2),
			BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 4),		/* dst MAC 4..5 */
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0),
			BPF_STMT(BPF_RET | BPF_K, 0xffffffffU),		/* keep */
			BPF_STMT(BPF_RET | BPF_K, 0),			/* drop */
		};
		struct sock_fprog prog = { .len = (unsigned short)(sizeof(f) / sizeof(f[0])),
					   .filter = f };

		setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
	}
	pk.fd = fd;
	atomic_store(&pk.stop, false);
	ret = pthread_create(&pk.thread, NULL, pk_rx_thread, (void *)(intptr_t)fd);
	if (ret) {
		close(fd);
		pk.fd = -1;
		return -ret;
	}
	sr_info("raw packet QPs: frames go out on %s (ifindex %u)", ifname, idx);
	return 0;
}

bool chan_packet_get(void)
{
	const char *ifname = getenv("SOFTRNIC_RAW_IF");

	if (!ifname || !*ifname)
		return false;
	pthread_mutex_lock(&pk.lock);
	if (!pk.users) {
		int ret = pk_open(ifname);

		if (ret) {
			if (!pk.warned)
				sr_warn("SOFTRNIC_RAW_IF=%s: %s; raw packet QPs stay within "
					"the process", ifname, strerror(-ret));
			pk.warned = true;
			pthread_mutex_unlock(&pk.lock);
			return false;
		}
	}
	pk.users++;
	pthread_mutex_unlock(&pk.lock);
	return true;
}

void chan_packet_put(void)
{
	pthread_t t;
	int fd;

	pthread_mutex_lock(&pk.lock);
	if (--pk.users > 0) {
		pthread_mutex_unlock(&pk.lock);
		return;
	}
	t = pk.thread;
	fd = pk.fd;
	pk.fd = -1;
	atomic_store(&pk.stop, true);
	memset(pk.recent, 0, sizeof(pk.recent));
	pthread_mutex_unlock(&pk.lock);
	/* The thread may be delivering a frame (it takes QP locks, never
	 * pk.lock while delivering): join outside the lock. */
	pthread_join(t, NULL);
	close(fd);
	sr_dbg("packet channel closed: tx %llu (dropped %llu), rx %llu (own %llu)",
	       (unsigned long long)atomic_load(&pk.tx_ok),
	       (unsigned long long)atomic_load(&pk.tx_drop),
	       (unsigned long long)atomic_load(&pk.rx_ok),
	       (unsigned long long)atomic_load(&pk.rx_own));
}

void chan_packet_send(const uint8_t *frame, uint32_t len)
{
	uint64_t fp = fingerprint(frame, len);
	ssize_t n;
	int fd;

	pthread_mutex_lock(&pk.lock);
	fd = pk.fd;
	/* remembered before it is sent, so it cannot come back first; only
	 * a loopback interface brings it back */
	if (pk.loopback)
		pk.recent[pk.recent_next++ % PK_RECENT] = fp;
	pthread_mutex_unlock(&pk.lock);
	if (fd < 0)
		return;
	n = send(fd, frame, len, MSG_DONTWAIT);
	if (n == (ssize_t)len) {
		atomic_fetch_add(&pk.tx_ok, 1);
		return;
	}
	atomic_fetch_add(&pk.tx_drop, 1);
	sr_dbg("packet channel: a %u-byte frame was not sent: %s", len,
	       n < 0 ? strerror(errno) : "short");
}
