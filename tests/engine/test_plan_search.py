"""The pruned plan search returns the exhaustive search's answer, with fewer simulations.

The exhaustive search simulates every candidate (each backend alone at 1..max replicas, every
mixed count vector) and takes the cheapest that meets; the planner prunes by cost, by the
capacity bound and by known misses, and bisects, on runs stopped as soon as a task-time target
misses (:class:`~simulator.studies.settled.SettledMiss`); the exhaustive search runs every
candidate to its end. The cases are small (8B model, 60-120 s runs) so each takes seconds.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scipy.special import stdtrit

from simulator.config.scenario import Scenario
from simulator.plan.limits import Limits
from simulator.plan.resolve import ScenarioError
from simulator.report import plan_figure
from simulator.runner import load_scenario_data, scenario_from
from simulator.studies.dominance import ServiceOrder, swapped
from simulator.studies.execution import Cache, Executor, Runs
from simulator.studies.planning import (
    Evaluation,
    Miss,
    Planner,
    PlanResult,
    SeedCheck,
    _checked_text,
    _within_noise_text,
    agent_call_demand,
    non_monotone,
    plan_text,
    seeds_bound,
    summary_run,
)
from tests.engine.conftest import CATALOG, scenario

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
A100_8B = {"hardware": "nvidia-a100-sxm", "model": "llama-3.1-8b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
CAPPED = {"policy": "continuous", "max_batch_size": 4}
CONSTANT = {"input_tokens": {"dist": "constant", "value": 500}, "output_tokens": {"dist": "constant", "value": 200}}
RUN = {"seed": 11, "duration": "90 s", "warmup": "15 s", "drain": False}
SMALL_AGENT = {
    "schema_version": 1, "id": "small-agent", "name": "Small agent", "description": "five short calls",
    "sources": {"assumed": "a test workload"},
    "task": {"steps": {"dist": "constant", "value": 5},
             "system_prompt_tokens": {"dist": "constant", "value": 400},
             "first_input_tokens": {"dist": "constant", "value": 200},
             "step_input_tokens": {"dist": "constant", "value": 100},
             "output_tokens": {"dist": "constant", "value": 150},
             "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 1.0}}},
}  # fmt: skip


def _two_gpus_open() -> Scenario:
    """Open load on H100s or A100s (capped batches): a queueing question, no capacity bound."""
    return scenario(
        backends=[{"name": "h100", "deployment": H100_8B, "scheduler": CAPPED},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED}],
        router={"policy": "join-shortest-queue"}, requests=CONSTANT,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 6.0}},
        slo={"targets": [{"metric": "ttft_s", "stat": "p99", "max": "2 s"}]},
        plan={"max_replicas": {"h100": 3, "a100": 3}, "replications": 1}, run=RUN,
    )  # fmt: skip


def _agents_on(gpus: dict[str, dict[str, Any]], most: dict[str, int], bound: str = "14 s",
               workload: dict[str, Any] = SMALL_AGENT) -> Scenario:  # fmt: skip
    """24 closed-loop agents on ``gpus`` (name -> deployment; capped batches, at most ``most``
    replicas each) with a p95 task-time target of ``bound``: the capacity bound applies."""
    return scenario(
        backends=[{"name": name, "deployment": deployment, "scheduler": CAPPED} for name, deployment in gpus.items()],
        router={"policy": "least-outstanding-tokens"},
        load={"kind": "agents", "workload": workload, "agents": 24}, requests=None,
        slo={"targets": [{"metric": "task_time_s", "stat": "p95", "max": bound}]},
        plan={"max_replicas": most, "replications": 1},
        run={"seed": 5, "duration": "60 s", "warmup": "0 s", "drain": True},
    )  # fmt: skip


def _agents_task_time(bound: str = "14 s", workload: dict[str, Any] = SMALL_AGENT) -> Scenario:
    """Closed-loop agents on H100s or A100s with a p95 task-time target."""
    return _agents_on({"h100": H100_8B, "a100": A100_8B}, {"h100": 4, "a100": 4}, bound, workload)


def _kin_gpus() -> Scenario:
    """Agents on B200s, B300s and H100s: a B300 serves no slower than a B200 (the same passes, more
    KV) and costs less, and both serve no slower than an H100 (8B on one chip each). One B300 is
    allowed, so the answer needs a B200 beside it; the order settles fleets and skips beaten ones."""
    kin = {name: {"hardware": f"nvidia-{name}", "model": "llama-3.1-8b", "chips": 1} for name in ("b200", "b300")}
    return _agents_on(kin | {"h100": H100_8B}, {"b200": 2, "b300": 1, "h100": 1})


def _slow_beside_fast() -> Scenario:
    """Agents on H100s, B200s and A100s (8B on one chip each): an A100 runs every pass slower than
    either, an H100 slower than a B200. The router balances load, not speed, and a task sticks to
    its replica, so a slower replica can make a fleet miss: 2 x h100 + 1 x b200 meets, and with an
    A100 more it misses. A search that settled it below that miss would answer a dearer fleet."""
    b200 = {"hardware": "nvidia-b200", "model": "llama-3.1-8b", "chips": 1}
    return _agents_on({"h100": H100_8B, "b200": b200, "a100": A100_8B}, {"h100": 2, "b200": 2, "a100": 3}, "11 s")


def _slow_beside_fast_routed_by_speed() -> Scenario:
    """The same fleets routed by predicted latency (``least-predicted-latency``): a call goes to the
    A100 only where it is predicted served sooner there, so no backend is taken as one that may make
    a fleet worse, and a miss settles every fleet below it (an A100 count is bisected, not walked)."""
    s = _slow_beside_fast()
    return s.model_copy(update={"router": s.router.model_copy(update={"policy": "least-predicted-latency"})})


def _two_fast_beside_a_slow() -> Scenario:
    """Agents on H100 pairs, B200s, B300s and A100s (8B): an A100 runs every pass slower than the
    others, and none of the others is slower than another (a TP2 H100 is faster than a B200 on some
    passes, slower on others). As in the headline question, the fast GPUs' fleets are walked and
    bisected along the B300s and the A100 fleets beside them searched maximal first."""
    h100x2 = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 2}
    b200 = {"hardware": "nvidia-b200", "model": "llama-3.1-8b", "chips": 1}
    b300 = {"hardware": "nvidia-b300", "model": "llama-3.1-8b", "chips": 1}
    gpus = {"h100": h100x2, "b200": b200, "a100": A100_8B, "b300": b300}
    return _agents_on(gpus, {"h100": 2, "b200": 2, "a100": 6, "b300": 4}, "11 s")


def _routed_classes() -> Scenario:
    """Three backends, two classes with routing rules (the wafer for speed), one cost basis."""
    classes = [
        {"name": "interactive", "load": {"kind": "closed", "users": 2}, "requests": CONSTANT,
         "slo": {"targets": [{"metric": "per_user_output_tok_s", "stat": "p50", "min": 1000}]}},
        {"name": "bulk", "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 4.0}},
         "requests": CONSTANT, "slo": {"targets": [{"metric": "ttft_s", "stat": "p99", "max": "2 s"}]}},
    ]  # fmt: skip
    return scenario(
        backends=[{"name": "wafer", "deployment": CS3_8B},
                  {"name": "h100", "deployment": H100_8B, "scheduler": CAPPED},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED}],
        router={"rules": {"interactive": ["wafer"], "bulk": ["h100", "a100"]}}, classes=classes, load=None,
        requests=None, plan={"max_replicas": {"wafer": 1, "h100": 2, "a100": 2}, "replications": 1}, run=RUN,
        cost={"basis": "ownership"},
    )  # fmt: skip


def _split_pools() -> Scenario:
    """H100s prefill and hand their prompts' KV to A100s that decode (while both have replicas)."""
    return scenario(
        backends=[{"name": "h100", "deployment": H100_8B, "scheduler": CAPPED, "decode_on": "a100",
                   "kv_link": {"bandwidth": "50 GB/s", "latency": "5 us"}},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED | {"preemption": "recompute"}}],
        router={"policy": "join-shortest-queue"}, requests=CONSTANT,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 3.0}},
        slo={"targets": [{"metric": "ttft_s", "stat": "p99", "max": "2 s"}]},
        plan={"max_replicas": {"h100": 3, "a100": 3}, "replications": 1}, run=RUN,
    )  # fmt: skip


