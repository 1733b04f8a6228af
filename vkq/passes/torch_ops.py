"""Ops vkq adds to torch's vocabulary (namespace vkq): one-output forms of aten ops that return a
tuple, so that the quantizer annotates them and the folding rules match them like any other op.

  vkq.adaptive_max_pool2d(x, output_size) = aten.adaptive_max_pool2d(x, output_size)[0]
      (normalize_ops makes it from adaptive_max_pool2d + getitem 0 where the windows are not one
      regular max pool: uneven, or sizes only known at run time)
  vkq.max_unpool2d(v, x, kernel_size, stride, padding, dilation, ceil_mode, output_size)
      = aten.max_unpool2d(v, aten.max_pool2d_with_indices(x, kernel_size, ..., ceil_mode)[1], output_size)
      (normalize_ops makes it from a max_unpool2d whose indices a max_pool2d_with_indices gave,
      ENet's and SegNet's decoders: the indices are then a function of the pool's input x, which
      is int8, where the int64 indices have no int8 form)
  vkq.embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx)
      = aten.embedding_bag.padding_idx(weight, indices, offsets, False, mode, False, per_sample_weights,
                                       include_last_offset, padding_idx)[0]
      (normalize_ops makes it from an embedding_bag whose offset2bag / bag_size / max_indices
      nothing reads: nn.EmbeddingBag, DLRM's sparse features)
  vkq.cumulative_extreme(x, dim, largest) = aten.cummax(x, dim)[0] (largest) / aten.cummin(x, dim)[0]
  vkq.cumulative_arg_extreme(x, dim, largest) = aten.cummax(x, dim)[1] / aten.cummin(x, dim)[1]
      (normalize_ops makes one of each read output of a cummax / cummin: a kernel writes one)

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


@torch.library.custom_op("vkq::max_unpool2d", mutates_args=(), schema=(   # SymInt[]: a size read from a dynamic map
    "(Tensor v, Tensor x, int[] kernel_size, int[] stride, int[] padding, int[] dilation, bool ceil_mode, "
    "SymInt[] output_size) -> Tensor"))
def max_unpool2d(v: torch.Tensor, x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                 dilation: list[int], ceil_mode: bool, output_size: list[int]) -> torch.Tensor:
    _, indices = torch.ops.aten.max_pool2d_with_indices.default(x, kernel_size, stride, padding, dilation, ceil_mode)
    return torch.ops.aten.max_unpool2d.default(v, indices, output_size)


@max_unpool2d.register_fake
def _(v, x, kernel_size, stride, padding, dilation, ceil_mode, output_size):
    return v.new_empty((*v.shape[:-2], *output_size))


MAX_UNPOOL2D = torch.ops.vkq.max_unpool2d.default


@torch.library.custom_op("vkq::embedding_bag", mutates_args=())
def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: int,
                  per_sample_weights: torch.Tensor | None, include_last_offset: bool,
                  padding_idx: int | None) -> torch.Tensor:
    return torch.ops.aten.embedding_bag.padding_idx(weight, indices, offsets, False, mode, False, per_sample_weights,
                                                    include_last_offset, padding_idx)[0]


@embedding_bag.register_fake
def _(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx):
    return weight.new_empty((offsets.shape[0] - int(include_last_offset), weight.shape[1]))


EMBEDDING_BAG = torch.ops.vkq.embedding_bag.default


@torch.library.custom_op("vkq::cumulative_extreme", mutates_args=())
def cumulative_extreme(x: torch.Tensor, dim: int, largest: bool) -> torch.Tensor:
    return (torch.ops.aten.cummax.default if largest else torch.ops.aten.cummin.default)(x, dim)[0]


@cumulative_extreme.register_fake
def _(x, dim, largest):
    return torch.empty_like(x)


CUMULATIVE_EXTREME = torch.ops.vkq.cumulative_extreme.default


@torch.library.custom_op("vkq::cumulative_arg_extreme", mutates_args=())
def cumulative_arg_extreme(x: torch.Tensor, dim: int, largest: bool) -> torch.Tensor:
    return (torch.ops.aten.cummax.default if largest else torch.ops.aten.cummin.default)(x, dim)[1]


@cumulative_arg_extreme.register_fake
def _(x, dim, largest):
    return torch.empty_like(x, dtype=torch.long)


CUMULATIVE_ARG_EXTREME = torch.ops.vkq.cumulative_arg_extreme.default
