"""Read an ONNX model into the IR.

The importer reports every problem it can before converting anything: all
unsupported op types at once (with a node name for each), undefined tensor
names, unknown input names given to ``input_shapes`` or ``input_values``.
Conversion then walks the nodes in topological order, folding constant
subgraphs as it goes. An ``If`` whose condition has folded to a constant by
the time it is reached is inlined: the chosen branch's nodes are converted in
its place, in a scope of their own (control_flow.py).
"""

from __future__ import annotations

import logging
import os
from collections import ChainMap, Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Union

import numpy as np
import onnx
from onnx import numpy_helper

from aot.errors import AotError, ModelError, ShapeError, UnsupportedOpsError
from aot.frontend.onnx import control_flow
from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import CONVERTERS
from aot.frontend.onnx.dtypes import onnx_dtype_name
from aot.ir.dims import DimNamer, DimRange, GivenDim, as_given, is_anonymous, is_raw_name
from aot.ir.graph import Graph, Value
from aot.ir.types import TensorType
from aot.words import counted
from runtime_lite.files import open_regular

log = logging.getLogger("aot.frontend.onnx")

MIN_OPSET = 9
TESTED_MAX_OPSET = 21
ModelSource = Union[str, "os.PathLike[str]", bytes, onnx.ModelProto]
InputShapes = Mapping[str, Sequence[GivenDim]]
InputValues = Mapping[str, object]


def load_model(source: ModelSource) -> onnx.ModelProto:
    """Load an ONNX model from a path, bytes or a ModelProto, with a one-line error if it is not one."""
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return onnx.load_from_string(bytes(source))
        path = os.fspath(source)
        if not os.path.exists(path):
            raise ModelError(f"model file '{path}' does not exist")
        extension = os.path.splitext(path)[1]  # onnx's own choice of text or binary format, as onnx.load makes it
        model = onnx.load_from_string(
            _read_model_file(path), format=onnx.serialization.registry.get_format_from_file_extension(extension)
        )
    except AotError:
        raise
    except OSError as e:
        raise ModelError(f"cannot read model file: {e}") from None
    except Exception as e:  # protobuf and onnx report malformed files with several exception types
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise ModelError(f"cannot parse ONNX model: {type(e).__name__}: {first_line}") from None
    _load_external_data(model, path)
    return model


