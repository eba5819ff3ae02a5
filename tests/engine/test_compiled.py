"""The compiled engine (simulator/compiled.py): used only while it matches its sources, and it
simulates exactly what the sources do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import compiled
from simulator.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _fake_build(folder: Path, **changes: object) -> Path:
    """A build folder whose manifest records the current sources and interpreter, then ``changes``."""
    folder.mkdir()
    manifest = {"extension_suffix": compiled._extension_suffix(), "sources": compiled._digests(), **changes}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_build_stands_in_for_the_sources_only_while_it_was_compiled_from_them(tmp_path: Path) -> None:
    assert compiled.current(_fake_build(tmp_path / "fresh"))
    edited = {**compiled._digests(), "simulator.engine.replica": "0" * 64}
    assert "sources changed" in compiled.status(_fake_build(tmp_path / "edited", sources=edited))
    assert "another Python" in compiled.status(_fake_build(tmp_path / "other", extension_suffix=".cpython-39.so"))
    assert "no compiled build" in compiled.status(tmp_path / "missing")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    assert "no compiled build" in compiled.status(tmp_path / "broken")


def test_a_build_is_loaded_only_with_every_extension_file(tmp_path: Path) -> None:
    assert compiled._extension_files(_fake_build(tmp_path / "manifest-only")) is None
    if compiled.current():
        files = compiled._extension_files(compiled.BUILD)
        assert files is not None
        assert set(files) == {*compiled.MODULES, f"{compiled.GROUP}__mypyc"}


def test_the_classes_meant_to_be_extended_take_subclasses_written_in_python() -> None:
    """A batching policy and a variant of the physics stay open to code outside the package."""
    from simulator.analytic.step_time import StepCostModel
    from simulator.engine.scheduler import PagedBatching

    for base in (PagedBatching, StepCostModel):
        assert issubclass(type(f"My{base.__name__}", (base,), {}), base)


def test_compile_reports_the_engine_and_a_failed_build_leaves_the_sources_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", "--status"]) == 0
    assert capsys.readouterr().out == f"engine: {compiled.status()}\n"

    def no_compiler(destination: Path = compiled.BUILD) -> None:
        raise RuntimeError("gcc: not found")

    monkeypatch.setattr(compiled, "build", no_compiler)
    monkeypatch.setattr(compiled, "current", lambda build=compiled.BUILD: False)
    assert main(["compile", "--if-stale"]) == 0  # not an error: the engine runs from its sources
    assert "not compiled (RuntimeError: gcc: not found); it runs as pure Python" in capsys.readouterr().out


def _run(out: Path, *, pure: bool, arguments: tuple[str, ...]) -> None:
    environment = {key: value for key, value in os.environ.items() if key != compiled.PURE_PYTHON_VARIABLE}
    if pure:
        environment[compiled.PURE_PYTHON_VARIABLE] = "1"
    command = [sys.executable, "-m", "simulator", "run", *arguments, "-o", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


RUNS = {
    # priorities, several classes, speculative decoding (random acceptance per verify pass)
    "speculative": ("scenarios/mixed-classes.yaml", "--set", "run.max_requests=300",
                    "--set", "deployment.speculative.draft=eagle", "--set", "deployment.speculative.tokens_proposed=3"),
    # agents with prefix caching on a small HBM: preemption and KV moving between tiers
    "kv-pressure": ("scenarios/agents-kv-offload.yaml", "--set", "run.max_requests=400",
                    "--set", "deployment.hardware.memory.hbm.capacity=100 GB"),
}  # fmt: skip


@pytest.mark.skipif(not compiled.current(), reason="no current compiled build (`infersim compile`)")
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_compiled_engine_writes_the_same_bytes_as_the_sources(name: str, tmp_path: Path) -> None:
    _run(tmp_path / "pure", pure=True, arguments=RUNS[name])
    _run(tmp_path / "compiled", pure=False, arguments=RUNS[name])
    for file in ("requests.csv", "levels.csv", "summary.json"):
        assert (tmp_path / "compiled" / file).read_bytes() == (tmp_path / "pure" / file).read_bytes(), file


@pytest.mark.skipif(
    not compiled.current() or bool(os.environ.get(compiled.PURE_PYTHON_VARIABLE)),
    reason="no current compiled build, or the pure engine was asked for",
)
def test_with_a_current_build_the_engine_modules_load_from_it() -> None:
    import simulator.engine.replica
    import simulator.engine.scheduler

    for module in (simulator.engine.replica, simulator.engine.scheduler):
        assert Path(module.__file__ or "").is_relative_to(compiled.BUILD)
