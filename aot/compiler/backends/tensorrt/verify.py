"""Prove a recipe without a GPU: run it in onnxruntime beside the region's host plan.

The host plan is the same region run by runtime_lite's kernels (the reference
this project checks against onnxruntime everywhere else), so agreement within
the precision's tolerance shows the ONNX lowering is right: fp32 within 1e-4
relative L2, fp16 within 1e-2.

Which evaluator runs the recipe matters for fp16: onnxruntime's CPU provider
computes float16 ops it has no kernel for in float32 and removes the
Cast(fp32->fp16)->Cast(fp16->fp32) pairs that leaves, so activations are not
rounded as a GPU would. ``evaluator="reference"`` uses onnx's reference evaluator,
which computes in float16 for real (slow: for small recipes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from aot.testing import relative_l2
from runtime_lite.backends.options import resolve_options
from runtime_lite.backends.tensorrt import LOAD_OPTIONS, TensorRTModule

#: int8 recipes run with onnxruntime's graph optimizations off, Q/DQ as written: its fusion into
#: its own integer kernels (QLinearConv) rescales differently and, with the tiny scales of some
#: random-weight models, far off, which would test onnxruntime rather than the lowering. Even as
#: written, a float sum in another order can land a value on the other side of a rounding
#: boundary: one 8-bit step, which the next layers carry and multiply. On ResNet-50 (random
#: weights) the first quantized tensors agree exactly, the first flip appears in the third, and
#: the output differs by about 4% relative L2, as much as int8 differs from float; hence 0.1.
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "int8": 1e-1}


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


def _run(recipe: bytes, feeds: dict[str, np.ndarray], evaluator: str, literal: bool = False) -> list[np.ndarray]:
    if evaluator == "reference":
        import onnx
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(onnx.load_from_string(recipe)).run(None, feeds)
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    if literal:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(recipe, options, providers=["CPUExecutionProvider"]).run(None, feeds)


def verify_recipe(
    payloads: Mapping[str, Any],
    compile_specs: dict[str, Any],
    feeds: Mapping[str, np.ndarray] | None = None,
    evaluator: str = "onnxruntime",
) -> dict[str, Any]:
    """Run one TensorRT module's recipe (in ``evaluator``) and its host plan; report the worst error."""
    views = {k: memoryview(v) for k, v in payloads.items()}
    options = resolve_options("tensorrt", LOAD_OPTIONS, {"allow_engine_build": False, "onnxruntime_fallback": False})
    module = TensorRTModule(views, compile_specs, options)
    inputs = region_inputs(module, feeds)
    host = module.fallback.execute(inputs)
    precision = module.settings.precision
    feeds = {s.name: x for s, x in zip(module.inputs, inputs)}
    recipe = _run(bytes(views["recipe"]), feeds, evaluator, literal=precision == "int8")
    errors = [relative_l2(r, h) for r, h in zip(recipe, host)]
    worst = max(errors, default=0.0)
    return {"region": module.id, "precision": precision, "error": worst, "ok": worst <= TOLERANCE[precision]}
