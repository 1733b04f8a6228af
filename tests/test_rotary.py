"""rotary (vkq/ops/rotary.py): a rotary position embedding in one dispatch, bit for bit."""
import numpy as np
import pytest
import torch

from vkq.executor import VulkanExecutor, run_reference
from vkq.lm_compile import rotary as torch_rotary
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


def test_rotary_refuses_shapes_it_does_not_take():
    with pytest.raises(ValueError, match="D even"):
        run_reference(_program((1, 2, 3, 5), (1, 3, 5)), *[np.zeros(s, np.float32) for s in
                                                        ((1, 2, 3, 5), (1, 3, 5), (1, 3, 5))])
