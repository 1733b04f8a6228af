"""Ops on ids and masks (vkq/ops/logic.py) and the int32 add/sub/mul: Vulkan against the numpy
reference bit for bit, broadcast, on odd shapes, on every test device."""
import math

import numpy as np
import pytest

from oputil import single_op_program, spec
from vkq.executor import VulkanExecutor, run_reference
from vkq.registry import cpu_reason, get_op

R = np.random.default_rng(5)


def ints(*shape, lo=-50, hi=50):
    return R.integers(lo, hi, shape).astype(np.int32)


def bools(*shape):
    return (R.random(shape) > 0.4).astype(np.int32)


def floats(*shape):
    x = R.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::7] = 0.0
    return x


def run(device, op, inputs, attrs, out_shape, out_dtype, constants=None):
    consts = {f"c{i}": (spec(a.shape, str(a.dtype)), a) for i, a in enumerate(constants or [])}
    prog = single_op_program(op, [(f"x{i}", spec(a.shape, str(a.dtype))) for i, a in enumerate(inputs)],
                             [("y", spec(out_shape, out_dtype))], attrs, consts)
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    got = VulkanExecutor(prog, device)(*inputs)
    ref = run_reference(prog, *inputs)
    np.testing.assert_array_equal(got, ref)
    return ref


CASES = [
    ("eq", [ints(3, 1, 7), ints(5, 7)], {}, (3, 5, 7), "int32"),
    ("lt", [floats(2, 9, 4)], {"scalar": 0.25}, (2, 9, 4), "int32"),
    ("ge", [ints(13), ints(2, 1)], {}, (2, 13), "int32"),
    ("ne", [floats(3, 5), floats(1, 5)], {}, (3, 5), "int32"),
    ("bitwise_and", [bools(1, 1, 11, 1), bools(2, 1, 1, 11)], {}, (2, 1, 11, 11), "int32"),   # BERT's mask
    ("bitwise_or", [bools(5, 3), bools(3)], {}, (5, 3), "int32"),
    ("bitwise_xor", [ints(7, 3)], {"scalar": 5}, (7, 3), "int32"),
    ("logical_not", [bools(4, 9)], {}, (4, 9), "int32"),
    ("add", [ints(3, 7), ints(7)], {}, (3, 7), "int32"),
    ("sub", [ints(2, 11)], {"scalar": 1}, (2, 11), "int32"),
    ("mul", [ints(2, 1, 5), ints(3, 1)], {}, (2, 3, 5), "int32"),
    ("maximum", [ints(2, 1, 5), ints(3, 1)], {}, (2, 3, 5), "int32"),
    ("minimum", [ints(4, 7)], {"scalar": -3}, (4, 7), "int32"),
    ("cast", [bools(2, 1, 1, 11)], {"dtype": "float32"}, (2, 1, 1, 11), "float32"),
    ("cast", [floats(3, 17) * 9], {"dtype": "int32"}, (3, 17), "int32"),
    ("cast", [ints(5, 5, lo=-1, hi=2)], {"dtype": "bool"}, (5, 5), "int32"),
    ("cast", [floats(5, 5)], {"dtype": "bool"}, (5, 5), "int32"),
    ("cast", [ints(2, 9)], {"dtype": "int32"}, (2, 9), "int32"),
    ("where", [bools(2, 1, 7), floats(3, 7), floats(1)], {}, (2, 3, 7), "float32"),
    ("where", [bools(5), ints(5), ints(1)], {}, (5,), "int32"),
]


@pytest.mark.parametrize("op,inputs,attrs,out_shape,out_dtype", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_word_op(device, op, inputs, attrs, out_shape, out_dtype):
    ref = run(device, op, inputs, attrs, out_shape, out_dtype)
    assert len(np.unique(ref)) > 1


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_every_comparison(device, op, dtype):
    """Each comparison on each dtype (its own shader variant), broadcast and against a scalar,
    with equal operands present so that eq/le/ge differ from lt/gt."""
    make = (lambda *s: ints(*s, lo=-3, hi=4)) if dtype == "int32" else (lambda *s: np.round(floats(*s) * 2) / 2)
    a, b = make(3, 1, 7), make(5, 7)
    ref = run(device, op, [a, b], {}, (3, 5, 7), "int32")
    np.testing.assert_array_equal(ref, getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                                                    "gt": "greater", "ge": "greater_equal"}[op])(a, b))
    assert 0 < ref.sum() < ref.size
    run(device, op, [a], {"scalar": 0}, (3, 1, 7), "int32")


@pytest.mark.parametrize("op", ["remainder", "floor_divide", "fmod", "trunc_divide"])
def test_floored_division(device, op):
    """int32 remainder and floor division as Python's (and torch's: the remainder takes the
    divisor's sign, the quotient rounds down), fmod as C's (the dividend's sign), every sign
    combination, broadcast and by a scalar; by 0 each gives 0 (torch raises). (No torch here:
    this file runs where torch is not.)"""
    python = {"remainder": lambda x, y: x % y, "floor_divide": lambda x, y: x // y,
              "fmod": lambda x, y: int(math.fmod(x, y)), "trunc_divide": lambda x, y: int(x / y)}[op]
    want = np.vectorize(lambda x, y: python(int(x), int(y)))
    a = np.array([[7, -7, 7, -7, 0, 6, -6, 13, -1, 2 ** 30]], np.int32).repeat(3, 0) * np.int32([[1], [3], [-5]])
    b = np.array([[3], [-4], [7]], np.int32)
    ref = run(device, op, [a, b], {}, a.shape, "int32")
    np.testing.assert_array_equal(ref, want(a, b))
    for scalar in (5, -3):
        ref = run(device, op, [a], {"scalar": scalar}, a.shape, "int32")
        np.testing.assert_array_equal(ref, want(a, scalar))
    zero = run(device, op, [a[:1], np.zeros((1, 1), np.int32)], {}, a[:1].shape, "int32")
    np.testing.assert_array_equal(zero, np.zeros_like(a[:1]))
    extreme = np.int32([[-2 ** 31, 2 ** 31 - 1, -7]])       # INT_MIN by -1 wraps (no trap), as int32 does
    got = run(device, op, [extreme], {"scalar": -1}, extreme.shape, "int32")
    np.testing.assert_array_equal(got, np.int32([[0, 0, 0]]) if op in ("remainder", "fmod") else np.int32([[-2 ** 31, 1 - 2 ** 31, 7]]))


