"""The ``runtime-lite`` / ``python -m runtime_lite`` commands: run, info, bench, serve, warm, backends.

argparse rather than click: the runtime's only dependencies are numpy and msgpack.
Every failure the user can fix is one line on stderr and exit status 1; an
interrupt (Ctrl-C) is one line and status 130, as shells expect.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import runtime_lite
from runtime_lite.backends import available_backends, get_backend
from runtime_lite.backends.options import split_assignments
from runtime_lite.errors import RuntimeLiteError
from runtime_lite.files import atomic_write, check_writable
from runtime_lite.tools import bench
from runtime_lite.tools.inputs import (
    describe_inputs,
    load_inputs,
    output_filenames,
    parse_dim,
    parse_input,
    preview,
)

PROG = "runtime-lite"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def _run(args: argparse.Namespace) -> int:
    if args.profile is not None:  # before the run: a wrong path must not cost a model run first
        with _naming_the_path("--profile", args.profile):
            check_writable(args.profile)
    if args.output_dir:
        _writable_directory(args.output_dir)
    start = time.perf_counter()
    module = runtime_lite.load(args.bundle, **_load_options(args))
    loaded = time.perf_counter()
    inputs = load_inputs(module.inputs, args.input, args.random_inputs, args.seed, dims=module.dims, dim_size=args.dim)
    profile = module.profile(inputs) if args.profile is not None else None
    outputs = profile.outputs if profile is not None else module.run(inputs)
    done = time.perf_counter()
    print(f"{args.bundle}: loaded in {(loaded - start) * 1e3:.1f} ms, ran in {(done - loaded) * 1e3:.1f} ms")
    print(f"  inputs fed: {describe_inputs(module.inputs, inputs)}")
    for spec, array in zip(module.outputs, outputs):
        print(f"  {spec.name}: {array.dtype}{list(array.shape)} {preview(array)}")
    if args.output_dir:
        _write_outputs(args.output_dir, output_filenames([spec.name for spec in module.outputs]), outputs)
        print(f"outputs written to {args.output_dir}/")
    if profile is not None:
        with _naming_the_path("--profile", args.profile):
            profile.write_chrome_trace(args.profile)
        print("\n".join(profile.summary_lines()))
        print(f"profile: {len(profile.events)} events written to {args.profile} (open in ui.perfetto.dev)")
    return 0


@contextlib.contextmanager
def _naming_the_path(option: str, path: Path) -> Iterator[None]:
    """An OSError inside becomes the one-line error naming the option and the path."""
    try:
        yield
    except OSError as e:
        raise RuntimeLiteError(f"{option} '{path}': {e.strerror or e}") from None


def _writable_directory(directory: Path) -> None:
    with _naming_the_path("--output-dir", directory):
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "it exists and is not a directory", str(directory))
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "Permission denied", str(directory))


def _write_outputs(directory: Path, files: list[str], outputs: list[np.ndarray]) -> None:
    """Each output as its own ``.npy`` file, each written all or nothing."""
    for file, array in zip(files, outputs):
        with _naming_the_path("--output-dir", directory / file):
            atomic_write(directory / file, functools.partial(np.save, arr=array, allow_pickle=False))


def _load_options(args: argparse.Namespace) -> dict:
    """``runtime_lite.load`` keywords from --require and --backend-option."""
    return {"require": args.require, "backend_options": split_assignments(args.backend_option)}


#: The engines a built-in backend's regions run on, any one of which will do. These backends load without
#: them (``is_available`` is true: a region then runs its host plan), so the listing looks for them itself.
ENGINE_MODULES = {
    "onnxruntime": ("onnxruntime",),
    "openvino": ("openvino",),
    "auto": ("onnxruntime", "openvino"),
    "tensorrt": ("tensorrt", "tensorrt_lean", "tensorrt_lean_bindings"),
}


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (onnxruntime or OpenVINO take seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module importing it failed before
        return False


def _backend_state(name: str, backend: Any) -> str:
    """What ``backends`` says of one backend: available, or which engine is missing and what its regions do."""
    if not backend.is_available():
        return "not available on this host"
    engines = ENGINE_MODULES.get(name)
    if engines is None or any(_installed(module) for module in engines):
        return "available"
    if name == "tensorrt" and _installed("onnxruntime") and _option_now(backend, "onnxruntime_fallback") is True:
        return "not installed: its regions run their recipe on onnxruntime"  # docs/tensorrt.md
    missing = "neither onnxruntime nor openvino is installed" if name == "auto" else "not installed"
    return f"{missing}: its regions run their host plan"


def _option_now(backend: Any, name: str) -> Any:
    """A load option's default as it stands (environment included), or None where the backend has no such option."""
    return next((option.default_value() for option in backend.load_options if option.name == name), None)


