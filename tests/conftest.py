"""Fixtures shared across the test suite."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import aot
from tests.helpers import make_model, rand


def small_cnn_model(batch: int | str = 1, opset: int = 13):
    """conv -> batch norm -> relu -> pool -> flatten -> gemm -> softmax, with real weights."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], transB=1, name="fc"),
        helper.make_node("Softmax", ["g"], ["probs"], axis=1, name="softmax"),
    ]
    inits = {
        "w": rand(4, 3, 3, 3, seed=1),
        "b": rand(4, seed=2),
        "s": rand(4, seed=3, low=0.5, high=1.5),
        "t": rand(4, seed=4),
        "m": rand(4, seed=5),
        "v": rand(4, seed=6, low=0.5, high=1.5),
        "gw": rand(10, 64, seed=7),
        "gb": rand(10, seed=8),
    }
    return make_model(
        nodes, {"x": rand(1, 3, 8, 8)}, ["probs"], inits, opset=opset, input_shapes={"x": [batch, 3, 8, 8]}
    )


@pytest.fixture(scope="session")
def small_model():
    return small_cnn_model()


@pytest.fixture(scope="session")
def small_build(small_model):
    return aot.build(small_model)


@pytest.fixture(scope="session")
def small_bundle(small_build) -> bytes:
    return small_build.to_bytes()


@pytest.fixture
def small_input():
    return np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
