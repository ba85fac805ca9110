"""torch.export's ExportedProgram (or a saved .pt2) to an IR graph.

The program is read at the level torch.export leaves it (``conv2d``, ``linear``,
``layer_norm``, ``scaled_dot_product_attention`` stay whole). Only when it uses an
op outside ``aten.ATEN`` is it decomposed, with torch's own table minus every op we
convert, so the rest becomes core ATen we know. What is still unknown is reported
all at once. Parameters, buffers and lifted constants come in as IR constants;
user inputs keep torch's symbolic dims (``s0``) unless ``input_shapes`` fixes them.
torch is imported here and only here: nothing downstream of the IR needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from aot.errors import ModelError, ShapeError, UnsupportedOpsError
from aot.frontend.torch.aten import ATEN, PYTHON_CALLS
from aot.frontend.torch.context import AtenContext, numpy_dtype
from aot.frontend.torch.dim_names import (
    check_given_within_ranges,
    name_signature_dims,
    rename_dims,
    user_dim_names,
)
from aot.frontend.torch.symbolic import SYMBOLIC_PREFIX
from aot.ir.dims import DimRange, as_given
from aot.ir.graph import Graph, Value
from aot.ir.types import Dim, TensorType
from aot.quiet import known_warnings_hidden
from aot.words import counted

InputShapes = Mapping[str, Sequence[Dim]]
SKIPPED_PREFIXES = ("aten._assert", "aten.sym_constrain_range")


def _torch():
    try:
        import torch
    except ImportError:
        raise ModelError("reading PyTorch programs needs torch: pip install torch==2.13.0 (aot[torch])") from None
    return torch


#: Packages whose types a saved program's outputs may be (a Hugging Face model returns a ``ModelOutput``). torch
#: rebuilds such a tree only once the package has registered its types, which importing it does: where a load
#: fails on one of theirs, the package is imported (when installed) and the load tried again.
OUTPUT_TYPE_PACKAGES = ("transformers", "diffusers", "timm")
_UNREGISTERED = re.compile(r"Deserializing ([\w.]+) in pytree is not registered")


class _Captured(logging.Handler):
    """What torch logs while it loads (a failed load logs a whole traceback, then raises a vague error)."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.text.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            self.text.append(str(record.exc_info[1]))


def _load_quietly(torch: Any, path: str) -> tuple[Any, Exception | None, str]:
    """(the program, or None with the error and what torch logged meanwhile)."""
    logger, captured = logging.getLogger("torch.export"), _Captured()
    handlers, propagate = logger.handlers[:], logger.propagate  # torch gives it a stderr handler of its own
    logger.handlers, logger.propagate = [captured], False
    try:
        return torch.export.load(path), None, ""
    except Exception as e:
        return None, e, "\n".join(captured.text)
    finally:
        logger.handlers, logger.propagate = handlers, propagate


def load_exported_program(path: str | os.PathLike[str]) -> Any:
    """A program saved with ``torch.export.save``; one whose outputs are a package's own types (above) once that
    package is imported."""
    torch = _torch()
    if not os.path.isfile(path):
        raise ModelError(f"cannot read model file: no such file: {os.fspath(path)!r}")
    program, error, logged = _load_quietly(torch, os.fspath(path))
    missing = _UNREGISTERED.search(f"{logged}\n{error}")
    if error is not None and missing is not None:
        module = missing.group(1).rpartition(".")[0]
        if module.split(".")[0] in OUTPUT_TYPE_PACKAGES and importlib.util.find_spec(module.split(".")[0]):
            importlib.import_module(module)
            program, error, logged = _load_quietly(torch, os.fspath(path))
    if error is None:
        return program
    if missing is not None:
        raise ModelError(
            f"cannot load {os.fspath(path)!r} as a torch.export program: its outputs are a {missing.group(1)}, which "
            "torch rebuilds only once that package registers it; import it and pass the program to aot.build "
            "(aot.build(torch.export.load(path))), or export the model with plain tensor outputs"
        )
    first = str(error).splitlines()[0] if str(error) else ""
    raise ModelError(f"cannot load {os.fspath(path)!r} as a torch.export program: {type(error).__name__}: {first}")


