/* SPDX-License-Identifier: MIT */
/*
 * The payload's control thread and socket, for attach and detach. The
 * injector's remote call lands in memtrace_attach_entry(), which opens the
 * socket, starts this thread and returns; the CLI then asks for a start
 * over the socket. The thread never takes signals, never prints, never
 * waits for the GIL (a start or a stop runs on a thread of its own, so
 * that status is answered at once whatever the interpreter's threads are
 * doing), and stays alive after detach so a later attach needs no second
 * injection.
 *
 * Socket: abstract unix stream "\0memtrace-<pid>-<16 random hex digits>",
 * unguessable, so that no other process can take the name first; the CLI
 * finds it among the target's own descriptors (/proc/PID/fd and
 * /proc/PID/net/unix). Peers are checked with SO_PEERCRED against the
 * rule of format/peer.h (same uid, or root). Before each wait for a
 * client the listener is checked to still be ours (fd-id.h): a program
 * that closed it, and perhaps opened a file of its own under the number,
 * gets a new socket made under a new name.
 *
 * One request line, one reply line; the protocol (its lines, what each
 * request is answered, the encoder and the parser) is format/ctlproto.h.
 * A stop of a start under way cancels it: the start is undone as soon as
 * it returns. "active" means the C allocators are recorded; with
 * MT_HDR_PYALLOC it waits for the Python allocators to be wrapped too,
 * which needs the GIL. An expiry ("expire MS", attach --duration) is kept
 * here: when it comes, this thread stops the capture as a detach would,
 * on a stop thread, with no client to answer, so that the CLI need not
 * stay.
 */
#include "memtrace-payload.h"
#include "format/ctlproto.h"
#include "format/error.h"
#include "format/peer.h"
#include "format/record.h"
#include "payload/entry.h"
#include "payload/fd-id.h"
#include "payload/phdr.h"
#include "payload/spawn.h"
#include "payload/threads.h"
#include "payload/track.h"
#include "payload/wait.h"
#include "payload/writer.h"
#include "util/fd.h"

#include <errno.h>       /* errno */
#include <fcntl.h>       /* O_NONBLOCK */
#include <poll.h>        /* poll */
#include <pthread.h>     /* pthread_create */
#include <signal.h>      /* sigfillset */
#include <stdio.h>       /* snprintf */
#include <string.h>      /* memcpy */
#include <sys/prctl.h>   /* PR_SET_NAME */
#include <sys/socket.h>  /* socket */
#include <sys/syscall.h> /* SYS_getrandom */
#include <sys/un.h>      /* sockaddr_un */
#include <time.h>        /* clock_gettime */
#include <unistd.h>      /* getuid */

/* How long the thread waits for a client before it checks its socket. */
#define CTL_RECHECK_MS 1000

enum ctl_state { CTL_IDLE, CTL_STARTING, CTL_ACTIVE, CTL_STOPPING, CTL_FAILED };

static struct {
	pthread_mutex_t lock;
	int thread_running;         /* the control thread */
	int workers;                /* start and stop threads under way */
	int gil_waiter;             /* a start's thread waits for the GIL */
	pid_t pid;                  /* the process these belong to */
	int listen_fd;
	struct mt_fd_id listen_id;  /* the socket listen_fd was */
	enum ctl_state state;
	int started;                /* the start under way made its capture */
	int cancel;                 /* undo the start under way when it returns */
	unsigned gen;               /* of the capture started last */
	struct memtrace_config cfg; /* of the capture starting or running */
	int client;                 /* a stop's connection, answered by its thread */
	int client_detach;          /* ... which asked "detach" (not "stop") */
	int64_t expire_at;          /* CLOCK_MONOTONIC ms of the capture's end; 0: none */
	char error[256];
} ctl = { PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1, .client = -1, .cfg = { .fd = -1 } };

static int64_t mono_ms(void)
{
	return (int64_t)(mt_mono_ns() / 1000000);
}

static uint64_t random64(void)
{
	uint64_t r = 0;
	if (syscall(SYS_getrandom, &r, sizeof(r), 1 /* GRND_NONBLOCK */) == (long)sizeof(r))
		return r;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 32 ^
	    (uint64_t)(uintptr_t)&ts ^ (uint64_t)getpid();
	return r;
}

/* A new listening socket under a new random name, non-blocking (a client
 * gone between poll() and accept() must not block the thread). */
