"""torchvision classification models through torch.export, against PyTorch itself.

Random init (``weights=None``), batch 1, eval mode, with batch-norm statistics and
zero-initialised classifier heads (ViT's) randomised so every layer shows in the logits.
CI runs a representative subset at 64x64 (ViT built for that size); set
``AOT_TORCHVISION_ALL=1`` to run every builder in ``torchvision.models.list_models``
at its own size (224x224, 299x299 for Inception v3): a few minutes per large model.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

import aot
import runtime_lite
from tests.torch_models import randomize_batch_norm
from tests.torchvision_compat import import_torchvision

torchvision = import_torchvision()
pytestmark = pytest.mark.skipif(torchvision is None, reason="torchvision is not installed")

TOLERANCE = 1e-4
ALL = os.environ.get("AOT_TORCHVISION_ALL") == "1"
#: One of each family: residual, inverted residual + SE + hard-swish, compound scaling with SiLU,
#: depthwise 7x7 + LayerNorm over channels, patch transformer, grouped convs, channel shuffle,
#: shifted windows (padding, a mask built by slice assignment, V2's cosine attention).
SUBSET = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "vit_b_16", "regnet_x_400mf",
          "shufflenet_v2_x0_5", "swin_v2_t"]  # fmt: skip
NAMES = torchvision.models.list_models(module=torchvision.models) if torchvision and ALL else SUBSET


def build_model(name: str) -> tuple[nn.Module, torch.Tensor]:
    size = 299 if name == "inception_v3" else 224 if ALL else 64
    options = {"image_size": size} if name.startswith("vit") and not ALL else {}
    if name in ("googlenet", "inception_v3"):
        options["aux_logits"], options["init_weights"] = False, True
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.get_model(name, weights=None, **options).eval())
    for module in model.modules():  # ViT's head starts at zero: logits would be all zeros
        if isinstance(module, nn.Linear) and not module.weight.any():
            nn.init.normal_(module.weight, std=0.05)
    return model, torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", NAMES)
def test_classifier_matches_pytorch(name):
    model, x = build_model(name)
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.abs(expected).max() > 0  # a comparison against zeros would prove nothing
    module = runtime_lite.load(aot.build(torch.export.export(model, (x,))).to_bytes())
    actual = module.run([x.numpy()])[0]
    assert actual.shape == expected.shape
    error = float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))
    assert error <= TOLERANCE, f"{name}: rel. L2 {error:.2e}"
