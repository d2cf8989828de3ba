/* The same-host channel's setup over a softrnic stream: the OFFER,
 * ACCEPT / REFUSE and SWITCH messages, taking the offered link (with
 * pidfd_getfd, or from the offerer's descriptor server where that is not
 * permitted), and the server itself. The link and its I/O are in shm.c;
 * DESIGN.md decision 23 has the protocol.
 */
#include "chan/shm_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

static int read_boot_id(uint8_t id[16])
{
	char s[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;
	int k = 0;

	if (fd < 0)
		return -errno;
	n = read(fd, s, sizeof(s) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	s[n] = 0;
	memset(id, 0, 16);
	for (int i = 0; s[i] && k < 32; i++) {
		int v = s[i] >= '0' && s[i] <= '9' ? s[i] - '0'
		      : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;

		if (v < 0)
			continue;
		id[k / 2] |= (uint8_t)(v << (k % 2 ? 0 : 4));
		k++;
	}
	return k == 32 ? 0 : -EIO;
}

/* The offerer's side: a memfd with the header and two rings, and two
 * eventfds. */
static struct shm_link *link_create(void)
{
	struct shm_link *l = shm_link_alloc();
	struct shm_hdr *h;

	if (!l)
		return NULL;
	l->offerer = true;
	l->map_len = SHM_HDR_SIZE + 2 * SHM_RING_SIZE;
	/* Sealed at its size: a peer (or anyone it hands the memfd to) that
	 * could shrink it would make our next touch of the rings SIGBUS. */
	l->memfd = memfd_create("softrnic-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (l->memfd < 0 || ftruncate(l->memfd, (off_t)l->map_len) ||
	    fcntl(l->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		goto fail;
	l->map = mmap(NULL, l->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, l->memfd, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		goto fail;
	}
	l->efd_own = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->efd_peer = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->efd_own < 0 || l->efd_peer < 0)
		goto fail;
	if (getrandom(l->token, sizeof(l->token), 0) != (ssize_t)sizeof(l->token))
		goto fail;
	h = l->map;
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->ring_size = SHM_RING_SIZE;
	memcpy(h->token, l->token, sizeof(h->token));
	/* Both readers start as sleepers: the first bytes in a ring wake
	 * its reader's progress thread, whoever read the switch message (a
	 * poller asks for no wakeups, and may stop polling right after). */
	atomic_init(&h->ctl[0].rx_sleep, 1);
	atomic_init(&h->ctl[1].rx_sleep, 1);
	shm_link_rings(l, 0, 1, SHM_RING_SIZE);
	return l;
fail:
	shm_link_free(l);
	return NULL;
}

/* ---- the descriptor server ------------------------------------------------ */

/* pidfd_getfd needs ptrace access to the offerer. Two programs that
 * `softrnic run` started unprivileged live in sibling user namespaces,
 * where the kernel refuses it (each has every capability in its own
 * namespace, none in the other's), as it does under some ptrace policies.
 * For them the offerer's context keeps an abstract Unix socket with a
 * random name, told in the offer: asked with the token of a link still on
 * offer, it sends that link's memfd and eventfds (SCM_RIGHTS), once, to a
 * process of our uid. The asker checks the sender is the offer's pid; we
 * check, at ACCEPT, that the accepter is who took them and that nobody
 * else asked (the name can be listed in /proc/net/unix). Such a link
 * cannot pull either (process_vm_readv needs the same access), but the
 * server's connection stays open as the link's side channel, on which
 * each side sends the other the region memfds its mapped records name
 * (shm_side.c); other payloads go inline, one copy more,
 * still no system call per message. */
#define FDSRV_TIMEOUT_US	200000

static socklen_t fdsrv_addr(uint64_t name, struct sockaddr_un *a)
{
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "softrnic-shm-%016llx",
		     (unsigned long long)name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void sock_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = FDSRV_TIMEOUT_US };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int send_fds(int c, const struct shm_fdreq *r, const int fds[3])
{
	return shm_fds_send(c, r, sizeof(*r), fds, 3, 0) == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* One asker: its request, then the link's descriptors if it names one on
 * offer that nobody took yet. True if it got them: the connection is then
 * the link's side channel (kept, non-blocking). */
static bool fdsrv_serve(struct sr_tcp_ctx *t, int c)
{
	bool served = false;
	struct shm_fdreq q;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	struct sr_list *pos, *tmp;

	sock_timeouts(c);
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.uid != geteuid())
		return false;
	if (recv(c, &q, sizeof(q), 0) != (ssize_t)sizeof(q) || q.magic != SHM_MAGIC ||
	    q.version != SHM_VERSION)
		return false;
	pthread_mutex_lock(&t->offers_lock);
	sr_list_for_each_safe(pos, tmp, &t->offers) {
		struct shm_link *l = container_of(pos, struct shm_link, offer_link);
		int fds[3] = { l->memfd, l->efd_own, l->efd_peer };

		if (memcmp(l->token, q.token, sizeof(q.token)))
			continue;
		if (atomic_load(&l->served_pid) || cr.pid <= 0) {
			atomic_store(&l->served_extra, true);
		} else if (!send_fds(c, &q, fds) && !fcntl(c, F_SETFL, O_NONBLOCK)) {
			atomic_store(&l->side.fd, c);
			atomic_store(&l->served_pid, cr.pid);
			served = true;
		}
		break;
	}
	pthread_mutex_unlock(&t->offers_lock);
	return served;
}

static void fdsrv_event(struct sr_pollable *p, uint32_t events)
{
	struct sr_tcp_ctx *t = container_of(p, struct sr_tcp_ctx, fdsrv);

	(void)events;
	for (;;) {
		int c = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0)
			return;
		if (!fdsrv_serve(t, c))
			close(c);
	}
}

void shm_ctx_init(struct sr_tcp_ctx *t)
{
	pthread_mutex_init(&t->offers_lock, NULL);
	pthread_mutex_init(&t->pidfd_lock, NULL);
	sr_list_init(&t->offers);
	t->fdsrv.fd = -1;
	t->fdsrv.on_event = fdsrv_event;
}

/* The context's server, made at its first offer. tc->lock held. */
static uint64_t fdsrv_get(struct sr_tcp_ctx *t)
{
	struct sockaddr_un a;
	uint64_t name = 0;
	socklen_t len;
	int fd;

	pthread_mutex_lock(&t->offers_lock);
	if (t->fdsrv.fd >= 0 || t->fdsrv_failed)
		goto out;
	t->fdsrv_failed = true;		/* unless all goes well */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	if (getrandom(&name, sizeof(name), 0) != (ssize_t)sizeof(name) || !name) {
		close(fd);
		goto out;
	}
	len = fdsrv_addr(name, &a);
	if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 16)) {
		close(fd);
		goto out;
	}
	t->fdsrv.fd = fd;
	if (progress_add(t->pg, &t->fdsrv, EPOLLIN)) {
		t->fdsrv.fd = -1;
		close(fd);
		goto out;
	}
	t->fdsrv_name = name;
	t->fdsrv_failed = false;
out:
	name = t->fdsrv.fd >= 0 ? t->fdsrv_name : 0;
	pthread_mutex_unlock(&t->offers_lock);
	return name;
}

