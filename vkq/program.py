"""The program IR: plain data that the executors run and the program file stores.

A Program is a list of Nodes over named tensors. Every tensor has a TensorSpec: its
logical shape and dtype, and for int8 tensors the packed layout and quantization
parameters. Constants (weights, biases, requantization tables) are tensors with a value.

Dimensions may be symbolic (dynamic shapes): an int or an expression string in the program's
input symbols (vkq.symbolic), with each symbol's bounds in Program.symbols and the conditions
torch.export traced the model under in Program.checks. A symbolic Program is specialized to
concrete shapes (Program.bind, which checks both -> Program.specialize) before anything runs.

How a tensor lives on a device is defined here, once:
  int8    -> int32 words, Int8x4-packed in its layout (vkq.packing: 4W4C, 4H4W, ROW)
  float32 -> float32, contiguous (row-major) in its logical shape
  int32   -> int32, contiguous
  float64 -> never on a device: only constants the host reads when it builds an op (a conv or
             linear bias at the accumulator's scale, whose fraction float32 would lose)
"""
from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field

import numpy as np

from . import packing, symbolic

DTYPES = ("int8", "float32", "int32", "float64")
# dtypes an output is handed back in where torch's is not its words' (meta output_dtypes)
OUTPUT_DTYPES = ("float64", "float16", "int64", "int16", "int8", "uint8", "bool", "complex64")


