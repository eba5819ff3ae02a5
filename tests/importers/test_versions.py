"""One fixture per supported version of each format (fixtures/versions/, written from each tool's
documented schema): every number imported equals the file's own, whichever version placed it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.cli import main
from simulator.io.importers import read_file
from simulator.io.importers.rows import arrival_times

VERSIONS = Path(__file__).parent / "fixtures" / "versions"


def test_vllm_start_times_become_the_replay_arrivals_of_a_closed_loop(tmp_path) -> None:
    path = VERSIONS / "vllm-0.10-closed-start-times.json"
    data = json.loads(path.read_text())
    (run,) = read_file(path)
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    assert run.load.kind == "closed" and run.load.concurrency == data["max_concurrency"]
    sent = np.array([data["start_times"][i] for i in ok])
    assert np.allclose(arrival_times(run, seed=0), sent - sent[0])
    e2e = [data["ttfts"][i] + math.fsum(data["itls"][i]) for i in ok]
    assert np.allclose(run.per_request.e2e_s, e2e)
    assert run.metrics["e2e_s"].values["mean"] == pytest.approx(data["mean_e2el_ms"] / 1000)
    assert run.metrics["ttft_s"].values["p50"] == pytest.approx(data["median_ttft_ms"] / 1000)
    out = tmp_path / "out"
    assert main(["import", str(path), "--hardware", "nvidia-h100-sxm", "-o", str(out)]) == 0
    trace = [json.loads(line) for line in (out / "traces").glob("*.jsonl").__next__().read_text().splitlines()]
    assert [t["arrival_s"] for t in trace] == pytest.approx(list(sent - sent[0]))


def test_a_closed_loop_without_send_times_keeps_its_rows_and_has_no_trace(tmp_path) -> None:
    data = json.loads((VERSIONS / "vllm-0.10-closed-start-times.json").read_text())
    del data["start_times"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["import", str(path), "--hardware", "nvidia-h100-sxm", "-o", str(out)]) == 0
    manifest = json.loads((out / "import.json").read_text())["runs"][0]
    assert "trace" not in manifest and any("no replay trace" in n for n in manifest["notes"])
    assert (out / "measurements.csv").read_text().count("\n") > 1


def _guidellm(path: Path) -> dict:
    text = path.read_text()
    return yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(text)


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [("guidellm-0.3-concurrent.json", "closed", 4), ("guidellm-0.5-poisson.json", "poisson", 2.5),
     ("guidellm-0.8-synchronous.yaml", "closed", 1)],
)  # fmt: skip
def test_guidellm_strategy_wherever_the_version_puts_it(name: str, kind: str, words: float) -> None:
    """0.3: ``args.strategy``; 0.4 to 0.8: each benchmark's ``config.strategy``; YAML as JSON."""
    path = VERSIONS / name
    bench = _guidellm(path)["benchmarks"][0]
    (run,) = read_file(path)
    assert run.load.kind == kind
    assert (run.load.concurrency if kind == "closed" else run.load.rate_per_s) == words
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    assert run.metrics["ttft_s"].values["p50"] == pytest.approx(ttft["median"] / 1000)
    e2e = bench["metrics"]["request_latency"]["successful"]
    assert run.metrics["e2e_s"].values["mean"] == pytest.approx(e2e["mean"])
    assert run.metrics["e2e_s"].values["p99.9"] == pytest.approx(e2e["percentiles"]["p999"])


def test_guidellm_median_only_imports_as_the_median() -> None:
    (run,) = read_file(VERSIONS / "guidellm-0.5-poisson.json")
    assert run.metrics["ttft_s"].central == ("p50", pytest.approx(0.100))
    assert run.model_name == "Qwen/Qwen3-8B"


def test_guidellm_without_a_strategy_names_the_versions_read(tmp_path, capsys) -> None:
    data = _guidellm(VERSIONS / "guidellm-0.5-poisson.json")
    del data["benchmarks"][0]["config"]["strategy"]
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    assert main(["import", str(path), "--hardware", "nvidia-h100-sxm", "-o", str(tmp_path / "o")]) == 2
    assert "versions read: 0.3 to 0.8" in capsys.readouterr().err


def test_aiperf_phases_and_the_servers_prompt_count() -> None:
    path = VERSIONS / "aiperf-0.11-phases.json"
    data = json.loads(path.read_text())
    (run,) = read_file(path)
    assert run.load.kind == "closed" and run.load.concurrency == 8  # the profiling phase, not the warm-up
    assert run.input_tokens_mean == data["usage_prompt_tokens"]["avg"]
    assert run.metrics["ttft_s"].values["mean"] == pytest.approx(data["time_to_first_token"]["avg"] / 1000)


def test_genai_perf_synthetic_prompts_and_its_stimulus() -> None:
    """An empty ``input.file`` is synthetic data, not a session replay; the load is the stimulus."""
    path = VERSIONS / "genai-perf-0.0.13-stimulus.json"
    data = json.loads(path.read_text())
    (run,) = read_file(path, "genai-perf")
    assert run.refusal == "" and run.load.kind == "closed"
    assert run.load.concurrency == data["input_config"]["perf_analyzer"]["stimulus"]["concurrency"]
    assert run.metrics["tpot_s"].values["p99"] == pytest.approx(data["inter_token_latency"]["p99"] / 1000)


def test_model_given_against_the_files_model_warns_naming_both(tmp_path, capsys) -> None:
    path = VERSIONS / "vllm-0.10-closed-start-times.json"
    args = ["import", str(path), "--hardware", "nvidia-h100-sxm", "--model", "qwen3-32b", "-o", str(tmp_path / "o")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "states model 'meta-llama/Llama-3.1-8B-Instruct', but --model qwen3-32b is 'Qwen/Qwen3-32B'" in err
    assert main([*args[:-4], "--model", "llama-3.1-8b", "-o", str(tmp_path / "o2")]) == 0
    assert "states model" not in capsys.readouterr().err


def test_a_memory_size_in_the_path_that_the_hardware_lacks_warns_naming_both(tmp_path, capsys) -> None:
    folder = tmp_path / "llama-3.1-8b_a100-40gb_tp1"
    folder.mkdir()
    path = folder / "result.json"
    path.write_text((VERSIONS / "vllm-0.10-closed-start-times.json").read_text())
    assert main(["import", str(path), "--hardware", "nvidia-a100-sxm", "-o", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "states 40 GB per chip, but --hardware nvidia-a100-sxm has" in err and "GB of hbm" in err
