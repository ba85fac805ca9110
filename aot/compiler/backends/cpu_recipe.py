"""Backends that run the onnxruntime backend's recipes on another CPU engine: OpenVINO, or whichever is faster.

The onnxruntime backend's recipe (aot/compiler/backends/onnxruntime) is plain ONNX whose
weights are the host plan's own blobs, and its compile specs say nothing engine-specific.
So a backend for another CPU engine needs nothing of its own at build time: the same
patterns (registered again under its name), the same codegen (its notes relabelled). Only
the module's backend name tells the run side which engine, or which choice, runs it.
"""

from __future__ import annotations

import dataclasses

from aot.compiler.backends import CompilerBackend, ModuleArtifact, register_compiler_backend
from aot.compiler.backends.onnxruntime import BACKEND as ONNXRUNTIME
from aot.compiler.backends.onnxruntime import onnxruntime_codegen, onnxruntime_patterns
from aot.compiler.partition import Region
from aot.compiler.pattern_registry import FusionPattern, register_patterns
from aot.compiler.quantize.insert import compute_op_reason
from aot.ir import contrib

#: onnxruntime's own patterns another CPU engine does not take: its contrib ops (aot/ir/contrib.py), which
#: only onnxruntime's kernels compute.
ONNXRUNTIME_ONLY = frozenset({f"onnxruntime.{contrib.OP}"})


def recipe_patterns(name: str, contrib: bool = False) -> list[FusionPattern]:
    """onnxruntime's patterns, each under ``<name>.`` (its contrib ops left out unless ``contrib``)."""
    return [
        dataclasses.replace(p, name=f"{name}." + p.name.split(".", 1)[1])
        for p in onnxruntime_patterns()
        if contrib or p.name not in ONNXRUNTIME_ONLY
    ]


def register_recipe_backend(name: str, contrib: bool = False) -> CompilerBackend:
    """Register ``name`` as a target whose modules carry onnxruntime's recipes. ``contrib``: its regions may hold
    onnxruntime's contrib ops too (``auto``, whose run side then places such a region on onnxruntime only)."""

    def codegen(region: Region, options: dict | None = None) -> ModuleArtifact:
        artifact = onnxruntime_codegen(region, options)
        artifact.notes = [
            f"{name}:" + note.removeprefix("onnxruntime:") if note.startswith("onnxruntime:") else note
            for note in artifact.notes
        ]
        return artifact

    def int8_reason(node) -> str | None:
        return compute_op_reason(node, name)

    codegen.__name__ = codegen.__qualname__ = f"{name}_codegen"
    register_patterns(list(reversed(recipe_patterns(name, contrib))))
    options = tuple(
        dataclasses.replace(o, help=f"int8: onnxruntime's QDQ recipes, which {name} runs on int8 kernels where the CPU "
                                    "has VNNI (needs --calibration)")
        if o.name == "precision" else o
        for o in ONNXRUNTIME.options
    )  # fmt: skip
    return register_compiler_backend(
        CompilerBackend(
            name, codegen, bind_constants=True, min_region_size=1, options=options, int8=int8_reason,
            int8_scheme=ONNXRUNTIME.int8_scheme,
        )
    )  # fmt: skip


__all__ = ["recipe_patterns", "register_recipe_backend"]
