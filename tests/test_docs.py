"""The docs: docs/op-support.md is what tools/op_support.py writes from the registry and the aten
rules; the README stays a page a newcomer reads in minutes; every relative link in README.md,
docs/*.md and bench/*.md names a file that exists. No Vulkan device needed."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _op_support():
    spec = importlib.util.spec_from_file_location("op_support", ROOT / "tools" / "op_support.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_op_support_page_is_current():
    tool = _op_support()
    want = tool.render()
    assert tool.PAGE.read_text() == want, "docs/op-support.md is stale: run `python tools/op_support.py`"


def test_op_support_names_real_ops_and_their_kernels():
    """Rows the rules fix: the fold of aten.conv2d is conv2d_q8, a float linear has no kernel."""
    page = _op_support().render()
    assert "| `aten.conv2d` | default, padding | `conv2d_q8` | `conv2d` |" in page      # (a float conv: its shader)
    linear = next(line for line in page.splitlines() if line.startswith("| `aten.linear` |"))
    assert "`linear_q8`" in linear and linear.endswith("| `linear` (CPU) |")
    assert "| `aten.atan2` | default | – | `atan2` |" in page       # (not div's trunc_divide, another target's)
    assert "| `torch_op` | no (CPU) |" in page


def test_op_support_check_exits_1_on_a_stale_page(tmp_path, monkeypatch, capsys):
    tool = _op_support()
    stale = tmp_path / "op-support.md"
    stale.write_text("# Op support\n")
    monkeypatch.setattr(tool, "PAGE", stale)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert tool.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert tool.main([]) == 0 and tool.main(["--check"]) == 0


def test_readme_is_short():
    text = README.read_text()
    assert len(text.splitlines()) <= 250, f"README.md has {len(text.splitlines())} lines (at most 250)"
    assert len(text.encode()) <= 12 * 1024, f"README.md has {len(text.encode())} bytes (at most 12 KB)"


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    assert "bash tools/setup.sh && .venv/bin/vkq demo" in text
    assert "bash tools/test.sh" in text


def _pages():
    return [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)      # (code blocks hold no links)
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"
