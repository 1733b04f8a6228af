"""GPU time of the linear kernels — now the linear family of the kernel suite in vkq/bench/kernels.py:
linear_q8 and our fp32 GEMM (shaders/linear_float.comp W_F32) on every shape, linear_dynamic and
linear_weight_only on the MiniLM shapes, torch fp32/int8 on the CPU and ncnn fp32 on the same
device. This script runs just that family, on one or more devices:

    .venv/bin/python bench/bench_linear.py [--device llvmpipe,swiftshader] [--repeats 10] [--json out.json]
    = vkq bench kernels --only linear --device D [...] for each D
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vkq.cli import main  # noqa: E402


def run(argv):
    devices = "llvmpipe,swiftshader"
    if "--device" in argv:
        i = argv.index("--device")
        devices = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    status = 0
    for d in devices.split(","):
        status |= main(["bench", "kernels", "--only", "linear", "--device", d, *argv])
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
