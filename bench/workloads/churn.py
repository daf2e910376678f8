"""Small-object churn: many short-lived dicts, lists and tuples."""
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000


def main():
    keep = []
    total = 0
    for i in range(N):
        d = {"a": i, "b": str(i), "c": [i, i + 1, i + 2]}
        t = (i, d["b"], None)
        lst = [t, d, i * 2]
        total += len(lst) + len(d["c"])
        if i % 1000 == 0:
            # keep a few alive so the heap grows a little and frees interleave
            keep.append(lst)
            if len(keep) > 200:
                del keep[:100]
    print(f"churn: {N} iterations, checksum {total}")


if __name__ == "__main__":
    main()
