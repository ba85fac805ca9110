"""Do the conv-lowering thresholds suit this CPU? Every lowering of each layer timed, against the one the kernel picks.

    python benchmarks/check_lowerings.py                       # writes BENCHMARKS.md's section
    OPENBLAS_NUM_THREADS=1 python benchmarks/check_lowerings.py --no-write
    NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" python benchmarks/check_lowerings.py --no-write

runtime_lite/kernels/conv.py picks a lowering from constants: a depthwise convolution runs
as one einsum over its kernel taps (``_depthwise_taps``) or as per-channel im2col products
(``_depthwise_blocks``) by ``TAPS_DEPTHWISE_PIXELS`` / ``TAPS_DEPTHWISE_MIN_TAPS``; a dense
one copies its im2col matrix whole, or a block of output rows at a time
(``_blocked_im2col``, ``IM2COL_BLOCK_BYTES``) above ``BLOCKED_IM2COL_BYTES``. Issue 27 asked
that such constants come from the machine. This script times every lowering of the depthwise
layers of MobileNetV2/V3, EfficientNet-B0 and ConvNeXt-tiny and of ResNet-50's 3x3 and 7x7
layers, alternating, best of ``--rounds``, and reports where the pick is slower than the
fastest lowering and by how much in total. Run it on a new CPU (or under numpy's AVX2 loops,
as above) before deriving a constant from it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, machine, publish  # noqa: E402

from runtime_lite.kernels import conv  # noqa: E402
from runtime_lite.kernels.measured import best_times  # noqa: E402

#: (channels, size, kernel, stride): the depthwise layers of MobileNetV3-small, EfficientNet-B0, ConvNeXt-tiny.
DEPTHWISE = [
    (16, 112, 3, 2), (72, 56, 3, 2), (88, 28, 3, 1), (96, 28, 5, 2), (240, 14, 5, 1), (120, 14, 5, 1),
    (144, 14, 5, 1), (288, 14, 5, 2), (576, 7, 5, 1), (32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1),
    (144, 56, 5, 2), (240, 28, 5, 1), (240, 28, 3, 2), (480, 14, 3, 1), (480, 14, 5, 1), (672, 14, 5, 1),
    (672, 14, 5, 2), (1152, 7, 5, 1), (1152, 7, 3, 1), (96, 56, 7, 1), (192, 28, 7, 1), (384, 14, 7, 1),
    (768, 7, 7, 1), (384, 28, 3, 1), (960, 7, 3, 1),
]  # fmt: skip
#: (in channels, out channels, size, kernel, stride): ResNet-50's 7x7 stem and 3x3 layers.
DENSE = [(3, 64, 224, 7, 2), (64, 64, 56, 3, 1), (128, 128, 56, 3, 2), (128, 128, 28, 3, 1), (256, 256, 28, 3, 2),
         (256, 256, 14, 3, 1), (512, 512, 14, 3, 2), (512, 512, 7, 3, 1)]  # fmt: skip
BLOCK_BYTES = (1 << 20, 4 << 20)


def depthwise_row(c: int, size: int, k: int, stride: int, rounds: int) -> tuple[str, dict, str]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, size, size), dtype=np.float32)
    w = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    w.flags.writeable = False  # as a bundle's weights are
    pads, out = (k // 2,) * 4, (size + 2 * (k // 2) - k) // stride + 1
    padded = conv.pad_spatial(x, pads)
    lowerings = {
        "taps": lambda: conv._depthwise_taps(x, w, None, (stride, stride), pads, (1, 1), (out, out)),
        "im2col": lambda: conv._depthwise_blocks(padded, w, (k, k), (stride, stride), (1, 1), out * out),
    }
    picked = "taps" if conv._taps_depthwise((out, out), (k, k)) else "im2col"
    return f"depthwise {c}x{size}x{size}, {k}x{k}/{stride}", best_times(lowerings, rounds), picked


def dense_row(c: int, o: int, size: int, k: int, stride: int, rounds: int) -> tuple[str, dict, str]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, size, size), dtype=np.float32)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32)
    pads, out = (k // 2,) * 4, (size + 2 * (k // 2) - k) // stride + 1
    padded = conv.pad_spatial(x, pads)
    lowerings = {"whole": lambda: conv._im2col(padded, w, (k, k), (stride, stride), (1, 1), 1, out * out)}
    for block in BLOCK_BYTES:

        def blocked(block: int = block) -> None:
            conv.IM2COL_BLOCK_BYTES = block
            conv._blocked_im2col(padded, w.reshape(o, -1), (k, k), (stride, stride), (1, 1), (out, out))

        lowerings[f"blocks of {block >> 20} MiB"] = blocked
    kept = conv.IM2COL_BLOCK_BYTES
    try:
        times = best_times(lowerings, rounds)
    finally:
        conv.IM2COL_BLOCK_BYTES = kept
    columns = c * k * k * out * out * x.itemsize
    picked = f"blocks of {kept >> 20} MiB" if columns > conv.BLOCKED_IM2COL_BYTES else "whole"
    return f"conv {c}->{o} {size}x{size}, {k}x{k}/{stride} (im2col {columns / 1e6:.1f} MB)", times, picked


def render(rows: list[tuple[str, dict, str]], command: str) -> str:
    lines = [
        "## Conv lowerings on this CPU (issue 27)",
        "",
        f"`{command}` on {machine()}. Each layer's lowerings timed alternately, best of the rounds, "
        "in microseconds; `picked` is what runtime_lite/kernels/conv.py's constants choose, `loss` its time "
        "over the fastest lowering's.",
        "",
        "| layer | lowerings (us) | picked | loss |",
        "|---|---|---|---:|",
    ]
    picked_total = best_total = 0.0
    for label, times, picked in rows:
        fastest = min(times.values())
        picked_total, best_total = picked_total + times[picked], best_total + fastest
        shown = ", ".join(f"{name} {t * 1e6:.0f}" for name, t in times.items())
        lines.append(f"| {label} | {shown} | {picked} | {times[picked] / fastest:.2f} |")
    lines += ["", f"All layers: the picks take {picked_total * 1e3:.2f} ms, the fastest lowerings "
              f"{best_total * 1e3:.2f} ms ({picked_total / best_total:.3f}x)."]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-write", action="store_true", help="print the report instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    print(machine(), flush=True)
    rows = [depthwise_row(*layer, args.rounds) for layer in DEPTHWISE]
    rows += [dense_row(*layer, args.rounds) for layer in DENSE]
    publish("lowerings", render(rows, command_line("check_lowerings.py")), args.no_write)


if __name__ == "__main__":
    main()
