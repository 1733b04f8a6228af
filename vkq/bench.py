"""Benchmarks: the device's roofline, per-kernel GPU times, whole models — with peers
measured in the same run, because a shared machine drifts. `vkq bench` runs them:

    vkq bench [roofline|kernels|models|all] [--device D] [--quick] [--json PATH] [--plot PATH.png]

Every run measures the roofline first (fp32 FMA GFLOP/s, int32 MAD GOP/s, copy GB/s, the fixed
costs of a dispatch and of a round trip), then the suites:

  kernels  every kernel family on real layer shapes (linear, conv, add, pools): vkq's int8
           kernel (GPU time from Vulkan timestamps), vkq's own fp32 shader for the same shape
           where one exists (shaders/bench_*), and in the same run torch fp32 and torch int8
           (quantized engine x86) on the CPU, and ncnn fp32 on the same Vulkan device
  models   end-to-end wall clock per call and device memory: vkq int8 on Vulkan, torch fp32 and
           int8 (FX, x86) on the CPU, ncnn fp32 on the same Vulkan device and on the CPU

Records are plain dicts, one per measurement:
    {suite, name, shape, dtype, backend, device, median_ms, p90_ms, gops, roofline_fraction}
plus extras (timing: "gpu" | "wall", kernel, gbps, memory figures, ...). GPU times are Vulkan
timestamps around each dispatch (warm-up excluded, median over repeats); wall-clock times are
time.perf_counter around whole calls. GOP/s counts 2 * multiply-adds (memory-bound kernels:
one op per element or window tap). roofline_fraction: int8 kernels against the int32 MAD
roofline (those that multiply-add in fp32, conv2d_general and conv2d_pointwise, against fp32
FMA; the record's "roofline" says which), fp32 ones against fp32 FMA, memory-bound ones (add,
pools) against copy bandwidth; absent for CPU peers and whole models.
"""
from __future__ import annotations

import json
import math
import os
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .device import Device, get_device, grid_1d

CPU_THREADS = 2


@dataclass
class Record:
    suite: str
    name: str
    shape: str
    dtype: str
    backend: str
    device: str
    median_ms: float
    p90_ms: float
    gops: float | None = None
    roofline_fraction: float | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("suite", "name", "shape", "dtype", "backend", "device",
                                           "median_ms", "p90_ms", "gops", "roofline_fraction")}
        d.update(self.extra)
        return d


def stats_ms(times_ns) -> tuple[float, float]:
    t = np.asarray(times_ns, dtype=np.float64) / 1e6
    return float(np.median(t)), float(np.percentile(t, 90))


def _fit_repeats(last_ns: float, repeats: int, budget_s: float | None) -> int:
    """Fewer repeats (at least 3) when repeats runs of last_ns would exceed budget_s."""
    if budget_s is None or last_ns <= 0:
        return repeats
    return max(min(3, repeats), min(repeats, int(budget_s * 1e9 / last_ns)))


def _warm(last_ns: float, budget_s: float | None) -> bool:
    """Another warm-up run is worth it unless one run takes a quarter of the budget."""
    return budget_s is None or last_ns < budget_s * 1e9 / 4


def gpu_times(device: Device, steps, repeats: int = 10, warmup: int = 2, budget_s: float | None = None) -> list[float]:
    """Per-repeat GPU time (ns) of `steps` recorded once with timestamps: the sum of the
    dispatches' times. budget_s caps the repeats (at least 3) by the last warm-up's time."""
    rec = device.record(steps, timestamps=True)
    last = 0.0
    for i in range(max(1, warmup)):
        if i and not _warm(last, budget_s):
            break
        rec.run()
        last = sum(rec.dispatch_times_ns())
    out = []
    for _ in range(_fit_repeats(last, repeats, budget_s)):
        rec.run()
        out.append(sum(rec.dispatch_times_ns()))
    return out


def wall_times(fn, repeats: int = 10, warmup: int = 2, budget_s: float | None = None) -> list[float]:
    """Per-call wall-clock time (ns) of fn(); budget_s caps the repeats as in gpu_times."""
    last = 0.0
    for i in range(max(1, warmup)):
        if i and not _warm(last, budget_s):
            break
        t0 = time.perf_counter_ns()
        fn()
        last = time.perf_counter_ns() - t0
    out = []
    for _ in range(_fit_repeats(last, repeats, budget_s)):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


