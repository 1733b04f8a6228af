"""Ops and op forms that models use and that ran in torch on the CPU (or failed to build), each
now lowered to kernels: a small module in the form an architecture writes it, quantized under
the schemes it meets, lowered with nothing left on the CPU, run on each test device and compared
with the program's reference and with PT2E's eager output (and, where it says, torch's float
model). tools/probe_hf.py found most of them in Hugging Face architectures; the architecture is
named beside each."""
import os
import tempfile
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import oputil
from test_lower import assert_matches_pt2e, batches, cosine, ops
from vkq import api
from vkq.executor import run_reference
from vkq.lower import lower
from vkq.registry import cpu_reason

warnings.filterwarnings("ignore", category=UserWarning)


def lowered(model, inputs, calibration, scheme):
    """(program, PT2E's converted module): the model quantized and lowered, nothing on the CPU."""
    gm = api.quantize(model, inputs, calibration=calibration, scheme=scheme, progress=False)
    program = lower(gm, inputs)
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    return program, gm


def assert_int8_agrees(got, ref, want, full, min_cos=0.99):
    """Vulkan's int8 output equals the reference's bit for bit, PT2E's (want) within one output
    step, and the float model's (full) to cosine >= min_cos."""
    np.testing.assert_array_equal(got, ref)
    step = float(np.abs(np.diff(np.unique(want))).min())
    assert np.abs(got - want).max() <= step * 1.01
    assert cosine(got, full) >= min_cos


def on_device(program, device, inputs):
    """(Vulkan's output, the reference's) of the program on the torch tensors `inputs`."""
    arrays = [t.numpy() for t in inputs]
    return oputil.VulkanExecutor(program, device)(*arrays), run_reference(program, *arrays)


class PositionsFromInputs(nn.Module):
    """RoBERTa's embeddings (position ids: a cumsum of the padding mask; token types gathered
    from a buffer at those positions) and DETR's sine positions (a cumsum of a bool mask as
    floats), in a few lines."""

    def __init__(self, pad=1, d=8):
        super().__init__()
        self.pad = pad
        self.positions = nn.Embedding(40, d)
        self.register_buffer("token_types", torch.zeros(1, 40, dtype=torch.long))
        self.types = nn.Embedding(2, d)
        self.fc = nn.Linear(d, d)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.pad
        types = torch.gather(self.token_types.expand(ids.shape[0], -1), 1, pos)
        rows = torch.cumsum(ids.ne(self.pad), 1, dtype=torch.float32)
        h = self.positions(pos) + self.types(types) + rows.unsqueeze(-1) / 16
        return self.fc(h)


def test_positions_computed_from_the_input_run_on_vulkan(device):
    """cumsum and a gather by a computed index (RoBERTa, MPNet, DETR's sine positions) ran in
    torch on the CPU, so the saved program needed torch to run: now int32 and float kernels,
    bit for bit with the reference, and the reference with PT2E."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 6, (2, 13), generator=g)
    ids[0, -4:] = 1                                     # padding
    model = PositionsFromInputs().eval()
    calib = [(torch.randint(0, 6, (2, 13), generator=g),) for _ in range(3)]
    gm = api.quantize(model, (ids,), calibration=calib, progress=False)
    program = lower(gm, (ids,))
    assert program.fallback == [] and {"cumsum", "gather"} <= set(ops(program)), ops(program)
    assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    assert not any(n.op == "torch_op" for n in program.nodes)
    oputil.assert_program_on_device(program, device, ids.numpy())
    assert_matches_pt2e(program, gm, ids)


class Einsums(nn.Module):
    """einsum as models write it: attention scores and values (XLNet, Funnel, hand-written
    attention), a linear map, an outer product, a transpose, a reduction, an ellipsis and three
    operands."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.w = nn.Parameter(torch.randn(8, 6, generator=g) / 3)
        self.u = nn.Parameter(torch.randn(6, 5, generator=g) / 3)

    def forward(self, x):                                        # x (2, 3, 7, 8): batch, heads, length, dim
        s = torch.einsum("bhid,bhjd->bhij", x, x).softmax(-1)
        a = torch.einsum("bhij,bhjd->bihd", s, x)                 # (2, 7, 3, 8)
        y = torch.einsum("bihd,de->bihe", a, self.w)              # (2, 7, 3, 6)
        o = torch.einsum("bi,bj->bij", y[:, 0, 0], y[:, 1, 1])     # outer (2, 6, 6)
        t = torch.einsum("bij->bji", o) + torch.einsum("bii->bi", o).unsqueeze(-1)
        z = torch.einsum("...ij,...jk->...ik", t, torch.einsum("ij,jk,kl->il", self.w[:6], self.w[:6].t(), self.u))
        return torch.einsum("bij->b", z).unsqueeze(-1) * 0.01 + torch.einsum("bihe->be", y)


