"""The hostile-client campaign against ``runtime-lite serve`` at size, then every way of stopping it.

    python benchmarks/bench_serving_hostile.py                      # ~11,000 cases, ~5 minutes
    python benchmarks/bench_serving_hostile.py --scale 19000        # ~100,000 cases
    python benchmarks/bench_serving_hostile.py --scale 200 --bomb-mib 64

One local server (two replicas, HAProxy ingress, ``--request-timeout`` short so stalled
bodies end in seconds) takes every family of tests/serving_hostile.py — malformed and
nested JSON, impossible shapes, lying lengths, compression bombs inflating to
``--bomb-mib``, stalled bodies beside good clients, concurrency with a SIGHUP reload —
and after each family must answer a good request bit-identically, with no replica's peak
RSS (VmHWM) grown past the bound. Then fresh servers are stopped each way a stop
arrives (SIGTERM to the main pid, SIGTERM and SIGINT to the whole process group, idle and after
traffic): each must exit 0 within 12 s and leave no process behind. Everything is on
127.0.0.1, bounded in cases and seconds; the output is the counts and every escape.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import runtime_lite  # noqa: E402
from tests.serving_client import ServerProcess, replica_pids  # noqa: E402
from tests.serving_hostile import GOOD_X, Campaign, good_body, http_request, infer_path, send  # noqa: E402
from tests.test_serving_protocol import mlp_bundle  # noqa: E402

REQUEST_TIMEOUT_S = 4
STOP_BOUND_S = 12


def campaign(root: Path, scale: int, bomb_mib: int, stalled: int, seed: int) -> tuple[int, list[str]]:
    server = ServerProcess(
        [f"fixed={root / 'fixed.aotb'}", "--replicas", "2", "--cpus-per-replica", "0.5", "--threads", "1",
         "--request-timeout", str(REQUEST_TIMEOUT_S)],
        log=root / "campaign.log",
    )  # fmt: skip
    problems: list[str] = []
    try:
        module = runtime_lite.load(root / "fixed.aotb")
        expected = module.run([np.array([GOOD_X], np.float32)])[0]
        run = Campaign(server.port, expected, replica_pids, request_timeout_s=REQUEST_TIMEOUT_S, seed=seed)
        run.run(scale, bomb_mib, stalled, during_concurrency=lambda: server.signal(signal.SIGHUP))
        problems = run.escapes + run.problems
        total = sum(o.cases for o in run.outcomes.values())
    finally:
        server.stop()
        server.kill_leftovers()
    return total, problems


def stops(root: Path) -> list[str]:
    problems = []
    ways = (("SIGTERM to the main pid", False, signal.SIGTERM), ("SIGTERM to the process group", True, signal.SIGTERM),
            ("SIGINT to the process group (Ctrl-C)", True, signal.SIGINT))  # fmt: skip
    for way, group, signum in ways:
        for traffic in (False, True):
            name = f"{way}, {'after traffic' if traffic else 'idle'}"
            server = ServerProcess(
                [f"fixed={root / 'fixed.aotb'}", "--threads", "1", "--cpus-per-replica", "0.5"],
                log=root / "stop.log", own_session=True,
            )  # fmt: skip
            try:
                if traffic:
                    for _ in range(200):
                        send(http_request(infer_path(), good_body()), server.port, timeout=30)
                began = time.monotonic()
                code = server.stop(timeout=60, group=group, signum=signum)
                took = time.monotonic() - began
                time.sleep(1)
                left = server.leftovers()
            finally:
                server.kill_leftovers()
            noisy = "graceful_shutdown failed" in server.output()
            print(
                f"{name}: exit {code} in {took:.1f} s, {len(left)} process(es) left{', failed-task noise' if noisy else ''}"
            )
            if code != 0 or took > STOP_BOUND_S or left or noisy:
                problems.append(f"{name}: exit {code} in {took:.1f} s, left {left}, noise {noisy}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=2000, help="cases per family (bombs and nesting fewer)")
    parser.add_argument("--bomb-mib", type=int, default=200, help="how far a bomb inflates at most")
    parser.add_argument("--stalled", type=int, default=200, help="stalled connections in the slow family")
    parser.add_argument("--seed", type=int, default=2029)
    args = parser.parse_args()
    from runtime_lite.tools.machine import cpu

    print(cpu(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "fixed.aotb").write_bytes(mlp_bundle(seed=3, batch=1))
        began = time.monotonic()
        total, problems = campaign(root, args.scale, args.bomb_mib, args.stalled, args.seed)
        print(f"campaign: {total} cases in {time.monotonic() - began:.0f} s, {len(problems)} escapes or problems")
        for line in problems[:50]:
            print("  " + line)
        problems += stops(root)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
