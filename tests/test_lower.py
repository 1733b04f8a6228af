"""quantize -> lower -> run_reference(program, x) against the converted PT2E GraphModule run
eagerly (PyTorch's own reference): float outputs agree (cosine >= 0.999) and, op by op, every
int8 output is within one step of PT2E's on >= 99% of its elements (assert_matches_pt2e).
Also: what falls back to the CPU and why, other quantizers' graphs, the CPU ops themselves."""
import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import oputil
import vkq
import vkq.ops.cpu  # noqa: F401  (CPU ops register on import)
from vkq import api, models
from vkq.executor import run_reference
from vkq.lower import lower
from vkq.registry import cpu_reason, get_op

warnings.filterwarnings("ignore", category=UserWarning)


class SmallCNN(nn.Module):
    """conv-bn-relu, conv-relu6, maxpool, residual add, adaptive avgpool, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 12, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(12)
        self.conv2 = nn.Conv2d(12, 12, 3, padding=1)
        self.conv3 = nn.Conv2d(12, 20, 3, stride=2, padding=1)
        self.fc = nn.Linear(20, 7)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x + F.relu6(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def small_cnn():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = SmallCNN().eval()
        m.bn1.running_mean.uniform_(-0.3, 0.3)
        m.bn1.running_var.uniform_(0.5, 2.0)
    return m


def batches(shape, n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g),) for _ in range(n)]


def pt2e_values(gm, *inputs):
    """Every node's value when the converted graph runs eagerly: a copy, since an in-place op
    further on (hardswish_, add_) would change the tensor it returned."""
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result.clone() if isinstance(result, torch.Tensor) else result
            return result
    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# PT2E's spread: how far its output moves when the input moves by 1e-5 (a few input values cross a
# quantization boundary), 1 - cosine, the median of 8 draws. On a random-weight deep net that is a
# few percent (LCNet, ShuffleNet, R(2+1)D: 0.03): PT2E's fp32 arithmetic rounds across a boundary
# where vkq's exact integer arithmetic does not, at places that depend on the host's SIMD path
# (oneDNN's, ATen's), and the net amplifies each such flip. The draws reach 2.2x their median;
# SPREAD_FACTOR = 3 leaves room for that, and a wrong kernel (a flipped one, an early layer's zero
# point off by one) stays well outside it.
SPREAD_NOISE, SPREAD_DRAWS, SPREAD_FACTOR = 1e-5, 8, 3.0


def pt2e_spread(gm, xs, ref) -> float:
    """The median 1 - cosine of PT2E's output under SPREAD_NOISE on its float inputs, against its
    output `ref` on `xs` (0 where no input is float)."""
    if not any(a.is_floating_point() for a in xs):
        return 0.0
    first = (lambda o: o[0] if isinstance(o, (tuple, list)) else o)
    dists = []
    with torch.no_grad():
        for s in range(SPREAD_DRAWS):
            g = torch.Generator().manual_seed(s)
            moved = [a + SPREAD_NOISE * torch.randn(a.shape, generator=g) if a.is_floating_point() else a for a in xs]
            dists.append(1.0 - cosine(first(gm(*moved)).numpy(), ref))
    return float(np.median(dists))


def assert_cosine_with_pt2e(out, gm, xs, min_cos=0.99) -> float:
    """vkq's output `out` is at cosine >= min_cos with PT2E's on `xs` (a tuple), or, where it is
    not, no further from PT2E than PT2E is from itself: 1 - cosine <= SPREAD_FACTOR x
    pt2e_spread (computed only then: a video net's forward takes seconds). A bar that holds on any
    CPU; the op-by-op check (assert_matches_pt2e) is what finds a lowering error that small.
    Returns the cosine."""
    with torch.no_grad():
        ref = gm(*xs)
    ref = np.asarray(ref[0] if isinstance(ref, (tuple, list)) else ref)
    cos = cosine(out, ref)
    if cos >= min_cos:
        return cos
    spread = pt2e_spread(gm, xs, ref)
    bar = min(min_cos, 1.0 - SPREAD_FACTOR * spread)
    assert bar >= 0.8, f"PT2E moves to cosine {1 - spread:.4f} with itself under {SPREAD_NOISE} input noise: " \
                       f"too unstable an input to judge a lowering by"
    assert cos >= bar, f"cosine {cos:.5f} with PT2E: below {min_cos} and outside PT2E's own spread " \
                       f"(median 1 - cosine {spread:.5f} under {SPREAD_NOISE} input noise; bar {bar:.5f})"
    return cos


def assert_matches_pt2e(program, gm, x, min_cos=0.999):
    """End to end: the float outputs' cosine. Op by op: every node of the program, fed the PT2E
    values of its inputs (where a tensor has no PT2E counterpart, e.g. an int8 view the passes
    made, its value computed from PT2E values one step up), gives an int8 output within one
    step of PT2E's on >= 99% of the elements (a float output: equal to float rounding). Op by
    op, so that a float op that amplifies a one-step difference (layer_norm) does not hide or
    fake an error downstream. x: a tensor or a tuple of them. Returns how many outputs were compared."""
    xs = x if isinstance(x, tuple) else (x,)
    env = run_reference(program, *[a.numpy() for a in xs], keep_all=True)
    with torch.no_grad():
        ref = gm(*xs)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    out = env[program.outputs[0]]
    assert out.dtype == np.float32 and out.shape == ref.shape
    assert cosine(out, ref) >= min_cos

    values = {k: v.detach().numpy() for k, v in pt2e_values(gm, *xs).items() if isinstance(v, torch.Tensor)}
    sources = program.meta["int8_sources"]

    def pt2e(name):
        """The PT2E value a program tensor stands for: the quantize it replaced, or the FX node
        of the same name that the passes left as it was."""
        v = values.get(sources.get(name, name))
        if v is not None and v.dtype == np.uint8 and program.tensors[name].dtype == "int8":
            v = (v.astype(np.int16) - 128).astype(np.int8)     # a uint8 graph, lowered as int8
        return v if v is not None and v.shape == program.tensors[name].shape else None

    local = dict(env)                                        # each tensor: PT2E's value where
    for name in env:                                         # there is one, else computed locally
        if name not in program.inputs and name not in program.constants:
            del local[name]
    compared = 0
    for node in program.nodes:
        result = get_op(node.op).reference(*[local[i] for i in node.inputs], **node.attrs)
        for name, got in zip(node.outputs, result if isinstance(result, tuple) else (result,)):
            want = pt2e(name)
            local[name] = np.asarray(got if want is None else want).astype(program.tensors[name].numpy_dtype)
            if want is None:
                continue
            if program.tensors[name].dtype == "int8":
                within = np.mean(np.abs(np.asarray(got, np.int32) - want.astype(np.int32)) <= 1)
                assert within >= 0.99, f"{node.op} -> {name}: only {within:.2%} within one step of PT2E"
            else:
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{node.op} -> {name}")
            compared += 1
    return compared


def ops(program):
    return [n.op for n in program.nodes]


# ---------------------------------------------------------------- static int8 models

@pytest.fixture(scope="module")
def cnn():
    x = torch.randn(2, 3, 13, 13, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(small_cnn(), (x,), calibration=batches((8, 3, 13, 13)), progress=False)
    return gm, lower(gm, (x,)), x


def test_cnn_lowers_to_vulkan_ops_only(cnn):
    _, program, _ = cnn
    # the residual add is folded into the second conv's epilogue (fuse_epilogue)
    # and the final dequantize into the linear's
    assert ops(program) == ["quantize", "conv2d_q8", "conv2d_q8", "max_pool2d_q8", "conv2d_q8",
                            "adaptive_avg_pool2d_q8", "repack", "linear_q8"]
    assert program.nodes[-1].attrs["dequant"]
    assert "residual" in program.nodes[2].attrs
    assert program.fallback == []
    assert program.tensors[program.inputs[0]].dtype == "float32"
    assert program.tensors[program.outputs[0]].dtype == "float32"
    # a conv chain stays 4W4C; the flatten before the linear is one repack 4W4C -> 4H4W
    for n in program.nodes[1:-2]:
        assert program.tensors[n.outputs[0]].layout == "4W4C", n.op
    repack = program.nodes[-2]
    assert program.tensors[repack.inputs[0]].layout == "4W4C"
    assert program.tensors[repack.outputs[0]].layout == "4H4W" and repack.attrs["shape"] == [2, 20]
    # conv and linear biases stay float64 at the accumulator's scale: their fractions count
    for n in program.nodes:
        if n.op in ("conv2d_q8", "linear_q8"):
            b = program.constants[n.inputs[2]]
            assert program.tensors[n.inputs[2]].dtype == "float64" and b.dtype == np.float64, n.op
            assert np.any(b != np.rint(b)), n.op


def test_cnn_matches_pt2e(cnn):
    gm, program, x = cnn
    assert assert_matches_pt2e(program, gm, x) >= 7


def test_cnn_relu_fused_as_qmin(cnn):
    _, program, _ = cnn
    conv1 = program.nodes[1]
    assert conv1.attrs["qmin"] > -128 or conv1.attrs["out_zp"] == -128
    assert conv1.attrs["qmin"] == conv1.attrs["out_zp"]


def test_mlp_static():
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(models.mlp(), (x,), calibration=batches((5, 64)), progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "linear_q8", "linear_q8", "linear_q8"]   # dequantize fused
    assert program.fallback == []
    assert_matches_pt2e(program, gm, x)


class TinyWeights(nn.Module):
    """A conv whose batch norm has a dead channel (gamma ~ 0, beta 20: folded, its weights ~ 1e-9
    beside a bias of 20) and a head of weights below 1e-4 reading large features (a head
    initialised small, as BEiT's, which starts at 1e-3 of the usual scale)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.head(x.mean((2, 3)))


def test_tiny_weights_keep_their_precision(device):
    """Weights below 2^-12 / 2 were all zeros under XNNPACK's least weight scale (2^-12): this
    head's output was 0. The least scale is float32's epsilon now, and the dead channel's bias,
    20 / (x_scale * 2^-23) accumulator units, still fits int32: its weights are requantized
    coarser by the lowering (vkq.quant.fit_bias_to_accumulator)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = TinyWeights().eval()
        with torch.no_grad():
            m.conv.weight.mul_(100)
            m.bn.weight[2], m.bn.bias[2] = 1e-8, 20.0
            m.head.weight.mul_(1e-4 / m.head.weight.abs().max())
            m.head.bias.zero_()
    assert m.head.weight.abs().max() < 2 ** -12 / 2
    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(m, (x,), calibration=batches((2, 3, 9, 9)), progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "conv2d_q8", "adaptive_avg_pool2d_q8", "repack", "linear_q8"]
    with torch.no_grad():
        want = m(x).numpy()
    got = run_reference(program, x.numpy())
    assert np.abs(got).max() > 0.5 * np.abs(want).max()
    assert cosine(got, want) > 0.98
    assert_matches_pt2e(program, gm, x)
    from vkq.executor import VulkanExecutor
    np.testing.assert_array_equal(VulkanExecutor(program, device)(x.numpy()), got)


def test_tiny_activations_keep_their_precision(device):
    """A tensor of range 1e-5 before a norm (MobileNetV5's blocks: a layer scale of 1e-5 on the
    main path, then an RMS norm): under XNNPACK's least scale, 2^-12, it quantized to one value
    and the model's output was a constant. With float32's epsilon it keeps 8 bits."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(24, 32), nn.LayerNorm(32), nn.Linear(32, 6)).eval()
        with torch.no_grad():
            m[0].weight.mul_(1e-5)
            m[0].bias.mul_(1e-5)
            m[2].bias.zero_()          # (what the output holds is the norm's, not a constant)
    x = torch.randn(5, 24, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(m, (x,), calibration=batches((5, 24)), progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "linear_q8", "layer_norm_q8", "linear_q8"]
    with torch.no_grad():
        want = m(x).numpy()
    got = run_reference(program, x.numpy())
    assert cosine(got, want) > 0.99
    assert_matches_pt2e(program, gm, x)
    from vkq.executor import VulkanExecutor
    np.testing.assert_array_equal(VulkanExecutor(program, device)(x.numpy()), got)


def test_ops_without_int8_kernels_run_in_float():
    """softmax has no int8 kernel: it runs on a float32 shader (vkq.ops.float) after a
    dequantize; layer_norm between a dequantize and a quantize is one layer_norm_q8 (int8 in and
    out, float inside); nothing on the CPU. sigmoid between two quantized linears is an int8
    table, applied in the first linear's epilogue."""
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(models.unsupported_ops_model(), (x,), calibration=batches((2, 3, 16, 16)), progress=False)
    program = lower(gm, (x,))
    assert program.fallback == []
    assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    assert ops(program) == ["quantize", "conv2d_q8", "adaptive_avg_pool2d_q8", "repack", "layer_norm_q8",
                            "linear_q8", "linear_q8", "softmax"]
    assert program.nodes[5].attrs["lut"]
    assert_matches_pt2e(program, gm, x)


# ---------------------------------------------------------------- other quantizers, other spellings

def test_xnnpack_quantized_graph_lowers():
    """Work from the q/dq graph, not vkq's annotations: XNNPACK leaves avg_pool2d unannotated
    (dq -> avg_pool -> flatten -> q), the lowering still makes one avg_pool2d_q8."""
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    gm = api.quantize(models.digits_cnn(), (x,), calibration=batches((4, 1, 8, 8)), quantizer=q, progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "conv2d_q8", "conv2d_q8", "max_pool2d_q8", "conv2d_q8",   # add fused
                            "avg_pool2d_q8", "repack", "linear_q8"]
    assert program.fallback == []
    assert_matches_pt2e(program, gm, x)


def test_x86_uint8_graph_lowers_as_int8(cnn):
    """X86InductorQuantizer's uint8 activations (0..255) become int8 with zero point - 128 (exact);
    what it leaves in float (the residual add, pools) runs in float on the CPU."""
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)
    _, _, x = cnn
    q = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    gm = api.quantize(small_cnn(), (x,), calibration=batches((2, 3, 13, 13)), quantizer=q, progress=False)
    program = lower(gm, (x,))
    # (its pairs before the float convs, read by nothing else, are fake_quantize: one float pass)
    quantizes = [n for n in program.nodes if n.op in ("quantize", "fake_quantize")]
    assert quantizes and all(n.attrs["qmin"] == -128 and n.attrs["qmax"] == 127 for n in quantizes)
    assert quantizes[0].attrs["zero_point"] == next(
        n for n in gm.graph.nodes if n.op == "call_function" and "quantize_per_tensor" in str(n.target)).args[2] - 128
    assert ops(program)[-1] == "linear_q8_fout"   # X86's quantizer leaves the last output float
    assert assert_matches_pt2e(program, gm, x) >= 4


def test_xnnpack_dynamic_graph_lowers_to_per_row_linear():
    """choose_qparams -> q.tensor -> dq.tensor -> linear becomes linear_dynamic (per row)."""
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    gm = api.quantize(models.mlp(), (x,), quantizer=q, progress=False)
    program = lower(gm, (x,))
    assert [o for o in ops(program) if o != "relu"] == ["linear_dynamic"] * 3
    assert cosine(run_reference(program, x.numpy()), gm(x).detach().numpy()) >= 0.999


@pytest.mark.parametrize("scheme,op", [("dynamic", "linear_dynamic"), ("weight_only", "linear_weight_only")])
def test_linear_only_schemes(scheme, op):
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(models.mlp(), (x,), scheme=scheme, progress=False)
    program = lower(gm, (x,))                       # the scheme comes from the quantizer's node meta
    assert ops(program) == [op, "relu", op, "relu", op]
    assert program.fallback == []                   # the float relus have a float32 shader
    assert cosine(run_reference(program, x.numpy()), gm(x).detach().numpy()) >= 0.999


def test_decomposed_graph_lowers_the_same(cnn):
    """convolution / permute+addmm / mean.dim spellings (re-export + run_decompositions)."""
    gm, program, x = cnn
    dec = torch.export.export(gm, (x,)).run_decompositions().module()
    again = lower(dec, (x,))
    assert ops(again) == ops(program)
    np.testing.assert_array_equal(run_reference(again, x.numpy()), run_reference(program, x.numpy()))


def test_lower_leaves_the_converted_graph_alone(cnn):
    gm, _, x = cnn
    before = str(gm.graph)
    lower(gm, (x,))
    assert str(gm.graph) == before


def test_torch_op_fallback_for_ops_without_a_cpu_rule():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            return torch.special.bessel_j0(self.fc(x))
    x = torch.randn(2, 6)
    gm = api.quantize(M().eval(), (x,), progress=False)
    program = lower(gm, (x,))
    (node,) = [n for n in program.nodes if n.op == "torch_op"]
    assert node.attrs["target"] == "aten::special_bessel_j0"
    assert program.fallback == [("aten.special_bessel_j0", "aten.special_bessel_j0: no int8 Vulkan kernel; runs in float on the CPU")]
    assert cosine(run_reference(program, x.numpy()), gm(x).detach().numpy()) >= 0.999


def test_integers_beyond_int32_are_refused_not_wrapped(device):
    """Integer tensors live in 32-bit words: an int64 input, or an int64 result of an op that runs
    in torch, beyond int32's range was cast (wrapped) silently; it is refused, naming the tensor."""
    from vkq.executor import NodeError, VulkanExecutor

    class M(nn.Module):
        def forward(self, x, ids):
            big = torch.lcm(ids, ids + 1)                            # torch runs it: int64
            return x + (ids % 7).float().unsqueeze(-1), big

    x, ids = torch.randn(2, 3, 4), torch.randint(0, 1000, (2, 3))
    gm = api.quantize(M().eval(), (x, ids), scheme="dynamic", progress=False)
    program = lower(gm, (x, ids))
    got = run_reference(program, x.numpy(), ids.numpy())
    np.testing.assert_array_equal(got[1], M()(x, ids)[1].numpy())
    with pytest.raises(ValueError, match="input 'ids' holds integers beyond int32's range"):
        VulkanExecutor(program, device)(x.numpy(), ids.numpy() + 2 ** 33)
    with pytest.raises(NodeError, match="beyond int32's range"):
        run_reference(program, x.numpy(), (ids + 2 ** 20).numpy())       # ~2^40


def test_run_reference_lets_go_of_each_tensor_after_its_last_reader(monkeypatch):
    """run_reference kept every intermediate tensor to the end (a video model's activations took
    gigabytes); now each goes after the last node that reads it, and the outputs are the same."""
    import vkq.executor as ex
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(16, 16), nn.ReLU())]).eval()
    x = torch.randn(4, 16)
    program = lower(api.quantize(model, (x,), progress=False), (x,))
    sizes, store = [], ex._store
    monkeypatch.setattr(ex, "_store", lambda env, *a: (store(env, *a), sizes.append(len(env))))
    got = run_reference(program, x.numpy())
    held = max(sizes) - len(program.constants)
    assert len(program.nodes) >= 9 and held <= 3, (held, len(program.nodes))
    all_kept = run_reference(program, x.numpy(), keep_all=True)
    np.testing.assert_array_equal(got, all_kept[program.outputs[0]])


