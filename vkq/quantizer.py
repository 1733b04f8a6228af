"""VkqQuantizer: the PT2E quantizer for vkq's int8 Vulkan ops.

Schemes
  static       int8 per-output-channel symmetric weights (-127..127, ch_axis 0), int8 per-tensor
               affine activations (-128..127), float bias (the lowering makes the int32 bias
               round(b / (s_x * s_w)) itself). Annotated: conv2d (BN is folded into it by
               prepare_pt2e) and linear, each with an optional fused relu / relu6 / hardtanh
               (one output observer, after the activation); addmm / mm / matmul with a constant
               2-D weight (GPT-2's Conv1D: w is (in, out), quantized per column); add (+relu),
               mul (+relu); standalone batch_norm (after a cat: DenseNet), which
               transform_for_annotation makes a depthwise 1x1 conv (batch_norm_as_conv), so it
               is quantized and lowered as one (conv2d_q8: a per-channel int8 affine);
               elementwise functions of one tensor (hardswish, sigmoid, silu, gelu, x * 0.5, ...:
               vkq.passes._graph.unary_operand; the lowering makes each a 256-entry table);
               averaging ops (avg / adaptive-avg pool, mean), with an output observer of their
               own: on the input's grid a mean of N values lands on a tie (k + 1/2) for 1 in N
               outputs, and PyTorch's float arithmetic breaks such ties either way
               (MobileNetV3's squeeze-excitation pools turned these one-step flips into a cosine
               of 0.97 with PT2E); and ops whose output shares the input's qparams: max pool,
               cat, flatten / view / reshape / squeeze / unsqueeze / permute, standalone
               relu/hardtanh.
  dynamic      linear only (and addmm / mm / matmul by a constant matrix): int8 per-channel weights, activations left float. The lowering turns
               these linears into `linear_dynamic` (the device quantizes x per row), so no
               per-tensor choose_qparams is put in the graph.
  weight_only  linear only: int8 per-channel weights -> `linear_weight_only`.
  int4, 8da4w  linear only, nothing observed: the linears stay float (and so does everything
               else, as under dynamic); the lowering quantizes each constant weight in groups
               along K itself (vkq.int4: int4 values, a scale a group, no second rounding
               through int8) -> `linear_int4` (float x) / `linear_8da4w` (x int8 per row).

dynamic and weight_only produce the same converted graph (float x, dequantized int8 weights);
the scheme is written into each annotated linear's node.meta["vkq_scheme"], which survives
prepare and convert, so the lowering can tell them apart.

Before annotating (transform_for_annotation), recurrent layers (LSTM, GRU, RNN) are unrolled
into their cells' linears and gates (passes/unroll_rnn.py), standalone batch norms become depthwise convs,
3-D convs, pools and batch norms 2-D ones over the frames (N*T, C, H, W) (passes/three_d_as_two_d.py),
1-D convs and pools their 2-D forms on (N, C, 1, L) (passes/one_d_as_two_d.py), transposed
convs a conv and a pixel shuffle (passes/conv_transpose_as_conv.py, under every scheme); under
dynamic and weight_only, a conv whose windows do not overlap (patch embedding, 1x1) a linear over patches
(passes/patch_conv_as_linear.py),
in-place ops become functional (an exported hardswish_ / dropout_ / add_ would otherwise be
observed as aliases of their input), and the spellings the annotators do not know take the form
they do (normalize_ops.normalize_for_annotation: conv padding "same", addcmul, reshape_as).
Annotators are listed in order in ANNOTATORS (fusions before single ops, then the ops that
share their input's qparams and the elementwise ones, in graph order so chains propagate).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import MinMaxObserver, PerChannelMinMaxObserver
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
    SharedQuantizationSpec,
)

from vkq.observer import HistogramObserver  # torchao's, with its min/max search made fast
from vkq.passes.torch_ops import ADAPTIVE_MAX_POOL2D, MAX_UNPOOL2D

aten = torch.ops.aten
SCHEMES = ("static", "dynamic", "weight_only", "int4", "8da4w")
INT4_SCHEMES = ("int4", "8da4w")
# The least scale of activations and weights: float32's epsilon, torch's observer default, not
# XNNPACK's 2^-12 (which keeps its kernels' scale ratios bounded; vkq's fixed point takes any).
# Under 2^-12 a tensor whose range stays within +-2^-13 quantized to one value: MobileNetV5's
# blocks (a layer scale of 1e-5 before a norm) and BEiT's head (weights below 1.2e-4) gave
# all-zero outputs, and weights below 0.03 kept fewer than 8 bits. The int32 bias of a channel
# whose weights are near zero beside it (a batch norm folded with gamma ~ 0) is kept in range
# by the lowering (vkq.quant.fit_bias_to_accumulator).
EPS = 2 ** -23

CONV = {aten.conv2d.default, aten.convolution.default}
LINEAR = {aten.linear.default}
MATMUL = {aten.addmm.default, aten.mm.default, aten.matmul.default}
ADD = {aten.add.Tensor, aten.add_.Tensor}
MUL = {aten.mul.Tensor, aten.mul_.Tensor}
ACTIVATIONS = {aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.hardtanh_.default,
               aten.relu6.default}
# Ops whose int8 output is quantized like their (first) input: no new observer.
SHARE_INPUT = {
    aten.max_pool2d.default, ADAPTIVE_MAX_POOL2D,
    aten.flatten.using_ints, aten.view.default, aten.reshape.default, aten._unsafe_view.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
    aten.permute.default, aten.transpose.int,
    aten.dropout.default, aten.clone.default, aten.contiguous.default,
    # element pickers (slicing, a class token, nearest upsampling): int8 passes through as a gather
    aten.slice.Tensor, aten.select.int, aten.expand.default, aten.unflatten.int,
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default,
    aten._upsample_nearest_exact2d.vec, aten._upsample_nearest_exact2d.default,
    aten.pixel_shuffle.default, aten.pixel_unshuffle.default,
    # bilinear resizing stays within its input's range: one quantization, an int8 kernel
    aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default,
    *ACTIVATIONS,
}
# Averages: an output observer of their own (see the module docstring).
AVERAGES = {aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default, aten.mean.dim, aten.mean.default}
CAT = {aten.cat.default}
# Pools are worth quantizing even when their input is float (a pool right after the model
# input): the input gets its own observer (a max pool's output shares it).
POOLS = {aten.max_pool2d.default, ADAPTIVE_MAX_POOL2D, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
         aten.mean.dim}


def activation_spec(observer: str = "histogram") -> QuantizationSpec:
    ctr = {"histogram": HistogramObserver, "minmax": MinMaxObserver}[observer]
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127,
                            qscheme=torch.per_tensor_affine,
                            observer_or_fake_quant_ctr=ctr.with_args(eps=EPS))


def weight_spec(ch_axis: int = 0) -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=127,
                            qscheme=torch.per_channel_symmetric, ch_axis=ch_axis,
                            observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(eps=EPS))


def quantize_rows(w) -> tuple:
    """float (V, H) -> (int8 (V, H), float32 scale (V,)): each row quantized as the linear-only
    schemes quantize a linear weight's output channel: weight_spec()'s observer made as
    prepare_pt2e makes it (PerChannelMinMaxObserver, symmetric -127..127, the least scale EPS),
    its qparams, and quantized_decomposed.quantize_per_channel, which convert_pt2e folds into the
    weight's int8 constant. So a token embedding tied to its lm_head gets exactly the lm_head's
    int8 weight and scales (vkq.ops.embedding_q8; the program then stores them once). (Not
    vkq.ops.linear.quantize_rows, which quantizes activations per row on the device.)"""
    from torchao.quantization.pt2e.prepare import _create_obs_or_fq_from_qspec
    w = torch.as_tensor(np.asarray(w, dtype=np.float32))
    if w.dim() != 2:
        raise ValueError(f"quantize_rows takes a 2-D (rows, values) matrix, got shape {tuple(w.shape)}")
    spec = weight_spec()
    observer = _create_obs_or_fq_from_qspec(spec, {}, False)
    observer(w)
    scale, zero_point = observer.calculate_qparams()
    q = torch.ops.quantized_decomposed.quantize_per_channel.default(
        w, scale, zero_point, spec.ch_axis, spec.quant_min, spec.quant_max, spec.dtype)
    return q.numpy(), scale.to(torch.float32).numpy()


# ------------------------------------------------------------------ small helpers

def _is(node, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _annotated(node: Node) -> bool:
    a = node.meta.get("quantization_annotation")
    return a is not None and a._annotated


def _annotate(node: Node, inputs=None, output=None) -> None:
    node.meta["quantization_annotation"] = QuantizationAnnotation(
        input_qspec_map=dict(inputs or {}), output_qspec=output, _annotated=True)


def _is_float_tensor(node) -> bool:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def _has_output_spec(node) -> bool:
    return _annotated(node) and node.meta["quantization_annotation"].output_qspec is not None


def _sole_activation_user(node: Node):
    """The relu/relu6/hardtanh that is node's only user, or None."""
    users = list(node.users)
    if len(users) == 1 and _is(users[0], ACTIVATIONS) and not _annotated(users[0]):
        return users[0]
    return None


