"""scikit-learn's ONNX ops (``ai.onnx.ml``, as skl2onnx writes them) through aot and runtime_lite.

Each op is checked against onnxruntime on models made with onnx.helper, the tree ensembles
on random forests whose shapes cover what the kernel must get right (mixed branch modes,
NaN routed by ``missing_value_tracks_true``, classes no leaf weighs, onnxruntime's two-class
rules); then real skl2onnx conversions of fitted pipelines, built for the host and for
onnxruntime, run by runtime_lite and compared with onnxruntime on the original file; then
what is refused (ZipMap, string labels, an unknown post_transform), each in one line.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from aot.errors import AotError
from aot.testing import relative_l2

ort = pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"
TARGETS = ("host", "onnxruntime")


def ml_model(nodes, inputs, outputs, initializers=(), ml_opset: int = 3) -> onnx.ModelProto:
    """A model of ``ai.onnx.ml`` nodes: inputs and outputs as (name, element type, shape)."""
    graph = helper.make_graph(
        nodes, "ml",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 8
    return model


def onnxruntime_run(model: onnx.ModelProto | bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on one thread: on several it splits a forest's trees between threads and merges their sums,
    an order of float additions that changes with the thread count (and so which class wins a tied vote)."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip([i.name for i in session.get_inputs()], feeds)))


def assert_matches(model, feeds: list[np.ndarray], targets=TARGETS, rtol: float = 1e-5) -> None:
    """Built for each target and run by runtime_lite: integers (labels) equal, floats within ``rtol`` relative L2."""
    expected = onnxruntime_run(model, feeds)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    for target in targets:
        result = aot.build(data, targets=[target], log=None)
        actual = runtime_lite.load(result.to_bytes()).run(feeds)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            assert got.shape == want.shape and got.dtype == want.dtype, (target, got.shape, want.shape, got.dtype)
            if want.dtype.kind in "iub":
                assert np.array_equal(got, want), (target, np.flatnonzero(got != want)[:10])
            else:
                assert np.array_equal(np.isnan(got), np.isnan(want)), target
                finite = ~np.isnan(want)
                assert relative_l2(got[finite], want[finite]) < rtol, (target, relative_l2(got[finite], want[finite]))


X = np.random.default_rng(0).standard_normal((64, 5)).astype(np.float32)
X[3] = 0  # a row of zeros: the norms' 0 case
X[5] = -np.abs(X[5])  # every value negative: Normalizer MAX divides by the signed maximum


def one_op(op: str, x: np.ndarray = X, out_type: int = TensorProto.FLOAT, **attrs) -> onnx.ModelProto:
    in_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["x"], ["y"], domain=ML, name=op.lower(), **attrs)
    return ml_model([node], [("x", in_type, ["N", x.shape[1]])], [("y", out_type, None)])


# -- one op each, against onnxruntime ------------------------------------------------------

PREPROCESSING = {
    "scaler_per_feature": (one_op("Scaler", offset=[0.5, -1, 0, 2, 3], scale=[2.0, 0.5, 1, -1, 4]), X),
    "scaler_one_value": (one_op("Scaler", offset=[0.25], scale=[3.0]), X),
    "scaler_int64": (one_op("Scaler", np.arange(10, dtype=np.int64).reshape(2, 5), offset=[1.0], scale=[0.5]),
                     np.arange(10, dtype=np.int64).reshape(2, 5)),
    "normalizer_max": (one_op("Normalizer", norm="MAX"), X),
    "normalizer_l1": (one_op("Normalizer", norm="L1"), X),
    "normalizer_l2": (one_op("Normalizer", norm="L2"), X),
    "binarizer": (one_op("Binarizer", threshold=0.3), X),
    "imputer_nan": (one_op("Imputer", imputed_value_floats=[9.0, 8, 7, 6, 5], replaced_value_float=float("nan")),
                    np.where(X > 1, np.nan, X).astype(np.float32)),
    "imputer_zero_one_value": (one_op("Imputer", imputed_value_floats=[-7.0]), np.where(X > 1, 0, X).astype(np.float32)),
    "imputer_int64": (one_op("Imputer", (X * 2).astype(np.int64), TensorProto.INT64, imputed_value_int64s=[42],
                             replaced_value_int64=-1), (X * 2).astype(np.int64)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PREPROCESSING))
def test_preprocessing_ops_match_onnxruntime(case):
    model, x = PREPROCESSING[case]
    assert_matches(model, [x])


def test_binarizer_takes_integers_which_onnxruntime_does_not():
    """ONNX types Binarizer for integers too (onnxruntime implements float only): compared as float32."""
    x = (X * 4).astype(np.int64)
    result = aot.build(one_op("Binarizer", x, TensorProto.INT64, threshold=0.5).SerializeToString(), log=None)
    assert np.array_equal(runtime_lite.load(result.to_bytes()).run([x])[0], (x > 0.5).astype(np.int64))


@pytest.mark.parametrize(
    "data_shape, indices",
    [((6, 5), [[0, 4, 2]]), ((6, 5), [3, 3, 0, 1]), ((5,), [[1], [4], [0]]), ((2, 3, 5), [[1, 2], [0, 4]])],
    ids=["rows_by_a_1xk_index", "repeats", "1d_data_as_skl2onnx_labels", "3d_data"],
)
def test_array_feature_extractor_matches_onnxruntime(data_shape, indices):
    """skl2onnx's label lookup is ``classes[argmax]``: 1-d data, indices [N, 1], a [1, N] result (onnxruntime's)."""
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML, name="afe")
    model = ml_model([node], [("x", TensorProto.FLOAT, data_shape), ("i", TensorProto.INT64, np.shape(indices))],
                     [("y", TensorProto.FLOAT, None)])  # fmt: skip
    data = np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape)
    assert_matches(model, [data, np.asarray(indices, np.int64)])


def linear(op: str, x_type: int = TensorProto.FLOAT, rank: int = 2, **attrs) -> onnx.ModelProto:
    outputs = ["y"] if op == "LinearRegressor" else ["label", "scores"]
    node = helper.make_node(op, ["x"], outputs, domain=ML, name=op.lower(), **attrs)
    types = [TensorProto.FLOAT] if op == "LinearRegressor" else [TensorProto.INT64, TensorProto.FLOAT]
    shape = ["N", 5] if rank == 2 else [5]
    return ml_model([node], [("x", x_type, shape)], [(n, t, None) for n, t in zip(outputs, types)])


COEFFICIENTS = np.random.default_rng(1).standard_normal(15).round(2).tolist()


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_linear_classifier_matches_onnxruntime(rows, transform):
    """Labels from the raw scores' argmax; one row for two classes: onnxruntime's [1 - p, p]."""
    labels = [3, 7, 11][: max(rows, 2)]
    model = linear("LinearClassifier", coefficients=COEFFICIENTS[: 5 * rows], intercepts=[0.5, -0.25, 0][:rows],
                   classlabels_ints=labels, post_transform=transform, multi_class=1)  # fmt: skip
    x = X.copy()
    x[7, :] = 0  # scores equal to the intercepts; with zero intercepts, SOFTMAX_ZERO's kept zeros
    assert_matches(model, [x])


@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor_matches_onnxruntime(targets):
    model = linear("LinearRegressor", coefficients=COEFFICIENTS[: 5 * targets], intercepts=[1.0, -2, 0.5][:targets],
                   targets=targets)  # fmt: skip
    assert_matches(model, [X])


def test_linear_models_take_integer_and_one_row_inputs():
    """onnxruntime casts integer inputs to float32 and reads a 1-d input as one row."""
    model = linear("LinearClassifier", TensorProto.INT64, coefficients=COEFFICIENTS[:10], intercepts=[0.5, -0.25],
                   classlabels_ints=[0, 1], post_transform="LOGISTIC")  # fmt: skip
    assert_matches(model, [(X * 3).astype(np.int64)])
    model = linear("LinearRegressor", rank=1, coefficients=COEFFICIENTS[:5], intercepts=[1.0])
    assert_matches(model, [X[0]])


# -- tree ensembles ------------------------------------------------------------------------------


def random_ensemble(seed: int, trees: int, features: int, outputs: int, modes=("BRANCH_LEQ",), missing=False,
                    weights_per_leaf=(1, 3), classes_used=None, max_depth: int = 5) -> dict:  # fmt: skip
    """TreeEnsemble attributes for random trees: node ids shuffled within each tree (the root listed first, as
    onnxruntime reads it), thresholds on a grid of halves (so BRANCH_EQ / NEQ meet values equal to them)."""
    rng = np.random.default_rng(seed)
    nodes = {k: [] for k in ("treeids", "nodeids", "featureids", "modes", "values", "truenodeids", "falsenodeids",
                             "missing_value_tracks_true")}  # fmt: skip
    weights = {"treeids": [], "nodeids": [], "ids": [], "weights": []}
    used = list(range(outputs)) if classes_used is None else list(classes_used)
    for tree in range(trees):
        rows: list[dict] = []

        def grow(depth: int, tree: int = tree, rows: list = rows) -> int:
            me = len(rows)
            row = {"id": me}
            rows.append(row)
            if depth == max_depth or (depth and rng.random() < 0.25):
                row.update(mode="LEAF", feature=0, value=0.0, true=0, false=0, missing=0)
                for _ in range(int(rng.integers(weights_per_leaf[0], weights_per_leaf[1] + 1))):
                    weights["treeids"].append(tree)
                    weights["nodeids"].append(me)
                    weights["ids"].append(int(rng.choice(used)))
                    weights["weights"].append(round(float(rng.normal()), 3))
                return me
            row.update(mode=str(rng.choice(modes)), feature=int(rng.integers(features)),
                       value=float(rng.integers(-4, 5) / 2), missing=int(missing and rng.random() < 0.5))  # fmt: skip
            row["true"], row["false"] = grow(depth + 1), grow(depth + 1)
            return me

        grow(0)
        ids = np.concatenate([[0], rng.permutation(np.arange(1, len(rows))) + 10]).tolist()  # root first, ids scattered
        rename = dict(enumerate(ids))
        for row in [rows[0], *rng.permutation(rows[1:])]:
            for key, value in (("treeids", tree), ("nodeids", rename[row["id"]]), ("featureids", row["feature"]),
                               ("modes", row["mode"]), ("values", row["value"]),
                               ("truenodeids", rename[row["true"]] if row["mode"] != "LEAF" else 0),
                               ("falsenodeids", rename[row["false"]] if row["mode"] != "LEAF" else 0),
                               ("missing_value_tracks_true", row["missing"])):  # fmt: skip
                nodes[key].append(value)
        first = len(weights["nodeids"]) - sum(1 for t in weights["treeids"] if t == tree)
        weights["nodeids"][first:] = [rename[n] for n in weights["nodeids"][first:]]
    return {"nodes": nodes, "weights": weights}


def tree_model(kind: str, ensemble: dict, features: int, x_type: int = TensorProto.FLOAT, **attrs) -> onnx.ModelProto:
    prefix = "class" if kind == "classifier" else "target"
    flat = {f"nodes_{k}": v for k, v in ensemble["nodes"].items()}
    flat.update({f"{prefix}_{k}": v for k, v in ensemble["weights"].items()})
    flat.update(attrs)
    if kind == "classifier":
        node = helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML, name="trees", **flat)
        outputs = [("label", TensorProto.INT64, None), ("scores", TensorProto.FLOAT, None)]
    else:
        node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, name="trees", **flat)
        outputs = [("y", TensorProto.FLOAT, None)]
    return ml_model([node], [("x", x_type, ["N", features])], outputs)


def tree_inputs(seed: int, rows: int = 200, features: int = 4, nans: bool = False) -> np.ndarray:
    """Values on the thresholds' grid of halves, and between: every comparison meets equality."""
    x = (np.random.default_rng(seed).integers(-10, 11, (rows, features)) / 4).astype(np.float32)
    if nans:
        x[np.random.default_rng(seed + 1).random(x.shape) < 0.2] = np.nan
    return x


