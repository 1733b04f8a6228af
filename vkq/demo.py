"""`vkq demo`: the main job, end to end on this machine's Vulkan devices.

1. every Vulkan device, and an exact packed-int8 round trip through each;
2. a CNN trained in seconds on scikit-learn's bundled 8x8 digits (real data, no download),
   quantized to int8 (PT2E, vkq's quantizer), compiled, run on the default device: fp32,
   int8 CPU-reference and int8 Vulkan accuracy, latency, the fallback list, the .vkq file,
   and the same program loaded back from that file.
"""
from __future__ import annotations

import time

import numpy as np

from . import packing
from .device import devices, get_device
from .executor import VulkanExecutor, run_reference
from .program import Node, Program, TensorSpec
from .quant import quantize


def roundtrip_program(shape, scale: float, zero_point: int, first: str, second: str) -> Program:
    """float -> quantize (layout `first`) -> repack (`second`) -> dequantize -> float."""
    q = dict(scale=scale, zero_point=zero_point)
    return Program(
        tensors={"x": TensorSpec(shape), "q": TensorSpec(shape, "int8", first, **q),
                 "r": TensorSpec(shape, "int8", second, **q), "y": TensorSpec(shape)},
        nodes=[Node("quantize", ["x"], ["q"], q), Node("repack", ["q"], ["r"]), Node("dequantize", ["r"], ["y"], q)],
        inputs=["x"], outputs=["y"])


def packed_roundtrip(device, shape=(2, 5, 7, 9), scale=0.05, zero_point=3, seed=0) -> dict:
    """Quantize on the device, change layout, read the packed words back: compare them with
    numpy's quantization and packing, bit for bit, both layouts."""
    x = np.random.default_rng(seed).normal(0, 3, shape).astype(np.float32)
    want = quantize(x, scale, zero_point)
    result = {}
    for first, second in (("4W4C", "4H4W"), ("4H4W", "4W4C")):
        prog = roundtrip_program(shape, scale, zero_point, first, second)
        ex = VulkanExecutor(prog, device, host_visible_all=True)
        t0 = time.perf_counter()
        env = ex(x, keep_all=True)
        ms = (time.perf_counter() - t0) * 1e3
        ref = run_reference(prog, x, keep_all=True)
        words_ok = np.array_equal(ex.buffers["q"].read(), packing.pack(want, first))
        result[f"{first}->{second}"] = dict(
            exact=bool(words_ok and np.array_equal(env["r"], want) and np.array_equal(env["y"], ref["y"])),
            ms=ms)
    return result


def _batches(x, batch):
    return [x[i:i + batch] for i in range(0, len(x) - batch + 1, batch)]


def digits_job(device_choice=None, out_path="digits_int8.vkq", batch=64) -> bool:
    """Train, quantize, compile, run, compare, save, reload. Returns True when the Vulkan
    program equals its CPU reference bit for bit and keeps the fp32 accuracy within 2 points."""
    from . import _quiet_third_party_logs, compile as vkq_compile, load
    _quiet_third_party_logs()
    import torch

    from .models import load_digits_split, train_digits_cnn

    t0 = time.perf_counter()
    model, (x_test, y_test), fp32_acc = train_digits_cnn(seconds=60)
    x_train, _, _, _ = load_digits_split()
    print(f"\n[2] digits CNN trained on scikit-learn's 8x8 digits in {time.perf_counter() - t0:.1f} s")
    calib = [(torch.from_numpy(b),) for b in _batches(x_train, batch)]
    t0 = time.perf_counter()
    prog = vkq_compile(model, (torch.from_numpy(x_test[:batch]),), calibration=calib, device=device_choice)
    print(f"    quantized (PT2E, {len(calib)} calibration batches) and compiled in {time.perf_counter() - t0:.1f} s: "
          f"{' -> '.join(n.op for n in prog.program.nodes)}")
    print(f"    fallback to the CPU: {prog.fallback_ops or 'none'}")
    xs = _batches(x_test, batch)
    ys = y_test[: len(xs) * batch]
    t0 = time.perf_counter()
    ref = np.concatenate([prog.run_reference(x) for x in xs])
    ref_ms = (time.perf_counter() - t0) * 1e3 / len(xs)
    prog(xs[0])   # build: buffers, packed weights, recorded sequences
    t0 = time.perf_counter()
    vk = np.concatenate([prog(x) for x in xs])
    vk_ms = (time.perf_counter() - t0) * 1e3 / len(xs)
    exact = np.array_equal(vk, ref)
    acc = lambda logits: float((logits.argmax(1) == ys).mean())
    with torch.no_grad():
        fp32_logits = np.concatenate([model(torch.from_numpy(x)).numpy() for x in xs])
    print(f"    device: {prog.device.info.name}")
    print(f"    accuracy on {len(ys)} test digits: fp32 {acc(fp32_logits):.4f} | int8 CPU reference {acc(ref):.4f} | "
          f"int8 Vulkan {acc(vk):.4f}")
    print(f"    Vulkan == CPU reference bit for bit: {exact}")
    print(f"    latency per batch of {batch}: Vulkan {vk_ms:.2f} ms, numpy reference {ref_ms:.2f} ms")
    mem = prog.memory
    print(f"    device memory for intermediates: {mem['arena_bytes']} B shared arena vs {mem['naive_bytes']} B naive")
    path = prog.save(out_path)
    again = load(path, device=device_choice)
    same = np.array_equal(again(xs[0]), vk[:batch])
    print(f"    saved {path} ({path.stat().st_size} B); loaded back, same output: {same}")
    return bool(exact and same and acc(vk) >= acc(fp32_logits) - 0.02)


def run_demo(args) -> int:
    infos = devices()
    print(f"[1] {len(infos)} Vulkan device(s)")
    ok = True
    for info in infos:
        res = packed_roundtrip(get_device(info.index))
        for route, r in res.items():
            ok &= r["exact"]
            print(f"    [{info.index}] {info.name:<36} packed int8 round trip {route}: "
                  f"{'exact' if r['exact'] else 'MISMATCH'} ({r['ms']:.1f} ms)")
    ok &= digits_job(args.device, getattr(args, "output", None) or "digits_int8.vkq")
    print("\ndemo " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1
