"""The host executable plan: a flat list of instructions over numbered slots.

At load every instruction is checked once (known op, slots in range and defined
before use, attributes that bind to the kernel's signature) and compiled into a
closure with its attributes already bound, so the run loop does nothing per
instruction but call it. Slots are a plain list created per ``run`` call, which
is what makes one loaded plan safe to run from many threads at once.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite import kernels as host_kernels  # KERNELS imports the kernels on first use
from runtime_lite.errors import BundleError, ExecutionError
from runtime_lite.execution.device import to_host
from runtime_lite.execution.limits import ActiveBudget, BudgetExceeded, RunLimits, current_budget, enter_budget
from runtime_lite.execution.shape_cache import SignatureCache, shape_derived
from runtime_lite.format.fields import expect_dtype, expect_index
from runtime_lite.format.records import Instruction, PlanRecord

Step = Callable[[list], None]


@dataclass(frozen=True)
class BoundModule:
    """A backend module ready for ``call_module``: its id, backend, initialised handle and context."""

    id: str
    backend: Any
    handle: Any
    context: Any = None


@functools.cache
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


_MISSING = object()


def _parse_instruction(record: Any, index: int, num_slots: int, where: str = "plan") -> Instruction:
    """The instruction a well-formed record describes; anything else goes the slow way, which names the field.

    This fast path reads the fields ``Instruction`` declares (runtime_lite/format/records.py)
    by hand: a plan has tens of thousands of instructions.
    """
    if type(record) is dict:
        op, name, attrs = record.get("op"), record.get("name", _MISSING), record.get("attrs", {})
        ins, outs, free = record.get("in", []), record.get("out", []), record.get("free", [])
        inplace = record.get("inplace")
        if (
            type(op) is str
            and (name is _MISSING or type(name) is str)
            and type(attrs) is dict
            and _slot_list(ins, num_slots)
            and _slot_list(outs, num_slots)
            and outs
            and _slot_list(free, num_slots)
            and (inplace is None or (type(inplace) is int and 0 <= inplace < len(ins)))
        ):
            name = f"#{index}" if name is _MISSING else name
            return Instruction(op, name, tuple(ins), tuple(outs), attrs, inplace, tuple(free))
    return _parse_instruction_naming_the_field(record, index, num_slots, where)


def _slot_list(values: Any, num_slots: int) -> bool:
    return type(values) is list and all(type(v) is int and 0 <= v < num_slots for v in values)


def _parse_instruction_naming_the_field(record: Any, index: int, num_slots: int, where: str = "plan") -> Instruction:
    field = f"{where}.instructions[{index}]"
    ins = Instruction.from_record(record, field)
    for key, slots in (("in", ins.inputs), ("out", ins.outputs), ("free", ins.free)):
        for i, v in enumerate(slots):
            expect_index(v, num_slots, f"{field}.{key}[{i}]")
    if ins.inplace is not None:
        expect_index(ins.inplace, len(ins.inputs), f"{field}.inplace")
    name = f"#{index}" if ins.name is None else ins.name
    if not ins.outputs:
        raise BundleError(f"bundle field '{field}.out' is empty: instruction {name!r} ({ins.op}) produces nothing")
    return Instruction(ins.op, name, ins.inputs, ins.outputs, ins.attrs, ins.inplace, ins.free)


CALL_MODULE = "call_module"


def _bind_module_call(
    ins: Instruction, field: str, modules: list[BoundModule], constants: dict[int, np.ndarray]
) -> Callable:
    """The backend call; ``constants``: the plan's constants by slot, which the module may check now."""
    index = expect_index(ins.attrs.get("module"), len(modules), f"{field}.attrs.module")
    module = modules[index]
    check = getattr(module.backend, "check_constant_inputs", None)
    if check is not None and module.handle is not None:
        try:
            check(module.handle, {k: constants[s] for k, s in enumerate(ins.inputs) if s in constants})
        except BundleError as e:
            raise BundleError(f"bundle module {module.id!r}: {e}") from None
    expected = len(ins.outputs)
    execute, handle, context = module.backend.execute, module.handle, module.context

    def call(*inputs, trace=None):
        outputs = execute(context if trace is None else context.tracing(trace), handle, inputs)
        if len(outputs) != expected:
            raise RuntimeError(f"module {module.id!r} returned {len(outputs)} outputs, the plan expects {expected}")
        return outputs

    return call


