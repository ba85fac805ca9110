"""Dynamic batching along a bundle's symbolic batch dim: requests in, one run, rows back out.

A bundle can be batched when every input and every output has the same symbolic
dim first (``N`` in ``x: float32[N,3,224,224]``) and that symbol appears nowhere
else: then requests of 1..k rows can be concatenated along it and the outputs cut
back at the same row offsets. Requests that differ in their other dims (two
sequence lengths, say) run as separate groups of the same batch. Whether rows are
truly independent is the model's promise, as for every batching server (Triton,
TorchServe): a model that mixes rows across the batch dim must not be served batched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from runtime_lite.format.signature import TensorSpec


@dataclass(frozen=True)
class BatchAxis:
    """The symbol to batch along, or None and the reason the bundle cannot be batched."""

    symbol: str | None
    reason: str

    @property
    def enabled(self) -> bool:
        return self.symbol is not None


def batch_axis(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> BatchAxis:
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
    return BatchAxis(symbol, f"along '{symbol}'")


Run = Callable[[list[np.ndarray]], list[np.ndarray]]


def run_batched(run: Run, requests: Sequence[list[np.ndarray]]) -> list[list[np.ndarray] | BaseException]:
    """Each request's outputs (or the exception its group raised), in request order.

    A failure is kept to the group it happened in, so one request the model cannot
    run never fails the requests that merely shared its batch.
    """
    groups: dict[tuple, list[int]] = {}
    for i, arrays in enumerate(requests):
        groups.setdefault(tuple(a.shape[1:] for a in arrays), []).append(i)
    results: list[list[np.ndarray] | BaseException] = [[] for _ in requests]
    for members in groups.values():
        try:
            if len(members) == 1:
                results[members[0]] = run(requests[members[0]])
                continue
            stacked = [np.concatenate(parts) for parts in zip(*(requests[i] for i in members))]
            outputs = run(stacked)
        except Exception as e:  # noqa: BLE001 - handed back to each request of the group
            for i in members:
                results[i] = e
            continue
        bounds = np.cumsum([len(requests[i][0]) for i in members])[:-1]
        per_output = [np.split(output, bounds) for output in outputs]
        for k, i in enumerate(members):
            results[i] = [parts[k] for parts in per_output]
    return results


def rows(arrays: Sequence[np.ndarray]) -> int:
    return len(arrays[0]) if arrays and arrays[0].ndim else 1
