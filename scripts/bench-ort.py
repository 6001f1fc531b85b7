#!/usr/bin/env python3
"""ONNX Runtime CPU figures for the same ONNX files, inputs, batch sizes,
thread count and iteration counts as `tensorbridge bench`, printed as JSON.

ONNX Runtime is a measurement peer only: tensorbridge never needs it. It is
installed into a separate virtual environment (see scripts/bench.sh):

  python3 -m venv --system-site-packages DIR && DIR/bin/pip install onnxruntime
  DIR/bin/python scripts/bench-ort.py MODEL.onnx --batch 1,8 --threads 2 --iters 50 \\
      [--seq 128] [--warmup 3] [--inputs IODIR]

With --inputs IODIR (the directory `tensorbridge bench --save-io IODIR` wrote),
the inputs are tensorbridge's own, read from MODEL.bB.in.NAME.npy, and ORT's
outputs are compared with tensorbridge's MODEL.bB.out.NAME.npy (relative L2),
which checks that both computed the same thing. Without it, inputs are
generated with numpy by the same rules (normal floats, masks of ones,
integer ids in [0, 100)), but not the same values.

Latency percentiles are nearest-rank, as tensorbridge bench computes them.
"""
import argparse, json, math, os, platform, sys, time

import numpy as np


def load_avg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return [0.0, 0.0, 0.0]


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            if k.strip() == "model name":
                return v.strip()
    except OSError:
        pass
    return platform.machine()


def percentiles(samples):
    s = sorted(samples)
    rank = lambda p: s[min(max(math.ceil(p / 100 * len(s)) - 1, 0), len(s) - 1)]
    return dict(p50_ms=rank(50), p90_ms=rank(90), p99_ms=rank(99), mean_ms=sum(s) / len(s), min_ms=s[0], max_ms=s[-1])


NP_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
            "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
SEQ_WORDS = ("seq", "sequence", "len", "length", "token", "time")


def shape_of(inp, batch, seq):
    dims, uses_seq = [], False
    for k, d in enumerate(inp.shape):
        if isinstance(d, int) and d >= 0:
            dims.append(d)
            continue
        name = str(d or "").lower()
        is_seq = any(w in name for w in SEQ_WORDS)
        if k == 0 and not is_seq:
            dims.append(batch)
        elif is_seq or (k == 1 and "int" in inp.type):
            dims.append(seq)
            uses_seq = True
        else:
            sys.exit("input %s: no size for symbolic dimension %d (%s)" % (inp.name, k, d))
    return dims, uses_seq


def generate(inp, dims, rng):
    dt = NP_TYPES.get(inp.type)
    if dt is None:
        sys.exit("input %s: cannot generate %s" % (inp.name, inp.type))
    low = inp.name.lower()
    if "mask" in low:
        return np.ones(dims, dtype=dt)
    if "token_type" in low or "segment" in low:
        return np.zeros(dims, dtype=dt)
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 100, size=dims).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=dims).astype(bool)
    return rng.standard_normal(dims).astype(dt)


def safe(name):
    return "".join("_" if c in "/\\:\0" else c for c in name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--duration", type=float, default=0, help="seconds of timed runs per batch size (at least 5 runs)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="intra_op_num_threads (0: ORT's default)")
    ap.add_argument("--inputs", default="", help="directory written by tensorbridge bench --save-io")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.iters and a.duration:
        sys.exit("give --iters or --duration, not both")
    if not a.iters and not a.duration:
        a.duration = 5.0
    batches = sorted({int(x) for x in a.batch.split(",")})

    import onnxruntime as ort

    so = ort.SessionOptions()
    if a.threads:
        so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    rep = dict(runtime="onnxruntime", version=ort.__version__, library="onnxruntime Python wheel (libonnxruntime inside)",
               provider="CPUExecutionProvider", model=a.model,
               threads="intra_op_num_threads=%d, inter_op_num_threads=1, sequential" % a.threads,
               host=dict(cpu=cpu_model(), cpus=os.cpu_count(), loadavg_before=load_avg(), python=platform.python_version()),
               batches=[])
    t0 = time.perf_counter()
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    rep["session_create_s"] = time.perf_counter() - t0  # load + graph optimisation: ORT's compile
    base = os.path.splitext(os.path.basename(a.model))[0]
    outs = [o.name for o in sess.get_outputs()]
    for b in batches:
        rng = np.random.default_rng(a.seed)
        feed, uses_seq, source = {}, False, "generated by numpy"
        for inp in sess.get_inputs():
            dims, s = shape_of(inp, b, a.seq)
            uses_seq = uses_seq or s
            p = os.path.join(a.inputs, "%s.b%d.in.%s.npy" % (base, b, safe(inp.name))) if a.inputs else ""
            if p and os.path.exists(p):
                feed[inp.name] = np.load(p)
                source = "tensorbridge bench --save-io " + a.inputs
            else:
                feed[inp.name] = generate(inp, dims, rng)
        br = dict(batch=b, inputs=source, warmup_runs=a.warmup)
        if uses_seq:
            br["seq"] = a.seq
        t0 = time.perf_counter()
        first = sess.run(outs, feed)
        br["first_run_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        sess.run(outs, feed)
        br["second_run_s"] = time.perf_counter() - t0
        for _ in range(a.warmup):
            sess.run(outs, feed)
        samples, start = [], time.perf_counter()
        while True:
            k = len(samples)
            if a.iters and k >= a.iters:
                break
            if not a.iters and k >= 5 and time.perf_counter() - start >= a.duration:
                break
            t0 = time.perf_counter()
            sess.run(outs, feed)
            samples.append((time.perf_counter() - t0) * 1e3)
        total = time.perf_counter() - start
        br.update(timed_runs=len(samples), timed_s=total, latency=percentiles(samples),
                  throughput_samples_per_s=b * len(samples) / total)
        agree = []
        for name, got in zip(outs, first):
            p = os.path.join(a.inputs, "%s.b%d.out.%s.npy" % (base, b, safe(name))) if a.inputs else ""
            if p and os.path.exists(p):
                want = np.load(p).astype(np.float64)
                got = np.asarray(got, dtype=np.float64)
                den = np.linalg.norm(want)
                rel = float(np.linalg.norm(got - want) / den) if den else float(np.linalg.norm(got - want))
                agree.append(dict(output=name, relative_l2_vs_tensorbridge=rel))
        if agree:
            br["agreement"] = agree
        rep["batches"].append(br)
    rep["host"]["loadavg_after"] = load_avg()
    json.dump(rep, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
