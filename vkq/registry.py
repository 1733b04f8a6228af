"""The op registry: one entry per op, holding its numpy reference (the specification),
the shader(s) it runs and how it builds its dispatches. An op is added in one module
under vkq/ops/ with one @register_op class.

    @register_op
    class Quantize:
        name = "quantize"
        shaders = ("quantize",)
        def reference(x, *, scale, zero_point, ...): ...      # logical numpy arrays in and out
        def build(ctx, node): ... return [Dispatch, ...]      # absent: the op runs on the CPU
        def decline(node, tensors): ... return "why not" or None   # optional: this node on the CPU
        layouts = ("4W4C", "4H4W")                            # int8 layouts build() reads/writes

reference() takes the node's inputs as logical arrays (int8 arrays for int8 tensors,
constants included) and its attrs as keywords. build() gets a BuildContext (vkq.executor)
that hands out the device, buffers, specs and constant values.

Where a node runs is decided per node, from its specs alone (before any buffer exists):
cpu_reason(node, tensors) is None for Vulkan, else why it runs its reference on the CPU: the
op has no build(), an int8 tensor is in a layout the op does not list, or its decline() says
why (a dtype or a rank its shader does not take). So one op name serves every dtype.
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
    decline: Callable | None = None
    layouts: tuple = ("4W4C", "4H4W")

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
                      tuple(getattr(cls, "shaders", ())), (cls.__doc__ or "").strip(),
                      getattr(cls, "decline", None), tuple(getattr(cls, "layouts", ("4W4C", "4H4W"))))
    return cls


def cpu_reason(node, tensors) -> str | None:
    """Why `node` (a vkq.program.Node) runs on the CPU, or None when it runs on Vulkan.
    tensors: name -> TensorSpec."""
    op = get_op(node.op)
    if op.build is None:
        return f"{node.op}: no Vulkan kernel"
    for t in list(node.inputs) + list(node.outputs):
        spec = tensors[t]
        if spec.dtype == "int8" and spec.layout not in op.layouts:
            return (f"{node.op}: its kernel takes int8 in {'/'.join(op.layouts)}; {t!r} {spec.shape} "
                    f"is {spec.layout}")
    if op.decline is None:
        return None
    try:
        return op.decline(node, tensors)
    except Exception as e:      # a node the op's rules cannot even describe: the reference runs it
        return f"{node.op}: {type(e).__name__}: {e}"


def get_op(name: str) -> OpDef:
    _load_ops()
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


def _load_ops():
    from . import ops  # noqa: F401  (importing vkq.ops registers every op)