static int open_socket(void)
{
	for (int tries = 0; tries < 4; tries++) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "memtrace-%d-%016llx",
				 (int)getpid(), (unsigned long long)random64());
		int fd = mt_fd_high(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
		if (fd < 0)
			return -errno;
		socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		if (bind(fd, (struct sockaddr *)&a, len) == 0 && listen(fd, 64) == 0)
			return fd;
		int e = -errno;
		close(fd);
		if (e != -EADDRINUSE)
			return e;
	}
	return -EADDRINUSE;
}

/* One reply line (format/ctlproto.h). */
static void send_reply(int fd, const struct mt_ctl_reply *r)
{
	char line[MEMTRACE_PATH_MAX + 300];
	int n = mt_ctl_reply_encode(line, sizeof(line), r);
	if (n <= 0)
		return;
	ssize_t w = send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)w; /* best effort: the client may be gone */
}

/* A reply of @kind, with @text for a kind that has a field. */
static void reply(int fd, enum mt_ctl_reply_kind kind, const char *text)
{
	struct mt_ctl_reply r = { .kind = kind, .text = text };
	send_reply(fd, &r);
}

/* A start's arguments (format/ctlproto.h) as @cfg. -EINVAL if the path
 * does not fit. */
static int config_of(const struct mt_ctl_request *r, struct memtrace_config *cfg)
{
	if (strlen(r->path) >= sizeof(cfg->path))
		return -EINVAL;
	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->fd = -1;
	cfg->flags = r->flags | MT_HDR_ATTACHED;
	cfg->interval_ms = r->interval_ms;
	strcpy(cfg->path, r->path);
	return 0;
}

static void thread_begin(const char *name)
{
	mt_in_hook = 1; /* memtrace's own thread: never recorded */
	mt_thread_own();
	prctl(PR_SET_NAME, name, 0, 0, 0);
}

/* A stop's thread: finishes the capture (waiting for the GIL only when
 * PyMem domains are to be put back) and answers the client. */
static void *stop_main(void *arg)
{
	(void)arg;
	thread_begin("memtrace-stop");
	int rc = memtrace_payload_stop();
	pthread_mutex_lock(&ctl.lock);
	int fd = ctl.client;
	ctl.client = -1;
	ctl.state = CTL_IDLE;
	if (fd >= 0) {
		if (rc < 0 && rc != -EINVAL) {
			reply(fd, MT_CTL_ERR_INCOMPLETE, mt_strerror(rc));
		} else if (!ctl.client_detach) {
			reply(fd, MT_CTL_OK_STOPPED, ctl.cfg.path);
		} else {
			struct mt_ctl_reply r = { .kind = MT_CTL_OK_DETACHED,
						  .dropped = mt_writer_dropped(),
						  .text = ctl.cfg.path };
			send_reply(fd, &r);
		}
		close(fd);
	}
	ctl.workers--;
	pthread_mutex_unlock(&ctl.lock);
	return NULL;
}

/* A start's thread. The C allocators are tracked as soon as the capture
 * is open; what needs the GIL follows whenever this thread gets it. */
static void *start_main(void *arg)
{
	(void)arg;
	thread_begin("memtrace-start");
	pthread_mutex_lock(&ctl.lock);
	struct memtrace_config cfg = ctl.cfg;
	unsigned gen = ctl.gen;
	ctl.cfg.fd = -1; /* the start owns it now */
	pthread_mutex_unlock(&ctl.lock);

	int rc = mt_start_attached(&cfg);
	int forked = rc == -EBUSY && mt_entry_forked(); /* before our lock: entry.c's first */
	pthread_mutex_lock(&ctl.lock);
	if (rc < 0) {
		ctl.state = ctl.cancel ? CTL_IDLE : CTL_FAILED;
		if (forked)
			snprintf(ctl.error, sizeof(ctl.error),
				 "it is tracked already, as a child of a process tracked with "
				 "--follow-fork (its capture ends when it does)");
		else if (rc == -EBUSY) /* not by an attach: the control thread knows those */
			snprintf(ctl.error, sizeof(ctl.error),
				 "it is tracked already, by memtrace run or a memtrace.Tracker "
				 "(one capture at a time)");
		else
			snprintf(ctl.error, sizeof(ctl.error), "cannot start tracking: %s",
				 mt_strerror(rc));
		ctl.cancel = 0;
		goto out;
	}
	ctl.started = 1;
	if (ctl.cancel) {
		ctl.cancel = 0;
		pthread_mutex_unlock(&ctl.lock);
		(void)memtrace_payload_stop();
		pthread_mutex_lock(&ctl.lock);
		ctl.state = CTL_IDLE;
		goto out;
	}
	if (!(cfg.flags & MT_HDR_PYALLOC))
		ctl.state = CTL_ACTIVE;
	ctl.workers--;
	if (ctl.gil_waiter) {
		/* an earlier start's thread still waits for the GIL: it does
		 * this capture's part too once it gets it */
		pthread_mutex_unlock(&ctl.lock);
		return NULL;
	}
	ctl.gil_waiter = 1;
	for (;;) {
		pthread_mutex_unlock(&ctl.lock);
		(void)mt_start_attached_python();
		pthread_mutex_lock(&ctl.lock);
		if (ctl.gen == gen)
			break;
		gen = ctl.gen; /* a capture started meanwhile: it may need it too */
	}
	if (ctl.state == CTL_STARTING && ctl.started)
		ctl.state = CTL_ACTIVE;
	ctl.gil_waiter = 0;
	pthread_mutex_unlock(&ctl.lock);
	return NULL;
out:
	ctl.workers--;
	pthread_mutex_unlock(&ctl.lock);
	return NULL;
}

