"""scaled_dot_product_attention in float32 on Vulkan: three dispatches of existing shaders.

    scores = q @ k^T                       float_matmul, k read transposed through its strides
    p      = softmax(scores * scale + m)   float_softmax MASKED (m: the float mask, the boolean
                                           mask as 0 / -inf (BOOL_MASK), a causal mask, or 0)
    out    = p @ v                         float_matmul

q (..., L, E), k (..., S, E), v (..., S, Ev), batch dims broadcast (any head split: heads are a
batch dim), mask broadcast to (..., L, S). The scores and weights live in two scratch buffers of
the node. The static scheme's attention is such a float island between int8 linears (their
dequantize before, their quantize after); the dynamic scheme's is float throughout.

Attrs: scale (the lowering puts PyTorch's default 1/sqrt(E) there), causal (top-left aligned,
as PyTorch: query i sees keys j <= i), mask: "none" / "float" / "bool" (the 4th input).
A fused kernel (one pass, no score buffer) was not written: at the encoder sizes vkq runs
(L <= 128) the scores fit in cache and the three dispatches cost little next to the linears.
"""
from __future__ import annotations

import math

import numpy as np

from ..registry import register_op
from .float import _numel, strides_of
from .float_math import matmul_f32
from .float_matmul import _contiguous_view, _matmul_dispatch, _view
from .float_norm import masked_softmax_dispatch, softmax_masked
from .float_rewrites import _through, merge_view, readers_of, split_view

F32 = np.float32


def attention_mask(mask, kind, causal, L, S):
    """The additive float32 mask of (mask, kind, causal), or None."""
    if kind == "bool":
        mask = np.where(np.asarray(mask) != 0, F32(0), F32(-np.inf)).astype(F32)
    elif kind == "float":
        mask = np.asarray(mask, F32)
    else:
        mask = None
    if causal:
        c = np.where(np.tril(np.ones((L, S), bool)), F32(0), F32(-np.inf)).astype(F32)
        mask = c if mask is None else (mask + c).astype(F32)
    return mask


def sdpa(q, k, v, mask=None, *, scale, causal=False, mask_kind="none", views=None, out_view=None):
    """softmax(q @ k^T * scale + mask) @ v, each step rounded to float32 as the shaders do, in
    their order (matmul_f32, softmax_masked): the device's bits.
    views: q, k, v read as strided views [shape, strides, offset] of their inputs' values (the
    head split folded in, fold_views_into_attention); out_view [shape, strides]: the result
    written through strides into an output of that shape (the head merge)."""
    q, k, v = (np.asarray(a, F32) for a in (q, k, v))
    if views is not None:
        q, k, v = (_view(a, *vw) for a, vw in zip((q, k, v), views))
    scores = matmul_f32(q, np.swapaxes(k, -1, -2))
    m = attention_mask(mask, mask_kind, causal, q.shape[-2], k.shape[-2])
    p = softmax_masked(scores, F32(0) if m is None else m, scale=scale)
    r = matmul_f32(p, v)
    if out_view is None:
        return r
    out = np.zeros(_numel(out_view[0]), F32)
    _view(out, r.shape, out_view[1])[...] = r
    return out.reshape(out_view[0])


def _views(node, tensors):
    """[shape, strides, offset] of q, k, v (contiguous unless folded)."""
    views = node.attrs.get("views")
    if views is not None:
        return [list(v) for v in views]
    return [_contiguous_view(tensors[t].shape) + [0] for t in node.inputs[:3]]


