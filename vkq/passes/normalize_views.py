"""normalize_views: normalize_ops' rules for views, slices, pads and indexing: the spellings a
model uses for them rewritten into the few forms with kernels (normalize_ops.NORMALIZE and
BEFORE_ANNOTATION hold these rules with the others):

  slice_scatter -> cat of slices; index_put (a KV cache write, a masked fill) -> index_copy / where;
  split / chunk / tensor_split -> slices; repeat_interleave by a constant -> unsqueeze, expand,
  reshape; pixel_shuffle / unshuffle -> views and a permute; stack -> unsqueezes and a cat;
  swapaxes, mT / adjoint, movedim -> transpose / permute; a negative pad -> a crop (slices);
  im2col after a pad -> slices; index by one tensor -> embedding; embedding_bag's tuple form;
  index_select -> index.
"""
from __future__ import annotations

import math
import operator

import torch
from torch.fx import Node

from .. import symbolic
from .functionalize import END
from ._graph import (SYMBOLIC_SHAPES, _in_place_of, _made, _new, _pair, add_constant, arg, aten, call_before,
                     dtype_of, dynamic_size, first_outputs, record_symbolic, size_node, val)


def cat_from_slice_scatter(node):
    """slice_scatter(base, new, dim, start, end) along a static dim, step 1 (torch.export's own
    functionalization of x[..., a:b] = y under dynamic shapes) -> base's pieces either side of
    the slice and new, concatenated, as functionalize_inplace writes such a slice."""
    from .functionalize import slice_write
    base, new = node.args[:2]
    v = val(base)
    dim, start, end, step = (arg(node, 2, "dim", 0), arg(node, 3, "start", None), arg(node, 4, "end", None),
                             arg(node, 5, "step", 1))
    if not isinstance(v, torch.Tensor) or step != 1 or dynamic_size(base, [dim % v.dim()]):
        return None
    return slice_write(node, base, new, dim, start, end, step)


def from_index_put(node):
    """x[..., index] = values (index_put, one index tensor after any number of full slices):
    - a bool mask and one value (scores[mask] = -inf, x[x < 0] = 0): where(mask, value, x), the
      mask unsqueezed to x's rank (accumulate: where(mask, x + value, x));
    - a 1-D integer index (a constant bool mask of one dim: its nonzero positions): index_fill
      with one value, else index_copy (accumulate: index_add) of the values expanded to the
      indexed slices, along that dim; negative indices wrapped as index_put does.
    Other forms (several index tensors, a computed mask with many values) stay: the CPU."""
    from .fold_constants import evaluate_constant
    x, indices, values = node.args[:3]
    accumulate = bool(arg(node, 3, "accumulate", False))
    v = val(x)
    if not isinstance(v, torch.Tensor) or not isinstance(values, Node) or not isinstance(indices, (list, tuple)) \
            or dtype_of(values) != v.dtype:
        return None
    at = [i for i, t in enumerate(indices) if t is not None]
    if len(at) != 1 or not isinstance(indices[at[0]], Node) or not isinstance(val(indices[at[0]]), torch.Tensor):
        return None
    j, index = at[0], indices[at[0]]
    gm = node.graph.owning_module
    rank, vi, n_values = v.dim(), val(index), val(values).numel()
    if vi.dtype == torch.bool:
        if isinstance(n_values, int) and n_values == 1:
            mask = index
            for _ in range(j):
                mask = call_before(node, aten.unsqueeze.default, (mask, 0))
            for _ in range(rank - j - vi.dim()):
                mask = call_before(node, aten.unsqueeze.default, (mask, -1))
            value = call_before(node, aten.reshape.default, (values, []))
            if accumulate:
                value = call_before(node, aten.add.Tensor, (x, value))
            return _new(node, aten.where.self, (mask, value, x))
        known = evaluate_constant(gm, index)
        if known is None or known.dim() != 1:
            return None
        index = add_constant(gm, f"{node.name}_positions", torch.nonzero(known).flatten(), node)
    elif vi.dtype not in (torch.int32, torch.int64) or vi.dim() != 1:
        return None
    if v.dtype not in (torch.float32, torch.int32, torch.int64):
        return None         # (the scatter kernel's words: a bool x's index_fill would run in torch)
    size, shape = v.shape[j], list(v.shape[:j]) + list(val(index).shape) + list(v.shape[j + 1:])
    if not all(isinstance(d, int) for d in [size, *shape]):
        return None
    known, dynamic_dim = evaluate_constant(gm, index), dynamic_size(x, [j])
    if known is not None:
        if (known < 0).any() and dynamic_dim or ((known < -size) | (known >= size)).any() and not dynamic_dim:
            return None                     # (a size known at run time only; torch's own error)
        if (known < 0).any():
            index = add_constant(gm, f"{node.name}_index", known % size, node)
    else:                                   # (a dynamic dim's size read from the graph at run time)
        wrapped = call_before(node, aten.add.Tensor, (index, size_node(node, x, j) if dynamic_dim else size))
        index = call_before(node, aten.where.self, (call_before(node, aten.lt.Scalar, (index, 0)), wrapped, index))
    if val(index).dtype != torch.int64:               # (index_copy / index_fill take int64 indices only)
        index = call_before(node, aten._to_copy.default, (index,), {"dtype": torch.int64})
    if n_values == 1 and not accumulate:              # (no expand: a constant one would fix the size)
        return _new(node, aten.index_fill.int_Tensor, (x, j, index, call_before(node, aten.reshape.default, (values, []))))
    if list(val(values).shape) != shape:
        if dynamic_size(node):
            return None
        values = call_before(node, aten.expand.default, (values, shape))
    target = aten.index_add.default if accumulate else aten.index_copy.default
    return _new(node, target, (x, j, index, values))