def bind_kernel(
    op: str, num_inputs: int, attrs: dict[str, Any], field: str, name: str, inplace: int | None = None
) -> Callable:
    """The host kernel of ``op`` with ``attrs`` bound, checked once against its signature.

    Shared by the host plan and by backends that execute canonical ops (the NPU),
    so a bundle's attributes are validated the same way wherever they run.
    """
    _check_attribute_values(attrs, f"{field}.attrs")
    # Flat scalars by now, whose repr tells apart every value a check could (1, 1.0, True, '1')
    text = repr(attrs)
    key = (op, num_inputs, inplace, text) if len(text) <= _MAX_KEY_CHARS else None
    bound = _BOUND_KERNELS.get(key) if key is not None else None
    if bound is not None:
        return bound
    kernel = host_kernels.KERNELS.get(op)
    if kernel is None:
        raise BundleError(f"bundle field '{field}.op' names op {op!r}, which this runtime_lite has no kernel for")
    if inplace is not None and inplace not in kernel.inplace:
        raise BundleError(f"bundle field '{field}.inplace': op {op!r} cannot write operand {inplace} in place")
    misfit = _signature_misfit(op, num_inputs, tuple(attrs), inplace is not None)
    if misfit is not None:
        raise BundleError(f"bundle field '{field}': {name} ({op}) does not fit its kernel: {misfit}")
    if kernel.check is not None:
        try:
            kernel.check(attrs)
        except (ValueError, TypeError) as e:
            raise BundleError(f"bundle field '{field}.attrs': {name} ({op}): {e}") from None
    bound = functools.partial(kernel.fn, **attrs) if attrs else kernel.fn
    if key is not None:
        if len(_BOUND_KERNELS) >= MAX_BOUND_KERNELS:
            _BOUND_KERNELS.clear()
        _BOUND_KERNELS[key] = bound
    return bound


#: Kernels already bound and checked, by op, operand count, attributes and in-place operand:
#: a plan repeats few kinds of instruction (and a hostile one may repeat one 100,000 times),
#: so each kind is checked once. Only successes are kept; the cache is bounded by entries and
#: by what a key may hold.
_BOUND_KERNELS: dict[tuple, Callable] = {}
MAX_BOUND_KERNELS = 4096
_MAX_KEY_CHARS = 1024


def _signature_misfit(op: str, num_inputs: int, attr_names: tuple[str, ...], writes_out: bool) -> str | None:
    """Why ``op`` cannot be called with these operands and attribute names, or None.

    Only names and counts decide a fit, so a plan of many instructions of few kinds
    binds each signature once. Long names (never a kernel parameter) skip the cache,
    which therefore stays small whatever a bundle holds.
    """
    if any(len(n) > 64 for n in attr_names):
        return _bind_misfit.__wrapped__(op, num_inputs, attr_names, writes_out)
    return _bind_misfit(op, num_inputs, attr_names, writes_out)


@functools.lru_cache(maxsize=4096)
def _bind_misfit(op: str, num_inputs: int, attr_names: tuple[str, ...], writes_out: bool) -> str | None:
    extra = {"out": None} if writes_out else {}
    try:
        _signature(host_kernels.KERNELS[op].fn).bind(*range(num_inputs), **dict.fromkeys(attr_names), **extra)
    except TypeError as e:
        return str(e)
    return None


_SCALAR_TYPES = (type(None), bool, int, float, str)
#: Attributes that name a dtype: only the dtypes a bundle may use (no ``object``, no structured types).
_DTYPE_ATTRIBUTES = ("to", "dtype")


def _check_attribute_values(attrs: dict[str, Any], field: str) -> None:
    """Attribute values are scalars or flat lists of scalars (docs/bundle-format.md), dtypes are known ones."""
    for key, value in attrs.items():
        if isinstance(value, list):
            for i, item in enumerate(value):
                if not isinstance(item, _SCALAR_TYPES):
                    raise BundleError(f"bundle field '{field}.{key}[{i}]' must be a number, string or nil")
        elif not isinstance(value, _SCALAR_TYPES):
            raise BundleError(f"bundle field '{field}.{key}' must be a number, string, nil or list of them")
        if key in _DTYPE_ATTRIBUTES and value is not None:
            expect_dtype(value, f"{field}.{key}")


def _bind_kernel(ins: Instruction, field: str) -> Callable:
    fn = bind_kernel(ins.op, len(ins.inputs), ins.attrs, field, f"instruction {ins.name!r}", ins.inplace)
    check_result_count(ins.op, ins.attrs, len(ins.outputs), field, f"instruction {ins.name!r}")
    return fn


