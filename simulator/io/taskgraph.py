"""infersim task graphs: one agent task per JSON line, its model calls as a DAG.

Format (one object per line)::

    {"id": "t1", "arrival_s": 0.0, "steps": [
        {"id": "plan",  "input_tokens": 2000, "output_tokens": 300, "tool_s": 0.5},
        {"id": "web1",  "input_tokens": 2600, "output_tokens": 200, "tool_s": 1.2, "after": ["plan"]},
        {"id": "web2",  "input_tokens": 2600, "output_tokens": 200, "tool_s": 0.9, "after": ["plan"]},
        {"id": "write", "input_tokens": 4000, "output_tokens": 900, "after": ["web1", "web2"]}]}

- ``input_tokens`` is the whole prompt of that call; ``output_tokens`` its answer;
  ``tool_s`` (default 0) the tool time after the call, before the steps that depend on it.
- ``after`` lists the steps that must finish (call and tool) first; steps without it start
  when the task arrives. Independent steps run in parallel.
- ``session`` (default: the task id) scopes prefix reuse: calls of one session reuse each
  other's KV blocks as ``(session, block index)``.

The graph is checked at load: unique step ids, ``after`` naming existing steps, no cycle.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from simulator.config.distributions import MAX_REQUEST_TOKENS
from simulator.config.files import json_object, read_text
from simulator.errors import ConfigError


@dataclass(frozen=True)
class GraphStep:
    id: str
    input_tokens: int
    output_tokens: int
    tool_s: float
    after: tuple[str, ...]
    session: str


@dataclass(frozen=True)
class TaskGraph:
    id: str
    arrival_s: float
    steps: tuple[GraphStep, ...]  # in a topological order


def _int(value: object, where: str) -> int:
    """Tokens of one call: 1 to :data:`~simulator.config.distributions.MAX_REQUEST_TOKENS`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    if value > MAX_REQUEST_TOKENS:
        raise ConfigError(f"{where}: expected at most {MAX_REQUEST_TOKENS:,} tokens, got more")
    return value


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(f"{where}: expected a non-negative number of seconds, got {value!r}")
    return float(value)


def _dependents(steps: list[GraphStep]) -> dict[str, list[str]]:
    """Each step's id -> the ids of the steps that wait for it, in step order."""
    dependents: dict[str, list[str]] = {s.id: [] for s in steps}
    for s in steps:
        for parent in s.after:
            dependents[parent].append(s.id)
    return dependents


def _cycle_error(by_id: dict[str, GraphStep], indegree: dict[str, int], where: str) -> ConfigError:
    """The error for a graph Kahn's algorithm could not finish: a cycle among the steps left waiting."""
    stuck = {i for i, d in indegree.items() if d > 0}
    cycle = _find_cycle(by_id, stuck)
    return ConfigError(f"{where}: steps: the graph has a cycle: {' -> '.join(cycle)}")


def topological_order(steps: list[GraphStep], where: str) -> tuple[GraphStep, ...]:
    """Kahn's algorithm; a cycle is reported with the steps on it."""
    by_id = {s.id: s for s in steps}
    indegree = {s.id: len(s.after) for s in steps}
    dependents = _dependents(steps)
    ready = [s.id for s in steps if indegree[s.id] == 0]
    order = []
    while ready:
        current = ready.pop(0)
        order.append(by_id[current])
        for child in dependents[current]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if len(order) < len(steps):
        raise _cycle_error(by_id, indegree, where)
    return tuple(order)


def _find_cycle(by_id: dict[str, GraphStep], stuck: set[str]) -> list[str]:
    start = min(stuck)
    path, seen = [start], {start}
    while True:
        nxt = next(p for p in by_id[path[-1]].after if p in stuck)
        if nxt in seen:
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)


_STEP_KEYS = {"id", "input_tokens", "output_tokens", "tool_s", "after", "session"}


def _parse_step(raw: object, i: int, where: str, task_id: str) -> GraphStep:
    """Step ``i`` of a task: an object with known keys whose ``after`` lists step ids."""
    at = f"{where}: steps.{i}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}: expected an object")
    unknown = sorted(set(raw) - _STEP_KEYS)
    if unknown:
        raise ConfigError(f"{at}: unknown keys {unknown}")
    after = raw.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        raise ConfigError(f"{at}.after: expected a list of step ids")
    return GraphStep(
        id=str(raw.get("id") or f"step{i}"),
        input_tokens=_int(raw.get("input_tokens"), f"{at}.input_tokens"),
        output_tokens=_int(raw.get("output_tokens"), f"{at}.output_tokens"),
        tool_s=_seconds(raw.get("tool_s", 0.0), f"{at}.tool_s"),
        after=tuple(after),
        session=str(raw.get("session", task_id)),
    )


def _check_step_ids(steps: list[GraphStep], where: str, task_id: str) -> None:
    """Step ids are unique, and every ``after`` names a step of the task."""
    ids = [s.id for s in steps]
    duplicate = next((x for x in ids if ids.count(x) > 1), None)
    if duplicate:
        raise ConfigError(f"{where}: steps: step id {duplicate!r} appears twice")
    for i, s in enumerate(steps):
        missing = [a for a in s.after if a not in ids]
        if missing:
            raise ConfigError(f"{where}: steps.{i}.after: no step {missing[0]!r} in task {task_id!r}")


def parse_task(record: dict[str, object], where: str) -> TaskGraph:
    task_id = str(record.get("id", ""))
    if not task_id:
        raise ConfigError(f"{where}: id: missing")
    raw_steps = record.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(f"{where}: steps: expected a non-empty list")
    steps = [_parse_step(raw, i, where, task_id) for i, raw in enumerate(raw_steps)]
    _check_step_ids(steps, where, task_id)
    return TaskGraph(task_id, _seconds(record.get("arrival_s", 0.0), f"{where}: arrival_s"),
                     topological_order(steps, where))  # fmt: skip


def load_task_graphs(path: Path) -> list[TaskGraph]:
    lines = read_text(path).splitlines()
    tasks = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        tasks.append(parse_task(json_object(text, where), where))
    if not tasks:
        raise ConfigError(f"{path}: no tasks (the file has no JSON lines)")
    return sorted(tasks, key=lambda t: t.arrival_s)


def dump_task_graph(task: TaskGraph) -> str:
    """One JSON line (the inverse of :func:`parse_task`)."""
    return json.dumps({
        "id": task.id, "arrival_s": task.arrival_s,
        "steps": [{"id": s.id, "input_tokens": s.input_tokens, "output_tokens": s.output_tokens, "tool_s": s.tool_s,
                   "after": list(s.after), "session": s.session} for s in task.steps],
    })  # fmt: skip
