/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYTHREADS_H
#define MT_PAYLOAD_PYTHREADS_H
/*
 * Python's thread names for the capture. A data descriptor in
 * threading.Thread for `_name` and `_native_id` (the values stay in each
 * instance's dict, as before) tells memtrace, whenever one of them is set
 * and the other is known, the thread's kernel id and name: at a thread's
 * start (threading sets its native id then) and at every rename, before or
 * after the start, from any thread; the threads that exist when it goes in
 * are told at once. memray does the same. A NAME record (track.h) carries
 * each. It stays in after tracking ends, saying nothing then, so that a
 * detach needs no GIL; a new capture finds it in.
 *
 * Installing runs Python code: call it with the GIL, and never with a lock
 * a thread holding the GIL may wait for (pyhooks.h).
 */

/* mt_pythreads_install() - put the descriptor in, the first time
 * (threading is imported for it if the program has not yet, as memray's
 * does), and tell the capture the names of the threads there are now:
 * at every capture's Python setup. Only the main thread may import
 * threading (pyapi.h): called on another before the program has, it
 * returns 1 and does nothing, to be called again on the main thread.
 * 0, or -1 if it could not be. Needs the GIL. */
int mt_pythreads_install(void);

/* mt_pythreads_name_self() - tell the capture the calling thread's name
 * under its own kernel id: a fork child's, whose threading keeps the
 * parent's id for it. Nothing if the descriptor never went in. 0, or -1
 * if it could not be. Needs the GIL, and no lock of memtrace's. */
int mt_pythreads_name_self(void);

#endif /* MT_PAYLOAD_PYTHREADS_H */
