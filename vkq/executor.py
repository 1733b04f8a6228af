"""Executors: run a Program on a Vulkan device, or on the CPU with the numpy references.

The Vulkan executor builds everything once: buffers, packed constants, dispatches, and one
recorded Kompute sequence per run of consecutive Vulkan nodes (a segment). Intermediate tensors
share buffers where their lifetimes allow (plan_memory), and a reshape that moves nothing shares
its input's (memory_aliases). Nodes whose op
has no shader run on the CPU between segments. Per call, only the program inputs (and
tensors crossing a CPU/Vulkan boundary) go up, and only what the CPU needs comes down.

A dynamic program (symbolic dims) is planned once for its upper bounds: every buffer is
sized for the largest shape, so no call allocates. Each concrete shape gets its own build
(dispatches and recordings of the program specialized to it) on first use, kept in a small
least-recently-used cache; builds share the buffers, the uploaded constants and the
compiled pipelines, so a new shape costs the recording, not compilation.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import warnings
from collections import OrderedDict

import numpy as np

from .device import Buffer, Device, get_device
from .program import Node, NodeError, Program, TensorSpec
from .registry import cpu_reason, get_op
from .rewrites import rewrite_for_shapes
from .shaders import ShaderCompileError
from .vkinfo import DeviceLimit, VulkanUnavailable


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":    # (numpy has no bfloat16; the program computes in float32)
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def run_reference(program: Program, *inputs, keep_all: bool = False, state: dict | None = None):
    """Run the program on the CPU with every op's numpy reference. Returns the outputs
    (or, with keep_all, every tensor by name). A program with state reads it from `state`
    ({state tensor: value}, Program.state_init where None) and, where given, writes the new
    values back into that dict: pass the same dict to every call to keep the state."""
    program = specialize_for(program, inputs)
    env = _bind_inputs(program, inputs)
    env.update(program.constants)
    if program.state:
        current = program.state_init if state is None else state
        env.update({n: np.asarray(current.get(n, program.state_init[n])) for n in program.state})
    done = {} if keep_all else _last_reads(program)
    for i, node in enumerate(program.nodes):
        with _at(node):
            result = get_op(node.op).reference(*[env[t] for t in node.inputs], **node.attrs)
        _store(env, node, result, program)
        for t in done.get(i, ()):
            del env[t]          # (a video model's activations, all kept, took gigabytes)
    if state is not None:
        state.update({n: env[u] for n, u in program.state.items()})
    return env if keep_all else _outputs(program, env)


def _last_reads(program: Program) -> dict:
    """{node index: the tensors it is the last to read}, outputs, constants and state updates
    left out."""
    last = {}
    for i, node in enumerate(program.nodes):
        for t in node.inputs:
            last[t] = i
    keep = set(program.outputs) | set(program.constants) | set(program.state.values())
    done = {}
    for t, i in last.items():
        if t not in keep:
            done.setdefault(i, set()).add(t)
    return done


def specialize_for(program: Program, inputs) -> Program:
    """A dynamic program at the shapes of these inputs (ValueError naming the dimension and
    its bounds if they do not fit); a static program as it is."""
    if not program.dynamic:
        return program
    return program.specialize(program.bind([np.shape(_as_numpy(x)) for x in inputs]))


def _bind_inputs(program: Program, inputs) -> dict:
    if len(inputs) != len(program.inputs):
        raise ValueError(f"the program takes {len(program.inputs)} input(s) ({', '.join(program.inputs)}), got {len(inputs)}")
    env = {}
    for name, x in zip(program.inputs, inputs):
        spec = program.tensors[name]
        a = _as_numpy(x)
        if a.shape != spec.shape:
            raise ValueError(f"input {name!r} must have shape {spec.shape}, got {a.shape}")
        env[name] = _as_words(a, spec, f"input {name!r}")
    return env


def _as_words(value: np.ndarray, spec, what: str) -> np.ndarray:
    """value in its spec's dtype; integers beyond int32's range are refused (the cast would wrap
    them: a wrong answer, not an error)."""
    if spec.dtype == "int32" and value.dtype.kind in "iu" and value.size \
            and (value.dtype.itemsize > 4 or value.dtype == np.uint32) \
            and (int(value.min()) < -2 ** 31 or int(value.max()) >= 2 ** 31):    # (int32 itself: no scan)
        raise ValueError(f"{what} holds integers beyond int32's range ({int(value.min())} .. {int(value.max())}); "
                         "vkq keeps integer tensors in 32-bit words")
    return value.astype(spec.numpy_dtype, copy=False)


@contextlib.contextmanager
def _at(node: Node):
    """Errors of an op's reference or build() on a node it cannot take, as a NodeError naming it."""
    try:
        yield
    except (NodeError, DeviceLimit, ShaderCompileError, VulkanUnavailable):     # (the device's, not the node's)
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError,
            RuntimeError) as e:
        raise NodeError(f"node {node.name!r} ({node.op}) cannot run as the program gives it: "
                        f"{type(e).__name__}: {e}") from e


