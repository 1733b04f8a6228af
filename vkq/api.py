"""From a PyTorch model to a vkq Program in two calls.

    gm = vkq.api.quantize(model, (x,), calibration=batches)       # PT2E: PyTorch's own reference
    program, fallback = vkq.api.compile(gm, (x,))                 # or compile(model, ...) directly
"""
from __future__ import annotations

import contextlib
import copy
import itertools

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.fx import GraphModule

from .passes.conv_transpose_as_conv import fold_batch_norm_into_grouped
from .passes.decompose_unknown import decompose_unknown_ops
from .passes.inline_wrappers import inline_wrappers
from .progress import bar, done, stage
from .quantizer import VkqQuantizer


def _as_tuple(x):
    """Inputs as a tuple of tensors: one tensor or a tuple / list of them; numpy arrays become
    tensors (what a user holding numpy data passes)."""
    xs = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    return tuple(torch.from_numpy(np.array(a, order="C", copy=False)) if isinstance(a, np.ndarray) else a for a in xs)


def quantize(model: torch.nn.Module, example_inputs, calibration=None, scheme: str = "static",
             quantizer=None, progress: bool = True, dynamic_shapes=None) -> GraphModule:
    """Export `model`, prepare it with VkqQuantizer(scheme) (or `quantizer`), run the calibration
    inputs through it (an iterable of input tuples, or of tensors for one-input models; default:
    the example inputs once), convert. dynamic_shapes is torch.export's (a torch.export.Dim
    per dynamic input dimension, with min= and max=): calibration batches of any shape within
    the bounds are used as they are; without it the graph has the example's static shapes and
    a batch larger than the example's is cut into example-sized pieces.
    Returns the converted PT2E GraphModule: q/dq around float ops, runnable eagerly."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model, example_inputs, calibration, dynamic_shapes = tensor_inputs(model, example_inputs, calibration,
                                                                       dynamic_shapes)
    try:
        if progress:
            stage(f"exporting {type(model).__name__}")
        gm = exported_for_quantization(model, example_inputs, dynamic_shapes)
        if progress:
            stage(f"placing observers ({len(gm.graph.nodes)} nodes)")
        prepared = prepare_pt2e(gm, quantizer or VkqQuantizer(scheme))
        batches = [example_inputs] if calibration is None else calibration
        with torch.no_grad():
            for batch in (bar(batches, "calibrating", "batch") if progress else batches):
                batch = _as_tuple(batch)
                for chunk in ([batch] if dynamic_shapes is not None else _fit_batch(batch, example_inputs)):
                    prepared(*chunk)
        if progress:
            stage("converting to quantize / dequantize ops")
        return convert_pt2e(prepared)
    finally:         # (a failure too: a terminal's status line does not stay under the error)
        if progress:
            done()


class _TensorLeaves(torch.nn.Module):
    """A model whose inputs nest tensors in lists / tuples / dicts, or beside Python values,
    called with its tensors alone, in the order torch's pytree flattens them; the other values
    stay the example's (torch.export would make them constants of the graph all the same)."""

    def __init__(self, model, spec, leaves, tensor_at):
        super().__init__()
        self.model, self.spec, self.leaves, self.tensor_at = model, spec, leaves, tensor_at

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for i, t in zip(self.tensor_at, tensors):
            leaves[i] = t
        return self.model(*pytree.tree_unflatten(leaves, self.spec))


def _leaves(inputs):
    """(leaves, spec, positions of the tensor leaves) of inputs as torch's pytree flattens them,
    numpy arrays as tensors; None where every input is a tensor or an array already."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if all(isinstance(x, (torch.Tensor, np.ndarray)) for x in inputs):
        return None
    leaves, spec = pytree.tree_flatten(inputs)
    leaves = [torch.from_numpy(np.array(x, order="C", copy=False)) if isinstance(x, np.ndarray) else x for x in leaves]
    return leaves, spec, [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]


HALF = (torch.float16, torch.bfloat16)


def _to_float32(x):
    """x with its float16 / bfloat16 tensors and arrays (nested too) as float32."""
    def cast(t):
        if isinstance(t, torch.Tensor) and t.dtype in HALF:
            return t.float()
        return t.astype(np.float32) if isinstance(t, np.ndarray) and t.dtype == np.float16 else t
    return pytree.tree_map(cast, x)


def in_float32(model, example_inputs, calibration=None):
    """A half-precision model (float16 / bfloat16 weights, buffers or inputs) as a float32 copy,
    its example and calibration inputs cast: vkq computes float in float32 whatever the model's
    precision, and quantizes from float32 as PyTorch's int8 flows do (traced in float16, the
    rewrites of float ops, which know float32, left a BERT's attention on the CPU; in bfloat16,
    which numpy cannot hold, the compile failed). The user's model is not changed."""
    if not isinstance(model, torch.nn.Module):
        return model, example_inputs, calibration
    def half(t):
        return (isinstance(t, torch.Tensor) and t.dtype in HALF) or (isinstance(t, np.ndarray) and t.dtype == np.float16)
    half_model = any(half(t) for t in itertools.chain(model.parameters(), model.buffers()))
    if not (half_model or any(half(t) for t in pytree.tree_leaves(example_inputs))):
        return model, example_inputs, calibration
    model = copy.deepcopy(model).float() if half_model else model      # (a float32 model is not copied)
    if calibration is not None:      # (a list stays a list: its length is the progress bar's)
        calibration = [_to_float32(b) for b in calibration] if isinstance(calibration, (list, tuple)) \
            else map(_to_float32, calibration)
    return model, _to_float32(example_inputs), calibration


