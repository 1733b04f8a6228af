"""The `vkq` command line: devices, demo, compile, run, compare, verify, bench, embed, generate, compile-lm."""
from __future__ import annotations

import argparse
import json
import sys


def _add_device_arg(p):
    p.add_argument("--device", default=None,
                   help="device index or name (llvmpipe, lavapipe, swiftshader, ...); default $VKQ_DEVICE, "
                        "else the best device (a real GPU before a software driver)")


def cmd_devices(args) -> int:
    from .device import devices, select
    infos = devices()
    chosen = select(args.device)       # raises DeviceNotFound (listing the devices) on a bad choice
    if args.json:
        from .device import enabled_features
        print(json.dumps({"default": chosen.index, "devices": [{**d.as_dict(), "enabled_features": enabled_features(d)}
                                                                for d in infos]}, indent=2))
        return 0
    from .device import default_dot_product, default_texel_loads, enabled_features
    for d in infos:
        mark = "*" if d.index == chosen.index else " "
        feats = ", ".join(k for k, v in d.features.items() if v) or "none"
        enabled = enabled_features(d)
        sizes = (f"{d.min_subgroup_size}-{d.max_subgroup_size}" if d.max_subgroup_size else "not controllable")
        print(f"{mark}[{d.index}] {d.name}\n"
              f"     driver {d.driver} {d.driver_info}  type {d.type}  Vulkan {d.api_version}\n"
              f"     workgroup: {d.max_workgroup_invocations} invocations, size {d.max_workgroup_size}; "
              f"subgroup {d.subgroup_size} ({', '.join(d.subgroup_operations) or 'no operations'}); shared memory {d.max_shared_memory_bytes // 1024} KiB; "
              f"storage buffer range {d.max_storage_buffer_range // 2**20} MiB\n"
              f"     optional features: {feats}\n"
              f"     enabled by vkq: {', '.join(enabled) or 'none'}; subgroup sizes {sizes}"
              f"{' (kernels rely on ' + str(d.shuffle_lanes) + ' lanes)' if d.shuffle_lanes else ' (kernels use no subgroup shuffles)'}; "
              f"integer dot product {'accelerated: used' if default_dot_product(d) else 'not accelerated: not used by default'}; "
              f"texel loads {'used' if default_texel_loads(d) else 'not used by default'} "
              f"(texel buffers up to {d.max_texel_buffer_elements * 16 // 2**20} MiB)")
    print("(* = selected: --device / VKQ_DEVICE / default)")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    return run_demo(args)


def cmd_shaders(args) -> int:
    from . import shaders
    built = shaders.compile_all(validate=True, progress=lambda s, d: print(f"  ok  {s} {d or ''}"))
    print(f"{len(built)} shader variants compiled and validated with spirv-val ({shaders.compiler_version().splitlines()[0]})")
    return 0


def _load_inputs(paths):
    """Each path's .npy array; a file that is not one (empty, truncated, an .npz, pickled
    objects, text) is refused naming it, as are values that are not numbers."""
    import numpy as np
    arrays = []
    for path in paths:
        try:
            a = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise
        except (ValueError, EOFError, OSError, UnicodeError) as e:
            raise ValueError(f"{path}: not a .npy file of numbers ({type(e).__name__}: {e})") from None
        if not isinstance(a, np.ndarray):
            a.close()
            raise ValueError(f"{path}: an .npz archive; give one .npy file per input")
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{path}: holds {a.dtype} values; a program takes bool, integer or float arrays")
        arrays.append(a)
    return arrays


