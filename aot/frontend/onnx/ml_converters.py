"""Classic-ML ops (``ai.onnx.ml``), as skl2onnx writes them for scikit-learn pipelines.

Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor, LinearRegressor and
LinearClassifier are a few canonical ops each (arithmetic, ``dense``, ``argmax``,
``gather``), so every target takes them as it takes the rest of the graph: with
``--target onnxruntime`` a StandardScaler -> PCA -> MLPClassifier pipeline is one region,
label lookup included. TreeEnsembleClassifier and TreeEnsembleRegressor become one op
each, whose node tables are laid out here as constant tensors (aot/ir/ml_ops.py); only the
host kernel walks them (runtime_lite/kernels/ml.py), so they run on the host plan whatever
the target, beside the regions around them.

Where onnxruntime and ONNX's reference evaluator disagree, these follow onnxruntime, the
engine users compare with (each converter says where). Inputs are [N, C] or [C] (one row),
as onnxruntime reads them (Binarizer, elementwise, takes any shape); the ops that output float
compute in float32, as it does.

Not a tensor of numbers, so refused in one line naming the node: string class labels
(``classlabels_strings``) and ZipMap (a sequence of maps, skl2onnx's default
``output_probability``), each with what to convert instead (:data:`REFUSED`).
"""

from __future__ import annotations

import numpy as np

from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import converter, single
from aot.ir.graph import Value
from aot.ir.ml_ops import AGGREGATES, NODE_MODES, POST_TRANSFORMS

DOMAIN = "ai.onnx.ml"
#: What to do instead, for what cannot be a tensor of numbers.
ZIPMAP_HINT = (
    "ZipMap makes a sequence of maps ({label: probability} per row), which is not a tensor; convert with "
    "skl2onnx's options={id(model): {'zipmap': False}} to output the probabilities as a float tensor"
)
STRING_LABELS_HINT = (
    "string class labels (classlabels_strings) are not a tensor of numbers; fit the model on integer labels "
    "(sklearn.preprocessing.LabelEncoder) so the converter writes classlabels_int64s"
)
#: The ai.onnx.ml ops converted: (what each becomes, its limits). docs/coverage.md prints this table.
CONVERTED = {
    "ArrayFeatureExtractor": ("`gather` on the last axis", "int64 indices"),
    "Binarizer": ("`greater`, `cast`", "NaN gives 0 (onnxruntime refuses it); integers, which onnxruntime does "
                  "not take, compare as float32"),
    "Imputer": ("`isnan` or `equal`, `where`", "float32 with imputed_value_floats, int64 with imputed_value_int64s"),
    "LinearClassifier": ("`dense`, `argmax`, `gather` of the labels, the post transform",
                         "classlabels_ints; post_transform NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO"),
    "LinearRegressor": ("`dense`", "post_transform NONE"),
    "Normalizer": ("a reduction, `divide`", "MAX, L1, L2"),
    "Scaler": ("`subtract`, `multiply`", "offset and scale both given, one value or one per feature"),
    "TreeEnsembleClassifier": ("`tree_ensemble_classifier` (host plan)", "classlabels_int64s, 2 or more; "
                               "post_transform NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO; each tree's nodes listed together"),
    "TreeEnsembleRegressor": ("`tree_ensemble_regressor` (host plan)", "post_transform NONE; each tree's nodes "
                              "listed together"),
}  # fmt: skip
#: Refused with what to do instead (the other ai.onnx.ml ops, the SVMs and encoders among them, are not converted).
REFUSED = {"ZipMap": ZIPMAP_HINT}
FLOAT_INPUTS = ("float32", "float64", "int32", "int64")


def _rows(ctx: NodeContext, x: Value, dtypes: tuple[str, ...] = FLOAT_INPUTS, any_rank: bool = False) -> Value:
    """x checked to be [N, C] or [C] of ``dtypes`` (what onnxruntime's ML kernels read; ``any_rank``: an elementwise
    op's input, of any shape)."""
    if not any_rank and x.type.rank not in (1, 2):
        raise ctx.unsupported(f"input {x.type}: [N, features] or [features] is supported")
    if x.type.dtype not in dtypes:
        raise ctx.unsupported(f"input of {x.type.dtype} ({', '.join(dtypes)} are supported)")
    return x


