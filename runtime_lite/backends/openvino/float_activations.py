"""An int8 recipe's activations left unquantized on OpenVINO's float kernels, as onnxruntime's float kernels run them.

Where OpenVINO runs a static int8 recipe on float kernels (int8.py: a CPU without an 8-bit dot
product), its low-precision transformations off leave each activation's Q/DQ pair as float ops:
the quantized function emulated, at a cost. On an Intel Xeon with oneDNN kept to AVX2, ResNet-50's
recipe ran 1.08-1.09x the float bundle that way, while onnxruntime's float kernels, which drop
the pairs (weights int8-rounded, activations float), ran 0.97x. So the pairs are dropped here too.

OpenVINO's ONNX reader turns ``QuantizeLinear -> DequantizeLinear`` into ``FakeQuantize ->
Convert -> Convert [-> Subtract] -> Multiply``; each such chain over an activation (not a constant:
weights keep their rounding) is bypassed, its consumers reading the activation itself. A chain in
another form is left as it is: slower, never wrong.
"""

from __future__ import annotations

from typing import Any


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


__all__ = ["unquantize_activations"]
