"""vkq.verify: the device against the reference node by node, streaming (`vkq verify`,
CompiledProgram.verify, `vkq compare`). A planted fault (one op's reference changed in one
element) is named exactly: node, op, how much; the run holds a few tensors, whatever the
program's length; the device's values are those of a normal run."""
import contextlib
import dataclasses
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vkq
from vkq.cli import main
from vkq.executor import VulkanExecutor, run_reference
from vkq.program import Node, Program, TensorSpec
from vkq.registry import OPS, get_op
from vkq.verify import differences, stream, verify

from oputil import run_cli_without_torch

vkq._quiet_third_party_logs()


def _plant(monkeypatch, op: str, fault):
    """Make op's reference return fault(its output): the device's kernel is then 'wrong'."""
    real = get_op(op)

    def reference(*args, **attrs):
        return fault(np.array(real.reference(*args, **attrs)))
    monkeypatch.setitem(OPS, op, dataclasses.replace(real, reference=reference))


def _bump_int8(k):
    """One int8 step at flat index k (down where it is 127)."""
    def fault(a):
        a.flat[k] += 1 if a.flat[k] < 127 else -1
        return a
    return fault


def _bump_float(ulps, k=1):
    """ulps units in the last place away from zero at flat index k."""
    def fault(a):
        a.view(np.int32).flat[k] += ulps
        return a
    return fault


# -- the comparison itself (no device) --------------------------------------------------------

def test_differences_count_bits_steps_and_ulps():
    a = np.array([[1, -128, 7], [0, 5, 127]], np.int8)
    b = a.copy()
    b[0, 1], b[1, 2] = 127, 120
    assert differences(a, a, "int8") == (0, 0.0, None)
    assert differences(a, b, "int8") == (2, 255.0, None)        # (in int64: no int8 wrap)
    one = np.float32(1.0)
    x = np.array([one, np.nextafter(one, np.float32(2)), -0.0, 3.5, np.nan], np.float32)
    y = np.array([one, one, 0.0, np.float32(3.5) + np.float32(2 ** -22) * 3, np.nan], np.float32)
    n, worst, ulps = differences(x, y, "float32")
    assert n == 3 and ulps == 3 and worst == 3 * 2.0 ** -22    # -0 vs 0: bits differ, 0 ulps
    assert differences(x[2:3], y[2:3], "float32") == (1, 0.0, 0)
    assert differences(np.float32([np.nan, 2]), np.float32([1, 2]), "float32") == (1, np.inf, None)
    assert differences(np.float32([-1.0]), np.float32([np.nextafter(np.float32(-1.0), np.float32(0))]),
                       "float32")[2] == 1
    assert differences(np.float32([-2 ** -149]), np.float32([2 ** -149]), "float32")[2] == 2  # across zero
    assert differences(np.int32([5, -7]), np.int32([5, 9]), "int32") == (1, 16.0, None)


