"""fold_qdq_patterns: dequantize -> op -> quantize becomes one vkq integer op.

    dq(x_q) -> conv2d(., dq(w_q), b) -> q(s_o, zp_o, qmin, qmax)
        ->  conv2d_q8(x_q, w_q, bias_f64, multiplier, shift; stride, ..., x_zp, out_zp, qmin, qmax)

The new node is an FX call to vkq_target(op) whose args are the int8 input(s) and get_attr
constants (int8 weights, int32 bias = round(b / (s_x * s_w)), fixed-point multipliers) and whose
kwargs are the op's attrs, made by the ops' `*_params` helpers. qmin/qmax come from the quantize,
where fuse_activation already put any relu / relu6 / hardtanh.

Rules are the table FOLD_RULES: aten target -> rule(gm, node), which returns the replacement node
or a string saying why not (recorded on the node; it then runs in float on the CPU). Each rule
walks its own q/dq neighbours with the helpers below. The patterns:

  conv2d                     dq x, dq w (per channel or per tensor, symmetric)  -> conv2d_q8
  linear                     dq x, dq w, q out                 -> linear_q8
                             dq x, dq w, float out (the quantizer left it unquantized)
                                                               -> linear_q8_fout
                             float x, dq w                     -> linear_dynamic / linear_weight_only
                             float x, float constant w, scheme int4 / 8da4w -> linear_int4 / linear_8da4w
                             dq.tensor(q.tensor(x, choose_qparams(x))) x, dq w -> linear_dynamic
                             x of rank > 4: each of the above on x viewed as (rows, C), the
                             output viewed back (_linear_over_rows)
  add, mul                   dq a, dq b (same shape), q out    -> add_q8 / mul_q8
                             mul by a (N, C, 1, 1) gate (squeeze-excitation) -> mul_q8 (broadcast)
  elementwise f(x)           dq x, q out, f in UNARY_ELEMENTWISE (hardswish, sigmoid, x * 0.5, ...)
                                                               -> lut_q8 (table = PT2E's q(f(dq(.))))
  max_pool2d                 dq x, q out                       -> max_pool2d_q8 [+ clamp_q8]
  vkq.adaptive_max_pool2d    dq x (4-D), q out                 -> adaptive_max_pool2d_q8 [+ clamp_q8]
  vkq.max_unpool2d           dq v, dq x (4-D), q out           -> max_unpool2d_q8 [+ clamp_q8]
  avg_pool2d                 dq x, q out                       -> avg_pool2d_q8
  adaptive_avg_pool2d        dq x (4-D), q out                 -> adaptive_avg_pool2d_q8
  cat                        dq inputs, q out                  -> cat_q8 [+ clamp_q8]
  layer_norm                 dq x, q out, over the last dim (a multiple of 4) -> layer_norm_q8
  upsample_bilinear2d        dq x (4-D), q out                 -> upsample_bilinear2d (int8) [+ clamp_q8]
  quantize(dequantize(x))    (what drop_cancelling_qdq left: a rescale or a narrower range) -> clamp_q8
"""
from __future__ import annotations

import hashlib
import math
import operator
from dataclasses import dataclass

import numpy as np
import torch
from torch.fx import GraphModule, Node

from ..quant import INT8_MAX, INT8_MIN, fit_bias_to_accumulator
from ._graph import (CHOOSE_QPARAMS, DEQUANTIZE, DEQUANTIZE_CHANNEL, DEQUANTIZE_TENSOR, HOST_FLOAT64, PERMUTES,
                     QUANTIZE, QUANTIZE_TENSOR, UNARY_ELEMENTWISE, add_constant, arg, aten, finish, is_call, op_name,
                     dtype_of, dynamic_size, graph_out_size, pair, q_args, qd, reject, set_val, shape_of,
                     unary_operand, vkq_target)
from .fold_constants import evaluate_constant
from .torch_ops import ADAPTIVE_MAX_POOL2D, MAX_UNPOOL2D

# ------------------------------------------------------------------ what the rules look at

@dataclass
class Act:
    """An int8 activation seen through its dequantize."""
    node: Node          # the int8 tensor
    scale: float
    zero_point: int


