"""`plan`, `compare` and `run` with several values: the same answer on every executor (this
process, a local pool, a real loopback Dask cluster), progress lines with an ETA, and finished
runs kept, marked partial, when the command is stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from distributed import LocalCluster

from simulator.cli import main
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.plan.limits import Limits
from simulator.studies.execution import Runs, start
from simulator.studies.planning import Planner, plan_fleet, summary_run
from tests.cli.test_cli import run_cli

# Interactive users need >= 150 tok/s (only the B200 gives it); bulk work at 30 req/s needs
# several replicas: one B200 for the users and A100s for the bulk is cheaper than B200s alone.
MIXED = """\
name: mix
backends:
  - {name: fast, deployment: {hardware: nvidia-b200, model: llama-3.1-8b, chips: 1}}
  - {name: cheap, deployment: {hardware: nvidia-a100-sxm, model: llama-3.1-8b, chips: 1}}
router: {rules: {interactive: [fast], bulk: [cheap]}}
classes:
  - name: interactive
    load: {kind: closed, users: 2}
    requests: {input_tokens: {dist: constant, value: 300}, output_tokens: {dist: constant, value: 100}}
    slo: {targets: [{metric: per_user_output_tok_s, stat: p50, min: 150}]}
  - name: bulk
    load: {kind: open, arrivals: {process: poisson, rate_per_s: 30}}
    requests: {input_tokens: {dist: constant, value: 1000}, output_tokens: {dist: constant, value: 100}}
    slo: {targets: [{metric: ttft_s, stat: p99, max: 2 s}]}
