"""attention_cached (vkq/ops/attention_cached.py): attention of new queries over the filled
prefix of a static KV cache, on odd shapes, on every test device.

The reference computes in float64 (rounded once); the shader in float32, so the device is held
to a float bound (as tests/test_float_ops.py holds softmax and matmul), stated in `bound`:
  the scores: a float32 dot product of D terms, |error| <= 2 D eps scale sum_d |q k| (the
  recursive-summation bound), plus tanh_f32's 2e-7 absolute error times softcap; a score error
  ds changes a softmax weight by a relative 2 ds at most;
  the weighted sum of n value rows in float32, in the kernel's order: SPLIT partitions of
  n / SPLIT keys each (a rounding a key, and an exp_f32 rescale of <= 2 ulp at most a key), then
  log2(SPLIT) = 6 merges (two exp_f32 factors, a product and a sum each): a depth of at most
  4 n / SPLIT + 32 roundings, so |error| <= 2 (4 ceil(n / SPLIT) + 32) eps max |v|.
The reference itself is checked against PyTorch's attention in float64 on the cache sliced to
each query's keys, its heads repeated (what the op avoids doing).
"""
import math

import numpy as np
import pytest

from oputil import single_op_program, spec
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops import attention_cached as ac
from vkq.program import NodeError
from vkq.registry import cpu_reason

EPS = float(np.finfo(np.float32).eps)


def make(rng, B, H, Hkv, N, D, Dv, positions, garbage=np.nan):
    """q, k_cache, v_cache, positions; cache rows past max(positions) hold `garbage`."""
    T = len(positions)
    q = rng.uniform(-1, 1, (B, H, T, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, Hkv, N, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, Hkv, N, Dv)).astype(np.float32)
    top = max(positions) + 1
    k[:, :, top:], v[:, :, top:] = garbage, garbage
    return q, k, v, np.asarray(positions, np.int32)


def program(q, k, v, pos, attrs):
    B, H, T, _ = q.shape
    return single_op_program("attention_cached",
                             [("q", spec(q.shape)), ("k", spec(k.shape)), ("v", spec(v.shape)),
                              ("pos", spec(pos.shape, "int32"))],
                             [("y", spec((B, H, T, v.shape[-1])))], attrs)


def key_range(p, window):
    return (max(0, p - window + 1) if window else 0), p + 1


