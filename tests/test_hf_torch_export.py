"""Hugging Face transformers through torch.export, against PyTorch itself.

Nine architectures (BERT, RoBERTa, DistilBERT, GPT-2, a LLaMA decoder with rotary
embeddings, RMSNorm and grouped-query attention, the T5 encoder with relative position
buckets, the Whisper encoder, ViT, the CLIP vision tower), random-init tiny configs from
tests/hf_models.py. Each is exported once with a symbolic batch (and sequence length for
text models), built for the host and for the virtual NPU, and one bundle of each runs
several batch sizes and sequence lengths (8..64), with int64 token ids and a padded
attention mask as inputs. The NPU needs static shapes, so a third bundle fixes the
example's shapes and must put regions on it. Every output must be within relative L2
1e-4 of PyTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import aot
import runtime_lite
from tests import hf_models

pytest.importorskip("transformers", reason="transformers is not installed")

TOLERANCE = 1e-4
#: (batch, sequence length): one bundle runs them all without rebuilding.
SIZES = [(1, 8), (4, 64), (3, 21)]


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-12))


def check(name: str, module: runtime_lite.Module, model, inputs: dict[str, torch.Tensor], what: str) -> None:
    expected = hf_models.reference_outputs(model, inputs)
    actual = module.run([x.numpy() for x in inputs.values()])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == tuple(e.shape) and a.dtype == e.numpy().dtype
        error = relative_l2(a, e.numpy())
        assert error <= TOLERANCE, f"{name} {what}: rel. L2 {error:.2e}"


@pytest.mark.parametrize("name", list(hf_models.FACTORIES))
def test_model_matches_pytorch_at_every_size(name):
    model, example, dynamic = hf_models.FACTORIES[name]()
    program = torch.export.export(model, (), example, dynamic_shapes=dynamic, strict=False)
    for targets in (["host"], ["npu"]):  # symbolic shapes: the NPU leaves everything to the host
        module = runtime_lite.load(aot.build(program, targets=targets).to_bytes())
        assert [i.name for i in module.inputs] == list(example)
        assert isinstance(module.inputs[0].shape[0], str), module.inputs[0]  # the batch stays symbolic
        if "input_ids" in example:
            assert isinstance(module.inputs[0].shape[1], str), module.inputs[0]  # and the sequence length
        for batch, seq in SIZES if targets == ["host"] else SIZES[-1:]:  # the same host code: one size
            inputs = hf_models.resized(example, dynamic, batch, seq)
            check(name, module, model, inputs, f"{targets[0]} batch {batch} seq {seq}")
    fixed = aot.build(program, targets=["npu"], input_shapes={k: tuple(v.shape) for k, v in example.items()})
    assert fixed.regions.get("npu", 0) > 0, fixed.regions  # with static shapes the NPU takes part
    check(name, runtime_lite.load(fixed.to_bytes()), model, example, "npu, static shapes")
