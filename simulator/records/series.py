"""Time series a run records as it goes, in memory bounded whatever the run's length.

Two kinds, both functions of simulated time from an origin ``t0``:

- :class:`LevelMonitor`, a piecewise-constant level ``L(t)`` (batch size, queue, KV blocks):
  the value recorded at ``t`` holds until the next record;
- :class:`TokenCounter`, cumulative output and input tokens ``N(t)`` of a replica, linear
  within an iteration (a span from its start to its planned end).

Each keeps every point while it has at most ``2 P`` of them (``P`` points, :data:`SERIES_POINTS`
unless told; a run gives each of its series :func:`points_per_series`), so a short run keeps its
exact sample path and every result derived from it is what it always was. Past that the series
is *compacted*: the time from ``t0`` is cut into buckets of width ``w = 2**k`` seconds, the
smallest power of two with at most ``P`` buckets up to the last point, and

- a level keeps one point per bucket, its time-weighted mean over the bucket,
  ``(F(t0 + (j+1) w) - F(t0 + j w)) / w`` with ``F(t) = integral of L from t0 to t``;
- a counter keeps its value at each bucket's start (and is linear in between);

while the stretch since the last whole bucket keeps every point. ``F`` (and ``N``) stay exact at
every bucket edge, at every later time and at each *mark* (the warm-up's end, given when the
series is made, whose exact value is stored before its bucket is merged). Elsewhere they are
off by at most one bucket's share: ``|error of F(t)| <= w * max L``, ``|error of N(t)| <=`` the
tokens of one bucket. The peak of a level is kept apart (:meth:`LevelMonitor.maximum` is exact).

Compaction costs one numpy pass over the points every ``P`` appends, so a record stays an
append. Memory per series: at most ``2 P`` points plus those of the last unfinished bucket (about
``2 n / P`` after ``n`` records: fewer than ``P`` while ``n < P**2 / 2``, 33 million records at ``P = 8192``).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Buckets a compacted series keeps at most, unless told otherwise (it compacts at twice as many points).
SERIES_POINTS = 16384
#: A run's level and token series share this many buckets (:func:`points_per_series`).
RUN_POINTS = 8192


def points_per_series(replicas: int) -> int:
    """Buckets for each series of a run with ``replicas`` replicas: ``max(2048, RUN_POINTS / replicas)``."""
    return max(2048, RUN_POINTS // max(replicas, 1))


class Buckets(NamedTuple):
    """A compaction's grid: bucket width, its ``K + 1`` edges, and the marks it merges away."""

    width_s: float
    edges: FloatArray
    passed: list[float]

    @property
    def edge_s(self) -> float:
        """The end of the last whole bucket."""
        return float(self.edges[-1])

    @property
    def whole(self) -> int:
        return self.edges.size - 1


