"""Which kernels run an int8 recipe on OpenVINO here: its int8 ones, or float ones over its int8 weights.

An int8 recipe (``--target openvino|auto --precision int8``) is onnxruntime's QDQ model
(aot/compiler/backends/cpu_recipe.py). OpenVINO reads each Q/DQ pair as a FakeQuantize, and
its CPU plugin's low-precision transformations run the convolutions and matrix products
between them on oneDNN's int8 kernels: ResNet-50 ran 0.20x onnxruntime fp32 that way on an
Intel Xeon with AMX, against 0.48x on onnxruntime's own integer kernels. Those kernels share
onnxruntime's limit on an x86 CPU without an 8-bit dot product (VNNI): u8 x s8 products summed
in pairs into saturating 16-bit lanes (the reason NNCF has an "overflow fix").

So ``auto`` runs them where the CPU has an 8-bit dot product and elsewhere turns the
transformations off and runs the recipe as onnxruntime's float kernels do: its int8 weights
dequantized once, its activations unquantized (float_kernels.py), at float speed.
``openvino.int8=integer|float`` overrides the choice. oneDNN's ISA limit
(``ONEDNN_MAX_CPU_ISA``, which OpenVINO's CPU plugin obeys) counts as the CPU: on an Intel Xeon
with AMX, ResNet-50's recipe on the int8 kernels oneDNN keeps below VNNI (``AVX2``,
``AVX512_CORE``) ended 0.31 relative L2 from the float model, against 0.028 on its float kernels
or on VNNI (``AVX2_VNNI``, ``AVX512_CORE_VNNI``). Where OpenVINO cannot compile a static recipe
with the transformations off (under ``ONEDNN_MAX_CPU_ISA=SSE41`` it cannot), its int8 kernels
are not run instead: the region takes its host plan (engine.py).

``auto`` also takes float kernels where OpenVINO's int8 ones are wrong: on AMX, a grouped
convolution with more than one input channel per group. Measured with OpenVINO 2026.4 on an
Intel Xeon with AMX-INT8, a Conv1d of 32 channels in 4 groups ended 3.16 relative L2 from the
same recipe on float kernels at kernel sizes 16, 24, 32, 48, 64 and exact at 8, 12-15 and 17
(Wav2Vec2's positional convolution put the whole model 0.76 from float); with oneDNN kept to
``AVX512_CORE_VNNI`` or ``AVX2_VNNI``, and for depthwise or ungrouped ones, exact. Which
geometries fail follows no rule found, so every such recipe is kept off AMX's int8 kernels.

A transformer's dynamically quantized matmuls (``DynamicQuantizeLinear -> MatMulInteger``) are
another matter: OpenVINO runs that pattern slower than its float model (BERT-base 1.30x), and
the recipe's float form (``recipe_float``: int8 weights behind a dequantize, activations in
float) faster (0.52x): its own kernels for int8 weights take them, and on a CPU with an 8-bit
dot product quantize the activations per group at run time (``DYNAMIC_QUANTIZATION_GROUP_SIZE``;
relative L2 to fp32 0.020 there, against 0.024 for the recipe's own quantization). OpenVINO
always runs that form; ``float`` kernels turn the run-time quantization off too.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence, Set

from runtime_lite.backends.onnxruntime.int8 import X86_MACHINES, Int8Kernels
from runtime_lite.backends.onnxruntime.shapes import Node
from runtime_lite.cpu import DOT_PRODUCT_FLAGS, cpu_flags_and_model

#: The load option's values.
INT8_CHOICES = ("auto", "integer", "float")
#: How ``describe`` names each.
WORDS = {
    "integer": "int8 on openvino's int8 kernels",
    "float": "int8 weights on openvino's float kernels (activations unquantized, its low-precision transformations off)",
}


#: The environment variables of oneDNN's ISA limit on x86, the first one set deciding (oneDNN's order).
ISA_LIMIT_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
_AVX2_VNNI, _AVX512_VNNI, _AMX = frozenset({"avx_vnni"}), frozenset({"avx512_vnni"}), frozenset({"amx_int8"})
#: The 8-bit dot products (CPU flags) oneDNN may use under each limit, after its documented partial order
#: (SSE41 < AVX < AVX2 < AVX2_VNNI < AVX2_VNNI_2; AVX2 < AVX512_CORE < AVX512_CORE_VNNI < AVX512_CORE_BF16 <
#: AVX10_1_512 < AVX10_1_512_AMX < AVX10_1_512_AMX_FP16; AVX2_VNNI < AVX10_1_512). A value not here oneDNN ignores.
DOT_PRODUCTS_UNDER_LIMIT = {
    **dict.fromkeys(("SSE41", "AVX", "AVX2", "AVX512_CORE"), frozenset()),
    **dict.fromkeys(("AVX2_VNNI", "AVX2_VNNI_2"), _AVX2_VNNI),
    **dict.fromkeys(("AVX512_CORE_VNNI", "AVX512_CORE_BF16"), _AVX512_VNNI),
    **dict.fromkeys(("AVX10_1_512", "AVX512_CORE_FP16"), _AVX2_VNNI | _AVX512_VNNI),
    **dict.fromkeys(
        ("AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16"),
        _AVX2_VNNI | _AVX512_VNNI | _AMX,
    ),
}


def isa_limit(environ: Mapping[str, str] = os.environ) -> tuple[str, str] | None:
    """oneDNN's ISA limit as (variable, value) where one it knows is set, else None."""
    for variable in ISA_LIMIT_VARIABLES:
        value = environ.get(variable, "").strip().upper()
        if value:
            return (variable, value) if value in DOT_PRODUCTS_UNDER_LIMIT else None
    return None


