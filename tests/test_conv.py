"""conv2d_q8: Vulkan == numpy reference bit for bit on every test device (padding bytes
included) for all three kernels, and the reference within one int8 step of PyTorch's float
reference (dequantize -> float conv2d -> activation -> quantize)."""
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F

from oputil import assert_same, single_op_program, spec
from vkq import packing
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops import conv
from vkq import quant
from vkq.quant import quantize_multipliers

QD = torch.ops.quantized_decomposed


# -- helpers ------------------------------------------------------------------------------------

@pytest.fixture(params=[(False, False), (True, False), (False, True), (True, True)],
                ids=["fma", "dot", "fma-texel", "dot-texel"])
def dev(request, device):
    """The test device opened with each path of the general and pointwise kernels: fp32
    multiply-adds and the integer dot product variants (DOT), each reading its inputs from
    storage buffers and from texel buffers (TEXEL, texel.glsl), whatever it would choose itself.
    (With texel loads on, a kernel whose inputs exceed the device's texel buffers, such as
    SwiftShader's 1 MiB, still takes storage buffers: both paths meet here too.)"""
    from vkq.device import get_device
    dot, texel = request.param
    d = get_device(device.info.index, dot_product=dot, texel_loads=texel)
    assert conv.use_dot_product(d) == dot and d.texel_loads == texel
    return d


@pytest.fixture(params=[(dot, sg, texel) for texel in (False, True) for sg in (True, False) for dot in (False, True)],
                ids=[f"{p}{s}{t}" for t in ("", "-texel") for s in ("", "-nosg") for p in ("fma", "dot")])
def epi_dev(request, device):
    """For the fused epilogues: both paths, each with and without subgroup shuffles (the
    NO_SUBGROUP variants, which devices without subgroup size control take), each of these
    with storage and with texel buffers: every declared variant is built."""
    from vkq.device import get_device
    dot, subgroups, texel = request.param
    return get_device(device.info.index, dot_product=dot, subgroups=subgroups, texel_loads=texel)


def pair(v):
    return [v, v] if np.isscalar(v) else list(v)


def conv_program(x_shape, w, b, m, s, *, stride=1, padding=0, dilation=1, groups=1, x_zp=0,
                 out_zp=0, qmin=-128, qmax=127):
    attrs = dict(stride=pair(stride), padding=pair(padding), dilation=pair(dilation), groups=groups,
                 x_zp=int(x_zp), out_zp=int(out_zp), qmin=int(qmin), qmax=int(qmax))
    g = conv.ConvGeometry.of(x_shape, w.shape, attrs["stride"], attrs["padding"], attrs["dilation"], groups)
    consts = {"w": (spec(w.shape, "int8", "4W4C"), w), "b": (spec(b.shape, str(b.dtype)), b),
              "m": (spec(m.shape, "int32"), m), "s": (spec(s.shape, "int32"), s)}
    return single_op_program("conv2d_q8", [("x", spec(x_shape, "int8", "4W4C"))],
                             [("y", spec((g.n, g.oc, g.oh, g.ow), "int8", "4W4C"))], attrs, consts), g


def run_exact(device, prog, *inputs):
    """Device output == reference, and the raw output words == the packed reference (padding 0)."""
    ex = VulkanExecutor(prog, device)
    got = ex(*inputs)
    ref = run_reference(prog, *inputs)
    assert_same((got,), (ref,))
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, "4W4C"))
    return ref


