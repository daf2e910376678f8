"""Target process for bench/attach.py (not a workload of run.py).

    python attach_target.py MODE

Writes "ready <pid>\n" on stdout once it is in the state to be measured, then:

  sleep    sleeps in time.sleep (idle)
  pipe     blocks in os.read on stdin (idle); exits when stdin closes
  busy     runs a CPU-bound pure Python loop (no allocation to speak of)
  threads  runs 8 threads that allocate (dicts, lists, strings, bytearrays); the main
           thread waits in Thread.join
  threads32  runs 32 threads that never stop running Python code (a bytearray now and
           then), all started before "ready"; the main thread waits in Thread.join: the
           GIL is never free for long
  speed    serves timed windows of work on stdin/stdout:
             "calibrate KIND SECONDS" -> "n N"  (iterations that take about SECONDS)
             "run KIND N"             -> "ok WALL CPU CHECK"  (seconds of N iterations:
                                        perf_counter, and process_time, i.e. the
                                        CPU time of all threads of the process)
             "ping"                   -> "pong"
           KIND is churn (small dicts/lists/tuples/strings, mostly pymalloc) or json
           (json.dumps/json.loads of a nested document: malloc-sized strings).
           Between windows it waits in os.read on stdin.

The untracked target and the attached one are the same process, so a window
measures only what tracking costs.
"""
import json
import os
import sys
import threading
import time


def say(line):
    os.write(1, (line + "\n").encode())


def churn_iter(i, keep):
    # One iteration = 200 steps of the churn workload (bench/workloads/churn.py).
    total = 0
    base = i * 200
    for j in range(base, base + 200):
        d = {"a": j, "b": str(j), "c": [j, j + 1, j + 2]}
        t = (j, d["b"], None)
        lst = [t, d, j * 2]
        total += len(lst) + len(d["c"])
    keep.append(lst)
    if len(keep) > 200:
        del keep[:100]
    return total


def make_doc():
    return {
        "users": [
            {
                "id": i,
                "name": "user%d" % i,
                "tags": ["a", "b", "c", str(i % 7)],
                "scores": [i * 0.5, i * 1.5, i * 2.5],
                "address": {"street": "%d Main St" % i, "zip": str(10000 + i), "geo": [1.0 * i, -1.0 * i]},
                "active": i % 2 == 0,
            }
            for i in range(50)
        ],
        "meta": {"version": 3, "ok": True, "note": "x" * 200},
    }


class Json:
    def __init__(self):
        self.doc = make_doc()

    def __call__(self, i, keep):
        text = json.dumps(self.doc)
        self.doc = json.loads(text)
        return len(text)


def serve_speed():
    kinds = {"churn": churn_iter, "json": Json()}
    keep = []
    counter = 0
    buf = b""
    say("ready %d" % os.getpid())
    while True:
        while b"\n" not in buf:
            chunk = os.read(0, 4096)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        words = line.decode().split()
        if not words:
            continue
        if words[0] == "ping":
            say("pong")
        elif words[0] == "calibrate":
            fn, seconds = kinds[words[1]], float(words[2])
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(10):
                    fn(counter, keep)
                    counter += 1
                n += 10
            say("n %d" % n)
        elif words[0] == "run":
            fn, n = kinds[words[1]], int(words[2])
            check = 0
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                check += fn(counter, keep)
                counter += 1
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            say("ok %.6f %.6f %d" % (dt, dc, check))
        else:
            say("error unknown command %r" % words[0])


def allocate_forever(tid):
    keep = []
    i = 0
    while True:
        obj = {"tid": tid, "i": i, "payload": [i] * 8, "s": "t%d-%d" % (tid, i)}
        if i % 500 == 0:
            keep.append(bytearray(4096))
            if len(keep) > 64:
                keep.clear()
        i += 1
        del obj


def main():
    mode = sys.argv[1]
    if mode == "sleep":
        say("ready %d" % os.getpid())
        while True:
            time.sleep(3600)
    elif mode == "pipe":
        say("ready %d" % os.getpid())
        while os.read(0, 1):
            pass
    elif mode == "busy":
        say("ready %d" % os.getpid())
        x = 0
        while True:
            for i in range(1000):
                x = (x * 31 + i) & 0xFFFF
    elif mode == "threads":
        threads = [threading.Thread(target=allocate_forever, args=(t,), daemon=True) for t in range(8)]
        for t in threads:
            t.start()
        say("ready %d" % os.getpid())
        threads[0].join()  # the main thread waits in a lock, as a typical threaded program's does
    elif mode == "threads32":
        started = threading.Barrier(33)

        def spin():
            started.wait()
            x = 0
            while True:
                x += 1
                if x % 50000 == 0:
                    junk = bytearray(1000)
                    del junk

        threads = [threading.Thread(target=spin, daemon=True) for _ in range(32)]
        for t in threads:
            t.start()
        started.wait()
        say("ready %d" % os.getpid())
        threads[0].join()
    elif mode == "speed":
        serve_speed()
    else:
        sys.exit("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
