"""The speed war, end to end: the speed gap from first principles, then agents under load.

1. **Speed gap**: each demo model on every hardware profile (smallest placement that fits),
   single-stream and with ``DEMO_LOADED_USERS`` users, from the closed-form estimate.
2. **Agents**: fast-tool coding agents (50 calls, ~0.2 s tools) on gpt-oss-120b, simulated on
   ``SPEED_WAR_HARDWARE`` alone and with ``SPEED_WAR_AGENTS[-1]`` agents at once: task time,
   where it goes, and the cost per task (:mod:`simulator.studies.compare`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.analytic.estimate import Estimate, estimate
from simulator.analytic.layouts import deploy
from simulator.analytic.placement import PlacementError
from simulator.capacity import LIMITED_MARK, of_estimate, of_run
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.serialize import estimate_dict
from simulator.studies.compare import ComparisonRow, compare
from simulator.tables import format_number, format_table
from simulator.units import format_seconds

#: The speed-gap demo: the article's open model and our frontier stand-in on every profile.
DEMO_MODELS = (("gpt-oss-120b", "mxfp4"), ("llama-3.3-70b", None), ("frontier-moe", None))
DEMO_INPUT_TOKENS = 1000
DEMO_OUTPUT_TOKENS = 1000
#: Concurrency of the "under load" column: a typical batch on one serving replica.
DEMO_LOADED_USERS = 64

SPEED_WAR_HARDWARE = ("cerebras-cs3", "groq-lpu", "sambanova-sn40l", "nvidia-h100-sxm")
SPEED_WAR_AGENTS = (1, 16)
#: Fast-tool agents on gpt-oss-120b; the KV floor lets 16 agents' contexts fit everywhere.
SPEED_WAR_SCENARIO = {
    "name": "speed-war-agents",
    "description": "fast-tool coding agents on gpt-oss-120b",
    "deployment": {"hardware": "nvidia-h100-sxm", "model": "gpt-oss-120b", "weights": "mxfp4",
                   "min_kv_tokens": 262144},
    "load": {"kind": "agents", "workload": "fast-tool-agent", "agents": 1},
    "run": {"seed": 1, "duration": "300 s", "warmup": "0 s", "drain": True},
}  # fmt: skip


@dataclass(frozen=True)
class GapRow:
    """One model on one hardware profile: alone and under load, or why it does not fit."""

    model: str
    hardware: str
    single: Estimate | None = None
    loaded: Estimate | None = None
    error: str = ""

    def to_dict(self) -> dict[str, object]:
        if self.single is None or self.loaded is None:
            return {"model": self.model, "hardware": self.hardware, "error": self.error}
        return {"model": self.model, "hardware": self.hardware, "single_stream": estimate_dict(self.single),
                "loaded": estimate_dict(self.loaded)}  # fmt: skip


def speed_gap(catalog: Catalog) -> list[GapRow]:
    """The demo models on every hardware profile, alone and with DEMO_LOADED_USERS users."""
    out = []
    for model_id, weights in DEMO_MODELS:
        for hardware_id in catalog.hardware_ids():
            spec = DeploymentSpec(hardware=hardware_id, model=model_id, weights=weights)
            try:
                d = deploy(catalog, spec)
            except PlacementError as exc:
                out.append(GapRow(model_id, hardware_id, error=str(exc)))
                continue
            single = estimate(d, DEMO_INPUT_TOKENS, DEMO_OUTPUT_TOKENS, 1)
            loaded = estimate(d, DEMO_INPUT_TOKENS, DEMO_OUTPUT_TOKENS, DEMO_LOADED_USERS)
            out.append(GapRow(model_id, hardware_id, single, loaded))
    return out


def speed_gap_text(rows: Sequence[GapRow]) -> str:
    """The table, with a mark on loaded figures whose KV holds fewer than the users, and why."""
    table: list[list[object]] = []
    limited = False
    for r in rows:
        if r.single is None or r.loaded is None:
            table.append([r.model, r.hardware, "-", "-", "-", "-", "-", "-", "-", "does not fit"])
            continue
        capacity = of_estimate(r.loaded)
        mark = capacity.mark
        limited = limited or capacity.limited
        single_speed = format_number(r.single.per_user_output_tok_s, ",.0f")
        table.append([r.model, r.hardware, r.single.deployment.chips, single_speed, format_seconds(r.single.ttft_s),
                      format_number(r.loaded.per_user_output_tok_s, ",.0f") + mark,
                      format_number(capacity.averaged(r.loaded.per_user_output_tok_s), ",.0f") + mark,
                      f"{r.loaded.aggregate_output_tok_s:,.0f}{mark}", r.loaded.max_concurrency,
                      r.single.bottleneck])  # fmt: skip
    users = DEMO_LOADED_USERS
    headers = ["model", "hardware", "chips", "tok/s/user @1", "TTFT @1", f"tok/s/user @{users}",
               f"tok/s/user @{users} all users", f"aggregate tok/s @{users}", "KV holds", "bottleneck @1"]  # fmt: skip
    text = format_table(headers, table)
    if limited:
        text += (
            f"\n{LIMITED_MARK} capacity-limited: the KV cache holds fewer than {users} users at "
            f"{DEMO_INPUT_TOKENS}+{DEMO_OUTPUT_TOKENS} tokens (column 'KV holds'): 'tok/s/user @{users}' is the "
            f"speed of the users that fit; the others wait in a queue (TTFT grows by the response-time law: "
            f"R = N / X); 'all users' averages it over all {users} (speed x held / {users})"
        )
    return text


def agent_war(catalog: Catalog) -> list[ComparisonRow]:
    """The agents on every speed-war hardware, alone and under load."""
    base = Scenario.model_validate(SPEED_WAR_SCENARIO)
    assert base.load is not None
    loads = []
    for n in SPEED_WAR_AGENTS:
        load = base.load.model_copy(update={"agents": n})
        loads.append((f"{n} agent{'s' if n > 1 else ''}", base.model_copy(update={"load": load})))
    return compare(base, SPEED_WAR_HARDWARE, loads, catalog)


def task_table(rows: Sequence[ComparisonRow]) -> str:
    """Task time, where it goes, per-user speed and cost per task, one row per (hardware, load); a
    capacity-limited row (:mod:`simulator.capacity`) has its speed and times marked."""
    table: list[list[object]] = []
    limited = False
    for row in rows:
        s = row.result.summary
        t = s.tasks
        assert t is not None, "the speed war's agents run tasks"
        capacity = of_run(row.result.scenario, s)
        mark = capacity.mark
        limited = limited or capacity.limited
        part = t.mean_seconds
        table.append([row.hardware, row.load, t.tasks_completed, f"{t.task_time_s.p50:.1f}{mark}",
                      f"{part.model:.1f}", f"{part.tool:.1f}", f"{part.queue:.1f}",
                      f"{s.per_user_output_tok_s.p50:,.0f}{mark}", f"{s.cost.usd_per_task:.3g}",
                      f"{s.cost.usd_per_hour:,.2f}", capacity.note() or "ok"])  # fmt: skip
    headers = ["hardware", "load", "tasks", "task p50 s", "model s", "tool s", "queue s", "tok/s/user p50",
               "$/task", "$/h", "capacity"]  # fmt: skip
    text = format_table(headers, table)
    if limited:
        text += (f"\n{LIMITED_MARK} capacity-limited: the fleet holds fewer sequences than the agents' calls in "
                 f"flight (KV or batch cap) or preempted; the others queue")  # fmt: skip
    return text