def check_result_count(op: str, attrs: dict[str, Any], count: int, field: str, name: str) -> None:
    """An instruction names exactly as many result slots as its kernel returns (a relu has one).

    numpy would otherwise unpack one result row by row into extra slots, or leave slots unset.
    """
    try:
        expected = host_kernels.KERNELS[op].result_count(attrs)
    except (TypeError, KeyError, ValueError):
        raise BundleError(f"bundle field '{field}.attrs': {name} ({op}): its attributes do not say how many "
                          "results it has") from None  # fmt: skip
    if count != expected:
        raise BundleError(
            f"bundle field '{field}.out': {name} ({op}) returns {expected} result{'s' * (expected != 1)}, "
            f"the instruction names {count} slots"
        )


def bind_cost(op: str, attrs: dict[str, Any]) -> Callable[..., int]:
    """The kernel's cost with the attributes bound (call it with the operands, and ``out`` when in place)."""
    cost = host_kernels.KERNELS[op].cost
    return functools.partial(cost, **attrs) if attrs else cost


def guarded(fn: Callable, cost: Callable[..., int], what: str) -> Callable:
    """``fn`` that first checks its cost against the budget of the run in progress (for backends
    that run kernels outside a host plan, such as the NPU's fused bodies)."""

    def call(*operands, **kw):
        need = cost(*operands, **kw)
        limit = current_budget().max_memory
        if need > limit:
            raise BudgetExceeded(f"{what} would allocate {need:,} bytes, more than max_memory = {limit:,}")
        return fn(*operands, **kw)

    return call


def _make_cost(cost: Callable[..., int], ins: Instruction) -> Callable[[list], int]:
    """The instruction's cost as a function of the slots, operands picked as its step picks them.

    Costs are remembered per operand signature (``_remembered``) unless quick (kernels/cost.py);
    a cost that is free in place is not called where the step writes into an array.
    """
    declared = host_kernels.KERNELS[ins.op].cost
    remember = not getattr(declared, "quick", False)
    inputs = ins.inputs
    if ins.inplace is not None:
        target = inputs[ins.inplace]
        if getattr(declared, "free_in_place", False):  # the chain's add, multiply, relu: nothing to allocate
            return lambda slots: 0 if type(slots[target]) is np.ndarray else cost(*[slots[i] for i in inputs])
        of_slots, operands = (lambda slots: cost(*[slots[i] for i in inputs], out=slots[target])), inputs + (target,)
    elif len(inputs) == 1:
        (a,) = inputs
        of_slots, operands = (lambda slots: cost(slots[a])), inputs
    elif len(inputs) == 2:
        a, b = inputs
        of_slots, operands = (lambda slots: cost(slots[a], slots[b])), inputs
    else:
        of_slots, operands = (lambda slots: cost(*[slots[i] for i in inputs])), inputs
    return _remembered(of_slots, operands) if remember else of_slots


#: Operands up to this many elements are part of a remembered cost's key by value: shape tensors,
#: pads, repeats, scales and bounds, the only operands whose values a cost reads (numpy allows 64 dims).
COST_KEY_VALUES = 256
#: Signatures remembered per instruction; a model fed ever-new shapes starts again past it.
COST_MEMORY = 16


def _remembered(cost: Callable[[list], int], operands: tuple[int, ...]) -> Callable[[list], int]:
    """``cost`` remembered per operand signature: shape, dtype, strides, and the values of small operands.

    A kernel's cost is a function of those (runtime_lite/kernels/cost.py): shapes for the
    large operands, values only for the small ones that say how large a result is. Every
    run of a model with the same input shapes asks the same question per instruction, and
    a convolution's cost re-derives its whole geometry: remembered, the budget check takes
    ~1 us instead of 3-6 (0.5 ms of MobileNetV3-small's 6 ms, AMD EPYC). An operand that is
    not a numpy array (a GPU array not yet copied, a Python scalar) is never remembered.
    """
    memory: dict[tuple, int] = {}

    def remembered(slots: list) -> int:
        key = []
        for i in operands:
            value = slots[i]
            if type(value) is not np.ndarray:
                return cost(slots)
            small = value.tobytes() if value.size <= COST_KEY_VALUES else None
            key.append((value.shape, value.dtype, value.strides, small))
        key = tuple(key)
        need = memory.get(key)
        if need is None:
            need = cost(slots)
            if len(memory) >= COST_MEMORY:
                memory.clear()
            memory[key] = need
        return need

    return remembered


