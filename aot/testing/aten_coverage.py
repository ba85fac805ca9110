"""PyTorch's core ATen opset against the torch.export frontend, with samples from PyTorch's OpInfo database.

``core_ops()`` reads the op list from the installed torch (every overload tagged
``torch.Tag.core``, grouped by overload packet, the unit ``aot.frontend.torch.aten.ATEN``
converts), so a torch upgrade that adds an op shows up as an op with no status rather
than as silence. Each op is ``converted`` (a converter in ``ATEN``), ``by design`` (one
of ``BY_DESIGN``'s reasons: training, random, memory layout, values known only at run
time) or a gap.

``check(op_info, dtype, ...)`` exports a module that calls an OpInfo entry on one of
its samples, decomposes the program to core ATen with torch's table minus the op under
test (so the core op itself is read, not a higher-level op torch.export keeps, nor what
torch's table would rewrite it into), builds it with aot, runs it with runtime_lite
and compares with eager PyTorch: relative L2 at most 1e-5 for floating outputs, exact
for integers and bools, NaN and infinity where PyTorch has them.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

TRAINING = "training only: gradients and batch statistics; aot compiles inference programs"
RANDOM = "random numbers: a bundle computes the same output for the same input"
LAYOUT = "memory layout (strides, storage offsets): the IR has values, not strided views"
DATA_DEPENDENT = "output shape or a Python value that depends on the input values: the memory plan is fixed at build"
COMPLEX = "complex tensors (FFT): runtime_lite holds real and integer tensors only"
SPARSE = "embedding bags with offsets and per-sample weights (sparse features): not an inference op aot targets"

#: core ATen packet -> why aot does not convert it, by design.
BY_DESIGN: dict[str, str] = {
    "_adaptive_avg_pool2d_backward": TRAINING,
    "avg_pool2d_backward": TRAINING,
    "convolution_backward": TRAINING,
    "embedding_dense_backward": TRAINING,
    "max_pool2d_with_indices_backward": TRAINING,
    "native_group_norm_backward": TRAINING,
    "native_layer_norm_backward": TRAINING,
    "native_dropout": TRAINING,  # eval-mode dropout is exported as nothing
    "rand": RANDOM,
    "randn": RANDOM,
    "randperm": RANDOM,
    "as_strided": LAYOUT,
    "empty_strided": LAYOUT,
    "sym_storage_offset": LAYOUT,
    "sym_stride": LAYOUT,
    "_local_scalar_dense": DATA_DEPENDENT,
    "nonzero": DATA_DEPENDENT,
    "_fft_c2r": COMPLEX,
    "_fft_r2c": COMPLEX,
    "_embedding_bag": SPARSE,
}

#: core packet -> (OpInfo name, variant) entries whose samples reach it, where the names differ.
OPINFO_ALIASES: dict[str, list[tuple[str, str]]] = {
    "_softmax": [("softmax", "")],
    "_log_softmax": [("log_softmax", "")],
    "_to_copy": [("to", "")],
    "convolution": [("nn.functional.conv2d", "")],
    "elu": [("nn.functional.elu", "")],
    "embedding": [("nn.functional.embedding", "")],
    "index": [("__getitem__", "")],
    "max_pool2d_with_indices": [("nn.functional.max_pool2d", "")],
    "adaptive_avg_pool1d": [("nn.functional.adaptive_avg_pool1d", "")],
    "_adaptive_avg_pool2d": [("nn.functional.adaptive_avg_pool2d", "")],
    "_adaptive_avg_pool3d": [("nn.functional.adaptive_avg_pool3d", "")],
    "_native_batch_norm_legit_no_training": [("nn.functional.batch_norm", "")],
    "native_layer_norm": [("nn.functional.layer_norm", "")],
    "native_group_norm": [("nn.functional.group_norm", "")],
    "grid_sampler_2d": [("nn.functional.grid_sample", "")],
    "col2im": [("nn.functional.fold", "")],
    "reflection_pad1d": [("nn.functional.pad", "reflect")],
    "reflection_pad2d": [("nn.functional.pad", "reflect")],
    "reflection_pad3d": [("nn.functional.pad", "reflect")],
    "replication_pad2d": [("nn.functional.pad", "replicate")],
    "replication_pad3d": [("nn.functional.pad", "replicate")],
    "upsample_bilinear2d": [("nn.functional.interpolate", "bilinear")],
    "upsample_nearest2d": [("nn.functional.interpolate", "nearest")],
    "_cdist_forward": [("cdist", "")],
    "relu": [("nn.functional.relu", "")],
    "gelu": [("nn.functional.gelu", "")],
    "hardtanh": [("nn.functional.hardtanh", "")],
    "leaky_relu": [("nn.functional.leaky_relu", "")],
    "avg_pool1d": [("nn.functional.avg_pool1d", "")],
    "avg_pool2d": [("nn.functional.avg_pool2d", "")],
    "avg_pool3d": [("nn.functional.avg_pool3d", "")],
    "max_pool3d_with_indices": [("nn.functional.max_pool3d", "")],
    "hardsigmoid": [("nn.functional.hardsigmoid", "")],
    "hardswish": [("nn.functional.hardswish", "")],
    "silu": [("nn.functional.silu", "")],
    "sym_numel": [("numel", "")],
    "_pdist_forward": [("nn.functional.pdist", "")],
}

#: input ranks that reach an op whose OpInfo entry covers several (F.pad covers every reflection_padNd)
INPUT_RANKS: dict[str, tuple[int, ...]] = {
    "reflection_pad1d": (2, 3),
    "reflection_pad2d": (3, 4),
    "reflection_pad3d": (4, 5),
    "replication_pad2d": (3, 4),
    "replication_pad3d": (4, 5),
    "upsample_nearest2d": (4,),
    "upsample_bilinear2d": (4,),
    "_adaptive_avg_pool2d": (3, 4),
    "_adaptive_avg_pool3d": (4, 5),
}

#: the dtypes samples are drawn in, where the op takes them
DTYPES = ("float32", "int64", "bool")


@functools.lru_cache(maxsize=1)
def core_ops() -> tuple[str, ...]:
    """Every core ATen overload packet of the installed torch (``add``, ``convolution``, ...)."""
    import torch

    packets = set()
    # Every registered aten op, not dir(torch.ops.aten): that lists only the packets touched so far in this
    # process, so importing torchvision (which touches avg_pool1d) used to change the count.
    names = {op.split("::", 1)[1].split(".", 1)[0] for op in torch._C._dispatch_get_all_op_names()
             if op.startswith("aten::")}  # fmt: skip
    for name in sorted(names):
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except Exception:
            continue
        if any(torch.Tag.core in getattr(packet, o).tags for o in overloads):
            packets.add(name)
    return tuple(sorted(packets))


def status(op: str) -> str:
    """``converted``, ``by design`` or ``missing`` for a core packet, from the converter table."""
    from aot.frontend.torch.aten import ATEN

    if f"aten.{op}" in ATEN:
        return "converted"
    if op in BY_DESIGN:
        return "by design"
    return "missing"


@functools.lru_cache(maxsize=1)
def _op_db() -> tuple[Any, ...]:
    from torch.testing._internal.common_methods_invocations import op_db

    return tuple(op_db)


def opinfos(op: str) -> list[Any]:
    """The OpInfo entries whose samples reach ``op``: its own name, else the aliases above."""
    wanted = OPINFO_ALIASES.get(op, [(op, "")])
    found = [info for info in _op_db() if (info.name, info.variant_test_name) in wanted]
    if not found:
        found = [info for info in _op_db() if info.name == op]
    return found


@dataclass
class Result:
    status: str  # "pass", "refused", "fail", "skipped"
    detail: str = ""


class _Call:
    """A module calling ``fn`` on a sample with its tensors as the module's inputs."""

    def __init__(self, fn: Any, spec: Any, leaves: list[Any], tensor_slots: list[int]):
        import torch

        class Module(torch.nn.Module):
            def forward(self, *tensors):
                from torch.utils._pytree import tree_unflatten

                values = list(leaves)
                for slot, tensor in zip(tensor_slots, tensors):
                    values[slot] = tensor
                args, kwargs = tree_unflatten(values, spec)
                return fn(*args, **kwargs)

        self.module = Module()


