"""linear_q8, linear_q8_fout, linear_dynamic, linear_weight_only.

On every test device the int8 ops equal their numpy references bit for bit (the packed output
words too, so padding bytes are 0), both with the integer dot product and without it, through
the tiled GEMM and the GEMV (one 4-row block); the float weight-only op agrees within a bound
on float rounding. The references are checked against PyTorch's float path (quantized_decomposed
dequantize -> F.linear -> quantize) within one int8 step."""
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F

from oputil import assert_same, single_op_program, spec
from vkq import packing
from vkq.device import get_device
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops import linear
from vkq.ops.linear import DOT_MAX_K, linear_q8_params, pack_weight, quantize_rows, reciprocal, use_dot_product
from vkq.quant import quantize_multiplier, quantize_multipliers
from vkq.registry import cpu_reason, get_op

QD = torch.ops.quantized_decomposed


# -- helpers ----------------------------------------------------------------------------------

@pytest.fixture(params=["mad", "dot", "mad-texel", "dot-texel"])
def int8_device(device, request):
    """The device with the int8 GEMMs' integer-dot-product path forced on ("dot") or off ("mad":
    unpack and multiply-add), the choice device.dot_product makes per device, each reading x and
    w from storage buffers or as texels ("-texel": the TEXEL variants, texel.glsl)."""
    return get_device(device.info, dot_product=request.param.startswith("dot"),
                      texel_loads=request.param.endswith("texel"))


def q8(rng, shape, lo=-128, hi=127):
    """Random int8 with both extremes present."""
    q = rng.integers(lo, hi + 1, shape).astype(np.int8)
    q.reshape(-1)[:2] = (lo, hi)[:q.size]
    return q


def weights(rng, n, k):
    """Per-output-channel symmetric int8 weights in [-127, 127] and their scales."""
    return q8(rng, (n, k), -127, 127), rng.uniform(0.002, 0.02, n)


def w_spec(w):
    return spec(w.shape, "int8", "4H4W")


def q8_program(x_shape, w, bias, m, s, attrs):
    out = tuple(x_shape[:-1]) + (w.shape[0],)
    n = (w.shape[0],)
    return single_op_program("linear_q8", [("x", spec(x_shape, "int8", "4H4W"))],
                             [("y", spec(out, "int8", "4H4W"))], attrs,
                             {"w": (w_spec(w), w), "b": (spec(n, str(np.asarray(bias).dtype)), bias),
                              "m": (spec(n, "int32"), m), "s": (spec(n, "int32"), s)})


def float_program(op, x_shape, w, consts):
    out = tuple(x_shape[:-1]) + (w.shape[0],)
    n = (w.shape[0],)
    return single_op_program(op, [("x", spec(x_shape))], [("y", spec(out))], {},
                             {"w": (w_spec(w), w), **{k: (spec(n), v) for k, v in consts.items()}})


def run_exact(device, prog, x):
    ex = VulkanExecutor(prog, device)
    got, ref = ex(x), run_reference(prog, x)
    assert_same((got,), (ref,))
    out = prog.tensors["y"]
    if out.dtype == "int8":   # the words themselves: padding rows and columns are 0
        np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, "4H4W"))
    return ref


def torch_dq_weight(w, w_scales):
    return QD.dequantize_per_channel(torch.from_numpy(w), torch.tensor(w_scales, dtype=torch.float64),
                                     torch.zeros(len(w_scales), dtype=torch.int64), 0, -127, 127, torch.int8)


def torch_linear_q8(x, x_scale, x_zp, w, w_scales, b, out_scale, out_zp, act=None):
    """PyTorch's float reference: dequantize x and w, F.linear, activation, quantize."""
    xf = QD.dequantize_per_tensor(torch.from_numpy(x), x_scale, x_zp, -128, 127, torch.int8)
    y = F.linear(xf, torch_dq_weight(w, w_scales), torch.from_numpy(b.astype(np.float32)))
    if act is not None:
        name, lo, hi = (act, 0.0, 6.0 if act == "relu6" else None) if isinstance(act, str) else act
        y = torch.clamp(y, lo, hi)
    return QD.quantize_per_tensor(y, out_scale, out_zp, -128, 127, torch.int8).numpy()


# cases: (x shape, N, x_zp, out_zp, activation)
Q8_CASES = [
    ((1, 1), 1, 0, 0, None),
    ((3, 5), 17, -128, 127, None),          # zero points at both ends
    ((5, 17), 3, 127, -128, "relu"),
    ((17, 37), 13, 3, -5, "relu6"),
    ((2, 3, 5), 7, -7, 10, ("hardtanh", -0.5, 0.3)),   # batch dims; bounds x max|y|
    ((2, 2, 3, 9), 5, 1, 0, None),          # rank 4
    ((37,), 4, 0, 2, None),                 # a single row
    ((1, 1001), 37, -128, 127, None),       # GEMV: K and N past its lanes and column tile
    ((2, 1, 13), 9, 5, -1, "relu"),         # a batch of 1-row matrices
    ((3, 2, 1, 97), 19, -3, 3, None),
    ((70, 37), 11, 2, -3, "relu"),          # past one 64-row tile (CPU drivers), the second partial
    ((2, 23, 29), 6, -1, 1, None),          # 2 x 23 rows packed as 2 x 24: one 64-row tile, rows padded
]


def q8_case(rng, x_shape, n, x_zp, out_zp, act, x_scale=0.05):
    k = x_shape[-1]
    x = q8(rng, x_shape)
    w, ws = weights(rng, n, k)
    b = rng.normal(0, 0.5, n)
    # an output scale that spreads the outputs over the int8 range
    y = torch.from_numpy((x.astype(np.float64) - x_zp) * x_scale) @ torch_dq_weight(w, ws).T.double()
    ymax = float(y.abs().max())
    out_scale = max(ymax / 100, 1e-3)
    if isinstance(act, tuple):   # hardtanh bounds given as fractions of max|y|
        act = (act[0], act[1] * ymax, act[2] * ymax)
    bias, m, s, qmin, qmax = linear_q8_params(x_scale, ws, out_scale, b, act, out_zp)
    attrs = dict(x_zp=x_zp, out_zp=out_zp, qmin=qmin, qmax=qmax)
    return x, w, ws, b, out_scale, act, (bias, m, s), attrs


# -- linear_q8 --------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,n,x_zp,out_zp,act", Q8_CASES)
def test_linear_q8_exact(int8_device, x_shape, n, x_zp, out_zp, act):
    rng = np.random.default_rng(sum(x_shape) * 100 + n)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, x_shape, n, x_zp, out_zp, act)
    ref = run_exact(int8_device, q8_program(x.shape, w, *consts, attrs), x)
    if ref.size > 20:   # not everything clamped to one value
        assert len(np.unique(ref)) > 5


