/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYMEM_H
#define MT_PAYLOAD_PYMEM_H
/*
 * What the tracker puts into the interpreter: the PyMem OBJ, MEM and RAW
 * domain wrappers (--trace-python-allocators), and the notice of a code object's
 * death to the stack tables. It sits above python.c, which only reads the
 * interpreter, and track.c, and joins the two. The wrappers themselves
 * are track.c's (track.h), where the recording path and the stack walk
 * inline into them; here they are only chained in front of the
 * interpreter's allocators, through the C API python.c resolved. The RAW
 * domain's wrappers are here: any thread calls them, GIL or not, and
 * they record as the GOT hooks do.
 *
 * Each domain has a few wrapper instances: one that someone else wrapped
 * in turn cannot be taken out of their chain on detach and stays there as
 * a pass-through forever, so a later attach takes a fresh one.
 * Install, uninstall and the code watch run on the control thread; quiet
 * on any.
 */

/* mt_python_pymem_install() - wrap the PYMEM_DOMAIN_OBJ, _MEM and _RAW
 * allocators with wrappers that report through mt_track_*,
 * taking the GIL with PyGILState_Ensure. Control thread, interpreter
 * initialized. Returns 0, or -MT_ENOPY. Does nothing and returns 0 when
 * the current allocator is already malloc-backed (every block is seen by
 * the malloc hooks then). */
int mt_python_pymem_install(void);

/* mt_python_pymem_uninstall() - put back the saved allocators of each
 * domain that still holds our wrapper (someone who wrapped us later keeps
 * us as a pass-through). Takes the GIL. Returns 0 or -MT_ENOPY. */
int mt_python_pymem_uninstall(void);

/* mt_python_pymem_quiet() - every PyMem wrapper of ours passes calls
 * through without recording (a fork child: the parent's capture traced
 * Python allocators, the child's own may not). No GIL needed. */
void mt_python_pymem_quiet(void);

/* mt_python_code_watch() - @on: have code objects' deallocations told to
 * the stack tables (mt_track_code_gone()), through python.c's
 * mt_python_code_deaths(); 0: stop. Returns as mt_python_code_deaths(). */
int mt_python_code_watch(int on);

#endif /* MT_PAYLOAD_PYMEM_H */
