"""Running a benchmark: the roofline first, then the suites; `vkq bench` prints and writes it."""
from __future__ import annotations

import os

from ..device import Device, get_device
from .kernels import paths, run_kernels
from .models import DEFAULT_MODELS, run_models
from .records import Settings, note
from .report import print_models_memory, print_tables, targets, write_json
from .roofline import measure
from .timing import cpu_name, quiet, torch_threads

SUITES = ("roofline", "kernels", "models", "lm")


def run(suites=("kernels", "models"), device=None, quick: bool = False, repeats: int | None = None,
        only: str | None = None, model_names=DEFAULT_MODELS, progress: bool = True):
    """Measure the roofline, then the suites. Returns (records as dicts, Settings)."""
    dev = device if isinstance(device, Device) else get_device(device)
    torch_threads()
    quiet()
    dot = dict(paths(dev)).get("vulkan-dot")
    roof = measure(dev, quick, dot_device=dot)
    s = Settings(dev, roof, quick, repeats or (2 if quick else 10), 1 if quick else 2, 0.5 if quick else 8.0, only,
                 progress=progress)
    if dot is None:
        note(s, f"one kernel path: {dev.info.name} cannot enable shaderIntegerDotProduct")
    s.load_avg = [os.getloadavg()[0]]
    records = list(roof["records"])
    if "kernels" in suites:
        records += run_kernels(s, progress)
    if "models" in suites:
        records += run_models(s, model_names, progress)
    if "lm" in suites:
        from .lm import run_lm
        records += run_lm(s, progress)
    s.load_avg.append(os.getloadavg()[0])
    for r in roof["records"]:
        r.extra["load_avg_1m"] = s.load_avg    # at the start and the end of the run
    return [r.as_dict() for r in records], s


def main(args) -> int:
    """`vkq bench`: args from the CLI (suite, device, quick, repeats, only, models, json, plot)."""
    from .plot import plot
    suites = SUITES[1:] if args.suite == "all" else () if args.suite == "roofline" else (args.suite,)
    names = tuple(args.models.split(",")) if args.models else DEFAULT_MODELS
    records, s = run(suites, args.device, args.quick, args.repeats, args.only, names, progress=not args.no_progress)
    print(f"device: {s.name}; CPU: {cpu_name()}; {'quick' if s.quick else 'full'} run; "
          f"load average {s.load_avg[0]:.1f} at the start, {s.load_avg[-1]:.1f} at the end")
    print("roof GOP/s = min(compute roof, op/B x copy GB/s), the roofs sampled just before and after each Vulkan "
          "kernel; of roof = GOP/s / roof GOP/s (vkq.bench.roofline; each record's 'roofline' names its compute "
          "roof, 'roofline_fraction_at_start' is the fraction against the roofs measured first)")
    print_tables(records)
    print_models_memory(records)
    from .lm import print_lm
    print_lm(records)
    for what, got, met in ([] if s.quick else targets(records)):   # quick shapes are not the targets' shapes
        print(f"target: {what}: {got} -> {'met' if met else 'NOT met'}")
    for text in s.notes:
        print(f"note: {text}")
    if args.json:
        write_json(records, args.json)
        print(f"wrote {len(records)} records to {args.json}")
    if args.plot:
        plot(records, args.plot)
        print(f"wrote {args.plot}")
    return 0
