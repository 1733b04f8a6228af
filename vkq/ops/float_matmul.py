"""Float32 matmuls (float_matmul.comp, grouped_matmul.comp): matmul and bmm (batch dims
broadcast), matmul_strided (an attention matmul reading strided views in place of the
reshape/permute copies around it: vkq.ops.float_rewrites fold_views_into_matmul) and a mixture of
experts' grouped_matmul (transformers' grouped_mm)."""
from __future__ import annotations

import numpy as np

from .float import (F32, LOCAL, _check, _elementwise, _f, _fq, _numel, _op,
                    _pad, broadcast_strides, merge_dims, strides_of)
from ..quant import fake_quant_push
from .float_math import matmul_f32

MAX_BATCH_RANK = 3
MATMUL_ROWS = (8, 16, 32)   # rows a workgroup owns: the first >= M (more rows, fewer reloads of b: on
                            # llvmpipe at L=128 attention 8 -> 32 rows took 8.6 -> 6.7 ms a matmul)
MATMUL_TN = 4               # columns a lane owns (TN in shaders/float_matmul.comp)


def matmul(a, b, *, fq=None):
    """np.matmul in float_matmul.comp's order, bit for bit (float_math.matmul_f32)."""
    return _fq(matmul_f32(a, b), fq)


def grouped_matmul(x, w, offs):
    """A mixture of experts' grouped matmul (transformers' grouped_mm_fallback): x (S, K) with its
    rows sorted by expert, w (E, K, N), offs (E,) the end of each expert's rows; rows past the
    last offset are 0."""
    x, w, offs = _f(x), _f(w), np.asarray(offs, np.int64)
    out, start = np.zeros((x.shape[0], w.shape[2]), F32), 0
    for e, end in enumerate(np.minimum(offs, x.shape[0])):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = max(start, int(end))
    return out


def _view(x, shape, strides, offset=0):
    """The strided view (element strides, from element `offset`) of x's row-major values."""
    flat = np.ascontiguousarray(x).reshape(-1)[int(offset):]
    return np.lib.stride_tricks.as_strided(flat, tuple(shape), tuple(s * flat.itemsize for s in strides))


def matmul_strided(a, b, *, a_view, b_view, out_strides, out_shape, fq=None):
    """np.matmul of strided views of a's and b's values, written into out (shape out_shape)
    through out_strides:  views are [shape, strides] in elements, offset 0, e.g. the heads of
    a (1, L, 384) projection as (1, 12, L, 32) with strides (L*384, 32, 384, 1). What a chain
    of reshape/permute copies around a matmul computes (fold_views_into_matmul), without them."""
    r = matmul_f32(_view(_f(a), *a_view), _view(_f(b), *b_view))
    out = np.zeros(int(np.prod(out_shape, dtype=np.int64)), F32)
    _view(out, r.shape, out_strides)[...] = r   # a view of out's own buffer: writes land in out
    return _fq(out.reshape(out_shape), fq)


def _grouped_matmul_decline(node, tensors):
    x, w, offs = (tensors[t] for t in node.inputs)
    if x.dtype != "float32" or w.dtype != "float32" or offs.dtype != "int32" or len(x.shape) != 2 \
            or len(w.shape) != 3 or len(offs.shape) != 1:
        return (f"grouped_matmul: x {x.dtype}{list(x.shape)}, w {w.dtype}{list(w.shape)}, offs "
                f"{offs.dtype}{list(offs.shape)} (the kernel takes float32 (S, K), (E, K, N) and int32 (E,))")
    return None


def _grouped_matmul_build(ctx, node):
    x, w, offs = node.inputs
    (s, k), (e, k2, n), (e2,) = ctx.spec(x).shape, ctx.spec(w).shape, ctx.spec(offs).shape
    if k2 != k or e2 != e or ctx.spec(node.outputs[0]).shape != (s, n):
        raise ValueError(f"{node.name}: grouped_matmul of x {(s, k)} by w {(e, k2, n)} with {e2} offsets")
    ctx.device.info.check_loop_budget(k + e, f"{node.op}: dots of {k} products, one loop iteration each")
    total = s * n
    return [_elementwise(ctx, "grouped_matmul", [ctx.buffer(t) for t in (x, w, offs, node.outputs[0])], total,
                         (total, k, n, e))]


