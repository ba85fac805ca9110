"""A loaded bundle, ready to run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime_lite.backends import (
    Backend,
    IncompatiblePayload,
    available_backends,
    context_for,
    get_backend,
    resolve_backend_options,
)
from runtime_lite.errors import BundleError, ExecutionError, InputError, RuntimeLiteError, describe, one_line
from runtime_lite.execution.allocator import keep_freed_memory
from runtime_lite.execution.device import (
    OUTPUTS_ON,
    DeviceArray,
    DeviceInput,
    DeviceRun,
    activate,
    deactivate,
    is_device_array,
    require_cuda,
    stream_handle,
    to_device,
    to_host,
)
from runtime_lite.execution.limits import RunLimits
from runtime_lite.execution.load_budget import loading
from runtime_lite.execution.placement import Placement, check_required_present, enforce, normalize_require
from runtime_lite.execution.plan import BoundModule, HostPlan
from runtime_lite.execution.plan_shapes import check_output_shapes
from runtime_lite.format.fields import expect, expect_index, expect_key
from runtime_lite.format.reader import Bundle, BundleSource, decode_record, read_bundle
from runtime_lite.format.records import Instruction
from runtime_lite.format.signature import (
    DimSpec,
    TensorSpec,
    bind,
    bounded_axes,
    check_bounds,
    check_outputs,
    check_relations,
    nested_list_hint,
    ordered_values,
    parse_dims,
    parse_specs,
    related_axes,
)

if TYPE_CHECKING:  # json and the profile's export: imported by ``profile``, not at every start
    from runtime_lite.execution.profile import Profile


class Module:
    """A model loaded from a bundle. Safe to share between threads: ``run`` keeps no state."""

    def __init__(
        self,
        source: BundleSource,
        *,
        verify: bool = True,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        limits: RunLimits | None = None,
        map_file: bool = False,
        require: Iterable[str] | str | None = None,
    ):
        keep_freed_memory()
        resolved = resolve_backend_options(backend_options)  # a typo fails before any file is read
        self._closed = False
        self._modules, self._placements = [], []
        bundle = read_bundle(source, verify=verify, map_file=map_file, defer=_tensor_only_blobs)
        try:
            with loading(len(bundle.buffer.view)):  # what the backends may do, by the bundle's size
                self._load(bundle, resolved, limits, require, bundle.digest if verify else None)
        except BaseException as error:
            self.close()  # engines and device memory of the modules already initialised go back now
            _settle(bundle, error)
            raise

    def _load(
        self,
        bundle: Bundle,
        resolved: Mapping[str, dict[str, Any]],
        limits: RunLimits | None,
        require: Iterable[str] | str | None,
        verified_digest: str | None = None,
    ) -> None:
        """Everything after the read; returns only when every blob is verified (``bundle.pending``).

        ``verified_digest``: the bundle's digest where its blobs are verified, which backends may key caches by."""
        self._buffer = bundle.buffer
        self.limits = limits or RunLimits.from_options()
        header = _Header.parse(bundle)
        self.inputs: tuple[TensorSpec, ...] = header.inputs
        self.outputs: tuple[TensorSpec, ...] = header.outputs
        #: The signature's symbolic dims: where each name came from, and its bounds where declared.
        self.dims: dict[str, DimSpec] = header.dims
        self._bounded = bounded_axes(self.inputs, self.dims)
        self._related = related_axes(self.inputs, self.dims)
        #: Peak bytes of host activations at the dims' upper bounds, as the build computed it (None: unbounded),
        #: and the ``max_memory`` that admits a run there (the kernels' declared costs counted, as a budget does).
        self.worst_case_activation_bytes: int | None = header.worst_case[0]
        self.worst_case_budget_bytes: int | None = header.worst_case[1]
        self.producer: dict[str, str] = header.producer
        self.model_name: str = header.model_name
        #: Inputs the build bound to constants (``aot-build --bind``), as the header's model record says them.
        self._bound: str = header.bound_inputs
        self.format_version: tuple[int, int] = bundle.version
        self.path = bundle.source
        #: The bundle's identity (sha256 of its header, which holds every blob's sha256): a version to report.
        self.digest: str = bundle.digest
        required = normalize_require(require)
        check_required_present(required, [record.backend_name for record in header.modules])
        for record in header.modules:  # each placement checked as it is settled: a required miss stops the load
            bound = _init_module(record, resolved, verified_digest, self.dims)
            self._modules.append(bound)
            where = bound.backend.describe(bound.handle)
            placement = Placement(record.id, record.backend_name, where.runs_on, where.detail)
            enforce(placement, required)
            self._placements.append(placement)
        self._plan = header.bind_plan(bundle, self._modules)
        self._region_plans = {r.id: r.payloads["fallback"] for r in header.modules if "fallback" in r.payloads}
        if bundle.pending is not None:
            bundle.pending.wait()  # the weights backends took while their hash ran: a mismatch fails the load
        for module in self._modules:
            module.backend.verified(module.handle)

    def close(self) -> None:
        """Release every backend module (engines, device memory); the Module cannot run afterwards.

        Garbage collection does the same eventually; ``close`` (or ``with load(...) as m:``)
        does it now, which matters for GPU memory in a long-lived service.
        """
        self._closed = True
        modules, self._modules = self._modules, []
        for module in modules:
            module.backend.close(module.handle)

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def run(
        self, inputs: Mapping[str, Any] | Sequence[Any], *, outputs_on: str = "host", stream: Any = None
    ) -> list[Any]:
        r"""Run the model; ``inputs`` is a dict name -> array or a list in signature order.

        Returns the outputs as a list of numpy arrays in signature order. Inputs may
        also be GPU arrays (CuPy, torch.cuda: anything with ``__dlpack__`` or
        ``__cuda_array_interface__``), which TensorRT regions read where they lie.
        ``outputs_on="device"`` returns ``DeviceArray``\ s (``cupy.asarray``/
        ``torch.from_dlpack`` take them without a copy); ``stream`` is the caller's CUDA
        stream for the GPU work (an int handle, torch or CuPy stream; default: each
        engine's own). See docs/tensorrt.md, "Device-resident I/O".
        """
        return self._run(inputs, None, outputs_on, stream)

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any]) -> Profile:
        """Run once, recording a timed event per host instruction and per backend dispatch.

        Slower than ``run`` (it times every step); use it to see where time goes and
        what each backend decided (the NPU's engine, tiers, tiles, fusion, cycles).
        """
        from runtime_lite.execution.profile import Profile

        events: list[dict[str, Any]] = []
        outputs = self._run(inputs, events)
        return Profile(outputs, events)

    def _run(
        self, inputs: Mapping[str, Any] | Sequence[Any], trace: list | None, outputs_on: str = "host",
        stream: Any = None,
    ) -> list[Any]:  # fmt: skip
        """Inputs checked and made read-only, the plan run within the limits, outputs checked and owned."""
        if self._closed:
            raise ExecutionError("this Module was closed; load the bundle again to run it")
        self._buffer.check_unchanged()
        try:
            values = ordered_values(self.inputs, inputs)
        except InputError as e:
            raise InputError(f"{e}{bound_input_hint(self._bound, inputs)}") from None
        run = None
        if outputs_on != "host" or stream is not None or _any_on_device(values):
            if outputs_on not in OUTPUTS_ON:
                raise InputError(f"outputs_on must be one of {', '.join(OUTPUTS_ON)}, got {outputs_on!r}")
            handle = None if stream is None else stream_handle(stream)
            run = DeviceRun(outputs_on, handle, None if isinstance(stream, int) else stream)
            values = [_device_input(v, s.name) for v, s in zip(values, self.inputs)]
            for value, spec in zip(values, self.inputs):
                if isinstance(value, DeviceInput):
                    require_cuda(spec.name)
        try:
            arrays, dims = bind(self.inputs, values)
        except InputError as e:
            raise InputError(f"{e}{nested_list_hint(self.inputs, inputs)}") from None
        if self._bounded:
            check_bounds(self._bounded, arrays)
        if self._related:
            check_relations(self._related, arrays)
        if run is None:
            outputs = self._plan.execute(arrays, trace=trace, limits=self.limits)
        else:
            token = activate(run)
            try:
                outputs = _place(self._plan.execute(arrays, trace=trace, limits=self.limits, device=True), run)
            finally:
                deactivate(token)
        return check_outputs(self.outputs, outputs, dims)

    @functools.cached_property
    def row_coupling(self) -> str | None:
        """Why a row's outputs depend on the other rows of its batch (naming the op and where it runs), or None:
        a server merges requests into one batch only where they do not (runtime_lite/execution/rows.py)."""
        from runtime_lite.backends.fallback import FallbackRecord
        from runtime_lite.execution.rows import row_coupling

        plans = [("the host plan", [(i.op, i.name) for i in self._plan.instructions])]
        # a region whose backend runs a form without the fallback's batch statistic (onnxruntime's float kernels)
        independent = {m.id for m in self._modules if getattr(m.handle, "rows_independent", False) is True}
        for module_id, payload in self._region_plans.items():
            if module_id in independent:
                continue
            try:  # the backend that bound this region already refused a malformed one
                plan = FallbackRecord.from_record(decode_record(bytes(payload), "fallback"), "fallback").plan
            except BundleError:
                continue
            ops = [(r.get("op"), r.get("name", "?")) for r in plan.instructions if isinstance(r, dict)]
            plans.append((f"region {module_id!r}", ops))
        return row_coupling(plans)

    @property
    def modules(self) -> list[dict[str, str]]:
        """The backend modules this bundle calls: id, backend and, where it decides, where it runs."""
        described = []
        for p in self._placements:
            record = {"id": p.module, "backend": p.backend}
            if p.detail is not None:
                record["placement"] = p.detail
            described.append(record)
        return described

    @property
    def placement(self) -> dict[str, dict[str, str]]:
        """Where each backend module runs: ``{module id: {"backend": compiled for, "runs_on": runs on, "detail": why}}``.

        ``runs_on`` is the backend's name when the module runs as compiled, ``"host"`` when
        it fell back to its host plan (a TensorRT region without a usable engine).
        """
        return {p.module: p.to_dict() for p in self._placements}

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return f"<runtime_lite.Module {self.model_name or '?'} ({ins}) -> ({outs})>"