void shm_ctx_close(struct sr_tcp_ctx *t)
{
	if (t->fdsrv.fd >= 0) {
		progress_del(t->pg, &t->fdsrv);
		close(t->fdsrv.fd);
		t->fdsrv.fd = -1;
	}
	pthread_mutex_destroy(&t->offers_lock);
	/* (every link gave its pidfd back as it went) */
	for (unsigned int i = 0; i < t->npidfds; i++)
		close(t->pidfds[i].fd);
	free(t->pidfds);
	t->pidfds = NULL;
	t->npidfds = 0;
	pthread_mutex_destroy(&t->pidfd_lock);
}

/* Accepter: ask the offerer's server for the link's descriptors. 0 and
 * the connection, kept as the link's side channel (*side, non-blocking),
 * or -1 (nothing taken). */
static int fdsrv_fetch(const struct shm_offer *o, int fds[3], int *side)
{
	struct shm_fdreq q = { .magic = SHM_MAGIC, .version = SHM_VERSION }, r;
	struct sockaddr_un a;
	struct ucred cr;
	socklen_t crl = sizeof(cr), len;
	int c, got = 0, ret = -1;
	ssize_t n;

	fds[0] = fds[1] = fds[2] = -1;
	if (!o->fdsrv)
		return -1;
	c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c < 0)
		return -1;
	sock_timeouts(c);
	len = fdsrv_addr(o->fdsrv, &a);
	memcpy(q.token, o->token, sizeof(q.token));
	if (connect(c, (struct sockaddr *)&a, len) ||
	    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.pid != o->pid ||
	    send(c, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q))
		goto out;
	n = shm_fds_recv(c, &r, sizeof(r), fds, 3, &got, 0);
	if (n == (ssize_t)sizeof(r) && got == 3 && r.magic == SHM_MAGIC &&
	    !memcmp(r.token, o->token, sizeof(r.token)) && !fcntl(c, F_SETFL, O_NONBLOCK))
		ret = 0;