/* Start @cfg (its fd is ours) on a start thread. Call with ctl.lock held
 * and no start or stop under way. */
static int begin_start(const struct memtrace_config *cfg)
{
	ctl.cfg = *cfg;
	ctl.expire_at = 0;
	ctl.cfg.flags |= MT_HDR_ATTACHED;
	ctl.state = CTL_STARTING;
	ctl.started = 0;
	ctl.cancel = 0;
	ctl.gen++;
	ctl.workers++;
	int rc = mt_spawn(start_main, NULL);
	if (rc < 0) {
		ctl.workers--;
		ctl.state = CTL_FAILED;
		snprintf(ctl.error, sizeof(ctl.error), "cannot start a thread: %s",
			 mt_strerror(rc));
		if (ctl.cfg.fd >= 0)
			close(ctl.cfg.fd);
		ctl.cfg.fd = -1;
	}
	return rc;
}

/* Reads the request line, and the descriptor that may come with it. */
static int read_request(int fd, char *req, size_t cap, int *passed)
{
	size_t got = 0;
	*passed = -1;
	while (got < cap - 1) {
		char cbuf[CMSG_SPACE(sizeof(int) * 4)];
		struct iovec iov = { req + got, cap - 1 - got };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (*passed < 0)
					*passed = mt_fd_high(f);
				else
					close(f);
			}
		}
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(req, '\n', got))
			break;
	}
	req[got] = '\0';
	char *nl = strchr(req, '\n');
	if (!nl)
		return -1;
	*nl = '\0';
	return 0;
}

static const enum mt_ctl_reply_kind status_reply[] = {
	[CTL_IDLE] = MT_CTL_OK_IDLE,         [CTL_STARTING] = MT_CTL_OK_STARTING,
	[CTL_ACTIVE] = MT_CTL_OK_ACTIVE,     [CTL_STOPPING] = MT_CTL_OK_STOPPING,
	[CTL_FAILED] = MT_CTL_ERROR,
};

/* A stop of the capture running, on a stop thread that answers @fd (or
 * no one, -1) and closes it. 0, or -1 if no thread could be started (the
 * capture then runs on). Call with ctl.lock held. */
static int begin_stop(int fd, int detach)
{
	ctl.state = CTL_STOPPING;
	ctl.client = fd;
	ctl.client_detach = detach;
	ctl.workers++;
	if (mt_spawn(stop_main, NULL) == 0) {
		ctl.expire_at = 0;
		return 0;
	}
	ctl.workers--;
	ctl.client = -1;
	ctl.state = CTL_ACTIVE;
	return -1;
}

/* Serves one client; returns 1 if its connection was handed to a stop
 * thread, which closes it. Call with ctl.lock held. */