def test_einsum_runs_as_its_decomposition_on_vulkan(device):
    """Each einsum becomes the permutes, views and bmm (or mul and sum) torch computes it with:
    nothing on the CPU (XLNet and Funnel had one there per attention), and the program agrees
    with the reference bit for bit and with PT2E, under the static and the dynamic scheme."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 7, 8, generator=g)
    for scheme in ("static", "dynamic"):
        program, gm = lowered(Einsums().eval(), (x,), batches((2, 3, 7, 8)), scheme)
        assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.995
        assert cosine(got, Einsums().eval()(x).detach().numpy()) >= 0.98


class OtherSpellings(nn.Module):
    """Ops under the names models use: torch.multiply / true_divide / subtract / clip / greater /
    square (ConvBERT, RWKV), a pad by negative amounts (RWKV's time shift crops a row) and
    nn.Unfold with padding (ConvBERT's span convolution)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.unfold = nn.Unfold(kernel_size=(3, 1), padding=(1, 0))

    def forward(self, x):                                           # x (2, 5, 6)
        h = self.fc(x)
        shifted = F.pad(h, (0, 0, 1, -1))                          # each row gets the one before
        g = torch.multiply(torch.square(h), torch.clip(shifted, -1.0, 1.0))
        g = torch.true_divide(torch.subtract(g, h), 2.0)
        g = torch.where(torch.greater(h, 0.0), g, h)
        spans = self.unfold(g.transpose(1, 2).unsqueeze(-1))        # (2, 6 * 3, 5)
        return spans.transpose(1, 2) + F.pad(h, (1, -1)).repeat(1, 1, 3)


def test_other_spellings_of_ops_run_on_vulkan(device):
    """Aliases, square, negative padding and a padded unfold ran in torch on the CPU: now each is
    the op it names, a slice and a pad, or a pad and a gather; the program agrees with the
    reference and with PT2E under both schemes."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(OtherSpellings().eval(), (x,), batches((2, 5, 6)), scheme)
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.995


class MovedAxes(nn.Module):
    """MaxViT's grid attention moves axes with swapaxes; movedim / moveaxis / swapdims the same."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(5, 4)

    def forward(self, x):                                           # x (2, 3, 5, 6)
        h = self.a(x)
        y = torch.swapaxes(h, 1, 2) + torch.movedim(h, 2, 1)       # (2, 5, 3, 6)
        z = torch.moveaxis(y, (0, 3), (3, 1)).swapdims(-1, 1)       # (5, 6, 3, 2) -> (5, 2, 3, 6)
        return self.b(torch.movedim(z, 0, -1))                      # (2, 3, 6, 5) -> (2, 3, 6, 4)


def test_moved_axes_are_int8_permutes(device):
    """swapaxes / swapdims / movedim / moveaxis are the transposes and permutes they name: int8
    permutes where the values are int8, no gather by an index map (they ran as dequantize, a
    float gather with an index constant the tensor's size, quantize); the program agrees with
    the reference and with PT2E op by op."""
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(4))
    program, gm = lowered(MovedAxes().eval(), (x,), batches((2, 3, 5, 6)), "static")
    names = ops(program)
    assert "take" not in names and not program.fallback, names
    got, ref = on_device(program, device, (x,))
    np.testing.assert_array_equal(got, ref)
    assert assert_matches_pt2e(program, gm, x, min_cos=0.999) >= 3


class MatrixTransposes(nn.Module):
    """x.T, x.mT / mH / H and adjoint(), and 2-D products of two activations (a single-head
    attention over a token list, CSATv2's q @ k.T, a Gram matrix)."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(6, 4), nn.Linear(6, 4), nn.Linear(6, 6)

    def forward(self, x):                                           # x (7, 6)
        attn = (self.q(x) @ self.k(x).T).softmax(-1)
        gram = torch.mm(x, x.t())                                   # (7, 7)
        y = self.v(attn @ x + gram @ x)
        return y.mT.mT + y.unsqueeze(0).mH.mT[0] + y.H.T + y.adjoint().T


def test_matrix_transposes_and_products_of_activations_run_on_vulkan(device):
    """x.T / mT / mH / H / adjoint() ran in torch on the CPU (permutes now), and mm(x, t(y)) of
    two activations became a linear with an activation as its weight, which no kernel takes (a
    matmul now: int8 under the static scheme)."""
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(6))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(MatrixTransposes().eval(), (x,), batches((7, 6)), scheme)
        assert not program.fallback and not any(n.op == "torch_op" for n in program.nodes), program.fallback
        assert sum(o.startswith("matmul") for o in ops(program)) >= 3, ops(program)
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.995
        if scheme == "static":
            assert assert_matches_pt2e(program, gm, x, min_cos=0.99) >= 3


class PadByNothing(nn.Module):
    """Swin pads its windows up to a multiple of the window size: by 0 on every side at 224."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 4)

    def forward(self, x):                                           # x (2, 5, 6)
        return self.b(F.pad(self.a(x), (0, 0, 0, 0))) + F.pad(x, (0, 0), value=1.0).sum(-1, keepdim=True)


def test_a_pad_by_nothing_is_no_copy(device):
    """A constant pad by zeros is its input: no constant_pad_nd (a copy of the tensor) in the
    program under either scheme, and the program agrees with the reference and with PT2E."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(3))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(PadByNothing().eval(), (x,), batches((2, 5, 6)), scheme)
        assert "constant_pad_nd" not in {n.op for n in program.nodes}, [n.op for n in program.nodes]
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.995


class PatchesAndBack(nn.Module):
    """MobileViTV2's unfolding: a map into non-overlapping patches (F.unfold, kernel = stride) and
    back (F.fold) around a linear over each patch; and an overlapping fold (kernel 3, stride 2),
    which sums where windows meet."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4 * 4, 4 * 4)

    def forward(self, x):                                           # x (2, 3, 10, 6)
        p = F.unfold(self.conv(x), kernel_size=2, stride=2)         # (2, 16, 15)
        y = F.fold(self.fc(p.transpose(1, 2)).transpose(1, 2), (10, 6), kernel_size=2, stride=2)
        return y, F.fold(p[:, :, :12], (6, 4), kernel_size=(2, 1), stride=(2, 1))


def test_non_overlapping_fold_runs_on_vulkan(device):
    """col2im (F.fold) ran on the CPU: where its windows do not overlap (each output one input
    value, or none) it is a gather now, under both schemes."""
    x = torch.randn(2, 3, 10, 6, generator=torch.Generator().manual_seed(4))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(PatchesAndBack().eval(), (x,), batches((2, 3, 10, 6)), scheme)
        assert "take" in {n.op for n in program.nodes}
        got, ref = on_device(program, device, (x,))
        for a, b, w in zip(got, ref, gm(x)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())
            assert cosine(a, w.detach().numpy()) >= 0.995


class OutlookFold(nn.Module):
    """VOLO's outlook attention folds its weighted windows back with overlap (kernel 3, stride
    2, padding 1, an output size one past the windows' reach: output padding 1)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 6, 1)

    def forward(self, x):                                           # x (2, 4, 9, 11)
        cols = F.unfold(self.a(x), 3, padding=1, stride=2)          # (2, 36, 30)
        return self.b(F.fold(cols * 0.5 + 0.1, (9, 11), kernel_size=3, padding=1, stride=2))


def test_overlapping_fold_sums_on_vulkan(device):
    """An overlapping col2im sums each output over the windows that cover it: it ran on the CPU;
    now it is a transposed conv by a one-hot weight, a group a channel (normalize_ops), which
    runs as a conv (int8 under the static scheme: the one-hot weight is exact). The program
    agrees with the reference and with PT2E, and a bare fold equals torch's."""
    x = torch.randn(2, 4, 9, 11, generator=torch.Generator().manual_seed(5))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(OutlookFold().eval(), (x,), batches((2, 4, 9, 11)), scheme)
        assert "col2im" not in str([n.attrs.get("target") for n in program.nodes])
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.999
        assert cosine(got, OutlookFold().eval()(x).detach().numpy()) >= 0.99
    overlapping = _Lambda(lambda t: F.fold(t, (7, 7), kernel_size=3, stride=2))
    t = torch.randn(1, 9, 9, generator=torch.Generator().manual_seed(6))
    program, gm = lowered(overlapping, (t,), [(torch.randn(1, 9, 9),)], "dynamic")
    got, ref = on_device(program, device, (t,))
    np.testing.assert_allclose(got, overlapping(t).numpy(), rtol=1e-5, atol=1e-5)
    assert (overlapping(torch.ones(1, 9, 9)) > 1).any()                 # (windows do overlap)


class FloatActivations(nn.Module):
    """Activations the linear-only schemes leave in float (Mamba's softplus, YOLO's leaky relu,
    Mish, ELU) and float maths on activations (log, log1p, log2, erf, rounding, a fractional
    power as local response norm takes, a mean over everything)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):     # (weights of their own: floor and round of the
            torch.manual_seed(0)                     # device's last-bit-apart sums can step otherwise)
            self.a, self.b = nn.Linear(6, 12), nn.Linear(12, 6)

    def forward(self, x):
        h = self.a(x)
        h = F.leaky_relu(h, 0.2) + F.elu(h, 0.7) + F.softplus(h, beta=2.0, threshold=4.0) + F.mish(h)
        h = h + torch.log(torch.abs(h) + 1.0) + torch.erf(h) + torch.floor(h) * torch.sign(h) + torch.round(h)
        h = h + torch.log1p(h.abs()) - torch.log2(h * h + 1.0) + (h.abs() + 0.5) ** 0.75 - h.mean()
        return self.b(h)


def test_float_activations_run_on_vulkan(device):
    x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(6))
    program, gm = lowered(FloatActivations().eval(), (x,), batches((3, 5, 6)), "dynamic")
    assert {"leaky_relu", "elu", "softplus", "mish", "log", "erf", "floor", "sign", "round", "log1p", "log2", "pow",
            "mean"} <= set(ops(program))
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999


class Upsampler(nn.Module):
    """A segmentation / depth decoder's transposed convs (DPT's, U-Net's): kernel = stride, the
    common k4 s2 p1, and an odd one with output padding and groups."""

    def __init__(self):
        super().__init__()
        self.a = nn.ConvTranspose2d(4, 6, 2, stride=2)
        self.b = nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1)
        self.c = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_transposed_convs_run_on_vulkan_under_the_linear_only_schemes(device, scheme):
    """Under the schemes that quantize linears only, a transposed conv becomes the conv of its
    phases and a pixel shuffle, as under static (conv_transpose_as_conv): a float conv (or, for
    kernel = stride, a linear over pixels) and a gather, instead of torch on the CPU."""
    x = torch.randn(1, 4, 5, 7, generator=torch.Generator().manual_seed(8))
    model = Upsampler().eval()
    program, gm = lowered(model, (x,), batches((1, 4, 5, 7)), scheme)
    got, ref = on_device(program, device, (x,))
    assert got.shape == (1, 6, 40, 56)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


class PyramidPool(nn.Module):
    """PSPNet's / UperNet's pyramid pooling: adaptive average pools to 1, 2, 3 and 6 (uneven on
    a 13 x 10 map), each a 1x1 conv, upsampled back and concatenated."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.heads = nn.ModuleList(nn.Conv2d(8, 4, 1) for _ in range(4))

    def forward(self, x):
        h = torch.relu(self.stem(x))
        outs = [h] + [F.interpolate(head(F.adaptive_avg_pool2d(h, s)), size=h.shape[-2:], mode="bilinear",
                                    align_corners=False) for s, head in zip((1, 2, 3, 6), self.heads)]
        return torch.cat(outs, 1)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_pyramid_pooling_runs_on_vulkan(device, scheme):
    """Uneven adaptive average pools: int8 under static (adaptive_avg_pool2d_q8), float under the
    dynamic scheme (a matmul by the averaging matrix; before, torch on the CPU)."""
    x = torch.randn(1, 3, 13, 10, generator=torch.Generator().manual_seed(9))
    program, gm = lowered(PyramidPool().eval(), (x,), batches((1, 3, 13, 10)), scheme)
    pools = [n.op for n in program.nodes if "adaptive" in n.op or n.op == "mean"]
    assert len(pools) == 4, pools
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999


class Tubelets(nn.Module):
    """A video transformer's tubelet embedding (VideoMAE, ViViT): a conv3d with kernel = stride,
    here with frames and rows the kernel leaves over (PyTorch drops them), then a linear."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv3d(3, 8, (2, 4, 3), stride=(2, 4, 3))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.embed(x).flatten(2).transpose(1, 2))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_conv3d_tubelets_run_as_a_linear(device, scheme):
    """conv3d has no kernel; with kernel = stride it is a linear over tubelets (time folded into
    the batch and the channels first, so every copy stays within the kernels' 6 dims)."""
    x = torch.randn(2, 3, 5, 9, 10, generator=torch.Generator().manual_seed(10))
    model = Tubelets().eval()
    program, gm = lowered(model, (x,), batches((2, 3, 5, 9, 10)), scheme)
    assert any(n.op.startswith("linear") for n in program.nodes)
    got, ref = on_device(program, device, (x,))
    assert got.shape == (2, 2 * 2 * 3, 5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_video_network_runs_on_vulkan_under_the_linear_only_schemes(device, scheme):
    """Under the schemes that quantize linears only, conv3d, the 3-D pools and batch norms run as
    float 2-D kernels over the frames (three_d_as_two_d; before: float on the CPU), and 1x1x1
    convs of the squeeze-excitation as linears."""
    from test_end_to_end import VideoCNN
    x = torch.randn(2, 3, 5, 17, 20, generator=torch.Generator().manual_seed(11))
    model = VideoCNN().eval()
    program, gm = lowered(model, (x,), batches((2, 3, 5, 17, 20)), scheme)
    ops = [n.op for n in program.nodes]
    assert ops.count("conv2d") == 5 and ops.count("take") == 4 and ops.count("max_pool2d") == 3, ops
    got, ref = on_device(program, device, (x,))
    assert got.shape == (2, 7)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    assert cosine(got, model(x).detach().numpy()) >= 0.999


class VideoResidualOnInput(nn.Module):
    """3-D layers around 5-D tensors no 3-D layer made: a residual add of the input itself, a
    temporal conv whose stride skips frames (kt = 1, st = 2) and a 5-D output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(4, 4, (3, 3, 1), padding=(1, 1, 0))
        self.skip = nn.Conv3d(4, 6, (1, 2, 2), (2, 1, 1), bias=False)

    def forward(self, x):
        return self.skip(F.hardswish(x + torch.relu(self.conv(x))))


def test_video_layers_on_tensors_made_elsewhere_run_int8_on_vulkan(device):
    """The add of the (int8) input and a conv3d's frames runs on the frames, one permute bringing
    the input there (before: add_q8 and the table on 5-D ROW tensors, on the CPU; now both in the
    conv's epilogue); Vulkan equals the reference bit for bit and PT2E within one step."""
    x = torch.randn(2, 4, 5, 7, 6, generator=torch.Generator().manual_seed(12))
    model = VideoResidualOnInput().eval()
    program, gm = lowered(model, (x,), batches((2, 4, 5, 7, 6)), "static")
    ops = [n.op for n in program.nodes]
    assert ops.count("conv2d_q8") == 2 and ops.count("take") == 2, ops     # (the add, the table: in an epilogue)
    got, ref = on_device(program, device, (x,))
    assert got.shape == (2, 6, 3, 6, 5)
    assert_int8_agrees(got, ref, gm(x).detach().numpy(), model(x).detach().numpy())


class VolumeUNet(nn.Module):
    """A 3-D U-Net as medical-imaging and video models build one: conv3d + BatchNorm3d, a 2x2x2
    average pool down, a 2x2x2 stride-2 ConvTranspose3d up and a skip cat, then a 3x3x3 stride-2
    grouped ConvTranspose3d with output padding and a BatchNorm3d (its taps read frames q and
    q - 1, its frames are cropped)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.enc = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU())
            self.down = nn.Sequential(nn.AvgPool3d(2), nn.Conv3d(8, 12, 3, padding=1), nn.BatchNorm3d(12), nn.ReLU())
            self.up = nn.ConvTranspose3d(12, 8, 2, 2)
            self.fuse = nn.Sequential(nn.Conv3d(16, 8, 3, padding=1), nn.ReLU())
            self.out = nn.Sequential(nn.ConvTranspose3d(8, 6, 3, 2, 1, output_padding=1, groups=2), nn.BatchNorm3d(6))
            for m in self.modules():
                if isinstance(m, nn.BatchNorm3d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        e = self.enc(x)
        return self.out(self.fuse(torch.cat([self.up(self.down(e)), e], 1)))


def test_volume_unet_runs_int8_on_vulkan(device):
    """ConvTranspose3d, a 2x2x2 AvgPool3d and a skip cat of 5-D tensors run int8 on the frames
    (before: the transposed convs and the pool in float on the CPU, "no int8 Vulkan kernel", the
    cat in float; a grouped ConvTranspose3d + BatchNorm3d failed in prepare_pt2e's fusion).
    Vulkan == reference bit for bit, PT2E within one step, the float model close."""
    x = torch.randn(2, 3, 4, 10, 12, generator=torch.Generator().manual_seed(13))
    model = VolumeUNet().eval()
    program, gm = lowered(model, (x,), batches((2, 3, 4, 10, 12)), "static")
    assert not program.fallback, program.fallback
    ops = [n.op for n in program.nodes]
    # enc, down (+ the pool as a 2x2x2 depthwise conv over its taps), up, fuse, out
    assert ops.count("conv2d_q8") == 6 and "cat_q8" in ops and "dequantize" not in ops[:-1], ops
    got, ref = on_device(program, device, (x,))
    assert got.shape == (2, 6, 8, 20, 24)
    assert_int8_agrees(got, ref, gm(x).detach().numpy(), model(x).detach().numpy())


class FrameConv(nn.Module):
    """A seeded (1, 3, 3) conv3d 4 -> 8 before the 3-D op a subclass's forward tries."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv = nn.Conv3d(4, 8, (1, 3, 3), padding=(0, 1, 1))


class VolumeResizes(FrameConv):
    """The 3-D resizes and a mean over T, H, W: trilinear (a scale, and a size with
    align_corners), nearest and nearest-exact."""

    def forward(self, x):
        h = torch.relu(self.conv(x))
        tri = F.interpolate(h, scale_factor=(2, 1.5, 2), mode="trilinear")
        tri2 = F.interpolate(h, size=(5, 8, 9), mode="trilinear", align_corners=True)
        near = F.interpolate(h, size=(5, 8, 9), mode="nearest")
        exact = F.interpolate(h, scale_factor=(1.5, 1.5, 1.5), mode="nearest-exact")
        return tri.mean((2, 3, 4)), tri2 + near, exact


def test_volume_resizes_run_int8_on_vulkan(device):
    """upsample_trilinear3d (before: float on the CPU) is a bilinear resize of each frame, then
    one down T (two roundings at the one scale bilinear shares with its input); nearest /
    nearest-exact 3-D (before: a gather in float) the 2-D one on each frame and a take of
    frames; a mean over T, H, W a global pool (before: float). All int8 on Vulkan, Vulkan ==
    reference, PT2E within one step."""
    x = torch.randn(1, 4, 3, 6, 7, generator=torch.Generator().manual_seed(14))
    model = VolumeResizes().eval()
    program, gm = lowered(model, (x,), batches((1, 4, 3, 6, 7)), "static")
    assert not program.fallback, program.fallback
    ops = [n.op for n in program.nodes]
    assert ops.count("upsample_bilinear2d") == 4 and ops.count("upsample_nearest2d") == 2, ops
    assert ops.count("adaptive_avg_pool2d_q8") == 1 and ops.count("dequantize") == 3, ops   # (the outputs')
    gots, refs = on_device(program, device, (x,))
    wants = [w.detach().numpy() for w in gm(x)]
    for got, ref, want, full in zip(gots, refs, wants, model(x)):
        assert_int8_agrees(got, ref, want, full.detach().numpy())
    assert gots[1].shape == (1, 8, 5, 8, 9) and gots[2].shape == (1, 8, 4, 9, 10)


class UnevenMean(FrameConv):
    """An AvgPool3d whose border windows count only the pixels they cover (count_include_pad=False
    with padding): no one divisor, so no conv."""

    def forward(self, x):
        return F.avg_pool3d(torch.relu(self.conv(x)), (3, 3, 2), (2, 2, 1), (1, 1, 0), count_include_pad=False)


def test_a_mean_of_means_is_not_int8():
    """In int8 that pool would be a mean of the frames' means, rounded twice at two scales (the
    first clipped to its own observed range: 25 steps off one-rounding's in a probe): it stays on the CPU,
    named, under the static scheme (under the float ones it runs on Vulkan: below)."""
    x = torch.randn(1, 4, 3, 6, 7, generator=torch.Generator().manual_seed(14))
    gm = api.quantize(UnevenMean().eval(), (x,), calibration=batches((1, 4, 3, 6, 7)), progress=False)
    program = lower(gm, (x,))
    assert [op for op, _ in program.fallback] == ["aten.avg_pool3d"], program.fallback


class ChannelsLastVolume(nn.Module):
    """The blocks of Swin3D and SwinUNETR between their attentions: linears, a GELU, a residual
    add and a sigmoid gate on channels-last volumes (B, D, H, W, C), rank-5 tensors."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.fc1, self.fc2 = nn.Linear(6, 20), nn.Linear(20, 6)
            self.gate, self.head = nn.Linear(6, 6), nn.Linear(6, 5)

    def forward(self, x):
        x = x.permute(0, 2, 3, 4, 1)
        x = x + self.fc2(F.gelu(self.fc1(x)))
        return self.head(x * torch.sigmoid(self.gate(x)))


def test_channels_last_volumes_run_int8_on_vulkan(device):
    """Linears on rank-5 tensors run int8 on the tensor viewed as (rows, C) (before: "input has
    rank > 4", in float on the CPU), the elementwise int8 kernels (the residual add, the gate's
    mul) read rank-5 tensors in their ROW layout (before: on the CPU, "its kernel takes int8 in
    4W4C/4H4W"), and the GELU and sigmoid tables and the last dequantize fold into the linears
    through the view back (no dispatch of their own, no repack to ROW and back between fc1 and
    fc2). 105 rows of 6: the ROW tensors' 630 values end inside a block."""
    x = torch.randn(1, 6, 3, 5, 7, generator=torch.Generator().manual_seed(16))
    model = ChannelsLastVolume().eval()
    program, gm = lowered(model, (x,), batches((1, 6, 3, 5, 7)), "static")
    assert not program.fallback, program.fallback
    assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    found = [n.op for n in program.nodes]
    assert found.count("linear_q8") == 4 and {"add_q8", "mul_q8"} <= set(found) and "lut_q8" not in found, found
    assert found.count("repack") == 5, found      # (105, 6) <-> (1, 3, 5, 7, 6) around each block, no more
    assert {program.tensors[n.outputs[0]].layout for n in program.nodes if n.op in ("add_q8", "mul_q8")} == {"ROW"}
    fused = [(bool(n.attrs.get("lut")), bool(n.attrs.get("dequant"))) for n in program.nodes if n.op == "linear_q8"]
    assert fused == [(True, False), (False, False), (True, False), (False, True)], fused
    got, ref = on_device(program, device, (x,))
    assert got.shape == (1, 3, 5, 7, 5)
    assert_int8_agrees(got, ref, gm(x).detach().numpy(), model(x).detach().numpy())


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
@pytest.mark.parametrize("model", ["unet", "resizes", "uneven", "channels_last"])
def test_volume_layers_run_on_vulkan_under_the_linear_only_schemes(device, scheme, model):
    """Under the schemes that quantize linears only, the same rewrites give float 2-D kernels
    (before: the transposed convs, pools and trilinear resizes on the CPU), the uneven mean as a
    mean of the frames' means (exact in float), the rank-5 linears over rows."""
    shape, model = {"unet": ((2, 3, 4, 10, 12), VolumeUNet()), "resizes": ((1, 4, 3, 6, 7), VolumeResizes()),
                    "uneven": ((1, 4, 3, 6, 7), UnevenMean()),
                    "channels_last": ((1, 6, 3, 5, 7), ChannelsLastVolume())}[model]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(15))
    program, gm = lowered(model.eval(), (x,), batches(shape), scheme)
    gots, refs = on_device(program, device, (x,))
    gots, refs = (gots, refs) if isinstance(gots, (list, tuple)) else ([gots], [refs])
    wants = gm(x)
    for got, ref, want in zip(gots, refs, wants if isinstance(wants, (list, tuple)) else [wants]):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
        assert cosine(got, want.detach().numpy()) >= 0.9999


class EmptyPassThrough(nn.Module):
    """Partial rotary embeddings with the rotary part the whole head (Phi-3): the pass-through
    half x[..., d:] is empty, and is concatenated back."""

    def __init__(self):
        super().__init__()
        self.fc, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc(x)
        rot, rest = h[..., :8], h[..., 8:]
        rot = torch.cat([-rot[..., 4:], rot[..., :4]], -1)
        return self.fc2(torch.cat([rot, rest], -1))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_empty_tensors_build_no_dispatch(device, scheme):
    """An op whose output is empty builds nothing, and a cat skips an empty part (int8 and float):
    Phi-3 failed to build ("slice reads source elements -1..408", "packed int8 tensors need every
    dimension >= 1")."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(11))
    gm = api.quantize(EmptyPassThrough().eval(), (x,), calibration=batches((2, 5, 6)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert any(0 in program.tensors[n.outputs[0]].shape for n in program.nodes)
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999


class StandardizedAndNormed(nn.Module):
    """BiT's weight-standardized conv (its weights normalised by a training-mode batch_norm of
    constants on every call) and LeViT's linear + BatchNorm1d over the features."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc, self.bn = nn.Linear(8, 6), nn.BatchNorm1d(6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        w = self.conv.weight
        w = F.batch_norm(w.reshape(1, 8, -1), None, None, training=True, momentum=0.0, eps=1e-6).reshape_as(w)
        h = torch.relu(F.conv2d(x, w, self.conv.bias, padding=1)).mean((2, 3))
        return self.bn(self.fc(h))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_batch_norms_leave_no_batch_norm_for_convert(device, scheme):
    """A batch norm left in the graph made convert_pt2e re-export its ~100 QAT conv-bn patterns
    (BiT and LeViT: 10-20 s a compile here): a batch norm of constants becomes its value, and
    under the linear-only schemes too a standalone one becomes a depthwise conv, before
    annotation. The values stay PT2E's and the model's."""
    x = torch.randn(2, 3, 6, 7, generator=torch.Generator().manual_seed(12))
    model = StandardizedAndNormed().eval()
    gm = api.quantize(model, (x,), calibration=batches((2, 3, 6, 7)), scheme=scheme, progress=False)
    assert not any("batch_norm" in str(n.target) for n in gm.graph.nodes)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert cosine(got, gm(x).detach().numpy()) >= 0.999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


class HandWrittenNorm(nn.Module):
    """The Annotated Transformer's LayerNorm (a (x - mean) / (std + eps) + b, std unbiased) and
    var / std in their other forms: over several dims, biased, over everything."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(13)
        self.fc = nn.Linear(6, 6)
        self.a, self.b = nn.Parameter(torch.rand(6, generator=g) + 0.5), nn.Parameter(torch.randn(6, generator=g))

    def forward(self, x):
        h = self.fc(x)
        y = self.a * (h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 1e-6) + self.b
        return y + h.var((0, 1)) + torch.std(h, 1, unbiased=False, keepdim=True) + h.std()


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_var_and_std_run_on_vulkan(device, scheme):
    """var and std become the float ops that compute them (mean, subtract, square, sum, divide,
    sqrt) instead of torch on the CPU; against the float model's own var/std within float
    rounding on the float path."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(14))
    model = HandWrittenNorm().eval()
    program, gm = lowered(model, (x,), batches((2, 5, 6)), scheme)
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(got).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    from vkq.passes.decompose_ops import decompose_ops     # the rewrite alone, on floats: torch's values
    h = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(15))
    for f in (lambda t: t.std(-1, keepdim=True), lambda t: t.var((0, 2)), lambda t: torch.std(t, 1, unbiased=False),
              lambda t: t.std(), lambda t: torch.var(t, dim=1, correction=2, keepdim=True)):
        g = torch.export.export(_Lambda(f), (h,)).module()
        assert decompose_ops(g) and not any("var" in str(n.target) or "std" in str(n.target) for n in g.graph.nodes)
        torch.testing.assert_close(g(h), f(h), rtol=1e-5, atol=1e-6)


class _Lambda(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


class SegmentationHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.cls = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 5, 1)

    def forward(self, x):
        logits = self.cls(torch.relu(self.conv(x)))
        return logits.argmax(1), logits.mean((2, 3)).argmin(-1, keepdim=True)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_argmax_at_the_end_runs_on_vulkan(device, scheme):
    """A segmentation map's argmax over classes (and an argmin) at the end of the model: an int32
    kernel, not torch on the CPU; the classes are PT2E's wherever its logits are not tied."""
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(16))
    gm = api.quantize(SegmentationHead().eval(), (x,), calibration=batches((2, 3, 9, 11)), scheme=scheme,
                      progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and {"argmax", "argmin"} <= set(ops(program)), program.fallback
    got, ref = on_device(program, device, (x,))
    want = [t.numpy() for t in gm(x)]
    for g, r, w in zip(got, ref, want):
        np.testing.assert_array_equal(g, r)
        assert g.shape == w.shape and np.mean(g == w) >= 0.95


class PickTokens(nn.Module):
    """Rows picked by indices the model computes: CLIP's pooled text output
    x[arange(B), ids.argmax(-1)], a negative index (the last token, counted from the end), and
    one index tensor over the first dim only."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, ids):
        h = self.fc(x)                                             # (2, 7, 6)
        pooled = h[torch.arange(h.shape[0]), ids.argmax(-1)]      # (2, 6)
        last = h[torch.arange(h.shape[0]), ids.argmin(-1) - 7]    # negative: counted from the end
        first = h[ids[:, :3].argmax(0)]                            # (3, 7, 6), one index over dim 0
        return pooled + last + first.sum((0, 1))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_indexing_by_computed_indices_runs_on_vulkan(device, scheme):
    """x[i0, i1] with indices computed on the device is the embedding gather of x's rows by the
    flat row index (negative indices wrapped): bit for bit with the reference and with PT2E."""
    g = torch.Generator().manual_seed(17)
    x, ids = torch.randn(2, 7, 6, generator=g), torch.randint(0, 50, (2, 7), generator=g)
    program, gm = lowered(PickTokens().eval(), (x, ids), [(torch.randn(2, 7, 6, generator=g), ids)], scheme)
    assert sum(n.op == "embedding" for n in program.nodes) == 3
    got, ref = on_device(program, device, (x, ids))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    assert cosine(got, gm(x, ids).detach().numpy()) >= 0.9999


class HandWrittenSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        e = torch.exp(h - h.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True) + (h.max() - h.amin((0, 1))) * 0.1


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_amax_amin_max_min_run_on_vulkan(device, scheme):
    """amax / amin / max() / min() as float reductions (a hand-written softmax's row max), not
    torch on the CPU."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(18))
    program, gm = lowered(HandWrittenSoftmax().eval(), (x,), batches((2, 5, 6)), scheme)
    assert {"amax", "amin"} <= set(ops(program))
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999


class SpeechPReLU(nn.Module):
    """PReLU with a slope per channel on (N, C, L) (Conv-TasNet's, after a conv1d) and on (N, C)
    (after a linear), slopes of both signs."""

    def __init__(self):
        super().__init__()
        self.c, self.p = nn.Conv1d(4, 6, 3), nn.PReLU(6)
        self.fc, self.q = nn.Linear(6, 5), nn.PReLU(5)
        g = torch.Generator().manual_seed(19)
        with torch.no_grad():
            self.p.weight.copy_(torch.rand(6, generator=g) - 0.5)
            self.q.weight.copy_(torch.rand(5, generator=g) * 0.5)

    def forward(self, x):
        return self.q(self.fc(self.p(self.c(x)).mean(-1)))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_prelu_on_2d_and_3d_runs_on_vulkan(device, scheme):
    """A per-channel PReLU on 2-D and 3-D tensors is the 4-D form viewed around it (int8 under
    static: a clamp and a depthwise conv taking the add), instead of torch on the CPU."""
    x = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(20))
    model = SpeechPReLU().eval()
    program, gm = lowered(model, (x,), batches((2, 4, 11)), scheme)
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


class LogSumExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        masked = h.masked_fill(h > 0.5, float("-inf"))
        return torch.logsumexp(h, -1, keepdim=True) + torch.logsumexp(masked, (0, 2)).sum() + h


def test_logsumexp_runs_on_vulkan(device):
    """logsumexp as ATen computes it (the max taken out, an infinite max counted as 0), on the
    float kernels: within float rounding of torch, -inf where every value is -inf (the rewrite
    alone, on a row of -inf)."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(21))
    model = LogSumExp().eval()
    program, gm = lowered(model, (x,), batches((2, 5, 6)), "dynamic")
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    from vkq.passes.decompose_ops import decompose_ops    # the rewrite alone, on floats: torch's values
    t = torch.tensor([[1.0, 2.0, -float("inf")], [-float("inf")] * 3, [100.0, 100.0, 99.0]])
    for f in (lambda a: torch.logsumexp(a, 1), lambda a: torch.logsumexp(a, (0, 1), keepdim=True)):
        g = torch.export.export(_Lambda(f), (t,)).module()
        assert decompose_ops(g) and not any("logsumexp" in str(n.target) for n in g.graph.nodes)
        torch.testing.assert_close(g(t), f(t))


class ArgmaxOneHot(nn.Module):
    """x.max(dim) and .min(dim) (values and indices: Hiera's pooling), F.one_hot of given ids and
    a one-hot of an argmax made by scatter_ (Gumbel-softmax's hard sample, GroupViT)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.fc = nn.Linear(6, 6)

    def forward(self, x, ids):
        h = self.fc(x)
        values, index = h.max(dim=1)
        hard = torch.zeros_like(h).scatter_(-1, h.argmax(-1, keepdim=True), 1.0)
        return (F.one_hot(ids, 6).float().sum(1) + hard - h.min(dim=-1, keepdim=True).values
                + values[:, None] + index[:, None].float())


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_max_dim_one_hot_and_scatter_run_on_vulkan(device, scheme):
    """max.dim / min.dim (amax and argmax), one_hot (a compare with an arange) and a one-hot
    scatter (a where) ran on the CPU through torch; on the kernels now, equal to the reference
    and to PT2E's output. The rewrites alone, on floats with ties and a NaN: torch's values and
    indices bit for bit."""
    g = torch.Generator().manual_seed(5)
    x, ids = torch.randn(5, 6, generator=g), torch.randint(0, 6, (5, 3), generator=g)
    model = ArgmaxOneHot().eval()
    program, gm = lowered(model, (x, ids), [(torch.randn(5, 6, generator=g), ids)], scheme)
    assert not program.fallback and {"amax", "amin", "argmax", "eq", "where"} <= {n.op for n in program.nodes}
    got, ref = on_device(program, device, (x, ids))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, gm(x, ids).detach().numpy(), atol=1e-2 if scheme == "dynamic" else 1e-6)
    from vkq.passes.decompose_ops import decompose_ops
    t = torch.tensor([[1.0, 3.0, 3.0, -1.0], [2.0, float("nan"), 5.0, 5.0], [0.0, 0.0, -2.0, -2.0]])
    k = torch.tensor([[3, 0], [1, 1], [2, 3]])
    f = lambda a, i: (a.max(1), a.min(0, keepdim=True), F.one_hot(i, 5),
                      torch.full_like(a, -1.0).scatter(1, i[:, :1], 7.0))
    gr = torch.export.export(_Lambda(f), (t, k)).module()
    assert decompose_ops(gr) and not any(str(n.target).split(".")[-2] in ("max", "min", "one_hot", "scatter")
                                         for n in gr.graph.nodes if n.op == "call_function")
    torch.testing.assert_close(gr(t, k), f(t, k), equal_nan=True, rtol=0, atol=0)


class HashedIds(nn.Module):
    """Ids hashed into buckets as CANINE does (multiply, add, remainder), floor divisions (//,
    div(rounding_mode="floor")) and a negated id: integer arithmetic before embedding lookups."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.emb = nn.Embedding(16, 8)

    def forward(self, ids):
        return (self.emb((ids * 7 + 3) % 16) + self.emb(ids // 3) + self.emb(torch.div(ids, 5, rounding_mode="floor"))
                + self.emb(torch.remainder(-ids, 5)) + self.emb(torch.div(ids - 20, 3, rounding_mode="trunc") + 7))


def test_integer_remainder_and_floor_division_run_on_vulkan(device):
    """remainder, floor_divide, div(rounding_mode="trunc") and neg of int64 ids ran on the CPU
    through torch: word_ops now, Python's rounding (the remainder takes the divisor's sign) and
    C's truncation, equal to torch's output."""
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    model = HashedIds().eval()
    program, _ = lowered(model, (ids,), None, "dynamic")
    assert {"remainder", "floor_divide", "trunc_divide", "mul"} <= {n.op for n in program.nodes}
    got, ref = on_device(program, device, (ids,))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, model(ids).detach().numpy())


ELEMENTWISE = {      # name -> f(x, y), x and y float (2, 5, 6); each once with kernels of its own
    "threshold": lambda x, y: F.threshold(x, 0.1, 20.0), "hardshrink": lambda x, y: F.hardshrink(x, 0.3),
    "softshrink": lambda x, y: F.softshrink(x, 0.3), "selu": lambda x, y: F.selu(x), "celu": lambda x, y: F.celu(x, 0.7),
    "rrelu": lambda x, y: F.rrelu(x, training=False), "logsigmoid": lambda x, y: F.logsigmoid(x),
    "heaviside": lambda x, y: torch.heaviside(torch.round(x), y), "frac": lambda x, y: torch.frac(3 * x),
    "isnan": lambda x, y: torch.isnan(torch.log(x)).float(), "nan_to_num": lambda x, y: (torch.nan_to_num(torch.log(x), 0.5)     # (given infinities: not a clamp)
                                                                         + torch.nan_to_num(3 * x / torch.round(x), nan=0.0, posinf=1.0, neginf=-2.0)),
    "lerp": lambda x, y: torch.lerp(x, y, 0.3) + torch.lerp(x, y, 0.8) + torch.lerp(x, y, torch.sigmoid(y)),
    "addcdiv": lambda x, y: torch.addcdiv(x, x, y.abs() + 1, value=0.5), "var_mean": lambda x, y: sum(torch.var_mean(x, -1, keepdim=True))
                                                                          + sum(torch.std_mean(x, 1, keepdim=True, correction=0)),
    "diff": lambda x, y: F.pad(torch.diff(x, dim=1), (0, 0, 0, 1)) + torch.diff(x, dim=-1, prepend=y[..., :2] - 1,
                                                                               append=y[..., -1:]).sum(-1, keepdim=True),
    "reciprocal": lambda x, y: torch.reciprocal(y.abs() + 1),
    "sinc": lambda x, y: torch.sinc(x) + torch.sinc(torch.round(x)),               # (round: sinc(0) = 1)
    "xlogy": lambda x, y: torch.xlogy(torch.round(x), y.abs()),
    "sgn_angles": lambda x, y: torch.sgn(x) + torch.deg2rad(x) - torch.rad2deg(y),
    "nansum": lambda x, y: torch.nansum(torch.log(x), -1, keepdim=True) * y,       # (log of x < 0: NaN)
    "logaddexp": lambda x, y: torch.logaddexp(x, y) + torch.logaddexp2(2 * x, y),
    "division_family": lambda x, y: (torch.remainder(x, 0.7) + torch.fmod(x, y) + torch.floor_divide(x, 0.3)
                                     + torch.div(x, y.abs() + 0.5, rounding_mode="floor") + 2.5 % (x.abs() + 0.5)
                                     + torch.remainder(x, y) + torch.div(x, y, rounding_mode="trunc")
                                     + torch.div(x, 0.25, rounding_mode="trunc")),
    "atan2_hypot_pow": lambda x, y: (torch.atan2(x, y) + torch.hypot(x, y) + torch.copysign(x, y)
                                     + torch.pow(x.abs() + 0.1, y) + 2.0 ** x),
    "cumulative": lambda x, y: (torch.cumprod(0.5 * x + 1, -1) + torch.cummax(x, 1)[0] + torch.cummin(y, -1).values
                                + torch.cummax(torch.round(x), -1).indices + torch.cummin(y, 1)[1]
                                + (0.5 * y + 1).prod(1, keepdim=True) + torch.sigmoid(x).prod()
                                + torch.aminmax(x, dim=1, keepdim=True).max - torch.aminmax(y).min),
    "histc": lambda x, y: torch.cat([torch.histc(x, 7, -1.0, 1.5),                  # (a value on an edge: the upper bin)
                                     torch.cumsum(torch.histc(torch.round(y), 4, -2, 2), 0, dtype=torch.int32).float()]),
    "trig_hyperbolic": lambda x, y: (torch.atan(x) + torch.asin(torch.tanh(y)) + torch.acos(torch.tanh(x)) + torch.tan(y)
                                     + torch.sinh(x) + torch.cosh(y) + torch.asinh(x) + torch.acosh(y.abs() + 1)
                                     + torch.atanh(0.5 * torch.tanh(x)) + torch.expm1(y) + torch.exp2(x)
                                     + torch.log10(y.abs() + 0.1)),
    "gamma_functions": lambda x, y: (torch.lgamma(x.abs() + 0.1) + torch.lgamma(-0.5 * torch.sigmoid(x) - 0.2)  # (-0.7, -0.2):
                                     + torch.special.gammaln(y.abs() + 0.5) + torch.digamma(x.abs() + 0.3)      # no poles, so
                                     + torch.special.psi(y.abs() + 0.5) + torch.erfinv(0.99 * torch.tanh(y))),  # int8 noise stays small
    "bessel_normal": lambda x, y: (torch.i0(x) + torch.special.i0e(y) + torch.special.i1(x) + torch.special.i1e(y)
                                   + torch.special.ndtri(torch.sigmoid(x)) + torch.special.erfcx(y)
                                   + torch.special.log_ndtr(x) + torch.polygamma(1, y.abs() + 0.5)
                                   + torch.special.polygamma(3, x.abs() + 1) + torch.polygamma(0, y.abs() + 1)),
    "count_bucketize": lambda x, y: (torch.count_nonzero(torch.round(x), -1)[..., None].float() * y
                                     + torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5, 2.0])).float()
                                     - torch.bucketize(y, torch.tensor([-0.5, 0.0, 1.0]), right=True, out_int32=True)),
    "clamp_tensors": lambda x, y: torch.clamp(x, min=y, max=y + 1), "maximum": lambda x, y: torch.maximum(x, y) - torch.minimum(x, y),
    "rot90": lambda x, y: torch.rot90(x[:, :, :5], 1, (1, 2)),
    "channel_shuffle": lambda x, y: F.channel_shuffle(x[:, :4, :, None], 2)[..., 0] * y[:, :4],
    "expit": lambda x, y: torch.special.expit(x),
    "cosine_similarity": lambda x, y: (F.cosine_similarity(x, y, dim=-1)[..., None] * x
                                       + F.cosine_similarity(x, 2 * x, dim=1)[:, None]),
    "pairwise_distance": lambda x, y: F.pairwise_distance(x, y, keepdim=True),
    "cdist": lambda x, y: torch.cdist(x, y) + torch.cdist(x, 2 * y, compute_mode="use_mm_for_euclid_dist"),
    "broadcast": lambda x, y: (torch.clamp(x[0], min=y[:1, :1], max=x[:, :, :1] + 1)        # parts of other shapes
                               + torch.lerp(x[:1, :1], x[:1], torch.sigmoid(y))),        # than the result's
    "topk": lambda x, y: (torch.topk(x, 3, -1)[0].sum(-1, keepdim=True)
                          + torch.topk(x, 2, 1, largest=False)[1].float().mean(1, keepdim=True)),
    "any_all_count": lambda x, y: ((x > 0).any(-1).float() + (y > -1).all(1, keepdim=True)[..., 0].float()
                                   + (x > y).sum(-1) + torch.any(x > 1.5).float() + torch.all(y < 9).float()),
}


class Router(nn.Module):
    """A mixture-of-experts router: softmax over 8 experts, the top 2 (weights renormalised, the
    expert ids), as Mixtral and Qwen-MoE write it."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.gate = nn.Linear(6, 8)

    def forward(self, x):
        weights, experts = torch.topk(F.softmax(self.gate(x), -1), 2, dim=-1)
        return weights / weights.sum(-1, keepdim=True), experts


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_topk_routing_runs_on_vulkan(device, scheme):
    """topk ran on the CPU through torch: k rounds of argmax, gather and a where now (decompose_ops),
    the expert ids equal to the reference's and PT2E's (distinct scores), the weights within
    float rounding."""
    x = torch.randn(3, 7, 6, generator=torch.Generator().manual_seed(9))
    program, gm = lowered(Router().eval(), (x,), batches((3, 7, 6)), scheme)
    assert "argmax" in {n.op for n in program.nodes}
    got, ref = on_device(program, device, (x,))
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)        # (the sum: float_reduce, a lane-dependent order)
    weights, experts = (t.detach().numpy() for t in gm(x))
    np.testing.assert_array_equal(got[1], experts)
    np.testing.assert_allclose(got[0], weights, atol=0.02)


class ScatterHeads(nn.Module):
    """Scatters as models write them: a mixture of experts' top-2 weights scattered into a dense
    (tokens, experts) gate (Switch/Mixtral written densely), a graph layer's messages summed into
    nodes over a constant edge list (index_add, PyG's scatter-sum) and max-pooled per graph
    segment (scatter_reduce amax), and an index_copy of rows."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.router, self.msg = nn.Linear(6, 4), nn.Linear(6, 6)
            self.experts = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))
        self.register_buffer("src", torch.tensor([0, 1, 2, 3, 4, 5, 6, 0, 3, 3]))
        self.register_buffer("dst", torch.tensor([1, 2, 3, 4, 5, 6, 0, 5, 1, 1]))
        self.register_buffer("seg", torch.tensor([0, 0, 0, 1, 1, 2, 2]))

    def forward(self, x):                                           # (B, 7 nodes, 6)
        logits = self.router(x)
        top, idx = logits.topk(2, -1)
        gate = torch.zeros_like(logits).scatter(-1, idx, top.softmax(-1))
        moe = sum(gate[..., i:i + 1] * e(x) for i, e in enumerate(self.experts))
        m = self.msg(x)
        agg = torch.zeros_like(m).index_add(1, self.dst, m[:, self.src])
        seg = self.seg[None, :, None].expand_as(m)
        pooled = torch.full_like(m[:, :3], -1e4).scatter_reduce(1, seg, agg, "amax", include_self=False)
        rows = x.index_copy(1, torch.tensor([6, 2]), pooled[:, :2])
        return moe + agg, pooled, rows


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_scatter_family_runs_on_vulkan(device, scheme):
    """scatter (MoE gates), index_add over edges, scatter_reduce and index_copy ran on the CPU
    through torch: the scatter kernel now, equal to the reference bit for bit where the linears
    before it are int8 (static: sums in the index's order), within float rounding where they
    are float (dynamic: the device's dot products sum in another order), and to PT2E's eager
    outputs."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 7, 6, generator=g)
    program, gm = lowered(ScatterHeads().eval(), (x,), [(torch.randn(2, 7, 6, generator=g),)], scheme)
    assert sum(n.op == "scatter" for n in program.nodes) == 4, ops(program)
    got, ref = on_device(program, device, (x,))
    for gv, r, w in zip(got, ref, (t.detach().numpy() for t in gm(x))):
        if scheme == "static":
            np.testing.assert_array_equal(gv, r)
        np.testing.assert_allclose(gv, r, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gv, w, rtol=1e-5, atol=1e-5 if scheme == "static" else 0.05)


class Elementwise(nn.Module):
    def __init__(self, f):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a, self.b, self.f = nn.Linear(6, 6), nn.Linear(6, 6), f

    def forward(self, x):
        return self.f(self.a(x), self.b(x))


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_float_elementwise_rewrites_run_on_vulkan(device, name):
    """Float ops that ran on the CPU through torch, each now the few ops ATen computes it as
    (decompose_ops: threshold, shrinks, selu / celu through elu, rrelu at inference, log_sigmoid,
    heaviside, frac, isnan, nan_to_num, lerp, addcdiv, var_mean / std_mean, diff, cdist, sinc,
    xlogy, count_nonzero, bucketize, sgn, deg2rad / rad2deg, nansum, logaddexp(2), prod, aminmax, histc, cumsum to integers; scans:
    cumprod, cummax / cummin values and indices; float_unary:
    the inverse trigonometric and hyperbolic functions, tan, expm1, exp2, log10, lgamma, digamma,
    erfinv, i0, i0e, i1, i1e, ndtri, erfcx (log_ndtr's), polygamma; word_ops: float
    remainder, fmod, floor and trunc division, atan2, hypot, copysign, pow of tensors; lower: maximum / minimum,
    clamp by tensors, reciprocal, rot90 and channel_shuffle as gathers): on Vulkan under the
    dynamic scheme, within float rounding of the reference and of the float model. The rewrites
    alone, on NaN, infinities, zeros and ties: torch's values (exactly where ATen's arithmetic is
    the same; selu, celu, log_sigmoid, addcdiv, var_mean within a few ulp)."""
    from vkq.passes.decompose_ops import decompose_ops
    from vkq.passes.normalize_ops import normalize_ops
    f = ELEMENTWISE[name]
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(8))
    model = Elementwise(f).eval()
    program, gm = lowered(model, (x,), batches((2, 5, 6)), "dynamic")
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5, equal_nan=True)
    if name not in ("heaviside", "frac", "isnan", "any_all_count", "topk", "sinc", "xlogy", "count_bucketize",
                    "division_family", "histc"):   # (steps: quantized linears move them)
        want = model(x).detach().numpy()
        assert cosine(got, want) > 0.999
    special = torch.tensor([[[float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.3, 2.5, 1e-30, -7.0]] * 2])
    y = torch.tensor([[[1.0, -2.0, 0.0, 0.25, 3.0, -1.0, 0.5, 2.5, 1.0, 0.0]] * 2])
    g = torch.export.export(_Lambda(f), (special, y)).module()
    normalize_ops(g), decompose_ops(g)
    exact = name not in ("selu", "celu", "logsigmoid", "addcdiv", "var_mean", "lerp", "cosine_similarity", "sinc", "xlogy",
                         "pairwise_distance", "broadcast", "cdist", "nansum", "logaddexp", "cumulative")
    torch.testing.assert_close(g(special, y), f(special, y), equal_nan=True, rtol=0 if exact else 1e-6,
                               atol=0 if exact else 1e-6)


class RotaryFromPositions(nn.Module):
    """Rotary angles from positions the model is given (or, under dynamic shapes, an arange of
    the length): cos / sin of position x frequency, up to a few thousand radians."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))

    def forward(self, x, positions):
        angles = torch.cat([positions[..., None].float() * self.inv_freq] * 2, -1)
        h = self.fc(x)
        rotated = torch.cat([-h[..., 4:], h[..., :4]], -1)
        return h * torch.cos(angles) + rotated * torch.sin(angles)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_sin_cos_run_on_vulkan(device, scheme):
    """sin and cos of activations (sincos_f32, Cephes' reduction and polynomials) instead of
    torch on the CPU: within float rounding of torch's angles up to ~3000 radians."""
    g = torch.Generator().manual_seed(22)
    x, positions = torch.randn(2, 7, 8, generator=g), torch.randint(0, 3000, (2, 7), generator=g)
    program, gm = lowered(RotaryFromPositions().eval(), (x, positions),
                          [(torch.randn(2, 7, 8, generator=g), positions)], scheme)
    assert {"sin", "cos"} <= set(ops(program)) or scheme == "static"      # (static: int8 tables when quantized)
    got, ref = on_device(program, device, (x, positions))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert cosine(got, gm(x, positions).detach().numpy()) >= 0.9999


class Recurrent(nn.Module):
    """nn.LSTM / nn.GRU / nn.RNN as a CRNN, a speech or a time-series model calls it: with or
    without an initial state, every output returned."""

    def __init__(self, cell, state: bool, **kw):
        super().__init__()
        self.rnn, self.state = cell(**kw), state

    def forward(self, x, *state):
        if self.state:
            y, h = self.rnn(x, tuple(state) if isinstance(self.rnn, nn.LSTM) else state[0])
        else:
            y, h = self.rnn(x)
        return (y, *h) if isinstance(h, tuple) else (y, h)


RECURRENT = {
    "lstm-2-layers-bidirectional": (nn.LSTM, True, dict(input_size=7, hidden_size=5, num_layers=2,
                                                       bidirectional=True, batch_first=True)),
    "lstm-projected-time-major": (nn.LSTM, False, dict(input_size=6, hidden_size=9, proj_size=4)),
    "gru-bidirectional": (nn.GRU, True, dict(input_size=7, hidden_size=6, bidirectional=True, batch_first=True)),
    "gru-no-bias": (nn.GRU, False, dict(input_size=5, hidden_size=3, bias=False)),
    "gru-zero-state-2-layers": (nn.GRU, False, dict(input_size=5, hidden_size=4, num_layers=2)),   # (r * b_hn first)
    "rnn-relu-2-layers": (nn.RNN, True, dict(input_size=5, hidden_size=7, nonlinearity="relu", num_layers=2)),
}


def _recurrent_inputs(cell, state, kw, g, steps=6, batch=2):
    x = torch.randn((batch, steps, kw["input_size"]) if kw.get("batch_first") else (steps, batch, kw["input_size"]),
                    generator=g)
    if not state:
        return (x,)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h = torch.randn(layers, batch, kw.get("proj_size") or kw["hidden_size"], generator=g)
    return (x, h, torch.randn(layers, batch, kw["hidden_size"], generator=g)) if cell is nn.LSTM else (x, h)


@pytest.mark.parametrize("name", list(RECURRENT))
def test_recurrent_layers_unroll_onto_vulkan(name, device):
    """aten.lstm / gru / rnn_relu ran in torch on the CPU (a CRNN's saved program needed torch):
    unrolled into their cells' linears and gates (passes/unroll_rnn.py), every step is int8 under
    static, bit for bit between Vulkan and the reference, within a step of PT2E op by op; every
    output (sequence, h_n, c_n) in its shape and near the float model's."""
    cell, state, kw = RECURRENT[name]
    g = torch.Generator().manual_seed(5)
    with torch.random.fork_rng(devices=[]):     # the same weights in every run: the scales decide
        torch.manual_seed(5)                    # add_q8's spec constants, i.e. the variant count
        model = Recurrent(cell, state, **kw).eval()
    xs = _recurrent_inputs(cell, state, kw, g)
    calib = [xs] + [_recurrent_inputs(cell, state, kw, g) for _ in range(3)]   # (ranges that cover xs)
    program, gm = lowered(model, xs, calib, "static")
    assert "linear_q8" in ops(program) and "select" in ops(program), ops(program)
    stored = [(c.shape, c.tobytes()) for c in program.constants.values() if c.dtype == np.int8]
    assert len(set(stored)) == len(stored)     # the shared recurrent weights once, not once a step
    run = oputil.VulkanExecutor(program, device)
    got, ref = run(*[t.numpy() for t in xs]), run_reference(program, *[t.numpy() for t in xs])
    # one compiled pipeline per kernel variant (device.py): far fewer than the dispatches' algorithms
    variants = {(shader, defines, spec, len(buffers), push) for shader, defines, spec, buffers, push in run._pipelines}
    assert len(variants) <= 18 and len(run._pipelines) >= 4 * len(variants), (len(variants), len(run._pipelines))
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    assert_matches_pt2e(program, gm, xs)
    with torch.no_grad():
        want = model(*xs)
    assert len(got) == len(want)
    for a, w in zip(got, want):     # (a gate out of order gives ~0)
        assert a.shape == tuple(w.shape) and cosine(a, w.numpy()) >= 0.99


class DecoderCells(nn.Module):
    """A decoder's loop of nn.LSTMCell (a state given, then its own), GRUCell (none given; no
    biases) and RNNCell (tanh and relu) over three steps."""

    def __init__(self):
        super().__init__()
        self.lstm, self.gru = nn.LSTMCell(6, 5), nn.GRUCell(5, 4, bias=False)
        self.tanh, self.relu = nn.RNNCell(4, 3), nn.RNNCell(4, 3, nonlinearity="relu")

    def forward(self, x, h, c):                                   # x (3, B, 6)
        outs, g = [], None
        for t in range(x.shape[0]):
            h, c = self.lstm(x[t], (h, c))
            g = self.gru(h) if g is None else self.gru(h, g)
            outs.append(self.tanh(g) + self.relu(g))
        return torch.stack(outs), c


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_recurrent_cells_run_on_vulkan(device, scheme):
    """aten.lstm_cell / gru_cell / rnn_tanh_cell / rnn_relu_cell ran in torch on the CPU: each
    is its step of unroll_rnn now, on the device, near the float model."""
    g = torch.Generator().manual_seed(4)
    inputs = lambda: (torch.randn(3, 2, 6, generator=g), torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        model = DecoderCells().eval()
    xs = inputs()
    program, gm = lowered(model, xs, [xs] + [inputs() for _ in range(3)], scheme)
    assert "linear_q8" in ops(program) or "linear_dynamic" in ops(program), ops(program)
    run = oputil.VulkanExecutor(program, device)
    got, ref = run(*[t.numpy() for t in xs]), run_reference(program, *[t.numpy() for t in xs])
    with torch.no_grad():
        want = model(*xs)
    for a, b, w in zip(got, ref, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert a.shape == tuple(w.shape) and cosine(a, w.numpy()) >= 0.98


@pytest.mark.parametrize("name", ["lstm-2-layers-bidirectional", "gru-bidirectional"])
def test_recurrent_layers_in_float_under_dynamic(name, device):
    """The linear-only schemes: the linears int8 with rows quantized on the device, the gates
    float; the outputs equal the float model's to int8 rounding of the weights."""
    cell, state, kw = RECURRENT[name]
    g = torch.Generator().manual_seed(6)
    model = Recurrent(cell, state, **kw).eval()
    xs = _recurrent_inputs(cell, state, kw, g)
    program, _ = lowered(model, xs, [_recurrent_inputs(cell, state, kw, g)], "dynamic")
    assert "linear_dynamic" in set(ops(program)), ops(program)
    got, ref = on_device(program, device, xs)
    with torch.no_grad():
        want = model(*xs)
    for a, r, w in zip(got, ref, want):
        np.testing.assert_allclose(a, r, atol=1e-5)
        assert cosine(a, w.numpy()) >= 0.999


def test_recurrent_layer_with_a_dynamic_batch(device):
    """One program for every batch size (torch.export Dims; the length stays static: torch
    itself specializes an LSTM's length): the unrolled steps carry the symbolic batch."""
    from torch.export import Dim
    g = torch.Generator().manual_seed(7)
    model = Recurrent(nn.LSTM, False, input_size=4, hidden_size=3, batch_first=True, bidirectional=True).eval()
    x = torch.randn(2, 5, 4, generator=g)
    program, fallback = api.compile(model, (x,), calibration=[(torch.randn(2, 5, 4, generator=g),)], scheme="dynamic",
                                    dynamic_shapes=({0: Dim("batch", min=1, max=8)},))
    assert fallback == [] and program.dynamic
    run = oputil.VulkanExecutor(program, device)
    for batch in (1, 3, 8):
        xb = torch.randn(batch, 5, 4, generator=g)
        with torch.no_grad():
            want = model(xb)
        for a, w in zip(run(xb.numpy()), want):
            assert a.shape == tuple(w.shape)
            np.testing.assert_allclose(a, w.numpy(), atol=1e-2)


def test_a_long_chain_of_steps_builds(device):
    """800 steps of an elementwise recurrence (1600 dispatches): assign_layouts walked such a
    chain recursively, past Python's limit. Now it builds and runs bit for bit."""
    class Chain(nn.Module):
        def forward(self, x):
            y = x
            for _ in range(800):
                y = torch.sigmoid(y) + x
            return y
    g = torch.Generator().manual_seed(8)
    x = torch.randn(1, 37, generator=g)
    program, _ = lowered(Chain().eval(), (x,), [(x,)], "static")
    assert len(program.nodes) >= 1600
    oputil.assert_program_on_device(program, device, x.numpy())


class ClampedIds(nn.Module):
    """ids computed from the input and clamped into a table (clamp both ways, clamp_min,
    clamp_max, relu of an integer tensor), then embedded: a learned-position or bucket lookup."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.proj = nn.Linear(6, 4)
            self.table = nn.Embedding(10, 3)

    def forward(self, x):
        ids = (self.proj(x) * 12).long()                    # beyond the table both ways
        both = ids.clamp(0, 9)
        low, high = torch.clamp_min(ids, 2).clamp(max=9), torch.clamp_max(ids, 7).clamp(min=0)
        return self.table(both) + self.table(low) + self.table(high) + self.table(torch.relu(ids).clamp(max=9))


def test_integer_clamps_run_on_vulkan(device):
    """A clamp of an integer tensor (normalize_ops spells clamp(0, hi) hardtanh, clamp(min=0)
    relu) ran in torch on the CPU ("works on int64 tensors"): now maximum / minimum by int32
    constants; equal to torch's result exactly under both schemes."""
    x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(5))
    model = ClampedIds().eval()
    ids = (model.proj(x) * 12).long()
    assert ids.min() < 0 and ids.max() > 9, "the ids do not reach past the table"
    for scheme in ("static", "dynamic"):
        program, gm = lowered(model, (x,), batches((3, 5, 6)), scheme)
        assert {"maximum", "minimum"} <= set(ops(program)), ops(program)
        got, ref = on_device(program, device, (x,))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, gm(x).detach().numpy(), rtol=1e-5, atol=1e-5)


class BilinearFusion(nn.Module):
    """nn.Bilinear fusing two projections (bilinear pooling, multimodal fusion heads), with and
    without a bias, on (N, F) rows and on (N, T, F) sequences."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            self.a, self.b = nn.Linear(6, 5), nn.Linear(6, 3)
            self.rows, self.seq = nn.Bilinear(5, 3, 4), nn.Bilinear(5, 3, 7, bias=False)

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        return self.rows(a[:, 0], b[:, -1]), self.seq(a, b)


def test_bilinear_runs_on_vulkan(device):
    """aten.bilinear (nn.Bilinear) ran through torch on the CPU: now the outer product of its two
    inputs times its weight viewed (O, I*J), float kernels; equal to the reference to float
    rounding, and to PT2E's eager output too under the static scheme (the dynamic one quantizes
    the projections' inputs per row, PT2E per tensor: cosine there)."""
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(6))
    for scheme in ("static", "dynamic"):
        program, gm = lowered(BilinearFusion().eval(), (x,), batches((2, 5, 6)), scheme)
        assert any(o.startswith("matmul") for o in ops(program)), ops(program)
        got, ref = on_device(program, device, (x,))
        for g, r, w in zip(got, ref, (t.detach().numpy() for t in gm(x))):
            assert g.shape == r.shape == w.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6 * np.abs(r).max())
            if scheme == "static":
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
            assert cosine(g, w) >= 0.999


class IndexAssignments(nn.Module):
    """Writes through indices as models spell them (index_put): scores[mask] = -inf with a
    computed mask, x[..., [7, 0, -3]] = value, rows at computed (negative) indices, an
    accumulating write with a repeated index, and a constant bool mask with many values
    (X-MOD's per-language adapters)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.register_buffer("keep", torch.tensor([True, False, True, False, False]))

    def forward(self, x):                                         # x (2, 5, 8)
        y, z = self.a(x).clone(), self.b(x)
        y[y[..., :1].expand(-1, -1, 8) > 1.0] = -1.5             # a mask over every dim, one value
        y[y[..., 0] < -0.8] = 0.25                               # a mask over leading dims
        y[..., torch.tensor([7, 0, -3])] = 0.5
        rows = (x[0, :2, 0] > 0).long() * 3 - 2                  # -2 or 1: wrapped to 3 or 1
        y[:, rows] = z[:, :2]
        y.index_put_((torch.tensor([1, 1, 0]),), z[:1].expand(3, -1, -1).contiguous(), accumulate=True)
        y[:, self.keep] = z[:, self.keep] * 2
        y[:, (x[0, :2, 0] > 0).int() * 2] = z[:, 2:4]            # an int32 index (index_copy takes int64)
        live = (y > 0).clone()
        live[y < -1.0] = True                                     # a bool tensor written through a mask
        return self.b(y * live)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_index_assignments_run_on_vulkan(device, scheme):
    """Each index_put becomes where (a mask, one value), index_fill, index_copy or index_add
    along its one indexed dim, on the device: they all ran in torch on the CPU."""
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(9))
    x[0, :2, 0] = torch.tensor([-1.0, 1.0])                       # both wraps of `rows`
    model = IndexAssignments().eval()
    program, gm = lowered(model, (x,), batches((2, 5, 8)), scheme)
    assert {"where", "scatter"} <= set(ops(program)), ops(program)
    assert [n.attrs["reduce"] for n in program.nodes if n.op == "scatter"] == ["none", "none", "sum", "none", "none"]
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


class OneDResizes(nn.Module):
    """A vocoder's / 1-D U-Net's upsampling (linear with and without align_corners, nearest and
    nearest-exact, by size and by fractional scale) and InstanceNorm1d with running statistics."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv1d(5, 6, 3), nn.Conv1d(6, 4, 1)
        self.norm = nn.InstanceNorm1d(6, affine=True, track_running_stats=True)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-0.5, 0.5), self.norm.running_var.uniform_(0.5, 2.0)
            self.norm.weight.uniform_(0.5, 1.5), self.norm.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        y = self.norm(torch.relu(self.a(x)))
        y = F.interpolate(y, size=23, mode="linear", align_corners=True)
        y = F.interpolate(y, scale_factor=1.7, mode="nearest") + 0.5
        y = F.interpolate(y, scale_factor=0.6, mode="nearest-exact")
        return self.b(F.interpolate(y, scale_factor=1.3, mode="linear"))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_one_d_resizes_and_running_instance_norm_run_on_vulkan(device, scheme):
    """upsample_linear1d / nearest1d / nearest-exact1d and instance_norm over running statistics
    ran in torch on the CPU: now the 2-D resizes of (N, C, 1, L) (exactly the 1-D op's values:
    one row resized to one is the identity) and a batch norm, on the device."""
    from vkq.passes.one_d_as_two_d import one_d_as_two_d
    from vkq.passes.normalize_ops import normalize_ops
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    model = OneDResizes().eval()
    program, gm = lowered(model, (x,), batches((2, 5, 16)), scheme)
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999 and cosine(got, model(x).detach().numpy()) >= 0.99
    g = torch.export.export(model, (x,)).module()           # the rewrites alone: torch's values exactly
    normalize_ops(g), one_d_as_two_d(g)
    names = {str(n.target) for n in g.graph.nodes if n.op == "call_function"}
    assert not any("1d" in t or "instance_norm" in t for t in names), names
    torch.testing.assert_close(g(x), model(x), rtol=0, atol=0)


