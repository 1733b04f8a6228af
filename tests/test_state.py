"""Program state: buffers a model writes in place (a static KV cache written with index_copy_,
slice assignment or index_put_ at its positions, a step counter) are state tensors of the
Program, kept between calls on the device and in the reference, saved in the .vkq file."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

from vkq import api
from vkq.executor import VulkanExecutor, run_reference
from vkq.progfile import load_program, save_program
from vkq.runtime import CompiledProgram

N, HKV, D = 19, 3, 5       # cache rows, heads, head size: odd on purpose


class TinyCache(nn.Module):
    """A KV-cache write of each kind transformers and ExecuTorch export: index_copy_ (StaticCache),
    slice assignment at positions (index_put_), and a counter, read back after the write."""

    def __init__(self, write: str = "index_copy"):
        super().__init__()
        torch.manual_seed(3)
        self.proj = nn.Linear(7, HKV * D)
        self.write = write
        self.register_buffer("cache", torch.zeros(1, HKV, N, D))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))

    def forward(self, x, pos):
        y = self.proj(x).view(1, -1, HKV, D).transpose(1, 2)       # (1, HKV, T, D)
        if self.write == "index_copy":
            self.cache.index_copy_(2, pos, y)
        else:
            self.cache[:, :, pos] = y
        self.steps.add_(1)
        return self.cache[:, :, :11] * 1.0, self.steps * 1


def _compile(write="index_copy", dynamic=True):
    model = TinyCache(write).eval()
    x, pos = torch.randn(1, 3, 7), torch.arange(3)
    t = Dim("T", min=1, max=N)
    program, _ = api.compile(model, (x, pos), scheme="dynamic", progress=False,
                             dynamic_shapes=({1: t}, {0: t}) if dynamic else None)
    return model, program


def _calls(dynamic=True):
    g = torch.Generator().manual_seed(5)
    lengths = [3, 1, 4, 1] if dynamic else [3, 3]
    out, start = [], 0
    for t in lengths:
        out.append((torch.randn(1, t, 7, generator=g).numpy(), np.arange(start, start + t)))
        start += t
    return out


def _eager(model, calls):
    model.cache.zero_()
    model.steps.zero_()
    with torch.no_grad():
        return [tuple(o.numpy() for o in model(torch.from_numpy(x), torch.from_numpy(p))) for x, p in calls]


@pytest.fixture(scope="module")
def compiled():
    return _compile()


def test_written_buffers_become_state(compiled):
    _, program = compiled
    assert sorted(program.state) == ["state_cache", "state_steps"]
    assert program.inputs == ["x", "pos"] and len(program.outputs) == 2
    assert program.tensors["state_cache"].shape == (1, HKV, N, D)
    assert not program.state_init["state_cache"].any() and program.state_init["state_steps"].tolist() == [0]


@pytest.mark.parametrize("write, dynamic", [("index_copy", True), ("slice_assign", False)])
def test_reference_keeps_state_as_torch_does(write, dynamic):
    # (slice assignment's index_put_ is rewritten to an expand whose symbolic shape the dynamic
    # lowering cannot follow yet: static there)
    model, program = _compile(write, dynamic)
    calls = _calls(dynamic)
    want = _eager(model, calls)
    state = {}
    for (x, p), (cache, steps) in zip(calls, want):
        got = run_reference(program, x, p, state=state)
        np.testing.assert_allclose(got[0], cache, atol=0.03)     # (the linear's int8 rounding)
        assert got[1].tolist() == steps.tolist()
    # rows past the filled prefix stay as they were
    assert not state["state_cache"][:, :, 9:].any()


def test_device_keeps_state_in_place(compiled, device):
    _, program = compiled
    ex = VulkanExecutor(program, device)
    assert ex._in_place == {program.state["state_cache"]: "state_cache"}      # no copy of the cache a call
    names = {s.name for seg in ex.segments if seg[0] == "vulkan" for s in seg[1].steps}
    assert "index_copy_rows" in names
    state = {}
    for x, p in _calls():
        got, want = ex(x, p), run_reference(program, x, p, state=state)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(ex.read_state("state_cache"), state["state_cache"])
    ex.reset_state()
    assert not ex.read_state("state_cache").any() and ex.read_state("state_steps").tolist() == [0]
    ex.write_state("state_steps", np.array([41]))
    assert ex(*_calls()[0])[1].tolist() == [42]
    with pytest.raises(KeyError, match="not a state tensor"):
        ex.read_state("x")


def test_state_saved_and_loaded(compiled, tmp_path):
    _, program = compiled
    program.state_init["state_steps"] = np.array([7], np.int32)
    try:
        loaded = load_program(save_program(program, tmp_path / "s.vkq"))
    finally:
        program.state_init["state_steps"] = np.array([0], np.int32)
    assert loaded.state == program.state
    assert loaded.state_init["state_steps"].tolist() == [7]
    prog = CompiledProgram(loaded)
    x, p = _calls()[0]
    assert prog.run_reference(x, p)[1].tolist() == [8]
    assert prog.run_reference(x, p)[1].tolist() == [9]
    prog.reset()
    assert prog.run_reference(x, p)[1].tolist() == [8]
    assert prog.read_state("state_steps", reference=True).tolist() == [8]


def test_compiled_program_state_on_device(compiled, device):
    _, program = compiled
    prog = CompiledProgram(program, device)
    calls = _calls()
    for x, p in calls:
        a, b = prog(x, p), prog.run_reference(x, p)
        np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(prog.read_state("state_cache"), prog.read_state("state_cache", reference=True))
    prog.reset()
    np.testing.assert_array_equal(prog(*calls[0])[0], prog.run_reference(*calls[0])[0])


class Filled(nn.Module):
    """A state written by index_fill_ (scatter of one value along a dim: index_copy_rows' SCALAR)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.zeros(1, N, 3))

    def forward(self, x, pos):
        self.mask.index_fill_(1, pos, 2.5)
        return self.mask.sum(-1) + x


def test_index_fill_of_a_state_writes_its_rows_in_place(device):
    x = torch.zeros(1, N)
    program, _ = api.compile(Filled().eval(), (x, torch.tensor([3])), scheme="dynamic", progress=False)
    ex = VulkanExecutor(program, device)
    assert list(ex._in_place.values()) == ["state_mask"]
    state = {}
    for at in ([3], [0], [N - 1]):
        pos = np.array(at)
        np.testing.assert_array_equal(ex(x.numpy(), pos), run_reference(program, x.numpy(), pos, state=state))
    np.testing.assert_array_equal(ex.read_state("state_mask"), state["state_mask"])
    assert sorted(np.flatnonzero(state["state_mask"][0, :, 0])) == [0, 3, N - 1]