def tensor_inputs(model, example_inputs, calibration=None, dynamic_shapes=None):
    """(model, example tensors, calibration tensor tuples, dynamic_shapes) as vkq takes them:
    where an input is a list / tuple / dict of tensors or a Python value (a flag, a scale), the
    model wrapped to take its tensors alone (_TensorLeaves), each calibration batch flattened
    the same way and each tensor's dynamic dims kept; the compiled program then takes the
    tensors in that order (or the inputs as the example nests them: argument_flattener).
    Inputs that are all tensors (or arrays) come back as they are. A half-precision model and its
    inputs: in float32 (in_float32)."""
    model, example_inputs, calibration = in_float32(model, example_inputs, calibration)
    flat = _leaves(example_inputs)
    if flat is None:
        return model, _as_tuple(example_inputs), calibration, dynamic_shapes
    leaves, spec, tensor_at = flat
    if not tensor_at:
        raise ValueError("the example inputs hold no tensor")
    if dynamic_shapes is not None:
        dims = pytree.tree_flatten(tuple(dynamic_shapes) if isinstance(dynamic_shapes, (tuple, list)) else (dynamic_shapes,),
                                   is_leaf=lambda d: d is None or (isinstance(d, dict) and all(isinstance(k, int) for k in d)))[0]
        if len(dims) != len(leaves):
            raise ValueError(f"dynamic_shapes names {len(dims)} inputs, the example inputs hold {len(leaves)} values")
        dynamic_shapes = tuple(dims[i] for i in tensor_at)
    to_tensors = argument_flattener(example_inputs)
    batches = None if calibration is None else [to_tensors(b if isinstance(b, (tuple, list)) else (b,)) for b in calibration]
    return _TensorLeaves(model, spec, leaves, tensor_at), tuple(leaves[i] for i in tensor_at), batches, dynamic_shapes


def argument_flattener(example_inputs):
    """For inputs structured as example_inputs (tensor_inputs): a function from a call's
    arguments in that structure to the program's tensors, in order (arguments already flat pass
    as they are; a Python value must be the example's: the program was compiled with it). None
    where the example inputs are all tensors."""
    flat = _leaves(example_inputs)
    if flat is None:
        return None
    leaves, spec, tensor_at = flat

    def to_tensors(args):
        args = tuple(args)
        if len(args) == len(tensor_at) and all(hasattr(a, "shape") for a in args):
            return args
        got, got_spec = pytree.tree_flatten(args)
        if got_spec != spec:
            raise ValueError(f"the inputs are structured {got_spec}; the program was compiled for {spec}")
        for i, (g, want) in enumerate(zip(got, leaves)):
            if i not in tensor_at and (hasattr(g, "shape") or type(g) is not type(want) or g != want):
                raise ValueError(f"input value {g!r} where the program was compiled with {want!r} (a Python value "
                                 "is a constant of the compiled graph: compile again for another)")
        return tuple(got[i] for i in tensor_at)
    return to_tensors