def slices_from_split(node):
    """split(x, size | sizes, dim) / chunk(x, chunks, dim), read through getitems, the split dim
    static -> one slice of x per part (ShuffleNetV2's channel halves): slices share their input's
    quantization (the quantizer's SHARE_INPUT), so an int8 x stays int8, each part an int8
    gather, where a split had no annotation and cost a dequantize, a float split and a quantize
    per part."""
    x, dim = node.args[0], arg(node, 2, "dim", 0)
    v, parts = val(x), val(node)
    if not isinstance(v, torch.Tensor) or not isinstance(parts, (list, tuple)) or not node.users \
            or not all(u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int)
                       and -len(parts) <= u.args[1] < len(parts) for u in node.users):
        return None
    dim = dim % v.dim()
    if not isinstance(v.shape[dim], int) or dynamic_size(x, [dim]):
        return None
    starts = [0]
    for p in parts:
        starts.append(starts[-1] + int(p.shape[dim]))
    for u in list(node.users):
        i = u.args[1] % len(parts)
        piece = _new(u, aten.slice.Tensor, (x, dim, starts[i], starts[i + 1]))
        piece.meta["val"] = val(u)
        u.replace_all_uses_with(piece)
        node.graph.erase_node(u)
    return x          # (nothing reads the split now: it goes)


