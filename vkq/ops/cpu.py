"""CPU-only ops: what a lowered model runs in float (or on int8 without a kernel) between
Vulkan segments. Registered with no build(), so the executor runs their numpy references.

Every reference takes logical numpy arrays and JSON attrs and needs no torch, except
`torch_op`, the generic fallback, which calls the aten op by its qualified name.

  layer_norm(x, weight, bias; normalized_shape, eps)     softmax / log_softmax(x; dim)
  sigmoid, tanh, relu, silu, exp, neg, abs, sqrt, rsqrt(x)      gelu(x; approximate)
  hardtanh(x; min_val, max_val)
  add, sub, mul, div(a[, b]; scalar, scalar_first, alpha)   (b absent: the scalar operand)
  matmul, bmm(a, b)      linear(x, weight, bias)      conv2d(x, weight, bias; stride, padding, dilation, groups)
  reshape(x; shape)      permute(x; dims)      transpose(x; dim0, dim1)      (any dtype, int8 too)
  mean(x; dims, keepdim)      cat(*xs; dim)
  torch_op(*tensors; target, args, kwargs, dtypes)   anything else, through torch
"""
from __future__ import annotations

import math

import numpy as np

from ..registry import register_op

F32 = np.float32


def _f(x):
    return np.asarray(x, dtype=F32)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erf elementwise in float64 (math.erf; numpy has none)."""
    return _ERF(np.asarray(x, np.float64)).astype(np.float64)


def _cpu(name, fn, doc=""):
    """Register a CPU op `name` whose reference is fn."""
    cls = type(name, (), {"name": name, "reference": staticmethod(fn), "__doc__": doc})
    register_op(cls)
    return fn


# ---------------------------------------------------------------- normalisation, activations

def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    x = _f(x).astype(np.float64)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return (y * _f(weight) + _f(bias)).astype(F32)


def softmax(x, *, dim=-1):
    x = _f(x).astype(np.float64)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return (e / e.sum(axis=dim, keepdims=True)).astype(F32)


def log_softmax(x, *, dim=-1):
    x = _f(x).astype(np.float64)
    m = x.max(axis=dim, keepdims=True)
    return (x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))).astype(F32)


def gelu(x, *, approximate="none"):
    x = _f(x).astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + _erf(x / math.sqrt(2)).astype(np.float64))
    return y.astype(F32)


def hardtanh(x, *, min_val=-1.0, max_val=1.0):
    return np.clip(_f(x), F32(min_val), F32(max_val))


UNARY = {
    "sigmoid": lambda x: (1 / (1 + np.exp(-_f(x).astype(np.float64)))).astype(F32),
    "tanh": lambda x: np.tanh(_f(x)),
    "relu": lambda x: np.maximum(_f(x), F32(0)),
    "silu": lambda x: (_f(x) / (1 + np.exp(-_f(x).astype(np.float64)))).astype(F32),
    "exp": lambda x: np.exp(_f(x)),
    "neg": lambda x: -_f(x),
    "abs": lambda x: np.abs(_f(x)),
    "sqrt": lambda x: np.sqrt(_f(x)),
    "rsqrt": lambda x: (1 / np.sqrt(_f(x).astype(np.float64))).astype(F32),
}


# ---------------------------------------------------------------- arithmetic

def _binary(fn):
    def reference(a, b=None, *, scalar=None, scalar_first=False, alpha=1):
        a = _f(a)
        other = F32(scalar) if b is None else _f(b)
        if alpha != 1:
            other = other * F32(alpha)
        return fn(other, a) if (b is None and scalar_first) else fn(a, other)
    return reference


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def matmul(a, b):
    return np.matmul(_f(a), _f(b))


def linear(x, weight, bias):
    return (_f(x) @ _f(weight).T + _f(bias)).astype(F32)


def conv2d(x, weight, bias, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """Float conv2d by im2col (N, C, H, W) x (OC, C/groups, KH, KW)."""
    x, w = _f(x), _f(weight)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((n, c, kh, kw, oh, ow), F32)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
    out = np.empty((n, oc, oh, ow), F32)
    og = oc // groups
    for g in range(groups):
        cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[g * og:(g + 1) * og].reshape(og, cg * kh * kw)
        out[:, g * og:(g + 1) * og] = np.einsum("ok,nkp->nop", wg, cg_cols).reshape(n, og, oh, ow)
    return out + _f(bias).reshape(1, oc, 1, 1)


# ---------------------------------------------------------------- shapes (any dtype)

def reshape(x, *, shape):
    return np.asarray(x).reshape(shape)


def permute(x, *, dims):
    return np.ascontiguousarray(np.transpose(np.asarray(x), dims))


def transpose(x, *, dim0, dim1):
    return np.ascontiguousarray(np.swapaxes(np.asarray(x), dim0, dim1))


def mean(x, *, dims=None, keepdim=False):
    axes = None if dims is None else tuple(dims)
    return _f(x).astype(np.float64).mean(axis=axes, keepdims=keepdim).astype(F32)


def cat(*xs, dim=0):
    return np.concatenate([np.asarray(x) for x in xs], axis=dim)


# ---------------------------------------------------------------- the generic fallback

DTYPE_NAMES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
               "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
               "bool": "bool"}


def torch_op(*tensors, target, args, kwargs=None, dtypes=None):
    """Call aten op `target` ("aten::name.overload") on the inputs. args (a list) and kwargs (a dict)
    are JSON templates: {"__input__": i} is tensors[i], {"__dtype__": name} a torch dtype,
    {"__tuple__": [...]} a tuple (also __memory_format__, __layout__, __device__);
    dtypes[i] is the torch dtype input i had in the model (the Program keeps float32/int32)."""
    import torch
    ts = []
    for i, t in enumerate(tensors):
        tt = torch.from_numpy(np.ascontiguousarray(t))
        if dtypes and dtypes[i]:
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
    name, _, overload = rest.partition(".")
    op = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
    with torch.no_grad():
        out = op(*decode(args), **{k: decode(v) for k, v in (kwargs or {}).items()})
    if isinstance(out, (tuple, list)):
        return tuple(o.detach().numpy() for o in out)
    return out.detach().numpy()


# ---------------------------------------------------------------- registration

_cpu("layer_norm", layer_norm, "Float layer norm over the trailing normalized_shape dims.")
_cpu("softmax", softmax, "Float softmax along dim.")
_cpu("log_softmax", log_softmax, "Float log-softmax along dim.")
_cpu("gelu", gelu, "Float GELU (erf, or the tanh approximation).")
_cpu("hardtanh", hardtanh, "Float clamp to [min_val, max_val].")
for _name, _fn in UNARY.items():
    _cpu(_name, _fn, f"Float elementwise {_name}.")
for _name, _fn in BINARY.items():
    _cpu(_name, _binary(_fn), f"Float elementwise {_name} with broadcasting (or a scalar operand).")
_cpu("matmul", matmul, "Float matmul (numpy broadcasting rules).")
_cpu("bmm", matmul, "Float batched matmul.")
_cpu("linear", linear, "Float x @ weight.T + bias.")
_cpu("conv2d", conv2d, "Float conv2d (im2col).")
_cpu("reshape", reshape, "Row-major reshape (view, flatten, squeeze, unsqueeze) of any dtype.")
_cpu("permute", permute, "Permute the dims of any dtype.")
_cpu("transpose", transpose, "Swap two dims of any dtype.")
_cpu("mean", mean, "Float mean over dims.")
_cpu("cat", cat, "Concatenate along dim (any dtype, all inputs alike).")
_cpu("torch_op", torch_op, "Any aten op, called through torch (torch needed at run time).")
