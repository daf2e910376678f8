#!/bin/sh
# Configures (once) and builds memtrace in ./build.
set -e
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
	meson setup build --buildtype=release -Db_ndebug=true
fi
ninja -C build
