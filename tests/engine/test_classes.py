"""Workload classes in one run: priorities order the queue, each class keeps its own SLOs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from simulator.config.scenario import Scenario
from tests.engine.conftest import SMALL, run

LENGTHS = {"input_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 64}}


def _class(name: str, priority: int, rate: float, ttft: str = "1 s") -> dict:
    return {"name": name, "priority": priority, "requests": LENGTHS, "slo": {"ttft": ttft},
            "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}}}  # fmt: skip


def _mixed(**overrides: object) -> dict:
    return {
        "load": None,
        "requests": None,
        "classes": [_class("high", 5, 3.0), _class("low", 0, 3.0)],
        "scheduler": {"policy": "continuous", "max_batch_size": 2},
        "run": {"seed": 2, "max_requests": 1500},
    } | overrides


def test_the_higher_priority_class_waits_less_under_contention() -> None:
    """Same arrivals and lengths; only the priority differs: the high class queues far less."""
    summary = run(**_mixed()).summary.classes
    assert summary is not None
    high, low = summary["high"].queueing_delay_s.mean, summary["low"].queueing_delay_s.mean
    assert low > 0 and high < 0.5 * low
    assert summary["high"].slo_attainment >= summary["low"].slo_attainment


def test_equal_priorities_share_the_queue_alike() -> None:
    classes = [_class("a", 1, 3.0), _class("b", 1, 3.0)]
    summary = run(**_mixed(classes=classes, run={"seed": 2, "max_requests": 3000})).summary.classes
    assert summary is not None
    a, b = summary["a"].queueing_delay_s.mean, summary["b"].queueing_delay_s.mean
    assert a == pytest.approx(b, rel=0.25)


def test_every_class_is_conserved_and_reported() -> None:
    result = run(**_mixed())
    r = result.records.requests
    assert sorted(set(r["class"].tolist())) == [0.0, 1.0]
    per_class = result.summary.classes
    assert per_class is not None
    assert per_class["high"].requests_completed + per_class["low"].requests_completed == 1500
    assert per_class["high"].priority == 5


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"classes": [_class("a", 0, 1.0)], "load": {"kind": "closed", "users": 1}}, "give load (one class)"),
        ({"classes": [_class("a", 0, 1.0), _class("a", 1, 1.0)], "load": None}, "class names must be unique"),
        ({"classes": [{"name": "a", "load": {"kind": "closed", "users": 1}}], "load": None},
         "requests (lengths) are needed"),
    ],
)  # fmt: skip
def test_bad_class_definitions_are_rejected(parts: dict, message: str) -> None:
    data = {"name": "x", "deployment": SMALL, "run": {"max_requests": 1}, "requests": None} | parts
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Scenario.model_validate(data)
