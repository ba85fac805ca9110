"""The PyTorch frontend against PyTorch itself: torch.export programs through aot and runtime_lite.

Five models (the BYOC tutorial's SmallConvNet, ResNet basic blocks, an MLP,
nn.TransformerEncoderLayer, a MobileNet depthwise-separable block) must match
PyTorch's eager outputs within 1e-4 (max abs error relative to the output's range),
host-only and partitioned for the virtual NPU. Then: a dynamic batch, a saved .pt2
through aot-build, and the errors a user can hit.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import aot
import runtime_lite
from aot.errors import ModelError, ShapeError, UnsupportedOpsError
from aot.frontend import from_exported_program
from tests import torch_models

TOLERANCE = 1e-4
CASES = torch_models.cases()


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-12))


def export(model: nn.Module, example: torch.Tensor, **options) -> torch.export.ExportedProgram:
    return torch.export.export(torch_models.randomize_batch_norm(model.eval()), (example,), **options)


@pytest.fixture(scope="module")
def programs():
    return {name: export(model, example) for name, (model, example) in CASES.items()}


@pytest.mark.parametrize("targets", [["host"], ["npu"]], ids=["host", "npu"])
@pytest.mark.parametrize("name", list(CASES))
def test_model_matches_pytorch(programs, name, targets):
    model, example = CASES[name]
    with torch.no_grad():
        expected = model(example).numpy()
    result = aot.build(programs[name], targets=targets)
    if targets == ["npu"]:
        assert result.regions.get("npu", 0) > 0, result.regions  # the NPU really takes part
    actual = runtime_lite.load(result.to_bytes()).run([example.numpy()])[0]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert relative_error(actual, expected) <= TOLERANCE


def test_weights_come_in_as_constants_and_batch_norm_folds(programs):
    graph = from_exported_program(programs["resnet_basic_blocks"])
    assert [v.name for v in graph.inputs] == ["x"]
    assert aot.build(graph).op_counts.get("batch_norm", 0) == 0  # folded into the convolutions
    conv = next(n for n in graph.nodes if n.op == "conv2d")
    assert conv.inputs[1].is_constant


def test_transformer_keeps_layer_norm_and_gelu_whole(programs):
    ops = aot.build(programs["transformer_encoder_layer"]).op_counts
    assert ops["layer_norm"] == 2 and ops["softmax"] == 1  # attention written out as matmul/softmax
    assert aot.build(programs["mlp"]).op_counts["gelu"] == 1


def test_dynamic_batch_runs_every_batch():
    model, _ = CASES["resnet_basic_blocks"]
    program = export(model, torch.randn(2, 3, 16, 16), dynamic_shapes=({0: torch.export.Dim("batch", max=64)},))
    module = runtime_lite.load(aot.build(program).to_bytes())
    assert isinstance(module.inputs[0].shape[0], str)
    for batch in (1, 3, 8):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            expected = model(x).numpy()
        assert relative_error(module.run([x.numpy()])[0], expected) <= TOLERANCE
    fixed = aot.build(program, input_shapes={"x": (4, 3, 16, 16)})
    assert fixed.graph.inputs[0].type.shape == (4, 3, 16, 16)


def test_saved_pt2_builds_with_aot_build(programs, tmp_path):
    path = tmp_path / "convnet.pt2"
    torch.export.save(programs["small_conv_net"], path)
    bundle = tmp_path / "convnet.aotb"
    result = subprocess.run(
        [sys.executable, "-m", "aot.cli.build", str(path), "-o", str(bundle), "--target", "npu"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "torch.export" in result.stdout and "npu" in result.stdout
    model, example = CASES["small_conv_net"]
    with torch.no_grad():
        expected = model(example).numpy()
    assert relative_error(runtime_lite.load(bundle).run([example.numpy()])[0], expected) <= TOLERANCE


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).real + torch.linalg.det(x[:2, :2])


def test_unsupported_aten_ops_are_listed_together():
    program = torch.export.export(Unsupported(), (torch.randn(2, 8),))
    with pytest.raises(UnsupportedOpsError) as info:
        aot.build(program)
    message = str(info.value)
    assert "\n" not in message
    for op in ("aten.view_as_real", "aten._linalg_det", "aten._fft"):
        assert op in message, message


def test_training_mode_and_bad_sources_are_clear_errors(tmp_path):
    model, example = CASES["depthwise_separable"]
    training = torch.export.export(model.train(), (example,))
    model.eval()
    with pytest.raises(UnsupportedOpsError, match="eval"):
        aot.build(training)
    with pytest.raises(ShapeError, match="unknown input 'images'"):
        aot.build(export(model, example), input_shapes={"images": (1, 16, 8, 8)})
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="broken.pt2"):
        aot.build(str(broken))
    with pytest.raises(ModelError, match="ExportedProgram"):
        from_exported_program(model)


def test_a_saved_hugging_face_program_builds_from_the_cli_and_an_unknown_output_type_is_one_line(tmp_path):
    """A Hugging Face model's program returns a ModelOutput, which torch rebuilds only once transformers registered
    it: aot-build (which never imports transformers itself) imports it when a load fails on one of its types. An
    output type of a package outside that list is a one-line error naming it, not torch's logged traceback."""
    from tests import hf_models

    model, inputs, _ = hf_models.vit()
    program = torch.export.export(model, (), dict(inputs))
    path, bundle = tmp_path / "vit.pt2", tmp_path / "vit.aotb"
    torch.export.save(program, path)
    built = subprocess.run([sys.executable, "-m", "aot.cli.build", str(path), "-o", str(bundle)],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state.numpy()
    outputs = runtime_lite.load(bundle).run({"pixel_values": inputs["pixel_values"].numpy()})
    assert relative_error(outputs[0], expected) <= TOLERANCE

    (tmp_path / "my_outputs.py").write_text(
        "import dataclasses, torch\n"
        "@dataclasses.dataclass\nclass Out:\n    y: torch.Tensor\n"
        'torch.utils._pytree.register_dataclass(Out, serialized_type_name="my_outputs.Out")\n'
    )
    code = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]); import my_outputs\n"
        "class M(torch.nn.Module):\n    def forward(self, x): return my_outputs.Out(x * 2)\n"
        "torch.export.save(torch.export.export(M(), (torch.ones(2, 3),)), sys.argv[2])\n"
    )
    saved = tmp_path / "custom.pt2"
    subprocess.run([sys.executable, "-c", code, str(tmp_path), str(saved)], check=True, timeout=300)
    failed = subprocess.run([sys.executable, "-m", "aot.cli.build", str(saved), "-o", str(tmp_path / "c.aotb")],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert failed.returncode != 0 and not (tmp_path / "c.aotb").exists()
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert "its outputs are a my_outputs.Out, which torch rebuilds only once that package registers it" in lines[0]


class _WhereMixedDtypes(nn.Module):
    def forward(self, ids, mask, f):
        return torch.where(mask, ids, 0.5), torch.where(mask, 0.25, ids), torch.where(mask, ids, f)


@pytest.mark.parametrize("target", ["host", "onnxruntime"])
def test_where_over_mixed_dtypes_takes_torchs_promoted_dtype(target):
    """``where(mask, int ids, 0.5)`` is float32 in torch; the scalar used to take the ids' dtype, so the bundle
    returned int64 with 0 for 0.5, silently, and ``where(mask, int, float tensor)`` failed at run or build."""
    ids, mask = torch.tensor([[1, -2, 3, 4]]), torch.tensor([[True, False, True, False]])
    f = torch.tensor([[0.5, 0.25, 1.0, 2.0]])
    program = torch.export.export(_WhereMixedDtypes(), (ids, mask, f))
    module = runtime_lite.load(aot.build(program, targets=[target], log=None).to_bytes())
    ours = module.run([ids.numpy(), mask.numpy(), f.numpy()])
    for got, want in zip(ours, _WhereMixedDtypes()(ids, mask, f)):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.numpy())


