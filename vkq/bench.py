"""Benchmarks: the device's roofline, per-kernel GPU times, whole models — with peers
measured in the same run, because a shared machine drifts. Records are plain dicts:
{suite, name, shape, dtype, backend, device, median_ms, p90_ms, gops, roofline_fraction}.

GPU times come from Vulkan timestamps around each dispatch (warm-up excluded, median over
repeats); wall-clock times from time.perf_counter around whole calls.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np

from .device import Device, get_device, grid_1d


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


def gpu_times(device: Device, steps, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Per-repeat GPU time (ns) of `steps` recorded once with timestamps: first to last dispatch."""
    rec = device.record(steps, timestamps=True)
    out = []
    for i in range(warmup + repeats):
        rec.run()
        if i >= warmup:
            out.append(sum(rec.dispatch_times_ns()))
    return out


def wall_times(fn, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Per-call wall-clock time (ns) of fn()."""
    out = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter_ns()
        fn()
        if i >= warmup:
            out.append(time.perf_counter_ns() - t0)
    return out


# -- roofline -------------------------------------------------------------------------
def roofline(device: Device, quick: bool = False) -> dict:
    """What the device can do at all, from synthetic shaders (shaders/bench_roofline.comp):
    fp32 multiply-add GFLOP/s, int32 multiply-add GOP/s (2 ops each), ivec4 copy GB/s
    (read + write), and the fixed costs of one dispatch and of one host<->device round trip."""
    name = device.info.name
    local = min(64, device.info.max_workgroup_invocations)
    n = 2048 if quick else 16384
    iters = 32 if quick else 256
    repeats = 3 if quick else 7
    src = device.buffer(np.random.default_rng(0).integers(1, 100, n * 4).astype(np.int32))
    dst = device.buffer(size=n * 4, host_visible=False)
    out = {"device": name}
    records = []
    for key, define in (("fp32_gflops", "FMA_F32"), ("int32_gops", "MAD_I32")):
        d = device.dispatch("bench_roofline", [src, dst], grid_1d(n, local), local=(local,), spec=(iters,),
                            push=(n,), defines={define: 1})
        ops = n * 4 * 8 * iters * 2
        med, p90 = stats_ms(gpu_times(device, [d], repeats))
        out[key] = ops / (med * 1e6)
        records.append(Record("roofline", key, f"{n}x4x8x{iters}", define.split("_")[1].lower(), "vulkan", name,
                              med, p90, out[key], 1.0))
    words = (1 << 18) if quick else (1 << 22)   # ivec4s: 4 MiB / 64 MiB
    a = device.buffer(size=words * 4, host_visible=False)
    b = device.buffer(size=words * 4, host_visible=False)
    per_invocation = 16
    d = device.dispatch("bench_roofline", [a, b], grid_1d(words // per_invocation, local), local=(local,),
                        spec=(per_invocation,), push=(words,), defines={"COPY": 1})
    med, p90 = stats_ms(gpu_times(device, [d], repeats))
    out["copy_gbps"] = words * 16 * 2 / (med * 1e6)
    records.append(Record("roofline", "copy_gbps", f"{words * 16 >> 20} MiB", "int32", "vulkan", name, med, p90,
                          out["copy_gbps"], 1.0))
    # fixed costs, wall-clock: one tiny dispatch; one upload + dispatch + download
    tiny = device.dispatch("bench_roofline", [src, dst], (1, 1, 1), local=(1,), spec=(1,), push=(1,),
                           defines={"COPY": 1})
    rec = device.record([tiny])
    med, p90 = stats_ms(wall_times(rec.run, repeats * 3))
    out["dispatch_ms"] = med
    records.append(Record("roofline", "dispatch_ms", "1 invocation", "-", "vulkan", name, med, p90))
    io_buf = device.buffer(np.zeros(4, np.int32))
    rt = device.record([device.dispatch("bench_roofline", [io_buf, io_buf], (1, 1, 1), local=(1,), spec=(1,),
                                        push=(1,), defines={"COPY": 1})], upload=[io_buf], download=[io_buf])
    med, p90 = stats_ms(wall_times(rt.run, repeats * 3))
    out["round_trip_ms"] = med
    records.append(Record("roofline", "round_trip_ms", "16 B up + dispatch + 16 B down", "-", "vulkan", name,
                          med, p90))
    out["records"] = records
    return out


def print_table(records) -> None:
    cols = ("suite", "name", "shape", "dtype", "backend", "median_ms", "p90_ms", "gops", "roofline_fraction")
    rows = [[("" if r.get(c) is None else f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r[c]))
             for c in cols] for r in (x.as_dict() if isinstance(x, Record) else x for x in records)]
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def write_json(records, path) -> None:
    with open(path, "w") as f:
        json.dump([x.as_dict() if isinstance(x, Record) else x for x in records], f, indent=1)
