"""A simulated run in a peer's result format, so tools built for measured runs read it.

Built from a run folder's ``requests.csv`` (one row per request), ``summary.json`` and
``scenario.resolved.yaml``. The *prompts* are the requests that arrived at or after the
warm-up, in the order they were sent: the completed ones (measured, as ``summary.json``
counts them) and the failed ones (dropped as too long, or rejected over the API budget).
Per completed request (vLLM's definitions, as infersim's): ``ttft = first token - arrival``,
``e2el = done - arrival``, ``tpot = (done - first) / (n - 1)`` for n > 1. Statistics with numpy
(``std`` with ddof 0, percentiles linear), times in ms where the peer writes ms. ``duration`` is
the span from the first prompt's arrival to the last completion, the throughputs the completed
requests' tokens over it.

infersim keeps no time per token. The inter-token latency the peers pool over every gap (vLLM's
ITL) comes from the summary's histogram (``itl_s``); a request's list of gaps (vLLM's ``itls``)
is its ``n - 1`` gaps each set to its own TPOT, so each list sums to ``done - first`` exactly and
the pooled mean of the lists is exact, while the spread within a request is not simulated.

- ``vllm-bench``: every key ``vllm bench serve --save-result --save-detailed`` writes (vLLM's
  ``benchmarks/serve.py``), per-request arrays included. ``request_goodput`` counts the
  completed requests meeting the run's SLO (``slo.ttft``, ``slo.tpot``; a 1-token answer meets
  any TPOT bound, as vLLM's) over the duration, and is null without an SLO, as vLLM writes it
  without ``--goodput``. ``max_output_tokens_per_s`` is the summary's ``peak_output_tok_s``;
  ``max_concurrent_requests`` vLLM's sweep over the completed requests' ``[start, start +
  latency)``. The load: ``request_rate`` (``"inf"`` for a closed loop or a trace),
  ``burstiness`` (vLLM's gamma shape, 1 / CV^2) and ``max_concurrency`` (the closed loop's users).
  With speculative decoding, vLLM's ``spec_decode_*`` keys (acceptance rate in percent, acceptance
  length, drafts, drafted and accepted tokens, per-position rates) come from the summary's
  ``speculation``, as vLLM bench reads them off the server's counters over the run.
- ``guidellm``: GuideLLM's ``benchmarks.json`` as GuideLLM 0.8's ``GenerativeBenchmarksReport``
  loads it (one benchmark; its strategy, ``synchronous``, ``concurrent``, ``constant`` or
  ``poisson``, under ``config`` as 0.4+ hold it and under ``args`` as 0.3 did), with
  ``request_totals`` (``successful``, ``errored``, ``incomplete``) and each metric's
  ``successful`` distribution (mean, median, mode, variance, std_dev, min, max, count,
  total_sum, percentiles p001..p999): per request for latencies and lengths, per second of the
  run for the rates and the concurrency. GuideLLM's ``inter_token_latency_ms`` is infersim's
  TPOT, its ``time_per_output_token_ms`` ``e2e / n``; a streamed chunk is one token. Metrics
  of what is not simulated (websocket round trips, images, audio, tool calls) are empty. Its
  report has no field for a time to second token or a speculative acceptance.
- ``aiperf``: AIPerf's ``profile_export_aiperf.json`` as AIPerf 0.8 writes it (export schema
  1.2): each metric ``{unit, avg, std, min, max, count, sum, p1..p99}``, AIPerf's
  ``inter_token_latency`` being infersim's TPOT, its ``time_to_second_token`` each request's time
  from its first token to its second (infersim's ``ttst_s``), and the load under ``input_config.loadgen``
  (``concurrency`` or ``request_rate``). AIPerf 0.13's ``JsonExportData`` accepts every metric;
  its ``input_config`` states the load as phases instead, which this export does not write.

A load a format cannot state (GuideLLM's and AIPerf's have no gamma arrivals, no rate steps or
ramps, no traces, no agents) is refused with the formats that can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.errors import ConfigError
from simulator.io.importers.common import MS_PER_S, NS_PER_S, FloatArray

#: Percentiles written (vLLM's ``--metric-percentiles`` names).
PERCENTILES = (90.0, 95.0, 99.0, 99.9)
#: GuideLLM's percentile keys and the percentiles they name.
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
GUIDELLM_PERCENTILES = {"p001": 0.1, "p01": 1.0, "p05": 5.0, "p10": 10.0, "p25": 25.0, "p50": 50.0, "p75": 75.0,
                        "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}  # fmt: skip
#: AIPerf's statistics keys of a distribution.
AIPERF_PERCENTILES = (1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0)
#: Why a failed request has no answer, by ``requests.csv``'s ``dropped`` code.
FAILURES = {1: "dropped: too long for every backend its class may use", 2: "rejected: over the API budget"}


@dataclass(frozen=True)
class Prompts:
    """The prompts of a run (module docstring), in the order they were sent."""

    arrival_s: FloatArray
    first_s: FloatArray
    done_s: FloatArray
    input_tokens: FloatArray
    output_tokens: FloatArray
    dropped: FloatArray  # 0 completed, else the failure code
    second_s: FloatArray | None = None  # the second token (None: a results folder from before it was kept)

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        mask: npt.NDArray[np.bool_] = self.dropped == 0
        return mask

    def completed(self, column: FloatArray) -> FloatArray:
        out: FloatArray = column[self.ok]
        return out

    @property
    def ttft_s(self) -> FloatArray:
        return self.completed(self.first_s - self.arrival_s)

    @property
    def e2e_s(self) -> FloatArray:
        return self.completed(self.done_s - self.arrival_s)

    @property
    def tpot_s(self) -> FloatArray:
        """Per completed request with n > 1 (NaN for 1-token answers)."""
        n = self.completed(self.output_tokens)
        with np.errstate(divide="ignore", invalid="ignore"):
            out: FloatArray = np.where(n > 1, self.completed(self.done_s - self.first_s) / (n - 1), math.nan)
        return out

    @property
    def ttst_s(self) -> FloatArray | None:
        """Per completed request, second token - first (NaN for 1-token answers); None when not kept."""
        return None if self.second_s is None else self.completed(self.second_s - self.first_s)

    @property
    def duration_s(self) -> float:
        done = self.completed(self.done_s)
        return float(done.max() - self.arrival_s.min()) if done.size else math.nan


def prompts_of(requests: dict[str, FloatArray], warmup_s: float) -> Prompts:
    """The prompts among ``requests.csv``'s columns: completed or failed, arrived at or after the warm-up."""
    arrival, done, dropped = requests["arrival_s"], requests["done_s"], requests["dropped"]
    keep = (arrival >= warmup_s) & ((dropped != 0) | np.isfinite(done))
    order = np.argsort(arrival[keep], kind="stable")
    pick = {
        name: requests[name][keep][order]
        for name in (
            "arrival_s",
            "first_token_s",
            "second_token_s",
            "done_s",
            "input_tokens",
            "output_tokens",
            "dropped",
        )
        if name in requests
    }
    if not (pick["dropped"] == 0).any():
        raise ConfigError("requests.csv: no request completed after the warm-up: nothing to export")
    return Prompts(
        pick["arrival_s"],
        pick["first_token_s"],
        pick["done_s"],
        pick["input_tokens"],
        pick["output_tokens"],
        pick["dropped"],
        pick.get("second_token_s"),
    )


