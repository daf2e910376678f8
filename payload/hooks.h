/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_HOOKS_H
#define MT_PAYLOAD_HOOKS_H
/*
 * The allocator hooks (hooks.c): what patched GOT slots point at, and the
 * control-side calls that put them in and take them out (through got.h).
 *
 * The hooks of _exit() and of the exec family end the capture first: they
 * call the end callback they were given (mt_hooks_on_end()), and know
 * nothing of who owns the capture. Without one they pass straight through.
 * The callback runs on the program's thread, inside the hook: it must take
 * no lock it could wait for (_exit() may come with the caller's locks
 * held, in a fork child or a signal handler) and must keep errno.
 *
 * Control paths only, but for the hooks themselves, which are hook-safe
 * (track.h).
 */

/* How the program ends the capture: by _exit(), or by an exec that may
 * succeed (the callback then notes so in the capture). */
enum mt_hooks_end { MT_HOOKS_END_EXIT, MT_HOOKS_END_EXEC };

/* mt_hooks_on_end() - the function the _exit and exec hooks call before
 * the real one; NULL for none. Set it before mt_hooks_install(). */
void mt_hooks_on_end(void (*end)(enum mt_hooks_end how));

/* mt_hooks_resolve() - find the real allocator functions (once per
 * process). 0 or -errno. */
int mt_hooks_resolve(void);

/* mt_hooks_install() / mt_hooks_uninstall() - patch or restore the GOTs of
 * all loaded objects. Return slots changed or -errno. */
int mt_hooks_install(void);
int mt_hooks_uninstall(void);

#endif /* MT_PAYLOAD_HOOKS_H */
