"""A test-only double of a TensorRT engine whose execution is real CUDA work: ``y = 2x + 1`` with CuPy.

For GPU machines without TensorRT (and the runner benchmark): ``EngineRunner.for_engine``
runs it like a deserialized engine. ``execute_async_v3(stream)`` launches one CuPy
elementwise kernel on the bound device pointers, on the stream it is given, so the
runner's copies, streams, events and graphs are exercised by real CUDA; with
``noop=True`` it launches nothing (the runner's own cost, as the benchmark measures it).
"""

from __future__ import annotations

import numpy as np


def _kernel():
    import cupy

    return cupy.ElementwiseKernel("float32 x", "float32 y", "y = 2.0f * x + 1.0f", "runtime_lite_test_two_x_plus_one")


class TwoXPlusOneEngine:
    """Tensors ``x`` (input) and ``y`` (output), float32, any shape: y has x's shape."""

    num_io_tensors = 2

    def __init__(self, noop: bool = False):
        self.noop = noop
        self.kernel = None if noop else _kernel()

    def get_tensor_name(self, i: int) -> str:
        return ("x", "y")[i]

    def get_tensor_dtype(self, name: str) -> np.dtype:
        return np.dtype(np.float32)

    def create_execution_context(self) -> _Context:
        return _Context(self)


class _Context:
    def __init__(self, engine: TwoXPlusOneEngine):
        self.engine, self.shape, self.addresses, self.launches = engine, (), {}, 0

    def set_input_shape(self, name: str, shape) -> bool:
        self.shape = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.shape

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = int(address)
        return True

    def execute_async_v3(self, stream: int) -> bool:
        self.launches += 1
        if self.engine.noop:
            return True
        import cupy

        count = int(np.prod(self.shape, dtype=np.int64))
        with cupy.cuda.ExternalStream(int(stream)):
            x, y = (self._view(self.addresses[n], count) for n in ("x", "y"))
            self.engine.kernel(x, y)
        return True

    @staticmethod
    def _view(address: int, count: int):
        import cupy

        memory = cupy.cuda.UnownedMemory(address, count * 4, owner=None)
        return cupy.ndarray((count,), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))


def runner(noop: bool = False, cuda_graphs: bool = False):
    """An EngineRunner over the double (real cuda-python underneath)."""
    from runtime_lite.backends.tensorrt.gpu import EngineRunner

    return EngineRunner.for_engine(TwoXPlusOneEngine(noop), ["x"], ["y"], cuda_graphs=cuda_graphs)


def gpu_missing() -> str | None:
    """Why the runner cannot run real CUDA here (None where it can): CuPy, cuda-python and a device."""
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e})"
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as e:
        return f"cuda-python's cuda.bindings is not installed ({e})"
    if "standins" in (getattr(cudart, "__file__", "") or ""):
        return "cuda.bindings is the test stand-in, not the real library"
    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess or not count:
        return f"no CUDA device ({err})"
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy built for another CUDA
        return f"CuPy cannot use the device ({e})"
    return None
