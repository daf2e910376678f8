"""Target of bench/depth.py: recurse to DEPTH frames, then allocate in a
loop there, timing only the loop. Prints the loop's seconds.

  depth_target.py DEPTH N [py|c]   (c: each frame calls the next through C)
"""
import functools
import sys
import time


def loop(n):
    t = time.perf_counter()
    for _ in range(n):
        x = bytearray(600)  # an object and a buffer: pymalloc and malloc
        del x
    return time.perf_counter() - t


def down(k, n):
    if k <= 1:
        return loop(n)
    return down(k - 1, n)


def down_c(k, n):
    if k <= 1:
        return loop(n)
    return functools.partial(down_c, k - 1)(n)


def main():
    depth, n = int(sys.argv[1]), int(sys.argv[2])
    via = sys.argv[3] if len(sys.argv) > 3 else "py"
    sys.setrecursionlimit(depth + 200)
    print((down_c if via == "c" else down)(depth, n))


if __name__ == "__main__":
    main()