@dataclass
class TensorSpec:
    shape: tuple
    dtype: str = "float32"
    layout: str | None = None        # "4W4C" / "4H4W" / "ROW" for int8 tensors
    scale: float | None = None       # per-tensor quantization of int8 activations
    zero_point: int | None = None

    def __post_init__(self):
        self.shape = tuple(d if symbolic.is_symbolic(d) else int(d) for d in self.shape)
        for d in self.shape:
            symbolic.check(d)
        if self.dtype not in DTYPES:
            raise ValueError(f"tensor dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.dtype == "int8" and self.layout not in packing.ALL_LAYOUTS:
            raise ValueError(f"an int8 tensor needs a packed layout {packing.ALL_LAYOUTS}, got {self.layout!r}")

    @property
    def symbolic(self) -> bool:
        return any(symbolic.is_symbolic(d) for d in self.shape)

    def specialize(self, bindings: dict) -> "TensorSpec":
        if not self.symbolic:
            return self
        return TensorSpec(symbolic.evaluate_shape(self.shape, bindings), self.dtype, self.layout,
                          self.scale, self.zero_point)

    @property
    def numpy_dtype(self):
        return np.dtype(self.dtype)

    def _concrete(self, what: str):
        if self.symbolic:
            raise ValueError(f"{what} of a tensor of symbolic shape {self.shape}: specialize the program first")

    def device_words(self) -> int:
        """int32/float32 words this tensor takes on a device (at least one: an empty tensor,
        such as a model's empty cache, still gets a buffer)."""
        self._concrete("device_words")
        if self.dtype == "float64":
            raise ValueError("a float64 tensor is a host-side constant; it has no device buffer")
        if int(np.prod(self.shape, dtype=np.int64)) == 0:
            return 1
        if self.dtype == "int8":
            return packing.packed_size(self.shape, self.layout)
        return int(np.prod(self.shape, dtype=np.int64))

    def same_words(self, other: "TensorSpec") -> bool:
        """Whether this tensor's device words, read as a tensor of `other`'s spec, are that
        tensor: a reshape between the two moves nothing (the executor lets them share a
        buffer). float32 / int32: row-major, so any reshape of one dtype; int8: the packed
        images must be equal (vkq.packing.same_image)."""
        self._concrete("same_words")
        other._concrete("same_words")
        numel = int(np.prod(self.shape, dtype=np.int64))
        if self.dtype != other.dtype or self.dtype == "float64" or numel == 0 \
                or numel != int(np.prod(other.shape, dtype=np.int64)):
            return False
        if self.dtype != "int8":
            return True
        return packing.same_image(self.shape, self.layout, other.shape, other.layout)

    @property
    def word_dtype(self):
        return np.dtype(np.float32) if self.dtype == "float32" else np.dtype(np.int32)

    def to_device(self, array) -> np.ndarray:
        """Logical array -> the words a device buffer holds."""
        a = np.asarray(array)
        if self.dtype == "float64":
            raise ValueError("a float64 tensor is a host-side constant; it has no device buffer")
        if a.shape != self.shape:
            raise ValueError(f"expected shape {self.shape}, got {a.shape}")
        if a.size == 0:
            return np.zeros(1, self.word_dtype)
        if self.dtype == "int8":
            return packing.pack(a.astype(np.int8, copy=False), self.layout)
        return np.ascontiguousarray(a, dtype=self.numpy_dtype).reshape(-1)

    def from_device(self, words) -> np.ndarray:
        """Device words -> the logical array."""
        if int(np.prod(self.shape, dtype=np.int64)) == 0:
            return np.zeros(self.shape, self.numpy_dtype)
        if self.dtype == "int8":
            return packing.unpack(np.asarray(words).view(np.int32), self.layout, self.shape)
        return np.asarray(words).view(self.numpy_dtype).reshape(self.shape).copy()


@dataclass
class Node:
    op: str                      # a name in vkq.registry.OPS
    inputs: list                 # tensor names (activations and constants)
    outputs: list
    attrs: dict = field(default_factory=dict)
    name: str = ""               # the FX node it came from, for reports

    def __post_init__(self):
        self.inputs, self.outputs = list(self.inputs), list(self.outputs)
        self.name = self.name or f"{self.op}:{','.join(self.outputs)}"


class NodeError(ValueError):
    """A node that its op cannot build, rewrite or run as the program gives it (attrs or specs
    that do not fit each other: a program file a buggy writer signed); the message names it."""


@dataclass
class Program:
    tensors: dict                # name -> TensorSpec
    nodes: list                  # Nodes in execution order
    inputs: list                 # names of the program's inputs
    outputs: list                # names of its outputs
    constants: dict = field(default_factory=dict)   # name -> np.ndarray (logical value)
    fallback: list = field(default_factory=list)    # (op, reason) that run on the CPU
    meta: dict = field(default_factory=dict)
    symbols: dict = field(default_factory=dict)     # symbol -> (min, max): the dynamic dims' bounds
    checks: list = field(default_factory=list)      # conditions on the symbols the graph holds under
    # Program state: tensors that outlive a call (a KV cache, a counter: the buffers a model
    # writes in place). {state tensor: the tensor holding its value after the call}; the nodes
    # read the state tensor as an input no caller passes, and the executors keep its value
    # between calls (on the device, never uploaded or downloaded per call), starting from
    # state_init (the model's buffer values when it was compiled).
    state: dict = field(default_factory=dict)
    state_init: dict = field(default_factory=dict)  # state tensor -> np.ndarray (logical value)

    # -- dynamic shapes ----------------------------------------------------------------------
    @property
    def dynamic(self) -> bool:
        return bool(self.symbols)

    def describe_symbol(self, sym: str) -> str:
        """How a user knows a symbol: its name in torch.export (Dim) and where it appears."""
        return self.meta.get("symbol_names", {}).get(sym, sym)

    def named(self, text) -> str:
        """A dim or check with its symbols by their Dim names ("8*h" for "8*s39")."""
        return re.sub(r"[A-Za-z_]\w*", lambda m: self.describe_symbol(m.group()) if m.group() in self.symbols
                      else m.group(), str(text))

    def describe_dims(self) -> str:
        """The dynamic inputs, the bounds, the checks, in the Dims' names (empty when static)."""
        if not self.dynamic:
            return ""
        inputs = "; ".join(f"{n} ({', '.join(self.named(d) for d in self.tensors[n].shape)})" for n in self.inputs)
        bounds = ", ".join(f"{self.describe_symbol(s)} in [{lo}, {hi}]"
                           for s, (lo, hi) in sorted(self.symbols.items(), key=lambda kv: self.describe_symbol(kv[0])))
        checks = "".join(f"; where {self.named(c)}" for c in self.checks)
        return f"{inputs}; {bounds}{checks}"

    def bind(self, shapes) -> dict:
        """Symbol values from the program inputs' concrete shapes. Raises ValueError naming
        the input, the dimension and its bounds when a shape is out of bounds or the inputs
        disagree (one symbol, two values)."""
        if len(shapes) != len(self.inputs):
            raise ValueError(f"the program takes {len(self.inputs)} input(s) ({', '.join(self.inputs)}), "
                             f"got {len(shapes)}")
        bindings, where, derived = {}, {}, []
        for name, shape in zip(self.inputs, shapes):
            spec, shape = self.tensors[name], tuple(int(d) for d in shape)
            if len(shape) != len(spec.shape):
                raise ValueError(f"input {name!r} must have {len(spec.shape)} dimensions {_show(spec.shape)}, "
                                 f"got shape {shape}")
            for i, (want, got) in enumerate(zip(spec.shape, shape)):
                if not symbolic.is_symbolic(want):
                    if got != want:
                        raise ValueError(f"input {name!r} dimension {i} must be {want}, got {got} "
                                         f"(shape {shape}; the program takes {_show(spec.shape)})")
                    continue
                syms = symbolic.symbols_of(want)
                if len(syms) == 1 and want.strip() in syms:      # a plain symbol: it takes this value
                    self._bind(bindings, where, want.strip(), got, name, i)
                else:
                    derived.append((name, i, want, got, shape))
        for name, i, want, got, shape in derived:    # 4*s0 (Dim * 4): s0 from it, where no plain dim gave it
            solved = symbolic.solve(want, got, bindings)
            if solved is None and symbolic.symbols_of(want) - set(bindings):
                raise ValueError(f"input {name!r} dimension {i} must be {want}, got {got} "
                                 f"(shape {shape}; the program takes {_show(self.tensors[name].shape)})")
            if solved is not None:
                self._bind(bindings, where, solved[0], solved[1], name, i, f"{got} = {want}")
        missing = set(self.symbols) - set(bindings)
        if missing:
            raise ValueError(f"symbol(s) {', '.join(sorted(missing))} appear in no input dimension")
        for name, shape in zip(self.inputs, shapes):   # derived input dims (e.g. 2*s0) must agree
            want = symbolic.evaluate_shape(self.tensors[name].shape, bindings)
            if want != tuple(int(d) for d in shape):
                raise ValueError(f"input {name!r} has shape {tuple(shape)}, the other inputs make it {want}")
        failed = _failed_check(tuple(self.checks), tuple(sorted(bindings.items())))
        if failed is not None:
            raise ValueError(self._failed(failed, bindings, shapes))
        return bindings

    def _failed(self, check: str, bindings: dict, shapes) -> str:
        order = [s for n in self.inputs for d in self.tensors[n].shape for s in sorted(symbolic.symbols_of(d))]
        used = sorted(symbolic.condition_symbols(check),
                      key=lambda s: (order.index(s) if s in order else len(order), s))
        at = ", ".join(f"{self.describe_symbol(s)} = {bindings[s]}" if self.describe_symbol(s) == s
                       else f"{self.describe_symbol(s)} ({s}) = {bindings[s]}" for s in used)
        dims = "; ".join(f"{n!r} ({', '.join(self.named(d) for d in self.tensors[n].shape)})"
                         for n in self.inputs if self.tensors[n].symbolic)
        got = ", ".join(str(tuple(int(d) for d in s)) for s in shapes)
        named = self.named(check)
        shown = check if named == check else f"{named}, that is {check}"
        return (f"input shape(s) {got} give {at}, where the program does not hold: torch.export traced the "
                f"model under {shown} (inputs {dims}), a branch on an input's size, and at this size the model "
                "takes another path. Compile it from an example input of this size, or keep this size out of "
                "the dims' range")

    def _bind(self, bindings, where, sym, got, name, i, derived=None):
        lo, hi = self.symbols.get(sym, (0, None))
        if got < lo or (hi is not None and got > hi):
            of = f" (its size {derived} makes {sym} {got})" if derived else ""
            raise ValueError(f"input {name!r} dimension {i} ({self.describe_symbol(sym)}) must be in "
                             f"[{lo}, {hi}], got {got}{of}")
        if sym in bindings and bindings[sym] != got:
            raise ValueError(f"input {name!r} dimension {i} is {got}, but {where[sym]} is "
                             f"{bindings[sym]}: both are {self.describe_symbol(sym)} and must agree")
        bindings[sym], where[sym] = got, f"input {name!r} dimension {i}"

    def max_bindings(self) -> dict:
        """Every symbol at its upper bound: where buffers are sized."""
        return {s: int(hi) for s, (lo, hi) in self.symbols.items()}

    def specialize(self, bindings: dict) -> "Program":
        """This program at concrete symbol values: shapes and symbolic attrs evaluated; the
        constants are shared, not copied."""
        if not self.dynamic:
            return self
        tensors = {n: s.specialize(bindings) for n, s in self.tensors.items()}
        # new Node objects: shape rewrites edit the specialized program, never this one
        nodes = [Node(n.op, n.inputs, n.outputs, symbolic.specialize_attrs(copy.deepcopy(n.attrs), bindings), n.name)
                 for n in self.nodes]
        meta = {**self.meta, "bindings": dict(bindings)}
        return Program(tensors, nodes, self.inputs, self.outputs, self.constants, self.fallback, meta,
                       state=self.state, state_init=self.state_init)

    def validate(self) -> None:
        """Every name is defined once before use, shapes of constants match their specs,
        symbolic dims use declared symbols with sane bounds."""
        for sym, bounds in self.symbols.items():
            if (not isinstance(bounds, (list, tuple)) or len(bounds) != 2
                    or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
                    or not 0 <= bounds[0] <= bounds[1]):
                raise ValueError(f"symbol {sym!r} has bounds {bounds!r}; expected [min, max] with 0 <= min <= max")
        names = self.meta.get("symbol_names", {})
        if not isinstance(names, dict) or not all(isinstance(v, str) and 0 < len(v) <= 100 for v in names.values()):
            raise ValueError(f"meta symbol_names must map symbols to Dim names, got {str(names)[:60]}")
        dtypes = self.meta.get("output_dtypes", {})
        if not isinstance(dtypes, dict) or not all(k in self.outputs and v in OUTPUT_DTYPES for k, v in dtypes.items()):
            raise ValueError(f"meta output_dtypes must map program outputs to one of {', '.join(OUTPUT_DTYPES)}, "
                             f"got {str(dtypes)[:80]}")
        if not isinstance(self.checks, list):
            raise ValueError(f"checks must be a list of conditions, not {type(self.checks).__name__}")
        for check in self.checks:
            symbolic.check_condition(check, self.symbols)
        for name, spec in self.tensors.items():
            for d in spec.shape:
                symbolic.check(d, self.symbols)
        for node in self.nodes:          # symbolic attrs ({"expr": ...}) in the declared symbols
            for expr in _attr_exprs(node.attrs):
                if not isinstance(expr, str):
                    raise ValueError(f"node {node.name!r}: a symbolic attr must be an expression string, not {expr!r}")
                symbolic.check(expr, self.symbols if self.dynamic else None)   # (lower's first, concrete pass)
        for name in self.constants:
            if name in self.tensors and self.tensors[name].symbolic:
                raise ValueError(f"constant {name!r} has a symbolic shape")
        known = set(self.inputs) | set(self.constants) | set(self.state)
        if len(known) != len(self.inputs) + len(self.constants) + len(self.state):
            raise ValueError("a program input is named twice, or is also a constant or a state tensor")
        if not isinstance(self.state, dict) or set(self.state_init) != set(self.state):
            raise ValueError("every state tensor needs an initial value, and only state tensors have one")
        for name, update in self.state.items():
            if name not in self.tensors or update not in self.tensors:
                raise ValueError(f"state tensor {name!r} or its update {update!r} has no spec")
            spec, new = self.tensors[name], self.tensors[update]
            if spec.symbolic or (spec.shape, spec.dtype) != (new.shape, new.dtype) or spec.dtype not in ("float32", "int32"):
                raise ValueError(f"state tensor {name!r} {spec.dtype}{list(spec.shape)} is updated by {update!r} "
                                 f"{new.dtype}{list(new.shape)}: a state is a float32 or int32 tensor of static "
                                 "shape, and its update has its shape and dtype")
            if tuple(np.shape(self.state_init[name])) != spec.shape:
                raise ValueError(f"state tensor {name!r}: initial value of shape {np.shape(self.state_init[name])}, "
                                 f"its spec says {spec.shape}")
        for name in list(self.inputs) + list(self.constants):
            if name not in self.tensors:
                raise ValueError(f"tensor {name!r} has no spec")
        for name, value in self.constants.items():
            spec = self.tensors[name]
            if tuple(np.shape(value)) != spec.shape:
                raise ValueError(f"constant {name!r} has shape {np.shape(value)}, its spec says {spec.shape}")
        from .registry import get_op
        for node in self.nodes:
            try:
                get_op(node.op)
            except KeyError as e:
                raise ValueError(f"node {node.name!r}: {e.args[0]}") from None
            for t in node.inputs:
                if t not in known:
                    raise ValueError(f"node {node.name!r} reads {t!r} before it is produced")
            for t in node.outputs:
                if t not in self.tensors:
                    raise ValueError(f"node {node.name!r} writes {t!r}, which has no spec")
                if t in known:
                    raise ValueError(f"node {node.name!r} writes {t!r}, which is already defined")
                known.add(t)
        for t in self.outputs:
            if t not in known:
                raise ValueError(f"program output {t!r} is never produced")
        for name, update in self.state.items():
            if update not in known or update in self.constants:
                raise ValueError(f"state tensor {name!r}: its update {update!r} is never produced")


def _attr_exprs(value):
    """The expressions of every {"expr": ...} marker in a node's attrs."""
    if isinstance(value, dict):
        if set(value) == {"expr"}:
            yield value["expr"]
        else:
            for v in value.values():
                yield from _attr_exprs(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _attr_exprs(v)


@functools.lru_cache(maxsize=256)
def _failed_check(checks: tuple, bindings: tuple):
    """The first check that fails at these bindings, or None (cached: a call binds the same
    shapes again and again, and export's guards can be long expressions)."""
    values = dict(bindings)
    return next((c for c in checks if not symbolic.holds(c, values)), None)


def _show(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"
