"""max_pool2d_q8, avg_pool2d_q8, adaptive_avg_pool2d_q8, adaptive_max_pool2d_q8, cat_q8: Vulkan == numpy reference
bit for bit on every test device (padding bytes included), and the reference within one int8
step of PyTorch's float reference (dequantize -> float op -> quantize): exactly equal for max
pool and plain copies, off by one only at rounding ties otherwise."""
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F

from oputil import run_exact, spec
from oputil import random_int8 as q8, torch_dequantize as dq, torch_quantize as qz
from vkq import packing
from vkq.ops.cat_q8 import cat_q8_params
from vkq.ops.pool import adaptive_avg_pool2d_params, avg_pool2d_params, max_pool2d_params, pool2d_output_shape
from vkq.registry import get_op



def assert_near_torch(ref, expected, exact):
    """Within one int8 step of torch, and off by one only where the exact real result
    (`exact`, float64 in output steps) is within 0.005 of a rounding tie."""
    diff = np.abs(ref.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()} steps"
    tie = np.abs(np.asarray(exact) % 1.0 - 0.5) < 0.005
    assert not np.any((diff != 0) & ~tie), f"{np.sum((diff != 0) & ~tie)} values off by one away from a tie"


def reference(op, attrs, *arrays):
    return get_op(op).reference(*arrays, **attrs)


# -- max pool -----------------------------------------------------------------------------------

MAX_CASES = {   # (shape, kwargs of F.max_pool2d)
    "resnet_3x3s2p1": ((1, 5, 17, 13), dict(kernel_size=3, stride=2, padding=1)),
    "ceil_2x2": ((2, 3, 9, 11), dict(kernel_size=2, stride=2, ceil_mode=True)),
    "ceil_3x3s2": ((1, 7, 10, 13), dict(kernel_size=3, stride=2, ceil_mode=True)),
    "dilated_asym": ((1, 6, 17, 19), dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0),
                                          dilation=(2, 1), ceil_mode=True)),
    "dilated_same": ((1, 9, 11, 7), dict(kernel_size=3, stride=1, padding=1, dilation=3)),
    "kernel_1": ((1, 3, 5, 5), dict(kernel_size=1, stride=3)),
}


def max_attrs(kw):
    return max_pool2d_params(kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                             kw.get("dilation", 1), kw.get("ceil_mode", False))


