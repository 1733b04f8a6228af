"""The int4 schemes: api.compile(..., scheme="int4" / "8da4w", group_size, symmetric) and
`vkq compile --scheme int4 --group-size 32`.

Every linear (and a matmul by a constant weight: GPT-2's Conv1D) lowers to linear_int4 /
linear_8da4w with its weight quantized in groups; the program's output is close to the float
model's with its weights replaced by the dequantized int4 weights (the same weights: only the
activations differ, and under int4 not even those), and Vulkan equals the reference."""
import numpy as np
import pytest
import torch
from torch import nn

import oputil
from vkq import api, int4
from vkq.executor import VulkanExecutor, run_reference


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def linear_nodes(program, op):
    return [n for n in program.nodes if n.op == op]


def with_dequantized_weights(model, program, op):
    """model with each nn.Linear's weight replaced by its int4 weights' dequantized values, read
    back from the program's linear nodes (in graph order, which is the modules' order here)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    nodes = linear_nodes(program, op)
    assert len(nodes) == len(linears)
    for m, node in zip(linears, nodes):
        qw, scale, zero = (program.constants[i] for i in node.inputs[1:4])
        n, k = m.weight.shape
        gw = int4.GroupWeights(n, k, node.attrs["group_size"], qw, scale, zero)
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(int4.dequantize(gw)))
    return model


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(96, 37), nn.Linear(37, 19)     # 37: a partial group

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("scheme,op", [("int4", "linear_int4"), ("8da4w", "linear_8da4w")])
@pytest.mark.parametrize("symmetric", [True, False])
def test_mlp(device, scheme, op, symmetric):
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(3, 96)
    program, fallback = api.compile(model, (x,), scheme=scheme, group_size=32, symmetric=symmetric, progress=False)
    assert fallback == [] and len(linear_nodes(program, op)) == 2
    assert not {"linear_dynamic", "linear_weight_only"} & {n.op for n in program.nodes}
    zero = program.constants[linear_nodes(program, op)[0].inputs[3]]
    assert np.all(zero == 8) == symmetric
    ref = run_reference(program, x.numpy())
    with torch.no_grad():
        want = with_dequantized_weights(model, program, op)(x).numpy()
    np.testing.assert_allclose(ref, want, rtol=1e-4, atol=1e-4 if scheme == "int4" else 0.05)
    if scheme == "8da4w":
        assert np.abs(ref - want).max() > 1e-5, "8da4w quantized x"
    oputil.assert_program_on_device(program, device, x.numpy())


def test_group_size_reaches_the_nodes():
    model = MLP().eval()
    program, _ = api.compile(model, (torch.randn(2, 96),), scheme="int4", group_size=64, progress=False)
    node = linear_nodes(program, "linear_int4")[0]
    assert node.attrs["group_size"] == 64 and program.constants[node.inputs[1]].shape == (37, 2 * 64 // 8)
    with pytest.raises(int4.GroupFormatError, match="group size 48"):
        api.compile(model, (torch.randn(2, 96),), scheme="8da4w", group_size=48, progress=False)


@pytest.mark.parametrize("scheme,op", [("int4", "linear_int4"), ("8da4w", "linear_8da4w")])
def test_tiny_llama(device, scheme, op):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   attn_implementation="eager", tie_word_embeddings=False)
    llama = transformers.LlamaForCausalLM(cfg).eval()

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = llama

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, 97, (1, 9))
    program, _ = api.compile(Logits().eval(), (ids,), scheme=scheme, group_size=32, progress=False)
    # 2 layers x (q, k, v, o, gate, up, down) + lm_head
    assert len(linear_nodes(program, op)) == 15
    ref = run_reference(program, ids.numpy())
    with torch.no_grad():
        want = with_dequantized_weights(Logits().eval(), program, op)(ids).numpy()
    assert cosine(ref, want) >= (0.99999 if scheme == "int4" else 0.999)
    got = VulkanExecutor(program, device)(ids.numpy())
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_gpt2_conv1d_matmul_by_a_constant():
    """GPT-2's Conv1D (addmm by a constant (in, out) matrix) lowers to the int4 op too."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=61, n_embd=32, n_layer=1, n_head=2, n_positions=16,
                                  attn_implementation="eager")
    gpt = transformers.GPT2Model(cfg).eval()

    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = gpt

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, 61, (1, 7))
    program, _ = api.compile(Hidden().eval(), (ids,), scheme="int4", progress=False)
    assert len(linear_nodes(program, "linear_int4")) == 4      # c_attn, c_proj, c_fc, mlp c_proj
    with torch.no_grad():
        want = Hidden()(ids).numpy()
    assert cosine(run_reference(program, ids.numpy()), want) >= 0.99


