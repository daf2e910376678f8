/* SPDX-License-Identifier: MIT */
/*
 * memtrace live: follow a capture while it is written and show what holds
 * memory now, refreshed until tracking ends. Each refresh reads the chunks
 * the capture gained since the last one (reader/follow.h: the one being
 * written is read once it is whole) and draws a frame of
 * reader/report-live.c: in place on a terminal, one after the other
 * otherwise.
 */
#include "cli/cmd.h"
#include "cli/live-term.h"
#include "cli/live-view.h"
#include "format/error.h"
#include "format/peer.h"
#include "reader/follow.h"
#include "reader/report.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/procstat.h"
#include "util/strbuf.h"

#include <arpa/inet.h> /* htons */
#include <ctype.h>     /* isdigit */
#include <dirent.h>    /* opendir */
#include <errno.h>     /* errno */
#include <fcntl.h>     /* O_CLOEXEC */
#include <getopt.h>    /* getopt_long */
#include <limits.h>    /* PATH_MAX */
#include <pthread.h>   /* pthread_create */
#include <stdatomic.h> /* atomic_int */
#include <signal.h>    /* kill */
#include <stdio.h>     /* open_memstream */
#include <stdlib.h>    /* strtod */
#include <string.h>    /* strcmp */
#include <netinet/in.h> /* sockaddr_in */
#include <sys/socket.h> /* socket */
#include <sys/stat.h>  /* stat */
#include <sys/wait.h>  /* waitid */
#include <time.h>      /* nanosleep */
#include <unistd.h>    /* close */

static const char usage[] =
	"usage: memtrace live [--interval SECONDS] [-n N] [--sort KEY] [--once] CAPTURE\n"
	"       memtrace live [--interval SECONDS] [-n N] [--sort KEY] PORT\n"
	"\n"
	"Follows a capture while it is written (by memtrace run, attach or a Tracker),\n"
	"or as `memtrace run --live-remote` or a Tracker's SocketDestination sends it\n"
	"to PORT on 127.0.0.1, and shows what holds memory now, and how much more than\n"
	"when the view started, until tracking ends. On a terminal the view is redrawn\n"
	"in place (q or Esc quits; o sorts by own live memory, t by total, a by own\n"
	"blocks, g by growth, s by steady rise; m shows one thread at a time and <\n"
	"and > or the left and right arrows go from one to the next; space pauses;\n"
	"the up and down arrows, Page Up and Down, Home and End scroll the rows);\n"
	"otherwise a frame is printed at every refresh.\n"
	"\n"
	"  --interval S  seconds between refreshes (default 1; 0.05 to 3600)\n"
	"  -n, --top N   locations to show (default: what the terminal has room for, or 20)\n"
	"  --sort KEY    own: the most memory live first (default); total: the most\n"
	"                memory live in what they called too first; blocks: the most\n"
	"                blocks of their own live first; growth: the most\n"
	"                growth since the view started first; steady: the call paths\n"
	"                whose live bytes rose most steadily across the capture so far\n"
	"                first, as `memtrace growth` ranks them, with their rise, its\n"
	"                rate per hour, how steady it was (100%: never went down) and r\n"
	"  --once        show one frame of a CAPTURE and exit (not with --sort growth)\n";

/* --sort's names and the keys that choose them, by enum mt_live_sort */
static const char *const sort_names[] = { "own", "growth", "steady", "total", "blocks" };
static const char sort_keys[] = "ogsta";
#define N_SORTS ((int)(sizeof(sort_names) / sizeof(sort_names[0])))

/* How long a capture may stay without its header (attach writes it once
 * the payload runs in the target). */
#define HEADER_WAIT_MS 30000
/* How long `live PORT` tries a port where nothing listens yet. */
#define CONNECT_WAIT_MS 10000

/* A capture sent to us (memtrace run --live-remote, a Tracker's
 * SocketDestination): a thread of ours takes it as it comes, into a
 * temporary file that the view reads like any capture. The sender never
 * waits for the view, however long a refresh takes. */
static struct {
	int fd;            /* the connection, or -1 */
	int file;          /* the temporary file */
	int wake[2];       /* the thread says the end came */
	atomic_int eof;    /* the sender closed the connection */
	atomic_int err;    /* or the file could not take it: -errno */
	pthread_t thread;
	char path[64];     /* /proc/self/fd/<file> */
} stream = { .fd = -1, .file = -1, .wake = { -1, -1 } };

