"""The .vkq program file: round trip, and every kind of damage refused with a message."""
import json
import zipfile

import numpy as np
import pytest

from vkq.demo import roundtrip_program
from vkq.executor import plan_memory, run_reference
from vkq.program import Node, Program, TensorSpec
from vkq.progfile import ProgramFileError, load_program, save_program
from vkq.runtime import CompiledProgram

from oputil import run_cli_without_torch


def _program_with_constant():
    """quantize -> repack with a constant riding along (as weights do)."""
    p = roundtrip_program((2, 5, 3, 7), 0.05, 3, "4W4C", "4H4W")
    p.tensors["w"] = TensorSpec((3, 4), "int32")
    p.constants["w"] = np.arange(12, dtype=np.int32).reshape(3, 4)
    p.meta["model"] = "roundtrip"
    return p


def test_save_load_roundtrip(tmp_path):
    p = _program_with_constant()
    path = save_program(p, tmp_path / "m.vkq")
    q = load_program(path)
    assert [n.op for n in q.nodes] == [n.op for n in p.nodes] and q.meta == {"model": "roundtrip"}
    np.testing.assert_array_equal(q.constants["w"], p.constants["w"])
    x = np.random.default_rng(0).normal(0, 2, (2, 5, 3, 7)).astype(np.float32)
    np.testing.assert_array_equal(run_reference(q, x), run_reference(p, x))


def _rewrite(path, out, edit_manifest=None, drop=None, replace=None):
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(out, "w") as w:
        for item in z.namelist():
            if item == drop:
                continue
            data = z.read(item)
            if item == "manifest.json" and edit_manifest:
                m = json.loads(data)
                edit_manifest(m)
                data = json.dumps(m)
            if replace and item in replace:
                data = replace[item]
            w.writestr(item, data)
    return out


@pytest.fixture
def saved(tmp_path):
    return save_program(_program_with_constant(), tmp_path / "good.vkq")


def test_truncated_file_is_refused(saved, tmp_path):
    bad = tmp_path / "trunc.vkq"
    bad.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    with pytest.raises(ProgramFileError, match="not a zip archive, or truncated|damaged"):
        load_program(bad)


def test_not_a_program_is_refused(tmp_path):
    bad = tmp_path / "x.vkq"
    bad.write_text("hello")
    with pytest.raises(ProgramFileError, match="not a vkq program file"):
        load_program(bad)


def test_wrong_version_is_refused(saved, tmp_path):
    bad = _rewrite(saved, tmp_path / "v.vkq", edit_manifest=lambda m: m.update(version=99))
    with pytest.raises(ProgramFileError, match="version 99"):
        load_program(bad)


def test_missing_weight_is_refused(saved, tmp_path):
    bad = _rewrite(saved, tmp_path / "m.vkq", drop="constants/000000.npy")
    with pytest.raises(ProgramFileError, match="constant 'w' is missing"):
        load_program(bad)


def test_shape_mismatch_is_refused(saved, tmp_path):
    def edit(m):
        m["tensors"]["w"]["shape"] = [4, 3]
    bad = _rewrite(saved, tmp_path / "s.vkq", edit_manifest=edit)
    with pytest.raises(ProgramFileError, match="shape"):
        load_program(bad)


def test_corrupted_weight_is_refused(saved, tmp_path):
    import io
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 4), np.int32))
    bad = _rewrite(saved, tmp_path / "c.vkq", replace={"constants/000000.npy": buf.getvalue()})
    with pytest.raises(ProgramFileError, match="checksum"):
        load_program(bad)


def test_unknown_op_and_dangling_tensor_are_refused(saved, tmp_path):
    bad = _rewrite(saved, tmp_path / "o.vkq", edit_manifest=lambda m: m["nodes"][0].update(op="frobnicate"))
    with pytest.raises(ProgramFileError, match="unknown op 'frobnicate'"):
        load_program(bad)
    bad = _rewrite(saved, tmp_path / "d.vkq", edit_manifest=lambda m: m["nodes"][1].update(inputs=["nowhere"]))
    with pytest.raises(ProgramFileError, match="reads 'nowhere'"):
        load_program(bad)


def test_memory_plan_shares_disjoint_lifetimes():
    """A chain a->b->c->d->e: b and d can share, c has b's and d's neighbours alive."""
    t = {n: TensorSpec((4, 4), "int8", "4H4W") for n in "abcde"}
    t["c"] = TensorSpec((8, 8), "int8", "4H4W")
    nodes = [Node("repack", [x], [y]) for x, y in zip("abcd", "bcde")]
    p = Program(t, nodes, ["a"], ["e"])
    plan = plan_memory(p, exclude={"a", "e"})
    assert plan["b"][0] == plan["d"][0] != plan["c"][0]


def test_arena_report(device):
    shape = (1, 8, 4, 4)
    t = {"x": TensorSpec(shape), "y": TensorSpec(shape)}
    q = dict(scale=0.1, zero_point=0)
    names = ["q0", "q1", "q2", "q3"]
    for n in names:
        t[n] = TensorSpec(shape, "int8", "4W4C", **q)
    nodes = [Node("quantize", ["x"], ["q0"], q)] + [Node("repack", [a], [b]) for a, b in zip(names, names[1:])] \
        + [Node("dequantize", ["q3"], ["y"], q)]
    prog = CompiledProgram(Program(t, nodes, ["x"], ["y"]), device)
    x = np.random.default_rng(1).normal(0, 3, shape).astype(np.float32)
    np.testing.assert_array_equal(prog(x), prog.run_reference(x))
    assert prog.memory["arena_bytes"] < prog.memory["naive_bytes"]


def test_runner_works_without_torch(device, tmp_path):
    p = roundtrip_program((1, 3, 5, 7), 0.05, -3, "4W4C", "4H4W")
    path = save_program(p, tmp_path / "r.vkq")
    x = np.random.default_rng(2).normal(0, 2, (1, 3, 5, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                "--device", device.info.name)
    assert res.returncode == 0, res.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run_reference(p, x))


def test_zero_dim_constant_keeps_its_shape(tmp_path):
    p = _program_with_constant()
    p.tensors["s"] = TensorSpec((), "float32")
    p.constants["s"] = np.array(-3.5e38, np.float32)
    q = load_program(save_program(p, tmp_path / "z.vkq"))
    assert q.constants["s"].shape == () and q.constants["s"] == np.float32(-3.5e38)


def test_cli_run_refuses_wrong_inputs_with_a_message(tmp_path):
    path = save_program(roundtrip_program((1, 3, 5, 7), 0.05, 0, "4W4C", "4H4W"), tmp_path / "r.vkq")
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy")
    assert res.returncode == 2 and "must have shape (1, 3, 5, 7)" in res.stderr
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--input", tmp_path / "x.npy")
    assert res.returncode == 2 and "takes 1 input(s)" in res.stderr
