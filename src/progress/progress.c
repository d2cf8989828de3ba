/* The progress engine: epoll + a sorted timer list + an eventfd to wake
 * the thread when timers or registrations change. See progress.h. */
#include "progress/progress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct sr_progress {
	pthread_t thread;
	int epfd;
	struct sr_pollable wake;
	pthread_mutex_t lock;		/* timers, running, stop */
	pthread_cond_t idle;
	struct sr_list timers;		/* sorted by deadline */
	bool stop;
	/* what the thread is running now, so del/cancel can wait it out */
	struct sr_pollable *running_p;
	struct sr_timer *running_t;
	/* pollables deleted while a batch of events is being dispatched: the
	 * rest of the batch must not touch them (they may be freed) */
	bool in_batch;
	unsigned int ndead;
	struct sr_pollable *dead[128];
	/* loop iterations begun: a deleter from another thread waits for
	 * the next one, so no event fetched before its delete is pending */
	uint64_t gen;
	int pid;			/* the process whose thread this is */
};

/* In a forked child the progress thread does not exist, and the epoll set
 * is shared with the parent: touching it would unregister the parent's
 * sockets. A child's calls are no-ops (DESIGN.md: a forked child never
 * disturbs the parent's connections). */
static bool foreign(const struct sr_progress *pg)
{
	return pg->pid != sr_getpid();
}

uint64_t progress_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void wake_drain(struct sr_pollable *p, uint32_t events)
{
	uint64_t v;

	if (read(p->fd, &v, sizeof(v)) < 0)
		(void)0;
}

static void progress_wake(struct sr_progress *pg)
{
	uint64_t one = 1;

	if (write(pg->wake.fd, &one, sizeof(one)) < 0)
		(void)0;
}

bool progress_in_thread(struct sr_progress *pg)
{
	return pg && pthread_equal(pthread_self(), pg->thread);
}

/* Caller holds pg->lock. Nanoseconds until the first timer, or -1. */
static int64_t next_timeout_ns(struct sr_progress *pg)
{
	struct sr_timer *t;
	uint64_t now;

	if (sr_list_empty(&pg->timers))
		return -1;
	t = container_of(pg->timers.next, struct sr_timer, link);
	now = progress_now_ns();
	if (t->deadline_ns <= now)
		return 0;
	return (int64_t)sr_min(t->deadline_ns - now, 60ULL * 1000000000ULL);
}

/* epoll_wait with a timeout in nanoseconds (timers of tens of
 * microseconds: the poll-ownership check, DESIGN.md decision 5), in
 * milliseconds where the kernel lacks epoll_pwait2 (before 5.11). */
static int wait_events(int epfd, struct epoll_event *evs, int max, int64_t ns)
{
	static bool no_pwait2;

	if (!no_pwait2) {
		struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
		int n = epoll_pwait2(epfd, evs, max, ns < 0 ? NULL : &ts, NULL);

		if (n >= 0 || errno != ENOSYS)
			return n;
		no_pwait2 = true;
	}
	return epoll_wait(epfd, evs, max, ns < 0 ? -1 : (int)((ns + 999999) / 1000000));
}

static void run_due_timers(struct sr_progress *pg)
{
	uint64_t now = progress_now_ns();

	pthread_mutex_lock(&pg->lock);
	while (!sr_list_empty(&pg->timers)) {
		struct sr_timer *t = container_of(pg->timers.next, struct sr_timer, link);

		if (t->deadline_ns > now)
			break;
		sr_list_del(&t->link);
		t->armed = false;
		pg->running_t = t;
		pthread_mutex_unlock(&pg->lock);
		t->fire(t);
		pthread_mutex_lock(&pg->lock);
		pg->running_t = NULL;
		pthread_cond_broadcast(&pg->idle);
	}
	pthread_mutex_unlock(&pg->lock);
}

