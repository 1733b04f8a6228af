"""Test configuration: every test that takes `device` runs on each test device.

VKQ_TEST_DEVICES  comma-separated device choices (default "llvmpipe,swiftshader")
CI=true           a device that cannot be found fails the test instead of skipping it
VKQ_TEST_DEADLINE time.time() after which a test is skipped, not started (tools/test.sh's
                  time-budgeted GPU-assisted validation pass; the tests come in priority order);
VKQ_TEST_RECKONED with it, a JSON file of test id -> reckoned seconds (select_tests.py cover):
                  a test that would end past the deadline is skipped too
VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
                  the Khronos layer prints what it finds; any validation message fails
                  the test that caused it (with VK_LAYER_ENABLES=..._SYNCHRONIZATION_VALIDATION_EXT
                  also every SYNC-HAZARD, with ..._GPU_ASSISTED_EXT every out-of-bounds access)
"""
import os
import sys
import time

import pytest

CI = os.environ.get("CI") == "true"
TEST_DEVICES = [d.strip() for d in os.environ.get("VKQ_TEST_DEVICES", "llvmpipe,swiftshader").split(",") if d.strip()]
VALIDATION = "validation" in os.environ.get("VK_INSTANCE_LAYERS", "").lower()


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", TEST_DEVICES, indirect=True)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marker
def pytest_collection_modifyitems(items):
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.vulkan)


_RECKONED = None


def _reckoned() -> dict:
    global _RECKONED
    if _RECKONED is None:
        import json
        path = os.environ.get("VKQ_TEST_RECKONED")
        _RECKONED = json.loads(open(path).read()) if path and os.path.exists(path) else {}
    return _RECKONED


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures (a module's model among them) are set up
def pytest_runtest_setup(item):
    """Every test starts from the same global random state, whatever ran before it in its process
    (pytest-xdist deals modules to processes by timing, so that order changes run to run): the
    random initial weights of a test's model are the test's own on every run and every machine.
    Past $VKQ_TEST_DEADLINE a test is skipped before its fixtures are set up."""
    deadline = os.environ.get("VKQ_TEST_DEADLINE")
    if deadline and time.time() + _reckoned().get(item.nodeid, 0.0) > float(deadline):
        pytest.skip("past this pass's time budget (VKQ_TEST_DEADLINE): a later run's share")
    import random
    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With $VKQ_DISPATCH_LOG set, each phase's seconds go into the dispatch log too (where the
    test runs: once, under pytest-xdist as well): tools/select_tests.py reckons a test's time under
    GPU-assisted validation from it and the test's dispatches (gpuav_seconds)."""
    yield
    path = os.environ.get("VKQ_DISPATCH_LOG")
    if path:
        import json
        with open(path, "a") as f:
            f.write(json.dumps({"test": item.nodeid, "seconds": round(call.duration, 3)}) + "\n")


@pytest.fixture
def device(request):
    from vkq.device import DeviceNotFound, get_device
    from vkq.vkinfo import VulkanUnavailable
    try:
        return get_device(request.param)
    except (DeviceNotFound, VulkanUnavailable) as e:
        if CI:
            pytest.fail(f"Vulkan device {request.param!r} not found under CI=true: {e}")
        pytest.skip(f"Vulkan device {request.param!r} not found: {e}")


@pytest.fixture(params=[False, True], ids=["ssbo", "texel"])
def loads_device(request, device):
    """The test device with its kernels reading their inputs from storage buffers or as texels
    (the TEXEL variants, shaders/include/texel.glsl), whatever the device would choose itself."""
    from vkq.device import get_device
    return get_device(device.info.index, texel_loads=request.param)


def is_validation_message(line: str) -> bool:
    return any(k in line for k in ("Validation Error", "VUID-", "UNASSIGNED-", "SYNC-HAZARD"))


@pytest.fixture(autouse=True)
def _fail_on_validation_messages(request):
    """With the validation layer on, read what a device test printed (at the fd level:
    the layer writes from C) and fail the test on any validation message."""
    if not (VALIDATION and "device" in request.fixturenames):
        yield
        return
    capfd = request.getfixturevalue("capfd")
    yield
    out, err = capfd.readouterr()
    sys.stdout.write(out)
    sys.stderr.write(err)
    found = [line for line in (out + err).splitlines() if is_validation_message(line)]
    if found:
        pytest.fail("Vulkan validation messages:\n" + "\n".join(found[:20]))
