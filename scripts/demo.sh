#!/bin/sh
# The main job: install, build, profile a real Python program and write its
# reports: statistics and the top locations on the terminal, a flamegraph
# page of the peak and one of the leaks. Leaves memtrace-demo.bin and the
# two HTML files in the current directory. Installs only what the build
# and the demo need (not the test tools: scripts/test.sh adds those).
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh build
sh scripts/build.sh
build/cli/memtrace run -f -o memtrace-demo.bin scripts/demo.py
build/cli/memtrace stats memtrace-demo.bin
build/cli/memtrace summary -n 15 memtrace-demo.bin
build/cli/memtrace flamegraph -f -o memtrace-demo-peak.html memtrace-demo.bin
build/cli/memtrace flamegraph -f --leaks -o memtrace-demo-leaks.html memtrace-demo.bin
