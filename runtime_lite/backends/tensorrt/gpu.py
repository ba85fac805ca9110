"""TensorRT and CUDA, touched only here: the device probe and the engine runner.

``tensorrt`` and ``cuda.bindings`` (cuda-python >= 12.6; ``cuda.cudart`` is gone
in 13) are imported on first use, so runtime_lite imports and runs on machines
that have neither. Every cudart call returns ``(err, *results)``; ``_cuda``
turns a failure into one line naming the call.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime_lite.backends.tensorrt.spec import DeviceSignature

logger = logging.getLogger("runtime_lite.tensorrt")


class GpuUnavailable(Exception):
    """No usable TensorRT + CUDA device here; the message says which part is missing."""


class EngineIncompatible(Exception):
    """TensorRT refused the engine (``deserialize_cuda_engine`` returned None)."""


@functools.cache
def _modules() -> tuple[Any, Any]:
    try:
        import tensorrt
    except ImportError as e:
        raise GpuUnavailable(f"tensorrt is not installed ({e})") from None
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as e:
        raise GpuUnavailable(f"cuda-python's cuda.bindings is not installed ({e})") from None
    return tensorrt, cudart


def _cuda(cudart: Any, call: str, *args: Any) -> Any:
    err, *results = getattr(cudart, call)(*args)
    if err != cudart.cudaError_t.cudaSuccess:
        _, text = cudart.cudaGetErrorString(err)
        raise RuntimeError(f"CUDA {call} failed: {text.decode() if isinstance(text, bytes) else text}")
    return results[0] if len(results) == 1 else tuple(results) if results else None


@functools.cache
def probe() -> tuple[DeviceSignature, Any, Any]:
    """(signature of this machine's GPU, tensorrt, cudart); GpuUnavailable with the reason otherwise."""
    trt, cudart = _modules()
    try:
        count = _cuda(cudart, "cudaGetDeviceCount")
    except RuntimeError as e:
        raise GpuUnavailable(f"no CUDA device ({e})") from None
    if not count:
        raise GpuUnavailable("no CUDA device")
    device = _cuda(cudart, "cudaGetDevice")
    props = _cuda(cudart, "cudaGetDeviceProperties", device)
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    signature = DeviceSignature(
        tensorrt=trt.__version__,
        cuda=str(_cuda(cudart, "cudaRuntimeGetVersion")),
        gpu=name.rstrip("\0").strip(),
        compute_capability=f"{props.major}.{props.minor}",
    )
    return signature, trt, cudart


class _Buffer:
    """A device buffer and its pinned host staging twin, grown (never shrunk) to the largest use."""

    def __init__(self, cudart: Any):
        self.cudart, self.nbytes, self.device, self.host = cudart, 0, 0, 0

    def ensure(self, nbytes: int) -> None:
        if nbytes <= self.nbytes:
            return
        self.release()
        self.device = _cuda(self.cudart, "cudaMalloc", nbytes)
        self.host = _cuda(self.cudart, "cudaMallocHost", nbytes)
        self.nbytes = nbytes

    def host_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        raw = (ctypes.c_char * max(self.nbytes, 1)).from_address(self.host)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def release(self) -> None:
        if self.nbytes:
            self.cudart.cudaFree(self.device)
            self.cudart.cudaFreeHost(self.host)
            self.nbytes = 0


class EngineRunner:
    """One deserialized engine with its context, stream and buffers; runs are serialised by a lock.

    Buffers are allocated at the first run (and grown for a larger batch), then
    reused: a run is H2D copies from pinned staging, ``execute_async_v3`` and
    D2H copies on one stream, then one synchronisation.
    """

    def __init__(self, engine_bytes: bytes, input_names: Sequence[str], output_names: Sequence[str], *,
                 allow_host_code: bool = False):  # fmt: skip
        _, trt, cudart = probe()
        self.trt, self.cudart = trt, cudart
        self._trt_logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self._trt_logger)
        if allow_host_code:
            self.runtime.engine_host_code_allowed = True
        self.engine = self.runtime.deserialize_cuda_engine(bytes(engine_bytes))
        if self.engine is None:
            raise EngineIncompatible("TensorRT could not deserialize the engine (version or GPU mismatch)")
        names = {self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)}
        missing = [n for n in (*input_names, *output_names) if n not in names]
        if missing:
            raise EngineIncompatible(f"the engine has no tensor(s) {missing}")
        self.inputs, self.outputs = tuple(input_names), tuple(output_names)
        self.dtypes = {n: np.dtype(trt.nptype(self.engine.get_tensor_dtype(n))) for n in names}
        self.context = self.engine.create_execution_context()
        self.stream = _cuda(cudart, "cudaStreamCreate")
        self.buffers = {n: _Buffer(cudart) for n in (*self.inputs, *self.outputs)}
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        cudart, h2d, d2h = self.cudart, self._kind("HostToDevice"), self._kind("DeviceToHost")
        with self._lock:
            for name, x in zip(self.inputs, inputs):
                x = np.ascontiguousarray(x, dtype=self.dtypes[name])
                buffer = self.buffers[name]
                buffer.ensure(x.nbytes)
                np.copyto(buffer.host_array(x.shape, x.dtype), x)
                _cuda(cudart, "cudaMemcpyAsync", buffer.device, buffer.host, x.nbytes, h2d, self.stream)
                self.context.set_input_shape(name, x.shape)
                self.context.set_tensor_address(name, buffer.device)
            shapes = {}
            for name in self.outputs:
                shapes[name] = tuple(self.context.get_tensor_shape(name))
                buffer = self.buffers[name]
                buffer.ensure(int(np.prod(shapes[name], dtype=np.int64)) * self.dtypes[name].itemsize)
                self.context.set_tensor_address(name, buffer.device)
            if not self.context.execute_async_v3(self.stream):
                raise RuntimeError("TensorRT execute_async_v3 failed")
            results = []
            for name in self.outputs:
                buffer = self.buffers[name]
                out = buffer.host_array(shapes[name], self.dtypes[name])
                _cuda(cudart, "cudaMemcpyAsync", buffer.host, buffer.device, out.nbytes, d2h, self.stream)
                results.append(out)
            _cuda(cudart, "cudaStreamSynchronize", self.stream)
            return [r.copy() for r in results]  # the staging buffers are reused by the next run

    def _kind(self, direction: str) -> Any:
        return getattr(self.cudart.cudaMemcpyKind, f"cudaMemcpy{direction}")

    def close(self) -> None:
        for buffer in self.buffers.values():
            buffer.release()
        if self.stream is not None:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: CUDA may already be gone
            pass
