"""Makes the package index's torchvision importable beside the CPU build of torch.

torchvision's wheels on the plain package index are built against the CUDA torch. Beside
torch's CPU build (what the README installs on machines without a GPU) their C extension
cannot load, and ``import torchvision`` then dies with ``operator torchvision::nms does
not exist``: torchvision registers fake kernels for ``nms`` and ``qnms`` at import time
without checking that its extension loaded, as it does for every other op. The right fix
is the CPU torchvision from PyTorch's CPU index (the README's install line); where only
the index's CUDA wheel can be had (a mirror of the package index alone), this guard lets
the import finish: it declares those two schemas, without kernels, and imports again.
Models, transforms and datasets then work; calling one of torchvision's C ops
(``nms``, ``roi_align``, ...) still fails loudly, as it would have without the guard.

aot's wheel installs ``aot-torchvision-guard.pth``, which imports this module at
interpreter start. Importing it costs one entry on ``sys.meta_path`` and no import of
torch; it acts only when ``torchvision`` is imported, only on that exact failure, and
only once. ``AOT_TORCHVISION_GUARD=0`` turns it off.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType

#: The schemas torchvision's import registers fake kernels for (torchvision/_meta_registrations.py).
MISSING_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_libraries: list = []  # the registrations live as long as their Library objects


def is_missing_op_error(error: BaseException) -> bool:
    """Whether ``error`` is torchvision's import failing on an op its unloaded extension did not define."""
    return isinstance(error, RuntimeError) and "operator torchvision::" in str(error)


def declare_missing_ops() -> None:
    """Define the schemas torchvision's import needs, with no kernels, where torch does not know them."""
    import torch

    missing = [schema for schema in MISSING_SCHEMAS if not _exists(torch, schema.split("(")[0])]
    if missing:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in missing:
            library.define(schema)
        _libraries.append(library)


def _exists(torch: ModuleType, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _forget_submodules() -> None:
    """Drop the half-initialised torchvision submodules a failed import left behind."""
    for name in [m for m in sys.modules if m.startswith("torchvision.")]:
        del sys.modules[name]


class _GuardedLoader(importlib.abc.Loader):
    """torchvision's own loader; on the missing-op failure, declare the ops and execute the package again."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def __getattr__(self, name: str):  # get_resource_reader, is_package, ...: the wrapped loader's
        return getattr(self._loader, name)

    def create_module(self, spec):  # noqa: ANN001 - importlib's protocol
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        except RuntimeError as error:
            if not is_missing_op_error(error):
                raise
            _forget_submodules()
            declare_missing_ops()
            self._loader.exec_module(module)


class _TorchvisionFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the first ``torchvision`` import, then steps aside."""

    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib's protocol
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _GuardedLoader(spec.loader)
        return spec


def install() -> None:
    """Put the guard on ``sys.meta_path`` (once), unless ``AOT_TORCHVISION_GUARD=0``."""
    if os.environ.get("AOT_TORCHVISION_GUARD", "1") == "0" or "torchvision" in sys.modules:
        return
    if not any(isinstance(finder, _TorchvisionFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionFinder())


def import_torchvision() -> ModuleType | None:
    """torchvision, importable next to the CPU torch whether or not the guard was installed at start; None if
    torchvision is not installed."""
    install()
    try:
        import torchvision
    except ImportError:
        return None
    return torchvision
