"""Real models, end to end: quantize (PT2E) -> compile -> run on each test device.

For every model: the Vulkan output equals the CPU reference of the same program bit for bit,
and it agrees with PyTorch's converted PT2E model run eagerly (cosine >= 0.999). MobileNetV2
with torchvision's ImageNet weights keeps its top-1 on real photos, and a saved .vkq runs
through `vkq run` with torch unavailable, giving the same bytes as in the compiling process.
"""
import numpy as np
import pytest
import torch
from torch import nn

import vkq
from vkq import models

from oputil import run_cli_without_torch

vkq._quiet_third_party_logs()


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _eager(gm, x):
    with torch.no_grad():
        return gm(x).numpy()


class Compiled:
    """A model quantized and lowered once per test session; run on any device."""

    def __init__(self, model, example, calibration, scheme="static"):
        self.gm = vkq.quantize(model, (example,), calibration, scheme)
        self.program = vkq.compile(self.gm, (example,)).program
        self._on = {}

    def on(self, device) -> vkq.CompiledProgram:
        if device.info.index not in self._on:
            self._on[device.info.index] = vkq.CompiledProgram(self.program, device)
        return self._on[device.info.index]

    def check(self, device, x, min_cos=0.999):
        """Vulkan == CPU reference exactly; cosine with PT2E's eager output."""
        got = self.on(device)(x.numpy())
        np.testing.assert_array_equal(got, self.on(device).run_reference(x.numpy()))
        cos = cosine(got, _eager(self.gm, x))
        assert cos >= min_cos, f"cosine with PT2E {cos:.5f} < {min_cos}"
        return got


# ---------------------------------------------------------------- MobileNetV2, real weights

@pytest.fixture(scope="module")
def photos():
    skimage = pytest.importorskip("skimage.data")
    return {"coffee": models.imagenet_preprocess(skimage.coffee()),
            "chelsea": models.imagenet_preprocess(skimage.chelsea())}


@pytest.fixture(scope="module")
def mobilenet(photos):
    model = models.mobilenet_v2(pretrained=True)
    x = photos["coffee"]
    # calibrate on the photos and flipped/shifted views of them (real image statistics)
    calib = [(p,) for p in photos.values()] + [(torch.flip(p, dims=[3]),) for p in photos.values()] \
        + [(torch.roll(p, 17, dims=2),) for p in photos.values()]
    return Compiled(model, x, calib)


@pytest.mark.slow
def test_mobilenet_v2_keeps_top1_on_real_photos(mobilenet, photos, device):
    assert not mobilenet.program.fallback, mobilenet.program.fallback  # all of it on Vulkan
    top1 = {name: int(np.argmax(mobilenet.check(device, x))) for name, x in photos.items()}
    assert top1["coffee"] == 967                      # espresso
    assert top1["chelsea"] in (281, 282, 285)         # tabby, tiger cat, Egyptian cat


@pytest.mark.slow
def test_saved_mobilenet_runs_from_the_cli_without_torch(mobilenet, photos, device, tmp_path):
    path = vkq.CompiledProgram(mobilenet.program).save(tmp_path / "mobilenet_v2.vkq")
    x = photos["chelsea"].numpy()
    np.save(tmp_path / "x.npy", x)
    want = mobilenet.on(device)(x)
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                "--device", device.info.name)
    assert res.returncode == 0, res.stdout + res.stderr
    got = np.load(tmp_path / "y.npy")
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    # the weights are int8: the file is about a quarter of the fp32 state dict
    fp32_bytes = sum(t.numel() * 4 for t in models.mobilenet_v2(pretrained=True).state_dict().values())
    assert path.stat().st_size <= 0.3 * fp32_bytes


# ---------------------------------------------------------------- ResNet-18, MLP, fallback

def _randn(shape, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(n)]


@pytest.fixture(scope="module")
def resnet():
    xs = _randn((1, 3, 64, 64), 4, 0)
    return Compiled(models.resnet18(num_classes=10), xs[0], [(x,) for x in xs[1:]]), xs


@pytest.mark.slow
def test_resnet18_static_int8(resnet, device):
    compiled, xs = resnet
    assert not compiled.program.fallback
    compiled.check(device, xs[0])


@pytest.fixture(scope="module")
def mlp():
    xs = _randn((5, 64), 4, 1)
    return Compiled(models.mlp(), xs[0], [(x,) for x in xs[1:]]), xs


def test_mlp_static_int8(mlp, device):
    compiled, xs = mlp
    assert not compiled.program.fallback
    for x in xs[:2]:
        compiled.check(device, x)


