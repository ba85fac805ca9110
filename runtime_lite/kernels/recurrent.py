"""RNN, GRU and LSTM over a sequence whose length is known only at run time.

Where the length is known at build time the compiler unrolls a recurrent layer into
matmuls and activations every backend knows; where it is not (a recognizer's time
axis follows the image's width), this kernel runs the time loop. Semantics are
ONNX's (gate order iofc for LSTM, zrh for GRU, ``linear_before_reset``, clip,
peepholes, forward / reverse / bidirectional), the same the unrolled form computes.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.activation import sigmoid
from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.registry import kernel

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
_ACTIVATIONS = {"sigmoid": lambda v: sigmoid(v), "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0)}


def check_recurrent_attrs(attrs: dict) -> None:
    kind, direction, hidden = attrs.get("kind"), attrs.get("direction"), attrs.get("hidden_size")
    if kind not in GATES:
        raise ValueError(f"attribute kind must be one of {', '.join(GATES)}, got {kind!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"attribute direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if not isinstance(hidden, int) or isinstance(hidden, bool) or not 1 <= hidden <= 1 << 20:
        raise ValueError(f"attribute hidden_size must be an integer in [1, {1 << 20}], got {hidden!r}")
    activations = attrs.get("activations")
    per_direction = {"rnn": 1, "gru": 2, "lstm": 3}[kind]
    if not isinstance(activations, list) or len(activations) != per_direction * DIRECTIONS[direction]:
        raise ValueError(f"attribute activations must list {per_direction} per direction, got {activations!r}")
    unknown = [a for a in activations if a not in _ACTIVATIONS]
    if unknown:
        raise ValueError(f"attribute activations names {unknown[0]!r} (known: {', '.join(_ACTIVATIONS)})")


def _result_count(attrs: dict) -> int:
    return 3 if attrs.get("kind") == "lstm" else 2


def _recurrent_cost(x, w, r, b, *states, kind, hidden_size, direction, **_) -> int:
    if x.ndim != 3 or kind not in GATES or direction not in DIRECTIONS:
        return 0  # refused by the kernel before it allocates
    seq, batch = x.shape[:2]
    dirs = DIRECTIONS[direction]
    gated = batch * GATES[kind] * hidden_size
    # y, the projected inputs and their biased copy, the final states, and one step's temporaries
    elements = seq * dirs * batch * hidden_size + 2 * seq * gated + 2 * dirs * batch * hidden_size + 16 * gated
    return nbytes((elements,), x.dtype)


@kernel("recurrent", check=check_recurrent_attrs, cost=_recurrent_cost, outputs=_result_count)
def recurrent(
    x, w, r, b, *states, kind, hidden_size, direction, activations, clip, linear_before_reset, initial_h, initial_c,
    peepholes,
):  # fmt: skip
    """x [seq, batch, input], w [dirs, G*h, input], r [dirs, G*h, h], b [dirs, 2*G*h], then the initial h and c
    and the peepholes [dirs, 3h] where the flags say; returns y [seq, dirs, batch, h], y_h (and y_c)."""
    gates, h, dirs = GATES[kind], hidden_size, DIRECTIONS[direction]
    if x.ndim != 3 or w.shape[:2] != (dirs, gates * h) or r.shape != (dirs, gates * h, h):
        raise ValueError(f"recurrent: x {list(x.shape)}, w {list(w.shape)}, r {list(r.shape)} do not fit "
                         f"{dirs} direction(s) of {kind} with hidden_size {h}")  # fmt: skip
    if w.shape[2] != x.shape[2] or b.shape != (dirs, 2 * gates * h):
        raise ValueError(f"recurrent: w {list(w.shape)} and b {list(b.shape)} do not fit x {list(x.shape)}")
    if len(states) != bool(initial_h) + bool(initial_c) + bool(peepholes):
        raise ValueError(
            f"recurrent: {len(states)} optional inputs, the flags name {initial_h + initial_c + peepholes}"
        )
    given = iter(states)
    h0 = next(given) if initial_h else None
    c0 = next(given) if initial_c else None
    p = next(given) if peepholes else None
    seq, batch = x.shape[:2]
    check_allocation((seq, dirs, batch, h), x.dtype, "recurrent output")
    y = np.zeros((seq, dirs, batch, h), x.dtype)
    y_h = np.zeros((dirs, batch, h), x.dtype)
    y_c = np.zeros((dirs, batch, h), x.dtype)
    per_direction = len(activations) // dirs
    for d in range(dirs):
        acts = [_ACTIVATIONS[a] for a in activations[d * per_direction : (d + 1) * per_direction]]

        def act(value, which, acts=acts, clipped=True):
            if clip is not None and clipped:  # the gates' inputs; never the cell state (onnxruntime's reading)
                value = np.clip(value, -clip, clip)
            return acts[which](value)

        projected = np.matmul(x, w[d].T)  # [seq, batch, G*h], one GEMM for every step
        projected += b[d, : gates * h]
        r_t, rb = np.ascontiguousarray(r[d].T), b[d, gates * h :]
        state = np.array(h0[d], x.dtype) if h0 is not None else np.zeros((batch, h), x.dtype)
        cell = np.array(c0[d], x.dtype) if c0 is not None else np.zeros((batch, h), x.dtype)
        steps = range(seq - 1, -1, -1) if direction == "reverse" or d == 1 else range(seq)
        for t in steps:
            xt = projected[t]
            if kind == "gru":
                hr = state @ r_t[:, : 2 * h] + rb[: 2 * h]
                z = act(xt[:, :h] + hr[:, :h], 0)
                reset = act(xt[:, h : 2 * h] + hr[:, h:], 0)
                if linear_before_reset:
                    candidate = xt[:, 2 * h :] + reset * (state @ r_t[:, 2 * h :] + rb[2 * h :])
                else:
                    candidate = xt[:, 2 * h :] + (reset * state) @ r_t[:, 2 * h :] + rb[2 * h :]
                candidate = act(candidate, 1)
                state = candidate - z * candidate + z * state
            else:
                total = xt + state @ r_t + rb
                if kind == "rnn":
                    state = act(total, 0)
                else:
                    i_pre, o_pre, f_pre, c_pre = (total[:, k * h : (k + 1) * h] for k in range(4))
                    if p is not None:
                        i_pre = i_pre + p[d, :h] * cell
                        f_pre = f_pre + p[d, 2 * h :] * cell
                    cell = act(f_pre, 0) * cell + act(i_pre, 0) * act(c_pre, 1)
                    if p is not None:
                        o_pre = o_pre + p[d, h : 2 * h] * cell
                    state = act(o_pre, 0) * act(cell, 2, clipped=False)
            state = state.astype(x.dtype, copy=False)
            y[t, d] = state
        y_h[d] = state
        y_c[d] = cell
    return (y, y_h, y_c) if kind == "lstm" else (y, y_h)