def test_index_assignment_into_a_bool_tensor_by_integers_stays_correct(device):
    """mask[:, idx] = True on a bool tensor: the scatter kernel has no bool words, so that
    index_put stays in torch (as an index_fill it failed there: its value had become 1-D), and
    the program agrees with torch."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            m = (y > 0).clone()
            m[:, (x[0, :2, 0] > 0).long() - 1] = True
            return y * m
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(3))
    gm = api.quantize(M().eval(), (x,), calibration=batches((2, 5, 8)), progress=False)
    program = lower(gm, (x,))
    assert [op for op, _ in program.fallback] == ["aten.index_put"], program.fallback
    got, ref = on_device(program, device, (x,))
    np.testing.assert_array_equal(got, ref)
    assert cosine(got, gm(x).detach().numpy()) >= 0.999


class SparseFeatures(nn.Module):
    """DLRM's sparse side: EmbeddingBags of 1-D ids and offsets (sum, with per-sample weights;
    max), of 2-D ids (mean: offsets an arange of the row length, padding_idx skipped), then
    an interaction MLP."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a = nn.EmbeddingBag(40, 6, mode="sum")
            self.b = nn.EmbeddingBag(30, 6, mode="max")
            self.c = nn.EmbeddingBag(20, 6, mode="mean", padding_idx=0)
            self.top = nn.Linear(18, 5)

    def forward(self, ids, offsets, weights, rows):
        a = self.a(ids, offsets, per_sample_weights=weights)
        b = self.b(ids % 30, offsets)
        return self.top(torch.cat([a, b, self.c(rows)], -1))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_embedding_bag_runs_on_vulkan(device, scheme):
    """nn.EmbeddingBag ran on the CPU through torch: the embedding_bag kernel now (each bag's
    rows added in order, as ATen's CPU kernel; an empty bag 0), the bags equal to torch's
    F.embedding_bag, the model's output to the reference's (bit for bit under the static scheme)
    and to PT2E's."""
    g = torch.Generator().manual_seed(6)
    ids, offsets = torch.randint(0, 40, (17,), generator=g), torch.tensor([0, 4, 4, 9, 16])   # bag 1 empty
    weights, rows = torch.rand(17, generator=g), torch.randint(0, 20, (5, 7), generator=g)
    rows[0, :3] = 0
    inputs = (ids, offsets, weights, rows)
    program, gm = lowered(SparseFeatures().eval(), inputs, [inputs], scheme)
    assert sum(n.op == "embedding_bag" for n in program.nodes) == 3, ops(program)
    got, ref = on_device(program, device, inputs)
    if scheme == "static":
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert cosine(got, gm(*inputs).detach().numpy()) > 0.999
    bags = oputil.single_op_program("embedding_bag", [("t", oputil.spec((40, 6))), ("i", oputil.spec((17,), "int32")),
                                                      ("o", oputil.spec((5,), "int32")), ("w", oputil.spec((17,)))],
                                    [("y", oputil.spec((5, 6)))], {"mode": "sum"}, {})
    table = SparseFeatures().a.weight.detach()
    mine = run_reference(bags, table.numpy(), ids.numpy().astype(np.int32), offsets.numpy().astype(np.int32),
                         weights.numpy())
    np.testing.assert_allclose(mine, F.embedding_bag(ids, table, offsets, mode="sum", per_sample_weights=weights).numpy(),
                               rtol=1e-6, atol=1e-7)


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.e, self.f = nn.EmbeddingBag(40, 6, mode="sum"), nn.Linear(6, 3)

    def forward(self, ids, offsets):
        return self.f(self.e(ids, offsets))