MIXED = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
CLASSIFIERS = {
    # name: (classes, ensemble options, classifier attributes)
    "multiclass": (4, {}, {}),
    "multiclass_softmax_base": (4, {}, {"post_transform": "SOFTMAX", "base_values": [0.1, -0.2, 0.3, 0.0]}),
    "multiclass_unweighted_classes": (5, {"classes_used": [1, 3], "weights_per_leaf": (0, 2)}, {}),
    "multiclass_logistic_mixed_modes_nan": (3, {"modes": MIXED, "missing": True}, {"post_transform": "LOGISTIC"}),
    "multiclass_softmax_zero": (3, {"weights_per_leaf": (0, 2)}, {"post_transform": "SOFTMAX_ZERO"}),
    "two_ids": (2, {}, {}),
    "two_ids_logistic_base2": (
        2,
        {"weights_per_leaf": (0, 2)},
        {"post_transform": "LOGISTIC", "base_values": [0.25, 0.25]},
    ),
    "two_ids_base1": (2, {"weights_per_leaf": (0, 2)}, {"base_values": [0.5]}),
    "one_id_class0_mixed_weights": (2, {"classes_used": [0]}, {}),
    "one_id_class0_logistic_base1": (2, {"classes_used": [0]}, {"post_transform": "LOGISTIC", "base_values": [0.1]}),
    "one_id_class1_softmax": (2, {"classes_used": [1], "weights_per_leaf": (0, 1)}, {"post_transform": "SOFTMAX"}),
}