# -- roofline -------------------------------------------------------------------------
def roofline(device: Device, quick: bool = False) -> dict:
    """What the device can do at all, from synthetic shaders (shaders/bench_roofline.comp):
    fp32 multiply-add GFLOP/s, int32 multiply-add GOP/s (2 ops each), ivec4 copy GB/s
    (read + write), each from the best of the repeats (a peak; on a shared machine the median
    drifts with the load), and the fixed costs (median wall clock) of one dispatch and of one
    host<->device round trip."""
    name = device.info.name
    local = min(64, device.info.max_workgroup_invocations)
    n = 2048 if quick else 16384
    iters = 32 if quick else 256
    repeats = 3 if quick else 10
    src = device.buffer(np.random.default_rng(0).integers(1, 100, n * 4).astype(np.int32))
    dst = device.buffer(size=n * 4, host_visible=False)
    out = {"device": name}
    records = []
    for key, define, dtype in (("fp32_gflops", "FMA_F32", "fp32"), ("int32_gops", "MAD_I32", "int32")):
        d = device.dispatch("bench_roofline", [src, dst], grid_1d(n, local), local=(local,), spec=(iters,),
                            push=(n,), defines={define: 1})
        ops = n * 4 * 8 * iters * 2
        times = gpu_times(device, [d], repeats)
        med, p90 = stats_ms(times)
        out[key] = ops / min(times)
        records.append(Record("roofline", key, f"{n}x4x8x{iters}", dtype, "vulkan", name, med, p90, out[key], 1.0,
                              {"timing": "gpu", "min_ms": min(times) / 1e6, "gops_from": "best of repeats"}))
    words = (1 << 18) if quick else (1 << 22)   # ivec4s: 4 MiB / 64 MiB
    a = device.buffer(size=words * 4, host_visible=False)
    b = device.buffer(size=words * 4, host_visible=False)
    per_invocation = 16
    d = device.dispatch("bench_roofline", [a, b], grid_1d(words // per_invocation, local), local=(local,),
                        spec=(per_invocation,), push=(words,), defines={"COPY": 1})
    times = gpu_times(device, [d], repeats)
    med, p90 = stats_ms(times)
    out["copy_gbps"] = words * 16 * 2 / min(times)
    records.append(Record("roofline", "copy_gbps", f"{words * 16 >> 20} MiB", "int32", "vulkan", name, med, p90,
                          out["copy_gbps"], 1.0, {"timing": "gpu", "gbps": out["copy_gbps"], "min_ms": min(times) / 1e6,
                                                  "gops_from": "best of repeats"}))
    # fixed costs, wall-clock: one tiny dispatch; one upload + dispatch + download
    tiny = device.dispatch("bench_roofline", [src, dst], (1, 1, 1), local=(1,), spec=(1,), push=(1,),
                           defines={"COPY": 1})
    rec = device.record([tiny])
    med, p90 = stats_ms(wall_times(rec.run, repeats * 3))
    out["dispatch_ms"] = med
    records.append(Record("roofline", "dispatch_ms", "1 invocation", "-", "vulkan", name, med, p90,
                          extra={"timing": "wall"}))
    io_buf = device.buffer(np.zeros(4, np.int32))
    rt = device.record([device.dispatch("bench_roofline", [io_buf, io_buf], (1, 1, 1), local=(1,), spec=(1,),
                                        push=(1,), defines={"COPY": 1})], upload=[io_buf], download=[io_buf])
    med, p90 = stats_ms(wall_times(rt.run, repeats * 3))
    out["round_trip_ms"] = med
    records.append(Record("roofline", "round_trip_ms", "16 B up + dispatch + 16 B down", "-", "vulkan", name,
                          med, p90, extra={"timing": "wall"}))
    out["records"] = records
    return out


# -- shared helpers -------------------------------------------------------------------
@dataclass
class Settings:
    """One benchmark run: the device, its roofline, and how hard to measure."""
    device: Device
    roof: dict
    quick: bool = False
    repeats: int = 10
    warmup: int = 2
    budget_s: float = 8.0          # per measurement: fewer repeats (at least 3) beyond it
    only: str | None = None        # run the cases whose name contains this
    notes: list = field(default_factory=list)   # what was skipped, and why
    load_avg: list = field(default_factory=list)  # 1-minute load average, start and end
    progress: bool = True                         # progress bars

    @property
    def name(self) -> str:
        return self.device.info.name


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        model = "cpu"
    return f"{model} ({CPU_THREADS} threads)"


def _torch_threads():
    import torch
    torch.set_num_threads(CPU_THREADS)
    return torch


def _quiet():
    """Keep the terminal for the table: torch's quantization deprecations, torchao's notices."""
    import logging
    import warnings
    warnings.filterwarnings("ignore", message=".*quantized tensor creation functions")
    warnings.filterwarnings("ignore", message=".*reduce_range will be deprecated")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("torchao", "torch.utils._pytree", "torch._export", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)


# int8 kernels whose multiply-adds are fp32 FMAs (exact for int8 products in short partial
# sums; see conv2d_general.comp): their ceiling is the fp32 roofline, not int32 MAD.
FP32_ARITHMETIC = {"conv2d_general", "conv2d_pointwise"}


def _gpu_record(s: Settings, suite, name, shape, dtype, steps, ops, roof_key, extra=None, bytes_moved=None):
    """Time `steps` by Vulkan timestamps; GOP/s and the fraction of the roofline `roof_key`
    (int32_gops, fp32_gflops or copy_gbps; FP32_ARITHMETIC kernels against fp32_gflops)."""
    times = gpu_times(s.device, steps, s.repeats, s.warmup, s.budget_s)
    med, p90 = stats_ms(times)
    if (extra or {}).get("kernel") in FP32_ARITHMETIC:
        roof_key = "fp32_gflops"
    extra = {"timing": "gpu", "min_ms": min(times) / 1e6, "dispatches": len(steps), "roofline": roof_key,
             **(extra or {})}
    gops = ops / (med * 1e6)
    if roof_key == "copy_gbps":
        extra["gbps"] = bytes_moved / (med * 1e6)
        frac = extra["gbps"] / s.roof["copy_gbps"]
    else:
        frac = gops / s.roof[roof_key]
    return Record(suite, name, shape, dtype, "vulkan", s.name, med, p90, gops, frac, extra)


def _wall_record(s: Settings, suite, name, shape, dtype, backend, device, fn, ops, extra=None, bytes_moved=None):
    times = wall_times(fn, s.repeats, s.warmup, s.budget_s)
    med, p90 = stats_ms(times)
    extra = {"timing": "wall", "min_ms": min(times) / 1e6, **(extra or {})}
    if bytes_moved:
        extra["gbps"] = bytes_moved / (med * 1e6)
    return Record(suite, name, shape, dtype, backend, device, med, p90, ops / (med * 1e6) if ops else None,
                  None, extra)


def _executor_steps(device, program, inputs, verify: bool):
    """Build a one-program VulkanExecutor, run it once (checked bit for bit against the numpy
    reference when verify), and return its dispatches."""
    from .executor import VulkanExecutor, run_reference
    ex = VulkanExecutor(program, device)
    got = ex(*inputs)
    if verify:
        want = run_reference(program, *inputs)
        if not np.array_equal(got, want) and not (got.dtype.kind == "f" and np.allclose(got, want, 1e-3, 1e-3)):
            raise AssertionError(f"{program.nodes[0].op}: the Vulkan output differs from the reference")
    return [step for seg in ex.segments if seg[0] == "vulkan" for step in seg[1].steps]


VERIFY_MACS = 3e8    # check the int8 output against the numpy reference up to this size


# -- kernel cases ---------------------------------------------------------------------
# linear: (name, M, K, N). The seed study's K x N at M = 256, the square 1024, MiniLM at 128 tokens.
LINEAR = [("linear 256x256x512", 256, 256, 512),
          ("linear 256x1024x1024", 256, 1024, 1024),
          ("linear 256x1024x2048", 256, 1024, 2048),
          ("linear 256x2048x4096", 256, 2048, 4096),
          ("minilm qkv/out 128x384x384", 128, 384, 384),
          ("minilm ffn-up 128x384x1536", 128, 384, 1536),
          ("minilm ffn-down 128x1536x384", 128, 1536, 384)]
LINEAR_QUICK = [("linear 16x64x64", 16, 64, 64), ("minilm-like 8x32x96", 8, 32, 96)]
FLOAT_LINEAR = "minilm"   # cases whose name starts with this also run linear_dynamic / weight-only

# conv: name -> (N, C, H, W, OC, K, stride, pad, groups)
CONV = {"resnet18 conv3x3 64->64 @56": (1, 64, 56, 56, 64, 3, 1, 1, 1),
        "resnet18 stem 7x7 s2 3->64 @224": (1, 3, 224, 224, 64, 7, 2, 3, 1),
        "mobilenetv2 pw 16->96 @112": (1, 16, 112, 112, 96, 1, 1, 0, 1),
        "mobilenetv2 pw 96->24 @56": (1, 96, 56, 56, 24, 1, 1, 0, 1),
        "mobilenetv2 dw3x3 32 @112 s1": (1, 32, 112, 112, 32, 3, 1, 1, 32),
        "mobilenetv2 dw3x3 96 @112 s2": (1, 96, 112, 112, 96, 3, 2, 1, 96),
        "mobilenetv2 dw3x3 960 @7 s1": (1, 960, 7, 7, 960, 3, 1, 1, 960)}
CONV_QUICK = {"conv3x3 8->16 @12": (1, 8, 12, 12, 16, 3, 1, 1, 1),
              "pw 16->8 @10": (1, 16, 10, 10, 8, 1, 1, 0, 1),
              "dw3x3 16 @12 s2": (1, 16, 12, 12, 16, 3, 2, 1, 16)}

# memory-bound: name -> shape (add), or (kind, shape, kernel, stride, pad) (pools)
ADD = {"mobilenetv2 add 24 @56": (1, 24, 56, 56), "resnet18 add 64 @56": (1, 64, 56, 56)}
ADD_QUICK = {"add 8 @12": (1, 8, 12, 12)}
POOL = {"resnet18 maxpool 3x3 s2 64 @112": ("max", (1, 64, 112, 112), 3, 2, 1),
        "mobilenetv2 global avgpool 1280 @7": ("global", (1, 1280, 7, 7), 7, 1, 0),
        "resnet18 global avgpool 512 @7": ("global", (1, 512, 7, 7), 7, 1, 0)}
POOL_QUICK = {"maxpool 3x3 s2 8 @12": ("max", (1, 8, 12, 12), 3, 2, 1),
              "global avgpool 32 @5": ("global", (1, 32, 5, 5), 5, 1, 0)}


def kernel_cases(quick: bool) -> list[tuple[str, str, tuple]]:
    """(family, name, parameters) of every kernel case, in the order they run."""
    lin, conv, add, pool = (LINEAR_QUICK, CONV_QUICK, ADD_QUICK, POOL_QUICK) if quick else (LINEAR, CONV, ADD, POOL)
    return ([("linear", n, (m, k, nn)) for n, m, k, nn in lin] + [("conv", n, p) for n, p in conv.items()]
            + [("add", n, p) for n, p in add.items()] + [("pool", n, p) for n, p in pool.items()])


def kernels(s: Settings, progress: bool = True) -> list[Record]:
    """The kernel suite on s.device, with the CPU and ncnn peers in the same run."""
    run = {"linear": bench_linear, "conv": bench_conv, "add": bench_add, "pool": bench_pool}
    cases = [c for c in kernel_cases(s.quick) if not s.only or s.only in c[1] or s.only == c[0]]
    records = []
    for family, name, params in _progress(cases, "kernels", progress, key=lambda c: c[1]):
        records += run[family](s, name, params)
    return records


def _progress(items, desc, enabled, key=str):
    if not enabled:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        yield from items
        return
    bar = tqdm(items, desc=desc, leave=False)
    for item in bar:
        bar.set_postfix_str(key(item)[:40])
        yield item


# -- linear ---------------------------------------------------------------------------
class _LinearContext:
    """What an op's build() needs from vkq.executor.BuildContext, over buffers made here
    (for our fp32 GEMM, which is a shader variant, not a registered op)."""

    def __init__(self, device):
        self.device, self.uploads = device, []

    def const_buffer(self, array, dtype=None):
        buf = self.device.buffer(np.ascontiguousarray(array, dtype=dtype))
        self.uploads.append(buf)
        return buf


def _linear_data(m, k, n, rng):
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, n).astype(np.float32)
    b = rng.normal(0, 1, n).astype(np.float32)
    return w, ws, b