def dq_source(arg) -> Act | None:
    """arg = dequantize_per_tensor(x_int8, s, zp, ...) -> Act(x_int8, s, zp)."""
    if is_call(arg, DEQUANTIZE) and q_args(arg)["dtype"] == torch.int8:
        a = q_args(arg)
        return Act(arg.args[0], a["scale"], a["zero_point"])
    return None


def q_sink(node: Node) -> Node | None:
    """The int8 per-tensor quantize that is node's only user."""
    users = list(node.users)
    if len(users) == 1 and is_call(users[0], QUANTIZE) and q_args(users[0])["dtype"] == torch.int8:
        return users[0]
    return None


def dynamic_source(arg) -> Node | None:
    """arg = dq.tensor(q.tensor(x, choose_qparams(x))) (PT2E's per-tensor dynamic quantization)
    -> x: the device quantizes per row instead."""
    if not is_call(arg, DEQUANTIZE_TENSOR):
        return None
    q = arg.args[0]
    if not is_call(q, QUANTIZE_TENSOR):
        return None
    x, scale = q.args[0], q.args[1]
    if is_call(scale, {operator.getitem}) and is_call(scale.args[0], CHOOSE_QPARAMS) \
            and scale.args[0].args[0] is x:
        return x
    return None


def weight(gm, node) -> tuple[np.ndarray, np.ndarray] | str:
    """(int8 weight, per-output-channel scales) from a dequantize of a constant, or a reason.
    A transposed one (t(dq(w)), w (in, out) quantized along axis 1: GPT-2's Conv1D, which
    normalize_ops made a linear) is read as its transpose."""
    transposed = is_call(node, PERMUTES) and len(shape_of(node)) == 2
    if transposed:
        if node.target == aten.permute.default and [d % 2 for d in node.args[1]] != [1, 0]:
            return "its weight is a permuted tensor"
        node = node.args[0]
    out_axis = 1 if transposed else 0
    if is_call(node, DEQUANTIZE_CHANNEL):
        q, scales, zps, axis = (evaluate_constant(gm, a) if isinstance(a, Node) else a for a in node.args[:4])
        dtype = node.args[6] if len(node.args) > 6 else node.kwargs.get("dtype")
        if q is None or scales is None:
            return "its weight is not a constant"
        if axis % q.dim() != out_axis:
            return f"its weight is quantized along axis {axis}, not the output channels"
        zps = np.zeros(1) if zps is None else zps.numpy()
    elif is_call(node, DEQUANTIZE):
        a = q_args(node)
        q, dtype = evaluate_constant(gm, node.args[0]), a["dtype"]
        if q is None:
            return "its weight is not a constant"
        scales = torch.full((q.shape[out_axis],), a["scale"], dtype=torch.float64)
        zps = np.array([a["zero_point"]])
    else:
        return "its weight is not int8 (no dequantize of an int8 constant)"
    if dtype != torch.int8 or q.dtype != torch.int8:
        return f"its weight is {q.dtype}, the kernels take int8"
    if np.any(zps != 0):
        return "its weight is quantized with a zero point (the kernels take symmetric weights)"
    wq = q.numpy().astype(np.int8)
    return np.ascontiguousarray(wq.T if transposed else wq), scales.double().numpy()


def bias(gm, node, channels: int) -> np.ndarray | str:
    """Float bias (zeros when absent) or a reason."""
    if node is None:
        return np.zeros(channels, np.float64)
    b = evaluate_constant(gm, node)
    if b is None:
        return "its bias is not a constant"
    return b.double().numpy().reshape(channels)


def _out(q: Node) -> dict:
    a = q_args(q)
    return {"out_zp": a["zero_point"], "qmin": a["qmin"], "qmax": a["qmax"]}


# ------------------------------------------------------------------ emitting