def _with_api() -> Scenario:
    """The open-load GPUs beside a per-token API backend (kept in every fleet, also tried alone)."""
    s = _two_gpus_open()
    cloud = {"name": "cloud", "deployment": CS3_8B, "cost_basis": "api"}
    return scenario(**(s.model_dump(exclude_none=True, by_alias=True) | {"backends": [*s.model_dump(
        by_alias=True)["backends"], cloud]}))  # fmt: skip


SPLIT_FLEET = Path(__file__).resolve().parents[2] / "scenarios" / "plan-split-fleet.yaml"


def _bundled_split_fleet(split: bool = True) -> Scenario:
    """``scenarios/plan-split-fleet.yaml`` as bundled, or without its split (each backend whole)."""
    data = load_scenario_data(SPLIT_FLEET)
    backends = data["backends"]
    assert isinstance(backends, list)
    if not split:
        data["backends"] = [{k: v for k, v in b.items() if k not in ("decode_on", "kv_link")} for b in backends]
    return scenario_from(data, {}, str(SPLIT_FLEET))


def exhaustive(planner: Planner) -> tuple[Evaluation | None, list[Evaluation]]:
    """Every candidate simulated; the cheapest that meets (a mixed fleet only when strictly cheaper)."""
    searched = [i for i, metered in enumerate(planner.metered) if not metered]
    singles = [planner.evaluate(planner._vector({i: n}), "single")
               for i in searched for n in range(1, planner.limits[i][1] + 1)]  # fmt: skip
    if any(planner.metered):  # the API backends alone
        singles.insert(0, planner.evaluate(planner._vector({}), "single"))
    best = min((e for e in singles if e.meets), key=lambda e: e.usd_per_hour, default=None)
    mixed = []
    for counts in itertools.product(*(range(planner.limits[i][1] + 1) for i in searched)):
        served = all(
            any(counts[planner.names.index(n)] for n in allowed) for allowed in planner.scenario.router.rules.values()
        )
        if sum(1 for n in counts if n) >= 2 and served:
            mixed.append(planner.evaluate(planner._vector(dict(zip(searched, counts, strict=True))), "mixed"))
    for e in sorted((e for e in mixed if e.meets), key=lambda e: e.usd_per_hour):
        if best is None or e.usd_per_hour < best.usd_per_hour:
            best = e
    return best, singles + mixed