static void *stream_reader(void *arg)
{
	static uint8_t buf[1 << 16];
	(void)arg;
	for (;;) {
		ssize_t n = recv(stream.fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t k = write(stream.file, buf + off, (size_t)(n - off));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				atomic_store(&stream.err, k < 0 ? -errno : -ENOSPC);
				goto out;
			}
			off += k;
		}
	}
out:
	atomic_store(&stream.eof, 1);
	(void)!write(stream.wake[1], "", 1);
	return NULL;
}

/* Connected to @where: the file and the thread. 0, or -errno. */
static int stream_start(void)
{
	const char *dir = getenv("TMPDIR");
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s/memtrace-live-XXXXXX", dir && *dir ? dir : "/tmp");
	stream.file = mkostemp(tmp, O_CLOEXEC);
	if (stream.file < 0)
		return -errno;
	unlink(tmp);
	snprintf(stream.path, sizeof(stream.path), "/proc/self/fd/%d", stream.file);
	if (pipe2(stream.wake, O_CLOEXEC) < 0)
		return -errno;
	int e = pthread_create(&stream.thread, NULL, stream_reader, NULL);
	return -e;
}

static void stream_stop(void)
{
	if (stream.fd >= 0) {
		shutdown(stream.fd, SHUT_RDWR); /* the thread's recv() returns */
		if (stream.wake[1] >= 0)
			pthread_join(stream.thread, NULL);
		close(stream.fd);
	}
	for (int i = 0; i < 2; i++)
		if (stream.wake[i] >= 0)
			close(stream.wake[i]);
	if (stream.file >= 0)
		close(stream.file);
	stream.fd = stream.file = stream.wake[0] = stream.wake[1] = -1;
}

/* Whether the terminal takes UTF-8, as the locale's variables say (the
 * first of them that is set counts). */
static int locale_utf8(void)
{
	static const char *const vars[] = { "LC_ALL", "LC_CTYPE", "LANG" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return strcasestr(v, "utf-8") || strcasestr(v, "utf8");
	}
	return 0;
}

/* While a capture has no header yet (attach writes it once the payload
 * runs, a sender once its program starts): a frame that says so. */
static void draw_waiting(const char *what, int64_t waited_ms)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;

	mt_strbuf_addstr(&sb, "memtrace live: ");
	mt__report_text(&sb, what); /* no terminal controls from a name */
	mt_strbuf_addf(&sb, "\nwaiting for the capture's header: %lld s of %d  (q quits)",
		       (long long)(waited_ms / 1000), HEADER_WAIT_MS / 1000);
	mt_live_term_draw(sb.buf, sb.len);
	mt_strbuf_release(&sb);
}

/* Wait @ms, or less if a key, a signal or the end of a stream comes.
 * Returns 1 if the user asked to quit; the other keys change @v. */
static int wait_or_quit(int ms, struct mt_live_view *v)
{
	int wake = stream.wake[0] >= 0 && !atomic_load(&stream.eof) ? stream.wake[0] : -1;
	char keys[64];
	size_t n;

	if (mt_live_term_wait(ms, wake, keys, sizeof(keys), &n))
		return 1;
	mt_live_view_keys(v, keys, n, sort_keys);
	return 0;
}

/* PORT rather than a capture's name: digits, and no such file. */
static int port_of(const char *arg)
{
	struct stat sb;
	size_t n = strlen(arg);
	if (!n || n > 5 || stat(arg, &sb) == 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)arg[i]))
			return -1;
	long port = strtol(arg, NULL, 10);
	return port >= 1 && port <= 65535 ? (int)port : -1;
}

/* The uid of the process at the other end of @fd, a connection on
 * 127.0.0.1 (its socket is in /proc/net/tcp with our ends swapped), or -1
 * if it cannot be told. */
static long peer_uid(int fd)
{
	struct sockaddr_in me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	char line[512];
	long uid = -1;

	if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
		return -1;
	FILE *f = fopen("/proc/net/tcp", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned la, lp, ra, rp;
		long u;
		if (sscanf(line, " %*d: %x:%x %x:%x %*x %*x:%*x %*x:%*x %*x %ld", &la, &lp, &ra, &rp,
			   &u) != 5)
			continue;
		/* addresses as the kernel prints them: the 32-bit value in host order */
		if (la == peer.sin_addr.s_addr && lp == ntohs(peer.sin_port) &&
		    ra == me.sin_addr.s_addr && rp == ntohs(me.sin_port)) {
			uid = u;
			break;
		}
	}
	fclose(f);
	return uid;
}

