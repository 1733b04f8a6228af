"""The int8 KV cache's kernels (vkq/ops/kv_q8.py, attention_cached_q8 in
vkq/ops/attention_cached.py): kv_quantize's rows, their write into a cache (index_copy_q8, in
place into a state and not) and attention over them, device against reference bit for bit on
odd shapes; the reference against float arithmetic."""
import math

import numpy as np
import pytest

from oputil import single_op_program, spec
from test_attention_cached import bound
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops import attention_cached as ac
from vkq.ops.kv_q8 import dequantize_rows, kv_quantize, row_words
from vkq.program import Node, Program
from vkq.registry import cpu_reason


def rows_of(rng, shape):
    """Rows of several magnitudes (a row's scale follows its own amax), with a zero row, a row of
    one value, a row near float32's least normal and one near 2^100 * 127."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat *= np.float32(2.0) ** rng.integers(-12, 12, (flat.shape[0], 1)).astype(np.float32)
    flat[0] = 0
    flat[1] = -3.5
    flat[2] *= np.float32(1e-36)
    flat[3] *= np.float32(2.0 ** 104)
    return x


def quantize_program(shape):
    return single_op_program("kv_quantize", [("x", spec(shape))],
                             [("y", spec(shape[:-1] + (row_words(shape[-1]),), "int32"))])


@pytest.mark.parametrize("shape", [(1, 3, 7, 64), (2, 5, 11, 17), (1, 1, 1, 6)], ids=str)
def test_kv_quantize_gives_the_reference_words(device, shape):
    rng = np.random.default_rng(sum(shape))
    x = rows_of(rng, shape) if np.prod(shape[:-1]) >= 4 else rng.standard_normal(shape).astype(np.float32)
    prog = quantize_program(shape)
    got = VulkanExecutor(prog, device)(x)
    want = run_reference(prog, x)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32 and got.shape == shape[:-1] + (-(-shape[-1] // 4) + 1,)


def test_a_non_finite_row_has_a_nan_scale_and_zero_values(device):
    x = np.random.default_rng(4).standard_normal((1, 2, 5, 12)).astype(np.float32)
    x[0, 0, 1, 3], x[0, 1, 4, 0] = np.inf, np.nan
    prog = quantize_program(x.shape)
    got = VulkanExecutor(prog, device)(x)
    np.testing.assert_array_equal(got, run_reference(prog, x))
    q, s = dequantize_rows(got, 12)
    assert np.isnan(s[0, 0, 1]) and np.isnan(s[0, 1, 4]) and np.isfinite(np.delete(s.reshape(-1), [1, 9])).all()
    assert not q[0, 0, 1].any() and not q[0, 1, 4].any()


def test_the_rows_are_symmetric_int8_with_amax_over_127():
    """Independently of the reference's steps: scale = amax * f32(1/127) (where normal), every
    value within half a step of x / scale (1/scale to 1.21 ulp), the largest at +-127, a zero row
    zeros with scale 0, the padding bytes of an odd D zero."""
    x = rows_of(np.random.default_rng(7), (1, 3, 9, 17))
    rows = kv_quantize(x)
    q, s = dequantize_rows(rows, 17)
    flat, qf, sf = x.reshape(-1, 17).astype(np.float64), q.reshape(-1, 20), s.reshape(-1)
    assert not qf[:, 17:].any() and np.abs(qf).max() <= 127
    amax = np.abs(flat).max(1)
    normal = amax * (1 / 127) >= np.finfo(np.float32).tiny
    np.testing.assert_array_equal(sf[normal], (amax[normal].astype(np.float32) * np.float32(1 / 127)).clip(
        max=np.float32(2.0 ** 100)))
    ok = normal & (sf < 2.0 ** 100)
    err = np.abs(qf[ok, :17] - flat[ok] / sf[ok, None].astype(np.float64))
    assert err.max() <= 0.5 + 1e-4
    assert (np.abs(qf[ok, :17]).max(1) == 127).all()
    assert sf[0] == 0 and not qf[0].any()                     # the zero row
    assert (qf[1, :17] == -127).all()                         # a row of one value
    assert sf[2] == 0 and not qf[2].any()                     # amax / 127 below the least normal: flushed
    assert sf[3] == np.float32(2.0 ** 100) and (np.abs(qf[3]) <= 127).all()     # the cap, values clamped


def write_program(hkv, n, k, d, state: bool):
    """index_copy_q8 of k rows of d values into a (1, hkv, n, row_words(d)) cache: the cache a
    state (the executor writes its rows in place) or an input (copied, then written)."""
    cache = (1, hkv, n, row_words(d))
    tensors = {"cache": spec(cache, "int32"), "idx": spec((k,), "int32"), "x": spec((1, hkv, k, d)),
               "new": spec(cache, "int32")}
    node = Node("index_copy_q8", ["cache", "idx", "x"], ["new"], {"dim": 2})
    if state:         # (the output: rows 0..n-2 of the new cache; the cache itself stays on the device)
        tensors["y"] = spec((1, hkv, n - 1, row_words(d)), "int32")
        read = Node("slice", ["new"], ["y"], {"dim": 2, "start": 0, "end": n - 1})
        prog = Program(tensors=tensors, nodes=[node, read], inputs=["idx", "x"], outputs=["y"],
                       state={"cache": "new"}, state_init={"cache": np.zeros(cache, np.int32)})
    else:
        prog = Program(tensors=tensors, nodes=[node], inputs=["cache", "idx", "x"], outputs=["new"])
    prog.validate()
    return prog


# the positions of each call: in order, in another order, a repeated one (the last wins), a
# negative one (from the end) beside one outside the cache (written nowhere)
WRITES = [[0, 1, 2], [5, 4, 3], [7, 9, 7], [-1, 12, 6]]


@pytest.mark.parametrize("d", [64, 17])
def test_index_copy_q8_writes_the_rows_in_place(device, d):
    prog = write_program(3, 11, 3, d, state=True)
    ex = VulkanExecutor(prog, device)
    assert ex._in_place == {"new": "cache"}                     # no copy of the cache a call
    rng = np.random.default_rng(d)
    state = {}
    for at in WRITES:
        x = rng.standard_normal((1, 3, 3, d)).astype(np.float32) * np.float32(rng.uniform(0.01, 100))
        idx = np.asarray(at, np.int32)
        got, want = ex(idx, x), run_reference(prog, idx, x, state=state)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ex.read_state("cache"), state["cache"])
        if at == [7, 9, 7]:
            np.testing.assert_array_equal(want[:, :, [7, 9]], kv_quantize(x)[:, :, [2, 1]])
    np.testing.assert_array_equal(state["cache"][:, :, [10, 6]], kv_quantize(x)[:, :, [0, 2]])
    rows = state["cache"]
    assert rows[:, :, [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]].any(axis=-1).all() and not rows[:, :, 8].any()


def test_index_copy_q8_into_a_tensor_of_its_own(device):
    """Where the cache is not a state the executor writes in place: x copied, then its rows."""
    prog = write_program(2, 13, 4, 23, state=False)
    rng = np.random.default_rng(3)
    cache = rng.integers(-2**31, 2**31, (1, 2, 13, row_words(23)), dtype=np.int64).astype(np.int32)
    x, idx = rows_of(rng, (1, 2, 4, 23)), np.asarray([12, 0, 5, 0], np.int32)
    got, want = VulkanExecutor(prog, device)(cache, idx, x), run_reference(prog, cache, idx, x)
    np.testing.assert_array_equal(got, want)
    q = kv_quantize(x)
    np.testing.assert_array_equal(want[:, :, [12, 0, 5]], q[:, :, [0, 3, 2]])
    keep = [i for i in range(13) if i not in (0, 5, 12)]
    np.testing.assert_array_equal(want[:, :, keep], cache[:, :, keep])


def q8_caches(rng, B, Hkv, N, D, Dv, top):
    """kv_quantize's rows of random caches; rows from `top` on random words (never read)."""
    k = rng.uniform(-1, 1, (B, Hkv, N, D)).astype(np.float32) * rng.uniform(0.1, 3, (B, Hkv, N, 1)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, Hkv, N, Dv)).astype(np.float32)
    kq, vq = kv_quantize(k), kv_quantize(v)
    kq[:, :, top:] = rng.integers(-2**31, 2**31, kq[:, :, top:].shape, dtype=np.int64).astype(np.int32)
    vq[:, :, top:] = rng.integers(-2**31, 2**31, vq[:, :, top:].shape, dtype=np.int64).astype(np.int32)
    return kq, vq


