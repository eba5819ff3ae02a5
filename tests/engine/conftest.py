"""Scenario builders for engine tests (config only: no test-only code paths in the engine)."""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.analytic.step_time import StepCostModel
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.runner import RunResult, simulate

CATALOG = Catalog()
SMALL = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}


def scenario(**parts: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "test",
        "deployment": SMALL,
        "load": {"kind": "closed", "users": 4},
        "requests": {
            "input_tokens": {"dist": "constant", "value": 64},
            "output_tokens": {"dist": "constant", "value": 16},
        },
        "run": {"seed": 1, "max_requests": 200},
    }
    data.update(parts)
    if "backends" in parts:
        del data["deployment"]
    return Scenario.model_validate(data)


def run(**parts: Any) -> RunResult:
    return simulate(scenario(**parts), CATALOG)


def service_time_s(cost: StepCostModel, input_tokens: int, output_tokens: int) -> float:
    """Batch-1 service: one prefill pass emitting the first token, then n - 1 decode passes."""
    prefill = cost.pass_time([float(input_tokens)], [0.0]).total_s
    decodes = sum(cost.pass_time([1.0], [float(input_tokens + j)]).total_s for j in range(output_tokens - 1))
    return prefill + decodes


def service_times_by_output(cost: StepCostModel, input_tokens: int, max_output: int) -> np.ndarray:
    """S(n) for n = 1..max_output at a fixed prompt length (vectorised cumulative decode times)."""
    prefill = cost.pass_time([float(input_tokens)], [0.0]).total_s
    steps = np.array([cost.pass_time([1.0], [float(input_tokens + j)]).total_s for j in range(max_output - 1)])
    return prefill + np.concatenate([[0.0], np.cumsum(steps)])