def _read_model_file(path: str) -> bytes:
    """The bytes of a non-empty regular file: a FIFO must not block the load, and an empty
    file would otherwise parse as a model without an opset, blamed for that rather than for being empty."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise ModelError(f"cannot read model file '{path}': {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read()
    if not data:
        raise ModelError(f"model file '{path}' is empty")
    return data


def _load_external_data(model: onnx.ModelProto, path: str) -> None:
    """Read weights stored next to the model (how models past protobuf's 2 GB limit are saved)."""
    try:
        onnx.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    except Exception as e:
        first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"cannot read the external data of model file '{path}': {first_line}") from None


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    if model.graph.node and all(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        return TESTED_MAX_OPSET  # only other domains' ops (a lone ai.onnx.ml Scaler): no op reads the default opset
    raise ModelError("the model imports no version of the default ONNX domain")


def _upgrade_if_old(model: onnx.ModelProto) -> onnx.ModelProto:
    opset = _default_opset(model)
    if opset >= MIN_OPSET:
        if opset > TESTED_MAX_OPSET:
            log.warning("opset %d is newer than the newest tested (%d); converting anyway", opset, TESTED_MAX_OPSET)
        return model
    try:
        from onnx import version_converter

        log.info("upgrading opset %d to 13 with onnx.version_converter", opset)
        if opset < 7:
            model = _channel_prelu_slopes(model)
        return version_converter.convert_version(model, 13)
    except Exception as e:
        raise ModelError(f"opset {opset} is older than {MIN_OPSET} and onnx could not upgrade it ({e})") from None


def _channel_prelu_slopes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Make opset-6 PRelu's channel-wise slope explicit before upgrading.

    Up to opset 6 a 1-d slope of C values applied along axis 1 (PyTorch's exporter
    relied on it); from opset 7 it broadcasts numpy-style, against the last axis.
    onnx's version converter does not rewrite it, so a Reshape to [C, 1, ..., 1] is
    inserted here, where the old semantics are still known.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in list(inferred.graph.value_info) + list(inferred.graph.input)
        if v.type.tensor_type.HasField("shape")
    }
    nodes = []
    for node in graph.node:
        if node.op_type == "PRelu" and node.domain in ("", "ai.onnx") and ranks.get(node.input[1]) == 1:
            rank = ranks.get(node.input[0], 0)
            if rank > 2:
                shape_name, reshaped = f"{node.input[1]}__channels_shape", f"{node.input[1]}__channels"
                shape = onnx.numpy_helper.from_array(np.array([-1] + [1] * (rank - 2), np.int64))
                nodes.append(onnx.helper.make_node("Constant", [], [shape_name], value=shape))
                nodes.append(onnx.helper.make_node("Reshape", [node.input[1], shape_name], [reshaped]))
                node.input[1] = reshaped
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _op_key(node: onnx.NodeProto) -> str:
    """``Conv`` for a default-domain op, ``com.microsoft.Gelu`` for another domain's: how converters are named."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _check_supported(nodes: Sequence[onnx.NodeProto]) -> None:
    missing: OrderedDict[str, list[str]] = OrderedDict()
    for node in nodes:
        key = _op_key(node)
        if key not in CONVERTERS and key not in control_flow.INLINED:
            missing.setdefault(key, []).append(node.name or (node.output[0] if node.output else "?"))
    if missing:
        parts = [
            f"{op} (node '{names[0]}'" + (f", {len(names)} nodes)" if len(names) > 1 else ")")
            for op, names in missing.items()
        ]
        loops = [op for op in missing if op in control_flow.BY_DESIGN]
        why = (
            f"; {' and '.join(loops)} {'is' if len(loops) == 1 else 'are'} run-time control flow, which aot does not "
            "compile by design (one static dataflow graph)"
            if loops
            else ""
        )
        raise UnsupportedOpsError(f"unsupported ops ({counted(len(missing), 'type')}): " + ", ".join(parts) + why)


def _sorted_nodes(graph: onnx.GraphProto, known: set[str]) -> list[onnx.NodeProto]:
    """Topological order (exporters do not always write one); undefined names are a ModelError."""
    producers = {out: i for i, n in enumerate(graph.node) for out in n.output if out}
    reads = [control_flow.reads(n) for n in graph.node]
    for n, names in zip(graph.node, reads):
        for name in names:
            if name and name not in known and name not in producers:
                label = n.name or (n.output[0] if n.output else n.op_type)
                raise ModelError(
                    f"node '{label}' ({n.op_type}) reads '{name}', which no node, input or initializer defines"
                )
    order, state = [], [0] * len(graph.node)
    for root in range(len(graph.node)):
        stack = [(root, False)]
        while stack:
            i, done = stack.pop()
            if done:
                state[i] = 2
                order.append(graph.node[i])
                continue
            if state[i]:
                if state[i] == 1:
                    raise ModelError(
                        f"the graph has a cycle through node '{graph.node[i].name or graph.node[i].op_type}'"
                    )
                continue
            state[i] = 1
            stack.append((i, True))
            for name in reads[i]:
                j = producers.get(name)
                if j is not None and state[j] != 2:
                    if state[j] == 1:
                        raise ModelError(
                            f"the graph has a cycle through node '{graph.node[j].name or graph.node[j].op_type}'"
                        )
                    stack.append((j, False))
    return order


def _declared_dim(dim: onnx.TensorShapeProto.Dimension) -> int | str:
    """A declared dim as the model writes it: a size, or the raw symbol ("" when it has no name).

    Some exporters (Paddle2ONNX among them) write ``dim_value: -1`` for a dynamic
    dim; onnxruntime treats any negative size as unknown, and so does this.
    """
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return dim.dim_value
    return dim.dim_param


def _input_type(value: onnx.ValueInfoProto, override: Sequence[GivenDim] | None, namer: DimNamer) -> TensorType:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise UnsupportedOpsError(f"input '{value.name}' is not a tensor (sequences and maps are not supported)")
    try:
        dtype = onnx_dtype_name(tensor.elem_type)
    except ValueError as e:
        raise UnsupportedOpsError(f"input '{value.name}': {e}") from None
    declared = [_declared_dim(d) for d in tensor.shape.dim] if tensor.HasField("shape") else []
    rank = len(override) if override is not None else len(declared)

    def where(i: int) -> str:
        return f"input '{value.name}' dim {i}"

    if override is None:
        if not tensor.HasField("shape"):
            raise ShapeError(f"input '{value.name}' has no declared shape; give one with --input {value.name}:SHAPE")
        dims = [
            d if isinstance(d, int) else namer.declared(d, where(i), rank, i, dtype) for i, d in enumerate(declared)
        ]
        return TensorType(dims, dtype)
    try:
        override = [as_given(d) for d in override]
    except ValueError as e:
        raise ShapeError(f"--input {value.name}: {e}") from None
    if tensor.HasField("shape") and len(override) != len(declared):
        shown = [d if isinstance(d, int) else d or "?" for d in declared]
        raise ShapeError(f"--input {value.name}: the model declares rank {len(declared)} {shown}, got {list(override)}")
    for i, (model_dim, given) in enumerate(zip(declared, override)):
        if isinstance(model_dim, int) and isinstance(given, int) and model_dim != given:
            raise ShapeError(f"--input {value.name}: dim {i} is fixed to {model_dim} in the model, got {given}")
        if isinstance(model_dim, int) and not isinstance(given, int):
            # The model's weights and reshapes were made for that size: a symbol would build
            # a bundle that fails at run time for any other value.
            raise ShapeError(
                f"--input {value.name}: dim {i} is fixed to {model_dim} in the model, so it cannot be "
                f"the symbol {str(given)!r}; give {model_dim}"
            )
    if declared:  # bounds for a dim the model named ("height"): the dim keeps the model's name
        override = [_keep_model_name(given, model_dim) for given, model_dim in zip(override, declared)]
    try:
        dims = [namer.given(d, f"--input {value.name} dim {i}", rank, i, dtype) for i, d in enumerate(override)]
    except ShapeError as e:
        raise ShapeError(f"--input {value.name}: {e}") from None
    return TensorType(dims, dtype)


def _keep_model_name(given: GivenDim, model_dim: int | str) -> GivenDim:
    """Unnamed bounds on a dim the model named as a person would (not ``?`` or an exporter's ``unk__3``) take
    that name: ``--input x:1x3x32..1280`` on ``[1, 3, "height"]`` bounds ``height``, not a new ``h``."""
    if isinstance(given, DimRange) and given.name is None and isinstance(model_dim, str):
        if model_dim and not is_anonymous(model_dim) and not is_raw_name(model_dim):
            return DimRange(given.min, given.max, model_dim)
    return given


def _user_dim_names(input_shapes: Mapping[str, Sequence[GivenDim]]) -> set[str]:
    """Names the user gives in ``input_shapes``: a readable name chosen for a model's dim must not take one."""
    names = set()
    for dims in input_shapes.values():
        for d in dims:
            name = d if isinstance(d, str) else getattr(d, "name", None)
            if name:
                names.add(name)
    return names


def _model_dim_names(inputs: Sequence[onnx.ValueInfoProto]) -> set[str]:
    """Names the model itself gives its inputs' dims, kept as they are: a readable name must not take one."""
    return {
        d.dim_param
        for v in inputs
        for d in v.type.tensor_type.shape.dim
        if d.dim_param and not is_anonymous(d.dim_param) and not is_raw_name(d.dim_param)
    }


def _initializer(tensor: onnx.TensorProto, graph: Graph) -> Value:
    if tensor.data_type == onnx.TensorProto.STRING:  # skl2onnx's class names, looked up by ArrayFeatureExtractor
        raise UnsupportedOpsError(
            f"initializer '{tensor.name}' holds strings, which are not a tensor of numbers (a classifier's string "
            "class labels? fit the model on integer labels, sklearn.preprocessing.LabelEncoder)"
        )
    try:
        onnx_dtype_name(tensor.data_type)
        array = numpy_helper.to_array(tensor)
    except ValueError as e:
        raise UnsupportedOpsError(f"initializer '{tensor.name}': {e}") from None
    except Exception as e:
        raise ModelError(f"initializer '{tensor.name}' cannot be read: {e}") from None
    return Value(tensor.name, TensorType(array.shape, array.dtype.name), data=np.asarray(array, order="C"))


def from_onnx(
    source: ModelSource,
    input_shapes: InputShapes | None = None,
    name: str | None = None,
    input_values: InputValues | None = None,
) -> Graph:
    """Convert an ONNX model (path, bytes or ModelProto) to an IR graph.

    ``input_shapes`` fixes symbolic dims: ``{"images": (1, 3, 224, 224)}``.
    ``input_values`` binds inputs to values (``{"sr": 16000}``): each becomes a constant of the
    input's declared dtype and leaves the signature, so what it decides (an ``If``) folds.
    Graph inputs that also have an initializer (as older exporters write weights) are constants.
    """
    model = _upgrade_if_old(load_model(source))
    opset = _default_opset(model)
    onnx_graph = model.graph
    input_shapes = dict(input_shapes or {})
    input_values = dict(input_values or {})
    if onnx_graph.sparse_initializer:
        raise UnsupportedOpsError("sparse initializers are not supported")
    initializer_names = {t.name for t in onnx_graph.initializer}
    real_inputs = [v for v in onnx_graph.input if v.name not in initializer_names]
    for option, given in (("--input", input_shapes), ("--bind", input_values)):
        unknown = sorted(set(given) - {v.name for v in real_inputs})
        if unknown:
            raise ShapeError(
                f"{option} names unknown input {unknown[0]!r}; "
                f"the model's inputs are: {', '.join(v.name for v in real_inputs)}"
            )
    both = sorted(set(input_shapes) & set(input_values))
    if both:
        raise ShapeError(
            f"input {both[0]!r} is given both a shape (--input) and a value (--bind); the value fixes its shape: "
            "drop the --input"
        )
    _check_supported(onnx_graph.node)
    known = initializer_names | {v.name for v in onnx_graph.input}
    nodes = _sorted_nodes(onnx_graph, known)

    graph = Graph(name or onnx_graph.name or "main")
    for v in list(onnx_graph.input) + list(onnx_graph.output):
        graph.unique_name(v.name)  # reserve the model's own names for its signature
    env: ChainMap[str, Value] = ChainMap()
    namer = DimNamer(_user_dim_names(input_shapes) | _model_dim_names(real_inputs))
    bound = []
    for v in real_inputs:
        if v.name in input_values:
            env[v.name] = control_flow.bound_input(v, input_values[v.name])
            bound.append(f"{v.name}={control_flow.shown(env[v.name].data)}")
            continue
        value = Value(v.name, _input_type(v, input_shapes.get(v.name), namer))
        graph.inputs.append(value)
        env[v.name] = value
    graph.dims = namer.dims
    for tensor in onnx_graph.initializer:
        env[tensor.name] = _initializer(tensor, graph)

    used_names = control_flow.names_read(onnx_graph)
    convert_nodes(graph, nodes, env, opset, used_names)

    _set_outputs(graph, onnx_graph, env)
    graph.metadata.update(frontend="onnx", opset=opset, source_nodes=len(onnx_graph.node), producer=model.producer_name)
    if bound:
        graph.metadata["bound_inputs"] = ", ".join(bound)
    return graph


def convert_nodes(
    graph: Graph, nodes: Sequence[onnx.NodeProto], env: ChainMap[str, Value], opset: int, used_names: set[str]
) -> None:
    """Convert ``nodes`` (in topological order) into ``graph``, binding their outputs in ``env``.

    An ``If`` is inlined here (its branch needs this loop); every other op goes through its converter.
    """
    for node in nodes:
        ctx = NodeContext(graph, node, [env[n] if n else None for n in node.input], opset, used_names)
        try:
            if _op_key(node) in control_flow.INLINED:
                outputs = control_flow.inline_if(ctx, env, convert_branch)
            else:
                outputs = CONVERTERS[_op_key(node)](ctx)
        except AotError:
            raise
        except Exception as e:  # a converter bug must still name the node
            raise ModelError(f"{node.op_type} node '{ctx.name}': cannot convert ({type(e).__name__}: {e})") from e
        for out_name, value in zip(node.output, outputs):
            if out_name:
                env[out_name] = value


def convert_branch(ctx: NodeContext, branch: onnx.GraphProto, env: ChainMap[str, Value]) -> list[Value]:
    """Convert an ``If`` branch in a scope of its own, over ``env``; its outputs.

    The branch reads outer values by name; what it defines (nodes' outputs, its initializers) lives in
    the new scope only, so a branch-local name that repeats an outer one never replaces the outer value.
    """
    _check_supported(branch.node)
    scope = env.new_child()
    for tensor in branch.initializer:
        scope[tensor.name] = _initializer(tensor, ctx.graph)
    nodes = _sorted_nodes(branch, set(scope))
    convert_nodes(ctx.graph, nodes, scope, ctx.opset, ctx.used_names)
    missing = [out.name for out in branch.output if out.name not in scope]
    if missing:
        raise ModelError(f"If node '{ctx.name}': branch '{branch.name}' output '{missing[0]}' is never produced")
    return [scope[out.name] for out in branch.output]


def _set_outputs(graph: Graph, onnx_graph: onnx.GraphProto, env: dict[str, Value]) -> None:
    """Outputs keep the model's names; an output that is an input, a constant or a repeat gets its own copy."""
    used: Counter[int] = Counter()
    for out in onnx_graph.output:
        if out.name not in env:
            raise ModelError(f"graph output '{out.name}' is never produced")
        value = env[out.name]
        if value.producer is None or used[id(value)]:
            value = graph.op("copy", value, name=out.name)
        used[id(value)] += 1
        value.name = out.name
        graph.outputs.append(value)