plan: {max_replicas: {fast: 3, cheap: 4}, replications: 1}
run: {seed: 1, duration: 8 s, warmup: 1 s, drain: false}
"""

COMPARE = """\
name: cmp
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: open, arrivals: {process: poisson, rate_per_s: 4}}
requests: {input_tokens: {dist: constant, value: 300}, output_tokens: {dist: constant, value: 60}}
run: {seed: 2, duration: 10 s}
"""

NO_DIRS = (None, None, None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A real Dask scheduler and two single-threaded worker processes on 127.0.0.1."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as local:  # fmt: skip
        yield local


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_plan_gives_the_same_answer_serially_on_a_pool_and_on_dask(cluster: LocalCluster) -> None:
    scenario = Scenario.model_validate(yaml.safe_load(MIXED))
    catalog = Catalog()
    serial = plan_fleet(scenario, catalog)
    assert serial.answer is not None and serial.answer.kind == "mixed"  # the search went through both stages
    for executor, address in (("local", None), ("dask", cluster.scheduler_address)):
        runs = Runs(start(executor, 2, address), summary_run, (NO_DIRS, Limits()), None)  # type: ignore[arg-type]
        try:
            parallel = Planner(scenario, catalog, runs=runs).search()
        finally:
            runs.close()
        assert json.dumps(parallel.to_dict()) == json.dumps(serial.to_dict()), executor  # NaN included
        assert [e.counts for e in parallel.evaluations] == [e.counts for e in serial.evaluations]
        asked = {key for e in serial.evaluations for key, _ in Planner(scenario, catalog)._run_keys(e.counts, e.kind)}
        assert asked <= runs.results.keys()  # spare runs may have run besides, never entering the answer


def test_compare_gives_the_same_rows_and_files_on_every_executor(tmp_path: Path, cluster: LocalCluster) -> None:
    path = _write(tmp_path, COMPARE)
    common = ["compare", str(path), "--hardware", "nvidia-h100-sxm,nvidia-a100-sxm", "--set",
              "load.arrivals.rate_per_s=2,6", "--json"]  # fmt: skip
    outputs = {}
    for name, flags in (("serial", ["--jobs", "1"]), ("pool", ["--jobs", "2"]),
                        ("dask", ["--executor", "dask", "--address", cluster.scheduler_address])):  # fmt: skip
        result = run_cli(*common, *flags, "-o", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
        outputs[name] = result.stdout
        assert not (tmp_path / name / "compare.partial.json").exists()
    assert outputs["serial"] == outputs["pool"] == outputs["dask"]
    rows = json.loads(outputs["serial"])
    assert [(r["hardware"], r["load"]) for r in rows[:2]] == [
        ("nvidia-h100-sxm", "load.arrivals.rate_per_s=2"),
        ("nvidia-a100-sxm", "load.arrivals.rate_per_s=2"),
    ]
    for run in ("run-000", "run-003"):
        files = {n: (tmp_path / n / run / "requests.csv").read_text() for n in outputs}
        assert files["serial"] == files["pool"] == files["dask"]


def test_long_commands_print_progress_with_an_eta(tmp_path: Path) -> None:
    plan = run_cli("plan", str(_write(tmp_path, MIXED)), "-o", str(tmp_path / "plan"), "--jobs", "1")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stderr.splitlines()
    most = int(re.match(r"infersim plan: at most ([\d,]+) candidates x", lines[0])[1].replace(",", ""))  # type: ignore[index]
    assert lines[1].startswith("infersim plan: candidate 1 of at most ")  # the cheapest-possible backend first
    assert any(re.search(r"ETA( of the single-architecture searches)? at most \d+ s$", line) for line in lines)
    for line in lines[1:]:  # the bound holds: no candidate past it, no ETA below zero
        last, bound = re.search(r"candidate (?:\d+-)?(\d+) of at most ([\d,]+)", line).groups()  # type: ignore[union-attr]
        assert int(last) <= int(bound.replace(",", "")) <= most and "ETA -" not in line, line
    rerun = run_cli("plan", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "plan"), "--jobs", "1")
    assert rerun.returncode == 0 and rerun.stdout == plan.stdout  # every run from the cache
    run = run_cli("run", str(_write(tmp_path, COMPARE, "c.yaml")), "--set", "run.seed=1,2,3", "-o", str(tmp_path / "r"))
    assert run.returncode == 0, run.stderr
    assert "infersim run: run 2/3: run.seed=2" in run.stderr and "2/3 done, ETA" in run.stderr
    assert sorted(p.name for p in (tmp_path / "r").glob("run-*")) == ["run-000", "run-001", "run-002"]
    assert not (tmp_path / "r" / "runs.partial.json").exists() and (tmp_path / "r" / "sweep.json").exists()


def test_plan_stops_at_its_limits_and_states_the_gap_it_left(tmp_path: Path) -> None:
    """``plan.max_candidates`` and ``--time-limit`` stop the search: plan.json says what stopped it
    and the floor under which every fleet misses, progress lines say when it will stop, and a bad
    limit is refused with exit 2 before anything runs."""
    path = _write(tmp_path, MIXED)
    two = run_cli("plan", str(path), "-o", str(tmp_path / "two"), "--jobs", "1", "--json",
                  "--set", "plan.max_candidates=2")  # fmt: skip
    assert two.returncode in (0, 3), two.stderr
    payload = json.loads(two.stdout)
    assert payload["stopped"] == "plan.max_candidates = 2" and payload["candidates"] == 2
    assert payload["floor_usd_per_hour"] > 0
    assert "the search stopped at plan.max_candidates = 2" in payload["explanation"]
    assert all("stops after 2 candidates" in line for line in two.stderr.splitlines()[1:] if "candidate " in line)
    at_once = run_cli("plan", str(path), "-o", str(tmp_path / "none"), "--jobs", "1", "--json", "--time-limit", "1e-9")
    assert at_once.returncode == 3, at_once.stderr  # stopped before its first simulation: nothing found
    payload = json.loads(at_once.stdout)
    assert payload["stopped"] == "the time limit of 1e-09 s" and payload["candidates"] == 0
    assert payload["answer"] is None
    for bad, why in (("0", "expected a positive duration"), ("5 GB", "expected a duration"), ("soon", "a duration")):
        refused = run_cli("plan", str(path), "-o", str(tmp_path / "bad"), "--time-limit", bad)
        assert refused.returncode == 2 and why in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        assert not (tmp_path / "bad").exists()


def _stop_when(args: list[str], ready: Callable[[], bool]) -> subprocess.CompletedProcess[str]:
    """Start ``infersim args``, send SIGTERM once ``ready()`` holds, and return how it ended."""
    process = subprocess.Popen([sys.executable, "-m", "simulator", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def test_a_stopped_plan_keeps_its_finished_candidates_marked_partial(tmp_path: Path) -> None:
    slow = MIXED.replace("duration: 8 s", "duration: 600 s")  # ~1 s a candidate: still running when stopped
    out = tmp_path / "out"
    args = ["plan", str(_write(tmp_path, slow)), "-o", str(out), "--jobs", "1"]
    ended = _stop_when(args, lambda: any((out / "cache").glob("*.json")))  # once a candidate has finished
    assert ended.returncode == 143 and "Traceback" not in ended.stderr
    assert f"terminated; the finished runs are kept in {out}" in ended.stderr
    partial = json.loads((out / "plan.partial.json").read_text())
    assert partial["partial"] is True and partial["seed"] == 1 and partial["version"]
    assert not (out / "plan.json").exists()
    resolved = yaml.safe_load((out / "scenario.resolved.yaml").read_text())
    assert resolved["provenance"] == {"version": partial["version"], "seed": 1}
    finished = len(list((out / "cache").glob("*.json")))
    assert finished >= 1 and len(partial["done"]["evaluations"]) <= finished


def test_a_stopped_compare_keeps_its_finished_runs_marked_partial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    slow = COMPARE.replace("duration: 10 s", "duration: 600 s")
    args = ["compare", str(_write(tmp_path, slow)), "--hardware", "nvidia-h100-sxm,nvidia-a100-sxm,nvidia-h200",
            "-o", str(out), "--jobs", "1"]  # fmt: skip
    ended = _stop_when(args, (out / "run-000" / "summary.json").exists)
    assert ended.returncode == 143, ended.stderr
    partial = json.loads((out / "compare.partial.json").read_text())
    assert partial["partial"] is True and partial["seed"] == 2
    assert [r["folder"] for r in partial["done"]] == ["run-000"]
    assert partial["done"][0]["row"]["hardware"] == "nvidia-h100-sxm"
    assert (out / "run-000" / "scenario.resolved.yaml").exists() and not (out / "compare.json").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--jobs", "0"], "--jobs: expected a positive integer, got '0'"),
        (["--executor", "ray"], "--executor: invalid choice: 'ray'"),
        (["--executor", "dask", "--address", "10.0.0.5"], "--address '10.0.0.5': expected a Dask scheduler address"),
    ],
)
def test_bad_executor_flags_exit_2_before_anything_runs(
    tmp_path: Path, flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, MIXED)
    for command in (["plan", str(path)], ["compare", str(_write(tmp_path, COMPARE, "c.yaml")), "--hardware",
                                          "nvidia-h100-sxm"]):  # fmt: skip
        assert main([*command, *flags, "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err
        assert not (tmp_path / "out").exists()


def test_a_sigterm_whose_raise_was_lost_still_stops_a_long_command(tmp_path: Path) -> None:
    """SIGTERM raises in the main thread, but a raise landing in a finaliser is ignored by Python:
    the command then stops at its next finished run, and never writes its full results (the folder
    stays partial); the ignored raise prints no traceback, any other unraisable error still does."""
    import simulator.cli as cli
    from simulator.cli.common import PartialFolder
    from simulator.cli.output import ResultsFolder

    folder = PartialFolder(ResultsFolder(tmp_path / "out", "plan"), "plan", 1)
    folder.add({"a.json": "{}"}, {"evaluations": []})  # no SIGTERM yet: nothing stops
    reported: list[object] = []
    default, sys.__unraisablehook__ = sys.__unraisablehook__, reported.append
    try:
        cli._unraisable(types.SimpleNamespace(exc_value=cli.Terminated()))
        cli._unraisable(types.SimpleNamespace(exc_value=ValueError("a finaliser's own bug")))
    finally:
        sys.__unraisablehook__ = default
    assert len(reported) == 1  # the SIGTERM's is not reported, the bug is
    cli._SIGTERM_RECEIVED.set()  # what a SIGTERM leaves when its raise was ignored
    try:
        with pytest.raises(cli.Terminated) as stopped:
            folder.add({"b.json": "{}"}, {"evaluations": []})
        assert "the finished runs are kept in" in stopped.value.kept  # type: ignore[attr-defined]
        with pytest.raises(cli.Terminated):
            folder.finish({"plan.json": "{}"})
    finally:
        cli._SIGTERM_RECEIVED.clear()
    assert (tmp_path / "out" / "plan.partial.json").exists() and not (tmp_path / "out" / "plan.json").exists()
