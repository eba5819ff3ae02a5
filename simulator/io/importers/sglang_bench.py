"""SGLang's ``bench_serving --output-file`` JSONL: one run a line, appended by each invocation.

Fields read: ``{mean,median,std,pNN}_{ttft,tpot,itl,e2e_latency}_ms`` where present (the
late-2024 schema has only the medians of TTFT and ITL and the mean and median E2E; newer
ones all of them), ``output_throughput``, ``completed``, ``total_input_tokens`` /
``total_output_tokens`` and the load: ``request_rate`` (a number or a bare ``Infinity``:
all sent at t = 0; gaps are exponential, SGLang has no burstiness in these schemas) and
``max_concurrency``. Per-request arrays (``input_lens``, ``output_lens``, ``ttfts``,
``itls``, ``errors``) are read as vLLM's where a line carries them (``--output-details``).

Versions: the late-2024 schema (SGLang 0.4 era: medians only) and the later ones with every statistic.
"""

from __future__ import annotations

import math

from simulator.errors import ConfigError
from simulator.io.importers.common import ImportedRun, Load, optional, throughput_flag, whole
from simulator.io.importers.vllm_bench import latency_stats, per_request, rate_per_s, throughput

FORMAT = "sglang-bench"
_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2e_latency": "e2e_s"}


def detect(data: object) -> bool:
    return isinstance(data, dict) and "backend" in data and "dataset_name" in data and "median_ttft_ms" in data


def _load(data: dict[str, object], where: str, completed: int) -> tuple[Load | None, str]:
    rate = rate_per_s(data.get("request_rate"), where, "request_rate")
    limit = optional(data, "max_concurrency")
    if limit is not None and not math.isinf(rate):
        return None, f"{where}: request_rate {rate:g} and max_concurrency {limit}: not a load the engine sends"
    if limit is not None:
        return Load("closed", concurrency=whole(data, "max_concurrency", where, minimum=1)), ""
    if math.isinf(rate):
        return Load("offline", requests=completed), ""
    return Load("poisson", requests=completed, rate_per_s=rate), ""


def read_line(data: object, where: str) -> ImportedRun:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object (one bench_serving run)")
    completed = whole(data, "completed", where, minimum=1)
    load, refusal = _load(data, where, completed)
    notes = ["warm-up: none excluded; the line does not say whether ignore_eos was set"]
    if data.get("dataset_name") == "random":
        ratio = data.get("random_range_ratio")
        notes.append(f"random dataset, range ratio {ratio}: lengths drawn per request; rows use the run's means")
    return ImportedRun(
        source=where,
        format=FORMAT,
        model_name=str(data["model_id"]) if "model_id" in data else None,
        input_tokens_mean=whole(data, "total_input_tokens", where) / completed,
        output_tokens_mean=whole(data, "total_output_tokens", where) / completed,
        metrics=latency_stats(data, where, _METRICS, completed) | throughput(data, where),
        load=load,
        refusal=refusal,
        per_request=per_request(data, where),
        notes=tuple(notes),
        flags=throughput_flag(data, where),
    )
