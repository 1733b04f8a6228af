"""rotary: a rotary position embedding applied to q or k in one dispatch (shaders/rotary.comp).

    x f32 (B, H, T, D), cos f32 (B or 1, T, D), sin f32 (B or 1, T, D) -> f32 (B, H, T, D)
    out = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

cos and sin are shared by the heads (transformers' apply_rotary_pos_emb with unsqueeze_dim=1).
attr tokens_first: x is (B, T, H, D), read through the transpose to (B, H, T, D) that made it
(vkq.ops.attention_cached.fold_head_transposes drops that copy); the output is as above.
Each product and the sum are float32 operations rounded once, as torch's eager ops round
them: the shader gives the reference's bits. vkq.lm_compile routes a decoder's
apply_rotary_pos_emb here (vkq::rotary) where it computes exactly this.
"""
from __future__ import annotations

import numpy as np

from ..registry import register_op
from .float import _elementwise

F32 = np.float32


def rotary(x, cos, sin, *more, tokens_first=False):
    if more:
        return tuple(rotary(v, cos, sin, tokens_first=tokens_first) for v in (x, *more))
    x, cos, sin = (np.asarray(a, F32) for a in (x, cos, sin))
    x = x.transpose(0, 2, 1, 3) if tokens_first else x
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
    if any(tensors[t].dtype != "float32" for t in node.inputs):
        return "rotary: float32 only"
    return None


def _build(ctx, node):
    x, c, s, *more = node.inputs
    first = bool(node.attrs.get("tokens_first"))
    if len(more) > 1 or len(node.outputs) != 1 + len(more):
        raise ValueError(f"{node.name}: rotary takes one or two x, one output each")
    sizes = []
    for v in (x, *more):
        xs = ctx.spec(v).shape
        xs = (xs[0], xs[2], xs[1], xs[3]) if first and len(xs) == 4 else xs
        _check(xs, ctx.spec(c).shape, ctx.spec(s).shape)
        sizes.append((int(np.prod(xs)), xs[1]))
    (n, h), cs = sizes[0], ctx.spec(c).shape
    n2, h2 = sizes[1] if more else (0, 0)
    if n + n2 == 0:
        return []
    t, d = cs[1], cs[2]
    push = (n, d, t, h, 0 if cs[0] == 1 else t * d, int(first), n2, h2)
    bufs = [ctx.buffer(x), ctx.buffer(c), ctx.buffer(s), ctx.buffer(node.outputs[0])]
    bufs += [ctx.buffer(more[0]), ctx.buffer(node.outputs[1])] if more else []
    return [_elementwise(ctx, "rotary", bufs, n + n2, push, ["PAIR"] if more else None)]


@register_op
class Rotary:
    """Rotary position embedding of q or k (B, H, T, D) by cos / sin (B or 1, T, D), heads shared;
    of q and k in one dispatch where k is a fourth input."""
    name = "rotary"
    shaders = ("rotary",)
    reference = staticmethod(rotary)
    build = staticmethod(_build)
    decline = staticmethod(_decline)
