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
weights handed over as in-memory external-data files read in place, as a recipe's are.
It stays off by default (docs/onnxruntime.md): on 2 cores, reading and hashing the kept
weights costs a cold start more than the session saves.

An entry lives in the engine cache's store (``runtime_lite/backends/tensorrt/engine_cache.py``,
folder ``onnxruntime-graphs/v2``), under its trust boundary: each entry is authenticated by
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
    FIXED32,
    FIXED64,
    LEN,
    ONNX_DTYPES,
    TENSOR_FIELDS,
    VARINT,
    _fields,
    _packed_ints,
    read_varint,
)
from runtime_lite.backends.onnxruntime.session import (
    DISABLED_OPTIMIZERS,
    OnnxRuntimeUnavailable,
    Session,
    SessionSettings,
    reads_files_in_memory,
)
from runtime_lite.cpu import cpu_flags_and_model
from runtime_lite.errors import BundleError
from runtime_lite.format.hashing import PendingHashes

logger = logging.getLogger("runtime_lite.onnxruntime")

#: Where the entries lie under the cache root; bumped when an entry's layout changes.
LAYOUT = "onnxruntime-graphs/v2"
#: An entry: this magic, the graph's and the index's lengths (u64 little-endian), the graph, the index (JSON: where
#: each in-memory file lies in the data, or which bundle weight it is), zeros to a 64-byte boundary, the data.
MAGIC = b"AOTORTG2"
ALIGN = 64
#: Initializers of at least this many bytes go to the data file (and come back as in-memory files); smaller ones
#: stay in the graph, where onnxruntime reads them itself (a Reshape's shape, a bias).
EXTERNAL_MIN_BYTES = 4096
DATA_NAME = "graph.data"
#: The location each large initializer of a kept graph names: an in-memory external-data file of its own.
FILE_NAME = "aot-graph-w{:06d}"

# ONNX protobuf field numbers on the path to an initializer's external data.
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_EXTERNAL_DATA = 7, 5, 13


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
    """A graph onnxruntime optimized (its sha256 checked), the in-memory external-data file each of its large
    initializers names (a view of the entry's data, or the bundle's own weight where the optimizer left it as it
    was), and the data's sha256 still computing (``pending.wait()`` before the session is trusted)."""

    graph: bytes
    files: dict[str, np.ndarray]
    pending: PendingHashes


