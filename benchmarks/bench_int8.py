"""int8 at build time on full-size models with random weights: build times, agreement, bit-exactness.

    python benchmarks/bench_int8.py                       # ResNet-50, MobileNetV2, a BERT-base encoder
    python benchmarks/bench_int8.py --models resnet50 --samples 8 --no-write

Per model and target (npu, tensorrt with --no-engines): the float build's time, the int8
build's time (its stages: calibrate, build, accuracy), and the accuracy report of the int8
build against the float graph on held-back samples (relative L2, max abs, top-1 agreement;
random weights and random inputs, so this measures quantization noise, not task accuracy).
NPU: every integer kernel of one run checked element by element against the integer
reference (tests/int8_reference.py). TensorRT: every recipe run in onnxruntime against
its region's host plan (aot.compiler.backends.tensorrt.verify).
"""

from __future__ import annotations

import argparse
import sys

import bench_env  # noqa: F401  (before numpy: it sets the thread counts)

# isort: split

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_host import machine  # noqa: E402
from report import command_line, publish  # noqa: E402

import aot  # noqa: E402
from aot.compiler.backends.tensorrt.verify import verify_recipe  # noqa: E402
from aot.testing import load_zoo_model  # noqa: E402
from tests.int8_reference import replay_npu_int8  # noqa: E402

MODELS = ("resnet50", "mobilenet_v2", "bert_base")


def resnet50(rng, n):
    model = load_zoo_model("resnet50")  # the onnx wheel's light ResNet-50, random weights
    name = model.graph.input[0].name
    return model, [{name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(n)]


def mobilenet_v2(rng, n):
    import torch

    from tests.torchvision_compat import import_torchvision

    torch.manual_seed(0)
    net = import_torchvision().models.mobilenet_v2(weights=None).eval()
    program = torch.export.export(net, (torch.zeros(1, 3, 224, 224),))
    name = program.graph_signature.user_inputs[0]
    return program, [{name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(n)]


def bert_base(rng, n):
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
    program = torch.export.export(net, (), example)
    samples = [
        {"input_ids": rng.integers(1, config.vocab_size, (1, seq)), "attention_mask": np.ones((1, seq), np.int64)}
        for _ in range(n)
    ]
    return program, samples


def bench(name: str, samples: int, holdout: float) -> list[dict]:
    rng = np.random.default_rng(0)
    model, data = globals()[name](rng, samples)
    rows = []
    for target in ("npu", "tensorrt"):
        options = {"tensorrt": {"engines": "never"}} if target == "tensorrt" else None
        start = time.perf_counter()
        aot.build(model, targets=[target], backend_options=options, log=None)
        float_seconds = time.perf_counter() - start
        start = time.perf_counter()
        result = aot.build(model, targets=[target], backend_options=options, log=None,
                           quantize=aot.QuantizeConfig(data, holdout=holdout))  # fmt: skip
        int8_seconds = time.perf_counter() - start
        held = [a for a in result.quantization.accuracy if a.split == "held-back"] or result.quantization.accuracy
        row = {
            "model": name, "target": target, "float_s": float_seconds, "int8_s": int8_seconds,
            "stages": {k: round(v, 2) for k, v in result.timings.items()}, "notes": result.notes,
            "accuracy": [a.line() for a in held],
            "int8_ops": next(n for n in result.notes if n.startswith("int8:")),
        }  # fmt: skip
        data_bytes = result.to_bytes()
        if target == "npu":
            kernels, elements = replay_npu_int8(data_bytes, data[-1])
            row["check"] = f"{kernels} integer kernels, {elements:,} int8 outputs bit-exact to the reference"
        else:
            errors = []
            for record in result.header["modules"]:
                payloads = {k: result.blobs.payloads[i] for k, i in record["payloads"].items()}
                errors.append(verify_recipe(payloads, record["compile_specs"]))
            worst = max((e["error"] for e in errors), default=0.0)
            ok = all(e["ok"] for e in errors)
            row["check"] = (
                f"{len(errors)} recipes in onnxruntime vs host plan: worst rel L2 {worst:.2e} ({'ok' if ok else 'FAIL'})"
            )
        rows.append(row)
        print(f"{name} {target}: float {float_seconds:.1f} s, int8 {int8_seconds:.1f} s; {row['check']}", flush=True)
        for line in row["accuracy"]:
            print("   ", line, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--samples", type=int, default=20, help="calibration + held-back samples per model")
    parser.add_argument("--holdout", type=float, default=0.2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = [row for name in args.models for row in bench(name, args.samples, args.holdout)]
    lines = [
        "## int8 with calibration (random weights)",
        "",
        f"`{command_line('bench_int8.py')}` on {machine()}. Build times include calibration on the host plan "
        "and the accuracy run (wall-clock on a machine shared with other jobs: noisy); agreement is the int8 bundle against the float graph on held-back samples (random inputs: quantization noise, not task accuracy). The TensorRT check runs the recipe with onnxruntime's graph optimizations off against the host plan; one-step rounding flips compound through ResNet-50 and BERT (docs/quantization.md).",
        "",
        "| model | target | float build | int8 build (stages) | ops in int8 | held-back agreement | check |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stages = ", ".join(f"{k} {v}" for k, v in r["stages"].items() if k in ("quantize", "codegen", "accuracy"))
        agreement = "<br>".join(a.split(": ", 1)[1] for a in r["accuracy"])
        lines.append(
            f"| {r['model']} | {r['target']} | {r['float_s']:.1f} s | {r['int8_s']:.1f} s ({stages}) | "
            f"{r['int8_ops'].removeprefix('int8: ')} | {agreement} | {r['check']} |"
        )
    publish("int8", "\n".join(lines) + "\n", args.no_write)


if __name__ == "__main__":
    main()
