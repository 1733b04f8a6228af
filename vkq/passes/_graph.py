"""What every pass shares: op sets for the q/dq spellings, the FX targets that stand for vkq
ops, constants as get_attr buffers, tensor meta (shape, dtype, int8 qparams) and rejections.

Tensor meta: node.meta["val"] holds a tensor (FakeTensor from export, or a meta-device tensor
written by record_shapes / set_val) whose shape and dtype are the node's output. int8 nodes a
pass creates also carry node.meta["vkq_qparams"] = (scale, zero_point).
"""
from __future__ import annotations

import functools
import operator
import re

import numpy as np
import torch
from torch.fx import GraphModule, Node
from torch._subclasses import FakeTensor
from torch.fx.node import map_arg

import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed

QUANTIZE = {qd.quantize_per_tensor.default}
DEQUANTIZE = {qd.dequantize_per_tensor.default}
QUANTIZE_TENSOR = {qd.quantize_per_tensor.tensor, qd.quantize_per_tensor.tensor2}
DEQUANTIZE_TENSOR = {qd.dequantize_per_tensor.tensor, qd.dequantize_per_tensor.tensor2}
DEQUANTIZE_CHANNEL = {qd.dequantize_per_channel.default}
QUANTIZE_CHANNEL = {qd.quantize_per_channel.default}
CHOOSE_QPARAMS = {qd.choose_qparams.tensor}
# Ops that only re-index their input (row-major views): int8 flows through them unchanged.
VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default,
         aten.flatten.using_ints, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
         aten.unsqueeze.default}
PERMUTES = {aten.permute.default, aten.transpose.int, aten.t.default}
# Elementwise functions of one tensor (any other operand a Python number): on an int8 input
# with fixed output qparams each is a 256-entry table (lut_q8). relu / hardtanh / clamp are
# not here: they are a clamp of the int8 range (fuse_activation, clamp_q8).
UNARY_ELEMENTWISE = {getattr(aten, name).default for name in (
    "hardswish", "hardsigmoid", "silu", "sigmoid", "tanh", "gelu", "elu", "leaky_relu", "mish",
    "softplus", "selu", "celu", "hardshrink", "softshrink", "log_sigmoid", "threshold", "logit",
    "exp", "expm1", "log", "log1p", "log2", "abs", "neg", "sqrt", "rsqrt", "reciprocal", "square",
    "sin", "cos", "atan", "sinh", "cosh", "asinh", "erf", "erfc", "sign", "floor", "ceil", "round",
    "trunc", "frac", "tan", "asin", "acos", "acosh", "atanh", "exp2", "log10", "sgn", "deg2rad", "rad2deg",
    "erfinv", "lgamma", "digamma", "special_i0", "i0", "special_i0e", "special_i1", "special_i1e",
    "special_ndtri", "special_erfcx", "polygamma")} | {
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar,
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.pow.Tensor_Scalar}
# Ops that pick elements without changing them: quantize(op(x)) == op(quantize(x)), so int8
# flows through them too (the lowering runs them as gathers, vkq/ops/shape.py).
GATHERS = {aten.slice.Tensor, aten.select.int, aten.expand.default, aten.unflatten.int,
           aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default,
           aten._upsample_nearest_exact2d.vec, aten._upsample_nearest_exact2d.default,
           aten.pixel_shuffle.default, aten.pixel_unshuffle.default}


