"""int8 on OpenVINO and on ``--target auto``: onnxruntime's QDQ recipes, run on the kernels the CPU pays for.

The trained digits model (tests/test_quantization.py) built for ``--target openvino --precision int8``
carries the same recipe an onnxruntime build does; OpenVINO runs it on its int8 kernels where the CPU
has an 8-bit dot product and with its low-precision transformations off elsewhere. Checked against
onnxruntime's emulation of the quantized function and against the float model's test accuracy.
``ZEN3`` flags (a test double for a CPU without VNNI) stand in where this machine has one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys

import numpy as np
import onnx
import pytest

import aot
import runtime_lite
from aot.errors import BuildError
from runtime_lite.backends.onnxruntime import int8 as onnxruntime_int8
from runtime_lite.backends.openvino import int8 as openvino_int8
from runtime_lite.backends.openvino.engine import LOW_PRECISION_OFF, EngineSettings
from runtime_lite.backends.openvino.int8 import WORDS, choose_kernels, kernels_here
from runtime_lite.cpu import cpu_flags_and_model
from runtime_lite.errors import OptionError, PlacementError
from tests.test_int8_onnxruntime import _output_step
from tests.test_quantization import _accuracy, _config, digits  # noqa: F401 (the trained digits model, a fixture)

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None,
    reason="openvino is not installed (pip install 'runtime-lite[openvino]'); the test extra installs it",
)
AVX512_VNNI = {"sse2", "avx2", "avx512f", "avx512_vnni"}
ZEN3 = {"sse2", "avx2", "fma"}  # AVX2, no VNNI


@pytest.mark.parametrize(
    ("flags", "machine", "kernels"),
    [
        (AVX512_VNNI, "x86_64", "integer"),
        ({"sse2", "avx2", "avx_vnni"}, "x86_64", "integer"),
        ({"sse2", "avx2", "amx_int8"}, "x86_64", "integer"),
        (ZEN3, "x86_64", "float"),
        ({"fp", "asimd", "asimddp"}, "aarch64", "integer"),
        ({"fp", "asimd"}, "aarch64", "float"),
        (set(), "x86_64", "float"),  # flags unreadable: the safe side
    ],
)
def test_auto_runs_openvinos_int8_kernels_only_where_the_cpu_has_an_8_bit_dot_product(flags, machine, kernels):
    chosen = choose_kernels("auto", flags, machine)
    assert chosen.kernels == kernels
    assert openvino_int8.describe(chosen).startswith(f"{WORDS[kernels]}: ")
    settings = EngineSettings(low_precision=kernels == "integer")
    assert (LOW_PRECISION_OFF[0] in settings.config()) == (kernels == "float")


@pytest.mark.parametrize(
    ("environ", "flags", "kernels"),
    [
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, AVX512_VNNI, "float"),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, AVX512_VNNI, "float"),  # AVX-512 without VNNI; any case
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, AVX512_VNNI, "integer"),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, {"avx2", "avx_vnni"}, "integer"),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, AVX512_VNNI, "float"),  # below AVX512_CORE_VNNI, and no AVX-VNNI
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, {"avx2", "amx_int8"}, "integer"),
        ({"DNNL_MAX_CPU_ISA": "SSE41"}, AVX512_VNNI, "float"),  # oneDNN's former name
        ({"ONEDNN_MAX_CPU_ISA": "AVX10_1_512", "DNNL_MAX_CPU_ISA": "SSE41"}, AVX512_VNNI, "integer"),
        ({"ONEDNN_MAX_CPU_ISA": "NOT_AN_ISA"}, AVX512_VNNI, "integer"),  # oneDNN ignores it
        ({"ONEDNN_MAX_CPU_ISA": " "}, AVX512_VNNI, "integer"),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, ZEN3, "float"),
    ],
)
def test_onednns_isa_limit_counts_as_the_cpu(environ, flags, kernels):
    """OpenVINO's CPU plugin obeys oneDNN's ``ONEDNN_MAX_CPU_ISA``: measured on an Intel Xeon with AMX, ResNet-50's
    recipe on the int8 kernels below VNNI (AVX2, AVX512_CORE) ended 0.31 relative L2 from float, on VNNI 0.028."""
    limit = openvino_int8.isa_limit(environ)
    chosen = choose_kernels("auto", flags, "x86_64", limit)
    assert chosen.kernels == kernels, chosen
    if limit is not None and kernels == "float" and flags != ZEN3:
        assert chosen.reason.startswith(f"{limit[0]}={limit[1]} keeps oneDNN, and so openvino, from this CPU's ")
    assert choose_kernels("auto", flags, "aarch64", ("ONEDNN_MAX_CPU_ISA", "SSE41")).kernels == (
        choose_kernels("auto", flags, "aarch64").kernels
    )  # an x86 limit, no word on an Arm CPU's
    assert choose_kernels("integer", flags, "x86_64", ("ONEDNN_MAX_CPU_ISA", "AVX2")).kernels == "integer"


def test_forced_kernels_and_a_bad_choice():
    assert choose_kernels("integer", ZEN3, "x86_64").kernels == "integer"
    assert choose_kernels("float", AVX512_VNNI, "x86_64").reason == "openvino.int8=float"
    assert "no VNNI" in choose_kernels("auto", ZEN3, "x86_64").reason
    with pytest.raises(ValueError, match="int8 kernels must be one of auto, integer, float, got 'emulated'"):
        choose_kernels("emulated", ZEN3, "x86_64")  # onnxruntime's emulation has no OpenVINO counterpart


@pytest.fixture(scope="module")
def builds(digits):  # noqa: F811
    """The digits model at int8 for OpenVINO, for auto and for onnxruntime, from the same calibration."""
    return {
        target: aot.build(digits["path"], targets=[target], quantize=_config(digits, report=False), log=None)
        for target in ("openvino", "auto", "onnxruntime")
    }


def _outputs(module, digits, n: int = 120) -> np.ndarray:  # noqa: F811
    return np.concatenate([module.run({"images": digits["test"][i : i + 1]})[0] for i in range(n)])


def test_an_openvino_int8_build_writes_onnxruntimes_recipe_and_its_int8_facts(builds):
    recipes = {}
    for target, result in builds.items():
        (record,) = result.header["modules"]
        assert record["backend"] == target and record["compile_specs"]["precision"] == "int8"
        recipe = onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))
        assert recipe.graph.name == record["id"]
        recipe.graph.name = "region"
        recipes[target] = recipe.SerializeToString()
    assert recipes["openvino"] == recipes["auto"] == recipes["onnxruntime"]  # one recipe (named as its region)
    with pytest.raises(BuildError, match=r"^quantizing needs a target that computes in int8 \(auto, npu, "
                                         r"onnxruntime, openvino, tensorrt\); targets: host$"):  # fmt: skip
        aot.build(builds["openvino"].graph, targets=["host"], quantize=aot.QuantizeConfig([]), log=None)


@needs_openvino
def test_digits_at_int8_on_openvino_keep_their_accuracy_and_compute_the_quantized_function(builds, digits):  # noqa: F811
    """Integer kernels compute the quantized function (onnxruntime's emulation of it); float kernels, as onnxruntime's
    do, the recipe with its activations unquantized (int8-rounded weights): onnxruntime's float kernels' function."""
    on_onnxruntime = {
        kernels: _outputs(
            runtime_lite.load(builds["onnxruntime"].to_bytes(), backend_options={"onnxruntime": {"int8": kernels}}),
            digits,
        )
        for kernels in ("emulated", "float")
    }
    emulated = on_onnxruntime["emulated"]
    here, step = kernels_here("auto"), _output_step(builds["onnxruntime"])
    for kernels in ("auto", "integer", "float"):
        module = runtime_lite.load(builds["openvino"].to_bytes(), backend_options={"openvino": {"int8": kernels}})
        (placement,) = module.placement.values()
        ran = here.kernels if kernels == "auto" else kernels
        assert placement["runs_on"] == "openvino" and f"; {WORDS[ran]}: " in placement["detail"], placement
        outputs = _outputs(module, digits)
        if ran == "float":  # onnxruntime's float kernels' function, up to the order of float sums
            reference = on_onnxruntime["float"]
            assert np.linalg.norm(outputs - reference) <= 1e-5 * np.linalg.norm(reference)
        elif here.kernels == "integer":  # the quantized function within one step of its output (oneDNN's
            assert np.abs(outputs - emulated).max() <= step * 1.001  # requantization rounds a tie its own way)
        if ran == here.kernels or ran == "float":  # what a deployment gets: within one point of the float model
            accuracy = _accuracy(lambda x, m=module: m.run({"images": x})[0], digits)
            print(f"digits: float {digits['float']:.4f}, openvino int8 on {ran} kernels {accuracy:.4f}")
            assert accuracy >= digits["float"] - 0.01


@needs_openvino
def test_auto_times_each_engine_on_the_kernels_it_would_run_and_says_which(builds, digits, monkeypatch):  # noqa: F811
    module = runtime_lite.load(builds["auto"].to_bytes(), backend_options={"auto": {"cache": False}})
    (placement,) = module.placement.values()
    chosen = module._modules[0].handle.engine_name
    words = kernels_here("auto") if chosen == "openvino" else onnxruntime_int8.kernels_here("auto")
    expected = openvino_int8.describe(words) if chosen == "openvino" else words.describe()
    assert "measured here: " in placement["detail"] and placement["detail"].endswith(expected), placement
    reference = _outputs(module, digits, 40)
    # a CPU without VNNI (test double: its flags): both engines run float kernels, and say so
    monkeypatch.setattr(openvino_int8, "cpu_flags_and_model", lambda: ("AMD EPYC (Zen 3)", ZEN3))
    monkeypatch.setattr(onnxruntime_int8, "cpu_flags_and_model", lambda: ("AMD EPYC (Zen 3)", ZEN3))
    for engine in ("onnxruntime", "openvino"):
        pinned = runtime_lite.load(builds["auto"].to_bytes(), backend_options={"auto": {"engine": engine}})
        detail = pinned.placement["auto_0"]["detail"]
        assert detail.startswith(f"on {engine} ") and "no VNNI" in detail, detail
        assert ("float kernels" in detail) and "integer kernels" not in detail and "int8 kernels:" not in detail
        outputs = _outputs(pinned, digits, 40)  # float kernels: near the quantized function, not it
        assert np.linalg.norm(outputs - reference) < 0.05 * np.linalg.norm(reference)
        assert np.mean(outputs.argmax(1) == reference.argmax(1)) >= 0.95


def test_a_bad_int8_option_is_one_line_and_a_float_bundle_says_nothing_of_int8(digits):  # noqa: F811
    with pytest.raises(OptionError, match=r"openvino.*int8.*emulated") as info:
        runtime_lite.load(
            aot.build(digits["path"], targets=["openvino"], log=None).to_bytes(),
            backend_options={"openvino": {"int8": "emulated"}},
        )
    assert "\n" not in str(info.value)
    if importlib.util.find_spec("openvino") is not None:
        module = runtime_lite.load(aot.build(digits["path"], targets=["openvino"], log=None).to_bytes())
        assert "int8" not in next(iter(module.placement.values()))["detail"]


def _dynamic_matmul_builds(rng: np.random.Generator) -> dict:
    """Two matmuls quantized dynamically (``int8_scheme=dynamic``), built for openvino and for onnxruntime."""
    w1 = onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) / 8, "w1")
    w2 = onnx.numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32) / 8, "w2")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w1"], ["h"]), onnx.helper.make_node("Relu", ["h"], ["r"]),
         onnx.helper.make_node("MatMul", ["r", "w2"], ["y"])], "encoder",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 32])], [w1, w2],
    )  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    return {
        target: aot.build(model, targets=[target], log=None,
                          backend_options={target: {"precision": "int8", "int8_scheme": "dynamic"}})
        for target in ("openvino", "onnxruntime")
    }  # fmt: skip


@needs_openvino
def test_dynamic_matmuls_run_their_float_form_on_openvino_as_its_own_kernels_take_int8_weights():
    """OpenVINO runs DynamicQuantizeLinear -> MatMulInteger slower than float (BERT-base 1.30x its fp32), and the
    recipe's float form faster (0.52x): it always runs that form, with its int8 weights, and says so; on float
    kernels the outputs are those of onnxruntime's float kernels over the same form."""
    rng = np.random.default_rng(4)
    built = _dynamic_matmul_builds(rng)
    (record,) = built["openvino"].header["modules"]
    assert "recipe_float" in record["payloads"]
    x = {"x": rng.standard_normal((1, 16, 64)).astype(np.float32)}
    float_kernels = runtime_lite.load(
        built["onnxruntime"].to_bytes(), backend_options={"onnxruntime": {"int8": "float"}}
    )
    reference = float_kernels.run(x)[0]
    for kernels in ("auto", "integer", "float"):
        module = runtime_lite.load(built["openvino"].to_bytes(), backend_options={"openvino": {"int8": kernels}})
        detail = next(iter(module.placement.values()))["detail"]
        ran = kernels_here("auto").kernels if kernels == "auto" else kernels
        words = (
            "dequantized once at load, on openvino's float kernels ("
            if ran == "float"
            else "on openvino's own kernels for them ("
        )
        assert f"; int8 weights {words}" in detail, detail
        outputs = module.run(x)[0]
        if kernels == "float":  # nothing quantized at run time: onnxruntime's float kernels' function
            np.testing.assert_allclose(outputs, reference, rtol=1e-4, atol=1e-4)
        else:  # activations quantized per group at run time where the CPU has the kernels
            assert np.linalg.norm(outputs - reference) < 0.02 * np.linalg.norm(reference)


@needs_openvino
def test_an_openvino_that_will_not_compile_float_kernels_never_runs_int8_ones_chosen_against(
    builds,
    digits,  # noqa: F811
    monkeypatch,
):
    """Test double for an OpenVINO whose CPU plugin refuses ``LP_TRANSFORMS_MODE`` (not a documented property): a
    key it does not know (a real one: OpenVINO 2026.4 under ``ONEDNN_MAX_CPU_ISA=SSE41``, the next test). The static
    recipe's region runs its host plan, which computes the quantized function, and says why; ``require`` refuses."""
    from runtime_lite.backends.openvino import engine

    monkeypatch.setattr(engine, "LOW_PRECISION_OFF", ("AOT_NOT_A_PROPERTY", "NO"))
    module = runtime_lite.load(builds["openvino"].to_bytes(), backend_options={"openvino": {"int8": "float"}})
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "host", placement
    assert "would not compile the int8 recipe with its low-precision transformations off" in placement["detail"]
    assert placement["detail"].endswith("and its int8 kernels were chosen against here"), placement
    accuracy = _accuracy(lambda x, m=module: m.run({"images": x})[0], digits)
    assert accuracy >= digits["float"] - 0.01
    with pytest.raises(PlacementError, match=r"compiled for openvino, required\) runs on the host") as info:
        runtime_lite.load(
            builds["openvino"].to_bytes(), backend_options={"openvino": {"int8": "float"}}, require=("openvino",)
        )
    assert "\n" not in str(info.value)
    # a recipe whose only int8 are its weights (the dynamic matmuls' float form) keeps openvino, and says so
    rng = np.random.default_rng(5)
    weights_only = runtime_lite.load(
        _dynamic_matmul_builds(rng)["openvino"].to_bytes(), backend_options={"openvino": {"int8": "float"}}
    )
    (placement,) = weights_only.placement.values()
    assert placement["runs_on"] == "openvino", placement
    assert "int8 weights dequantized once at load, on openvino's float kernels (" in placement["detail"], placement


#: A child process under oneDNN's ISA limit: the digits bundle with the defaults, its placement and its outputs.
_UNDER_LIMIT = """
import json, sys, numpy as np, runtime_lite
module = runtime_lite.load(sys.argv[1])
test = np.load(sys.argv[2])
outputs = np.concatenate([module.run({"images": test[i : i + 1]})[0] for i in range(len(test))])
np.save(sys.argv[3], outputs)
print(json.dumps(next(iter(module.placement.values()))))
"""


@needs_openvino
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="oneDNN's ISA limit is x86's")
@pytest.mark.parametrize("isa", ["AVX2", "SSE41"])
def test_openvino_limited_below_vnni_runs_int8_on_float_kernels_or_the_host_never_int8_ones(
    builds,
    digits,  # noqa: F811
    isa,
    tmp_path,
):
    """Real hardware, not flags: OpenVINO kept by ``ONEDNN_MAX_CPU_ISA`` from the CPU's VNNI runs the recipe on its
    float kernels (AVX2), or, where it cannot compile it so (SSE41, OpenVINO 2026.4), the region runs its host plan:
    within one point of float either way, and never on the int8 kernels that saturate there."""
    bundle, test, out = tmp_path / "digits.aotb", tmp_path / "test.npy", tmp_path / "out.npy"
    bundle.write_bytes(builds["openvino"].to_bytes())
    np.save(test, digits["test"])
    environ = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa}
    done = subprocess.run([sys.executable, "-c", _UNDER_LIMIT, str(bundle), str(test), str(out)], env=environ,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    placement = json.loads(done.stdout.strip().splitlines()[-1])
    if any(flag in cpu_flags_and_model()[1] for flag in ("avx512_vnni", "avx_vnni", "amx_int8")):  # else: no VNNI
        assert f"{isa} keeps oneDNN" in placement["detail"] or "chosen against" in placement["detail"], placement
    assert WORDS["integer"] not in placement["detail"], placement
    if placement["runs_on"] == "openvino":
        assert WORDS["float"] in placement["detail"], placement
    accuracy = float(np.mean(np.load(out).argmax(1) == digits["labels"]))
    print(f"digits under ONEDNN_MAX_CPU_ISA={isa}: on {placement['runs_on']}, int8 {accuracy:.4f}, "
          f"float {digits['float']:.4f}")  # fmt: skip
    assert accuracy >= digits["float"] - 0.01


def _grouped_conv1d(kernel: int = 16, groups: int = 4, channels: int = 32) -> onnx.ModelProto:
    """Wav2Vec2's positional convolution in small: Conv1d over [1, channels, 80], padded, with a bias."""
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((channels, channels // groups, kernel)) / np.sqrt(channels // groups * kernel)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, pads=[kernel // 2] * 2)], "conv",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, channels, 80])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight.astype(np.float32), "w"),
         onnx.numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32) / 10, "b")],
    )  # fmt: skip
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