def expand_from_repeat_interleave(node):
    """repeat_interleave(x, r, dim), r an int (grouped-query attention's key/value heads):
    unsqueeze(dim + 1), expand it to r, flatten dims dim and dim + 1: views and a broadcast
    copy, with no size written out (dynamic dims stay symbolic). r a constant tensor (a count per
    slice): index_select by the constant index it makes. No dim: of x flattened."""
    from .fold_constants import evaluate_constant
    x, r, dim = node.args[0], node.args[1], arg(node, 2, "dim")
    v = val(x)
    if not isinstance(v, torch.Tensor):
        return None
    flat = dim is None
    v, dim = (v.reshape(-1), 0) if flat else (v, dim % v.dim())
    n, size = v.shape[dim], node.kwargs.get("output_size")   # (a hint, n * r: Mamba2's grouped B and C)
    counts = evaluate_constant(node.graph.owning_module, r) if isinstance(r, Node) else None
    if isinstance(r, Node) and (counts is None or counts.dim() > 1 or not isinstance(n, int)):
        return None
    if not isinstance(r, (int, Node)) or (isinstance(r, int) and isinstance(size, int) and isinstance(n, int)
                                          and size != n * r):
        return None
    if flat:
        x = _new(node, aten.reshape.default, (x, [-1]))
        x.meta["val"] = v
    if counts is not None:
        index = torch.arange(n).repeat_interleave(counts.reshape(-1).expand(n) if counts.numel() == 1 else counts)
        return _new(node, aten.index_select.default, (x, dim, add_constant(node.graph.owning_module,
                                                                          f"{node.name}_index", index, node)))
    up = _new(node, aten.unsqueeze.default, (x, dim + 1))
    wide = _new(node, aten.expand.default, (up, [-1] * (dim + 1) + [r] + [-1] * (v.dim() - dim - 1)))
    up.meta["val"] = v.unsqueeze(dim + 1)
    wide.meta["val"] = up.meta["val"].expand(*[-1] * (dim + 1), r, *[-1] * (v.dim() - dim - 1))
    return _new(node, aten.flatten.using_ints, (wide, dim, dim + 1))


