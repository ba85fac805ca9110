"""docs/coverage.md, written from the code: the core ATen opset and ONNX's node tests against aot.

``render()`` computes the whole page. The ATen part is the op list of the installed
torch with each op's status from the converter table and ``aten_coverage.BY_DESIGN``
(cheap); the ONNX part builds and runs every in-scope node test (~15 s), so the page's
pass counts are measured, not claimed. ``benchmarks/op_coverage.py --write`` writes it;
``tests/test_op_coverage.py`` fails when the page and the code disagree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"


def onnx_outcomes() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Case name -> (status, reason or error, constant inputs); status is by design, pass, refused or fail."""
    from aot.testing import onnx_node

    outcomes = {}
    for case in onnx_node.cases():
        reason = onnx_node.by_design(case)
        if reason:
            outcomes[case.name] = ("by design", reason, ())
        else:
            outcome = onnx_node.run(case)
            outcomes[case.name] = (outcome.status, outcome.detail, outcome.constant_inputs)
    return outcomes


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def _aten_section() -> list[str]:
    import torch

    from aot.testing import aten_coverage as ac

    ops = ac.core_ops()
    by_status = defaultdict(list)
    for op in ops:
        by_status[ac.status(op)].append(op)
    relevant = len(ops) - len(by_status["by design"])
    converted = by_status["converted"]
    with_samples = [op for op in converted if ac.opinfos(op)]
    lines = [
        f"## Core ATen (torch {torch.__version__.split('+')[0]})",
        "",
        f"**{len(converted)} of {relevant} inference-relevant core ATen ops converted "
        f"({_percent(len(converted), relevant)})**; {len(ops)} ops (overload packets) are tagged "
        f"`torch.Tag.core`, {len(by_status['by design'])} of them refused by design.",
        "",
        f"{len(with_samples)} of the converted ops have samples in PyTorch's OpInfo database; "
        "`tests/test_aten_opinfo.py` exports each on its samples (float32 twice, once with symbolic dims where "
        "the op allows them, and int64), reads the program at core-ATen level (torch's decompositions minus the "
        "op under test), builds and runs it, and compares with eager PyTorch (relative L2 at most 1e-5, integers "
        "and bools exact): every converted op matches on at least one sample and never gives a wrong number; a "
        "sample may be refused for an argument not supported (listed below by `--aten`). "
        "`benchmarks/op_coverage.py --aten` runs more samples, bools too. Converted without OpInfo samples "
        "(tested in `tests/test_aten_ops.py`): "
        + (", ".join(f"`{op}`" for op in converted if op not in with_samples) or "none")
        + ".",
        "",
        "Converted: " + ", ".join(f"`{op}`" for op in converted) + ".",
        "",
        "### Refused by design",
        "",
        "| op | reason |",
        "|---|---|",
        *[f"| `{op}` | {ac.BY_DESIGN[op]} |" for op in by_status["by design"]],
        "",
        "### Not converted yet",
        "",
        "Each is refused with a one-line error naming it: "
        + (", ".join(f"`{op}`" for op in by_status["missing"]) or "none")
        + ".",
        "",
    ]
    return lines


