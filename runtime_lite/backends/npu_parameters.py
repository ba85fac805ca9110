"""The NPU's int8 parameters, checked where their values are first known: at load when they can be.

A calibrated int8 graph carries numbers no kernel questions: the scale of every
``quantize``/``dequantize``, the zero points around an integer kernel, and each
integer kernel's fixed-point ``multiplier``/``shift`` (docs/quantization.md). A
hostile bundle that changes them runs and silently computes something else: a NaN
or zero scale makes every int8 value meaningless, and a zero point beside
``int8_conv``/``int8_dense`` is ignored by the integer arithmetic, which is
symmetric by definition (the compiler applies the integer path only when every zero
point is 0). So these are refused, naming the node and the field:

* a scale that is not finite and positive;
* a non-zero zero point on a ``quantize`` whose result an integer kernel reads, or on
  a ``dequantize`` that reads an integer kernel's result (``INT8_READERS``: the products,
  and the lookup tables, means and concats of docs/npu.md);
* a ``multiplier`` outside ``[2**30, 2**31)`` (allowed otherwise only as 0, a channel
  whose rescale is 0, or below ``2**30`` at the deepest shift, 62, where the compiler
  drops mantissa bits), a ``shift`` outside ``[1, 62]``.

Values held in the NPU payload are checked at ``init``; values the host plan passes
as constants when it binds the call (``NpuProgram.check_constant_inputs``), so both
are a ``BundleError`` at load. A value computed at run time is checked at run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_lite.errors import BundleError
from runtime_lite.format.npu_records import NpuKernel, NpuNode

INTEGER_KERNELS = frozenset({"int8_conv", "int8_dense"})  # with a Q31 multiplier and shift among their operands
#: Every kernel that reads int8 values as they are, and which of its operands are such values (None: all of them).
INT8_READERS: dict[str, tuple[int, ...] | None] = {
    "int8_conv": (0,), "int8_dense": (0,), "int8_lut": (0,), "int8_mean": (0,), "int8_concat": None,
}  # fmt: skip
Q31_LOW, Q31_HIGH = 2**30, 2**31
MIN_SHIFT, MAX_SHIFT = 1, 62
#: Parameters up to this many elements (per-channel vectors) are remembered once verified.
MAX_REMEMBERED = 1 << 16


def _scale_fault(value: np.ndarray) -> str | None:
    if value.dtype.kind != "f":
        return f"must be a float, got {value.dtype}"
    bad = ~(np.isfinite(value) & (value > 0))
    if bad.any():
        return f"must be finite and positive, got {value.reshape(-1)[np.argmax(bad.reshape(-1))].item()!r}"
    return None


def _zero_point_fault(value: np.ndarray) -> str | None:
    if value.dtype.kind not in "iu":
        return f"must be an integer, got {value.dtype}"
    if value.any():
        return (
            f"must be 0 beside an integer kernel (its arithmetic is symmetric), "
            f"got {value.reshape(-1)[np.argmax(value.reshape(-1) != 0)].item()!r}"
        )
    return None


def _multiplier_fault(multiplier: np.ndarray, shift: np.ndarray) -> str | None:
    if multiplier.dtype.kind not in "iu" or shift.dtype.kind not in "iu":
        return f"multiplier and shift must be integers, got {multiplier.dtype} and {shift.dtype}"
    m, s = multiplier.astype(np.int64).reshape(-1), shift.astype(np.int64).reshape(-1)
    if m.shape != s.shape:
        return f"multiplier {list(multiplier.shape)} and shift {list(shift.shape)} must have one value per channel"
    bad_shift = (s < MIN_SHIFT) | (s > MAX_SHIFT)
    if bad_shift.any():
        return f"shift must lie in [{MIN_SHIFT}, {MAX_SHIFT}], got {int(s[np.argmax(bad_shift)])}"
    q31 = (m >= Q31_LOW) & (m < Q31_HIGH)
    bad = ~(q31 | (m == 0) | ((s == MAX_SHIFT) & (m > 0) & (m < Q31_LOW)))
    if bad.any():
        return f"multiplier must lie in [2**30, 2**31), got {int(m[np.argmax(bad)])}"
    return None


@dataclass(frozen=True)
class ParameterCheck:
    """One parameter of one kernel node: which graph nodes hold its values and what they must satisfy."""

    index: int  # the kernel node's index in the graph
    node: str  # its name
    field: str  # e.g. npu.graph.nodes[12].inputs[1]
    what: str  # scale, zero point, or empty (the reason names what it is about)
    sources: tuple[int, ...]  # graph node indices holding the values, in the order ``fault`` takes them
    fault: Callable[..., str | None]

    def message(self, values: Sequence[np.ndarray]) -> str | None:
        """None when the values are legal, else one line naming the node and the field."""
        reason = self.fault(*[np.asarray(v) for v in values])
        if reason is None:
            return None
        return f"bundle field '{self.field}': npu node {self.node!r} {f'{self.what} ' if self.what else ''}{reason}"


def parameter_checks(nodes: Sequence[NpuNode], field: str) -> list[ParameterCheck]:
    """Every int8 parameter of the graph that a legal bundle constrains (module docstring)."""
    integer = {i for i, n in enumerate(nodes)
               if isinstance(n.attrs, NpuKernel) and any(op.op in INT8_READERS for op in n.attrs.body)}  # fmt: skip
    read_by_integer = {source for i in integer for source in _integer_operands(nodes[i])}
    checks = []
    for i, node in enumerate(nodes):
        if not isinstance(node.attrs, NpuKernel):
            continue
        last = len(node.attrs.body) - 1
        for j, op in enumerate(node.attrs.body):
            wanted: list[tuple[str, tuple[int, ...], Callable[..., str | None]]] = []
            if op.op in ("quantize", "dequantize"):
                wanted.append(("scale", (1,), _scale_fault))
                if op.op == "quantize":  # its result is the node's, which an integer kernel reads
                    beside_integer = j == last and i in read_by_integer
                else:
                    beside_integer = _operand_node(node, op, 0) in integer
                if beside_integer:
                    wanted.append(("zero point", (2,), _zero_point_fault))
            elif op.op in INTEGER_KERNELS:
                wanted.append(("", (3, 4), _multiplier_fault))  # its reasons name the multiplier or the shift
            for what, operands, fault in wanted:
                sources = tuple(_operand_node(node, op, k) for k in operands)
                if None not in sources:  # a value made inside the body is not a parameter
                    where = f"{field}.nodes[{i}].inputs[{op.inputs[operands[0]][1]}]"
                    checks.append(ParameterCheck(i, node.name, where, what, sources, fault))
    return checks


def _operand_node(node: NpuNode, op, k: int) -> int | None:
    """The graph node whose value body op ``op`` reads as operand ``k``, or None (absent, or made in the body)."""
    if k >= len(op.inputs) or op.inputs[k][0] != "arg":
        return None
    return node.inputs[op.inputs[k][1]]


def _integer_operands(node: NpuNode) -> set[int]:
    """The graph nodes whose int8 values an integer kernel in ``node``'s body reads as they are."""
    found = set()
    for op in node.attrs.body:
        if op.op not in INT8_READERS:
            continue
        positions = INT8_READERS[op.op] or range(len(op.inputs))
        found |= {node.inputs[op.inputs[k][1]] for k in positions if k < len(op.inputs) and op.inputs[k][0] == "arg"}
    return found


