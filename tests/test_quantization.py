"""int8 with calibration at build time: integer kernels, calibration, Q/DQ for the NPU and TensorRT, the report.

The acceptance test trains a small CNN on scikit-learn's bundled digits (no download),
calibrates on 100 training images and checks the int8 builds lose at most one point of
test accuracy on the NPU (integer kernels) and in the TensorRT recipe run by onnxruntime.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot
import runtime_lite
from aot.cli.build import backend_options_from
from aot.compiler.backends.tensorrt.verify import verify_recipe
from aot.compiler.quantize import CalibrationTable, QuantizeConfig
from aot.compiler.quantize.fixed_point import quantize_multiplier
from aot.errors import BuildError
from runtime_lite.backends.tensorrt.spec import BuildSettings, DeviceSignature, ingredients
from runtime_lite.kernels import integer
from tests import int8_reference
from tests.helpers import make_model, rand

CALIBRATION_IMAGES = 100

# -- the integer kernels against the reference --------------------------------------------------


def _channel_params(rng, channels: int, reduction: int):
    bias = rng.integers(-(2**14), 2**14, channels).astype(np.int32)
    # rescales s_x * s_w / s_y that put the accumulators' spread (about sqrt(K) * 128 * 74) near 40 steps
    real = rng.uniform(0.5, 2.0, channels) * 40 / (np.sqrt(reduction) * 128 * 74)
    multiplier, shift = quantize_multiplier(real)
    return bias, multiplier, shift


CONV_CASES = {
    "3x3": dict(x=(2, 8, 9, 9), w=(16, 8, 3, 3), strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], groups=1),
    "strided": dict(x=(1, 4, 11, 10), w=(6, 4, 3, 3), strides=[2, 2], pads=[0, 1, 1, 0], dilations=[1, 1], groups=1),
    "depthwise": dict(x=(1, 12, 8, 8), w=(12, 1, 3, 3), strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], groups=12),
    "grouped": dict(x=(1, 8, 7, 7), w=(8, 2, 3, 3), strides=[1, 1], pads=[0, 0, 0, 0], dilations=[2, 2], groups=4),
    "pointwise": dict(x=(1, 32, 5, 5), w=(16, 32, 1, 1), strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], groups=1),
    "conv1d": dict(x=(2, 4, 20), w=(5, 4, 3), strides=[2], pads=[1, 1], dilations=[1], groups=1),
    # K = 128 * 9 > 1024: the exact sums need float64
    "deep": dict(x=(1, 128, 6, 6), w=(8, 128, 3, 3), strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], groups=1),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("act", [(-128, 127), (0, 127), (0, 90)])
def test_int8_conv_is_bit_exact_to_the_integer_reference(case, act):
    spec = dict(CONV_CASES[case])
    rng = np.random.default_rng(len(case))
    x = rng.integers(-128, 128, spec.pop("x")).astype(np.int8)
    w = rng.integers(-127, 128, spec.pop("w")).astype(np.int8)
    bias, multiplier, shift = _channel_params(rng, w.shape[0], int(np.prod(w.shape[1:])))
    attrs = {**spec, "act_min": act[0], "act_max": act[1]}
    got = integer.int8_conv(x, w, bias, multiplier, shift, **attrs)
    expected = int8_reference.conv(x, w, bias, multiplier, shift, **attrs)
    assert got.dtype == np.int8 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(got)) > 20  # the case exercises the range, not one saturated value


@pytest.mark.parametrize("x_shape", [(4, 64), (2, 5, 300), (1, 2000)])
def test_int8_dense_is_bit_exact_to_the_integer_reference(x_shape):
    rng = np.random.default_rng(x_shape[-1])
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    w = rng.integers(-127, 128, (24, x_shape[-1])).astype(np.int8)
    bias, multiplier, shift = _channel_params(rng, 24, x_shape[-1])
    got = integer.int8_dense(x, w, bias, multiplier, shift, act_min=-128, act_max=127)
    np.testing.assert_array_equal(got, int8_reference.dense(x, w, bias, multiplier, shift, act_min=-128, act_max=127))


def test_requantization_rounds_half_away_from_zero():
    acc = np.array([3, -3, 5, -5, 1, -1, 4, -4], np.int32)
    half = (np.full(8, 2**30, np.int32), np.full(8, 31, np.int32))  # x 0.5 exactly: every odd value is a tie
    np.testing.assert_array_equal(integer.requantize(acc, *half, -128, 127), [2, -2, 3, -3, 1, -1, 2, -2])


def test_fixed_point_multipliers_represent_the_rescale():
    real = np.geomspace(1e-12, 1e4, 400)
    multiplier, shift = quantize_multiplier(real)
    assert multiplier.dtype == shift.dtype == np.int32 and shift.min() >= 1 and shift.max() <= 62
    approx = multiplier.astype(np.float64) / 2.0 ** shift.astype(np.float64)
    normal = real > 2.0**-31  # below that the capped shift leaves fewer than 31 mantissa bits
    assert np.max(np.abs(approx[normal] / real[normal] - 1)) < 2.0**-30
    assert np.all(multiplier[normal] >= 2**30)
    assert quantize_multiplier(np.zeros(1)) == (np.array([0], np.int32), np.array([1], np.int32))
    with pytest.raises(BuildError, match="too large"):
        quantize_multiplier(np.array([2.0**31]))


# -- the digits CNN: trained here, exported as ONNX, built at int8 ------------------------------


def _train_digits():
    torch = pytest.importorskip("torch")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target
    rng = np.random.default_rng(0)
    order = rng.permutation(len(labels))
    train, test = order[:1400], order[1400:]
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU6(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 10),
    )
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    x, y = torch.from_numpy(images[train]), torch.from_numpy(labels[train])
    for _ in range(50):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
    weights = [p.detach().numpy().copy() for p in net.parameters()]
    with torch.no_grad():
        float_accuracy = float((net(torch.from_numpy(images[test])).argmax(1).numpy() == labels[test]).mean())
    return weights, images[train], images[test], labels[test], float_accuracy


def _digits_onnx(weights) -> onnx.ModelProto:
    """The trained network as ONNX, written node by node (Conv, Relu, Clip, MaxPool, Flatten, Gemm)."""
    w1, b1, w2, b2, w3, b3 = weights
    init = [numpy_helper.from_array(a, n) for a, n in zip(weights, ["w1", "b1", "w2", "b2", "w3", "b3"])]
    init += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    nodes = [
        helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c2", "zero", "six"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits", [helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 10])], init,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    weights, train, test, labels, float_accuracy = _train_digits()
    path = tmp_path_factory.mktemp("digits") / "digits.onnx"
    onnx.save(_digits_onnx(weights), path)
    calibration = [{"images": train[i : i + 1]} for i in range(CALIBRATION_IMAGES + 20)]  # 20 held back
    return {"path": str(path), "calibration": calibration, "test": test, "labels": labels, "float": float_accuracy}


def _config(digits, **kw) -> QuantizeConfig:
    return QuantizeConfig(digits["calibration"], holdout=20 / (CALIBRATION_IMAGES + 20), **kw)


def _accuracy(predict, digits) -> float:
    predictions = [int(np.argmax(predict(digits["test"][i : i + 1]))) for i in range(len(digits["labels"]))]
    return float(np.mean(np.array(predictions) == digits["labels"]))


@pytest.fixture(scope="module")
def npu_int8(digits):
    return aot.build(digits["path"], targets=["npu"], quantize=_config(digits), log=None)


def test_digits_at_int8_on_the_npu_lose_at_most_one_point(digits, npu_int8):
    assert digits["float"] > 0.9, "the float model did not learn"
    module = runtime_lite.load(npu_int8.to_bytes())
    accuracy = _accuracy(lambda x, m=module: m.run({"images": x})[0], digits)
    print(f"digits: float {digits['float']:.4f}, npu int8 {accuracy:.4f}")
    assert accuracy >= digits["float"] - 0.01
    # the convolutions and the dense layer ran as integer kernels, bit-exact to the reference
    checked, elements = int8_reference.replay_npu_int8(npu_int8.to_bytes(), {"images": digits["test"][:1]})
    assert checked == 3 and elements == 8 * 64 + 16 * 64 + 10
    composites = [c.name for r in npu_int8.partitioned.regions for c in r.composites]
    assert composites.count("npu.int8_conv") == 2 and composites.count("npu.int8_dense") == 1


def test_the_build_reports_accuracy_on_calibration_and_held_back_samples(npu_int8):
    report = npu_int8.quantization.accuracy
    assert [(a.split, a.samples) for a in report] == [("calibration", 100), ("held-back", 20)]
    for a in report:
        assert 0 < a.relative_l2 < 0.05 and a.max_abs > 0 and a.top1_agreement >= 0.95
    assert any(n.startswith("accuracy logits (held-back, 20 samples): relative L2") for n in npu_int8.notes)
    assert "int8: 3 ops compute in int8 (conv2d 2, dense 1)" in npu_int8.notes
    assert any(n.startswith("int8: max_pool2d x1 stays float:") for n in npu_int8.notes)


def test_int8_dispatches_say_so_and_cost_fewer_cycles(digits, npu_int8):
    float_build = aot.build(digits["path"], targets=["npu"], log=None)

    def conv_dispatches(result):
        module = runtime_lite.load(result.to_bytes())
        profile = module.profile({"images": digits["test"][:1]})
        return [d for d in profile.dispatches if d["engine"] == "CONV"]

    quantized, plain = conv_dispatches(npu_int8), conv_dispatches(float_build)
    assert [d["precision"] for d in quantized] == ["int8", "int8"] and [d["precision"] for d in plain] == ["float"] * 2
    for q, f in zip(quantized, plain):
        assert q["macs"] == f["macs"] and q["cycles"] < f["cycles"]
        assert sum(r["bytes"] for r in q["reads"]) < sum(r["bytes"] for r in f["reads"]) / 2


def test_digits_at_int8_in_the_tensorrt_recipe_lose_at_most_one_point(digits):
    result = aot.build(digits["path"], targets=["tensorrt"], quantize=_config(digits, report=False),
                       backend_options={"tensorrt": {"engines": "never"}}, log=None)  # fmt: skip
    (record,) = result.header["modules"]
    recipe = onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))
    assert record["compile_specs"]["settings"]["precision"] == "int8"
    quantizers = [n for n in recipe.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    initializers = {t.name: numpy_helper.to_array(t) for t in recipe.graph.initializer}
    assert quantizers and all(not initializers[n.input[2]].any() for n in quantizers)  # zero points of 0
    per_channel = [n for n in quantizers if initializers[n.input[1]].size > 1]
    assert len(per_channel) == 3 and all(initializers[n.input[0]].dtype == np.int8 for n in per_channel)
    # Without a GPU the recipe runs on onnxruntime, on the int8 kernels the runtime picks for this CPU (integer
    # ones where it has VNNI, float ones where it has not: onnxruntime's u8s8 kernels saturate there, 96.7% on
    # an AMD EPYC Zen3), or those forced (integer ones without VNNI run as exact u8u8).
    bundle = result.to_bytes()
    for kernels in ("auto", "integer", "float", "emulated"):
        module = runtime_lite.load(bundle, backend_options={"tensorrt": {"onnxruntime_fallback": True},
                                                             "onnxruntime": {"int8": kernels}})  # fmt: skip
        (placement,) = module.placement.values()
        assert placement["runs_on"] == "onnxruntime" and "int8" in placement["detail"], placement
        accuracy = _accuracy(lambda x, m=module: m.run({"images": x})[0], digits)
        print(f"digits: float {digits['float']:.4f}, tensorrt recipe int8 (onnxruntime, {kernels}) {accuracy:.4f}")
        assert accuracy >= digits["float"] - 0.01, (kernels, placement["detail"])
    name = recipe.graph.input[0].name
    # the recipe as written (onnxruntime's own fusion off) equals the region's host plan
    payloads = {k: result.blobs.payloads[i] for k, i in record["payloads"].items()}
    verdict = verify_recipe(payloads, record["compile_specs"], {name: digits["test"][:1]})
    assert verdict["ok"] and verdict["precision"] == "int8" and verdict["error"] < 1e-3
    # and the host plan that rides along (the region's fallback) computes the same quantized graph
    host = runtime_lite.load(result.to_bytes())
    agree = _accuracy(lambda x: host.run({"images": x})[0], digits)
    assert abs(agree - accuracy) <= 0.005


def test_a_calibration_table_reproduces_the_build_and_enters_every_cache_key(digits, npu_int8, tmp_path):
    table = npu_int8.quantization.table
    assert table.samples == CALIBRATION_IMAGES and table.method in ("minmax", "percentile", "entropy", "mse")
    assert any(n.startswith(f"int8: calibration method auto chose {table.method} ") for n in npu_int8.notes)
    path = tmp_path / "digits.calibration.json"
    table.save(path)
    again = aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(table=path), log=None)
    assert again.to_bytes() == npu_int8.to_bytes()
    assert CalibrationTable.load(path).digest == table.digest
    assert npu_int8.header["model"]["calibration"] == table.digest
    assert all(m["compile_specs"]["calibration"] == table.digest for m in npu_int8.header["modules"])
    device = DeviceSignature("10.0", "12.4", "H100", "9.0")
    keys = {json.dumps(ingredients(BuildSettings(precision="int8", calibration=c), {}, device)) for c in ("a", "b")}
    assert len(keys) == 2
    other = "percentile" if table.method != "percentile" else "minmax"
    another = aot.build(digits["path"], targets=["npu"], quantize=_config(digits, method=other, report=False), log=None)
    assert another.quantization.table.digest != table.digest and another.to_bytes() != npu_int8.to_bytes()


def test_int8_mistakes_are_one_line_errors(digits, tmp_path):
    with pytest.raises(BuildError, match="precision int8 needs calibration data"):
        aot.build(digits["path"], targets=["npu"], backend_options={"npu": {"precision": "int8"}}, log=None)
    with pytest.raises(BuildError, match="needs a target that computes in int8"):
        aot.build(digits["path"], quantize=_config(digits), log=None)
    with pytest.raises(BuildError, match="input 'images' is float32, got int64"):
        aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig([{"images": np.zeros((1, 1, 8, 8), int)}]))
    with pytest.raises(BuildError, match=r"input 'images' is float32\[1,1,8,8\], got shape \[8, 8\]"):
        aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig([{"images": np.zeros((8, 8))}]))
    with pytest.raises(BuildError, match="is not an aot-calibration/1 table"):
        (tmp_path / "t.json").write_text("{}")
        aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(table=tmp_path / "t.json"), log=None)


def test_aot_build_quantizes_from_a_directory_and_keeps_the_table(digits, tmp_path):
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    np.save(calibration / "images.npy", np.concatenate([s["images"] for s in digits["calibration"][:40]])[:, None])
    out = tmp_path / "digits.aotb"
    command = [sys.executable, "-m", "aot.cli.build", digits["path"], "-o", str(out), "--target", "npu",
               "--target", "tensorrt", "--no-engines", "--precision", "int8", "--calibration", str(calibration)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "calibrate" in result.stderr and "accuracy logits (held-back, 10 samples)" in result.stdout
    table = CalibrationTable.load(tmp_path / "digits.calibration.json")
    assert table.samples == 30  # a quarter held back
    module = runtime_lite.load(out)
    assert module.run({"images": digits["test"][:1]})[0].shape == (1, 10)
    reuse = subprocess.run(
        [*command[:-2], "--calibration-table", str(tmp_path / "digits.calibration.json"), "-o", str(tmp_path / "b.aotb")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert reuse.returncode == 0, reuse.stderr
    missing = subprocess.run([*command[:-2]], capture_output=True, text=True)
    assert missing.returncode != 0 and missing.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "needs calibration data" in missing.stderr and "Traceback" not in missing.stderr


def test_precision_goes_to_every_target_that_takes_the_value():
    both = ("npu", "tensorrt")
    assert backend_options_from((), {"alias_precision": "int8"}, both) == {
        "npu": {"precision": "int8"},
        "tensorrt": {"precision": "int8"},
    }
    assert backend_options_from((), {"alias_precision": "fp16"}, both) == {"tensorrt": {"precision": "fp16"}}
    assert backend_options_from((), {"alias_precision": "int8"}, ("npu",)) == {"npu": {"precision": "int8"}}
    with pytest.raises(BuildError, match=r"--precision 'int4' \(npu\): expected one of fp32, int8"):
        backend_options_from((), {"alias_precision": "int4"}, both)


def test_percentile_ranges_follow_the_data_as_its_range_grows():
    from aot.compiler.quantize.calibrate import BINS, RangeObserver

    rng = np.random.default_rng(3)
    chunks = [rng.standard_normal(20000).astype(np.float32) * scale for scale in (0.5, 1.0, 4.0, 2.0)]
    chunks[2][7] = 60.0  # one outlier: minmax follows it, the percentile does not
    observer = RangeObserver()
    for chunk in chunks:
        observer.observe(chunk.reshape(100, 200))
    everything = np.abs(np.concatenate(chunks))
    minmax = observer.range("minmax", 99.99)
    assert minmax.amax == 60.0 and minmax.max == 60.0 and minmax.min == float(np.concatenate(chunks).min())
    for q in (99.0, 99.9, 99.99):
        amax = observer.range("percentile", q).amax
        assert abs(amax - np.percentile(everything, q)) <= 2 * observer.top / BINS
    assert observer.range("percentile", 99.99).amax < 20


def test_calibration_files_are_read_as_untrusted_npy(tmp_path):
    """A FIFO named x.npy would block np.load forever, and a header claiming a terabyte would be allocated: the
    runtime's own .npy reader refuses both, in one line, before reading or allocating."""
    from aot.compiler.quantize.samples import load_samples
    from aot.ir.graph import Graph
    from aot.ir.types import TensorType

    images = Graph().add_input("images", TensorType((1, 1, 8, 8), "float32"))
    os.mkfifo(tmp_path / "000.npy")
    with pytest.raises(BuildError, match=r"000.npy is not a readable .npy array: not a regular file") as info:
        load_samples(tmp_path, [images])
    assert "\n" not in str(info.value)
    (tmp_path / "000.npy").unlink()
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1, 8, 8), np.float32))
    header["shape"] = (1 << 20, 1, 8, 8)  # 256 MiB claimed, 12 bytes there
    with open(tmp_path / "000.npy", "wb") as file:
        np.lib.format.write_array_header_1_0(file, header)
        file.write(bytes(12))
    with pytest.raises(BuildError, match=r"its header declares float32\[1048576, 1, 8, 8\]"):
        load_samples(tmp_path, [images])