int mt_cli_live_accept(int port, char *where, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int one = 1, c = -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return mt_error(-errno, "cannot create a socket"), -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
		mt_error(-errno, "cannot listen on 127.0.0.1:%d", port);
		close(fd);
		return -1;
	}
	snprintf(where, len, "127.0.0.1:%d", ntohs(a.sin_port));
	fprintf(stderr, "memtrace: waiting for a live client on %s: run `memtrace live %d`\n",
		where, ntohs(a.sin_port));
	/* The capture is ours (a capture file is 0600): a client of another
	 * user is turned away (root may look), by format/peer.h's rule. */
	for (;;) {
		c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0 && errno == EINTR)
			continue;
		if (c < 0)
			break;
		long uid = peer_uid(c);
		if (mt_peer_allowed(uid, getuid()))
			break;
		if (uid < 0)
			mt_warning("turned away a live client whose user cannot be told");
		else
			mt_warning("turned away a live client of another user (uid %ld)", uid);
		close(c);
	}
	if (c < 0)
		mt_error(-errno, "cannot take a live client on %s", where);
	close(fd);
	return c;
}

/* Does process @pid hold file @sb open? 1 yes, 0 no, -1 if its
 * descriptors are not ours to see (another user's, or not dumpable). */
static int holds_open(pid_t pid, const struct stat *sb)
{
	char dir[32];
	struct dirent *e;
	struct stat fs;
	int held = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	/* each descriptor's link followed: the file it has open */
	while (!held && (e = readdir(d)))
		held = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &fs, 0) == 0 &&
		       fs.st_dev == sb->st_dev && fs.st_ino == sb->st_ino;
	closedir(d);
	return held;
}

/* Is the process that writes capture @path gone? kill(pid, 0) alone would
 * take a zombie, or another process that has the pid now, for it: a later
 * one that got the same pid, or, for a capture made on another host or in
 * another pid namespace, whatever has it here (pid 1, say). The writer
 * holds the capture open until its trailer is written: a process that
 * does not is another one. */
static int writer_gone(const struct mt_header *h, const char *path)
{
	pid_t pid = (pid_t)h->pid;
	struct stat sb;
	int named = stat(path, &sb) == 0; /* not if it was removed since */

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0) {
		/* one we may not signal runs as another user, and did not
		 * write a capture of ours */
		return errno == ESRCH || (errno == EPERM && named && sb.st_uid == geteuid());
	}
	struct mt_procstat ps;
	if (mt_procstat_read(pid, &ps) < 0)
		return 0;
	char state = ps.state;
	unsigned long long start_ticks = ps.start;
	if (state == 'Z' || state == 'X')
		return 1;
	if (named && holds_open(pid, &sb) == 0)
		return 1;
	/* a process started after the capture did is another one */
	FILE *st = fopen("/proc/stat", "re");
	unsigned long long btime = 0;
	if (st) {
		char line[256];
		while (fgets(line, sizeof(line), st))
			if (sscanf(line, "btime %llu", &btime) == 1)
				break;
		fclose(st);
	}
	long hz = sysconf(_SC_CLK_TCK);
	if (!btime || hz <= 0 || !h->start_ns)
		return 0;
	unsigned long long started = btime + start_ticks / (unsigned long long)hz;
	return started > h->start_ns / 1000000000ull + 2;
}

/* The file is not a capture yet: empty, or shorter than a header. */
static int header_pending(const char *path, int err)
{
	static const char magic[8] = "MEMTRACE";
	char head[8];
	struct stat sb;

	if (err == -MT_ETRUNC)
		return 1;
	if (err != -MT_EFORMAT || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
		return 0;
	/* The file grows as it is read: it may have been empty then and
	 * hold the first bytes now. Pending while what it holds could be
	 * the start of a capture. */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, head, sizeof(head)) : -1;
	if (fd >= 0)
		close(fd);
	return n >= 0 && memcmp(head, magic, (size_t)n) == 0;
}