def spread(*shape, lo=-30, hi=30):
    """float32 values of random signs and magnitudes 10^lo .. 10^hi."""
    return (R.choice([-1, 1], shape) * 10.0 ** R.uniform(lo, hi, shape)).astype(np.float32)


@pytest.mark.parametrize("op", ["remainder", "fmod", "floor_divide", "trunc_divide", "copysign"])
def test_float_division_family_bit_for_bit(device, op):
    """float32 fmod exactly (the mantissas' long division: quotients up to 2^200 here), the
    remainder and floor division from it as ATen computes them (the reference is ATen's
    arithmetic in float32 numpy), the trunc of the correctly rounded quotient, and copysign, bit
    for bit: broadcast, against a scalar second and first. floor_divide and trunc_divide are
    exact where |a / b| < 2^20 (Vulkan's division rounds its quotient), so their operands stay there."""
    division = op in ("floor_divide", "trunc_divide")
    if division:
        a, b = np.round(spread(7, 37, lo=-3, hi=5), 2), spread(1, 37, lo=-2, hi=1)
        b[0, :5] = [0.25, -0.5, 1.5, 0.75, -3.0]
        a[0, :5] = b[0, :5] * np.float32([3, -4, 0, 7, -2])      # exact multiples: the quotient an integer
    else:
        a, b = spread(7, 37), spread(1, 37)
    ref = run(device, op, [a, b], {}, a.shape, "float32")
    assert np.isfinite(ref).all() and len(np.unique(ref)) > 100
    if division:
        np.testing.assert_array_equal(ref[0, :5], np.float32([3, -4, 0, 7, -2]))
    for scalar, first in ((0.7, False), (-3.25, False), (2.5, True)):
        run(device, op, [a if not division or not first else a + 1], {"scalar": scalar, "scalar_first": first},
            a.shape, "float32")


def test_float_trunc_divide_where_the_quotient_rounds_to_an_integer(device):
    """torch.div(a, b, rounding_mode="trunc") of floats truncates the correctly rounded quotient:
    where the exact a / b lies just below an integer n (within half the gap below it, or on the
    tie), torch gives n, where Vulkan's division (<= 2.5 ulp) may give n - 1 or n. Dividends one
    ulp around n * b, for quotients 0 .. 2^20 and powers of two among them (whose gap below is
    half), every sign: bit for bit against numpy's IEEE division, and some do round up."""
    n = np.concatenate([np.arange(1, 40), 2.0 ** np.arange(1, 20), 2.0 ** np.arange(1, 20) + 1, [1e5 + 3, 999999]])
    b = np.float32(R.uniform(0.01, 100, (1, n.size)) * R.choice([-1, 1], (1, n.size)))
    a = np.float32(n * b)
    a = np.concatenate([a, np.nextafter(a, np.float32(np.inf)), np.nextafter(a, np.float32(-np.inf)), -a])
    got = run(device, "trunc_divide", [a, b], {}, a.shape, "float32")
    exact = np.trunc(a.astype(np.float64) / b)
    assert (got != exact).sum() > 5          # the correctly rounded quotient reached the integer
    np.testing.assert_array_equal(got, np.trunc(a / b))


@pytest.mark.parametrize("op", ["abs", "sign"])
def test_int_abs_and_sign(device, op):
    """int32 abs and sign on word_ops (T5's and DeBERTa's relative position buckets take them of
    position differences): every sign, 0, and INT_MIN, whose abs wraps to itself as torch's
    int abs does. (Written out: no torch here.)"""
    x = np.int32([[-2 ** 31, -(2 ** 31 - 1), -7, -1, 0, 1, 5, 2 ** 31 - 1], [3, -3, 0, 0, -12, 12, 9, -9]])
    want = {"abs": [[-2 ** 31, 2 ** 31 - 1, 7, 1, 0, 1, 5, 2 ** 31 - 1], [3, 3, 0, 0, 12, 12, 9, 9]],
            "sign": [[-1, -1, -1, -1, 0, 1, 1, 1], [1, -1, 0, 0, -1, 1, 1, -1]]}[op]
    got = run(device, op, [x], {}, x.shape, "int32")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.int32(want))
    big = R.integers(-40, 40, (3, 37)).astype(np.int32)          # a shape over several invocations
    np.testing.assert_array_equal(run(device, op, [big], {}, big.shape, "int32"),
                                  np.abs(big) if op == "abs" else np.sign(big))


