"""What a TensorRT module record says: build settings, profiles, engine tags, and which engine fits.

Shared by ``aot`` (which writes these records and builds engines at build time)
and by the runtime (which picks an engine, or rebuilds one identically from the
recipe). Everything here is plain data, validated field by field when read.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from runtime_lite import format as fmt
from runtime_lite.backends.fallback import FallbackRecord  # noqa: F401 (the fallback payload, shared with onnxruntime)
from runtime_lite.backends.tensorrt.lean import lean_misfit
from runtime_lite.errors import BundleError
from runtime_lite.format.fields import expect
from runtime_lite.format.schema import BOOL, INT, MAP, STR, ListOf, Nested, Nullable, Record, TensorSpecs, declare
from runtime_lite.format.signature import TensorSpec

FORMAT = fmt.TENSORRT_RECIPE
PRECISIONS = ("fp32", "fp16", "int8")
#: TensorRT's hardware-compatibility levels: "none" ties an engine to one compute capability.
HARDWARE_LEVELS = ("none", "ampere_plus")
DEFAULT_WORKSPACE = 1 << 30
#: Tags every engine record carries: what ``engine_fits`` compares with the device.
ENGINE_TAGS = ("tensorrt", "cuda", "gpu", "compute_capability", "platform")


@dataclass(frozen=True)
class BuildSettings(Record):
    """The knobs of an engine build besides the recipe itself (``compile_specs.settings``).

    A record names every setting but ``batch``: the defaults are for code, never for a bundle.
    """

    precision: str = declare(STR, default="fp32", optional=False)
    workspace: int = declare(INT, default=DEFAULT_WORKSPACE, optional=False)
    #: (min, opt, max) of a symbolic batch dimension; None: the default range (1, 1, 32).
    batch: tuple[int, int, int] | None = declare(Nullable(ListOf(INT, 3, "[min, opt, max] integers")), default=None)
    hardware_compatibility: str = declare(STR, default="none", optional=False)
    #: Version-compatible engines embed host code; loading one is a trust decision made at load.
    version_compatible: bool = declare(BOOL, default=False, optional=False)
    #: With version_compatible: leave TensorRT's lean runtime out of the engine (no host code inside), for
    #: deployments that run it with the lean runtime of the same version (``runtime-lite[tensorrt-lean]``).
    #: Written only when set, so every engine key from before this setting stays what it was.
    exclude_lean_runtime: bool = declare(BOOL, default=False, omit_default=True)
    #: The calibration table's digest when the build quantized (int8): part of every engine's cache key
    #: (written only when set, like exclude_lean_runtime).
    calibration: str | None = declare(Nullable(STR), default=None, omit_default=True)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.hardware_compatibility not in HARDWARE_LEVELS:
            raise ValueError(
                f"hardware compatibility {self.hardware_compatibility!r} is not one of {', '.join(HARDWARE_LEVELS)}"
            )
        if self.exclude_lean_runtime and not self.version_compatible:
            raise ValueError("exclude_lean_runtime needs version_compatible (the lean runtime runs only those engines)")
        if not isinstance(self.workspace, int) or self.workspace <= 0:
            raise ValueError(f"workspace must be a positive number of bytes, got {self.workspace!r}")
        if self.batch is not None:
            lo, opt, hi = self.batch
            if not 1 <= lo <= opt <= hi:
                raise ValueError(f"batch range must satisfy 1 <= MIN <= OPT <= MAX, got {lo}:{opt}:{hi}")

    @property
    def batch_range(self) -> tuple[int, int, int]:
        return self.batch or (1, 1, 32)


@dataclass(frozen=True)
class EngineRecord(Record):
    """An engine shipped in the bundle: the payload holding it and the tags it was built for."""

    payload: str = declare(STR)
    #: ENGINE_TAGS and the build's settings, profiles and cache key (``engine_tags_for``)
    tags: dict[str, Any] = declare(MAP)

    def check(self, field: str) -> None:
        for tag in ENGINE_TAGS:
            if tag not in self.tags:
                raise BundleError(f"bundle field '{field}.tags.{tag}' is missing")
            expect(self.tags[tag], str, f"{field}.tags.{tag}")


@dataclass(frozen=True, kw_only=True)
class TensorRTSpecs(Record):
    """A TensorRT module's ``compile_specs``: its region's signature, build settings and engines."""

    FORMAT = fmt.TENSORRT_RECIPE

    format: str = declare(STR, default=fmt.TENSORRT_RECIPE)
    region: str = declare(STR, default="tensorrt")
    inputs: tuple[TensorSpec, ...] = declare(TensorSpecs())
    outputs: tuple[TensorSpec, ...] = declare(TensorSpecs())
    settings: BuildSettings = declare(Nested(BuildSettings))
    engines: tuple[EngineRecord, ...] = declare(ListOf(Nested(EngineRecord)), default=())
    #: The optimization profile the build derived from the model's bounds: input name -> [min, opt, max] shapes
    #: (opt the maximum). Written only when the bounds gave one, so a record from before it stays what it was.
    profile: dict[str, Any] | None = declare(Nullable(MAP), default=None, omit_default=True)

    def check(self, field: str) -> None:
        profile = self.profile or {}
        stray = sorted(set(profile) - {spec.name for spec in self.inputs})
        if stray:
            raise BundleError(f"bundle field '{field}.profile' names {stray[0]!r}, which is not an input")
        for i, spec in enumerate(self.inputs):
            if spec.name in profile:
                _check_profile(profile[spec.name], spec, f"{field}.profile.{spec.name}")
            elif any(isinstance(d, str) for d in spec.shape[1:]):
                raise BundleError(
                    f"bundle field '{field}.inputs[{i}].shape' = {list(spec.shape)}: "
                    "only the batch dim (dim 0) of a TensorRT input may be symbolic without a profile"
                )


#: The largest dim a profile may name: far past any real tensor, small enough to multiply safely.
MAX_PROFILE_DIM = 1 << 31


def _check_profile(shapes: Any, spec: TensorSpec, field: str) -> None:
    """[min, opt, max]: three shapes of the input's rank, each dim min <= opt <= max, the fixed dims as declared."""
    if not (isinstance(shapes, list) and len(shapes) == 3 and all(isinstance(s, list) for s in shapes)):
        raise BundleError(f"bundle field '{field}' must be [min, opt, max] shapes")
    if any(len(s) != len(spec.shape) for s in shapes):
        raise BundleError(f"bundle field '{field}' = {shapes}: each shape needs {len(spec.shape)} dims")
    for axis, (declared, lo, opt, hi) in enumerate(zip(spec.shape, *shapes)):
        if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_PROFILE_DIM for d in (lo, opt, hi)):
            raise BundleError(f"bundle field '{field}' dim {axis}: {lo}, {opt}, {hi} are not sizes")
        if not lo <= opt <= hi or (isinstance(declared, int) and not lo == opt == hi == declared):
            raise BundleError(f"bundle field '{field}' dim {axis}: {lo} <= {opt} <= {hi} does not fit {declared}")


