"""The same bits on every device for float-heavy programs (issue 59, its CI check): a small
nn.TransformerEncoder under static, dynamic and weight_only, and a CNN with float islands (group
norm, GELU, a bilinear resize, layer norm, softmax), compiled with PT2E, run on the device and
by the numpy references: np.array_equal (float32 by bits). tools/test.sh runs this file at
lavapipe's 4, 8 and 16 lanes as well as on SwiftShader. A decoder's logits: tests/test_lm.py.
weight_only's float linears (linear_float / linear_gemv_float) still sum in a lane-dependent
order and gelu is within a bound only (vkq/ops/float.py): where a program holds one, every other
node is checked for equal bits on its own inputs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vkq.executor import VulkanExecutor, run_reference   # noqa: E402
from vkq.verify import verify                             # noqa: E402

NOT_EXACT = {"linear_weight_only", "gelu"}     # (README: what is not yet the same on every device)


def _encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=36, nhead=3, dim_feedforward=52, batch_first=True,
                                             activation="gelu")
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    return model, torch.randn(1, 11, 36), [torch.randn(1, 11, 36) for _ in range(4)]


class FloatIslands(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.gn = torch.nn.Conv2d(3, 12, 3, padding=1), torch.nn.GroupNorm(3, 12)
        self.c2, self.ln = torch.nn.Conv2d(12, 8, 3, padding=1), torch.nn.LayerNorm(13)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.gn(self.c1(x)))
        y = torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return self.ln(self.c2(y)[..., :13]).softmax(-1)


@pytest.fixture(scope="module", params=["encoder-static", "encoder-dynamic", "encoder-weight_only", "cnn-static"])
def compiled(request):
    import vkq
    what, scheme = request.param.split("-")
    if what == "cnn":
        torch.manual_seed(1)
        model, x, cal = FloatIslands().eval(), torch.randn(1, 3, 9, 9), [torch.randn(1, 3, 9, 9) for _ in range(4)]
    else:
        model, x, cal = _encoder()
    prog = vkq.compile(model, (x,), cal, scheme=scheme)
    return request.param, prog.program, x.numpy()


def test_float_program_gives_the_reference_bits(device, compiled):
    name, program, x = compiled
    floats = {n.op for n in program.nodes} & {"layer_norm", "group_norm", "softmax", "gelu",
                                             "scaled_dot_product_attention", "layer_norm_q8"}
    assert floats, name            # (a float island to check: the test could not fail without one)
    if not {n.op for n in program.nodes} & NOT_EXACT:
        got, ref = VulkanExecutor(program, device)(x), run_reference(program, x)
        assert got.dtype == ref.dtype == np.float32
        if not np.array_equal(got.view(np.uint32), ref.view(np.uint32)):
            pytest.fail(f"{name} on {device.info.name}: {verify(program, x, device=device).summary()}")
    r = verify(program, x, device=device)
    differing = {n.op for n in r.differing_nodes}
    assert differing <= NOT_EXACT, f"{name}: {r.summary()}"
    assert any(n.where == "vulkan" and n.op in floats for n in r.nodes)