def test_a_device_call_lets_go_of_each_host_copy_after_its_last_reader(monkeypatch, device):
    """The executor kept the host copy of every tensor crossing a CPU op to the end of a call;
    now each goes after the last segment that reads it, outputs unchanged."""
    import vkq.executor as ex
    from vkq.executor import VulkanExecutor

    class Model(nn.Module):      # bessel_j0 runs in torch on the CPU: 6 device <-> CPU crossings
        def __init__(self):
            super().__init__()
            self.fcs = nn.ModuleList(nn.Linear(16, 16) for _ in range(6))

        def forward(self, x):
            for fc in self.fcs:
                x = torch.special.bessel_j0(fc(x))
            return x

    torch.manual_seed(0)
    x = torch.randn(4, 16)
    program = lower(api.quantize(Model().eval(), (x,), scheme="dynamic", progress=False), (x,))
    executor = VulkanExecutor(program, device)
    assert sum(seg[0] == "cpu" for seg in executor.segments) == 6
    sizes, store = [], ex._store
    monkeypatch.setattr(ex, "_store", lambda env, *a: (store(env, *a), sizes.append(len(env))))
    got = executor(x.numpy())
    assert max(sizes) <= 4, sizes
    np.testing.assert_array_equal(got, executor(x.numpy(), keep_all=True)[program.outputs[0]])
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-6)


