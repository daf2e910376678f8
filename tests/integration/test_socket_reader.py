"""memtrace.SocketReader (memray's SocketReader): what a process sending
its capture to a port (`memtrace run --live-remote`, a Tracker's
SocketDestination) holds now, read from Python while it runs."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, ROOT

PYTHON = "/usr/bin/python3"

# The tracked program: a first part, then it waits for the reader's
# go-ahead (a file), then a second part; each part's blocks stay live.
TARGET = textwrap.dedent("""\
    import os, sys, time
    keep = []
    def first():
        for _ in range(10):
            keep.append(bytearray(100_000))
    def second():
        for _ in range(20):
            keep.append(bytearray(100_000))
    first()
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    second()
""")

# The reader: a snapshot while the program waits, then the go-ahead, then
# the one after the program has ended.
READER = textwrap.dedent("""\
    import json, os, sys, time
    import memtrace
    port, go = int(sys.argv[1]), sys.argv[2]
    out = {}
    def live(r, merge):
        by = {}
        for x in r.get_current_snapshot(merge_threads=merge):
            st = x.stack_trace()
            if st:
                by[st[0][0]] = by.get(st[0][0], 0) + x.size
                by["thread " + st[0][0]] = x.thread_name
        return by
    with memtrace.SocketReader(port) as r:
        out["pid"], out["cmd"] = r.pid, r.command_line
        out["native"], out["active"] = r.has_native_traces, r.is_active
        try:
            with r:
                pass
        except ValueError as e:
            out["twice"] = str(e)
        give_up = time.monotonic() + 60
        while live(r, True).get("first", 0) < 1_000_000 and time.monotonic() < give_up:
            time.sleep(0.05)
        snap = live(r, True)
        out["while"] = snap
        old = list(r.get_current_snapshot(merge_threads=True))  # stacks not read yet
        open(go, "w").close()
        while r.is_active and time.monotonic() < give_up:
            time.sleep(0.05)
        out["after"] = live(r, False)
        out["active_after"] = r.is_active
        # a record of an earlier snapshot names what it named then
        out["old"] = sorted({x.stack_trace()[0][0] for x in old if x.stack_trace()} &
                            {"first", "second"})
    out["outside"] = list(r.get_current_snapshot(merge_threads=True))
    old = None  # the last records gone: the stream's file goes with them
    def deleted():
        for fd in os.listdir("/proc/self/fd"):
            try:
                if "(deleted)" in os.readlink("/proc/self/fd/" + fd):
                    yield fd
            except OSError:
                pass
    out["files_left"] = list(deleted())
    print(json.dumps(out))
