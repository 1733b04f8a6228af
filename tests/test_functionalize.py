"""In-place ops made functional (vkq/passes/functionalize.py), writes through views above all:
export keeps `y[:, 1:] = v` as slice + copy_ and its later readers read the base y, so a
functional copy alone was dead code and the write was lost, in PT2E's graph and in vkq's program
alike (ConViT's position table, FasterNet's sliced partial conv, MViTv2's relative positions
after a cls token, YOLO heads' box decoding): both agreed with each other, not with the model.
Every check here is against the float model itself."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from test_lower import assert_matches_pt2e, ops
from vkq import api
from vkq.executor import VulkanExecutor, run_reference
from vkq.lower import lower
from vkq.passes.functionalize import functionalize_inplace

warnings.filterwarnings("ignore", category=UserWarning)


def _slice_assign(y, x):
    y[:, 1:] = y[:, 1:] + 10.0 * x[:, 1:]


def _slice_iadd(y, x):
    y[:, 2:5] += 10.0 * x[:, 2:5]


def _sigmoid_on_slice(y, x):
    y[..., :3].sigmoid_()


def _select_assign(y, x):
    y[:, -2] = 5.0 * x[:, 0]                  # a negative index


def _view_taken_before(y, x):
    v = y[:, :2]
    y.add_(10.0)                              # the whole base written: v, taken before, sees it
    return v * 2


def _two_writes_then_view(y, x):              # a YOLO head's box decoding
    y[..., 0:2] = y[..., 0:2] * 2 + 5.0
    y[..., 2:4] = (y[..., 2:4] * 2) ** 2
    return y.view(y.shape[0], -1, 4)


def _fill_through_view_select(y, x):
    y.view(y.shape[0], 6, 2, 4)[:, :, 0] = 7.0


def _fill_through_transpose(y, x):
    y.transpose(1, 2)[:, 5:] = -6.0


def _whole_slice(y, x):                       # y[:, 0:]: export's alias + copy_
    y[:, 0:] = x + 1.0


def _diagonal(y, x):                          # diagonal_scatter: on the CPU, but written
    y[:, :, :6].diagonal(dim1=1, dim2=2).fill_(9.0)


WRITES = {f.__name__.strip("_"): f for f in (_slice_assign, _slice_iadd, _sigmoid_on_slice, _select_assign,
                                             _view_taken_before, _two_writes_then_view, _fill_through_view_select,
                                             _fill_through_transpose, _whole_slice, _diagonal)}


class Write(nn.Module):
    def __init__(self, write):
        super().__init__()
        self.a, self.b, self.write = nn.Linear(8, 8), nn.Linear(8, 8), write

    def forward(self, x):                     # x: (N, 6, 8)
        y, z = self.a(x), self.b(x)
        out = self.write(y, z)
        return y if out is None else out


@pytest.mark.parametrize("name", sorted(WRITES))
def test_functional_graph_equals_the_model(name):
    """The exported graph, its in-place ops made functional, computes what the model does
    (fp32, exactly), and no in-place op is left."""
    torch.manual_seed(0)
    model, x = Write(WRITES[name]).eval(), torch.randn(2, 6, 8)
    with torch.no_grad():
        want = model(x.clone())
    gm = torch.export.export(model, (x,)).module()
    assert functionalize_inplace(gm)
    assert not [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).split(".")[-2].endswith("_")]
    with torch.no_grad():
        torch.testing.assert_close(gm(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(set(WRITES) - {"diagonal"}))
def test_quantized_writes_reach_the_output(name):
    """PT2E's graph keeps the write (within 0.1 of the output's range of the float model; a lost
    write is off by 0.5 to 10 times the range), vkq's program matches PT2E op by op, all of it
    on Vulkan."""
    torch.manual_seed(1)
    model, x = Write(WRITES[name]).eval(), torch.randn(1, 6, 8)
    calibration = [(torch.randn(1, 6, 8),) for _ in range(4)]
    gm = api.quantize(model, (x,), calibration, progress=False)
    with torch.no_grad():
        want, got = model(x.clone()), gm(x)
    assert (got - want).abs().max() < 0.1 * want.abs().max(), name
    program = lower(gm, (x,))
    assert program.fallback == []
    assert_matches_pt2e(program, gm, x)


class Head(nn.Module):
    """A YOLO-style detection head: conv, sigmoid, the box decoded by writes into its slices."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 12, 1)

    def forward(self, x):
        y = self.conv(x).sigmoid().view(x.shape[0], 2, 6, x.shape[2], x.shape[3]).permute(0, 1, 3, 4, 2)
        y = y.contiguous()
        y[..., 0:2] = y[..., 0:2] * 2 - 0.5
        y[..., 2:4] = (y[..., 2:4] * 2) ** 2 * 3.0
        return y.view(x.shape[0], -1, 6)


def test_head_with_slice_writes_on_vulkan(device):
    """The head's program on the device equals its reference bit for bit, and the reference
    follows the float model (the box columns written, not PT2E's copy of them left as they were)."""
    torch.manual_seed(2)
    model, x = Head().eval(), torch.randn(1, 8, 5, 7)
    gm = api.quantize(model, (x,), [(torch.randn(1, 8, 5, 7),) for _ in range(4)], progress=False)
    program = lower(gm, (x,))
    assert program.fallback == []
    xs = x.numpy()
    got, ref = VulkanExecutor(program, device)(xs), run_reference(program, xs)
    np.testing.assert_array_equal(got, ref)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(ref - want).max() < 0.05 * np.abs(want).max()
    assert np.abs(ref[..., 2:4] - want[..., 2:4]).max() < 0.1 * np.abs(want[..., 2:4]).max()


def test_a_write_through_an_unknown_view_is_refused():
    """A view op with no write-back rule: refused by name at quantization, not computed wrong."""
    class Unfold(nn.Module):
        def forward(self, x):
            y = x * 2
            y.unfold(2, 2, 2).mul_(3.0)
            return y
    x = torch.randn(1, 4, 6)
    with pytest.raises(NotImplementedError, match="unfold"):
        api.quantize(Unfold().eval(), (x,), progress=False)


def test_a_write_into_a_copy_stays_there():
    """contiguous() of a permuted tensor and reshape() of one its strides cannot view are copies:
    a write into them leaves the tensor they copied as it was; of a contiguous tensor they are
    views, and the write reaches it."""
    class Copies(nn.Module):
        def forward(self, x):
            y = x * 2
            t = y.permute(0, 2, 1)
            c, r = t.contiguous(), t.reshape(1, -1)
            c[:, 0] = 100.0
            r[:, 1] = 200.0
            v = y.contiguous()                    # a view: y is contiguous
            v[:, :, 0] = 300.0
            return y + c.sum() + r.sum()
    model, x = Copies().eval(), torch.randn(1, 4, 6)
    with torch.no_grad():
        want = model(x.clone())
    gm = torch.export.export(model, (x,)).module()
    functionalize_inplace(gm)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), want, rtol=0, atol=0)