def cmd_run(args) -> int:
    """Run a saved program on a device; needs numpy and kp only (no torch)."""
    import numpy as np
    from .runtime import load
    prog = load(args.program, device=args.device)
    inputs = _load_inputs(args.input)
    outputs = prog(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    if args.output:
        if len(args.output) != len(outputs):
            print(f"vkq: the program has {len(outputs)} outputs, got {len(args.output)} --output paths",
                  file=sys.stderr)
            return 2
        for path, y in zip(args.output, outputs):
            np.save(path, y)
    for i, y in enumerate(outputs):
        print(f"output {i}: {y.dtype}{list(y.shape)}" + (f" -> {args.output[i]}" if args.output else ""))
    print(f"device: {prog.device.info.name}; {len(prog.fallback_ops)} op(s) on the CPU")
    return 0


def cmd_compare(args) -> int:
    """Per-node agreement between the device and the CPU reference of the same program, node
    by node and streaming (vkq.verify): the device's values against the reference's own run,
    and against the reference on the device's inputs (what the node itself computes)."""
    import numpy as np
    from .progfile import load_program
    from .verify import verify
    program = load_program(args.program)
    inputs = _load_inputs(args.input)
    if args.expect and len(args.expect) != len(program.outputs):       # (before the run, which may be long)
        raise ValueError(f"the program has {len(program.outputs)} outputs, got {len(args.expect)} --expect files")
    result = verify(program, *inputs, device=args.device, chain=True)
    worst = 0.0
    print(f"{'node':<40} {'op':<22} {'output':<28} {'max |vulkan - reference|':<26} on the device's inputs")
    for node in result.nodes:
        for o in node.outputs:
            worst = max(worst, o.run_abs if o.dtype != "float32" else 0.0)
            alone = "(cpu)" if node.where == "cpu" else f"{o.max_abs:g}{o.unit}"
            print(f"{node.name[:40]:<40} {node.op:<22} {o.dtype + str(list(o.shape)):<28} "
                  f"{f'{o.run_abs:g}{o.unit}':<26} {alone}")
    if args.expect:
        for path, t, want in zip(args.expect, program.outputs, _load_inputs(args.expect)):
            y = result.outputs[t].astype(np.float64).reshape(-1)
            if want.size != y.size:
                raise ValueError(f"{path}: {want.size} values, the output {t!r} has {y.size}")
            want = want.astype(np.float64).reshape(-1)
            cos = float(y @ want / (np.linalg.norm(y) * np.linalg.norm(want) + 1e-30))
            top = int(np.argmax(y) == np.argmax(want))
            print(f"output {t}: cosine with the float model {cos:.6f}, same argmax: {bool(top)}")
    print("integer tensors agree bit for bit" if worst == 0 else f"MISMATCH: up to {worst:g} int8 steps")
    return 0 if worst == 0 else 1


def cmd_verify(args) -> int:
    """Identical to the reference, bit for bit, or the first node that is not (exit 1)."""
    from .runtime import load
    prog = load(args.program, device=args.device)
    result = prog.verify(*_load_inputs(args.input))
    if args.all:
        print(result.table())
    print(result.summary())
    return 0 if result.identical else 1


def cmd_compile(args) -> int:
    """Quantize a .pt2 file or module:function with calibration files; write the .vkq."""
    from . import _quiet_third_party_logs
    _quiet_third_party_logs()
    import numpy as np
    import torch
    from .api import compile as compile_program
    from .calibration import ImageTransform, InputSpec, calibration_batches
    from .modelsource import load_model
    from .progfile import save_program
    from .registry import cpu_reason
    model, examples, dims = load_model(args.model, args.input_shape, static=args.static)
    calibration = None
    if args.calibration:
        free = [{0, *(d if isinstance(d, dict) else [i for i, x in enumerate(d or ()) if x is not None])}
                for d in (dims or [None] * len(examples))]      # (the Dims: calibration batches of any size)
        specs = [InputSpec(tuple(t.shape), t.detach().numpy().dtype, frozenset(f)) for t, f in zip(examples, free)]
        transform = ImageTransform(args.resize, args.crop, tuple(args.mean), tuple(args.std))
        batches = calibration_batches(args.calibration, specs, transform, args.limit, progress=not args.no_progress)
        calibration = [tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in b) for b in batches]
        print(f"calibration: {len(calibration)} batch(es)")
    else:
        print("calibration: none given; the example inputs only")
    program, fallback = compile_program(model, examples, calibration, args.scheme, dynamic_shapes=dims,
                                        progress=not args.no_progress, group_size=args.group_size,
                                        symmetric=not args.asymmetric)
    out = save_program(program, args.output or _default_output(args.model))
    on_cpu = sum(1 for n in program.nodes if cpu_reason(n, program.tensors) is not None)
    weights = sum(np.asarray(v).nbytes for v in program.constants.values())
    print(f"{args.model} -> {out} ({args.scheme}): {len(program.nodes)} nodes, "
          f"{len(program.nodes) - on_cpu} on Vulkan, {on_cpu} on the CPU; constants {weights:,} B")
    if program.dynamic:       # (by the Dims' names: what `vkq run` will take)
        print(f"  dynamic: {program.describe_dims()}")
    for op, reason in fallback:
        print(f"  on the CPU: {op}: {reason}")
    if not args.no_device:
        from .device import DeviceNotFound
        from .executor import VulkanExecutor
        from .vkinfo import VulkanUnavailable
        try:
            ex = VulkanExecutor(program, args.device)
        except (DeviceNotFound, VulkanUnavailable) as e:
            print(f"vkq: no memory plan: {e} (the program is written; --no-device skips this step)", file=sys.stderr)
            return 2
        mem = ex.memory
        print(f"device memory on {ex.device.info.name}: intermediates {mem['arena_bytes']:,} B in a shared arena "
              f"({mem['naive_bytes']:,} B without sharing, {mem['shared_tensors']} tensors share)")
    return 0


