"""linear_int4 and linear_8da4w: int4 group-wise weights (vkq/int4.py) x float or per-row
dynamic int8 activations.

On every test device both ops equal their numpy references bit for bit: the GEMV (M = 1), the
row-blocked kernel (M = 3; float x with K not a multiple of 4 at any M) and the tiled GEMM
(M > 4: 5, 9, 13, 128, with partial row and column tiles), symmetric weights (one zero point), per-group zero
points (ZERO), GGUF Q4_1's offsets (OFFSET), the integer dot product forced on and off (8da4w),
storage-buffer and texel loads, K a multiple of 4 (VEC4) or not, the last group partial. The
references themselves are checked against float math on the dequantized weights."""
import numpy as np
import pytest

from oputil import assert_same, single_op_program, spec
from vkq.device import get_device
from vkq.executor import VulkanExecutor, run_reference
from vkq.int4 import GroupWeights, dequantize, pack, quantize_groups
from vkq.ops.linear import quantize_rows
from vkq.ops.linear_int4 import Int4NodeError, int4_constants, node_attrs, reference_8da4w, reference_int4

OPS = ("linear_int4", "linear_8da4w")
# (M, K, N, G): odd N, a partial last group (200 = 3 x 64 + 8; 90 = 2 x 32 + 26, not a multiple of 4);
# M = 13: the GEMM with a partial row tile and a partial column tile; M = 9, K = 90: the GEMM for
# 8da4w, the row-blocked kernel for float x (K % 4 != 0)
SHAPES = [(1, 96, 37, 32), (3, 200, 37, 64), (3, 90, 13, 32), (13, 200, 37, 64), (9, 90, 13, 32)]
# the layer shapes and the row-blocked M = 128, in one device mode each
LARGE = [(1, 576, 577, 32), (128, 96, 37, 32), (3, 1536, 40, 32), (1, 300, 21, 256), (5, 576, 1536 + 5, 128)]


@pytest.fixture(params=["mad", "dot", "mad-texel", "dot-texel"])
def int4_device(device, request):
    """The device with the integer dot product forced on ("dot") or off, reading the weights
    from storage buffers or as texels ("-texel")."""
    return get_device(device.info, dot_product=request.param.startswith("dot"),
                      texel_loads=request.param.endswith("texel"))


