"""Exceptions raised by runtime_lite.

Every message is one line that names the culprit (the bundle field, the input, the
instruction), because these errors surface in production logs where a traceback
into numpy helps nobody.
"""

from __future__ import annotations


class RuntimeLiteError(Exception):
    """Base class of every error runtime_lite raises on purpose."""


class BundleError(RuntimeLiteError, ValueError):
    """The bundle is not one this runtime can trust: bad magic, version, checksum or field."""


class InputError(RuntimeLiteError, ValueError):
    """The caller's inputs do not match the model signature."""


class ExecutionError(RuntimeLiteError, RuntimeError):
    """A kernel failed while running; the message names the instruction."""
