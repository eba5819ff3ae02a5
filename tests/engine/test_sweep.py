"""Sweeps: a real loopback Dask cluster gives the local pool's table, the cache skips finished
runs, a killed sweep resumes without redoing them, seeds are spawned, bad specs are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import LocalCluster

from simulator.config.loading import Catalog, ConfigError, bundled_dir
from simulator.errors import InfersimWarning
from simulator.studies.execution import Cache
from simulator.studies.sweep import (
    SweepSpec,
    expand,
    factor_points,
    read_table_file,
    replication_seeds,
    run_sweep,
    summarize_rows,
    table_path,
)

SCENARIO = """\
name: sweep-base
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: open, arrivals: {process: poisson, rate_per_s: 5}}
requests:
  input_tokens: {dist: lognormal, median: 300, sigma: 0.5}
  output_tokens: {dist: geometric, mean: 60}
run: {seed: 3, max_requests: 150}
"""


def _spec(tmp_path: Path, **fields: object) -> tuple[SweepSpec, Path]:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    data = {"name": "t", "scenario": "base.yaml", "grid": {"load.arrivals.rate_per_s": [2, 8]},
            "replications": 2, "metrics": ["ttft_s.p50", "output_tok_s", "cost.usd_per_task"]} | fields  # fmt: skip
    return SweepSpec.model_validate(data), tmp_path / "sweep.yaml"


def _table(rows: list[dict[str, object]]) -> str:
    """Rows as JSON text: equal tables give equal text (NaN included)."""
    return json.dumps(rows)


def test_a_loopback_dask_cluster_gives_the_local_pools_table(tmp_path: Path) -> None:
    spec, path = _spec(
        tmp_path, grid={"load.arrivals.rate_per_s": [2, 8], "deployment.hardware": ["nvidia-h100-sxm", "nvidia-h200"]}
    )
    runs = expand(spec, path)
    local = run_sweep(spec, runs, tmp_path / "local", "local", jobs=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster:  # fmt: skip
        remote = run_sweep(spec, runs, tmp_path / "dask", "dask", address=cluster.scheduler_address)
    assert len(local) == 8 and all(not r["error"] for r in local)
    assert _table(local) == _table(remote)


def test_cache_hits_skip_the_executor_entirely(tmp_path: Path) -> None:
    spec, path = _spec(tmp_path)
    runs = expand(spec, path)
    first = run_sweep(spec, runs, tmp_path / "out", "local", jobs=2)
    # every row is cached: an unreachable scheduler is never contacted
    again = run_sweep(spec, runs, tmp_path / "out", "dask", address="tcp://127.0.0.1:9")
    assert _table(first) == _table(again)


def test_a_killed_sweep_resumes_without_redoing_finished_runs(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    (tmp_path / "sweep.yaml").write_text(
        "name: k\nscenario: base.yaml\ngrid: {load.arrivals.rate_per_s: [1, 2, 3, 4, 5, 6, 7, 8]}\nreplications: 3\n"
    )
    out, cache = tmp_path / "out", tmp_path / "out" / "cache"
    args = [sys.executable, "-m", "simulator", "sweep", str(tmp_path / "sweep.yaml"), "-o", str(out), "--jobs", "1"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list(cache.glob("*.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.json")}
    assert 3 <= len(finished) < 24 and table_path(out, "runs") is None
    assert subprocess.run(args, capture_output=True, check=False).returncode == 0
    assert all(cache.joinpath(name).stat().st_mtime_ns == mtime for name, mtime in finished.items())
    assert len(list(cache.glob("*.json"))) == 24 and not list(cache.glob("*.tmp"))
    runs = table_path(out, "runs")
    assert runs is not None and len(read_table_file(runs)) == 24


def test_a_killed_writers_temporary_file_is_deleted_and_a_running_ones_kept(tmp_path: Path) -> None:
    """A row's temporary file is named by its writer's process id: the next cache on the folder
    deletes one whose writer has ended (a command killed mid-write) and keeps a running writer's."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead = tmp_path / f"{int(ended.stdout)}-row.tmp"
    live = tmp_path / f"{os.getpid()}-row.tmp"
    dead.write_text("{")
    live.write_text("{")
    Cache(tmp_path).put("k", {"x": 1.0})
    assert not dead.exists() and live.exists() and Cache(tmp_path).get("k") == {"x": 1.0}
    assert sorted(p.name for p in tmp_path.glob("*.tmp")) == [live.name]


def test_replications_have_spawned_distinct_seeds_and_a_confidence_interval(tmp_path: Path) -> None:
    spec, path = _spec(tmp_path, replications=4)
    runs = expand(spec, path)
    assert [r.seed for r in runs[:4]] == replication_seeds(3, 4) and len(set(replication_seeds(3, 4))) == 4
    rows = run_sweep(spec, runs, tmp_path / "out", "local", jobs=2)
    summary = summarize_rows(rows, ["load.arrivals.rate_per_s"], spec.metrics)
    assert [s["runs"] for s in summary] == [4, 4]
    assert all(s["ttft_s.p50.ci95"] > 0 for s in summary)
    assert all(s["cost.usd_per_task.mean"] != s["cost.usd_per_task.mean"] for s in summary)  # NaN: no tasks


