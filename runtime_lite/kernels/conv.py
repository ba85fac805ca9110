"""N-d convolution and transposed convolution lowered to GEMM.

Layout is NCHW (N, C, *spatial) with OIHW weights, as ONNX defines them. ``conv``
picks one of seven lowerings per call from the shapes, the first that applies:

1. ``_depthwise_taps``: depthwise 2-d on small output maps or with many taps
   (``_taps_depthwise``): one einsum over every tap of a channels-last copy;
2. ``_shifted_gemms``: stride-1 2-d, one group, at most ``SHIFTED_GEMM_MAX_OUTPUTS``
   output channels, not 1x1: one GEMM per kernel tap on a shifted view of the padded
   input, no im2col;
3. ``_fold_batch``: one group, a batch, small output maps (``BATCH_FOLD_PIXELS``,
   ``BATCH_FOLD_POINTWISE_PIXELS`` for 1x1) and the batch's im2col within
   ``BATCH_FOLD_BYTES``: the batch folded into the columns of one GEMM;
4. ``_pointwise``: 1x1 kernels, grouped or not: the (strided) input already is the
   GEMM operand, ``W[O, C] @ X[C, H*W]``, no copy;
5. ``_depthwise_blocks``: depthwise on larger maps: im2col and per-channel products,
   a block of channels at a time on gemm.py's threads;
6. ``_blocked_im2col``: one group and an im2col matrix over ``BLOCKED_IM2COL_BYTES``:
   im2col + GEMM a block of output rows at a time, so the copy stays in cache;
7. ``_im2col``: everything else: im2col through an ``as_strided`` window view (one
   copy) and a matmul batched over groups.

Lowerings 3 to 7 read the input padded once by ``pad_spatial``; 1 and 2 pad their own
layouts. Single-group GEMMs go through gemm.py, which spreads them over the BLAS
threads. Transposed convolution has one lowering: a GEMM per group, then col2im as
one strided scatter-add per kernel tap.

Python loops only ever run over kernel taps and blocks, never over pixels.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import numpy as np
from numpy.lib.stride_tricks import as_strided

from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels import gemm
from runtime_lite.kernels.cost import promoted
from runtime_lite.kernels.geometry import (
    check_conv_attrs,
    check_conv_transpose_attrs,
    spatial_geometry,
    window_fits,
)
from runtime_lite.kernels.registry import kernel


def output_extent(size: int, k: int, stride: int, dilation: int) -> int:
    return (size - dilation * (k - 1) - 1) // stride + 1


def pad_spatial(x: np.ndarray, pads, value=0) -> np.ndarray:
    """Pad the spatial axes of an N, C, *spatial array; ``pads`` is ONNX's [begins..., ends...].

    A filled array with the input assigned into it: 1.4 to 4x faster than ``np.pad``
    on convolution inputs (its per-call overhead dominates small maps).
    """
    nd = x.ndim - 2
    if not any(pads):
        return x
    padded = np.full(x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + nd] for i in range(nd)), value, x.dtype)
    padded[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(nd))] = x
    return padded


def window_view(x: np.ndarray, kernel_shape, strides, dilations) -> np.ndarray:
    """A read-only (N, C, *kernel, *out) view of every sliding window of a padded input.

    The only strided view built from bundle values: it refuses any geometry whose
    last window would end outside ``x``, whatever its callers checked.
    """
    nd = len(kernel_shape)
    out = [output_extent(x.shape[2 + i], kernel_shape[i], strides[i], dilations[i]) for i in range(nd)]
    if x.ndim != nd + 2 or not all(
        window_fits(x.shape[2 + i], kernel_shape[i], strides[i], dilations[i], out[i]) for i in range(nd)
    ):
        raise ValueError(f"windows of {list(kernel_shape)} (strides {list(strides)}, dilations {list(dilations)}) "
                         f"do not fit an input of shape {list(x.shape)}")  # fmt: skip
    sp = x.strides[2:]
    view_strides = (
        x.strides[:2] + tuple(sp[i] * dilations[i] for i in range(nd)) + tuple(sp[i] * strides[i] for i in range(nd))
    )
    return as_strided(x, x.shape[:2] + tuple(kernel_shape) + tuple(out), view_strides, writeable=False)


#: An im2col matrix larger than this is built and multiplied a block of output rows at a time.
BLOCKED_IM2COL_BYTES = 48 << 20
#: The block: about this many bytes of im2col, so it is still in cache when the GEMM reads it.
IM2COL_BLOCK_BYTES = 4 << 20


def _blocked_im2col(x, w2d, kernel_shape, strides, dilations, out_shape) -> np.ndarray:
    """im2col + GEMM over blocks of output rows: the copy stays in cache instead of going to DRAM.

    Measured on VGG's first layers (64 and 128 channels at 224 and 112 pixels, im2col of
    115 and 58 MB) this is 30% and 18% faster than one big copy; below ~48 MB it gains nothing.
    """
    n = x.shape[0]
    o, k = w2d.shape
    windows = window_view(x, kernel_shape, strides, dilations)  # (n, c, *kernel, *out)
    rows, row_pixels = out_shape[0], math.prod(out_shape[1:])
    block = max(1, IM2COL_BLOCK_BYTES // (k * row_pixels * x.itemsize))
    y = np.empty((n, o, rows * row_pixels), x.dtype)
    buffer = np.empty((k, block * row_pixels), x.dtype)
    taps = windows.shape[1 : 2 + len(kernel_shape)]  # (c, *kernel)
    trailing = (slice(None),) * (len(out_shape) - 1)
    for b in range(n):
        for start in range(0, rows, block):
            stop = min(rows, start + block)
            cols = buffer[:, : (stop - start) * row_pixels]
            window_rows = windows[(b, Ellipsis, slice(start, stop)) + trailing]
            np.copyto(cols.reshape(taps + (stop - start,) + tuple(out_shape[1:])), window_rows)
            np.matmul(w2d, cols, out=y[b, :, start * row_pixels : stop * row_pixels])
    return y


#: Depthwise 2-d convolutions with at most this many output pixels, or at least
#: ``TAPS_DEPTHWISE_MIN_TAPS`` kernel taps, run as one einsum over channels-last windows.
TAPS_DEPTHWISE_PIXELS = 784
TAPS_DEPTHWISE_MIN_TAPS = 25
#: ... split into blocks of output rows on gemm.py's threads from this many multiply-adds.
TAPS_DEPTHWISE_PARALLEL_MACS = 4_000_000
#: The row blocks: about this many bytes of output each.
TAPS_DEPTHWISE_BLOCK_BYTES = 256 << 10


def _taps_depthwise(out_shape, kernel_shape) -> bool:
    return math.prod(out_shape) <= TAPS_DEPTHWISE_PIXELS or math.prod(kernel_shape) >= TAPS_DEPTHWISE_MIN_TAPS


def _column_phases(x: np.ndarray, pads, stride: int) -> list[np.ndarray]:
    """The zero-padded input channels-last, split by column phase: (N, 1, Hp, width * C) each.

    Phase ``q`` holds padded columns ``q, q + stride, ...``, so every kernel tap of a
    strided convolution reads a stride-1 run of whole pixels from one phase, and a
    row of output pixels is one contiguous run of ``ow * C`` values.
    """
    n, c, h, wd = x.shape
    hp, wp = h + pads[0] + pads[2], wd + pads[1] + pads[3]
    channels_last = x.transpose(0, 2, 3, 1)
    phases = []
    for q in range(stride):
        width = -(-(wp - q) // stride)
        phase = np.zeros((n, hp, width, c), x.dtype)
        first = max(0, -(-(pads[1] - q) // stride))  # the first phase column inside the input
        last = min(width - 1, (pads[1] + wd - 1 - q) // stride)
        if last >= first:
            start = q + stride * first - pads[1]
            phase[:, pads[0] : pads[0] + h, first : last + 1] = channels_last[
                :, :, start : start + stride * (last - first) + 1 : stride
            ]
        phases.append(phase.reshape(n, 1, hp, width * c))
    return phases


def _tap_groups(x, w, strides, pads, dilations, ow: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(windows, weights) per column phase: windows (N, kh, taps, oh, ow * C), weights (kh, taps, ow * C).

    The windows are one checked ``window_view`` of the phase, its column axis the
    flattened (pixel, channel) run (a tap further right starts ``C`` values later);
    the weights repeat each tap's channel vector ``ow`` times, so the einsum's inner
    loop runs over a whole output row instead of C values.
    """
    c, kh, kw = x.shape[1], w.shape[2], w.shape[3]
    (sh, sw), (dh, dw) = strides, dilations
    groups = []
    for q, phase in enumerate(_column_phases(x, pads, sw)):
        taps = tuple(j for j in range(kw) if (j * dw) % sw == q)
        if not taps:
            continue
        first, spacing = (taps[0] * dw) // sw, dw // math.gcd(dw, sw)
        windows = window_view(phase[..., first * c :], (kh, len(taps)), (sh, 1), (dh, spacing * c))
        groups.append((windows[:, 0, :, :, :, : ow * c], TAP_TILES.get(w, taps, ow)))
    return groups