# ------------------------------------------------------------------ annotators (static)

def annotate_weighted(gm: GraphModule, act: QuantizationSpec) -> None:
    """conv2d / linear [+ relu / relu6 / hardtanh]: x and weight observed, bias float, one
    output observer after the fused activation."""
    for node in gm.graph.nodes:
        if not _is(node, CONV | LINEAR) or _annotated(node):
            continue
        x, w = node.args[0], node.args[1]
        fused = _sole_activation_user(node)
        inputs = {x: act, w: weight_spec()}
        if fused is None:
            _annotate(node, inputs, act)
        else:
            _annotate(node, inputs)
            _annotate(fused, output=act)


def _constant_matrix(node) -> bool:
    """A 2-D parameter, possibly transposed (t / permute of a get_attr)."""
    while _is(node, {aten.t.default, aten.permute.default, aten.transpose.int}):
        node = node.args[0]
    return isinstance(node, Node) and node.op == "get_attr" and isinstance(node.meta.get("val"), torch.Tensor) \
        and node.meta["val"].dim() == 2


def _matmul_weight(node) -> Node | None:
    """w of addmm(b, x, w) / mm(x, w) / matmul(x, w) with x float and w a constant (in, out)
    matrix: a linear layer (GPT-2's Conv1D); else None."""
    if not _is(node, MATMUL) or not (_is_float_tensor(node.args[-2]) and _constant_matrix(node.args[-1])):
        return None
    if node.target == aten.addmm.default and (node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1):
        return None
    return node.args[-1]


