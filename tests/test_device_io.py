"""GPU arrays in and out of a run, the runner's copies, CUDA graphs: with the stand-in GPU (tests/standins).

The stand-in's "device memory" is host memory, its streams run work at once (or record
it while a graph is captured), and it counts every cudart call: what is under test is
ours (which copies a run makes, which stream it uses and waits for, who owns a result,
what is converted at the host boundary and how often). The DLPack machinery is tested
against numpy and torch for real (on host memory: the structs are the same for CUDA).
Whether the synchronisation holds on a real GPU is tests/gpu/test_gpu_runner.py's job.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import weakref

import numpy as np
import pytest
import torch

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.testing import relative_l2
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings
from runtime_lite.errors import InputError
from runtime_lite.execution import dlpack
from runtime_lite.execution.device import DeviceArray, is_device_array, stream_handle, to_device
from tests.helpers import build_and_load, conv_relu_graph
from tests.tensorrt_standin import StandinGpuArray

WEIGHT = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32)
DATA = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def _cudart():
    from cuda.bindings import runtime

    return runtime


def _bundle(tmp_path, graph=None, **settings) -> bytes:
    options = TensorRTOptions(BuildSettings(**settings), cache=EngineCache(tmp_path / "cache"), progress=None)
    graph = graph if graph is not None else conv_relu_graph(WEIGHT)
    return build(graph, targets=["tensorrt"], min_region_size=1, backend_options={"tensorrt": options}).to_bytes()


def _load(bundle: bytes, **options):
    return runtime_lite.load(bundle, backend_options={"tensorrt": {"allow_engine_build": False, **options}})


def _host(data=DATA):
    return build_and_load(conv_relu_graph(WEIGHT, data.shape[0])).run({"data": data})[0]


def _runner(module):
    return module._modules[0].handle.runner


# -- DLPack through ctypes, against real producers and consumers -----------------------------------------------


@pytest.mark.parametrize("make", [lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
                                  lambda: torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, 1:]])  # fmt: skip
def test_dlpack_import_reads_numpy_and_torch_and_calls_their_deleter(make):
    value = make()
    array = value if isinstance(value, np.ndarray) else value.numpy()
    before = sys.getrefcount(value)
    view = dlpack.import_dlpack(value)
    assert view.ptr == array.ctypes.data and view.shape == array.shape and view.dtype == array.dtype
    assert view.strides in (None, tuple(s // array.itemsize for s in array.strides)) and view.device == (1, 0)
    if isinstance(value, np.ndarray):
        assert sys.getrefcount(value) == before + 1  # the producer's capsule holds the array ...
        view.release()
        assert sys.getrefcount(value) == before  # ... until its deleter ran
    view.release()  # twice is harmless


class _HostExport:
    """Host memory exported with our DLPack writer (the CUDA export differs only in the device type)."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (dlpack.KDL_CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, **_):
        a = self.array
        return dlpack.export_dlpack(self, a.ctypes.data, a.shape, a.dtype, (dlpack.KDL_CPU, 0))


def test_dlpack_export_is_read_by_numpy_and_torch_and_released_when_they_are_done():
    before = dlpack.live_exports()
    source = _HostExport(np.arange(6, dtype=np.float64).reshape(2, 3))
    alive = weakref.ref(source)
    from_numpy = np.from_dlpack(source)
    from_torch = torch.from_dlpack(source)
    np.testing.assert_array_equal(from_numpy, source.array)
    np.testing.assert_array_equal(from_torch.numpy(), source.array)
    assert np.shares_memory(from_numpy, source.array)
    del source
    assert alive() is not None and dlpack.live_exports() == before + 2  # the consumers keep it alive
    del from_numpy, from_torch
    gc.collect()
    assert alive() is None and dlpack.live_exports() == before
    capsule = _HostExport(np.zeros(3, np.int32)).__dlpack__()
    assert dlpack.live_exports() == before + 1
    del capsule  # never consumed: its destructor calls the deleter
    assert dlpack.live_exports() == before


def test_streams_are_read_from_every_library_convention():
    class Torchy:
        cuda_stream = 11

    class Cupyish:
        ptr = 12

    class Protocol:
        def __cuda_stream__(self):
            return (0, 13)

    assert [stream_handle(s) for s in (10, Torchy(), Cupyish(), Protocol())] == [10, 11, 12, 13]
    with pytest.raises(InputError, match="str is not a CUDA stream"):
        stream_handle("default")


def _cuda_device_here() -> bool:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return False
    err, count = runtime.cudaGetDeviceCount()
    return err == runtime.cudaError_t.cudaSuccess and count > 0