def views_from_pixel_shuffle(node):
    """pixel_shuffle / pixel_unshuffle of a map with a dynamic dim (ESPCN-style super-resolution
    at any size): unflatten, one permute, flattens, with no size of the example written into the
    graph (a static map keeps the op: one gather by its index map, which is made for one size)."""
    x, r = node.args[0], node.args[1]
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dim() < 3 or not isinstance(r, int) or not (
            dynamic_size(x) or any(isinstance(d, torch.SymInt) for d in v.shape)):
        return None
    lead = v.dim() - 3
    c, h, w = lead, lead + 1, lead + 2
    order = list(range(lead))
    if node.target == aten.pixel_shuffle.default:          # (.., C r r, H, W) -> (.., C, H r, W r)
        steps = [(aten.unflatten.int, (c, [v.shape[c] // (r * r), r, r])),
                 (aten.permute.default, (order + [c, c + 3, c + 1, c + 4, c + 2],)),
                 (aten.flatten.using_ints, (c + 3, c + 4)), (aten.flatten.using_ints, (c + 1, c + 2))]
    else:                                                   # (.., C, H r, W r) -> (.., C r r, H, W)
        steps = [(aten.unflatten.int, (w, [-1, r])), (aten.unflatten.int, (h, [-1, r])),
                 (aten.permute.default, (order + [c, c + 2, c + 4, c + 1, c + 3],)),
                 (aten.flatten.using_ints, (c, c + 2))]
    out, ov = x, v
    for target, args in steps:
        out = _new(node, target, (out, *args))
        ov = out.meta["val"] = target(ov, *args)
    return out


def cat_from_stack(node):
    """stack(tensors, dim) = cat of each unsqueezed at dim (GPT-J's rotary embedding): views and
    a cat, which have kernels (cat_q8 keeps int8 where the quantizer annotates it)."""
    tensors, dim = node.args[0], arg(node, 1, "dim", 0)
    vs = [val(t) for t in tensors] if isinstance(tensors, (list, tuple)) else []
    if not vs or not all(isinstance(v, torch.Tensor) for v in vs):
        return None
    dim = dim % (vs[0].dim() + 1)
    ups = []
    for t, v in zip(tensors, vs):
        up = _new(node, aten.unsqueeze.default, (t, dim))
        up.meta["val"] = v.unsqueeze(dim)
        ups.append(up)
    return _new(node, aten.cat.default, (ups, dim))


def transpose_from_swapaxes(node):
    return _new(node, aten.transpose.int, (node.args[0], node.args[1], node.args[2]))


def permute_from_matrix_transpose(node):
    """x.T (all dims reversed), x.mT / mH / adjoint() (the last two swapped), x.H (a matrix's):
    the permute, as for a real tensor the conjugate changes nothing (q @ k.mT ran in torch)."""
    v = val(node.args[0])
    if not isinstance(v, torch.Tensor) or v.is_complex() or (node.target != aten.numpy_T.default and v.dim() < 2):
        return None
    dims = list(range(v.dim()))
    if node.target == aten.numpy_T.default:
        dims.reverse()
    else:
        dims[-2:] = dims[:-3:-1]
    return _new(node, aten.permute.default, (node.args[0], dims))


def permute_from_movedim(node):
    """movedim(x, source, destination): the permute that puts each source dim at its destination,
    the other dims in their order (MaxViT's grid attention moves its axes this way)."""
    v = node.args[0].meta.get("val")
    if v is None:
        return None
    rank = v.dim()
    src, dst = node.args[1], node.args[2]
    src, dst = ([src], [dst]) if isinstance(src, int) else (list(src), list(dst))
    src, dst = [d % rank for d in src], [d % rank for d in dst]
    dims = [None] * rank
    for s_, d_ in zip(src, dst):
        dims[d_] = s_
    rest = iter(d for d in range(rank) if d not in src)
    return _new(node, aten.permute.default, (node.args[0], [d if d is not None else next(rest) for d in dims]))


def crop_from_negative_pad(node):
    """A constant pad by negative amounts crops: each cropped dim a slice, then a pad by the
    positive amounts (none: the slices alone). The kernels pad only outward. A pad by nothing
    (Swin pads its windows to a multiple of 7, by 0 at 224) is its input: no copy."""
    x, pad = node.args[0], list(node.args[1])
    if node.target == aten.pad.default and arg(node, 2, "mode", "constant") != "constant":
        return None
    if all(isinstance(p, int) and p == 0 for p in pad) and isinstance(x, Node):
        return x
    if not all(isinstance(p, int) for p in pad) or min(pad, default=0) >= 0 or not isinstance(val(x), torch.Tensor):
        return None
    shape = list(val(x).shape)
    if not all(isinstance(d, int) for d in shape):
        return None
    value = arg(node, 3 if node.target == aten.pad.default else 2, "value", 0.0)
    for i in range(0, len(pad), 2):            # pad[i], pad[i + 1]: before/after of dim -1 - i // 2
        dim, before, after = len(shape) - 1 - i // 2, pad[i], pad[i + 1]
        if before >= 0 and after >= 0:
            continue
        start, end = max(-before, 0), shape[dim] - max(-after, 0)
        if end <= start:
            return None
        shape[dim] = end - start
        # (the end counted from the dim's end, as the pad is: a dynamic dim's slice stays symbolic)
        x = _made(node, aten.slice.Tensor, (x, dim, start, after if after < 0 else END), shape, val(node).dtype)
    rest = [max(p, 0) for p in pad]
    return _new(node, aten.constant_pad_nd.default, (x, rest, 0.0 if value is None else value)) if any(rest) else x


def im2col_after_pad(node):
    """im2col (nn.Unfold) with its padding as a pad of its own; along a dynamic dim (ConvBERT's
    span convs over the tokens) as a cat of the kernel's shifted strided slices, whose lengths
    follow the dim (the take a static im2col becomes has an index map made for one size)."""
    x, kernel, dilation, padding, stride = node.args[:5]
    padding, kernel, dilation, stride = (_pair(v) for v in (padding, kernel, dilation, stride))
    if not isinstance(val(x), torch.Tensor) or not all(isinstance(p, int) for p in padding + kernel + dilation + stride):
        return None
    shape = list(val(x).shape)
    if not all(isinstance(d, int) for d in shape) or len(shape) != 4:
        return None
    shapes = node.graph.owning_module.meta.get(SYMBOLIC_SHAPES)
    sym = shapes.get(x.name) if shapes else None
    dynamic = isinstance(sym, tuple) and any(isinstance(d, str) for d in sym)
    if not any(padding) and not dynamic:
        return None
    if any(padding):
        x = _made(node, aten.constant_pad_nd.default, (x, [padding[1], padding[1], padding[0], padding[0]], 0.0),
                  shape[:-2] + [shape[-2] + 2 * padding[0], shape[-1] + 2 * padding[1]], val(x).dtype)
        shape = list(val(x).shape)
        if dynamic:
            sym = (*sym[:-2], symbolic.plus(sym[-2], 2 * padding[0]), symbolic.plus(sym[-1], 2 * padding[1]))
            record_symbolic(x, sym)
    if not dynamic:
        return _new(node, aten.im2col.default, (x, kernel, dilation, [0, 0], stride))
    return _im2col_by_slices(node, x, shape, list(sym), kernel, dilation, stride)


def _im2col_by_slices(node, x, shape, sym, kernel, dilation, stride):
    """im2col of an unpadded (N, C, H, W) x: for each kernel offset (i, j) the slice x[..., i d ::
    s, j d :: s] cut (k - 1 - i) d before the end (its length the output's, at every size),
    unsqueezed and concatenated to (N, C, KH KW, OH, OW), viewed as (N, C KH KW, OH OW)."""
    dtype = val(x).dtype
    out, out_sym = list(shape), list(sym)
    for d in (2, 3):
        k, dd, ss = kernel[d - 2], dilation[d - 2], stride[d - 2]
        out[d] = (shape[d] - (k - 1) * dd - 1) // ss + 1
        out_sym[d] = out[d] if isinstance(sym[d], int) else f"((({sym[d]}) - {(k - 1) * dd + 1}) // {ss}) + 1"
        if out[d] <= 0:
            return None

    def made(target, args, shp, sshp):
        return record_symbolic(_made(node, target, args, shp, dtype), sshp)
    pieces = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            t, t_shape, t_sym = x, list(shape), list(sym)
            for d, off in ((2, i), (3, j)):
                k, dd, ss = kernel[d - 2], dilation[d - 2], stride[d - 2]
                cut = (k - 1 - off) * dd
                t_shape[d], t_sym[d] = out[d], out_sym[d]
                t = made(aten.slice.Tensor, (t, d, off * dd, -cut if cut else END, ss), t_shape, t_sym)
            pieces.append(made(aten.unsqueeze.default, (t, 2), t_shape[:2] + [1] + t_shape[2:],
                               t_sym[:2] + [1] + t_sym[2:]))
    taps = kernel[0] * kernel[1]
    joined = made(aten.cat.default, (pieces, 2), out[:2] + [taps] + out[2:], out_sym[:2] + [taps] + out_sym[2:])
    channels = made(aten.flatten.using_ints, (joined, 1, 2), [out[0], out[1] * taps] + out[2:],
                    [out_sym[0], symbolic.times(out_sym[1], taps)] + out_sym[2:])     # (no sizes: a dynamic batch stays)
    return made(aten.flatten.using_ints, (channels, 2, 3), [out[0], out[1] * taps, out[2] * out[3]],
                [out_sym[0], symbolic.times(out_sym[1], taps), symbolic.times(out_sym[2], out_sym[3])])


def embedding_from_index(node):
    """Advanced indexing of the leading dims by indices the model computes: the rows of x seen as
    a (rows, rest) table, gathered by the flat row index sum_j i_j * stride_j (negative indices
    wrapped, as torch's), on the embedding kernel. Indices all constant stay a take (vkq.lower);
    with a dynamic dim (CLIP's pooled token x[arange(b), ids.argmax(-1)], Whisper's positions
    weight[arange(t)]) the node stays: the index op."""
    from .fold_constants import evaluate_constant
    x, indices = node.args[0], node.args[1]
    v = val(x)
    if not isinstance(v, torch.Tensor) or v.dtype != torch.float32 or not isinstance(indices, (list, tuple)) \
            or not indices or any(not isinstance(i, Node) for i in indices) or len(indices) > v.dim():
        return None
    if any(val(i).dtype not in (torch.int64, torch.int32) for i in indices) \
            or all(evaluate_constant(node.graph.owning_module, i) is not None for i in indices):
        return None
    shape = list(v.shape)
    if not all(isinstance(d, int) for d in shape) or not all(isinstance(d, int) for i in indices for d in val(i).shape):
        return None
    if dynamic_size(node) or dynamic_size(x) or any(dynamic_size(i) for i in indices):
        return None         # (its table and flat index are made for one size: the index op reads any)
    k = len(indices)
    lead, rest = shape[:k], shape[k:]
    out_idx = list(torch.broadcast_shapes(*[tuple(val(i).shape) for i in indices]))
    flat = None
    for j, i in enumerate(indices):
        ishape, idt = list(val(i).shape), val(i).dtype
        neg = _made(node, aten.lt.Scalar, (i, 0), ishape, torch.bool)
        i = _made(node, aten.where.self, (neg, _made(node, aten.add.Tensor, (i, lead[j]), ishape, idt), i), ishape, idt)
        stride = math.prod(lead[j + 1:])
        term = i if stride == 1 else _made(node, aten.mul.Tensor, (i, stride), ishape, idt)
        flat = term if flat is None else _made(node, aten.add.Tensor, (flat, term), out_idx, torch.int64)
    rows, width = math.prod(lead), math.prod(rest)
    table = _made(node, aten.reshape.default, (x, [rows, width]), [rows, width], v.dtype)
    picked = _made(node, aten.embedding.default, (table, flat), out_idx + [width], v.dtype)
    return _made(node, aten.reshape.default, (picked, out_idx + rest), out_idx + rest, v.dtype)


def embedding_bag_from_tuple(node):
    """embedding_bag (any of its three spellings) + getitem 0, its other outputs unread ->
    vkq.embedding_bag (torch_ops.py), one output, which has a kernel of its own. A padding_idx
    below 0 is none (_embedding_bag's -1); scale_grad_by_freq and sparse only matter to training."""
    from .torch_ops import EMBEDDING_BAG
    names = ("weight", "indices", "offsets", "scale_grad_by_freq", "mode", "sparse", "per_sample_weights",
             "include_last_offset", "padding_idx")
    a = {k: arg(node, i, k, None) for i, k in enumerate(names)}
    if not all(isinstance(a[k], Node) for k in ("weight", "indices", "offsets")) or val(a["indices"]).dim() != 1 \
            or (users := first_outputs(node)) is None:
        return None
    pad = a["padding_idx"]
    pad = None if pad is None or int(pad) < 0 else int(pad)
    new = _new(node, EMBEDDING_BAG, (a["weight"], a["indices"], a["offsets"], int(a["mode"] or 0),
                                     a["per_sample_weights"], bool(a["include_last_offset"]), pad))
    return _in_place_of(users, new)


def index_from_index_select(node):
    """index_select(x, dim, i) by indices the model computes (M2M100's sinusoidal positions from
    the ids): x[i] on dim 0, on another dim x moved there first and back after (permutes). A
    constant i stays: the lowering takes it by its index map."""
    from .fold_constants import evaluate_constant
    x, dim, i = node.args[0], node.args[1], node.args[2]
    v = val(x)
    if not isinstance(v, torch.Tensor) or not isinstance(i, Node) or val(i) is None or val(i).dim() > 1 \
            or evaluate_constant(node.graph.owning_module, i) is not None:
        return None
    rank = v.dim()
    dim = int(dim) % max(rank, 1)
    if rank == 0 or dim == 0:
        return _new(node, aten.index.Tensor, (x, [i]))
    order = [dim] + [d for d in range(rank) if d != dim]
    front = _new(node, aten.permute.default, (x, order))
    front.meta["val"] = v.permute(order)
    picked = _new(node, aten.index.Tensor, (front, [i]))
    picked.meta["val"] = front.meta["val"].index_select(0, val(i))
    back = [order.index(d) for d in range(rank)]
    return _new(node, aten.permute.default, (picked, back))
