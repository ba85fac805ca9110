"""What a torch.export program's dynamic dims promise, kept in the bundle: derived dims (``2 * h``) linked to their
base, a ``Dim``'s minimum without a maximum, ``input_shapes`` never widening a ``Dim``'s range, and
``F.interpolate`` to a fixed size over a run-time height and width. Numerics against PyTorch itself; refusals are
one-line errors naming the input and the dim."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import aot
import runtime_lite
from aot.errors import ShapeError
from runtime_lite.errors import BundleError
from runtime_lite.format.signature import TensorSpec, parse_dims

torch = pytest.importorskip("torch")
F = torch.nn.functional
Dim = torch.export.Dim


def _load(program, **kwargs) -> runtime_lite.Module:
    return runtime_lite.load(aot.build(program, log=None, **kwargs).to_bytes())


def _refused(module: runtime_lite.Module, arrays: list[np.ndarray], *parts: str) -> str:
    """Run ``arrays``: it must be one InputError line holding every one of ``parts``."""
    with pytest.raises(runtime_lite.InputError) as refused:
        module.run(arrays)
    text = str(refused.value)
    assert "\n" not in text and all(p in text for p in parts), text
    return text


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- derived dims ------------------------------------------------------------------------------------------------


class _EveryOtherPlusY(torch.nn.Module):
    def forward(self, x, y):
        return x[:, ::2] + y, x.sum(1) + y.sum(1)


class _MeansOnly(torch.nn.Module):  # no op notices a broken relation: it ran on inputs the model never allowed
    def forward(self, x, y):
        return x.mean(1), y.mean(1)


@pytest.mark.parametrize("model", [_EveryOtherPlusY, _MeansOnly], ids=lambda m: m.__name__)
def test_a_derived_dim_is_linked_to_its_base_and_a_broken_relation_is_refused_at_the_input_check(model):
    """``{"x": {1: 2 * h}, "y": {1: h}}``: x's length was an unrelated dim of its own, so x of 10 with y of 4 failed
    inside the plan's add (or, with no op to notice, ran), and x of 9 too."""
    h = Dim("h", min=2, max=32)
    program = torch.export.export(
        model(), (torch.randn(2, 12, 3), torch.randn(2, 6, 3)), dynamic_shapes={"x": {1: 2 * h}, "y": {1: h}}
    )
    module = _load(program)
    x_dim = module.inputs[0].shape[1]
    assert module.inputs[1].shape[1] == "h"
    assert module.dims[x_dim].of == ("h", 2, 0) and (module.dims[x_dim].min, module.dims[x_dim].max) == (4, 64)
    assert (module.dims["h"].min, module.dims["h"].max) == (2, 32)
    for length in (2, 5, 32):
        x, y = _rand(2, 2 * length, 3, seed=length), _rand(2, length, 3, seed=length + 1)
        for got, want in zip(module.run([x, y]), model()(torch.from_numpy(x), torch.from_numpy(y)), strict=True):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    _refused(module, [_rand(2, 10, 3), _rand(2, 4, 3)], "input 'x'", "dim 1", "input 'y' dim 1 sets h = 4", "2*h")
    _refused(module, [_rand(2, 9, 3), _rand(2, 4, 3)], "input 'x'", "dim 1", "is 9", "2*h")


class _PairsSummed(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)


class _Trimmed(torch.nn.Module):
    def forward(self, x):
        return x[:, 1:] * 2


@pytest.mark.parametrize(
    ("model", "derive", "relation", "good", "bad", "bounds"),
    [(_PairsSummed, lambda h: 2 * h, ("h", 2, 0), (4, 10, 64), 9, (4, 64)),
     (_Trimmed, lambda h: 2 * h + 1, ("h", 2, 1), (5, 11, 65), 8, (5, 65))],
    ids=["2h", "2h+1"],
)  # fmt: skip
def test_a_derived_dim_alone_keeps_its_relation_to_a_base_no_input_has(model, derive, relation, good, bad, bounds):
    """``{"x": {1: 2 * h}}`` alone: the bundle bounded the length by 4..64 but ran an odd one into the reshape."""
    h = Dim("h", min=2, max=32)
    example = torch.randn(3, derive(6))
    module = _load(torch.export.export(model(), (example,), dynamic_shapes={"x": {1: derive(h)}}))
    info = module.dims[module.inputs[0].shape[1]]
    assert info.of == relation and (info.min, info.max) == bounds, info
    for length in good:
        x = _rand(3, length, seed=length)
        np.testing.assert_allclose(module.run([x])[0], model()(torch.from_numpy(x)).numpy(), rtol=1e-6)
    _refused(module, [_rand(3, bad)], "input 'x'", "dim 1", f"is {bad}")


