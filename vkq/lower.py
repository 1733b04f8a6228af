"""FX -> Program: run the pass pipeline on a converted PT2E graph, then translate node by node.

    program = lower(converted_gm, (x,))

The Program's inputs are the model's float inputs (its first node quantizes them) and its
outputs are float (a final dequantize, or linear_q8_fout when the last op is a linear).
Translation is one rule per kind of FX node:
  placeholder -> program input (float32);  get_attr -> constant;  output -> program outputs
  vkq op (from the passes)        -> that op, its kwargs as attrs
  quantize / dequantize per tensor -> quantize / dequantize (Vulkan)
  anything else                   -> a rule of vkq.aten_rules: a float32 op with a Vulkan shader
                                     (vkq.ops.float) or a CPU op (vkq.ops.cpu), else the generic
                                     torch_op; what runs on the CPU is recorded in
                                     program.fallback as (aten op, reason)
Then reshape/permute copies around float matmuls fold into strided matmuls, attention's scale
and mask into its softmax, and CPU nodes that
need nothing from the device move to the front (schedule_host_first): an encoder's embedding
gather and attention-mask arithmetic run before its one Vulkan segment.
The converted GraphModule passed in is not modified (the passes work on a copy).
"""
from __future__ import annotations

import copy
import warnings
import hashlib
import operator

import numpy as np
import torch
from torch.fx import GraphModule, Node

from . import dynamic
from .aten_rules import CPU_RULES, RULES_BY_NAME, fallback_reason
from .passes import run_pipeline
from .passes.functionalize import STATE, functionalize_inplace
from .passes._graph import (DEQUANTIZE, HOST_FLOAT64, QUANTIZE, SYMBOLIC_SHAPES, const_value, dtype_of, is_call,
                            op_name, q_args, qparams, record_shapes, shape_of, val, vkq_op_of)
from .passes.assign_layouts import KEY as LAYOUT_KEY, default_layout, rank_layout
from .passes.int8_embeddings import KEY as INT8_EMBEDDINGS
from .program import Node as PNode, Program, TensorSpec
from .progress import done, stage
from .int4 import GROUP_SIZES, GroupFormatError
from .rewrites import rewrite_for_shapes
from .registry import cpu_reason, get_op


def lower(gm: GraphModule, example_inputs, *, float_linear: str = "dynamic", report: dict | None = None,
          dynamic_shapes=None, static: bool = False, progress: bool = False,
          int8_embeddings: bool = False, group_size: int = 32, symmetric: bool = True,
          known_groups: dict | None = None) -> Program:
    """Lower a converted PT2E GraphModule to a Program. float_linear ("dynamic" or
    "weight_only") says what a linear with a float input and int8 weights becomes when the
    quantizer did not say (graphs from other quantizers); "int4" or "8da4w": every linear with
    a constant float weight (the int4 schemes leave them float) becomes linear_int4 /
    linear_8da4w, its weight quantized in groups of group_size along K (vkq.int4.quantize_groups,
    symmetric or with a zero point a group); known_groups: {sha1 of a float32 weight's bytes:
    vkq.int4.GroupWeights} whose integers such a weight keeps (vkq.int4.torchao_weights). A graph exported with dynamic dims
    gives a symbolic Program (vkq.dynamic), unless static=True (a program for the example
    inputs' shapes only); dynamic_shapes (what was given to torch.export) gives the dims'
    names and bounds. progress: a bar over the passes and a line for each later stage, on stderr.
    int8_embeddings: an embedding of a float constant table becomes embedding_q8rows of its int8
    rows (vkq/passes/int8_embeddings.py; a table tied to a linear weight is stored once), under
    every scheme; off: the float table and gather."""
    try:
        if float_linear in ("int4", "8da4w") and group_size not in GROUP_SIZES:
            raise GroupFormatError(f"group size {group_size}: expected one of {GROUP_SIZES}")
        groups = {"group_size": int(group_size), "symmetric": bool(symmetric), "known": known_groups or {}}
        options = {"vkq_float_linear": float_linear, INT8_EMBEDDINGS: bool(int8_embeddings), "vkq_groups": groups}
        return _lower(gm, example_inputs, options, report, dynamic_shapes, static, progress)
    finally:
        if progress:
            done()