class TemporalCNN(nn.Module):
    """A 1-D network (keyword spotting / TCN style): strided and dilated conv1d with string
    padding, a depthwise conv1d, BatchNorm1d folded and one left standalone (after a pool), a
    residual add, avg / max / adaptive pools, hardswish. vkq runs each 1-D op as its 2-D form on
    (N, C, 1, L) (vkq/passes/one_d_as_two_d.py)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.stem = nn.Sequential(nn.Conv1d(12, 24, 5, stride=2, padding=2), nn.BatchNorm1d(24), nn.ReLU())
            self.block = nn.Sequential(nn.Conv1d(24, 24, 3, padding="same", dilation=2, groups=24),
                                       nn.BatchNorm1d(24), nn.Hardswish(), nn.Conv1d(24, 24, 1), nn.BatchNorm1d(24))
            self.pool = nn.AvgPool1d(3, 2, 1, ceil_mode=True, count_include_pad=False)
            self.bn = nn.BatchNorm1d(24)
            self.conv = nn.Conv1d(24, 32, 4, padding=1)
            self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 6))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = self.bn(self.pool(x))
        x = nn.functional.max_pool1d(torch.relu(self.conv(x)), 2)
        return self.head(x)


@pytest.fixture(scope="module")
def temporal():
    xs = _randn((2, 12, 37), 4, 3)
    return Compiled(TemporalCNN().eval(), xs[0], [(x,) for x in xs[1:]]), xs


def test_one_d_network_runs_int8_on_vulkan(temporal, device):
    """Every conv1d and pool1d is an int8 Vulkan op (before: each ran in float on the CPU, "no
    int8 Vulkan kernel"); Vulkan == reference bit for bit, and PT2E agrees."""
    compiled, xs = temporal
    assert not compiled.program.fallback, compiled.program.fallback
    ops = [n.op for n in compiled.program.nodes]
    assert ops.count("conv2d_q8") == 5 and "max_pool2d_q8" in ops and "avg_pool2d_q8" in ops, ops
    assert ops.count("repack") <= 3, ops      # the 3-D <-> 4-D views at the ends only
    for x in xs[:2]:
        compiled.check(device, x)


class VideoCNN(nn.Module):
    """A video network in the shapes R(2+1)D, X3D and S3D use: a strided 3x5x5 stem with BatchNorm3d
    and a per-frame max pool, a (2+1)-D residual block (1x3x3 then 3x1x1), a depthwise 3x3x3 with
    "same" padding and temporal dilation gated by a squeeze-excitation (a (N, C, 1, 1, 1) sigmoid
    gate), a stride-2 conv and a 2x2x2 max pool with ceil_mode over an odd number of frames, a
    standalone BatchNorm3d, a per-frame average pool and a global one. vkq runs each 3-D op over
    the frames (vkq/passes/three_d_as_two_d.py)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.stem = nn.Sequential(nn.Conv3d(3, 12, (3, 5, 5), (1, 2, 2), (1, 2, 2)), nn.BatchNorm3d(12), nn.ReLU(),
                                      nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)))
            self.spatial = nn.Sequential(nn.Conv3d(12, 16, (1, 3, 3), padding=(0, 1, 1)), nn.BatchNorm3d(16), nn.ReLU())
            self.temporal = nn.Sequential(nn.Conv3d(16, 12, (3, 1, 1), padding=(1, 0, 0)), nn.BatchNorm3d(12))
            self.dw = nn.Sequential(nn.Conv3d(12, 12, 3, padding="same", dilation=(2, 1, 1), groups=12),
                                    nn.BatchNorm3d(12))
            self.se = nn.Sequential(nn.AdaptiveAvgPool3d(1), nn.Conv3d(12, 4, 1), nn.ReLU(), nn.Conv3d(4, 12, 1),
                                    nn.Sigmoid())
            self.down = nn.Sequential(nn.Conv3d(12, 24, 3, 2, 1), nn.ReLU(), nn.MaxPool3d(2, ceil_mode=True))
            self.bn = nn.BatchNorm3d(24)
            self.pool = nn.AvgPool3d((1, 2, 2), ceil_mode=True)
            self.head = nn.Sequential(nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(24, 7))
            for m in self.modules():
                if isinstance(m, nn.BatchNorm3d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.temporal(self.spatial(x)))
        h = self.dw(x)
        x = x + h * self.se(h)
        x = self.bn(self.down(x))
        return self.head(torch.relu(self.pool(x)))


@pytest.fixture(scope="module")
def video():
    xs = _randn((2, 3, 5, 17, 20), 4, 5)
    return Compiled(VideoCNN().eval(), xs[0], [(x,) for x in xs[1:]]), xs


def test_video_network_runs_int8_on_vulkan(video, device):
    """Every conv3d, 3-D pool and BatchNorm3d is an int8 Vulkan op (before: each ran in float on
    the CPU, "no int8 Vulkan kernel"), the activations, residual adds and the gate between them
    too (on the frames, not on 5-D tensors); Vulkan == reference bit for bit, PT2E agrees, and
    so does the float model."""
    compiled, xs = video
    assert not compiled.program.fallback, compiled.program.fallback
    ops = [n.op for n in compiled.program.nodes]
    # 7 convs + the standalone batch norm; the taps of the 4 convs with kt > 1: a pad and a take each
    assert ops.count("conv2d_q8") == 8 and ops.count("take") == 4 and ops.count("max_pool2d_q8") == 3, ops
    assert {"add_q8", "mul_q8", "avg_pool2d_q8", "adaptive_avg_pool2d_q8"} <= set(ops), ops
    for x in xs[:2]:
        got = compiled.check(device, x)
    with torch.no_grad():
        want = VideoCNN().eval()(xs[1]).numpy()
    assert got.shape == want.shape == (2, 7) and cosine(got, want) > 0.995


class Decoder(nn.Module):
    """Transposed convs as decoders use them: 2x2 stride 2 (U-Net, with a skip cat), 4x4 stride
    2 padding 1 with BatchNorm and ReLU, 3x3 stride 2 with output padding and groups and a
    BatchNorm (folded by vkq: prepare_pt2e's fusion fails on grouped transposed convs), 3x3
    stride 3. vkq runs each as a conv, a pixel shuffle and a crop (conv_transpose_as_conv)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.enc = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU())
            self.up1 = nn.ConvTranspose2d(16, 8, 2, 2)
            self.up2 = nn.Sequential(nn.ConvTranspose2d(11, 12, 4, 2, 1), nn.BatchNorm2d(12), nn.ReLU())
            self.up3 = nn.Sequential(nn.ConvTranspose2d(12, 8, 3, 2, 1, output_padding=1, groups=2), nn.BatchNorm2d(8))
            self.up4 = nn.ConvTranspose2d(8, 4, 3, 3)
            for bn in (self.up2[1], self.up3[1]):
                bn.running_mean.uniform_(-0.3, 0.3)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.cat([self.up1(self.enc(x)), x], 1)
        return self.up4(torch.relu(self.up3(self.up2(y))))


@pytest.fixture(scope="module")
def decoder():
    xs = _randn((1, 3, 10, 14), 4, 4)
    return Compiled(Decoder().eval(), xs[0], [(x,) for x in xs[1:]]), xs


def test_transposed_convs_run_int8_on_vulkan(decoder, device):
    """Every ConvTranspose2d is an int8 conv on Vulkan (before: each ran in float on the CPU, "no
    int8 Vulkan kernel"); Vulkan == reference, PT2E agrees, and so does the float model."""
    compiled, xs = decoder
    assert not compiled.program.fallback, compiled.program.fallback
    ops = [n.op for n in compiled.program.nodes]
    assert ops.count("conv2d_q8") == 5 and ops.count("take") == 4, ops
    got = compiled.check(device, xs[0])
    with torch.no_grad():
        want = Decoder().eval()(xs[0]).numpy()      # (the same weights: seeded in __init__)
    assert got.shape == want.shape == (1, 4, 120, 168) and cosine(got, want) > 0.999


class Upsampler1d(nn.Module):
    """1-D transposed convs (a vocoder / sequence decoder's upsampling): stride 2 with a
    BatchNorm and ReLU, stride 3 with output padding and groups and a BatchNorm (prepare_pt2e's
    fusion failed on it: vkq folds it first)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.enc = nn.Sequential(nn.Conv1d(6, 12, 3, 2, 1), nn.ReLU())
            self.up = nn.Sequential(nn.ConvTranspose1d(12, 8, 4, 2, 1), nn.BatchNorm1d(8), nn.ReLU())
            self.up2 = nn.Sequential(nn.ConvTranspose1d(8, 4, 3, 3, 1, output_padding=1, groups=2), nn.BatchNorm1d(4))
            for bn in (self.up[1], self.up2[1]):
                bn.running_mean.uniform_(-0.3, 0.3)
                bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.up2(self.up(self.enc(x)))


def test_one_d_transposed_convs_run_int8_on_vulkan(device):
    """ConvTranspose1d: the 2-D form on (N, C, 1, L) (one_d_as_two_d), then a conv whose phases
    a reshape, permute and reshape interleave along the length (conv_transpose_as_conv); no CPU
    op, exact, and the float model agrees."""
    xs = _randn((2, 6, 23), 4, 5)
    compiled = Compiled(Upsampler1d().eval(), xs[0], [(x,) for x in xs[1:]])
    assert not compiled.program.fallback, compiled.program.fallback
    assert [n.op for n in compiled.program.nodes].count("conv2d_q8") == 3
    got = compiled.check(device, xs[0])
    with torch.no_grad():
        want = Upsampler1d().eval()(xs[0]).numpy()
    assert got.shape == want.shape == (2, 4, 71) and cosine(got, want) > 0.999


def _compiled_whole(model_cls, shape, seed, scheme):
    """model_cls() quantized under `scheme` (calibrated on 3 batches) and lowered with no CPU
    node; (compiled, example input)."""
    xs = _randn(shape, 4, seed)
    compiled = Compiled(model_cls().eval(), xs[0], [(x,) for x in xs[1:]], scheme)
    assert not compiled.program.fallback, compiled.program.fallback
    return compiled, xs[0]


def _agrees_on_device(compiled, model_cls, x, device, eager_cosine=0.999):
    """Vulkan within float rounding of the reference, and near PT2E's eager output and the float
    model's; returns Vulkan's output."""
    prog = compiled.on(device)
    got, ref = prog(x.numpy()), prog.run_reference(x.numpy())
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    with torch.no_grad():
        want = model_cls().eval()(x).numpy()
    assert cosine(got, _eager(compiled.gm, x)) > eager_cosine and cosine(got, want) > 0.99
    return got


class PatchEncoder(nn.Module):
    """A vision transformer's front as models write it: a 4x4 stride-4 patch embedding (on a map
    that is not a multiple of 4: the conv drops the last rows and columns), a pointwise conv,
    tokens by flatten + transpose, a class token, one encoder layer, the class token's head."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.patch, self.mix = nn.Conv2d(3, 24, 4, 4), nn.Conv2d(24, 24, 1, bias=False)
            self.cls = nn.Parameter(torch.randn(1, 1, 24))
            self.layer = nn.TransformerEncoderLayer(24, 3, 48, dropout=0.0, batch_first=True)
            self.head = nn.Linear(24, 5)

    def forward(self, x):
        t = self.mix(torch.relu(self.patch(x))).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1)
        return self.head(self.layer(t)[:, 0])


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_patch_convs_run_as_linears_under_linear_only_schemes(scheme, device):
    """The dynamic and weight-only schemes quantize linears only; a conv whose windows do not
    overlap (the patch embedding, a 1x1 conv) becomes a linear over patches
    (patch_conv_as_linear) and runs on Vulkan with them (before: a float conv on the CPU)."""
    compiled, x = _compiled_whole(PatchEncoder, (2, 3, 18, 23), 7, scheme)
    ops = [n.op for n in compiled.program.nodes]
    linear = "linear_dynamic" if scheme == "dynamic" else "linear_weight_only"
    linears = ops.count(linear) + sum(n.attrs.get("parts", 2) for n in compiled.program.nodes
                                      if n.op in ("linear_dynamic_parts", "linear_dynamic_glu"))
    assert linears == 7 and not any("conv" in op for op in ops), ops    # 2 convs, qkv, out, 2 ffn, head
    assert _agrees_on_device(compiled, PatchEncoder, x, device).shape == (2, 5)


