"""int8 on onnxruntime (issue 38): QDQ recipes with int8 weights stored once, integer or float kernels by the CPU.

``--target onnxruntime --precision int8`` writes each region as a QDQ recipe that onnxruntime
fuses into QLinearConv / QGemm; at load the runtime runs it on those integer kernels where the
CPU has VNNI, and on float kernels (int8 weights, float activations) where it has not; the
quantized function itself runs on float kernels as ``emulated``. This machine's CPU decides
``auto``; every path is forced here too, so each runs on any CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

import aot
import runtime_lite
from aot.compiler.quantize import QuantizeConfig
from aot.errors import BuildError
from runtime_lite.backends.onnxruntime.int8 import (
    EMULATED_KERNELS,
    EXACT_X86_KERNELS,
    FLOAT_KERNELS,
    WORDS,
    Int8Kernels,
    choose_kernels,
    kernels_here,
)
from runtime_lite.errors import OptionError
from tests.helpers import make_model, rand, wide_model
from tests.test_quantization import _accuracy, _config, digits  # noqa: F401 (the trained digits model, a fixture)

ROOT = Path(__file__).resolve().parents[1]
AVX512_VNNI = {"sse2", "avx2", "avx512f", "avx512_vnni"}
ALDER_LAKE = {"sse2", "avx2", "avx_vnni"}
ZEN3 = {"sse2", "avx2", "fma"}  # AVX2, no VNNI


# -- the policy: CPU flags -> kernels ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "machine", "kernels", "config"),
    [
        (AVX512_VNNI, "x86_64", "integer", {}),
        (ALDER_LAKE, "x86_64", "integer", {}),
        ({"sse2", "avx2", "amx_int8"}, "x86_64", "integer", {}),
        (ZEN3, "x86_64", "float", FLOAT_KERNELS),
        ({"fp", "asimd", "asimddp"}, "aarch64", "integer", {}),
        ({"fp", "asimd"}, "aarch64", "float", FLOAT_KERNELS),
        (set(), "x86_64", "float", FLOAT_KERNELS),  # flags unreadable: the safe side
    ],
)
def test_auto_runs_integer_kernels_only_where_the_cpu_has_an_8_bit_dot_product(flags, machine, kernels, config):
    chosen = choose_kernels("auto", flags, machine)
    assert (chosen.kernels, chosen.config) == (kernels, config)
    assert chosen.describe().startswith(
        "int8 on integer kernels: " if kernels == "integer" else "int8 weights on float"
    )


def test_forced_kernels_and_the_exact_integer_kernels_of_an_x86_cpu_without_vnni():
    assert FLOAT_KERNELS == {"session.disable_quant_qdq": "1", "session.enable_quant_qdq_cleanup": "1"}
    assert EMULATED_KERNELS == {"session.disable_quant_qdq": "1"}  # the Q/DQ stay: the quantized function
    assert choose_kernels("float", AVX512_VNNI, "x86_64").config == FLOAT_KERNELS
    assert choose_kernels("emulated", AVX512_VNNI, "x86_64").config == EMULATED_KERNELS
    forced = choose_kernels("integer", ZEN3, "x86_64")  # u8s8 would saturate there: u8u8, exact
    assert forced.kernels == "integer" and forced.config == EXACT_X86_KERNELS == {"session.x64quantprecision": "1"}
    assert "without VNNI" in forced.reason
    assert choose_kernels("integer", AVX512_VNNI, "x86_64").config == {}  # VNNI's u8s8 does not saturate
    assert "no VNNI" in choose_kernels("auto", ZEN3, "x86_64").reason
    with pytest.raises(ValueError, match="int8 kernels must be one of auto, integer, float, emulated"):
        choose_kernels("fast", ZEN3, "x86_64")


# -- the digits model at int8 on onnxruntime -----------------------------------------------------------


@pytest.fixture(scope="module")
def digits_int8(digits):  # noqa: F811
    return aot.build(digits["path"], targets=["onnxruntime"], quantize=_config(digits), log=None)


def _load(result, **options):
    return runtime_lite.load(result.to_bytes(), backend_options={"onnxruntime": options})


def _session_config(module, key: str) -> str | None:
    options = module._modules[0].handle.session._session.get_session_options()
    try:
        return options.get_session_config_entry(key)
    except Exception:  # not set at all
        return None


def _fused_ops(model: onnx.ModelProto, tmp_path, kernels: Int8Kernels | None = None) -> list[str]:
    """The node types of onnxruntime's optimized graph of ``model`` on ``kernels`` (its fusions done)."""
    config, disabled = (kernels.config, kernels.disabled) if kernels else ({}, ())
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=["WeightBiasQuantization", *disabled])  # fmt: skip
    return [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]