def max_out_shape(shape, a):
    return pool2d_output_shape(shape, a["kernel"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"])


@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool_matches_torch(case):
    shape, kw = MAX_CASES[case]
    q = q8(np.random.default_rng(1), shape)
    ref = reference("max_pool2d_q8", max_attrs(kw), q)
    np.testing.assert_array_equal(ref, qz(F.max_pool2d(dq(q, 0.1, 3), **kw), 0.1, 3))


@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool(loads_device, case):
    shape, kw = MAX_CASES[case]
    a = max_attrs(kw)
    run_exact(loads_device, "max_pool2d_q8", a, max_out_shape(shape, a), q8(np.random.default_rng(2), shape))


def test_max_pool_resnet_stem(device):
    """ResNet's stem pool: 3x3 stride 2 pad 1 on (1, 64, 112, 112)."""
    q = q8(np.random.default_rng(3), (1, 64, 112, 112))
    a = max_pool2d_params(3, 2, 1)
    run_exact(device, "max_pool2d_q8", a, (1, 64, 56, 56), q)


# -- average pools ------------------------------------------------------------------------------

QPARAMS = {   # (in_scale, in_zp, out_scale, out_zp, activation)
    "typical": (0.05, -3, 0.04, 5, None),
    "zp_high": (0.02, 127, 0.015, 127, None),     # only values <= 0 in and out
    "zp_low": (0.02, -128, 0.03, -128, None),     # only values >= 0 in and out
    "relu": (0.1, 2, 0.03, -20, "relu"),
}
AVG_CASES = {   # (shape, kwargs of F.avg_pool2d)
    "3x3s2p1": ((1, 5, 17, 13), dict(kernel_size=3, stride=2, padding=1)),
    "3x3s2p1_ceil": ((1, 5, 17, 13), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    "3x3s2p1_exclude_pad": ((2, 3, 11, 9), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    "3x3s2p1_ceil_exclude_pad": ((1, 17, 10, 12), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                        count_include_pad=False)),
    "2x2s2_ceil_odd": ((1, 6, 7, 9), dict(kernel_size=2, ceil_mode=True)),
    "asym_override": ((1, 5, 13, 11), dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True,
                                            divisor_override=5)),
    "whole_input": ((2, 9, 7, 5), dict(kernel_size=(7, 5))),   # the global-pool kernel
}


def avg_attrs(qp, kw):
    si, zi, so, zo, act = QPARAMS[qp]
    return avg_pool2d_params(si, zi, so, zo, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                             kw.get("ceil_mode", False), kw.get("count_include_pad", True),
                             kw.get("divisor_override"), act)


def activate(x, act):
    return torch.relu(x) if act == "relu" else x


@pytest.mark.parametrize("qp", QPARAMS)
@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool_matches_torch(case, qp):
    shape, kw = AVG_CASES[case]
    si, zi, so, zo, act = QPARAMS[qp]
    q = q8(np.random.default_rng(4), shape)
    ref = reference("avg_pool2d_q8", avg_attrs(qp, kw), q)
    exact = F.avg_pool2d(dq(q, si, zi, torch.float64), **kw).numpy() / so + zo
    assert_near_torch(ref, qz(activate(F.avg_pool2d(dq(q, si, zi), **kw), act), so, zo), exact)


@pytest.mark.parametrize("qp", ["zp_high", "zp_low", "relu"])
@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool(loads_device, case, qp):
    shape, kw = AVG_CASES[case]
    a = avg_attrs(qp, kw)
    out = pool2d_output_shape(shape, a["kernel"], a["stride"], a["padding"], 1, a["ceil_mode"])
    run_exact(loads_device, "avg_pool2d_q8", a, out, q8(np.random.default_rng(5), shape))


ADAPTIVE_CASES = {   # (input shape, output size)
    "mobilenet_v2_global": ((1, 1280, 7, 7), (1, 1)),
    "resnet18_global": ((2, 512, 7, 7), (1, 1)),
    "global_odd": ((1, 5, 17, 13), (1, 1)),
    "uneven": ((1, 7, 17, 13), (3, 5)),
    "upsampling": ((1, 3, 5, 4), (7, 9)),   # more outputs than inputs: windows overlap
    "same_size": ((1, 6, 7, 7), (7, 7)),
}


def adaptive_attrs(qp, shape, size):
    si, zi, so, zo, act = QPARAMS[qp]
    return adaptive_avg_pool2d_params(si, zi, so, zo, size, act)


@pytest.mark.parametrize("qp", QPARAMS)
@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_avg_pool_matches_torch(case, qp):
    shape, size = ADAPTIVE_CASES[case]
    si, zi, so, zo, act = QPARAMS[qp]
    q = q8(np.random.default_rng(6), shape)
    ref = reference("adaptive_avg_pool2d_q8", adaptive_attrs(qp, shape, size), q)
    exact = F.adaptive_avg_pool2d(dq(q, si, zi, torch.float64), size).numpy() / so + zo
    assert_near_torch(ref, qz(activate(F.adaptive_avg_pool2d(dq(q, si, zi), size), act), so, zo), exact)


@pytest.mark.parametrize("qp", QPARAMS)
@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_avg_pool(loads_device, case, qp):
    shape, size = ADAPTIVE_CASES[case]
    run_exact(loads_device, "adaptive_avg_pool2d_q8", adaptive_attrs(qp, shape, size), shape[:2] + size,
              q8(np.random.default_rng(7), shape))


def spread_q8(rng, shape):
    """int8 values whose range differs per (n, channel): a large window's max is not always 127."""
    offsets = rng.integers(-90, 90, shape[:2])[..., None, None]
    return np.clip(q8(rng, shape) // 4 + offsets, -128, 127).astype(np.int8)


@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_max_pool_matches_torch(case):
    shape, size = ADAPTIVE_CASES[case]
    q = spread_q8(np.random.default_rng(8), shape)
    ref = reference("adaptive_max_pool2d_q8", {"output_size": list(size)}, q)
    np.testing.assert_array_equal(ref, qz(F.adaptive_max_pool2d(dq(q, 0.1, 3), size), 0.1, 3))


@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_max_pool(loads_device, case):
    shape, size = ADAPTIVE_CASES[case]
    run_exact(loads_device, "adaptive_max_pool2d_q8", {"output_size": list(size)}, shape[:2] + size,
              spread_q8(np.random.default_rng(9), shape))


@pytest.mark.parametrize("tile", [(2, 1), (3, 2)])
def test_pool_window_tiles(device, tile, monkeypatch):
    """pool_window with several output rows and blocks per invocation, on every window
    geometry (tiles past the output's end included): the same bits."""
    from vkq.ops import pool
    monkeypatch.setattr(pool, "WINDOW_TILE", tile)
    monkeypatch.setattr(pool, "WINDOW_TILE_MIN", 0)
    rng = np.random.default_rng(12)
    for shape, kw in MAX_CASES.values():
        a = max_attrs(kw)
        run_exact(device, "max_pool2d_q8", a, max_out_shape(shape, a), q8(rng, shape))
    for case in ("3x3s2p1_ceil_exclude_pad", "asym_override", "2x2s2_ceil_odd"):
        shape, kw = AVG_CASES[case]
        a = avg_attrs("typical", kw)
        out = pool2d_output_shape(shape, a["kernel"], a["stride"], a["padding"], 1, a["ceil_mode"])
        run_exact(device, "avg_pool2d_q8", a, out, q8(rng, shape))


def test_pool_padding_checked_as_torch():
    with pytest.raises(ValueError, match="half the kernel"):
        max_pool2d_params(3, 1, 2, dilation=2)


@pytest.mark.parametrize("local", [(16, 16), (4, 64), (64, 2)])
def test_global_pool_workgroup_reduction(device, local, monkeypatch):
    """The shared-memory split of pool_global (GPUs use it; CPU drivers get y = 1)."""
    from vkq.ops import pool
    monkeypatch.setattr(pool, "_global_local", lambda *_: local)
    shape = (2, 37, 13, 11)
    run_exact(device, "adaptive_avg_pool2d_q8", adaptive_attrs("typical", shape, (1, 1)), (2, 37, 1, 1),
              q8(np.random.default_rng(11), shape))


@pytest.mark.parametrize("fill", [127, -128, None])
def test_global_pool_long_sums(loads_device, fill):
    """Spatial sums longer than pool_global's 16-bit field flush (64 blocks), all at an extreme
    or random, odd channels and widths; with the CPU drivers' 4-channel-block workgroups."""
    shape = (2, 13, 37, 29)   # 37 * 8 = 296 blocks per (n, c4)
    q = q8(np.random.default_rng(13), shape) if fill is None else np.full(shape, fill, np.int8)
    for qp in ("typical", "zp_high", "zp_low"):
        attrs = adaptive_attrs(qp, shape, (1, 1))
        if fill is None:
            run_exact(loads_device, "adaptive_avg_pool2d_q8", attrs, (2, 13, 1, 1), q)
        else:
            _run_global_constant(loads_device, attrs, q)


def test_global_pool_past_the_loop_budget(device):
    """More spatial blocks a channel block than llvmpipe lets one invocation's loops run (65535
    iterations, then it stops without an error): the sum is split over more rows of the
    workgroup. Each channel's values lean its own way, so a sum missing blocks shows (a 550 x
    550 map summed about 86% of its blocks on llvmpipe before)."""
    shape = (1, 6, 520, 515)     # 520 * 129 = 67080 blocks a channel block
    rng = np.random.default_rng(17)
    q = np.stack([rng.integers(-128 + 40 * c, 128 - 40 * (c % 2), shape[2:]) for c in range(6)])[None].astype(np.int8)
    attrs = adaptive_avg_pool2d_params(0.05, 3, 0.05, -20, (1, 1))
    ref = run_exact(device, "adaptive_avg_pool2d_q8", attrs, (1, 6, 1, 1), q)
    mean = q.astype(np.float64).mean((2, 3)) - 3 - 20
    assert np.abs(ref.ravel() - np.clip(mean.ravel(), -128, 127)).max() <= 0.5 + 1e-9


def test_global_pool_split_stays_within_the_loop_budget():
    from vkq.ops.pool import _within_loop_budget
    from vkq.vkinfo import DeviceLimit

    class Info:
        name, loop_budget, max_workgroup_invocations = "llvmpipe", 65535, 1024
    assert _within_loop_budget(Info, 4, 64000) == (4, 1)
    assert _within_loop_budget(Info, 4, 67080) == (4, 2)
    assert _within_loop_budget(Info, 1, 64 * 64000) == (1, 64)
    with pytest.raises(DeviceLimit, match="loop budget"):
        _within_loop_budget(Info, 4, 64 * 66000)
    Info.loop_budget = None
    assert _within_loop_budget(Info, 4, 10**9) == (4, 1)


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d_q8", "adaptive_max_pool2d_q8", "adaptive_max_pool2d"])
def test_adaptive_pools_past_the_loop_budget_run_on_the_cpu(device, monkeypatch, op):
    """pool_adaptive loops over a window's rows and columns (4 output columns an invocation on
    int8): past the loop budget (llvmpipe stopped a 256 x 256 global max pool's loops without an
    error, giving -1 for 127; scaled down here) the node runs on the CPU, warned, same values."""
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.vkinfo import DeviceInfo
    from oputil import single_op_program
    shape, size = (1, 5, 23, 21), (2, 3)
    rng = np.random.default_rng(19)
    x = q8(rng, shape) if op.endswith("q8") else rng.standard_normal(shape).astype(np.float32)
    attrs = adaptive_attrs("typical", shape, size) if op == "adaptive_avg_pool2d_q8" else {"output_size": list(size)}
    dtype, layout = ("int8", "4W4C") if op.endswith("q8") else ("float32", None)
    prog = single_op_program(op, [("x", spec(shape, dtype, layout))], [("y", spec(shape[:2] + size, dtype, layout))],
                             attrs)
    want = run_reference(prog, x)
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(x), want)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: 100))   # a window: 12 rows x 7 columns
    with pytest.warns(UserWarning, match=r"runs on the CPU.*adaptive (average|max) pool over 23 x 21 to 2 x 3"):
        ex = VulkanExecutor(prog, device)
    np.testing.assert_array_equal(ex(x), want)
    assert list(ex.cpu_reasons) == [0]


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_large_pool_windows_loop_or_run_on_the_cpu(device, dtype):
    """Pool windows unroll their taps: a window over the whole input (CBAM's F.max_pool2d(x,
    x.shape[2:])) is a global max through pool_adaptive's loops (a 112 x 112 one took 576 s to
    compile on llvmpipe), and another window past MAX_UNROLLED_TAPS runs on the CPU, warned."""
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.ops.pool import MAX_UNROLLED_TAPS
    from oputil import single_op_program
    shape = (1, 6, 40, 37)
    assert 40 * 37 > MAX_UNROLLED_TAPS
    rng = np.random.default_rng(23)
    x = q8(rng, shape) if dtype == "int8" else rng.standard_normal(shape).astype(np.float32)
    op, layout = ("max_pool2d_q8", "4W4C") if dtype == "int8" else ("max_pool2d", None)
    for kernel, stride, out, on_device in [((40, 37), (40, 37), (1, 1), True), ((33, 33), (1, 1), (8, 5), False)]:
        attrs = dict(kernel=list(kernel), stride=list(stride), padding=[0, 0], dilation=[1, 1], ceil_mode=0)
        prog = single_op_program(op, [("x", spec(shape, dtype, layout))], [("y", spec(shape[:2] + out, dtype, layout))],
                                 attrs)
        if on_device:
            ex = VulkanExecutor(prog, device)
            assert [st.name for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps] == ["pool_adaptive"]
        else:
            with pytest.warns(UserWarning, match=r"a 33 x 33 pool window: its kernel unrolls 1089 taps"):
                ex = VulkanExecutor(prog, device)
            assert list(ex.cpu_reasons) == [0]
        got, want = ex(x), run_reference(prog, x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(want.ravel()[:6], x.max((2, 3)).ravel() if on_device else want.ravel()[:6])


def _run_global_constant(device, attrs, q):
    """A constant input gives a constant output (run_exact wants variety): compare the words."""
    from vkq.executor import VulkanExecutor, run_reference
    from oputil import single_op_program, spec
    prog = single_op_program("adaptive_avg_pool2d_q8", [("x", spec(q.shape, "int8", "4W4C"))],
                             [("y", spec(q.shape[:2] + (1, 1), "int8", "4W4C"))], attrs)
    ex = VulkanExecutor(prog, device)
    ref = run_reference(prog, q)
    np.testing.assert_array_equal(ex(q), ref)
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, "4W4C"))