def test_reference_semantics():
    assert get_op("cast").reference(np.array([-2.7, 2.7, 0.0], np.float32), dtype="int32").tolist() == [-2, 2, 0]
    assert get_op("sub").reference(np.array([1, 0], np.int32), scalar=1, scalar_first=False).dtype == np.int32
    big = np.array([2 ** 31 - 1], np.int32)
    assert get_op("add").reference(big, scalar=1).tolist() == [-2 ** 31]      # int32 wraps, as the shader


def test_embedding(device):
    table = floats(37, 13)
    ids = R.integers(0, 37, (2, 11)).astype(np.int32)
    prog = single_op_program("embedding", [("ids", spec(ids.shape, "int32"))], [("y", spec((2, 11, 13)))], {},
                             {"t": (spec(table.shape), table)})
    prog.nodes[0].inputs = ["t", "ids"]
    got = VulkanExecutor(prog, device)(ids)
    np.testing.assert_array_equal(got, table[ids])
    np.testing.assert_array_equal(run_reference(prog, ids), got)


def test_mixed_dtypes_decline():
    from vkq.program import Node
    node = Node("add", ["a", "b"], ["c"], {})
    tensors = {"a": spec((3,), "int32"), "b": spec((3,)), "c": spec((3,))}
    assert "dtypes" in cpu_reason(node, tensors)
    node = Node("div", ["a", "b"], ["c"], {})
    assert cpu_reason(node, {t: spec((3,), "int32") for t in "abc"}) is not None


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("xs,index_shape,dim", [((3, 17), (3, 11), 1), ((5, 4, 7), (2, 9, 7), 1),
                                                ((6, 3, 5), (4, 3, 2), 0), ((2, 3, 13), (2, 2, 29), -1)])
def test_gather(device, dtype, xs, index_shape, dim):
    """torch.gather by an index the device computes (RoBERTa's token types at its position ids):
    bit for bit with torch's definition (out[c] = x[c with c[dim] = index[c]], written out here
    element by element) on every dim, the index smaller than x off `dim` (torch allows it),
    repeated indices, and two out of range (clamped to the nearest, as embedding)."""
    x = floats(*xs) if dtype == "float32" else ints(*xs, lo=-1000, hi=1000)
    size, d = xs[dim], dim % len(xs)

    def torch_gather(index):
        out = np.empty(index.shape, x.dtype)
        for c in np.ndindex(*index.shape):
            out[c] = x[c[:d] + (min(max(index[c], 0), size - 1),) + c[d + 1:]]
        return out
    index = R.integers(0, size, index_shape).astype(np.int32)
    got = run(device, "gather", [x, index], {"dim": dim}, index_shape, dtype)
    np.testing.assert_array_equal(got, torch_gather(index))
    assert len(np.unique(index)) < index.size                     # repeats
    wild = index.copy()
    wild.reshape(-1)[:2] = [-3, size + 4]
    got = run(device, "gather", [x, wild], {"dim": dim}, index_shape, dtype)
    np.testing.assert_array_equal(got, torch_gather(wild))
    c = np.unravel_index(1, index_shape)                             # the index past the end reads the last
    assert got[c] == x[c[:d] + (size - 1,) + c[d + 1:]]


@pytest.mark.parametrize("src,dst", [("int32", "int32"), ("int32", "float32"), ("float32", "float32")])
@pytest.mark.parametrize("shape,dim", [((2, 37), 1), ((3, 29, 5), 1), ((7, 2, 3), 0), ((301,), 0)])
def test_cumsum(device, src, dst, shape, dim):
    """Cumulative sums along the first, a middle and the last dim: int32 bit for bit (a bool mask
    too, as RoBERTa's position ids count it); an int32 count as floats bit for bit; floats
    (compensated on the device; torch and the reference sum in double) within one rounding of
    the running sum's magnitude."""
    x = (bools(*shape) if src == "int32" and dst == "float32" else ints(*shape) if src == "int32"
         else floats(*shape) * 100)
    prog = single_op_program("cumsum", [("x", spec(shape, src))], [("y", spec(shape, dst))],
                             {"dim": dim, "dtype": dst}, {})
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    got = VulkanExecutor(prog, device)(x)
    ref = run_reference(prog, x)
    exact = np.cumsum(x.astype(np.float64 if src == "float32" else np.int64), axis=dim)
    if src == "float32":
        np.testing.assert_array_equal(ref, exact.astype(np.float32))
        scale = np.cumsum(np.abs(x).astype(np.float64), axis=dim)
        assert np.all(np.abs(got.astype(np.float64) - exact) <= 2 * np.finfo(np.float32).eps * scale + 1e-30)
    else:
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got, exact.astype(dst))
    assert got.dtype == np.dtype(dst) and len(np.unique(got)) > 3


def test_cumsum_wraps_and_falls_back_past_the_loop_budget(device, monkeypatch):
    """int32 sums wrap as the reference says (ids are int64 in torch, int32 here); a row longer
    than a lane's loop budget (llvmpipe: 65535, scaled down here) runs on the CPU, warned."""
    import warnings
    from vkq.vkinfo import DeviceInfo
    x = np.array([[2 ** 30, 2 ** 30, 5, -7]], np.int32)
    ref = run(device, "cumsum", [x], {"dim": 1, "dtype": "int32"}, (1, 4), "int32")
    assert ref.tolist() == [[2 ** 30, -2 ** 31, -2 ** 31 + 5, -2 ** 31 - 2 + 2 ** 32]]
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: 100))
    x = ints(2, 101)
    prog = single_op_program("cumsum", [("x", spec(x.shape, "int32"))], [("y", spec(x.shape, "int32"))],
                             {"dim": 1, "dtype": "int32"}, {})
    with pytest.warns(UserWarning, match="cumsum.*runs on the CPU.*loop budget"):
        ex = VulkanExecutor(prog, device)
    np.testing.assert_array_equal(ex(x), np.cumsum(x, axis=1))
    assert list(ex.cpu_reasons) == [0]


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,dim,keepdim", [((3, 21, 5, 7), 1, False), ((2, 1000), -1, True), ((5, 3, 4), 0, False),
                                               ((7, 9), None, False), ((4, 6), None, True),
                                               ((3, 49157), -1, False), ((2, 1500, 3), 1, True), ((41, 37), None, False)])
