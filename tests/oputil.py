"""Run one op on a device and on its numpy reference, for kernel tests."""
import numpy as np

from vkq.executor import VulkanExecutor, run_reference
from vkq.program import Node, Program, TensorSpec


def single_op_program(op, inputs, outputs, attrs=None, constants=None):
    """inputs: list of (name, TensorSpec) activations; constants: {name: (TensorSpec, array)}
    listed after the activations unless already named in `order`; outputs: list of (name, TensorSpec)."""
    constants = constants or {}
    tensors = {n: s for n, s in inputs}
    tensors.update({n: s for n, (s, _) in constants.items()})
    tensors.update({n: s for n, s in outputs})
    node = Node(op, [n for n, _ in inputs] + list(constants), [n for n, _ in outputs], dict(attrs or {}))
    prog = Program(tensors=tensors, nodes=[node], inputs=[n for n, _ in inputs],
                   outputs=[n for n, _ in outputs], constants={n: a for n, (_, a) in constants.items()})
    prog.validate()
    return prog


def run_both(device, program, *arrays):
    """(vulkan outputs, reference outputs), each a tuple."""
    got = VulkanExecutor(program, device)(*arrays)
    ref = run_reference(program, *arrays)
    as_tuple = lambda x: x if isinstance(x, tuple) else (x,)
    return as_tuple(got), as_tuple(ref)


def assert_same(got, ref):
    """Bit-exact for integer outputs (a NaN equals a NaN); reports where the first differences are."""
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, g.dtype, r.shape, r.dtype)
        floats = g.dtype.kind == "f"
        if not np.array_equal(g, r, equal_nan=floats):
            bad = np.argwhere((g != r) & ~(np.isnan(g) & np.isnan(r)) if floats else g != r)
            raise AssertionError(f"{len(bad)} of {g.size} elements differ; first at {bad[:5].tolist()}: "
                                 f"got {g[tuple(bad[0])]}, expected {r[tuple(bad[0])]}")


def assert_program_on_device(program, device, *arrays):
    """A lowered program on the device equals its reference bit for bit, every tensor."""
    got = VulkanExecutor(program, device)(*arrays, keep_all=True)
    ref = run_reference(program, *arrays, keep_all=True)
    for name in ref:
        if name in got and name not in program.constants:
            np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


def spec(shape, dtype="float32", layout=None, scale=None, zero_point=None):
    return TensorSpec(tuple(shape), dtype, layout, scale, zero_point)


_CLI_WITHOUT_TORCH = r"""
import builtins, sys
real_import = builtins.__import__
def no_torch(name, *a, **k):
    if name == "torch" or name.startswith("torch."):
        raise ImportError("torch is blocked in this test")
    return real_import(name, *a, **k)
builtins.__import__ = no_torch
sys.argv = ["vkq"] + sys.argv[1:]
from vkq.cli import main
code = main()
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch was imported"
sys.exit(code)
"""


def run_cli_without_torch(*args):
    """`vkq ARGS...` in a fresh interpreter where `import torch` fails (the runner's promise)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", _CLI_WITHOUT_TORCH, *map(str, args)], capture_output=True, text=True)


# -- PyTorch's float reference for int8 ops: quantized_decomposed dequantize / quantize ----------

def torch_dequantize(q, scale, zp, dtype=None):
    """int8 numpy -> torch float32 as PT2E dequantizes (float64: the exact value, for bounds)."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
    if dtype == torch.float64:
        return (torch.from_numpy(np.asarray(q, np.float64)) - zp) * scale
    return torch.ops.quantized_decomposed.dequantize_per_tensor(
        torch.from_numpy(np.asarray(q, np.int8)), scale, zp, -128, 127, torch.int8)


def torch_quantize(x, scale, zp):
    """torch float -> int8 numpy as PT2E quantizes (round half to even, clamp)."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401
    return torch.ops.quantized_decomposed.quantize_per_tensor(x, scale, zp, -128, 127, torch.int8).numpy()


def random_int8(rng, shape):
    """Random int8 with both extremes present."""
    q = rng.integers(-128, 128, shape).astype(np.int8)
    q.reshape(-1)[:2] = (-128, 127)[: q.size]
    return q


def run_exact(device, op, attrs, out_shape, *arrays, layout="4W4C"):
    """Run one op on the device; compare with the reference, and the raw output words with
    the packed reference (padding bytes must be 0)."""
    from vkq import packing
    prog = single_op_program(op, [(f"x{i}", spec(a.shape, "int8", layout)) for i, a in enumerate(arrays)],
                             [("y", spec(out_shape, "int8", layout))], attrs)
    ex = VulkanExecutor(prog, device)
    got = ex(*arrays)
    ref = run_reference(prog, *arrays)
    assert_same((got,), (ref,))
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, layout))
    assert len(np.unique(ref)) >= min(3, ref.size), "a degenerate case: (nearly) every output is the same"
    return ref