def emit(gm: GraphModule, before: Node, op: str, inputs: list, constants: dict, attrs: dict,
         shape, dtype=torch.int8, qparams=None, hint: str | None = None) -> Node:
    """Insert vkq op `op` before `before`: args = inputs + get_attr constants (name -> array),
    named after `hint` (the FX node the op replaces)."""
    hint = hint or before.name
    consts = [add_constant(gm, f"{hint}_{name}", value, before) for name, value in constants.items()]
    with gm.graph.inserting_before(before):
        node = gm.graph.call_function(vkq_target(op), tuple(inputs) + tuple(consts), _plain(attrs))
    set_val(node, shape, dtype)
    if qparams is not None:
        node.meta["vkq_qparams"] = (float(qparams[0]), int(qparams[1]))
    return node


def _plain(v):
    """Attrs as JSON values: numpy scalars and arrays to Python ints/floats/lists."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return _plain(v.tolist())
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def emit_for_q(gm, q: Node, op, inputs, constants, attrs, hint=None) -> Node:
    """The op's int8 output replaces quantize q."""
    a = q_args(q)
    node = emit(gm, q, op, inputs, constants, attrs, shape_of(q), qparams=(a["scale"], a["zero_point"]),
                hint=hint)
    _hand_on_source(q, node)
    q.replace_all_uses_with(node)
    return node


def _hand_on_source(q: Node, node: Node) -> None:
    """node now holds the value quantize q held: it is compared with the same PT2E quantize."""
    if "vkq_source" in q.meta:
        node.meta["vkq_source"] = q.meta["vkq_source"]


def clamp_to(gm, src: Node, in_qp: tuple, q: Node) -> Node:
    """clamp_q8 from int8 src (qparams in_qp) to what quantize q asks for."""
    from ..ops.eltwise import clamp_q8_params
    a = q_args(q)
    attrs = clamp_q8_params(in_qp[0], in_qp[1], a["scale"], a["zero_point"], activation=None)
    attrs.update(qmin=a["qmin"], qmax=a["qmax"])
    node = emit(gm, q, "clamp_q8", [src], {}, attrs, shape_of(q), qparams=(a["scale"], a["zero_point"]))
    _hand_on_source(q, node)
    q.replace_all_uses_with(node)
    return node


def _needs_clamp(src_qp: tuple, q: Node) -> bool:
    a = q_args(q)
    return (a["scale"], a["zero_point"]) != (float(src_qp[0]), int(src_qp[1])) \
        or a["qmin"] > INT8_MIN or a["qmax"] < INT8_MAX


def emit_keeping_qparams(gm, q: Node, op: str, inputs: list, attrs: dict, src):
    """An op whose int8 result keeps src's scale and zero point (a max, a placement, an
    interpolation): q's own, or a clamp_q8 after it where q's qparams or range differ."""
    if not _needs_clamp((src.scale, src.zero_point), q):
        return emit_for_q(gm, q, op, inputs, {}, attrs)
    node = emit(gm, q, op, inputs, {}, attrs, shape_of(q), qparams=(src.scale, src.zero_point))
    return clamp_to(gm, node, (src.scale, src.zero_point), q)


# ------------------------------------------------------------------ rules

def fold_conv(gm, conv: Node):
    x = dq_source(conv.args[0])
    if x is None:
        return "input is not a dequantized int8 tensor"
    q = q_sink(conv)
    if q is None:
        return "output is not quantized to int8 (no float-output conv kernel)"
    if len(shape_of(conv.args[0])) != 4:
        return "input is not 4-D (N, C, H, W)"
    padding = arg(conv, 4, "padding", 0)
    if isinstance(padding, str):
        return f"padding={padding!r} (string padding) is not supported"
    w = weight(gm, conv.args[1])
    if isinstance(w, str):
        return w
    wq, ws = w
    b = bias(gm, arg(conv, 2, "bias", None), wq.shape[0])
    if isinstance(b, str):
        return b
    from ..ops.conv import conv2d_q8_params
    out = q_args(q)
    wq, ws = fit_bias_to_accumulator(wq, ws, x.scale, b)
    bacc, mult, shift, _, _ = conv2d_q8_params(x.scale, ws, out["scale"], b, None, out["zero_point"])
    attrs = {"stride": pair(arg(conv, 3, "stride", 1)), "padding": pair(padding),
             "dilation": pair(arg(conv, 5, "dilation", 1)), "groups": int(arg(conv, 6, "groups", 1)),
             "x_zp": x.zero_point, **_out(q)}
    consts = {"weight": wq, "bias": bacc, "multiplier": mult, "shift": shift}
    return _exact_bias(emit_for_q(gm, q, "conv2d_q8", [x.node], consts, attrs, hint=conv.name))


