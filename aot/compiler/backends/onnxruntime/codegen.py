"""onnxruntime codegen: a region becomes a recipe whose weights are the host plan's own blobs.

Payloads of one onnxruntime module:

* ``recipe``: the region as ONNX (``aot/compiler/backends/recipe.py``, fp32, or int8: float32
  between explicit Q/DQ, int8 weights, int32 biases) with no large weight
  inside: each initializer over ``INLINE_BYTES`` is an external-data placeholder that
  ``compile_specs.weights`` resolves to an array of the bundle;
* ``fallback`` + ``fallback_weights``: the region's host plan and its constants, run where
  onnxruntime is not installed. The recipe's weights are these same arrays, found by content,
  so each weight is stored once;
* ``recipe_weights``: the large arrays only the recipe needs (a weight the lowering had to
  transpose), when there are any.

The recipe is checked by the run side's own reader (``runtime_lite.backends.onnxruntime.
recipe_check``) before it is written, so a bundle never holds a recipe the runtime refuses.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.compiler.backends import ModuleArtifact
from aot.compiler.backends.fallback import host_fallback
from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
from aot.compiler.backends.recipe import inline_weight, write_recipe
from aot.compiler.backends.weights import constant_record
from aot.compiler.partition import Region
from aot.errors import BuildError
from aot.packager.bundle import spec_of
from runtime_lite.backends.onnxruntime.footprint import Footprint
from runtime_lite.backends.onnxruntime.recipe_check import PLACEHOLDER, check_recipe
from runtime_lite.backends.onnxruntime.spec import OnnxRuntimeSpecs, WeightRef
from runtime_lite.errors import BundleError


def _content_key(array: np.ndarray) -> tuple:
    little = np.asarray(array, order="C").astype(array.dtype.newbyteorder("<"), copy=False)
    return array.dtype.name, array.shape, hashlib.sha256(memoryview(little).cast("B")).digest()


#: Arrays up to this size stay inside the recipe: onnxruntime's shape inference reads operands such as a
#: Reshape's target shape while it loads the model, before external initializers are bound.
INLINE_BYTES = 4096


class _SharedWeights:
    """``store`` for ``write_recipe``: each initializer over ``INLINE_BYTES`` an external-data placeholder;
    ``resolve`` then points each at a fallback constant of the same content, else at ``recipe_weights``."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.refs: list[WeightRef] = []
        self.extra = bytearray()
        self.extra_records: list = []

    def __call__(self, tensor: onnx.TensorProto, array: np.ndarray) -> None:
        if array.nbytes <= INLINE_BYTES:
            inline_weight(tensor, array)
            return
        self.arrays[tensor.name] = np.asarray(array)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", PLACEHOLDER

    def resolve(self, fallback_arrays: list[np.ndarray]) -> None:
        shared: dict[tuple, int] = {}
        for i, array in enumerate(fallback_arrays):
            shared.setdefault(_content_key(array), i)
        for name, array in self.arrays.items():
            index = shared.get(_content_key(array))
            if index is None:
                self.extra_records.append(constant_record(self.extra, array))
                self.refs.append(WeightRef(name, "recipe_weights", len(self.extra_records) - 1))
            else:
                self.refs.append(WeightRef(name, "fallback_weights", index))


def quantized_before(graph) -> bool:
    """Whether a region of a float build computes in int8 all the same: a model quantized before aot (its
    quantize / dequantize kept, docs/quantization.md). Its recipe is then an int8 recipe like one the build
    quantized: activations as uint8 pairs where onnxruntime fuses more of them that way, and the CPU choosing
    integer or float kernels at load (a CPU without VNNI saturates u8 x s8)."""
    return any(node.op == "quantize" for node in graph.nodes)


