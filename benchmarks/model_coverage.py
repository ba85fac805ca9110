"""Which modern models build and match PyTorch: model x route x backend, written to docs/models.md.

    python benchmarks/model_coverage.py                 # small configs: every torchvision classifier at
                                                        # 64x64, the nine HF architectures tiny (~15 min)
    python benchmarks/model_coverage.py --full          # torchvision at its own size, HF at real sizes
    python benchmarks/model_coverage.py --only bert,resnet18 --out /tmp/models.md

Routes: ``torch.export`` (the program handed to ``aot.build``) and ``onnx``
(``torch.onnx.export(..., dynamo=True)`` then ``aot.build`` on the file). Backends:
``host``, ``npu`` (the virtual NPU) and ``tensorrt`` (here without TensorRT, so the host
plan runs: the fallback path). Each cell is ✓ with the worst relative L2 error against
PyTorch over every output and every size tried, or ✗ with the build's or run's one-line
error. Text models keep a symbolic batch and sequence length: the host bundle runs
(batch, seq) = (1, 8), (4, 64), (3, 21) (and (2, 128), (1, 512) with ``--full``); the NPU needs static
shapes, so its bundle fixes the example's. Every model runs in its own subprocess (a crash,
a hang or a memory blow-up costs one row), with ``--timeout`` seconds and models over
``--max-params`` parameters listed as not run. It needs the test extra (``pip install -e '.[test]'``:
torch, and onnxscript for the ONNX route) and refuses to start in one line without it.

    python benchmarks/model_coverage.py --rows /tmp/rows.jsonl          # resumable: rows kept as JSON lines
    python benchmarks/model_coverage.py --rows /tmp/rows.jsonl --only swin_t   # rerun one row, table rewritten

With ``--rows`` every finished row is appended to that file; a later run with the same file
skips the models it already holds (so a stopped sweep resumes) and reruns those named by
``--only``, whose new row replaces the old. The table is written from every row in the file;
rows that came from another command than most did say which in the notes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import machine  # noqa: E402

ROUTES = ("torch.export", "onnx")
BACKENDS = ("host", "npu", "tensorrt")
TOLERANCE = 1e-4
HF_SIZES = [(1, 8), (4, 64), (3, 21)]
HF_FULL_SIZES = HF_SIZES + [(2, 128), (1, 512)]


# -- the models -------------------------------------------------------------------------
def hf_full_factories():
    """Realistic sizes: each config class's defaults (BERT-base, GPT-2 small, ViT-B/16, CLIP ViT-B/32,
    t5-small, whisper-tiny, DistilBERT, RoBERTa-base); LLaMA's default is 7B, so a 12-layer 768-wide one."""
    import torch

    from tests import hf_models

    def make(config_name, model_name, inputs, dims, encoder=False, **config):
        def factory():
            t = hf_models._transformers()
            torch.manual_seed(0)
            model = getattr(t, model_name)(getattr(t, config_name)(**config))
            model = model.get_encoder() if encoder else model
            return model.eval(), inputs(), dims

        return factory

    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=512)
    tokens = lambda: hf_models.token_inputs(2, 128)  # noqa: E731
    pixels = lambda size: lambda: {"pixel_values": torch.randn(2, 3, size, size)}  # noqa: E731
    image_dims = {"pixel_values": {0: batch}}
    text = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return {
        "bert": make("BertConfig", "BertModel", tokens, text),
        "roberta": make("RobertaConfig", "RobertaModel", tokens, text),
        "distilbert": make("DistilBertConfig", "DistilBertModel", tokens, text),
        "gpt2": make("GPT2Config", "GPT2Model", tokens, text, use_cache=False),
        "llama": make(
            "LlamaConfig",
            "LlamaModel",
            tokens,
            text,
            hidden_size=768,
            intermediate_size=2048,
            num_hidden_layers=12,
            num_attention_heads=12,
            num_key_value_heads=4,
            use_cache=False,
            max_position_embeddings=2048,
        ),  # fmt: skip
        "t5_encoder": make("T5Config", "T5EncoderModel", tokens, text, use_cache=False),
        "whisper_encoder": make(
            "WhisperConfig",
            "WhisperModel",
            lambda: {"input_features": torch.randn(2, 80, 3000)},
            {"input_features": {0: hf_models.BATCH}},
            encoder=True,
        ),  # fmt: skip
        "vit": make("ViTConfig", "ViTModel", pixels(224), image_dims),
        "clip_vision": make("CLIPVisionConfig", "CLIPVisionModel", pixels(224), image_dims),
    }


