"""vLLM's serving benchmark result JSON (``vllm bench serve`` / ``benchmark_serving.py --save-result``).

Fields read: ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` (milliseconds; NN any of the
``--metric-percentiles``, e.g. ``p99.9``), ``output_throughput`` (tokens/s over the run's
duration), ``total_input_tokens`` / ``total_output_tokens`` / ``completed`` (mean lengths),
and the load: ``num_prompts``, ``request_rate`` (a number, or ``"inf"`` / ``Infinity``: all
sent at once), ``burstiness`` (the gamma *shape* k of the gaps: CV^2 = 1 / k, 1 is Poisson;
absent in clients older than 0.7, which sent Poisson) and ``max_concurrency``.

Per request (0.8.x clients wrote them by default; later ones with ``--save-detailed``):
``input_lens``, ``output_lens``, ``ttfts`` and ``itls`` (seconds; one list of gaps a
request) and ``errors`` ('' for a success), in the order the requests were sent. A request's
e2e is ``ttft + sum(itls)`` (the client's ``latency``: both end at the last chunk). Clients that
record ``start_times`` (each request's send time on the client's clock, seconds) give the replay
those, relative to the first request sent, so a closed loop replays as the client sent it; without
them a replay draws the send times from the stated load.

Versions: the keys of ``benchmark_serving.py`` from vLLM 0.5 (``mean_ttft_ms``, ``p99_ttft_ms``;
no e2e statistics, no ``burstiness`` before 0.7) through ``vllm bench serve`` of 0.8-0.11 (``*_e2el_ms``,
``failed``, ``max_concurrency``, ``request_goodput``, ``start_times``); later keys are ignored.

Quirks met in real files: ``"request_goodput:"`` with a trailing colon and a ``timestamp``
key from ``--metadata`` parsing (ignored), ``model_id`` a local snapshot path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from simulator.io.importers.common import (
    MS_PER_S,
    ImportedRun,
    Load,
    PerRequest,
    Stats,
    get,
    model_from_path,
    num,
    optional,
    report_object,
    stats_of,
    succeeded,
    throughput_flag,
    whole,
)

FORMAT = "vllm-bench"
_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_s"}
_STAT_PREFIX = {"mean": "mean", "median": "p50", "std": "std"}


def detect(data: object) -> bool:
    return isinstance(data, dict) and "request_rate" in data and any(k.endswith("_ttft_ms") for k in data)


def latency_stats(data: Mapping[str, object], where: str, names: Mapping[str, str], count: int) -> dict[str, Stats]:
    """``{mean,median,std,pNN}_<short>_ms`` fields as statistics in seconds, for each ``short -> metric``
    (``count``: the completed requests they summarise)."""
    out: dict[str, Stats] = {}
    for short, metric in names.items():
        values: dict[str, float] = {"count": float(count)}
        for key in data:
            if not key.endswith(f"_{short}_ms"):
                continue
            prefix = key.removesuffix(f"_{short}_ms")
            name = _STAT_PREFIX.get(prefix, prefix if prefix.startswith("p") else "")
            if name and data[key] is not None:
                values[name] = num(data, key, where, minimum=0.0) / MS_PER_S
        if len(values) > 1:
            out[metric] = Stats(values, f"*_{short}_ms")
    return out


def throughput(data: Mapping[str, object], where: str) -> dict[str, Stats]:
    """Output tokens per second over the run (``output_throughput``: total output tokens / duration)."""
    return {"output_tok_s": Stats({"mean": num(data, "output_throughput", where, minimum=0.0)}, "output_throughput")}


def rate_per_s(value: object, where: str, field: str) -> float:
    """A request rate: a positive number, or ``inf`` as a string or a bare ``Infinity``."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where}: {field}: expected a positive number or 'inf', got {value!r}")
    return float(value)


def _load(data: Mapping[str, object], where: str) -> tuple[Load | None, str, list[str]]:
    rate = rate_per_s(get(data, "request_rate", where), where, "request_rate")
    prompts = whole(data, "num_prompts", where, minimum=1)
    limit = optional(data, "max_concurrency")
    concurrency = None if limit is None else whole(data, "max_concurrency", where, minimum=1)
    burstiness = num(data, "burstiness", where) if optional(data, "burstiness") is not None else 1.0
    notes: list[str] = []
    if math.isinf(rate):
        if concurrency is None:
            return Load("offline", requests=prompts), "", notes
        notes.append(
            f"{prompts} prompts through {concurrency} clients: the row runs the steady state "
            "(the file's averages include the ramp-up and the tail)"
        )
        return Load("closed", concurrency=concurrency), "", notes
    if concurrency is not None:
        return (
            None,
            (
                f"{where}: request_rate {rate:g} and max_concurrency {concurrency} together: arrivals "
                "paced by both a rate and a client limit are not a load the engine sends"
            ),
            notes,
        )
    if burstiness <= 0:
        return None, f"{where}: burstiness: expected a positive gamma shape, got {burstiness:g}", notes
    if burstiness == 1.0:
        return Load("poisson", requests=prompts, rate_per_s=rate), "", notes
    notes.append(f"burstiness {burstiness:g} is vLLM's gamma shape k; infersim's CV^2 = 1/k = {1 / burstiness:g}")
    return Load("gamma", requests=prompts, rate_per_s=rate, cv2=1.0 / burstiness), "", notes


