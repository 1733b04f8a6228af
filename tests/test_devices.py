"""Device discovery and selection: both software drivers visible, one way to choose."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vkq.device import DeviceNotFound, devices, select

CI = os.environ.get("CI") == "true"


def _names():
    return " ".join(d.name.lower() + " " + d.driver.lower() for d in devices())


def test_both_software_drivers_are_listed():
    names = _names()
    if not ("llvmpipe" in names and "swiftshader" in names) and not CI:
        pytest.skip("lavapipe and SwiftShader are not both installed (tools/setup.sh installs them)")
    assert "llvmpipe" in names and "swiftshader" in names


def test_limits_and_features_are_read():
    for d in devices():
        assert d.max_workgroup_invocations >= 128 and d.max_shared_memory_bytes >= 16384
        assert d.max_storage_buffer_range >= 2 ** 27 and d.subgroup_size >= 1
        assert set(d.features) >= {"shaderInt8", "shaderInt16", "shaderInt64", "storageBuffer8BitAccess"}
        if "swiftshader" in d.name.lower():     # the strict target: none of the small types
            assert not d.features["shaderInt8"] and not d.features["shaderInt64"] and d.max_workgroup_invocations == 256
        if "llvmpipe" in d.name.lower():
            assert d.features["shaderInt8"] and d.max_workgroup_invocations == 1024


def test_select_by_index_name_alias_and_env(monkeypatch):
    infos = devices()
    assert select(0) is infos[0] and select("0") is infos[0]
    for d in infos:
        key = "swiftshader" if "swiftshader" in d.name.lower() else "llvmpipe" if "llvmpipe" in d.name.lower() else None
        if key:
            assert select(key) is d and select(key.upper()) is d
            monkeypatch.setenv("VKQ_DEVICE", key)
            assert select() is d
    if any("llvmpipe" in d.name for d in infos):
        assert "llvmpipe" in select("lavapipe").name


def test_default_prefers_gpu_then_lavapipe(monkeypatch):
    monkeypatch.delenv("VKQ_DEVICE", raising=False)
    d = select()
    rank = {"discrete-gpu": 0, "integrated-gpu": 1, "virtual-gpu": 2, "other": 3, "cpu": 4}
    assert rank[d.type] == min(rank[i.type] for i in devices())
    if d.type == "cpu" and any("llvmpipe" in i.name for i in devices()):
        assert "llvmpipe" in d.name


def test_unknown_device_lists_the_real_ones():
    with pytest.raises(DeviceNotFound) as e:
        select("nonsense")
    for d in devices():
        assert d.name in str(e.value)
    with pytest.raises(DeviceNotFound, match="index 99"):
        select(99)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "vkq.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_cli_devices_json():
    res = _cli("devices", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data["devices"]) == len(devices())
    assert {"name", "driver", "type", "subgroup_size", "max_workgroup_invocations", "features"} <= set(data["devices"][0])


def test_cli_bad_device_env_fails_with_listing():
    res = _cli("devices", env={"VKQ_DEVICE": "nonsense"})
    assert res.returncode != 0
    assert "nonsense" in res.stderr and devices()[0].name in res.stderr


def test_python_dash_m_vkq_and_enabled_features():
    """`python -m vkq` is the vkq command; devices shows what vkq enabled."""
    res = subprocess.run([sys.executable, "-m", "vkq", "devices", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for d in json.loads(res.stdout)["devices"]:
        assert set(d["enabled_features"]) <= {"shaderInt64", "shaderIntegerDotProduct", "subgroupSizeControl",
                                              "computeFullSubgroups"}
        assert all(d["features"][f] for f in d["enabled_features"])
        assert ("shaderInt64" in d["enabled_features"]) == d["features"]["shaderInt64"]   # a core feature
        if d["api_version"] >= "1.3":      # all three are required by Vulkan 1.3 (as features it may offer)
            assert {"subgroupSizeControl", "computeFullSubgroups"} <= set(d["enabled_features"])
    text = _cli("devices").stdout
    assert "enabled by vkq:" in text and "subgroup sizes" in text


def test_opened_device_enables_what_it_offers(device):
    from vkq.device import enabled_features, get_device
    assert device.features_enabled == set(enabled_features(device.info))
    if device.info.features.get("shaderIntegerDotProduct"):
        assert get_device(device.info.index, dot_product=True).dot_product
    assert not get_device(device.info.index, dot_product=False).dot_product


def test_texel_variants_store_64_bits_where_int64_is_enabled(device):
    """Where the device enabled shaderInt64 (lavapipe), a TEXEL variant is compiled with
    INT64_STORES (texel.glsl: an ivec4 written as two 64-bit stores) and its SPIR-V declares the
    Int64 capability; without the feature (SwiftShader) or without TEXEL, plain ivec4 stores. The
    bytes are the same: the loads_device tests compare both ways with the reference."""
    from vkq.device import get_device
    from vkq.shaders import reflect
    d = get_device(device.info.index, texel_loads=True)
    int64 = bool(device.info.features.get("shaderInt64"))
    assert ("shaderInt64" in d.features_enabled) == int64
    INT64 = 11
    texel = d.spirv("eltwise_binary", {"OP_ADD": "1", "TEXEL": "1"}, log=False)
    assert (INT64 in reflect(texel).capabilities) == int64
    assert INT64 not in reflect(d.spirv("eltwise_binary", {"OP_ADD": "1"}, log=False)).capabilities


@pytest.mark.vulkan
def test_lavapipe_subgroup_size_follows_vector_width():
    """tools/test.sh reruns the kernel tests at the LP_NATIVE_VECTOR_WIDTHs (128/256/512) the
    other passes did not use: check the subgroup size really changes (128/256/512 bits -> 4/8/16
    lanes of 32 bits). vkq.device sets the variable on import where the CPU has AVX-512."""
    lp = [d for d in devices() if "llvmpipe" in d.name.lower()]
    if not lp:
        pytest.skip("no lavapipe")
    width = int(os.environ.get("LP_NATIVE_VECTOR_WIDTH", "256"))
    assert f"{width} bits" in lp[0].name
    assert lp[0].subgroup_size == width // 32
    assert lp[0].shuffle_lanes == width // 32


def test_lavapipe_gets_the_cpus_vector_width(monkeypatch):
    """vkq.device gives lavapipe 512-bit vectors where the CPU has AVX-512 (F, BW, DQ, VL), leaves
    256 (llvmpipe's own default) elsewhere, and never overrides the user's choice."""
    import vkq.device as dev
    avx512 = frozenset(dev.AVX512_FLAGS) | {"avx2", "fma"}
    for flags, user, want in [(avx512, None, "512"), (avx512 - {"avx512bw"}, None, None),
                              (frozenset({"avx2", "fma"}), None, None), (avx512, "128", "128"),
                              (frozenset(), "256", "256")]:
        monkeypatch.setattr(dev, "_cpu_flags", lambda flags=flags: flags)
        if user is None:
            monkeypatch.delenv("LP_NATIVE_VECTOR_WIDTH", raising=False)
        else:
            monkeypatch.setenv("LP_NATIVE_VECTOR_WIDTH", user)
        dev._widen_lavapipe()
        assert os.environ.get("LP_NATIVE_VECTOR_WIDTH") == want, (sorted(flags), user)


def test_cpu_threads_and_rounds(monkeypatch):
    """A CPU driver's threads: LP_NUM_THREADS where set (an unusable value is ignored), else
    the CPUs this process may run on, at most llvmpipe's 32; the busiest thread runs
    ceil(workgroups / threads)."""
    import vkq.device as dev
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    cpus = min(32, len(os.sched_getaffinity(0)))
    assert dev.cpu_threads() == cpus
    monkeypatch.setenv("LP_NUM_THREADS", "junk")
    assert dev.cpu_threads() == cpus
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    assert dev.cpu_threads() == 3
    monkeypatch.setenv("LP_NUM_THREADS", "64")
    assert dev.cpu_threads() == dev.LP_MAX_THREADS == 32     # llvmpipe runs at most 32
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    assert [dev.cpu_rounds(n) for n in (1, 3, 4, 6, 7)] == [1, 1, 2, 2, 3]


def test_dispatches_of_a_variant_share_one_compiled_pipeline(device):
    """Every dispatch of a kernel variant (SPIR-V, constants, binding count, push size) on a
    device shares one pipeline, whoever builds it: other buffers, no pipelines dict. A
    placeholder-bound owner compiles it, so the pipeline keeps no caller's buffers; a variant
    with other constants gets its own; each dispatch still computes over its own buffers."""
    from vkq.device import grid_1d
    rng = np.random.default_rng(7)
    spirv = device.spirv("selftest_div", log=False)
    for n_size, local in ((37, 64), (1001, 64), (5, 32), (300, 32), (64, 64)):
        n = rng.integers(0, 1 << 30, n_size).astype(np.int32)
        dd = rng.integers(1, 1 << 16, n_size).astype(np.int32)
        bufs = [device.buffer(n), device.buffer(dd), device.buffer(size=n_size)]
        step = device.dispatch("selftest_div", bufs, grid_1d(n_size, local), local=(local,), push=(n_size,))
        device.run([step], upload=bufs[:2], download=bufs[2:])
        np.testing.assert_array_equal(bufs[2].read(), n // dd)
        owners = [k for k in device._owners if k[0] is spirv]
        assert len(owners) == 1 + (local == 32 or n_size == 64)     # 64 again: no third
        assert all(k[2] == 3 for k in owners)
    assert {int(np.frombuffer(k[1], np.int32)[0]) for k in owners} == {64, 32}