def test_adaptive_pool_attrs_fit_every_input_size():
    """The attrs hold the scales, not a divisor table for one input size: pooling 5x5, 7x7 and
    6x9 inputs to 2x3 uses each window's own divisor (checked against the float average)."""
    a = adaptive_avg_pool2d_params(0.1, 3, 0.07, -2, (2, 3))
    rng = np.random.default_rng(0)
    for hw in ((5, 5), (7, 7), (6, 9)):
        q = rng.integers(-128, 128, (1, 3, *hw)).astype(np.int8)
        got = reference("adaptive_avg_pool2d_q8", a, q)
        x = torch.from_numpy((q.astype(np.float64) - 3) * 0.1)
        want = np.clip(np.rint(torch.nn.functional.adaptive_avg_pool2d(x, (2, 3)).numpy() / 0.07) - 2, -128, 127)
        assert got.shape == (1, 3, 2, 3) and np.abs(got.astype(np.int64) - want).max() <= 1


# -- concatenation ------------------------------------------------------------------------------

CAT_QPARAMS = {
    "equal": [(0.05, 3), (0.05, 3), (0.05, 3)],
    "mixed": [(0.05, 3), (0.1, -128), (0.02, 127)],
}


def cat_case(qp, channels, rng, dim=1, shape=(2, None, 5, 7)):
    qs = [q8(rng, tuple(c if s is None else s for s in shape)) for c in channels]
    return qs, cat_q8_params(CAT_QPARAMS[qp][:len(qs)], 0.05, 3, dim)


