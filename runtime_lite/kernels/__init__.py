"""Host kernels: one numpy function per canonical op.

The registry is the single place op semantics live. The runtime calls these to
execute host plans, and the compiler calls the same functions to fold constants,
so a constant-folded value and a run-time value cannot disagree.

A kernel takes its input arrays positionally and its attributes as keywords.
Attributes have no defaults here: those live only in the compiler's op registry
(``aot/ir/ops.py``), which writes every attribute into a bundle, so a bundle that
leaves one out is refused when it loads (tests/test_op_facts.py keeps the two agreeing).
Two flags let the compiler's memory planner reason about buffers:

* ``inplace``: operand indices whose buffer may be passed as ``out=`` when that
  operand dies at this op and has the output's shape and dtype.
* ``view``: the output may share memory with input 0 (reshape, slice, ...), so
  writing into it in place could clobber a value that is still live.

``check`` validates a kernel's attributes once, when a plan is loaded (bundles are
untrusted): it raises ValueError saying which attribute is wrong.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The kernel modules; importing them fills the registry.
MODULES = (
    "activation", "conv", "elementwise", "indexing", "integer", "integer_mobile", "linalg", "logic", "ml",
    "normalization", "pool", "quantize", "recurrent", "reduce", "resize", "sampling", "shape", "transcendental",
)  # fmt: skip

#: The package's API, read from the registry once every kernel module is imported.
_API = ("KERNELS", "Kernel", "get_kernel", "kernel")


def __getattr__(name: str) -> Any:
    """``KERNELS`` and the rest of the API import every kernel module on first use, not with the package:
    a bundle that runs no host kernel (one onnxruntime region) never pays their import at cold start, while
    ``from runtime_lite.kernels.pool import ...`` imports that module alone."""
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    from runtime_lite.kernels import registry

    value = getattr(registry, name)
    globals()[name] = value
    return value
