"""int8 for transformers on onnxruntime: dynamic matmuls (as ``quantize_dynamic``) and weight-only int8.

A tiny random-weight BERT (transformers' own BertModel: 2 layers, hidden 64, exported with
torch.onnx) and a decoder-like stack written with onnx.helper (LayerNorm, then matmuls of
256 units). No calibration data anywhere: dynamic and weight-only matmuls need none.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

import aot
import runtime_lite
from aot.compiler.backends.onnxruntime import codegen
from aot.errors import BuildError
from tests.helpers import attention_head_nodes, make_model, rand
from tests.test_int8_onnxruntime import _fused_ops

SEQ = 16


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> str:
    import torch

    from tests.hf_models import _transformers
    from tests.onnx_export import export_onnx

    t = _transformers()
    torch.manual_seed(0)
    config = t.BertConfig(vocab_size=99, max_position_embeddings=64, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128)  # fmt: skip
    net = t.BertModel(config, add_pooling_layer=False).eval()
    example = {
        "input_ids": torch.ones(1, SEQ, dtype=torch.int64),
        "attention_mask": torch.ones(1, SEQ, dtype=torch.int64),
    }
    path = str(tmp_path_factory.mktemp("bert") / "tiny_bert.onnx")
    export_onnx(net, example, None, path)
    return path


def _feeds(seed: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(1, 99, (1, SEQ))
    return {"input_ids": ids, "attention_mask": np.ones((1, SEQ), np.int64)}


def _int8(model, scheme: str | None = None, **options) -> aot.compiler.build.BuildResult:
    given = {"precision": "int8", **({"int8_scheme": scheme} if scheme else {}), **options}
    return aot.build(model, targets=["onnxruntime"], backend_options={"onnxruntime": given}, log=None)


def _load(result, **options):
    return runtime_lite.load(result.to_bytes(), backend_options={"onnxruntime": options})


def _recipe(result) -> onnx.ModelProto:
    (record,) = result.header["modules"]
    return onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))


def _session(path_or_model) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    source = path_or_model if isinstance(path_or_model, str) else path_or_model.SerializeToString()
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def test_a_bert_quantizes_its_matmuls_dynamically_without_calibration(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "INLINE_BYTES", 1 << 30)  # the weights inside the recipe, to optimize it alone
    result = _int8(tiny_bert)  # int8_scheme=auto: a transformer (layer normalization) gets dynamic matmuls
    assert "int8: matmuls dynamic: no activation range to calibrate, no calibration needed" in result.notes
    assert result.quantization.table.tensors == {}
    recipe = _recipe(result)
    kinds = [n.op_type for n in recipe.graph.node]
    assert kinds.count("MatMulInteger") == 12 and "QuantizeLinear" not in kinds  # 2 layers x (q, k, v, o, up, down)
    assert kinds.count("DynamicQuantizeLinear") == 8  # q, k and v read one quantized activation
    int8_weights = [t for t in recipe.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]
    assert len(int8_weights) == 12
    fused = _fused_ops(recipe, tmp_path)
    # quantize_dynamic's kernels, as onnxruntime fuses its own model: one run-time quantize and three integer
    # matmuls for q, k and v, a quantize fused into each of the others; none left unfused
    assert fused.count("DynamicQuantizeMatMul") == 6 and fused.count("MatMulIntegerToFloat") == 6
    assert "MatMulInteger" not in fused and "DequantizeLinear" not in fused


def test_calibration_data_does_not_keep_a_berts_matmuls_float(tiny_bert):
    """Given samples, the default one-point budget has no class scores to judge in an encoder's hidden states (a
    layer norm's output): the report says so and judges them by relative L2, and every matmul stays int8. Read as
    (batch, time, classes), their argmax over 64 hidden units moved under any quantization, and the budget kept
    nearly every layer float: a bundle of float size and float speed."""
    samples = [_feeds(seed) for seed in range(8)]
    result = aot.build(tiny_bert, targets=["onnxruntime"], quantize=aot.QuantizeConfig(samples), log=None)
    plain = _int8(tiny_bert)
    assert result.quantization.kept_float == []
    assert len(result.to_bytes()) <= len(plain.to_bytes()) * 1.01
    lines = result.quantization.report_lines()
    assert any(
        "judged by relative L2 alone: the task metric cannot read the output of a layer_norm" in x for x in lines
    )
    assert "no output the task metric reads" in lines[-1]


def test_dynamic_matmuls_compute_as_quantize_dynamic_does_and_the_host_plan_the_same(tiny_bert, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    result = _int8(tiny_bert)
    on_onnxruntime, host = _load(result), _load(result, enabled=False)
    assert on_onnxruntime.placement["onnxruntime_0"]["runs_on"] == "onnxruntime"
    assert host.placement["onnxruntime_0"]["runs_on"] == "host"
    own = str(tmp_path / "own.onnx")  # onnxruntime's own, per channel as the bundle's weights are
    quantize_dynamic(tiny_bert, own, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"])
    fp32, theirs = _session(tiny_bert), _session(own)
    for seed in range(3):
        feeds = _feeds(seed)
        reference = fp32.run(None, feeds)[0]
        ours, plan, quantized = on_onnxruntime.run(feeds)[0], host.run(feeds)[0], theirs.run(None, feeds)[0]
        print(f"seed {seed}: to fp32 {_relative(ours, reference):.5f} (onnxruntime's own "
              f"{_relative(quantized, reference):.5f}); to its own {_relative(ours, quantized):.5f}; "
              f"host plan to onnxruntime {_relative(plan, ours):.6f}")  # fmt: skip
        # int8 rounding of activations and weights: ~1% of the signal, as onnxruntime's own quantization
        assert _relative(ours, reference) < 0.03
        assert _relative(ours, quantized) < 0.03
        # the same quantized function: the host's float sums round where onnxruntime's int32 ones do not, and a
        # rounding tie of a dynamic quantize may then fall the other way (one 8-bit step, carried by later layers);
        # on an x86 CPU without VNNI onnxruntime's u8s8 kernels may also saturate a pair of products (as for
        # quantize_dynamic's model, which the assertion above compares with): rare at this model's scales, and the
        # bound leaves room for it (0.04% measured on AVX512-VNNI, exact to float rounding)
        assert _relative(plan, ours) < 0.01


def test_a_cpu_without_vnni_runs_dynamic_matmuls_on_float_kernels(tiny_bert, tmp_path, monkeypatch):
    """MatMulInteger runs on integer kernels whatever the session says (they saturate and lose to float without
    VNNI): the bundle also carries a float form, which the float kernels run (activations in float), and the
    quantized function on float kernels, which the emulated ones run."""
    from runtime_lite.backends.onnxruntime.int8 import choose_kernels

    monkeypatch.setattr(codegen, "INLINE_BYTES", 1 << 30)  # the weights inside the recipe, to optimize it alone
    result = _int8(tiny_bert)
    (record,) = result.header["modules"]
    forms = {field: onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"][field]]))
             for field in ("recipe_float", "recipe_emulated")}  # fmt: skip
    dynamic = {
        field: sum(n.op_type == "DynamicQuantizeLinear" for n in form.graph.node) for field, form in forms.items()
    }
    assert dynamic["recipe_float"] == 0 and dynamic["recipe_emulated"] >= 6, dynamic
    no_vnni = choose_kernels("auto", {"avx2", "fma"}, "x86_64")  # an AMD Zen3's flags
    assert no_vnni.kernels == "float"
    fused = _fused_ops(forms["recipe_float"], tmp_path, no_vnni)
    assert not {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulNBits"} & set(fused)
    assert fused.count("MatMul") + fused.count("FusedMatMul") + fused.count("Gemm") >= 12, fused
    fp32, integer = _session(tiny_bert), _load(result, int8="integer")
    on_float, emulated = _load(result, int8="float"), _load(result, int8="emulated")
    assert "float kernels" in on_float.placement["onnxruntime_0"]["detail"], on_float.placement
    for seed in range(2):
        feeds = _feeds(seed)
        reference, ours, exact = fp32.run(None, feeds)[0], on_float.run(feeds)[0], integer.run(feeds)[0]
        print(f"seed {seed}: to fp32, float kernels {_relative(ours, reference):.5f}, integer kernels "
              f"{_relative(exact, reference):.5f}")  # fmt: skip
        assert _relative(ours, reference) < 0.03  # int8 weights; the activations unrounded
        assert _relative(ours, reference) < _relative(exact, reference)  # which is the larger part of int8's error
        assert _relative(emulated.run(feeds)[0], exact) < 0.01  # the quantized function, as the integer kernels'


VOCAB = 512


def decoder_stack(layers: int = 3, width: int = 256) -> onnx.ModelProto:
    """An embedding lookup (512 x ``width``), LayerNorm, then matmuls of ``width`` units with biases and ReLUs: a
    decoder's linear layers."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["x"]),
             helper.make_node("LayerNormalization", ["x", "g", "beta"], ["h0"], axis=-1)]  # fmt: skip
    inits = {"g": np.ones(width, np.float32), "beta": np.zeros(width, np.float32),
             "table": rand(VOCAB, width, seed=99, low=-0.5, high=0.5)}  # fmt: skip
    for i in range(layers):
        inits[f"w{i}"], inits[f"b{i}"] = rand(width, width, seed=i, low=-0.1, high=0.1), rand(width, seed=10 + i)
        nodes += [helper.make_node("MatMul", [f"h{i}", f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i + 1}"])]  # fmt: skip
    nodes.append(helper.make_node("Identity", [f"h{layers}"], ["y"]))
    return make_model(nodes, {"ids": _ids(0)}, ["y"], inits, opset=17)


def _ids(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (1, 8))


def test_weight_only_int8_is_a_quarter_of_the_bundle_with_float_accuracy(tmp_path):
    model = decoder_stack()
    result = _int8(model, "weight-only")
    assert "int8: matmuls weight-only: no activation range to calibrate, no calibration needed" in result.notes
    assert "int8: 1 embedding tables stored int8 (per tensor), dequantized after the lookup" in result.notes
    plain = aot.build(model, targets=["onnxruntime"], log=None)
    ratio = len(result.to_bytes()) / len(plain.to_bytes())
    print(f"weight-only bundle {ratio:.3f}x the float one")
    assert ratio <= 0.3
    kinds = [n.op_type for n in _recipe(result).graph.node]
    assert "DynamicQuantizeLinear" not in kinds and "QuantizeLinear" not in kinds and kinds.count("MatMul") == 3
    assert kinds.index("Gather") < kinds.index("DequantizeLinear")  # int8 rows looked up, then dequantized
    feeds = {"ids": _ids(7)}
    reference = _session(model).run(None, feeds)[0]
    host = _load(result, enabled=False).run(feeds)[0]
    # float kernels: each weight dequantized once at load, float activations: the host plan's function
    on_float = _load(result, int8="float").run(feeds)[0]
    print(f"float kernels: to float {_relative(on_float, reference):.5f}, to the host plan "
          f"{_relative(on_float, host):.2e}")  # fmt: skip
    assert _relative(on_float, host) < 1e-5  # the sums' order only
    assert _relative(on_float, reference) < 0.01  # the weights' rounding alone (8 bits per channel)
    # integer kernels: onnxruntime's MatMulNBits (bits=8), which also quantizes activations per block at run time
    integer = _load(result, int8="integer")
    on_integer = integer.run(feeds)[0]
    print(f"integer kernels: to float {_relative(on_integer, reference):.5f}")
    assert _relative(on_integer, reference) < 0.03
    assert _relative(host, reference) < 0.01


def test_static_matmuls_still_need_calibration_and_bad_schemes_are_one_line_errors():
    model = decoder_stack(layers=1)
    with pytest.raises(BuildError, match=r"onnxruntime precision int8 needs calibration data .*matmuls static"):
        _int8(model, "static")
    with pytest.raises(BuildError, match=r"onnxruntime option int8_scheme='int4': expected one of auto, static, "
                                         r"dynamic, weight-only"):  # fmt: skip
        _int8(model, "int4")
    samples = [{"ids": _ids(s)} for s in range(4)]
    static = aot.build(model, targets=["onnxruntime"], backend_options={"onnxruntime": {"int8_scheme": "static"}},
                       quantize=aot.QuantizeConfig(samples, holdout=0.0, report=False), log=None)  # fmt: skip
    kinds = [n.op_type for n in _recipe(static).graph.node]
    assert "QuantizeLinear" in kinds and "DynamicQuantizeLinear" not in kinds


def test_a_model_without_layer_normalization_keeps_static_matmuls_under_auto():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, {"x": rand(2, 64)}, ["y"], {"w": rand(64, 32, seed=1)})
    with pytest.raises(BuildError, match="needs calibration data"):
        _int8(model)
    assert "MatMulInteger" in [n.op_type for n in _recipe(_int8(model, "dynamic")).graph.node]


@pytest.mark.parametrize("scheme", ["dynamic", "weight-only"])
def test_a_dense_layer_becomes_a_matmul_over_its_weight_transposed_once(scheme):
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])]
    model = make_model(nodes, {"x": rand(2, 256)}, ["y"], {"w": rand(512, 256, seed=1), "b": rand(512, seed=2)})
    result = _int8(model, scheme)
    kinds = [n.op_type for n in _recipe(result).graph.node]
    assert "Gemm" not in kinds and "Transpose" not in kinds
    assert ("MatMulInteger" in kinds) == (scheme == "dynamic")
    feeds = {"x": rand(2, 256, seed=3)}
    reference = _session(model).run(None, feeds)[0]
    ours, host = _load(result).run(feeds)[0], _load(result, enabled=False).run(feeds)[0]
    assert _relative(ours, reference) < 0.03
    assert _relative(host, reference) < 0.03
    if scheme == "weight-only":
        assert _relative(_load(result, int8="float").run(feeds)[0], host) < 1e-5


