"""Four threads allocating concurrently."""
import sys
import threading

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
NTHREADS = 4


def worker(tid, out):
    keep = []
    total = 0
    for i in range(N):
        obj = {"tid": tid, "i": i, "payload": [i] * 8, "s": "t%d-%d" % (tid, i)}
        total += len(obj["payload"])
        if i % 500 == 0:
            keep.append(bytearray(4096))
            if len(keep) > 64:
                keep.clear()
    out[tid] = total


def main():
    out = [0] * NTHREADS
    threads = [threading.Thread(target=worker, args=(t, out)) for t in range(NTHREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"threads: {NTHREADS} x {N} iterations, total {sum(out)}")


if __name__ == "__main__":
    main()
