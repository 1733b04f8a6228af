"""quantize -> lower -> run_reference(program, x) against the converted PT2E GraphModule run
eagerly (PyTorch's own reference): float outputs agree (cosine >= 0.999) and, op by op, every
int8 output is within one step of PT2E's on >= 99% of its elements (assert_matches_pt2e).
Also: what falls back to the CPU and why, other quantizers' graphs, the CPU ops themselves."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import oputil
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


def test_ops_without_int8_kernels_run_in_float():
    """layer_norm and softmax have no int8 kernels: they run on float32 shaders (vkq.ops.float),
    with a dequantize before and a quantize after; nothing on the CPU. sigmoid between two
    quantized linears is an int8 table, applied in the first linear's epilogue."""
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(models.unsupported_ops_model(), (x,), calibration=batches((2, 3, 16, 16)), progress=False)
    program = lower(gm, (x,))
    assert program.fallback == []
    assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    assert ops(program) == ["quantize", "conv2d_q8", "adaptive_avg_pool2d_q8", "repack", "dequantize", "layer_norm",
                            "quantize", "linear_q8", "linear_q8", "softmax"]
    assert program.nodes[7].attrs["lut"]
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
    quantizes = [n for n in program.nodes if n.op == "quantize"]
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
            return torch.cumprod(self.fc(x), dim=1)
    x = torch.randn(2, 6)
    gm = api.quantize(M().eval(), (x,), progress=False)
    program = lower(gm, (x,))
    (node,) = [n for n in program.nodes if n.op == "torch_op"]
    assert node.attrs["target"] == "aten::cumprod"
    assert program.fallback == [("aten.cumprod", "aten.cumprod: no int8 Vulkan kernel; runs in float on the CPU")]
    assert cosine(run_reference(program, x.numpy()), gm(x).detach().numpy()) >= 0.999


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
    """dropout (eval), clone, contiguous: no CPU round trip between the pool and the linear."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc, self.drop = nn.Conv2d(3, 8, 3), nn.Linear(8, 5), nn.Dropout(0.2)

        def forward(self, x):
            x = F.adaptive_avg_pool2d(F.relu(self.c(x)), 1).flatten(1).contiguous()
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
        assert ops(program).count(linear) == 12
        assert program.fallback == [], program.fallback      # embedding, mask arithmetic: on Vulkan too
        float_ops = {"layer_norm"} | ({"gelu", "softmax_masked", "matmul_strided"} if scheme == "dynamic"
                                      else {"softmax", "matmul"})   # static: q/dq between them
        assert float_ops <= {n.op for n in program.nodes}   # float32 shaders
        if scheme == "static":      # GELU: a table in the epilogue of each FFN-up linear
            assert sum(bool(n.attrs.get("lut")) for n in program.nodes if n.op == "linear_q8") == 2
        assert all(n.attrs.get("target") != "aten::_assert_tensor_metadata" for n in program.nodes)
        if scheme == "static":
            assert assert_matches_pt2e(program, gm, (ids, mask)) > 50
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


def test_linear_on_a_constant_table_reads_it_in_its_layout(device):
    """A linear_q8 whose input is an int8 constant (the quantized table, rank 4): the constant is
    packed 4H4W as the linear reads it (before: left 4W4C, the rank-4 default, and building the
    program failed with "linear kernels read int8 4H4W activations")."""
    x = torch.randn(1, 5, 7, 3, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(ConstantTableMLP().eval(), (x,), calibration=batches((1, 5, 7, 3)), progress=False)
    program = lower(gm, (x,))
    first = next(n for n in program.nodes if n.op == "linear_q8")
    assert first.inputs[0] in program.constants and program.tensors[first.inputs[0]].layout == "4H4W"
    assert program.fallback == []
    oputil.assert_program_on_device(program, device, x.numpy())
    assert assert_matches_pt2e(program, gm, x) >= 1


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
        gm = api.quantize(Einsums().eval(), (x,), calibration=batches((2, 3, 7, 8)), scheme=scheme, progress=False)
        program = lower(gm, (x,))
        assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
        assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)
        got = oputil.VulkanExecutor(program, device)(x.numpy())
        ref = run_reference(program, x.numpy())
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
        gm = api.quantize(OtherSpellings().eval(), (x,), calibration=batches((2, 5, 6)), scheme=scheme,
                          progress=False)
        program = lower(gm, (x,))
        assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
        got = oputil.VulkanExecutor(program, device)(x.numpy())
        ref = run_reference(program, x.numpy())
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
        assert cosine(got, gm(x).detach().numpy()) >= 0.995


class FloatActivations(nn.Module):
    """Activations the linear-only schemes leave in float (Mamba's softplus, YOLO's leaky relu,
    Mish, ELU) and float maths on activations (log, erf, rounding)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 12), nn.Linear(12, 6)

    def forward(self, x):
        h = self.a(x)
        h = F.leaky_relu(h, 0.2) + F.elu(h, 0.7) + F.softplus(h, beta=2.0, threshold=4.0) + F.mish(h)
        h = h + torch.log(torch.abs(h) + 1.0) + torch.erf(h) + torch.floor(h) * torch.sign(h) + torch.round(h)
        return self.b(h)


