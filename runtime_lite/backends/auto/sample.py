"""How big a timing sample's symbolic dims must be for the region's own recipe to take it.

A region cut out of a model can take inputs whose symbolic dims are tied to fixed sizes inside it: ddddocr's
recognizer handed its LSTM an initial state ``[?a, ?b, ?c]`` made by host ops, which the LSTM needs at
``[2, 1, 512]`` (its directions, its input's batch, its ``hidden_size``); a sample with every such dim at 1 or
224 runs on no engine, and ``auto`` could not time it. So before a sample is made, the dims the recipe ties
together are found from what the recipe check followed (``RecipeFacts``: the nodes, the shapes from the
declared inputs, each region input's dims named as the signature names them): a dim that must equal a fixed
size takes it, dims that must be equal take one size. Only what a node states outright is read (a recurrent
layer's state and weights, a broadcast against a fixed dim, a matrix product's inner dims, a convolution's
channels, a concatenation's other axes), through the ops that keep their input's shape; anything else is left
to the working sizes, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime_lite.backends.onnxruntime.shapes import BROADCAST, SAME_SHAPE
from runtime_lite.format.signature import TensorSpec

RECURRENT = ("LSTM", "GRU", "RNN", "com.microsoft.DynamicQuantizeLSTM")
#: A sample dim is symbolic (its name) or fixed; None where the recipe check could not follow it.
Dim = Any


class Ties:
    """Union-find over symbolic dim names, each class maybe bound to one fixed size."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.size: dict[str, int] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def equal(self, a: Dim, b: Dim) -> None:
        """``a`` and ``b`` must be the same size (a name, an int, or None: unknown, nothing learnt)."""
        if a is None or b is None or isinstance(a, int) and isinstance(b, int):
            return
        if isinstance(a, int):
            a, b = b, a
        root = self.find(a)
        if isinstance(b, int):
            if b >= 1:
                self.size.setdefault(root, b)
            return
        other = self.find(b)
        if other != root:
            self.parent[other] = root
            if other in self.size:
                self.size.setdefault(root, self.size.pop(other))

    def bound(self, name: str) -> int | None:
        return self.size.get(self.find(name))


def _broadcast(ties: Ties, shapes: Sequence[tuple]) -> None:
    rank = max(len(s) for s in shapes)
    for axis in range(1, rank + 1):
        dims = [s[-axis] for s in shapes if len(s) >= axis]
        fixed = [d for d in dims if isinstance(d, int) and d != 1]
        names = [d for d in dims if isinstance(d, str)]
        for name in names:  # a name against a fixed size other than 1 is that size (1 would broadcast too)
            if fixed:
                ties.equal(name, fixed[0])
        if not fixed and len(names) == len(dims) and len(names) > 1:  # all symbolic: equal is what runs for sure
            for name in names[1:]:
                ties.equal(names[0], name)


def tie_dims(facts: Any, specs: Sequence[TensorSpec]) -> Ties:
    """The ties among ``specs``' symbolic dims that ``facts`` (the recipe check's) states."""
    ties = Ties()
    declared = list(facts.inputs)
    if len(declared) != len(specs):
        return ties
    shapes: dict[str, tuple] = dict(facts.shapes)
    for name, spec in zip(declared, specs):
        shape = facts.inputs.get(name)
        if shape is None or len(shape) != len(spec.shape):
            return Ties()  # not the signature's recipe: nothing to tie
        shapes[name] = tuple(spec.shape)
    for node in facts.nodes:
        ins = [shapes.get(name) if name else None for name in node.inputs]
        op, a = node.op_type, node.attrs
        x = ins[0] if ins else None
        try:
            if op in SAME_SHAPE and x is not None and node.outputs and node.outputs[0]:
                shapes[node.outputs[0]] = x
            elif op == "Transpose" and x is not None and node.outputs:
                perm = a.get("perm", list(reversed(range(len(x)))))
                shapes[node.outputs[0]] = tuple(x[p] for p in perm)
            elif op in BROADCAST and all(s is not None for s in ins) and ins:
                _broadcast(ties, ins)
            elif op in RECURRENT and x is not None and len(x) == 3:
                hidden = a.get("hidden_size")
                dirs = 2 if a.get("direction") == "bidirectional" else 1
                w = ins[1] if len(ins) > 1 else None
                if w is not None and len(w) == 3:
                    ties.equal(x[2], w[2])
                for state in ins[5:7] if op == "LSTM" or op.endswith("LSTM") else ins[5:6]:
                    if state is not None and len(state) == 3:
                        ties.equal(state[0], dirs)
                        ties.equal(state[1], x[1])
                        ties.equal(state[2], hidden if isinstance(hidden, int) else None)
            elif op in ("MatMul", "MatMulInteger") and len(ins) > 1 and all(s is not None and len(s) >= 2
                                                                             for s in ins[:2]):  # fmt: skip
                ties.equal(ins[0][-1], ins[1][-2])
                _broadcast(ties, [ins[0][:-2], ins[1][:-2]] if len(ins[0]) > 2 and len(ins[1]) > 2 else [()])
            elif op == "Gemm" and len(ins) > 1 and all(s is not None and len(s) == 2 for s in ins[:2]):
                ties.equal(ins[0][0 if a.get("transA") else 1], ins[1][1 if a.get("transB") else 0])
            elif op == "Conv" and len(ins) > 1 and x is not None and ins[1] is not None and len(x) > 1:
                w = ins[1]
                group = a.get("group", 1)
                ties.equal(x[1], w[1] * group if isinstance(w[1], int) and isinstance(group, int) else None)
            elif op == "Concat" and all(s is not None for s in ins) and len({len(s) for s in ins}) == 1:
                axis = a.get("axis", 0) % len(x)
                for s in ins[1:]:
                    for i, (p, q) in enumerate(zip(x, s)):
                        if i != axis:
                            ties.equal(p, q)
        except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
            continue  # a node of a form this reading does not know: nothing learnt from it
    return ties


def tied_shapes(specs: Sequence[TensorSpec], sizes: tuple[int, int], ties: Ties | None,
                within: Any, dims: Mapping) -> list[tuple[int, ...]]:  # fmt: skip
    """Each input's sample shape: a tied dim at its bound size, else its class at ``sizes`` (the leading axis where
    any of the class is a leading axis, the others) within the bundle's bounds (``within``)."""
    ties = ties or Ties()
    leading: set[str] = set()
    for spec in specs:
        if spec.shape and isinstance(spec.shape[0], str):
            leading.add(ties.find(spec.shape[0]))
    chosen: dict[str, int] = {}
    out = []
    for spec in specs:
        shape = []
        for d in spec.shape:
            if isinstance(d, int):
                shape.append(d)
                continue
            root = ties.find(d)
            if root not in chosen:
                bound = ties.bound(d)
                chosen[root] = bound if bound is not None else within(d, sizes[root not in leading], dims)
            shape.append(chosen[root])
        out.append(tuple(shape))
    return out


__all__ = ["Ties", "tie_dims", "tied_shapes"]
