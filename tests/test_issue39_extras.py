"""What the models of issue 39 found besides run-time shapes: an empty ScatterND (a shifted-window
attention mask), instance norm without running statistics on the torch.export route."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from tests.helpers import make_model, onnxruntime_outputs, rand


@pytest.mark.parametrize(
    "indices, updates, reduction",
    [
        ((0, 1), (0, 4), "none"),  # no rows at all
        ((14, 0), (14, 14, 4), "none"),  # rows that index nothing: each replaces the whole of data
        ((3, 0), (3, 14, 4), "add"),
        ((2, 0, 2), (2, 0), "none"),  # an empty middle axis
    ],
)
@pytest.mark.parametrize("constant_data", [False, True], ids=["input", "folded"])
def test_an_empty_scatter_nd_matches_onnxruntime(indices, updates, reduction, constant_data):
    nodes = [helper.make_node("ScatterND", ["data", "idx", "upd"], ["s"], reduction=reduction),
             helper.make_node("Relu", ["s"], ["y"])]  # fmt: skip
    data = rand(14, 4, seed=1)
    inits = {"idx": np.zeros(indices, np.int64), "upd": rand(*updates, seed=2)}
    inputs = {"x": data}
    if constant_data:
        inits["data"] = data
        nodes.append(helper.make_node("Add", ["y", "x"], ["z"]))
    else:
        inputs = {"data": data}
    model = make_model(nodes, inputs, ["z" if constant_data else "y"], inits, opset=16)
    feeds = {name: value for name, value in inputs.items()}
    (expected,) = onnxruntime_outputs(model, feeds)
    (actual,) = runtime_lite.load(aot.build(model, log=None).to_bytes()).run(feeds)
    np.testing.assert_allclose(actual, expected, rtol=1e-6)


@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_without_running_statistics_on_the_torch_export_route(affine):
    """``F.instance_norm`` exports as ``aten._native_batch_norm_legit.no_stats`` (RAFT-style flow models)."""
    torch = pytest.importorskip("torch")

    class Normed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.norm = torch.nn.InstanceNorm2d(4, affine=affine)
            self.batch = torch.nn.BatchNorm2d(4, track_running_stats=False)

        def forward(self, x):
            return self.batch(self.norm(self.conv(x)))

    net = Normed().eval()
    if affine:
        with torch.no_grad():
            net.norm.weight.uniform_(0.5, 1.5)
            net.norm.bias.uniform_(-0.5, 0.5)
    dims = {2: torch.export.Dim("h", min=4), 3: torch.export.Dim("w", min=4)}
    if not affine:  # torch repeats an affine norm's weights batch times: a batch known only at run time is refused
        dims[0] = torch.export.Dim("batch", max=16)
    program = torch.export.export(net, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": dims})
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    for shape in ((2, 3, 16, 16), (2 if affine else 3, 3, 9, 21)):
        x = rand(*shape, seed=shape[2])
        with torch.no_grad():
            expected = net(torch.from_numpy(x)).numpy()
        (actual,) = module.run([x])
        assert np.linalg.norm(actual - expected) / np.linalg.norm(expected) <= 1e-5
