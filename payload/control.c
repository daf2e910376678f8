/* SPDX-License-Identifier: MIT */
/*
 * The payload's control thread and socket, for attach and detach. The
 * injector's remote call lands in memtrace_attach_entry(), which only
 * copies the configuration and starts this thread; tracking is started,
 * stopped and reported on from here. The thread never takes signals,
 * never prints, and stays alive after detach so a later attach needs no
 * second injection.
 *
 * Socket: abstract unix stream "\0memtrace-<pid>", peers checked with
 * SO_PEERCRED (same uid, or root). One request line, one reply line:
 *   status                      -> ok idle | ok starting | ok active PATH
 *                                  | error MESSAGE
 *   start FLAGS INTERVAL PATH   -> ok starting | error already attached
 *   stop                        -> ok stopped PATH | error not attached
 *   detach                      -> ok detached DROPPED PATH | error not attached
 * (detach is stop that also says how many events were dropped; a payload
 * from before it answers "error unknown request" and goes on.)
 */
#include "memtrace-payload.h"
#include "format/error.h"
#include "format/record.h"
#include "payload/fd-id.h"
#include "payload/track-internal.h"
#include "payload/track.h"
#include "payload/writer.h"

#include <errno.h>      /* errno */
#include <pthread.h>    /* pthread_create */
#include <signal.h>     /* sigfillset */
#include <stdio.h>      /* snprintf */
#include <stdlib.h>     /* strtoul */
#include <string.h>     /* memcpy */
#include <sys/prctl.h>  /* PR_SET_NAME */
#include <sys/socket.h> /* socket */
#include <sys/un.h>     /* sockaddr_un */
#include <time.h>       /* nanosleep */
#include <unistd.h>     /* getuid */

#define MT_EXPORT __attribute__((visibility("default")))

enum ctl_state { CTL_IDLE, CTL_STARTING, CTL_ACTIVE, CTL_FAILED };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int thread_running;
	pid_t pid;
	int listen_fd;
	struct mt_fd_id listen_id; /* the socket listen_fd was */
	enum ctl_state state;
	int pending;                  /* a start request waits for the thread */
	struct memtrace_config cfg;   /* of the pending or running capture */
	char error[256];
} ctl = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .listen_fd = -1 };

static int open_socket(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "memtrace-%d", (int)getpid());
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
							  (size_t)n)) != 0 ||
	    listen(fd, 4) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* One reply line: @text, then " @arg" if @arg is not NULL. */
static void reply(int fd, const char *text, const char *arg)
{
	char line[MEMTRACE_PATH_MAX + 300];
	int n = snprintf(line, sizeof(line), arg ? "%s %s\n" : "%s\n", text, arg ? arg : "");
	if (n <= 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	ssize_t w = send(fd, line, (size_t)n, MSG_NOSIGNAL);
	(void)w; /* best effort: the client may be gone */
}

/* Parse "FLAGS INTERVAL PATH" into @cfg. */
static int parse_spec(const char *spec, struct memtrace_config *cfg)
{
	char *end;
	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->fd = -1;
	cfg->flags = (uint32_t)strtoul(spec, &end, 10) | MT_HDR_ATTACHED;
	if (*end != ' ')
		return -EINVAL;
	cfg->interval_ms = (uint32_t)strtoul(end + 1, &end, 10);
	if (*end != ' ' || end[1] != '/' || strlen(end + 1) >= sizeof(cfg->path))
		return -EINVAL;
	strcpy(cfg->path, end + 1);
	return 0;
}

static void run_start(void)
{
	struct memtrace_config cfg = ctl.cfg;
	pthread_mutex_unlock(&ctl.lock);
	int rc = memtrace_payload_start(&cfg);
	pthread_mutex_lock(&ctl.lock);
	if (rc == 0) {
		ctl.state = CTL_ACTIVE;
	} else {
		ctl.state = CTL_FAILED;
		snprintf(ctl.error, sizeof(ctl.error), "cannot start tracking: %s",
			 mt_strerror(rc));
	}
}

static void handle(int fd)
{
	char req[MEMTRACE_PATH_MAX + 64];
	struct ucred cred;
	socklen_t len = sizeof(cred);
	ssize_t n;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
	    (cred.uid != getuid() && cred.uid != 0))
		return; /* not ours to command: say nothing */
	struct timeval tv = { 2, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t got = 0;
	while (got < sizeof(req) - 1 && (n = recv(fd, req + got, sizeof(req) - 1 - got, 0)) > 0) {
		got += (size_t)n;
		if (memchr(req, '\n', got))
			break;
	}
	req[got] = '\0';
	char *nl = strchr(req, '\n');
	if (!nl)
		return;
	*nl = '\0';

	pthread_mutex_lock(&ctl.lock);
	if (!strcmp(req, "status")) {
		switch (ctl.state) {
		case CTL_IDLE:
			reply(fd, "ok idle", NULL);
			break;
		case CTL_STARTING:
			reply(fd, "ok starting", NULL);
			break;
		case CTL_ACTIVE:
			reply(fd, "ok active", ctl.cfg.path);
			break;
		case CTL_FAILED:
			reply(fd, "error", ctl.error);
			break;
		}
	} else if (!strncmp(req, "start ", 6)) {
		struct memtrace_config cfg;
		if (ctl.state == CTL_ACTIVE || ctl.state == CTL_STARTING) {
			reply(fd, "error already attached", NULL);
		} else if (parse_spec(req + 6, &cfg) < 0) {
			reply(fd, "error bad start request", NULL);
		} else {
			ctl.cfg = cfg;
			ctl.state = CTL_STARTING;
			reply(fd, "ok starting", NULL);
			run_start();
		}
	} else if (!strcmp(req, "stop") || !strcmp(req, "detach")) {
		if (ctl.state != CTL_ACTIVE) {
			reply(fd, "error not attached", NULL);
		} else {
			pthread_mutex_unlock(&ctl.lock);
			int rc = memtrace_payload_stop();
			pthread_mutex_lock(&ctl.lock);
			ctl.state = CTL_IDLE;
			if (rc < 0 && rc != -EINVAL) {
				reply(fd, "error capture incomplete:", mt_strerror(rc));
			} else if (req[1] == 't') {
				reply(fd, "ok stopped", ctl.cfg.path);
			} else {
				char text[64];
				snprintf(text, sizeof(text), "ok detached %llu",
					 (unsigned long long)mt_writer_dropped());
				reply(fd, text, ctl.cfg.path);
			}
		}
	} else {
		reply(fd, "error unknown request", NULL);
	}
	pthread_mutex_unlock(&ctl.lock);
}

static void *control_main(void *arg)
{
	(void)arg;
	mt_in_hook = 1; /* memtrace's own thread: never recorded */
	prctl(PR_SET_NAME, "memtrace-ctl", 0, 0, 0);
	/* Created with every signal blocked, but a fault of its own must
	 * reach the payload's handler (a GOT store the loader made read-only
	 * under us is caught and retried): a blocked fault kills the process. */
	sigset_t faults;
	sigemptyset(&faults);
	sigaddset(&faults, SIGSEGV);
	sigaddset(&faults, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &faults, NULL);

	pthread_mutex_lock(&ctl.lock);
	if (ctl.pending) {
		ctl.pending = 0;
		run_start();
	}
	pthread_mutex_unlock(&ctl.lock);

	for (;;) {
		int fd = accept4(ctl.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
			    errno == ENOBUFS) {
				/* out of descriptors or memory for now: the
				 * program may give some back, and a capture that
				 * runs must stay stoppable */
				struct timespec ts = { 0, 100 * 1000 * 1000 };
				nanosleep(&ts, NULL);
				continue;
			}
			break; /* the socket is gone (the program closed it) */
		}
		handle(fd);
		close(fd);
	}
	pthread_mutex_lock(&ctl.lock);
	ctl.thread_running = 0;
	pthread_mutex_unlock(&ctl.lock);
	return NULL;
}

