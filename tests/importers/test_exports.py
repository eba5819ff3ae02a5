"""A simulated run exported as vLLM bench, GuideLLM or AIPerf results: the vLLM export has every
key vLLM's result files and tooling carry, with their types; each export reads back through
infersim's own importer with the numbers it states (a round trip); goodput obeys its bounds;
a load a format cannot state is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main
from simulator.io.importers import read_file

MEASURED = Path("/work/shared/measured-runs/vllm-bench")

SCENARIO = """\
name: export-{name}
deployment: {{hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}}
load: {load}
requests: {{input_tokens: {{dist: uniform, low: 100, high: 400}}, output_tokens: {{dist: uniform, low: 1, high: 60}}}}
slo: {slo}
run: {{seed: 2, max_requests: 40, warmup: 0.5 s}}
"""
CLOSED = "{kind: closed, users: 3}"
POISSON = "{kind: open, arrivals: {process: poisson, rate_per_s: 12}}"

#: What vLLM's own tooling reads from a result file, with the type it expects:
#: ``benchmarks/serve.py``'s ``save_to_pytorch_benchmark_format`` (the ``*_ms`` statistics),
#: its ``--plot-timeline`` (``start_times``, ``ttfts``, ``itls``, ``input_lens``, ``output_lens``),
#: and the nightly benchmark's results-to-markdown script (the run and throughput fields).
VLLM_TOOLING_KEYS: dict[str, type | tuple[type, ...]] = {
    "date": str, "backend": str, "model_id": str, "tokenizer_id": str, "num_prompts": int,
    "request_rate": (float, int, str), "burstiness": (float, int), "max_concurrency": (int, type(None)),
    "duration": float, "completed": int, "failed": int, "total_input_tokens": int, "total_output_tokens": int,
    "request_throughput": float, "request_goodput": (float, type(None)), "output_throughput": float,
    "total_token_throughput": float, "max_output_tokens_per_s": float, "max_concurrent_requests": int,
    "input_lens": list, "output_lens": list, "ttfts": list, "itls": list, "start_times": list, "latencies": list,
    "generated_texts": list, "errors": list,
    **{f"{stat}_{metric}_ms": float for stat in ("mean", "median", "std", "p99")
       for metric in ("ttft", "tpot", "itl", "e2el")},
}  # fmt: skip
#: Keys the newest ``vllm bench serve --save-detailed`` writes that the shared (older) files lack.
NEWEST_VLLM_KEYS = {"endpoint_type", "label", "failed", "request_goodput", "latencies", "start_times",
                    "queue_times", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"}  # fmt: skip
#: Keys of the shared real files that are not vLLM's result fields: ``timestamp`` (a ``--metadata``
#: entry), ``best_of`` (a sampling argument older clients echoed), ``request_goodput:`` (an old
#: typo of ``request_goodput``).
NOT_RESULT_FIELDS = {"timestamp", "best_of", "request_goodput:"}


def _run(tmp_path: Path, name: str, load: str, slo: str = "{}") -> tuple[Path, dict[str, object]]:
    (tmp_path / f"{name}.yaml").write_text(SCENARIO.format(name=name, load=load, slo=slo))
    run = tmp_path / name
    assert main(["run", str(tmp_path / f"{name}.yaml"), "-o", str(run)]) == 0
    return run, json.loads((run / "summary.json").read_text())


def _export(run: Path, fmt: str) -> dict[str, object]:
    assert main(["export", str(run), "--format", fmt]) == 0
    document: dict[str, object] = json.loads((run / f"summary.{fmt}.json").read_text())
    return document


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    return _run(tmp_path_factory.mktemp("closed"), "closed", CLOSED, "{ttft: 30 ms, tpot: 7 ms}")


@pytest.fixture(scope="module")
def poisson(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    return _run(tmp_path_factory.mktemp("poisson"), "poisson", POISSON)


def test_the_vllm_export_has_every_key_of_vllms_files_and_tooling_with_their_types(closed) -> None:
    exported = _export(closed[0], "vllm-bench")
    for key, kind in VLLM_TOOLING_KEYS.items():
        assert isinstance(exported[key], kind) and not isinstance(exported[key], bool), key
    real = set()
    for path in sorted(MEASURED.rglob("*.json")):
        real |= set(json.loads(path.read_text())) - NOT_RESULT_FIELDS
    if not real:
        pytest.skip("the shared measured vLLM files are not on this machine")
    assert real <= set(exported)
    requested = {f"p{q}_{m}_ms" for q in ("90", "95", "99", "99.9") for m in ("ttft", "tpot", "itl", "e2el")}
    assert set(exported) - real - NEWEST_VLLM_KEYS - requested == {"infersim_version"}


def test_vllms_per_request_arrays_obey_its_latency_law(closed) -> None:
    exported = _export(closed[0], "vllm-bench")
    n = exported["num_prompts"]
    assert all(len(exported[k]) == n for k in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors"))
    for ttft, gaps, latency, tokens in zip(exported["ttfts"], exported["itls"], exported["latencies"],
                                           exported["output_lens"], strict=True):  # fmt: skip
        assert len(gaps) == tokens - 1 and ttft + math.fsum(gaps) == pytest.approx(latency, rel=1e-12)
    assert exported["completed"] + exported["failed"] == n
    assert 1 <= exported["max_concurrent_requests"] <= 3  # three users


def test_goodput_counts_requests_within_the_slo_and_is_null_without_one(closed, poisson) -> None:
    exported = _export(closed[0], "vllm-bench")
    ttft, latency = np.array(exported["ttfts"]), np.array(exported["latencies"])
    n = np.array(exported["output_lens"])
    tpot = np.where(n > 1, (latency - ttft) / np.maximum(n - 1, 1), 0.0)
    good = ((ttft <= 0.030) & (tpot <= 0.007)).sum()
    assert exported["request_goodput"] == pytest.approx(good / exported["duration"], rel=1e-12)
    assert 0.0 <= exported["request_goodput"] <= exported["request_throughput"]
    assert _export(poisson[0], "vllm-bench")["request_goodput"] is None  # vLLM writes null without --goodput


@pytest.mark.parametrize("fmt", ["vllm-bench", "guidellm", "aiperf"])
def test_each_export_reads_back_with_the_summarys_numbers(fmt: str, closed, poisson) -> None:
    for (run, summary), load in ((closed, ("closed", 3, None)), (poisson, ("poisson", None, 12.0))):
        exported = _export(run, fmt)
        (imported,) = read_file(run / f"summary.{fmt}.json")
        assert imported.format == fmt and not imported.refusal
        assert imported.load is not None
        assert (imported.load.kind, imported.load.concurrency, imported.load.rate_per_s) == load
        for metric in ("ttft_s", "tpot_s", "e2e_s"):
            stats = imported.metrics[metric].values
            assert stats["mean"] == pytest.approx(summary[metric]["mean"], rel=1e-9), (fmt, metric)
            assert stats["p99"] == pytest.approx(summary[metric]["p99"], rel=1e-9), (fmt, metric)
        assert imported.input_tokens_mean * summary["ttft_s"]["count"] == pytest.approx(
            _total_input(fmt, exported), rel=1e-12)  # fmt: skip


def _total_input(fmt: str, exported: dict[str, object]) -> float:
    if fmt == "vllm-bench":
        return float(exported["total_input_tokens"])
    if fmt == "aiperf":
        return float(exported["total_isl"]["avg"])
    return float(exported["benchmarks"][0]["metrics"]["prompt_token_count"]["successful"]["total_sum"])


def test_a_load_a_format_cannot_state_is_refused_and_nothing_written(tmp_path: Path, capsys) -> None:
    run, _ = _run(tmp_path, "gamma", "{kind: open, arrivals: {process: gamma, rate_per_s: 12, burstiness: 4}}")
    for fmt in ("guidellm", "aiperf"):
        assert main(["export", str(run), "--format", fmt]) == 2
        assert "exports as vllm-bench" in capsys.readouterr().err
        assert not (run / f"summary.{fmt}.json").exists()
    assert _export(run, "vllm-bench")["burstiness"] == pytest.approx(0.25)


def test_guidellms_per_second_rates_count_what_the_rows_hold(closed) -> None:
    exported = _export(closed[0], "guidellm")
    metrics = exported["benchmarks"][0]["metrics"]
    rows = _export(closed[0], "vllm-bench")
    start = np.array(rows["start_times"])
    done = start + np.array(rows["latencies"])
    first = start + np.array(rows["ttfts"])
    seconds = metrics["requests_per_second"]["successful"]["count"]
    edge = start.min() + seconds  # the last whole second (the run lasts longer than one)
    completions = metrics["requests_per_second"]["successful"]["total_sum"]
    assert completions == (done <= edge).sum()
    n = np.array(rows["output_lens"])
    emitted = (first <= edge) + (n - 1) * np.clip((edge - first) / (done - first), 0.0, 1.0)
    assert metrics["output_tokens_per_second"]["successful"]["total_sum"] == pytest.approx(emitted.sum(), rel=1e-9)
    in_flight = np.clip(np.minimum(done, edge) - start, 0.0, None).sum()  # request-seconds before the edge
    assert metrics["request_concurrency"]["successful"]["total_sum"] == pytest.approx(in_flight, rel=1e-9)
    assert metrics["request_concurrency"]["successful"]["max"] <= 3  # three users


def test_aiperfs_time_to_second_token_is_the_summarys_and_vllm_states_no_speculation_without_it(closed) -> None:
    """AIPerf's ``time_to_second_token`` (ms) is the summary's ``ttst_s`` over the same requests
    (count, mean, p99); a run without speculative decoding writes none of vLLM's ``spec_decode_*``."""
    run, summary = closed
    ttst = _export(run, "aiperf")["time_to_second_token"]
    assert ttst["count"] == summary["ttst_s"]["count"] > 0
    assert ttst["avg"] == pytest.approx(summary["ttst_s"]["mean"] * 1e3, rel=1e-9)
    assert ttst["p99"] == pytest.approx(summary["ttst_s"]["p99"] * 1e3, rel=1e-9)
    assert "speculation" not in summary
    assert not [key for key in _export(run, "vllm-bench") if key.startswith("spec_decode")]
