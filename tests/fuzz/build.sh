#!/bin/sh
# Builds the capture reader's fuzz targets with clang's libFuzzer, ASan
# and UBSan: sh tests/fuzz/build.sh [OUTDIR]   (default build-fuzz)
# Needs clang (Debian: clang), liblz4 and libdw. See tests/fuzz/README.md.
set -e
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$SRC/build-fuzz}
CC=${CC:-clang}
mkdir -p "$OUT"
# every page template, named as reader/meson.build names them: mt_html_<page>
PAGES=
for f in "$SRC"/reader/html/*.html; do
	PAGES="$PAGES mt_html_$(basename "$f" .html)=$f"
done
# shellcheck disable=SC2086 # one argument per page
/usr/bin/python3 "$SRC/scripts/embed.py" "$OUT/html-templates.c" $PAGES
# what meson's configure_file() makes: only the version is read by the reader
VERSION=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$SRC/meson.build" | head -n 1)
printf '#pragma once\n#define MT_VERSION "%s"\n' "${VERSION:-0}" > "$OUT/mt-config.h"
LIB="$SRC/format/*.c $SRC/util/*.c $SRC/reader/*.c $OUT/html-templates.c"
FLAGS="-g -O1 -std=gnu11 -D_GNU_SOURCE -I$SRC -I$SRC/tests/fuzz -I$OUT -fno-omit-frame-pointer"
LZ4=$(pkg-config --libs liblz4 2>/dev/null || echo -llz4)
# the native symbolizer (reader/symbols.c) links elfutils
DW=$(pkg-config --libs libdw 2>/dev/null || echo "-ldw -lelf")
for t in fuzz_capture_file fuzz_chunk_data; do
	# shellcheck disable=SC2086 # the source lists are globs
	$CC $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-o "$OUT/$t" "$SRC/tests/fuzz/$t.c" $LIB $LZ4 $DW -lm -ldl -lpthread
done
for t in mkseeds mkcap; do
	# shellcheck disable=SC2086
	$CC $FLAGS -o "$OUT/$t" "$SRC/tests/fuzz/$t.c" $SRC/format/*.c $LZ4
done
echo "built in $OUT: fuzz_capture_file fuzz_chunk_data mkseeds mkcap"