def _backends(args: argparse.Namespace) -> int:
    """Every backend this runtime can load, built in or from an installed package, with its load options."""
    for name in available_backends():
        try:
            backend = get_backend(name)
        except ImportError as e:
            print(f"{name} (broken: {e})")
            continue
        print(f"{name} ({_backend_state(name, backend)})")
        for option in backend.load_options:
            print(f"  --backend-option {name}.{option.name}=...  {option.help} [now: {option.default_value()}]")
    return 0


def _info(args: argparse.Namespace) -> int:
    module = runtime_lite.load(args.bundle, **_load_options(args))
    print(f"bundle {args.bundle} (format {module.format_version[0]}.{module.format_version[1]})")
    producer = ", ".join(f"{k} {v}" for k, v in module.producer.items())
    print(f"  produced by: {producer}")
    for spec in module.inputs:
        print(f"  input  {spec}")
    for spec in module.outputs:
        print(f"  output {spec}")
    for dim in module.dims.values():
        print(f"  dim    {dim}")
    if module.worst_case_activation_bytes is not None:
        budget = module.worst_case_budget_bytes
        print(f"  worst  {module.worst_case_activation_bytes / 1e6:.1f} MB of activations with every dim at its maximum"
              + (f" (a max_memory budget admits it from {budget / 1e6:.1f} MB)" if budget else ""))  # fmt: skip
    for module_id, placed in module.placement.items():
        print(f"  module {module_id} on backend {placed['backend']}, runs on {placed['runs_on']}")
        if args.verbose and placed.get("detail"):  # -v: where exactly, and why (an int8 recipe's kernels)
            print(f"    {placed['detail']}")
    if module.row_coupling is not None:  # what `serve --max-batch-size` would refuse to merge, said before serving
        print(f"  rows   not independent: {module.row_coupling}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.threads is not None and bench.configured_threads() != args.threads:
        # BLAS reads its thread count once, when numpy is imported: only a fresh process can change it.
        raise RuntimeLiteError(
            f"--threads {args.threads} must be set before numpy starts; "
            f"run the command as a process, or set OPENBLAS_NUM_THREADS={args.threads}"
        )
    # As trtexec and onnxruntime_perf_test do: no input given means random inputs, said once.
    random = args.random_inputs or not args.input
    if not args.input and not args.random_inputs:
        print(
            f"no --input given: random inputs of the signature's shapes (seed {args.seed}); symbolic dims 1 or "
            "their minimum, unless --batch or --dim NAME=SIZE sizes them",
            file=sys.stderr,
        )
    result = bench.benchmark(
        args.bundle,
        lambda module: load_inputs(module.inputs, args.input, random, args.seed, args.batch, module.dims, args.dim),
        inputs_label=bench.describe_feed(len(args.input), random, args.seed),
        iterations=args.iterations,
        warmup=args.warmup,
        batch=args.batch,
        load_options=_load_options(args),
    )
    print(json.dumps(result.to_dict()) if args.json else "\n".join(result.lines()))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from runtime_lite.serving.server import ServeConfig, model_sources, serve_forever

    backend_options = split_assignments(args.backend_option)
    if args.cache_dir is not None:
        backend_options.setdefault("tensorrt", {})["cache_dir"] = str(args.cache_dir)
    config = ServeConfig(
        models=model_sources(args.bundles, args.name),
        host=args.host,
        port=args.port,
        replicas=args.replicas,
        max_batch_size=args.max_batch_size,
        batch_wait_ms=args.batch_wait_ms,
        batch_coupled_rows=args.batch_coupled_rows,
        max_ongoing_requests=args.max_ongoing_requests,
        address=args.address,
        cpus_per_replica=args.cpus_per_replica,
        threads=args.threads,
        metrics_port=args.metrics_port,
        backend_options=backend_options,
        ingress=args.ingress,
        request_timeout_s=args.request_timeout,
        grpc_port=args.grpc_port,
        max_request_bytes=args.max_request_bytes,
    )
    return serve_forever(config, announce=lambda line: print(line, flush=True))


def _warm(args: argparse.Namespace) -> int:
    """Build or check, ahead of traffic, every engine this host needs; a CPU host only reports its fallback."""
    if args.cache_dir.exists() and not args.cache_dir.is_dir():
        raise RuntimeLiteError(f"--cache-dir '{args.cache_dir}' is not a directory")
    options = split_assignments(args.backend_option)
    tensorrt = options.setdefault("tensorrt", {})
    tensorrt.setdefault("cache_dir", str(args.cache_dir))
    tensorrt.setdefault("allow_engine_build", "true")
    start = time.perf_counter()
    with runtime_lite.load(args.bundle, backend_options=options, require=args.require) as module:
        placement = module.placement
    print(f"{args.bundle}: warmed in {(time.perf_counter() - start):.1f} s, engine cache {args.cache_dir}")
    compiled = 0
    for module_id, placed in placement.items():
        print(f"  module {module_id} ({placed['backend']}): {placed.get('detail') or 'runs on ' + placed['runs_on']}")
        compiled += placed["backend"] != "host" and placed["runs_on"] == placed["backend"]
    if not placement:
        print("  nothing to warm on this host: the bundle has no backend module (the host plan runs it all)")
    elif not compiled:
        print(
            f"  nothing to warm on this host: no module runs on the backend it was compiled for ({_runs_on(placement)})"
        )
    return 0


def _runs_on(placement: dict[str, dict[str, Any]]) -> str:
    """Where the modules run instead, as the lines above say: a TensorRT region may run on onnxruntime."""
    where: dict[str, list[str]] = {}
    for module_id, placed in placement.items():
        where.setdefault("the host plan" if placed["runs_on"] == "host" else placed["runs_on"], []).append(module_id)
    return "; ".join(f"{', '.join(ids)} run{'s' * (len(ids) == 1)} on {engine}" for engine, ids in where.items())


def _reexec_with_threads(argv: list[str], threads: int) -> None:
    """Start this command again with the BLAS thread variables set (they are read when numpy loads)."""
    env = {**os.environ, **{name: str(threads) for name in bench.THREAD_VARIABLES}}
    command = [sys.executable, "-m", "runtime_lite", *argv]
    sys.stdout.flush()
    if os.name == "posix":
        os.execve(sys.executable, command, env)
    import subprocess

    sys.exit(subprocess.call(command, env=env))


def _common_options(verbose_default: object) -> argparse.ArgumentParser:
    """--verbose and --version, accepted before and after the command (a command's copy must not reset the count)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=verbose_default,
        help="log what the runtime decides (where each backend module runs); twice for every NPU dispatch",
    )  # fmt: skip
    common.add_argument("--version", action="version", version=f"{PROG} {runtime_lite.__version__}")
    return common


def _bundle_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="the .aotb bundle written by aot-build")
    parser.add_argument(
        "--require", action="append", default=[], metavar="BACKEND",
        help="fail unless every module compiled for BACKEND (e.g. tensorrt) runs on it here, instead of "
        "falling back to the host with a warning; repeatable",
    )  # fmt: skip
    _backend_option_argument(parser)


def _backend_option_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend-option", action="append", default=[], metavar="BACKEND.NAME=VALUE",
        help="a backend's own load option, e.g. tensorrt.allow_engine_build=true; repeatable "
        f"(`{PROG} backends` lists them)",
    )  # fmt: skip


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", action="append", default=[], type=parse_input, metavar="NAME=FILE.npy",
        help="the value of input NAME, a .npy file (no pickles, no .npz archives); repeat for each input",
    )  # fmt: skip
    parser.add_argument(
        "--random-inputs", action="store_true",
        help="fill the inputs not given with random data of the signature's shape (symbolic dims 1, or their "
        "declared minimum, unless --dim sizes them); bench does this by default when no --input is given",
    )  # fmt: skip
    parser.add_argument(
        "--dim", action="append", default=[], type=parse_dim, metavar="NAME=SIZE",
        help="the size of symbolic dim NAME (e.g. seq=128) in the random inputs, within the bundle's bounds "
        f"(`{PROG} info` lists its dims); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=_non_negative, default=0, help="seed of the random inputs, a whole number >= 0 (default 0)"
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common_options(argparse.SUPPRESS)
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[_common_options(0)],
        description="Run, inspect and benchmark aot bundles with runtime_lite (numpy + msgpack, no compiler).",
        epilog="Also available as `python -m runtime_lite`. Errors are one line on stderr with exit status 1.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", parents=[common], help="run a bundle once on inputs stored as .npy files",
        description="Load BUNDLE, run it once, print each output's dtype, shape and first values.",
    )  # fmt: skip
    _bundle_argument(run)
    _input_options(run)
    run.add_argument("--output-dir", type=Path, help="write each output as NAME.npy into this directory")
    run.add_argument(
        "--profile", type=Path, metavar="TRACE.json",
        help="time every instruction and backend dispatch; write a Chrome trace (chrome://tracing, Perfetto) "
        "and print the time per op type",
    )  # fmt: skip
    run.set_defaults(handler=_run)

    info = commands.add_parser(
        "info", parents=[common], help="print a bundle's signature, producer and backend modules",
        description="Load BUNDLE (all checks included) and print its signature, producer and backend modules "
        "(with -v: where each runs and why, e.g. an int8 recipe's integer or float kernels).",
    )  # fmt: skip
    _bundle_argument(info)
    info.set_defaults(handler=_info)

    timing = commands.add_parser(
        "bench", parents=[common], help="measure a bundle's latency, throughput, load time and memory",
        description="Load BUNDLE, run it WARMUP times untimed, then ITERATIONS times timed; print min, mean, "
        "p50, p90, p99 and max latency, throughput, load time and resident memory.",
    )  # fmt: skip
    _bundle_argument(timing)
    _input_options(timing)
    timing.add_argument("--iterations", type=_positive, default=100, help="timed runs (default 100)")
    timing.add_argument("--warmup", type=_non_negative, default=10, help="untimed runs first (default 10)")
    timing.add_argument(
        "--threads", type=_positive,
        help="BLAS threads (sets OPENBLAS_NUM_THREADS/OMP_NUM_THREADS/MKL_NUM_THREADS; default: every core)",
    )  # fmt: skip
    timing.add_argument(
        "--batch", type=_positive,
        help="batch size: random inputs get it as their symbolic dim 0, file inputs must have it; "
        "throughput counts samples (above 1 only where every input has a symbolic dim 0)",
    )  # fmt: skip
    timing.add_argument("--json", action="store_true", help="print one JSON object (latencies in ms) instead")
    timing.set_defaults(handler=_bench)

    _serve_parser(commands, common)
    warm = commands.add_parser(
        "warm", parents=[common], help="fill an engine cache ahead of traffic",
        description="Load BUNDLE with the engine cache DIR (building engines this host's GPU needs, or "
        "checking the cached ones), report where each module runs, and exit. On a host without TensorRT "
        "it reports the host fallback and exits 0.",
    )  # fmt: skip
    _bundle_argument(warm)
    warm.add_argument("--cache-dir", type=Path, required=True, help="the engine cache directory the replicas share")
    warm.set_defaults(handler=_warm)

    listing = commands.add_parser(
        "backends", parents=[common], help="list the backends this runtime can load and their options",
        description="List every backend (built in, or from an installed package's runtime_lite.backends entry "
        "point), whether it can run here, and the load options it accepts.",
    )  # fmt: skip
    listing.set_defaults(handler=_backends)
    return parser


def _serve_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    from runtime_lite.serving.server import (  # Ray loads only when serve runs
        DEFAULT_MAX_REQUEST_BYTES,
        INGRESSES,
        REQUEST_TIMEOUT_SECONDS,
    )

    serve = commands.add_parser(
        "serve", parents=[common], help="serve bundles over HTTP and gRPC (Open Inference Protocol v2) on Ray Serve",
        description="Deploy each BUNDLE on Ray Serve and answer the Open Inference Protocol (v2: Triton, "
        "KServe, tritonclient) until SIGTERM or Ctrl-C. Without --address a local Ray instance starts; "
        "SIGHUP reloads bundles whose file changed. Needs: pip install 'runtime-lite[serve]'.",
    )  # fmt: skip
    serve.add_argument("bundles", nargs="+", metavar="BUNDLE", help="a bundle path, or NAME=PATH; repeatable")
    serve.add_argument("--name", help="the model name of a single bundle (default: the file name without .aotb)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback)")
    serve.add_argument("--port", type=_positive, default=8000, help="HTTP port (default 8000)")
    serve.add_argument(
        "--grpc-port", type=_positive, metavar="PORT",
        help="also serve the Open Inference Protocol over gRPC (inference.GRPCInferenceService, what "
        "tritonclient.grpc calls) on PORT, same host (default: off)",
    )  # fmt: skip
    serve.add_argument(
        "--max-request-bytes", type=_positive, default=DEFAULT_MAX_REQUEST_BYTES, metavar="BYTES",
        help="a request's tensors beyond this are refused: HTTP 413, gRPC RESOURCE_EXHAUSTED "
        f"(default {DEFAULT_MAX_REQUEST_BYTES >> 20} MiB, after decompression)",
    )  # fmt: skip
    serve.add_argument("--replicas", type=_positive, default=1, help="replicas of the server (default 1)")
    serve.add_argument(
        "--max-batch-size", type=_positive, default=1, metavar="ROWS",
        help="dynamic batching: concatenate requests along the bundle's symbolic batch dim up to ROWS rows "
        "(default 1: off; bundles with a fixed batch never batch)",
    )  # fmt: skip
    serve.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (default 5 ms)")
    serve.add_argument(
        "--batch-coupled-rows", action="store_true",
        help="batch even a bundle whose rows change each other's answers (dynamic int8: one activation range per "
        "batch); without it such a bundle runs each request alone, and its metadata says why",
    )  # fmt: skip
    serve.add_argument(
        "--max-ongoing-requests", type=_positive,
        help="requests a replica takes at once (default max(32, 2 x max batch size)); the rest queue in Ray",
    )  # fmt: skip
    serve.add_argument(
        "--address", help="an existing Ray cluster: 'auto' or ray://HOST:10001 (default: start a local one)"
    )
    serve.add_argument(
        "--ingress", choices=INGRESSES,
        help="how HTTP reaches the replicas of a local Ray instance: haproxy (default where ray[serve] brought "
        "its HAProxy binary: ~5 ms per request, a dead replica's requests replayed) or proxy (Ray Serve's "
        "Python proxy: ~20 ms, a dead replica's requests get 500)",
    )  # fmt: skip
    serve.add_argument(
        "--request-timeout", type=_positive, default=REQUEST_TIMEOUT_SECONDS, metavar="SECONDS",
        help="a request's headers and body must arrive within this, or it is answered 408 and closed "
        f"(default {REQUEST_TIMEOUT_SECONDS})",
    )  # fmt: skip
    serve.add_argument("--cpus-per-replica", type=float, default=1.0, help="Ray CPUs reserved per replica (default 1)")
    serve.add_argument("--threads", type=_positive, help="BLAS threads in each replica (default: Ray's, 1 per CPU)")
    serve.add_argument(
        "--metrics-port", type=_positive, help="Prometheus port of the local Ray instance (default: Ray picks one)"
    )
    serve.add_argument("--cache-dir", type=Path, help="the TensorRT engine cache every replica shares")
    _backend_option_argument(serve)
    serve.set_defaults(handler=_serve)


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The commands, with their exit status; ``argv`` None means this process's own arguments."""
    try:
        args = build_parser().parse_args(argv)
        _configure_logging(args.verbose)
        threads = getattr(args, "threads", None)
        if argv is None and threads is not None and bench.configured_threads() != threads:
            _reexec_with_threads(sys.argv[1:], threads)
        return args.handler(args)
    except RuntimeLiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    """The ``runtime-lite`` console script."""
    sys.exit(main())