def test_a_calibration_directory_holds_one_sample_per_file(digits, tmp_path):
    from aot.compiler.quantize.samples import load_samples
    from aot.ir.graph import Graph
    from aot.ir.types import TensorType

    for i in range(3):
        np.save(tmp_path / f"{i:03d}.npy", digits["calibration"][i]["images"])
    g = Graph()
    images = g.add_input("images", TensorType((1, 1, 8, 8), "float32"))
    samples = load_samples(tmp_path, [images])
    assert len(samples) == 3 and np.array_equal(samples[2]["images"], digits["calibration"][2]["images"])
    tokens = g.add_input("tokens", TensorType((1, 4), "int64"))
    with pytest.raises(BuildError, match="needs one subdirectory per sample holding <input name>.npy"):
        load_samples(tmp_path, [images, tokens])
    (tmp_path / "s0").mkdir()
    np.save(tmp_path / "s0" / "images.npy", digits["calibration"][0]["images"])
    with pytest.raises(BuildError, match="s0 has no tokens.npy"):
        load_samples(tmp_path, [images, tokens])
    np.save(tmp_path / "s0" / "tokens.npy", np.zeros((1, 4), np.int64))
    (both,) = load_samples(tmp_path, [images, tokens])
    assert both["tokens"].dtype == np.int64