def _lower(gm, example_inputs, options, report, dynamic_shapes, static, progress) -> Program:
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    fakes = None if static else dynamic.input_fake_values(gm)
    if fakes is None:
        return _lower_at(gm, example_inputs, options, report, progress="lowering" if progress else None)[0]
    shapes, bounds = dynamic.symbolic_shapes(gm, fakes)
    bounds, names = dynamic.user_bounds(gm, shapes, bounds, dynamic_shapes)
    exprs = {k: v for k, v in shapes.items() if not isinstance(v, tuple)}
    program, lowered = _lower_at(gm, example_inputs, options, report, exprs, dynamic_graph=True, shapes=shapes,
                                 progress="lowering" if progress else None)
    if progress:
        stage("making the program's shapes symbolic")
    dyn = dynamic.symbolize(program, lowered, shapes, bounds, names)
    dyn.checks = dynamic.export_guards(fakes, dyn.symbols)
    dyn.validate()
    example = dyn.bind([tuple(x.shape) for x in example_inputs])
    probe = dynamic.probe_bindings(dyn.symbols, example, dyn.checks)
    if probe != example:
        probe_inputs = tuple(_resized(x, dyn.tensors[name].shape, probe) for x, name in zip(example_inputs, dyn.inputs))
        try:
            at_probe = _lower_at(gm, probe_inputs, options, None, dynamic_graph=True, shapes=shapes,
                                 progress="lowering at a second size (to check the dynamic program)" if progress else None)[0]
        except AssertionError as e:         # export's _guards_fn: the graph holds where a guard does
            if "Guard failed" not in str(e):
                raise
            raise dynamic.DynamicShapeError(
                f"torch.export's graph holds only where {str(e).splitlines()[0].removeprefix('Guard failed: ')} "
                f"(the model takes another path at other sizes: a branch on the input's size); it fails at "
                f"{[tuple(x.shape) for x in probe_inputs]}, so these dims cannot be dynamic (an example input of "
                f"another size may take the general path)") from None
        except Exception:
            # (only on failure: the model run eagerly once more, to tell its own refusal from ours)
            if (why := _rejects(gm, probe_inputs)) is None:
                raise
            warnings.warn(f"the dynamic program is not verified at a second size: the model rejects the example's "
                          f"values resized to {[tuple(x.shape) for x in probe_inputs]} ({why}; inputs whose values "
                          f"depend on other inputs' sizes, as EmbeddingBag's offsets on its ids')", stacklevel=3)
            return dyn
        dynamic.verify(dyn, at_probe, probe)
    return dyn


def _rejects(gm, inputs) -> str | None:
    """Why the converted model fails on inputs (None: it runs, or only export's size guard
    fails, which the lowering at them reports as it should)."""
    try:
        with torch.no_grad():
            gm(*inputs)
    except AssertionError:
        return None
    except Exception as e:     # the model's own check of its input values (an offset past the ids)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return None


def _resized(x, sym_shape, bindings):
    """An input of another shape with the example's values (ids stay valid ids)."""
    shape = tuple(dynamic.symbolic.evaluate_shape(sym_shape, bindings))
    return torch.from_numpy(np.resize(x.detach().cpu().numpy(), shape).copy())


