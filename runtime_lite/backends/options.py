"""Backend options: declared once by the backend, given by a caller or a command line.

Both halves of a backend take options from outside: the compile half from
``aot-build --backend-option tensorrt.precision=fp16`` or
``build(backend_options=...)``, the run half from
``runtime_lite.load(..., backend_options={"tensorrt": {...}})`` or
``runtime-lite run --backend-option ...``. A backend declares what it accepts as
:class:`Option`\\ s; :func:`resolve_options` turns what the caller gave (strings
from a command line, Python values from code) into a complete dict, and refuses
an unknown name or a bad value with one line naming the backend and the option.
The generic code never needs to know any backend's option names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime_lite.errors import OptionError, describe


@dataclass(frozen=True)
class Option:
    """One option a backend accepts: its name, how to read it from text, its default and what it does."""

    name: str
    #: Turns the command line's text into the value (raise ValueError to refuse it).
    parse: Callable[[str], Any]
    #: The value when the caller gives none; a callable is called at resolve time (e.g. to read the environment).
    default: Any = None
    help: str = ""
    #: A command-line alias kept for convenience (``--precision``); with ``flag_value`` set it is a
    #: switch that sets that value (``--no-engines`` sets ``engines=never``).
    flag: str | None = None
    flag_value: Any = None
    #: What the switch does, for its own --help line (``help`` describes the option's values).
    flag_help: str = ""

    def default_value(self) -> Any:
        """The default as it stands now (a callable default is read at this moment)."""
        return self.default() if callable(self.default) else self.default

    def resolve(self, given: Any, owner: str) -> Any:
        """Text goes through ``parse``; a Python value through the parser's ``accepts`` check (see
        ``accepting``), so ``cache_dir=123`` or ``allow_engine_build=[1]`` is an OptionError here, never
        a confusing failure later. ``None`` means not given."""
        if given is _UNSET or given is None:
            return self.default_value()
        try:
            if isinstance(given, str):
                return self.parse(given)
            accepts = getattr(self.parse, "accepts", None)
            if accepts is None:
                raise ValueError(f"expected text, got {type(given).__name__}")
            return accepts(given)
        except (ValueError, TypeError) as e:
            raise OptionError(f"{owner} option {self.name}={describe(given)}: {e}") from None


_UNSET = object()


def resolve_options(owner: str, declared: Sequence[Option], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every declared option of ``owner`` (a backend name), from ``given`` or its default."""
    if given is not None and not isinstance(given, Mapping):
        raise OptionError(f"{owner} options must be a mapping of option names to values, got {type(given).__name__}")
    given = dict(given or {})
    if not all(isinstance(k, str) for k in given):
        raise OptionError(f"{owner} options must be named by strings")
    known = {option.name: option for option in declared}
    unknown = sorted(set(given) - set(known))
    if unknown:
        accepted = ", ".join(known) or "none"
        raise OptionError(f"{owner} has no option {unknown[0]!r} (its options: {accepted})")
    return {name: option.resolve(given.get(name, _UNSET), owner) for name, option in known.items()}


def split_assignments(assignments: Sequence[str], flag: str = "--backend-option") -> dict[str, dict[str, str]]:
    """``["tensorrt.precision=fp16", ...]`` -> ``{"tensorrt": {"precision": "fp16"}}``."""
    by_backend: dict[str, dict[str, str]] = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        backend, dot, name = key.strip().partition(".")
        if not sep or not dot or not backend or not name:
            raise OptionError(f"{flag} must look like BACKEND.NAME=VALUE, e.g. tensorrt.precision=fp16, got {text!r}")
        by_backend.setdefault(backend, {})[name] = value.strip()
    return by_backend


def accepting(check: Callable[[Any], Any]) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """Declare how a parser checks a value given in code rather than as text (``parse.accepts``).

    Every option's parser needs one to accept anything but text: ``check(value)`` returns
    the value to use or raises ValueError/TypeError saying what was expected.
    """

    def declare(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        parse.accepts = check  # type: ignore[attr-defined]
        return parse

    return declare


def _is_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {type(value).__name__}")
    return value


def _is_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


@accepting(_is_bool)
def boolean(text: str) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0``."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


@accepting(_is_int)
def integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def thread_count(default: str) -> Callable[[str], int]:
    """A ``threads`` option's parser: 0 (``default``, e.g. "onnxruntime's default") or more, as text or an int."""

    def accepts(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a thread count (0: {default}), got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"must be 0 ({default}) or more")
        return value

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected a thread count (0: {default})") from None
        return accepts(value)

    return accepting(accepts)(parse)


def choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return text

    def accepts(value: Any) -> str:
        raise ValueError(f"expected one of {', '.join(values)}, got {type(value).__name__}")

    return accepting(accepts)(parse)


def _is_path(value: Any) -> str:
    if not isinstance(value, os.PathLike):
        raise ValueError(f"expected a path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ValueError("expected a text path, got bytes")
    return path(text)


@accepting(_is_path)
def path(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a path")
    if "\0" in text:
        raise ValueError("a path cannot contain a NUL character")
    return os.path.expanduser(text.strip())


def env_flag(name: str, default: bool = False) -> Callable[[], bool]:
    """A default read from the environment when the options are resolved, not at import (unset: ``default``)."""

    def read() -> bool:
        text = os.environ.get(name, "").strip().lower()
        return default if not text else text in ("1", "true", "yes", "on")

    return read


def env_choice(name: str, values: Sequence[str]) -> Callable[[], str]:
    """A default read from the environment when the options are resolved (unset: the first of ``values``); a
    value not among ``values`` is an OptionError naming the variable."""

    def read() -> str:
        text = os.environ.get(name, "").strip().lower()
        if not text:
            return values[0]
        if text not in values:
            raise OptionError(f"environment variable {name}={text!r}: expected one of {', '.join(values)}")
        return text

    return read


__all__ = [
    "Option", "OptionError", "accepting", "boolean", "choice", "env_choice", "env_flag", "integer", "path",
    "resolve_options",
]  # fmt: skip
