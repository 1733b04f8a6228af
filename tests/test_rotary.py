"""rotary (vkq/ops/rotary.py): a rotary position embedding in one dispatch, bit for bit."""
import numpy as np
import pytest
import torch

from vkq.executor import VulkanExecutor, run_reference
from vkq.lm_compile import rotary as torch_rotary
from vkq.ops.rotary import rotary as rotary_reference
from vkq.program import Node, Program, TensorSpec


def _program(xs, cs):
    tensors = {"x": TensorSpec(xs), "cos": TensorSpec(cs), "sin": TensorSpec(cs), "y": TensorSpec(xs)}
    return Program(tensors, [Node("rotary", ["x", "cos", "sin"], ["y"])], ["x", "cos", "sin"], ["y"])


@pytest.mark.parametrize("xs, cb", [((1, 9, 1, 64), 1), ((1, 3, 7, 64), 1), ((2, 5, 11, 18), 2), ((2, 1, 3, 2), 1)])
def test_rotary_is_the_reference_bit_for_bit(device, xs, cb):
    g = np.random.default_rng(xs[1])
    x = g.standard_normal(xs).astype(np.float32)
    cos, sin = (g.standard_normal((cb, xs[2], xs[3])).astype(np.float32) for _ in range(2))
    prog = _program(xs, cos.shape)
    want = run_reference(prog, x, cos, sin)
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(x, cos, sin), want)
    # the reference is what transformers' apply_rotary_pos_emb computes, in torch's eager rounding
    np.testing.assert_array_equal(want, torch_rotary(torch.from_numpy(x), torch.from_numpy(cos),
                                                     torch.from_numpy(sin)).numpy())


@pytest.mark.parametrize("xs, cb", [((1, 1, 9, 64), 1), ((2, 7, 3, 18), 2)])
def test_rotary_reads_x_tokens_first(device, xs, cb):
    """attr tokens_first (fold_head_transposes): x given (B, T, H, D), read through its transpose
    to (B, H, T, D): the device gives the reference's bits, and they are the rotary of the
    transposed x."""
    g = np.random.default_rng(xs[2])
    x = g.standard_normal(xs).astype(np.float32)
    b, t, h, d = xs
    cos, sin = (g.standard_normal((cb, t, d)).astype(np.float32) for _ in range(2))
    tensors = {"x": TensorSpec(xs), "cos": TensorSpec(cos.shape), "sin": TensorSpec(cos.shape),
               "y": TensorSpec((b, h, t, d))}
    prog = Program(tensors, [Node("rotary", ["x", "cos", "sin"], ["y"], {"tokens_first": True})],
                   ["x", "cos", "sin"], ["y"])
    want = run_reference(prog, x, cos, sin)
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(x, cos, sin), want)
    np.testing.assert_array_equal(want, run_reference(_program((b, h, t, d), cos.shape),
                                                      np.ascontiguousarray(x.transpose(0, 2, 1, 3)), cos, sin))


@pytest.mark.parametrize("tokens_first", [False, True])
def test_rotary_pair_is_both_rotations(device, tokens_first):
    """Two x by the same cos / sin in one dispatch (rotary's PAIR: q with 9 heads, k with 3, as
    pair_rotaries merges them): each output the reference's bits, and those of each x alone."""
    g = np.random.default_rng(3)
    b, t, d = 2, 5, 18
    shape = lambda h: (b, t, h, d) if tokens_first else (b, h, t, d)
    q, k = g.standard_normal(shape(9)).astype(np.float32), g.standard_normal(shape(3)).astype(np.float32)
    cos, sin = (g.standard_normal((b, t, d)).astype(np.float32) for _ in range(2))
    tensors = {"q": TensorSpec(q.shape), "k": TensorSpec(k.shape), "cos": TensorSpec(cos.shape),
               "sin": TensorSpec(cos.shape), "yq": TensorSpec((b, 9, t, d)), "yk": TensorSpec((b, 3, t, d))}
    prog = Program(tensors, [Node("rotary", ["q", "cos", "sin", "k"], ["yq", "yk"], {"tokens_first": tokens_first})],
                   ["q", "k", "cos", "sin"], ["yq", "yk"])
    ex = VulkanExecutor(prog, device)
    got, want = ex(q, k, cos, sin), run_reference(prog, q, k, cos, sin)
    assert [st.variant for seg in ex.segments for st in seg[1].steps] == ["rotary(PAIR)"]
    for g_, w_, x in zip(got, want, (q, k)):
        np.testing.assert_array_equal(g_, w_)
        np.testing.assert_array_equal(w_, rotary_reference(x, cos, sin, tokens_first=tokens_first))


def test_rotary_refuses_shapes_it_does_not_take():
    with pytest.raises(ValueError, match="D even"):
        run_reference(_program((1, 2, 3, 5), (1, 3, 5)), *[np.zeros(s, np.float32) for s in
                                                        ((1, 2, 3, 5), (1, 3, 5), (1, 3, 5))])