def test_the_dynamic_quantize_kernel_is_onnx_dynamic_quantize_linear():
    from runtime_lite.kernels import KERNELS

    x = np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32) * 3
    for sample in (x, np.abs(x), -np.abs(x), np.zeros_like(x)):
        graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info(n, t, None) for n, t in
                                   (("y", onnx.TensorProto.UINT8), ("s", onnx.TensorProto.FLOAT),
                                    ("z", onnx.TensorProto.UINT8))])  # fmt: skip
        expected = _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).run(
            None, {"x": sample}
        )
        got = KERNELS["dynamic_quantize"].fn(sample)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[2], expected[2])
        assert np.abs(got[0].astype(int) - expected[0].astype(int)).max() <= 1  # x / scale vs x * (1 / scale)


def test_a_bundle_written_before_recipe_emulated_runs_its_float_form_on_emulated_kernels(tiny_bert):
    import copy

    from aot.packager.writer import to_bytes

    result = _int8(tiny_bert)
    header = copy.deepcopy(result.header)
    (record,) = header["modules"]
    del record["payloads"]["recipe_emulated"]  # as the build wrote it before this payload existed
    older = runtime_lite.load(to_bytes(header, result.blobs), backend_options={"onnxruntime": {"int8": "emulated"}})
    assert older.placement["onnxruntime_0"]["runs_on"] == "onnxruntime", older.placement
    on_float = _load(result, int8="float")
    feeds = _feeds(0)
    assert _relative(older.run(feeds)[0], on_float.run(feeds)[0]) < 1e-5  # the same recipe_float


