"""int8 on onnxruntime's CPU provider: the int8 bundle against onnxruntime fp32 and onnxruntime's own int8 model.

    python benchmarks/bench_int8_onnxruntime.py                   # ResNet-50 (the onnx wheel's zoo, random weights)
    python benchmarks/bench_int8_onnxruntime.py --rounds 40 --samples 16
    python benchmarks/bench_int8_onnxruntime.py --model bert_base   # BERT-base encoder, sequence 128, random weights
    python benchmarks/bench_int8_onnxruntime.py --model bert_base --schemes static weight-only

Side by side in one process, 2 threads each (``BENCH_THREADS``), batch 1, each timed run
after 0.2 s of untimed runs of its own side (``bench_host.alternate_times``), medians over
the rounds:

* the ``--target onnxruntime --precision int8`` bundle (its kernels chosen by this CPU) and
  onnxruntime's own int8 model (ResNet-50: ``quantize_static`` QDQ, per channel, the same
  calibration samples; BERT: ``quantize_dynamic``, as onnxruntime advises for transformers, per
  tensor as it defaults to and per channel as the bundle's weights are), each against onnxruntime
  fp32 on the original file; ``--schemes`` adds int8 bundles built with other
  ``onnxruntime.int8_scheme`` values (the default bundle is ``auto``: dynamic matmuls for BERT);
* the int8 bundle forced onto float kernels (``onnxruntime.int8=float``, the path a CPU
  without VNNI takes) and its exact emulation (``emulated``) against the float
  ``--target onnxruntime`` bundle;
* where OpenVINO is installed (``--no-openvino`` skips it): the same int8 recipe built for
  ``--target openvino`` (OpenVINO's int8 kernels, as this CPU chooses them) and for ``--target auto``
  (each engine timed at load, the faster kept; ``cache=false``), the float ``--target openvino``
  bundle, and OpenVINO fp32 on the original file; where this CPU (or oneDNN's ISA limit) makes
  OpenVINO choose float kernels, also its int8 kernels forced, to show what that choice avoids.
  ``ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/bench_int8_onnxruntime.py`` runs OpenVINO's rows on
  the kernels of a CPU without VNNI (onnxruntime's MLAS ignores the variable).

The CPU, its vector extension and whether it has VNNI are printed with the figures: they
decide the verdict. Nothing is written to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import statistics  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.version_converter  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_host import settle  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import load_zoo_model  # noqa: E402
from runtime_lite.backends.onnxruntime.int8 import kernels_here  # noqa: E402
from runtime_lite.backends.openvino import int8 as openvino_int8  # noqa: E402
from runtime_lite.tools import machine  # noqa: E402


def timed_rounds(sides: dict, rounds: int) -> dict[str, float]:
    """Median seconds of each side over ``rounds`` rounds, each timed call after ``settle`` on its own side."""
    import time

    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, call in sides.items():
            settle(call)
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def onnxruntime_session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def ort_quantize_static(path: str, samples: list[dict], out: str) -> None:
    """onnxruntime's own int8 model: pre-processed, QDQ, per-channel int8 weights, MinMax over the same samples."""
    import logging

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process, once per weight

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(samples)

        def get_next(self):
            return next(self.items, None)

    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = out + ".pre.onnx"  # what onnxruntime asks for first: shapes inferred, batch norms folded
    quant_pre_process(path, prepared)
    quantize_static(prepared, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True)


