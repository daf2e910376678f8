#!/bin/sh
# The test command: installs dependencies, builds, runs the unit tests and
# the integration tests against real Python processes.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
meson test -C build --suite unit --print-errorlogs
# Debian's interpreter: python3-pytest is installed for it, whatever python3
# comes first on PATH.
MEMTRACE_BUILD_DIR="$PWD/build" /usr/bin/python3 -m pytest -q -rs tests/integration tests/browser "$@"
