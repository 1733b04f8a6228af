"""three_d_as_two_d: 3-D convolutions, pools and batch norms (video and volume networks: R3D,
R(2+1)D, S3D, X3D, 3-D U-Nets) as 2-D ones over the frames, so that they get the 2-D kernels.

The quantizer runs this before annotating (VkqQuantizer.transform_for_annotation; prepare_pt2e
has already folded each BatchNorm3d that follows a conv3d into it). A video x (N, C, T, H, W) is
seen as its frames f = (N*T, C, H, W): to_frames(x) = reshape(permute(x, 0 2 1 3 4)), and
to_video(f) the inverse. With (kt, kh, kw) windows, strides (st, sh, sw), padding (pt, ph, pw):

  conv3d(x, w, b)   -> to_video(conv2d(taps, w as (OC, kt*C/g, kh, kw), b, (sh, sw), (ph, pw),
                       (dh, dw), g)), taps = the kt frames each output frame reads, stacked as
                       channels: frame t of (N*To, C*kt, H, W) holds channel c of input frame
                       st*t - pt + i*dt (a zero frame where that is padding) at channel i*C + c
                       (groups = 1: 4W4C words copy whole) or c*kt + i (grouped: w's own
                       (C/g, kt) order keeps a group's channels together), one gather from f.
                       The same multiply-adds, one int32 sum, one requantize: exact. kt = st = 1
                       needs no taps: the conv runs on f itself.
  conv_transpose3d  -> conv_transpose2d over taps (frames q, q-1, ..), its output channels the
                       st phases of output frames q*st + a, a take dropping the padding's
                       frames (conv_transpose_as_conv then makes it a conv)
  max_pool3d        -> max_pool2d over (kh, kw) on f, then, for kt > 1, over (kt, 1) on
                       (N, C, T, Ho*Wo) (a max is separable; padding is -inf in both)
  avg_pool3d        -> avg_pool2d on f where kt = st = 1 and pt = 0; a window over the whole
                       video (X3D's head) as the global pool below; any other with one divisor
                       (a 3-D U-Net's 2x2x2) a depthwise conv3d with weights 1/K (one rounding);
                       the rest, under the float schemes only (separable=True), avg_pool2d on f
                       then over (kt, 1) as the max pool
  adaptive_avg_pool3d, mean over (T, H, W) or (H, W) -> (1, 1, 1): adaptive_avg_pool2d(reshape(x,
                       (N, C, T, H*W)), 1) (one mean, one rounding); per frame: on f
  upsample_trilinear3d -> upsample_bilinear2d on f, then over T as the max pool (int8: two
                       roundings, within one step; one where T keeps its size)
  upsample_nearest3d (and nearest-exact) -> the 2-D one on f, then a take of frames
  batch_norm of a video -> batch_norm on f (then batch_norm_as_conv makes it a conv)

Then, as one_d_as_two_d does with its squeezes, each to_video moves down past the elementwise
ops that read it (relu, a residual add of two videos of one shape, a gate's mul) and past a
cat along channels (a U-Net's skip), and
to_frames(to_video(f)) is f: a chain of 3-D layers stays (N*T, C, H, W) from its first conv to
its last, in 4W4C. Shapes must be static (the frames' reshape is made for one size); a 3-D op
that is not rewritten runs on the CPU, named.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ._graph import add_constant, arg, aten, call_before, const_value, finish, first_outputs, is_call, pair, \
    replace_each, unary_operand, val
from .one_d_as_two_d import ACTIVATIONS, BINARY

CONV_3D = {aten.conv3d.default, aten.conv3d.padding}
CONV_T_3D = {aten.conv_transpose3d.input}
MAX_POOL_3D = {aten.max_pool3d.default, aten.max_pool3d_with_indices.default}
SWAP = [0, 2, 1, 3, 4]          # (N, C, T, H, W) <-> (N, T, C, H, W)
MADE = "vkq_frames_view"        # meta key of the views this pass makes (only those are folded)


def _static(node, rank: int = 5) -> tuple | None:
    """node's shape when it is a float tensor of `rank` static dims, else None."""
    v = val(node)
    if not isinstance(v, torch.Tensor) or v.dim() != rank or not v.dtype.is_floating_point \
            or not all(isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _view(before: Node, target, args) -> Node:
    n = call_before(before, target, args)
    n.meta[MADE] = True
    return n


def to_frames(before: Node, x: Node) -> Node:
    n, c, t, h, w = _static(x)
    return _view(before, aten.reshape.default, (_view(before, aten.permute.default, (x, SWAP)), [n * t, c, h, w]))


def to_video(before: Node, f: Node, n: int, t: int) -> Node:
    _, c, h, w = val(f).shape
    return _view(before, aten.permute.default, (_view(before, aten.reshape.default, (f, [n, t, c, h, w])), SWAP))


def _conv(gm: GraphModule, node: Node) -> Node | None:
    w = const_value(gm, node.args[1])
    if _static(node.args[0]) is None or _static(node) is None or w is None or w.dim() != 5:
        return None
    return _conv_frames(gm, node, node.args[0], w, arg(node, 2, "bias"), arg(node, 3, "stride", 1),
                        arg(node, 4, "padding", 0), arg(node, 5, "dilation", 1), int(arg(node, 6, "groups", 1)))


def _conv_frames(gm: GraphModule, node: Node, x: Node, w: torch.Tensor, bias, stride, padding, dilation,
                 groups: int) -> Node:
    """conv3d(x, w, bias, ...) as a conv2d over x's taps, the video it gives (node: where the
    new nodes go and what names their constants)."""
    n, c, t, h, wd = _static(x)
    kt, kh, kw = w.shape[2:]
    (st, sh, sw), (dt, dh, dw) = pair(stride, 3), pair(dilation, 3)
    if isinstance(padding, str):        # "valid" / "same" (stride 1): T's padding is ours, H, W's conv2d's
        total = dt * (kt - 1) if padding == "same" else 0
        pt, padding2 = total // 2, padding
    else:
        pt, ph, pw = pair(padding, 3)
        padding2 = [ph, pw]
    to = _static(node)[2]
    if kt == 1 and st == 1 and pt == 0:
        taps = to_frames(node, x)
    else:
        t_in = torch.arange(to)[:, None] * st - pt + torch.arange(kt)[None, :] * dt
        taps = _taps(gm, node, x, t_in, groups)
    w2 = add_constant(gm, f"{node.name}_weight", _weight(w, groups), node)
    target = aten.conv2d.padding if isinstance(padding2, str) else aten.conv2d.default
    two = call_before(node, target, (taps, w2, bias, [sh, sw], padding2, [dh, dw], groups))
    return to_video(node, two, n, to)


def _taps(gm: GraphModule, node: Node, x: Node, t_in: torch.Tensor, groups: int) -> Node:
    """(N*R, C*k, H, W) for t_in (R, k): row r of each video stacks, as channels, its k taps,
    tap i the input frame t_in[r, i] (a zero frame where that is outside 0 .. T-1: padding, or
    no input). One gather (index by constant indices: a take) from the frames (N*T, C, H, W)
    with one zero frame after them (the zero point). Channel c of tap i sits at i*C + c (a 4W4C
    word is then a whole word of one frame where C % 4 == 0: the take copies words), or, in a
    grouped conv, at c*k + i (a group's channels together, as w's own (C/g, kt) order)."""
    n, c, t, h, w = _static(x)
    rows, k = t_in.shape
    padded = call_before(node, aten.constant_pad_nd.default, (to_frames(node, x), [0, 0, 0, 0, 0, 0, 0, 1], 0.0))
    r, j = torch.arange(n * rows)[:, None], torch.arange(c * k)[None, :]
    tap, channel = (j // c, j % c) if groups == 1 else (j % k, j // k)
    ti = t_in[r % rows, tap]
    frame = torch.where((ti >= 0) & (ti < t), (r // rows) * t + ti, n * t)
    index = [add_constant(gm, f"{node.name}_taps_{name}", v, node) for name, v in (("frame", frame), ("channel", channel))]
    return call_before(node, aten.index.Tensor, (padded, index))


def _weight(w: torch.Tensor, groups: int) -> torch.Tensor:
    """w (OC, C/g, kt, kh, kw) as the conv2d over _taps' channels: (OC, kt*C, kh, kw) tap-major, or
    (OC, C/g*kt, kh, kw) grouped."""
    if groups == 1:
        w = w.permute(0, 2, 1, 3, 4)
    return w.reshape(w.shape[0], -1, *w.shape[3:]).contiguous()


def _conv_transpose(gm: GraphModule, node: Node) -> Node | None:
    """conv_transpose3d as a conv_transpose2d over taps (conv_transpose_as_conv then makes it a
    conv). Output frame r = q*st + a - pt (phase a) gets tap i = a + m*st from input frame q - m:
    the taps of super-frame q are frames q, q-1, .. q-M+1 (M = ceil(kt / st)), and one
    conv_transpose2d gives all st phases of q as its output channels (a*OC + o; grouped: g, a,
    o), from weights W[m*C + c, a*OC + o] = w[c, o, a + m*st] (0 past kt). Its frames in the
    order q*st + a are the output from frame pt on: a take drops the rest. With kt = st and no
    padding (a 3-D U-Net's 2x2x2 up-convolution) M = 1 and the taps are the frames themselves."""
    x, w, bias = node.args[0], const_value(gm, node.args[1]), arg(node, 2, "bias")
    b = const_value(gm, bias) if bias is not None else None
    if _static(x) is None or _static(node) is None or w is None or w.dim() != 5 or (bias is not None and b is None):
        return None
    (st, sh, sw), (pt, ph, pw) = pair(arg(node, 3, "stride", 1), 3), pair(arg(node, 4, "padding", 0), 3)
    (_, oph, opw), groups = pair(arg(node, 5, "output_padding", 0), 3), int(arg(node, 6, "groups", 1))
    (dt, dh, dw) = pair(arg(node, 7, "dilation", 1), 3)
    if dt != 1:
        return None
    n, c, t = _static(x)[:3]
    ocg, kt = w.shape[1], w.shape[2]
    to, m = _static(node)[2], -(-kt // st)
    q = -(-(to + pt) // st)
    wp = torch.zeros(c, m, st, ocg, *w.shape[3:], dtype=w.dtype)     # [c, m, a, o]
    for mm in range(m):
        for a in range(min(st, kt - mm * st)):
            wp[:, mm, a] = w[:, :, a + mm * st]
    if groups == 1:
        w2 = wp.permute(1, 0, 2, 3, 4, 5).reshape(m * c, st * ocg, *w.shape[3:])
    else:
        w2 = wp.reshape(c * m, st * ocg, *w.shape[3:])
    b2 = None
    if b is not None:
        b2 = add_constant(gm, f"{node.name}_bias", b.reshape(groups, 1, ocg).expand(groups, st, ocg).reshape(-1), node)
    if m == 1 and q == t:
        taps = to_frames(node, x)
    else:
        taps = _taps(gm, node, x, torch.arange(q)[:, None] - torch.arange(m)[None, :], groups)
    two = call_before(node, aten.conv_transpose2d.input,
                      (taps, add_constant(gm, f"{node.name}_weight", w2.contiguous(), node), b2, [sh, sw], [ph, pw],
                       [oph, opw], groups, [dh, dw]))
    _, _, ho, wo = val(two).shape
    oc = groups * ocg
    if groups > 1 and st > 1:       # channels (g, a, o) -> (a, g, o)
        grouped = call_before(node, aten.reshape.default, (two, [n * q, groups, st, ocg * ho * wo]))
        two = call_before(node, aten.permute.default, (grouped, [0, 2, 1, 3]))
    frames = call_before(node, aten.reshape.default, (two, [n * q * st, oc, ho, wo]))
    if q * st != to:
        keep = (torch.arange(n)[:, None] * q * st + pt + torch.arange(to)[None, :]).reshape(-1)
        frames = call_before(node, aten.index.Tensor, (frames, [add_constant(gm, f"{node.name}_frames", keep, node)]))
    return to_video(node, frames, n, to)


def _max_pool(gm: GraphModule, node: Node) -> Node | None:
    users = first_outputs(node) if node.target == aten.max_pool3d_with_indices.default else [node]
    out = users[0] if users else None
    if _static(node.args[0]) is None or out is None or _static(out) is None:
        return None
    x, (kt, kh, kw) = node.args[0], pair(node.args[1], 3)
    n, t, to = _static(x)[0], _static(x)[2], _static(out)[2]
    stride = arg(node, 2, "stride", [])
    (st, sh, sw), (pt, ph, pw) = pair(stride or [kt, kh, kw], 3), pair(arg(node, 3, "padding", 0), 3)
    (dt, dh, dw), ceil = pair(arg(node, 4, "dilation", 1), 3), bool(arg(node, 5, "ceil_mode", False))
    two = call_before(node, aten.max_pool2d.default, (to_frames(node, x), [kh, kw], [sh, sw], [ph, pw], [dh, dw], ceil))
    if (kt, st, pt) != (1, 1, 0):
        two = _over_t(node, two, n, t,
                      lambda v: (aten.max_pool2d.default, (v, [kt, 1], [st, 1], [pt, 0], [dt, 1], ceil)))
    new = to_video(node, two, n, to)
    for u in users:
        if u is not node:
            u.replace_all_uses_with(new)
            gm.graph.erase_node(u)
    return new


def _over_t(node: Node, frames: Node, n: int, t: int, op) -> Node:
    """The frames (N*T, C, Ho, Wo) of a video, with the 2-D op that op(v) gives for v = the
    video as (N, C, T, Ho*Wo) applied down its T (its second window dim 1): the frames of the
    result (N*To, C, Ho, Wo)."""
    _, c, ho, wo = val(frames).shape
    v = call_before(node, aten.permute.default,
                    (call_before(node, aten.reshape.default, (frames, [n, t, c, ho * wo])), [0, 2, 1, 3]))
    out = call_before(node, *op(v))
    to = val(out).shape[2]
    return call_before(node, aten.reshape.default,
                       (call_before(node, aten.permute.default, (out, [0, 2, 1, 3])), [n * to, c, ho, wo]))


def _global_pool(node: Node, x: Node) -> Node:
    """The mean of each channel over the whole video, as (N, C, 1, 1, 1): one adaptive 2-D pool."""
    n, c, t, h, w = _static(x)
    flat = call_before(node, aten.reshape.default, (x, [n, c, t, h * w]))
    pooled = call_before(node, aten.adaptive_avg_pool2d.default, (flat, [1, 1]))
    return call_before(node, aten.reshape.default, (pooled, [n, c, 1, 1, 1]))


def _avg_pool(gm: GraphModule, node: Node, separable: bool = False) -> Node | None:
    x = node.args[0]
    if _static(x) is None or _static(node) is None:
        return None
    n, c, t, h, w = _static(x)
    k = pair(node.args[1], 3)
    stride, padding = pair(arg(node, 2, "stride", []) or k, 3), pair(arg(node, 3, "padding", 0), 3)
    ceil, count_pad = bool(arg(node, 4, "ceil_mode", False)), bool(arg(node, 5, "count_include_pad", True))
    divisor = arg(node, 6, "divisor_override")
    if k == [t, h, w] and padding == [0, 0, 0] and divisor is None:
        return _global_pool(node, x)
    two = call_before(node, aten.avg_pool2d.default,
                      (to_frames(node, x), k[1:], stride[1:], padding[1:], ceil, count_pad, divisor))
    if (k[0], stride[0], padding[0]) == (1, 1, 0):
        return to_video(node, two, n, t)
    # a mean over frames and pixels: one rounding as a conv where it can be; else, in float only
    # (separable), the mean of the frames' means: exact, a window's divisor being the product of
    # its per-dim ones without an override. In int8 that would round twice, the frames' means
    # at a scale of their own, clipped to its observed range: left on the CPU.
    conv = _avg_pool_as_conv(gm, node, x, k, stride, padding, count_pad, divisor)
    if conv is not None or divisor is not None or not separable:
        return conv
    over_t = (aten.avg_pool2d.default, [k[0], 1], [stride[0], 1], [padding[0], 0], ceil, count_pad, None)
    return to_video(node, _over_t(node, two, n, t, lambda v: (over_t[0], (v, *over_t[1:]))), n, _static(node)[2])


def _avg_pool_as_conv(gm: GraphModule, node: Node, x: Node, k, stride, padding, count_pad: bool,
                      divisor) -> Node | None:
    """An average over several frames as a depthwise conv3d with weights 1/d (one sum, one
    rounding, as PT2E's; two pools, over frames and then over pixels, would round twice), where
    every window has the one divisor d: the divisor_override, or the window's size where no
    window reaches into padding it does not count and ceil_mode adds no window."""
    c, dims = _static(x)[1], _static(x)[2:]
    floor = [(i + 2 * p - kk) // s + 1 for i, p, kk, s in zip(dims, padding, k, stride)]
    if list(_static(node)[2:]) != floor or not (divisor or count_pad or padding == [0, 0, 0]):
        return None
    d = divisor or k[0] * k[1] * k[2]
    w = torch.full((c, 1, *k), 1.0 / d, dtype=val(x).dtype)
    return _conv_frames(gm, node, x, w, None, stride, padding, 1, c)


def _adaptive_avg_pool(gm: GraphModule, node: Node) -> Node | None:
    x = node.args[0]
    if _static(x) is None or _static(node) is None:
        return None
    n, c, t, h, w = _static(x)
    to, ho, wo = _static(node)[2:]
    if (to, ho, wo) == (1, 1, 1):
        return _global_pool(node, x)
    if to != t:
        return None
    return to_video(node, call_before(node, aten.adaptive_avg_pool2d.default, (to_frames(node, x), [ho, wo])), n, t)


def _trilinear(gm: GraphModule, node: Node) -> Node | None:
    """upsample_trilinear3d as a bilinear resize of each frame, then one down T (of the video as
    (N, C, T, Ho*Wo), its second dim kept: weights 1 and 0): ATen's per-dim taps and scales. In
    int8 that rounds twice (each within the int8 kernel's one step; together within one step of
    PT2E's one rounding); once where T is not resized."""
    x = node.args[0]
    if _static(x) is None or _static(node) is None:
        return None
    n, t = _static(x)[0], _static(x)[2]
    to, ho, wo = _static(node)[2:]
    a = list(node.args) + [None] * 6
    align = bool(a[2])
    scales = (a[3] or [None] * 3) if node.target == aten.upsample_trilinear3d.vec else a[3:6]
    frames = call_before(node, aten.upsample_bilinear2d.default,
                         (to_frames(node, x), [ho, wo], align, scales[1], scales[2]))
    if to != t or scales[0] not in (None, 1.0):
        frames = _over_t(node, frames, n, t,
                         lambda v: (aten.upsample_bilinear2d.default, (v, [to, ho * wo], align, scales[0], None)))
    return to_video(node, frames, n, to)


def _nearest(gm: GraphModule, node: Node) -> Node | None:
    """upsample_nearest3d (and nearest-exact) as the 2-D one on each frame, then a take of the
    frames each output frame copies (ATen's source index along T): both move int8 as it is."""
    from ..ops.resize import nearest_source
    x = node.args[0]
    if _static(x) is None or _static(node) is None:
        return None
    n, t = _static(x)[0], _static(x)[2]
    to, ho, wo = _static(node)[2:]
    size, scales = arg(node, 1, "output_size"), arg(node, 2, "scale_factors")
    exact = node.target == aten._upsample_nearest_exact3d.vec
    two = aten._upsample_nearest_exact2d.vec if exact else aten.upsample_nearest2d.vec
    frames = call_before(node, two, (to_frames(node, x), None if size is None else [ho, wo],
                                     None if scales is None else list(scales[1:])))
    source = torch.as_tensor(nearest_source(t, to, None if scales is None else scales[0], exact))
    if to != t or not torch.equal(source, torch.arange(t)):
        keep = (torch.arange(n)[:, None] * t + source[None, :]).reshape(-1)
        frames = call_before(node, aten.index.Tensor, (frames, [add_constant(gm, f"{node.name}_frames", keep, node)]))
    return to_video(node, frames, n, to)


def _mean(gm: GraphModule, node: Node) -> Node | None:
    """A mean of a video over T, H, W (a global pool) or over H, W (each frame's: a per-frame
    global pool), as the pools above: one mean, one rounding."""
    x, dims, keep = node.args[0], arg(node, 1, "dim"), bool(arg(node, 2, "keepdim", False))
    if _static(x) is None or arg(node, 3, "dtype") is not None or dims is None:
        return None
    n, c, t = _static(x)[:3]
    dims = sorted({int(d) % 5 for d in dims})
    if dims == [2, 3, 4]:
        pooled, kept = _global_pool(node, x), [n, c]
    elif dims == [3, 4]:
        two = call_before(node, aten.adaptive_avg_pool2d.default, (to_frames(node, x), [1, 1]))
        pooled, kept = to_video(node, two, n, t), [n, c, t]
    else:
        return None
    return pooled if keep else call_before(node, aten.reshape.default, (pooled, kept))


def _batch_norm(gm: GraphModule, node: Node) -> Node | None:
    x = node.args[0]
    if _static(x) is None:
        return None
    n, _, t, _, _ = _static(x)
    two = call_before(node, node.target, (to_frames(node, x), *node.args[1:]), node.kwargs)
    return to_video(node, two, n, t)


RULES = {**{t: _conv for t in CONV_3D}, **{t: _conv_transpose for t in CONV_T_3D},
         **{t: _max_pool for t in MAX_POOL_3D},
         aten.avg_pool3d.default: _avg_pool, aten.adaptive_avg_pool3d.default: _adaptive_avg_pool,
         aten.upsample_trilinear3d.vec: _trilinear, aten.upsample_trilinear3d.default: _trilinear,
         aten.upsample_nearest3d.vec: _nearest, aten._upsample_nearest_exact3d.vec: _nearest,
         aten.mean.dim: _mean, aten.batch_norm.default: _batch_norm}


def _video_of(node) -> tuple[Node, int, int] | None:
    """(f, N, T) where node = to_video(f) as this pass made it; else None."""
    if not (is_call(node, {aten.permute.default}) and node.meta.get(MADE) and list(node.args[1]) == SWAP):
        return None
    r = node.args[0]
    if not (is_call(r, {aten.reshape.default}) and r.meta.get(MADE) and _static(r.args[0], 4) is not None):
        return None
    n, t = r.args[1][:2]
    return r.args[0], n, t


def _gate(e: Node, b: Node, n: int, t: int) -> Node | None:
    """b, an operand that broadcasts over a video's T, H, W (a squeeze-excitation gate (N, C, 1,
    1, 1), a per-channel constant, a scalar), as the operand that broadcasts the same over its
    frames: (N*T or 1, C, 1, 1); or unchanged where its rank is <= 2 (it lines up with (H, W) in
    both). None where it does not broadcast so."""
    vb = val(b)
    if not isinstance(vb, torch.Tensor) or vb.dim() <= 2:
        return b
    shape = _static(b) if vb.dim() == 5 else None
    if shape is None or shape[2:] != (1, 1, 1) or shape[0] not in (1, n):
        return None
    nb, cb = shape[:2]
    if nb == 1 or t == 1:
        return call_before(e, aten.reshape.default, (b, [nb, cb, 1, 1]))
    per_video = call_before(e, aten.reshape.default, (b, [nb, 1, cb, 1, 1]))
    expanded = call_before(e, aten.expand.default, (per_video, [nb, t, cb, 1, 1]))
    return call_before(e, aten.reshape.default, (expanded, [nb * t, cb, 1, 1]))


def _sink(gm: GraphModule, e: Node) -> bool:
    """e(to_video(f), ...) -> to_video(e(f, ...)) for an elementwise e whose tensor operands are
    videos of one shape made from frames, or (a binary e) one such video and a gate (_gate) or
    another video of its shape (the model's input: one permute to its frames)."""
    tensors = [a for a in list(e.args) + list(e.kwargs.values()) if isinstance(a, Node)]
    if not tensors or not (is_call(e, ACTIVATIONS) or unary_operand(e) is not None or is_call(e, BINARY)):
        return False
    if any(isinstance(a, (list, tuple)) for a in e.args):
        return False
    videos = {a: _video_of(a) for a in tensors if _video_of(a) is not None and _static(a) == _static(e)}
    if not videos or len({(tuple(val(f).shape), n, t) for f, n, t in videos.values()}) != 1:
        return False
    _, n, t = next(iter(videos.values()))
    swap = {a: v[0] for a, v in videos.items()}
    for b in tensors:
        if b in swap:
            continue
        if not is_call(e, BINARY):
            return False
        if _static(b) == _static(e):        # a video of e's shape made elsewhere (the input's): its frames
            swap[b] = to_frames(e, b)
        elif (gate := _gate(e, b, n, t)) is not None:
            swap[b] = gate
        else:
            return False
    e2 = call_before(e, e.target, tuple(swap.get(a, a) for a in e.args), {k: swap.get(v, v) for k, v in e.kwargs.items()})
    e.replace_all_uses_with(to_video(e, e2, n, t))
    gm.graph.erase_node(e)
    return True


def _sink_cat(gm: GraphModule, e: Node) -> bool:
    """cat([to_video(f1), to_video(f2), ...], channels) -> to_video(cat([f1, f2, ...], 1)): a U-Net's
    skip connection stays on the frames (videos of one N, T, H, W; one made elsewhere, the
    model's input, by one permute to its frames)."""
    parts, dim = e.args[0], arg(e, 1, "dim", 0)
    if not isinstance(parts, (list, tuple)) or dim not in (1, -4) or _static(e) is None \
            or any(_static(p) is None for p in parts):
        return False
    videos = [_video_of(p) for p in parts]
    made = [v for v in videos if v is not None]
    shape = _static(e)
    if not made or any(_static(p)[:1] + _static(p)[2:] != shape[:1] + shape[2:] for p in parts):
        return False
    n, t = made[0][1:]
    frames = [v[0] if v is not None else to_frames(e, p) for p, v in zip(parts, videos)]
    e2 = call_before(e, aten.cat.default, (frames, 1))
    e.replace_all_uses_with(to_video(e, e2, n, t))
    gm.graph.erase_node(e)
    return True


def _fold(node: Node) -> Node | None:
    """What a view this pass made reduces to when its input is one too: permute(permute(v)) and
    reshape(reshape(v)) as one, and a view to its input's own shape as that input."""
    inner = node.args[0] if isinstance(node.args[0], Node) and node.args[0].meta.get(MADE) else None
    if is_call(node, {aten.permute.default}):
        if inner is not None and is_call(inner, {aten.permute.default}):
            order = [list(inner.args[1])[i] for i in node.args[1]]
            return inner.args[0] if order == list(range(len(order))) else None
        return None
    if inner is not None and is_call(inner, {aten.reshape.default}):
        source = inner.args[0]
        if tuple(val(source).shape) == tuple(val(node).shape):
            return source
        new = call_before(node, aten.reshape.default, (source, list(node.args[1])))
        new.meta[MADE] = True
        return new
    return None


def three_d_as_two_d(gm: GraphModule, separable: bool = False) -> bool:
    """separable: also the average pools that only a mean of means gives (exact in float; the
    schemes that leave pools float)."""
    rules = {**RULES, aten.avg_pool3d.default: lambda gm, node: _avg_pool(gm, node, separable)}
    if not replace_each(gm, set(rules), lambda gm, node: rules[node.target](gm, node)):
        return False
    moved = True
    while moved:            # to_video down past elementwise ops; to_frames(to_video(f)) -> f
        moved = False
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and any(_video_of(a) is not None for a in node.all_input_nodes):
                moved |= _sink_cat(gm, node) if node.target == aten.cat.default else _sink(gm, node)
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.meta.get(MADE) and node.users:
                new = _fold(node)
                if new is not None:
                    node.replace_all_uses_with(new)
                    moved = True
        gm.graph.eliminate_dead_code()
    return finish(gm, True)
