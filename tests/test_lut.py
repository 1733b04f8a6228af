"""Int8 elementwise functions as 256-entry tables (lut_q8), and the other int8 patterns of the
model zoo: in-place aliases, standalone batch_norm, GPT-2's Conv1D (addmm with an (in, out)
weight), the squeeze-excitation multiply.

lut_q8 on the device equals its reference bit for bit (padding bytes 0, every layout (ROW too), odd
shapes); a lowered table equals PT2E's int8 output exactly (not within one step: the table is
PT2E's own dequantize -> f -> quantize evaluated on all 256 inputs)."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import oputil
from test_lower import assert_matches_pt2e, batches, cosine, ops, pt2e_values
from vkq import api, packing
from vkq.executor import VulkanExecutor, run_reference
from vkq.lower import lower
from vkq.ops.lut import device_table
from vkq.registry import cpu_reason, get_op

warnings.filterwarnings("ignore", category=UserWarning)
aten = torch.ops.aten


# ---------------------------------------------------------------- the op

def test_reference_indexes_by_value():
    table = np.arange(127, -129, -1).astype(np.int8)          # f(q) = -q - 1
    q = np.array([[-128, -1, 0, 5, 127]], np.int8)
    np.testing.assert_array_equal(get_op("lut_q8").reference(q, table), -q.astype(np.int16) - 1)
    with pytest.raises(ValueError, match="256"):
        get_op("lut_q8").reference(q, table[:255])


def test_device_table_is_indexed_by_unsigned_byte():
    table = np.arange(-128, 128).astype(np.int8)[::-1].copy()
    t = device_table(table)
    assert t.shape == (256, 4) and t.dtype == np.int32
    for q in (-128, -1, 0, 1, 127):      # row u = q & 0xFF: the output's byte at each byte position
        want = int(table[q + 128]) & 0xFF
        assert [int(v) & 0xFFFFFFFF for v in t[q & 0xFF]] == [want, want << 8, want << 16, want << 24]


@pytest.mark.parametrize("shape,layout", [((1, 5, 7, 9), "4W4C"), ((2, 13, 3, 6), "4W4C"),
                                          ((3, 7, 11), "4H4W"), ((37,), "4H4W"), ((2, 3, 5, 17), "4H4W"),
                                          ((1, 2, 3, 5, 7), "ROW"), ((2, 1, 3, 2, 2, 3), "ROW")])
def test_lut_q8_on_device(loads_device, shape, layout):
    """Both variants: the table in shared memory (storage buffers) and read as texels (TEXEL)."""
    device = loads_device
    rng = np.random.default_rng(sum(shape))
    q = oputil.random_int8(rng, shape)
    table = (rng.permutation(256) - 128).astype(np.int8)        # a bijection: every entry shows
    prog = oputil.single_op_program("lut_q8", [("x", oputil.spec(shape, "int8", layout))],
                                    [("y", oputil.spec(shape, "int8", layout))],
                                    constants={"t": (oputil.spec((256,), "int8", "4H4W"), table)})
    ex = VulkanExecutor(prog, device)
    got = ex(q)
    (step,) = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert ("TEXEL" in step.defines) == device.texel_loads, step.defines
    ref = run_reference(prog, q)
    oputil.assert_same((got,), (ref,))
    np.testing.assert_array_equal(ref, table[q.astype(np.int16) + 128])
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, layout))   # padding stays 0


# ---------------------------------------------------------------- lowering: every function a table

class Unary(nn.Module):
    """conv -> f -> conv: f reads a quantized tensor and feeds a quantized one."""

    def __init__(self, f):
        super().__init__()
        self.f, self.a, self.b = f, nn.Conv2d(3, 6, 3), nn.Conv2d(6, 5, 1)

    def forward(self, x):
        return self.b(self.f(self.a(x)))


FUNCTIONS = {
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "silu": F.silu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "elu": F.elu, "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "mish": F.mish, "softplus": F.softplus,
    "selu": F.selu, "exp": torch.exp, "abs": torch.abs, "scale": lambda x: x * 0.37, "shift": lambda x: x + 1.5,
    "cube": lambda x: torch.pow(x, 3.0), "rsub": lambda x: 1.0 - x, "div": lambda x: x / 3.0,
    "hardswish_inplace": lambda x: F.hardswish(x, inplace=True), "silu_inplace": lambda x: F.silu(x, inplace=True),
    "i0e": torch.special.i0e, "i1": torch.special.i1, "erfcx": torch.special.erfcx,
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_unary_function_is_a_table_equal_to_pt2e(name, monkeypatch):
    import vkq.passes.pipeline as pipeline
    from vkq.passes.fuse_epilogue import fuse_epilogue
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11)
    gm = api.quantize(Unary(FUNCTIONS[name]).eval(), (x,), calibration=batches((2, 3, 9, 11)), progress=False)
    program = lower(gm, (x,))
    assert program.fallback == []
    # the table runs in the producing conv's epilogue (fuse_epilogue)
    assert ops(program) == ["quantize", "conv2d_q8", "conv2d_q8", "dequantize"] and program.nodes[1].attrs["lut"]
    assert_matches_pt2e(program, gm, x)
    # unfused it is an op of its own: fed PT2E's input, the table gives PT2E's output exactly
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE if p is not fuse_epilogue])
    program = lower(gm, (x,))
    assert ops(program) == ["quantize", "conv2d_q8", "lut_q8", "conv2d_q8", "dequantize"]
    (lut,) = [n for n in program.nodes if n.op == "lut_q8"]
    env = run_reference(program, x.numpy(), keep_all=True)
    want = pt2e_values(gm, x)[program.meta["int8_sources"][lut.outputs[0]]].numpy()
    # fed PT2E's input, the table gives PT2E's output exactly
    src = pt2e_values(gm, x)[program.meta["int8_sources"][lut.inputs[0]]].numpy()
    np.testing.assert_array_equal(get_op("lut_q8").reference(src, program.constants[lut.inputs[1]]), want)
    assert len(np.unique(env[lut.outputs[0]])) > 8
    assert_matches_pt2e(program, gm, x)


def test_function_of_a_float_tensor_stays_float():
    """sigmoid of the model input: nothing quantized it, so it is not made int8."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return self.c(torch.sigmoid(x))
    x = torch.randn(1, 3, 5, 5)
    gm = api.quantize(M().eval(), (x,), progress=False)
    program = lower(gm, (x,))
    assert "lut_q8" not in ops(program) and "sigmoid" in ops(program)


