"""An integer reference for the NPU's int8 kernels, written from the definition (docs/quantization.md).

Independent of runtime_lite/kernels/integer.py on purpose: int64 sums tap by tap
(no GEMM, no float), and the requantization as an integer division with its
remainder, rounding half away from zero:

    y = sign(p) * (|p| // 2**s + (2 * (|p| % 2**s) >= 2**s)),   p = acc * multiplier

``replay_npu_int8`` runs an NPU region of a loaded bundle kernel by kernel and
checks every integer kernel's output against this reference.
"""

from __future__ import annotations

import numpy as np


def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int) -> np.ndarray:
    p = acc.astype(np.int64) * multiplier.astype(np.int64)
    divisor = np.left_shift(np.int64(1), shift.astype(np.int64))
    quotient, remainder = np.divmod(np.abs(p), divisor)
    magnitude = quotient + (2 * remainder >= divisor)
    return np.clip(np.sign(p) * magnitude, act_min, act_max).astype(np.int8)


def conv(x, w, bias, multiplier, shift, *, strides, pads, dilations, groups, act_min, act_max) -> np.ndarray:
    """N-d grouped convolution summed in int64, one kernel tap at a time."""
    nd = w.ndim - 2
    x = x.astype(np.int64)
    w = w.astype(np.int64)
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    out_spatial = [(x.shape[2 + i] - dilations[i] * (w.shape[2 + i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    n, o = x.shape[0], w.shape[0]
    cin, cout = w.shape[1], o // groups
    acc = np.zeros((n, o, *out_spatial), np.int64)
    for tap in np.ndindex(*w.shape[2:]):
        window = tuple(
            slice(tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (out_spatial[i] - 1) + 1, strides[i])
            for i in range(nd)
        )
        patch = x[(slice(None), slice(None), *window)]
        for g in range(groups):
            xs = patch[:, g * cin : (g + 1) * cin]
            ws = w[(slice(g * cout, (g + 1) * cout), slice(None), *tap)]
            acc[:, g * cout : (g + 1) * cout] += np.einsum("nc...,oc->no...", xs, ws)
    along = (-1,) + (1,) * nd
    acc += bias.astype(np.int64).reshape(along)
    acc = np.clip(acc, -(2**31), 2**31 - 1)
    return requantize(acc, multiplier.reshape(along), shift.reshape(along), act_min, act_max)


def dense(x, w, bias, multiplier, shift, *, act_min, act_max) -> np.ndarray:
    acc = np.einsum("...k,nk->...n", x.astype(np.int64), w.astype(np.int64)) + bias.astype(np.int64)
    acc = np.clip(acc, -(2**31), 2**31 - 1)
    return requantize(acc, multiplier, shift, act_min, act_max)


def lut(x, table) -> np.ndarray:
    """A table indexed from -128: entry ``i`` is the function's value at ``i - 128``."""
    return np.array([table[int(v) + 128] for v in x.reshape(-1)], np.int8).reshape(x.shape)


def mean(x, *, axes, keepdims, multiplier, shift, act_min, act_max) -> np.ndarray:
    """The int64 sum over ``axes``, requantized once (the count is folded into the multiplier)."""
    total = np.sum(x.astype(np.int64), axis=tuple(axes), keepdims=bool(keepdims))
    return requantize(total, np.int64(multiplier), np.int64(shift), act_min, act_max)


def concat(*xs, axis, multipliers, shifts) -> np.ndarray:
    """Every input requantized to the output's scale (no shortcut for an identity rescale), then joined."""
    parts = [
        requantize(x.astype(np.int64), np.int64(m), np.int64(s), -128, 127) for x, m, s in zip(xs, multipliers, shifts)
    ]
    return np.concatenate(parts, axis=axis)


REFERENCE = {"int8_conv": conv, "int8_dense": dense, "int8_lut": lut, "int8_mean": mean, "int8_concat": concat}


def replay_npu_int8(bundle: bytes, inputs: dict) -> tuple[int, int]:
    """Load ``bundle`` and run it on ``inputs`` with every NPU region run kernel by kernel; check each integer
    kernel's int8 output against the reference. Returns (integer kernels checked, int8 elements compared)."""
    import runtime_lite
    from runtime_lite.backends.npu import FIELD, NpuProgram
    from runtime_lite.format.npu_records import NpuGraph, NpuKernel

    checked = elements = 0
    original_init, original_run = NpuProgram.__init__, NpuProgram.run

    def init(self, graph, weights):
        original_init(self, graph, weights)
        record = NpuGraph.from_record(graph, FIELD)
        self.int8_bodies = {
            i: (n.attrs.body[0].op, n.attrs.body[0].attrs)
            for i, n in enumerate(record.nodes)
            if isinstance(n.attrs, NpuKernel) and n.attrs.body[0].op in REFERENCE
        }

    def run(self, region_inputs, trace):
        nonlocal checked, elements
        values = list(self.template)
        for arg, x in zip(self.args, region_inputs):
            values[arg.index] = x
        for k in self.kernels:
            args = [values[i] for i in k.inputs]
            out = k.run(args)
            if k.index in self.int8_bodies:
                op, attrs = self.int8_bodies[k.index]
                expected = REFERENCE[op](*args, **attrs)
                mismatched = int(np.count_nonzero(expected != out))
                assert mismatched == 0, f"{k.name}: {mismatched} of {out.size} int8 outputs differ from the reference"
                checked += 1
                elements += out.size
            values[k.index] = out
        return [values[h] for h in self.heads]

    NpuProgram.__init__, NpuProgram.run = init, run
    try:
        runtime_lite.load(bundle).run(inputs)
    finally:
        NpuProgram.__init__, NpuProgram.run = original_init, original_run
    return checked, elements