int cmd_live(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "top", required_argument, NULL, 'n' },
		{ "once", no_argument, NULL, '1' },
		{ "sort", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mt_report_opts o = { .view = MT_VIEW_LEAKS, .temp_threshold = 1 };
	double interval = 1.0;
	int once = 0, top_given = 0, sort = MT_LIVE_SORT_OWN, c;
	char *end;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			interval = strtod(optarg, &end);
			if (!mt_cli_is_number(optarg, 1) || *end ||
			    !(interval >= 0.05 && interval <= 3600)) {
				mt_error(0, "live: --interval wants seconds from 0.05 to 3600, not '%s'",
					 optarg);
				return 2;
			}
			break;
		case 'n':
			if (mt_cli_count_option(optarg, 0, UINT32_MAX, &o.top_n, "live", "-n"))
				return 2;
			top_given = 1;
			break;
		case '1':
			once = 1;
			break;
		case 's':
			for (sort = 0; sort < N_SORTS && strcmp(optarg, sort_names[sort]); sort++)
				;
			if (sort == N_SORTS) {
				mt_error(0, "live: --sort wants own, total, blocks, growth or steady, "
					    "not '%s'", optarg);
				return 2;
			}
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return mt_cli_option_error("live", argv, "n:h", opts);
		}
	}
	if (argc - optind != 1)
		return mt_cli_operands_error("live", "one capture or PORT", argc - optind);
	if (once && sort == MT_LIVE_SORT_GROWTH) {
		mt_error(0, "live: --sort growth compares frames: not with --once");
		return 2;
	}
	if (once && port_of(argv[optind]) > 0) {
		mt_error(0, "live: --once reads a capture file; a PORT's sender waits for its one "
			    "client to follow it");
		return 2;
	}
	/* all digits and no such file: a port, which must be one */
	const char *arg = argv[optind];
	struct stat sb;
	if (*arg && strspn(arg, "0123456789") == strlen(arg) && stat(arg, &sb) != 0 &&
	    port_of(arg) < 0) {
		mt_error(0, "live: invalid port %s (1 to 65535), and no capture of that name", arg);
		return 2;
	}
	struct mt_live_opts lo = { .path = argv[optind], .interval = interval, .top_n = o.top_n,
				   .top_given = top_given, .sort = sort, .once = once };
	return mt_cli_live(&lo);
}

/* Read what the capture gained since the last refresh into @rd (added to
 * what it holds: a frame may take two refreshes). */
static int refresh(struct mt_follow *fol, struct mt_follow_read *rd, uint64_t *us, char *msg,
		   size_t len)
{
	int64_t t0 = mt_now_us();
	int err = mt_follow_refresh(fol, msg, len);
	struct mt_follow_read r = mt_follow_last(fol);

	*us += (uint64_t)(mt_now_us() - t0);
	rd->chunks += r.chunks;
	rd->events += r.events;
	rd->from_start |= r.from_start;
	return err;
}

/* Has our child @pid (run --live) ended? Not reaped: run waits for it. */
static int child_ended(pid_t pid)
{
	siginfo_t si = { 0 };
	return pid > 0 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	       si.si_pid == pid;
}