class TinyDecoder(nn.Module):
    """A Llama-style decoder layer as its code is written: RMSNorm by hand, grouped-query
    attention (4 query heads, 2 key/value heads widened by repeat_interleave), rotary embeddings,
    a causal mask by masked_fill, a SwiGLU FFN; then a conformer's GLU + depthwise conv1d."""

    def __init__(self, d=16, heads=4, kv=2):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.h, self.kv, self.hd = heads, kv, d // heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, n, bias=False) for n in (d, kv * self.hd, kv * self.hd, d))
            self.gate, self.up, self.down = nn.Linear(d, 40, bias=False), nn.Linear(d, 40, bias=False), nn.Linear(40, d)
            self.w = nn.Parameter(1 + 0.1 * torch.randn(d))
            self.pw, self.dw = nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, 3, padding=1, groups=d)

    def rms(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    def rope(self, t):
        n, half = t.shape[2], self.hd // 2
        ang = torch.arange(n, dtype=torch.float32)[:, None] / (100 ** (torch.arange(half) / half))[None]
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

    def forward(self, x):
        b, n, d = x.shape
        y = self.rms(x)
        q = self.rope(self.q(y).view(b, n, self.h, self.hd).transpose(1, 2))
        k = self.rope(self.k(y).view(b, n, self.kv, self.hd).transpose(1, 2)).repeat_interleave(self.h // self.kv, 1)
        v = self.v(y).view(b, n, self.kv, self.hd).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
        s = (q @ k.transpose(-2, -1) / self.hd ** 0.5).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -1e9)
        x = x + self.o((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d))
        y = self.rms(x)
        x = x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))
        return x + self.dw(nn.functional.glu(self.pw(x.transpose(1, 2)), dim=1)).transpose(1, 2)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_decoder_layer_runs_on_vulkan(scheme, device):
    """GLU (slices, sigmoid, mul) and repeat_interleave by an int (unsqueeze, expand, reshape)
    have no kernels of their own: normalize_ops rewrites them into ops that do (before: both
    ran on the CPU, and a static program left its int8 region there). Under the dynamic scheme
    the 1x1 conv1d is a linear (patch_conv_as_linear) and the depthwise conv1d a float conv on
    Vulkan (op conv2d; before: on the CPU)."""
    compiled, x = _compiled_whole(TinyDecoder, (2, 11, 16), 8, scheme)
    assert [n.op for n in compiled.program.nodes].count("conv2d") == (scheme == "dynamic")
    _agrees_on_device(compiled, TinyDecoder, x, device)