def pack(graph: bytes, data: memoryview, bundle_weights: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """An entry, and the sha256 of its head (graph and index) and of its data (the record holds them).

    ``data``: the initializers file onnxruntime wrote beside ``graph``. Each initializer kept there is renamed to
    an in-memory file of its own (``FILE_NAME``, no offset), so that a later load hands onnxruntime buffers it
    reads in place, as it maps an external-data file (from ``OrtValue``\\ s the same session took 0.07 s where
    this takes 0.02 s: ResNet-50). One equal to the bundle's weight of that name (the optimizer left it alone:
    most of a transformer's) is not stored again: the index names the bundle's weight instead."""
    kept: list[bytes] = []
    index: dict[str, dict] = {"data": {}, "bundle": {}}
    size = 0

    def relocate(tensor: memoryview) -> bytes:
        nonlocal size
        found = _external_tensor(tensor)
        if found is None:
            return bytes(tensor)
        name, dtype, dims, location, offset, length = found
        if location != DATA_NAME or offset + length > len(data):
            raise ValueError(f"initializer {name!r} is not in the data onnxruntime saved")
        array = np.frombuffer(data, np.uint8, length, offset)
        file = FILE_NAME.format(len(index["data"]) + len(index["bundle"]))
        mine = bundle_weights.get(name)
        if mine is not None and mine.dtype == dtype and list(mine.shape) == dims and mine.nbytes == length \
                and np.array_equal(mine.reshape(-1).view(np.uint8), array):  # fmt: skip
            index["bundle"][file] = name
        else:
            pad = -size % ALIGN
            kept.extend((bytes(pad), array.tobytes()))
            index["data"][file] = [size + pad, length]
            size += pad + length
        kept_fields = [tensor[a:b] for number, _, a, _, b in _raw_fields(tensor) if number != _TENSOR_EXTERNAL_DATA]
        return b"".join([*kept_fields, _data_entry("location", file), _data_entry("length", str(length))])

    graph = _rewrite(memoryview(graph), _MODEL_GRAPH, lambda g: _rewrite(g, _GRAPH_INITIALIZER, relocate))
    head = graph + json.dumps(index, sort_keys=True).encode()
    data_bytes = b"".join(kept)
    start = len(MAGIC) + 16 + len(head)
    entry = b"".join((MAGIC, struct.pack("<QQ", len(graph), len(head) - len(graph)), head, bytes(-start % ALIGN),
                      data_bytes))  # fmt: skip
    digests = {"head_sha256": hashlib.sha256(head).hexdigest(), "data_sha256": hashlib.sha256(data_bytes).hexdigest()}
    return entry, digests


def unpack(entry: bytearray, digests: Mapping[str, object], bundle_weights: Mapping[str, np.ndarray]) -> OptimizedGraph:
    """The graph (verified now) and its in-memory files (the entry's data verified meanwhile) from an entry;
    ValueError naming what does not fit. Nothing parses the graph before its sha256 matched the authenticated
    record, and every location the graph names must be one of the files handed over (never a path)."""
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
    if not (isinstance(index, dict) and isinstance(index.get("data"), dict) and isinstance(index.get("bundle"), dict)):
        raise ValueError("its index is not a map of data and bundle files")
    pending = PendingHashes([(0, data, bytes.fromhex(data_digest))])  # the weights: hashed while the session builds
    try:
        files = _files(index, data, bundle_weights)
        for tensor in _initializers(memoryview(graph)):
            found = _external_tensor(tensor)
            if found is None:
                continue
            name, _, _, location, offset, length = found
            file = files.get(location)
            if file is None or offset != 0 or file.nbytes != length:
                raise ValueError(f"initializer {name!r} names no file the entry holds")
        return OptimizedGraph(graph, files, pending)
    except BaseException:
        pending.cancel()
        raise


def _files(index: Mapping[str, dict], data: memoryview, bundle: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each in-memory file the index names: a slice of the entry's data, or the bundle's weight of that name."""
    files = {}
    for file, place in index["data"].items():
        if not (isinstance(place, list) and len(place) == 2 and all(type(n) is int and n >= 0 for n in place)) \
                or place[0] + place[1] > len(data):  # fmt: skip
            raise ValueError(f"file {file!r} does not fit the entry's data")
        files[file] = np.frombuffer(data, np.uint8, place[1], place[0])
    for file, name in index["bundle"].items():
        mine = bundle.get(name) if isinstance(name, str) else None
        if mine is None or file in files:
            raise ValueError(f"file {file!r} is neither in the entry nor the bundle's")
        files[file] = mine
    return files


class _AnyField(dict):
    """Field names for the walk: the ones it reads by name, every other number as ``other`` (skipped): this walk
    only finds initializers in a graph onnxruntime itself wrote, the entry already authenticated."""

    def get(self, key, default=None):
        return dict.get(self, key, "other")


def _initializers(graph: memoryview):
    """Each initializer (a TensorProto's bytes) of a model's graph."""
    for name, _, value in _fields(graph, "ModelProto", _AnyField({_MODEL_GRAPH: "graph"})):
        if name == "graph":
            for field, _, tensor in _fields(value, "GraphProto", _AnyField({_GRAPH_INITIALIZER: "initializer"})):
                if field == "initializer":
                    yield tensor


def _external_tensor(tensor: memoryview) -> tuple[str, np.dtype, list[int], str, int, int] | None:
    """(name, dtype, dims, location, offset, length) of an initializer kept as external data, else None."""
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
    try:
        offset, length = int(entries.get("offset", 0)), int(entries["length"])
    except (KeyError, ValueError):
        raise ValueError(f"initializer {name!r} has no length or offset as a number") from None
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if dtype is None or any(d < 0 for d in dims) or offset < 0 or count * np.dtype(dtype).itemsize != length:
        raise ValueError(f"initializer {name!r} is not one this runtime saved")
    return name, np.dtype(dtype), dims, entries.get("location", ""), offset, length


def _raw_fields(message: memoryview):
    """(field number, wire type, where its key starts, where its value starts, where it ends) of each field."""
    pos, end = 0, len(message)
    try:
        while pos < end:
            start = pos
            key, pos = read_varint(message, pos)
            wire, value = key & 7, pos
            if wire == LEN:
                size, value = read_varint(message, pos)
                pos = value + size
            elif wire == VARINT:
                _, pos = read_varint(message, pos)
            elif wire in (FIXED64, FIXED32):
                pos += 8 if wire == FIXED64 else 4
            else:
                raise ValueError(f"wire type {wire}")
            if pos > end:
                raise ValueError("a field runs past its message")
            yield key >> 3, wire, start, value, pos
    except ValueError:
        raise
    except Exception as e:  # the walk's own refusal (a truncated varint)
        raise ValueError(str(e)) from None


def _varint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | LEN) + _varint(len(payload)) + payload


def _data_entry(key: str, value: str) -> bytes:
    """One TensorProto.external_data entry (a StringStringEntryProto: key 1, value 2)."""
    return _length_delimited(
        _TENSOR_EXTERNAL_DATA, _length_delimited(1, key.encode()) + _length_delimited(2, value.encode())
    )


def _rewrite(message: memoryview, number: int, rewrite) -> bytes:
    """``message`` with each length-delimited field ``number`` replaced by ``rewrite(its value)``."""
    parts = []
    for field, wire, start, value, end in _raw_fields(message):
        if field == number and wire == LEN:
            parts.append(_length_delimited(number, rewrite(message[value:end])))
        else:
            parts.append(message[start:end])
    return b"".join(parts)


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
    disabled: Sequence[str], version: str, placeholders: Mapping[str, int] | None = None,
) -> Session:  # fmt: skip
    """A session over the region's optimized graph where the cache has it for this host and onnxruntime, else over
    the recipe: then its ``pending_graph`` makes and keeps that graph once the load has verified every blob."""
    if not reads_files_in_memory():  # an onnxruntime before 1.17: a kept graph would be opened no faster
        return Session(bytes(recipe), weights, inputs, outputs, settings, footprint, config, disabled,
                       placeholders=placeholders)  # fmt: skip
    key = graph_key(place.bundle_digest, place.module_id, settings, config or {}, disabled, version)
    store = GraphStore(place.root)
    found = store.get(key, weights)
    if found is not None:
        session = _open_optimized(found, store, key, inputs, outputs, settings, footprint, config, disabled)
        if session is not None:
            return session
    session = Session(bytes(recipe), weights, inputs, outputs, settings, footprint, config, disabled,
                      placeholders=placeholders)  # fmt: skip
    session.pending_graph = PendingGraph(
        store, key, recipe, weights, (inputs, outputs, settings, config, disabled, placeholders)
    )
    return session


def _open_optimized(
    found: OptimizedGraph, store: GraphStore, key: GraphKey, inputs: Sequence[str], outputs: Sequence[str],
    settings: SessionSettings, footprint, config: Mapping[str, str] | None, disabled: Sequence[str],
) -> Session | None:  # fmt: skip
    """A session over a cached graph once its weights' sha256 (computed meanwhile) matched; None where the entry
    fails it or onnxruntime does not open it (the entry is then dropped)."""
    session = None
    try:
        session = Session(found.graph, {}, inputs, outputs, settings, footprint, config, disabled, files=found.files)
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
        inputs, outputs, settings, config, disabled, placeholders = self.session_args
        saved = SavedGraph()
        try:
            Session(bytes(self.recipe), self.weights, inputs, outputs, settings, None, config, disabled,
                    save_to=saved.graph_path, save_config=saved.session_config(),
                    placeholders=placeholders).close()  # fmt: skip
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
    "GraphKey", "GraphPlace", "GraphStore", "OptimizedGraph", "PendingGraph", "SavedGraph", "cached_session",
    "graph_key", "pack", "unpack",
]  # fmt: skip