@pytest.mark.parametrize("x_shape,n,x_zp,out_zp,act", Q8_CASES)
def test_linear_q8_reference_matches_torch(x_shape, n, x_zp, out_zp, act):
    rng = np.random.default_rng(sum(x_shape) * 100 + n)
    x, w, ws, b, out_scale, act, consts, attrs = q8_case(rng, x_shape, n, x_zp, out_zp, act)
    ref = get_op("linear_q8").reference(x, w, *consts, **attrs)
    want = torch_linear_q8(x, 0.05, x_zp, w, ws, b, out_scale, out_zp, act)
    assert np.abs(ref.astype(int) - want).max() <= 1


def test_linear_q8_extreme_multipliers(int8_device):
    """A multiplier near 1 (tiny accumulators) and one near 2^-20 (accumulators near 2^26 from
    all-extreme inputs, zero points at the ends)."""
    rng = np.random.default_rng(7)
    # M ~ 1: K = 3, values in [-3, 3]
    x = rng.integers(-3, 4, (9, 3)).astype(np.int8)
    w = rng.integers(-3, 4, (6, 3)).astype(np.int8)
    m, s = (np.full(6, v, np.int32) for v in quantize_multiplier(0.99999))
    bias = rng.integers(-20, 20, 6).astype(np.int32)
    ref = run_exact(int8_device, q8_program(x.shape, w, bias, m, s, dict(x_zp=-2, out_zp=0, qmin=-128, qmax=127)), x)
    assert ref.min() > -128 and ref.max() < 127   # nothing saturates, every bit of the product counts
    # M ~ 2^-20: K = 1500; row r is -128 for k < t_r and 127 after, x_zp = 127, so
    # acc = -255 * sum_{k < t_r} w, up to 255 * 127 * 1500 ~ 2^25.2
    t = np.linspace(0, 1500, 9).astype(int)
    x = np.where(np.arange(1500)[None, :] < t[:, None], -128, 127).astype(np.int8)
    w = np.where(rng.random((7, 1500)) < 0.9, -127, 127).astype(np.int8)
    m, s = quantize_multipliers(2.0 ** -20 * rng.uniform(1, 1.9, 7))
    attrs = dict(x_zp=127, out_zp=-128, qmin=-128, qmax=127)
    ref = run_exact(int8_device, q8_program(x.shape, w, np.zeros(7, np.int32), m, s, attrs), x)
    assert np.abs((x.astype(np.int64) - 127) @ w.astype(np.int64).T).max() > 2 ** 25
    assert len(np.unique(ref)) > 5
    one = x[6:7]   # one row: the GEMV
    ref = run_exact(int8_device, q8_program(one.shape, w, np.zeros(7, np.int32), m, s, attrs), one)
    assert len(np.unique(ref)) > 3


@pytest.mark.parametrize("rows", [1, 3, 37])
def test_linear_q8_fractional_bias(int8_device, rows):
    """A float64 bias at the accumulator's scale keeps its fraction (vkq.quant.split_bias): with a
    multiplier near 1 it moves many outputs, so the GEMV (1 and 3 rows) and the GEMM must add it
    exactly as the reference does; halves, whole numbers and 31 columns (padding) included."""
    rng = np.random.default_rng(rows)
    n, k = 31, 5
    x = rng.integers(-3, 4, (rows, k)).astype(np.int8)
    w = rng.integers(-3, 4, (n, k)).astype(np.int8)
    m, s = quantize_multipliers(rng.uniform(0.3, 0.9, n))
    bias = rng.integers(-20, 20, n) + rng.uniform(-0.5, 0.5, n)
    bias[:3] = [2.5, -0.5, 7.0]
    attrs = dict(x_zp=-2, out_zp=1, qmin=-128, qmax=127)
    ref = run_exact(int8_device, q8_program(x.shape, w, bias, m, s, attrs), x)
    rounded = get_op("linear_q8").reference(x, w, np.rint(bias).astype(np.int32), m, s, **attrs)
    assert np.mean(ref != rounded) > 0.05 and len(np.unique(ref)) > 5