def _finite(values: FloatArray) -> FloatArray:
    out: FloatArray = values[np.isfinite(values)]
    return out


def _vllm_stats(name: str, values_s: FloatArray) -> dict[str, float]:
    values_ms = _finite(values_s) * MS_PER_S
    if values_ms.size == 0:
        return {}
    out = {
        f"mean_{name}_ms": float(values_ms.mean()),
        f"median_{name}_ms": float(np.median(values_ms)),
        f"std_{name}_ms": float(values_ms.std()),
    }
    for q in PERCENTILES:
        out[f"p{q:g}_{name}_ms"] = float(np.percentile(values_ms, q))
    return out


def _itl_stats(summary: dict[str, Any]) -> dict[str, float]:
    """vLLM's pooled ITL statistics from the summary's ``itl_s`` (those it states)."""
    itl = summary.get("itl_s") or {}
    names = {"mean": "mean", "p50": "median", "std": "std", "p90": "p90", "p95": "p95", "p99": "p99", "p99_9": "p99.9"}
    return {f"{name}_itl_ms": float(itl[k]) * MS_PER_S for k, name in names.items() if itl.get(k) is not None}


def _spec_decode_fields(summary: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``spec_decode_*`` keys from the summary's ``speculation`` (none without speculation;
    the acceptance rate in percent, the per-position rates as fractions, as vLLM writes them)."""
    spec = summary.get("speculation")
    if not spec:
        return {}
    rate = spec.get("acceptance_rate")
    return {"spec_decode_acceptance_rate": None if rate is None else float(rate) * 100.0,
            "spec_decode_acceptance_length": spec.get("acceptance_length"),
            "spec_decode_num_drafts": int(spec["verify_passes"]), "spec_decode_draft_tokens": int(spec["draft_tokens"]),
            "spec_decode_accepted_tokens": int(spec["accepted_tokens"]),
            "spec_decode_per_position_acceptance_rates": list(spec.get("per_position_acceptance") or [])}  # fmt: skip


def _load_fields(load: dict[str, Any]) -> dict[str, Any]:
    arrivals = load.get("arrivals") if load.get("kind") == "open" else None
    if isinstance(arrivals, dict) and "rate_per_s" in arrivals:
        cv2 = {"poisson": 1.0, "gamma": arrivals.get("burstiness", 1.0)}.get(str(arrivals.get("process")))
        return {
            "request_rate": arrivals["rate_per_s"],
            "burstiness": None if not cv2 else 1.0 / cv2,
            "max_concurrency": None,
        }
    users = load.get("users") if load.get("kind") == "closed" else None
    return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": users}


def model_id_of(scenario: dict[str, Any]) -> str | None:
    """The served model's Hugging Face repo (else its profile id) in a resolved scenario."""
    model = (scenario.get("deployment") or {}).get("model")
    return str(model.get("hf_repo") or model.get("id")) if isinstance(model, dict) else model


