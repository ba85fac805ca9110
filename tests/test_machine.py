"""What runtime_lite says about the host beside a speed figure (runtime_lite/tools/machine.py)."""

from __future__ import annotations

import platform

import pytest

from runtime_lite.tools import machine


def test_the_cpu_model_and_flags_come_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C\nflags\t\t: fpu sse2 avx2 avx512f\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C\nflags\t\t: fpu\n"
    )
    model, flags = machine.cpu_flags_and_model(cpuinfo)
    if platform.processor() in ("", platform.machine()):  # Linux: the platform names no model, cpuinfo does
        assert model == "Intel(R) Xeon(R) Platinum 8375C"
    assert flags == {"fpu", "sse2", "avx2", "avx512f"}  # the first processor's flags
    assert machine.vector_extension(flags) == "AVX-512"
    assert machine.vector_extension({"avx2"}) == "AVX2"
    assert machine.vector_extension({"sse2"}) == "no AVX2"
    assert machine.vector_extension(set()) == "vector unknown"
    assert machine.has_vnni({"avx2", "avx_vnni"}) and machine.has_vnni(flags | {"avx512_vnni"})
    assert not machine.has_vnni({"avx2", "fma"})  # AMD Zen3: int8 kernels lose to float there
    assert machine.cpu_flags_and_model(tmp_path / "absent")[1] == set()


@pytest.mark.parametrize(
    ("forced", "flags", "kernel", "noted"),
    [
        ("Haswell", {"avx2", "avx512f"}, "Haswell", True),  # an AVX2 kernel on an AVX-512 CPU
        ("Zen", {"avx2", "avx512f"}, "Zen", True),
        ("SkylakeX", {"avx2", "avx512f"}, "SkylakeX", False),  # already an AVX-512 kernel
        ("Haswell", {"avx2"}, "Haswell", False),  # the CPU has nothing wider
        ("", {"avx2", "avx512f"}, "Haswell", False),  # OpenBLAS chose it itself
    ],
)
def test_a_kernel_held_below_the_cpu_is_noted(monkeypatch, forced, flags, kernel, noted):
    if forced:
        monkeypatch.setenv("OPENBLAS_CORETYPE", forced)
    else:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    note = machine.kernel_note(flags=flags, kernel=kernel)
    assert (note is not None) == noted, note
    if noted:
        assert f"OPENBLAS_CORETYPE={forced}" in note and f"its {kernel} kernel" in note


def test_describe_names_the_overrides(monkeypatch):
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "512")
    line = machine.describe(also="onnxruntime 9.9")
    assert "cores" in line and ", onnxruntime 9.9" in line and line.endswith("OPENBLAS_L2_SIZE=512")


@pytest.mark.parametrize(
    ("vendor", "family", "model", "said"),
    [
        ("AuthenticAMD", 25, 17, "Zen4 (family 25)"),  # EPYC Genoa
        ("AuthenticAMD", 25, 1, "Zen3 (family 25)"),  # EPYC Milan
        ("AuthenticAMD", 26, 2, "Zen5 (family 26)"),  # EPYC Turin
        ("AuthenticAMD", 21, 2, None),  # Bulldozer's family: not a Zen
        ("GenuineIntel", 6, 143, None),
    ],
)
def test_a_bare_amd_epyc_is_named_by_its_zen_generation(tmp_path, vendor, family, model, said):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 99\n"
    )
    assert machine.zen_generation(cpuinfo) == said
    assert machine.zen_generation(tmp_path / "absent") is None