def test_the_recipe_is_qdq_with_int8_weights_that_onnxruntime_fuses_into_integer_kernels(digits_int8, tmp_path):
    (record,) = digits_int8.header["modules"]
    assert record["backend"] == "onnxruntime" and record["compile_specs"]["precision"] == "int8"
    recipe = onnx.load_from_string(bytes(digits_int8.blobs.payloads[record["payloads"]["recipe"]]))
    initializers = {t.name: numpy_helper.to_array(t) for t in recipe.graph.initializer}
    dequantized = [initializers[n.input[0]] for n in recipe.graph.node
                   if n.op_type == "DequantizeLinear" and n.input[0] in initializers]  # fmt: skip
    assert sorted(a.dtype.name for a in dequantized) == ["int32"] * 3 + ["int8"] * 3  # 3 weights, 3 biases
    assert all(a.ndim == 1 for a in dequantized if a.dtype == np.int32)
    # ReLU-bounded results are quantized from 0 (zero point -128 in s8: 0 in the recipe's u8), so onnxruntime
    # folds the ReLU and the clip; the others are symmetric (zero point 0 in s8: 128 in u8)
    zero_points = [int(initializers[n.input[2]]) for n in recipe.graph.node
                   if n.op_type == "QuantizeLinear"]  # fmt: skip
    assert zero_points == [128, 0, 0, 128, 128]  # images, relu, relu6 (clip), the dense input, logits
    fused = _fused_ops(recipe, tmp_path)
    assert fused.count("QLinearConv") == 2 and fused.count("QGemm") == 1, fused
    emulated = _fused_ops(recipe, tmp_path, choose_kernels("emulated", set(), ""))
    assert "QLinearConv" not in emulated and emulated.count("Conv") == 2, emulated  # float kernels between Q/DQ
    assert "QuantizeLinear" in emulated
    weights = [t for t in onnx.load(str(tmp_path / "optimized.onnx")).graph.initializer if len(t.dims) == 4]
    assert weights and all(t.data_type == onnx.TensorProto.FLOAT for t in weights)  # dequantized once, at load
    plain = _fused_ops(recipe, tmp_path, choose_kernels("float", set(), ""))  # the model with int8-rounded weights
    assert not {"QuantizeLinear", "DequantizeLinear", "QLinearConv"} & set(plain) and plain.count("Conv") == 2
    convs = [n for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node if n.op_type == "Conv"]
    activations = [helper.get_attribute_value(a) for n in convs for a in n.attribute if a.name == "activation"]
    assert activations == [b"Relu", b"Clip"], activations  # the ReLU and the clip stay (fused), unquantized


def test_a_tensor_two_convolutions_read_is_u8_in_the_recipe_so_every_convolution_fuses(tmp_path):
    """A ResNet block's input feeds its first convolution and its shortcut: as s8, which onnxruntime converts
    to u8 only for a quantize read once, it left the convolutions around it in float (8 of ResNet-50's 53)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r"]),
        helper.make_node("Conv", ["r", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["c2"]),
        helper.make_node("Add", ["c1", "c2"], ["y"]),
    ]
    inits = {"w0": rand(8, 4, 3, 3, seed=1), "w1": rand(8, 8, 3, 3, seed=2), "w2": rand(8, 8, 1, 1, seed=3),
             "b0": rand(8, seed=4), "b1": rand(8, seed=5), "b2": rand(8, seed=6)}  # fmt: skip
    model = make_model(nodes, {"x": rand(1, 4, 8, 8)}, ["y"], inits)
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32)} for i in range(4)]
    result = aot.build(model, targets=["onnxruntime"], quantize=QuantizeConfig(samples, report=False), log=None)
    (record,) = result.header["modules"]
    recipe = onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))
    initializers = {t.name: t for t in recipe.graph.initializer}
    zero_points = [initializers[n.input[2]] for n in recipe.graph.node if n.op_type == "QuantizeLinear"]
    assert len(zero_points) == 4 and all(t.data_type == onnx.TensorProto.UINT8 for t in zero_points)  # x, r, c1, c2
    assert _fused_ops(recipe, tmp_path).count("QLinearConv") == 3
    feeds = samples[0]
    integer, host = _load(result, int8="integer").run(feeds)[0], _load(result, enabled=False).run(feeds)[0]
    scales = {t.name: float(numpy_helper.to_array(t)) for t in recipe.graph.initializer if not t.dims}
    added = [scales[n.input[1]] for n in recipe.graph.node if n.op_type == "QuantizeLinear"][-2:]  # c1's, c2's
    assert np.abs(integer - host).max() <= sum(added) * 1.001  # a step of each term at most


def test_an_int8_tensor_the_region_takes_or_gives_keeps_its_type():
    """Only a quantize the recipe both writes and reads moves to u8: a model's own int8 input, dequantized, and
    its int8 output stay int8, as the region's signature says."""
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"]),
    ]
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(0, np.int8), "ys": np.array(0.1, np.float32),
             "yz": np.array(0, np.int8), "w": rand(8, 4, 3, 3, seed=1), "b": rand(8, seed=2)}  # fmt: skip
    rng = np.random.default_rng(0)
    example = rng.integers(-100, 100, (1, 4, 8, 8)).astype(np.int8)
    model = make_model(nodes, {"xq": example}, {"y": "int8"}, inits, opset=17)
    samples = [{"xq": rng.integers(-100, 100, (1, 4, 8, 8)).astype(np.int8)} for _ in range(4)]
    result = aot.build(model, targets=["onnxruntime"], quantize=QuantizeConfig(samples, report=False), log=None)
    module = _load(result, int8="integer")
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    (out,) = module.run({"xq": example})
    host = _load(result, enabled=False).run({"xq": example})[0]
    assert out.dtype == np.int8 and np.abs(out.astype(int) - host.astype(int)).max() <= 1


