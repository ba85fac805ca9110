"""TensorRT and CUDA, touched only here: the device probe and the engine runner.

``tensorrt`` (or its lean runtime, see lean.py) and ``cuda.bindings`` (cuda-python
>= 12.6; ``cuda.cudart`` is gone in 13) are imported on first use, so runtime_lite
imports and runs on machines that have neither. Every cudart call returns
``(err, *results)``; ``_cuda`` turns a failure into one line naming the call.

What a run costs beyond TensorRT's own work, and how the runner keeps it small:

* a host input is written once, straight into pinned staging (``np.copyto`` also
  does any layout or dtype conversion), then copied to the device asynchronously; an
  input already in pinned memory of the runner's (``host_array()``, or an earlier
  result) is copied to the device from where it is;
* a host output is copied from the device into a pinned block that becomes the
  returned array's memory: no copy out of staging. The block goes back to the runner's
  pool when the caller drops the array (beyond ``MAX_LEASED_BYTES`` outstanding, a
  plain array is the destination instead);
* a GPU input (CuPy, torch.cuda, anything with ``__dlpack__`` or
  ``__cuda_array_interface__``) is bound where it lies, after the runner's stream is
  made to wait for its producer; only a misaligned one is copied, on the device;
* ``outputs_on="device"`` returns :class:`~runtime_lite.execution.device.DeviceArray`\\ s
  in fresh stream-ordered allocations, without waiting for the GPU;
* shapes and addresses are handed to TensorRT only when they change;
* with ``cuda_graphs=True`` each input shape's ``execute_async_v3`` is captured once into
  a CUDA graph (``cudaStreamBeginCapture``/``EndCapture``/``GraphInstantiate``) and later
  runs launch it (``cudaGraphLaunch``): one call instead of TensorRT's per-layer
  enqueues. The graph binds the runner's own buffers, so with graphs GPU inputs and
  outputs are copied on the device into and out of them.

A run may go on the caller's stream (``stream=``: an int handle, a torch or CuPy
stream) or the runner's own. Runs are serialised by a lock; a run on another stream
than the previous one first waits (on the device) for the previous one, as both use
the same execution context and buffers.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from runtime_lite.backends.tensorrt.lean import TensorRTMissing, import_tensorrt
from runtime_lite.backends.tensorrt.spec import DeviceSignature
from runtime_lite.errors import InputError
from runtime_lite.execution.device import (
    OUTPUTS_ON,
    CudaUnavailable,
    DeviceArray,
    DeviceInput,
    DeviceMemory,
    OwnedStream,
    ReadyEvent,
    check,
    cudart,
    is_device_array,
    stream_handle,
)

logger = logging.getLogger("runtime_lite.tensorrt")

#: TensorRT wants every I/O tensor address aligned to 256 bytes.
ALIGNMENT = 256
#: Pinned memory handed out as result arrays and not yet given back, at most (then results are plain arrays).
MAX_LEASED_BYTES = 1 << 30
#: Free pinned blocks kept for reuse, at most.
MAX_FREE_BLOCKS = 32

_cuda = check


class GpuUnavailable(Exception):
    """No usable TensorRT + CUDA device here; the message says which part is missing."""


class EngineIncompatible(Exception):
    """TensorRT refused the engine (``deserialize_cuda_engine`` returned None)."""


@functools.cache
def _modules() -> tuple[Any, Any, str]:
    try:
        trt, runtime = import_tensorrt()
    except TensorRTMissing as e:
        raise GpuUnavailable(str(e)) from None
    try:
        cuda = cudart()
    except CudaUnavailable as e:
        raise GpuUnavailable(str(e)) from None
    return trt, cuda, runtime


@functools.cache
def probe() -> tuple[DeviceSignature, Any, Any]:
    """(signature of this machine's GPU, tensorrt, cudart); GpuUnavailable with the reason otherwise."""
    trt, cuda, runtime = _modules()
    try:
        count = _cuda(cuda, "cudaGetDeviceCount")
    except RuntimeError as e:
        raise GpuUnavailable(f"no CUDA device ({e})") from None
    if not count:
        raise GpuUnavailable("no CUDA device")
    device = _cuda(cuda, "cudaGetDevice")
    props = _cuda(cuda, "cudaGetDeviceProperties", device)
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    signature = DeviceSignature(
        tensorrt=trt.__version__,
        cuda=str(_cuda(cuda, "cudaRuntimeGetVersion")),
        gpu=name.rstrip("\0").strip(),
        compute_capability=f"{props.major}.{props.minor}",
        runtime=runtime,
    )
    return signature, trt, cuda


class _Staging:
    """An input's device buffer and its pinned host twin, grown (never shrunk) to the largest use."""

    def __init__(self, cuda: Any, pinned: bool = True):
        self.cuda, self.pinned, self.nbytes, self.device, self.host = cuda, pinned, 0, 0, 0

    def ensure(self, nbytes: int) -> bool:
        """Make room for ``nbytes``; True if the buffers moved (graphs that bound them are stale)."""
        if nbytes <= self.nbytes:
            return False
        self.release()
        self.device = int(_cuda(self.cuda, "cudaMalloc", nbytes))
        if self.pinned:
            self.host = int(_cuda(self.cuda, "cudaMallocHost", nbytes))
        self.nbytes = nbytes
        return True

    def host_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        raw = (ctypes.c_char * max(self.nbytes, 1)).from_address(self.host)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def release(self) -> None:
        if self.nbytes:
            self.cuda.cudaFree(self.device)
            if self.pinned:
                self.cuda.cudaFreeHost(self.host)
            self.nbytes = 0


class _PinnedPool:
    """Pinned blocks lent out as result arrays; a block comes back when its array (and every view) is gone."""

    def __init__(self, cuda: Any):
        self.cuda = cuda
        self.free: list[tuple[int, int]] = []  # (capacity, address)
        self.out: dict[int, int] = {}  # address -> capacity of the blocks lent out
        self.leased = 0
        self.closed = False
        self._lock = threading.Lock()

    def lease(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype)
        with self._lock:
            fits = [i for i, (capacity, _) in enumerate(self.free) if nbytes <= capacity <= 2 * nbytes + 4096]
            if fits:
                capacity, address = self.free.pop(min(fits, key=lambda i: self.free[i][0]))
            elif self.leased + nbytes > MAX_LEASED_BYTES:
                return np.empty(shape, dtype)  # the caller holds on to many results: pageable memory, still correct
            else:
                capacity, address = nbytes, 0
            self.leased += capacity
        if not address:
            try:
                address = int(_cuda(self.cuda, "cudaMallocHost", capacity))
            except RuntimeError:
                with self._lock:
                    self.leased -= capacity
                return np.empty(shape, dtype)
        with self._lock:
            self.out[address] = capacity
        raw = (ctypes.c_char * capacity).from_address(address)
        weakref.finalize(raw, self._give_back, capacity, address)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def holds(self, array: np.ndarray) -> bool:
        """Whether ``array``'s bytes lie in one of the pinned blocks lent out (so a copy can DMA from them)."""
        start = array.__array_interface__["data"][0]
        with self._lock:
            return any(address <= start and start + array.nbytes <= address + capacity
                       for address, capacity in self.out.items())  # fmt: skip

    def _give_back(self, capacity: int, address: int) -> None:
        with self._lock:
            self.out.pop(address, None)
            self.leased -= capacity
            if not self.closed and len(self.free) < MAX_FREE_BLOCKS:
                self.free.append((capacity, address))
                return
        self.cuda.cudaFreeHost(address)

    def close(self) -> None:
        with self._lock:
            self.closed, blocks, self.free = True, self.free, []
        for _, address in blocks:
            self.cuda.cudaFreeHost(address)


class EngineRunner:
    """One engine with its execution context, stream and buffers: see the module docstring for a run's steps."""

    def __init__(self, engine_bytes: bytes, input_names: Sequence[str], output_names: Sequence[str], *,
                 allow_host_code: bool = False, cuda_graphs: bool = False):  # fmt: skip
        _, trt, cuda = probe()  # a GPU first: the lean runtime crashes on a Runtime made without one
        self._trt_logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self._trt_logger)
        if allow_host_code:
            self.runtime.engine_host_code_allowed = True
        engine = self.runtime.deserialize_cuda_engine(bytes(engine_bytes))
        if engine is None:
            raise EngineIncompatible(f"{trt.__name__} {trt.__version__} could not deserialize the engine "
                                     "(another TensorRT version or GPU, or not an engine)")  # fmt: skip
        self._setup(engine, input_names, output_names, cuda, lambda t: np.dtype(trt.nptype(t)), cuda_graphs)

    @classmethod
    def for_engine(
        cls, engine: Any, input_names: Sequence[str], output_names: Sequence[str], *,
        dtype_of: Callable[[Any], np.dtype] = np.dtype, cuda_graphs: bool = False,
    ) -> EngineRunner:  # fmt: skip
        """A runner for an engine deserialized elsewhere (``dtype_of`` maps its tensor dtypes to numpy)."""
        runner = cls.__new__(cls)
        runner.runtime = None
        runner._setup(engine, input_names, output_names, cudart(), dtype_of, cuda_graphs)
        return runner

    def _setup(self, engine: Any, input_names: Sequence[str], output_names: Sequence[str], cuda: Any,
               dtype_of: Callable[[Any], np.dtype], cuda_graphs: bool) -> None:  # fmt: skip
        self.engine, self.cuda, self.stream = engine, cuda, None
        names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
        missing = [n for n in (*input_names, *output_names) if n not in names]
        if missing:
            raise EngineIncompatible(f"the engine has no tensor(s) {missing}")
        self.inputs, self.outputs = tuple(input_names), tuple(output_names)
        self.dtypes = {n: np.dtype(dtype_of(engine.get_tensor_dtype(n))) for n in names}
        self.context = engine.create_execution_context()
        self._own_stream = OwnedStream(cuda)  # outlives the runner while results made on it are alive
        self.stream = self._own_stream.handle
        self.device_id = int(_cuda(cuda, "cudaGetDevice"))
        self.staging = {n: _Staging(cuda) for n in self.inputs}
        self.results = {n: _Staging(cuda, pinned=False) for n in self.outputs}
        self.pinned = _PinnedPool(cuda)
        self.memory = DeviceMemory(cuda)
        #: bytes of host input copied into pinned staging so far (what host_array inputs avoid)
        self.staged_bytes = 0
        self.cuda_graphs = cuda_graphs
        self._graphs: dict[tuple, Any] = {}  # input shapes -> graph exec, or None where capture failed
        self._capture_stream: int | None = None
        self._shapes: tuple | None = None
        self._output_shapes: dict[str, tuple[int, ...]] = {}
        self._addresses: dict[str, int] = {}
        # The previous run's end and stream while the host has not waited for it, and whether it read pinned staging
        self._last_done: ReadyEvent | None = None
        self._last_stream = self.stream
        self._staged: ReadyEvent | None = None
        self._h2d, self._d2h = self._kind("HostToDevice"), self._kind("DeviceToHost")
        self._d2d = self._kind("DeviceToDevice")
        self._lock = threading.Lock()

    def host_array(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        """A pinned host array to fill and pass to ``run``: its bytes go to the GPU with no staging copy.

        (Results of host runs are such arrays too.) The direct copy is used when the run
        returns host arrays, as it ends with the host waiting for the GPU; an asynchronous
        run stages the array, since the caller may change it while the copy is in flight.
        """
        return self.pinned.lease(tuple(int(d) for d in shape), np.dtype(dtype))

    def run(self, inputs: Sequence[Any], *, outputs_on: str = "host", stream: Any = None) -> list[Any]:
        """Run the engine on host and/or GPU arrays; numpy results, or DeviceArrays with ``outputs_on="device"``.

        ``stream``: the caller's CUDA stream to run on (default: the runner's own). Host
        results are complete on return; device results are ready in stream order (their
        ``__cuda_array_interface__``/``__dlpack__`` tell consumers what to wait for). A
        device result is freed in order on the stream it was made on, so it holds the
        caller's stream object (CuPy, torch, cuda-python) until it goes: freeing on a
        destroyed stream crashes the process on real hardware. A bare int handle cannot be
        held; that stream must outlive the results.
        """
        if outputs_on not in OUTPUTS_ON:
            raise ValueError(f"outputs_on must be one of {', '.join(OUTPUTS_ON)}, got {outputs_on!r}")
        if len(inputs) != len(self.inputs):
            raise InputError(
                f"the engine takes {len(self.inputs)} inputs ({', '.join(self.inputs)}), got {len(inputs)}"
            )
        with self._lock:
            if self.stream is None:
                raise RuntimeError("this EngineRunner was closed")
            run_stream = self.stream if stream is None else stream_handle(stream)
            return self._run(inputs, outputs_on, run_stream, stream_keeper=None if stream is None else stream)

    def _run(self, inputs: Sequence[Any], outputs_on: str, stream: int, stream_keeper: Any = None) -> list[Any]:
        context = self.context
        self._after_last_run(stream)
        graphed = self.cuda_graphs
        keep: list[Any] = []
        shapes = []
        on_device = [is_device_array(x) for x in inputs]
        for name, x, device in zip(self.inputs, inputs, on_device):
            if device:
                address, shape = self._device_input(name, x, stream, keep, copy=graphed)
            else:
                address, shape = self._host_input(name, x, stream, direct=outputs_on == "host")
            shapes.append(shape)
            self._bind(name, address)
        key = tuple(shapes)
        if key != self._shapes:
            for name, shape in zip(self.inputs, key):
                if not context.set_input_shape(name, shape):
                    raise InputError(f"input '{name}': shape {list(shape)} is outside the engine's profile")
            self._output_shapes = {n: tuple(context.get_tensor_shape(n)) for n in self.outputs}
            self._shapes = key
        staged = not all(on_device)
        fresh = outputs_on == "device" and not graphed  # TensorRT writes straight into the returned arrays
        destinations = {}
        for name in self.outputs:
            nbytes = int(np.prod(self._output_shapes[name], dtype=np.int64)) * self.dtypes[name].itemsize
            if fresh:
                destinations[name] = self.memory.allocate(nbytes, stream)
            else:
                self._grow(self.results[name], nbytes)
                destinations[name] = self.results[name].device
            self._bind(name, destinations[name])
        self._execute(key, stream)
        if outputs_on == "device":
            results = self._device_results(destinations, stream, keep, copy=not fresh, stream_keeper=stream_keeper)
            self._staged = self._last_done if staged else None
            self._last_stream = stream
        else:
            results = self._host_results(stream)
            for item in keep:
                if isinstance(item, DeviceInput):
                    item.release()
        return results

    def _after_last_run(self, stream: int) -> None:
        """Order this run after the previous one, which shares the context and the buffers, on the device.

        A run that returned host arrays ended with the host waiting for it. One that
        returned device arrays did not: on the same stream this run follows it anyway; on
        another, this stream waits for its end event (the host goes on). Only writing the
        pinned staging it may still be copying from makes the host wait (``_host_input``).
        """
        done, self._last_done = self._last_done, None
        if done is not None and self._last_stream != stream:
            done.wait_on(stream)

    def _host_input(self, name: str, x: Any, stream: int, direct: bool) -> tuple[int, tuple[int, ...]]:
        x = np.asarray(x)
        buffer = self.staging[name]
        dtype = self.dtypes[name]
        nbytes = x.size * dtype.itemsize
        self._grow(buffer, nbytes)
        source = buffer.host
        if direct and x.dtype == dtype and x.flags.c_contiguous and self.pinned.holds(x):
            source = x.ctypes.data  # already pinned (host_array, or an earlier result): no staging copy
        else:
            staged, self._staged = self._staged, None
            if staged is not None:  # the previous run's H2D copies may still read this staging
                staged.synchronize()
            np.copyto(buffer.host_array(x.shape, dtype), x, casting="same_kind")  # the one host copy of the input
            self.staged_bytes += nbytes
        if nbytes:
            _cuda(self.cuda, "cudaMemcpyAsync", buffer.device, source, nbytes, self._h2d, stream)
        return buffer.device, x.shape

    def _device_input(self, name: str, x: Any, stream: int, keep: list, copy: bool) -> tuple[int, tuple[int, ...]]:
        dtype = self.dtypes[name]
        if isinstance(x, DeviceArray):
            if x.ready is not None and x.stream != stream:
                x.ready.wait_on(stream)
            address, shape, contiguous = x.ptr, x.shape, True
        else:
            x = x if isinstance(x, DeviceInput) else DeviceInput(x, name)
            address, shape, contiguous = x.ready_on(self.cuda, stream, stream == self.stream), x.shape, x.contiguous
        keep.append(x)  # alive until the run that reads it is over
        if x.dtype != dtype:
            raise InputError(f"input '{name}': a GPU array of dtype {x.dtype.name}, the engine takes {dtype.name} "
                             "(convert it on the GPU first)")  # fmt: skip
        if not contiguous:
            raise InputError(f"input '{name}': a non-contiguous GPU array; pass a contiguous copy (x.copy())")
        if copy or address % ALIGNMENT:
            buffer = self.staging[name]
            self._grow(buffer, x.nbytes)
            if x.nbytes:
                _cuda(self.cuda, "cudaMemcpyAsync", buffer.device, address, x.nbytes, self._d2d, stream)
            address = buffer.device
        return address, tuple(shape)

    def _grow(self, buffer: _Staging, nbytes: int) -> None:
        if buffer.ensure(nbytes) and self._graphs:
            self._drop_graphs()  # they bound the old addresses

    def _bind(self, name: str, address: int) -> None:
        if self._addresses.get(name) != address:
            if not self.context.set_tensor_address(name, address):
                raise RuntimeError(f"TensorRT refused the address of tensor {name!r}")
            self._addresses[name] = address

    def _execute(self, key: tuple, stream: int) -> None:
        graph = self._graphs.get(key) if self.cuda_graphs else None
        if graph is not None:
            _cuda(self.cuda, "cudaGraphLaunch", graph, stream)
            return
        if not self.context.execute_async_v3(stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        if self.cuda_graphs and key not in self._graphs:
            self._graphs[key] = self._capture()  # after one plain run, as TensorRT asks

    def _capture(self) -> Any:
        """A CUDA graph of ``execute_async_v3`` on the bound buffers, or None (logged) where it cannot be captured."""
        cuda = self.cuda
        mode = cuda.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        try:
            if self._capture_stream is None:
                # Captured on a non-blocking stream of its own, launched on the run's: while a blocking stream
                # captures, any other thread's legacy-stream call (a synchronous cudaMemcpy, a result's
                # numpy()) fails with cudaErrorStreamCaptureImplicit, and so does the capture (seen on an H200).
                flags = cuda.cudaStreamNonBlocking
                self._capture_stream = int(_cuda(cuda, "cudaStreamCreateWithFlags", flags))
            _cuda(cuda, "cudaStreamBeginCapture", self._capture_stream, mode)
        except RuntimeError as e:
            logger.info("tensorrt: CUDA graph capture unavailable (%s); running without graphs", e)
            return None
        enqueued = False
        try:
            enqueued = bool(self.context.execute_async_v3(self._capture_stream))
        finally:
            err, graph = cuda.cudaStreamEndCapture(self._capture_stream)
        if not enqueued or err != cuda.cudaError_t.cudaSuccess:
            logger.info("tensorrt: this engine cannot be captured in a CUDA graph; running without graphs")
            return None
        try:
            return _cuda(cuda, "cudaGraphInstantiate", graph, 0)
        except RuntimeError as e:
            logger.info("tensorrt: CUDA graph instantiation failed (%s); running without graphs", e)
            return None
        finally:
            cuda.cudaGraphDestroy(graph)

    def _drop_graphs(self) -> None:
        graphs, self._graphs = self._graphs, {}
        for graph in graphs.values():
            if graph is not None:
                self.cuda.cudaGraphExecDestroy(graph)

    def _drop_capture_stream(self) -> None:
        stream, self._capture_stream = self._capture_stream, None
        if stream is not None:
            self.cuda.cudaStreamDestroy(stream)

    def _host_results(self, stream: int) -> list[np.ndarray]:
        results = []
        for name in self.outputs:
            out = self.pinned.lease(self._output_shapes[name], self.dtypes[name])  # the returned array's own memory
            if out.nbytes:
                _cuda(self.cuda, "cudaMemcpyAsync", out.ctypes.data, self.results[name].device, out.nbytes,
                      self._d2h, stream)  # fmt: skip
            results.append(out)
        _cuda(self.cuda, "cudaStreamSynchronize", stream)
        return results

    def _device_results(
        self, destinations: dict[str, int], stream: int, keep: list, copy: bool, stream_keeper: Any = None
    ) -> list[DeviceArray]:
        arrays = {}
        for name in self.outputs:
            shape, dtype = self._output_shapes[name], self.dtypes[name]
            address = destinations[name]
            if copy:  # graphs write into the runner's buffers: each result gets its own memory
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                address = self.memory.allocate(nbytes, stream)
                if nbytes:
                    _cuda(self.cuda, "cudaMemcpyAsync", address, destinations[name], nbytes, self._d2d, stream)
            arrays[name] = (address, shape, dtype)
        ready = ReadyEvent(self.cuda, stream)
        self._last_done = ready
        owner = self._own_stream if stream == self.stream else stream_keeper
        return [
            self.memory.array(
                address,
                shape,
                dtype,
                stream,
                ready=ready,
                keepalive=keep or None,
                device_id=self.device_id,
                stream_owner=owner,
            )  # fmt: skip
            for address, shape, dtype in arrays.values()
        ]

    def _kind(self, direction: str) -> Any:
        return getattr(self.cuda.cudaMemcpyKind, f"cudaMemcpy{direction}")

    def close(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            if getattr(self, "stream", None) is None:
                return
            done, self._last_done, self._staged = self._last_done, None, None
            if done is not None:
                done.synchronize()
            self._drop_graphs()
            self._drop_capture_stream()
            for buffer in (*self.staging.values(), *self.results.values()):
                buffer.release()
            self.pinned.close()
            self._own_stream = None  # destroyed now, or when the last result made on it goes
            self.stream = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: CUDA may already be gone
            pass
