"""Eval-mode programs with in-place ops on activations are read, not refused as training mode.

torch.export leaves ``relu_``, ``add_``, ``fill_``, ``masked_fill_`` in the graph of a
model written with ``nn.ReLU(inplace=True)`` or ``out += identity`` (most of
torchvision). The frontend functionalizes the program first; only programs that update
their buffers (batch-norm statistics in training mode) are refused. Checked against
PyTorch on torchvision-style blocks; tests/test_torchvision_torch_export.py runs the real
torchvision models.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import aot
import runtime_lite
from aot.errors import UnsupportedOpsError

TOLERANCE = 1e-4


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-12))


class InPlaceBottleneck(nn.Module):
    """torchvision's ResNet block as written there: inplace ReLU and ``out += identity``."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class InPlaceFills(nn.Module):
    """fill_, masked_fill_, mul_ and clamp_ on activations, and a buffer read but never written."""

    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.linspace(-1, 1, 8))

    def forward(self, x):
        y = x * 2
        y.masked_fill_(y > 1.5, -1.0)
        y.mul_(0.5).clamp_(min=-0.6)
        bias = torch.empty_like(x).fill_(0.25)
        bias[:, 0] = 3.0
        return y + bias + self.offset


class MutatesInput(nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x.relu()


def _check(model: nn.Module, example: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        expected = model(example.clone()).numpy()
    program = torch.export.export(model, (example.clone(),))
    actual = runtime_lite.load(aot.build(program).to_bytes()).run([example.numpy()])[0]
    assert actual.shape == expected.shape
    return relative_l2(actual, expected)


@pytest.mark.parametrize(
    "model, shape",
    [(InPlaceBottleneck(), (2, 8, 6, 6)), (InPlaceFills(), (3, 4, 8)), (MutatesInput(), (2, 5))],
    ids=["bottleneck", "fills", "mutated-input"],
)
def test_in_place_ops_on_activations_match_pytorch(model, shape):
    assert _check(model, torch.randn(*shape, generator=torch.Generator().manual_seed(0))) <= TOLERANCE


def test_buffer_updates_are_still_training_mode():
    model = InPlaceBottleneck().train()
    program = torch.export.export(model, (torch.randn(2, 8, 6, 6),))
    with pytest.raises(UnsupportedOpsError, match=r"bn1\.running_mean.*model\.eval\(\)") as info:
        aot.build(program)
    assert "\n" not in str(info.value)


class CountsCalls(nn.Module):
    """A user's own state: a buffer updated in forward, also in eval mode."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * 2


def test_user_state_updates_are_refused_naming_the_buffer():
    program = torch.export.export(CountsCalls().eval(), (torch.randn(2, 3),))
    with pytest.raises(UnsupportedOpsError, match="calls"):
        aot.build(program)