def resnet50(work: Path, rng: np.random.Generator, n: int) -> tuple[onnx.ModelProto, list[dict], str, str]:
    """(the model, samples, the original file, onnxruntime's own int8 model)."""
    # opset 13: onnxruntime's quantizer writes per-channel DequantizeLinear (axis), which opset 9 lacks
    model = onnx.version_converter.convert_version(load_zoo_model("resnet50"), 13)
    name = model.graph.input[0].name
    samples = [{name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(n)]
    original, own = str(work / "resnet50.onnx"), str(work / "resnet50.qdq.onnx")
    onnx.save(model, original)
    ort_quantize_static(original, samples, own)
    return model, samples, original, own


def bert_base(work: Path, rng: np.random.Generator, n: int) -> tuple[onnx.ModelProto, list[dict], str, str]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.onnx_export import export_onnx
    from tests.torchvision_compat import import_torchvision

    import_torchvision()  # transformers imports torchvision when it is installed
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.BertConfig()  # bert-base: hidden 768, 12 layers, 12 heads, random weights
    net = transformers.BertModel(config, add_pooling_layer=False).eval()
    seq = 128
    example = {
        "input_ids": torch.ones(1, seq, dtype=torch.int64),
        "attention_mask": torch.ones(1, seq, dtype=torch.int64),
    }
    original, own = str(work / "bert.onnx"), str(work / "bert.int8.onnx")
    export_onnx(net, example, None, original)
    model = onnx.load(original)
    names = [i.name for i in model.graph.input]
    samples = [dict(zip(names, (rng.integers(1, config.vocab_size, (1, seq)), np.ones((1, seq), np.int64))))
               for _ in range(n)]  # fmt: skip
    quantize_dynamic(original, own, weight_type=QuantType.QInt8)
    quantize_dynamic(original, str(work / "bert.int8pc.onnx"), weight_type=QuantType.QInt8, per_channel=True)
    return model, samples, original, own


PER_CHANNEL = "onnxruntime's own int8, per channel"


def _run(runner, feeds: dict) -> np.ndarray:
    """The first output of a runtime_lite module or an onnxruntime session."""
    if isinstance(runner, ort.InferenceSession):
        return runner.run(None, feeds)[0]
    return runner.run(feeds)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet50", "bert_base"), default="resnet50")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--samples", type=int, default=8, help="calibration samples (random inputs)")
    parser.add_argument("--schemes", nargs="*", default=[], choices=("static", "dynamic", "weight-only"),
                        help="also time int8 bundles built with these onnxruntime.int8_scheme values")  # fmt: skip
    parser.add_argument("--no-openvino", action="store_true", help="leave out the OpenVINO and auto bundles")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="bench-int8-"))
    model, samples, original, ort_qdq = globals()[args.model](work, rng, args.samples)
    feeds = samples[0]

    quantized = aot.build(model, targets=["onnxruntime"], log=None,
                          quantize=aot.QuantizeConfig(samples, holdout=0.0, report=False)).to_bytes()  # fmt: skip
    plain = aot.build(model, targets=["onnxruntime"], log=None).to_bytes()
    options = {"threads": THREADS}
    int8_auto = runtime_lite.load(quantized, backend_options={"onnxruntime": {**options, "int8": "auto"}})
    int8_float = runtime_lite.load(quantized, backend_options={"onnxruntime": {**options, "int8": "float"}})
    emulated = runtime_lite.load(quantized, backend_options={"onnxruntime": {**options, "int8": "emulated"}})
    float_bundle = runtime_lite.load(plain, backend_options={"onnxruntime": options})
    fp32, qdq = onnxruntime_session(original), onnxruntime_session(ort_qdq)
    per_channel = Path(ort_qdq).with_name(Path(ort_qdq).stem + "pc.onnx")
    others = {PER_CHANNEL: onnxruntime_session(str(per_channel))} if per_channel.exists() else {}
    for scheme in args.schemes:
        built = aot.build(model, targets=["onnxruntime"], log=None, backend_options={"onnxruntime": {"int8_scheme": scheme}},
                          quantize=aot.QuantizeConfig(samples, holdout=0.0, report=False)).to_bytes()  # fmt: skip
        print(f"bundle size, int8_scheme={scheme}: {len(built) / 1e6:.1f} MB ({len(built) / len(plain):.3f}x float)")
        others[f"int8 bundle ({scheme})"] = runtime_lite.load(built, backend_options={"onnxruntime": options})

    engines = {} if args.no_openvino else openvino_sides(model, samples, original, feeds)
    others.update(engines)

    print(machine.describe(f"onnxruntime {ort.__version__}"))
    print(f"this CPU's int8 kernels: {kernels_here('auto').describe()}")
    if engines:
        print(f"openvino's int8 kernels: {openvino_int8.kernels_here('auto').reason}")
    print(f"{THREADS} threads, batch 1, {args.rounds} rounds, each timed run after 0.2 s of its own side; the "
          "machine may be shared: ratios, not absolute times")  # fmt: skip
    print(f"bundle sizes: int8 {len(quantized) / 1e6:.1f} MB, float {len(plain) / 1e6:.1f} MB "
          f"({len(quantized) / len(plain):.3f}x)")  # fmt: skip
    for label, module in (("int8 bundle", int8_auto), ("int8 bundle, float kernels", int8_float),
                          ("int8 bundle, emulated", emulated), ("float bundle", float_bundle)):  # fmt: skip
        for placed in module.placement.values():
            print(f"  {label}: runs {placed['runs_on']}: {placed.get('detail')}")
    reference = fp32.run(None, feeds)[0].astype(np.float32)
    for label, out in (("int8 bundle", int8_auto.run(feeds)[0]), ("int8 bundle, float kernels",
                       int8_float.run(feeds)[0]), ("int8 bundle, emulated", emulated.run(feeds)[0]),
                       ("onnxruntime's own int8", qdq.run(None, feeds)[0]),
                       *((k, _run(m, feeds)) for k, m in others.items())):  # fmt: skip
        err = np.linalg.norm(out - reference) / np.linalg.norm(reference)
        top1 = "agrees" if out.argmax() == reference.argmax() else "differs"
        print(f"  {label}: relative L2 to fp32 {err:.4f}, top-1 {top1}")
    sides = {
        "onnxruntime fp32 (original file)": lambda: fp32.run(None, feeds),
        "onnxruntime's own int8": lambda: qdq.run(None, feeds),
        "int8 bundle (auto)": lambda: int8_auto.run(feeds),
        "int8 bundle (float kernels)": lambda: int8_float.run(feeds),
        "int8 bundle (emulated)": lambda: emulated.run(feeds),
        "float --target onnxruntime bundle": lambda: float_bundle.run(feeds),
        **{label: (lambda m=m: _run(m, feeds)) for label, m in others.items()},
    }
    for call in sides.values():
        call()
    medians = timed_rounds(sides, args.rounds)
    for label, seconds in medians.items():
        print(f"  {label:36s} {seconds * 1e3:7.2f} ms")
    base = medians["onnxruntime fp32 (original file)"]
    print(f"int8 bundle / onnxruntime fp32: {medians['int8 bundle (auto)'] / base:.2f}x")
    own = medians["onnxruntime's own int8"]
    print(f"onnxruntime's own int8 / onnxruntime fp32: {own / base:.2f}x")
    print(f"int8 bundle / onnxruntime's own int8: {medians['int8 bundle (auto)'] / own:.2f}x")
    if PER_CHANNEL in medians:
        print(f"int8 bundle / {PER_CHANNEL}: {medians['int8 bundle (auto)'] / medians[PER_CHANNEL]:.2f}x")
    for label in others:
        print(f"{label} / onnxruntime fp32: {medians[label] / base:.2f}x; / onnxruntime's own int8: "
              f"{medians[label] / own:.2f}x")  # fmt: skip
    for kernels in ("float kernels", "emulated"):
        ratio = medians[f"int8 bundle ({kernels})"] / medians["float --target onnxruntime bundle"]
        print(f"int8 bundle ({kernels}) / float bundle: {ratio:.2f}x")
    if AUTO_INT8 in medians:
        faster = min(medians["int8 bundle (auto)"], medians[OPENVINO_INT8])
        print(f"{AUTO_INT8} / the faster int8 bundle (onnxruntime or openvino): {medians[AUTO_INT8] / faster:.2f}x")
        for label, module in engines.items():
            if hasattr(module, "placement"):
                print(f"  {label}: {next(iter(module.placement.values()))['detail']}")
    if OPENVINO_FLOAT in medians:
        for label in (OPENVINO_INT8, OPENVINO_FORCED):
            if label in medians:
                print(f"{label} / {OPENVINO_FLOAT}: {medians[label] / medians[OPENVINO_FLOAT]:.2f}x")


