"""Microsoft contrib ops onnxruntime ships (aot/ir/contrib.py), carried as the file wrote them.

Each allow-listed ``com.microsoft`` node becomes one ``onnxruntime_contrib`` op: its
attributes as plain values (ints, floats, strings and their lists, kept as JSON text), its inputs with the slots they fill (ONNX marks a skipped
optional input with an empty name; the recipe writes it back the same way).
"""

from __future__ import annotations

from onnx import AttributeProto, helper

from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import converter
from aot.ir.contrib import CONTRIB_OPS, DOMAIN, OP, encode_attributes
from aot.ir.graph import Value

#: Attribute kinds a recipe can write back as they were (tensors and graphs are not carried).
PLAIN_KINDS = frozenset(
    {AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS, AttributeProto.FLOATS}
)


@converter(*(f"{DOMAIN}.{name}" for name in CONTRIB_OPS))
def _contrib(ctx: NodeContext) -> list[Value]:
    attributes = {}
    for proto in ctx.node.attribute:
        if proto.type not in PLAIN_KINDS:
            raise ctx.unsupported(f"attribute {proto.name!r} of type {AttributeProto.AttributeType.Name(proto.type)}")
        value = helper.get_attribute_value(proto)
        attributes[proto.name] = value.decode() if proto.type == AttributeProto.STRING else value
    slots = [i for i, v in enumerate(ctx.inputs) if v is not None]
    results = ctx.emit_node(
        OP, [ctx.inputs[i] for i in slots], op_type=ctx.node.op_type, domain=DOMAIN,
        attributes=encode_attributes(attributes), slots=slots,
    )  # fmt: skip
    return results[: len(ctx.node.output)]
