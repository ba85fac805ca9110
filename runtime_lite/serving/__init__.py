"""Serving bundles on Ray Serve over the Open Inference Protocol (v2), the one Triton and KServe speak.

Optional: ``pip install 'runtime-lite[serve]'`` brings Ray Serve. ``import runtime_lite``
never imports this package, nothing here but ``deployment`` and ``server`` imports Ray, and
nothing but ``grpc_api`` (loaded only when gRPC is served) imports grpc or protobuf itself:

- ``protocol``  — the v2 codec: JSON and binary tensors to numpy and back.
- ``batching``  — concatenating requests along a bundle's symbolic batch dim.
- ``service``   — the endpoints over a set of models, with no server attached.
- ``deployment`` — the Ray Serve replica around the service (batching, metrics, reconfigure).
- ``server``    — the ``runtime-lite serve`` command: start, announce, reload, drain.
- ``grpc_api``  — the protocol's gRPC API (``serve --grpc-port``): its .proto, generated code, codec and RPCs.
"""
