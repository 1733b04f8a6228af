"""How the benchmark measures: GPU time from Vulkan timestamps, wall clock around whole calls,
repeats fitted to a time budget, the CPU peers' threads, and a quiet terminal."""
from __future__ import annotations

import os
import time

import numpy as np

from ..device import Device

CPU_THREADS = 2      # torch and ncnn on the CPU: the machine's cores, shared with the driver
# After each parallel region torch's OpenMP threads spin for a while (libgomp's default wait
# policy) on the cores a CPU Vulkan driver's threads then need. Measured (lavapipe, 2 cores,
# MobileNetV2 call): 20.5 ms right after a torch call, 16.4 after 1 ms, 12.3 after 5 ms, 11.4
# after 10 ms, 11.7 alone. Timed Vulkan work starts once those threads have gone idle (a peer's
# repeated calls keep their threads spinning, as a caller's loop would). Not a fixed pause: on a
# later machine (KVM, 2 vCPUs) torch's thread spun 4.5-6 ms, and a 20 ms pause then sometimes
# slowed the Vulkan call itself (MobileNetV2 alone, medians of 18: 20.4 ms after no pause, 20.0
# after 5 ms, 32.7 after 20 ms, 34.4 after 100 ms; torch alone 21.9 and 22.9): an idle machine
# wakes slowly (bench/LOG.md, "Timing beside torch").
SETTLE_S = 0.05      # the longest wait for them
_POLL_S = 0.0002


def busy_threads() -> int | None:
    """How many of this process's other threads are running (Linux: /proc/self/task/*/stat,
    state R); None where that cannot be read."""
    import threading
    me = str(threading.get_native_id())
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    busy = 0
    for t in tasks:
        if t == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                stat = f.read()
        except OSError:
            continue        # the thread ended
        busy += stat[stat.rfind(")") + 2:][:1] == "R"
    return busy


def settle(limit_s: float = SETTLE_S) -> float:
    """Wait until the process's other threads (the CPU peers' spinning ones) are idle, at most
    limit_s (all of it where threads cannot be read); the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        busy = busy_threads()
        if busy is None:
            time.sleep(max(0.0, limit_s - (time.perf_counter() - t0)))
        elif busy == 0:
            break
        else:
            time.sleep(_POLL_S)
    return time.perf_counter() - t0


def stats_ms(times_ns) -> tuple[float, float]:
    """(median, 90th percentile) in ms."""
    t = np.asarray(times_ns, dtype=np.float64) / 1e6
    return float(np.median(t)), float(np.percentile(t, 90))


def fit_repeats(last_ns: float, repeats: int, budget_s: float | None) -> int:
    """Fewer repeats (at least 3) when repeats runs of last_ns would exceed budget_s."""
    if budget_s is None or last_ns <= 0:
        return repeats
    return max(min(3, repeats), min(repeats, int(budget_s * 1e9 / last_ns)))


def _warm(last_ns: float, budget_s: float | None) -> bool:
    """Another warm-up run is worth it unless one run takes a quarter of the budget."""
    return budget_s is None or last_ns < budget_s * 1e9 / 4


def repeated(once, repeats: int = 10, warmup: int = 2, budget_s: float | None = None) -> list:
    """once() -> (ns it took, what to keep): up to `warmup` runs discarded, then repeats runs
    (fewer, at least 3, where repeats runs of the last warm-up's time would exceed budget_s);
    what they kept."""
    last = 0.0
    for i in range(max(1, warmup)):
        if i and not _warm(last, budget_s):
            break
        last = once()[0]
    return [once()[1] for _ in range(fit_repeats(last, repeats, budget_s))]


def gpu_times(device: Device, steps, repeats: int = 10, warmup: int = 2, budget_s: float | None = None) -> list[float]:
    """Per-repeat GPU time (ns) of `steps` recorded once with timestamps: the sum of the
    dispatches' times. budget_s caps the repeats (at least 3) by the last warm-up's time."""
    rec = device.record(steps, timestamps=True)
    settle()

    def once():
        rec.run()
        ns = sum(rec.dispatch_times_ns())
        return ns, ns
    return repeated(once, repeats, warmup, budget_s)


def _wall_ns(fn) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def wall_times(fn, repeats: int = 10, warmup: int = 2, budget_s: float | None = None) -> list[float]:
    """Per-call wall-clock time (ns) of fn(), after settle(); budget_s caps the repeats as in gpu_times."""
    settle()

    def once():
        ns = _wall_ns(fn)
        return ns, ns
    return repeated(once, repeats, warmup, budget_s)


def paired_wall_times(fn_a, fn_b, repeats: int = 10, warmup: int = 2, budget_s: float | None = None,
                      settled: bool = True):
    """Wall-clock times (ns) of fn_a() and fn_b() run alternately, pair by pair: their
    difference is then taken within one phase of the machine (on a shared machine the speed
    drifts between two measurements taken one after the other). settled: fn_a is the Vulkan
    call and fn_b a CPU peer; each fn_a starts after settle(), once the peer's spinning threads
    have gone idle (not wanted where both are Vulkan work: nothing to wait for)."""
    def once():
        if settled:
            settle()
        ab = _wall_ns(fn_a), _wall_ns(fn_b)
        return sum(ab), ab
    a, b = zip(*repeated(once, repeats, warmup, budget_s))
    return list(a), list(b)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        model = "cpu"
    return f"{model} ({CPU_THREADS} threads)"


def torch_threads():
    """torch, set to CPU_THREADS threads."""
    import torch
    torch.set_num_threads(CPU_THREADS)
    return torch


def quiet():
    """Keep the terminal for the table: torch's quantization deprecations, torchao's notices."""
    import logging
    import warnings
    warnings.filterwarnings("ignore", message=".*quantized tensor creation functions")
    warnings.filterwarnings("ignore", message=".*reduce_range will be deprecated")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("torchao", "torch.utils._pytree", "torch._export", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)


