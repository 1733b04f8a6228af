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
  max_pool3d        -> max_pool2d over (kh, kw) on f, then, for kt > 1, over (kt, 1) on
                       (N, C, T, Ho*Wo) (a max is separable; padding is -inf in both)
  avg_pool3d        -> avg_pool2d on f where kt = st = 1 and pt = 0; a window over the whole
                       video (X3D's head) as the global pool below
  adaptive_avg_pool3d -> (1, 1, 1): adaptive_avg_pool2d(reshape(x, (N, C, T, H*W)), 1) (one
                       mean, one rounding); (T, oh, ow): adaptive_avg_pool2d on f
  batch_norm of a video -> batch_norm on f (then batch_norm_as_conv makes it a conv)

Then, as one_d_as_two_d does with its squeezes, each to_video moves down past the elementwise
ops that read it (relu, a residual add of two videos of one shape, a gate's mul) and
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
    x, wnode, bias = node.args[0], node.args[1], arg(node, 2, "bias")
    w = const_value(gm, wnode)
    if _static(x) is None or _static(node) is None or w is None or w.dim() != 5:
        return None
    n, c, t, h, wd = _static(x)
    kt, kh, kw = w.shape[2:]
    (st, sh, sw), (dt, dh, dw) = pair(arg(node, 3, "stride", 1), 3), pair(arg(node, 5, "dilation", 1), 3)
    groups, padding = int(arg(node, 6, "groups", 1)), arg(node, 4, "padding", 0)
    if isinstance(padding, str):        # "valid" / "same" (stride 1): T's padding is ours, H, W's conv2d's
        total = dt * (kt - 1) if padding == "same" else 0
        pads, padding2 = (total // 2, total - total // 2), padding
    else:
        pt, ph, pw = pair(padding, 3)
        pads, padding2 = (pt, pt), [ph, pw]
    to = _static(node)[2]
    if kt == 1 and st == 1 and pads == (0, 0):
        taps = to_frames(node, x)
    else:
        taps = _taps(gm, node, x, to, kt, st, dt, pads, groups)
    w2 = add_constant(gm, f"{node.name}_weight", _weight(w, groups), node)
    target = aten.conv2d.padding if isinstance(padding2, str) else aten.conv2d.default
    two = call_before(node, target, (taps, w2, bias, [sh, sw], padding2, [dh, dw], groups))
    return to_video(node, two, n, to)


def _taps(gm: GraphModule, node: Node, x: Node, to: int, kt: int, st: int, dt: int, pads, groups: int) -> Node:
    """(N*To, C*kt, H, W): output frame r's kt input frames, one gather (index by constant
    indices: a take) from the frames (N*T, C, H, W) with one zero frame after them (the
    padding's: the zero point). Channel c of tap i sits at i*C + c (a 4W4C word is then a whole
    word of one frame where C % 4 == 0: the take copies words), or, in a grouped conv, at
    c*kt + i (a group's channels together, as w's own (C/g, kt) order)."""
    n, c, t, h, w = _static(x)
    padded = call_before(node, aten.constant_pad_nd.default, (to_frames(node, x), [0, 0, 0, 0, 0, 0, 0, 1], 0.0))
    r, j = torch.arange(n * to)[:, None], torch.arange(c * kt)[None, :]
    tap, channel = (j // c, j % c) if groups == 1 else (j % kt, j // kt)
    t_in = (r % to) * st - pads[0] + tap * dt
    frame = torch.where((t_in >= 0) & (t_in < t), (r // to) * t + t_in, n * t)
    index = [add_constant(gm, f"{node.name}_taps_{k}", v, node) for k, v in (("frame", frame), ("channel", channel))]
    return call_before(node, aten.index.Tensor, (padded, index))


def _weight(w: torch.Tensor, groups: int) -> torch.Tensor:
    """w (OC, C/g, kt, kh, kw) as the conv2d over _taps' channels: (OC, kt*C, kh, kw) tap-major, or
    (OC, C/g*kt, kh, kw) grouped."""
    if groups == 1:
        w = w.permute(0, 2, 1, 3, 4)
    return w.reshape(w.shape[0], -1, *w.shape[3:]).contiguous()


def _max_pool(gm: GraphModule, node: Node) -> Node | None:
    users = first_outputs(node) if node.target == aten.max_pool3d_with_indices.default else [node]
    out = users[0] if users else None
    if _static(node.args[0]) is None or out is None or _static(out) is None:
        return None
    x, (kt, kh, kw) = node.args[0], pair(node.args[1], 3)
    n, c, t, h, w = _static(x)
    stride = arg(node, 2, "stride", [])
    (st, sh, sw), (pt, ph, pw) = pair(stride or [kt, kh, kw], 3), pair(arg(node, 3, "padding", 0), 3)
    (dt, dh, dw), ceil = pair(arg(node, 4, "dilation", 1), 3), bool(arg(node, 5, "ceil_mode", False))
    to, ho, wo = _static(out)[2:]
    two = call_before(node, aten.max_pool2d.default, (to_frames(node, x), [kh, kw], [sh, sw], [ph, pw], [dh, dw], ceil))
    if (kt, st, pt) == (1, 1, 0):
        new = to_video(node, two, n, t)
    else:           # over T: (N*T, C, Ho, Wo) -> (N, C, T, Ho*Wo), a (kt, 1) window down its H
        over_t = call_before(node, aten.permute.default,
                             (call_before(node, aten.reshape.default, (two, [n, t, c, ho * wo])), [0, 2, 1, 3]))
        pooled = call_before(node, aten.max_pool2d.default, (over_t, [kt, 1], [st, 1], [pt, 0], [dt, 1], ceil))
        frames = call_before(node, aten.reshape.default,
                             (call_before(node, aten.permute.default, (pooled, [0, 2, 1, 3])), [n * to, c, ho, wo]))
        new = to_video(node, frames, n, to)
    for u in users:
        if u is not node:
            u.replace_all_uses_with(new)
            gm.graph.erase_node(u)
    return new


def _global_pool(node: Node, x: Node) -> Node:
    """The mean of each channel over the whole video, as (N, C, 1, 1, 1): one adaptive 2-D pool."""
    n, c, t, h, w = _static(x)
    flat = call_before(node, aten.reshape.default, (x, [n, c, t, h * w]))
    pooled = call_before(node, aten.adaptive_avg_pool2d.default, (flat, [1, 1]))
    return call_before(node, aten.reshape.default, (pooled, [n, c, 1, 1, 1]))


def _avg_pool(gm: GraphModule, node: Node) -> Node | None:
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
    if (k[0], stride[0], padding[0]) != (1, 1, 0):
        return None     # a mean over frames and pixels: two roundings would not be PT2E's one
    two = call_before(node, aten.avg_pool2d.default,
                      (to_frames(node, x), k[1:], stride[1:], padding[1:], ceil, count_pad, divisor))
    return to_video(node, two, n, t)


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


def _batch_norm(gm: GraphModule, node: Node) -> Node | None:
    x = node.args[0]
    if _static(x) is None:
        return None
    n, _, t, _, _ = _static(x)
    two = call_before(node, node.target, (to_frames(node, x), *node.args[1:]), node.kwargs)
    return to_video(node, two, n, t)


RULES = {**{t: _conv for t in CONV_3D}, **{t: _max_pool for t in MAX_POOL_3D},
         aten.avg_pool3d.default: _avg_pool, aten.adaptive_avg_pool3d.default: _adaptive_avg_pool,
         aten.batch_norm.default: _batch_norm}


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


def three_d_as_two_d(gm: GraphModule) -> bool:
    if not replace_each(gm, set(RULES), lambda gm, node: RULES[node.target](gm, node)):
        return False
    moved = True
    while moved:            # to_video down past elementwise ops; to_frames(to_video(f)) -> f
        moved = False
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and any(_video_of(a) is not None for a in node.all_input_nodes):
                moved |= _sink(gm, node)
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.meta.get(MADE) and node.users:
                new = _fold(node)
                if new is not None:
                    node.replace_all_uses_with(new)
                    moved = True
        gm.graph.eliminate_dead_code()
    return finish(gm, True)