def _default_output(model: str) -> str:
    from pathlib import Path
    return str(Path(model).with_suffix(".vkq")) if ":" not in model else model.rpartition(":")[2] + ".vkq"


def _shape_arg(text: str) -> tuple:
    try:
        shape = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape such as 1,3,224,224") from None
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return shape


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _floats_arg(text: str) -> tuple:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers such as 0.485,0.456,0.406") from None


def cmd_bench(args) -> int:
    """Roofline, kernels and models with their peers in one run (vkq/bench/)."""
    from .bench import main as bench_main
    return bench_main(args)


def cmd_embed(args) -> int:
    """Sentence embeddings (all-MiniLM-L6-v2) on Vulkan: the pairwise cosine similarity matrix,
    or, for many sentences (--file), the embeddings themselves (--output)."""
    import numpy as np
    from .transformer import VulkanSentenceEncoder, cosine_matrix
    sentences = list(args.sentences)
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            sentences += [line.strip() for line in f if line.strip()]
    if not sentences:
        print("vkq: no sentences: give them as arguments or --file (one per line)", file=sys.stderr)
        return 2
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    enc = VulkanSentenceEncoder(scheme=args.scheme, device=args.device, batch=args.batch, lengths=lengths,
                                max_length=args.max_length)
    emb = enc.embed(sentences, progress=len(sentences) > args.batch)
    if args.output:
        np.save(args.output, emb)
        print(f"{len(sentences)} embeddings {emb.shape} -> {args.output}")

    def show(title, sim):
        print(title)
        print("      " + " ".join(f"{f'[{j}]':>7}" for j in range(len(sim))))
        for i, row in enumerate(sim):
            print(f"{f'[{i}]':>5} " + " ".join(f"{v:7.4f}" for v in row))
    small = len(sentences) <= 12      # a similarity matrix is readable for a few sentences
    if small:
        for i, s in enumerate(sentences):
            print(f"[{i}] {s}")
        show(f"cosine similarity, vkq {args.scheme} on {enc.program.device.info.name}:", cosine_matrix(emb))
    if args.compare:
        ref = enc.torch_embed(sentences)
        if small:
            show("cosine similarity, torch fp32 (CPU):", cosine_matrix(ref))
        cos = (emb * ref).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
        diff = np.abs(cosine_matrix(emb) - cosine_matrix(ref)).max()
        print(f"embedding cosine vkq vs fp32: min {cos.min():.5f}, mean {cos.mean():.5f}; "
              f"largest similarity difference {diff:.4f}")
    return 0


def cmd_generate(args) -> int:
    """Generate text with a .vkq language model or a packaged one (built on first use)."""
    from pathlib import Path
    from .lm import PACKAGED, load_lm, packaged_lm
    if args.model in PACKAGED:
        lm = packaged_lm(args.model, args.max_context, args.scheme, device=args.device, progress=not args.no_progress,
                         kv_cache=args.kv_cache or "float32")
    elif Path(args.model).suffix == ".vkq" or Path(args.model).is_file():
        lm = load_lm(args.model, device=args.device)
    else:
        raise ValueError(f"unknown model {args.model!r}: give a .vkq language-model file or one of "
                         f"{', '.join(sorted(PACKAGED))}")
    if args.kv_cache not in (None, lm.kv_cache):
        raise ValueError(f"{args.model}: its KV cache is {lm.kv_cache}, not {args.kv_cache} (the program fixes it: "
                         "compile it with vkq compile-lm --kv-cache)")
    r = lm.generate(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, seed=args.seed, chat=args.chat, stream=sys.stdout)
    sys.stdout.write("\n")
    s = r.stats
    mem = s.get("memory_bytes", {})
    print(f"vkq: {s['prompt_tokens']} prompt tokens, {s['new_tokens']} new ({s['stopped']}); time to first token "
          f"{s['time_to_first_token_s'] * 1e3:.0f} ms; prefill {s['prefill_tok_s']:.1f} tok/s; decode "
          f"{s['decode_tok_s']:.1f} tok/s; {s.get('dispatches_per_step', '?')} dispatches a decode step; device "
          f"memory: weights {mem.get('weights', 0) / 2**20:.0f} MiB, {lm.kv_cache} KV cache "
          f"{mem.get('cache', 0) / 2**20:.1f} MiB, "
          f"intermediates {mem.get('intermediates', 0) / 2**20:.0f} MiB ({lm.device.info.name})", file=sys.stderr)
    return 0


