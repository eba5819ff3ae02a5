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


def test_the_run_command_imports_only_what_a_run_uses() -> None:
    """``infersim run`` starts without plotting, fitting, data-frame or cluster libraries and without
    compare's and plan's executors and search, and its parser without pydantic (``--help``): each
    is start-up CPU paid by every run."""
    import subprocess
    import sys

    heavy = "('scipy', 'matplotlib', 'pandas', 'dask', 'distributed', 'pyarrow', 'concurrent', 'multiprocessing')"
    ours = "('simulator.execution', 'simulator.planning', 'simulator.compare', 'simulator.report')"
    code = (
        "import importlib, sys\n"
        "from simulator.cli.parser import build_parser\n"
        "args = build_parser().parse_args(['run', 'scenario.yaml'])\n"
        "parsing = 'pydantic' in sys.modules\n"
        "importlib.import_module(args.handler.split(':')[0])\n"
        f"print(parsing, sorted(m for m in sys.modules if m.split('.')[0] in {heavy} or m in {ours}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False []"
