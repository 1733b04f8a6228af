"""Linear layers y = x @ W^T + b with int8 weights (N, K), activations (..., K).

  linear_q8           int8 x (4H4W) -> int8 (4H4W): acc = (x - x_zp) @ W^T + bias, requantized per column
  linear_q8_fout      int8 x (4H4W) -> float32: f32((x - x_zp) @ W^T) * scale + bias
  linear_dynamic      float32 x -> float32: each row quantized to int8 on the device (quantize_rows),
                      then the int8 GEMM: f32(acc - zp_row * wsum) * (row_scale * w_scale) + bias
  linear_weight_only  float32 x -> float32: (x @ f32(W)^T) * w_scale + bias, float accumulation

The three int8 ops share one GEMM (shaders/linear_q8.comp), exact in int32. The activation zero
point never widens the operands:  sum_k (x - x_zp) w = sum_k x w - x_zp * wsum[n],  with
wsum[n] = sum_k W[n, k] folded into a per-column constant when the op is built.

Weights are packed once, at build time, into the tiling the kernel reads (pack_weight): one
ivec4 = 4 k x 4 n, so one 128-bit load feeds a 4 x 4 block of multiply-adds per x row.

Which kernel, decided when the dispatch is built (_gemm_q8):
  one 4-row block of x (batch-1 decoding)  shaders/linear_gemv.comp: lanes split K, weights streamed once;
                                           on CPU drivers lanes own columns (COLS, gemv_over_columns)
  more rows                                shaders/linear_q8.comp: register-tiled GEMM, x shared by shuffles
  device.dot_product and K <= DOT_MAX_K    the DOT variants of both: 4 multiply-adds per instruction
  no usable subgroups (subgroup_lanes)     the PLAIN variants of both
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..device import grid_1d
from ..packing import as_nchw
from ..quant import (INT8_MAX, INT8_MIN, activation_bounds, dequantize, quantize_multipliers, requant_clamp_frac,
                     requant_clamp_params, requantize, shift_word, split_bias)
from ..registry import register_op
from .lut import device_table

# Share x across a subgroup with subgroupShuffle (off: the PLAIN variants, no subgroup operations).
SUBGROUP_SHARING = True
ROW_TILES = (4, 8, 16, 32)   # rows per workgroup; 32 x 4 columns a lane was fastest on lavapipe
# int8 on CPU drivers sharing x by shuffles, also 64 rows: then at 16 lanes (lavapipe at 512
# bits) a step's 16 x items are one a lane (KSTEP 1; with 32 rows each lane loads 2 k-blocks a
# step): 256x1024x2048 146 -> 174 GOP/s, 128x1536x384 65 -> 121, 128x384x{384,1536} 1.19x,
# 256x2048x4096 155 -> 187; at 8 and 4 lanes 1.04x and even. 128 rows: 0.7-0.85x of 64 (the
# accumulators spill). GPUs keep 32: 64 rows x 4 columns would be 256 accumulator registers a lane.
CPU_INT8_ROW_TILES = ROW_TILES + (64,)
TN = 4                       # columns per lane
PLAIN_WIDTH = 64             # workgroup width of the PLAIN variants
ROWQ_WIDTH = 64              # workgroup width of the PLAIN per-row quantizer (a power of two)
GEMV_ROWS = 4                # x of at most this many packed rows (one 4-row block) runs as a GEMV
GEMV_TN = 16                 # columns per GEMV workgroup
COLS_WIDTH = 16              # GEMV lanes a workgroup over columns (COLS) where no subgroup size
# The GEMV's lanes split K (a cross-lane sum then) or own columns (COLS: each lane runs all of K):
# None chooses per device (gemv_over_columns); True / False forces one (the tests take both).
GEMV_COLS = None

# The integer dot product saturates its int32 accumulator; each int8 x int8 product is at most
# 2^14 in magnitude, so sums of up to DOT_MAX_K of them (every partial sum included) stay inside
# int32 and saturation never triggers. Longer K takes the kernels without the dot product.
DOT_MAX_K = ((1 << 31) - 1) >> 14

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _up4(n: int) -> int:
    return (n + 3) // 4 * 4


def gemv_over_columns(info) -> bool:
    """Whether the int8 GEMV's lanes own columns (COLS) rather than split K on this device."""
    return info.is_software if GEMV_COLS is None else bool(GEMV_COLS)


