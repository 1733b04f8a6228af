"""vkq: int8 PyTorch models on any Vulkan device."""
