"""Run tests on an emulated x86 CPU without AVX-512 or VNNI (QEMU's EPYC-Milan: AMD Zen 3, AVX2), as CI cannot.

    python scripts/emulated_cpu.py tests/test_quantization.py::test_digits_at_int8_in_the_tensorrt_recipe_lose_at_most_one_point
    python scripts/emulated_cpu.py --cpu Haswell -- -s -k quantized tests/test_onnxruntime_backend.py
    python scripts/emulated_cpu.py --python -- "$(which runtime-lite)" info -v model.aotb   # a user's command

Why: int8 numerics depend on the CPU's instructions. Without VNNI onnxruntime's u8s8 kernels
pair products into a saturating 16-bit sum, and runtime_lite runs an int8 recipe on float
kernels there (docs/quantization.md); a test that passes on an AVX-512 machine can fail on
an AMD Zen 3 (issue 38 saw it). The machines CI draws may all have VNNI.

How: QEMU's user mode (``apt-get install qemu-user``; 7.2 or later emulates AVX2) runs this
Python under the CPU model's CPUID, so numpy and onnxruntime dispatch to that model's kernels
and compute its arithmetic (``VPMADDUBSW`` saturates as on the real CPU). ``/proc/cpuinfo``
still describes the host, so runtime_lite's own reading of the flags (runtime_lite/cpu.py) is
pointed at a copy without the AVX-512, VNNI and AMX flags, through a ``sitecustomize`` in a
temporary directory; the tests' code is not changed. QEMU's user mode hands a child's ``execve``
to the host kernel, so a Python a test starts (``own_process`` tests, CLI subprocesses) would run
on the host's CPU while reading the emulated cpuinfo: the same ``sitecustomize`` starts every
Python that finds it (the pytest too) again under QEMU, keeping its pid (a Python started with
``-I``, ``-E`` or ``-S`` does not read it, and stays native). Timings under emulation mean nothing:
this checks numerics only (the digits test takes about 8 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: /proc/cpuinfo flags the emulated CPU does not have.
DROPPED = ("avx512", "vnni", "amx_")

SITECUSTOMIZE = """
import os
import sys
from pathlib import Path

if os.environ.get("AOT_EMULATED_PID") != str(os.getpid()):  # started on the host's CPU: again, under QEMU
    os.environ["AOT_EMULATED_PID"] = str(os.getpid())  # execv keeps the pid: the emulated Python goes on
    qemu = os.environ["AOT_EMULATED_QEMU"]
    # -0: Python finds its virtual environment from argv[0], which QEMU would otherwise set to the real binary
    os.execv(qemu, [qemu, "-cpu", os.environ["AOT_EMULATED_CPU"], "-0", sys.executable,
                    os.path.realpath(sys.executable), *sys.orig_argv[1:]])

import runtime_lite.cpu

# runtime_lite reads /proc/cpuinfo, which under QEMU's user mode describes the host: read the emulated CPU's instead
runtime_lite.cpu.cpu_flags_and_model.__wrapped__.__defaults__ = (Path(os.environ["AOT_EMULATED_CPUINFO"]),)
"""


def emulated_cpuinfo(host: str, cpu: str) -> str:
    """The host's first cpuinfo block with the emulated model's name and without the flags it lacks."""
    lines = []
    for line in host.split("\n\n")[0].splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            line = f"{name}: " + " ".join(f for f in value.split() if not any(d in f for d in DROPPED))
        elif name.strip() == "model name":
            line = f"{name}: QEMU {cpu} (emulated: AVX2, no AVX-512, no VNNI)"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", default="EPYC-Milan", help="QEMU's CPU model (qemu-x86_64 -cpu help)")
    parser.add_argument("--python", action="store_true", help="run Python with the arguments instead of pytest "
                        "(a script such as aot-build or runtime-lite by its path)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="+", help="what to pass to pytest (after -- where it starts with -)")
    args = parser.parse_args()
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        print("qemu-x86_64 is not installed (apt-get install qemu-user)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="aot-emulated-cpu-") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        cpuinfo = Path(tmp) / "cpuinfo"
        cpuinfo.write_text(emulated_cpuinfo(Path("/proc/cpuinfo").read_text(), args.cpu))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (tmp, os.environ.get("PYTHONPATH")))),
               "AOT_EMULATED_CPUINFO": str(cpuinfo), "AOT_EMULATED_QEMU": qemu, "AOT_EMULATED_CPU": args.cpu}  # fmt: skip
        env.pop("AOT_EMULATED_PID", None)
        # started natively: its sitecustomize runs it again under QEMU, as every Python it starts
        command = [sys.executable, *(() if args.python else ("-m", "pytest", "-p", "no:cacheprovider")),
                   *args.pytest_args]  # fmt: skip
        print(f"under QEMU {args.cpu}: {' '.join(command[1:])}", flush=True)
        return subprocess.run(command, cwd=None if args.python else ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
