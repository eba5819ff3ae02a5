"""The engine's compiled build: its hot modules compiled to C by mypyc, used only while their
sources are unchanged.

The modules in :data:`MODULES` are plain, type-checked Python, and stay the reference: mypyc
(the compiler of mypy itself and black) translates them to one C extension with the same
semantics, float for float, so a run gives byte-identical result files either way
(``tests/engine/test_compiled.py`` checks it). Compiled, a simulation takes about half the
CPU; nothing else changes.

- ``infersim compile`` (run by ``make``) compiles them into
  ``build/compiled/`` beside the package, with a manifest: the SHA-256 of each source it
  compiled and the interpreter's extension tag. A build is written to a temporary folder and
  moved into place whole.
- ``import simulator`` calls :func:`install`: when the manifest matches the sources on disk and
  this interpreter, an import hook loads those modules from the build; otherwise (no build, an
  edited module, another Python) every module runs from its source. An edit therefore runs as
  written until the next ``make``, never a stale copy.
- ``INFERSIM_PURE_PYTHON=1`` always runs the sources (for cProfile, a debugger, or a
  comparison).

Code outside the package may subclass :class:`~simulator.engine.scheduler.PagedBatching` (a
batching policy) and :class:`~simulator.analytic.step_time.StepCostModel` (compiled with
``allow_interpreted_subclasses``); the other compiled classes are final, so the engine calls
their methods directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

#: The modules compiled: the replica's hot path, and the step-time model whose misses of the
#: fast path's cache (new batch shapes: prompts of every length) it evaluates.
MODULES = (
    "simulator.series",
    "simulator.analytic.step_time",
    "simulator.analytic.step_fast",
    "simulator.engine.kv",
    "simulator.engine.scheduler",
    "simulator.engine.recorder",
    "simulator.engine.replica",
)
#: mypyc's shared library for the group is the top-level module ``<GROUP>__mypyc``.
GROUP = "infersim_engine"
PACKAGE = Path(__file__).resolve().parent
BUILD = PACKAGE.parent / "build" / "compiled"
PURE_PYTHON_VARIABLE = "INFERSIM_PURE_PYTHON"


def _source(module: str) -> Path:
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def _digests() -> dict[str, str]:
    return {module: hashlib.sha256(_source(module).read_bytes()).hexdigest() for module in MODULES}


def _extension_suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def _manifest(build: Path) -> dict[str, object] | None:
    try:
        found = json.loads((build / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _stale(build: Path) -> str | None:
    """Why the build in ``build`` cannot stand in for the sources now, or None if it can."""
    manifest = _manifest(build)
    if manifest is None:
        return "no compiled build: run make"
    if manifest.get("extension_suffix") != _extension_suffix():
        return "the compiled build is for another Python: run make"
    if manifest.get("sources") != _digests():
        return "sources changed since the compiled build: run make"
    return None


def current(build: Path = BUILD) -> bool:
    """Whether ``build`` was compiled from the sources on disk, for this interpreter."""
    return _stale(build) is None


def status(build: Path = BUILD) -> str:
    """Which engine this process loads: ``compiled (mypyc)``, or ``pure Python`` and why."""
    if os.environ.get(PURE_PYTHON_VARIABLE):
        return f"pure Python ({PURE_PYTHON_VARIABLE} is set)"
    stale = _stale(build)
    return "compiled (mypyc)" if stale is None else f"pure Python ({stale})"


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and their shared library) in one build folder."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        file = self.files.get(fullname)
        return None if file is None else importlib.util.spec_from_file_location(fullname, file)


def _extension_files(build: Path) -> dict[str, Path] | None:
    """The extension file of each module, and of the group's shared library, if all exist in ``build``."""
    names = (*MODULES, f"{GROUP}__mypyc")
    files = {name: build.joinpath(*name.split(".")).with_suffix(_extension_suffix()) for name in names}
    return files if all(file.is_file() for file in files.values()) else None


def install(build: Path = BUILD) -> bool:
    """Load :data:`MODULES` from ``build`` from now on, if it is current (:func:`status`)."""
    if os.environ.get(PURE_PYTHON_VARIABLE) or _stale(build) or any(module in sys.modules for module in MODULES):
        return False
    files = _extension_files(build)
    if files is None:
        return False
    sys.meta_path.insert(0, _CompiledFinder(files))
    return True


def build(destination: Path = BUILD) -> None:
    """Compile :data:`MODULES` with mypyc into ``destination`` (replaced whole, with its manifest)."""
    from mypyc.build import mypycify  # build-time only: the ``compiled`` extra
    from setuptools import Distribution

    destination.parent.mkdir(parents=True, exist_ok=True)
    digests = _digests()
    with (
        contextlib.chdir(PACKAGE.parent),  # mypy reads its settings (pyproject.toml) from here
        tempfile.TemporaryDirectory(dir=destination.parent, prefix=".compiling-") as folder,
    ):
        work = Path(folder)
        extensions = mypycify(
            [str(_source(module)) for module in MODULES], group_name=GROUP, target_dir=str(work / "c")
        )
        distribution = Distribution({"ext_modules": extensions})
        command = distribution.get_command_obj("build_ext")
        command.build_lib = str(work / "lib")
        command.build_temp = str(work / "temp")
        distribution.run_command("build_ext")
        manifest = {"extension_suffix": _extension_suffix(), "sources": digests}
        (work / "lib" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(destination, ignore_errors=True)
        (work / "lib").rename(destination)
