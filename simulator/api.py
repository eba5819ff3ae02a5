"""The public Python API: what notebooks and scripts call (re-exported by :mod:`simulator`).

Every function takes an optional :class:`~simulator.config.loading.Catalog` (default: the
bundled profiles) and returns validated, frozen objects; none writes a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from simulator.analytic import layouts
from simulator.analytic.placement import Deployment
from simulator.config.deployment import DeploymentSpec
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.model import ModelSpec
from simulator.config.paths import with_values
from simulator.config.scenario import Scenario
from simulator.plan.limits import Limits
from simulator.plan.resolve import ResolvedScenario
from simulator.plan.resolve import resolve as resolve_with
from simulator.runner import RunResult, load_scenario_data, scenario_from
from simulator.runner import simulate as simulate_with
from simulator.studies.compare import ComparisonRow, compare
from simulator.studies.planning import Planner, PlanResult

M = TypeVar("M", bound=BaseModel)


def load_scenario(
    source: str | Path | Mapping[str, object],
    overrides: Mapping[str, object] | None = None,
    catalog: Catalog | None = None,
) -> Scenario:
    """A validated scenario from a YAML file (or a mapping of its fields), with field paths set.

    Parameters
    ----------
    source
        A scenario file, or its contents as a mapping (trace paths then relative to the
        current folder).
    overrides
        Field path -> value, as ``--set`` takes them (:mod:`simulator.config.paths`), e.g.
        ``{"load.users": 16, "deployment.hardware.memory.hbm.bandwidth": "6.7 TB/s"}``.
    catalog
        Where the profiles a path goes into are found (default: the bundled ones).
    """
    if isinstance(source, Mapping):
        data, name = dict(source), "<scenario>"
    else:
        data, name = load_scenario_data(Path(source)), str(source)
    return scenario_from(data, dict(overrides or {}), name, catalog or Catalog())


def resolve(scenario: Scenario, catalog: Catalog | None = None) -> ResolvedScenario:
    """Every lookup, placement, price and check of ``scenario`` (:func:`simulator.plan.resolve.resolve`)."""
    return resolve_with(scenario, catalog or Catalog())


def simulate(
    scenario: Scenario | ResolvedScenario,
    catalog: Catalog | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> RunResult:
    """Run a scenario (or a resolved one, whose plans may have been replaced): records and summary.

    ``limits``: the size a run may reach before it needs ``limits=None`` (:mod:`simulator.plan.limits`).
    """
    return simulate_with(scenario, catalog or Catalog(), limits=limits)


def deploy(
    hardware: str | HardwareProfile, model: str | ModelSpec, catalog: Catalog | None = None, **layout: object
) -> Deployment:
    """A model placed on hardware: the smallest placement that fits, or the ``layout`` given
    (``chips``, ``tensor_parallel``, ``pipeline_parallel``, ``expert_parallel``, ``stack``,
    ``weights``, ``kv_cache``, ...); a mixture of experts takes the layout that is fastest for
    one user unless one is given.

    ``hardware`` and ``model`` are profile ids or profiles (e.g. from :func:`override`).
    """
    catalog = catalog or Catalog()
    spec = DeploymentSpec.model_validate({"hardware": hardware, "model": model, **layout})
    return layouts.deploy(catalog, spec)


def override(model: M, values: Mapping[str, object]) -> M:
    """A copy of a profile or scenario with each ``path: value`` set, marked as the user's.

    Values are strings with units (``"6.7 TB/s"``) or numbers in SI units.
    """
    return with_values(model, values)


def compare_hardware(
    scenario: Scenario,
    hardware: Iterable[str],
    loads: list[tuple[str, Scenario]] | None = None,
    catalog: Catalog | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> list[ComparisonRow]:
    """One scenario's deployment on each hardware (automatic placement) at each labelled load."""
    return compare(scenario, hardware, loads, catalog or Catalog(), limits)


def plan_fleet(
    scenario: Scenario,
    catalog: Catalog | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> PlanResult:
    """The cheapest fleet of the scenario's backends meeting every class's ``slo.targets``."""
    return Planner(scenario, catalog or Catalog(), run_limits=limits).search()