def _store(env, node: Node, result, program: Program):
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(node.outputs):
        raise NodeError(f"node {node.name!r} ({node.op}): its reference returned {len(results)} outputs, "
                        f"the program names {len(node.outputs)}")
    for name, value in zip(node.outputs, results):
        spec = program.tensors[name]
        value = np.asarray(value)
        if value.shape != spec.shape:
            raise NodeError(f"node {node.name!r} ({node.op}): its output {name!r} has shape {value.shape}, "
                            f"its spec says {spec.shape}")
        try:
            env[name] = _as_words(value, spec, f"output {name!r}")
        except ValueError as e:
            raise NodeError(f"node {node.name!r} ({node.op}): {e}") from None


def _outputs(program: Program, env, names=None):
    """The outputs (or those of `names`) as the model gives them: in torch's dtype where that is
    not their words' (a bool mask, int64 indices: meta output_dtypes), and a constant output as
    a copy (the caller may write to it)."""
    dtypes = program.meta.get("output_dtypes", {})
    outs = []
    for t in (program.outputs if names is None else names):
        value = program.constants[t] if t in program.constants else env[t]
        if dtypes.get(t) == "complex64":        # from its (real, imaginary) pairs
            value = np.ascontiguousarray(value, np.float32).view(np.complex64).reshape(value.shape[:-1])
        outs.append(value.astype(dtypes[t]) if t in dtypes else value.copy() if t in program.constants else value)
    return outs[0] if len(outs) == 1 else tuple(outs)


