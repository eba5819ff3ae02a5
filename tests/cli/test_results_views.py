"""What the commands print: per-class rows that add up to the fleet, sweep --set on the spec and its
base scenario, and a sweep's results table with the cache's share stated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from tests.cli.test_cli import SCENARIO

CLASSES = """\
name: classes
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
classes:
  - {name: chat, priority: 1, load: {kind: open, arrivals: {process: poisson, rate_per_s: 4}},
     requests: {input_tokens: {dist: constant, value: 256}, output_tokens: {dist: constant, value: 32}},
     slo: {ttft: 1 s}}
  - {name: bulk, priority: 0, load: {kind: open, arrivals: {process: poisson, rate_per_s: 2}},
     requests: {input_tokens: {dist: constant, value: 2048}, output_tokens: {dist: constant, value: 16}}}
run: {seed: 2, duration: 30 s, warmup: 2 s, drain: false}
"""

SWEEP = """\
name: s
scenario: base.yaml
grid: {load.users: [1, 2]}
metrics: [ttft_s.p50, output_tok_s]
"""


def _dollars(cell: str) -> float:
    return float(cell.replace(",", ""))


def _table(lines: list[str]) -> dict[str, dict[str, str]]:
    """A printed table (header, rule of dashes, rows until a blank line) as row name -> header -> cell."""
    spans, start = [], 0
    for width in (len(dash) for dash in lines[1].split("  ")):
        spans.append((start, start + width))
        start += width + 2
    cells = [[line[a:b].strip() for a, b in spans] for line in lines]
    rows = [row for row in cells[2:] if any(row)]
    return {row[0]: dict(zip(cells[0], row, strict=True)) for row in rows}


def test_run_prints_one_row_per_class_whose_dollars_add_up_to_the_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CLASSES)
    assert main(["run", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("per class") :].splitlines()[1:]
    rows = _table(lines[: lines.index("")])
    assert set(rows) == {"chat", "bulk", "fleet"}
    chat, bulk, fleet = rows["chat"], rows["bulk"], rows["fleet"]
    assert _dollars(chat["$"]) + _dollars(bulk["$"]) == pytest.approx(_dollars(fleet["$"]), abs=0.011)  # cents
    assert int(chat["requests"]) + int(bulk["requests"]) == int(fleet["requests"])
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["classes"]["chat"]["cost"]["usd"] + summary["classes"]["bulk"]["cost"]["usd"] == pytest.approx(
        summary["cost"]["usd"], rel=1e-12
    )


def test_sweep_set_overrides_the_spec_and_its_base_scenario_and_prints_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    sets = ["--set", "replications=2", "--set", "load.users=1,4", "--set", "deployment.hardware=nvidia-h200"]
    args = ["sweep", str(tmp_path / "sweep.yaml"), "-o", str(tmp_path / "o"), "--jobs", "1", *sets]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert sorted({r["load.users"] for r in rows}) == [1, 4]  # the scenario field replaced the spec's grid
    assert {r["deployment.hardware"] for r in rows} == {"nvidia-h200"}  # the base scenario's hardware moved
    assert len(rows) == 4 and {r["replication"] for r in rows} == {0, 1}  # the spec's replications
    assert main(args) == 0  # again: every row from the cache, and the table printed
    out = capsys.readouterr().out
    assert "TTFT p50 ms" in out and "output tok/s" in out and "±" in out
    assert "4 reused from the cache" in out
    lines = [line for line in out.splitlines() if "nvidia-h200" in line]
    assert len(lines) == 2


def test_sweep_set_refuses_a_list_for_a_single_spec_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(SCENARIO)
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "-o", str(tmp_path / "o"), "--set", "replications=2,3"]) == 2
    assert "replications: takes one value" in capsys.readouterr().err
