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
* ``float``: the same quantized function on float kernels: the QDQ fusion is off
  (``session.disable_quant_qdq``), so constant folding dequantizes each weight once at
  session build, and the activations' Q/DQ run as float ops. The outputs are within one
  quantization step of the integer kernels' (they round a tie differently at most).

``onnxruntime.int8=auto|integer|float`` (or ``$AOT_ONNXRUNTIME_INT8``) overrides the choice.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from runtime_lite.cpu import cpu_flags_and_model

#: The load option's values.
INT8_CHOICES = ("auto", "integer", "float")
#: CPU flags (Linux's names) of an 8-bit dot product that onnxruntime's integer kernels use.
DOT_PRODUCT_FLAGS = {
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_int8": "AMX-INT8",
    "asimddp": "the Arm dot-product extension",
}
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
#: Session config entries of each path.
FLOAT_KERNELS = {"session.disable_quant_qdq": "1"}
EXACT_X86_KERNELS = {"session.x64quantprecision": "1"}


@dataclass(frozen=True)
class Int8Kernels:
    """The kernels an int8 recipe runs on here, why, and the session config entries that make it so."""

    kernels: str  # "integer" or "float"
    reason: str
    config: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"int8 on {self.kernels} kernels: {self.reason}"


def choose_kernels(requested: str, flags: set[str], machine: str) -> Int8Kernels:
    """The kernels for ``requested`` (``auto``, ``integer`` or ``float``) on a CPU with ``flags`` (``/proc/cpuinfo``)."""
    if requested not in INT8_CHOICES:
        raise ValueError(f"int8 kernels must be one of {', '.join(INT8_CHOICES)}, got {requested!r}")
    dot = [name for flag, name in DOT_PRODUCT_FLAGS.items() if flag in flags]
    x86 = machine.lower() in X86_MACHINES
    if requested == "float":
        return Int8Kernels("float", "onnxruntime.int8=float (weights dequantized once at load)", dict(FLOAT_KERNELS))
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
        why = "this x86 CPU has no VNNI: onnxruntime's u8s8 kernels lose to float there and can saturate"
    else:
        why = f"this {machine} CPU has no 8-bit dot-product instruction"
    return Int8Kernels("float", f"{why} (onnxruntime.int8=integer forces them)", dict(FLOAT_KERNELS))


def kernels_here(requested: str) -> Int8Kernels:
    """``choose_kernels`` for this machine's CPU."""
    return choose_kernels(requested, cpu_flags_and_model()[1], platform.machine())


__all__ = ["DOT_PRODUCT_FLAGS", "INT8_CHOICES", "Int8Kernels", "choose_kernels", "kernels_here"]
