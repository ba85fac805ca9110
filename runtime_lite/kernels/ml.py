"""Tree ensembles: ONNX ``ai.onnx.ml`` TreeEnsembleClassifier and TreeEnsembleRegressor, on numpy.

Why kernels of their own: no canonical op walks a tree, and a forest spelled out as
gathers and selects would be thousands of nodes. The rest of scikit-learn's ONNX ops
(scalers, linear models, the label lookup) are canonical ops (aot/frontend/onnx/ml_converters.py).

How (the ensemble as the frontend lays it out, aot/ir/ml_ops.py): rows in blocks, and per
block every tree at once, as a ``[rows, trees]`` matrix of node indices that takes exactly
``depth`` steps; each step gathers every slot's feature value and threshold, compares, and
picks the next node. A leaf points at itself, so a row that reaches its leaf early stays
there. No Python loop runs over rows or nodes, only over the ``depth`` steps (and blocks).
The leaves' weights are then added with ``np.add.at``, which adds in index order: for each
row and class, tree after tree in the model's order, each leaf's weights in the model's
order, in the thresholds' float type. That is the order onnxruntime adds them in, so a tie
between two classes (a random forest's votes) breaks the same way.

Where onnxruntime and ONNX's reference evaluator disagree, these follow onnxruntime (the
engine users compare with, and the one ``--target onnxruntime`` hands the rest of the
graph to): a NaN feature goes to the true branch where its node's
``missing_value_tracks_true`` says so, else wherever its comparison sends it (BRANCH_NEQ:
true); a class without any weight on a row's path is left out of its argmax unless
``base_values`` gives every class one; and two-class models keep onnxruntime's rules for
the second score column (``_two_classes``).
"""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.registry import kernel

#: Branch modes by the number ``modes`` holds (aot/ir/ml_ops.py NODE_MODES), LEAF last.
NODE_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
LEAF = len(NODE_MODES) - 1
#: Whether a node of each mode takes its true branch, by ``(x <= t) + 2 * (x >= t)``: 0 when x is NaN,
#: 1 below, 2 above, 3 equal. NaN compares false, so only BRANCH_NEQ sends it to the true branch.
MODE_TRUTH = np.array(
    [[0, 1, 0, 1], [0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], bool
)
COMPARE = {
    "BRANCH_LEQ": np.less_equal, "BRANCH_LT": np.less, "BRANCH_GTE": np.greater_equal,
    "BRANCH_GT": np.greater, "BRANCH_EQ": np.equal, "BRANCH_NEQ": np.not_equal,
}  # fmt: skip
POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
#: (row, tree) slots walked at once, and (row, tree, weight) entries added at once: a few MB of temporaries.
BLOCK = 1 << 16
#: Bytes of temporaries per walked slot: the node index, its next candidates and the pick (int64), the
#: feature index, the value and threshold (float64 at most), the comparisons.
WALK_BYTES = 6 * 8 + 2 * 8 + 4
#: Bytes per added weight: its target and flat index (int64), the weight (float64 at most), the mask.
ADD_BYTES = 3 * 8 + 2


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_trees(attrs: dict) -> None:
    if not _is_int(attrs["depth"]) or not 0 <= attrs["depth"] <= 1 << 20:
        raise ValueError(f"attribute depth must be an integer in [0, 2**20], got {attrs['depth']!r}")
    if attrs["mode"] not in (*COMPARE, "MIXED"):
        raise ValueError(f"attribute mode must be a branch mode or MIXED, got {attrs['mode']!r}")
    if attrs["tracks_missing"] not in (0, 1):
        raise ValueError(f"attribute tracks_missing must be 0 or 1, got {attrs['tracks_missing']!r}")
    base = attrs["base_values"]
    if not isinstance(base, (list, tuple)) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in base):  # fmt: skip
        raise ValueError(f"attribute base_values must be a list of numbers, got {base!r}")


def _check_classifier(attrs: dict) -> None:
    _check_trees(attrs)
    labels = attrs["class_labels"]
    if not isinstance(labels, (list, tuple)) or len(labels) < 2 or not all(_is_int(v) for v in labels):
        raise ValueError(f"attribute class_labels must be a list of at least 2 integers, got {labels!r}")
    if attrs["post_transform"] not in POST_TRANSFORMS:
        raise ValueError(f"attribute post_transform must be one of {POST_TRANSFORMS}, got {attrs['post_transform']!r}")
    for name in ("binary", "positive_weights"):
        if attrs[name] not in (0, 1):
            raise ValueError(f"attribute {name} must be 0 or 1, got {attrs[name]!r}")
    if len(attrs["base_values"]) not in ((0, 1, 2) if len(labels) == 2 else (0, len(labels))):
        raise ValueError(f"attribute base_values has {len(attrs['base_values'])} values for {len(labels)} classes")