class _HalfNet(nn.Module):
    """A conv, a batch norm, masked attention (a bool mask, as transformers builds it), a norm."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.qkv, self.norm, self.head = nn.Linear(8, 24), nn.LayerNorm(8), nn.Linear(8, 5)

    def forward(self, x):
        t = F.silu(self.bn(self.conv(x))).flatten(2).transpose(1, 2)         # (N, 36, 8)
        q, k, v = self.qkv(t).chunk(3, -1)
        mask = torch.ones(t.shape[1], t.shape[1], dtype=torch.bool, device=x.device).tril()
        a = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], attn_mask=mask)[:, 0]
        return self.head(self.norm(t + a)).mean(1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_half_precision_models_quantize_from_a_float32_copy(dtype, scheme):
    """A float16 model's attention ran on the CPU (the rewrites of float ops know float32) and a
    bfloat16 one failed to compile (numpy has no bfloat16). Now a half-precision model and its
    inputs are quantized from a float32 copy, the model given left as it is; the program takes
    half or float32 inputs, everything on the device, as close to the half model as float32 PT2E;
    compiling that PT2E graph with half example inputs works too (it failed recording shapes)."""
    torch.manual_seed(0)
    model = _HalfNet().eval()
    calib = [torch.randn(2, 3, 6, 6) for _ in range(3)]
    want_gm = api.quantize(model, (calib[0],), calib, scheme=scheme, progress=False)
    half = copy.deepcopy(model).to(dtype)
    prog = vkq.compile(half, (calib[0].to(dtype),), [c.to(dtype) for c in calib], scheme=scheme)
    assert all(p.dtype == dtype for p in half.parameters())
    assert prog.fallback_ops == [], prog.fallback_ops
    x = torch.randn(2, 3, 6, 6)
    got = prog(x.to(dtype))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, prog(x.to(dtype).float()))
    with torch.no_grad():
        ref, model_out = want_gm(x.to(dtype).float()).numpy(), half(x.to(dtype)).float().numpy()
    assert cosine(got, ref) > 0.999 and cosine(got, model_out) > 0.99
    from_gm = vkq.compile(want_gm, (calib[0].to(dtype),))     # PT2E's float32 graph, half examples
    np.testing.assert_allclose(from_gm(x.to(dtype)), from_gm.run_reference(x.to(dtype).float().numpy()), rtol=1e-5, atol=1e-5)


def test_api_compile():
    x = torch.randn(3, 64)
    program, fallback = api.compile(models.mlp(), (x,))
    assert ops(program)[0] == "quantize" and fallback == program.fallback == []
    gm = api.quantize(models.mlp(), (x,), scheme="weight_only", progress=False)
    program, fallback = api.compile(gm, (x,), scheme="weight_only")
    assert "linear_weight_only" in ops(program)


# ---------------------------------------------------------------- the CPU ops against torch

R = np.random.default_rng(0)
A = R.standard_normal((3, 5, 7)).astype(np.float32)
B = R.standard_normal((3, 5, 7)).astype(np.float32)
IMG = R.standard_normal((2, 4, 9, 9)).astype(np.float32)
W = R.standard_normal((6, 2, 3, 3)).astype(np.float32)
BIAS = R.standard_normal(6).astype(np.float32)
t = torch.from_numpy

CPU_CASES = [
    ("layer_norm", (A, np.full(7, 1.5, np.float32), np.full(7, 0.25, np.float32)), {"normalized_shape": [7], "eps": 1e-5},
     F.layer_norm(t(A), (7,), t(np.full(7, 1.5, np.float32)), t(np.full(7, 0.25, np.float32)))),
    ("softmax", (A,), {"dim": 1}, torch.softmax(t(A), 1)),
    ("log_softmax", (A,), {"dim": -1}, torch.log_softmax(t(A), -1)),
    ("gelu", (A,), {"approximate": "none"}, F.gelu(t(A))),
    ("gelu", (A,), {"approximate": "tanh"}, F.gelu(t(A), approximate="tanh")),
    ("sigmoid", (A,), {}, torch.sigmoid(t(A))),
    ("tanh", (A,), {}, torch.tanh(t(A))),
    ("silu", (A,), {}, F.silu(t(A))),
    ("relu", (A,), {}, F.relu(t(A))),
    ("hardtanh", (A,), {"min_val": -0.5, "max_val": 0.7}, F.hardtanh(t(A), -0.5, 0.7)),
    ("add", (A, B[:, :1]), {"alpha": 2}, torch.add(t(A), t(B[:, :1]), alpha=2)),
    ("sub", (A,), {"scalar": 3.0, "scalar_first": True}, 3.0 - t(A)),
    ("mul", (A, B), {}, t(A) * t(B)),
    ("div", (A,), {"scalar": 4.0}, t(A) / 4.0),
    ("matmul", (A, B.transpose(0, 2, 1).copy()), {}, t(A) @ t(B.transpose(0, 2, 1).copy())),
    ("bmm", (A, B.transpose(0, 2, 1).copy()), {}, torch.bmm(t(A), t(B.transpose(0, 2, 1).copy()))),
    ("linear", (A, W.reshape(6, 18)[:, :7].copy(), BIAS), {}, F.linear(t(A), t(W.reshape(6, 18)[:, :7].copy()), t(BIAS))),
    ("conv2d", (IMG, W, BIAS), {"stride": [2, 1], "padding": [1, 2], "dilation": [1, 2], "groups": 2},
     F.conv2d(t(IMG), t(W), t(BIAS), (2, 1), (1, 2), (1, 2), 2)),
    ("reshape", (A,), {"shape": [15, 7]}, t(A).reshape(15, 7)),
    ("permute", (A,), {"dims": [2, 0, 1]}, t(A).permute(2, 0, 1)),
    ("transpose", (A,), {"dim0": 0, "dim1": 2}, t(A).transpose(0, 2)),
    ("mean", (A,), {"dims": [1, 2], "keepdim": True}, t(A).mean((1, 2), keepdim=True)),
    ("cat", (A, B), {"dim": 2}, torch.cat([t(A), t(B)], 2)),
    ("torch_op", (A,), {"target": "aten::cumsum", "args": [{"__input__": 0}, 1], "kwargs": {}, "dtypes": ["float32"]},
     torch.cumsum(t(A), 1)),
]


@pytest.mark.parametrize("op,inputs,attrs,want", CPU_CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CPU_CASES)])
def test_cpu_op_matches_torch(op, inputs, attrs, want):
    spec = get_op(op)       # (float ops run on Vulkan too: tests/test_float_ops.py)
    got = spec.reference(*inputs, **attrs)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_cpu_shape_ops_keep_int8():
    q = R.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    assert get_op("permute").reference(q, dims=[2, 1, 0]).dtype == np.int8
    assert get_op("reshape").reference(q, shape=[6, 4]).dtype == np.int8


# ---------------------------------------------------------------- on a device

def test_lowered_cnn_runs_on_device(cnn, device):
    """The lowered program on Vulkan equals its reference bit for bit (int8 all the way, the
    float output of linear_q8_fout included)."""
    _, program, x = cnn
    oputil.assert_program_on_device(program, device, x.numpy())


def test_inference_identities_are_dropped():
    """dropout, Dropout2d, AlphaDropout, FeatureAlphaDropout (eval), clone, contiguous: no CPU
    round trip between the conv, the pool and the linear (Dropout2d before a segmentation head
    ran in float on the CPU)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc, self.drop = nn.Conv2d(3, 8, 3), nn.Linear(8, 5), nn.Dropout(0.2)
            self.drops = nn.Sequential(nn.Dropout2d(0.1), nn.AlphaDropout(0.1), nn.FeatureAlphaDropout(0.1))

        def forward(self, x):
            x = F.adaptive_avg_pool2d(F.relu(self.drops(self.c(x))), 1).flatten(1).contiguous()
            return self.fc(self.drop(x.clone()))
    x = torch.randn(2, 3, 9, 9)
    gm = api.quantize(M().eval(), (x,), progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "conv2d_q8", "adaptive_avg_pool2d_q8", "repack", "linear_q8"]
    assert program.fallback == []