out:
	if (ret)
		for (int i = 0; i < got; i++) {
			close(fds[i]);
			fds[i] = -1;
		}
	if (ret)
		close(c);
	else
		*side = c;
	return ret;
}

/* Queue a control message (an ACK with an SR_ST_SHM_* status and a
 * body) ahead of what is queued (behind the message being written): the
 * switch is wherever its FPDU lands in the byte stream, and the sooner it
 * comes, the less goes the slow way. tc->lock held. */
static bool ctl_queue_locked(struct tcp_chan *tc, uint8_t status, const void *body, size_t len)
{
	struct sr_msg *m = msg_alloc((uint32_t)len);

	if (!m)
		return false;
	m->op = SR_MSG_ACK;
	m->status = status;
	memcpy(m->payload, body, len);
	sr_list_add_tail(tc->txq.next, &m->link);	/* before the first */
	tc->tx_urgent = true;
	tx_busy_locked(tc);
	return true;
}

void shm_offer_locked(struct tcp_chan *tc, bool offerer)
{
	struct shm_offer o = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_link *l;

	/* Only between softrnic ends (the ACK extension says so); a plain
	 * iWARP peer (siw) never sees this. */
	if (!offerer || !tc->ext || !tc->ch.acks || tc->shm || tc->state != TS_UP)
		return;
	if (!shm_enabled()) {
		sr_dbg("tcp %p QP %#x: shm: off (SOFTRNIC_SHM=0)", (void *)tc, tc->local_qpn);
		return;
	}
	l = link_create();
	if (!l || read_boot_id(o.boot_id)) {
		sr_dbg("tcp %p QP %#x: shm: no offer: %s", (void *)tc, tc->local_qpn,
		       l ? "no boot id" : strerror(errno));
		shm_link_free(l);
		return;
	}
	memcpy(o.token, l->token, sizeof(o.token));
	o.token_addr = (uint64_t)(uintptr_t)l->token;
	o.pid = (int32_t)getpid();
	o.memfd = l->memfd;
	o.efd_offerer = l->efd_own;
	o.efd_accepter = l->efd_peer;
	o.ring_size = SHM_RING_SIZE;
	o.fdsrv = fdsrv_get(tc->tctx);
	if (o.fdsrv) {
		pthread_mutex_lock(&tc->tctx->offers_lock);
		sr_list_add_tail(&tc->tctx->offers, &l->offer_link);
		l->offers_t = tc->tctx;
		pthread_mutex_unlock(&tc->tctx->offers_lock);
	}
	if (!ctl_queue_locked(tc, SR_ST_SHM_OFFER, &o, sizeof(o))) {
		shm_link_free(l);
		return;
	}
	tc->shm = l;
	/* Our requests wait for the answer (a round trip), bounded: what
	 * the program posts right after connecting then goes into the ring
	 * rather than ahead of the switch on TCP. */
	tc->shm_hold_until = progress_now_ns() + SHM_HOLD_NS;
	tcp_timer_arm_locked(tc, SHM_HOLD_NS);
	sr_dbg("tcp %p QP %#x: shm: offered", (void *)tc, tc->local_qpn);
}

/* ---- accepting an offer ------------------------------------------------- */

static bool is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = 0;
	return strcmp(link, "anon_inode:[eventfd]") == 0;
}

