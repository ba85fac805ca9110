"""Ops that read one weight are one layer to the accuracy budget (aot/compiler/quantize/tuning.py ``layers``).

An LSTM unrolled over its steps reads each of its weights once per step: measured op by op, the
per-layer sensitivity built one variant per step (resemblyzer's encoder: 484 "layers" over 7
weights, an int8 build that did not end in 10 minutes; grouped, 52 s), and kept some steps'
matmuls float and others int8 over one weight stored once.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from aot.compiler.quantize.insert import plan_quantization
from aot.compiler.quantize.tuning import BUDGET_REASON, layers, restrict
from aot.frontend.onnx import from_onnx
from aot.passes import optimize

STEPS, FEATURES, HIDDEN, CLASSES = 12, 4, 6, 5


def _lstm_classifier():
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((1, 4 * HIDDEN, FEATURES)).astype(np.float32),
        "R": rng.standard_normal((1, 4 * HIDDEN, HIDDEN)).astype(np.float32),
        "shape": np.array([1, HIDDEN], np.int64),
        "head": rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32),
    }
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R"], ["", "h"], hidden_size=HIDDEN),
        helper.make_node("Reshape", ["h", "shape"], ["last"]),
        helper.make_node("MatMul", ["last", "head"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ir = from_onnx(model)
    optimize(ir)
    return ir


def test_the_steps_of_an_unrolled_lstm_are_one_layer_per_weight():
    plan = plan_quantization(_lstm_classifier(), {"any": lambda node: None})
    groups = layers(plan)
    assert len(plan.ops) >= STEPS + 1 and len(groups) < len(plan.ops)
    weights = {}
    for group in groups:  # each layer's ops read one weight, and no weight is in two layers
        ops = [op for op in plan.ops if op.node.name in group]
        read = {id(op.node.inputs[1]) for op in ops}
        assert len(read) == 1 and not read & weights.keys()
        weights.update(dict.fromkeys(read))
    assert max(len(g) for g in groups) >= STEPS  # the state's weight R, read at every step


def test_keeping_one_op_float_keeps_every_op_of_its_weight_float():
    plan = plan_quantization(_lstm_classifier(), {"any": lambda node: None})
    recurrent = max(layers(plan), key=len)
    kept = restrict(plan, [recurrent[-1]])
    assert not {op.node.name for op in kept.ops} & set(recurrent)
    assert len(kept.ops) == len(plan.ops) - len(recurrent)
    assert sum(c[BUDGET_REASON] for c in kept.floats.values()) == len(recurrent)
