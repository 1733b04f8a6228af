"""Ops that move values without changing them, for every dtype (one name each): reshape,
repack, permute, transpose, expand, cat, slice, select, split, unbind, constant_pad_nd, take,
remap.

Each output element is one input element or a fill value; which one a Gather says. The
output's row-major index, unravelled over dims D (a row-major factorisation of the output's
shape) into c, reads

    inside the box  lo <= c < lo + size:   src[sbase + sum_d (c_d - lo_d) * ss_d]   (row-major
                                           index into the input)
    outside:        `fill` (constant_pad_nd), or nothing (cat: another input's gather writes it)

float32 and int32 tensors (row-major words on the device) run a Gather as float_copy
dispatches (a fill, then the copy of the box); int8 tensors in any packed layout as one
`repack` dispatch (shaders/repack.comp; by a byte or word map made here, byte_map) from the
input's layout straight into the output's, so
a permute of a 4W4C tensor into 4H4W costs one pass (a repack between 4W4C and 4H4W of one shape
takes shaders/repack_blocks.comp instead: whole blocks, not byte by byte). A reshape or repack
whose output is its input's words (TensorSpec.same_words: float and int32 reshapes, int8 ROW to
ROW, equal packed images) builds no dispatch where the executor planned the output into the
input's buffer (vkq.executor.memory_aliases). `take` reads through a constant index map
instead (index with constant indices, roll): out.flat[i] = x.flat[index[i]].

Attrs (all JSON):
  reshape(x; shape)          repack(q; shape=None)       permute(x; dims)    transpose(x; dim0, dim1)
  expand(x; shape)           cat(*xs; dim)               slice(x; dim, start, end, step)
  select(x; dim, index)      split(x; dim, sizes) -> one output per size      unbind(x; dim)
  constant_pad_nd(x; pad, value)   pad as torch: (last dim before, after, the dim before it ...);
                             an int8 tensor's value is the int8 number (the lowering quantizes it)
  take(x, index)             index: a constant int32 array of the output's shape
  remap(x; dims)             a map per dim, [kind, a, b]: ["keep"], ["flip"], ["roll", shift],
                             ["reflect" | "replicate" | "circular", before, after] (torch's pad
                             modes), ["pick", i0, i1, ...] (those indices of a static dim: x[:, idx]),
                             ["tile", k] (the dim k times over: repeat); the index map
                             made from the input's shape when the op is built, so one program
                             serves every shape (a take's map is made for one: the lowering uses
                             remap where a dim is dynamic)
The int8 versions keep the input's quantization (the output's spec says the same scale/zero point).

A node declines (runs on the CPU, with the reason) where a float Gather still has more than
float_copy's 6 dims after merging or the dtypes of input and output differ.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import packing
from ..device import grid_1d
from ..registry import register_op
from .float import MAX_RANK, _elementwise, _numel, _pad, broadcast_strides, merge_dims, permute_dims, strides_of
from .float_rewrites import readers_of

LOCAL = 64
ANY = ("4W4C", "4H4W", "ROW")


# ---------------------------------------------------------------- references (any dtype)

def reshape(x, *, shape):
    return np.asarray(x).reshape(shape)


def repack(q, *, shape=None):
    return q if shape is None else np.asarray(q).reshape(shape)


def _contiguous(a):
    """a as a C-contiguous array, a 0-d one kept 0-d (np.ascontiguousarray makes it 1-d: select's
    last element of a 1-D tensor, prod over everything)."""
    return np.array(a, order="C", copy=False)


def permute(x, *, dims):
    return _contiguous(np.transpose(np.asarray(x), dims))


def transpose(x, *, dim0, dim1):
    return _contiguous(np.swapaxes(np.asarray(x), dim0, dim1))


def expand(x, *, shape):
    """Broadcast x to shape (numpy rules), materialised."""
    return _contiguous(np.broadcast_to(np.asarray(x), tuple(shape)))


def _cat_inputs(xs, rank):
    """torch.cat skips 1-D empty tensors beside tensors of another rank (legacy), and so do we."""
    return [x for x in xs if not (np.ndim(x) == 1 and np.size(x) == 0 and rank != 1)]


def cat(*xs, dim=0):
    rank = max(np.ndim(x) for x in xs)
    return np.concatenate([np.asarray(x) for x in _cat_inputs(xs, rank)], axis=dim)


def _slice_index(rank, dim, s):
    return (slice(None),) * (dim % rank) + (s,)


def slice_(x, *, dim, start, end, step=1):
    x = np.asarray(x)
    return _contiguous(x[_slice_index(x.ndim, dim, slice(start, end, step))])


def select(x, *, dim, index):
    x = np.asarray(x)
    return _contiguous(x[_slice_index(x.ndim, dim, index)])


def split(x, *, dim, sizes):
    x = np.asarray(x)
    bounds = np.cumsum([0] + list(sizes))
    return tuple(slice_(x, dim=dim, start=int(a), end=int(b)) for a, b in zip(bounds[:-1], bounds[1:]))


def unbind(x, *, dim):
    x = np.asarray(x)
    return tuple(select(x, dim=dim, index=i) for i in range(x.shape[dim]))


def constant_pad_nd(x, *, pad, value=0):
    x = np.asarray(x)
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    if any(a < 0 or b < 0 for a, b in widths):
        raise ValueError(f"constant_pad_nd: negative padding {pad} (a crop) is not supported")
    return np.pad(x, widths, constant_values=np.asarray(value).astype(x.dtype))


def take(x, index):
    return np.asarray(x).reshape(-1)[np.asarray(index, np.int64)]


REMAPS = ("keep", "flip", "roll", "reflect", "replicate", "circular", "pick", "tile")


def remap_source(size: int, kind: str, *ints: int) -> np.ndarray:
    """The source index of each output index along one dim (torch's flip, roll and pad modes, or
    the indices picked)."""
    if kind == "pick" and ints and max(ints) < size:
        return np.asarray(ints, np.int64)
    a, b = (list(ints) + [0, 0])[:2]
    if kind == "keep":
        return np.arange(size)
    if kind == "tile" and a >= 1:
        return np.arange(size * a) % size
    if kind == "flip":
        return np.arange(size)[::-1]
    if kind == "roll":
        return (np.arange(size) - a) % size
    i = np.arange(-a, size + b)
    if kind == "replicate":
        return np.clip(i, 0, size - 1)
    if kind == "circular":
        return i % size
    if kind == "reflect" and max(a, b) < size:
        return (size - 1) - np.abs((size - 1) - np.abs(i))
    raise ValueError(f"remap: {kind} {a, b} of a dim of {size}")


def remap_index(shape, dims) -> tuple[tuple, np.ndarray]:
    """(the output's shape, its row-major flat index map into x)."""
    if not isinstance(dims, list) or len(dims) != len(shape) or any(
            not isinstance(d, list) or not d or d[0] not in REMAPS or (len(d) > 3 and d[0] != "pick")
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in d[1:])
            or (d[0] not in ("keep", "flip", "roll", "tile") and (len(d) < 2 + (d[0] != "pick") or min(d[1:]) < 0))
            for d in dims):
        raise ValueError(f"remap: maps {dims} for a rank-{len(shape)} tensor (each [kind, ints]: kind one of "
                         f"{REMAPS}, padding amounts and picked indices >= 0)")
    src = [remap_source(n, *d) for n, d in zip(shape, dims)]
    flat = sum(np.asarray(v, np.int64).reshape([-1 if j == i else 1 for j in range(len(src))]) * st
               for i, (v, st) in enumerate(zip(src, strides_of(shape)))) if src else np.zeros((), np.int64)
    return tuple(len(v) for v in src), np.broadcast_to(flat, tuple(len(v) for v in src)).reshape(-1)


