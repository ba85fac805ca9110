"""Every cudart call runtime_lite makes, with the argument types it passes, against the real cuda.bindings.

Needs cuda-python only, not a device: the bindings check their arguments before they call
CUDA, so a wrong type is a TypeError here, while on a machine without a usable driver each
call returns an error code instead (which is fine: the types were accepted). This is the
check the stand-in (tests/standins/cuda) cannot make: that it mirrors the real signatures.
Where a device exists it is skipped (the handles here are bogus); test_gpu_runner.py runs there.
"""

from __future__ import annotations

import numpy as np
import pytest

cudart = pytest.importorskip("cuda.bindings.runtime", reason="cuda-python (cuda.bindings) is not installed")
if "standins" in (getattr(cudart, "__file__", "") or ""):  # pragma: no cover - only when a test put it first
    pytest.skip("cuda.bindings is the test stand-in here", allow_module_level=True)


_COUNT = cudart.cudaGetDeviceCount()
if _COUNT[0] == cudart.cudaError_t.cudaSuccess and _COUNT[1]:  # bogus handles would reach a real driver
    pytest.skip(
        "a CUDA device is here: tests/gpu/test_gpu_runner.py makes these calls for real", allow_module_level=True
    )


def _err(result):
    err = result[0] if isinstance(result, tuple) else result
    assert isinstance(err, cudart.cudaError_t)
    return err


def test_the_runner_calls_take_the_argument_types_we_pass():
    stream, address, nbytes = 12345, 1 << 20, 64  # ints: what the runner keeps (int(cudaStream_t), pointers)
    host = np.zeros(16, np.float32)
    h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
    event = cudart.cudaEvent_t()
    graph, graph_exec = cudart.cudaGraph_t(), cudart.cudaGraphExec_t()
    mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
    calls = [
        ("cudaGetDeviceCount",), ("cudaGetDevice",), ("cudaGetDeviceProperties", 0), ("cudaRuntimeGetVersion",),
        ("cudaStreamCreate",), ("cudaStreamCreateWithFlags", cudart.cudaStreamNonBlocking), ("cudaMalloc", nbytes), ("cudaMallocHost", nbytes), ("cudaMallocAsync", nbytes, stream),
        ("cudaMemcpyAsync", address, host.ctypes.data, nbytes, h2d, stream),
        ("cudaMemcpy", host.ctypes.data, address, nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost),
        ("cudaEventCreateWithFlags", cudart.cudaEventDisableTiming), ("cudaEventRecord", event, stream),
        ("cudaStreamWaitEvent", stream, event, 0), ("cudaEventSynchronize", event), ("cudaEventDestroy", event),
        ("cudaStreamBeginCapture", stream, mode), ("cudaStreamEndCapture", stream),
        ("cudaGraphInstantiate", graph, 0), ("cudaGraphLaunch", graph_exec, stream),
        ("cudaGraphExecDestroy", graph_exec), ("cudaGraphDestroy", graph),
        ("cudaStreamSynchronize", stream), ("cudaFreeAsync", address, stream), ("cudaFree", address),
        ("cudaFreeHost", address), ("cudaStreamDestroy", stream),
    ]  # fmt: skip
    for name, *args in calls:
        _err(getattr(cudart, name)(*args))  # a TypeError would name the call and argument
    err, text = cudart.cudaGetErrorString(cudart.cudaError_t.cudaErrorInvalidValue)
    assert isinstance(text, bytes) and text
    assert int(cudart.cudaStream_t(stream)) == stream