# -- programs ---------------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.conv1, self.conv2 = nn.Conv2d(3, 12, 3, padding=1), nn.Conv2d(12, 20, 3, stride=2)
            self.fc = nn.Linear(20, 7)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Encoder(nn.Module):
    """Float layer norms, softmax and GELU between int8 linears (the dynamic scheme)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.layer = nn.TransformerEncoderLayer(24, 3, 40, dropout=0.0, batch_first=True, activation="gelu")

    def forward(self, x):
        return self.layer(x)


def _randn(shape, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


@pytest.fixture(scope="module")
def cnn():
    xs = _randn((1, 3, 19, 17), 4, 3)
    prog = vkq.compile(SmallCNN().eval(), (xs[0],), [(x,) for x in xs[1:]], progress=False)
    p = prog.program      # integer from the input's quantize on (the last linear writes float)
    assert not p.fallback and all(p.tensors[t].dtype == "int8" for n in p.nodes[1:] for t in n.inputs
                                  if t not in p.constants), [(n.op, n.inputs) for n in p.nodes]
    return prog.program, xs[0].numpy()


@pytest.fixture(scope="module")
def encoder():
    xs = _randn((2, 7, 24), 4, 5)
    prog = vkq.compile(Encoder().eval(), (xs[0],), [(x,) for x in xs[1:]], "dynamic", progress=False)
    return prog.program, xs[0].numpy()


def _chain(n):
    """x -> quantize -> n int8 repacks back and forth -> dequantize -> n float adds of x: a
    program of 2n+2 nodes, each reading the one before (and x)."""
    q = dict(scale=0.05, zero_point=3)
    t = {"x": TensorSpec((3, 5, 7, 11)), "q0": TensorSpec((3, 5, 7, 11), "int8", "4W4C", **q)}
    nodes = [Node("quantize", ["x"], ["q0"], q)]
    for i in range(1, n + 1):
        t[f"q{i}"] = TensorSpec((3, 5, 7, 11), "int8", "4H4W" if i % 2 else "4W4C", **q)
        nodes.append(Node("repack", [f"q{i - 1}"], [f"q{i}"]))
    t["f0"] = TensorSpec((3, 5, 7, 11))
    nodes.append(Node("dequantize", [f"q{n}"], ["f0"], q))
    for i in range(1, n + 1):
        t[f"f{i}"] = TensorSpec((3, 5, 7, 11))
        nodes.append(Node("add", [f"f{i - 1}", "x"], [f"f{i}"]))
    p = Program(t, nodes, ["x"], [f"f{n}"])
    p.validate()
    return p


# -- on the devices ---------------------------------------------------------------------------

def test_an_integer_program_is_identical(cnn, device):
    """An all-integer program (its float only the quantize in and the dequantize out) has the
    reference's bits at every node; the device's outputs are a normal run's."""
    program, x = cnn
    result = vkq.CompiledProgram(program, device).verify(x)
    assert result.identical and result.first is None and not result.differing_nodes, result.summary()
    assert result.nodes_checked == len(program.nodes) and result.device == device.info.name
    assert [n.name for n in result.nodes] == [n.name for n in program.nodes]
    assert all(n.where == "vulkan" for n in result.nodes)
    conv = [n for n in result.nodes if n.op == "conv2d_q8"]
    assert len(conv) == 2 and all(n.shaders for n in conv), [n.shaders for n in conv]
    (out,) = program.outputs
    assert result.outputs[out].tobytes() == run_reference(program, x).tobytes() \
        == VulkanExecutor(program, device)(x).tobytes()
    assert result.summary() == f"identical: {len(program.nodes)} nodes on {device.info.name} have the reference's bits"


def test_a_planted_int8_fault_is_named_exactly(cnn, device, monkeypatch):
    """The second conv's reference one step off in one element: verify names that node, its
    op, its shader, one element, one int8 step; every other node is judged on the device's
    own values, so it alone differs."""
    program, x = cnn
    target = [n for n in program.nodes if n.op == "conv2d_q8"][1]
    real = get_op("conv2d_q8").reference
    calls = []

    def reference(*args, **attrs):
        out = np.array(real(*args, **attrs))
        calls.append(1)
        if len(calls) == 2:      # the second conv node only
            out.flat[37] += 1 if out.flat[37] < 127 else -1
        return out
    monkeypatch.setitem(OPS, "conv2d_q8", dataclasses.replace(get_op("conv2d_q8"), reference=reference))
    result = verify(program, x, device=device)
    assert not result.identical and result.first.name == target.name and result.first.op == "conv2d_q8"
    assert [n.name for n in result.differing_nodes] == [target.name]
    (o,) = result.first.outputs
    assert (o.tensor, o.dtype, o.differing, o.max_abs, o.max_ulps) == (target.outputs[0], "int8", 1, 1.0, None)
    assert result.first.shaders and all(s.startswith("conv") for s in result.first.shaders), result.first.shaders
    text = result.summary()
    first = result.first
    assert f"node {first.index} {target.name!r} (conv2d_q8) on vulkan, shaders: {first.shaders[0]}" in text
    assert device.info.name in text and "1 of " in text and "max |difference| 1 int8 steps" in text, text