def _exact_bias(node: Node) -> Node:
    """node (conv2d_q8 / linear_q8, inputs x, weight, bias, ...) keeps its bias at the
    accumulator's scale in float64: the op splits off its fraction (vkq.quant.split_bias), and
    float32 would round that fraction (a bias of 2^20 accumulator units keeps only 1/8 of one)."""
    node.args[2].meta[HOST_FLOAT64] = True
    return node


INT4_SCHEMES = {"int4": "linear_int4", "8da4w": "linear_8da4w"}


def fold_linear(gm, lin: Node):
    scheme = lin.meta.get("vkq_scheme") or gm.meta.get("vkq_float_linear", "dynamic")
    if scheme in INT4_SCHEMES and dq_source(lin.args[0]) is None:
        return fold_int4_linear(gm, lin, INT4_SCHEMES[scheme])
    w = weight(gm, lin.args[1])
    if isinstance(w, str):
        return w
    wq, ws = w
    b = bias(gm, arg(lin, 2, "bias", None), wq.shape[0])
    if isinstance(b, str):
        return b
    if len(shape_of(lin.args[0])) > 4 or _mostly_padding_rows(lin.args[0]):
        return _linear_over_rows(gm, lin)
    x = dq_source(lin.args[0])
    if x is None:
        return _fold_float_linear(gm, lin, wq, ws, b)
    q = q_sink(lin)
    if q is None:   # the quantizer left the output float: dequantize the accumulator directly
        node = emit(gm, lin, "linear_q8_fout", [x.node],
                    {"weight": wq, "bias": b.astype(np.float32),
                     "scale": (x.scale * ws).astype(np.float32)},
                    {"x_zp": x.zero_point}, shape_of(lin), torch.float32)
        lin.replace_all_uses_with(node)
        return node
    # A quantized output stays quantized, even when only dequantized into the graph output:
    # PT2E clamps it to the calibrated range, and the program must compute what PT2E does.
    from ..ops.linear import linear_q8_params
    out = q_args(q)
    wq, ws = fit_bias_to_accumulator(wq, ws, x.scale, b)
    try:
        bacc, mult, shift, _, _ = linear_q8_params(x.scale, ws, out["scale"], b, None, out["zero_point"])
    except ValueError as e:
        return str(e)
    return _exact_bias(emit_for_q(gm, q, "linear_q8", [x.node],
                                  {"weight": wq, "bias": bacc, "multiplier": mult, "shift": shift},
                                  {"x_zp": x.zero_point, **_out(q)}, hint=lin.name))


def _mostly_padding_rows(x: Node) -> bool:
    """x (..., h, K), static, of several (...) matrices whose h rows are mostly padding in 4H4W
    (blocks of 4 rows a matrix: h = 1 or 2, half or more of them padding): nn.MultiheadAttention's
    (L, 1, E) projections are L matrices of one row, 4 packed rows each, 3 of them padding.
    Viewed as (rows, K) they are one matrix, for a repack each way (which a GEMM with a quarter
    of its rows padding, h = 3, 5, 6, does not repay on small inputs)."""
    shape = shape_of(x)
    if len(shape) < 3 or dynamic_size(x) or not all(isinstance(d, int) for d in shape):
        return False
    return math.prod(shape[:-2]) > 1 and shape[-2] <= 2