def _slo_bounds(scenario: dict[str, Any]) -> tuple[float | None, float | None]:
    """The run's (TTFT, TPOT) bounds in seconds (None: not set)."""
    from simulator.units import parse_quantity

    slo = scenario.get("slo") or {}
    bounds = []
    for key in ("ttft", "tpot"):
        value = slo.get(key)
        bounds.append(
            None
            if value is None
            else float(value)
            if isinstance(value, int | float)
            else parse_quantity(str(value), "time")
        )
    return bounds[0], bounds[1]


def goodput_per_s(p: Prompts, scenario: dict[str, Any]) -> float | None:
    """vLLM's ``request_goodput``: completed requests within every bound of the run's SLO per
    second of the duration; None when the run sets no bound."""
    ttft_bound, tpot_bound = _slo_bounds(scenario)
    if ttft_bound is None and tpot_bound is None:
        return None
    good = np.ones(p.ttft_s.size, dtype=bool)
    if ttft_bound is not None:
        good &= p.ttft_s <= ttft_bound
    if tpot_bound is not None:
        good &= ~(p.tpot_s > tpot_bound)  # a 1-token answer (no TPOT) meets it, as in vLLM
    return float(good.sum()) / p.duration_s


def peak_concurrency(start_s: FloatArray, end_s: FloatArray) -> int:
    """Most intervals ``[start, end)`` open at once (a departure at an arrival's instant goes first)."""
    times = np.concatenate((start_s, end_s))
    steps = np.concatenate((np.ones(start_s.size), -np.ones(end_s.size)))
    order = np.lexsort((steps, times))
    return int(np.cumsum(steps[order]).max()) if order.size else 0


