"""Write examples/models/small_cnn.onnx: the small classifier the quickstart compiles.

conv-bn-relu-pool, conv-bn-relu, global average pool, gemm, softmax on 3x32x32
images, with a symbolic batch dimension "N" and fixed-seed weights. Written with
onnx.helper so the file can be regenerated and reviewed:

    python examples/models/make_small_cnn.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def he(*shape):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)

    def bn(prefix, channels):
        return {
            f"{prefix}_scale": rng.uniform(0.8, 1.2, channels).astype(np.float32),
            f"{prefix}_bias": rng.uniform(-0.1, 0.1, channels).astype(np.float32),
            f"{prefix}_mean": rng.uniform(-0.1, 0.1, channels).astype(np.float32),
            f"{prefix}_var": rng.uniform(0.8, 1.2, channels).astype(np.float32),
        }

    weights = {
        "conv1_w": he(16, 3, 3, 3),
        "conv2_w": he(32, 16, 3, 3),
        "fc_w": he(10, 32),
        "fc_b": np.zeros(10, np.float32),
    }
    weights.update(bn("bn1", 16))
    weights.update(bn("bn2", 32))
    nodes = [
        helper.make_node("Conv", ["images", "conv1_w"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node(
            "BatchNormalization", ["c1", "bn1_scale", "bn1_bias", "bn1_mean", "bn1_var"], ["b1"], name="bn1"
        ),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "conv2_w"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node(
            "BatchNormalization", ["c2", "bn2_scale", "bn2_bias", "bn2_mean", "bn2_var"], ["b2"], name="bn2"
        ),
        helper.make_node("Relu", ["b2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    # Opset 15: onnx's reference evaluator (the quickstart's oracle) mis-evaluates BatchNormalization
    # at opsets 9-13 (it applies the default momentum as if training); from 14 it honours inference mode.
    opsets = [helper.make_opsetid("", 15)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8, producer_name="aot-examples")
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = Path(__file__).with_name("small_cnn.onnx")
    onnx.save(small_cnn(), path)
    print(f"wrote {path}")