def bound(q, k, v, pos, scale, window, softcap):
    """The float32 error bound of the module docstring, per output value."""
    B, H, T, D = q.shape
    g = H // k.shape[1]
    out = np.zeros((B, H, T, v.shape[-1]))
    for t, p in enumerate(pos):
        lo, hi = key_range(int(p), window)
        kk, vv = k[:, np.arange(H) // g, lo:hi].astype(np.float64), v[:, np.arange(H) // g, lo:hi]
        s_abs = scale * np.einsum("bhd,bhnd->bhn", np.abs(q[:, :, t].astype(np.float64)), np.abs(kk)).max(-1)
        ds = 2 * D * EPS * s_abs + (4e-7 * softcap if softcap else 0)
        vmax = np.abs(vv).max(axis=(-2, -1))
        depth = 4 * -(-(hi - lo) // ac.SPLIT) + 32
        out[:, :, t] = (vmax * (2 * ds + 2 * depth * EPS))[..., None]
    return out


def torch_attention(q, k, v, pos, scale, window, softcap):
    """PyTorch in float64: each query over its keys of the cache, the cache's heads repeated."""
    import torch
    import torch.nn.functional as F
    B, H, T, D = q.shape
    g = H // k.shape[1]
    out = []
    for t, p in enumerate(pos):
        lo, hi = key_range(int(p), window)
        kk = torch.from_numpy(k[:, :, lo:hi]).double().repeat_interleave(g, dim=1)
        vv = torch.from_numpy(v[:, :, lo:hi]).double().repeat_interleave(g, dim=1)
        qq = torch.from_numpy(q[:, :, t:t + 1]).double()
        if softcap:
            s = qq @ kk.transpose(-1, -2) * scale
            o = torch.softmax(softcap * torch.tanh(s / softcap), dim=-1) @ vv
        else:
            o = F.scaled_dot_product_attention(qq, kk, vv, scale=scale)
        out.append(o)
    return torch.cat(out, dim=2).numpy()


# (name, B, H, Hkv, N, D, Dv, positions, window, softcap)
CASES = [
    ("smollm2 decode", 1, 9, 3, 300, 64, 64, [20], 0, 0.0),
    ("smollm2 decode late", 2, 9, 3, 300, 64, 64, [257], 0, 0.0),
    ("smollm2 prefill", 1, 9, 3, 300, 64, 64, list(range(7)), 0, 0.0),
    ("smollm2 prefill at 11", 2, 9, 3, 300, 64, 64, list(range(11, 18)), 0, 0.0),
    ("smollm2 window 4", 1, 9, 3, 300, 64, 64, list(range(11, 18)), 4, 0.0),
    ("smollm2 last row of 8192", 1, 9, 3, 8192, 64, 64, [8191], 0, 0.0),
    ("mha odd dims", 2, 5, 5, 37, 17, 23, list(range(11, 18)), 0, 0.0),
    ("mha odd dims window", 1, 5, 5, 37, 17, 23, list(range(7)), 4, 0.0),
    ("mqa softcap", 2, 4, 1, 37, 17, 23, list(range(7)), 0, 30.0),
    ("mqa window past p softcap", 1, 4, 1, 300, 64, 64, list(range(11, 18)), 200, 30.0),
    ("gqa any order", 2, 4, 2, 37, 64, 23, [5, 36, 0], 0, 0.0),
]


@pytest.mark.parametrize("name,B,H,Hkv,N,D,Dv,positions,window,softcap", CASES, ids=[c[0] for c in CASES])
def test_attention_cached(loads_device, name, B, H, Hkv, N, D, Dv, positions, window, softcap):
    """Device against the reference bit for bit (softcaps too: tanh_f32 and the host's 1/softcap,
    no division); cache rows past max(positions) are NaN and the output has none (they are
    never read)."""
    rng = np.random.default_rng(len(name) * 101 + N)
    q, k, v, pos = make(rng, B, H, Hkv, N, D, Dv, positions)
    scale = 1 / math.sqrt(D)
    prog = program(q, k, v, pos, {"scale": scale, "window": window, "softcap": softcap})
    ex = VulkanExecutor(prog, loads_device)
    got = ex(q, k, v, pos)
    assert [s[0] for s in ex.segments] == ["vulkan"]
    ref = run_reference(prog, q, k, v, pos)
    assert not np.isnan(got).any() and not np.isnan(ref).any()
    np.testing.assert_array_equal(got, ref)
    err = np.abs(got.astype(np.float64) - ref)
    b = bound(q, k, v, pos, scale, window, softcap)
    assert np.all(err <= b), f"max error {err.max():.3g}, bound there {b.reshape(-1)[np.argmax(err - b)]:.3g}"
    assert len(np.unique(ref)) > ref.size // 2      # not a degenerate case


@pytest.mark.parametrize("name,B,H,Hkv,N,D,Dv,positions,window,softcap", CASES, ids=[c[0] for c in CASES])
def test_reference_is_attention(name, B, H, Hkv, N, D, Dv, positions, window, softcap):
    """The reference (the kernel's float32 operations in its order) is PyTorch's float64 attention
    over the sliced, repeated cache within the float32 bound of that order."""
    rng = np.random.default_rng(len(name) * 101 + N)
    q, k, v, pos = make(rng, B, H, Hkv, N, D, Dv, positions)
    scale = 1 / math.sqrt(D)
    ref = ac.attention_cached(q, k, v, pos, scale=scale, window=window, softcap=softcap)
    want = torch_attention(q, k, v, pos, float(np.float32(scale)), window, softcap)   # the scale as the op takes it
    err = np.abs(ref.astype(np.float64) - want)
    b = bound(q, k, v, pos, scale, window, softcap)
    assert np.all(err <= b), f"max error {err.max():.3g}, bound there {b.reshape(-1)[np.argmax(err - b)]:.3g}"
    if 0 < window <= max(positions):    # the window matters here: without it the values differ
        assert not np.allclose(ref, ac.attention_cached(q, k, v, pos, scale=scale, softcap=softcap), atol=1e-3)


@pytest.mark.parametrize("name,B,H,Hkv,N,D,Dv,positions,window,softcap", [c for c in CASES if c[0] in (
    "smollm2 decode late", "smollm2 prefill at 11", "mha odd dims")], ids=lambda c: c if isinstance(c, str) else "")
def test_attention_cached_writes_tokens_first(loads_device, name, B, H, Hkv, N, D, Dv, positions, window, softcap):
    """attr out_tokens_first (fold_head_transposes): out written (B, T, H, Dv), the head merge's
    transpose folded in: the device gives the reference's bits, and they are the transposed
    output of the op without it."""
    rng = np.random.default_rng(N + D)
    q, k, v, pos = make(rng, B, H, Hkv, N, D, Dv, positions)
    attrs = {"scale": 1 / math.sqrt(D), "window": window, "softcap": softcap}
    prog = single_op_program("attention_cached", [("q", spec(q.shape)), ("k", spec(k.shape)), ("v", spec(v.shape)),
                                                  ("pos", spec(pos.shape, "int32"))],
                             [("y", spec((B, len(positions), H, Dv)))], {**attrs, "out_tokens_first": True})
    ref = run_reference(prog, q, k, v, pos)
    np.testing.assert_array_equal(VulkanExecutor(prog, loads_device)(q, k, v, pos), ref)
    np.testing.assert_array_equal(ref, run_reference(program(q, k, v, pos, attrs), q, k, v, pos).transpose(0, 2, 1, 3))


def test_decode_step_gives_the_bits_of_its_prefill_row(device):
    """A query computes the same bits whether it comes alone (a decode step: on CPU drivers a
    subgroup's worth of lanes a query) or among others (a prefill: a lane a query there), and
    whatever the rows past its position hold: the sums' order is the kernel's."""
    rng = np.random.default_rng(5)
    q, k, v, pos = make(rng, 2, 9, 3, 300, 64, 64, list(range(11, 18)))
    attrs = {"scale": 0.125, "window": 0, "softcap": 0.0}
    prefill = VulkanExecutor(program(q, k, v, pos, attrs), device)(q, k, v, pos)
    for t in (0, 3, 6):
        k2, v2 = k.copy(), v.copy()
        k2[:, :, pos[t] + 1:] = rng.uniform(-1, 1, k2[:, :, pos[t] + 1:].shape)   # later keys: not attended
        v2[:, :, pos[t] + 1:] = 1e30
        step = VulkanExecutor(program(q[:, :, t:t + 1], k2, v2, pos[t:t + 1], attrs), device)(
            np.ascontiguousarray(q[:, :, t:t + 1]), k2, v2, pos[t:t + 1])
        np.testing.assert_array_equal(step[:, :, 0], prefill[:, :, t])


def test_a_position_outside_the_cache_is_an_error():
    rng = np.random.default_rng(3)
    q, k, v, _ = make(rng, 1, 4, 2, 37, 17, 23, [0, 1, 2])
    for bad in ([0, 37, 2], [0, -1, 2]):
        pos = np.asarray(bad, np.int32)
        with pytest.raises(NodeError, match=rf"positions\[1\] = {bad[1]} is outside the cache's rows \[0, 37\)"):
            run_reference(program(q, k, v, pos, {"scale": 0.25}), q, k, v, pos)


def test_shapes_it_cannot_take_are_declined():
    node = lambda p: p.nodes[0]
    q, k, v, pos = make(np.random.default_rng(1), 1, 6, 4, 37, 17, 23, [3])
    p = program(q, k, v, pos, {"scale": 0.25})
    assert "6 query heads are not a multiple of 4 cache heads" in cpu_reason(node(p), p.tensors)
    q, k, v, pos = make(np.random.default_rng(1), 1, 4, 2, 37, 17, 23, [3, 4])
    p = program(q, k, v, pos, {"scale": 0.25})
    assert cpu_reason(node(p), p.tensors) is None
    p.tensors["pos"] = spec((2,), "float32")
    assert "int32 positions" in cpu_reason(node(p), p.tensors)
    p.tensors["pos"] = spec((3,), "int32")
    assert "a position per query" in cpu_reason(node(p), p.tensors)
    p.tensors["pos"], p.tensors["v"] = spec((2,), "int32"), spec((1, 2, 36, 23))
    assert "do not fit" in cpu_reason(node(p), p.tensors)
    p.tensors["v"] = spec((1, 2, 37, 2048))
    assert "head dims" in cpu_reason(node(p), p.tensors)


def test_the_loop_budget_holds_to_8192_rows():
    """llvmpipe stops an invocation after 65535 loop iterations: a lane a query over 8192 rows
    stays far below it, at any head dim (the loops over D and Dv unroll: next test)."""
    assert ac.loop_iterations(8192, 64, 1) < 65535 // 6
    assert ac.loop_iterations(8192, 512, 1) < 65535 // 6
    assert ac.loop_iterations(8192, 64, 8) < 2000


def test_the_head_dim_loops_unroll(device, monkeypatch):
    """A lane a query over 8192 keys with D = Dv = 64 would run 64 x 129 x 48 loop iterations
    (past llvmpipe's 65535, which would leave keys out silently) if the loops over D and Dv did
    not unroll; the output is right, so they do (what loop_iterations counts on)."""
    from vkq.vkinfo import DeviceInfo
    q, k, v, pos = make(np.random.default_rng(9), 1, 2, 1, 8192, 64, 64, [8191])
    attrs = {"scale": 0.125, "window": 0, "softcap": 0.0}
    prog = program(q, k, v, pos, attrs)
    ref = run_reference(prog, q, k, v, pos)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: None))     # no check by the build
    monkeypatch.setattr(ac, "LANES", (1, 4))
    got = VulkanExecutor(prog, device)(q, k, v, pos)
    assert np.all(np.abs(got - ref) <= bound(q, k, v, pos, 0.125, 0, 0.0))


