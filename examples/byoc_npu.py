"""Bring Your Own Codegen, step by step, on the virtual NPU (TVM's BYOC tutorial, computed for real).

    python examples/byoc_npu.py

1. import the backend: its patterns register themselves;
2. partition: fuse_ops_by_pattern groups matches into composites, merge_composite_functions
   turns adjacent composites into one region per external call;
3. codegen + package: the region becomes an NPU JSON graph inside the bundle;
4. execute: runtime_lite runs it, and we check the values (the tutorial could only check shapes);
5. a mobile network (MobileNetV3's blocks: hard-swish, squeeze-excite with global average
   pooling and hard-sigmoid, a flatten and a classifier) partitions into one region, where
   TVM's example NPU leaves every hard-swish and pooling on the host; the build summary's
   lines say how many host<->NPU transitions remain and what the cost model says they cost.
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


def mobile_block_net(rng: np.random.Generator, blocks: int = 3) -> Graph:
    """MobileNetV3-small's building blocks at 32x32: expand, depthwise, squeeze-excite, project, residual."""
    g = Graph("MobileBlocks")

    def w(*shape):
        return g.constant((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32))

    conv = dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
    x = g.op("hard_swish", g.op("conv2d", g.add_input("image", TensorType((1, 3, 32, 32), "float32")), w(16, 3, 3, 3),
                                strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]))  # fmt: skip
    for _ in range(blocks):
        h = g.op("hard_swish", g.op("conv2d", x, w(48, 16, 1, 1), **conv))
        h = g.op("hard_swish", g.op("conv2d", h, w(48, 1, 3, 3), groups=48, strides=[1, 1], pads=[1, 1, 1, 1],
                                    dilations=[1, 1]))  # fmt: skip
        squeezed = g.op(
            "relu", g.op("conv2d", g.op("reduce_mean", h, axes=[2, 3], keepdims=1), w(12, 48, 1, 1), **conv)
        )
        gate = g.op("hard_sigmoid", g.op("conv2d", squeezed, w(48, 12, 1, 1), **conv), alpha=1 / 6, beta=0.5)
        x = g.op("add", g.op("conv2d", g.op("multiply", h, gate), w(16, 48, 1, 1), **conv), x)
    pooled = g.op("reshape", g.op("reduce_mean", x, axes=[2, 3], keepdims=1), shape=[1, 16])
    g.outputs = [g.op("dense", g.op("hard_swish", g.op("dense", pooled, w(32, 16))), w(10, 32), name="logits")]
    return g


def mobile_network(rng: np.random.Generator) -> int:
    """Step 5: a whole mobile network on the NPU, bit-exact with the host plan in float."""
    print("\n-- a mobile network --")
    seed = int(rng.integers(1 << 31))
    result = build(mobile_block_net(np.random.default_rng(seed)), targets=["npu"], log=None)
    host = build(mobile_block_net(np.random.default_rng(seed)), log=None)
    print(f"regions: {len(result.partitioned.regions)} ({result.regions})")
    for line in result.reports["npu"]:
        print("  npu:", line)
    image = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    module = runtime_lite.load(result.to_bytes())
    engines = sorted({e["engine"] for e in module.profile([image]).dispatches})
    print("engines used:", ", ".join(engines))
    got = module.run([image])[0]
    want = runtime_lite.load(host.to_bytes()).run([image])[0]
    if len(module.modules) != 1 or not np.array_equal(got, want):
        print("MISMATCH: expected one NPU region, bit-exact with the host plan")
        return 1
    print("OK: one NPU region, logits bit-exact with the host plan")
    return 0


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
    return mobile_network(rng)


if __name__ == "__main__":
    sys.exit(main())
