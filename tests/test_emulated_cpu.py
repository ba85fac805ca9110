"""scripts/emulated_cpu.py: the cpuinfo it shows runtime_lite under QEMU is the emulated CPU's, not the host's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from runtime_lite.backends.onnxruntime.int8 import choose_kernels

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "emulated_cpu.py"
HOST = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx_vnni amx_int8 amx_tile sha_ni

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx_vnni amx_int8 amx_tile sha_ni
"""


def _script():
    spec = importlib.util.spec_from_file_location("emulated_cpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_emulated_cpuinfo_has_no_avx512_vnni_or_amx_and_names_the_model(tmp_path):
    text = _script().emulated_cpuinfo(HOST, "EPYC-Milan")
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    from runtime_lite.cpu import cpu_flags_and_model

    model, flags = cpu_flags_and_model.__wrapped__(path)
    assert model == "QEMU EPYC-Milan (emulated: AVX2, no AVX-512, no VNNI)"
    assert flags == {"fpu", "sse2", "avx", "avx2", "fma", "sha_ni"}
    assert choose_kernels("auto", set(flags), "x86_64").kernels == "float"  # what runtime_lite picks there