def choose_kernels(
    requested: str, flags: set[str] | frozenset[str], machine: str, limit: tuple[str, str] | None = None
) -> Int8Kernels:
    """The kernels for ``requested`` (one of ``INT8_CHOICES``) on a CPU with ``flags`` (``/proc/cpuinfo``), oneDNN
    kept to ``limit`` (``isa_limit``; x86 only)."""
    if requested not in INT8_CHOICES:
        raise ValueError(f"int8 kernels must be one of {', '.join(INT8_CHOICES)}, got {requested!r}")
    if requested != "auto":
        return Int8Kernels(requested, f"openvino.int8={requested}")
    dot = [name for flag, name in DOT_PRODUCT_FLAGS.items() if flag in flags]
    x86 = machine.lower() in X86_MACHINES
    allowed = DOT_PRODUCTS_UNDER_LIMIT[limit[1]] if limit is not None and x86 else set(DOT_PRODUCT_FLAGS)
    usable = [name for flag, name in DOT_PRODUCT_FLAGS.items() if flag in flags and flag in allowed]
    if usable:
        return Int8Kernels("integer", f"this CPU has {' and '.join(usable)}")
    saturating = "int8 kernels sum u8 x s8 products into saturating 16-bit lanes there"
    if dot:  # the ISA limit keeps them away
        why = f"{limit[0]}={limit[1]} keeps oneDNN, and so openvino, from this CPU's {' and '.join(dot)}: {saturating}"
    elif not flags:
        why = "this CPU's flags cannot be read, so no 8-bit dot product is assumed"
    elif x86:
        why = f"this x86 CPU has no VNNI: {saturating}"
    else:
        why = f"this {machine} CPU has no 8-bit dot-product instruction"
    return Int8Kernels("float", f"{why} (openvino.int8=integer forces them)")


def kernels_here(requested: str) -> Int8Kernels:
    """``choose_kernels`` for this machine's CPU, and oneDNN's ISA limit in this process's environment."""
    return kernels_for(requested, (), {})


def grouped_convolutions(nodes: Sequence[Node], shapes: Mapping[str, tuple]) -> list[str]:
    """Where a recipe convolves in groups of more than one input channel (not depthwise; a weight whose shape the
    check did not follow counts)."""
    found = []
    for node in nodes:
        if node.op_type == "Conv" and node.attrs.get("group", 1) != 1 and len(node.inputs) > 1:
            weight = shapes.get(node.inputs[1])
            if not weight or len(weight) < 2 or weight[1] != 1:
                found.append(node.where)
    return found


def avoid_faults(kernels: Int8Kernels, requested: str, grouped: Sequence[str], flags: Set[str],
                 limit: tuple[str, str] | None) -> Int8Kernels:  # fmt: skip
    """``kernels``, or float ones where ``auto`` chose int8 kernels OpenVINO computes wrongly here: AMX's on a
    recipe with grouped convolutions (``grouped``; module docstring). An explicit choice stands."""
    amx = "amx_int8" in flags and (limit is None or "amx_int8" in DOT_PRODUCTS_UNDER_LIMIT[limit[1]])
    if requested != "auto" or kernels.kernels != "integer" or not amx or not grouped:
        return kernels
    more = f" and {len(grouped) - 1} more" if len(grouped) > 1 else ""
    return Int8Kernels(
        "float",
        f"openvino's AMX int8 kernels compute some grouped convolutions wrongly, and this recipe has one "
        f"(Conv {grouped[0]}{more}) (openvino.int8=integer forces them)",
    )


def kernels_for(requested: str, nodes: Sequence[Node], shapes: Mapping[str, tuple]) -> Int8Kernels:
    """The kernels for a recipe of ``nodes`` (their shapes as the check followed them) on this machine."""
    flags, limit = cpu_flags_and_model()[1], isa_limit()
    chosen = choose_kernels(requested, flags, platform.machine(), limit)
    return avoid_faults(chosen, requested, grouped_convolutions(nodes, shapes), flags, limit)


#: The form OpenVINO runs of a recipe with dynamically quantized matmuls (module docstring: why).
WEIGHTS_ONLY_FORM = "recipe_float"


def recipe_field(payloads: Mapping[str, object]) -> str:
    """The payload holding the recipe form OpenVINO runs: a dynamic recipe's float form, else the recipe."""
    return WEIGHTS_ONLY_FORM if WEIGHTS_ONLY_FORM in payloads else "recipe"


def describe(kernels: Int8Kernels, obeyed: bool = True, field: str = "recipe") -> str:
    """What ``describe()`` says of them; ``field``: the form it runs; ``obeyed``: False where OpenVINO kept its
    low-precision transformations on that form after all (it would not compile it with them off: engine.py)."""
    if field == WEIGHTS_ONLY_FORM:
        slower = "the recipe's run-time-quantized matmuls are slower than float there"
        if kernels.kernels == "float":  # float_kernels.py: unpacked at every run they ran 1.22x the float bundle
            return f"int8 weights dequantized once at load, on openvino's float kernels ({slower}): {kernels.reason}"
        on = "on" if obeyed else "off"
        return (
            f"int8 weights on openvino's own kernels for them ({slower}; its low-precision transformations and "
            f"dynamic quantization {on}): {kernels.reason}"
        )
    return f"{WORDS[kernels.kernels]}: {kernels.reason}"


__all__ = [
    "DOT_PRODUCTS_UNDER_LIMIT", "INT8_CHOICES", "ISA_LIMIT_VARIABLES", "WEIGHTS_ONLY_FORM", "choose_kernels",
    "avoid_faults", "describe", "grouped_convolutions", "isa_limit", "kernels_for", "kernels_here", "recipe_field",
]  # fmt: skip