def random_case(rng, n, c, h, w, oc, k, groups=1, x_zp=0, small=False):
    """Random int8 x (both extremes present), weights in [-127, 127] (both ends and one -128), bias."""
    kh, kw = pair(k)
    if small:   # values near x_zp and small weights: accumulators small enough for multipliers ~1
        x = np.clip(x_zp + rng.integers(-3, 4, (n, c, h, w)), -128, 127).astype(np.int8)
        wt = rng.integers(-2, 3, (oc, c // groups, kh, kw)).astype(np.int8)
    else:
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
        x.reshape(-1)[:2] = (-128, 127)
        wt = rng.integers(-127, 128, (oc, c // groups, kh, kw)).astype(np.int8)
        wt.reshape(-1)[:3] = (-127, 127, -128)   # -128: outside the contract, but quantizers emit it
    b = rng.integers(-20000, 20000, oc).astype(np.int32)
    return x, wt, b


def spread_multipliers(rng, wt, lo=0.5, hi=2.0):
    """Per-channel multipliers that map a typical accumulator to ~30 output steps."""
    k = wt[0].size
    typical = 74 * 74 * np.sqrt(k)
    return quantize_multipliers(rng.uniform(lo, hi, len(wt)) * 30 / typical)


def assert_spread(q, min_distinct=16):
    """A test whose output is (nearly) constant could not fail: insist on variety."""
    want = min(min_distinct, q.size // 2)
    assert len(np.unique(q)) >= want, f"only {len(np.unique(q))} distinct output values"


# -- the reference itself ------------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    dict(n=2, c=6, h=9, w=8, oc=4, k=3, stride=2, padding=1, dilation=1, groups=2),
    dict(n=1, c=5, h=11, w=7, oc=3, k=(5, 3), stride=(1, 2), padding=(2, 0), dilation=(2, 1), groups=1),
    dict(n=1, c=4, h=6, w=6, oc=4, k=3, stride=1, padding=3, dilation=2, groups=4),
])
def test_reference_matches_torch_integer_conv(case):
    """conv2d_acc == torch conv2d (float64, exact) of (x - x_zp) padded with zeros."""
    rng = np.random.default_rng(1)
    kh, kw = pair(case["k"])
    x = rng.integers(-128, 128, (case["n"], case["c"], case["h"], case["w"])).astype(np.int8)
    wt = rng.integers(-127, 128, (case["oc"], case["c"] // case["groups"], kh, kw)).astype(np.int8)
    x_zp = -37
    args = dict(stride=pair(case["stride"]), padding=pair(case["padding"]), dilation=pair(case["dilation"]),
                groups=case["groups"])
    got = conv.conv2d_acc(x, wt, args["stride"], args["padding"], args["dilation"], args["groups"], x_zp)
    want = F.conv2d(torch.from_numpy(x.astype(np.float64) - x_zp), torch.from_numpy(wt.astype(np.float64)),
                    **args).numpy()
    np.testing.assert_array_equal(got, want.astype(np.int64))


def test_choose_kernel():
    G = conv.ConvGeometry.of
    assert conv.choose_kernel(G((1, 32, 8, 8), (16, 32, 1, 1), (1, 1), (0, 0), (1, 1), 1)) == "conv2d_pointwise"
    assert conv.choose_kernel(G((1, 32, 8, 8), (32, 1, 3, 3), (2, 2), (1, 1), (1, 1), 32)) == "conv2d_depthwise"
    assert conv.choose_kernel(G((1, 32, 8, 8), (16, 32, 1, 1), (2, 2), (0, 0), (1, 1), 1)) == "conv2d_pointwise"
    assert conv.choose_kernel(G((1, 32, 8, 8), (16, 32, 1, 1), (1, 1), (1, 1), (1, 1), 1)) == "conv2d_general"
    assert conv.choose_kernel(G((1, 32, 8, 8), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), 2)) == "conv2d_general"


def test_pack_general_round_trip():
    """Every weight lands in the word and byte conv2d_general.comp reads it from, zeros elsewhere."""
    rng = np.random.default_rng(2)
    g = conv.ConvGeometry.of((1, 10, 5, 5), (6, 5, 3, 2), (1, 1), (0, 0), (1, 1), 2)
    wt = rng.integers(-127, 128, (6, 5, 3, 2)).astype(np.int8)
    toc = 4
    words, count = conv.pack_general(wt, g, toc)
    _, start = conv.c4_window(g, toc)
    b = words.view(np.int8).reshape(len(start), count, 3, 2, toc, 4)
    for oc in range(8):
        t, o = divmod(oc, toc)
        for r in range(count):
            for i in range(4):
                c = 4 * (start[t] + r) + i
                grp = oc // 3 if oc < 6 else None
                inside = grp is not None and grp * 5 <= c < grp * 5 + 5
                want = wt[oc, c - grp * 5] if inside else 0
                np.testing.assert_array_equal(b[t, r, :, :, o, i], want)


def test_params_match_float_scales():
    bias, m, s, qmin, qmax = conv.conv2d_q8_params(0.02, [0.001, 0.004], 0.1, [0.5, -0.3], "relu6", 5)
    np.testing.assert_allclose(bias, [25000, -3750], rtol=1e-12)   # not rounded: split_bias keeps the fraction
    assert conv.conv2d_q8_params(0.02, [0.001], 0.1, [0.3003])[0].tolist() == [0.3003 / (0.02 * 0.001)]
    np.testing.assert_allclose(m * 2.0 ** -s.astype(float), [0.02 * 0.001 / 0.1, 0.02 * 0.004 / 0.1], rtol=1e-9)
    assert (qmin, qmax) == (5, 65)


# -- Vulkan == reference ---------------------------------------------------------------------------

SMALL_CASES = [
    # (n, c, h, w, oc, k, stride, padding, dilation, groups)
    (1, 1, 5, 7, 1, 3, 1, 1, 1, 1),
    (1, 3, 9, 13, 5, 3, 1, 1, 1, 1),
    (2, 5, 7, 11, 17, 3, 2, 1, 1, 1),
    (1, 17, 13, 10, 3, 3, 1, 2, 2, 1),
    (1, 6, 12, 9, 10, 3, 1, 1, 1, 2),
    (1, 12, 11, 10, 6, 5, (2, 1), (2, 0), 1, 3),
    (1, 3, 19, 17, 8, 7, 2, 3, 1, 1),
    (2, 17, 5, 6, 3, 1, 1, 0, 1, 1),
    (1, 8, 9, 9, 20, 1, 2, 0, 1, 1),
    (1, 3, 7, 5, 33, 1, 1, 0, 1, 1),
    (1, 21, 6, 5, 37, 1, 1, 0, 1, 1),
    (1, 10, 9, 13, 7, 1, 2, 0, 1, 1),        # 1x1 stride 2: pointwise kernel, two input blocks an output block
    (2, 9, 11, 7, 12, 1, (3, 2), 0, 1, 1),   # 1x1 strides 3 and 2
    (1, 5, 9, 10, 5, 3, 1, 1, 1, 5),
    (2, 17, 11, 13, 17, 3, 2, 1, 1, 17),
    (1, 6, 10, 9, 6, 3, 1, 2, 2, 6),
    (1, 3, 12, 12, 3, 5, 1, 2, 1, 3),
    (1, 4, 7, 6, 8, 3, 1, 5, 1, 1),          # padding wider than a lane's own block: no halo shuffles
    (1, 6, 9, 11, 4, 1, 2, 1, 1, 1),         # window ends inside the own blocks; left halo past it
    (1, 4, 1, 1, 8, 3, 1, 1, 1, 1),          # 1x1 image
    (2, 5, 2, 3, 5, 3, 1, 1, 1, 5),
    (1, 8, 6, 7, 8, 3, 1, 5, 1, 8),
    (1, 8, 7, 9, 16, 3, 1, 1, 1, 8),         # depthwise with channel multiplier 2: general kernel
    (1, 20, 6, 6, 8, 3, 2, 1, 1, 4),         # groups of 5 channels straddle 4-channel words
]


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: "n{}c{}h{}w{}oc{}k{}s{}p{}d{}g{}".format(*c))
def test_conv_small_exact(dev, case):
    n, c, h, w, oc, k, stride, padding, dilation, groups = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x_zp, out_zp = int(rng.integers(-128, 128)), int(rng.integers(-20, 20))
    x, wt, b = random_case(rng, n, c, h, w, oc, k, groups, x_zp)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, x_zp=x_zp, out_zp=out_zp)
    assert_spread(run_exact(dev, prog, x))


DEPTHWISE_CASES = [
    # (n, c, h, w, k, stride, padding, dilation): groups == c == oc
    (1, 5, 9, 10, 3, 1, 1, 1),            # C4 = 2: two channel blocks an invocation, padding bytes
    (2, 17, 11, 13, 3, 2, 1, 1),          # C4 = 5 (odd): one block an invocation; 2 images
    (1, 8, 12, 7, 3, (2, 1), (0, 1), 1),  # mixed strides, no vertical padding
    (1, 12, 10, 9, 3, 1, 2, 2),           # dilation 2
    (1, 16, 13, 14, 5, 2, 2, 1),          # 5x5 s2 (EfficientNet)
    (1, 8, 12, 11, 5, 1, 2, 1),           # 5x5 s1
    (1, 4, 15, 16, 7, 1, 3, 1),           # 7x7: a window over three input blocks
    (1, 8, 6, 7, 3, 1, 5, 1),             # padding wider than a block
    (1, 12, 1, 1, 3, 1, 1, 1),            # a 1x1 image: every tap but the centre is padding
    (1, 24, 3, 3, 3, 1, 0, 1),            # no padding: a 1x1 output
    (1, 20, 5, 2, 3, 1, 1, 1),            # width 2: half of a 4W4C block is padding
]


@pytest.fixture(params=["rows", "lanes"])
def depthwise_kernel(request, monkeypatch):
    """Both depthwise kernels whatever the device would take: conv2d_depthwise_rows (CPU
    drivers) and conv2d_depthwise (GPUs, whose lanes share their loads by shuffles)."""
    monkeypatch.setattr(conv, "DEPTHWISE_ROWS_FORCE", request.param == "rows")
    return {"rows": "conv2d_depthwise_rows", "lanes": "conv2d_depthwise"}[request.param]


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=lambda c: "n{}c{}h{}w{}k{}s{}p{}d{}".format(*c))
def test_depthwise_kernels(dev, depthwise_kernel, case):
    """Both depthwise kernels on strides, dilations, 3x3 to 7x7 windows, padding past a block,
    odd and even channel-block counts (conv2d_depthwise_rows takes two blocks an invocation
    where C4 is even) and tiny images: the device equals the reference bit for bit."""
    n, c, h, w, k, stride, padding, dilation = case
    rng = np.random.default_rng(sum(map(int, np.ravel([n, c, h, w, k]))))
    x_zp = int(rng.integers(-128, 128))
    x, wt, b = random_case(rng, n, c, h, w, c, k, c, x_zp)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=padding, dilation=dilation,
                           groups=c, x_zp=x_zp, out_zp=int(rng.integers(-20, 20)))
    step, = VulkanExecutor(prog, dev).segments[0][1].steps
    assert step.name == depthwise_kernel
    assert_spread(run_exact(dev, prog, x), 8)