def _key(target: Any) -> str | None:
    packet = getattr(target, "overloadpacket", None)
    return str(packet) if packet is not None else PYTHON_CALLS.get(target)


def _calls(program: Any) -> list[Any]:
    return [n for n in program.graph.nodes if n.op == "call_function"]


def _is_supported(target: Any) -> bool:
    key = _key(target)
    return key is not None and (key in ATEN or key == "getitem" or key.startswith(SKIPPED_PREFIXES))


def _decompose_unknown(program: Any) -> Any:
    """Functionalize the program and let torch decompose what we do not convert, keeping every op we do.

    ``torch.export`` leaves in-place ops on activations (``relu_``, ``add_``, ``fill_``) in
    its graph; ``run_decompositions`` rewrites them as pure ops, so reading never has to
    reason about aliasing. A program with nothing unknown and nothing in place is read as is.
    """
    if all(_is_supported(n.target) for n in _calls(program)):
        return program
    torch = _torch()
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if _key(op) in ATEN:
            table.pop(op)
    return program.run_decompositions(table)


def _check_inference(program: Any) -> None:
    """A program that updates its buffers or parameters (batch-norm statistics, counters) was exported for training.

    In-place ops on activations are not state updates: they are functionalized away.
    """
    signature = program.graph_signature
    mutated = sorted({**signature.buffers_to_mutate, **getattr(signature, "parameters_to_mutate", {})}.values())
    if not mutated:
        mutated = [n.name for n in _calls(program) if _key(n.target) == "aten.batch_norm" and n.args[5:6] == (True,)]
    if mutated:
        raise UnsupportedOpsError(
            f"the program updates its state ({', '.join(mutated[:3])}{', ...' if len(mutated) > 3 else ''}): it was "
            "exported in training mode or writes its buffers in forward; call model.eval() before "
            "torch.export.export and keep state updates out of forward"
        )


def _op_name(target: Any) -> str:
    """An ATen op as torch names it (``aten.grid_sampler_2d.default``); a Python function a dynamic size went
    through (``sym_float``, ``operator.truediv``) by its module and name, not its repr with an address."""
    if callable(target) and not hasattr(target, "_schema") and hasattr(target, "__name__"):
        module = getattr(target, "__module__", None) or (
            "operator" if type(target).__name__ == "builtin_function_or_method" else ""
        )
        return f"{module.lstrip('_') + '.' if module else ''}{target.__name__} (Python arithmetic on a dynamic size)"
    return str(target)


def _check_supported(program: Any) -> None:
    missing: OrderedDict[str, list[str]] = OrderedDict()
    for node in _calls(program):
        if not _is_supported(node.target):
            missing.setdefault(_op_name(node.target), []).append(node.name)
    if missing:
        parts = [
            f"{op} (node '{names[0]}'{f', {len(names)} nodes' if len(names) > 1 else ''})"
            for op, names in missing.items()
        ]
        raise UnsupportedOpsError(f"unsupported ATen ops ({counted(len(missing), 'type')}): {', '.join(parts)}")


def _array(tensor: Any, what: str) -> np.ndarray:
    dtype = numpy_dtype(tensor.dtype)  # raises for bfloat16, complex, ...
    return np.array(tensor.detach().cpu().contiguous().numpy(), dtype=dtype, order="C", copy=True)


