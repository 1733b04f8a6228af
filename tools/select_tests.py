"""Pick tests from a dispatch log, for the test passes that cannot afford the whole suite.

    python tools/select_tests.py cover DISPATCH_LOG [RECKONED_JSON] > tests.txt   (then: pytest @tests.txt)
    python tools/select_tests.py checked DISPATCH_LOG GPUAV_DISPATCH_LOG
    python tools/select_tests.py subgroups DISPATCH_LOG [PATH ...] > tests.txt

DISPATCH_LOG is what a test pass wrote with VKQ_DISPATCH_LOG set (vkq/device.py: one JSON line
per dispatch built, with its shader variant and the test that built it; and one per test phase
with its seconds: tests/conftest.py).

cover: the cheapest tests (weighted greedy set cover, by their reckoned time) that between
them build every variant that pass built, for the GPU-assisted validation pass. It instruments
every shader and slows it 12-30x (llvmpipe compiling the instrumented pipelines), so running the
whole kernel suite under it would not fit CI; running each variant once catches every
out-of-bounds access a variant makes on the shapes its tests use. Even the cover (~500 tests,
~65 CPU minutes on a 2-core machine) does not fit beside the other passes, so the pass runs it
in the order of `priority` under a time budget (tools/test.sh): the variants whose shader
sources changed most recently first, interleaved with a rotation that the commit picks, so each
run checks what was just changed and, over runs, every variant. Exits 1, naming them, if a
variant that a shader declares (its `//! variant` lines) was built by no test at all: an
untested variant is one GPU-assisted validation never sees.

checked: after the budgeted pass, how many of the variants the cover's tests build were built
under the layer (its own dispatch log), and the shaders of those left for later runs.

subgroups: every test (in the files or folders PATH, if given) that builds a variant using
subgroup operations, for the pass at the other subgroup sizes: only those kernels' lanes depend
on the size (a third of the kernel tests; the rest would run the same code again).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
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


def changed_at(shader_names) -> dict:
    """shader -> the commit time (seconds) of the newest commit touching its source or anything it
    includes; 0 for all where git or the history is missing (the order is then the rotation's)."""
    root = Path(__file__).resolve().parent.parent
    times, newest = {}, {}
    for shader in shader_names:
        files = [str(f) for f in shaders.source_files(shaders.source_path(shader))]
        key = tuple(sorted(files))
        if key not in times:
            try:
                out = subprocess.run(["git", "log", "-1", "--format=%ct", "--", *key], cwd=root,
                                     capture_output=True, text=True, timeout=30).stdout.strip()
                times[key] = int(out) if out else 0
            except (OSError, ValueError, subprocess.TimeoutExpired):
                times[key] = 0
        newest[shader] = times[key]
    return newest


def rotation_seed() -> str:
    """The commit under test (another commit, another rotation), else today's date."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if not out:
        import datetime
        out = datetime.date.today().isoformat()
    return out


def priority(chosen: list, tests: dict, changed: dict, seed: str) -> list:
    """The cover's tests in the order a time budget should take them: the variants by their
    shader's last change, newest first, interleaved one for one with the variants in an order
    that `seed` shuffles (so what is never changed is still checked, a run's share at a time);
    each test placed by the first of its variants in that order, costlier among equals first
    (its variants are dealt early, the long test does not start last)."""
    variants = sorted(set().union(*(tests[t] for t in chosen)) if chosen else set())
    def shuffled(v):
        return hashlib.sha1(f"{seed}{v!r}".encode()).hexdigest()
    by_change = sorted(variants, key=lambda v: (-changed.get(v[0], 0), shuffled(v)))
    by_seed = sorted(variants, key=shuffled)
    rank = {}
    for pair in zip(by_change, by_seed):
        for v in pair:
            rank.setdefault(v, len(rank))
    return sorted(chosen, key=lambda t: min(rank[v] for v in tests[t]))


def declared() -> set:
    return {_variant(s, d) for s in shaders.list_shaders() if not s.startswith(UNCHECKED)
            for d in shaders.variants(s)}


def uses_subgroups(variant: tuple) -> bool:
    shader, defines = variant
    return shaders.reflect(shaders.compile_shader(shader, dict(defines))).subgroups


def main_cover(log, reckoned=None) -> int:
    tests, cost = read_log(log)
    chosen = cover(tests, cost)
    chosen = priority(chosen, tests, changed_at({v[0] for t in chosen for v in tests[t]}), rotation_seed())
    if reckoned:   # for tests/conftest.py: a test is not started where it would end past the deadline
        Path(reckoned).write_text(json.dumps({t: round(cost[t], 1) for t in chosen}))
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


def main_checked(log, checked_log) -> int:
    tests, _ = read_log(log)
    wanted = set().union(*tests.values()) if tests else set()
    done, _ = read_log(checked_log) if Path(checked_log).exists() else ({}, {})
    seen = set().union(*done.values()) if done else set()
    left = wanted - seen
    print(f"select_tests checked: GPU-assisted validation built {len(wanted & seen)} of the "
          f"{len(wanted)} variants in this run's time budget", file=sys.stderr)
    if left:
        names = sorted({shader for shader, _ in left})
        print(f"  left to later runs (another commit, another share): {len(left)} variants of "
              f"{', '.join(names)}", file=sys.stderr)
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
    if len(argv) in (2, 3) and argv[0] == "cover":
        return main_cover(*argv[1:])
    if len(argv) == 3 and argv[0] == "checked":
        return main_checked(argv[1], argv[2])
    if len(argv) >= 2 and argv[0] == "subgroups":
        return main_subgroups(argv[1], argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