def weights(rng, n, k, g, kind):
    """GroupWeights of a kind: "sym" (zero 8), "zero" (torchao-style asymmetric, zero points
    per group), "offset" (GGUF Q4_1: zero 0, an offset a group), "q8" (GGUF Q8_0: 8-bit groups)."""
    w = rng.normal(0, 1, (n, k)).astype(np.float32) + (0.5 if kind != "sym" else 0)
    if kind == "q8":
        ng = -(-k // g)
        q = rng.integers(-128, 128, (n, ng * g)).astype(np.int8)
        q[:, k:] = 0
        return GroupWeights(n, k, g, q, rng.uniform(0.001, 0.01, (n, ng)).astype(np.float32),
                            np.zeros((n, ng), np.int32), bits=8)
    if kind == "offset":
        ng = -(-k // g)
        u = rng.integers(0, 16, (n, ng * g))
        u[:, k:] = 0
        return GroupWeights(n, k, g, pack(u), rng.uniform(0.01, 0.1, (n, ng)).astype(np.float32),
                            np.zeros((n, ng), np.int32), rng.normal(-0.4, 0.2, (n, ng)).astype(np.float32))
    return quantize_groups(w, g, kind == "sym")


def program(op, m, k, gw, bias):
    consts = {name: (spec(a.shape, str(a.dtype)), a) for name, a in int4_constants(gw, bias).items()}
    return single_op_program(op, [("x", spec((m, k)))], [("y", spec((m, gw.n)))], node_attrs(gw), consts)


def run_exact(dev, prog, x):
    got, ref = VulkanExecutor(prog, dev)(x), run_reference(prog, x)
    assert_same((got,), (ref,))
    assert len(np.unique(ref)) > ref.size // 2, "a degenerate case"
    return ref


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", ["sym", "zero", "offset", "q8"])
@pytest.mark.parametrize("m,k,n,g", SHAPES)
def test_exact_on_device(int4_device, op, kind, m, k, n, g):
    if int4_device.dot_product and op == "linear_int4":
        pytest.skip("linear_int4 has no dot-product variant")
    rng = np.random.default_rng(m * 1000 + k + n)
    gw = weights(rng, n, k, g, kind)
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    x[0, :3] = (0.0, -7.5, 6.25)
    run_exact(int4_device, program(op, m, k, gw, rng.normal(0, 1, n)), x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", ["sym", "zero"])
@pytest.mark.parametrize("m,k,n,g", LARGE)
def test_exact_on_device_large(device, op, kind, m, k, n, g):
    rng = np.random.default_rng(m * 1000 + k + n)
    gw = weights(rng, n, k, g, kind)
    run_exact(device, program(op, m, k, gw, rng.normal(0, 1, n)), rng.normal(0, 1, (m, k)).astype(np.float32))


@pytest.mark.parametrize("op", OPS)
def test_batched_input_and_nonfinite_row(device, op):
    """x (2, 3, K): rows flattened; a row holding an infinity gives NaN or inf, as the reference."""
    rng = np.random.default_rng(7)
    k, n, g = 128, 19, 64
    gw = weights(rng, n, k, g, "zero")
    consts = {name: (spec(a.shape, str(a.dtype)), a) for name, a in int4_constants(gw).items()}
    prog = single_op_program(op, [("x", spec((2, 3, k)))], [("y", spec((2, 3, n)))], {"group_size": g}, consts)
    x = rng.normal(0, 2, (2, 3, k)).astype(np.float32)
    x[1, 2, 5] = np.inf
    ref = run_exact(device, prog, x)
    assert not np.isfinite(ref[1, 2]).any() and np.isfinite(ref[0]).all()


@pytest.mark.parametrize("kind", ["sym", "zero", "offset", "q8"])
def test_references_against_float(kind):
    """linear_int4 is x @ dequantize(W)^T + b up to float rounding; linear_8da4w is the same on
    x's int8 values (quantize_rows dequantized), up to float rounding."""
    rng = np.random.default_rng(11)
    m, k, n, g = 5, 200, 23, 64
    gw = weights(rng, n, k, g, kind)
    b = rng.normal(0, 1, n).astype(np.float32)
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    consts = list(int4_constants(gw, b).values())
    wd = dequantize(gw).astype(np.float64)
    want = x.astype(np.float64) @ wd.T + b
    attrs = node_attrs(gw)
    got = reference_int4(x, *consts, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    q, s, zp = quantize_rows(x)
    xd = (q.astype(np.float64) - zp[:, None]) * s[:, None]
    np.testing.assert_allclose(reference_8da4w(x, *consts, **attrs), xd @ wd.T + b, rtol=1e-5, atol=1e-4)
    assert np.abs(reference_8da4w(x, *consts, **attrs) - want).max() > 1e-3   # x was quantized


def test_bad_nodes_are_named_errors():
    rng = np.random.default_rng(0)
    gw = quantize_groups(rng.normal(0, 1, (4, 64)).astype(np.float32), 32)
    consts = list(int4_constants(gw).values())
    with pytest.raises(Int4NodeError, match="group_size"):
        reference_int4(np.zeros((1, 64), np.float32), *consts, group_size=48)
    with pytest.raises(Int4NodeError, match="K = 96"):
        reference_int4(np.zeros((1, 96), np.float32), *consts, group_size=32)
    q8 = GroupWeights(4, 64, 32, np.zeros((4, 64), np.int8), np.ones((4, 2), np.float32),
                      np.zeros((4, 2), np.int32), bits=8)
    qw, s, z, b = int4_constants(q8).values()
    assert qw.shape == (4, 16) and qw.dtype == np.int32
    with pytest.raises(Int4NodeError, match="zero points 0 and no offset"):
        reference_int4(np.zeros((1, 64), np.float32), qw, s, z, b, np.ones((4, 2), np.float32), group_size=32, bits=8)
    with pytest.raises(Int4NodeError, match="int8 weights for K = 64"):
        reference_int4(np.zeros((1, 64), np.float32), *consts, group_size=32, bits=8)