class StackAndBaddbmm(nn.Module):
    """GPT-J's rotary interleave (torch.stack) and BLOOM's ALiBi scores (torch.baddbmm with a
    bias, beta and alpha)."""

    def __init__(self, d=16):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.q, self.k, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.register_buffer("alibi", torch.randn(1, 7, 7))

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        r = torch.stack([-q[..., 1::2], q[..., ::2]], dim=-1).flatten(-2)
        s = torch.baddbmm(self.alibi, r, k.transpose(1, 2), beta=0.5, alpha=0.25)
        return self.o(torch.softmax(s, -1) @ k)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_stack_and_baddbmm_run_on_vulkan(scheme, device):
    """normalize_ops spells stack as unsqueezes and a cat, baddbmm as a bmm, scalings and an add
    (before: both ran on the CPU, splitting the program)."""
    compiled, x = _compiled_whole(StackAndBaddbmm, (2, 7, 16), 10, scheme)
    _agrees_on_device(compiled, StackAndBaddbmm, x, device)


class JoinedBiases(nn.Module):
    """WavLM's in-projection: the q/k/v biases joined by a cat and split again by chunk before
    each linear."""

    def __init__(self, d=12):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        bq, bk, bv = torch.cat([self.q.bias, self.k.bias, self.v.bias]).chunk(3)
        lin = nn.functional.linear
        return lin(x, self.q.weight, bq) * lin(x, self.k.weight, bk) + lin(x, self.v.weight, bv)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_linear_biases_computed_from_parameters_fold(scheme, device):
    """A bias computed from parameters alone (cat, chunk, getitem) is a constant: evaluated
    through chunk's tuple, and not quantized as an activation by the cat annotator (before:
    "its bias is not a constant", each linear in float on the CPU)."""
    compiled, x = _compiled_whole(JoinedBiases, (2, 5, 12), 11, scheme)
    _agrees_on_device(compiled, JoinedBiases, x, device)


