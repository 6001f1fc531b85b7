#!/usr/bin/env python3
"""Summarises the raw JSON written by scripts/bench.sh as the Markdown tables
of BENCHMARKS.md.

  python3 scripts/bench-report.py RESULTS_DIR

Figures over repeats are given as the median with the range [min-max].
ORT's FLOP/s use tensorbridge's FLOP count of the same model and shapes
(counted from the ONNX graph), times ORT's throughput.
"""
import glob, json, os, re, statistics, sys

MODELS = ["mlp", "bert_encoder", "bert_encoder_op13", "mobilenet_v2", "resnet18", "resnet50"]
LABEL = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2",
         "bert_encoder": "BERT-like encoder, opset 17 (seq 128)",
         "bert_encoder_op13": "BERT-like encoder, opset 13, TransformerEncoder (seq 128)",
         "mlp": "MLP 784-512-256-10"}
RESTART_MODELS = ["bert_encoder", "bert_encoder_op13"]


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def spread(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt % med
    return (fmt + " [" + fmt + "-" + fmt + "]") % (med, min(vals), max(vals))


def runs(d, model, backend):
    out = []
    for p in sorted(glob.glob(os.path.join(d, "%s.%s.r*.json" % (model, backend)))):
        if ".restart." in p:
            continue
        r = load(p)
        if r:
            out.append(r)
    return out


def batch_of(rep, b):
    for x in rep.get("batches", []):
        if x["batch"] == b:
            return x
    return None


def main():
    d = sys.argv[1]
    flops = {}  # (model, batch) -> FLOPs per run
    for m in MODELS:
        for be in ("xla-cpu", "cpu"):
            for r in runs(d, m, be):
                for x in r["batches"]:
                    if x.get("flops_per_run"):
                        flops[(m, x["batch"])] = x["flops_per_run"]
    batches = sorted({b for (_, b) in flops} or {1, 8})

    mallocs = sorted({r.get("host", {}).get("malloc", "") for m in MODELS for r in runs(d, m, "xla-cpu")} - {""})
    if mallocs:
        print("tensorbridge's C allocator: " + "; ".join(mallocs) + "\n")
    print("### Steady state (threads as in machine.txt)\n")
    print("The target column is ONNX Runtime's p50 latency over xla-cpu's (>= 1.0 means xla-cpu is at least as "
          "fast): on the medians over the repeats; on each backend's best repeat; and on each backend's fastest "
          "single run, the figure least disturbed by other load on a shared machine.\n")
    print("| model | batch | backend | runs | p50 latency ms | throughput samples/s | GFLOP/s | ORT ms / xla-cpu ms (p50 medians; best p50; fastest runs) |")
    print("|---|---|---|---|---|---|---|---|")
    for m in MODELS:
        for b in batches:
            thr = {}
            for be in ("xla-cpu", "ort", "cpu"):
                rs = [batch_of(r, b) for r in runs(d, m, be)]
                rs = [x for x in rs if x]
                if not rs:
                    continue
                p50 = [x["latency"]["p50_ms"] for x in rs]
                tp = [x["throughput_samples_per_s"] for x in rs]
                thr[be] = statistics.median(tp)
                f = flops.get((m, b))
                gf = [f * t / b / 1e9 for t in tp] if f else []
                ratio = ""
                if be == "xla-cpu":
                    ob = [x for x in (batch_of(r, b) for r in runs(d, m, "ort")) if x]
                    ors = [x["latency"]["p50_ms"] for x in ob]
                    if ors:
                        omin = min(x["latency"]["min_ms"] for x in ob)
                        tmin = min(x["latency"]["min_ms"] for x in rs)
                        ratio = "**%.2f**; %.2f; %.2f" % (statistics.median(ors) / statistics.median(p50), min(ors) / min(p50), omin / tmin)
                name = {"xla-cpu": "tensorbridge xla-cpu", "ort": "ONNX Runtime CPU", "cpu": "tensorbridge cpu (pure Go)"}[be]
                print("| %s | %d | %s | %d x %d | %s | %s | %s | %s |" % (
                    LABEL[m], b, name, len(rs), rs[0]["timed_runs"], spread(p50, "%.3g"), spread(tp, "%.4g"),
                    spread(gf, "%.3g") if gf else "-", ratio))
    print()

    print("### First call (batch 1, cold compile cache; seconds)\n")
    print("| model | backend | open | load | compile | first run | second run |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        for be in ("xla-cpu", "cpu"):
            rs = runs(d, m, be)
            if not rs:
                continue
            b1 = [batch_of(r, batches[0]) for r in rs]
            print("| %s | tensorbridge %s | %s | %s | %s | %s | %s |" % (
                LABEL[m], be, spread([r["open_s"] for r in rs], "%.3f"), spread([r["load_s"] for r in rs], "%.3f"),
                spread([x["compile_s"] for x in b1], "%.2f"), spread([x["first_run_s"] for x in b1], "%.4f"),
                spread([x["second_run_s"] for x in b1], "%.4f")))
        rs = runs(d, m, "ort")
        if rs:
            b1 = [batch_of(r, batches[0]) for r in rs]
            print("| %s | ONNX Runtime (session creation = load + optimise) | - | %s | (in load) | %s | %s |" % (
                LABEL[m], spread([r["session_create_s"] for r in rs], "%.3f"),
                spread([x["first_run_s"] for x in b1], "%.4f"), spread([x["second_run_s"] for x in b1], "%.4f")))
    print()

    for rm in RESTART_MODELS:
        restart_table(d, rm)
    print_rest(d)


def restart_table(d, model):
    rs = [load(p) for p in sorted(glob.glob(os.path.join(d, "%s.xla-cpu.restart.r*.json" % model)))]
    rs = [r for r in rs if r and r.get("restart")]
    if rs:
        print("### Restart with a warm disk cache (%s, xla-cpu, batch 1)\n" % LABEL[model])
        print("| process | time to first inference s | process exit s | open s | load s | compile s | first run s | cache hits / misses |")
        print("|---|---|---|---|---|---|---|---|")
        for k in ("cold", "warm"):
            pts = [r["restart"][k] for r in rs]
            cs = pts[-1].get("compile_cache") or {}
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                k, spread([p.get("first_inference_s", p["wall_s"]) for p in pts], "%.3f"),
                spread([p["wall_s"] for p in pts], "%.3f"), spread([p["open_s"] for p in pts], "%.3f"),
                spread([p["load_s"] for p in pts], "%.3f"), spread([p.get("compile_s", 0) for p in pts], "%.3f"),
                spread([p["first_run_s"] for p in pts], "%.4f"),
                "%s / %s" % (cs.get("hits", "-"), cs.get("misses", "-"))))
        print("\nspeedup (cold / warm): %s\n" % spread([r["restart"]["speedup"] for r in rs], "%.1f"))


