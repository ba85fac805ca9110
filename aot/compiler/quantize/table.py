"""The calibration table: each tensor's observed range, how it was found, and from which data.

Written beside the bundle as JSON (``model.calibration.json``) and reusable with
``--calibration-table``; its digest goes into every cache key and the bundle.

    {"format": "aot-calibration/1", "method": "percentile", "percentile": 99.99,
     "samples": 100, "data_digest": "<sha256 of the samples>",
     "tensors": {"conv1": {"min": -0.4, "max": 3.1, "amax": 2.9}, ...}}

``amax`` is the symmetric bound int8 uses (scale = amax / 127): the largest |x|
for minmax, the percentile of |x| otherwise. An ``amax`` of 0 is a tensor that is 0
everywhere (scale 1: every value quantizes to 0); a positive one below ``MIN_AMAX``
is not written (calibration writes 0 for it) and not read.

``kept_float`` (written only when the build kept some) names the layers the build's
accuracy budget kept float: the ranges alone would quantize them in a rebuild.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from aot.errors import BuildError

FORMAT = "aot-calibration/1"
#: The smallest positive range int8 can step: its scale (amax / 127, or amax / 255 for a result over [0, amax])
#: is then a normal float32. Below it the scale is subnormal or 0, and quantizing divides by it (inf, NaN): such
#: a range is taken as 0, the range of a tensor that is 0 everywhere (its values are below any step anyway).
MIN_AMAX = 255 * float(np.finfo(np.float32).tiny)


def usable_amax(amax: float) -> float:
    """``amax``, or 0 where it is too small to step (``MIN_AMAX``): what calibration writes to the table."""
    return amax if amax >= MIN_AMAX else 0.0


@dataclass(frozen=True)
class TensorRange:
    min: float
    max: float
    amax: float


@dataclass
class CalibrationTable:
    method: str
    percentile: float | None
    samples: int
    data_digest: str
    tensors: dict[str, TensorRange] = field(default_factory=dict)
    #: The layers (node names) the build kept float under its accuracy budget, costliest first.
    kept_float: list[str] = field(default_factory=list)

    def to_record(self) -> dict:
        record = {
            "format": FORMAT,
            "method": self.method,
            "percentile": self.percentile,
            "samples": self.samples,
            "data_digest": self.data_digest,
            "tensors": {k: {"min": r.min, "max": r.max, "amax": r.amax} for k, r in sorted(self.tensors.items())},
        }
        if self.kept_float:  # absent where none: a table without it keeps the digest it always had
            record["kept_float"] = list(self.kept_float)
        return record

    def to_json(self) -> str:
        return json.dumps(self.to_record(), indent=1, sort_keys=True) + "\n"

    @property
    def digest(self) -> str:
        """sha256 of the canonical record: what cache keys and the bundle name the table by."""
        canonical = json.dumps(self.to_record(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically (a temporary file renamed over the target)."""
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    def amax(self, tensor: str) -> float:
        try:
            return self.tensors[tensor].amax
        except KeyError:
            raise BuildError(
                f"the calibration table has no range for tensor {tensor!r} (made for another model or build?); "
                "calibrate again with --calibration DIR"
            ) from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationTable:
        where = f"calibration table {os.fspath(path)}"
        try:
            with open(path) as f:
                record = json.load(f)
        except OSError as e:
            raise BuildError(f"cannot read {where}: {e.strerror}") from None
        except ValueError as e:
            raise BuildError(f"{where} is not valid JSON: {e}") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise BuildError(f"{where} is not an {FORMAT} table (field 'format')")
        try:
            tensors = {}
            for name, r in record["tensors"].items():
                values = [float(r[k]) for k in ("min", "max", "amax")]
                if not all(math.isfinite(v) for v in values) or values[2] < 0:
                    raise ValueError(f"tensor {name!r} has a non-finite or negative range")
                if 0 < values[2] < MIN_AMAX:
                    raise ValueError(
                        f"tensor {name!r} has amax {values[2]:g}, too small for an int8 step (its scale would not be "
                        f"a normal float32: amax must be 0 or at least {MIN_AMAX:.3g}; calibration writes 0 for a "
                        "range that small)"
                    )
                tensors[str(name)] = TensorRange(*values)
            kept = record.get("kept_float", [])
            if not isinstance(kept, list) or not all(isinstance(k, str) for k in kept):
                raise ValueError("'kept_float' must be a list of layer names")
            return cls(
                method=str(record["method"]),
                percentile=None if record["percentile"] is None else float(record["percentile"]),
                samples=int(record["samples"]),
                data_digest=str(record["data_digest"]),
                tensors=tensors,
                kept_float=kept,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BuildError(f"{where} is malformed: {e}") from None
