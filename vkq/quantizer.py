"""VkqQuantizer: the PT2E quantizer for vkq's int8 Vulkan ops.

Schemes
  static       int8 per-output-channel symmetric weights (-127..127, ch_axis 0), int8 per-tensor
               affine activations (-128..127), float bias (the lowering makes the int32 bias
               round(b / (s_x * s_w)) itself). Annotated: conv2d (BN is folded into it by
               prepare_pt2e) and linear, each with an optional fused relu / relu6 / hardtanh
               (one output observer, after the activation); add (+relu), mul (+relu); and ops
               whose output shares the input's qparams: max/avg/adaptive-avg pool, mean, cat,
               flatten / view / reshape / squeeze / unsqueeze / permute, standalone relu/hardtanh.
  dynamic      linear only: int8 per-channel weights, activations left float. The lowering turns
               these linears into `linear_dynamic` (the device quantizes x per row), so no
               per-tensor choose_qparams is put in the graph.
  weight_only  linear only: int8 per-channel weights -> `linear_weight_only`.

dynamic and weight_only produce the same converted graph (float x, dequantized int8 weights);
the scheme is written into each annotated linear's node.meta["vkq_scheme"], which survives
prepare and convert, so the lowering can tell them apart.

Annotators are listed in order in ANNOTATORS (fusions before single ops, then the ops that
share their input's qparams, in graph order so chains propagate).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
    SharedQuantizationSpec,
)

aten = torch.ops.aten
SCHEMES = ("static", "dynamic", "weight_only")
EPS = 2 ** -12

CONV = {aten.conv2d.default, aten.convolution.default}
LINEAR = {aten.linear.default}
ADD = {aten.add.Tensor, aten.add_.Tensor}
MUL = {aten.mul.Tensor, aten.mul_.Tensor}
ACTIVATIONS = {aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.hardtanh_.default,
               aten.relu6.default}
# Ops whose int8 output is quantized like their (first) input: no new observer.
SHARE_INPUT = {
    aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
    aten.mean.dim, aten.mean.default,
    aten.flatten.using_ints, aten.view.default, aten.reshape.default, aten._unsafe_view.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
    aten.permute.default, aten.transpose.int,
    aten.dropout.default, aten.clone.default, aten.contiguous.default,
    # element pickers (slicing, a class token, nearest upsampling): int8 passes through as a gather
    aten.slice.Tensor, aten.select.int, aten.expand.default, aten.unflatten.int,
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default,
    # bilinear resizing stays within its input's range: one quantization, an int8 kernel
    aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default,
    *ACTIVATIONS,
}
CAT = {aten.cat.default}
# Of those, ops worth quantizing even when their input is float (a pool right after the model
# input): the input gets its own observer, the output shares it.
POOLS = {aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
         aten.mean.dim}


def activation_spec(observer: str = "histogram") -> QuantizationSpec:
    ctr = {"histogram": HistogramObserver, "minmax": MinMaxObserver}[observer]
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127,
                            qscheme=torch.per_tensor_affine,
                            observer_or_fake_quant_ctr=ctr.with_args(eps=EPS))


def weight_spec() -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=127,
                            qscheme=torch.per_channel_symmetric, ch_axis=0,
                            observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(eps=EPS))


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
    """cat: every input and the output share the first input's qparams."""
    for node in gm.graph.nodes:
        if not _is(node, CAT) or _annotated(node):
            continue
        tensors = node.args[0]
        if not tensors or not all(_is_float_tensor(t) for t in tensors):
            continue
        first = tensors[0]
        shared = SharedQuantizationSpec((first, node))
        inputs = {first: SharedQuantizationSpec(first) if _has_output_spec(first) else act}
        for t in tensors[1:]:
            inputs.setdefault(t, shared)
        _annotate(node, inputs, shared)


def annotate_shared(gm: GraphModule, act: QuantizationSpec) -> None:
    """pools, mean, views, standalone activations: output quantized like the input. Where the
    input is not quantized, only pools are (input observed, output shared); views and
    activations of float tensors stay float."""
    for node in gm.graph.nodes:
        if not _is(node, SHARE_INPUT) or _annotated(node):
            continue
        x = node.args[0]
        if _has_output_spec(x):
            shared = SharedQuantizationSpec(x)
            _annotate(node, {x: shared}, shared)
        elif _is(node, POOLS) and _is_float_tensor(x):
            _annotate(node, {x: act}, SharedQuantizationSpec((x, node)))


STATIC_ANNOTATORS = [annotate_weighted, annotate_binary, annotate_cat, annotate_shared]


# ------------------------------------------------------------------ annotators (weights only)

def annotate_linear_weights(gm: GraphModule, scheme: str) -> None:
    """linear: only the weight is observed (int8 per channel); x and the output stay float."""
    for node in gm.graph.nodes:
        if not _is(node, LINEAR) or _annotated(node):
            continue
        _annotate(node, {node.args[1]: weight_spec()})
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

    def annotate(self, model: GraphModule) -> GraphModule:
        if self.scheme == "static":
            act = activation_spec(self.observer)
            for annotator in STATIC_ANNOTATORS:
                annotator(model, act)
        else:
            annotate_linear_weights(model, self.scheme)
        return model

    def validate(self, model: GraphModule) -> None:
        pass