def _decline(node, tensors):
    q, k, v = (tuple(vw[0]) for vw in _views(node, tensors))
    if len(q) < 2 or len(k) != len(q) or len(v) != len(q):
        return "scaled_dot_product_attention: q, k, v of different ranks"
    try:
        np.broadcast_shapes(q[:-2], k[:-2], v[:-2])
    except ValueError:
        return f"scaled_dot_product_attention: batch dims {q[:-2]}, {k[:-2]}, {v[:-2]} do not broadcast (grouped heads?)"
    if node.attrs.get("causal") and node.attrs.get("mask_kind", "none") != "none":
        return "scaled_dot_product_attention: both a mask and is_causal (PyTorch refuses it too)"
    kinds = {tensors[t].dtype for t in node.inputs[:3]} | {tensors[node.outputs[0]].dtype}
    if kinds != {"float32"}:
        return f"scaled_dot_product_attention: takes float32 q, k, v, got {sorted(kinds)}"
    return None


def _build(ctx, node):
    q, k, v = node.inputs[:3]
    out = node.outputs[0]
    at = node.attrs
    tensors = {t: ctx.spec(t) for t in node.inputs + node.outputs}
    (qs, qst, qo), (ks, kst, ko), (vs, vst, vo) = _views(node, tensors)
    for t, (shape, st, off) in zip((q, k, v), _views(node, tensors)):
        top = off + sum((d - 1) * s_ for d, s_ in zip(shape, st))
        if top >= _numel(ctx.spec(t).shape) or min(list(st) + [off]) < 0:
            raise ValueError(f"{node.name}: the view {shape}/{st}+{off} reaches past {t!r}")
    qs, ks, vs = tuple(qs), tuple(ks), tuple(vs)
    L, S = qs[-2], ks[-2]
    batch = tuple(np.broadcast_shapes(qs[:-2], ks[:-2], vs[:-2]))
    score_shape = batch + (L, S)
    n = _numel(score_shape)
    # score rows padded to a multiple of 4 words: the softmax and p @ v take their vec4 paths at
    # any key length (ViT's 197 tokens: 2.1 -> 0.4 ms for p @ v, lavapipe)
    s4 = -(-S // 4) * 4
    padded = strides_of(batch + (L, s4))
    scores = ctx.scratch(_numel(batch + (L, s4)), np.float32)
    weights = ctx.scratch(_numel(batch + (L, s4)), np.float32)
    k_t = [list(ks[:-2]) + [ks[-1], S], list(kst[:-2]) + [kst[-1], kst[-2]]]      # k^T without a copy
    steps = [_matmul_dispatch(ctx, node, [list(qs), list(qst)], k_t, padded, n,
                              [ctx.buffer(q), ctx.buffer(k), scores], (qo, ko, 0))]
    kind = at.get("mask_kind", "none")
    if kind != "none":
        mask = node.inputs[3]
        mbuf, mshape, as_bool = ctx.buffer(mask), ctx.spec(mask).shape, kind == "bool"
    else:      # a constant: the causal mask, or 0
        m = attention_mask(None, kind, at.get("causal"), L, S)
        m = np.zeros(1, F32) if m is None else m
        mbuf, mshape, as_bool = ctx.const_buffer(m.reshape(-1)), m.shape, False
    steps.append(masked_softmax_dispatch(ctx, node.name, score_shape, mshape, at["scale"],
                                         [scores, weights, mbuf], bool_mask=as_bool, row_stride=s4))
    out_shape = ctx.spec(out).shape
    out_strides = at["out_view"][1] if at.get("out_view") else strides_of(batch + (L, vs[-1]))
    steps.append(_matmul_dispatch(ctx, node, [list(score_shape), padded], [list(vs), list(vst)],
                                  out_strides, _numel(out_shape), [weights, ctx.buffer(v), ctx.buffer(out)],
                                  (0, vo, 0)))
    return steps


@register_op
class ScaledDotProductAttention:
    """Float softmax(q @ k^T * scale + mask) @ v (masks: none, float additive, bool, causal)."""
    name = "scaled_dot_product_attention"
    shaders = ("float_matmul", "float_softmax")
    reference = staticmethod(sdpa)
    build = staticmethod(_build)
    decline = staticmethod(_decline)


def default_scale(head_dim: int) -> float:
    """PyTorch's default: 1 / sqrt(E), as a float32."""
    return float(F32(1.0 / math.sqrt(head_dim)))


# ---------------------------------------------------------------- folding the head split and merge

SHAPE_OPS = ("reshape", "permute", "transpose", "select", "unbind", "slice", "split")


def _forward(view, node, index):
    """The view [shape, strides, offset] after shape op `node` (its output `index`), or None."""
    shape, strides, offset = view
    at = node.attrs
    if node.op in ("reshape", "permute", "transpose"):
        r = _through([shape, strides], node, None)
        return None if r is None else [r[0], r[1], offset]
    dim = at.get("dim", 0) % len(shape)
    if node.op in ("select", "unbind"):
        i = (at["index"] if node.op == "select" else index) % shape[dim]
        return [shape[:dim] + shape[dim + 1:], strides[:dim] + strides[dim + 1:], offset + i * strides[dim]]
    if node.op == "slice":
        r = range(shape[dim])[slice(at.get("start"), at.get("end"), at.get("step", 1) or 1)]
        start, step, size = (r.start if len(r) else 0), r.step, len(r)
    else:   # split
        start, step, size = sum(at["sizes"][:index]), 1, at["sizes"][index]
    shape, strides = list(shape), list(strides)
    offset += start * strides[dim]
    shape[dim], strides[dim] = size, strides[dim] * step
    return [shape, strides, offset]


def fold_views_into_attention(program, keep=frozenset()) -> int:
    """Read q, k, v of each scaled_dot_product_attention through the shape ops that made them
    (a packed projection's reshape, permute, unbind: the head split) and write its result
    through the transpose/reshape after it (the head merge): those copies are then unread and
    dropped. Only float tensors with one reader each are looked through. Returns the attentions
    changed."""
    producer = {t: (n, i) for n in program.nodes for i, t in enumerate(n.outputs)}
    readers = readers_of(program)
    shape = lambda t: list(program.tensors[t].shape)
    single = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    is_float = lambda t: program.tensors[t].dtype == "float32"
    changed, merged = 0, set()
    for idx, node in enumerate(program.nodes):
        if node.op != "scaled_dot_product_attention" or "views" in node.attrs:
            continue
        bases, views = [], []
        step = lambda cur: (producer[cur], producer[cur][0].inputs[0]) if single(cur) and is_float(cur) \
            and cur in producer and producer[cur][0].op in SHAPE_OPS and producer[cur][0].name not in keep else None
        for t in node.inputs[:3]:
            base, view, _ = split_view(t, step, lambda v, item: _forward(v, *item),
                                       lambda b: _contiguous_view(shape(b)) + [0])
            bases.append(base)
            views.append(view)
        last, out_chain, out = merge_view(node.outputs[0], readers, single,
                                          lambda n: n.op in ("reshape", "permute", "transpose") and n.name not in keep,
                                          shape)
        if bases == node.inputs[:3] and last == node.outputs[0]:
            continue
        attrs = dict(node.attrs, views=views)
        if last != node.outputs[0]:
            attrs["out_view"] = [shape(last), out[1]]
            merged |= {id(c) for c in out_chain}              # their output is written in place now
            for c in out_chain:
                program.tensors.pop(c.inputs[0], None)
        program.nodes[idx] = type(node)(node.op, bases + node.inputs[3:], [last], attrs, name=node.name)
        changed += 1
    program.nodes = [n for n in program.nodes if id(n) not in merged]
    _drop_unread_shape_ops(program, keep)
    return changed


def _drop_unread_shape_ops(program, keep=frozenset()) -> None:
    """Shape ops none of whose outputs is read any more (nor a program output) go."""
    while True:
        read = {t for n in program.nodes for t in n.inputs} | set(program.outputs)
        dead = [n for n in program.nodes if n.op in SHAPE_OPS and n.name not in keep
                and not any(t in read for t in n.outputs)]
        if not dead:
            return
        gone = {id(n) for n in dead}
        for n in dead:
            for t in n.outputs:
                program.tensors.pop(t, None)
        program.nodes = [n for n in program.nodes if id(n) not in gone]
