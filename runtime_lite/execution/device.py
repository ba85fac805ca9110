"""GPU arrays in and out of a run: the caller's (read through their protocols) and ours (``DeviceArray``).

runtime_lite imports neither CuPy nor torch. A caller's GPU array is recognised by
``__dlpack_device__`` (a CUDA device) or ``__cuda_array_interface__`` and wrapped in
a :class:`DeviceInput`, which knows its shape and dtype for the signature checks and
hands its address to an engine on the engine's stream, synchronised:

* ``__cuda_array_interface__`` version 3 names the producer's stream: an event
  recorded there is waited on by ours (CuPy);
* without that (torch exports version 2), ``__dlpack__(stream=ours)`` makes the
  producer order its pending work before ours, which is DLPack's contract;
* otherwise the data is taken as produced on the legacy default stream, which every
  blocking stream (runners create only those) already waits for.

Results a caller asked to keep on the GPU (``outputs_on="device"``) are
:class:`DeviceArray`\\ s: they own their memory (stream-ordered ``cudaMallocAsync``,
freed by ``cudaFreeAsync`` when the last reference goes), and export it through
``__cuda_array_interface__`` (version 3, with the stream it is ready on) and
``__dlpack__`` (the consumer's stream waits for it, asynchronously), so
``cupy.asarray(x)`` and ``torch.from_dlpack(x)`` take it without a copy.

As with CuPy's own arrays, memory is freed in order on the stream it was made on:
an array a consumer reads on another stream through ``__cuda_array_interface__``
must stay referenced until that work is done (through ``__dlpack__`` we know the
consumer's stream and wait for it before freeing).

Host plans never see device arrays: the plan converts a device value to numpy once,
where a host kernel or a host-only backend reads it (``to_host``).
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite.errors import InputError
from runtime_lite.execution.dlpack import CUDA_DEVICES, KDL_CUDA, MAX_DIMS, DLPackView, export_dlpack, import_dlpack

OUTPUTS_ON = ("host", "device")
#: CUDA's stream handles with a meaning of their own.
LEGACY_STREAM, PER_THREAD_STREAM = 1, 2


class CudaUnavailable(RuntimeError):
    """cuda-python (``cuda.bindings``) is not installed, so device arrays cannot be used here."""


@functools.cache
def cudart() -> Any:
    """``cuda.bindings.runtime``, imported on first use (cuda-python >= 12.6)."""
    try:
        from cuda.bindings import runtime
    except ImportError as e:
        raise CudaUnavailable(f"device arrays need cuda-python's cuda.bindings, which is not installed ({e})") from None
    return runtime


def check(cuda: Any, call: str, *args: Any) -> Any:
    """Call ``cuda.<call>(*args)``; its results, or RuntimeError naming the call (every call returns ``(err, *results)``)."""
    err, *results = getattr(cuda, call)(*args)
    if err != cuda.cudaError_t.cudaSuccess:
        _, text = cuda.cudaGetErrorString(err)
        raise RuntimeError(f"CUDA {call} failed: {text.decode() if isinstance(text, bytes) else text}")
    return results[0] if len(results) == 1 else tuple(results) if results else None


def stream_handle(stream: Any) -> int:
    """The CUDA stream handle of a caller's stream: an int, ``__cuda_stream__`` (CUDA's stream protocol),
    ``.cuda_stream`` (torch.cuda.Stream), ``.ptr`` (cupy.cuda.Stream) or a cuda-python ``cudaStream_t``."""
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise InputError(f"stream: {type(stream).__name__} is not a CUDA stream (pass an int handle, "
                         "a torch.cuda.Stream or a cupy.cuda.Stream)") from None  # fmt: skip


@dataclass(frozen=True)
class DeviceRun:
    """How one ``Module.run`` treats the GPU: where outputs go, and the caller's stream (None: each runner's own)."""

    outputs_on: str = "host"
    stream: int | None = None
    #: the caller's stream object itself, held by results freed on that stream (see EngineRunner.run)
    stream_object: Any = None

    @property
    def stream_argument(self) -> Any:
        """What to hand a runner: the caller's object where there is one (the results keep it alive)."""
        return self.stream if self.stream_object is None else self.stream_object


_RUN: contextvars.ContextVar[DeviceRun | None] = contextvars.ContextVar("runtime_lite_device_run", default=None)


def current_run() -> DeviceRun | None:
    """The device settings of the run in progress, None for a plain host run."""
    return _RUN.get()


def activate(run: DeviceRun | None) -> contextvars.Token:
    return _RUN.set(run)


def deactivate(token: contextvars.Token) -> None:
    _RUN.reset(token)


