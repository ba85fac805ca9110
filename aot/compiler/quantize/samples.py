"""Calibration samples: read from a directory of .npy files or taken from an iterable, checked against the inputs."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aot.errors import BuildError
from aot.ir.graph import Value
from runtime_lite.tools.inputs import read_npy

Sample = dict[str, np.ndarray]


def _fits(array: np.ndarray, value: Value) -> bool:
    shape = value.type.shape
    return array.ndim == len(shape) and all(not isinstance(d, int) or d == n for d, n in zip(shape, array.shape))


def _load(path: Path) -> np.ndarray:
    """The runtime's reader of untrusted .npy files: a FIFO never blocks, a header's shape is checked against the
    file's size before anything is allocated, nothing is unpickled."""
    try:
        return read_npy(path)
    except (OSError, ValueError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0] if not isinstance(e, OSError) else e.strerror or str(e)
        raise BuildError(f"calibration file {path} is not a readable .npy array: {why}") from None


def _from_directory(root: Path, inputs: list[Value], limit: int | None) -> tuple[list[Sample], list[str]]:
    """The samples, and where each came from (a file, a sample of a file's stack, a folder) for errors."""
    if not root.is_dir():
        raise BuildError(f"calibration data {root} is not a directory")
    names = [v.name for v in inputs]
    samples: list[Sample] = []
    labels: list[str] = []
    if len(inputs) == 1:
        files = sorted(p for p in root.iterdir() if p.suffix == ".npy")
        if not files:
            raise BuildError(f"calibration directory {root} holds no .npy files")
        for path in files:
            array = _load(path)
            if _fits(array, inputs[0]):
                samples.append({names[0]: array})
                labels.append(f"calibration file {path}")
            elif array.ndim == len(inputs[0].type.shape) + 1 and not len(array):
                raise BuildError(
                    f"calibration file {path} has shape {list(array.shape)}: a stack of no samples (dim 0 is 0); "
                    "remove the file or put samples in it"
                )
            elif array.ndim == len(inputs[0].type.shape) + 1 and _fits(array[0], inputs[0]):
                samples.extend({names[0]: a} for a in array)  # a stack of samples
                labels.extend(f"calibration file {path} (sample {k} of its stack)" for k in range(len(array)))
            else:
                raise BuildError(
                    f"calibration file {path} has shape {list(array.shape)}; input {names[0]!r} is {inputs[0].type}"
                )
            if limit is not None and len(samples) >= limit:
                break
    else:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
        if not folders:
            raise BuildError(
                f"calibration directory {root}: a model with inputs {', '.join(names)} needs one subdirectory per "
                "sample holding <input name>.npy"
            )
        for folder in folders[:limit]:
            missing = [n for n in names if not (folder / f"{n}.npy").is_file()]
            if missing:
                raise BuildError(f"calibration sample {folder} has no {missing[0]}.npy")
            samples.append({n: _load(folder / f"{n}.npy") for n in names})
            labels.append(f"calibration sample {folder}")
    return (samples[:limit], labels[:limit]) if limit is not None else (samples, labels)


def load_samples(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], inputs: list[Value],
                 limit: int | None = None) -> list[Sample]:  # fmt: skip
    """Every sample as {input name: array of the input's dtype and shape}; a misfit is a one-line BuildError."""
    if isinstance(source, (str, os.PathLike)):
        raw, labels = _from_directory(Path(source), inputs, limit)
    else:
        raw = []
        for i, item in enumerate(source):
            if limit is not None and i >= limit:
                break
            if not isinstance(item, Mapping):
                raise BuildError(f"calibration sample {i} is a {type(item).__name__}, not a dict of input arrays")
            raw.append({k: np.asarray(v) for k, v in item.items()})
        labels = [f"calibration sample {i}" for i in range(len(raw))]
    if not raw:
        raise BuildError("calibration data holds no samples")
    samples = []
    for i, sample in enumerate(raw):
        unknown = sorted(set(sample) - {v.name for v in inputs})
        if unknown:
            raise BuildError(f"calibration sample {i} names {unknown[0]!r}, not an input of the model")
        checked = {}
        for value in inputs:
            if value.name not in sample:
                raise BuildError(f"calibration sample {i} has no array for input {value.name!r}")
            array = sample[value.name]
            if not _fits(array, value):
                raise BuildError(
                    f"calibration sample {i}: input {value.name!r} is {value.type}, got shape {list(array.shape)}"
                )
            if array.dtype.kind != np.dtype(value.type.dtype).kind:
                raise BuildError(
                    f"calibration sample {i}: input {value.name!r} is {value.type.dtype}, got {array.dtype}"
                )
            with np.errstate(over="ignore"):  # a float64 past float32's range: caught as infinite below
                checked[value.name] = array = np.ascontiguousarray(array, dtype=value.type.dtype)
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                bad = int(array.size - np.count_nonzero(np.isfinite(array)))
                raise BuildError(
                    f"{labels[i]}: input {value.name!r} holds {bad} NaN or infinite value{'s' if bad > 1 else ''} "
                    f"of {array.size} (as {array.dtype}); calibration data must be finite"
                )
        _refuse_empty(checked, labels[i])
        samples.append(checked)
    return samples


def _refuse_empty(sample: Sample, label: str) -> None:
    """A sample whose every input is empty (a zero-size dim: a batch of 0, an empty stack's slice) holds nothing to
    calibrate on or to judge by: it crashed the report (no positions to agree on) or counted as a sample. One
    empty input beside others that hold data is a real input (a decoder's empty past at its first step)."""
    if not sample or any(a.size for a in sample.values()):
        return
    name, array = next(iter(sample.items()))
    dim = list(array.shape).index(0)
    raise BuildError(
        f"{label}: input {name!r} has shape {list(array.shape)}, empty along dim {dim} (size 0); a calibration "
        "sample must hold data"
    )


def constant_inputs(samples: list[Sample]) -> list[str]:
    """A line for each float input that takes one value in every sample (all zeros, a placeholder): the ranges
    calibrated from it fit no real input, and the accuracy measured on it says nothing of one."""
    lines = []
    for name in samples[0] if samples else ():
        arrays = [sample[name] for sample in samples]
        if arrays[0].dtype.kind != "f" or not arrays[0].size:
            continue
        value = arrays[0].flat[0]
        if all(np.all(a == value) for a in arrays):
            lines.append(
                f"int8: calibration input {name!r} is {value:g} everywhere in all {len(arrays)} samples: ranges "
                "calibrated from it fit no real input, nor does the accuracy below measure one; calibrate on data "
                "like the model's inputs"
            )
    return lines


def data_digest(samples: list[Sample]) -> str:
    """sha256 over every sample's names, dtypes, shapes and bytes: which data a table came from."""
    h = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            array = sample[name]
            h.update(f"{name}|{array.dtype.str}|{list(array.shape)}|".encode())
            h.update(array.tobytes())
    return h.hexdigest()