def q8_program(q, kq, vq, pos, dv, attrs):
    B, H, T, _ = q.shape
    return single_op_program("attention_cached_q8",
                             [("q", spec(q.shape)), ("k", spec(kq.shape, "int32")), ("v", spec(vq.shape, "int32")),
                              ("pos", spec(pos.shape, "int32"))],
                             [("y", spec((B, H, T, dv)))], {**attrs, "dv": dv})


# (name, B, H, Hkv, N, D, Dv, positions, window, softcap)
CASES = [
    ("smollm2 decode", 1, 9, 3, 300, 64, 64, [20], 0, 0.0),
    ("smollm2 prefill at 11", 2, 9, 3, 300, 64, 64, list(range(11, 18)), 0, 0.0),
    ("smollm2 many queries", 1, 9, 3, 300, 64, 64, list(range(3, 40)), 0, 0.0),
    ("gqa window 4", 1, 4, 2, 37, 64, 64, list(range(11, 18)), 4, 0.0),
    ("mha odd dims", 2, 5, 5, 37, 17, 23, [5, 36, 0], 0, 0.0),
    ("mqa softcap window", 1, 4, 1, 37, 18, 18, list(range(7)), 3, 30.0),
]


@pytest.mark.parametrize("name,B,H,Hkv,N,D,Dv,positions,window,softcap", CASES, ids=[c[0] for c in CASES])
def test_attention_cached_q8(loads_device, name, B, H, Hkv, N, D, Dv, positions, window, softcap):
    """Device against the reference bit for bit (softcaps too); the rows past max(positions) are random words, never read."""
    rng = np.random.default_rng(len(name) * 31 + N)
    q = rng.uniform(-1, 1, (B, H, len(positions), D)).astype(np.float32)
    pos = np.asarray(positions, np.int32)
    kq, vq = q8_caches(rng, B, Hkv, N, D, Dv, max(positions) + 1)
    attrs = {"scale": 1 / math.sqrt(D), "window": window, "softcap": softcap}
    prog = q8_program(q, kq, vq, pos, Dv, attrs)
    ex = VulkanExecutor(prog, loads_device)
    got = ex(q, kq, vq, pos)
    assert [s[0] for s in ex.segments] == ["vulkan"]
    ref = run_reference(prog, q, kq, vq, pos)
    assert np.isfinite(got).all() and np.isfinite(ref).all() and len(np.unique(ref)) > ref.size // 2
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]], ids=[CASES[i][0] for i in (1, 4, 5)])
def test_q8_reference_is_attention_over_the_dequantized_cache(case):
    """attention_cached_q8's reference is float attention over f32(q) * scale rows, within the
    float32 bound of the kernel's order (its scale products add a rounding a score and a weight)."""
    name, B, H, Hkv, N, D, Dv, positions, window, softcap = case
    rng = np.random.default_rng(len(name) * 31 + N)
    q = rng.uniform(-1, 1, (B, H, len(positions), D)).astype(np.float32)
    pos = np.asarray(positions, np.int32)
    top = max(positions) + 1
    kq, vq = q8_caches(rng, B, Hkv, N, D, Dv, N)
    (k8, ks), (v8, vs) = dequantize_rows(kq, D), dequantize_rows(vq, Dv)
    k = (k8[..., :D].astype(np.float64) * ks[..., None]).astype(np.float32)
    v = (v8[..., :Dv].astype(np.float64) * vs[..., None]).astype(np.float32)
    scale = 1 / math.sqrt(D)
    got = ac.attention_cached_q8(q, kq, vq, pos, scale=scale, window=window, softcap=softcap, dv=Dv)
    want = ac.attention_cached(q, k, v, pos, scale=scale, window=window, softcap=softcap)
    assert np.all(np.abs(got.astype(np.float64) - want) <= 2 * bound(q, k, v, pos, scale, window, softcap))
    kq[:, :, top:], vq[:, :, top:] = 0x7F7F7F7F, -1           # rows past the positions are not read
    np.testing.assert_array_equal(got, ac.attention_cached_q8(q, kq, vq, pos, scale=scale, window=window,
                                                              softcap=softcap, dv=Dv))


