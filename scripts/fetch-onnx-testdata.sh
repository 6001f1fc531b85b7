#!/bin/sh
# fetch-onnx-testdata.sh - unpack Debian's libonnx-testdata package (the ONNX
# backend test cases: data/node, data/pytorch-converted, data/pytorch-operator,
# data/simple, ...) into a local cache, for tensorbridge's ONNX tests.
#
# Usage: scripts/fetch-onnx-testdata.sh [cache-dir]
#   cache-dir defaults to ${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/onnx-testdata
#
# Prints, on its last stdout line, the directory that contains data/node; point
# TENSORBRIDGE_ONNX_TESTDATA at it to override the tests' default location.
# Idempotent: a completed unpack (marked by a .complete file) is reused. The
# package is fetched with apt-get download (no root needed); apt-get update is
# attempted once if the package lists are missing. Nothing lands in the repo.
set -eu

pkg=libonnx-testdata
# Pinned like every other download: Debian bookworm's package (ONNX 1.12).
# The conformance tests' golden lists (onnx/conformance/testdata/golden) hold
# its case count, so another version fails them.
version=1.12.0-2
sha256=7dc0912e02f79ece102331411a751b091bc0e191c9fb1287f8cdfbe5530f6027
cache=${1:-${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/onnx-testdata}

# find_root prints the directory holding data/node under $1, if any.
find_root() {
	node=$(find "$1" -type d -path '*/data/node' 2>/dev/null | head -n 1)
	[ -n "$node" ] || return 1
	dirname "$(dirname "$node")"
}

if [ -f "$cache/.complete" ] && [ "$(cat "$cache/.complete")" = "${pkg}_${version}_all.deb" ] && root=$(find_root "$cache/root"); then
	echo "$root"
	exit 0
fi

for tool in apt-get dpkg; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "fetch-onnx-testdata: $tool not found; this script needs a Debian-family system" >&2
		exit 1
	}
done

mkdir -p "$cache"
work=$(mktemp -d "$cache/.tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

if ! (cd "$work" && apt-get download "$pkg=$version" >&2); then
	echo "fetch-onnx-testdata: apt-get download failed; running apt-get update and retrying" >&2
	if [ "$(id -u)" = 0 ]; then
		apt-get update >&2
	else
		sudo apt-get update >&2
	fi
	(cd "$work" && apt-get download "$pkg=$version" >&2)
fi

deb=$(ls "$work"/"$pkg"_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || {
	echo "fetch-onnx-testdata: apt-get download produced no $pkg .deb file" >&2
	exit 1
}
got=$(sha256sum "$deb" | cut -d' ' -f1)
[ "$got" = "$sha256" ] || {
	echo "fetch-onnx-testdata: $(basename "$deb"): sha256 $got, want $sha256 (version $version); refusing it" >&2
	exit 1
}
dpkg -x "$deb" "$work/root"
find_root "$work/root" >/dev/null || {
	echo "fetch-onnx-testdata: $(basename "$deb") has no data/node directory" >&2
	exit 1
}

# Swap the finished tree in, then mark it complete, so an interrupted run is
# never mistaken for a finished one.
rm -rf "$cache/root" "$cache/.complete"
mv "$work/root" "$cache/root"
basename "$deb" >"$cache/.complete"
find_root "$cache/root"