def print_rest(d):
    rows = []
    for m in MODELS:
        for be in ("xla-cpu", "cpu"):
            for suffix in ("bf16", "bf16-plain"):
                r = load(os.path.join(d, "%s.%s.%s.json" % (m, be, suffix)))
                if not r:
                    continue
                for x in r["batches"]:
                    for a in x.get("accuracy", []):
                        rows.append((LABEL[m], be, r["precision"], x["batch"], a["output"], a["relative_l2"],
                                     a["max_abs_diff"], x["latency"]["p50_ms"]))
    if rows:
        print("### Accuracy cost of bfloat16 (relative L2 against float32, same backend and inputs)\n")
        print("| model | backend | precision | batch | output | relative L2 | max abs diff | p50 ms (few runs) |")
        print("|---|---|---|---|---|---|---|---|")
        for row in rows:
            print("| %s | %s | %s | %d | %s | %.3g | %.3g | %.3g |" % row)
        print()

    agree = []
    for m in MODELS:
        for r in runs(d, m, "ort")[:1]:
            for x in r["batches"]:
                for a in x.get("agreement", []):
                    agree.append((LABEL[m], x["batch"], a["output"], a["relative_l2_vs_tensorbridge"]))
    if agree:
        print("### ONNX Runtime against tensorbridge xla-cpu on the same inputs (float32)\n")
        print("| model | batch | output | relative L2 |")
        print("|---|---|---|---|")
        for row in agree:
            print("| %s | %d | %s | %.3g |" % row)
        print()

    loads = []
    for p in glob.glob(os.path.join(d, "*.json")):
        r = load(p)
        if r and "host" in r:
            h = r["host"]
            loads += [h.get("loadavg_before", [0])[0], h.get("loadavg_after", [0])[0]]
    if loads:
        print("1-minute load average seen around the runs: min %.2f, median %.2f, max %.2f" % (
            min(loads), statistics.median(loads), max(loads)))


if __name__ == "__main__":
    main()
