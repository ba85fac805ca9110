"""Import torchvision next to the CPU build of torch.

The registry's torchvision 0.28.0 is built against the CUDA torch: its C extension
does not load next to torch 2.13.0+cpu, and ``import torchvision`` then fails with
``operator torchvision::nms does not exist`` because the package registers fake
(meta) kernels for ``nms`` and ``qnms`` at import time. The classification models
use none of the C ops, so declaring those two schemas (with no kernels: calling them
still fails, loudly) is enough to import the package and build every model.

    from tests.torchvision_compat import import_torchvision
    torchvision = import_torchvision()          # None when torchvision is not installed
"""

from __future__ import annotations

import functools
from types import ModuleType

#: The schemas torchvision's import registers fake kernels for (torchvision/_meta_registrations.py).
MISSING_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


def _declare_missing_ops() -> None:
    import torch

    missing = [schema for schema in MISSING_SCHEMAS if not _exists(torch, schema.split("(")[0])]
    if not missing:
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in missing:
        library.define(schema)
    _declare_missing_ops.library = library  # keep the registrations alive with the module


def _exists(torch, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


@functools.cache
def import_torchvision() -> ModuleType | None:
    """torchvision, importable next to the CPU torch; None if it is not installed."""
    try:
        import torchvision
    except ImportError:
        return None
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
    else:
        return torchvision
    import sys

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the failed import left half-initialised modules behind
    _declare_missing_ops()
    import torchvision

    return torchvision