@pytest.mark.parametrize("rows", [1, 5])
def test_linear_q8_at_the_dot_product_bound(int8_device, rows):
    """K = DOT_MAX_K with x and w all -128 in row 0 / column 0: that accumulator is
    K * 2^14 = 2^31 - 2^14, one product short of int32's limit, and nothing saturates."""
    k, n = DOT_MAX_K, 5
    rng = np.random.default_rng(rows)
    x = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    x[0], w[0] = -128, -128
    for j in range(1, n):   # x row 0 against -128s then 127s: accumulators across the range
        w[j] = np.where(np.arange(k) < k * j // n, -128, 127)
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    assert acc[0, 0] == (1 << 31) - (1 << 14)
    m, s = quantize_multipliers(np.full(n, 2.0 ** -25))
    ref = run_exact(int8_device, q8_program(x.shape, w, np.zeros(n, np.int32), m, s,
                                            dict(x_zp=0, out_zp=0, qmin=-128, qmax=127)), x)
    assert ref[0, 0] == 64 and len(np.unique(ref[0])) == n


def test_dot_product_choice():
    """The dot-product variants only where the device enables them and K cannot saturate."""
    class Dev:
        dot_product = True
    assert use_dot_product(Dev, DOT_MAX_K) and not use_dot_product(Dev, DOT_MAX_K + 1)
    assert DOT_MAX_K * 2 ** 14 < 2 ** 31 <= (DOT_MAX_K + 1) * 2 ** 14
    Dev.dot_product = False
    assert not use_dot_product(Dev, 16)


def test_linear_q8_params():
    bias, m, s, qmin, qmax = linear_q8_params(0.1, [0.01, 0.02], 0.5, [0.0105, -1.0], "relu6", -3)
    np.testing.assert_allclose(bias, [10.5, -500], rtol=1e-12)  # b / (0.1 * w_scale), its fraction kept
    np.testing.assert_allclose(m / 2.0 ** s, [0.002, 0.004], rtol=1e-9)
    assert (qmin, qmax) == (-3, 9)
    assert linear_q8_params(0.1, [0.01], 0.5, None, ("hardtanh", -1.0, 1.0), 0)[3:] == (-2, 2)
    with pytest.raises(ValueError):
        linear_q8_params(1e-9, [1e-9], 0.5, [1e3])             # bias does not fit int32


def test_pack_weight_layout():
    """Block (nt, kb, j): int32 i holds k = 4kb+i, byte b holds n = nt*TN + 4j + b."""
    rng = np.random.default_rng(3)
    w = q8(rng, (13, 10))
    tn, kstep = 8, 2
    words = pack_weight(w, tn, kstep).view(np.uint8).reshape(-1, 4, 4)   # (block, i, b)
    k4w = 4                                                      # ceil(ceil(10/4) / 2) * 2
    for nt in range(2):
        for kb in range(k4w):
            for j in range(tn // 4):
                blk = words[(nt * k4w + kb) * (tn // 4) + j].view(np.int8)
                for i in range(4):
                    for b in range(4):
                        n, k = nt * tn + 4 * j + b, 4 * kb + i
                        assert blk[i, b] == (w[n, k] if n < 13 and k < 10 else 0)
    f = pack_weight(w.astype(np.float32), tn, kstep)
    np.testing.assert_array_equal(f, pack_weight(w, tn, kstep).view(np.int8).astype(np.float32))
    # for the dot product each block is transposed: int32 b holds n, byte i holds k
    dot = pack_weight(w, tn, kstep, dot=True).view(np.int8).reshape(-1, 4, 4)
    np.testing.assert_array_equal(dot, words.view(np.int8).transpose(0, 2, 1))


@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape", [(1, 37), (2, 3, 37), (9, 37), (2, 9, 21), (70, 21)])
def test_linear_q8_table_epilogue(int8_device, x_shape, subgroups):
    """A lookup table fused after the requantization (attr lut, vkq/passes/fuse_epilogue.py):
    the GEMV (one 4-row block) and the GEMM (70 rows: 64-row tiles on CPU drivers), with and
    without subgroups, on both dot-product
    paths, equal the reference, which is linear_q8 then lut_q8; padding stays 0 (run_exact)."""
    device = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads, subgroups=subgroups)
    rng = np.random.default_rng(len(x_shape) * 100 + x_shape[-2])
    x, w, _, _, _, _, consts, attrs = q8_case(rng, x_shape, 13, 5, -2, None)
    table = rng.permutation(256).astype(np.int64) - 128          # every entry distinct: each one counts
    table = table.astype(np.int8)
    out = tuple(x_shape[:-1]) + (13,)
    n = (13,)
    prog = single_op_program("linear_q8", [("x", spec(x_shape, "int8", "4H4W"))], [("y", spec(out, "int8", "4H4W"))],
                             {**attrs, "lut": True},
                             {"w": (w_spec(w), w), "b": (spec(n, str(np.asarray(consts[0]).dtype)), consts[0]),
                              "m": (spec(n, "int32"), consts[1]), "s": (spec(n, "int32"), consts[2]),
                              "t": (spec((256,), "int8", "4H4W"), table)})   # a rank-1 constant's layout
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    ref = run_exact(device, prog, x)
    plain = get_op("linear_q8").reference(x, w, *consts, **attrs)
    np.testing.assert_array_equal(ref, table[plain.astype(np.int64) + 128])
    assert len(np.unique(ref)) > 8


@pytest.mark.parametrize("lut", [False, True])
@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape", [(1, 37), (2, 9, 21)])
def test_linear_q8_dequant_epilogue(int8_device, x_shape, subgroups, lut):
    """A dequantize fused after the requantization (and the table) (attr dequant,
    vkq/passes/fuse_epilogue.py): float32 out, bit for bit the reference, which is linear_q8
    (then lut_q8) then dequantize, through the GEMV and the GEMM, with and without subgroups,
    on both dot-product paths. The dequantize's zero point and scale are not the linear's."""
    device = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads, subgroups=subgroups)
    rng = np.random.default_rng(x_shape[-1] + 7 * lut)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, x_shape, 13, 5, -2, None)
    table = (rng.permutation(256) - 128).astype(np.int8)
    deq = {"scale": 0.0371, "zero_point": 3}
    out, n = tuple(x_shape[:-1]) + (13,), (13,)
    tconst = {"t": (spec((256,), "int8", "4H4W"), table)} if lut else {}
    prog = single_op_program("linear_q8", [("x", spec(x_shape, "int8", "4H4W"))], [("y", spec(out))],
                             {**attrs, "lut": lut, "dequant": deq},
                             {"w": (w_spec(w), w), "b": (spec(n, str(np.asarray(consts[0]).dtype)), consts[0]),
                              "m": (spec(n, "int32"), consts[1]), "s": (spec(n, "int32"), consts[2]), **tconst})
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    ref = run_exact(device, prog, x)
    q = get_op("linear_q8").reference(x, w, *consts, **attrs)
    q = table[q.astype(np.int64) + 128] if lut else q
    np.testing.assert_array_equal(ref, (q.astype(np.float32) - np.float32(3)) * np.float32(0.0371))
    assert ref.dtype == np.float32 and len(np.unique(ref)) > 8


@pytest.mark.parametrize("rows", [9, 3])
def test_linear_q8_without_subgroups(int8_device, rows):
    """The PLAIN variants (a device without subgroup operations) give the same bits: the GEMM
    (9 rows) and the GEMV (3 rows), whose lanes then add up their partial sums in shared memory;
    int8 and float outputs, the row quantizer, and the float GEMMs of weight-only."""
    device = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads, subgroups=False)
    assert linear.subgroup_lanes(device.info) == 0
    rng = np.random.default_rng(11)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, (2, rows, 21), 11, 5, -2, None)
    run_exact(device, q8_program(x.shape, w, *consts, attrs), x)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, (rows, 203), 37, 5, -2, None)
    run_exact(device, q8_program(x.shape, w, *consts, attrs), x)
    fout = {"b": rng.normal(0, 1, 37).astype(np.float32), "s": rng.uniform(1e-3, 1e-2, 37).astype(np.float32)}
    run_exact(device, single_op_program("linear_q8_fout", [("x", spec(x.shape, "int8", "4H4W"))],
                                        [("y", spec(x.shape[:-1] + (37,)))], {"x_zp": 5},
                                        {"w": (w_spec(w), w), **{k: (spec((37,)), v) for k, v in fout.items()}}), x)
    consts = {"s": rng.uniform(1e-3, 1e-2, 11).astype(np.float32), "b": rng.normal(0, 1, 11).astype(np.float32)}
    xf = rng.normal(0, 1, (rows, 24)).astype(np.float32)
    for xw in (xf, np.ascontiguousarray(xf[:, :21])):   # float x read as vec4 (K % 4 == 0) and by value
        ww = w[:11, :xw.shape[1]]
        run_exact(device, float_program("linear_dynamic", xw.shape, ww, consts), xw)
        got = VulkanExecutor(float_program("linear_weight_only", xw.shape, ww, consts), device)(xw)
        np.testing.assert_allclose(got, get_op("linear_weight_only").reference(xw, ww, consts["s"], consts["b"]),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("subgroups", [True, False])
def test_fp32_baseline_gemm(device, subgroups):
    """The benchmark's fp32 baseline (float weights through the same float GEMM and GEMV) agrees
    with numpy, x read as vec4 (K % 4 == 0) and by value, with and without subgroups."""
    from vkq.bench.kernels import linear_f32_steps
    dev = get_device(device.info, subgroups=subgroups)
    for m, k, n in ((1, 96, 40), (3, 37, 9), (9, 40, 21), (9, 37, 21)):
        linear_f32_steps(dev, m, k, n, np.random.default_rng(m + k), verify=True)


def test_weight_must_be_constant(device):
    w = np.ones((3, 4), np.int8)
    prog = single_op_program("linear_q8", [("x", spec((2, 4), "int8", "4H4W")), ("w", w_spec(w))],
                             [("y", spec((2, 3), "int8", "4H4W"))], dict(x_zp=0, out_zp=0),
                             {"b": (spec((3,), "int32"), np.zeros(3, np.int32)),
                              "m": (spec((3,), "int32"), np.full(3, 1 << 30, np.int32)),
                              "s": (spec((3,), "int32"), np.full(3, 31, np.int32))})
    with pytest.raises(ValueError, match="constant"):
        VulkanExecutor(prog, device)


# -- linear_q8_fout ---------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,n,x_zp", [((1, 3), 1, 0), ((5, 17), 13, -128), ((2, 3, 37), 7, 127),
                                            ((6, 601), 5, 127), ((1, 601), 23, 127)])