def remap(x, *, dims):
    x = np.asarray(x)
    shape, index = remap_index(x.shape, dims)
    return x.reshape(-1)[index].reshape(shape)


# ---------------------------------------------------------------- gathers

@dataclass
class Gather:
    """out[c] = src[sbase + sum_d (c_d - lo_d) ss_d] for lo <= c < lo + size (c over dims D)."""
    src: int                     # which input
    dst: int                     # which output
    dims: list                   # D
    ss: list
    sbase: int = 0
    lo: list = field(default_factory=list)     # [] = the whole of D
    size: list = field(default_factory=list)
    fill: object = None          # None: what lies outside the box is another gather's

    def box(self):
        return (self.lo or [0] * len(self.dims)), (self.size or list(self.dims))

    def full(self) -> bool:
        lo, size = self.box()
        return list(size) == list(self.dims) and not any(lo)

    def reach(self) -> tuple[int, int]:
        """The lowest and highest source index the box reads."""
        lo, size = self.box()
        span = [(s - 1) * st for s, st in zip(size, self.ss)]
        return self.sbase + sum(min(0, v) for v in span), self.sbase + sum(max(0, v) for v in span)

    def merged(self):
        """(D, lo, size, ss) with size-1 dims dropped and neighbours merged where the inner one is
        whole (lo 0, size D) and the source strides run on (ss[d] == ss[d+1] * D[d+1])."""
        lo, size = self.box()
        out = []
        for d, lo_d, n, st in zip(self.dims, lo, size, self.ss):
            if d == 1:
                continue
            if out and n == d and lo_d == 0 and out[-1][3] == st * d:
                pd, plo, pn, _ = out[-1]
                out[-1] = [pd * d, plo * d, pn * d, st]
                continue
            out.append([d, lo_d, n, st])
        if not out:
            return [1], [0], [1], [0]
        return [list(v) for v in zip(*out)]


