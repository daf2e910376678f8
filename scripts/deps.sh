#!/bin/sh
# Installs what memtrace needs to build and test, from Debian's packages.
set -e
packages="meson ninja-build pkg-config gcc liblz4-dev libunwind-dev libelf-dev libdw-dev
check python3 python3-dev python3-pytest python3-numpy gdb lldb python3-lldb-14 chromium
clang libclang-rt-14-dev"
missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "memtrace: missing packages:$missing (run this script as root)" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
