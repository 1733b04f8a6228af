"""tools/select_tests.py cover: the tests the GPU-assisted validation pass runs, from a dispatch
log of variants built and seconds taken (vkq/device.py, tests/conftest.py)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import select_tests  # noqa: E402


def _log(tmp_path, records):
    path = tmp_path / "dispatch.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _built(test, shader, n=1, **defines):
    return [{"test": test, "shader": shader, "defines": {k: "1" for k in defines}}] * n


def test_cover_takes_the_cheap_builder_of_each_variant_costliest_first(tmp_path):
    """A variant built by a slow model test and by a quick kernel case is checked through the
    quick one; a test whose variants the others build is left out; the benchmark's tests and
    shaders never count; the list comes costliest first."""
    records = (_built("t.py::model", "a", 40) + _built("t.py::model", "b", 40)
               + _built("t.py::kernel_a", "a") + _built("t.py::kernel_b", "b", 3)
               + _built("t.py::kernel_c", "c") + _built("t.py::kernel_c", "a")
               + _built("tests/test_bench.py::quick", "d") + _built("t.py::kernel_d", "bench_roofline")
               + [{"test": "t.py::model", "seconds": 30.0}, {"test": "t.py::kernel_a", "seconds": 0.05},
                  {"test": "t.py::kernel_b", "seconds": 0.2}, {"test": "t.py::kernel_c", "seconds": 0.4},
                  {"test": "tests/test_bench.py::quick", "seconds": 0.01}])
    tests, cost = select_tests.read_log(_log(tmp_path, records))
    assert "tests/test_bench.py::quick" not in tests and not tests.get("t.py::kernel_d")
    assert cost["t.py::model"] == select_tests.gpuav_seconds(30.0, 80)
    assert cost["t.py::kernel_b"] == select_tests.gpuav_seconds(0.2, 3)
    chosen = select_tests.cover(tests, cost)
    # kernel_a, the cheapest, is taken first and then left out: kernel_c builds c and a; kernel_c (0.4 s)
    # is reckoned costlier than kernel_b
    assert chosen == ["t.py::kernel_c", "t.py::kernel_b"]
    assert [cost[t] for t in chosen] == sorted((cost[t] for t in chosen), reverse=True)


def test_priority_takes_the_newest_shaders_first_and_rotates_the_rest():
    """The budgeted pass takes the test of the shader changed last first; what follows alternates
    with an order the commit picks, so two commits check different shares of the unchanged ones."""
    tests = {f"t.py::k{i}": {(f"s{i}", ())} for i in range(8)}
    changed = {"s0": 10, "s1": 30, "s2": 20}          # s3..s7 untouched in the history
    orders = [select_tests.priority(sorted(tests), tests, changed, seed) for seed in ("abc", "def", "123", "456")]
    for order in orders:
        assert sorted(order) == sorted(tests)          # every test once
        assert order[0] == "t.py::k1"                  # the newest shader's
        # the newest three come within the first six, each after at most one rotated pick
        assert order.index("t.py::k2") <= 3 and order.index("t.py::k0") <= 5
    assert len({tuple(o) for o in orders}) > 1


def test_checked_counts_the_variants_built_under_the_layer(tmp_path, capsys):
    full = _log(tmp_path, _built("t.py::a", "a") + _built("t.py::b", "b") + _built("t.py::c", "c", x=1))
    part = tmp_path / "gpuav.log"
    part.write_text("".join(json.dumps(r) + "\n" for r in _built("t.py::a", "a")))
    assert select_tests.main(["checked", str(full), str(part)]) == 0
    err = capsys.readouterr().err
    assert "built 1 of the 3 variants" in err and "2 variants of b, c" in err
