"""Sampling an image at arbitrary points: grid_sample (torch's ``F.grid_sample``, ONNX GridSample).

The grid holds (x, y) in [-1, 1] per output pixel; each is mapped to input pixels
(``align_corners`` says whether -1 and 1 are the corner pixels' centres or their outer
edges), folded back in with the padding mode and read bilinearly or from the nearest
pixel (ties to even, as torch's nearbyint). Arithmetic stays in the input's dtype, as
torch's CPU kernel, so float32 results agree to rounding.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.errors import describe
from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.registry import kernel


def _unnormalize(coord: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """torch's reflect_coordinates: fold coordinates back into [low, high] as a mirror would."""
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = np.abs(coord - low)
    extra = np.fmod(coord, span)
    flips = np.floor(coord / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low).astype(coord.dtype, copy=False)


def _source(coord: np.ndarray, size: int, padding_mode: str, align_corners: bool) -> np.ndarray:
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        coord = np.clip(coord, 0, size - 1)
    elif padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        coord = np.clip(coord, 0, size - 1)
    return coord


def _taps(x: np.ndarray, iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """x[n, :, iy, ix] for integer maps [N, Ho, Wo], zero where a tap falls outside the image."""
    n, c, h, w = x.shape
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    flat = (np.clip(iy, 0, h - 1) * w + np.clip(ix, 0, w - 1)).reshape(n, 1, math.prod(iy.shape[1:]))  # n may be 0
    values = np.take_along_axis(x.reshape(n, c, h * w), np.broadcast_to(flat, (n, c, flat.shape[2])), axis=2)
    values = values.reshape(n, c, *iy.shape[1:])
    return np.where(inside[:, None], values, np.zeros((), x.dtype))


def _check_grid_sample(attrs: dict) -> None:
    if attrs.get("mode") not in ("bilinear", "nearest"):
        raise ValueError(f"attribute mode must be bilinear or nearest, got {describe(attrs.get('mode'))}")
    if attrs.get("padding_mode") not in ("zeros", "border", "reflection"):
        raise ValueError(
            f"attribute padding_mode must be zeros, border or reflection, got {describe(attrs.get('padding_mode'))}"
        )


def _grid_sample_cost(x, grid, *, mode, padding_mode, align_corners) -> int:
    """Per sampled point: the four taps and their weighted sum (output-sized, float64 at worst), and the
    grid's coordinates, indices and weights (a dozen arrays of the grid's size)."""
    points = grid.size // 2 if grid.ndim == 4 else grid.size
    out = nbytes((x.shape[0] * x.shape[1] if x.ndim >= 2 else 1, points), 8)
    return 6 * out + 12 * nbytes((points,), 8)


@kernel("grid_sample", check=_check_grid_sample, cost=_grid_sample_cost)
def grid_sample(x, grid, *, mode, padding_mode, align_corners):
    n, c, h, w = x.shape
    if grid.ndim != 4 or grid.shape[0] != n or grid.shape[3] != 2:
        raise ValueError(f"grid_sample: grid {list(grid.shape)} does not fit input {list(x.shape)}")
    check_allocation((n, c, grid.shape[1], grid.shape[2]), x.dtype, "grid_sample output")
    grid = grid.astype(x.dtype, copy=False)
    ix = _source(grid[..., 0], w, padding_mode, bool(align_corners))
    iy = _source(grid[..., 1], h, padding_mode, bool(align_corners))
    if mode == "nearest":
        return _taps(x, np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64))
    x0, y0 = np.floor(ix), np.floor(iy)
    wx1, wy1 = (ix - x0)[:, None], (iy - y0)[:, None]
    wx0, wy0 = 1 - wx1, 1 - wy1
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    out = _taps(x, y0, x0) * (wy0 * wx0)
    out += _taps(x, y0, x0 + 1) * (wy0 * wx1)
    out += _taps(x, y0 + 1, x0) * (wy1 * wx0)
    out += _taps(x, y0 + 1, x0 + 1) * (wy1 * wx1)
    return out.astype(x.dtype, copy=False)
