/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_ERROR_H
#define MT_FORMAT_ERROR_H
/*
 * The one list of memtrace error codes. Functions below cli/ return int:
 * >= 0 on success, -errno or -MT_E* on failure. mt_strerror() names both.
 */

#define MT_ERRORS(X)                                                   \
	X(EFORMAT, "not a memtrace capture")                           \
	X(EVERSION, "unsupported capture format version")              \
	X(ETRUNC, "capture is truncated")                              \
	X(ECORRUPT, "capture is corrupt")                              \
	X(ENOPY, "target is not a supported CPython process")         \
	X(EPTRACE, "ptrace is not permitted")                          \
	X(EPAYLOAD, "payload failed")                                  \
	X(ECRASH, "memtrace's writer thread crashed")                 \
	X(EFDLOST, "the program closed the capture's file descriptor") \
	X(ENOTREG, "not a regular file")                              \
	X(EREPLACED, "capture file was replaced while it was followed")

enum mt_error {
	MT_E__BASE = 4096, /* above any errno */
#define MT_X(name, msg) MT_##name,
	MT_ERRORS(MT_X)
#undef MT_X
	MT_E__END
};

/* mt_strerror() - message for -errno or -MT_E* (sign ignored). Never NULL. */
const char *mt_strerror(int err);

#endif /* MT_FORMAT_ERROR_H */
