"""`infersim compare` and `infersim plan` from the command line, and fleet input errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli import run_cli

COMPARE = """\
name: cmp
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: agents, workload: chat, agents: 2}
run: {seed: 2, duration: 30 s}
"""

FLEET = """\
name: fleet
backends:
  - {name: wafer, deployment: {hardware: cerebras-cs3, model: llama-3.1-8b}}
  - {name: gpu, deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}, replicas: 2}
router: {rules: {bulk: [gpu]}}
classes:
  - name: bulk
    load: {kind: open, arrivals: {process: poisson, rate_per_s: 3}}
    requests: {input_tokens: {dist: constant, value: 300}, output_tokens: {dist: constant, value: 100}}
    slo: {targets: [{metric: ttft_s, stat: p99, max: 2 s}]}
plan: {max_replicas: {wafer: 0, gpu: 3}, replications: 1}
run: {seed: 1, duration: 40 s, warmup: 5 s, drain: false}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_compare_runs_every_hardware_at_every_load(tmp_path: Path) -> None:
    args = ["compare", str(_write(tmp_path, COMPARE)), "--hardware", "nvidia-h100-sxm,cerebras-cs3",
            "--set", "load.agents=1,4", "-o", str(tmp_path / "out"), "--json"]  # fmt: skip
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["hardware"], r["load"]) for r in rows] == [
        ("nvidia-h100-sxm", "load.agents=1"), ("cerebras-cs3", "load.agents=1"),
        ("nvidia-h100-sxm", "load.agents=4"), ("cerebras-cs3", "load.agents=4"),
    ]  # fmt: skip
    for r in rows:
        assert r["output_tok_s_per_chip"] == pytest.approx(r["output_tok_s"] / r["chips"])
        assert r["output_tok_per_usd"] == pytest.approx(r["output_tok_s"] * 3600 / r["usd_per_hour"])
        assert r["usd_per_task"] == pytest.approx(1 / r["tasks_per_usd"])
    by = {(r["hardware"], r["load"]): r for r in rows}
    assert by[("cerebras-cs3", "load.agents=1")]["per_user_output_tok_s_p50"] > 5 * by[
        ("nvidia-h100-sxm", "load.agents=1")]["per_user_output_tok_s_p50"]  # fmt: skip
    assert (tmp_path / "out" / "compare.txt").exists() and (tmp_path / "out" / "run-003" / "summary.json").exists()
    index = (tmp_path / "out" / "index.txt").read_text().splitlines()
    assert index[2].split() == ["run-000", "nvidia-h100-sxm", "load.agents=1"] and len(index) == 2 + 4


def test_plan_writes_a_rerunnable_answer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("plan", str(_write(tmp_path, FLEET)), "-o", str(out), "--report")
    assert result.returncode == 0, result.stderr
    assert "plan:" in result.stdout and "frontier" in result.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert plan["answer"]["meets"] and plan["answer"]["fleet"]["wafer"] == 0
    assert "gpu: 1 x nvidia-h100-sxm chip serving llama-3.1-8b" in result.stdout  # what one replica is
    listed = result.stdout[result.stdout.index("every fleet simulated") :]
    assert listed.count(" x gpu") >= plan["candidates"]  # every fleet it compared is listed
    answer = yaml.safe_load((out / "answer.yaml").read_text())
    assert answer["provenance"]["seed"] == 1
    rerun = run_cli("run", str(out / "answer.yaml"), "-o", str(tmp_path / "rerun"), "--json")
    assert rerun.returncode == 0, rerun.stderr
    # the report draws the cost-vs-SLO frontier, captioned with the load, the basis and the answer
    page = (out / "report.html").read_text()
    figure = page[page.index("<img", page.index("Cost vs SLO")) :]
    caption = figure[figure.index("<figcaption>") : figure.index("</figcaption>")]
    basis = plan["cost_basis"]
    assert f"$/h ({basis} basis)" in caption and "load: poisson arrivals, 3 req/s" in caption
    assert f"Cheapest fleet meeting every target: {plan['answer']['fleet']['gpu']} x gpu" in caption


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("router: {rules: {bulk: [gpu]}}", "router: {rules: {bulk: [gpus]}}"),
         "router.rules.bulk: no backend named 'gpus' (backends: ['wafer', 'gpu'])"),
        (("router: {rules: {bulk: [gpu]}}", "router: {rules: {bluk: [gpu]}}"),
         "router.rules.bluk: no workload class is named 'bluk'"),
        (("model: llama-3.1-8b, chips: 1}", "model: llama-3.1-8b, chips: 1}, cost_basis: api"),
         "backend gpu: nvidia-h100-sxm has no API price for llama-3.1-8b"),
        (("max: 2 s", "max: 2"), "a bound on ttft_s needs a unit"),
        (("max_replicas: {wafer: 0,", "max_replicas: {waffle: 0,"), "plan.max_replicas.waffle: no backend named"),
    ],
)  # fmt: skip
def test_bad_fleets_exit_2_without_a_traceback(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    old, new = change
    assert old in FLEET
    path = _write(tmp_path, FLEET.replace(old, new))
    for command in ("run", "plan"):
        result = run_cli(command, str(path), "-o", str(tmp_path / command))
        assert result.returncode == 2, result.stdout
        assert expected in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / command).exists()


