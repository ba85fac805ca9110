"""``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` (``aten.lstm``, ``aten.gru``, ``aten.rnn_tanh``, ``aten.rnn_relu``).

torch.export leaves a recurrent module as one call over all its layers. Each layer (and
direction) becomes the ONNX frontend's own recurrent layer, the converter of ONNX's
``LSTM``/``GRU``/``RNN``: unrolled over a sequence length known at build time (one matmul
for every step's input, one per step for the state), the ``recurrent`` op's time loop where
it is known only at run time. Only the weights are rearranged: torch's gate blocks
(LSTM ``i f g o``, GRU ``r z n``) in ONNX's order (``i o f c``, ``z r h``), the biases as
ONNX's ``[Wb, Rb]``; torch's GRU is ONNX's with ``linear_before_reset=1``. Without this,
torch's decomposition traced one cell per step and layer (960 ``lstm_cell``s, 38 s, for a
3-layer LSTM over 160 frames).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import CONVERTERS
from aot.frontend.torch.aten import aten
from aot.frontend.torch.context import AtenContext
from aot.ir.graph import Value

#: aten op -> (ONNX op, torch's gate blocks in ONNX's order, ONNX attributes besides hidden_size and direction)
KINDS: dict[str, tuple[str, list[int], dict[str, Any]]] = {
    "lstm": ("LSTM", [0, 3, 1, 2], {}),  # torch i f g o -> ONNX i o f c
    "gru": ("GRU", [1, 0, 2], {"linear_before_reset": 1}),  # torch r z n -> ONNX z r h
    "rnn_tanh": ("RNN", [0], {}),
    "rnn_relu": ("RNN", [0], {"activations": ["Relu"]}),
}


def _onnx_order(ctx: AtenContext, v: Value, order: list[int], hidden: int) -> Value:
    """Torch's gate blocks of ``hidden`` rows (axis 0) in ONNX's order (folded: the weights are constants)."""
    if order == sorted(order):
        return v
    blocks = [ctx.emit("slice", v, starts=[k * hidden], ends=[(k + 1) * hidden], axes=[0], steps=[1]) for k in order]
    return ctx.emit("concat", *blocks, axis=0)


def _stacked(ctx: AtenContext, values: list[Value]) -> Value:
    """One tensor per direction, stacked on a new axis 0 ([dirs, ...], as ONNX's W, R, B)."""
    parts = [ctx.emit("unsqueeze", v, axes=[0]) for v in values]
    return parts[0] if len(parts) == 1 else ctx.emit("concat", *parts, axis=0)


def _layer_state(ctx: AtenContext, state: Value, layer: int, dirs: int) -> Value | None:
    """Rows ``layer * dirs ...`` of h0 (or c0) [layers * dirs, batch, hidden]; None for zeros known at build time,
    which the ONNX lowering makes over the input's batch itself."""
    if state.is_constant and not np.any(state.data):
        return None
    return ctx.emit("slice", state, starts=[layer * dirs], ends=[(layer + 1) * dirs], axes=[0], steps=[1])


def _refuse_unsupported(ctx: AtenContext, kind: str, x: Value, params: list[Value], per: int, expected: int) -> None:
    if "batch_sizes" in ctx.args:
        raise ctx.unsupported("packed sequences (pack_padded_sequence) are not supported; pass the padded tensor")
    if not isinstance(x, Value) or x.type.rank != 3:
        raise ctx.unsupported(f"input must be 3-d ([seq, batch, features] or batch_first), got {getattr(x, 'type', x)}")
    if bool(ctx.get("train", False)) and float(ctx.get("dropout", 0.0)) > 0 and int(ctx["num_layers"]) > 1:
        raise ctx.unsupported(
            f"train=True with dropout={ctx['dropout']} between layers is not supported (call model.eval() before "
            "torch.export.export)"
        )
    if kind == "lstm" and len(params) == expected // per * (per + 1):
        raise ctx.unsupported("proj_size > 0 (LSTM with projections) is not supported")
    if len(params) != expected or not all(isinstance(p, Value) for p in params):
        raise ctx.unsupported(f"{len(params)} weight tensors, expected {expected} ({per} per layer and direction)")


def _recurrent(ctx: AtenContext, kind: str) -> list[Value]:
    op_type, order, attrs = KINDS[kind]
    x, params = ctx["input"], list(ctx["params"])
    hx = ctx["hx"]
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    has_biases, layers = bool(ctx["has_biases"]), int(ctx["num_layers"])
    dirs = 2 if ctx["bidirectional"] else 1
    per = 4 if has_biases else 2  # weight_ih, weight_hh[, bias_ih, bias_hh]
    _refuse_unsupported(ctx, kind, x, params, per, layers * dirs * per)
    batch_first = bool(ctx["batch_first"])
    if batch_first:
        x = ctx.emit("transpose", x, perm=[1, 0, 2])  # the ONNX layers run [seq, batch, features]
    hidden = params[1].type.shape[1]  # weight_hh [gates * hidden, hidden]
    finals: list[list[Value]] = [[] for _ in states]
    for layer in range(layers):
        w, r, b = [], [], []
        for d in range(dirs):
            group = params[(layer * dirs + d) * per : (layer * dirs + d + 1) * per]
            w.append(_onnx_order(ctx, group[0], order, hidden))
            r.append(_onnx_order(ctx, group[1], order, hidden))
            if has_biases:
                b.append(ctx.emit("concat", *[_onnx_order(ctx, v, order, hidden) for v in group[2:]], axis=0))
        initial = [_layer_state(ctx, s, layer, dirs) for s in states]
        inputs = [x, _stacked(ctx, w), _stacked(ctx, r), _stacked(ctx, b) if b else None, None, *initial]
        node = helper.make_node(
            op_type,
            [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)],
            ["y", "y_h", "y_c"][: 1 + len(states)],
            name=f"{ctx.name}_layer{layer}" if layers > 1 else ctx.name,
            hidden_size=hidden,
            direction="bidirectional" if dirs == 2 else "forward",
            **{k: v * dirs if isinstance(v, list) else v for k, v in attrs.items()},
        )
        y, *last = CONVERTERS[op_type](NodeContext(ctx.graph, node, inputs, opset=21))  # y [seq, dirs, batch, hidden]
        if dirs == 1:
            x = ctx.emit("squeeze", y, axes=[1])
        else:  # both directions' features side by side, as torch gives them
            x = ctx.emit("reshape", ctx.emit("transpose", y, perm=[0, 2, 1, 3]), shape=[0, 0, dirs * hidden])
        for final, value in zip(finals, last):
            final.append(value)
    output = ctx.emit("transpose", x, perm=[1, 0, 2]) if batch_first else x
    return [output] + [f[0] if len(f) == 1 else ctx.emit("concat", *f, axis=0) for f in finals]


for _kind in KINDS:
    aten(_kind)(lambda ctx, kind=_kind: _recurrent(ctx, kind))