def _per_request(p: Prompts) -> dict[str, list[Any]]:
    """vLLM's per-request arrays, one entry per prompt (a failed one: no tokens, zero times, its error)."""
    ok, n = p.ok, p.output_tokens
    ttft = np.where(ok, p.first_s - p.arrival_s, 0.0)
    latency = np.where(ok, p.done_s - p.arrival_s, 0.0)
    gap = np.where(ok & (n > 1), (p.done_s - p.first_s) / np.maximum(n - 1, 1), 0.0)
    return {
        "input_lens": p.input_tokens.astype(int).tolist(),
        "output_lens": np.where(ok, n, 0).astype(int).tolist(),
        "ttfts": ttft.tolist(),
        "itls": [[g] * (int(k) - 1) if good else [] for g, k, good in zip(gap.tolist(), n, ok, strict=True)],
        "latencies": latency.tolist(),
        "start_times": p.arrival_s.tolist(),
        "queue_times": [0.0] * p.arrival_s.size,  # infersim's clients send at once: no client-side queue
        "generated_texts": [""] * p.arrival_s.size,
        "errors": [FAILURES.get(int(code), "failed") if code else "" for code in p.dropped],
    }


def vllm_bench(
    requests: dict[str, FloatArray], summary: dict[str, Any], scenario: dict[str, Any], version: str, date: str
) -> dict[str, Any]:
    """vLLM's result JSON of a run (module docstring); ``requests`` are requests.csv's columns,
    ``date`` vLLM's ``%Y%m%d-%H%M%S`` of when the run was written."""
    p = prompts_of(requests, float((scenario.get("run") or {}).get("warmup") or 0.0))
    duration, completed = p.duration_s, int(p.ok.sum())
    n_in, n_out = p.completed(p.input_tokens), p.completed(p.output_tokens)
    peak_tokens = summary.get("peak_output_tok_s")
    model = model_id_of(scenario)
    out: dict[str, Any] = {
        "date": date,
        "endpoint_type": "infersim",
        "backend": "infersim",
        "label": "infersim",
        "infersim_version": version,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": int(p.ok.size),
        **_load_fields(scenario.get("load") or {}),
        "duration": duration,
        "completed": completed,
        "failed": int(p.ok.size) - completed,
        "total_input_tokens": int(n_in.sum()),
        "total_output_tokens": int(n_out.sum()),
        "request_throughput": completed / duration,
        "request_goodput": goodput_per_s(p, scenario),
        "output_throughput": float(n_out.sum()) / duration,
        "total_token_throughput": float(n_in.sum() + n_out.sum()) / duration,
        **_per_request(p),
        "max_output_tokens_per_s": math.nan if peak_tokens is None else float(peak_tokens),
        "max_concurrent_requests": peak_concurrency(p.completed(p.arrival_s), p.completed(p.done_s)),
        "rtfx": 0.0,  # vLLM's audio real-time factor: no audio input
    }
    out |= _vllm_stats("ttft", p.ttft_s) | _vllm_stats("tpot", p.tpot_s) | _itl_stats(summary)
    return out | _vllm_stats("e2el", p.e2e_s) | _spec_decode_fields(summary)


def _refuse(load: dict[str, Any], peer: str) -> ConfigError:
    return ConfigError(
        f"scenario.resolved.yaml: load: {peer} states closed loops and Poisson or constant "
        f"rates only; this run's load ({load.get('kind')}, {_arrival_process(load) or '-'}) "
        "exports as vllm-bench"
    )


def _arrival_process(load: dict[str, Any]) -> str | None:
    arrivals = load.get("arrivals")
    return str(arrivals.get("process")) if isinstance(arrivals, dict) else None


