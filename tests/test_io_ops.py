"""quantize / dequantize / repack shaders and the requantize include, on every test device,
bit for bit against numpy (and PyTorch)."""
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401

from vkq import pack
from vkq.device import grid_1d
from vkq.executor import VulkanExecutor
from vkq.ops import io as io_ops
from vkq.program import Node, Program
from vkq.quant import (dequantize, quantize, quantize_multipliers, requant_clamp_frac, requant_clamp_params, requantize,
                       split_bias)

from oputil import assert_same, run_both, single_op_program, spec

# the last four have W % 4 == 0 (or numel % 4 == 0): quantize/dequantize take their VEC variant
SHAPES = [(1,), (3,), (17,), (5, 7), (2, 3, 5), (1, 3, 5, 7), (2, 17, 3, 5), (1, 1, 1, 1), (2, 5, 1, 9),
          (2, 5, 3, 8), (3, 12), (1, 6, 7, 4), (1, 3, 2, 2)]
HIGH_RANK = [(2, 3, 5, 1, 7), (1, 2, 3, 2, 5, 3), (2, 3, 5, 1, 8)]      # ROW only
QPARAMS = [(0.05, 3), (0.02, -128), (0.1, 127), (1 / 3, 0)]


def _float_input(shape, scale, seed):
    x = np.random.default_rng(seed).normal(0, 60 * scale, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[: min(8, flat.size)] = (np.arange(min(8, flat.size)) - 3.5).astype(np.float32) * np.float32(scale)  # ties
    flat[-3:][: max(0, flat.size - 8)] = [np.nan, np.inf, -np.inf][: max(0, flat.size - 8)]   # NaN -> 0, as torch
    return x


@pytest.mark.parametrize("shape,layout", [(s, lay) for s in SHAPES for lay in ("4W4C", "4H4W", "ROW")]
                         + [(s, "ROW") for s in HIGH_RANK])
def test_quantize_on_device_equals_numpy_and_torch(loads_device, shape, layout):
    for i, (scale, zp) in enumerate(QPARAMS):
        x = _float_input(shape, scale, i)
        prog = single_op_program("quantize", [("x", spec(shape))], [("q", spec(shape, "int8", layout, scale, zp))],
                                 dict(scale=scale, zero_point=zp))
        ex = VulkanExecutor(prog, loads_device)
        q = ex(x)
        want = torch.ops.quantized_decomposed.quantize_per_tensor(torch.from_numpy(x), scale, zp, -128, 127, torch.int8)
        np.testing.assert_array_equal(q, want.numpy())
        np.testing.assert_array_equal(ex.buffers["q"].read(), pack(quantize(x, scale, zp), layout))  # the words


@pytest.mark.parametrize("shape,layout", [(s, lay) for s in SHAPES[3:] for lay in ("4W4C", "4H4W", "ROW")]
                         + [(s, "ROW") for s in HIGH_RANK])
def test_dequantize_on_device(loads_device, shape, layout):
    scale, zp = 0.037, -11
    q = np.random.default_rng(5).integers(-128, 128, shape).astype(np.int8)
    q.reshape(-1)[:2] = [-128, 127][: q.size]
    prog = single_op_program("dequantize", [("q", spec(shape, "int8", layout, scale, zp))], [("x", spec(shape))],
                             dict(scale=scale, zero_point=zp))
    got, ref = run_both(loads_device, prog, q)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[0], dequantize(q, scale, zp))


@pytest.mark.parametrize("shape", [(3,), (17,), (4, 49, 49), (2, 3, 5, 8)])
@pytest.mark.parametrize("scale,zp,qmin", [(0.05, 3, -128), (0.02, -128, -128), (1 / 3, 0, 0)])
def test_fake_quantize_on_device_equals_the_pair(loads_device, shape, scale, zp, qmin):
    """fake_quantize (one float pass) == dequantize(quantize(x)) bit for bit, and == PyTorch's
    quantize_per_tensor / dequantize_per_tensor pair: ties to even, clamping (a narrowed qmin: a
    fused ReLU), NaN -> the zero point's value, +-inf clamped; whole vec4 blocks and a tail."""
    x = _float_input(shape, scale, 7)
    attrs = dict(scale=scale, zero_point=zp, qmin=qmin, qmax=127)
    prog = single_op_program("fake_quantize", [("x", spec(shape))], [("y", spec(shape))], attrs)
    got, ref = run_both(loads_device, prog, x)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[0], dequantize(quantize(x, scale, zp, qmin, 127), scale, zp))
    t = torch.ops.quantized_decomposed.quantize_per_tensor(torch.from_numpy(x), scale, zp, qmin, 127, torch.int8)
    want = torch.ops.quantized_decomposed.dequantize_per_tensor(t, scale, zp, qmin, 127, torch.int8).numpy()
    np.testing.assert_array_equal(got[0], want)
    assert x.size < 9 or len(np.unique(got[0])) > 3        # (the first 8 values are the ties)


