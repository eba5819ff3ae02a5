"""infersim's task-graph format: parallel branches join exactly; bad graphs are named precisely."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from simulator.config.loading import Catalog, ConfigError
from simulator.io.taskgraph import dump_task_graph, load_task_graphs
from simulator.runner import scenario_from, simulate
from tests.engine.conftest import service_time_s
from tests.engine.test_queueing_laws import COST

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "workloads" / "traces" / "taskgraphs" / "research-example.jsonl"


def _graph_file(tmp_path: Path, *tasks: dict) -> Path:
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    return path


def _run(path: Path) -> object:
    data = {
        "name": "graphs",
        "deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1},
        "load": {"kind": "trace", "format": "taskgraph", "path": str(path)},
        "prefix_caching": False,
        "run": {"seed": 1, "duration": "100000 s"},
    }
    return simulate(scenario_from(data, {}, str(path)), Catalog())


def test_a_diamond_joins_when_its_slower_branch_ends(tmp_path: Path) -> None:
    """A -> (B, C) -> D on one server: D starts at max over branches of (call done + tool)."""
    steps = [
        {"id": "a", "input_tokens": 300, "output_tokens": 20, "tool_s": 0.5},
        {"id": "b", "input_tokens": 400, "output_tokens": 30, "tool_s": 2.0, "after": ["a"]},
        {"id": "c", "input_tokens": 400, "output_tokens": 10, "tool_s": 0.1, "after": ["a"]},
        {"id": "d", "input_tokens": 800, "output_tokens": 40, "after": ["b", "c"]},
    ]
    result = _run(_graph_file(tmp_path, {"id": "t", "arrival_s": 0.0, "steps": steps}))
    r = result.records.requests
    by_output = {int(n): i for i, n in enumerate(r["output_tokens"])}  # each step has its own output length
    a, b, c, d = (by_output[n] for n in (20, 30, 10, 40))
    assert r["done_s"][a] == pytest.approx(service_time_s(COST, 300, 20), rel=1e-12)
    assert r["arrival_s"][b] == r["arrival_s"][c] == pytest.approx(r["done_s"][a] + 0.5, rel=1e-12)
    join = max(r["done_s"][b] + 2.0, r["done_s"][c] + 0.1)
    assert r["arrival_s"][d] == pytest.approx(join, rel=1e-12)
    task = result.records.tasks
    assert task["calls"][0] == 4 and task["end_s"][0] == pytest.approx(r["done_s"][d], rel=1e-12)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"id": "a", "input_tokens": 5, "output_tokens": 1, "after": ["b"]},
          {"id": "b", "input_tokens": 5, "output_tokens": 1, "after": ["a"]}], "the graph has a cycle: a -> b -> a"),
        ([{"id": "a", "input_tokens": 5, "output_tokens": 1, "after": ["ghost"]}], "steps.0.after: no step 'ghost'"),
        ([{"id": "a", "input_tokens": 5, "output_tokens": 1}, {"id": "a", "input_tokens": 5, "output_tokens": 1}],
         "step id 'a' appears twice"),
        ([{"id": "a", "input_tokens": 0, "output_tokens": 1}], "steps.0.input_tokens: expected a positive integer"),
        ([{"id": "a", "input_tokens": 5, "output_tokens": 1, "retries": 2}], "steps.0: unknown keys ['retries']"),
    ],
)  # fmt: skip
def test_bad_graphs_name_the_step(tmp_path: Path, steps: list, message: str) -> None:
    path = _graph_file(tmp_path, {"id": "ok", "steps": [{"id": "x", "input_tokens": 5, "output_tokens": 1}]},
                       {"id": "t", "steps": steps})  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(message)):
        load_task_graphs(path)


def test_task_graphs_round_trip(tmp_path: Path) -> None:
    graphs = load_task_graphs(EXAMPLE)
    path = tmp_path / "copy.jsonl"
    path.write_text("\n".join(dump_task_graph(g) for g in graphs) + "\n")
    assert load_task_graphs(path) == graphs


def test_the_bundled_example_replays() -> None:
    result = _run(EXAMPLE)
    tasks = result.summary.tasks
    assert tasks is not None and tasks.tasks_completed == 2 and result.summary.requests_completed == 8