def _float32(ctx: NodeContext, x: Value) -> Value:
    """x in float32, as onnxruntime computes these ops (its output is tensor(float) whatever the input)."""
    return x if x.type.dtype == "float32" else ctx.emit("cast", x, to="float32")


def _matrix(ctx: NodeContext, x: Value) -> Value:
    """A [features] input as one row [1, features]."""
    return ctx.emit("reshape", x, shape=[1, -1]) if x.type.rank == 1 else x


def _floats(ctx: NodeContext, name: str) -> list[float]:
    value = ctx.attr(name)
    return [] if value is None else [float(v) for v in np.asarray(value).reshape(-1)]


def _per_feature(ctx: NodeContext, x: Value, name: str, values: list) -> np.ndarray:
    """An attribute with one value, or one per feature (x's last dim where known)."""
    features = x.type.shape[-1]
    if not values or (len(values) != 1 and isinstance(features, int) and len(values) != features):
        raise ctx.error(f"attribute {name} has {len(values)} values for {features} features (1 or {features})")
    return np.asarray(values)


def _post_transform(ctx: NodeContext, allowed: tuple[str, ...]) -> str:
    transform = ctx.attr("post_transform", "NONE")
    if transform not in allowed:
        known = transform in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
        why = "is not supported" if known else "is not an ONNX post_transform"
        raise ctx.unsupported(f"post_transform {transform!r} {why} ({', '.join(allowed)} are)")
    return transform


def _class_labels(ctx: NodeContext, name: str) -> list[int]:
    if ctx.attr("classlabels_strings"):
        raise ctx.unsupported(STRING_LABELS_HINT)
    labels = ctx.attr(name)
    if not labels:
        raise ctx.error(f"attribute {name} is missing (the class labels)")
    return [int(v) for v in labels]


@converter(*(f"{DOMAIN}.{op}" for op in REFUSED))
def _refused(ctx: NodeContext) -> list[Value]:
    raise ctx.unsupported(REFUSED[ctx.node.op_type])


# -- preprocessing ------------------------------------------------------------------------


@converter(f"{DOMAIN}.Scaler")
@single
def _scaler(ctx: NodeContext) -> Value:
    """(x - offset) * scale in float32; onnxruntime refuses a Scaler without both, or with lengths that differ."""
    x = _float32(ctx, _rows(ctx, ctx.inputs[0]))
    offset, scale = _floats(ctx, "offset"), _floats(ctx, "scale")
    if len(offset) != len(scale):
        raise ctx.error(f"attributes offset ({len(offset)} values) and scale ({len(scale)}) differ in length")
    offset, scale = _per_feature(ctx, x, "offset", offset), _per_feature(ctx, x, "scale", scale)
    shifted = ctx.emit("subtract", x, ctx.constant(offset, "float32"))
    return ctx.emit("multiply", shifted, ctx.constant(scale, "float32"))


@converter(f"{DOMAIN}.Normalizer")
@single
def _normalizer(ctx: NodeContext) -> Value:
    """Each row divided by its MAX (the signed maximum, NaN skipped: onnxruntime's), L1 or L2 norm; a row whose
    norm is 0 is kept as it is."""
    x = _float32(ctx, _rows(ctx, ctx.inputs[0]))
    norm, axes = ctx.attr("norm", "MAX"), [x.type.rank - 1]
    if norm == "MAX":
        skipped = ctx.emit("where", ctx.emit("isnan", x), ctx.constant(np.float32(-np.inf)), x)
        size = ctx.emit("reduce_max", skipped, axes=axes, keepdims=1)
    elif norm == "L1":
        size = ctx.emit("reduce_sum", ctx.emit("abs", x), axes=axes, keepdims=1)
    elif norm == "L2":
        size = ctx.emit("sqrt", ctx.emit("reduce_sum", ctx.emit("multiply", x, x), axes=axes, keepdims=1))
    else:
        raise ctx.unsupported(f"norm {norm!r} (MAX, L1 and L2 are the ONNX norms)")
    zero = ctx.emit("equal", size, ctx.constant(np.float32(0)))
    return ctx.emit("divide", x, ctx.emit("where", zero, ctx.constant(np.float32(1)), size))


