"""vkq: int8 PyTorch models on any Vulkan device.

    import vkq
    ref_gm = vkq.quantize(model, example_inputs, calibration, scheme="static")  # PyTorch's reference
    prog = vkq.compile(model_or_converted, example_inputs, calibration=None, scheme="static", device=None)
    outputs = prog(*inputs)                 # on the device; numpy out
    outputs = prog.run_reference(*inputs)   # the same integer program, numpy references on the CPU
    prog.fallback_ops                       # (op, reason) that run on the CPU
    prog.save("model.vkq"); prog = vkq.load("model.vkq", device=None)

    lm = vkq.compile_lm(hf_causal_lm, tokenizer, max_context=512)   # text generation (vkq.lm)
    lm.generate("Once upon a time", max_new_tokens=32); lm.save("lm.vkq"); vkq.load_lm("lm.vkq")

    vkq.devices()                           # what the Vulkan loader sees
    words = vkq.pack(q_int8, "4W4C")        # Int8x4 packing; vkq.unpack(words, layout, shape)

Importing vkq does not import torch: loading and running a saved program needs numpy and kp only.
"""
from .device import devices, get_device, select as select_device
from .packing import pack, unpack
from .progfile import ProgramFileError
from .runtime import CompiledProgram, load
from .lm import LanguageModel, compile_lm, load_lm
from .shaders import ShaderCompileError

__all__ = ["quantize", "compile", "load", "CompiledProgram", "compile_lm", "load_lm", "LanguageModel", "devices", "get_device", "select_device",
           "pack", "unpack", "ShaderCompileError", "ProgramFileError"]


def _quiet_third_party_logs():
    """torchao announces CUDA-only extensions it cannot load and torch deprecations that are
    not ours; keep the user's terminal for vkq's own messages."""
    import logging
    import warnings
    for name in ("torchao", "torch.utils._pytree", "torch._export", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")


def quantize(model, example_inputs, calibration=None, scheme: str = "static", dynamic_shapes=None):
    """PT2E quantization with vkq's quantizer; returns the converted GraphModule (PyTorch's
    own fake-quant reference, runnable eagerly). dynamic_shapes: torch.export's."""
    _quiet_third_party_logs()
    from .api import quantize as _quantize
    return _quantize(model, example_inputs, calibration, scheme, dynamic_shapes=dynamic_shapes)


def compile(model_or_converted, example_inputs, calibration=None, scheme: str = "static",
            device=None, dynamic_shapes=None, progress: bool = True, group_size: int = 32,
            symmetric: bool = True) -> CompiledProgram:
    """A float nn.Module is quantized with vkq's quantizer first; an already converted PT2E
    GraphModule (any quantizer) is lowered as it is. Prints which ops fall back to the CPU.
    dynamic_shapes (torch.export's: a torch.export.Dim("batch", min=1, max=16) per dynamic
    input dimension) makes one program for every shape within the bounds. Inputs may nest
    tensors in lists / tuples / dicts or sit beside Python values: the program is called with
    the same structure (the Python values as compiled), or with its tensors alone, in order.
    progress: each stage (export, calibration, the lowering's passes) shown on stderr.
    scheme "int4" / "8da4w": int4 weights in groups of group_size along K (symmetric, or a zero
    point a group), float / per-row dynamic int8 activations (vkq/ops/linear_int4.py)."""
    _quiet_third_party_logs()
    from .api import argument_flattener
    from .api import compile as _compile
    program, fallback = _compile(model_or_converted, example_inputs, calibration, scheme,
                                 dynamic_shapes=dynamic_shapes, progress=progress, group_size=group_size,
                                 symmetric=symmetric)
    if fallback:
        print(f"vkq: {len(fallback)} op(s) run on the CPU:")
        for op, reason in fallback:
            print(f"  {op}: {reason}")
    return CompiledProgram(program, device, arguments=argument_flattener(example_inputs))
