"""The six RPCs of ``inference.GRPCInferenceService`` over an InferenceService.

Ray Serve's gRPC ingress calls a deployment's method by the RPC's name
(``RuntimeLiteDeployment.ModelInfer``), which hands the request here. Model lookup, the
inference path and the observer are the service's, shared with REST; a refusal becomes the
gRPC status of the HTTP status REST answers (``STATUS_CODES``), with the same one line as
its details.
"""

from __future__ import annotations

from typing import Any

import grpc

from runtime_lite.serving.grpc_api import STATUS_CODES
from runtime_lite.serving.grpc_api import inference_pb2 as pb
from runtime_lite.serving.grpc_api.codec import decode_infer_request, encode_infer_response
from runtime_lite.serving.protocol import ProtocolError
from runtime_lite.serving.service import InferenceService

#: The response message of each RPC; a refused call answers an empty one beside its status.
RESPONSES = {
    "ServerLive": pb.ServerLiveResponse,
    "ServerReady": pb.ServerReadyResponse,
    "ModelReady": pb.ModelReadyResponse,
    "ServerMetadata": pb.ServerMetadataResponse,
    "ModelMetadata": pb.ModelMetadataResponse,
    "ModelInfer": pb.ModelInferResponse,
}


class GrpcEndpoints:
    def __init__(self, service: InferenceService):
        self.service = service

    async def call(self, rpc: str, request: Any, context: Any) -> Any:
        """Answer ``rpc``; a refusal sets the status code and details on ``context`` (Ray's gRPC context)."""
        try:
            return await getattr(self, "_" + rpc)(request)
        except ProtocolError as e:
            if context is None:
                raise
            context.set_code(grpc.StatusCode[STATUS_CODES.get(e.status, "UNKNOWN")])
            context.set_details(str(e))
            return RESPONSES[rpc]()

    async def _ServerLive(self, request: Any) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def _ServerReady(self, request: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.service.ready)

    async def _ModelReady(self, request: Any) -> Any:
        self.service.model(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=True)

    async def _ServerMetadata(self, request: Any) -> Any:
        return pb.ServerMetadataResponse(**self.service.server_metadata())

    async def _ModelMetadata(self, request: Any) -> Any:
        meta = self.service.model(request.name, request.version or None).metadata()
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]],
            outputs=[tensor(**t) for t in meta["outputs"]],
        )

    async def _ModelInfer(self, request: Any) -> Any:
        model = self.service.model(request.model_name, request.model_version or None)
        return await self.service.infer(
            model,
            lambda specs: decode_infer_request(request, specs, self.service.max_request_bytes),
            lambda decoded, chosen, outputs: encode_infer_response(
                pb.ModelInferResponse(), model.name, model.version, decoded, model.module.outputs, outputs, chosen
            ),
        )