def _make_step(fn: Callable, ins: Instruction) -> Step:
    inputs, outputs = ins.inputs, ins.outputs
    if len(outputs) > 1 or ins.op == CALL_MODULE:

        def step(slots):
            for slot, value in zip(outputs, fn(*[slots[i] for i in inputs])):
                slots[slot] = value

        return step
    out = outputs[0]
    if ins.inplace is not None:
        target = inputs[ins.inplace]

        def step(slots):
            buffer = slots[target]
            if type(buffer) is np.ndarray:
                slots[out] = fn(*[slots[i] for i in inputs], out=buffer)
            else:  # numpy hands back a scalar, not a 0-d array, for a 0-d result: it cannot be written into
                slots[out] = fn(*[slots[i] for i in inputs])

        return step
    if len(inputs) == 1:
        (a,) = inputs

        def step(slots):
            slots[out] = fn(slots[a])

        return step
    if len(inputs) == 2:
        a, b = inputs

        def step(slots):
            slots[out] = fn(slots[a], slots[b])

        return step

    def step(slots):
        slots[out] = fn(*[slots[i] for i in inputs])

    return step


class HostPlan:
    """A loaded, validated host plan, ready to execute."""

    def __init__(
        self, record: Any, constants: list[np.ndarray], modules: list[BoundModule] = (), *, field: str = "plan"
    ):
        """``record``: a plan record (or its PlanRecord); ``field``: where it is in the bundle, for errors."""
        plan = record if isinstance(record, PlanRecord) else PlanRecord.from_record(record, field)
        num_slots, raw_instructions = plan.num_slots, plan.instructions
        # Every useful slot is written by an input, a constant or an instruction: more is a lie
        # that would only make the per-run table (allocated on every call) absurdly large.
        writable = (
            len(plan.inputs)
            + len(plan.constants)
            + sum(
                len(r.get("out", [])) if isinstance(r, dict) and isinstance(r.get("out", []), list) else 0
                for r in raw_instructions
            )
        )
        if not 0 <= num_slots <= writable:
            raise BundleError(
                f"bundle field '{field}.num_slots' = {num_slots} exceeds the {writable} slots the plan can write"
            )
        self.num_slots = num_slots
        self.input_slots = tuple(expect_index(v, num_slots, f"{field}.inputs[{i}]") for i, v in enumerate(plan.inputs))
        self.output_slots = tuple(
            expect_index(v, num_slots, f"{field}.outputs[{i}]") for i, v in enumerate(plan.outputs)
        )
        template: list[Any] = [None] * num_slots
        defined = set(self.input_slots)
        for i, (slot, constant) in enumerate(plan.constants):
            where = f"{field}.constants[{i}]"
            expect_index(slot, num_slots, f"{where}[0]")
            template[slot] = constants[expect_index(constant, len(constants), f"{where}[1]")]
            defined.add(slot)
        holding_constants = {slot: template[slot] for slot, _ in plan.constants if slot not in self.input_slots}
        self._template = template
        self._constant_slots = [slot for slot, _ in plan.constants]
        self.instructions: list[Instruction] = []
        self._program: list[_Entry] = []
        # instruction index -> (backend call, backend name), for traced runs
        self._calls: dict[int, tuple[Callable, str]] = {}
        modules = list(modules)
        bound: list[Callable] = []  # each instruction's kernel or backend call, bound
        origins = _Origins(num_slots, self.input_slots, [pair[0] for pair in plan.constants])
        where = field
        for i, raw in enumerate(raw_instructions):
            field = f"{where}.instructions[{i}]"
            ins = _parse_instruction(raw, i, num_slots, where)
            for slot in ins.inputs:
                if slot not in defined:
                    raise BundleError(
                        f"bundle field '{field}.in': instruction {ins.name!r} reads slot {slot} before it is written"
                    )
            defined.update(ins.outputs)
            defined.difference_update(ins.free)
            self.instructions.append(ins)
            if ins.op == CALL_MODULE:
                fn = _bind_module_call(ins, field, modules, holding_constants)
                self._calls[i] = (fn, modules[ins.attrs["module"]].backend.name)
            else:
                fn = _bind_kernel(ins, field)
            entry = _entry(fn, ins, ins.op != CALL_MODULE)
            origins.record(ins, entry.view_source, field)
            for slot in ins.outputs:
                holding_constants.pop(slot, None)
            self._program.append(entry)
            bound.append(fn)
        for i, slot in enumerate(self.output_slots):
            if slot not in defined:
                raise BundleError(
                    f"bundle field '{where}.outputs[{i}]': slot {slot} holds no value at the end (never written, or freed)"
                )
        # Shape arithmetic kept for run-time dims: replayed per input signature once computed
        derived = shape_derived(self.instructions, [pair[0] for pair in plan.constants])
        # Instructions of constants alone (a quantized weight's dequantize): each writes a slot of its own, and is
        # computed once, at the first run (_settle)
        once = constant_instructions(self.instructions, self._constant_slots, self.output_slots, num_slots, derived)
        self._precompute = once.chosen
        if once.chosen:
            self.num_slots, self.output_slots = once.num_slots, once.outputs
            self._template += [None] * (once.num_slots - num_slots)
            for index, ins in enumerate(once.instructions):
                if ins is not self.instructions[index]:
                    self.instructions[index] = ins
                    self._program[index] = _entry(bound[index], ins, self._program[index].cost is not None)
        self._settled = not self._precompute
        self._settle_lock = threading.Lock()
        #: Bytes of the results computed once from constants and kept as constants (after the first run).
        self.precomputed_bytes = 0
        # What the run loop unpacks per instruction: (step, its cost or None for a backend call,
        # the single non-view output or -1, free, entry)
        self._steps = [
            (e.step, e.cost, e.outs[0] if len(e.outs) == 1 and e.view_source < 0 else -1, e.free, e)
            for e in self._program
        ]
        self._signatures = SignatureCache(self._steps, derived) if derived else None
        # Instructions that must see numpy where a run holds GPU arrays: host kernels and host-only backends
        self._host_only = [
            ins.op != CALL_MODULE or not getattr(modules[ins.attrs["module"]].backend, "accepts_device_arrays", False)
            for ins in self.instructions
        ]
        #: A plan that is one backend call from its inputs to its outputs (a one-region delegate bundle): the
        #: call, the inputs in its order and which of its results each output is. ``execute`` then calls it
        #: without the instruction loop (the same budgets, the same errors); None for any other plan.
        self._single_call = self._as_single_call()

    def _as_single_call(self) -> tuple[Callable, tuple[int, ...], tuple[int, ...]] | None:
        if len(self.instructions) != 1 or 0 not in self._calls or self._signatures is not None:
            return None
        ins = self.instructions[0]
        position = {slot: k for k, slot in enumerate(self.input_slots)}
        results = {slot: k for k, slot in enumerate(ins.outputs)}
        if (
            len(position) != len(self.input_slots)
            or len(results) != len(ins.outputs)
            or any(slot not in position for slot in ins.inputs)
            or any(slot not in results for slot in self.output_slots)
        ):
            return None
        return self._calls[0][0], tuple(position[s] for s in ins.inputs), tuple(results[s] for s in self.output_slots)

    def constant_slots(self) -> dict[int, np.ndarray]:
        """The plan's constants by slot, as every run starts with them."""
        return {slot: self._template[slot] for slot in self._constant_slots}

    def execute(
        self, inputs: list[np.ndarray], trace: list | None = None, limits: RunLimits | None = None,
        device: bool = False,
    ) -> list[np.ndarray]:  # fmt: skip
        """Run the plan; with ``trace``, append one timed event per instruction and backend dispatch.

        ``limits`` starts a run under a Module's budgets; without it (a backend's
        plan inside a run) the budgets of the run in progress apply. ``device``: slots
        may hold GPU arrays (the caller's, or a GPU backend's results); each is copied
        to the host once, where a host kernel or a host-only backend first reads it.
        """
        if limits is None:
            return self._execute(inputs, trace, current_budget(), device)
        token = limits.activate()
        try:
            return self._execute(inputs, trace, current_budget(), device)
        finally:
            RunLimits.reset(token)

    def _execute(
        self, inputs: list[np.ndarray], trace: list | None, budget: ActiveBudget, device: bool = False
    ) -> list[np.ndarray]:
        if self._single_call is not None and trace is None and not device:
            return self._execute_single_call(inputs, budget)
        if not self._settled:
            self._settle()
        slots = self._template.copy()
        for slot, value in zip(self.input_slots, inputs):
            slots[slot] = value
        charged = [0] * self.num_slots  # bytes each slot's value holds that this run allocated
        live, limit, deadline = 0, budget.max_memory, budget.deadline
        rows, keep = (self._steps, None) if self._signatures is None else self._signatures.rows_for(inputs)
        with np.errstate(all="ignore"):  # ONNX semantics: inf/nan propagate silently
            for index, (step, cost, out, free, entry) in enumerate(rows):
                if trace is not None:
                    step, start = self._traced_step(index, trace), time.perf_counter()
                try:
                    if device and self._host_only[index]:
                        _operands_on_host(slots, entry.ins)
                    # The one place every kernel's allocation meets the budget, before it is made.
                    if cost is None:  # a backend call: its own plan runs within what is left
                        if live:
                            _call_within(step, slots, ActiveBudget(limit - live, deadline))
                        else:  # nothing live: what is left is the budget already in force
                            step(slots)
                    else:
                        need = cost(slots)
                        if live + need > limit:
                            raise BudgetExceeded(f"it would allocate {need:,} bytes, with the live activations "
                                                 f"({live:,} bytes) more than max_memory = {limit:,}")  # fmt: skip
                        step(slots)
                    if out >= 0:  # one output, not a view: the common case, inline
                        size = slots[out].nbytes
                        live += size - charged[out]
                        charged[out] = size
                    else:
                        live += _charge(entry, slots, charged)
                except Exception as e:
                    raise self._failure(index, e) from e
                if trace is not None:
                    ins = self.instructions[index]
                    trace.append({"backend": self._calls[index][1] if index in self._calls else "host",
                                  "module": None, "node": ins.name, "op": ins.op,
                                  "start_s": start, "wall_s": time.perf_counter() - start})  # fmt: skip
                for slot in free:
                    live -= charged[slot]
                    charged[slot] = 0
                    slots[slot] = None
                if live > limit:  # after the frees: an in-place result is counted again until its operand's
                    raise self._failure(index, BudgetExceeded(f"live activations reach {live:,} bytes, "
                                                           f"more than max_memory = {limit:,}"))  # fmt: skip
                if deadline is not None and time.monotonic() > deadline:
                    raise self._failure(index, TimeoutError("the run passed its max_run_seconds"))
        if keep is not None:
            keep()
        return [slots[s] for s in self.output_slots]

    def _settle(self) -> None:
        """Compute the instructions of constants alone (``constant_instructions``) once and keep their results as
        constants: read-only, in every run's starting slots, not charged to a run's budget (as the bundle's
        constants are not), their instructions left as steps that do nothing (indices, frees and traces stay).

        At the first run rather than at load: a plan bound and never run (the fallback of a region its engine
        runs) keeps no float copies of its weights. A result larger than ``PRECOMPUTE_GROWTH`` times its operands
        (an expand of a scalar to a whole activation) or a kernel that fails is left to run where it stood (its
        failure then names it as before), and so are the instructions that read it.
        """
        with self._settle_lock:
            if self._settled:
                return
            kept: dict[int, Any] = {}
            # All results together hold at most PRECOMPUTE_GROWTH times the plan's constants (each result's own
            # bound alone lets a chain of tiles from a scalar grow 4x per instruction), and none is larger than
            # the first run's max_memory: past either, instructions run (and are charged) at each run.
            unique = {id(v): v for v in (self._template[slot] for slot in self._constant_slots)}
            room = PRECOMPUTE_GROWTH * sum(getattr(v, "nbytes", 0) for v in unique.values()) + PRECOMPUTE_SLACK
            added = 0
            limit, deadline = current_budget().max_memory, current_budget().deadline
            with np.errstate(all="ignore"):
                for index in self._precompute:
                    if deadline is not None and time.monotonic() > deadline:
                        break  # the first run's max_run_seconds: the rest run where they stand, and it stops them
                    ins = self.instructions[index]
                    operands = [kept[slot] if slot in kept else self._template[slot] for slot in ins.inputs]
                    results = _constant_results(ins, operands, room, limit)
                    if results is not None:
                        roots = {id(_root(v)) for v in operands}
                        new = sum(v.nbytes for v in results if id(_root(v)) not in roots)  # not a view of one
                        room, added = room - new, added + new
                        kept.update(zip(ins.outputs, results))
                        entry = self._program[index]
                        done = _Entry(_nothing, entry.free, (), -1, entry.ins, _no_cost)
                        self._program[index] = done
                        self._steps[index] = (done.step, done.cost, -1, done.free, done)
            for slot, value in kept.items():
                self._template[slot] = value
            self.precomputed_bytes = added
            self._settled = True

    def _execute_single_call(self, inputs: list[np.ndarray], budget: ActiveBudget) -> list[np.ndarray]:
        """``_execute`` of a plan that is one backend call: its results counted against the budget as the loop
        counts them (nothing else is live), its failures named as the loop names them."""
        call, order, picks = self._single_call
        try:
            results = call(*[inputs[k] for k in order])
            live = sum(value.nbytes for value in results)
        except Exception as e:
            raise self._failure(0, e) from e
        if live > budget.max_memory:
            raise self._failure(0, BudgetExceeded(f"live activations reach {live:,} bytes, "
                                                  f"more than max_memory = {budget.max_memory:,}"))  # fmt: skip
        if budget.deadline is not None and time.monotonic() > budget.deadline:
            raise self._failure(0, TimeoutError("the run passed its max_run_seconds"))
        return [results[k] for k in picks]

    def _traced_step(self, index: int, trace: list) -> Step:
        """The instruction's step, with the trace handed to the backend when it calls one."""
        if index not in self._calls:
            return self._program[index].step
        call, _ = self._calls[index]
        return _make_step(functools.partial(call, trace=trace), self.instructions[index])

    def _failure(self, index: int, error: Exception) -> ExecutionError:
        ins = self.instructions[index]
        return ExecutionError(f"instruction {index} {ins.name!r} ({ins.op}) failed: {type(error).__name__}: {error}")


