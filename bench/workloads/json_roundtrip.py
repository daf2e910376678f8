"""JSON round trip: dumps/loads of a nested structure, repeatedly."""
import json
import sys

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 700


def make_doc():
    return {
        "users": [
            {
                "id": i,
                "name": f"user{i}",
                "tags": ["a", "b", "c", str(i % 7)],
                "scores": [i * 0.5, i * 1.5, i * 2.5],
                "address": {"street": f"{i} Main St", "zip": f"{10000 + i}", "geo": [1.0 * i, -1.0 * i]},
                "active": i % 2 == 0,
            }
            for i in range(500)
        ],
        "meta": {"version": 3, "ok": True, "note": "x" * 200},
    }


def main():
    doc = make_doc()
    size = 0
    for _ in range(ROUNDS):
        text = json.dumps(doc)
        doc = json.loads(text)
        size += len(text)
    print(f"json: {ROUNDS} round trips, {size} bytes serialized")


if __name__ == "__main__":
    main()
