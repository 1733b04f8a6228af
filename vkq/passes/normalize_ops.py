"""normalize_ops: one spelling per op, so the later passes match one form.

torch.export's default graph and its run_decompositions() graph spell the same model
differently; this pass rewrites the second kind into the first:

  aten.convolution (2-D, not transposed)        -> aten.conv2d(x, w, b, stride, padding, dilation, groups)
  aten.conv2d.padding (padding "same"/"valid")  -> aten.conv2d with the padding in numbers; "same"
                                                  with an even window pads one more right/below, as
                                                  PyTorch does: constant_pad_nd first, then padding 0
  aten.conv1d.padding, float (N, C, L) (the static scheme made it 2-D before)
                                                -> aten.conv1d, the same way
  aten.addcmul(a, b, c, value=v)                -> a + b * c (* v)   (ResMLP's affine layers)
  aten.reshape_as(x, y), y of a static shape    -> aten.reshape(x, y's shape)   (LeViT)
  aten.addmm(b, x, t(w)) / aten.mm(x, t(w))     -> aten.linear(x, w, b)      (t = aten.t or permute [1, 0])
  aten.max_unpool2d(v, getitem(aten.max_pool2d_with_indices(x, ...), 1), size)
                                                -> vkq.max_unpool2d(v, x, ..., size): the indices
                                                  recomputed from the pool's (int8) input (ENet, SegNet)
  aten.max_pool2d_with_indices + getitem 0      -> aten.max_pool2d
  aten.adaptive_max_pool2d + getitem 0, H and W static multiples of the output size
                                                -> aten.max_pool2d (window = stride = H/oh, W/ow);
                                                  other sizes -> vkq.adaptive_max_pool2d (torch_ops.py)
  aten.adaptive_max_pool1d + getitem 0, float (N, C, L) (static convs made it 2-D before)
                                                -> vkq.adaptive_max_pool2d(x, [C, L_out]); L_out 1: amax
  aten.mean.dim(x, [2, 3] / [-2, -1], keepdim)  -> aten.adaptive_avg_pool2d(x, [1, 1]) [+ view (N, C)]
  any in-place aten op (hardswish_, silu_, dropout_, add_, copy_, ...) -> its functional form,
                                                  a write through a view written back into its
                                                  base (functionalize.py)
  aten.copy(view, src), aten.fill(view, value)  -> src / value expanded to the view's shape (what
                                                  y[:, 1:] = v and y[..., 0] = 0 write)
  aten.addmm(b, x, w) / mm / matmul(x, w), w a 2-D constant (GPT-2's Conv1D keeps w as (in, out))
                                                -> aten.linear(x, t(w), b)
  aten.relu6(x), aten.clamp(x, lo, hi)          -> aten.hardtanh(x, lo, hi);  clamp(x, 0) -> relu
  aten.prelu(x, w), w one slope                 -> aten.leaky_relu(x, w)
  aten.prelu(x, w), a slope per channel of 4-D x -> x + conv2d(hardtanh(x, -max, 0), w - 1, groups=C)
                                                  (2-D and 3-D x viewed as 4-D around it)
  aten.glu(x, dim)                              -> slices, sigmoid, mul
  aten.repeat_interleave(x, r int, dim)         -> unsqueeze, expand, flatten; r a constant tensor
                                                  of counts: index_select by the index it makes; no
                                                  dim: of x flattened
  aten.searchsorted(1-D boundaries, x, right / side) -> bucketize(x, boundaries, right)
  aten.stack(tensors, dim)                      -> cat of the tensors unsqueezed at dim   (GPT-J)
  aten.split / split_with_sizes / chunk / tensor_split, read by getitems, the dim static
                                                -> a slice per part (int8 stays int8: ShuffleNetV2)
  aten.outer(a, b) / aten.ger(a, b)            -> unsqueeze(a, 1) * b   (rotary frequencies: outer(positions,
                                                  inverse frequencies), a broadcast mul with kernels)
  aten.baddbmm(c, a, b, beta, alpha)            -> beta * c + alpha * bmm(a, b)   (BLOOM, WavLM); addbmm:
                                                  the bmm summed over its batch; addmv: a matmul
  aliases (multiply, divide, true_divide, subtract, absolute, negative, clip, greater, less, ...)
                                                -> the op they name (mul, div, sub, abs, neg, clamp, gt, lt, ...)
  aten.square(x)                                -> aten.pow(x, 2)
  x.T / mT / mH / H / adjoint() of a real x     -> aten.permute (all dims reversed; the last two)
  x * rsqrt(mean(x^2, d, keepdim) + eps)        -> aten.rms_norm over d (the last, or channels between
                                                  permutes): a written-out RMSNorm, one float op
  aten.swapaxes / swapdims(x, a, b)             -> aten.transpose(x, a, b);  movedim / moveaxis -> the
                                                  permute (int8 permutes; they ran as a float gather by
                                                  an index map, MaxViT's grid attention)
  aten.constant_pad_nd / pad (constant) with negative amounts, static shapes
                                                -> slices (the crops), then the pad of the rest
                                                  (RWKV's time shift: ZeroPad2d((0, 0, 1, -1)));
                                                  by nothing -> removed (Swin's windows at 224)
  aten.im2col(x, k, d, padding, s) (nn.Unfold)  -> im2col(constant_pad_nd(x, padding), k, d, 0, s): the pad
                                                  a kernel, the rest a gather (ConvBERT); along a
                                                  dynamic dim a cat of strided slices, one a tap
  aten.col2im (nn.Fold), windows that overlap   -> conv_transpose2d of the columns by a one-hot weight, a
                                                  group a channel: the sums over windows (VOLO)
  aten.index.Tensor(x, [i0, .., ik-1]), an index computed in the graph, float x, static shapes
                                                -> embedding(reshape(x, (rows, rest)), i0 s0 + .. + ik-1 sk-1)
                                                  (CLIP's pooled text output: x[arange(B), ids.argmax(-1)])
  aten.slice_scatter(x, y, dim, a, b), step 1, a static dim
                                                -> cat of x's pieces either side and y (export's
                                                  x[..., a:b] = y under dynamic shapes: DeepSeek-V3)
  aten.index_put(x, [None.., i], v, acc) (x[..., i] = v: one index tensor)
                                                -> where(mask, v, x) for a bool mask and one value;
                                                  index_fill / index_copy / index_add along the dim
                                                  for a 1-D integer index (or constant 1-D mask)
                                                  (scores[mask] = -inf; X-MOD's adapters)
  aten.einsum(equation, operands), static shapes -> the permutes, views, bmm, mul and sum torch
                                                  computes it with (traced with make_fx)   (XLNet,
                                                  Funnel, hand-written attention)
  aten.pixel_shuffle / pixel_unshuffle of a map with a dynamic dim
                                                -> unflatten, permute, flatten (views: no size of the
                                                  example in the graph; a static map keeps the op)
  aten.instance_norm with running statistics (use_input_stats False)
                                                -> aten.batch_norm in eval (the same arguments)
  aten.embedding_bag / _embedding_bag + getitem 0 (nn.EmbeddingBag: 1-D indices and offsets, or
  2-D indices flattened with an arange of offsets)
                                                -> vkq.embedding_bag(weight, indices, offsets, mode,
                                                  per_sample_weights, include_last_offset, padding_idx)
  aten.cummax / cummin + getitem 0 / 1          -> vkq.cumulative_extreme / cumulative_arg_extreme(x, dim, largest)
  aten._native_batch_norm_legit_no_training + getitem 0 -> aten.batch_norm (eval)
  aten.index_select(x, d, i), i computed        -> aten.index(x, [i]) (d = 0); else permutes around it
  dropout, feature / alpha dropout (eval), clone, alias, contiguous, detach
                                                -> removed (identities at inference; the dropouts
                                                  go before annotation: Dropout2d between a conv and
                                                  its consumer would stay float)
  quantize / dequantize per tensor to uint8     -> int8 with zero point - 128 (X86 quantizer):
                                                   q_u8 - 128 = q_i8, the floats are the same
Rules are the table NORMALIZE: target -> function(node) returning the replacement node or None;
in-place ops are found by their schema (functionalize.functional_target), before the table is
consulted, so that every rule sees functional ops only.
"""
from __future__ import annotations