def _strategy(load: dict[str, Any]) -> dict[str, Any]:
    """GuideLLM's strategy of a load."""
    if load.get("kind") == "closed":
        users = int(load["users"])
        return {"type_": "synchronous"} if users == 1 else {"type_": "concurrent", "streams": users}
    process = _arrival_process(load)
    if load.get("kind") == "open" and process in ("poisson", "constant"):
        return {"type_": process, "rate": float(load["arrivals"]["rate_per_s"])}
    raise _refuse(load, "GuideLLM")


def _guidellm_distribution(values: FloatArray) -> dict[str, Any]:
    """GuideLLM's ``DistributionSummary`` of the finite values (mode: the most frequent value)."""
    v = _finite(values)
    if v.size == 0:
        return {
            "mean": 0.0,
            "median": 0.0,
            "mode": 0.0,
            "variance": 0.0,
            "std_dev": 0.0,
            "min": 0.0,
            "max": 0.0,
            "count": 0,
            "total_sum": 0.0,
            "percentiles": dict.fromkeys(GUIDELLM_PERCENTILES, 0.0),
        }
    distinct, counts = np.unique(v, return_counts=True)
    quantiles = np.percentile(v, list(GUIDELLM_PERCENTILES.values()))
    return {
        "mean": float(v.mean()),
        "median": float(np.median(v)),
        "mode": float(distinct[np.argmax(counts)]),
        "variance": float(v.var()),
        "std_dev": float(v.std()),
        "min": float(v.min()),
        "max": float(v.max()),
        "count": int(v.size),
        "total_sum": float(v.sum()),
        "percentiles": {k: float(q) for k, q in zip(GUIDELLM_PERCENTILES, quantiles, strict=True)},
    }


def _steps_at(t: FloatArray, at: FloatArray, weight: FloatArray) -> FloatArray:
    """``sum_r weight_r [at_r <= t]`` at each ``t``."""
    order = np.argsort(at)
    total = np.concatenate(([0.0], np.cumsum(weight[order])))
    out: FloatArray = total[np.searchsorted(at[order], t, side="right")]
    return out


def _ramps_at(t: FloatArray, start: FloatArray, end: FloatArray, slope: FloatArray) -> FloatArray:
    """``sum_r slope_r (clip(t, start_r, end_r) - start_r)`` at each ``t``: ramps from start to end,
    as ``(t - start)^+ - (t - end)^+``."""
    out = np.zeros(t.size)
    for edge, sign in ((start, 1.0), (end, -1.0)):
        out += sign * (t * _steps_at(t, edge, slope) - _steps_at(t, edge, slope * edge))
    return out


def _per_second(p: Prompts) -> dict[str, FloatArray]:
    """GuideLLM's rates over the run, one value per whole second from the first arrival (one bucket
    of the duration when it is shorter): completions, prompt tokens (counted at the first token),
    output tokens (the first at the first token, the others spread evenly to the last) and the
    time-mean of the requests in flight."""
    a, f, c = p.completed(p.arrival_s), p.completed(p.first_s), p.completed(p.done_s)
    n_in, n_out = p.completed(p.input_tokens), p.completed(p.output_tokens)
    duration = p.duration_s
    width = min(1.0, duration)
    buckets = max(1, math.floor(duration / width))
    edges = float(p.arrival_s.min()) + width * np.arange(buckets + 1, dtype=np.float64)
    spread = c > f
    decode = np.where(spread, (n_out - 1) / np.where(spread, c - f, 1.0), 0.0)
    output = (
        _steps_at(edges, f, np.ones(f.size))
        + _steps_at(edges, c, np.where(spread, 0.0, n_out - 1))
        + _ramps_at(edges, f, c, decode)
    )
    prompt = _steps_at(edges, f, n_in)
    return {
        "requests_per_second": np.diff(_steps_at(edges, c, np.ones(c.size))) / width,
        "prompt_tokens_per_second": np.diff(prompt) / width,
        "output_tokens_per_second": np.diff(output) / width,
        "tokens_per_second": np.diff(prompt + output) / width,
        "request_concurrency": np.diff(_ramps_at(edges, a, c, np.ones(a.size))) / width,
    }


