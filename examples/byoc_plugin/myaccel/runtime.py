"""myaccel, run side: executes the program ``myaccel.compile`` wrote, with numpy.

Registered through the ``runtime_lite.backends`` entry point. Imports runtime_lite
and numpy only, so it runs on a deployment host without the compiler. Every field
of the payload is checked at ``init`` (a bundle may be hostile): a bad one raises
``BundleError`` naming it, and nothing reads outside the weights blob.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from myaccel.program import ACTIVATIONS, DTYPES, FORMAT, KINDS
from runtime_lite.backends import Backend, BackendContext, IncompatiblePayload, Where
from runtime_lite.backends.options import Option, boolean
from runtime_lite.errors import BundleError


def _field(record: Any, key: str, kind: type, where: str) -> Any:
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BundleError(f"bundle field 'myaccel {where}.{key}' must be {kind.__name__}, got {type(value).__name__}")
    return value


def _small_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 1 << 16


def _ints(record: dict, key: str, n: int | None, where: str, low: int) -> list[int]:
    """A list of ``n`` integers in [low, 65536) (any length when ``n`` is None)."""
    values = _field(record, key, list, where)
    if (n is not None and len(values) != n) or not all(_small_int(v, low) for v in values):
        raise BundleError(f"bundle field 'myaccel {where}.{key}' must be {n or 'some'} integers in [{low}, 65536)")
    return values


def _array(record: Any, weights: memoryview, where: str) -> np.ndarray:
    offset = _field(record, "offset", int, where)
    shape = _field(record, "shape", list, where)
    dtype = _field(record, "dtype", str, where)
    if dtype not in DTYPES or not all(isinstance(d, int) and 0 < d < 1 << 31 for d in shape) or len(shape) > 4:
        raise BundleError(f"bundle field 'myaccel {where}' has a bad dtype or shape")
    count = math.prod(shape)
    if offset < 0 or offset + 4 * count > len(weights):
        raise BundleError(f"bundle field 'myaccel {where}' points outside the weights payload")
    array = np.frombuffer(weights, dtype="<f4", count=count, offset=offset).reshape(shape)
    array.flags.writeable = False
    return array


def _activate(y: np.ndarray, activation: list) -> np.ndarray:
    if not activation:
        return y
    if activation[0] == "relu":
        return np.maximum(y, 0, out=y)
    return np.clip(y, activation[1], activation[2], out=y)


class _Conv:
    def __init__(self, step: dict, weights: memoryview, where: str):
        self.w = _array(step.get("weight"), weights, f"{where}.weight")
        if self.w.ndim != 4:
            raise BundleError(f"bundle field 'myaccel {where}.weight' must be 4-d (O, C/groups, KH, KW)")
        self.strides = _ints(step, "strides", 2, where, 1)
        self.pads = _ints(step, "pads", 4, where, 0)
        self.groups = step.get("groups")
        if not _small_int(self.groups, 1):
            raise BundleError(f"bundle field 'myaccel {where}.groups' must be an integer in [1, 65536)")
        if self.w.shape[0] % self.groups:
            raise BundleError(f"bundle field 'myaccel {where}.groups' does not divide the weight's outputs")
        self.bias = None if step.get("bias") is None else _array(step["bias"], weights, f"{where}.bias")
        if self.bias is not None and self.bias.shape != (self.w.shape[0],):
            raise BundleError(f"bundle field 'myaccel {where}.bias' must have shape [{self.w.shape[0]}]")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, c, _, _ = x.shape
        o, cg, kh, kw = self.w.shape
        g = self.groups
        if c != cg * g:
            raise ValueError(f"conv2d input has {c} channels, the weight expects {cg} x {g} groups")
        top, left, bottom, right = self.pads[0], self.pads[1], self.pads[2], self.pads[3]
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
        sh, sw = self.strides
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        oh, ow = windows.shape[2], windows.shape[3]
        windows = windows.reshape(n, g, cg, oh, ow, kh, kw)
        weight = self.w.reshape(g, o // g, cg, kh, kw)
        y = np.einsum("ngchwij,gocij->ngohw", windows, weight, optimize=True).reshape(n, o, oh, ow)
        if self.bias is not None:
            y += self.bias[None, :, None, None]
        return y


class _Dense:
    def __init__(self, step: dict, weights: memoryview, where: str):
        self.w = _array(step.get("weight"), weights, f"{where}.weight")
        if self.w.ndim != 2:
            raise BundleError(f"bundle field 'myaccel {where}.weight' must be 2-d (units, in)")
        self.bias = None if step.get("bias") is None else _array(step["bias"], weights, f"{where}.bias")
        if self.bias is not None and self.bias.shape != (self.w.shape[0],):
            raise BundleError(f"bundle field 'myaccel {where}.bias' must have shape [{self.w.shape[0]}]")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.w.T
        return y + self.bias if self.bias is not None else y


class Program:
    """One region: its steps compiled once at init, run in order over a list of values."""

    def __init__(self, program: Any, weights: memoryview):
        if not isinstance(program, dict) or program.get("format") != FORMAT:
            found = program.get("format") if isinstance(program, dict) else type(program).__name__
            raise IncompatiblePayload(f"program format {found!r}; this myaccel runs {FORMAT!r}")
        self.num_values = _field(program, "num_values", int, "program")
        if not 0 < self.num_values <= 1 << 16:
            raise BundleError("bundle field 'myaccel program.num_values' is out of range")
        self.inputs = _ints(program, "inputs", None, "program", 0)
        self.outputs = _ints(program, "outputs", None, "program", 0)
        self.steps = []
        defined = set(self.inputs)
        for i, step in enumerate(_field(program, "steps", list, "program")):
            where = f"program.steps[{i}]"
            kind = _field(step, "kind", str, where)
            if kind not in KINDS:
                raise BundleError(f"bundle field 'myaccel {where}.kind' = {kind[:40]!r} is not one of {KINDS}")
            x, out = _field(step, "x", int, where), _field(step, "out", int, where)
            if x not in defined or not 0 <= out < self.num_values or out in defined:
                raise BundleError(f"bundle field 'myaccel {where}' reads an undefined value or redefines one")
            activation = _field(step, "activation", list, where)
            if activation and (activation[0] not in ACTIVATIONS or len(activation) != 1 + ACTIVATIONS[activation[0]]):
                raise BundleError(f"bundle field 'myaccel {where}.activation' is not a myaccel activation")
            run = (_Conv if kind == "conv2d" else _Dense)(step, weights, where)
            self.steps.append((run, x, out, activation))
            defined.add(out)
        if not set(self.outputs) <= defined or max(self.inputs + self.outputs, default=0) >= self.num_values:
            raise BundleError("bundle field 'myaccel program.outputs' names a value no step defines")

    def run(self, inputs: list[np.ndarray], check_finite: bool = False) -> list[np.ndarray]:
        values: list[Any] = [None] * self.num_values
        for slot, array in zip(self.inputs, inputs):
            values[slot] = array
        for i, (run, x, out, activation) in enumerate(self.steps):
            values[out] = _activate(run(values[x]), activation)
            if check_finite and not np.isfinite(values[out]).all():
                raise ValueError(f"myaccel step {i} ({type(run).__name__[1:].lower()}) produced NaN or Inf")
        return [values[i] for i in self.outputs]


class MyAccelBackend(Backend):
    name = "myaccel"
    load_options = (
        Option("check_finite", boolean, False, "fail a run whose step produces NaN or Inf, naming the step"),
    )

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]) -> Program:
        for key in ("program", "weights"):
            if key not in payloads:
                raise BundleError(f"bundle field 'myaccel payloads' has no {key!r}")
        if len(payloads["program"]) > 64 << 20:
            raise BundleError("bundle field 'myaccel payloads.program' is larger than 64 MiB")
        try:
            program = json.loads(bytes(payloads["program"]))
        except (ValueError, RecursionError) as e:
            raise BundleError(f"bundle field 'myaccel payloads.program' is not JSON: {type(e).__name__}") from None
        return Program(program, payloads["weights"])

    def execute(self, context: BackendContext, handle: Program, inputs) -> list[np.ndarray]:
        return handle.run(list(inputs), context.options["check_finite"])

    def describe(self, handle: Program) -> Where:
        return Where("myaccel", f"on myaccel (numpy emulation), {len(handle.steps)} fused steps")
