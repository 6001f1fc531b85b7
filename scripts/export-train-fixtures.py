#!/usr/bin/python3
"""Exports the training fixtures: small models from PyTorch with their initial
weights, a data set, and PyTorch's own training runs with each optimizer (the
loss of every step, and the trained model's outputs), which tensorbridge's
trainer is tested against.

  scripts/export-train-fixtures.py DIR      (the committed copy is testdata/train)

Needs Debian's python3-torch and python3-numpy (apt-get install python3-torch
python3-numpy); Python is a setup tool only, the tests read the files.

Each model NAME gets DIR/NAME/model.onnx (exported before any training, with
do_constant_folding off so that every initializer is one PyTorch parameter,
under its name), DIR/NAME/data/*.npy (one file per model input and per
labels/targets name; the first axis is the sample) and, per run RUN,
DIR/NAME/RUN.json: the settings as `tensorbridge train` flags, PyTorch's loss
of every step, and DIR/NAME/RUN.output.npy, the trained model's output OUTPUT on
the first 8 samples. Step i (from 1) trains on samples (i-1)*B ... (i-1)*B+B-1
modulo N, in order, as `tensorbridge train` without --shuffle does.
"""
import json, os, re, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class Regression(nn.Module):
    """A one-output regression: its last bias has a single element."""
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(8, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        return self.out(torch.sigmoid(self.hidden(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)     # 8x8 -> 4x4... (N,4,4,4)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 1)     # (N,8,2,2) kept small
        x = F.pad(x, (0, 1, 0, 1))                      # (N,8,3,3): Pad in the backward pass
        return self.fc(torch.flatten(x, 1))


class Decoder(nn.Module):
    """A small decoder-only transformer that computes its own loss: the
    next-token cross entropy of its logits against the labels input."""
    def __init__(self, vocab=32, d=16, heads=2, T=8):
        super().__init__()
        self.heads, self.T = heads, T
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(T, d) * 0.1)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        # LayerNorm starts at ones and zeros; the exporter would merge equal
        # initializers into one, tying parameters PyTorch trains apart.
        with torch.no_grad():
            for ln in (self.ln1, self.ln2, self.lnf):
                ln.weight.add_(0.1 * torch.randn(d))
                ln.bias.add_(0.1 * torch.randn(d))

    def forward(self, input_ids, labels):
        B, T = input_ids.shape
        h = self.tok(input_ids) + self.pos[:T]
        x = self.ln1(h)
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        dh = x.shape[-1] // self.heads
        q = q.reshape(B, T, self.heads, dh).transpose(1, 2)
        k = k.reshape(B, T, self.heads, dh).transpose(1, 2)
        v = v.reshape(B, T, self.heads, dh).transpose(1, 2)
        att = q @ k.transpose(-1, -2) / (dh ** 0.5)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, -1e9).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        h = h + self.proj(y)
        h = h + self.fc2(F.gelu(self.fc1(self.ln2(h))))
        logits = self.head(self.lnf(h))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return logits, loss


def make(name, rng):
    N = 40
    if name == "mlp_ce":
        m = MLP()
        x = rng.standard_normal((N, 16)).astype(np.float32)
        y = rng.integers(0, 4, N).astype(np.int64)
        return m, {"x": x}, {"labels": y}, ["logits"], "cross_entropy:logits:labels", "logits"
    if name == "regression_mse":
        m = Regression()
        x = rng.standard_normal((N, 8)).astype(np.float32)
        t = (x[:, :1] * 0.5 - x[:, 1:2] ** 2 + 0.1 * rng.standard_normal((N, 1))).astype(np.float32)
        return m, {"x": x}, {"targets": t}, ["y"], "mse:y:targets", "y"
    if name == "cnn_ce":
        m = CNN()
        x = rng.standard_normal((N, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 5, N).astype(np.int64)
        return m, {"x": x}, {"labels": y}, ["logits"], "cross_entropy:logits:labels", "logits"
    if name == "decoder_lossgraph":
        m = Decoder()
        ids = rng.integers(0, 32, (N, 9)).astype(np.int64)
        return m, {"input_ids": ids[:, :8], "labels": ids[:, 1:]}, {}, ["logits", "loss"], "loss", "logits"
    raise ValueError(name)


def loss_of(m, spec, inputs, targets):
    outs = m(*inputs.values())
    if not isinstance(outs, tuple):
        outs = (outs,)
    if spec == "loss":
        return outs[1]
    kind, _, tname = spec.split(":")
    t = targets[tname]
    if kind == "cross_entropy":
        return F.cross_entropy(outs[0].reshape(-1, outs[0].shape[-1]), t.reshape(-1))
    return F.mse_loss(outs[0], t)


RUNS = {
    # name: (optimizer flags, extra flags)
    "adamw": dict(optimizer="adamw", lr=1e-2, betas=[0.9, 0.999], eps=1e-8, weight_decay=1e-2),
    "adam": dict(optimizer="adam", lr=1e-2, betas=[0.8, 0.99], eps=1e-6, weight_decay=1e-3),
    "sgd": dict(optimizer="sgd", lr=5e-2, momentum=0.9, weight_decay=1e-3),
}


def optimizer(kind, params, s):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=s["lr"], betas=tuple(s["betas"]), eps=s["eps"], weight_decay=s["weight_decay"])
    if kind == "adam":
        return torch.optim.Adam(params, lr=s["lr"], betas=tuple(s["betas"]), eps=s["eps"], weight_decay=s["weight_decay"])
    return torch.optim.SGD(params, lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"])


def run(name, out, steps=12, batch=8):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    m0, inputs, targets, outs, spec, probe = make(name, rng)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    for k, v in {**inputs, **targets}.items():
        np.save(os.path.join(d, "data", k + ".npy"), v)
    init = {k: v.detach().clone() for k, v in m0.state_dict().items()}
    m0.eval()
    args = tuple(torch.from_numpy(v[:batch]) for v in inputs.values())
    torch.onnx.export(m0, args, os.path.join(d, "model.onnx"), input_names=list(inputs), output_names=outs,
                      dynamic_axes={n: {0: "batch"} for n in list(inputs) + outs[:1]},
                      opset_version=17, do_constant_folding=False)
    params = dict(m0.named_parameters())
    import onnx  # only to check the fixture's promise: one initializer per parameter
    g = onnx.load(os.path.join(d, "model.onnx")).graph
    inits = {i.name for i in g.initializer if i.data_type == onnx.TensorProto.FLOAT}
    assert inits == set(params), (name, sorted(inits ^ set(params)))
    N = len(next(iter(inputs.values())))
    runs = dict(RUNS)
    if name == "mlp_ce":
        runs["adamw_freeze"] = dict(RUNS["adamw"], freeze=r"^net\.0\.")
    for run_name, s in runs.items():
        m = make(name, np.random.default_rng(0))[0]
        m.load_state_dict(init)
        m.train()
        frz = s.get("freeze")
        trainable = [p for n, p in m.named_parameters() if not (frz and re.search(frz, n))]
        for n, p in m.named_parameters():
            p.requires_grad_(not (frz and re.search(frz, n)))
        opt = optimizer(s["optimizer"], trainable, s)
        losses = []
        for i in range(1, steps + 1):
            idx = [((i - 1) * batch + j) % N for j in range(batch)]
            bi = {k: torch.from_numpy(v[idx]) for k, v in inputs.items()}
            bt = {k: torch.from_numpy(v[idx]) for k, v in targets.items()}
            opt.zero_grad()
            loss = loss_of(m, spec, bi, bt)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        m.eval()
        with torch.no_grad():
            o = m(*(torch.from_numpy(v[:8]) for v in inputs.values()))
            o = o[0] if isinstance(o, tuple) else o
        np.save(os.path.join(d, run_name + ".output.npy"), o.numpy().astype(np.float32))
        flags = {"loss": spec, "batch": batch, "steps": steps, **s}
        with open(os.path.join(d, run_name + ".json"), "w") as f:
            json.dump({"flags": flags, "losses": losses, "output": probe, "output_samples": 8,
                       "torch": torch.__version__}, f, indent=1)
        print(name, run_name, "loss", losses[0], "->", losses[-1])


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "testdata/train"
    for n in ["mlp_ce", "regression_mse", "cnn_ce", "decoder_lossgraph"]:
        run(n, out)
