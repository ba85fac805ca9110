"""Modern models (torchvision CNNs and transformers, Hugging Face BERT) as ONNX files, cached.

    python benchmarks/modern_models.py vit_b_16 bert_base     # export (or reuse) into the cache

Each model is built with random weights (no hub downloads), batch 1, and written with
``torch.onnx.export(..., dynamo=True)``; the legacy exporter is the fallback when the
dynamo exporter fails for a model. Files are cached under ``$MODERN_ONNX_CACHE``
(default ``/tmp/aot-modern-onnx``) because exporting ViT-B/16 or BERT-base takes a
minute on two cores.

torchvision 0.28's wheel is built against the CUDA torch: next to the CPU torch its C
ops fail to register and ``import torchvision`` raises ``operator torchvision::nms does
not exist``. The classification models use none of those ops, so their schemas are
declared here (never implemented) before the import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from aot_torchvision_guard import import_torchvision

CACHE = Path(os.environ.get("MODERN_ONNX_CACHE", "/tmp/aot-modern-onnx"))


def _torchvision_model(name: str) -> Callable[[], tuple]:
    def build():
        import torch

        torch.manual_seed(0)
        model = getattr(import_torchvision().models, name)(weights=None).eval()
        if name.startswith("vit_"):  # torchvision zero-initialises ViT's head: every output would be 0
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        return model, (torch.randn(1, 3, 224, 224),), ["x"]

    return build


def _bert_base(sequence: int = 128) -> tuple:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, sequence))
    return model, (ids,), ["input_ids"]


#: name -> builder returning (eval-mode torch module, example inputs, input names).
MODELS: dict[str, Callable[[], tuple]] = {
    "resnet50": _torchvision_model("resnet50"),
    "squeezenet1_1": _torchvision_model("squeezenet1_1"),
    "vit_b_16": _torchvision_model("vit_b_16"),
    "mobilenet_v3_small": _torchvision_model("mobilenet_v3_small"),
    "efficientnet_b0": _torchvision_model("efficientnet_b0"),
    "convnext_tiny": _torchvision_model("convnext_tiny"),
    "bert_base": _bert_base,
}


def onnx_path(name: str) -> Path:
    """The cached ONNX file of model ``name``, exported on first use."""
    path = CACHE / f"{name}.onnx"
    if path.exists():
        return path
    import torch

    CACHE.mkdir(parents=True, exist_ok=True)
    model, inputs, names = MODELS[name]()
    partial = CACHE / f"{name}.partial.onnx"
    with torch.no_grad():
        try:
            torch.onnx.export(model, inputs, str(partial), dynamo=True, input_names=names, external_data=True)
        except Exception as error:  # the dynamo exporter fails on some models: fall back to the legacy one
            print(f"{name}: dynamo export failed ({type(error).__name__}: {error}); using the legacy exporter")
            torch.onnx.export(model, inputs, str(partial), dynamo=False, input_names=names, opset_version=17)
    _rename_with_data(partial, path)
    return path


def _rename_with_data(partial: Path, path: Path) -> None:
    """Move an exported model (and its external data file, relinked) to its final name."""
    import onnx

    model = onnx.load(str(partial))
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
    partial.unlink()
    data = partial.with_name(partial.name + ".data")
    if data.exists():
        data.unlink()


if __name__ == "__main__":
    for model_name in sys.argv[1:] or list(MODELS):
        print(model_name, onnx_path(model_name), flush=True)