def is_device_array(value: Any) -> bool:
    """True for a GPU array (ours, CuPy, torch.cuda, anything exporting CUDA memory); numpy is never one."""
    if type(value) is np.ndarray:
        return False
    if getattr(type(value), "on_device", False):
        return True
    device = getattr(value, "__dlpack_device__", None)
    if device is not None:
        try:
            return device()[0] in CUDA_DEVICES
        except Exception:
            return False
    try:
        return isinstance(value.__cuda_array_interface__, dict)
    except Exception:  # torch raises for CPU tensors and tensors that require grad
        return False


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


class DeviceInput:
    """A caller's GPU array, as the signature checks and an engine binding need it."""

    on_device = True

    def __init__(self, value: Any, name: str = "input"):
        self.value, self.name = value, name
        self._view: DLPackView | None = None
        self._ready_stream: int | None = None
        self.producer_stream: int | None = None
        interface = None
        try:
            interface = value.__cuda_array_interface__
        except Exception:
            pass
        if isinstance(interface, dict):
            self.shape, self.dtype, self.ptr, self.byte_strides, self.producer_stream = _read_interface(interface, name)
            self._dlpack_sync = self.producer_stream is None and hasattr(value, "__dlpack__")
        else:  # DLPack only: the producer orders its work before the legacy default stream
            try:
                self._view = import_dlpack(value, LEGACY_STREAM)
            except Exception as e:
                raise InputError(f"input '{name}': cannot read its DLPack export ({type(e).__name__}: {e})") from None
            self.shape, self.dtype, self.ptr = self._view.shape, self._view.dtype, self._view.ptr
            strides = self._view.strides
            self.byte_strides = tuple(s * self.dtype.itemsize for s in strides) if strides is not None else None
            self._dlpack_sync = False
            if self._view.device[0] not in CUDA_DEVICES:
                device = self._view.device
                self.release()
                raise InputError(f"input '{name}': __dlpack_device__ says CUDA but its DLPack export lies on "
                                 f"device type {device[0]}; pass it as a numpy array")  # fmt: skip

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def contiguous(self) -> bool:
        return self.byte_strides is None or self.byte_strides == _c_strides(self.shape, self.dtype.itemsize)

    def ready_on(self, cuda: Any, stream: int, blocking: bool = False) -> int:
        """The address, readable by work enqueued on ``stream`` from now on.

        The first use settles the stream the data is ready on: the producer's (v3 interface),
        else ``stream`` itself where DLPack lets the producer order its work before it, else
        the legacy default stream. Any other stream then waits for that one on the device;
        ``blocking`` says ``stream`` already follows the legacy default stream.
        """
        if self._ready_stream is None:
            self._ready_stream = self.producer_stream or LEGACY_STREAM
            if self.producer_stream is None and self._dlpack_sync:
                try:
                    self._view = import_dlpack(self.value, stream)
                    self._ready_stream = stream
                except Exception:  # e.g. a tensor that requires grad: the interface's address stands
                    pass
        ready = self._ready_stream
        if ready != stream and not (blocking and ready == LEGACY_STREAM):
            wait_for_stream(cuda, stream, ready)
        return self.ptr

    def release(self) -> None:
        view, self._view = self._view, None
        if view is not None:
            view.release()


def checked_dims(values: Any, what: str, allow_negative: bool = False) -> tuple[int, ...]:
    """A shape or strides a caller's object declares: a list or tuple of at most MAX_DIMS Python ints."""
    if not isinstance(values, (tuple, list)) or len(values) > MAX_DIMS:
        raise InputError(f"{what} must be a tuple of at most {MAX_DIMS} ints, got {type(values).__name__}")
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in values):
        raise InputError(f"{what} must hold ints, got {[type(d).__name__ for d in values]}")
    dims = tuple(int(d) for d in values)
    if not allow_negative and any(d < 0 for d in dims):
        raise InputError(f"{what} {list(dims)} has a negative dim")
    return dims