def test_a_relation_in_a_bundle_is_validated_when_it_is_read():
    specs = (TensorSpec("x", (2, "seq"), np.dtype("float32")), TensorSpec("y", ("h",), np.dtype("float32")))
    assert parse_dims({"seq": {"from": "", "of": {"dim": "h", "scale": 2, "offset": 1}}}, specs)["seq"].of == (
        "h", 2, 1,
    )  # fmt: skip
    for of in ({"dim": "seq"}, {"dim": "h", "scale": 0}, {"dim": "h", "scale": True}, {"dim": "h", "offset": 2.5},
               {"dim": "h", "offset": 1 << 60}, {"scale": 2}, "h"):  # fmt: skip
        with pytest.raises(BundleError):
            parse_dims({"seq": {"of": of}}, specs)
    with pytest.raises(BundleError, match="itself a derived dim"):
        parse_dims({"seq": {"of": {"dim": "h"}}, "h": {"of": {"dim": "seq", "scale": 2}}}, specs)


# -- a Dim's minimum ---------------------------------------------------------------------------------------------


class _Doubled(torch.nn.Module):
    def forward(self, x):
        return x * 2


@pytest.mark.parametrize(
    ("dim", "recorded", "smallest"),
    [(Dim("b", min=3), (3, None), 3), (Dim("b", min=2), (2, None), 2), (Dim("b", min=2, max=9), (2, 9), 2),
     (Dim("b"), None, 0), (Dim.AUTO, None, 0)],
    ids=["min3", "min2", "min2max9", "unbounded", "auto"],
)  # fmt: skip
def test_a_dims_minimum_is_kept_without_a_maximum_and_refused_below(dim, recorded, smallest):
    """``Dim("b", min=3)`` with no max lost its minimum (bounds were recorded only with a max), and a named
    ``Dim("b", min=2)`` was recorded as 0. torch's own default of 2 (``Dim.AUTO``) still admits 0 and 1."""
    module = _load(torch.export.export(_Doubled(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: dim}}))
    name = module.inputs[0].shape[0]
    info = module.dims.get(name)
    assert (None if info is None or (info.min, info.max) == (None, None) else (info.min, info.max)) == recorded
    x = _rand(smallest, 3)
    np.testing.assert_array_equal(module.run([x])[0], x * 2)
    if smallest > 0:
        _refused(module, [_rand(smallest - 1, 3)], "input 'x'", "dim 0", f"below its minimum {smallest}")
    else:
        assert module.run([_rand(1, 3)])[0].shape == (1, 3)


def test_a_reloaded_pt2_keeps_a_minimum_above_torchs_default(tmp_path):
    program = torch.export.export(_Doubled(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=3)}})
    torch.export.save(program, str(tmp_path / "m.pt2"))
    module = _load(str(tmp_path / "m.pt2"))
    (name, _) = module.inputs[0].shape
    assert (module.dims[name].min, module.dims[name].max) == (3, None)
    _refused(module, [_rand(2, 3)], "input 'x'", "dim 0", "below its minimum 3")


@pytest.mark.parametrize("route", ["program", "loaded", "path"])
@pytest.mark.parametrize(
    ("dim", "recorded", "smallest"),
    [(Dim("batch", min=1, max=4096), (1, 4096), 1), (Dim("batch", min=0, max=64), (0, 64), 0),
     (Dim("batch"), None, 0), (Dim.AUTO, None, 0)],
    ids=["min1", "min0", "unbounded", "auto"],
)  # fmt: skip
def test_a_reloaded_pt2_keeps_a_minimum_below_torchs_default(tmp_path, route, dim, recorded, smallest):
    """``Dim("batch", min=1)`` was recorded as 0..4096 from a .pt2 (only torch's own default of 2, ``Dim.AUTO``,
    is to be reset to 0, yet every unnamed minimum up to 2 was): batch 0 ran although torch reloads VR[1, 4096]."""
    program = torch.export.export(_Doubled(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: dim}})
    if route != "program":
        torch.export.save(program, str(tmp_path / "m.pt2"))
        program = str(tmp_path / "m.pt2") if route == "path" else torch.export.load(str(tmp_path / "m.pt2"))
    module = _load(program)
    info = module.dims.get(module.inputs[0].shape[0])
    assert (None if info is None or (info.min, info.max) == (None, None) else (info.min, info.max)) == recorded
    x = _rand(smallest, 3)
    np.testing.assert_array_equal(module.run([x])[0], x * 2)
    if smallest > 0:
        _refused(module, [_rand(smallest - 1, 3)], "input 'x'", "dim 0", f"below its minimum {smallest}")


# -- input_shapes never widens what the program was exported for --------------------------------------------------


