"""Inputs from ``.npy`` files or random data, and output file names, for the ``runtime_lite`` commands."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import RuntimeLiteError
from runtime_lite.files import open_regular
from runtime_lite.format.signature import DimSpec, TensorSpec

#: ``--random-inputs`` refuses to invent more than this many bytes for one input.
MAX_RANDOM_INPUT_BYTES = 1 << 30


def parse_input(text: str) -> tuple[str, Path]:
    """``NAME=FILE.npy`` (the name may itself contain ``=``; the last one splits)."""
    name, sep, path = text.rpartition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--input must look like NAME=FILE.npy, got {text!r}")
    return name, Path(path)


def parse_dim(text: str) -> tuple[str, int]:
    """``NAME=SIZE`` (``--dim``); whether the bundle has that dim, and takes that size, is checked once it is loaded."""
    name, sep, size = text.rpartition("=")
    if not sep or not name or not re.fullmatch(r"[+-]?[0-9]+", size):
        raise argparse.ArgumentTypeError(f"--dim must look like NAME=SIZE with a whole number SIZE, got {text!r}")
    return name, int(size)


def dim_sizes(
    specs: tuple[TensorSpec, ...],
    given: list[tuple[str, int]],
    dims: Mapping[str, DimSpec] | None = None,
    batch: int | None = None,
) -> dict[str, int]:
    """The sizes ``--dim`` gives symbolic dims of the random inputs, each checked against the bundle in one line.

    A name no input uses, a size below 1 or outside the bounds the bundle declares, a dim given
    twice, or one ``--batch`` also sets to another size, would otherwise surface as a failed run
    (or a dim silently left at 1).
    """
    symbolic = list(dict.fromkeys(d for spec in specs for d in spec.shape if isinstance(d, str)))
    batch_dims = {spec.shape[0] for spec in specs if spec.shape and isinstance(spec.shape[0], str)}
    sizes: dict[str, int] = {}
    for name, size in given:
        if name in sizes:
            raise RuntimeLiteError(f"dim {name!r} is given twice (--dim {name}=...): give each dim once")
        if name not in symbolic:
            have = ", ".join(symbolic) if symbolic else "none, every input's shape is fixed"
            raise RuntimeLiteError(f"--dim {name}={size}: this bundle has no symbolic dim {name!r} (it has: {have})")
        if size < 1:
            raise RuntimeLiteError(f"--dim {name}={size}: a dim's size must be a whole number >= 1")
        bound = (dims or {}).get(name)
        low, high = (bound.min, bound.max) if bound is not None else (None, None)
        if (low is not None and size < low) or (high is not None and size > high):
            raise RuntimeLiteError(
                f"--dim {name}={size} is outside the bundle's bounds for {name} "
                f"({low if low is not None else 0}..{'' if high is None else high})"
            )
        if batch is not None and name in batch_dims and size != batch:
            raise RuntimeLiteError(f"--dim {name}={size} and --batch {batch} both size dim {name!r}: give one of them")
        sizes[name] = size
    return sizes


def describe_inputs(specs: tuple[TensorSpec, ...], inputs: Mapping[str, np.ndarray]) -> str:
    """One line: each input's dtype and shape as fed, then the size each symbolic dim took.

    Random inputs size an unnamed symbolic dim at 1 (or its declared minimum): a report must
    say so, or a sequence model is timed at sequence length 1 without anyone noticing.
    """
    took: dict[str, int] = {}
    for spec in specs:
        for dim, size in zip(spec.shape, inputs[spec.name].shape):
            if isinstance(dim, str):
                took.setdefault(dim, size)
    fed = ", ".join(f"{spec.name} {inputs[spec.name].dtype}{list(inputs[spec.name].shape)}" for spec in specs)
    return fed + (f" ({', '.join(f'{d}={n}' for d, n in took.items())})" if took else "")


#: What a .npy file starts with, and what a zip archive (an .npz) does.
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK"


def read_npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, trusting nothing in it; ValueError or OSError saying what is wrong.

    Only a regular file is opened, without blocking (a FIFO would wait for a writer
    forever), and its header's shape is checked against the bytes really there before
    numpy allocates a thing: a header may claim a terabyte. Never unpickles.
    """
    with os.fdopen(open_regular(path), "rb") as file:
        size = os.fstat(file.fileno()).st_size
        _check_npy_header(file, size)
        file.seek(0)
        return np.lib.format.read_array(file, allow_pickle=False)


