"""infersim: how fast LLMs run on very different inference hardware, and what it costs.

Layers, one direction (each imports only those above it in this list):

- ``config``: pydantic data (profiles, scenarios) and the one field-path language;
- ``analytic``: pure numpy physics and economics (placement, step times, estimates, prices);
- ``io``: other tools' files read and written (traces, task graphs, Hugging Face configs,
  importers, exporters);
- ``plan``: a scenario's frozen plans (``plan.resolve``: every lookup, placement, price and check
  done once) and the limits on what a command may run (``plan.limits``);
- ``records``: what a run leaves behind, the contract between the engine and the results;
- ``engine``: SimPy processes wired from those plans, writing the records (``engine.batching``:
  one policy per file behind a registry; ``engine.kv``: blocks and the tiers below them);
- ``results``: metrics and the typed run summary, derived from the records;
- ``studies``: what the commands do with runs (compare, planning, sweep, validation,
  cross-validation, calibration, measured runs, the demo);
- ``report``: the HTML report, its figures and captions;
- ``cli``: the ``infersim`` command, the only package that writes files.

The public API (:mod:`simulator.api`), for notebooks and scripts::

    import simulator

    scenario = simulator.load_scenario("scenarios/h100-llama70b-trtllm.yaml", {"load.users": 4})
    result = simulator.simulate(scenario)
    print(result.summary.per_user_output_tok_s.p50, result.summary.cost.usd_per_million_output_tokens)

Names are imported when first used, so ``import simulator`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simulator import compiled
from simulator.version import __version__

compiled.install()  # the engine's hot modules from their compiled build, if it is current

if TYPE_CHECKING:
    from simulator.analytic import roofline
    from simulator.analytic.estimate import estimate
    from simulator.api import compare_hardware, deploy, load_scenario, override, plan_fleet, resolve, simulate
    from simulator.config.loading import Catalog
    from simulator.errors import InfersimError
    from simulator.report import plots

#: Public name -> (module, attribute; empty: the module itself).
_PUBLIC = {
    "Catalog": ("simulator.config.loading", "Catalog"),
    "InfersimError": ("simulator.errors", "InfersimError"),
    "compare_hardware": ("simulator.api", "compare_hardware"),
    "deploy": ("simulator.api", "deploy"),
    "estimate": ("simulator.analytic.estimate", "estimate"),
    "load_scenario": ("simulator.api", "load_scenario"),
    "override": ("simulator.api", "override"),
    "plan_fleet": ("simulator.api", "plan_fleet"),
    "plots": ("simulator.report.plots", ""),
    "resolve": ("simulator.api", "resolve"),
    "roofline": ("simulator.analytic.roofline", ""),
    "simulate": ("simulator.api", "simulate"),
}

__all__ = [
    "Catalog",
    "InfersimError",
    "__version__",
    "compare_hardware",
    "deploy",
    "estimate",
    "load_scenario",
    "override",
    "plan_fleet",
    "plots",
    "resolve",
    "roofline",
    "simulate",
]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def __dir__() -> list[str]:
    return sorted(__all__)
