"""Inputs from ``.npy`` files or random data, and output file names, for the ``runtime_lite`` commands."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from runtime_lite.errors import RuntimeLiteError
from runtime_lite.format.signature import DimSpec, TensorSpec

#: ``--random-inputs`` refuses to invent more than this many bytes for one input.
MAX_RANDOM_INPUT_BYTES = 1 << 30


def parse_input(text: str) -> tuple[str, Path]:
    """``NAME=FILE.npy`` (the name may itself contain ``=``; the last one splits)."""
    name, sep, path = text.rpartition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--input must look like NAME=FILE.npy, got {text!r}")
    return name, Path(path)


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"


def output_filenames(names: list[str]) -> list[str]:
    """One distinct, safe ``.npy`` file name per output: ``a/b`` and ``a_b`` must not overwrite each other.

    Names are compared without case, for case-insensitive file systems; a clash gets the
    output's index appended.
    """
    files, taken = [], set()
    for index, name in enumerate(names):
        stem = _safe_filename(name)
        if stem.lower() in taken:
            stem = f"{stem}.{index}"
        taken.add(stem.lower())
        files.append(f"{stem}.npy")
    return files


def _symbolic_size(dim: str, dims: Mapping[str, DimSpec]) -> int:
    """What a symbolic dim is for random data: 1, or its declared minimum where that is more."""
    bound = (dims or {}).get(dim)
    return max(1, bound.min or 1) if bound is not None else 1


def _batched_shape(spec: TensorSpec, batch: int | None, dims: Mapping[str, DimSpec] | None = None) -> tuple[int, ...]:
    """The shape random data gets: symbolic dims 1 (or their minimum), except a symbolic dim 0 which is ``batch``."""
    shape = [_symbolic_size(d, dims) if isinstance(d, str) else d for d in spec.shape]
    if batch is not None and shape:
        if isinstance(spec.shape[0], str):
            shape[0] = batch
        elif spec.shape[0] != batch:
            raise RuntimeLiteError(
                f"input {spec}: --batch {batch} needs a symbolic batch dim, and this bundle fixes it at "
                f"{spec.shape[0]}; rebuild it with a symbolic batch (aot-build --input NAME:Nx...)"
            )
    return tuple(shape)


def random_input(
    spec: TensorSpec, rng: np.random.Generator, batch: int | None = None, dims: Mapping[str, DimSpec] | None = None
) -> np.ndarray:
    shape = _batched_shape(spec, batch, dims)
    nbytes = int(np.prod(shape, dtype=object)) * spec.dtype.itemsize
    if nbytes > MAX_RANDOM_INPUT_BYTES:
        raise RuntimeLiteError(
            f"input {spec}: random data would take {nbytes:,} bytes; pass --input {spec.name}=FILE.npy"
        )
    if spec.dtype.kind == "f":
        return rng.standard_normal(shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 10, shape).astype(spec.dtype)


def load_inputs(
    specs: tuple[TensorSpec, ...],
    pairs: list[tuple[str, Path]],
    random: bool,
    seed: int,
    batch: int | None = None,
    dims: Mapping[str, DimSpec] | None = None,
) -> dict[str, np.ndarray]:
    """Every input the signature names: from its file, else random (with ``random``), else a one-line error."""
    known = {spec.name for spec in specs}
    unknown = [name for name, _ in pairs if name not in known]
    if unknown:
        raise RuntimeLiteError(
            f"unknown input {', '.join(map(repr, unknown))}: this bundle's inputs are "
            + ", ".join(str(s) for s in specs)
        )
    inputs = {}
    for name, path in pairs:
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RuntimeLiteError(f"cannot read input {name!r} from '{path}': {e}") from None
        if batch is not None and (inputs[name].ndim == 0 or inputs[name].shape[0] != batch):
            raise RuntimeLiteError(
                f"input {name!r} from '{path}' has shape {list(inputs[name].shape)}, not batch {batch} (--batch)"
            )
    if random:
        rng = np.random.default_rng(seed)
        for spec in specs:
            if spec.name not in inputs:
                inputs[spec.name] = random_input(spec, rng, batch, dims)
    missing = [s for s in specs if s.name not in inputs]
    if missing:
        raise RuntimeLiteError(
            "no value for input "
            + ", ".join(str(s) for s in missing)
            + "; pass --input NAME=FILE.npy or --random-inputs"
        )
    return inputs


def preview(array: np.ndarray, count: int = 6) -> str:
    """The first few values of an array, for a terminal."""
    values = ", ".join(f"{v:.6g}" if array.dtype.kind == "f" else str(v) for v in array.reshape(-1)[:count].tolist())
    return f"[{values}{', ...' if array.size > count else ''}]"