def test_embedding_bag_with_dynamic_ids_and_bags(device):
    """One program for any number of ids and bags. Its check at a second size resizes the
    example's values, which gives offsets past the ids that torch refuses: the program is then
    left unverified there with a warning saying why (not refused), and runs right at each size."""
    from torch.export import Dim
    import vkq
    ids, offsets = torch.randint(0, 40, (10,), generator=torch.Generator().manual_seed(2)), torch.tensor([0, 3, 3, 7])
    dims = ({0: Dim("n", min=2, max=64)}, {0: Dim("b", min=2, max=64)})
    gm = api.quantize(Bags().eval(), (ids, offsets), [(ids, offsets)], scheme="static", progress=False, dynamic_shapes=dims)
    with pytest.warns(UserWarning, match="not verified at a second size.*offsets"):
        program = vkq.compile(gm, (ids, offsets), dynamic_shapes=dims).program
    assert program.dynamic and "embedding_bag" in ops(program)
    for n, bounds in ((10, [0, 3, 3, 7]), (23, [0, 1, 5, 9, 19, 22]), (3, [0, 0])):
        x, o = torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(n)), torch.tensor(bounds)
        got, ref = on_device(program, device, (x, o))
        np.testing.assert_array_equal(got, ref)
        assert got.shape == (len(bounds), 3)
        assert cosine(got, gm(x, o).detach().numpy()) > 0.999


