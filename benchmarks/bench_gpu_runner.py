"""What the TensorRT engine runner costs over the copies it must make, on a GPU (needs CuPy and cuda-python).

    python benchmarks/bench_gpu_runner.py              # prints the table (markdown) for BENCHMARKS.md
    python benchmarks/bench_gpu_runner.py --reps 2000

The engine is the test double from tests/gpu/cupy_engine.py with ``noop=True``: its
``execute_async_v3`` launches nothing, so what is timed is the runner itself (no
TensorRT needed on the GPU machine). Per size, alternately in one process on one GPU:

* host floor: the bare copies, with CuPy, on one stream: a pinned input buffer to the
  device, the device to a pinned output buffer, one stream synchronisation;
* host floor + staging: the same plus writing the caller's (pageable) array into the
  pinned buffer, which any runner taking numpy input must do;
* runner host: ``EngineRunner.run([x])`` with a numpy array, with and without CUDA graphs,
  and with the input in the runner's pinned memory (``host_array``: no staging copy, the
  like-for-like comparison with the host floor);
* device floor: one device-to-device copy of the output bytes and a synchronisation
  (the least a device-resident call costs);
* runner device: ``run([cupy_array], outputs_on="device")`` then ``synchronize()`` on the result.

Microseconds per call, median of ``--rounds`` rounds of ``--reps`` calls. The issue's target:
runner host within 1.15x of the host floor.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = {"1x1000": (1, 1000), "1x3x224x224": (1, 3, 224, 224), "8x3x224x224": (8, 3, 224, 224)}


def _requirements() -> str | None:
    from tests.gpu.cupy_engine import gpu_missing

    return gpu_missing()


def _per_call(fn, reps: int, rounds: int) -> float:
    for _ in range(max(reps // 10, 5)):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - start) / reps * 1e6)
    return statistics.median(times)


def measure(shape: tuple[int, ...], reps: int, rounds: int) -> dict[str, float]:
    import cupy

    from tests.gpu.cupy_engine import runner

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    nbytes = x.nbytes
    stream = cupy.cuda.Stream(non_blocking=False)
    pinned_in = np.frombuffer(cupy.cuda.alloc_pinned_memory(nbytes), np.float32, x.size).reshape(shape)
    pinned_out = np.frombuffer(cupy.cuda.alloc_pinned_memory(nbytes), np.float32, x.size).reshape(shape)
    device_in, device_out = cupy.empty(shape, cupy.float32), cupy.empty(shape, cupy.float32)
    h2d, d2h, d2d = (cupy.cuda.runtime.memcpyHostToDevice, cupy.cuda.runtime.memcpyDeviceToHost,
                     cupy.cuda.runtime.memcpyDeviceToDevice)  # fmt: skip
    memcpy = cupy.cuda.runtime.memcpyAsync

    def floor():
        memcpy(device_in.data.ptr, pinned_in.ctypes.data, nbytes, h2d, stream.ptr)
        memcpy(pinned_out.ctypes.data, device_in.data.ptr, nbytes, d2h, stream.ptr)
        stream.synchronize()

    def floor_staging():
        np.copyto(pinned_in, x)
        floor()

    def device_floor():
        memcpy(device_out.data.ptr, device_in.data.ptr, nbytes, d2d, stream.ptr)
        stream.synchronize()

    plain, graphed = runner(noop=True), runner(noop=True, cuda_graphs=True)
    on_gpu = cupy.asarray(x)
    pinned_x = plain.host_array(shape)
    pinned_x[...] = x

    def run_device():
        plain.run([on_gpu], outputs_on="device")[0].synchronize()

    cases = {
        "host floor": floor,
        "host floor + staging": floor_staging,
        "runner host": lambda: plain.run([x]),
        "runner host, pinned in": lambda: plain.run([pinned_x]),
        "runner host, graphs": lambda: graphed.run([x]),
        "device floor": device_floor,
        "runner device": run_device,
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(3):  # alternate, so drift on a shared machine hits every case alike
        for name, fn in cases.items():
            results[name].append(_per_call(fn, reps, rounds))
    plain.close()
    graphed.close()
    return {name: min(values) for name, values in results.items()}


def describe_machine() -> str:
    import cupy
    from cuda.bindings import runtime as cudart

    _, props = cudart.cudaGetDeviceProperties(0)
    gpu = props.name.decode(errors="replace").rstrip("\0") if isinstance(props.name, bytes) else str(props.name)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    _, version = cudart.cudaRuntimeGetVersion()
    return f"GPU {gpu} (CUDA runtime {version}, CuPy {cupy.__version__}); CPU {cpu}; Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    missing = _requirements()
    if missing is not None:
        print(f"bench_gpu_runner: needs a CUDA GPU with CuPy and cuda-python: {missing}", file=sys.stderr)
        return 2
    print(describe_machine())
    print()
    columns = ["host floor", "host floor + staging", "runner host", "runner host, pinned in", "runner host, graphs",
               "device floor", "runner device"]  # fmt: skip
    print("| size | " + " | ".join(f"{c} (us)" for c in columns) + " | runner / floor + staging | pinned in / floor |")
    print("|---" * (len(columns) + 3) + "|")
    for label, shape in SIZES.items():
        row = measure(shape, args.reps, args.rounds)
        staged = row["runner host"] / row["host floor + staging"]
        pinned = row["runner host, pinned in"] / row["host floor"]
        print(f"| {label} | " + " | ".join(f"{row[c]:.1f}" for c in columns) + f" | {staged:.2f}x | {pinned:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
