"""Node by node, the device against the reference: `vkq verify`, `vkq compare`, CompiledProgram.verify.

A program runs on the device and on the numpy references in lockstep. After each node the
device's outputs come down (VulkanExecutor(node_by_node=True): one recorded segment a node,
the memory plan of a normal run) and the node's reference runs on the device's own input
values, so a node is judged on what it computes, not on what earlier nodes handed it: one
differing node does not make every later node differ. Every host copy is let go as soon as
no later node reads it, so a run holds about one run's live tensors (a 1,565-node video
model's compare, which kept every tensor of both runs, needed more than 23 GB).

Identical means identical bits (float32 by its bit pattern: -0.0 is not 0.0, and a NaN is a
NaN only of the same payload). Differences are measured in int8 steps for int8 tensors and
in absolute value and units in the last place (ulps) for float32.

compare also follows the reference's own run (chain=True): a second set of values, held only
where the reference's run has come to differ from the device's (where they agree, both are
one array), so an all-integer program costs no second computation and no second copy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .executor import VulkanExecutor, _as_numpy, _at, _bind_inputs, _store
from .program import Node, Program
from .registry import get_op


@dataclass
class OutputCheck:
    """One output of a node, the device's value against the reference's on the same inputs.
    differing: elements whose bits differ; max_abs: the largest |device - reference| (int8:
    steps; inf where one side is NaN and the other not); max_ulps: float32 only, the largest
    distance in representable floats (None for other dtypes, or when only NaNs differ).
    run_abs: with chain, the largest |device - reference| against the reference's own run."""
    tensor: str
    dtype: str
    shape: tuple
    differing: int = 0
    max_abs: float = 0.0
    max_ulps: int | None = None
    run_abs: float | None = None
    run_differing: int | None = None

    @property
    def unit(self) -> str:
        return " int8 steps" if self.dtype == "int8" else ""

    def describe(self) -> str:
        n = int(np.prod(self.shape, dtype=np.int64))
        what = f"output {self.tensor!r} {self.dtype}{list(self.shape)}: {self.differing} of {n} elements differ"
        if self.dtype == "float32":
            ulps = "" if self.max_ulps is None else f" ({self.max_ulps} ulps)"
            return f"{what}, max |difference| {self.max_abs:g}{ulps}"
        return f"{what}, max |difference| {self.max_abs:g}{self.unit}"


@dataclass
class NodeCheck:
    """One node: where it ran ("vulkan", or "cpu" where the device has no kernel for it: the
    reference ran there, so it agrees by construction), the shader variants its dispatches
    ran, and each output's check."""
    index: int
    name: str
    op: str
    where: str
    shaders: tuple
    outputs: list

    @property
    def identical(self) -> bool:
        return all(o.differing == 0 for o in self.outputs)

    def describe(self) -> str:
        ran = ", ".join(self.shaders) if self.shaders else "no dispatch"
        return f"node {self.index} {self.name!r} ({self.op}) on {self.where}, shaders: {ran}"


@dataclass
class VerifyResult:
    """identical: every node's outputs have the reference's bits; first: the first node that
    differs (None when identical); nodes: every node's check, in order; peak_tensors: the
    most tensors the host held at once (the device's values, the reference's, and, with
    chain, the reference run's where it had come apart); outputs: the device's values of the
    program's outputs, by name (their words' dtype)."""
    identical: bool
    device: str
    first: NodeCheck | None
    nodes: list = field(repr=False)
    peak_tensors: int = 0
    outputs: dict = field(default_factory=dict, repr=False)

    @property
    def nodes_checked(self) -> int:
        return len(self.nodes)

    @property
    def differing_nodes(self) -> list:
        return [n for n in self.nodes if not n.identical]

    def summary(self) -> str:
        """One line when identical; else the first differing node, its variant(s), the device
        and how its outputs differ (one line each)."""
        if self.identical:
            return f"identical: {self.nodes_checked} nodes on {self.device} have the reference's bits"
        n = self.first
        lines = [f"differs at {n.describe()}, on {self.device} ({len(self.differing_nodes)} of "
                 f"{self.nodes_checked} nodes differ on their own inputs)"]
        lines += [f"  {o.describe()}" for o in n.outputs if o.differing]
        return "\n".join(lines)

    __str__ = summary

    def table(self) -> str:
        """Every node: index, name, op, where, each output and how many elements differ."""
        rows = [f"{'#':>5} {'node':<40} {'op':<22} {'on':<6} {'output':<28} {'differ':>9} "
                f"{'max |difference|':<24} shaders"]
        for n in self.nodes:
            for k, o in enumerate(n.outputs):
                diff = f"{o.max_abs:g}{o.unit}" + (f" ({o.max_ulps} ulps)" if o.max_ulps else "")
                ran = ", ".join(n.shaders) if k == 0 else ""
                rows.append(f"{n.index:>5} {n.name[:40]:<40} {n.op[:22]:<22} {n.where:<6} "
                            f"{(o.dtype + str(list(o.shape)))[:28]:<28} {o.differing:>9} {diff:<24} {ran}")
        return "\n".join(rows)