@converter(f"{DOMAIN}.Binarizer")
@single
def _binarizer(ctx: NodeContext) -> Value:
    """1 where x > threshold, else 0, in x's type and shape; integers compare as float32 (onnxruntime implements
    float inputs only)."""
    x = _rows(ctx, ctx.inputs[0], any_rank=True)
    threshold = float(ctx.attr("threshold", 0.0))
    compared = x if x.type.dtype.startswith("float") else _float32(ctx, x)
    above = ctx.emit("greater", compared, ctx.constant(np.asarray(threshold, compared.type.dtype)))
    return ctx.emit("cast", above, to=x.type.dtype)


@converter(f"{DOMAIN}.Imputer")
@single
def _imputer(ctx: NodeContext) -> Value:
    """x with each replaced value (NaN when replaced_value_float is NaN) set to the feature's imputed value."""
    x = _rows(ctx, ctx.inputs[0], ("float32", "int64"))
    kind = "floats" if x.type.dtype == "float32" else "int64s"
    values = ctx.attr(f"imputed_value_{kind}")
    if not values:
        raise ctx.unsupported(f"a {x.type.dtype} input needs imputed_value_{kind}")
    values = _per_feature(ctx, x, f"imputed_value_{kind}", list(values)).astype(x.type.dtype)
    replaced = ctx.attr("replaced_value_float" if kind == "floats" else "replaced_value_int64", 0)
    if kind == "floats" and np.isnan(replaced):
        missing = ctx.emit("isnan", x)
    else:
        missing = ctx.emit("equal", x, ctx.constant(np.asarray(replaced, x.type.dtype)))
    return ctx.emit("where", missing, ctx.constant(values), x)


@converter(f"{DOMAIN}.ArrayFeatureExtractor")
@single
def _array_feature_extractor(ctx: NodeContext) -> Value:
    """x[..., indices] for every index, flattened: [..., len(indices)], and [1, len] for a 1-d x (onnxruntime's
    shapes). skl2onnx looks a classifier's labels up this way (``classes[argmax]``)."""
    x, indices = ctx.inputs[:2]
    if x.type.rank < 1:
        raise ctx.unsupported(f"input {x.type}: a scalar has no features to extract")
    if indices.type.dtype != "int64":
        raise ctx.unsupported(f"indices of {indices.type.dtype} (int64 is the ONNX type)")
    flat = indices if indices.type.rank == 1 else ctx.emit("reshape", indices, shape=[-1])
    picked = ctx.emit("gather", x, flat, axis=x.type.rank - 1)
    return ctx.emit("reshape", picked, shape=[1, -1]) if x.type.rank == 1 else picked


# -- linear models ----------------------------------------------------------------------


def _linear(ctx: NodeContext, rows: int | None) -> tuple[Value, Value]:
    """x as float32 [N, F] and its scores x @ coefficients.T + intercepts, [N, rows]; ``rows`` from the
    intercepts (onnxruntime's count) or, without them, from x's feature count."""
    x = _matrix(ctx, _float32(ctx, _rows(ctx, ctx.inputs[0])))
    coefficients = np.asarray(_floats(ctx, "coefficients"), np.float32)
    intercepts = _floats(ctx, "intercepts")
    features = x.type.shape[-1]
    if rows is None and isinstance(features, int) and features:
        rows = len(coefficients) // features
    if not rows or not coefficients.size or len(coefficients) % rows:
        raise ctx.error(f"attribute coefficients has {coefficients.size} values, not a row per target of "
                        f"{features} features")  # fmt: skip
    if isinstance(features, int) and len(coefficients) != rows * features:
        raise ctx.error(f"attribute coefficients has {coefficients.size} values for {rows} rows of {features} features")
    if intercepts and len(intercepts) != rows:
        raise ctx.error(f"attribute intercepts has {len(intercepts)} values for {rows} rows")
    weight = ctx.constant(coefficients.reshape(rows, -1))
    bias = [ctx.constant(np.asarray(intercepts, np.float32))] if intercepts else []
    return x, ctx.emit("dense", x, weight, *bias)