int mt_control_thread(void)
{
	return ctl.thread_running && ctl.pid == getpid();
}

void mt_control_after_fork(void)
{
	pthread_mutex_init(&ctl.lock, NULL);
	pthread_cond_init(&ctl.cond, NULL);
	mt_fd_id_close(ctl.listen_fd, &ctl.listen_id); /* the parent's socket */
	ctl.listen_fd = -1;
	ctl.thread_running = 0;
	ctl.pending = 0;
	ctl.state = CTL_IDLE;
}

/* Start (or reuse) the control thread with a pending start of @cfg. */
static int attach(const struct memtrace_config *cfg)
{
	int rc = 0;
	pthread_mutex_lock(&ctl.lock);
	if (ctl.thread_running && ctl.pid == getpid()) {
		rc = ctl.state == CTL_ACTIVE || ctl.state == CTL_STARTING ? -EBUSY : 0;
		if (rc == 0) {
			ctl.cfg = *cfg;
			ctl.state = CTL_STARTING;
			run_start();
		}
		pthread_mutex_unlock(&ctl.lock);
		return rc;
	}
	/* The socket first, so that the injector can ask for status while
	 * tracking starts. */
	int fd = open_socket();
	if (fd < 0) {
		pthread_mutex_unlock(&ctl.lock);
		return fd;
	}
	ctl.listen_fd = fd;
	(void)mt_fd_id_take(fd, &ctl.listen_id);
	ctl.pid = getpid();
	ctl.cfg = *cfg;
	ctl.cfg.flags |= MT_HDR_ATTACHED;
	ctl.state = CTL_STARTING;
	ctl.pending = 1;

	pthread_t t;
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&t, &attr, control_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc == 0) {
		ctl.thread_running = 1;
	} else {
		close(fd);
		ctl.listen_fd = -1;
		ctl.state = CTL_IDLE;
		ctl.pending = 0;
	}
	pthread_mutex_unlock(&ctl.lock);
	return rc;
}

MT_EXPORT int memtrace_attach_entry(const struct memtrace_config *cfg)
{
	int own = mt_guard_enter();
	int rc = cfg && cfg->size >= sizeof(*cfg) ? attach(cfg) : -EINVAL;
	if (own)
		mt_guard_leave();
	return rc;
}

MT_EXPORT int memtrace_attach_entry_str(const char *spec)
{
	struct memtrace_config cfg;
	int own = mt_guard_enter();
	int rc = spec && parse_spec(spec, &cfg) == 0 ? attach(&cfg) : -EINVAL;
	if (own)
		mt_guard_leave();
	return rc;
}
