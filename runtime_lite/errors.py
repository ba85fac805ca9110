"""Exceptions raised by runtime_lite.

Every message is one line that names the culprit (the bundle field, the input, the
instruction), because these errors surface in production logs where a traceback
into numpy helps nobody. Messages often quote strings taken from a bundle (names,
payload keys), and a bundle may be hostile: the base class escapes every control
character and bounds the length, so no bundle can forge log lines or flood a log.
"""

from __future__ import annotations

import re
import reprlib

#: Longer messages are cut (with a marker): a hostile name must not flood a log.
MAX_MESSAGE_CHARS = 2000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with control characters escaped (``\\n`` -> ``\\\\n``) and cut to ``limit`` characters."""
    escaped = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    if len(escaped) > limit:
        escaped = escaped[: limit - 20] + f"... ({len(escaped) - limit + 20} more)"
    return escaped


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 3, 8, 8, 80, 80


def describe(value: object) -> str:
    """A short repr of a value taken from a bundle: bounded in length and depth, whatever its nesting."""
    return _SHORT.repr(value)


class RuntimeLiteError(Exception):
    """Base class of every error runtime_lite raises on purpose; its message is always one line."""

    def __init__(self, message: object = "", *args: object):
        super().__init__(one_line(str(message)), *args)


class BundleError(RuntimeLiteError, ValueError):
    """The bundle is not one this runtime can trust: bad magic, version, checksum or field."""


class InputError(RuntimeLiteError, ValueError):
    """The caller's inputs do not match the model signature."""


class ExecutionError(RuntimeLiteError, RuntimeError):
    """A kernel failed while running, or the run broke a limit; the message names the instruction."""


class OptionError(RuntimeLiteError, ValueError):
    """A backend option the caller gave is unknown to its backend or has a bad value."""


class PlacementError(RuntimeLiteError):
    """A backend module cannot run where the caller required (``load(..., require=...)``)."""


class IncompatiblePayload(Exception):
    """A backend cannot use this payload here (other hardware, other library version).

    Not a RuntimeLiteError: the module falls back to its host plan instead of failing the
    load. Backends raise it as ``runtime_lite.backends.IncompatiblePayload``; it lives here
    so that the format layer, which recognises a foreign payload tag, needs no backend.
    """
