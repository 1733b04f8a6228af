"""Dynamic shapes: one program, every shape within its bounds. A symbolic program specialized
to a shape equals, bit for bit, the same program made static at that shape; buffers are sized
once for the bounds; shapes outside them are refused with a message naming the dimension."""
import numpy as np
import pytest

from oputil import assert_same, spec
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops.conv import conv2d_q8_params
from vkq.program import Node, Program, TensorSpec

BOUNDS = {"s0": (1, 4), "s1": (5, 23), "s2": (3, 19)}


def conv_net(rng) -> Program:
    """quantize -> conv 3x3 s2 p1 (+relu) -> conv 1x1 -> dequantize, batch s0, H s1, W s2."""
    c, oc = 5, 12
    oh, ow = "(((s1 - 1)//2)) + 1", "(((s2 - 1)//2)) + 1"
    w1 = rng.integers(-127, 128, (oc, c, 3, 3)).astype(np.int8)
    w2 = rng.integers(-127, 128, (7, oc, 1, 1)).astype(np.int8)
    b1, m1, s1, lo1, hi1 = conv2d_q8_params(0.05, rng.uniform(0.002, 0.01, oc), 0.04, rng.normal(0, 0.1, oc), "relu", -128)
    b2, m2, s2, lo2, hi2 = conv2d_q8_params(0.04, rng.uniform(0.002, 0.01, 7), 0.05, None, None, 3)
    consts = {"w1": w1, "b1": b1, "m1": m1, "s1_": s1, "w2": w2, "b2": b2, "m2": m2, "s2_": s2}
    tensors = {"x": TensorSpec(("s0", c, "s1", "s2")),
               "q": spec(("s0", c, "s1", "s2"), "int8", "4W4C", 0.05, 2),
               "h": spec(("s0", oc, oh, ow), "int8", "4W4C", 0.04, -128),
               "o": spec(("s0", 7, oh, ow), "int8", "4W4C", 0.05, 3),
               "y": TensorSpec(("s0", 7, oh, ow))}
    tensors.update({k: TensorSpec(v.shape, "int8" if v.dtype == np.int8 else "int32",
                                  "4W4C" if v.dtype == np.int8 else None) for k, v in consts.items()})
    conv = dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=1)
    nodes = [Node("quantize", ["x"], ["q"], {"scale": 0.05, "zero_point": 2}),
             Node("conv2d_q8", ["q", "w1", "b1", "m1", "s1_"], ["h"], {**conv, "x_zp": 2, "out_zp": -128, "qmin": lo1, "qmax": hi1}),
             Node("conv2d_q8", ["h", "w2", "b2", "m2", "s2_"], ["o"],
                  {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1, "x_zp": -128, "out_zp": 3,
                   "qmin": lo2, "qmax": hi2}),
             Node("dequantize", ["o"], ["y"], {"scale": 0.05, "zero_point": 3})]
    prog = Program(tensors, nodes, ["x"], ["y"], consts, symbols={k: list(v) for k, v in BOUNDS.items()},
                   meta={"symbol_names": {"s0": "batch", "s1": "height", "s2": "width"}})
    prog.validate()
    return prog


SHAPES = [(1, 5, 23, 19), (3, 5, 7, 11), (2, 5, 16, 3), (4, 5, 5, 8), (3, 5, 7, 11)]