def _positive(ctx: NodeContext, name: str) -> int:
    """A count attribute (``targets``, ``n_targets``: 1 where absent), refused unless at least 1."""
    count = int(ctx.attr(name, 1))
    if count < 1:
        raise ctx.error(f"attribute {name} is {count}")
    return count


@converter(f"{DOMAIN}.LinearRegressor")
@single
def _linear_regressor(ctx: NodeContext) -> Value:
    """x @ coefficients.T + intercepts, [N, targets] float32."""
    _post_transform(ctx, ("NONE",))
    targets = _positive(ctx, "targets")
    return _linear(ctx, targets)[1]


@converter(f"{DOMAIN}.LinearClassifier")
def _linear_classifier(ctx: NodeContext) -> list[Value]:
    """Labels (int64 [N]) from the raw scores' argmax, then the post-transformed scores [N, classes].

    One coefficient row for two classes is onnxruntime's: label ``classlabels_ints[1]`` where the score is above
    0 and columns ``[1 - p, p]``, p the logistic of the score with LOGISTIC and the score itself otherwise
    (ONNX's reference writes ``[-s, s]`` and then transforms).
    """
    labels = _class_labels(ctx, "classlabels_ints")
    transform = _post_transform(ctx, POST_TRANSFORMS)
    intercepts = _floats(ctx, "intercepts")
    _, scores = _linear(ctx, len(intercepts) or None)
    rows = scores.type.shape[-1]
    if rows == 1:
        if len(labels) != 2:
            raise ctx.error(f"one coefficient row needs 2 class labels, got {len(labels)}")
        score = ctx.emit("reshape", scores, shape=[-1])
        label = ctx.emit("where", ctx.emit("greater", score, ctx.constant(np.float32(0))),
                         ctx.constant(np.int64(labels[1])), ctx.constant(np.int64(labels[0])))  # fmt: skip
        p = ctx.emit("sigmoid", scores) if transform == "LOGISTIC" else scores
        return [label, ctx.emit("concat", ctx.emit("subtract", ctx.constant(np.float32(1)), p), p, axis=1)]
    if rows != len(labels):
        raise ctx.error(f"{rows} coefficient rows for {len(labels)} class labels")
    best = ctx.emit("argmax", scores, axis=1, keepdims=0, select_last_index=0)
    label = ctx.emit("gather", ctx.constant(np.asarray(labels, np.int64)), best, axis=0)
    return [label, _transformed(ctx, scores, transform)]


def _transformed(ctx: NodeContext, scores: Value, transform: str) -> Value:
    """ONNX's post transforms over [N, classes]; SOFTMAX_ZERO leaves scores within 1e-7 of 0 out of the sum."""
    if transform == "LOGISTIC":
        return ctx.emit("sigmoid", scores)
    if transform == "SOFTMAX":
        return ctx.emit("softmax", scores, axis=1)
    if transform == "SOFTMAX_ZERO":
        top = ctx.emit("reduce_max", scores, axes=[1], keepdims=1)
        kept = ctx.emit("greater", ctx.emit("abs", scores), ctx.constant(np.float32(1e-7)))
        e = ctx.emit("where", kept, ctx.emit("exp", ctx.emit("subtract", scores, top)),
                     ctx.emit("multiply", scores, ctx.emit("exp", ctx.emit("negative", top))))  # fmt: skip
        total = ctx.emit("reduce_sum", ctx.emit("where", kept, e, ctx.constant(np.float32(0))), axes=[1], keepdims=1)
        return ctx.emit("divide", e, total)
    return scores


# -- tree ensembles -------------------------------------------------------------------------


def _ints(ctx: NodeContext, name: str) -> np.ndarray:
    return np.asarray(ctx.attr(name) or [], np.int64).reshape(-1)