def torchvision_model(name: str, full: bool):
    import torch
    from torch import nn

    from tests.torchvision_compat import import_torchvision

    torchvision = import_torchvision()
    size = 299 if name == "inception_v3" else 224 if full or name == "maxvit_t" else 56 if name == "vit_h_14" else 64
    options = {"image_size": size} if name.startswith("vit") and not full else {}  # 56: a multiple of its patch
    if name in ("googlenet", "inception_v3"):
        options["aux_logits"], options["init_weights"] = False, True
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, **options).eval()
    for module in model.modules():  # batch-norm statistics and zero heads randomised: every layer shows
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
        if isinstance(module, nn.Linear) and not module.weight.any():
            nn.init.normal_(module.weight, std=0.05)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    return model, {"x": x}, None


def model_names(full: bool) -> list[str]:
    from tests import hf_models
    from tests.torchvision_compat import import_torchvision

    torchvision = import_torchvision()
    tv = [f"torchvision/{n}" for n in torchvision.models.list_models(module=torchvision.models)] if torchvision else []
    return [f"hf/{n}" for n in hf_models.FACTORIES] + tv


def build_model(name: str, full: bool):
    family, short = name.split("/", 1)
    if family == "torchvision":
        return torchvision_model(short, full)
    from tests import hf_models

    return (hf_full_factories() if full else hf_models.FACTORIES)[short]()


# -- one model, in a worker process -----------------------------------------------------
def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(error).__name__}: {first}"[:300]


def relative_l2(actual, expected) -> float:
    import numpy as np

    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-12))


def reference(model, inputs) -> list:
    import torch

    with torch.no_grad():
        result = model(**inputs)
    flat = list(result.to_tuple()) if hasattr(result, "to_tuple") else [result]
    return [t.numpy() for t in flat]


def check_sizes(model, example, dynamic, backend: str, full: bool) -> list[dict]:
    """The inputs each backend's bundle is run on: several sizes where shapes are symbolic."""
    from tests import hf_models

    if dynamic is None or backend == "npu":
        return [example]
    sizes = HF_FULL_SIZES if full else HF_SIZES
    if backend == "tensorrt":  # the same host plan: one size shows the fallback
        sizes = sizes[-1:]
    return [hf_models.resized(example, dynamic, batch, seq) for batch, seq in sizes]


def run_cell(source, model, example, dynamic, backend: str, full: bool) -> dict:
    import aot
    import runtime_lite

    started = time.perf_counter()
    options = {"targets": [backend]}
    if backend == "npu" and dynamic is not None:
        options["input_shapes"] = {k: tuple(v.shape) for k, v in example.items()}
    try:
        module = runtime_lite.load(aot.build(source, **options).to_bytes())
    except Exception as e:
        return {"ok": False, "error": "build: " + one_line(e)}
    worst = 0.0
    for inputs in check_sizes(model, example, dynamic, backend, full):
        try:
            actual = module.run({k: v.numpy() for k, v in inputs.items()})
        except Exception as e:
            return {"ok": False, "error": "run: " + one_line(e)}
        expected = reference(model, inputs)
        if len(actual) != len(expected):
            return {"ok": False, "error": f"{len(actual)} outputs, PyTorch has {len(expected)}"}
        for a, e in zip(actual, expected):
            if a.shape != e.shape:
                return {"ok": False, "error": f"output shape {a.shape}, PyTorch's is {e.shape}"}
            worst = max(worst, relative_l2(a, e))
    return {"ok": worst <= TOLERANCE, "rel_l2": worst, "seconds": round(time.perf_counter() - started, 1)}