def _input_type(name: str, meta: Any, override: Sequence[Dim] | None) -> TensorType:
    if meta is None or not hasattr(meta, "shape"):
        raise UnsupportedOpsError(f"input '{name}' is not a tensor (only tensor inputs are supported)")
    dims: list[Dim] = [int(d) if isinstance(d, int) or str(d).isdigit() else str(d) for d in meta.shape]
    if override is not None:
        if len(override) != len(dims):
            raise ShapeError(f"--input {name}: the program's input has rank {len(dims)} {dims}, got {list(override)}")
        for i, (declared, given) in enumerate(zip(dims, override)):
            if isinstance(declared, int) and isinstance(given, int) and declared != given:
                raise ShapeError(f"--input {name}: dim {i} is fixed to {declared} in the program, got {given}")
        try:  # bounds keep torch's symbol (name_signature_dims records them); a size or a name replaces it
            given_dims = [as_given(d) for d in override]
        except ValueError as e:
            raise ShapeError(f"--input {name}: {e}") from None
        dims = [dims[i] if isinstance(d, DimRange) else d for i, d in enumerate(given_dims)]
    return TensorType(dims, numpy_dtype(meta.dtype))


def _resolve(raw: Any, env: dict) -> Any:
    if isinstance(raw, (list, tuple)):
        return [_resolve(r, env) for r in raw]
    if hasattr(raw, "op") and hasattr(raw, "target") and raw in env:  # an FX node
        return env[raw]
    return raw


def _bind(node: Any, env: dict) -> dict[str, Any]:
    """The call's arguments by schema name, defaults filled in, FX nodes replaced by their values."""
    arguments = {}
    for i, arg in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            raw = node.args[i]
        elif arg.name in node.kwargs:
            raw = node.kwargs[arg.name]
        else:
            raw = arg.default_value if arg.has_default_value() else None
        arguments[arg.name] = _resolve(raw, env)
    return arguments


def _lifted_constants(program: Any) -> dict[str, np.ndarray]:
    """Placeholder name -> array for every parameter, buffer and lifted constant."""
    tensors = {**program.state_dict, **program.constants}
    constants = {}
    for spec in program.graph_signature.input_specs:
        if spec.target is None:
            continue
        tensor = tensors.get(spec.target)
        if tensor is None or not hasattr(tensor, "dtype"):
            raise ModelError(f"the program lists {spec.target!r} as an input but holds no tensor for it")
        constants[spec.arg.name] = _array(tensor, spec.target)
    return constants


def from_exported_program(program: Any, input_shapes: InputShapes | None = None, name: str | None = None) -> Graph:
    """Convert a ``torch.export.ExportedProgram`` to an IR graph (weights become constants).

    ``input_shapes`` fixes symbolic dims by input name: ``{"x": (1, 3, 224, 224)}``.
    """
    if not hasattr(program, "graph_signature"):
        raise ModelError(f"expected a torch.export.ExportedProgram, got {type(program).__name__}")
    with known_warnings_hidden():
        program = _decompose_unknown(program)
    _check_inference(program)  # after functionalization, which lists every buffer the program writes
    _check_supported(program)
    constants = _lifted_constants(program)
    input_shapes = dict(input_shapes or {})
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user_inputs = [n for n in placeholders if n.name not in constants]
    unknown = sorted(set(input_shapes) - {n.name for n in user_inputs})
    if unknown:
        raise ShapeError(
            f"--input names unknown input {unknown[0]!r}; the program's inputs are: "
            + ", ".join(n.name for n in user_inputs)
        )
    range_constraints = getattr(program, "range_constraints", None) or {}
    check_given_within_ranges(user_inputs, _given(input_shapes), range_constraints)
    graph = Graph(name or "main")
    env: dict[Any, Any] = {}
    for node in placeholders:
        if node.name in constants:
            array = constants[node.name]
            env[node] = Value(graph.unique_name(node.name), TensorType(array.shape, array.dtype.name), data=array)
        else:
            value = graph.add_input(
                node.name, _input_type(node.name, node.meta.get("val"), input_shapes.get(node.name))
            )
            env[node] = value
    fixed = _fixed_symbols(user_inputs, input_shapes)
    anchors = _Anchors(graph, {n.name: env[n] for n in user_inputs}, user_inputs, fixed)
    for node in _calls(program):
        env[node] = anchors.adopt(_convert(graph, node, env), node)
        _refine(env[node], node.meta.get("val"), fixed, graph)
    (results,) = [n.args[0] for n in program.graph.nodes if n.op == "output"]
    outputs = [env[r] for r, spec in zip(results, program.graph_signature.output_specs) if _is_user_output(spec)]
    if not all(isinstance(v, Value) for v in outputs):
        raise UnsupportedOpsError("the program returns something other than tensors")
    for i, value in enumerate(outputs):  # torch outputs have no names of their own: call them as exporters do
        name = graph.unique_name("output" if len(outputs) == 1 else f"output_{i}")
        if value.producer is None or any(value is earlier for earlier in outputs[:i]):
            # an input, a constant or a value returned twice: a copy of its own, so that renaming the output
            # never renames the input (run({'x': ...}) stays valid) nor an earlier output
            outputs[i] = graph.op("copy", value, name=name)
        value = outputs[i]
        value.name = name
    graph.outputs = outputs
    rename_dims(graph, user_dim_names(user_inputs))
    name_signature_dims(graph, user_inputs, input_shapes, range_constraints)
    graph.metadata.update(frontend="torch.export", source_nodes=len(_calls(program)))
    return graph


