"""The measured requests of a run, as the metrics ask for them: from every row, or digested.

A run that kept every request row (:data:`~simulator.records.store.REQUEST_ROWS_KEPT` or fewer) is
read row by row (:class:`KeptRequests`): percentiles are exact order statistics. A run whose
rows streamed is read once, chunk by chunk, into a :class:`RequestDigest`:

- counts, token sums and SLO attainment per (class, replica) are exact;
- each latency's count, mean, standard deviation, minimum and maximum are exact (the deviation
  merged chunk by chunk with Chan's pairwise update); its percentiles come from a
  :class:`LogHistogram` of :data:`BINS_PER_DECADE` log-spaced bins per decade (zero kept apart),
  each order statistic taken at its bin's geometric midpoint (clamped to the exact minimum and
  maximum) and interpolated as :func:`numpy.percentile` does, so a binned percentile is within
  a factor ``sqrt(BIN_RATIO)`` (0.58 %) of the exact one;
- class cost shares read seat-seconds off each replica's batch level, exact unless that level
  was compacted (:mod:`simulator.records.series`), then at the level's bucket resolution.

The metric definitions themselves are those of :mod:`simulator.results.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simulator.config.scenario import SLOSpec
from simulator.records.store import (
    DROPPED_OVER_BUDGET,
    DROPPED_REPLICA_FAILED,
    DROPPED_THROTTLED,
    DROPPED_TOO_LONG,
    FloatArray,
    LevelMonitor,
    RunRecords,
)
from simulator.results.summary import DistributionStats

PERCENTILES = (50, 90, 95, 99)
#: Every percentile a summary states, by its key (``p99_9`` is the 99.9th: a dot would split a dotted path).
QUANTILES = {**{f"p{p}": float(p) for p in PERCENTILES}, "p99_9": 99.9}
LATENCIES = ("ttft_s", "ttst_s", "tpot_s", "e2e_s", "per_user_output_tok_s", "normalized_tpot_s", "queueing_delay_s")

#: Why a latency statistic is undefined, written beside it in summary.json.
NO_REQUESTS = "no request completed in the measurement window"
ONE_TOKEN_ANSWERS = "every measured request has a 1-token answer, so there is no inter-token interval"

#: Latency histogram bins per decade, from 1e-9 to 1e9 (seconds, or tokens/s).
BINS_PER_DECADE = 200
BIN_EDGES = np.logspace(-9, 9, 18 * BINS_PER_DECADE + 1)
BIN_RATIO = 10.0 ** (1.0 / BINS_PER_DECADE)
BIN_WIDTH = (
    f"{BINS_PER_DECADE} log-spaced bins per decade (each {BIN_RATIO - 1:.2%} wide); a percentile is within "
    f"{math.sqrt(BIN_RATIO) - 1:.2%} of the exact one"
)
Mask = npt.NDArray[np.bool_]


def measured_rows(r: dict[str, FloatArray], warmup_s: float) -> Mask:
    """Completed requests that arrived at or after the warm-up."""
    measured: Mask = (r["dropped"] == 0) & np.isfinite(r["done_s"]) & (r["arrival_s"] >= warmup_s)
    return measured


def row_metrics(r: dict[str, FloatArray], measured: Mask) -> dict[str, FloatArray]:
    """Each measured row's latencies and token counts (definitions: :mod:`simulator.results.metrics`)."""
    a, s, f, c, n = (r[k][measured] for k in ("arrival_s", "admitted_s", "first_token_s", "done_s", "output_tokens"))
    second = r["second_token_s"][measured]
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n > 1, (c - f) / (n - 1), np.nan)
        per_user = np.where((n > 1) & (c > f), (n - 1) / (c - f), np.nan)
    return {
        "ttft_s": f - a,
        "ttst_s": second - f,
        "e2e_s": c - a,
        "tpot_s": tpot,
        "per_user_output_tok_s": per_user,
        "normalized_tpot_s": (c - a) / n,
        "queueing_delay_s": s - a,
        "input_tokens": r["input_tokens"][measured],
        "output_tokens": n,
    }


def meets(m: dict[str, FloatArray], slo: SLOSpec) -> Mask:
    """Which rows of :func:`row_metrics` meet every bound of ``slo``."""
    ok = np.ones(m["ttft_s"].size, dtype=bool)
    if slo.ttft is not None:
        ok &= m["ttft_s"] <= slo.ttft
    if slo.tpot is not None:
        ok &= ~(m["tpot_s"] > slo.tpot)
    return ok