class _Bucketed:
    """What both kinds share: the bucket width, the exact stretch, the marks and when to compact."""

    def __init__(self, t0: float, marks: Iterable[float], points: int) -> None:
        self.t0, self.points = t0, points
        self.bucket_s = 0.0  # bucket width before ``exact_from_s``; 0 while every point is kept
        self.exact_from_s = t0  # every point from here on is as recorded
        # each mark's exact value(s), stored when its bucket is merged
        self.marks: dict[float, tuple[float, ...] | None] = {float(m): None for m in marks if m > t0}
        self._compact_at = 2 * points + 1  # points that trigger the next compaction

    @property
    def compacted(self) -> bool:
        return self.bucket_s > 0.0

    def _grid(self, last_s: float) -> tuple[float, int]:
        """``(w, K)``: the bucket width for points up to ``last_s`` and the whole buckets before it."""
        span = last_s - self.t0
        if span <= 0.0:
            return self.bucket_s, 0
        width = max(self.bucket_s, 2.0 ** math.ceil(math.log2(span / self.points)))
        return width, int(span // width)

    def _buckets(self, last_s: float, stored: int) -> Buckets | None:
        """The whole buckets before ``last_s``; None, and the next compaction put off by ``points``
        more, while there is no whole bucket yet (``stored``: the points held)."""
        width, whole = self._grid(last_s)
        if whole == 0:
            self._compact_at = stored + self.points
            return None
        edges: FloatArray = self.t0 + width * np.arange(whole + 1, dtype=np.float64)
        return Buckets(width, edges, self._passed_marks(float(edges[-1])))

    def _merged(self, width_s: float, edge_s: float, points: int, exact: Mapping[float, tuple[float, ...]]) -> None:
        """Bookkeeping after merging up to ``edge_s``: the exact values at the marks passed, when to compact next."""
        self.marks.update(exact)
        self.bucket_s, self.exact_from_s = width_s, edge_s
        self._compact_at = points + self.points + 1

    def _passed_marks(self, edge_s: float) -> list[float]:
        """Marks not yet stored that the bucketing up to ``edge_s`` merges away."""
        return [m for m, v in self.marks.items() if v is None and self.exact_from_s <= m < edge_s]


class LevelMonitor(_Bucketed):
    """A piecewise-constant level ``(t, value)``: value holds from t until the next record."""

    def __init__(self, t0: float = 0.0, value: float = 0.0, marks: Iterable[float] = (),
                 points: int = SERIES_POINTS) -> None:  # fmt: skip
        super().__init__(t0, marks, points)
        self.times = array("d", [t0])
        self.values = array("d", [value])
        self._peak = value  # the highest value merged into a bucket
        self._last_t, self._last_value = t0, value  # the last point, as plain floats

    def record(self, t: float, value: float) -> None:
        if value != self._last_value:
            self._last_value = value
            if t == self._last_t:
                self.values[-1] = value
            else:
                self._last_t = t
                self.times.append(t)
                self.values.append(value)
                if len(self.times) >= self._compact_at:
                    self._compact()

    def _area(self, times: FloatArray, values: FloatArray, at: FloatArray) -> FloatArray:
        """``F`` at the times ``at`` (at or after the first point) of the piecewise-constant series."""
        cumulative = np.concatenate(([0.0], np.cumsum(values[:-1] * np.diff(times))))
        index = np.searchsorted(times, at, side="right") - 1
        area: FloatArray = cumulative[index] + values[index] * (at - times[index])
        return area

    def _compact(self) -> None:
        times = np.frombuffer(self.times, dtype=np.float64)
        values = np.frombuffer(self.values, dtype=np.float64)
        grid = self._buckets(float(times[-1]), times.size)
        if grid is None:
            return
        (width, edges, passed), edge, whole = grid, grid.edge_s, grid.whole
        area = self._area(times, values, np.append(edges, passed))
        means = np.diff(area[: whole + 1]) / width
        tail = int(np.searchsorted(times, edge, side="right")) - 1  # the point in force at the edge
        self._peak = max(self._peak, float(values[:tail].max(initial=-math.inf)))
        new_times = np.concatenate((edges, times[tail + 1 :]))
        new_values = np.concatenate((means, values[tail:]))
        self.times, self.values = array("d", new_times.tobytes()), array("d", new_values.tobytes())
        self._last_t = self.times[-1]  # the edge, when no point came after it
        exact = {mark: (a,) for mark, a in zip(passed, area[whole + 1 :].tolist(), strict=True)}
        self._merged(width, edge, len(self.times), exact)

    def _area_at(self, t: float) -> float:
        """``F(t)`` of a compacted level: exact at a mark, an edge or after ``exact_from_s``."""
        stored = self.marks.get(t)
        if stored is not None:
            return stored[0]
        times = np.frombuffer(self.times, dtype=np.float64)
        values = np.frombuffer(self.values, dtype=np.float64)
        return float(self._area(times, values, np.array([max(t, self.t0)]))[0])

    def integral(self, t0: float, t1: float) -> float:
        """Area under the level over ``[t0, t1]`` (exact unless compacted; then see the module)."""
        if self.compacted:
            return self._area_at(t1) - self._area_at(t0) if t1 > t0 else 0.0
        times = np.frombuffer(self.times, dtype=np.float64)
        values = np.frombuffer(self.values, dtype=np.float64)
        starts = np.clip(times, t0, t1)
        ends = np.clip(np.append(times[1:], np.inf), t0, t1)
        return float(np.sum(values * (ends - starts)))

    def time_mean(self, t0: float, t1: float) -> float:
        return self.integral(t0, t1) / (t1 - t0) if t1 > t0 else float("nan")

    def maximum(self) -> float:
        return max(self._peak, float(max(self.values)))


class TokenCounter(_Bucketed):
    """Cumulative output (emitted) and input (prefilled) tokens of one replica over time.

    An iteration or jump is a span from its start to its (planned) end, linear in between;
    a jump that stops early amends its span.
    """

    def __init__(self, marks: Iterable[float] = (), points: int = SERIES_POINTS) -> None:
        super().__init__(0.0, marks, points)
        self.times = array("d", [0.0])
        self.output = array("d", [0.0])
        self.input = array("d", [0.0])

    def span(self, start_s: float, end_s: float, output_tokens: float, input_tokens: float) -> None:
        if start_s > self.times[-1]:
            self.times.append(start_s)
            self.output.append(self.output[-1])
            self.input.append(self.input[-1])
        self.times.append(end_s)
        self.output.append(self.output[-1] + output_tokens)
        self.input.append(self.input[-1] + input_tokens)
        if len(self.times) >= self._compact_at:
            self._compact()

    def amend(self, end_s: float, output_tokens: float) -> None:
        self.times[-1] = end_s
        self.output[-1] = self.output[-2] + output_tokens

    def _compact(self) -> None:
        """Buckets up to the last whole one before the last span (which :meth:`amend` may change)."""
        times = np.frombuffer(self.times, dtype=np.float64)
        grid = self._buckets(float(times[-2]), times.size)
        if grid is None:
            return
        (width, edges, passed), edge, whole = grid, grid.edge_s, grid.whole
        at = np.append(edges, passed)
        tail = min(int(np.searchsorted(times, edge, side="right")), times.size - 2)  # the last span stays
        kept = []
        for name in ("output", "input"):
            counts = np.frombuffer(getattr(self, name), dtype=np.float64)
            sampled = np.interp(at, times, counts)
            setattr(self, name, array("d", np.concatenate((sampled[: whole + 1], counts[tail:])).tobytes()))
            kept.append(sampled[whole + 1 :].tolist())
        self.times = array("d", np.concatenate((edges, times[tail:])).tobytes())
        self._merged(width, edge, len(self.times), dict(zip(passed, zip(*kept, strict=True), strict=True)))

    def in_window(self, t0: float, t1: float) -> tuple[float, float]:
        """(output, input) tokens over ``[t0, t1]`` (exact unless compacted; then see the module)."""
        times = np.frombuffer(self.times, dtype=np.float64)
        counts = [np.frombuffer(series, dtype=np.float64) for series in (self.output, self.input)]
        if not self.compacted:
            out, inp = [float(np.interp(t1, times, c) - np.interp(t0, times, c)) for c in counts]
            return out, inp
        ends = [self.marks.get(t) or tuple(float(np.interp(t, times, c)) for c in counts) for t in (t0, t1)]
        return ends[1][0] - ends[0][0], ends[1][1] - ends[0][1]
