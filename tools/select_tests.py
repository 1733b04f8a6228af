"""Pick tests from a dispatch log, for the test passes that cannot afford the whole suite.

    python tools/select_tests.py cover DISPATCH_LOG > tests.txt        (then: pytest @tests.txt)
    python tools/select_tests.py subgroups DISPATCH_LOG [PATH ...] > tests.txt

DISPATCH_LOG is what a test pass wrote with VKQ_DISPATCH_LOG set (vkq/device.py: one JSON line
per dispatch built, with its shader variant and the test that built it).

cover: the fewest tests (greedy set cover) that between them build every variant that pass
built, for the GPU-assisted validation pass. It instruments every shader and slows it ~10x, so
running the whole kernel suite under it would not fit CI; running each variant once catches every
out-of-bounds access a variant makes on the shapes its tests use. Exits 1, naming them, if a
variant that a shader declares (its `//! variant` lines) was built by no test at all: an untested
variant is one GPU-assisted validation never sees.

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

UNCHECKED = ("bench_",)   # shaders only the benchmark dispatches


def _variant(shader: str, defines: dict) -> tuple:
    return shader, tuple(sorted(shaders._normalize(defines).items()))


def read_log(path) -> tuple[dict, dict]:
    """(test node id -> set of variants it built, test node id -> dispatches it built)."""
    tests, dispatches = defaultdict(set), defaultdict(int)
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec["test"]:
                tests[rec["test"]].add(_variant(rec["shader"], rec["defines"]))
                dispatches[rec["test"]] += 1
    return tests, dispatches


def cover(tests: dict, cost: dict) -> list:
    """Weighted greedy set cover: repeatedly the test with the most new variants per unit of
    cost (the dispatches it builds: a whole model costs more than a kernel case, and GPU-assisted
    validation's time grows with the work), ties by name for a stable choice."""
    left = set().union(*tests.values()) if tests else set()
    chosen = []
    while left:
        best = max(tests, key=lambda t: (len(tests[t] & left) / cost[t], t))
        chosen.append(best)
        left -= tests[best]
    return sorted(chosen)


def declared() -> set:
    return {_variant(s, d) for s in shaders.list_shaders() if not s.startswith(UNCHECKED)
            for d in shaders.variants(s)}


def uses_subgroups(variant: tuple) -> bool:
    shader, defines = variant
    return shaders.reflect(shaders.compile_shader(shader, dict(defines))).subgroups


def main_cover(log) -> int:
    tests, dispatches = read_log(log)
    chosen = cover(tests, dispatches)
    built = set().union(*tests.values()) if tests else set()
    print("\n".join(chosen))
    print(f"select_tests cover: {len(chosen)} of {len(tests)} tests build all {len(built)} variants", file=sys.stderr)
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