def linear_q8_program(m, k, n, rng):
    """A one-node linear_q8 program (int8 4H4W in and out) with random data, and its input."""
    from .ops.linear import linear_q8_params
    from .program import Node, Program, TensorSpec
    w, ws, b = _linear_data(m, k, n, rng)
    x_scale = 0.05
    out_scale = 3.0 * math.sqrt(k) * x_scale * 74 * 0.011 / 40    # keeps most outputs inside int8
    bias, mult, shift, qmin, qmax = linear_q8_params(x_scale, ws, out_scale, b, None, 3)
    tensors = {"x": TensorSpec((m, k), "int8", "4H4W"), "y": TensorSpec((m, n), "int8", "4H4W"),
               "w": TensorSpec((n, k), "int8", "4H4W"), "b": TensorSpec((n,), "int32"),
               "m": TensorSpec((n,), "int32"), "s": TensorSpec((n,), "int32")}
    node = Node("linear_q8", ["x", "w", "b", "m", "s"], ["y"], dict(x_zp=-2, out_zp=3, qmin=qmin, qmax=qmax))
    prog = Program(tensors, [node], ["x"], ["y"], {"w": w, "b": bias, "m": mult, "s": shift})
    return prog, rng.integers(-128, 128, (m, k)).astype(np.int8)


def linear_float_program(op, m, k, n, rng):
    """linear_dynamic / linear_weight_only: float x and y, int8 weights with per-channel scales."""
    from .program import Node, Program, TensorSpec
    w, ws, b = _linear_data(m, k, n, rng)
    tensors = {"x": TensorSpec((m, k)), "y": TensorSpec((m, n)), "w": TensorSpec((n, k), "int8", "4H4W"),
               "s": TensorSpec((n,)), "b": TensorSpec((n,))}
    prog = Program(tensors, [Node(op, ["x", "w", "s", "b"], ["y"])], ["x"], ["y"], {"w": w, "s": ws, "b": b})
    return prog, rng.normal(0, 1, (m, k)).astype(np.float32)


def linear_f32_steps(device, m, k, n, rng, verify: bool):
    """Our plain fp32 GEMM (shaders/linear_float.comp W_F32: linear_q8's tiling with float x and
    weights), checked against numpy within float rounding when verify."""
    from .ops import linear
    w, ws, b = _linear_data(m, k, n, rng)
    wf = w.astype(np.float32) * ws[:, None]
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    ctx = _LinearContext(device)
    bx, by = device.buffer(x), device.buffer(size=m * n, dtype=np.float32)
    step = linear.float_gemm(ctx, bx, m, k, wf, np.ones(n, np.float32), b, by)
    device.run([step], upload=ctx.uploads + [bx], download=[by])
    if verify:
        np.testing.assert_allclose(by.read().reshape(m, n), x.astype(np.float64) @ wf.T.astype(np.float64) + b,
                                   rtol=1e-3, atol=1e-3)
    return [step]


def bench_linear(s: Settings, name, mkn) -> list[Record]:
    m, k, n = mkn
    rng = np.random.default_rng(0)
    shape, ops = f"M{m} K{k} N{n}", 2 * m * k * n
    verify = m * k * n <= VERIFY_MACS
    prog, x = linear_q8_program(m, k, n, rng)
    steps = _executor_steps(s.device, prog, [x], verify)
    out = [_gpu_record(s, "kernels", name, shape, "int8", steps, ops, "int32_gops", {"kernel": "linear_q8"})]
    out.append(_gpu_record(s, "kernels", name, shape, "fp32", linear_f32_steps(s.device, m, k, n, rng, verify),
                           ops, "fp32_gflops", {"kernel": "linear_float W_F32"}))
    if name.startswith(FLOAT_LINEAR) or s.quick:
        for op, dtype in (("linear_dynamic", "int8-dynamic"), ("linear_weight_only", "int8-weight-only")):
            prog, xf = linear_float_program(op, m, k, n, rng)
            steps = _executor_steps(s.device, prog, [xf], verify)
            roof = "int32_gops" if op == "linear_dynamic" else "fp32_gflops"
            out.append(_gpu_record(s, "kernels", name, shape, dtype, steps, ops, roof, {"kernel": op}))
    out += torch_linear(s, name, shape, m, k, n, ops)
    out += ncnn_kernel(s, name, shape, ops, *ncnn_linear_layer(m, k, n, rng))
    return out