# ---------------------------------------------------------------- in-place aliases

class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 6, 1)
        self.drop = nn.Dropout(0.2, inplace=True)

    def forward(self, x):
        y = F.hardswish(self.a(x), inplace=True)
        z = F.relu(self.b(y), inplace=True)
        z += y                                   # add_
        return self.c(F.silu(self.drop(z), inplace=True))


def test_inplace_aliases_become_functional():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 10, 10)
    gm = api.quantize(InPlace().eval(), (x,), calibration=batches((2, 3, 10, 10)), progress=False)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert not {t for t in targets if str(t).split(".")[-2].endswith("_")}, targets   # PT2E's graph too
    program = lower(gm, (x,))
    assert program.fallback == []
    # z += y and the silu after it fold into conv b's epilogue, hardswish into conv a's (fuse_epilogue)
    assert ops(program) == ["quantize", "conv2d_q8", "conv2d_q8", "conv2d_q8", "dequantize"]
    assert program.nodes[1].attrs["lut"] and program.nodes[2].attrs["lut"]
    assert program.nodes[2].attrs["residual"]["conv_input"] in ("a", "b")
    assert_matches_pt2e(program, gm, x)


def test_normalize_ops_functionalizes_any_inplace_op():
    from vkq.passes.functionalize import functional_target
    assert functional_target(aten.hardswish_.default) is aten.hardswish.default
    assert functional_target(aten.add_.Tensor) is aten.add.Tensor
    assert functional_target(aten.leaky_relu_.default) is aten.leaky_relu.default
    assert functional_target(aten.hardswish.default) is None
    assert functional_target(aten._to_copy.default) is None


# ---------------------------------------------------------------- batch_norm, GPT-2's Conv1D