OPENVINO_INT8, AUTO_INT8 = "int8 bundle, --target openvino", "int8 bundle, --target auto"
OPENVINO_FLOAT, OPENVINO_FORCED = "float --target openvino bundle", "int8 bundle, openvino, int8 kernels forced"


def openvino_sides(model: onnx.ModelProto, samples: list[dict], original: str, feeds: dict) -> dict:
    """The int8 recipe on OpenVINO and on auto, and OpenVINO fp32 on the original file (none without openvino)."""
    try:
        import openvino as ov
    except ImportError:
        print("openvino is not installed: no OpenVINO or auto rows")
        return {}
    config = aot.QuantizeConfig(samples, holdout=0.0, report=False)
    options = {"openvino": {"threads": THREADS}, "auto": {"threads": THREADS, "cache": False}}
    sides = {}
    for target, label in (("openvino", OPENVINO_INT8), ("auto", AUTO_INT8)):
        built = aot.build(model, targets=[target], log=None, quantize=config).to_bytes()
        sides[label] = runtime_lite.load(built, backend_options={target: options[target]})
        if target == "openvino" and openvino_int8.kernels_here("auto").kernels == "float":
            forced = {"openvino": {**options["openvino"], "int8": "integer"}}
            sides[OPENVINO_FORCED] = runtime_lite.load(built, backend_options=forced)
    plain = aot.build(model, targets=["openvino"], log=None).to_bytes()
    sides[OPENVINO_FLOAT] = runtime_lite.load(plain, backend_options={"openvino": options["openvino"]})
    compiled = ov.Core().compile_model(original, "CPU", {"INFERENCE_NUM_THREADS": str(THREADS),
                                                         "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})  # fmt: skip
    request = compiled.create_infer_request()
    names = [port.get_any_name() for port in compiled.inputs]

    class OnFile:  # OpenVINO fp32 on the original file, as a runner ``_run`` reads
        def run(self, given: dict) -> list:
            request.infer([given[n] for n in names])
            return [request.get_output_tensor(0).data.copy()]

    sides["openvino fp32 (original file)"] = OnFile()
    return sides


if __name__ == "__main__":
    main()
