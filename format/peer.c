/* SPDX-License-Identifier: MIT */
/*
 * Who may talk to memtrace's sockets (format/peer.h).
 */
#include "format/peer.h"

int mt_peer_allowed(long peer, uid_t self)
{
	return peer >= 0 && (peer == (long)self || peer == 0);
}
