"""One measurement = one Record; one run = one Settings. The two ways a record is timed: GPU
time of recorded dispatches (Vulkan timestamps) and wall clock of a call."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..device import Device
from .roofline import attainable, beside, judge
from .timing import stats_ms, wall_times

FIELDS = ("suite", "name", "shape", "dtype", "backend", "device", "median_ms", "p90_ms", "gops", "intensity",
          "roof_gops", "roofline_fraction")


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
    roofline_fraction: float | None = None   # gops / roof_gops
    extra: dict = field(default_factory=dict)
    intensity: float | None = None           # ops per byte moved
    roof_gops: float | None = None           # attainable: min(compute roof, intensity x copy GB/s)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in FIELDS}
        d.update(self.extra)
        return d


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


def note(s: Settings, text: str):
    """Say once, at the end of the run, what was skipped and why."""
    if text not in s.notes:
        s.notes.append(text)


def with_roofline(s: Settings, rec: Record, ops, nbytes, compute: str, local: dict | None = None) -> Record:
    """rec judged by the roofline model (vkq.bench.roofline): intensity, roof, fraction, against
    the roofs sampled beside it (`local`, where given) and, for comparison, the run's start."""
    j = judge({**s.roof, **(local or {})}, ops, nbytes, rec.gops, compute)
    rec.intensity, rec.roof_gops, rec.roofline_fraction = j.pop("intensity"), j.pop("roof_gops"), \
        j.pop("roofline_fraction")
    rec.extra.update(j)
    if local:
        start = judge(s.roof, ops, nbytes, rec.gops, compute)
        rec.extra.update(roof_beside=dict(local), roof_gops_at_start=start["roof_gops"],
                         roofline_fraction_at_start=start["roofline_fraction"])
    return rec


def gpu_record(s: Settings, suite, name, shape, dtype, steps, ops, nbytes, compute, extra=None,
               device: Device | None = None, backend: str = "vulkan") -> Record:
    """Time `steps` on `device` (default s.device) by Vulkan timestamps; GOP/s = ops / median
    time, judged against the roofline with the compute roof `compute` (int32_gops, fp32_gflops,
    dot4_gops) and `nbytes` moved."""
    dev = device or s.device
    keys = ("copy_gbps", attainable(s.roof, 1.0, compute)[2])     # the compute roof judge() will use
    times, local = beside(s.roof.get("probe"), keys, dev, steps, s.repeats, s.warmup, s.budget_s)
    med, p90 = stats_ms(times)
    extra = {"timing": "gpu", "min_ms": min(times) / 1e6, "dispatches": len(steps),
             "kernel": "+".join(dict.fromkeys(st.name for st in steps)),   # the shaders dispatched
             "dot_product": bool(getattr(dev, "dot_product", False)), "gbps": nbytes / (med * 1e6), **(extra or {})}
    rec = Record(suite, name, shape, dtype, backend, s.name, med, p90, ops / (med * 1e6), extra=extra)
    return with_roofline(s, rec, ops, nbytes, compute, local)


def wall_record(s: Settings, suite, name, shape, dtype, backend, device, fn, ops, extra=None, nbytes=None) -> Record:
    """Time fn() by the wall clock; with nbytes, its intensity and GB/s too (no roof: the CPU
    peers run on another device than the roofline's)."""
    return times_record(suite, name, shape, dtype, backend, device, wall_times(fn, s.repeats, s.warmup, s.budget_s),
                        ops, extra, nbytes)


def times_record(suite, name, shape, dtype, backend, device, times, ops, extra=None, nbytes=None) -> Record:
    """The wall-clock record of per-call times (ns) measured elsewhere (wall_record,
    timing.paired_wall_times)."""
    med, p90 = stats_ms(times)
    extra = {"timing": "wall", "min_ms": min(times) / 1e6, **(extra or {})}
    rec = Record(suite, name, shape, dtype, backend, device, med, p90, ops / (med * 1e6) if ops else None,
                 extra=extra)
    if nbytes:
        rec.extra["gbps"] = nbytes / (med * 1e6)
        rec.extra["bytes_moved"] = int(nbytes)
        if ops:
            rec.intensity = ops / nbytes
    return rec
