"""Request timeouts and a 503-while-starting answer in the HAProxy configuration Ray Serve writes.

Ray Serve renders HAProxy's configuration itself and has no setting for
``timeout http-request``, so a client that sends headers and part of a body, then
waits, holds its connection (and, once forwarded, a replica's request slot) for as
long as ``timeout client`` (an hour). Nor does it answer anything but 404 before the
application's route exists. ``serve`` therefore points Ray at a small wrapper
(``RAY_SERVE_HAPROXY_BINARY_PATH``) that adds three things to the configuration file
each time Ray starts HAProxy, then runs the real binary with the same arguments:

- ``timeout http-request``: the headers and body of a request must arrive within it
  (HAProxy answers 408 and closes the connection otherwise);
- ``option http-buffer-request``: HAProxy holds a request until its body is complete
  (up to its 1 MiB buffer) before choosing a replica, so a slow body never occupies a
  replica's slot;
- the default backend, reached only while no application route exists (``serve``
  routes every path to its one application), answers 503 ``server is not ready``
  instead of 404; with ``--grpc-port``, the default gRPC backend answers UNAVAILABLE
  with the same line instead of NOT_FOUND (``Application metadata not set``).

Ray reads nothing back from the file and finds its HAProxy processes by the file's
path in their command line, which the wrapper keeps. The wrapper is plain Python text
written to a private directory; ``harden_config`` is the part under test.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

#: Marks the lines the wrapper adds, so a file already hardened is left as it is.
MARKER = "# runtime-lite serve"


def harden_config(text: str, timeout_s: int) -> str:
    """Ray's HAProxy configuration with the request timeout, body buffering and a 503 default backend
    (and, with gRPC, UNAVAILABLE from the default gRPC backend)."""
    if MARKER in text:
        return text
    lines = text.split("\n")
    out = []
    section = ""
    for line in lines:
        stripped = line.strip()
        if section == "backend default_backend" and stripped.startswith("http-request return status 404"):
            line = (
                "    http-request return status 503 content-type application/json "
                'string \'{"error": "server is not ready: no model is being served yet"}\'  ' + MARKER
            )
        if section == "backend default_grpc_backend" and stripped.startswith("http-request return status 200"):
            if out[-1].endswith(MARKER):
                continue  # one answer for every request there: the first line already gives it
            line = (  # NOT_FOUND would say the service does not exist; it is starting (REST's 503)
                "    http-request return status 200 content-type application/grpc hdr grpc-status 14 "
                'hdr grpc-message "server is not ready: no model is being served yet"  ' + MARKER
            )
        if not line.startswith((" ", "\t")) and stripped:
            section = stripped
        out.append(line)
        if stripped == "defaults":
            out.append(f"    timeout http-request {timeout_s}s  {MARKER}")
            out.append(f"    option http-buffer-request  {MARKER}")
    return "\n".join(out)


_WRAPPER = '''#!{python} -IS
"""Written by runtime-lite serve: adds request timeouts to the HAProxy configuration Ray Serve writes
(runtime_lite/serving/haproxy.py says why), then runs HAProxy with the same arguments."""
import os
import sys

MARKER = {marker!r}
HAPROXY = {binary!r}
TIMEOUT_S = {timeout_s!r}

{source}

args = sys.argv[1:]
for flag, path in zip(args, args[1:]):
    if flag == "-f" and os.path.isfile(path):
        with open(path) as f:
            text = f.read()
        hardened = harden_config(text, TIMEOUT_S)
        if hardened != text:
            staged = path + ".runtime-lite"
            with open(staged, "w") as f:
                f.write(hardened)
            os.replace(staged, path)
os.execv(HAPROXY, [HAPROXY, *args])
'''


def write_wrapper(binary: str, timeout_s: int, directory: Path | None = None) -> Path:
    """An executable that hardens the configuration and runs ``binary``, in a new private directory."""
    where = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="runtime-lite-haproxy-"))
    path = where / "haproxy"
    path.write_text(
        _WRAPPER.format(
            python=sys.executable,
            marker=MARKER,
            binary=binary,
            timeout_s=int(timeout_s),
            source=inspect.getsource(harden_config),
        )
    )
    os.chmod(path, 0o700)
    return path
