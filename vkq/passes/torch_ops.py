"""Ops vkq adds to torch's vocabulary (namespace vkq): one-output forms of aten ops that return a
tuple, so that the quantizer annotates them and the folding rules match them like any other op.

  vkq.adaptive_max_pool2d(x, output_size) = aten.adaptive_max_pool2d(x, output_size)[0]
      (normalize_ops makes it from adaptive_max_pool2d + getitem 0 where the windows are not one
      regular max pool: uneven, or sizes only known at run time)

They run through torch like aten ops (the converted GraphModule stays runnable eagerly, and a
program's CPU fallback can call them); importing this module registers them.
"""
from __future__ import annotations

import torch


@torch.library.custom_op("vkq::adaptive_max_pool2d", mutates_args=())
def adaptive_max_pool2d(x: torch.Tensor, output_size: list[int]) -> torch.Tensor:
    return torch.ops.aten.adaptive_max_pool2d.default(x, output_size)[0]


@adaptive_max_pool2d.register_fake
def _(x, output_size):
    return x.new_empty((*x.shape[:-2], *output_size))


ADAPTIVE_MAX_POOL2D = torch.ops.vkq.adaptive_max_pool2d.default
