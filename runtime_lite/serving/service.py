"""The v2 endpoints over a set of loaded models, independent of the server that hosts them.

``InferenceService.handle(method, path, headers, body)`` is the whole HTTP surface;
the Ray Serve deployment (``deployment.py``) only adapts Starlette requests to it,
so routing, validation and error mapping are tested without starting Ray. The gRPC
endpoints (``grpc_api/endpoints.py``) use the same model lookup (``model``) and the
same inference path (``infer``), with a decoder and an encoder of their own.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from runtime_lite.errors import ExecutionError, InputError, RuntimeLiteError, one_line
from runtime_lite.execution.limits import BudgetExceeded
from runtime_lite.format.signature import TensorSpec, bind, ordered_values
from runtime_lite.serving.batching import BatchAxis, batch_axis
from runtime_lite.serving.classification import EXTENSION, ClassificationError, classify
from runtime_lite.serving.protocol import (
    DEFAULT_MAX_JSON_COST,
    DEFAULT_MAX_REQUEST_BYTES,
    HEADER_LENGTH,
    InferRequest,
    ProtocolError,
    config_tensor,
    decode_infer_request,
    encode_infer_response,
    error_body,
    select_outputs,
    tensor_metadata,
)
from runtime_lite.version import __version__

Infer = Callable[[list[np.ndarray]], Awaitable[list[np.ndarray]]]
#: Reads a request against a model's inputs (each transport has its own); raises ProtocolError.
Decode = Callable[[Sequence[TensorSpec]], InferRequest]
T = TypeVar("T")
#: Writes the answer: the request, the indices of the outputs it asked for, and every output.
Encode = Callable[[InferRequest, list[int], list[np.ndarray]], T]


class Runnable(Protocol):
    """What a served model needs: a runtime_lite Module, or anything shaped like one (a peer in a benchmark)."""

    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]
    digest: str

    def run(self, inputs: Any) -> list[np.ndarray]: ...


class Observer(Protocol):
    """Where request and batch measurements go (Ray's metrics in a replica; nothing in unit tests)."""

    def request(self, model: str, status: int, seconds: float) -> None: ...

    def batch(self, model: str, rows: int) -> None: ...


class NoMetrics:
    def request(self, model: str, status: int, seconds: float) -> None:
        pass

    def batch(self, model: str, rows: int) -> None:
        pass


@dataclass
class ServedModel:
    """One model as served: its module, the version it answers with, and how it is batched."""

    name: str
    module: Runnable
    infer: Infer
    #: Rows a batch may hold: ``--max-batch-size`` within the bundle's declared bounds of the batch dim.
    max_batch_size: int = 1
    axis: BatchAxis = field(default_factory=lambda: BatchAxis(None, "batching off"))
    #: One run at a time, batched or not (see ``direct_infer``).
    gate: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: What ``--max-batch-size`` asked for (the note says when the bundle's bounds lowered it).
    asked_batch_size: int = 1

    @property
    def version(self) -> str:
        return self.module.digest[:12]

    @property
    def batching(self) -> bool:
        return self.axis.merges(self.max_batch_size)

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "runtime_lite",
            "inputs": [tensor_metadata(spec) for spec in self.module.inputs],
            "outputs": [tensor_metadata(spec) for spec in self.module.outputs],
            "parameters": {
                "bundle_digest": self.module.digest,
                "dynamic_batching": self.batching,
                "max_batch_size": self.max_batch_size if self.batching else 0,
                "batching": self.batching_note(),
            },
        }

    def config(self) -> dict[str, Any]:
        """The model as Triton's ``GET .../config`` describes one (model_config.proto in JSON): tools that size
        their requests from it (perf_analyzer, tritonclient's ``get_model_config``) see the batch dim as Triton
        shows it, left out of ``dims`` where the model batches."""
        batched = self.batching
        config: dict[str, Any] = {
            "name": self.name,
            "platform": "runtime_lite",
            "backend": "runtime_lite",
            "max_batch_size": self.max_batch_size if batched else 0,
            "input": [config_tensor(spec, batched) for spec in self.module.inputs],
            "output": [config_tensor(spec, batched) for spec in self.module.outputs],
        }
        if batched:
            config["dynamic_batching"] = {}
        return config

    def batching_note(self) -> str:
        return self.axis.note(max(self.asked_batch_size, self.max_batch_size))


def classified(request: InferRequest, chosen: list[int], outputs: list[np.ndarray], model: ServedModel) -> list[Any]:
    """The outputs with each one asked for by ``classification`` replaced by its top k (classification.py);
    ProtocolError(400) where an output cannot be ranked. A batching model ranks each row of its first dim."""
    specs, replaced = model.module.outputs, list(outputs)
    for i in chosen:
        count = request.classifications.get(specs[i].name)
        if count is not None:
            try:
                replaced[i] = classify(np.asarray(outputs[i]), count, model.batching, specs[i].name)
            except ClassificationError as e:
                raise ProtocolError(400, str(e)) from None
    return replaced


def direct_infer(module: Runnable, gate: asyncio.Lock) -> Infer:
    """Run each request on its own, one at a time, in a worker thread so the event loop keeps accepting.

    One at a time because a run already keeps every BLAS thread of the replica busy:
    concurrent runs only fight over the cores (measured: 32 concurrent SqueezeNet
    requests answered at a third of the rate of 8). Triton's model instance makes the
    same choice; more parallel runs come from more replicas.
    """

    async def infer(arrays: list[np.ndarray]) -> list[np.ndarray]:
        async with gate:
            return await asyncio.to_thread(module.run, arrays)

    return infer


def served_model(
    name: str, module: Runnable, max_batch_size: int, infer: Infer | None = None, batch_coupled_rows: bool = False
) -> ServedModel:
    """``module`` served as ``name``, batching at most ``max_batch_size`` rows and never past the bundle's bounds.

    A bundle whose rows change each other's answers (``Module.row_coupling``: dynamic int8) is not batched,
    and the note says why, unless ``batch_coupled_rows`` (``serve --batch-coupled-rows``) accepts that."""
    gate = asyncio.Lock()
    axis = batch_axis(module.inputs, module.outputs, getattr(module, "dims", None))
    coupling = getattr(module, "row_coupling", None) if max_batch_size > 1 else None
    if coupling is not None and axis.enabled:
        if batch_coupled_rows:
            axis = replace(axis, reason=f"{axis.reason}, though {coupling} (--batch-coupled-rows)")
        else:
            axis = BatchAxis(None, f"{coupling}; --batch-coupled-rows batches it anyway")
    rows = axis.limit(max_batch_size)
    return ServedModel(name, module, infer or direct_infer(module, gate), rows, axis, gate, max_batch_size)


#: How deep ``refused_for_the_request`` follows ``__cause__`` (a backend's plan inside the host plan adds one step).
_CAUSE_DEPTH = 8


def refused_for_the_request(error: ExecutionError) -> bool:
    """Whether a failed run was refused for what the request chose, so that the client, not the server, must change.

    A module wraps every kernel failure in ``ExecutionError`` with the kernel's own
    exception as ``__cause__`` (nested once per backend plan). The request is the cause
    when that is a ``BudgetExceeded`` (the run's ``max_memory``, reached by the size the
    request declared), an ``InputError``, or a plain ``ValueError``: a kernel refusing
    geometry its operands cannot have (a 2x2 pool window over a 1x1 image the signature
    allowed). Everything else (a real ``MemoryError``, a deadline, a bundle error, a
    backend's own exception) stays the server's 500.
    """
    cause: BaseException | None = error
    for _ in range(_CAUSE_DEPTH):
        if not isinstance(cause, ExecutionError):
            break
        cause = cause.__cause__
    if isinstance(cause, (BudgetExceeded, InputError)):
        return True
    return isinstance(cause, ValueError) and not isinstance(cause, RuntimeLiteError)


#: How long a request's body may take to arrive, unless the server says otherwise (``serve --request-timeout``).
DEFAULT_REQUEST_TIMEOUT_S = 30.0


async def read_body(
    chunks: AsyncIterator[bytes], declared_length: str | None, max_bytes: int, timeout_s: float
) -> bytearray:
    """A request body off the wire, within ``max_bytes`` and ``timeout_s``; ProtocolError 413 or 408 otherwise.

    A client that sends headers and part of a body, then waits, would otherwise hold a
    replica's request slot for as long as its connection stays open: the deadline
    covers the whole body, however slowly it trickles. A declared length over the cap
    is refused before a byte is read.
    """
    if declared_length is not None:
        try:
            declared = int(declared_length)
        except ValueError:
            raise ProtocolError(400, f"Content-Length {declared_length[:40]!r} is not a number") from None
        if declared > max_bytes:
            raise ProtocolError(413, f"request body is over {max_bytes} bytes (Content-Length {declared})")
    body = bytearray()

    async def collect() -> None:
        async for chunk in chunks:
            if len(body) + len(chunk) > max_bytes:
                raise ProtocolError(413, f"request body is over {max_bytes} bytes")
            body.extend(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except asyncio.TimeoutError:  # not TimeoutError: Python 3.10's asyncio has its own
        raise ProtocolError(
            408, f"request body did not arrive within {timeout_s:g} s ({len(body)} bytes came)"
        ) from None
    return body


@dataclass
class Response:
    """An HTTP answer before it is written: status, body, headers (JSON unless said otherwise)."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


def _json(status: int, payload: Any) -> Response:
    return Response(status, json.dumps(payload).encode())


def _error(status: int, message: str) -> Response:
    return Response(status, error_body(message))


class InferenceService:
    """Routes v2 requests to models; ``models`` can be swapped whole (a new version) at any time."""

    def __init__(
        self,
        models: Mapping[str, ServedModel] | None = None,
        observer: Observer | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_json_cost: int = DEFAULT_MAX_JSON_COST,
    ):
        self.models: dict[str, ServedModel] = dict(models or {})
        self.observer = observer or NoMetrics()
        self.max_request_bytes = max_request_bytes
        self.max_json_cost = max_json_cost
        self.ready = bool(self.models)

    def replace_models(self, models: Mapping[str, ServedModel]) -> None:
        """Requests already running keep the model they started with; new ones see the new set."""
        self.models = dict(models)
        self.ready = bool(self.models)

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": "runtime_lite",
            "version": __version__,
            "extensions": ["binary_tensor_data", EXTENSION, "model_configuration"],
        }

    def model(self, name: str, version: str | None = None) -> ServedModel:
        """The model served as ``name``, at ``version`` if one is asked; ProtocolError 404 naming what is served."""
        model = self.models.get(name)
        if model is None:
            known = ", ".join(sorted(self.models)) or "none"
            raise ProtocolError(404, f"unknown model '{name}' (serving: {known})")
        if version is not None and version != model.version:
            raise ProtocolError(404, f"model '{name}' has no version '{version}' (serving version {model.version})")
        return model

    async def infer(self, model: ServedModel, decode: Decode, encode: Encode[T]) -> T:
        """One inference, whichever transport carried it: ``decode`` reads the request against the model's
        inputs, ``encode`` writes the answer. Every refusal is a ProtocolError with an HTTP status and one line
        (the gRPC endpoints map the status to a gRPC code); the observer sees each request once."""
        start = time.perf_counter()
        status = 500
        try:
            try:
                request = decode(model.module.inputs)
                chosen = select_outputs(request, model.module.outputs)
                arrays, _ = bind(model.module.inputs, ordered_values(model.module.inputs, request.inputs))
                outputs = await model.infer(arrays)
            except ProtocolError as e:
                status = e.status
                raise
            except InputError as e:
                status = 400
                raise ProtocolError(400, str(e)) from None
            except ExecutionError as e:
                if refused_for_the_request(e):
                    status = 400
                    raise ProtocolError(400, f"model '{model.name}' cannot run on this input: {e}") from None
                raise ProtocolError(500, f"model '{model.name}' failed: {e}") from None
            except RuntimeLiteError as e:
                raise ProtocolError(500, f"model '{model.name}' failed: {e}") from None
            except Exception as e:  # noqa: BLE001 - a client gets one line, never a traceback
                raise ProtocolError(
                    500, f"model '{model.name}' failed: {type(e).__name__}: {one_line(str(e), 500)}"
                ) from None
            if request.classifications:
                outputs = classified(request, chosen, outputs, model)
            answer = encode(request, chosen, outputs)
            status = 200
            return answer
        finally:
            self.observer.request(model.name, status, time.perf_counter() - start)

    async def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] != "v2":
            return _error(404, f"no route {path!r}: this server speaks the v2 inference protocol under /v2")
        route = parts[1:]
        if route == []:
            return self._only("GET", method) or _json(200, self.server_metadata())
        if route in (["health", "live"], ["health", "ready"]):
            refused = self._only("GET", method)
            if refused:
                return refused
            if route[1] == "ready" and not self.ready:
                return _error(503, "server is not ready: no model is loaded yet")
            return Response(200, b"")
        if route[0] == "models" and len(route) >= 2:
            try:
                return await self._model_route(method, route[1:], headers, body)
            except ProtocolError as e:
                return _error(e.status, str(e))
        return _error(404, f"no route {path!r}")

    @staticmethod
    def _only(allowed: str, method: str) -> Response | None:
        if method.upper() != allowed:
            return _error(405, f"method {method} is not allowed here (use {allowed})")
        return None

    async def _model_route(self, method: str, route: list[str], headers: Mapping[str, str], body: bytes) -> Response:
        name, rest = route[0], route[1:]
        version = None
        if rest[:1] == ["versions"]:
            version = rest[1] if len(rest) >= 2 else ""
            rest = rest[2:]
        model = self.model(name, version)
        if rest == []:
            return self._only("GET", method) or _json(200, model.metadata())
        if rest == ["ready"]:
            return self._only("GET", method) or Response(200, b"")
        if rest == ["config"]:
            return self._only("GET", method) or _json(200, model.config())
        if rest == ["infer"]:
            return self._only("POST", method) or await self.infer(
                model,
                lambda specs: decode_infer_request(
                    body,
                    headers.get(HEADER_LENGTH),
                    specs,
                    self.max_request_bytes,
                    headers.get("content-encoding"),
                    self.max_json_cost,
                ),
                lambda request, chosen, outputs: Response(
                    200,
                    *encode_infer_response(model.name, model.version, request, model.module.outputs, outputs, chosen),
                ),
            )
        return _error(404, f"no route for model '{name}': /{'/'.join(rest)}")
