"""A loaded bundle, ready to run."""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime_lite.allocator import keep_freed_memory
from runtime_lite.backends import IncompatiblePayload, LoadOptions, available_backends, get_backend
from runtime_lite.bundle import Bundle, BundleSource, expect, expect_index, expect_key, read_bundle
from runtime_lite.errors import BundleError
from runtime_lite.limits import RunLimits
from runtime_lite.plan import BoundModule, HostPlan
from runtime_lite.profile import Profile
from runtime_lite.signature import TensorSpec, bind, check_outputs, ordered_values, parse_specs


class Module:
    """A model loaded from a bundle. Safe to share between threads: ``run`` keeps no state."""

    def __init__(
        self,
        source: BundleSource,
        *,
        verify: bool = True,
        options: LoadOptions | None = None,
        limits: RunLimits | None = None,
        map_file: bool = False,
    ):
        keep_freed_memory()
        bundle = read_bundle(source, verify=verify, map_file=map_file)
        self._buffer = bundle.buffer
        self.limits = limits or RunLimits.from_options()
        header = bundle.header
        signature = expect_key(header, "signature", dict, "header")
        self.inputs: tuple[TensorSpec, ...] = parse_specs(
            expect_key(signature, "inputs", list, "signature"), "signature.inputs"
        )
        self.outputs: tuple[TensorSpec, ...] = parse_specs(
            expect_key(signature, "outputs", list, "signature"), "signature.outputs"
        )
        self.producer: dict[str, str] = _producer(header.get("producer", {}))
        self.model_name: str = expect(
            expect(header.get("model", {}), dict, "header.model").get("name", ""), str, "header.model.name"
        )
        self.format_version: tuple[int, int] = bundle.version
        self.path = bundle.source
        self._modules = _init_modules(bundle, options or LoadOptions())
        self._plan = HostPlan(expect_key(header, "plan", dict, "header"), bundle.constants, self._modules)
        if len(self._plan.input_slots) != len(self.inputs) or len(self._plan.output_slots) != len(self.outputs):
            raise BundleError("bundle field 'plan': its inputs/outputs do not match the signature")

    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Run the model; ``inputs`` is a dict name -> array or a list in signature order.

        Returns the outputs as a list of numpy arrays in signature order.
        """
        return self._run(inputs, None)

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any]) -> Profile:
        """Run once, recording a timed event per host instruction and per backend dispatch.

        Slower than ``run`` (it times every step); use it to see where time goes and
        what each backend decided (the NPU's engine, tiers, tiles, fusion, cycles).
        """
        events: list[dict[str, Any]] = []
        outputs = self._run(inputs, events)
        return Profile(outputs, events)

    def _run(self, inputs: Mapping[str, Any] | Sequence[Any], trace: list | None) -> list[np.ndarray]:
        """Inputs checked and made read-only, the plan run within the limits, outputs checked and owned."""
        self._buffer.check_unchanged()
        arrays, dims = bind(self.inputs, ordered_values(self.inputs, inputs))
        outputs = self._plan.execute(arrays, trace=trace, limits=self.limits)
        return check_outputs(self.outputs, outputs, dims)

    @property
    def modules(self) -> list[dict[str, str]]:
        """The backend modules this bundle calls: id, backend and, where it decides, where it runs."""
        described = []
        for m in self._modules:
            record = {"id": m.id, "backend": m.backend.name}
            placement = getattr(m.handle, "placement", None)
            if placement is not None:
                record["placement"] = placement
            described.append(record)
        return described

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return f"<runtime_lite.Module {self.model_name or '?'} ({ins}) -> ({outs})>"


def _producer(record: Any) -> dict[str, str]:
    """Who wrote the bundle: a flat map of strings (tools print it; nothing nested reaches them)."""
    expect(record, dict, "header.producer")
    for key, value in record.items():
        expect(value, str, f"header.producer.{key}")
    return dict(record)


def _init_modules(bundle: Bundle, options: LoadOptions) -> list[BoundModule]:
    """Hand each backend module record to its backend's ``init``."""
    modules = []
    for i, record in enumerate(expect(bundle.header.get("modules", []), list, "header.modules")):
        field = f"modules[{i}]"
        expect(record, dict, field)
        module_id = expect_key(record, "id", str, field)
        name = expect_key(record, "backend", str, field)
        backend = get_backend(name)
        if backend is None:
            raise BundleError(
                f"bundle module {module_id!r} needs backend {name!r}, which this runtime_lite does not have "
                f"(it has: {', '.join(available_backends()) or 'none'}); install the package that provides it"
            )
        if not backend.is_available():
            raise BundleError(
                f"bundle module {module_id!r} needs backend {name!r}, which is not available on this host"
            )
        payloads = {
            key: bundle.blobs[expect_index(blob, len(bundle.blobs), f"{field}.payloads.{key}")]
            for key, blob in expect(record.get("payloads", {}), dict, f"{field}.payloads").items()
        }
        specs = expect(record.get("compile_specs", {}), dict, f"{field}.compile_specs")
        try:
            if "options" in inspect.signature(backend.init).parameters:
                handle = backend.init(payloads, specs, options=options)
            else:
                handle = backend.init(payloads, specs)
        except IncompatiblePayload as e:
            raise BundleError(
                f"bundle module {module_id!r}: backend {name!r} cannot use its payload here: {e}"
            ) from None
        modules.append(BoundModule(module_id, backend, handle))
    return modules


def load(
    source: BundleSource,
    *,
    verify: bool = True,
    map_file: bool = False,
    max_memory: int | None = None,
    max_run_seconds: float | None = None,
    allow_engine_build: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    allow_version_compatible: bool = False,
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
    TensorRT regions: ``allow_engine_build`` lets a region whose engines do not fit
    this GPU build one from its recipe into the engine cache at ``cache_dir``
    (defaults: ``$AOT_ALLOW_ENGINE_BUILD``, ``$AOT_CACHE_DIR`` else the XDG cache
    dir); otherwise it runs on the host. ``allow_version_compatible`` admits
    version-compatible engines, which execute host code shipped inside the engine.
    """
    limits = RunLimits.from_options(max_memory, max_run_seconds)
    options = LoadOptions(cache_dir=cache_dir, allow_version_compatible=allow_version_compatible)
    if allow_engine_build is not None:
        options = dataclasses.replace(options, allow_engine_build=allow_engine_build)
    return Module(source, verify=verify, options=options, limits=limits, map_file=map_file)
