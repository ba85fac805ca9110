"""The deployment side of tests/test_numpy_floor.py: run in a venv holding only the oldest declared numpy and
msgpack (and onnxruntime), it imports nothing but runtime_lite, numpy, msgpack and onnxruntime.

``python -P numpy_floor_child.py CASES OUT SERVED`` loads and runs every bundle ``CASES/manifest.json`` lists on
its inputs and writes the outputs to ``OUT/<name>.npz``; then answers a JSON and a binary inference
request through runtime_lite.serving's protocol (no Ray) and runs two blocks on the GEMM pool under the
caller's errstate; ``OUT/report.json`` says which versions ran and where each region ran. A failure is
one line on stderr and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import warnings
from pathlib import Path

import msgpack
import numpy as np

import runtime_lite
from runtime_lite.kernels import gemm
from runtime_lite.serving.service import InferenceService, served_model


def _outputs(path: Path, outputs: list) -> None:
    kinds = {type(o).__name__ for o in outputs} - {"ndarray"}
    if kinds:
        raise SystemExit(f"{path.stem}: outputs of type {sorted(kinds)}, not numpy arrays")
    np.savez(path, *outputs)


def run_bundles(cases: Path, out: Path) -> dict[str, dict]:
    placements = {}
    for case in json.loads((cases / "manifest.json").read_text()):
        name = case["name"]
        with np.load(cases / f"{name}.inputs.npz") as stored:
            inputs = [stored[f"arr_{i}"] for i in range(len(stored.files))]
        try:
            module = runtime_lite.load(str(cases / f"{name}.aotb"))
            _outputs(out / f"{name}.npz", module.run(inputs))
        except Exception as e:
            raise SystemExit(f"{name}: {type(e).__name__}: {e}") from None
        placements[name] = {region: where["runs_on"] for region, where in module.placement.items()}
    return placements


def serve(cases: Path, out: Path, name: str) -> None:
    """A JSON request and a binary one for ``name`` (one float32 input), through the service's own handler."""
    module = runtime_lite.load(str(cases / f"{name}.aotb"))
    with np.load(cases / f"{name}.inputs.npz") as stored:
        x = stored["arr_0"]
    service = InferenceService({"m": served_model("m", module, max_batch_size=1)})
    spec = {"name": module.inputs[0].name, "shape": list(x.shape), "datatype": "FP32"}
    answer = asyncio.run(
        service.handle(
            "POST", "/v2/models/m/infer", {}, json.dumps({"inputs": [{**spec, "data": x.ravel().tolist()}]}).encode()
        )
    )
    if answer.status != 200:
        raise SystemExit(f"JSON inference answered {answer.status}: {answer.body[:300]!r}")
    first = json.loads(answer.body)["outputs"][0]
    from_json = np.array(first["data"], np.float32).reshape(first["shape"])
    header = json.dumps(
        {"inputs": [{**spec, "parameters": {"binary_data_size": x.nbytes}}], "parameters": {"binary_data_output": True}}
    ).encode()
    answer = asyncio.run(
        service.handle(
            "POST", "/v2/models/m/infer", {"inference-header-content-length": str(len(header))}, header + x.tobytes()
        )
    )
    if answer.status != 200:
        raise SystemExit(f"binary inference answered {answer.status}: {answer.body[:300]!r}")
    size = int(answer.headers["inference-header-content-length"])
    first = json.loads(answer.body[:size])["outputs"][0]
    from_binary = np.frombuffer(answer.body[size:], np.float32)[: int(np.prod(first["shape"]))].reshape(first["shape"])
    np.savez(out / "served.npz", json=from_json, binary=from_binary)


def pool_keeps_errstate() -> None:
    """Two blocks on the GEMM pool (one on a worker thread) under the caller's errstate: silenced stays silent."""
    both = threading.Barrier(2, timeout=5)

    def overflow() -> None:
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass
        np.exp(np.full(8, 1000, np.float32))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="ignore"):
            try:
                gemm.run_blocks([overflow, overflow])
            except RuntimeWarning as e:
                raise SystemExit(f"a pool worker ignored the caller's errstate: {e}") from None


def main() -> None:
    cases, out = Path(sys.argv[1]), Path(sys.argv[2])
    placements = run_bundles(cases, out)
    serve(cases, out, sys.argv[3])
    pool_keeps_errstate()
    try:
        import onnxruntime

        onnxruntime_version = onnxruntime.__version__
    except ImportError:
        onnxruntime_version = None
    report = {
        "runtime_lite": runtime_lite.__file__,
        "numpy": np.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
        "onnxruntime": onnxruntime_version,
        "pool": gemm._pool() is not None,
        "placements": placements,
    }
    (out / "report.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
