"""The device's roofline, measured first in every run, and the roofline model every Vulkan
kernel record is judged by.

Measured from synthetic shaders (shaders/bench_roofline.comp), each the best of its repeats (a
peak: on a shared machine the median drifts with the load):
  fp32_gflops    fp32 multiply-add (2 flops each)
  int32_gops     int32 multiply + add (2 ops each)
  dot4_gops      int8 4-way dot product with accumulate (OpSDotAccSat: 4 multiply-adds, 8 ops
                 an instruction); measured only on a device opened with the integer dot product
  copy_gbps      ivec4 copy, bytes read + written
and the fixed costs (median wall clock) of one dispatch and of one host<->device round trip,
and what one more dispatch costs inside a recorded sequence of dependent ones (chain_dispatch_ms:
what a model pays per node beyond its kernels' work; on lavapipe the hand-over of each dispatch
to its worker threads and back, 35-60 us on the 2-core machine of bench/LOG.md).

The model: a kernel that does `ops` operations (2 x multiply-adds; one per element or window
tap for the memory-bound kernels) and moves `bytes` (each input, weight and output read or
written once, at its packed size on the device: the traffic no kernel can avoid) has the
arithmetic intensity I = ops / bytes (ops a byte), and can reach at best

    attainable roof = min(compute roof, I x copy bandwidth)   GOP/s

The roofs a kernel record is judged by are sampled beside it: RoofProbe runs the copy and the
compute-roof shaders once right after each of the kernel's repeats, and the record takes the
median of those samples, as it takes the median of the kernel's times. Why: on a shared
machine the speed of everything drifts within a run (2x within minutes on the 2-core machine
of bench/LOG.md), so a roof measured at the start misjudges a kernel timed minutes later,
in either direction; the same-moment ratio is the one that means something. (Before, the
best of 3 samples before and 3 after the repeats: a peak against the kernel's median, so a
slow phase during the repeats read as a slow kernel: the same depthwise kernel 0.12 and 0.19
of the roof in two records of one run, conv 3x3 64->64 0.45 in one run and 0.82 in the next.)
The run-start roof stays in the record too (roof_gops_at_start, roofline_fraction_at_start),
and in the roofline records.

Its roofline_fraction is its GOP/s over that roof: a memory-bound add is judged against the
bandwidth, a GEMM against the compute roof. Which compute roof: int32_gops for vkq's int8
kernels (the ALU an int8 multiply-add costs at least one of, whatever the kernel does inside),
dot4_gops for their integer-dot-product variants, fp32_gflops for float shaders and ncnn's fp32
layers. Each record names the one it used ("roofline") and says which side of the ridge point
(compute roof / bandwidth) it is on ("bound": memory or compute).
"""
from __future__ import annotations

import numpy as np

from ..device import Device, grid_1d
from .timing import gpu_times, repeated, settle, stats_ms, wall_times

CHAIN = 64          # dispatches in the chain_dispatch_ms sequence
COMPUTE_ROOFS = {"int32_gops": "int32 MAD", "fp32_gflops": "fp32 FMA", "dot4_gops": "int8 dot4"}


def attainable(roof: dict, intensity: float, compute: str) -> tuple[float, str, str]:
    """(roof GOP/s, bound, compute roof used) for a kernel of `intensity` ops a byte:
    min(compute roof, intensity x copy GB/s). A compute roof this run did not measure (the
    dot product on a device without it) falls back to int32_gops."""
    if compute not in roof:
        compute = "int32_gops"
    memory = intensity * roof["copy_gbps"]
    return (memory, "memory", compute) if memory < roof[compute] else (roof[compute], "compute", compute)


def judge(roof: dict, ops: float, nbytes: float, gops: float, compute: str) -> dict:
    """The roofline fields of a record that did `ops` operations moving `nbytes` at `gops`."""
    intensity = ops / nbytes
    top, bound, compute = attainable(roof, intensity, compute)
    return {"intensity": intensity, "roof_gops": top, "roofline_fraction": gops / top, "bound": bound,
            "roofline": compute, "bytes_moved": int(nbytes)}