@pytest.mark.parametrize("case", sorted(CLASSIFIERS))
def test_random_tree_classifiers_match_onnxruntime(case):
    classes, options, attrs = CLASSIFIERS[case]
    nans = options.get("missing", False)
    ensemble = random_ensemble(sum(map(ord, case)), trees=7, features=4, outputs=classes, **options)
    model = tree_model("classifier", ensemble, 4, classlabels_int64s=[10 * k + 3 for k in range(classes)], **attrs)
    assert_matches(model, [tree_inputs(classes, nans=nans)])


def test_a_forest_of_positive_votes_matches_onnxruntime():
    """A random forest's shape: one class id, weights in [0, 1] (one vote each): onnxruntime's > 0.5 rule."""
    ensemble = random_ensemble(5, trees=9, features=4, outputs=2, classes_used=[0])
    ensemble["weights"]["weights"] = [abs(w) / 9 for w in ensemble["weights"]["weights"]]
    assert_matches(tree_model("classifier", ensemble, 4, classlabels_int64s=[0, 1]), [tree_inputs(1)])


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
def test_random_tree_regressors_match_onnxruntime(aggregate, targets):
    ensemble = random_ensemble(targets, trees=6, features=4, outputs=targets, modes=MIXED, missing=True,
                               weights_per_leaf=(1, 2))  # fmt: skip
    base = [0.5, -1.0, 2.0][:targets]
    model = tree_model("regressor", ensemble, 4, n_targets=targets, aggregate_function=aggregate, base_values=base)
    assert_matches(model, [tree_inputs(targets + 10, nans=True)])