import contextlib
import operator

import torch
from torch.fx import GraphModule, Node

from .functionalize import functionalize_inplace
from ._graph import (DEQUANTIZE, DEQUANTIZE_CHANNEL, PERMUTES, QUANTIZE, SYMBOLIC_SHAPES, _in_place_of, _made, _new,
                     _pair, add_constant, arg, aten, const_value, dtype_of, dynamic_size, finish, first_outputs,
                     is_call, pair, set_val, shape_of, val)
from .normalize_views import (cat_from_slice_scatter, cat_from_stack, crop_from_negative_pad, embedding_bag_from_tuple,
                              embedding_from_index, expand_from_repeat_interleave, from_index_put, im2col_after_pad,
                              index_from_index_select, permute_from_matrix_transpose, permute_from_movedim,
                              slices_from_split, transpose_from_swapaxes, views_from_pixel_shuffle)


def conv_from_convolution(node):
    x, w, b, stride, padding, dilation, transposed, _out_pad, groups = node.args[:9]
    if transposed or len(shape_of(x)) != 4:
        return None
    return _new(node, aten.conv2d.default, (x, w, b, _pair(stride), _pair(padding), _pair(dilation), groups))


def conv_from_string_padding(node):
    """conv2d / conv1d with padding "same" or "valid" -> the padding in numbers; a "same" whose
    total is odd pads one more right / below first (constant_pad_nd), as PyTorch does. (conv1d's
    only at lowering, under the schemes that leave convs float: under the static one,
    one_d_as_two_d made it a conv2d before.)"""
    x, w, b = node.args[:3]
    stride, padding = arg(node, 3, "stride", 1), arg(node, 4, "padding", "valid")
    dilation, groups = arg(node, 5, "dilation", 1), arg(node, 6, "groups", 1)
    r = 2 if node.target == aten.conv2d.padding else 1
    if padding not in ("same", "valid") or val(x).dim() != r + 2:    # (not shape_of: it would fix dynamic dims)
        return None
    target = aten.conv2d.default if r == 2 else aten.conv1d.default
    stride, dilation = _pair(stride, r), _pair(dilation, r)
    total = [d * (k - 1) for d, k in zip(dilation, shape_of(w)[2:])] if padding == "same" else [0] * r
    before = [t // 2 for t in total]
    if all(t == 2 * p for t, p in zip(total, before)):
        return _new(node, target, (x, w, b, stride, before, dilation, groups))
    pad = [p for d in reversed(range(r)) for p in (before[d], total[d] - before[d])]   # last dim first
    padded = _new(node, aten.constant_pad_nd.default, (x, pad, 0.0))
    size = list(val(x).shape)          # symbolic sizes stay so: no shape_of, no pad on the fake value
    for d in range(r):
        size[2 + d] = size[2 + d] + total[d]
    padded.meta["val"] = val(x).new_empty(size)
    return _new(node, target, (padded, w, b, stride, [0] * r, dilation, groups))


def mul_add_from_addcmul(node):
    a, b, c = node.args[:3]
    value = arg(node, 3, "value", 1)
    prod = _new(node, aten.mul.Tensor, (b, c))
    if all(isinstance(d, int) for d in shape_of(b) + shape_of(c)):
        set_val(prod, torch.broadcast_shapes(shape_of(b), shape_of(c)), val(node).dtype)
    else:                                        # (a dynamic dim: fake tensors keep it symbolic)
        prod.meta["val"] = val(b) * val(c)
    if value != 1:
        scaled = _new(node, aten.mul.Tensor, (prod, value))
        scaled.meta["val"] = prod.meta["val"] * value
        prod = scaled
    return _new(node, aten.add.Tensor, (a, prod))


def batch_norm_from_instance_norm(node):
    """instance_norm with use_input_stats=False (InstanceNorm with track_running_stats, in eval)
    normalises every instance by the same running statistics: batch_norm in eval, whose
    arguments it shares position for position (a per-channel affine map, then a conv)."""
    if len(node.args) < 6 or node.args[5] is not False:
        return None
    return _new(node, aten.batch_norm.default, (*node.args[:5], False, *node.args[6:]), node.kwargs)


def batch_norm_from_legit(node):
    """_native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps) + getitem 0 (what
    run_decompositions makes of batch_norm in eval) -> aten.batch_norm, which the quantizer
    folds into its conv."""
    if (users := first_outputs(node)) is None:
        return None
    x, w, b, mean, var, momentum, eps = node.args[:7]
    new = _new(node, aten.batch_norm.default, (x, w, b, mean, var, False, momentum, eps, False))
    return _in_place_of(users, new)


def reshape_from_reshape_as(node):
    shape = list(shape_of(node.args[1]))
    if not all(isinstance(d, int) for d in shape):
        return None
    return _new(node, aten.reshape.default, (node.args[0], shape))


def value_from_copy(node):
    """copy(view, src), fill(view, value) (a write into a slice, functional now): the value
    written, src or value expanded to the view's shape; where its dtype differs, None (it stays,
    and runs on the CPU)."""
    dst, src = node.args[:2]
    shape = list(val(dst).shape)
    if not isinstance(src, Node):                   # fill.Scalar
        return _new(node, aten.full_like.default, (dst, src))
    if dtype_of(src) != dtype_of(dst) or not all(isinstance(d, int) for d in shape):
        return None
    return src if list(val(src).shape) == shape else _new(node, aten.expand.default, (src, shape))


def _transposed_weight(node):
    """w if node is t(w) / permute(w, [1, 0]) of a 2-D tensor, else None."""
    if is_call(node, PERMUTES) and len(shape_of(node)) == 2:
        if node.target == aten.permute.default and list(node.args[1]) not in ([1, 0], [-1, -2], [-1, 0], [1, -2]):
            return None
        return node.args[0]
    return None


def _reads_an_input(node) -> bool:
    """node's value depends on a graph input (a placeholder among its ancestors)."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n.op == "placeholder":
            return True
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return False


def _constant_weight(node) -> bool:
    """node is a 2-D constant, or a dequantize of one (what PT2E makes of an annotated weight)."""
    while is_call(node, DEQUANTIZE | DEQUANTIZE_CHANNEL):
        node = node.args[0]
    return isinstance(node, Node) and node.op == "get_attr" and len(shape_of(node)) == 2


def _as_linear_weight(wt):
    """The (out, in) weight of x @ wt: w where wt = t(w) and w is no activation, else t(wt) for a
    constant (in, out) matrix (GPT-2's Conv1D), else None. A product of two activations (a 2-D
    q @ k.T, a Gram matrix) stays a matmul: its kernels take two activations, linear's do not."""
    w = _transposed_weight(wt)
    if w is not None:
        return None if _reads_an_input(w) else w
    if not _constant_weight(wt):
        return None
    with wt.graph.inserting_after(wt):
        t = wt.graph.call_function(aten.t.default, (wt,))
    k, n = shape_of(wt)
    return set_val(t, (n, k), val(wt).dtype)


def linear_from_addmm(node):
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return None
    b, x, wt = node.args[:3]
    if not isinstance(b, Node) or len(shape_of(b)) != 1:
        return None
    w = _as_linear_weight(wt)
    return None if w is None else _new(node, aten.linear.default, (x, w, b))


def linear_from_mm(node):
    x, wt = node.args[:2]
    if len(shape_of(wt)) != 2:
        return None
    w = _as_linear_weight(wt)
    return None if w is None else _new(node, aten.linear.default, (x, w))


def max_pool_from_with_indices(node):
    """Each max_unpool2d of the indices -> vkq.max_unpool2d of the pool's input (torch_ops.py);
    then, where nothing else reads the indices, the values alone: aten.max_pool2d."""
    from .torch_ops import MAX_UNPOOL2D
    kernel = pair(arg(node, 1, "kernel_size"))
    geometry = [kernel, pair(arg(node, 2, "stride", None) or kernel), pair(arg(node, 3, "padding", 0)),
                pair(arg(node, 4, "dilation", 1)), bool(arg(node, 5, "ceil_mode", False))]
    for indices in [u for u in node.users if u.target is operator.getitem and u.args[1] == 1]:
        for unpool in list(indices.users):
            size = arg(unpool, 2, "output_size")
            if (unpool.target is aten.max_unpool2d.default and unpool.args[1] is indices
                    and unpool.args[0] is not indices and all(isinstance(s, (int, Node)) for s in size)):
                new = _new(unpool, MAX_UNPOOL2D, (unpool.args[0], node.args[0], *geometry, list(size)))
                unpool.replace_all_uses_with(new)
                unpool.graph.erase_node(unpool)
    users = first_outputs(node)
    if users is None:
        return None
    new = _new(node, aten.max_pool2d.default, node.args, node.kwargs)
    return _in_place_of(users, new)


def max_pool_from_adaptive(node):
    """adaptive_max_pool2d(x, (oh, ow)) + getitem 0 -> max_pool2d with a (H/oh, W/ow) window and
    stride, where the input's H and W are static multiples of the output's (a global max pool:
    (1, 1)); other sizes (windows of varying size, or an H and W known only at run time) ->
    vkq.adaptive_max_pool2d (torch_ops.py), one output, which has kernels of its own."""
    from .torch_ops import ADAPTIVE_MAX_POOL2D
    x, size = node.args[0], node.args[1]
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dim() not in (3, 4) or (users := first_outputs(node)) is None:
        return None
    hw = [d if isinstance(d, int) else None for d in v.shape[-2:]]     # a SymInt (dynamic dim): None
    size = list(size) if isinstance(size, (list, tuple)) else [size, size]
    size = [hw[i] if s is None else s for i, s in enumerate(size)]
    if not all(isinstance(s, int) and s > 0 for s in size):
        return None
    if v.dim() == 4 and not dynamic_size(x) and None not in hw and all(d % s == 0 for d, s in zip(hw, size)):
        window = [d // s for d, s in zip(hw, size)]
        new = _new(node, aten.max_pool2d.default, (x, window, window, [0, 0], [1, 1], False))
    else:
        new = _new(node, ADAPTIVE_MAX_POOL2D, (x, size))
    return _in_place_of(users, new)


def max_pool_from_adaptive_1d(node):
    """adaptive_max_pool1d(x, L) + getitem 0 on a float (N, C, L) x, left by the schemes that keep
    convs float (under the static one one_d_as_two_d made it 2-D first) ->
    vkq.adaptive_max_pool2d(x, [C, L]): x seen as (H, W) = (C, L) planes, one row a window;
    to L = 1 (the max over time) amax over the last dim."""
    from .torch_ops import ADAPTIVE_MAX_POOL2D
    x = node.args[0]
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dim() != 3 or not isinstance(v.shape[1], int) \
            or dynamic_size(x, [1]) or (users := first_outputs(node)) is None:
        return None
    size = node.args[1]
    size = int(size[0] if isinstance(size, (list, tuple)) else size)
    if size == 1:       # the max over time, any length: amax (a parallel reduction)
        new = _new(node, aten.amax.default, (x, [-1], True))
    else:
        new = _new(node, ADAPTIVE_MAX_POOL2D, (x, [v.shape[1], size]))
    return _in_place_of(users, new)


def pool_from_mean(node):
    x = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if node.kwargs.get("dtype") is not None or dims is None or len(shape_of(x)) != 4:
        return None
    if sorted(d % 4 for d in dims) != [2, 3]:
        return None
    n, c = shape_of(x)[:2]
    pool = _new(node, aten.adaptive_avg_pool2d.default, (x, [1, 1]))
    set_val(pool, (n, c, 1, 1), torch.float32)
    if keepdim:
        return pool
    return _new(node, aten.view.default, (pool, [n, c]))


def from_prelu(node):
    """prelu(x, w): with one slope (nn.PReLU()'s default) leaky_relu(x, w), an elementwise
    function of one tensor, which int8 runs as a lookup table. With a slope per channel of a
    4-D x: x + conv2d(min(x, 0), w - 1 as a (C, 1, 1, 1) depthwise 1x1 weight) (x < 0: x + (w -
    1) x = w x), min(x, 0) spelled hardtanh(x, -1e30, 0): an int8 clamp that shares x's
    quantization and a depthwise conv whose epilogue takes the add (fuse_epilogue). (relu(x) +
    w min(x, 0) cost a third dispatch, the relu's clamp.)"""
    gm = node.graph.owning_module
    x, w = node.args[0], const_value(gm, node.args[1])
    v = val(x)
    if w is None:
        return None
    if w.numel() == 1:
        return _new(node, aten.leaky_relu.default, (x, float(w.reshape(()))))
    if not isinstance(v, torch.Tensor) or v.dim() not in (2, 3, 4) or not isinstance(v.shape[1], int) \
            or w.numel() != v.shape[1] or not all(isinstance(d, int) for d in v.shape[2:]):
        return None
    c = w.numel()
    x4, v4 = x, v
    if v.dim() < 4:     # (N, C) / (N, C, L) seen as (N, C, 1, 1) / (N, C, 1, L): a speech model's PReLU
        shape4 = [-1, c, 1, v.shape[2] if v.dim() == 3 else 1]
        x4 = _new(node, aten.reshape.default, (x, shape4))
        v4 = x4.meta["val"] = v.reshape([v.shape[0]] + shape4[1:])
    neg = _new(node, aten.hardtanh.default, (x4, -1e30, 0.0))   # (-inf: not taken as a clamp)
    weight = add_constant(gm, f"{node.name}_slopes", w.detach().float().reshape(c, 1, 1, 1) - 1.0, node)
    conv = _new(node, aten.conv2d.default, (neg, weight, None, [1, 1], [0, 0], [1, 1], c))
    for n in (neg, conv):
        n.meta["val"] = v4
    out = _new(node, aten.add.Tensor, (x4, conv))
    if x4 is x:
        return out
    out.meta["val"] = v4
    return _new(node, aten.reshape.default, (out, list(v.shape) if isinstance(v.shape[0], int) else [-1, *v.shape[1:]]))


def conv_transpose_from_col2im(node):
    """col2im (F.fold) with overlapping windows (VOLO's outlook attention: kernel 3, stride 2)
    sums each output value over the windows that cover it: that is conv_transpose2d of the
    columns viewed as (N, C k_h k_w, L_h, L_w) by a one-hot weight, a group a channel (input
    channel (c, i, j) -> output channel c at kernel position (i, j)), which conv_transpose_as_conv
    then makes a conv with kernels (int8 where quantized: a one-hot weight is exact). Windows that
    do not overlap stay col2im, a gather (aten_rules.py _col2im)."""
    gm = node.graph.owning_module
    x = node.args[0]
    v, out = val(x), val(node)
    output_size, kernel, dilation, padding, stride = (list(a) if isinstance(a, (list, tuple)) else [a, a]
                                                      for a in node.args[1:6])
    sizes = [*output_size, *kernel, *dilation, *padding, *stride]
    if not isinstance(v, torch.Tensor) or v.dim() != 3 or not all(isinstance(d, int) for d in [*v.shape, *sizes]) \
            or dilation != [1, 1] or all(k <= st for k, st in zip(kernel, stride)):
        return None
    n, ckk, length = v.shape
    (h, w), (kh, kw), (ph, pw), (sh, sw) = output_size, kernel, padding, stride
    lh, lw = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    oph, opw = h - ((lh - 1) * sh - 2 * ph + kh), w - ((lw - 1) * sw - 2 * pw + kw)
    if ckk % (kh * kw) or lh * lw != length or not (0 <= oph < sh and 0 <= opw < sw):
        return None
    c = ckk // (kh * kw)
    onehot = torch.zeros(ckk, 1, kh, kw)
    onehot.view(c, kh * kw, kh * kw)[:, torch.arange(kh * kw), torch.arange(kh * kw)] = 1.0
    weight = add_constant(gm, f"{node.name}_windows", onehot, node)
    x4 = _made(node, aten.reshape.default, (x, [n, ckk, lh, lw]), (n, ckk, lh, lw), v.dtype)
    return _new(node, aten.conv_transpose2d.input, (x4, weight, None, [sh, sw], [ph, pw], [oph, opw], c, [1, 1]))


def mul_sigmoid_from_glu(node):
    """glu(x, dim) = a * sigmoid(b), a and b x's halves along dim: slices, an elementwise
    sigmoid (an int8 lookup table) and mul, which have kernels."""
    x, dim = node.args[0], arg(node, 1, "dim", -1)
    v = val(x)
    if not isinstance(v, torch.Tensor) or not isinstance(v.shape[dim], int) or v.shape[dim] % 2 or dynamic_size(x):
        return None
    dim, half = dim % v.dim(), v.shape[dim] // 2
    a = _new(node, aten.slice.Tensor, (x, dim, 0, half))
    b = _new(node, aten.slice.Tensor, (x, dim, half, 2 * half))
    gate = _new(node, aten.sigmoid.default, (b,))
    for n in (a, b, gate):
        n.meta["val"] = val(node)
    return _new(node, aten.mul.Tensor, (a, gate))


def bucketize_from_searchsorted(node):
    """searchsorted(boundaries, x, right / side), boundaries 1-D, no sorter -> bucketize(x,
    boundaries, right): the same count of boundaries below each value."""
    seq, x = node.args[0], node.args[1]
    if not isinstance(seq, Node) or not isinstance(x, Node) or val(seq) is None or val(seq).dim() != 1 \
            or node.kwargs.get("sorter") is not None:
        return None
    right = bool(node.kwargs.get("right", False)) or node.kwargs.get("side") == "right"
    return _new(node, aten.bucketize.Tensor, (x, seq), {"out_int32": bool(node.kwargs.get("out_int32", False)),
                                                         "right": right})


def hardtanh_from_relu6(node):
    return _new(node, aten.hardtanh.default, (node.args[0], 0.0, 6.0))


def from_clamp(node):
    x = node.args[0]
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    if isinstance(lo, Node) or isinstance(hi, Node):
        return None
    if lo == 0 and hi is None:
        return _new(node, aten.relu.default, (x,))
    if lo is not None and hi is not None:
        return _new(node, aten.hardtanh.default, (x, float(lo), float(hi)))
    return None


def identity(node):
    """Inference-time identities are dropped: their input takes their place."""
    if node.target in DROPOUTS and _train(node):
        return None
    x = node.args[0]
    return x if isinstance(x, Node) and val(x) is not None and tuple(val(x).shape) == shape_of(node) else None


def _train(node) -> bool:
    return bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("train", False))


def int8_from_uint8(node):
    """(x, s, zp, qmin, qmax, uint8) -> (x, s, zp - 128, qmin - 128, qmax - 128, int8): exact."""
    a = list(node.args)
    if len(a) != 6 or a[5] != torch.uint8 or node.kwargs:
        return None
    new = _new(node, node.target, (a[0], a[1], int(a[2]) - 128, int(a[3]) - 128, int(a[4]) - 128, torch.int8))
    if is_call(new, QUANTIZE):
        set_val(new, shape_of(node), torch.int8)
    return new


def mul_from_outer(node):
    a, b = node.args[:2]
    va = val(a)
    if not isinstance(va, torch.Tensor) or not isinstance(val(b), torch.Tensor):
        return None
    col = _new(node, aten.unsqueeze.default, (a, 1))
    col.meta["val"] = va.unsqueeze(1)
    return _new(node, aten.mul.Tensor, (col, b))


def bmm_add_from_baddbmm(node):
    """baddbmm(c, a, b, beta, alpha) = beta * c + alpha * (a @ b) (BLOOM's ALiBi scores, WavLM's
    position bias): a bmm, scalings where beta or alpha is not 1, an add. addbmm: the bmm's sum
    over its batch; addmv: a matrix-vector matmul."""
    c, a, b = node.args[:3]
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    if not all(isinstance(v, torch.Tensor) for v in (val(c), val(a), val(b))) \
            or not all(isinstance(s, (int, float)) for s in (beta, alpha)):
        return None
    if node.target == aten.addmv.default:
        prod = _new(node, aten.matmul.default, (a, b))
    else:
        prod = _new(node, aten.bmm.default, (a, b))
        if node.target == aten.addbmm.default:
            prod.meta["val"] = val(a).new_empty((val(a).shape[0], val(node).shape[0], val(node).shape[1]))
            prod = _new(node, aten.sum.dim_IntList, (prod, [0]))
    prod.meta["val"] = val(node)
    if alpha != 1:
        prod = _new(node, aten.mul.Tensor, (prod, alpha))
        prod.meta["val"] = val(node)
    if beta == 0:
        return prod
    if beta != 1:
        c = _new(node, aten.mul.Tensor, (c, beta))
        c.meta["val"] = val(node.args[0])
    return _new(node, aten.add.Tensor, (c, prod))


# torch's other names for one op (same schema): pre-dispatch export keeps the name a model used.
# (getattr: calling the packet's __getattr__ directly makes a second OpOverload for the same op,
# and every later comparison with aten.mul.Tensor etc. stops matching the graph's targets.)
ALIASES = {getattr(getattr(aten, a), o): getattr(getattr(aten, b), o) for a, b, overloads in (
    ("multiply", "mul", ("Tensor", "Scalar")), ("divide", "div", ("Tensor", "Scalar")),
    ("true_divide", "div", ("Tensor", "Scalar")), ("subtract", "sub", ("Tensor", "Scalar")),
    ("absolute", "abs", ("default",)), ("negative", "neg", ("default",)), ("clip", "clamp", ("default",)),
    ("greater", "gt", ("Tensor", "Scalar")), ("less", "lt", ("Tensor", "Scalar")),
    ("greater_equal", "ge", ("Tensor", "Scalar")), ("less_equal", "le", ("Tensor", "Scalar")),
    ("not_equal", "ne", ("Tensor", "Scalar")), ("arctan", "atan", ("default",)), ("fix", "trunc", ("default",)),
    ("special_expit", "sigmoid", ("default",)), ("clip", "clamp", ("Tensor",)))
    for o in overloads}


def from_alias(node):
    return _new(node, ALIASES[node.target], node.args, dict(node.kwargs))


def pow_from_square(node):
    return _new(node, aten.pow.Tensor_Scalar, (node.args[0], 2))


def from_einsum(node):
    """einsum as torch runs it: torch.einsum traced (make_fx) on the operands' example values
    and the traced nodes inlined. torch decomposes it to permutes, views and a bmm (or a mul and
    sum), each of which has a kernel; the einsum itself only ran on the CPU. With dynamic dims
    the trace (under export's fake mode) reads them with sym_size nodes and arithmetic, which are
    inlined too, so the views stay symbolic."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.node import map_arg
    equation, operands = node.args[0], node.args[1]
    vals = [val(o) for o in operands] if isinstance(operands, (list, tuple)) else []
    if not vals or not all(isinstance(v, torch.Tensor) for v in vals) or not isinstance(equation, str) \
            or node.kwargs.get("path"):
        return None
    try:
        with torch._guards.detect_fake_mode(vals) or contextlib.nullcontext():
            traced = make_fx(lambda *xs: torch.einsum(equation, *xs))(*vals)
    except Exception:      # an equation torch itself rejects: leave it to the CPU, which will say why
        return None
    env, out = dict(zip((n for n in traced.graph.nodes if n.op == "placeholder"), operands)), None
    for n in traced.graph.nodes:
        if n.op == "call_function":      # (a view traced on the example's strides: reshape, valid on any)
            target = aten.reshape.default if n.target in (aten.view.default, aten._unsafe_view.default) else n.target
            env[n] = _new(node, target, map_arg(n.args, env.__getitem__), map_arg(n.kwargs, env.__getitem__))
            env[n].meta["val"] = n.meta["val"]
        elif n.op == "output":
            out = map_arg(n.args[0], env.__getitem__)
        elif n.op != "placeholder":
            return None
    return out if isinstance(out, Node) else None


DROPOUTS = (aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
            aten.feature_alpha_dropout.default)


def extreme_from_cummax(node):
    """cummax / cummin + getitem 0 -> vkq.cumulative_extreme, getitem 1 -> vkq.cumulative_arg_extreme
    (torch_ops.py): one output each, as the scan kernel writes (both read: two scans)."""
    from .torch_ops import CUMULATIVE_ARG_EXTREME, CUMULATIVE_EXTREME
    users = list(node.users)
    if not isinstance(val(node.args[0]), torch.Tensor) or not users \
            or not all(u.target is operator.getitem for u in users):
        return None
    args = (node.args[0], int(node.args[1]), node.target == aten.cummax.default)
    new = None
    for item, target in ((0, CUMULATIVE_EXTREME), (1, CUMULATIVE_ARG_EXTREME)):
        read = [u for u in users if u.args[1] == item and u.users]     # (one scan however many getitems)
        if read:
            new = _in_place_of(read, _new(node, target, args))
    return new

def _mean_square_of(node, x):
    """(dims, eps) where node is mean(x^2 | x*x, dims, keepdim=True) + eps, else None (the
    casts to float32 a model wraps around it seen through)."""
    if not is_call(node, {aten.add.Tensor}) or not isinstance(node.args[1], (int, float)):
        return None
    mean = node.args[0]
    if not is_call(mean, {aten.mean.dim}) or not (len(mean.args) > 2 and mean.args[2] or mean.kwargs.get("keepdim")):
        return None
    sq = _through_float_casts(mean.args[0])
    if is_call(sq, {aten.pow.Tensor_Scalar}) and sq.args[1] == 2:
        base = sq.args[0]
    elif is_call(sq, {aten.mul.Tensor}) and sq.args[0] is sq.args[1]:
        base = sq.args[0]
    else:
        return None
    if _through_float_casts(base) is not _through_float_casts(x):
        return None
    return list(mean.args[1]), float(node.args[1])


def _through_float_casts(node):
    while is_call(node, {aten._to_copy.default, aten.to.dtype}) and dtype_of(node) == torch.float32:
        node = node.args[0]
    return node


def rms_norm_from_parts(node):
    """x * rsqrt(mean(x^2, dim, keepdim=True) + eps), written out (LLaMA's and Gemma's RMSNorm,
    timm's rms_norm2d over channels) -> aten.rms_norm over that dim (the last; dim 1 of a 4-D x
    between permutes): one float op, where the static scheme quantized each part, the mean of
    squares included (MobileNetV5's norms then read 0 and put out nothing)."""
    if len(node.args) != 2:
        return None
    for x, r in (node.args, node.args[::-1]):
        if not isinstance(x, Node) or not is_call(r, {aten.rsqrt.default}) or dtype_of(x) != torch.float32:
            continue
        found = _mean_square_of(r.args[0], x)
        if found is None:
            continue
        dims, eps = found
        v = val(x)
        rank = v.dim()
        dims = [d % rank for d in dims]
        if not all(isinstance(v.shape[d], int) for d in dims):
            return None
        if dims == [rank - 1]:
            return _new(node, aten.rms_norm.default, (x, [v.shape[-1]], None, eps))
        if dims == [1] and rank == 4:
            last = _new(node, aten.permute.default, (x, [0, 2, 3, 1]))
            last.meta["val"] = v.permute(0, 2, 3, 1)
            normed = _new(node, aten.rms_norm.default, (last, [v.shape[1]], None, eps))
            normed.meta["val"] = last.meta["val"]
            return _new(node, aten.permute.default, (normed, [0, 3, 1, 2]))
    return None


def rms_norm_weighted(node):
    """rms_norm(x) * w with w a constant of the normalized shape (LLaMA's RMSNorm weight, after
    rms_norm_from_parts) -> rms_norm(x, weight=w): one float op, not a norm and a multiply."""
    made = rms_norm_from_parts(node)
    if made is not None or len(node.args) != 2:
        return made
    for n, w in (node.args, node.args[::-1]):
        if not (is_call(n, {aten.rms_norm.default}) and len(n.users) == 1 and isinstance(w, Node)
                and w.op == "get_attr" and dtype_of(w) == torch.float32 and dtype_of(n) == torch.float32):
            continue
        args = list(n.args) + [None] * (4 - len(n.args))
        if args[2] is not None or n.kwargs or tuple(val(w).shape) != tuple(args[1]) \
                or tuple(val(node).shape) != tuple(val(n).shape):
            continue
        return _new(node, aten.rms_norm.default, (args[0], args[1], w, args[3]))
    return None


# Rules the quantizer applies too, before it annotates (normalize_for_annotation): its annotators
# know only the forms on the right, so a model spelling the left would stay float.
BEFORE_ANNOTATION = {
    aten.conv2d.padding: conv_from_string_padding,
    aten.prelu.default: from_prelu,
    aten.adaptive_max_pool2d.default: max_pool_from_adaptive,
    aten.max_pool2d_with_indices.default: max_pool_from_with_indices,
    aten.addcmul.default: mul_add_from_addcmul,
    aten.reshape_as.default: reshape_from_reshape_as,
    aten.copy.default: value_from_copy, aten.fill.Tensor: value_from_copy, aten.fill.Scalar: value_from_copy,
    aten.glu.default: mul_sigmoid_from_glu,
    aten.repeat_interleave.self_int: expand_from_repeat_interleave,
    aten.repeat_interleave.self_Tensor: expand_from_repeat_interleave,
    aten.searchsorted.Tensor: bucketize_from_searchsorted,
    aten.stack.default: cat_from_stack,
    aten.split.Tensor: slices_from_split, aten.split_with_sizes.default: slices_from_split,
    aten.tensor_split.sections: slices_from_split, aten.tensor_split.indices: slices_from_split,
    aten.chunk.default: slices_from_split,
    aten.baddbmm.default: bmm_add_from_baddbmm, aten.addbmm.default: bmm_add_from_baddbmm,
    aten.addmv.default: bmm_add_from_baddbmm,
    aten.outer.default: mul_from_outer, aten.ger.default: mul_from_outer,
    aten.einsum.default: from_einsum,
    aten.constant_pad_nd.default: crop_from_negative_pad,
    aten.pad.default: crop_from_negative_pad,
    **{a: from_alias for a in ALIASES},
    aten.square.default: pow_from_square,
    aten.col2im.default: conv_transpose_from_col2im,
    aten.swapaxes.default: transpose_from_swapaxes, aten.swapdims.default: transpose_from_swapaxes,
    **{t: permute_from_matrix_transpose for t in (aten.numpy_T.default, aten.mT.default, aten.mH.default,
                                                   aten.matrix_H.default, aten.adjoint.default)},
    **{getattr(getattr(aten, f), o): permute_from_movedim for f in ("movedim", "moveaxis") for o in ("int", "intlist")},
    aten.im2col.default: im2col_after_pad,
    aten.pixel_shuffle.default: views_from_pixel_shuffle, aten.pixel_unshuffle.default: views_from_pixel_shuffle,
    **{t: identity for t in DROPOUTS},
    aten.instance_norm.default: batch_norm_from_instance_norm,
    aten._native_batch_norm_legit_no_training.default: batch_norm_from_legit,
    aten.mul.Tensor: rms_norm_weighted,
}

NORMALIZE = {
    aten.convolution.default: conv_from_convolution,
    aten.conv1d.padding: conv_from_string_padding,
    aten.index.Tensor: embedding_from_index,
    **BEFORE_ANNOTATION,
    aten.addmm.default: linear_from_addmm,
    aten.mm.default: linear_from_mm,
    aten.matmul.default: linear_from_mm,
    aten.adaptive_max_pool1d.default: max_pool_from_adaptive_1d,
    aten.mean.dim: pool_from_mean,
    aten.relu6.default: hardtanh_from_relu6,
    aten.clamp.default: from_clamp,
    **{t: int8_from_uint8 for t in QUANTIZE | DEQUANTIZE},
    aten.index_put.default: from_index_put, aten._unsafe_index_put.default: from_index_put,
    aten.slice_scatter.default: cat_from_slice_scatter,
    aten.cummax.default: extreme_from_cummax, aten.cummin.default: extreme_from_cummax,
    aten.index_select.default: index_from_index_select,
    **{t: embedding_bag_from_tuple for t in (aten.embedding_bag.padding_idx, aten.embedding_bag.default,
                                             aten._embedding_bag.default, aten._embedding_bag_forward_only.default)},
    **{t: identity for t in (aten.clone.default, aten.alias.default,
                             aten.contiguous.default, aten.detach.default)},
}


def _apply(gm: GraphModule, rules: dict) -> bool:
    changed = functionalize_inplace(gm)
    for node in list(gm.graph.nodes):
        rule = rules.get(node.target) if node.op == "call_function" else None
        if rule is None:
            continue
        new = rule(node)
        if new is None:
            continue
        shapes = gm.meta.get(SYMBOLIC_SHAPES)      # the replacement has the node's symbolic shape:
        if shapes and node.name in shapes:         # a later rule may read it (dynamic_size)
            shapes.setdefault(new.name, shapes[node.name])
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        changed = True
    return changed


def normalize_for_annotation(gm: GraphModule) -> bool:
    """What the quantizer runs before annotating: in-place ops functional, BEFORE_ANNOTATION."""
    return finish(gm, _apply(gm, BEFORE_ANNOTATION))


def normalize_ops(gm: GraphModule) -> bool:
    return finish(gm, _apply(gm, NORMALIZE))