def _values(ctx: NodeContext, name: str) -> np.ndarray:
    """A float list attribute, or its ``*_as_tensor`` twin (float64 where the model says so)."""
    tensor = ctx.attr(f"{name}_as_tensor")
    if tensor is not None:
        if tensor.dtype.kind != "f":
            raise ctx.unsupported(f"attribute {name}_as_tensor of {tensor.dtype}")
        return np.asarray(tensor).reshape(-1)
    return np.asarray(ctx.attr(name) or [], np.float32).reshape(-1)


def _same_length(ctx: NodeContext, arrays: dict[str, np.ndarray]) -> int:
    (first, n), *rest = ((name, len(a)) for name, a in arrays.items())
    for name, length in rest:
        if length != n:
            raise ctx.error(f"attribute {name} has {length} entries, {first} {n}")
    return n


def _ensemble(
    ctx: NodeContext, prefix: str, outputs: int, first_only: bool = False
) -> tuple[list[Value], dict, np.ndarray, np.ndarray]:
    """The node tables as constant tensors (aot/ir/ml_ops.py), their attributes, and the weights' targets and
    values as the model lists them (for the caller's checks). ``first_only``: each leaf's first weight only."""
    x = _rows(ctx, ctx.inputs[0])
    trees, ids = _ints(ctx, "nodes_treeids"), _ints(ctx, "nodes_nodeids")
    modes_text = [m for m in (ctx.attr("nodes_modes") or [])]
    thresholds = _values(ctx, "nodes_values")
    per_node = {"nodes_treeids": trees, "nodes_nodeids": ids, "nodes_featureids": _ints(ctx, "nodes_featureids"),
                "nodes_modes": np.asarray(modes_text, object), "nodes_values": thresholds,
                "nodes_truenodeids": _ints(ctx, "nodes_truenodeids"),
                "nodes_falsenodeids": _ints(ctx, "nodes_falsenodeids")}  # fmt: skip
    missing = _ints(ctx, "nodes_missing_value_tracks_true")
    if len(missing):
        per_node["nodes_missing_value_tracks_true"] = missing
    count = _same_length(ctx, per_node)
    if not count:
        raise ctx.error("the ensemble has no nodes (nodes_treeids is empty)")
    unknown = sorted(set(modes_text) - set(NODE_MODES))
    if unknown:
        raise ctx.unsupported(f"nodes_modes {unknown[0]!r} ({', '.join(NODE_MODES)} are supported)")
    modes = np.asarray([NODE_MODES.index(m) for m in modes_text], np.int8)
    leaf = modes == NODE_MODES.index("LEAF")
    features = np.where(leaf, 0, per_node["nodes_featureids"])
    width = x.type.shape[-1]
    if features.min() < 0 or (isinstance(width, int) and features.max() >= width):
        bad = int(features.min() if features.min() < 0 else features.max())
        raise ctx.error(f"attribute nodes_featureids names feature {bad} of an input with {width} features")

    index = _Index(ctx, trees, ids)
    roots = _roots(ctx, trees)
    true_next = np.where(leaf, np.arange(count), index.find(trees, per_node["nodes_truenodeids"], leaf,
                                                         "nodes_truenodeids"))  # fmt: skip
    false_next = np.where(leaf, np.arange(count), index.find(trees, per_node["nodes_falsenodeids"], leaf,
                                                          "nodes_falsenodeids"))  # fmt: skip
    depth = _depth(ctx, roots, true_next, false_next, leaf)

    # leaves first: the leaf tables are indexed by node
    order = np.concatenate([np.flatnonzero(leaf), np.flatnonzero(~leaf)])
    renumber = np.empty(count, np.int64)
    renumber[order] = np.arange(count)
    targets, weights = _ints(ctx, f"{prefix}_ids"), _values(ctx, f"{prefix}_weights")
    entries = _same_length(ctx, {f"{prefix}_ids": targets, f"{prefix}_nodeids": _ints(ctx, f"{prefix}_nodeids"),
                                 f"{prefix}_treeids": _ints(ctx, f"{prefix}_treeids"),
                                 f"{prefix}_weights": weights})  # fmt: skip
    if targets.size and (targets.min() < 0 or targets.max() >= outputs):
        raise ctx.error(f"attribute {prefix}_ids holds {int(targets.max())}, past the {outputs} "
                        f"{'classes' if prefix == 'class' else 'targets'}")  # fmt: skip
    owner = index.find(_ints(ctx, f"{prefix}_treeids"), _ints(ctx, f"{prefix}_nodeids"),
                    np.zeros(entries, bool), f"{prefix}_nodeids")  # fmt: skip
    on_leaf = leaf[owner] if entries else np.zeros(0, bool)  # onnxruntime never reads weights on a branch
    if first_only:  # one target: onnxruntime adds each leaf's first weight only
        on_leaf &= ~_seen_before(owner)
    owner, kept_targets, kept_weights = renumber[owner[on_leaf]], targets[on_leaf], weights[on_leaf]
    leaves = int(leaf.sum())
    by_leaf = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=leaves)
    slots = max(int(counts.max()) if counts.size else 0, 1)
    slot = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
    dtype = thresholds.dtype if thresholds.dtype == np.float64 else weights.dtype
    leaf_targets = np.full((leaves, slots), outputs, np.int64)
    leaf_weights = np.zeros((leaves, slots), dtype)
    leaf_targets[owner[by_leaf], slot] = kept_targets[by_leaf]
    leaf_weights[owner[by_leaf], slot] = kept_weights[by_leaf]

    small = np.int32  # node and target numbers (a protobuf attribute holds far fewer than 2**31): half the bytes
    tables = [
        features[order].astype(small), thresholds[order].astype(dtype), modes[order],
        (missing[order] == 1) if len(missing) else np.zeros(count, bool), renumber[true_next[order]].astype(small),
        renumber[false_next[order]].astype(small), renumber[roots].astype(small), leaf_targets.astype(small),
        leaf_weights,
    ]  # fmt: skip
    branch_modes = set(modes[~leaf].tolist())
    attrs = {
        "depth": depth,
        "mode": NODE_MODES[branch_modes.pop()] if len(branch_modes) == 1 else ("MIXED" if branch_modes else "BRANCH_LEQ"),
        "tracks_missing": int(bool(len(missing)) and bool((missing[~leaf] == 1).any())),
    }  # fmt: skip
    names = ("features", "thresholds", "modes", "missing", "true_next", "false_next", "roots", "leaf_targets",
             "leaf_weights")  # fmt: skip
    values = [ctx.graph.constant(t, name=f"{ctx.name}_{n}") for t, n in zip(tables, names)]
    return [x, *values], attrs, targets, weights


