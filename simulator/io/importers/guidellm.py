"""GuideLLM's ``benchmarks.json`` / ``benchmarks.yaml`` (the report of ``guidellm benchmark``), versions
0.3 to 0.8, built from their published schemas: no real file with its hardware stated was found to
test it on. 0.3 states each benchmark's strategy under ``args.strategy``; 0.4 and later under the
benchmark's own ``config.strategy`` (``args`` then names the run's settings); both are read. The
YAML report carries the same tree.

``benchmarks``: one entry per strategy run. Its ``metrics`` hold distributions under
``successful`` (``mean``, ``median`` (infersim ``p50`` where no ``percentiles.p50``), ``std_dev``,
``min``, ``max``, ``count`` and
``percentiles`` ``p50``..``p999``) of ``time_to_first_token_ms``, ``inter_token_latency_ms``
(GuideLLM's ITL is (e2e - ttft) / (n - 1): vLLM's TPOT, infersim ``tpot_s``),
``time_per_output_token_ms`` (e2e / n: infersim ``normalized_tpot_s``), ``request_latency``
(seconds) and ``output_tokens_per_second``, and ``prompt_token_count`` /
``output_token_count`` (mean lengths). The load is ``args.strategy``: ``synchronous`` (one
client), ``concurrent`` (``streams`` clients), ``constant`` / ``poisson`` (``rate``) or
``throughput`` (everything at once).
"""

from __future__ import annotations

from collections.abc import Mapping

from simulator.errors import ConfigError
from simulator.io.importers.common import MS_PER_S, ImportedRun, Load, Stats, num, optional, whole

FORMAT = "guidellm"
#: metric key -> (infersim metric, factor to SI)
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
_METRICS = {"time_to_first_token_ms": ("ttft_s", 1 / MS_PER_S), "inter_token_latency_ms": ("tpot_s", 1 / MS_PER_S),
            "time_per_output_token_ms": ("normalized_tpot_s", 1 / MS_PER_S), "request_latency": ("e2e_s", 1.0),
            "output_tokens_per_second": ("output_tok_s", 1.0)}  # fmt: skip
_STAT = {"count": "count", "mean": "mean", "median": "p50", "std_dev": "std", "min": "min", "max": "max"}
#: Where each version states a benchmark's strategy.
_STRATEGY_AT = ("config.strategy", "args.strategy")
SUPPORTED_VERSIONS = "0.3 to 0.8"
_PERCENTILE = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9"}


def detect(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list)


def _stats(node: Mapping[str, object], path: str, where: str, factor: float) -> Stats:
    values = {
        name: num(node, k, where, 0.0) * (1.0 if name == "count" else factor) for k, name in _STAT.items() if k in node
    }
    percentiles = node.get("percentiles")
    if isinstance(percentiles, Mapping):  # a stated p50 wins over the median (the same number when both)
        values |= {n: num(percentiles, k, where, 0.0) * factor for k, n in _PERCENTILE.items() if k in percentiles}
    return Stats(values, path)


def _load(bench: Mapping[str, object], where: str, count: int) -> Load:
    at = next((p for p in _STRATEGY_AT if optional(bench, f"{p}.type_") is not None), None)
    if at is None:
        raise ConfigError(
            f"{where}: neither config.strategy.type_ (GuideLLM 0.4 to 0.8) nor args.strategy.type_ "
            f"(0.3) names a strategy; versions read: {SUPPORTED_VERSIONS}"
        )
    kind = optional(bench, f"{at}.type_")
    if kind == "synchronous":
        return Load("closed", concurrency=1)
    if kind == "concurrent":
        return Load("closed", concurrency=whole(bench, f"{at}.streams", where, minimum=1))
    if kind in ("constant", "poisson"):
        return Load(kind, requests=count, rate_per_s=num(bench, f"{at}.rate", where, minimum=0.0))
    if kind == "throughput":
        return Load("offline", requests=count)
    raise ConfigError(
        f"{where}: {at}.type_: expected synchronous, concurrent, constant, poisson or throughput, got {kind!r}"
    )


def read(data: object, where: str) -> list[ImportedRun]:
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list) or not data["benchmarks"]:
        raise ConfigError(f"{where}: benchmarks: expected a non-empty list (GuideLLM's report)")
    runs = []
    for index, bench in enumerate(data["benchmarks"]):
        at = f"{where}: benchmarks.{index}"
        if not isinstance(bench, Mapping):
            raise ConfigError(f"{at}: expected an object")
        runs.append(_bench_run(data, bench, at))
    return runs


def _bench_run(data: Mapping[str, object], bench: Mapping[str, object], at: str) -> ImportedRun:
    """The run of one benchmark of the report (its statistics of successful requests, its load)."""
    metrics = _bench_metrics(bench, at)
    count = whole(bench, "metrics.request_latency.successful.count", at, minimum=1)
    return ImportedRun(
        source=at,
        format=FORMAT,
        model_name=str(
            optional(bench, "args.model")
            or optional(bench, "config.requests.model")
            or optional(data, "args.model")
            or ""
        )
        or None,
        input_tokens_mean=num(bench, "metrics.prompt_token_count.successful.mean", at, minimum=1.0),
        output_tokens_mean=num(bench, "metrics.output_token_count.successful.mean", at, minimum=1.0),
        metrics=metrics,
        load=_load(bench, at, count),
        notes=("warm-up: GuideLLM's warmup requests, if any, are excluded by the tool",),
    )


def _bench_metrics(bench: Mapping[str, object], at: str) -> dict[str, Stats]:
    """The benchmark's statistics of successful requests, for each metric of :data:`_METRICS` it states."""
    metrics = {}
    for key, (metric, factor) in _METRICS.items():
        node = optional(bench, f"metrics.{key}.successful")
        if isinstance(node, Mapping):
            metrics[metric] = _stats(node, f"metrics.{key}.successful", at, factor)
    return metrics