@pytest.mark.parametrize("qp", CAT_QPARAMS)
def test_cat_matches_torch(qp):
    qs, a = cat_case(qp, (5, 3, 17), np.random.default_rng(8))
    ref = reference("cat_q8", a, *qs)
    xs = [dq(q, s, z) for q, (s, z) in zip(qs, CAT_QPARAMS[qp])]
    exact = np.concatenate([dq(q, s, z, torch.float64).numpy() for q, (s, z) in zip(qs, CAT_QPARAMS[qp])], 1)
    assert_near_torch(ref, qz(torch.cat(xs, 1), 0.05, 3), exact / 0.05 + 3)
    if qp == "equal":
        np.testing.assert_array_equal(ref, np.concatenate(qs, 1))


@pytest.mark.parametrize("channels", [(5, 3, 17), (4, 8, 3), (1, 1, 1), (3, 6, 2)])
@pytest.mark.parametrize("qp", CAT_QPARAMS)
def test_cat_channels(loads_device, qp, channels):
    """cat_channels: inputs starting on a word (4, 8, 3) and inside one (5, 3, 17: a funnel of
    two input words and the earlier input's bytes read back), through texels and 64-bit stores
    where the device takes texel loads."""
    qs, a = cat_case(qp, channels, np.random.default_rng(sum(channels)))
    run_exact(loads_device, "cat_q8", a, (2, sum(channels), 5, 7), *qs)


