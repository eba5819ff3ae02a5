"""The engine's compiled build: its hot modules compiled to C by mypyc, used only while the
package's sources are those it was compiled from.

The modules in :data:`MODULES` are plain, type-checked Python, and stay the reference: mypyc
(the compiler of mypy itself and black) translates them to C with the same semantics, float for
float (``-ffp-contract=off``: no fused multiply-adds), so a run gives byte-identical result
files either way (``tests/engine/test_compiled.py`` checks it). Compiled, a simulation takes
about a third of the CPU. What changes for code outside: a compiled class holds its declared
types (a :class:`~simulator.engine.request.Request`'s token counts are Python ``int``\\ s, and a
numpy integer given to it directly raises ``TypeError``), has no ``__dict__``, does not pickle, and
is final unless opened below. Where a load hands values in, the engine accepts and refuses the
same either way: ``ClassSource.submit`` turns any integer (numpy's too) into an ``int`` and
refuses a float with ``TypeError``, compiled or not (``tests/engine/test_compiled.py``).

- ``infersim compile`` (run by ``make``) builds them into :data:`BUILD_DIR` (``build/compiled/``
  beside the package): one shared library for the group and a small extension module per
  compiled module, with a manifest holding the SHA-256 of every ``.py`` file of the package
  (compiled code relies on the types of the modules it imports, so any edit counts), the
  interpreter's extension suffix and the interpreter itself (its ``sys.version`` and executable:
  two builds of Python 3.11 share a suffix, not their internals). A build is staged in a
  temporary folder and swapped in.
- ``import simulator`` calls :func:`install`: when the manifest matches the sources on disk and
  this interpreter, and every extension file is there, an import hook loads :data:`MODULES`
  from the build; otherwise every module runs from its source. An edit therefore runs as
  written until the next ``make``, never a stale copy.
- ``INFERSIM_PURE_PYTHON=1`` always runs the sources (for cProfile, a debugger, or a
  comparison). Importing a compiled module's source file by path (not by name) next to the
  compiled engine gives two copies of its classes; the test configuration keeps these files
  out of doctest collection for that reason (they have no doctests).

Code outside the package may subclass :class:`~simulator.engine.batching.paged.PagedBatching`,
:class:`~simulator.engine.batching.continuous.ContinuousBatchingPolicy` and
:class:`~simulator.engine.batching.static.StaticBatchingPolicy` (batching policies) and
:class:`~simulator.analytic.step_time.StepCostModel` (compiled with
``allow_interpreted_subclasses``); the other compiled classes are final, so the engine calls
their methods directly, and a patch of one of their methods goes unseen by compiled callers.
The registries (batching policies, router choices, load starters) are plain dicts and
single-dispatch functions, open to extension and to a test's patch either way.
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
import sysconfig
import tempfile
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

#: The modules compiled: the replica's hot path, the request path (the request, the factory, the
#: router, the loads and agents that submit requests), and the step-time model whose misses of the
#: fast path's cache (new batch shapes: prompts of every length) it evaluates.
MODULES = (
    "simulator.records.series",
    "simulator.analytic.step_time",
    "simulator.analytic.step_fast",
    "simulator.engine.kv.blocks",
    "simulator.engine.batching.protocol",
    "simulator.engine.batching.queue",
    "simulator.engine.batching.slots",
    "simulator.engine.batching.paged",
    "simulator.engine.batching.continuous",
    "simulator.engine.batching.static",
    "simulator.engine.recorder",
    "simulator.engine.replica",
    "simulator.engine.fleet",
    "simulator.engine.clients",
    "simulator.engine.request",
    "simulator.engine.load",
    "simulator.engine.agents",
)
#: mypyc's shared library for the group is the top-level module ``<GROUP>__mypyc``.
GROUP = "infersim_engine"
PACKAGE = Path(__file__).resolve().parent
BUILD_DIR = PACKAGE.parent / "build" / "compiled"
PURE_PYTHON_VARIABLE = "INFERSIM_PURE_PYTHON"
#: C flags beyond mypyc's: keep every multiply and add rounded on its own, as Python does.
C_FLAGS = ["-ffp-contract=off"]


def _source(module: str) -> Path:
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def _sources_digest() -> str:
    """SHA-256 over every ``.py`` file of the package, each with its path (about 5 ms)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _extension_suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def _interpreter() -> str:
    """The interpreter a build is for: its version and build (``sys.version``) and its executable.
    Two builds of one minor version share an extension suffix but not their internals."""
    return f"{sys.version} at {os.path.realpath(sys.executable)}"


