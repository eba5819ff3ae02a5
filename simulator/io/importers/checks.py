"""Laws an imported run must obey, checked before its numbers are trusted.

*Plausibility at the door* (:func:`check_plausible`, every run of every format, before any row is
written). A run is refused, naming its file and field, when

- a statistic is negative (no time, length or speed is);
- the statistic a row carries (the mean, else the median) lies outside its metric's documented
  range (:data:`PLAUSIBLE`): zero, or so far out that a unit is plausibly a factor of 1000 off
  (seconds written where milliseconds go, or the reverse);
- the statistics of one metric are out of order (``min <= p50 <= p90 <= ... <= max``, the mean
  between min and max);
- a statistic of TTFT exceeds the same statistic of E2E: each request's first token comes no
  later than its last, so every quantile and the mean of TTFT are at most E2E's;
- a request's TTFT is negative or after its end, or its lengths are outside 1 to
  :data:`~simulator.config.distributions.MAX_REQUEST_TOKENS` tokens;
- the mean lengths or the load (rate, clients, requests, burstiness) lie outside :data:`LOAD_RANGES`.

*Prefill floor.* Every request's first token needs its prompt prefilled: at least
``2 * active parameters`` FLOP per uncached prompt token (one multiply-add per weight; attention
adds more). When all requests are sent at once (``offline``), the last first token therefore
comes no sooner than ``sum(prompt tokens) * 2 * active params / (chips * peak)``, with ``peak`` the
chip's highest dense peak at any precision (so the floor is a lower bound whatever precision the
server used). A run whose slowest first token beats it served prompts from a prefix cache (for
example one warmed by an earlier run with the same prompts): its TTFTs are not those of a cold
server, and a simulation of a cold cache will not match them. Under any load each request's TTFT
is at least its own prompt's floor, which is linear in its length, so the *mean* TTFT is at least
the floor of the mean prompt (:func:`floor_flags`).

*Decode roofline.* Without speculative decoding a sequence's every output token needs the active
weights read once: ``TPOT >= active params x bytes per weight / (chips x fastest weight-tier
bandwidth)`` at peak, for every request, hence for every statistic of TPOT, and per-user speed is
at most its inverse. Rows whose figures beat either floor are kept, flagged with the reason
(:func:`floor_flags`; the ``flag`` column of the measurement table).
"""

from __future__ import annotations

import itertools

import numpy as np

from simulator.analytic.architecture import FLOPS_PER_MAC, active_params
from simulator.analytic.precision import BYTES_PER_ELEMENT
from simulator.config.base import Precision
from simulator.config.distributions import MAX_REQUEST_TOKENS
from simulator.config.hardware import HardwareProfile
from simulator.config.model import ModelSpec
from simulator.errors import ConfigError
from simulator.io.importers.common import STAT_NAMES, ImportedRun, Load, PerRequest, Stats

#: The range of the statistic a row carries (mean, else median), per metric, in SI units, and why.
#: Each spans the shared real runs (TTFT 0.019 to 187 s, TPOT 3.5 to 170 ms, E2E 0.48 to 381 s,
#: 59 to 22,534 output tok/s) by a factor of ten or more; a value outside is a wrong unit, not a server.
PLAUSIBLE: dict[str, tuple[float, float, str]] = {
    "ttft_s": (1e-3, 3600.0, "no prompt is prefilled and streamed back within a millisecond; an hour at most"),
    "e2e_s": (1e-3, 3600.0, "a request takes a millisecond at least and an hour at most"),
    "tpot_s": (1e-5, 60.0, "10 us (100,000 tok/s per user; the fastest decoders reach ~3,000) to a minute"),
    "itl_s": (1e-5, 60.0, "10 us (100,000 tok/s per user; the fastest decoders reach ~3,000) to a minute"),
    "normalized_tpot_s": (1e-5, 60.0, "10 us to a minute per output token"),
    "output_tok_s": (1e-3, 1e8, "a token per 1000 s to 100 million tokens per second"),
    "per_user_output_tok_s": (1e-2, 1e5, "up to 100,000 tok/s per user"),
}
#: The load a run states: rate (requests/s), clients, requests, gamma CV^2.
LOAD_RANGES: dict[str, tuple[float, float]] = {
    "rate_per_s": (1e-6, 1e6),
    "concurrency": (1, 10**7),
    "requests": (1, 10**9),
    "cv2": (1e-6, 1e6),
}
#: Order the statistics of a distribution keep (the mean sits between min and max).
_ORDERED = ("min", "p50", "p90", "p95", "p99", "p99.9", "max")
#: Slack of the order and TTFT <= E2E checks (files round to 6 to 17 digits).
_REL_TOLERANCE = 1e-6