def is_call(node, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def unary_operand(node) -> Node | None:
    """The one tensor an elementwise function of one tensor reads (x in hardswish(x), x * 0.5,
    pow(x, 3)), or None: node is in UNARY_ELEMENTWISE, every other operand is a number and
    the output has the input's shape."""
    if not is_call(node, UNARY_ELEMENTWISE):
        return None
    operands = [a for a in list(node.args) + list(node.kwargs.values())]
    tensors = [a for a in operands if isinstance(a, Node)]
    if len(tensors) != 1 or any(isinstance(a, (list, tuple, dict)) for a in operands):
        return None
    x = tensors[0]
    vx, vn = val(x), val(node)
    if not (isinstance(vx, torch.Tensor) and isinstance(vn, torch.Tensor)) or vx.shape != vn.shape \
            or not vx.dtype.is_floating_point:
        return None
    return x


def picks_by_constant(node) -> bool:
    """A constant pad, or a gather by constant (get_attr) indices (three_d_as_two_d's taps):
    each output element is an input element or the pad's value, so quantize(op(x)) is
    op(quantize(x)) (the lowering quantizes the pad's value with x's parameters)."""
    if is_call(node, {aten.constant_pad_nd.default}):
        return True
    return is_call(node, {aten.index.Tensor}) and isinstance(node.args[1], (list, tuple)) \
        and all(isinstance(i, Node) and i.op == "get_attr" for i in node.args[1])


def op_name(target) -> str:
    """'aten.layer_norm' for torch.ops.aten.layer_norm.default: what reasons and reports show."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}"
    return getattr(target, "__name__", str(target))


# ------------------------------------------------------------------ vkq ops as FX targets

@functools.lru_cache(maxsize=None)
def vkq_target(name: str):
    """The FX call_function target standing for vkq op `name`: args are its input tensors (int8
    tensors as torch.int8, constants as get_attr nodes), kwargs its attrs. Calling it runs the op's
    numpy reference, so a rewritten graph stays runnable where the ops exist."""
    def run(*args, **attrs):
        from ..registry import get_op
        arrays = [a.detach().numpy() if isinstance(a, torch.Tensor) else a for a in args]
        out = get_op(name).reference(*arrays, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        outs = tuple(torch.from_numpy(np.array(o, order="C", copy=False)) for o in outs)
        return outs if isinstance(out, tuple) else outs[0]
    run.__name__ = run.__qualname__ = f"vkq_{name}"
    run.__module__ = "vkq.ops"
    run.vkq_op = name
    return run


def vkq_op_of(node) -> str | None:
    """The vkq op name a node stands for, or None."""
    if isinstance(node, Node) and node.op == "call_function":
        return getattr(node.target, "vkq_op", None)
    return None


def is_vkq(node, *names) -> bool:
    op = vkq_op_of(node)
    return op is not None and (not names or op in names)


# ------------------------------------------------------------------ tensor meta

def val(node):
    return node.meta.get("val") if isinstance(node, Node) else None


def shape_of(node) -> tuple:
    """node's shape: ints, and on an exported graph with dynamic dims (the quantizer's passes) the
    torch.SymInt of each dynamic dim as it is: int() of one would install a guard that silently
    makes that dim static for the whole model (the batch of EfficientNet did so)."""
    v = val(node)
    if not isinstance(v, torch.Tensor):
        raise ValueError(f"node {node} has no recorded shape (run record_shapes first)")
    return tuple(d if isinstance(d, torch.SymInt) else int(d) for d in v.shape)


def dtype_of(node):
    v = val(node)
    return v.dtype if isinstance(v, torch.Tensor) else None


def set_val(node: Node, shape, dtype) -> Node:
    node.meta["val"] = torch.empty(tuple(shape), dtype=dtype, device="meta")
    return node


def _meta_like(x):
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_meta_like(v) for v in x)
    return x


# meta key: the name of the exported node whose shape this pass-made node has (lift_quantize's
# int8 copies of float views), so that vkq.dynamic finds its symbolic shape
SHAPE_OF = "vkq_shape_of"
# gm.meta key of a dynamic lowering: {exported node name: its symbolic shape} (vkq.dynamic)
SYMBOLIC_SHAPES = "vkq_symbolic_shapes"


def dynamic_size(node: Node, dims=None) -> bool:
    """node's shape has a dynamic dim (among `dims`, default all), though its recorded value (at
    the example) looks static."""
    shape = node.graph.owning_module.meta.get(SYMBOLIC_SHAPES, {}).get(node.name)
    if not isinstance(shape, tuple):
        return False
    return any(isinstance(shape[d], str) for d in (range(len(shape)) if dims is None else dims))


def record_symbolic(node: Node, shape) -> Node:
    """node, a pass's new node (its val holds the example's shape only), with its symbolic shape
    recorded beside the exported nodes' (SYMBOLIC_SHAPES), where the module has them and shape
    is given: vkq.dynamic then need not guess how it follows the inputs."""
    shapes = node.graph.owning_module.meta.get(SYMBOLIC_SHAPES)
    if shapes is not None and shape is not None:
        shapes[node.name] = tuple(shape)
    return node


def size_node(before: Node, x: Node, d: int) -> Node:
    """x's size along d as an integer FX node (aten.sym_size) inserted before `before`: its val
    the example's size, and where that dim is dynamic its expression recorded beside the
    exported nodes' (SYMBOLIC_SHAPES), so that the program computes it at every shape (a rewrite
    that wraps a computed index needs the size)."""
    with before.graph.inserting_before(before):
        node = before.graph.call_function(aten.sym_size.int, (x, d))
    node.meta.update({k: v for k, v in before.meta.items() if k != "val"})
    node.meta["val"] = int(val(x).shape[d])
    shapes = before.graph.owning_module.meta.get(SYMBOLIC_SHAPES)
    shape = shapes.get(x.name) if shapes else None
    if isinstance(shape, tuple) and isinstance(shape[d], str):
        shapes[node.name] = shape[d]
    return node


def graph_out_size(attrs: dict, resize: Node) -> dict:
    """A resize's attrs with out_size the node's own output-size arguments where the graph
    computes them (sizes of dynamic dims: F.interpolate(x, size=image.shape[-2:]) in a
    segmentation head), so the program keeps them symbolic (vkq.lower's Translator reads such
    an FX node as its expression)."""
    size = resize.args[1] if len(resize.args) > 1 else None
    if attrs.get("out_size") is not None and isinstance(size, (list, tuple)) and any(isinstance(v, Node) for v in size):
        attrs["out_size"] = list(size)
    return attrs


def record_shapes(gm: GraphModule, example_inputs) -> None:
    """Run gm once on the example inputs and write every node's output shape/dtype into
    node.meta["val"] (convert_pt2e leaves q/dq nodes without one). Each int8 quantize also gets
    meta["vkq_source"] = its own name: the passes hand that name on to the node that ends up
    holding the same int8 value, so a lowered tensor can be compared with PT2E's."""
    for n in gm.graph.nodes:
        if is_call(n, QUANTIZE):
            n.meta["vkq_source"] = n.name
    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if n.op not in ("output",) and not (n.op == "call_module" and result is None):
                n.meta["val"] = _meta_like(result)
            return result
    with torch.no_grad():
        Recorder(gm).run(*example_inputs)