def _linear_over_rows(gm, lin: Node):
    """linear on x of rank > 4 (Swin3D's and SwinUNETR's channels-last (B, D, H, W, C) MLPs;
    the linear kernels take rank <= 4), or of mostly padding rows (_mostly_padding_rows: ViT's
    (L, 1, E) attention projections): the same linear on x viewed as (rows, C), its output
    viewed back. A per-tensor dequantize and quantize commute with a view, so x's dequantize and
    the output's quantize move to the 2-D side as they are; then the 2-D linear folds."""
    x, shape, out_shape = lin.args[0], shape_of(lin.args[0]), shape_of(lin)
    if dynamic_size(x) or dynamic_size(lin):
        return "input has rank > 4 and a dynamic shape"
    rows, g = math.prod(shape[:-1]), gm.graph

    def call(target, args, shape, dtype, kwargs=None, like=None):
        node = g.call_function(target, tuple(args), kwargs or {})
        if like is not None:
            node.meta.update(like.meta)
        return set_val(node, shape, dtype)

    with g.inserting_before(lin):
        if dq_source(x) is not None:      # reshape the int8 tensor, dequantize the view
            flat = call(aten.reshape.default, (x.args[0], [rows, shape[-1]]), (rows, shape[-1]), torch.int8)
            x2 = call(x.target, (flat, *x.args[1:]), (rows, shape[-1]), dtype_of(x), x.kwargs)
        else:
            x2 = call(aten.reshape.default, (x, [rows, shape[-1]]), (rows, shape[-1]), dtype_of(x))
        lin2 = call(lin.target, (x2, *lin.args[1:]), (rows, out_shape[-1]), dtype_of(lin), lin.kwargs, like=lin)
    q = q_sink(lin)
    if q is None:
        with g.inserting_after(lin2):
            back = call(aten.reshape.default, (lin2, list(out_shape)), out_shape, dtype_of(lin))
        lin.replace_all_uses_with(back)
    else:
        with g.inserting_after(lin2):
            q2 = call(q.target, (lin2, *q.args[1:]), (rows, out_shape[-1]), torch.int8, q.kwargs, like=q)
        with g.inserting_after(q2):
            back = call(aten.reshape.default, (q2, list(out_shape)), out_shape, torch.int8)
        if "vkq_source" in q2.meta:       # PT2E's tensor is the view back, not the 2-D one
            back.meta["vkq_source"] = q2.meta.pop("vkq_source")
        q.replace_all_uses_with(back)
        g.erase_node(q)
    g.erase_node(lin)
    folded = fold_linear(gm, lin2)
    if isinstance(folded, str):       # (lin is gone: the 2-D linear carries the reason)
        reject(lin2, f"{op_name(lin2.target)}: {folded}; runs in float on the CPU")
    return back


def _fold_float_linear(gm, lin, wq, ws, b):
    """linear on a float x with int8 weights: dynamic (per-row int8 x on the device) or
    weight-only, as the quantizer's scheme (node meta) or lower()'s float_linear says."""
    x = dynamic_source(lin.args[0])
    if x is not None:
        op = "linear_dynamic"
    else:
        x = lin.args[0]
        scheme = lin.meta.get("vkq_scheme") or gm.meta.get("vkq_float_linear", "dynamic")
        op = "linear_weight_only" if scheme in ("weight_only", "int4") else "linear_dynamic"
    node = emit(gm, lin, op, [x], {"weight": wq, "w_scale": ws.astype(np.float32),
                                   "bias": b.astype(np.float32)}, {}, shape_of(lin), torch.float32)
    lin.replace_all_uses_with(node)
    return node


def fold_int4_linear(gm, lin: Node, op: str):
    """linear on a float x with a constant float weight, under the int4 schemes: the weight
    quantized in groups along K (vkq.int4.quantize_groups, lower()'s group_size and symmetric)
    -> linear_int4 / linear_8da4w. Any rank of x (its rows flattened by the kernel)."""
    from ..int4 import GroupFormatError, quantize_groups
    from ..ops.linear_int4 import int4_constants, node_attrs
    w = evaluate_constant(gm, lin.args[1])
    if w is None or not w.is_floating_point() or w.dim() != 2:
        return "its weight is not a constant float matrix"
    b = bias(gm, arg(lin, 2, "bias", None), w.shape[0])
    if isinstance(b, str):
        return b
    groups = gm.meta.get("vkq_groups") or {"group_size": 32, "symmetric": True}
    w = w.detach().float().numpy()
    gw = groups.get("known", {}).get(hashlib.sha1(np.ascontiguousarray(w).tobytes()).hexdigest())
    if isinstance(gw, str) and gw == "int8":      # kept int8 by rows (an LM's lm_head: vkq.lm_compile)
        from ..quantizer import quantize_rows
        wq, ws = quantize_rows(w)
        return _fold_float_linear(gm, lin, wq, ws, b)
    try:       # (known: a torchao weight's own groups, vkq.int4.torchao_weights; a GGUF's Q4 / Q8_0 blocks)
        gw = gw if gw is not None and gw.n == w.shape[0] else quantize_groups(w, groups["group_size"],
                                                                                groups["symmetric"])
    except GroupFormatError as e:
        return str(e)
    node = emit(gm, lin, op, [lin.args[0]], int4_constants(gw, b), node_attrs(gw), shape_of(lin), torch.float32)
    lin.replace_all_uses_with(node)
    return node


