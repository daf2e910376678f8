"""numpy array churn: zeros/ones of various sizes, arithmetic creating temporaries."""
import sys

try:
    import numpy as np
except ImportError:
    print("numpy_churn: SKIP numpy not installed for " + sys.executable)
    sys.exit(0)

ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000

# mostly small arrays (pymalloc/malloc paths), a few large ones (mmap path)
SIZES = [10, 100, 1_000, 10, 100, 10_000, 1_000, 10, 100, 1_000, 50_000, 200_000]


def main():
    acc = 0.0
    for i in range(ITERS):
        n = SIZES[i % len(SIZES)]
        a = np.zeros(n)
        b = np.ones(n)
        c = (a + b) * 2.0 - b / 3.0  # several temporaries
        d = np.sqrt(c) + c ** 2
        acc += float(d[-1])
        if i % 50 == 0:
            m = np.ones((64, 64)) @ np.ones((64, 64))
            acc += float(m[0, 0])
    print(f"numpy_churn: {ITERS} iterations, acc {acc:.3f}")


if __name__ == "__main__":
    main()
