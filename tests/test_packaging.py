"""What a release ships: license, type marker, changelog (text checks: tomllib needs 3.11), and the two
distributions: aot (the compiler) depends on runtime-lite (the runtime) instead of shipping a copy of it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.child_env import child_venv
from tests.source_tree import python_sources

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = (ROOT / "pyproject.toml", ROOT / "runtime_lite" / "pyproject.toml")


def _section(path: Path, name: str) -> str:
    return path.read_text().split(f"[{name}]\n", 1)[1].split("\n[", 1)[0]


def test_license_is_apache_2_and_declared():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0" in text
    for path in PYPROJECTS:
        assert 'license = {text = "Apache-2.0"}' in _section(path, "project")


def test_both_packages_ship_py_typed():
    assert 'aot = ["py.typed"]' in _section(PYPROJECTS[0], "tool.setuptools.package-data")
    assert 'runtime_lite = ["py.typed"]' in _section(PYPROJECTS[1], "tool.setuptools.package-data")
    assert (ROOT / "aot" / "py.typed").is_file() and (ROOT / "runtime_lite" / "py.typed").is_file()


def test_changelog_has_an_unreleased_section():
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()


# --- two distributions: aot depends on runtime-lite instead of shipping it (issue 19, item 8) ---

#: the torchvision guard aot installs beside its package (aot_torchvision_guard.py)
GUARD = ("aot_torchvision_guard.py", "aot-torchvision-guard.pth")
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "aot", "runtime_lite", *GUARD)
README_TEST_COMMAND = "pip install -e ./runtime_lite -e '.[test]' && python -m pytest -q"


def _version() -> str:
    return re.search(r'__version__ = "([^"]+)"', (ROOT / "runtime_lite" / "version.py").read_text()).group(1)


def _pip_env() -> dict[str, str]:
    """The environment for a pip that must see only what a test gives it: no config, no PIP_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=_pip_env())
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of what the two pyprojects build from, so builds never write into the checkout."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        shutil.copytree(path, src / name, ignore=ignore) if path.is_dir() else shutil.copy(path, src / name)
    return src


@pytest.fixture(scope="module")
def wheels(source, tmp_path_factory) -> dict[str, Path]:
    """Both wheels, built offline with this environment's setuptools (the test extra requires one that can)."""
    out = tmp_path_factory.mktemp("wheels")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, source,
         source / "runtime_lite")  # fmt: skip
    found = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(found) == {"aot", "runtime_lite"}, found
    return found


