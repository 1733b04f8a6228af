"""A compiled program as users hold it: call it on the device, run it on the CPU
references, save it, load it. Loading and running need numpy and kp, not torch."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from .executor import VulkanExecutor, run_reference
from .program import Program
from .progfile import ProgramFileError, load_program, save_program


class CompiledProgram:
    """prog(*inputs) on the device; prog.run_reference(*inputs) on the CPU; prog.verify(*inputs)
    both, node by node; prog.save(path).

    A program with state (buffers the model writes in place: a KV cache) keeps it between
    calls, on the device for prog(...) and separately for prog.run_reference(...), both from
    the program's initial values: prog.reset() starts both again; prog.read_state(name) /
    prog.write_state(name, value) (reference=True: the reference's) for tests and tools."""

    def __init__(self, program: Program, device=None, arguments=None):
        self.program = program
        self._arguments = arguments     # (vkq.compile's: a call's nested inputs -> the program's tensors)
        self._device_choice = device
        self._executor = None
        self._build_lock = threading.Lock()
        self._reference_state = {n: v.copy() for n, v in program.state_init.items()}

    @property
    def executor(self) -> VulkanExecutor:
        """Built on first use: buffers, packed weights, recorded sequences (once, also when
        several threads make the first call together)."""
        if self._executor is None:
            with self._build_lock:
                if self._executor is None:
                    self._executor = VulkanExecutor(self.program, self._device_choice)
        return self._executor

    @property
    def device(self):
        return self.executor.device

    @property
    def fallback_ops(self) -> list:
        """(op, reason) for every node that runs on the CPU: the program's, and once the executor
        is built, those its device cannot run (a limit such as llvmpipe's loop budget)."""
        extra = self._executor.device_fallback if self._executor is not None else []
        return list(self.program.fallback) + list(extra)

    @property
    def memory(self) -> dict:
        """Device memory plan: arena bytes shared by intermediates vs the naive sum."""
        return self.executor.memory

    def __call__(self, *inputs):
        return self.executor(*self._tensors(inputs))

    def run_reference(self, *inputs):
        return run_reference(self.program, *self._tensors(inputs), state=self._reference_state)

    # -- state ---------------------------------------------------------------------------------
    @property
    def state_names(self) -> list:
        return list(self.program.state)

    def reset(self) -> None:
        """The state back to its initial values, on the device and in the reference."""
        self._reference_state = {n: v.copy() for n, v in self.program.state_init.items()}
        if self._executor is not None:
            self._executor.reset_state()

    def read_state(self, name: str, reference: bool = False):
        if reference:
            self._state_name(name)
            return self._reference_state[name].copy()
        return self.executor.read_state(name)

    def write_state(self, name: str, value, reference: bool = False) -> None:
        if reference:
            spec = self.program.tensors[self._state_name(name)]
            value = np.asarray(value)
            if value.shape != spec.shape:
                raise ValueError(f"state {name!r} has shape {spec.shape}, got {value.shape}")
            self._reference_state[name] = value.astype(spec.numpy_dtype)
        else:
            self.executor.write_state(name, value)

    def _state_name(self, name: str) -> str:
        if name not in self.program.state:
            raise KeyError(f"{name!r} is not a state tensor of this program (its state: "
                           f"{', '.join(self.program.state) or 'none'})")
        return name

    def verify(self, *inputs):
        """Run on the device and on the references node by node, streaming (vkq.verify): a
        VerifyResult saying identical, or the first node whose bits differ, its op, shader
        variants and device, and by how much."""
        from .verify import verify
        return verify(self.program, *self._tensors(inputs), device=self._device_choice)

    def _tensors(self, inputs):
        return inputs if self._arguments is None else self._arguments(inputs)

    def save(self, path) -> Path:
        return save_program(self.program, path)

    def __repr__(self):
        from .registry import cpu_reason
        on_cpu = sum(1 for n in self.program.nodes if cpu_reason(n, self.program.tensors) is not None)
        dims = f"; dynamic: {self.program.describe_dims()}" if self.program.dynamic else ""
        return f"CompiledProgram({len(self.program.nodes)} nodes, {on_cpu} on the CPU{dims})"


def load(path, device=None) -> CompiledProgram:
    """Load a .vkq file (fully checked; ProgramFileError if malformed) for `device`."""
    program = load_program(path)
    _check_runtime_needs(program, path)
    return CompiledProgram(program, device)


def _check_runtime_needs(program: Program, path) -> None:
    """A program whose CPU fallback needs torch says so now, not midway through a run."""
    if any(n.op == "torch_op" for n in program.nodes):
        try:
            import torch  # noqa: F401
        except ImportError:
            ops = sorted({n.attrs.get("target", "?") for n in program.nodes if n.op == "torch_op"})
            raise ProgramFileError(f"{path}: this program runs {', '.join(ops)} through torch on the CPU, "
                                   "and torch cannot be imported here") from None