@pytest.mark.parametrize("qp", CAT_QPARAMS)
@pytest.mark.parametrize("sizes", [(2, 5, 3), (4, 8, 3)])
@pytest.mark.parametrize("layout", packing.LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1])
def test_cat_any_dim(device, dim, layout, sizes, qp):
    """Along a dim the bytes do not run along, and along the one they do where each input starts
    on a word (4, 8, 3: the last ends inside one), each output word is one input's (cat_generic
    WORDS; along a dim that is not blocked, INPUT); else (2, 5, 3 there) byte by byte. Copies
    (equal qparams) and requantized."""
    rng = np.random.default_rng(9 + dim)
    base = [2, 3, 6, 5]
    qs = []
    for n in sizes:
        base[dim] = n
        qs.append(q8(rng, tuple(base)))
    a = cat_q8_params(CAT_QPARAMS[qp], 0.05, 3, dim)
    base[dim] = sum(sizes)
    run_exact(device, "cat_q8", a, tuple(base), *qs, layout=layout)


@pytest.mark.parametrize("qp", CAT_QPARAMS)
@pytest.mark.parametrize("layout,dim,base", [("4W4C", 3, (1, 5, 3, None)),     # Swin's patch merging (C odd)
                                             ("4H4W", 2, (2, 3, None, 5)),     # 4H4W's blocked dims
                                             ("4H4W", 3, (1, 2, 7, None)),
                                             ("4W4C", 2, (2, 6, None, 5))])    # an unblocked dim
