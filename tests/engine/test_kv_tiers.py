"""KV tiers below the serving tier: capacity never exceeded, every block accounted for, a load
never costs more than computing again, hits raise the prefix hit rate and cut prefill, runs
are deterministic, and bad tiers exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import simulator
from simulator.cli import main
from simulator.records.store import KVTierRecords
from simulator.runner import RunResult, simulate
from tests.engine.conftest import CATALOG

WORKLOAD = {
    "schema_version": 1, "id": "tiny-agent", "name": "tiny agent", "description": "test", "sources": {"t": "test"},
    "task": {
        "steps": {"dist": "constant", "value": 6},
        "system_prompt_tokens": {"dist": "constant", "value": 3000},
        "first_input_tokens": {"dist": "constant", "value": 300},
        "step_input_tokens": {"dist": "constant", "value": 400},
        "output_tokens": {"dist": "constant", "value": 40},
        "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 5}},
    },
}  # fmt: skip
SCENARIO = {
    "name": "tiers",
    # a small HBM: the weights and room for about four agents' contexts
    "deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1},
    "scheduler": {"policy": "continuous", "kv_tiers": {"tiers": [{"name": "host", "capacity": "4 GB"}]}},
    "load": {"kind": "agents", "agents": 12, "workload": WORKLOAD},
    "run": {"seed": 2, "duration": "60 s"},
}
SMALL_HBM = {"deployment.hardware.memory.hbm.capacity": "21 GB"}


def _run(tmp_path: Path, data: dict[str, Any] = SCENARIO, **overrides: Any) -> RunResult:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return simulate(simulator.load_scenario(path, SMALL_HBM | overrides), CATALOG)


def _tiers(result: RunResult) -> KVTierRecords:
    (tiers,) = result.records.kv_tiers
    return tiers


def _two_tiers(tmp_path: Path) -> RunResult:
    ssd = {"name": "ssd", "capacity": "1 GB", "bandwidth": "7 GB/s", "latency": "100 us"}
    tiers = [{"name": "host", "capacity": "0.5 GB"}, ssd]
    data = SCENARIO | {"scheduler": {"policy": "continuous", "kv_tiers": {"tiers": tiers}}}
    return _run(tmp_path, data)


def test_no_tier_ever_holds_more_blocks_than_its_capacity(tmp_path: Path) -> None:
    tiers = _tiers(_two_tiers(tmp_path))
    for i, capacity in enumerate(tiers.capacity_blocks):
        assert tiers.occupancy[i].maximum() <= capacity
    assert tiers.demoted[1] > 0 and tiers.dropped > 0  # the small host tier spilled to SSD, and SSD out


def test_every_block_that_entered_a_tier_is_held_loaded_superseded_or_passed_down(tmp_path: Path) -> None:
    """Conservation per tier: in = held at the end + loaded up + replaced + out (next tier's in, or dropped)."""
    t = _tiers(_two_tiers(tmp_path))
    last = len(t.names) - 1
    for i in range(len(t.names)):
        out = t.dropped if i == last else t.demoted[i + 1]
        assert t.demoted[i] == t.held(i) + t.loaded[i] + t.replaced[i] + out
    assert t.loaded.sum() > 0


def test_a_load_from_below_never_costs_more_than_computing_again(tmp_path: Path) -> None:
    """The policy loads only what is faster than its recompute (else it recomputes and says so)."""
    for result in (_run(tmp_path), _two_tiers(tmp_path)):
        pairs = _tiers(result).load_pairs_s
        assert pairs.size and (pairs[:, 0] < pairs[:, 1]).all()
    slow = SCENARIO | {"scheduler": {"policy": "continuous", "kv_tiers": {"tiers": [
        {"name": "tape", "capacity": "4 GB", "bandwidth": "1 GB/s", "latency": "5 s"}]}}}  # fmt: skip
    tiers = _tiers(_run(tmp_path, slow))
    assert tiers.load_pairs_s.size == 0 and tiers.declined > 0


def test_offloaded_kv_raises_prefix_hits_and_cuts_prefill_time(tmp_path: Path) -> None:
    """With HBM too small for every idle agent's context, the host tier brings contexts back:
    more prompt tokens served from cache, less prefill per call, TTFT saved reported."""
    offload = _run(tmp_path)
    hbm_only = _run(tmp_path, **{"scheduler.kv_tiers": None})
    assert hbm_only.records.kv_tiers == () and hbm_only.summary.kv_tiers is None
    assert offload.summary.prefix_cache_hit_rate > hbm_only.summary.prefix_cache_hit_rate + 0.1
    assert offload.summary.ttft_s.mean < hbm_only.summary.ttft_s.mean
    summary = offload.summary.kv_tiers
    assert summary is not None and summary["nvidia-h100-sxm"].ttft_saved_s > 0
    assert summary["nvidia-h100-sxm"].tiers["host"].bytes_up > 0


def test_tiered_runs_are_deterministic(tmp_path: Path) -> None:
    a, b = _run(tmp_path), _run(tmp_path)
    assert np.array_equal(a.records.requests["first_token_s"], b.records.requests["first_token_s"])
    assert np.array_equal(_tiers(a).load_pairs_s, _tiers(b).load_pairs_s)


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        ({"name": "host", "capacity": "10 TB"}, "exceeds the"),
        ({"name": "ssd"}, "not a memory tier of nvidia-h100-sxm"),
        ({"name": "hbm"}, "slower than the serving tier"),
    ],
)
def test_bad_tiers_exit_2_naming_the_tier_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tier: dict[str, str], expected: str
) -> None:
    data = SCENARIO | {"scheduler": {"policy": "continuous", "kv_tiers": {"tiers": [tier]}}}
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("infersim: error:") and expected in err and "kv_tiers.tiers.0" in err
    assert not out.exists()
