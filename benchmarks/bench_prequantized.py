"""Models quantized before aot (onnxruntime's ``quantize_static``): the bundle against onnxruntime on the same file.

    python benchmarks/bench_prequantized.py                    # writes benchmarks/results/prequantized/<cpu kind>.json
    python benchmarks/bench_prequantized.py --models squeezenet1_1 --rounds 9 --no-write

A user who already has an int8 ONNX file (QDQ or QOperator, int8 or uint8 activations) builds
it with ``aot-build --target onnxruntime`` and no ``--precision``: the bundle must keep its int8
(docs/quantization.md, "Models quantized before aot"). Each model (random weights, exported
once by benchmarks/modern_models.py) is quantized per channel on 4 random samples in each
format; then, 2 threads each (``BENCH_THREADS``), batch 1, each timed run after 0.2 s of its own
side (``timed_rounds``), medians over the rounds:

* size / file: the bundle's size over the quantized file's;
* time / onnxruntime on the file: the ``--target onnxruntime`` bundle's latency over onnxruntime's on
  the quantized file (printed beside it: its host plan's, ``onnxruntime.enabled=false``, and the regions);
* rel L2: the bundle's output against onnxruntime's on the file.
"""

from __future__ import annotations

import argparse
import sys

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_int8_onnxruntime import onnxruntime_session, timed_rounds  # noqa: E402
from modern_models import onnx_path  # noqa: E402
from report import command_line, machine, publish_figures  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402

MODELS = ("squeezenet1_1", "resnet50")
FORMATS = ("QDQ", "QOperator", "QDQ uint8")


def quantized(model: str, fmt: str, folder: Path) -> Path:
    """``model`` through ``quantize_static`` in ``fmt`` (per channel, int8 weights), on 4 random samples."""
    import logging

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process, at every call
    source = onnx_path(model)
    name = onnxruntime_session(str(source)).get_inputs()[0].name

    class Samples(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.feeds = iter([{name: rng.random((1, 3, 224, 224), np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    out = folder / f"{model}-{fmt.replace(' ', '-')}.onnx"
    activations = QuantType.QUInt8 if "uint8" in fmt else QuantType.QInt8
    quant_format = QuantFormat.QOperator if fmt == "QOperator" else QuantFormat.QDQ
    quantize_static(str(source), str(out), Samples(), quant_format=quant_format, per_channel=True,
                    activation_type=activations, weight_type=QuantType.QInt8)  # fmt: skip
    return out


def measure(model: str, fmt: str, rounds: int, folder: Path) -> list:
    path = quantized(model, fmt, folder)
    bundle = aot.build(str(path), targets=["onnxruntime"], log=None).to_bytes()
    module = runtime_lite.load(bundle, backend_options={"onnxruntime": {"threads": THREADS}})
    host = runtime_lite.load(bundle, backend_options={"onnxruntime": {"enabled": False}})
    peer = onnxruntime_session(str(path))
    name = peer.get_inputs()[0].name
    x = np.random.default_rng(1).random((1, 3, 224, 224), np.float32)
    (expected,) = peer.run(None, {name: x})
    ours = module.run([x])[0]
    relative = float(np.linalg.norm(ours - expected) / np.linalg.norm(expected))
    times = timed_rounds({"bundle": lambda: module.run([x]), "host": lambda: host.run([x]),
                          "onnxruntime": lambda: peer.run(None, {name: x})}, rounds)  # fmt: skip
    print(f"{model} {fmt:10s} size {len(bundle) / path.stat().st_size:.2f}x  regions {len(module.placement)}  "
          f"bundle {times['bundle'] / times['onnxruntime']:.2f}x  host plan {times['host'] / times['onnxruntime']:.2f}x"
          f"  rel L2 {relative:.1e}  (onnxruntime {times['onnxruntime'] * 1e3:.1f} ms)", flush=True)  # fmt: skip
    return [f"{model} {fmt}", len(bundle) / path.stat().st_size, times["bundle"] / times["onnxruntime"],
            f"{relative:.1e}"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    print(machine(THREADS), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(m, fmt, args.rounds, Path(folder)) for m in args.models for fmt in FORMATS]
    publish_figures(
        "prequantized",
        ["size / file", "time / onnxruntime on the file", "rel L2"],
        rows,
        command_line("bench_prequantized.py"),
        'docs/quantization.md, "Models quantized before aot".',
        no_write=args.no_write,
    )


if __name__ == "__main__":
    main()
