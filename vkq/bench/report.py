"""What a run prints and writes: the kernel table (GOP/s against the roofline model), the
models table (per call: host, eval and GPU time, dispatches, barriers), the targets, JSON."""
from __future__ import annotations

import json

from .records import Record

# (key, header) of the two tables
KERNEL_COLUMNS = (("suite", "suite"), ("name", "name"), ("shape", "shape"), ("dtype", "dtype"),
                  ("backend", "backend"), ("median_ms", "median ms"), ("p90_ms", "p90 ms"), ("gops", "GOP/s"),
                  ("intensity", "op/B"), ("roof_gops", "roof GOP/s"), ("roofline_fraction", "of roof"),
                  ("bound", "bound"))
MODEL_COLUMNS = (("name", "model"), ("dtype", "dtype"), ("backend", "backend"), ("median_ms", "ms/call"),
                 ("p90_ms", "p90 ms"), ("vs_torch_fp32", "x torch fp32"), ("gpu_ms", "GPU ms"),
                 ("eval_ms", "eval ms"), ("host_ms", "host ms"), ("dispatches", "dispatches"),
                 ("barriers", "barriers"), ("cosine_vs_fp32", "cosine"))


def _dicts(records) -> list[dict]:
    return [x.as_dict() if isinstance(x, Record) else x for x in records]


def with_model_ratios(records) -> list[dict]:
    """The records, each model row with its latency over torch fp32's in the same run."""
    out = _dicts(records)
    fp32 = {r["name"]: r["median_ms"] for r in out if r["suite"] == "models" and r["backend"] == "torch-cpu"
            and r["dtype"] == "fp32"}
    return [{**r, "vs_torch_fp32": r["median_ms"] / fp32[r["name"]]} if r["suite"] == "models" and r["name"] in fp32
            else r for r in out]


def _rows(records, columns, fmt) -> list[list[str]]:
    return [[f"{r[k]:.5f}" if k == "cosine_vs_fp32" and r.get(k) is not None else fmt(r.get(k)) for k, _ in columns]
            for r in records]


def _text(v) -> str:
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _short(v) -> str:
    return "" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def _print(records, columns):
    heads = [h for _, h in columns]
    rows = _rows(records, columns, _text)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip())
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def print_tables(records) -> None:
    """The roofline and kernel records, then the models."""
    rs = with_model_ratios(records)
    _print([r for r in rs if r["suite"] not in ("models", "lm")], KERNEL_COLUMNS)
    models = [r for r in rs if r["suite"] == "models"]
    if models:
        print()
        _print(models, MODEL_COLUMNS)


def print_models_memory(records) -> None:
    """Per vkq model: where a call's time goes, device memory, arena, weights, agreement."""
    for r in _dicts(records):
        if r["suite"] == "models" and r["backend"] == "vulkan":
            barriers = "" if r.get("barriers") is None else f", {r['barriers']} barriers"
            print(f"{r['name']}: {r['median_ms']:.2f} ms a call = eval {r['eval_ms']:.2f} ms (GPU {r['gpu_ms']:.2f} ms "
                  f"in {r['dispatches']} dispatches{barriers}, {r['sequences']} sequence(s); their fixed cost "
                  f"~{r.get('dispatch_cost_ms', 0.0):.2f} ms) + host {r['host_ms']:.2f} ms; "
                  f"device memory {r['device_bytes'] / 2**20:.2f} MiB (arena {r['arena_bytes'] / 2**20:.2f} MiB); "
                  f".vkq {r['vkq_file_bytes'] / 2**20:.2f} MiB = {r['weights_ratio']:.3f} x the fp32 state dict "
                  f"({r['fp32_state_dict_bytes'] / 2**20:.2f} MiB); {r['cpu_ops']} op(s) on the CPU; "
                  f"compile {r['compile_s']:.1f} s")


def markdown_table(records) -> str:
    """The records as Markdown tables (what bench/README.md shows): kernels, then models."""
    rs = with_model_ratios(records)
    out = []
    for rows, columns in (([r for r in rs if r["suite"] not in ("models", "lm")], KERNEL_COLUMNS),
                          ([r for r in rs if r["suite"] == "models"], MODEL_COLUMNS)):
        if not rows:
            continue
        out += ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(row) + " |" for row in _rows(rows, columns, _short)]
        out.append("")
    return "\n".join(out)


