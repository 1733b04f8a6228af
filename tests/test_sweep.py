"""tools/sweep_models.py, the random-model sweep, kept runnable: a few models of each family
agree with their reference and with PT2E on the test device (the full sweep is a tool run by
hand: --count 100 or more)."""
import importlib.util
import sys
from pathlib import Path

import pytest

SWEEP = Path(__file__).resolve().parent.parent / "tools" / "sweep_models.py"


def _sweep():
    spec = importlib.util.spec_from_file_location("sweep_models", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family, count, seed, dynamic", [("cnn", 4, 1, False), ("temporal", 3, 2, False),
                                                         ("transformer", 4, 3, False), ("transformer", 3, 7, True)])
def test_a_short_sweep_agrees(device, family, count, seed, dynamic, capfd):
    """(--dynamic: one program per model for free batch and length, checked at three sizes.)"""
    failures = _sweep().main(["--device", str(device.info.index), "--family", family, "--count", str(count),
                              "--seed", str(seed)] + ["--dynamic"] * dynamic)
    out = capfd.readouterr().out
    sys.stdout.write(out)       # back, for conftest's check for validation messages
    assert failures == 0, out
    assert f"{count} models ({family}, seed {seed}{', dynamic' * dynamic})" in out and ": 0 failed" in out
    if dynamic:     # these three export with the dims free, and vkq compiles each of them
        assert "REFUSED" not in out, out


def test_the_sweep_reports_a_failing_model(device, capfd, monkeypatch):
    """A model that disagrees is one FAIL line naming what it drew, and counts in the status."""
    sweep = _sweep()

    def disagree(*args):
        raise AssertionError("Vulkan != reference: 3 of 10 differ")
    monkeypatch.setattr(sweep, "check", disagree)
    assert sweep.main(["--device", str(device.info.index), "--count", "2", "--seed", "1"]) == 2
    out = capfd.readouterr().out
    sys.stdout.write(out)
    lines = [l for l in out.splitlines() if l.startswith("FAIL")]
    assert len(lines) == 2 and lines[0].startswith("FAIL 0: ") and "3 of 10 differ" in lines[0]


def test_the_hf_probe_runs(device, capfd):
    """tools/probe_hf.py, kept runnable: three Hugging Face architectures from random configs agree
    with their reference and PT2E, with nothing on the CPU (GPT-2's Conv1D under the dynamic
    scheme, RoBERTa's position ids by cumsum and gather included), and with --dynamic BLOOM
    compiled once for every sequence length (its alibi repeat was refused). The full probe
    (about 140 architectures) is run by hand."""
    spec = importlib.util.spec_from_file_location("probe_hf", SWEEP.parent / "probe_hf.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    failures = probe.main(["--device", str(device.info.index), "--only", "bert,gpt2,roberta",
                         "--schemes", "static,dynamic"])
    out = capfd.readouterr().out
    sys.stdout.write(out)
    assert failures == 0 and "6 runs (3 architectures)" in out and ": 0 failed" in out, out
    assert out.count("ok   ") == 6 and "on the CPU" not in out, out
    failures = probe.main(["--device", str(device.info.index), "--only", "bloom,mamba", "--schemes", "static",
                           "--dynamic"])
    out = capfd.readouterr().out
    sys.stdout.write(out)
    assert failures == 0 and "ok   bloom static" in out and "refused mamba static" in out, out
