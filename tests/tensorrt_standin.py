"""Switch the test stand-ins for tensorrt and cuda.bindings on, in this process or in a child's environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

STANDINS = Path(__file__).parent / "standins"
REPO = Path(__file__).parent.parent


def _purge() -> None:
    from runtime_lite.backends.tensorrt import gpu

    for name in list(sys.modules):
        if name == "tensorrt" or name.startswith("tensorrt.") or name == "cuda" or name.startswith("cuda."):
            del sys.modules[name]
    gpu.probe.cache_clear()
    gpu._modules.cache_clear()


def device_env(cc: str = "8.6", version: str = "10.13.0", gpu: str = "Stand-in RTX", build_log: str = "") -> dict:
    return {"STANDIN_GPU_CC": cc, "STANDIN_TRT_VERSION": version, "STANDIN_GPU_NAME": gpu,
            "STANDIN_TRT_BUILD_LOG": build_log}  # fmt: skip


class StandinMachine:
    """This process as a machine with the stand-in GPU; ``become`` switches to another GPU or TensorRT."""

    def __init__(self, monkeypatch, build_log: Path):
        self.monkeypatch, self.build_log = monkeypatch, build_log
        sys.path.insert(0, str(STANDINS))

    def become(self, cc: str = "8.6", version: str = "10.13.0", gpu: str = "Stand-in RTX") -> None:
        for key, value in device_env(cc, version, gpu, str(self.build_log)).items():
            self.monkeypatch.setenv(key, value)
        _purge()

    @property
    def builds(self) -> int:
        return len(self.build_log.read_text().splitlines()) if self.build_log.exists() else 0

    def close(self) -> None:
        sys.path.remove(str(STANDINS))
        _purge()


def child_env(cache_dir: Path, **device) -> dict:
    """The environment of a child process that sees the stand-ins and the given device."""
    env = dict(os.environ, **device_env(**device))
    env["PYTHONPATH"] = os.pathsep.join([str(STANDINS), str(REPO), env.get("PYTHONPATH", "")])
    env["AOT_CACHE_DIR"] = str(cache_dir)
    env.pop("AOT_ALLOW_ENGINE_BUILD", None)
    return env