def test_every_shape_equals_its_static_program(device):
    rng = np.random.default_rng(0)
    prog = conv_net(rng)
    ex = VulkanExecutor(prog, device)
    arena = ex.memory["arena_bytes"]
    pipelines = len(ex._pipelines)
    for shape in SHAPES:
        x = rng.normal(0, 1, shape).astype(np.float32)
        static = prog.specialize(prog.bind([shape]))
        assert not static.dynamic and static.tensors["h"].shape == (shape[0], 12, (shape[2] + 1) // 2, (shape[3] + 1) // 2)
        got = ex(x)
        want = VulkanExecutor(static, device)(x)
        assert_same((got,), (want,))
        np.testing.assert_array_equal(got, run_reference(static, x))
        np.testing.assert_array_equal(got, run_reference(prog, x))
    assert ex.memory["arena_bytes"] == arena                    # planned once, for the bounds
    assert len(ex._builds) == len(set(SHAPES)) + 1               # + the first build, at the bounds
    # a new shape builds dispatches and recordings; its pipelines are mostly the bound's
    assert len(ex._pipelines) <= 3 * pipelines


@pytest.mark.parametrize("shape,message", [
    ((5, 5, 9, 9), "dimension 0 (batch) must be in [1, 4], got 5"),
    ((1, 5, 24, 9), "dimension 2 (height) must be in [5, 23], got 24"),
    ((1, 5, 9, 2), "dimension 3 (width) must be in [3, 19], got 2"),
    ((1, 4, 9, 9), "dimension 1 must be 5, got 4"),
    ((1, 5, 9), "must have 4 dimensions"),
])
def test_out_of_bounds_shapes_are_refused(device, shape, message):
    prog = conv_net(np.random.default_rng(1))
    ex = VulkanExecutor(prog, device)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ex(np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="must"):
        run_reference(prog, np.zeros(shape, np.float32))


def test_lru_keeps_a_bounded_number_of_shapes(device):
    prog = conv_net(np.random.default_rng(2))
    ex = VulkanExecutor(prog, device, max_shapes=2)
    for h in (5, 6, 7, 8):
        ex(np.ones((1, 5, h, 9), np.float32))
    assert len(ex._builds) == 2
    y = ex(np.ones((1, 5, 5, 9), np.float32))        # evicted, built again, same answer
    np.testing.assert_array_equal(y, run_reference(prog, np.ones((1, 5, 5, 9), np.float32)))


def test_inputs_that_disagree_are_refused():
    t = {"a": TensorSpec(("s0", 4)), "b": TensorSpec(("s0", 4)), "y": TensorSpec(("s0", 4))}
    prog = Program(t, [Node("add", ["a", "b"], ["y"], {})], ["a", "b"], ["y"], symbols={"s0": [1, 8]},
                   meta={"symbol_names": {"s0": "batch"}})
    assert prog.bind([(3, 4), (3, 4)]) == {"s0": 3}
    with pytest.raises(ValueError, match=r"input 'b' dimension 0 is 2, but input 'a' dimension 0 is 3: both are batch"):
        prog.bind([(3, 4), (2, 4)])


def test_saved_dynamic_program_runs_any_shape_through_vkq_run(device, tmp_path):
    """The .vkq file keeps the symbols and their bounds; `vkq run` (no torch) takes any shape
    within them and refuses one outside, naming the dimension."""
    from oputil import run_cli_without_torch
    from vkq.progfile import load_program, save_program
    rng = np.random.default_rng(3)
    prog = conv_net(rng)
    path = save_program(prog, tmp_path / "dyn.vkq")
    loaded = load_program(path)
    assert loaded.symbols == {k: tuple(v) for k, v in BOUNDS.items()} and loaded.tensors["h"].shape == prog.tensors["h"].shape
    name = device.info.name
    for shape in SHAPES[:4]:
        x = rng.normal(0, 1, shape).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                    "--device", name)
        assert res.returncode == 0, res.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run_reference(prog, x))
    np.save(tmp_path / "x.npy", np.zeros((1, 5, 30, 9), np.float32))
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--device", name)
    assert res.returncode == 2 and "dimension 2 (height) must be in [5, 23], got 30" in res.stderr


# -- through lowering: vkq.compile(..., dynamic_shapes=...) ----------------------------------------

def _compile_both(model, example, calib, scheme, dynamic_shapes):
    """(dynamic CompiledProgram, a function making the static program for some inputs from the
    same converted graph, i.e. the same quantization)."""
    import vkq
    from vkq.lower import lower
    gm = vkq.quantize(model, example, calib, scheme, dynamic_shapes=dynamic_shapes)
    float_linear = scheme if scheme in ("dynamic", "weight_only") else "dynamic"
    dyn = vkq.CompiledProgram(lower(gm, example, float_linear=float_linear, dynamic_shapes=dynamic_shapes))
    static = lambda *xs: vkq.CompiledProgram(lower(gm, xs, float_linear=float_linear, static=True))
    return dyn, static


class SmallCNN:
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Block(n.Module):
            def __init__(self):
                super().__init__()
                self.a = n.Sequential(n.Conv2d(16, 16, 3, padding=1), n.BatchNorm2d(16), n.ReLU())
                self.b = n.Sequential(n.Conv2d(16, 16, 3, padding=1), n.BatchNorm2d(16))

            def forward(self, x):
                return torch.relu(x + self.b(self.a(x)))

        return n.Sequential(n.Conv2d(3, 16, 3, stride=2, padding=1), n.BatchNorm2d(16), n.ReLU(), Block(),
                            n.Conv2d(16, 24, 3, stride=2, padding=1), n.ReLU(), n.AdaptiveAvgPool2d(1),
                            n.Flatten(), n.Linear(24, 10)).eval()


