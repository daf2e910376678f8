# SPDX-License-Identifier: MIT
# memtrace attach through lldb (where gdb is missing). Run by memtrace as
#   lldb --batch -p PID -o 'command script import attach_lldb.py'
# (lldb imports it as a module: the name must be a Python identifier)
# with MEMTRACE_PAYLOAD, MEMTRACE_SPEC and MEMTRACE_TIMEOUT in the
# environment, like attach-gdb.py, whose comments explain the safe point.
# lldb may leave the process stopped after detaching: we send SIGCONT.

import os
import signal
import threading

import lldb  # noqa: provided by lldb


def say(msg):
    print("memtrace-lldb: " + msg, flush=True)


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def __lldb_init_module(debugger, internal_dict):
    payload = os.environ["MEMTRACE_PAYLOAD"]
    spec = os.environ["MEMTRACE_SPEC"]
    timeout = float(os.environ.get("MEMTRACE_TIMEOUT", "10"))
    debugger.SetAsync(True)
    target = debugger.GetSelectedTarget()
    process = target.GetProcess()
    pid = process.GetProcessID()
    opts = lldb.SBExpressionOptions()
    opts.SetUnwindOnError(True)
    opts.SetIgnoreBreakpoints(True)
    opts.SetTimeoutInMicroSeconds(int(timeout * 1e6))
    opts.SetTryAllThreads(True)

    def call(expr):
        v = target.EvaluateExpression(expr, opts)
        if not v.GetError().Success():
            say("%s: %s" % (expr, v.GetError().GetCString()))
            return None
        return v

    def finish(code):
        process.Detach()
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        os._exit(code)

    # The target's signals go to it without stopping it (see attach-gdb.py);
    # lldb interrupts with SIGSTOP, and SIGINT and SIGTRAP are its own too.
    signals = process.GetUnixSignals()
    keep = {signal.SIGSTOP, signal.SIGINT, signal.SIGTRAP, signal.SIGKILL}
    for i in range(signals.GetNumSignals()):
        signo = signals.GetSignalAtIndex(i)
        if signo not in keep:
            signals.SetShouldStop(signo, False)
            signals.SetShouldNotify(signo, False)
            signals.SetShouldSuppress(signo, False)

    # Off during the calls below: another thread hitting one would stop
    # the call.
    bps = [target.BreakpointCreateByName(n) for n in ("PyCallable_Check", "PyErr_CheckSignals")]
    for bp in bps:
        bp.SetEnabled(False)
    # Stripped interpreters carry no debug types: lldb needs each function
    # cast to a function type, and will not pass a function's address as
    # an argument, so addresses are looked up first and passed as numbers.
    cb = call("(void *)(int (*)(void *))PyCallable_Check")
    apc = call("(void *)(int (*)(void *, void *))Py_AddPendingCall")
    if (cb is None or apc is None or
            call("((int (*)(void *, void *))%#x)((void *)%#x, (void *)0)"
                 % (apc.GetValueAsUnsigned(), cb.GetValueAsUnsigned())) is None):
        finish(1)
    for bp in bps:
        bp.SetEnabled(True)
    # Wait for the breakpoint synchronously: polling the state in async
    # mode depends on lldb's own event thread updating it, which batch
    # mode does not always run. A timer interrupts the wait instead.
    debugger.SetAsync(False)
    timer = threading.Timer(timeout, process.SendAsyncInterrupt)
    timer.start()
    process.Continue()
    timer.cancel()
    for bp in bps:
        target.BreakpointDelete(bp.GetID())
    at_bp = [t for t in process if t.GetStopReason() == lldb.eStopReasonBreakpoint]
    if process.GetState() != lldb.eStateStopped or not at_bp:
        if process.GetState() != lldb.eStateStopped:
            process.Stop()
        say("the main thread did not reach a safe point within %g s" % timeout)
        finish(2)
    say("safe point: %s" % at_bp[0].GetFrameAtIndex(0).GetFunctionName())
    h = call("((void *(*)(const char *, int))(void *)(void *(*)(const char *, int))dlopen)"
             "(%s, 2)" % cstr(payload))
    if h is None or h.GetValueAsUnsigned() == 0:
        e = call("((char *(*)(void))(void *)(char *(*)(void))dlerror)()")
        say("dlopen failed: %s" % (e.GetSummary() if e else "unknown error"))
        finish(1)
    rc = call("((int (*)(const char *))(void *)(int (*)(const char *))memtrace_attach_entry_str)"
              "(%s)" % cstr(spec))
    if rc is None or rc.GetValueAsSigned() != 0:
        say("memtrace_attach_entry_str returned %s" % (rc.GetValueAsSigned() if rc else None))
        finish(1)
    say("attached")
    finish(0)