def profiles(
    inputs: tuple[TensorSpec, ...] | list[TensorSpec], settings: BuildSettings, declared: dict[str, Any] | None = None
) -> dict[str, list[list[int]]]:
    """The optimization profile: [min, opt, max] shape per input; ``declared`` (``TensorRTSpecs.profile``, from
    the model's bounds) where it names the input, else a symbolic batch spans the batch range."""
    result = {}
    for spec in inputs:
        if declared and spec.name in declared:
            result[spec.name] = [list(shape) for shape in declared[spec.name]]
            continue
        dims = list(spec.shape)
        if any(isinstance(d, str) for d in dims[1:]):
            raise ValueError(f"input {spec.name!r} has a symbolic dim beyond the batch: {dims}")
        if dims and isinstance(dims[0], str):
            result[spec.name] = [[b, *dims[1:]] for b in settings.batch_range]
        else:
            result[spec.name] = [dims, dims, dims]
    return result


@dataclass(frozen=True)
class DeviceSignature:
    """What an engine is tied to on the machine that builds or runs it."""

    tensorrt: str
    cuda: str
    gpu: str
    compute_capability: str
    platform: str = field(default_factory=lambda: host_platform())
    #: "full" TensorRT or its "lean" runtime (which decides what it can run); not part of engine keys.
    runtime: str = "full"

    def to_record(self) -> dict[str, str]:
        return {
            "tensorrt": self.tensorrt,
            "cuda": self.cuda,
            "gpu": self.gpu,
            "compute_capability": self.compute_capability,
            "platform": self.platform,
        }

    def __str__(self) -> str:
        lean = " lean runtime" if self.runtime == "lean" else ""
        return f"{self.gpu} (sm {self.compute_capability}), TensorRT {self.tensorrt}{lean}, CUDA {self.cuda}, {self.platform}"


def host_platform() -> str:
    return f"{sys.platform}-{platform.machine().lower()}"


def ingredients(settings: BuildSettings, profile: dict[str, Any], device: DeviceSignature) -> dict[str, Any]:
    """Everything besides the recipe bytes that goes into an engine's cache key."""
    record = settings.to_record()
    del record["batch"]  # the profiles carry its effect
    return {**record, "profiles": profile, "device": device.to_record()}


def engine_tags_for(
    settings: BuildSettings, profile: dict[str, Any], device: DeviceSignature, key: str
) -> dict[str, Any]:
    """The tags stored beside an engine in a bundle: what it was built for, and its cache key."""
    record = ingredients(settings, profile, device)
    return {**record.pop("device"), **record, "key": key}


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def engine_fits(tags: dict[str, Any], device: DeviceSignature, allow_version_compatible: bool) -> str | None:
    """None if an engine with ``tags`` can run on ``device``; otherwise why not, in a few words."""
    if tags.get("platform") != device.platform:
        return f"built for {tags.get('platform')}"
    if device.runtime == "lean":
        why = lean_misfit(tags, device.tensorrt)
        if why is not None:
            return why
    elif tags.get("exclude_lean_runtime") and tags.get("tensorrt") != device.tensorrt:
        return f"built with TensorRT {tags.get('tensorrt')} without its lean runtime: only that version runs it"
    if tags.get("tensorrt") != device.tensorrt:
        same_major = str(tags.get("tensorrt", "")).split(".")[0] == device.tensorrt.split(".")[0]
        if not (tags.get("version_compatible") and allow_version_compatible and same_major):
            return f"built with TensorRT {tags.get('tensorrt')}"
    if tags.get("compute_capability") != device.compute_capability:
        try:
            ampere_plus = tags.get("hardware_compatibility") == "ampere_plus" and _cc(device.compute_capability) >= (
                8,
                0,
            )
        except ValueError:
            ampere_plus = False
        if not ampere_plus:
            return f"built for sm {tags.get('compute_capability')}"
    if tags.get("version_compatible") and not tags.get("exclude_lean_runtime") and not allow_version_compatible:
        return "version-compatible (embeds host code; load with allow_version_compatible=True)"
    return None