class TokenRanking(nn.Module):
    """Token pruning and merging as ToMe / DynamicViT write them: scores sorted, the top 12 of 16
    kept by topk (past the k rounds of argmax), tokens reordered by an argsort of their scores."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.score, self.proj = nn.Linear(8, 1), nn.Linear(8, 8)

    def forward(self, x):                                      # (B, 16 tokens, 8)
        s = self.score(x)[..., 0]
        values, order = torch.sort(s, dim=-1, descending=True)
        keep = torch.topk(s, 12, dim=-1).indices
        kept = torch.gather(x, 1, keep[..., None].expand(-1, -1, 8))
        ranked = torch.gather(x, 1, torch.argsort(s, -1)[..., None].expand(-1, -1, 8))
        return self.proj(kept).sum(1) + self.proj(ranked)[:, :3].sum(1), s, values, order


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_sort_argsort_and_large_topk_run_on_vulkan(device, scheme):
    """sort, argsort and topk past 8 ran on the CPU through torch: the argsort kernel (stable)
    and gathers now, equal to the reference bit for bit where the scores are int8-derived
    (static; dynamic: float linears, the last bit apart), the sorted scores and their order
    torch's stable sort of the scores the device computed."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 16, 8, generator=g)
    program, gm = lowered(TokenRanking().eval(), (x,), [(torch.randn(3, 16, 8, generator=g),)], scheme)
    assert "argsort" in ops(program)
    got, ref = on_device(program, device, (x,))
    for gv, r in zip(got, ref):
        if scheme == "static":
            np.testing.assert_array_equal(gv, r)
        np.testing.assert_allclose(gv, r, rtol=1e-5, atol=1e-5)
    want = torch.sort(torch.from_numpy(got[1]), dim=-1, descending=True, stable=True)
    np.testing.assert_array_equal(got[2], want.values.numpy())
    np.testing.assert_array_equal(got[3], want.indices.numpy())
    assert cosine(got[0], gm(x)[0].detach().numpy()) > 0.999


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_mixture_of_experts_routing_runs_on_vulkan(device, scheme):
    """transformers' Mixtral experts (its default grouped-mm path: token-expert pairs sorted by
    expert, histc counts, a cumsum to offsets, transformers.grouped_mm_fallback) ran on the CPU:
    argsort, comparison sums, the scan and grouped_matmul kernels now, the hidden states within
    float rounding of the reference and of PT2E's."""
    import transformers as tf
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = tf.MixtralModel(tf.MixtralConfig(vocab_size=100, num_local_experts=4, num_experts_per_tok=2,
                                                 num_key_value_heads=2, hidden_size=32, num_hidden_layers=2,
                                                 num_attention_heads=4, intermediate_size=64)).eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 100, (1, 13), generator=g)
    wrapped = _Lambda(lambda i: model(input_ids=i).last_hidden_state)
    program, gm = lowered(wrapped, (ids,), [(torch.randint(0, 100, (1, 13), generator=g),)], scheme)
    assert {"argsort", "grouped_matmul", "cumsum"} <= set(ops(program))
    got, ref = on_device(program, device, (ids,))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert cosine(got, gm(ids).detach().numpy()) > 0.999


