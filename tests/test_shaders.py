"""The shader toolchain: every variant compiles and validates, errors name the shader,
the cache follows the sources, and an installed (non-editable) vkq ships its shaders."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vkq import shaders

ROOT = Path(__file__).resolve().parent.parent


def test_every_variant_compiles_and_passes_spirv_val():
    built = shaders.compile_all(validate=True)
    names = {s for s, _ in built}
    assert {"quantize", "dequantize", "repack"} <= names
    assert len(built) >= len(shaders.list_shaders())


@pytest.fixture
def scratch_shaders(tmp_path, monkeypatch):
    """A private shader folder (with the real includes) and cache."""
    (tmp_path / "include").mkdir()
    for inc in (shaders.shader_dir() / "include").glob("*.glsl"):
        (tmp_path / "include" / inc.name).write_text(inc.read_text())
    monkeypatch.setattr(shaders, "shader_dir", lambda: tmp_path)
    monkeypatch.setenv("VKQ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


BROKEN = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
//! variant FLAVOUR=2
void main() { int x = FLAVOUR + undefined_name; }
"""


def test_compile_error_names_shader_and_variant(scratch_shaders):
    (scratch_shaders / "broken.comp").write_text(BROKEN)
    with pytest.raises(shaders.ShaderCompileError) as e:
        shaders.compile_shader("broken", {"FLAVOUR": 2})
    msg = str(e.value)
    assert "'broken'" in msg and "FLAVOUR=2" in msg and "undefined_name" in msg


def test_unknown_shader_lists_known(scratch_shaders):
    (scratch_shaders / "a.comp").write_text("#version 450\nvoid main() {}\n")
    with pytest.raises(FileNotFoundError, match="known: a"):
        shaders.compile_shader("nope")


def test_cache_key_follows_includes_and_defines(scratch_shaders):
    src = ('#version 450\n#extension GL_GOOGLE_include_directive : require\n#include "extra.glsl"\n'
           '#include "common.glsl"\nlayout(std430, binding = 0) buffer B { int b[]; };\n'
           'void main() { b[0] = VALUE + EXTRA; }\n')
    (scratch_shaders / "t.comp").write_text(src)
    (scratch_shaders / "include" / "extra.glsl").write_text("const int EXTRA = 1;\n")
    a = shaders.compile_shader("t", {"VALUE": 1})
    assert shaders.compile_shader("t", {"VALUE": 1}) == a          # cache hit
    assert shaders.compile_shader("t", {"VALUE": 2}) != a          # another variant
    (scratch_shaders / "include" / "extra.glsl").write_text("const int EXTRA = 7;\n")
    assert shaders.compile_shader("t", {"VALUE": 1}) != a          # an include changed
    assert len(list((scratch_shaders / "cache").glob("t-*.spv"))) == 3


def test_variants_are_declared_in_the_shader(scratch_shaders):
    (scratch_shaders / "v.comp").write_text("//! variant A=1 B\n//! variant A=2\n#version 450\nvoid main() {}\n")
    assert shaders.variants("v") == [{"A": "1", "B": "1"}, {"A": "2"}]


def test_wheel_ships_the_shaders(tmp_path):
    """A non-editable install finds its shaders inside the package (vkq/shaders/)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("vkq-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shader in shaders.list_shaders():
        assert f"vkq/shaders/{shader}.comp" in names
    assert "vkq/shaders/include/int8x4.glsl" in names
    # installed into a plain folder, vkq.shaders.shader_dir() points inside the package
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", "from vkq import shaders, registry; registry.get_op('conv2d_q8');"
                          "print(shaders.source_path('quantize'))"],
                         cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True).stdout.split()
    assert out and out[-1] == str(target / "vkq" / "shaders" / "quantize.comp"), out
