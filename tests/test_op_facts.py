"""Op facts are stated once: attributes and their defaults in ``aot.ir.ops``, nowhere else.

The runtime never imports the compiler, so it cannot read ``OpDef``; instead the
compiler writes every attribute into a bundle (``OpDef.complete_attrs`` fills in the
defaults when a node is made) and a kernel's attribute parameters have no defaults
of their own: a bundle that leaves one out is refused when it loads, never run with
a value the runtime made up.
"""

from __future__ import annotations

import inspect

import pytest

from aot.ir import contrib, ops
from aot.ir.ops import OPS
from runtime_lite.errors import BundleError
from runtime_lite.execution.plan import bind_kernel
from runtime_lite.kernels import KERNELS


def _parameters(op: str) -> tuple[list[inspect.Parameter], dict[str, inspect.Parameter]]:
    """A kernel's operand parameters (positional, in order) and its attribute parameters (keywords, but out)."""
    params = inspect.signature(KERNELS[op].fn).parameters.values()
    operands = [p for p in params if p.kind is not p.KEYWORD_ONLY]
    attrs = {p.name: p for p in params if p.kind is p.KEYWORD_ONLY and p.name != "out"}
    return operands, attrs


def test_every_op_has_a_host_kernel_and_every_kernel_an_op():
    """The one exception: onnxruntime's contrib ops, which only its kernels compute (aot/ir/contrib.py); a build
    refuses them outside an onnxruntime region."""
    assert sorted(KERNELS) == sorted(set(OPS) - {contrib.OP})


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_kernel_keywords_are_exactly_the_opdef_attributes(op):
    _, attrs = _parameters(op)
    assert sorted(attrs) == sorted(OPS[op].attrs)


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_kernel_attributes_have_no_defaults_of_their_own(op):
    """Defaults live in OpDef only; a kernel default could silently disagree with it."""
    _, attrs = _parameters(op)
    with_default = {name: p.default for name, p in attrs.items() if p.default is not p.empty}
    assert not with_default, f"{op}: move these defaults to aot/ir/ops.py: {with_default}"


@pytest.mark.parametrize("op", sorted(KERNELS))
def test_kernel_operands_follow_the_opdef_inputs(op):
    """One positional parameter per input; optional inputs default to None, a variadic one is ``*args``."""
    operands, _ = _parameters(op)
    inputs = OPS[op].inputs
    assert len(operands) == len(inputs), f"{op}: kernel {[str(p) for p in operands]}, OpDef {inputs}"
    for param, name in zip(operands, inputs):
        if name.endswith("*"):
            assert param.kind is param.VAR_POSITIONAL, f"{op}: {name} is variadic, {param} is not"
        elif name.endswith("?"):
            assert param.default is None, f"{op}: {name} is optional, {param} has no None default"
        else:
            assert param.default is param.empty, f"{op}: {name} is required, {param} has a default"


def test_a_bundle_that_leaves_out_an_attribute_is_refused():
    with pytest.raises(BundleError, match="missing a required argument: 'axis'"):
        bind_kernel("softmax", 1, {}, "plan.instructions[0]", "instruction 'softmax'")
    bound = bind_kernel("softmax", 1, {"axis": -1}, "plan.instructions[0]", "instruction 'softmax'")
    assert callable(bound)


CATEGORIES = {
    "UNARY_OPS": (ops.UNARY_OPS, ("x",)),
    "BINARY_OPS": (ops.BINARY_OPS, ("a", "b")),
    "COMPARISON_OPS": (ops.COMPARISON_OPS, ("a", "b")),
    "BITWISE_OPS": (ops.BITWISE_OPS, ("a", "b")),
    "REDUCE_OPS": (ops.REDUCE_OPS, ("x",)),
    "ARG_REDUCE_OPS": (ops.ARG_REDUCE_OPS, ("x",)),
    "CONV_OPS": (ops.CONV_OPS, ("x", "w", "b?")),
    "CONV_TRANSPOSE_OPS": (ops.CONV_TRANSPOSE_OPS, ("x", "w", "b?")),
    "MAX_POOL_OPS": (ops.MAX_POOL_OPS, ("x",)),
    "AVG_POOL_OPS": (ops.AVG_POOL_OPS, ("x",)),
}


@pytest.mark.parametrize("category", sorted(CATEGORIES))
def test_a_category_names_registered_ops_of_one_shape(category):
    names, inputs = CATEGORIES[category]
    assert names and len(set(names)) == len(names)
    for name in names:
        assert OPS[name].inputs == inputs, f"{category}: {name} takes {OPS[name].inputs}"
        assert set(OPS[name].attrs) == set(OPS[names[0]].attrs), f"{category}: {name} has other attributes"
    if category in ("UNARY_OPS", "BINARY_OPS", "COMPARISON_OPS", "BITWISE_OPS"):
        assert not OPS[names[0]].attrs


def test_tensorrt_admits_exactly_what_its_recipe_writer_lowers():
    from aot.compiler.backends import recipe
    from aot.compiler.backends.tensorrt import patterns
    from aot.compiler.pattern import root_ops

    admitted: set[str] = set()
    for pattern in patterns.tensorrt_patterns():
        roots = root_ops(pattern.pattern)
        assert roots is not None, f"{pattern.name} matches at any op"
        admitted |= roots
    assert admitted == set(recipe.EXPORTS)
    assert patterns.OWN_PATTERN_OPS <= set(recipe.EXPORTS)