def export_route(route: str, model, example, dynamic, workdir: Path):
    import torch

    from tests.onnx_export import export_onnx

    if route == "torch.export":
        return torch.export.export(model, (), example, dynamic_shapes=dynamic, strict=False), "torch.export.export"
    path = workdir / "model.onnx"
    how = export_onnx(model, example, dynamic, path)
    return str(path), how


def worker(name: str, full: bool, routes: list[str], max_params: float) -> dict:
    import numpy as np
    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model, example, dynamic = build_model(name, full)
    params = sum(p.numel() for p in model.parameters())
    expected = reference(model, example)
    row = {"model": name, "params": params, "cells": {}, "notes": {}}
    if params > max_params:
        message = f"not run: {params / 1e6:.0f}M parameters > --max-params {max_params / 1e6:.0f}M (memory)"
        row["cells"] = {r: {b: {"ok": False, "error": message} for b in BACKENDS} for r in routes}
        return row
    if not all(np.isfinite(e).all() and np.abs(e).max() > 0 for e in expected):
        row["notes"]["reference"] = "PyTorch's own output is zero or not finite"
    for route in routes:
        with tempfile.TemporaryDirectory() as workdir:
            try:
                source, how = export_route(route, model, example, dynamic, Path(workdir))
            except Exception as e:
                row["cells"][route] = {b: {"ok": False, "error": "export: " + one_line(e)} for b in BACKENDS}
                continue
            row["notes"][route] = how
            row["cells"][route] = {b: run_cell(source, model, example, dynamic, b, full) for b in BACKENDS}
    return row


# -- the driver -------------------------------------------------------------------------
def run_worker(name: str, args) -> dict:
    started = time.perf_counter()
    row = worker_row(name, args)
    row.update(seconds=round(time.perf_counter() - started), command=command_line(args.argv))
    return row


def worker_row(name: str, args) -> dict:
    command = [sys.executable, __file__, "--worker", name, "--routes", ",".join(args.routes)]
    command += ["--max-params", str(args.max_params)]
    command += ["--full"] if args.full else []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return failed_row(name, args.routes, f"not finished in {args.timeout} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return failed_row(name, args.routes, f"worker exit {done.returncode}: {tail[-1] if tail else ''}"[:300])
    return json.loads(lines[-1])


def command_line(argv: list[str]) -> str:
    return " ".join(["python benchmarks/model_coverage.py", *argv])


def load_rows(path: str | None) -> dict[str, dict]:
    """Rows kept by earlier runs (``--rows``), by model; a later line for a model replaces an earlier one."""
    if not path or not Path(path).exists():
        return {}
    rows = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["model"]] = row
    return rows


def failed_row(name: str, routes: list[str], message: str) -> dict:
    return {"model": name, "cells": {r: {b: {"ok": False, "error": message} for b in BACKENDS} for r in routes}}


def cell_text(cell: dict) -> str:
    if "error" in cell:
        return "✗ " + cell["error"].replace("|", "\\|")
    mark = "✓" if cell["ok"] else "✗ (above 1e-4)"
    return f"{mark} {cell['rel_l2']:.1e}"