# vec4 accumulators an invocation of the compute roofs (shaders/bench_roofline.comp: NACC): the
# best is the roof. Before, 8 accumulators as 8 named variables ran at half the rate of the same
# work as an unrolled array on lavapipe (int32 118 against 214 GOP/s, the same outputs), so
# every kernel's fraction of the compute roof read about twice what it was.
ACCUMULATORS = (4, 8, 16)


class RoofProbe:
    """The roofline shaders, built once, to sample a roof again at any moment of the run:
    {key: (device, dispatch, amount)} with roof = amount / time in ns (GOP/s or GB/s)."""

    def __init__(self):
        self.shaders = {}
        self._recorded = {}

    def add(self, key: str, device: Device, dispatch, amount: float) -> None:
        self.shaders[key] = (device, dispatch, amount)

    def recording(self, key: str):
        """(the roof's dispatch recorded once with timestamps, its amount)."""
        if key not in self._recorded:
            device, d, amount = self.shaders[key]
            self._recorded[key] = device.record([d], timestamps=True), amount
        return self._recorded[key]


def beside(probe: "RoofProbe | None", keys, device: Device, steps, repeats: int, warmup: int,
           budget_s: float | None) -> tuple[list, dict]:
    """GPU times (ns) of `steps`, each repeat followed by one sample of each roof in `keys`:
    (times, {key: the median of its samples}; {} without a probe). The kernel and its roofs
    are timed in the same moments, so their ratio holds while the machine drifts. Each timed
    run of the kernel follows an untimed one, so it finds its data in the caches as in
    back-to-back repeats."""
    if probe is None:
        return gpu_times(device, steps, repeats, warmup, budget_s), {}
    rec = device.record(steps, timestamps=True)
    roofs = {k: probe.recording(k) for k in keys if k in probe.shaders}

    def one():     # (ns of the kernel and its roofs, (the kernel's ns, {key: the roof now}))
        rec.run()      # untimed: the roofs' 64 MiB copy before it left the caches cold
        rec.run()
        t, got, spent = sum(rec.dispatch_times_ns()), {}, 0.0
        for k, (r, amount) in roofs.items():
            r.run()
            ns = sum(r.dispatch_times_ns())
            got[k], spent = amount / ns, spent + ns
        return t + spent, (t, got)

    settle()
    runs = repeated(one, repeats, warmup, budget_s)
    times = [t for t, _ in runs]
    samples = {k: [got[k] for _, got in runs] for k in roofs}
    return times, {k: float(np.median(v)) for k, v in samples.items()}


