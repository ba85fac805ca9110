"""Prove a recipe without a GPU: run it in onnxruntime beside the region's host plan.

The host plan is the same region run by runtime_lite's kernels (the reference
this project checks against onnxruntime everywhere else), so agreement within
the precision's tolerance shows the ONNX lowering is right: fp32 within 1e-4
relative L2, fp16 within 1e-2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from aot.testing import relative_l2
from runtime_lite.backends import LoadOptions
from runtime_lite.backends.tensorrt import TensorRTModule

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def region_inputs(module: TensorRTModule, feeds: Mapping[str, np.ndarray] | None = None, seed: int = 0):
    """Inputs for one region: the caller's arrays where names match, else seeded random values."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in module.inputs:
        if feeds and spec.name in feeds:
            arrays.append(np.asarray(feeds[spec.name]))
            continue
        shape = [d if isinstance(d, int) else 2 for d in spec.shape]
        arrays.append(rng.standard_normal(shape).astype(spec.dtype))
    return arrays


def verify_recipe(
    payloads: Mapping[str, Any], compile_specs: dict[str, Any], feeds: Mapping[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """Run one TensorRT module's recipe in onnxruntime and its host plan; report the worst error."""
    import onnxruntime

    views = {k: memoryview(v) for k, v in payloads.items()}
    module = TensorRTModule(views, compile_specs, LoadOptions(allow_engine_build=False))
    inputs = region_inputs(module, feeds)
    host = module.fallback.execute(inputs)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(bytes(views["recipe"]), options, providers=["CPUExecutionProvider"])
    recipe = session.run(None, {s.name: x for s, x in zip(module.inputs, inputs)})
    errors = [relative_l2(r, h) for r, h in zip(recipe, host)]
    precision = module.settings.precision
    worst = max(errors, default=0.0)
    return {"region": module.id, "precision": precision, "error": worst, "ok": worst <= TOLERANCE[precision]}
