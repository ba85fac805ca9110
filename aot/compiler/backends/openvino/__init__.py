"""The OpenVINO backend, compile side: the onnxruntime backend's recipes, for OpenVINO's CPU plugin.

A region for OpenVINO is written exactly as one for onnxruntime
(aot/compiler/backends/onnxruntime): the same ops are admitted, the same ONNX recipe
is written with its large weights as placeholders for the host plan's own blobs
(stored once), checked by the run side's reader before it is written, and the same
compile specs record says where each weight lies. Only the module's backend name
differs, so the run side (``runtime_lite.backends.openvino``) hands the recipe to
OpenVINO, falling back to the region's host plan where OpenVINO is not installed.
Threads, the performance hint and the precision are load options, chosen where the
bundle is deployed.
"""

from __future__ import annotations

import dataclasses

from aot.compiler.backends import CompilerBackend, ModuleArtifact, register_compiler_backend
from aot.compiler.backends.onnxruntime import onnxruntime_codegen, onnxruntime_patterns
from aot.compiler.partition import Region
from aot.compiler.pattern_registry import FusionPattern, register_patterns

PREFIX = "onnxruntime"


def openvino_patterns() -> list[FusionPattern]:
    """onnxruntime's patterns, each under ``openvino.``: OpenVINO's ONNX reader takes every op they admit."""
    return [dataclasses.replace(p, name="openvino." + p.name.split(".", 1)[1]) for p in onnxruntime_patterns()]


def openvino_codegen(region: Region, options: dict | None = None) -> ModuleArtifact:
    """onnxruntime's codegen (recipe, shared weights, host plan, the run side's check); its notes name OpenVINO."""
    artifact = onnxruntime_codegen(region, options)
    artifact.notes = [
        "openvino:" + note.removeprefix(f"{PREFIX}:") if note.startswith(f"{PREFIX}:") else note
        for note in artifact.notes
    ]
    return artifact


register_patterns(list(reversed(openvino_patterns())))
BACKEND = register_compiler_backend(
    CompilerBackend("openvino", openvino_codegen, bind_constants=True, min_region_size=1)
)

__all__ = ["BACKEND", "openvino_codegen", "openvino_patterns"]