def test_a_failed_run_is_a_row_with_its_error(tmp_path: Path) -> None:
    prompts = [{"dist": "constant", "value": 300}, {"dist": "constant", "value": 5_000_000}]
    spec, path = _spec(tmp_path, grid={"requests.input_tokens": prompts})
    rows = run_sweep(spec, expand(spec, path), tmp_path / "out", "local", jobs=1)
    assert [bool(r["error"]) for r in rows] == [False, False, True, True]
    assert "holds at most" in str(rows[2]["error"])
    assert len(list((tmp_path / "out" / "cache").glob("*.json"))) == 2  # failures are retried, not cached


def test_asking_for_another_metric_or_changing_a_profile_misses_the_cache(tmp_path: Path) -> None:
    spec, path = _spec(tmp_path)
    keys = {p.key for p in expand(spec, path)}
    more = spec.model_copy(update={"metrics": [*spec.metrics, "requests_per_s"]})
    assert keys.isdisjoint(p.key for p in expand(more, path))
    profiles = tmp_path / "hw"
    profiles.mkdir()
    original = bundled_dir("hardware_profiles") / "nvidia-h100-sxm.yaml"
    (profiles / "nvidia-h100-sxm.yaml").write_text(original.read_text().replace("value: 0.85", "value: 0.80", 1))
    with pytest.warns(InfersimWarning, match="shadows"):
        assert keys.isdisjoint(p.key for p in expand(spec, path, Catalog(hardware_dir=profiles)))


def test_latin_hypercube_points_cover_each_stratum_once(tmp_path: Path) -> None:
    ranges = {"load.arrivals.rate_per_s": {"low": 0, "high": 10}}
    spec, _ = _spec(tmp_path, grid={}, replications=1,
                    sample={"method": "latin-hypercube", "points": 10, "ranges": ranges})  # fmt: skip
    values = sorted(p["load.arrivals.rate_per_s"] for p in factor_points(spec))
    assert [int(v) for v in values] == list(range(10))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"grid": {"load.arrivals.rte_per_s": [1]}}, "rte_per_s: unknown key"),
        ({"grid": {"load.arrivals.rate_per_s.max": [1]}}, "load.arrivals.rate_per_s does not resolve to a mapping"),
    ],
)
def test_a_field_path_that_does_not_resolve_is_refused_before_running(
    tmp_path: Path, fields: dict[str, object], expected: str
) -> None:
    spec, path = _spec(tmp_path, **fields)
    with pytest.raises(ConfigError, match=expected):
        expand(spec, path)


def test_empty_sweeps_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty list of values"):
        _spec(tmp_path, grid={"load.arrivals.rate_per_s": []})
    with pytest.raises(ValueError, match="the sweep is empty"):
        _spec(tmp_path, grid={}, replications=1)


def test_an_unreachable_scheduler_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    (tmp_path / "s.yaml").write_text("name: u\nscenario: base.yaml\ngrid: {load.arrivals.rate_per_s: [1]}\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "simulator", "sweep", str(tmp_path / "s.yaml"), "-o",
                             str(tmp_path / "o"), "--executor", "dask", "--address", "tcp://127.0.0.1:9"],
                            capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "no Dask scheduler answered at tcp://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30


def test_integer_ranges_give_every_integer_the_same_chance(tmp_path: Path) -> None:
    """Counts of 1..4 over n draws are Binomial(n, 1/4): each within 4 standard deviations of n/4."""
    n = 20_000
    ranges = {"load.users": {"low": 1, "high": 4, "integer": True}}
    spec, _ = _spec(tmp_path, grid={}, replications=1, sample={"method": "random", "points": n, "ranges": ranges})
    values = [p["load.users"] for p in factor_points(spec)]
    sigma = (n * 0.25 * 0.75) ** 0.5
    assert sorted(set(values)) == [1, 2, 3, 4]
    assert all(abs(values.count(k) - n / 4) < 4 * sigma for k in range(1, 5))


def test_integer_ranges_stay_inside_fractional_bounds(tmp_path: Path) -> None:
    ranges = {"load.users": {"low": 1.5, "high": 4, "integer": True}}
    spec, _ = _spec(tmp_path, grid={}, replications=1, sample={"method": "random", "points": 400, "ranges": ranges})
    assert sorted({p["load.users"] for p in factor_points(spec)}) == [2, 3, 4]
    with pytest.raises(ValueError, match="no integer lies in"):
        _spec(
            tmp_path,
            grid={},
            sample={"points": 3, "ranges": {"load.users": {"low": 0.5, "high": 0.9, "integer": True}}},
        )


def test_a_directory_trace_is_hashed_file_by_file(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    spec = SweepSpec.model_validate({"name": "w", "scenario": str(root / "scenarios" / "weka-replay.yaml"),
                                     "grid": {"run.seed": [1, 2]}})  # fmt: skip
    runs = expand(spec, tmp_path / "s.yaml")
    assert len({r.key for r in runs}) == 2