def _lower_at(gm: GraphModule, example_inputs, options: dict, report: dict | None, exprs=None,
              dynamic_graph: bool = False, shapes=None, progress: str | None = None):
    """(Program at the example inputs' shapes, the lowered GraphModule); exprs: the integer
    nodes' symbolic values (vkq.dynamic), for a symbolic program; shapes: every exported node's
    symbolic shape (the passes read it as SYMBOLIC_SHAPES: a size that only looks static at
    the example); progress: the title of a bar over the passes; options: lower()'s choices, as the
    gm.meta keys the passes read them by."""
    gm = copy.deepcopy(gm)
    functionalize_inplace(gm)      # (a graph PT2E converted without vkq's quantizer: its buffer writes)
    state = lift_state(gm, shapes)
    example_inputs = tuple(example_inputs) + tuple(init for _, init in state)
    record_shapes(gm, example_inputs)
    gm.meta[SYMBOLIC_SHAPES] = shapes or {}
    gm.meta.update(options)     # (the scheme, int8 embeddings, the int4 schemes' groups)
    stands_for = gm.meta["vkq_stands_for"] = {}       # node -> the node whose value it took over
    gm._register_replace_node_hook(lambda old, new, user: stands_for.setdefault(new, old.name))
    passes = run_pipeline(gm, progress=progress)
    if report is not None:
        report.update(passes)
    if exprs is not None:       # (the sizes that passes read, _graph.size_node)
        exprs = {**{k: v for k, v in gm.meta[SYMBOLIC_SHAPES].items() if isinstance(v, str)}, **exprs}
    if progress:
        stage(f"translating {len(gm.graph.nodes)} nodes into a program")
    program = Translator(gm, exprs).program()
    if state:
        _split_state(program, state)
    if exprs is None and not dynamic_graph:
        rewrite_for_shapes(program)      # a dynamic program gets them per shape (vkq/rewrites.py)
    schedule_host_first(program)
    program.meta["passes"] = list(passes)
    program.validate()
    return program, gm


# ------------------------------------------------------------------ program state

def lift_state(gm: GraphModule, shapes: dict | None = None) -> list:
    """The module buffers the graph writes (gm.meta[STATE], vkq.passes.functionalize: their new
    values are the graph's trailing outputs) as trailing placeholders: to the passes they are
    inputs like any other (never folded as constants), and the program reads them as its state.
    Returns [(placeholder name, initial value)] in the order of those outputs; shapes (a
    dynamic graph's) gets each placeholder's shape under its new name."""
    lifted = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for target in gm.meta.get(STATE, []):
        reads = [n for n in gm.graph.nodes if n.op == "get_attr" and n.target == target]
        value = gm.get_buffer(target).detach().clone()
        if value.dtype not in (torch.float32, torch.int32, torch.int64, torch.bool):
            raise NotImplementedError(f"buffer {target!r} is written in place and is {value.dtype}: vkq keeps "
                                      "program state as float32 or 32-bit integers")
        after = placeholders[-1] if placeholders else next(iter(gm.graph.nodes))
        with gm.graph.inserting_after(after) if placeholders else gm.graph.inserting_before(after):
            ph = gm.graph.placeholder("state_" + target.replace(".", "_"))
        ph.meta["val"] = value
        placeholders.append(ph)
        for r in reads:
            if shapes is not None and r.name in shapes:
                shapes[ph.name] = shapes[r.name]
            r.replace_all_uses_with(ph)
            gm.graph.erase_node(r)
        lifted.append((ph.name, value))
    if lifted:
        gm.recompile()
    return lifted


def _split_state(program: Program, state: list) -> None:
    """The program lowered with its state as trailing inputs and their new values as trailing
    outputs -> those inputs and outputs as Program.state."""
    k = len(state)
    names, updates = program.inputs[-k:], program.outputs[-k:]
    program.inputs, program.outputs = program.inputs[:-k], program.outputs[:-k]
    program.state = dict(zip(names, updates))
    program.state_init = {}
    for name, (_, value) in zip(names, state):
        spec = program.tensors[name]
        program.state_init[name] = value.numpy().astype(spec.numpy_dtype)
    dtypes = program.meta.get("output_dtypes", {})
    for u in updates:
        if u not in program.outputs:
            dtypes.pop(u, None)