#: GuideLLM's modality summaries and their fields (a text-only run states none of them).
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
GUIDELLM_MODALITIES = {"text": ("tokens", "words", "characters"), "image": ("tokens", "images", "pixels", "bytes"),
                       "video": ("tokens", "frames", "seconds", "bytes"),
                       "audio": ("tokens", "samples", "seconds", "bytes"),
                       "tool_call": ("tokens", "mixed_tokens", "count")}  # fmt: skip


def guidellm(
    requests: dict[str, FloatArray], summary: dict[str, Any], scenario: dict[str, Any], version: str
) -> dict[str, Any]:
    """GuideLLM's report of a run (module docstring)."""
    load = scenario.get("load") or {}
    strategy = _strategy(load)
    p = prompts_of(requests, float((scenario.get("run") or {}).get("warmup") or 0.0))
    n_in, n_out = p.completed(p.input_tokens), p.completed(p.output_tokens)
    e2e, tpot = p.e2e_s, p.tpot_s
    per_request = {
        "request_latency": e2e,
        "request_streaming_iterations_count": n_out,
        "prompt_token_count": n_in,
        "output_token_count": n_out,
        "total_token_count": n_in + n_out,
        "time_to_first_token_ms": p.ttft_s * MS_PER_S,
        "time_to_first_output_token_ms": p.ttft_s * MS_PER_S,
        "time_per_output_token_ms": e2e / n_out * MS_PER_S,
        "inter_token_latency_ms": tpot * MS_PER_S,
        "output_tokens_per_iteration": np.ones(n_out.size),
        "iter_tokens_per_iteration": np.ones(n_out.size),
    }
    in_flight = int(summary.get("requests_in_flight") or 0)
    totals = {
        "successful": int(p.ok.sum()),
        "errored": int((~p.ok).sum()),
        "incomplete": in_flight,
        "total": int(p.ok.size) + in_flight,
    }
    start, duration = float(p.arrival_s.min()), p.duration_s
    metrics: dict[str, Any] = {"request_totals": totals}
    metrics |= {name: {"successful": _guidellm_distribution(v)} for name, v in (per_request | _per_second(p)).items()}
    metrics |= {"time_to_last_round_trip_ms": {}, "avg_round_trip_time_ms": {}}  # websocket timings: none
    metrics |= {kind: dict.fromkeys(fields) for kind, fields in GUIDELLM_MODALITIES.items()}
    delays = (
        "queued_time_avg",
        "resolve_start_delay_avg",
        "resolve_targeted_start_delay_avg",
        "request_start_delay_avg",
        "request_targeted_start_delay_avg",
        "resolve_end_delay_avg",
        "finalized_delay_avg",
        "processed_delay_avg",
    )
    zero_delays = dict.fromkeys(delays, 0.0)
    benchmark = {
        "type_": "generative_benchmark",
        "args": {"strategy": strategy, "model": model_id_of(scenario)},  # GuideLLM 0.3's place of the load
        "config": {
            "run_id": "infersim",
            "run_index": 0,
            "strategy": strategy,
            "constraints": {},
            "profile": {},
            "requests": {},
            "backend": {"model": model_id_of(scenario)},
            "environment": {},
        },
        "scheduler_state": {},
        "scheduler_metrics": {
            "start_time": start,
            "request_start_time": start,
            "measure_start_time": start,
            "measure_end_time": start + duration,
            "request_end_time": start + duration,
            "end_time": start + duration,
            "requests_made": totals,
            "request_time_avg": float(e2e.mean()),
            "resolve_time_avg": float(e2e.mean()),
            **zero_delays,  # a simulated client sends on time: no scheduler delays
        },
        "metrics": metrics,
        "requests": {},
    }
    profile = {"kind": strategy["type_"], **{k: v for k, v in strategy.items() if k != "type_"}}
    config = {
        "backend": {"kind": "openai_http", "target": "infersim://simulated", "model": model_id_of(scenario)},
        "profile": profile,
        "data": [
            {
                "kind": "synthetic_text",
                "prompt_tokens": round(float(n_in.mean())),
                "output_tokens": round(float(n_out.mean())),
            }
        ],
    }
    return {"config": {"spec": config}, "benchmarks": [benchmark], "infersim_version": version}