def _rms_norm_attention() -> onnx.ModelProto:
    """One attention block as Llama, Mistral and Qwen2 export it: no LayerNormalization, the RMS norm spelled out
    (Pow, ReduceMean, Add, Sqrt, Div, Mul), scores Q Kt scaled, softmax, times V, an output projection."""
    width = 32
    weights = {name: rand(width, width, seed=i) / 6 for i, name in enumerate(("wq", "wk", "wv", "wo"))}
    weights.update({"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32),
                    "gain": rand(width, seed=9, low=0.5, high=1.5), "scale": np.array(width**0.5, np.float32)})  # fmt: skip
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        helper.make_node("Add", ["ms", "eps"], ["ms_eps"]),
        helper.make_node("Sqrt", ["ms_eps"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "gain"], ["h"]),
        *attention_head_nodes("h", "mixed"),
        helper.make_node("MatMul", ["mixed", "wo"], ["y"]),
    ]
    return make_model(nodes, {"x": rand(1, 8, width, seed=11)}, ["y"], weights)


def test_a_decoder_whose_rms_norm_is_spelled_out_quantizes_its_matmuls_dynamically_under_auto():
    """Attention (a softmax over a product of two activations) marks a transformer as layer normalization does:
    Llama-style decoders built without calibration data, their matmuls quantized at run time."""
    model = _rms_norm_attention()
    kinds = [n.op_type for n in _recipe(_int8(model)).graph.node]
    assert "DynamicQuantizeLinear" in kinds and "MatMulInteger" in kinds and "QuantizeLinear" not in kinds