class HybridFrontEnd(nn.Module):
    """What the linear-only schemes leave float around their linears: a strided stem conv, a
    max pool, a grouped conv and BatchNorm2d, an average pool, a global average pool, a conv1d
    with padding="same" and BatchNorm1d on (N, C, L) and on (N, C), and a weight-normed conv1d
    (wav2vec2's positional conv: its weight computed in the graph)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.stem = nn.Sequential(nn.Conv2d(3, 12, 3, 2, 1), nn.BatchNorm2d(12), nn.ReLU(), nn.MaxPool2d(3, 1, 1),
                                      nn.Conv2d(12, 12, 3, 1, 1, groups=3), nn.BatchNorm2d(12),
                                      nn.AvgPool2d(3, 1, 1, count_include_pad=False))    # PoolFormer's
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.seq = nn.Conv1d(12, 10, 3, padding="same", dilation=2)
            self.bn1, self.bn2 = nn.BatchNorm1d(10), nn.BatchNorm1d(10)
            self.pos = nn.utils.parametrizations.weight_norm(nn.Conv1d(10, 10, 5, padding=2, groups=2), dim=2)
            self.fc = nn.Linear(10, 4)
            for bn in (self.stem[1], self.stem[5], self.bn1, self.bn2):     # statistics that matter
                bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        f = self.stem(x)
        g = self.pool(f).flatten(1)
        s = self.bn1(self.seq(f.flatten(2)))
        s = s + self.pos(s)
        return self.fc(self.bn2(s.mean(-1) + g[:, :10]))


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_float_convs_and_batch_norms_run_on_vulkan(scheme, device):
    """Under the linear-only schemes every conv, batch norm and pool runs on Vulkan in float (op
    conv2d; batch norm as a depthwise 1x1 conv2d; max_pool2d, avg_pool2d; the global pool a
    mean): before, each ran on the CPU. Float sums: close to the reference, not equal bits."""
    compiled, x = _compiled_whole(HybridFrontEnd, (2, 3, 15, 13), 9, scheme)
    ops = [n.op for n in compiled.program.nodes]
    assert ops.count("conv2d") == 5 and {"mean", "max_pool2d", "avg_pool2d"} <= set(ops), ops  # 2 convs, conv1d (BNs folded), weight-normed, bn2
    assert _agrees_on_device(compiled, HybridFrontEnd, x, device, eager_cosine=0.9999).shape == (2, 4)


class FrontEnd1d(nn.Module):
    """A 1-D front end as the linear-only schemes leave it float: a conv1d with padding="same"
    over an even kernel (padded one more on the right), MaxPool1d, AvgPool1d without the padding
    in the divisor, AdaptiveMaxPool1d to 5 (uneven windows) and to 1 (the max over time)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv = nn.Conv1d(6, 8, 4, padding="same")
            self.pools = nn.Sequential(nn.MaxPool1d(3, 2, 1), nn.AvgPool1d(3, 1, 1, count_include_pad=False))
            self.bins, self.top = nn.AdaptiveMaxPool1d(5), nn.AdaptiveMaxPool1d(1)
            self.fc = nn.Linear(8 * 6, 4)

    def forward(self, x):
        f = self.pools(torch.relu(self.conv(x)))
        return self.fc(torch.cat([self.bins(f), self.top(f)], -1).flatten(1))


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_float_one_d_pools_run_on_vulkan(scheme, device):
    """Under the linear-only schemes a 1-D front end's conv (an odd "same" padding), max and
    average pools and adaptive max pools ran on the CPU through torch; they are the 2-D float
    kernels on (N, C, L) seen as planes now, the max over time a float amax."""
    compiled, x = _compiled_whole(FrontEnd1d, (2, 6, 23), 12, scheme)
    ops = [n.op for n in compiled.program.nodes]
    assert {"conv2d", "max_pool2d", "avg_pool2d", "adaptive_max_pool2d", "amax"} <= set(ops), ops
    assert _agrees_on_device(compiled, FrontEnd1d, x, device, eager_cosine=0.9999).shape == (2, 4)


