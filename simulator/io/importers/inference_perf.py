"""inference-perf lifecycle reports (``stage_N_lifecycle_metrics.json``, ``summary_lifecycle_metrics.json``).

Every time is in seconds. ``successes.latency`` holds distributions (``mean``, ``min``,
``pN``, ``median``, ``max``; no std) of ``time_to_first_token``, ``time_per_output_token``
(vLLM's TPOT), ``inter_token_latency`` (every gap pooled), ``normalized_time_per_output_token``
(e2e / n) and ``request_latency``; ``successes.throughput.output_tokens_per_sec``; the mean
lengths in ``prompt_len`` / ``output_len``. A stage's load is ``load_summary``: a constant
rate (inference-perf's ``constant`` stages send evenly spaced requests) for ``count``
requests; the *achieved* rate is used, which falls below the requested one when the client
could not keep up. The summary file pools stages of different rates: no one load reproduces
it, so it is refused (its stages import one by one).

Versions: the lifecycle reports of inference-perf's 2025 releases (``load_summary``, ``successes``).
"""

from __future__ import annotations

from collections.abc import Mapping

from simulator.errors import ConfigError
from simulator.io.importers.common import ImportedRun, Load, Stats, get, num, optional, report_object, succeeded, whole

FORMAT = "inference-perf"
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
_METRICS = {"time_to_first_token": "ttft_s", "time_per_output_token": "tpot_s", "inter_token_latency": "itl_s",
            "normalized_time_per_output_token": "normalized_tpot_s", "request_latency": "e2e_s"}  # fmt: skip
_STAT = {"mean": "mean", "min": "min", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99",
         "p99.9": "p99.9", "max": "max"}  # fmt: skip
#: Below this share of the requested rate the run says the client fell behind.
ACHIEVED_SHARE_NOTED = 0.95


def detect(data: object) -> bool:
    return isinstance(data, dict) and "load_summary" in data and "successes" in data


def _distribution(data: Mapping[str, object], path: str, where: str, count: int) -> Stats:
    node = get(data, path, where, "a distribution object")
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where}: {path}: expected an object of statistics, got {node!r}")
    values = {name: num(node, key, where, minimum=0.0) for key, name in _STAT.items() if key in node}
    return Stats({"count": float(count), **values}, path)


def read(data: object, where: str) -> list[ImportedRun]:
    data = report_object(data, where, "an inference-perf report")
    count = succeeded(data, "successes.count", where)
    metrics = {
        m: _distribution(data, f"successes.latency.{k}", where, count)
        for k, m in _METRICS.items()
        if optional(data, f"successes.latency.{k}") is not None
    }
    metrics["output_tok_s"] = Stats(
        {"mean": num(data, "successes.throughput.output_tokens_per_sec", where, 0.0)},
        "successes.throughput.output_tokens_per_sec",
    )
    notes = ["warm-up: none excluded; output lengths as the server counted them"]
    load: Load | None = None
    refusal = ""
    if optional(data, "load_summary.requested_rate") is None:
        refusal = (
            f"{where}: load_summary.requested_rate: missing: a summary pools stages of different rates, "
            "which no one load reproduces; import the stage_N_lifecycle_metrics.json files"
        )
    else:
        requested = num(data, "load_summary.requested_rate", where, minimum=0.0)
        achieved = num(data, "load_summary.achieved_rate", where, minimum=0.0)
        sent = whole(data, "load_summary.count", where, minimum=1)
        load = Load("constant", requests=sent, rate_per_s=achieved)
        if achieved < ACHIEVED_SHARE_NOTED * requested:
            notes.append(f"the client sent {achieved:.4g} req/s of the {requested:.4g} requested (it fell behind)")
    failures = optional(data, "failures.count")
    if failures:
        notes.append(f"{failures} failed requests left out")
    return [
        ImportedRun(
            source=where,
            format=FORMAT,
            model_name=None,
            input_tokens_mean=num(data, "successes.prompt_len.mean", where, minimum=1.0),
            output_tokens_mean=num(data, "successes.output_len.mean", where, minimum=1.0),
            metrics=metrics,
            load=load,
            refusal=refusal,
            notes=tuple(notes),
        )
    ]