@pytest.mark.parametrize("make", [_two_gpus_open, _agents_task_time, _kin_gpus, _slow_beside_fast,
                                  _slow_beside_fast_routed_by_speed, _routed_classes, _split_pools])  # fmt: skip
def test_the_pruned_search_returns_the_exhaustive_answer_with_fewer_simulations(make: Any) -> None:
    s = make()
    everything = Planner(s, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits(), False), None))
    answer, evaluated = exhaustive(everything)  # every run to its end
    tallies: list[tuple[int, int, int, int]] = []
    pruned = Planner(s, CATALOG)  # its own runs, stopped once a miss is settled
    pruned.progress = lambda _: tallies.append(pruned.tally())
    result = pruned.search()
    assert answer is not None, "each case has a feasible fleet"
    assert result.answer is not None and (result.answer.counts, result.answer.kind) == (answer.counts, answer.kind)
    assert result.answer.usd_per_hour == answer.usd_per_hour
    assert len(result.evaluations) < len(evaluated)
    assert (
        result.violations == []
        and result.to_dict()["monotone_violations"] == []
        and "Warning" not in result.explanation
    )
    # a candidate stopped on a settled miss misses, its ratio at least the settled floor's (> 1)
    assert all(not e.meets and m.ratio > 1 for e in result.evaluations for m in e.misses if m.settled)
    # every fleet that meets states the sampling error of its worst ratio (its runs ran to the end)
    assert all(e.worst_error >= 0 for e in result.evaluations if e.meets)
    assert result.to_dict()["answer"]["worst_ratio_error"] == result.answer.worst_error
    # progress: 0 <= simulated <= total and simulated + pruned + left = total, at every step
    assert tallies
    for total, simulated, cut, left in [*tallies, pruned.tally()]:
        assert 0 <= simulated <= total and cut >= 0 and left >= 0 and simulated + cut + left == total
    # the search's assumption, checked on every candidate: one more replica of a backend slower than
    # nothing the fleet holds never turns a fleet that meets into one that misses (same kind of run),
    # nor does one replica swapped for a backend that serves no slower; a slower one may, and does here
    met = {(e.counts, e.kind): e.meets for e in evaluated}
    hurt = []
    for (counts, kind), meets in met.items():
        for i in range(len(counts)):
            more = ((*counts[:i], counts[i] + 1, *counts[i + 1 :]), kind)
            if meets and more in met and not met[more]:
                assert i in pruned.order.slow_in(counts), f"{counts} meets but {more[0]} misses"
                hurt.append((counts, more[0]))
        for a, b in pruned.order.pairs:
            other = (swapped(counts, a, b), kind)
            if meets and counts[b] and other in met:
                assert met[other], f"{counts} meets but {other[0]} misses"
    assert bool(hurt) == (make is _slow_beside_fast), hurt  # the case that shows it, and only it
    # the capacity bound is a true bound: no candidate it rejects meets
    assert all(not e.meets for e in evaluated if not pruned.could_meet(e.counts))
    # the frontier of every candidate: each dearer fleet on it is strictly closer to its targets
    front = PlanResult(answer, None, evaluated).frontier
    assert front and front[-1].worst == min(e.worst for e in evaluated)
    for cheaper, dearer in itertools.pairwise(front):
        assert cheaper.usd_per_hour <= dearer.usd_per_hour and cheaper.worst > dearer.worst
    assert not any(e.usd_per_hour <= f.usd_per_hour and e.worst < f.worst for f in front for e in evaluated)
    # the report's figure draws the search's own frontier as a staircase that only falls with cost
    stair = next(line for line in plan_figure.cost_vs_slo(result.to_dict()).get_lines()
                 if str(line.get_label()).startswith("frontier"))  # fmt: skip
    heights = [float(y) for y in stair.get_ydata()]
    assert heights == sorted(heights, reverse=True) and len(heights) == len(result.frontier)