def qparams(node) -> tuple[float, int] | None:
    """(scale, zero_point) of an int8 activation node: from its quantize op, from what the pass
    that made it wrote, or through the views and CPU ops it passed unchanged."""
    seen = 0
    while isinstance(node, Node) and seen < 1000:
        seen += 1
        if is_call(node, QUANTIZE | DEQUANTIZE):
            return float(node.args[1]), int(node.args[2])
        if "vkq_qparams" in node.meta:
            s, z = node.meta["vkq_qparams"]
            return float(s), int(z)
        if dtype_of(node) == torch.int8 and node.op == "call_function" and node.args \
                and isinstance(node.args[0], Node) and dtype_of(node.args[0]) == torch.int8:
            node = node.args[0]
            continue
        return None
    return None


def q_args(node: Node) -> dict:
    """scale, zero_point, qmin, qmax of a per-tensor quantize/dequantize node."""
    a = list(node.args) + [None] * 6
    kw = node.kwargs
    return {"scale": float(kw.get("scale", a[1])), "zero_point": int(kw.get("zero_point", a[2])),
            "qmin": int(kw.get("quant_min", a[3])), "qmax": int(kw.get("quant_max", a[4])),
            "dtype": kw.get("dtype", a[5])}


# ------------------------------------------------------------------ constants

def const_value(gm: GraphModule, node) -> torch.Tensor | None:
    """The tensor a get_attr node stands for, or None for anything else."""
    if not (isinstance(node, Node) and node.op == "get_attr"):
        return None
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    return obj.detach() if isinstance(obj, torch.Tensor) else None


HOST_FLOAT64 = "vkq_host_float64"   # a get_attr whose float64 value the program keeps as float64


def add_constant(gm: GraphModule, hint: str, value, before: Node) -> Node:
    """Register `value` (numpy or torch) as a buffer of gm and return a get_attr node for it,
    inserted before `before`."""
    t = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value, order="C", copy=False))
    base = "_vkq_" + re.sub(r"[^0-9a-zA-Z_]", "_", hint)
    name, i = base, 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_{i}"
    gm.register_buffer(name, t.detach().clone(memory_format=torch.contiguous_format))     # (its strides: a value's, not a view's)
    with gm.graph.inserting_before(before):
        node = gm.graph.get_attr(name)
    set_val(node, t.shape, t.dtype)
    return node