def _read_interface(interface: dict, name: str) -> tuple:
    """``__cuda_array_interface__``'s fields, each checked: (shape, dtype, address, byte strides, stream).

    The object is the caller's: its fields are checked so that a malformed one is an
    InputError naming the input. Whether its address really holds that memory cannot be
    checked (docs/RELIABILITY.md, "the trust boundary of run() inputs").
    """
    where = f"input '{name}': __cuda_array_interface__"
    shape = checked_dims(interface.get("shape"), f"{where} shape")
    try:
        dtype = np.dtype(interface.get("typestr"))
    except (TypeError, ValueError):
        raise InputError(f"{where} typestr {interface.get('typestr')!r} is not a numpy dtype") from None
    if dtype.kind not in "biufc" or dtype.itemsize == 0:
        raise InputError(f"{where} typestr {interface.get('typestr')!r} is not a number type")
    data = interface.get("data")
    if not isinstance(data, (tuple, list)) or len(data) != 2 or not isinstance(data[0], (int, type(None))):
        raise InputError(f"{where} data must be (address, read_only), got {type(data).__name__}")
    ptr = int(data[0] or 0)
    if not 0 <= ptr < 2**64 or (ptr == 0 and math.prod(shape)):
        raise InputError(f"{where} data address {ptr:#x} is not a device address")
    strides = interface.get("strides")
    byte_strides = checked_dims(strides, f"{where} strides", allow_negative=True) if strides else None
    if byte_strides is not None and len(byte_strides) != len(shape):
        raise InputError(f"{where} has {len(byte_strides)} strides for {len(shape)} dims")
    if math.prod(shape) * dtype.itemsize >= 2**62:
        raise InputError(f"{where} shape {list(shape)} of {dtype} is larger than any memory")
    version = interface.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{where} version must be an int, got {type(version).__name__}")
    stream = interface.get("stream") if version >= 3 else None
    if stream is not None and (not isinstance(stream, int) or isinstance(stream, bool)):
        raise InputError(f"{where} stream must be an int, got {type(stream).__name__}")
    return shape, dtype, ptr, byte_strides, stream


_cuda_usable = False


def require_cuda(name: str) -> None:
    """A GPU input needs CUDA on this host: an InputError naming the input where there is none (once per process)."""
    global _cuda_usable
    if _cuda_usable:
        return
    try:
        count = check(cudart(), "cudaGetDeviceCount")
    except (CudaUnavailable, RuntimeError) as e:
        raise InputError(f"input '{name}' is a GPU array, but this host cannot read it: {e}") from None
    if not count:
        raise InputError(f"input '{name}' is a GPU array, but this host has no CUDA device")
    _cuda_usable = True


def wait_for_stream(cuda: Any, waiter: int, producer: int) -> None:
    """Make ``waiter`` wait (on the device, the host goes on) for the work enqueued so far on ``producer``."""
    event = check(cuda, "cudaEventCreateWithFlags", cuda.cudaEventDisableTiming)
    try:
        check(cuda, "cudaEventRecord", event, producer)
        check(cuda, "cudaStreamWaitEvent", waiter, event, 0)
    finally:
        cuda.cudaEventDestroy(event)


class OwnedStream:
    """A stream runtime_lite made: destroyed when the last runner or DeviceArray that uses it is gone.

    A result may outlive its engine (``Module.close`` with results still held): it is
    still freed in order on the stream it was made on, which must therefore still exist.
    """

    def __init__(self, cuda: Any):
        self.cuda = cuda
        self.handle = int(check(cuda, "cudaStreamCreate"))  # blocking: ordered after the legacy default stream

    def __del__(self) -> None:
        try:
            self.cuda.cudaStreamDestroy(self.handle)
        except Exception:  # interpreter shutdown
            pass


class ReadyEvent:
    """An event recorded after a run's work; destroyed when the last array it guards goes."""

    def __init__(self, cuda: Any, stream: int):
        self.cuda = cuda
        self.event = check(cuda, "cudaEventCreateWithFlags", cuda.cudaEventDisableTiming)
        check(cuda, "cudaEventRecord", self.event, stream)

    def wait_on(self, stream: int) -> None:
        check(self.cuda, "cudaStreamWaitEvent", stream, self.event, 0)

    def synchronize(self) -> None:
        check(self.cuda, "cudaEventSynchronize", self.event)

    def __del__(self) -> None:
        try:
            self.cuda.cudaEventDestroy(self.event)
        except Exception:  # interpreter shutdown
            pass