CNN_SHAPES = [(1, 3, 32, 32), (3, 3, 17, 29), (2, 3, 64, 40), (5, 3, 13, 13), (1, 3, 61, 9)]


@pytest.fixture(scope="module")
def dynamic_cnn():
    import torch
    from torch.export import Dim
    model = SmallCNN.make()
    ds = ({0: Dim("batch", min=1, max=8), 2: Dim("height", min=9, max=64), 3: Dim("width", min=9, max=64)},)
    calib = [torch.randn(s) for s in [(4, 3, 32, 32), (2, 3, 48, 24), (1, 3, 64, 64), (3, 3, 16, 40)]]
    return _compile_both(model, (torch.randn(2, 3, 32, 32),), calib, "static", ds)


def test_cnn_compiled_once_runs_every_shape(device, dynamic_cnn, tmp_path):
    """A CNN compiled once with dynamic batch, height and width equals, bit for bit, the program
    compiled statically for each shape (same quantization), in one process, and from its saved
    .vkq through `vkq run` without torch."""
    import torch
    from oputil import run_cli_without_torch
    dyn, static = dynamic_cnn
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and set(prog.program.symbols.values()) == {(1, 8), (9, 64)}
    path = prog.save(tmp_path / "cnn.vkq")
    for i, shape in enumerate(CNN_SHAPES):
        x = torch.randn(shape).numpy()
        y = prog(x)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        np.testing.assert_array_equal(y, want)
        if i < 3:
            np.save(tmp_path / "x.npy", x)
            res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                        "--device", device.info.name)
            assert res.returncode == 0, res.stderr
            np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)
    with pytest.raises(ValueError, match=r"dimension 2 \(height\) must be in \[9, 64\], got 65"):
        prog(np.zeros((1, 3, 65, 20), np.float32))
    with pytest.raises(ValueError, match=r"dimension 0 \(batch\) must be in \[1, 8\], got 9"):
        prog(np.zeros((9, 3, 20, 20), np.float32))


def vkq_on(compiled, device):
    import vkq
    return vkq.CompiledProgram(compiled.program, device)


@pytest.fixture(scope="module")
def dynamic_bert():
    import torch
    from torch.export import Dim
    from transformers import BertConfig, BertModel
    from vkq.transformer import MeanPooledEncoder
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=48, max_position_embeddings=64)
    model = MeanPooledEncoder(BertModel(cfg).eval()).eval()
    B, L = Dim("batch", min=1, max=6), Dim("seq", min=2, max=40)
    ds = ({0: B, 1: L}, {0: B, 1: L})
    ids = torch.randint(0, 97, (2, 9))
    return _compile_both(model, (ids, torch.ones_like(ids)), None, "dynamic", ds)


BERT_SHAPES = [(1, 5), (3, 17), (2, 40), (6, 2), (4, 11)]


def test_bert_encoder_compiled_once_runs_every_shape(device, dynamic_bert, tmp_path):
    """A BERT-style encoder compiled once with dynamic batch and sequence length: every shape
    agrees with the program compiled statically for it to float rounding, padded positions
    included (a mask with zeros), and out-of-bounds shapes are refused."""
    import torch
    dyn, static = dynamic_bert
    prog = vkq_on(dyn, device)
    rng = np.random.default_rng(0)
    for b, l in BERT_SHAPES:
        ids = rng.integers(0, 97, (b, l)).astype(np.int64)
        mask = np.ones((b, l), np.int64)
        mask[0, l // 2 + 1:] = 0
        y = prog(ids, mask)
        want = vkq_on(static(torch.from_numpy(ids), torch.from_numpy(mask)), device)(ids, mask)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, prog.run_reference(ids, mask), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"dimension 1 \(seq\) must be in \[2, 40\], got 41"):
        prog(np.zeros((1, 41), np.int64), np.ones((1, 41), np.int64))
    with pytest.raises(ValueError, match="both are batch and must agree"):
        prog(np.zeros((2, 5), np.int64), np.ones((3, 5), np.int64))