static int serve(int fd, const char *line, int *passed)
{
	struct mt_ctl_request req;
	int parsed = mt_ctl_request_parse(line, &req);
	if (parsed == -EPROTO) {
		req.kind = MT_CTL_START; /* with arguments that are no start's */
	} else if (parsed < 0) {
		reply(fd, MT_CTL_ERR_UNKNOWN_REQUEST, NULL);
		return 0;
	}
	if (req.kind == MT_CTL_STATUS) {
		if (ctl.state == CTL_STARTING && ctl.cancel)
			reply(fd, MT_CTL_OK_CANCELLING, NULL);
		else
			reply(fd, status_reply[ctl.state],
			      ctl.state == CTL_ACTIVE   ? ctl.cfg.path
			      : ctl.state == CTL_FAILED ? ctl.error
							: NULL);
		return 0;
	}
	if (req.kind == MT_CTL_START) {
		struct memtrace_config cfg;
		if (ctl.state == CTL_ACTIVE || ctl.state == CTL_STARTING) {
			reply(fd, MT_CTL_ERR_ALREADY_ATTACHED, NULL);
		} else if (ctl.workers > 0) {
			/* a stop finishing, a start undone */
			reply(fd, MT_CTL_ERR_BUSY, NULL);
		} else if (parsed < 0 || config_of(&req, &cfg) < 0) {
			reply(fd, MT_CTL_ERR_BAD_START, NULL);
		} else {
			cfg.fd = *passed;
			*passed = -1;
			if (begin_start(&cfg) == 0)
				reply(fd, MT_CTL_OK_STARTING, NULL);
			else
				reply(fd, MT_CTL_ERROR, ctl.error);
		}
		return 0;
	}
	if (req.kind == MT_CTL_EXPIRE) {
		if (ctl.state == CTL_STOPPING || (ctl.state == CTL_STARTING && ctl.cancel)) {
			reply(fd, MT_CTL_ERR_STOPPING, NULL);
		} else if (ctl.state != CTL_ACTIVE && ctl.state != CTL_STARTING) {
			reply(fd, MT_CTL_ERR_NOT_ATTACHED, NULL);
		} else {
			uint64_t ms = req.after_ms < (uint64_t)INT32_MAX * 1000 ? req.after_ms
										: (uint64_t)INT32_MAX * 1000;
			ctl.expire_at = mono_ms() + (int64_t)ms;
			if (ctl.expire_at == 0)
				ctl.expire_at = 1;
			reply(fd, MT_CTL_OK_EXPIRING, NULL);
		}
		return 0;
	}
	/* stop or detach */
	if (ctl.state == CTL_STARTING && !(ctl.started && !ctl.cancel)) {
		/* the start has not opened its capture yet (it waits for the
		 * GIL, say): it is undone as soon as it returns */
		ctl.cancel = 1;
		reply(fd, MT_CTL_OK_CANCELLED, NULL);
		return 0;
	}
	if (ctl.state != CTL_ACTIVE && ctl.state != CTL_STARTING) {
		reply(fd, ctl.state == CTL_STOPPING ? MT_CTL_ERR_STOPPING : MT_CTL_ERR_NOT_ATTACHED,
		      NULL);
		return 0;
	}
	if (begin_stop(fd, req.kind == MT_CTL_DETACH) == 0)
		return 1;
	reply(fd, MT_CTL_ERROR, "cannot start a thread");
	return 0;
}

/* The expiry, if it has come: the capture stops as for a detach with no
 * client. Returns the ms until it comes (or CTL_RECHECK_MS). Call with
 * ctl.lock held. */
static int expire_locked(void)
{
	if (!ctl.expire_at)
		return CTL_RECHECK_MS;
	if (ctl.state != CTL_ACTIVE && ctl.state != CTL_STARTING) {
		ctl.expire_at = 0; /* ended some other way */
		return CTL_RECHECK_MS;
	}
	int64_t left = ctl.expire_at - mono_ms();
	if (left > 0)
		return left < CTL_RECHECK_MS ? (int)left : CTL_RECHECK_MS;
	/* a start still waiting for the GIL: once it is done; no thread to
	 * be had: again soon */
	if (ctl.state == CTL_ACTIVE)
		(void)begin_stop(-1, 1);
	return 100;
}

static void handle(int fd)
{
	char req[MEMTRACE_PATH_MAX + 64];
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int passed = -1;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
	    !mt_peer_allowed((long)cred.uid, getuid()))
		goto out; /* not ours to command: say nothing */
	/* the listener is non-blocking; the connection is not */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	struct timeval tv = { 2, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (read_request(fd, req, sizeof(req), &passed) < 0)
		goto out;
	pthread_mutex_lock(&ctl.lock);
	int handed = serve(fd, req, &passed);
	pthread_mutex_unlock(&ctl.lock);
	if (handed)
		fd = -1;
out:
	if (passed >= 0)
		close(passed);
	if (fd >= 0)
		close(fd);
}

/* Whether the listener is still ours; if the program closed it (and
 * perhaps reused its number), a new one. 0, or -1 if none can be made. */
static int keep_listener_locked(void)
{
	if (mt_fd_id_is(ctl.listen_fd, &ctl.listen_id))
		return 0;
	int fd = open_socket();
	ctl.listen_fd = fd;
	return fd >= 0 && mt_fd_id_take(fd, &ctl.listen_id) == 0 ? 0 : -1;
}

static int keep_listener(void)
{
	pthread_mutex_lock(&ctl.lock);
	int rc = keep_listener_locked();
	pthread_mutex_unlock(&ctl.lock);
	return rc;
}