""")


def env():
    return dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)


def run_reader(tmp_path, sender_argv, port_from):
    """Starts @sender_argv, finds its port with @port_from (a function of
    its stderr line), runs READER against it; (reader's output, sender)."""
    (tmp_path / "reader.py").write_text(READER)
    sender = subprocess.Popen(sender_argv, cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True)
    try:
        port = None
        for line in sender.stderr:
            port = port_from(line)
            if port:
                break
        assert port, "the sender said no port"
        p = subprocess.run([PYTHON, "reader.py", str(port), str(tmp_path / "go")],
                           cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        sender.wait(timeout=60)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    assert p.returncode == 0, p.stderr
    import json
    return json.loads(p.stdout), sender


def check(out, native):
    assert out["native"] is native
    assert out["active"] is True and out["active_after"] is False
    assert "more than once" in out["twice"]
    # while the program waits: its first part, nothing of the second
    assert 1_000_000 <= out["while"]["first"] < 1_100_000, out["while"]
    assert "second" not in out["while"], out["while"]
    # once it ended: both parts, by thread
    assert 1_000_000 <= out["after"]["first"] < 1_100_000, out["after"]
    assert 2_000_000 <= out["after"]["second"] < 2_100_000, out["after"]
    assert out["after"]["thread second"] == "MainThread"
    assert out["outside"] == []
    assert out["files_left"] == [], out["files_left"]


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_run_live_remote(memtrace, tmp_path, native):
    """`memtrace run --live-remote` on a port of its choosing."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    (tmp_path / "target.py").write_text(TARGET)
    argv = [memtrace, "run", "--live-remote", "-p", "0", "--python", PYTHON]
    argv += ["--native"] if native else []
    argv += ["target.py", str(tmp_path / "go")]
    m = lambda line: (re.search(r"127\.0\.0\.1:(\d+)", line) or [None, None])[1]  # noqa: E731
    out, sender = run_reader(tmp_path, argv, m)
    assert sender.returncode == 0
    assert out["cmd"].endswith("target.py %s" % (tmp_path / "go")), out["cmd"]
    check(out, native)
    assert out["old"] == ["first"], out["old"]


def test_tracker_socket_destination(tmp_path):
    """A Tracker sending to a SocketDestination, in another interpreter."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    target = textwrap.dedent("""\
        import socket, sys
        import memtrace
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        sys.stderr.write("port %d\\n" % port)
        sys.stderr.flush()
        with memtrace.Tracker(destination=memtrace.SocketDestination(server_port=port)):
            exec(compile(open("body.py").read(), "body.py", "exec"))
    """)
    (tmp_path / "sender.py").write_text(target)
    (tmp_path / "body.py").write_text(TARGET.replace("sys.argv[1]", "%r" % str(tmp_path / "go")))
    m = lambda line: (re.match(r"port (\d+)", line) or [None, None])[1]  # noqa: E731
    out, sender = run_reader(tmp_path, [PYTHON, "sender.py"], m)
    assert sender.returncode == 0
    check(out, False)


def reader_error(tmp_path, server_source):
    """What SocketReader raises against a server of @server_source (which
    prints its port), or against a port where nothing listens if None."""
    script = textwrap.dedent("""\
        import sys, memtrace, memtrace.socket_reader as m
        m.CONNECT_WAIT_S = 0.3
        try:
            with memtrace.SocketReader(int(sys.argv[1])):
                print("entered")
        except Exception as e:
            print(type(e).__name__, e)
    """)
    (tmp_path / "r.py").write_text(script)
    server = None
    if server_source is None:
        # bound, not listening: refused, and no one else can take the port
        import socket
        idle = socket.socket()
        idle.bind(("127.0.0.1", 0))
        port = idle.getsockname()[1]
    else:
        (tmp_path / "server.py").write_text(server_source)
        server = subprocess.Popen([sys.executable, "server.py"], cwd=tmp_path,
                                  stdout=subprocess.PIPE, universal_newlines=True)
        port = int(server.stdout.readline())
    try:
        p = subprocess.run([PYTHON, "r.py", str(port)], cwd=tmp_path, env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        else:
            idle.close()
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout.strip()


SERVER = textwrap.dedent("""\
    import socket, sys
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    c.sendall(%r)
    if %r:
        c.recv(1)  # open until the reader leaves
    c.close()
""")


def test_bad_peers(tmp_path):
    """Nothing listening, a peer that sends no capture, a peer that closes
    at once, a bad port: one clear error each."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    said = reader_error(tmp_path, None)
    assert said.startswith("ConnectionRefusedError") and "nothing listens on 127.0.0.1:" in said
    said = reader_error(tmp_path, SERVER % (b"HTTP/1.1 200 OK\r\n" * 300, False))
    assert said.startswith("CaptureError") and "does not send a memtrace capture" in said, said
    # a banner, the connection left open: told at once, not after the header's wait
    said = reader_error(tmp_path, SERVER % (b"SSH-2.0-OpenSSH_9.2\r\n", True))
    assert said.startswith("CaptureError") and "does not send a memtrace capture" in said, said
    assert "/proc/self/fd" not in said, said
    said = reader_error(tmp_path, SERVER % (b"", False))
    assert said.startswith("ConnectionError") and "closed the connection before" in said, said
    p = subprocess.run([PYTHON, "-c", textwrap.dedent("""\
        import memtrace
        for port in ("1234", 0, 70000):
            try:
                memtrace.SocketReader(port)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
    """)], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("TypeError") and len(lines) == 3, p.stdout + p.stderr
    assert all(ln.startswith("ValueError") for ln in lines[1:]), lines


CORRUPT = textwrap.dedent("""\
    import json, os, sys, time, memtrace
    port, go = int(sys.argv[1]), sys.argv[2]
    out = {}
    with memtrace.SocketReader(port) as r:
        give_up = time.monotonic() + 60
        recs = []
        while not recs and time.monotonic() < give_up:
            recs = [x for x in r.get_current_snapshot(merge_threads=False) if x.size >= 100_000]
            time.sleep(0.05)
        out["before"] = len(recs)
        open(go, "w").close()  # the server sends the rest: bytes that are no capture
        while r.is_active and time.monotonic() < give_up:
            time.sleep(0.05)
        try:
            list(r.get_current_snapshot(merge_threads=False))
            out["after"] = "no error"
        except memtrace.CaptureError as e:
            out["after"] = str(e)
        try:
            recs[0].stack_trace()
            out["old"] = "resolved"
        except ValueError as e:
            out["old"] = str(e)
    print(json.dumps(out))
""")

CORRUPT_SERVER = textwrap.dedent("""\
    import os, socket, sys, time
    data = open(sys.argv[1], "rb").read()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    c.sendall(data)  # a whole capture, then what is none
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.01)
    c.sendall(b"\\xff" * 5000)
    c.close()
""")


def test_corrupt_stream(memtrace, tmp_path):
    """A stream that turns corrupt: get_current_snapshot() raises
    CaptureError, and the records of before refuse their stacks in one
    line (what they were read from is gone) rather than crash."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    (tmp_path / "t.py").write_text("keep = [bytearray(200_000) for _ in range(5)]\n")
    cap = tmp_path / "t.bin"
    subprocess.run([memtrace, "run", "-q", "-o", cap, "--python", PYTHON, tmp_path / "t.py"],
                   check=True)
    (tmp_path / "server.py").write_text(CORRUPT_SERVER)
    (tmp_path / "reader.py").write_text(CORRUPT)
    go = tmp_path / "go"
    server = subprocess.Popen([sys.executable, "server.py", str(cap), str(go)], cwd=tmp_path,
                              stdout=subprocess.PIPE, universal_newlines=True)
    try:
        port = int(server.stdout.readline())
        p = subprocess.run([PYTHON, "reader.py", str(port), str(go)], cwd=tmp_path, env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
    finally:
        server.kill()
        server.wait()
    assert p.returncode == 0, (p.returncode, p.stderr)
    import json
    out = json.loads(p.stdout)
    assert out["before"] >= 1, out
    assert "memtrace.SocketReader: 127.0.0.1:%d: capture is corrupt" % port in out["after"], out
    assert "sent a corrupt capture" in out["old"], out


def test_stream_that_cannot_be_kept(memtrace, tmp_path):
    """The temporary file that keeps the stream cannot take it (a full
    disk, here a write that fails so): entering says so in one line,
    rather than that the peer sent nothing."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    (tmp_path / "target.py").write_text(TARGET)
    (tmp_path / "r.py").write_text(textwrap.dedent("""\
        import errno, os, sys, tempfile, memtrace
        tempfile.gettempdir()  # found before writes fail
        def full(fd, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.write = full
        try:
            with memtrace.SocketReader(int(sys.argv[1])):
                print("entered")
        except OSError as e:
            print(type(e).__name__, e.errno, e)
    """))
    sender = subprocess.Popen([memtrace, "run", "--live-remote", "-p", "0", "--python", PYTHON,
                               "target.py", str(tmp_path / "go")], cwd=tmp_path, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
    try:
        port = None
        for line in sender.stderr:
            m = re.search(r"127\.0\.0\.1:(\d+)", line)
            if m:
                port = m.group(1)
                break
        assert port, "the sender said no port"
        (tmp_path / "go").write_text("")
        p = subprocess.run([PYTHON, "r.py", port], cwd=tmp_path, env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
    finally:
        sender.kill()
        sender.wait()
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.strip() == ("OSError 28 [Errno 28] memtrace.SocketReader: cannot keep what "
                                "127.0.0.1:%s sends: No space left on device" % port), p.stdout