def _outputs(module, digits, n: int = 120) -> np.ndarray:  # noqa: F811
    return np.concatenate([module.run({"images": digits["test"][i : i + 1]})[0] for i in range(n)])


def test_digits_lose_at_most_one_point_on_any_kernels_and_the_quantized_function_holds(digits, digits_int8):  # noqa: F811
    step = _output_step(digits_int8)
    outputs = {}
    for kernels in ("integer", "float", "emulated"):
        module = _load(digits_int8, int8=kernels)
        (placement,) = module.placement.values()
        assert placement["runs_on"] == "onnxruntime" and f"{WORDS[kernels]}: " in placement["detail"]
        accuracy = _accuracy(lambda x, m=module: m.run({"images": x})[0], digits)
        print(f"digits: float {digits['float']:.4f}, onnxruntime int8 on {kernels} kernels {accuracy:.4f}")
        assert accuracy >= digits["float"] - 0.01
        outputs[kernels] = _outputs(module, digits)
    # the integer kernels and the emulation compute one quantized function (a requantization tie apart)
    assert np.abs(outputs["integer"] - outputs["emulated"]).max() <= step * 1.001
    # the host plan (where onnxruntime is missing) computes it too, as the emulation does
    host = _outputs(_load(digits_int8, enabled=False), digits)
    assert np.abs(host - outputs["emulated"]).max() <= step * 1.001
    # the float kernels skip the activations' rounding: nearer the float model than the quantized function
    reference = _outputs(runtime_lite.load(aot.build(digits["path"], log=None).to_bytes()), digits)
    assert np.linalg.norm(outputs["float"] - reference) < np.linalg.norm(outputs["emulated"] - reference)


def _output_step(result) -> float:
    """The quantization step of the model's output: the scale of the dequantize that gives it in the recipe."""
    (record,) = result.header["modules"]
    recipe = onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))
    (last,) = [n for n in recipe.graph.node if n.output[0] == recipe.graph.output[0].name]
    assert last.op_type == "DequantizeLinear"
    (scale,) = [t for t in recipe.graph.initializer if t.name == last.input[1]]
    return float(numpy_helper.to_array(scale))


def test_describe_names_the_kernels_this_cpu_runs_and_why(digits_int8, monkeypatch):
    expected = kernels_here("auto")
    module = _load(digits_int8)
    (placement,) = module.placement.values()
    assert placement["detail"].endswith(expected.describe()), placement
    assert _session_config(module, "session.disable_quant_qdq") == expected.config.get("session.disable_quant_qdq")
    monkeypatch.setenv("AOT_ONNXRUNTIME_INT8", "emulated")  # the environment's override
    forced = runtime_lite.load(digits_int8.to_bytes())
    assert "int8 emulated on float kernels (the quantized function exactly): onnxruntime.int8=emulated" in \
        forced.placement["onnxruntime_0"]["detail"]  # fmt: skip
    assert _session_config(forced, "session.disable_quant_qdq") == "1"
    basic = _load(digits_int8, optimization="basic", int8="integer")  # basic fuses no Q/DQ, and says so
    assert "int8 emulated on float kernels (the quantized function exactly): onnxruntime.optimization=basic" in \
        basic.placement["onnxruntime_0"]["detail"]  # fmt: skip


def test_with_another_int8_target_the_build_writes_the_symmetric_scheme_and_says_so(digits):  # noqa: F811
    both = aot.build(digits["path"], targets=["npu", "onnxruntime"], quantize=_config(digits, report=False), log=None)
    assert any(n.startswith("int8: symmetric Q/DQ, which every target reads; onnxruntime would fuse more") for n in
               both.notes), both.notes  # fmt: skip
    composites = [c.name for region in both.partitioned.regions for c in region.composites]
    assert composites.count("npu.int8_conv") == 2  # the NPU's integer kernels take only zero points of 0