def clamps_kept_explicit(model: onnx.ModelProto) -> None:
    """A Relu before each QuantizeLinear whose range starts at zero (its zero point the type's minimum) and whose
    input no Relu or Clip made (in place): the clamp the quantize does, spelled out.

    onnxruntime's ``quantize_static`` drops a convolution's Relu where the quantize after it clamps at zero
    anyway; the integer kernels keep that clamp, but the float kernels a CPU without VNNI runs drop the
    activations' Q/DQ pairs, and the Relu with them (a small CNN ended 0.9 relative L2 from its own quantized
    file). The Relu costs the integer kernels nothing: onnxruntime removes it again (``ReluQuantRewrite``),
    which the float kernels keep off (``FLOAT_KERNELS_KEEP``).
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in initializers:
            zero_point = numpy_helper.to_array(initializers[node.input[2]])
            made_by = producers.get(node.input[0])
            clamped = made_by is not None and made_by.op_type in ("Relu", "Clip")
            if (
                zero_point.size == 1
                and int(zero_point.reshape(-1)[0]) == np.iinfo(zero_point.dtype).min
                and not clamped
            ):
                relu = f"{node.input[0]}_clamped_at_zero"
                nodes.append(helper.make_node("Relu", [node.input[0]], [relu], name=f"{node.name}_clamp"))
                node.input[0] = relu
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def activations_as_uint8(model: onnx.ModelProto) -> None:
    """Write each activation's int8 Q/DQ pair as uint8 with the zero point moved up by 128 (in place): the same
    numbers.

    On x86 onnxruntime's integer kernels take u8 activations, and it converts an s8
    quantize to u8 only where one dequantize reads it: a tensor read by two convolutions
    (a ResNet block's input, read by its first convolution and its shortcut) kept s8 and
    left every convolution around it in float (8 of ResNet-50's 53). Weights stay s8 (its
    kernels are u8 x s8); the graph and its host plan keep s8, which computes the same.
    Only a quantize read by dequantizes alone moves, with them: an int8 tensor the region
    takes or gives keeps its type.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    moved: dict[str, str] = {}

    def shift(node: onnx.NodeProto) -> None:
        zero_point = initializers[node.input[2]]
        if zero_point.name not in moved:
            shifted = numpy_helper.to_array(zero_point).astype(np.int16) + 128
            copy = graph.initializer.add()
            copy.CopyFrom(numpy_helper.from_array(shifted.astype(np.uint8), f"{zero_point.name}_u8"))
            moved[zero_point.name] = copy.name
        node.input[2] = moved[zero_point.name]

    for node in graph.node:
        if node.op_type != "QuantizeLinear" or len(node.input) < 3 or node.output[0] in outputs:
            continue
        zero_point = initializers.get(node.input[2])
        users = readers.get(node.output[0], [])
        if zero_point is None or zero_point.data_type != onnx.TensorProto.INT8 or node.input[0] in initializers:
            continue
        if not users or any(u.op_type != "DequantizeLinear" or u.input[2] not in initializers for u in users):
            continue
        for pair in [node, *users]:
            shift(pair)
    read = {name for node in graph.node for name in node.input}
    for i in reversed(range(len(graph.initializer))):  # the int8 zero points only activations read
        if graph.initializer[i].name in moved and graph.initializer[i].name not in read:
            del graph.initializer[i]


def dynamic_matmuls_as_integer(model: onnx.ModelProto) -> bool:
    """Write each dynamically quantized MatMul as onnxruntime's ``quantize_dynamic`` does (in place):
    ``MatMulInteger(x_q, w_q, x_zero, w_zero) -> Cast -> Mul(x_scale * w_scale)``.

    The graph (and the host plan) says ``DynamicQuantizeLinear -> DequantizeLinear -> MatMul <-
    DequantizeLinear(w_q)``: the same function, with the sum taken in float. onnxruntime fuses
    only the integer form, into ``DynamicQuantizeMatMul`` (a bias Add with it); the float form
    it turns into a dequantize of the activation and a weight-only ``MatMulNBits``, which computes
    in float. The int32 sum is exact, the float one rounds: the two agree to float rounding.
    True where it rewrote a MatMul.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    producer = {name: node for node in graph.node for name in node.output}
    nodes: list[onnx.NodeProto] = []
    rewritten = False
    for node in graph.node:
        x_dq, w_dq = (producer.get(name) for name in node.input) if node.op_type == "MatMul" else (None, None)
        dynamic = producer.get(x_dq.input[0]) if x_dq is not None and x_dq.op_type == "DequantizeLinear" else None
        if (
            dynamic is None or dynamic.op_type != "DynamicQuantizeLinear" or list(x_dq.input) != list(dynamic.output)
            or w_dq is None or w_dq.op_type != "DequantizeLinear" or len(w_dq.input) < 3
            or any(name not in initializers for name in w_dq.input)
            or initializers[w_dq.input[0]].data_type != onnx.TensorProto.INT8
            or len(initializers[w_dq.input[0]].dims) != 2
            or (len(initializers[w_dq.input[1]].dims) == 1 and _attribute(w_dq, "axis", 1) not in (1, -1))
        ):  # fmt: skip
            nodes.append(node)
            continue
        out = node.output[0]
        q, w_q = dynamic.output[0], w_dq.input[0]
        nodes += [
            helper.make_node("MatMulInteger", [q, w_q, dynamic.output[2], w_dq.input[2]], [f"{out}_int32"]),
            helper.make_node("Cast", [f"{out}_int32"], [f"{out}_sum"], to=onnx.TensorProto.FLOAT),
            helper.make_node("Mul", [dynamic.output[1], w_dq.input[1]], [f"{out}_scale"]),
            helper.make_node("Mul", [f"{out}_sum", f"{out}_scale"], [out]),
        ]
        rewritten = True
    if not rewritten:
        return False
    read = {name for node in nodes for name in node.input} | {o.name for o in graph.output}
    kept = [n for n in nodes if n.op_type != "DequantizeLinear" or any(o in read for o in n.output)]
    del graph.node[:]
    graph.node.extend(kept)
    return True


def without_dynamic_activation_quantization(recipe: bytes) -> bytes:
    """``recipe`` with every ``DequantizeLinear(DynamicQuantizeLinear(x))`` read as ``x`` itself: the form that the
    float kernels run (int8 weights, dequantized once by onnxruntime; activations in float), as their session
    drops a static recipe's activation Q/DQ pairs (``session.enable_quant_qdq_cleanup``, which does not know the
    dynamic pair). On BERT-base the pairs cost 1.5% of a run on float kernels, and their rounding half of the
    error: 0.024 relative L2 to fp32 with them, 0.018 without."""
    model = onnx.load_from_string(recipe)
    graph = model.graph
    quantized_from = {node.output[0]: node.input[0] for node in graph.node if node.op_type == "DynamicQuantizeLinear"}
    plain = {
        node.output[0]: quantized_from[node.input[0]]
        for node in graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in quantized_from
    }
    if not plain:
        return recipe
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        node.input[:] = [plain.get(name, name) for name in node.input]
    for output in graph.output:  # a graph output made by such a pair stays: an Identity names it
        if output.name in plain:
            graph.node.append(helper.make_node("Identity", [plain[output.name]], [output.name]))
    kept = [n for n in graph.node if not (n.op_type == "DequantizeLinear" and n.output[0] in plain)]
    read = {name for node in kept for name in node.input} | outputs
    kept = [n for n in kept if n.op_type != "DynamicQuantizeLinear" or any(o in read for o in n.output)]
    del graph.node[:]
    graph.node.extend(kept)
    return model.SerializeToString()


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def onnxruntime_codegen(region: Region, options: dict | None = None) -> ModuleArtifact:
    """``options``: the backend's build options (``precision``: fp32, or int8 for a graph the build quantized)."""
    precision = (options or {}).get("precision", "fp32")
    graph = region.as_graph()
    if precision == "fp32" and quantized_before(graph):
        precision = "int8"
    weights = _SharedWeights()
    model = write_recipe(graph, precision, exports=ONNXRUNTIME_EXPORTS, store=weights, label="onnxruntime")
    float_forms = {}
    if precision == "int8":
        activations_as_uint8(model)
        clamps_kept_explicit(model)
        before = model.SerializeToString()
        # MatMulInteger runs on integer kernels whatever the session says: a CPU without VNNI (where they saturate
        # and lose to float) gets a float form, whose weights onnxruntime's float kernels dequantize once; the
        # emulated kernels run the quantized function itself, activations quantized at run time as written
        if dynamic_matmuls_as_integer(model):
            float_forms = {"recipe_float": without_dynamic_activation_quantization(before), "recipe_emulated": before}
    recipe = model.SerializeToString()
    fallback = host_fallback(graph)  # after the recipe: lowering the plan adds copies of aliased outputs
    weights.resolve(fallback.arrays)
    try:  # the run side's own check: what it would refuse is a build error here
        facts = check_recipe(recipe, weights.arrays, f"onnxruntime recipe of {region.id}")
    except BundleError as e:
        raise BuildError(str(e)) from None
    for field, form in float_forms.items():
        try:
            check_recipe(form, weights.arrays, f"onnxruntime {field} of {region.id}")
        except BundleError as e:
            raise BuildError(str(e)) from None
    payloads = {"recipe": recipe, **float_forms, **fallback.payloads()}
    if weights.extra:
        payloads["recipe_weights"] = bytes(weights.extra)
    specs = OnnxRuntimeSpecs(
        region=region.id,
        inputs=tuple(spec_of(v) for v in graph.inputs),
        outputs=tuple(spec_of(v) for v in graph.outputs),
        weights=tuple(weights.refs),
        recipe_constants=tuple(weights.extra_records),
        precision=precision,
    )
    notes = []
    unbounded = Footprint(facts.inputs, facts.dims, facts.operands, facts.nodes, facts.types, list(facts.inputs),
                          facts.outputs, facts.shapes).unbounded  # fmt: skip
    if facts.unverified is not None or unbounded is not None:
        why = facts.unverified or f"its memory cannot be bounded: {unbounded}"
        notes.append(f"onnxruntime: {region.id} will run on the host plan: {why} (see docs/onnxruntime.md)")
    shared = sum(ref.payload == "fallback_weights" for ref in weights.refs)
    if shared != len(weights.refs):
        notes.append(
            f"onnxruntime: {region.id} shares {shared} of its recipe's {len(weights.refs)} weights with its host "
            f"plan; the other {len(weights.refs) - shared} take {len(weights.extra)} bytes"
        )
    return ModuleArtifact(payloads, specs.to_record(), notes)