class DenseBlock(nn.Module):
    """DenseNet's pattern: cat -> batch_norm -> relu -> conv (the BN cannot fold into a conv)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 7, 3, padding=1), nn.Conv2d(10, 5, 3, padding=1)
        self.bn = nn.BatchNorm2d(10)
        self.bn2 = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.b(F.relu(self.bn(torch.cat([x, self.a(x)], 1))))
        return self.bn2(torch.cat([y, x], 1))   # a BN with no relu after it, and negative gammas


def dense_block():
    torch.manual_seed(0)
    m = DenseBlock().eval()
    for bn in (m.bn, m.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.3, 2.0)
        bn.weight.data.uniform_(-1.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    m.bn.weight.data[3] = 0.0                       # a dead channel
    return m


@pytest.fixture(scope="module")
def dense():
    x = torch.randn(2, 3, 11, 13)
    gm = api.quantize(dense_block(), (x,), calibration=batches((2, 3, 11, 13)), progress=False)
    return gm, lower(gm, (x,)), x


def test_standalone_batch_norm_is_a_per_channel_int8_affine(dense):
    """The quantizer makes it a depthwise 1x1 conv (weight a = gamma / sqrt(var + eps), exact
    in per-channel int8 as +-127 at scale |a| / 127; bias beta - mean * a)."""
    gm, program, x = dense
    assert program.fallback == []
    assert ops(program) == ["quantize", "conv2d_q8", "cat_q8", "conv2d_q8", "conv2d_q8", "cat_q8", "conv2d_q8",
                            "dequantize"]
    assert not [n for n in gm.graph.nodes if n.target == aten.batch_norm.default]   # convs for PT2E too
    bn = program.nodes[3]
    assert bn.attrs["groups"] == 10 and program.constants[bn.inputs[1]].shape == (10, 1, 1, 1)
    assert assert_matches_pt2e(program, gm, x) >= 5


def test_standalone_batch_norm_on_device(dense, device):
    _, program, x = dense
    oputil.assert_program_on_device(program, device, x.numpy())


class Conv1D(nn.Module):
    """GPT-2's Conv1D: addmm(bias, x.view(-1, in), weight) with weight (in, out); and a
    matmul with a constant (in, out) weight on a 3-D x."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w1, self.b1 = nn.Parameter(torch.randn(12, 18, generator=g) * 0.3), nn.Parameter(torch.randn(18, generator=g))
        self.w2 = nn.Parameter(torch.randn(18, 7, generator=g) * 0.3)

    def forward(self, x):
        h = torch.addmm(self.b1, x.view(-1, x.size(-1)), self.w1).view(x.shape[0], x.shape[1], 18)
        return torch.matmul(F.gelu(h), self.w2)


def test_conv1d_addmm_and_matmul_with_constant_weight_are_linear_q8():
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(Conv1D().eval(), (x,), calibration=batches((2, 5, 12)), progress=False)
    dq_w = [n for n in gm.graph.nodes if n.target == torch.ops.quantized_decomposed.dequantize_per_channel.default]
    assert len(dq_w) == 2 and all(n.args[3] == 1 for n in dq_w)          # per output column
    program = lower(gm, (x,))
    assert program.fallback == []
    assert ops(program).count("linear_q8") == 2 and "lut_q8" not in ops(program)
    lin = [n for n in program.nodes if n.op == "linear_q8"]
    assert lin[0].attrs.get("lut") and not lin[1].attrs.get("lut")   # the GELU folded through the view
    assert [program.constants[n.inputs[1]].shape for n in lin] == [(18, 12), (7, 18)]
    assert assert_matches_pt2e(program, gm, x) >= 2     # x's quantize, the GELU (the addmm's output is fused)


@pytest.mark.parametrize("scheme,op", [("dynamic", "linear_dynamic"), ("weight_only", "linear_weight_only")])
def test_conv1d_addmm_and_matmul_under_linear_only_schemes(scheme, op):
    """The dynamic and weight-only schemes take GPT-2's Conv1D as a linear too (its weight
    quantized per output column), instead of leaving it float on the CPU."""
    from vkq.executor import run_reference
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))
    gm = api.quantize(Conv1D().eval(), (x,), scheme=scheme, progress=False)
    dq_w = [n for n in gm.graph.nodes if n.target == torch.ops.quantized_decomposed.dequantize_per_channel.default]
    assert len(dq_w) == 2 and all(n.args[3] == 1 for n in dq_w)
    program = lower(gm, (x,))
    assert program.fallback == []
    assert ops(program).count(op) == 2
    with torch.no_grad():
        want = gm(x).numpy()
    got = run_reference(program, x.numpy())
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert got.shape == want.shape and cosine(got, want) > 0.999