def test_linear_q8_fout_exact(int8_device, x_shape, n, x_zp):
    """f32(acc) * scale + bias bit for bit; K = 601 of extreme values puts |acc| above 2^24,
    where f32(acc) itself rounds."""
    rng = np.random.default_rng(n)
    x = q8(rng, x_shape)
    w, ws = weights(rng, n, x_shape[-1])
    if x_shape[-1] == 601:
        x[:] = -128
        w[:] = rng.choice(np.array([127, 125], np.int8), w.shape)
    consts = {"b": rng.normal(0, 1, n).astype(np.float32), "s": (0.05 * ws).astype(np.float32)}
    prog = single_op_program("linear_q8_fout", [("x", spec(x_shape, "int8", "4H4W"))],
                             [("y", spec(x_shape[:-1] + (n,)))], {"x_zp": x_zp},
                             {"w": (w_spec(w), w), **{k: (spec((n,)), v) for k, v in consts.items()}})
    ref = run_exact(int8_device, prog, x)
    if x_shape[-1] == 601:
        acc = (x.astype(np.int64) - x_zp) @ w.astype(np.int64).T
        assert np.abs(acc).min() > 2 ** 24 and np.any(acc.astype(np.float32).astype(np.int64) != acc)
    # PyTorch: dequantize, F.linear; float32 rounding apart, the same numbers
    want = F.linear(QD.dequantize_per_tensor(torch.from_numpy(x), 0.05, x_zp, -128, 127, torch.int8),
                    torch_dq_weight(w, ws), torch.from_numpy(consts["b"])).numpy()
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-4)


# -- linear_dynamic ---------------------------------------------------------------------------

def awkward_rows(rng, k):
    """Rows that stress the per-row quantizer: zeros, one sign only, constant, tiny, huge,
    exact ties of x * inv."""
    rows = [np.zeros(k), np.abs(rng.normal(0, 1, k)), -np.abs(rng.normal(0, 3, k)), np.full(k, 0.7),
            rng.normal(0, 1e-25, k), rng.normal(0, 1e25, k), np.linspace(-1, 1, k) * 127.5 / 128]
    rows.append(np.round(rng.normal(0, 40, k)) * np.float32(1 / 255.0) * 3)
    return np.array(rows, np.float32)


