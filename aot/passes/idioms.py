"""Recognise exporters' spelled-out idioms as the ops they are.

Exporters write many ops as arithmetic: PyTorch before opset 17 writes layer norm as
ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div (then Mul/Add for the affine part), GELU
as Div/Erf/Add/Mul/Mul or with Tanh and Pow(x, 3), hard-swish as ``x *
HardSigmoid(x)`` or ``x * relu6(x + 3) / 6``; converted graphs chain Casts. Seen as
one op, a backend can take it whole (the NPU and TensorRT have layer-norm and GELU
units) and the host runs one kernel instead of nine.

Each idiom is a dataflow pattern (aot.compiler.pattern, TVM's DPL) plus a rewrite
that checks the constants and returns the replacement value, or None to decline. A
match is replaced only when its interior values are used by nothing outside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.compiler.pattern import Match, Pattern, intermediate_used_outside, is_const, is_op, match, wildcard
from aot.ir.graph import Graph, Value
from aot.passes.dead_code import eliminate_dead_code


def _either(op: str, a: Pattern, b: Pattern) -> Pattern:
    """A commutative op with its arguments in either order."""
    return is_op(op)(a, b) | is_op(op)(b, a)


def _scalar(value: Value | None) -> float | None:
    """The one number a constant holds (every element equal), else None."""
    if value is None or not value.is_constant or value.data.size == 0:
        return None
    flat = value.data.reshape(-1).astype(np.float64)
    return float(flat[0]) if np.all(flat == flat[0]) else None


def _is(value: Value | None, wanted: float, rel: float = 1e-4) -> bool:
    number = _scalar(value)
    return number is not None and math.isclose(number, wanted, rel_tol=rel, abs_tol=1e-7)


@dataclass(frozen=True)
class Idiom:
    name: str
    pattern: Pattern
    rewrite: Callable[[Match, Graph], Value | None]


# -- layer norm ----------------------------------------------------------------------------
_x = wildcard()
_mean = is_op("reduce_mean")(_x)
_centered = is_op("subtract")(_x, _mean)
_square = is_op("power")(_centered, is_const()) | is_op("multiply")(_centered, _centered)
_variance = is_op("reduce_mean")(_square)
_epsilon = is_const()
_std = is_op("sqrt")(_either("add", _variance, _epsilon))
_normalized = is_op("divide")(_centered, _std) | is_op("multiply")(_centered, is_op("reciprocal")(_std))


def _trailing_axis(match_: Match) -> int | None:
    """The first normalised axis, if both means reduce the same trailing axes with keepdims."""
    x = match_.value_of(_x)
    means = [match_.value_of(_mean).producer, match_.value_of(_variance).producer]
    axes = [m.attrs.get("axes") for m in means]
    if any(a is None for a in axes) or axes[0] != axes[1] or not all(m.attrs.get("keepdims", 1) for m in means):
        return None
    rank = x.type.rank
    ordered = sorted(a % rank for a in axes[0])
    if ordered != list(range(rank - len(ordered), rank)):
        return None
    return ordered[0]


def _layer_norm(m: Match, graph: Graph) -> Value | None:
    x = m.value_of(_x)
    axis = _trailing_axis(m)
    square = m.value_of(_square).producer
    if axis is None or (square.op == "power" and not _is(square.inputs[1], 2.0)):
        return None
    epsilon = _scalar(m.value_of(_epsilon))
    normalized_shape = x.type.shape[axis:]
    if epsilon is None or epsilon < 0 or not all(isinstance(d, int) for d in normalized_shape):
        return None
    scale = graph.constant(np.ones(normalized_shape, x.type.dtype), name="layer_norm_scale")
    return graph.op("layer_norm", x, scale, axis=axis, epsilon=epsilon, name=m.root.producer.name)


# layer_norm(x, s, b) * gamma + beta  ==>  layer_norm(x, s * gamma, b * gamma + beta)
_ln = is_op("layer_norm")(wildcard(), is_const(), ...)
_gamma, _beta = is_const(), is_const()
_scaled = _either("multiply", _ln, _gamma)
_affine = _either("add", _scaled | _ln, _beta) | _scaled


def _layer_norm_affine(m: Match, graph: Graph) -> Value | None:
    node = m.value_of(_ln).producer
    x, scale = node.inputs[0], node.inputs[1].data
    bias = node.inputs[2].data if len(node.inputs) > 2 else np.zeros_like(scale)
    if len(node.inputs) > 2 and not node.inputs[2].is_constant:
        return None
    normalized = scale.shape
    gamma = m.value_of(_gamma).data if m.value_of(_scaled) is not None else np.ones((), scale.dtype)
    beta = m.value_of(_beta).data if m.value_of(_beta) is not None else np.zeros((), scale.dtype)
    if gamma.ndim > len(normalized) or beta.ndim > len(normalized):
        return None  # they would broadcast over axes the norm does not cover
    try:
        new_scale = np.broadcast_to(scale * gamma, normalized).astype(scale.dtype)
        new_bias = np.broadcast_to(bias * gamma + beta, normalized).astype(scale.dtype)
    except ValueError:
        return None
    return graph.op(
        "layer_norm",
        x,
        graph.constant(np.ascontiguousarray(new_scale), name="layer_norm_scale"),
        graph.constant(np.ascontiguousarray(new_bias), name="layer_norm_bias"),
        axis=node.attrs["axis"],
        epsilon=node.attrs["epsilon"],
        name=node.name,
    )


# -- GELU ------------------------------------------------------------------------------
_gx = wildcard()
_sqrt2 = is_const()
_erf = is_op("erf")(is_op("divide")(_gx, _sqrt2) | is_op("multiply")(_gx, _sqrt2))
_one = is_const()
_one_plus_erf = _either("add", _erf, _one)
_half = is_const()
_gelu_erf = (
    _either("multiply", _either("multiply", _gx, _one_plus_erf), _half)
    | _either("multiply", _either("multiply", _gx, _half), _one_plus_erf)
    | _either("multiply", _gx, _either("multiply", _one_plus_erf, _half))
)


def _gelu(m: Match, graph: Graph) -> Value | None:
    divides = m.value_of(_erf).producer.inputs[0].producer.op == "divide"
    sqrt2 = math.sqrt(2.0) if divides else math.sqrt(0.5)
    if not (_is(m.value_of(_sqrt2), sqrt2) and _is(m.value_of(_one), 1.0) and _is(m.value_of(_half), 0.5)):
        return None
    return graph.op("gelu", m.value_of(_gx), approximate="none", name=m.root.producer.name)


_tx = wildcard()
_cube_coefficient, _sqrt_2_over_pi, _t_one, _t_half = is_const(), is_const(), is_const(), is_const()
_cube = is_op("power")(_tx, is_const())
_inner = _either("add", _tx, _either("multiply", _cube, _cube_coefficient))
_tanh = is_op("tanh")(_either("multiply", _inner, _sqrt_2_over_pi))
_one_plus_tanh = _either("add", _tanh, _t_one)
_gelu_tanh = (
    _either("multiply", _either("multiply", _tx, _one_plus_tanh), _t_half)
    | _either("multiply", _either("multiply", _tx, _t_half), _one_plus_tanh)
    | _either("multiply", _tx, _either("multiply", _one_plus_tanh, _t_half))
)


def _gelu_tanh_rewrite(m: Match, graph: Graph) -> Value | None:
    exponent = m.value_of(_cube).producer.inputs[1]
    constants = [
        (exponent, 3.0),
        (m.value_of(_cube_coefficient), 0.044715),
        (m.value_of(_sqrt_2_over_pi), math.sqrt(2.0 / math.pi)),
        (m.value_of(_t_one), 1.0),
        (m.value_of(_t_half), 0.5),
    ]
    if not all(_is(v, wanted) for v, wanted in constants):
        return None
    return graph.op("gelu", m.value_of(_tx), approximate="tanh", name=m.root.producer.name)


# -- hard sigmoid / hard swish ---------------------------------------------------------------
_hx = wildcard()
_three, _six = is_const(), is_const()
_relu6_shifted = is_op("relu6")(_either("add", _hx, _three))
_hard_sigmoid_spelled = is_op("divide")(_relu6_shifted, _six) | _either("multiply", _relu6_shifted, _six)


def _hard_sigmoid_constants_ok(m: Match) -> bool:
    sixth = m.value_of(_hard_sigmoid_spelled).producer.op == "multiply"
    return _is(m.value_of(_three), 3.0) and _is(m.value_of(_six), 1 / 6 if sixth else 6.0)


def _hard_sigmoid(m: Match, graph: Graph) -> Value | None:
    if not _hard_sigmoid_constants_ok(m):
        return None
    return graph.op("hard_sigmoid", m.value_of(_hx), alpha=1 / 6, beta=0.5, name=m.root.producer.name)


_sx = wildcard()
_gate = is_op("hard_sigmoid")(_sx)
_hard_swish_pattern = _either("multiply", _sx, _gate)


def _hard_swish(m: Match, graph: Graph) -> Value | None:
    attrs = m.value_of(_gate).producer.attrs
    if not (math.isclose(attrs["alpha"], 1 / 6, rel_tol=1e-5) and math.isclose(attrs["beta"], 0.5, rel_tol=1e-6)):
        return None
    return graph.op("hard_swish", m.value_of(_sx), name=m.root.producer.name)


# x * relu6(x + 3) / 6: the product comes first, then the division
_px, _p_three, _p_six = wildcard(), is_const(), is_const()
_product = _either("multiply", _px, is_op("relu6")(_either("add", _px, _p_three)))
_hard_swish_spelled = is_op("divide")(_product, _p_six) | _either("multiply", _product, _p_six)


def _hard_swish_product(m: Match, graph: Graph) -> Value | None:
    sixth = m.root.producer.op == "multiply"
    if not (_is(m.value_of(_p_three), 3.0) and _is(m.value_of(_p_six), 1 / 6 if sixth else 6.0)):
        return None
    return graph.op("hard_swish", m.value_of(_px), name=m.root.producer.name)


# -- casts ---------------------------------------------------------------------------------
_cx = wildcard()
_first_cast = is_op("cast")(_cx)
_cast_chain = is_op("cast")(_first_cast)


def _cast_chain_rewrite(m: Match, graph: Graph) -> Value | None:
    """cast(cast(x, B), C) is cast(x, C) when x -> B loses nothing (and x itself when C is x's type)."""
    x = m.value_of(_cx)
    middle = m.value_of(_first_cast).type.dtype
    if not np.can_cast(np.dtype(x.type.dtype), np.dtype(middle), "safe"):
        return None
    to = m.root.type.dtype
    return x if to == x.type.dtype else graph.op("cast", x, to=to, name=m.root.producer.name)


IDIOMS: tuple[Idiom, ...] = (
    Idiom("layer_norm", _normalized, _layer_norm),
    Idiom("layer_norm affine", _affine, _layer_norm_affine),
    Idiom("gelu", _gelu_erf, _gelu),
    Idiom("gelu (tanh)", _gelu_tanh, _gelu_tanh_rewrite),
    Idiom("hard_swish", _hard_swish_spelled, _hard_swish_product),
    Idiom("hard_sigmoid", _hard_sigmoid_spelled, _hard_sigmoid),
    Idiom("hard_swish", _hard_swish_pattern, _hard_swish),
    Idiom("cast chain", _cast_chain, _cast_chain_rewrite),
)


def recognize_idioms(graph: Graph) -> dict[str, int]:
    """Rewrite every idiom found, in graph order; returns how many of each."""
    found: dict[str, int] = {}
    changed = True
    while changed:  # a rewrite can complete a larger idiom (layer_norm, then its affine part)
        changed = False
        for node in list(graph.nodes):
            if len(node.outputs) != 1:
                continue
            for idiom in IDIOMS:
                m = match(idiom.pattern, node.outputs[0])
                if m is None:
                    continue
                if intermediate_used_outside(m, graph.consumers(), {id(v) for v in graph.outputs}):
                    continue
                replacement = idiom.rewrite(m, graph)
                if replacement is None:
                    continue
                if replacement.type != m.root.type:
                    raise AssertionError(f"idiom {idiom.name} changed the type {m.root.type} -> {replacement.type}")
                graph.replace_uses(m.root, replacement)
                found[idiom.name] = found.get(idiom.name, 0) + 1
                changed = True
                break
        if changed:
            graph.toposort()
            eliminate_dead_code(graph)
    return found