#: A result computed once from constants is kept when it holds at most this many times its operands' bytes (a
#: dequantized int8 weight holds 4x; an int32 bias 1x) plus ``PRECOMPUTE_SLACK``; larger ones run at each run.
PRECOMPUTE_GROWTH = 4
PRECOMPUTE_SLACK = 1 << 16


@dataclass(frozen=True)
class ConstantInstructions:
    """What ``constant_instructions`` found: which to compute once, and the plan with their results in slots of
    their own (``num_slots`` in all, the plan's ``outputs`` renamed where one is such a result)."""

    chosen: list[int]
    instructions: list[Instruction]
    num_slots: int
    outputs: tuple[int, ...]


def constant_instructions(
    instructions: list[Instruction],
    constant_slots: list[int],
    output_slots: tuple[int, ...],
    num_slots: int,
    skip: frozenset[int] = frozenset(),
) -> ConstantInstructions:
    """The host instructions whose operands are all constants, or results of such instructions, which can run
    once instead of at every run, and the plan rewritten so each writes a slot of its own (past ``num_slots``,
    read where the original was, until it is freed or written again): the memory plan reuses one slot for every
    weight's dequantized copy, which a kept result cannot share.

    A build folds constants except a quantized weight's ``dequantize`` (aot/passes/constant_folding.py), kept so
    that the bundle stores the integer weight: this finds those, so the host dequantizes each weight once. Left
    out: backend calls, ``skip`` (shape arithmetic the signature cache replays), and any instruction whose
    result (or what may alias it: a later result computed from it as operand 0) a later instruction writes in
    place, since a kept result is read-only and shared by every run.
    """
    excluded = set(skip)
    while True:
        plan = list(instructions)
        known = set(constant_slots)  # slots that hold a constant value here
        rename: dict[int, int] = {}  # a slot of the memory plan -> the slot of its own its value is in now
        root: dict[int, int] = {}  # slot -> the chosen instruction whose result it holds, or may alias
        chosen: list[int] = []
        blocked: set[int] = set()
        fresh = num_slots
        for index, ins in enumerate(instructions):
            inputs = tuple(rename.get(slot, slot) for slot in ins.inputs)
            free = tuple(rename.get(slot, slot) for slot in ins.free)
            if ins.inplace is not None and inputs[ins.inplace] in root:
                blocked.add(root[inputs[ins.inplace]])
            for slot in ins.free:
                rename.pop(slot, None)
            outputs = ins.outputs
            if (
                index not in excluded
                and ins.op != CALL_MODULE
                and inputs
                and all(slot in known for slot in inputs)
                and len(set(outputs)) == len(outputs)
            ):
                chosen.append(index)
                outputs = tuple(range(fresh, fresh + len(ins.outputs)))
                fresh += len(outputs)
                rename.update(zip(ins.outputs, outputs))
                known.update(outputs)
                root.update(dict.fromkeys(outputs, index))
            else:
                source = root.get(inputs[0]) if inputs else None
                for slot in outputs:
                    rename.pop(slot, None)
                    known.discard(slot)
                    if source is None:
                        root.pop(slot, None)
                    else:
                        root[slot] = source
            for slot in free:
                known.discard(slot)
                root.pop(slot, None)
            if (inputs, outputs, free) != (ins.inputs, ins.outputs, ins.free):
                plan[index] = dataclasses.replace(ins, inputs=inputs, outputs=outputs, free=free)
        if not blocked:
            outputs = tuple(rename.get(slot, slot) for slot in output_slots)
            return ConstantInstructions(chosen, plan, fresh, outputs)
        excluded |= blocked


