"""conv2d_q8 speed: GPU time (Vulkan timestamps, median after warm-up) and GOP/s of the int8
kernels on real layer shapes, and of a plain fp32 direct conv with the same tiling
(shaders/bench_conv2d_f32.comp) on the 3x3 shape, measured in the same run.

    GOP/s = 2 * OC * OH * OW * (C / groups) * KH * KW / GPU time

    .venv/bin/python bench/bench_conv.py --device llvmpipe [--repeats 10] [--json out.json]

Each int8 case is also checked against the numpy reference once (bit-exact) before timing.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vkq.bench import Record, gpu_times, print_table, stats_ms, write_json  # noqa: E402
from vkq.device import get_device, grid_1d  # noqa: E402
from vkq.executor import VulkanExecutor, run_reference  # noqa: E402
from vkq.ops import conv  # noqa: E402
from vkq.program import Node, Program, TensorSpec  # noqa: E402
from vkq.quant import quantize_multipliers  # noqa: E402

# name: (N, C, H, W, OC, K, stride, pad, groups)
SHAPES = {
    "resnet18 conv3x3 64->64 @56": (1, 64, 56, 56, 64, 3, 1, 1, 1),
    "mobilenetv2 pw 96->24 @56": (1, 96, 56, 56, 24, 1, 1, 0, 1),
    "mobilenetv2 pw 16->96 @112": (1, 16, 112, 112, 96, 1, 1, 0, 1),
    "mobilenetv2 dw3x3 32 @112 s1": (1, 32, 112, 112, 32, 3, 1, 1, 32),
    "mobilenetv2 dw3x3 96 @112 s2": (1, 96, 112, 112, 96, 3, 2, 1, 96),
}
F32_SHAPE = "resnet18 conv3x3 64->64 @56"


def conv_program(shape, rng):
    """A one-node conv2d_q8 program with random int8 data, and its input."""
    n, c, h, w, oc, k, stride, pad, groups = shape
    g = conv.ConvGeometry.of((n, c, h, w), (oc, c // groups, k, k), (stride,) * 2, (pad,) * 2, (1, 1), groups)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    weight = rng.integers(-127, 128, (oc, c // groups, k, k)).astype(np.int8)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    m, s = quantize_multipliers(np.full(oc, 1.0 / (40 * np.sqrt(c // groups * k * k) * 64)))
    tensors = {"x": TensorSpec((n, c, h, w), "int8", "4W4C"), "y": TensorSpec((n, oc, g.oh, g.ow), "int8", "4W4C"),
               "w": TensorSpec(weight.shape, "int8", "4W4C"), "b": TensorSpec((oc,), "int32"),
               "m": TensorSpec((oc,), "int32"), "s": TensorSpec((oc,), "int32")}
    attrs = dict(stride=[stride] * 2, padding=[pad] * 2, dilation=[1, 1], groups=groups, x_zp=-7, out_zp=3,
                 qmin=-128, qmax=127)
    prog = Program(tensors, [Node("conv2d_q8", ["x", "w", "b", "m", "s"], ["y"], attrs)], ["x"], ["y"],
                   {"w": weight, "b": bias, "m": m, "s": s})
    return prog, x, g


def ops_of(g: conv.ConvGeometry) -> int:
    return 2 * g.n * g.oc * g.oh * g.ow * g.cg * g.kh * g.kw


def bench_int8(device, name, shape, repeats, rng) -> Record:
    prog, x, g = conv_program(shape, rng)
    ex = VulkanExecutor(prog, device)
    got = ex(x)
    if not np.array_equal(got, run_reference(prog, x)):
        raise AssertionError(f"{name}: Vulkan output differs from the reference")
    steps = ex.segments[0][1].steps
    times = gpu_times(device, steps, repeats)
    med, p90 = stats_ms(times)
    return Record("conv", name, "x".join(map(str, shape[:5])) + f" k{shape[5]} s{shape[6]} g{shape[8]}",
                  "int8", conv.choose_kernel(g), device.info.name, med, p90, ops_of(g) / (med * 1e6),
                  extra={"min_ms": min(times) / 1e6})


def bench_f32(device, name, shape, repeats, rng) -> Record:
    """The fp32 direct conv with conv2d_general's tiling (TOC 16, 2x4 positions); checked
    against numpy within float rounding."""
    n, c, h, w, oc, k, stride, pad, groups = shape
    assert stride == 1 and groups == 1
    g = conv.ConvGeometry.of((n, c, h, w), (oc, c, k, k), (1, 1), (pad, pad), (1, 1), 1)
    toc, th, tw = 16, 2, 4
    G, defines, local = conv._lane_group(device)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    c4, tiles = g.c4, -(-oc // toc)
    xp = np.zeros((n, c4 * 4, h, w), np.float32)
    xp[:, :c] = x
    wp = np.zeros((tiles * toc, c4 * 4, k, k), np.float32)
    wp[:oc, :c] = weight
    # (t, o, c4, i, kh, kw) -> (t, c4, kh, kw, o, i)
    wp = wp.reshape(tiles, toc, c4, 4, k, k).transpose(0, 2, 4, 5, 1, 3).reshape(-1)
    bx = device.buffer(xp.reshape(n, c4, 4, h, w).transpose(0, 3, 4, 1, 2).reshape(-1))
    bw = device.buffer(np.concatenate([wp, np.zeros(G, np.float32)]))
    by = device.buffer(size=n * g.oh * g.ow * -(-oc // 4) * 4, dtype=np.float32)
    device.run([], upload=[bx, bw])
    lane_groups = n * tiles * -(-(-(-g.oh // th) * -(-g.ow // tw)) // G)
    d = device.dispatch("bench_conv2d_f32", [bx, bw, by], grid_1d(lane_groups * G, local), local=(local,),
                        spec=(G, toc, th, tw, k, k), push=(np.array([n, c, h, w]), np.array([n, oc, g.oh, g.ow]), pad),
                        defines=defines)
    device.run([d], download=[by])
    got = by.read().reshape(n, g.oh, g.ow, -1)[..., :oc].transpose(0, 3, 1, 2)
    want = _conv_f64(x, weight, pad)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    times = gpu_times(device, [d], repeats)
    med, p90 = stats_ms(times)
    return Record("conv", name + " (fp32)", "x".join(map(str, shape[:5])) + f" k{k} s1 g1", "fp32",
                  "bench_conv2d_f32", device.info.name, med, p90, ops_of(g) / (med * 1e6),
                  extra={"min_ms": min(times) / 1e6})


def _conv_f64(x, weight, pad):
    """float64 conv2d, stride 1, zero padding (numpy)."""
    n, c, h, w = x.shape
    oc, _, k, _ = weight.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    out = np.zeros((n, oc, oh, ow))
    for i in range(k):
        for j in range(k):
            out += np.einsum("oc,nchw->nohw", weight[:, :, i, j].astype(np.float64), xp[:, :, i:i + oh, j:j + ow])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="index or name (llvmpipe, swiftshader, ...)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--only", default=None, help="run the shapes whose name contains this")
    ap.add_argument("--json", default=None, help="write the records here")
    args = ap.parse_args(argv)
    device = get_device(args.device)
    rng = np.random.default_rng(0)
    print(f"device: {device.info.name}; lane group G = {conv._lane_group(device)[0]}; "
          f"LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', '(default)')}")
    records = []
    for name, shape in SHAPES.items():
        if args.only and args.only not in name:
            continue
        records.append(bench_int8(device, name, shape, args.repeats, rng))
        if name == F32_SHAPE:
            records.append(bench_f32(device, name, shape, args.repeats, rng))
    print_table(records)
    print("best of the repeats (the machine is shared; the median above includes other load):")
    for r in records:
        best = r.extra["min_ms"]
        print(f"  {r.name:38s} {best:8.3f} ms  {r.gops * r.median_ms / best:6.2f} GOP/s")
    if args.json:
        write_json(records, args.json)


if __name__ == "__main__":
    main()
