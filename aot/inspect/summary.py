"""The text summary ``aot-inspect`` prints: what a bundle holds and where each op runs."""

from __future__ import annotations

import collections

from aot.inspect.bundle_view import BundleView
from aot.words import counted
from runtime_lite.format.signature import DimSpec


def _spec(spec: dict) -> str:
    return f"{spec['name']}: {spec['dtype']}[{','.join(str(d) for d in spec['shape'])}]"


def describe_dims(dims: dict) -> list[str]:
    """One line per symbolic dim of a signature: its name, its bounds if declared, where it came from."""
    return [str(DimSpec(name, d.get("from", ""), d.get("min"), d.get("max"))) for name, d in dims.items()]


def describe_worst_case(signature: dict) -> list[str]:
    """The bundle's stated worst-case activation memory (every dim bounded), as one line; none without it."""
    worst, budget = signature.get("worst_case_activation_bytes"), signature.get("worst_case_budget_bytes")
    if worst is None:
        return []
    line = f"{format_size(worst)} of activations with every dim at its maximum"
    return [line + (f" (a max_memory budget admits it from {format_size(budget)})" if budget else "")]


def format_size(n: int) -> str:
    """Bytes for a person: MB from 100 kB up, kB below (a 23.7 kB bundle is not "0.0 MB")."""
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _op_list(ops: list[str]) -> str:
    counts = collections.Counter(ops)
    return ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summarize_bundle(view: BundleView) -> str:
    header = view.header
    producer = header.get("producer", {})
    model = header.get("model", {})
    tools = ", ".join(f"{k} {v}" for k, v in producer.items() if k not in ("name", "version"))
    plan = header["plan"]
    calls = sum(1 for ins in plan["instructions"] if ins["op"] == "call_module")
    lines = [
        f"bundle    {view.path} ({format_size(view.size)}, format {view.version[0]}.{view.version[1]}, checksums verified)",
        f"producer  {producer.get('name', '?')} {producer.get('version', '?')} ({tools})",
        f"model     {model.get('name', '?')}"
        + (f" ({model['frontend']} opset {model['opset']})" if "opset" in model else ""),
        *(f"input     {_spec(s)}" for s in header["signature"]["inputs"]),
        *(f"output    {_spec(s)}" for s in header["signature"]["outputs"]),
        *(f"dim       {line}" for line in describe_dims(header["signature"].get("dims", {}))),
        *(f"worst     {line}" for line in describe_worst_case(header["signature"])),
        f"features  {', '.join(header.get('required_features', []))}",
        f"plan      {counted(len(plan['instructions']), 'instruction')} ({counted(view.host_ops, 'host op')}, "
        f"{counted(calls, 'backend call')}), {counted(len(header.get('constants', [])), 'constant')}",
        "ops       " + ", ".join(f"{b}: {n}" for b, n in view.ops_by_backend().items()),
    ]
    host_ops = [n.op for n in view.nodes if n.backend == "host"]
    if host_ops:
        lines.append(f"host      {_op_list(host_ops)}")
    if not view.regions:
        lines.append("regions   none: everything runs on the host")
    for r in view.regions:
        payloads = ", ".join(f"{k} {format_size(n)}" for k, n in r.payload_bytes.items())
        lines.append(
            f"region    {r.id} on {r.backend}: {len(r.ops)} ops, {len(r.composites)} composite kinds; payloads {payloads}"
        )
        lines.append(f"            {_op_list(r.ops)}")
    return "\n".join(lines)
