"""An int8 recipe on OpenVINO's float kernels, run as onnxruntime's float kernels run it: at float speed.

Where OpenVINO runs an int8 recipe on float kernels (int8.py: a CPU without an 8-bit dot
product), its low-precision transformations off leave two costs that onnxruntime's float
kernels do not have. Each activation's Q/DQ pair stays as float ops (the quantized function
emulated): on an Intel Xeon with oneDNN kept to AVX2, ResNet-50's recipe ran 1.08-1.09x the
float bundle that way, onnxruntime's float kernels 0.97x. And int8 weights behind a dequantize
stay compressed, unpacked at every run by OpenVINO's weight-decompression kernels: BERT-base's
float form ran 1.22x the float bundle there. So, as onnxruntime does, the pairs are dropped
(``unquantize_activations``) and the weights dequantized once, at load (``dequantize_weights``).

OpenVINO's ONNX reader turns ``QuantizeLinear -> DequantizeLinear`` into ``FakeQuantize ->
Convert -> Convert [-> Subtract] -> Multiply``, and a weight's ``DequantizeLinear`` into
``Convert -> [Subtract ->] Multiply`` over an int8 constant (its scale and zero point reshaped).
A chain in another form is left as it is: slower, never wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _single_user(node: Any) -> Any | None:
    users = list(node.output(0).get_target_inputs())
    return users[0].get_node() if len(users) == 1 else None


def _step(node: Any | None, kind: str) -> Any | None:
    """``node``'s one consumer where it is a ``kind`` (a Subtract or Multiply by a constant: a zero point, a scale)."""
    user = _single_user(node) if node is not None else None
    if user is None or user.get_type_name() != kind:
        return None
    if kind in ("Subtract", "Multiply") and not _constant(user.input_value(1).get_node()):
        return None
    return user


def _constant(node: Any) -> bool:
    """A constant, or one converted (a uint8 zero point read as float)."""
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


def _dequantized(fake_quantize: Any) -> Any | None:
    """The Multiply ending ``FakeQuantize -> Convert -> Convert [-> Subtract] -> Multiply``, or None."""
    converted = _step(_step(fake_quantize, "Convert"), "Convert")
    if converted is None:
        return None
    return _step(_step(converted, "Subtract") or converted, "Multiply")


def unquantize_activations(model: Any) -> int:
    """Bypass every activation's Q/DQ chain in ``model`` (an ``openvino.Model``); how many."""
    bypassed = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "FakeQuantize":
            continue
        source = op.input_value(0)
        if source.get_node().get_type_name() == "Constant":
            continue
        last = _dequantized(op)
        if last is None or last.output(0).get_element_type() != source.get_element_type():
            continue
        last.output(0).replace(source)
        bypassed += 1
    if bypassed:
        model.validate_nodes_and_infer_types()
    return bypassed


#: The ops a dequantized weight's value is computed through, each as numpy computes it.
_FOLDED = {
    "Convert": lambda node, x: x.astype(node.get_output_element_type(0).to_dtype()),
    "Subtract": lambda node, x, y: x - y,
    "Multiply": lambda node, x, y: x * y,
    "Reshape": lambda node, x, shape: x.reshape(tuple(node.get_output_shape(0))),
}


def _value(node: Any, depth: int = 0) -> np.ndarray | None:
    """The value of a constant expression (``_FOLDED`` over constants), or None where it is not one."""
    kind = node.get_type_name()
    if kind == "Constant":
        return node.get_data()
    if kind not in _FOLDED or depth > 8 or not node.get_output_partial_shape(0).is_static:
        return None
    operands = [_value(node.input_value(i).get_node(), depth + 1) for i in range(node.get_input_size())]
    if any(o is None for o in operands):
        return None
    try:
        return _FOLDED[kind](node, *operands)
    except (ValueError, TypeError, AttributeError):  # a form numpy does not follow: left to OpenVINO
        return None


def dequantize_weights(model: Any, ov: Any) -> int:
    """Replace every float weight computed from an integer constant (a dequantize: Convert, Subtract, Multiply) by
    its value, once; how many. ``ov``: the openvino module (engine.py alone imports it)."""
    folded = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Multiply" or op.get_output_element_type(0) != ov.Type.f32:
            continue
        source = op.input_value(0).get_node()
        while source.get_type_name() in ("Subtract", "Convert"):
            source = source.input_value(0).get_node()
        if source.get_type_name() != "Constant" or source.get_output_element_type(0).is_real():
            continue
        value = _value(op)
        if value is not None:
            op.output(0).replace(ov.op.Constant(np.ascontiguousarray(value, np.float32)).output(0))
            folded += 1
    if folded:
        model.validate_nodes_and_infer_types()
    return folded


__all__ = ["dequantize_weights", "unquantize_activations"]