def empty_stats(reason: str) -> DistributionStats:
    keys = ["mean", "std", "min", "max", *QUANTILES]
    return DistributionStats(count=0, **dict.fromkeys(keys, math.nan), undefined=dict.fromkeys(keys, reason))


def distribution_stats(values: FloatArray, empty_reason: str = NO_REQUESTS) -> DistributionStats:
    """Count, mean, standard deviation (ddof 0, as vLLM's ``np.std``), min, max and the
    :data:`QUANTILES` (linear, :func:`numpy.percentile`) of the finite values; NaN, with the
    reason, when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return empty_stats(empty_reason)
    quantiles = np.percentile(finite, list(QUANTILES.values()))
    return DistributionStats(
        count=int(finite.size),
        mean=float(finite.mean()),
        std=float(finite.std()),
        min=float(finite.min()),
        max=float(finite.max()),
        **{key: float(v) for key, v in zip(QUANTILES, quantiles, strict=True)},
    )


def empty_reason(name: str, completed: bool) -> str:
    per_token = name in ("ttst_s", "tpot_s", "per_user_output_tok_s")
    return ONE_TOKEN_ANSWERS if completed and per_token else NO_REQUESTS


class LogHistogram:
    """Finite values in :data:`BIN_EDGES` bins (values <= 0 counted apart), with exact count, sum, min, max."""

    def __init__(self) -> None:
        self.counts = np.zeros(BIN_EDGES.size - 1)
        self.nonpositive = 0
        self.count = 0
        self.total = 0.0
        self.squares = 0.0  # sum of squared deviations from the mean (M2)
        self.low, self.high = math.inf, -math.inf

    def add(self, values: FloatArray) -> None:
        finite = values[np.isfinite(values)]
        if not finite.size:
            return
        self._merge_moments(finite.size, float(finite.sum()), float(((finite - finite.mean()) ** 2).sum()))
        self.low, self.high = min(self.low, float(finite.min())), max(self.high, float(finite.max()))
        positive = finite[finite > 0]
        self.nonpositive += finite.size - positive.size
        index = np.clip(np.searchsorted(BIN_EDGES, positive, side="right") - 1, 0, self.counts.size - 1)
        self.counts += np.bincount(index, minlength=self.counts.size)

    def merge(self, other: LogHistogram) -> None:
        self.counts += other.counts
        self.nonpositive += other.nonpositive
        self._merge_moments(other.count, other.total, other.squares)
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)

    def _merge_moments(self, count: int, total: float, squares: float) -> None:
        """Chan et al.'s pairwise update: ``M2 = M2_a + M2_b + delta^2 n_a n_b / n`` (delta: the means' gap)."""
        if count == 0:
            return
        if self.count:
            delta = total / count - self.total / self.count
            squares += delta * delta * self.count * count / (self.count + count)
        self.count += count
        self.total += total
        self.squares += squares

    def _order_statistic(self, rank: FloatArray) -> FloatArray:
        """Estimates of the values of 0-based ranks: their bins' midpoints, clamped to [min, max]."""
        cumulative = np.cumsum(np.concatenate(([self.nonpositive], self.counts)))
        where = np.searchsorted(cumulative, rank, side="right")
        mids = np.concatenate(([min(self.low, 0.0)], np.sqrt(BIN_EDGES[:-1] * BIN_EDGES[1:])))
        return np.clip(mids[where], self.low, self.high)

    def stats(self, reason: str) -> DistributionStats:
        """Count, mean, std, min and max (exact), the :data:`QUANTILES` as :func:`numpy.percentile`
        would give from binned values."""
        if self.count == 0:
            return empty_stats(reason)
        position = (self.count - 1) * np.array(list(QUANTILES.values())) / 100.0
        below = np.floor(position)
        lower, upper = self._order_statistic(below), self._order_statistic(np.minimum(below + 1, self.count - 1))
        quantiles = lower + (position - below) * (upper - lower)
        return DistributionStats(
            count=self.count,
            mean=self.total / self.count,
            std=math.sqrt(self.squares / self.count),
            min=self.low,
            max=self.high,
            **{key: float(v) for key, v in zip(QUANTILES, quantiles, strict=True)},
        )


def seat_clock(level: LevelMonitor, t_end: float) -> tuple[FloatArray, FloatArray]:
    """Breakpoints and the cumulative ``integral of 1 / B(t) dt`` (0 where the batch is empty)."""
    times = np.append(np.frombuffer(level.times, dtype=np.float64), max(t_end, level.times[-1]))
    values = np.frombuffer(level.values, dtype=np.float64)
    with np.errstate(divide="ignore"):
        rate = np.where(values > 0, 1.0 / np.maximum(values, 1.0), 0.0)
    return times, np.concatenate(([0.0], np.cumsum(rate * np.diff(times))))