@pytest.mark.parametrize(
    "make",
    [_two_gpus_open, _agents_task_time, _kin_gpus, _slow_beside_fast, _slow_beside_fast_routed_by_speed,
     _routed_classes, _split_pools, _with_api],
)  # fmt: skip
def test_a_search_stopped_early_answers_with_a_sound_floor_and_closes_its_gap_at_the_full_length(
    make: Any, tmp_path: Path
) -> None:
    """``plan.max_candidates = k`` stops the search before its (k+1)-th simulation. Its evaluations
    are the full search's first ``k`` (the same order), its answer the cheapest of them that meets:
    no cheaper than the exhaustive answer. Its floor, the least fixed cost of a fleet it has not
    settled, is a lower bound: every fleet the exhaustive search finds meeting costs at least that.
    As ``k`` grows the floor never falls and the answer never rises; with the full search's
    length the search is not stopped and answers the full answer."""
    s = make()
    everything = Planner(s, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits(), False), None))
    answer, evaluated = exhaustive(everything)
    assert answer is not None
    cheapest_meeting = min(e.usd_per_hour for e in evaluated if e.meets)

    def plan(k: int | None) -> PlanResult:  # runs shared through one cache: each simulated once
        limited = s.model_copy(update={"plan": s.plan.model_copy(update={"max_candidates": k})})
        runs = Runs(Executor(), summary_run, (CATALOG, Limits()), Cache(tmp_path))
        return Planner(limited, CATALOG, runs=runs).search()

    full = plan(None)
    order = [(e.counts, e.kind) for e in full.evaluations]
    floors, costs = [], []
    for k in range(1, len(order)):
        stopped = plan(k)
        assert stopped.stopped == f"plan.max_candidates = {k}"
        assert [(e.counts, e.kind) for e in stopped.evaluations] == order[:k]
        assert stopped.floor_usd_per_hour is not None and stopped.floor_usd_per_hour <= cheapest_meeting
        found = [e.usd_per_hour for e in stopped.evaluations if e.meets]
        if stopped.answer is not None:
            assert stopped.answer.usd_per_hour == min(found) >= answer.usd_per_hour
            assert stopped.floor_usd_per_hour <= stopped.answer.usd_per_hour
            closed = stopped.floor_usd_per_hour == stopped.answer.usd_per_hour
            said = "full search's answer" if closed else "the cheapest fleet found meeting every target"
            assert said in stopped.explanation
        else:
            assert not found
        floors.append(stopped.floor_usd_per_hour)
        costs.append(stopped.answer.usd_per_hour if stopped.answer else math.inf)
        assert stopped.to_dict()["stopped"] == stopped.stopped
    assert floors == sorted(floors) and costs == sorted(costs, reverse=True)
    assert plan(len(order)).stopped == "" and full.stopped == "" and full.floor_usd_per_hour is None
    assert full.answer is not None
    assert (full.answer.counts, full.answer.usd_per_hour) == (answer.counts, answer.usd_per_hour)


def test_a_run_abandoned_at_the_time_limit_leaves_no_result_and_the_search_answers_with_those_before_it(
    tmp_path: Path,
) -> None:
    """A run whose wall-clock deadline passes is abandoned (here the third run's deadline has passed
    when it starts): the search stops at the time limit with the two candidates finished before it,
    the full search's first two, and caches only their runs; ``plan.max_candidates = 2`` repeats it."""
    s = _agents_task_time()
    full = Planner(s, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits()), None)).search()
    order = [(e.counts, e.kind) for e in full.evaluations]
    calls: list[str] = []

    def third_out_of_time(payload: str, *args: Any) -> dict[str, Any]:
        calls.append(payload)
        return summary_run(payload, *args, deadline=time.time() - 1.0 if len(calls) == 3 else None)

    runs = Runs(Executor(), third_out_of_time, (CATALOG, Limits(), True), Cache(tmp_path / "cache"))
    stopped = Planner(s, CATALOG, runs=runs, time_limit_s=3600.0).search()
    assert len(order) > 3 and len(calls) == 3
    assert stopped.stopped == "the time limit of 3600 s"
    assert [(e.counts, e.kind) for e in stopped.evaluations] == order[:2]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    assert "--set plan.max_candidates=2 repeats it" in stopped.explanation
    two = s.model_copy(update={"plan": s.plan.model_copy(update={"max_candidates": 2})})
    again = Planner(two, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits()), Cache(tmp_path / "cache")))
    repeated = again.search()
    assert [(e.counts, e.kind) for e in repeated.evaluations] == order[:2]
    assert repeated.floor_usd_per_hour == stopped.floor_usd_per_hour and repeated.answer == stopped.answer