# ------------------------------------------------------------------ specs and dtypes

NP_DTYPE = {torch.float32: "float32", torch.float64: "float32", torch.float16: "float32",
            torch.bfloat16: "float32", torch.int8: "int8", torch.int32: "int32", torch.int64: "int32",
            torch.int16: "int32", torch.uint8: "int32", torch.bool: "int32"}


# what a program output of these torch dtypes is handed back as (its words are NP_DTYPE's)
OUTPUT_DTYPE = {torch.float64: "float64", torch.float16: "float16", torch.int64: "int64",
                torch.int16: "int16", torch.uint8: "uint8", torch.bool: "bool", torch.complex64: "complex64",
                torch.complex128: "complex64"}


def _spec(node_val, node: Node | None = None) -> TensorSpec:
    dtype = NP_DTYPE.get(node_val.dtype, "float32")
    shape = tuple(int(d) for d in node_val.shape)
    if node_val.is_complex():        # (real, imaginary) pairs in a last dim of 2: torch_op's form of it
        return TensorSpec(shape + (2,), "float32")
    if dtype != "int8":
        return TensorSpec(shape, dtype)
    layout = node.meta.get(LAYOUT_KEY) if node is not None else None
    qp = qparams(node) if node is not None else None
    return TensorSpec(shape, "int8", layout or rank_layout(len(shape)), *(qp if qp is not None else (None, None)))


def _encode(v, inputs: list, ints=None):
    """A node's args as a JSON template for torch_op: tensors by input index; an integer node
    (a size of a dynamic shape) as its value, `ints(node)`."""
    if isinstance(v, Node):
        if ints is not None and not isinstance(val(v), torch.Tensor):
            return ints(v)
        inputs.append(v)
        return {"__input__": len(inputs) - 1}
    if isinstance(v, torch.dtype):
        return {"__dtype__": str(v).split(".")[-1]}
    if isinstance(v, torch.memory_format):
        return {"__memory_format__": str(v).split(".")[-1]}
    if isinstance(v, torch.layout):
        return {"__layout__": str(v).split(".")[-1]}
    if isinstance(v, torch.device):
        return {"__device__": "cpu"}
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x, inputs, ints) for x in v]}
    if isinstance(v, list):
        return [_encode(x, inputs, ints) for x in v]
    if isinstance(v, dict):
        return {k: _encode(x, inputs, ints) for k, x in v.items()}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    raise TypeError(f"cannot store argument {v!r} of type {type(v).__name__}")


# ------------------------------------------------------------------ scheduling

def schedule_host_first(program: Program) -> None:
    """Move the CPU nodes that need nothing computed on the device (directly or through other
    nodes) to the front, keeping their order: they only read program inputs, constants and each
    other, so the order stays valid, and the Vulkan nodes they used to sit between join one
    segment (the executor transfers only at CPU/Vulkan boundaries)."""
    device_made: set = set()
    early, rest = [], []
    for node in program.nodes:
        if cpu_reason(node, program.tensors) is None or any(t in device_made for t in node.inputs):
            device_made.update(node.outputs)
            rest.append(node)
        else:
            early.append(node)
    program.nodes = early + rest


# ------------------------------------------------------------------ translation

def _attr_value(gm, node) -> torch.Tensor:
    """A get_attr that is not a tensor: a Python number as a 0-d tensor, else a clear error."""
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, (bool, int, float)):
        return torch.tensor(obj)
    users = ", ".join(f"{u.name} ({op_name(u.target)})" for u in node.users)
    raise NotImplementedError(
        f"get_attr {node.target!r} is a {type(obj).__name__}, not a tensor, read by {users}: "
        "vkq lowers tensors and the ops on them (a control-flow or other higher-order op on a "
        "submodule cannot be lowered; export the model without it)")


