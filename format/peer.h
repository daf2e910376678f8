/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_PEER_H
#define MT_FORMAT_PEER_H
/*
 * Who may talk to memtrace's sockets: a process of the same user, or
 * root. One rule for the payload's control socket (payload/control.c,
 * SO_PEERCRED) and for the live client of `memtrace run --live-remote`
 * (cli/cmd-live.c, the client's uid from /proc/net/tcp). It lives in
 * format/ because that is the only memtrace code the payload links. The
 * Python API cannot call it and keeps its own copy of the rule, which
 * must stay the same: python/memtrace/tracker.py, _peer_allowed().
 * Pure: no I/O, no malloc.
 */
#include <sys/types.h> /* uid_t */

/* mt_peer_allowed() - whether a peer of uid @peer may talk to a process
 * whose real uid is @self. @peer < 0 means its uid could not be told:
 * not allowed. */
int mt_peer_allowed(long peer, uid_t self);

#endif /* MT_FORMAT_PEER_H */