@pytest.mark.parametrize("wide", [False, True], ids=["single", "paired"])
@pytest.mark.parametrize("grid,rows", [(True, None), (True, 1), (True, 2), (True, 7), (True, 64), (False, None)])
@pytest.mark.parametrize("shape", [(3, 9, 5, 12), (2, 5, 3, 8), (1, 6, 7, 4), (1, 3, 2, 40), (1, 7, 3, 16)])
def test_4w4c_quantize_dequantize_with_and_without_the_grid(loads_device, monkeypatch, shape, grid, rows, wide):
    """4W4C with W % 4 == 0 runs on a (width blocks, channel blocks, N*H / rows) grid, each
    invocation down `rows` of the (image, row) pairs (the device's choice, or forced here: a
    last invocation with fewer rows, runs that cross into the next image, more rows than there
    are); where a count does not fit a grid dimension, on the linear index (forced here): the
    same words either way, padding channels 0. Where the device stores 32 bytes at once (wide,
    forced here), W % 8 == 0 and W >= 16, dequantize's invocations take two width blocks (PAIR)."""
    monkeypatch.setattr(type(loads_device), "wide_stores", property(lambda self: wide))
    if not grid:
        monkeypatch.setattr(io_ops, "MAX_GROUPS", 0)
    if rows is not None:
        monkeypatch.setattr(io_ops, "invocation_rows", lambda info, groups, total: min(rows, total))
    scale, zp = 0.05, 3
    x = _float_input(shape, scale, 9)
    t = {"x": spec(shape), "q": spec(shape, "int8", "4W4C", scale, zp), "y": spec(shape)}
    prog = Program(t, [Node("quantize", ["x"], ["q"], dict(scale=scale, zero_point=zp)),
                       Node("dequantize", ["q"], ["y"], dict(scale=scale, zero_point=zp))], ["x"], ["y"])
    ex = VulkanExecutor(prog, loads_device, host_visible_all=True)
    y = ex(x)
    steps = [st for seg in ex.segments for st in seg[1].steps]
    assert [("GRID" in st.defines) for st in steps] == [grid, grid]
    assert steps[1].spec[2] == int(grid and wide and shape[3] % 8 == 0 and shape[3] >= 16)
    if rows is not None:
        n_rows = shape[0] * shape[2]
        assert [(st.spec[1], st.groups[2]) for st in steps] == [(min(rows, n_rows), -(-n_rows // min(rows, n_rows)))] * 2
    np.testing.assert_array_equal(ex.buffers["q"].read(), pack(quantize(x, scale, zp), "4W4C"))
    np.testing.assert_array_equal(y, dequantize(quantize(x, scale, zp), scale, zp))


def test_invocation_rows_per_device():
    """GPUs: one row an invocation. CPU drivers: as many rows as keep 8 workgroups a thread,
    at most MAX_INVOCATION_ROWS and the rows there are."""
    from types import SimpleNamespace

    from vkq import device as dev
    gpu, cpu = SimpleNamespace(type="discrete-gpu"), SimpleNamespace(type="cpu")
    assert dev.invocation_rows(gpu, 64, 128) == 1
    want = dev.CPU_WORKGROUPS_PER_THREAD * dev.cpu_threads()
    assert dev.invocation_rows(cpu, 64, 128) == max(1, min(dev.MAX_INVOCATION_ROWS, 64 * 128 // want))
    assert dev.invocation_rows(cpu, 1, 3) == 1
    assert dev.invocation_rows(cpu, 10 ** 6, 5) == 5


@pytest.mark.parametrize("src,dst", [("4W4C", "4H4W"), ("4H4W", "4W4C"), ("4W4C", "4W4C"), ("4W4C", "ROW"),
                                     ("ROW", "4H4W")])
# repack_blocks.comp's 4x4 tiles of cubes: several tiles, partial ones at the channel, width
# and row edges, and whole ones
@pytest.mark.parametrize("shape", SHAPES + [(2, 37, 6, 21), (1, 64, 8, 64)])
def test_repack_layouts(loads_device, shape, src, dst):
    q = np.random.default_rng(6).integers(-128, 128, shape).astype(np.int8)
    prog = single_op_program("repack", [("a", spec(shape, "int8", src))], [("b", spec(shape, "int8", dst))])
    ex = VulkanExecutor(prog, loads_device)
    np.testing.assert_array_equal(ex(q), q)
    np.testing.assert_array_equal(ex.buffers["b"].read(), pack(q, dst))


@pytest.mark.parametrize("wide", [False, True], ids=["single", "paired"])
@pytest.mark.parametrize("src,dst", [("4W4C", "4H4W"), ("4H4W", "4W4C")])
def test_repack_blocks_in_pairs(loads_device, src, dst, wide, monkeypatch):
    """repack_blocks.comp with two cubes an invocation (PAIR) where the device stores 32 bytes at
    once and the output's paired blocks are whole (4H4W: an even count of width blocks, 4W4C: of
    channel blocks), one cube elsewhere: the same bytes, partial tiles, rows and channels
    included. (Without 64-bit stores STORE4_PAIR is two stores, so both drivers run both.)"""
    monkeypatch.setattr(type(loads_device), "wide_stores", property(lambda self: wide))
    rng = np.random.default_rng(16)
    for shape in ((1, 8, 5, 8), (2, 37, 6, 21), (1, 64, 9, 64), (1, 30, 3, 36), (2, 6, 13, 40), (1, 20, 4, 4)):
        q = rng.integers(-128, 128, shape).astype(np.int8)
        prog = single_op_program("repack", [("a", spec(shape, "int8", src))], [("b", spec(shape, "int8", dst))])
        ex = VulkanExecutor(prog, loads_device)
        step, = ex.segments[0][1].steps
        blocks = -(-shape[3 if dst == "4H4W" else 1] // 4)      # the output's adjacent blocks
        assert step.name == "repack_blocks" and step.spec[-1] == int(wide and blocks % 2 == 0)
        np.testing.assert_array_equal(ex(q), q)
        np.testing.assert_array_equal(ex.buffers["b"].read(), pack(q, dst))


@pytest.mark.parametrize("src,dst", [("4W4C", "4H4W"), ("4H4W", "4W4C")])
def test_repack_keeps_words_equal_to_int_min(device, src, dst):
    """before_store (common.glsl) is a max with INT_MIN: words 0x80000000 on both sides (4W4C:
    channels 0-2 zero and 3 at -128; 4H4W: widths 0-2 zero and 3 at -128) move unchanged."""
    q = np.random.default_rng(12).integers(-128, 128, (1, 8, 5, 12)).astype(np.int8)
    q[:, :3], q[:, 3] = 0, -128
    q[:, 5, :, :3], q[:, 5, :, 3] = 0, -128
    prog = single_op_program("repack", [("a", spec(q.shape, "int8", src))], [("b", spec(q.shape, "int8", dst))])
    ex = VulkanExecutor(prog, device)
    np.testing.assert_array_equal(ex(q), q)
    assert np.any(pack(q, dst) == np.int32(-2 ** 31))
    np.testing.assert_array_equal(ex.buffers["b"].read(), pack(q, dst))


@pytest.mark.parametrize("src_shape,dst_shape", [((2, 5, 3, 7), (2, 105)), ((1, 17, 1, 1), (1, 17)),
                                                 ((3, 17), (51,)), ((2, 6, 5), (2, 3, 2, 5)),
                                                 ((1, 18, 5, 3), (1, 2, 9, 5, 3)), ((2, 3, 2, 1, 5, 7), (6, 2, 35))])
def test_repack_reshape(device, src_shape, dst_shape):
    q = np.random.default_rng(7).integers(-128, 128, src_shape).astype(np.int8)
    lay = lambda shape, want: "ROW" if len(shape) > 4 else want
    prog = single_op_program("repack", [("a", spec(src_shape, "int8", lay(src_shape, "4W4C")))],
                             [("b", spec(dst_shape, "int8", lay(dst_shape, "4H4W")))], {"shape": list(dst_shape)})
    got, ref = run_both(device, prog, q)
    assert_same(got, ref)
    np.testing.assert_array_equal(got[0], q.reshape(dst_shape))


def test_quantize_repack_dequantize_chain(device):
    """Three dispatches recorded once and replayed: results stay exact across calls."""
    shape, scale, zp = (2, 5, 3, 7), 0.05, 3
    from vkq.demo import roundtrip_program
    prog = roundtrip_program(shape, scale, zp, "4W4C", "4H4W")
    ex = VulkanExecutor(prog, device)
    for seed in range(3):
        x = _float_input(shape, scale, seed)
        np.testing.assert_array_equal(ex(x), dequantize(quantize(x, scale, zp), scale, zp))


@pytest.mark.parametrize("variant", ["requantize", "requantize_clamped", "requantize_clamped_frac"])
def test_requantize_include_matches_numpy(device, variant):
    """shaders/include/requant.glsl against vkq.quant.requantize over the whole int32 range,
    for both of its routines (requantize_clamped with requant_clamp_params's constants, and
    with bias fractions: random, the extremes +-m/2, and ones that make exact ties)."""
    rng = np.random.default_rng(8)
    n = 4099
    acc = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    acc[n // 2:] //= (2 ** rng.integers(0, 31, n - n // 2)).astype(np.int32)
    acc[:4] = [-2 ** 31, 2 ** 31 - 1, 0, -1]
    reals = np.exp(rng.uniform(np.log(2.0 ** -40), np.log(2.0 ** 10), n))
    reals[:6] = [1.0, 0.9999999, 2 ** -20, 2 ** -31, 1.5, 2 ** 29]
    # exact ties (dyadic multipliers, shifts on both sides of 32) must round half to even
    ties = np.arange(-600, 600)
    acc[100:100 + ties.size] = ties * 2048 + 1024 * (ties % 3 == 0)
    reals[100:100 + ties.size] = np.resize([0.25, 0.5, 2.0 ** -11, 2.0 ** -13, 2.0 ** -3], ties.size)
    m, s = quantize_multipliers(reals)
    frac = np.zeros(n, np.int64)
    if variant == "requantize_clamped_frac":
        frac = split_bias(rng.uniform(-0.5, 0.5, n), m)[1]
        frac[:300:3] = (m[:300:3].astype(np.int64) >> 11) << 10         # the largest fractions
        frac[1:300:3] = -frac[:300:3]
        # (acc * m + frac) / 2^s exactly half way, m = 3 * 2^29, s = 38: acc * m = 2^37 - frac
        # (mod 2^38), i.e. 3 * acc = t (mod 2^9) with t = (2^37 - frac) / 2^29; 3^-1 = 171 (mod 2^9)
        k = np.arange(1300, 1600)
        m[k], s[k] = 3 << 29, 38
        frac[k] = np.resize([1 << 29, -(1 << 29), 0], k.size)
        t = ((1 << 37) - frac[k]) % (1 << 38) >> 29
        acc[k] = (t * 171 % 512 + 512 * np.resize(np.arange(-80, 80), k.size)).astype(np.int32)
    if variant == "requantize":
        consts, defines = (m, s), None
    else:
        bound, lshift, mc, rshift = requant_clamp_params(m, s)
        fr = requant_clamp_frac(m, s, frac)
        consts, defines = (mc, np.stack([bound, lshift, rshift, fr], 1).astype(np.int32)), {"CLAMPED": 1}
    bufs = [device.buffer(acc), *(device.buffer(c) for c in consts), device.buffer(size=n)]
    for zp, qmin, qmax in ((0, -128, 127), (-128, -128, 127), (127, -128, 127), (5, 5, 60)):
        d = device.dispatch("selftest_requantize", bufs, grid_1d(n, 64), local=(64,), push=(n, zp, qmin, qmax),
                            defines=defines)
        device.run([d], upload=bufs[:3], download=bufs[3:])
        np.testing.assert_array_equal(bufs[3].read(), requantize(acc, m, s, zp, qmin, qmax, frac).astype(np.int32))