class PartlyUnsupported(nn.Module):
    """int8 conv and linear around an op no Vulkan kernel covers: the Bessel function J0
    (through torch on the CPU)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.special.bessel_j0(x) / 8.0
        return self.fc(torch.flatten(x, 1))


@pytest.fixture(scope="module")
def unsupported():
    xs = _randn((2, 3, 6, 6), 3, 2)
    return Compiled(PartlyUnsupported().eval(), xs[0], [(x,) for x in xs]), xs


def test_unsupported_ops_fall_back_and_stay_correct(unsupported, device):
    compiled, xs = unsupported
    fallback = dict(compiled.program.fallback)
    assert any(k.startswith("aten.special_bessel_j0") for k in fallback), fallback
    assert all(reason and "special_bessel_j0" in reason for k, reason in fallback.items() if k.startswith("aten.special_bessel_j0"))
    on_vulkan = [n.op for n in compiled.program.nodes if n.op in ("conv2d_q8", "linear_q8")]
    assert on_vulkan == ["conv2d_q8", "linear_q8"]
    compiled.check(device, xs[0])


class OnlyFloatOps(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(torch.flip(x, dims=[1]))


def test_entirely_unsupported_model_runs_on_the_cpu(device):
    x = torch.randn(3, 11)
    prog = vkq.compile(OnlyFloatOps(), (x,))
    assert prog.fallback_ops
    got = prog(x.numpy())
    np.testing.assert_allclose(got, OnlyFloatOps()(x).numpy(), rtol=1e-5, atol=1e-6)


class OutputsOfEveryKind(nn.Module):
    """What a model may return beside a float tensor: a bool mask, int64 indices, a float64
    sum, a constant, its input, one tensor twice."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return (y > 0, y.mean((2, 3)).argmax(1), y.double().sum(), torch.ones(3), x, y, y, y.shape[-1] * 2, 2.5,
                (y * 10).to(torch.int8))


