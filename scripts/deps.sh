#!/bin/sh
# Installs what memtrace needs, from Debian's packages:
#   sh scripts/deps.sh build   the toolchain and libraries that build it, and
#                              python3: what scripts/demo.sh needs
#   sh scripts/deps.sh test    that, and what the tests use (Check, pytest,
#                              numpy, Python headers, gdb, lldb, chromium,
#                              clang, libc's debug information for native
#                              stacks, venv; pandas, greenlet, pytest-xdist,
#                              IPython, and meson-python and pip for the
#                              wheel's test, without their recommends): what
#                              scripts/test.sh needs; the default
# The test packages are kept out of the demo: on a fresh machine they pull
# in upgrades of much of the system (systemd, perl).
set -e
build="meson ninja-build pkg-config gcc liblz4-dev libunwind-dev libelf-dev libdw-dev python3"
test="check python3-dev python3-pytest python3-numpy gdb lldb python3-lldb-14 chromium
clang libclang-rt-14-dev libc6-dbg python3-venv"
# installed without the packages they recommend
lean="python3-pandas python3-greenlet python3-pytest-xdist python3-mesonpy python3-pip python3-ipython"
case "${1:-test}" in
build) packages="$build" ;;
test) packages="$build $test $lean" ;;
*)
	echo "usage: sh scripts/deps.sh [build | test]" >&2
	exit 2
	;;
esac
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
full="" bare=""
for p in $missing; do
	case " $lean " in
	*" $p "*) bare="$bare $p" ;;
	*) full="$full $p" ;;
	esac
done
[ -z "$full" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $full
[ -z "$bare" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $bare