static int getfd(int pidfd, int32_t fd)
{
	if (fd < 0)
		return -1;
	return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* Can we read the token at addr in pid? (the check process_vm_readv
 * itself needs; proves the right process too) */
static bool token_readable(pid_t pid, uint64_t addr, const uint8_t token[16])
{
	uint8_t got[16];
	struct iovec lv = { got, sizeof(got) }, rv = { (void *)(uintptr_t)addr, sizeof(got) };

	return process_vm_readv(pid, &lv, 1, &rv, 1, 0) == (ssize_t)sizeof(got) &&
	       memcmp(got, token, sizeof(got)) == 0;
}

/* Take the offered memfd and eventfds from the offerer and check them.
 * Returns NULL and the link, or why not. */
static const char *attach(struct sr_tcp_ctx *t, const struct shm_offer *o, struct shm_link **out)
{
	struct shm_link *l;
	struct shm_hdr *h;
	uint8_t boot[16];
	struct stat st;
	const char *why = NULL;
	int memfd = -1, seals;

	if (o->magic != SHM_MAGIC || o->version != SHM_VERSION)
		return "unknown offer version";
	if (o->ring_size < 65536 || o->ring_size > (64ULL << 20) ||
	    (o->ring_size & (o->ring_size - 1)))
		return "bad ring size";
	if (read_boot_id(boot) || memcmp(boot, o->boot_id, sizeof(boot)))
		return "another host";
	l = shm_link_alloc();
	if (!l)
		return "out of memory";
	l->peer_pid = o->pid;
	if (shm_pidfd_open(t, l, (pid_t)o->pid) >= 0) {
		memfd = getfd(l->pidfd, o->memfd);
		l->efd_peer = getfd(l->pidfd, o->efd_offerer);
		l->efd_own = getfd(l->pidfd, o->efd_accepter);
	}
	if (l->pidfd < 0 ||
	    ((memfd < 0 || l->efd_peer < 0 || l->efd_own < 0) && errno == EPERM)) {
		/* No ptrace access, or no pidfd at all (a kernel before 5.3,
		 * a seccomp profile, valgrind): ask the offerer's descriptor
		 * server, which checks our uid and token, and whose pid we
		 * check. Such a link never pulls (shm_peer_alive needs the pidfd). */
		int fds[3], side = -1;
		bool nopidfd = l->pidfd < 0;

		if (memfd >= 0)
			close(memfd);
		if (l->efd_peer >= 0)
			close(l->efd_peer);
		if (l->efd_own >= 0)
			close(l->efd_own);
		memfd = l->efd_peer = l->efd_own = -1;
		if (fdsrv_fetch(o, fds, &side)) {
			why = nopidfd ? "pidfd_open failed (another pid namespace?), and the "
					"offerer's descriptor server did not answer"
				      : "pidfd_getfd not permitted (ptrace access), and the "
					"offerer's descriptor server did not answer";
			goto fail;
		}
		memfd = fds[0];
		l->efd_peer = fds[1];
		l->efd_own = fds[2];
		l->via_fdsrv = true;
		atomic_store(&l->side.fd, side);
	}
	if (memfd < 0 || l->efd_peer < 0 || l->efd_own < 0) {
		why = "pidfd_getfd failed";
		goto fail;
	}
	if (!is_eventfd(l->efd_peer) || !is_eventfd(l->efd_own)) {
		why = "not eventfds";
		goto fail;
	}
	l->map_len = SHM_HDR_SIZE + 2 * o->ring_size;
	if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != l->map_len) {
		why = "memfd of the wrong size";
		goto fail;
	}
	/* ... and one that can never shrink under our mapping (SIGBUS) */
	seals = fcntl(memfd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		why = "memfd not sealed against shrinking";
		goto fail;
	}
	l->map = mmap(NULL, l->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		why = "mmap failed";
		goto fail;
	}
	h = l->map;
	if (h->magic != SHM_MAGIC || h->ring_size != o->ring_size ||
	    memcmp(h->token, o->token, sizeof(o->token))) {
		why = "token mismatch";
		goto fail;
	}
	/* (From the server: the sender was the offer's pid, and it sent the
	 * token. We cannot read its memory, and will not pull.) */
	if (!l->via_fdsrv && !token_readable(l->peer_pid, o->token_addr, o->token)) {
		why = "process_vm_readv not permitted or wrong process";
		goto fail;
	}
	memcpy(l->token, o->token, sizeof(l->token));
	close(memfd);
	shm_link_rings(l, 1, 0, o->ring_size);
	*out = l;
	return NULL;
fail:
	if (memfd >= 0)
		close(memfd);
	shm_link_free(l);
	return why;
}

