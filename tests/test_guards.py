"""What keeps vkq correct on a real GPU, where a CPU driver forgives: which buffers a shader
reads and writes (from its SPIR-V) and where a recording puts barriers; and the test guards —
with the Khronos layer on, a validation message, a synchronization hazard or an out-of-bounds
buffer access fails the test that caused it (tests/conftest.py). Each guard is proved on a
planted fault."""
import os
import subprocess
import sys

import numpy as np
import pytest

from vkq import shaders
from vkq.device import devices
from vkq.ops.eltwise import clamp_dispatch
from vkq.program import TensorSpec

VALIDATION_LAYER = "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"

BAD_DISPATCH_TEST = '''
import numpy as np
def test_bad_push_constants(device):
    n = 4
    bufs = [device.buffer(np.ones(n, np.int32)) for _ in range(3)] + [device.buffer(size=n)]
    # selftest_requantize declares 16 bytes of push constants; give 8: invalid usage
    d = device.dispatch("selftest_requantize", bufs, (1, 1, 1), local=(64,), push=(n, 0))
    device.run([d], upload=bufs[:3], download=bufs[3:])
'''


@pytest.mark.skipif(not os.path.exists(VALIDATION_LAYER), reason="vulkan-validationlayers not installed")
def test_validation_message_fails_the_test(tmp_path):
    """The suite's guard works: with the Khronos layer on, a test that misuses Vulkan fails."""
    (tmp_path / "test_bad.py").write_text(BAD_DISPATCH_TEST)
    (tmp_path / "conftest.py").write_text(open(os.path.join(os.path.dirname(__file__), "conftest.py")).read())
    env = {**os.environ, "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation", "VKQ_TEST_DEVICES": "swiftshader"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 1, res.stdout[-2000:]
    assert "Vulkan validation messages" in res.stdout and "VUID-" in res.stdout


def test_reflection_reads_the_qualifiers():
    add = shaders.reflect(shaders.compile_shader("eltwise_binary", ["OP_ADD"]))
    assert add.reads == {0, 1} and add.writes == {2} and not add.subgroups
    cat = shaders.reflect(shaders.compile_shader("cat_channels"))
    assert 1 in cat.reads and 1 in cat.writes      # read-modify-write of shared output words
    conv = shaders.reflect(shaders.compile_shader("conv2d_general"))
    assert conv.subgroups and conv.writes == {3} and conv.texels == set()
    # TEXEL: x, weights and per-channel table become texel buffers (read-only, never written)
    texel = shaders.reflect(shaders.compile_shader("conv2d_pointwise", ["TEXEL", "RESIDUAL"]))
    assert texel.texels == {0, 1, 2, 4} and texel.reads == {0, 1, 2, 4} and texel.writes == {3}
    with pytest.raises(ValueError, match="SPIR-V"):
        shaders.reflect(b"not spirv at all")


COPY = dict(in_zp=0, multiplier=1 << 30, shift=30, out_zp=0)   # clamp_q8 to [-128, 127]: a copy


def _clamp(device, src, dst, n):
    return clamp_dispatch(device, src, dst, TensorSpec((1, 4, 1, n), "int8", "4W4C"), COPY)   # n words, all used


@pytest.mark.parametrize("chain", [False, True])
def test_barriers_only_where_a_dispatch_depends(device, chain):
    n = 64
    x, y = (device.buffer(np.arange(n, dtype=np.int32) * 0x01010101 + k) for k in (0, 1))
    a, b = device.buffer(size=n), device.buffer(size=n)
    steps = [_clamp(device, x, a, n), _clamp(device, a if chain else y, b, n)]
    rec = device.record(steps, upload=[x, y], download=[a, b])
    rec.run()
    np.testing.assert_array_equal(a.read(), x.read())
    np.testing.assert_array_equal(b.read(), x.read() if chain else y.read())
    # start of the sequence, after the upload, [between the two dispatches,] before the download
    assert rec.barriers == (4 if chain else 3)


HAZARD_TEST = '''
import numpy as np
import pytest
from vkq.ops.eltwise import clamp_dispatch
from vkq.program import TensorSpec

@pytest.mark.parametrize("barriers", [True, False])
def test_dependent_dispatches(device, barriers):
    # clamp_q8 three times: x -> mid, mid -> out (reads what the first wrote: read after write),
    # x -> mid again (overwrites what the second read: write after read)
    n = 64
    x, mid, out = (device.buffer(np.full(n, 0x01020304, np.int32)), device.buffer(size=n, host_visible=False),
                   device.buffer(size=n))
    spec = TensorSpec((1, 4, 1, n), "int8", "4W4C")   # n words, every byte used
    copy = dict(in_zp=0, multiplier=1 << 30, shift=30, out_zp=0)
    steps = [clamp_dispatch(device, a, b, spec, copy) for a, b in ((x, mid), (mid, out), (x, mid))]
    rec = device.record(steps, upload=[x], download=[out], barriers=barriers)
    rec.run()
    assert (out.read() == 0x01020304).all()
'''


@pytest.mark.skipif(not os.path.exists(VALIDATION_LAYER), reason="vulkan-validationlayers not installed")
@pytest.mark.parametrize("driver", ["swiftshader", "llvmpipe"])
def test_sync_hazard_fails_the_test(tmp_path, driver):
    """The synchronization guard works: two dependent dispatches recorded without the barrier
    fail their test with a SYNC-HAZARD; recorded with vkq's barriers, they pass."""
    (tmp_path / "test_hazard.py").write_text(HAZARD_TEST)
    (tmp_path / "conftest.py").write_text(open(os.path.join(os.path.dirname(__file__), "conftest.py")).read())
    env = {**os.environ, "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation", "VKQ_TEST_DEVICES": driver,
           "VK_LAYER_ENABLES": "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    out = res.stdout
    assert res.returncode == 1, out[-3000:]
    assert "2 passed, 1 warning, 1 error" in out or "2 passed, 1 error" in out, out[-3000:]
    assert f"ERROR test_hazard.py::test_dependent_dispatches[{driver}-False]" in out   # the guard, at teardown
    assert f"ERROR test_hazard.py::test_dependent_dispatches[{driver}-True]" not in out
    assert "SYNC-HAZARD-READ-AFTER-WRITE" in out and "SYNC-HAZARD-WRITE-AFTER-READ" in out


OOB_SHADER = """#version 450
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer In { int x[]; };
layout(std430, binding = 1) writeonly buffer Out { int y[]; };
layout(push_constant) uniform P { int n; int offset; } p;
void main() {
    int i = int(gl_GlobalInvocationID.x);
    if (i < p.n) y[i] = x[i + p.offset];   // offset > 0 reads past the end of x
}
"""

OOB_TEST = '''
import numpy as np
import pytest
from pathlib import Path
from vkq import shaders
from vkq.device import devices

@pytest.mark.parametrize("offset", [0, 8])
def test_planted_read(device, offset, monkeypatch):
    real = shaders.source_path
    monkeypatch.setattr(shaders, "source_path",
                        lambda name: Path(__file__).with_name("planted_oob.comp") if name == "planted_oob" else real(name))
    n = 64
    x, y = device.buffer(np.arange(n, dtype=np.int32)), device.buffer(size=n)
    d = device.dispatch("planted_oob", [x, y], (1, 1, 1), local=(64,), push=(n, offset))
    device.run([d], upload=[x], download=[y])
    if offset == 0:
        assert (y.read() == np.arange(n)).all()
'''


@pytest.mark.skipif(not os.path.exists(VALIDATION_LAYER), reason="vulkan-validationlayers not installed")
def test_out_of_bounds_access_fails_the_test(tmp_path):
    """The out-of-bounds guard works: under GPU-assisted validation on lavapipe, a shader that
    reads past the end of its buffer fails its test; the same shader in bounds passes."""
    if not any("llvmpipe" in d.name.lower() for d in devices()):
        pytest.skip("GPU-assisted validation is checked on lavapipe")
    (tmp_path / "planted_oob.comp").write_text(OOB_SHADER)
    (tmp_path / "test_oob.py").write_text(OOB_TEST)
    (tmp_path / "conftest.py").write_text(open(os.path.join(os.path.dirname(__file__), "conftest.py")).read())
    env = {**os.environ, "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation", "VKQ_TEST_DEVICES": "llvmpipe",
           "VK_LAYER_ENABLES": "VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT"}
    env.pop("VKQ_DISPATCH_LOG", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    out = res.stdout
    assert res.returncode == 1, out[-3000:]
    assert "ERROR test_oob.py::test_planted_read[llvmpipe-8]" in out, out[-3000:]
    assert "ERROR test_oob.py::test_planted_read[llvmpipe-0]" not in out, out[-3000:]
    assert "VUID-vkCmdDispatch-None-02706" in out and "access out of bounds" in out, out[-3000:]