def test_quantize_rows():
    """scale, zp and q as documented; dequantized rows within half a step of x; and close to
    PyTorch's choose_qparams_per_token_asymmetric (which divides in float64)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([awkward_rows(rng, 50), rng.normal(0, 2, (20, 50)).astype(np.float32)])
    q, scale, zp = quantize_rows(x)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    deq = (q.astype(np.float32) - zp[:, None]) * scale[:, None]
    assert np.all(np.abs(deq - x) <= scale[:, None] * 0.5001 + 1e-30)
    lo, hi = ((np.array([-128, 127])[None, :] - zp[:, None]) * scale[:, None].astype(np.float64)).T
    assert np.all(lo <= np.minimum(x.min(1), 0) + scale * 0.5001)     # [-128, 127] covers [mn, mx]
    assert np.all(hi >= np.maximum(x.max(1), 0) - scale * 0.5001)
    r = reciprocal(scale)
    assert np.all(np.abs(r.astype(np.float64) * scale - 1) < 3e-7)
    t_scale, t_zp = QD.choose_qparams_per_token_asymmetric(torch.from_numpy(x[8:]), torch.int8)
    np.testing.assert_allclose(scale[8:], t_scale.numpy()[:, 0], rtol=1e-6)
    assert np.abs(zp[8:] - t_zp.numpy()[:, 0]).max() <= 1


@pytest.mark.parametrize("x_shape,n", [((1, 1), 1), ((3, 5), 17), ((2, 5, 37), 3), ((8, 50), 13), ((1, 50), 29),
                                       ((9, 48), 7)])
def test_linear_dynamic_exact(int8_device, x_shape, n):
    rng = np.random.default_rng(n)
    k = x_shape[-1]
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    if x_shape == (8, 50):
        x = awkward_rows(rng, 50)
    if x_shape == (1, 50):
        x = awkward_rows(rng, 50)[-1:]
    if x_shape == (9, 48):   # K % 4 == 0: x read as vec4
        x = np.concatenate([awkward_rows(rng, 48), rng.normal(0, 2, (1, 48)).astype(np.float32)])
    w, ws = weights(rng, n, k)
    consts = {"s": ws.astype(np.float32), "b": rng.normal(0, 1, n).astype(np.float32)}
    ref = run_exact(int8_device, float_program("linear_dynamic", x.shape, w, consts), x)
    assert np.all(np.isfinite(ref))


@pytest.mark.parametrize("k", [37, 48])
def test_linear_dynamic_rows_with_a_nan_or_infinity_come_out_nan(int8_device, k):
    """PT2E's per-token range of a row holding a NaN or an infinity is NaN or infinite, and all of
    that row's outputs NaN; the device's min / max dropped the NaN and made numbers of it. Now
    such a row is NaN throughout, the other rows exact as before."""
    rng = np.random.default_rng(k)
    x = rng.normal(0, 2, (7, k)).astype(np.float32)
    x[1, 3], x[2, 0], x[4, k - 1], x[5, 5], x[5, 6] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    w, ws = weights(rng, 11, k)
    consts = {"s": ws.astype(np.float32), "b": rng.normal(0, 1, 11).astype(np.float32)}
    ref = run_exact(int8_device, float_program("linear_dynamic", x.shape, w, consts), x)
    bad = ~np.isfinite(x).all(axis=1)
    assert np.isnan(ref[bad]).all() and np.isfinite(ref[~bad]).all()
    tx = torch.from_numpy(x)
    sc, zp = QD.choose_qparams_per_token_asymmetric(tx, torch.int8)
    xd = QD.dequantize_per_token(QD.quantize_per_token(tx, sc, zp, -128, 127, torch.int8), sc, zp,
                                 -128, 127, torch.int8, torch.float32)
    assert np.isnan(F.linear(xd, torch_dq_weight(w, ws)).numpy()[bad]).all()


def test_linear_dynamic_reference_matches_torch():
    """Against PyTorch's per-token path (choose_qparams / quantize / dequantize_per_token,
    F.linear) and the float linear: both within half an x step times sum_k |w|."""
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2, (2, 7, 40)).astype(np.float32)
    w, ws = weights(rng, 9, 40)
    b = rng.normal(0, 1, 9).astype(np.float32)
    ref = get_op("linear_dynamic").reference(x, w, ws.astype(np.float32), b)
    wf = torch_dq_weight(w, ws)
    tx = torch.from_numpy(x.reshape(-1, 40))
    sc, zp = QD.choose_qparams_per_token_asymmetric(tx, torch.int8)
    tq = QD.quantize_per_token(tx, sc, zp, -128, 127, torch.int8)
    xd = QD.dequantize_per_token(tq, sc, zp, -128, 127, torch.int8, torch.float32)
    want = F.linear(xd, wf, torch.from_numpy(b)).numpy().reshape(ref.shape)
    exact = F.linear(torch.from_numpy(x), wf, torch.from_numpy(b)).numpy()
    step = quantize_rows(x.reshape(-1, 40))[1].reshape(2, 7, 1)
    bound = 0.5 * step * np.abs(wf.numpy()).sum(axis=1) + 1e-5
    assert np.all(np.abs(ref - exact) <= bound)
    assert np.all(np.abs(want - exact) <= bound)



@pytest.mark.parametrize("epilogue", ["silu", "add", "mul"])
@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape,n", [((1, 37), 29), ((3, 48), 13), ((2, 5, 37), 7)])
def test_linear_dynamic_float_epilogue(int8_device, x_shape, n, epilogue, subgroups):
    """A float op fused after linear_dynamic (attr epilogue, vkq/passes/fuse_float_epilogue.py):
    silu, a residual add, a multiply by another tensor. The device gives the reference's bits,
    and the reference is the linear then the op's own reference, through the GEMV (1 and 3 rows)
    and the GEMM (10 rows), with and without subgroups, on both dot-product paths."""
    from vkq.program import Node, Program
    device = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads,
                        subgroups=subgroups)
    rng = np.random.default_rng(n)
    k, out = x_shape[-1], tuple(x_shape[:-1]) + (n,)
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    w, ws = weights(rng, n, k)
    consts = {"w": (w_spec(w), w), "s": (spec((n,)), (4 * ws).astype(np.float32)),
              "b": (spec((n,)), rng.normal(0, 3, n).astype(np.float32))}
    other = rng.normal(0, 2, out).astype(np.float32)
    other.reshape(-1)[:3] = (np.inf, -0.0, 1e-30)
    ins = [("x", spec(x_shape))] + ([("o", spec(out))] if epilogue != "silu" else [])
    tensors = {**dict(ins), **{t: c[0] for t, c in consts.items()}, "y": spec(out)}
    node = Node("linear_dynamic", ["x", "w", "s", "b"] + (["o"] if epilogue != "silu" else []), ["y"],
                {"epilogue": epilogue})
    prog = Program(tensors=tensors, nodes=[node], inputs=[t for t, _ in ins], outputs=["y"],
                   constants={t: c[1] for t, c in consts.items()})
    prog.validate()
    arrays = (x, other)[:len(ins)]
    got, ref = VulkanExecutor(prog, device)(*arrays), run_reference(prog, *arrays)
    assert_same((got,), (ref,))
    lin = get_op("linear_dynamic").reference(x, w, consts["s"][1], consts["b"][1])
    want = {"silu": lambda: get_op("silu").reference(lin), "add": lambda: get_op("add").reference(other, lin),
            "mul": lambda: get_op("mul").reference(lin, other)}[epilogue]()
    np.testing.assert_array_equal(ref, want)
    assert len(np.unique(ref)) > ref.size // 2 and (lin < 0).any() and (lin > 0).any()


@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape,n,epilogue", [((1, 37), 29, None), ((1, 576), 13, "add"), ((3, 48), 13, "silu"),
                                                ((2, 5, 23), 7, None), ((1, 2, 1000), 5, None)])
def test_linear_dynamic_fused_rms_norm(device, x_shape, n, epilogue, subgroups):
    """An rms_norm before linear_dynamic (attr rms_norm, vkq/passes/fuse_float_epilogue.py
    fuse_rms_norm), computed by the row quantizer (linear_rowq.comp NORM): the device gives the
    reference's bits, and the reference is the op rms_norm then the linear (then its epilogue),
    K not a multiple of 4 or 64, rows with a subnormal, a zero and a huge value, 1 row and more,
    with and without subgroups."""
    from vkq.program import Node, Program
    dev = get_device(device.info, subgroups=subgroups)
    rng = np.random.default_rng(x_shape[-1])
    k, out = x_shape[-1], tuple(x_shape[:-1]) + (n,)
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    flat = x.reshape(-1, k)
    flat[0, :3] = (1e-40, 0.0, -3e4)
    if flat.shape[0] > 2:
        flat[2] = 0.0
    w, ws = weights(rng, n, k)
    norm_w = rng.normal(1, 0.5, k).astype(np.float32)
    consts = {"w": (w_spec(w), w), "s": (spec((n,)), ws.astype(np.float32)),
              "b": (spec((n,)), rng.normal(0, 1, n).astype(np.float32)), "g": (spec((k,)), norm_w)}
    other = rng.normal(0, 1, out).astype(np.float32)
    ins = [("x", spec(x_shape))] + ([("o", spec(out))] if epilogue == "add" else [])
    tensors = {**dict(ins), **{t: c[0] for t, c in consts.items()}, "y": spec(out)}
    attrs = {"rms_norm": {"eps": 1e-5}, **({"epilogue": epilogue} if epilogue else {})}
    node = Node("linear_dynamic", ["x", "w", "s", "b"] + (["o"] if epilogue == "add" else []) + ["g"], ["y"], attrs)
    prog = Program(tensors=tensors, nodes=[node], inputs=[t for t, _ in ins], outputs=["y"],
                   constants={t: c[1] for t, c in consts.items()})
    prog.validate()
    arrays = (x, other)[:len(ins)]
    ex = VulkanExecutor(prog, dev)
    got, ref = ex(*arrays), run_reference(prog, *arrays)
    assert [st.variant for seg in ex.segments for st in seg[1].steps][0].startswith("linear_rowq(NORM")
    assert_same((got,), (ref,))
    normed = get_op("rms_norm").reference(x, norm_w, normalized_shape=[k], eps=1e-5)
    want = get_op("linear_dynamic").reference(normed, w, consts["s"][1], consts["b"][1],
                                              *((other,) if epilogue == "add" else ()), epilogue=epilogue)
    np.testing.assert_array_equal(ref, want)
    assert len(np.unique(ref)) > ref.size // 2

# -- linear_weight_only -----------------------------------------------------------------------

def weight_only_tolerance(x, w, ws, k):
    """float32 sums in another order: 1e-6 * sqrt(K) ulp-scale error per |x||w| term."""
    mag = np.abs(x.reshape(-1, k)).astype(np.float64) @ np.abs(w.astype(np.float64)).T * ws
    return (1e-6 * np.sqrt(k) * mag + 1e-6).reshape(x.shape[:-1] + (w.shape[0],))


@pytest.mark.parametrize("x_shape,n", [((1, 1), 1), ((3, 5), 17), ((2, 5, 37), 3), ((17, 130), 13),
                                       ((1, 2, 200), 37)])
def test_linear_weight_only(device, x_shape, n):
    rng = np.random.default_rng(n + 1)
    k = x_shape[-1]
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    w, ws = weights(rng, n, k)
    consts = {"s": ws.astype(np.float32), "b": rng.normal(0, 1, n).astype(np.float32)}
    prog = float_program("linear_weight_only", x.shape, w, consts)
    got, ref = VulkanExecutor(prog, device)(x), run_reference(prog, x)
    tol = weight_only_tolerance(x, w, ws, k)
    assert np.all(np.abs(got - ref) <= tol)
    want = F.linear(torch.from_numpy(x), torch_dq_weight(w, ws), torch.from_numpy(consts["b"])).numpy()
    assert np.all(np.abs(ref - want) <= tol)


# -- real layer shapes ------------------------------------------------------------------------

@pytest.mark.parametrize("k,n", [(384, 384), (384, 1536), (1536, 384)])
def test_transformer_shapes(int8_device, k, n):
    """A ViT-S/DeiT-S block's linears at 128 tokens, and at one token (the GEMV): static int8
    exactly, dynamic exactly, weight-only within tolerance."""
    rng = np.random.default_rng(k + n)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, (128, k), n, -3, 4, None, x_scale=0.02)
    device = int8_device
    run_exact(device, q8_program(x.shape, w, *consts, attrs), x)
    run_exact(device, q8_program(x[:1].shape, w, *consts, attrs), x[:1])
    xf = rng.normal(0, 1, (128, k)).astype(np.float32)
    _, ws = weights(rng, n, k)
    fc = {"s": ws.astype(np.float32), "b": rng.normal(0, 1, n).astype(np.float32)}
    run_exact(device, float_program("linear_dynamic", xf.shape, w, fc), xf)
    run_exact(device, float_program("linear_dynamic", xf[:1].shape, w, fc), xf[:1])
    for xw in (xf, xf[:1]):   # the tiled GEMM and the GEMV
        prog = float_program("linear_weight_only", xw.shape, w, fc)
        got = VulkanExecutor(prog, device)(xw)
        assert np.all(np.abs(got - run_reference(prog, xw)) <= weight_only_tolerance(xw, w, ws, k))


@pytest.mark.parametrize("out_dtype,deq", [("int8", {"scale": 0.05, "zero_point": 3}), ("float32", None),
                                           ("float32", {"scale": 0.05}), ("float32", {"scale": -1.0, "zero_point": 0})])
def test_linear_q8_dequant_attr_refused_when_malformed(device, out_dtype, deq):
    """A program file whose fused dequantize does not fit (an int8 output with it, a float output
    without it, a missing or impossible scale / zero point) is refused when built, naming the
    node, instead of the shader writing words of the wrong kind or count."""
    rng = np.random.default_rng(4)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, (5, 21), 6, 5, -2, None)
    out = spec((5, 6), "int8", "4H4W") if out_dtype == "int8" else spec((5, 6))
    prog = single_op_program("linear_q8", [("x", spec(x.shape, "int8", "4H4W"))], [("y", out)],
                             {**attrs, **({"dequant": deq} if deq is not None else {})},
                             {"w": (w_spec(w), w), "b": (spec((6,), str(np.asarray(consts[0]).dtype)), consts[0]),
                              "m": (spec((6,), "int32"), consts[1]), "s": (spec((6,), "int32"), consts[2])})
    with pytest.raises(ValueError, match="dequant"):
        VulkanExecutor(prog, device)(x)


# -- the GEMV's two lane layouts ---------------------------------------------------------------

def _gemv_variant(device, rows):
    rng = np.random.default_rng(rows)
    x, w, _, _, _, _, consts, attrs = q8_case(rng, (rows, 203), 37, 5, -2, None)
    ex = VulkanExecutor(q8_program(x.shape, w, *consts, attrs), device)
    assert_same((ex(x),), (run_reference(ex.program, x),))
    return [st.variant for seg in ex.segments for st in seg[1].steps][0]


def test_gemv_lanes_own_columns_on_cpu_drivers(device, monkeypatch):
    """CPU drivers take the GEMV whose lanes own columns (COLS: 576 x 1536 in 0.45 of the time,
    vkq/ops/linear.py gemv_over_columns); GPUs the one whose lanes split K; GEMV_COLS forces
    either, and more than one 4-row block takes the tiled GEMM as before."""
    assert device.info.is_software and linear.gemv_over_columns(device.info)
    assert _gemv_variant(device, 1).startswith("linear_gemv(COLS")
    monkeypatch.setattr(linear, "GEMV_COLS", False)
    assert _gemv_variant(device, 3).startswith("linear_gemv(OUT_Q8")
    monkeypatch.setattr(linear, "GEMV_COLS", True)
    assert _gemv_variant(device, 5).startswith("linear_q8(")


@pytest.mark.parametrize("subgroups", [True, False])
def test_gemv_lanes_splitting_k(int8_device, subgroups, monkeypatch):
    """The GEMV whose lanes split K, then add up their partial sums (subgroupAdd; PLAIN: in
    shared memory): GPUs take it, CPU drivers the COLS one that the tests above run, so it is
    forced here. Each epilogue (int8, float, per-row quantized x with a fused add, table,
    dequantize), 1 and 3 rows, K past the lanes, N past a column tile, give the reference's bits."""
    monkeypatch.setattr(linear, "GEMV_COLS", False)
    dev = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads,
                     subgroups=subgroups)
    test_linear_q8_exact(dev, (1, 1001), 37, -128, 127, None)
    test_linear_q8_exact(dev, (2, 1, 13), 9, 5, -1, "relu")
    test_linear_q8_fout_exact(dev, (1, 601), 23, 127)
    test_linear_dynamic_exact(dev, (1, 50), 29)
    test_linear_dynamic_float_epilogue(dev, (3, 48), 13, "add", subgroups)
    test_linear_q8_table_epilogue(dev, (1, 37), subgroups)
    for lut in (False, True):
        test_linear_q8_dequant_epilogue(dev, (1, 37), subgroups, lut)


