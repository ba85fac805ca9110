"""ResNet-50 (and SqueezeNet) through ``runtime-lite serve`` (Ray Serve, v2 protocol, tritonclient) against its peers, in one run.

    python benchmarks/bench_serving.py                # writes the serving section of BENCHMARKS.md
    python benchmarks/bench_serving.py --no-write --requests 40

Rows, per zoo model (random weights, batch dim made symbolic):
* direct ``module.run`` in-process, and onnxruntime's ``session.run`` in-process (batch 1);
* the server at concurrency 1, 8 and 32 (tritonclient threads, binary tensors), batching off
  and on, with runtime_lite in the replica — and with onnxruntime in the *same* Ray Serve
  deployment (the replica's loader swapped), so the two differ only in the runtime.
One replica, ``--threads`` BLAS threads in it (default 2), one local Ray instance per ingress
(``--ingress``: Ray Serve's Python proxy, then HAProxy); each load is bounded in requests and
seconds. Server overhead: requests through the unbatched server and direct ``run()`` calls in
turn, the median of the per-pair differences (``paired_overhead``).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import load_zoo_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_host import machine, onnxruntime_session  # noqa: E402
from report import command_line, publish  # noqa: E402

from runtime_lite.format.signature import TensorSpec  # noqa: E402
from runtime_lite.serving import server  # noqa: E402
from tests.serving_client import free_port, run_load, triton_inputs  # noqa: E402

CONCURRENCY = (1, 8, 32)


def with_symbolic_batch(name: str, directory: Path) -> tuple[Path, Path]:
    """A zoo model with its batch dim made symbolic (inputs, outputs and the flatten reshape)."""
    model = load_zoo_model(name)
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    initializers = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in initializers:
            target = numpy_helper.to_array(initializers[node.input[1]]).copy()
            target[0] = -1
            initializers[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    onnx_path, bundle_path = directory / f"{name}.onnx", directory / f"{name}.aotb"
    onnx.save(model, onnx_path)
    aot.build(model, log=None).save(bundle_path)
    return onnx_path, bundle_path


class OnnxruntimeModel:
    """onnxruntime shaped like a runtime_lite Module, so the same deployment serves it (the peer row)."""

    def __init__(self, path: str):
        self.session = onnxruntime_session(path)
        self.digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        dtypes = {"tensor(float)": np.dtype(np.float32)}
        self.inputs = tuple(TensorSpec(i.name, tuple(i.shape), dtypes[i.type]) for i in self.session.get_inputs())
        self.outputs = tuple(TensorSpec(o.name, tuple(o.shape), dtypes[o.type]) for o in self.session.get_outputs())
        self._names = [spec.name for spec in self.inputs]

    def run(self, inputs):
        return self.session.run(None, dict(zip(self._names, inputs)))


def onnxruntime_loader(entry, config):
    return OnnxruntimeModel(entry["onnx"])


def direct_p50(run, x: np.ndarray, iterations: int) -> float:
    for _ in range(3):
        run(x)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        run(x)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def paired_overhead(url: str, model: str, input_name: str, module, x: np.ndarray, pairs: int) -> dict[str, float]:
    """One request through the server and one direct ``run()``, alternately, ``pairs`` times.

    Both halves of a pair meet the same moment of a noisy shared machine (this one's
    direct p50 moved by 40 ms between two measurements a minute apart), so the median
    of the per-pair differences is the server's own cost, where a difference of two
    p50s taken minutes apart is mostly noise.
    """
    import tritonclient.http as triton

    client = triton.InferenceServerClient(url, connection_timeout=30, network_timeout=60)
    inputs = triton_inputs({input_name: x})
    served, direct = [], []
    for i in range(pairs + 3):
        halves = [(direct, lambda: module.run([x])), (served, lambda: client.infer(model, inputs))]
        for times, call in halves if i % 2 else halves[::-1]:  # each goes first in half the pairs
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    served, direct = np.array(served[3:]), np.array(direct[3:])  # the first 3 pairs warm both paths
    return {
        "server": float(np.median(served)) * 1e3,
        "direct": float(np.median(direct)) * 1e3,
        "difference": float(np.median(served - direct)) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--requests", type=int, default=64, help="requests per row at concurrency 1 (x2 at 8, x4 at 32)"
    )
    parser.add_argument("--max-seconds", type=float, default=120, help="time cap per row")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--batch-wait-ms", type=float, default=10.0)
    parser.add_argument("--models", default="resnet50,squeezenet", help="zoo models, comma-separated")
    parser.add_argument("--ingress", default=",".join(server.INGRESSES), help="ingresses to measure, comma-separated")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: with_symbolic_batch(name, Path(tmp)) for name in args.models.split(",")}
        for ingress in args.ingress.split(","):
            port, started, config = free_port(), False, None
            for name, paths in models.items():
                rows, direct, paired, config, started = bench_model(name, paths, ingress, port, started, args)
                sections.append(report(name, ingress, rows, direct, paired, args))
            server.stop(config)
    header = [
        "## Serving: zoo models through Ray Serve (v2 protocol, tritonclient, binary tensors)",
        "",
        f"`{command_line('bench_serving.py')}` — {machine()}; one replica with {THREADS} BLAS threads, "
        f"batching up to {args.max_batch_size} rows waiting {args.batch_wait_ms:g} ms; the load generator "
        "runs on the same machine. Latencies are per request as the client sees them; the peer is "
        "onnxruntime inside the same Ray Serve deployment (only the replica's loader differs).",
    ]
    publish("serving", "\n".join(header) + "\n\n" + "\n\n".join(sections), args.no_write)


def bench_model(name, paths, ingress, port, started, args):
    onnx_path, bundle_path = paths
    module = runtime_lite.load(bundle_path)
    session = OnnxruntimeModel(str(onnx_path))
    (input_spec,), (output_spec,) = module.inputs, module.outputs
    x = np.random.default_rng(0).random((1, *input_spec.shape[1:]), dtype=np.float32)
    direct = {
        "runtime_lite": direct_p50(lambda a: module.run([a]), x, args.requests),
        "onnxruntime": direct_p50(lambda a: session.run([a]), x, args.requests),
    }
    # The most batching can give any server: rows per second of one full batch over batch 1's, in-process.
    full = np.repeat(x, args.max_batch_size, axis=0)
    iterations = max(3, args.requests // 4)
    direct["runtime_lite batched"] = direct_p50(lambda a: module.run([a]), full, iterations)
    direct["onnxruntime batched"] = direct_p50(lambda a: session.run([a]), full, iterations)
    print(f"{name} direct p50: {direct}", flush=True)
    rows = []
    for runtime, loader in (("runtime_lite", None), ("onnxruntime", onnxruntime_loader)):
        for batch in (1, args.max_batch_size):
            config = server.ServeConfig(
                models=[server.ModelSource(name, bundle_path, {"onnx": str(onnx_path)})],
                port=port, max_batch_size=batch, batch_wait_ms=args.batch_wait_ms, threads=THREADS, ingress=ingress,
            )  # fmt: skip
            (server.reload if started else server.start)(config, loader)
            started = True
            if runtime == "runtime_lite" and batch == 1:
                paired = paired_overhead(f"127.0.0.1:{port}", name, input_spec.name, module, x, args.requests)
            for concurrency in CONCURRENCY:
                n = args.requests * {1: 1, 8: 2, 32: 4}[concurrency]
                result = run_load(
                    f"127.0.0.1:{port}", name, lambda i: {input_spec.name: x},
                    lambda i, out: out[output_spec.name].shape[0] == 1,
                    threads=concurrency, requests=n, max_seconds=args.max_seconds,
                )  # fmt: skip
                rows.append((runtime, batch > 1, concurrency, result))
                print(
                    f"{name} {ingress:7} {runtime:12} batching={'on ' if batch > 1 else 'off'} c={concurrency:2}: "
                    f"{result.throughput:6.2f} req/s p50 {result.percentile(50):7.1f} ms "
                    f"p99 {result.percentile(99):7.1f} ms ok {result.ok} refused {dict(result.statuses)}",
                    flush=True,
                )
    return rows, direct, paired, config, started


def report(name, ingress, rows, direct, paired, args) -> str:
    def find(runtime, batching, concurrency):
        return next(r for rt, b, c, r in rows if (rt, b, c) == (runtime, batching, concurrency))

    lines = [
        f"### {name}, {ingress} ingress",
        "",
        "| runtime in the replica | batching | concurrency | req/s | p50 ms | p99 ms | refused |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for runtime, batching, concurrency, r in rows:
        lines.append(
            f"| {runtime} | {'on' if batching else 'off'} | {concurrency} | {r.throughput:.2f} | "
            f"{r.percentile(50):.1f} | {r.percentile(99):.1f} | {dict(r.statuses) or '-'} |"
        )
    ours_c1 = find("runtime_lite", False, 1)
    overhead = ours_c1.percentile(50) - direct["runtime_lite"]
    gain = find("runtime_lite", True, 32).throughput / max(find("runtime_lite", False, 32).throughput, 1e-9)
    peer_gain = find("onnxruntime", True, 32).throughput / max(find("onnxruntime", False, 32).throughput, 1e-9)
    vs_peer = find("runtime_lite", True, 32).throughput / max(find("onnxruntime", True, 32).throughput, 1e-9)
    ceiling = {
        runtime: args.max_batch_size * direct[runtime] / direct[f"{runtime} batched"]
        for runtime in ("runtime_lite", "onnxruntime")
    }
    lines += [
        "",
        f"- Direct in-process p50 at batch 1: runtime_lite {direct['runtime_lite']:.1f} ms, "
        f"onnxruntime {direct['onnxruntime']:.1f} ms.",
        f"- Server overhead at concurrency 1, batching off (target ≤ 2 ms): **{paired['difference']:.1f} ms**, "
        f"the median difference over {args.requests} pairs of one request and one direct `run()` in turn "
        f"(p50s {paired['server']:.1f} and {paired['direct']:.1f} ms); the p50 of the concurrency-1 row minus "
        f"the direct p50 above, minutes apart: {overhead:.1f} ms.",
        f"- Batching at concurrency 32: **{gain:.2f}×** the unbatched server's throughput (target ≥ 1.5×); "
        f"onnxruntime in the same deployment gains {peer_gain:.2f}×.",
        f"- In-process ceiling for that gain: a batch of {args.max_batch_size} runs at "
        f"{ceiling['runtime_lite']:.2f}× the rows per second of batch 1 with runtime_lite "
        f"({direct['runtime_lite batched']:.0f} ms per batch), {ceiling['onnxruntime']:.2f}× with onnxruntime "
        f"({direct['onnxruntime batched']:.0f} ms); no server can batch past it.",
        f"- runtime_lite vs onnxruntime in the same deployment, concurrency 32 with batching: {vs_peer:.2f}× "
        "the throughput.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