def _batch_geometry(a_view, b_view, out_strides):
    """(M, N, K, (sam, sak, sbk, sbn, som, son), batch shape, [a, b, out batch strides], out shape)
    of np.matmul over strided views ([shape, strides] each, rank >= 2) and an output view."""
    (ash, ast), (bsh, bst) = a_view, b_view
    m, k = ash[-2:]
    kb, n = bsh[-2:]
    if k != kb:
        raise ValueError(f"matmul: inner dims differ, {tuple(ash)} @ {tuple(bsh)}")
    batch = tuple(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
    sab = broadcast_strides(ash[:-2], batch, ast[:-2])
    sbb = broadcast_strides(bsh[:-2], batch, bst[:-2])
    sob = list(out_strides[:-2])
    inner = (ast[-2], ast[-1], bst[-2], bst[-1], out_strides[-2], out_strides[-1])
    return m, n, k, inner, batch, [sab, sbb, sob], batch + (m, n)


def _contiguous_view(shape):
    return [list(shape), strides_of(shape)]


def matmul_views(a_shape, b_shape):
    """numpy's matmul of contiguous a and b as views: 1-D operands become (1, K) / (K, 1)
    (the output drops that dim, which changes no offsets of a contiguous out)."""
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    return _contiguous_view(a2), _contiguous_view(b2), strides_of(out)


def matmul_shape(a_shape, b_shape) -> tuple:
    """The shape np.matmul gives (1-D operands lose their dim)."""
    a_view, b_view, _ = matmul_views(a_shape, b_shape)
    batch = tuple(np.broadcast_shapes(tuple(a_view[0][:-2]), tuple(b_view[0][:-2])))
    return batch + ((a_shape[-2],) if len(a_shape) > 1 else ()) + ((b_shape[-1],) if len(b_shape) > 1 else ())


def _matmul_dispatch(ctx, node, a_view, b_view, out_strides, want_numel, buffers=None, offsets=(0, 0, 0),
                     fq=None):
    """One float_matmul dispatch of strided views from base offsets (a, b, out); buffers
    (a, b, out) default to the node's; fq: a folded fake_quantize's attrs (fold_fake_quantize)."""
    m, n, k, inner, batch, (sab, sbb, sob), rshape = _batch_geometry(a_view, b_view, out_strides)
    if _numel(rshape) != want_numel:
        raise ValueError(f"{node.name}: the product has {_numel(rshape)} values, the output {want_numel}")
    if batch:
        bshape, (sab, sbb, sob) = merge_dims(batch, sab, sbb, sob)
    else:
        bshape, sab, sbb, sob = [1], [0], [0], [0]
    if len(bshape) > MAX_BATCH_RANK:
        raise ValueError(f"{node.name}: {len(bshape)} batch dims after merging (the shader takes {MAX_BATCH_RANK})")
    sam, sak, sbk, sbn, som, son = inner
    # its K loop, 4 at a time, and two walks over the batch dims (a float adaptive pool is a
    # matmul with K = H * W: 720 x 1280 went past llvmpipe's budget)
    ctx.device.info.check_loop_budget(-(-k // 4) + 2 * (len(bshape) + 1) + 4, f"float_matmul over K = {k}")
    x4 = lambda *v: all(int(q) % 4 == 0 for q in v)
    a_off, b_off, o_off = (int(v) for v in offsets)
    if buffers is None:
        buffers = [ctx.buffer(node.inputs[0]), ctx.buffer(node.inputs[1]), ctx.buffer(node.outputs[0])]
    # VEC_KN reads a by the vec4s that hold its rows' words: its last row's last vec4 must be
    # whole in a's buffer (a planned buffer is: vkq.executor); a's rows anywhere in a vec4: A_SHIFT
    a_end = a_off + sum((d - 1) * s_ for d, s_ in zip(bshape, sab)) + (m - 1) * sam + k
    a_shift = 0 if x4(sam, *sab, a_off) else 1
    if sak == 1 and sbk == 1 and x4(k, sam, sbn, *sab, *sbb, a_off, b_off):
        variant = "VEC_K"
    elif sak == 1 and sbn == 1 and x4(n, sbk, *sbb, b_off) and -(-a_end // 4) * 4 <= buffers[0].size:
        variant = "VEC_KN"
    else:
        variant = "GENERAL"
    out4 = ["OUT4"] if son == 1 and x4(n, som, *sob, o_off) else []
    tm = next((t for t in MATMUL_ROWS if t >= m), MATMUL_ROWS[-1])
    tn = MATMUL_TN
    lanes = -(-n // tn)   # column tiles; a workgroup is the smallest power of two >= them, <= LOCAL
    width = 1
    while width < min(lanes, LOCAL):
        width *= 2
    # a workgroup narrower than a subgroup takes that many batches side by side (ZB): at N = 32
    # (8 lanes) half of each of lavapipe's 16-wide SIMD rows sat idle (Swin's P V 3.6 -> 2.05 ms)
    zb = max(1, min(int(ctx.device.info.subgroup_size or 1) // width, _numel(batch)))
    groups = (-(-lanes // width), -(-m // tm), -(-_numel(batch) // zb))
    push = (m, n, k, *inner, len(bshape), _pad(bshape, MAX_BATCH_RANK, 1), _pad(sab, MAX_BATCH_RANK),
            _pad(sbb, MAX_BATCH_RANK), _pad(sob, MAX_BATCH_RANK), a_off, b_off, o_off, *fake_quant_push(fq))
    return ctx.device.dispatch("float_matmul", list(buffers), groups,
                               local=(width * zb,), spec=(a_shift if variant == "VEC_KN" else 0, zb, 1 if fq else 0),
                               push=push,
                               defines={variant: 1, **dict.fromkeys(out4, 1), "TM": tm})


def _matmul_build(ctx, node):
    _check(ctx, node)
    a, b = node.inputs
    a_view, b_view, out_strides = matmul_views(ctx.spec(a).shape, ctx.spec(b).shape)
    want = matmul_shape(ctx.spec(a).shape, ctx.spec(b).shape)
    if tuple(want) != ctx.spec(node.outputs[0]).shape:
        raise ValueError(f"{node.name}: output shape {ctx.spec(node.outputs[0]).shape}, expected {tuple(want)}")
    return [_matmul_dispatch(ctx, node, a_view, b_view, out_strides, _numel(want), fq=node.attrs.get("fq"))]


def _matmul_strided_build(ctx, node):
    _check(ctx, node)
    at = node.attrs
    out = ctx.spec(node.outputs[0]).shape
    if tuple(at["out_shape"]) != out:
        raise ValueError(f"{node.name}: out_shape {at['out_shape']} but the output is {out}")
    for t, (shape, strides) in zip(node.inputs, (at["a_view"], at["b_view"])):
        top = sum((d - 1) * s for d, s in zip(shape, strides))
        if top >= _numel(ctx.spec(t).shape) or min(strides, default=0) < 0:
            raise ValueError(f"{node.name}: the view {shape}/{strides} reaches past {t!r}")
    return [_matmul_dispatch(ctx, node, at["a_view"], at["b_view"], at["out_strides"], _numel(out), fq=at.get("fq"))]


_op("matmul", matmul, _matmul_build, ("float_matmul",), "Float matmul (numpy broadcasting rules).")
_op("bmm", matmul, _matmul_build, ("float_matmul",), "Float batched matmul.")
_op("grouped_matmul", grouped_matmul, _grouped_matmul_build, ("grouped_matmul",),
    "A mixture of experts' grouped matmul: x's rows sorted by expert, each times its expert's weight.",
    _grouped_matmul_decline)
_op("matmul_strided", matmul_strided, _matmul_strided_build, ("float_matmul",),
    "Float matmul of strided views of its inputs, written through a strided view of its output.")