# -- linear_dynamic_parts (a layer's q, k, v in one node) ---------------------------------------

def parts_program(x_shape, ns, norm, rng):
    """linear_dynamic_parts over len(ns) parts of N = ns, [an rms_norm], and its constants."""
    from vkq.program import Node, Program
    k = x_shape[-1]
    consts, ins = {}, ["x"]
    for i, n in enumerate(ns):
        w, ws = weights(rng, n, k)
        consts.update({f"w{i}": (w_spec(w), w), f"s{i}": (spec((n,)), ws.astype(np.float32)),
                       f"b{i}": (spec((n,)), rng.normal(0, 1, n).astype(np.float32))})
        ins += [f"w{i}", f"s{i}", f"b{i}"]
    if norm:
        consts["g"] = (spec((k,)), rng.normal(1, 0.5, k).astype(np.float32))
        ins.append("g")
    outs = [f"y{i}" for i in range(len(ns))]
    tensors = {"x": spec(x_shape), **{t: c[0] for t, c in consts.items()},
               **{o: spec(tuple(x_shape[:-1]) + (n,)) for o, n in zip(outs, ns)}}
    attrs = {"parts": len(ns), **({"rms_norm": {"eps": 1e-5}} if norm else {})}
    prog = Program(tensors=tensors, nodes=[Node("linear_dynamic_parts", ins, outs, attrs)], inputs=["x"],
                   outputs=outs, constants={t: c[1] for t, c in consts.items()})
    prog.validate()
    return prog