def _given(input_shapes: InputShapes) -> dict[str, list[Any]]:
    """``input_shapes`` with each dim as ``as_given`` reads it ((min, max) tuples as DimRanges); a malformed one
    is left to ``_input_type``, which names it."""
    given = {}
    for name, dims in input_shapes.items():
        try:
            given[name] = [as_given(d) for d in dims]
        except (TypeError, ValueError):
            continue
    return given


def _torch_dim(d: Any, fixed: dict[str, int]) -> Dim | None:
    """A dim of torch's own shape for a node: an int, a plain symbol (``s0``), or None for an expression."""
    text = str(d)
    if text.lstrip("-").isdigit():
        return int(text)
    if text.isidentifier():
        return fixed.get(text, text)
    return None


def _fixed_symbols(user_inputs: list[Any], input_shapes: InputShapes) -> dict[str, int]:
    """Torch's symbols that ``input_shapes`` fixes to a size (``s0`` -> 8)."""
    fixed = {}
    for node in user_inputs:
        meta = node.meta.get("val")
        for d, given in zip(getattr(meta, "shape", ()), input_shapes.get(node.name, ())):
            if str(d).isidentifier() and isinstance(given, int):
                fixed[str(d)] = given
    return fixed


class _Anchors:
    """Torch's own shapes, kept where ours lose a dim to a fresh symbol (``?11``) that torch knows is an input's dim.

    torch.export gives every node its shape in the inputs' symbols (``[s77, 360]`` after
    ``reshape(-1, 256)`` or an LSTM's ``hidden[-1]``), where shape inference of the IR ops can only invent a fresh
    dim (a pad over a symbolic batch, zeros of a run-time shape, a reshape's -1 over a concat). Such a value is
    followed by a reshape to its own shape, spelled from the inputs' dims (``shape(x)[0:1]``, the sizes torch
    knows, 0 where ours already agree): the IR reads that target element by element, so every later shape
    inference (the passes re-infer the whole graph) gives the value, and all that follows from it, torch's dims.
    Sound: torch's guards hold those dims equal for every input the program accepts, and at run time the reshape
    is a view of what the op computed. A batch dim then reaches the outputs, so ``serve`` can batch the bundle.
    """

    def __init__(self, graph: Graph, values: dict[str, Value], user_inputs: list[Any], fixed: dict[str, int]):
        self.graph = graph
        self.fixed = fixed
        self.sources: dict[str, tuple[Value, int]] = {}  # torch's dim (s77, 2*s94) -> the input and axis holding it
        for node in user_inputs:
            value = values[node.name]
            for axis, d in enumerate(getattr(node.meta.get("val"), "shape", ())):
                ours = value.type.shape[axis] if axis < value.type.rank else None
                if isinstance(ours, str) and not str(d).lstrip("-").isdigit():
                    self.sources.setdefault(str(d), (value, axis))
        self.dims: dict[tuple[str, int], Value] = {}

    def adopt(self, result: Any, node: Any) -> Any:
        """``result``, or each value of a list of them, re-anchored where torch knows dims ours lost."""
        meta = node.meta.get("val")
        if isinstance(result, list) and isinstance(meta, (list, tuple)) and len(meta) == len(result):
            return [self._adopt(r, m, node.name) for r, m in zip(result, meta)]
        return self._adopt(result, meta, node.name)

    def _adopt(self, result: Any, meta: Any, name: str) -> Any:
        if not isinstance(result, Value) or result.producer is None or not hasattr(meta, "shape"):
            return result
        if len(meta.shape) != result.type.rank or not self.sources:
            return result
        target: list[Any] = []
        recovered = False
        for ours, theirs in zip(result.type.shape, meta.shape):
            text = str(theirs)
            fresh = isinstance(ours, str) and ours.startswith("?")
            if fresh and text in self.sources and text not in self.fixed:
                target.append(self._dim(*self.sources[text]))
                recovered = True
            elif fresh and isinstance(_torch_dim(theirs, self.fixed), int):  # torch knows its size
                target.append(_torch_dim(theirs, self.fixed))
            else:
                target.append(0)  # ours is right already, or torch knows no better: the value's own dim
        if not recovered:
            return result
        parts = [t if isinstance(t, Value) else self.graph.constant(np.array([t], np.int64), name) for t in target]
        shape = parts[0] if len(parts) == 1 else self.graph.op("concat", *parts, axis=0, name=f"{name}_dims")
        return self.graph.op("reshape", result, shape, name=f"{name}_as_torch")

    def _dim(self, value: Value, axis: int) -> Value:
        """``value.size(axis)`` as an int64 [1], once per input dim."""
        key = (value.name, axis)
        if key not in self.dims:
            self.dims[key] = self.graph.op("shape", value, start=axis, end=axis + 1, name=f"{value.name}_size{axis}")
        return self.dims[key]


