"""The Open Inference Protocol's gRPC API (``inference.GRPCInferenceService``), served by ``serve --grpc-port``.

Imported only when gRPC is served: ``import runtime_lite`` and an HTTP-only replica never
load grpc or protobuf through it.

- ``inference.proto`` — the messages and RPCs served, with KServe's and Triton's field numbers.
- ``inference_pb2.py``, ``inference_pb2_grpc.py`` — generated from it by grpcio-tools (the
  command is in the .proto); never edited by hand.
- ``codec``     — protobuf requests to numpy and back, through protocol.py's checks.
- ``endpoints`` — the six RPCs over an InferenceService, refusals as gRPC status codes.

A process cannot import these messages beside ``tritonclient.grpc``: both register the
package ``inference`` in protobuf's default pool, and the second import fails with
``duplicate symbol``. Replicas never import tritonclient; the tests drive the server with
tritonclient only, and test the codec with tritonclient's own message classes.
"""

#: What Ray Serve's gRPC ingress imports to register the service (``gRPCOptions.grpc_servicer_functions``).
SERVICER_FUNCTION = "runtime_lite.serving.grpc_api.inference_pb2_grpc.add_GRPCInferenceServiceServicer_to_server"
SERVICE_NAME = "inference.GRPCInferenceService"

#: The gRPC status of each refusal, by the HTTP status the REST path answers it with.
STATUS_CODES = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