def test_cat_by_input_words(loads_device, layout, dim, base, qp):
    """Where every input's extent along dim is whole blocks (4, 8, 4 along a blocked dim; any
    along another), each dispatch moves its own input's words, padding included, to their
    place (cat_generic INPUT), not a pass over all the output's words per input; padding bytes
    stay 0 when requantized (run_exact reads the raw words); as texels where the device takes
    texel loads."""
    device = loads_device
    from vkq.executor import VulkanExecutor
    from oputil import single_op_program, spec
    rng = np.random.default_rng(11 + dim)
    qs = [q8(rng, tuple(n if b is None else b for b in base)) for n in (4, 8, 4)]
    a = cat_q8_params(CAT_QPARAMS[qp], 0.05, 3, dim)
    out = tuple(16 if b is None else b for b in base)
    run_exact(device, "cat_q8", a, out, *qs, layout=layout)
    prog = single_op_program("cat_q8", [(f"x{i}", spec(q.shape, "int8", layout)) for i, q in enumerate(qs)],
                             [("y", spec(out, "int8", layout))], a)
    ex = VulkanExecutor(prog, device)
    ex(*qs)
    steps = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert len(steps) == 3 and all("INPUT" in st.defines and ("TEXEL" in st.defines) == device.texel_loads
                                   for st in steps), [st.defines for st in steps]


def test_cat_lower_rank(device):
    rng = np.random.default_rng(10)
    qs = [q8(rng, (c, 9)) for c in (3, 6)]
    run_exact(device, "cat_q8", cat_q8_params(CAT_QPARAMS["mixed"][:2], 0.05, 3, 0), (9, 9), *qs, layout="4H4W")


@pytest.mark.parametrize("size, shape, op", [
    (1, (1, 24, 28, 28), "max_pool2d_q8"),            # a global max pool: one 28 x 28 window
    ((2, 3), (2, 16, 12, 12), "max_pool2d_q8"),       # 6 x 4 windows
    ((None, 2), (1, 8, 5, 6), "max_pool2d_q8"),       # None keeps H: 1 x 3 windows
    (5, (1, 8, 12, 12), "adaptive_max_pool2d_q8"),    # windows of 2 and 3, overlapping
    ((3, 7), (2, 5, 10, 13), "adaptive_max_pool2d_q8"),
    (1, (2, 8, 17), "adaptive_max_pool2d_q8"),        # AdaptiveMaxPool1d(1): a text CNN's max over time
    (4, (1, 6, 10), "adaptive_max_pool2d_q8"),        # AdaptiveMaxPool1d(4) over 10
])
def test_adaptive_max_pool_model(device, size, shape, op):
    """AdaptiveMaxPool2d / 1d in a static int8 model runs on Vulkan in int8 (it ran in float on
    the CPU): as the int8 max pool where the input is a multiple of the output (normalize_ops:
    max_pool_from_adaptive), else adaptive_max_pool2d_q8; exact against the reference and
    PT2E's eager output."""
    import vkq
    torch.manual_seed(0)
    n = torch.nn
    one_d = len(shape) == 3

    class Net(n.Module):
        def __init__(self):
            super().__init__()
            conv = n.Conv1d if one_d else n.Conv2d
            self.conv = conv(shape[1], shape[1], 3, padding=1)
            self.pool = (n.AdaptiveMaxPool1d if one_d else n.AdaptiveMaxPool2d)(size)
            self.out = conv(shape[1], 5, 1)

        def forward(self, x):
            return self.out(self.pool(torch.relu(self.conv(x))))

    x = torch.randn(shape)
    gm = vkq.quantize(Net().eval(), (x,), [torch.randn(shape) for _ in range(2)])
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    ops = [node.op for node in prog.program.nodes]
    assert op in ops and not prog.fallback_ops, (ops, prog.fallback_ops)
    got = prog(x.numpy())
    np.testing.assert_array_equal(got, prog.run_reference(x.numpy()))
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(np.unique(got)) >= min(10, got.size)


# -- max unpooling ------------------------------------------------------------------------------

UNPOOL_CASES = {   # (x shape, kwargs of F.max_pool2d, output_size or None: the pool's input size)
    "enet_2x2": ((1, 5, 16, 12), dict(kernel_size=2, stride=2), None),
    "odd_sizes": ((2, 7, 15, 13), dict(kernel_size=2, stride=2), None),
    "ceil_odd": ((1, 6, 9, 11), dict(kernel_size=2, stride=2, ceil_mode=True), None),
    "gaps_padded": ((1, 4, 17, 11), dict(kernel_size=(2, 3), stride=3, padding=1), None),
    "gaps_both": ((1, 5, 18, 19), dict(kernel_size=(3, 2), stride=(4, 3), padding=1), None),
    "wider_output": ((1, 9, 16, 10), dict(kernel_size=2, stride=2), (17, 11)),   # indices read in an 11-wide plane
    "overlapping": ((1, 4, 13, 9), dict(kernel_size=3, stride=2, padding=1), None),   # CPU: two windows, one index
}


