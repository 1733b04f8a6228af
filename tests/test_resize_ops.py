"""upsample_bilinear2d (vkq/ops/resize.py) on every test device: float32 against the reference
and PyTorch (float rounding), int8 against the reference bit for bit and within one step of
PT2E's dequantize -> float bilinear -> quantize; nearest upsampling as a take is exact."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oputil import random_int8, single_op_program, spec, torch_dequantize, torch_quantize
from vkq import packing
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops.resize import upsample_bilinear2d

R = np.random.default_rng(3)
CASES = [   # in shape, out size, align_corners, scales
    ((1, 3, 5, 7), (11, 13), False, None),
    ((2, 5, 4, 4), (10, 10), False, [2.5, 2.5]),
    ((1, 2, 3, 5), (7, 9), True, None),
    ((1, 7, 6, 3), (12, 6), True, [2.0, 2.0]),
    ((1, 1, 9, 9), (4, 5), False, None),          # downsampling
    ((1, 4, 1, 6), (3, 12), False, None),
]


def _torch(x, size, ac, scales, mode="bilinear"):
    kw = {"scale_factor": scales} if scales else {"size": size}
    return F.interpolate(x, mode=mode, align_corners=ac, **kw)


@pytest.mark.parametrize("shape,size,ac,scales", CASES)
def test_float(device, shape, size, ac, scales):
    x = R.standard_normal(shape).astype(np.float32)
    out = shape[:2] + size
    attrs = {"out_size": list(size), "align_corners": ac, "scales": scales}
    prog = single_op_program("upsample_bilinear2d", [("x", spec(shape))], [("y", spec(out))], attrs)
    got = VulkanExecutor(prog, device)(x)
    ref = run_reference(prog, x)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6)
    np.testing.assert_allclose(got, _torch(torch.from_numpy(x), size, ac, scales).numpy(), rtol=0, atol=2e-6)


@pytest.mark.parametrize("layouts", [("4W4C", "4W4C"), ("4W4C", "4H4W")])
@pytest.mark.parametrize("shape,size,ac,scales", CASES)
def test_int8(loads_device, shape, size, ac, scales, layouts):
    """4W4C to 4W4C: a block an invocation (BLOCKS; channel padding and widths past the output's
    stay 0: the raw words are compared), through texels where the device takes texel loads;
    to another layout, a word an invocation byte by byte."""
    device = loads_device
    q = random_int8(R, shape)
    scale, zp = 0.05, -7
    out = shape[:2] + size
    attrs = {"out_size": list(size), "align_corners": ac, "scales": scales}
    prog = single_op_program("upsample_bilinear2d", [("x", spec(shape, "int8", layouts[0], scale, zp))],
                             [("y", spec(out, "int8", layouts[1], scale, zp))], attrs)
    ex = VulkanExecutor(prog, device)
    got = ex(q)
    ref = run_reference(prog, q)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, layouts[1]))
    (st,) = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    blocks = layouts == ("4W4C", "4W4C")
    assert ("BLOCKS" in st.defines) == blocks and ("TEXEL" in st.defines) == (blocks and device.texel_loads), st.defines
    pt2e = torch_quantize(_torch(torch_dequantize(q, scale, zp), size, ac, scales), scale, zp)
    assert np.abs(got.astype(int) - pt2e.astype(int)).max() <= 1
    # equal wherever the exact value is not near a half step (halves are common with weights 1/4,
    # 3/4, and PT2E's float rounding decides them either way; Q11 weights move a value < 0.1)
    exact = _exact(q, size, ac, scales)
    clear = np.abs(exact - np.floor(exact) - 0.5) > 0.1
    assert clear.mean() > 0.3
    np.testing.assert_array_equal(got[clear], pt2e[clear])


def _exact(q, size, ac, scales):
    """Bilinear of the int8 values in float64 with ATen's float32 taps."""
    from vkq.ops.resize import linear_taps
    (y0, y1, wy0, wy1), (x0, x1, wx0, wx1) = (linear_taps(q.shape[2 + i], size[i], ac, (scales or [None, None])[i])
                                              for i in range(2))
    v = q.astype(np.float64)
    top = v[:, :, y0][..., x0] * wx0 + v[:, :, y0][..., x1] * wx1
    bot = v[:, :, y1][..., x0] * wx0 + v[:, :, y1][..., x1] * wx1
    return top * wy0[:, None].astype(np.float64) + bot * wy1[:, None].astype(np.float64)


