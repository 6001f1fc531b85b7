#!/usr/bin/env python3
"""Dynamically quantized conv nets and ONNX Runtime's outputs for them.

Writes testdata/models/quant_unet*.onnx and their references, the fixtures of
TestQuantizedUNetMatchesONNXRuntime (quant_test.go). Run it in a throw-away
virtual environment (never needed at run time):

  python3 -m venv /tmp/qvenv
  /tmp/qvenv/bin/pip install onnxruntime==1.31.1 onnx==1.20.0 numpy==2.4.6
  /tmp/qvenv/bin/python scripts/gen-quant-fixtures.py testdata/models

  ... --layer DIR        writes DIR/conv_f32.onnx and DIR/conv_q.onnx: one
                         64 -> 64 channel 3x3 Conv + Relu on 1x64x256x256,
                         float and quantize_dynamic'd, and times both with
                         ONNX Runtime (1 thread, median of 5)
  ... --bench N [SIZE [THREADS]]  times ONNX Runtime on the quantized net
                         instead (SIZE x SIZE input, default 64; THREADS
                         intra-op threads, default 1; median of N runs)

The float net is a two-level U-Net built with onnx.helper from seeded
weights: Conv+Relu, a strided Conv, a squeeze-excitation block (global pool,
MatMul, Sigmoid, Mul) at the bottom, a ConvTranspose back up, a skip
connection (Concat) and a 1x1 Conv with Sigmoid on top; 1 input channel,
symbolic height and width (64x64 recorded). onnxruntime.quantization.
quantize_dynamic turns each Conv into DynamicQuantizeLinear -> ConvInteger ->
Cast -> Mul (-> Add for the bias) and the MatMul into MatMulInteger, as it
did to the U-Net of issue 19. Two variants:

  quant_unet     quantize_dynamic's defaults (int8 weights, per tensor)
  quant_unet_pc  per_channel=True, weight_type=QUInt8 (uint8 weights with a
                 zero point per output channel)

For each NAME it writes NAME.onnx, NAME.input_0.npy (seeded uniform [0, 1)
64x64 image) and NAME.output_0.npy (ONNX Runtime, all optimisations, 1
thread). For quant_unet it also records every node output for a 32x32 input
(kept small for the repository): NAME.values_input.npy, NAME.values.npz (one
array per value, v0, v1, ... in the graph's node order, which is
topological) and NAME.values.tsv ("key <TAB> node <TAB> op <TAB> value <TAB>
dtype <TAB> shape"), from a copy of the model whose graph outputs are all
node outputs, run unoptimised so each value is its own node's result.
"""
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnxruntime.quantization import QuantType, quantize_dynamic

SEED = 19
SIZE = 64


def conv_w(rng, cout, cin, k):
    """He-initialised weights (as a trained net's would be spread)."""
    std = np.sqrt(2.0 / (cin * k * k))
    return (rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32)