def cmd_compile_lm(args) -> int:
    """module:function returning (causal LM, tokenizer) -> a .vkq language model."""
    from .lm_compile import compile_lm
    from .modelsource import import_function
    model, tokenizer = _model_and_tokenizer(import_function(args.model)(), args.model)
    lm = compile_lm(model, tokenizer, max_context=args.max_context, scheme=args.scheme,
                    progress=not args.no_progress, group_size=args.group_size, kv_cache=args.kv_cache)
    out = lm.save(args.output or _default_output(args.model))
    print(f"wrote {out}: {len(lm.program.nodes)} nodes, {len(lm.program.fallback)} op(s) on the CPU, context "
          f"{lm.max_context}, vocabulary {lm.vocab_size}, {lm.kv_cache} KV cache")
    return 0


def _model_and_tokenizer(value, source: str):
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise ValueError(f"{source} must return (model, tokenizer), got {type(value).__name__}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="vkq", description="int8 PyTorch models on any Vulkan device")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the Vulkan devices and what shaders depend on")
    _add_device_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("demo", help="the main job: quantize, compile, run and compare a real model")
    _add_device_arg(p)
    p.add_argument("--output", default="digits_int8.vkq", help="where to save the compiled program")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("shaders", help="compile every shader variant and validate it with spirv-val")
    p.set_defaults(func=cmd_shaders)
    p = sub.add_parser("run", help="run a saved .vkq program (no torch needed)")
    p.add_argument("program")
    p.add_argument("--input", action="append", required=True, help=".npy file, once per program input")
    p.add_argument("--output", action="append", help=".npy path, once per program output")
    _add_device_arg(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("compare", help="per-node agreement of the device with the CPU reference")
    p.add_argument("program")
    p.add_argument("--input", action="append", required=True, help=".npy file, once per program input")
    p.add_argument("--expect", action="append", help="the float model's output (.npy), to report agreement")
    _add_device_arg(p)
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("verify", help="whether the device gives the reference's bits, node by node; else the "
                       "first node that does not (exit 1)")
    p.add_argument("program")
    p.add_argument("--input", action="append", required=True, help=".npy file, once per program input")
    p.add_argument("--all", action="store_true", help="a line for every node's outputs too")
    _add_device_arg(p)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("compile", help="quantize a model (.pt2 or module:function) with calibration data and "
                       "compile it into a .vkq program")
    p.add_argument("model", help="a torch.export.save'd .pt2 file, or package.module:function (or file.py:function) "
                   "returning (model, example_inputs)")
    p.add_argument("-o", "--output", help="the .vkq file to write (default: MODEL's name with .vkq)")
    p.add_argument("--calibration", nargs="+", metavar="DIR_OR_NPY",
                   help="calibration inputs: .npy files (one batch, or a stack of batches), .npz files (one array "
                        "per input), or folders of those or of images (default: the example inputs once)")
    p.add_argument("--scheme", default="static", choices=("static", "dynamic", "weight_only", "int4", "8da4w"),
                   help="int4 / 8da4w: every linear's weight in int4 groups along K, float / per-row int8 "
                        "activations (see --group-size, --asymmetric)")
    p.add_argument("--group-size", type=int, default=32, choices=(32, 64, 128, 256),
                   help="int4 / 8da4w: weights a group along K (default 32)")
    p.add_argument("--asymmetric", action="store_true",
                   help="int4 / 8da4w: a zero point a group (default: symmetric groups)")
    p.add_argument("--input-shape", action="append", type=_shape_arg, metavar="1,3,224,224",
                   help="an input's shape, once per input: for a .pt2 saved without example inputs "
                        "(or instead of a function's)")
    p.add_argument("--resize", type=_positive_int, help="images: resize the shorter side to this many pixels")
    p.add_argument("--crop", type=_positive_int, help="images: cut out the centre square of this size")
    p.add_argument("--mean", type=_floats_arg, default=(0.0,), help="images: per-channel mean subtracted after "
                   "scaling to [0, 1], e.g. 0.485,0.456,0.406 (default 0)")
    p.add_argument("--std", type=_floats_arg, default=(1.0,), help="images: per-channel divisor, e.g. "
                   "0.229,0.224,0.225 (default 1)")
    p.add_argument("--limit", type=_positive_int, help="use at most N calibration batches")
    p.add_argument("--static", action="store_true", help="a .pt2 exported with dynamic dims: compile its example "
                   "shapes only (default: one program for every shape within its Dims' bounds)")
    _add_device_arg(p)
    p.add_argument("--no-device", action="store_true", help="no memory plan (needs no Vulkan device)")
    p.add_argument("--no-progress", action="store_true", help="no stage lines or progress bars on stderr")
    p.set_defaults(func=cmd_compile)
    p = sub.add_parser("bench", help="roofline, kernels and models against torch and ncnn, same run")
    p.add_argument("suite", nargs="?", default="all", choices=("all", "roofline", "kernels", "models", "lm"))
    _add_device_arg(p)
    p.add_argument("--quick", action="store_true", help="tiny shapes, few repeats (a smoke test for CI)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats a measurement (default 10, quick 2)")
    p.add_argument("--only", default=None, help="the cases whose name contains this (or a family: linear, conv, ...)")
    p.add_argument("--models", default=None, help="comma-separated model names (default mobilenet_v2,resnet18)")
    p.add_argument("--json", default=None, help="write one record per measurement here")
    p.add_argument("--plot", default=None, help="draw the roofline chart of the kernels beside the models "
                   "into this .png")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("embed", help="sentence embeddings (all-MiniLM-L6-v2) on Vulkan: pairwise cosine similarities")
    p.add_argument("sentences", nargs="*")
    p.add_argument("--file", default=None, help="more sentences, one per line")
    p.add_argument("--output", default=None, help="save the embeddings (N, 384) here (.npy)")
    _add_device_arg(p)
    p.add_argument("--scheme", default="dynamic", choices=("dynamic", "weight_only"),
                   help="dynamic: per-token int8 activations x int8 weights; weight_only: float x int8 weights")
    p.add_argument("--batch", type=int, default=8, help="sentences of similar length run together, this many at a time")
    p.add_argument("--max-length", type=int, default=128, help="longer sentences are truncated to this many tokens")
    p.add_argument("--lengths", default=None, help="pad every sentence to the smallest of these lengths "
                   "(e.g. 16,128) instead of running each batch at its own length")
    p.add_argument("--compare", action="store_true", help="also the torch fp32 similarities, and the agreement")
    p.set_defaults(func=cmd_embed)
    p = sub.add_parser("generate", help="generate text with a .vkq language model (or smollm2, built on first use)")
    p.add_argument("model", help="a .vkq file from vkq compile-lm, or smollm2")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample among the most likely tokens reaching p")
    p.add_argument("--seed", type=int, default=None, help="the sampler's seed (the same seed, the same text)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-context", type=int, default=2048, help="a packaged model's context when it is built")
    p.add_argument("--scheme", default="dynamic", choices=("dynamic", "int4", "8da4w"),
                   help="a packaged model's weights: int8 (dynamic), or the GGUF's own int4 blocks")
    p.add_argument("--kv-cache", default=None, choices=("float32", "int8"),
                   help="a packaged model's KV cache when it is built (default float32); a .vkq file's is its own")
    _add_device_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no stage lines while a packaged model is built")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("compile-lm", help="compile a transformers causal LM (module:function returning "
                       "(model, tokenizer)) into a .vkq language model")
    p.add_argument("model", help="package.module:function or file.py:function returning (model, tokenizer)")
    p.add_argument("-o", "--output", help="the .vkq file to write")
    p.add_argument("--max-context", type=int, default=512)
    p.add_argument("--scheme", default="dynamic", choices=("dynamic", "weight_only", "static", "int4", "8da4w"))
    p.add_argument("--group-size", type=int, default=32, help="int4 / 8da4w: weights in groups of this many along K")
    p.add_argument("--kv-cache", default="float32", choices=("float32", "int8"),
                   help="int8: each token's key and value rows int8 with a float32 scale (a quarter of the bytes)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_compile_lm)
    args = parser.parse_args(argv)
    from .device import DeviceNotFound
    from .progfile import ProgramFileError
    from .vkinfo import VulkanUnavailable
    try:
        return args.func(args)
    except (DeviceNotFound, VulkanUnavailable, ProgramFileError, FileNotFoundError, ValueError) as e:
        print(f"vkq: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