def annotate_matmul(gm: GraphModule, act: QuantizationSpec) -> None:
    """A matmul by a constant matrix (_matmul_weight): w is observed per output channel, i.e.
    along its axis 1."""
    for node in gm.graph.nodes:
        w = _matmul_weight(node)
        if w is None or _annotated(node):
            continue
        x = node.args[-2]
        fused = _sole_activation_user(node)
        inputs = {x: act, w: weight_spec(ch_axis=1)}
        if fused is None:
            _annotate(node, inputs, act)
        else:
            _annotate(node, inputs)
            _annotate(fused, output=act)


def annotate_binary(gm: GraphModule, act: QuantizationSpec) -> None:
    """add [+ relu] and mul [+ relu] of two float tensors (a scalar operand: not annotated,
    the op then runs in float)."""
    for node in gm.graph.nodes:
        if not _is(node, ADD | MUL) or _annotated(node):
            continue
        a, b = node.args[0], node.args[1]
        if not (_is_float_tensor(a) and _is_float_tensor(b)):
            continue
        if len(node.args) > 2 or node.kwargs.get("alpha", 1) != 1:
            continue
        fused = _sole_activation_user(node)
        fused = fused if fused is not None and fused.target in (aten.relu.default, aten.relu_.default) else None
        inputs = {a: act, b: act}
        if fused is None:
            _annotate(node, inputs, act)
        else:
            _annotate(node, inputs)
            _annotate(fused, output=act)