def _entry(fn: Callable, ins: Instruction, kernel: bool) -> _Entry:
    """The run loop's entry of a bound instruction (``kernel``: a host kernel, else a backend call)."""
    view_source = ins.inputs[0] if kernel and host_kernels.KERNELS[ins.op].view and ins.inputs else -1
    cost = _make_cost(bind_cost(ins.op, ins.attrs), ins) if kernel else None
    return _Entry(_make_step(fn, ins), ins.free, ins.outputs, view_source, ins.inputs, cost)


def _constant_results(ins: Instruction, operands: list[Any], room: int, limit: int) -> list[np.ndarray] | None:
    """The instruction's results over constant operands, read-only; None where an operand was not kept, the
    result would be too large to keep (``PRECOMPUTE_GROWTH``, or more than ``room`` bytes), computing it would
    allocate more than ``limit`` (max_memory) or the kernel fails (the run then meets it)."""
    if any(type(v) is not np.ndarray for v in operands):
        return None
    size = sum(v.nbytes for v in operands)
    allowed = min(PRECOMPUTE_GROWTH * size + PRECOMPUTE_SLACK, room)
    try:
        if bind_cost(ins.op, ins.attrs)(*operands) > min(8 * allowed, limit):
            return None
        fn = bind_kernel(ins.op, len(ins.inputs), ins.attrs, "plan", ins.name)
        result = fn(*operands)
    except Exception:
        return None
    results = [np.asarray(v) for v in (result if len(ins.outputs) > 1 else (result,))]
    if len(results) != len(ins.outputs) or sum(v.nbytes for v in results) > allowed:
        return None
    for v in results:
        v.flags.writeable = False
    return results