def unary_table(node: Node, dq: Node, q: Node) -> np.ndarray:
    """lut_q8's table for node = f(dq(x)) quantized by q: f evaluated by torch on the 256
    dequantized int8 values, each step exactly as PT2E's graph does it (quantized_decomposed
    dequantize in float32, the aten op, quantize with round-half-even and clamp)."""
    a, o = q_args(dq), q_args(q)
    ints = torch.arange(-128, 128, dtype=torch.int8)
    xs = qd.dequantize_per_tensor.default(ints, a["scale"], a["zero_point"], -128, 127, torch.int8)
    swap = lambda v: xs if v is dq else v                              # noqa: E731
    args = tuple(swap(v) for v in node.args)
    kwargs = {k: swap(v) for k, v in node.kwargs.items()}
    with torch.no_grad():
        ys = node.target(*args, **kwargs)
        out = qd.quantize_per_tensor.default(ys.to(torch.float32), o["scale"], o["zero_point"],
                                             o["qmin"], o["qmax"], torch.int8)
    return out.numpy().astype(np.int8)


def fold_unary(gm, node: Node):
    x_node = unary_operand(node)
    if x_node is None:
        return "not an elementwise function of one tensor"
    x, q = dq_source(x_node), q_sink(node)
    if x is None or q is None:
        return "input or output is not int8"
    return emit_for_q(gm, q, "lut_q8", [x.node], {"table": unary_table(node, x_node, q)}, {}, hint=node.name)


def fold_binary(gm, node: Node):
    from ..ops.eltwise import add_q8_params, channel_operand, mul_q8_params
    if unary_operand(node) is not None:
        return fold_unary(gm, node)
    if not all(isinstance(v, Node) for v in node.args[:2]):
        return "a scalar operand (the int8 kernels take two int8 tensors)"
    a, b = (dq_source(v) for v in node.args[:2])
    if a is None or b is None:
        return "an operand is not a dequantized int8 tensor"
    if node.kwargs.get("alpha", 1) != 1 or len(node.args) > 2:
        return "alpha != 1 is not supported"
    sa, sb = shape_of(node.args[0]), shape_of(node.args[1])
    is_mul = node.target == aten.mul.Tensor
    if is_mul and channel_operand(sb, sa):
        a, b = b, a                       # the per-channel gate second: mul_q8's broadcast operand
    elif sa != sb and not (is_mul and channel_operand(sa, sb)):
        return f"operands of shapes {sa} and {sb} " \
               "(the int8 kernels need equal shapes, or a (N, C, 1, 1) multiplier)"
    q = q_sink(node)
    if q is None:
        return "output is not quantized to int8"
    out = q_args(q)
    op, params = ("add_q8", add_q8_params) if node.target == aten.add.Tensor else ("mul_q8", mul_q8_params)
    attrs = params(a.scale, a.zero_point, b.scale, b.zero_point, out["scale"], out["zero_point"])
    attrs.update(qmin=out["qmin"], qmax=out["qmax"])
    return emit_for_q(gm, q, op, [a.node, b.node], {}, attrs)


def _int8_nchw_operands(node: Node):
    """(dq source, q sink) of a pooling op on an int8 NCHW tensor, or why not."""
    x, q = dq_source(node.args[0]), q_sink(node)
    if x is None or q is None:
        return "input or output is not int8"
    if len(shape_of(node.args[0])) != 4:
        return "input is not 4-D (N, C, H, W)"
    return x, q


