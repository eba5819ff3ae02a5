"""Trace loaders, their errors, and replay: prefix reuse from Mooncake hashes, WEKA fan-out and join."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.config.loading import Catalog, ConfigError
from simulator.io.traces import TraceRequest, infinite_cache_reuse, load_azure, load_mooncake, load_weka, window
from simulator.runner import load_scenario_data, scenario_from, simulate

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "workloads" / "traces"
MOONCAKE = TRACES / "mooncake" / "conversation_trace_first1500.jsonl"
AZURE = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv_first2000.csv"
WEKA = TRACES / "weka_agentic_coding" / "trace_0291.json"


def test_loaders_read_the_bundled_subsets() -> None:
    azure = load_azure(AZURE)
    assert len(azure) == 2000 and azure[0].arrival_s == 0.0 and azure[0].input_tokens == 374
    assert np.all(np.diff([r.arrival_s for r in azure]) >= 0)
    mooncake = load_mooncake(MOONCAKE)
    assert len(mooncake) == 1500
    assert all(len(r.block_hashes or ()) == -(-r.input_tokens // 512) for r in mooncake)
    session = load_weka(WEKA)
    assert len(session.calls) == 20 and sum(len(c.subagents) for c in session.calls) == 2


def test_mooncake_round_trips(tmp_path: Path) -> None:
    rows = load_mooncake(MOONCAKE)[:50]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": round(r.arrival_s * 1000), "input_length": r.input_tokens,
                                        "output_length": r.output_tokens, "hash_ids": list(r.block_hashes or ())})
                            + "\n" for r in rows))  # fmt: skip
    assert load_mooncake(path) == rows


def test_azure_round_trips(tmp_path: Path) -> None:
    text = AZURE.read_text().splitlines()[:40]
    path = tmp_path / "t.csv"
    path.write_text("\r\n".join(text))
    assert load_azure(path) == load_azure(AZURE)[:39]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1,\n',
         "bad.jsonl:2: not valid JSON"),
        ("miss.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n', "miss.jsonl:1: hash_ids: missing"),
        ("neg.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}\n',
         "neg.jsonl:1: input_length: expected a positive integer"),
        ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.68,374,44\r\nyesterday,1,1\r\n",
         "t.csv:3: TIMESTAMP"),
    ],
)  # fmt: skip
def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    loader = load_azure if name.endswith(".csv") else load_mooncake
    with pytest.raises(ConfigError, match=re.escape(expected)):
        loader(path)


def test_weka_session_errors_name_the_request(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"block_size": 64, "requests": [{"t": 0, "out": 3, "hash_ids": []}]}))
    with pytest.raises(ConfigError, match=r"requests\.0: in: missing"):
        load_weka(path)


def _replay(fmt: str, path: Path, **load: object) -> object:
    data = {
        "name": "replay",
        "deployment": {"hardware": "nvidia-h200", "model": "gpt-oss-20b", "chips": 1},
        "load": {"kind": "trace", "format": fmt, "path": str(path)} | load,
        "run": {"seed": 1, "duration": "1000000 s"},
    }
    return simulate(scenario_from(data, {}, str(ROOT / "scenarios" / "x.yaml")), Catalog())


def test_prefix_caching_reproduces_the_mooncake_reuse_fraction() -> None:
    """With a cache that holds the window, the hit rate equals the trace's already-seen block fraction."""
    rows = window(load_mooncake(MOONCAKE), 0.0, 120.0)
    result = _replay("mooncake", MOONCAKE, window=["0 s", "120 s"])
    assert result.summary.requests_completed == len(rows)
    assert result.summary.prefix_cache_hit_rate == pytest.approx(infinite_cache_reuse(rows), abs=0.01)


def test_replay_at_k_times_the_rate_compresses_arrivals() -> None:
    slow = _replay("azure", AZURE, window=["0 s", "60 s"]).records.requests["arrival_s"]
    fast = _replay("azure", AZURE, window=["0 s", "60 s"], rate_scale=4.0).records.requests["arrival_s"]
    assert fast == pytest.approx(slow / 4.0, rel=1e-12)


def test_a_fan_out_call_waits_for_its_slowest_sub_agent() -> None:
    """Sub-agents spawned before a parent call run in parallel; the call starts after the last ends."""
    result = _replay("weka", WEKA, think_time_scale=0.0)
    tasks, r = result.records.tasks, result.records.requests
    parent = int(tasks["task"][np.argmax(tasks["calls"])])
    subs = tasks["task"] != parent
    assert subs.sum() == 2 and tasks["failed"].sum() == 0
    spawn = tasks["start_s"][subs]
    assert np.allclose(spawn, spawn[0])  # both are spawned before the same parent call
    parent_arrivals = r["arrival_s"][r["task"] == parent]
    next_call = parent_arrivals[parent_arrivals >= spawn[0]].min()
    assert next_call == pytest.approx(tasks["end_s"][subs].max(), rel=1e-12)
    assert tasks["end_s"][subs].min() < tasks["end_s"][subs].max()  # the join waits for the slower one


def test_a_missing_trace_path_is_named() -> None:
    data = load_scenario_data(ROOT / "scenarios" / "weka-replay.yaml")
    with pytest.raises(ConfigError, match=r"load\.path: .*does not exist"):
        scenario_from(data, {"load.path": "nope/missing.json"}, str(ROOT / "scenarios" / "weka-replay.yaml"))


def test_infinite_cache_reuse_counts_already_seen_blocks() -> None:
    rows = [TraceRequest(0, 1024, 1, (1, 2)), TraceRequest(1, 1536, 1, (1, 2, 3)), TraceRequest(2, 512, 1, (4,))]
    assert infinite_cache_reuse(rows) == pytest.approx(2 / 6)


def test_a_weka_replay_records_the_same_requests_in_every_process(tmp_path: Path) -> None:
    """Determinism across processes: agent ids do not depend on Python's per-process string hashing."""
    tables = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        command = [sys.executable, "-m", "simulator", "run", str(ROOT / "scenarios" / "weka-replay.yaml"),
                   "--set", "load.sample=0.5", "-o", str(out), "--json"]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, env=os.environ | {"PYTHONHASHSEED": hash_seed})
        tables.append((out / "requests.csv").read_text())
    assert tables[0] == tables[1]
