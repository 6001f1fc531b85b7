#!/usr/bin/python3
"""PyTorch eager's training step time on the training fixtures' models
(testdata/train, built by scripts/export-train-fixtures.py), AdamW lr 0.01,
batch 8, samples in order: the peer of `tensorbridge train --log-json` in
BENCHMARKS.md ("Training step").

  scripts/bench-train-torch.py THREADS STEPS

Prints one JSON line per model: the median step (batch slicing, forward,
backward, optimizer step, loss read back) over the steps after the first 20.
"""
import importlib.util, json, os, statistics, sys, time

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fixtures", os.path.join(here, "export-train-fixtures.py"))
fx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fx)

threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
for name in ["mlp_ce", "cnn_ce", "decoder_lossgraph"]:
    torch.manual_seed(0)
    m, inputs, targets, _, loss_spec, _ = fx.make(name, np.random.default_rng(0))
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    B, N = 8, 40
    times = []
    for i in range(steps):
        s = (i * B) % N
        t0 = time.perf_counter()
        inp = {k: torch.from_numpy(v[s:s + B]) for k, v in inputs.items()}
        tg = {k: torch.from_numpy(v[s:s + B]) for k, v in targets.items()}
        opt.zero_grad()
        loss = fx.loss_of(m, loss_spec, inp, tg)
        loss.backward()
        opt.step()
        float(loss)
        times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"model": name, "threads": threads, "median_ms": round(statistics.median(times[20:]), 4)}))