def test_int8_that_quantizes_nothing_warns_and_calibrates_nothing(capsys):
    """The npu plans static shapes: over a symbolic batch it takes no op, so nothing computes in int8. The build
    used to calibrate, choose a method, write a table and give an int8 verdict about a float graph, silently."""
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": rand(1, 3, 8, 8)}, ["y"],
                       {"w": rand(4, 3, 3, 3, seed=2)}, input_shapes={"x": ["N", 3, 8, 8]})  # fmt: skip
    log = io.StringIO()
    samples = [{"x": rand(1, 3, 8, 8, seed=s)} for s in range(4)]
    built = aot.build(model, targets=["npu"], quantize=QuantizeConfig(calibration=samples), log=log)
    warning = (
        "int8 quantized nothing (npu: symbolic shape; the npu plans static shapes only): the bundle computes in float"
    )
    assert f"warning: {warning}" in log.getvalue()
    assert f"int8: {warning}" in built.notes
    assert not built.quantization.table.tensors
    assert not any("calibration method" in n or "verdict" in n for n in built.notes)
    x = rand(2, 3, 8, 8, seed=9)
    float_built = aot.build(model, log=None)
    np.testing.assert_array_equal(runtime_lite.load(built.to_bytes()).run([x])[0],
                                  runtime_lite.load(float_built.to_bytes()).run([x])[0])  # fmt: skip


