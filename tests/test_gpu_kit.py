"""The GPU run kit's local half (tools/gpu/): the test lists are complete and honest, a quick
kit packs and runs through run.sh on a software driver with its program equal to the expected
bytes, and a wrong output is reported as a failure.

VKQ_GPU_KIT_FULL=1 also packs the full kit (downloads from PyPI and Debian, compiles
MobileNetV2 and ResNet-18) and runs it with `run.sh --local`: minutes, so not in CI.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tools" / "gpu"
spec = importlib.util.spec_from_file_location("gpu_kit", GPU / "kit.py")
kit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kit)


def _kit_device() -> str:
    """A software driver for the dry run: lavapipe where there is one (faster), else the first
    test device."""
    from vkq.device import devices
    names = " ".join(d.name.lower() for d in devices())
    if "llvmpipe" in names:
        return "llvmpipe"
    return os.environ.get("VKQ_TEST_DEVICES", "llvmpipe").split(",")[0].strip()


def test_every_test_file_is_classified_once():
    present = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    lists = [set(kit.NO_TORCH_TESTS), set(kit.TORCH_REFERENCE_TESTS), set(kit.HOST_ONLY_TESTS)]
    unclassified = present - set().union(*lists)
    assert not unclassified, f"say in tools/gpu/kit.py where these run: {sorted(unclassified)}"
    for i, a in enumerate(lists):
        for b in lists[i + 1:]:
            assert not a & b, f"in two lists: {sorted(a & b)}"
    carried = set(kit.NO_TORCH_TESTS) | set(kit.TORCH_REFERENCE_TESTS)
    assert carried <= present, f"listed for the kit but missing: {sorted(carried - present)}"


BLOCKED_IMPORT = r"""
import builtins, importlib, sys
blocked = sys.argv[1].split(",")
real_import = builtins.__import__
def guarded(name, *a, **k):
    if any(name == b or name.startswith(b + ".") for b in blocked):
        raise ImportError(f"{name} is blocked here")
    return real_import(name, *a, **k)
builtins.__import__ = guarded
sys.path.insert(0, sys.argv[2])
for f in sys.argv[3:]:
    importlib.import_module(f[:-3])
leaked = [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in blocked)]
assert not leaked, leaked
"""


@pytest.mark.parametrize("tier, blocked", [("no-torch", "torch,torchao"), ("torch-reference", "torchao")])
def test_carried_tests_import_without_what_the_gpu_machine_lacks(tier, blocked):
    """The no-torch files import with torch blocked; the torch-reference ones without torchao
    (the GPU machine has torch 2.11 but no torchao)."""
    res = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT, blocked, str(ROOT / "tests"), *kit.TIERS[tier]],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]


def test_no_torch_tests_use_no_torch_inside_either():
    """Imports inside a test body escape the import check above: no `import torch` anywhere in
    a no-torch file, nor oputil's torch references (a rehearsal without torch found both)."""
    uses_torch = re.compile(r"^\s*(import torch|from torch)\b|torch_(de)?quantize\(", re.M)
    for f in kit.NO_TORCH_TESTS:
        hit = uses_torch.search((ROOT / "tests" / f).read_text())
        assert hit is None, f"{f} uses torch ({hit.group(0).strip()!r}): list it in TORCH_REFERENCE_TESTS"


def test_scripts_parse():
    for script in ("pack.sh", "run.sh", "build_kp.sh"):
        res = subprocess.run(["bash", "-n", str(GPU / script)], capture_output=True, text=True)
        assert res.returncode == 0, f"{script}: {res.stderr}"


def _pack(out: Path, *args):
    env = {**os.environ, "VKQ_PYTHON": sys.executable}
    res = subprocess.run(["bash", str(GPU / "pack.sh"), "--out", str(out), *args], capture_output=True, text=True,
                         env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return res


def _run(kit_dir: Path, work: Path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}   # no layer of the suite's pass
    env.update(OUT=str(work / "out"), VKQ_KIT_WORK=str(work / "work"))
    return subprocess.run(["bash", str(kit_dir / "run.sh"), "--local", "--python", sys.executable,
                           "--device", _kit_device(), *args], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def quick_kit(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit")
    _pack(out, "--quick")
    return out


def test_quick_kit_packs_and_runs_on_a_software_driver(quick_kit, tmp_path):
    manifest = json.loads((quick_kit / "MANIFEST.json").read_text())
    files = manifest["files"]
    for f in ("run.sh", "build_kp.sh", "kit.py", "tests/conftest.py", "tests/oputil.py", "programs/programs.json",
              "programs/digits_cnn.vkq", "programs/digits_cnn.input.npy", "programs/digits_cnn.expected.npy"):
        assert f in files, f
    assert any(f.startswith("wheels/vkq-") for f in files)
    assert sum(f.startswith("spirv/") for f in files) >= 20
    for t in kit.NO_TORCH_TESTS + kit.TORCH_REFERENCE_TESTS:
        assert f"tests/{t}" in files, t

    res = _run(quick_kit, tmp_path, "--quick", "--tests", "none")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "RESULT: every program equal bit for bit" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["ok"] and report["programs"] and all(p["equal"] for p in report["programs"])
    assert {(b["name"], b["dot_product"]) for b in report["bench"]} >= {("digits_cnn", False)}
    assert all(b["equal"] and b["equal_after"] and b["wall"]["median_ms"] > 0 for b in report["bench"])
    assert json.loads((tmp_path / "out" / "devices.json").read_text())["devices"]
    # the kit's vkq is its wheel, not this checkout, and the carried cache served the program
    steps = {s["step"]: s for s in report["steps"]}
    assert "site-vkq" in steps["python packages"]["detail"]
    assert " 0 compiled here for the programs" in steps["spirv cache"]["detail"]
    assert (tmp_path / "out" / "report.txt").read_text().startswith("vkq GPU kit report")


def test_a_wrong_output_fails_the_check(quick_kit, tmp_path):
    """The comparison can fail: one flipped bit in the expected output is reported."""
    bad = tmp_path / "kit"
    shutil.copytree(quick_kit, bad)
    exp = bad / "programs" / "digits_cnn.expected.npy"
    y = np.load(exp)
    y.view(np.uint32 if y.dtype.itemsize == 4 else np.uint8).reshape(-1)[0] ^= 1
    np.save(exp, y)
    res = _run(bad, tmp_path, "--quick", "--tests", "none")
    assert res.returncode != 0
    assert "NOT EQUAL" in res.stdout and "SOMETHING FAILED" in res.stdout, res.stdout[-3000:]


@pytest.mark.skipif(os.environ.get("VKQ_GPU_KIT_FULL") != "1", reason="VKQ_GPU_KIT_FULL=1: packs the full kit "
                    "(network, minutes)")
def test_full_kit_runs_locally(tmp_path):
    out = ROOT / ".gpu-kit" if os.environ.get("VKQ_GPU_KIT_DIR") is None else Path(os.environ["VKQ_GPU_KIT_DIR"])
    _pack(out)
    res = _run(out, tmp_path, "--repeats", "5")
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-4000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    names = {p["name"]: p for p in report["programs"]}
    assert set(names) == {"digits_cnn", "mobilenet_v2", "resnet18"} and all(p["equal"] for p in names.values())
    assert names["mobilenet_v2"]["top1"] == [967]          # espresso: the ImageNet weights came along
    assert report["tests"]["no-torch"]["failures"] == 0 and report["tests"]["no-torch"]["passed"] > 50
