"""Importers on real result files: every shared file imports or is refused with its reason; imported
statistics agree with the per-request data they came from; bad files exit 2 with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main
from simulator.io.importers import read_file
from simulator.io.importers.rows import Deployment, arrival_times, rows
from simulator.studies.validation import read_table

FIXTURES = Path(__file__).parent / "fixtures" / "measured"
SHARED = next((p for p in (Path("/work/shared/measured-runs"), Path(__file__).parents[3] / "shared" / "measured-runs")
               if p.is_dir()), None)  # fmt: skip

#: Each shared file's deployment flags (from its README) and the outcome: "ok" or words of the refusal.
SHARED_FILES = [
    ("vllm-bench/surajssd-llm-k8s/llama-3.3-70b_a100-40gb_tp8-pp1/*.json",
     ["--hardware", "nvidia-a100-sxm", "--chips", "8", "--layout", "TP8", "--stack", "vllm"], "ok"),
    ("vllm-bench/surajssd-llm-k8s/llama-3.3-70b_a100-40gb_tp4-pp2-ib/*.json",
     ["--hardware", "nvidia-a100-sxm", "--chips", "8", "--layout", "TP4 PP2", "--stack", "vllm"], "ok"),
    ("vllm-bench/surajssd-llm-k8s/deepseek-v2.5_a100-40gb_tp8-pp2-ib/*.json",
     ["--hardware", "nvidia-a100-sxm"], "no model profile has this hf_repo"),
    ("vllm-bench/llm-d-benchmark/llama-3.1-8b_a100-80gb_2x-tp1-replicas/*.json",
     ["--hardware", "nvidia-a100-sxm", "--chips", "1", "--replicas", "2", "--stack", "vllm"], "ok"),
    ("vllm-bench/llm-d-benchmark/llama-3.1-8b_h100_2x-tp1-replicas/*.json",
     ["--hardware", "nvidia-h100-sxm", "--chips", "1", "--replicas", "2", "--stack", "vllm"], "ok"),
    ("vllm-bench/llm-d-benchmark/llama-3.1-8b_h100_3x-tp1-replicas/*.json",
     ["--hardware", "nvidia-h100-sxm", "--chips", "1", "--replicas", "3", "--stack", "vllm"], "ok"),
    ("vllm-bench/inferencex/gpt-oss-120b_mi355x_1p1d-tp8-tp8/*.json",
     ["--hardware", "amd-mi355x"], "ok"),
    ("sglang-bench/datacrunch-h200-benchmarks/llama_3_3_70b_*.jsonl",
     ["--hardware", "nvidia-h200", "--model", "llama-3.3-70b", "--chips", "4", "--stack", "sglang"], "ok"),
    ("sglang-bench/datacrunch-h200-benchmarks/llama_405b_online_output.jsonl",
     ["--hardware", "nvidia-h200", "--model", "llama-3.1-405b", "--chips", "8", "--stack", "sglang"], "ok"),
    ("sglang-bench/datacrunch-h200-benchmarks/deepseek_dp_mla_output.jsonl",
     ["--hardware", "nvidia-h200", "--model", "deepseek-v2.5"], "no model profile 'deepseek-v2.5'"),
    ("inference-perf/kubecon-na-2025/*/stage_*_lifecycle_metrics.json",
     ["--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--chips", "1", "--stack", "vllm"], "ok"),
    ("inference-perf/kubecon-na-2025/*/summary_lifecycle_metrics.json",
     ["--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b"], "pools stages of different rates"),
    ("genai-perf/inferencex-aiperf/*/*/profile_export.jsonl", ["--hardware", "amd-mi355x"], "does not name its model"),
    ("genai-perf/inferencex-aiperf/*/*/profile_export_aiperf.json", ["--hardware", "amd-mi355x"],
     "fixed-length rows cannot reproduce"),
]  # fmt: skip


def _shared_cases() -> list[tuple[Path, list[str], str]]:
    if SHARED is None:
        return []
    return [(path, flags, outcome) for pattern, flags, outcome in SHARED_FILES for path in sorted(SHARED.glob(pattern))]


def test_every_shared_file_is_covered() -> None:
    if SHARED is None:
        pytest.skip("shared/measured-runs not present")
    files = sorted(p for p in SHARED.rglob("*") if p.suffix in (".json", ".jsonl"))
    assert len(files) == 44
    assert sorted(path for path, _, _ in _shared_cases()) == files


@pytest.mark.parametrize("case", _shared_cases(), ids=lambda c: str(c[0].relative_to(SHARED)) if SHARED else "")
def test_shared_file_imports_or_is_refused_with_its_reason(case, tmp_path, capsys) -> None:
    path, flags, outcome = case
    out = tmp_path / "out"
    code = main(["import", str(path), *flags, "-o", str(out)])
    err = capsys.readouterr().err
    if outcome == "ok":
        assert code == 0, err
        assert read_table(out / "measurements.csv")  # validate and calibrate read what import wrote
    else:
        assert code == 2 and outcome in err and err.count("\n") == 1
        assert not out.exists()


def _vllm():
    (run,) = read_file(FIXTURES / "vllm-llama70b-a100-qps04.json")
    return run, json.loads((FIXTURES / "vllm-llama70b-a100-qps04.json").read_text())


def test_vllm_statistics_agree_with_the_requests_they_came_from() -> None:
    """vLLM computes its summary from the same arrays with numpy: mean, median, std, p99 agree."""
    run, data = _vllm()
    per = run.per_request
    assert len(per.ttft_s) == data["completed"] == run.metrics["ttft_s"].values.get("count", data["completed"])
    for stat, key in (("mean", "mean"), ("p50", "median"), ("std", "std"), ("p99", "p99")):
        measured = {"mean": np.mean, "p50": np.median, "std": np.std, "p99": lambda a: np.percentile(a, 99)}[stat]
        assert measured(per.ttft_s) == pytest.approx(data[f"{key}_ttft_ms"] / 1000, rel=1e-9)
    tpot = per.tpot_s[per.output_tokens > 1]
    assert np.mean(tpot) == pytest.approx(run.metrics["tpot_s"].values["mean"], rel=1e-6)
    assert per.input_tokens.sum() == data["total_input_tokens"]
    assert per.output_tokens.sum() == data["total_output_tokens"]
    assert run.input_tokens_mean * len(per.ttft_s) == pytest.approx(data["total_input_tokens"])


def test_per_request_e2e_is_first_token_plus_every_gap() -> None:
    run, data = _vllm()
    assert np.all(run.per_request.e2e_s >= run.per_request.ttft_s)
    assert run.per_request.e2e_s[0] == pytest.approx(data["ttfts"][0] + sum(data["itls"][0]), rel=1e-12)


def test_poisson_replay_arrivals_have_the_stated_rate() -> None:
    """n exponential gaps of mean 1/rate: their mean is within 4 standard errors of 1/rate."""
    run, _ = _vllm()
    arrivals = arrival_times(run, seed=3)
    gaps = np.diff(arrivals)
    assert arrivals[0] == 0 and np.all(gaps >= 0)
    mean_gap = 1 / run.load.rate_per_s
    assert abs(gaps.mean() - mean_gap) < 4 * mean_gap / np.sqrt(gaps.size)
    assert np.array_equal(arrivals, arrival_times(run, seed=3))  # deterministic for a seed


def test_inference_perf_percentiles_are_ordered_and_in_seconds() -> None:
    (run,) = read_file(FIXTURES / "inference-perf-stage2.json")
    for stats in run.metrics.values():
        v = stats.values
        if "p50" in v:
            assert v["min"] <= v["p50"] <= v["p90"] <= v["p99"] <= v["max"]
    assert run.metrics["ttft_s"].values["mean"] < run.metrics["e2e_s"].values["mean"] < 10  # seconds, not ms
    assert run.load.kind == "constant" and run.load.requests == run.metrics["ttft_s"].values["count"]


def test_aiperf_records_replay_at_recorded_send_times_without_warmup() -> None:
    (run,) = read_file(FIXTURES / "aiperf-conc1-records-first12.jsonl")
    lines = [json.loads(line) for line in (FIXTURES / "aiperf-conc1-records-first12.jsonl").read_text().splitlines()]
    profiling = [r for r in lines if r["metadata"]["benchmark_phase"] != "warmup"]
    assert len(run.per_request.ttft_s) == len(profiling) == 11
    assert run.per_request.arrival_s[0] == 0 and np.all(np.diff(run.per_request.arrival_s) >= 0)
    assert run.load is None and "per-request records only" in run.refusal


def test_replicas_split_the_load_and_the_aggregate() -> None:
    """A random balancer thins arrivals: one replica of N sees rate / N and serves aggregate / N."""
    (run,) = read_file(FIXTURES / "vllm-llmd-h100-2replicas.json")
    one = {r["metric"]: r for r in rows(run, Deployment("nvidia-h100-sxm", "llama-3.1-8b", "bf16"), "x")}
    two = {r["metric"]: r for r in rows(run, Deployment("nvidia-h100-sxm", "llama-3.1-8b", "bf16", replicas=2), "x")}
    assert float(two["ttft_s"]["request_rate_per_s"]) == pytest.approx(float(one["ttft_s"]["request_rate_per_s"]) / 2)
    agg = "aggregate_output_tok_s"
    assert float(two[agg]["value"]) == pytest.approx(float(one[agg]["value"]) / 2, rel=1e-5)
    assert two["ttft_s"]["value"] == one["ttft_s"]["value"]
    assert one["ttft_s"]["load"] == "gamma" and float(one["ttft_s"]["burstiness"]) == pytest.approx(0.01)


def test_median_only_rows_say_so() -> None:
    runs = read_file(FIXTURES / "sglang-llama70b-online.jsonl")
    assert len(runs) == 7
    by_metric = {r["metric"]: r for r in rows(runs[0], Deployment("nvidia-h200", "llama-3.3-70b", "bf16"), "s")}
    assert by_metric["ttft_s"]["statistic"] == "p50" and by_metric["e2e_s"]["statistic"] == "mean"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _bad_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = (FIXTURES / "vllm-llmd-h100-2replicas.json").read_text()
    data = json.loads(good)
    unpaced = data | {"max_concurrency": 8}
    missing = {k: v for k, v in data.items() if k != "completed"}
    return {
        "truncated": (_write(tmp_path, "t.json", good[: len(good) // 2]), "not valid JSON"),
        "other format": (_write(tmp_path, "o.json", '{"hidden_size": 4096}'), "of no known benchmark format"),
        "missing field": (_write(tmp_path, "m.json", json.dumps(missing)), "completed: missing"),
        "unreproducible load": (_write(tmp_path, "u.json", json.dumps(unpaced)), "max_concurrency 8 together"),
        "empty": (_write(tmp_path, "e.json", ""), "empty file"),
    }


@pytest.mark.parametrize("case", ["truncated", "other format", "missing field", "unreproducible load", "empty"])
def test_bad_result_file_exits_2_naming_file_and_field(case, tmp_path, capsys) -> None:
    path, words = _bad_cases(tmp_path)[case]
    out = tmp_path / "out"
    code = main(["import", str(path), "--hardware", "nvidia-h100-sxm", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and words in err and str(path) in err and err.count("\n") == 1
    assert not out.exists()


def test_named_format_that_does_not_match_is_refused(tmp_path, capsys) -> None:
    code = main(["import", str(FIXTURES / "inference-perf-stage2.json"), "--format", "vllm-bench",
                 "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "-o", str(tmp_path / "o")])  # fmt: skip
    assert code == 2 and "its fields are those of inference-perf" in capsys.readouterr().err


def test_per_request_arrays_of_unequal_length_are_refused(tmp_path, capsys) -> None:
    data = json.loads((FIXTURES / "vllm-llama70b-a100-qps04.json").read_text())
    data["ttfts"] = data["ttfts"][:-1]
    path = _write(tmp_path, "r.json", json.dumps(data))
    assert main(["import", str(path), "--hardware", "nvidia-a100-sxm", "-o", str(tmp_path / "o")]) == 2
    assert "ttfts: expected 200 entries (as input_lens), got 199" in capsys.readouterr().err


def _distribution(mean: float, p50: float) -> dict[str, object]:
    return {"mean": mean, "median": p50, "std_dev": 0.1 * mean, "min": 0.5 * p50, "max": 3 * mean, "count": 40,
            "percentiles": {"p50": p50, "p90": 1.5 * p50, "p95": 1.8 * p50, "p99": 2 * p50,
                            "p999": 2.5 * p50}}  # fmt: skip


def test_guidellm_report_maps_its_metric_names_and_units(tmp_path) -> None:
    """GuideLLM's published schema (no real file with hardware was found): its ITL is vLLM's TPOT, its
    TPOT e2e / n; milliseconds become seconds, request_latency is already in seconds."""
    metrics = {"time_to_first_token_ms": _distribution(120.0, 100.0),
               "inter_token_latency_ms": _distribution(20.0, 19.0),
               "time_per_output_token_ms": _distribution(22.0, 21.0), "request_latency": _distribution(4.2, 4.0),
               "output_tokens_per_second": _distribution(900.0, 880.0), "prompt_token_count": _distribution(512, 512),
               "output_token_count": _distribution(200, 200)}  # fmt: skip
    bench = {
        "args": {"strategy": {"type_": "poisson", "rate": 2.5}},
        "metrics": {k: {"successful": v} for k, v in metrics.items()},
    }
    path = _write(tmp_path, "benchmarks.json", json.dumps({"benchmarks": [bench]}))
    (run,) = read_file(path)
    assert run.format == "guidellm" and run.load.kind == "poisson" and run.load.rate_per_s == 2.5
    assert run.metrics["tpot_s"].values["mean"] == pytest.approx(0.020)
    assert run.metrics["normalized_tpot_s"].values["p99.9"] == pytest.approx(0.0525)
    assert run.metrics["e2e_s"].values["mean"] == pytest.approx(4.2)
    assert run.metrics["ttft_s"].values["count"] == 40 and run.input_tokens_mean == 512


def test_first_tokens_faster_than_the_prefill_floor_are_flagged_as_cached(tmp_path, capsys) -> None:
    """All prompts sent at once: the last first token cannot beat sum(prompt) * 2 * active params / peak.
    The shared series sent the same 200 prompts at 1, 4, 16 and inf req/s to one server with prefix
    caching on; the same TTFTs with every request at t = 0 beat the floor, and the import says why."""
    data = json.loads((FIXTURES / "vllm-llama70b-a100-qps04.json").read_text())
    flags = ["--hardware", "nvidia-a100-sxm", "--chips", "8", "--layout", "TP8"]
    poisson = _write(tmp_path, "poisson.json", json.dumps(data))
    assert main(["import", str(poisson), *flags, "-o", str(tmp_path / "a")]) == 0
    assert "prefix cache" not in capsys.readouterr().err  # spread over 50 s: the floor does not apply
    offline = _write(tmp_path, "offline.json", json.dumps(data | {"request_rate": "inf"}))
    assert main(["import", str(offline), *flags, "-o", str(tmp_path / "b")]) == 0
    assert "served from a prefix cache" in capsys.readouterr().err
    assert "prefill floor" in (tmp_path / "b" / "measurements.csv").read_text()
