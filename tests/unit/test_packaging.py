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
    ours = (
        "('simulator.studies.execution', 'simulator.studies.planning', 'simulator.studies.compare', 'simulator.report')"
    )
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


def test_no_public_name_is_both_a_module_and_a_function() -> None:
    """Every name of ``simulator.__all__`` is what the README documents (a function stays a function
    after the package's modules are imported: no submodule of ``simulator`` shadows it), and no
    module at the top of the package has the name of a public function."""
    import importlib
    import inspect
    import pkgutil

    import simulator

    for info in pkgutil.walk_packages(simulator.__path__, "simulator."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    top = {info.name for info in pkgutil.iter_modules(simulator.__path__)}
    for name in simulator.__all__:
        value = getattr(simulator, name)
        if name in ("plots", "roofline"):  # documented as modules
            assert inspect.ismodule(value), name
        elif name != "__version__":
            assert not inspect.ismodule(value) and name not in top, name
