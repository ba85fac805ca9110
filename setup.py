"""Everything else is in pyproject.toml; this file only adds the torchvision guard's ``.pth`` to the wheel.

A ``.pth`` must sit at the top of site-packages, which no pyproject.toml setting reaches:
build_py copies it there (aot_torchvision_guard.py says why it exists). Editable installs
skip it, as setuptools' editable wheels carry no such file.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

GUARD_PTH = "aot-torchvision-guard.pth"


class BuildPyWithGuard(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(GUARD_PTH, str(Path(self.build_lib) / GUARD_PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / GUARD_PTH)]


setup(cmdclass={"build_py": BuildPyWithGuard})
