"""Ordering on the device: which buffers a shader reads and writes (from its SPIR-V), where a
recording puts barriers, and the test guard that fails any synchronization hazard."""
import os
import subprocess
import sys

import numpy as np
import pytest

from vkq import shaders
from vkq.ops.eltwise import clamp_dispatch
from vkq.program import TensorSpec

VALIDATION_LAYER = "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"


def test_reflection_reads_the_qualifiers():
    add = shaders.reflect(shaders.compile_shader("eltwise_binary", ["OP_ADD"]))
    assert add.reads == {0, 1} and add.writes == {2} and not add.subgroups
    cat = shaders.reflect(shaders.compile_shader("cat_channels"))
    assert 1 in cat.reads and 1 in cat.writes      # read-modify-write of shared output words
    conv = shaders.reflect(shaders.compile_shader("conv2d_general"))
    assert conv.subgroups and conv.writes == {3}
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
