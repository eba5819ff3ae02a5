"""The compiled engine (simulator/compiled.py): used only while it matches the sources, and it
simulates exactly what the sources do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from simulator import compiled
from simulator.analytic.step_time import BatchAggregates, PassTimes, StepCostModel
from simulator.cli import main
from simulator.config.loading import Catalog
from tests.conftest import deploy

ROOT = Path(__file__).resolve().parents[2]
IN_USE = compiled.current() and not compiled._pure_requested()


def _fake_build(folder: Path, **changes: object) -> Path:
    """A build folder: a manifest of the current sources and interpreter (then ``changes``), and
    empty files where the extensions go."""
    names = (*compiled.MODULES, f"{compiled.GROUP}__mypyc")
    for name in names:
        file = folder.joinpath(*name.split(".")).with_suffix(compiled._extension_suffix())
        file.parent.mkdir(parents=True, exist_ok=True)
        file.touch()
    manifest = {
        "extension_suffix": compiled._extension_suffix(), "python": compiled._interpreter(),
        "sources": compiled._sources_digest(), **changes,
    }  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _why_not(folder: Path) -> str:
    """Why the build in ``folder`` would not be used (empty if it would), whatever the environment."""
    return compiled._stale_reason(folder) or ""


def test_a_build_stands_in_for_the_sources_only_while_it_was_compiled_from_them(tmp_path: Path) -> None:
    assert compiled.current(_fake_build(tmp_path / "fresh"))
    assert "sources changed" in _why_not(_fake_build(tmp_path / "edited", sources="0" * 64))
    assert "another Python" in _why_not(_fake_build(tmp_path / "other", extension_suffix=".cpython-39.so"))
    # another build of the same minor version (a distribution's python3 beside pyenv's): same suffix
    assert "another Python" in _why_not(_fake_build(tmp_path / "patch", python="3.11.2 (main) at /usr/bin/python3.11"))
    assert "no compiled build" in _why_not(tmp_path / "missing")
    broken = _fake_build(tmp_path / "broken")
    (broken / "manifest.json").write_text("{not json")
    assert "no compiled build" in _why_not(broken)
    partial = _fake_build(tmp_path / "partial")
    next(iter(compiled._extension_files(partial).values())).unlink()  # type: ignore[union-attr]
    assert "lacks a module" in _why_not(partial)


def test_any_edit_to_the_package_changes_the_digest_the_build_is_checked_against(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled code relies on the types of the modules it imports, so an edit anywhere counts."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "a.py").write_text("x: int = 1\n")
    monkeypatch.setattr(compiled, "PACKAGE", tmp_path)
    first = compiled._sources_digest()
    assert compiled._sources_digest() == first
    (tmp_path / "engine" / "a.py").write_text("x: float = 1.0\n")
    assert compiled._sources_digest() != first


@pytest.mark.parametrize(("value", "pure"), [("1", True), ("yes", True), ("0", False), ("", False)])
def test_the_pure_engine_is_asked_for_by_a_value_other_than_0(
    value: str, pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(compiled.PURE_PYTHON_VARIABLE, value)
    assert compiled._pure_requested() is pure
    if pure:
        assert not compiled.install()


def test_compile_reports_the_engine_and_a_failed_build_leaves_the_sources_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", "--status"]) == 0
    assert capsys.readouterr().out == f"engine: {compiled.status()}\n"
    monkeypatch.setattr(compiled, "missing_tools", lambda: "no C compiler (gcc)")
    monkeypatch.setattr(compiled, "current", lambda folder=compiled.BUILD_DIR: False)
    assert main(["compile", "--if-stale"]) == 0  # not an error: the engine runs from its sources
    assert "not compiled (RuntimeError: no C compiler (gcc)); it runs as pure Python" in capsys.readouterr().out


def test_every_compiled_module_is_kept_out_of_doctest_collection() -> None:
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    for module in compiled.MODULES:
        path = compiled._source(module).relative_to(ROOT).as_posix()
        assert f"--ignore={path}" in addopts.split()
        assert ">>>" not in compiled._source(module).read_text()  # no doctest is lost


@pytest.mark.skipif(not IN_USE, reason=f"engine: {compiled.status()}")
def test_with_a_current_build_every_compiled_module_loads_from_it() -> None:
    for name in compiled.MODULES:
        module = sys.modules.get(name) or __import__(name, fromlist=["_"])
        assert Path(module.__file__ or "").is_relative_to(compiled.BUILD_DIR), name


def test_a_physics_variant_written_in_python_is_what_the_compiled_model_runs() -> None:
    """StepCostModel takes Python subclasses, and its own (compiled) methods call their overrides."""

    class TwiceAsSlow(StepCostModel):
        def pass_times(self, batch: BatchAggregates) -> PassTimes:
            times = super().pass_times(batch)
            return PassTimes({k: 2.0 * v for k, v in times.components_s.items()}, times.flops, times.bytes_moved)

    deployment = deploy(Catalog(), "nvidia-h100-sxm", "llama-3.1-8b")
    batch = BatchAggregates.of(np.array([512.0, 1.0]), np.array([0.0, 300.0]), None)
    plain = StepCostModel(deployment).iteration_times(batch).total_s
    np.testing.assert_array_equal(TwiceAsSlow(deployment).iteration_times(batch).total_s, 2.0 * plain)


@pytest.mark.skipif(not IN_USE, reason=f"engine: {compiled.status()}")
def test_the_other_compiled_classes_are_final() -> None:
    from simulator.engine.recorder import Recorder

    subclass = type("MyRecorder", (Recorder,), {})
    with pytest.raises(TypeError, match="interpreted classes cannot inherit from compiled"):
        subclass(1)


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


@pytest.mark.skipif(not compiled.current(), reason=f"engine: {compiled.status()}")
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_compiled_engine_writes_the_same_bytes_as_the_sources(name: str, tmp_path: Path) -> None:
    _run(tmp_path / "pure", pure=True, arguments=RUNS[name])
    _run(tmp_path / "compiled", pure=False, arguments=RUNS[name])
    for file in ("requests.csv", "levels.csv", "summary.json"):
        assert (tmp_path / "compiled" / file).read_bytes() == (tmp_path / "pure" / file).read_bytes(), file


@pytest.mark.parametrize("integer", [int, np.int64, np.int32, np.uint16])
def test_a_load_passes_lengths_as_any_integer_and_never_a_float_compiled_or_not(integer: type) -> None:
    """ClassSource.submit makes a numpy integer a Python int and refuses a float with TypeError, in
    the compiled engine as in the sources (where the compiled Request alone would refuse numpy's)."""
    from simulator.engine.build import build
    from simulator.engine.clients import ClassSource
    from simulator.plan.resolve import resolve
    from tests.engine.conftest import CATALOG, scenario

    simulation = build(resolve(scenario(), CATALOG))
    source = ClassSource(simulation.factory, 0, 0, {})
    request = source.submit(0, (integer(64), integer(16)))
    assert request is not None
    assert (type(request.input_tokens), type(request.output_tokens)) == (int, int)
    assert (request.input_tokens, request.output_tokens) == (64, 16)
    with pytest.raises(TypeError):
        source.submit(0, (64.0, 16))  # type: ignore[arg-type]
