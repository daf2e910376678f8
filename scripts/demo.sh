#!/bin/sh
# The main job: install, build, profile a real Python program and print
# its reports. The capture is left in ./memtrace-demo.bin.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
build/cli/memtrace run -f -o memtrace-demo.bin scripts/demo.py
build/cli/memtrace stats memtrace-demo.bin
build/cli/memtrace summary -n 15 memtrace-demo.bin