AMX = {"avx2", "avx512f", "avx512_vnni", "amx_int8"}


def test_auto_keeps_a_recipe_with_grouped_convolutions_off_amx_int8_kernels():
    """OpenVINO 2026.4's AMX int8 kernels compute grouped convolutions (more than one input channel per group)
    wrongly at some kernel sizes (int8.py): auto takes float kernels there; depthwise and ungrouped ones, other
    CPUs, oneDNN kept below AMX and an explicit choice are left alone."""
    from runtime_lite.backends.onnxruntime.shapes import Node

    conv = Node("Conv", ["x", "w"], ["y"], {"group": 4}, "graph.node[3]")
    depthwise = Node("Conv", ["x", "dw"], ["z"], {"group": 32}, "graph.node[5]")
    unknown = Node("Conv", ["x", "w2"], ["u"], {"group": 2}, "graph.node[7]")
    shapes = {"w": (32, 8, 16), "dw": (32, 1, 3)}
    assert openvino_int8.grouped_convolutions([conv, depthwise], shapes) == ["graph.node[3]"]
    assert openvino_int8.grouped_convolutions([depthwise, unknown], shapes) == ["graph.node[7]"]
    integer = choose_kernels("auto", AMX, "x86_64")
    chosen = openvino_int8.avoid_faults(integer, "auto", ["graph.node[3]"], AMX, None)
    assert chosen.kernels == "float" and chosen.reason.startswith(
        "openvino's AMX int8 kernels compute some grouped convolutions wrongly, and this recipe has one "
        "(Conv graph.node[3]) ("
    ), chosen
    assert openvino_int8.avoid_faults(integer, "auto", [], AMX, None) == integer
    assert openvino_int8.avoid_faults(integer, "auto", ["graph.node[3]"], AVX512_VNNI, None) == integer
    below_amx = ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    assert openvino_int8.avoid_faults(integer, "auto", ["graph.node[3]"], AMX, below_amx) == integer
    forced = choose_kernels("integer", AMX, "x86_64")
    assert openvino_int8.avoid_faults(forced, "integer", ["graph.node[3]"], AMX, None) == forced