def cols_width(info) -> int:
    """The COLS GEMV's lanes a workgroup (its column tile: 4 columns a lane)."""
    return subgroup_lanes(info) or min(COLS_WIDTH, info.max_workgroup_invocations)


# -- parameters ------------------------------------------------------------------------------

def linear_q8_params(x_scale, w_scales, out_scale, bias_float=None, activation=None, out_zp=0):
    """Float quantization parameters -> the integer constants and attrs of linear_q8:
    (bias float64 (N,), multiplier int32 (N,), shift int32 (N,), qmin, qmax).

    bias[n] = b[n] / (x_scale * w_scale[n])   (the accumulator's scale, not rounded: its fraction
                                              is kept, vkq.quant.split_bias)
    multiplier, shift = quantize_multipliers(x_scale * w_scale[n] / out_scale)
    activation: None, "relu", "relu6" or ("hardtanh", lo, hi), fused as (qmin, qmax)."""
    w_scales = np.atleast_1d(np.asarray(w_scales, dtype=np.float64))
    acc_scale = float(x_scale) * w_scales
    if bias_float is None:
        bias = np.zeros(w_scales.shape, np.float64)
    else:
        bias = np.asarray(bias_float, dtype=np.float64) / acc_scale
        if not np.all(np.abs(np.rint(bias)) <= INT32_MAX):
            raise ValueError("bias does not fit int32 at the accumulator's scale")
    m, s = quantize_multipliers(acc_scale / float(out_scale))
    name, bounds = (activation[0], tuple(activation[1:])) if isinstance(activation, (tuple, list)) else (activation, None)
    qmin, qmax = activation_bounds(name, float(out_scale), int(out_zp), bounds)
    return bias, m, s, qmin, qmax


# -- the per-row quantization of linear_dynamic ------------------------------------------------

_INV_255 = np.float32(1.0 / 255.0)
_MIN_SCALE = np.float32(2.0 ** -60)
_RECIP_MAGIC = np.uint32(0x7EF311C7)


def reciprocal(s) -> np.ndarray:
    """1/s in float32 with + - * only: a bit-pattern first guess and three Newton steps,
    y <- y * (2 - s * y). Within 2 ulp of 1/s for normal s; bit for bit what the shader computes."""
    s = np.asarray(s, dtype=np.float32)
    y = (_RECIP_MAGIC - s.view(np.uint32)).view(np.float32)
    for _ in range(3):
        y = y * (np.float32(2.0) - s * y)
    return y


def quantize_rows(x):
    """float32 (R, K) -> (q int8 (R, K), scale float32 (R,), zero_point int32 (R,)), asymmetric per row:
        mn = min(0, min_k x),  mx = max(0, max_k x)
        scale = max((mx - mn) * f32(1/255), 2^-60)
        inv = reciprocal(scale)
        zp = clamp(-128 - rint(mn * inv), -128, 127)
        q  = clamp(rint(x * inv) + zp, -128, 127)
    float32 throughout, no division (GPU division is not correctly rounded; + - * are), so the
    shader (shaders/linear_rowq.comp) agrees bit for bit. The 2^-60 floor keeps every
    intermediate a normal float, where GPUs may flush denormals. A row holding a NaN or an
    infinity: scale NaN, zero point 0, q 0, so that its outputs are NaN (PT2E's range of it
    is NaN or infinite, and so are they)."""
    x = np.asarray(x, dtype=np.float32)
    finite = np.isfinite(x).all(axis=1)
    x = np.where(finite[:, None], x, np.float32(0))
    mn = x.min(axis=1, initial=0)
    mx = x.max(axis=1, initial=0)
    scale = np.maximum((mx - mn) * _INV_255, _MIN_SCALE)
    inv = reciprocal(scale)
    zp = np.clip(np.float32(-128) - np.rint(mn * inv), -128, 127)
    q = np.clip(np.rint(x * inv[:, None]) + zp[:, None], -128, 127)
    q = np.where(finite[:, None], q, 0)
    scale = np.where(finite, scale, np.float32(np.nan))
    return q.astype(np.int8), scale, np.where(finite, zp, 0).astype(np.int32)


# -- tiling and weight packing ---------------------------------------------------------------