static void *progress_main(void *arg)
{
	struct sr_progress *pg = arg;
	struct epoll_event evs[64];

	/* The thread sleeps in epoll and runs for microseconds when woken,
	 * but a busy-polling program on every CPU keeps it waiting for the
	 * scheduler. A higher priority (nice -10) lets it in at once where
	 * the process may raise it (CAP_SYS_NICE); elsewhere this fails and
	 * changes nothing. SOFTRNIC_PROGRESS_NICE overrides (0: leave it). */
	{
		const char *v = getenv("SOFTRNIC_PROGRESS_NICE");
		int nice = v && *v ? atoi(v) : -10;

		if (nice)
			setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
	}

	for (;;) {
		int64_t timeout;
		int n;

		pthread_mutex_lock(&pg->lock);
		pg->gen++;
		pthread_cond_broadcast(&pg->idle);
		if (pg->stop) {
			pthread_mutex_unlock(&pg->lock);
			break;
		}
		timeout = next_timeout_ns(pg);
		pthread_mutex_unlock(&pg->lock);

		n = wait_events(pg->epfd, evs, (int)ARRAY_SIZE(evs), timeout);
		if (n < 0 && errno != EINTR)
			break;
		pthread_mutex_lock(&pg->lock);
		pg->in_batch = true;
		pg->ndead = 0;
		pthread_mutex_unlock(&pg->lock);
		for (int i = 0; i < n; i++) {
			struct sr_pollable *p = evs[i].data.ptr;
			bool dead = false;

			/* An event fetched before its pollable was deleted is
			 * dropped without touching the pollable. */
			pthread_mutex_lock(&pg->lock);
			for (unsigned int d = 0; d < pg->ndead; d++)
				dead |= pg->dead[d] == p;
			if (dead) {
				pthread_mutex_unlock(&pg->lock);
				continue;
			}
			pg->running_p = p;
			pthread_mutex_unlock(&pg->lock);
			p->on_event(p, evs[i].events);
			pthread_mutex_lock(&pg->lock);
			pg->running_p = NULL;
			pthread_cond_broadcast(&pg->idle);
			pthread_mutex_unlock(&pg->lock);
		}
		pthread_mutex_lock(&pg->lock);
		pg->in_batch = false;
		pthread_cond_broadcast(&pg->idle);
		pthread_mutex_unlock(&pg->lock);
		run_due_timers(pg);
	}
	/* However the loop ended, nobody may wait for it any more. */
	pthread_mutex_lock(&pg->lock);
	pg->stop = true;
	pthread_cond_broadcast(&pg->idle);
	pthread_mutex_unlock(&pg->lock);
	return NULL;
}

struct sr_progress *progress_create(void)
{
	struct sr_progress *pg = calloc(1, sizeof(*pg));
	struct epoll_event ev = { .events = EPOLLIN };

	if (!pg)
		return NULL;
	pthread_mutex_init(&pg->lock, NULL);
	pthread_cond_init(&pg->idle, NULL);
	sr_list_init(&pg->timers);
	pg->pid = sr_getpid();
	pg->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (pg->epfd < 0)
		goto err_free;
	pg->wake.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pg->wake.fd < 0)
		goto err_ep;
	pg->wake.on_event = wake_drain;
	ev.data.ptr = &pg->wake;
	if (epoll_ctl(pg->epfd, EPOLL_CTL_ADD, pg->wake.fd, &ev) < 0)
		goto err_wake;
	if (pthread_create(&pg->thread, NULL, progress_main, pg))
		goto err_wake;
	return pg;

err_wake:
	close(pg->wake.fd);
err_ep:
	close(pg->epfd);
err_free:
	free(pg);
	return NULL;
}

void progress_destroy(struct sr_progress *pg)
{
	if (!pg)
		return;
	if (foreign(pg)) {
		close(pg->wake.fd);
		close(pg->epfd);
		return;		/* the child's copy: the parent owns the rest */
	}
	pthread_mutex_lock(&pg->lock);
	pg->stop = true;
	pthread_mutex_unlock(&pg->lock);
	progress_wake(pg);
	if (!progress_in_thread(pg))
		pthread_join(pg->thread, NULL);
	else
		pthread_detach(pg->thread);
	close(pg->wake.fd);
	close(pg->epfd);
	pthread_mutex_destroy(&pg->lock);
	pthread_cond_destroy(&pg->idle);
	free(pg);
}

