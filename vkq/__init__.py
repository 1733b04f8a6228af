"""vkq: int8 PyTorch models on any Vulkan device.

    import vkq
    vkq.devices()                       # what the Vulkan loader sees
    words = vkq.pack(q_int8, "4W4C")    # Int8x4 packing, and vkq.unpack(words, layout, shape)
"""
from .device import devices, get_device, select as select_device
from .packing import pack, unpack
from .shaders import ShaderCompileError

__all__ = ["devices", "get_device", "select_device", "pack", "unpack", "ShaderCompileError"]
