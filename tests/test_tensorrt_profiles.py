"""TensorRT optimization profiles from bounds: a bounded dim gives each TensorRT region a [min, opt, max] profile.

``--input x:1x3x16..96x16..128`` (or ``input_shapes`` with ranges) bounds every symbolic dim; the
build re-infers the graph at the bounds' minimum and maximum, so each region's inputs, the model's
own or intermediates with derived sizes (``ceil(h / 2)``), get the shapes they take there, as
Torch-TensorRT derives a partition's profile from its ``Dim`` ranges. opt is the maximum. The
profile is stored in the module's compile specs, goes into the engine's cache key and is what the
engine is built for, here and when a deployment rebuilds it. Run with the TensorRT stand-ins
(tests/standins): what is checked is ours, not what real TensorRT builds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from aot.compiler.backends.tensorrt import TensorRTOptions
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings, TensorRTSpecs
from runtime_lite.errors import BundleError
from tests.helpers import make_model, onnxruntime_outputs, rand

BOUNDS = {"x": (1, 3, (16, 96), (16, 128))}
SIZES = [(16, 16), (37, 101), (96, 128)]  # both extremes and odd sizes between


def bounded_net(host_op_between: bool = False):
    """A stride-2 convolution, an upsampling by 2 and a convolution; with ``host_op_between`` a CumSum
    (which TensorRT's patterns do not take) cuts it in two, so the second region's input has derived sizes."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
    ]
    last = "r1"
    if host_op_between:
        nodes.append(helper.make_node("CumSum", ["r1", "axis"], ["cs"]))
        last = "cs"
    nodes += [
        helper.make_node("Resize", [last, "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Conv", ["up", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["y"]),
    ]
    inits = {"w1": rand(8, 3, 3, 3, seed=1), "w2": rand(4, 8, 3, 3, seed=2), "b2": rand(4, seed=3),
             "scales": np.array([1, 1, 2, 2], np.float32), "axis": np.array(3, np.int64)}  # fmt: skip
    return make_model(nodes, {"x": rand(1, 3, 16, 16)}, ["y"], inits, input_shapes={"x": [1, 3, "h", "w"]})


def _build(model, tmp_path, input_shapes=BOUNDS):
    options = TensorRTOptions(BuildSettings(), cache=EngineCache(tmp_path / "cache"), progress=None)
    return aot.build(model, targets=["tensorrt"], input_shapes=input_shapes, min_region_size=1,
                     backend_options={"tensorrt": options}, log=None)  # fmt: skip


def _engine_profile(result, module_index: int = 0) -> list[dict]:
    """The profiles the (stand-in) builder was given: its engine records them."""
    record = result.header["modules"][module_index]
    blob = result.blobs.payloads[record["payloads"]["engine/0"]]
    header = bytes(blob).split(b"\0", 2)[1]
    return json.loads(header)["profiles"]


def test_a_bounded_input_gives_its_region_a_profile_the_engine_is_built_for(machine, tmp_path):
    model = bounded_net()
    result = _build(model, tmp_path)
    assert result.regions == {"host": 0, "tensorrt": 5}, result.regions
    (record,) = result.header["modules"]
    expected = [[1, 3, 16, 16], [1, 3, 96, 128], [1, 3, 96, 128]]
    assert record["compile_specs"]["profile"] == {"x": expected}
    assert record["compile_specs"]["engines"][0]["tags"]["profiles"] == {"x": expected}  # in the cache key
    assert _engine_profile(result) == [{"x": expected}]
    assert any("profile from the bounds" in n and "1x3x16x16 / 1x3x96x128 / 1x3x96x128" in n for n in result.notes)
    module = runtime_lite.load(result.to_bytes())
    assert "engine 0 from the bundle" in module.modules[0]["placement"]
    for h, w in SIZES:
        x = rand(1, 3, h, w, seed=h + w)
        np.testing.assert_allclose(module.run([x])[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_region_whose_input_is_derived_gets_that_inputs_sizes_at_the_bounds(machine, tmp_path):
    """After a stride-2 convolution the second region's input is [1, 8, ceil(h/2), ceil(w/2)]: its profile
    spans 8x8 to 48x64, computed by re-inferring the graph at each bound."""
    model = bounded_net(host_op_between=True)
    result = _build(model, tmp_path)
    assert result.regions == {"host": 1, "tensorrt": 5}, result.regions
    first, second = (m["compile_specs"]["profile"] for m in result.header["modules"])
    assert first == {"x": [[1, 3, 16, 16], [1, 3, 96, 128], [1, 3, 96, 128]]}
    assert list(second.values()) == [[[1, 8, 8, 8], [1, 8, 48, 64], [1, 8, 48, 64]]]
    assert _engine_profile(result, 1) == [second]
    module = runtime_lite.load(result.to_bytes())
    for h, w in SIZES:
        x = rand(1, 3, h, w, seed=h * w)
        np.testing.assert_allclose(module.run([x])[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_without_bounds_symbolic_sizes_stay_on_the_host_and_the_note_says_how_to_bound_them(machine, tmp_path):
    result = _build(bounded_net(), tmp_path, input_shapes=None)
    assert result.regions.get("tensorrt", 0) == 0
    assert any("unless every symbolic dim is bounded" in n for n in result.notes), result.notes


def test_a_deployment_rebuilding_the_engine_uses_the_bundles_profile(machine, tmp_path):
    """On another GPU the bundle's engine does not fit: the engine built from the recipe at load has the same
    profile (the same cache key as a build on that GPU would make)."""
    result = _build(bounded_net(), tmp_path)
    machine.become(cc="9.0", gpu="Stand-in H100")
    module = runtime_lite.load(
        result.to_bytes(), backend_options={"tensorrt": {"allow_engine_build": True, "cache_dir": tmp_path / "c2"}}
    )
    assert "built from the recipe" in module.modules[0]["placement"]
    assert machine.builds == 2
    built = next((tmp_path / "c2").rglob("*.engine"), None) or max((tmp_path / "c2").rglob("*"), key=_size)
    header = built.read_bytes().split(b"\0", 2)[1]
    assert json.loads(header)["profiles"] == [{"x": [[1, 3, 16, 16], [1, 3, 96, 128], [1, 3, 96, 128]]}]
    x = rand(1, 3, 37, 101)
    np.testing.assert_allclose(
        module.run([x])[0], onnxruntime_outputs(bounded_net(), {"x": x})[0], rtol=1e-5, atol=1e-6
    )


def _size(path) -> int:
    return path.stat().st_size if path.is_file() else 0


@pytest.mark.parametrize(
    "profile, refusal",
    [
        ({"x": [[1, 3, 96, 16], [1, 3, 16, 16], [1, 3, 96, 128]]}, "does not fit"),  # min above opt
        ({"x": [[1, 3, 16], [1, 3, 96, 128], [1, 3, 96, 128]]}, "needs 4 dims"),
        ({"x": [[2, 3, 16, 16], [2, 3, 96, 128], [2, 3, 96, 128]]}, "does not fit 1"),  # a fixed dim changed
        ({"y": [[1, 3, 16, 16], [1, 3, 96, 128], [1, 3, 96, 128]]}, "not an input"),
        ({"x": [[1, 3, 16, 16], [1, 3, 96, 128], [1, 3, 96, 1 << 40]]}, "are not sizes"),
    ],
)
def test_a_profile_that_does_not_fit_the_inputs_is_refused_at_load(machine, tmp_path, profile, refusal):
    (record,) = _build(bounded_net(), tmp_path).header["modules"]
    specs = dict(record["compile_specs"], profile=profile)
    with pytest.raises(BundleError, match=refusal):
        TensorRTSpecs.from_record(specs, "tensorrt.compile_specs")


def test_paddleocrs_detector_bounded_runs_in_one_tensorrt_region_with_its_profile(machine, tmp_path):
    """The real PP-OCRv4 detector (paddle2onnx, symbolic dims) with ``x:1x3x64..480x64..480``: one TensorRT
    region, its profile the bounds, and the (stand-in) engine's output on rendered text at both extremes and
    between matches onnxruntime on the file."""
    import onnxruntime as ort

    from tests.ocr_data import model_path, text_page

    source = model_path("det")
    result = _build(str(source), tmp_path, input_shapes={"x": (1, 3, (64, 480), (64, 480))})
    assert result.regions == {"host": 0, "tensorrt": sum(result.regions.values())}, result.regions
    (record,) = result.header["modules"]
    assert record["compile_specs"]["profile"] == {"x": [[1, 3, 64, 64], [1, 3, 480, 480], [1, 3, 480, 480]]}
    module = runtime_lite.load(result.to_bytes())
    assert "engine 0 from the bundle" in module.modules[0]["placement"]
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    for h, w in [(64, 64), (160, 96), (480, 480)]:
        x = text_page(h, w, seed=h + w)
        expected = session.run(None, {"x": x})[0]
        actual = module.run([x])[0]
        assert np.linalg.norm(actual - expected) / np.linalg.norm(expected) <= 1e-4, (h, w)
