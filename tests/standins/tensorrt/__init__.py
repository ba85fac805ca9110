"""Test stand-in for the ``tensorrt`` Python API (see tests/standins/README.md); never shipped.

An "engine" is ``MAGIC + JSON signature + NUL + recipe``: deserializing it where the
TensorRT version or compute capability differs returns None (unless the engine is
hardware- or version-compatible and allowed), as the real runtime does; executing it
runs the recipe in onnxruntime on the bytes behind the tensor addresses.
"""

from __future__ import annotations

import collections
import ctypes
import enum
import json
import os

import numpy as np
import onnx
import onnxruntime

__version__ = os.environ.get("STANDIN_TRT_VERSION", "10.13.0")
MAGIC = b"STANDIN-TRT-ENGINE\0"


def _device() -> dict:
    return {"tensorrt": __version__, "cc": os.environ.get("STANDIN_GPU_CC", "8.6")}


class Logger:
    WARNING = 2

    def __init__(self, severity=WARNING):
        self.severity = severity


class NetworkDefinitionCreationFlag(enum.IntEnum):
    STRONGLY_TYPED = 5


class MemoryPoolType(enum.IntEnum):
    WORKSPACE = 0


class BuilderFlag(enum.IntEnum):
    FP16 = 0
    VERSION_COMPATIBLE = 12
    EXCLUDE_LEAN_RUNTIME = 13


class HardwareCompatibilityLevel(enum.IntEnum):
    NONE = 0
    AMPERE_PLUS = 1


class TensorIOMode(enum.IntEnum):
    INPUT = 1
    OUTPUT = 2


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    INT64 = 8


_NP = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8,
       DataType.INT32: np.int32, DataType.BOOL: np.bool_, DataType.INT64: np.int64}  # fmt: skip
_FROM_ONNX = {onnx.TensorProto.FLOAT: DataType.FLOAT, onnx.TensorProto.FLOAT16: DataType.HALF,
              onnx.TensorProto.INT8: DataType.INT8, onnx.TensorProto.INT32: DataType.INT32,
              onnx.TensorProto.BOOL: DataType.BOOL, onnx.TensorProto.INT64: DataType.INT64}  # fmt: skip


def nptype(dtype):
    return _NP[dtype]


class IProgressMonitor:
    def __init__(self):
        pass


class _ParserError:
    def __init__(self, text):
        self.text = text

    def desc(self):
        return self.text

    def node(self):
        return -1

    def node_name(self):
        return ""

    def node_operator(self):
        return ""


class _Network:
    def __init__(self, flags):
        self.flags = flags
        self.recipe = None


class OnnxParser:
    def __init__(self, network, logger):
        self.network = network
        self.errors = []

    def parse(self, data):
        try:
            onnx.checker.check_model(onnx.load_from_string(bytes(data)))
        except Exception as e:  # the real parser reports, it does not raise
            self.errors.append(_ParserError(str(e).splitlines()[0]))
            return False
        self.network.recipe = bytes(data)
        return True

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, i):
        return self.errors[i]


class _TimingCache:
    def __init__(self, data):
        self.data = bytes(data) or b"stand-in timing cache"

    def serialize(self):
        return self.data


class _Config:
    def __init__(self):
        self.flags = set()
        self.pools = {}
        self.profiles = []
        self.hardware_compatibility_level = HardwareCompatibilityLevel.NONE
        self.progress_monitor = None
        self.timing_cache = None

    def set_memory_pool_limit(self, pool, size):
        self.pools[pool] = size

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)

    def set_flag(self, flag):
        self.flags.add(flag)

    def create_timing_cache(self, data):
        return _TimingCache(data)

    def set_timing_cache(self, cache, ignore_mismatch):
        self.timing_cache = cache
        return True

    def get_timing_cache(self):
        return self.timing_cache


class _Profile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, lo, opt, hi):
        self.shapes[name] = (list(lo), list(opt), list(hi))


class Builder:
    def __init__(self, logger):
        self.logger = logger

    def create_network(self, flags=0):
        return _Network(flags)

    def create_builder_config(self):
        return _Config()

    def create_optimization_profile(self):
        return _Profile()

    def build_serialized_network(self, network, config):
        log = os.environ.get("STANDIN_TRT_BUILD_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {__version__} {_device()['cc']}\n")
        monitor = config.progress_monitor
        if monitor is not None:
            monitor.phase_start("Building engine", None, 2)
            for step in range(2):
                monitor.step_complete("Building engine", step)
            monitor.phase_finish("Building engine")
        signature = {
            **_device(),
            "hardware_compatible": config.hardware_compatibility_level == HardwareCompatibilityLevel.AMPERE_PLUS,
            "version_compatible": BuilderFlag.VERSION_COMPATIBLE in config.flags,
            "exclude_lean_runtime": BuilderFlag.EXCLUDE_LEAN_RUNTIME in config.flags,
            "strongly_typed": bool(network.flags & (1 << NetworkDefinitionCreationFlag.STRONGLY_TYPED)),
            "profiles": [p.shapes for p in config.profiles],
        }
        return MAGIC + json.dumps(signature).encode() + b"\0" + network.recipe


