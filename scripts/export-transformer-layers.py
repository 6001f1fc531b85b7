#!/usr/bin/python3
"""Exports PyTorch's own transformer layers (nn.TransformerEncoder,
nn.TransformerDecoderLayer) to ONNX with a dynamic batch axis, and records
PyTorch's outputs for a batch of 3 as the reference the padding tests
(padding_transformer_test.go) compare against.

  scripts/export-transformer-layers.py small DIR   d_model 32: committed under testdata/models
  scripts/export-transformer-layers.py bench DIR   d_model 64, sequence 128: tf_encoder and the
                                                   BERT-like bert_encoder_tf of the load figure
                                                   in BENCHMARKS.md (not committed)

nn.MultiheadAttention merges the batch with the heads ([seq, batch*heads,
head_dim]) and back: the export that the padding analysis has to prove exact.
Needs Debian's python3-torch (1.13) and python3-numpy; Python is a setup tool
only. Each model is NAME.onnx, NAME.input_K.npy / NAME.output_K.npy, NAME.json.
"""
import json, os, sys
import numpy as np
import torch
import torch.nn as nn

SEQ = 128  # the sequence length of the encoder; the batch is dynamic


class EncoderSeqFirst(nn.Module):
    """nn.TransformerEncoder, batch_first=False: x is [seq, batch, d]."""

    def __init__(self, d, heads, ff, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class EncoderBatchFirst(nn.Module):
    """nn.TransformerEncoder, batch_first=True, with a key padding mask:
    x is [batch, seq, d], mask [batch, seq] (true = padding)."""

    def __init__(self, d, heads, ff, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x, mask):
        return self.enc(x, src_key_padding_mask=mask)


class BertLike(nn.Module):
    """A BERT-like encoder on nn.TransformerEncoder (sequence-first inside,
    as its default batch_first=False): token + position embeddings,
    LayerNorm, the encoder with a key padding mask, a tanh pooler. Inputs
    input_ids and attention_mask are [batch, 128]: only the batch is dynamic."""

    def __init__(self, d, heads, ff, layers=2, vocab=30522):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(SEQ, d)
        self.ln0 = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(SEQ).unsqueeze(0)
        x = self.ln0(self.tok(input_ids) + self.pos(pos)).transpose(0, 1)
        x = self.enc(x, src_key_padding_mask=attention_mask == 0).transpose(0, 1)
        return x, torch.tanh(self.pool(x[:, 0]))


class DecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer (sequence-first) with a causal target mask:
    self-attention over tgt [tseq, batch, d], cross-attention to memory
    [seq, batch, d]."""

    def __init__(self, d, heads, ff, tseq):
        super().__init__()
        self.dec = nn.TransformerDecoderLayer(d, heads, ff, dropout=0.0)
        self.register_buffer("causal", torch.triu(torch.full((tseq, tseq), float("-inf")), diagonal=1))

    def forward(self, tgt, memory):
        return self.dec(tgt, memory, tgt_mask=self.causal)


def export(name, model, inputs, input_names, output_names, dynamic_axes, out_dir, opset=13):
    model.eval()
    with torch.no_grad():
        outs = model(*inputs)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, tuple(inputs), path, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True)
    for i, t in enumerate(inputs):
        np.save(os.path.join(out_dir, "%s.input_%d.npy" % (name, i)), t.numpy())
    for i, t in enumerate(outs):
        np.save(os.path.join(out_dir, "%s.output_%d.npy" % (name, i)), t.numpy())
    meta = dict(model=name + ".onnx", opset=opset, inputs=input_names, outputs=output_names,
                dynamic_axes=dynamic_axes, torch=torch.__version__,
                params=sum(p.numel() for p in model.parameters()))
    json.dump(meta, open(os.path.join(out_dir, name + ".json"), "w"), indent=1)
    print("%-18s %8d params  %s" % (name, meta["params"], path))


def main():
    which, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    d, heads, ff = {"small": (32, 4, 64), "bench": (64, 4, 256)}[which]
    b = 3
    export("tf_encoder", EncoderSeqFirst(d, heads, ff), [torch.randn(SEQ, b, d, generator=g)],
           ["src"], ["out"], {"src": {1: "batch"}, "out": {1: "batch"}}, out_dir)
    if which == "bench":
        ids = torch.randint(0, 30522, (b, SEQ), generator=g)
        am = torch.ones(b, SEQ, dtype=torch.int64)
        am[1, 100:] = 0
        export("bert_encoder_tf", BertLike(d, heads, ff), [ids, am], ["input_ids", "attention_mask"],
               ["hidden", "pooled"], {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                                      "hidden": {0: "batch"}, "pooled": {0: "batch"}}, out_dir)
        return
    mask = torch.zeros(b, SEQ, dtype=torch.bool)
    mask[1, 100:] = True
    mask[2, 7:] = True
    export("tf_encoder_bf", EncoderBatchFirst(d, heads, ff), [torch.randn(b, SEQ, d, generator=g), mask],
           ["src", "mask"], ["out"], {"src": {0: "batch"}, "mask": {0: "batch"}, "out": {0: "batch"}}, out_dir)
    tseq = 16
    export("tf_decoder_layer", DecoderLayer(d, heads, ff, tseq),
           [torch.randn(tseq, b, d, generator=g), torch.randn(SEQ, b, d, generator=g)],
           ["tgt", "memory"], ["out"], {"tgt": {1: "batch"}, "memory": {1: "batch"}, "out": {1: "batch"}}, out_dir)


if __name__ == "__main__":
    main()
