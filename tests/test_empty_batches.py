"""An empty batch (a symbolic batch dim run at 0) gives what onnxruntime gives, on the host plan and the delegate.

A server that batches requests hands a model a size-0 batch when a queue drains; numpy
cannot resolve a ``reshape(n, c, -1)`` of a size-0 array, and a reshape target
``[batch, seq, -1, 64]`` (every exported transformer's head split) fits any -1 once
batch is 0; a zero-length sequence empties a softmax's own axis. Each case runs a tiny
model with a symbolic batch at batch 0 and at batch 2, built for the host and for
``--target onnxruntime`` with its host fallback, and compares every output's dtype,
shape and values with onnxruntime on the original model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import aot
import runtime_lite
from tests.helpers import make_model, onnxruntime_outputs, rand

#: route -> (targets at build, backend_options at load): host plan, delegate, delegate off (its host fallback).
ROUTES = {
    "host": (["host"], None),
    "onnxruntime": (["onnxruntime"], None),
    "onnxruntime-fallback": (["onnxruntime"], {"onnxruntime": {"enabled": False}}),
}
#: Cases whose op has no onnxruntime lowering: every route runs the host plan.
HOST_ONLY = {"grid_sample"}
#: Where each route's modules run (the host plan has none).
PLACED = {"host": set(), "onnxruntime": {"onnxruntime"}, "onnxruntime-fallback": {"host"}}


def _node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def _batched(nodes, feeds, inits, opset=17):
    """A model over ``feeds`` whose first dim is the symbolic ``batch`` (feeds give the other dims)."""
    shapes = {name: ["batch", *a.shape[1:]] for name, a in feeds.items()}
    return make_model(nodes, feeds, ["y"], inits, opset=opset, input_shapes=shapes)


def conv():
    x = rand(2, 3, 6, 6)
    inits = {"w": rand(4, 3, 3, 3, seed=1), "b": rand(4, seed=2)}
    return _batched([_node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])], {"x": x}, inits), x


def conv_transpose():
    x = rand(2, 4, 5, 5)
    inits = {"w": rand(4, 2, 3, 3, seed=1)}
    return _batched([_node("ConvTranspose", ["x", "w"], strides=[2, 2], pads=[1, 1, 1, 1])], {"x": x}, inits), x


def head_split():
    """[batch, seq, 32] -> [batch, seq, -1, 8] with the target computed from the input's shape, as torch exports."""
    x = rand(2, 5, 32)
    nodes = [
        _node("Shape", ["x"], ["lead"], start=0, end=2),
        _node("Concat", ["lead", "heads"], ["target"], axis=0),
        _node("Reshape", ["x", "target"], ["split"], allowzero=1),
        _node("Transpose", ["split"], ["y"], perm=[0, 2, 1, 3]),
    ]
    model = make_model(
        nodes, {"x": x}, ["y"], {"heads": np.array([-1, 8], np.int64)}, opset=17,
        input_shapes={"x": ["batch", "seq", 32]},
    )  # fmt: skip
    return model, x


def gather_nd_batched():
    data = rand(2, 4, 3)
    indices = np.array([[[1], [3]], [[0], [2]]], np.int64)
    nodes = [_node("GatherND", ["x", "i"], batch_dims=1)]
    model = make_model(
        nodes, {"x": data, "i": indices}, ["y"], opset=13, input_shapes={"x": ["batch", 4, 3], "i": ["batch", 2, 1]}
    )
    return model, (data, indices)


def softmax_over_a_sequence():
    """Attention weights over a zero-length sequence: the softmax axis itself is empty (batch 0 here)."""
    x = rand(2, 3, 0)
    nodes = [_node("Softmax", ["x"], ["p"], axis=-1), _node("LogSoftmax", ["x"], ["l"], axis=-1),
             _node("Add", ["p", "l"], ["y"])]  # fmt: skip
    return make_model(nodes, {"x": x}, ["y"], opset=17, input_shapes={"x": ["batch", 3, "seq"]}), x


