#!/bin/sh
# The test command: installs dependencies, builds, runs the unit tests and
# the integration tests against real Python processes.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
meson test -C build --suite unit --print-errorlogs
MEMTRACE_BUILD_DIR="$PWD/build" python3 -m pytest -q -rs tests/integration "$@"
