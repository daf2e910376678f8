"""A small program with a peak, a leak and temporary allocations:
the demo that scripts/demo.sh profiles."""

import json

_cache = []


def load_records(n):
    # builds a large temporary structure: the peak
    return [{"id": i, "name": "record-%d" % i, "tags": ["a", "b", "c"]} for i in range(n)]


def serialise(records):
    return json.dumps(records)


def remember(text):
    # keeps a slice of every document alive: the leak
    _cache.append(text[:100_000])


def main():
    for _ in range(5):
        records = load_records(50_000)
        text = serialise(records)
        remember(text)
    print("kept %d documents" % len(_cache))


if __name__ == "__main__":
    main()