def seat_seconds(r: dict[str, FloatArray], batch: Sequence[LevelMonitor], t0: float, t1: float) -> FloatArray:
    """Each row's seat-seconds on its replica inside ``[t0, t1]`` (0 for dropped ones;
    :mod:`simulator.results.attribution` states the rule)."""
    out = np.zeros(r["replica"].size)
    served = (r["dropped"] == 0) & np.isfinite(r["admitted_s"])
    for replica, level in enumerate(batch):
        mine = served & (r["replica"] == replica)
        if not mine.any():
            continue
        times, clock = seat_clock(level, t1)
        start = np.clip(r["admitted_s"][mine], t0, t1)
        end = np.clip(np.where(np.isfinite(r["done_s"][mine]), r["done_s"][mine], t1), t0, t1)
        out[mine] = np.maximum(np.interp(end, times, clock) - np.interp(start, times, clock), 0.0)
    return out


def window_output_tokens(r: dict[str, FloatArray], t0: float, t1: float) -> FloatArray:
    """Each row's output tokens inside ``[t0, t1]``, spread evenly over ``[first token, done]``."""
    f, c, n = r["first_token_s"], r["done_s"], r["output_tokens"]
    done = (r["dropped"] == 0) & np.isfinite(c) & np.isfinite(f)
    span = np.where(done, c - f, 0.0)
    overlap = np.clip(np.minimum(c, t1) - np.maximum(f, t0), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(span > 0, overlap / span, ((f >= t0) & (f <= t1)).astype(float))
    return np.where(done, n * fraction, 0.0)


class KeptRequests:
    """Every request row in memory: each figure computed from the rows themselves (exact)."""

    exact = True

    def __init__(self, records: RunRecords) -> None:
        self.records = records
        self.r = records.requests
        self.measured = measured_rows(self.r, records.warmup_s)
        self._seats: FloatArray | None = None

    def metrics(self, klass: int | None = None) -> dict[str, FloatArray]:
        measured = self.measured if klass is None else self.measured & (self.r["class"] == klass)
        return row_metrics(self.r, measured)

    def latency_stats(self, klass: int | None = None) -> dict[str, DistributionStats]:
        m = self.metrics(klass)
        completed = m["ttft_s"].size > 0
        return {name: distribution_stats(m[name], empty_reason(name, completed)) for name in LATENCIES}

    def completed(self, klass: int | None = None) -> int:
        return int(self.metrics(klass)["ttft_s"].size)

    def meeting(self, slo: SLOSpec, klass: int | None = None) -> int:
        return int(meets(self.metrics(klass), slo).sum())

    def dropped(self, code: int) -> int:
        return int((self.r["dropped"] == code).sum())

    def preemptions(self) -> int:
        return int(self.r["preemptions"].sum())

    def prompt_tokens(self) -> tuple[float, float]:
        """(cached, all) prompt tokens of the measured requests."""
        r, measured = self.r, self.measured
        return float(r["cached_tokens"][measured].sum()), float(r["input_tokens"][measured].sum())

    def _on(self, replicas: list[int], klass: int | None) -> Mask:
        on: Mask = np.isin(self.r["replica"], replicas)
        return on if klass is None else on & (self.r["class"].astype(int) == klass)

    def served(self, replicas: list[int]) -> int:
        return int((self.measured & np.isin(self.r["replica"], replicas)).sum())

    def billed(self, replicas: list[int], klass: int | None = None) -> tuple[float, float]:
        """(input, output) tokens of the measured requests served by ``replicas`` (of class ``klass``)."""
        billed = self.measured & self._on(replicas, klass)
        return self.r["input_tokens"][billed].sum(), float(self.r["output_tokens"][billed].sum())

    def seats(self, replicas: list[int], klass: int) -> float:
        if self._seats is None:
            rec = self.records
            self._seats = seat_seconds(self.r, rec.batch, rec.warmup_s, rec.end_s)
        return float(self._seats[self._on(replicas, klass)].sum())

    def window_tokens(self, replicas: list[int], klass: int) -> float:
        tokens = window_output_tokens(self.r, self.records.warmup_s, self.records.end_s)
        return float(tokens[self._on(replicas, klass)].sum())


class RequestDigest:
    """Streamed request rows, read once into exact sums and counts per (class, replica) and a
    :class:`LogHistogram` per latency and class (the module states what is exact)."""

    exact = False

    def __init__(self, records: RunRecords, slos: Sequence[SLOSpec], classes: int) -> None:
        self.slos = list(slos)
        size = (classes, len(records.totals))
        self.latency = [{name: LogHistogram() for name in LATENCIES} for _ in range(classes)]
        self.measured, self.inputs, self.outputs, self.cached = (np.zeros(size) for _ in range(4))
        self.seat_s, self.tokens = np.zeros(size), np.zeros(size)
        self.ok = np.zeros((len(self.slos), *size))
        self.drops = {DROPPED_TOO_LONG: 0, DROPPED_OVER_BUDGET: 0, DROPPED_REPLICA_FAILED: 0, DROPPED_THROTTLED: 0}
        self.preempted = 0
        t0, t1 = records.warmup_s, records.end_s
        for r in records.request_chunks():
            self._add(r, records, t0, t1)

    def _add(self, r: dict[str, FloatArray], records: RunRecords, t0: float, t1: float) -> None:
        for code in self.drops:
            self.drops[code] += int((r["dropped"] == code).sum())
        self.preempted += int(r["preemptions"].sum())
        served = (r["dropped"] == 0) & np.isfinite(r["admitted_s"])
        self._sum(self.seat_s, r, served, seat_seconds(r, records.batch, t0, t1))
        self._sum(self.tokens, r, served, window_output_tokens(r, t0, t1))
        measured = measured_rows(r, t0)
        m = row_metrics(r, measured)
        sums = {"ttft_s": self.measured, "input_tokens": self.inputs, "output_tokens": self.outputs}
        for name, into in sums.items():
            self._sum(into, r, measured, np.ones(m[name].size) if name == "ttft_s" else m[name], measured_only=True)
        self._sum(self.cached, r, measured, r["cached_tokens"][measured], measured_only=True)
        for ok, slo in zip(self.ok, self.slos, strict=True):
            self._sum(ok, r, measured, meets(m, slo).astype(float), measured_only=True)
        klass = r["class"][measured].astype(int)
        for k, histograms in enumerate(self.latency):
            for name, histogram in histograms.items():
                histogram.add(m[name][klass == k])

    @staticmethod
    def _sum(into: FloatArray, r: dict[str, FloatArray], rows: Mask, values: FloatArray,
             measured_only: bool = False) -> None:  # fmt: skip
        """Add ``values`` (one per row, or per selected row) into ``into[class, replica]``."""
        picked = values if measured_only else values[rows]
        group = r["class"][rows].astype(int) * into.shape[1] + r["replica"][rows].astype(int)
        into += np.bincount(group, weights=picked, minlength=into.size).reshape(into.shape)

    def _select(self, sums: FloatArray, replicas: list[int] | None = None, klass: int | None = None) -> float:
        rows = sums if klass is None else sums[klass : klass + 1]
        return float(rows.sum() if replicas is None else rows[:, replicas].sum())

    def latency_stats(self, klass: int | None = None) -> dict[str, DistributionStats]:
        completed = self.completed(klass) > 0
        out = {}
        for name in LATENCIES:
            histogram = LogHistogram()
            for k, histograms in enumerate(self.latency):
                if klass is None or k == klass:
                    histogram.merge(histograms[name])
            out[name] = histogram.stats(empty_reason(name, completed))
        return out

    def completed(self, klass: int | None = None) -> int:
        return round(self._select(self.measured, klass=klass))

    def meeting(self, slo: SLOSpec, klass: int | None = None) -> int:
        return round(self._select(self.ok[self.slos.index(slo)], klass=klass))

    def dropped(self, code: int) -> int:
        return self.drops[code]

    def preemptions(self) -> int:
        return self.preempted

    def prompt_tokens(self) -> tuple[float, float]:
        return self._select(self.cached), self._select(self.inputs)

    def served(self, replicas: list[int]) -> int:
        return round(self._select(self.measured, replicas))

    def billed(self, replicas: list[int], klass: int | None = None) -> tuple[float, float]:
        return self._select(self.inputs, replicas, klass), self._select(self.outputs, replicas, klass)

    def seats(self, replicas: list[int], klass: int) -> float:
        return self._select(self.seat_s, replicas, klass)

    def window_tokens(self, replicas: list[int], klass: int) -> float:
        return self._select(self.tokens, replicas, klass)


Requests = KeptRequests | RequestDigest


def requests_of(records: RunRecords, slos: Sequence[SLOSpec], classes: int) -> Requests:
    """The rows themselves when the run kept them all, else their digest (``slos``: the SLOs asked of it)."""
    return KeptRequests(records) if records.streamed is None else RequestDigest(records, slos, max(classes, 1))