def whole_plane_pool():
    """A max pool whose window is the whole plane (AlexNet's last at a small input): one reduction per plane."""
    x = rand(2, 4, 3, 3)
    return _batched([_node("MaxPool", ["x"], kernel_shape=[3, 3])], {"x": x}, {}), x


def grid_sample():
    x, grid = rand(2, 3, 5, 6), rand(2, 4, 4, 2, low=-1.0, high=1.0, seed=1)
    return _batched([_node("GridSample", ["x", "grid"], align_corners=0)], {"x": x, "grid": grid}, {}), (x, grid)


CASES = {
    "conv": conv, "conv_transpose": conv_transpose, "head_split": head_split, "gather_nd": gather_nd_batched,
    "softmax_over_an_empty_axis": softmax_over_a_sequence, "whole_plane_pool": whole_plane_pool,
    "grid_sample": grid_sample,
}  # fmt: skip


def _feeds(model: onnx.ModelProto, example, batch: int) -> dict[str, np.ndarray]:
    arrays = example if isinstance(example, tuple) else (example,)
    names = [i.name for i in model.graph.input]
    return {name: a[:batch] for name, a in zip(names, arrays)}


def _load(model: onnx.ModelProto, targets: list[str], options):
    module = runtime_lite.load(aot.build(model, targets=targets, log=None).to_bytes(), backend_options=options)
    placed = {p["runs_on"] for p in module.placement.values()}
    return module, placed


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", CASES)
def test_an_empty_batch_gives_onnxruntimes_outputs(case, route):
    model, example = CASES[case]()
    targets, options = ROUTES[route]
    module, placed = _load(model, targets, options)
    assert placed == (set() if case in HOST_ONLY else PLACED[route]), f"{case} runs on {placed}"
    for batch in (0, 2):
        feeds = _feeds(model, example, batch)
        expected = onnxruntime_outputs(model, feeds)
        actual = module.run(feeds)
        for a, e in zip(actual, expected, strict=True):
            assert (a.dtype, a.shape) == (e.dtype, e.shape), f"batch {batch}: {a.dtype}{a.shape} vs {e.dtype}{e.shape}"
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6, err_msg=f"batch {batch}")


def test_a_reshape_zero_that_copies_a_missing_dim_is_a_one_line_error():
    """``0`` copies the input's dim at its position (allowzero=0); a zero-length sequence can put one past the
    input's rank, which onnxruntime refuses too: an error naming the op, not an IndexError."""
    from runtime_lite.kernels.shape import resolve_reshape

    with pytest.raises(ValueError, match=r"reshape: a 0 in \[2, 4, 8, 0\] copies a dim that input \[0, 8, 4\] lacks"):
        resolve_reshape((0, 8, 4), [2, 4, 8, 0])


def test_a_mean_over_no_values_is_nan_as_pytorch_and_onnxs_reference_give_and_warns_nothing():
    """ONNX leaves a mean over an empty set undefined: onnxruntime gives 0, onnx's reference evaluator and PyTorch
    NaN, which the host kernel keeps (0 for integers); numpy's 'Mean of empty slice' warning never reaches the
    caller. Over a kept empty axis the result is empty."""
    import warnings

    import onnx.reference

    from runtime_lite.kernels import KERNELS

    mean = KERNELS["reduce_mean"].fn
    x = np.zeros((1, 0, 4), np.float32)
    axes = helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [_node("ReduceMean", ["x", "axes"], keepdims=0)], "mean",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 0, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [axes],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (reference,) = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        np.testing.assert_array_equal(mean(x, axes=(1,), keepdims=0), reference)
        assert np.isnan(mean(np.zeros((0, 3), np.float32), axes=None, keepdims=0))
        assert mean(np.zeros((2, 0), np.int64), axes=(-1,), keepdims=1).tolist() == [[0], [0]]
        assert mean(x, axes=(2,), keepdims=1).shape == (1, 0, 1)
        module = runtime_lite.load(aot.build(model, targets=["host"], log=None).to_bytes())
        np.testing.assert_array_equal(module.run({"x": x})[0], reference)
