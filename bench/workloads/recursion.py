"""Deep recursion (~500 frames) that allocates at the bottom: stress for stack capture."""
import sys

DEPTH = 500
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 6000


def descend(n):
    if n == 0:
        # allocate at the bottom of a deep stack
        objs = [[j] * 4 for j in range(20)]
        objs.append(bytearray(1024))
        return len(objs)
    return descend(n - 1) + 0


def main():
    sys.setrecursionlimit(max(sys.getrecursionlimit(), DEPTH + 100))
    total = 0
    for _ in range(REPEATS):
        total += descend(DEPTH)
    print(f"recursion: depth {DEPTH}, {REPEATS} repeats, total {total}")


if __name__ == "__main__":
    main()
