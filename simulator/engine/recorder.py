"""Append-only records of a run: requests, time-weighted levels, an inter-token histogram.

Nothing here computes metrics; :mod:`simulator.results` derives them after the run.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Inter-token latency histogram: log-spaced bins from 1 us to 1000 s, 200 per decade.
ITL_BIN_EDGES_S = np.logspace(-6, 3, 9 * 200 + 1)

ITL_BUFFER = 8192

REQUEST_FIELDS = (
    "id", "replica", "user", "arrival_s", "admitted_s", "first_token_s", "done_s",
    "input_tokens", "output_tokens", "preemptions", "dropped", "cached_tokens", "task", "class",
)  # fmt: skip

TASK_FIELDS = (
    "task", "agent", "start_s", "end_s", "calls", "model_s", "queue_s", "tool_s", "subagent_s", "network_s",
    "input_tokens", "output_tokens", "cached_tokens", "failed", "parent", "class",
)  # fmt: skip


class LevelMonitor:
    """A piecewise-constant level ``(t, value)``: value holds from t until the next record."""

    def __init__(self, t0: float = 0.0, value: float = 0.0) -> None:
        self.times = array("d", [t0])
        self.values = array("d", [value])

    def record(self, t: float, value: float) -> None:
        if value != self.values[-1]:
            if t == self.times[-1]:
                self.values[-1] = value
            else:
                self.times.append(t)
                self.values.append(value)

    def integral(self, t0: float, t1: float) -> float:
        """Exact area under the level over ``[t0, t1]``."""
        times = np.frombuffer(self.times, dtype=np.float64)
        values = np.frombuffer(self.values, dtype=np.float64)
        starts = np.clip(times, t0, t1)
        ends = np.clip(np.append(times[1:], np.inf), t0, t1)
        return float(np.sum(values * (ends - starts)))

    def time_mean(self, t0: float, t1: float) -> float:
        return self.integral(t0, t1) / (t1 - t0) if t1 > t0 else float("nan")

    def maximum(self) -> float:
        return float(max(self.values))


class TokenCounter:
    """Cumulative output (emitted) and input (prefilled) tokens of one replica over time.

    An iteration or jump is a span from its start to its (planned) end, linear in between;
    a jump that stops early amends its span.
    """

    def __init__(self) -> None:
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

    def amend(self, end_s: float, output_tokens: float) -> None:
        self.times[-1] = end_s
        self.output[-1] = self.output[-2] + output_tokens

    def in_window(self, t0: float, t1: float) -> tuple[float, float]:
        """(output, input) tokens over ``[t0, t1]``."""
        times = np.frombuffer(self.times, dtype=np.float64)
        counts = [np.frombuffer(series, dtype=np.float64) for series in (self.output, self.input)]
        out, inp = (float(np.interp(t1, times, c) - np.interp(t0, times, c)) for c in counts)
        return out, inp


@dataclass
class ReplicaTotals:
    busy_s: float = 0.0
    iterations: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0


class Recorder:
    """Collects everything a run produces, per replica and globally."""

    def __init__(self, replicas: int) -> None:
        self.requests = array("d")  # REQUEST_FIELDS per request, flat: 88 bytes a request
        self.in_system = LevelMonitor()
        self.queue = [LevelMonitor() for _ in range(replicas)]
        self.batch = [LevelMonitor() for _ in range(replicas)]
        self.kv_blocks = [LevelMonitor() for _ in range(replicas)]
        self.totals = [ReplicaTotals() for _ in range(replicas)]
        self.itl_counts = np.zeros(ITL_BIN_EDGES_S.size - 1)
        self._itl_durations, self._itl_weights = array("d"), array("d")
        self.tokens = [TokenCounter() for _ in range(replicas)]
        self.tasks = array("d")  # TASK_FIELDS per finished task, flat
        self._in_system = 0

    def arrival(self, t: float) -> None:
        self._in_system += 1
        self.in_system.record(t, self._in_system)

    def departure(self, t: float, fields: tuple[float, ...]) -> None:
        self._in_system -= 1
        self.in_system.record(t, self._in_system)
        self.requests.extend(fields)

    def dropped(self, fields: tuple[float, ...]) -> None:
        self.requests.extend(fields)

    def task(self, fields: tuple[float, ...]) -> None:
        self.tasks.extend(fields)

    @property
    def request_count(self) -> int:
        return len(self.requests) // len(REQUEST_FIELDS)

    def inter_token(self, durations_s: FloatArray, weights: FloatArray | float) -> None:
        """Add inter-token gaps (one per decoding sequence per step) to the histogram.

        Samples are buffered and binned in bulk, so memory stays flat in simulated time.
        """
        self._itl_durations.extend(np.ravel(durations_s).tolist())
        self._itl_weights.extend(np.broadcast_to(weights, np.shape(durations_s)).ravel().tolist())
        if len(self._itl_durations) >= ITL_BUFFER:
            self.flush_inter_tokens()

    def flush_inter_tokens(self) -> None:
        if self._itl_durations:
            durations = np.frombuffer(self._itl_durations, dtype=np.float64)
            index = np.searchsorted(ITL_BIN_EDGES_S, durations, side="right") - 1
            np.add.at(self.itl_counts, np.clip(index, 0, self.itl_counts.size - 1), self._itl_weights)
            self._itl_durations, self._itl_weights = array("d"), array("d")

    def iteration(self, replica: int, duration_s: FloatArray, flops: FloatArray, bytes_moved: FloatArray) -> None:
        totals = self.totals[replica]
        totals.busy_s += float(duration_s.sum())
        totals.iterations += duration_s.size
        totals.flops += float(flops.sum())
        totals.bytes_moved += float(bytes_moved.sum())