def test_runtime_lite_info_v_says_which_kernels_and_why(digits_int8, tmp_path):
    path = tmp_path / "digits.aotb"
    path.write_bytes(digits_int8.to_bytes())
    command = [sys.executable, "-m", "runtime_lite", "info", "-v", str(path), "--backend-option",
               "onnxruntime.int8=emulated"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's runtime_lite
    shown = subprocess.run(command, capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "int8 emulated on float kernels (the quantized function exactly): onnxruntime.int8=emulated" in shown.stdout
    quiet = subprocess.run(command[:4] + command[5:], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and "int8" not in quiet.stdout  # without -v: where each module runs, no more


def test_bad_int8_options_are_one_line_errors(digits, digits_int8, monkeypatch):  # noqa: F811
    with pytest.raises(OptionError, match=r"onnxruntime option int8='fast': expected one of auto, integer, float, emu"):
        _load(digits_int8, int8="fast")
    monkeypatch.setenv("AOT_ONNXRUNTIME_INT8", "vnni")
    with pytest.raises(OptionError, match=r"environment variable AOT_ONNXRUNTIME_INT8='vnni': expected one of"):
        runtime_lite.load(digits_int8.to_bytes())
    monkeypatch.delenv("AOT_ONNXRUNTIME_INT8")
    with pytest.raises(BuildError, match=r"onnxruntime option precision='int4': expected one of fp32, int8"):
        aot.build(digits["path"], targets=["onnxruntime"], backend_options={"onnxruntime": {"precision": "int4"}})
    with pytest.raises(BuildError, match="onnxruntime precision int8 needs calibration data"):
        aot.build(digits["path"], targets=["onnxruntime"], backend_options={"onnxruntime": {"precision": "int8"}})


def test_the_tensorrt_recipes_onnxruntime_session_takes_the_onnxruntime_load_options(digits):  # noqa: F811
    result = aot.build(digits["path"], targets=["tensorrt"], quantize=_config(digits, report=False),
                       backend_options={"tensorrt": {"engines": "never"}}, log=None)  # fmt: skip
    module = runtime_lite.load(result.to_bytes(), backend_options={
        "tensorrt": {"onnxruntime_fallback": True}, "onnxruntime": {"threads": 1, "spinning": False, "int8": "float"},
    })  # fmt: skip
    session = module._modules[0].handle.cpu_session._session
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.enable_quant_qdq_cleanup") == "1"
    assert "int8 weights on float kernels" in module.placement["tensorrt_0"]["detail"]


# -- size: weights stored once, as int8 --------------------------------------------------------------


def conv_stack_model() -> onnx.ModelProto:
    """Four 3x3 convolutions of 128 channels and a dense layer: a conv-heavy model (1.8 MB of weights)."""
    nodes, inits, x = [], {}, "x"
    for i, c_in in enumerate((16, 128, 128, 128)):
        inits[f"w{i}"], inits[f"b{i}"] = rand(128, c_in, 3, 3, seed=i, low=-0.05, high=0.05), rand(128, seed=10 + i)
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]  # fmt: skip
        x = f"r{i}"
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]  # fmt: skip
    inits["fw"], inits["fb"] = rand(10, 128, seed=20), rand(10, seed=21)
    return make_model(nodes, {"x": rand(1, 16, 16, 16)}, ["y"], inits)


def many_units_model() -> onnx.ModelProto:
    """A dense layer of 2048 units: its per-channel scales (8 KiB) travel as a blob of the bundle too."""
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])]
    return make_model(nodes, {"x": rand(1, 256)}, ["y"], {"w": rand(2048, 256, seed=1), "b": rand(2048, seed=2)})


@pytest.mark.parametrize("make", [conv_stack_model, wide_model, many_units_model])
def test_an_int8_bundle_stores_its_weights_once_as_int8(make):
    model = make()
    (name,) = [i.name for i in model.graph.input]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    samples = [{name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(8)]
    quantized = aot.build(model, targets=["onnxruntime"], quantize=QuantizeConfig(samples, report=False), log=None)
    plain = aot.build(model, targets=["onnxruntime"], log=None)
    ratio = len(quantized.to_bytes()) / len(plain.to_bytes())
    print(f"{make.__name__}: int8 bundle {ratio:.3f}x the float one")
    assert ratio <= 0.3
    (record,) = quantized.header["modules"]
    assert all(ref["payload"] == "fallback_weights" for ref in record["compile_specs"]["weights"])  # shared
    feeds = samples[0]
    on_integer_kernels = _load(quantized, int8="integer")
    assert on_integer_kernels.placement["onnxruntime_0"]["runs_on"] == "onnxruntime"  # onnxruntime took the recipe
    integer, host = on_integer_kernels.run(feeds)[0], _load(quantized, enabled=False).run(feeds)[0]
    step = _output_step(quantized)
    assert np.abs(integer - host).max() <= step * 1.001
