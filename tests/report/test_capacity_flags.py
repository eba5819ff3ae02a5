"""Capacity flags: a per-user speed or TTFT at a load the deployment cannot hold is marked in every output.

The laws: one rule decides (``held < demand`` or a preemption, the demand being a run's mean calls in
flight, else the users); ``speed * held / demand`` is the speed averaged over them; agents waiting on
tools ask for no sequence (Little's law), so they count only while in a call; the demo, ``compare``
and ``run`` at a load beyond the KV capacity mark it in the text table, the JSON
(``capacity_limited`` and ``held``), the HTML table and every takeaway that names the deployment; a
duration prints in the unit that shows it and reads back as the same time.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from simulator.api import load_scenario, simulate
from simulator.capacity import LIMITED_MARK, Capacity, capacity_limited, of_run
from simulator.units import format_seconds, parse_quantity
from tests.cli.test_cli import run_cli

#: Llama 3.3 70B on one CS-3 system: at 2000 + 200 tokens its SRAM holds about a dozen users, not 64.
BEYOND_KV = """\
name: beyond-kv
deployment: {hardware: cerebras-cs3, model: llama-3.3-70b, weights: bf16}
load: {kind: closed, users: 64, start_spread: 1 s}
requests:
  input_tokens: {dist: constant, value: 2000}
  output_tokens: {dist: constant, value: 200}
