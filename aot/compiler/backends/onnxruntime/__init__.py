"""The onnxruntime backend, compile side: every op the recipe writer can lower, one recipe per region.

As ExecuTorch delegates CPU work to XNNPACK: ``--target onnxruntime`` puts the
regions onnxruntime can run (usually the whole model) into modules whose recipe
runs on onnxruntime's CPU provider where it is installed at deployment, and on
the region's host plan where it is not. Weights travel in the module's payloads
(bound, as for TensorRT), but once: the recipe's initializers point at the host
plan's blobs. The run side is ``runtime_lite.backends.onnxruntime``; its session
options (threads, graph optimization, memory arena, int8 kernels) are load options,
chosen where the bundle is deployed.

The one build option is the precision: ``--precision int8`` (with ``--calibration``)
writes QDQ recipes, int8 weights stored once, that onnxruntime fuses into its integer
kernels (QLinearConv, QGemm, QLinearMatMul) in onnxruntime's own QDQ scheme
(``ONNXRUNTIME_SCHEME``; docs/quantization.md). ``int8_scheme`` says how matrix products
quantize: ``dynamic`` (activation ranges at run time, as onnxruntime's ``quantize_dynamic``:
DynamicQuantizeMatMul, no calibration), ``weight-only`` (int8 weights, float activations),
``static`` (calibrated QDQ) or ``auto`` (dynamic for a transformer, static elsewhere).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aot.compiler.backends import CompilerBackend, register_compiler_backend
from aot.compiler.backends.onnxruntime.codegen import onnxruntime_codegen
from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
from aot.compiler.backends.onnxruntime.patterns import onnxruntime_patterns, register
from aot.compiler.quantize.insert import MATMUL_MODES, Int8Scheme, compute_op_reason
from aot.ir.graph import Node
from runtime_lite.backends.onnxruntime.spec import PRECISIONS
from runtime_lite.backends.options import Option, choice

OPTIONS = (
    Option(
        "precision", choice(*PRECISIONS), "fp32",
        "int8: QDQ recipes onnxruntime runs on its integer kernels where the CPU has VNNI (needs --calibration)",
        flag="--precision",
    ),
    Option("calibration", str, None, "the calibration table's digest (set by the build when it quantizes)"),
    Option(
        "int8_scheme", choice(*MATMUL_MODES), "auto",
        "int8 matmuls: dynamic (ranges at run time, no calibration), weight-only (int8 weights, float "
        "activations), static (calibrated QDQ), auto (dynamic for transformers, static elsewhere)",
    ),
)  # fmt: skip

#: onnxruntime's QDQ fusions take a ReLU-bounded output as u8 from 0 (the ReLU folds into the kernel's clamp)
#: and a bias as int32 at x_scale * w_scale; with a float bias or a ReLU before a symmetric quantize they
#: leave the convolution in float.
ONNXRUNTIME_SCHEME = Int8Scheme(unsigned_relu=True, int32_bias=True)


def int8_scheme(options: Any) -> Int8Scheme:
    """The scheme for these build options (``int8_scheme`` picks how matrix products quantize)."""
    matmuls = options.get("int8_scheme", "auto") if isinstance(options, dict) else "auto"
    return dataclasses.replace(ONNXRUNTIME_SCHEME, matmuls=matmuls)


def int8_reason(node: Node) -> str | None:
    """Why onnxruntime keeps ``node`` in float when quantizing, or None when its QDQ fusions take it."""
    return compute_op_reason(node, "onnxruntime")


register()
BACKEND = register_compiler_backend(
    CompilerBackend(
        "onnxruntime",
        onnxruntime_codegen,
        bind_constants=True,
        min_region_size=1,
        options=OPTIONS,
        int8=int8_reason,
        int8_scheme=int8_scheme,
    )
)

__all__ = ["BACKEND", "ONNXRUNTIME_EXPORTS", "ONNXRUNTIME_SCHEME", "onnxruntime_codegen", "onnxruntime_patterns"]