def test_outputs_keep_torch_dtypes_and_constants_come_back(device, tmp_path):
    torch.manual_seed(0)
    model = OutputsOfEveryKind().eval()
    xs = _randn((2, 3, 9, 7), 2, 5)
    prog = vkq.compile(model, (xs[0],), [(x,) for x in xs])
    loaded = vkq.load(prog.save(tmp_path / "m.vkq"), device=device)
    with torch.no_grad():
        want = [np.asarray(t) for t in model(xs[1])]
    assert [w.dtype for w in want][-3:] == [np.int64, np.float64, np.int8]
    want[-2] = want[-2].astype(np.float32)                               # a Python float comes back as float32
    for run in (prog.run_reference, loaded, loaded.run_reference):
        got = run(xs[1].numpy())
        assert [a.dtype for a in got] == [w.dtype for w in want]          # bool, int64, float64, float32 x 4, ...
        assert [a.shape for a in got] == [w.shape for w in want]
        np.testing.assert_array_equal(got[3], np.ones(3, np.float32))
        np.testing.assert_array_equal(got[4], xs[1].numpy())
        np.testing.assert_array_equal(got[0], got[5] > 0)                 # the mask of the int8 conv's output
        assert got[0].any() and not got[0].all()
        assert (got[7], got[8]) == (14, 2.5)
        np.testing.assert_array_equal(got[9], (got[5] * 10).astype(np.int8))   # torch's cast: toward zero, wrapping
        got[3][:] = 7                                                      # the caller's copy, not the program's
    assert [np.array_equal(a, b) for a, b in zip(loaded(xs[1].numpy()), prog.run_reference(xs[1].numpy()))] == [True] * 10
    np.testing.assert_array_equal(loaded(xs[0].numpy())[3], np.ones(3, np.float32))


class ReturnsNone(nn.Module):
    def forward(self, x):
        return x.relu(), None


def test_a_none_output_is_refused_naming_it():
    with pytest.raises(ValueError, match="the model's output 1 is None"):
        vkq.compile(ReturnsNone(), (torch.randn(2, 5),))


def test_tensors_past_the_storage_buffer_range_run_on_the_cpu(device, monkeypatch):
    """A tensor larger than one binding of the device reaches (maxStorageBufferRange: 128 MiB on
    llvmpipe; scaled down here): the nodes reading or writing it run on the CPU, named and
    warned of, the rest on the device, and the result is the reference's. The program failed
    as a whole with a ValueError before."""
    import dataclasses
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 4, 3, stride=4),
                          nn.AdaptiveAvgPool2d(1)).eval()
    xs = _randn((1, 3, 40, 40), 3, 9)
    prog = vkq.compile(model, (xs[0],), [(x,) for x in xs])
    monkeypatch.setattr(device, "info", dataclasses.replace(device.info, max_storage_buffer_range=32 * 1024))
    on = vkq.CompiledProgram(prog.program, device)
    with pytest.warns(UserWarning, match=r"runs on the CPU on .*\(1, 32, 40, 40\) takes 0.04883 MiB, past "
                                         r".*storage buffer range of 0.03125 MiB"):
        got = on(xs[1].numpy())
    np.testing.assert_array_equal(got, prog.run_reference(xs[1].numpy()))
    assert [op for op, _ in on.fallback_ops] == ["conv2d_q8", "conv2d_q8"]
    assert all("(1, 32, 40, 40)" in reason and "storage buffer range" in reason for _, reason in on.fallback_ops)
    assert "quantize" in [n.op for i, n in enumerate(prog.program.nodes) if i not in on.executor.cpu_reasons]


class LongInnerDims(nn.Module):
    """Kernels whose loops grow with an inner dim: a linear over K, a matmul over K, a conv over
    its input channels."""

    def __init__(self, k):
        super().__init__()
        self.fc = nn.Linear(k, 8)
        self.conv = nn.Conv2d(k, 4, 3, padding=1)

    def forward(self, x, y):
        return self.fc(x), x @ y, self.conv(x[:2, :, None, None].expand(-1, -1, 3, 5))


@pytest.mark.parametrize("scheme, rows", [("static", 33), ("static", 2), ("dynamic", 33), ("dynamic", 3),
                                          ("weight_only", 17), ("weight_only", 2)])
def test_loops_past_the_loop_budget_run_on_the_cpu(device, monkeypatch, scheme, rows):
    """llvmpipe stops an invocation's loops after 65535 iterations with no error (a linear over
    K = 262144 at batch 9 lost its last rows' sums; a float adaptive pool of a 720 x 1280 map,
    a matmul over K = H * W, gave zeros): each kernel whose loop grows with K counts its
    iterations against the budget and its node runs on the CPU past it, named. Budget scaled
    down here (K = 600); at the device's own budget these run on the device."""
    from vkq.vkinfo import DeviceInfo
    torch.manual_seed(0)
    model = LongInnerDims(600).eval()
    g = torch.Generator().manual_seed(4)
    xs = [(torch.randn(rows, 600, generator=g) + 0.5, torch.randn(600, 5, generator=g)) for _ in range(3)]
    prog = vkq.compile(model, xs[0], xs, scheme=scheme)
    on_device = vkq.CompiledProgram(prog.program, device)
    want = on_device.run_reference(*[t.numpy() for t in xs[1]])
    assert not on_device.executor.cpu_reasons
    budget = 100 if rows > 4 else 15      # (a GEMV takes K 64 values an iteration)
    monkeypatch.setattr(DeviceInfo, "loop_budget", property(lambda self: budget))
    limited = vkq.CompiledProgram(prog.program, device)
    with pytest.warns(UserWarning, match=f"loop iterations an invocation, past .* loop budget of {budget}"):
        got = limited(*[t.numpy() for t in xs[1]])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    budget_ops = {op for op, why in limited.fallback_ops if f"loop budget of {budget}" in why}
    conv = "conv2d_q8" if scheme == "static" else "conv2d"
    assert "matmul" in budget_ops and conv in budget_ops, limited.fallback_ops
    linear = {"static": "linear_q8", "dynamic": "linear_dynamic", "weight_only": "linear_weight_only"}[scheme]
    assert linear in budget_ops, limited.fallback_ops