class ParameterGuard:
    """The checks of one NPU program, each run once where its values are first known.

    Values in the payload (``template``) are checked now; values the region receives
    as inputs when the host plan binds them as constants (``check_constant_inputs``);
    anything else before the node that reads it runs (``check_run``), where an array
    already verified (the same object: a constant) is not checked again.
    """

    def __init__(self, checks: list[ParameterCheck], template: Sequence, arg_position: dict[int, int]):
        self._arg_position = arg_position
        self._at_load: list[ParameterCheck] = []
        self.by_node: dict[int, list[ParameterCheck]] = {}
        self._verified: dict[int, tuple] = {}
        for check in checks:
            if all(template[s] is not None for s in check.sources):
                _refuse(check.message([template[s] for s in check.sources]))
                continue
            self.by_node.setdefault(check.index, []).append(check)
            if all(template[s] is not None or s in arg_position for s in check.sources):
                self._at_load.append(check)
        self._template = template

    def check_constant_inputs(self, constants: dict[int, np.ndarray]) -> None:
        """Refuse (BundleError) parameters that arrive as the host plan's constants: ``constants`` by input position."""
        for check in self._at_load:
            values = [self._template[s] if self._template[s] is not None else constants.get(self._arg_position[s])
                      for s in check.sources]  # fmt: skip
            if all(v is not None for v in values):
                _refuse(check.message(values))

    def check_run(self, index: int, values: list) -> None:
        """Before kernel node ``index`` runs: its parameters, unless these very arrays passed before (ValueError)."""
        for check in self.by_node[index]:
            found = tuple(values[s] for s in check.sources)
            known = self._verified.get(id(check))
            if known is not None and all(a is b for a, b in zip(found, known)):
                continue
            message = check.message(found)
            if message is not None:
                raise ValueError(message)
            if sum(np.size(v) for v in found) <= MAX_REMEMBERED:
                self._verified[id(check)] = found  # kept alive, so their identity cannot be reused


def _refuse(message: str | None) -> None:
    if message is not None:
        raise BundleError(message)
