"""`vkq bench --quick` on every test device: each suite runs and gives sane records (fields
present, numbers finite and positive, the roofline model's fields consistent with each other
and with the roofline measured in the same run, outputs that agree with torch). No timing is
asserted: the machine is shared, and the smoke test is about the benchmark code, not the speed."""
import json
import math
import sys

import pytest
import torch

from vkq import bench, packing
from vkq.cli import main


def positive(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_quick_run(device, tmp_path, capfd):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    assert main(["bench", "all", "--quick", "--device", str(device.info.index), "--json", str(out),
                 "--plot", str(png), "--no-progress"]) == 0
    printed, err = capfd.readouterr()
    sys.stdout.write(printed)      # back into the capture: the validation guard (conftest) reads it too
    sys.stderr.write(err)
    for header in ("op/B", "roof GOP/s", "of roof", "GPU ms", "eval ms", "host ms", "dispatches", "barriers"):
        assert header in printed, header
    records = json.loads(out.read_text())
    for r in records:
        assert set(bench.FIELDS) <= set(r), r
        assert positive(r["median_ms"]) and positive(r["p90_ms"]), r
        for k in ("gops", "intensity", "roof_gops", "roofline_fraction"):
            assert r[k] is None or positive(r[k]), (k, r)
    assert {r["suite"] for r in records} == {"roofline", "kernels", "models", "lm"}
    lm = {(r["name"], r["backend"]): r for r in records if r["suite"] == "lm"}      # (a tiny random Llama)
    for backend in ("vkq int8 (Vulkan)", "torch fp32 CPU", "torch int8 CPU"):
        assert positive(lm[("prefill", backend)]["tok_s"]) and positive(lm[("decode@20", backend)]["tok_s"])
    step = lm[("decode@32", "vkq int8 (Vulkan)")]
    assert step["dispatches"] > 0 and step["submits"] == 1 and positive(step["bandwidth_fraction"]), step
    acc = lm[("accuracy", "vkq int8 (Vulkan)")]
    assert 0 <= acc["top1_agreement"] <= 1 and positive(acc["perplexity"]) and positive(acc["perplexity_fp32"])
    assert "text generation (tok/s)" in printed

    roof_rows = {r["name"]: r for r in records if r["suite"] == "roofline"}
    assert {"fp32_gflops", "int32_gops", "copy_gbps", "dispatch_ms", "round_trip_ms", "chain_dispatch_ms"} <= set(roof_rows)
    assert roof_rows["copy_gbps"]["texel_variant"] is device.texel_loads   # the kernels' own loads
    from vkq.bench.roofline import ACCUMULATORS
    for k in ("fp32_gflops", "int32_gops"):   # the best of the accumulator counts is the roof
        assert roof_rows[k]["accumulators"] in ACCUMULATORS and f"x{roof_rows[k]['accumulators']}x" in roof_rows[k]["shape"]
    chain = roof_rows["chain_dispatch_ms"]["median_ms"]
    for r in records:      # a model call's dispatches at that cost each
        if r["suite"] == "models" and r["backend"] == "vulkan":
            assert r["dispatch_cost_ms"] == pytest.approx(r["dispatches"] * chain, rel=1e-9) and r["dispatches"] > 0, r
    # vkq and torch fp32, the target's pair, timed call for call
    pairs = [(r["backend"], r.get("paired_with")) for r in records if r["suite"] == "models" and r["dtype"] in ("fp32", "int8")
             and r["backend"] in ("vulkan", "torch-cpu")]
    assert ("vulkan", "torch-cpu fp32") in pairs and ("torch-cpu", "vulkan") in pairs, pairs
    assert all(roof_rows[k]["device"] == device.info.name for k in roof_rows)
    roof = {k: r["gops"] for k, r in roof_rows.items()}

    kernels = [r for r in records if r["suite"] == "kernels"]
    # the roofline model, on every record run on this Vulkan device
    for r in kernels:
        assert positive(r["intensity"]) and positive(r["gbps"]) and r["bytes_moved"] > 0, r
        # intensity = ops / bytes and gops = ops / time: the two agree on the ops
        assert r["intensity"] * r["bytes_moved"] == pytest.approx(r["gops"] * r["median_ms"] * 1e6, rel=1e-6), r
        if r["backend"] in ("vulkan", "vulkan-dot", "ncnn-vulkan"):
            # a Vulkan kernel is judged by the roofs sampled just before and after its repeats
            # (vkq.bench.roofline.RoofProbe; ncnn's wall-clock layers by the run's), and carries
            # the run-start judgement beside it
            here = {**roof, **r.get("roof_beside", {})}
            if r["backend"] != "ncnn-vulkan":
                assert set(r["roof_beside"]) == {"copy_gbps", r["roofline"]} and all(map(positive, r["roof_beside"].values())), r
                start = min(roof[r["roofline"]], r["intensity"] * roof["copy_gbps"])
                assert r["roof_gops_at_start"] == pytest.approx(start, rel=1e-9), r
                assert r["roofline_fraction_at_start"] == pytest.approx(r["gops"] / start, rel=1e-9), r
            want = min(here[r["roofline"]], r["intensity"] * here["copy_gbps"])
            assert r["roof_gops"] == pytest.approx(want, rel=1e-9), r
            assert r["roofline_fraction"] == pytest.approx(r["gops"] / r["roof_gops"], rel=1e-9), r
            assert r["bound"] == ("memory" if r["intensity"] * here["copy_gbps"] < here[r["roofline"]] else "compute")
            assert r["roofline"] == ("fp32_gflops" if r["dtype"] in ("fp32", "int8-weight-only", "int4") else
                                     "dot4_gops" if r.get("dot_variant") else "int32_gops"), r
            assert not r.get("dot_variant") or r["backend"] == "vulkan-dot", r
        else:   # CPU peers: no roof of theirs was measured
            assert r["roof_gops"] is None and r["roofline_fraction"] is None, r

    dot = "shaderIntegerDotProduct" in device.features_enabled
    assert ("dot4_gops" in roof) == dot
    for family, name, params in bench.kernel_cases(quick=True):
        rows = {(r["backend"], r["dtype"]): r for r in kernels if r["name"] == name}
        if family == "int4":    # linear_int4 once, linear_8da4w on each int8 path; no CPU peers
            assert {("vulkan", "int4"), ("vulkan", "8da4w")} <= set(rows) and \
                (("vulkan-dot", "8da4w") in rows) == dot, (name, sorted(rows))
            for r in rows.values():
                assert r["timing"] == "gpu" and positive(r["gops"]) and positive(r["roofline_fraction"]), r
                gemm = "_gemm" if params[0] > 4 else ""      # more than 4 rows: the tiled GEMM
                assert r["kernel"] in (f"linear_int4{gemm}", f"linear_rowq+linear_int4{gemm}"), r
            continue
        ours = rows[("vulkan", "int8")]
        assert ours["timing"] == "gpu" and positive(ours["gops"]) and positive(ours["roofline_fraction"]), ours
        assert ours["dot_product"] is False, ours
        # the int8 kernels read their inputs as texels only where the device takes texel loads
        # (the GEMMs and convs always then; quantize only on whole vec4 rows)
        assert ours["texel_variant"] is device.texel_loads or (family == "io" and device.texel_loads), ours
        assert ("torch-cpu", "fp32") in rows and ("torch-cpu", "int8") in rows, (name, sorted(rows))
        if family in ("linear", "conv"):
            # both paths of the integer dot product where the device has it, one where not
            assert (("vulkan-dot", "int8") in rows) == dot, (name, sorted(rows))
            if dot:
                assert rows[("vulkan-dot", "int8")]["dot_product"] is True
                if family == "linear":     # the dot-product path dispatches the DOT variant
                    assert rows[("vulkan-dot", "int8")]["dot_variant"] is True, name
            if bench.ncnn_gpu_index(device)[0] is not None:
                assert ("ncnn-vulkan", "fp32") in rows, (name, sorted(rows))
        else:
            # no dot-product variant; which roof binds depends on the measured roofline (the bound check above)
            assert ("vulkan-dot", "int8") not in rows, ours
        if family == "linear":   # bytes moved: packed x, w, y and the three per-channel tables, once
            m, k, n = params
            words = (packing.packed_size((m, k), "4H4W") + packing.packed_size((n, k), "4H4W")
                     + packing.packed_size((m, n), "4H4W") + 3 * n)
            assert ours["bytes_moved"] == 4 * words, ours
    fp32 = [r for r in kernels if r["backend"] == "vulkan" and r["dtype"] == "fp32"]
    assert {r["kernel"] for r in fp32} == {"linear_float W_F32", "bench_conv2d_f32"}

    models = [r for r in records if r["suite"] == "models"]
    for name in {r["name"] for r in models}:
        rows = {(r["backend"], r["dtype"]): r for r in models if r["name"] == name}
        ours = rows[("vulkan", "int8")]
        for key in ("device_bytes", "arena_bytes", "constant_bytes", "vkq_file_bytes", "fp32_state_dict_bytes",
                    "weights_ratio", "gpu_ms", "eval_ms", "dispatches", "sequences"):
            assert positive(ours[key]), (key, ours)
        assert ours["host_ms"] >= 0 and ours["barriers"] is None or ours["barriers"] >= 0, ours
        assert ours["device_bytes"] > ours["arena_bytes"]
        assert ours["cosine_vs_fp32"] > 0.98, ours
        assert ("torch-cpu", "fp32") in rows and ("torch-cpu", "int8") in rows
        for (backend, dtype), r in rows.items():
            assert r["vs_torch_fp32"] == pytest.approx(r["median_ms"] / rows[("torch-cpu", "fp32")]["median_ms"])
            if backend.startswith("ncnn"):   # the same float model in ncnn: the same numbers
                assert r["cosine_vs_fp32"] > 0.9999, r
    assert len(models) >= 2 * 3

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_swin_t_is_an_opt_in_model(device, tmp_path, capfd):
    """--models swin_t times a windowed-attention transformer beside torch (no ncnn peer: to_ncnn
    writes CNNs only); the default suite stays the two CNNs of the targets."""
    from vkq import zoo
    try:
        zoo.import_torchvision()
    except ModuleNotFoundError as e:
        pytest.skip(f"torchvision is not installed ({e})")
    assert "swin_t" in bench.model_cases(True) and "swin_t" not in bench.DEFAULT_MODELS
    out = tmp_path / "bench.json"
    assert main(["bench", "models", "--quick", "--device", str(device.info.index), "--models", "swin_t",
                 "--json", str(out), "--no-progress"]) == 0
    printed, err = capfd.readouterr()
    sys.stdout.write(printed)      # back into the capture: the validation guard (conftest) reads it too
    sys.stderr.write(err)
    rows = [r for r in json.loads(out.read_text()) if r["suite"] == "models"]
    assert {(r["backend"], r["dtype"]) for r in rows} >= {("vulkan", "int8"), ("torch-cpu", "fp32")}
    assert not any(r["backend"].startswith("ncnn") for r in rows), rows
    (vk,) = [r for r in rows if r["backend"] == "vulkan"]
    assert vk["name"] == "swin_t (tiny)" and positive(vk["median_ms"]) and vk["cosine_vs_fp32"] >= 0.99, vk


def test_roofline_model():
    """attainable roof = min(compute roof, intensity x bandwidth); fraction against it."""
    roof = {"int32_gops": 100.0, "fp32_gflops": 50.0, "copy_gbps": 4.0}
    assert bench.attainable(roof, 1.0, "int32_gops") == (4.0, "memory", "int32_gops")
    assert bench.attainable(roof, 30.0, "int32_gops") == (100.0, "compute", "int32_gops")
    assert bench.attainable(roof, 30.0, "fp32_gflops") == (50.0, "compute", "fp32_gflops")
    assert bench.attainable(roof, 30.0, "dot4_gops") == (100.0, "compute", "int32_gops")  # not measured: int32
    j = bench.judge(roof, ops=2e9, nbytes=1e9, gops=2.0, compute="int32_gops")   # 2 op/B: 8 GOP/s at best
    assert j == {"intensity": 2.0, "roof_gops": 8.0, "roofline_fraction": 0.25, "bound": "memory",
                 "roofline": "int32_gops", "bytes_moved": 10**9}


def test_fit_repeats():
    assert bench.fit_repeats(1e6, 10, 8.0) == 10          # 1 ms a run: all of them
    assert bench.fit_repeats(2e9, 10, 8.0) == 4           # 2 s a run: what fits in 8 s
    assert bench.fit_repeats(60e9, 10, 8.0) == 3          # never fewer than 3
    assert bench.fit_repeats(60e9, 2, 8.0) == 2           # nor more than asked


def test_paired_calls_settle_before_each_vulkan_call(monkeypatch):
    """paired_wall_times alternates a, b, a, b (warm-up included) and, settled, pauses before
    every a (the Vulkan call: a CPU peer's spinning threads would slow it), never before a b;
    unsettled it never pauses. Each call is timed once."""
    from vkq.bench import timing
    log = []
    monkeypatch.setattr(timing, "settle", lambda: log.append("pause"))
    a, b = timing.paired_wall_times(lambda: log.append("a"), lambda: log.append("b"), repeats=3, warmup=2)
    assert len(a) == len(b) == 3
    assert log == ["pause", "a", "b"] * 5
    log.clear()
    timing.paired_wall_times(lambda: log.append("a"), lambda: log.append("b"), repeats=3, warmup=1, settled=False)
    assert log == ["a", "b"] * 4


def test_settle_waits_until_the_other_threads_are_idle(monkeypatch):
    """settle() polls the other threads until none runs (not a fixed pause: an idle machine
    wakes slowly), gives up after its limit, and sleeps the limit where threads cannot be read."""
    from vkq.bench import timing
    monkeypatch.setattr(timing, "_POLL_S", 0.0)
    reads = iter([2, 1, 1, 0, 7])
    monkeypatch.setattr(timing, "busy_threads", lambda: next(reads))
    assert timing.settle(5.0) < 1.0
    assert next(reads) == 7                             # stopped at the first read of 0
    monkeypatch.setattr(timing, "busy_threads", lambda: 1)
    assert 0.05 <= timing.settle(0.05) < 1.0            # spinning forever: the limit
    monkeypatch.setattr(timing, "busy_threads", lambda: None)
    assert 0.05 <= timing.settle(0.05) < 1.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_busy_threads_sees_a_thread_running_outside_the_gil():
    """A thread hashing (C code that releases the GIL, as a BLAS or OpenMP thread runs) reads as
    running while it works; once it and the process's other threads are idle, none does."""
    import hashlib
    import threading
    import time

    from vkq.bench import timing
    stop, data = threading.Event(), b"x" * (8 << 20)

    def spin():
        while not stop.is_set():
            hashlib.sha256(data).digest()
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        seen = []
        for _ in range(40):
            seen.append(timing.busy_threads())
            time.sleep(0.002)
    finally:
        stop.set()
        worker.join()
    assert max(seen) >= 1
    timing.settle(5.0)
    assert timing.busy_threads() == 0


def test_roofs_are_sampled_beside_each_repeat(monkeypatch):
    """beside() runs the kernel twice (the first untimed: caches warm again after the roofs'
    copy) and then each roof once, repeat by repeat, warm-up included; the kernel's times are
    the timed runs' and each roof is the median of its samples (amount / ns)."""
    from vkq.bench import roofline, timing
    log = []
    monkeypatch.setattr(timing, "settle", lambda: log.append("pause"))
    monkeypatch.setattr(roofline, "settle", lambda: log.append("pause"))

    class Rec:
        def __init__(self, name, times):
            self.name, self.times, self.runs = name, list(times), 0

        def run(self):
            log.append(self.name)
            self.runs += 1

        def dispatch_times_ns(self):
            return [self.times[(self.runs - 1) % len(self.times)]]

    kernel = Rec("k", [5.0, 7.0])                       # untimed runs read 5, timed 7
    roofs = {"int32_gops": (Rec("int32", [10.0, 20.0, 40.0]), 100.0), "copy_gbps": (Rec("copy", [4.0]), 8.0)}

    class Device:
        def record(self, steps, timestamps):
            assert steps == ["step"] and timestamps
            return kernel

    class Probe:
        shaders = dict.fromkeys(roofs)

        def recording(self, key):
            return roofs[key]
    times, local = roofline.beside(Probe(), ("copy_gbps", "int32_gops", "fp32_gflops"), Device(), ["step"],
                                   repeats=3, warmup=1, budget_s=None)
    assert times == [7.0] * 3
    assert log == ["pause"] + ["k", "k", "copy", "int32"] * 4
    # int32's samples (warm-up first): 10, 20, 40, 10 ns -> 5, 2.5, 10 GOP/s after the warm-up
    assert local == {"copy_gbps": 2.0, "int32_gops": 5.0}      # fp32 is not in the probe: not sampled


def test_compiled_models_are_keyed_by_their_weights():
    """The model suite compiles a case once per process: a case rebuilt with other weights is
    another program (else its outputs were compared with the new model's)."""
    from vkq.bench.models import _weights_digest
    a, b, c = bench.tiny_mobilenet(), bench.tiny_mobilenet(), bench.tiny_mobilenet()
    with torch.no_grad():
        c.classifier.bias[3] += 2.0 ** -20       # one weight, one step of its mantissa
    assert _weights_digest(a) == _weights_digest(b) != _weights_digest(c)


def test_to_ncnn_writes_splits_and_fuses():
    """The ncnn writer folds BN and fuses ReLU6 into the conv, gives a blob read twice a Split,
    and counts layers and blobs right (no ncnn needed)."""
    model = bench.tiny_mobilenet()
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
    roof = [{"suite": "roofline", "name": "int32_gops", "backend": "vulkan", "dtype": "int32", "gops": 100.0},
            {"suite": "roofline", "name": "copy_gbps", "backend": "vulkan", "dtype": "int32", "gops": 4.0}]

    def kern(name, kind, gops, backend="vulkan", **kw):
        return {"suite": "kernels", "name": name, "backend": backend, "dtype": "int8", "kind": kind, "gops": gops,
                "roofline": "int32_gops", **kw}

    def model(name, backend, dtype, ms, **kw):
        return {"suite": "models", "name": name, "backend": backend, "dtype": dtype, "median_ms": ms, **kw}
    records = roof + [
        kern("linear 256x1024x1024", "gemm", 75.0), kern("linear 256x1024x1024", "gemm", 60.0, "vulkan-dot"),
        kern("dw3x3", "depthwise", 25.0),
        kern("add big", "memory", 1.0, gbps=2.5, largest_tensor_bytes=4 << 20),
        kern("add small", "memory", 0.1, gbps=0.1, largest_tensor_bytes=1 << 10),   # too small to count
        kern("linear 1x4096x4096", "gemv", 1.0, gbps=1.9),
        model("mobilenet_v2", "vulkan", "int8", 12.0, weights_ratio=0.24), model("mobilenet_v2", "torch-cpu", "fp32", 10.0),
        model("resnet18", "vulkan", "int8", 40.0), model("resnet18", "torch-cpu", "fp32", 10.0)]
    found = bench.targets(records)
    assert len(found) == 7

    def target(word):
        return next((text, met) for what, text, met in found if word in what)
    text, met = target("GEMM-like")
    assert not met and "0.60" in text and "1 of 2 below" in text      # the dot path's 0.6 is below 0.7
    assert target("depthwise")[1]                                       # 25 / 100 >= 0.2
    assert target("memory-bound") == ("worst add big (vulkan) 0.62; 0 of 1 below", True)   # not the small add
    assert not target("batch-1")[1]                                     # 1.9 / 4 < 0.5
    assert target("mobilenet_v2")[1] and not target("resnet18")[1]      # 1.2 x and 4 x
    assert target("state dict")[1]
    # a record carrying the roofs sampled beside it is judged by those, not the run's start
    records[2 + 5]["roof_beside"] = {"copy_gbps": 3.0, "int32_gops": 100.0}          # the gemv: 1.9 / 3
    records[2 + 2]["roof_beside"] = {"copy_gbps": 3.0, "int32_gops": 150.0}          # the depthwise: 25 / 150
    found = bench.targets(records)
    assert target("batch-1") == ("worst linear 1x4096x4096 (vulkan) 0.63; 0 of 1 below", True)
    assert not target("depthwise")[1]