def annotate_cat(gm: GraphModule, act: QuantizationSpec) -> None:
    """cat: every input and the output share the first input's qparams. A cat of parameters
    alone (WavLM's q/k/v biases, joined for one in-projection) is a constant the lowering folds,
    not an activation: left float (quantized, it made the linear's bias per-tensor int8)."""
    for node in gm.graph.nodes:
        if not _is(node, CAT) or _annotated(node):
            continue
        tensors = node.args[0]
        if not tensors or not all(_is_float_tensor(t) for t in tensors) or all(t.op == "get_attr" for t in tensors):
            continue
        first = tensors[0]
        shared = SharedQuantizationSpec((first, node))
        inputs = {first: SharedQuantizationSpec(first) if _has_output_spec(first) else act}
        for t in tensors[1:]:
            inputs.setdefault(t, shared)
        _annotate(node, inputs, shared)


def _zero_pad_or_constant_gather(node: Node) -> bool:
    """A pad with zeros (0.0 is exact on every int8 grid PT2E makes; another value could fall
    outside x's range) or a gather by constant indices: its output shares x's quantization."""
    from .passes._graph import picks_by_constant
    return picks_by_constant(node) and not (node.target == aten.constant_pad_nd.default and len(node.args) > 2
                                            and node.args[2] != 0)


def annotate_single_input(gm: GraphModule, act: QuantizationSpec) -> None:
    """In graph order, so that chains propagate:
      max pool, views, standalone relu/hardtanh: output quantized like the input;
      vkq.max_unpool2d(v, x): output quantized like v, where v and x are quantized;
      averages (pools, mean): the input observed as it is, the output observed anew;
      elementwise functions of one tensor: the same, where the input is quantized.
    Where the input is not quantized, only pools are (input observed); views, activations
    and functions of float tensors stay float."""
    from .passes._graph import unary_operand
    for node in gm.graph.nodes:
        if _annotated(node) or node.op != "call_function":
            continue
        if _is(node, {MAX_UNPOOL2D}):
            # v's values placed where x's window maxima were: v's quantization out, x's read as it is
            v, x = node.args[:2]
            if _has_output_spec(v) and _has_output_spec(x):
                _annotate(node, {v: SharedQuantizationSpec(v), x: SharedQuantizationSpec(x)}, SharedQuantizationSpec(v))
            continue
        if _is(node, SHARE_INPUT | AVERAGES) or _zero_pad_or_constant_gather(node):
            x = node.args[0]
            if not (_has_output_spec(x) or (_is(node, POOLS) and _is_float_tensor(x))):
                continue
            x_spec = SharedQuantizationSpec(x) if _has_output_spec(x) else act
            if _is(node, AVERAGES):
                _annotate(node, {x: x_spec}, act)
            elif _has_output_spec(x):
                _annotate(node, {x: x_spec}, SharedQuantizationSpec(x))
            else:
                _annotate(node, {x: act}, SharedQuantizationSpec((x, node)))
            continue
        x = unary_operand(node)
        if x is not None and _has_output_spec(x) and _is_float_tensor(node):
            _annotate(node, {x: SharedQuantizationSpec(x)}, act)


STATIC_ANNOTATORS = [annotate_weighted, annotate_matmul, annotate_binary, annotate_cat,
                     annotate_single_input]


# ------------------------------------------------------------------ before annotating

