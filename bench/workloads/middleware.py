"""A request through 80 layers of middleware, each a class with its own
state that looks at the request on the way in and the response on the way
out, allocating a little at every layer, and a handler at the bottom that
builds the response. Real services run 40 to 100 frames deep."""
import sys

LAYERS = 80
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 25_000


class Middleware:
    def __init__(self, inner, level):
        self.inner = inner
        self.level = level
        self.name = "layer-%d" % level

    def __call__(self, request):
        headers = dict(request["headers"])  # each layer copies the headers
        headers["x-%d" % self.level] = self.name
        response = self.inner({"path": request["path"], "headers": headers})
        response["trace"].append(self.level)
        return response


def handler(request):
    body = [{"id": i, "path": request["path"]} for i in range(8)]
    return {"status": 200, "body": body, "trace": []}


def main():
    app = handler
    for level in range(LAYERS):
        app = Middleware(app, level)
    total = 0
    for i in range(REQUESTS):
        response = app({"path": "/items/%d" % (i % 100), "headers": {"host": "example"}})
        total += len(response["trace"])
    print(f"middleware: {REQUESTS} requests through {LAYERS} layers, total {total}")


if __name__ == "__main__":
    main()