# ---------------------------------------------------------------- squeeze-excitation

@pytest.mark.parametrize("layout", ["4W4C", "4H4W"])
@pytest.mark.parametrize("shape,gate", [((2, 13, 5, 7), (2, 13, 1, 1)), ((3, 6, 9, 3), (1, 6, 1, 1))])
@pytest.mark.parametrize("qparams", [(0.05, -3, 1 / 255, -128, 0.04, 5),     # a sigmoid gate: no product ties
                                     (0.05, 3, 0.25, -128, 3.2, -2)])       # M = 1/256: products tie
def test_mul_q8_per_channel_gate_on_device(loads_device, shape, gate, layout, qparams):
    """eltwise_mul_channel: the gate's block read once per x block, the shape's divisions by
    specialization constants, requantize_clamped with its tie test only where a product can
    tie (requant_tie_free), as texels where the device takes texel loads."""
    from vkq.ops.eltwise import mul_q8_params
    from vkq.quant import requant_tie_free
    device = loads_device
    rng = np.random.default_rng(shape[1])
    x, s = oputil.random_int8(rng, shape), oputil.random_int8(rng, gate)
    attrs = mul_q8_params(*qparams)
    prog = oputil.single_op_program("mul_q8", [("x", oputil.spec(shape, "int8", layout)),
                                               ("s", oputil.spec(gate, "int8", layout))],
                                    [("y", oputil.spec(shape, "int8", layout))], attrs)
    ex = VulkanExecutor(prog, device)
    got, ref = ex(x, s), run_reference(prog, x, s)
    (st,) = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    ties = not requant_tie_free(attrs["multiplier"], attrs["shift"])
    assert ties == (qparams[4] == 3.2) and tuple(st.spec)[-1] == ties, st.spec
    assert ("TEXEL" in st.defines) == device.texel_loads, st.defines
    oputil.assert_same((got,), (ref,))
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, layout))
    want = get_op("mul_q8").reference(x, np.broadcast_to(s, shape), **attrs)   # the same-shape op
    np.testing.assert_array_equal(ref, want)
    assert len(np.unique(ref)) > 50


class SqueezeExcitation(nn.Module):
    """torchvision's: pool -> fc1 -> relu -> fc2 -> hardsigmoid, times the input."""

    def __init__(self, c=12, squeeze=4):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.out = nn.Conv2d(c, 5, 1)

    def forward(self, x):
        x = F.hardswish(self.conv(x))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return self.out(s * x)


@pytest.fixture(scope="module")
def se():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, 9)
    gm = api.quantize(SqueezeExcitation().eval(), (x,), calibration=batches((2, 3, 11, 9)), progress=False)
    return gm, lower(gm, (x,)), x


def test_squeeze_excitation_is_int8(se):
    gm, program, x = se
    assert program.fallback == []
    # hardswish and the gate's hardsigmoid run in their convs' epilogues (fuse_epilogue)
    assert ops(program) == ["quantize", "conv2d_q8", "adaptive_avg_pool2d_q8", "conv2d_q8", "conv2d_q8",
                            "mul_q8", "conv2d_q8", "dequantize"]
    assert program.nodes[1].attrs["lut"] and program.nodes[4].attrs["lut"]
    mul = program.nodes[5]
    assert [program.tensors[t].shape for t in mul.inputs] == [(2, 12, 11, 9), (2, 12, 1, 1)]
    assert assert_matches_pt2e(program, gm, x) >= 8


def test_squeeze_excitation_on_device(se, device):
    _, program, x = se
    oputil.assert_program_on_device(program, device, x.numpy())