def test_argmax_argmin(device, op, dtype, shape, dim, keepdim):
    """The first index of the largest (smallest) value along a dim or over everything, as numpy
    and torch give it: ties planted (small integers), and with floats a NaN, which counts as the
    largest and the smallest. Rows of 1024 or more (at most 64 of them) take a workgroup a row
    (ROW): there ties sit in other lanes and halves of the tree, and a row holds two NaNs."""
    x = ints(*shape, lo=-3, hi=4) if dtype == "int32" else np.round(floats(*shape) * 2) / 2
    if dtype == "float32":
        x.reshape(-1)[5] = np.nan
        if x.size > 1500:
            x.reshape(-1)[x.size - 7] = np.nan   # a NaN late in the last row (and over all: a second one)
    want = getattr(np, op)(x.reshape(-1) if dim is None else x, axis=0 if dim is None else dim)
    out_shape = np.shape(want)
    if keepdim:
        out_shape = (1,) * len(shape) if dim is None else np.expand_dims(want, dim % len(shape)).shape
    got = run(device, op, [x], {"dim": dim, "keepdim": keepdim}, out_shape, "int32")
    np.testing.assert_array_equal(got.reshape(np.shape(want)), want)
    assert len(np.unique(got)) > 1 or got.size <= 2


# ---------------------------------------------------------------- tensors made from a shape (creation.py)

@pytest.mark.parametrize("shape,value,dtype", [((3, 1, 17), -1e4, "float32"), ((5, 7), float("-inf"), "float32"),
                                               ((2, 9, 1), 1, "bool"), ((13,), -7, "int32"), ((4, 3), 0, "float32")])
def test_full(device, shape, value, dtype):
    """zeros / ones / full(-inf) of a shape known at run time: every word the value's."""
    got = run(device, "full", [], {"shape": list(shape), "value": value, "dtype": dtype}, shape,
              "float32" if dtype == "float32" else "int32")
    want = np.full(shape, value, np.float32 if dtype == "float32" else np.int32)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


@pytest.mark.parametrize("start,end,step,dtype,want", [
    (0, 37, 1, "int32", list(range(37))),
    (3, 20, 4, "int32", [3, 7, 11, 15, 19]),
    (5, -6, -3, "int32", [5, 2, -1, -4]),
    (0, 29, 1, "float32", list(range(29))),
    (-8, 9.5, 2, "float32", [-8, -6, -4, -2, 0, 2, 4, 6, 8]),       # a fractional end, as torch: ceil
    (2 ** 31 - 2, 2 ** 31 + 2, 1, "int32", [2 ** 31 - 2, 2 ** 31 - 1, -2 ** 31, -2 ** 31 + 1]),  # int64 ids wrap
])
def test_arange(device, start, end, step, dtype, want):
    """torch.arange's values (written out here) on both paths, counting down and past int32."""
    got = run(device, "arange", [], {"start": start, "end": end, "step": step, "dtype": dtype}, (len(want),),
              dtype)
    np.testing.assert_array_equal(got, np.array(want, np.int64).astype(np.int32) if dtype == "int32"
                                  else np.array(want, np.float32))


def test_arange_with_a_fractional_step_runs_its_reference():
    """float32(start + i * step) in float64, as torch computes it: the kernel (int32 counting)
    declines, so the reference runs it on the CPU, without torch."""
    from vkq.program import Node
    node = Node("arange", [], ["y"], {"start": 0.1, "end": 1.0, "step": 0.3, "dtype": "float32"})
    assert "fractional" in cpu_reason(node, {"y": spec((3,))})
    got = get_op("arange").reference(start=0.1, end=1.0, step=0.3, dtype="float32")
    np.testing.assert_array_equal(got, np.array([0.1, 0.1 + 0.3, 0.1 + 2 * 0.3], np.float64).astype(np.float32))
    assert get_op("arange").reference(start=4, end=4, step=1, dtype="int32").shape == (0,)


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("shape,diagonal,dtype", [((9, 9), 0, "int32"), ((2, 3, 7, 11), 1, "float32"),
                                                  ((13, 5), -2, "float32"), ((3, 6, 4), 2, "int32")])
