#!/usr/bin/python3
"""The ResNet-18 training step of issue 23's target (batch 8, eval-mode batch
norm, AdamW): the model and data for `tensorbridge train`, and PyTorch eager's
own step time, the peer (Debian's python3-torch and python3-torchvision).

  scripts/bench-train-resnet18.py make DIR            DIR/model.onnx, DIR/data/{image,labels}.npy
  scripts/bench-train-resnet18.py peer DIR THREADS STEPS

make exports torchvision's resnet18 (seed 0, eval mode, do_constant_folding
off, so every parameter and running statistic is an initializer under its
PyTorch name) and 16 random 224x224 images with labels. peer trains the same
model on the same data in the same order (step i takes samples (i-1)*8 ...
modulo 16), AdamW lr 0.01 over the parameters (the running statistics are
buffers, not trained: `tensorbridge train --freeze 'running_(mean|var)'`
matches that), and prints the median step (forward, backward, optimizer step,
loss read back) over the steps after the first two.
"""
import json, os, statistics, sys, time

import numpy as np
import torch
import torchvision


def model():
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=1000)
    m.eval()  # batch norm from its running statistics, as the ONNX export
    return m


def make(d):
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(os.path.join(d, "data", "image.npy"), rng.standard_normal((16, 3, 224, 224)).astype(np.float32))
    np.save(os.path.join(d, "data", "labels.npy"), rng.integers(0, 1000, 16).astype(np.int64))
    torch.onnx.export(model(), torch.zeros(1, 3, 224, 224), os.path.join(d, "model.onnx"),
                      input_names=["image"], output_names=["logits"], dynamic_axes={"image": {0: "batch"}},
                      do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL, opset_version=13)


def peer(d, threads, steps):
    torch.set_num_threads(threads)
    m = model()
    x = torch.from_numpy(np.load(os.path.join(d, "data", "image.npy")))
    y = torch.from_numpy(np.load(os.path.join(d, "data", "labels.npy")))
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    times = []
    for i in range(steps):
        s = (i * 8) % 16
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x[s:s + 8]), y[s:s + 8])
        loss.backward()
        opt.step()
        float(loss)
        times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"model": "resnet18", "backend": "pytorch " + torch.__version__, "threads": threads,
                      "median_step_ms": round(statistics.median(times[2:]), 1), "steps": len(times) - 2}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