def test_int8_permute_runs_on_vulkan_between_int8_ops():
    """conv -> permute to channels-last -> linear over channels (ConvNeXt): the permute stays
    int8 and is one gather from the conv's 4W4C into the 4H4W the linear reads; nothing on the CPU."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc, self.fc2 = nn.Conv2d(3, 8, 3), nn.Linear(8, 6), nn.Linear(6 * 7 * 7, 5)

        def forward(self, x):
            y = torch.relu(self.fc(self.c(x).permute(0, 2, 3, 1)))
            return self.fc2(y.reshape(y.shape[0], -1)) * 2
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9)
    gm = api.quantize(M().eval(), (x,), calibration=batches((2, 3, 9, 9)), progress=False)
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "conv2d_q8", "permute", "linear_q8", "repack", "linear_q8"]
    assert program.nodes[5].attrs["lut"]                     # * 2: a table in fc2's epilogue
    permute = program.nodes[2]
    out = program.tensors[permute.outputs[0]]
    assert (out.dtype, out.shape, out.layout) == ("int8", (2, 7, 7, 8), "4H4W")
    assert program.tensors[permute.inputs[0]].layout == "4W4C"
    assert program.fallback == []
    assert assert_matches_pt2e(program, gm, x) >= 5


def test_transformer_encoder_lowers():
    """A tiny BERT (random init, eager attention): int64 ids, a bool attention mask, embedding,
    matmul, softmax, layer_norm, gelu (static: an int8 table): no node on the CPU; every linear (static: linear_q8, dynamic:
    linear_dynamic); export's _assert_tensor_metadata nodes dropped."""
    transformers = pytest.importorskip("transformers")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=48, max_position_embeddings=32, attn_implementation="eager")
        bert = transformers.BertModel(cfg).eval()
        ids = torch.randint(0, 50, (2, 11))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0
    for scheme, linear in (("static", "linear_q8"), ("dynamic", "linear_dynamic")):
        gm = api.quantize(Encoder().eval(), (ids, mask), scheme=scheme, progress=False)
        program = lower(gm, (ids, mask), float_linear=scheme if scheme == "dynamic" else "dynamic")
        # (dynamic: each layer's q, k, v one linear_dynamic_parts node, vkq/ops/linear_parts.py)
        assert ops(program).count(linear) + 3 * ops(program).count("linear_dynamic_parts") == 12
        assert ops(program).count("linear_dynamic_parts") == (2 if scheme == "dynamic" else 0)
        assert program.fallback == [], program.fallback      # embedding, mask arithmetic: on Vulkan too
        float_ops = {"layer_norm", "matmul_strided"} | ({"gelu", "softmax_masked"} if scheme == "dynamic"
                                                         else {"softmax"})   # static: q/dq between them
        assert float_ops <= {n.op for n in program.nodes}   # float32 shaders
        if scheme == "static":      # GELU: a table in the epilogue of each FFN-up linear
            assert sum(bool(n.attrs.get("lut")) for n in program.nodes if n.op == "linear_q8") == 2
        assert all(n.attrs.get("target") != "aten::_assert_tensor_metadata" for n in program.nodes)
        if scheme == "static":
            assert "layer_norm_q8" in ops(program)       # (the embeddings' norm reads floats)
            assert assert_matches_pt2e(program, gm, (ids, mask)) > 40
        else:
            out = run_reference(program, ids.numpy(), mask.numpy())
            assert cosine(out, gm(ids, mask).detach().numpy()) >= 0.999


