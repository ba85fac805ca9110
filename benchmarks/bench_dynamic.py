"""Shapes known only at run time: what a bundle with symbolic dims costs against one built for each size.

    python benchmarks/bench_dynamic.py                    # writes benchmarks/results/dynamic/<cpu kind>.json
    python benchmarks/bench_dynamic.py --rounds 9 --no-write

The real PaddleOCR files of the rapidocr-onnxruntime wheel (symbolic height, width and
batch, written by paddle2onnx): the detector on text pages, the recognizer and the
orientation classifier on text lines (tests/ocr_data.py renders both). For each model,
target (host plan, ``--target onnxruntime``) and size, one process:

* ``steady``: the bundle built once without ``--input``, run at that size after it has
  seen it, over a bundle built for that size alone (``--input x:...``), runs alternating,
  each timed run after 0.2 s of its own side; the median of the rounds. Issue 39: <= 1.1x.
* ``first``: the first run of the symbolic bundle at a size it has not seen (another size
  ran before it), over the median repeat at that size. Issue 39: <= 2x. Beside it the same
  ratio for onnxruntime on the original file, which pays its own first run at a new shape.
"""

from __future__ import annotations

import argparse
import sys

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_int8_onnxruntime import onnxruntime_session, timed_rounds  # noqa: E402
from report import command_line, machine, publish_figures  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from tests.ocr_data import model_path, text_lines, text_page  # noqa: E402

#: Sizes per model: a warm-up size first, then the sizes measured (not multiples of 8 where the network allows).
SIZES = {
    "det": [(1, 3, 96, 160), (1, 3, 320, 320), (1, 3, 224, 640)],
    "rec": [(1, 3, 48, 192), (1, 3, 48, 77), (1, 3, 48, 320)],
    "cls": [(1, 3, 48, 192), (1, 3, 48, 100), (1, 3, 48, 250)],
}
LOAD_OPTIONS = {"onnxruntime": {"onnxruntime": {"threads": THREADS}}}


def _input(kind: str, shape: tuple[int, ...]):
    return text_page(shape[2], shape[3]) if kind == "det" else text_lines(1, seed=7, width=shape[3])[0][1]


def _load(path: str, target: str, shape=None):
    shapes = None if shape is None else {"x": shape}
    targets = [] if target == "host" else [target]
    result = aot.build(path, targets=targets, input_shapes=shapes, log=None)
    return runtime_lite.load(result.to_bytes(), backend_options=LOAD_OPTIONS.get(target))


def measure(kind: str, target: str, rounds: int) -> list[list]:
    path = str(model_path(kind))
    symbolic = _load(path, target)
    peer = onnxruntime_session(path)
    warm, *sizes = SIZES[kind]
    symbolic.run({"x": _input(kind, warm)})
    peer.run(None, {"x": _input(kind, warm)})
    rows = []
    for shape in sizes:
        x = _input(kind, shape)
        start = time.perf_counter()
        symbolic.run({"x": x})
        first = time.perf_counter() - start
        start = time.perf_counter()
        peer.run(None, {"x": x})
        peer_first = time.perf_counter() - start
        pinned = _load(path, target, shape)
        feed = {"x": x}
        times = timed_rounds({"symbolic": lambda m=symbolic, f=feed: m.run(f), "pinned": lambda m=pinned, f=feed: m.run(f),
                              "onnxruntime": lambda f=feed: peer.run(None, f)}, rounds)  # fmt: skip
        size = "x".join(map(str, shape[2:]))
        rows.append([f"{kind} {size} {target}", times["pinned"] * 1e3, times["symbolic"] / times["pinned"],
                     first / times["symbolic"], peer_first / times["onnxruntime"]])  # fmt: skip
        print(f"{rows[-1][0]:28s} pinned {rows[-1][1]:8.2f} ms  steady {rows[-1][2]:.2f}x  first {rows[-1][3]:.2f}x"
              f"  onnxruntime's first {rows[-1][4]:.2f}x", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--targets", nargs="+", default=["host", "onnxruntime"], choices=["host", "onnxruntime"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    print(machine(THREADS), flush=True)
    rows = [row for kind in args.models for target in args.targets for row in measure(kind, target, args.rounds)]
    publish_figures(
        "dynamic",
        [
            "built for the size (ms)",
            "symbolic / built for the size",
            "first run at a new size / repeat",
            "onnxruntime's first / repeat",
        ],  # fmt: skip
        rows,
        command_line("bench_dynamic.py"),
        "Targets (issue 39): steady <= 1.1x, first <= 2x.",
        no_write=args.no_write,
    )


if __name__ == "__main__":
    main()
