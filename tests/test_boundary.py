"""The runtime/compiler boundary: runtime_lite runs bundles without aot, click, onnx or torch, and
no product code uses pickle, eval or exec."""

from __future__ import annotations

import ast
import graphlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.source_tree import python_sources

ROOT = Path(__file__).resolve().parents[1]


def test_runtime_never_imports_the_compiler_or_heavy_dependencies(small_bundle, tmp_path):
    bundle = tmp_path / "m.aotb"
    bundle.write_bytes(small_bundle)
    script = f"""
import sys
import numpy as np
import runtime_lite
module = runtime_lite.load({str(bundle)!r})
out = module.run([np.zeros((1, 3, 8, 8), np.float32)])
assert out[0].shape == (1, 10)
forbidden = [m for m in sys.modules if m.split('.')[0] in ('aot', 'click', 'onnx', 'onnxruntime', 'openvino', 'torch', 'tensorrt', 'ray', 'starlette', 'grpc', 'google')]
print(','.join(forbidden))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert result.stdout.strip() == "", f"runtime_lite imported {result.stdout.strip()}"


#: The one runtime_lite module per CPU engine that delegates to it, and may import it inside its functions.
DELEGATES = {
    "onnxruntime": "runtime_lite/backends/onnxruntime/session.py",
    "openvino": "runtime_lite/backends/openvino/engine.py",
}


def test_runtime_sources_import_nothing_from_the_compiler():
    pattern = re.compile(r"^\s*(from|import)\s+(aot|click|onnx|torch)\b", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in python_sources("runtime_lite") if pattern.search(p.read_text())]
    assert offenders == []


def _imports(node: ast.AST, engine: str) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == engine for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == engine


@pytest.mark.parametrize("engine", list(DELEGATES))
def test_only_the_engines_delegate_imports_it_and_only_inside_functions(engine):
    """``import runtime_lite`` (and any bundle without modules for that engine) must never load it."""
    offenders = []
    for path in python_sources("runtime_lite"):
        tree = ast.parse(path.read_text())
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if _imports(node, engine):
                where = str(path.relative_to(ROOT))
                if where != DELEGATES[engine] or id(node) not in inside:
                    offenders.append(f"{where}:{node.lineno}")
    assert offenders == []


#: Where runtime_lite may import grpc and protobuf: the gRPC API, which only a replica serving gRPC loads.
GRPC_PACKAGE = "runtime_lite/serving/grpc_api/"


def test_only_the_grpc_api_imports_grpc_or_protobuf():
    """``serve`` without --grpc-port, and everything else in runtime_lite, never needs them."""
    offenders = []
    for path in python_sources("runtime_lite"):
        where = str(path.relative_to(ROOT))
        if where.startswith(GRPC_PACKAGE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n.split(".")[0] == "grpc" or n.startswith("google.protobuf") for n in names):
                offenders.append(f"{where}:{node.lineno}")
    assert offenders == []


def test_no_pickle_eval_or_exec_in_product_code():
    pattern = re.compile(r"\bimport pickle\b|\bfrom pickle\b|\bcloudpickle\b|(?<![\w.])(eval|exec)\(|allow_pickle=True")
    offenders = [
        str(p.relative_to(ROOT))
        for package in ("aot", "runtime_lite")
        for p in python_sources(package)
        if pattern.search(p.read_text())
    ]
    assert offenders == []


def _runtime_import_graph() -> dict[str, set[str]]:
    """runtime_lite's modules and the runtime_lite modules each imports, lazy imports included."""
    modules = {}
    for path in python_sources("runtime_lite"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("runtime_lite"):
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("runtime_lite")}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def test_runtime_modules_import_each_other_without_a_cycle():
    """The folders are layers: a circle between modules would make them one layer again."""
    try:
        tuple(graphlib.TopologicalSorter(_runtime_import_graph()).static_order())
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle in runtime_lite: {' -> '.join(e.args[1])}") from None


def test_the_bundle_format_layer_depends_on_nothing_above_it():
    """runtime_lite.format reads and checks bundles; it knows no kernel, backend, plan or tool."""
    below = ("runtime_lite.format", "runtime_lite.errors", "runtime_lite.files", "runtime_lite.version")
    graph = _runtime_import_graph()
    upward = {
        module: sorted(t for t in targets if not t.startswith(below))
        for module, targets in graph.items()
        if module.startswith("runtime_lite.format")
    }
    assert {m: t for m, t in upward.items() if t} == {}