def _check_regressor(attrs: dict) -> None:
    _check_trees(attrs)
    if not _is_int(attrs["n_targets"]) or attrs["n_targets"] < 1:
        raise ValueError(f"attribute n_targets must be a positive integer, got {attrs['n_targets']!r}")
    if attrs["aggregate"] not in AGGREGATES:
        raise ValueError(f"attribute aggregate must be one of {AGGREGATES}, got {attrs['aggregate']!r}")
    if len(attrs["base_values"]) not in (0, attrs["n_targets"]):
        raise ValueError(f"attribute base_values has {len(attrs['base_values'])} values for "
                         f"{attrs['n_targets']} targets")  # fmt: skip


def _features(x: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """x as [rows, features]; integers compared as the thresholds' float type (onnxruntime's conversion)."""
    if x.ndim not in (1, 2):
        raise ValueError(f"tree ensemble: x must be [N, features] or [features], got shape {list(x.shape)}")
    if x.dtype.kind not in "fiu":
        raise ValueError(f"tree ensemble: x of {x.dtype} (numbers are compared with the thresholds)")
    x = x.reshape(1, -1) if x.ndim == 1 else x
    return x if x.dtype.kind == "f" else x.astype(thresholds.dtype)


def _check_tables(features, thresholds, modes, missing, true_next, false_next, roots, targets, weights, depth, width):
    nodes = features.shape[:1]
    for name, a in (("thresholds", thresholds), ("modes", modes), ("missing", missing), ("true_next", true_next),
                    ("false_next", false_next)):  # fmt: skip
        if a.shape != nodes or features.ndim != 1:
            raise ValueError(f"tree ensemble: {name} {list(a.shape)} is not one entry per node {list(nodes)}")
    if thresholds.dtype.kind != "f" or weights.dtype != thresholds.dtype:
        raise ValueError(f"tree ensemble: thresholds {thresholds.dtype} and weights {weights.dtype} must share a "
                         "float type")  # fmt: skip
    if targets.ndim != 2 or weights.shape != targets.shape or roots.ndim != 1:
        raise ValueError(f"tree ensemble: leaf tables {list(targets.shape)} and {list(weights.shape)}, roots "
                         f"{list(roots.shape)}")  # fmt: skip
    if depth > max(len(features), 1):
        raise ValueError(f"tree ensemble: depth {depth} is more than the {len(features)} nodes")
    if targets.size and (targets.min() < 0 or targets.max() >= width):
        raise ValueError(f"tree ensemble: leaf_targets outside [0, {width})")


def _walk(x, features, thresholds, modes, missing, true_next, false_next, roots, depth, mode, tracks_missing):
    """The leaf each row of ``x`` reaches in each tree: ``[rows, trees]`` node indices, ``depth`` steps."""
    node = np.broadcast_to(roots, (len(x), len(roots)))
    compare = COMPARE.get(mode)
    flat, row_start = x.reshape(-1), (np.arange(len(x), dtype=np.int64) * x.shape[1])[:, None]
    for _ in range(depth):
        value = flat.take(row_start + features.take(node))  # np.take: faster than fancy indexing
        limit = thresholds.take(node)
        if compare is not None:
            go = compare(value, limit)
        else:
            code = (value <= limit).view(np.uint8) + 2 * (value >= limit).view(np.uint8)
            go = MODE_TRUTH[modes.take(node), code]
        if tracks_missing:
            go |= np.isnan(value) & missing.take(node)
        node = np.where(go, true_next.take(node), false_next.take(node))
    return node


def _add(node, targets, weights, width, ufunc, start):
    """Each row's leaves' weights combined per target by ``ufunc`` (add, minimum, maximum), in the model's order,
    and which targets any weight reached: ``[rows, width]`` each, the last column the padding's."""
    rows, trees = node.shape
    acc = np.full(rows * width, start, weights.dtype)
    reached = np.zeros(rows * width, bool)
    offsets = (np.arange(rows, dtype=np.int64) * width)[:, None, None]
    step = max(1, BLOCK // max(rows * targets.shape[1], 1))
    for first in range(0, trees, step):  # a block of trees at a time, in order: the order of the additions holds
        leaves = node[:, first : first + step]
        flat = (targets[leaves] + offsets).ravel()
        ufunc.at(acc, flat, weights[leaves].ravel())
        reached[flat] = True
    return acc.reshape(rows, width), reached.reshape(rows, width)


def _blocks(x, features, thresholds, modes, missing, true_next, false_next, roots, targets, weights, depth, mode,
            tracks_missing, width):  # fmt: skip
    """(first row, leaves) per block of rows, the tables checked once."""
    _check_tables(features, thresholds, modes, missing, true_next, false_next, roots, targets, weights, depth, width)
    x = _features(x, thresholds)
    if features.size and (features.min() < 0 or features.max() >= x.shape[1]):  # a flat index would read another row
        raise ValueError(f"tree ensemble: a node reads a feature outside the input's {x.shape[1]}")
    step = _block_rows(len(roots), targets.shape[1])
    for first in range(0, len(x), step):
        yield first, _walk(x[first : first + step], features, thresholds, modes, missing, true_next, false_next,
                           roots, depth, mode, tracks_missing)  # fmt: skip


def _logistic(s: np.ndarray) -> np.ndarray:
    """onnxruntime's ComputeLogistic: 1 / (1 + exp(-|s|)), mirrored below 0."""
    v = 1 / (1 + np.exp(-np.abs(s)))
    return np.where(s < 0, 1 - v, v)


def _transform(scores: np.ndarray, post_transform: str) -> np.ndarray:
    """ONNX's post transforms over each row of scores (SOFTMAX_ZERO: values within 1e-7 of 0 stay near 0)."""
    if post_transform == "LOGISTIC":
        return _logistic(scores)
    if post_transform in ("SOFTMAX", "SOFTMAX_ZERO"):
        top = scores.max(axis=1, keepdims=True)
        if post_transform == "SOFTMAX":
            e = np.exp(scores - top)
            return e / e.sum(axis=1, keepdims=True)
        kept = np.abs(scores) > 1e-7
        e = np.where(kept, np.exp(scores - top), scores * np.exp(-top))
        return e / np.where(kept, e, 0).sum(axis=1, keepdims=True)
    return scores


def _two_classes(acc, reached, labels, post_transform, base, binary, positive_weights):
    """Labels and the two score columns, as onnxruntime writes them (TreeAggregatorClassifier, write_scores).

    A one-class-id model (``binary``: the weights are for one class, the positive one) has one score per row,
    ``s``: its label is positive above 0.5 (all weights positive) or 0, and its columns are ``[1 - s, s]``, or
    with mixed weights ``[-s, s]`` (LOGISTIC: ``[logistic(-s), logistic(s)]``). With weights for both classes a
    row whose path weighs the second class keeps both scores, transformed, and is labelled 1 where that score is
    positive, else 0 (onnxruntime's literal labels).
    """
    s0, s1, h0, h1 = acc[:, 0], acc[:, 1], reached[:, 0], reached[:, 1]
    second = np.ones(len(acc), bool)  # onnxruntime keeps both predictions
    extra = np.full(len(acc), -1)  # its write_additional_scores: how one score becomes two columns
    if len(base) == 2:
        s0, s1 = np.where(h1, -(base[1] + s0), s0 + base[0]), np.where(h1, base[1] + s0, s1 + base[1])
    elif len(base) == 1:
        s0, second = s0 + base[0], h1
    else:
        extra[:], second = 3, h1
    positive = np.where(second & h1, s1, np.where(h0, s0, 0))
    if binary:
        win = positive > 0.5 if positive_weights else positive > 0
        extra = np.where(win, 0, 1) if positive_weights else np.where(win, 2, 3)
        label = np.where(win, labels[1], labels[0])
    else:
        label = (positive > 0).astype(np.int64)
    both = _transform(np.stack([s0, s1], axis=1), post_transform)
    if post_transform == "LOGISTIC":
        mixed = np.stack([_logistic(-s0), _logistic(s0)], axis=1)
    else:
        mixed = np.stack([-s0, s0], axis=1)
    one = np.where((extra <= 1)[:, None], np.stack([1 - s0, s0], axis=1), mixed)
    one = np.where((extra < 0)[:, None], np.stack([s0, np.zeros_like(s0)], axis=1), one)
    return label, np.where(second[:, None], both, one)


def _classify(acc, reached, labels, post_transform, base, binary, positive_weights):
    """A block's labels and scores from its summed weights."""
    if len(labels) == 2:
        return _two_classes(acc, reached, labels, post_transform, base, binary, positive_weights)
    if len(base):
        acc, reached = acc + base, np.ones_like(reached)
    pick = np.where(reached, acc, -np.inf).argmax(axis=1)  # the first of the classes a weight reached
    return labels[pick], _transform(acc, post_transform)


def _block_rows(trees: int, per_leaf: int) -> int:
    """Rows walked at once: BLOCK (row, tree) slots, and no more than BLOCK weights of one tree's leaves."""
    return max(1, BLOCK // max(trees, per_leaf, 1))


def _sizes(x, roots, targets) -> tuple[int, int, int]:
    """Rows in all, rows per block, and the walk's and the additions' temporaries for one block, in bytes."""
    rows = (x.shape[0] if x.ndim == 2 else 1) if x.ndim else 0
    trees = roots.shape[0] if roots.ndim else 0
    per_leaf = targets.shape[1] if targets.ndim == 2 else 0
    block = min(rows, _block_rows(trees, per_leaf))
    added = min(block * trees * per_leaf, max(BLOCK, block * per_leaf))  # a block of trees at a time (_add)
    converted = x.size * 8 if x.dtype.kind != "f" else 0
    return rows, block, block * trees * WALK_BYTES + added * ADD_BYTES + converted


def _classifier_cost(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                     leaf_weights, *, class_labels, **_) -> int:  # fmt: skip
    rows, block, scratch = _sizes(x, roots, leaf_targets)
    classes = len(class_labels) if isinstance(class_labels, (list, tuple)) else 0
    outputs = rows * 8 + nbytes((rows, classes), 4)
    return outputs + scratch + block * (classes + 1) * 8 * 14  # the sums, the mask, the transform's temporaries


@kernel("tree_ensemble_classifier", check=_check_classifier, cost=_classifier_cost, outputs=2)
def tree_ensemble_classifier(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                             leaf_weights, *, depth, mode, tracks_missing, class_labels, post_transform, base_values,
                             binary, positive_weights):  # fmt: skip
    """ONNX TreeEnsembleClassifier: int64 labels [N] and float32 scores [N, classes], leaf weights summed."""
    labels = np.asarray(class_labels, np.int64)
    base = np.asarray(base_values, leaf_weights.dtype)
    rows = len(x) if x.ndim == 2 else 1
    out_labels, out_scores = np.empty(rows, np.int64), np.empty((rows, len(labels)), np.float32)
    for first, node in _blocks(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                               leaf_weights, depth, mode, tracks_missing, len(labels) + 1):  # fmt: skip
        acc, reached = _add(node, leaf_targets, leaf_weights, len(labels) + 1, np.add, 0)
        label, scores = _classify(acc[:, :-1], reached[:, :-1], labels, post_transform, base, binary, positive_weights)
        out_labels[first : first + len(node)], out_scores[first : first + len(node)] = label, scores
    return out_labels, out_scores


def _regressor_cost(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                    leaf_weights, *, n_targets, **_) -> int:  # fmt: skip
    rows, block, scratch = _sizes(x, roots, leaf_targets)
    targets = n_targets if isinstance(n_targets, int) else 0
    return nbytes((rows, targets), 4) + scratch + block * (targets + 1) * 8 * 5


@kernel("tree_ensemble_regressor", check=_check_regressor, cost=_regressor_cost)
def tree_ensemble_regressor(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                            leaf_weights, *, depth, mode, tracks_missing, n_targets, aggregate, base_values):  # fmt: skip
    """ONNX TreeEnsembleRegressor: float32 [N, n_targets], the leaves' weights aggregated (SUM, AVERAGE over the
    trees, MIN, MAX), plus ``base_values``. As onnxruntime computes it: with several targets, one that no weight on
    the row's path reached is 0, base value or not; with one target it is the base value (the frontend keeps only
    each leaf's first weight then, the one onnxruntime reads)."""
    ufunc, start = {"MIN": (np.minimum, np.inf), "MAX": (np.maximum, -np.inf)}.get(aggregate, (np.add, 0))
    base = np.asarray(base_values, leaf_weights.dtype)
    rows = len(x) if x.ndim == 2 else 1
    out = np.empty((rows, n_targets), np.float32)
    for first, node in _blocks(x, features, thresholds, modes, missing, true_next, false_next, roots, leaf_targets,
                               leaf_weights, depth, mode, tracks_missing, n_targets + 1):  # fmt: skip
        acc, reached = _add(node, leaf_targets, leaf_weights, n_targets + 1, ufunc, start)
        acc, reached = acc[:, :-1], reached[:, :-1]
        if aggregate == "AVERAGE":
            acc = acc / len(roots)
        elif aggregate in ("MIN", "MAX"):
            acc = np.where(reached, acc, 0)
        acc = acc + base if len(base) else acc
        out[first : first + len(node)] = acc if n_targets == 1 else np.where(reached, acc, 0)
    return out