def prefill_floor_s(model: ModelSpec, hardware: HardwareProfile, chips: int, prompt_tokens: float) -> float:
    """Seconds the prompts' matmuls need at least on ``chips`` chips at their highest peak (docstring)."""
    peak_flops = max(p.value for p in hardware.compute.peak.values())
    return prompt_tokens * FLOPS_PER_MAC * active_params(model) / (chips * peak_flops)


def decode_floor_s(model: ModelSpec, hardware: HardwareProfile, chips: int, weights: Precision) -> float:
    """Seconds per output token at least: the active weights read once at the fastest weight tier's peak."""
    bandwidth = max(tier.bandwidth.value for tier in hardware.weight_tiers)
    return active_params(model) * BYTES_PER_ELEMENT[weights] / (chips * bandwidth)


def floor_flags(
    run: ImportedRun,
    model: ModelSpec,
    hardware: HardwareProfile,
    chips: int | None,
    weights: Precision,
    spec_decoding: str,
) -> tuple[str, ...]:
    """Why a run's TTFT or decode speed beats the deployment's physical floors (module docstring);
    empty when they do not, or when the chips are not known."""
    if chips is None:
        return ()
    flags = _prefill_flags(run, model, hardware, chips)
    if spec_decoding == "none":
        flags += _decode_flags(run, model, hardware, chips, weights)
    return tuple(flags)


def _prefill_flags(run: ImportedRun, model: ModelSpec, hardware: HardwareProfile, chips: int) -> list[str]:
    """Why the run's mean TTFT beats :func:`prefill_floor_s` of its mean prompt (none if it does not)."""
    ttft = run.metrics.get("ttft_s")
    if ttft is None or "mean" not in ttft.values:
        return []
    floor_s = prefill_floor_s(model, hardware, chips, run.input_tokens_mean)
    if not ttft.values["mean"] < floor_s:
        return []
    return [
        f"mean TTFT {ttft.values['mean']:.4g} s is below the prefill floor {floor_s:.4g} s of "
        f"{run.input_tokens_mean:.0f} prompt tokens on {chips} x {hardware.id} at peak "
        "(prefix-cache hits, or a unit off)"
    ]


def _decode_flags(
    run: ImportedRun, model: ModelSpec, hardware: HardwareProfile, chips: int, weights: Precision
) -> list[str]:
    """Why the run's TPOT or per-user speed beats the decode roofline :func:`decode_floor_s` (none if
    neither does)."""
    floor_s = decode_floor_s(model, hardware, chips, weights)
    flags = []
    tpot = run.metrics.get("tpot_s")
    if tpot is not None and {"mean", "p50"} & tpot.values.keys() and tpot.central[1] < floor_s:
        flags.append(
            f"TPOT {tpot.central[1]:.4g} s is below the decode roofline {floor_s:.4g} s (active "
            f"weights read once per token on {chips} x {hardware.id} at peak)"
        )
    speed = run.metrics.get("per_user_output_tok_s")
    if speed is not None and {"mean", "p50"} & speed.values.keys() and speed.central[1] > 1.0 / floor_s:
        flags.append(
            f"per-user speed {speed.central[1]:.4g} tok/s is above the decode roofline "
            f"{1.0 / floor_s:.4g} tok/s on {chips} x {hardware.id}"
        )
    return flags


