"""A CNN with dynamic height and width from torch, both routes: ``torch.export`` with bounded ``Dim``s
(checked against torch) and ``torch.onnx.export`` with dynamic axes (checked against onnxruntime on the
same file, host plan and ``--target onnxruntime``), at sizes the network's stride of 4 does not divide."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import aot
import runtime_lite
from tests.helpers import onnxruntime_outputs, rand

torch = pytest.importorskip("torch")
F = torch.nn.functional

SIZES = [(64, 64), (37, 101), (33, 40)]


class Segmenter(torch.nn.Module):
    """Stride-2 conv, batch norm, stride-2 max pool, bilinear and nearest upsampling, a slice by a run-time size."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = F.relu(self.norm(self.down(x)))
        y = F.max_pool2d(y, 3, stride=2, padding=1)
        y = F.interpolate(self.mid(y), scale_factor=2.0, mode="bilinear", align_corners=False)
        y = F.interpolate(self.head(y), scale_factor=2.0, mode="nearest")
        return y[:, :, : y.shape[2] // 2], y.flatten(2).mean(-1)


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_torch_export_with_bounded_dims_records_the_bounds_and_runs_every_size_inside_them():
    h = torch.export.Dim("h", min=32, max=1280)
    w = torch.export.Dim("w", min=32, max=1280)
    net = Segmenter().eval()
    program = torch.export.export(net, (torch.zeros(1, 3, 64, 64),), dynamic_shapes={"x": {2: h, 3: w}})
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    assert module.inputs[0].shape == (1, 3, "h", "w")
    assert (module.dims["h"].min, module.dims["h"].max) == (32, 1280)
    assert "torch.export.Dim 'h'" in module.dims["h"].origin
    for height, width in SIZES:
        x = rand(1, 3, height, width, seed=height)
        with torch.no_grad():
            expected = [t.numpy() for t in net(torch.from_numpy(x))]
        for actual, want in zip(module.run({"x": x}), expected):
            assert actual.shape == want.shape and rel_l2(actual, want) <= 1e-5, (height, width)
    with pytest.raises(runtime_lite.InputError, match=r"input 'x': dim 3 \('w'\) is 1281, above its maximum 1280"):
        module.run({"x": rand(1, 3, 32, 1281)})


def test_input_shapes_bounds_on_the_torch_route():
    net = Segmenter().eval()
    dims = {2: torch.export.Dim("h", min=8), 3: torch.export.Dim("w", min=8)}
    program = torch.export.export(net, (torch.zeros(1, 3, 64, 64),), dynamic_shapes={"x": dims})
    module = runtime_lite.load(aot.build(program, input_shapes={"x": (1, 3, (16, 96), "w")}, log=None).to_bytes())
    assert (module.dims["h"].min, module.dims["h"].max) == (16, 96) and module.dims["w"].max is None
    with pytest.raises(runtime_lite.InputError, match="'h'.*below its minimum 16"):
        module.run({"x": rand(1, 3, 15, 40)})


@pytest.mark.parametrize("targets", [["host"], ["onnxruntime"]], ids=lambda t: t[0])
def test_torch_onnx_export_with_dynamic_axes_matches_onnxruntime(tmp_path, targets):
    path = tmp_path / "segmenter.onnx"
    torch.onnx.export(Segmenter().eval(), (torch.zeros(1, 3, 64, 64),), str(path), input_names=["x"],
                      output_names=["mask", "score"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}}, dynamo=False,
                      opset_version=17)  # fmt: skip
    model = onnx.load(str(path))
    module = runtime_lite.load(aot.build(model, targets=targets, log=None).to_bytes())
    assert module.inputs[0].shape == ("N", 3, "H", "W")
    for batch, (height, width) in zip((1, 2, 1), SIZES):
        x = rand(batch, 3, height, width, seed=width)
        for actual, want in zip(module.run({"x": x}), onnxruntime_outputs(model, {"x": x})):
            assert actual.shape == want.shape and rel_l2(actual, want) <= 1e-5, (height, width)


@pytest.mark.parametrize("arch", ["mobilenet_v3_small", "resnet18"])
def test_a_torchvision_classifier_exported_with_dynamic_height_and_width(tmp_path, arch):
    """One bundle, every input size (odd ones the stride of 32 does not divide), host plan and onnxruntime."""
    from tests.torchvision_compat import import_torchvision

    torchvision = import_torchvision()
    if torchvision is None:
        pytest.skip("torchvision is not installed")
    torch.manual_seed(0)
    net = getattr(torchvision.models, arch)().eval()
    path = tmp_path / f"{arch}.onnx"
    torch.onnx.export(net, (torch.zeros(1, 3, 224, 224),), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {2: "H", 3: "W"}}, dynamo=False, opset_version=17)  # fmt: skip
    model = onnx.load(str(path))
    for targets in (["host"], ["onnxruntime"]):
        module = runtime_lite.load(aot.build(model, targets=targets, log=None).to_bytes())
        for height, width in ((224, 224), (97, 301), (61, 45)):
            x = rand(1, 3, height, width, seed=height)
            (expected,) = onnxruntime_outputs(model, {"x": x})
            (actual,) = module.run({"x": x})
            assert rel_l2(actual, expected) <= 1e-4, (targets, height, width, rel_l2(actual, expected))


