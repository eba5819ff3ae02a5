"""The engine's fast step-cost path runs the same simulation as the reference step-time model, and
the laws hold on it (conservation, Little's law on the sample path, determinism)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.analytic.step_fast import ArrayCost, FastStepCost, engine_cost
from simulator.analytic.step_time import BatchAggregates, BatchShape, IterationCost, PassTimes, StepCostModel
from simulator.plan.resolve import resolve
from simulator.records.store import REQUEST_COLUMNS
from simulator.runner import RunResult, simulate
from tests.conftest import deploy
from tests.engine.conftest import CATALOG, scenario

OPEN = {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 20.0}}
LENGTHS = {"input_tokens": {"dist": "lognormal", "median": 800, "sigma": 0.8},
           "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8}}  # fmt: skip
CASES = {
    "reference workload": {"deployment": {"hardware": "nvidia-a100-sxm", "model": "llama-2-70b", "chips": 4,
                                          "tensor_parallel": 2, "pipeline_parallel": 2},
                           "scheduler": {"policy": "continuous", "priority": "prefill-first"}},
    "MoE, decode-first": {"deployment": {"hardware": "nvidia-h100-sxm", "model": "mixtral-8x7b", "chips": 2}},
    "windowed, layer-pipelined": {"deployment": {"hardware": "cerebras-cs3", "model": "gpt-oss-120b",
                                                 "weights": "mxfp4"}},
    "speculative": {"deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1,
                                   "speculative": {"draft": "eagle", "tokens_proposed": 3}}},
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Reference:
    """The reference model behind the CostModel protocol, so the engine runs it as it is."""

    model: StepCostModel

    @property
    def accepted(self) -> tuple[float, ...]:
        return self.model.accepted

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        return self.model.iteration_times(batch)

    def draft_s(self, context_tokens: np.ndarray) -> float:
        return self.model.draft_s(context_tokens)


def _run(case: str, seed: int = 5, reference: bool = False) -> RunResult:
    resolved = resolve(scenario(load=OPEN, requests=LENGTHS, run={"seed": seed, "max_requests": 150}, **CASES[case]),
                       CATALOG)  # fmt: skip
    if reference:
        backends = tuple(dataclasses.replace(b, cost=Reference(b.cost)) for b in resolved.backends)
        resolved = dataclasses.replace(resolved, backends=backends)
    return simulate(resolved, CATALOG)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, RunResult]:
    return request.param, _run(request.param)


def test_fast_path_runs_the_reference_simulation(case: tuple[str, RunResult]) -> None:
    """Same requests, same timestamps (to floating-point rounding), same iterations and work."""
    name, fast = case
    slow = _run(name, reference=True)
    for column in REQUEST_COLUMNS:
        np.testing.assert_allclose(fast.records.requests[column], slow.records.requests[column], rtol=1e-9)
    for ours, theirs in zip(fast.records.totals, slow.records.totals, strict=True):
        assert ours.iterations == theirs.iterations
        assert ours.flops == pytest.approx(theirs.flops, rel=1e-9)
        assert ours.bytes_moved == pytest.approx(theirs.bytes_moved, rel=1e-9)


def test_every_admitted_request_completes_and_littles_law_holds_on_the_sample_path(
    case: tuple[str, RunResult],
) -> None:
    """Drained runs: every request served (done after its first token) or dropped as too long for
    the model; the integral of N(t) equals the sum of the served requests' sojourns."""
    _, result = case
    rec = result.records
    r = rec.requests
    assert r["id"].tolist() == list(range(150)) and result.summary.requests_in_flight == 0
    served = r["dropped"] == 0
    assert np.all(r["done_s"][served] >= r["first_token_s"][served])
    assert np.all(r["first_token_s"][served] > r["arrival_s"][served])
    assert np.all(np.isnan(r["done_s"][~served]))
    area = rec.in_system.integral(0.0, rec.end_s)
    assert area == pytest.approx(float((r["done_s"] - r["arrival_s"])[served].sum()), rel=1e-9)


def test_a_run_stopped_mid_flight_reports_what_it_did_not_finish() -> None:
    """Without draining, the requests recorded plus those reported unfinished are every request
    made (ids 0..n-1, none twice), and the unfinished are those the in-system level still holds."""
    result = simulate(scenario(load=OPEN, requests=LENGTHS, run={"seed": 2, "duration": "4 s", "drain": False},
                               **CASES["reference workload"]), CATALOG)  # fmt: skip
    ids = result.records.requests["id"]
    unfinished = result.summary.requests_in_flight
    assert unfinished > 0
    assert np.unique(ids).size == ids.size and set(ids.tolist()) <= set(range(ids.size + unfinished))
    assert result.records.in_system.values[-1] == unfinished


def test_same_seed_same_run_other_seed_other_run() -> None:
    a, b, c = _run("reference workload"), _run("reference workload"), _run("reference workload", seed=6)
    for column in REQUEST_COLUMNS:
        np.testing.assert_array_equal(a.records.requests[column], b.records.requests[column])
    assert not np.array_equal(a.records.requests["arrival_s"], c.records.requests["arrival_s"])


class SlowerExperts(StepCostModel):
    """A variant of one mechanism: every MoE layer's compute takes three times as long."""

    def moe_row(self, tokens: float, tokens_per_rank: float) -> tuple[float, float, float, float, float]:
        weight_s, compute_s, flops, weight_bytes, expert_s = super().moe_row(tokens, tokens_per_rank)
        return weight_s, 3.0 * compute_s, flops, weight_bytes, expert_s


class SlowerPasses(StepCostModel):
    """A variant of how a pass is put together: every pass takes twice as long."""

    def pass_times(self, batch: BatchAggregates) -> PassTimes:
        times = super().pass_times(batch)
        return PassTimes({k: 2.0 * v for k, v in times.components_s.items()}, times.flops, times.bytes_moved)


def test_a_subclass_overriding_a_mechanism_is_what_the_fast_path_runs() -> None:
    deployment = deploy(CATALOG, "nvidia-h100-sxm", "mixtral-8x7b", chips=2)
    variant, plain = SlowerExperts(deployment), StepCostModel(deployment)
    fast = engine_cost(variant)
    assert isinstance(fast, FastStepCost)
    shape = BatchShape.of([2048.0, 1.0, 1.0], [0.0, 500.0, 900.0], None)
    want = variant.iteration_times(BatchAggregates(*np.array(shape, dtype=np.float64)[:, None]))
    assert fast.iteration(shape)[0] == pytest.approx(float(want.total_s[0]), rel=1e-12)
    assert fast.iteration(shape)[0] > engine_cost(plain).iteration(shape)[0] * 1.05  # the variant is seen


def test_a_subclass_reassembling_a_pass_runs_through_its_arrays_and_says_so() -> None:
    deployment = deploy(CATALOG, "nvidia-h100-sxm", "llama-3.1-8b")
    variant = SlowerPasses(deployment)
    with pytest.warns(UserWarning, match="overrides pass_times"):
        cost = engine_cost(variant)
    assert isinstance(cost, ArrayCost)
    shape = BatchShape.of([512.0, 1.0], [0.0, 300.0], None)
    plain = engine_cost(StepCostModel(deployment)).iteration(shape)[0]
    assert cost.iteration(shape)[0] == pytest.approx(2.0 * plain, rel=1e-12)