int progress_add(struct sr_progress *pg, struct sr_pollable *p, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = p };

	if (foreign(pg))
		return -ECHILD;
	return epoll_ctl(pg->epfd, EPOLL_CTL_ADD, p->fd, &ev) < 0 ? -errno : 0;
}

int progress_mod(struct sr_progress *pg, struct sr_pollable *p, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = p };

	if (foreign(pg))
		return -ECHILD;
	return epoll_ctl(pg->epfd, EPOLL_CTL_MOD, p->fd, &ev) < 0 ? -errno : 0;
}

void progress_del(struct sr_progress *pg, struct sr_pollable *p)
{
	bool self = progress_in_thread(pg);
	uint64_t g;

	if (foreign(pg))
		return;
	epoll_ctl(pg->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	pthread_mutex_lock(&pg->lock);
	if (self) {
		/* From a handler: later events of this batch must skip p. */
		if (pg->ndead < ARRAY_SIZE(pg->dead))
			pg->dead[pg->ndead++] = p;
		pthread_mutex_unlock(&pg->lock);
		return;
	}
	/* Events fetched by epoll_wait before the delete may still name p
	 * (and run its handler): wait until the loop starts its next
	 * iteration, after which nothing can. */
	g = pg->gen;
	pthread_mutex_unlock(&pg->lock);
	progress_wake(pg);
	pthread_mutex_lock(&pg->lock);
	while (pg->gen == g && !pg->stop)
		pthread_cond_wait(&pg->idle, &pg->lock);
	pthread_mutex_unlock(&pg->lock);
}

static void timer_arm(struct sr_progress *pg, struct sr_timer *t, uint64_t delay_ns, bool sooner)
{
	struct sr_list *pos;
	uint64_t deadline = progress_now_ns() + delay_ns;
	bool first;

	if (foreign(pg))
		return;
	pthread_mutex_lock(&pg->lock);
	if (t->armed && sooner && t->deadline_ns <= deadline) {
		pthread_mutex_unlock(&pg->lock);
		return;
	}
	if (t->armed)
		sr_list_del(&t->link);
	t->deadline_ns = deadline;
	t->armed = true;
	for (pos = pg->timers.next; pos != &pg->timers; pos = pos->next)
		if (container_of(pos, struct sr_timer, link)->deadline_ns > t->deadline_ns)
			break;
	/* insert before pos */
	t->link.next = pos;
	t->link.prev = pos->prev;
	pos->prev->next = &t->link;
	pos->prev = &t->link;
	first = pg->timers.next == &t->link;
	pthread_mutex_unlock(&pg->lock);
	if (first && !progress_in_thread(pg))
		progress_wake(pg);
}

void progress_timer_arm(struct sr_progress *pg, struct sr_timer *t, uint64_t delay_ns)
{
	timer_arm(pg, t, delay_ns, false);
}

void progress_timer_arm_by(struct sr_progress *pg, struct sr_timer *t, uint64_t delay_ns)
{
	timer_arm(pg, t, delay_ns, true);
}

/* Take t off the schedule; with wait, also wait out a fire() of t that
 * another thread is running. */
static void timer_stop(struct sr_progress *pg, struct sr_timer *t, bool wait)
{
	if (foreign(pg))
		return;
	pthread_mutex_lock(&pg->lock);
	if (t->armed) {
		sr_list_del(&t->link);
		t->armed = false;
	}
	while (wait && pg->running_t == t && !progress_in_thread(pg))
		pthread_cond_wait(&pg->idle, &pg->lock);
	pthread_mutex_unlock(&pg->lock);
}

void progress_timer_disarm(struct sr_progress *pg, struct sr_timer *t)
{
	timer_stop(pg, t, false);
}

void progress_timer_cancel(struct sr_progress *pg, struct sr_timer *t)
{
	timer_stop(pg, t, true);
}
