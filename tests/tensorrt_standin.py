"""Switch the test stand-ins for tensorrt and cuda.bindings on, in this process or in a child's environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

STANDINS = Path(__file__).parent / "standins"
#: Only the lean runtime's stand-in (``tensorrt_lean``), for a machine without the full TensorRT.
LEAN_STANDINS = Path(__file__).parent / "standins_lean"
REPO = Path(__file__).parent.parent


def _purge() -> None:
    from runtime_lite.backends.tensorrt import gpu
    from runtime_lite.execution import device

    for name in list(sys.modules):
        if name.startswith("tensorrt") or name == "cuda" or name.startswith("cuda."):
            del sys.modules[name]
    gpu.probe.cache_clear()
    gpu._modules.cache_clear()
    device.cudart.cache_clear()
    device._memory.cache_clear()


def device_env(cc: str = "8.6", version: str = "10.13.0", gpu: str = "Stand-in RTX", build_log: str = "") -> dict:
    return {"STANDIN_GPU_CC": cc, "STANDIN_TRT_VERSION": version, "STANDIN_GPU_NAME": gpu,
            "STANDIN_TRT_BUILD_LOG": build_log}  # fmt: skip


class StandinMachine:
    """This process as a machine with the stand-in GPU; ``become`` switches to another GPU or TensorRT."""

    def __init__(self, monkeypatch, build_log: Path):
        self.monkeypatch, self.build_log = monkeypatch, build_log
        sys.path.insert(0, str(STANDINS))

    def become(self, cc: str = "8.6", version: str = "10.13.0", gpu: str = "Stand-in RTX", lean: bool = False) -> None:
        """This GPU and TensorRT; ``lean``: only TensorRT's lean runtime is installed (``import tensorrt`` fails)."""
        for key, value in device_env(cc, version, gpu, str(self.build_log)).items():
            self.monkeypatch.setenv(key, value)
        _purge()
        if str(LEAN_STANDINS) in sys.path:
            sys.path.remove(str(LEAN_STANDINS))
        if lean:
            sys.path.insert(0, str(LEAN_STANDINS))
            sys.modules["tensorrt"] = None  # what Python does for a module that must not import

    @property
    def builds(self) -> int:
        return len(self.build_log.read_text().splitlines()) if self.build_log.exists() else 0

    def close(self) -> None:
        sys.path.remove(str(STANDINS))
        if str(LEAN_STANDINS) in sys.path:
            sys.path.remove(str(LEAN_STANDINS))
        _purge()


def child_env(cache_dir: Path, **device) -> dict:
    """The environment of a child process that sees the stand-ins and the given device."""
    env = dict(os.environ, **device_env(**device))
    env["PYTHONPATH"] = os.pathsep.join([str(STANDINS), str(REPO), env.get("PYTHONPATH", "")])
    env["AOT_CACHE_DIR"] = str(cache_dir)
    env.pop("AOT_ALLOW_ENGINE_BUILD", None)
    return env


class StandinGpuArray:
    """A test double of a CuPy/torch.cuda array on the stand-in GPU: stand-in device memory behind
    ``__cuda_array_interface__`` (version 3, with a producer stream) or, with ``dlpack_only``, behind
    ``__dlpack__``/``__dlpack_device__`` alone, as a DLPack-only library exports it."""

    def __init__(self, data: np.ndarray, *, stream: int | None = None, dlpack_only: bool = False, offset: int = 0):
        from cuda.bindings import runtime as cudart

        data = np.ascontiguousarray(data)
        self.cudart, self.shape, self.dtype, self.stream = cudart, data.shape, data.dtype, stream
        _, self.base = cudart.cudaMalloc(data.nbytes + offset)
        self.ptr = self.base + offset  # offset: a misaligned view, as a slice of a larger array is
        cudart.cudaMemcpy(self.ptr, data.ctypes.data, data.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)
        self.dlpack_only = dlpack_only
        self.dlpack_streams: list = []

    def __getattr__(self, name):
        if name == "__cuda_array_interface__" and not self.dlpack_only:
            return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                    "strides": None, "stream": self.stream}  # fmt: skip
        raise AttributeError(name)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        from runtime_lite.execution.dlpack import export_dlpack

        self.dlpack_streams.append(stream)
        return export_dlpack(self, self.ptr, self.shape, self.dtype, (2, 0))

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.cudart.cudaMemcpy(out.ctypes.data, self.ptr, out.nbytes, self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
        return out

    def __del__(self):
        self.cudart.cudaFree(self.base)
