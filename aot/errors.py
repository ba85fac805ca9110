"""Compiler errors. Each message is a single line naming the culprit (op, node, input, path)."""

from __future__ import annotations


class AotError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits non-zero."""


class ModelError(AotError):
    """The model file cannot be read or is malformed."""


class UnsupportedOpsError(AotError):
    """The model uses ops the compiler cannot lower; the message lists all of them."""


class ShapeError(AotError):
    """Shapes or dtypes do not fit an op."""


class BuildError(AotError):
    """Anything else that stops a build: bad options, unwritable output."""