def test_int8_reference_is_the_float_formula_rounded():
    """With weights on the Q11 grid (scale 2) the integer result is the float bilinear rounded."""
    q = random_int8(R, (1, 2, 4, 4))
    got = upsample_bilinear2d(q, out_size=[8, 8], align_corners=False, scales=[2.0, 2.0])
    want = np.rint(upsample_bilinear2d(q.astype(np.float32), out_size=[8, 8], scales=[2.0, 2.0]))
    np.testing.assert_array_equal(got, want.astype(np.int8))


# -- bicubic: float32 (PT2E leaves it float) ------------------------------------------------------

BICUBIC = CASES + [
    ((2, 3, 7, 5), (3, 17), True, None),          # down along H, up along W
    ((1, 2, 6, 10), (9, 15), False, [1.5, 1.5]),  # fractional scale factors
    ((3, 1, 2, 2), (8, 8), False, None),          # every tap clamped at a border somewhere
]


@pytest.mark.parametrize("shape,size,ac,scales", BICUBIC)
def test_bicubic_reference_is_atens(shape, size, ac, scales):
    """The taps and the order of the sums are ATen's: equal to F.interpolate(mode="bicubic") to
    float rounding (a few ulp of the largest value)."""
    from vkq.ops.resize import upsample_bicubic2d
    x = R.standard_normal(shape).astype(np.float32)
    want = _torch(torch.from_numpy(x), size, ac, scales, "bicubic").numpy()
    got = upsample_bicubic2d(x, out_size=None if scales else list(size), align_corners=ac, scales=scales)
    assert got.shape == want.shape == shape[:2] + tuple(size)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-6)


@pytest.mark.parametrize("shape,size,ac,scales", BICUBIC)
def test_bicubic(device, shape, size, ac, scales):
    x = R.standard_normal(shape).astype(np.float32)
    out = shape[:2] + size
    attrs = {"out_size": None if scales else list(size), "align_corners": ac, "scales": scales}
    prog = single_op_program("upsample_bicubic2d", [("x", spec(shape))], [("y", spec(out))], attrs)
    got = VulkanExecutor(prog, device)(x)
    np.testing.assert_allclose(got, run_reference(prog, x), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, _torch(torch.from_numpy(x), size, ac, scales, "bicubic").numpy(),
                               rtol=0, atol=4e-6)


