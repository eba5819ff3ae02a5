"""What every importer returns: runs with their load, statistics and per-request data, in SI units.

A benchmark client's result file holds one run (vLLM, inference-perf, AIPerf) or several
(SGLang's JSONL, one run a line; GuideLLM's ``benchmarks`` list). Each run becomes an
:class:`ImportedRun`:

- ``metrics``: infersim metric name -> :class:`Stats` (seconds, tokens per second), each with
  the file's field it came from. The names are those of :mod:`simulator.results.metrics`, so
  a measured and a simulated number mean the same thing (see :data:`METRIC_NAMES`).
- ``load``: how the client sent the requests, when the engine can send them the same way;
  otherwise ``None`` and ``refusal`` says why (a run whose load cannot be reproduced has no
  measurement rows).
- ``per_request``: the requests as the client measured them, where the file carries them (the
  source of a replay trace and of the per-request comparison).
- ``flags``: laws the run's figures break that do not make them unusable (a throughput that
  disagrees with the run's counts and duration; TTFTs below the deployment's prefill floor):
  its rows are kept and carry the flag (:mod:`simulator.io.importers.checks`).

Nothing here reads a catalog or writes a file: deciding hardware and model is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from simulator.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
MS_PER_S = 1000.0
NS_PER_S = 1e9

#: Statistics a run may state, in the order written (peers' names mapped onto these).
STAT_NAMES = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max")

#: infersim metric names (definitions in :mod:`simulator.results.metrics`) and what each peer calls them.
#: The known collisions: GuideLLM's and AIPerf's "inter-token latency" is (e2e - ttft) / (n - 1) per
#: request, vLLM's TPOT (infersim ``tpot_s``), not vLLM's ITL (every gap pooled, infersim ``itl_s``);
#: GuideLLM's ``time_per_output_token`` and inference-perf's ``normalized_time_per_output_token`` are
#: e2e / n (infersim ``normalized_tpot_s``), while inference-perf's ``time_per_output_token`` is
#: vLLM's TPOT and its ``inter_token_latency`` the pooled gaps.
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
METRIC_NAMES: dict[str, dict[str, str]] = {
    "ttft_s": {"vllm-bench": "ttft", "sglang-bench": "ttft", "inference-perf": "time_to_first_token",
               "aiperf": "time_to_first_token", "guidellm": "time_to_first_token_ms"},
    "tpot_s": {"vllm-bench": "tpot", "inference-perf": "time_per_output_token",
               "aiperf": "inter_token_latency", "guidellm": "inter_token_latency_ms"},
    "itl_s": {"vllm-bench": "itl", "sglang-bench": "itl", "inference-perf": "inter_token_latency"},
    "normalized_tpot_s": {"inference-perf": "normalized_time_per_output_token",
                          "guidellm": "time_per_output_token_ms"},
    "e2e_s": {"vllm-bench": "e2el", "sglang-bench": "e2e_latency", "inference-perf": "request_latency",
              "aiperf": "request_latency", "guidellm": "request_latency"},
    "output_tok_s": {"vllm-bench": "output_throughput", "sglang-bench": "output_throughput",
                     "inference-perf": "throughput.output_tokens_per_sec", "aiperf": "output_token_throughput",
                     "guidellm": "output_tokens_per_second"},
    "per_user_output_tok_s": {"aiperf": "output_token_throughput_per_user"},
}  # fmt: skip

LoadKind = Literal["closed", "poisson", "gamma", "constant", "offline"]


@dataclass(frozen=True)
class Stats:
    """One metric's statistics (SI units), keyed by :data:`STAT_NAMES`, and the field they came from."""

    values: Mapping[str, float]
    field: str

    @property
    def central(self) -> tuple[str, float]:
        """The statistic a measurement row carries: the mean, else the median."""
        for name in ("mean", "p50"):
            if name in self.values:
                return name, self.values[name]
        raise ConfigError(f"{self.field}: neither a mean nor a median")


@dataclass(frozen=True)
class Load:
    """How the client sent the requests, in the measurement table's words.

    ``closed``: ``concurrency`` clients, each sending its next request when the last one ends;
    ``poisson`` / ``gamma`` / ``constant``: ``requests`` arriving at ``rate_per_s`` with
    exponential, gamma (squared coefficient of variation ``cv2``) or equal gaps; ``offline``:
    ``requests`` all sent at t = 0.
    """

    kind: LoadKind
    requests: int | None = None
    rate_per_s: float | None = None
    concurrency: int | None = None
    cv2: float | None = None

    def words(self) -> str:
        if self.kind == "closed":
            return f"closed loop of {self.concurrency} clients"
        if self.kind == "offline":
            return f"{self.requests} requests sent at t = 0"
        shape = {"poisson": "Poisson", "gamma": f"gamma (CV^2 {self.cv2})", "constant": "evenly spaced"}
        return f"{self.requests} requests, {shape[self.kind]} arrivals at {self.rate_per_s:g} req/s"


