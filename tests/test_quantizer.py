"""VkqQuantizer and vkq.api.quantize: what the converted PT2E graphs carry for each scheme."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vkq import api, models
from vkq.quantizer import VkqQuantizer

warnings.filterwarnings("ignore", category=UserWarning)

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed


class ConvBlock(nn.Module):
    """conv-bn-relu, conv-relu6, maxpool, add, adaptive avgpool, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        y = F.relu6(self.conv2(x))
        x = F.max_pool2d(x + y, 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _model():
    torch.manual_seed(0)
    m = ConvBlock().eval()
    m.bn1.running_mean.uniform_(-0.5, 0.5)
    m.bn1.running_var.uniform_(0.5, 2)
    return m


def attr(gm, node):
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    return obj


def calls(gm, *targets):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]


@pytest.fixture(scope="module")
def static_gm():
    x = torch.randn(2, 3, 11, 11)
    return api.quantize(_model(), (x,), calibration=[(torch.randn(2, 3, 11, 11),) for _ in range(3)],
                        progress=False), x


def test_static_weights_are_int8_per_channel_symmetric(static_gm):
    gm, _ = static_gm
    dqw = calls(gm, qd.dequantize_per_channel.default)
    assert len(dqw) == 3                                   # conv1, conv2, fc
    for n in dqw:
        w = attr(gm, n.args[0])
        assert w.dtype == torch.int8 and n.args[3] == 0 and tuple(n.args[4:7]) == (-127, 127, torch.int8)
        zps = attr(gm, n.args[2])
        assert torch.all(zps == 0)
    # bias stays float, BN is folded into conv1 by prepare
    assert not calls(gm, aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default)
    for conv in calls(gm, aten.conv2d.default):
        assert attr(gm, conv.args[2]).dtype == torch.float32


def test_static_activations_int8_per_tensor(static_gm):
    gm, _ = static_gm
    qs = calls(gm, qd.quantize_per_tensor.default)
    assert qs and all(tuple(q.args[3:6]) == (-128, 127, torch.int8) for q in qs)


def test_static_activation_fused_one_observer_after_it(static_gm):
    gm, _ = static_gm
    for conv in calls(gm, aten.conv2d.default):
        (user,) = conv.users                              # conv -> relu / hardtanh, no q between
        assert user.target in (aten.relu.default, aten.relu6.default, aten.hardtanh.default)
        assert [u.target for u in user.users] == [qd.quantize_per_tensor.default]


def test_static_shared_qparams_through_pool_and_views(static_gm):
    gm, _ = static_gm
    for op in (aten.max_pool2d.default, aten.flatten.using_ints):
        (node,) = calls(gm, op)
        dq_in, (q_out,) = node.args[0], node.users
        assert dq_in.target == qd.dequantize_per_tensor.default
        assert q_out.target == qd.quantize_per_tensor.default
        assert dq_in.args[1:3] == q_out.args[1:3], op        # same scale and zero point


def test_static_average_has_its_own_observer(static_gm):
    """On the input's grid a mean of N values is a tie (k + 1/2) for 1 in N outputs, which
    PyTorch's float arithmetic breaks either way: averages get their own, finer, scale."""
    gm, _ = static_gm
    (node,) = calls(gm, aten.adaptive_avg_pool2d.default)
    dq_in, (q_out,) = node.args[0], node.users
    assert dq_in.target == qd.dequantize_per_tensor.default and q_out.target == qd.quantize_per_tensor.default
    assert q_out.args[1] < dq_in.args[1]                      # the mean's range is narrower


def test_static_add_is_quantized(static_gm):
    gm, _ = static_gm
    (add,) = calls(gm, aten.add.Tensor)
    assert all(a.target == qd.dequantize_per_tensor.default for a in add.args[:2])
    assert [u.target for u in add.users] == [qd.quantize_per_tensor.default]


def test_static_close_to_float(static_gm):
    gm, x = static_gm
    ref, got = _model()(x), gm(x)
    assert F.cosine_similarity(ref.flatten(), got.flatten(), dim=0) > 0.99


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_linear_only_schemes_keep_activations_float(scheme):
    x = torch.randn(3, 64)
    gm = api.quantize(models.mlp(), (x,), scheme=scheme, progress=False)
    assert not calls(gm, qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor,
                     qd.choose_qparams.tensor)                       # no per-tensor dynamic qparams
    linears = calls(gm, aten.linear.default)
    assert len(linears) == 3
    for lin in linears:
        assert lin.args[1].target == qd.dequantize_per_channel.default
        assert lin.meta["vkq_scheme"] == scheme
    assert F.cosine_similarity(models.mlp()(x).flatten(), gm(x).flatten(), dim=0) > 0.999