@pytest.mark.parametrize("paired", [False, True], ids=["single", "paired"])
def test_paired_stores(dev, paired, monkeypatch):
    """conv2d_pointwise and conv2d_general storing two channel blocks at a time (STORE4_PAIR:
    one 32-byte store under TEXEL with 64-bit stores, two ivec4 stores otherwise) where every
    pair lies inside the output (TOC % 8 == 0, OC4 even), one at a time elsewhere; the same
    bits either way, a residual read at each block of the pair."""
    from vkq.ops.eltwise import add_q8_params
    monkeypatch.setattr(type(dev), "wide_stores", property(lambda self: paired))
    rng = np.random.default_rng(14)
    for shape, oc, k, stride, groups in (((1, 16, 9, 11), 40, 1, 1, 1), ((2, 9, 7, 6), 24, 1, 2, 1),
                                         ((1, 5, 10, 9), 16, 3, 1, 1), ((1, 12, 9, 7), 24, 3, 2, 3),
                                         ((1, 7, 6, 5), 20, 1, 1, 1), ((1, 6, 7, 8), 12, 3, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, 6)
        m, s = spread_multipliers(rng, wt)
        attrs = dict(stride=[stride] * 2, padding=[k // 2] * 2, dilation=[1, 1], groups=groups, x_zp=6,
                     out_zp=-2, qmin=-128, qmax=127)
        fused, _ = _epilogue_program(x.shape, wt, b, m, s, attrs, residual=add_q8_params(0.05, -2, 0.04, 3, 0.07, 1))
        step, = VulkanExecutor(fused, dev).segments[0][1].steps
        toc, pair_id = step.spec[1], {"conv2d_pointwise": 13, "conv2d_general": 21}[step.name]
        assert step.spec[pair_id - 3] == int(paired and toc % 8 == 0 and conv.cdiv(oc, 4) % 2 == 0)
        r = rng.integers(-128, 128, fused.tensors["y"].shape).astype(np.int8)
        assert_spread(run_exact(dev, fused, x, r))


@pytest.mark.parametrize("skip", [False, True], ids=["all4", "skip"])
def test_stem_skips_the_padding_channel(dev, skip, monkeypatch):
    """conv2d_general on an input of C < 4 channels (a stem) multiplies only the C channels its x
    words hold (CH), not the 4W4C padding channel (whose weights are 0); the same bits either way,
    padding rows and columns (x_zp in every byte) included."""
    monkeypatch.setattr(conv, "STEM_CHANNELS", skip)
    rng = np.random.default_rng(15)
    for shape, oc, k, stride, groups in (((1, 3, 17, 19), 16, 7, 2, 1), ((2, 2, 9, 7), 8, 3, 1, 1),
                                         ((1, 1, 6, 9), 5, 5, 1, 1), ((1, 3, 8, 8), 6, 3, 2, 3), ((1, 6, 7, 5), 8, 3, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, -11)
        m, s = spread_multipliers(rng, wt)
        prog, g = conv_program(x.shape, wt, b, m, s, stride=stride, padding=k // 2, groups=groups, x_zp=-11)
        step, = VulkanExecutor(prog, dev).segments[0][1].steps
        assert step.name == "conv2d_general" and step.spec[-1] == (min(g.c, 4) if skip else 4)
        assert_spread(run_exact(dev, prog, x))


@pytest.mark.parametrize("unroll", [0, 16], ids=["loop", "unrolled"])
def test_pointwise_unrolled_blocks(dev, unroll, monkeypatch):
    """conv2d_pointwise's fp32 path with its loop over C4 blocks and unrolled (KC4, up to
    POINTWISE_UNROLL_C4 blocks on CPU drivers): the same bits, C4 of 1 to 17 (17: the loop
    again), strides, a fused residual."""
    from vkq.ops.eltwise import add_q8_params
    monkeypatch.setattr(conv, "POINTWISE_UNROLL_C4", unroll)
    rng = np.random.default_rng(16)
    for shape, oc, stride in (((1, 3, 9, 10), 16, 1), ((2, 16, 7, 6), 40, 1), ((1, 19, 9, 11), 12, 2),
                              ((1, 64, 5, 7), 24, 1), ((1, 67, 6, 5), 20, 1)):
        x, wt, b = random_case(rng, *shape, oc, 1, 1, 4)
        m, s = spread_multipliers(rng, wt)
        attrs = dict(stride=[stride] * 2, padding=[0, 0], dilation=[1, 1], groups=1, x_zp=4, out_zp=1,
                     qmin=-128, qmax=127)
        fused, _ = _epilogue_program(x.shape, wt, b, m, s, attrs, residual=add_q8_params(0.05, 1, 0.04, -3, 0.06, 2))
        step, = VulkanExecutor(fused, dev).segments[0][1].steps
        c4 = conv.cdiv(shape[1], 4)
        want = c4 if c4 <= unroll and dev.info.type == "cpu" and not conv.use_dot_product(dev) else 0
        assert step.name == "conv2d_pointwise" and step.spec[14 - 3] == want
        r = rng.integers(-128, 128, fused.tensors["y"].shape).astype(np.int8)
        assert_spread(run_exact(dev, fused, x, r))


FRAC_CASES = [
    # (n, c, h, w, oc, k, stride, padding, groups): general, depthwise, pointwise, general 5x5 groups
    (1, 7, 9, 11, 13, 3, 1, 1, 1),
    (2, 13, 7, 9, 13, 3, 2, 1, 13),
    (1, 11, 5, 7, 19, 1, 1, 0, 1),
    (1, 6, 11, 7, 10, 5, 2, 2, 2),
]


@pytest.mark.parametrize("case", FRAC_CASES, ids=["general", "depthwise", "pointwise", "general_5x5_g2"])
def test_conv_fractional_bias(dev, case):
    """A float64 bias at the accumulator's scale keeps its fraction (vkq.quant.split_bias) in every
    kernel: Vulkan == reference with multipliers near 1, where the fraction moves many outputs
    (so a kernel that dropped it fails), halves and whole numbers included; and with large
    accumulators and spread multipliers, where it moves few."""
    n, c, h, w, oc, k, stride, padding, groups = case
    rng = np.random.default_rng(sum(case))
    x_zp = int(rng.integers(-100, 100))
    attrs = dict(stride=stride, padding=padding, groups=groups, x_zp=x_zp, out_zp=-3)
    x, wt, _ = random_case(rng, n, c, h, w, oc, k, groups, x_zp, small=True)
    b = rng.integers(-40, 40, oc) + rng.uniform(-0.5, 0.5, oc)
    b[:3] = [2.5, -0.5, 7.0]
    m, s = quantize_multipliers(rng.uniform(0.3, 0.9, oc))
    prog, _ = conv_program(x.shape, wt, b, m, s, **attrs)
    ref = run_exact(dev, prog, x)
    assert_spread(ref, 12)
    ref_attrs = dict(stride=pair(stride), padding=pair(padding), dilation=(1, 1), groups=groups, x_zp=x_zp, out_zp=-3)
    rounded = conv.Conv2dQ8.reference(x, wt, np.rint(b).astype(np.int32), m, s, **ref_attrs)
    assert np.mean(ref != rounded) > 0.05
    x, wt, b = random_case(rng, n, c, h, w, oc, k, groups, x_zp)
    b = b + rng.uniform(-0.5, 0.5, oc)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, **attrs)
    assert_spread(run_exact(dev, prog, x))


@pytest.mark.parametrize("x_zp,out_zp,qmin,qmax", [(-128, 127, -128, 127), (127, -128, -128, 127),
                                                    (0, -128, -128, -80), (-5, 10, 10, 127), (60, 0, -30, 40)])
def test_conv_zero_points_and_activations(dev, x_zp, out_zp, qmin, qmax):
    """Zero points at both ends; qmin/qmax of fused relu / relu6 / hardtanh; each kernel."""
    rng = np.random.default_rng(abs(x_zp + 1000 * qmin))
    for shape, k, pad, groups in (((2, 7, 9, 10), 3, 1, 1), ((1, 9, 8, 7), 3, 1, 9), ((1, 11, 6, 9), 1, 0, 1)):
        oc = shape[1] if groups > 1 else 13
        x, wt, b = random_case(rng, *shape, oc, k, groups, x_zp)
        m, s = spread_multipliers(rng, wt)
        prog, _ = conv_program(x.shape, wt, b, m, s, padding=pad, groups=groups, x_zp=x_zp, out_zp=out_zp,
                               qmin=qmin, qmax=qmax)
        ref = run_exact(dev, prog, x)
        assert ref.min() >= qmin and ref.max() <= qmax
        assert_spread(ref, 8)


def test_conv_multiplier_extremes(device):
    """Multipliers near 1 (small accumulators) and near 2^-20 (large ones), per channel, in the
    general, depthwise and pointwise kernels."""
    rng = np.random.default_rng(5)
    for shape, oc, k, groups in (((1, 8, 9, 7), 12, 3, 1), ((1, 12, 7, 9), 12, 3, 12), ((1, 16, 5, 9), 8, 1, 1)):
        x_zp = 100
        x, wt, b = random_case(rng, *shape, oc, k, groups, x_zp, small=True)
        b = rng.integers(-40, 40, oc).astype(np.int32)
        real = np.where(np.arange(oc) % 2 == 0, rng.uniform(0.9, 0.999, oc), rng.uniform(1.0, 1.0001, oc))
        m, s = quantize_multipliers(real)
        prog, _ = conv_program(x.shape, wt, b, m, s, padding=k // 2, groups=groups, x_zp=x_zp, out_zp=-3)
        assert_spread(run_exact(device, prog, x), 12)
        x, wt, b = random_case(rng, *shape, oc, k, groups, -128)
        x[:] = 127                                     # |acc| up to ~2^14 * taps
        wt[:, :, 0, 0] = 127
        m, s = quantize_multipliers(rng.uniform(0.95, 1.05, oc) * 2.0 ** -20)
        prog, _ = conv_program(x.shape, wt, b, m, s, padding=k // 2, groups=groups, x_zp=-128, out_zp=0)
        run_exact(device, prog, x)


@pytest.mark.parametrize("kernel", ["conv2d_general"])
def test_general_kernel_on_special_shapes(device, kernel, monkeypatch):
    """conv2d_general also computes the shapes the depthwise and pointwise kernels take."""
    monkeypatch.setattr(conv, "choose_kernel", lambda g: kernel)
    rng = np.random.default_rng(6)
    for shape, oc, k, stride, groups in (((1, 9, 10, 7), 9, 3, 2, 9), ((2, 10, 5, 7), 6, 1, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, 17)
        m, s = spread_multipliers(rng, wt)
        prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=k // 2, groups=groups, x_zp=17)
        assert_spread(run_exact(device, prog, x))


def test_texel_variant_where_every_input_fits(device, monkeypatch):
    """With texel loads on, a conv takes its TEXEL variant only while x, weights, table (and
    residual) fit the device's texel buffers; past that, storage buffers; the same answer both
    ways. The device refuses to bind a larger buffer as a texel buffer."""
    import dataclasses
    from vkq.device import get_device
    d = get_device(device.info.index, texel_loads=True)
    rng = np.random.default_rng(11)
    x, wt, b = random_case(rng, 1, 24, 9, 10, 40, 1)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s)
    ex = VulkanExecutor(prog, d)
    step, = ex.segments[0][1].steps
    assert step.defines == {"TEXEL"}
    largest = max(buf.size for buf in step.reads) // 4        # ivec4s of the largest texel input
    assert largest >= 9 * 3 * 6                               # x: H x W/4 x C/4 blocks
    want = run_exact(d, prog, x)
    for limit, texel in ((largest, True), (largest - 1, False)):
        monkeypatch.setattr(d, "info", dataclasses.replace(d.info, max_texel_buffer_elements=limit))
        ex = VulkanExecutor(prog, d)
        assert ("TEXEL" in ex.segments[0][1].steps[0].defines) == texel
        np.testing.assert_array_equal(ex(x), want)
    big, odd = d.buffer(np.zeros(4 * 101, np.int32)), d.buffer(np.zeros(4 * 10 + 1, np.int32))
    monkeypatch.setattr(d, "info", dataclasses.replace(d.info, max_texel_buffer_elements=100))
    assert not d.texel_variant(big) and not d.texel_variant(odd) and d.texel_variant(d.buffer(size=400))
    for bad in (big, odd):     # too many texels; a partial last texel
        with pytest.raises(ValueError, match="cannot be a texel buffer"):
            d.dispatch("conv2d_pointwise", [bad, bad, bad, d.buffer(size=4)], (1, 1, 1), defines={"TEXEL": "1"})


def test_no_subgroup_variant(dev, monkeypatch):
    """The NO_SUBGROUP variants (G = 1, for devices without subgroup shuffles) of all kernels."""
    monkeypatch.setattr(conv, "_lane_group", lambda dev: (1, {"NO_SUBGROUP": "1"}, 64))
    monkeypatch.setattr(conv, "DEPTHWISE_ROWS_FORCE", False)    # conv2d_depthwise_rows has no subgroups
    rng = np.random.default_rng(7)
    for shape, oc, k, stride, groups in (((1, 6, 9, 7), 10, 3, 1, 2), ((1, 8, 7, 9), 8, 3, 2, 8),
                                         ((1, 10, 5, 7), 6, 1, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, -9)
        m, s = spread_multipliers(rng, wt)
        prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=k // 2, groups=groups, x_zp=-9)
        assert_spread(run_exact(dev, prog, x))


@pytest.mark.parametrize("chunk", [(1, 0), (2, 0), (1, 1)], ids=["chunk1", "chunk2", "row_flush"])
def test_conv_partial_sums(device, chunk, monkeypatch):
    """The exact fp32 partial sums converted to int32 every c4 block, every 2, every kernel row."""
    monkeypatch.setattr(conv, "_chunk", lambda kh, kw: chunk)
    rng = np.random.default_rng(8)
    x, wt, b = random_case(rng, 1, 13, 7, 9, 12, 3, 1, 5)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, padding=1, x_zp=5)
    assert_spread(run_exact(device, prog, x))


@pytest.mark.parametrize("shape,k", [((1, 136, 5, 6), 3), ((1, 1200, 3, 5), 1)], ids=["3x3", "1x1"])
def test_conv_exact_at_fp32_bound(dev, shape, k):
    """Products at their extreme, |x*w| = 127*127 (odd, so every bit of a sum counts), in every
    tap: a chunk's fp32 partial sum reaches ~0.94 * 2^24 and must be exact, then a second chunk
    follows. The bias centres the interior accumulators on 0 and the multiplier is 1, so an error
    of one unit shows in the output."""
    rng = np.random.default_rng(9)
    x = np.full(shape, 127, np.int8)
    x[..., 0, 0] = -128
    oc = 8
    wt = np.where(rng.random((oc, shape[1], k, k)) < 0.97, -127, 127).astype(np.int8)
    acc = conv.conv2d_acc(x, wt, (1, 1), (k // 2,) * 2, (1, 1), 1, 0)
    assert np.abs(acc).max() > 1 << 24
    b = (-acc[0, :, 2, 3] + np.arange(oc) - 4).astype(np.int32)   # an interior position: |acc| largest
    m, s = quantize_multipliers(np.ones(oc))
    prog, _ = conv_program(x.shape, wt, b, m, s, padding=k // 2, x_zp=0, out_zp=0)
    assert_spread(run_exact(dev, prog, x), 8)


REAL_SHAPES = {
    # name: (n, c, h, w, oc, k, stride, padding, groups)
    "resnet18_layer1_3x3_64": (1, 64, 56, 56, 64, 3, 1, 1, 1),
    "resnet18_stem_7x7_s2": (1, 3, 112, 112, 64, 7, 2, 3, 1),
    "resnet18_layer2_down_3x3_s2": (1, 64, 28, 28, 128, 3, 2, 1, 1),
    "mobilenetv2_dw_32_s1": (1, 32, 112, 112, 32, 3, 1, 1, 32),
    "mobilenetv2_dw_96_s2": (1, 96, 56, 56, 96, 3, 2, 1, 96),
    "mobilenetv2_pw_32_16": (1, 32, 112, 112, 16, 1, 1, 0, 1),
    "mobilenetv2_pw_96_24": (1, 96, 56, 56, 24, 1, 1, 0, 1),
    "resnet18_down_1x1_s2": (1, 64, 56, 56, 128, 1, 2, 0, 1),
    "mobilenetv2_stem_3x3_s2": (1, 3, 224, 224, 32, 3, 2, 1, 1),
    "efficientnet_dw_5x5_s2": (1, 36, 29, 31, 36, 5, 2, 2, 36),
}


def test_workgroup_sizes_follow_the_cpu_threads(monkeypatch):
    """CPU drivers: of the workgroup sizes that even out the threads (within 1/16), the largest
    leaving each thread CPU_WORKGROUPS_PER_THREAD (8) workgroups, else the smallest; GPUs:
    halved only below MIN_WORKGROUPS workgroups."""
    from types import SimpleNamespace
    cpu, gpu = SimpleNamespace(type="cpu"), SimpleNamespace(type="discrete-gpu")
    monkeypatch.setenv("LP_NUM_THREADS", "2")
    assert conv._local_size(cpu, 64, 16, 784) == 32        # 13 / 25 / 49 groups: busiest 448 / 416 / 400
    assert conv._local_size(cpu, 64, 16, 64 * 74) == 64    # 37 rounds of 64 vs 147 of 16: within 1/16
    assert conv._local_size(cpu, 64, 16, 128) == 16        # 2, 4 or 8 groups, all too few: the most
    assert conv._local_size(cpu, 64, 64, 784) == 64        # 64-lane subgroups: no smaller size
    monkeypatch.setenv("LP_NUM_THREADS", "1")
    assert conv._local_size(cpu, 64, 16, 784) == 64        # one thread: nothing to even out
    monkeypatch.setenv("LP_NUM_THREADS", "16")
    assert conv._local_size(cpu, 64, 16, 784) == 16        # 13, 25, 49 groups on 16 threads: 1 to 4 rounds
    assert conv._local_size(gpu, 64, 16, 784) == 64 and conv._local_size(gpu, 64, 16, 300) == 32


def test_general_rows_per_invocation():
    """conv2d_general takes 2 output rows an invocation, 1 on CPU drivers for unrolled windows
    on maps of CPU_ONE_ROW_MIN_OH rows or more (not 7x7 maps, not the ROW_LOOP stems, but those
    too on llvmpipe, where they multiply their C < 4 channels only)."""
    from types import SimpleNamespace
    gpu = SimpleNamespace(type="discrete-gpu", driver="nvidia")
    swiftshader, llvmpipe = SimpleNamespace(type="cpu", driver="swiftshader"), SimpleNamespace(type="cpu", driver="llvmpipe")
    geo = lambda c, h, oc, k, s, p: conv.ConvGeometry.of((1, c, h, h), (oc, c, k, k), (s, s), (p, p), (1, 1), 1)
    for g, want_cpu, want_llvmpipe in [
            (geo(64, 56, 64, 3, 1, 1), 1, 1), (geo(64, 56, 128, 3, 2, 1), 1, 1), (geo(256, 14, 256, 3, 1, 1), 1, 1),
            (geo(512, 7, 512, 3, 1, 1), 2, 2), (geo(3, 224, 64, 7, 2, 3), 2, 1), (geo(3, 224, 32, 3, 2, 1), 2, 1),
            (geo(3, 12, 16, 3, 1, 1), 2, 2)]:          # a stem's map below CPU_ONE_ROW_MIN_OH rows: 2
        assert conv._general_tiles(g, 8, gpu)[1] == 2
        assert conv._general_tiles(g, 8, swiftshader)[1] == want_cpu, g
        assert conv._general_tiles(g, 8, llvmpipe)[1] == want_llvmpipe, g
        assert conv._general_tiles(g, 8, llvmpipe, dot=True)[1] == want_cpu, g    # DOT: no CH


@pytest.mark.parametrize("threads", [1, 3, 16])
@pytest.mark.parametrize("case", [(1, 40, 7, 9, 150, 1, 1, 0, 1), (1, 36, 13, 11, 36, 3, 2, 1, 36),
                                  (1, 24, 9, 7, 40, 3, 1, 1, 1)], ids=["pointwise", "depthwise", "general"])
def test_conv_exact_at_any_thread_count(device, threads, case, monkeypatch):
    """The tiles and workgroup sizes a CPU driver gets follow its thread count (_local_size,
    _pointwise_tiles); every choice stays exact."""
    monkeypatch.setenv("LP_NUM_THREADS", str(threads))
    n, c, h, w, oc, k, stride, padding, groups = case
    rng = np.random.default_rng(threads)
    x, wt, b = random_case(rng, n, c, h, w, oc, k, groups, 3)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=padding, groups=groups, x_zp=3)
    assert_spread(run_exact(device, prog, x))


@pytest.mark.parametrize("name", list(REAL_SHAPES))
def test_conv_real_shapes(dev, name):
    n, c, h, w, oc, k, stride, padding, groups = REAL_SHAPES[name]
    rng = np.random.default_rng(len(name))
    x_zp = int(rng.integers(-128, 128))
    x, wt, b = random_case(rng, n, c, h, w, oc, k, groups, x_zp)
    m, s = spread_multipliers(rng, wt)
    prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=padding, groups=groups, x_zp=x_zp,
                           out_zp=-4, qmin=-4 if "dw" in name else -128)   # dw: fused relu6-like floor
    assert_spread(run_exact(dev, prog, x))


# -- reference vs PyTorch ----------------------------------------------------------------------------

def torch_conv_q8(x, x_scale, x_zp, wt, w_scales, bias_f, out_scale, out_zp, stride, padding, dilation,
                  groups, activation, bounds=None):
    """dequantize -> float conv2d (+ float bias) -> activation -> quantize, as PyTorch's
    quantized_decomposed reference does; also the float result in output steps."""
    xf = QD.dequantize_per_tensor(torch.from_numpy(x), x_scale, x_zp, -128, 127, torch.int8)
    wf = QD.dequantize_per_channel(torch.from_numpy(wt), torch.tensor(w_scales, dtype=torch.float32),
                                   torch.zeros(len(w_scales), dtype=torch.int64), 0, -127, 127, torch.int8)
    yf = F.conv2d(xf, wf, torch.tensor(bias_f, dtype=torch.float32), stride, padding, dilation, groups)
    if activation == "relu":
        yf = torch.relu(yf)
    elif activation == "relu6":
        yf = torch.clamp(yf, 0.0, 6.0)
    elif activation == "hardtanh":
        yf = torch.clamp(yf, *bounds)
    q = QD.quantize_per_tensor(yf, out_scale, out_zp, -128, 127, torch.int8).numpy()
    return q, yf.double().numpy() / out_scale + out_zp


@pytest.mark.parametrize("activation,bounds", [(None, None), ("relu", None), ("relu6", None),
                                               ("hardtanh", (-1.0, 1.0))])
@pytest.mark.parametrize("geom", [
    ((2, 6, 11, 9), 10, 3, 1, 1, 1, 1),
    ((1, 8, 10, 10), 8, 3, 2, 1, 1, 8),
    ((1, 12, 9, 7), 6, (5, 3), 1, (2, 1), 2, 3),
    ((1, 16, 6, 5), 24, 1, 1, 0, 1, 1),
], ids=["3x3", "dw_s2", "5x3_dil_groups", "1x1"])
def test_reference_within_one_step_of_torch(geom, activation, bounds):
    x_shape, oc, k, stride, padding, dilation, groups = geom
    rng = np.random.default_rng(oc * 7 + len(activation or ""))
    kh, kw = pair(k)
    for x_zp, out_zp in ((-128, 127), (127, -128), (3, -10)):
        x = rng.integers(-128, 128, x_shape).astype(np.int8)
        wt = rng.integers(-127, 128, (oc, x_shape[1] // groups, kh, kw)).astype(np.int8)
        x_scale, out_scale = 0.02, 0.05
        w_scales = rng.uniform(0.5, 2.0, oc) * 30 * out_scale / (x_scale * 74 * 74 * np.sqrt(wt[0].size))
        bias_f = rng.uniform(-1, 1, oc).astype(np.float32)
        bias, m, s, qmin, qmax = conv.conv2d_q8_params(x_scale, w_scales, out_scale, bias_f, activation, out_zp,
                                                       bounds)
        attrs = dict(stride=pair(stride), padding=pair(padding), dilation=pair(dilation), groups=groups)
        ref = conv.Conv2dQ8.reference(x, wt, bias, m, s, x_zp=x_zp, out_zp=out_zp, qmin=qmin, qmax=qmax, **attrs)
        want, exact = torch_conv_q8(x, x_scale, x_zp, wt, w_scales, bias_f, out_scale, out_zp, activation=activation,
                                    bounds=bounds, **attrs)
        diff = np.abs(ref.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1, f"max difference {diff.max()} steps"
        off = diff != 0   # off by one only where torch's float result is within 0.01 of a tie
        assert not np.any(off & (np.abs(exact % 1.0 - 0.5) > 0.01)), f"{off.sum()} values off by one"
        if abs(out_zp) < 100:   # with out_zp at an end a fused relu saturates everything
            assert_spread(ref, 8)


# -- fused epilogues: residual add and lookup table ------------------------------------------------

def _epilogue_program(x_shape, wt, b, m, s, conv_attrs, residual=None, table=None, conv_input="a"):
    """conv2d_q8 with a fused residual add (other operand "r") and/or a lookup table, and the same
    as separate nodes: conv2d_q8 -> add_q8 (conv output as operand conv_input) -> table."""
    from vkq.program import Node, Program
    g = conv.ConvGeometry.of(x_shape, wt.shape, conv_attrs["stride"], conv_attrs["padding"],
                             conv_attrs["dilation"], conv_attrs["groups"])
    y_spec = spec((g.n, g.oc, g.oh, g.ow), "int8", "4W4C")
    tensors = {"x": spec(x_shape, "int8", "4W4C"), "w": spec(wt.shape, "int8", "4W4C"), "b": spec(b.shape, str(b.dtype)),
               "m": spec(m.shape, "int32"), "s": spec(s.shape, "int32"), "y": y_spec}
    consts = {"w": wt, "b": b, "m": m, "s": s}
    inputs, fused_in, attrs = ["x"], ["x", "w", "b", "m", "s"], dict(conv_attrs)
    if residual is not None:
        tensors["r"] = y_spec
        inputs.append("r")
        fused_in.append("r")
        attrs["residual"] = {"conv_input": conv_input, **residual}
    if table is not None:
        tensors["t"] = spec((256,), "int8", "4H4W")
        consts["t"] = table
        fused_in.append("t")
        attrs["lut"] = True
    fused = Program(dict(tensors), [Node("conv2d_q8", fused_in, ["y"], attrs)], inputs, ["y"], dict(consts))
    # the same as separate nodes: the numpy reference of the composition
    nodes = [Node("conv2d_q8", ["x", "w", "b", "m", "s"], ["c"], conv_attrs)]
    tensors["c"] = y_spec
    last = "c"
    if residual is not None:
        ab = ["c", "r"] if conv_input == "a" else ["r", "c"]
        nodes.append(Node("add_q8", ab, ["c2"], residual))
        tensors["c2"] = y_spec
        last = "c2"
    split = Program(tensors, nodes, inputs, [last], {k: v for k, v in consts.items() if k != "t"})
    fused.validate()
    split.validate()
    return fused, split


EPILOGUE_CASES = {
    # id: ((x shape, oc, k, stride, padding, groups), DEPTHWISE_ROWS_FORCE): one per kernel
    "depthwise": (((1, 13, 9, 11), 13, 3, 1, 1, 13), False),
    "depthwise_rows": (((1, 13, 9, 11), 13, 3, 1, 1, 13), True),      # two channel blocks an invocation
    "depthwise_rows_odd": (((1, 10, 11, 9), 10, 3, 2, 1, 10), True),  # C4 = 3: one
    "pointwise": (((2, 21, 7, 6), 18, 1, 1, 0, 1), None),
    "general": (((1, 6, 11, 9), 10, 3, 2, 1, 2), None),
}


@pytest.mark.parametrize("kernel", list(EPILOGUE_CASES))
@pytest.mark.parametrize("conv_input", ["a", "b"])
def test_fused_residual_add_equals_conv_then_add(epi_dev, kernel, conv_input, monkeypatch):
    """conv2d_q8 with a residual add_q8 in its epilogue: the device equals the reference, which
    is conv2d_q8 followed by add_q8, on the device too (zero points at both ends, a relu-like
    floor on the add)."""
    from vkq.ops.eltwise import add_q8_params
    case, rows = EPILOGUE_CASES[kernel]
    monkeypatch.setattr(conv, "DEPTHWISE_ROWS_FORCE", rows)
    x_shape, oc, k, stride, padding, groups = case
    rng = np.random.default_rng(11 + len(conv_input) + oc)
    x_zp = -128 if conv_input == "a" else 127
    x, wt, b = random_case(rng, *x_shape, oc, k, groups, x_zp)
    if conv_input == "b":   # a bias with fractions (float64: vkq.quant.split_bias)
        b = b + rng.uniform(-0.5, 0.5, oc)
    m, s = spread_multipliers(rng, wt)
    attrs = dict(stride=pair(stride), padding=pair(padding), dilation=[1, 1], groups=groups, x_zp=x_zp,
                 out_zp=-5, qmin=-128, qmax=127)
    res = add_q8_params(0.05, -5, 0.031, 127 if conv_input == "a" else -128, 0.06, 3)
    res.update(qmin=3, qmax=127)                       # a fused relu on the add
    fused, split = _epilogue_program(x_shape, wt, b, m, s, attrs, residual=res, conv_input=conv_input)
    r = rng.integers(-128, 128, fused.tensors["y"].shape).astype(np.int8)
    ref = run_exact(epi_dev, fused, x, r)
    assert_same((VulkanExecutor(split, epi_dev)(x, r),), (ref,))
    np.testing.assert_array_equal(ref, run_reference(split, x, r))
    assert_spread(ref)
    assert ref.min() == 3


@pytest.mark.parametrize("kernel", list(EPILOGUE_CASES))
@pytest.mark.parametrize("with_residual", [False, True])
def test_fused_lookup_table(epi_dev, kernel, with_residual, monkeypatch):
    """A 256-entry int8 table applied after requantization (and after a fused residual add):
    device == reference == table[conv2d_q8 (-> add_q8) + 128]."""
    from vkq.ops.eltwise import add_q8_params
    case, rows = EPILOGUE_CASES[kernel]
    monkeypatch.setattr(conv, "DEPTHWISE_ROWS_FORCE", rows)
    x_shape, oc, k, stride, padding, groups = case
    rng = np.random.default_rng(23 + oc)
    x, wt, b = random_case(rng, *x_shape, oc, k, groups, 9)
    m, s = spread_multipliers(rng, wt)
    attrs = dict(stride=pair(stride), padding=pair(padding), dilation=[1, 1], groups=groups, x_zp=9, out_zp=2,
                 qmin=-128, qmax=127)
    res = add_q8_params(0.05, 2, 0.04, -7, 0.07, -1) if with_residual else None
    table = rng.integers(-128, 128, 256).astype(np.int8)          # a permutation-like table: every entry counts
    fused, split = _epilogue_program(x_shape, wt, b, m, s, attrs, residual=res, table=table)
    r = rng.integers(-128, 128, fused.tensors["y"].shape).astype(np.int8)
    inputs = (x, r) if with_residual else (x,)
    ref = run_exact(epi_dev, fused, *inputs)
    np.testing.assert_array_equal(ref, table[run_reference(split, *inputs).astype(np.int64) + 128])
    assert_spread(ref)


@pytest.mark.parametrize("row_loop", [False, True], ids=["window", "row_loop"])
def test_general_row_loop(dev, row_loop, monkeypatch):
    """conv2d_general with its window unrolled and with a loop over the kernel rows (ROW_LOOP),
    either choice on shapes the other would take: strides, dilation, groups, padding wider than
    the kernel, several chunks of partial sums."""
    monkeypatch.setattr(conv, "ROW_LOOP_FORCE", row_loop)
    rng = np.random.default_rng(12)
    for shape, oc, k, stride, padding, dilation, groups in (
            ((1, 3, 23, 19), 8, 7, 2, 3, 1, 1), ((1, 12, 11, 10), 6, 5, (2, 1), (2, 0), (1, 2), 3),
            ((2, 5, 9, 8), 17, 3, 1, 4, 2, 1), ((1, 140, 6, 5), 8, 3, 1, 1, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, -3)
        m, s = spread_multipliers(rng, wt)
        prog, _ = conv_program(x.shape, wt, b, m, s, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, x_zp=-3)
        assert_spread(run_exact(dev, prog, x))


def test_conv_dyadic_multipliers_tie(dev):
    """Multipliers that are powers of two make accumulators land exactly half way: the kernels
    then keep the round-half-to-even correction (TIES) and still equal the reference, on each
    kernel; the same for the residual add's requantization."""
    from vkq.ops.eltwise import add_q8_params
    rng = np.random.default_rng(13)
    for shape, oc, k, groups in (((1, 8, 9, 7), 12, 3, 1), ((1, 12, 7, 9), 12, 3, 12), ((1, 16, 5, 9), 8, 1, 1)):
        x, wt, b = random_case(rng, *shape, oc, k, groups, 1, small=True)
        m, s = quantize_multipliers(2.0 ** -rng.integers(1, 4, oc))
        b = rng.integers(-40, 40, oc).astype(np.int32)
        acc = conv.conv2d_acc(x, wt, (1, 1), (k // 2,) * 2, (1, 1), groups, 1) + b[:, None, None]
        s64 = s.astype(np.int64)[:, None, None]
        half = (acc * m[:, None, None].astype(np.int64)) % (np.int64(1) << s64)
        assert np.sum(half == np.int64(1) << (s64 - 1)) > 10       # ties happen
        assert not quant.requant_tie_free(m, s)
        attrs = dict(stride=[1, 1], padding=[k // 2] * 2, dilation=[1, 1], groups=groups, x_zp=1, out_zp=0,
                     qmin=-128, qmax=127)
        res = add_q8_params(0.5, 0, 0.5, 2, 1.0, 0)       # equal scales: the add's multiplier is dyadic too
        fused, split = _epilogue_program(x.shape, wt, b, m, s, attrs, residual=res)
        r = rng.integers(-3, 4, fused.tensors["y"].shape).astype(np.int8)
        ref = run_exact(dev, fused, x, r)
        np.testing.assert_array_equal(ref, run_reference(split, x, r))
        assert_spread(ref, 6)


def test_large_depthwise_kernels_loop_over_rows_on_llvmpipe(device):
    """conv2d_depthwise unrolls its window, which llvmpipe JIT-compiles for minutes at 51 x 51
    (RepLKNet's 31 x 31: tens of seconds): past DEPTHWISE_MAX_TAPS_LLVMPIPE taps llvmpipe takes
    conv2d_general (a loop over kernel rows), other devices conv2d_depthwise; the same bits."""
    import vkq
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 12, 1), torch.nn.Conv2d(12, 12, 13, padding=6, groups=12)).eval()
    xs = [torch.randn(1, 3, 23, 19) for _ in range(3)]
    prog = vkq.CompiledProgram(vkq.compile(model, (xs[0],), [(x,) for x in xs]).program, device)
    x = xs[1].numpy()
    np.testing.assert_array_equal(prog(x), prog.run_reference(x))
    names = [st.name for seg in prog.executor.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert names[2] == ("conv2d_general" if device.info.driver == "llvmpipe" else "conv2d_depthwise"), names
    assert 13 * 13 > conv.DEPTHWISE_MAX_TAPS_LLVMPIPE