def markdown(rows: list[dict], args, seconds: float, pending: list[str] = ()) -> str:
    mode = "--full (torchvision at its own size, HF at real sizes)" if args.full else "small configs"
    commands = [row.get("command") for row in rows if row.get("command")]
    command = max(set(commands), key=commands.count) if commands else command_line(args.argv)
    seconds = sum(row.get("seconds", 0) for row in rows) if commands else seconds
    counts = {
        (r, b): sum(row["cells"].get(r, {}).get(b, {}).get("ok", False) for row in rows)
        for r in args.routes
        for b in BACKENDS
    }
    lines = [
        "# Model coverage",
        "",
        f"Produced by `{command}` ({mode}; "
        f"{len(rows)} models, {seconds / 60:.0f} min on {machine()}). Each cell: ✓ and the worst relative L2 "
        "error against PyTorch over all outputs and sizes tried (tolerance 1e-4), or ✗ and the one-line "
        "error. `tensorrt` runs the host fallback here (no TensorRT on this machine). Text models keep a "
        "symbolic batch and sequence length on host and tensorrt (batch x seq: "
        + ", ".join(f"{b}x{q}" for b, q in (HF_FULL_SIZES if args.full else HF_SIZES))
        + "); the NPU "
        "bundle fixes the example's shapes. How each was exported and the parameter count are in the notes.",
        "",
        "| route | " + " | ".join(BACKENDS) + " |",
        "|---|" + "---|" * len(BACKENDS),
    ]
    for r in args.routes:
        lines.append(f"| {r} | " + " | ".join(f"{counts[r, b]}/{len(rows)}" for b in BACKENDS) + " |")
    header = ["model"] + [f"{r} {b}" for r in args.routes for b in BACKENDS]
    lines += ["", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for row in rows:
        cells = [cell_text(row["cells"].get(r, {}).get(b, {"error": "not run"})) for r in args.routes for b in BACKENDS]
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    if pending:
        lines += ["", f"Not run yet ({len(pending)}; the run was stopped or is still going): " + ", ".join(pending)]
    notes = [row for row in rows if row.get("notes") or "params" in row]
    lines += ["", "## Notes", ""]
    for row in notes:
        parts = [f"{row['params'] / 1e6:.1f}M parameters"] if "params" in row else []
        parts += [f"{k}: {v}" for k, v in row.get("notes", {}).items()]
        parts += [f"this row from `{row['command']}`"] if row.get("command", command) != command else []
        lines.append(f"- {row['model']}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def missing_packages(routes: list[str]) -> list[str]:
    """What the sweep needs and this environment lacks: torch for every route, onnxscript for the ONNX one
    (``torch.onnx.export(..., dynamo=True)``). Without them each cell of the route failed, recorded as a ✗ of
    the model, and docs/models.md would say every model fails. Looked for, not imported: torch takes seconds."""
    needed = ["torch"] + (["onnxscript"] if "onnx" in routes else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="realistic sizes (slow; several GB per large model)")
    parser.add_argument("--only", default="", help="comma-separated model names (short names match too)")
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--out", default=str(ROOT / "docs" / "models.md"))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--max-params", type=float, default=350e6, help="larger models are listed as not run")
    parser.add_argument("--rows", help="JSON lines file: append each row, skip models already in it (resume)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--worker"]
    args.routes = [r for r in args.routes.split(",") if r]
    missing = missing_packages(args.routes)
    if missing:  # every cell would be recorded as the model's failure, not this machine's
        verb = "is" if len(missing) == 1 else "are"
        print(f"error: {' and '.join(missing)} {verb} not installed: pip install -e '.[test]'", file=sys.stderr)
        return 1
    if args.worker:
        print(json.dumps(worker(args.worker, args.full, args.routes, args.max_params)))
        return 0
    every = model_names(args.full)
    kept = load_rows(args.rows)
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in every if n in wanted or n.split("/", 1)[1] in wanted]
    else:
        names = [n for n in every if n not in kept]  # resume: what the rows file does not hold yet
    started = time.perf_counter()

    def write(pending: list[str]) -> None:
        rows = [kept[n] for n in every if n in kept]
        Path(args.out).write_text(markdown(rows, args, time.perf_counter() - started, pending))

    for i, name in enumerate(names):
        row = run_worker(name, args)
        kept[name] = row
        if args.rows:
            with open(args.rows, "a") as f:
                f.write(json.dumps(row) + "\n")
        summary = "  ".join(f"{r}/{b}: {cell_text(row['cells'][r][b])[:60]}" for r in args.routes for b in BACKENDS)
        print(f"{name}: {summary}", flush=True)
        write([n for n in every if n not in kept] if args.rows else names[i + 1 :])  # after every row
    if not names:
        write([])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
