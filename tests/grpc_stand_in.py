"""A test double for a Ray cluster's port, as far as ``serve --address``'s check reaches it.

``serve`` opens gRPC's HTTP/2 handshake on the address before it starts Ray
(runtime_lite/serving/server.py, ``_not_grpc``); a GCS answers with a SETTINGS frame.
This stand-in answers the same way and does nothing else, so tests of what happens
after the check (a join that fails, a cluster that never comes up) get past it
without a real cluster.
"""

from __future__ import annotations

import socket
import threading

#: An empty HTTP/2 SETTINGS frame: length 0, type 4, no flags, stream 0.
SETTINGS_FRAME = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


class GrpcPortStandIn:
    """Listens on a loopback port and answers each connection's handshake with a SETTINGS frame."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        self.port: int = self._socket.getsockname()[1]
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._answer, daemon=True).start()

    def _answer(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed
                return
            self._connections.append(connection)
            try:
                connection.sendall(SETTINGS_FRAME)
            except OSError:
                pass

    def close(self) -> None:
        self._socket.close()
        for connection in self._connections:
            connection.close()

    def __enter__(self) -> GrpcPortStandIn:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