run: {seed: 1, duration: 8 s, warmup: 1 s, drain: false}
"""


def _takeaways(page: str) -> list[str]:
    """Every takeaway sentence of a report page: under the figures and tables, and in the summary."""
    found = re.findall(r'<strong class="takeaway">(.*?)</strong>', page, flags=re.S)
    summary = re.search(r'<section class="summary">(.*?)</section>', page, flags=re.S)
    found += re.findall(r"<li>(.*?)</li>", summary.group(1), flags=re.S) if summary else []
    return [html.unescape(t) for t in found]


@pytest.mark.parametrize(
    ("users", "held", "preemptions", "limited"),
    [(64, 12, 0, True), (12, 12, 0, False), (4, 64, 0, False), (4, 64, 3, True), (None, None, 1, True),
     (None, None, 0, False)],
)  # fmt: skip
def test_one_rule_decides(users: int | None, held: int | None, preemptions: int, limited: bool) -> None:
    assert capacity_limited(users, held, preemptions) is limited
    capacity = Capacity(users, held, preemptions)
    assert capacity.limited is limited and (capacity.mark == LIMITED_MARK) is limited
    assert bool(capacity.note()) is limited and capacity.to_dict()["capacity_limited"] is limited


@pytest.mark.parametrize(("users", "held"), [(64, 12), (256, 3), (10, 9)])
def test_the_speed_over_all_users_shares_the_running_users_tokens(users: int, held: int) -> None:
    """Tokens per second are conserved: ``users`` x averaged speed == ``held`` x running speed."""
    averaged = Capacity(users, held).averaged(445.0)
    assert averaged is not None and users * averaged == pytest.approx(held * 445.0)
    assert Capacity(held, users).averaged(445.0) == 445.0  # nothing waits: the speed stands


@pytest.mark.parametrize("seconds", [4.7e-4, 1.23e-2, 0.5, 20.4, 3.3e-8, 9.9996e-4, 1234.0])
def test_a_duration_prints_in_the_unit_that_shows_it(seconds: float) -> None:
    text = format_seconds(seconds)
    number, unit = text.split(" ")
    value = float(number.replace(",", ""))
    assert value >= 1 and unit in ("s", "ms", "us", "ns") and (unit == "s" or value < 1000)
    assert parse_quantity(text, "time") == pytest.approx(seconds, rel=5e-3)


def test_the_demo_flags_every_capacity_limited_speed(tmp_path: Path) -> None:
    result = run_cli("demo", "--no-agents", "-o", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "demo" / "speed_gap.json").read_text())
    text = (tmp_path / "demo" / "speed_gap.txt").read_text().splitlines()
    limited = {(r["model"], r["hardware"]) for r in rows if "loaded" in r and r["loaded"]["capacity_limited"]}
    assert ("llama-3.3-70b", "cerebras-cs3") in limited  # the case: 12 of 64 held
    for r in rows:
        if "loaded" not in r:
            continue
        line = next(x for x in text if x.split()[:2] == [r["model"], r["hardware"]])
        assert (LIMITED_MARK in line) is ((r["model"], r["hardware"]) in limited), line
        assert r["loaded"]["max_concurrency"] < r["loaded"]["concurrency"] or (r["model"], r["hardware"]) not in limited
    page = (tmp_path / "demo" / "report.html").read_text()
    for takeaway in _takeaways(page):
        model = takeaway.split(":")[0]
        if "with 64 users" not in takeaway:
            continue
        loaded = takeaway.split("with 64 users")[1]
        quoted = re.findall(r"([a-z0-9-]+) has the highest per-user speed( averaged over all users)?", loaded)
        named = {h for h in re.findall(r"that of ([a-z0-9-]+)", loaded)} | {h for h, _ in quoted}
        flagged = {h for m, h in limited if m == model and h in named}
        if flagged:  # a quoted capacity-limited speed: marked, named after the mark, ranked over all users
            assert LIMITED_MARK in loaded and quoted and quoted[0][1], takeaway
            for h in flagged:
                assert h in loaded.split(LIMITED_MARK, 1)[1], (h, takeaway)
    cs3 = next(t for t in _takeaways(page) if t.startswith("llama-3.3-70b:"))
    assert "cerebras-cs3 holds 12 of 64 users" in cs3


def _beyond_kv(tmp_path: Path) -> Path:
    path = tmp_path / "beyond.yaml"
    path.write_text(BEYOND_KV)
    return path


def test_compare_beyond_the_kv_flags_its_table_json_html_and_takeaways(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = run_cli("compare", str(_beyond_kv(tmp_path)), "--hardware", "cerebras-cs3", "-o", str(out), "--report")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((out / "compare.json").read_text())
    assert row["capacity_limited"] is True and row["held"] < row["in_flight"] <= row["users"] == 64
    assert row["per_user_output_tok_s_all_users"] == pytest.approx(
        row["per_user_output_tok_s_p50"] * row["held"] / row["in_flight"]
    )
    table_row = next(line for line in result.stdout.splitlines() if line.startswith("cerebras-cs3"))
    assert table_row.count(LIMITED_MARK) >= 3 and f"holds {row['held']} of 64 users" in table_row
    page = (out / "report.html").read_text()
    assert re.search(rf'<tr class="limited">.*?{LIMITED_MARK}.*?</tr>', page, flags=re.S)
    takeaways = _takeaways(page)
    assert takeaways
    for takeaway in takeaways:
        if "cerebras-cs3" in takeaway and re.search(r"tok/s|\d (s|ms|us)\b", takeaway):  # quotes a speed or time
            assert f"{LIMITED_MARK} capacity-limited: cerebras-cs3 holds {row['held']} of 64 users" in takeaway
    speed = next(t for t in takeaways if "per-user speed" in t)
    assert "averaged over all users" in speed


def test_run_beyond_the_kv_flags_its_table_json_and_report(tmp_path: Path) -> None:
    scenario = _beyond_kv(tmp_path)
    as_json = run_cli("run", str(scenario), "-o", str(tmp_path / "j"), "--json")
    assert as_json.returncode == 0, as_json.stderr
    capacity = json.loads(as_json.stdout)["capacity"]
    assert capacity["capacity_limited"] is True and capacity["held"] < capacity["users"] == 64
    text = run_cli("run", str(scenario), "-o", str(tmp_path / "t"), "--report")
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith("beyond-kv"))
    assert row.count(LIMITED_MARK) >= 3 and f"holds {capacity['held']} of 64 users" in row
    page = (tmp_path / "t" / "report.html").read_text()
    assert "capacity: ok" not in page and "<td>ok</td>" not in page
    for takeaway in _takeaways(page):
        if "tok/s per" in takeaway or "TTFT" in takeaway:
            assert LIMITED_MARK in takeaway, takeaway


def _agents_on_one_h100(tool_s: float, agents: int, duration: str) -> dict[str, object]:
    """Agents of four calls whose contexts grow to 21k tokens (about 27 fit one H100's KV), a tool
    call of ``tool_s`` between calls."""
    task = {
        "steps": {"dist": "constant", "value": 4},
        "system_prompt_tokens": {"dist": "constant", "value": 8000},
        "first_input_tokens": {"dist": "constant", "value": 1000},
        "step_input_tokens": {"dist": "constant", "value": 4000},
        "output_tokens": {"dist": "constant", "value": 100},
        "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": tool_s}},
    }
    workload = {"id": "grows", "name": "grows", "description": "test", "sources": {"t": "test"}, "task": task}
    return {
        "name": "agents-kv",
        "deployment": {"hardware": "nvidia-h100-sxm", "model": "gpt-oss-120b", "weights": "mxfp4"},
        "load": {"kind": "agents", "agents": agents, "workload": workload},
        "run": {"seed": 1, "duration": duration, "warmup": "0 s", "drain": False},
    }


def test_agents_count_against_the_kv_only_while_in_a_call() -> None:
    """48 agents on a replica whose KV holds about 27 of their mean calls: with no tool time every
    agent always has a call in flight (the response-time law with Z = 0) and the run is flagged;
    with 240-s tools the calls in flight are ``agents x`` the share of task time spent in calls
    (Little's law; over two hours, so that the tasks cut by the window's ends hardly count), fewer
    than it holds, and nothing is flagged though the agents outnumber it."""
    agents = 48
    busy = simulate(load_scenario(_agents_on_one_h100(0.0, agents, "900 s")))
    tools = simulate(load_scenario(_agents_on_one_h100(240.0, agents, "7200 s")))
    loaded, waiting = of_run(busy.scenario, busy.summary), of_run(tools.scenario, tools.summary)
    assert loaded.held == waiting.held and loaded.held is not None and loaded.held < agents
    assert loaded.in_flight == pytest.approx(agents, rel=1e-9) and loaded.limited
    assert loaded.holds() == f"holds {loaded.held} of {agents} users"
    tasks = tools.summary.tasks
    assert tasks is not None
    share = tasks.time_share
    assert waiting.in_flight == pytest.approx(agents * (share.model + share.queue + share.network), rel=0.05)
    assert waiting.in_flight is not None and waiting.in_flight < waiting.held and not waiting.limited
    assert waiting.averaged(500.0) == 500.0 and waiting.note() == ""