def test_the_ceiling_probe_is_skipped_where_its_miss_would_settle_only_fleets_with_its_slow_counts() -> None:
    """The ceiling (every backend at its most under the bound) is probed so that one miss settles
    every fleet below it. Holding an A100 beside faster GPUs, its miss settles only the fleets with
    exactly its A100s and a faster GPU (a slower replica may make a fleet miss): no probe then. With
    no backend slower than another the same fleet is probed, and a miss there settles all below."""
    planner = Planner(_slow_beside_fast(), CATALOG)
    most = tuple(high for _, high in planner.limits)
    a100 = planner.names.index("a100")
    assert a100 in planner.order.slow_in(most) and planner._ceiling(math.inf) is None
    below = list(itertools.product(*(range(n + 1) for n in most)))
    settled = [u for u in below if planner.order.settles(most, u)]
    faster = [b for b in range(len(most)) if b != a100]
    assert all(u[a100] == most[a100] for u in settled if any(u[b] for b in faster))
    planner.order = ServiceOrder.from_above(planner.order.above)  # no backend slower than another
    assert planner._ceiling(math.inf) == most
    assert all(planner.order.settles(most, u) for u in below)


def test_a_backend_is_taken_as_slower_only_where_the_router_balances_load_not_speed() -> None:
    """An A100 runs every pass slower than an H100 or a B200: a replica that may make a fleet worse
    under a load-balancing policy, and under the slo-aware backend choice (it sends a class to the
    cheapest backend predicted to meet its bounds), but not where every call goes to the replica
    predicted to serve it soonest among every backend's (pooled)."""
    s = _slow_beside_fast()
    a100 = [b.name for b in s.fleet].index("a100")

    def slower_than(policy: str, backend_choice: str) -> frozenset[int]:
        router = s.router.model_copy(update={"policy": policy, "backend_choice": backend_choice})
        return Planner(s.model_copy(update={"router": router}), CATALOG).order.slower[a100]

    assert slower_than("least-outstanding-tokens", "pooled") == {0, 1}
    assert slower_than("least-predicted-latency", "pooled") == frozenset()
    assert slower_than("least-predicted-latency", "slo-aware") == {0, 1}


@pytest.mark.parametrize("make", [_slow_beside_fast, _slow_beside_fast_routed_by_speed, _agents_task_time, _kin_gpus,
                                  _two_fast_beside_a_slow])  # fmt: skip
def test_every_progress_line_bounds_the_candidates_the_search_goes_on_to_simulate(make: Any) -> None:
    """A progress line's "candidate k of at most B": the search simulates at most B candidates in
    all, whatever it finds after the line (the bound counts a slower backend's fleets only while
    cheaper than the best so far, which never rises), and B never rises from one line to the next."""
    lines: list[str] = []
    result = Planner(make(), CATALOG, progress=lines.append).search()
    bounds = [
        int(m[1].replace(",", "")) for line in lines if (m := re.search(r"candidate \d+ of at most ([\d,]+)", line))
    ]
    assert bounds and all(len(result.evaluations) <= b for b in bounds)
    assert all(later <= earlier for earlier, later in itertools.pairwise(bounds))


def test_cheaper_swaps_end_at_a_fleet_not_beaten_cheaper_and_served_no_worse() -> None:
    """On the kin GPUs (a B300 serves no slower than a B200 and costs less; both no slower than an
    H100, which costs less than either, so no swap to it): for every count vector within the
    limits, the swaps end at a fleet no cheaper swap beats, that costs less exactly when a swap was
    made and is served no worse (a miss there settles the first); and a backend alone is tried only
    at counts no cheaper backend that serves no slower can match within its limit."""
    planner = Planner(_kin_gpus(), CATALOG)
    assert planner.order.pairs == [(1, 0), (0, 2), (1, 2)] and planner.cheaper_swaps == [(1, 0)]
    for counts in itertools.product(*(range(most + 1) for _, most in planner.limits)):
        end = planner._unbeaten(counts)
        assert not planner._beaten(end) and planner.order.covers(end, counts)
        assert (end != counts) == planner._beaten(counts) == (planner.fixed_cost(end) < planner.fixed_cost(counts))
        assert sum(end) == sum(counts) and all(e <= m for e, (_, m) in zip(end, planner.limits, strict=True))
    assert [planner._single_swap_low(i) for i in range(3)] == [2, 1, 1]  # a B200 alone: more than one B300


def test_no_backend_stands_in_for_another_where_replicas_are_not_alike() -> None:
    """Swaps are assumed harmless only where the router treats every replica alike and none is taken
    down: with routing rules, or N+k (the dearest replicas down), the order has no pairs."""
    s = _kin_gpus()
    assert Planner(s, CATALOG).order.pairs
    ruled = s.model_copy(update={"router": s.router.model_copy(update={"rules": {"test": ["b200", "b300"]}})})
    n_plus_1 = s.model_copy(update={"slo": s.slo.model_copy(update={"tolerate_failures": 1})})
    for other in (ruled, n_plus_1):
        planner = Planner(other, CATALOG)
        assert planner.order.pairs == [] and planner.cheaper_swaps == []


def test_a_run_is_the_same_run_whatever_the_plan_limits() -> None:
    """A run reads none of ``plan``: plans with other limits ask for the same runs (cache keys), so a
    rerun with a higher ``plan.max_candidates`` or ``max_replicas`` finds the runs it shares."""
    s = _agents_task_time()
    other = s.model_copy(update={"plan": s.plan.model_copy(update={"max_candidates": 3, "max_replicas": {"h100": 6}})})
    assert Planner(s, CATALOG)._run_keys((2, 1), "mixed") == Planner(other, CATALOG)._run_keys((2, 1), "mixed")


