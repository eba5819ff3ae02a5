"""One workload on several backends at matching load: speed against cost, side by side.

Each hardware profile gets the scenario's model on its smallest automatic placement (the
scenario's chips and layout are dropped, its precisions and KV floor kept) and the same
load, seeds and cost assumptions. A row is one (backend, load) run:

- ``per_user_output_tok_s``: the p50 decode speed a user sees (1 / TPOT);
- ``output_tok_s_per_chip`` and ``output_tok_per_usd``: aggregate output tok/s over the
  fleet's chips, and output tokens per dollar (``tok/s * 3600 / $/h``), the two axes of the
  throughput-interactivity frontier;
- task time, $/1M output tokens, $/task and tasks per $ from the run summary, and the
  provider's list API price for the model on that hardware where one is published;
- ``capacity_limited``, ``users``, ``held``, ``preemptions`` and ``in_flight`` (:mod:`simulator.capacity`):
  a row whose fleet holds fewer sequences than the calls its run had in flight, or that
  preempted, has its per-user speed and TTFT marked in the table, and
  ``per_user_output_tok_s_all_users`` averages the speed over them (``speed * held / in_flight``).

:func:`compare` runs the cases here, one after another; ``infersim compare`` runs the same
cases on an executor (:mod:`simulator.studies.execution`), where each row is computed by the process
that ran it and comes back as the same document.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from simulator.capacity import LIMITED_MARK, Capacity, of_resolved
from simulator.config.loading import Catalog, ConfigError
from simulator.config.paths import with_values
from simulator.config.scenario import Scenario
from simulator.errors import InfersimError
from simulator.plan.limits import Limits
from simulator.plan.resolve import resolve
from simulator.runner import RunResult, simulate
from simulator.sources import SourcedNumber, confidence_counts, deciding
from simulator.tables import format_number, format_table
from simulator.units import format_seconds

LAYOUT_FIELDS = ("chips", "tensor_parallel", "pipeline_parallel", "expert_parallel")


def on_hardware(name: str, hardware: str) -> dict[str, object]:
    """The field paths and values that move a scenario's one deployment to ``hardware`` (automatic
    layout), its name made ``<name>-<hardware>``; other paths of the same profile apply after them."""
    return {"name": f"{name}-{hardware}", "deployment.hardware": hardware} | {
        f"deployment.{field}": None for field in LAYOUT_FIELDS
    }


def check_one_deployment(name: str, has_backends: bool) -> None:
    if has_backends:
        raise ConfigError(f"{name}: compare moves one deployment across hardware; this scenario has backends")


@dataclass(frozen=True)
class ComparisonRow:
    hardware: str
    load: str
    result: RunResult

    def to_dict(self) -> dict[str, Any]:
        from simulator.studies.validation import validated_hardware

        s = self.result.summary
        backend = next(iter(s.backends.values()))
        cost = s.cost
        capacity, numbers = Capacity(None, None, s.preemptions), []
        try:
            resolved = resolve(self.result.scenario, Catalog())  # self-contained: its profiles written in
        except (InfersimError, OSError, ValueError):  # a trace moved away: the preemptions still decide
            resolved = None
        if resolved is not None:
            capacity = of_resolved(resolved, s)
            numbers = [n.to_dict() for n in deciding(resolved.backends[0].deployment)]
        row: dict[str, Any] = {
            "hardware": self.hardware,
            "validated": self.hardware in validated_hardware(),  # has rows in the bundled measurement table
            "load": self.load,
            "chips": backend.chips,
            "cost_basis": cost.basis,
            "per_user_output_tok_s_p50": s.per_user_output_tok_s.p50,
            "per_user_output_tok_s_all_users": capacity.averaged(s.per_user_output_tok_s.p50),
            "ttft_s_p50": s.ttft_s.p50,
            "ttft_s_p99": s.ttft_s.p99,
            "output_tok_s": s.output_tok_s,
            "output_tok_s_per_chip": s.output_tok_s / backend.chips,
            "output_tok_per_usd": s.output_tok_s * 3600.0 / cost.usd_per_hour,
            "usd_per_hour": cost.usd_per_hour,
            "usd_per_million_output_tokens": cost.usd_per_million_output_tokens,
            "joules_per_output_token": cost.joules_per_output_token,
            "api_usd_per_million_output_tokens": self._list_price(),
            **capacity.to_dict(),
            "sources": numbers,  # the numbers the row rests on, with confidence and source
        }
        if s.tasks is not None:
            t = s.tasks
            row |= {
                "task_time_s_p50": t.task_time_s.p50,
                "task_time_s_p90": t.task_time_s.p90,
                "tasks_completed": t.tasks_completed,
                "usd_per_task": cost.usd_per_task,
                "tasks_per_usd": cost.tasks_per_usd,
                "task_seconds": t.mean_seconds.to_dict(),
            }
        return row

    def _list_price(self) -> float | None:
        records = self.result.records.backends[0]
        price = records.hardware.price.api.get(records.model_id)
        return None if price is None else price.output_usd_per_million_tokens.value


def compare(
    scenario: Scenario,
    hardware: Iterable[str],
    loads: list[tuple[str, Scenario]] | None,
    catalog: Catalog,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> list[ComparisonRow]:
    """Run every (hardware, load) pair; ``loads`` are labelled variants of the scenario."""
    variants = loads or [("", scenario)]
    for _, variant in variants:
        check_one_deployment(variant.name, variant.backends is not None)
    cases = [
        (hw, label, with_values(variant, on_hardware(variant.name, hw)))
        for label, variant in variants
        for hw in hardware
    ]
    return compare_cases(cases, catalog, limits)


def compare_cases(
    cases: Iterable[tuple[str, str, Scenario]],
    catalog: Catalog,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> list[ComparisonRow]:
    """Run every ``(hardware, load label, scenario)`` case."""
    return [ComparisonRow(hw, label, simulate(scenario, catalog, limits=limits)) for hw, label, scenario in cases]


# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
HEADERS = [
    "hardware", "load", "chips", "basis", "tok/s/user p50", "TTFT p99", "out tok/s", "tok/s/chip",
    "out tok/$", "$/h", "$/1M out", "API $/1M out", "task p50 s", "$/task", "tasks/$", "capacity",
]  # fmt: skip


#: The table's columns: a row's key and its number format (None: shown as it is).
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
CELLS = (
    ("hardware", None), ("load", None), ("chips", None), ("cost_basis", None),
    ("per_user_output_tok_s_p50", ",.0f"), ("ttft_s_p99", "time"), ("output_tok_s", ",.0f"),
    ("output_tok_s_per_chip", ",.1f"), ("output_tok_per_usd", ",.0f"), ("usd_per_hour", ",.2f"),
    ("usd_per_million_output_tokens", ".3g"), ("api_usd_per_million_output_tokens", ".3g"),
    ("task_time_s_p50", ".1f"), ("usd_per_task", ".3g"), ("tasks_per_usd", ".3g"),
)  # fmt: skip


#: The cells a capacity limit marks: the per-user speed and the TTFT.
LIMITED_CELLS = ("per_user_output_tok_s_p50", "ttft_s_p99")


def table_cells(d: dict[str, Any]) -> list[object]:
    """One row of the comparison table, from a row's ``to_dict()``; a capacity-limited row has its speed
    and TTFT marked and a last cell saying what the fleet holds (``ok`` when nothing was limited)."""
    from simulator.studies.validation import hardware_label

    capacity = Capacity.from_dict(d)
    cells: list[object] = []
    for key, spec in CELLS:
        if spec is None:
            cell = d.get(key) or "-"
        else:
            cell = format_seconds(d.get(key)) if spec == "time" else format_number(d.get(key), spec)
            cell = capacity.marked(cell) if key in LIMITED_CELLS else cell
        cells.append(cell)
    return [hardware_label(str(d["hardware"])), *cells[1:], capacity.note() or "ok"]  # unvalidated hardware marked


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """The comparison table of rows (each a :meth:`ComparisonRow.to_dict`), with a footnote when a row is
    capacity-limited."""
    text = format_table(HEADERS, [table_cells(row) for row in rows])
    if any(Capacity.from_dict(row).limited for row in rows):
        text += (
            f"\n{LIMITED_MARK} capacity-limited: the fleet holds fewer sequences than the calls in flight (KV or "
            f"batch cap) or preempted; the speed is that of the calls running, the others queue (their TTFT "
            f"grows). Averaged over all of them: per_user_output_tok_s_all_users in compare.json."
        )
    return text


def sources_text(rows: list[dict[str, Any]], explain: list[SourcedNumber] | None = None) -> str:
    """Where each hardware's deciding numbers come from (one line per number: value, confidence, source);
    ``explain``: every sourced number of the profiles, with its citation and note."""
    lines = ["Numbers the rows rest on (value, confidence: source; --explain lists every number):"]
    seen: set[str] = set()
    for row in rows:
        hardware = str(row["hardware"])
        if hardware in seen or not row.get("sources"):
            continue
        seen.add(hardware)
        numbers = [SourcedNumber(**n) for n in row["sources"]]
        lines.append(f"  {hardware} ({confidence_counts(numbers)}): " + "; ".join(n.short() for n in numbers))
    if explain:
        lines += ["", "Every sourced number (path, value, confidence, source: citation; note):"]
        lines += [
            f"  {n.path}  {n.value}  {n.confidence}  {n.source}: {n.citation}" + (f"; {n.note}" if n.note else "")
            for n in explain
        ]
    return "\n".join(lines)
