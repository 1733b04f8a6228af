"""The model zoo's closing table: per architecture, program nodes, nodes on the CPU, cosine of
vkq's output with PT2E's, and latency on a Vulkan device beside torch fp32 on the CPU.

    PYTHONPATH=.:<site with torchvision, timm> .venv/bin/python bench/zoo_table.py \
        [--device llvmpipe] [--reps 5] [--models a,b] [--json out.json] [--markdown]
    ... --count-only     program nodes and CPU nodes only (run it with another checkout's vkq
                         first on PYTHONPATH to count "before"; the zoo is loaded from this
                         tree's vkq/zoo.py either way)

Latency: wall clock per call, median of --reps after one warm-up (vkq.bench.timing), batch 1;
torch fp32 on one thread (on a shared machine OpenMP's spinning threads made the default
setting's times swing 10x between runs; one thread is the stable row). One run, one machine: compare the columns of a row, not two runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parent.parent


def load_zoo():
    spec = importlib.util.spec_from_file_location("vkq_zoo_table_zoo", ROOT / "vkq" / "zoo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod               # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def first(out):
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def timed(fn, reps):
    from vkq.bench.timing import stats_ms, wall_times
    return stats_ms(wall_times(fn, repeats=reps, warmup=1))[0]


def row(zoo, name, args):
    from vkq import api
    from vkq.lower import lower
    from vkq.registry import get_op
    case = zoo.build(name)
    try:
        gm = api.quantize(case.model, case.inputs, case.calibration, progress=False)
        program = lower(gm, case.inputs)
    except Exception as e:                      # what a crash looked like before
        return {"model": name, "library": case.library, "error": f"{type(e).__name__}: {e}"[:120]}
    cpu = Counter(n.op if n.op != "torch_op" else n.attrs["target"] for n in program.nodes
                  if not get_op(n.op).on_vulkan)
    r = {"model": name, "library": case.library, "nodes": len(program.nodes), "cpu_nodes": sum(cpu.values()),
         "cpu_ops": dict(cpu)}
    if args.count_only:
        return r
    from vkq.executor import VulkanExecutor, run_reference
    xs = [a.numpy() for a in case.inputs]
    with torch.no_grad():
        ref = first(gm(*case.inputs))
        r["cos_pt2e"] = cosine(first(run_reference(program, *xs)), ref)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        r["torch_fp32_ms"] = timed(lambda: case.model(*case.inputs), args.reps)
        torch.set_num_threads(threads)
    try:
        ex = VulkanExecutor(program, args.device)
    except ValueError as e:                     # rank-5 int8 tensors, until they can be packed
        r["vulkan_error"] = str(e)[:80]
        return r
    r["cos_vulkan_pt2e"] = cosine(first(ex(*xs)), ref)
    r["vkq_ms"] = timed(lambda: ex(*xs), args.reps)
    return r


def markdown(rows, before=None):
    before = {b["model"]: b for b in (before or [])}
    out = ["| model | library | nodes | CPU nodes before | CPU nodes after | cosine with PT2E | "
           "vkq on Vulkan (ms) | torch fp32 CPU (ms) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = before.get(r["model"], {})
        was = b.get("cpu_nodes", "crash" if "error" in b else "–")
        if "error" in r:
            out.append(f"| {r['model']} | {r['library']} | – | {was} | error: {r['error']} | | | |")
            continue
        out.append(f"| {r['model']} | {r['library']} | {r['nodes']} | {was} | {r['cpu_nodes']} | "
                   f"{r.get('cos_pt2e', float('nan')):.4f} | {r.get('vkq_ms', float('nan')):.1f} | "
                   f"{r.get('torch_fp32_ms', float('nan')):.1f} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="llvmpipe")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--models", default=None, help="comma-separated subset of vkq.zoo.ZOO")
    p.add_argument("--count-only", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--before", default=None, help="a --count-only JSON of another checkout, for the table")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    zoo = load_zoo()
    names = args.models.split(",") if args.models else list(zoo.ZOO)
    rows = []
    for name in names:
        r = row(zoo, name, args)
        rows.append(r)
        print(json.dumps(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.markdown:
        before = json.loads(Path(args.before).read_text()) if args.before else None
        print(markdown(rows, before))


if __name__ == "__main__":
    sys.exit(main())