class Translator:
    """FX graph -> Program. exprs (dynamic shapes): {FX node name: symbolic expression} of the
    graph's integer nodes (sizes of dynamic dims), so that attrs taken from them stay symbolic."""

    def __init__(self, gm: GraphModule, exprs: dict | None = None):
        self.gm = gm
        self.exprs = exprs
        self.ints: dict = {}           # integer FX node -> its value at the example shapes
        self.expr_values: dict = {}    # symbolic attr -> its value at the example shapes
        self.tensors: dict = {}
        self.nodes: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.constants: dict = {}
        self.fallback: list = []
        self.names: dict = {}          # FX node -> tensor name (or list of names)
        self._n = 0
        self._same: dict = {}          # (spec, digest of the bytes) -> the constant's name
        self.output_dtypes: dict = {}  # output -> torch's dtype where it is not its words' (bool, int64)

    def program(self) -> Program:
        for node in self.gm.graph.nodes:
            getattr(self, f"_{node.op}")(node)
        # int8 tensor -> the PT2E quantize node (in the converted graph) whose value it holds
        sources = {self.names[n]: n.meta["vkq_source"] for n in self.gm.graph.nodes
                   if "vkq_source" in n.meta and isinstance(self.names.get(n), str)}
        meta = {"int8_sources": sources}
        if self.output_dtypes:
            meta["output_dtypes"] = self.output_dtypes
        return Program(self.tensors, self.nodes, self.inputs, self.outputs, self.constants, self.fallback,
                       meta=meta)

    # -- helpers
    def const(self, array, hint: str) -> str:
        self._n += 1
        name = f"_const_{hint}_{self._n}"
        array = np.asarray(array)
        array = np.ascontiguousarray(array).reshape(array.shape)      # (ascontiguousarray makes 0-d 1-d)
        self.constants[name] = array
        self.tensors[name] = TensorSpec(array.shape, str(array.dtype) if array.dtype != np.float64 else "float32")
        return name

    def name(self, x) -> str:
        return x if isinstance(x, str) else self.names[x]

    def int_value(self, x) -> int:
        """An integer argument: a Python int, or an integer node's value at the example."""
        return self.ints[x] if isinstance(x, Node) else int(x)

    def dim_attr(self, x, value: int):
        """value as an attr: symbolic ({"expr": ...}) when it is integer node x's own value and
        x is a size of a dynamic dim, else the int."""
        if isinstance(x, Node) and self.exprs is not None and value == self.ints.get(x):
            expr = self.exprs.get(x.name)
            if isinstance(expr, str):
                self.expr_values[expr] = int(value)
                return {"expr": expr}
        return int(value)

    def sized(self, attrs):
        """attrs with each integer FX node in them (a size the graph computes) as dim_attr."""
        if isinstance(attrs, Node):
            return self.dim_attr(attrs, self.ints[attrs]) if attrs in self.ints else attrs
        if isinstance(attrs, dict):
            return {k: self.sized(v) for k, v in attrs.items()}
        if isinstance(attrs, (list, tuple)):
            return type(attrs)(self.sized(v) for v in attrs)
        return attrs

    def concrete(self, attrs):
        """attrs at the example shapes (symbolic values replaced by what they are there)."""
        if isinstance(attrs, dict):
            if set(attrs) == {"expr"}:
                return self.expr_values[attrs["expr"]]
            return {k: self.concrete(v) for k, v in attrs.items()}
        if isinstance(attrs, (list, tuple)):
            return type(attrs)(self.concrete(v) for v in attrs)
        return attrs

    def define(self, node: Node) -> str:
        self.names[node] = node.name
        self.tensors[node.name] = _spec(val(node), node)
        return node.name

    def emit(self, op: str, inputs, node: Node, attrs: dict) -> None:
        """One program node for FX node `node`; a list-valued node (split, unbind) gets one output
        per element, named after the getitem that reads it. A node its op declines for Vulkan
        is recorded in the fallback list with the op's reason. An integer FX node among the attrs
        (a size the graph computes) becomes its value, symbolic where it is a dynamic dim's."""
        attrs = self.sized(attrs)
        v = val(node)
        if isinstance(v, (tuple, list)):
            getitems = {u.args[1]: u for u in node.users if u.target is operator.getitem}
            outs = []
            for i, vi in enumerate(v):
                item = getitems.get(i)
                name = item.name if item is not None else f"{node.name}_{i}"
                self.tensors[name] = _spec(vi, item)
                outs.append(name)
            self.names[node] = outs
        else:
            outs = [self.define(node)]
        self.nodes.append(PNode(op, [self.name(i) for i in inputs], outs, attrs, name=node.name))
        if get_op(op).build is not None:
            last = self.nodes[-1]
            why = cpu_reason(PNode(last.op, last.inputs, last.outputs, self.concrete(last.attrs), last.name),
                             self.tensors)
            if why is not None:
                self.fallback.append((op_name(node.target) if vkq_op_of(node) is None else op, f"{why}; runs on the CPU"))

    # -- one method per FX node kind
    def _placeholder(self, node):
        self.inputs.append(self.define(node))

    def _get_attr(self, node):
        if not node.users:
            return
        value = const_value(self.gm, node)
        if value is None:     # not a tensor: a number becomes a 0-d constant; anything else cannot be lowered
            value = _attr_value(self.gm, node)
        value = value.detach().cpu()
        spec = _spec(value, node)
        if value.is_complex():
            value = torch.view_as_real(value.resolve_conj())
        if value.dtype == torch.bfloat16:        # (numpy has none; the program computes in float32)
            value = value.float()
        if value.dtype == torch.float64 and node.meta.get(HOST_FLOAT64):
            spec = TensorSpec(spec.shape, "float64")
        arr = value.numpy().astype(spec.numpy_dtype)
        if spec.dtype == "int8":
            spec.layout = node.meta.get(LAYOUT_KEY) or default_layout(node)
        # one copy of equal constants: each of an unrolled recurrence's steps folds the shared
        # weight into a constant of its own op (a 64-step LSTM stored its recurrent weight 64 times)
        key = (spec.dtype, spec.layout, spec.scale, spec.zero_point, arr.shape,
               hashlib.blake2b(arr.tobytes()).digest())
        if key in self._same:
            self.names[node] = self._same[key]
            return
        self._same[key] = node.name
        self.names[node] = node.name
        self.tensors[node.name] = spec
        self.constants[node.name] = arr

    def _call_module(self, node):
        raise NotImplementedError(f"call_module {node.target} is left in the graph")

    def _output(self, node):
        outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
        for i, o in enumerate(outs):
            if o is None or not isinstance(o, Node) and not isinstance(o, (bool, int, float)):
                raise ValueError(f"the model's output {i} is {o!r}: a program returns tensors and numbers "
                                 f"(leave it out of what forward returns)")
            if not isinstance(o, Node) or o in self.ints:     # a number, or a size the graph computes
                self._number_output(o, i)
            elif dtype_of(o) == torch.int8:          # outputs are float: dequantize what is int8
                qp = qparams(o) or (1.0, 0)
                name = f"{o.name}_float"
                self.tensors[name] = TensorSpec(shape_of(o), "float32")
                self.nodes.append(PNode("dequantize", [self.name(o)], [name],
                                        {"scale": qp[0], "zero_point": qp[1]}, name=name))
                self.outputs.append(name)
                if qparams(o) is None:                 # a plain int8 tensor (x.to(torch.int8)), not a quantized one
                    self.output_dtypes[name] = "int8"
            else:
                self.outputs.append(self.name(o))
                if isinstance(o, Node) and dtype_of(o) in OUTPUT_DTYPE:
                    self.output_dtypes[self.name(o)] = OUTPUT_DTYPE[dtype_of(o)]

    def _number_output(self, o, i: int):
        """A number among the outputs (a size, a flag) as a 0-d tensor: a `full` node, so that a
        dynamic dim's size is its value at each shape."""
        value = self.ints[o] if isinstance(o, Node) else o
        kind = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
        if kind == "int32" and not -2**31 <= value < 2**31:
            raise ValueError(f"the model's output {i} is the integer {value}, beyond int32's range")
        name = f"_output_{i}"
        self.tensors[name] = TensorSpec((), "int32" if kind == "bool" else kind)
        self.nodes.append(PNode("full", [], [name], {"shape": [], "value": self.sized(o) if isinstance(o, Node) else value,
                                                     "dtype": kind}, name=name))
        self.outputs.append(name)
        if kind != "float32":
            self.output_dtypes[name] = "bool" if kind == "bool" else "int64"

    def _call_function(self, node):
        v = val(node)
        if isinstance(v, int) and not isinstance(v, bool):
            self.ints[node] = v        # a size (sym_size, arithmetic on sizes): read by the nodes using it
            return None
        op = vkq_op_of(node)
        if op is not None:
            return self.emit(op, node.args, node, dict(node.kwargs))
        if is_call(node, QUANTIZE | DEQUANTIZE) and q_args(node)["dtype"] != torch.int8:
            return self._cpu(node)            # another integer type: torch runs it
        if is_call(node, QUANTIZE):
            a = q_args(node)
            return self.emit("quantize", [node.args[0]], node,
                             {"scale": a["scale"], "zero_point": a["zero_point"], "qmin": a["qmin"], "qmax": a["qmax"]})
        if is_call(node, DEQUANTIZE):
            a = q_args(node)
            return self.emit("dequantize", [node.args[0]], node, {"scale": a["scale"], "zero_point": a["zero_point"]})
        if node.target is operator.getitem and isinstance(self.names.get(node.args[0]), list):
            self.names[node] = self.names[node.args[0]][node.args[1]]
            return None
        return self._cpu(node)

    def _cpu(self, node):
        if any(isinstance(val(n), torch.Tensor) and val(n).is_complex() for n in [node, *node.all_input_nodes]):
            self.fallback.append((op_name(node.target), f"{op_name(node.target)}: complex tensors run in torch "
                                  "on the CPU (no Vulkan kernel takes them)"))
            return self._torch_op(node)
        rule = CPU_RULES.get(node.target) or RULES_BY_NAME.get(op_name(node.target))
        lowered = rule(node, self) if rule is not None else None
        if lowered is None or get_op(lowered[0]).build is None:
            self.fallback.append((op_name(node.target), fallback_reason(node)))
        if lowered is not None:
            op, inputs, attrs = lowered
            return self.emit(op, inputs, node, attrs)
        return self._torch_op(node)

    def _torch_op(self, node):
        inputs: list = []
        ints = lambda x: self.dim_attr(x, self.ints[x])
        args = _encode(list(node.args), inputs, ints)
        kwargs = _encode(dict(node.kwargs), inputs, ints)
        target = node.target
        qualified = target.name() if isinstance(target, torch._ops.OpOverload) else None
        if qualified is None:
            raise NotImplementedError(f"node {node.name}: {target} is not an aten op; cannot run it")
        attrs = {"target": qualified, "args": args, "kwargs": kwargs,
                 "dtypes": [str(dtype_of(i)).split(".")[-1] if dtype_of(i) is not None else None for i in inputs]}
        v = val(node)
        if isinstance(v, (tuple, list)):
            outs = []
            for i, vi in enumerate(v):
                name = f"{node.name}_{i}"
                if isinstance(vi, torch.Tensor):
                    self.tensors[name] = _spec(vi)
                    outs.append(name)
            self.names[node] = outs
            self.nodes.append(PNode("torch_op", [self.name(i) for i in inputs], outs, attrs, name=node.name))
            return None
        return self.emit("torch_op", inputs, node, attrs)