def test_an_int8_option_of_a_float_build_is_said_to_do_nothing():
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": rand(2, 4)}, ["y"], {"w": rand(4, 4)})
    built = aot.build(model, targets=["onnxruntime"], backend_options={"onnxruntime": {"int8_scheme": "dynamic"}},
                      log=None)  # fmt: skip
    assert "onnxruntime.int8_scheme=dynamic does nothing: the build is float (add --precision int8)" in built.notes
    quantized = aot.build(model, targets=["onnxruntime"], log=None,
                          backend_options={"onnxruntime": {"int8_scheme": "dynamic", "precision": "int8"}})  # fmt: skip
    assert not any("does nothing" in n for n in quantized.notes)


def test_int8_notes_name_only_float_ops_that_stay_float():
    """Shape arithmetic (Shape, Gather of a shape, integer Add) has no int8 form to miss: a note that it "stays
    float" was noise; a float op the int8 kernels skip (Sigmoid) is still named."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Add", ["n", "one"], ["n1"]),
        helper.make_node("Unsqueeze", ["n1", "zero1"], ["dims"]),
        helper.make_node("Concat", ["dims", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["s", "target"], ["y"]),
    ]
    consts = {"w": rand(4, 3, 3, 3, seed=2), "zero": np.array(0, np.int64), "one": np.array(0, np.int64),
              "zero1": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}  # fmt: skip
    model = make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], consts, input_shapes={"x": ["N", 3, 8, 8]})
    samples = [{"x": rand(1, 3, 8, 8, seed=s)} for s in range(4)]
    built = aot.build(model, targets=["onnxruntime"], quantize=QuantizeConfig(calibration=samples), log=None)
    stays = {n.split()[1] for n in built.notes if "stays float" in n}  # "int8: sigmoid x1 stays float: ..."
    assert "sigmoid" in stays and not stays & {"shape", "gather", "add", "unsqueeze", "concat"}, stays
