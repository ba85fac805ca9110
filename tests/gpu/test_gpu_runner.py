"""The engine runner on a real GPU: real cuda-python, real CUDA work (y = 2x + 1 by CuPy), no TensorRT needed.

Skipped, with the reason, where CuPy, cuda-python or a CUDA device is missing. What
the stand-in tests (tests/test_device_io.py) cannot show is shown here: that the
pointers, copies, streams, events and graphs the runner uses are right on a device
that really runs asynchronously. Inputs are made on other streams by kernels that are
still running when the run starts, so a missing wait shows as a wrong result.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.gpu.cupy_engine import gpu_missing, runner

REASON = gpu_missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no GPU for the runner: {REASON}")


def _expected(x: np.ndarray) -> np.ndarray:
    return (2 * x.astype(np.float32) + 1).astype(np.float32)


def _slow_input(cupy, shape, seed, stream):
    """An input computed on ``stream`` by enough kernels that it is not done when the host moves on."""
    with stream:
        x = cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32)
        for _ in range(20):
            x = cupy.sin(x) * 0 + x  # same values, more time on the stream
    return x


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def test_host_arrays_in_and_out_with_batch_growth_and_shrink():
    r = runner()
    try:
        for batch in (1, 8, 3, 8, 1):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            (y,) = r.run([x])
            assert y.shape == x.shape
            np.testing.assert_array_equal(y, _expected(x))
    finally:
        r.close()


def test_held_host_results_do_not_alias():
    r = runner()
    inputs = [np.full((2, 1000), i, np.float32) for i in range(6)]
    results = [r.run([x])[0] for x in inputs]
    for x, y in zip(inputs, results):
        np.testing.assert_array_equal(y, _expected(x))
    assert not any(np.shares_memory(a, b) for i, a in enumerate(results) for b in results[i + 1 :])
    r.close()


def test_cupy_inputs_made_on_another_stream_and_device_outputs():
    import cupy

    r = runner()
    producer = cupy.cuda.Stream(non_blocking=True)
    x = _slow_input(cupy, (4, 3, 64, 64), 0, producer)  # CuPy exports __cuda_array_interface__ v3: its stream
    (y,) = r.run([x], outputs_on="device")
    as_cupy = cupy.asarray(y)  # no copy: CuPy reads our __cuda_array_interface__
    assert as_cupy.data.ptr == y.ptr
    np.testing.assert_array_equal(cupy.asnumpy(as_cupy), _expected(cupy.asnumpy(x)))
    np.testing.assert_array_equal(y.numpy(), _expected(cupy.asnumpy(x)))
    via_dlpack = cupy.from_dlpack(y)
    assert via_dlpack.data.ptr == y.ptr
    r.close()


def test_torch_cuda_inputs_and_outputs():
    torch = _torch_cuda()
    r = runner()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.randn(2, 3, 128, 128, device="cuda")
        for _ in range(20):
            x = torch.sin(x) * 0 + x
    with torch.cuda.stream(side):  # torch's current stream is the producer: DLPack orders it before our stream
        (y,) = r.run([x], outputs_on="device")
        out = torch.from_dlpack(y)
    assert out.data_ptr() == y.ptr
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(x.cpu().numpy()))
    (host,) = r.run([x])
    np.testing.assert_array_equal(host, _expected(x.cpu().numpy()))
    r.close()


def test_the_callers_stream_carries_the_run():
    import cupy

    r = runner()
    stream = cupy.cuda.Stream(non_blocking=True)
    x = _slow_input(cupy, (1, 3, 224, 224), 1, stream)
    (y,) = r.run([x], stream=stream, outputs_on="device")
    assert y.stream == stream.ptr
    with stream:
        z = cupy.asarray(y) * 1  # in order after the run on the same stream
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(z), _expected(cupy.asnumpy(x)))
    r.close()


@pytest.mark.parametrize("graphs", [False, True])
def test_eight_threads_share_a_runner(graphs):
    import cupy

    r = runner(cuda_graphs=graphs)
    failures, pointers = [], []

    def work(i):
        try:
            rng = np.random.default_rng(i)
            for round_ in range(10):
                x = rng.standard_normal((1 + (i + round_) % 3, 3, 32, 32)).astype(np.float32)
                if (i + round_) % 2:
                    (y,) = r.run([cupy.asarray(x)], outputs_on="device")
                    pointers.append(y.ptr)
                    value = y.numpy()
                else:
                    (value,) = r.run([x])
                if not np.array_equal(value, _expected(x)):
                    failures.append((i, round_))
        except Exception as e:  # pragma: no cover - reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    r.close()


def test_cuda_graphs_replay_for_fixed_shapes():
    r = runner(cuda_graphs=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    for i in range(5):
        (y,) = r.run([x + i])
        np.testing.assert_array_equal(y, _expected(x + i))
    assert r.context.launches == 2  # one plain run, one capture; the other three were graph launches
    r.close()
