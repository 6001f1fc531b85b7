#!/usr/bin/env bash
# GPU check for a Linux NVIDIA host with the jax-cuda PJRT plugin installed
# (pip install jax-cuda13-pjrt, or jax-cuda12-pjrt):
#   1. lists the devices the cuda backend reports, with attributes and memory;
#   2. measures bf16 (and f32) matrix-product throughput in TFLOP/s;
#   3. runs the portable API's tests on cuda (reference models against PyTorch);
#   4. runs the ONNX conformance suite on cuda.
#
# With Go installed it builds what it needs; on a host without Go, build here
# first and copy the results over:
#   scripts/gpu-check.sh --build-only      # writes .gpu/ (static binaries + ONNX test data)
#   scripts/gpu-check.sh                   # on the GPU host, from the repository root
# Output also goes to ${OUT:-.gpu/out}/gpu-check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.gpu
mkdir -p "$bin"

build() {
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$bin/tensorbridge" ./cmd/tensorbridge &&
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$bin/tensorbridge.test" . &&
  d=$(scripts/fetch-onnx-testdata.sh) &&
  tar -C "$d" -cJf "$bin/onnx-testdata.tar.xz" data/node data/pytorch-converted data/pytorch-operator data/simple
}
if [ "${1:-}" = "--build-only" ]; then build; exit $?; fi
if command -v go >/dev/null 2>&1; then build || exit 1; fi
for f in tensorbridge tensorbridge.test onnx-testdata.tar.xz; do
  [ -e "$bin/$f" ] || { echo "missing $bin/$f: run scripts/gpu-check.sh --build-only on a machine with Go" >&2; exit 1; }
done

out=${OUT:-$bin/out}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.log") 2>&1

# The jax-cuda plugin lives in site-packages/jax_plugins/xla_cuda*/.
if [ -z "${TENSORBRIDGE_PLUGIN_PATH:-}" ]; then
  plugin=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for d in dirs:
    for p in sorted(glob.glob(os.path.join(d, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"))):
        print(os.path.dirname(p)); sys.exit(0)
EOF
)
  [ -n "$plugin" ] && export TENSORBRIDGE_PLUGIN_PATH=$plugin
fi
echo "== host"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
echo "TENSORBRIDGE_PLUGIN_PATH=${TENSORBRIDGE_PLUGIN_PATH:-}"

echo "== tensorbridge devices --backend cuda"
"$bin/tensorbridge" devices --backend cuda --no-metadata
echo "== tensorbridge doctor"
"$bin/tensorbridge" doctor --no-metadata

echo "== matrix products"
for n in 4096 8192; do
  "$bin/tensorbridge" matmul --backend cuda --dtype bfloat16 --n $n --iters 30
done
"$bin/tensorbridge" matmul --backend cuda --dtype float32 --n 8192 --iters 10

echo "== portable API tests on cuda"
TENSORBRIDGE_TEST_BACKEND=cuda "$bin/tensorbridge.test" -test.v -test.count=1 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+model_test)' | grep -v '=== RUN'

echo "== ONNX conformance on cuda"
tmp=$(mktemp -d)
tar -C "$tmp" -xJf "$bin/onnx-testdata.tar.xz"
"$bin/tensorbridge" conformance "$tmp" --backend cuda --reasons 30
rm -rf "$tmp"