class DeviceArray:
    """A result in GPU memory that it owns; read it with CuPy/torch (no copy) or ``numpy()`` (a host copy)."""

    on_device = True

    def __init__(
        self, cuda: Any, ptr: int, shape: Sequence[int], dtype: np.dtype, stream: int, *,
        ready: ReadyEvent | None = None, keepalive: Any = None, device_id: int = 0, stream_ordered: bool = True,
        stream_owner: Any = None,
    ):  # fmt: skip
        self._cuda, self.ptr, self.shape, self.dtype = cuda, ptr, tuple(shape), np.dtype(dtype)
        self.stream, self.ready, self.device_id = stream, ready, device_id
        # keeps the stream it is freed on alive: the runner's OwnedStream or the caller's stream object
        self._stream_owner = stream_owner
        self._keepalive, self._stream_ordered = keepalive, stream_ordered
        self._consumers: set[int] = set()
        self._lock = threading.Lock()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def _live(self) -> None:
        if not self.ptr:
            raise ValueError("this DeviceArray was released")

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._live()
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3, "stream": self.stream or LEGACY_STREAM}  # fmt: skip

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, self.device_id

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None):
        """A DLPack capsule; ``stream`` (the consumer's; None: the legacy default stream, -1: no wait) waits for us."""
        if copy:
            raise BufferError("DeviceArray.__dlpack__: copy=True is not supported; the export is never a copy")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray.__dlpack__: the array lives on {self.__dlpack_device__()}, not {dl_device}")
        self._live()
        consumer = LEGACY_STREAM if stream is None else stream_handle(stream)
        if consumer != -1:
            if self.ready is not None and consumer != self.stream:
                self.ready.wait_on(consumer)
            with self._lock:
                self._consumers.add(consumer)
        return export_dlpack(self, self.ptr, self.shape, self.dtype, self.__dlpack_device__())

    def synchronize(self) -> None:
        """Block the host until the array's value is computed."""
        if self.ready is not None:
            self.ready.synchronize()

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the value)."""
        self._live()
        out = np.empty(self.shape, self.dtype)
        self.synchronize()
        if out.nbytes:
            kind = self._cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost
            check(self._cuda, "cudaMemcpy", out.ctypes.data, self.ptr, out.nbytes, kind)
        return out

    def release(self) -> None:
        """Give the memory back now (``del`` does the same when the last reference goes)."""
        ptr, self.ptr = self.ptr, 0
        if not ptr:
            return
        cuda = self._cuda
        if self._keepalive is not None:  # the run that read these inputs must be over before they may go
            self.synchronize()
            for item in self._keepalive:
                if isinstance(item, DeviceInput):
                    item.release()
            self._keepalive = None
        if not self._stream_ordered:
            cuda.cudaFree(ptr)
            return
        try:
            for consumer in self._consumers - {self.stream}:
                wait_for_stream(cuda, self.stream, consumer)
            check(cuda, "cudaFreeAsync", ptr, self.stream)
        except RuntimeError:  # the stream refuses (a caller's stream destroyed early): free it the synchronous way
            self.synchronize()
            cuda.cudaFree(ptr)
        self._stream_owner = None

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: CUDA may be gone
            pass

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device={self.device_id}, ptr={self.ptr:#x})"


class DeviceMemory:
    """Allocations for ``DeviceArray``\\ s: stream-ordered where the device has memory pools, else plain."""

    def __init__(self, cuda: Any):
        self.cuda = cuda
        self.stream_ordered = True

    def allocate(self, nbytes: int, stream: int) -> int:
        if self.stream_ordered:
            try:
                return int(check(self.cuda, "cudaMallocAsync", max(nbytes, 1), stream))
            except RuntimeError:
                self.stream_ordered = False  # no memory pools on this device/driver: plain cudaMalloc from now on
        return int(check(self.cuda, "cudaMalloc", max(nbytes, 1)))

    def array(self, ptr: int, shape: Sequence[int], dtype: np.dtype, stream: int, **kwargs: Any) -> DeviceArray:
        return DeviceArray(self.cuda, ptr, shape, dtype, stream, stream_ordered=self.stream_ordered, **kwargs)


def to_host(value: Any) -> np.ndarray:
    """A numpy copy of a device value (ours or a caller's); the plan's host boundary."""
    if isinstance(value, DeviceArray):
        return value.numpy()
    cuda = cudart()
    source = value if isinstance(value, DeviceInput) else DeviceInput(value)
    if not source.contiguous:
        raise InputError(f"input '{source.name}': a non-contiguous GPU array; pass a contiguous copy")
    out = np.empty(source.shape, source.dtype)
    stream = check(cuda, "cudaStreamCreate")
    try:
        ptr = source.ready_on(cuda, stream, blocking=True)
        if out.nbytes:
            kind = cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost
            check(cuda, "cudaMemcpyAsync", out.ctypes.data, ptr, out.nbytes, kind, stream)
        check(cuda, "cudaStreamSynchronize", stream)
    finally:
        cuda.cudaStreamDestroy(stream)
        if source is not value:
            source.release()
    return out


def to_device(array: np.ndarray, stream: int | None = None, stream_owner: Any = None) -> DeviceArray:
    """A host array copied into a new DeviceArray (an output the caller wants on the GPU that the host computed)."""
    cuda = cudart()
    array = np.asarray(array, order="C")  # ascontiguousarray would make a 0-d output 1-d
    stream = LEGACY_STREAM if stream is None else stream
    memory = _memory(cuda)
    ptr = memory.allocate(array.nbytes, stream)
    if array.nbytes:
        kind = cuda.cudaMemcpyKind.cudaMemcpyHostToDevice
        check(cuda, "cudaMemcpyAsync", ptr, array.ctypes.data, array.nbytes, kind, stream)
    ready = ReadyEvent(cuda, stream)
    ready.synchronize()  # pageable source: it must not change before the copy is done
    return memory.array(ptr, array.shape, array.dtype, stream, ready=ready, stream_owner=stream_owner)


@functools.cache
def _memory(cuda: Any) -> DeviceMemory:
    return DeviceMemory(cuda)
