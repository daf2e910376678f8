/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_INTERN_H
#define MT_PAYLOAD_INTERN_H
/*
 * The capture's tables of code objects and stack nodes: each new one gets
 * the next id and its record (CODE, STACK, NATIVE or HYBRID), pushed to the
 * buffer of the thread that met it first. One shared state, guarded by
 * one spinlock, mt_intern_lock(): every other function here is called with
 * it held, and is hook-safe (tables grow with mmap, never malloc).
 *
 * A stack node is (parent, code, offset), whatever its record carries: a
 * Python frame with code a CODE id; a native frame with code NATIVE_CODE |
 * the address's high half and the low half in offset; a hybrid stack with
 * code HYBRID_CODE, its Python stack in parent and its native leaf in
 * offset. (User-space addresses keep the high half below 2^30.)
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

struct mt_tbuf;

#define MT_NATIVE_CODE 0x80000000u
#define MT_HYBRID_CODE 0xc0000000u

/* mt_intern_lock() / mt_intern_unlock() - the tables' lock: a spinlock,
 * held for one stack's lookups. mt_intern_after_fork() frees it in a fork
 * child (a thread the child does not have may have held it). */
void mt_intern_lock(void);
void mt_intern_unlock(void);
void mt_intern_after_fork(void);

/* mt_intern_code() - the id of code object @code, a new one (its CODE
 * record pushed to @buf) if it is new, or if the object known at its
 * address died. 0 when out of memory. *@lost is set when a record could
 * not be pushed. */
uint32_t mt_intern_code(const void *code, struct mt_tbuf *buf, int *lost);

/* mt_intern_node() - the id of node (@parent, @code, @offset), a new one
 * (its record pushed to @buf) if it is new; @parent when out of memory.
 * *@lost as above. @pycode: a Python node's live code object, whose line
 * at @offset a new node's record carries in lines mode. */
uint32_t mt_intern_node(uint32_t parent, uint32_t code, uint32_t offset, const void *pycode,
			struct mt_tbuf *buf, int *lost);

/* mt_intern_lines() - from now on (until changed), STACK records carry
 * source lines and CODE records no line tables (the capture header's
 * MT_HDR_LINES), or, if !@on, bytecode offsets and line tables. */
void mt_intern_lines(int on);

/* mt_intern_forget_native() - a library was unloaded, and another may
 * take its addresses: native and hybrid nodes met from now on are new
 * ones, recorded under the module map of their time. Python nodes stay.
 * Returns 0, or -1 when out of memory (the table is then as it was). */
int mt_intern_forget_native(void);

/* mt_intern_code_gone() - @code is being freed: a code object made at its
 * address later is a new one. Returns 1 if it had an id. */
int mt_intern_code_gone(const void *code);

/* mt_intern_forget() - forget every code object and node, so that they
 * are described again under new ids (ids go on: a capture never reuses
 * one). mt_intern_reset() also starts the ids again, for a new capture. */
void mt_intern_forget(void);
void mt_intern_reset(void);

#endif /* MT_PAYLOAD_INTERN_H */