class _AnyAll(nn.Module):
    def forward(self, flag):
        return flag.any(1), flag.all(1)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_any_and_all_of_a_mask_build_for_the_delegates(target):
    """ONNX reduces no bool: the recipe's ReduceMax over a mask was invalid ONNX and the build failed."""
    flag = torch.rand(2, 6) > 0.5
    program = torch.export.export(_AnyAll(), (flag,), dynamic_shapes={"flag": {0: torch.export.Dim("b")}})
    module = runtime_lite.load(aot.build(program, targets=[target], log=None).to_bytes())
    x = np.random.default_rng(3).random((3, 6)) > 0.5
    x[0] = True  # one row all True, one all False: both reductions' edges
    x[1] = False
    any_, all_ = module.run([x])
    np.testing.assert_array_equal(any_, x.any(1))
    np.testing.assert_array_equal(all_, x.all(1))


class _MaskedAttention(nn.Module):
    def forward(self, q, k, v, mask):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", ["host", "onnxruntime"])
def test_a_query_row_its_mask_hides_whole_is_zero_as_in_torch_not_nan(target):
    """torch's safe softmax gives 0 for a fully masked row (a padded query); the bundle gave NaN, which a masked
    mean pool then spread over the whole sequence (NaN * 0 is NaN)."""
    rng = np.random.default_rng(4)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 4, 8)).astype(np.float32)) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 3, :] = False  # the last query sees no key
    mask[..., 1, 2:] = False  # the second sees half of them
    program = torch.export.export(_MaskedAttention(), (q, k, v, mask))
    module = runtime_lite.load(aot.build(program, targets=[target], log=None).to_bytes())
    (ours,) = module.run([t.numpy() for t in (q, k, v, mask)])
    want = _MaskedAttention()(q, k, v, mask).numpy()
    assert not np.isnan(ours).any() and np.all(ours[..., 3, :] == 0)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


class _SplitHalf(nn.Module):
    def forward(self, x):
        n = x.shape[1] // 2
        a, b = torch.split(x, [n, x.shape[1] - n], dim=1)
        return a * 2, b + 1


