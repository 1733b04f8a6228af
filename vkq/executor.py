"""Executors: run a Program on a Vulkan device, or on the CPU with the numpy references.

The Vulkan executor builds everything once: buffers, packed constants, dispatches, and one
recorded Kompute sequence per run of consecutive Vulkan nodes (a segment). Nodes whose op
has no shader run on the CPU between segments. Per call, only the program inputs (and
tensors crossing a CPU/Vulkan boundary) go up, and only what the CPU needs comes down.
"""
from __future__ import annotations

import threading

import numpy as np

from .device import Buffer, Device, get_device
from .program import Node, Program, TensorSpec
from .registry import get_op


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def run_reference(program: Program, *inputs, keep_all: bool = False):
    """Run the program on the CPU with every op's numpy reference. Returns the outputs
    (or, with keep_all, every tensor by name)."""
    env = _bind_inputs(program, inputs)
    env.update(program.constants)
    for node in program.nodes:
        op = get_op(node.op)
        result = op.reference(*[env[t] for t in node.inputs], **node.attrs)
        _store(env, node, result, program)
    return env if keep_all else _outputs(program, env)


def _bind_inputs(program: Program, inputs) -> dict:
    if len(inputs) != len(program.inputs):
        raise ValueError(f"the program takes {len(program.inputs)} input(s) ({', '.join(program.inputs)}), got {len(inputs)}")
    env = {}
    for name, x in zip(program.inputs, inputs):
        spec = program.tensors[name]
        a = _as_numpy(x)
        if a.shape != spec.shape:
            raise ValueError(f"input {name!r} must have shape {spec.shape}, got {a.shape}")
        env[name] = a.astype(spec.numpy_dtype, copy=False)
    return env


def _store(env, node: Node, result, program: Program):
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(node.outputs):
        raise RuntimeError(f"{node.name}: reference returned {len(results)} outputs, expected {len(node.outputs)}")
    for name, value in zip(node.outputs, results):
        spec = program.tensors[name]
        value = np.asarray(value)
        if value.shape != spec.shape:
            raise RuntimeError(f"{node.name}: output {name!r} has shape {value.shape}, spec says {spec.shape}")
        env[name] = value.astype(spec.numpy_dtype, copy=False)


def _outputs(program: Program, env):
    outs = tuple(env[t] for t in program.outputs)
    return outs[0] if len(outs) == 1 else outs


def plan_memory(program: Program, exclude=()) -> dict:
    """Give intermediate tensors shared device buffers (slots) when their lifetimes do not
    overlap. A tensor lives from the node that writes it to the last node that reads it,
    both included, so a node's inputs and outputs never share. Greedy, in program order:
    take the free slot that fits best (growing the largest free one if none fits).
    Returns {tensor: (slot, slot_words)}; device-only buffers hold any 32-bit type."""
    first, last = {}, {}
    for i, node in enumerate(program.nodes):
        for t in node.outputs:
            first.setdefault(t, i)
            last[t] = max(last.get(t, i), i)
        for t in node.inputs:
            last[t] = i
    exclude = set(exclude)
    order = sorted((t for t in first if t not in exclude), key=lambda t: (first[t], t))
    slot_size, slot_free_at, assign = [], [], {}
    for t in order:
        need = program.tensors[t].device_words()
        free = [k for k in range(len(slot_size)) if slot_free_at[k] < first[t]]
        fits = [k for k in free if slot_size[k] >= need]
        if fits:
            k = min(fits, key=lambda k: slot_size[k])
        elif free:
            k = max(free, key=lambda k: slot_size[k])
            slot_size[k] = need
        else:
            k = len(slot_size)
            slot_size.append(need)
            slot_free_at.append(-1)
        slot_free_at[k] = last[t]
        assign[t] = k
    return {t: (k, max(1, slot_size[k])) for t, k in assign.items()}


class BuildContext:
    """What an op's build() may use: the device, the buffers of its tensors, their specs,
    constant values, and buffers for constants it packs itself (uploaded once)."""

    def __init__(self, executor: "VulkanExecutor"):
        self._ex = executor
        self.device: Device = executor.device

    def spec(self, name: str) -> TensorSpec:
        return self._ex.program.tensors[name]

    def buffer(self, name: str) -> Buffer:
        """The device buffer of a tensor. A constant gets one, in its spec's device layout,
        on first request; most ops pack their constants themselves (const_buffer) instead."""
        ex = self._ex
        if name not in ex.buffers and name in ex.program.constants:
            spec = ex.program.tensors[name]
            ex.buffers[name] = self.const_buffer(spec.to_device(ex.program.constants[name]).view(spec.word_dtype))
        return ex.buffers[name]

    def constant(self, name: str) -> np.ndarray:
        return self._ex.program.constants[name]

    def const_buffer(self, array, dtype=None) -> Buffer:
        """Upload an op-prepared array (packed weights, bias, multipliers) once."""
        a = np.ascontiguousarray(array, dtype=dtype)
        buf = self.device.buffer(a)
        self._ex._pending_uploads.append(buf)
        return buf

    def scratch(self, words: int, dtype=np.int32) -> Buffer:
        """A device-only buffer an op needs between its own dispatches."""
        return self.device.buffer(size=max(1, words), dtype=dtype, host_visible=False)


