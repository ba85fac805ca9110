"""Which kernels run an int8 recipe on OpenVINO here: its int8 ones, or float ones over the same Q/DQ.

An int8 recipe (``--target openvino|auto --precision int8``) is onnxruntime's QDQ model
(aot/compiler/backends/cpu_recipe.py). OpenVINO reads each Q/DQ pair as a FakeQuantize, and
its CPU plugin's low-precision transformations run the convolutions and matrix products
between them on oneDNN's int8 kernels: ResNet-50 ran 0.20x onnxruntime fp32 that way on an
Intel Xeon with AMX, against 0.48x on onnxruntime's own integer kernels. Those kernels share
onnxruntime's limit on an x86 CPU without an 8-bit dot product (VNNI): u8 x s8 products summed
in pairs into saturating 16-bit lanes (the reason NNCF has an "overflow fix").

So ``auto`` runs them where the CPU has an 8-bit dot product and elsewhere turns the
transformations off: the recipe's Q/DQ as float ops, at float speed.
``openvino.int8=integer|float`` overrides the choice.

A transformer's dynamically quantized matmuls (``DynamicQuantizeLinear -> MatMulInteger``) are
another matter: OpenVINO runs that pattern slower than its float model (BERT-base 1.30x), and
the recipe's float form (``recipe_float``: int8 weights behind a dequantize, activations in
float) faster (0.52x): its own kernels for int8 weights take them, and on a CPU with an 8-bit
dot product quantize the activations per group at run time (``DYNAMIC_QUANTIZATION_GROUP_SIZE``;
relative L2 to fp32 0.020 there, against 0.024 for the recipe's own quantization). OpenVINO
always runs that form; ``float`` kernels turn the run-time quantization off too.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

from runtime_lite.backends.onnxruntime.int8 import X86_MACHINES, Int8Kernels
from runtime_lite.cpu import DOT_PRODUCT_FLAGS, cpu_flags_and_model

#: The load option's values.
INT8_CHOICES = ("auto", "integer", "float")
#: How ``describe`` names each.
WORDS = {
    "integer": "int8 on openvino's int8 kernels",
    "float": "int8 recipe on openvino's float kernels (its low-precision transformations off)",
}


def choose_kernels(requested: str, flags: set[str], machine: str) -> Int8Kernels:
    """The kernels for ``requested`` (one of ``INT8_CHOICES``) on a CPU with ``flags`` (``/proc/cpuinfo``)."""
    if requested not in INT8_CHOICES:
        raise ValueError(f"int8 kernels must be one of {', '.join(INT8_CHOICES)}, got {requested!r}")
    if requested != "auto":
        return Int8Kernels(requested, f"openvino.int8={requested}")
    dot = [name for flag, name in DOT_PRODUCT_FLAGS.items() if flag in flags]
    if dot:
        return Int8Kernels("integer", f"this CPU has {' and '.join(dot)}")
    if not flags:
        why = "this CPU's flags cannot be read, so no 8-bit dot product is assumed"
    elif machine.lower() in X86_MACHINES:
        why = "this x86 CPU has no VNNI: int8 kernels sum u8 x s8 products into saturating 16-bit lanes there"
    else:
        why = f"this {machine} CPU has no 8-bit dot-product instruction"
    return Int8Kernels("float", f"{why} (openvino.int8=integer forces them)")


def kernels_here(requested: str) -> Int8Kernels:
    """``choose_kernels`` for this machine's CPU."""
    return choose_kernels(requested, cpu_flags_and_model()[1], platform.machine())


#: The form OpenVINO runs of a recipe with dynamically quantized matmuls (module docstring: why).
WEIGHTS_ONLY_FORM = "recipe_float"


def recipe_field(payloads: Mapping[str, object]) -> str:
    """The payload holding the recipe form OpenVINO runs: a dynamic recipe's float form, else the recipe."""
    return WEIGHTS_ONLY_FORM if WEIGHTS_ONLY_FORM in payloads else "recipe"


def describe(kernels: Int8Kernels, obeyed: bool = True, field: str = "recipe") -> str:
    """What ``describe()`` says of them; ``obeyed``: False where OpenVINO ran its int8 kernels after all (it has
    no switch for its low-precision transformations); ``field``: the form it runs."""
    if field == WEIGHTS_ONLY_FORM:
        on = "on" if kernels.kernels == "integer" or not obeyed else "off"
        return (
            "int8 weights on openvino's own kernels for them (the recipe's run-time-quantized matmuls are slower "
            f"than float there; its low-precision transformations and dynamic quantization {on}): {kernels.reason}"
        )
    if not obeyed:
        return f"{WORDS['integer']}: this openvino has no switch for its low-precision transformations"
    return f"{WORDS[kernels.kernels]}: {kernels.reason}"


__all__ = ["INT8_CHOICES", "WEIGHTS_ONLY_FORM", "choose_kernels", "describe", "kernels_here", "recipe_field"]