def torch_linear(s: Settings, name, shape, m, k, n, ops) -> list[Record]:
    """F.linear in fp32, and torch.ops.quantized.linear (x86 engine, prepacked per-channel int8
    weights, quint8 activations) on the CPU."""
    torch = _torch_threads()
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05, torch.randn(n, generator=g)
    cpu = cpu_name()
    with torch.inference_mode():
        out = [_wall_record(s, "kernels", name, shape, "fp32", "torch-cpu", cpu, lambda: F.linear(x, w, b), ops,
                            {"kernel": "F.linear"})]
        torch.backends.quantized.engine = "x86"
        wq = torch.quantize_per_channel(w, w.abs().amax(1) / 127, torch.zeros(n, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(wq, b)
        xq = torch.quantize_per_tensor(x, float(x.abs().max()) / 127, 128, torch.quint8)
        scale = float((x @ w.T).abs().max()) / 127
        out.append(_wall_record(s, "kernels", name, shape, "int8", "torch-cpu", cpu,
                                lambda: torch.ops.quantized.linear(xq, packed, scale, 128), ops,
                                {"kernel": "quantized.linear (x86)"}))
    return out


# -- conv -----------------------------------------------------------------------------
def conv_program(shape, rng):
    """A one-node conv2d_q8 program with random int8 data, its input, and its geometry."""
    from .ops import conv
    from .program import Node, Program, TensorSpec
    from .quant import quantize_multipliers
    n, c, h, w, oc, k, stride, pad, groups = shape
    g = conv.ConvGeometry.of((n, c, h, w), (oc, c // groups, k, k), (stride,) * 2, (pad,) * 2, (1, 1), groups)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    weight = rng.integers(-127, 128, (oc, c // groups, k, k)).astype(np.int8)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    m, s = quantize_multipliers(np.full(oc, 1.0 / (40 * np.sqrt(c // groups * k * k) * 64)))
    tensors = {"x": TensorSpec((n, c, h, w), "int8", "4W4C"), "y": TensorSpec((n, oc, g.oh, g.ow), "int8", "4W4C"),
               "w": TensorSpec(weight.shape, "int8", "4W4C"), "b": TensorSpec((oc,), "int32"),
               "m": TensorSpec((oc,), "int32"), "s": TensorSpec((oc,), "int32")}
    attrs = dict(stride=[stride] * 2, padding=[pad] * 2, dilation=[1, 1], groups=groups, x_zp=-7, out_zp=3,
                 qmin=-128, qmax=127)
    prog = Program(tensors, [Node("conv2d_q8", ["x", "w", "b", "m", "s"], ["y"], attrs)], ["x"], ["y"],
                   {"w": weight, "b": bias, "m": m, "s": s})
    return prog, x, g


def conv_macs(shape) -> int:
    n, c, h, w, oc, k, stride, pad, groups = shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return n * oc * oh * ow * (c // groups) * k * k


def conv_f32_steps(device, shape, rng, verify: bool):
    """The fp32 direct conv with conv2d_general's tiling (shaders/bench_conv2d_f32.comp: TOC 16,
    2x4 positions, stride 1, groups 1), checked against float64 numpy when verify."""
    from .ops import conv
    n, c, h, w, oc, k, stride, pad, groups = shape
    g = conv.ConvGeometry.of((n, c, h, w), (oc, c, k, k), (1, 1), (pad, pad), (1, 1), 1)
    toc, th, tw = 16, 2, 4
    G, defines, local = conv._lane_group(device)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    c4, tiles = g.c4, -(-oc // toc)
    xp = np.zeros((n, c4 * 4, h, w), np.float32)
    xp[:, :c] = x
    wp = np.zeros((tiles * toc, c4 * 4, k, k), np.float32)
    wp[:oc, :c] = weight
    # (t, o, c4, i, kh, kw) -> (t, c4, kh, kw, o, i)
    wp = wp.reshape(tiles, toc, c4, 4, k, k).transpose(0, 2, 4, 5, 1, 3).reshape(-1)
    bx = device.buffer(xp.reshape(n, c4, 4, h, w).transpose(0, 3, 4, 1, 2).reshape(-1))
    bw = device.buffer(np.concatenate([wp, np.zeros(G, np.float32)]))
    by = device.buffer(size=n * g.oh * g.ow * -(-oc // 4) * 4, dtype=np.float32)
    lane_groups = n * tiles * -(-(-(-g.oh // th) * -(-g.ow // tw)) // G)
    d = device.dispatch("bench_conv2d_f32", [bx, bw, by], grid_1d(lane_groups * G, local), local=(local,),
                        spec=(G, toc, th, tw, k, k), push=(np.array([n, c, h, w]), np.array([n, oc, g.oh, g.ow]), pad),
                        defines=defines)
    device.run([d], upload=[bx, bw], download=[by])
    if verify:
        got = by.read().reshape(n, g.oh, g.ow, -1)[..., :oc].transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got, _conv_f64(x, weight, pad), rtol=1e-4, atol=1e-3)
    return [d]


def _conv_f64(x, weight, pad):
    """float64 conv2d, stride 1, zero padding (numpy)."""
    n, c, h, w = x.shape
    oc, _, k, _ = weight.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    out = np.zeros((n, oc, oh, ow))
    for i in range(k):
        for j in range(k):
            out += np.einsum("oc,nchw->nohw", weight[:, :, i, j].astype(np.float64), xp[:, :, i:i + oh, j:j + ow])
    return out


def _conv_shape_str(p) -> str:
    n, c, h, w, oc, k, stride, pad, groups = p
    return f"{n}x{c}x{h}x{w} -> {oc} k{k} s{stride} p{pad} g{groups}"


def bench_conv(s: Settings, name, p) -> list[Record]:
    from .ops import conv
    rng = np.random.default_rng(0)
    shape, ops = _conv_shape_str(p), 2 * conv_macs(p)
    verify = conv_macs(p) <= VERIFY_MACS
    prog, x, g = conv_program(p, rng)
    steps = _executor_steps(s.device, prog, [x], verify)
    out = [_gpu_record(s, "kernels", name, shape, "int8", steps, ops, "int32_gops", {"kernel": conv.choose_kernel(g)})]
    n, c, h, w, oc, k, stride, pad, groups = p
    if stride == 1 and groups == 1:   # what bench_conv2d_f32 covers
        out.append(_gpu_record(s, "kernels", name, shape, "fp32", conv_f32_steps(s.device, p, rng, verify), ops,
                               "fp32_gflops", {"kernel": "bench_conv2d_f32"}))
    out += torch_conv(s, name, shape, p, ops)
    out += ncnn_kernel(s, name, shape, ops, *ncnn_conv_layer(p, rng))
    return out


def torch_conv(s: Settings, name, shape, p, ops) -> list[Record]:
    """F.conv2d in fp32, and torch.ao.nn.quantized.Conv2d (x86 engine, per-channel int8
    weights, quint8 activations) on the CPU."""
    torch = _torch_threads()
    import torch.ao.nn.quantized as nnq
    import torch.nn.functional as F
    n, c, h, w, oc, k, stride, pad, groups = p
    g = torch.Generator().manual_seed(0)
    x, wt, b = torch.randn(n, c, h, w, generator=g), torch.randn(oc, c // groups, k, k, generator=g) * 0.1, torch.zeros(oc)
    cpu = cpu_name()
    with torch.inference_mode():
        out = [_wall_record(s, "kernels", name, shape, "fp32", "torch-cpu", cpu,
                            lambda: F.conv2d(x, wt, b, stride, pad, 1, groups), ops, {"kernel": "F.conv2d"})]
        torch.backends.quantized.engine = "x86"
        qc = nnq.Conv2d(c, oc, k, stride, pad, groups=groups)
        qc.set_weight_bias(torch.quantize_per_channel(wt, wt.abs().amax((1, 2, 3)) / 127,
                                                      torch.zeros(oc, dtype=torch.long), 0, torch.qint8), b)
        qc.scale, qc.zero_point = 0.1, 128
        xq = torch.quantize_per_tensor(x, float(x.abs().max()) / 127, 128, torch.quint8)
        out.append(_wall_record(s, "kernels", name, shape, "int8", "torch-cpu", cpu, lambda: qc(xq), ops,
                                {"kernel": "quantized.Conv2d (x86)"}))
    return out


# -- add and pools (memory-bound) -----------------------------------------------------
def _packed_bytes(shape) -> int:
    from .program import TensorSpec
    return TensorSpec(tuple(shape), "int8", "4W4C").device_words() * 4


def bench_add(s: Settings, name, shape) -> list[Record]:
    """add_q8 on two int8 tensors of one shape: 2 reads + 1 write of the packed tensors."""
    from .ops.eltwise import add_q8_params
    from .program import Node, Program, TensorSpec
    rng = np.random.default_rng(0)
    spec = TensorSpec(tuple(shape), "int8", "4W4C")
    prog = Program({"a": spec, "b": spec, "y": spec},
                   [Node("add_q8", ["a", "b"], ["y"], add_q8_params(0.05, 3, 0.04, -5, 0.08, 1))], ["a", "b"], ["y"], {})
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    steps = _executor_steps(s.device, prog, [a, b], True)
    elems, moved = int(np.prod(shape)), 3 * _packed_bytes(shape)
    sh = "x".join(map(str, shape))
    out = [_gpu_record(s, "kernels", name, sh, "int8", steps, elems, "copy_gbps", {"kernel": "add_q8"}, moved)]
    torch = _torch_threads()
    cpu = cpu_name()
    with torch.inference_mode():
        x, y = torch.randn(*shape), torch.randn(*shape)
        out.append(_wall_record(s, "kernels", name, sh, "fp32", "torch-cpu", cpu, lambda: torch.add(x, y), elems,
                                {"kernel": "torch.add"}, 12 * elems))
        torch.backends.quantized.engine = "x86"
        qx, qy = (torch.quantize_per_tensor(t, 0.05, 128, torch.quint8) for t in (x, y))
        out.append(_wall_record(s, "kernels", name, sh, "int8", "torch-cpu", cpu,
                                lambda: torch.ops.quantized.add(qx, qy, 0.08, 128), elems,
                                {"kernel": "quantized.add (x86)"}, 3 * elems))
    return out


def bench_pool(s: Settings, name, p) -> list[Record]:
    """max_pool2d_q8 (k x k, stride, padding) or the global adaptive_avg_pool2d_q8: one read of
    the input and one write of the output; ops = window taps."""
    from .ops.pool import adaptive_avg_pool2d_params, max_pool2d_params, pool2d_output_shape
    from .program import Node, Program, TensorSpec
    kind, shape, k, stride, pad = p
    rng = np.random.default_rng(0)
    if kind == "max":
        attrs, op = max_pool2d_params(k, stride, pad), "max_pool2d_q8"
        out_shape = pool2d_output_shape(shape, k, stride, pad)
        taps = int(np.prod(out_shape)) * k * k
    else:
        attrs, op = adaptive_avg_pool2d_params(0.05, 3, 0.02, -1, shape[-2:], (1, 1)), "adaptive_avg_pool2d_q8"
        out_shape = (*shape[:2], 1, 1)
        taps = int(np.prod(shape))
    prog = Program({"x": TensorSpec(tuple(shape), "int8", "4W4C"), "y": TensorSpec(out_shape, "int8", "4W4C")},
                   [Node(op, ["x"], ["y"], attrs)], ["x"], ["y"], {})
    x = rng.integers(-128, 128, shape).astype(np.int8)
    steps = _executor_steps(s.device, prog, [x], True)
    moved = _packed_bytes(shape) + _packed_bytes(out_shape)
    sh = "x".join(map(str, shape)) + (f" k{k} s{stride} p{pad}" if kind == "max" else " -> 1x1")
    out = [_gpu_record(s, "kernels", name, sh, "int8", steps, taps, "copy_gbps", {"kernel": op}, moved)]
    torch = _torch_threads()
    import torch.nn.functional as F
    cpu = cpu_name()
    fn = (lambda t: F.max_pool2d(t, k, stride, pad)) if kind == "max" else (lambda t: F.adaptive_avg_pool2d(t, 1))
    elems_moved = int(np.prod(shape)) + int(np.prod(out_shape))
    with torch.inference_mode():
        xf = torch.randn(*shape)
        out.append(_wall_record(s, "kernels", name, sh, "fp32", "torch-cpu", cpu, lambda: fn(xf), taps,
                                {"kernel": "F.max_pool2d" if kind == "max" else "F.adaptive_avg_pool2d"},
                                4 * elems_moved))
        xq = torch.quantize_per_tensor(xf, 0.05, 128, torch.quint8)
        out.append(_wall_record(s, "kernels", name, sh, "int8", "torch-cpu", cpu, lambda: fn(xq), taps,
                                {"kernel": "quantized " + ("max_pool2d" if kind == "max" else "adaptive_avg_pool2d")},
                                elems_moved))
    return out


# -- ncnn: the peer on the same Vulkan device -----------------------------------------
# Networks are written in ncnn's own format (param text + weight bytes) from PyTorch modules:
# one layer for the kernel cases, a whole CNN for the models (to_ncnn). fp16 storage and
# arithmetic are switched off, so ncnn runs fp32 like our fp32 shaders and torch.
def _ncnn():
    """The ncnn module, or None when it is not installed. Its bundled OpenMP busy-waits
    unless OMP_WAIT_POLICY=passive, which distorts 2-thread timings of everything else."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import ncnn
    except ImportError:
        return None
    return ncnn


def _ncnn_gpu_count(ncnn) -> int:
    """ncnn.get_gpu_count(), with the device listing ncnn prints on first use kept off the terminal."""
    fd = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            return ncnn.get_gpu_count()
    finally:
        os.dup2(fd, 2)
        os.close(fd)


def ncnn_gpu_index(device: Device):
    """(ncnn's index of the same Vulkan device, or None, and why not)."""
    ncnn = _ncnn()
    if ncnn is None:
        return None, "ncnn is not installed (pip install ncnn)"
    for i in range(_ncnn_gpu_count(ncnn)):
        if ncnn.get_gpu_info(i).device_name() == device.info.name:
            return i, ""
    return None, f"ncnn does not see {device.info.name}"


class NcnnNet:
    """An ncnn network (param text, weight bytes) on ncnn's Vulkan device `gpu`, or on the CPU
    (gpu None) with CPU_THREADS threads; call it with one float32 array (C, H, W) or (H, W)."""

    def __init__(self, param: str, weights: bytes, out_blob: str, gpu=None):
        self._ncnn = ncnn = _ncnn()
        self.net, self.out = ncnn.Net(), out_blob
        opt = self.net.opt
        opt.use_vulkan_compute = gpu is not None
        opt.num_threads = CPU_THREADS
        for a in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic"):
            setattr(opt, a, False)
        if gpu is not None:
            self.net.set_vulkan_device(gpu)
        if self.net.load_param_mem(param) != 0:
            raise RuntimeError("ncnn rejected the network's param text")
        self._weights = weights            # the CPU path may point into it: keep it alive
        self.net.load_model_mem(weights)

    def __call__(self, x):
        ex = self.net.create_extractor()
        ex.input("in0", self._ncnn.Mat(np.ascontiguousarray(x, np.float32)))
        rc, y = ex.extract(self.out)
        if rc != 0:
            raise RuntimeError(f"ncnn extract failed ({rc})")
        return np.array(y)

    def close(self):
        self.net.clear()


def _ncnn_text(layers) -> str:
    """ncnn's param format: magic, layer and blob counts, one line a layer."""
    blobs = sum(len(outs) for _, _, _, outs, _ in layers)
    lines = ["7767517", f"{len(layers)} {blobs}"]
    lines += [f"{kind} {name} {len(ins)} {len(outs)} {' '.join(ins + outs)} {params}".rstrip()
              for kind, name, ins, outs, params in layers]
    return "\n".join(lines) + "\n"


def _ncnn_weights(*arrays, tagged=True) -> bytes:
    """A weight blob: a zero tag (= raw float32), then the data; biases go untagged."""
    data = b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in arrays)
    return (struct.pack("<I", 0) if tagged else b"") + data


RELU, RELU6 = "9=1", "9=3 -23310=2,0.000000e+00,6.000000e+00"   # fused activations


def _ncnn_conv(name, bottom, weight, bias, stride, pad, groups, act=""):
    """(layer, weight bytes) of a Convolution / ConvolutionDepthWise with bias."""
    oc, _, kh, kw = weight.shape
    kind = "ConvolutionDepthWise" if groups > 1 else "Convolution"
    params = (f"0={oc} 1={kw} 11={kh} 3={stride} 13={stride} 4={pad} 14={pad} 15={pad} 16={pad} 5=1 "
              f"6={weight.size}" + (f" 7={groups}" if groups > 1 else "") + (f" {act}" if act else ""))
    return (kind, name, [bottom], [name], params), _ncnn_weights(weight) + _ncnn_weights(bias, tagged=False)


def ncnn_conv_layer(p, rng):
    """(param, weights, input, output blob) of one conv layer for the kernel suite."""
    n, c, h, w, oc, k, stride, pad, groups = p
    layer, weights = _ncnn_conv("out", "in0", rng.standard_normal((oc, c // groups, k, k)).astype(np.float32),
                                np.zeros(oc, np.float32), stride, pad, groups)
    param = _ncnn_text([("Input", "in0", [], ["in0"], f"0={w} 1={h} 2={c}"), layer])
    return param, weights, rng.standard_normal((c, h, w)).astype(np.float32), "out"


def ncnn_linear_layer(m, k, n, rng):
    """One Gemm (y = x W^T + b, W and b constant): faster than InnerProduct on lavapipe."""
    w, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    param = _ncnn_text([("Input", "in0", [], ["in0"], f"0={k} 1={m}"),
                        ("Gemm", "out", ["in0"], ["out"], f"0=1.0 1=1.0 2=0 3=1 4=0 5=1 6=1 7={m} 8={n} 9={k} 10=4")])
    return param, _ncnn_weights(w) + _ncnn_weights(b), rng.standard_normal((m, k)).astype(np.float32), "out"


def ncnn_kernel(s: Settings, name, shape, ops, param, weights, x, out_blob) -> list[Record]:
    """ncnn fp32 on the same Vulkan device: wall clock of one extract (upload, layer, download)."""
    gpu, why = ncnn_gpu_index(s.device)
    if gpu is None:
        _note(s, f"ncnn kernels skipped: {why}")
        return []
    net = NcnnNet(param, weights, out_blob, gpu)
    try:
        rec = _wall_record(s, "kernels", name, shape, "fp32", "ncnn-vulkan", s.name, lambda: net(x), ops,
                           {"kernel": param.splitlines()[-1].split()[0], "includes": "upload + download"})
    finally:
        net.close()
    rec.roofline_fraction = rec.gops / s.roof["fp32_gflops"]
    rec.extra["roofline"] = "fp32_gflops"
    return [rec]


def _note(s: Settings, text: str):
    if text not in s.notes:
        s.notes.append(text)


def to_ncnn(model, input_shape):
    """(param, weights, output blob) of a float CNN in ncnn's format, from its torch.fx trace:
    Conv2d (+ BatchNorm folded, + a sole ReLU/ReLU6 consumer fused), Linear, MaxPool2d,
    global average pooling, ReLU/ReLU6, residual add; Dropout, Identity and flatten after the
    global pooling (already flat in ncnn) vanish. A blob read twice gets a Split."""
    import operator

    import torch
    import torch.fx
    import torch.nn.functional as F
    from torch import nn
    gm = torch.fx.symbolic_trace(model)
    mods = dict(gm.named_modules())
    mod = lambda n: mods.get(n.target) if n.op == "call_module" else None   # noqa: E731
    layers, weights, blob, done = [], [], {}, set()

    def sole_activation(n):
        users = list(n.users)
        if len(users) == 1:
            m, u = mod(users[0]), users[0]
            if isinstance(m, nn.ReLU) or u.target in (F.relu, torch.relu):
                return u, RELU
            if isinstance(m, nn.ReLU6):
                return u, RELU6
        return None, ""

    c, h, w = input_shape
    with torch.no_grad():
        for n in gm.graph.nodes:
            if n in done or n.op == "output":
                continue
            m = mod(n)
            ins = [blob[a] for a in n.args if isinstance(a, torch.fx.Node)]
            last = n
            if n.op == "placeholder":
                blob[n] = "in0"
                layers.append(("Input", "in0", [], ["in0"], f"0={w} 1={h} 2={c}"))
                continue
            if isinstance(m, nn.Conv2d):
                wt = m.weight.double()
                b = m.bias.double() if m.bias is not None else torch.zeros(m.out_channels, dtype=torch.float64)
                users = list(n.users)
                if len(users) == 1 and isinstance(mod(users[0]), nn.BatchNorm2d):
                    bn = mod(users[0])
                    done.add(users[0])
                    last = users[0]
                    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
                    wt, b = wt * scale[:, None, None, None], (b - bn.running_mean.double()) * scale + bn.bias.double()
                act_node, act = sole_activation(last)
                if act_node is not None:
                    done.add(act_node)
                    last = act_node
                if m.stride[0] != m.stride[1] or m.padding[0] != m.padding[1] or m.dilation != (1, 1):
                    raise NotImplementedError(f"to_ncnn: {n.target}: only square stride/padding, no dilation")
                layer, data = _ncnn_conv(f"l{len(layers)}", ins[0], wt.float().numpy(), b.float().numpy(),
                                         m.stride[0], m.padding[0], m.groups, act)
                layers.append(layer)
                weights.append(data)
            elif isinstance(m, nn.Linear):
                name = f"l{len(layers)}"
                layers.append(("InnerProduct", name, ins, [name], f"0={m.out_features} 1={int(m.bias is not None)} "
                                                                  f"2={m.weight.numel()}"))
                weights.append(_ncnn_weights(m.weight.float().numpy()))
                if m.bias is not None:
                    weights.append(_ncnn_weights(m.bias.float().numpy(), tagged=False))
            elif isinstance(m, nn.MaxPool2d):
                name = f"l{len(layers)}"
                layers.append(("Pooling", name, ins, [name], f"0=0 1={m.kernel_size} 2={m.stride} 3={m.padding} 5=1"))
            elif isinstance(m, nn.AdaptiveAvgPool2d) or n.target is F.adaptive_avg_pool2d:
                name = f"l{len(layers)}"
                layers.append(("Pooling", name, ins, [name], "0=1 4=1"))
            elif isinstance(m, nn.ReLU) or n.target in (F.relu, torch.relu):
                name = f"l{len(layers)}"
                layers.append(("ReLU", name, ins, [name], ""))
            elif isinstance(m, nn.ReLU6):
                name = f"l{len(layers)}"
                layers.append(("Clip", name, ins, [name], "0=0.000000e+00 1=6.000000e+00"))
            elif isinstance(m, (nn.Dropout, nn.Identity, nn.Flatten)) or n.target is torch.flatten:
                blob[n] = ins[0]
                continue
            elif n.target in (operator.add, torch.add):
                name = f"l{len(layers)}"
                layers.append(("BinaryOp", name, ins, [name], "0=0"))
            else:
                raise NotImplementedError(f"to_ncnn: no ncnn layer for {n.op} {n.target}")
            blob[n] = blob[last] = layers[-1][1]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_blob = blob[out_node.args[0]]
    readers = {}
    for i, layer in enumerate(layers):
        for j, b in enumerate(layer[2]):
            readers.setdefault(b, []).append((i, j))
    final = []
    for layer in layers:
        final.append(layer)
        top = layer[3][0]
        if len(readers.get(top, ())) > 1:
            names = [f"{top}_{k}" for k in range(len(readers[top]))]
            final.append(("Split", f"{top}_split", [top], names, ""))
            for (i, j), nm in zip(readers[top], names):
                layers[i][2][j] = nm
    return _ncnn_text(final), b"".join(weights), out_blob


# -- models ---------------------------------------------------------------------------
@dataclass
class ModelCase:
    """A float model and its inputs: build() -> nn.Module in eval(); inputs() -> calibration
    tensors (N, ...) of which the first is the timed input."""
    name: str
    shape: tuple
    build: object
    inputs: object
    ncnn: bool = True       # to_ncnn converts it


def _images(shape, count: int):
    """Real photos (skimage's samples, ImageNet-preprocessed) for 224x224 inputs, else noise."""
    import torch
    if tuple(shape[-2:]) == (224, 224):
        try:
            import skimage.data

            from .models import imagenet_preprocess
            photos = [skimage.data.coffee(), skimage.data.chelsea(), skimage.data.astronaut(), skimage.data.rocket()]
            return [imagenet_preprocess(p) for p in photos[:count]]
        except ImportError:
            pass
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for _ in range(count)]


def _tiny_mobilenet():
    """Quick mode: MobileNetV2's block types (stem, inverted residuals with and without the
    residual add, global pool, classifier) at toy sizes."""
    import torch
    from torch import nn

    from .models import ConvBNAct, InvertedResidual

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(ConvBNAct(3, 8, stride=2), InvertedResidual(8, 8, 1, 2),
                                          InvertedResidual(8, 16, 2, 3))
            self.classifier = nn.Linear(16, 10)

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(torch.flatten(x, 1))
    torch.manual_seed(0)
    return _calibrated_bn(Tiny().eval())


def _tiny_resnet():
    """Quick mode: ResNet-18's stem, a BasicBlock with and one without downsampling, pool, fc."""
    import torch
    from torch import nn

    from .models import BasicBlock

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1, self.relu = nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2))
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(16, 10)

        def forward(self, x):
            x = self.layer1(self.maxpool(self.relu(self.bn1(self.conv1(x)))))
            return self.fc(torch.flatten(self.avgpool(x), 1))
    torch.manual_seed(0)
    return _calibrated_bn(Tiny().eval())


def _calibrated_bn(model):
    """Random BatchNorm statistics, so that folding them is not the identity."""
    import torch
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model


def _minilm_case(quick: bool) -> ModelCase:
    """The hook for MiniLM (vkq.models.load_minilm, 128 tokens): it joins the suite once the
    transformer lowering runs it end to end; its peers are torch fp32 and torch dynamic int8
    (no ncnn: to_ncnn writes CNNs only)."""
    raise NotImplementedError("MiniLM is not in the model suite yet (see vkq.bench._minilm_case)")


def model_cases(quick: bool) -> dict:
    """name -> () -> ModelCase. The default suite is every entry but the hooks."""
    from . import models
    if quick:
        return {"mobilenet_v2": lambda: ModelCase("mobilenet_v2 (tiny)", (1, 3, 32, 32), _tiny_mobilenet,
                                                  lambda: _images((1, 3, 32, 32), 2)),
                "resnet18": lambda: ModelCase("resnet18 (tiny)", (1, 3, 32, 32), _tiny_resnet,
                                              lambda: _images((1, 3, 32, 32), 2))}
    return {"mobilenet_v2": lambda: ModelCase("mobilenet_v2", (1, 3, 224, 224),
                                              lambda: models.mobilenet_v2(pretrained=True),
                                              lambda: _images((1, 3, 224, 224), 4)),
            "resnet18": lambda: ModelCase("resnet18", (1, 3, 224, 224), lambda: models.resnet18(),
                                          lambda: _images((1, 3, 224, 224), 4))}


DEFAULT_MODELS = ("mobilenet_v2", "resnet18")
MODEL_HOOKS = {"minilm": _minilm_case}


def _macs(model, x) -> int:
    """Multiply-adds of the Conv2d and Linear layers in one forward pass."""
    import torch
    total = [0]

    def hook(m, inputs, out):
        if isinstance(m, torch.nn.Conv2d):
            total[0] += out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
        else:
            total[0] += out.numel() * m.in_features
    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total[0]


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


class _BufferTally:
    """Count every device buffer made while active (bytes, once each): what a program holds."""

    def __init__(self, device: Device):
        self.device, self.buffers = device, []

    def __enter__(self):
        make = self.device.buffer

        def counting(*args, **kwargs):
            buf = make(*args, **kwargs)
            self.buffers.append(buf)
            return buf
        self.device.buffer = counting
        return self

    def __exit__(self, *exc):
        del self.device.buffer        # the class's method again

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in {id(b): b for b in self.buffers}.values())


def models(s: Settings, names=DEFAULT_MODELS, progress: bool = True) -> list[Record]:
    """The model suite: end-to-end wall clock per call (in-process, after warm-up) and memory."""
    _quiet()
    cases = model_cases(s.quick)
    records = []
    for name in _progress([n for n in names if not s.only or s.only in n], "models", progress):
        if name in MODEL_HOOKS and name not in cases:
            try:
                case = MODEL_HOOKS[name](s.quick)
            except NotImplementedError as e:
                _note(s, f"{name}: {e}")
                continue
        else:
            case = cases[name]()
        records += bench_model(s, case)
    return records


def bench_model(s: Settings, case: ModelCase) -> list[Record]:
    torch = _torch_threads()
    model = case.build()
    calib = case.inputs()
    x = calib[0]
    shape = "x".join(map(str, case.shape))
    ops = 2 * _macs(model, x)
    cpu = cpu_name()
    with torch.inference_mode():
        want = model(x).numpy()
        out = [_wall_record(s, "models", case.name, shape, "fp32", "torch-cpu", cpu, lambda: model(x), ops)]
    out.append(_vkq_model(s, case, model, calib, shape, ops, want))
    out += _torch_int8_model(s, case, model, calib, shape, ops, want, cpu)
    if case.ncnn:
        out += _ncnn_model(s, case, model, x, shape, ops, want, cpu)
    return out


_COMPILED: dict = {}   # model case name -> (Program, fallback, compile seconds), for this process


def _vkq_model(s, case, model, calib, shape, ops, want) -> Record:
    """vkq int8 on Vulkan: quantize (PT2E) with the calibration inputs, compile, run per call
    (upload, every dispatch, download). Memory: every device buffer the program holds, its
    arena, and the saved .vkq against the fp32 state dict."""
    import torch

    from .api import compile as vkq_compile, quantize
    from .runtime import CompiledProgram
    if case.name not in _COMPILED:    # the Program does not depend on the device
        t0 = time.perf_counter()
        converted = quantize(model, (calib[0],), [(c,) for c in calib], progress=s.progress)
        program, fallback = vkq_compile(converted, (calib[0],))
        _COMPILED[case.name] = program, fallback, time.perf_counter() - t0
    program, fallback, compile_s = _COMPILED[case.name]
    prog = CompiledProgram(program, s.device)
    xn = calib[0].numpy()
    with _BufferTally(s.device) as tally:
        t0 = time.perf_counter()
        got = prog(xn)
        build_s = time.perf_counter() - t0
    rec = _wall_record(s, "models", case.name, shape, "int8", "vulkan", s.name, lambda: prog(xn), ops)
    steps = [st for seg in prog.executor.segments if seg[0] == "vulkan" for st in seg[1].steps]
    gpu_med, _ = stats_ms(gpu_times(s.device, steps, s.repeats, s.warmup, s.budget_s))
    with tempfile.TemporaryDirectory() as tmp:
        vkq_bytes = prog.save(Path(tmp) / "model.vkq").stat().st_size
        torch.save(model.state_dict(), Path(tmp) / "model.pt")
        pt_bytes = (Path(tmp) / "model.pt").stat().st_size
    mem = prog.memory
    rec.extra.update({
        "gpu_ms": gpu_med, "dispatches": len(steps), "cpu_ops": len(fallback),
        "cosine_vs_fp32": _cosine(got, want), "compile_s": compile_s, "first_call_s": build_s,
        "device_bytes": tally.nbytes, "arena_bytes": mem["arena_bytes"],
        "constant_bytes": int(sum(np.asarray(v).nbytes for v in program.constants.values())),
        "vkq_file_bytes": vkq_bytes, "fp32_state_dict_bytes": pt_bytes, "weights_ratio": vkq_bytes / pt_bytes})
    return rec


def _torch_int8_model(s, case, model, calib, shape, ops, want, cpu) -> list[Record]:
    """torch's own int8 CPU path: FX graph mode quantization (x86 engine, its default qconfig
    mapping), calibrated on the same inputs. (A converted PT2E model run by torch is q/dq
    around fp32 ops, not int8 kernels.)"""
    import copy

    import torch
    try:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
        torch.backends.quantized.engine = "x86"
        prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"), (calib[0],))
        with torch.no_grad():
            for c in calib:
                prepared(c)
        q = convert_fx(prepared)
    except Exception as e:   # an API torch may drop: report, keep going
        _note(s, f"torch int8 (FX) {case.name}: {type(e).__name__}: {e}")
        return []
    x = calib[0]
    with torch.inference_mode():
        got = q(x).numpy()
        rec = _wall_record(s, "models", case.name, shape, "int8", "torch-cpu", cpu, lambda: q(x), ops,
                           {"kernel": "FX x86"})
    rec.extra["cosine_vs_fp32"] = _cosine(got, want)
    return [rec]


def _ncnn_model(s, case, model, x, shape, ops, want, cpu) -> list[Record]:
    """The same float model in ncnn (to_ncnn), fp32, on the same Vulkan device and on the CPU."""
    gpu, why = ncnn_gpu_index(s.device)
    if gpu is None and _ncnn() is None:
        _note(s, f"ncnn models skipped: {why}")
        return []
    param, weights, out_blob = to_ncnn(model, tuple(case.shape[1:]))
    xi = x[0].numpy()
    out = []
    for backend, where, dev in (("ncnn-vulkan", gpu, s.name), ("ncnn-cpu", None, cpu)):
        if backend == "ncnn-vulkan" and gpu is None:
            _note(s, f"ncnn Vulkan skipped: {why}")
            continue
        net = NcnnNet(param, weights, out_blob, where)
        try:
            got = net(xi)
            rec = _wall_record(s, "models", case.name, shape, "fp32", backend, dev, lambda: net(xi), ops)
        finally:
            net.close()
        rec.extra["cosine_vs_fp32"] = _cosine(got, want)
        out.append(rec)
    return out


# -- running, output ------------------------------------------------------------------
SUITES = ("roofline", "kernels", "models")


def run(suites=("kernels", "models"), device=None, quick: bool = False, repeats: int | None = None,
        only: str | None = None, model_names=DEFAULT_MODELS, progress: bool = True):
    """Measure the roofline, then the suites. Returns (records as dicts, Settings)."""
    dev = device if isinstance(device, Device) else get_device(device)
    _torch_threads()
    _quiet()
    roof = roofline(dev, quick)
    s = Settings(dev, roof, quick, repeats or (2 if quick else 10), 1 if quick else 2, 0.5 if quick else 8.0, only,
                 progress=progress)
    s.load_avg = [os.getloadavg()[0]]
    records = list(roof["records"])
    if "kernels" in suites:
        records += kernels(s, progress)
    if "models" in suites:
        records += models(s, model_names, progress)
    s.load_avg.append(os.getloadavg()[0])
    for r in roof["records"]:
        r.extra["load_avg_1m"] = s.load_avg    # at the start and the end of the run
    return [r.as_dict() for r in records], s


def print_table(records) -> None:
    cols = ("suite", "name", "shape", "dtype", "backend", "median_ms", "p90_ms", "gops", "roofline_fraction")
    rows = [[("" if r.get(c) is None else f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r[c]))
             for c in cols] for r in (x.as_dict() if isinstance(x, Record) else x for x in records)]
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def print_models_memory(records) -> None:
    """Per vkq model: device memory, arena, weights against the fp32 state dict, agreement."""
    for r in records:
        if r["suite"] == "models" and r["backend"] == "vulkan":
            print(f"{r['name']}: device memory {r['device_bytes'] / 2**20:.2f} MiB (arena {r['arena_bytes'] / 2**20:.2f} "
                  f"MiB); .vkq {r['vkq_file_bytes'] / 2**20:.2f} MiB = {r['weights_ratio']:.3f} x the fp32 state dict "
                  f"({r['fp32_state_dict_bytes'] / 2**20:.2f} MiB); GPU time {r['gpu_ms']:.1f} ms of "
                  f"{r['median_ms']:.1f} ms per call; {r['cpu_ops']} op(s) on the CPU; compile {r['compile_s']:.1f} s")
    for r in records:
        if r["suite"] == "models" and "cosine_vs_fp32" in r:
            print(f"  {r['name']} {r['backend']} {r['dtype']}: cosine with torch fp32 {r['cosine_vs_fp32']:.5f}")


def _find(records, name, backend, dtype):
    return next((r for r in records if r["name"] == name and r["backend"] == backend and r["dtype"] == dtype), None)


def targets(records) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the project's goals, from a full run's records."""
    out = []
    lin = _find(records, "linear 256x1024x1024", "vulkan", "int8")
    if lin:
        out.append(("int8 linear M=256 K=N=1024 >= 15 GOP/s", f"{lin['gops']:.1f} GOP/s", lin["gops"] >= 15))
    conv = _find(records, "resnet18 conv3x3 64->64 @56", "vulkan", "int8")
    if conv:
        peer = _find(records, "resnet18 conv3x3 64->64 @56", "ncnn-vulkan", "fp32")
        extra = f" (ncnn fp32 Vulkan {peer['gops']:.1f})" if peer else ""
        out.append(("int8 conv 3x3 64->64 @56 >= 15 GOP/s", f"{conv['gops']:.1f} GOP/s{extra}", conv["gops"] >= 15))
    mb = _find(records, "mobilenet_v2", "vulkan", "int8")
    if mb:
        for backend, label in (("ncnn-vulkan", "ncnn fp32 Vulkan"), ("torch-cpu", "torch fp32 CPU")):
            peer = _find(records, "mobilenet_v2", backend, "fp32")
            if peer:
                out.append((f"MobileNetV2 int8 Vulkan faster than {label}",
                            f"{mb['median_ms']:.1f} ms vs {peer['median_ms']:.1f} ms", mb["median_ms"] < peer["median_ms"]))
        out.append(("MobileNetV2 int8 weights <= 0.27 x fp32 state dict", f"{mb['weights_ratio']:.3f}",
                    mb["weights_ratio"] <= 0.27))
    return out


def markdown_table(records) -> str:
    """The records as a Markdown table (what bench/README.md shows)."""
    head = "| suite | name | shape | dtype | backend | median ms | p90 ms | GOP/s | roofline |"
    rows = [head, "|" + "---|" * 9]
    fmt = lambda v: "" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)   # noqa: E731
    for r in records:
        rows.append("| " + " | ".join(fmt(r[k]) for k in ("suite", "name", "shape", "dtype", "backend", "median_ms",
                                                          "p90_ms", "gops", "roofline_fraction")) + " |")
    return "\n".join(rows) + "\n"


def write_json(records, path) -> None:
    with open(path, "w") as f:
        json.dump([x.as_dict() if isinstance(x, Record) else x for x in records], f, indent=1)


BACKEND_STYLE = {("vulkan", "int8"): ("vkq int8 (Vulkan)", "#1f77b4"),
                 ("vulkan", "int8-dynamic"): ("vkq int8 dynamic (Vulkan)", "#6baed6"),
                 ("vulkan", "int8-weight-only"): ("vkq int8 weight-only (Vulkan)", "#9ecae1"),
                 ("vulkan", "fp32"): ("vkq fp32 shader (Vulkan)", "#ff7f0e"),
                 ("ncnn-vulkan", "fp32"): ("ncnn fp32 (Vulkan)", "#2ca02c"),
                 ("ncnn-cpu", "fp32"): ("ncnn fp32 (CPU)", "#98df8a"),
                 ("torch-cpu", "fp32"): ("torch fp32 (CPU)", "#7f7f7f"),
                 ("torch-cpu", "int8"): ("torch int8 (CPU)", "#c7c7c7")}


def plot(records, path, title: str = "") -> None:
    """Kernels against the roofline (GOP/s, log scale, with the int32 MAD and fp32 FMA lines),
    memory-bound kernels against copy bandwidth (GB/s), models against the peers (ms)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    roof = {r["name"]: r["gops"] for r in records if r["suite"] == "roofline"}
    kern = [r for r in records if r["suite"] == "kernels"]
    compute = [r for r in kern if "gbps" not in r or r["backend"] == "ncnn-vulkan"]
    memory = [r for r in kern if "gbps" in r and r["backend"] != "ncnn-vulkan"]
    mods = [r for r in records if r["suite"] == "models"]
    panels = [(p, w) for p, w in (("compute", compute), ("memory", memory), ("models", mods)) if w]
    heights = [max(2.0, len({r["name"] for r in rows}) * (0.25 + 0.09 * len({(r["backend"], r["dtype"]) for r in rows})))
               for _, rows in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, sum(heights) + 1.5), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (kind, rows) in zip(axes[:, 0], panels):
        value = {"compute": lambda r: r["gops"], "memory": lambda r: r["gbps"], "models": lambda r: r["median_ms"]}[kind]
        _bars(ax, rows, value)
        if kind == "compute":
            ax.set_xscale("log")
            ax.set_xlabel("GOP/s (2 x multiply-adds / time; log scale)")
            for key, label, style in (("int32_gops", "int32 MAD roofline", "--"), ("fp32_gflops", "fp32 FMA roofline", ":")):
                if key in roof:
                    ax.axvline(roof[key], color="k", ls=style, lw=1, label=f"{label} {roof[key]:.1f}")
            ax.set_title("kernels: Vulkan GPU time (timestamps; ncnn: wall clock) vs torch on the CPU")
        elif kind == "memory":
            ax.set_xscale("log")
            ax.set_xlabel("GB/s moved (int8: packed bytes; torch fp32: 4 bytes an element; log scale)")
            if "copy_gbps" in roof:
                ax.axvline(roof["copy_gbps"], color="k", ls="--", lw=1, label=f"copy roofline {roof['copy_gbps']:.2f} GB/s")
            ax.set_title("memory-bound kernels against copy bandwidth")
        else:
            ax.set_xscale("log")
            ax.set_xlabel("ms per call, median (wall clock, in-process, after warm-up; log scale)")
            ax.set_title("models end to end")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(axis="x", which="both", alpha=0.3)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 2.5)     # room for the value labels
    dev = next((r["device"] for r in records if r["backend"] == "vulkan"), "")
    fig.suptitle(title or f"vkq bench on {dev}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.99))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(ax, rows, value):
    """Horizontal bars grouped by case name, one colour per (backend, dtype)."""
    names = list(dict.fromkeys(r["name"] for r in rows))
    series = [k for k in BACKEND_STYLE if any((r["backend"], r["dtype"]) == k for r in rows)]
    height = 0.8 / max(1, len(series))
    for j, key in enumerate(series):
        label, colour = BACKEND_STYLE[key]
        ys, xs = [], []
        for i, n in enumerate(names):
            r = next((r for r in rows if r["name"] == n and (r["backend"], r["dtype"]) == key), None)
            if r is not None and value(r):
                ys.append(i + (j - (len(series) - 1) / 2) * height)
                xs.append(value(r))
        ax.barh(ys, xs, height=height * 0.95, color=colour, label=label)
        for y, x in zip(ys, xs):
            ax.text(x, y, f" {x:.3g}", va="center", fontsize=6)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()


def main(args) -> int:
    """`vkq bench`: args from the CLI (suite, device, quick, repeats, only, models, json, plot)."""
    suites = SUITES[1:] if args.suite == "all" else () if args.suite == "roofline" else (args.suite,)
    names = tuple(args.models.split(",")) if args.models else DEFAULT_MODELS
    records, s = run(suites, args.device, args.quick, args.repeats, args.only, names, progress=not args.no_progress)
    print(f"device: {s.name}; CPU: {cpu_name()}; {'quick' if s.quick else 'full'} run; "
          f"load average {s.load_avg[0]:.1f} at the start, {s.load_avg[-1]:.1f} at the end")
    print_table(records)
    print_models_memory(records)
    for what, got, met in targets(records):
        print(f"target: {what}: {got} -> {'met' if met else 'NOT met'}")
    for note in s.notes:
        print(f"note: {note}")
    if args.json:
        write_json(records, args.json)
        print(f"wrote {len(records)} records to {args.json}")
    if args.plot:
        plot(records, args.plot)
        print(f"wrote {args.plot}")
    return 0
