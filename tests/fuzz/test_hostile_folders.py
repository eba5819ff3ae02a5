"""Hostile results folders, through the real command line: infersim touches nothing outside them.

A results folder may come from someone else (issue "Trust nothing from outside"): its marker's
list of files, its sub-folders and the names in it may be planted. Each case plants one thing in
a copy of a real run folder (``res``), beside a victim file outside it and a folder elsewhere,
runs ``infersim`` in a child process, and asserts the exit status, the message, and that every
file the user had is byte-identical afterwards: the whole sandbox (``res`` included) is hashed
before and after, never following a symbolic link. A refusal (exit 2) changes nothing at all; a
command that may proceed changes only infersim's own files.

The rules are those of :mod:`simulator.cli.output` ("A listing read back is checked, never
trusted", "Leftovers cleaned, and only they").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.cli.output import LOCK, MARKER
from tests.fuzz.conftest import ERROR, INTERNAL, SCENARIO, TRACEBACK

VICTIM = b"the user's own file, outside the results folder\n"
PICTURE = b"the user's own picture\n"


def tree(root: Path) -> dict[str, str]:
    """Every folder, link (its target) and file (its SHA-256) under ``root``, never following a link."""
    found: dict[str, str] = {}
    for where, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(where) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                found[key] = "folder"
            else:
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def infersim(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``infersim ARGV`` in a child process, in ``root`` (the environment's ``simulator``)."""
    command = [sys.executable, "-m", "simulator", *argv]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120)


def assert_one_error(done: subprocess.CompletedProcess[str], code: int, *expected: str) -> None:
    """Exit ``code`` with one ``infersim: error:`` line holding every expected text; no traceback."""
    report = f"exit {done.returncode}\nstderr: {done.stderr}\nstdout: {done.stdout[:400]}"
    assert done.returncode == code, report
    assert TRACEBACK not in done.stderr and INTERNAL not in done.stderr, report
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        line for line in done.stderr.splitlines() if line.startswith(ERROR)
    ], report
    assert done.stderr.count(ERROR) == 1, report
    for text in expected:
        assert text in done.stderr, f"expected {text!r} in the message\n{report}"


@pytest.fixture
def sandbox(tmp_path: Path, results_folder: Path) -> Path:
    """``res`` (a run's results), ``s.yaml``, ``victim.txt`` beside ``res`` and ``elsewhere/`` with
    the user's files."""
    shutil.copytree(results_folder, tmp_path / "res", symlinks=True)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "victim.txt").write_bytes(VICTIM)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "01.png").write_bytes(PICTURE)
    (tmp_path / "elsewhere" / "victim.txt").write_bytes(VICTIM)
    return tmp_path


def listing(*entries: str, command: str = "") -> Callable[[Path], None]:
    """Plant ``entries`` (``@ROOT@``: the sandbox) in the marker's list (and ``command`` as its writer)."""

    def plant(root: Path) -> None:
        marker = json.loads((root / "res" / MARKER).read_text())
        marker["files"] += [entry.replace("@ROOT@", str(root)) for entry in entries]
        if command:
            marker["command"] = command
        (root / "res" / MARKER).write_text(json.dumps(marker))

    return plant


def link(name: str, target: str, *then: Callable[[Path], None]) -> Callable[[Path], None]:
    """Plant ``res/NAME`` as a symbolic link to ``target`` (relative to ``res``), then ``then``."""

    def plant(root: Path) -> None:
        (root / "res" / name).unlink(missing_ok=True)
        (root / "res" / name).symlink_to(target)
        for step in then:
            step(root)

    return plant


def marker_files(value: object) -> Callable[[Path], None]:
    def plant(root: Path) -> None:
        marker = json.loads((root / "res" / MARKER).read_text())
        marker["files"] = value
        (root / "res" / MARKER).write_text(json.dumps(marker))

    return plant


RERUN = ("run", "s.yaml", "-o", "res")
REPORT = ("report", "res")
EXPORT = ("export", "res")
NOT_TRUSTED = "refusing to touch anything in res"

REFUSED = [
    pytest.param(listing("../victim.txt"), RERUN, ("res/.infersim-results.json", "'../victim.txt'", "'..'",
                 NOT_TRUSTED), id="listing-parent-rerun"),
    pytest.param(listing("@ROOT@/victim.txt"), RERUN, ("an absolute path", "victim.txt"), id="listing-absolute-rerun"),
    pytest.param(listing("figures/../../victim.txt"), REPORT, ("'figures/../../victim.txt'", NOT_TRUSTED),
                 id="listing-figures-dotdot-report"),
    pytest.param(link("linked", "../elsewhere", listing("linked/victim.txt")), RERUN,
                 ("'linked/victim.txt'", "linked is a symbolic link"), id="listing-through-linked-folder"),
    pytest.param(link("figures", "../elsewhere", listing("figures/01.png")), REPORT,
                 ("'figures/01.png'", "figures is a symbolic link"), id="listing-through-linked-figures-report"),
    pytest.param(listing("../victim.txt", command="plan"), (*RERUN, "--overwrite"), ("'../victim.txt'",),
                 id="listing-parent-overwrite-another-commands"),
    pytest.param(listing("../victim.txt"), EXPORT, ("'../victim.txt'", NOT_TRUSTED), id="listing-parent-export"),
    pytest.param(listing(".infersim-staging-1-0123abcd/x"), RERUN, ("infersim's own working files",),
                 id="listing-a-staging-folder"),
    pytest.param(marker_files("../victim.txt"), RERUN, ("res/.infersim-results.json", "expected a list"),
                 id="listing-not-a-list"),
    pytest.param(link("figures", "../elsewhere"), REPORT, ("figures is a symbolic link", "figures/01.png"),
                 id="figures-linked-to-another-folder"),
    pytest.param(link(LOCK, "../made-by-infersim.txt"), REPORT, ("res/.infersim-results.lock", "symbolic link"),
                 id="lock-linked-outside"),
]  # fmt: skip


@pytest.mark.parametrize(("plant", "argv", "expected"), REFUSED)
def test_a_planted_results_folder_is_refused_and_nothing_is_touched(
    sandbox: Path, plant: Callable[[Path], None], argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """A listing naming anything outside the folder, or a path through a linked sub-folder: exit 2
    naming the folder, the marker and the entry, before anything anywhere is touched."""
    plant(sandbox)
    before = tree(sandbox)
    assert_one_error(infersim(sandbox, *argv), 2, *expected)
    assert tree(sandbox) == before


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.mark.parametrize("argv", [RERUN, REPORT], ids=["rerun", "report"])
def test_a_users_folder_named_like_a_staging_folder_is_left_alone(sandbox: Path, argv: tuple[str, ...]) -> None:
    """Folders named with the staging prefix, one exactly as a dead writer's would be (but without
    the sentinel infersim writes first into each), are the user's: the command succeeds and they stay."""
    for name in (".infersim-staging-notes", f".infersim-staging-{_dead_pid()}-0123abcd"):
        (sandbox / "res" / name).mkdir()
        (sandbox / "res" / name / "thesis.tex").write_bytes(VICTIM)
    before = tree(sandbox)
    done = infersim(sandbox, *argv)
    assert done.returncode == 0, done.stderr
    written = json.loads((sandbox / "res" / MARKER).read_text())["files"]
    infersims = {f"res/{name}" for name in [*written, MARKER, LOCK, "figures"]}

    def users(found: dict[str, str]) -> dict[str, str]:
        return {key: value for key, value in found.items() if key not in infersims}

    assert users(tree(sandbox)) == users(before)