# ------------------------------------------------------------------ edits

def call_before(node: Node, target, args, kwargs=None) -> Node:
    """A call of target inserted before `node`, with node's meta (its stack traces, its module)
    but its val the op's own result on meta tensors of its operands' vals: a part of a rewrite
    may have another shape or dtype than the node it replaces (a compare, a broadcast operand, a
    view); node's val where the op cannot run on meta tensors."""
    with node.graph.inserting_before(node):
        new = node.graph.call_function(target, tuple(args), kwargs or {})
    new.meta.update(node.meta)
    vals = [val(a) for a in new.all_input_nodes]
    fake = next((v.fake_mode for v in vals if isinstance(v, FakeTensor)), None)
    if fake is None:
        like = _meta_like
    else:       # (before annotation: prepare_pt2e observes only outputs whose val is a FakeTensor)
        like = lambda v: v if not isinstance(v, torch.Tensor) or isinstance(v, FakeTensor) \
            else fake.from_tensor(torch.empty(tuple(v.shape), dtype=v.dtype), static_shapes=True)
    operands = map_arg((tuple(args), kwargs or {}), lambda a: like(val(a)))
    try:
        with torch.no_grad():
            out = target(*operands[0], **operands[1])
        new.meta["val"] = out if fake is not None else _meta_like(out)
    except Exception:       # (an op with no meta kernel: keep the replaced node's val)
        pass
    return new


def reject(node: Node, reason: str) -> None:
    """Record why node stays as it is (it then runs in float on the CPU); the first reason wins."""
    node.meta.setdefault("vkq_reject", reason)


def first_outputs(node: Node) -> list[Node] | None:
    """The getitem-0 users of a node that returns (values, indices) (max pools), when nothing
    reads the indices (a getitem 1 with no users of its own, as export leaves it, is dropped);
    else None."""
    users = [u for u in node.users if not (u.target is operator.getitem and u.args[1] != 0 and not u.users)]
    if not users or not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
        return None
    for u in list(node.users):
        if u not in users:
            node.graph.erase_node(u)
    return users


def replace_each(gm: GraphModule, targets, rewrite) -> bool:
    """Every call of one of `targets` that rewrite(gm, node) returns a replacement for is
    replaced by it and erased; True if any was."""
    changed = False
    for node in list(gm.graph.nodes):
        if is_call(node, targets):
            new = rewrite(gm, node)
            if new is not None:
                node.replace_all_uses_with(new)
                gm.graph.erase_node(node)
                changed = True
    return changed


def finish(gm: GraphModule, changed: bool) -> bool:
    """Common tail of a pass: drop what is dead, regenerate the code."""
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


def lint(gm: GraphModule) -> None:
    """The check run after every pass: FX's own lint, plus every call_function has recorded meta."""
    gm.graph.lint()
    for n in gm.graph.nodes:
        if n.op in ("call_function", "placeholder", "get_attr") and n.users and "val" not in n.meta:
            raise AssertionError(f"node {n.name} ({op_name(n.target)}) lost its tensor meta")


def arg(node: Node, i: int, name: str, default=None):
    """An aten call's argument by position or by keyword."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def pair(v, n: int = 2) -> list:
    """A stride/padding/dilation argument as n ints (one value means all n; n = 3 for 3-D ops)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(x) for x in (v * n if len(v) == 1 else v)]


# ---------------------------------------------------------------- building nodes (the rewrite rules)

def _new(node: Node, target, args, kwargs=None) -> Node:
    with node.graph.inserting_before(node):
        new = node.graph.call_function(target, tuple(args), kwargs or {})
    new.meta.update({k: v for k, v in node.meta.items()})
    return new


def _made(node, target, args, shape, dtype) -> Node:
    """A new node before `node` with the val of (shape, dtype)."""
    return set_val(_new(node, target, args), shape, dtype)


def _in_place_of(users, new) -> Node:
    """new read wherever the getitem-0 users of a tuple-valued node were (first_outputs): its val
    theirs; they are left dead."""
    new.meta["val"] = val(users[0])
    for u in users:
        u.replace_all_uses_with(new)
    return new


def _pair(v, n=2):
    """pair's n values as they are, not made ints (what the rewrite rules pass on to a new node)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v
