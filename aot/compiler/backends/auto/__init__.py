"""The ``auto`` target, compile side: one recipe for every CPU engine, the engine chosen where it runs.

``--target auto`` writes the onnxruntime backend's recipe (aot/compiler/backends/cpu_recipe.py),
which onnxruntime and OpenVINO both read, into modules of the ``auto`` backend. The run side
(``runtime_lite.backends.auto``) times each installed engine on each region at the first
load on a host, keeps the fastest and caches the verdict; ``auto.engine=...`` pins one.

Unlike ``--target openvino``, its regions may hold onnxruntime's contrib ops (aot/ir/contrib.py:
``com.microsoft.DynamicQuantizeLSTM`` from ``quantize_dynamic``): auto includes onnxruntime, and
its run side places such a region on onnxruntime only, never timing OpenVINO on it.
"""

from aot.compiler.backends.cpu_recipe import register_recipe_backend

BACKEND = register_recipe_backend("auto", contrib=True)

__all__ = ["BACKEND"]
