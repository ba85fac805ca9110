"""Which kernels run an int8 recipe on this CPU: onnxruntime's integer ones, or float ones over the same Q/DQ.

An int8 recipe (``aot-build --target onnxruntime --precision int8``) is a QDQ model:
onnxruntime's CPU provider fuses ``DequantizeLinear -> Conv/Gemm/MatMul -> QuantizeLinear``
into QLinearConv / QGemm / QLinearMatMul, which multiply u8 activations by s8 weights.
That pays where the CPU has an 8-bit dot product (x86: AVX512-VNNI, AVX-VNNI or AMX;
Arm: the dot-product extension). Without one, x86's u8s8 kernels pair products into a
saturating 16-bit sum (``VPMADDUBSW``): they are slower than float (ResNet-50 1.73x on an
AMD EPYC Zen3) and lose accuracy (the digits model 96.7% instead of 98.0%), as
onnxruntime's own documentation warns.

So the recipe's kernels are chosen at load, from the CPU flags (``/proc/cpuinfo``):

* ``integer``: onnxruntime's QDQ fusions, as it does by default; forced on an x86 CPU
  without VNNI it runs u8u8 kernels (``session.x64quantprecision``), exact but slower;
* ``float``: float kernels at float speed. The QDQ fusion is off (``session.disable_quant_qdq``),
  so constant folding dequantizes each weight once at session build, and the activations'
  Q/DQ pairs are dropped (``session.enable_quant_qdq_cleanup``): the model with its weights
  rounded to int8, activations in float. Its outputs lie between the float model's and the
  quantized function's (it skips the activations' rounding, the larger part of int8's error);
* ``emulated``: the quantized function itself on float kernels (the QDQ fusion off, the
  activations' Q/DQ kept as float ops): the host plan's outputs, within one quantization step
  of the integer kernels' (they round a requantization tie their own way), but 1.4-1.5x the
  float kernels' time on ResNet-50 (the Q/DQ ops, and the layout changes around each).

``auto`` runs ``integer`` where the CPU has an 8-bit dot product and ``float`` elsewhere;
``onnxruntime.int8=auto|integer|float|emulated`` (or ``$AOT_ONNXRUNTIME_INT8``) overrides it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from runtime_lite.cpu import DOT_PRODUCT_FLAGS, cpu_flags_and_model

#: The load option's values.
INT8_CHOICES = ("auto", "integer", "float", "emulated")
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
#: Session config entries of each path.
EMULATED_KERNELS = {"session.disable_quant_qdq": "1"}
FLOAT_KERNELS = {**EMULATED_KERNELS, "session.enable_quant_qdq_cleanup": "1"}
EXACT_X86_KERNELS = {"session.x64quantprecision": "1"}
#: onnxruntime's rewrites that drop a Relu or Clip before a quantize whose range already clamps it: right while
#: the quantize stays, wrong once the float kernels drop the Q/DQ pair after it (the ReLU would be lost).
FLOAT_KERNELS_KEEP = ("ReluQuantRewrite", "ClipQuantRewrite")
#: How ``describe`` names each.
WORDS = {
    "integer": "int8 on integer kernels",
    "float": "int8 weights on float kernels (activations unquantized, float speed)",
    "emulated": "int8 emulated on float kernels (the quantized function exactly)",
}


@dataclass(frozen=True)
class Int8Kernels:
    """The kernels an int8 recipe runs on here, why, and the session config entries that make it so."""

    kernels: str  # "integer", "float" or "emulated"
    reason: str
    config: dict[str, str] = field(default_factory=dict)
    #: onnxruntime graph rewrites the session must not run.
    disabled: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{WORDS[self.kernels]}: {self.reason}"


def choose_kernels(requested: str, flags: set[str], machine: str) -> Int8Kernels:
    """The kernels for ``requested`` (one of ``INT8_CHOICES``) on a CPU with ``flags`` (``/proc/cpuinfo``)."""
    if requested not in INT8_CHOICES:
        raise ValueError(f"int8 kernels must be one of {', '.join(INT8_CHOICES)}, got {requested!r}")
    dot = [name for flag, name in DOT_PRODUCT_FLAGS.items() if flag in flags]
    x86 = machine.lower() in X86_MACHINES
    if requested == "float":
        return float_kernels("onnxruntime.int8=float (weights dequantized once at load)")
    if requested == "emulated":
        return Int8Kernels("emulated", "onnxruntime.int8=emulated", dict(EMULATED_KERNELS))
    if requested == "integer":
        if x86 and not dot:  # u8s8 would saturate: u8u8 is exact, if slower
            return Int8Kernels(
                "integer", "onnxruntime.int8=integer on an x86 CPU without VNNI: u8u8 kernels "
                "(session.x64quantprecision), exact but slower than float", dict(EXACT_X86_KERNELS),
            )  # fmt: skip
        return Int8Kernels("integer", "onnxruntime.int8=integer")
    if dot:
        return Int8Kernels("integer", f"this CPU has {' and '.join(dot)}")
    if not flags:
        why = "this CPU's flags cannot be read, so no 8-bit dot product is assumed"
    elif x86:
        why = "this x86 CPU has no VNNI: onnxruntime's u8s8 kernels lose to float there, and saturate"
    else:
        why = f"this {machine} CPU has no 8-bit dot-product instruction"
    return float_kernels(f"{why} (onnxruntime.int8=integer or emulated forces another)")


def float_kernels(reason: str) -> Int8Kernels:
    return Int8Kernels("float", reason, dict(FLOAT_KERNELS), FLOAT_KERNELS_KEEP)


def kernels_here(requested: str) -> Int8Kernels:
    """``choose_kernels`` for this machine's CPU."""
    return choose_kernels(requested, cpu_flags_and_model()[1], platform.machine())


__all__ = ["DOT_PRODUCT_FLAGS", "INT8_CHOICES", "Int8Kernels", "choose_kernels", "float_kernels", "kernels_here"]