int mt_cli_live(struct mt_live_opts *lo)
{
	struct mt_report_opts o = { .view = MT_VIEW_LEAKS, .temp_threshold = 1 };
	double interval = lo->interval;
	int once = lo->once, top_given = lo->top_given;
	struct mt_live_view v = { .sort = lo->sort };

	o.path = lo->path;
	o.top_n = lo->top_n;
	mt_live_term_reset();

	char remote[32];
	int port = port_of(lo->path);
	if (port > 0) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		snprintf(remote, sizeof(remote), "127.0.0.1:%d", port);
		/* The sender may be about to listen (a Tracker starting, say):
		 * a refused connection is tried again for a while. */
		int64_t give_up = mt_now_ms() + CONNECT_WAIT_MS;
		int e;
		for (;;) {
			stream.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (stream.fd < 0) {
				e = -errno;
				break;
			}
			/* our thread drains it: no need for the kernel to hold tens
			 * of megabytes for a client that stopped (suspended) */
			int rcv = 1 << 20;
			setsockopt(stream.fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
			if (connect(stream.fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
				e = 0;
				break;
			}
			e = -errno;
			close(stream.fd);
			stream.fd = -1;
			if (e != -ECONNREFUSED || once || mt_now_ms() >= give_up ||
			    mt_live_term_stopped(NULL))
				break;
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		if (e == 0 && (e = stream_start()) < 0)
			mt_error(e, "live: cannot keep what %s sends", remote);
		else if (e < 0)
			mt_error(e, "live: cannot connect to %s", remote);
		if (e < 0) {
			stream_stop();
			return 1;
		}
		o.path = stream.path;
	}

	int ms = (int)(interval * 1000 + 0.5);
	int64_t first_try = mt_now_ms();
	struct mt_header seen = { 0 };
	char *frame = NULL;
	size_t len = 0;
	/* the last frame's rows, while nothing new is read (and of the same
	 * threads) */
	struct mt_location *locs = NULL;
	ssize_t n_locs = -1;
	int locs_split = 0;
	uint32_t locs_thread = 0;
	struct mt_growth_row *steady = NULL;
	ssize_t n_steady = -1;
	int err = 0;

	/* each call path's series across the samples, for the steady sort
	 * only: it adds to the cost of every event read */
	struct mt_snapshot_opts so = { .temp_threshold = o.temp_threshold,
				       .growth = v.sort == MT_LIVE_SORT_STEADY };
	struct mt_follow *fol = mt_follow_new(o.path, &so);
	if (!fol) {
		mt_error(-ENOMEM, "live");
		stream_stop();
		return 1;
	}
	mt_live_term_enter();
	for (;;) {
		const struct mt_snapshot *sp = NULL;
		struct mt_live_frame f = { .state = "tracking" };
		struct mt_follow_read rd = { 0 };
		uint64_t read_us = 0;
		char msg[PATH_MAX + 1024]; /* a message quotes the capture's path */

		mt_live_term_suspend();
		if (v.sort == MT_LIVE_SORT_STEADY && !so.growth) {
			/* s pressed: the capture read again, its series from the start */
			so.growth = 1;
			v.paused = 0;
			mt_follow_set_opts(fol, &so);
		}
		/* If the process is gone without a trailer, what is read after
		 * finding that out is all there will be. */
		int gone = 0, pending;
		int64_t began = mt_now_ms();
		if (v.paused && frame) {
			/* the last frame's snapshot, as it was */
			err = 0;
			pending = 0;
		} else if (stream.fd >= 0) {
			gone = atomic_load(&stream.eof); /* then the file holds it all */
			err = atomic_load(&stream.err);
			if (err < 0)
				snprintf(msg, sizeof(msg), "cannot keep what %s sends: %s", remote,
					 strerror(-err));
			else
				err = refresh(fol, &rd, &read_us, msg, sizeof(msg));
			pending = !gone && header_pending(o.path, err);
		} else {
			err = refresh(fol, &rd, &read_us, msg, sizeof(msg));
			if (err == 0) {
				sp = mt_follow_snapshot(fol);
				gone = !sp->have_trailer && writer_gone(&sp->header, o.path);
				if (gone) /* read again: the last chunks may have come */
					err = refresh(fol, &rd, &read_us, msg, sizeof(msg));
			}
			pending = header_pending(o.path, err);
		}
		if (err < 0 && pending && child_ended(lo->writer)) {
			/* run --live: the program ended without a capture; run says why */
			mt_live_term_leave();
			goto fail;
		}
		if (err < 0) {
			if (pending && !once && mt_now_ms() - first_try < HEADER_WAIT_MS) {
				if (mt_live_term_screen())
					draw_waiting(stream.fd >= 0 ? remote : o.path,
						     mt_now_ms() - first_try);
				if (wait_or_quit(ms < 200 ? ms : 200, &v))
					break;
				continue;
			}
			mt_live_term_leave();
			if (stream.fd >= 0 && (pending || header_pending(o.path, err)))
				mt_error(0, "live: %s sent no capture header%s", remote,
					 gone ? " before it closed the connection" : " in 30 s");
			else if (stream.fd >= 0 && err != -ENOMEM && atomic_load(&stream.err) == 0)
				mt_error(0, "live: cannot read what %s sent: %s", remote,
					 mt_strerror(err));
			else if (pending)
				mt_error(0, "live: '%s' has no capture header%s", o.path,
					 once ? "" : " after 30 s");
			else
				mt_error(0, "live: %s", msg);
			goto fail;
		}
		sp = mt_follow_snapshot(fol);
		mt_live_view_thread(&v, sp);
		if (rd.chunks || rd.from_start || locs_split != v.split ||
		    (v.split && locs_thread != v.thread)) {
			free(locs);
			free(steady);
			locs = NULL;
			steady = NULL;
			n_locs = n_steady = -1;
		}
		if (v.sort != MT_LIVE_SORT_STEADY && n_locs < 0 &&
		    (err = (int)(n_locs = mt_live_locations(sp, v.split ? v.thread : MT_ALL_THREADS,
							     &locs))) < 0)
			goto fail_draw;
		locs_split = v.split;
		locs_thread = v.thread;
		if (v.sort == MT_LIVE_SORT_STEADY && n_steady < 0 &&
		    (err = (int)(n_steady = mt_live_steady(sp, &steady))) < 0)
			goto fail_draw;
		f.locs = n_locs >= 0 ? locs : NULL;
		f.n_locs = n_locs >= 0 ? (size_t)n_locs : 0;
		f.by_steady = v.sort == MT_LIVE_SORT_STEADY;
		f.split = v.split;
		f.thread = v.thread;
		f.first_row = &v.first;
		f.steady = steady;
		f.n_steady = n_steady >= 0 ? (size_t)n_steady : 0;
		f.read_chunks = rd.chunks;
		f.read_events = rd.events;
		f.read_from_start = rd.from_start;
		f.read_us = read_us;

		int done = once;
		if (sp->have_trailer) {
			f.state = "tracking ended";
			done = 1;
		} else if (gone) {
			f.state = stream.fd >= 0
					  ? "the sender closed the connection: the capture ends here, cut short"
					  : "the process is gone: the capture ends here, cut short";
			done = 1;
		}
		if (v.paused && frame) {
			f.state = "paused: nothing is read";
			f.hint = "space goes on, q quits";
		} else if (!done && mt_live_term_keys()) {
			f.hint = "q quits, o/t/a/g/s sort, m < > threads, space pauses, arrows scroll";
		}
		f.interval = done ? 0 : interval;
		f.utf8 = locale_utf8();
		/* another capture in the same file: growth starts again */
		if (sp->header.pid != seen.pid || sp->header.start_ns != seen.start_ns)
			mt_live_view_forget(&v);
		seen = sp->header;
		/* growth since the view started, or since the thread was first
		 * shown on its own */
		f.base = once ? NULL : mt_live_view_base(&v, sp);
		f.by_growth = v.sort == MT_LIVE_SORT_GROWTH;
		f.by_total = v.sort == MT_LIVE_SORT_TOTAL;
		f.by_blocks = v.sort == MT_LIVE_SORT_BLOCKS;
		unsigned cols, lines;
		if (mt_live_term_screen()) {
			if (mt_live_term_size(&cols, &lines) == 0) {
				f.width = cols;
				if (!top_given)
					o.top_n = lines > 11 ? lines - 10u : 1u;
			} else if (!top_given) {
				o.top_n = 20; /* a terminal of no known size */
			}
		} else if (!top_given) {
			o.top_n = 20;
		}

		free(frame);
		frame = NULL;
		FILE *mem = open_memstream(&frame, &len);
		struct mt_report_opts shown = o;
		if (stream.fd >= 0)
			shown.path = remote;
		err = mem ? mt_report_live(mem, sp, &shown, &f) : -errno;
		if (mem && fclose(mem) != 0 && err == 0)
			err = -ENOMEM;
		if (err < 0)
			goto fail_draw;
		mt_live_term_draw(frame, len);
		if (ferror(stdout)) {
			/* no one reads the view any more (a closed pipe): as if quit */
			lo->output_gone = 1;
			break;
		}
		if (gone && !sp->have_trailer)
			lo->cut_short = 1;
		/* A big capture takes a while to read: at most half the time
		 * goes to reading it. */
		int64_t took = mt_now_ms() - began;
		int wait = took > (int64_t)ms ? (int)(took < 3600000 ? took : 3600000) : ms;
		v.page = o.top_n;
		if (done || wait_or_quit(wait, &v))
			break;
	}
	if (mt_live_term_screen()) {
		mt_live_term_leave();
		if (frame) /* the last frame stays in the terminal */
			fwrite(frame, 1, len, stdout);
	}
	free(frame);
	mt_live_view_forget(&v);
	mt_follow_free(fol);
	free(locs);
	free(steady);
	stream_stop();
	lo->stopped_by = mt_live_term_stopped(&lo->stopped_by_kernel);
	return 0;

fail_draw:
	mt_live_term_leave();
	mt_error(err, "live: cannot draw the view");
fail:
	free(frame);
	mt_live_view_forget(&v);
	mt_follow_free(fol);
	free(locs);
	free(steady);
	stream_stop();
	return 1;
}