def test_a_reloaded_pt2_gets_readable_names_for_torchs_symbols_and_keeps_the_bounds(tmp_path):
    """A program saved and loaded again has lost the Dims' names (``s77``): the signature still reads
    ``[N,3,h,w]``, says which symbol each was, and keeps the ranges torch kept."""
    dims = {
        0: torch.export.Dim("b", max=8),
        2: torch.export.Dim("h", min=32, max=1280),
        3: torch.export.Dim("w", min=32),
    }
    program = torch.export.export(Segmenter().eval(), (torch.zeros(2, 3, 64, 64),), dynamic_shapes={"x": dims})
    path = tmp_path / "segmenter.pt2"
    torch.export.save(program, str(path))
    module = runtime_lite.load(aot.build(str(path), log=None).to_bytes())
    assert module.inputs[0].shape == ("N", 3, "h", "w")
    assert "torch's symbol 's" in module.dims["h"].origin
    assert (module.dims["h"].min, module.dims["h"].max) == (32, 1280) and module.dims["w"].max is None
    assert module.dims["N"].max == 8
    x = rand(3, 3, 40, 50)
    with torch.no_grad():
        expected = program.module()(torch.from_numpy(x))[0].numpy()
    actual = module.run([x])[0]
    assert actual.shape == expected.shape and rel_l2(actual, expected) <= 1e-5


# -- outputs keep the dims torch knows they have ------------------------------------------------------------------


class _CrepeTail(torch.nn.Module):
    """torchcrepe's tail: a pad over the symbolic batch, conv, pool, then ``permute(0, 2, 1, 3).reshape(-1, 8)``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = torch.nn.Conv2d(1, 4, (3, 1)), torch.nn.Linear(8, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(F.pad(x[:, None, :, None], (0, 0, 1, 1)))), (2, 1), (2, 1))
        return self.fc(x.permute(0, 2, 1, 3).reshape(-1, 8))


class _LstmHidden(torch.nn.Module):
    """resemblyzer's embedding: the last layer's final hidden state of an LSTM, ``hidden[-1]``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm, self.fc = torch.nn.LSTM(4, 8, 2, batch_first=True), torch.nn.Linear(8, 3)

    def forward(self, x):
        _, (hidden, _) = self.lstm(x)
        return self.fc(hidden[-1])


class _Doubled(torch.nn.Module):  # a concat along a derived dim: torch knows it is x's 2*h
    def forward(self, x, y):
        return torch.cat([y, y], 1) * x.mean()


@pytest.mark.parametrize("route", ["program", "pt2"])
@pytest.mark.parametrize(
    ("model", "example", "dims", "expected"),
    [(_CrepeTail, [(5, 4)], [{0: "b"}], ("batch", 3)), (_LstmHidden, [(5, 6, 4)], [{0: "b"}], ("batch", 3)),
     (_Doubled, [(3, 8), (3, 4)], [{0: "b", 1: "2h"}, {0: "b", 1: "h"}], ("batch", "x_1"))],
    ids=["crepe-tail", "lstm-hidden", "derived"],
)  # fmt: skip
def test_outputs_keep_the_batch_dim_torch_knows_they_have(tmp_path, route, model, example, dims, expected):
    """torch.export records these outputs as [s77, 3], but the bundle said [?1, 3]: shape inference lost the batch
    to a fresh dim (at a pad over it, at zeros of a run-time shape), so ``serve`` would not batch. The values are
    anchored to torch's shapes: the outputs keep the inputs' dims, and match PyTorch at every batch size."""
    from runtime_lite.serving.batching import batch_axis

    batch, h = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("h", min=2, max=32)
    named = {"b": batch, "h": h, "2h": 2 * h}
    shapes = tuple({axis: named[d] for axis, d in spec.items()} for spec in dims)
    net = model().eval()
    program = torch.export.export(net, tuple(torch.randn(*s) for s in example), dynamic_shapes=shapes)
    if route == "pt2":
        torch.export.save(program, str(tmp_path / "m.pt2"))
        program = str(tmp_path / "m.pt2")
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    names = {"batch": module.inputs[0].shape[0], "x_1": module.inputs[0].shape[1]}
    assert module.outputs[0].shape == tuple(names.get(d, d) for d in expected), module.outputs
    assert batch_axis(module.inputs, module.outputs, module.dims).symbol == names["batch"]
    for b in (1, 3, 17, 64):
        arrays = [rand(b, *s[1:], seed=b) for s in example]
        with torch.no_grad():
            expected_out = net(*(torch.from_numpy(a) for a in arrays)).numpy()
        got = module.run(arrays)[0]
        assert got.shape == expected_out.shape and rel_l2(got, expected_out) < 1e-5, (b, rel_l2(got, expected_out))
