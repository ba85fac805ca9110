"""Canonical ops for classic-ML tree ensembles (ONNX ``ai.onnx.ml`` TreeEnsembleClassifier / Regressor).

The other ``ai.onnx.ml`` ops skl2onnx writes (Scaler, Normalizer, Binarizer, Imputer,
ArrayFeatureExtractor, LinearClassifier, LinearRegressor) are a few canonical ops each
(aot/frontend/onnx/ml_converters.py). A tree ensemble is not: walking thousands of
trees needs a kernel of its own, ``runtime_lite/kernels/ml.py``.

Both ops read the ensemble from constant tensors the frontend lays out once (one entry
per node, leaves first), not from attributes: a forest is megabytes, which belong in the
bundle's checksummed, mapped weight blobs rather than its msgpack header.

``x [N, F]`` (or ``[F]``, one row), then per node: ``features`` (int32, as every index here;
int64 works too), ``thresholds`` (float32, or float64 from the ``*_as_tensor`` attributes),
``modes`` int8 (0..5: BRANCH_LEQ, LT, GTE, GT, EQ, NEQ; 6: LEAF), ``missing`` bool (a NaN
takes the true branch), ``true_next`` / ``false_next`` (a leaf points at itself); ``roots``
(one per tree, in the model's order); per leaf ``leaf_targets`` ``[leaves, K]``
(class or target index; ``K`` the most weights any leaf has, padded with the index
one past the last) and ``leaf_weights`` ``[leaves, K]`` (0 in the padding).

Attributes: ``depth`` (the longest root-to-leaf path: the kernel takes exactly that many
steps), ``mode`` (the one comparison every branch makes, or ``MIXED`` to read ``modes``),
``tracks_missing`` (whether any node sends NaN to its true branch).
"""

from __future__ import annotations

from aot.ir.ops import REQUIRED, InferContext, register_op
from aot.ir.types import TensorType

#: Node comparison modes in the order ``modes`` numbers them; LEAF last.
NODE_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
#: ONNX's post transforms the classifier computes (PROBIT, an approximate inverse erf, is refused).
POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
INPUTS = "x features thresholds modes missing true_next false_next roots leaf_targets leaf_weights"
X_DTYPES = ("float32", "float64", "int32", "int64")


def _rows(ctx: InferContext, op: str) -> tuple:
    """The ensemble tensors' agreement, and the number of rows ``x`` holds."""
    x, features, thresholds, modes, missing, true_next, false_next, roots, targets, weights = ctx.types
    if x.rank not in (1, 2) or x.dtype not in X_DTYPES:
        raise ctx.fail(op, f"expects x as [N, features] or [features] of {', '.join(X_DTYPES)}, got {x}")
    per_node = {"features": features, "thresholds": thresholds, "modes": modes, "missing": missing,
                "true_next": true_next, "false_next": false_next}  # fmt: skip
    nodes = features.shape[0] if features.rank == 1 else None
    for name, t in per_node.items():
        if t.rank != 1 or t.shape[0] != nodes:
            raise ctx.fail(op, f"{name} must be one entry per node like features {features}, got {t}")
    if targets.rank != 2 or weights.shape != targets.shape or roots.rank != 1:
        raise ctx.fail(op, f"leaf_targets {targets} and leaf_weights {weights} must be [leaves, K], roots 1-d")
    if thresholds.dtype not in ("float32", "float64") or weights.dtype != thresholds.dtype:
        raise ctx.fail(op, f"thresholds and leaf_weights must share float32 or float64, got {thresholds}, {weights}")
    if ctx.attrs["mode"] not in (*NODE_MODES[:-1], "MIXED"):
        raise ctx.fail(op, f"mode {ctx.attrs['mode']!r} is not a branch mode or MIXED")
    return x.shape[0] if x.rank == 2 else 1


def _classifier(ctx: InferContext) -> list[TensorType]:
    n = _rows(ctx, "tree_ensemble_classifier")
    a = ctx.attrs
    classes = len(a["class_labels"])
    if classes < 2:
        raise ctx.fail("tree_ensemble_classifier", f"needs at least 2 class labels, got {classes}")
    if a["post_transform"] not in POST_TRANSFORMS:
        raise ctx.fail("tree_ensemble_classifier", f"post_transform {a['post_transform']!r} not in {POST_TRANSFORMS}")
    return [TensorType((n,), "int64"), TensorType((n, classes), "float32")]


def _regressor(ctx: InferContext) -> list[TensorType]:
    n = _rows(ctx, "tree_ensemble_regressor")
    a = ctx.attrs
    if a["aggregate"] not in AGGREGATES:
        raise ctx.fail("tree_ensemble_regressor", f"aggregate {a['aggregate']!r} not in {AGGREGATES}")
    if not isinstance(a["n_targets"], int) or a["n_targets"] < 1:
        raise ctx.fail("tree_ensemble_regressor", f"n_targets must be a positive integer, got {a['n_targets']!r}")
    return [TensorType((n, a["n_targets"]), "float32")]


_TREES = {"depth": REQUIRED, "mode": REQUIRED, "tracks_missing": 0}
register_op(
    "tree_ensemble_classifier", INPUTS, _classifier, **_TREES,
    class_labels=REQUIRED, post_transform="NONE", base_values=(), binary=0, positive_weights=1,
)  # fmt: skip
register_op("tree_ensemble_regressor", INPUTS, _regressor, **_TREES, n_targets=1, aggregate="SUM", base_values=())