def _shapes(node, tensors):
    return [tensors[t].shape for t in node.inputs], [tensors[t].shape for t in node.outputs]


def _whole(src_shape, out_shape, ss, sbase=0, src=0, dst=0):
    return Gather(src, dst, list(out_shape), list(ss), sbase)


def _sliced(shape, dim, start, step, out_shape, src=0, dst=0):
    st = strides_of(shape)
    ss = list(st)
    ss[dim] *= step
    return Gather(src, dst, list(out_shape), ss, start * st[dim])


def _norm_slice(n, start, end, step):
    return range(n)[slice(start, end, step)]


def gathers(op, attrs, ins, outs) -> list:
    """The Gathers of one node, from its attrs and input/output shapes."""
    x = ins[0] if ins else ()
    if op in ("reshape", "repack"):
        return [_whole(x, [_numel(outs[0])], [1])]
    if op in ("permute", "transpose"):
        dims = permute_dims(op, attrs, len(x))
        st = strides_of(x)
        return [_whole(x, outs[0], [st[d] for d in dims])]
    if op == "expand":
        return [_whole(x, outs[0], broadcast_strides(x, outs[0]))]
    if op == "slice":
        dim = attrs["dim"] % len(x)
        r = _norm_slice(x[dim], attrs.get("start"), attrs.get("end"), attrs.get("step", 1) or 1)
        return [_sliced(x, dim, r.start if len(r) else 0, r.step, outs[0])]
    if op == "select":
        dim = attrs["dim"] % len(x)
        st = strides_of(x)
        index = attrs["index"] % x[dim]
        return [_whole(x, outs[0], st[:dim] + st[dim + 1:], index * st[dim])]
    if op in ("split", "unbind"):
        dim = attrs["dim"] % len(x)
        st, res, offset = strides_of(x), [], 0
        for k, o in enumerate(outs):
            if op == "unbind":
                res.append(_whole(x, o, st[:dim] + st[dim + 1:], k * st[dim], dst=k))
            else:
                res.append(_sliced(x, dim, offset, 1, o, dst=k))
                offset += o[dim]
        return res
    if op == "cat":
        out = outs[0]
        dim = attrs.get("dim", 0) % len(out)
        res, offset = [], 0
        for k, s in enumerate(ins):
            if len(s) != len(out):
                continue                               # a legacy 1-D empty input
            if _numel(s):
                lo = [0] * len(out)
                lo[dim] = offset
                res.append(Gather(k, 0, list(out), strides_of(s), 0, lo, list(s), None))
            offset += s[dim]
        return res
    if op == "constant_pad_nd":
        out, pad = outs[0], list(attrs["pad"])
        lo = [0] * len(out)
        for k in range(len(pad) // 2):
            lo[len(out) - 1 - k] = int(pad[2 * k])
        return [Gather(0, 0, list(out), strides_of(x), 0, lo, list(x), attrs.get("value", 0))]
    raise ValueError(f"no gather for op {op!r}")


# ---------------------------------------------------------------- placement and builds

def _same_dtype(node, tensors):
    dtypes = {tensors[t].dtype for t in node.inputs[:1] + node.outputs}
    if node.op not in ("take", "remap"):
        dtypes |= {tensors[t].dtype for t in node.inputs}
    return None if len(dtypes) == 1 else f"{node.op}: inputs and outputs of different dtypes {sorted(dtypes)}"


def _decline(node, tensors):
    reason = _same_dtype(node, tensors)
    if reason or tensors[node.outputs[0]].dtype == "int8" or node.op in ("take", "remap"):
        return reason
    ins, outs = _shapes(node, tensors)
    for g in gathers(node.op, node.attrs, ins, outs):
        lo, size = g.box()
        dst = strides_of(g.dims)
        rank = len(merge_dims(size, g.ss, dst)[0])
        if rank > MAX_RANK:
            return f"{node.op}: a strided copy over {rank} dims after merging (float_copy takes {MAX_RANK})"
    return None


def _check_reach(node, g, src_numel):
    lo, hi = g.reach()
    if lo < 0 or hi >= src_numel:
        raise ValueError(f"{node.name}: {node.op} reads source elements {lo}..{hi} of {src_numel}")


def _word(value, dtype) -> int:
    """A fill value as the 32-bit pattern a float32/int32 buffer holds."""
    return int(np.array(value, np.float32 if dtype == "float32" else np.int32).view(np.int32))


def _float_steps(ctx, node, g: Gather):
    src, dst = node.inputs[g.src], node.outputs[g.dst]
    spec = ctx.spec(dst)
    lo, size = g.box()
    ds = strides_of(g.dims)
    steps = []
    if g.fill is not None and not g.full():
        n = _numel(g.dims)
        push = (n, 1, 0, 0, _pad([n], MAX_RANK, 1), _pad([0], MAX_RANK), _pad([1], MAX_RANK),
                np.int32(_word(g.fill, spec.dtype)))
        steps.append(_elementwise(ctx, "float_copy", [ctx.buffer(src), ctx.buffer(dst)], n, push, ["FILL"]))
    shape, (ss, dss) = merge_dims(size, g.ss, ds)
    if len(shape) > MAX_RANK:
        raise ValueError(f"{node.name}: a strided copy over {len(shape)} dims (float_copy takes {MAX_RANK})")
    n = _numel(shape)
    dbase = sum(l * s for l, s in zip(lo, ds))
    push = (n, len(shape), g.sbase, dbase, _pad(shape, MAX_RANK, 1), _pad(ss, MAX_RANK), _pad(dss, MAX_RANK), 0)
    contig = len(shape) == 1 and ss == dss == [1]
    gather = not contig and dss == strides_of(shape) and dbase % 4 == 0   # dst the iteration: vec4 blocks
    steps.append(_elementwise(ctx, "float_copy", [ctx.buffer(src), ctx.buffer(dst)], -(-n // 4) if gather else n,
                              push, ["CONTIG" if contig else "GATHER" if gather else "GENERAL"]))
    return steps


def copy_words(ctx, src, dst, n: int):
    """One dispatch copying the first n 32-bit words of Buffer src into Buffer dst (a state
    tensor's new value into its own buffer at the end of a call: vkq.executor)."""
    push = (n, 1, 0, 0, _pad([n], MAX_RANK, 1), _pad([1], MAX_RANK), _pad([1], MAX_RANK), 0)
    return _elementwise(ctx, "float_copy", [src, dst], n, push, ["CONTIG"])


def _int8_dispatch(ctx, node, src, dst, view, variant, rank=0, sbase=0, fill=0):
    si, so = ctx.spec(src), ctx.spec(dst)
    view = np.asarray(view, np.int32).reshape(-1)
    invocations = so.device_words()
    if variant in ("MAP", "WORDS", "BLOCKS"):       # a destination ivec4 an invocation (repack.comp)
        invocations //= 4
        view = np.concatenate([view, np.full(-view.size % 4, -1, np.int32)])   # whole ivec4s (TEXEL)
    return ctx.device.dispatch(
        "repack", [ctx.buffer(src), ctx.buffer(dst), ctx.const_buffer(view)],
        grid_1d(invocations, LOCAL), local=(LOCAL,), spec=(packing.LAYOUT_IDS[si.layout], packing.LAYOUT_IDS[so.layout]),
        push=(packing.shader_nchw(si.shape, si.layout), packing.shader_nchw(so.shape, so.layout), rank, sbase, fill),
        defines=[variant])


def byte_map(source: np.ndarray, inside: np.ndarray | None, src_spec, dst_spec) -> np.ndarray:
    """repack's MAP: for each byte of the destination's packed words, the byte of the source's
    packed words it takes (-1: a padding byte; -2: the fill value). source: the row-major source
    index of each destination element; inside: where that holds (elsewhere the fill), or None
    for everywhere."""
    m = np.full(dst_spec.device_words() * 4, -1, np.int32)
    dst = packing.byte_positions(np.arange(source.size, dtype=np.int64), dst_spec.shape, dst_spec.layout)
    if inside is None:
        m[dst] = packing.byte_positions(source, src_spec.shape, src_spec.layout)
    else:
        m[dst[inside]] = packing.byte_positions(source[inside], src_spec.shape, src_spec.layout)
        m[dst[~inside]] = -2
    return m


def _sources(g: Gather) -> tuple[np.ndarray, np.ndarray]:
    """(the row-major source index of every destination element, whether it lies in the box)."""
    lo, size = g.box()
    source, inside = np.int64(g.sbase), np.ones((), bool)
    for d, (n, lo_d, size_d, st) in enumerate(zip(g.dims, lo, size, g.ss)):
        c = np.arange(n, dtype=np.int64) - lo_d
        at = [1] * len(g.dims)
        at[d] = n
        source = source + (c * st).reshape(at)
        inside = inside & ((c >= 0) & (c < size_d)).reshape(at)
    return np.broadcast_to(source, g.dims).reshape(-1), np.broadcast_to(inside, g.dims).reshape(-1)


def _runs(m4: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of a map grouped by four: (whole: the row runs on from an aligned first entry,
    padding: all -1, filled: all -2)."""
    whole = (m4[:, 0] >= 0) & (m4[:, 0] % 4 == 0) & (m4 - m4[:, :1] == np.arange(4)).all(1)
    return whole, (m4 == -1).all(1), (m4 == -2).all(1)


def _map_dispatch(ctx, node, src, dst, m: np.ndarray, fill: int = 0):
    """repack by the byte map m (byte_map): BLOCKS where every destination ivec4 is a whole
    source ivec4 (all padding or all fill), WORDS where every word is, else MAP."""
    whole, padding, filled = _runs(m.reshape(-1, 4))
    if not (whole | padding | filled).all():
        return _int8_dispatch(ctx, node, src, dst, m, "MAP", fill=fill)
    words = np.where(whole, m.reshape(-1, 4)[:, 0] // 4, np.where(padding, -1, -2)).astype(np.int32)
    # a destination padding word (-1) may take the source's word at its place where that is padding too
    si = ctx.spec(src)
    real = np.zeros(si.device_words(), bool)
    real[packing.byte_positions(np.arange(_numel(si.shape), dtype=np.int64), si.shape, si.layout) // 4] = True
    w4 = words.reshape(-1, 4)
    at = w4[:, :1] + np.arange(4)
    free = (w4 == -1) & (w4[:, :1] >= 0) & ~real[np.clip(at, 0, real.size - 1)] & (at < real.size)
    runs = np.where(free, at, w4)
    whole, padding, filled = _runs(runs)
    if (whole | padding | filled).all():
        blocks = np.where(whole, runs[:, 0] // 4, np.where(padding, -1, -2)).astype(np.int32)
        return _int8_dispatch(ctx, node, src, dst, blocks, "BLOCKS", fill=fill)
    return _int8_dispatch(ctx, node, src, dst, words, "WORDS", fill=fill)


def _int8_step(ctx, node, g: Gather, first: bool, only: bool):
    """The repack dispatch of one Gather: by its byte map (WORDS / MAP) where it is its output's
    only one, else (cat's) FILL for the first and KEEP for the others."""
    fill = 0 if g.fill is None else int(g.fill)
    if not -128 <= fill <= 127:
        raise ValueError(f"{node.name}: int8 fill value {fill} outside [-128, 127]")
    src, dst = node.inputs[g.src], node.outputs[g.dst]
    if only:
        source, inside = _sources(g)
        return _map_dispatch(ctx, node, src, dst, byte_map(source, inside, ctx.spec(src), ctx.spec(dst)), fill)
    dims, lo, size, ss = g.merged()
    return _int8_dispatch(ctx, node, src, dst, dims + lo + size + ss, "FILL" if first else "KEEP", len(dims),
                          g.sbase, fill)


def _blocks_step(ctx, node):
    """4W4C <-> 4H4W of one shape: shaders/repack_blocks.comp, a 4x4x4 cube an invocation
    (the general gather builds every byte on its own); None where that is not this node."""
    if node.op != "repack":
        return None
    si, so = ctx.spec(node.inputs[0]), ctx.spec(node.outputs[0])
    if {si.layout, so.layout} != {"4W4C", "4H4W"} or si.dtype != "int8" or tuple(si.shape) != tuple(so.shape):
        return None
    n, c, h, w = packing.as_nchw(so.shape)
    c4, w4 = -(-c // 4), -(-w // 4)
    # two cubes an invocation where the output's adjacent blocks then make whole 32-byte pairs
    # (4H4W: width blocks, 4W4C: channel blocks) and the device stores those as one
    along_w = so.layout == "4H4W"
    pair = ctx.device.wide_stores and (w4 if along_w else c4) % 2 == 0
    pc, pw = ((1, 2) if along_w else (2, 1)) if pair else (1, 1)     # cubes an invocation along c4, w4
    blocks = n * -(-h // 4) * 16 * -(-c4 // (4 * pc)) * -(-w4 // (4 * pw))   # 4x4 tiles of cubes (the shader)
    return ctx.device.dispatch("repack_blocks", [ctx.buffer(node.inputs[0]), ctx.buffer(node.outputs[0])],
                               grid_1d(blocks, LOCAL), local=(LOCAL,), spec=(n, c, h, w, int(pair)),
                               defines=["TO_" + so.layout])


def build(ctx, node):
    tensors = {t: ctx.spec(t) for t in node.inputs + node.outputs}
    if len(node.inputs) == 1 and len(node.outputs) == 1 and ctx.buffer(node.inputs[0]) is ctx.buffer(node.outputs[0]):
        # the executor planned the output into the input's buffer (executor.memory_aliases):
        # nothing to move, unless the words differ at this shape, which would be its bug
        if not tensors[node.inputs[0]].same_words(tensors[node.outputs[0]]):
            raise RuntimeError(f"{node.name}: output shares its input's buffer but not its words "
                               f"({tensors[node.inputs[0]]} -> {tensors[node.outputs[0]]})")
        return []
    blocks = _blocks_step(ctx, node)
    if blocks is not None:
        return [blocks]
    reason = _decline(node, tensors)
    if reason:
        raise ValueError(f"{node.name}: {reason}")
    ins, outs = _shapes(node, tensors)
    int8 = tensors[node.outputs[0]].dtype == "int8"
    steps, started = [], set()
    every = gathers(node.op, node.attrs, ins, outs)
    for g in every:
        _check_reach(node, g, _numel(ins[g.src]))
        if int8:
            only = sum(h.dst == g.dst for h in every) == 1
            steps.append(_int8_step(ctx, node, g, g.dst not in started, only))
            started.add(g.dst)
        else:
            steps += _float_steps(ctx, node, g)
    return steps


def _take_build(ctx, node):
    x, index = node.inputs
    return take_steps(ctx, node, x, node.outputs[0], np.asarray(ctx.constant(index), np.int64).reshape(-1))


def _remap_build(ctx, node):
    x, out = node.inputs[0], node.outputs[0]
    shape, idx = remap_index(ctx.spec(x).shape, node.attrs["dims"])
    if shape != tuple(ctx.spec(out).shape):
        raise ValueError(f"{node.name}: remap of {ctx.spec(x).shape} gives {shape}, not {ctx.spec(out).shape}")
    return take_steps(ctx, node, x, out, idx)


def take_steps(ctx, node, x, out, idx):
    """The dispatch of out.flat = x.flat[idx] (idx: the output's row-major flat index map)."""
    n = _numel(ctx.spec(x).shape)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{node.name}: take reads indices {idx.min()}..{idx.max()} of {n}")
    if ctx.spec(out).dtype == "int8":
        return [_map_dispatch(ctx, node, x, out, byte_map(idx, None, ctx.spec(x), ctx.spec(out)))]
    m = idx.size
    # whole ivec4s (the TEXEL variant's texel view), padded with index 0: blocks of 4 an invocation
    idx_buf = ctx.const_buffer(np.concatenate([idx.astype(np.int32), np.zeros(-m % 4, np.int32)]))
    push = (m, 1, 0, 0, _pad([m], MAX_RANK, 1), _pad([1], MAX_RANK), _pad([1], MAX_RANK), 0)
    return [_elementwise(ctx, "float_copy", [ctx.buffer(x), ctx.buffer(out), idx_buf], -(-m // 4), push, ["INDEX"])]


# ---------------------------------------------------------------- chains of int8 gathers

CHAIN_OPS = frozenset({"reshape", "repack", "permute", "transpose", "expand", "slice", "select"})


def view_chain(x, *, steps):
    """The gathers of `steps` ([op, attrs, in shape, out shape] each) applied in order (each
    step's op one of CHAIN_OPS, its shapes the ones it reads and makes: else a ValueError)."""
    from ..registry import get_op
    for op, attrs, ins, outs in steps:
        if op not in CHAIN_OPS or tuple(np.shape(x)) != tuple(ins):
            raise ValueError(f"view_chain: step {op} from {tuple(ins)} given {tuple(np.shape(x))}")
        x = get_op(op).reference(x, **attrs)
        if tuple(np.shape(x)) != tuple(outs):
            raise ValueError(f"view_chain: step {op} made {tuple(np.shape(x))}, not {tuple(outs)}")
    return x


def chain_sources(steps) -> np.ndarray:
    """For each element of the last step's output, the row-major index of the first step's input
    element it is: each step's source map (its one Gather) composed, last step first."""
    src = None
    for op, attrs, ins, outs in reversed(steps):
        (g,) = gathers(op, attrs, [tuple(ins)], [tuple(outs)])
        s, _ = _sources(g)
        src = s if src is None else s[src]
    return src


def _check_steps(node, in_shape, out_shape):
    """A view_chain's steps (from a program file too) run from the input's shape to the
    output's, each a gather op whose output the next reads and whose reads stay in its input:
    else a ValueError that names the node, never a map that reads elsewhere."""
    steps = node.attrs["steps"]
    if not steps:
        raise ValueError(f"{node.name}: a view_chain of no steps")
    shapes = [tuple(in_shape)]
    for op, attrs, ins, outs in steps:
        if op not in CHAIN_OPS or tuple(ins) != shapes[-1]:
            raise ValueError(f"{node.name}: step {op} from {tuple(ins)} (the chain gives {shapes[-1]}; steps: "
                             f"{sorted(CHAIN_OPS)})")
        if _numel(outs) and op in ("reshape", "repack") and _numel(outs) != _numel(ins):
            raise ValueError(f"{node.name}: {op} from {tuple(ins)} to {tuple(outs)}")
        for g in gathers(op, attrs, [tuple(ins)], [tuple(outs)]):
            _check_reach(node, g, _numel(ins))
        shapes.append(tuple(outs))
    if shapes[-1] != tuple(out_shape):
        raise ValueError(f"{node.name}: the steps end at {shapes[-1]}, the output is {tuple(out_shape)}")


def _chain_build(ctx, node):
    x, out = node.inputs[0], node.outputs[0]
    _check_steps(node, ctx.spec(x).shape, ctx.spec(out).shape)
    steps = node.attrs["steps"]
    return [_map_dispatch(ctx, node, x, out, byte_map(chain_sources(steps), None, ctx.spec(x), ctx.spec(out)))]


def _chain_decline(node, tensors):
    if tensors[node.inputs[0]].dtype != "int8" or tensors[node.outputs[0]].dtype != "int8":
        return "view_chain: int8 only (float views are strided copies of their own)"
    return None


def fold_view_chains(program, keep=frozenset()) -> int:
    """A chain of int8 gathers (reshape, repack, permute, transpose, expand, slice, select), each
    intermediate read by the next alone -> one view_chain node: one repack dispatch by the
    composed byte map instead of one a gather (Swin's window partition, repack -> permute ->
    repack; ShuffleNet's channel shuffle, the same). The last node's name stays. Returns the
    nodes folded away."""
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    int8 = lambda t: program.tensors[t].dtype == "int8"
    link = lambda n: (n.op in CHAIN_OPS and len(n.inputs) == 1 and len(n.outputs) == 1 and int8(n.inputs[0])
                      and int8(n.outputs[0]) and n.inputs[0] not in program.constants)
    shape = lambda t: [int(v) for v in program.tensors[t].shape]
    gone = set()
    for idx, node in enumerate(program.nodes):
        if node.name in gone or not link(node):
            continue
        nxt = readers.get(node.outputs[0], [])
        if len(nxt) == 1 and link(nxt[0]) and node.outputs[0] not in program.outputs:
            continue                        # not the chain's last: its reader folds it in
        chain = [node]
        while True:
            t = chain[0].inputs[0]
            up = producer.get(t)
            if up is None or not link(up) or len(readers.get(t, [])) != 1 or t in program.outputs or up.name in keep:
                break
            chain.insert(0, up)
        if len(chain) < 2:
            continue
        steps = [[n.op, dict(n.attrs), shape(n.inputs[0]), shape(n.outputs[0])] for n in chain]
        program.nodes[idx] = producer[node.outputs[0]] = type(node)(
            "view_chain", [chain[0].inputs[0]], [node.outputs[0]], {"steps": steps}, name=node.name)
        for n in chain[:-1]:
            gone.add(n.name)
            program.tensors.pop(n.outputs[0], None)
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return len(gone)


# ---------------------------------------------------------------- registration

def _op(name, reference, doc, shaders=("float_copy", "repack"), build_fn=build, decline=_decline):
    register_op(type(name, (), {"name": name, "reference": staticmethod(reference), "build": staticmethod(build_fn),
                                "decline": staticmethod(decline), "layouts": ANY, "shaders": shaders,
                                "__doc__": doc}))


_op("reshape", reshape, "Row-major reshape (view, flatten, squeeze, unsqueeze) of any dtype.")
_op("repack", repack, "int8 from one packed layout into another (4W4C, 4H4W, ROW), optionally reshaped "
                      "row-major to `shape`.", ("repack", "repack_blocks"))
_op("permute", permute, "Permute the dims of any dtype.")
_op("transpose", transpose, "Swap two dims of any dtype.")
_op("expand", expand, "Broadcast to a shape (numpy rules), materialised; any dtype.")
_op("cat", cat, "Concatenate along dim; any dtype, all inputs alike (int8: one quantization).")
_op("slice", slice_, "x[..., start:end:step] along dim; any dtype.")
_op("select", select, "x[..., index] along dim (the dim dropped); any dtype.")
_op("split", split, "Split along dim into pieces of `sizes` (one output each); any dtype.")
_op("unbind", unbind, "Every index along dim as its own output (the dim dropped); any dtype.")
_op("constant_pad_nd", constant_pad_nd, "Pad with a constant (torch's pad order, last dim first); any dtype.")
_op("take", take, "x.flat[index] for a constant int32 index map of the output's shape; any dtype.",
    build_fn=_take_build)
_op("remap", remap, "Per-dim flips, rolls and reflect / replicate / circular padding, the index map made per "
                    "shape; any dtype.", build_fn=_remap_build)
_op("view_chain", view_chain, "int8 gathers in a row (fold_view_chains: steps [op, attrs, in shape, out shape]) "
                              "as one gather by their composed map.", ("repack",), _chain_build, _chain_decline)
