"""Dynamic batching along a bundle's symbolic batch dim: requests in, one run, rows back out.

A bundle can be batched when every input and every output has the same symbolic
dim first (``N`` in ``x: float32[N,3,224,224]``) and that symbol appears nowhere
else: then requests of 1..k rows can be concatenated along it and the outputs cut
back at the same row offsets. Requests that differ in their other dims (two
sequence lengths, say) run as separate groups of the same batch. Whether rows are
truly independent is the model's promise, as for every batching server (Triton,
TorchServe): a model that mixes rows across the batch dim must not be served batched.

A bundle built with bounds on that dim (``--input x:1..4x3x32x32``) refuses a run
outside them, so a batch never holds more rows than the declared maximum, and a
request's answer never depends on what it was batched with: a request outside the
bounds runs alone (its own refusal), and a merged run that fails is run again
request by request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_lite.format.signature import DimSpec, TensorSpec


@dataclass(frozen=True)
class BatchAxis:
    """The symbol to batch along, or None and the reason the bundle cannot be batched.

    ``min_rows`` and ``max_rows`` are the bounds the bundle declares for that dim (None: undeclared).
    """

    symbol: str | None
    reason: str
    min_rows: int | None = None
    max_rows: int | None = None

    @property
    def enabled(self) -> bool:
        return self.symbol is not None

    def limit(self, asked: int) -> int:
        """Rows a batch may hold: ``asked`` (``--max-batch-size``), within the bundle's maximum of the dim.

        A batch past the maximum is refused whole by the module's bound check, which
        would answer 400 to every request in it, each valid alone.
        """
        return asked if self.max_rows is None else min(asked, self.max_rows)

    def fits(self, rows: int) -> bool:
        """Whether a request of ``rows`` rows is within the bundle's bounds on its own."""
        return (self.min_rows is None or rows >= self.min_rows) and (self.max_rows is None or rows <= self.max_rows)

    def merges(self, asked: int) -> bool:
        """Whether two requests the bundle accepts alone can ever share one batch of ``limit(asked)`` rows."""
        return self.enabled and 2 * max(self.min_rows or 0, 1) <= self.limit(asked)

    def note(self, asked: int) -> str:
        """Whether batching is on, and why, for the metadata and the replica log."""
        if not self.enabled:
            return f"off: {self.reason}"
        if asked <= 1:
            return "off (max batch size 1)"
        rows = self.limit(asked)
        if not self.merges(asked):
            return f"off: {self._bounds()} leaves no room for two requests in a batch of {rows} rows"
        capped = f" ({self._bounds()} caps --max-batch-size {asked})" if rows < asked else ""
        return f"on, up to {rows} rows {self.reason}{capped}"

    def _bounds(self) -> str:
        high = "" if self.max_rows is None else self.max_rows
        return f"the bundle's '{self.symbol}' in {self.min_rows or 0}..{high}"


def batch_axis(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], dims: Mapping[str, DimSpec] | None = None
) -> BatchAxis:
    """The dim requests can be concatenated along, with its declared bounds from ``dims`` (a Module's ``dims``)."""
    first = [spec.shape[0] if spec.shape else None for spec in (*inputs, *outputs)]
    symbol = first[0] if first else None
    if not isinstance(symbol, str):
        where = inputs[0] if inputs else None
        return BatchAxis(None, f"input '{where.name}' has a fixed first dim {symbol}" if where else "no inputs")
    for spec in (*inputs, *outputs):
        if not spec.shape or spec.shape[0] != symbol:
            return BatchAxis(None, f"'{spec.name}' does not have the batch dim '{symbol}' first ({spec})")
        if symbol in spec.shape[1:]:
            return BatchAxis(None, f"'{spec.name}' uses '{symbol}' beyond its first dim ({spec})")
    declared = (dims or {}).get(symbol)
    if declared is None:
        return BatchAxis(symbol, f"along '{symbol}'")
    return BatchAxis(symbol, f"along '{symbol}'", declared.min, declared.max)


Run = Callable[[list[np.ndarray]], list[np.ndarray]]
Result = list[np.ndarray] | BaseException


def run_batched(
    run: Run, requests: Sequence[list[np.ndarray]], fits: Callable[[int], bool] | None = None
) -> list[Result]:
    """Each request's outputs (or the exception it raised), in request order.

    Requests are merged only with requests of the same trailing dims, and only when
    ``fits`` (the bundle's bounds, ``BatchAxis.fits``) accepts each alone: a request
    the bundle refuses gets that refusal, never an answer its neighbours made
    possible. A merged run that fails (one request's values the model cannot run on,
    or a batch over the run's memory budget) is run again request by request, so a
    failure is only ever the failing request's own.
    """
    results: list[Result] = [[] for _ in requests]
    for members in _groups(requests, fits):
        if len(members) == 1:
            results[members[0]] = _run_alone(run, requests[members[0]])
            continue
        try:
            outputs = run([np.concatenate(parts) for parts in zip(*(requests[i] for i in members))])
        except Exception:  # noqa: BLE001 - the merged run's failure is no request's answer: each runs alone
            for i in members:
                results[i] = _run_alone(run, requests[i])
            continue
        bounds = np.cumsum([len(requests[i][0]) for i in members])[:-1]
        per_output = [np.split(output, bounds) for output in outputs]
        for k, i in enumerate(members):
            results[i] = [parts[k] for parts in per_output]
    return results


def _groups(requests: Sequence[list[np.ndarray]], fits: Callable[[int], bool] | None) -> list[list[int]]:
    """Indices of the requests that may run merged (same trailing dims, each within bounds), and the rest alone."""
    groups: dict[tuple, list[int]] = {}
    alone: list[list[int]] = []
    for i, arrays in enumerate(requests):
        if fits is not None and not fits(rows(arrays)):
            alone.append([i])
        else:
            groups.setdefault(tuple(a.shape[1:] for a in arrays), []).append(i)
    return [*groups.values(), *alone]


def _run_alone(run: Run, arrays: list[np.ndarray]) -> Result:
    try:
        return run(arrays)
    except Exception as e:  # noqa: BLE001 - handed back to the request it belongs to
        return e


def rows(arrays: Sequence[np.ndarray]) -> int:
    return len(arrays[0]) if arrays and arrays[0].ndim else 1
