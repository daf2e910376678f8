/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYTHON_H
#define MT_PAYLOAD_PYTHON_H
/*
 * The payload's view of the CPython interpreter in this process, for every
 * CPython 3.8 to 3.13 from one build: the C API is resolved at run time
 * (the payload never links libpython) and struct layouts come from per-
 * version tables chosen by the running interpreter's version.
 *
 * Functions marked hook-safe run inside malloc hooks on any thread: they
 * never allocate, take no lock, call no C API that can allocate, raise or
 * touch reference counts, and need not hold the GIL. The others run on
 * the payload's control thread.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

struct mt_rec_code;
struct mt_linecursor;

struct mt_pyframe {
	const void *code; /* PyCodeObject* */
	uint32_t offset;  /* bytes into the code's bytecode (lasti * 2 style);
			   * negative as int32_t for a 3.8..3.10 frame that has
			   * not run its first instruction (f_lasti -1) */
};

/* Identity of a code object, compared on every cache hit to detect that a
 * code object died and another took its address. */
struct mt_pycode_key {
	const void *filename, *name, *linetable;
	int firstlineno;
};

/* mt_python_init() - find the interpreter (first loaded object that
 * defines Py_GetVersion), check it is 3.8..3.13 and not free-threaded,
 * resolve the C API used later and choose the layout table.
 * Returns 0 and sets *python_hex (PY_VERSION_HEX), or -MT_ENOPY. */
int mt_python_init(uint32_t *python_hex);

/* mt_python_layout_row() - the running interpreter's row of mt_pylayouts
 * (python-layout.h). Only after mt_python_init() succeeded. Hook-safe. */
size_t mt_python_layout_row(void);

/* mt_python_initialized() - Py_IsInitialized() and not finalizing.
 * Hook-safe. False before mt_python_init() succeeded. */
int mt_python_initialized(void);

/* mt_python_gil_take() / mt_python_gil_give() - PyGILState_Ensure() and
 * PyGILState_Release(), for memtrace's own threads too: take returns the
 * state for give. A thread with no Python thread state gets one made out
 * of a fork's way (phdr.h): PyThreadState_New() holds the runtime's HEAD
 * lock without the GIL, and 3.8 to 3.11 take that lock in the child of a
 * fork (PyOS_AfterFork_Child()) before they make it anew, so a program's
 * thread that forked meanwhile (holding the GIL) left a child that waited
 * forever. Waiting for the GIL comes after, outside the gate: a fork
 * waits for a thread state's making, never for the GIL. Only with
 * mt_python_initialized() true. */
int mt_python_gil_take(void);
void mt_python_gil_give(int state);

/* One frame of a chain as walked: enough to recognise it again. */
struct mt_pyraw {
	const void *frame, *pos, *code;
};

/* Python frames of a stack, the newest kept; the chain frames followed,
 * 3.12+ shims included (one per call through C). Threads' chains are
 * mapped memory of which only the depth a thread reaches is touched;
 * the arrays' sizes are no multiple of a page, so that one frame's
 * entries in them fall in different cache sets. */
#define MT_STACK_MAX 16384
#define MT_CHAIN_MAX (MT_STACK_MAX + MT_STACK_MAX / 4 + 8)

/* A thread's frame chain as read at its last event, outermost frame first,
 * kept to match the next event's chain against. mt_python_update() keeps
 * all of it but id[], which is the caller's: the stack id of frames 0..i. */
struct mt_pychain {
	/* What every event reads first together, in one cache line. */
	uint32_t n;     /* frames held; 0 when there were no Python frames */
	uint32_t whole; /* frame[0] is the outermost frame: the chain was not cut */
	/* Set by mt_python_update() when only the newest frame's position
	 * moved (3.11+, where the position names code and offset at once):
	 * its kept and fr are left for mt_python_describe_newest(). */
	uint32_t lazy;
	/* Frames whose exit the interpreter reports to mt_python_frame_exit()
	 * (the exit feed, pyfeed.h) are marked: while a marked frame is in the
	 * chain it is the same activation, so the frames below it are still
	 * its callers at the same positions, and need no checking. */
	uint32_t gen; /* the feed generation the marks were made in; 0: none */
	uint32_t top; /* 1 + index of the newest marked frame; 0: none (the
		       * marked frames are a list from here through below[]) */
	/* 3.11: the tokens written into frames' stacks while they were
	 * suspended in calls (python-walk.h): the newest frame with one
	 * (1 + its index; 0: none); each one's token, slot and next below */
	uint32_t ttop;
	/* 1 + the index of the newest frame the last update proved the same
	 * activation as at the update before, neither suspended nor left in
	 * between (a mark, or on 3.11 a token, said so); 0: none. Its callers
	 * are then as unchanged, and so is every evaluation loop running
	 * them (native stacks reuse what lies below, track.c). */
	uint32_t held;
	/* the last walk joined the chain before at its newest frame, with
	 * new frames above it: the next one looks there first */
	uint32_t pushed;
	uint64_t toknext; /* odd: never an object's address */
	uint64_t checked; /* frames checked or described so far: what reading costs */
	const void *frame[MT_CHAIN_MAX];
	/* 3.11+: instruction pointer, its low bit set for an entry frame
	 * (see mt_frame_pos() in python-walk.h); before: f_lasti */
	const void *pos[MT_CHAIN_MAX];
	const void *code[MT_CHAIN_MAX]; /* before 3.11: f_code; from 3.11 NULL */
	struct mt_pyframe fr[MT_CHAIN_MAX]; /* code and offset where kept[i] */
	uint8_t kept[MT_CHAIN_MAX];         /* frame i is a frame of the Python stack */
	uint32_t id[MT_CHAIN_MAX];
	struct mt_pyraw scratch[MT_CHAIN_MAX]; /* new frames, innermost first */
	uint32_t below[MT_CHAIN_MAX]; /* of a marked frame: the next marked below it */
	uint64_t tok[MT_CHAIN_MAX];
	int32_t tokslot[MT_CHAIN_MAX];
	uint32_t tbelow[MT_CHAIN_MAX];
};

