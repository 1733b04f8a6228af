"""Linear layers y = x @ W^T + b with int4 group-wise weights (vkq/int4.py), float32 in and out.

  linear_int4   x f32 (..., K): the weights dequantized in registers, float activations
                (torchao's int4 weight-only, ExecuTorch's "4w")
  linear_8da4w  x f32 (..., K): each row quantized to int8 on the device exactly as
                linear_dynamic does it (quantize_rows, shaders/linear_rowq.comp), integer dot
                products of int8 x with the int4 weights in each group, the group scales
                applied in float32 ("8da4w": int8 dynamic activations, int4 weights)

The node (both ops): inputs x, qweight int32 (N, ng * G / 8), scale f32 (N, ng), zero int32
(N, ng), bias f32 (N,) [, offset f32 (N, ng)]; attrs group_size (G) [, bits 8: GGUF Q8_0's
8-bit groups, qweight (N, ng * G / 4) int8 values four a word read as u, zero 0, no offset].
The weight of (n, k) in group g = k // G is  f32(u - zero[n, g]) * scale[n, g] [+ offset[n, g]]  (vkq.int4.dequantize);
ng = ceil(K / G), the last group partial where G does not divide K. vkq.int4.GroupWeights
holds these arrays (int4_constants makes them a node's constants).

The references below are the specification; shaders/linear_int4.comp follows them operation
for operation, so the device equals them bit for bit:
  per (row r, column n, group g), over the group's G positions in ascending k (padding: x = 0, u = 0)
    linear_int4   A = A + x[r, k] * f32(u - z)  and (offset) B = B + x[r, k], float32 from 0.0
                  t = A * s  (offset: t = (A * s) + (B * m))
    linear_8da4w  (q, row_scale, xzp) = quantize_rows(x)   (vkq/ops/linear.py)
                  A = sum over the real k of (q - xzp) * (u - z)   (exact integers)
                  B = sum over the real k of (q - xzp)             (offset)
                  t = f32(A) * s  (offset: t = (f32(A) * s) + (f32(B) * m))
  strand j in 0..7: S_j = sum of t over g = j, j + 8, j + 16, ... in ascending g, from 0.0
  acc = ((S_0 + S_1) + (S_2 + S_3)) + ((S_4 + S_5) + (S_6 + S_7))
  linear_int4   out = acc + bias;   linear_8da4w   out = (acc * row_scale) + bias
every float operation rounded once to float32 (no fused multiply-add).

Kernels, both ops: shaders/linear_int4.comp for up to 4 rows (M = 1, decoding, is the GEMV): a
workgroup of 8 lanes (the 8 strands) owns INT4_TN columns of a 4-row block and reads its weights
once. More rows (prefill): shaders/linear_int4_gemm.comp, every lane a GEMM_TM x GEMM_TN tile
walking the groups strand by strand, so that each unpacked nibble serves 8 rows (float x there
needs K % 4 == 0, and 8-bit groups have no GEMM variant: else the 4-row kernel runs over the
row blocks). DOT variants (8da4w) where
device.dot_product; TEXEL variants where the device takes texel loads.
"""
from __future__ import annotations

import numpy as np

from ..int4 import GROUP_SIZES, GroupWeights, padding_mask, unpack
from ..registry import register_op
from .linear import _rows, _up4, quantize_rows, quantize_rows_dispatch, use_dot_product

STRANDS = 8      # the fixed number of partial sums over the groups (the spec; the workgroup width)
INT4_TN = 16     # columns per row of 8 lanes, several rows (M > 1)
GEMV_TN = 32     # one row: 32 columns (lavapipe, 1x4096x4096, CPU time: 0.84x of 16's; 64 no better)
MAX_ROWS = 4     # rows per workgroup (one 4-row block); more rows: the GEMM
GEMM_TM, GEMM_TN = 8, 8   # the GEMM's tile a lane (shaders/linear_int4_gemm.comp)
GEMM_LANES = 16           # lanes a workgroup along the column tiles (each its own tile)


class Int4NodeError(ValueError):
    """An int4 linear node whose constants or attrs do not fit each other."""


