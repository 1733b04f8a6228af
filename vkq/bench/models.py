"""The model suite: whole networks end to end, wall clock per call (in-process, after warm-up)
and device memory — vkq int8 on Vulkan beside torch fp32 and int8 (FX, x86) on the CPU and the
same float model in ncnn fp32 on the same Vulkan device and on the CPU. vkq and torch fp32 (the
target's pair) are timed call for call, alternately (`paired_with` in their records): on a
shared machine whose speed drifts by 2x within minutes, two blocks of repeats taken one after
the other compared two phases as often as two programs.

For vkq, one call is also taken apart (per_call): the GPU time (the sum of the dispatches'
timestamps, the recorded sequences' dispatches re-recorded with timestamps), the wall time of
evaluating the recorded sequences alone (submit, every dispatch, the transfers, the wait), and
what remains of the call on the host (Python, packing the input, unpacking the output, CPU
ops), with the number of dispatches and of barriers."""
from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..device import Device
from ..progress import named_steps
from . import ncnn_peer
from .records import Record, Settings, note, times_record, wall_record
from .timing import cpu_name, gpu_times, paired_wall_times, quiet, stats_ms, torch_threads


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

            from ..models import imagenet_preprocess
            photos = [skimage.data.coffee(), skimage.data.chelsea(), skimage.data.astronaut(), skimage.data.rocket()]
            return [imagenet_preprocess(p) for p in photos[:count]]
        except ImportError:
            pass
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for _ in range(count)]


def tiny_mobilenet():
    """Quick mode: MobileNetV2's block types (stem, inverted residuals with and without the
    residual add, global pool, classifier) at toy sizes."""
    import torch
    from torch import nn

    from ..models import ConvBNAct, InvertedResidual

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


def tiny_resnet():
    """Quick mode: ResNet-18's stem, a BasicBlock with and one without downsampling, pool, fc."""
    import torch
    from torch import nn

    from ..models import BasicBlock

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
    raise NotImplementedError("MiniLM is not in the model suite yet (see vkq.bench.models._minilm_case)")


def _swin_t(quick: bool):
    """torchvision's Swin-T (random weights; vkq.zoo imports torchvision's Python models), or
    the zoo's two-stage one at 32 x 32 (quick): windowed attention with float softmax and
    matmuls between int8 linears. Opt-in (--models swin_t); to_ncnn writes CNNs only."""
    from .. import zoo
    if quick:
        return zoo.ZOO["swin"][1]().eval()
    return zoo.import_torchvision().models.swin_t().eval()


def model_cases(quick: bool) -> dict:
    """name -> () -> ModelCase. The default suite is DEFAULT_MODELS."""
    from .. import models
    if quick:
        return {"mobilenet_v2": lambda: ModelCase("mobilenet_v2 (tiny)", (1, 3, 32, 32), tiny_mobilenet,
                                                  lambda: _images((1, 3, 32, 32), 2)),
                "resnet18": lambda: ModelCase("resnet18 (tiny)", (1, 3, 32, 32), tiny_resnet,
                                              lambda: _images((1, 3, 32, 32), 2)),
                "swin_t": lambda: ModelCase("swin_t (tiny)", (1, 3, 32, 32), lambda: _swin_t(True),
                                            lambda: _images((1, 3, 32, 32), 2), ncnn=False)}
    return {"mobilenet_v2": lambda: ModelCase("mobilenet_v2", (1, 3, 224, 224),
                                              lambda: models.mobilenet_v2(pretrained=True),
                                              lambda: _images((1, 3, 224, 224), 4)),
            "resnet18": lambda: ModelCase("resnet18", (1, 3, 224, 224), lambda: models.resnet18(),
                                          lambda: _images((1, 3, 224, 224), 4)),
            "swin_t": lambda: ModelCase("swin_t", (1, 3, 224, 224), lambda: _swin_t(False),
                                        lambda: _images((1, 3, 224, 224), 4), ncnn=False)}


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