class Runtime:
    #: The lean runtime (tests/standins_lean) runs only version-compatible engines that leave it out.
    lean = False

    def __init__(self, logger):
        self.engine_host_code_allowed = False

    def deserialize_cuda_engine(self, data):
        data = bytes(data)
        if not data.startswith(MAGIC):
            return None
        header, _, recipe = data[len(MAGIC) :].partition(b"\0")
        try:
            signature = json.loads(header)
        except ValueError:
            return None  # a damaged engine: TensorRT logs an error and returns None
        here = _device()
        excluded = signature.get("exclude_lean_runtime", False)
        if self.lean and not (signature["version_compatible"] and excluded):
            return None
        if signature["tensorrt"] != here["tensorrt"]:
            if excluded or not (signature["version_compatible"] and self.engine_host_code_allowed):
                return None
        if signature["cc"] != here["cc"]:
            if not (signature["hardware_compatible"] and float(here["cc"]) >= 8.0):
                return None
        try:
            return _Engine(recipe)
        except Exception:
            return None


class _Engine:
    def __init__(self, recipe):
        model = onnx.load_from_string(recipe)
        self.session = onnxruntime.InferenceSession(recipe, providers=["CPUExecutionProvider"])
        self.io = [(i.name, TensorIOMode.INPUT, i.type.tensor_type.elem_type) for i in model.graph.input]
        self.io += [(o.name, TensorIOMode.OUTPUT, o.type.tensor_type.elem_type) for o in model.graph.output]

    @property
    def num_io_tensors(self):
        return len(self.io)

    def get_tensor_name(self, i):
        return self.io[i][0]

    def get_tensor_mode(self, name):
        return next(mode for n, mode, _ in self.io if n == name)

    def get_tensor_dtype(self, name):
        return next(_FROM_ONNX[t] for n, _, t in self.io if n == name)

    def create_execution_context(self):
        return _Context(self)


class _Context:
    def __init__(self, engine):
        self.engine = engine
        self.shapes, self.addresses, self.results = {}, {}, None
        self.calls = collections.Counter()  # what the runner asked of the context, by method

    def set_input_shape(self, name, shape):
        self.calls["set_input_shape"] += 1
        self.shapes[name] = tuple(shape)
        self.results = None
        return True

    def set_tensor_address(self, name, address):
        self.calls["set_tensor_address"] += 1
        self.addresses[name] = address
        return True

    def _inputs(self, zeros, shapes=None, addresses=None):
        shapes = self.shapes if shapes is None else shapes
        addresses = self.addresses if addresses is None else addresses
        feeds = {}
        for name, mode, elem in self.engine.io:
            if mode == TensorIOMode.INPUT:
                dtype = np.dtype(_NP[_FROM_ONNX[elem]])
                shape = shapes[name]
                if zeros:
                    feeds[name] = np.zeros(shape, dtype)
                else:
                    count = int(np.prod(shape))
                    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(addresses[name])
                    feeds[name] = np.frombuffer(raw, dtype, count).reshape(shape).copy()
        return feeds

    def get_tensor_shape(self, name):
        outputs = self.engine.session.run(None, self._inputs(zeros=True))
        names = [n for n, mode, _ in self.engine.io if mode == TensorIOMode.OUTPUT]
        return outputs[names.index(name)].shape

    def execute_async_v3(self, stream):
        """Enqueue the engine on ``stream`` (the stand-in cudart runs it now, or records it while capturing)."""
        from cuda.bindings import runtime as cudart

        self.calls["execute_async_v3"] += 1
        shapes, addresses = dict(self.shapes), dict(self.addresses)  # what a graph captured would bind

        def work():
            self.calls["executed"] += 1
            outputs = self.engine.session.run(None, self._inputs(False, shapes, addresses))
            names = [n for n, mode, _ in self.engine.io if mode == TensorIOMode.OUTPUT]
            for name, value in zip(names, outputs):
                value = np.ascontiguousarray(value)
                ctypes.memmove(addresses[name], value.ctypes.data, value.nbytes)

        cudart.enqueue(stream, work)
        return True
