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


def _torch(x, size, ac, scales):
    kw = {"scale_factor": scales} if scales else {"size": size}
    return F.interpolate(x, mode="bilinear", align_corners=ac, **kw)


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
def test_int8(device, shape, size, ac, scales, layouts):
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
