"""Run a scenario end to end: build, simulate, freeze the records, derive the summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.loading import Catalog, ConfigError, apply_override, read_yaml, validate_data
from simulator.config.scenario import Scenario
from simulator.engine.build import build
from simulator.results.metrics import summarize
from simulator.results.records import RunRecords, freeze


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario
    records: RunRecords
    summary: dict[str, Any]


def load_scenario_data(path: Path) -> dict[str, object]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields at the top level")
    return data


def scenario_from(data: dict[str, object], overrides: dict[str, object], source: str) -> Scenario:
    """Apply dotted overrides to raw scenario data, then validate (errors name the path)."""
    for path, value in overrides.items():
        data = apply_override(data, path, value, source)
    return validate_data(Scenario, data, source)


def simulate(scenario: Scenario, catalog: Catalog) -> RunResult:
    simulation = build(scenario, catalog)
    end_s = simulation.run()
    records = freeze(simulation, end_s)
    return RunResult(scenario, records, summarize(records, scenario.slo))