def test_softmax_with_float32_dtype_runs_on_vulkan():
    """softmax(x, dim, dtype=torch.float32) on a float32 x (Llama's attention: 2 nodes were on
    the CPU) is the plain softmax: a float shader, not the CPU."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.softmax(self.fc(x), dim=-1, dtype=torch.float32)

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(M().eval(), (x,), calibration=batches((3, 8)), progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and ops(program)[-1] == "softmax"
    assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    assert_matches_pt2e(program, gm, x)


class ConstantTableMLP(nn.Module):
    """SwinV2's continuous position bias: an MLP over a constant coordinate table, added to the
    activations."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.register_buffer("table", torch.rand(1, 5, 7, 2, generator=g) * 2 - 1)
        self.mlp = nn.Sequential(nn.Linear(2, 12), nn.ReLU(), nn.Linear(12, 3))

    def forward(self, x):
        return torch.relu(x + self.mlp(self.table))


@pytest.mark.parametrize("folded", [True, False], ids=["folded", "as_ops"])
def test_linear_on_a_constant_table_reads_it_in_its_layout(device, monkeypatch, folded):
    """The MLP over the constant table is computed once (fold_constant_computations): no linear
    is left. Without that pass, a linear_q8 whose input is an int8 constant (the quantized table,
    rank 4): the constant is packed 4H4W as the linear reads it (before: left 4W4C, the rank-4
    default, and building the program failed with "linear kernels read int8 4H4W activations")."""
    from vkq.passes import pipeline
    if not folded:
        monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE
                                                   if p is not pipeline.fold_constant_computations])
    x = torch.randn(1, 5, 7, 3, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(ConstantTableMLP().eval(), (x,), calibration=batches((1, 5, 7, 3)), progress=False)
    program = lower(gm, (x,))
    if folded:
        assert "linear_q8" not in ops(program), ops(program)
    else:
        first = next(n for n in program.nodes if n.op == "linear_q8")
        assert first.inputs[0] in program.constants and program.tensors[first.inputs[0]].layout == "4H4W"
    assert program.fallback == []
    oputil.assert_program_on_device(program, device, x.numpy())
    assert assert_matches_pt2e(program, gm, x) >= 1
