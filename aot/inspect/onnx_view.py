"""A bundle's partitioned graph as an ONNX file, for Netron and other ONNX viewers.

Users already open models in Netron; this writes the graph ``aot-inspect`` sees
(host instructions and every region's ops, wired by their data flow) as ONNX
nodes in the ``aot.view`` domain, each annotated with ``backend``, ``region`` and
``composite`` attributes, so Netron's node panel tells where every op runs. It is a
picture of the bundle, not a model to run: weights are not copied, and op types
are aot's canonical names.
"""

from __future__ import annotations

from onnx import TensorProto, helper

from aot.inspect.bundle_view import BundleView

DOMAIN = "aot.view"
_DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int64": TensorProto.INT64,
           "int32": TensorProto.INT32, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
           "bool": TensorProto.BOOL, "float64": TensorProto.DOUBLE}  # fmt: skip


def _value_info(spec: dict):
    dtype = _DTYPES.get(spec.get("dtype"), TensorProto.UNDEFINED)
    return helper.make_tensor_value_info(spec["name"], dtype, spec.get("shape"))


def to_onnx(view: BundleView):
    """The view as an ``onnx.ModelProto`` whose nodes carry backend, region and composite attributes."""
    signature = view.header["signature"]
    tensor = [f"{i}:{node.name}" for i, node in enumerate(view.nodes)]
    inputs = [i for i, n in enumerate(view.nodes) if n.backend == "input"]
    for i, spec in zip(inputs, signature["inputs"]):
        tensor[i] = spec["name"]
    outputs = [i for i, n in enumerate(view.nodes) if n.is_output]
    for i, spec in zip(outputs, signature["outputs"]):
        if view.nodes[i].backend != "input":
            tensor[i] = spec["name"]
    nodes = []
    for i, node in enumerate(view.nodes):
        if node.backend == "input":
            continue
        attrs = {"backend": node.backend}
        if node.region:
            attrs["region"] = node.region
        if node.composite:
            attrs["composite"] = node.composite
        nodes.append(helper.make_node(node.op, [tensor[j] for j in node.inputs], [tensor[i]], node.name,
                                      domain=DOMAIN, **attrs))  # fmt: skip
    graph = helper.make_graph(
        nodes,
        view.header.get("model", {}).get("name") or "bundle",
        [_value_info(spec) for spec in signature["inputs"]],
        [_value_info({**spec, "name": tensor[i]}) for i, spec in zip(outputs, signature["outputs"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(DOMAIN, 1)], producer_name="aot-inspect")
    model.doc_string = f"partitioned view of {view.path}: " + ", ".join(
        f"{backend} {n} ops" for backend, n in view.ops_by_backend().items()
    )
    return model


__all__ = ["to_onnx"]