def test_triangle(device, op, shape, diagonal, dtype):
    """A causal mask's triangle (tril of ones, triu(1) of -inf) over the last two dims of a batch
    of matrices, wide and tall, the diagonal shifted both ways; checked element by element."""
    x = floats(*shape) + 5 if dtype == "float32" else ints(*shape, lo=1, hi=50)
    got = run(device, op, [x], {"diagonal": diagonal}, shape, dtype)
    for c in np.ndindex(*shape):
        keep = c[-1] - c[-2] <= diagonal if op == "tril" else c[-1] - c[-2] >= diagonal
        assert got[c] == (x[c] if keep else 0)
    assert 0 < np.count_nonzero(got) < got.size


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("xshape,index_shapes", [
    ((3, 11), [(3, 1, 1, 1), (1, 1, 1, 11)]),          # transformers' padding mask at arange indices
    ((7, 5, 3), [(2, 9)]),                             # rows of a table (the rest of x moved whole)
    ((4, 6, 5, 2), [(5, 1), (1, 3), (5, 3)]),          # three indices broadcast together
])
def test_index_by_computed_indices(device, dtype, xshape, index_shapes):
    """x[i0, i1, ...] by index tensors the device computed, as torch's advanced indexing (written
    out here element by element): broadcast, a negative index counting from the end, and one
    past the end read from the last (torch raises there)."""
    x = floats(*xshape) if dtype == "float32" else ints(*xshape, lo=-1000, hi=1000)
    idx = [R.integers(-xshape[j], xshape[j], s).astype(np.int32) for j, s in enumerate(index_shapes)]
    idx[0].reshape(-1)[0], idx[0].reshape(-1)[-1] = -1, xshape[0] + 3
    bshape = np.broadcast_shapes(*index_shapes)
    out_shape = bshape + xshape[len(idx):]
    got = run(device, "index", [x] + idx, {}, out_shape, dtype)
    for b in np.ndindex(*bshape):
        at = []
        for j, i in enumerate(idx):
            v = int(np.broadcast_to(i, bshape)[b])
            at.append(min(v + xshape[j] if v < 0 else v, xshape[j] - 1))
        np.testing.assert_array_equal(got[b], x[tuple(at)])
    assert len(np.unique(got)) > 3


@pytest.mark.parametrize("op,attrs,shape,message", [
    ("arange", {"start": 0, "end": 5, "step": 0, "dtype": "int32"}, (5,), "arange: step 0"),
    ("arange", {"start": 0, "end": 5, "step": 1, "dtype": "int64"}, (5,), "dtype 'int64' is not one of"),
    ("arange", {"start": 0, "end": 5, "step": 1, "dtype": "int32"}, (7,), r"is not 7 values"),
    ("full", {"shape": [2, 3], "value": "x", "dtype": "float32"}, (2, 3), "value 'x' is not a number"),
    ("full", {"shape": [2, 3], "value": 1, "dtype": "float32"}, (2, 4), r"full of shape \[2, 3\]"),
])
def test_creation_refuses_malformed_attrs_by_name(device, op, attrs, shape, message):
    """A program file whose creation op does not describe its own output is refused with a
    message naming the op and the attr, not a ZeroDivisionError or a tensor of the spec's shape."""
    prog = single_op_program(op, [], [("y", spec(shape, "float32" if attrs["dtype"] == "float32" else "int32"))], attrs)
    with pytest.raises(ValueError, match=message):
        VulkanExecutor(prog, device)()


def torch_scatter(x, index, src, dim, reduce, include_self, along):
    """torch's scatter / scatter_reduce / index_add / index_copy / index_fill as its documentation
    defines them, written out element by element in the index's order (ATen's CPU kernels apply
    them so: the last write wins, a float sum rounds step by step)."""
    out, src, d = x.copy(), np.asarray(src), dim % x.ndim
    count = np.zeros(x.shape, np.int64)
    walk = (x.shape[:d] + (len(index),) + x.shape[d + 1:]) if along else index.shape
    for c in np.ndindex(*walk):
        t = c[:d] + (int(index[c[d]] if along else index[c]),) + c[d + 1:]
        v = src[c] if src.ndim else src.astype(x.dtype)
        if reduce == "none" or (not include_self and count[t] == 0):
            out[t] = v
        elif reduce in ("sum", "mean"):
            out[t] = out[t] + v
        elif reduce == "prod":
            out[t] = out[t] * v
        else:
            out[t] = max(out[t], v) if reduce == "amax" else min(out[t], v)
        count[t] += 1
    if reduce == "mean":
        seen = count > 0
        out[seen] = out[seen] / (count[seen] + include_self).astype(x.dtype)
    return out


SCATTER_CASES = [   # x shape, index shape, src shape (None: a scalar), dim, along
    ((3, 17), (3, 5), (3, 6), 1, False),             # MoE: top-k weights into the experts' row
    ((5, 4, 7), (2, 9, 7), (3, 9, 7), 1, False),      # index past x's size on dim 1: repeats
    ((6, 3, 5), (4, 3, 2), (5, 3, 2), 0, False),
    ((2, 3, 13), (2, 2, 29), (2, 3, 29), -1, False),  # more index elements than positions
    ((2, 11, 6), (19,), (2, 19, 6), 1, True),         # index_add: a graph's edges into its nodes
    ((9, 5), (4,), None, 0, True),                    # index_fill
    ((4, 10), (4, 3), None, 1, False),                # scatter of a value
]


SCATTER_RUNS = [(dtype, reduce, *case) for case in SCATTER_CASES for dtype in ("float32", "int32")
                for reduce in ("none", "sum", "prod", "mean", "amax", "amin")
                if not (reduce == "mean" and dtype == "int32")                # declines: floor division
                and (reduce in ("none", "sum") or not case[4]) and (case[2] is not None or reduce == "none")]


@pytest.mark.parametrize("dtype,reduce,xs,ishape,sshape,dim,along", SCATTER_RUNS,
                         ids=[f"{r[0]}-{r[1]}-{'x'.join(map(str, r[2]))}" for r in SCATTER_RUNS])
