"""What a release ships besides code: license, type marker, changelog (text checks: tomllib needs 3.11)."""

from __future__ import annotations

from pathlib import Path

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
    for path in PYPROJECTS:
        assert 'runtime_lite = ["py.typed"]' in _section(path, "tool.setuptools.package-data")
    assert (ROOT / "aot" / "py.typed").is_file() and (ROOT / "runtime_lite" / "py.typed").is_file()


def test_changelog_has_an_unreleased_section():
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()