class NormHeads(nn.Module):
    """BatchNorm1d standalone on (N, C) before a classifier (RepViT's and EfficientViT's heads)
    and on (N, C, L); convs with padding "same" (an odd and an even window: PyTorch pads the
    even one's extra row and column after) and "valid" (ConvMixer)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.same3 = nn.Conv2d(3, 6, 3, padding="same")
        self.same4 = nn.Conv2d(6, 6, (4, 2), padding="same", groups=6, dilation=(1, 2))
        self.valid = nn.Conv2d(6, 8, 3, padding="valid")
        self.bn_l, self.bn_c = nn.BatchNorm1d(8), nn.BatchNorm1d(8)
        for bn in (self.bn_l, self.bn_c):
            bn.running_mean.uniform_(-0.5, 0.5, generator=g)
            bn.running_var.uniform_(0.3, 2.0, generator=g)
            bn.weight.data.uniform_(-1.5, 1.5, generator=g)
            bn.bias.data.uniform_(-0.5, 0.5, generator=g)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = self.valid(F.relu(self.same4(F.relu(self.same3(x)))))        # (N, 8, H-2, W-2)
        y = self.bn_l(y.flatten(2))                                        # (N, 8, L)
        return self.fc(self.bn_c(y.mean(2)))                               # (N, 8) -> (N, 5)


def test_padding_strings_and_batch_norm_1d_lower_to_int8(device):
    """No node on the CPU: the string paddings become numbers (an even "same" window a
    constant_pad_nd first) and each BatchNorm1d a depthwise 1x1 conv between views; the program
    matches PT2E op by op and end to end, and the device equals the reference."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11)
    model = NormHeads().eval()
    gm = api.quantize(model, (x,), calibration=batches((2, 3, 9, 11)), progress=False)
    assert not [n for n in gm.graph.nodes if n.target in (aten.batch_norm.default, aten.conv2d.padding)]
    program = lower(gm, (x,))
    assert program.fallback == [] and all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    # 3 convs and the 2 BatchNorm1d as convs; the even window's padding a float constant_pad_nd
    assert ops(program).count("conv2d_q8") == 5 and ops(program).count("constant_pad_nd") == 1
    pads = [n.attrs for n in program.nodes if n.op == "conv2d_q8"]
    assert [p["padding"] for p in pads[:3]] == [[1, 1], [0, 0], [0, 0]], pads
    with torch.no_grad():
        want = model(x)
    assert cosine(run_reference(program, x.numpy()), want.numpy()) > 0.98
    assert assert_matches_pt2e(program, gm, x) >= 5
    oputil.assert_program_on_device(program, device, x.numpy())


class Spellings(nn.Module):
    """ResMLP's affine (addcmul with a per-channel alpha and beta), and LeViT's attention output:
    a float matmul result reshaped with reshape_as, then hardswish (in float: its input is)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.alpha = nn.Parameter(torch.rand(8, generator=g) + 0.5)
        self.beta = nn.Parameter(torch.randn(8, generator=g) * 0.1)
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):                                             # (N, L, 8)
        a = torch.addcmul(self.beta, self.alpha, x, value=0.5)
        q, k, v = self.qkv(a).chunk(3, -1)
        o = (q @ k.transpose(1, 2)).softmax(-1) @ v
        return self.proj(F.hardswish(o.reshape_as(a)))


def test_addcmul_reshape_as_and_float_hardswish_run_on_vulkan(device):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    model = Spellings().eval()
    gm = api.quantize(model, (x,), calibration=batches((2, 5, 8)), progress=False)
    assert not [n for n in gm.graph.nodes if n.target in (aten.addcmul.default, aten.reshape_as.default)]
    program = lower(gm, (x,))
    assert program.fallback == [] and all(cpu_reason(n, program.tensors) is None for n in program.nodes)
    # the affine: float mul, mul (value), add on Vulkan, after the input's quantize / dequantize
    # pair (one fake_quantize); the attention and its hardswish in float
    assert ops(program)[:4] == ["fake_quantize", "mul", "mul", "add"] and "hardswish" in ops(program)
    with torch.no_grad():
        want = model(x).numpy()
    ref = run_reference(program, x.numpy())
    assert cosine(ref, want) > 0.99
    assert assert_matches_pt2e(program, gm, x) >= 5
    assert cosine(VulkanExecutor(program, device)(x.numpy()), ref) >= 0.9995