def test_zero_d_tensors_reach_torch_ops_as_zero_d(device, tmp_path):
    """A 0-d tensor (torch.tensor(True) as index_fill's value on a bool mask, which runs in torch)
    stays 0-d in the program and on its way into torch: numpy's ascontiguousarray made it 1-D,
    and index_fill refused it, so the program failed."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            return y * (y > 0).index_fill(1, torch.tensor([0, 3]), torch.tensor(True))

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    gm = vkq.quantize(M().eval(), (x,), [(torch.randn(2, 5, 8),) for _ in range(3)])
    program = vkq.compile(gm, (x,)).program
    node = next(n for n in program.nodes if n.op == "torch_op" and "index_fill" in n.attrs["target"])
    assert program.tensors[node.inputs[-1]].shape == () and np.ndim(program.constants[node.inputs[-1]]) == 0
    prog = vkq.CompiledProgram(program, device).save(tmp_path / "m.vkq")
    got = vkq.runtime.load(prog, device=device.info.name)(x.numpy())
    with torch.no_grad():
        want = gm(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got[:, [0, 3]] != 0).sum() > 0


class NestedInputs(nn.Module):
    """Inputs as models write them: a list of tensors, a dict, a Python flag and scale."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(8, 6), nn.Linear(5, 6)

    def forward(self, pair, extra, scale: float = 1.0, use_b: bool = True):
        y = self.a(pair[0]) + self.a(pair[1])
        return (y + self.b(extra["z"]) if use_b else y) * scale


@pytest.mark.parametrize("dynamic", [False, True])
def test_nested_and_python_inputs_compile_and_run(device, dynamic):
    """Example inputs holding a list and a dict of tensors and Python values (failed: 'list'
    object has no attribute 'shape'): the model is compiled for its tensors, the Python values
    as constants; the program takes the inputs as the example nests them or its tensors alone,
    and refuses another Python value than the one it was compiled with."""
    g = torch.Generator().manual_seed(6)
    mk = lambda n: ([torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)], {"z": torch.randn(n, 5, generator=g)})  # noqa: E731
    pair, extra = mk(3)
    model = NestedInputs().eval()
    dims = None
    if dynamic:
        b = torch.export.Dim("b", min=1, max=8)
        dims = ([{0: b}, {0: b}], {"z": {0: b}}, None, None)
    prog = vkq.compile(model, (pair, extra, 0.5, True), calibration=[(*mk(3), 0.5, True) for _ in range(3)],
                       scheme="dynamic", device=device, dynamic_shapes=dims)
    assert prog.program.inputs and len(prog.program.inputs) == 3
    want = model(pair, extra, 0.5, True).detach().numpy()
    got = prog(pair, extra, 0.5, True)
    assert cosine(got, want) > 0.999
    np.testing.assert_array_equal(got, prog(pair[0], pair[1], extra["z"]))
    np.testing.assert_array_equal(prog.run_reference(pair, extra, 0.5, True), prog.run_reference(pair[0], pair[1], extra["z"]))
    with pytest.raises(ValueError, match="compiled with 0.5"):
        prog(pair, extra, 2.0, True)
    with pytest.raises(ValueError, match="compiled with True"):
        prog(pair, extra, 0.5, torch.tensor(True))
    with pytest.raises(ValueError, match="structured"):
        prog(pair[0], extra, 0.5, True)
    if dynamic:
        p5, e5 = mk(5)
        assert prog(p5, e5, 0.5, True).shape == (5, 6)
    else:                               # static int8: the device as its reference, bit for bit
        static = vkq.compile(model, (pair, extra, 0.5, True), calibration=[(*mk(3), 0.5, True) for _ in range(3)],
                             device=device)
        np.testing.assert_array_equal(static(pair, extra, 0.5, True), static.run_reference(pair[0], pair[1], extra["z"]))
        assert cosine(static(pair, extra, 0.5, True), want) > 0.95