@pytest.mark.parametrize("scheme", ["int4", "8da4w"])
def test_int4_schemes_mark_linears_and_observe_nothing(scheme):
    """The int4 schemes leave every weight float (the lowering quantizes it in groups: no
    second rounding through int8) and mark the linears with the scheme."""
    x = torch.randn(3, 64)
    gm = api.quantize(models.mlp(), (x,), scheme=scheme, progress=False)
    assert not any("quantized_decomposed" in str(n.target) for n in gm.graph.nodes)
    linears = calls(gm, aten.linear.default)
    assert len(linears) == 3 and all(lin.meta["vkq_scheme"] == scheme for lin in linears)


def test_calibration_sets_the_ranges():
    """Calibration data, not the example input, decides the activation scales."""
    x = torch.randn(2, 64) * 0.01
    small = api.quantize(models.mlp(), (x,), progress=False)
    big = api.quantize(models.mlp(), (x,), calibration=[(torch.randn(2, 64) * 10,) for _ in range(2)],
                       progress=False)
    s_small = calls(small, qd.quantize_per_tensor.default)[0].args[1]
    s_big = calls(big, qd.quantize_per_tensor.default)[0].args[1]
    assert s_big > 100 * s_small


def test_numpy_example_and_calibration_are_taken_as_tensors():
    """What a user holding numpy data passes: the same scales as from tensors."""
    x = torch.randn(2, 64)
    cal = [torch.randn(2, 64) * 3 for _ in range(2)]
    from_torch = api.quantize(models.mlp(), (x,), calibration=cal, progress=False)
    from_numpy = api.quantize(models.mlp(), x.numpy(), calibration=[c.numpy() for c in cal], progress=False)
    scales = [[n.args[1] for n in calls(gm, qd.quantize_per_tensor.default)] for gm in (from_torch, from_numpy)]
    assert scales[0] == scales[1] and len(scales[0]) >= 3


def test_calibration_of_inputs_and_labels_says_to_pass_the_inputs():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 64), torch.arange(8)),
                                         batch_size=4)
    with pytest.raises(ValueError, match=r"do not fit .*\(batches of \(inputs, labels\).*pass the inputs only"):
        api.quantize(models.mlp(), (torch.randn(2, 64),), calibration=loader, progress=False)


def test_calibration_progress_bar(capsys):
    pytest.importorskip("tqdm")
    x = torch.randn(2, 64)
    api.quantize(models.mlp(), (x,), calibration=[(x,)] * 2, progress=True)
    assert "calibrating" in capsys.readouterr().err


def test_unknown_scheme():
    with pytest.raises(ValueError, match="scheme"):
        VkqQuantizer("int3")


def test_pool_on_the_float_input_is_quantized():
    """A pool reading the model input still runs on int8: its input gets an observer and its
    output shares it (views and activations of float tensors stay float)."""
    class M(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2)
    x = torch.randn(1, 3, 6, 6)
    gm = api.quantize(M(), (x,), progress=False)
    (pool,) = calls(gm, aten.max_pool2d.default)
    (q_out,) = pool.users
    assert pool.args[0].target == qd.dequantize_per_tensor.default
    assert q_out.target == qd.quantize_per_tensor.default and q_out.args[1:3] == pool.args[0].args[1:3]


def _histogram_draw(rng, kind: int, n: int) -> torch.Tensor:
    import numpy as np
    x = [lambda: rng.normal(size=n), lambda: rng.standard_t(2, size=n),            # heavy tails: long searches
         lambda: np.maximum(rng.normal(size=n), 0), lambda: rng.uniform(-1, 3, size=n),
         lambda: np.r_[rng.normal(size=n), [50.0, -80.0]], lambda: rng.exponential(size=n) * 1e-3,
         lambda: np.full(n, 0.7), lambda: rng.integers(0, 4, size=n).astype(float),
         lambda: rng.standard_cauchy(size=n)][kind]()
    return torch.tensor(x, dtype=torch.float32)


def test_histogram_observer_search_is_torchaos():
    """vkq's HistogramObserver finds the same min/max as torchao's (its search without the Python
    walk, its errors scored in batches): equal bits over 45 histograms of 9 shapes of distribution,
    1-3 batches each."""
    import numpy as np
    from torchao.quantization.pt2e import HistogramObserver as Torchao
    from vkq.observer import HistogramObserver
    rng = np.random.default_rng(0)
    for i in range(45):
        ours, theirs = HistogramObserver(eps=2 ** -12), Torchao(eps=2 ** -12)
        for _ in range(int(rng.integers(1, 4))):
            x = _histogram_draw(rng, i % 9, int(rng.integers(10, 30000)))
            ours(x), theirs(x)
        got, want = ours._non_linear_param_search(), Torchao._non_linear_param_search(theirs)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), (i, got, want)
        got, want = ours.calculate_qparams(), theirs.calculate_qparams()
        assert all(torch.equal(g, w) for g, w in zip(got, want)), (i, got, want)
        # the batched error of any bin pair, bit for bit torchao's one at a time
        pairs = [tuple(sorted(int(b) for b in rng.integers(0, ours.bins, 2))) for _ in range(6)] + [(0, ours.bins - 1)]
        assert ours._quantization_errors(pairs) == [Torchao._compute_quantization_error(ours, *p) for p in pairs], i
    from vkq.quantizer import activation_spec
    assert type(activation_spec().observer_or_fake_quant_ctr()) is HistogramObserver    # what vkq uses


