"""Module.run's input contract: names, ranks, dims, dtypes (with the safe-cast policy), and what
happens with unusual but valid arrays. docs/inputs.md documents each behaviour tested here."""

from __future__ import annotations

import numpy as np
import pytest

import aot
import runtime_lite
from runtime_lite import InputError
from tests.conftest import small_cnn_model
from tests.helpers import make_model, rand


@pytest.fixture(scope="module")
def module(small_bundle):
    return runtime_lite.load(small_bundle)


@pytest.fixture(scope="module")
def batch_module():
    return runtime_lite.load(aot.build(small_cnn_model(batch="N")).to_bytes())


def error(module, inputs) -> str:
    with pytest.raises(InputError) as info:
        module.run(inputs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_signature_is_described(module):
    (x,) = module.inputs
    assert (x.name, x.shape, x.dtype) == ("x", (1, 3, 8, 8), np.dtype("float32"))
    assert [(o.name, o.shape) for o in module.outputs] == [("probs", (1, 10))]
    assert str(x) == "x: float32[1,3,8,8]"


def test_dict_list_and_single_array_give_the_same_result(module, small_input):
    by_name = module.run({"x": small_input})
    by_order = module.run([small_input])
    single = module.run(small_input)
    assert isinstance(by_name, list) and len(by_name) == 1
    np.testing.assert_array_equal(by_name[0], by_order[0])
    np.testing.assert_array_equal(by_name[0], single[0])


def test_missing_extra_and_misnamed_inputs(module, small_input):
    assert "missing input 'x'" in error(module, {})
    assert "unknown input 'y'" in error(module, {"x": small_input, "y": small_input})
    message = error(module, {"X": small_input})
    assert "unknown input 'X'" in message and "x: float32[1,3,8,8]" in message
    assert "expected 1 inputs" in error(module, [small_input, small_input])
    assert "must be a dict" in error(module, "x")


def test_wrong_rank_and_dims(module):
    assert "expected rank 4" in error(module, [np.zeros((3, 8, 8), np.float32)])
    message = error(module, [np.zeros((1, 3, 8, 9), np.float32)])
    assert "input 'x'" in message and "[1,3,8,8]" in message and "dim 3" in message


def test_a_nested_list_read_as_a_list_of_inputs_says_how_to_pass_it(module, small_input):
    """``run(x.tolist())`` is a list of one value per input: its first row is the input, which has the wrong rank."""
    message = error(module, small_input.tolist())
    assert message.startswith("input 'x': expected rank 4 [1,3,8,8], got shape [3, 8, 8]")
    assert "the list was read as one value per input" in message and "run({'x': values})" in message
    assert "read as one value per input" not in error(module, [np.zeros((3, 8, 8), np.float32)])  # an array: no guess
    np.testing.assert_array_equal(module.run({"x": small_input.tolist()})[0], module.run([small_input])[0])


def test_lossy_dtype_is_refused_with_the_fix(module):
    message = error(module, [np.zeros((1, 3, 8, 8), np.float64)])
    assert "expected dtype float32, got float64" in message and "astype(np.float32)" in message
    assert "got int64" in error(module, [np.zeros((1, 3, 8, 8), np.int64)])


def test_lossless_dtype_and_python_sequences_are_converted(module, small_input):
    expected = module.run([small_input])[0]
    half = small_input.astype(np.float16)
    np.testing.assert_array_equal(module.run([half])[0], module.run([half.astype(np.float32)])[0])
    np.testing.assert_allclose(module.run([small_input.tolist()])[0], expected)
    assert "cannot convert" in error(module, [[["not a number"]]])


def test_non_contiguous_and_read_only_inputs(module, small_input):
    expected = module.run([small_input])[0]
    wide = np.zeros((1, 3, 8, 16), np.float32)
    wide[..., ::2] = small_input
    strided = wide[..., ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_allclose(module.run([strided])[0], expected, rtol=1e-6)
    frozen = small_input.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(module.run([frozen])[0], expected)


def test_inputs_are_never_modified(small_input):
    # relu right after the input: an in-place relu on the caller's array would be a bug.
    from onnx import helper

    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], {"x": rand(2, 3)}, ["z"]
    )
    module = runtime_lite.load(aot.build(model).to_bytes())
    x = rand(2, 3)
    before = x.copy()
    module.run([x])
    np.testing.assert_array_equal(x, before)


def test_nan_and_inf_pass_through(module, small_input):
    poisoned = small_input.copy()
    poisoned[0, 0, 0, 0] = np.nan
    out = module.run([poisoned])[0]
    assert np.isnan(out).any()
    poisoned[0, 0, 0, 0] = np.inf
    module.run([poisoned])  # no exception, no warning-as-error


def test_outputs_are_owned_and_writable():
    from onnx import helper

    # Outputs that would alias the caller's input or a mapped weight are copied.
    nodes = [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Reshape", ["x", "s"], ["flat"])]
    model = make_model(nodes, {"x": rand(2, 3)}, ["same", "flat", "s"], {"s": np.array([6], np.int64)})
    module = runtime_lite.load(aot.build(model).to_bytes())
    x = rand(2, 3)
    same, flat, s = module.run([x])
    for out in (same, flat, s):
        assert out.flags.writeable
        assert not np.shares_memory(out, x)
    same[...] = 0
    assert x.any()


def test_symbolic_batch_binds_consistently(batch_module):
    assert batch_module.inputs[0].shape == ("N", 3, 8, 8)
    for batch in (1, 3, 8):
        out = batch_module.run([rand(batch, 3, 8, 8)])[0]
        assert out.shape == (batch, 10)


def test_symbolic_dim_must_agree_across_inputs():
    from onnx import helper

    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        {"a": rand(2, 3), "b": rand(2, 3)},
        ["y"],
        input_shapes={"a": ["N", 3], "b": ["N", 3]},
    )
    module = runtime_lite.load(aot.build(model).to_bytes())
    message = error(module, [rand(2, 3), rand(4, 3)])
    assert "'N'" in message and "another input" in message