def batch_norm_as_conv(gm: GraphModule) -> bool:
    """Each eval-mode batch_norm left in the graph (prepare_pt2e has folded those after a conv;
    these follow a cat, a pool, an add; BatchNorm1d on (N, C) or (N, C, L) too, viewed as
    (N, C, 1, 1) / (N, C, 1, L) around the conv) -> conv2d(x, a, b, groups=C) with
    a = gamma / sqrt(var + eps) as a (C, 1, 1, 1) weight and b = beta - mean * a: the same
    function, quantized as a conv. Per-channel symmetric int8 represents a one-element channel
    exactly (+-127 at scale |a| / 127), so the int8 op is an exact per-channel multiplier and
    int32 bias. A batch norm of constants (BiT's weight-standardized convs normalise their weights
    in training mode) becomes its value. Both spare convert_pt2e its QAT conv-bn folding, which
    re-exports ~100 patterns (LeViT, BiT: 10-20 s here) whenever a batch_norm is left in the graph."""
    from .passes._graph import add_constant, const_value
    from .passes.fold_constants import evaluate_constant
    changed = False
    for node in list(gm.graph.nodes):
        if not _is(node, {aten.batch_norm.default}):
            continue
        folded = evaluate_constant(gm, node)
        if folded is not None:      # a batch norm of constants (BiT's weight standardization): its value
            out = add_constant(gm, "bn_constant", folded.contiguous(), node)
            node.replace_all_uses_with(out)
            gm.graph.erase_node(node)
            changed = True
            continue
        x = node.args[0]
        val = x.meta.get("val") if isinstance(x, Node) else None
        if not isinstance(val, torch.Tensor) or val.dim() not in (2, 3, 4) or node.args[5]:
            continue
        c = val.shape[1]
        w, b, mean, var = (const_value(gm, a) for a in node.args[1:5])
        if mean is None or var is None or (node.args[1] is not None and w is None) \
                or (node.args[2] is not None and b is None):
            continue
        w = torch.ones(c) if w is None else w.float()
        b = torch.zeros(c) if b is None else b.float()
        scale = w / torch.sqrt(var.float() + float(node.args[7]))
        shift = b - mean.float() * scale
        _as_depthwise_1x1(gm, node, x, val, scale, shift)
        changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


def _view_sizes(shape) -> list:
    """A view's sizes: a dynamic dim (a torch.SymInt: its name is no value in the graph's code,
    RepViT's BatchNorm1d head at a free batch failed so) as -1 (the channels are static)."""
    return [-1 if isinstance(d, torch.SymInt) else int(d) for d in shape]


def _as_depthwise_1x1(gm: GraphModule, node: Node, x: Node, val, scale, shift, hint: str = "bn") -> None:
    """Replace node by conv2d(x, scale as a (C, 1, 1, 1) weight, shift, groups=C): a per-channel
    affine of x (N, C[, L[, W]]), viewed as 4-D around the conv."""
    c = val.shape[1]
    names = []
    for suffix, value in (("weight", scale.reshape(c, 1, 1, 1)), ("bias", shift)):
        name, i = f"_vkq_{hint}_conv_{suffix}", 0
        while hasattr(gm, f"{name}_{i}"):
            i += 1
        gm.register_parameter(f"{name}_{i}", torch.nn.Parameter(value.contiguous(), requires_grad=False))
        names.append(f"{name}_{i}")
    with gm.graph.inserting_before(node):
        consts = []
        for n, value in zip(names, (scale.reshape(c, 1, 1, 1), shift)):
            g = gm.graph.get_attr(n)
            g.meta["val"] = value
            consts.append(g)
        if val.dim() == 3:     # (N, C, L) as (N, C, 1, L), as one_d_as_two_d views it
            x4 = gm.graph.call_function(aten.unsqueeze.default, (x, 2))
            val4 = val.unsqueeze(2)
        else:
            shape4 = tuple(val.shape) + (1,) * (4 - val.dim())
            x4 = x if val.dim() == 4 else gm.graph.call_function(aten.view.default, (x, _view_sizes(shape4)))
            val4 = val.reshape(shape4)
        if x4 is not x:
            x4.meta["val"] = val4
        conv = gm.graph.call_function(aten.conv2d.default, (x4, *consts, [1, 1], [0, 0], [1, 1], c))
        conv.meta.update(node.meta)
        conv.meta["val"] = val4
        if val.dim() == 3:
            out = gm.graph.call_function(aten.squeeze.dim, (conv, 2))
        else:
            out = conv if val.dim() == 4 else gm.graph.call_function(aten.view.default, (conv, _view_sizes(val.shape)))
    out.meta.update(node.meta)
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