class VulkanExecutor:
    """A Program prepared on one device: call it with inputs, get outputs.

    Calls from several threads take turns (self.lock): a call owns the executor's buffers,
    the host copies of its inputs and outputs and the intermediates, from its first upload
    to its last download. Programs sharing a device also take turns at its queue."""

    def __init__(self, program: Program, device=None, *, host_visible_all: bool = False):
        self.program = program
        self.lock = threading.Lock()
        self.host_visible_all = host_visible_all
        self.device = device if isinstance(device, Device) else get_device(device)
        self.buffers: dict[str, Buffer] = {}
        self._pending_uploads: list[Buffer] = []
        ops = {n.op: get_op(n.op) for n in program.nodes}
        on_cpu = [n for n in program.nodes if not ops[n.op].on_vulkan]

        # Tensors the host must see: program I/O, and everything crossing a CPU node.
        host_side = set(program.inputs) | set(program.outputs)
        for n in on_cpu:
            host_side |= set(n.inputs) | set(n.outputs)
        shared = plan_memory(program, exclude=host_side | set(program.constants)) \
            if not host_visible_all else {}
        self.arena_slots = {}
        for name, spec in program.tensors.items():
            if name in program.constants:
                continue  # ops pack the constants they read (BuildContext.buffer uploads the rest)
            if name in shared:
                slot, words = shared[name]
                if slot not in self.arena_slots:
                    self.arena_slots[slot] = self.device.buffer(size=words, host_visible=False)
                self.buffers[name] = self.arena_slots[slot]
                continue
            self.buffers[name] = self.device.buffer(
                size=spec.device_words(), dtype=spec.word_dtype,
                host_visible=host_visible_all or name in host_side)
        naive = sum(program.tensors[t].device_words() * 4 for t in shared)
        self.memory = {"arena_bytes": sum(b.nbytes for b in self.arena_slots.values()),
                       "naive_bytes": naive, "shared_tensors": len(shared)}

        ctx = BuildContext(self)
        self.segments = []   # ("vulkan", Recording, upload names, download names) | ("cpu", Node)
        run: list = []
        for node in program.nodes + [None]:
            if node is not None and ops[node.op].on_vulkan:
                run.append(node)
                continue
            if run:
                self.segments.append(self._segment(ctx, run, host_side))
                run = []
            if node is not None:
                self.segments.append(("cpu", node))
        if self._pending_uploads:   # constants go up once, now
            self.device.run([], upload=self._pending_uploads)
            self._pending_uploads = []

    def _segment(self, ctx, nodes, host_side):
        steps = []
        for node in nodes:
            steps += get_op(node.op).build(ctx, node)
        produced = {t for n in nodes for t in n.outputs}
        consumed = {t for n in nodes for t in n.inputs}
        ups = [t for t in sorted(consumed - produced) if t in host_side and t not in self.program.constants]
        downs = [t for t in sorted(produced) if t in host_side or self.host_visible_all]
        rec = self.device.record(steps, [self.buffers[t] for t in ups], [self.buffers[t] for t in downs])
        return ("vulkan", rec, ups, downs, nodes)

    def __call__(self, *inputs, keep_all: bool = False):
        env = _bind_inputs(self.program, inputs)
        words = {name: self.program.tensors[name].to_device(value) for name, value in env.items()}
        with self.lock:
            return self._call(env, words, keep_all)

    def _call(self, env: dict, words: dict, keep_all: bool):
        for name, value in words.items():
            self.buffers[name].write(value)
        host = dict(env)
        for seg in self.segments:
            if seg[0] == "cpu":
                node = seg[1]
                consts = self.program.constants
                args = [host[t] if t in host else consts[t] for t in node.inputs]
                _store(host, node, get_op(node.op).reference(*args, **node.attrs), self.program)
                continue
            _, rec, ups, downs, _ = seg
            for t in ups:
                if t not in env:   # produced on the CPU since the last upload
                    self.buffers[t].write(self.program.tensors[t].to_device(host[t]))
            rec.run()
            for t in downs:
                host[t] = self.program.tensors[t].from_device(self.buffers[t].read())
        if keep_all:
            return host
        return _outputs(self.program, host)
