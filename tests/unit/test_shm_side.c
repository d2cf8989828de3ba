/* The same-host link's side channel (src/chan/shm_side.c) over a
 * socketpair: memfds passed and taken by the sender's number and inode,
 * once each, sealed before they go so that the receiver can only read
 * them (and a memfd that cannot be sealed does not go); what a hostile
 * peer writes there (wrong sizes, magic, descriptor counts, a flood) is
 * dropped with its descriptors closed, and a take reads a bounded number
 * of messages. */

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include <cmocka.h>

#include "chan/shm_side.h"

struct fixture {
	struct shm_side tx, rx;
	int raw;			/* the sender's end, for hostile bytes */
};

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* (the directory's own) */
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int sv[2];

	if (!f || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		return -1;
	shm_side_init(&f->tx);
	shm_side_init(&f->rx);
	atomic_store(&f->tx.fd, sv[0]);
	atomic_store(&f->rx.fd, sv[1]);
	f->raw = sv[0];
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	shm_side_close(&f->tx);
	shm_side_close(&f->rx);
	free(f);
	return 0;
}

static uint64_t ino_of(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return (uint64_t)st.st_ino;
}

static void roundtrip(void **state)
{
	struct fixture *f = *state;
	int a = memfd_create("side-a", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int b = memfd_create("side-b", MFD_CLOEXEC | MFD_ALLOW_SEALING), got;
	uint64_t ia = ino_of(a), ib = ino_of(b);
	void *p;

	assert_int_equal(ftruncate(a, 4096), 0);
	/* our own writable mapping, made before it goes */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(shm_side_take(&f->rx, (uint32_t)a, ia), -1);	/* nothing yet */
	assert_true(shm_side_send(&f->tx, a, ia));
	assert_int_equal(fcntl(a, F_GET_SEALS) & (F_SEAL_FUTURE_WRITE | F_SEAL_SEAL),
			 F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
	memset(p, 0x5a, 4096);		/* (still writable to us) */
	munmap(p, 4096);
	assert_true(shm_side_send(&f->tx, a, ia));	/* once: no second message */
	assert_true(shm_side_send(&f->tx, b, ib));
	assert_int_equal(f->tx.nsent, 2);
	got = shm_side_take(&f->rx, (uint32_t)b, ib);
	assert_true(got >= 0);
	assert_int_equal(ino_of(got), ib);
	assert_true(fcntl(got, F_GETFD) & FD_CLOEXEC);
	close(got);
	assert_int_equal(f->rx.ngot, 2);
	got = shm_side_take(&f->rx, (uint32_t)a, ia);
	assert_int_equal(ino_of(got), ia);
	/* the receiver's: to read only */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, got, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(((unsigned char *)p)[4095], 0x5a);
	munmap(p, 4096);
	assert_true(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, got, 0) == MAP_FAILED);
	assert_true(pwrite(got, "x", 1, 0) < 0);
	close(got);
	/* the right number with the wrong inode is not it */
	assert_int_equal(shm_side_take(&f->rx, (uint32_t)a, ia + 1), -1);
	close(a);
	close(b);
}

/* Raw bytes, and n descriptors of fd, from the sender's end. Built here,
 * not with shm_fds_send: a forger sends what that refuses to (more than
 * SHM_FDS_MAX descriptors, which the receiver's control buffer cuts). */
static void raw_send(struct fixture *f, const void *p, size_t len, int fd, int n)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)p, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&u, 0, sizeof(u));
	if (n) {
		struct cmsghdr *cm;

		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		for (int i = 0; i < n; i++)
			memcpy(CMSG_DATA(cm) + (size_t)i * sizeof(int), &fd, sizeof(fd));
	}
	assert_int_equal(sendmsg(f->raw, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

/* What the sender writes, for forging: {magic, version, pfd, pad, ino}. */
struct forged {
	uint32_t magic, version, pfd, pad;
	uint64_t ino;
};

static void hostile(void **state)
{
	struct fixture *f = *state;
	int m = memfd_create("side-m", MFD_CLOEXEC), before;
	uint64_t ino = ino_of(m);
	struct forged good = { 0x44535253U, 1, 9, 0, ino }, bad;
	uint8_t junk[64];

	memset(junk, 0xa5, sizeof(junk));
	before = open_fds();
	raw_send(f, junk, sizeof(junk), m, 1);			/* too long */
	raw_send(f, &good, sizeof(good) - 1, m, 1);		/* too short */
	bad = good;
	bad.magic ^= 1;
	raw_send(f, &bad, sizeof(bad), m, 1);			/* magic */
	bad = good;
	bad.version = 2;
	raw_send(f, &bad, sizeof(bad), m, 1);			/* version */
	raw_send(f, &good, sizeof(good), m, 0);			/* no descriptor */
	raw_send(f, &good, sizeof(good), m, 2);			/* two */
	raw_send(f, &good, sizeof(good), m, 8);			/* more than taken */
	assert_int_equal(shm_side_take(&f->rx, 9, ino), -1);
	assert_int_equal(f->rx.ngot, 0);
	/* every descriptor that came with them is closed again */
	assert_int_equal(open_fds(), before);
	/* then a good one is taken */
	raw_send(f, &good, sizeof(good), m, 1);
	{
		int got = shm_side_take(&f->rx, 9, ino);

		assert_true(got >= 0);
		close(got);
	}
	close(m);
}

/* More announcements than are kept: the rest are closed; and a flood of
 * junk is read a bounded number at a time, the good message behind it
 * found by a later take. */
static void bounded(void **state)
{
	struct fixture *f = *state;
	int m = memfd_create("side-b", MFD_CLOEXEC), before, calls = 0, got = -1;
	uint64_t ino = ino_of(m);
	struct forged good = { 0x44535253U, 1, 0, 0, ino };
	uint8_t junk[8] = { 0 };

	before = open_fds();
	for (uint32_t i = 0; i < SHM_SIDE_MAX + 8; i++) {
		good.pfd = 100 + i;
		raw_send(f, &good, sizeof(good), m, 1);
	}
	assert_int_equal(shm_side_take(&f->rx, 100 + SHM_SIDE_MAX + 7, ino), -1);
	assert_int_equal(f->rx.ngot, SHM_SIDE_MAX);
	assert_int_equal(open_fds(), before + SHM_SIDE_MAX);
	shm_side_close(&f->rx);
	assert_int_equal(open_fds(), before - 1);	/* (and the connection) */

	/* a fresh pair: 200 junk messages, then the good one */
	{
		int sv[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0);
		close(f->raw);
		atomic_store(&f->tx.fd, sv[0]);
		shm_side_init(&f->rx);
		atomic_store(&f->rx.fd, sv[1]);
		f->raw = sv[0];
	}
	for (int i = 0; i < 200; i++)
		raw_send(f, junk, sizeof(junk), m, 0);
	good.pfd = 7;
	raw_send(f, &good, sizeof(good), m, 1);
	while (got < 0 && calls < 10) {
		got = shm_side_take(&f->rx, 7, ino);
		calls++;
	}
	assert_true(got >= 0);
	assert_true(calls > 1);		/* not all in one take */
	close(got);
	close(m);
}

/* The sender never blocks: a full table or a full socket is "no" (the
 * caller sends the bytes inline instead); so is a memfd it cannot seal. */
static void sender_limits(void **state)
{
	struct fixture *f = *state;
	int m = memfd_create("side-s", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int u = memfd_create("side-u", MFD_CLOEXEC);	/* (F_SEAL_SEAL from birth) */
	uint64_t ino = ino_of(m);
	int ok = 0;

	assert_false(shm_side_send(&f->tx, u, ino_of(u)));
	assert_int_equal(f->tx.nsent, 0);
	close(u);
	for (int i = 0; i < SHM_SIDE_MAX + 5; i++)
		ok += shm_side_send(&f->tx, m, ino + (uint64_t)i);
	/* (some may not fit the socket's buffer; never more than the table) */
	assert_true(ok > 0 && ok <= SHM_SIDE_MAX);
	assert_false(shm_side_send(&f->tx, m, ino + 1000));
	close(m);
	/* no connection: no */
	{
		struct shm_side none;

		shm_side_init(&none);
		assert_false(shm_side_send(&none, 0, 1));
		assert_int_equal(shm_side_take(&none, 0, 1), -1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(hostile, setup, teardown),
		cmocka_unit_test_setup_teardown(bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(sender_limits, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