def _evaluation(counts: tuple[int, ...], kind: str, meets: bool) -> Evaluation:
    miss = () if meets else (Miss("c", "p95 task_time_s <= 10 s", 11.0, 10.0, 1.1, True),)
    return Evaluation(counts, ("a", "b"), 1.0 + sum(counts), 1.0 + sum(counts), 0.9 if meets else 1.1, miss, kind)


def test_a_larger_fleet_that_misses_where_a_subset_meets_is_reported_against_the_search_assumption() -> None:
    """A pair (meets, misses) is reported exactly when the missing fleet is served no worse than the
    meeting one (at least its replicas of every backend, or some swapped for a backend that serves
    no slower) and is another fleet, and the two runs are comparable: of one kind, or of either when
    the router treats both kinds alike."""
    alone = ServiceOrder.from_above([frozenset(), frozenset()])
    meets = _evaluation((1, 1), "mixed", True)
    above = _evaluation((2, 1), "mixed", False)
    beside = _evaluation((2, 0), "single", False)  # not above (1, 1) unless a serves no slower than b
    same = _evaluation((1, 1), "mixed", False)  # the same fleet (another replication's verdict): not a pair
    single_meets = _evaluation((2, 0), "single", True)
    evaluations = [meets, above, beside, same, single_meets]
    assert non_monotone(evaluations, False, alone) == [(meets, above)]
    assert non_monotone(evaluations, True, alone) == [(meets, above), (single_meets, above)]
    assert non_monotone([meets, _evaluation((1, 2), "mixed", True)], True, alone) == []
    a_over_b = ServiceOrder.from_above([frozenset(), frozenset({0})])
    assert non_monotone(evaluations, True, a_over_b) == [(meets, above), (meets, beside), (single_meets, above)]
    text = PlanResult(meets, None, evaluations, violations=[(meets, above)]).to_dict()["monotone_violations"]
    assert text == [{"meets": {"a": 1, "b": 1}, "misses": {"a": 2, "b": 1}, "kind": "mixed"}]


def test_an_answer_within_two_sampling_errors_of_its_bound_is_flagged() -> None:
    """Meeting by 1.2 % of the bound where one run's sampling error is 1.4 % is within noise: the
    explanation says another seed may miss and asks for more; by 5 % it says nothing, nor where no
    error is known (a run stopped early)."""
    answer = Evaluation((1,), ("a",), 1.0, 1.0, 0.988, (), "single", worst_error=0.014)
    text = _within_noise_text(answer, 1)
    assert "meets by 1.2% of the bound in its run" in text and "+/-1.4%" in text
    assert "another seed may miss" in text and "plan.replications=3" in text
    assert "the worst of its 2 runs" in _within_noise_text(answer, 2)
    assert _within_noise_text(dataclasses.replace(answer, worst=0.95), 1) == ""
    assert _within_noise_text(dataclasses.replace(answer, worst_error=math.nan), 1) == ""


def test_an_answer_within_noise_is_run_on_more_seeds_each_as_its_own_plan_would_run_it() -> None:
    """24 agents whose four tool waits a task are exponential (mean 1 s), p95 task time <= 18 s: the
    answer, 1 x h100 + 1 x b200, meets by 1.8 % where one run's error is 5.5 %, so it is run on
    ``plan.check_seeds`` = 2 more seeds, 6 and 7 (the scenario's seed is 5, one replication). Each
    seed's worst ratio is the one a plan on that seed gives the same fleet, and the explanation and
    ``plan.json`` say on how many it misses. A plan told to stop, or with the check off, runs none."""
    workload = copy.deepcopy(SMALL_AGENT)
    workload["task"]["tool"]["latency_s"] = {"dist": "exponential", "mean": 1.0}
    b200 = {"hardware": "nvidia-b200", "model": "llama-3.1-8b", "chips": 1}
    s = _agents_on({"h100": H100_8B, "b200": b200}, {"h100": 2, "b200": 2}, "18 s", workload)
    result = Planner(s, CATALOG).search()
    assert result.answer is not None and _within_noise_text(result.answer, 1)
    assert [c.seed for c in result.checked] == [6, 7]
    for check in result.checked:
        on_seed = s.model_copy(update={"run": s.run.model_copy(update={"seed": check.seed})})
        alone = Planner(on_seed, CATALOG).evaluate(result.answer.counts, result.answer.kind)
        assert check.worst == pytest.approx(alone.worst, rel=1e-12) and check.meets == alone.meets
    assert _checked_text(result.checked) in result.explanation and "run on 2 more seeds" in result.explanation
    meets, misses = SeedCheck(6, 0.97, False), SeedCheck(7, 1.004, True)
    both = "; run on 2 more seeds, it meets on each (worst ratio: seed 6 0.970, seed 6 0.970)"
    assert _checked_text([meets, meets]) == both
    one = "it misses on 1 of them (worst ratio: seed 6 0.970, seed 7 at least 1.004)"
    assert _checked_text([meets, misses]).endswith(one)
    assert [c["seed"] for c in result.to_dict()["answer_on_more_seeds"]] == [6, 7]
    off = s.model_copy(update={"plan": s.plan.model_copy(update={"check_seeds": 0})})
    assert Planner(off, CATALOG).search().checked == []
    told_to_stop = s.model_copy(update={"plan": s.plan.model_copy(update={"max_candidates": 50})})
    assert Planner(told_to_stop, CATALOG).search().checked == []