def exported_for_quantization(model: torch.nn.Module, example_inputs, dynamic_shapes=None) -> GraphModule:
    """The exported graph quantize() hands to prepare_pt2e (whose quantizer then rewrites it
    before annotating: VkqQuantizer.transform_for_annotation)."""
    if isinstance(model, _TensorLeaves) and dynamic_shapes is not None:
        dynamic_shapes = {"tensors": tuple(dynamic_shapes)}     # (its forward's *tensors, for torch.export)
    with _mask_kept_as_given():
        ep = torch.export.export(model.eval(), _as_tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    gm = decompose_unknown_ops(ep).module()     # (aliases, stacks, ... that no vkq rule names)
    inline_wrappers(gm)     # PT2E then sees (and quantizes) what no_grad / autocast blocks hold
    fold_batch_norm_into_grouped(gm)     # prepare_pt2e's own fusion fails on these
    return gm


@contextlib.contextmanager
def _mask_kept_as_given():
    """nn.Transformer's decoder asks _detect_is_causal_mask whether a given mask is the causal
    one (bool((mask == causal).all())): a branch on tensor values, which torch.export cannot
    trace (GuardOnDataDependentSymNode for every nn.Transformer called with a tgt_mask). Its
    answer is only a hint (is_causal) that lets attention drop the mask for a causal fast path;
    while exporting, the answer is no, so the mask is applied as given: the same attention."""
    from torch.nn.modules import transformer
    detect = transformer._detect_is_causal_mask

    def kept(mask, is_causal=None, size=None):
        if is_causal is None and mask is not None and torch.compiler.is_exporting():
            return False
        return detect(mask, is_causal, size)

    transformer._detect_is_causal_mask = kept
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = detect


def _fit_batch(batch: tuple, example: tuple):
    """The exported graph has the example's static shapes: a calibration batch with another
    leading (batch) size is cut into example-sized pieces (a smaller remainder is dropped)."""
    shapes = [tuple(t.shape) for t in batch]
    want = [tuple(t.shape) for t in example]
    if shapes == want:
        return [batch]
    if len(shapes) != len(want) or any(s[1:] != w[1:] or not w for s, w in zip(shapes, want)):
        hint = (" (batches of (inputs, labels), as a DataLoader gives them: pass the inputs only, e.g. "
                "[b[0] for b in loader])" if len(shapes) > len(want) else "")
        raise ValueError(f"calibration inputs of shapes {shapes} do not fit the example's {want}{hint}")
    n, total = want[0][0], shapes[0][0]
    if any(s[0] != total for s in shapes) or any(w[0] != n for w in want) or total < n:
        raise ValueError(f"calibration batch of shapes {shapes} cannot be cut into the example's {want}")
    return [tuple(t[i:i + n] for t in batch) for i in range(0, total - n + 1, n)]


def compile(model_or_converted, example_inputs, calibration=None, scheme: str = "static",
            device=None, dynamic_shapes=None, progress: bool = True, int8_embeddings: bool = False,
            group_size: int = 32, symmetric: bool = True, known_groups: dict | None = None):
    """Quantize (unless given a converted GraphModule) and lower to a vkq Program.
    scheme "int4" / "8da4w": every linear's weight in int4 groups of group_size along K
    (symmetric, or a zero point a group), float / per-row int8 activations (vkq/ops/linear_int4.py).
    A model quantized by torchao (IntxWeightOnlyConfig / Int8DynamicActivationIntxWeightConfig,
    int4 in groups) lowers to the same ops with its own integers and scales: "int4", or "8da4w"
    where it quantizes activations per token (vkq's own per-row quantization takes that place).
    Returns (program, program.fallback). `device` is accepted for the executor wrapper to come;
    the Program itself does not depend on it. dynamic_shapes (torch.export's) makes one
    program for every input shape within the Dims' bounds. progress: each stage and a bar over
    the calibration batches and the lowering's passes, on stderr. int8_embeddings: embeddings of
    float tables as int8 rows (vkq.lower.lower's; a table tied to the lm_head is stored once).
    known_groups: {sha1 of a linear's float32 weight bytes: vkq.int4.GroupWeights} that the int4
    schemes take as they are (a GGUF's blocks: vkq.models.gguf_llama)."""
    from .lower import lower

    gm, known = model_or_converted, dict(known_groups or {})
    if isinstance(gm, torch.nn.Module) and not isinstance(gm, GraphModule):
        from .int4 import torchao_weights
        gm, found, per_token = torchao_weights(gm)     # a torchao int4 model: its own ops and integers
        known.update(found)
        if found and scheme not in ("int4", "8da4w"):
            scheme = "8da4w" if per_token else "int4"
    if not _is_converted(gm):
        gm, example_inputs, calibration, dynamic_shapes = tensor_inputs(gm, example_inputs, calibration, dynamic_shapes)
        gm = quantize(gm, example_inputs, calibration, scheme, progress=progress, dynamic_shapes=dynamic_shapes)
    elif not any(t.dtype in HALF for t in itertools.chain(gm.parameters(), gm.buffers())):
        example_inputs = _to_float32(example_inputs)     # (quantize's graph of a half model is float32)
    example_inputs = _as_tuple(example_inputs)
    float_linear = scheme if scheme in ("dynamic", "weight_only", "int4", "8da4w") else "dynamic"
    program = lower(gm, example_inputs, float_linear=float_linear, dynamic_shapes=dynamic_shapes, progress=progress,
                    int8_embeddings=int8_embeddings, group_size=group_size, symmetric=symmetric, known_groups=known)
    return program, program.fallback


def _is_converted(m) -> bool:
    """A GraphModule that already carries quantized_decomposed q/dq ops, or that convert_pt2e
    made (with nothing the quantizer annotated there are none; exporting it again would fail)."""
    if not isinstance(m, GraphModule):
        return False
    return any(n.op == "call_function" and "quantized_decomposed" in str(n.target)
               for n in m.graph.nodes) or "_observed_graph_module_attrs" in m.meta   # prepare_pt2e's mark
