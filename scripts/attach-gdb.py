# SPDX-License-Identifier: MIT
# memtrace attach through gdb, for when the ptrace injector finds no safe
# point (or with --method gdb). Run by memtrace as
#   gdb -batch -nx -q -p PID -iex 'set auto-solib-add off' -x attach-gdb.py
# with MEMTRACE_PAYLOAD (payload path inside the target), MEMTRACE_SPEC
# ("<flags> <interval_ms> <capture path>") and MEMTRACE_TIMEOUT (seconds)
# in the environment. Usable by hand the same way. For a target whose root
# is not ours (a chroot, a container) memtrace adds
#   -iex 'set sysroot /proc/PID/root' and /proc/PID/exe as the program,
# because gdb's default sysroot "target:" opens the target's libraries
# from the root of its mount namespace, not from its chroot.
#
# Safe point: the main thread is asked to run PyCallable_Check through
# Py_AddPendingCall, and we stop there (or in PyErr_CheckSignals): Python
# code between bytecodes holds no libc lock. Breaking on malloc or free
# would not do: they run inside the loader with its lock held. Scheduler
# locking stays off so that other threads can release what they hold
# while dlopen runs. Exit status: 0 attached, 1 failed, 2 no safe point.

import os
import signal
import threading

import gdb  # noqa: the gdb embedded interpreter provides it


def say(msg):
    print("memtrace-gdb: " + msg, flush=True)


def run(cmd):
    return gdb.execute(cmd, to_string=True)


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def value(expr):
    try:
        return int(gdb.parse_and_eval(expr))
    except gdb.error as e:
        say("%s: %s" % (expr, e))
        return None


def finish(code):
    try:
        run("detach")
    except gdb.error:
        pass
    gdb.execute("quit %d" % code)


payload = os.environ["MEMTRACE_PAYLOAD"]
spec = os.environ["MEMTRACE_SPEC"]
timeout = float(os.environ.get("MEMTRACE_TIMEOUT", "10"))

run("set pagination off")
run("set confirm off")
run("set unwindonsignal on")
run("set scheduler-locking off")
# The target's signals go to it without stopping it: a stop would land
# wherever it was (perhaps in libc with a lock held), and one during a
# call made from here would abandon the call. SIGINT stays gdb's own.
run("handle all nostop noprint pass")
for lib in ("libc\\.so", "libc-", "libdl", "libpython3"):
    try:
        run("sharedlibrary " + lib)
    except gdb.error:
        pass

if value("(long)&Py_AddPendingCall") is None:
    say("the target does not look like a CPython process")
    finish(1)

# The breakpoints are off during the call: with scheduler locking off,
# another thread hitting one would abandon the call.
bps = [gdb.Breakpoint(name, internal=True) for name in ("PyCallable_Check", "PyErr_CheckSignals")]
for bp in bps:
    bp.enabled = False
if value("(int)Py_AddPendingCall((int (*)(void *))&PyCallable_Check, (void *)0)") != 0:
    say("Py_AddPendingCall failed")
    for bp in bps:
        bp.delete()
    finish(1)
for bp in bps:
    bp.enabled = True

timed_out = []


def interrupt():
    timed_out.append(True)
    os.kill(os.getpid(), signal.SIGINT)


# Only a stop at one of our breakpoints is the safe point. A signal for
# the target (SIGUSR1, SIGPIPE even when ignored, ...) stops it wherever
# it was, perhaps inside libc holding a lock: continue, passing it on.
at_safe_point = []


def on_stop(event):
    at_safe_point[:] = [isinstance(event, gdb.BreakpointEvent) and
                        any(b in bps for b in event.breakpoints)]


gdb.events.stop.connect(on_stop)
timer = threading.Timer(timeout, interrupt)
timer.start()
while not timed_out:
    at_safe_point[:] = [False]
    try:
        run("continue")
    except gdb.error as e:
        say("continue: %s" % e)
        break
    if at_safe_point[0]:
        break
timer.cancel()
gdb.events.stop.disconnect(on_stop)
if at_safe_point[0]:
    try:
        say("safe point: %s" % gdb.selected_frame().name())
    except gdb.error:
        pass
if not timed_out and not at_safe_point[0]:
    say("the target stopped outside a safe point")
    for bp in bps:
        bp.delete()
    finish(1)
for bp in bps:
    bp.delete()
if timed_out:
    say("the main thread did not reach a safe point within %g s" % timeout)
    finish(2)

handle = value("(void *)dlopen(%s, 2)" % cstr(payload))
if not handle:
    msg = "unknown error"
    try:
        msg = gdb.parse_and_eval("(char *)dlerror()").string()
    except gdb.error:
        pass
    say("dlopen failed: " + msg)
    finish(1)
try:
    run("sharedlibrary libmemtrace-payload")
except gdb.error:
    pass
rc = value("(int)memtrace_attach_entry_str(%s)" % cstr(spec))
if rc is None or rc != 0:
    say("memtrace_attach_entry_str returned %s" % rc)
    finish(1)
say("attached")
finish(0)
