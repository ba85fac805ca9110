"""Microsoft's contrib ops that onnxruntime ships (``com.microsoft``), as one canonical op only onnxruntime runs.

Real files hold them: ``onnxruntime.quantization.quantize_dynamic`` writes
``DynamicQuantizeLSTM`` for every LSTM, the transformers optimizer writes ``Gelu``,
``FastGelu``, ``BiasGelu`` and ``FusedMatMul``. onnxruntime computes them with its own
kernels (an LSTM over int8 weights quantizes its activations at each step), which no
host kernel reproduces: the op ``onnxruntime_contrib`` carries the node as the file
wrote it into an onnxruntime region's recipe and nowhere else. Left on the host (the
host plan, any other target) it is refused in one line when the bundle is built.

:data:`CONTRIB_OPS` is the allow-list: each entry's rule gives its outputs' types, so
the graph around the op keeps its shapes. The run side's recipe check admits the same
names (``runtime_lite/backends/onnxruntime/recipe_check.py``); a test keeps them equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aot.ir.ops import REQUIRED, InferContext, broadcast_shapes, register_op
from aot.ir.types import TensorType

DOMAIN = "com.microsoft"
OP = "onnxruntime_contrib"
Rule = Callable[[InferContext, dict[int, TensorType], dict], list[TensorType]]


def _same(ctx: InferContext, ins: dict[int, TensorType], attrs: dict) -> list[TensorType]:
    return [ins[0]]


def _bias_gelu(ctx: InferContext, ins: dict[int, TensorType], attrs: dict) -> list[TensorType]:
    return [TensorType(broadcast_shapes([ins[0].shape, ins[1].shape], ctx, "BiasGelu"), ins[0].dtype)]


def _fused_matmul(ctx: InferContext, ins: dict[int, TensorType], attrs: dict) -> list[TensorType]:
    """``alpha * op(A) @ op(B)``, op a transpose of the last two axes where ``transA`` / ``transB`` say."""
    if attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0):
        raise ctx.fail("FusedMatMul", "transBatchA / transBatchB are not supported")
    a, b = list(ins[0].shape), list(ins[1].shape)
    if len(a) < 2 or len(b) < 2:
        raise ctx.fail("FusedMatMul", f"operands of rank 2 or more, got {ins[0]} and {ins[1]}")
    if attrs.get("transA", 0):
        a[-2], a[-1] = a[-1], a[-2]
    if attrs.get("transB", 0):
        b[-2], b[-1] = b[-1], b[-2]
    batch = broadcast_shapes([a[:-2], b[:-2]], ctx, "FusedMatMul")
    return [TensorType((*batch, a[-2], b[-1]), ins[0].dtype)]


def _dynamic_quantize_lstm(ctx: InferContext, ins: dict[int, TensorType], attrs: dict) -> list[TensorType]:
    """X [seq, batch, input] -> Y [seq, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden]."""
    x, hidden = ins[0], attrs.get("hidden_size")
    if x.rank != 3 or not isinstance(hidden, int):
        raise ctx.fail("DynamicQuantizeLSTM", f"needs X [seq, batch, input] and hidden_size, got {x}")
    dirs = 2 if attrs.get("direction", "forward") == "bidirectional" else 1
    seq, batch = x.shape[:2]
    state = TensorType((dirs, batch, hidden), x.dtype)
    return [TensorType((seq, dirs, batch, hidden), x.dtype), state, state]


#: The contrib ops the onnxruntime delegate takes: name -> (the input slots that must be given, the output rule).
CONTRIB_OPS: dict[str, tuple[tuple[int, ...], Rule]] = {
    "Gelu": ((0,), _same),
    "FastGelu": ((0,), _same),
    "QuickGelu": ((0,), _same),
    "BiasGelu": ((0, 1), _bias_gelu),
    "FusedMatMul": ((0, 1), _fused_matmul),
    "DynamicQuantizeLSTM": ((0, 1, 2, 8, 9, 10, 11), _dynamic_quantize_lstm),
}


def _infer(ctx: InferContext) -> list[TensorType]:
    a = ctx.attrs
    name = a["op_type"]
    if a["domain"] != DOMAIN or name not in CONTRIB_OPS:
        raise ctx.fail(OP, f"{a['domain']}.{name} is not an onnxruntime contrib op aot admits")
    slots = list(a["slots"])
    if len(slots) != len(ctx.types) or len(set(slots)) != len(slots):
        raise ctx.fail(OP, f"slots {slots} do not name the {len(ctx.types)} inputs")
    ins = dict(zip(slots, ctx.types))
    required, rule = CONTRIB_OPS[name]
    missing = [i for i in required if i not in ins]
    if missing:
        raise ctx.fail(OP, f"{DOMAIN}.{name} needs its input {missing[0]}")
    return rule(ctx, ins, attributes_of(a))


def encode_attributes(attributes: dict) -> str:
    """The node's ONNX attributes as JSON text: a bundle's plan attributes are flat values, and this is data."""
    return json.dumps(attributes, sort_keys=True)


def attributes_of(attrs: dict) -> dict:
    """The node's ONNX attributes (``encode_attributes`` read back)."""
    return json.loads(attrs["attributes"])


def qualified(attrs: dict) -> str:
    """``com.microsoft.DynamicQuantizeLSTM``: how errors and notes name the node's op."""
    return f"{attrs['domain']}.{attrs['op_type']}"


register_op(OP, "xs*", _infer, op_type=REQUIRED, domain=DOMAIN, attributes=REQUIRED, slots=REQUIRED)