class _Index:
    """Node ids by (tree, id): one int64 key each, sorted, so a batch of references is one searchsorted."""

    def __init__(self, ctx: NodeContext, trees: np.ndarray, ids: np.ndarray):
        self.ctx = ctx
        if trees.min() < 0 or ids.min() < 0:
            raise ctx.error("attributes nodes_treeids and nodes_nodeids must not be negative")
        self.span = int(ids.max()) + 1
        if int(trees.max()) >= (1 << 62) // self.span:
            raise ctx.unsupported(f"tree ids up to {int(trees.max())} with node ids up to {self.span - 1}")
        keys = trees * self.span + ids
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]
        repeated = np.flatnonzero(self.keys[1:] == self.keys[:-1])
        if repeated.size:
            i = int(self.order[repeated[0]])
            raise ctx.error(f"node {ids[i]} of tree {trees[i]} is listed twice (nodes_treeids, nodes_nodeids)")

    def find(self, trees: np.ndarray, ids: np.ndarray, skip: np.ndarray, name: str) -> np.ndarray:
        """The node index of each (tree, id) not skipped; an id the tree lacks is an error naming ``name``."""
        outside = (ids < 0) | (ids >= self.span) | (trees < 0) | (trees >= (1 << 62) // self.span)
        keys = np.where(outside, -1, np.where(outside, 0, trees) * self.span + np.where(outside, 0, ids))
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        missing = ~skip & (outside | (self.keys[at] != keys))
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise self.ctx.error(f"attribute {name} names node {ids[i]} of tree {trees[i]}, which nodes_nodeids lacks")
        return self.order[at]


def _seen_before(owner: np.ndarray) -> np.ndarray:
    """Whether an earlier entry has the same owner."""
    seen = np.zeros(len(owner), bool)
    if len(owner):
        _, first = np.unique(owner, return_index=True)
        seen[:] = True
        seen[first] = False
    return seen


def _roots(ctx: NodeContext, trees: np.ndarray) -> np.ndarray:
    """Each tree's first node (onnxruntime's root), trees in the model's order; a tree's nodes must be together."""
    starts = np.flatnonzero(np.concatenate([[True], trees[1:] != trees[:-1]]))
    if len(set(trees[starts].tolist())) != len(starts):
        tree = next(t for t in trees[starts].tolist() if (trees[starts] == t).sum() > 1)
        raise ctx.unsupported(f"the nodes of tree {tree} are not listed together (nodes_treeids)")
    return starts.astype(np.int64)


def _depth(ctx: NodeContext, roots, true_next, false_next, leaf) -> int:
    """The longest root-to-leaf path; a branch that loops back (or to itself) is an error."""
    frontier, depth = roots, 0
    while True:
        frontier = frontier[~leaf[frontier]]
        if not frontier.size:
            return depth
        depth += 1
        if depth > len(leaf):
            raise ctx.error("a tree loops back on itself (nodes_truenodeids / nodes_falsenodeids)")
        frontier = np.unique(np.concatenate([true_next[frontier], false_next[frontier]]))


@converter(f"{DOMAIN}.TreeEnsembleClassifier")
def _tree_ensemble_classifier(ctx: NodeContext) -> list[Value]:
    """Labels (int64 [N]) and scores (float32 [N, classes]): the leaves' class weights summed over the trees,
    plus base_values, post-transformed (runtime_lite/kernels/ml.py: onnxruntime's rules for two classes)."""
    labels = _class_labels(ctx, "classlabels_int64s")
    if len(labels) < 2:
        raise ctx.unsupported(f"{len(labels)} class label (2 or more are supported)")
    transform = _post_transform(ctx, POST_TRANSFORMS)
    inputs, attrs, targets, weights = _ensemble(ctx, "class", len(labels))
    base = _values(ctx, "base_values")
    if len(base) not in ((0, 1, 2) if len(labels) == 2 else (0, len(labels))):
        raise ctx.error(f"attribute base_values has {len(base)} values for {len(labels)} classes")
    return ctx.emit_node(
        "tree_ensemble_classifier", inputs, **attrs, class_labels=labels, post_transform=transform,
        base_values=[float(v) for v in base], binary=int(len(labels) == 2 and len(set(targets.tolist())) == 1),
        positive_weights=int(bool((weights >= 0).all())),
    )  # fmt: skip


@converter(f"{DOMAIN}.TreeEnsembleRegressor")
@single
def _tree_ensemble_regressor(ctx: NodeContext) -> Value:
    """Float32 [N, n_targets]: the leaves' target weights aggregated over the trees, plus base_values."""
    _post_transform(ctx, ("NONE",))
    n_targets = _positive(ctx, "n_targets")
    aggregate = ctx.attr("aggregate_function", "SUM")
    if aggregate not in AGGREGATES:
        raise ctx.unsupported(f"aggregate_function {aggregate!r} ({', '.join(AGGREGATES)} are the ONNX ones)")
    inputs, attrs, _, _ = _ensemble(ctx, "target", n_targets, first_only=n_targets == 1)
    base = _values(ctx, "base_values")
    if len(base) not in (0, n_targets):
        raise ctx.error(f"attribute base_values has {len(base)} values for {n_targets} targets")
    return ctx.emit("tree_ensemble_regressor", *inputs, **attrs, n_targets=n_targets, aggregate=aggregate,
                    base_values=[float(v) for v in base])  # fmt: skip
