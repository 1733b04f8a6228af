"""The op registry: one entry per op, holding its numpy reference (the specification),
the shader(s) it runs and how it builds its dispatches. An op is added in one module
under vkq/ops/ with one @register_op class.

    @register_op
    class Quantize:
        name = "quantize"
        shaders = ("quantize",)
        def reference(x, *, scale, zero_point, ...): ...      # logical numpy arrays in and out
        def build(ctx, node): ... return [Dispatch, ...]      # None: the op runs on the CPU

reference() takes the node's inputs as logical arrays (int8 arrays for int8 tensors,
constants included) and its attrs as keywords. build() gets a BuildContext (vkq.executor)
that hands out the device, buffers, specs and constant values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class OpDef:
    name: str
    reference: Callable
    build: Callable | None = None
    shaders: tuple = ()
    doc: str = ""

    @property
    def on_vulkan(self) -> bool:
        return self.build is not None


OPS: dict[str, OpDef] = {}


def register_op(cls):
    """Class decorator: register cls.reference / cls.build / cls.shaders under cls.name."""
    name = cls.name
    if name in OPS:
        raise ValueError(f"op {name!r} is registered twice")
    OPS[name] = OpDef(name, cls.reference, getattr(cls, "build", None),
                      tuple(getattr(cls, "shaders", ())), (cls.__doc__ or "").strip())
    return cls


def get_op(name: str) -> OpDef:
    _load_ops()
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


def _load_ops():
    from . import ops  # noqa: F401  (importing vkq.ops registers every op)
