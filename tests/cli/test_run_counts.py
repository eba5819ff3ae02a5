"""Commands count their runs before running them, and a run that measures nothing says so.

- ``run``, ``compare``, ``plan`` and ``sweep`` count the runs their lists expand into arithmetically
  (never by building them) and refuse more than ``Limits.max_runs`` (exit 2, naming the count, the
  limit and ``--allow-large-runs``) within seconds; once their input is checked, they print the count;
- progress lines obey ``0 <= done <= total`` and show an ETA >= 0 only once a run has finished;
- a run in which no request arrives, or none completes, exits ``EXIT_NOTHING_MEASURED`` (4) with
  the reason, in ``run`` and ``compare``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cli import main
from simulator.cli.common import Countdown, progress_text
from simulator.cli.parser import EXIT_STATUS
from simulator.plan.limits import Limits
from simulator.runner import EXIT_NOTHING_MEASURED
from tests.fuzz.conftest import POISSON as OPEN_POISSON

#: 20 requests of 64 + 8 tokens from 2 closed-loop users on one H100 (~30 ms to simulate).
TINY = """\
name: tiny
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 2}
requests:
  input_tokens: {dist: constant, value: 64}
  output_tokens: {dist: constant, value: 8}
run: {seed: 1, max_requests: 20}
"""

#: Poisson arrivals for 2 s, with SLO targets and a plan of at most 2 replicas.
POISSON = (
    OPEN_POISSON
    + """\
