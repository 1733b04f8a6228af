"""The program IR: plain data that the executors run and the program file stores.

A Program is a list of Nodes over named tensors. Every tensor has a TensorSpec: its
logical shape and dtype, and for int8 tensors the packed layout and quantization
parameters. Constants (weights, biases, requantization tables) are tensors with a value.

How a tensor lives on a device is defined here, once:
  int8    -> int32 words, Int8x4-packed in its layout (vkq.packing: 4W4C, 4H4W, ROW)
  float32 -> float32, contiguous (row-major) in its logical shape
  int32   -> int32, contiguous
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import packing

DTYPES = ("int8", "float32", "int32")


@dataclass
class TensorSpec:
    shape: tuple
    dtype: str = "float32"
    layout: str | None = None        # "4W4C" / "4H4W" / "ROW" for int8 tensors
    scale: float | None = None       # per-tensor quantization of int8 activations
    zero_point: int | None = None

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in DTYPES:
            raise ValueError(f"tensor dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.dtype == "int8" and self.layout not in packing.ALL_LAYOUTS:
            raise ValueError(f"an int8 tensor needs a packed layout {packing.ALL_LAYOUTS}, got {self.layout!r}")

    @property
    def numpy_dtype(self):
        return np.dtype(self.dtype)

    def device_words(self) -> int:
        """int32/float32 words this tensor takes on a device (at least one: an empty tensor,
        such as a model's empty cache, still gets a buffer)."""
        if int(np.prod(self.shape, dtype=np.int64)) == 0:
            return 1
        if self.dtype == "int8":
            return packing.packed_size(self.shape, self.layout)
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def word_dtype(self):
        return np.dtype(np.float32) if self.dtype == "float32" else np.dtype(np.int32)

    def to_device(self, array) -> np.ndarray:
        """Logical array -> the words a device buffer holds."""
        a = np.asarray(array)
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


@dataclass
class Program:
    tensors: dict                # name -> TensorSpec
    nodes: list                  # Nodes in execution order
    inputs: list                 # names of the program's inputs
    outputs: list                # names of its outputs
    constants: dict = field(default_factory=dict)   # name -> np.ndarray (logical value)
    fallback: list = field(default_factory=list)    # (op, reason) that run on the CPU
    meta: dict = field(default_factory=dict)

    def validate(self) -> None:
        """Every name is defined before use, shapes of constants match their specs."""
        known = set(self.inputs) | set(self.constants)
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
                known.add(t)
        for t in self.outputs:
            if t not in known:
                raise ValueError(f"program output {t!r} is never produced")