# -- the references ---------------------------------------------------------------------------

def _groups(qweight, scale, zero, offset, k: int, group_size: int, bits: int = 4):
    """(u int32 (N, ng, G), z (N, ng, 1), scale, offset, real mask (ng, G)) after the checks.
    bits 8 (GGUF Q8_0): qweight holds int8 values four a word (byte b of word i: k = 4i + b),
    read as u with z = 0."""
    g = int(group_size)
    if g not in GROUP_SIZES:
        raise Int4NodeError(f"group_size {g}: expected one of {GROUP_SIZES}")
    if bits not in (4, 8):
        raise Int4NodeError(f"bits {bits}: expected 4 or 8")
    ng = -(-k // g)
    n, width = qweight.shape[0], ng * g * bits // 32
    if qweight.shape != (n, width) or np.shape(scale) != (n, ng) or np.shape(zero) != (n, ng) \
            or (offset is not None and np.shape(offset) != (n, ng)):
        raise Int4NodeError(f"int{bits} weights for K = {k} in groups of {g} need qweight ({n}, {width}), "
                            f"scale / zero{' / offset' if offset is not None else ''} ({n}, {ng}); got "
                            f"{qweight.shape}, {np.shape(scale)}, {np.shape(zero)}")
    if bits == 8 and (offset is not None or np.any(zero)):
        raise Int4NodeError("8-bit groups take zero points 0 and no offset (GGUF Q8_0)")
    u = (unpack(qweight) if bits == 4 else
         np.ascontiguousarray(qweight, np.int32).view(np.int8).astype(np.int32)).reshape(n, ng, g)
    return u, np.asarray(zero, np.int64)[:, :, None], np.asarray(scale, np.float32), \
        None if offset is None else np.asarray(offset, np.float32), padding_mask(k, g)


def _strand_sum(t):
    """t float32 (..., ng) -> the strands' sum (..., ) in the fixed order of the module docstring."""
    s = np.zeros(t.shape[:-1] + (STRANDS,), np.float32)
    for g in range(t.shape[-1]):
        s[..., g % STRANDS] = s[..., g % STRANDS] + t[..., g]
    a = (s[..., 0] + s[..., 1]) + (s[..., 2] + s[..., 3])
    b = (s[..., 4] + s[..., 5]) + (s[..., 6] + s[..., 7])
    return a + b


def reference_int4(x, qweight, scale, zero, bias, offset=None, *, group_size, bits=4):
    x = np.asarray(x, np.float32)
    k = x.shape[-1]
    u, z, s, m, real = _groups(qweight, scale, zero, offset, k, group_size, bits)
    n, ng, g = u.shape
    x2 = x.reshape(-1, k)
    xg = np.zeros((x2.shape[0], ng * g), np.float32)
    xg[:, :k] = x2
    xg = xg.reshape(-1, ng, g)
    d = (u - z).astype(np.float32)                      # exact
    a = np.zeros((x2.shape[0], n, ng), np.float32)
    b = np.zeros((x2.shape[0], ng), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):      # (a row holding an infinity: its NaNs)
        for i in range(g):
            a = a + xg[:, None, :, i] * d[None, :, :, i]
            if m is not None:
                b = b + xg[:, :, i]
        t = a * s[None]
        if m is not None:
            t = t + b[:, None, :] * m[None]
        out = _strand_sum(t) + np.asarray(bias, np.float32)
    return out.reshape(x.shape[:-1] + (n,))


def reference_8da4w(x, qweight, scale, zero, bias, offset=None, *, group_size, bits=4):
    x = np.asarray(x, np.float32)
    k = x.shape[-1]
    u, z, s, m, real = _groups(qweight, scale, zero, offset, k, group_size, bits)
    n, ng, g = u.shape
    q, row_scale, xzp = quantize_rows(x.reshape(-1, k))
    qg = np.zeros((q.shape[0], ng * g), np.int64)
    qg[:, :k] = q.astype(np.int64) - xzp[:, None]
    qg = qg.reshape(-1, ng, g)                          # (q - xzp) at the real k, 0 at padding
    a = np.einsum("rgk,ngk->rng", qg, (u - z) * real[None])
    t = a.astype(np.float32) * s[None]
    if m is not None:
        t = t + qg.sum(axis=2).astype(np.float32)[:, None, :] * m[None]
    out = _strand_sum(t) * row_scale[:, None] + np.asarray(bias, np.float32)
    return out.reshape(x.shape[:-1] + (n,))


# -- constants and packing --------------------------------------------------------------------

def int4_constants(gw: GroupWeights, bias=None) -> dict:
    """A linear_int4 / linear_8da4w node's constants after x, in order: qweight, scale, zero,
    bias [, offset]; bias float (N,) or None (zeros). 8-bit groups (GGUF Q8_0): qweight their
    int8 values four to an int32 word (the node's attr bits = 8: node_attrs)."""
    b = np.zeros(gw.n, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(gw.n)
    qw = gw.qweight if gw.bits == 4 else np.ascontiguousarray(gw.qweight).view(np.int32)
    consts = {"qweight": qw, "scale": gw.scale, "zero": gw.zero, "bias": b}
    if gw.offset is not None:
        consts["offset"] = gw.offset
    return consts


def node_attrs(gw: GroupWeights) -> dict:
    """The attrs of a linear_int4 / linear_8da4w node on gw (bits only where 8)."""
    return {"group_size": gw.group_size, **({"bits": 8} if gw.bits == 8 else {})}


def pack_int4_tiles(qweight, ng: int, g: int, tn: int) -> np.ndarray:
    """qweight int32 (N, ng * gw) (gw = g / 8 words a group, 8-bit groups g / 4) -> the kernels'
    tiling (shaders/linear_int4.comp): N padded to a multiple of tn with zero words; ivec4
    ((nt*ng + grp)*tn/4 + j)*gw + i holds word i of group grp of columns nt*tn + 4j .. +3, one
    column a component."""
    n, gw = qweight.shape[0], qweight.shape[1] // ng
    nt = -(-n // tn)
    p = np.zeros((nt * tn, ng, gw), np.int32)
    p[:n] = qweight.reshape(n, ng, gw)
    # (nt, j, c, grp, i) -> (nt, grp, j, i, c)
    return np.ascontiguousarray(p.reshape(nt, tn // 4, 4, ng, gw).transpose(0, 3, 1, 4, 2)).reshape(-1)


SWAR_TN = 32     # linear_8da4w without the dot product: its weight tiling's width


def pack_int4_swar(qweight, ng: int, g: int) -> np.ndarray:
    """qweight int32 (N, ng * g / 8) -> the tiling of linear_8da4w without the dot product
    (shaders/linear_int4.comp, SWAR): N padded to a multiple of 32 with u = 0; ivec4
    (nt*ng + grp)*g + kk holds value k = grp*g + kk of columns nt*32 .. +31, column 8j + 4h + c
    in nibble j + 4h of component c (so that one mask puts column blocks 2j and 2j + 1 into the
    two 16-bit halves of the words)."""
    n = qweight.shape[0]
    nt = -(-n // SWAR_TN)
    u = np.zeros((nt * SWAR_TN, ng * g), np.uint32)
    u[:n] = unpack(qweight)
    u = u.reshape(nt, SWAR_TN, ng, g).transpose(0, 2, 3, 1)          # (nt, grp, kk, column)
    p = np.arange(8)
    cols = 8 * (p % 4)[None, :] + 4 * (p // 4)[None, :] + np.arange(4)[:, None]   # (c, nibble) -> column
    words = np.bitwise_or.reduce(u[..., cols] << (4 * p).astype(np.uint32), axis=-1)   # (nt, grp, kk, c)
    return np.ascontiguousarray(words).view(np.int32).reshape(-1)


def pack_group_params(tn: int, *arrays) -> np.ndarray:
    """(N, ng) float32 arrays -> vec4 (nt, grp, j, a) = array a of columns nt*tn + 4j .. +3
    (padding columns 0)."""
    n, ng = arrays[0].shape
    nt = -(-n // tn)
    p = np.zeros((len(arrays), nt * tn, ng), np.float32)
    for i, a in enumerate(arrays):
        p[i, :n] = a
    # (a, nt, j, c, grp) -> (nt, grp, j, a, c)
    return np.ascontiguousarray(p.reshape(len(arrays), nt, tn // 4, 4, ng).transpose(1, 4, 2, 0, 3)).reshape(-1)


def column_tiles(info, nt: int) -> int:
    """Column tiles a workgroup (rows of 8 lanes): enough that a workgroup is a whole subgroup
    (a CPU driver's SIMD vector: lavapipe at 512 bits runs 16 lanes, and a workgroup of 8 left
    half of each vector idle), and no more than there are tiles."""
    return max(1, min(info.subgroup_size // STRANDS, nt, info.max_workgroup_invocations // STRANDS))


def _build(ctx, node, quantized_x: bool):
    x, wname, sname, zname, bname, *rest = node.inputs
    if len(rest) > 1:
        raise Int4NodeError(f"{node.name}: {len(node.inputs)} inputs, expected 5 or 6")
    shape = ctx.spec(x).shape
    r, k = _rows(shape), shape[-1]
    try:
        qw, scale, zero, bias = (np.asarray(ctx.constant(c)) for c in (wname, sname, zname, bname))
        offset = np.asarray(ctx.constant(rest[0]), np.float32) if rest else None
    except KeyError:
        raise Int4NodeError(f"{node.name}: int4 linear kernels need their weights as constants") from None
    g, bits = int(node.attrs["group_size"]), int(node.attrs.get("bits", 4))
    _groups(qw, scale, zero, offset, k, g, bits)        # the shape checks
    n, ng = qw.shape[0], -(-k // g)
    want = shape[:-1] + (n,)
    if ctx.spec(node.outputs[0]).shape != want:
        raise Int4NodeError(f"{node.name}: output shape {ctx.spec(node.outputs[0]).shape}, expected {want}")
    uniform = zero.size > 0 and bool(np.all(zero == zero.flat[0]))
    zc = int(zero.flat[0]) if zero.size else 0
    if offset is not None and not uniform:
        raise Int4NodeError(f"{node.name}: per-group zero points with an offset: no kernel takes both "
                            "(GGUF Q4_1 has zero 0, torchao's groups no offset)")
    dot = quantized_x and use_dot_product(ctx.device, k)
    if r > MAX_ROWS and (quantized_x or k % 4 == 0) and bits == 4:
        return _build_gemm(ctx, node, x, r, k, g, (qw, scale, zero, bias, offset), uniform, dot, quantized_x)
    swar = quantized_x and not dot and bits == 4
    tn = SWAR_TN if swar else GEMV_TN if r == 1 else INT4_TN
    nt = -(-n // tn)
    second = (zero.astype(np.float32),) if not uniform else (offset,) if offset is not None else ()
    defines = {"X_Q8" if quantized_x else "X_F32": 1}
    defines.update({"ZERO": 1} if not uniform else {"OFFSET": 1} if offset is not None else {})
    if not quantized_x and k % 4 == 0:
        defines["VEC4"] = 1
    if dot:
        defines["DOT"] = 1
    if bits == 8:
        defines["W8"] = 1
    pad_bias = np.zeros(nt * tn, np.float32)
    pad_bias[:n] = bias.reshape(n)
    bufs = [ctx.const_buffer(pack_int4_swar(qw, ng, g) if swar else pack_int4_tiles(qw, ng, g, tn)),
            ctx.const_buffer(pack_group_params(tn, scale.astype(np.float32), *second)),
            ctx.const_buffer(pad_bias), ctx.buffer(node.outputs[0])]
    mr = min(r, MAX_ROWS)
    ct = column_tiles(ctx.device.info, nt)
    groups, local = (-(-nt // ct), -(-r // MAX_ROWS), 1), (STRANDS, ct)
    ctx.device.info.check_loop_budget(-(-ng // STRANDS) * (1 + g // 8) + 8, f"{node.op} over K = {k}")
    k4 = _up4(k) // 4   # (8-bit groups: as many steps of 8 k, two words a column each)
    push = (r, k, n, ng, k4)
    if not quantized_x:
        return [ctx.device.dispatch("linear_int4", [ctx.buffer(x)] + bufs, groups, local=local,
                                    spec=(mr, tn, g, zc), push=push, defines=defines)]
    quant, q, rowq = quantize_rows_dispatch(ctx, x, r, k)
    return [s for s in [quant] if s is not None] + [ctx.device.dispatch("linear_int4", [q] + bufs + [rowq], groups, local=local,
                                       spec=(mr, tn, g, zc), push=push, defines=defines)]


def _build_gemm(ctx, node, x, r: int, k: int, g: int, consts, uniform: bool, dot: bool, quantized_x: bool):
    """More than MAX_ROWS rows: shaders/linear_int4_gemm.comp, every lane a GEMM_TM x GEMM_TN tile
    (float x needs K % 4 == 0; else the row-blocked GEMV kernel takes it)."""
    qw, scale, zero, bias, offset = consts
    n, ng = qw.shape[0], -(-k // g)
    tm, tn = GEMM_TM, GEMM_TN
    nt, rt = -(-n // tn), -(-r // tm)
    second = offset if offset is not None else zero.astype(np.float32)
    defines = {"X_Q8" if quantized_x else "X_F32": 1, "OFFSET" if offset is not None else "ZERO": 1}
    if dot:
        defines["DOT"] = 1
    pad_bias = np.zeros(nt * tn, np.float32)
    pad_bias[:n] = bias.reshape(n)
    bufs = [ctx.const_buffer(pack_int4_tiles(qw, ng, g, tn)),
            ctx.const_buffer(pack_group_params(tn, scale.astype(np.float32), second)),
            ctx.const_buffer(pad_bias), ctx.buffer(node.outputs[0])]
    lanes = min(GEMM_LANES, ctx.device.info.max_workgroup_invocations)
    groups, local = (-(-nt // lanes), rt, 1), (lanes, 1)
    ctx.device.info.check_loop_budget(ng * (1 + g // 8) + 2 * STRANDS + 8, f"{node.op} over K = {k}")
    zc = int(zero.flat[0]) if zero.size else 0
    if not quantized_x:
        push = (r, k, n, ng, k // 4)
        return [ctx.device.dispatch("linear_int4_gemm", [ctx.buffer(x)] + bufs, groups, local=local,
                                    spec=(tm, tn, g, zc), push=push, defines=defines)]
    quant, q, rowq = quantize_rows_dispatch(ctx, x, r, k)
    push = (r, k, n, ng, _up4(k) // 4)
    return [s for s in [quant] if s is not None] + [
        ctx.device.dispatch("linear_int4_gemm", [q] + bufs + [rowq], groups, local=local, spec=(tm, tn, g, zc),
                            push=push, defines=defines)]


@register_op
class LinearInt4:
    """float32 x (..., K), qweight int32 (N, ng*G/8), scale f32 (N, ng), zero int32 (N, ng),
    bias f32 (N,) [, offset f32 (N, ng)] -> f32 (..., N); attrs group_size [, bits 8]. Float
    activations x int4 (or 8-bit) group-wise weights dequantized in registers, the order of the
    module docstring."""
    name = "linear_int4"
    shaders = ("linear_int4", "linear_int4_gemm")
    reference = staticmethod(reference_int4)

    def build(ctx, node):
        return _build(ctx, node, quantized_x=False)


@register_op
class Linear8da4w:
    """float32 x (..., K), the weights of linear_int4 -> f32 (..., N); attrs group_size. x
    quantized per row on the device (linear_dynamic's quantize_rows), int8 x int4 products summed
    exactly per group, the group scales in float32 (the module docstring's order)."""
    name = "linear_8da4w"
    shaders = ("linear_rowq", "linear_int4", "linear_int4_gemm")
    reference = staticmethod(reference_8da4w)

    def build(ctx, node):
        return _build(ctx, node, quantized_x=True)