def _nothing(slots: list) -> None:
    """The step of an instruction computed once from constants: its results are already in their slots."""


def _no_cost(slots: list) -> int:
    return 0


def _call_within(step: Step, slots: list, budget: ActiveBudget) -> None:
    token = enter_budget(budget)
    try:
        step(slots)
    finally:
        RunLimits.reset(token)


def _charge(entry: _Entry, slots: list, charged: list[int]) -> int:
    """Bytes the entry's outputs add to the live total (a view of operand 0 adds nothing)."""
    added = 0
    for slot in entry.outs:
        value = slots[slot]
        size = value.nbytes
        if entry.view_source >= 0 and _root(value) is _root(slots[entry.view_source]):
            size = 0
        added += size - charged[slot]
        charged[slot] = size
    return added


def _root(array: Any) -> Any:
    """The object that owns an array's memory (numpy collapses chains of views onto it)."""
    base = getattr(array, "base", None)
    return array if base is None else base


@dataclass(frozen=True)
class _Entry:
    """One instruction as the run loop executes it: the bound step, and the slots it reads, writes and frees."""

    step: Step
    free: tuple[int, ...]
    outs: tuple[int, ...]
    #: for view kernels the operand whose memory the output may share, else -1
    view_source: int
    #: the slots the instruction reads
    ins: tuple[int, ...] = ()
    #: bytes the kernel will allocate, from the slots (None: a backend call)
    cost: Callable[[list], int] | None = None


