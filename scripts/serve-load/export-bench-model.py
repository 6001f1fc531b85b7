#!/usr/bin/python3
"""Exports the serve load figure's BERT-like encoder (bert_encoder_tf, see
scripts/export-transformer-layers.py bench) with a PyTorch 2.x instead of
Debian's 1.13, keeping 1.13's graph: self-attention as one packed projection
split in three and explicit matmul-softmax-matmul attention. PyTorch 2.5's
own export (scaled_dot_product_attention at opset 14, the projection
reshaped by a size computed from the input) has a Slice the padding analysis
cannot prove exact, so serve would not merge requests and the figure would
measure something else. Python is a setup tool only.

  PYTHONPATH=DIR_WITH_onnx ~/.cache/tensorbridge/llm-venv/bin/python \\
      scripts/serve-load/export-bench-model.py OUT_DIR

(torch.onnx.export needs the onnx package: pip install --target DIR onnx.)
"""
import importlib.util
import math
import os
import sys

import torch
import torch.nn.functional as F


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """Attention as PyTorch 1.13 exported it: bmm, softmax, bmm."""
    s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if attn_mask is not None:
        s = s + attn_mask
    return torch.matmul(torch.softmax(s, dim=-1), v)


def in_proj_packed(q, k, v, w, b=None):
    """Self-attention's projection as PyTorch 1.13 wrote it: one linear, chunked."""
    if q is k and k is v:
        return tuple(t.contiguous() for t in F.linear(q, w, b).chunk(3, dim=-1))
    raise NotImplementedError("only self-attention is exported here")


def main():
    F.scaled_dot_product_attention = sdpa
    F._in_projection_packed = in_proj_packed
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "export-transformer-layers.py")
    spec = importlib.util.spec_from_file_location("export_transformer_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.argv = [path, "bench", sys.argv[1]]
    mod.main()


if __name__ == "__main__":
    main()
