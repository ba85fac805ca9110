"""Test stand-in for ``cuda.bindings.runtime``: host memory posing as device memory.

Same calling convention as the real module: every call returns ``(err, *results)``.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import os
from types import SimpleNamespace


class cudaError_t(enum.IntEnum):  # noqa: N801 - the real name
    cudaSuccess = 0
    cudaErrorMemoryAllocation = 2


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


_ALLOCATIONS: dict[int, ctypes.Array] = {}
_STREAMS = itertools.count(1)
OK = cudaError_t.cudaSuccess


def cudaGetErrorString(err):  # noqa: N802
    return OK, f"stand-in error {int(err)}".encode()


def cudaGetDeviceCount():  # noqa: N802
    return OK, 1


def cudaGetDevice():  # noqa: N802
    return OK, 0


def cudaGetDeviceProperties(device):  # noqa: N802
    major, _, minor = os.environ.get("STANDIN_GPU_CC", "8.6").partition(".")
    name = os.environ.get("STANDIN_GPU_NAME", "Stand-in GPU").encode()
    return OK, SimpleNamespace(name=name, major=int(major), minor=int(minor or 0))


def cudaRuntimeGetVersion():  # noqa: N802
    return OK, 12080


def _allocate(nbytes):
    buffer = ctypes.create_string_buffer(nbytes)
    address = ctypes.addressof(buffer)
    _ALLOCATIONS[address] = buffer
    return OK, address


cudaMalloc = _allocate
cudaMallocHost = _allocate


def cudaFree(address):  # noqa: N802
    _ALLOCATIONS.pop(address, None)
    return (OK,)


cudaFreeHost = cudaFree


def cudaMemcpyAsync(dst, src, nbytes, kind, stream):  # noqa: N802
    ctypes.memmove(dst, src, nbytes)
    return (OK,)


def cudaStreamCreate():  # noqa: N802
    return OK, next(_STREAMS)


def cudaStreamSynchronize(stream):  # noqa: N802
    return (OK,)


def cudaStreamDestroy(stream):  # noqa: N802
    return (OK,)