def test_scatter(device, dtype, reduce, xs, ishape, sshape, dim, along):
    """scatter / scatter_add / scatter_reduce / index_add / index_copy / index_fill by an index
    the device computes: equal to torch's definition, with repeated indices (their order decides
    the last write, and a float sum's rounding), negative ones, and both include_self."""
    d = dim % len(xs)
    size = xs[d]
    x = floats(*xs) if dtype == "float32" else ints(*xs, lo=-9, hi=9)
    src = np.asarray(1.5 if dtype == "float32" else 7, dtype) if sshape is None else (
        floats(*sshape) * 3 if dtype == "float32" else ints(*sshape, lo=-9, hi=9))
    index = R.integers(-size, size, ishape).astype(np.int32)
    if along:
        index = R.integers(0, size, ishape).astype(np.int32)
    assert len(np.unique(index % size)) < index.size or index.size <= 4          # repeats
    for include_self in ([True, False] if reduce not in ("none",) and not along else [True]):
        attrs = {"dim": dim, "reduce": reduce, "include_self": include_self, "along": along}
        inputs = [x, index] + ([src] if sshape is not None else [])
        consts = [] if sshape is not None else [src]
        prog = single_op_program("scatter", [(f"x{i}", spec(a.shape, str(a.dtype))) for i, a in enumerate(inputs)],
                                 [("y", spec(xs, dtype))], attrs,
                                 {f"c{i}": (spec(a.shape, str(a.dtype)), a) for i, a in enumerate(consts)})
        assert cpu_reason(prog.nodes[0], prog.tensors) is None
        got = VulkanExecutor(prog, device)(*inputs)
        ref = run_reference(prog, *inputs)
        want = torch_scatter(x, np.where(index < 0, index + size, index), src, dim, reduce, include_self, along)
        if reduce == "mean":           # one division, within Vulkan's 2.5 ulp
            np.testing.assert_allclose(got, ref, rtol=3e-7, atol=0)
            np.testing.assert_allclose(ref, want, rtol=3e-7, atol=0)
        else:
            np.testing.assert_array_equal(got, ref)
            np.testing.assert_array_equal(ref, want)
        assert not np.array_equal(ref, x)                                  # something was written



@pytest.mark.parametrize("in_place", [False, True])
def test_scatter_reads_src_through_a_transpose(device, in_place):
    """attr src_transpose (vkq/ops/attention_cached.py fold_head_transposes): src given (B, T, H,
    D) is written as its transpose (B, H, T, D) into a (B, H, N, D) cache along dim 2, by the
    general scatter and in place (a state's rows: index_copy_rows), over three calls with
    repeated and negative rows: the reference's bits, and the reference is the scatter of the
    transposed src."""
    from vkq.program import Node, Program
    xs, ss = (2, 3, 11, 5), (2, 4, 3, 5)
    attrs = {"dim": 2, "reduce": "none", "include_self": True, "along": True, "src_transpose": [1, 2]}
    tensors = {"cache": spec(xs), "idx": spec((4,), "int32"), "src": spec(ss), "upd": spec(xs), "y": spec(ss)}
    copy = Node("mul", ["src"], ["y"], {"scalar": 2.0})
    if in_place:        # the cache a state written by the scatter, read by nothing after it
        prog = Program(tensors, [Node("scatter", ["cache", "idx", "src"], ["upd"], attrs), copy], ["idx", "src"],
                       ["y"], state={"cache": "upd"}, state_init={"cache": floats(*xs)})
    else:
        prog = Program(tensors, [Node("scatter", ["cache", "idx", "src"], ["upd"], attrs)], ["cache", "idx", "src"],
                       ["upd"])
    prog.validate()
    ex, state = VulkanExecutor(prog, device), {}
    names = {st.name for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps}
    assert ("index_copy_rows" in names) == in_place
    cache = floats(*xs)
    for idx in ([3, -1, 3, 0], [1, 2, 9, -11], [10, 4, 5, 6]):
        idx, src = np.array(idx, np.int32), floats(*ss)
        want = get_op("scatter").reference(cache, idx, src.transpose(0, 2, 1, 3), dim=2, along=True)
        if in_place:
            ex(idx, src)
            run_reference(prog, idx, src, state=state)
            np.testing.assert_array_equal(ex.read_state("cache"), state["cache"])
            assert not np.array_equal(state["cache"], prog.state_init["cache"])
        else:
            got, ref = ex(cache, idx, src), run_reference(prog, cache, idx, src)
            np.testing.assert_array_equal(got, ref)
            np.testing.assert_array_equal(ref, want)
            assert not np.array_equal(ref, cache)

def test_scatter_ignores_indices_out_of_range_and_declines_int_mean():
    x, index = np.zeros((2, 4), np.float32), np.array([[5, -5], [1, 1]], np.int32)
    src = np.ones((2, 2), np.float32)
    out = get_op("scatter").reference(x, index, src, dim=1, reduce="sum")
    np.testing.assert_array_equal(out, [[0, 0, 0, 0], [0, 2, 0, 0]])
    prog = single_op_program("scatter", [("x", spec((2, 4), "int32")), ("i", spec((2, 2), "int32")),
                                         ("s", spec((2, 2), "int32"))], [("y", spec((2, 4), "int32"))],
                             {"dim": 1, "reduce": "mean"})
    assert "mean" in cpu_reason(prog.nodes[0], prog.tensors)


@pytest.mark.parametrize("attrs,message", [
    ({"dim": 1, "reduce": "median"}, "reduce 'median'"),
    ({"dim": 3, "reduce": "sum"}, "dim 3"),
])
def test_scatter_refuses_malformed_attrs_by_name(attrs, message):
    """A program file's scatter with an unknown reduction or a dim past its rank is refused with
    a message naming them, not a result that silently keeps x."""
    x, index, src = np.zeros((2, 4), np.float32), np.zeros((2, 2), np.int32), np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match=message):
        get_op("scatter").reference(x, index, src, **attrs)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("reduce", ["none", "sum"])