class ExportDecomposable(nn.Module):
    """Ops no vkq rule names but torch.export can decompose (aliases, stacks, flips, products, an
    index by a computed one, a mean ignoring NaN): each ran in torch on the CPU."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(6, 6), nn.Linear(12, 4)

    def forward(self, x):                                           # x (2, 5, 6)
        h = self.a(x)
        cat = torch.concat([h, torch.arccos(torch.tanh(h))], -1)    # (2, 5, 12)
        pick = torch.take_along_dim(h, torch.argmax(h, -1, keepdim=True), -1)
        return (self.b(cat), torch.hstack([h, torch.special.erf(h)]), torch.vstack([h, torch.arcsinh(h)]), torch.fliplr(h[0]), torch.inner(h, h), pick,
                torch.trapezoid(h, dim=-1), torch.special.expm1(h), torch.nanmean(h, -1))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_ops_that_torch_export_decomposes_run_on_vulkan(device, scheme):
    """aten.concat, hstack / vstack, arccos, arcsinh, special_erf / expm1, fliplr, inner,
    take_along_dim, trapezoid and nanmean ran in torch on the CPU (no vkq rule names them):
    torch.export's own decompositions of them now (cat, acos, erf, flip, matmul, gather, ...),
    while the ops vkq folds as they are (the linears) stay linears."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 5, 6, generator=g)
    program, gm = lowered(ExportDecomposable().eval(), (x,), [(torch.randn(2, 5, 6, generator=g),) for _ in range(3)], scheme)
    assert sum(o.startswith("linear") for o in ops(program)) >= 2, ops(program)
    got, ref = on_device(program, device, (x,))
    want = gm(x)
    for gv, r, w in zip(got, ref, want):
        np.testing.assert_allclose(gv, r, rtol=1e-4, atol=1e-5 * (np.abs(r).max() + 1))
        assert cosine(gv, w.detach().numpy()) > 0.999