def unpool_attrs(kw, x_shape, size, zero_point):
    a = max_attrs(kw)
    return {**a, "output_size": list(size or x_shape[-2:]), "zero_point": zero_point}


def unpool_inputs(rng, x_shape, kw, ties):
    """x with many ties (values of three levels) or spread values, and v shaped as the pool's output."""
    x = rng.integers(-1, 2, x_shape).astype(np.int8) if ties else q8(rng, x_shape)
    v = q8(rng, max_out_shape(x_shape, max_attrs(kw)))
    return v, x


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("case", UNPOOL_CASES)
def test_max_unpool_matches_torch(case, ties):
    """PT2E's max_unpool2d(dq v, max_pool2d_with_indices(dq x)[1]), quantized with v's qparams,
    equals the reference bit for bit (first maximum of a window on ties; the later value where
    overlapping windows name one position)."""
    from vkq.ops.unpool import max_pool_indices
    shape, kw, size = UNPOOL_CASES[case]
    v, x = unpool_inputs(np.random.default_rng(4), shape, kw, ties)
    _, idx = F.max_pool2d(dq(x, 0.1, 3), return_indices=True, **kw)
    a = max_attrs(kw)
    np.testing.assert_array_equal(max_pool_indices(x, a["kernel"], a["stride"], a["padding"], a["dilation"],
                                                   a["ceil_mode"]), idx.numpy())
    out_size = size or shape[-2:]
    want = qz(F.max_unpool2d(dq(v, 0.05, -7), idx, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                             output_size=out_size), 0.05, -7)
    np.testing.assert_array_equal(reference("max_unpool2d_q8", unpool_attrs(kw, shape, size, -7), v, x), want)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("case", [c for c in UNPOOL_CASES if c != "overlapping"])
def test_max_unpool(loads_device, case, ties):
    shape, kw, size = UNPOOL_CASES[case]
    v, x = unpool_inputs(np.random.default_rng(5), shape, kw, ties)
    a = unpool_attrs(kw, shape, size, -7)
    ref = run_exact(loads_device, "max_unpool2d_q8", a, (*v.shape[:2], *a["output_size"]), v, x)
    assert np.count_nonzero(ref == -7) >= ref.size // 2    # the positions no window's maximum took


def test_max_unpool_declines_what_its_kernel_cannot_place():
    """Overlapping windows (two can name one position) and an output smaller than the pool's
    input (an index could fall outside) run on the CPU, and say why."""
    from oputil import single_op_program
    from vkq.registry import cpu_reason

    def reason(kw, x_shape, size):
        a = unpool_attrs(kw, x_shape, size, 0)
        v_shape = max_out_shape(x_shape, max_attrs(kw))
        prog = single_op_program("max_unpool2d_q8", [("v", spec(v_shape, "int8", "4W4C")), ("x", spec(x_shape, "int8", "4W4C"))],
                                 [("y", spec((*v_shape[:2], *a["output_size"]), "int8", "4W4C"))], a)
        return cpu_reason(prog.nodes[0], prog.tensors)

    assert reason(dict(kernel_size=2, stride=2), (1, 4, 8, 8), None) is None
    assert "overlap" in reason(dict(kernel_size=3, stride=2, padding=1), (1, 4, 8, 8), None)
    assert "overlap" in reason(dict(kernel_size=2, stride=2, dilation=2), (1, 4, 9, 9), None)
    assert "cannot hold" in reason(dict(kernel_size=2, stride=2), (1, 4, 9, 9), (8, 8))