def test_index_add_by_a_constant_edge_list_walks_its_own_edges(device, dtype, reduce):
    """index_add / index_copy by a constant index (a graph's edge list) take the CSR variant
    (each position walks only the edges naming it, in order): equal to torch's definition, with
    nodes that many edges, one or none name."""
    from vkq.ops.logic import scatter_lists
    x = floats(3, 37, 5) if dtype == "float32" else ints(3, 37, 5)
    edges = R.integers(0, 30, 300).astype(np.int32)                  # nodes 30-36: no edge in
    edges[:40] = 4                                                   # a hub: 40+ edges in
    src = floats(3, 300, 5) * 3 if dtype == "float32" else ints(3, 300, 5)
    lists = scatter_lists(edges, 37)
    assert lists[5] - lists[4] >= 40 and len(set(range(37)) - set(edges)) > 0     # a hub and isolated nodes
    prog = single_op_program("scatter", [("x", spec(x.shape, dtype)), ("s", spec(src.shape, dtype))],
                             [("y", spec(x.shape, dtype))], {"dim": 1, "reduce": reduce, "along": True},
                             {"i": (spec(edges.shape, "int32"), edges)})
    prog.nodes[0].inputs[:] = ["x", "i", "s"]
    got = VulkanExecutor(prog, device)(x, src)
    want = torch_scatter(x, edges, src, 1, reduce, True, True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_reference(prog, x, src), want)