@pytest.mark.parametrize(
    ("target", "conv", "advice"),
    [
        ("onnxruntime", False, "; --backend-option onnxruntime.int8_scheme=dynamic or weight-only needs none"),
        ("openvino", False, "; --backend-option openvino.int8_scheme=dynamic or weight-only needs none"),
        ("auto", True, "; --backend-option auto.int8_scheme=weight-only (int8 weights, float activations) needs none"),
    ],
)
def test_int8_without_data_names_the_ops_that_need_ranges_and_the_option_of_the_target_built(target, conv, advice):
    if conv:
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
        model = make_model(nodes, {"x": rand(1, 4, 8, 8)}, ["y"], {"w": rand(8, 4, 3, 3, seed=1)})
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        model = make_model(nodes, {"x": rand(2, 64)}, ["y"], {"w": rand(64, 32, seed=1)})
    with pytest.raises(BuildError) as info:
        aot.build(model, targets=[target], backend_options={target: {"precision": "int8"}}, log=None)
    message = str(info.value)
    ops = "conv2d x1" if conv else "matmul x1"
    assert message.startswith(f"{target} precision int8 needs calibration data (--calibration DIR) or a calibration "
                              f"table: 2 activations quantize with calibrated ranges (inputs and results of {ops}; "
                              "matmuls static)"), message  # fmt: skip
    assert message.endswith(")" + advice), message
    scheme = "weight-only" if conv else "dynamic"  # and the advice, followed, builds
    aot.build(model, targets=[target], log=None, backend_options={target: {"precision": "int8", "int8_scheme": scheme}})