def plan_memory(program: Program, exclude=(), aliases=None) -> dict:
    """Give intermediate tensors shared device buffers (slots) when their lifetimes do not
    overlap. A tensor lives from the node that writes it to the last node that reads it,
    both included, so a node's inputs and outputs never share, except where `aliases`
    ({tensor: the earlier tensor whose words it is}, see memory_aliases) says a node's output
    is its input: those share one slot, live as long as the longest of them. Greedy, in
    program order: take the free slot that fits best (growing the largest free one if none
    fits). Slots are whole ivec4s. Returns {tensor: (slot, slot_words)}; device-only buffers
    hold any 32-bit type."""
    first, last = {}, {}
    for i, node in enumerate(program.nodes):
        for t in node.outputs:
            first.setdefault(t, i)
            last[t] = max(last.get(t, i), i)
        for t in node.inputs:
            last[t] = i
    exclude = set(exclude)
    root = {}
    for t, src in (aliases or {}).items():
        if t in first and src in first and t not in exclude and src not in exclude:
            root[t] = root.get(src, src)
    need, end = {}, dict(last)
    for t in first:
        r = root.get(t, t)
        # whole ivec4s: any slot can then be bound as a texel buffer (Device.texel_variant)
        need[r] = max(need.get(r, 4), -(-program.tensors[t].device_words() // 4) * 4)
        end[r] = max(end.get(r, last[t]), last[t])
    order = sorted((t for t in first if t not in exclude and t not in root), key=lambda t: (first[t], t))
    slot_size, slot_free_at, assign = [], [], {}
    for t in order:
        free = [k for k in range(len(slot_size)) if slot_free_at[k] < first[t]]
        fits = [k for k in free if slot_size[k] >= need[t]]
        if fits:
            k = min(fits, key=lambda k: slot_size[k])
        elif free:
            k = max(free, key=lambda k: slot_size[k])
            slot_size[k] = need[t]
        else:
            k = len(slot_size)
            slot_size.append(need[t])
            slot_free_at.append(-1)
        slot_free_at[k] = end[t]
        assign[t] = k
    for t, r in root.items():
        assign[t] = assign[r]
    return {t: (k, max(1, slot_size[k])) for t, k in assign.items()}


# ops whose output may be their input's words (a reshape of float / int32 words, a repack
# between equal packed images): planned into the input's buffer, they build no dispatch
ALIAS_OPS = ("reshape", "repack")


def memory_aliases(program: Program, sized: Program) -> dict:
    """{output: input} for the nodes of ALIAS_OPS whose output's device words are its input's
    (TensorSpec.same_words) at every shape the program takes: checked at the upper bounds
    (`sized`), and in a dynamic program only where that holds for any shape (float and int32
    words, int8 ROW to ROW; a blocked int8 image depends on the shape)."""
    out = {}
    for node in sized.nodes:
        if node.op not in ALIAS_OPS or len(node.inputs) != 1 or len(node.outputs) != 1 \
                or node.inputs[0] in sized.constants:
            continue
        a, b = sized.tensors[node.inputs[0]], sized.tensors[node.outputs[0]]
        shape_free = a.dtype != "int8" or (a.layout, b.layout) == ("ROW", "ROW")
        symbolic = program.dynamic and any(t not in program.tensors or program.tensors[t].symbolic
                                           for t in (node.inputs[0], node.outputs[0]))
        if (shape_free or not symbolic) and a.same_words(b):
            out[node.outputs[0]] = node.inputs[0]
    return out


class BuildContext:
    """What an op's build() may use: the device, the buffers of its tensors, their specs (in
    the build's concrete shapes), constant values, buffers for constants it packs itself
    (uploaded once, shared by every build that packs them alike) and scratch buffers."""

    def __init__(self, executor: "VulkanExecutor", program: Program):
        self._ex, self._program = executor, program
        self.device = _PipelineReuse(executor.device, executor._pipelines)
        self._node, self._scratch_n = None, 0
        # what one node of this build made that later nodes may reuse: (op's key) -> its value
        # (linear_dynamic: the row quantization of an input that q, k and v all read)
        self.memo: dict = {}

    def spec(self, name: str) -> TensorSpec:
        return self._program.tensors[name]

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

    def is_constant(self, name: str) -> bool:
        return name in self._ex.program.constants

    def const_buffer(self, array, dtype=None) -> Buffer:
        """Upload an op-prepared array (packed weights, bias, multipliers) once: the same
        words are the same buffer, whichever build asks. The buffer is whole ivec4s (zeros
        after the array's words), so that a kernel may read it as texels (texel.glsl: a
        partial texel is not readable): a float constant operand such as attention's bias."""
        a = np.ascontiguousarray(array, dtype=dtype)
        key = (a.dtype.str, a.shape, hashlib.sha1(a.view(np.uint8).reshape(-1)).hexdigest())
        ex = self._ex
        if key not in ex._consts:
            words = a.reshape(-1)
            ex._consts[key] = self.device.buffer(np.concatenate([words, np.zeros(-words.size % 4, words.dtype)]))
            ex._pending_uploads.append(ex._consts[key])
        return ex._consts[key]

    def scratch(self, words: int, dtype=np.int32) -> Buffer:
        """A device-only buffer an op needs between its own dispatches: the node's k-th
        request gets the same buffer in every build (the first build, at the upper bounds,
        sizes it), so pipelines over it are reused."""
        key = (self._node.name if self._node is not None else None, self._scratch_n, np.dtype(dtype).str)
        self._scratch_n += 1
        buf = self._ex._scratch.get(key)
        if buf is None or buf.size < words:
            buf = self._ex._scratch[key] = self.device.buffer(size=max(1, words), dtype=dtype, host_visible=False)
        return buf

    def building(self, node: Node) -> None:
        self._node, self._scratch_n = node, 0


class _PipelineReuse:
    """The device as an op's build() sees it: dispatch() keeps the executor's pipelines for
    reuse by later builds; everything else is the device's."""

    def __init__(self, device: Device, pipelines: dict):
        self._device, self._pipelines = device, pipelines

    def dispatch(self, *args, **kwargs):
        return self._device.dispatch(*args, pipelines=self._pipelines, **kwargs)

    def __getattr__(self, name):
        return getattr(self._device, name)


class _Build:
    """The program at one concrete shape, prepared on the device: its segments, each
    ("vulkan", Recording, upload names, download names, nodes) or ("cpu", Node)."""

    def __init__(self, program: Program, segments: list):
        self.program, self.segments = program, segments
        self.frees = _host_frees(program, segments)


def _host_frees(program: Program, segments: list) -> list:
    """Per segment, the host copies that no later segment reads (the program's outputs kept):
    a call lets go of each after that segment, as run_reference does."""
    last = {}
    for s, seg in enumerate(segments):
        for t in (seg[1].inputs if seg[0] == "cpu" else seg[2]):
            last[t] = s
    frees = [[] for _ in segments]
    for t, s in last.items():
        if t not in program.outputs:
            frees[s].append(t)
    return frees


class VulkanExecutor:
    """A Program prepared on one device: call it with inputs, get outputs.

    Calls from several threads take turns (self.lock): a call owns the executor's buffers,
    the host copies of its inputs and outputs and the intermediates, from its first upload
    to its last download. Programs sharing a device also take turns at its queue.
    max_shapes: how many concrete shapes of a dynamic program stay built.
    node_by_node: each Vulkan node its own recorded segment, which downloads the node's
    outputs after its dispatches, with the memory plan of a normal run (the arena's slots
    host-visible, so a tensor is read back before a later node reuses its slot): vkq.verify
    compares each node with its reference this way, holding one run's tensors, not all."""

    def __init__(self, program: Program, device=None, *, host_visible_all: bool = False, max_shapes: int = 8,
                 node_by_node: bool = False):
        self.program = program
        self.lock = threading.Lock()
        self.host_visible_all = host_visible_all
        self.node_by_node = node_by_node
        self.max_shapes = max(1, int(max_shapes))
        self.device = device if isinstance(device, Device) else get_device(device)
        self._pipelines: dict = {}
        sized = _rewritten_at_upper_bounds(program) if program.dynamic else program
        self._structure = _structure(sized)
        self._kept = frozenset(n.name for n in sized.nodes)     # what the rewrites left at the upper bounds
        # where each node runs, decided from its specs at the upper bounds (node i of every
        # specialization is node i of the program): node index -> why it runs on the CPU
        self.cpu_reasons = {i: r for i, n in enumerate(sized.nodes) if (r := cpu_reason(n, sized.tensors))}
        names = [n.name for n in sized.nodes]
        self.device_fallback: list = []      # (op, reason) of the nodes this device cannot run
        for i, n in enumerate(sized.nodes):
            if i not in self.cpu_reasons and (reason := self._too_big(sized, n)):
                self.cpu_reasons[i] = reason
                self.device_fallback.append((n.op, f"{reason}; runs on the CPU"))
                warnings.warn(f"{n.name} runs on the CPU on {self.device.info.name}: {reason}", stacklevel=2)
        while True:
            self._plan(sized)
            try:    # the first build, at the upper bounds, compiles every pipeline and sizes the scratch
                self._build_for(program.max_bindings() if program.dynamic else {})
                break
            except DeviceLimit as e:     # this device cannot run the node: the CPU does, planned anew
                i = names.index(getattr(e, "node", None)) if getattr(e, "node", None) in names else None
                if i is None or i in self.cpu_reasons:
                    raise
                self.cpu_reasons[i] = str(e)
                self.device_fallback.append((sized.nodes[i].op, f"{e}; runs on the CPU"))
                warnings.warn(f"{names[i]} runs on the CPU on {self.device.info.name}: {e}", stacklevel=2)

    def _too_big(self, sized: Program, node) -> str | None:
        """Why a buffer of this node's would exceed what one binding of this device reaches
        (maxStorageBufferRange: 128 MiB on llvmpipe), or None."""
        limit = self.device.info.max_storage_buffer_range
        for t in list(node.inputs) + list(node.outputs):
            if sized.tensors[t].dtype == "float64":      # a host-side constant: no device buffer
                continue
            if (nbytes := sized.tensors[t].device_words() * 4) > limit:
                mib = lambda b: f"{b / 2**20:.4g} MiB"
                return (f"tensor {t!r} {sized.tensors[t].shape} takes {mib(nbytes)}, past "
                        f"{self.device.info.name}'s storage buffer range of {mib(limit)}")
        return None

    def _plan(self, sized: Program) -> None:
        """Buffers for every tensor: host-visible where the host must see it (program I/O,
        everything crossing a CPU node), the other intermediates sharing an arena."""
        program = self.program
        self.buffers: dict[str, Buffer] = {}
        self._pending_uploads: list[Buffer] = []
        self._consts, self._scratch, self._builds = {}, {}, OrderedDict()
        self._bound: OrderedDict = OrderedDict()     # symbol values -> the program specialized there
        self.host_side = set(program.inputs) | set(program.outputs)
        for i, n in enumerate(sized.nodes):
            if i in self.cpu_reasons:
                self.host_side |= set(n.inputs) | set(n.outputs)
        self._plan_state(sized)
        host_visible_all = self.host_visible_all
        kept = set(program.state) | set(program.state.values())      # (state lives across calls)
        shared = plan_memory(sized, exclude=self.host_side | set(program.constants) | kept,
                             aliases=memory_aliases(program, sized)) if not host_visible_all else {}
        self.arena_slots = {}
        on_device = {t for i, n in enumerate(sized.nodes) if i not in self.cpu_reasons
                     for t in list(n.inputs) + list(n.outputs)}
        for name in self.state_on_device:     # allocated once, initialised from the program
            spec = sized.tensors[name]
            self.buffers[name] = self.device.buffer(spec.to_device(program.state_init[name]).view(spec.word_dtype))
            self._pending_uploads.append(self.buffers[name])
        for update, name in self._in_place.items():
            self.buffers[update] = self.buffers[name]
        for name, spec in sized.tensors.items():
            if name in program.constants or name in self.buffers:
                continue  # ops pack the constants they read (BuildContext.buffer uploads the rest)
            if name not in on_device:
                continue  # read and written by CPU nodes only (or a program output no node makes)
            if name in shared:
                slot, words = shared[name]
                if slot not in self.arena_slots:
                    self.arena_slots[slot] = self.device.buffer(size=words, host_visible=self.node_by_node)
                self.buffers[name] = self.arena_slots[slot]
                continue
            self.buffers[name] = self.device.buffer(
                size=spec.device_words(), dtype=spec.word_dtype,
                host_visible=host_visible_all or name in self.host_side)
        naive = sum(sized.tensors[t].device_words() * 4 for t in shared)
        self.memory = {"arena_bytes": sum(b.nbytes for b in self.arena_slots.values()),
                       "naive_bytes": naive, "shared_tensors": len(shared)}

    # -- program state ---------------------------------------------------------------------
    def _plan_state(self, sized: Program) -> None:
        """Where each state tensor lives. On the device (a buffer of its own, for the life of the
        executor) unless a CPU node reads it or makes its update: then on the host, passed in
        and taken back like an input and an output. Its update is written into the state's own
        buffer (in place: no copy, no arena slot) where the node making it is a scatter of
        slices into the state (index_copy_ of a KV cache at its positions; index_copy_q8 of an
        int8 one, vkq.ops.kv_q8) and nothing reads
        the old value after it; else it gets a buffer of its own, copied into the state's at
        the end of the call."""
        program = self.program
        self.state_on_device = [n for n, u in program.state.items()
                                if n not in self.host_side and u not in self.host_side]
        self._state_host = {n: program.state_init[n] for n in program.state if n not in self.state_on_device}
        self._host_updates = {program.state[n] for n in self._state_host}
        self.host_side |= self._host_updates      # (comes down after each call)
        # tensors CPU nodes read: a program output among them always comes down (__call__'s outputs=)
        self._cpu_reads = {t for i, n in enumerate(sized.nodes) if i in self.cpu_reasons for t in n.inputs}
        order = {t: i for i, node in enumerate(sized.nodes) for t in node.outputs}
        self._in_place, self._state_copies = {}, []
        for name in self.state_on_device:
            update = program.state[name]
            i = order.get(update)
            node = sized.nodes[i] if i is not None else None
            later_reads = any(name in n.inputs for n in sized.nodes[i + 1:]) if node is not None else True
            rows = node is not None and (node.op == "index_copy_q8" or node.op == "scatter" and node.attrs.get("along")
                                         and node.attrs.get("reduce", "none") == "none")
            if rows and node.inputs[0] == name and not later_reads:
                self._in_place[update] = name
            else:
                self._state_copies.append((update, name))

    def _state_copy_recording(self):
        """The recording that copies each out-of-place update into its state's buffer (built once)."""
        if not self._state_copies:
            return None
        if getattr(self, "_copy_rec", None) is None:
            from .ops.shape import copy_words
            ctx = BuildContext(self, self.program)
            steps = [copy_words(ctx, self.buffers[u], self.buffers[n], self.program.tensors[n].device_words())
                     for u, n in self._state_copies]
            self._copy_rec = self.device.record(steps)
        return self._copy_rec

    def reset_state(self) -> None:
        """Every state tensor back to its initial value (Program.state_init)."""
        with self.lock:
            for name in self.program.state:
                self._write_state(name, self.program.state_init[name])

    def read_state(self, name: str) -> np.ndarray:
        """A state tensor's current value (downloaded from the device where it lives there)."""
        with self.lock:
            self._state_name(name)
            if name not in self.state_on_device:
                return np.array(self._state_host[name], copy=True)
            spec, buf = self.program.tensors[name], self.buffers[name]
            self.device.run([], download=[buf])
            return spec.from_device(buf.read(spec.device_words()))

    def write_state(self, name: str, value) -> None:
        with self.lock:
            self._write_state(name, value)

    def _write_state(self, name, value):
        spec = self.program.tensors[self._state_name(name)]
        value = _as_words(_as_numpy(value), spec, f"state {name!r}")
        if value.shape != spec.shape:
            raise ValueError(f"state {name!r} has shape {spec.shape}, got {value.shape}")
        if name not in self.state_on_device:
            self._state_host[name] = value.copy()
            return
        buf = self.buffers[name]
        buf.write(spec.to_device(value))
        self.device.run([], upload=[buf])

    def _state_name(self, name: str) -> str:
        if name not in self.program.state:
            known = ", ".join(self.program.state) or "none"
            raise KeyError(f"{name!r} is not a state tensor of this program (its state: {known})")
        return name

    @property
    def segments(self) -> list:
        """The segments of the most recently used build (the only one of a static program)."""
        return next(reversed(self._builds.values())).segments

    def _specialized(self, bindings: dict) -> Program:
        """The program at these symbol values, kept for the last max_shapes of them: specializing
        a 600-node decoder took ~6 ms, a tenth of its decode step on lavapipe, every call."""
        if not bindings:
            return self.program
        key = tuple(sorted(bindings.items()))
        program = self._bound.get(key)
        if program is None:
            program = self._bound[key] = self.program.specialize(bindings)
            while len(self._bound) > self.max_shapes:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return program

    def _build_for(self, bindings: dict, skip=frozenset()) -> _Build:
        """The build at these symbol values; skip: program outputs it does not download."""
        key = (tuple(sorted(bindings.items())), skip)
        build = self._builds.get(key)
        if build is not None:
            self._builds.move_to_end(key)
            return build
        program = self.program.specialize(bindings)
        if self.program.dynamic:
            rewrite_for_shapes(program, keep=self._kept)
            if _structure(program) != self._structure:
                raise ValueError(f"at {dict(bindings)} the program's views fold into other kernels than at its "
                                 "upper bounds, where its memory was planned; compile it with narrower bounds")
        for name, spec in program.tensors.items():     # a bound that is not the largest shape
            buf = self.buffers.get(name)
            if buf is not None and spec.device_words() > buf.size:
                raise ValueError(f"tensor {name!r} at {dict(bindings)} needs {spec.device_words()} words, more "
                                 f"than the {buf.size} its buffer was sized for at the upper bounds")
        ctx = BuildContext(self, program)
        segments, run = [], []
        for i, node in enumerate(program.nodes + [None]):
            if node is not None and i not in self.cpu_reasons:
                run.append(node)
                if not self.node_by_node:
                    continue
                node = None     # (node by node: this one is its segment)
            if run:
                segments.append(self._segment(ctx, program, run, skip))
                run = []
            if node is not None:
                segments.append(("cpu", node))
        if self._pending_uploads:   # constants go up once, now
            self.device.run([], upload=self._pending_uploads)
            self._pending_uploads = []
        build = self._builds[key] = _Build(program, segments)
        while len(self._builds) > self.max_shapes:
            self._builds.popitem(last=False)
        return build

    def _segment(self, ctx, program, nodes, skip=frozenset()):
        steps = []
        for node in nodes:
            if all(0 in program.tensors[t].shape for t in node.outputs):
                continue     # an empty output (Phi-3's pass-through half of a full rotary): nothing to compute
            ctx.building(node)
            try:
                with _at(node):
                    steps += get_op(node.op).build(ctx, node)
            except DeviceLimit as e:
                e.node = node.name
                raise
        produced = {t for n in nodes for t in n.outputs}
        consumed = {t for n in nodes for t in n.inputs}
        ups = [t for t in sorted(consumed - produced) if t in self.host_side and t not in program.constants]
        downs = [t for t in sorted(produced)
                 if (t in self.host_side or self.host_visible_all or self.node_by_node) and t not in skip]
        rec = self.device.record(steps, [self.buffers[t] for t in ups], [self.buffers[t] for t in downs])
        return ("vulkan", rec, ups, downs, nodes)

    def __call__(self, *inputs, keep_all: bool = False, outputs=None):
        """The program's outputs for these inputs; outputs (a list of output names): those alone,
        in that order, the others not brought back from the device (a decode step's next token
        without its logits)."""
        skip = frozenset()
        if outputs is not None:
            unknown = [o for o in outputs if o not in self.program.outputs]
            if unknown:
                raise KeyError(f"{unknown[0]!r} is not an output of the program ({', '.join(self.program.outputs)})")
            skip = frozenset(o for o in self.program.outputs if o not in outputs and o not in self._cpu_reads)
        bindings = self.program.bind([np.shape(_as_numpy(x)) for x in inputs]) if self.program.dynamic else {}
        program = self._specialized(bindings)
        env = _bind_inputs(program, inputs)
        with self.lock:
            env.update(self._state_host)        # (state a CPU node touches: passed in as an input)
            words = {name: program.tensors[name].to_device(value) for name, value in env.items()
                     if name in self.buffers}       # (an input only CPU nodes read has no buffer)
            out = self._call(self._build_for(bindings, skip), env, words, keep_all, outputs)
            if self._state_copies:
                self._state_copy_recording().run()
            return out

    def _call(self, build: _Build, env: dict, words: dict, keep_all: bool, outputs=None):
        program = build.program
        for name, value in words.items():
            self.buffers[name].write(value)
        host = dict(env)
        for seg, frees in zip(build.segments, build.frees):
            if seg[0] == "cpu":
                node = seg[1]
                consts = program.constants
                args = [host[t] if t in host else consts[t] for t in node.inputs]
                with _at(node):
                    result = get_op(node.op).reference(*args, **node.attrs)
                _store(host, node, result, program)
            else:
                self.run_segment(seg, program, env, host)
            if not keep_all:
                for t in frees:
                    if t not in self._host_updates:
                        host.pop(t, None)
        for name in self._state_host:
            self._state_host[name] = host[program.state[name]]
        if keep_all:
            return host
        if outputs is not None:
            picked = _outputs(program, host, list(outputs))
            return picked if isinstance(picked, tuple) else (picked,)
        return _outputs(program, host)

    def run_segment(self, seg, program: Program, env: dict, host: dict) -> None:
        """One recorded ("vulkan") segment of a call: what the CPU made since the last upload goes
        up (env: the call's inputs, written before), the recording runs, its downloads come down
        into host."""
        _, rec, ups, downs, _ = seg
        for t in ups:
            if t not in env:   # produced on the CPU since the last upload
                self.buffers[t].write(program.tensors[t].to_device(host[t]))
        rec.run()
        for t in downs:
            spec = program.tensors[t]
            host[t] = spec.from_device(self.buffers[t].read(spec.device_words()))




def _rewritten_at_upper_bounds(program: Program) -> Program:
    """A dynamic program at its upper bounds with the shape rewrites applied, as every other
    shape's build will be: with the nodes left there kept. Keeping them can fold less than the
    first pass did (a split whose one output was read through stays, so the next reader of it
    cannot be: ModernBERT's q, k, v), so this repeats until what is kept is what is left."""
    bindings = program.max_bindings()
    sized = rewrite_for_shapes(program.specialize(bindings))
    for _ in range(8):
        again = rewrite_for_shapes(program.specialize(bindings), keep=frozenset(n.name for n in sized.nodes))
        if _structure(again) == _structure(sized):
            break
        sized = again
    return sized


def _structure(program: Program) -> list:
    """What memory planning depends on: which node reads and writes which tensor, in order."""
    return [(n.name, tuple(n.inputs), tuple(n.outputs)) for n in program.nodes]