static void *control_main(void *arg)
{
	(void)arg;
	thread_begin("memtrace-ctl");
	for (;;) {
		if (keep_listener() < 0) {
			/* no socket can be made now (out of descriptors): a
			 * capture that runs must stay stoppable, so try again */
			struct timespec ts = { CTL_RECHECK_MS / 1000, 0 };
			nanosleep(&ts, NULL);
			continue;
		}
		pthread_mutex_lock(&ctl.lock);
		int wait_ms = expire_locked();
		pthread_mutex_unlock(&ctl.lock);
		struct pollfd p = { .fd = ctl.listen_fd, .events = POLLIN };
		int pr = poll(&p, 1, wait_ms);
		if (pr <= 0 || !(p.revents & POLLIN) || keep_listener() < 0)
			continue;
		int fd = mt_fd_high(accept4(ctl.listen_fd, NULL, NULL, SOCK_CLOEXEC));
		if (fd >= 0) {
			handle(fd);
		} else if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
			   errno == ENOBUFS) {
			/* out of descriptors or memory for now: the program may
			 * give some back, and a capture that runs must stay
			 * stoppable */
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

/* The threads of the control channel this process has (the control
 * thread, and one per start or stop under way): entry.c's count of
 * memtrace's own threads (mt_entry_count_threads()). */
static int control_threads(void)
{
	pthread_mutex_lock(&ctl.lock);
	int n = ctl.pid == getpid() ? ctl.thread_running + ctl.workers + ctl.gil_waiter : 0;
	pthread_mutex_unlock(&ctl.lock);
	return n;
}

/* In a fork child: free the lock that threads the child does not have
 * may have held, and drop what belongs to the parent (its socket, its
 * threads). Registered with pthread_atfork() at the first attach. */
static void control_after_fork(void)
{
	pthread_mutex_init(&ctl.lock, NULL);
	mt_fd_id_close(ctl.listen_fd, &ctl.listen_id); /* the parent's socket */
	if (ctl.client >= 0)
		close(ctl.client);
	if (ctl.cfg.fd >= 0)
		close(ctl.cfg.fd);
	ctl.cfg.fd = -1;
	ctl.client = -1;
	ctl.listen_fd = -1;
	ctl.thread_running = 0;
	ctl.workers = 0;
	ctl.gil_waiter = 0;
	ctl.cancel = 0;
	ctl.expire_at = 0;
	ctl.state = CTL_IDLE;
}

static void register_once(void)
{
	pthread_atfork(NULL, NULL, control_after_fork);
	mt_entry_count_threads(control_threads);
}

/* Start (or reuse) the control thread; with a capture named in @cfg, start
 * it too. */
static int attach(const struct memtrace_config *cfg)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int rc = 0;
	mt_phdr_guard(); /* before the walks, and before our other fork handlers */
	pthread_once(&once, register_once);
	pthread_mutex_lock(&ctl.lock);
	if (!ctl.thread_running || ctl.pid != getpid()) {
		/* The socket first, so that the CLI can talk to us as soon as
		 * this returns. */
		int fd = open_socket();
		if (fd < 0) {
			pthread_mutex_unlock(&ctl.lock);
			return fd;
		}
		ctl.listen_fd = fd;
		(void)mt_fd_id_take(fd, &ctl.listen_id);
		ctl.pid = getpid();
		ctl.state = CTL_IDLE;
		rc = mt_spawn(control_main, NULL);
		if (rc < 0) {
			close(fd);
			ctl.listen_fd = -1;
			pthread_mutex_unlock(&ctl.lock);
			return rc;
		}
		ctl.thread_running = 1;
	} else if (keep_listener_locked() < 0) {
		/* the program closed our socket, and no new one can be made */
		pthread_mutex_unlock(&ctl.lock);
		return -EMFILE;
	}
	/* (a socket made new here is served once the thread's wait for the
	 * closed one ends, within CTL_RECHECK_MS) */
	if (cfg->path[0] || cfg->fd >= 0) {
		if (ctl.state == CTL_ACTIVE || ctl.state == CTL_STARTING)
			rc = -EBUSY;
		else if (ctl.workers > 0)
			rc = -EAGAIN;
		else
			rc = begin_start(cfg);
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
	struct mt_ctl_request req;
	int own = mt_guard_enter();
	int rc = spec && mt_ctl_spec_parse(spec, 1, &req) == 0 && config_of(&req, &cfg) == 0
			 ? attach(&cfg)
			 : -EINVAL;
	if (own)
		mt_guard_leave();
	return rc;
}
