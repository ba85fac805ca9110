"""A bundle seen as a graph: host instructions and region nodes, with edges, for summaries and drawings.

Only the bundle is needed (no model, no compiler state): host instructions come
from the plan, each region's nodes from its module record's ``summary``. Slots
are replayed in plan order, so a slot reused by several values still yields the
right producer for every read.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import Any

from runtime_lite.format.reader import read_bundle


@dataclass
class ViewNode:
    name: str
    op: str
    backend: str  # "host", a backend name, or "input"
    region: str | None = None
    composite: str | None = None
    inputs: list[int] = field(default_factory=list)  # indices of producer ViewNodes
    is_output: bool = False


@dataclass
class RegionView:
    id: str
    backend: str
    ops: list[str]
    composites: list[str]
    payload_bytes: dict[str, int]


@dataclass
class BundleView:
    path: str
    size: int
    version: tuple[int, int]
    header: dict[str, Any]
    nodes: list[ViewNode]
    regions: list[RegionView]

    @property
    def host_ops(self) -> int:
        return sum(1 for n in self.nodes if n.backend == "host")

    def ops_by_backend(self) -> dict[str, int]:
        counts = collections.Counter(n.backend for n in self.nodes if n.backend != "input")
        return dict(counts)


def load_view(path: str | os.PathLike[str]) -> BundleView:
    bundle = read_bundle(path)
    header = bundle.header
    plan = header["plan"]
    modules = header.get("modules", [])
    nodes: list[ViewNode] = []
    producer: dict[int, int] = {}  # slot -> ViewNode index
    for spec, slot in zip(header["signature"]["inputs"], plan["inputs"]):
        producer[slot] = len(nodes)
        nodes.append(ViewNode(spec["name"], "input", "input"))
    constant_slots = {pair[0] for pair in plan["constants"]}
    regions = []
    for ins in plan["instructions"]:
        reads = [producer[s] for s in ins["in"] if s not in constant_slots and s in producer]
        if ins["op"] != "call_module":
            for s in ins["out"]:
                producer[s] = len(nodes)
            nodes.append(ViewNode(ins.get("name", ins["op"]), ins["op"], "host", inputs=reads))
            continue
        record = modules[ins["attrs"]["module"]]
        summary = record.get("summary", {})
        region_inputs = dict(zip(summary.get("inputs", []), ins["in"]))
        local: dict[str, int] = {}
        for item in summary.get("nodes", []):
            srcs = []
            for name in item["inputs"]:
                if name in local:
                    srcs.append(local[name])
                elif (
                    name in region_inputs
                    and region_inputs[name] in producer
                    and region_inputs[name] not in constant_slots
                ):
                    srcs.append(producer[region_inputs[name]])
            index = len(nodes)
            nodes.append(ViewNode(item["name"], item["op"], record["backend"], record["id"], item["composite"], srcs))
            for out in item["outputs"]:
                local[out] = index
        for name, slot in zip(summary.get("outputs", []), ins["out"]):
            if name in local:
                producer[slot] = local[name]
        payload_bytes = {key: len(bundle.blobs[blob]) for key, blob in record.get("payloads", {}).items()}
        regions.append(
            RegionView(
                record["id"],
                record["backend"],
                [n["op"] for n in summary.get("nodes", [])],
                list(dict.fromkeys(n["composite"] for n in summary.get("nodes", []))),
                payload_bytes,
            )
        )
    for slot in plan["outputs"]:
        if slot in producer:
            nodes[producer[slot]].is_output = True
    size = os.path.getsize(path)
    return BundleView(os.fspath(path), size, bundle.version, header, nodes, regions)
