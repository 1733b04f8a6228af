"""torchvision's and timm's architectures through vkq, one model a family: the smallest of each
torchvision builder module and of each timm module, with random weights (BatchNorm statistics
from training-mode passes, vkq.zoo), static int8, compiled and run on Vulkan. Each is checked
against the CPU reference (outputs bit for bit where the program is all-integer, else cosine
>= 0.9995: float islands round differently; where they part, vkq.verify names the node, streaming) and
PT2E's eager output (cosine >= 0.99; below that the op-by-op check decides: when every node, fed
PT2E's inputs, is within one step of PT2E, the random network amplifies rounding, which is
reported, not counted). The check that found, on 2026-11-29, timm's
BEiT with an all-zero output (its head's weights below XNNPACK's least weight scale) and CrossViT's
layer_norm_q8 a step off its reference:

    .venv/bin/python tools/probe_vision.py [--library torchvision,timm] [--only beit_base_patch16_224]
                                           [--max-params 120e6] [--timeout 600] [--device llvmpipe]
                                           [--scheme static|dynamic|weight_only]

--scheme dynamic / weight_only: the same models under that scheme (convs, pools and norms in float
on the device; only the linears int8), against the reference and PT2E by cosine.

Models run in a subprocess each (a crash or a timeout is one failed line). Inputs: 64x64 images
where the model takes them, else the first of 96, 128, 224 and timm's own size (HaloNet's 256) it
takes; clips of 4-16 frames; RAFT two 128x128 images. Detection models are left out (their outputs
are lists of boxes, by data-dependent control flow). Prints one JSON line a model; the exit status
is the number of failures.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")

from vkq import zoo  # noqa: E402


def _params(make) -> int:
    try:
        with torch.device("meta"):
            return sum(p.numel() for p in make().parameters())
    except Exception:
        return -1


def torchvision_models(max_params: float) -> dict:
    """The smallest model of each torchvision builder module (classification, segmentation,
    video, optical flow) -> its builder name."""
    tv = zoo.import_torchvision()
    best = {}
    for name in tv.models.list_models():
        builder = tv.models.get_model_builder(name)
        module = builder.__module__
        if ".detection" in module or ".quantization" in module:
            continue
        n = _params(lambda: _tv_build(name))
        if 0 < n <= max_params and (module not in best or n < best[module][1]):
            best[module] = (name, n)
    return {name: ("torchvision", n) for name, n in best.values()}


def timm_models(max_params: float) -> dict:
    timm = zoo.import_timm()
    from timm.models._registry import _model_to_module
    best = {}
    for name in timm.list_models():
        module = _model_to_module.get(name, name)
        n = _params(lambda: timm.create_model(name, num_classes=10))
        if 0 < n <= max_params and (module not in best or n < best[module][1]):
            best[module] = (name, n)
    return {name: ("timm", n) for name, n in best.values()}


def _tv_build(name):
    tv = zoo.import_torchvision()
    module = tv.models.get_model_builder(name).__module__
    if ".segmentation" in module:
        return zoo._SegmentationOut(tv.models.get_model(name, weights=None, weights_backbone=None, num_classes=5,
                                                        aux_loss=False))
    if ".optical_flow" in module:
        return _Flow(tv.models.get_model(name, weights=None))
    kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    return tv.models.get_model(name, weights=None, num_classes=5, **kw)


class _Flow(torch.nn.Module):
    """RAFT's last flow estimate after 2 updates (its forward takes the count as an argument)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, a, b):
        return self.model(a, b, num_flow_updates=2)[-1]


def _inputs(model, library: str, name: str):
    """make_input(batch, seed) of the smallest input the model takes."""
    if library == "torchvision" and "raft" in name:
        def pair(batch, seed):
            g = torch.Generator().manual_seed(seed)
            return tuple(torch.randn(batch, 3, 128, 128, generator=g) for _ in range(2))
        return pair
    video = library == "torchvision" and name.startswith(("r3d", "mc3", "r2plus1d", "s3d", "mvit", "swin3d"))
    native = getattr(model, "pretrained_cfg", {}).get("input_size", (3, 224, 224))[-1]     # (timm's: HaloNet 256)
    sizes = [(t, s) for t in (4, 8, 16) for s in (32, 64, 112, 224)] if video else \
        [(0, s) for s in dict.fromkeys((64, 96, 128, 224, native))]
    for frames, size in sizes:
        make = zoo._video(frames, size) if video else zoo._image(size)
        try:
            with torch.no_grad():
                model(*make(1, 0))
            return make
        except Exception:
            continue
    raise RuntimeError(f"{name}: no input size of {sizes} works")


def _build(name: str, library: str):
    torch.manual_seed(0)
    if library == "torchvision":
        model = _tv_build(name).eval()
    else:
        timm = zoo.import_timm()
        try:
            model = timm.create_model(name, num_classes=10, img_size=64).eval()
            make = zoo._image(64)
            with torch.no_grad():
                model(*make(1, 0))
            return zoo.calibrated_bn(zoo.random_heads(model), make), make
        except Exception:
            torch.manual_seed(0)
            model = timm.create_model(name, num_classes=10).eval()
    make = _inputs(model, library, name)
    return zoo.calibrated_bn(zoo.random_heads(model), make), make


