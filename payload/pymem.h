/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYMEM_H
#define MT_PAYLOAD_PYMEM_H
/*
 * Putting the PyMem OBJ and MEM domain wrappers (--trace-python-allocators)
 * into the interpreter and taking them out again. The wrappers themselves
 * are track.c's (track.h), where the recording path and the stack walk
 * inline into them; here they are only chained in front of the
 * interpreter's allocators, through the C API python.c resolved.
 *
 * Each domain has a few wrapper instances: one that someone else wrapped
 * in turn cannot be taken out of their chain on detach and stays there as
 * a pass-through forever, so a later attach takes a fresh one.
 * Install and uninstall run on the control thread; quiet on any.
 */

/* mt_python_pymem_install() - wrap the PYMEM_DOMAIN_OBJ and _MEM
 * allocators (never RAW) with wrappers that report through mt_track_*,
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

#endif /* MT_PAYLOAD_PYMEM_H */