class ElementRulesAndOrderStatistics(nn.Module):
    def forward(self, x, e):                                        # x (3, 9) float with a NaN, e int
        b = torch.tensor([-1.0, -0.25, 0.0, 0.5])
        return (x.median(-1).values, x.median(-1).indices, torch.kthvalue(x, 3, 1, keepdim=True).values,
                x[:2].median(), torch.fmax(x, x.flip(1)), torch.fmin(x, 0.5 * x.flip(1)),
                torch.round(x, decimals=1), torch.round(x * 40, decimals=-1), torch.searchsorted(b, x),
                torch.searchsorted(b, x, side="right"), torch.ldexp(x, e), torch.logical_xor(x > 0, x.flip(1) > 0),
                torch.logical_or(x, e), (x > 0).long().sum(-1), e.sum(), torch.logit(torch.sigmoid(x), 1e-3),
                torch.repeat_interleave(x, torch.tensor([1, 0, 2]), dim=0), torch.repeat_interleave(x[0], 2),
                torch.index_select(x, 1, e[0].abs() % 9), torch.index_select(x, 0, e[1].abs() % 3),
                *torch.cat([x, x[:1] * float("nan")]).nanmedian(-1), x.nanmedian(0, keepdim=True).indices,
                torch.nanmedian(x))         # (the middle of a row's numbers; a row of NaNs: NaN)


