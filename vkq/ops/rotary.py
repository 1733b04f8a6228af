"""rotary: a rotary position embedding applied to q or k in one dispatch (shaders/rotary.comp).

    x f32 (B, H, T, D), cos f32 (B or 1, T, D), sin f32 (B or 1, T, D) -> f32 (B, H, T, D)
    out = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

cos and sin are shared by the heads (transformers' apply_rotary_pos_emb with unsqueeze_dim=1).
Each product and the sum are float32 operations rounded once, as torch's eager ops round
them: the shader gives the reference's bits. vkq.lm_compile routes a decoder's
apply_rotary_pos_emb here (vkq::rotary) where it computes exactly this.
"""
from __future__ import annotations

import numpy as np

from ..registry import register_op
from .float import _elementwise

F32 = np.float32


def rotary(x, cos, sin):
    x, cos, sin = (np.asarray(a, F32) for a in (x, cos, sin))
    _check(x.shape, cos.shape, sin.shape)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    c, s = cos[:, None], sin[:, None]
    return (x * c).astype(F32) + (rot * s).astype(F32)


def _check(xs, cs, ss):
    if len(xs) != 4 or xs[-1] % 2 or tuple(cs) != tuple(ss) or len(cs) != 3 \
            or cs[0] not in (1, xs[0]) or tuple(cs[1:]) != tuple(xs[2:]):
        raise ValueError(f"rotary: x {tuple(xs)} must be (B, H, T, D) with D even and cos, sin {tuple(cs)}, "
                         f"{tuple(ss)} (B or 1, T, D)")


def _decline(node, tensors):
    x, c, s = (tensors[t] for t in node.inputs)
    if any(t.dtype != "float32" for t in (x, c, s)):
        return "rotary: float32 only"
    return None


def _build(ctx, node):
    x, c, s = node.inputs
    xs, cs = ctx.spec(x).shape, ctx.spec(c).shape
    _check(xs, cs, ctx.spec(s).shape)
    n = int(np.prod(xs))
    if n == 0:
        return []
    b, h, t, d = xs
    push = (n, d, t, h, 0 if cs[0] == 1 else t * d)
    return [_elementwise(ctx, "rotary", [ctx.buffer(x), ctx.buffer(c), ctx.buffer(s), ctx.buffer(node.outputs[0])],
                         n, push)]


@register_op
class Rotary:
    """Rotary position embedding of q or k (B, H, T, D) by cos / sin (B or 1, T, D), heads shared."""
    name = "rotary"
    shaders = ("rotary",)
    reference = staticmethod(rotary)
    build = staticmethod(_build)
    decline = staticmethod(_decline)