def _manifest(folder: Path) -> dict[str, object] | None:
    try:
        found = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _extension_files(folder: Path) -> dict[str, Path] | None:
    """The extension file of each module, and of the group's shared library, if all exist in ``folder``."""
    names = (*MODULES, f"{GROUP}__mypyc")
    files = {name: folder.joinpath(*name.split(".")).with_suffix(_extension_suffix()) for name in names}
    return files if all(file.is_file() for file in files.values()) else None


def _stale_reason(folder: Path) -> str | None:
    """Why the build in ``folder`` cannot stand in for the sources now, or None if it can."""
    manifest = _manifest(folder)
    if manifest is None:
        return "no compiled build: run make"
    if _extension_files(folder) is None:
        return "the compiled build lacks a module (the list of compiled modules changed?): run make"
    if manifest.get("extension_suffix") != _extension_suffix() or manifest.get("python") != _interpreter():
        return "the compiled build is for another Python: run make"
    if manifest.get("sources") != _sources_digest():
        return "sources changed since the compiled build: run make"
    return None


def _pure_requested() -> bool:
    return os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")


def current(folder: Path = BUILD_DIR) -> bool:
    """Whether ``folder`` holds a whole build of the sources on disk, for this interpreter."""
    return _stale_reason(folder) is None


def in_use(folder: Path = BUILD_DIR) -> bool:
    """Whether a process started now loads :data:`MODULES` from ``folder`` (:func:`install`)."""
    return not _pure_requested() and current(folder)


def status(folder: Path = BUILD_DIR) -> str:
    """Which engine this process loads: ``compiled (mypyc)``, or ``pure Python`` and why."""
    if _pure_requested():
        return f"pure Python ({PURE_PYTHON_VARIABLE} is set)"
    stale = _stale_reason(folder)
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


def install(folder: Path = BUILD_DIR) -> bool:
    """Load :data:`MODULES` from ``folder`` from now on, if it is current (:func:`status`) and
    none of them is imported yet."""
    if _pure_requested() or any(module in sys.modules for module in MODULES) or _stale_reason(folder):
        return False  # (the cheap checks first: the staleness check hashes the package)
    files = _extension_files(folder)
    assert files is not None  # a current build has them all
    sys.meta_path.insert(0, _CompiledFinder(files))
    return True


def missing_tools() -> str | None:
    """What the build lacks on this machine (a C compiler, Python's headers), or None."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h)"
    return None


def build(destination: Path = BUILD_DIR) -> None:
    """Compile :data:`MODULES` with mypyc into ``destination`` (replaced whole, with its manifest).

    mypy reads its settings (``pyproject.toml``) from the current folder, so this changes to the
    repository's root while it runs.
    """
    missing = missing_tools()
    if missing is not None:
        raise RuntimeError(missing)
    from mypyc.build import mypycify  # build-time only: the ``compiled`` extra
    from setuptools import Distribution

    destination.parent.mkdir(parents=True, exist_ok=True)
    manifest = {"extension_suffix": _extension_suffix(), "python": _interpreter(), "sources": _sources_digest()}
    with (
        contextlib.chdir(PACKAGE.parent),
        tempfile.TemporaryDirectory(dir=destination.parent, prefix=".compiling-") as folder,
    ):
        work = Path(folder)
        extensions = mypycify(
            [str(_source(module)) for module in MODULES], group_name=GROUP, target_dir=str(work / "c")
        )
        for extension in extensions:
            extension.extra_compile_args = [*extension.extra_compile_args, *C_FLAGS]
        distribution = Distribution({"ext_modules": extensions})
        command = distribution.get_command_obj("build_ext")
        command.build_lib = str(work / "lib")
        command.build_temp = str(work / "temp")
        distribution.run_command("build_ext")
        (work / "lib" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if destination.exists():  # set aside first: the new build moves in with one rename
            destination.rename(work / "previous")
        (work / "lib").rename(destination)