def run_models(s: Settings, names=DEFAULT_MODELS, show_progress: bool = True) -> list[Record]:
    """The model suite: end-to-end wall clock per call (in-process, after warm-up) and memory."""
    quiet()
    cases = model_cases(s.quick)
    records = []
    chosen = [n for n in names if not s.only or s.only in n]
    for name in (named_steps(chosen, "models", "model") if show_progress else chosen):
        if name in MODEL_HOOKS and name not in cases:
            try:
                case = MODEL_HOOKS[name](s.quick)
            except NotImplementedError as e:
                note(s, f"{name}: {e}")
                continue
        elif name not in cases:
            raise ValueError(f"no model {name!r} in the suite (known: {', '.join([*cases, *MODEL_HOOKS])})")
        else:
            case = cases[name]()
        records += bench_model(s, case)
    return records


def bench_model(s: Settings, case: ModelCase) -> list[Record]:
    torch = torch_threads()
    torch.manual_seed(0)       # the random-weight models (ResNet-18, Swin-T) the same in every run
    model = case.build()
    calib = case.inputs()
    x = calib[0]
    shape = "x".join(map(str, case.shape))
    ops = 2 * _macs(model, x)
    cpu = cpu_name()
    with torch.inference_mode():
        want = model(x).numpy()

    def fp32_call():
        with torch.inference_mode():
            model(x)
    # torch fp32 and vkq are timed call for call, alternately (the ratio the target reads is
    # then taken within each phase of a machine whose speed drifts; _vkq_model)
    rec, fp32_times = _vkq_model(s, case, model, calib, shape, ops, want, fp32_call)
    out = [times_record("models", case.name, shape, "fp32", "torch-cpu", cpu, fp32_times, ops,
                        {"paired_with": "vulkan"}), rec]
    out += _torch_int8_model(s, case, model, calib, shape, ops, want, cpu)
    if case.ncnn:
        out += _ncnn_model(s, case, model, x, shape, ops, want, cpu)
    return out


_COMPILED: dict = {}   # (case name, weights digest) -> (Program, fallback, compile seconds), for this process


def _weights_digest(model) -> str:
    """A digest of the model's parameters and buffers: a case rebuilt with other weights (in
    another test, on another device) is another program, not the cached one (whose outputs
    were then compared with the new model's: Swin-T's cosine read 0.22)."""
    import torch
    h = hashlib.sha1()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())   # any dtype
    return h.hexdigest()


def _vkq_model(s, case, model, calib, shape, ops, want, peer) -> tuple[Record, list]:
    """vkq int8 on Vulkan: quantize (PT2E) with the calibration inputs, compile, run per call
    (upload, every dispatch, download), timed alternately with peer() (torch fp32: its times
    are returned with the record). Memory: every device buffer the program holds, its arena,
    and the saved .vkq against the fp32 state dict. Then one call taken apart (per_call)."""
    import torch

    from ..api import compile as vkq_compile, quantize
    from ..runtime import CompiledProgram
    key = case.name, _weights_digest(model)
    if key not in _COMPILED:    # the Program does not depend on the device
        t0 = time.perf_counter()
        converted = quantize(model, (calib[0],), [(c,) for c in calib], progress=s.progress)
        program, fallback = vkq_compile(converted, (calib[0],), progress=s.progress)
        _COMPILED[key] = program, fallback, time.perf_counter() - t0
    program, fallback, compile_s = _COMPILED[key]
    prog = CompiledProgram(program, s.device)
    xn = calib[0].numpy()
    with _BufferTally(s.device) as tally:
        t0 = time.perf_counter()
        got = prog(xn)
        build_s = time.perf_counter() - t0
    calls, peer_times = paired_wall_times(lambda: prog(xn), peer, s.repeats, s.warmup, s.budget_s)
    rec = times_record("models", case.name, shape, "int8", "vulkan", s.name, calls, ops,
                       {"paired_with": "torch-cpu fp32"})
    rec.extra.update(per_call(s, prog, lambda: prog(xn)))
    with tempfile.TemporaryDirectory() as tmp:
        vkq_bytes = prog.save(Path(tmp) / "model.vkq").stat().st_size
        torch.save(model.state_dict(), Path(tmp) / "model.pt")
        pt_bytes = (Path(tmp) / "model.pt").stat().st_size
    mem = prog.memory
    rec.extra.update({
        "cpu_ops": len(fallback), "dot_product": bool(getattr(s.device, "dot_product", False)),
        "cosine_vs_fp32": _cosine(got, want), "compile_s": compile_s, "first_call_s": build_s,
        "device_bytes": tally.nbytes, "arena_bytes": mem["arena_bytes"],
        "constant_bytes": int(sum(np.asarray(v).nbytes for v in program.constants.values())),
        "vkq_file_bytes": vkq_bytes, "fp32_state_dict_bytes": pt_bytes, "weights_ratio": vkq_bytes / pt_bytes})
    return rec, list(peer_times)