def test_device_outputs_without_a_gpu_are_a_one_line_error(small_bundle):
    if _cuda_device_here():
        pytest.skip("a CUDA device is here, so outputs_on='device' works (tests/gpu covers it)")
    module = runtime_lite.load(small_bundle)  # no stand-in here: this machine's own CUDA (none) is asked
    with pytest.raises(runtime_lite.ExecutionError, match="outputs_on='device': output 0 cannot be put on a GPU"):
        module.run([np.zeros((1, 3, 8, 8), np.float32)], outputs_on="device")


def test_host_arrays_are_never_device_arrays():
    assert not is_device_array(np.zeros(3)) and not is_device_array(torch.zeros(3)) and not is_device_array([1.0])


# -- a module with GPU inputs and outputs -------------------------------------------------------------------------


def test_gpu_inputs_are_bound_in_place_after_their_producer_stream(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    expected = _host()
    np.testing.assert_allclose(module.run({"data": DATA})[0], expected, rtol=1e-5, atol=1e-5)
    before = dict(calls)
    x = StandinGpuArray(DATA, stream=77)  # CuPy's way: __cuda_array_interface__ v3 names its stream
    assert is_device_array(x)
    out = module.run({"data": x})[0]
    assert isinstance(out, np.ndarray) and relative_l2(out, expected) <= 1e-5
    assert calls["cudaMemcpyAsync"] - before["cudaMemcpyAsync"] == 1  # the result's D2H only: no H2D of the input
    assert calls["cudaStreamWaitEvent"] - before.get("cudaStreamWaitEvent", 0) == 1  # after the producer's work
    assert _cudart().STREAMS[-1] == _runner(module).stream


def test_dlpack_only_inputs_are_ordered_on_the_runner_stream(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    x = StandinGpuArray(DATA, dlpack_only=True)  # a producer that exports __dlpack__ alone
    before = dlpack.live_exports()
    out = module.run({"data": x})[0]
    assert relative_l2(out, _host()) <= 1e-5
    assert x.dlpack_streams == [1]  # described at bind time; the legacy stream that blocking streams follow
    assert dlpack.live_exports() <= before  # our view of it was given back
    torch_like = StandinGpuArray(DATA)  # an interface naming no stream (torch's v2), and __dlpack__
    assert relative_l2(module.run({"data": torch_like})[0], _host()) <= 1e-5
    assert torch_like.dlpack_streams == [_runner(module).stream]  # the producer ordered its work before ours


def test_outputs_on_device_are_owned_arrays_ready_in_stream_order(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    cudart = _cudart()
    module.run({"data": DATA}, outputs_on="device")  # the runner's own buffers are made at its first run
    gc.collect()
    allocations = cudart.live_allocations()
    first = module.run({"data": DATA}, outputs_on="device")[0]
    second = module.run({"data": DATA * 2}, outputs_on="device")[0]
    assert isinstance(first, DeviceArray) and first.ptr != second.ptr  # each run's results are its own
    interface = first.__cuda_array_interface__
    assert interface["version"] == 3 and interface["stream"] == _runner(module).stream
    assert interface["shape"] == (1, 16, 30, 30) and interface["typestr"] == "<f4"
    assert relative_l2(first.numpy(), _host()) <= 1e-5 and relative_l2(second.numpy(), _host(DATA * 2)) <= 1e-5
    waits = cudart.CALLS["cudaStreamWaitEvent"]
    view = dlpack.import_dlpack(first, stream=55)  # a consumer on its own stream waits for the result
    assert cudart.CALLS["cudaStreamWaitEvent"] == waits + 1 and view.ptr == first.ptr and view.device == (2, 0)
    view.release()
    assert relative_l2(StandinGpuArray(first.numpy()).numpy(), _host()) <= 1e-5
    freed_async = cudart.CALLS["cudaFreeAsync"]
    del first, second, view
    gc.collect()
    assert cudart.CALLS["cudaFreeAsync"] == freed_async + 2 and cudart.live_allocations() == allocations


def test_a_device_result_outlives_its_module(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    (result,) = module.run({"data": DATA}, outputs_on="device")
    destroyed = calls["cudaStreamDestroy"]
    module.close()
    assert calls["cudaStreamDestroy"] == destroyed  # the stream it is freed on stays while it lives
    assert relative_l2(result.numpy(), _host()) <= 1e-5
    result.release()
    assert calls["cudaFreeAsync"] >= 1 and calls["cudaStreamDestroy"] == destroyed + 1
    with pytest.raises(ValueError, match="released"):
        result.numpy()


def test_a_scalar_copied_to_the_device_stays_0_d(machine):
    """A 0-d host output (a sum over everything) asked for on the device keeps shape (), not (1,)."""
    out = to_device(np.array(2.5, np.float32))
    assert out.shape == () and out.numpy().shape == () and out.numpy() == np.float32(2.5)


def test_gpu_in_gpu_out_makes_no_copy(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    ours = to_device(DATA)  # one of our DeviceArrays as the input: the run waits for its ready event
    theirs = StandinGpuArray(DATA)
    before = calls["cudaMemcpyAsync"]
    outputs = [module.run({"data": x}, outputs_on="device")[0] for x in (ours, theirs)]
    assert calls["cudaMemcpyAsync"] == before  # TensorRT read and wrote GPU memory in place
    for out in outputs:
        assert relative_l2(out.numpy(), _host()) <= 1e-5


def _two_stage_graph(batch=1):
    """The tutorial's conv + ReLU (a TensorRT region) and an argmax over channels (no TensorRT pattern: host)."""
    graph = conv_relu_graph(WEIGHT, batch)
    (features,) = graph.outputs
    graph.outputs = [features, graph.op("argmax", features, axis=1, keepdims=0, name="label")]
    return graph


def test_a_module_mixing_host_and_tensorrt_converts_at_the_boundary_once(machine, tmp_path):
    bundle = _bundle(tmp_path, graph=_two_stage_graph())
    module = _load(bundle)
    assert [m["backend"] for m in module.modules] == ["tensorrt"] and len(module._plan.instructions) > 1
    features, label = build_and_load(_two_stage_graph()).run({"data": DATA})
    calls = _cudart().CALLS
    x = StandinGpuArray(DATA)
    synchronous = calls["cudaMemcpy"]
    out_features, out_label = module.run({"data": x}, outputs_on="device")
    assert calls["cudaMemcpy"] == synchronous + 1  # the argmax read the engine's result once, on the host
    assert isinstance(out_features, DeviceArray) and isinstance(out_label, DeviceArray)  # host result: uploaded
    assert relative_l2(out_features.numpy(), features) <= 1e-5
    np.testing.assert_array_equal(out_label.numpy(), label)
    host_features, host_label = module.run({"data": StandinGpuArray(DATA)})
    assert isinstance(host_features, np.ndarray) and relative_l2(host_features, features) <= 1e-5
    np.testing.assert_array_equal(host_label, label)


def test_the_callers_stream_carries_the_work(machine, tmp_path):
    module = _load(_bundle(tmp_path))

    class CallerStream:  # torch.cuda.Stream's attribute
        cuda_stream = 4242

    streams = _cudart().STREAMS
    streams.clear()
    caller = CallerStream()
    out = module.run({"data": DATA}, stream=caller, outputs_on="device")[0]
    assert set(streams) == {4242} and out.stream == 4242
    assert out.__cuda_array_interface__["stream"] == 4242
    assert relative_l2(out.numpy(), _host()) <= 1e-5
    # freed in order on 4242 when it goes: it holds the caller's stream, which a GPU must not destroy first
    # (on a real H200 a cupy stream dropped before the result crashed the process in cudaFreeAsync)
    survivor = weakref.ref(caller)
    del caller
    assert survivor() is not None
    del out
    assert survivor() is None


def test_consecutive_runs_are_ordered_on_the_device_and_the_host_waits_only_to_reuse_staging(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    x = StandinGpuArray(DATA)
    module.run({"data": DATA}, outputs_on="device", stream=101)  # host input staged, nothing waited for
    waits, host_waits = calls["cudaStreamWaitEvent"], calls["cudaEventSynchronize"]
    kept = module.run({"data": x}, outputs_on="device", stream=101)  # same stream, GPU input: no wait at all
    assert (calls["cudaStreamWaitEvent"], calls["cudaEventSynchronize"]) == (waits, host_waits)
    kept += module.run({"data": x}, outputs_on="device", stream=202)  # another stream: it waits on the device
    assert calls["cudaStreamWaitEvent"] == waits + 1 and calls["cudaEventSynchronize"] == host_waits
    module.run({"data": DATA}, outputs_on="device", stream=202)
    module.run({"data": DATA}, stream=202)  # the staging the previous run copied from: the host waits first
    assert calls["cudaEventSynchronize"] == host_waits + 1


def test_gpu_inputs_a_runner_cannot_take_are_one_line_errors(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    with pytest.raises(InputError, match="input 'data': expected dtype float32, got a GPU array of float64"):
        module.run({"data": StandinGpuArray(DATA.astype(np.float64))})
    with pytest.raises(InputError, match="outputs_on must be one of host, device"):
        module.run({"data": DATA}, outputs_on="gpu")


def test_a_misaligned_gpu_input_is_copied_on_the_device(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    before = calls["cudaMemcpyAsync"]
    out = module.run({"data": StandinGpuArray(DATA, offset=4)})[0]  # TensorRT wants 256-byte alignment
    assert calls["cudaMemcpyAsync"] == before + 2  # one device-to-device copy, one result D2H
    assert relative_l2(out, _host()) <= 1e-5


# -- host arrays: one copy each way ----------------------------------------------------------------------------


def test_host_results_are_pinned_blocks_handed_over_and_reused_once_dropped(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    calls = _cudart().CALLS
    out = module.run({"data": DATA})[0]
    out = module.run({"data": DATA})[0]  # two blocks: the result held while the next run writes its own
    pinned = calls["cudaMallocHost"]
    for _ in range(5):
        out = module.run({"data": DATA})[0]  # the previous result is dropped: its block comes back
        assert out.flags.writeable and out.flags.c_contiguous
    assert calls["cudaMallocHost"] == pinned
    kept = [module.run({"data": DATA * i})[0] for i in range(1, 4)]  # held: every result its own memory
    assert not any(np.shares_memory(a, b) for i, a in enumerate(kept) for b in kept[i + 1 :])
    for i, result in enumerate(kept, 1):
        np.testing.assert_allclose(result, _host(DATA * i), rtol=1e-5, atol=1e-5)


def test_pinned_inputs_go_to_the_gpu_without_a_staging_copy(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    runner = _runner(module)
    x = runner.host_array(DATA.shape)  # pinned memory of the runner's, for the caller to fill
    x[...] = DATA
    staged = runner.staged_bytes
    out = module.run({"data": x})[0]
    assert runner.staged_bytes == staged and relative_l2(out, _host()) <= 1e-5
    module.run({"data": DATA})
    assert runner.staged_bytes == staged + DATA.nbytes  # an ordinary array: one copy into staging
    module.run({"data": x}, outputs_on="device")  # asynchronous: the caller could change x meanwhile, so staged
    assert runner.staged_bytes == staged + 2 * DATA.nbytes


def test_shapes_and_addresses_go_to_tensorrt_only_when_they_change(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    for _ in range(4):
        module.run({"data": DATA})
    calls = _runner(module).context.calls
    assert calls["set_input_shape"] == 1 and calls["set_tensor_address"] == 2 and calls["execute_async_v3"] == 4


def test_batches_grow_and_shrink_in_one_runner(machine, tmp_path):
    module = _load(_bundle(tmp_path, graph=conv_relu_graph(WEIGHT, "N"), batch=(1, 2, 8)))
    batches = [np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(np.float32) for b in (1, 8, 3, 8, 1)]
    on_gpu = [StandinGpuArray(data) for data in batches]
    allocations = _cudart().CALLS["cudaMalloc"]
    for data, gpu_data in zip(batches, on_gpu):
        batch = data.shape[0]
        host = module.run({"data": data})[0]
        device = module.run({"data": gpu_data}, outputs_on="device")[0]
        assert host.shape == device.shape == (batch, 16, 30, 30)
        assert relative_l2(host, _host(data)) <= 1e-5 and relative_l2(device.numpy(), _host(data)) <= 1e-5
    assert _cudart().CALLS["cudaMalloc"] - allocations == 4  # input and output buffers: made at batch 1, grown at 8


def test_threads_share_one_runner_without_mixing_results(machine, tmp_path):
    module = _load(_bundle(tmp_path))
    inputs = [np.random.default_rng(100 + i).standard_normal((1, 3, 32, 32)).astype(np.float32) for i in range(8)]
    expected = [_host(x) for x in inputs]
    failures, results = [], {}

    def work(i):
        try:
            for round_ in range(5):
                on = "device" if (i + round_) % 2 else "host"
                x = inputs[i] if i % 3 else StandinGpuArray(inputs[i])
                out = module.run({"data": x}, outputs_on=on)[0]
                value = out.numpy() if on == "device" else out
                results[i, round_] = out
                if relative_l2(value, expected[i]) > 1e-5:
                    failures.append((i, round_))
        except Exception as e:  # pragma: no cover - reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    hosts = [r for r in results.values() if isinstance(r, np.ndarray)]
    devices = [r for r in results.values() if isinstance(r, DeviceArray)]
    assert len({r.ptr for r in devices}) == len(devices)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(hosts) for b in hosts[i + 1 :])


# -- CUDA graphs ---------------------------------------------------------------------------------------------------


def test_cuda_graphs_capture_each_shape_once_and_replay_it(machine, tmp_path):
    module = _load(_bundle(tmp_path, graph=conv_relu_graph(WEIGHT, "N"), batch=(1, 2, 8)), cuda_graphs=True)
    runner = _runner(module)
    calls = _cudart().CALLS
    launches = calls["cudaGraphLaunch"]
    for batch in (2, 2, 2, 4, 4, 2):
        data = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        assert relative_l2(module.run({"data": data})[0], _host(data)) <= 1e-5
        device = module.run({"data": StandinGpuArray(data)}, outputs_on="device")[0]
        assert relative_l2(device.numpy(), _host(data)) <= 1e-5
    # batch 2: a plain run, a capture, then launches; batch 4 grew the buffers: both shapes captured anew
    assert calls["cudaStreamBeginCapture"] == 3 and calls["cudaGraphLaunch"] - launches == 12 - 3
    assert runner.context.calls["execute_async_v3"] == 6  # 3 plain runs and 3 captures; the rest were launches
    assert runner.context.calls["executed"] == 12


def test_an_engine_that_cannot_be_captured_runs_without_graphs(machine, tmp_path, monkeypatch, caplog):
    module = _load(_bundle(tmp_path), cuda_graphs=True)
    monkeypatch.setenv("STANDIN_NO_GRAPHS", "1")
    with caplog.at_level(logging.INFO, logger="runtime_lite.tensorrt"):
        for _ in range(3):
            assert relative_l2(module.run({"data": DATA})[0], _host()) <= 1e-5
    assert "CUDA graph capture unavailable" in caplog.text and _cudart().CALLS["cudaGraphLaunch"] == 0


# -- the lean runtime ---------------------------------------------------------------------------------------------


def test_the_lean_runtime_runs_engines_built_without_it_and_refuses_others(machine, tmp_path, caplog):
    lean_engine = _bundle(tmp_path, version_compatible=True, exclude_lean_runtime=True)
    full_engine = _bundle(tmp_path / "full")
    machine.become(lean=True)  # tensorrt does not import here; tensorrt_lean does
    from runtime_lite.backends.tensorrt.gpu import probe

    assert probe()[1].__name__ == "tensorrt_lean" and probe()[0].runtime == "lean"
    module = _load(lean_engine)
    assert "engine 0 from the bundle" in module.modules[0]["placement"]  # no host-code opt-in: none inside
    assert relative_l2(module.run({"data": DATA})[0], _host()) <= 1e-5
    with caplog.at_level(logging.INFO, logger="runtime_lite.tensorrt"):
        refused = _load(full_engine)
    assert "--version-compatible --exclude-lean-runtime" in refused.modules[0]["placement"]
    assert "on the host" in caplog.text and "exclude-lean-runtime" in caplog.text
    np.testing.assert_array_equal(refused.run({"data": DATA})[0], _host())
    building = runtime_lite.load(full_engine, backend_options={"tensorrt": {"allow_engine_build": True,
                                                                            "cache_dir": tmp_path / "c2"}})  # fmt: skip
    assert "cannot build them" in building.modules[0]["placement"]
    machine.become(lean=True, version="10.14.1")  # a lean runtime of another version: not the engine's
    other = _load(lean_engine)
    assert "built with TensorRT 10.13.0, the lean runtime here is 10.14.1" in other.modules[0]["placement"]


def test_a_corrupt_engine_falls_back_to_the_host_with_the_reason(machine, tmp_path, caplog):
    bundle = bytearray(_bundle(tmp_path, version_compatible=True, exclude_lean_runtime=True))
    at = bundle.index(b"STANDIN-TRT-ENGINE\0") + len(b"STANDIN-TRT-ENGINE\0")
    bundle[at] = ord("#")  # the engine's header no longer parses
    machine.become(lean=True)
    with caplog.at_level(logging.INFO, logger="runtime_lite.tensorrt"):
        module = runtime_lite.load(bytes(bundle), verify=False,
                                   backend_options={"tensorrt": {"allow_engine_build": False}})  # fmt: skip
    assert "could not deserialize the engine" in module.modules[0]["placement"]
    assert "tensorrt_lean" in caplog.text and "on the host" in caplog.text
    np.testing.assert_array_equal(module.run({"data": DATA})[0], _host())


def test_excluding_the_lean_runtime_needs_a_version_compatible_engine():
    with pytest.raises(ValueError, match="exclude_lean_runtime needs version_compatible"):
        BuildSettings(exclude_lean_runtime=True)
    assert "exclude_lean_runtime" not in BuildSettings().to_record()  # engine keys from before stay the same