def test_float_activations_run_on_vulkan(device):
    x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(6))
    gm = api.quantize(FloatActivations().eval(), (x,), calibration=batches((3, 5, 6)), scheme="dynamic",
                      progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    assert {"leaky_relu", "elu", "softplus", "mish", "log", "erf", "floor", "sign", "round"} <= set(ops(program))
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
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
    gm = api.quantize(model, (x,), calibration=batches((1, 4, 5, 7)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
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
    gm = api.quantize(PyramidPool().eval(), (x,), calibration=batches((1, 3, 13, 10)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    pools = [n.op for n in program.nodes if "adaptive" in n.op or n.op == "mean"]
    assert len(pools) == 4, pools
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
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
    gm = api.quantize(model, (x,), calibration=batches((2, 3, 5, 9, 10)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    assert any(n.op.startswith("linear") for n in program.nodes)
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
    assert got.shape == (2, 2 * 2 * 3, 5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.999
    assert cosine(got, model(x).detach().numpy()) >= 0.99


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
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
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
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-5)
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
    gm = api.quantize(model, (x,), calibration=batches((2, 5, 6)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-5 * np.abs(got).max())
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    from vkq.passes.normalize_ops import normalize_ops     # the rewrite alone, on floats: torch's values
    h = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(15))
    for f in (lambda t: t.std(-1, keepdim=True), lambda t: t.var((0, 2)), lambda t: torch.std(t, 1, unbiased=False),
              lambda t: t.std(), lambda t: torch.var(t, dim=1, correction=2, keepdim=True)):
        g = torch.export.export(_Lambda(f), (h,)).module()
        assert normalize_ops(g) and not any("var" in str(n.target) or "std" in str(n.target) for n in g.graph.nodes)
        torch.testing.assert_close(g(h), f(h), rtol=1e-5, atol=1e-6)


class _Lambda(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


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
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    ref = run_reference(program, x.numpy())
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
    gm = api.quantize(PickTokens().eval(), (x, ids), calibration=[(torch.randn(2, 7, 6, generator=g), ids)],
                      scheme=scheme, progress=False)
    program = lower(gm, (x, ids))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    assert sum(n.op == "embedding" for n in program.nodes) == 3
    got = oputil.VulkanExecutor(program, device)(x.numpy(), ids.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy(), ids.numpy()), rtol=1e-6, atol=1e-6)
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
    gm = api.quantize(HandWrittenSoftmax().eval(), (x,), calibration=batches((2, 5, 6)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    assert {"amax", "amin"} <= set(ops(program))
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-6)
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
    gm = api.quantize(model, (x,), calibration=batches((2, 4, 11)), scheme=scheme, progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-6)
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
    gm = api.quantize(model, (x,), calibration=batches((2, 5, 6)), scheme="dynamic", progress=False)
    program = lower(gm, (x,))
    assert program.fallback == [] and not any(n.op == "torch_op" for n in program.nodes), program.fallback
    got = oputil.VulkanExecutor(program, device)(x.numpy())
    np.testing.assert_allclose(got, run_reference(program, x.numpy()), rtol=1e-5, atol=1e-5)
    assert cosine(got, gm(x).detach().numpy()) >= 0.9999
    from vkq.passes.normalize_ops import normalize_ops    # the rewrite alone, on floats: torch's values
    t = torch.tensor([[1.0, 2.0, -float("inf")], [-float("inf")] * 3, [100.0, 100.0, 99.0]])
    for f in (lambda a: torch.logsumexp(a, 1), lambda a: torch.logsumexp(a, (0, 1), keepdim=True)):
        g = torch.export.export(_Lambda(f), (t,)).module()
        assert normalize_ops(g) and not any("logsumexp" in str(n.target) for n in g.graph.nodes)
        torch.testing.assert_close(g(t), f(t))