/* Our ring is up: a program thread that owned the stream already (it
 * polled while the stream was on TCP) tells the peer it polls the ring
 * (rx_polled; else the peer fenced every record it wrote, for good: the
 * flag changes only as ownership does). tc->lock held. */
static void rx_polled_now(struct tcp_chan *tc)
{
	if (tc->poll_owned)
		shm_polled_locked(tc, true);
}

/* Our eventfd goes into the progress engine. tc->lock held. */
static bool watch_locked(struct tcp_chan *tc, struct shm_link *l)
{
	tc->epl.fd = l->efd_own;
	tc->epl.on_event = tcp_shm_event;
	if (progress_add(tc->tctx->pg, &tc->epl, EPOLLIN))
		return false;
	l->watched = true;
	return true;
}

static void refused(struct tcp_chan *tc, const char *who, const char *why)
{
	atomic_fetch_add_explicit(&chan_stats.shm_refused, 1, memory_order_relaxed);
	sr_dbg("tcp %p QP %#x: shm: %s, staying on TCP: %s", (void *)tc, tc->local_qpn, who, why);
}

static void linked(struct tcp_chan *tc)
{
	atomic_fetch_add_explicit(&chan_stats.shm_links, 1, memory_order_relaxed);
	sr_dbg("tcp %p QP %#x<->%#x: shm: data path moves to shared memory (pull %d, map %d)",
	       (void *)tc, tc->local_qpn, tc->peer_qpn, tc->shm_pull_ok, tc->shm_map_ok);
}

static int on_offer(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_accept a = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_offer o;
	struct shm_link *l = NULL;
	const char *why;
	bool ok;

	if (len != sizeof(o))
		return -EBADMSG;
	memcpy(&o, body, sizeof(o));
	if (!shm_enabled())
		why = "SOFTRNIC_SHM=0 here";
	else if (tc->shm)
		why = "offered twice";
	else
		why = attach(tc->tctx, &o, &l);
	sr_mutex_lock(&tc->lock);
	if (!why && !watch_locked(tc, l))
		why = "epoll";
	if (why) {
		sr_mutex_unlock(&tc->lock);
		shm_link_free(l);
		refused(tc, "refused the offer", why);
		sr_mutex_lock(&tc->lock);
		ok = ctl_queue_locked(tc, SR_ST_SHM_REFUSE, &a, sizeof(a));
		sr_mutex_unlock(&tc->lock);
		tcp_kick_now(tc);
		return ok ? 0 : -ENOMEM;
	}
	a.pid = (int32_t)getpid();
	a.pull_ok = !l->via_fdsrv;	/* token_readable() proved it */
	a.map_ok = atomic_load(&l->side.fd) >= 0;
	a.token_addr = (uint64_t)(uintptr_t)l->token;
	tc->shm = l;
	/* ACCEPT is our last message on TCP: tcp_flush_locked moves our
	 * writes to the ring once it is written. */
	ok = ctl_queue_locked(tc, SR_ST_SHM_ACCEPT, &a, sizeof(a));
	sr_mutex_unlock(&tc->lock);
	tcp_kick_now(tc);
	return ok ? 0 : -ENOMEM;
}

