#!/bin/sh
# The test command: installs dependencies, builds, runs the unit tests and
# the integration tests against real Python processes.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh test
sh scripts/build.sh
# The unit tests need Check: a build configured without it (by the demo,
# which does not install it) is configured again to build them.
tests=$(meson introspect --buildoptions build |
	/usr/bin/python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "tests"][0])')
if [ "$tests" != enabled ]; then
	meson configure build -Dtests=enabled
	ninja -C build
fi
meson test -C build --suite unit --print-errorlogs
# Debian's interpreter: python3-pytest is installed for it, whatever python3
# comes first on PATH.
MEMTRACE_BUILD_DIR="$PWD/build" /usr/bin/python3 -m pytest -q -rs tests/integration tests/browser "$@"
