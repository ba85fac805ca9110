"""The nine model-zoo architectures shipped inside the onnx wheel, with weights that mean something.

The wheel's ``light`` models replace every weight with ``ConstantOfShape(0.02)``,
which makes every class score equal: a softmax over them is flat, so comparing
outputs proves nothing (and a 1-ulp difference in the logits flips it). For
accuracy work we materialise each weight as a random tensor drawn the way a
trained network's would be (He-normal convolutions, batch-norm statistics near
identity), which keeps activations in a realistic range through 100+ layers.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

ZOO_MODELS = (
    "resnet50",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "bvlc_alexnet",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def zoo_model_path(name: str) -> str:
    """Where the onnx wheel keeps model ``name``."""
    if name not in ZOO_MODELS:
        raise ValueError(f"unknown zoo model {name!r}; choose from {', '.join(ZOO_MODELS)}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def _random_weight(
    shape: tuple[int, ...], op: str, index: int, attrs: dict, rng: np.random.Generator, role: str
) -> np.ndarray:
    size = tuple(int(d) for d in shape)
    if op == "Conv" and index == 1:
        weight = rng.standard_normal(size, dtype=np.float32)
        weight *= np.float32(np.sqrt(2.0 / max(int(np.prod(size[1:])), 1)))  # in place: VGG's are 100s of MB
        return weight
    if op == "Gemm" and index == 1:
        fan_in = size[1] if attrs.get("transB", 0) else size[0]
        weight = rng.standard_normal(size, dtype=np.float32)
        weight *= np.float32(np.sqrt(2.0 / fan_in))
        return weight
    if op == "BatchNormalization" and index == 1 and role == "residual":
        return rng.uniform(0.1, 0.3, size)  # small residual branches, as trained ResNets end up
    if op == "BatchNormalization" and index in (1, 4):  # scale, variance
        return rng.uniform(0.5, 1.5, size)
    if op == "Mul":
        return rng.uniform(0.5, 1.5, size)
    return rng.uniform(-0.1, 0.1, size)


_SHAPE_ONLY = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity")


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the shape tensors the replaced ConstantOfShape nodes read (and their graph inputs).

    Deleted in place: re-adding the kept ones would copy every weight into the model's
    protobuf arena, which keeps the old copies until the model is freed (twice the memory).
    """
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    unused = {t.name for t in graph.initializer if t.name not in used}
    for field in (graph.initializer, graph.input):
        for i in reversed(range(len(field))):
            if field[i].name in unused:
                del field[i]


def _classifier_output(graph: onnx.GraphProto) -> str:
    """The logits: the final softmax's input, or the graph output when there is no softmax."""
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs:
            return node.input[0]
    return graph.output[0].name


def _weight_roles(graph: onnx.GraphProto) -> dict[str, str]:
    """Mark weights of batch norms that end a residual branch, and of the classifier layer."""
    producer = {o: n for n in graph.node for o in n.output}

    def source(name: str) -> str:  # follow a weight back through reshapes to where it is made
        while name in producer and producer[name].op_type in _SHAPE_ONLY:
            name = producer[name].input[0]
        return name

    roles: dict[str, str] = {}
    for node in graph.node:
        if node.op_type in ("Sum", "Add"):
            for name in node.input:
                bn = producer.get(name)
                if bn is not None and bn.op_type == "BatchNormalization":
                    roles[source(bn.input[1])] = "residual"
    seen, frontier = set(), [_classifier_output(graph)]
    while frontier:  # walk back through activations, pools and reshapes to the classifier layer
        n = producer.get(frontier.pop())
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if n.op_type in ("Gemm", "Conv"):
            roles[source(n.input[1])] = "classifier"
            if len(n.input) > 2:
                roles[source(n.input[2])] = "classifier"
        else:
            frontier.extend(n.input[:1])
    return roles


def _add_initializer(graph: onnx.GraphProto, name: str, data: np.ndarray) -> None:
    """``graph.initializer.append(numpy_helper.from_array(data, name))`` without its extra copy of the data."""
    tensor = graph.initializer.add()
    tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(data.dtype)
    tensor.dims.extend(data.shape)
    tensor.raw_data = data.tobytes()