def _operands_on_host(slots: list, inputs: tuple[int, ...]) -> None:
    """Replace each GPU array among an instruction's operands by its host copy, in the slot itself (once)."""
    for slot in inputs:
        value = slots[slot]
        if type(value) is not np.ndarray and getattr(type(value), "on_device", False):
            slots[slot] = to_host(value)


class _Origins:
    """Where each slot's value comes from, so a plan cannot write in place into what the caller owns.

    ``inplace`` hands an operand's buffer to the kernel as ``out``: that operand must
    be a buffer this run allocated, never a caller's input, a constant, or a view of
    either. (Inputs and constants are also read-only at run time; this refuses such a
    plan at load, naming the instruction.)
    """

    def __init__(self, num_slots: int, inputs: tuple[int, ...], constants: list[int]):
        self.origin = ["fresh"] * num_slots
        for slot in inputs:
            self.origin[slot] = "a model input"
        for slot in constants:
            self.origin[slot] = "a constant"

    def record(self, ins: Instruction, view_source: int, field: str) -> None:
        if ins.inplace is not None:
            target = ins.inputs[ins.inplace]
            if self.origin[target] != "fresh":
                raise BundleError(
                    f"bundle field '{field}.inplace': instruction {ins.name!r} would write into slot {target}, "
                    f"which holds {self.origin[target]}"
                )
        for slot in ins.outputs:
            self.origin[slot] = self.origin[view_source] if view_source >= 0 else "fresh"