static int on_accept(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_switch s = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	struct shm_link *l = tc->shm;
	struct shm_accept a;
	bool ok;

	if (!l || !l->offerer || len != sizeof(a) || tc->shm_rx)
		return -EBADMSG;
	memcpy(&a, body, sizeof(a));
	if (a.magic != SHM_MAGIC || a.version != SHM_VERSION)
		return -EBADMSG;
	shm_offer_unlist(l);	/* the server hands it out no more */
	/* ... and the accepter has the memfd (it maps it before it says
	 * ACCEPT): ours is only a descriptor less per QP now (the mapping
	 * stays). */
	if (l->memfd >= 0) {
		close(l->memfd);
		l->memfd = -1;
	}
	/* Whoever took the descriptors from our server must be the accepter,
	 * alone: another process holding our rings could write into them
	 * as the peer. The peer has moved to the ring already: end the
	 * stream (QP to ERROR). */
	if (atomic_load(&l->served_extra) ||
	    (atomic_load(&l->served_pid) && atomic_load(&l->served_pid) != a.pid)) {
		refused(tc, "the offer was taken", "another process asked for the descriptors");
		return -EPROTO;
	}
	/* The accepter pulls from us if it said it can; we from it if we
	 * can read its copy of the token (an asymmetric ptrace policy
	 * leaves that direction inline). */
	l->peer_pid = a.pid;
	s.pull_ok = shm_pidfd_open(tc->tctx, l, (pid_t)a.pid) >= 0 &&
		    token_readable(l->peer_pid, a.token_addr, l->token);
	/* The accepter took the descriptors from our server: that connection
	 * is the side channel, and memfds go both ways on it. */
	s.map_ok = atomic_load(&l->side.fd) >= 0 && atomic_load(&l->served_pid) == a.pid;
	if (!s.pull_ok)
		sr_dbg("tcp %p QP %#x: shm: cannot read the peer: its payloads come inline",
		       (void *)tc, tc->local_qpn);
	sr_mutex_lock(&tc->lock);
	if (!watch_locked(tc, l)) {
		sr_mutex_unlock(&tc->lock);
		return -ENOMEM;	/* the peer moved already: the stream ends */
	}
	/* Everything the accepter sends from now on is in the ring. What we
	 * held goes there too, behind SWITCH. */
	tc->shm_rx = true;
	rx_polled_now(tc);
	tc->shm_hold_until = 0;
	tc->shm_pull_ok = a.pull_ok != 0;
	tc->shm_map_ok = a.map_ok && s.map_ok;
	l->io.no_pull = !tc->shm_pull_ok;
	shm_help_setup(tc);
	want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	ok = ctl_queue_locked(tc, SR_ST_SHM_SWITCH, &s, sizeof(s));
	sr_mutex_unlock(&tc->lock);
	linked(tc);
	tcp_kick_now(tc);
	return ok ? 0 : -ENOMEM;
}

static int on_refuse(struct tcp_chan *tc)
{
	struct shm_link *l;

	sr_mutex_lock(&tc->lock);
	l = tc->shm;
	if (!l || !l->offerer || tc->shm_rx) {
		sr_mutex_unlock(&tc->lock);
		return -EBADMSG;
	}
	tc->shm = NULL;
	tc->shm_hold_until = 0;		/* what we held goes on TCP */
	tx_busy_locked(tc);
	sr_mutex_unlock(&tc->lock);
	shm_offer_unlist(l);
	refused(tc, "the peer refused", "see its debug log");
	shm_link_free(l);
	tcp_kick_now(tc);
	return 0;
}

static int on_switch(struct tcp_chan *tc, const uint8_t *body, size_t len)
{
	struct shm_switch s;

	if (!tc->shm || tc->shm->offerer || tc->shm_rx || len != sizeof(s))
		return -EBADMSG;
	memcpy(&s, body, sizeof(s));
	if (s.magic != SHM_MAGIC || s.version != SHM_VERSION)
		return -EBADMSG;
	sr_mutex_lock(&tc->lock);
	tc->shm_rx = true;
	rx_polled_now(tc);
	tc->shm_pull_ok = s.pull_ok != 0;
	tc->shm_map_ok = s.map_ok && atomic_load(&tc->shm->side.fd) >= 0;
	tc->shm->io.no_pull = !tc->shm_pull_ok;
	shm_help_setup(tc);
	want(tc, (tc->events & EPOLLOUT) | rx_events(tc));
	sr_mutex_unlock(&tc->lock);
	linked(tc);
	return 0;
}

int shm_ctl(struct tcp_chan *tc, uint8_t status, const uint8_t *body, size_t len)
{
	switch (status) {
	case SR_ST_SHM_OFFER:
		return on_offer(tc, body, len);
	case SR_ST_SHM_ACCEPT:
		return on_accept(tc, body, len);
	case SR_ST_SHM_REFUSE:
		return on_refuse(tc);
	case SR_ST_SHM_SWITCH:
		return on_switch(tc, body, len);
	default:
		return -EBADMSG;
	}
}