def test_bicubic_model_runs_on_vulkan(device):
    """A super-resolution net that upsamples its input bicubically (VDSR, SRCNN) and a decoder that
    resizes features that way: the bicubic resizes run on Vulkan (they ran through torch on the
    CPU), in float between the int8 convs, and the program agrees with PT2E's eager output."""
    import vkq
    n = torch.nn

    class SR(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.body = n.Sequential(n.Conv2d(3, 16, 3, padding=1), n.ReLU(), n.Conv2d(16, 3, 3, padding=1))
                self.skip = n.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            up = F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
            y = up + self.body(up)
            z = F.interpolate(torch.relu(self.skip(x)), size=(27, 19), mode="bicubic", align_corners=True)
            return y, z

    x = torch.randn(1, 3, 13, 10)
    gm = vkq.quantize(SR().eval(), (x,), [torch.randn(1, 3, 13, 10) for _ in range(2)])
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    ops = [node.op for node in prog.program.nodes]
    assert ops.count("upsample_bicubic2d") == 2 and not prog.fallback_ops, (ops, prog.fallback_ops)
    got = prog(x.numpy())
    with torch.no_grad():
        want = gm(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=1e-4 * np.abs(w.numpy()).max())


# -- nearest: a gather whose index map is made for the shape at hand --------------------------------

NEAREST = [   # in shape, mode, scales or out size
    ((2, 3, 5, 7), "nearest", [2.0, 2.0]), ((1, 5, 4, 9), "nearest", [1.5, 3.0]),
    ((1, 2, 13, 6), "nearest-exact", [0.5, 2.25]), ((2, 1, 3, 3), "nearest", (7, 4)),
    ((1, 6, 9, 10), "nearest-exact", (4, 31)), ((3, 4, 6), "nearest", [1.7, 2.0]),
]


def test_nearest_reference_is_atens_index_map():
    """nearest_source reproduces ATen's nearest_idx (its 1x and 2x shortcuts, float32 floors)
    and nearest_exact_idx for scale factors and sizes, odd and fractional ones included."""
    from vkq.ops.resize import upsample_nearest2d as nearest
    for h, w in [(1, 1), (3, 5), (13, 17), (32, 9)]:
        x = torch.arange(2 * h * w, dtype=torch.float32).reshape(1, 2, h, w)
        for mode in ("nearest", "nearest-exact"):
            for sf in (1, 2, 3, 0.5, 1.5, 2.25, 0.3, 1.7, 0.77):
                if int(h * sf) < 1 or int(w * sf) < 1:
                    continue
                want = F.interpolate(x, scale_factor=sf, mode=mode).numpy()
                np.testing.assert_array_equal(nearest(x.numpy(), scales=[sf, sf], exact=mode != "nearest"), want)
            for size in [(1, 1), (5, 3), (2 * h, 2 * w), (h + 3, 3 * w + 1)]:
                want = F.interpolate(x, size=size, mode=mode).numpy()
                np.testing.assert_array_equal(nearest(x.numpy(), out_size=list(size), exact=mode != "nearest"), want)


@pytest.mark.parametrize("shape,mode,how", NEAREST)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_nearest(device, shape, mode, how, dtype):
    """upsample_nearest2d on the device equals torch's interpolate, int8 in either layout (one
    quantization in and out) and float32, bit for bit."""
    scales = list(how) if isinstance(how, list) else None
    size = tuple(int(shape[-2 + i] * scales[i]) for i in range(2)) if scales else how
    attrs = {"scales": scales, "exact": mode == "nearest-exact", "out_size": None if scales else list(size)}
    out = shape[:-2] + size
    if dtype == "int8":
        x, layout = random_int8(R, shape), "4H4W" if len(shape) == 3 else "4W4C"
        ins, outs = [("x", spec(shape, "int8", layout, 0.1, 3))], [("y", spec(out, "int8", "4H4W", 0.1, 3))]
    else:
        x = R.standard_normal(shape).astype(np.float32)
        ins, outs = [("x", spec(shape))], [("y", spec(out))]
    prog = single_op_program("upsample_nearest2d", ins, outs, attrs)
    got = VulkanExecutor(prog, device)(x)
    t = torch.from_numpy(x.astype(np.float32))[None] if len(shape) == 3 else torch.from_numpy(x.astype(np.float32))
    kw = {"scale_factor": scales} if scales else {"size": size}
    want = F.interpolate(t, mode=mode, **kw).numpy().reshape(out).astype(x.dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, run_reference(prog, x))


# -- antialiased resizing: interpolate(antialias=True), torchvision's Resize on tensors -----------------

AA_CASES = [   # in shape, out size, align_corners, scales
    ((1, 3, 37, 29), (9, 7), False, None),          # down by ~4: wide filters
    ((2, 2, 20, 20), (7, 13), True, None),
    ((1, 1, 8, 9), (16, 20), False, None),          # up: the plain filters
    ((1, 2, 64, 50), (21, 50), False, None),        # one dim kept
    ((1, 2, 30, 24), (10, 8), False, [1 / 3, 1 / 3]),
]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("shape,size,ac,scales", AA_CASES)
def test_antialias(device, shape, size, ac, scales, mode):
    """ATen's antialias taps (filters widened by the downscale, normalized) and order of the sums:
    the reference equals F.interpolate(antialias=True) to float rounding, the device the reference."""
    x = R.standard_normal(shape).astype(np.float32)
    kw = {"scale_factor": scales} if scales else {"size": size}
    want = F.interpolate(torch.from_numpy(x), mode=mode, antialias=True, align_corners=ac, **kw).numpy()
    attrs = {"mode": mode, "out_size": None if scales else list(size), "align_corners": ac, "scales": scales}
    prog = single_op_program("upsample_antialias2d", [("x", spec(shape))], [("y", spec(want.shape))], attrs)
    ref = run_reference(prog, x)
    assert ref.shape == want.shape == shape[:2] + tuple(size)
    np.testing.assert_allclose(ref, want, rtol=0, atol=2e-6)
    np.testing.assert_allclose(VulkanExecutor(prog, device)(x), ref, rtol=0, atol=1e-6)


def test_antialiased_downscale_past_the_loop_budget_runs_on_the_cpu(device, monkeypatch):
    """A value of a large antialiased downscale sums ny x nx taps in nested loops; past the loop
    budget (llvmpipe stops after 65535 iterations silently: a 1024 x 1024 -> 8 x 8 bicubic
    resize lost source rows; scaled down here) the node runs on the CPU, warned, same values."""
    from vkq.vkinfo import DeviceInfo
    x = R.standard_normal((1, 2, 37, 29)).astype(np.float32)
    attrs = {"mode": "bilinear", "out_size": [9, 7], "align_corners": False, "scales": None}
    prog = single_op_program("upsample_antialias2d", [("x", spec(x.shape))], [("y", spec((1, 2, 9, 7)))], attrs)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: 60))     # taps 9 x 9: 9 * 10 + 8
    with pytest.warns(UserWarning, match=r"runs on the CPU.*resample: 9 x 9 taps a value: 98 loop iterations"):
        ex = VulkanExecutor(prog, device)
    np.testing.assert_array_equal(ex(x), run_reference(prog, x))
    assert list(ex.cpu_reasons) == [0]