def _channel_scale(gm: GraphModule, node: Node):
    """(x, s as a (C,) vector) where node is x * s or s * x, s a constant of one value per
    channel of x (dim 1 of a 4-D x, else its last dim) that leaves x's shape as it is; else None.
    s may be a view of a parameter (timm's LayerScale2d: gamma.view(1, -1, 1, 1))."""
    from .passes.fold_constants import evaluate_constant
    if not _is(node, MUL) or len(node.args) != 2:
        return None
    for x, s in (node.args, node.args[::-1]):
        v = x.meta.get("val") if isinstance(x, Node) else None
        scale = evaluate_constant(gm, s) if isinstance(s, Node) else None
        if not isinstance(v, torch.Tensor) or scale is None or not v.is_floating_point() or v.dim() < 2 \
                or tuple(getattr(node.meta.get("val"), "shape", ())) != tuple(v.shape):
            continue
        c = v.shape[1] if v.dim() == 4 else v.shape[-1]
        want = [1] * v.dim()
        want[1 if v.dim() == 4 else -1] = c
        if isinstance(c, int) and c > 1 and scale.numel() == c \
                and [1] * (v.dim() - scale.dim()) + list(scale.shape) == want:
            return x, scale.float().reshape(c)
    return None


def channel_scale_into_producer(gm: GraphModule) -> bool:
    """x * s, s one constant per channel of x, where x is read by this mul alone and made by an op
    with a per-channel weight: a linear or conv2d (its weight's output channels and bias), a
    layer / RMS norm over those channels (its weight and bias; also when permuted back to
    channels first: a 2-D norm), a batch norm, or another such mul (the two scales' product)
    -> that op with its weight scaled. Exact; its weight is quantized per channel (a conv's,
    a linear's) or stays float (a norm's), where the mul's constant, quantized as an activation,
    lost the channels of small scales (timm's LayerScale, 1e-5 at init: all of them, and the
    block's output was 0; MobileNetV5's RMS norm weight then layer scale)."""
    changed, again = False, True
    while again:
        again = False
        for node in list(gm.graph.nodes):
            found = _channel_scale(gm, node)
            if found is not None and _readers(found[0]) == 1 and _scale_producer(gm, *found):
                node.replace_all_uses_with(found[0])
                gm.graph.erase_node(node)
                changed = again = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


# per-channel weight and bias: (position, name) of each, or None
WEIGHTS = {aten.linear.default: ((1, "weight"), (2, "bias")), aten.conv2d.default: ((1, "weight"), (2, "bias")),
           aten.layer_norm.default: ((2, "weight"), (3, "bias")), aten.rms_norm.default: ((2, "weight"), None),
           aten.batch_norm.default: ((1, "weight"), (2, "bias"))}


