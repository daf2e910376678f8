"""A server that starts a thread per request (socketserver.ThreadingMixIn's
shape), in bursts of concurrent requests: the cost of a thread's start and
end under tracking, and of the states that ended threads leave."""
import sys
import threading

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
CONCURRENT = 32


def handle(i, out):
    rows = [{"id": k, "name": "row-%d-%d" % (i, k)} for k in range(20)]
    body = ("".join(r["name"] for r in rows)).encode()
    out[i % CONCURRENT] = len(body)


def main():
    out = [0] * CONCURRENT
    for first in range(0, REQUESTS, CONCURRENT):
        ts = [threading.Thread(target=handle, args=(i, out))
              for i in range(first, min(first + CONCURRENT, REQUESTS))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    print("thread_per_request: %d requests, %d bytes" % (REQUESTS, sum(out)))


if __name__ == "__main__":
    main()