def _bound_inputs(model: Any) -> str:
    """``model.bound_inputs`` (informational: ``"sr=16000"``), or "" where it is absent or not text."""
    bound = model.get("bound_inputs", "") if isinstance(model, dict) else ""
    return bound if isinstance(bound, str) else ""


def bound_input_hint(bound: str, inputs: Any) -> str:
    """Where a caller passes an input the build bound to a constant (``--bind sr=16000``), say so: the generic
    "unknown input" alone reads as a typo."""
    if not bound or not isinstance(inputs, Mapping):
        return ""
    names = {part.split("=", 1)[0].strip() for part in bound.split(",")}
    given = [name for name in inputs if name in names]
    return f"; {given[0]!r} was bound at build time ({bound}): drop it" if given else ""


def _any_on_device(values: list[Any]) -> bool:
    for value in values:
        if type(value) is not np.ndarray and is_device_array(value):  # numpy never is: no call for it
            return True
    return False


def _device_input(value: Any, name: str) -> Any:
    """A caller's GPU array wrapped for the checks and the engines; anything else as it is."""
    if is_device_array(value) and not getattr(type(value), "on_device", False):
        return DeviceInput(value, name)
    return value


def _place(outputs: list[Any], run: DeviceRun) -> list[Any]:
    """The outputs where the caller asked for them, each its own: host arrays, or DeviceArrays of this run."""
    placed, seen = [], set()
    for value in outputs:
        on_device = getattr(type(value), "on_device", False)
        if run.outputs_on == "host":
            placed.append(to_host(value) if on_device else value)
        elif isinstance(value, DeviceArray) and id(value) not in seen:
            seen.add(id(value))
            placed.append(value)
        else:  # computed on the host, the caller's own GPU input, or a result repeated: a DeviceArray of its own
            try:
                placed.append(
                    to_device(to_host(value) if on_device else np.asarray(value), run.stream, run.stream_object)
                )
            except RuntimeError as e:  # no cuda-python, no device
                raise ExecutionError(
                    f"outputs_on='device': output {len(placed)} cannot be put on a GPU ({e})"
                ) from None
    return placed