def float_unet():
    rng = np.random.default_rng(SEED)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def conv(name, x, cin, cout, k, stride=1, relu=True):
        w = init(name + ".w", conv_w(rng, cout, cin, k))
        b = init(name + ".b", (rng.standard_normal(cout) * 0.1).astype(np.float32))
        out = name + ".out"
        nodes.append(helper.make_node("Conv", [x, w, b], [out], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [name + ".relu"], name=name + "_relu"))
        return name + ".relu"

    e1 = conv("enc1a", "image", 1, 4, 3)
    e1 = conv("enc1b", e1, 4, 4, 3)
    d = conv("down1", e1, 4, 8, 3, stride=2)
    e2 = conv("enc2", d, 8, 8, 3)
    d = conv("down2", e2, 8, 16, 3, stride=2)
    b = conv("bottom", d, 16, 16, 3)
    # squeeze-excitation: channel gates from a MatMul on the pooled features
    nodes.append(helper.make_node("GlobalAveragePool", [b], ["se.pool"], name="se_pool"))
    nodes.append(helper.make_node("Flatten", ["se.pool"], ["se.flat"], name="se_flatten"))
    init("se.w", (rng.standard_normal((16, 16)) * 0.5).astype(np.float32))
    nodes.append(helper.make_node("MatMul", ["se.flat", "se.w"], ["se.mm"], name="se_matmul"))
    nodes.append(helper.make_node("Sigmoid", ["se.mm"], ["se.gate"], name="se_sigmoid"))
    init("se.shape", np.array([1, 16, 1, 1], np.int64))
    nodes.append(helper.make_node("Reshape", ["se.gate", "se.shape"], ["se.gate4"], name="se_reshape"))
    nodes.append(helper.make_node("Mul", [b, "se.gate4"], ["se.out"], name="se_mul"))
    # up: ConvTranspose 16 -> 8 (stays float: quantize_dynamic leaves it), skip, conv
    init("up2.w", (rng.standard_normal((16, 8, 2, 2)) * np.sqrt(2.0 / 64)).astype(np.float32))
    nodes.append(helper.make_node("ConvTranspose", ["se.out", "up2.w"], ["up2.out"], name="up2",
                                  kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Concat", ["up2.out", e2], ["cat2"], name="cat2", axis=1))
    u = conv("dec2", "cat2", 16, 8, 3)
    # up again with a nearest Resize + conv, as many U-Nets do
    init("up1.scales", np.array([1, 1, 2, 2], np.float32))
    nodes.append(helper.make_node("Resize", [u, "", "up1.scales"], ["up1.out"], name="up1", mode="nearest"))
    u = conv("up1c", "up1.out", 8, 4, 3)
    nodes.append(helper.make_node("Concat", [u, e1], ["cat1"], name="cat1", axis=1))
    u = conv("dec1", "cat1", 8, 4, 3)
    logits = conv("head", u, 4, 1, 1, relu=False)
    nodes.append(helper.make_node("Sigmoid", [logits], ["mask"], name="head_sigmoid"))

    graph = helper.make_graph(
        nodes, "unet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, "H", "W"])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, "H", "W"])],
        inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gen-quant-fixtures")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def session(path_or_bytes, optimised, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimised else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


def quantize(tmp, name, **kw):
    fp = os.path.join(tmp, name + ".float.onnx")
    onnx.save(float_unet(), fp)
    qp = os.path.join(tmp, name + ".onnx")
    quantize_dynamic(fp, qp, **kw)
    return qp


def record(outdir, name, qpath, values_size=0):
    m = onnx.load(qpath)
    # The types of all values in value_info (the Go test makes any of them
    # a graph output).
    m = shape_inference.infer_shapes(m)
    onnx.save(m, os.path.join(outdir, name + ".onnx"))
    rng = np.random.default_rng(SEED)
    x = rng.random((1, 1, SIZE, SIZE), dtype=np.float32)
    np.save(os.path.join(outdir, name + ".input_0.npy"), x)
    y = session(m.SerializeToString(), True).run(None, {"image": x})[0]
    np.save(os.path.join(outdir, name + ".output_0.npy"), y)

    if values_size:
        record_values(outdir, name, m, values_size)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(f"{name}: {len(m.graph.node)} nodes, ops {sorted(ops.items())}, onnxruntime {ort.__version__}")


def record_values(outdir, name, m, size):
    """Every node output, from a copy of m whose graph outputs are all node
    outputs, run unoptimised (each value is its node's own result) on a
    seeded size x size input: NAME.values.npz (v0, v1, ... in topological
    order, the order of the graph's nodes), NAME.values.tsv, NAME.values_input.npy."""
    rng = np.random.default_rng(SEED + size)
    x = rng.random((1, 1, size, size), dtype=np.float32)
    dbg = onnx.ModelProto()
    dbg.CopyFrom(m)
    order = []
    for n in dbg.graph.node:
        for o in n.output:
            if o:
                order.append((n.name, n.op_type, o))
    del dbg.graph.output[:]
    for _, _, o in order:
        dbg.graph.output.append(helper.make_empty_tensor_value_info(o))
    vals = session(dbg.SerializeToString(), False).run([o for _, _, o in order], {"image": x})
    y = session(m.SerializeToString(), True).run(None, {"image": x})[0]
    if not np.array_equal(vals[-1], y):
        d = np.abs(vals[-1] - y).max()
        print(f"{name}: unoptimised and optimised ONNX Runtime differ by {d:g} at most on the output", file=sys.stderr)
    np.save(os.path.join(outdir, name + ".values_input.npy"), x)
    np.savez_compressed(os.path.join(outdir, name + ".values.npz"), **{f"v{k}": v for k, v in enumerate(vals)})
    with open(os.path.join(outdir, name + ".values.tsv"), "w", encoding="utf-8") as f:
        for k, ((node, op, o), v) in enumerate(zip(order, vals)):
            f.write(f"v{k}\t{node}\t{op}\t{o}\t{v.dtype}\t{'x'.join(map(str, v.shape))}\n")


def bench(n, size, threads):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        qp = quantize(tmp, "quant_unet")
        x = np.random.default_rng(SEED).random((1, 1, size, size), dtype=np.float32)
        s = session(qp, True, threads)
        t0 = time.perf_counter()
        s.run(None, {"image": x})
        first = time.perf_counter() - t0
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            s.run(None, {"image": x})
            ts.append(time.perf_counter() - t0)
        print(f"onnxruntime {ort.__version__} quant_unet {size}x{size} {threads} thread(s): first run {first*1e3:.2f} ms, median of {n} {np.median(ts)*1e3:.3f} ms")


def layer(outdir):
    rng = np.random.default_rng(SEED)
    c = 64
    w = conv_w(rng, c, c, 3)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 256, 256])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    fp, qp = os.path.join(outdir, "conv_f32.onnx"), os.path.join(outdir, "conv_q.onnx")
    onnx.save(m, fp)
    quantize_dynamic(fp, qp)
    x = rng.random((1, c, 256, 256), dtype=np.float32)
    for path in (fp, qp):
        s = session(path, True)
        s.run(None, {"x": x})
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            s.run(None, {"x": x})
            ts.append(time.perf_counter() - t0)
        print(f"onnxruntime {ort.__version__} {os.path.basename(path)} 1 thread: median of 5 {np.median(ts)*1e3:.1f} ms")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--layer":
        layer(sys.argv[2])
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "--bench":
        bench(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else SIZE, int(sys.argv[4]) if len(sys.argv) > 4 else 1)
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import tempfile
    outdir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        record(outdir, "quant_unet", quantize(tmp, "quant_unet"), values_size=32)
        record(outdir, "quant_unet_pc", quantize(tmp, "quant_unet_pc", per_channel=True, weight_type=QuantType.QUInt8))


if __name__ == "__main__":
    main()