def test_a_stated_confidence_decides_each_target_on_the_seeds_mean() -> None:
    """``plan.confidence``: a target is met when its seeds' mean ratio plus Student's ``t`` standard
    errors is at most 1, whatever one seed gives. Ratios 0.95, 0.97 and 1.01 (one seed over) meet
    at 80 % (t = 1.06 for 2 degrees of freedom: bound 0.995) and miss at 97.5 % (t = 4.30: 1.05);
    a seed that measured nothing is a miss. Agents with noisy tools on three seeds: every run goes
    to its end, and the plan answers and states the confidence; with one seed there is no spread to
    read, which the scenario refuses."""
    ratios = [0.95, 0.97, 1.01]
    assert seeds_bound(ratios, float(stdtrit(2, 0.8))) == pytest.approx(0.9767 + 1.0607 * 0.0306 / 3**0.5, abs=1e-3)
    assert seeds_bound(ratios, float(stdtrit(2, 0.8))) < 1.0 < seeds_bound(ratios, float(stdtrit(2, 0.975)))
    assert seeds_bound([0.9, math.inf], 1.0) == math.inf
    near = Miss("c", "p95 task_time_s <= 600 s", 606.0, 600.0, 1.01, True)
    assert near.missed and not dataclasses.replace(near, seeds_bound=0.99).missed
    assert "the seeds' mean ratio may be as high as 1.06" in dataclasses.replace(near, seeds_bound=1.06).describe()
    noisy = SMALL_AGENT | {"task": SMALL_AGENT["task"] | {
        "tool": {"kind": "code-execution", "latency_s": {"dist": "lognormal", "median": 1.0, "sigma": 0.8}},
        "output_tokens": {"dist": "lognormal", "median": 60, "sigma": 0.8}}}  # fmt: skip
    s = _agents_task_time("16 s", noisy)
    three = s.model_copy(update={"plan": s.plan.model_copy(update={"replications": 3, "confidence": 0.9})})
    planner = Planner(three, CATALOG)
    assert not planner.stops_early  # a seed over the bound no longer decides: each runs to its end
    result = planner.search()
    assert result.answer is not None and "mean of its ratio over its 3 seeds is under 1 with 0.9" in result.explanation
    assert not any(m.settled for e in result.evaluations for m in e.misses)
    with pytest.raises(ValueError, match=re.escape("plan.replications of 2 or more")):
        s.plan.model_validate(s.plan.model_dump() | {"replications": 1, "confidence": 0.9})


def test_the_capacity_bound_prunes_agents_fleets_and_counts_their_demand() -> None:
    """24 agents, 5 calls a task, p95 within 14 s: at least 0.95 x 24 x 5 / 14 calls/s."""
    s = _agents_task_time()
    assert agent_call_demand(s.workload_classes, CATALOG) == pytest.approx(0.95 * 24 * 5 / 14)
    ramped = [c.model_copy(update={"load": c.load.model_copy(update={"ramp_s": 46.0})}) for c in s.workload_classes]
    # agents joining over 46 s are there 1 - 46 x 23 / (2 x 24 x 100) of a 100-s run on average
    assert agent_call_demand(ramped, CATALOG, 100.0) == pytest.approx(0.95 * 24 * 5 / 14 * (1 - 46 * 23 / 4800))
    assert agent_call_demand(ramped, CATALOG) == 0.0  # no duration: nothing bounds the share joined
    planner = Planner(s, CATALOG)
    assert not planner.could_meet((0, 0))
    assert planner.could_meet((4, 4))


def test_plan_ranks_every_fleet_on_one_cost_basis() -> None:
    """A CS-3 has no rental price: beside rented GPUs, auto pricing moves every backend to ownership;
    bases named per backend that differ are refused."""
    auto = _routed_classes().model_copy(update={"cost": _routed_classes().cost.model_copy(update={"basis": "auto"})})
    planner = Planner(auto, CATALOG)
    assert planner.cost_basis == "ownership" and planner.scenario.cost.basis == "ownership"
    bases = ["ownership", "rental", "rental"]
    fleet = [b.model_copy(update={"cost_basis": basis}) for b, basis in zip(auto.fleet, bases, strict=True)]
    with pytest.raises(ScenarioError, match="one cost basis"):
        Planner(auto.model_copy(update={"backends": fleet}), CATALOG)


