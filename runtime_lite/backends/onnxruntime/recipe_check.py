"""Check an ONNX recipe from a bundle before onnxruntime parses it, without onnx or onnxruntime.

onnxruntime trusts the model it is handed more than a bundle deserves: an
initializer whose ``external_data`` names a ``location`` is read from that path
(``../../etc/shadow``, or onnxruntime's own ``*/_ORT_MEM_ADDR_/*``, a raw
address in the process), a custom-domain op loads whatever kernel registered
it, a subgraph or a model-local function hides more of the same. So a recipe
reaches onnxruntime only after this walk of its protobuf wire format (a few
hundred lines of ONNX's ``onnx.proto``, read field by field in pure Python)
has seen that it holds:

* only the fields of ModelProto / GraphProto / NodeProto / AttributeProto /
  TensorProto that a recipe writer writes (no functions, training info,
  sparse tensors, subgraphs, or fields this reader does not know);
* default-domain ops from :data:`ALLOWED_OPS` (what aot's recipe writer emits),
  under one default-domain opset import within :data:`OPSETS`, IR version
  <= :data:`MAX_IR_VERSION`, and the contrib ops of :data:`CONTRIB_OPS` that
  onnxruntime ships (its own kernels, under the one opset of their domain);
* no external data, except on initializers the caller supplies itself, whose
  location is the fixed placeholder :data:`PLACEHOLDER` and whose dtype and
  dims match the array the caller hands onnxruntime;
* at most :data:`MAX_NODES` nodes, :data:`MAX_RECIPE_BYTES` bytes, and no more nodes than the
  bundle's load budget has left (``runtime_lite/execution/load_budget.py``: by the bundle's size);
* convolutions and pools whose kernel fits their input, following the shapes
  onnxruntime will infer (``shapes.py``: onnxruntime aborts the process on one that
  does not); where the walk cannot follow a shape, ``RecipeFacts.unverified`` says
  why and the caller keeps the recipe from onnxruntime.

Anything else is a one-line BundleError naming the recipe's field.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from runtime_lite.backends.onnxruntime.shapes import BadGeometry, Node, walk
from runtime_lite.errors import BundleError
from runtime_lite.execution.load_budget import current_load_budget, refusal

#: The location an external-data initializer must name: a placeholder for the bundle's own blob,
#: handed to onnxruntime as an in-memory file of its own (session.py renames it in place); never a path.
PLACEHOLDER = "aot-bundle-weights"
#: protobuf's own limit on one message.
MAX_RECIPE_BYTES = (1 << 31) - 1
MAX_NODES = 1_000_000
MAX_IR_VERSION = 10
#: Default-domain opsets a recipe may import (aot writes 17).
OPSETS = range(13, 22)
DEFAULT_DOMAINS = ("", "ai.onnx")

#: The ONNX ops aot's recipe writer emits (aot/compiler/backends/recipe.py and the onnxruntime
#: backend's extra lowerings). The build checks every recipe it writes against this list, so the
#: writer and this reader cannot drift apart silently.
ALLOWED_OPS = frozenset(
    {
        # element-wise and activations
        *("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Neg", "Floor", "Ceil"),
        *("Sin", "Cos", "Tan", "Softplus", "Softsign", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Clip"),
        *("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Sign", "Round", "Mod"),
        *("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not", "Where"),
        # normalisation, softmax, linear algebra, convolution, pooling
        *("Softmax", "LogSoftmax", "LRN", "BatchNormalization", "InstanceNormalization", "LayerNormalization"),
        *("MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool"),
        *("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum", "ArgMax", "ArgMin", "CumSum"),
        # layout and indexing
        *("Flatten", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Transpose", "Reshape", "Pad", "Resize"),
        *("Expand", "Tile", "Gather", "GatherElements", "GatherND", "Cast", "IsNaN", "IsInf", "Trilu", "Shape"),
        *("Range", "ConstantOfShape"),
        # recurrent layers over a run-time sequence length
        *("LSTM", "GRU", "RNN"),
        # int8
        *("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger"),
    }
)

#: Microsoft's contrib ops onnxruntime ships that a recipe may hold (aot/ir/contrib.py writes them), by domain,
#: and the one opset of each domain a recipe may import. The walk names them ``com.microsoft.Gelu``.
CONTRIB_OPS = {
    "com.microsoft": frozenset({"Gelu", "FastGelu", "QuickGelu", "BiasGelu", "FusedMatMul", "DynamicQuantizeLSTM"}),
}
CONTRIB_OPSETS = {"com.microsoft": 1}
#: The host plan op that stands for a contrib node in a region's fallback plan: no host kernel computes it.
CONTRIB_OP = "onnxruntime_contrib"

# Wire types
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
# TensorProto.DataLocation
EXTERNAL = 1
#: ONNX TensorProto.DataType -> numpy dtype, for checking a supplied weight against its placeholder.
ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
    10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}  # fmt: skip

# Field numbers (onnx.proto) each message may carry; any other is refused.
MODEL_FIELDS = {1: "ir_version", 2: "producer_name", 3: "producer_version", 4: "domain", 5: "model_version",
                6: "doc_string", 7: "graph", 8: "opset_import", 14: "metadata_props"}  # fmt: skip
OPSET_FIELDS = {1: "domain", 2: "version"}
GRAPH_FIELDS = {1: "node", 2: "name", 5: "initializer", 10: "doc_string", 11: "input", 12: "output", 13: "value_info"}
NODE_FIELDS = {1: "input", 2: "output", 3: "name", 4: "op_type", 5: "attribute", 6: "doc_string", 7: "domain"}
ATTRIBUTE_FIELDS = {1: "name", 2: "f", 3: "i", 4: "s", 5: "t", 7: "floats", 8: "ints", 9: "strings",
                    10: "tensors", 13: "doc_string", 20: "type"}  # fmt: skip
TENSOR_FIELDS = {1: "dims", 2: "data_type", 3: "segment", 4: "float_data", 5: "int32_data", 6: "string_data",
                 7: "int64_data", 8: "name", 9: "raw_data", 10: "double_data", 11: "uint64_data",
                 12: "doc_string", 13: "external_data", 14: "data_location"}  # fmt: skip
ENTRY_FIELDS = {1: "key", 2: "value"}
VALUE_INFO_FIELDS = {1: "name", 2: "type", 3: "doc_string"}
TYPE_FIELDS = {1: "tensor_type", 6: "denotation"}
TENSOR_TYPE_FIELDS = {1: "elem_type", 2: "shape"}
SHAPE_FIELDS = {1: "dim"}
DIMENSION_FIELDS = {1: "dim_value", 2: "dim_param", 3: "denotation"}
#: Small operands (shapes, axes, scales) read for the shape walk: at most this many elements.
MAX_OPERAND_ELEMENTS = 64
#: TensorProto data types whose small values the shape walk reads: (struct format, its typed field).
OPERAND_TYPES = {1: ("f", "float_data"), 6: ("i", "int32_data"), 7: ("q", "int64_data")}
#: What a refused field is, when it is one onnx.proto has (a clearer reason than "unknown").
NAMED_REFUSALS = {
    ("ModelProto", 20): "training_info",
    ("ModelProto", 25): "functions (model-local functions)",
    ("GraphProto", 15): "sparse_initializer",
    ("GraphProto", 14): "quantization_annotation",
    ("NodeProto", 8): "overload (a function call)",
    ("AttributeProto", 6): "g (a subgraph)",
    ("AttributeProto", 11): "graphs (subgraphs)",
    ("AttributeProto", 21): "ref_attr_name (a function attribute)",
    ("AttributeProto", 22): "sparse_tensor",
    ("AttributeProto", 23): "sparse_tensors",
}


@dataclass
class RecipeFacts:
    """What the walk saw: enough for tools and tests to say what a recipe holds."""

    ir_version: int = 0
    opset: int = 0
    op_types: dict[str, int] = field(default_factory=dict)
    #: Initializers whose data the caller supplies (external placeholders), by name.
    external: list[str] = field(default_factory=list)
    inline_initializers: int = 0
    #: Why onnxruntime should not get this recipe although it passed (a shape the walk could not follow).
    unverified: str | None = None
    # What the shape walk (shapes.py) reads: graph input shapes, initializer dims, small operands, nodes.
    inputs: dict = field(default_factory=dict, repr=False)
    dims: dict = field(default_factory=dict, repr=False)
    operands: dict = field(default_factory=dict, repr=False)
    #: ONNX element types of the graph inputs and initializers, by name (footprint.py follows them through).
    types: dict = field(default_factory=dict, repr=False)
    #: Every value's shape the walk followed from the declared inputs (a symbolic dim is None).
    shapes: dict = field(default_factory=dict, repr=False)
    nodes: list = field(default_factory=list, repr=False)
    #: The graph's outputs by name: onnxruntime keeps every one alive to the end of a run, fetched or not.
    outputs: list = field(default_factory=list, repr=False)
    #: Where each placeholder's location text (:data:`PLACEHOLDER`) starts in the recipe, by initializer name:
    #: session.py names each one's weight there, in place (the same length: no other byte moves).
    placeholder_at: dict = field(default_factory=dict, repr=False)


class _Refused(Exception):
    """Why the walk stopped; turned into one BundleError by ``check_recipe``."""


def read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The protobuf varint at ``pos`` and the position after it; refused where truncated or over 10 bytes."""
    if pos < len(data) and data[pos] < 0x80:  # most keys, lengths and enums are one byte
        return data[pos], pos + 1
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Refused("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise _Refused("a varint longer than 10 bytes")


def _fields(data: memoryview, message: str, known: Mapping[int, str]) -> Iterator[tuple[str, int, int | memoryview]]:
    """(field name, wire type, value) of each field of one message; a field outside ``known`` is refused.

    The one-byte varints (nearly every key, length and enum) are read inline: this loop
    is most of the check's time (a ViT-B/16 recipe has some 7,000 fields).
    """
    pos, end = 0, len(data)
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos)
        name = known.get(key >> 3)
        if name is None:
            number = key >> 3
            what = NAMED_REFUSALS.get((message, number), f"unknown field {number}")
            raise _Refused(f"{message} has {what}, which a recipe may not hold")
        wire = key & 7
        if wire == LEN:
            if pos < end and data[pos] < 0x80:
                size, pos = data[pos], pos + 1
            else:
                size, pos = read_varint(data, pos)
            stop = pos + size
            if stop > end:
                raise _Refused(f"{message}.{name} runs past the end of its message")
            value, pos = data[pos:stop], stop
        elif wire == VARINT:
            if pos < end and data[pos] < 0x80:
                value, pos = data[pos], pos + 1
            else:
                value, pos = read_varint(data, pos)
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > end:
                raise _Refused(f"{message}.{name} runs past the end of its message")
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        else:
            raise _Refused(f"{message}.{name} has wire type {wire} (groups are not ONNX)")
        yield name, wire, value


