"""Child virtual environments that see this environment's packages, venv or not.

``venv.create(..., system_site_packages=True)`` exposes the *base interpreter's*
site-packages: run from inside a venv (as users run the tests), the child would miss
every package installed in that venv (numpy, msgpack, the editable aot). Instead the
child gets its own site-packages first and this environment's after it, through a .pth
line that runs ``site.addsitedir`` (so this environment's own .pth files, editable
installs among them, are processed too).
"""

from __future__ import annotations

import site
import sys
import sysconfig
import venv
from pathlib import Path


def child_venv(env_dir: Path, *, with_pip: bool) -> Path:
    """Create a venv at ``env_dir`` layered over this environment; return its python."""
    venv.create(env_dir, with_pip=with_pip)
    python = env_dir / "bin" / "python"
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    parents = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")]) if Path(p).is_dir()]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
    (purelib / "_parent_environment.pth").write_text(lines)
    assert python.exists(), f"venv at {env_dir} has no python ({sys.executable} made it)"
    return python
