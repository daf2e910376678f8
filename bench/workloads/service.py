"""A web service's shape: each request passes through 60 layers of
middleware before a handler builds its response, allocating at several
levels. Real services run 40 to 100 frames deep; this is the cost of
reading deep stacks at every allocation."""
import sys

DEPTH = 60
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 150_000


def handler(request):
    rows = [{"id": i, "name": "item-%d" % i, "tags": [request["path"], i]} for i in range(12)]
    return {"status": 200, "rows": rows, "count": len(rows)}


def make_layer(inner, level):
    def layer(request):
        if level % 10 == 0:
            request = dict(request, level=level)  # some layers copy the request
        response = inner(request)
        if level % 15 == 0:
            response = dict(response, via=level)
        return response
    return layer


def main():
    app = handler
    for level in range(DEPTH):
        app = make_layer(app, level)
    total = 0
    for i in range(REQUESTS):
        total += app({"path": "/items/%d" % (i % 100), "query": str(i)})["count"]
    print(f"service: {REQUESTS} requests {DEPTH} layers deep, total {total}")


if __name__ == "__main__":
    main()
