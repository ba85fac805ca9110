"""The BYOC tutorial's TensorRT section: partition, print, build, run, compare; then fp16.

    python examples/tensorrt_conv_relu.py [--cache-dir DIR]

Runs anywhere. With tensorrt, cuda-python and a CUDA GPU, aot builds engines into
the bundle and the region runs on the GPU. Without them the bundle carries the
recipe alone; the example proves the recipe in onnxruntime (if installed) and
runs the region on the host from the same bundle. Either way it compares with
a plain numpy reference, fp32 within 1e-4 and fp16 within 1e-2.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile

import numpy as np

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.compiler.partition import partition
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings


def conv_relu(weight: np.ndarray) -> Graph:
    """One convolution followed by a ReLU; TensorRT bakes the weight into its engine."""
    g = Graph("ConvReLU")
    data = g.add_input("data", TensorType((1, 3, 32, 32), "float32"))
    conv = g.op("conv2d", data, g.constant(weight, "weight"), strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
    g.outputs = [g.op("relu", conv, name="out")]
    return g


def reference(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(data, (3, 3), axis=(2, 3))
    return np.maximum(np.einsum("nchwij,ocij->nohw", windows, weight), 0)


def verify_in_onnxruntime(result) -> str:
    from aot.compiler.backends.tensorrt.verify import verify_recipe

    lines = []
    for record in result.header["modules"]:
        payloads = {k: result.blobs.payloads[i] for k, i in record["payloads"].items()}
        report = verify_recipe(payloads, record["compile_specs"])
        lines.append(f"recipe of {report['region']} in onnxruntime vs host: relative L2 {report['error']:.1e}")
    return "; ".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-dir", default=None, help="engine cache (default: a temporary directory)")
    args = parser.parse_args()
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="aot-engines-")
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    weight = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    expected = reference(data, weight)

    # Partition in one call, as partition_for_tensorrt does. Two ops are fewer than the
    # default min_region_size of 5 (a tiny engine does not pay for its copies), so ask for 1.
    print("After partitioning for TensorRT:")
    print(partition(conv_relu(weight), ["tensorrt"], min_region_size=1))

    # onnxruntime is optional here (the example runs anywhere), and verify_recipe imports it only once it
    # runs a recipe: look for it first, and say once that the recipe goes unchecked without it.
    has_onnxruntime = importlib.util.find_spec("onnxruntime") is not None
    if not has_onnxruntime:
        print("note: onnxruntime is not installed, so the recipes are not run in it (pip install onnxruntime)")
    status = 0
    for precision, tolerance in (("fp32", 1e-4), ("fp16", 1e-2)):
        options = TensorRTOptions(BuildSettings(precision=precision), cache=EngineCache(cache_dir))
        result = build(conv_relu(weight), targets=["tensorrt"], min_region_size=1,
                       backend_options={"tensorrt": options})  # fmt: skip
        for note in result.notes:
            print(f"note: {note}")
        if has_onnxruntime:
            print(verify_in_onnxruntime(result))
        module = runtime_lite.load(result.to_bytes(), backend_options={"tensorrt": {"cache_dir": cache_dir}})
        print(f"[{precision}] region runs {module.modules[0]['placement']}")
        (out,) = module.run({"data": data})
        error = float(np.linalg.norm(out - expected) / np.linalg.norm(expected))
        verdict = "OK" if out.shape == (1, 16, 30, 30) and error <= tolerance else "MISMATCH"
        print(
            f"[{precision}] output {out.shape}, relative L2 vs numpy {error:.1e} (tolerance {tolerance:g}): {verdict}"
        )
        status |= verdict != "OK"
    return status


if __name__ == "__main__":
    sys.exit(main())