class _SpatialMean(torch.nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


def _spatial_program():
    dims = {0: Dim("batch_size", max=8), 2: Dim("height", min=8, max=64), 3: Dim("width", min=8, max=64)}
    return torch.export.export(_SpatialMean(), (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": dims})


@pytest.mark.parametrize("route", ["program", "pt2"])
@pytest.mark.parametrize(
    ("shape", "dim"),
    [((1, 3, (4, 128), (8, 64)), "dim 2"), ((1, 3, 200, 16), "dim 2"), ((1, 3, 16, 4), "dim 3"),
     (((1, 16), 3, 16, 16), "dim 0")],
    ids=["wider-bounds", "size-above", "size-below", "batch-bounds"],
)  # fmt: skip
def test_input_shapes_beyond_the_programs_range_are_refused(tmp_path, route, shape, dim):
    """``--input x:1x3x4..128x8..64`` on a program exported for height 8..64 was recorded as 4..128: the bundle
    then ran sizes torch.export never guaranteed (a .pt2, whose Dim names are gone, made it easy to miss)."""
    program = _spatial_program()
    if route == "pt2":
        torch.export.save(program, str(tmp_path / "m.pt2"))
        program = str(tmp_path / "m.pt2")
    with pytest.raises(ShapeError) as refused:
        aot.build(program, input_shapes={"x": shape}, log=None)
    text = str(refused.value)
    assert "\n" not in text and text.startswith(f"--input x: {dim}") and "the range the program was exported" in text


def test_input_shapes_inside_the_programs_range_narrow_it():
    module = _load(_spatial_program(), input_shapes={"x": (4, 3, (8, 32), (16, 64))})
    assert module.inputs[0].shape == (4, 3, "height", "width")
    assert (module.dims["height"].min, module.dims["height"].max) == (8, 32)
    x = _rand(4, 3, 32, 16)
    np.testing.assert_allclose(module.run([x])[0], x.mean((2, 3)), rtol=1e-5)


def test_a_fixed_size_a_derived_dim_never_takes_is_refused():
    h = Dim("h", min=2, max=32)
    program = torch.export.export(_PairsSummed(), (torch.randn(3, 12),), dynamic_shapes={"x": {1: 2 * h}})
    with pytest.raises(ShapeError, match=r"^--input x: dim 1 is 9, .*2\*h") as refused:
        aot.build(program, input_shapes={"x": (3, 9)}, log=None)
    assert "\n" not in str(refused.value)
    module = _load(program, input_shapes={"x": (3, 10)})
    x = _rand(3, 10)
    np.testing.assert_allclose(module.run([x])[0], _PairsSummed()(torch.from_numpy(x)).numpy(), rtol=1e-6)


def test_the_command_line_refuses_widening_a_pt2s_range_in_one_line(tmp_path):
    torch.export.save(_spatial_program(), str(tmp_path / "m.pt2"))
    result = subprocess.run(
        [sys.executable, "-c", "from aot.cli.build import main; main()", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "m.aotb"),
         "--input", "x:1x3x4..128x8..64"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0 and not (tmp_path / "m.aotb").exists()
    lines = [line for line in result.stderr.splitlines() if "--input x: dim 2" in line]
    assert len(lines) == 1 and "4..128" in lines[0] and "8..64" in lines[0], result.stderr


# -- F.interpolate to a size known at build time over a run-time height and width --------------------------------


class _ToFixedSize(torch.nn.Module):
    def __init__(self, mode: str, align_corners: bool | None, size: tuple[int, int]):
        super().__init__()
        self.mode, self.align_corners, self.size = mode, align_corners, size

    def forward(self, x):
        return F.interpolate(x, size=self.size, mode=self.mode, align_corners=self.align_corners)


class _BackToInputSize(torch.nn.Module):  # deeplabv3's final upsample
    def __init__(self, mode: str, align_corners: bool | None):
        super().__init__()
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x):
        return F.interpolate(F.avg_pool2d(x, 2), size=x.shape[-2:], mode=self.mode, align_corners=self.align_corners)


INTERPOLATIONS = [
    _ToFixedSize("nearest", None, (7, 9)),
    _ToFixedSize("nearest", None, (1, 64)),
    _ToFixedSize("bilinear", False, (7, 9)),
    _ToFixedSize("bilinear", True, (7, 9)),
    _ToFixedSize("bilinear", False, (1, 1)),
    _BackToInputSize("nearest", None),
    _BackToInputSize("bilinear", False),
    _BackToInputSize("bilinear", True),
]


@pytest.mark.parametrize("target", ["host", "onnxruntime"])
@pytest.mark.parametrize(
    "model", INTERPOLATIONS, ids=lambda m: f"{type(m).__name__}-{m.mode}-{m.align_corners}-{getattr(m, 'size', '')}"
)
def test_interpolate_to_a_size_over_a_run_time_height_and_width_matches_torch(model, target):
    """``F.interpolate(x, size=(7, 9))`` over a dynamic H and W was refused ("an output size known only at run
    time") though its output is static; nearest follows torch's float32 index rounding exactly."""
    dims = {0: Dim("b"), 2: Dim("h", min=4, max=64), 3: Dim("w", min=4, max=64)}
    program = torch.export.export(model, (torch.randn(2, 2, 16, 20),), dynamic_shapes={"x": dims})
    module = _load(program, targets=[target])
    if isinstance(model, _ToFixedSize):
        assert module.outputs[0].shape[1:] == (2, *model.size)
    for batch, height, width in ((1, 4, 4), (2, 5, 37), (3, 64, 63), (1, 13, 7), (2, 21, 18), (1, 6, 4)):
        x = torch.randn(batch, 2, height, width)
        (got,) = module.run([x.numpy()])
        want = model(x).numpy()
        assert got.shape == want.shape
        if model.mode == "nearest":  # a wrong index is off by O(1); the average pool may round 1 ulp apart
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 if isinstance(model, _BackToInputSize) else 0)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)