class _UnpoolNet(torch.nn.Module):
    """ENet's / SegNet's pattern: pools that keep their indices, and the decoder placing its
    values where the encoder's maxima were (output_size: the pool's input, odd sizes included)."""

    def __init__(self, k2=2):
        super().__init__()
        n = torch.nn
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a, self.b = n.Conv2d(3, 8, 3, padding=1), n.Conv2d(8, 12, 3, padding=1)
            self.c, self.d, self.e = n.Conv2d(12, 12, 3, padding=1), n.Conv2d(12, 8, 1), n.Conv2d(8, 4, 3, padding=1)
        self.k2 = k2

    def forward(self, x):
        x1 = torch.relu(self.a(x))
        y1, i1 = F.max_pool2d(x1, 2, return_indices=True)
        x2 = torch.relu(self.b(y1))
        y2, i2 = F.max_pool2d(x2, self.k2, 2, self.k2 // 2, return_indices=True)
        u2 = F.max_unpool2d(self.c(y2), i2, self.k2, 2, self.k2 // 2, output_size=x2.shape[-2:])
        u1 = F.max_unpool2d(self.d(torch.relu(u2 + x2)), i1, 2, output_size=x1.shape[-2:])
        return self.e(u1)


@pytest.mark.parametrize("k2, on_cpu", [(2, 0), (3, 1)])
def test_max_unpool_model(device, k2, on_cpu):
    """max_pool2d(return_indices=True) + max_unpool2d in a static int8 model: int8 on Vulkan (both
    ran in float on the CPU: the int64 indices had no int8 form), the indices recomputed from the
    pool's int8 input; exact against the reference, which equals PT2E's eager output. An
    overlapping pool's unpool (3x3 s2) stays on the CPU, named, and still exact."""
    import vkq
    x = torch.randn(1, 3, 30, 22)
    gm = vkq.quantize(_UnpoolNet(k2).eval(), (x,), [torch.randn(1, 3, 30, 22) for _ in range(3)])
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    ops = [node.op for node in prog.program.nodes]
    assert ops.count("max_unpool2d_q8") == 2 and "torch_op" not in ops, ops
    assert [r for _, r in prog.program.fallback] == (
        ["max_unpool2d_q8: kernel [3, 3] stride [2, 2] dilation [1, 1]: windows that overlap can place two values "
         "in one position (the kernel takes kernel <= stride, no dilation); runs on the CPU"] if on_cpu else []), \
        prog.program.fallback
    got = prog(x.numpy())
    np.testing.assert_array_equal(got, prog.run_reference(x.numpy()))
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.count_nonzero(np.abs(got) > 0.05) > got.size // 4


@pytest.mark.parametrize("case", [c for c in UNPOOL_CASES if c != "overlapping"])
def test_max_unpool_float(device, case):
    """The float op (what the linear-only schemes leave of a CNN's unpooling) on Vulkan equals
    torch's max_unpool2d of max_pool2d_with_indices' indices exactly; ties (first maximum), -inf
    and NaN taps (ATen takes a window's last NaN) included."""
    from oputil import run_both, single_op_program
    shape, kw, size = UNPOOL_CASES[case]
    rng = np.random.default_rng(6)
    x = rng.integers(-2, 3, shape).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 9, replace=False)] = [np.nan] * 3 + [-np.inf] * 6
    xt = torch.from_numpy(x)
    _, idx = F.max_pool2d(xt, return_indices=True, **kw)
    v = rng.standard_normal(idx.shape).astype(np.float32)
    out_size = size or shape[-2:]
    want = F.max_unpool2d(torch.from_numpy(v), idx, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                          output_size=out_size).numpy()
    attrs = {k: a for k, a in unpool_attrs(kw, shape, size, 0).items() if k != "zero_point"}
    prog = single_op_program("max_unpool2d", [("v", spec(v.shape)), ("x", spec(shape))],
                             [("y", spec(want.shape))], attrs)
    np.testing.assert_array_equal(get_op("max_unpool2d").reference(v, x, **attrs), want)
    (got,), _ = run_both(device, prog, v, x)
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) == v.size     # every value placed, once


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_max_unpool_model_in_float(device, scheme):
    """Under the linear-only schemes the convs, pools and unpools stay float: the unpools run
    max_unpool's FLOAT variant on Vulkan (no CPU node); the program equals its reference up to float
    rounding, and PT2E's eager output within 1% of its range (the dynamic scheme's 1x1 conv, a
    linear over patches, quantizes x per row where PT2E takes one scale)."""
    import vkq
    x = torch.randn(1, 3, 30, 22)
    gm = vkq.quantize(_UnpoolNet().eval(), (x,), [torch.randn(1, 3, 30, 22) for _ in range(2)], scheme)
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    ops = [node.op for node in prog.program.nodes]
    assert ops.count("max_unpool2d") == 2 and not prog.fallback_ops, (ops, prog.fallback_ops)
    got = prog(x.numpy())
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(got, prog.run_reference(x.numpy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=0, atol=0.01 * np.abs(want).max())
    assert np.count_nonzero(np.abs(got) > 0.05) > got.size // 4