LANE_CHOICES = [(1, 1), (1, 8), (2, 1), (4, 2), (64, 1)]


@pytest.mark.parametrize("case", [CASES[3], CASES[7], CASES[8]], ids=[CASES[i][0] for i in (3, 7, 8)])
def test_the_bits_do_not_depend_on_the_workgroup_shape(device, monkeypatch, case):
    """Lanes a query (COOP) and queries a workgroup (QW) change who computes what, not the order
    of any sum: the same bits at every choice (the device's own among them)."""
    name, B, H, Hkv, N, D, Dv, positions, window, softcap = case
    q, k, v, pos = make(np.random.default_rng(11), B, H, Hkv, N, D, Dv, positions)
    prog = program(q, k, v, pos, {"scale": 0.3, "window": window, "softcap": softcap})
    want = VulkanExecutor(prog, device)(q, k, v, pos)
    for lanes in LANE_CHOICES:
        monkeypatch.setattr(ac, "LANES", lanes)
        np.testing.assert_array_equal(VulkanExecutor(prog, device)(q, k, v, pos), want, err_msg=str(lanes))


def test_past_the_loop_budget_it_runs_on_the_cpu(device, monkeypatch):
    from vkq.vkinfo import DeviceInfo
    q, k, v, pos = make(np.random.default_rng(2), 1, 4, 2, 37, 17, 23, [30, 31])
    prog = program(q, k, v, pos, {"scale": 0.25})
    want = run_reference(prog, q, k, v, pos)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: 10))
    with pytest.warns(UserWarning, match=r"runs on the CPU.*attention_cached.*loop budget"):
        ex = VulkanExecutor(prog, device)
    np.testing.assert_array_equal(ex(q, k, v, pos), want)
    assert list(ex.cpu_reasons) == [0]