def _check_npy_header(file: BinaryIO, size: int) -> None:
    """ValueError unless ``file`` is a .npy file whose header declares no more data than the file holds."""
    start = file.read(len(_NPY_MAGIC))
    if not start:
        raise ValueError("the file is empty, not a .npy file")
    if start.startswith(_ZIP_MAGIC):
        raise ValueError("it is a zip archive (an .npz?); --input takes a .npy file, one per input")
    if start != _NPY_MAGIC:
        raise ValueError("not a .npy file (it does not start with the .npy magic); --input takes .npy files")
    file.seek(0)
    major, _minor = np.lib.format.read_magic(file)
    # Version 3.0 only changes the header's text encoding (utf-8 field names), not its layout.
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, _fortran, dtype = read_header(file)
    if dtype.hasobject:
        raise ValueError(f"it holds Python objects ({dtype}), which are never unpickled; save a numeric array")
    if any(d < 0 for d in shape):
        raise ValueError(f"its header declares a negative dim in shape {list(shape)}")
    elements = int(np.prod(shape, dtype=object))
    if elements > fmt.MAX_ELEMENTS:
        raise ValueError(f"its header declares shape {list(shape)}, more than {fmt.MAX_ELEMENTS} elements")
    needed, present = elements * dtype.itemsize, size - file.tell()
    if needed > present:
        raise ValueError(
            f"its header declares {dtype}{list(shape)} ({needed:,} bytes) and the file holds {present:,} "
            "after the header (truncated?)"
        )


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


def _symbolic_size(dim: str, dims: Mapping[str, DimSpec] | None, sizes: Mapping[str, int] | None = None) -> int:
    """What a symbolic dim is for random data: its ``--dim`` size, else 1, or its declared minimum where that is more."""
    if sizes and dim in sizes:
        return sizes[dim]
    bound = (dims or {}).get(dim)
    return max(1, bound.min or 1) if bound is not None else 1


def _batched_shape(
    spec: TensorSpec,
    batch: int | None,
    dims: Mapping[str, DimSpec] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> tuple[int, ...]:
    """The shape random data gets: symbolic dims at their ``--dim`` size, else 1 (or their minimum), except a
    symbolic dim 0 which is ``batch``."""
    shape = [_symbolic_size(d, dims, sizes) if isinstance(d, str) else d for d in spec.shape]
    if batch is not None and batch > 1 and not shape:
        raise RuntimeLiteError(
            f"input {spec}: --batch {batch} needs a batch dim to fill, and this input is a scalar (no dims); "
            "bench it without --batch"
        )
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
    spec: TensorSpec,
    rng: np.random.Generator,
    batch: int | None = None,
    dims: Mapping[str, DimSpec] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> np.ndarray:
    shape = _batched_shape(spec, batch, dims, sizes)
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


def _read_input(name: str, path: Path) -> np.ndarray:
    """``read_npy``, its failures one line naming the input and the file."""
    try:
        return read_npy(path)
    except OSError as e:
        raise RuntimeLiteError(f"cannot read input {name!r} from '{path}': {e.strerror or e}") from None
    except ValueError as e:  # numpy's own messages may run to several lines: the first says what
        raise RuntimeLiteError(
            f"cannot read input {name!r} from '{path}': {(str(e).splitlines() or [type(e).__name__])[0]}"
        ) from None


def _batch_of(array: np.ndarray) -> int:
    """How many samples a file input holds: its dim 0, or one for a scalar (which has no batch axis)."""
    return array.shape[0] if array.ndim else 1


def load_inputs(
    specs: tuple[TensorSpec, ...],
    pairs: list[tuple[str, Path]],
    random: bool,
    seed: int,
    batch: int | None = None,
    dims: Mapping[str, DimSpec] | None = None,
    dim_size: list[tuple[str, int]] | None = None,
) -> dict[str, np.ndarray]:
    """Every input the signature names: from its file, else random (with ``random``), else a one-line error.

    ``dim_size`` (``--dim NAME=SIZE`` pairs) sizes symbolic dims of the random inputs; it is refused
    where no input is random, since file inputs keep their own shapes.
    """
    sizes = dim_sizes(specs, dim_size or [], dims, batch)
    known = {spec.name for spec in specs}
    unknown = [name for name, _ in pairs if name not in known]
    if unknown:
        raise RuntimeLiteError(
            f"unknown input {', '.join(map(repr, unknown))}: this bundle's inputs are "
            + ", ".join(str(s) for s in specs)
        )
    inputs = {}
    for name, path in pairs:
        if name in inputs:  # the last would silently win: the user meant one of them
            raise RuntimeLiteError(f"input {name!r} is given twice (--input {name}=...): give each input once")
        inputs[name] = _read_input(name, path)
        if batch is not None and _batch_of(inputs[name]) != batch:
            raise RuntimeLiteError(
                f"input {name!r} from '{path}' has shape {list(inputs[name].shape)}, not batch {batch} (--batch)"
            )
    if sizes and all(spec.name in inputs for spec in specs):
        raise RuntimeLiteError(
            "--dim sizes random inputs, and every input here comes from a file (--input): drop --dim"
        )
    if sizes and not random:
        raise RuntimeLiteError("--dim sizes random inputs: add --random-inputs")
    if random:
        rng = np.random.default_rng(seed)
        for spec in specs:
            if spec.name not in inputs:
                inputs[spec.name] = random_input(spec, rng, batch, dims, sizes)
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