def _flat(outputs: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(outputs)[0]


def _compare(got: np.ndarray, want: Any) -> str | None:
    want = want.detach().numpy()
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind in "fc":
        got = got.astype(np.float64)
        want = want.astype(np.float64)
        finite = np.isfinite(want)
        if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.array_equal(
            got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]
        ):
            return "NaN or infinity where PyTorch has none, or the other way round"
        g, w = got[finite], want[finite]
        denominator = max(float(np.linalg.norm(w)), 1e-30)
        error = float(np.linalg.norm(g - w)) / denominator if w.size else 0.0
        if error > 1e-5 and float(np.linalg.norm(g - w)) > 1e-6:  # all-near-zero outputs compare absolutely
            return f"relative L2 {error:.2e}"
        return None
    if got.dtype != want.dtype and not (got.dtype.kind == want.dtype.kind == "i"):
        return f"dtype {got.dtype}, expected {want.dtype}"
    if not np.array_equal(got, want):
        return f"{int((got != want).sum())} of {want.size} elements differ"
    return None


def check(info: Any, sample: Any, target: str, dynamic: bool = False) -> Result:
    """Export ``info`` on ``sample``, read it at core-ATen level, build, run and compare with eager PyTorch."""
    import torch
    from torch.utils._pytree import tree_flatten

    import aot
    import runtime_lite
    from aot.errors import AotError

    leaves, spec = tree_flatten(((sample.input, *sample.args), sample.kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in slots]
    if not tensors or any(t.dtype in (torch.bfloat16, torch.complex64, torch.complex128) for t in tensors):
        return Result("skipped", "no tensor input of a supported dtype")
    module = _Call(info.op, spec, leaves, slots).module
    try:
        expected = _flat(module(*tensors))
    except Exception as e:
        return Result("skipped", f"eager PyTorch raised {type(e).__name__}")
    if not expected or not all(isinstance(t, torch.Tensor) for t in expected):
        return Result("skipped", "the op returns something other than tensors")
    try:
        shapes = tuple({i: torch.export.Dim.AUTO for i in range(t.dim())} for t in tensors) if dynamic else None
        program = torch.export.export(module, tuple(tensors), dynamic_shapes=shapes, strict=False)
        table = torch.export.default_decompositions()
        for overload in list(table.keys()):  # torch's table rewrites some core ops too (reflection_pad2d)
            if str(getattr(overload, "overloadpacket", "")) == f"aten.{target}":
                table.pop(overload)
        program = program.run_decompositions(table)
    except Exception as e:
        return Result("skipped", f"torch.export failed: {type(e).__name__}")
    reached = {str(getattr(n.target, "overloadpacket", "")) for n in program.graph.nodes if n.op == "call_function"}
    if f"aten.{target}" not in reached:
        return Result("skipped", f"the sample does not reach aten.{target}")
    logging.disable(logging.WARNING)
    try:
        bundle = aot.build(program, log=None).to_bytes()
    except AotError as e:
        return Result("refused", str(e).splitlines()[0])
    except Exception as e:
        return Result("fail", f"build crashed: {type(e).__name__}: {str(e)[:160]}")
    finally:
        logging.disable(logging.NOTSET)
    try:
        outputs = runtime_lite.load(bundle).run([t.detach().numpy() for t in tensors])
    except Exception as e:
        return Result("fail", f"run crashed: {type(e).__name__}: {str(e)[:160]}")
    if len(outputs) != len(expected):
        return Result("fail", f"{len(outputs)} outputs, expected {len(expected)}")
    for k, (got, want) in enumerate(zip(outputs, expected)):
        if k == 1 and target in _ORDERINGS and _picks_the_values(sample, target, np.asarray(got), expected[0]):
            continue  # indices of equal values may come in any order; these pick exactly PyTorch's values
        wrong = _compare(np.asarray(got), want)
        if wrong:
            return Result("fail", f"output {k}: {wrong}")
    return Result("pass")


#: ops whose second output indexes the first; PyTorch does not define the order of ties
_ORDERINGS = ("topk", "sort", "max", "min")


def _picks_the_values(sample: Any, target: str, indices: np.ndarray, values: Any) -> bool:
    """Whether ``indices`` select PyTorch's ``values`` from the input along the op's dim."""
    if target == "topk":
        dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    else:
        dim = sample.args[0] if sample.args and isinstance(sample.args[0], int) else sample.kwargs.get("dim", -1)
    x = sample.input.detach().numpy()
    if x.ndim == 0 or indices.shape != tuple(values.shape) or indices.dtype.kind != "i" or not isinstance(dim, int):
        return False
    values = values.detach().numpy()
    if indices.ndim < x.ndim:  # max(dim) without keepdim
        indices, values = np.expand_dims(indices, dim), np.expand_dims(values, dim)
    try:
        chosen = np.take_along_axis(x, indices.astype(np.int64), axis=dim)
    except (ValueError, IndexError):
        return False
    return np.array_equal(chosen, values, equal_nan=x.dtype.kind == "f")


def sweep(op: str, per_dtype: dict[str, int], tries: int = 4) -> list[tuple[str, Result]]:
    """Run ``op``'s OpInfo samples: up to ``per_dtype[dtype]`` per dtype that reach it and are not refused,
    every other one with symbolic dims, ``tries`` samples looked at per one wanted. Returns (dtype, result)."""
    import itertools

    import torch

    results = []
    for dtype, wanted in per_dtype.items():
        torch_dtype = getattr(torch, dtype)
        pairs = (
            (info, sample)
            for info in opinfos(op)
            if torch_dtype in info.supported_dtypes("cpu")
            for sample in _seeded(info.sample_inputs("cpu", torch_dtype))
        )
        ranks = INPUT_RANKS.get(op)
        if ranks:  # samples of other ranks reach another op (reflection_pad1d for a 2-d pad): skip them unexported
            pairs = ((i, s) for i, s in pairs if getattr(s.input, "ndim", None) in ranks)
        ran = 0
        for info, sample in itertools.islice(pairs, tries * wanted):
            result = check(info, sample, op, dynamic=len(results) % 2 == 1)
            if result.status == "skipped" and len(results) % 2 == 1:  # the op does not take symbolic dims here
                result = check(info, sample, op)
            if result.status == "skipped":
                continue
            results.append((dtype, result))
            ran += result.status != "refused"  # a refused sample (an argument not supported) does not count
            if ran >= wanted:
                break
    return results


def _seeded(samples: Any) -> Any:
    import torch

    torch.manual_seed(0)
    yield from samples
