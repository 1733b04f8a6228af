"""`vkq demo`: the main job, end to end on this machine's Vulkan devices."""
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


def run_demo(args) -> int:
    infos = devices()
    print(f"vkq demo: {len(infos)} Vulkan device(s)")
    ok = True
    for info in infos:
        dev = get_device(info.index)
        res = packed_roundtrip(dev)
        for route, r in res.items():
            ok &= r["exact"]
            print(f"  [{info.index}] {info.name:<36} packed int8 round trip {route}: "
                  f"{'exact' if r['exact'] else 'MISMATCH'} ({r['ms']:.1f} ms)")
    return 0 if ok else 1
