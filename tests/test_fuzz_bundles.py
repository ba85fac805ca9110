"""Hostile bundles, fuzzed: real NPU- and TensorRT-partitioned bundles, mutated, must fail cleanly or stay correct.

* bytes: truncations, bit flips and overwritten ranges anywhere in the file. The
  result either raises BundleError at load or (a flip in padding) loads and computes
  exactly what the original does: never a bundle that loads as valid but wrong;
* header: a random field anywhere in the header replaced by a value of a random type,
  re-packed with correct checksums so validation (not the checksum) must catch it;
* NPU payload: the same for a random field of the JSON graph.

Each example has a 2-second deadline (nothing may hang) and a 64 MB bound on what
loading and running may allocate (traced by tracemalloc, which sees numpy's buffers
too): a declared-but-absurd size must be refused, never allocated.

``FUZZ_EXAMPLES=N`` sets the examples per test (150 by default, bounded for CI);
``FUZZ_REPORT=path.json`` writes the outcome counts, for docs/RELIABILITY.md.
"""

from __future__ import annotations

import copy
import json
import os
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime_lite
from aot.compiler import build
from aot.packager import to_bytes
from runtime_lite import BundleError, ExecutionError, InputError
from runtime_lite.backends import BackendContext, IncompatiblePayload
from runtime_lite.backends.npu import NpuBackend
from tests.conftest import small_cnn_model
from tests.hostile import paths

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow],
)

HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.sampled_from([0, -1, 1 << 31, 1 << 40, (1 << 64) - 1]),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.lists(st.integers(-3, 1 << 40), max_size=6),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)


ALLOCATION_BOUND = 64 << 20
OUTCOMES: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def outcome_report():
    tracemalloc.start()
    yield
    tracemalloc.stop()
    if os.environ.get("FUZZ_REPORT"):
        with open(os.environ["FUZZ_REPORT"], "w") as f:
            json.dump({" / ".join(k): v for k, v in sorted(OUTCOMES.items())}, f, indent=1)


@pytest.fixture(scope="module")
def npu_build():
    model = small_cnn_model(1, 13)
    result = build(model, targets=["npu"])
    assert result.header["modules"], "the fuzzed bundle must contain NPU modules"
    return result


@pytest.fixture(scope="module")
def tensorrt_build():
    result = build(small_cnn_model(1, 13), targets=["tensorrt"], min_region_size=1)
    assert [m["backend"] for m in result.header["modules"]] == ["tensorrt"]
    return result


@pytest.fixture(scope="module", params=["npu", "tensorrt"])
def original(request):
    """(build, bundle bytes, input, expected outputs) of each backend's bundle."""
    result = request.getfixturevalue(f"{request.param}_build")
    data = result.to_bytes()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    return request.param, result, data, x, runtime_lite.load(data).run([x])


def _replace(tree, path, value):
    tree = copy.deepcopy(tree)
    target = tree
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return tree


def _load_cleanly(data, x, expected=None) -> str:
    """Load and run; only the runtime's own errors may come out, and no absurd allocation."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        outcome = _load_and_run(data, x, expected)
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
    assert peak < ALLOCATION_BOUND, f"loading a damaged bundle allocated {peak >> 20} MB"
    return outcome


def _load_and_run(data, x, expected) -> str:
    try:
        module = runtime_lite.load(data)
    except BundleError as e:
        assert "\n" not in str(e)
        return "rejected at load (BundleError)"
    try:
        outputs = module.run([x])
    except (ExecutionError, InputError) as e:
        assert "\n" not in str(e)
        return f"refused at run ({type(e).__name__})"
    if expected is None:
        return "loaded and ran"
    for a, b in zip(outputs, expected):
        np.testing.assert_array_equal(a, b)
    return "loaded, outputs identical"


@FUZZ
@given(data=st.data())
def test_damaged_bytes_are_rejected_or_harmless(original, data):
    backend, _, bundle, x, expected = original
    raw = bytearray(bundle)
    kind = data.draw(st.sampled_from(["truncate", "flip", "overwrite"]))
    if kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
    else:
        start = data.draw(st.integers(0, len(raw) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=64))
        raw[start : start + len(chunk)] = chunk
    OUTCOMES[backend, f"bytes {kind}", _load_cleanly(bytes(raw), x, expected)] += 1


@FUZZ
@given(data=st.data())
def test_hostile_header_fields_are_bundle_errors(original, data):
    backend, result, _, x, _ = original
    path = data.draw(st.sampled_from(list(paths(result.header))))
    header = _replace(result.header, path, data.draw(HOSTILE_VALUES))
    try:
        bundle = to_bytes(header, result.blobs)
    except (TypeError, ValueError, OverflowError):
        OUTCOMES[backend, "header field", "not encodable by msgpack"] += 1
        return  # e.g. an int beyond 64 bits: no bundle to load
    OUTCOMES[backend, "header field", _load_cleanly(bundle, x)] += 1


@FUZZ
@given(data=st.data())
def test_hostile_npu_payload_fields_are_bundle_errors(npu_build, data):
    blob = npu_build.header["modules"][0]["payloads"]["graph"]
    graph = json.loads(bytes(npu_build.blobs.payloads[blob]))
    path = data.draw(st.sampled_from(list(paths(graph))))
    value = data.draw(HOSTILE_VALUES)
    try:
        payload = json.dumps(_replace(graph, path, value)).encode()
    except (TypeError, ValueError):
        OUTCOMES["npu", "graph field", "not expressible in JSON"] += 1
        return
    try:
        NpuBackend().init(BackendContext(), {"graph": memoryview(payload)}, {})
        OUTCOMES["npu", "graph field", "accepted (a valid graph)"] += 1
    except (BundleError, IncompatiblePayload) as e:
        assert "\n" not in str(e)
        OUTCOMES["npu", "graph field", f"rejected at init ({type(e).__name__})"] += 1