def test_split_fleets_are_candidates_labelled_and_never_pruned_by_the_whole_call_bound() -> None:
    """With a prefill pool and its decode pool both serving, a fleet is split: the plan lists it as
    such, and the capacity bound (a sum of whole-call rates) does not prune it."""
    planner = Planner(_split_pools(), CATALOG)
    assert planner.split_of((1, 1)) == ("h100 -> a100",) and planner.split_of((2, 0)) == ()
    assert planner.could_meet((1, 1))
    evaluation = planner.evaluate((1, 1), "mixed")
    assert evaluation.split == ("h100 -> a100",) and evaluation.label == "mixed, split h100 -> a100"
    assert evaluation.to_dict()["split"] == ["h100 -> a100"]


def test_an_api_backend_alone_is_a_candidate_and_its_spend_is_on_the_stated_basis() -> None:
    """A per-token backend keeps its replicas in every fleet; the plan also tries it alone (every
    searched backend at 0), and says its $/h add the measured API spend to the replicas' rent."""
    planner = Planner(_with_api(), CATALOG)
    assert planner.cost_basis == "rental + API per-token spend"
    asked: list[str] = []
    planner.progress = asked.append
    result = planner.search()
    assert "single 1 x cloud (1 run)" in asked[1], asked[:2]
    alone = next(e for e in result.evaluations if e.counts == (0, 0, 1))
    assert alone.fixed_usd_per_hour == 0 and alone.usd_per_hour > 0
    assert f"$/h ({planner.cost_basis})" in plan_text(result)


def test_the_bundled_split_fleet_is_cheapest_as_each_phase_runs_on_the_chip_cheapest_for_it() -> None:
    """``scenarios/plan-split-fleet.yaml``: long RAG prompts, short answers, TTFT and TPOT targets,
    owned H100s (2.5x an A100's FLOP/s per $/h) and A100s (1.5x an H100's HBM bytes/s per $/h).
    The plan answers a split fleet, the exhaustive search's answer, strictly cheaper than every
    fleet that meets without the split (each backend alone, or both serving whole requests):
    alone, the A100s lack the FLOP/s to prefill in time (TTFT misses) and a co-located H100 has
    them but runs its prompts inside its decode iterations (only TPOT misses); split, the H100
    only prefills and the A100 only decodes."""
    s = _bundled_split_fleet()
    result = Planner(s, CATALOG).search()
    everything = Planner(s, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits(), False), None))
    answer, evaluated = exhaustive(everything)
    assert answer is not None and result.answer is not None
    assert result.answer.split == answer.split == ("h100 -> a100",)
    assert (result.answer.counts, result.answer.usd_per_hour) == (answer.counts, answer.usd_per_hour)
    whole = Planner(_bundled_split_fleet(split=False), CATALOG)
    whole_mixed = [whole.evaluate(c, "mixed") for c in itertools.product(*(range(1, m + 1) for _, m in whole.limits))]
    assert not any(e.split for e in whole_mixed)  # both backends serving whole requests
    singles = [e for e in evaluated if e.kind == "single"]
    unsplit = [e.usd_per_hour for e in singles + whole_mixed if e.meets]
    assert unsplit, "some fleet meets without the split"
    assert answer.usd_per_hour < min(unsplit)
    # the mechanism, on the single-backend fleets cheaper than the answer (h100 listed first)
    cheaper = [e for e in singles if e.usd_per_hour < answer.usd_per_hour]
    assert cheaper
    for e in cheaper:
        missed = {m.target.split()[1] for m in e.misses}
        if e.counts[0]:  # the H100 has the FLOP/s to prefill in time; its co-located decode is slow
            assert missed == {"tpot_s"}, e.misses
        else:  # A100s alone cannot prefill in time
            assert "ttft_s" in missed, e.misses


def _single_asks(planner: Planner, meets: Callable[[tuple[int, ...]], bool]) -> list[tuple[int, ...]]:
    """The fleets the single-backend searches ask for, each answered meeting as ``meets`` says."""
    search, asked = planner._singles(), []
    try:
        ask = next(search)
        while True:
            asked.append(ask.counts)
            ask = search.send(_evaluation(ask.counts, "single", meets(ask.counts)))
    except StopIteration:
        return asked


def test_a_backend_that_meets_at_no_count_alone_costs_one_run_its_largest() -> None:
    """Each backend alone is bisected from its largest fleet: where that misses, every fewer misses
    too (monotone feasibility) and nothing else of it is asked. With 8 replicas each allowed, a
    bisection starting in the middle would ask two."""
    planner = Planner(_agents_on({"h100": H100_8B, "a100": A100_8B}, {"h100": 8, "a100": 8}, "14 s"), CATALOG)
    most = [planner.limits[i][1] for i in range(2)]
    assert all(m - planner._fewest_passing(i, {}, 1) + 1 > 3 for i, m in enumerate(most))
    assert sorted(_single_asks(planner, lambda counts: False)) == sorted([(most[0], 0), (0, most[1])])
