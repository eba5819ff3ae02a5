"""The wheel ships every subpackage and the bundled data (an installed infersim must work)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "simulator").rglob("__init__.py")}
    assert on_disk <= listed


def test_the_public_api_resolves_every_name_it_lists() -> None:
    import simulator

    assert all(getattr(simulator, name) is not None for name in simulator.__all__)
    assert sorted(dir(simulator)) == sorted(simulator.__all__)


def test_importing_the_package_loads_nothing_else() -> None:
    """``infersim profiles`` must not pay for SimPy, matplotlib or scipy: names load when first used."""
    import subprocess
    import sys

    heavy = "('simpy', 'matplotlib', 'scipy')"
    code = f"import sys, simulator; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