def test_an_unmeetable_target_exits_3_and_says_why(tmp_path: Path) -> None:
    path = _write(
        tmp_path, FLEET.replace("metric: ttft_s, stat: p99, max: 2 s", "metric: ttft_s, stat: p99, max: 1 us")
    )
    result = run_cli("plan", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 3 and "Traceback" not in result.stderr  # answered: no feasible fleet (not bad input)
    assert "no fleet up to the replica limits meets every target" in result.stderr
    assert "3 x gpu alone: bulk: p99 ttft_s <= 1e-06 s" in result.stderr


def test_compare_refuses_unknown_hardware_before_simulating(tmp_path: Path) -> None:
    result = run_cli("compare", str(_write(tmp_path, COMPARE)), "--hardware", "nvidia-h100-sxm,tpu-v9")
    assert result.returncode == 2 and "unknown hardware profile 'tpu-v9'" in result.stderr


def test_a_resolved_scenario_reruns_to_the_same_summary(tmp_path: Path) -> None:
    """Determinism: the folder's scenario.resolved.yaml (with provenance) reproduces its summary.json."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert run_cli("run", str(_write(tmp_path, FLEET)), "-o", str(first)).returncode == 0
    assert run_cli("run", str(first / "scenario.resolved.yaml"), "-o", str(second)).returncode == 0
    assert (first / "summary.json").read_text() == (second / "summary.json").read_text()


def test_progress_reaches_one_in_order_and_is_silent_when_piped(tmp_path: Path) -> None:
    from simulator.config.scenario import Scenario
    from simulator.runner import simulate
    from tests.engine.conftest import CATALOG

    seen: list[float] = []
    scenario = Scenario.model_validate(yaml.safe_load(FLEET))
    quiet = simulate(scenario, CATALOG)
    loud = simulate(scenario, CATALOG, seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) == 100
    assert json.dumps(quiet.summary.to_dict()) == json.dumps(loud.summary.to_dict())  # reporting never changes the run
    result = run_cli("run", str(_write(tmp_path, FLEET)), "-o", str(tmp_path / "out"))
    assert result.returncode == 0 and "infersim run" not in result.stderr


def test_the_bundled_mixed_fleet_plan_answers_with_one_wafer(tmp_path: Path) -> None:
    """The README's first plan (two agents and an open-loop class, a wafer and GPUs) answers 1 x
    wafer in 4 candidates: its runs' checks that find no task over the bound settle nothing (such
    a check once crashed the stop rule)."""
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "plan-mixed-fleet.yaml"
    result = run_cli("plan", str(scenario), "--jobs", "1", "-o", str(tmp_path / "out"), "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["answer"]["fleet"] == {"wafer": 1, "gpu": 0} and plan["search"]["simulated"] == 4