def write_json(records, path) -> None:
    with open(path, "w") as f:
        json.dump(with_model_ratios(records), f, indent=1)


# -- targets (issue 12: every kernel near its roofline) -------------------------------------
MEMORY_BOUND_MB = 4       # memory-bound kernels are held to the bandwidth target from this tensor size


def targets(records) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the project's goals, from a run's records. The kernel
    targets read each vkq int8 record's "kind" (gemm, gemv, depthwise, memory; see
    vkq.bench.kernels), on every path."""
    rs = _dicts(records)
    roof = {r["name"]: r["gops"] for r in rs if r["suite"] == "roofline"}
    ours = [r for r in rs if r["suite"] == "kernels" and r["backend"].startswith("vulkan") and r["dtype"] == "int8"]
    out = []

    def roof_of(r, key):      # sampled beside the record (vkq.bench.roofline.RoofProbe), else the run's
        return r.get("roof_beside", {}).get(key) or roof.get(key)

    def of_compute(r):
        return r["gops"] / (roof_of(r, r.get("roofline")) or roof_of(r, "int32_gops") or float("inf"))

    def group(title, kind, value, goal, keep=lambda r: True):
        rows = [r for r in ours if r.get("kind") == kind and keep(r)]
        if rows:
            worst = min(rows, key=value)
            below = sum(value(r) < goal for r in rows)
            out.append((title, f"worst {worst['name']} ({worst['backend']}) {value(worst):.2f}; "
                               f"{below} of {len(rows)} below", below == 0))

    group("GEMM-like int8 kernels (linear >= 128 rows, conv 3x3, pointwise, stem) >= 0.7 of the compute roof",
          "gemm", of_compute, 0.7)
    group("depthwise >= 0.2 of the compute roof", "depthwise", of_compute, 0.2)
    group(f"memory-bound kernels on tensors >= {MEMORY_BOUND_MB} MiB >= 0.5 of copy bandwidth", "memory",
          lambda r: r["gbps"] / roof_of(r, "copy_gbps"), 0.5,
          lambda r: r.get("largest_tensor_bytes", 0) >= MEMORY_BOUND_MB * 2**20)
    group("batch-1 linear: weights streamed at >= 0.5 of copy bandwidth", "gemv",
          lambda r: r["gbps"] / roof_of(r, "copy_gbps"), 0.5)
    int4 = [r for r in rs if r["suite"] == "kernels" and r["backend"].startswith("vulkan")
            and r["dtype"] in ("int4", "8da4w") and r.get("kind") == "gemv"]
    if int4:
        worst = min(int4, key=lambda r: r["gbps"] / roof_of(r, "copy_gbps"))
        frac = worst["gbps"] / roof_of(worst, "copy_gbps")
        out.append(("int4 batch-1 linear: weights streamed at >= 0.5 of copy bandwidth",
                    f"worst {worst['name']} {worst['dtype']} ({worst['backend']}) {frac:.2f}", frac >= 0.5))
    for model, goal in (("mobilenet_v2", 1.25), ("resnet18", 3.0)):
        mine, peer = _find(rs, model, "vulkan", "int8"), _find(rs, model, "torch-cpu", "fp32")
        if mine and peer:
            ratio = mine["median_ms"] / peer["median_ms"]
            out.append((f"{model} int8 on Vulkan <= {goal} x torch fp32 CPU latency",
                        f"{mine['median_ms']:.1f} ms vs {peer['median_ms']:.1f} ms = {ratio:.2f} x", ratio <= goal))
    mb = _find(rs, "mobilenet_v2", "vulkan", "int8")
    if mb and "weights_ratio" in mb:
        out.append(("MobileNetV2 int8 weights <= 0.27 x fp32 state dict", f"{mb['weights_ratio']:.3f}",
                    mb["weights_ratio"] <= 0.27))
    return out


def _find(records, name, backend, dtype):
    return next((r for r in records if r["name"] == name and r["backend"] == backend and r["dtype"] == dtype), None)
