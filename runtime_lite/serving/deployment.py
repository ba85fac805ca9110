"""The Ray Serve deployment: each replica loads every bundle and answers the v2 protocol (HTTP, and gRPC).

One deployment holds all models, so a request crosses one hop (Ray's HTTP proxy to
a replica) and the replica decodes, batches, runs and encodes in place. The bundle
set arrives as the deployment's ``user_config``: changing it (a new bundle version)
makes Ray call ``reconfigure`` on the running replicas, which load the new modules
beside the old ones and swap them in whole — requests in flight finish on the model
they started with, and none is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ray import serve
from ray.serve.metrics import Counter, Histogram
from starlette.requests import Request
from starlette.responses import Response

import runtime_lite
from runtime_lite.serving.batching import rows, run_batched
from runtime_lite.serving.protocol import ProtocolError, error_body
from runtime_lite.serving.service import (
    DEFAULT_REQUEST_TIMEOUT_S,
    InferenceService,
    Runnable,
    ServedModel,
    read_body,
    served_model,
)

log = logging.getLogger("runtime_lite.serving")

#: Builds a model from a config entry; the default loads a bundle with runtime_lite.
Loader = Callable[[Mapping[str, Any], Mapping[str, Any]], Runnable]

LATENCY_BOUNDARIES_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
BATCH_BOUNDARIES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128]


def load_bundle(entry: Mapping[str, Any], config: Mapping[str, Any]) -> Runnable:
    return runtime_lite.load(
        entry["path"], backend_options=config.get("backend_options") or None, map_file=bool(config.get("map_file"))
    )


class RayMetrics:
    """Request count, latency and batch size per model, exported by Ray in Prometheus format."""

    def __init__(self) -> None:
        self.requests = Counter(
            "runtime_lite_requests", description="Inference requests answered, by model and HTTP status",
            tag_keys=("model", "status"),
        )  # fmt: skip
        self.latency = Histogram(
            "runtime_lite_request_latency_ms", description="Time from request body to response body, ms",
            boundaries=LATENCY_BOUNDARIES_MS, tag_keys=("model",),
        )  # fmt: skip
        self.batch_rows = Histogram(
            "runtime_lite_batch_size", description="Rows per model run (requests concatenated by dynamic batching)",
            boundaries=BATCH_BOUNDARIES, tag_keys=("model",),
        )  # fmt: skip

    def request(self, model: str, status: int, seconds: float) -> None:
        self.requests.inc(tags={"model": model, "status": str(status)})
        self.latency.observe(seconds * 1e3, tags={"model": model})

    def batch(self, model: str, rows: int) -> None:
        self.batch_rows.observe(rows, tags={"model": model})


def batched_infer(model: ServedModel, wait_ms: float, metrics: RayMetrics) -> None:
    """Put ``model`` behind Ray Serve's own batcher, counting rows rather than requests.

    ``model.max_batch_size`` is already within the bundle's bounds of the batch dim, so
    Ray never forms a batch the module would refuse; a request outside the bounds runs
    alone inside the batch (``run_batched``), and one that alone fills a batch skips it.
    """
    module, direct, fits = model.module, model.infer, model.axis.fits

    @serve.batch(
        max_batch_size=model.max_batch_size,
        batch_wait_timeout_s=wait_ms / 1e3,
        batch_size_fn=lambda items: sum(rows(arrays) for arrays in items),
    )
    async def run_batch(items: list[list]) -> list:
        metrics.batch(model.name, sum(rows(arrays) for arrays in items))
        async with model.gate:
            return await asyncio.to_thread(run_batched, module.run, items, fits)

    async def infer(arrays: list) -> list:
        if rows(arrays) >= model.max_batch_size:  # already a full batch: Ray's batcher would refuse it
            metrics.batch(model.name, rows(arrays))
            return await direct(arrays)
        result = await run_batch(arrays)
        if isinstance(result, BaseException):
            raise result
        return result

    model.infer = infer


def unbatched_infer(model: ServedModel, metrics: RayMetrics) -> None:
    direct = model.infer

    async def infer(arrays: list) -> list:
        metrics.batch(model.name, rows(arrays))
        return await direct(arrays)

    model.infer = infer


@serve.deployment(name="runtime_lite")
class RuntimeLiteDeployment:
    """A replica: the v2 service over the bundles named in ``user_config``."""

    def __init__(self, loader: Loader | None = None):
        self.loader = loader or load_bundle
        self.metrics = RayMetrics()
        self.service = InferenceService(observer=self.metrics)
        self.batching: tuple[int, float, bool] | None = None  # what the loaded models were set up with (_batching)
        self.request_timeout_s = DEFAULT_REQUEST_TIMEOUT_S
        self._grpc_endpoints: Any = None  # built on the first gRPC call

    async def reconfigure(self, config: dict[str, Any]) -> None:
        models = await asyncio.to_thread(self._load_all, config)
        self.batching = _batching(config)
        self.service.max_request_bytes = int(config.get("max_request_bytes", self.service.max_request_bytes))
        self.request_timeout_s = float(config.get("request_timeout_s", self.request_timeout_s))
        self.service.replace_models(models)
        for model in models.values():
            log.info("model %s version %s ready; dynamic batching %s", model.name, model.version, model.batching_note())

    def _load_all(self, config: Mapping[str, Any]) -> dict[str, ServedModel]:
        current = self.service.models
        rows, wait_ms, coupled = batching = _batching(config)
        models = {}
        for entry in config["models"]:
            kept = current.get(entry["name"])
            if kept is not None and kept.module.digest == entry.get("digest") and self.batching == batching:
                models[entry["name"]] = kept  # unchanged: keep the loaded module and its batcher
                continue
            try:
                module = self.loader(entry, config)
            except Exception as e:
                if kept is None:
                    raise  # nothing to serve instead: the deployment fails, and `serve` says why
                log.error("model %s: keeping version %s, the new bundle did not load: %s", kept.name, kept.version, e)
                models[entry["name"]] = kept
                continue
            model = served_model(entry["name"], module, rows, batch_coupled_rows=coupled)
            if model.batching:
                batched_infer(model, wait_ms, self.metrics)
            else:
                unbatched_infer(model, self.metrics)
            models[entry["name"]] = model
        return models

    async def __call__(self, request: Request) -> Response:
        try:
            body = await read_body(
                request.stream(),
                request.headers.get("content-length"),
                self.service.max_request_bytes,
                self.request_timeout_s,
            )
        except ProtocolError as e:  # the connection is closed: what is left of a refused body is not read
            return Response(
                error_body(str(e)),
                status_code=e.status,
                headers={"content-type": "application/json", "connection": "close"},
            )
        answer = await self.service.handle(request.method, request.url.path, request.headers, body)
        return Response(answer.body, status_code=answer.status, headers=answer.headers)

    # The Open Inference Protocol over gRPC (``serve --grpc-port``): Ray Serve's gRPC ingress calls the method
    # named like the RPC, with ``grpc_context`` to set a refusal's status on. grpc_api (and protobuf's messages)
    # loads on the first call: an HTTP-only replica never imports it.

    async def ServerLive(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerLive", request, grpc_context)

    async def ServerReady(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerReady", request, grpc_context)

    async def ModelReady(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelReady", request, grpc_context)

    async def ServerMetadata(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerMetadata", request, grpc_context)

    async def ModelMetadata(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelMetadata", request, grpc_context)

    async def ModelInfer(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelInfer", request, grpc_context)

    async def _grpc(self, rpc: str, request: Any, context: Any) -> Any:
        if self._grpc_endpoints is None:
            from runtime_lite.serving.grpc_api.endpoints import GrpcEndpoints

            self._grpc_endpoints = GrpcEndpoints(self.service)
        return await self._grpc_endpoints.call(rpc, request, context)


def _batching(config: Mapping[str, Any]) -> tuple[int, float, bool]:
    """Rows and wait of the batcher, and whether it merges rows that change each other: a change to any rebuilds
    every model's batcher."""
    return (
        int(config.get("max_batch_size", 1)),
        float(config.get("batch_wait_ms", 5.0)),
        bool(config.get("batch_coupled_rows", False)),
    )
