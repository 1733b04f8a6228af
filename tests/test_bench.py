"""`vkq bench --quick` on every test device: each suite runs and gives sane records (fields
present, numbers finite and positive, outputs that agree with torch). No timing is asserted:
the machine is shared, and the smoke test is about the benchmark code, not the speed."""
import json
import math

import torch

from vkq import bench
from vkq.cli import main

FIELDS = ("suite", "name", "shape", "dtype", "backend", "device", "median_ms", "p90_ms", "gops", "roofline_fraction")


def positive(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_quick_run(device, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    assert main(["bench", "all", "--quick", "--device", str(device.info.index), "--json", str(out),
                 "--plot", str(png), "--no-progress"]) == 0
    records = json.loads(out.read_text())
    for r in records:
        assert set(FIELDS) <= set(r), r
        assert positive(r["median_ms"]) and positive(r["p90_ms"]), r
        assert r["gops"] is None or positive(r["gops"]), r
        assert r["roofline_fraction"] is None or positive(r["roofline_fraction"]), r
    assert {r["suite"] for r in records} == {"roofline", "kernels", "models"}

    roof = {r["name"]: r for r in records if r["suite"] == "roofline"}
    assert {"fp32_gflops", "int32_gops", "copy_gbps", "dispatch_ms", "round_trip_ms"} <= set(roof)
    assert all(roof[k]["device"] == device.info.name for k in roof)

    kernels = [r for r in records if r["suite"] == "kernels"]
    for family, name, _ in bench.kernel_cases(quick=True):
        rows = {(r["backend"], r["dtype"]): r for r in kernels if r["name"] == name}
        ours = rows[("vulkan", "int8")]
        assert ours["timing"] == "gpu" and positive(ours["gops"]) and positive(ours["roofline_fraction"]), ours
        assert ("torch-cpu", "fp32") in rows and ("torch-cpu", "int8") in rows, (name, sorted(rows))
        if family in ("add", "pool"):
            assert positive(ours["gbps"])
        if family in ("linear", "conv") and bench.ncnn_gpu_index(device)[0] is not None:
            assert ("ncnn-vulkan", "fp32") in rows, (name, sorted(rows))
    fp32 = [r for r in kernels if r["backend"] == "vulkan" and r["dtype"] == "fp32"]
    assert {r["kernel"] for r in fp32} == {"linear_float W_F32", "bench_conv2d_f32"}

    models = [r for r in records if r["suite"] == "models"]
    for name in {r["name"] for r in models}:
        rows = {(r["backend"], r["dtype"]): r for r in models if r["name"] == name}
        ours = rows[("vulkan", "int8")]
        for key in ("device_bytes", "arena_bytes", "constant_bytes", "vkq_file_bytes", "fp32_state_dict_bytes",
                    "weights_ratio", "gpu_ms", "dispatches"):
            assert positive(ours[key]), (key, ours)
        assert ours["device_bytes"] > ours["arena_bytes"]
        assert ours["cosine_vs_fp32"] > 0.98, ours
        assert ("torch-cpu", "fp32") in rows and ("torch-cpu", "int8") in rows
        for (backend, dtype), r in rows.items():
            if backend.startswith("ncnn"):   # the same float model in ncnn: the same numbers
                assert r["cosine_vs_fp32"] > 0.9999, r
    assert len(models) >= 2 * 3

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_repeats():
    assert bench._fit_repeats(1e6, 10, 8.0) == 10          # 1 ms a run: all of them
    assert bench._fit_repeats(2e9, 10, 8.0) == 4           # 2 s a run: what fits in 8 s
    assert bench._fit_repeats(60e9, 10, 8.0) == 3          # never fewer than 3
    assert bench._fit_repeats(60e9, 2, 8.0) == 2           # nor more than asked


def test_to_ncnn_writes_splits_and_fuses():
    """The ncnn writer folds BN and fuses ReLU6 into the conv, gives a blob read twice a Split,
    and counts layers and blobs right (no ncnn needed)."""
    model = bench._tiny_mobilenet()
    param, weights, out = bench.to_ncnn(model, (3, 32, 32))
    lines = param.splitlines()
    assert lines[0] == "7767517"
    n_layers, n_blobs = map(int, lines[1].split())
    body = [line.split() for line in lines[2:]]
    assert len(body) == n_layers and sum(int(b[3]) for b in body) == n_blobs
    kinds = [b[0] for b in body]
    assert "BatchNorm" not in kinds and "Clip" not in kinds        # folded, fused
    assert kinds.count("Split") == 1 and kinds.count("BinaryOp") == 1
    assert body[-1][0] == "InnerProduct" and out == body[-1][1]
    # each conv and linear: a 4-byte tag, the weight, a bias per output (BN folded in)
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(weights) == sum(4 + 4 * m.weight.numel() + 4 * m.weight.shape[0] for m in layers)


def test_targets_from_records():
    rec = lambda name, backend, dtype, **kw: {"name": name, "backend": backend, "dtype": dtype, **kw}  # noqa: E731
    records = [rec("linear 256x1024x1024", "vulkan", "int8", gops=16.0),
               rec("resnet18 conv3x3 64->64 @56", "vulkan", "int8", gops=12.0),
               rec("mobilenet_v2", "vulkan", "int8", median_ms=90.0, weights_ratio=0.26),
               rec("mobilenet_v2", "ncnn-vulkan", "fp32", median_ms=900.0)]
    got = {what: met for what, _, met in bench.targets(records)}
    assert got == {"int8 linear M=256 K=N=1024 >= 15 GOP/s": True, "int8 conv 3x3 64->64 @56 >= 15 GOP/s": False,
                   "MobileNetV2 int8 Vulkan faster than ncnn fp32 Vulkan": True,
                   "MobileNetV2 int8 weights <= 0.27 x fp32 state dict": True}
