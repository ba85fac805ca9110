"""Recipes that an older onnxruntime, still within ``runtime-lite[onnxruntime]``'s range, gets wrong.

``runtime-lite[onnxruntime]`` takes onnxruntime 1.17 and later (the oldest with wheels
for numpy 1.24, the runtime's own floor). Running aot's recipes and ONNX's node tests
on each release found two ops that older releases do not compute as the spec says
(and as the host plan does):

* before 1.29, ``AveragePool`` with ``ceil_mode=1`` and ``count_include_pad=1``
  divides the windows that run past the padded edge by the wrong count: a wrong
  number, silently (0.14 off on values near 0.3);
* before 1.21, ``ReduceMax``/``ReduceMin`` over an empty tensor fails the run instead
  of giving the identity (``-inf``/``inf``).

A recipe holding such a node runs its host plan on those releases, and the placement
says why, so a host pinned to an older onnxruntime gets the right numbers. A node's
input shape is the one the recipe check followed (``RecipeFacts.shapes``); where it is
symbolic, an empty reduction is found only when it runs (a one-line error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from runtime_lite.backends.onnxruntime.shapes import Node

#: The first onnxruntime release whose AveragePool counts ceil_mode windows right with count_include_pad.
AVERAGE_POOL_CEIL_FIXED = (1, 29)
#: The first onnxruntime release that reduces an empty tensor with ReduceMax/ReduceMin.
EMPTY_REDUCTION_FIXED = (1, 21)


def release(version: str) -> tuple[int, int]:
    """(major, minor) of an onnxruntime version string ("1.17.0", "1.22.0.dev20250101"); (0, 0) if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _spelled(fixed: tuple[int, int]) -> str:
    return f"{fixed[0]}.{fixed[1]}"


def wrong_on(version: str, nodes: Sequence[Node], shapes: Mapping[str, tuple]) -> str | None:
    """Why onnxruntime ``version`` must not run these recipe nodes, naming the first such node; None if it may."""
    running = release(version)
    for node in nodes:
        if (
            running < AVERAGE_POOL_CEIL_FIXED
            and node.op_type == "AveragePool"
            and node.attrs.get("ceil_mode") == 1
            and node.attrs.get("count_include_pad") == 1
        ):
            return (
                f"onnxruntime before {_spelled(AVERAGE_POOL_CEIL_FIXED)} averages AveragePool {node.where} "
                "(ceil_mode=1, count_include_pad=1) over the wrong count"
            )
        if running < EMPTY_REDUCTION_FIXED and node.op_type in ("ReduceMax", "ReduceMin") and node.inputs:
            shape = shapes.get(node.inputs[0])
            if shape is not None and 0 in shape:
                return (
                    f"onnxruntime before {_spelled(EMPTY_REDUCTION_FIXED)} fails {node.op_type} {node.where} "
                    "over an empty tensor"
                )
    return None


__all__ = ["AVERAGE_POOL_CEIL_FIXED", "EMPTY_REDUCTION_FIXED", "release", "wrong_on"]