@needs_openvino
def test_a_grouped_conv1d_at_int8_on_openvino_stays_near_the_quantized_function():
    """Real hardware: on this CPU, whatever kernels auto takes, the bundle's output is the quantized function (the
    host plan's) or, on float kernels, near it (activations unquantized); on AMX, OpenVINO 2026.4's int8 kernels
    put this convolution about 3 relative L2 away."""
    model = _grouped_conv1d()
    rng = np.random.default_rng(8)
    samples = [{"x": rng.standard_normal((1, 32, 80)).astype(np.float32)} for _ in range(8)]
    built = aot.build(model, targets=["openvino"], quantize=aot.QuantizeConfig(samples, holdout=0.0, report=False),
                      log=None).to_bytes()  # fmt: skip
    x = {"x": rng.standard_normal((1, 32, 80)).astype(np.float32)}
    host = runtime_lite.load(built, backend_options={"openvino": {"enabled": False}}).run(x)[0]
    module = runtime_lite.load(built)
    (placement,) = module.placement.values()
    if "amx_int8" in cpu_flags_and_model()[1] and openvino_int8.isa_limit() is None:
        assert "openvino's AMX int8 kernels compute some grouped convolutions wrongly" in placement["detail"]
    ours = module.run(x)[0]
    forced = runtime_lite.load(built, backend_options={"openvino": {"int8": "integer"}}).run(x)[0]
    print(f"grouped conv1d: auto {np.linalg.norm(ours - host) / np.linalg.norm(host):.2e} from the host plan, "
          f"int8 kernels forced {np.linalg.norm(forced - host) / np.linalg.norm(host):.2e}")  # fmt: skip
    assert np.linalg.norm(ours - host) < 0.03 * np.linalg.norm(host)