def _worst_case(signature: dict, what: str) -> int | None:
    value = signature.get(f"worst_case_{what}_bytes")
    if value is not None and (type(value) is not int or value < 0):
        raise BundleError(f"bundle field 'signature.worst_case_{what}_bytes' must be a non-negative int, got {value!r}")
    return value


def _producer(record: Any) -> dict[str, str]:
    """Who wrote the bundle: a flat map of strings (tools print it; nothing nested reaches them)."""
    expect(record, dict, "header.producer")
    for key, value in record.items():
        expect(value, str, f"header.producer.{key}")
    return dict(record)


@dataclasses.dataclass(frozen=True)
class _ModuleRecord:
    """One module of the header: its backend (None where none is registered) and what it hands that backend."""

    id: str
    backend_name: str
    backend: Backend | None
    payloads: dict[str, memoryview]
    compile_specs: dict


@dataclasses.dataclass(frozen=True)
class _Header:
    """Every header field a load checks before any backend runs, parsed once."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dims: dict[str, DimSpec]
    worst_case: tuple[int | None, int | None]
    producer: dict[str, str]
    model_name: str
    bound_inputs: str
    modules: list[_ModuleRecord]
    plan: dict

    @classmethod
    def parse(cls, bundle: Bundle) -> _Header:
        header = bundle.header
        signature = expect_key(header, "signature", dict, "header")
        inputs = parse_specs(expect_key(signature, "inputs", list, "signature"), "signature.inputs")
        return cls(
            inputs=inputs,
            outputs=parse_specs(expect_key(signature, "outputs", list, "signature"), "signature.outputs"),
            dims=parse_dims(signature.get("dims", {}), inputs),
            worst_case=(_worst_case(signature, "activation"), _worst_case(signature, "budget")),
            producer=_producer(header.get("producer", {})),
            model_name=expect(
                expect(header.get("model", {}), dict, "header.model").get("name", ""), str, "header.model.name"
            ),
            bound_inputs=_bound_inputs(header.get("model", {})),
            modules=_unique_ids(
                [
                    _module_record(bundle, i, record)
                    for i, record in enumerate(expect(header.get("modules", []), list, "header.modules"))
                ]
            ),
            plan=expect_key(header, "plan", dict, "header"),
        )

    def bind_plan(self, bundle: Bundle, modules: list[BoundModule]) -> HostPlan:
        plan = HostPlan(self.plan, bundle.constants, modules)
        if len(plan.input_slots) != len(self.inputs) or len(plan.output_slots) != len(self.outputs):
            raise BundleError("bundle field 'plan': its inputs/outputs do not match the signature")

        def module_shapes(ins: Instruction) -> list | None:
            module = modules[ins.attrs["module"]]
            declared = getattr(module.backend, "output_shapes", None)
            return None if declared is None or module.handle is None else declared(module.handle)

        check_output_shapes(plan.instructions, plan.input_slots, plan.output_slots, plan.constant_slots(),
                            (self.inputs, self.outputs), module_shapes)  # fmt: skip
        return plan


def _settle(bundle: Bundle, error: BaseException) -> None:
    """After a failed load, no hashing thread left running, and corruption named as such.

    A backend handed a corrupt weight blob may fail on it in its own words first: the
    checksum mismatch is the cause, so it is the error (the hash finishes, ~0.2 s per 400 MB).
    An interrupt only stops the hashing.
    """
    pending = bundle.pending
    if pending is None:
        return
    if not isinstance(error, Exception):
        pending.cancel()
        return
    try:
        pending.wait()
    except BundleError as corrupt:
        if corrupt is not error:
            raise corrupt from None


def _tensor_only_blobs(header: dict) -> set[int]:
    """Blobs whose every use is a payload its backend declares plain tensors (``Backend.tensor_payloads``).

    Their sha256 may finish while backends initialise; any other blob (a constant of the
    host plan, a payload parsed as structure, one shared by both) is verified before
    anything reads it. The header is not checked yet: anything unexpected defers nothing,
    and the checks that follow name the field.
    """
    modules, constants = header.get("modules", []), header.get("constants", [])
    if not isinstance(modules, list) or not isinstance(constants, list):
        return set()
    tensors: set[int] = set()
    others = {c.get("blob") for c in constants if isinstance(c, dict) and type(c.get("blob")) is int}
    for record in modules:
        payloads = record.get("payloads", {}) if isinstance(record, dict) else None
        if not isinstance(payloads, dict):
            return set()
        try:
            backend = get_backend(record.get("backend")) if isinstance(record.get("backend"), str) else None
        except ImportError:  # a broken plugin: the load refuses it by name later
            backend = None
        declared = getattr(backend, "tensor_payloads", frozenset())
        for key, blob in payloads.items():
            if type(blob) is not int:
                continue  # refused by name when the header is checked
            (tensors if key in declared else others).add(blob)
    return tensors - others


def _unique_ids(records: list[_ModuleRecord]) -> list[_ModuleRecord]:
    """Module ids name placements (``module.placement``) and cache entries: two records with one id would lose one."""
    seen: dict[str, int] = {}
    for i, record in enumerate(records):
        if record.id in seen:
            raise BundleError(
                f"bundle field 'modules[{i}].id' = {describe(record.id)} repeats the id of modules[{seen[record.id]}]"
            )
        seen[record.id] = i
    return records


def _module_record(bundle: Bundle, i: int, record: Any) -> _ModuleRecord:
    field = f"modules[{i}]"
    expect(record, dict, field)
    module_id = expect_key(record, "id", str, field)
    name = expect_key(record, "backend", str, field)
    payloads = {
        key: bundle.blobs[expect_index(blob, len(bundle.blobs), f"{field}.payloads.{key}")]
        for key, blob in expect(record.get("payloads", {}), dict, f"{field}.payloads").items()
    }
    specs = expect(record.get("compile_specs", {}), dict, f"{field}.compile_specs")
    try:
        backend = get_backend(name)
    except ImportError as e:  # an installed plugin that is broken
        raise BundleError(f"bundle module {module_id!r} needs backend {name!r}: {e}") from None
    return _ModuleRecord(module_id, name, backend, payloads, specs)


def _init_module(
    record: _ModuleRecord,
    options: Mapping[str, dict[str, Any]],
    digest: str | None = None,
    dims: Mapping[str, DimSpec] | None = None,
) -> BoundModule:
    """Hand a backend module record to its backend's ``init``, with this backend's own options and the bundle's
    symbolic dims."""
    backend, name = record.backend, record.backend_name
    if backend is None:
        raise BundleError(
            f"bundle module {record.id!r} needs backend {name!r}, which this runtime_lite does not have "
            f"(it has: {', '.join(available_backends()) or 'none'}); install the package that provides it"
        )
    if not backend.is_available():
        raise BundleError(f"bundle module {record.id!r} needs backend {name!r}, which is not available on this host")
    context = dataclasses.replace(context_for(backend, options), bundle_digest=digest, dims=dims or {})
    try:
        handle = backend.init(context, record.payloads, record.compile_specs)
    except IncompatiblePayload as e:
        raise BundleError(f"bundle module {record.id!r}: backend {name!r} cannot use its payload here: {e}") from None
    except RuntimeLiteError:
        raise
    except Exception as e:  # a backend's own bug or unchecked field: still one line naming the module
        raise BundleError(
            f"bundle module {record.id!r}: backend {name!r} failed to initialise it: {type(e).__name__}: {one_line(str(e))}"
        ) from None
    return BoundModule(record.id, backend, handle, context)


class _UninitialisedBackend:
    """Stands where a backend's module would be when only the plan's binding is checked; never executed."""

    def __init__(self, name: str):
        self.name = name

    def execute(self, handle: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("check_bundle binds the plan only; it never runs a module")


def check_bundle(source: BundleSource) -> str:
    """Everything ``load`` checks before backends run, at header cost (no blob hashing, no engine).

    The builder calls this on every bundle before it becomes visible, so a
    writer/reader mismatch is a build error naming the field, never a bundle that
    a deployment refuses. Raises BundleError; returns the bundle's digest
    (``Module.digest``), which a server reports as the model version.
    """
    bundle = read_bundle(source, verify=False, map_file=True)  # a path is mapped, not copied
    header = _Header.parse(bundle)
    modules = [BoundModule(r.id, _UninitialisedBackend(r.backend_name), None) for r in header.modules]
    header.bind_plan(bundle, modules)
    return bundle.digest


def load(
    source: BundleSource,
    *,
    verify: bool = True,
    map_file: bool = False,
    max_memory: int | None = None,
    max_run_seconds: float | None = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    require: Iterable[str] | str | None = None,
) -> Module:
    """Load a bundle from a path or from bytes.

    ``verify`` checks every blob's sha256 (on by default; the header is always checked).
    A path is read into private memory, so later changes to the file cannot reach
    the loaded model; ``map_file=True`` maps it instead (no copy, pages shared
    between processes) for deployments that replace bundles only by rename.
    ``max_memory`` bounds every allocation of a run and its live activations
    (default 4 GiB, or ``$RUNTIME_LITE_MAX_MEMORY``); ``max_run_seconds`` stops a
    run that passes it, between two instructions. Either ends the run with
    ExecutionError.
    ``backend_options`` gives each backend its own load options, by backend name:
    ``{"tensorrt": {"allow_engine_build": True, "cache_dir": "/var/cache/aot"}}``.
    Each backend declares what it accepts (``runtime-lite backends`` lists them); an
    unknown backend or option is an ``OptionError`` (a ValueError) naming it.
    ``require`` names backends that must run as compiled, e.g. ``("tensorrt",)``: a
    module of one that would fall back to the host raises PlacementError instead (as
    does a bundle without any module for it); by default a fallback only logs one
    WARNING per module (``module.placement`` says where each runs).
    """
    limits = RunLimits.from_options(max_memory, max_run_seconds)
    return Module(
        source, verify=verify, backend_options=backend_options, limits=limits, map_file=map_file, require=require
    )