def _aiperf_metric(unit: str, values: FloatArray) -> dict[str, Any]:
    v = _finite(values)
    if v.size == 0:
        return {"unit": unit, "count": 0}
    quantiles = np.percentile(v, AIPERF_PERCENTILES)
    return {
        "unit": unit,
        "avg": float(v.mean()),
        **{f"p{q:g}": float(x) for q, x in zip(AIPERF_PERCENTILES, quantiles, strict=True)},
        "min": float(v.min()),
        "max": float(v.max()),
        "std": float(v.std()),
        "count": int(v.size),
        "sum": float(v.sum()),
    }


def aiperf(
    requests: dict[str, FloatArray], summary: dict[str, Any], scenario: dict[str, Any], version: str
) -> dict[str, Any]:
    """AIPerf's profile export of a run (module docstring)."""
    load = scenario.get("load") or {}
    if load.get("kind") == "closed":
        loadgen: dict[str, Any] = {"concurrency": int(load["users"])}
    elif load.get("kind") == "open" and _arrival_process(load) == "poisson":
        loadgen = {"request_rate": float(load["arrivals"]["rate_per_s"])}
    else:
        raise _refuse(load, "AIPerf")
    p = prompts_of(requests, float((scenario.get("run") or {}).get("warmup") or 0.0))
    duration, completed = p.duration_s, int(p.ok.sum())
    n_in, n_out = p.completed(p.input_tokens), p.completed(p.output_tokens)
    tpot = p.tpot_s
    with np.errstate(divide="ignore"):
        per_user = np.where(tpot > 0, 1.0 / tpot, math.nan)
    model = model_id_of(scenario)
    ttst = p.ttst_s
    second = {} if ttst is None else {"time_to_second_token": _aiperf_metric("ms", ttst * MS_PER_S)}
    return {
        "schema_version": "1.2",
        "aiperf_version": None,
        "infersim_version": version,  # the 0.8 export's shape
        "request_throughput": {"unit": "requests/sec", "avg": completed / duration},
        "request_latency": _aiperf_metric("ms", p.e2e_s * MS_PER_S),
        "request_count": {"unit": "requests", "avg": float(completed)},
        "error_request_count": {"unit": "requests", "avg": float(p.ok.size - completed)},
        "time_to_first_token": _aiperf_metric("ms", p.ttft_s * MS_PER_S),
        **second,
        "inter_token_latency": _aiperf_metric("ms", tpot * MS_PER_S),
        "output_token_throughput": {"unit": "tokens/sec", "avg": float(n_out.sum()) / duration},
        "output_token_throughput_per_user": _aiperf_metric("tokens/sec/user", per_user),
        "output_sequence_length": _aiperf_metric("tokens", n_out),
        "input_sequence_length": _aiperf_metric("tokens", n_in),
        "min_request_timestamp": {"unit": "ns", "avg": float(p.arrival_s.min()) * NS_PER_S},
        "max_response_timestamp": {"unit": "ns", "avg": float(p.completed(p.done_s).max()) * NS_PER_S},
        "total_output_tokens": {"unit": "tokens", "avg": float(n_out.sum())},
        "total_isl": {"unit": "tokens", "avg": float(n_in.sum())},
        "total_osl": {"unit": "tokens", "avg": float(n_out.sum())},
        "benchmark_duration": {"unit": "sec", "avg": duration},
        "input_config": {"endpoint": {"model_names": [model]}, "loadgen": loadgen},
        "was_cancelled": False,
        "error_summary": [],
    }


#: The export formats (``infersim export --format``).
FORMATS = ("vllm-bench", "guidellm", "aiperf")