def cache_warning(run: ImportedRun, model: ModelSpec, hardware: HardwareProfile, chips: int | None) -> str:
    """Why an offline run's TTFTs beat the prefill floor ('' when they do not, or it cannot be checked)."""
    per = run.per_request
    if per is None or run.load is None or run.load.kind != "offline" or chips is None:
        return ""
    floor_s = prefill_floor_s(model, hardware, chips, float(per.input_tokens.sum()))
    slowest_s = float(per.ttft_s.max())
    if slowest_s >= floor_s:
        return ""
    return (
        f"{run.source}: every first token came within {slowest_s:.3g} s, but prefilling its "
        f"{int(per.input_tokens.sum()):,} prompt tokens on {chips} x {hardware.id} takes at least {floor_s:.3g} s "
        "at peak: the prompts were served from a prefix cache (an earlier run with the same prompts?), so "
        "its TTFTs are not a cold server's"
    )


def _stats_plausible(run: ImportedRun, metric: str, stats: Stats) -> None:
    """Refuse a statistics block that is negative, out of order, or outside ``metric``'s plausible range."""
    where = f"{run.source}: {stats.field}"
    _stats_nonnegative(where, stats)
    _stats_ordered(where, stats)
    if metric not in PLAUSIBLE or not {"mean", "p50"} & stats.values.keys():
        return
    _stats_in_range(where, metric, stats)


def _stats_nonnegative(where: str, stats: Stats) -> None:
    """Refuse a negative statistic: a time, length or speed never is."""
    for name in STAT_NAMES:
        value = stats.values.get(name)
        if value is not None and not value >= 0:
            raise ConfigError(f"{where} ({name}): {value:g} is negative; a time, length or speed never is")


def _stats_ordered(where: str, stats: Stats) -> None:
    """Refuse statistics of one distribution out of order (min <= percentiles <= max), to
    :data:`_REL_TOLERANCE`, or a mean outside min and max (:func:`_mean_within`)."""
    ordered = [(name, stats.values[name]) for name in _ORDERED if name in stats.values]
    for (low_name, low), (high_name, high) in itertools.pairwise(ordered):
        if low > high * (1 + _REL_TOLERANCE):
            raise ConfigError(
                f"{where}: {low_name} {low:g} exceeds {high_name} {high:g}; statistics of one "
                "distribution are ordered (a damaged file, or mixed units)"
            )
    _mean_within(where, stats)


def _mean_within(where: str, stats: Stats) -> None:
    """Refuse a mean below the min or above the max, to :data:`_REL_TOLERANCE`."""
    mean, least, most = (stats.values.get(name) for name in ("mean", "min", "max"))
    if mean is not None and least is not None and mean < least * (1 - _REL_TOLERANCE):
        raise ConfigError(f"{where}: mean {mean:g} is below min {least:g}")
    if mean is not None and most is not None and mean > most * (1 + _REL_TOLERANCE):
        raise ConfigError(f"{where}: mean {mean:g} is above max {most:g}")


def _stats_in_range(where: str, metric: str, stats: Stats) -> None:
    """Refuse a central statistic outside :data:`PLAUSIBLE`'s range for ``metric``."""
    statistic, value = stats.central
    low, high, why = PLAUSIBLE[metric]
    if not low <= value <= high:
        unit = "tok/s" if metric.endswith("tok_s") else "s"
        hint = " (a unit 1000x off?)" if value > 0 else ""
        raise ConfigError(
            f"{where} ({statistic}): {value:.6g} {unit} is outside the plausible range of {metric}, "
            f"{low:g} to {high:g} {unit} ({why}){hint}"
        )