def test_double_thresholds_and_integer_inputs():
    """ai.onnx.ml opset 3's ``*_as_tensor`` (float64 thresholds and weights); int64 features compared as floats."""
    ensemble = random_ensemble(3, trees=5, features=4, outputs=3)
    nodes, weights = ensemble["nodes"], ensemble["weights"]
    as_tensor = {  # thresholds a hair above the grid: float64 inputs on the grid fall below, float32 would not
        "nodes_values_as_tensor": numpy_helper.from_array(np.asarray(nodes.pop("values"), np.float64) + 1e-12),
        "class_weights_as_tensor": numpy_helper.from_array(np.asarray(weights.pop("weights"), np.float64)),
    }
    model = tree_model("classifier", ensemble, 4, TensorProto.DOUBLE, classlabels_int64s=[0, 1, 2],
                       post_transform="SOFTMAX", **as_tensor)  # fmt: skip
    assert_matches(model, [tree_inputs(4).astype(np.float64)])
    ensemble = random_ensemble(4, trees=5, features=4, outputs=3)
    model = tree_model("classifier", ensemble, 4, TensorProto.INT64, classlabels_int64s=[0, 1, 2])
    assert_matches(model, [np.random.default_rng(0).integers(-3, 4, (50, 4))])


def test_a_forest_walks_every_row_at_once_in_blocks():
    """More rows than one block holds (runtime_lite/kernels/ml.py BLOCK), and a one-row input ([features])."""
    from runtime_lite.kernels.ml import BLOCK

    ensemble = random_ensemble(8, trees=40, features=4, outputs=3, max_depth=8)
    model = tree_model("classifier", ensemble, 4, classlabels_int64s=[0, 1, 2])
    assert_matches(model, [tree_inputs(9, rows=BLOCK // 40 * 2 + 7)], targets=("host",))


# -- skl2onnx conversions of fitted scikit-learn models ------------------------------------------


@pytest.fixture(scope="module")
def sklearn():
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from sklearn import datasets

    digits = datasets.load_digits(return_X_y=True)
    diabetes = datasets.load_diabetes(return_X_y=True)
    return {
        "digits": (digits[0].astype(np.float32), digits[1]),
        "diabetes": (diabetes[0].astype(np.float32), diabetes[1]),
    }


def converted(model, x: np.ndarray, zipmap: bool = False) -> bytes:
    from skl2onnx import to_onnx

    options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") and not zipmap else None
    return to_onnx(model, x[:1], options=options, target_opset={"": 17, ML: 3}).SerializeToString()


def fitted(name: str, data: dict):
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    models = {
        "scaler_logistic_regression": ("digits", make_pipeline(StandardScaler(), LogisticRegression(max_iter=200))),
        "scaler_pca_mlp": ("digits", make_pipeline(StandardScaler(), PCA(32),
                                                   MLPClassifier((64, 32), max_iter=60, random_state=0))),
        "random_forest": ("digits", RandomForestClassifier(25, random_state=0)),
        "gradient_boosting_regressor": ("diabetes", GradientBoostingRegressor(n_estimators=60, random_state=0)),
    }  # fmt: skip
    dataset, model = models[name]
    x, y = data[dataset]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MLP stops before it converges: these tests need its numbers only
        model.fit(x[:1200], y[:1200])
    return model, x[1200:]


@pytest.mark.parametrize(
    "name", ["scaler_logistic_regression", "scaler_pca_mlp", "random_forest", "gradient_boosting_regressor"]
)
def test_sklearn_models_converted_by_skl2onnx_match_onnxruntime(sklearn, name):
    """Built for the host and for onnxruntime, loaded by runtime_lite, against onnxruntime on the original file:
    labels equal, probabilities (or predictions) within 1e-5 relative L2."""
    model, x = fitted(name, sklearn)
    data = converted(model, x)
    assert_matches(data, [x])
    result = aot.build(data, targets=["onnxruntime"], log=None)
    if name.startswith("scaler"):  # the linear models and the label lookup are canonical ops: nothing left on the host
        assert result.regions["host"] == 0 and result.regions["onnxruntime"] > 0, result.regions
    if name.startswith(("random", "gradient")):
        labels = runtime_lite.load(result.to_bytes()).run([x])[0]
        if name == "random_forest":
            assert np.array_equal(labels, model.predict(x))  # and scikit-learn's own labels


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "auto", "npu"])
def test_a_tree_ensemble_stays_on_the_host_beside_a_region(sklearn, target):
    """A scaler -> forest pipeline: the backend takes the scaler, the partitioner leaves the forest to the host
    plan (no backend pattern takes it), and the bundle still matches onnxruntime."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = sklearn["digits"]
    model = make_pipeline(StandardScaler(), RandomForestClassifier(5, max_depth=6, random_state=0)).fit(x, y)
    data = converted(model, x)
    result = aot.build(data, targets=[target], log=None)
    host_ops = {node.op for node in result.graph.nodes}
    assert "tree_ensemble_classifier" in host_ops, host_ops
    assert target == "npu" or "call_module" in host_ops, host_ops  # the NPU takes no lone scaler
    bundle = runtime_lite.load(result.to_bytes())
    expected = onnxruntime_run(data, [x[:50]])
    actual = bundle.run([x[:50]])
    assert np.array_equal(actual[0], expected[0])
    assert relative_l2(actual[1], expected[1]) < 1e-5


# -- refused in one line ----------------------------------------------------------------------------


def refusal(model) -> str:
    with pytest.raises(AotError) as info:
        aot.build(model if isinstance(model, bytes) else model.SerializeToString(), log=None)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_zipmap_is_refused_saying_how_to_convert(sklearn):
    from sklearn.linear_model import LogisticRegression

    x, y = sklearn["digits"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LogisticRegression(max_iter=10).fit(x[:300], y[:300])
    message = refusal(converted(model, x, zipmap=True))
    assert message.startswith("ZipMap node") and "{'zipmap': False}" in message, message


def test_string_class_labels_are_refused_saying_what_to_do():
    model = linear("LinearClassifier", coefficients=COEFFICIENTS[:10], intercepts=[0.0, 0.0],
                   classlabels_strings=["cat", "dog"])  # fmt: skip
    message = refusal(model)
    assert message.startswith("LinearClassifier node 'linearclassifier'") and "classlabels_strings" in message
    assert "LabelEncoder" in message
    ensemble = random_ensemble(1, trees=2, features=4, outputs=2)
    message = refusal(tree_model("classifier", ensemble, 4, classlabels_strings=["a", "b"]))
    assert message.startswith("TreeEnsembleClassifier node 'trees'") and "integer labels" in message
    # an MLP's labels: skl2onnx looks its class names up in a string initializer (ArrayFeatureExtractor)
    node = helper.make_node("ArrayFeatureExtractor", ["classes", "i"], ["y"], domain=ML, name="afe")
    classes = numpy_helper.from_array(np.array(["cat", "dog"], dtype=object), "classes")
    model = ml_model([node], [("i", TensorProto.INT64, ["N", 1])], [("y", TensorProto.STRING, None)])
    model.graph.initializer.append(classes)
    message = refusal(model)
    assert message.startswith("initializer 'classes' holds strings") and "integer labels" in message, message


@pytest.mark.parametrize("transform", ["SOFTPLUS", "PROBIT"])
def test_an_unknown_or_unsupported_post_transform_is_refused(transform):
    ensemble = random_ensemble(2, trees=2, features=4, outputs=3)
    message = refusal(tree_model("classifier", ensemble, 4, classlabels_int64s=[0, 1, 2], post_transform=transform))
    assert message.startswith("TreeEnsembleClassifier node 'trees': post_transform") and transform in message
    message = refusal(linear("LinearRegressor", coefficients=COEFFICIENTS[:5], post_transform=transform))
    assert message.startswith("LinearRegressor node 'linearregressor': post_transform"), message


@pytest.mark.parametrize(
    "break_it, says",
    [
        (lambda e: e["nodes"]["truenodeids"].__setitem__(0, 999), "nodes_truenodeids names node 999 of tree 0"),
        (lambda e: e["nodes"]["featureids"].__setitem__(0, 7), "nodes_featureids names feature 7"),
        (lambda e: e["nodes"]["modes"].__setitem__(0, "BRANCH_MEMBER"), "nodes_modes 'BRANCH_MEMBER'"),
        (lambda e: e["nodes"]["values"].pop(), "attribute nodes_values has"),
        (lambda e: e["weights"]["ids"].__setitem__(0, 3), "class_ids holds 3, past the 3 classes"),
        (lambda e: e["nodes"]["nodeids"].__setitem__(1, 0), "is listed twice"),
    ],
    ids=["missing_child", "feature_out_of_range", "unknown_mode", "lengths_differ", "class_out_of_range", "repeated"],
)
def test_a_malformed_ensemble_is_refused_naming_the_attribute(break_it, says):
    ensemble = random_ensemble(6, trees=2, features=4, outputs=3)
    break_it(ensemble)
    message = refusal(tree_model("classifier", ensemble, 4, classlabels_int64s=[0, 1, 2]))
    assert message.startswith("TreeEnsembleClassifier node 'trees':") and says in message, message


def test_a_tree_that_loops_is_refused():
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, name="trees", nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0], nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"], nodes_values=[0.0, 1.0, 0.0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 2, 0], target_ids=[0], target_nodeids=[2],
        target_treeids=[0], target_weights=[1.0],
    )  # fmt: skip
    model = ml_model([node], [("x", TensorProto.FLOAT, ["N", 2])], [("y", TensorProto.FLOAT, None)])
    assert "loops back" in refusal(model)


def test_a_model_of_ml_ops_alone_needs_no_default_opset():
    """onnx's own ai.onnx.ml node tests import no default-domain opset: none of their ops reads one."""
    model = one_op("Binarizer", threshold=0.0)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid(ML, 1))
    result = aot.build(model.SerializeToString(), log=None)
    assert np.array_equal(runtime_lite.load(result.to_bytes()).run([X])[0], (X > 0).astype(np.float32))