def differences(got: np.ndarray, want: np.ndarray, dtype: str) -> tuple:
    """(elements whose bits differ, max |got - want|, max ulps or None) of two arrays of one
    spec. Floats compare by bit pattern; the ulp distance counts representable floats between
    the two (+0 and -0 both 0), NaNs left out of it (their |difference| is inf unless both are NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise ValueError(f"shapes {got.shape} and {want.shape} differ")
    if got.size == 0:
        return 0, 0.0, None
    if got.dtype.kind != "f":
        bad = got != want
        n = int(bad.sum())
        return n, (float(np.abs(got[bad].astype(np.int64) - want[bad].astype(np.int64)).max()) if n else 0.0), None
    words = np.dtype(f"u{got.dtype.itemsize}")
    bad = got.view(words) != want.view(words)
    n = int(bad.sum())
    if not n:
        return 0, 0.0, (0 if dtype == "float32" else None)
    g, w = got[bad].astype(np.float64), want[bad].astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    both = ~gn & ~wn
    abs_ = np.abs(g[both] - w[both]).max() if both.any() else 0.0
    if (gn != wn).any():
        abs_ = np.inf
    ulps = None
    if dtype == "float32" and both.any():
        ordered = lambda a: (lambda i: np.where(i < 0, -(i & 0x7FFFFFFF), i))(
            a.view(np.int32).astype(np.int64))
        ulps = int(np.abs(ordered(got[bad][both]) - ordered(want[bad][both])).max())
    return n, float(abs_), ulps


def verify(program: Program, *inputs, device=None, chain: bool = False) -> VerifyResult:
    """Run `program` on `device` (a Device or a choice) and on the references node by node
    (module docstring). chain=True also compares with the reference's own run (OutputCheck.run_abs)."""
    ex = VulkanExecutor(program, device, node_by_node=True)
    return stream(ex, *inputs, chain=chain)


def stream(ex: VulkanExecutor, *inputs, chain: bool = False) -> VerifyResult:
    """verify() on an executor built with node_by_node=True."""
    if not ex.node_by_node:
        raise ValueError("stream() needs an executor built with node_by_node=True")
    bindings = ex.program.bind([np.shape(_as_numpy(x)) for x in inputs]) if ex.program.dynamic else {}
    env = _bind_inputs(ex.program.specialize(bindings), inputs)
    env.update({n: ex.read_state(n) for n in ex.program.state})     # (the state as the call finds it)
    with ex.lock:
        build = ex._build_for(bindings)
        program = build.program
        for name, value in env.items():
            if name in ex.buffers:      # (an input only CPU nodes read has no buffer)
                ex.buffers[name].write(program.tensors[name].to_device(value))
        return _lockstep(ex, build, env, chain)


def _lockstep(ex, build, env: dict, chain: bool) -> VerifyResult:
    program, consts = build.program, build.program.constants
    frees = _frees(program)
    host = dict(env)        # the device's values
    run = {}                # chain: the reference run's values where they are not the device's
    checks, first, peak = [], None, len(host)
    for i, (node, seg) in enumerate(zip(program.nodes, build.segments)):
        args = lambda values: [values[t] if t in values else consts[t] for t in node.inputs]
        if seg[0] == "cpu":     # (the device's run is the reference here: the same call, the same values)
            ref, shaders = _reference(node, args(host), program), ()
            host.update(ref)
        else:
            ex.run_segment(seg, program, env, host)
            rec = seg[1]
            ref = _reference(node, args(host), program)
            shaders = tuple(dict.fromkeys(st.variant for st in rec.steps))
        outs = []
        diverged = chain and any(t in run for t in node.inputs)
        in_run = _reference(node, args({**host, **run}), program) if diverged else ref
        for t in node.outputs:
            spec = program.tensors[t]
            o = OutputCheck(t, spec.dtype, spec.shape, *differences(host[t], ref[t], spec.dtype))
            if chain:
                o.run_differing, o.run_abs = differences(host[t], in_run[t], spec.dtype)[:2]
                if o.run_differing:
                    run[t] = in_run[t]
            outs.append(o)
        held = len(host) + len(run) + (len(ref) if seg[0] != "cpu" else 0) + (len(in_run) if diverged else 0)
        peak = max(peak, held)
        check = NodeCheck(i, node.name, node.op, "cpu" if seg[0] == "cpu" else "vulkan", shaders, outs)
        checks.append(check)
        if first is None and not check.identical:
            first = check
        del ref, in_run
        for t in frees[i]:
            host.pop(t, None)
            run.pop(t, None)
    outputs = {t: host[t] if t in host else consts[t] for t in program.outputs}
    return VerifyResult(first is None, ex.device.info.name, first, checks, peak, outputs)


def _reference(node: Node, args: list, program: Program) -> dict:
    out = {}
    with _at(node):
        result = get_op(node.op).reference(*args, **node.attrs)
    _store(out, node, result, program)
    return out


def _frees(program: Program) -> list:
    """Per node, the tensors no later node reads (one it writes and nothing reads included),
    the program's outputs and constants kept."""
    last = {}
    for i, node in enumerate(program.nodes):
        for t in list(node.inputs) + list(node.outputs):
            last[t] = i
    keep = set(program.outputs) | set(program.constants)
    frees = [[] for _ in program.nodes]
    for t, i in last.items():
        if t not in keep:
            frees[i].append(t)
    return frees