def _scale_producer(gm: GraphModule, x: Node, scale: torch.Tensor) -> bool:
    """Scale the per-channel weight (and bias) of the op that makes x by `scale`; False where x's
    maker is none of channel_scale_into_producer's."""
    from .passes._graph import arg, const_value
    c = scale.numel()
    v = x.meta["val"]
    while _is(x, {aten._to_copy.default, aten.to.dtype}) and _readers(x.args[0]) == 1 \
            and x.args[0].meta.get("val") is not None and x.args[0].meta["val"].dtype == v.dtype:
        x = x.args[0]           # (a cast to the dtype it has: LLaMA's norm casts its result back)
    op = x.args[0] if _is(x, {aten.permute.default}) and list(x.args[1]) == [0, 3, 1, 2] and _readers(x.args[0]) == 1 \
        else x
    norm = _is(op, {aten.layer_norm.default, aten.rms_norm.default})
    if op is not x and not norm:
        return False
    if _is(op, MUL):
        inner = _channel_scale(gm, op)
        if inner is None or inner[1].numel() != c or inner[0].meta["val"].dim() != v.dim():
            return False
        _replace_arg(gm, op, ([a is not inner[0] for a in op.args].index(True), None), (inner[1] * scale).reshape(
            [c if d == (1 if v.dim() == 4 else v.dim() - 1) else 1 for d in range(v.dim())]))
        return True
    if not _is(op, set(WEIGHTS)):
        return False
    # the channel the scale is on must be the one the weight is per: dim 1 of a conv's or a batch
    # norm's 4-D output, the last of a linear's and a norm's (channels first again: permuted)
    if (v.dim() == 4) != (op.target in (aten.conv2d.default, aten.batch_norm.default) or op is not x):
        return False
    if op.target == aten.batch_norm.default and arg(op, 5, "training", False):
        return False
    if norm and list(op.args[1]) != [c]:
        return False
    slots = WEIGHTS[op.target]
    w, b = arg(op, *slots[0]), arg(op, *slots[1]) if slots[1] else None
    wv, bv = const_value(gm, w) if w is not None else None, const_value(gm, b) if b is not None else None
    if (w is not None and wv is None) or (b is not None and bv is None) or (wv is not None and wv.shape[0] != c):
        return False
    if wv is None and op.target in (aten.linear.default, aten.conv2d.default):
        return False
    weight = (torch.ones(c) if wv is None else wv.float()) * scale.reshape(-1, *[1] * (0 if wv is None else wv.dim() - 1))
    _replace_arg(gm, op, slots[0], weight.to(wv.dtype if wv is not None else torch.float32))
    if bv is not None:
        _replace_arg(gm, op, slots[1], (bv.float() * scale).to(bv.dtype))
    elif op.target == aten.batch_norm.default:
        _replace_arg(gm, op, slots[1], torch.zeros(c))
    return True


def _readers(node: Node) -> int:
    """node's users but export's metadata asserts (drop_guards removes those later)."""
    from .passes.drop_guards import ASSERTS
    return sum(u.target not in ASSERTS for u in node.users)


def _replace_arg(gm: GraphModule, node: Node, slot: tuple, value: torch.Tensor) -> None:
    """node's argument at slot ((position, keyword name)) -> a new parameter holding value (the
    old may be shared: it stays)."""
    i, keyword = slot
    name, k = "_vkq_scaled", 0
    while hasattr(gm, f"{name}_{k}"):
        k += 1
    gm.register_parameter(f"{name}_{k}", torch.nn.Parameter(value.contiguous(), requires_grad=False))
    with gm.graph.inserting_before(node):
        g = gm.graph.get_attr(f"{name}_{k}")
    g.meta["val"] = value
    if keyword in node.kwargs:
        node.kwargs = {**node.kwargs, keyword: g}
        return
    args = list(node.args) + [None] * (i + 1 - len(node.args))
    args[i] = g
    node.args = tuple(args)


def channel_scale_as_conv(gm: GraphModule) -> bool:
    """x * s, s a constant of one value per channel of a 4-D x (ConvNeXt's layer scale, a
    (C, 1, 1) parameter) -> the depthwise 1x1 conv batch_norm_as_conv makes (no bias): quantized
    as a conv, an exact per-channel multiplier, where a float mul between a dequantize and a
    quantize cost three passes over the activation; and the residual add after it folds into
    the conv's epilogue (fuse_epilogue)."""
    changed = False
    for node in list(gm.graph.nodes):
        found = _channel_scale(gm, node)
        if found is not None and found[0].meta["val"].dim() == 4:
            x, scale = found
            _as_depthwise_1x1(gm, node, x, x.meta["val"], scale, torch.zeros(scale.numel()), "scale")
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


