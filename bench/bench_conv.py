"""conv2d_q8 on the layer shapes of ResNet-18, MobileNetV2 and EfficientNet/MobileNetV3, on both
kernel paths (fp32 multiply-adds, and the integer dot product variants where the device can
enable shaderIntegerDotProduct), against the device's roofline measured first in the same run.

    .venv/bin/python bench/bench_conv.py [--device llvmpipe] [--only NAME] [--repeats 10] [--json out.json]

Per shape and path: GPU time (Vulkan timestamps, median of the repeats), GOP/s (2 x multiply-
adds), the fraction of the int32 multiply-add roof (what the targets are held to) and, for the
DOT path, its speedup over the fp32 path in this run. Every case is checked bit for bit against
the numpy reference before it is timed. The peers (torch, ncnn) and the full kernel suite are
`vkq bench kernels --only conv`; this script is the conv kernels' own, wider, set of shapes.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from vkq.bench import kernels, roofline, timing  # noqa: E402
from vkq.device import get_device  # noqa: E402
from vkq.ops import conv  # noqa: E402

# name -> (N, C, H, W, OC, K, stride, pad, groups)
SHAPES = {
    "resnet18 stem 7x7 s2 3->64 @224": (1, 3, 224, 224, 64, 7, 2, 3, 1),
    "resnet18 conv3x3 64->64 @56": (1, 64, 56, 56, 64, 3, 1, 1, 1),
    "resnet18 conv3x3 s2 64->128 @56": (1, 64, 56, 56, 128, 3, 2, 1, 1),
    "resnet18 conv3x3 256->256 @14": (1, 256, 14, 14, 256, 3, 1, 1, 1),
    "resnet18 conv3x3 512->512 @7": (1, 512, 7, 7, 512, 3, 1, 1, 1),
    "resnet18 down 1x1 s2 64->128 @56": (1, 64, 56, 56, 128, 1, 2, 0, 1),
    "mobilenetv2 stem 3x3 s2 3->32 @224": (1, 3, 224, 224, 32, 3, 2, 1, 1),
    "mobilenetv2 pw 16->96 @112": (1, 16, 112, 112, 96, 1, 1, 0, 1),
    "mobilenetv2 pw 96->24 @56": (1, 96, 56, 56, 24, 1, 1, 0, 1),
    "mobilenetv2 pw 64->384 @14": (1, 64, 14, 14, 384, 1, 1, 0, 1),
    "mobilenetv2 pw 960->320 @7": (1, 960, 7, 7, 320, 1, 1, 0, 1),
    "mobilenetv2 dw3x3 32 @112 s1": (1, 32, 112, 112, 32, 3, 1, 1, 32),
    "mobilenetv2 dw3x3 96 @112 s2": (1, 96, 112, 112, 96, 3, 2, 1, 96),
    "mobilenetv2 dw3x3 960 @7 s1": (1, 960, 7, 7, 960, 3, 1, 1, 960),
    "efficientnet dw5x5 240 @14": (1, 240, 14, 14, 240, 5, 1, 2, 240),
    "efficientnet dw5x5 72 @56 s2": (1, 72, 56, 56, 72, 5, 2, 2, 72),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--only", default=None, help="shapes whose name contains this")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    timing.quiet()
    dev = get_device(args.device)
    paths = kernels.paths(dev)
    roof = roofline.measure(dev, dot_device=dict(paths).get("vulkan-dot"))
    load = [os.getloadavg()[0]]
    print(f"{dev.info.name}: int32 MAD {roof['int32_gops']:.1f} GOP/s, fp32 FMA {roof['fp32_gflops']:.1f} GFLOP/s, "
          + (f"int8 dot4 {roof['dot4_gops']:.1f} GOP/s, " if "dot4_gops" in roof else "")
          + f"copy {roof['copy_gbps']:.2f} GB/s; load average {load[0]:.1f}")
    print(f"{'shape':36s} {'kernel':17s} {'path':10s} {'ms':>8s} {'GOP/s':>7s} {'of int32':>8s} {'dot/fp32':>8s}")
    rows = []
    for name, p in SHAPES.items():
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(0)
        prog, x = kernels.conv_program(p, rng)
        ops = 2 * kernels.conv_macs(p)
        n, c, h, w, oc, k, stride, pad, groups = p
        kernel = conv.choose_kernel(conv.ConvGeometry.of((n, c, h, w), (oc, c // groups, k, k), (stride,) * 2,
                                                         (pad,) * 2, (1, 1), groups))
        times = {}
        for backend, d in paths:
            if backend == "vulkan-dot" and kernel not in conv.DOT_KERNELS:
                continue
            steps = kernels.executor_steps(d, prog, [x], kernels.conv_macs(p) <= kernels.VERIFY_MACS)
            t = np.asarray(timing.gpu_times(d, steps, args.repeats, 2, 8.0)) / 1e6
            times[backend] = float(np.median(t))
            gops = ops / (times[backend] * 1e6)
            speed = times["vulkan"] / times[backend] if backend == "vulkan-dot" else None
            rows.append({"name": name, "kernel": kernel, "backend": backend, "median_ms": times[backend],
                         "min_ms": float(t.min()), "gops": gops, "int32_fraction": gops / roof["int32_gops"],
                         "dot_speedup": speed, "device": dev.info.name})
            print(f"{name:36s} {kernel:17s} {backend:10s} {times[backend]:8.3f} {gops:7.1f} "
                  f"{gops / roof['int32_gops']:8.2f} {'' if speed is None else f'{speed:8.2f}'}", flush=True)
    load.append(os.getloadavg()[0])
    print(f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"roofline": {k: v for k, v in roof.items() if k != "records"}, "load_avg": load,
                       "records": rows}, f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