def fold_max_pool(gm, node: Node):
    from ..ops.pool import max_pool2d_params
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    x, q = operands
    kernel = arg(node, 1, "kernel_size", None)
    stride = arg(node, 2, "stride", None) or None
    attrs = max_pool2d_params(kernel, stride, arg(node, 3, "padding", 0), arg(node, 4, "dilation", 1),
                              arg(node, 5, "ceil_mode", False))
    return emit_keeping_qparams(gm, q, "max_pool2d_q8", [x.node], attrs, x)


def fold_adaptive_max_pool(gm, node: Node):
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    x, q = operands
    attrs = {"output_size": [int(v) for v in node.args[1]]}
    return emit_keeping_qparams(gm, q, "adaptive_max_pool2d_q8", [x.node], attrs, x)


def fold_max_unpool(gm, node: Node):
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    v, q = operands
    x = dq_source(node.args[1])
    if x is None:
        return "the pool's input is not int8"
    kernel, stride, padding, dilation, ceil_mode = node.args[2:7]
    attrs = {"kernel": pair(kernel), "stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation),
             "ceil_mode": int(bool(ceil_mode)), "output_size": list(node.args[7]),    # (a size node: symbolic)
             "zero_point": v.zero_point}
    return emit_keeping_qparams(gm, q, "max_unpool2d_q8", [v.node, x.node], attrs, v)


def fold_upsample_bilinear(gm, node: Node):
    from ..ops.resize import bilinear_attrs
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    x, q = operands
    attrs = graph_out_size(bilinear_attrs(node, shape_of(node)), node)
    return emit_keeping_qparams(gm, q, "upsample_bilinear2d", [x.node], attrs, x)


def fold_avg_pool(gm, node: Node):
    from ..ops.pool import avg_pool2d_params
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    x, q = operands
    out = q_args(q)
    attrs = avg_pool2d_params(x.scale, x.zero_point, out["scale"], out["zero_point"],
                              arg(node, 1, "kernel_size", None), arg(node, 2, "stride", None) or None,
                              arg(node, 3, "padding", 0), arg(node, 4, "ceil_mode", False),
                              arg(node, 5, "count_include_pad", True), arg(node, 6, "divisor_override", None))
    attrs.update(qmin=out["qmin"], qmax=out["qmax"])
    return emit_for_q(gm, q, "avg_pool2d_q8", [x.node], {}, attrs)


def fold_adaptive_pool(gm, node: Node):
    from ..ops.pool import adaptive_avg_pool2d_params
    operands = _int8_nchw_operands(node)
    if isinstance(operands, str):
        return operands
    x, q = operands
    out = q_args(q)
    attrs = adaptive_avg_pool2d_params(x.scale, x.zero_point, out["scale"], out["zero_point"],
                                       list(shape_of(node)[2:]))
    attrs.update(qmin=out["qmin"], qmax=out["qmax"])
    return emit_for_q(gm, q, "adaptive_avg_pool2d_q8", [x.node], {}, attrs)


def fold_cat(gm, node: Node):
    from ..ops.cat_q8 import cat_q8_params
    # torch.cat skips 1-D empty tensors whatever the others' rank (an empty KV cache: GPT-2)
    tensors = [t for t in arg(node, 0, "tensors", []) if shape_of(t) != (0,)]
    srcs = [dq_source(t) for t in tensors]
    q = q_sink(node)
    if not srcs or any(s is None for s in srcs) or q is None:
        return "an input or the output is not int8"
    rank = len(shape_of(node))
    if rank > 4:
        return "rank > 4"
    if any(len(shape_of(t)) != rank for t in tensors):
        return "inputs of different ranks"
    dim = int(arg(node, 1, "dim", 0)) % rank
    out = q_args(q)
    attrs = cat_q8_params([(s.scale, s.zero_point) for s in srcs], out["scale"], out["zero_point"], dim)
    if out["qmin"] == INT8_MIN and out["qmax"] == INT8_MAX:
        return emit_for_q(gm, q, "cat_q8", [s.node for s in srcs], {}, attrs)
    joined = emit(gm, q, "cat_q8", [s.node for s in srcs], {}, attrs, shape_of(q),
                  qparams=(out["scale"], out["zero_point"]))
    return clamp_to(gm, joined, (out["scale"], out["zero_point"]), q)


