#!/bin/sh
# deps.sh - installs the Debian packages the build and tests need (idempotent:
# returns at once when every package is already installed). The tests also use
# poppler-utils (pdftotext, pdfinfo: independent page texts), qpdf (encrypted
# PDFs), fonts-dejavu-core (ligature glyphs) and r-doc-pdf (a real 113-page PDF).
set -e
PKGS="build-essential pkg-config libsentencepiece-dev libopenblas-dev liblapacke-dev \
libpcre2-dev libsqlite3-dev libncurses-dev libcjson-dev libcairo2-dev libpoppler-glib-dev \
poppler-utils qpdf fonts-dejavu-core r-doc-pdf"
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# the model recipe needs pip (any python3 with pip will do)
python3 -m pip --version >/dev/null 2>&1 || missing="$missing python3-pip"
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
