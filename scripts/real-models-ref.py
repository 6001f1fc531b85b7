#!/usr/bin/env python3
"""ONNX Runtime references for the real-model set (testdata/realmodels/pins.tsv).

Run by scripts/fetch-real-models.sh inside a throw-away virtual environment
that holds the pinned onnxruntime (and numpy); never needed at run time.

  python real-models-ref.py PINS DIR NAME...
  python real-models-ref.py --bench N PINS DIR NAME...

With --bench N it writes nothing: it times ONNX Runtime on the recorded
inputs (session creation plus first run, then the median of N runs) and
prints one tab-separated line per model, as the "Real models" table of docs/onnx.md uses them.

For each NAME, DIR/NAME/model.onnx must exist. The script generates the
entry's inputs from the pins' `inputs` column with a generator seeded by the
entry's name (so a re-run writes the same bytes), runs the model once with
ONNX Runtime on the CPU, and writes beside the model:

  input_K.npy, output_K.npy   in the order of the model's graph inputs/outputs
  io.tsv                      "input|output <TAB> K <TAB> name" per line
  ort.txt                     the onnxruntime version that computed the outputs
  ort_noise.txt               ONNX Runtime's own float noise on this model: the
                              largest relative L2 distance, over the outputs,
                              between its runs with all graph optimisations and
                              with none (fusions and kernels round differently)
"""
import os
import sys
import zlib

import numpy as np
import onnxruntime as ort

DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32, "bool": np.bool_}


def read_pins(path):
    rows, header = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        cols = line.split("\t")
        if header is None:
            header = cols
            continue
        row = dict(zip(header, cols))
        rows[row["name"]] = row
    return rows


def parse_range(text, conv):
    lo, hi = text.split("..")
    return conv(lo), conv(hi)


def make_input(rng, spec):
    """NAME=DTYPE:DIMS:DIST -> (name, array)."""
    name, _, rest = spec.partition("=")
    dtype, dims, dist = rest.split(":", 2)
    if dtype not in DTYPES:
        raise SystemExit(f"real-models-ref: input {name}: unknown dtype {dtype!r}")
    shape = tuple(int(d) for d in dims.split("x")) if dims else ()
    np_type = DTYPES[dtype]
    if dist == "normal":
        a = rng.standard_normal(shape)
    elif dist == "zeros":
        a = np.zeros(shape)
    elif dist.startswith("const="):
        a = np.full(shape, float(dist[6:]))
    elif dist.startswith("uniform="):
        lo, hi = parse_range(dist[8:], float)
        a = rng.uniform(lo, hi, shape)
    elif dist.startswith("randint="):
        lo, hi = parse_range(dist[8:], int)
        a = rng.integers(lo, hi, shape)
    else:
        raise SystemExit(f"real-models-ref: input {name}: unknown distribution {dist!r}")
    return name, np.asarray(a).astype(np_type)


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    num, den = np.linalg.norm(a - b), np.linalg.norm(b)
    return 0.0 if num == 0 else (float("inf") if den == 0 else float(num / den))


def write_npy(path, a):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(a).copy(order="C"))  # ascontiguousarray would make a scalar 1-D
    os.replace(tmp, path)


def bench(n, root, names):
    import time
    print("model\tload+first_ms\tp50_ms")
    for name in names:
        d = os.path.join(root, name)
        io = [l.split("\t") for l in open(os.path.join(d, "io.tsv"), encoding="utf-8").read().split("\n") if l]
        feeds = {nm: np.load(os.path.join(d, f"input_{k}.npy")) for kind, k, nm in io if kind == "input"}
        t0 = time.perf_counter()
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        first = (time.perf_counter() - t0) * 1e3
        times = []
        for _ in range(n):
            t = time.perf_counter()
            sess.run(None, feeds)
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        print(f"{name}\t{first:.1f}\t{times[(len(times) - 1) // 2]:.2f}")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--bench":
        return bench(int(sys.argv[2]), sys.argv[4], sys.argv[5:] or list(read_pins(sys.argv[3])))
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    pins, root, names = read_pins(sys.argv[1]), sys.argv[2], sys.argv[3:]
    for name in names:
        if name not in pins:
            raise SystemExit(f"real-models-ref: {name} is not in {sys.argv[1]}")
        row, d = pins[name], os.path.join(root, name)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        feeds = dict(make_input(rng, s) for s in row["inputs"].split(";") if s)
        so = ort.SessionOptions()
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
        want = [i.name for i in sess.get_inputs()]
        if sorted(want) != sorted(feeds):
            raise SystemExit(f"real-models-ref: {name}: the model's inputs are {want}, the pins give {sorted(feeds)}")
        outs = sess.run(None, feeds)
        plain = ort.SessionOptions()
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        outs0 = ort.InferenceSession(os.path.join(d, "model.onnx"), plain, providers=["CPUExecutionProvider"]).run(None, feeds)
        noise = max(rel_l2(a, b) for a, b in zip(outs0, outs))
        lines = []
        for k, n in enumerate(want):
            write_npy(os.path.join(d, f"input_{k}.npy"), feeds[n])
            lines.append(f"input\t{k}\t{n}")
        for k, (o, a) in enumerate(zip(sess.get_outputs(), outs)):
            write_npy(os.path.join(d, f"output_{k}.npy"), a)
            lines.append(f"output\t{k}\t{o.name}")
        with open(os.path.join(d, "io.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(d, "ort.txt"), "w", encoding="utf-8") as f:
            f.write(ort.__version__ + "\n")
        with open(os.path.join(d, "ort_noise.txt"), "w", encoding="utf-8") as f:
            f.write(f"{noise:.6g}\n")
        shapes = ", ".join(f"{o.name}{list(a.shape)}" for o, a in zip(sess.get_outputs(), outs))
        print(f"real-models-ref: {name}: {shapes}; ORT optimised vs unoptimised: {noise:.3g}", file=sys.stderr)


if __name__ == "__main__":
    main()
