"""conv2d_q8: int8 2-D convolution on 4W4C tensors, three kernels behind one op; and conv2d,
its float32 form (at the end of this module).

The op (contract in vkq/ops/__init__.py), per image n:
    acc[oc, oh, ow] = B[oc] + sum_{c in group(oc), kh, kw}
                      (xp[c, oh*sh + kh*dh, ow*sw + kw*dw] - x_zp) * weight[oc, c - g*Cg, kh, kw]
    y[oc, oh, ow]   = requantize(acc, multiplier[oc], shift[oc], out_zp, qmin, qmax, frac[oc])
with (B, frac) = vkq.quant.split_bias(bias, multiplier): bias is float64 at the accumulator's
scale, its fraction kept (an int32 bias has none).
xp is x padded by (ph, pw) with x_zp: PyTorch pads the dequantized float with 0, which is the
int8 value x_zp, so padding adds nothing. OH = (H + 2ph - dh*(KH-1) - 1) // sh + 1, as torch.

Kernels, chosen in build() from the attrs (choose_kernel):
  conv2d_pointwise  1x1, no padding, groups 1 (any stride): a GEMM over channels
  conv2d_depthwise  groups == C == OC: each output channel reads its own input channel
  conv2d_general    anything else: kernel size, stride, padding, dilation, any groups

Zero point: every kernel reads a tap outside the image as the word holding x_zp in all four
bytes, so that tap's (x - x_zp) is exactly 0; the kernels sum raw x * w and the host folds
-x_zp * sum(weight[oc]) into the bias (bias_eff). Chosen over correcting the bias per border
position: one select per loaded word, no per-position tables, exact everywhere.

Weights are packed once at build time, in the order each kernel reads them (pack_* below, then
lane_major), and uploaded with the per-channel epilogue table (pack_channels: bias_eff and the
constants of vkq.quant.requantize_clamped, which gives requantize's exact int8 result without a
branch on the shift).

Epilogue (shaders/include/conv_epilogue.glsl): requantize, then optionally a residual add_q8 with
another int8 tensor of the output's shape (attr residual, folded in by vkq/passes/fuse_epilogue.py)
and a 256-entry int8 lookup table (attr lut); the reference is the composition of those ops.

Paths: the general and pointwise kernels multiply-add in fp32 (exact for these integers, see
conv2d_general.comp) or, where the device chose the integer dot product (use_dot_product),
with OpSDotAccSat on the packed words (DOT variants; shaders/include/dot4x8.glsl).

Speed (bench/bench_conv.py; bench/LOG.md has what was tried). What limits it on the CPU
drivers is memory access: llvmpipe runs every buffer load or store as a loop over the SIMD lanes
with a bounds check per lane (about 340 instructions per ivec4 and 8 lanes, the cost of ~170
lane multiply-adds; seen in the JIT code with gdb), so the kernels load each word once and
reuse it from registers. An invocation owns a register tile of positions (whole 4W4C blocks of
4 columns: ivec4 loads and stores) x output channels; the G lanes of a subgroup that share
output channels share the weight loads, and neighbouring lanes the window halos, through
subgroupShuffle (shaders/include/conv_common.glsl). Tile sizes are specialization constants
chosen here; G and the workgroup size come from the device's subgroup size and limits
(_lane_group, _local_size).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import packing
from ..device import CPU_WORKGROUPS_PER_THREAD, cpu_rounds, cpu_threads, grid_1d
from ..quant import (INT8_MAX, INT8_MIN, activation_bounds, quantize_multipliers, requant_clamp_frac,
                     requant_clamp_params, requant_tie_free, requantize, shift_word, split_bias)
from ..registry import register_op
from .lut import device_table

PRODUCT_BITS = 14          # |x * w| <= 128 * 128
EXACT_PRODUCTS = 1 << 10   # products per exact fp32 partial sum: 2^10 * 2^14 = 2^24
MAX_WINDOW_WORDS = 96      # x window words one invocation holds (more: fewer rows per tile)
# conv2d_depthwise unrolls its kernel window; llvmpipe JIT-compiles that at the first dispatch in
# time that grows past linear (64 channels @56, first call: 9x9 2.8 s, 13x13 5.8, 21x21 19.7,
# 51x51 more than 5 minutes), so larger depthwise kernels (RepLKNet's 31x31) take conv2d_general
# there, which loops over kernel rows: first call 1.0-1.7 s, the same GPU time (13x13 10.9 against
# 9.8 ms, 21x21 20.5 against 20.1). SwiftShader compiles it in seconds and runs it 3x faster.
DEPTHWISE_MAX_TAPS_LLVMPIPE = 81


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- the specification ------------------------------------------------------------------------

def conv_output_hw(h, w, kernel, stride, padding, dilation) -> tuple[int, int]:
    """PyTorch's output size: (H + 2p - d*(K-1) - 1) // s + 1 per spatial dim."""
    return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                 for size, k, s, p, d in zip((h, w), kernel, stride, padding, dilation))


