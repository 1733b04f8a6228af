"""FX passes that turn a converted PT2E graph into vkq ops; the order is pipeline.PIPELINE."""
from .pipeline import PIPELINE, run_pipeline  # noqa: F401
