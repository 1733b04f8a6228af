"""GPU time of the linear kernels, from Vulkan timestamps: a table of (M, K, N), driver, op, GOP/s.

    .venv/bin/python bench/bench_linear.py [--device llvmpipe,swiftshader] [--reps 5] [--big]
                                           [--shapes 256x1024x1024,1x1024x1024]

ops: q8   linear_q8 (int8 x, int8 out, requantized)
     f32  the same tiling with float32 x and float32 weights (shaders/linear_float.comp W_F32):
          our plain fp32 GEMM, the baseline the int8 kernel is compared with
     wo   linear_weight_only (float x, int8 weights, float accumulation)
     dyn  linear_dynamic: per-row quantization of x + the int8 GEMM (both dispatches)
GOP/s counts 2*M*N*K operations over the summed GPU time of the op's dispatches, the median
and the best of --reps runs after one warm-up (on a CPU driver shared with other work the best
is the kernel, the median the machine). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vkq.device import get_device            # noqa: E402
from vkq.ops import linear                   # noqa: E402
from vkq.program import Node, TensorSpec     # noqa: E402
from vkq.registry import get_op              # noqa: E402

SHAPES = [(256, 512, 256), (256, 512, 512), (256, 1024, 1024), (128, 384, 384), (128, 384, 1536),
          (128, 1536, 384), (1, 1024, 1024), (1024, 2048, 1024)]
BIG = [(2048, 4096, 2048)]   # the largest of the FBGEMM study (seed 004): 34 GOP a run
OPS = ("q8", "f32", "wo", "dyn")


class Context:
    """The part of vkq.executor.BuildContext an op's build() uses, over buffers made here."""

    def __init__(self, device, tensors: dict, constants: dict):
        self.device, self._specs, self._consts = device, {}, constants
        self.buffers, self.uploads = {}, []
        for name, (spec, value) in tensors.items():
            self._specs[name] = spec
            words = spec.to_device(value) if value is not None else np.zeros(spec.device_words(), spec.word_dtype)
            self.buffers[name] = device.buffer(np.asarray(words).view(spec.word_dtype))
            self.uploads.append(self.buffers[name])

    def spec(self, name):
        return self._specs[name]

    def buffer(self, name):
        return self.buffers[name]

    def constant(self, name):
        return self._consts[name]

    def const_buffer(self, array, dtype=None):
        buf = self.device.buffer(np.ascontiguousarray(array, dtype=dtype))
        self.uploads.append(buf)
        return buf

    def scratch(self, words, dtype=np.int32):
        return self.device.buffer(size=max(1, words), dtype=dtype, host_visible=False)


def build(device, op: str, m: int, k: int, n: int, rng):
    """(Context, dispatches) of one op at (M, K, N) with random data."""
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, n).astype(np.float32)
    b = rng.normal(0, 1, n).astype(np.float32)
    xf = rng.normal(0, 1, (m, k)).astype(np.float32)
    if op == "f32":
        ctx = Context(device, {"x": (TensorSpec((m, k)), xf), "y": (TensorSpec((m, n)), None)}, {})
        wf = w.astype(np.float32) * ws[:, None]
        return ctx, [linear.float_gemm(ctx, ctx.buffer("x"), m, k, wf, np.ones(n, np.float32), b, ctx.buffer("y"))]
    consts = {"w": w, "s": ws, "b": b}
    if op == "q8":
        bias, mult, shift, qmin, qmax = linear.linear_q8_params(0.05, ws, 4.0, b, None, 3)
        consts = {"w": w, "b": bias, "m": mult, "s": shift}
        tensors = {"x": (TensorSpec((m, k), "int8", "4H4W"), rng.integers(-128, 128, (m, k)).astype(np.int8)),
                   "y": (TensorSpec((m, n), "int8", "4H4W"), None)}
        node = Node("linear_q8", ["x", "w", "b", "m", "s"], ["y"], dict(x_zp=-2, out_zp=3, qmin=qmin, qmax=qmax))
    else:
        tensors = {"x": (TensorSpec((m, k)), xf), "y": (TensorSpec((m, n)), None)}
        node = Node({"wo": "linear_weight_only", "dyn": "linear_dynamic"}[op], ["x", "w", "s", "b"], ["y"])
    ctx = Context(device, tensors, consts)
    return ctx, get_op(node.op).build(ctx, node)


def time_op(device, op, m, k, n, reps, rng):
    ctx, steps = build(device, op, m, k, n, rng)
    device.run([], upload=ctx.uploads)
    rec = device.record(steps, timestamps=True)
    rec.run()   # warm-up
    times = []
    for _ in range(reps):
        rec.run()
        times.append(sum(rec.dispatch_times_ns()))
    return float(np.median(times)), float(min(times))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="llvmpipe,swiftshader")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--shapes", help="MxKxN,... (default: the built-in list)")
    ap.add_argument("--big", action="store_true", help="also 2048x4096x2048 (lavapipe only)")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    print(f"{'M x K x N':>18}  {'driver':<12} {'op':<4} {'ms':>9} {'GOP/s':>7} {'best':>7}")
    for dev_name in args.device.split(","):
        device = get_device(dev_name)
        driver = "swiftshader" if "swiftshader" in device.info.name.lower() else device.info.driver
        todo = shapes + (BIG if args.big and driver != "swiftshader" else [])
        for m, k, n in todo:
            for op in args.ops.split(","):
                reps = args.reps if 2 * m * n * k < 4e9 else max(1, args.reps // 3)
                t, best = time_op(device, op, m, k, n, reps, np.random.default_rng(0))
                ops = 2 * m * n * k
                print(f"{m:>6}x{k:>5}x{n:>5}  {driver:<12} {op:<4} {t / 1e6:9.2f} {ops / t:7.2f} {ops / best:7.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
