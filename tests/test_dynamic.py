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
    tensors.update({k: TensorSpec(v.shape, str(v.dtype),     # int8 weights, float64 bias, int32 m and s
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


def test_a_program_holds_only_where_its_checks_do(device, tmp_path):
    """Program.checks: the conditions torch.export traced the model under (a branch on a size;
    the guards its own ep.module() checks). A shape within the bounds where one fails is refused
    naming the condition in the dims' names, by the executor, the reference and `vkq run` from
    the saved file; the others run as before."""
    from oputil import run_cli_without_torch
    from vkq.progfile import load_program, save_program
    rng = np.random.default_rng(4)
    prog = conv_net(rng)
    prog.checks = ["s1 != s2", "Mod(s0*s1, 3) != 0 or s0 == 1"]
    prog.validate()
    ex = VulkanExecutor(prog, device)
    message = r"give height \(s1\) = 9, width \(s2\) = 9, where the program does not hold: .* under height != width"
    for run in (ex, lambda x: run_reference(prog, x)):
        with pytest.raises(ValueError, match=message):
            run(np.zeros((2, 5, 9, 9), np.float32))
        with pytest.raises(ValueError, match=r"batch \(s0\) = 2, height \(s1\) = 6, where .* under Mod\(batch\*height"):
            run(np.zeros((2, 5, 6, 9), np.float32))
    x = rng.normal(0, 1, (1, 5, 6, 9)).astype(np.float32)             # batch 1: the second check's "or"
    np.testing.assert_array_equal(ex(x), run_reference(prog.specialize(prog.bind([x.shape])), x))
    path = save_program(prog, tmp_path / "checked.vkq")
    assert load_program(path).checks == prog.checks
    np.save(tmp_path / "x.npy", np.zeros((1, 5, 9, 9), np.float32))
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--device", device.info.name)
    assert res.returncode == 2 and "under height != width, that is s1 != s2" in res.stderr, res.stderr
    prog.checks = ["s1 != s7"]
    with pytest.raises(ValueError, match=r"undeclared symbol\(s\) s7"):
        prog.validate()


def test_symbolic_attrs_must_be_expressions_in_the_declared_symbols():
    """A node's {"expr": ...} attr (a reshape's size in a dynamic program) is checked like a
    dimension: an expression string over the program's symbols (a signed file's list there
    crashed the specialization with a TypeError)."""
    t = {"x": TensorSpec(("s0", 4)), "y": TensorSpec(("s0", 2, 2))}
    make = lambda expr: Program(t, [Node("reshape", ["x"], ["y"], {"shape": [{"expr": expr}, 2, 2]})], ["x"], ["y"],
                                symbols={"s0": [1, 8]})
    make("s0").validate()
    with pytest.raises(ValueError, match=r"undeclared symbol\(s\) s9"):
        make("s0 + s9").validate()
    with pytest.raises(ValueError, match="a symbolic attr must be an expression string, not \\[\\]"):
        make([]).validate()