def _first(out):
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def check(name: str, library: str, device: str, scheme: str = "static") -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_lower import assert_matches_pt2e, cosine
    from vkq import api
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.lower import lower
    from vkq.registry import cpu_reason
    from vkq.verify import verify
    r = {"model": name, "library": library} | ({"scheme": scheme} if scheme != "static" else {})
    model, make = _build(name, library)
    inputs, calibration = make(1, 0), [make(1, 1 + i) for i in range(2)]
    t = time.time()
    gm = api.quantize(model, inputs, calibration, scheme=scheme, progress=False)
    program = lower(gm, inputs)
    r["compile_s"] = round(time.time() - t, 1)
    cpu = sorted({n.op if n.op != "torch_op" else str(n.attrs["target"]) for n in program.nodes
                  if cpu_reason(n, program.tensors)})
    r.update(nodes=len(program.nodes), cpu_ops=cpu)
    xs = [a.numpy() for a in inputs]
    with torch.no_grad():
        want = _first(gm(*inputs))
        fp32 = _first(model(*inputs))
    r["cos_pt2e_fp32"] = round(cosine(want, fp32), 4) if np.abs(want).max() > 0 else 0.0   # (quantization's own loss)
    outputs = lambda o: dict(zip(program.outputs, o if isinstance(o, tuple) else (o,)))
    ref = outputs(run_reference(program, *xs))
    out = _first([ref[t] for t in program.outputs])
    r["cos_pt2e"] = round(cosine(out, want), 4) if np.abs(want).max() > 0 else None
    if not np.abs(want).max() > 0:
        r["problem"] = "PT2E's output is all zeros"
    elif r["cos_pt2e"] < 0.99 and scheme != "static":
        # (PT2E's dynamic graph keeps x float; vkq quantizes it per row on the device)
        r["note"] = "below 0.99 with PT2E, whose linears under this scheme read x unquantized"
    elif r["cos_pt2e"] < 0.99:
        try:
            assert_matches_pt2e(program, gm, inputs if len(inputs) > 1 else inputs[0], min_cos=-1.0)
            r["note"] = "every op within one step of PT2E: the random network amplifies rounding"
        except AssertionError as e:
            r["problem"] = f"op by op: {str(e)[:200]}"
    got = outputs(VulkanExecutor(program, device)(*xs))
    ends = set(program.inputs) | set(program.outputs)
    integer = all(program.tensors[t].dtype != "float32" or t in ends for n in program.nodes for t in n.outputs)
    if integer:
        if not all(np.array_equal(got[t], ref[t]) for t in program.outputs):
            first = verify(program, *xs, device=device).first
            at = f"{first.name} ({first.op}; {', '.join(first.shaders)})" if first else "?"
            r["problem"] = f"Vulkan differs from the reference at {at} (all-integer program)"
    else:
        c = min(cosine(got[t], ref[t]) for t in program.outputs)
        r["cos_vulkan_ref"] = round(c, 6)
        if c < 0.9995:
            # the nodes whose integer outputs differ from their reference on the device's own inputs
            steps = [n for n in verify(program, *xs, device=device).differing_nodes
                     if any(o.differing and o.dtype != "float32" for o in n.outputs)]
            exact = [n for n in steps
                     if all(program.tensors[i].dtype != "float32" for i in program.nodes[n.index].inputs)]
            if exact:
                r["problem"] = f"{exact[0].op} {exact[0].name} differs from its reference with the same int8 inputs"
            else:
                node = steps[0] if steps else None
                r["note"] = (f"Vulkan's output at cosine {c:.6f} with the reference, from "
                             f"{node.op if node else '?'} {node.name if node else ''} of float inputs: "
                             f"float rounding across a step, amplified")
    if cpu:
        r["problem"] = r.get("problem") or f"on the CPU: {cpu}"
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--library", default="torchvision,timm")
    p.add_argument("--only", default=None, help="comma-separated model names (torchvision or timm)")
    p.add_argument("--max-params", type=float, default=120e6)
    p.add_argument("--timeout", type=int, default=600, help="seconds a model")
    p.add_argument("--device", default="llvmpipe")
    p.add_argument("--scheme", default="static", choices=("static", "dynamic", "weight_only"))
    p.add_argument("--one", nargs=2, metavar=("LIBRARY", "NAME"), help=argparse.SUPPRESS)   # the subprocess
    args = p.parse_args(argv)
    if args.one:
        try:
            r = check(args.one[1], args.one[0], args.device, args.scheme)
        except Exception as e:
            r = {"model": args.one[1], "library": args.one[0], "problem": f"{type(e).__name__}: {str(e)[:300]}"}
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    if args.only:     # (any model of either library, not only a family's smallest)
        tv_names = set(zoo.import_torchvision().models.list_models())
        models = {m: ("torchvision" if m in tv_names else "timm", 0) for m in args.only.split(",")}
    else:
        models = {}
        libraries = args.library.split(",")
        if "torchvision" in libraries:
            models.update(torchvision_models(args.max_params))
        if "timm" in libraries:
            models.update(timm_models(args.max_params))
    print(f"{len(models)} models", file=sys.stderr, flush=True)
    failures = 0
    for name, (library, _) in models.items():
        t = time.time()
        cmd = [sys.executable, __file__, "--one", library, name, "--device", args.device, "--scheme", args.scheme]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            r = json.loads(lines[0][7:]) if lines else {"model": name, "library": library,
                                                        "problem": "crashed: " + proc.stderr[-300:]}
        except subprocess.TimeoutExpired:
            r = {"model": name, "library": library, "problem": f"over {args.timeout} s"}
        r["s"] = round(time.time() - t)
        failures += "problem" in r
        print(json.dumps(r), flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