def _metadata(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/" + name))).decode()


def test_aot_wheel_ships_only_aot_and_depends_on_runtime_lite(wheels):
    with zipfile.ZipFile(wheels["aot"]) as z:
        tops = {name.split("/", 1)[0] for name in z.namelist()}
        assert "aot/py.typed" in z.namelist()
    assert tops == {"aot", *GUARD, f"aot-{_version()}.dist-info"}, tops  # no runtime_lite/
    metadata = _metadata(wheels["aot"], "METADATA")
    assert f"Requires-Dist: runtime-lite=={_version()}\n" in metadata
    assert f'Requires-Dist: runtime-lite[serve]=={_version()}; extra == "serve"' in metadata
    for pin in ("ray[serve]==2.60.0", "tritonclient[http]==2.73.0"):
        assert f'Requires-Dist: {pin}; extra == "test"' in metadata
    scripts = _metadata(wheels["aot"], "entry_points.txt")
    assert "aot-build" in scripts and "runtime-lite" not in scripts  # the runtime's script is the runtime's

    with zipfile.ZipFile(wheels["runtime_lite"]) as z:
        tops = {name.split("/", 1)[0] for name in z.namelist()}
        assert "runtime_lite/py.typed" in z.namelist()
        packages = {
            "runtime_lite/" + str(init.relative_to(ROOT / "runtime_lite"))
            for init in python_sources("runtime_lite", "__init__.py")
        }
        assert packages - set(z.namelist()) == set()  # every subpackage: the runtime ships only here
        grpc_api = "runtime_lite/serving/grpc_api/"
        assert {grpc_api + f for f in ("inference.proto", "inference_pb2.py", "inference_pb2_grpc.py")} <= set(
            z.namelist()
        )  # `serve --grpc-port` imports the generated modules; the .proto is their source
    assert tops == {"runtime_lite", f"runtime_lite-{_version()}.dist-info"}, tops
    assert 'Requires-Dist: ray[serve]==2.60.0; extra == "serve"' in _metadata(wheels["runtime_lite"], "METADATA")
    assert "runtime-lite = runtime_lite.tools.cli:entry_point" in _metadata(wheels["runtime_lite"], "entry_points.txt")


def test_uninstalling_aot_leaves_runtime_lite_working(wheels, tmp_path):
    """runtime-lite, then aot, then aot uninstalled: the runtime still imports and its command runs."""
    env_dir = tmp_path / "venv"  # this environment's numpy, msgpack, onnx, pip; the two wheels in the venv
    python = child_venv(env_dir, with_pip=False)
    pip = (python, "-m", "pip")
    where = "import importlib.metadata as m, {0}; print({0}.__file__, m.requires('{1}'))"
    _run(*pip, "install", "-q", "--no-deps", wheels["runtime_lite"])
    _run(*pip, "install", "-q", "--no-deps", wheels["aot"])
    installed = _run(python, "-c", where.format("aot", "aot"), cwd=tmp_path).stdout
    assert installed.startswith(str(env_dir)) and f"'runtime-lite=={_version()}'" in installed, installed
    _run(*pip, "uninstall", "-y", "aot")
    # an older aot outside the venv may still be importable; the venv's own runtime must be the one found
    after = _run(python, "-c", where.format("runtime_lite", "runtime-lite"), cwd=tmp_path).stdout
    assert after.startswith(str(env_dir / "lib")), after
    version = _run(env_dir / "bin" / "runtime-lite", "--version", cwd=tmp_path).stdout
    assert version.strip() == f"runtime-lite {_version()}"


def _stub_wheel(index: Path, name: str, version: str) -> None:
    """A wheel that is only metadata: what a package index offers for ``name``, as pip's resolver sees it."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(index / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}.dist-info/RECORD", "")


def test_runtime_lite_named_on_the_command_line_is_the_only_candidate(source, tmp_path):
    """An index offering runtime-lite (same version, and higher) is never used once ./runtime_lite is named.

    Neither name is ours on PyPI. Resolved by pip itself (dry run, installed packages ignored, no index but a
    stand-in one); `.` alone shows the stand-in's runtime-lite is really in reach.
    """
    index = tmp_path / "index"
    index.mkdir()
    for name, version in (("runtime-lite", _version()), ("runtime-lite", "99.0"), ("numpy", "2.0"),
                          ("msgpack", "1.0"), ("onnx", "1.15"), ("click", "8.1")):  # fmt: skip
        _stub_wheel(index, name, version)
    report = tmp_path / "report.json"

    def chosen(*targets: str) -> str:
        _run(sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--no-index",
             "--find-links", index, "--no-build-isolation", "--report", report, *targets, cwd=source)  # fmt: skip
        (url,) = [i["download_info"]["url"] for i in json.loads(report.read_text())["install"]
                  if i["metadata"]["name"] == "runtime-lite"]  # fmt: skip
        return url

    assert chosen(".") == (index / f"runtime_lite-{_version()}-py3-none-any.whl").as_uri()  # the risk
    for targets in (("./runtime_lite", "."), ("-e", "./runtime_lite", "-e", "."), ("-e", ".", "-e", "./runtime_lite")):
        assert chosen(*targets).rstrip("/") == (source / "runtime_lite").as_uri(), targets


def test_every_documented_install_of_aot_names_runtime_lite():
    """CI runs the README's test command exactly; no command installs aot without ./runtime_lite beside it."""
    assert f"\n{README_TEST_COMMAND}\n" in (ROOT / "README.md").read_text()
    assert f"\n{README_TEST_COMMAND}\n" in (ROOT / ".ci" / "run").read_text()
    documents = [ROOT / "README.md", ROOT / ".ci" / "run", ROOT / "pyproject.toml", *ROOT.glob("docs/*.md"),
                 *ROOT.glob("examples/*.py")]  # fmt: skip
    root_target = re.compile(r"""(?:^|\s)(?:-e\s+)?['"]?\.(?:\[[\w,]+\])?['"]?(?=\s|$|`)""")
    for path in documents:
        for line in path.read_text().splitlines():
            for command in re.findall(r"pip install[^`\n&|;#]*", line):
                if root_target.search(command.removeprefix("pip install")):
                    assert "./runtime_lite" in command, f"{path.name}: {command}"


def test_torchvision_imports_where_the_aot_wheel_is_installed(wheels, tmp_path):
    """The README's install for the torch frontend: aot's wheel beside this torch and the test extra's torchvision.

    Beside the CPU torch, the package index's torchvision (a CUDA build) dies on import with
    "operator torchvision::nms does not exist"; the guard aot's wheel installs lets it finish.
    With the guard off, the import either works (a CPU torchvision, as the README's CPU line
    installs) or fails in exactly that way: the guard is then what made it work.
    """
    python = child_venv(tmp_path / "venv", with_pip=False)
    _run(python, "-m", "pip", "install", "-q", "--no-deps", wheels["aot"])
    script = "import torch, torchvision; print(torchvision.models.resnet18(weights=None).fc.out_features)"
    assert _run(python, "-c", script, cwd=tmp_path).stdout.strip() == "1000"
    off = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env={**_pip_env(), "AOT_TORCHVISION_GUARD": "0"})  # fmt: skip
    assert off.returncode == 0 or "operator torchvision::nms does not exist" in off.stderr, off.stderr[-2000:]
