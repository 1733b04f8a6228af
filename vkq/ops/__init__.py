"""Every vkq op, one module per family; importing this package registers them all."""
from . import io  # noqa: F401
