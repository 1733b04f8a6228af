"""aten_rules' rules for ops that move or resample values: pads, gathers and indexing, and the
ops that only move values (upsample nearest, flips, rolls, reflection pads, pixel shuffles, ...)
lowered to `take` with the index map they compute on the indices themselves; col2im without
overlap; bilinear / bicubic / antialiased upsampling and grid_sample as float ops. Same contract
as vkq/aten_rules.py, whose CPU_RULES table holds them with the others.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from .passes._graph import arg, aten, dtype_of, dynamic_size, graph_out_size, qparams, shape_of, val


def _sizes(t, values) -> tuple[list, list]:
    """(attrs, ints): sizes as attrs (one computed from a dynamic dim, e.g. the padding up to a
    multiple of a window, stays symbolic) and their values at the example."""
    return [t.dim_attr(v, t.int_value(v)) for v in values], [t.int_value(v) for v in values]


def _constant_pad(n, t):
    x, (pad, at) = n.args[0], _sizes(t, n.args[1])
    if n.target == aten.pad.default and arg(n, 2, "mode", "constant") != "constant":
        return _remap(n, t)          # reflect / replicate / circular: a gather
    value = arg(n, 3 if n.target == aten.pad.default else 2, "value", 0.0)
    value = 0.0 if value is None else float(value)
    if any(p < 0 for p in at):
        return None
    if dtype_of(x) == torch.int8:       # the int8 number that stands for value
        qp = qparams(x)
        if qp is None:
            return None
        value = int(np.clip(np.rint(np.float32(value) / np.float32(qp[0])) + qp[1], -128, 127))
    elif dtype_of(x) is not None and not dtype_of(x).is_floating_point:
        value = int(value)
    return "constant_pad_nd", [x], {"pad": pad, "value": value}


def _word_dtype(d) -> str | None:
    """The program dtype a torch dtype becomes for the word ops: float32 / int32 / bool, or None
    (int8/uint8/int16 wrap around in ways the kernels do not model)."""
    if d is None:
        return None
    if d == torch.bool:
        return "bool"
    if d.is_floating_point:
        return "float32"
    return "int32" if d in (torch.int32, torch.int64) else None


def _gather(n, t):
    """A gather by a constant index is a take (its index map computed now); by an index the
    model computes (RoBERTa's position ids), the gather op."""
    took = _take(n, t)
    if took is not None or len(n.args) < 3 or not isinstance(n.args[2], Node) or n.kwargs.get("sparse_grad"):
        return took
    if _word_dtype(dtype_of(n.args[0])) not in ("float32", "int32", "bool"):
        return None
    return "gather", [n.args[0], n.args[2]], {"dim": int(n.args[1])}


def _index(n, t):
    """x[i0, ...] by indices: all constant, a take; computed ones, each an integer tensor on a
    leading dim (transformers' padding mask at arange indices), the index op."""
    took = _take(n, t)
    indices = n.args[1]
    if took is not None or not isinstance(indices, (list, tuple)) or not indices:
        return took
    if not all(isinstance(i, Node) and dtype_of(i) in (torch.int32, torch.int64) for i in indices):
        return None           # None entries (a later dim indexed) and bool masks: torch runs them
    if _word_dtype(dtype_of(n.args[0])) not in ("float32", "int32", "bool"):
        return None
    return "index", [n.args[0], *indices], {}


# Ops that only move values: lowered to `take` with the index map they compute on the indices
# themselves (every argument but the moved tensor must be a constant).
MOVERS = {aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default, aten._upsample_nearest_exact2d.vec,
          aten._upsample_nearest_exact2d.default, aten.upsample_nearest1d.vec, aten.upsample_nearest3d.vec,
          aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.replication_pad1d.default,
          aten.replication_pad2d.default, aten.index.Tensor, aten.roll.default, aten.flip.default, aten.repeat.default,
          aten.index_select.default, aten.gather.default, aten.pixel_shuffle.default,
          aten.pixel_unshuffle.default, aten.unfold.default, aten.tile.default, aten.diagonal.default,
          aten.as_strided.default, aten.movedim.int, aten.swapaxes.default, aten.permute_copy.default,
          aten.narrow_copy.default, aten.slice_copy.Tensor, aten.select_copy.int, aten.im2col.default,
          aten.rot90.default, aten.channel_shuffle.default, aten.native_channel_shuffle.default}


def _col2im(n, t):
    """col2im (F.fold) whose windows do not overlap (MobileViTV2's patches back to a map:
    kernel = stride): each output value is one input value, a take. Overlapping windows sum
    (the CPU)."""
    args = list(n.args)
    try:
        with torch.no_grad():
            ones = n.target(torch.ones(shape_of(args[0]), dtype=torch.float64), *args[1:])
    except (RuntimeError, TypeError):
        return None
    return _take(n, t) if float(ones.max()) <= 1.0 else None


_PAD_MODES = {aten.reflection_pad1d.default: "reflect", aten.reflection_pad2d.default: "reflect",
              aten.reflection_pad3d.default: "reflect", aten.replication_pad1d.default: "replicate",
              aten.replication_pad2d.default: "replicate", aten.replication_pad3d.default: "replicate"}


def _remap(n, t):
    """flip, roll and reflect / replicate / circular padding of a tensor with a dynamic dim:
    remap, whose index map is made per shape (ESRGAN-like and CycleGAN-like image-to-image nets
    at any resolution); of a static tensor, a take (its constant map)."""
    x = n.args[0]
    if not isinstance(x, Node) or not dynamic_size(x):
        return _take(n, t)
    rank = len(shape_of(x))
    dims = [["keep"] for _ in range(rank)]
    if n.target == aten.flip.default:
        for d in arg(n, 1, "dims", []):
            dims[int(d) % rank] = ["flip"]
    elif n.target == aten.roll.default:
        shifts, on = _sizes(t, arg(n, 1, "shifts", []))[0], list(arg(n, 2, "dims", []))
        if len(on) != len(shifts) or len(set(int(d) % rank for d in on)) != len(on):
            return None              # a roll of the flattened tensor, or twice along one dim
        for shift, d in zip(shifts, on):
            dims[int(d) % rank] = ["roll", shift]
    else:
        mode = _PAD_MODES.get(n.target) or arg(n, 2, "mode", "constant")
        pad, at = _sizes(t, n.args[1])
        if mode not in ("reflect", "replicate", "circular") or len(pad) % 2 or len(pad) > 2 * rank or min(at) < 0:
            return None
        for i in range(len(pad) // 2):
            dims[rank - 1 - i] = [mode, pad[2 * i], pad[2 * i + 1]]
    return "remap", [x], {"dims": dims}


def _take(n, t):
    from .passes.fold_constants import evaluate_constant
    x = n.args[0]
    if not isinstance(x, Node) or not isinstance(val(n), torch.Tensor):
        return None
    env = {}
    for a in n.all_input_nodes:
        if a is not x:
            v = evaluate_constant(t.gm, a)
            if v is None:
                return None
            env[a] = v
    numel = int(np.prod(shape_of(x), dtype=np.int64))
    if numel >= 2 ** 31:
        return None
    index = None
    for dtype in (torch.int64, torch.float64):      # (some movers, e.g. upsampling, take floats only)
        env[x] = torch.arange(1, numel + 1, dtype=dtype).reshape(shape_of(x))     # 0: a value the op made
        args = torch.fx.node.map_arg(n.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a])
        try:
            with torch.no_grad():
                index = n.target(*args, **kwargs)
            break
        except (RuntimeError, NotImplementedError):
            continue
    if not isinstance(index, torch.Tensor) or tuple(index.shape) != shape_of(n) or bool((index < 1).any()):
        return None         # (a position no input value reaches, e.g. padding, is no gather)
    index = index - 1
    if dynamic_size(x):
        dims = _picks(index.numpy(), shape_of(x))
        if dims is not None:
            return "remap", [x], {"dims": dims}
    return "take", [x, t.const(index.numpy().astype(np.int64).astype(np.int32), "index")], {}


def _repeat(n, t):
    """repeat: a take (or remap) of the map it computes; by counts the graph computes from dynamic
    dims (DeBERTa's relative embeddings repeated batch // heads times), or of a tensor with a
    dynamic dim (BLOOM's alibi, repeat(1, 1, 1) along its sequence: a take's map is the
    example's), remap's tiles with the counts kept symbolic."""
    x, reps = n.args[0], list(n.args[1])
    took = None if dynamic_size(n) else _take(n, t)
    if took is not None or not isinstance(x, Node) or len(reps) != len(shape_of(x)):
        return took
    counts, at = _sizes(t, reps)
    if min(at) < 1:
        return None
    return "remap", [x], {"dims": [["keep"] if c == 1 else ["tile", c] for c in counts]}


def _picks(index: np.ndarray, shape) -> list | None:
    """A take's index map (the output's shape, flat indices into x) as remap's per-dim maps,
    where each output dim reads one input dim by indices of its own (x[:, idx], index_select,
    repeat), so the map is remade at every size of the dims it keeps whole or tiles; None where
    the map mixes dims. (Picks on a dynamic dim are kept: constant indices into a flattened map
    stay right at every size; a map that only looks like picks at the example, e.g. a repeat's,
    differs at vkq.dynamic.verify's probe size and is refused there.)"""
    shape = tuple(int(v) for v in shape)
    if index.ndim != len(shape) or not index.size:
        return None
    coords = np.unravel_index(index, shape)
    dims = []
    for d, c in enumerate(coords):
        v = c[tuple(slice(None) if j == d else 0 for j in range(c.ndim))]
        if not np.array_equal(c, v.reshape([-1 if j == d else 1 for j in range(c.ndim)]) + np.zeros_like(c)):
            return None
        tiles = v.size // shape[d]
        if v.size % shape[d] == 0 and np.array_equal(v, np.arange(v.size) % shape[d]):
            dims.append(["keep"] if tiles == 1 else ["tile", tiles])
        else:
            dims.append(["pick", *map(int, v)])
    return dims


def _upsample_nearest(n, t):
    """Nearest 2-D resizing: its own op, whose index map is made per shape (a take's is not)."""
    from .ops.resize import nearest_attrs
    if not isinstance(val(n), torch.Tensor) or val(n).dim() < 3:
        return None
    return "upsample_nearest2d", [n.args[0]], graph_out_size(nearest_attrs(n, shape_of(n)), n)


def _grid_sample(n, t):
    """aten.grid_sampler(x, grid, mode, padding_mode, align_corners): bilinear and nearest on a
    4-D float x (grid_sample); bicubic and 5-D: torch_op."""
    from .ops.resize import GRID_MODES
    x, grid, mode, padding, align = n.args[:5]
    if mode not in GRID_MODES or len(shape_of(x)) != 4:
        return None
    return "grid_sample", [x, grid], {"mode": int(mode), "padding_mode": int(padding), "align_corners": bool(align)}


def _upsample_antialias(n, t):
    """_upsample_bilinear2d_aa / _upsample_bicubic2d_aa (interpolate(antialias=True); arguments as
    bilinear's): float only."""
    from .ops.resize import bilinear_attrs
    mode = "bicubic" if "bicubic" in str(n.target) else "bilinear"
    return "upsample_antialias2d", [n.args[0]], {"mode": mode, **graph_out_size(bilinear_attrs(n, shape_of(n)), n)}


def _upsample_bicubic(n, t):
    """upsample_bicubic2d (arguments as bilinear's): float only (PT2E leaves it float)."""
    from .ops.resize import bilinear_attrs
    return "upsample_bicubic2d", [n.args[0]], graph_out_size(bilinear_attrs(n, shape_of(n)), n)


def _upsample_bilinear(n, t):
    from .ops.resize import bilinear_attrs
    return "upsample_bilinear2d", [n.args[0]], graph_out_size(bilinear_attrs(n, shape_of(n)), n)
