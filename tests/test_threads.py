"""Concurrent calls: one CompiledProgram (and two programs on one device) called from several
threads at once, with a different input per call, give exactly the single-threaded answers."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import vkq

THREADS, CALLS = 4, 25


def _cnn(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 12, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(12, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()


@pytest.fixture(scope="module")
def programs():
    x = torch.randn(1, 3, 15, 15)
    calib = [torch.randn(1, 3, 15, 15) for _ in range(4)]
    return [vkq.compile(_cnn(s), (x,), calib) for s in (0, 1)]


def _inputs(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 15, 15)).astype(np.float32) for _ in range(n)]


def test_concurrent_calls_of_one_program(device, programs):
    prog = vkq.CompiledProgram(programs[0].program, device)
    xs = _inputs(THREADS * CALLS, 1)
    want = [prog(x) for x in xs]                  # one thread, in order
    for x, y in list(zip(xs, want))[:3]:
        np.testing.assert_array_equal(y, prog.run_reference(x))
    assert len({y.tobytes() for y in want}) == len(want), "inputs must give different outputs"
    with ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(prog, xs))
    wrong = sum(not np.array_equal(g, w) for g, w in zip(got, want))
    assert wrong == 0, f"{wrong} of {len(xs)} concurrent calls gave a wrong answer"


def test_concurrent_programs_share_a_device(device, programs):
    progs = [vkq.CompiledProgram(p.program, device) for p in programs]
    xs = _inputs(2 * CALLS, 2)
    jobs = [(progs[i % 2], x) for i, x in enumerate(xs)]
    want = [p(x) for p, x in jobs]
    with ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(lambda job: job[0](job[1]), jobs))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_first_call_from_many_threads_builds_once(device, programs):
    prog = vkq.CompiledProgram(programs[1].program, device)
    xs = _inputs(THREADS, 3)
    with ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(prog, xs))
    for x, y in zip(xs, got):
        np.testing.assert_array_equal(y, prog.run_reference(x))
