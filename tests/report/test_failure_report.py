"""The report of a run with failures and of a plan that tolerates one: their sections, figures and
captions, read off the same numbers as the summary and the plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.report import write_report
from tests.cli.test_cli import run_cli
from tests.report.test_report import _captions_name_their_assumptions

SCENARIO = """\
name: failures-report
backends:
  - {name: gpu, replicas: 3, deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}}
load: {kind: open, arrivals: {process: poisson, rate_per_s: 4}}
requests: {input_tokens: {dist: constant, value: 256}, output_tokens: {dist: constant, value: 64}}
slo: {tolerate_failures: 1, targets: [{metric: ttft_s, stat: p99, max: 2 s}]}
failures: {random: false, outages: [{backend: gpu, replica: 2, at: 10 s, down_for: 10 s}]}
plan: {max_replicas: {gpu: 3}, replications: 1}
run: {seed: 1, duration: 30 s, drain: false}
"""


def test_a_run_with_failures_reports_its_availability_with_captions(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert run_cli("run", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run")).returncode == 0
    failures = json.loads((tmp_path / "run" / "summary.json").read_text())["failures"]
    assert failures["replica_availability"][2] == pytest.approx(2 / 3)  # down 10 s of the 30 s window
    page = write_report(tmp_path / "run").read_text()
    assert "run: failures" in page and "run: replica availability" in page
    assert f"{failures['availability']:.4%}" in page
    _captions_name_their_assumptions(page)


def test_a_plan_tolerating_a_failure_reports_its_availability(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    result = run_cli("plan", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "plan"), "--jobs", "1")
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    found = plan["availability"]
    assert found["tolerate_failures"] == 1 and found["backends"]["gpu"]["replicas"] == plan["answer"]["fleet"]["gpu"]
    assert "more than 1 of its" in (tmp_path / "plan" / "plan.txt").read_text()
    page = write_report(tmp_path / "plan").read_text()
    assert "Plan: availability" in page and "Plan: what tolerating failures buys" in page