def fold_layer_norm(gm, node: Node):
    """dq x -> layer_norm over the last dim (a multiple of 4 values, rank <= 4) -> q: layer_norm_q8.
    Any other layer norm stays the float op on the device (None: nothing to reject)."""
    x, q = dq_source(node.args[0]), q_sink(node)
    normalized = list(arg(node, 1, "normalized_shape", []))
    if x is None or q is None or len(shape_of(node)) > 4 or len(normalized) != 1 \
            or not isinstance(normalized[0], int) or normalized[0] % 4:
        return None
    d = normalized[0]
    w, b = arg(node, 2, "weight", None), arg(node, 3, "bias", None)
    if not all(v is None or (isinstance(v, Node) and v.op == "get_attr") for v in (w, b)):
        return None
    constants = {**({"weight": np.ones(d, np.float32)} if w is None else {}),
                 **({"bias": np.zeros(d, np.float32)} if b is None else {})}
    out = q_args(q)
    attrs = dict(normalized_shape=[d], eps=float(arg(node, 4, "eps", 1e-5)), x_scale=x.scale, x_zp=x.zero_point,
                 out_scale=out["scale"], out_zp=out["zero_point"], qmin=out["qmin"], qmax=out["qmax"])
    if w is not None and b is not None:
        return emit_for_q(gm, q, "layer_norm_q8", [x.node, w, b], {}, attrs)
    if w is None and b is None:
        return emit_for_q(gm, q, "layer_norm_q8", [x.node], constants, attrs)
    return None       # (one of the two: rare; the float op takes it)


def fold_requantize(gm, q: Node):
    """quantize(dequantize(x)) that did not cancel: rescale and/or clamp on int8."""
    x = dq_source(q.args[0])
    if x is None or q_args(q)["dtype"] != torch.int8:
        return None                      # a plain quantize of a float tensor: nothing to fold
    return clamp_to(gm, x.node, (x.scale, x.zero_point), q)


FOLD_RULES = {
    aten.conv2d.default: fold_conv,
    aten.linear.default: fold_linear,
    aten.add.Tensor: fold_binary,
    aten.mul.Tensor: fold_binary,
    aten.max_pool2d.default: fold_max_pool,
    ADAPTIVE_MAX_POOL2D: fold_adaptive_max_pool,
    MAX_UNPOOL2D: fold_max_unpool,
    aten.avg_pool2d.default: fold_avg_pool,
    aten.adaptive_avg_pool2d.default: fold_adaptive_pool,
    aten.cat.default: fold_cat,
    aten.layer_norm.default: fold_layer_norm,
    aten.upsample_bilinear2d.vec: fold_upsample_bilinear,
    aten.upsample_bilinear2d.default: fold_upsample_bilinear,
    **{t: fold_unary for t in UNARY_ELEMENTWISE - {aten.add.Tensor, aten.mul.Tensor}},
    **{t: fold_requantize for t in QUANTIZE},
}


def _touches_int8(node: Node) -> bool:
    """A dequantize feeds it or a quantize reads it: then why it was not folded is worth saying
    (an op wholly in float gets lower's plain "operands are float" reason)."""
    return any(is_call(a, DEQUANTIZE | DEQUANTIZE_CHANNEL) for a in node.all_input_nodes) \
        or any(is_call(u, QUANTIZE) for u in node.users)


def fold_qdq_patterns(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        rule = FOLD_RULES.get(node.target) if node.op == "call_function" else None
        if rule is None or not node.users:
            continue
        result = rule(gm, node)
        if isinstance(result, str) and _touches_int8(node):
            reject(node, f"{op_name(node.target)}: {result}; runs in float on the CPU")
        elif result is not None:
            changed = True
    return finish(gm, changed)