def _text(value: int | memoryview, where: str, part: str = "") -> str:
    """``value`` as UTF-8 text; ``where`` + ``part`` names it in the refusal (joined only then)."""
    if not isinstance(value, memoryview):
        raise _Refused(f"{where}{part} is not a string")
    try:
        return str(value, "utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"{where}{part} is not UTF-8") from None


def _packed_ints(wire: int, value: int | memoryview) -> list[int]:
    if wire == VARINT:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        number, pos = read_varint(value, pos)
        out.append(number)
    return out


def _signed(number: int) -> int:
    return number - (1 << 64) if number >= 1 << 63 else number


def _check_tensor(
    data: memoryview, where: str, supplied: Mapping[str, np.ndarray], facts: RecipeFacts
) -> dict[str, object]:
    """Check one tensor (an initializer, or an attribute's with ``facts`` its own); its data type, dims and
    small values (None where it has none the walk reads)."""
    name, dims, data_type, location, external, raw, typed = "", [], 0, 0, {}, None, []
    where_text = None  # the location's text, as a view into the recipe
    for key, wire, value in _fields(data, "TensorProto", TENSOR_FIELDS):
        if key == "raw_data":
            raw = value
        elif key in ("float_data", "int32_data", "int64_data"):
            typed.append((key, wire, value))
        elif key == "name":
            name = _text(value, where, ".name")
        elif key == "dims":
            dims += [_signed(d) for d in _packed_ints(wire, value)]
        elif key == "data_type":
            data_type = value
        elif key == "data_location":
            location = value
        elif key == "external_data":
            views = {k: v for k, _, v in _fields(value, "StringStringEntry", ENTRY_FIELDS)}
            entry = {k: _text(v, where, ".external_data") for k, v in views.items()}
            external[entry.get("key", "")] = entry.get("value", "")
            if entry.get("key") == "location":
                where_text = views.get("value")
    if location not in (0, EXTERNAL):
        raise _Refused(f"{where} ({name!r}) has data_location {location}")
    facts.dims[name] = tuple(dims)
    facts.types[name] = data_type
    if location != EXTERNAL and not external:
        facts.inline_initializers += 1
        values = _small_values(data_type, dims, raw, typed)
        if values is not None:
            facts.operands[name] = values
        return {"data_type": data_type, "dims": tuple(dims), "values": values}
    if name not in supplied:
        raise _Refused(f"{where} ({name!r}) points its data outside the recipe ({external.get('location', '?')!r})")
    if set(external) - {"location"} or external.get("location") != PLACEHOLDER or location != EXTERNAL:
        raise _Refused(f"{where} ({name!r}) has external data {external}, not the bundle's placeholder")
    array = supplied[name]
    if ONNX_DTYPES.get(data_type) != array.dtype.name or tuple(dims) != array.shape:
        raise _Refused(
            f"{where} ({name!r}) is declared {ONNX_DTYPES.get(data_type, data_type)}{dims} "
            f"but the bundle's weight is {array.dtype.name}{list(array.shape)}"
        )
    if name in facts.external:
        raise _Refused(f"{where} ({name!r}) is a second initializer of that name")
    facts.external.append(name)
    facts.placeholder_at[name] = _address(where_text)  # made relative to the recipe when the walk ends
    return {"data_type": data_type, "dims": tuple(dims), "values": None}


def _address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data


def _small_values(data_type: int, dims: list[int], raw: memoryview | None, typed: list) -> list | None:
    """The values of a small int or float initializer (a shape, axes, scales), or None."""
    if data_type not in OPERAND_TYPES or any(d < 0 for d in dims):
        return None
    count = math.prod(dims)  # exact (np.prod would wrap a hostile product around int64), and 50x cheaper
    if count > MAX_OPERAND_ELEMENTS:
        return None
    code, typed_field = OPERAND_TYPES[data_type]
    if raw is not None:
        if len(raw) != count * struct.calcsize(code):
            return None
        return list(struct.unpack(f"<{count}{code}", raw))
    values: list = []
    for key, wire, value in typed:
        if key != typed_field:
            return None
        if data_type == 1:
            values += _floats(value) if wire == LEN else [_float(value)] if wire == FIXED32 else []
        else:
            values += [_signed(v) for v in _packed_ints(wire, value)]
    return values if len(values) == count else None


def _float(bits: int) -> float:
    return struct.unpack("<f", bits.to_bytes(4, "little"))[0]


def _floats(packed: memoryview) -> list[float]:
    whole = len(packed) // 4 * 4
    return list(struct.unpack(f"<{whole // 4}f", packed[:whole]))


def _attribute(data: memoryview, where: str, facts: RecipeFacts) -> tuple[str, object]:
    """(name, value) of one attribute: an int, a float, bytes, or a list of ints or floats."""
    name, value = "", None
    ints: list[int] = []
    floats: list[float] = []
    for key, wire, field_value in _fields(data, "AttributeProto", ATTRIBUTE_FIELDS):
        if key == "name":
            name = _text(field_value, where, ".name")
        elif key == "i":
            value = _signed(field_value)
        elif key == "f":
            value = _float(field_value) if wire == FIXED32 else None
        elif key == "i" and wire != VARINT:
            value = None
        elif key == "s":
            value = bytes(field_value).decode("utf-8", "replace") if isinstance(field_value, memoryview) else None
        elif key == "ints":
            ints += [_signed(v) for v in _packed_ints(wire, field_value)]
        elif key == "floats":
            if wire == LEN:
                floats += _floats(field_value)
            elif wire == FIXED32:
                floats.append(_float(field_value))
        elif key in ("t", "tensors"):  # a tensor attribute may not point outside the recipe either, nor stand
            # for an initializer of the walk (its own facts): the walk reads its type, dims and small values
            tensor = _check_tensor(field_value, f"{where}.{key}", {}, RecipeFacts())
            value = tensor if key == "t" else None
    return name, ints or floats or value


def _check_node(data: memoryview, where: str, supplied: Mapping[str, np.ndarray], facts: RecipeFacts) -> None:
    op_type, domain, attributes, inputs, outputs = "", "", [], [], []
    for key, _, value in _fields(data, "NodeProto", NODE_FIELDS):
        if key == "input":
            inputs.append(_text(value, where, ".input"))
        elif key == "output":
            outputs.append(_text(value, where, ".output"))
        elif key == "op_type":
            op_type = _text(value, where, ".op_type")
        elif key == "domain":
            domain = _text(value, where, ".domain")
        elif key == "attribute":
            attributes.append(value)
    if domain in CONTRIB_OPS:
        if op_type not in CONTRIB_OPS[domain]:
            raise _Refused(f"{where} is op {op_type!r} of domain {domain!r}, which is not on the contrib allow-list")
        op_type = f"{domain}.{op_type}"
    elif domain not in DEFAULT_DOMAINS:
        raise _Refused(
            f"{where} is op {op_type!r} of domain {domain!r}; a recipe holds default-domain ops and "
            "allow-listed com.microsoft ops only"
        )
    elif op_type not in ALLOWED_OPS:
        raise _Refused(f"{where} is op {op_type!r}, which is not on the recipe allow-list")
    facts.op_types[op_type] = facts.op_types.get(op_type, 0) + 1
    attrs = dict(_attribute(attribute, f"{where}.attribute[{i}]", facts) for i, attribute in enumerate(attributes))
    facts.nodes.append(Node(op_type, inputs, outputs, attrs, where))


def _input_shape(data: memoryview, facts: RecipeFacts) -> None:
    """A graph input's declared shape (dims as ints, None where symbolic), for the shape walk."""
    name, dims, tensor, elem_type = "", [], False, 0
    for key, _, value in _fields(data, "ValueInfoProto", VALUE_INFO_FIELDS):
        if key == "name":
            name = _text(value, "graph.input.name")
        elif key == "type":
            for type_key, _, type_value in _fields(value, "TypeProto", TYPE_FIELDS):
                if type_key != "tensor_type":
                    continue
                for tensor_key, _, tensor_value in _fields(type_value, "TypeProto.Tensor", TENSOR_TYPE_FIELDS):
                    if tensor_key == "elem_type":
                        elem_type = tensor_value
                    elif tensor_key == "shape":
                        tensor = True
                        for _, _, dim in _fields(tensor_value, "TensorShapeProto", SHAPE_FIELDS):
                            entry = {k: v for k, _, v in _fields(dim, "Dimension", DIMENSION_FIELDS)}
                            dims.append(_signed(entry["dim_value"]) if "dim_value" in entry else None)
    if tensor:
        facts.inputs[name] = tuple(dims)
    if isinstance(elem_type, int) and elem_type:
        facts.types[name] = elem_type


def _check_graph(
    data: memoryview, supplied: Mapping[str, np.ndarray], facts: RecipeFacts, max_nodes: int = MAX_NODES
) -> None:
    nodes = initializers = 0
    for key, _, value in _fields(data, "GraphProto", GRAPH_FIELDS):
        if key == "node":
            if nodes >= max_nodes:
                raise _Refused(f"graph has more than {max_nodes:,} nodes")
            _check_node(value, f"graph.node[{nodes}]", supplied, facts)
            nodes += 1
        elif key == "initializer":
            _check_tensor(value, f"graph.initializer[{initializers}]", supplied, facts)
            initializers += 1
        elif key == "input":
            _input_shape(value, facts)
        elif key == "output":
            for field_key, _, field_value in _fields(value, "ValueInfoProto", VALUE_INFO_FIELDS):
                if field_key == "name":
                    facts.outputs.append(_text(field_value, "graph.output.name"))


def check_recipe(recipe: bytes | memoryview, supplied: Mapping[str, np.ndarray], where: str) -> RecipeFacts:
    """Walk ``recipe`` (ONNX ModelProto bytes); BundleError naming ``where`` unless it is safe to hand onnxruntime.

    ``supplied``: the initializers the caller will hand onnxruntime itself (name -> array); every one
    must be an external-data placeholder in the recipe, and only those may be.
    """
    data = memoryview(recipe).cast("B")
    facts = RecipeFacts()
    budget = current_load_budget()  # the bundle's: its recipes together may hand onnxruntime so many nodes
    max_nodes = MAX_NODES if budget is None else min(MAX_NODES, budget.left())
    try:
        if len(data) > MAX_RECIPE_BYTES:
            raise _Refused(f"{len(data)} bytes, past the {MAX_RECIPE_BYTES} a recipe may have")
        graphs, opsets = 0, []
        for key, _, value in _fields(data, "ModelProto", MODEL_FIELDS):
            if key == "ir_version":
                facts.ir_version = value
            elif key == "opset_import":
                entry = dict((k, v) for k, _, v in _fields(value, "OperatorSetId", OPSET_FIELDS))
                opsets.append(
                    (_text(entry.get("domain", memoryview(b"")), "opset_import.domain"), entry.get("version", 0))
                )
            elif key == "graph":
                graphs += 1
                if graphs > 1:
                    raise _Refused("ModelProto has more than one graph")
                try:
                    _check_graph(value, supplied, facts, max_nodes)
                except _Refused:
                    if budget is None or len(facts.nodes) < max_nodes or max_nodes == MAX_NODES:
                        raise  # not the budget: the graph itself
                    raise BundleError(refusal(where, budget.limit, budget.bundle_bytes)) from None
        if not 1 <= facts.ir_version <= MAX_IR_VERSION:
            raise _Refused(f"IR version {facts.ir_version} is outside 1..{MAX_IR_VERSION}")
        if graphs != 1:
            raise _Refused("ModelProto has no graph")
        default = [version for domain, version in opsets if domain in DEFAULT_DOMAINS]
        others = [(domain, version) for domain, version in opsets if domain not in DEFAULT_DOMAINS]
        if len(default) != 1 or len({d for d, _ in others}) != len(others):
            raise _Refused(f"opset imports {opsets}: a recipe imports the default domain once")
        for domain, version in others:
            if CONTRIB_OPSETS.get(domain) != version:
                raise _Refused(f"opset import {domain!r} version {version}: a recipe imports only {CONTRIB_OPSETS}")
        facts.opset = default[0]
        if facts.opset not in OPSETS:
            raise _Refused(f"opset {facts.opset} is outside {OPSETS.start}..{OPSETS.stop - 1}")
        if budget is not None:
            budget.charge(len(facts.nodes), where)
        start = _address(data) if len(data) else 0
        facts.placeholder_at = {name: at - start for name, at in facts.placeholder_at.items()}
        missing = sorted(set(supplied) - set(facts.external))
        if missing:
            raise _Refused(f"the bundle supplies weight {missing[0]!r}, which no initializer of the recipe holds")
        try:
            facts.shapes, facts.unverified = walk(facts.inputs, facts.dims, facts.operands, facts.nodes)
        except BadGeometry as e:
            raise _Refused(f"has geometry onnxruntime cannot take: {e}") from None
    except _Refused as e:
        raise BundleError(f"bundle field '{where}': the ONNX recipe {e}") from None
    return facts


__all__ = ["ALLOWED_OPS", "CONTRIB_OP", "CONTRIB_OPS", "PLACEHOLDER", "RecipeFacts", "check_recipe", "read_varint"]