/* The exit feed as the walker reads it (set by pyfeed.c through
 * mt_python_feed()): gen is nonzero while the interpreter reports frame
 * exits; before 3.12 only on threads whose profile function is
 * profile. */
struct mt_pyfeed_state {
	uint32_t gen;
	const void *profile;
};
extern struct mt_pyfeed_state mt_pyfeed_now __attribute__((visibility("hidden")));

/* mt_python_feed() - the feed is on (@gen nonzero, a generation not used
 * before) or off (0). Control paths, with the GIL. */
void mt_python_feed(uint32_t gen, const void *profile);

/* mt_python_frame_exit() - the calling thread's @frame is returning,
 * yielding or unwinding: out of @c, with what is above it, if it is the
 * chain's newest marked frame. Called by the feed, with the GIL.
 * Hook-safe. */
void mt_python_frame_exit(struct mt_pychain *c, const void *frame);

/* mt_python_current_frame() - the calling thread's newest frame (the
 * chain's link, whatever its kind), or NULL. Hook-safe. */
const void *mt_python_current_frame(void);

/* mt_python_update() - read the calling thread's frame chain into @c
 * (zero-initialised the first time), reusing what is unchanged since the
 * last call: in a loop, only the newest frame is described again, and its
 * callers are only checked, with loads that overlap. Returns how many
 * outermost frames are unchanged (their kept, fr and id still hold);
 * frames from there to c->n - 1 have kept and fr filled in and need their
 * id. For any thread, with or without the GIL (the GOT hooks); the PyMem
 * wrappers, which hold it, walk through mt_python_walk() (python-walk.h).
 * Hook-safe. */
typedef size_t (*mt_python_update_fn)(struct mt_pychain *c);
/* the running version's, or NULL */
extern mt_python_update_fn mt_python_updater __attribute__((visibility("hidden")));
static inline size_t mt_python_update(struct mt_pychain *c)
{
	/* set before the walker's own readiness flag, which it checks */
	mt_python_update_fn update = __atomic_load_n(&mt_python_updater, __ATOMIC_ACQUIRE);
	if (update == NULL) {
		c->n = c->held = 0;
		return 0;
	}
	return update(c);
}

/* mt_python_describe_newest() - fill in kept and fr of the newest frame of
 * @c after mt_python_update() left them (c->lazy), and clear c->lazy.
 * Hook-safe. */
void mt_python_describe_newest(struct mt_pychain *c);

/* mt_python_complete() - whether @pos, the position of a kept frame just
 * described, is past its code's set-up: a frame there is kept whatever
 * its owner, so a cache keyed by the position alone may keep it. 3.11+.
 * Hook-safe. */
int mt_python_complete(const struct mt_pychain *c, size_t i);

/* mt_python_code_deaths() - @on: have each code object's deallocation
 * told to @gone by wrapping PyCode_Type's tp_dealloc: @gone is called once
 * the deallocator is done, on its thread, with the GIL held, errno kept
 * around it. 0: unwrap it (@gone unused); a wrapper that someone else
 * wrapped since stays in their chain and still tells the last @gone.
 * Control thread. Returns 0 or a negative error (-MT_ENOPY; -EINVAL for
 * @on without @gone; -EBUSY when another wrapper replaced ours: nothing
 * changed then). */
typedef void (*mt_python_code_gone_fn)(const void *code);
int mt_python_code_deaths(int on, mt_python_code_gone_fn gone);

/* mt_python_code_key() - identity fields of @code. Hook-safe. */
void mt_python_code_key(const void *code, struct mt_pycode_key *key);

/* mt_python_code_describe() - fill @out (a CODE record, id set by the
 * caller) from the live code object: file name, name, qualified name as
 * UTF-8 and, if @table, the line table (3.11+ location tables in 3.10's
 * form, mt_linetable_compact()), copied into @scratch (capacity @cap; what
 * does not fit is cut). Hook-safe. Returns 0, or -1 if the object does not
 * look like a code object. */
int mt_python_code_describe(const void *code, struct mt_rec_code *out, uint8_t *scratch,
			    size_t cap, int table);

/* mt_python_code_line() - the source line of the instruction at @offset
 * (struct mt_pyframe's, entry bit included) of the live code object
 * @code, from its own line table, looked up from @cur
 * (mt_linetable_line_from()); 0 when it has none or @code does not look
 * like a code object. Hook-safe. */
int mt_python_code_line(const void *code, uint32_t offset, struct mt_linecursor *cur);

/* mt_python_code_entry() - 1 if the frame at @offset (as above) is an
 * entry frame, the first its evaluation loop ran (every frame before
 * 3.11), else 0. */
uint32_t mt_python_code_entry(uint32_t offset);

#endif /* MT_PAYLOAD_PYTHON_H */
