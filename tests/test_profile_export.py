"""Profiles exported as a Chrome trace and JSON, the per-op summary, and `runtime-lite run --profile`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
import runtime_lite
from runtime_lite.execution.profile import Profile
from tests.conftest import small_cnn_model

ROOT = Path(__file__).resolve().parents[1]
X = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture(scope="module")
def npu_bundle(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "npu.aotb"
    aot.build(small_cnn_model(), targets=["npu"]).save(path)
    return path


def _complete_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_chrome_trace_has_one_event_per_instruction_and_dispatch(npu_bundle):
    module = runtime_lite.load(npu_bundle)
    profile = module.profile({"x": X})
    np.testing.assert_array_equal(profile.outputs[0], module.run({"x": X})[0])
    trace = json.loads(json.dumps(profile.to_chrome_trace()))  # it survives JSON as it is
    events = _complete_events(trace)
    assert len(events) == len(profile.events)
    plan = [e for e in events if e["tid"] == 1]
    assert [e["args"]["node"] for e in plan] == [ins.name for ins in module._plan.instructions]
    regions = {e["args"]["node"]: e for e in plan if e["args"]["op"] == "call_module"}
    dispatches = [e for e in events if e["tid"] != 1]
    assert regions and dispatches and all(e["cat"] == "npu" for e in dispatches)
    for e in events:
        assert e["ts"] >= 0 and e["dur"] >= 0
    for d in dispatches:
        assert isinstance(d["args"]["cycles"], int) and d["args"]["engine"]
        assert d["args"]["cycles"] > 0 or d["args"].get("view")  # a view (the flatten) moves nothing: 0 cycles
        region = regions[d["args"]["module"]]  # a dispatch lies inside its region's call
        assert region["ts"] <= d["ts"] and d["ts"] + d["dur"] <= region["ts"] + region["dur"] + 1e-3
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"host plan", "npu dispatches"}


def test_op_summary_counts_every_plan_step_once(npu_bundle):
    profile = runtime_lite.load(npu_bundle).profile([X])
    rows = profile.op_summary()
    assert sum(r.count for r in rows) == len(profile.plan_events)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert sum(r.total_s for r in rows) == pytest.approx(profile.total_s)
    by_key = {(r.backend, r.op): r.count for r in rows}
    regions = sum(1 for e in profile.plan_events if e["op"] == "call_module")
    assert by_key[("npu", "call_module")] == regions >= 1
    assert [r.total_s for r in rows] == sorted((r.total_s for r in rows), reverse=True)


def test_to_json_round_trips_with_summary_and_events(npu_bundle):
    profile = runtime_lite.load(npu_bundle).profile([X])
    record = json.loads(profile.to_json())
    assert record["total_ms"] == pytest.approx(profile.total_s * 1e3)
    assert len(record["events"]) == len(profile.events)
    assert {row["op"] for row in record["summary"]} >= {"call_module"}
    assert all("wall_ms" in e and "start_s" not in e for e in record["events"])


def test_a_backend_that_records_no_start_is_laid_end_to_end():
    events = [  # a third-party backend's dispatches without start_s, and the plan's call around them
        {"backend": "acme", "module": "acme_0", "node": "a", "wall_s": 0.001},
        {"backend": "acme", "module": "acme_0", "node": "b", "wall_s": 0.002},
        {"backend": "acme", "module": None, "node": "acme_0", "op": "call_module", "start_s": 5.0, "wall_s": 0.004},
    ]
    trace = Profile([], events).to_chrome_trace()
    a, b, call = _complete_events(trace)
    assert (a["ts"], a["dur"]) == (0.0, pytest.approx(1000.0)) and b["ts"] == pytest.approx(1000.0)
    assert call["ts"] == 0.0 and call["name"] == "acme region acme_0"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "runtime_lite", *args], capture_output=True, text=True, env=env)


def test_run_profile_writes_a_trace_and_prints_the_summary(npu_bundle, tmp_path):
    out = tmp_path / "trace.json"
    result = _cli("run", str(npu_bundle), "--random-inputs", "--profile", str(out))
    assert result.returncode == 0, result.stderr
    assert "call_module" in result.stdout and "share" in result.stdout and f"written to {out}" in result.stdout
    trace = json.loads(out.read_text())
    assert trace["displayTimeUnit"] == "ms" and len(_complete_events(trace)) >= 4


@pytest.mark.parametrize("target", ["/dev/null", "directory"])
def test_run_profile_refuses_what_is_not_a_regular_file(npu_bundle, tmp_path, target):
    path = str(tmp_path) if target == "directory" else target
    result = _cli("run", str(npu_bundle), "--random-inputs", "--profile", path)
    assert result.returncode == 1 and result.stderr.startswith(f"error: --profile '{path}'"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "ran in" not in result.stdout  # refused before the run
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_run_output_dir_that_cannot_be_made_is_one_line(npu_bundle, tmp_path):
    (tmp_path / "file").write_text("a file, not a directory")
    result = _cli("run", str(npu_bundle), "--random-inputs", "--output-dir", str(tmp_path / "file" / "out"))
    assert result.returncode == 1 and result.stderr.startswith("error: --output-dir"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_output_dir_without_write_permission_is_one_line(npu_bundle, tmp_path, monkeypatch, capsys):
    from runtime_lite.tools import cli

    real_access = os.access
    monkeypatch.setattr(  # root ignores file modes: this test double says what a non-root user would see
        cli.os, "access", lambda path, mode: False if Path(path) == tmp_path / "ro" else real_access(path, mode)
    )
    code = cli.main(["run", str(npu_bundle), "--random-inputs", "--output-dir", str(tmp_path / "ro")])
    err = capsys.readouterr().err
    assert code == 1 and err.strip() == f"error: --output-dir '{tmp_path / 'ro'}': Permission denied"
