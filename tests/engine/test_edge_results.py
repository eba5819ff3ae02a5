"""Honest edge results: a run too large is refused up front with its estimate, an undefined
statistic is null with its reason, a replay faster than the fleet is reported overloaded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator.config.loading import bundled_dir
from simulator.config.scenario import Scenario
from simulator.plan.limits import Limits, RunTooLargeError
from simulator.plan.resolve import resolve
from simulator.runner import simulate
from simulator.serialize import strict_json
from tests.engine.conftest import CATALOG, scenario


def test_the_run_size_estimate_bounds_the_calls_a_closed_loop_makes() -> None:
    """Users cannot send more than ``users x duration / (think + fastest request)`` requests."""
    s = scenario(run={"seed": 1, "duration": "20 s", "drain": False})
    estimate = resolve(s, CATALOG).size.requests
    made = simulate(s, CATALOG).summary.requests_completed
    assert 0 < made <= estimate


def test_an_open_loop_estimate_is_rate_times_duration() -> None:
    s = scenario(load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 3}}, run={"duration": "50 s"})
    assert resolve(s, CATALOG).size.requests == pytest.approx(150.0)


@pytest.mark.parametrize(
    ("parts", "words"),
    [
        (
            {"load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 1}},
             "run": {"duration": "3e7 s"}},
            "model calls",
        ),
        ({"load": {"kind": "closed", "users": 1_000_000_000}, "run": {"duration": "10 s"}}, "concurrent users"),
        ({"replicas": 1_000_000, "run": {"duration": "10 s"}}, "replicas"),
    ],
)  # fmt: skip
def test_a_run_too_large_is_refused_before_anything_is_built(parts: dict[str, object], words: str) -> None:
    s = scenario(**parts)
    with pytest.raises(RunTooLargeError, match=words) as raised:
        simulate(s, CATALOG)
    assert "--allow-large-runs" in str(raised.value) and "limit" in str(raised.value)


def test_max_requests_caps_the_estimate() -> None:
    s = scenario(load={"kind": "closed", "users": 100_000}, run={"duration": "3e7 s", "max_requests": 10})
    size = resolve(s, CATALOG).size
    assert size.requests == 10 and size.users == 100_000
    assert size.memory_bytes < Limits().max_memory_bytes


def test_undefined_statistics_are_null_with_their_reason() -> None:
    """One-token answers have no inter-token interval: TPOT and per-user speed are null, said why."""
    result = simulate(
        scenario(requests={"input_tokens": {"dist": "constant", "value": 32},
                           "output_tokens": {"dist": "constant", "value": 1}}),
        CATALOG,
    )  # fmt: skip
    text = json.dumps(strict_json(result.summary.to_dict()), allow_nan=False)  # strict JSON: no NaN literal
    summary = json.loads(text)
    assert summary["ttft_s"]["p50"] > 0
    assert summary["tpot_s"]["p50"] is None and "1-token answer" in summary["tpot_s"]["undefined"]["p50"]
    assert summary["per_user_output_tok_s"]["mean"] is None


def test_a_replay_faster_than_the_fleet_is_overloaded() -> None:
    """Offered rate (rows over the trace's span) above the analytic capacity: overloaded, capacity finite."""
    trace = bundled_dir("workloads") / "traces" / "mooncake" / "conversation_trace_first1500.jsonl"
    s = Scenario.model_validate({
        "name": "fast-replay",
        "deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1},
        "load": {"kind": "trace", "format": "mooncake", "path": str(trace), "rate_scale": 50.0,
                 "window": ["0 s", "120 s"]},
        "run": {"seed": 1, "duration": "2 s", "drain": False},
    })  # fmt: skip
    summary = simulate(s, CATALOG).summary
    assert math.isfinite(summary.capacity_requests_per_s) and summary.overloaded is True
    assert (
        summary.offered_requests_per_s is not None and summary.offered_requests_per_s > summary.capacity_requests_per_s
    )


def test_levels_csv_holds_every_replica(tmp_path: Path) -> None:
    result = simulate(scenario(replicas=3), CATALOG)
    lines = result.records.levels_csv().splitlines()
    assert lines[0] == "replica,level,t_s,value"
    assert {line.split(",")[0] for line in lines[1:]} == {"0", "1", "2"}


def test_request_times_in_the_csv_are_exact() -> None:
    """The CSV's last completion is the record's, to the last bit (no rounding past the window)."""
    result = simulate(scenario(), CATALOG)
    rows = result.records.to_csv().splitlines()
    header = rows[0].split(",")
    done = [float(r.split(",")[header.index("done_s")]) for r in rows[1:]]
    assert max(done) == float(result.records.requests["done_s"].max())
