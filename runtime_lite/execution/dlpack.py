"""DLPack with ctypes: read a producer's capsule, and hand our device arrays out as capsules.

DLPack is the C struct every array library exchanges (``__dlpack__`` returns a
PyCapsule holding a ``DLManagedTensor``). runtime_lite ships no compiled code, so
the structs are declared with ctypes from the DLPack 1.x header (``dlpack.h``),
and the capsule calls go through ``ctypes.pythonapi`` with prototypes of our own
(never the shared ``pythonapi`` attributes, whose argtypes other code may set).

Reading: ``import_dlpack(obj, stream)`` asks the producer for a capsule (versioned
when it can make one), marks it used, as the protocol requires of a consumer, and
returns a :class:`DLPackView`; its ``release()`` (or garbage collection) calls the
producer's deleter, which is when the producer may free or reuse the memory.

Writing: ``export_dlpack(owner, ...)`` builds a legacy ``DLManagedTensor`` (every
consumer reads it; the versioned one adds only a read-only flag) whose deleter drops
our reference to ``owner``; a capsule nobody consumed calls it from its destructor.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The most dims a DLPack tensor may have here (numpy's own limit).
MAX_DIMS = 64
#: DLDeviceType values (dlpack.h).
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
CUDA_DEVICES = (KDL_CUDA, KDL_CUDA_MANAGED)
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

# DLDataTypeCode -> numpy kind
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


def _capi(name: str, restype: Any, *argtypes: Any) -> Any:
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_get_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_new_capsule = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# For the destructor, which gets the dying capsule as a raw pointer (no new reference to it may be made).
_raw_name = _capi("PyCapsule_GetName", ctypes.c_char_p, ctypes.c_void_p)
_raw_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)

# Names live as long as the module: PyCapsule_SetName and PyCapsule_New keep the pointer, not a copy.
_LEGACY, _USED_LEGACY = ctypes.c_char_p(b"dltensor"), ctypes.c_char_p(b"used_dltensor")
_VERSIONED, _USED_VERSIONED = ctypes.c_char_p(b"dltensor_versioned"), ctypes.c_char_p(b"used_dltensor_versioned")


class DLPackError(TypeError):
    """An object's DLPack export cannot be used here; the message says why."""


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    kind = _KINDS.get(code)
    if kind is None or lanes != 1 or bits % 8:
        raise DLPackError(f"DLPack dtype (code {code}, {bits} bits, {lanes} lanes) has no numpy equivalent")
    return np.dtype("?" if kind == "b" else f"{kind}{bits // 8}")


@dataclass
class DLPackView:
    """What a DLPack capsule describes: address, shape, dtype, strides (elements; None: C order), device."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None
    device: tuple[int, int]
    readonly: bool
    _managed: int = 0
    _deleter: int = 0

    def release(self) -> None:
        """Tell the producer we are done with its memory (its deleter runs once)."""
        managed, deleter, self._managed, self._deleter = self._managed, self._deleter, 0, 0
        if managed and deleter:
            _Deleter(deleter)(managed)

    def __del__(self) -> None:
        self.release()


def import_dlpack(obj: Any, stream: int | None = None) -> DLPackView:
    """Consume ``obj.__dlpack__``: ``stream`` is the consumer's CUDA stream (None for host memory).

    The producer makes the data ready on that stream before handing it over (the
    DLPack contract), so the caller may enqueue work reading it right away.
    """
    kwargs: dict[str, Any] = {} if stream is None else {"stream": stream}
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer from before DLPack 1.0 knows no max_version
        capsule = obj.__dlpack__(**kwargs)
    if _is_valid(capsule, _VERSIONED):  # a valid capsule's pointer is never NULL (PyCapsule_IsValid)
        address = _get_pointer(capsule, _VERSIONED)
        managed = _ManagedVersioned.from_address(address)
        if managed.version.major > 1:
            raise DLPackError(f"DLPack {managed.version.major}.{managed.version.minor} capsule; this reader knows 1.x")
        _set_name(capsule, _USED_VERSIONED)
        readonly = bool(managed.flags & _READ_ONLY)
    elif _is_valid(capsule, _LEGACY):
        address = _get_pointer(capsule, _LEGACY)
        managed = _Managed.from_address(address)
        _set_name(capsule, _USED_LEGACY)
        readonly = False
    else:
        raise DLPackError(f"{type(obj).__name__}.__dlpack__() returned no unused DLPack capsule")
    tensor = managed.dl_tensor
    view = DLPackView(0, (), np.dtype("u1"), None, (0, 0), readonly, address, managed.deleter or 0)
    ndim = tensor.ndim
    # What the struct says is checked before anything is read through its pointers: the rank
    # bounds how far shape and strides are read, and neither may be NULL where it is read.
    if not 0 <= ndim <= MAX_DIMS:
        raise DLPackError(f"DLPack tensor of {ndim} dims (at most {MAX_DIMS})")
    if ndim and not tensor.shape:
        raise DLPackError(f"DLPack tensor of {ndim} dims has a NULL shape")
    view.dtype = numpy_dtype(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    view.shape = tuple(tensor.shape[i] for i in range(ndim))
    if any(d < 0 for d in view.shape) or math.prod(view.shape) * view.dtype.itemsize >= 2**62:
        raise DLPackError(f"DLPack tensor shape {list(view.shape)} of {view.dtype} is not a memory size")
    view.strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else None
    view.device = (tensor.device.device_type, tensor.device.device_id)
    view.ptr = (tensor.data or 0) + tensor.byte_offset
    if not view.ptr and math.prod(view.shape):
        raise DLPackError(f"DLPack tensor of {math.prod(view.shape)} elements has a NULL data pointer")
    return view


# Exports alive until their consumer calls the deleter (or their unconsumed capsule dies): address -> parts.
_EXPORTS: dict[int, tuple[Any, ...]] = {}
_EXPORTS_LOCK = threading.Lock()


@_Deleter
def _delete_export(address: int) -> None:
    with _EXPORTS_LOCK:
        _EXPORTS.pop(address, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    if _raw_name(capsule) == b"dltensor":  # never consumed: nobody else will call the deleter
        address = _raw_pointer(capsule, _LEGACY)
        if address:
            _delete_export(address)


def export_dlpack(
    owner: Any, ptr: int, shape: Sequence[int], dtype: np.dtype, device: tuple[int, int],
    strides: Sequence[int] | None = None,
) -> Any:  # fmt: skip
    """A ``dltensor`` capsule for memory ``owner`` keeps alive; ``owner`` stays referenced until the consumer is done."""
    dtype = np.dtype(dtype)
    kind = "b" if dtype.kind == "b" else dtype.kind
    if kind not in _CODES:
        raise DLPackError(f"dtype {dtype} has no DLPack code")
    ndim = len(shape)
    shape_array = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_array = (ctypes.c_int64 * max(ndim, 1))(*strides) if strides is not None else None
    managed = _Managed()
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device = _Device(*device)
    tensor.ndim = ndim
    tensor.dtype = _DataType(_CODES[kind], dtype.itemsize * 8, 1)
    tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    if strides_array is not None:
        tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = ctypes.cast(_delete_export, ctypes.c_void_p).value
    address = ctypes.addressof(managed)
    with _EXPORTS_LOCK:
        _EXPORTS[address] = (owner, managed, shape_array, strides_array)
    destructor = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value
    return _new_capsule(address, _LEGACY, destructor)


def live_exports() -> int:
    """How many exported capsules are still held by a consumer (tests check that deleters ran)."""
    with _EXPORTS_LOCK:
        return len(_EXPORTS)
