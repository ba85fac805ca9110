"""The graph onnxruntime optimized at a first load, kept in the cache and opened as it is at later loads.

(runtime_lite/backends/onnxruntime/optimized.py.) The cache is off by default; these tests switch it on,
each in a temporary cache directory of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import aot
import runtime_lite
from runtime_lite import BundleError
from runtime_lite.backends.onnxruntime import optimized
from tests.helpers import onnxruntime_outputs, wide_model

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
FROM_RECIPE, FROM_CACHE = "from its recipe", "from its graph optimized at an earlier load"


@pytest.fixture(scope="module")
def bundle() -> bytes:
    return aot.build(wide_model(), targets=["onnxruntime"], log=None).to_bytes()


def _load(source, cache: Path, **kwargs) -> runtime_lite.Module:
    options = {"onnxruntime": {"graph_cache": True, "cache_dir": str(cache), "threads": 1}}
    return runtime_lite.load(source, backend_options=options, **kwargs)


def _detail(module: runtime_lite.Module) -> str:
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "onnxruntime", placement
    return placement["detail"]


def _entry(cache: Path, suffix: str) -> Path:
    (path,) = (cache / "onnxruntime-graphs" / "v2").glob(f"*.{suffix}")
    return path


def _level(module: runtime_lite.Module) -> str:
    return str(module._modules[0].handle.session._session.get_session_options().graph_optimization_level)


def test_a_later_load_opens_the_optimized_graph_and_computes_the_same(bundle, tmp_path):
    first = _load(bundle, tmp_path)
    assert FROM_RECIPE in _detail(first) and _level(first).endswith("ORT_ENABLE_ALL")
    expected = first.run({"x": X})
    assert _entry(tmp_path, "engine").stat().st_size > 0  # kept once the load was verified
    second = _load(bundle, tmp_path)
    assert FROM_CACHE in _detail(second)
    assert _level(second).endswith("ORT_ENABLE_ALL")  # opened at the level it was optimized at
    actual = second.run({"x": X})
    np.testing.assert_array_equal(actual[0], expected[0])
    original = onnxruntime_outputs(wide_model(), {"x": X})[0]
    assert np.linalg.norm(actual[0] - original) <= 1e-5 * np.linalg.norm(original)


def test_a_weight_the_optimizer_left_alone_is_the_bundles_own_not_a_second_copy(bundle, tmp_path):
    _load(bundle, tmp_path)
    module = _load(bundle, tmp_path)
    handle = module._modules[0].handle
    bundle_addresses = {array.ctypes.data for array in handle.weights.values()}
    held = {value.ctypes.data for value in handle.session._values}
    assert bundle_addresses & held, "onnxruntime holds no bundle view: every weight was stored again"
    # the entry holds what the optimizer changed (reordered, fused), not the 4 MiB dense weight again
    assert _entry(tmp_path, "engine").stat().st_size < sum(a.nbytes for a in handle.weights.values())


def test_another_onnxruntime_version_optimizes_again_and_says_why(bundle, tmp_path, monkeypatch, caplog):
    real = onnxruntime.__version__
    monkeypatch.setattr(onnxruntime, "__version__", "99.0.0")
    assert FROM_RECIPE in _detail(_load(bundle, tmp_path))
    assert json.loads(_entry(tmp_path, "json").read_text())["ingredients"]["onnxruntime"] == "99.0.0"
    monkeypatch.setattr(onnxruntime, "__version__", real)
    with caplog.at_level(logging.INFO, logger="runtime_lite.onnxruntime"):
        module = _load(bundle, tmp_path)
    assert FROM_RECIPE in _detail(module)
    assert f"made by onnxruntime 99.0.0, this is {real}: optimizing it again" in caplog.text
    assert json.loads(_entry(tmp_path, "json").read_text())["ingredients"]["onnxruntime"] == real  # redone
    assert FROM_CACHE in _detail(_load(bundle, tmp_path))


@pytest.mark.parametrize("where", ["graph", "weights", "record"])
def test_a_tampered_entry_is_caught_dropped_and_made_again(bundle, tmp_path, caplog, where):
    expected = _load(bundle, tmp_path).run({"x": X})
    engine, record = _entry(tmp_path, "engine"), _entry(tmp_path, "json")
    if where == "record":  # a size or digest rewritten to match a changed file: the HMAC fails
        fields = json.loads(record.read_text())
        fields["ingredients"]["head_sha256"] = "0" * 64
        record.write_text(json.dumps(fields))
    else:
        data = bytearray(engine.read_bytes())
        data[40 if where == "graph" else len(data) - 8] ^= 0x40  # a byte of the graph, or of the last weight
        engine.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        module = _load(bundle, tmp_path)
    assert FROM_RECIPE in _detail(module)
    why = {
        "graph": "its graph's sha256 does not match its record",
        "weights": "its weights' sha256 does not match its record",
        "record": "not authenticated",
    }[where]
    assert why in caplog.text
    np.testing.assert_array_equal(module.run({"x": X})[0], expected[0])
    assert FROM_CACHE in _detail(_load(bundle, tmp_path))  # the entry was made again


def test_a_load_that_does_not_verify_neither_reads_nor_keeps_a_graph(bundle, tmp_path):
    assert FROM_RECIPE in _detail(_load(bundle, tmp_path, verify=False))
    assert not (tmp_path / "onnxruntime-graphs" / "v2").exists() or not list(
        (tmp_path / "onnxruntime-graphs" / "v2").glob("*.engine")
    )
    _load(bundle, tmp_path)
    assert FROM_RECIPE in _detail(_load(bundle, tmp_path, verify=False))


def test_a_load_that_fails_its_checksums_keeps_no_graph(bundle, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where onnxruntime saves the graph meanwhile
    corrupt = bytearray(bundle)
    corrupt[-64] ^= 0x01  # inside the largest weight blob, hashed while the session is built
    with pytest.raises(BundleError, match="checksum mismatch"):
        _load(bytes(corrupt), tmp_path)
    assert not list(tmp_path.glob("onnxruntime-graphs/v2/*.engine"))
    assert not list(scratch.iterdir())  # the graph onnxruntime saved went with the session


def test_graph_cache_false_builds_from_the_recipe_every_time(bundle, tmp_path):
    options = {"onnxruntime": {"graph_cache": False, "cache_dir": str(tmp_path)}}
    for _ in range(2):
        assert FROM_RECIPE in _detail(runtime_lite.load(bundle, backend_options=options))
    assert not list(tmp_path.glob("onnxruntime-graphs/v2/*.engine"))


def test_every_large_initializer_of_a_kept_graph_is_an_in_memory_file_of_its_own(bundle, tmp_path):
    _load(bundle, tmp_path)
    module = _load(bundle, tmp_path)
    graph = onnx.load_from_string(_graph_of(_entry(tmp_path, "engine")))  # parses: the re-encoding is valid
    external = [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external
    for tensor in external:
        fields = {entry.key: entry.value for entry in tensor.external_data}
        assert set(fields) == {"location", "length"} and fields["location"].startswith("aot-graph-w"), fields
    handed = module._modules[0].handle.session._values
    assert len(handed) == len(external)
    assert all(not array.flags.writeable for array in handed)  # read-only views: the entry's or the bundle's


def test_an_entry_whose_graph_names_a_file_it_does_not_hold_is_refused(bundle, tmp_path):
    _load(bundle, tmp_path)
    entry = bytearray(_entry(tmp_path, "engine").read_bytes())
    digests = json.loads(_entry(tmp_path, "json").read_text())["ingredients"]
    graph_size, index_size = struct.unpack_from("<QQ", entry, 8)
    index = json.loads(bytes(entry[24 + graph_size : 24 + graph_size + index_size]))
    index["bundle"] = {}  # the weights the optimizer left alone: no longer handed over
    head = _graph_of(_entry(tmp_path, "engine")) + json.dumps(index, sort_keys=True).encode()
    forged = bytearray(optimized.MAGIC + struct.pack("<QQ", graph_size, len(head) - graph_size) + head)
    forged += bytes(-len(forged) % optimized.ALIGN) + entry[len(entry) - _data_size(index) :]
    digests = {**digests, "head_sha256": hashlib.sha256(head).hexdigest()}
    with pytest.raises(ValueError, match="names no file the entry holds"):
        optimized.unpack(forged, digests, {})


def _graph_of(engine: Path) -> bytes:
    data = engine.read_bytes()
    (graph_size,) = struct.unpack_from("<Q", data, 8)
    return data[24 : 24 + graph_size]


def _data_size(index: dict) -> int:
    return max((offset + length for offset, length in index["data"].values()), default=0)