def test_a_float_program_is_identical_or_names_its_first_differing_node(encoder, device):
    """Floats may differ between a device and the reference (issue 59); what is certain: the
    verdict, the first node and the list agree, only Vulkan nodes computing floats differ, and
    the device's outputs are a normal run's bits."""
    program, x = encoder
    result = verify(program, x, device=device)
    differing = result.differing_nodes
    assert result.identical == (not differing) == (result.first is None)
    if differing:
        assert result.first is differing[0] and result.summary().startswith(f"differs at node {differing[0].index} ")
    for n in result.nodes:
        for o in n.outputs:
            size = int(np.prod(o.shape))
            assert 0 <= o.differing <= size and (o.differing == 0) == (o.max_abs == 0), o
            if o.differing and o.dtype == "float32":
                assert o.max_ulps >= 1, o
        assert n.identical or (n.where == "vulkan" and n.shaders), n
    (out,) = program.outputs
    assert result.outputs[out].tobytes() == VulkanExecutor(program, device)(x).tobytes()


def test_a_planted_float_fault_is_named_in_ulps_and_absolute(device, monkeypatch):
    """A float add is one correctly rounded operation on every device; with its reference 5
    ulps off in one element, verify names the first add with 5 ulps and their absolute size."""
    p = _chain(3)
    x = np.random.default_rng(7).normal(0, 1, (3, 5, 7, 11)).astype(np.float32)
    _plant(monkeypatch, "add", _bump_float(5, 10))
    result = verify(p, x, device=device)
    adds = [c for c in result.nodes if c.op == "add"]
    assert result.first is adds[0] and result.first.name == p.nodes[5].name and result.differing_nodes == adds
    (o,) = result.first.outputs
    moved = run_reference(p, x, keep_all=True)["f1"].reshape(-1)[10:11]      # (the planted fault's value)
    right = (moved.view(np.int32) - 5).view(np.float32)
    assert (o.differing, o.max_ulps) == (1, 5)
    assert o.max_abs == abs(float(moved[0]) - float(right[0])) > 0, o
    assert "(5 ulps)" in result.summary() and "1 of 1155 elements differ" in result.summary(), result.summary()


def test_the_stream_holds_a_few_tensors_whatever_the_length(device, monkeypatch):
    """The most host tensors held at once is the same for a 12-node and a 62-node chain (the
    input, a node's input and its output, the reference's output); the device's memory plan is
    a normal run's (the same arena, its slots host-visible); with a fault in every add (the
    reference's own run comes apart from the device's: compare's chain) a few more, again
    whatever the length."""
    peaks, runs = [], {}
    for n in (5, 30):
        p = _chain(n)
        x = np.random.default_rng(n).normal(0, 1, (3, 5, 7, 11)).astype(np.float32)
        ex = VulkanExecutor(p, device, node_by_node=True)
        assert ex.memory == VulkanExecutor(p, device).memory and ex.memory["shared_tensors"] > 0
        assert all(b.host_visible for b in ex.arena_slots.values())
        result = stream(ex, x, chain=True)
        assert result.identical and result.nodes_checked == 2 * n + 2
        np.testing.assert_array_equal(result.outputs[p.outputs[0]], run_reference(p, x))
        assert all(o.run_abs == 0 for c in result.nodes for o in c.outputs)
        peaks.append(result.peak_tensors)
        runs[n] = ex, x
    assert peaks[0] == peaks[1] == 4, peaks
    _plant(monkeypatch, "add", lambda a: a + np.float32(1))
    for n, (ex, x) in runs.items():
        result = stream(ex, x, chain=True)
        adds = [c for c in result.nodes if c.op == "add"]
        assert result.differing_nodes == adds and len(adds) == n and result.first is adds[0]
        assert all(c.outputs[0].max_abs == pytest.approx(1, rel=1e-5) for c in adds)   # (on its own inputs)
        assert [c.outputs[0].run_abs == pytest.approx(k + 1, rel=1e-4) for k, c in enumerate(adds)] == [True] * n
        peaks.append(result.peak_tensors)
    assert peaks[2] == peaks[3] == 7, peaks       # + the reference run's input and output of the node


