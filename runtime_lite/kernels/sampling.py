"""Sampling an image at arbitrary points: grid_sample (torch's ``F.grid_sample``, ONNX GridSample).

The grid holds (x, y) in [-1, 1] per output pixel; each is mapped to input pixels
(``align_corners`` says whether -1 and 1 are the corner pixels' centres or their outer
edges), folded back in with the padding mode and read bilinearly or from the nearest
pixel (ties to even, as torch's nearbyint). Arithmetic stays in the input's dtype, as
torch's CPU kernel, so float32 results agree to rounding.
"""

from __future__ import annotations

import math
import time

import numpy as np

from runtime_lite.errors import describe
from runtime_lite.execution.limits import check_allocation, current_budget
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


# -- RoiAlign ---------------------------------------------------------------------------------------------

ROI_ALIGN_MODES = ("avg", "max")
ROI_ALIGN_COORDINATES = ("half_pixel", "output_half_pixel")


def _check_roi_align(attrs: dict) -> None:
    if attrs.get("mode") not in ROI_ALIGN_MODES:
        raise ValueError(f"attribute mode must be avg or max, got {describe(attrs.get('mode'))}")
    if attrs.get("coordinate_transformation_mode") not in ROI_ALIGN_COORDINATES:
        raise ValueError(
            "attribute coordinate_transformation_mode must be half_pixel or output_half_pixel, "
            f"got {describe(attrs.get('coordinate_transformation_mode'))}"
        )
    for name in ("output_height", "output_width"):
        value = attrs.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1 << 16):
            raise ValueError(f"attribute {name} must be a positive integer, got {describe(value)}")
    ratio = attrs.get("sampling_ratio")
    if not (isinstance(ratio, int) and not isinstance(ratio, bool) and 0 <= ratio <= 1 << 10):
        raise ValueError(f"attribute sampling_ratio must be an integer from 0 to 1024, got {describe(ratio)}")
    scale = attrs.get("spatial_scale")
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale)):
        raise ValueError(f"attribute spatial_scale must be a finite number, got {describe(scale)}")


def _roi_align_cost(x, rois, batch_indices, *, mode, output_height, output_width, sampling_ratio, spatial_scale,
                    coordinate_transformation_mode) -> int:  # fmt: skip
    """The output, and per ROI the rows sampled ([C, output_height, W]) or, for max, four weighted
    corner planes and their maximum ([C, output_height, output_width] each, float64 at worst)."""
    rois_n = batch_indices.shape[0] if batch_indices.ndim else 0
    c = x.shape[1] if x.ndim == 4 else 0
    w = x.shape[3] if x.ndim == 4 else 0
    out = nbytes((rois_n, c, output_height, output_width), x.dtype)
    return out + nbytes((c, output_height, max(w, output_width)), 8) * 6 + nbytes((output_height + output_width, 64), 8)


def _roi_axis(start: float, bin_size: float, bins: int, grid: int, size: int):
    """Along one axis: each bin's sample points (bins x grid), their low and high pixels and linear weights,
    zero for points outside [-1, size], as onnx's reference (and onnxruntime) place them."""
    points = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid) + 0.5) * bin_size / grid
    inside = (points >= -1.0) & (points <= size)
    points = np.maximum(points, 0.0)
    low = np.floor(points).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, points - low)
    return low, high, (1.0 - frac) * inside, frac * inside


def _within(deadline: float | None, r: int, count: int) -> None:
    """A Python loop over ROIs and sample points is not one numpy call: under ``max_run_seconds`` it stops."""
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"the run passed its max_run_seconds in roi_align, at ROI {r} of {count}")