def _arrays(data: Mapping[str, object], where: str) -> dict[str, list[Any]] | None:
    """The per-request lists (lengths, TTFTs, ITLs, errors, send times when recorded), each one entry per
    request; None when the file has no per-request data."""
    lists: dict[str, list[Any]] = {}
    for key in ("input_lens", "output_lens", "ttfts", "itls"):
        values = data.get(key)
        if not isinstance(values, list):
            return None
        lists[key] = values
    count = len(lists["input_lens"])
    errors = data.get("errors")
    lists["errors"] = errors if isinstance(errors, list) else [""] * count
    starts = data.get("start_times")
    if isinstance(starts, list):
        lists["start_times"] = starts
    for key, values in lists.items():
        if len(values) != count:
            raise ConfigError(f"{where}: {key}: expected {count} entries (as input_lens), got {len(values)}")
    return lists


def _send_times_s(starts: list[Any], ok: list[int], where: str) -> np.ndarray:
    """The send times (s) of the successful requests ``ok``, each a finite number."""
    try:
        sent = np.array([float(starts[i]) for i in ok])
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}: start_times: expected a send time (seconds) per request") from None
    if not np.all(np.isfinite(sent)):
        raise ConfigError(f"{where}: start_times: expected finite send times")
    return sent


def _successful_columns(
    lists: Mapping[str, Any], ok: list[int], where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The successful requests' TTFTs, sums of inter-token gaps, input and output lengths; refused
    when one is not a number or a request has no tokens."""
    try:
        ttft = np.array([float(lists["ttfts"][i]) for i in ok])
        gaps = np.array([math.fsum(lists["itls"][i]) for i in ok])
        inputs = np.array([int(lists["input_lens"][i]) for i in ok])
        outputs = np.array([int(lists["output_lens"][i]) for i in ok])
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"{where}: input_lens/output_lens/ttfts/itls: expected numbers (itls: a list per request)"
        ) from None
    if np.any(outputs < 1) or np.any(inputs < 1):
        raise ConfigError(f"{where}: input_lens/output_lens: a successful request with no tokens")
    return ttft, gaps, inputs, outputs


def per_request(data: Mapping[str, object], where: str) -> PerRequest | None:
    """The successful requests of the per-request arrays, or None when the file has none."""
    lists = _arrays(data, where)
    if lists is None:
        return None
    ok = [i for i, error in enumerate(lists["errors"]) if not error]
    ttft, gaps, inputs, outputs = _successful_columns(lists, ok, where)
    arrivals = None
    if "start_times" in lists and ok:
        sent = _send_times_s(lists["start_times"], ok, where)
        order = np.argsort(sent, kind="stable")  # the order the client sent them
        inputs, outputs, ttft, gaps, sent = inputs[order], outputs[order], ttft[order], gaps[order], sent[order]
        arrivals = sent - sent[0]
    return PerRequest(inputs, outputs, ttft, ttft + gaps, arrival_s=arrivals)


def read(data: object, where: str) -> list[ImportedRun]:
    data = report_object(data, where, "vLLM's result file")
    completed = succeeded(data, "completed", where)
    load, refusal, notes = _load(data, where)
    failed = whole(data, "num_prompts", where) - completed
    if failed > 0:
        notes.append(f"{failed} requests failed and are left out")
    model = get(data, "model_id", where, "the served model") if "model_id" in data else None
    metrics = latency_stats(data, where, _METRICS, completed) | throughput(data, where)
    requests = per_request(data, where)
    if requests is not None and "e2e_s" not in metrics:  # clients before 0.8 stated no e2e statistics
        metrics["e2e_s"] = Stats(stats_of(requests.e2e_s), "ttfts + sum(itls) per request")
    return [
        ImportedRun(
            source=where,
            format=FORMAT,
            model_name=model_from_path(str(model)) if model is not None else None,
            input_tokens_mean=whole(data, "total_input_tokens", where) / completed,
            output_tokens_mean=whole(data, "total_output_tokens", where) / completed,
            metrics=metrics,
            load=load,
            refusal=refusal,
            per_request=requests,
            flags=throughput_flag(data, where),
            notes=(
                *notes,
                "warm-up: none excluded (vLLM's client has no warm-up phase); output lengths are "
                "the client's count, EOS-terminated unless the run set ignore_eos (not recorded)",
            ),
        )
    ]