def test_preprocessing_resize_runs_on_vulkan(device):
    """A model that resizes its input itself (antialiased, as torchvision's Resize does on tensors)
    and normalizes it before a CNN: the resize runs on Vulkan (it ran through torch on the CPU)."""
    import vkq
    n = torch.nn

    class Preprocessed(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.net = n.Sequential(n.Conv2d(3, 8, 3, 2, 1), n.ReLU(), n.AdaptiveAvgPool2d(1), n.Flatten(),
                                        n.Linear(8, 5))

        def forward(self, x):
            x = F.interpolate(x, size=(32, 32), mode="bilinear", antialias=True, align_corners=False)
            return self.net((x - 0.45) / 0.225)

    x = torch.rand(1, 3, 75, 61)
    gm = vkq.quantize(Preprocessed().eval(), (x,), [torch.rand(1, 3, 75, 61) for _ in range(2)])
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    assert "upsample_antialias2d" in [node.op for node in prog.program.nodes] and not prog.fallback_ops, \
        prog.fallback_ops
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(prog(x.numpy()), want, rtol=0, atol=1e-3 * np.abs(want).max())


# -- grid_sample: float32 sampling at a grid of normalized coordinates -------------------------------

GRID_CASES = [   # x shape, (Ho, Wo)
    ((1, 3, 7, 9), (5, 11)), ((2, 5, 4, 6), (8, 3)), ((1, 1, 1, 5), (2, 4)), ((2, 2, 13, 1), (3, 3)),
]


def _grid_inputs(shape, out, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (shape[0], *out, 2)).astype(np.float32)    # beyond the image too
    grid.reshape(-1, 2)[:4] = [[-1, -1], [1, 1], [0, 0], [-1, 1]]              # its corners and centre
    return x, grid


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("shape,out", GRID_CASES)
def test_grid_sample(device, shape, out, mode, padding, align):
    """Every mode (bilinear, nearest) and padding (zeros, border, reflection), align_corners both
    ways, points beyond the image: the reference equals torch's grid_sample to float rounding and
    the device the reference."""
    from vkq.ops.resize import GRID_MODES, GRID_PADDING, grid_sample
    x, grid = _grid_inputs(shape, out, seed=len(shape) + mode + 3 * padding)
    want = F.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode=GRID_MODES[mode],
                         padding_mode=GRID_PADDING[padding], align_corners=align).numpy()
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    ref = grid_sample(x, grid, **attrs)
    np.testing.assert_allclose(ref, want, rtol=0, atol=2e-6)
    prog = single_op_program("grid_sample", [("x", spec(shape)), ("grid", spec(grid.shape))],
                             [("y", spec(want.shape))], attrs)
    np.testing.assert_allclose(VulkanExecutor(prog, device)(x, grid), ref, rtol=0, atol=2e-6)
    assert np.count_nonzero(want) > want.size // 2


def test_spatial_transformer_runs_on_vulkan(device):
    """A spatial transformer (a localisation net's theta -> affine_grid -> grid_sample, then a
    classifier): affine_grid becomes ATen's bmm by a constant base grid (decompose_ops) and
    grid_sample a kernel, so nothing runs on the CPU (both ran through torch there); the program
    agrees with PT2E's eager output."""
    import vkq
    n = torch.nn

    class STN(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.loc = n.Sequential(n.Conv2d(1, 8, 5), n.MaxPool2d(2), n.ReLU(), n.Conv2d(8, 10, 5), n.MaxPool2d(2),
                                        n.ReLU())
                self.fc = n.Sequential(n.Linear(160, 32), n.ReLU(), n.Linear(32, 6))
                self.cls = n.Sequential(n.Conv2d(1, 8, 3), n.ReLU(), n.AdaptiveAvgPool2d(1), n.Flatten(), n.Linear(8, 10))

        def forward(self, x):
            theta = self.fc(self.loc(x).flatten(1)).view(-1, 2, 3) * 0.2 + torch.tensor([[1.0, 0, 0], [0, 1, 0]])
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            return self.cls(F.grid_sample(x, grid, align_corners=False))

    x = torch.randn(2, 1, 28, 28)
    gm = vkq.quantize(STN().eval(), (x,), [torch.randn(2, 1, 28, 28) for _ in range(2)])
    prog = vkq.CompiledProgram(vkq.compile(gm, (x,)).program, device)
    ops = [node.op for node in prog.program.nodes]
    assert "grid_sample" in ops and "torch_op" not in ops and not prog.fallback_ops, (ops, prog.fallback_ops)
    got = prog(x.numpy())
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())