def _add_logits_output(model: onnx.ModelProto) -> None:
    """Expose the input of the final Softmax as an extra output, 'logits'."""
    outputs = {o.name for o in model.graph.output}
    for node in model.graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs:
            model.graph.node.append(helper.make_node("Identity", [node.input[0]], ["logits"], name="logits_identity"))
            model.graph.output.append(helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, None))
            return


def load_zoo_model(
    name: str, *, random_weights: bool = True, seed: int = 0, logits: bool = False, batch: int = 1
) -> onnx.ModelProto:
    """Load a zoo model; with ``random_weights`` its ConstantOfShape weights become random initializers.

    ``logits=True`` adds the final softmax's input as a second output named 'logits';
    ``batch`` sets the batch size (the zoo models are written for 1).
    """
    model = onnx.load(zoo_model_path(name))
    if random_weights:
        rng = np.random.default_rng(seed)
        graph = model.graph
        shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        users: dict[str, tuple[str, int, dict]] = {}
        for node in graph.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            for i, name_in in enumerate(node.input):
                users.setdefault(name_in, (node.op_type, i, attrs))
        roles = _weight_roles(graph)
        replaced = set()
        for node in graph.node:
            if node.op_type == "ConstantOfShape" and node.input[0] in shapes and node.output[0] in users:
                replaced.add(node.output[0])
                op, index, attrs = users[node.output[0]]
                role = roles.get(node.output[0], "")
                data = _random_weight(tuple(shapes[node.input[0]]), op, index, attrs, rng, role)
                _add_initializer(graph, node.output[0], data.astype(np.float32, copy=False))
                if model.ir_version < 4:  # IR < 4 requires every initializer to be a graph input
                    graph.input.append(
                        helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, data.shape)
                    )
                del data
        for i in reversed(range(len(graph.node))):  # in place, as _drop_unused_initializers
            if graph.node[i].op_type == "ConstantOfShape" and graph.node[i].output[0] in replaced:
                del graph.node[i]
        _drop_unused_initializers(graph)
        _calibrate_classifier(model, roles)
    if logits:
        _add_logits_output(model)
    if batch != 1:
        _rebatch(model, batch)
    return model


def _rebatch(model: onnx.ModelProto, batch: int) -> None:
    """Batch ``batch`` instead of 1: the real inputs' and outputs' first dim, and Reshape targets that spell 1.

    A Reshape target starting with 1 (``[1, -1]`` before the classifier) gets 0 there,
    ONNX's "copy this dim", so it follows the batch.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name not in initializers and len(dims):
            dims[0].dim_value = batch
    del graph.value_info[:]
    for node in graph.node:
        target = initializers.get(node.input[1]) if node.op_type == "Reshape" else None
        if target is not None:
            shape = numpy_helper.to_array(target).copy()
            if shape.size and shape[0] == 1:
                shape[0] = 0
                target.CopyFrom(numpy_helper.from_array(shape, target.name))


def _calibrate_classifier(model: onnx.ModelProto, roles: dict[str, str], target_std: float = 3.0) -> None:
    """Scale the classifier so the logits' spread is ``target_std``: a softmax that is neither flat nor one-hot.

    Everything between the classifier and the softmax (ReLU, pooling, reshapes) is positively
    homogeneous, so scaling the classifier's weight and bias by c scales the logits by c. One
    onnxruntime run measures the spread.
    """
    import onnxruntime

    # The model itself with the logits as its only output, serialized once (no copy of the model).
    logits_info = helper.make_tensor_value_info(_classifier_output(model.graph), onnx.TensorProto.FLOAT, None)
    outputs = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in model.graph.output]
    del model.graph.output[:]
    model.graph.output.append(logits_info)
    session = onnxruntime.InferenceSession(model.SerializeToString())
    del model.graph.output[:]
    model.graph.output.extend(outputs)
    logits = session.run(None, zoo_input(model))[0]
    del session
    scale = np.float32(target_std / max(float(logits.std()), 1e-12))
    for tensor in model.graph.initializer:
        if roles.get(tensor.name) == "classifier":
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * scale, tensor.name))


def zoo_input(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Random inputs in [0, 1) for every real (non-initializer) input of a zoo model."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.random(shape, dtype=np.float32)  # the batch is the declared dim 0
    return feeds
