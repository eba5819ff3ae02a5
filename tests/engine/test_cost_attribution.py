"""Cost attribution across workload classes: conservation, own-spend $/task, Little's law per class.

The rule (``simulator.results.attribution``): each backend's $ (busy and idle), $/h and J go to
the classes in proportion to their seat-seconds on it (a replica's time shared equally among
the sequences of its batch); an API backend bills each class its own requests.
"""

from __future__ import annotations

import pytest

from simulator.config.workload import WorkloadSpec
from simulator.results.summary import RunSummary
from tests.engine.conftest import run

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b", "chips": 1}
CHAT = {"input_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 64}}
BULK = {"input_tokens": {"dist": "constant", "value": 2048}, "output_tokens": {"dist": "constant", "value": 32}}


def _open(rate: float) -> dict:
    return {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}}


#: A short agent task (5 calls, 0.2 s tools) so tasks finish inside a one-minute window.
AGENT = WorkloadSpec.model_validate({"id": "short-agent", "name": "short agent", "description": "test",
                                     "sources": {"t": "test"}, "task": {
    "steps": {"dist": "constant", "value": 5},
    "system_prompt_tokens": {"dist": "constant", "value": 500},
    "first_input_tokens": {"dist": "constant", "value": 100},
    "step_input_tokens": {"dist": "constant", "value": 200},
    "output_tokens": {"dist": "constant", "value": 40},
    "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 0.2}}}})  # fmt: skip


def _classes(agents: int = 2) -> list[dict]:
    return [
        {"name": "agents", "priority": 2, "load": {"kind": "agents", "workload": AGENT, "agents": agents}},
        {"name": "chat", "priority": 1, "load": _open(4.0), "requests": CHAT},
        {"name": "batch", "priority": 0, "load": _open(1.0), "requests": BULK},
    ]


def _fleet_run(**extra: object) -> RunSummary:
    backends = [{"name": "gpu", "deployment": H100_8B, "replicas": 2},
                {"name": "wafer", "deployment": CS3_8B, "cost_basis": "api"}]  # fmt: skip
    parts: dict = {"backends": backends, "classes": _classes(), "load": None, "requests": None,
                   "router": {"rules": {"agents": ["gpu", "wafer"], "chat": ["gpu"], "batch": ["gpu"]}},
                   "run": {"seed": 4, "duration": "60 s", "warmup": "5 s", "drain": False}}  # fmt: skip
    return run(**(parts | extra)).summary


@pytest.fixture(scope="module")
def mixed_fleet() -> RunSummary:
    return _fleet_run()


def test_class_dollars_sum_to_the_fleet_total(mixed_fleet: RunSummary) -> None:
    """Conservation: sum over classes of $ (and idle $, $/h) plus the unattributed $ is the fleet's."""
    s = mixed_fleet
    assert s.classes is not None
    costs = [c.cost for c in s.classes.values()]
    assert all(c is not None for c in costs)
    unused = s.cost.unattributed_usd or 0.0
    assert sum(c.usd for c in costs if c) + unused == pytest.approx(s.cost.usd, rel=1e-12)
    assert sum(c.idle_usd for c in costs if c) == pytest.approx(s.cost.idle_usd, rel=1e-9, abs=1e-12)
    assert sum(c.share_of_fleet_usd for c in costs if c) + unused / s.cost.usd == pytest.approx(1.0, rel=1e-12)
    for name, backend in s.backends.items():
        spent = sum(c.usd_by_backend.get(name, 0.0) for c in costs if c)
        assert spent == pytest.approx(backend.cost.usd, rel=1e-12, abs=1e-12)
    for c in costs:
        assert c is not None and sum(c.usd_by_backend.values()) == pytest.approx(c.usd, rel=1e-12, abs=1e-15)


def test_a_class_pays_only_for_the_backends_it_may_use(mixed_fleet: RunSummary) -> None:
    """Chat and batch are pinned to the GPUs: not a cent of the wafer's API bill reaches them."""
    assert mixed_fleet.classes is not None
    for name in ("chat", "batch"):
        cost = mixed_fleet.classes[name].cost
        assert cost is not None and cost.usd_by_backend.get("wafer", 0.0) == 0.0 and cost.usd > 0


def test_agent_dollars_per_task_exclude_the_other_classes_spend(mixed_fleet: RunSummary) -> None:
    """$/task of the agents is their own $ over their own tasks, strictly below fleet $ / tasks."""
    assert mixed_fleet.classes is not None
    agents = mixed_fleet.classes["agents"]
    assert agents.tasks is not None and agents.cost is not None and agents.tasks.tasks_completed > 0
    assert agents.cost.usd_per_task == pytest.approx(agents.cost.usd / agents.tasks.tasks_completed, rel=1e-12)
    assert agents.cost.usd_per_task < mixed_fleet.cost.usd / agents.tasks.tasks_completed
    assert mixed_fleet.cost.usd_per_task == pytest.approx(agents.cost.usd_per_task, rel=1e-12)
    chat = mixed_fleet.classes["chat"].cost
    assert chat is not None and chat.usd_per_task != chat.usd_per_task  # NaN: chat runs no tasks
    assert chat.undefined is not None and "usd_per_task" in chat.undefined


def test_per_class_counts_sum_to_the_fleet_counts(mixed_fleet: RunSummary) -> None:
    assert mixed_fleet.classes is not None and mixed_fleet.tasks is not None
    classes = mixed_fleet.classes.values()
    assert sum(c.requests_completed for c in classes) == mixed_fleet.requests_completed
    assert sum(c.tasks.tasks_completed for c in classes if c.tasks) == mixed_fleet.tasks.tasks_completed


def test_twin_classes_pay_alike_and_a_class_with_twice_the_load_pays_about_twice() -> None:
    """Same lengths, same priority, one backend: $ follows the seat-seconds each class took."""
    classes = [{"name": n, "priority": 0, "load": _open(r), "requests": CHAT} for n, r in
               (("a", 3.0), ("b", 3.0), ("double", 6.0))]  # fmt: skip
    s = run(classes=classes, load=None, requests=None, run={"seed": 5, "duration": "60 s", "warmup": "5 s",
                                                           "drain": False}).summary  # fmt: skip
    assert s.classes is not None
    usd = {name: c.cost.usd for name, c in s.classes.items() if c.cost}
    assert usd["a"] == pytest.approx(usd["b"], rel=0.15)
    assert usd["double"] == pytest.approx(usd["a"] + usd["b"], rel=0.15)


def test_littles_law_holds_per_class_and_the_classes_add_up_to_the_fleet() -> None:
    """Drained run, no warm-up: sum over classes of lambda_k * W_k is the recorder's time-mean number in system."""
    classes = [{"name": n, "priority": p, "load": _open(r), "requests": CHAT} for n, p, r in
               (("high", 2, 4.0), ("low", 0, 6.0))]  # fmt: skip
    result = run(classes=classes, load=None, requests=None, scheduler={"policy": "continuous", "max_batch_size": 4},
                 run={"seed": 6, "max_requests": 600})  # fmt: skip
    s, rec = result.summary, result.records
    assert s.classes is not None
    per_class = [c.requests_per_s * c.e2e_s.mean for c in s.classes.values()]
    mean_in_system = rec.in_system.time_mean(rec.warmup_s, rec.end_s)
    assert sum(per_class) == pytest.approx(mean_in_system, rel=1e-9)
    assert per_class[0] < per_class[1]  # the high class's fewer requests wait less