@pytest.mark.parametrize("cols", [True, False])
@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape,ns,norm", [((1, 37), (29, 7, 13), True), ((1, 1, 576), (65, 3), False),
                                             ((3, 48), (13, 70, 5), False), ((9, 37), (5, 11), True)])
def test_linear_dynamic_parts_exact(int8_device, x_shape, ns, norm, subgroups, cols, monkeypatch):
    """Each output is linear_dynamic's of its part, bit for bit, on the device and in the
    reference: one COLS PARTS dispatch (at most 4 rows, a CPU driver; N past a column tile and
    not a multiple of 4, a part smaller than a tile), or the separate dispatches (split-K GEMV,
    9 rows: the tiled GEMM); with and without the fused rms_norm."""
    monkeypatch.setattr(linear, "GEMV_COLS", cols)
    dev = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads,
                     subgroups=subgroups)
    rng = np.random.default_rng(sum(ns) + x_shape[-1])
    prog = parts_program(x_shape, ns, norm, rng)
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    x.reshape(-1)[:2] = (1e-40, -3e4)
    ex = VulkanExecutor(prog, dev)
    got, ref = ex(x), run_reference(prog, x)
    assert_same(got, ref)
    c = prog.constants
    for i, n in enumerate(ns):
        want = get_op("linear_dynamic").reference(x, c[f"w{i}"], c[f"s{i}"], c[f"b{i}"], *([c["g"]] if norm else []),
                                                  rms_norm={"eps": 1e-5} if norm else None)
        np.testing.assert_array_equal(ref[i], want)
        assert len(np.unique(ref[i])) > ref[i].size // 2
    variants = [st.variant for seg in ex.segments for st in seg[1].steps]
    one = cols and x_shape[-2] <= 4
    assert sum("COLS" in v and "PARTS" in v for v in variants) == int(one)
    assert sum(v.startswith("linear_rowq") for v in variants) == 1
    assert len(variants) == (2 if one else 1 + len(ns))


def test_row_linears_grouped():
    """group_row_linears: the linear_dynamic nodes without an epilogue reading one x with one
    rms_norm become one node in the first one's place, at most 3 a node; one with an epilogue, of
    another x or another norm stays; a kept node only leads a group (it keeps its name)."""
    from vkq.ops.linear_parts import group_row_linears
    from vkq.program import Node, Program
    rng = np.random.default_rng(0)
    tensors, consts, nodes = {"x": spec((1, 8)), "z": spec((1, 8)), "g": spec((8,)), "h": spec((8,))}, {}, []
    consts.update(g=np.ones(8, np.float32), h=np.ones(8, np.float32))

    def lin(i, x, norm=None, epilogue=None):
        w, ws = weights(rng, 4, 8)
        consts.update({f"w{i}": w, f"s{i}": ws.astype(np.float32), f"b{i}": np.zeros(4, np.float32)})
        tensors.update({f"w{i}": w_spec(w), f"s{i}": spec((4,)), f"b{i}": spec((4,)), f"y{i}": spec((1, 4))})
        attrs = {**({"rms_norm": {"eps": 1e-5}} if norm else {}), **({"epilogue": epilogue} if epilogue else {})}
        ins = [x, f"w{i}", f"s{i}", f"b{i}"] + (["y0"] if epilogue == "add" else []) + ([norm] if norm else [])
        nodes.append(Node("linear_dynamic", ins, [f"y{i}"], attrs, name=f"n{i}"))
    for i, (x, norm, epi) in enumerate([("x", "g", None), ("x", None, None), ("x", "g", None), ("x", "h", None),
                                        ("z", "g", None), ("x", "g", "silu"), ("x", "g", None), ("x", "g", None),
                                        ("x", None, "add"), ("x", None, None)]):
        lin(i, x, norm, epi)
    prog = Program(tensors, nodes, ["x", "z"], [f"y{i}" for i in range(10)], consts)
    prog.validate()
    x = rng.normal(0, 1, (2, 1, 8)).astype(np.float32)
    want = run_reference(prog, *x)
    assert group_row_linears(prog) == 2
    assert [(n.name, n.op, n.outputs) for n in prog.nodes] == [
        ("n0", "linear_dynamic_parts", ["y0", "y2", "y6"]), ("n1", "linear_dynamic_parts", ["y1", "y9"]),
        ("n3", "linear_dynamic", ["y3"]), ("n4", "linear_dynamic", ["y4"]), ("n5", "linear_dynamic", ["y5"]),
        ("n7", "linear_dynamic", ["y7"]), ("n8", "linear_dynamic", ["y8"])]
    assert_same(run_reference(prog, *x), want)
    first = [(n.name, n.inputs, n.outputs) for n in prog.nodes]
    for keep, lead in ((frozenset(n.name for n in prog.nodes), ["n0"]), (frozenset({"n2"}), ["n2"])):
        again = Program(tensors, [Node(n.op, n.inputs, n.outputs, n.attrs, n.name) for n in nodes], ["x", "z"],
                        prog.outputs, consts)
        group_row_linears(again, keep)   # (what the first pass left kept: the same nodes again)
        assert [n.name for n in again.nodes if n.op == "linear_dynamic_parts" and "g" in n.inputs] == lead
        assert lead != ["n0"] or [(n.name, n.inputs, n.outputs) for n in again.nodes] == first