def _tiles(w: np.ndarray, taps: tuple[int, ...], ow: int) -> np.ndarray:
    """Each tap's channel vector repeated ``ow`` times: (kh, taps, ow * C)."""
    c, kh = w.shape[0], w.shape[2]
    # taps / oh times the output: more than it only on short, wide maps (a 1 x 25 kernel on one row)
    check_allocation([kh, len(taps), ow, c], w.dtype, "depthwise tap weights")
    tiles = np.empty((kh, len(taps), ow, c), w.dtype)
    tiles[...] = w.reshape(c, kh, w.shape[3]).transpose(1, 2, 0)[:, list(taps), None, :]
    tiles.flags.writeable = False
    return tiles.reshape(kh, len(taps), ow * c)


class _TileCache:
    """The repeated tap weights of read-only (bundle) weight arrays, kept across runs within a byte bound.

    Building them costs as much as a third of a small depthwise convolution (MobileNetV3's
    576 x 7 x 7 5x5: ~0.1 of 0.3 ms, AMD EPYC); a model's weights do not change between
    runs. Entries are keyed by the weight array's identity, checked through a weak
    reference, so an array freed and another allocated at its address never share one;
    writable weights (computed in the run) are never kept. Least recently used entries
    go first once ``limit`` bytes are held.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self._entries: OrderedDict[tuple, tuple[weakref.ref, np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()  # a weight freed while the lock is held calls _discard in this thread

    def get(self, w: np.ndarray, taps: tuple[int, ...], ow: int) -> np.ndarray:
        """The tiles for ``ow`` output columns: a prefix view of the widest built so far for this weight.

        One entry per weight and taps, not per width: a model run at many image sizes
        (symbolic width) builds the tiles once for the widest map, and a narrower run
        reads the first ``ow * C`` values of each row (the first run at a new width
        built 3.3 MB of tiles per layer before, half of that run's time).
        """
        if w.flags.writeable:
            return _tiles(w, taps, ow)
        key, c = (id(w), taps), w.shape[0]
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is w and entry[1].shape[2] >= ow * c:
                self._entries.move_to_end(key)
                return entry[1][:, :, : ow * c]
        tiles = _tiles(w, taps, ow)
        if tiles.nbytes <= self.limit:
            with self._lock:
                old = self._entries.pop(key, None)
                self._bytes += tiles.nbytes - (old[1].nbytes if old else 0)
                self._entries[key] = (weakref.ref(w, lambda _, key=key: self._discard(key)), tiles)
                while self._bytes > self.limit:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self._bytes -= dropped.nbytes
        return tiles

    def _discard(self, key: tuple) -> None:
        """Drop the entry of a weight array that was freed (an input, or a view made during a run)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._bytes -= entry[1].nbytes


#: Tap weights kept across runs, process-wide (EfficientNet-B0's: 9 MB).
TAP_TILES = _TileCache(32 << 20)


def _channels_last(x: np.ndarray) -> bool:
    """Whether an (N, C, H, W) array is the transposed view of a contiguous (N, H, W, C) one.

    ConvNeXt's exporter permutes to channels-last for its norms and linear layers and
    back for the depthwise convolution; the residual add writes in place into the
    permuted buffer, so 14 of its 18 depthwise inputs arrive this way. Returning the
    result in the same layout saves the transpose back to NCHW here and the copy the
    next permute + layer norm would make.
    """
    return not x.flags.c_contiguous and x.transpose(0, 2, 3, 1).flags.c_contiguous


def _depthwise_taps(x, w, b, strides, pads, dilations, out_shape) -> np.ndarray:
    """Depthwise 2-d convolution as one einsum over every kernel tap, channels-last.

    ``einsum("nijrx,ijx->nrx")`` multiplies and sums all taps in one C loop over
    contiguous output rows; a numpy loop over taps (a multiply and an add each)
    streams the map twice per tap. On MobileNetV3's and EfficientNet's 14x14 and 7x7
    maps this is 1.4 to 2.7x faster than that loop, and 1.3 to 2.2x faster than
    im2col on ConvNeXt's 7x7 kernels; on large maps with 3x3 kernels and few
    channels im2col stays faster (the layout transposes cost more), hence
    ``_taps_depthwise``. Strided convolutions read column phases (``_column_phases``).
    The result is NCHW, or the NCHW view of a channels-last array when the input is one.
    """
    n, c = x.shape[:2]
    kh, kw = w.shape[2:]
    oh, ow = out_shape
    groups = _tap_groups(x, w, strides, pads, dilations, ow)
    y = np.empty((n, oh, ow * c), x.dtype)

    def rows(start: int, stop: int) -> None:
        out = y[:, start:stop]
        for i, (windows, tiles) in enumerate(groups):
            part = np.einsum("nijrx,ijx->nrx", windows[:, :, :, start:stop], tiles, out=out if i == 0 else None)
            if i:
                out += part

    if n * oh * ow * c * kh * kw >= TAPS_DEPTHWISE_PARALLEL_MACS:
        step = max(1, TAPS_DEPTHWISE_BLOCK_BYTES // (n * ow * c * x.itemsize))
        gemm.run_blocks([lambda start=start: rows(start, min(oh, start + step)) for start in range(0, oh, step)])
    else:
        rows(0, oh)
    if _channels_last(x):  # keep the input's layout, as numpy's elementwise results do
        channels_last = y.reshape(n, oh, ow, c)
        if b is not None:
            channels_last += b
        return channels_last.transpose(0, 3, 1, 2)
    channels_first = y.reshape(n, oh, ow, c).transpose(0, 3, 1, 2)
    out = np.empty((n, c, oh, ow), x.dtype)
    if b is None:
        np.copyto(out, channels_first)
    else:
        np.add(channels_first, b.reshape(c, 1, 1), out=out)
    return out


#: Depthwise im2col is built for blocks of channels of about this size, one block per task.
DEPTHWISE_BLOCK_BYTES = 2 << 20


def _depthwise_blocks(x, w, kernel_shape, strides, dilations, pixels: int) -> np.ndarray:
    """Depthwise convolution (padded input) as im2col + per-channel products, a block of channels at a time.

    Each block's im2col (ConvNeXt's 7x7 on 96 x 56 x 56: 59 MB whole) stays in cache
    for the product that reads it, and the blocks run on gemm.py's threads: 17 -> 5.5 ms
    on that layer, 2.8 -> 1.8 ms on EfficientNet's 5x5 on 240 x 28 x 28.
    """
    n, c = x.shape[:2]
    taps = math.prod(kernel_shape)
    y = np.empty((n, c, 1, pixels), x.dtype)
    per_channel = max(1, taps * pixels * x.itemsize)
    step = max(1, DEPTHWISE_BLOCK_BYTES // per_channel)
    weights = w.reshape(c, 1, taps)

    def block(start: int) -> None:
        stop = min(c, start + step)
        windows = window_view(x[:, start:stop], kernel_shape, strides, dilations)
        cols = windows.reshape(n, stop - start, taps, pixels)
        np.matmul(weights[start:stop], cols, out=y[:, start:stop])

    gemm.run_blocks([lambda start=start: block(start) for start in range(0, c, step)])
    return y


#: With a batch, convolutions whose output maps are at most this many pixels fold the
#: batch into one GEMM (1x1 kernels only from a tenth of it: their GEMM has no copy to save).
BATCH_FOLD_PIXELS = 784
BATCH_FOLD_POINTWISE_PIXELS = 49
#: ... and only while the batch's im2col matrix stays below this size.
BATCH_FOLD_BYTES = 48 << 20


def _fold_batch(x, w, b, kernel_shape, strides, dilations, out_shape) -> np.ndarray:
    """One GEMM over the whole batch: ``W[O, K] @ cols[K, N * pixels]``.

    Per image, a small output map makes a skinny GEMM (7x7 maps: 49 columns) that
    BLAS runs well below its peak. Writing the im2col matrix with the batch inside
    the columns costs the same copy, and the transpose back to NCHW is folded into
    the bias add. On ResNet-50 at batch 8 the 3x3 convolutions on 28x28 and smaller
    maps are 9 to 18% faster and the 1x1 ones on 7x7 maps 7 to 15%; on larger maps
    one GEMM per image is as fast and the transposes cost more.
    """
    n = x.shape[0]
    o, k = w.shape[0], w.size // w.shape[0]
    pixels = math.prod(out_shape)
    windows = window_view(x, kernel_shape, strides, dilations)  # (n, c, *kernel, *out)
    nd = len(kernel_shape)
    cols = np.empty(windows.shape[1 : 2 + nd] + (n,) + tuple(out_shape), x.dtype)
    np.copyto(cols, np.moveaxis(windows, 0, 1 + nd))
    wide = gemm.matmul(w.reshape(o, k), cols.reshape(k, n * pixels)).reshape(o, n, pixels)
    y = np.empty((n, o, pixels), x.dtype)
    if b is None:
        np.copyto(y, wide.transpose(1, 0, 2))
    else:
        np.add(wide.transpose(1, 0, 2), b.reshape(o, 1), out=y)
    return y.reshape((n, o) + tuple(out_shape))


#: Stride-1 2-d convolutions with at most this many outputs take one GEMM per kernel tap.
SHIFTED_GEMM_MAX_OUTPUTS = 32


def _shifted_gemms(x, w, b, pads, dilations) -> np.ndarray:
    """Stride-1 2-d convolution as one GEMM per kernel tap on the padded input, no im2col.

    With the input padded and flattened per channel, tap (i, j) reads one contiguous
    run per channel starting at ``i * dh * Wp + j * dw``, so each GEMM takes a view of
    the input as its operand. The outputs are computed at the padded width ``Wp`` and
    the extra columns (windows wrapping into the next row) are dropped at the end.
    With few output channels the im2col copy costs more than the GEMM it feeds:
    DenseNet's 128 -> 32 3x3 convolutions are 6 to 38% faster this way, while at 64
    or more outputs the nine small GEMMs lose to one large one.
    """
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    width = wd + pads[1] + pads[3]
    oh = output_extent(h + pads[0] + pads[2], kh, 1, dilations[0])
    ow = output_extent(width, kw, 1, dilations[1])
    spill_rows = -(-((kw - 1) * dilations[1]) // width)  # the last tap's run may end past the last row
    flat = pad_spatial(x, [pads[0], pads[1], pads[2] + spill_rows, pads[3]]).reshape(n, c, -1)
    length = oh * width
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1))  # (kh, kw, O, C)
    wide = np.empty((n, o, length), x.dtype)
    product = np.empty_like(wide)
    for t, (i, j) in enumerate(np.ndindex(kh, kw)):
        start = i * dilations[0] * width + j * dilations[1]
        np.matmul(taps[i, j], flat[:, :, start : start + length], out=wide if t == 0 else product)
        if t:
            wide += product
    columns = wide.reshape(n, o, oh, width)[..., :ow]
    if b is None:
        return np.ascontiguousarray(columns)
    return np.add(columns, b.reshape(o, 1, 1), out=np.empty((n, o, oh, ow), x.dtype))


def _grouped_gemm(w: np.ndarray, cols: np.ndarray, groups: int) -> np.ndarray:
    """``W[g] @ cols[n, g]`` for every image and group; one group goes through gemm.py's threads."""
    o = w.shape[0]
    if groups == 1:
        return gemm.matmul(w.reshape(o, -1), cols.reshape(cols.shape[0], cols.shape[2], cols.shape[3]))
    return np.matmul(w.reshape(groups, o // groups, -1), cols)


def _pointwise(x, w, strides, groups: int) -> np.ndarray:
    """1x1 convolution (padded input): grouped or not, the input already is the GEMM operand, no copy."""
    if any(s != 1 for s in strides):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    n, c = x.shape[:2]
    return _grouped_gemm(w, x.reshape(n, groups, c // groups, -1), groups)


def _im2col(x, w, kernel_shape, strides, dilations, groups: int, pixels: int) -> np.ndarray:
    """im2col (padded input) through a window view, one copy, then a matmul batched over groups."""
    n, c = x.shape[:2]
    k = (c // groups) * math.prod(kernel_shape)
    check_allocation([n, groups * k, pixels], x.dtype, "conv im2col")
    windows = window_view(x, kernel_shape, strides, dilations)
    return _grouped_gemm(w, windows.reshape(n, groups, k, pixels), groups)


def _check_operands(op: str, x, w, b, groups: int, channels_per_group: int, outputs: int) -> None:
    """Ranks, channel counts and bias of a (transposed) convolution, before anything is read."""
    if w.ndim < 3 or x.ndim != w.ndim:
        raise ValueError(f"{op}: input {list(x.shape)} and weight {list(w.shape)} must both be (N, C, *spatial)")
    if groups < 1 or x.shape[1] != channels_per_group * groups or outputs % groups:
        raise ValueError(
            f"{op}: input has {x.shape[1]} channels, weight {list(w.shape)} and {groups} groups do not fit it"
        )
    if b is not None and b.shape != (outputs,):
        raise ValueError(f"{op}: bias must have shape [{outputs}], got {list(b.shape)}")


def _conv_geometry(x, w, b, strides, pads, dilations, groups) -> tuple[list[int], tuple[int, ...]]:
    """The padded input's and the output's spatial shapes, after checking the operands and attributes."""
    _check_operands("conv", x, w, b, groups, w.shape[1] if w.ndim > 1 else 0, w.shape[0])
    kernel_shape = w.shape[2:]
    nd = len(kernel_shape)
    spatial_geometry("conv", x.shape[2:], kernel_shape, strides, pads, dilations)
    padded = [x.shape[2 + i] + pads[i] + pads[i + nd] for i in range(nd)]
    out_shape = tuple(output_extent(padded[i], kernel_shape[i], strides[i], dilations[i]) for i in range(nd))
    return padded, out_shape


def _conv_cost(x, w, b=None, *, strides, pads, dilations, groups) -> int:
    """Bounds every lowering: the padded input, three output-sized buffers (the shifted GEMMs' product
    and sum and the result, which that path computes over the padded extent), and the im2col columns
    (the largest scratch of the im2col, batch-folded, blocked and depthwise-tap paths).

    Only the shifted GEMMs compute at the padded extent: charging it to every convolution refused a
    strided one whose output is far smaller than its input (silero VAD's STFT, stride 128: 5 GB
    charged for 10 MB used, so audio over 100 s could not run)."""
    padded, out_shape = _conv_geometry(x, w, b, strides, pads, dilations, groups)
    n, c = x.shape[:2]
    o = w.shape[0]
    itemsize = x.dtype.itemsize
    k = (c // groups) * math.prod(w.shape[2:])
    columns = n * groups * k * math.prod(out_shape) * itemsize
    if groups == 1 and columns > BLOCKED_IM2COL_BYTES:  # built a block of output rows at a time
        columns = max(IM2COL_BLOCK_BYTES, k * math.prod(out_shape[1:]) * itemsize)
    shifted = _takes_shifted_gemms(groups, o, tuple(w.shape[2:]), strides)
    extent = max(math.prod(padded), math.prod(out_shape)) if shifted else math.prod(out_shape)
    elements = n * c * math.prod(padded) + 3 * n * o * extent
    return elements * itemsize + columns


def _takes_shifted_gemms(groups: int, outputs: int, kernel_shape: tuple[int, ...], strides) -> bool:
    """Whether ``conv`` lowers to one GEMM per kernel tap (``_shifted_gemms``): stride 1, 2-d, few outputs."""
    return (
        groups == 1
        and len(kernel_shape) == 2
        and outputs <= SHIFTED_GEMM_MAX_OUTPUTS
        and kernel_shape != (1, 1)
        and all(s == 1 for s in strides)
    )


def _conv_transpose_cost(x, w, b=None, *, strides, pads, dilations, output_padding, groups) -> int:
    """The GEMM's columns (one per kernel tap and input pixel), the full output, its crop copied, the bias sum."""
    if x.ndim < 3 or w.ndim != x.ndim or len(strides) != w.ndim - 2 or len(output_padding) != w.ndim - 2:
        return 0  # refused by the kernel before it allocates
    nd = w.ndim - 2
    full = [strides[i] * (x.shape[2 + i] - 1) + dilations[i] * (w.shape[2 + i] - 1) + 1 + output_padding[i]
            for i in range(nd)]  # fmt: skip
    n, o = x.shape[0], w.shape[1] * max(groups, 1)
    columns = n * w.shape[1] * math.prod(w.shape[2:]) * math.prod(x.shape[2:]) * max(groups, 1)
    wide = promoted(x, w).itemsize
    return (columns + 3 * n * o * math.prod(max(d, 0) for d in full)) * wide + w.nbytes + x.nbytes


@kernel("conv1d", "conv2d", "conv3d", check=check_conv_attrs, cost=_conv_cost)
def conv(x, w, b=None, *, strides, pads, dilations, groups):
    padded, out_shape = _conv_geometry(x, w, b, strides, pads, dilations, groups)
    n, c = x.shape[:2]
    o = w.shape[0]
    kernel_shape = w.shape[2:]
    nd = len(kernel_shape)
    check_allocation([n, c, *padded], x.dtype, "conv input padding")
    check_allocation([n, o, *out_shape], x.dtype, "conv output")
    if n == 0:  # an empty batch: the lowerings below reshape with -1, which a size-0 array cannot resolve
        return np.zeros((0, o, *out_shape), x.dtype)
    if groups == c == o and nd == 2 and _taps_depthwise(out_shape, kernel_shape):
        return _depthwise_taps(x, w, b, strides, pads, dilations, out_shape)
    if _takes_shifted_gemms(groups, o, tuple(kernel_shape), strides):
        return _shifted_gemms(x, w, b, pads, dilations)
    x = pad_spatial(x, pads)
    k = (c // groups) * math.prod(kernel_shape)
    pointwise = all(size == 1 for size in kernel_shape)
    pixels = math.prod(out_shape)
    if (
        groups == 1
        and n > 1
        and pixels <= (BATCH_FOLD_POINTWISE_PIXELS if pointwise else BATCH_FOLD_PIXELS)
        and n * k * pixels * x.itemsize <= BATCH_FOLD_BYTES
    ):
        return _fold_batch(x, w, b, kernel_shape, strides, dilations, out_shape)
    if pointwise:
        y = _pointwise(x, w, strides, groups)
    elif groups == c == o:
        y = _depthwise_blocks(x, w, kernel_shape, strides, dilations, pixels)
    elif groups == 1 and n * k * pixels * x.itemsize > BLOCKED_IM2COL_BYTES:
        y = _blocked_im2col(x, w.reshape(o, k), kernel_shape, strides, dilations, out_shape)
    else:
        y = _im2col(x, w, kernel_shape, strides, dilations, groups, pixels)
    y = y.reshape((n, o) + out_shape)
    if b is not None:
        y += b.reshape((o,) + (1,) * nd)
    return y


@kernel(
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    check=check_conv_transpose_attrs,
    cost=_conv_transpose_cost,
)
def conv_transpose(x, w, b=None, *, strides, pads, dilations, output_padding, groups):
    """Transposed convolution as GEMM then col2im: scatter-add one strided view per kernel tap."""
    _check_operands("conv_transpose", x, w, b, groups, w.shape[0] // max(groups, 1), w.shape[1] * groups)
    n, c = x.shape[:2]
    og = w.shape[1]
    o = og * groups
    kernel_shape = w.shape[2:]
    nd = len(kernel_shape)
    in_shape = x.shape[2:]
    if w.shape[0] != c or len(strides) != nd or len(pads) != 2 * nd or len(output_padding) != nd:
        raise ValueError(f"conv_transpose: weight {list(w.shape)} and attributes do not fit input {list(x.shape)}")
    full = tuple(
        strides[i] * (in_shape[i] - 1) + dilations[i] * (kernel_shape[i] - 1) + 1 + output_padding[i] for i in range(nd)
    )
    if any(pads[i] + pads[i + nd] >= full[i] for i in range(nd)):
        raise ValueError(f"conv_transpose: pads {list(pads)} crop the whole output {list(full)}")
    check_allocation([n, o, *full], x.dtype, "conv_transpose output")
    if n == 0:  # an empty batch (see conv)
        return np.zeros((0, o, *(full[i] - pads[i] - pads[i + nd] for i in range(nd))), promoted(x, w))
    check_allocation([n, groups, og * math.prod(kernel_shape), math.prod(in_shape)], x.dtype, "conv_transpose columns")
    cg = c // groups
    taps = math.prod(kernel_shape)
    # w: (C, O/g, *k) -> per group (O/g * taps, C/g), so cols = w_g^T @ x_g.
    wg = w.reshape(groups, cg, og * taps).transpose(0, 2, 1)
    cols = np.matmul(wg, x.reshape(n, groups, cg, -1))  # (n, g, og*taps, L)
    cols = cols.reshape((n, groups, og) + tuple(kernel_shape) + tuple(in_shape))
    y = np.zeros((n, groups, og) + full, dtype=cols.dtype)
    for tap in np.ndindex(*kernel_shape):
        index = [slice(None)] * 3
        for i in range(nd):
            start = tap[i] * dilations[i]
            index.append(slice(start, start + strides[i] * (in_shape[i] - 1) + 1, strides[i]))
        y[tuple(index)] += cols[(slice(None),) * 3 + tap]
    y = y.reshape((n, o) + full)
    crop = tuple(slice(pads[i], full[i] - pads[i + nd]) for i in range(nd))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((o,) + (1,) * nd)
    return np.ascontiguousarray(y)
