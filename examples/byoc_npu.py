"""Bring Your Own Codegen, step by step, on the virtual NPU (TVM's BYOC tutorial, computed for real).

    python examples/byoc_npu.py

1. import the backend: its patterns register themselves;
2. partition: fuse_ops_by_pattern groups matches into composites, merge_composite_functions
   turns adjacent composites into one region per external call;
3. codegen + package: the region becomes an NPU JSON graph inside the bundle;
4. execute: runtime_lite runs it, and we check the values (the tutorial could only check shapes).
"""

from __future__ import annotations

import sys

import numpy as np

import aot.compiler.backends.npu  # noqa: F401  step 1: registers the "npu.*" patterns
import runtime_lite
from aot.compiler import build
from aot.compiler.partition import fuse_ops_by_pattern, merge_composite_functions
from aot.compiler.pattern_registry import get_patterns_with_prefix
from aot.ir.graph import Graph
from aot.ir.types import TensorType


def conv_relu(weight: np.ndarray) -> Graph:
    """The tutorial's model: one convolution followed by a ReLU."""
    g = Graph("ConvReLU")
    data = g.add_input("data", TensorType((1, 3, 32, 32), "float32"))
    w = g.constant(weight, "weight")
    conv = g.op("conv2d", data, w, strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], name="conv")
    g.outputs = [g.op("relu", conv, name="out")]
    return g


def main() -> int:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    weight = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)

    patterns = get_patterns_with_prefix("npu")
    print("Registered patterns:", [p.name for p in patterns])

    # Step 2: partition by hand, as the tutorial does (aot.build(..., targets=["npu"]) does this for you).
    partitioned = fuse_ops_by_pattern(conv_relu(weight), patterns, bind_constants=False, annotate_codegen=True)
    partitioned = merge_composite_functions(partitioned)
    print("\nAfter partitioning for the NPU:\n" + str(partitioned))

    # Steps 3 and 4: codegen + bundle, then load and run it as a deployment would.
    result = build(conv_relu(weight), targets=["npu"])
    module = runtime_lite.load(result.to_bytes())
    profile = module.profile([data])
    (out,) = profile.outputs
    print("\nDispatch trace:\n" + str(profile))

    windows = np.lib.stride_tricks.sliding_window_view(data, (3, 3), axis=(2, 3))  # (1,3,30,30,3,3)
    reference = np.maximum(np.einsum("nchwij,ocij->nohw", windows, weight), 0)
    error = float(np.abs(out - reference).max())
    print(f"\noutput {out.shape}, max |npu - numpy reference| = {error:.2e}")
    if out.shape != (1, 16, 30, 30) or error > 1e-4:
        print("MISMATCH")
        return 1
    print("OK: the NPU computed the convolution for real")
    return 0


if __name__ == "__main__":
    sys.exit(main())
