"""CPU-only ops: what a lowered model runs on the host between Vulkan segments. Registered
with no build(), so the executor runs their numpy references. (The float ops with float32
shaders — layer_norm, softmax, gelu, add, matmul, ... — are in vkq.ops.float, float_norm, float_matmul.)

Every reference takes logical numpy arrays and JSON attrs and needs no torch, except
`torch_op`, the generic fallback, which calls the aten op by its qualified name.

  linear(x, weight, bias)      (a float conv2d runs on Vulkan: vkq.ops.conv)
  torch_op(*tensors; target, args, kwargs, dtypes)   anything else, through torch
"""
from __future__ import annotations

import numpy as np

from ..registry import register_op

F32 = np.float32


def _f(x):
    return np.asarray(x, dtype=F32)


def _cpu(name, fn, doc=""):
    """Register a CPU op `name` whose reference is fn."""
    cls = type(name, (), {"name": name, "reference": staticmethod(fn), "__doc__": doc})
    register_op(cls)
    return fn


# ---------------------------------------------------------------- a float layer with float weights

def linear(x, weight, bias):
    return (_f(x) @ _f(weight).T + _f(bias)).astype(F32)



# ---------------------------------------------------------------- the generic fallback

DTYPE_NAMES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
               "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
               "bool": "bool", "complex64": "complex64", "complex128": "complex128"}


def torch_op(*tensors, target, args, kwargs=None, dtypes=None):
    """Call aten op `target` ("aten::name.overload") on the inputs. args (a list) and kwargs (a dict)
    are JSON templates: {"__input__": i} is tensors[i], {"__dtype__": name} a torch dtype,
    {"__tuple__": [...]} a tuple (also __memory_format__, __layout__, __device__);
    dtypes[i] is the torch dtype input i had in the model (the Program keeps float32/int32)."""
    import torch
    ts = []
    for i, t in enumerate(tensors):
        a = np.asarray(t)
        tt = torch.from_numpy(np.ascontiguousarray(a).reshape(a.shape))    # (ascontiguousarray makes 0-d 1-d)
        if dtypes and dtypes[i] and dtypes[i].startswith("complex"):      # from (real, imaginary) pairs
            tt = torch.view_as_complex(tt.to(torch.float32).contiguous()).to(getattr(torch, dtypes[i]))
        elif dtypes and dtypes[i]:
            tt = tt.to(getattr(torch, dtypes[i]))
        ts.append(tt)

    def decode(v):
        if isinstance(v, dict):
            if "__input__" in v:
                return ts[v["__input__"]]
            if "__dtype__" in v:
                return getattr(torch, v["__dtype__"])
            if "__tuple__" in v:
                return tuple(decode(x) for x in v["__tuple__"])
            if "__memory_format__" in v:
                return getattr(torch, v["__memory_format__"])
            if "__layout__" in v:
                return getattr(torch, v["__layout__"])
            if "__device__" in v:
                return torch.device(v["__device__"])
            return {k: decode(x) for k, x in v.items()}
        if isinstance(v, list):
            return [decode(x) for x in v]
        return v

    ns, _, rest = target.partition("::")
    if ns == "quantized_decomposed":
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the namespace)
    elif ns == "vkq":
        from ..passes import torch_ops  # noqa: F401  (registers vkq's own)
    name, _, overload = rest.partition(".")
    op = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
    with torch.no_grad():
        out = op(*decode(args), **{k: decode(v) for k, v in (kwargs or {}).items()})
    if isinstance(out, (tuple, list)):
        return tuple(_as_numpy(o) for o in out)
    return _as_numpy(out)


def _as_numpy(t):
    # (a lazy conjugate or negation, aten._conj's view, has no numpy form until resolved; a
    # complex tensor leaves as its (real, imaginary) pairs, the program's form of it)
    t = t.detach().resolve_conj().resolve_neg()
    return _view_as_real(t).numpy() if t.is_complex() else t.numpy()


def _view_as_real(t):
    import torch
    return torch.view_as_real(t.to(torch.complex64))


# ---------------------------------------------------------------- registration

_cpu("linear", linear, "Float x @ weight.T + bias.")
_cpu("torch_op", torch_op, "Any aten op, called through torch (torch needed at run time).")