@pytest.mark.parametrize("cols", [True, False])
@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("x_shape,n,norm", [((1, 37), 29, True), ((1, 1, 576), 70, False), ((3, 48), 13, True),
                                            ((9, 37), 5, False)])
def test_linear_dynamic_glu_exact(int8_device, x_shape, n, norm, subgroups, cols, monkeypatch):
    """linear_dynamic_glu's gate and up are the two linear_dynamic nodes' (silu; up times the
    gate), bit for bit: one COLS GLU dispatch (at most 4 rows, a CPU driver) or the separate ones."""
    from vkq.program import Node, Program
    monkeypatch.setattr(linear, "GEMV_COLS", cols)
    dev = get_device(int8_device.info, dot_product=int8_device.dot_product, texel_loads=int8_device.texel_loads,
                     subgroups=subgroups)
    rng = np.random.default_rng(n + x_shape[-1])
    k, out = x_shape[-1], tuple(x_shape[:-1]) + (n,)
    consts = {}
    for p in "gu":
        w, ws = weights(rng, n, k)
        consts.update({f"w{p}": (w_spec(w), w), f"s{p}": (spec((n,)), (4 * ws).astype(np.float32)),
                       f"b{p}": (spec((n,)), rng.normal(0, 3, n).astype(np.float32))})
    if norm:
        consts["g"] = (spec((k,)), rng.normal(1, 0.5, k).astype(np.float32))
    ins = ["x", "wg", "sg", "bg", "wu", "su", "bu"] + (["g"] if norm else [])
    tensors = {"x": spec(x_shape), **{t: c[0] for t, c in consts.items()}, "gate": spec(out), "up": spec(out)}
    prog = Program(tensors, [Node("linear_dynamic_glu", ins, ["gate", "up"], {"rms_norm": {"eps": 1e-5}} if norm else {})],
                   ["x"], ["gate", "up"], {t: c[1] for t, c in consts.items()})
    prog.validate()
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    ex = VulkanExecutor(prog, dev)
    got, ref = ex(x), run_reference(prog, x)
    assert_same(got, ref)
    c = {t: v[1] for t, v in consts.items()}
    nm = dict(rms_norm={"eps": 1e-5} if norm else None)
    lin = get_op("linear_dynamic").reference
    gate = lin(x, c["wg"], c["sg"], c["bg"], *([c["g"]] if norm else []), epilogue="silu", **nm)
    up = lin(x, c["wu"], c["su"], c["bu"], gate, *([c["g"]] if norm else []), epilogue="mul", **nm)
    np.testing.assert_array_equal(ref[0], gate)
    np.testing.assert_array_equal(ref[1], up)
    assert len(np.unique(up)) > up.size // 2 and (gate < 0).any()
    variants = [st.variant for seg in ex.segments for st in seg[1].steps]
    one = cols and x_shape[-2] <= 4
    assert sum("GLU" in v for v in variants) == int(one) and len(variants) == (2 if one else 3)


def test_glu_linears_paired():
    """pair_glu_linears: a silu linear and the mul linear by its output, of one x and one norm, ->
    one linear_dynamic_glu in the gate's place; a mul by something else, another x or a kept up
    stays."""
    from vkq.ops.linear_parts import pair_glu_linears
    from vkq.program import Node, Program
    rng = np.random.default_rng(1)
    tensors, consts, nodes = {"x": spec((1, 8)), "z": spec((1, 8)), "g": spec((8,))}, {"g": np.ones(8, np.float32)}, []

    def lin(i, x, epi, other=None, norm="g"):
        w, ws = weights(rng, 4, 8)
        consts.update({f"w{i}": w, f"s{i}": ws.astype(np.float32), f"b{i}": np.zeros(4, np.float32)})
        tensors.update({f"w{i}": w_spec(w), f"s{i}": spec((4,)), f"b{i}": spec((4,)), f"y{i}": spec((1, 4))})
        ins = [x, f"w{i}", f"s{i}", f"b{i}"] + ([other] if other else []) + ([norm] if norm else [])
        nodes.append(Node("linear_dynamic", ins, [f"y{i}"], {"epilogue": epi, **({"rms_norm": {"eps": 1e-5}} if norm else {})},
                          name=f"n{i}"))
    lin(0, "x", "silu"), lin(1, "x", None), lin(2, "x", "mul", "y0"), lin(3, "x", "silu"), lin(4, "x", "mul", "y1")
    lin(5, "z", "mul", "y3"), lin(6, "x", "silu", norm=None), lin(7, "x", "mul", "y6", norm=None)
    lin(8, "x", "silu"), lin(9, "x", "mul", "y8")
    prog = Program(tensors, nodes, ["x", "z"], [f"y{i}" for i in range(10)], consts)
    prog.validate()
    x = rng.normal(0, 1, (2, 1, 8)).astype(np.float32)
    want = run_reference(prog, *x)
    assert pair_glu_linears(prog, keep=frozenset({"n9"})) == 2
    assert [(n.name, n.op, n.outputs) for n in prog.nodes if n.op == "linear_dynamic_glu"] == [
        ("n0", "linear_dynamic_glu", ["y0", "y2"]), ("n6", "linear_dynamic_glu", ["y6", "y7"])]
    assert [n.name for n in prog.nodes] == ["n0", "n1", "n3", "n4", "n5", "n6", "n8", "n9"]
    assert_same(run_reference(prog, *x), want)