def conv2d_acc(x, weight, stride, padding, dilation, groups, x_zp) -> np.ndarray:
    """int64 (N, OC, OH, OW): sum over each group's channels and taps of (xp - x_zp) * w, with xp
    = x padded by x_zp. Summed as float64 matrix products, exact: every partial sum is an integer
    far below 2^53."""
    x = np.asarray(x).astype(np.float64) - float(x_zp)     # padding x_zp becomes 0 here
    weight = np.asarray(weight).astype(np.float64)
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = conv_output_hw(h, w, (kh, kw), stride, padding, dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
    ocg = oc // groups
    out = np.empty((n, oc, oh * ow))
    for g in range(groups):
        a = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        out[:, g * ocg:(g + 1) * ocg] = weight[g * ocg:(g + 1) * ocg].reshape(ocg, -1) @ a
    return out.reshape(n, oc, oh, ow).astype(np.int64)


def conv2d_q8_params(x_scale, w_scales, out_scale, bias_float=None, activation=None, out_zp=0,
                     bounds=None):
    """Float quantization parameters -> (bias float64, multiplier int32, shift int32, qmin, qmax).

    bias[oc] = b[oc] / (x_scale * w_scale[oc]) (the accumulator's scale, not rounded: its
    fraction is kept, vkq.quant.split_bias), multiplier and shift ~= x_scale * w_scale[oc] /
    out_scale (vkq.quant), qmin/qmax apply the fused activation (None, "relu", "relu6", or
    "hardtanh" with bounds=(lo, hi))."""
    w_scales = np.asarray(w_scales, np.float64).reshape(-1)
    acc_scale = float(x_scale) * w_scales
    if bias_float is None:
        bias = np.zeros(w_scales.size, np.float64)
    else:
        b = np.asarray(bias_float, np.float64).reshape(-1) / acc_scale
        bias = np.clip(b, -(1 << 31), (1 << 31) - 1)
    multiplier, shift = quantize_multipliers(acc_scale / float(out_scale))
    qmin, qmax = activation_bounds(activation, out_scale, out_zp, bounds)
    return bias, multiplier, shift, qmin, qmax


def bias_eff(weight, bias, x_zp) -> np.ndarray:
    """bias - x_zp * sum(weight[oc]) as int64 (the kernels add it to sum x * w)."""
    wsum = np.asarray(weight).astype(np.int64).reshape(len(weight), -1).sum(axis=1)
    return np.asarray(bias).astype(np.int64) - int(x_zp) * wsum


# -- geometry and kernel choice ---------------------------------------------------------------

@dataclass(frozen=True)
class ConvGeometry:
    n: int
    c: int
    h: int
    w: int
    oc: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int

    @classmethod
    def of(cls, x_shape, w_shape, stride, padding, dilation, groups, op: str = "conv2d_q8") -> "ConvGeometry":
        """op: the op named in the errors."""
        n, c, h, w = packing.as_nchw(x_shape)
        oc, cg, kh, kw = (int(d) for d in w_shape)
        groups = int(groups)
        if groups < 1 or c % groups or oc % groups or cg != c // groups:
            raise ValueError(f"{op}: weight {tuple(w_shape)} does not fit {c} input channels "
                             f"in {groups} groups")
        (sh, sw), (ph, pw), (dh, dw) = (tuple(int(v) for v in a) for a in (stride, padding, dilation))
        if min(sh, sw, dh, dw, kh, kw) < 1 or min(ph, pw) < 0:
            raise ValueError(f"{op}: bad stride {stride}, padding {padding} or dilation {dilation}")
        oh, ow = conv_output_hw(h, w, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
        if oh < 1 or ow < 1:
            raise ValueError(f"{op}: empty output for input {h}x{w} and kernel {kh}x{kw}")
        return cls(n, c, h, w, oc, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups)

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def ocg(self) -> int:
        return self.oc // self.groups

    @property
    def c4(self) -> int:
        return -(-self.c // 4)


def choose_kernel(g: ConvGeometry) -> str:
    """The conv2d_q8 kernel for a geometry."""
    if g.groups == 1 and g.kh == g.kw == 1 and g.ph == g.pw == 0:
        return "conv2d_pointwise"
    if g.groups == g.c == g.oc:
        return "conv2d_depthwise"
    return "conv2d_general"


# -- weight packing (the orders the kernels read) ---------------------------------------------

def _words(b: np.ndarray) -> np.ndarray:
    """int8 array whose last axis has 4 bytes -> int32 words (byte i = element i)."""
    return np.ascontiguousarray(b, dtype=np.int8).view("<i4").astype(np.int32).reshape(b.shape[:-1])


def c4_window(g: ConvGeometry, toc: int) -> tuple[int, np.ndarray]:
    """(c4_count, c4_start per output-channel tile): the 4-channel input blocks a tile of toc
    output channels reads. Every tile reads c4_count blocks (the most any tile needs) starting at
    min(first block of its first group, C4 - c4_count); conv2d_general.comp has the same formula."""
    tiles = -(-g.oc // toc)
    t = np.arange(tiles)
    first = t * toc // g.ocg * g.cg // 4
    last_group = np.minimum((t + 1) * toc, g.oc) - 1
    end = -(-((last_group // g.ocg + 1) * g.cg) // 4)
    count = int((end - first).max())
    return count, np.minimum(first, g.c4 - count)


def pack_general(weight, g: ConvGeometry, toc: int) -> tuple[np.ndarray, int]:
    """conv2d_general weights: word ((t*c4_count + r)*KH*KW + kh*KW + kw)*toc + o holds, in byte b,
    weight of output channel t*toc + o and input channel 4*(c4_start[t] + r) + b (0 outside its
    group and for padded channels). Returns (words, c4_count)."""
    count, start = c4_window(g, toc)
    tiles = len(start)
    dense = np.zeros((tiles * toc, g.c4 * 4, g.kh, g.kw), np.int8)
    for grp in range(g.groups):
        dense[grp * g.ocg:(grp + 1) * g.ocg, grp * g.cg:(grp + 1) * g.cg] = weight[grp * g.ocg:(grp + 1) * g.ocg]
    blocks = np.stack([dense[t * toc:(t + 1) * toc, 4 * s:4 * (s + count)] for t, s in enumerate(start)])
    # (t, o, r, b, kh, kw) -> (t, r, kh, kw, o, b)
    blocks = blocks.reshape(tiles, toc, count, 4, g.kh, g.kw).transpose(0, 2, 4, 5, 1, 3)
    return _words(blocks).reshape(-1), count


def lane_regs(n: int, G: int) -> int:
    """Registers a lane holds for n words its group of G lanes shares: LANE_REGS in
    shaders/include/conv_common.glsl."""
    return cdiv(n, G) if n <= 2 * G else cdiv(n, 4 * G) * 4


def lane_major(words: np.ndarray, per_block: int, G: int) -> np.ndarray:
    """Blocks of per_block words (word k of a block is shared from lane k % G, register k // G)
    as conv_lane_words.glsl reads them: G * lane_regs words a block, word k at
    (k % G) * regs + k // G, so a lane's registers are contiguous; the padding words are 0."""
    regs = lane_regs(per_block, G)
    blocks = np.asarray(words).reshape(-1, per_block)
    out = np.zeros((len(blocks), G, regs), np.int32)
    k = np.arange(per_block)
    out[:, k % G, k // G] = blocks
    return out.reshape(-1)


def pack_depthwise(weight, g: ConvGeometry) -> np.ndarray:
    """conv2d_depthwise weights: word c4*KH*KW + kh*KW + kw holds, in byte b, the tap (kh, kw) of
    channel 4*c4 + b (0 for padded channels)."""
    dense = np.zeros((g.c4 * 4, g.kh, g.kw), np.int8)
    dense[:g.c] = np.asarray(weight)[:, 0]
    return _words(dense.reshape(g.c4, 4, g.kh, g.kw).transpose(0, 2, 3, 1)).reshape(-1)


def pack_channels(bias, multiplier, shift, tile: int, frac=0) -> np.ndarray:
    """Per output-channel tile of `tile` channels, the epilogue's constants as 4 rows of `tile`
    words: bias_eff, then requantize_clamped's bound, m and shifts with the bias fraction
    (vkq.quant.shift_word: lshift | rshift << 5 | frac; the fraction takes the word's spare bits,
    so the table and its loads stay as they were), from vkq.quant.requant_clamp_params and
    requant_clamp_frac (shaders/include/conv_epilogue.glsl). Padded channels get bias 0 and m 0:
    they requantize to the zero point, and their bytes are not stored."""
    oc = len(bias)
    tiles = -(-oc // tile)
    m = np.zeros(tiles * tile, np.int64)
    s = np.full(tiles * tile, 31, np.int64)
    f = np.zeros(tiles * tile, np.int64)
    m[:oc], s[:oc], f[:oc] = multiplier, shift, frac
    bound, lshift, mc, rshift = requant_clamp_params(m, s)
    table = np.zeros((tiles * tile, 4), np.int64)
    table[:oc, 0] = bias
    table[:, 1], table[:, 2], table[:, 3] = bound, mc, shift_word(lshift, rshift, requant_clamp_frac(m, s, f))
    return table.reshape(tiles, tile, 4).transpose(0, 2, 1).reshape(-1).astype(np.int32)


def epilogue_push(attrs) -> tuple:
    """The Epilogue push constants (conv_epilogue.glsl): out_zp, qmin, qmax, and with a fused
    residual add its operands' zero points and weights (conv output first: the sum is the same
    whichever add_q8 operand the conv was) and its requantize_clamped constants."""
    words = [int(attrs["out_zp"]), int(attrs.get("qmin", INT8_MIN)), int(attrs.get("qmax", INT8_MAX))]
    res = attrs.get("residual")
    if res is not None:
        mine, other = ("a", "b") if res["conv_input"] == "a" else ("b", "a")
        bound, lshift, m, rshift = (int(v[0]) for v in requant_clamp_params(res["multiplier"], res["shift"]))
        words += [res[f"{mine}_zp"], res[f"{mine}_mult"], res[f"{other}_zp"], res[f"{other}_mult"],
                  bound, lshift, m, rshift, res["out_zp"], res.get("qmin", INT8_MIN), res.get("qmax", INT8_MAX)]
    return tuple(int(w) for w in words)


# -- the op -----------------------------------------------------------------------------------

DOT_KERNELS = ("conv2d_general", "conv2d_pointwise")   # kernels with a DOT (integer dot product) variant


def use_dot_product(device) -> bool:
    """Whether this device's dispatches take the DOT variants: its own choice (device.dot_product,
    set where the feature is enabled and pays off), off where the device says nothing."""
    return bool(getattr(device, "dot_product", False))


def _lane_group(device) -> tuple[int, dict, int]:
    """(G, defines, workgroup size): lanes sharing weight loads, the shader variant, and a
    workgroup size that is a multiple of the subgroup size."""
    sg = device.info.shuffle_lanes          # 0 where full subgroups of a known size are not sure
    local = min(max(64, sg), device.info.max_workgroup_invocations)
    if not sg or local % sg:
        return 1, {"NO_SUBGROUP": "1"}, local
    return min(sg, 8), {}, local


MIN_WORKGROUPS = 8         # GPUs: at least this many workgroups where the workgroup size allows


def _local_sizes(local: int, subgroup: int) -> list[int]:
    """`local` and its halvings that stay a multiple of the subgroup size and >= 8, largest first."""
    sizes = [local]
    while sizes[-1] // 2 >= max(subgroup, 8) and (sizes[-1] // 2) % max(subgroup, 1) == 0:
        sizes.append(sizes[-1] // 2)
    return sizes


def _cpu_busiest(invocations: int, size: int) -> int:
    """Invocations the busiest thread of a CPU driver runs in a dispatch of workgroups of `size`."""
    return cpu_rounds(cdiv(invocations, size)) * size


def _cpu_enough(groups: int) -> bool:
    """Whether a dispatch of `groups` workgroups leaves every CPU thread CPU_WORKGROUPS_PER_THREAD."""
    return groups >= CPU_WORKGROUPS_PER_THREAD * cpu_threads()


def _local_size(info, local: int, subgroup: int, invocations: int) -> int:
    """The workgroup size for a dispatch of `invocations` (see _local_sizes).
    CPU drivers: the threads take workgroups one at a time, so 5 workgroups on 2 threads cost 3.
    Of the sizes whose busiest thread runs within 1/16 of the fewest invocations, the largest
    that leaves every thread CPU_WORKGROUPS_PER_THREAD workgroups, else the smallest: each
    workgroup costs something (lavapipe, 2 threads, 112x112 pointwise: 74 -> 294 workgroups,
    1.08x), but with few a thread that starts late holds up the whole dispatch (7x7 layers: 8
    -> 4 workgroups 1.2x, 4 -> 2 1.1x). With _pointwise_tiles, MobileNetV2's pointwise layers
    at 14x14 and 7x7 went 0.75-0.85x. GPUs: halved while that leaves fewer than MIN_WORKGROUPS
    workgroups (small 7x7 and 14x14 maps then spread over more cores)."""
    sizes = _local_sizes(local, subgroup)
    if info.type != "cpu":
        return next((s for s in sizes if cdiv(invocations, s) >= MIN_WORKGROUPS), sizes[-1])
    least = min(_cpu_busiest(invocations, s) for s in sizes)
    near = [s for s in sizes if _cpu_busiest(invocations, s) * 16 <= least * 17]
    enough = [s for s in near if _cpu_enough(cdiv(invocations, s))]
    return enough[0] if enough else near[-1]


def _chunk(kh, kw) -> tuple[int, int]:
    """(c4 blocks per exact fp32 partial sum, ROW_FLUSH) for a kh x kw kernel."""
    taps = 4 * kh * kw
    if taps <= EXACT_PRODUCTS:
        return EXACT_PRODUCTS // taps, 0
    if 4 * kw > EXACT_PRODUCTS:
        raise ValueError(f"conv2d_q8: kernel width {kw} > {EXACT_PRODUCTS // 4} is not supported")
    return 1, 1


# The G lanes of a group take G spatial tiles of one output-channel tile: a map with fewer
# tiles than G leaves lanes idle, so the tile choosers below shrink tiles until there are G.

CPU_ONE_ROW_MIN_OH = 14   # conv2d_general on CPU drivers: 1 output row an invocation from this map height


def _general_tiles(g: ConvGeometry, G: int, info, dot: bool = False) -> tuple[int, int]:
    """(TOC, TH) for conv2d_general (its TW is one 4-column block): the widest channel tile
    whose work (padded channels times input blocks read) is within 1/8 of the least; 2 rows
    (measured best on llvmpipe at 256 bits with TOC 16: 16 x 8 accumulators), 1 if the window
    is large or the map small. CPU drivers: 1 row where the window is unrolled (not _row_loop)
    and the map has CPU_ONE_ROW_MIN_OH rows or more: lavapipe at 512 bits, GPU time, A-B-A-B
    with the new choice both first and second, 3x3 64->64 @56 0.97x, 128 @28 0.98x, 256 @14
    0.89x, 64->128 s2 @56 0.93x, ResNet-18 0.94x; but 512 @7 1.27x and the ROW_LOOP stems
    1.1-1.5x. Those stems since multiply 3 channels, not 4 (CH): on llvmpipe 1 row then took
    0.91x (7x7 s2 3->64 @224, 3x3 s2 3->32 @224), on SwiftShader 1.7x (3x3 3->16 @56); the DOT
    path (dot: no CH, packed words) keeps 2 (7x7 stem on 1 row 1.03-1.15x)."""
    work = {toc: cdiv(g.oc, toc) * toc * c4_window(g, toc)[0] for toc in (16, 8, 4)}
    toc = next(t for t in (16, 8, 4) if work[t] * 8 <= min(work.values()) * 9)
    window = (g.sh + (g.kh - 1) * g.dh + 1) * (3 * g.sw + (g.kw - 1) * g.dw + 1)
    stem = g.c < 4 and not dot and getattr(info, "driver", "") == "llvmpipe"   # CH < 4: fewer live values
    cpu_one_row = info.type == "cpu" and (not _row_loop(g) or stem) and g.oh >= CPU_ONE_ROW_MIN_OH
    two = (not cpu_one_row and g.oh > 1 and window <= 4 * MAX_WINDOW_WORDS // 3
           and cdiv(g.ow, 4) * cdiv(g.oh, 2) >= G)   # stem: 117
    return toc, 2 if two else 1


def _row_loop(g: ConvGeometry) -> bool:
    """Whether conv2d_general steps through the kernel rows in a loop (ROW_LOOP) instead of
    unrolling the whole KH x KW window (its header says why): for 5x5 and larger kernels and
    for few-channel stems. Measured on lavapipe (one run, busy machine, CPU time): stem 7x7 s2
    3->64 @224 19.4 -> 11.0 ms, stem 3x3 s2 3->32 2.2 -> 1.7 ms; 3x3 64->64 @56 7.0 vs 7.6 ms
    and 256->256 @14 13.7 vs 12.2 ms (no clear winner: 3x3 keeps the unrolled window)."""
    if ROW_LOOP_FORCE is not None:
        return ROW_LOOP_FORCE
    return g.kh * g.kw >= 25 or (g.c4 == 1 and g.kh * g.kw > 1)


ROW_LOOP_FORCE = None   # experiments / tests: force the choice


def _depthwise_tiles(g: ConvGeometry, G: int) -> tuple[int, int]:
    """(TH, TB) for conv2d_depthwise: 4 rows x 2 blocks of 4 columns (measured best on llvmpipe:
    the kernel is bound by its loads and stores, and a larger tile's window re-reads fewer
    columns and rows), smaller for large windows or small maps (fewer than G tiles)."""
    th, tb = min(4, g.oh), 2 if g.ow > 4 else 1

    def window(th, tb):
        return ((th - 1) * g.sh + (g.kh - 1) * g.dh + 1) * ((4 * tb - 1) * g.sw + (g.kw - 1) * g.dw + 1)

    def tiles(th, tb):
        return cdiv(cdiv(g.ow, 4), tb) * cdiv(g.oh, th)
    while th > 1 and (window(th, tb) > MAX_WINDOW_WORDS or tiles(th, tb) < G):
        if tb > 1 and tiles(th, tb) < G:
            tb = 1
        else:
            th = th // 2 if th > 2 else 1
    if window(th, tb) > MAX_WINDOW_WORDS or tiles(th, tb) < G:
        tb = 1
    return th, tb


POINTWISE_UNROLL_C4 = 16   # CPU drivers: conv2d_pointwise unrolls its loop over up to this many C4 blocks


def _pointwise_unroll(device) -> int:
    """C4 blocks up to which conv2d_pointwise's fp32 path unrolls its loop over them (KC4): on
    CPU drivers, where a loop keeps its TP x TOC partial sums in memory and blends each with the
    loop's lane mask every block (llvmpipe: 261 blends and ~1180 vector moves against 2048
    multiply-adds a block, 16 -> 96). GPU time, interleaved, lavapipe at 512 bits: 16 -> 96
    @112 0.83x, 24 -> 144 @56 0.58-0.89x, 32 -> 16 @112 0.81x, 32 -> 192 @28 0.93x, 64 -> 384
    @14 0.94x (16 blocks); 96 -> 24 (24 blocks) within noise, so not past 16. SwiftShader: within
    its noise. GPUs keep the loop (their compilers choose)."""
    return POINTWISE_UNROLL_C4 if device.info.type == "cpu" else 0


STEM_CHANNELS = True       # conv2d_general skips the padding channel of a C < 4 input (experiments: False)


def _pair_stores(device, toc: int, oc4: int) -> bool:
    """Whether a conv kernel stores its output's channel blocks two at a time (STORE4_PAIR,
    texel.glsl): where the device writes them as one 32-byte store (Device.wide_stores) and
    every tile's pairs lie inside the tensor (TOC a multiple of 8, OC4 even)."""
    return toc % 8 == 0 and oc4 % 2 == 0 and device.wide_stores


DEPTHWISE_ROWS_TC = 2        # channel blocks a conv2d_depthwise_rows invocation takes where C4 is even
DEPTHWISE_ROWS_FORCE = None   # experiments / tests: force conv2d_depthwise_rows on (True) or off (False)


def _depthwise_rows(g: ConvGeometry, info) -> bool:
    """Whether a depthwise conv takes conv2d_depthwise_rows (its header says why) instead of
    conv2d_depthwise. llvmpipe does where the window (WH rows of NB blocks) stays within
    MAX_WINDOW_WORDS and the walk along a row within the loop budget: GPU time, interleaved in
    one process (bench/LOG.md, "Stores on llvmpipe"), 32 @112 0.65x, 96 @112 s2 0.79x, 960
    @7 0.91x. Elsewhere conv2d_depthwise, whose lanes share their loads: SwiftShader ran the
    rows kernel 1.8-2.7x slower, and GPUs want lanes on neighbouring addresses."""
    wh = (g.kh - 1) * g.dh + 1
    nb = cdiv((4 * cdiv(g.pw, 4) - g.pw) + 3 * g.sw + (g.kw - 1) * g.dw + 1, 4)
    fits = 4 * wh * nb <= MAX_WINDOW_WORDS and cdiv(g.ow, 4) <= (info.loop_budget or cdiv(g.ow, 4))
    use = info.driver == "llvmpipe" if DEPTHWISE_ROWS_FORCE is None else DEPTHWISE_ROWS_FORCE
    return use and fits


def _pointwise_tiles(g: ConvGeometry, G: int, info, local: int) -> tuple[int, int]:
    """(TB 4-column output blocks, TOC output channels) for conv2d_pointwise. Per position and
    c4 block a tile of TOC channels costs TOC*4 multiply-adds (~0.2 cycles each per lane on
    llvmpipe) plus one x word loaded (~18 cycles per lane): cost TOC + 22, so fewer, wider tiles
    load x fewer times, but padded channels cost work. GPUs: 2 blocks (8 positions), 1 if the
    map has fewer than 2G blocks, and the TOC <= 32 of least tiles * (TOC + 22). CPU drivers: the
    (TB, TOC) whose busiest thread does the least of that work (_local_size): TB 1 and 2 cost the
    same per position there (lavapipe at 512 bits: 112x112 and 56x56 layers 0.95-1.01x), and
    the finer tiles even out the threads on small maps (MobileNetV2: 0.91-0.94x its GPU time)."""
    blocks = g.oh * cdiv(g.ow, 4)
    if info.type != "cpu":
        cost = {t: cdiv(g.oc, t) * (t + 22) for t in range(32, 0, -4)}
        return 2 if blocks >= 2 * G else 1, min(cost, key=lambda t: (cost[t], -t))

    def busiest(tb, toc):
        invocations = g.n * cdiv(g.oc, toc) * cdiv(blocks, tb * G) * G
        size = _local_size(info, local, info.shuffle_lanes or 1, invocations)
        return _cpu_busiest(invocations, size) * tb * (toc + 22), not _cpu_enough(cdiv(invocations, size))
    return min(((tb, toc) for tb in (2, 1) for toc in range(32, 0, -4)),
               key=lambda c: (*busiest(*c), -c[0], -c[1]))


def _check_acc_range(beff, g: ConvGeometry, taps: int):
    """The kernels keep acc in int32: |bias_eff| + 2^14 * taps must stay below 2^31."""
    bound = int(np.abs(beff).max(initial=0)) + (taps << PRODUCT_BITS)
    if bound >= 1 << 31:
        raise ValueError(f"conv2d_q8: accumulator bound {bound} does not fit int32")


@register_op
class Conv2dQ8:
    """int8 conv2d on 4W4C: acc = B + sum (x - x_zp) * w over each group's channels and the
    taps (padding reads x_zp), y = requantize(acc, multiplier, shift, out_zp, qmin, qmax, frac),
    (B, frac) = split_bias(bias, multiplier) (bias float64 or int32).

    Fused epilogues (vkq/passes/fuse_epilogue.py), in this order, each exactly the op it
    replaces, so the reference is the composition:
      residual  attrs {"conv_input": "a" | "b", add_q8's attrs}, input `other` (int8, y's shape):
                y = add_q8(y, other) (conv_input "a") or add_q8(other, y) ("b")
      lut       attrs lut=True, input `table` (int8 (256,)): y = table[y + 128]
    Inputs: x, weight, bias, multiplier, shift[, other][, table]."""
    name = "conv2d_q8"
    shaders = ("conv2d_general", "conv2d_depthwise", "conv2d_depthwise_rows", "conv2d_pointwise")

    def reference(x, weight, bias, multiplier, shift, *extra, stride, padding, dilation, groups,
                  x_zp, out_zp, qmin=INT8_MIN, qmax=INT8_MAX, residual=None, lut=False):
        acc = conv2d_acc(x, weight, stride, padding, dilation, groups, x_zp)
        whole, frac = split_bias(bias, multiplier)
        per_oc = lambda v: np.asarray(v, np.int64)[:, None, None]
        acc += per_oc(whole)
        y = requantize(acc, per_oc(multiplier), per_oc(shift), out_zp, qmin, qmax, per_oc(frac))
        extra = list(extra)
        if residual is not None:
            from .eltwise import AddQ8
            add = {k: v for k, v in residual.items() if k != "conv_input"}
            other = extra.pop(0)
            y = AddQ8.reference(y, other, **add) if residual["conv_input"] == "a" else AddQ8.reference(other, y, **add)
        if lut:
            y = np.asarray(extra.pop(0), np.int8)[y.astype(np.int64) + 128]
        return y

    def build(ctx, node):
        x_name, w_name, b_name, m_name, s_name, *extra = node.inputs
        a = node.attrs
        if len(extra) != int(a.get("residual") is not None) + int(bool(a.get("lut"))):
            raise ValueError(f"conv2d_q8: {len(extra)} extra inputs for residual={a.get('residual') is not None}, "
                             f"lut={bool(a.get('lut'))}")
        weight = np.asarray(ctx.constant(w_name))
        g = ConvGeometry.of(ctx.spec(x_name).shape, weight.shape, a["stride"], a["padding"],
                            a["dilation"], a["groups"])
        y_spec = ctx.spec(node.outputs[0])
        if packing.as_nchw(y_spec.shape) != (g.n, g.oc, g.oh, g.ow):
            raise ValueError(f"conv2d_q8: output spec {y_spec.shape} != {(g.n, g.oc, g.oh, g.ow)}")
        if ctx.spec(x_name).layout != "4W4C" or y_spec.layout != "4W4C":
            raise ValueError("conv2d_q8 reads and writes 4W4C tensors")
        epilogue_bufs, epilogue_defines = [], {}
        if a.get("residual") is not None:
            other = extra.pop(0)
            o_spec = ctx.spec(other)
            if o_spec.shape != y_spec.shape or o_spec.layout != "4W4C":
                raise ValueError(f"conv2d_q8: residual {o_spec.shape} {o_spec.layout} != output {y_spec.shape} 4W4C")
            epilogue_bufs.append(ctx.buffer(other))
            epilogue_defines["RESIDUAL"] = "1"
        if a.get("lut"):
            epilogue_bufs.append(ctx.const_buffer(device_table(ctx.constant(extra.pop(0)), "a fused epilogue")))
            epilogue_defines["LUT"] = "1"
        x_zp = int(a["x_zp"])
        if not INT8_MIN <= x_zp <= INT8_MAX:
            raise ValueError(f"conv2d_q8: x_zp must be in [-128, 127], got {x_zp}")
        mult, shift = ctx.constant(m_name), ctx.constant(s_name)
        whole, frac = split_bias(ctx.constant(b_name), mult)
        beff = bias_eff(weight, whole, x_zp)
        _check_acc_range(beff, g, g.cg * g.kh * g.kw)
        chan = (beff, mult, shift)
        zp_word = int(np.full(4, x_zp, np.int8).view("<i4")[0])
        outq = epilogue_push(a)
        G, defines, local = _lane_group(ctx.device)
        defines = {**defines, **epilogue_defines}
        kernel = choose_kernel(g)
        if kernel == "conv2d_depthwise" and g.kh * g.kw > DEPTHWISE_MAX_TAPS_LLVMPIPE \
                and ctx.device.info.driver == "llvmpipe":
            kernel = "conv2d_general"
        if use_dot_product(ctx.device) and kernel in DOT_KERNELS:
            defines["DOT"] = "1"
        io = (ctx.buffer(x_name), ctx.buffer(node.outputs[0]))
        shapes = (np.array([g.n, g.c, g.h, g.w]), np.array([g.n, g.oc, g.oh, g.ow]))

        if kernel == "conv2d_general":
            toc, th = _general_tiles(g, G, ctx.device.info, "DOT" in defines)
            row_loop = _row_loop(g)
            wwords, c4_count = pack_general(weight, g, toc)
            # the loop over a tile's input blocks (and kernel rows, ROW_LOOP): a grouped conv whose
            # tile spans groups reads many blocks (conv2d_depthwise_rows checks its own walk)
            ctx.device.info.check_loop_budget(c4_count * (g.kh if row_loop else 1) + 8,
                                              f"conv2d_general over {c4_count} input blocks")
            chunk, row_flush = _chunk(g.kh, g.kw)
            spec = (G, toc, th, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw, chunk, row_flush,
                    int(not row_flush and c4_count <= chunk), int(row_loop))
            # weights per (channel tile, c4 block[, kernel row]); epilogue constants per channel tile
            wblock, cblock = (1 if row_loop else g.kh) * g.kw * toc, 4 * toc
            push = (*shapes, c4_count, g.cg, g.ocg, zp_word, *outq)
            tiles = cdiv(g.ow, 4) * cdiv(g.oh, th)          # one column block x th rows each
            lane_groups = g.n * cdiv(g.oc, toc) * cdiv(tiles, G)
            table = pack_channels(*chan, toc, frac)
            # after TIES, RES_TIES, FRAC: paired stores, the channels x's words hold (stems)
            tail = (int(_pair_stores(ctx.device, toc, cdiv(g.oc, 4))), min(g.c, 4) if STEM_CHANNELS else 4)
        elif kernel == "conv2d_depthwise" and _depthwise_rows(g, ctx.device.info):
            kernel, G, defines = "conv2d_depthwise_rows", 1, epilogue_defines   # no lane sharing
            wwords = pack_depthwise(weight, g)
            tc = DEPTHWISE_ROWS_TC if g.c4 % 2 == 0 else 1
            spec = (tc, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw)
            wblock, cblock = g.kh * g.kw, 16              # per c4 block
            push = (*shapes, zp_word, *outq)
            lane_groups = g.n * (g.c4 // tc) * g.oh       # an invocation a row of tc channel blocks
            table = pack_channels(*chan, 4, frac)
            tail = ()
        elif kernel == "conv2d_depthwise":
            th, tb = _depthwise_tiles(g, G)
            wwords = pack_depthwise(weight, g)
            spec = (G, th, tb, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw)
            wblock, cblock = g.kh * g.kw, 16              # per c4 block
            push = (*shapes, zp_word, *outq)
            tiles = cdiv(cdiv(g.ow, 4), tb) * cdiv(g.oh, th)  # tb column blocks x th rows each
            lane_groups = g.n * g.c4 * cdiv(tiles, G)
            table = pack_channels(*chan, 4, frac)
            tail = ()
        else:
            tb, toc = _pointwise_tiles(g, G, ctx.device.info, local)
            wwords, _ = pack_general(weight, g, toc)
            chunk = _chunk(1, 1)[0]
            kc4 = g.c4 if g.c4 <= _pointwise_unroll(ctx.device) and not defines.get("DOT") else 0
            spec = (G, toc, tb, chunk, g.sh, g.sw, int(g.c4 <= chunk))
            tail = (int(_pair_stores(ctx.device, toc, cdiv(g.oc, 4))), kc4)   # after TIES, RES_TIES, FRAC
            wblock, cblock = toc, 4 * toc                 # per (channel tile, c4 block); per channel tile
            push = (*shapes, *outq)
            lane_groups = g.n * cdiv(g.oc, toc) * cdiv(g.oh * cdiv(g.ow, 4), tb * G)
            table = pack_channels(*chan, toc, frac)

        bufs = [io[0], ctx.const_buffer(lane_major(wwords, wblock, G)), ctx.const_buffer(lane_major(table, cblock, G)),
                io[1], *epilogue_bufs]
        local = _local_size(ctx.device.info, local, ctx.device.info.shuffle_lanes or 1, lane_groups * G)
        res = a.get("residual")
        ties = (int(not requant_tie_free(mult, shift, frac)),
                int(res is None or not requant_tie_free(res["multiplier"], res["shift"])),
                int(bool(np.any(frac))))     # FRAC: the fraction's add only where there is one
        return [ctx.device.dispatch(kernel, bufs, grid_1d(lane_groups * G, local), local=(local,),
                                    spec=(*spec, *ties, *tail), push=push, defines=defines)]



# -- conv2d: float32 ------------------------------------------------------------------------------

def _as_2d_conv(shape) -> tuple:
    """(N, C[, H][, W]) -> (N, C, H, W) with the spatial dims it lacks 1: a conv1d is a conv2d
    with H = 1 (its attrs (1, s), (0, p), (1, d)), batch norm on (N, C) one with H = W = 1."""
    shape = tuple(int(d) for d in shape)
    if not 2 <= len(shape) <= 4:
        raise ValueError(f"conv2d: takes (N, C[, H], W), got {shape}")
    return shape[:2] + (1,) * (4 - len(shape)) + shape[2:]


def conv2d_float(x, weight, bias, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """Float conv2d by im2col, x (N, C, H, W) x weight (OC, C/groups, KH, KW) (1-D and 0-D
    spatial forms: _as_2d_conv); the output has x's rank."""
    x, w = np.asarray(x, np.float32), np.asarray(weight, np.float32)
    rank = x.ndim
    x, w = x.reshape(_as_2d_conv(x.shape)), w.reshape(_as_2d_conv(w.shape))
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = conv_output_hw(h, wd, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    cols = np.empty((n, c, kh, kw, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
    out = np.empty((n, oc, oh, ow), np.float32)
    og = oc // groups
    for g in range(groups):
        cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[g * og:(g + 1) * og].reshape(og, cg * kh * kw)
        out[:, g * og:(g + 1) * og] = np.einsum("ok,nkp->nop", wg, cg_cols).reshape(n, og, oh, ow)
    out += np.asarray(bias, np.float32).reshape(1, oc, 1, 1)
    return out.reshape((n, oc) + (oh, ow)[4 - rank:])


def _float_tiles(g: ConvGeometry, info) -> tuple[int, int]:
    """(TOC output channels, TW output columns) an invocation of conv2d_float computes: the x
    window it loads serves TOC channels, each weight vec4 TW columns. CPU drivers: 16 x 16 (their
    loads cost most; lavapipe, ResNet-18 at 224 under the dynamic scheme, 20 float convs, one
    run: 8x4 210 ms, 16x8 177, 16x16 140, 32x16 130 a call, the CPU fallback before them 181).
    GPUs: 8 x 4, 32 accumulators, a register tile that leaves room for many invocations (not
    measured: no GPU here). The taps unroll, so the tile shrinks until KH*KW*TOC*TW multiply-adds
    fit FLOAT_UNROLL (wav2vec2's positional conv, kernel 128: at 16 x 16 lavapipe took 41 s to
    build the pipeline). TOC a power of two <= the group's channels (depthwise: 1); TW <= OW."""
    kind = FLOAT_TILES_FORCE or ("cpu" if info.type == "cpu" else "gpu")
    toc, tw = (16, 16) if kind == "cpu" else (8, 4)
    while toc > 1 and toc > g.ocg:
        toc //= 2
    tw = min(tw, g.ow)
    while g.kh * g.kw * toc * tw > FLOAT_UNROLL and toc * tw > 1:
        if tw >= toc and tw > 1:
            tw = -(-tw // 2)
        else:
            toc //= 2
    return toc, tw


FLOAT_UNROLL = 4096   # multiply-adds conv2d_float's unrolled taps may hold (shader size, build time)
FLOAT_TILES_FORCE = None   # tests: "cpu" / "gpu", the other device kind's tiles


def _pack_float_weights(weight: np.ndarray, g: ConvGeometry, toc: int) -> np.ndarray:
    """(OC, CG, KH, KW) -> per tile of toc channels of a group, a tap's toc weights side by side
    (shaders/conv2d_float.comp), zeros past each group's last channel."""
    tpg = cdiv(g.ocg, toc)
    w = np.zeros((g.groups, tpg * toc, g.cg, g.kh * g.kw), np.float32)
    w[:, :g.ocg] = weight.reshape(g.groups, g.ocg, g.cg, g.kh * g.kw)
    return np.ascontiguousarray(w.reshape(g.groups, tpg, toc, g.cg, g.kh * g.kw).transpose(0, 1, 3, 4, 2)).reshape(-1)


def _float_geometry(x_shape, w_shape, a) -> ConvGeometry:
    return ConvGeometry.of(_as_2d_conv(x_shape), _as_2d_conv(w_shape), a["stride"], a["padding"],
                           a["dilation"], a["groups"], op="conv2d")


def _float_build(ctx, node):
    x, w, b = node.inputs
    y = node.outputs[0]
    g = _float_geometry(ctx.spec(x).shape, ctx.spec(w).shape, node.attrs)
    want = conv2d_float_shape(ctx.spec(x).shape, g)
    if tuple(ctx.spec(y).shape) != want or tuple(ctx.spec(b).shape) != (g.oc,):
        raise ValueError(f"{node.name}: output {ctx.spec(y).shape} / bias {ctx.spec(b).shape}, "
                         f"the conv gives {want} / ({g.oc},)")
    toc, tw = _float_tiles(g, ctx.device.info)
    ctx.device.info.check_loop_budget(g.cg + 8, f"conv2d_float over {g.cg} input channels")   # (taps unrolled)
    tpg = cdiv(g.ocg, toc)
    n = g.n * g.groups * tpg * g.oh * cdiv(g.ow, tw)
    if ctx.is_constant(w):
        wbuf, defines = ctx.const_buffer(_pack_float_weights(np.asarray(ctx.constant(w), np.float32), g, toc)), []
    else:
        wbuf, defines = ctx.buffer(w), ["RAW"]
    return [ctx.device.dispatch(
        "conv2d_float", [ctx.buffer(x), wbuf, ctx.buffer(b), ctx.buffer(y)], grid_1d(n, 64),
        local=(64,), spec=(toc, tw, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw), defines=defines,
        push=(np.array([g.n, g.c, g.h, g.w]), np.array([g.n, g.oc, g.oh, g.ow]),
              np.array([g.ph, g.pw, g.groups, tpg])))]


def conv2d_float_shape(x_shape, g: ConvGeometry) -> tuple:
    """The output shape, of x's rank."""
    return (g.n, g.oc) + (g.oh, g.ow)[4 - len(x_shape):]


def _float_decline(node, tensors):
    x, w, b, y = (tensors[t] for t in (*node.inputs, node.outputs[0]))
    if {x.dtype, w.dtype, b.dtype, y.dtype} != {"float32"} or len(w.shape) != len(x.shape):
        return f"conv2d: {x.dtype} {x.shape} by {w.dtype} {w.shape} (the kernel takes float32, weight of x's rank)"
    _float_geometry(x.shape, w.shape, node.attrs)      # raises, naming what does not fit
    return None


@register_op
class Conv2d:
    """Float32 conv2d, x (N, C, H, W) or (N, C, L) (a conv1d: attrs for H (1, 0, 1)) or (N, C),
    weight of x's rank (OC, C/groups, ...), bias (OC,); attrs stride, padding, dilation (pairs),
    groups. Also what batch norm on a float tensor becomes (a depthwise 1x1 conv)."""
    name = "conv2d"
    shaders = ("conv2d_float",)
    reference = staticmethod(conv2d_float)
    build = staticmethod(_float_build)
    decline = staticmethod(_float_decline)
