"""Failures of the operating system, through the real command line: one line naming the path.

A name too long, a loop of symbolic links, the current folder deleted: exit 2, as other bad
input; standard output on a full device: exit 74 (``EX_IOERR``). Never a traceback or an
"internal error", and every file the user had byte-identical afterwards (the sandbox hashed
before and after). The rules are those of :mod:`simulator.cli` (its module docstring). A failed
``infersim compile`` says which engine runs: an earlier build only while it matches the sources.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simulator import compiled
from simulator.cli import main
from tests.fuzz.conftest import SCENARIO
from tests.fuzz.test_hostile_folders import assert_one_error, infersim, tree

LONG_NAME = "a" * 300  # over the 255 bytes a name may have on Linux file systems


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("\\chapter{Results}\n")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(("run", "s.yaml", "-o", LONG_NAME), (f"{LONG_NAME}: File name too long",), id="name-too-long"),
        pytest.param(("run", "s.yaml", "-o", f"mine/{LONG_NAME}/out"), ("File name too long",),
                     id="folder-name-too-long"),
        pytest.param(("run", "s.yaml", "-o", "loop"), ("loop: Too many levels of symbolic links",),
                     id="symlink-loop"),
        pytest.param(("run", "s.yaml", "-o", "loop/out"), ("loop/out: Too many levels of symbolic links",),
                     id="under-a-symlink-loop"),
        pytest.param(("report", "loop"), ("loop: Too many levels of symbolic links",), id="report-symlink-loop"),
        pytest.param(("run", "s.yaml", "-o", "dangling"), ("dangling: a symbolic link to 'nowhere'",),
                     id="dangling-link"),
    ],
)  # fmt: skip
def test_a_folder_the_system_cannot_look_up_is_one_line(
    sandbox: Path, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    (sandbox / "loop").symlink_to("loop")
    (sandbox / "dangling").symlink_to("nowhere")
    before = tree(sandbox)
    assert_one_error(infersim(sandbox, *argv), 2, *expected)
    assert tree(sandbox) == before


def test_a_deleted_current_folder_is_one_line(sandbox: Path) -> None:
    """Run from a folder deleted meanwhile (absolute paths for the rest): exit 2 naming it."""
    (sandbox / "gone").mkdir()
    script = (
        "import os, sys, runpy; os.chdir('gone'); os.rmdir(os.path.join('..', 'gone')); "
        f"sys.argv = ['infersim', 'run', {str(sandbox / 's.yaml')!r}, '-o', {str(sandbox / 'out')!r}]; "
        "runpy.run_module('simulator', run_name='__main__')"
    )
    before = tree(sandbox)
    before.pop("gone")
    done = subprocess.run([sys.executable, "-c", script], cwd=sandbox, capture_output=True, text=True, timeout=120)
    assert_one_error(done, 2, "the current folder: No such file or directory")
    assert tree(sandbox) == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv", [("profiles",), ("compile", "--status"), ("run", "s.yaml", "-o", "out")], ids=["profiles", "status", "run"]
)
def test_standard_output_on_a_full_device_is_one_line(sandbox: Path, argv: tuple[str, ...]) -> None:
    """``infersim ... > /dev/full``: exit 74, one line naming standard output; the user's files as they were."""
    before = tree(sandbox)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "simulator", *argv], cwd=sandbox, stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=120,
        )  # fmt: skip
    done.stdout = ""
    assert_one_error(done, 74, "standard output: No space left on device")
    assert {k: v for k, v in tree(sandbox).items() if not k.startswith("out")} == before


@pytest.mark.parametrize(("earlier_build_current", "engine"), [(True, "it runs compiled (mypyc)"),
                                                               (False, "it runs as pure Python")])  # fmt: skip
def test_a_failed_compile_says_which_engine_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], earlier_build_current: bool, engine: str
) -> None:
    """A failed build leaves the earlier one in use only while it matches the sources, and says so."""

    def fail(destination: Path = compiled.BUILD_DIR) -> None:
        raise RuntimeError("no C compiler (cc)")

    monkeypatch.setattr(compiled, "build", fail)
    monkeypatch.delenv(compiled.PURE_PYTHON_VARIABLE, raising=False)
    monkeypatch.setattr(compiled, "current", lambda folder=compiled.BUILD_DIR: earlier_build_current)
    assert main(["compile"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("engine: not compiled (RuntimeError: no C compiler (cc)); ") and engine in out
    assert ("pure Python" in out) is not earlier_build_current