def test_order_statistics_and_element_rules_run_on_vulkan(device):
    """median / kthvalue / nanmedian (a stable argsort's pick; median NaN where its row holds one), fmax /
    fmin, round(decimals), searchsorted, ldexp, logical ops of non-bools, integer sums,
    repeat_interleave by counts or flattened, index_select by computed indices on any dim ran in
    torch on the CPU: kernels now, with torch's results bit for bit (logit within float rounding)."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 9, generator=g)
    x[2, 4] = float("nan")
    e = torch.randint(-3, 4, (3, 9), generator=g)
    model = ElementRulesAndOrderStatistics().eval()
    gm = api.quantize(model, (x, e), scheme="dynamic", progress=False)
    program = lower(gm, (x, e))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got, ref = on_device(program, device, (x, e))
    want = [w.numpy() for w in model(x, e)]
    for i, (gv, r, w) in enumerate(zip(got, ref, want)):
        np.testing.assert_array_equal(gv.shape, w.shape)
        if i in (1, 21):            # median's index: torch's where the row has no NaN, nanmedian's where
            np.testing.assert_array_equal(gv[:-1], w[:-1])          # the row is not all NaN (torch's varies)
            np.testing.assert_array_equal(gv, r)
            continue
        if i == 15:
            np.testing.assert_allclose(gv, w, rtol=2e-6, atol=1e-6)
            continue
        np.testing.assert_array_equal(gv, w, err_msg=f"output {i}")
        np.testing.assert_array_equal(gv, r, err_msg=f"output {i}")


class ScatterByMask(nn.Module):
    def forward(self, tokens, features, x):     # tokens (2, 7) ids, features (5, 6), x (3, 5) with zeros
        image = tokens == 3                     # a VLM's image tokens take its image features in order
        embeds = (tokens.float() * 0.5).unsqueeze(-1).expand(2, 7, 6)
        merged = embeds.masked_scatter(image.unsqueeze(-1), features)
        return merged, x.masked_scatter(x > 0, -x.flip(0)), torch.signbit(x), torch.signbit(tokens - 3)


def test_masked_scatter_and_signbit_run_on_vulkan(device):
    """masked_scatter (by a broadcast mask, by a full one) and signbit (-0.0 included) ran in
    torch on the CPU: index / compare kernels now, torch's values bit for bit."""
    tokens = torch.tensor([[1, 3, 3, 0, 2, 3, 1], [3, 0, 0, 3, 1, 1, 1]])
    features = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    x = torch.tensor([[0.5, -0.0, 0.0, -2.0, 3.0], [-1.5, 2.5, 0.0, -0.0, 1.0], [4.0, -4.0, -0.0, 0.25, 0.0]])
    model = ScatterByMask().eval()
    gm = api.quantize(model, (tokens, features, x), scheme="dynamic", progress=False)
    program = lower(gm, (tokens, features, x))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got, ref = on_device(program, device, (tokens, features, x))
    for i, (gv, r, w) in enumerate(zip(got, ref, model(tokens, features, x))):
        np.testing.assert_array_equal(gv, w.numpy(), err_msg=f"output {i}")
        np.testing.assert_array_equal(gv, r, err_msg=f"output {i}")
    assert got[2].tolist() == [[False, True, False, True, False], [True, False, False, True, False],
                               [False, True, True, False, False]]


class NormsAndSplits(nn.Module):
    def forward(self, x, m):                    # x (3, 4, 5), m (4, 6)
        a, b, c = torch.tensor_split(x, 3, dim=-1)                  # sizes 2, 2, 1
        d, e = torch.tensor_split(x, [1], dim=1)
        return (F.normalize(x, p=1, dim=-1), x.norm(p=3, dim=(1, 2)), torch.linalg.vector_norm(x, float("inf"), -1),
                torch.linalg.vector_norm(x, float("-inf"), 0, keepdim=True), torch.linalg.vector_norm(x, 0, -1),
                torch.dist(x, x.flip(0), 1.5), a * b + c, d.sum(1) - e.sum(1),
                torch.addmv(x[0, 0, :4], m, x[1, 1, :].repeat(2)[:6], beta=0.5, alpha=2.0),
                torch.addbmm(m[:, :4], x, x.transpose(1, 2), alpha=0.5))


def test_norms_of_other_orders_and_splits_run_on_vulkan(device):
    """Vector norms of orders 1, 3, inf, -inf and 0 (F.normalize(p=1)), dist, tensor_split by
    sections or indices, addmv and addbmm ran in torch on the CPU: reductions of |x|, slices and
    matmuls now, within float rounding of torch's (a count and an amax exactly)."""
    g = torch.Generator().manual_seed(11)
    x, m = torch.randn(3, 4, 5, generator=g), torch.randn(4, 6, generator=g)
    x[1, 2, 3] = 0.0
    model = NormsAndSplits().eval()
    gm = api.quantize(model, (x, m), scheme="dynamic", progress=False)
    program = lower(gm, (x, m))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got, ref = on_device(program, device, (x, m))
    for i, (gv, r, w) in enumerate(zip(got, ref, model(x, m))):
        w = w.numpy()
        assert gv.shape == w.shape, (i, gv.shape, w.shape)
        np.testing.assert_allclose(gv, w, rtol=2e-6, atol=2e-6 * np.abs(w).max(), err_msg=f"output {i}")
        np.testing.assert_allclose(gv, r, rtol=2e-6, atol=2e-6 * np.abs(w).max(), err_msg=f"output {i}")


class FourierParts(nn.Module):
    def forward(self, x):                       # x (2, 7, 12)
        return (torch.fft.fftn(x, dim=(1, 2)).real, torch.fft.fft(x).imag, torch.fft.rfft(x, dim=1).abs(),
                torch.fft.rfft2(x, norm="ortho").real, torch.fft.fft2(x, norm="forward").abs(),
                torch.fft.rfftn(x).imag, torch.fft.fft(x, n=12, dim=-1).real)


def test_fourier_transforms_of_real_tensors_run_on_vulkan(device):
    """The real part, imaginary part or magnitude of fft / fft2 / fftn / rfft / rfft2 / rfftn of
    a real tensor (FNet's token mixing: fftn(x, dim=(1, 2)).real), any norm, ran as complex ops
    in torch on the CPU: products with cos / sin tables on Vulkan now, within float rounding of
    torch's FFT (odd and even lengths, one-sided halves)."""
    x = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(4))
    model = FourierParts().eval()
    gm = api.quantize(model, (x,), scheme="dynamic", progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got, ref = on_device(program, device, (x,))
    for i, (gv, r, w) in enumerate(zip(got, ref, model(x))):
        w = w.numpy()
        assert gv.shape == w.shape, (i, gv.shape, w.shape)
        np.testing.assert_allclose(gv, w, rtol=0, atol=2e-5 * np.abs(w).max(), err_msg=f"output {i}")
        np.testing.assert_allclose(gv, r, rtol=0, atol=2e-6 * np.abs(w).max(), err_msg=f"output {i}")


class SpectralLayers(nn.Module):
    """A global filter (GFNet: rfft2, a complex weight, irfft2), an autocorrelation (Autoformer:
    rfft, conj, irfft), a complex parameter, and a complex output."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(9)
        self.filter = nn.Parameter(torch.randn(4, 3, 2, generator=g))
        self.phase = nn.Parameter(torch.randn(4, 3, generator=g, dtype=torch.complex64))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):                                   # x (2, 4, 4)
        h = self.fc(x)
        f = torch.fft.rfft2(h, norm="ortho") * torch.view_as_complex(self.filter)
        filtered = torch.fft.irfft2(f, s=(4, 4), norm="ortho")
        q, k = torch.fft.rfft(h, dim=-1), torch.fft.rfft(h.flip(1), dim=-1)
        corr = torch.fft.irfft(q * torch.conj(k), n=4, dim=-1)
        return self.fc(filtered + corr), torch.fft.rfft2(h) * self.phase


def test_complex_tensors_between_cpu_ops_keep_their_imaginary_parts(device):
    """Complex tensors between ops that run in torch on the CPU: the program declared them float
    (their words), so the imaginary part was dropped between ops (an autocorrelation gave cosine
    0.61 with PT2E; a conjugate failed to convert). They travel as (real, imaginary) pairs now,
    constants too, and a complex output comes back complex, also from a saved program."""
    from vkq.progfile import load_program, save_program
    x = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(10))
    model = SpectralLayers().eval()
    for scheme in ("dynamic", "static"):
        gm = api.quantize(model, (x,), [(torch.randn(2, 4, 4),) for _ in range(3)], scheme=scheme, progress=False)
        program = lower(gm, (x,))
        assert any("complex tensors run in torch" in why for _, why in program.fallback), program.fallback
        got, ref = on_device(program, device, (x,))
        want = [w.detach().numpy() for w in gm(x)]
        assert got[1].dtype == np.complex64 and got[1].shape == (2, 4, 3)
        for gv, r, w in zip(got, ref, want):      # (a dynamic linear's step may differ from PT2E's)
            np.testing.assert_allclose(gv, r, rtol=1e-5, atol=1e-5 * np.abs(w).max())
            assert abs(np.vdot(gv, w)) / (np.linalg.norm(gv) * np.linalg.norm(w)) > 0.9995
    with tempfile.TemporaryDirectory() as d:
        again = load_program(save_program(program, os.path.join(d, "spectral.vkq")))
    np.testing.assert_array_equal(run_reference(again, x.numpy())[1], ref[1])


class MaskedTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.t = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        return self.t(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.shape[1]))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_transformer_with_a_target_mask_exports(device, scheme):
    """nn.Transformer called with a tgt_mask failed in torch.export (its decoder compares the mask
    with a causal one to set a hint: GuardOnDataDependentSymNode); the mask is now applied as
    given while exporting, the same attention: on the device, as the reference and PT2E."""
    g = torch.Generator().manual_seed(4)
    src, tgt = torch.randn(2, 7, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    model = MaskedTransformer().eval()
    program, gm = lowered(model, (src, tgt), [(torch.randn(2, 7, 16, generator=g), torch.randn(2, 5, 16, generator=g))],
                          scheme)
    got, ref = on_device(program, device, (src, tgt))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert cosine(got, gm(src, tgt).detach().numpy()) > 0.999
    assert cosine(got, model(src, tgt).detach().numpy()) > 0.99
    assert torch.nn.modules.transformer._detect_is_causal_mask.__name__ == "_detect_is_causal_mask"   # (restored)


class PatchesWithAnUnknownOp(nn.Module):
    """MobileViT's unfold / fold of 2x2 patches around a transformer layer, and an op no vkq rule
    names (hstack), so that torch.export's decompositions run over the whole graph."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv, self.fc, self.norm = nn.Conv2d(16, 16, 1), nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x):
        x = self.conv(x)
        B, C, H, W = x.shape
        nh, nw = H // 2, W // 2
        x = x.reshape(B * C * nh, 2, nw, 2).transpose(1, 2)
        x = x.reshape(B, C, nh * nw, 4).transpose(1, 3).reshape(B * 4, nh * nw, -1)
        x = self.norm(self.fc(x))
        x = x.contiguous().view(B, 4, nh * nw, -1)
        x = x.transpose(1, 3).reshape(B * C * nh, nw, 2, 2)
        x = x.transpose(1, 2).reshape(B, C, nh * 2, nw * 2)
        return torch.hstack([x, x])


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_decomposed_graph_keeps_its_reshapes(device, scheme):
    """torch.export's retrace (decompose_unknown_ops) spells each reshape as a view where the
    traced strides allowed; under the dynamic scheme the quantizer's rewrites left one of them
    on a transposed tensor (calibration failed: 'view size is not compatible'): they are
    reshapes again, and the model runs on the device as its reference and PT2E."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, 16, 8, 8, generator=g)
    program, gm = lowered(PatchesWithAnUnknownOp().eval(), (x,), [(torch.randn(1, 16, 8, 8, generator=g),)], scheme)
    got, ref = on_device(program, device, (x,))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) > 0.999