def recordings(prog) -> list:
    """The recorded sequences (vkq.device.Recording) a CompiledProgram evaluates per call."""
    return [seg[1] for seg in prog.executor.segments if seg[0] == "vulkan"]


def barrier_count(recs) -> int | None:
    """Memory barriers recorded between dependent dispatches, where the Recordings say how many
    (an int or a list in `barriers`); None where they do not."""
    counts = [getattr(r, "barriers", None) for r in recs]
    if not counts or any(c is None for c in counts):
        return None
    return sum(c if isinstance(c, int) else len(c) for c in counts)


def per_call(s: Settings, prog, call) -> dict:
    """One call (call(): the program on its input) taken apart, measured from the outside:
    gpu_ms     the sum of its dispatches' GPU times (its sequences' dispatches re-recorded in
               one sequence with timestamps; median of repeats)
    eval_ms    wall time of evaluating its recorded sequences alone (submit, dispatches,
               transfers, wait), as the call does; median of repeats
    host_ms    the median of (call - eval) over pairs of a call and an evaluation run back to
               back: Python, packing the input, unpacking the output, CPU ops. (Taken as the
               difference of two medians measured one after the other it swung by several ms
               with the machine's phase, e.g. 7.5 ms for MobileNetV2 where pairs give ~0.3.)
    dispatch_cost_ms  dispatches x the roofline's chain_dispatch_ms: what the call pays for its
               number of dispatches beyond their work (in eval_ms; fusion is what lowers it)
    plus the counts of sequences, dispatches and (where vkq.device says) barriers."""
    recs = recordings(prog)
    steps = [st for r in recs for st in r.steps]
    gpu_ms = stats_ms(gpu_times(s.device, steps, s.repeats, s.warmup, s.budget_s))[0] if steps else 0.0

    def evaluate():
        for r in recs:
            r.run()
    calls, evals = paired_wall_times(call, evaluate, s.repeats, s.warmup, s.budget_s, settled=False)
    eval_ms = stats_ms(evals)[0]
    host_ms = max(0.0, float(np.median(np.subtract(calls, evals))) / 1e6)
    return {"gpu_ms": gpu_ms, "eval_ms": eval_ms, "host_ms": host_ms,
            "sequences": len(recs), "dispatches": len(steps), "barriers": barrier_count(recs),
            "dispatch_cost_ms": len(steps) * s.roof.get("chain_dispatch_ms", 0.0)}


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
        note(s, f"torch int8 (FX) {case.name}: {type(e).__name__}: {e}")
        return []
    x = calib[0]
    with torch.inference_mode():
        got = q(x).numpy()
        rec = wall_record(s, "models", case.name, shape, "int8", "torch-cpu", cpu, lambda: q(x), ops,
                          {"kernel": "FX x86"})
    rec.extra["cosine_vs_fp32"] = _cosine(got, want)
    return [rec]


def _ncnn_model(s, case, model, x, shape, ops, want, cpu) -> list[Record]:
    """The same float model in ncnn (to_ncnn), fp32, on the same Vulkan device and on the CPU."""
    gpu, why = ncnn_peer.gpu_index(s.device)
    if gpu is None and ncnn_peer.module() is None:
        note(s, f"ncnn models skipped: {why}")
        return []
    param, weights, out_blob = ncnn_peer.to_ncnn(model, tuple(case.shape[1:]))
    xi = x[0].numpy()
    out = []
    for backend, where, dev in (("ncnn-vulkan", gpu, s.name), ("ncnn-cpu", None, cpu)):
        if backend == "ncnn-vulkan" and gpu is None:
            note(s, f"ncnn Vulkan skipped: {why}")
            continue
        net = ncnn_peer.NcnnNet(param, weights, out_blob, where)
        try:
            got = net(xi)
            rec = wall_record(s, "models", case.name, shape, "fp32", backend, dev, lambda: net(xi), ops)
        finally:
            net.close()
        rec.extra["cosine_vs_fp32"] = _cosine(got, want)
        out.append(rec)
    return out