@kernel("roi_align", check=_check_roi_align, cost=_roi_align_cost)
def roi_align(x, rois, batch_indices, *, mode, output_height, output_width, sampling_ratio, spatial_scale,
              coordinate_transformation_mode):  # fmt: skip
    """ONNX RoiAlign: each region of interest (x1, y1, x2, y2, scaled by ``spatial_scale``) cut into
    output_height x output_width bins, each bin the average (or maximum) of a grid of bilinear samples,
    ``sampling_ratio`` per side (0: ceil(bin size)). Bilinear sampling is separable, so an average is two small
    matrix products per ROI; max follows the reference's order (the largest weighted corner of each point)."""
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise ValueError(
            f"roi_align: input {list(x.shape)}, rois {list(rois.shape)} and batch_indices {list(batch_indices.shape)} "
            "must be [N, C, H, W], [R, 4] and [R]"
        )
    n, c, h, w = x.shape
    count = rois.shape[0]
    check_allocation((count, c, output_height, output_width), x.dtype, "roi_align output")
    out = np.zeros((count, c, output_height, output_width), x.dtype)
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    boxes = rois.astype(np.float64) * float(spatial_scale) - offset
    deadline = current_budget().deadline
    for r in range(count):
        _within(deadline, r, count)
        b = int(batch_indices[r])
        if not 0 <= b < n:
            raise ValueError(f"roi_align: batch index {b} of ROI {r} is outside the batch of {n}")
        x1, y1, x2, y2 = (float(v) for v in boxes[r])
        if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
            raise ValueError(f"roi_align: ROI {r} has a coordinate that is not finite")
        roi_h, roi_w = y2 - y1, x2 - x1
        if not offset:
            roi_h, roi_w = max(roi_h, 1.0), max(roi_w, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = sampling_ratio or max(int(math.ceil(bin_h)), 0)
        grid_w = sampling_ratio or max(int(math.ceil(bin_w)), 0)
        if grid_h * grid_w == 0:
            continue
        if grid_h > 4 * h + 16 or grid_w > 4 * w + 16:
            raise ValueError(f"roi_align: ROI {r} spans {roi_h:.4g} x {roi_w:.4g} pixels of a {h} x {w} map")
        ylo, yhi, yl, yh = _roi_axis(y1, bin_h, output_height, grid_h, h)
        xlo, xhi, xl, xh = _roi_axis(x1, bin_w, output_width, grid_w, w)
        plane = x[b]
        if mode == "avg":
            rows = np.zeros((output_height, h))
            cols = np.zeros((output_width, w))
            bins_h, bins_w = np.arange(output_height)[:, None], np.arange(output_width)[:, None]
            np.add.at(rows, (np.broadcast_to(bins_h, ylo.shape), ylo), yl)
            np.add.at(rows, (np.broadcast_to(bins_h, yhi.shape), yhi), yh)
            np.add.at(cols, (np.broadcast_to(bins_w, xlo.shape), xlo), xl)
            np.add.at(cols, (np.broadcast_to(bins_w, xhi.shape), xhi), xh)
            rows /= grid_h * grid_w
            out[r] = (rows.astype(x.dtype) @ plane) @ cols.T.astype(x.dtype)
            continue
        best = None
        for iy in range(grid_h):  # up to 1024 x 1024 points per ROI: the deadline is checked per row of them
            _within(deadline, r, count)
            for ix in range(grid_w):
                corners = [
                    plane[:, ylo[:, iy]][:, :, xlo[:, ix]] * np.outer(yl[:, iy], xl[:, ix]).astype(x.dtype),
                    plane[:, ylo[:, iy]][:, :, xhi[:, ix]] * np.outer(yl[:, iy], xh[:, ix]).astype(x.dtype),
                    plane[:, yhi[:, iy]][:, :, xlo[:, ix]] * np.outer(yh[:, iy], xl[:, ix]).astype(x.dtype),
                    plane[:, yhi[:, iy]][:, :, xhi[:, ix]] * np.outer(yh[:, iy], xh[:, ix]).astype(x.dtype),
                ]
                value = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
                best = value if best is None else np.maximum(best, value)
        out[r] = best
    return out
