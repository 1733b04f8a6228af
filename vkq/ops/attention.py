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
from .float import _matmul_dispatch, _numel, masked_softmax_dispatch, softmax_masked, strides_of

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


def sdpa(q, k, v, mask=None, *, scale, causal=False, mask_kind="none"):
    """softmax(q @ k^T * scale + mask) @ v, each step rounded to float32 as the shaders do."""
    q, k, v = (np.asarray(a, F32) for a in (q, k, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    m = attention_mask(mask, mask_kind, causal, q.shape[-2], k.shape[-2])
    p = softmax_masked(scores, F32(0) if m is None else m, scale=scale)
    return np.matmul(p, v).astype(F32)


def _decline(node, tensors):
    q, k, v = (tensors[t].shape for t in node.inputs[:3])
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
    qs, ks, vs = (ctx.spec(t).shape for t in (q, k, v))
    L, S = qs[-2], ks[-2]
    batch = tuple(np.broadcast_shapes(qs[:-2], ks[:-2], vs[:-2]))
    score_shape = batch + (L, S)
    n = _numel(score_shape)
    scores = ctx.scratch(n, np.float32)
    weights = ctx.scratch(n, np.float32)
    k_t = [list(ks[:-2]) + [ks[-1], S], strides_of(ks)[:-2] + [1, ks[-1]]]      # k^T without a copy
    steps = [_matmul_dispatch(ctx, node, [list(qs), strides_of(qs)], k_t, strides_of(score_shape), n,
                              [ctx.buffer(q), ctx.buffer(k), scores])]
    kind = at.get("mask_kind", "none")
    if kind != "none":
        mask = node.inputs[3]
        mbuf, mshape, as_bool = ctx.buffer(mask), ctx.spec(mask).shape, kind == "bool"
    else:      # a constant: the causal mask, or 0
        m = attention_mask(None, kind, at.get("causal"), L, S)
        m = np.zeros(1, F32) if m is None else m
        mbuf, mshape, as_bool = ctx.const_buffer(m.reshape(-1)), m.shape, False
    steps.append(masked_softmax_dispatch(ctx, node.name, score_shape, mshape, at["scale"],
                                         [scores, weights, mbuf], bool_mask=as_bool))
    out_shape = ctx.spec(out).shape
    steps.append(_matmul_dispatch(ctx, node, [list(score_shape), strides_of(score_shape)], [list(vs), strides_of(vs)],
                                  strides_of(out_shape), _numel(out_shape), [weights, ctx.buffer(v), ctx.buffer(out)]))
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
