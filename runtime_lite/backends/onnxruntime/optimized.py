"""The graph onnxruntime optimized for this host, kept between loads so that a cold start skips the optimizing.

Much of an onnxruntime session's start is its graph optimization at level ``all``: on
a ResNet-50 the NCHWc layout pass and its weight reordering took 0.3-0.4 s of a 0.45 s
session in a warm process, where the same session from the graph already optimized took
0.1 s (in a fresh process, where the prepacking and first-touch of the weights dominate,
much less of the start is saved). That graph
depends on this onnxruntime (its fused ops and their kernels) and on this CPU (the NCHWc
block is 16 floats with AVX-512, 8 with AVX2), so it cannot be written once at build
time for every host: the first load on a host saves it (``SessionOptions.optimized_model_filepath``,
the initializers in a file beside the graph), and later loads open it (at the same
level: the passes find little left to do, and redo what a saved graph does not hold), its
weights handed over as read-only views, as a recipe's are.

An entry lives in the engine cache's store (``runtime_lite/backends/tensorrt/engine_cache.py``,
folder ``onnxruntime-graphs/v1``), under its trust boundary: each entry is authenticated by
an HMAC under a key kept outside the cache and its sha256 is checked before onnxruntime
sees a byte, so a tampered, truncated or planted entry is dropped (a WARNING names why)
and the recipe is optimized again. The key is the bundle's digest (which names every
blob: recipe and weights), the region, the session settings that change the graph and the
CPU; onnxruntime's version is in the entry's record, and an entry made by another version
is redone, with an INFO line saying so. An entry is written only after the load verified
every blob of the bundle (``OnnxRuntimeModule.verified``): an optimized graph of weights
that fail their sha256 is never kept. Loads that do not verify (``verify=False``) neither
read nor write entries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_lite.backends.onnxruntime.recipe_check import (
    ENTRY_FIELDS,
    ONNX_DTYPES,
    TENSOR_FIELDS,
    _fields,
    _packed_ints,
)
from runtime_lite.backends.onnxruntime.session import (
    DISABLED_OPTIMIZERS,
    OnnxRuntimeUnavailable,
    Session,
    SessionSettings,
)
from runtime_lite.cpu import cpu_flags_and_model
from runtime_lite.errors import BundleError
from runtime_lite.format.hashing import PendingHashes

logger = logging.getLogger("runtime_lite.onnxruntime")

#: Where the entries lie under the cache root; bumped when an entry's layout changes.
LAYOUT = "onnxruntime-graphs/v1"
#: An entry: this magic, the graph's and the index's lengths (u64 little-endian), the graph, the index (JSON: the
#: offset in the data of each initializer kept there), zeros to a 64-byte boundary, the data.
MAGIC = b"AOTORTG1"
ALIGN = 64
#: Initializers of at least this many bytes go to the data file (and come back as views); smaller ones stay in
#: the graph, where onnxruntime reads them itself (a Reshape's shape, a bias).
EXTERNAL_MIN_BYTES = 4096
DATA_NAME = "graph.data"


@dataclass(frozen=True)
class GraphKey:
    """What decides the optimized graph: the entry's key, and what its record holds beside it."""

    key: str
    ingredients: dict


def graph_key(
    bundle_digest: str, module_id: str, settings: SessionSettings, config: Mapping[str, str], disabled: Sequence[str],
    version: str,
) -> GraphKey:  # fmt: skip
    """The cache key of one region's optimized graph on this host (onnxruntime's version is checked apart)."""
    model, flags = cpu_flags_and_model()
    what = {
        "bundle": bundle_digest,
        "module": module_id,
        "optimization": settings.optimization,
        "config": dict(sorted(config.items())),
        "disabled": sorted({*DISABLED_OPTIMIZERS, *disabled}),
        "cpu": model,
        "cpu_flags": hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:32],
    }
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
    return GraphKey(key, {**what, "onnxruntime": version})


@dataclass(frozen=True)
class OptimizedGraph:
    """A graph onnxruntime optimized (its sha256 checked), its large initializers as read-only arrays (over the
    entry's data, or the bundle's own weights where the optimizer left them as they were), and the data's sha256
    still computing (``pending.wait()`` before the session is trusted)."""

    graph: bytes
    weights: dict[str, np.ndarray]
    pending: PendingHashes


