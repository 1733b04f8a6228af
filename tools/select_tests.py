"""Pick tests from a dispatch log, for the test passes that cannot afford the whole suite.

    python tools/select_tests.py cover DISPATCH_LOG > tests.txt        (then: pytest @tests.txt)
    python tools/select_tests.py subgroups DISPATCH_LOG [PATH ...] > tests.txt

DISPATCH_LOG is what a test pass wrote with VKQ_DISPATCH_LOG set (vkq/device.py: one JSON line
per dispatch built, with its shader variant and the test that built it; and one per test phase
with its seconds: tests/conftest.py).

cover: the cheapest tests (weighted greedy set cover, by their reckoned time) that between
them build every variant that pass built, for the GPU-assisted validation pass, costliest first.
It instruments every shader and slows it ~10x, so running the whole kernel suite under it would
not fit CI; running each variant once catches every out-of-bounds access a variant makes on the
shapes its tests use. Exits 1, naming them, if a variant that a shader declares (its `//! variant`
lines) was built by no test at all: an untested variant is one GPU-assisted validation never sees.

subgroups: every test (in the files or folders PATH, if given) that builds a variant using
subgroup operations, for the pass at the other subgroup sizes: only those kernels' lanes depend
on the size (a third of the kernel tests; the rest would run the same code again).
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from vkq import shaders  # noqa: E402

# Shaders only the benchmark dispatches, and the benchmark's tests: they time runs (the roofline's
# long loops) rather than check kernels, and are the slowest under GPU-assisted validation by far
# (tests/test_bench.py::test_quick_run alone ran past 90 minutes under it). A variant that only
# they build is reported as built by no test.
UNCHECKED = ("bench_",)
UNCHECKED_TESTS = ("tests/test_bench.py",)


def _variant(shader: str, defines: dict) -> tuple:
    return shader, tuple(sorted(shaders._normalize(defines).items()))


def read_log(path) -> tuple[dict, dict]:
    """(test node id -> set of variants it built, bench_ shaders and UNCHECKED_TESTS left out;
    test node id -> the seconds it is reckoned to take under GPU-assisted validation)."""
    tests, seconds, dispatches = defaultdict(set), defaultdict(float), defaultdict(int)
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            test = rec["test"]
            if not test or test.startswith(UNCHECKED_TESTS):
                continue
            if "seconds" in rec:
                seconds[test] += rec["seconds"]
                continue
            dispatches[test] += 1
            if not rec["shader"].startswith(UNCHECKED):
                tests[test].add(_variant(rec["shader"], rec["defines"]))
    return tests, {t: gpuav_seconds(seconds[t], dispatches[t]) for t in tests}


def gpuav_seconds(seconds: float, dispatches: int) -> float:
    """A test's reckoned seconds under GPU-assisted validation from its seconds in the lavapipe
    pass and the dispatches it built there. Its time there is mostly llvmpipe compiling the
    instrumented pipelines (at their first dispatch; none from Mesa's cache, the layer numbering
    its shaders anew), where the lavapipe pass often found them compiled by an earlier test: a
    dynamic-length Fourier test took 1.5 s there and 497 s under the layer. Least squares over
    the ~130 tests one run had finished under the layer (2-core EPYC, cold cache): 1.85 + 13.35 s per pass-2 second + 1.0 s
    per dispatch (R^2 0.34; seconds alone 0.04, dispatches alone 0.32)."""
    return 1.85 + 13.35 * seconds + 1.0 * dispatches


def cover(tests: dict, cost: dict) -> list:
    """Weighted greedy set cover: repeatedly the test with the most new variants per unit of
    cost (gpuav_seconds: one kernel case of a variant costs less than a whole model that also
    builds it, a short row of softmax less than a long one), ties by name for a stable choice;
    then, costliest first, every chosen test whose variants the others build all the same is
    left out. Returned costliest first: the processes that run them take the long ones first and
    end together."""
    left = set().union(*tests.values()) if tests else set()
    chosen = []
    while left:
        best = max(tests, key=lambda t: (len(tests[t] & left) / cost[t], t))
        chosen.append(best)
        left -= tests[best]
    builders = defaultdict(int)
    for t in chosen:
        for v in tests[t]:
            builders[v] += 1
    kept = []
    for t in sorted(chosen, key=lambda t: (-cost[t], t)):
        if all(builders[v] > 1 for v in tests[t]):
            for v in tests[t]:
                builders[v] -= 1
        else:
            kept.append(t)
    return kept


def declared() -> set:
    return {_variant(s, d) for s in shaders.list_shaders() if not s.startswith(UNCHECKED)
            for d in shaders.variants(s)}


def uses_subgroups(variant: tuple) -> bool:
    shader, defines = variant
    return shaders.reflect(shaders.compile_shader(shader, dict(defines))).subgroups


def main_cover(log) -> int:
    tests, cost = read_log(log)
    chosen = cover(tests, cost)
    built = set().union(*tests.values()) if tests else set()
    print("\n".join(chosen))
    print(f"select_tests cover: {len(chosen)} of {len(tests)} tests build all {len(built)} variants "
          f"(reckoned {sum(cost[t] for t in chosen) / 60:.0f} CPU minutes under GPU-assisted validation)",
          file=sys.stderr)
    # a define no declared variant names (a tile size such as float_matmul's TM) tunes a
    # variant; it does not make another one
    names = defaultdict(set)
    for shader, defs in declared():
        names[shader].update(k for k, _ in defs)
    built_variants = {(shader, tuple(kv for kv in defs if kv[0] in names[shader])) for shader, defs in built}
    never = sorted(declared() - built_variants)
    if never:
        print("select_tests cover: these declared shader variants were built by no test:", file=sys.stderr)
        for shader, defs in never:
            print(f"  {shader} {' '.join(f'{k}={v}' for k, v in defs) or '(default)'}", file=sys.stderr)
        return 1
    return 0


def main_subgroups(log, paths) -> int:
    tests, _ = read_log(log)
    def within(test):
        file = test.split("::")[0]
        return not paths or any(file == p or file.startswith(p.rstrip("/") + "/") for p in paths)
    chosen = sorted(t for t in tests if within(t) and any(uses_subgroups(v) for v in tests[t]))
    print("\n".join(chosen))
    print(f"select_tests subgroups: {len(chosen)} of {sum(map(within, tests))} tests build a subgroup kernel",
          file=sys.stderr)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "cover":
        return main_cover(argv[1])
    if len(argv) >= 2 and argv[0] == "subgroups":
        return main_subgroups(argv[1], argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