def test_cli_compile_int4(tmp_path):
    src = tmp_path / "mlp_model.py"
    src.write_text("import torch\nfrom torch import nn\n"
                   "def build():\n    torch.manual_seed(0)\n"
                   "    m = nn.Sequential(nn.Linear(64, 40), nn.ReLU(), nn.Linear(40, 8)).eval()\n"
                   "    return m, (torch.randn(1, 64),)\n")
    out = tmp_path / "m.vkq"
    from vkq.cli import main
    assert main(["compile", f"{src}:build", "-o", str(out), "--scheme", "int4", "--group-size", "32",
                 "--no-progress"]) == 0
    from vkq.progfile import load_program
    prog = load_program(out)
    assert [n.op for n in prog.nodes].count("linear_int4") == 2


@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("config,op", [("IntxWeightOnlyConfig", "linear_int4"),
                                       ("Int8DynamicActivationIntxWeightConfig", "linear_8da4w")])
def test_torchao_quantized_model_keeps_its_integers(device, config, op, group_size):
    """A model quantized by torchao's quantize_ (int4, PerGroup) lowers to the int4 ops with
    torchao's own values, scales and zero points, and agrees with torchao's eager output."""
    tq = pytest.importorskip("torchao.quantization")
    from torchao.quantization.granularity import PerGroup
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 37)).eval()
    if config == "IntxWeightOnlyConfig":
        cfg = tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size))
    else:
        cfg = tq.Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))
    tq.quantize_(model, cfg)
    x = torch.randn(3, 256)
    program, fallback = api.compile(model, (x,), progress=False)
    assert fallback == [] and [n.op for n in program.nodes] == [op, "relu", op]
    for lin, node in zip((model[0], model[2]), linear_nodes(program, op)):
        w = lin.weight
        assert node.attrs["group_size"] == group_size
        u = int4.unpack(program.constants[node.inputs[1]])[:, :w.qdata.shape[1]]
        np.testing.assert_array_equal(u, w.qdata.numpy().astype(np.int32) + 8)
        np.testing.assert_array_equal(program.constants[node.inputs[2]], w.scale.numpy())
        np.testing.assert_array_equal(program.constants[node.inputs[3]], w.zero_point.numpy().astype(np.int32) + 8)
    with torch.no_grad():
        want = model(x).numpy()
    ref = run_reference(program, x.numpy())
    assert cosine(ref, want) >= 0.999
    got = VulkanExecutor(program, device)(x.numpy())
    oputil.assert_same((got,), (ref,))


@pytest.mark.parametrize("scheme,op", [("int4", "linear_int4"), ("8da4w", "linear_8da4w")])
def test_q8_0_linear_keeps_its_blocks(device, scheme, op):
    """A linear whose weight is a GGUF Q8_0 tensor (known_groups, as gguf_llama gives them)
    lowers to the int4 ops with 8-bit groups (attr bits 8): the file's int8 values and scales,
    not re-rounded into int4; the other linear (no known groups) is int4; Vulkan = reference."""
    import gguf
    import hashlib
    torch.manual_seed(3)
    model = MLP().eval()
    w = model.fc1.weight.detach().numpy()
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    gw = int4.from_gguf(gguf.GGMLQuantizationType.Q8_0, raw, w.shape)
    wd = int4.dequantize(gw)
    with torch.no_grad():
        model.fc1.weight.copy_(torch.from_numpy(wd))
    known = {hashlib.sha1(np.ascontiguousarray(wd).tobytes()).hexdigest(): gw}
    x = torch.randn(5, 96)
    program, fallback = api.compile(model, (x,), scheme=scheme, group_size=32, known_groups=known, progress=False)
    fc1, fc2 = linear_nodes(program, op)
    assert fallback == [] and fc1.attrs == {"group_size": 32, "bits": 8} and fc2.attrs == {"group_size": 32}
    qw, scale = (program.constants[i] for i in fc1.inputs[1:3])
    np.testing.assert_array_equal(qw.view(np.int8).reshape(gw.qweight.shape), gw.qweight)
    np.testing.assert_array_equal(scale, gw.scale)
    oputil.assert_program_on_device(program, device, x.numpy())