def test_scatter_falls_back_past_its_search_and_loop_limits(device, monkeypatch):
    """A scatter whose search would read more than SCATTER_SEARCH_MAX index elements (a computed
    edge list of thousands: the CPU's one pass is faster), and one whose walk passes the
    device's loop budget (llvmpipe silently stops a loop at 65535: scaled down here), run on
    the CPU, warned, with the same result."""
    import warnings
    from vkq.ops import logic
    from vkq.vkinfo import DeviceInfo
    x, src = floats(9, 4), floats(60, 4)
    edges = R.integers(0, 9, 60).astype(np.int32)
    want = torch_scatter(x, edges, src, 0, "sum", True, True)
    runtime = single_op_program("scatter", [("x", spec(x.shape)), ("i", spec(edges.shape, "int32")),
                                            ("s", spec(src.shape))], [("y", spec(x.shape))],
                                {"dim": 0, "reduce": "sum", "along": True})
    monkeypatch.setattr(logic, "SCATTER_SEARCH_MAX", 35 * 60)
    with pytest.warns(UserWarning, match="scatter.*runs on the CPU.*reads"):
        ex = VulkanExecutor(runtime, device)
    np.testing.assert_array_equal(ex(x, edges, src), want)
    monkeypatch.setattr(logic, "SCATTER_SEARCH_MAX", 1 << 26)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: 4 * (30 + 2)))
    constant = single_op_program("scatter", [("x", spec(x.shape)), ("s", spec(src.shape))], [("y", spec(x.shape))],
                                 {"dim": 0, "reduce": "sum", "along": True}, {"i": (spec(edges.shape, "int32"), edges)})
    constant.nodes[0].inputs[:] = ["x", "i", "s"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(VulkanExecutor(constant, device)(x, src), want)    # CSR: a few edges a node
    with pytest.warns(UserWarning, match="scatter.*runs on the CPU.*loop budget"):
        ex = VulkanExecutor(runtime, device)                                             # search: 60 each
    np.testing.assert_array_equal(ex(x, edges, src), want)


@pytest.mark.parametrize("mode,weighted,last,padding", [("sum", False, False, -1), ("sum", True, False, -1),
                                                        ("mean", False, True, 3), ("max", False, False, 3),
                                                        ("mean", False, False, -1)])
def test_embedding_bag(device, mode, weighted, last, padding):
    """Bags of 0 to 9 ids over rows of 13 (odd) values: empty bags 0, padding_idx's ids skipped
    and not counted in the mean, the sums bit for bit (added in the bag's order, as the
    reference and ATen's CPU kernel), an id outside the table clamped as embedding's."""
    table = floats(20, 13)
    ids = R.integers(0, 20, 40).astype(np.int32)
    ids[[5, 6, 17]] = 3
    ids[30] = 25                                                  # past the table: its last row
    offsets = np.int32([0, 4, 4, 13, 20, 21, 30, 39] + ([40] if last else []))   # bag 1 empty
    inputs = [table, ids, offsets] + ([R.random(40).astype(np.float32)] if weighted else [])
    bags = len(offsets) - int(last)
    attrs = {"mode": mode, "include_last_offset": last, "padding_idx": padding}
    if mode == "mean":                  # (one division a value: within Vulkan's 2.5 ulp)
        prog = single_op_program("embedding_bag", [(f"x{i}", spec(a.shape, str(a.dtype))) for i, a in enumerate(inputs)],
                                 [("y", spec((bags, 13), "float32"))], attrs, {})
        got, ref = VulkanExecutor(prog, device)(*inputs), run_reference(prog, *inputs)
        np.testing.assert_allclose(got, ref, rtol=3 * 2 ** -23, atol=0)
    else:
        ref = run(device, "embedding_bag", inputs, attrs, (bags, 13), "float32")
    np.testing.assert_array_equal(ref[1], 0)
    rows = table[ids[4:13]] * (inputs[3][4:13, None] if weighted else 1)
    keep = ids[4:13] != padding
    want = {"sum": rows[keep].sum(0), "mean": rows[keep].mean(0), "max": rows[keep].max(0)}[mode]
    np.testing.assert_allclose(ref[2], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("shape,dim", [((3, 37), 1), ((2, 9, 5), 1), ((7, 3, 4), 0), ((301,), 0)])
def test_argsort(device, dtype, descending, shape, dim):
    """A stable argsort, bit for bit: many equal values (in their order), NaNs last ascending
    and first descending, -0 equal to 0, rows along the first, middle and last dims."""
    x = ints(*shape, lo=-4, hi=5) if dtype == "int32" else np.round(floats(*shape) * 2) / 2
    if dtype == "float32":
        x.reshape(-1)[3::11] = np.nan
        x.reshape(-1)[5::13] = -0.0
    idx = run(device, "argsort", [x], {"dim": dim, "descending": descending}, shape, "int32")
    values = np.take_along_axis(x, idx, dim)
    finite = np.where(np.isnan(values), 1e30, values)          # (NaN the largest, as torch)
    step = np.diff(finite, axis=dim)
    assert (step <= 0).all() if descending else (step >= 0).all()
    ties = np.diff(idx, axis=dim)[np.diff(np.where(np.isnan(values), 1e9, values), axis=dim) == 0]
    assert ties.size and (ties > 0).all()                  # equal values: lowest index first
    if dtype == "float32":
        first = np.take(np.isnan(values), 0 if descending else -1, axis=dim)
        assert first.all() or shape[dim] < 11


@pytest.mark.parametrize("op", ["cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,dim", [((2, 37), 1), ((3, 29, 5), 1), ((7, 2, 3), 0), ((301,), 0)])
def test_cumulative_products_and_extremes(device, op, dtype, shape, dim):
    """cumprod (double-float on the device: within an ulp of the reference's float64 product,
    which is torch's CPU order and precision; int32 wrapping, bit for bit), cummax / cummin bit
    for bit (a NaN stays once seen, 0 after -0 as ATen's x >= best), rows along each dim."""
    rng = np.random.default_rng([int(np.prod(shape)), dim, len(op)])    # (its own data, whatever runs before it)
    if dtype == "int32":                # (products of these wrap in int32 within a row of 37)
        x = (rng.choice([-3, -2, -1, 1, 2, 3], shape) if op == "cumprod" else rng.integers(-999, 999, shape)).astype(np.int32)
    elif op == "cumprod":
        x = (rng.choice([-1, 1], shape) * rng.uniform(0.5, 2.0, shape)).astype(np.float32)
    else:
        x = np.round(rng.standard_normal(shape).astype(np.float32) * 200) / 2
        x.reshape(-1)[4::9] = -0.0
        x.reshape(-1)[len(x.reshape(-1)) - 3] = np.nan
    prog = single_op_program(op, [("x", spec(shape, dtype))], [("y", spec(shape, dtype))], {"dim": dim}, {})
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    got, ref = VulkanExecutor(prog, device)(x), run_reference(prog, x)
    if op == "cumprod" and dtype == "float32":
        np.testing.assert_array_equal(ref, np.cumprod(x.astype(np.float64), axis=dim).astype(np.float32))
        np.testing.assert_allclose(got, ref, rtol=2 ** -23, atol=0)
    else:
        np.testing.assert_array_equal(got, ref)        # (NaNs in the same places: array_equal compares them so)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
    assert len(np.unique(got)) > 2 and not np.array_equal(got, x)     # (a running max has few distinct values)


@pytest.mark.parametrize("op", ["cummax_indices", "cummin_indices"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,dim", [((2, 37), 1), ((3, 29, 5), 1), ((7, 2, 3), 0), ((301,), 0)])
def test_cumulative_extreme_indices(device, op, dtype, shape, dim):
    """cummax / cummin's indices (int32), bit for bit: where the running extreme was last taken,
    by ATen's rule (an equal value moves the index on, -0 after 0 too; a NaN takes it and keeps
    it, a later NaN moving it on). Written out for a row here (no torch in this file)."""
    rng = np.random.default_rng([int(np.prod(shape)), dim, len(op)])
    x = rng.integers(-6, 6, shape).astype(np.int32)          # (few values: many ties)
    if dtype == "float32":
        x = x.astype(np.float32)
        x.reshape(-1)[4::9] = -0.0
        x.reshape(-1)[[len(x.reshape(-1)) - 7, len(x.reshape(-1)) - 3]] = np.nan
    prog = single_op_program(op, [("x", spec(shape, dtype))], [("y", spec(shape, "int32"))], {"dim": dim}, {})
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    got, ref = VulkanExecutor(prog, device)(x), run_reference(prog, x)
    np.testing.assert_array_equal(got, ref)
    assert len(np.unique(got)) > 3
    if op == "cummax_indices":
        row = [1.0, 3.0, 3.0, -0.0, 2.0, np.nan, 5.0, np.nan, 9.0] if dtype == "float32" else [1, 3, 3, 0, 2, 5, 5, -1]
        want = [0, 1, 2, 2, 2, 5, 5, 7, 7] if dtype == "float32" else [0, 1, 2, 2, 2, 5, 6, 6]
        prog = single_op_program(op, [("x", spec((len(row),), dtype))], [("y", spec((len(row),), "int32"))], {"dim": 0}, {})
        r = np.array(row, dtype)
        np.testing.assert_array_equal(VulkanExecutor(prog, device)(r), want)
        np.testing.assert_array_equal(run_reference(prog, r), want)