def pack(graph: bytes, data: memoryview, bundle_weights: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """An entry, and the sha256 of its head (graph and index) and of its data (the record holds them).

    ``data``: the initializers file onnxruntime wrote beside ``graph``. An initializer equal to the bundle's
    weight of that name (the optimizer left it alone: most of a transformer's) is not stored again: the index
    says which are, and a later load hands over the bundle's own array, as the recipe's session does."""
    kept, index, offset = [], {}, 0
    for name, array in external_initializers(memoryview(graph), data).items():
        mine = bundle_weights.get(name)
        if mine is not None and mine.dtype == array.dtype and mine.shape == array.shape and np.array_equal(mine, array):
            continue
        pad = -offset % ALIGN
        kept += [bytes(pad), array.tobytes()]
        index[name] = offset + pad
        offset += pad + array.nbytes
    head = graph + json.dumps(index, sort_keys=True).encode()
    data_bytes = b"".join(kept)
    start = len(MAGIC) + 16 + len(head)
    entry = b"".join((MAGIC, struct.pack("<QQ", len(graph), len(head) - len(graph)), head, bytes(-start % ALIGN),
                      data_bytes))  # fmt: skip
    digests = {"head_sha256": hashlib.sha256(head).hexdigest(), "data_sha256": hashlib.sha256(data_bytes).hexdigest()}
    return entry, digests


def unpack(entry: bytearray, digests: Mapping[str, object], bundle_weights: Mapping[str, np.ndarray]) -> OptimizedGraph:
    """The graph (verified now) and its initializers (the entry's verified meanwhile) from an entry; ValueError
    naming what does not fit. Nothing parses the graph before its sha256 matched the authenticated record."""
    view = memoryview(entry)
    start = len(MAGIC) + 16
    if len(view) < start or view[: len(MAGIC)] != MAGIC:
        raise ValueError("not an optimized-graph entry")
    graph_size, index_size = struct.unpack_from("<QQ", view, len(MAGIC))
    if start + graph_size + index_size > len(view):
        raise ValueError("its graph runs past the entry")
    head = bytes(view[start : start + graph_size + index_size])
    data = view[start + len(head) + (-(start + len(head)) % ALIGN) :].toreadonly()
    head_digest, data_digest = digests.get("head_sha256"), digests.get("data_sha256")
    if not isinstance(head_digest, str) or not isinstance(data_digest, str) or len(data_digest) != 64:
        raise ValueError("its record names no sha256 of its parts")
    if hashlib.sha256(head).hexdigest() != head_digest:
        raise ValueError("its graph's sha256 does not match its record")
    graph, index = head[:graph_size], json.loads(head[graph_size:])
    if not isinstance(index, dict):
        raise ValueError("its index is not a map")
    pending = PendingHashes([(0, data, bytes.fromhex(data_digest))])  # the weights: hashed while the session builds
    try:
        weights = {}
        for name, declared in external_initializers(memoryview(graph)).items():
            weights[name] = _initializer(name, declared, index, data, bundle_weights)
        return OptimizedGraph(graph, weights, pending)
    except BaseException:
        pending.cancel()
        raise


def _initializer(
    name: str, declared: np.ndarray, index: Mapping[str, int], data: memoryview, bundle: Mapping[str, np.ndarray]
) -> np.ndarray:
    """One initializer's array: from the entry's data where the index places it, else the bundle's own."""
    if name in index:
        offset = index[name]
        if type(offset) is not int or offset < 0 or offset + declared.nbytes > len(data):
            raise ValueError(f"initializer {name!r} does not fit the entry's data")
        return np.frombuffer(data, declared.dtype, declared.size, offset).reshape(declared.shape)
    mine = bundle.get(name)
    if mine is None or mine.dtype != declared.dtype or mine.shape != declared.shape:
        raise ValueError(f"initializer {name!r} is neither in the entry nor the bundle's")
    return mine


class _AnyField(dict):
    """Field names for the walk: the ones it reads by name, every other number as ``other`` (skipped): this walk
    only finds initializers in a graph onnxruntime itself wrote, the entry already authenticated."""

    def get(self, key, default=None):
        return dict.get(self, key, "other")


def external_initializers(graph: memoryview, data: memoryview | None = None) -> dict[str, np.ndarray]:
    """Each initializer the graph keeps in its data file: an array over ``data`` (the file onnxruntime wrote) at
    the place the graph names, or, without ``data``, a stand-in of its dtype and shape holding no memory."""
    arrays = {}
    for name, _, value in _fields(graph, "ModelProto", _AnyField({7: "graph"})):
        if name != "graph":
            continue
        for field, _, tensor in _fields(value, "GraphProto", _AnyField({5: "initializer"})):
            if field == "initializer":
                found = _external_tensor(tensor, data)
                if found is not None:
                    arrays[found[0]] = found[1]
    return arrays


def _external_tensor(tensor: memoryview, data: memoryview | None) -> tuple[str, np.ndarray] | None:
    dims, dtype, name, entries = [], None, "", {}
    for field, wire, value in _fields(tensor, "TensorProto", _AnyField(TENSOR_FIELDS)):
        if field == "dims":
            dims += _packed_ints(wire, value)
        elif field == "data_type":
            dtype = ONNX_DTYPES.get(value)
        elif field == "name":
            name = str(value, "utf-8")
        elif field == "external_data":
            entry = {key: str(text, "utf-8") for key, _, text in _fields(value, "StringStringEntryProto", ENTRY_FIELDS)}
            entries[entry.get("key")] = entry.get("value", "")
    if not entries:
        return None
    if dtype is None or entries.get("location") != DATA_NAME or any(d < 0 for d in dims):
        raise ValueError(f"initializer {name!r} is not one this runtime saved")
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if data is None:
        return name, np.broadcast_to(np.zeros((), dtype), dims)
    offset, length = int(entries.get("offset", 0)), int(entries["length"])
    if offset < 0 or offset + length > len(data) or count * np.dtype(dtype).itemsize != length:
        raise ValueError(f"initializer {name!r} does not fit the entry's data")
    return name, np.frombuffer(data, dtype, count, offset).reshape(dims)


class GraphStore:
    """Optimized graphs by ``GraphKey`` in the cache at ``root`` (default: the engine cache's root)."""

    def __init__(self, root: str | os.PathLike[str] | None = None):
        from runtime_lite.backends.tensorrt.engine_cache import EngineCache  # only where a graph is kept

        self.cache = EngineCache(root, layout=LAYOUT)

    def get(self, key: GraphKey, bundle_weights: Mapping[str, np.ndarray]) -> OptimizedGraph | None:
        """The entry for ``key`` made by this onnxruntime; None (and a line saying why) where there is none."""
        entry = self.cache.get_entry(key.key, hashed=False)  # authenticated, else dropped with a WARNING
        if entry is None:
            return None
        data, ingredients = entry
        made_by, here = ingredients.get("onnxruntime"), key.ingredients["onnxruntime"]
        if made_by != here:
            logger.info(
                "the optimized graph of region %s was made by onnxruntime %s, this is %s: optimizing it again",
                key.ingredients["module"], made_by, here,
            )  # fmt: skip
            return None
        try:
            return unpack(data, ingredients, bundle_weights)
        except (ValueError, UnicodeDecodeError) as e:
            self.drop(key, str(e))
            return None

    def drop(self, key: GraphKey, why: str) -> None:
        logger.warning("the optimized graph of region %s in the cache is not valid (%s): optimizing it again",
                       key.ingredients["module"], why)  # fmt: skip
        self.cache.drop(key.key)

    def put(self, key: GraphKey, saved: SavedGraph, bundle_weights: Mapping[str, np.ndarray]) -> None:
        try:
            entry, digests = saved.read(bundle_weights)
        except (OSError, ValueError) as e:
            logger.info("the optimized graph of region %s was not kept: %s", key.ingredients["module"], e)
            return
        self.cache.put(key.key, entry, {**key.ingredients, **digests})


class SavedGraph:
    """A folder onnxruntime writes a session's optimized graph into (``optimized_model_filepath``), until kept."""

    def __init__(self):
        import tempfile  # only where a graph is saved

        self.folder = tempfile.mkdtemp(prefix="aot-ort-graph-")
        self.graph_path = os.path.join(self.folder, "graph.onnx")

    def session_config(self) -> dict[str, str]:
        return {
            "session.optimized_model_external_initializers_file_name": DATA_NAME,
            "session.optimized_model_external_initializers_min_size_in_bytes": str(EXTERNAL_MIN_BYTES),
        }

    def read(self, bundle_weights: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
        """The entry (``pack``) of what onnxruntime saved; ValueError where it is not what this module reads."""
        data_path = os.path.join(self.folder, DATA_NAME)
        with open(self.graph_path, "rb") as graph:
            if not os.path.exists(data_path):  # no initializer large enough to leave the graph
                return pack(graph.read(), memoryview(b""), bundle_weights)
            with open(data_path, "rb") as data:
                return pack(graph.read(), memoryview(data.read()), bundle_weights)

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(frozen=True)
class GraphPlace:
    """Where a region's optimized graph is kept: the cache root (None: the default), the bundle, the region."""

    root: str | None
    bundle_digest: str
    module_id: str


def cached_session(
    place: GraphPlace, recipe: memoryview, weights: Mapping[str, np.ndarray], inputs: Sequence[str],
    outputs: Sequence[str], settings: SessionSettings, footprint, config: Mapping[str, str] | None,
    disabled: Sequence[str], version: str,
) -> Session:  # fmt: skip
    """A session over the region's optimized graph where the cache has it for this host and onnxruntime, else over
    the recipe: then its ``pending_graph`` makes and keeps that graph once the load has verified every blob."""
    key = graph_key(place.bundle_digest, place.module_id, settings, config or {}, disabled, version)
    store = GraphStore(place.root)
    found = store.get(key, weights)
    if found is not None:
        session = _open_optimized(found, store, key, inputs, outputs, settings, footprint, config, disabled)
        if session is not None:
            return session
    session = Session(bytes(recipe), weights, inputs, outputs, settings, footprint, config, disabled)
    session.pending_graph = PendingGraph(store, key, recipe, weights, (inputs, outputs, settings, config, disabled))
    return session


def _open_optimized(
    found: OptimizedGraph, store: GraphStore, key: GraphKey, inputs: Sequence[str], outputs: Sequence[str],
    settings: SessionSettings, footprint, config: Mapping[str, str] | None, disabled: Sequence[str],
) -> Session | None:  # fmt: skip
    """A session over a cached graph once its weights' sha256 (computed meanwhile) matched; None where the entry
    fails it or onnxruntime does not open it (the entry is then dropped)."""
    session = None
    try:
        session = Session(found.graph, found.weights, inputs, outputs, settings, footprint, config, disabled)
        found.pending.wait()
    except OnnxRuntimeUnavailable as e:  # an entry this onnxruntime cannot open after all: made again
        found.pending.cancel()
        store.drop(key, f"onnxruntime did not open it: {e}")
        return None
    except BundleError:  # the data's sha256: the weights were changed on disk
        session.close()
        store.drop(key, "its weights' sha256 does not match its record")
        return None
    except BaseException:
        found.pending.cancel()
        raise
    session.source = "its graph optimized at an earlier load, from the cache"
    return session


class PendingGraph:
    """What makes and keeps a region's optimized graph once the load is verified: a second session over the
    recipe, which saves the graph it optimized (the session the load returns is built without saving: one
    that saves ran EfficientNet-B0 27% slower here), then the entry. Only the first load on a host pays it."""

    def __init__(self, store: GraphStore, key: GraphKey, recipe: memoryview, weights: Mapping[str, np.ndarray],
                 session_args: tuple) -> None:  # fmt: skip
        self.store, self.key, self.recipe, self.weights, self.session_args = store, key, recipe, weights, session_args

    def keep(self) -> None:
        inputs, outputs, settings, config, disabled = self.session_args
        saved = SavedGraph()
        try:
            Session(bytes(self.recipe), self.weights, inputs, outputs, settings, None, config, disabled,
                    save_to=saved.graph_path, save_config=saved.session_config()).close()  # fmt: skip
            self.store.put(self.key, saved, self.weights)
        except OnnxRuntimeUnavailable as e:  # the graph could not be saved (over protobuf's 2 GiB): not kept
            logger.info("the optimized graph of region %s is not kept (%s)", self.key.ingredients["module"], e)
        except Exception as e:  # noqa: BLE001 - a cache that fails never fails the load it follows
            logger.warning("the optimized graph of region %s is not kept: %s: %s", self.key.ingredients["module"],
                           type(e).__name__, e)  # fmt: skip
        finally:
            saved.remove()

    def discard(self) -> None:
        """The load failed: nothing was saved yet, nothing is kept."""


__all__ = [
    "GraphKey", "GraphPlace", "GraphStore", "OptimizedGraph", "PendingGraph", "SavedGraph", "cached_session", "graph_key", "pack",
    "unpack",
]  # fmt: skip
