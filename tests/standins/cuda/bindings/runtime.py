"""Test stand-in for ``cuda.bindings.runtime``: host memory posing as device memory.

Same calling convention as the real module: every call returns ``(err, *results)``.
Work "enqueued" on a stream runs at once, except while the stream is being captured
into a graph: then it is recorded, and ``cudaGraphLaunch`` replays it, which is what a
graph means. ``CALLS`` counts every call by name, so tests can see what a run did.
"""

from __future__ import annotations

import collections
import ctypes
import enum
import itertools
import os
import threading
from types import SimpleNamespace

CALLS: collections.Counter = collections.Counter()
#: The streams work was enqueued on, most recent last.
STREAMS: collections.deque = collections.deque(maxlen=256)


class cudaError_t(enum.IntEnum):  # noqa: N801 - the real name
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorStreamCaptureUnsupported = 900


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


class cudaStreamCaptureMode(enum.IntEnum):  # noqa: N801
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


cudaEventDisableTiming = 2  # noqa: N816
cudaStreamNonBlocking = 1  # noqa: N816

_ALLOCATIONS: dict[int, ctypes.Array] = {}
_IDS = itertools.count(16)  # 1 and 2 are CUDA's legacy and per-thread default streams
_CAPTURES: dict[int, list] = {}
_LOCK = threading.Lock()
OK = cudaError_t.cudaSuccess


def _count(fn):
    def counted(*args):
        CALLS[fn.__name__] += 1
        return fn(*args)

    counted.__name__ = fn.__name__
    return counted


def enqueue(stream, work) -> None:
    """Run ``work`` now, or record it if ``stream`` is being captured (TensorRT's stand-in uses this too)."""
    STREAMS.append(int(stream))
    with _LOCK:
        captured = _CAPTURES.get(int(stream))
        if captured is not None:
            captured.append(work)
            return
    work()


@_count
def cudaGetErrorString(err):  # noqa: N802
    return OK, f"stand-in error {int(err)}".encode()


@_count
def cudaGetDeviceCount():  # noqa: N802
    return OK, 1


@_count
def cudaGetDevice():  # noqa: N802
    return OK, 0


@_count
def cudaGetDeviceProperties(device):  # noqa: N802
    major, _, minor = os.environ.get("STANDIN_GPU_CC", "8.6").partition(".")
    name = os.environ.get("STANDIN_GPU_NAME", "Stand-in GPU").encode()
    return OK, SimpleNamespace(name=name, major=int(major), minor=int(minor or 0))


@_count
def cudaRuntimeGetVersion():  # noqa: N802
    return OK, 12080


def _allocate(nbytes):
    buffer = ctypes.create_string_buffer(nbytes + 256)
    address = (ctypes.addressof(buffer) + 255) // 256 * 256  # cudaMalloc's alignment (TensorRT relies on it)
    with _LOCK:
        _ALLOCATIONS[address] = buffer
    return OK, address


@_count
def cudaMalloc(nbytes):  # noqa: N802
    return _allocate(nbytes)


@_count
def cudaMallocHost(nbytes):  # noqa: N802
    return _allocate(nbytes)


@_count
def cudaMallocAsync(nbytes, stream):  # noqa: N802
    return _allocate(nbytes)


def _free(address):
    with _LOCK:
        found = _ALLOCATIONS.pop(int(address), None)
    return (OK,) if found is not None else (cudaError_t.cudaErrorInvalidValue,)


@_count
def cudaFree(address):  # noqa: N802
    return _free(address)


@_count
def cudaFreeHost(address):  # noqa: N802
    return _free(address)


@_count
def cudaFreeAsync(address, stream):  # noqa: N802
    return _free(address)


def live_allocations() -> int:
    with _LOCK:
        return len(_ALLOCATIONS)


@_count
def cudaMemcpyAsync(dst, src, nbytes, kind, stream):  # noqa: N802
    enqueue(stream, lambda: ctypes.memmove(int(dst), int(src), nbytes))
    return (OK,)


@_count
def cudaMemcpy(dst, src, nbytes, kind):  # noqa: N802
    ctypes.memmove(int(dst), int(src), nbytes)
    return (OK,)


@_count
def cudaStreamCreate():  # noqa: N802
    return OK, next(_IDS)


@_count
def cudaStreamCreateWithFlags(flags):  # noqa: N802
    return OK, next(_IDS)


@_count
def cudaStreamSynchronize(stream):  # noqa: N802
    return (OK,)


@_count
def cudaStreamDestroy(stream):  # noqa: N802
    return (OK,)


@_count
def cudaEventCreateWithFlags(flags):  # noqa: N802
    return OK, next(_IDS)


@_count
def cudaEventRecord(event, stream):  # noqa: N802
    return (OK,)


@_count
def cudaStreamWaitEvent(stream, event, flags):  # noqa: N802
    return (OK,)


@_count
def cudaEventSynchronize(event):  # noqa: N802
    return (OK,)


@_count
def cudaEventDestroy(event):  # noqa: N802
    return (OK,)


@_count
def cudaStreamBeginCapture(stream, mode):  # noqa: N802
    if os.environ.get("STANDIN_NO_GRAPHS"):
        return (cudaError_t.cudaErrorStreamCaptureUnsupported,)
    with _LOCK:
        _CAPTURES[int(stream)] = []
    return (OK,)


@_count
def cudaStreamEndCapture(stream):  # noqa: N802
    with _LOCK:
        work = _CAPTURES.pop(int(stream), None)
    if work is None:
        return cudaError_t.cudaErrorInvalidValue, None
    return OK, SimpleNamespace(work=work)


@_count
def cudaGraphInstantiate(graph, flags):  # noqa: N802
    return OK, SimpleNamespace(work=list(graph.work))


@_count
def cudaGraphLaunch(graph_exec, stream):  # noqa: N802
    for work in graph_exec.work:
        enqueue(stream, work)
    return (OK,)


@_count
def cudaGraphDestroy(graph):  # noqa: N802
    return (OK,)


@_count
def cudaGraphExecDestroy(graph_exec):  # noqa: N802
    return (OK,)