def measure(device: Device, quick: bool = False, dot_device: Device | None = None) -> dict:
    """The roofline of `device` ({key: value}, and its records under "records"). dot_device:
    the same physical device opened with the integer dot product, to measure dot4_gops."""
    from .records import Record
    name = device.info.name
    n = 2048 if quick else 16384
    iters = 32 if quick else 256
    repeats = 3 if quick else 10
    out = {"device": name}
    probe = RoofProbe()
    records = []
    compute = [(device, "fp32_gflops", "FMA_F32", "fp32", 2), (device, "int32_gops", "MAD_I32", "int32", 2)]
    if dot_device is not None:
        compute.append((dot_device, "dot4_gops", "DOT4_I8", "int8", 8))
    for dev, key, define, dtype, ops_each in compute:
        local = min(64, dev.info.max_workgroup_invocations)
        src = dev.buffer(np.random.default_rng(0).integers(1, 100, n * 4).astype(np.int32))
        dst = dev.buffer(size=n * 4, host_visible=False)
        best = None
        for nacc in ACCUMULATORS:     # the best of them is the roof (which wins depends on the registers)
            d = dev.dispatch("bench_roofline", [src, dst], grid_1d(n, local), local=(local,), spec=(iters,),
                             push=(n,), defines={define: 1, "NACC": nacc})
            ops = n * 4 * nacc * iters * ops_each     # n invocations x nacc accumulators of 4 lanes x iters
            times = gpu_times(dev, [d], repeats)
            if best is None or ops / min(times) > best[0]:
                best = ops / min(times), nacc, d, ops, times
        out[key], nacc, d, ops, times = best
        med, p90 = stats_ms(times)
        probe.add(key, dev, d, ops)
        records.append(Record("roofline", key, f"{n}x4x{nacc}x{iters}", dtype, "vulkan", name, med, p90, out[key],
                              roofline_fraction=1.0,
                              extra={"timing": "gpu", "min_ms": min(times) / 1e6, "gops_from": "best of repeats",
                                     "accumulators": nacc}))
    local = min(64, device.info.max_workgroup_invocations)
    words = (1 << 18) if quick else (1 << 22)   # ivec4s: 4 MiB / 64 MiB
    a = device.buffer(size=words * 4, host_visible=False)
    b = device.buffer(size=words * 4, host_visible=False)
    per_invocation = 16
    # the loads the kernels take here (the device picks COPY TEXEL where it takes texel loads)
    d = device.dispatch("bench_roofline", [a, b], grid_1d(words // per_invocation, local), local=(local,),
                        spec=(per_invocation,), push=(words,), defines={"COPY": 1})
    times = gpu_times(device, [d], repeats)
    med, p90 = stats_ms(times)
    out["copy_gbps"] = words * 16 * 2 / min(times)
    probe.add("copy_gbps", device, d, words * 16 * 2)
    records.append(Record("roofline", "copy_gbps", f"{words * 16 >> 20} MiB", "int32", "vulkan", name, med, p90,
                          out["copy_gbps"], roofline_fraction=1.0,
                          extra={"timing": "gpu", "gbps": out["copy_gbps"], "min_ms": min(times) / 1e6,
                                 "texel_variant": "TEXEL" in d.defines,
                                 "gops_from": "best of repeats"}))
    # fixed costs, wall-clock: one tiny dispatch; one upload + dispatch + download
    src = device.buffer(np.zeros(4, np.int32))
    dst = device.buffer(size=4, host_visible=False)
    tiny = device.dispatch("bench_roofline", [src, dst], (1, 1, 1), local=(1,), spec=(1,), push=(1,),
                           defines={"COPY": 1})
    med, p90 = stats_ms(wall_times(device.record([tiny]).run, repeats * 3))
    out["dispatch_ms"] = med
    records.append(Record("roofline", "dispatch_ms", "1 invocation", "-", "vulkan", name, med, p90,
                          extra={"timing": "wall"}))
    io_buf = device.buffer(np.zeros(4, np.int32))
    rt = device.record([device.dispatch("bench_roofline", [io_buf, dst], (1, 1, 1), local=(1,), spec=(1,),
                                        push=(1,), defines={"COPY": 1})], upload=[io_buf], download=[io_buf])
    med, p90 = stats_ms(wall_times(rt.run, repeats * 3))
    out["round_trip_ms"] = med
    records.append(Record("roofline", "round_trip_ms", "16 B up + dispatch + 16 B down", "-", "vulkan", name,
                          med, p90, extra={"timing": "wall"}))
    # a tiny dispatch CHAIN times in one sequence, each reading what the one before wrote (so a
    # barrier between each pair): the sequence's wall time over CHAIN, per dispatch (its submit
    # and wait, one dispatch_ms, spread over CHAIN: under 2% of it)
    chain = device.record([device.dispatch("bench_roofline", [src, dst] if i % 2 == 0 else [dst, src], (1, 1, 1),
                                           local=(1,), spec=(1,), push=(1,), defines={"COPY": 1})
                           for i in range(CHAIN)])
    med, p90 = stats_ms(wall_times(chain.run, repeats * 3))
    out["chain_dispatch_ms"] = med / CHAIN
    records.append(Record("roofline", "chain_dispatch_ms", f"1 of {CHAIN} dependent dispatches", "-", "vulkan", name,
                          med / CHAIN, p90 / CHAIN, extra={"timing": "wall", "chain_ms": med}))
    out["records"] = records
    out["probe"] = probe
    return out