def test_a_server_does_not_batch_rows_that_change_each_others_rounding_unless_told(tmp_path, capsys, monkeypatch):
    """Dynamic int8 takes one activation range per batch, so a request's answer would depend on its neighbours:
    ``serve --max-batch-size`` runs such a bundle request by request and says why (docs/serving.md)."""
    from runtime_lite.serving.service import served_model
    from runtime_lite.tools import cli

    stack = decoder_stack()
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in stack.graph.initializer}
    model = make_model(stack.graph.node, {"ids": _ids(0)}, ["y"], weights, opset=17, input_shapes={"ids": ["N", 8]})
    # emulated kernels: the quantized function on every CPU. auto runs float kernels where the CPU has no VNNI (an
    # AMD Zen 3), whose float form has no dynamic quantize: its rows do not couple there, and nothing is measured
    dynamic = _load(_int8(model, "dynamic"), int8="emulated")
    assert "dynamic int8" in dynamic.row_coupling and "dynamic_quantize" in dynamic.row_coupling
    assert "region" in dynamic.row_coupling  # found in the onnxruntime region's host plan: where it runs
    rows = np.concatenate([_ids(1), _ids(2)])
    alone = dynamic.run({"ids": rows[:1]})[0]
    assert _relative(dynamic.run({"ids": rows})[0][:1], alone) > 1e-6  # the coupling the note is about, measured
    served = served_model("m", dynamic, max_batch_size=8)
    note = served.batching_note()
    assert not served.batching and note.startswith("off: region ") and "--batch-coupled-rows batches it" in note
    path = tmp_path / "dynamic.aotb"
    path.write_bytes(_int8(model, "dynamic").to_bytes())
    monkeypatch.setenv("AOT_ONNXRUNTIME_INT8", "emulated")  # the CLI's load: the same kernels on every CPU
    assert cli.main(["info", str(path)]) == 0
    assert f"rows   not independent: {dynamic.row_coupling}" in capsys.readouterr().out  # said before serving
    forced = served_model("m", dynamic, max_batch_size=8, batch_coupled_rows=True)
    assert forced.batching and "--batch-coupled-rows" in forced.batching_note()
    for independent in (_load(_int8(model, "weight-only")), _load(aot.build(model, targets=["onnxruntime"], log=None))):
        assert independent.row_coupling is None
        assert served_model("m", independent, max_batch_size=8).batching
    # float kernels (what a CPU without VNNI runs) run the recipe's float form: no activation range at run time, so
    # rows are independent there, measured, and the server batches them
    floats = _load(_int8(model, "dynamic"), int8="float")
    assert floats.row_coupling is None and served_model("m", floats, max_batch_size=8).batching
    assert _relative(floats.run({"ids": rows})[0][:1], floats.run({"ids": rows[:1]})[0]) < 1e-6
