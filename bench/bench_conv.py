"""conv2d_q8 speed on real layer shapes — now the conv family of the kernel suite in
vkq/bench/kernels.py (int8 kernel by Vulkan timestamps, our fp32 shader shaders/bench_conv2d_f32.comp
on the stride-1 shapes, torch fp32/int8 on the CPU and ncnn fp32 on the same device, each int8
case checked bit for bit against the numpy reference first). This script runs just that family:

    .venv/bin/python bench/bench_conv.py [--device llvmpipe] [--repeats 10] [--only NAME] [--json out.json]
    = vkq bench kernels --only conv [...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vkq.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "kernels", "--only", "conv", *sys.argv[1:]]))   # a later --only wins