def _ttft_before_e2e(run: ImportedRun) -> None:
    ttft, e2e = run.metrics.get("ttft_s"), run.metrics.get("e2e_s")
    if ttft is None or e2e is None:
        return
    for name in ("mean", *_ORDERED):
        first, last = ttft.values.get(name), e2e.values.get(name)
        if first is not None and last is not None and first > last * (1 + _REL_TOLERANCE):
            raise ConfigError(
                f"{run.source}: {ttft.field} ({name}) {first:.6g} s exceeds {e2e.field} ({name}) "
                f"{last:.6g} s: a request's first token cannot come after its end"
            )


def _per_request_plausible(run: ImportedRun, per: PerRequest) -> None:
    for name, tokens in (("input", per.input_tokens), ("output", per.output_tokens)):
        outside = np.flatnonzero((tokens < 1) | (tokens > MAX_REQUEST_TOKENS))
        if outside.size:
            raise ConfigError(
                f"{run.source}: request {outside[0]}: {name} length {tokens[outside[0]]} outside 1 to "
                f"{MAX_REQUEST_TOKENS:,} tokens"
            )
    measured = ~np.isnan(per.ttft_s)
    bad = np.flatnonzero(measured & ~((per.ttft_s >= 0) & (per.ttft_s <= 3600.0)))
    if bad.size:
        raise ConfigError(f"{run.source}: request {bad[0]}: TTFT {per.ttft_s[bad[0]]:g} s is outside 0 to 3600 s")
    late = np.flatnonzero(measured & ~(per.e2e_s >= per.ttft_s))
    if late.size:
        i = late[0]
        raise ConfigError(
            f"{run.source}: request {i}: TTFT {per.ttft_s[i]:g} s exceeds its end-to-end latency "
            f"{per.e2e_s[i]:g} s (or a gap is negative or missing)"
        )


#: The file's fields each load figure comes from, by format (for the messages).
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
LOAD_FIELDS: dict[str, dict[str, str]] = {
    "vllm-bench": {"rate_per_s": "request_rate", "concurrency": "max_concurrency", "requests": "num_prompts",
                   "cv2": "burstiness (CV^2 = 1 / burstiness)"},
    "sglang-bench": {"rate_per_s": "request_rate", "concurrency": "max_concurrency", "requests": "completed"},
    "inference-perf": {"rate_per_s": "load_summary.achieved_rate", "requests": "load_summary.count"},
    "aiperf": {"rate_per_s": "input_config.loadgen.request_rate", "concurrency": "input_config.loadgen.concurrency",
               "requests": "request_count.avg"},
    "guidellm": {"rate_per_s": "args.strategy.rate", "concurrency": "args.strategy.streams",
                 "requests": "metrics.request_latency.successful.count"},
}  # fmt: skip


def _load_plausible(run: ImportedRun, load: Load) -> None:
    for name, (low, high) in LOAD_RANGES.items():
        value = getattr(load, name)
        if value is not None and not low <= value <= high:
            field = LOAD_FIELDS.get(run.format, {}).get(name, name)
            raise ConfigError(
                f"{run.source}: {field}: the load's {name} {value:g} is outside {low:g} to {high:g} ({load.kind} load)"
            )


def check_plausible(run: ImportedRun) -> None:
    """Refuse a run whose figures no server produces (module docstring); the message names the
    file (and line or run) and the field."""
    for name, value in (
        ("mean input tokens per request", run.input_tokens_mean),
        ("mean output tokens per request", run.output_tokens_mean),
    ):
        if not 1 <= value <= MAX_REQUEST_TOKENS:
            raise ConfigError(
                f"{run.source}: {name} {value:g} (the file's token total over its completed "
                f"requests, or its prompt / output length mean) is outside 1 to "
                f"{MAX_REQUEST_TOKENS:,}"
            )
    for metric, stats in run.metrics.items():
        _stats_plausible(run, metric, stats)
    _ttft_before_e2e(run)
    if run.per_request is not None:
        _per_request_plausible(run, run.per_request)
    if run.load is not None:
        _load_plausible(run, run.load)