@dataclass(frozen=True)
class Tiles:
    """How a GEMM dispatch is cut: tm rows per workgroup, tn columns per lane, sg lanes sharing
    x through subgroup shuffles (1: the PLAIN variant), kstep k-blocks per cooperative x load,
    width invocations per workgroup (= sg, or PLAIN_WIDTH for PLAIN)."""
    tm: int
    tn: int
    sg: int
    kstep: int
    width: int

    @property
    def plain(self) -> bool:
        return self.sg == 1

    def spec(self):
        return (self.tm, self.tn, self.sg, self.kstep)


def subgroup_lanes(info) -> int:
    """The subgroup size that the subgroup variants (x shared by subgroupShuffle in the GEMM, the
    partial sums added by subgroupAdd in the GEMV) may count on, or 0: take the PLAIN variants,
    which use no subgroup operations. Both kinds of variant are a workgroup of exactly one
    subgroup and assume every lane of it is there. The one place this is decided: where the
    device cannot promise full subgroups of this size, return 0 here."""
    sg = info.shuffle_lanes          # 0 where full subgroups of a known size are not sure
    if (not SUBGROUP_SHARING or not sg or sg > info.max_workgroup_invocations
            or "arithmetic" not in info.subgroup_operations):
        return 0
    return sg


def use_dot_product(device, k: int) -> bool:
    """The integer-dot-product variants: where the device enables them (device.dot_product,
    chosen per device: a CPU driver runs the instruction as 4 scalar multiplies) and K cannot
    saturate the accumulator (DOT_MAX_K)."""
    return bool(device.dot_product) and k <= DOT_MAX_K