def _refine(result: Any, meta: Any, fixed: dict[str, int], graph: Graph) -> None:
    """Give dims the IR could not compute (``?3`` after a run-time reshape) the size or symbol torch knows.

    Keeping torch's symbols lets later converters see that a dim is the input's sequence
    length and keep views as views instead of computing shapes at run time.
    """
    if isinstance(result, list) and isinstance(meta, (list, tuple)):
        for r, m in zip(result, meta):
            _refine(r, m, fixed, graph)
        return
    if not isinstance(result, Value) or not hasattr(meta, "shape") or len(meta.shape) != result.type.rank:
        return
    dims = list(result.type.shape)
    for i, (ours, theirs) in enumerate(zip(dims, meta.shape)):
        if isinstance(ours, str) and ours.startswith("?"):
            better = _torch_dim(theirs, fixed)
            if better is not None:
                dims[i] = better
    if dims != list(result.type.shape):
        result.type = result.type.with_shape(dims)


def _is_user_output(spec: Any) -> bool:
    """Functionalized programs also return the new values of mutated inputs; only the user's outputs count."""
    return spec.kind.name == "USER_OUTPUT"


def _convert(graph: Graph, node: Any, env: dict) -> Any:
    key = _key(node.target)
    if key == "getitem":
        container, index = env[node.args[0]], node.args[1]
        if not isinstance(container, list) or index >= len(container):
            raise UnsupportedOpsError(f"node '{node.name}': output {index} of '{node.args[0].name}' is not supported")
        return container[index]
    if key.startswith(SKIPPED_PREFIXES):
        return None
    if key.startswith(SYMBOLIC_PREFIX):
        return ATEN[key](AtenContext(graph, node, {"args": [_resolve(a, env) for a in node.args]}))
    return ATEN[key](AtenContext(graph, node, _bind(node, env)))