class _ChunkSeq(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        return a * 2, b + 1


@pytest.mark.parametrize("model", [_SplitHalf, _ChunkSeq])
def test_split_and_chunk_along_a_dynamic_dim_follow_it_at_run_time(model):
    """Pieces whose sizes follow a dynamic dim were a raw TypeError (SymbolicSize) from the importer; they are
    run-time slices now, at every length, odd ones included (chunk's last piece is the shorter)."""
    program = torch.export.export(model(), (torch.randn(2, 8, 3),), dynamic_shapes={"x": {1: torch.export.Dim.AUTO}})
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    for length in (2, 3, 7, 12):
        x = torch.randn(2, length, 3)
        for got, want in zip(module.run([x.numpy()]), model()(x), strict=True):
            np.testing.assert_array_equal(got, want.numpy())


class _ScaledBySize(nn.Module):
    def forward(self, x):
        return x * x.shape[1], x.shape[1] - x, nn.functional.interpolate(x, scale_factor=2.0, mode="linear")


def test_a_dynamic_size_as_a_scalar_operand_and_a_run_time_clamp_follow_the_input():
    """``x * x.shape[1]`` and linear interpolation (whose indices clamp to L - 1) over a dynamic length were raw
    TypeErrors (float() of a SymbolicSize) from the importer."""
    program = torch.export.export(_ScaledBySize(), (torch.randn(1, 2, 16),),
                                  dynamic_shapes={"x": {2: torch.export.Dim("L", min=2, max=64)}})  # fmt: skip
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    for length in (2, 5, 16, 63):
        x = torch.randn(1, 2, length)
        for got, want in zip(module.run([x.numpy()]), _ScaledBySize()(x), strict=True):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


class _NearestBySize(nn.Module):
    def forward(self, x):
        return nn.functional.interpolate(x, scale_factor=1.5, mode="nearest")


def test_python_arithmetic_on_a_dynamic_size_is_named_not_printed_with_an_address():
    program = torch.export.export(_NearestBySize(), (torch.randn(1, 2, 16),),
                                  dynamic_shapes={"x": {2: torch.export.Dim("L", min=2, max=64)}})  # fmt: skip
    with pytest.raises(UnsupportedOpsError) as refused:
        aot.build(program, log=None)
    assert " at 0x" not in str(refused.value), str(refused.value)
    assert "operator.truediv (Python arithmetic on a dynamic size)" in str(refused.value), str(refused.value)


class _ReturnsItsInput(nn.Module):
    def forward(self, x):
        y = x * 2
        return y, x, y, torch.ones(2)


def test_an_output_that_is_the_input_a_constant_or_returned_twice_keeps_every_name():
    """docs/pytorch.md: outputs are output_0, output_1, ... The input returned as an output renamed the *input* to
    'x_value' (run({'x': ...}) failed), and a value returned twice renamed the first output."""
    program = torch.export.export(_ReturnsItsInput(), (torch.randn(3),))
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    assert [s.name for s in module.inputs] == ["x"]
    assert [s.name for s in module.outputs] == ["output_0", "output_1", "output_2", "output_3"]
    x = np.arange(3, dtype=np.float32)
    for got, want in zip(module.run({"x": x}), _ReturnsItsInput()(torch.from_numpy(x)), strict=True):
        np.testing.assert_array_equal(got, want.numpy())


class _MaskLogic(nn.Module):
    def forward(self, a, b):
        return a + b, a * b, torch.maximum(a, b), torch.minimum(a, b)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_arithmetic_on_masks_is_logic_in_the_delegates_recipes(target):
    """ONNX's Add, Mul, Max and Min take no bool: the recipe was invalid ONNX and the build failed; torch's a + b
    over masks is an or, a * b an and."""
    a, b = torch.rand(2, 6) > 0.5, torch.rand(2, 6) > 0.5
    module = runtime_lite.load(
        aot.build(torch.export.export(_MaskLogic(), (a, b)), targets=[target], log=None).to_bytes()
    )
    assert all(p["runs_on"] == target for p in module.placement.values())
    for got, want in zip(module.run([a.numpy(), b.numpy()]), _MaskLogic()(a, b), strict=True):
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, want.numpy())


class _PairsSummed(nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)


def test_a_derived_dim_keeps_the_range_torch_bounds_it_by():
    """``{1: 2 * h}`` with h in 2..32: torch's guards allow 4..64. The bundle recorded the dim unbounded, so 66 and
    200 ran where torch refuses them; now they are one-line InputErrors naming the bounds."""
    h = torch.export.Dim("h", min=2, max=32)
    program = torch.export.export(_PairsSummed(), (torch.randn(3, 12),), dynamic_shapes={"x": {1: 2 * h}})
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    (spec,) = module.inputs
    assert (module.dims[spec.shape[1]].min, module.dims[spec.shape[1]].max) == (4, 64)
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(module.run([x])[0], _PairsSummed()(torch.from_numpy(x)).numpy(), rtol=1e-6)
    with pytest.raises(runtime_lite.InputError, match=r"is 66, above its maximum 64"):
        module.run([np.zeros((3, 66), np.float32)])