def test_a_node_without_a_kernel_runs_on_the_host_between_device_nodes(device, monkeypatch):
    """add (Vulkan) -> linear (no kernel: the CPU) -> add (Vulkan, reading what the CPU made,
    uploaded): the CPU node is the reference itself; a fault in add is named at each add."""
    rng = np.random.default_rng(11)
    t = {"x": TensorSpec((5, 7)), "a": TensorSpec((5, 7)), "w": TensorSpec((3, 7)), "b": TensorSpec((3,)),
         "h": TensorSpec((5, 3)), "y": TensorSpec((5, 3))}
    consts = {"w": rng.normal(0, 1, (3, 7)).astype(np.float32), "b": rng.normal(0, 1, 3).astype(np.float32)}
    nodes = [Node("add", ["x", "x"], ["a"]), Node("linear", ["a", "w", "b"], ["h"]), Node("add", ["h", "h"], ["y"])]
    p = Program(t, nodes, ["x"], ["y"], consts)
    p.validate()
    x = rng.normal(0, 1, (5, 7)).astype(np.float32)
    result = verify(p, x, device=device)
    assert [n.where for n in result.nodes] == ["vulkan", "cpu", "vulkan"] and result.identical, result.table()
    assert result.nodes[1].shaders == () and result.outputs["y"].tobytes() == run_reference(p, x).tobytes()
    _plant(monkeypatch, "add", _bump_float(4))
    result = verify(p, x, device=device)
    assert [n.index for n in result.differing_nodes] == [0, 2] and result.first.index == 0
    assert [n.outputs[0].max_ulps for n in result.differing_nodes] == [4, 4]


# -- the command line -------------------------------------------------------------------------

def _main(*args):
    """(exit code, stdout, stderr) of `vkq ARGS` in this process (a planted fault holds here)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def test_vkq_verify_says_identical_or_names_the_node(cnn, device, tmp_path, monkeypatch):
    program, x = cnn
    vkq.CompiledProgram(program).save(tmp_path / "cnn.vkq")
    np.save(tmp_path / "x.npy", x)
    res = run_cli_without_torch("verify", tmp_path / "cnn.vkq", "--input", tmp_path / "x.npy",
                                "--device", device.info.name)
    assert res.returncode == 0 and res.stdout.startswith("identical: "), res.stdout + res.stderr[-2000:]
    _plant(monkeypatch, "max_pool2d_q8", _bump_int8(3))
    target = next(n for n in program.nodes if n.op == "max_pool2d_q8")
    code, out, _ = _main("verify", tmp_path / "cnn.vkq", "--input", tmp_path / "x.npy",
                         "--device", device.info.name, "--all")
    assert code == 1 and f"differs at node {program.nodes.index(target)} {target.name!r} ({target.op})" in out, out
    assert out.count("\n") == len(program.nodes) + 1 + 2     # header, a row a node, the summary's two lines
    code, out, _ = _main("compare", tmp_path / "cnn.vkq", "--input", tmp_path / "x.npy",
                         "--device", device.info.name)
    row = next(line for line in out.splitlines() if line.startswith(target.name[:40]))
    assert code == 1 and row.split()[-6:] == ["1", "int8", "steps"] * 2 and "MISMATCH: up to 1 int8 steps" in out, out


def test_vkq_verify_reports_a_missing_or_damaged_file_in_one_line(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3), np.float32))
    (tmp_path / "bad.vkq").write_bytes(b"PK\x03\x04 not a program")
    for path, says in [(tmp_path / "none.vkq", "none.vkq"), (tmp_path / "bad.vkq", "bad.vkq")]:
        res = run_cli_without_torch("verify", path, "--input", tmp_path / "x.npy")
        assert res.returncode == 2 and res.stderr.startswith("vkq: ") and res.stderr.count("\n") == 1, res.stderr
        assert says in res.stderr and "Traceback" not in res.stderr, res.stderr