def gemm_tiles(info, rows: int, rows_per_item: int) -> Tiles:
    """Tiles for `rows` rows on a device. An x item (what one lane loads) spans rows_per_item
    rows of one k-block: 4 for int8 (an ivec4), 1 for float (a vec4); kstep makes the items of
    a step a multiple of sg, so every lane loads one."""
    sg = subgroup_lanes(info)
    tiles = CPU_INT8_ROW_TILES if sg and info.type == "cpu" and rows_per_item == 4 else ROW_TILES
    tm = next((t for t in tiles if t >= rows), tiles[-1])
    if not sg:
        return Tiles(tm, TN, 1, 1, min(PLAIN_WIDTH, info.max_workgroup_invocations))
    return Tiles(tm, TN, sg, sg // math.gcd(sg, tm // rows_per_item), sg)


def pack_weight(w, tn: int, kstep: int, dot: bool = False) -> np.ndarray:
    """(N, K) int8 or float32 -> the kernel's tiling: N padded to a multiple of tn, K to 4*kstep*
    ceil(K4/kstep), zeros. Block (nt, kb, j) holds k = 4kb..4kb+3 x n = nt*tn + 4j .. +3, with
    k the slower index: int8 -> one ivec4 (int32 i = k, byte b = n); float32 -> 4 vec4.
    dot (int8, for the integer dot product): each block transposed, int32 b = n, byte i = k, so
    that a word holds 4 k of one column as a 4H4W x word holds 4 k of one row."""
    w = np.asarray(w)
    n, k = w.shape
    k4 = _up4(k) // 4
    k4w = -(-k4 // kstep) * kstep
    nt = -(-n // tn)
    p = np.zeros((nt * tn, 4 * k4w), w.dtype)
    p[:n, :k] = w
    # (nt, j, b, kb, i) -> (nt, kb, j, i, b), or (nt, kb, j, b, i) for dot
    order = (0, 3, 1, 2, 4) if dot else (0, 3, 1, 4, 2)
    blocks = np.ascontiguousarray(p.reshape(nt, tn // 4, 4, k4w, 4).transpose(order)).reshape(-1)
    return blocks.view("<i4").astype(np.int32) if w.dtype == np.int8 else blocks.astype(np.float32)


def _columns(n: int, tn: int, cols, fill=0) -> np.ndarray:
    """Per-column constants, C arrays of n -> (n padded to tn, C) int32 words, floats as their
    bits; padding columns get `fill` (one value per constant)."""
    table = np.zeros((-(-n // tn) * tn, len(cols)), np.int32)
    table[:] = np.asarray(fill, np.int32)
    for i, c in enumerate(cols):
        c = np.asarray(c)
        table[:n, i] = c.view(np.int32) if c.dtype == np.float32 else c.astype(np.int32)
    return table


def _weight(ctx, node, k):
    """The op's weight constant, (N, K) int8; the output shape checked against it."""
    name = node.inputs[1]
    try:
        w = np.asarray(ctx.constant(name))
    except KeyError:
        raise ValueError(f"{name!r}: vkq linear kernels need the weight as a constant") from None
    if w.ndim != 2 or w.shape[1] != k or w.dtype != np.int8:
        raise ValueError(f"{name!r}: expected an int8 weight of shape (N, {k}), got {w.dtype} {w.shape}")
    _check_output(ctx, node, w)
    return w


def _gemm_q8(ctx, variant, x_buf, rows4: int, h: int, k: int, w, cols, out_buf, fill=0,
             push_tail=(0, 0, 0), extra_buf=None, dequant=None, epilogue=None):
    """The int8 GEMM dispatch over a 4H4W x of rows4 packed rows (h real rows per batch matrix);
    cols: the four per-column constants the variant reads (see shaders/linear_store.glsl);
    push_tail: (out_zp, qmin, qmax) of OUT_Q8; dequant: (scale, zero_point) of DEQUANT;
    extra_buf: binding 4, the row qparams (ROW_QPARAMS) or the table (LUT);
    epilogue: ROW_QPARAMS's (EPI, binding 5), linear_dynamic's float epilogue.
    A single row block runs as a GEMV (shaders/linear_gemv.comp), more as the tiled GEMM."""
    n, info = w.shape[0], ctx.device.info
    dot = use_dot_product(ctx.device, k)
    sg = subgroup_lanes(info)
    rb, k4 = rows4 // 4, _up4(k) // 4
    variant += ("DEQUANT",) if dequant is not None else ()
    defines = {v: 1 for v in variant + (("PLAIN",) if not sg else ()) + (("DOT",) if dot else ())}
    deq_scale, deq_zp = dequant if dequant is not None else (0.0, 0)
    if rows4 <= GEMV_ROWS and gemv_over_columns(info):
        width = cols_width(info)
        tn, kstep, shader, spec = 4 * width, 1, "linear_gemv", (min(h, 4), 4 * width)
        defines = {v: 1 for v in defines if v != "PLAIN"} | {"COLS": 1}
        nt = -(-n // tn)
        groups, local = (nt, rb, 1), (width,)
        info.check_loop_budget(k4 + 32, f"linear_gemv over K = {k}")    # the K loop, the epilogue's
    elif rows4 <= GEMV_ROWS:
        width = sg or min(PLAIN_WIDTH, info.max_workgroup_invocations)
        tn, kstep, shader, spec = GEMV_TN, width, "linear_gemv", (min(h, 4), GEMV_TN)
        nt = -(-n // tn)
        groups, local = (nt, rb, 1), (width,)
        # the K loop, the epilogue's, PLAIN's reduction over the lanes
        info.check_loop_budget(-(-k4 // kstep) + 32 + (0 if sg else 4 * (width + 1)), f"linear_gemv over K = {k}")
    else:
        t = gemm_tiles(info, rows4, 4)
        tn, kstep, shader, spec = t.tn, t.kstep, "linear_q8", t.spec()
        nt = -(-n // tn)
        groups, local = (-(-nt // t.width), -(-rb // (t.tm // 4)), 1), (t.width,)
        info.check_loop_budget(-(-k4 // kstep) + 24 * (t.tm // 4) + 8, f"linear_q8 over K = {k}")   # + the stores
    table = _columns(n, tn, cols, fill)
    bufs = [x_buf, ctx.const_buffer(pack_weight(w, tn, kstep, dot)), ctx.const_buffer(table), out_buf]
    bufs += [extra_buf] if extra_buf is not None else []
    if epilogue is not None:
        spec, bufs = tuple(spec) + (epilogue[0],), bufs + [epilogue[1]]
    return ctx.device.dispatch(shader, bufs, groups, local=local, spec=spec,
                               push=(rb, h, k4, n, nt) + tuple(push_tail) + (np.float32(deq_scale), int(deq_zp)),
                               defines=defines)


def _int8_input(spec):
    """(packed rows, rows of each batch matrix, K) of an int8 4H4W activation."""
    n, c, h, k = as_nchw(spec.shape)
    if spec.dtype != "int8" or spec.layout != "4H4W":
        raise ValueError(f"linear kernels read int8 4H4W activations, got {spec.dtype} {spec.layout}")
    return n * c * _up4(h), h, k


def _check_output(ctx, node, w):
    want = ctx.spec(node.inputs[0]).shape[:-1] + (w.shape[0],)
    if ctx.spec(node.outputs[0]).shape != want:
        raise ValueError(f"{node.name}: output shape {ctx.spec(node.outputs[0]).shape}, expected {want}")


def _dequant_attr(ctx, node):
    """(scale, zero_point) of a fused dequantize (attr dequant), or None; the output's dtype must
    match it (float32 with it, int8 without): the shader writes that many words of that kind."""
    deq, out = node.attrs.get("dequant"), ctx.spec(node.outputs[0]).dtype
    if out != ("float32" if deq else "int8"):
        raise ValueError(f"{node.name}: output {out} with dequant={deq!r}")
    if not deq:
        return None
    try:
        scale, zp = float(deq["scale"]), int(deq["zero_point"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{node.name}: dequant needs a float scale and an int zero_point, got {deq!r}") from None
    if not (np.isfinite(scale) and scale > 0 and INT8_MIN <= zp <= INT8_MAX):
        raise ValueError(f"{node.name}: dequant scale {scale} / zero_point {zp} out of range")
    return scale, zp


def _rows(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


# -- the ops ---------------------------------------------------------------------------------

@register_op
class LinearQ8:
    """int8 x (..., K) 4H4W, weight int8 (N, K), bias float64 or int32 (N,), multiplier/shift
    int32 (N,) -> int8 (..., N) 4H4W:  out = requantize((x - x_zp) @ W^T + B, multiplier, shift,
    out_zp, qmin, qmax, frac), (B, frac) = split_bias(bias, multiplier). On the device
    bias_eff = B - x_zp * wsum is folded at build time.
    Fused table (vkq/passes/fuse_epilogue.py): attr lut=True, input `table` (int8 (256,)):
    out = table[out + 128], exactly lut_q8 after it (a transformer's GELU after its FFN-up).
    Fused dequantize (the same pass): attr dequant={"scale", "zero_point"}: the output is float32,
    dequantize(out, scale, zero_point) (vkq/quant.py) of the int8 result, written row-major like
    linear_q8_fout's: a classifier's final dequantize costs no dispatch."""
    name = "linear_q8"
    shaders = ("linear_q8", "linear_gemv")

    def reference(x, weight, bias, multiplier, shift, *table, x_zp, out_zp, qmin=INT8_MIN, qmax=INT8_MAX,
                  lut=False, dequant=None):
        whole, frac = split_bias(bias, multiplier)
        acc = (x.astype(np.int64) - x_zp) @ weight.astype(np.int64).T + whole
        y = requantize(acc, multiplier, shift, out_zp, qmin, qmax, frac)
        if len(table) != int(bool(lut)):
            raise ValueError(f"linear_q8: {len(table)} table inputs for lut={bool(lut)}")
        y = np.asarray(table[0], np.int8)[y.astype(np.int64) + 128] if lut else y
        return dequantize(y, dequant["scale"], dequant["zero_point"]) if dequant else y

    def build(ctx, node):
        x, _, bname, mname, sname, *table = node.inputs
        a = node.attrs
        if len(table) != int(bool(a.get("lut"))):
            raise ValueError(f"{node.name}: {len(table)} table inputs for lut={bool(a.get('lut'))}")
        rows4, h, k = _int8_input(ctx.spec(x))
        w = _weight(ctx, node, k)
        mult, shift = ctx.constant(mname), ctx.constant(sname)
        whole, frac = split_bias(ctx.constant(bname), mult)
        bias_eff = whole - int(a["x_zp"]) * w.sum(axis=1, dtype=np.int64)
        if bias_eff.min() < INT32_MIN or bias_eff.max() > INT32_MAX:
            raise ValueError(f"{node.name}: bias - x_zp * sum(w) overflows int32")
        # requantize_clamped's constants (requant.glsl): (bias_eff, bound, m, lshift | rshift << 5 | frac)
        bound, lshift, m, rshift = requant_clamp_params(mult, shift)
        cols = [bias_eff, bound, m, shift_word(lshift, rshift, requant_clamp_frac(mult, shift, frac))]
        lut = ctx.const_buffer(device_table(ctx.constant(table[0]), "a fused epilogue")) if table else None
        return [_gemm_q8(ctx, ("OUT_Q8", "LUT") if table else ("OUT_Q8",), ctx.buffer(x), rows4, h, k, w, cols,
                         ctx.buffer(node.outputs[0]),
                         fill=(0, 0, 0, 1 << 5),   # padding columns: m = 0 with a valid shift
                         push_tail=(a["out_zp"], a.get("qmin", INT8_MIN), a.get("qmax", INT8_MAX)), extra_buf=lut,
                         dequant=_dequant_attr(ctx, node))]


@register_op
class LinearQ8Fout:
    """int8 x (..., K) 4H4W, weight int8 (N, K), bias f32 (N,), scale f32 (N,) -> f32 (..., N):
    out = f32((x - x_zp) @ W^T) * scale + bias, each float op rounded once (no fused
    multiply-add), so the device matches numpy bit for bit. |acc| must stay below 2^31."""
    name = "linear_q8_fout"
    shaders = ("linear_q8", "linear_gemv")

    def reference(x, weight, bias, scale, *, x_zp):
        acc = (x.astype(np.int64) - x_zp) @ weight.astype(np.int64).T
        return acc.astype(np.float32) * np.asarray(scale, np.float32) + np.asarray(bias, np.float32)

    def build(ctx, node):
        x, _, bname, sname = node.inputs
        rows4, h, k = _int8_input(ctx.spec(x))
        w = _weight(ctx, node, k)
        corr = -int(node.attrs["x_zp"]) * w.sum(axis=1, dtype=np.int64)
        cols = [corr, np.asarray(ctx.constant(sname), np.float32), np.asarray(ctx.constant(bname), np.float32),
                np.zeros(w.shape[0])]
        return [_gemm_q8(ctx, ("OUT_F32",), ctx.buffer(x), rows4, h, k, w, cols, ctx.buffer(node.outputs[0]))]


# linear_dynamic's float epilogues (attr epilogue, vkq/passes/fuse_float_epilogue.py): the
# shaders' EPI (linear_store.glsl), and whether the op reads a fifth input, `other`
EPILOGUES = {None: 0, "silu": 1, "add": 2, "mul": 3}


def _check_epilogue(epilogue, other, shape, out_shape, name="linear_dynamic"):
    if epilogue not in EPILOGUES or len(other) != int(EPILOGUES[epilogue] >= 2):
        raise ValueError(f"{name}: epilogue {epilogue!r} with {len(other)} more inputs")
    if other and tuple(shape) != tuple(out_shape):
        raise ValueError(f"{name}: the epilogue's operand {tuple(shape)} is not the output's {tuple(out_shape)}")


def _more_inputs(more, epilogue, rms_norm, name="linear_dynamic"):
    """linear_dynamic's inputs after the bias: ([other] of an add / mul epilogue, [the norm's
    weight] of a fused rms_norm)."""
    n_other = int(EPILOGUES.get(epilogue, 0) >= 2)
    if len(more) != n_other + (rms_norm is not None) or (rms_norm is not None and "eps" not in rms_norm):
        raise ValueError(f"{name}: {len(more)} inputs after the bias for epilogue {epilogue!r} and rms_norm "
                         f"{rms_norm!r}")
    return list(more[:n_other]), list(more[n_other:])


def _epilogue(out, other, epilogue):
    """linear_dynamic's result through its fused float epilogue: silu (the op silu's silu_f32),
    out + other or out * other (other of out's shape), float32, each rounded once."""
    _check_epilogue(epilogue, other, np.shape(other[0]) if other else (), out.shape)
    if epilogue == "silu":
        from .float_math import silu_f32
        return silu_f32(out)
    if other:
        o = np.asarray(other[0], np.float32)
        return np.add(out, o) if epilogue == "add" else np.multiply(out, o)
    return out


@register_op
class LinearDynamic:
    """float32 x (..., K), weight int8 (N, K), w_scale f32 (N,), bias f32 (N,) -> f32 (..., N).
    Each row of x is quantized on the device (quantize_rows: q, row_scale, zp), then
    out = f32(q @ W^T - zp * wsum) * (row_scale * w_scale) + bias, float32 ops rounded once.
    A fused float epilogue (attr epilogue, vkq/passes/fuse_float_epilogue.py): "silu": silu(out);
    "add" / "mul" with a fifth input other f32 (..., N): out + other (a residual), out * other
    (an MLP's silu(gate) * up), exactly the op that followed it: no dispatch of its own.
    A fused rms_norm before it (attr rms_norm={"eps"}, its weight f32 (K,) the last input): x is
    rms_norm(x) (vkq/ops/float.py), computed by the row quantizer (linear_rowq.comp NORM)."""
    name = "linear_dynamic"
    shaders = ("linear_rowq", "linear_q8", "linear_gemv")

    def reference(x, weight, w_scale, bias, *more, epilogue=None, rms_norm=None):
        other, norm = _more_inputs(more, epilogue, rms_norm)
        if rms_norm is not None:
            from .float_norm import rms_norm as _rms_norm
            x = _rms_norm(x, norm, normalized_shape=[x.shape[-1]], eps=rms_norm["eps"])
        k, n = x.shape[-1], weight.shape[0]
        q, scale, zp = quantize_rows(x.reshape(-1, k))
        w64 = weight.astype(np.int64)
        acc = q.astype(np.int64) @ w64.T - zp[:, None].astype(np.int64) * w64.sum(axis=1)
        s = scale[:, None] * np.asarray(w_scale, np.float32)[None, :]
        out = acc.astype(np.float32) * s + np.asarray(bias, np.float32)
        return _epilogue(out.reshape(x.shape[:-1] + (n,)), other, epilogue)

    def build(ctx, node):
        x, _, sname, bname, *more = node.inputs
        epilogue, norm_attr = node.attrs.get("epilogue"), node.attrs.get("rms_norm")
        other, norm = _more_inputs(more, epilogue, norm_attr, node.name)
        _check_epilogue(epilogue, other, ctx.spec(other[0]).shape if other else (), ctx.spec(node.outputs[0]).shape,
                        node.name)
        shape = ctx.spec(x).shape
        r, k = _rows(shape), shape[-1]
        w = _weight(ctx, node, k)
        rows4 = _up4(r)
        quant, q, rowq = quantize_rows_dispatch(ctx, x, r, k, (norm[0], float(norm_attr["eps"])) if norm else None)
        cols = [w.sum(axis=1, dtype=np.int64), np.asarray(ctx.constant(sname), np.float32),
                np.asarray(ctx.constant(bname), np.float32), np.zeros(w.shape[0])]
        gemm = _gemm_q8(ctx, ("OUT_F32", "ROW_QPARAMS"), q, rows4, r, k, w, cols,
                        ctx.buffer(node.outputs[0]), extra_buf=rowq,
                        epilogue=(EPILOGUES[epilogue], ctx.buffer(other[0]) if other else rowq))
        return [s for s in (quant, gemm) if s is not None]


def quantize_rows_dispatch(ctx, x: str, r: int, k: int, norm=None):
    """The device's quantize_rows of float x (r, K) (shaders/linear_rowq.comp): (dispatch, q, rowq),
    q the 4H4W int8 rows (up4(r) x up4(K) / 4 words, scratch), rowq (scale, zero point) per row;
    norm: (weight, eps) of an rms_norm of x's rows quantized instead (NORM).
    Once a build for an x that several linears read (q, k and v; gate and up: ctx.memo): the
    dispatch is None for the later ones, which read the first one's q and rowq."""
    key = ("linear_rowq", x, norm)
    if key in ctx.memo:
        return (None, *ctx.memo[key])
    rows4, k4 = _up4(r), _up4(k) // 4
    q = ctx.scratch(rows4 * k4)
    rowq = ctx.scratch(2 * r, np.float32)
    sg = subgroup_lanes(ctx.device.info)
    width = sg or min(ROWQ_WIDTH, 1 << (ctx.device.info.max_workgroup_invocations.bit_length() - 1))
    defines = {"PLAIN": 1} if not sg else {}
    if k % 4 == 0:
        defines["VEC4"] = 1
    bufs, spec, push = [ctx.buffer(x), q, rowq], (), (r, k, np.float32(0), np.float32(0))
    norm_loops = 0
    if norm is not None:       # the 16 partial sums: min(lanes, 16) lanes hold them (linear_rowq.comp)
        lanes = min(width, 16)
        bufs, spec = bufs + [ctx.buffer(norm[0])], (lanes, 16 // lanes)
        push, defines["NORM"] = (r, k, np.float32(1.0 / k), np.float32(norm[1])), 1
        norm_loops = 4 * (-(-k4 // 16) + lanes.bit_length() + 4)      # 4 rows: the squares, the tree, rsqrt
    # two passes over a row's k-blocks (its range, then its values), PLAIN's reductions, the norm's
    ctx.device.info.check_loop_budget(2 * -(-k4 // width) + 16 + (0 if sg else 2 * width.bit_length()) + norm_loops,
                                      f"linear_rowq over K = {k}")
    quant = ctx.device.dispatch("linear_rowq", bufs, grid_1d(rows4 // 4, 1), local=(width,), spec=spec, push=push,
                                defines=defines)
    ctx.memo[key] = (q, rowq)
    return quant, q, rowq


def float_gemm(ctx, x_buf, r: int, k: int, w, scale, bias, out_buf):
    """The float GEMM dispatch: out = (x @ w^T) * scale + bias; w int8 (weight-only) or float32.
    At most 4 rows run as a GEMV (shaders/linear_gemv_float.comp), more as the tiled GEMM."""
    n, info = w.shape[0], ctx.device.info
    table = _columns(n, GEMV_TN if r <= GEMV_ROWS else TN, [np.asarray(scale, np.float32), np.asarray(bias, np.float32)])
    defines = {"W_INT8" if w.dtype == np.int8 else "W_F32": 1}
    if r <= GEMV_ROWS:
        sg = subgroup_lanes(info)
        width = sg or min(PLAIN_WIDTH, info.max_workgroup_invocations)
        defines.update({"PLAIN": 1} if not sg else {})
        defines.update({"VEC4": 1} if k % 4 == 0 else {})
        nt = -(-n // GEMV_TN)
        info.check_loop_budget(-(-k // (4 * width)) + 8 + (0 if sg else 4 * (width + 1) + 4),
                               f"linear_gemv_float over K = {k}")
        bufs = [x_buf, ctx.const_buffer(pack_weight(w, GEMV_TN, width)), ctx.const_buffer(table), out_buf]
        return ctx.device.dispatch("linear_gemv_float", bufs, (nt, 1, 1), local=(width,), spec=(r, GEMV_TN),
                                   push=(r, k, n, nt), defines=defines)
    t = gemm_tiles(info, r, 1)
    nt = -(-n // t.tn)
    info.check_loop_budget(-(-k // (4 * t.kstep)) + 32, f"linear_float over K = {k}")
    groups = (-(-nt // t.width), -(-r // t.tm), 1)
    if t.plain:
        defines["PLAIN"] = 1
    if k % 4 == 0:
        defines["VEC4"] = 1
    bufs = [x_buf, ctx.const_buffer(pack_weight(w, t.tn, t.kstep)), ctx.const_buffer(table), out_buf]
    return ctx.device.dispatch("linear_float", bufs, groups, local=(t.width,), spec=t.spec(),
                               push=(r, k, n, nt), defines=defines)


@register_op
class LinearWeightOnly:
    """float32 x (..., K), weight int8 (N, K), w_scale f32 (N,), bias f32 (N,) -> f32 (..., N):
    out = (x @ f32(W)^T) * w_scale + bias, accumulated in float32 (the order of the sum differs
    from numpy's, so results agree to rounding, not bit for bit)."""
    name = "linear_weight_only"
    shaders = ("linear_float", "linear_gemv_float")

    def reference(x, weight, w_scale, bias):
        y = np.asarray(x, np.float32) @ weight.astype(np.float32).T
        return y * np.asarray(w_scale, np.float32) + np.asarray(bias, np.float32)

    def build(ctx, node):
        x, _, sname, bname = node.inputs
        shape = ctx.spec(x).shape
        w = _weight(ctx, node, shape[-1])
        return [float_gemm(ctx, ctx.buffer(x), _rows(shape), shape[-1], w, ctx.constant(sname),
                           ctx.constant(bname), ctx.buffer(node.outputs[0]))]