@dataclass(frozen=True)
class PerRequest:
    """Successful requests in the order the client sent them (seconds; NaN where not measured).

    ``arrival_s`` is the send time relative to the first request when the file records it,
    else ``None`` (the replay draws the arrivals from the run's load).
    """

    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    ttft_s: FloatArray
    e2e_s: FloatArray
    arrival_s: FloatArray | None = None

    @property
    def tpot_s(self) -> FloatArray:
        """(e2e - ttft) / (n - 1) per request; NaN for one-token answers (no gap exists)."""
        gaps = self.output_tokens.astype(float) - 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gaps > 0, (self.e2e_s - self.ttft_s) / gaps, math.nan)


@dataclass(frozen=True)
class ImportedRun:
    source: str  # the file, and the line or index of the run within it
    format: str
    model_name: str | None  # the model as the file names it (a repo id or a path)
    input_tokens_mean: float
    output_tokens_mean: float
    metrics: dict[str, Stats]
    load: Load | None
    refusal: str = ""  # why the load cannot be reproduced ('' when it can)
    per_request: PerRequest | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Why the run's figures break a law (its rows are kept, and carry the flag; '' entries never).
    flags: tuple[str, ...] = field(default_factory=tuple)


# -- reading fields with their path -------------------------------------------------------------
def get(data: Mapping[str, object], path: str, where: str, expected: str = "a value") -> object:
    """The value at a dotted ``path``, or a ConfigError naming the file, the path and what was expected."""
    if path in data:  # a key holding dots itself (``p99.9``)
        return data[path]
    node: object = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ConfigError(f"{where}: {path}: missing (expected {expected})")
        node = node[part]
    return node


def optional(data: Mapping[str, object], path: str) -> object:
    node: object = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def num(data: Mapping[str, object], path: str, where: str, minimum: float | None = None) -> float:
    value = get(data, path, where, "a number")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {path}: expected a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: {path}: expected a number >= {minimum:g}, got {value!r}")
    return float(value)


#: Largest count a result file may state: 2**53, the largest integer a JSON number (a double) holds exactly.
MAX_COUNT = 2**53


def whole(data: Mapping[str, object], path: str, where: str, minimum: int = 0) -> int:
    value = num(data, path, where, minimum)
    if value != int(value) or value > MAX_COUNT:
        raise ConfigError(f"{where}: {path}: expected an integer of at most 2**53, got {value!r}")
    return int(value)


def report_object(data: object, where: str, what: str) -> dict[str, object]:
    """The top-level JSON object of a result file (``what`` names the format in the error)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object ({what})")
    return data


def succeeded(data: Mapping[str, object], path: str, where: str) -> int:
    """The count of successful requests at ``path``: at least one, or there is nothing to import."""
    count = whole(data, path, where, minimum=0)
    if count == 0:
        raise ConfigError(f"{where}: {path}: 0 requests succeeded, nothing to import")
    return count


def stats_of(values: FloatArray) -> dict[str, float]:
    """The statistics of :data:`STAT_NAMES` of a sample (NaNs dropped; std with ddof 0, as vLLM's numpy)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"count": 0.0}
    quantiles = np.percentile(finite, [50, 90, 95, 99, 99.9])
    return {
        "count": float(finite.size),
        "mean": float(finite.mean()),
        "std": float(finite.std()),
        "min": float(finite.min()),
        "p50": float(quantiles[0]),
        "p90": float(quantiles[1]),
        "p95": float(quantiles[2]),
        "p99": float(quantiles[3]),
        "p99.9": float(quantiles[4]),
        "max": float(finite.max()),
    }


def model_from_path(name: str) -> str:
    """A repo id from a Hugging Face cache path (``/models/models--openai--gpt-oss-120b/snapshots/..``)."""
    for part in name.split("/"):
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/", 1)
    return name.rstrip("/")


#: Relative disagreement between a stated throughput and tokens / duration beyond which a run is flagged.
THROUGHPUT_TOLERANCE = 0.02


def throughput_flag(data: Mapping[str, object], where: str) -> tuple[str, ...]:
    """A flag when ``output_throughput`` is not ``total_output_tokens / duration`` (the definition
    vLLM's and SGLang's clients write it by; both are in the file). No flag when a field is absent."""
    if not all(
        isinstance(data.get(k), int | float) and not isinstance(data.get(k), bool)
        for k in ("output_throughput", "total_output_tokens", "duration")
    ):
        return ()
    duration = num(data, "duration", where)
    if not duration > 0:
        raise ConfigError(f"{where}: duration: expected a positive number of seconds, got {duration:g}")
    stated = num(data, "output_throughput", where)
    counted = num(data, "total_output_tokens", where) / duration
    if abs(stated - counted) <= THROUGHPUT_TOLERANCE * counted:
        return ()
    return (
        f"output_throughput {stated:.6g} tok/s disagrees with total_output_tokens / duration = {counted:.6g} tok/s",
    )
