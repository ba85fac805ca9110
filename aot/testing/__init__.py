"""Helpers for tests and benchmarks (like numpy.testing): model-zoo loading, error metrics."""

from aot.testing.metrics import relative_l2
from aot.testing.zoo import ZOO_MODELS, load_zoo_model, zoo_model_path

__all__ = ["ZOO_MODELS", "load_zoo_model", "relative_l2", "zoo_model_path"]
