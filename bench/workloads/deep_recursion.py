"""A recursive walk 400 frames deep that allocates on the way down and at
the bottom, as a recursive-descent parser or a tree visitor does: every
allocation has a deep stack, and the stack changes between allocations."""
import sys

DEPTH = 400
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 4000


def descend(n, acc):
    node = {"depth": n, "children": [n, n + 1]}  # on the way down
    if n == 0:
        leaves = [(i, str(i)) for i in range(40)]  # at the bottom
        return len(leaves) + len(acc)
    acc.append(node)
    return descend(n - 1, acc) + 1


def main():
    sys.setrecursionlimit(max(sys.getrecursionlimit(), DEPTH + 100))
    total = 0
    for _ in range(REPEATS):
        total += descend(DEPTH, [])
    print(f"deep_recursion: depth {DEPTH}, {REPEATS} repeats, total {total}")


if __name__ == "__main__":
    main()