def test_histogram_observer_leaves_nan_out_of_the_range():
    """A NaN in an observed activation (a float model computing NaN for some inputs) made
    torchao's histc fail on a NaN range; it is left out, with a warning, as torchao leaves out
    infinities: the range is the other values'."""
    import warnings
    from vkq.observer import HistogramObserver
    x = torch.tensor([float("nan"), -1.0, 0.5, 2.0, float("nan")])
    ours, plain = HistogramObserver(eps=2 ** -12), HistogramObserver(eps=2 ** -12)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ours(x)
        ours(torch.full((3,), float("nan")))        # all NaN: nothing observed
    assert any("NaN" in str(w.message) for w in seen)
    plain(x[~torch.isnan(x)])
    assert (ours.min_val, ours.max_val) == (plain.min_val, plain.max_val) == (-1.0, 2.0)
    assert all(torch.equal(a, b) for a, b in zip(ours.calculate_qparams(), plain.calculate_qparams()))


class ScaledNorms(nn.Module):
    """Layer scales of channels from 1e-4 to 1 after a conv, an RMS norm written out over
    channels (timm's rms_norm2d with its weight), a linear and a layer norm; a LLaMA RMSNorm
    written out (float casts, pow, mean, rsqrt, its weight)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.conv, self.fc, self.ln = nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8, 8), nn.LayerNorm(8)
        self.gammas = nn.ParameterList([nn.Parameter(10 ** (-4 * torch.rand(8, generator=g))) for _ in range(4)])
        self.rms_weight = nn.Parameter(torch.rand(8, generator=g) + 0.5)

    def forward(self, x):                                   # x (2, 8, 6, 6)
        y = x + self.conv(x) * self.gammas[0].view(1, -1, 1, 1)
        v = torch.mean(y.pow(2), dim=1, keepdim=True)
        y = y * torch.rsqrt(v + 1e-5) * self.rms_weight.reshape(1, -1, 1, 1) * self.gammas[1].view(1, -1, 1, 1)
        t = y.flatten(2).transpose(1, 2)                    # (2, 36, 8)
        t = t + self.fc(t) * self.gammas[2]
        t = self.ln(t) * self.gammas[3]
        h = t.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.fc(self.rms_weight * h.to(t.dtype))


def test_channel_scales_fold_into_their_producers_and_written_out_rms_norms_are_one_op():
    """A per-channel constant multiplier quantized per tensor as an activation lost its small
    channels (a layer scale at 1e-5 put out 0: MobileNetV5), and the parts of a written-out RMS
    norm, each quantized, lost the mean of squares. The scales now fold into the weight of the
    conv / linear / norm that makes their input (or the next scale's), the norms are aten.rms_norm
    (float inside): no mul by a constant is left, and the static int8 model is close to float."""
    x = torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(4))
    model = ScaledNorms().eval()
    gm = api.quantize(model, (x,), [(torch.randn(2, 8, 6, 6),) for _ in range(4)], progress=False)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.rms_norm.default) == 2 and aten.rsqrt.default not in targets, targets
    consts = {n for n in gm.graph.nodes if n.op == "get_attr"}
    muls = [n for n in gm.graph.nodes if n.target == aten.mul.Tensor]
    assert not any(a in consts or (a.op == "call_function" and a.target == qd.dequantize_per_tensor.default
                                   and a.args[0] in consts) for m in muls for a in m.args if hasattr(a, "op")), muls
    with torch.no_grad():
        want, got = model(x), gm(x)
    cos = F.cosine_similarity(want.flatten(), got.flatten(), dim=0)
    assert cos > 0.995, cos


class ScaleOnAnotherDim(nn.Module):
    """A layer norm over the last dim of a 4-D tensor whose dim 1 has as many entries, scaled
    along dim 1: not the norm's channel (its weight must not take the scale)."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)
        self.s = nn.Parameter(torch.linspace(0.1, 2.0, 6).reshape(1, 6, 1, 1))

    def forward(self, x):                                   # x (2, 6, 5, 6)
        return self.ln(x) * self.s


def test_a_channel_scale_folds_only_into_the_weight_of_its_own_channel():
    """A scale along dim 1 of a layer norm's 4-D output (normalized over the last dim, of the
    same size) stays a scale: folded into the norm's weight it scaled the wrong dim (cosine 0.74
    with float)."""
    x = torch.randn(2, 6, 5, 6, generator=torch.Generator().manual_seed(5))
    model = ScaleOnAnotherDim().eval()
    gm = api.quantize(model, (x,), [(torch.randn(2, 6, 5, 6),) for _ in range(4)], progress=False)
    with torch.no_grad():
        want, got = model(x), gm(x)
    assert F.cosine_similarity(want.flatten(), got.flatten(), dim=0) > 0.995