def _onnx_section(outcomes: dict[str, tuple[str, str, tuple[str, ...]]]) -> list[str]:
    import onnx

    from aot.testing import onnx_node

    counts = Counter(status for status, _, _ in outcomes.values())
    in_scope = len(outcomes) - counts["by design"]
    frozen = sum(1 for status, _, names in outcomes.values() if status == "pass" and names)
    reasons = defaultdict(list)
    for name, (status, detail, _) in outcomes.items():
        if status == "by design":
            reasons[detail].append(name)
    lines = [
        f"## ONNX backend node tests (onnx {onnx.__version__}, operators up to opset {onnx_node.MAX_OPSET})",
        "",
        f"**{counts['pass']} of {in_scope} in-scope node tests pass ({_percent(counts['pass'], in_scope)})**, "
        f"{counts['refused']} are refused with a one-line error, {counts['fail']} give a wrong result or crash; "
        f"{len(outcomes)} cases in all, {counts['by design']} refused by design.",
        "",
        "Each case (`onnx/backend/test/case/node`, built in memory as onnx's own runner does) is compiled "
        "with `aot.build`, run with runtime_lite and compared with onnx's expected outputs at the case's "
        "tolerances, every data set, shapes and dtypes exact. "
        f"{frozen} of the passing cases feed an attribute-like input (axes, pads, repeats, k, scales) as a "
        "graph input; aot needs those as constants when it builds, as exporters write them, so the harness "
        "bakes that input's values in and builds once per data set (`aot/testing/onnx_node.py`).",
        "",
        "### Refused by design",
        "",
        "| reason | cases |",
        "|---|---|",
        *[f"| {reason} | {len(names)} |" for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1]))],
        "",
    ]
    for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        lines += [f"<details><summary>{reason} ({len(names)})</summary>", "", ", ".join(names), "", "</details>", ""]
    refused = {n: d for n, (s, d, _) in outcomes.items() if s == "refused"}
    failed = {n: d for n, (s, d, _) in outcomes.items() if s == "fail"}
    lines += ["### Refused (not supported yet)", "", "| case | error |", "|---|---|"]
    lines += [f"| `{n}` | {d.replace('|', '&#124;')} |" for n, d in refused.items()]
    lines += ["", "### Wrong results or crashes", ""]
    lines += [f"- `{n}`: {d}" for n, d in failed.items()] or ["None."]
    lines.append("")
    return lines


def _ml_section() -> list[str]:
    """The classic-ML ops (``ai.onnx.ml``) converted, with their limits, and those that are not, from onnx's schemas."""
    from onnx import defs

    from aot.frontend.onnx import ml_converters as ml

    schemas = sorted({s.name for s in defs.get_all_schemas_with_history() if s.domain == ml.DOMAIN})
    missing = [op for op in schemas if op not in ml.CONVERTED and op not in ml.REFUSED]
    return [
        "## Classic ML (`ai.onnx.ml`)",
        "",
        f"**{len(ml.CONVERTED)} of the {len(schemas)} `ai.onnx.ml` operators converted**: those skl2onnx writes for "
        "scikit-learn's scalers, linear models, MLPs and tree ensembles (`aot/frontend/onnx/ml_converters.py`). "
        "`tests/test_onnx_ml_ops.py` checks each against onnxruntime (the tree ensembles on random forests with "
        "every branch mode, NaNs and two-class models), and StandardScaler + LogisticRegression, StandardScaler + "
        "PCA + MLPClassifier, RandomForestClassifier and GradientBoostingRegressor as skl2onnx converts them, built "
        "for the host and for onnxruntime. Where onnxruntime and ONNX's reference evaluator disagree, aot computes "
        "what onnxruntime does. Inputs are [N, features] or [features] (Binarizer's any shape).",
        "",
        "| op | becomes | limits |",
        "|---|---|---|",
        *[f"| `{op}` | {becomes} | {limits} |" for op, (becomes, limits) in sorted(ml.CONVERTED.items())],
        "",
        "Not tensors of numbers, so refused in one line saying what to convert instead: `ZipMap` (a sequence of "
        "maps; skl2onnx's `options={id(model): {'zipmap': False}}` outputs the probabilities as a tensor) and string "
        "class labels (`classlabels_strings`; fit on integer labels). Not converted yet, each refused with a "
        "one-line error naming it: " + ", ".join(f"`{op}`" for op in missing) + ".",
        "",
    ]


def render(outcomes: dict[str, tuple[str, str, tuple[str, ...]]] | None = None) -> str:
    header = [
        "# Operator coverage",
        "",
        "Generated by `python benchmarks/op_coverage.py --write` from the installed torch and onnx; "
        "`tests/test_op_coverage.py` fails when this page and the code disagree. Measured against the "
        "official operator sets rather than a list of models: PyTorch's core ATen opset (what "
        "`torch.export`'s decompositions produce), the onnx package's backend node tests, and the classic-ML "
        "operators (`ai.onnx.ml`) skl2onnx writes.",
        "",
    ]
    body = _aten_section() + _onnx_section(onnx_outcomes() if outcomes is None else outcomes) + _ml_section()
    return "\n".join(header + body).rstrip() + "\n"