# ------------------------------------------------------------------ annotators (weights only)

def annotate_linear_weights(gm: GraphModule, scheme: str) -> None:
    """linear, and addmm / mm / matmul by a constant (in, out) matrix (GPT-2's Conv1D, observed
    along its axis 1 as annotate_matmul does): only the weight is observed (int8 per output
    channel); x and the output stay float."""
    for node in gm.graph.nodes:
        if _annotated(node):
            continue
        if _is(node, LINEAR):
            _annotate(node, {node.args[1]: weight_spec()})
        elif _matmul_weight(node) is not None:
            _annotate(node, {_matmul_weight(node): weight_spec(ch_axis=1)})
        else:
            continue
        node.meta["vkq_scheme"] = scheme


def mark_linears(gm: GraphModule, scheme: str) -> None:
    """The int4 schemes: the linears annotate_linear_weights would take get the scheme in their
    meta and no observer (the lowering quantizes their float weights in groups)."""
    for node in gm.graph.nodes:
        if not _annotated(node) and (_is(node, LINEAR) or _matmul_weight(node) is not None):
            node.meta["vkq_scheme"] = scheme


class VkqQuantizer(Quantizer):
    """PT2E quantizer for vkq. VkqQuantizer("static"), ("dynamic") or ("weight_only");
    observer="histogram" (default) or "minmax" for activations."""

    def __init__(self, scheme: str = "static", observer: str = "histogram"):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; expected one of {SCHEMES}")
        self.scheme = scheme
        self.observer = observer

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        from .passes.normalize_ops import normalize_for_annotation
        from .passes.conv_transpose_as_conv import conv_transpose_as_conv
        from .passes.one_d_as_two_d import CONV_T_1D, one_d_as_two_d
        from .passes.patch_conv_as_linear import patch_conv3d_as_linear, patch_conv_as_linear
        from .passes.three_d_as_two_d import three_d_as_two_d
        from .passes.unroll_rnn import unroll_rnn
        unroll_rnn(model)                           # (LSTM / GRU / RNN cells: linears and gates)
        normalize_for_annotation(model)
        if self.scheme == "static":
            patch_conv3d_as_linear(model)           # (a video's tubelet embedding: a linear)
            three_d = three_d_as_two_d(model)       # (the other 3-D convs, pools, batch norms: over frames)
            batch_norm_as_conv(model)
            channel_scale_into_producer(model)      # (a layer scale: into the linear / conv before it,
            channel_scale_as_conv(model)            # else the same depthwise 1x1 conv)
            one_d = one_d_as_two_d(model)           # (conv_transpose1d -> conv_transpose2d: before the next)
            conv_transpose_as_conv(model)
            if one_d or three_d:
                normalize_for_annotation(model)     # conv1d's and conv3d's string padding, now conv2d's
        else:       # these schemes quantize linears only; a transposed conv's phase conv runs in float
            patch_conv_as_linear(model)             # (before three_d_as_two_d: a tubelet embedding, a linear)
            three_d_as_two_d(model, separable=True)     # (a float conv2d and pools have kernels; conv3d none)
            batch_norm_as_conv(model)               # (a float conv: spares convert_pt2e's QAT folding)
            one_d_as_two_d(model, CONV_T_1D)        # (a float conv1d has a kernel as it is; a transposed one not)
            conv_transpose_as_conv(model)           # (or, 1x1 where kernel = stride, as a linear)
            patch_conv_as_linear(model)
        return model

    def annotate(self, model: GraphModule) -> GraphModule:
        if self.scheme == "static":
            act = activation_spec(self.observer)
            for annotator in STATIC_ANNOTATORS:
                annotator(model, act)
        elif self.scheme in INT4_SCHEMES:
            mark_linears(model, self.scheme)
        else:
            annotate_linear_weights(model, self.scheme)
        return model

    def validate(self, model: GraphModule) -> None:
        pass