def test_q8_bits_do_not_depend_on_the_workgroup_shape(device, monkeypatch):
    _, B, H, Hkv, N, D, Dv, positions, window, softcap = CASES[4]
    rng = np.random.default_rng(12)
    q = rng.uniform(-1, 1, (B, H, len(positions), D)).astype(np.float32)
    pos = np.asarray(positions, np.int32)
    kq, vq = q8_caches(rng, B, Hkv, N, D, Dv, N)
    prog = q8_program(q, kq, vq, pos, Dv, {"scale": 0.3, "window": window, "softcap": softcap})
    want = run_reference(prog, q, kq, vq, pos)
    for lanes in [(1, 1), (1, 8), (4, 2), (64, 1)]:
        monkeypatch.setattr(ac, "LANES", lanes)
        np.testing.assert_array_equal(VulkanExecutor(prog, device)(q, kq, vq, pos), want, err_msg=str(lanes))


def test_q8_shapes_it_cannot_take_are_declined():
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (1, 4, 2, 17)).astype(np.float32)
    kq, vq = q8_caches(rng, 1, 2, 37, 17, 23, 37)
    pos = np.asarray([3, 4], np.int32)
    p = q8_program(q, kq, vq, pos, 23, {"scale": 0.25})
    assert cpu_reason(p.nodes[0], p.tensors) is None
    p.nodes[0].attrs["dv"] = 25            # 7 words hold 24 values and a scale
    assert "do not hold 17 and 25 int8 values and a scale" in cpu_reason(p.nodes[0], p.tensors)
    p.nodes[0].attrs["dv"] = 23
    p.tensors["k"] = spec(kq.shape, "float32")
    assert "takes float32, int32, int32, float32" in cpu_reason(p.nodes[0], p.tensors)
    bad = quantize_program((1, 2, 3, 17))
    bad.tensors["y"] = spec((1, 2, 3, 5), "int32")
    assert "(..., ceil(D/4) + 1)" in cpu_reason(bad.nodes[0], bad.tensors)