slo: {targets: [{metric: ttft_s, stat: p99, max: 1 s}]}
plan: {default_max_replicas: 2, replications: 1}
"""
)

#: Requests arrive (2,000/s for 5 ms) but none can finish 1,000 tokens before the run stops.
NOTHING_COMPLETES = ["--set", "run.duration=5 ms", "--set", "run.drain=false", "--set",
                     "load.arrivals.rate_per_s=2000", "--set", "requests.output_tokens.value=1000"]  # fmt: skip
#: One arrival expected every 12 days (the lowest rate the ranges admit is 1e-6/s): none in 2 s.
NOTHING_ARRIVES = ["--set", "load.arrivals.rate_per_s=1e-6"]

#: Seconds a refusal may take (a cold interpreter start on a loaded machine is ~2 s).
REFUSED_WITHIN_S = 30.0


def _write(tmp_path: Path, text: str, name: str) -> str:
    (tmp_path / name).write_text(text)
    return name


def _cli(tmp_path: Path, *args: str, timeout_s: float = REFUSED_WITHIN_S) -> subprocess.CompletedProcess[str]:
    """``infersim args`` in ``tmp_path``; a command still running after ``timeout_s`` fails the test."""
    try:
        return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=timeout_s, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"infersim {' '.join(a[:60] for a in args)} ran past {timeout_s:.0f} s without refusing")


def _values(n: int) -> str:
    return ",".join(str(i) for i in range(1, n + 1))


def _assert_refused(result: subprocess.CompletedProcess[str], count: int) -> None:
    limit = Limits().max_runs
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("infersim: error: ") and "Traceback" not in result.stderr
    assert f"{count:,}" in result.stderr and f"limit {limit:,}" in result.stderr
    assert "--allow-large-runs" in result.stderr


# -- counting and refusing ------------------------------------------------------------------------------
def test_a_million_run_set_product_is_refused_within_seconds(tmp_path: Path) -> None:
    """Three lists of 100 values: 1,000,000 runs, refused before any is built."""
    lists = [f"{path}={_values(100)}" for path in ("load.users", "run.seed", "requests.output_tokens.value")]
    result = _cli(tmp_path, "run", _write(tmp_path, TINY, "s.yaml"), *(a for v in lists for a in ("--set", v)))
    _assert_refused(result, 1_000_000)
    assert not any(tmp_path.glob("runs*")), "nothing is written"


def test_with_the_flag_a_run_count_past_the_limit_is_accepted(tmp_path: Path) -> None:
    """A sweep of 10,001 replications is refused, and with --allow-large-runs counted, announced and
    started (stopped here once its count line is out: running it would take minutes)."""
    _write(tmp_path, TINY, "s.yaml")
    count = Limits().max_runs + 1
    sweep = _write(tmp_path, f"name: big\nscenario: s.yaml\nreplications: {count}\nmetrics: [output_tok_s]\n", "g.yaml")
    _assert_refused(_cli(tmp_path, "sweep", sweep, "--jobs", "1"), count)
    process = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", sweep, "--jobs", "1", "--allow-large-runs"],
                               cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)  # fmt: skip
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(process.stderr.readline() if process.stderr else ""))
    reader.start()
    reader.join(REFUSED_WITHIN_S)
    process.kill()
    process.wait()
    reader.join()
    if process.stderr:
        process.stderr.close()
    assert first and first[0].startswith(f"infersim sweep: {count:,} runs (grid 1, 1 sample points, {count:,} "), first


def test_compare_refuses_too_many_hardware_ids_and_loads_before_looking_them_up(tmp_path: Path) -> None:
    scenario = _write(tmp_path, POISSON, "p.yaml")
    many = ",".join(f"hw-{i}" for i in range(Limits().max_runs + 1))  # unknown ids: counted before any lookup
    _assert_refused(_cli(tmp_path, "compare", scenario, "--hardware", many), Limits().max_runs + 1)
    loads = _cli(
        tmp_path, "compare", scenario, "--hardware", "nvidia-h100-sxm", "--set", f"load.users={_values(20_000)}"
    )
    _assert_refused(loads, 20_000)


def test_compare_refuses_a_hardware_id_named_twice(tmp_path: Path) -> None:
    """Twice the same id would run the same case twice (and counted it once: '2/1 done')."""
    result = _cli(tmp_path, "compare", _write(tmp_path, POISSON, "p.yaml"), "--hardware",
                  "nvidia-h100-sxm,nvidia-h200,nvidia-h100-sxm", "-o", "out")  # fmt: skip
    assert result.returncode == 2 and "nvidia-h100-sxm named more than once" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_plan_refuses_a_search_over_the_run_limit(tmp_path: Path) -> None:
    """At most 2 candidates x 20,000 replications: refused before the first candidate runs."""
    result = _cli(tmp_path, "plan", _write(tmp_path, POISSON, "p.yaml"), "--set", "plan.replications=20000")
    _assert_refused(result, 40_000)


def test_plan_and_sweep_print_their_run_count_first(tmp_path: Path) -> None:
    plan = _cli(tmp_path, "plan", _write(tmp_path, POISSON, "p.yaml"), "--jobs", "1", "-o", "plan")
    assert plan.returncode == 0, plan.stderr
    assert plan.stderr.startswith("infersim plan: at most 2 candidates x 1 replication = 2 runs")
    _write(tmp_path, TINY, "s.yaml")
    sweep = "name: grid\nscenario: s.yaml\ngrid: {load.users: [1, 2]}\nreplications: 2\nmetrics: [output_tok_s]\n"
    result = _cli(tmp_path, "sweep", _write(tmp_path, sweep, "g.yaml"), "--jobs", "1", "-o", "sweep")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("infersim sweep: 4 runs (grid 2, 1 sample points, 2 replications), 0 of them")


# -- progress lines ---------------------------------------------------------------------------------------
LINE = re.compile(r"^(\d+)/(\d+) done(?:, ETA (-?\d+) s|, (-?\d+) s)?$")


def _law(text: str, total: int) -> tuple[int, int | None]:
    """``(done, ETA)`` of a progress text, checking ``0 <= done <= total`` and ``ETA >= 0``."""
    match = LINE.match(text)
    assert match, text
    done, shown_total = int(match[1]), int(match[2])
    assert shown_total == total and 0 <= done <= total, text
    eta = None if match[3] is None else int(match[3])
    assert eta is None or eta >= 0, text
    assert (eta is None) == (done == 0 or done == total), text  # an ETA only while it means something
    return done, eta


@given(st.integers(-5, 10_000), st.integers(1, 10_000), st.floats(-1e3, 1e7, allow_nan=False))
def test_progress_text_never_shows_more_done_than_total_nor_a_negative_eta(
    done: int, total: int, elapsed_s: float
) -> None:
    _law(progress_text(done, total, elapsed_s), total)


@given(st.integers(1, 50), st.integers(0, 80))
def test_a_countdown_never_counts_past_its_total(total: int, finished: int) -> None:
    """Any number of completions, even more than the runs (a run several cases share): done <= total."""
    countdown = Countdown(total)
    previous = 0
    for _ in range(finished):
        done, _eta = _law(countdown.finished(), total)
        assert previous <= done
        previous = done


def test_the_eta_is_the_mean_time_per_finished_run_times_the_runs_left() -> None:
    assert progress_text(4, 10, 8.0) == "4/10 done, ETA 12 s"
    assert progress_text(0, 10, 8.0) == "0/10 done"
    assert progress_text(10, 10, 8.0) == "10/10 done, 8 s"


# -- runs that measure nothing ----------------------------------------------------------------------------
def test_a_run_where_nothing_arrives_exits_with_the_documented_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["run", _write(tmp_path, POISSON, "p.yaml"), "-o", "out", *NOTHING_ARRIVES])
    err = capsys.readouterr().err
    assert code == EXIT_NOTHING_MEASURED == 4
    assert "infersim: error: " in err and "no request arrived" in err and "Traceback" not in err
    assert (tmp_path / "out" / "summary.json").exists(), "the run's files are still written"


def test_a_run_where_nothing_completes_exits_with_the_documented_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["run", _write(tmp_path, POISSON, "p.yaml"), "-o", "out", "--json", *NOTHING_COMPLETES])
    captured = capsys.readouterr()
    assert code == EXIT_NOTHING_MEASURED
    summary = json.loads(captured.out)
    assert summary["requests_completed"] == 0 and summary["requests_in_flight"] > 0
    assert f"{summary['requests_in_flight']} requests arrived but none completed" in captured.err


def test_absurd_hardware_numbers_never_exit_zero(tmp_path: Path) -> None:
    """1e-300 FLOP/s: refused as bad input (2) or run and reported as measuring nothing (4), never 0."""
    result = _cli(tmp_path, "run", _write(tmp_path, POISSON, "p.yaml"), "-o", "out",
                  "--set", "deployment.hardware.compute.bf16=1e-300 FLOP/s")  # fmt: skip
    assert result.returncode in (2, EXIT_NOTHING_MEASURED), result.stderr


def test_compare_names_the_cases_that_measured_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["compare", _write(tmp_path, POISSON, "p.yaml"), "--hardware", "nvidia-h100-sxm", "--jobs", "1",
                 "-o", "out", "--set", "load.arrivals.rate_per_s=1e-6,10"])  # fmt: skip
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("infersim: error: ")]
    assert code == EXIT_NOTHING_MEASURED
    assert len(errors) == 1 and "load.arrivals.rate_per_s=1e-6" in errors[0] and "no request arrived" in errors[0]


def test_the_help_documents_the_exit_codes_and_the_run_limit() -> None:
    text = " ".join(EXIT_STATUS.split())
    assert f"{EXIT_NOTHING_MEASURED} a run measured nothing" in text and f"{Limits().max_runs:,} runs" in text
