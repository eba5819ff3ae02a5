"""The recorder: append-only records of a run while it runs (requests, tasks, levels, tokens,
inter-token gaps, speculative verify passes), frozen into :class:`~simulator.records.store.RunRecords` when it ends.

Nothing here computes metrics; :mod:`simulator.results` derives them from the frozen records.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from simulator.records.series import points_per_series
from simulator.records.store import (
    ITL_BIN_EDGES_S,
    REQUEST_COLUMNS,
    REQUEST_ROWS_KEPT,
    TASK_COLUMNS,
    BackendRecord,
    FloatArray,
    LevelMonitor,
    ReplicaTotals,
    RequestRecord,
    RequestRows,
    RunRecords,
    TaskRecord,
    TokenCounter,
)


class RunningTask:
    """A top-level agent task under way, as a run's stop rule sees it: when it began, its class,
    and the tool waits it has still to begin (the agent counts them down)."""

    def __init__(self, start_s: float, klass: int, waits_left: int) -> None:
        self.start_s = start_s
        self.klass = klass
        self.waits_left = waits_left


class Recorder:
    """Collects everything a run produces, per replica and globally; with ``details`` False only
    its tasks (their records, and the tasks under way a stop rule reads): the engine then records
    no request rows, levels, token counts, inter-token gaps, second tokens or work totals (the
    simulation itself is the same: nothing recorded feeds back into it)."""

    def __init__(self, replicas: int, warmup_s: float = 0.0, rows_kept: int | None = REQUEST_ROWS_KEPT,
                 points: int | None = None, details: bool = True) -> None:  # fmt: skip
        """``warmup_s``: where the levels and token counts stay exact however long the run;
        ``rows_kept``: the request rows held in memory before they stream (None: all);
        ``points``: buckets per level and token series (default :func:`~simulator.records.series.points_per_series`);
        ``details``: whether the engine records more than the tasks (the class docstring)."""
        self.details = details
        self.requests = RequestRows(len(REQUEST_COLUMNS), rows_kept)  # one RequestRecord per request
        marks, points = (warmup_s,), points or points_per_series(replicas)
        self.in_system = LevelMonitor(marks=marks, points=points)
        self.queue = [LevelMonitor(marks=marks, points=points) for _ in range(replicas)]
        self.batch = [LevelMonitor(marks=marks, points=points) for _ in range(replicas)]
        self.kv_blocks = [LevelMonitor(marks=marks, points=points) for _ in range(replicas)]
        self.totals = [ReplicaTotals() for _ in range(replicas)]
        self._itl_edges: list[float] = ITL_BIN_EDGES_S.tolist()
        self._itl_counts = [0.0] * (len(self._itl_edges) - 1)  # gaps per bin of the histogram
        self.tokens = [TokenCounter(marks=marks, points=points) for _ in range(replicas)]
        self.tasks = array("d")  # one TaskRecord per finished task, flat
        self.running: dict[int, RunningTask] = {}  # top-level tasks under way, by id
        self.warmup_s = warmup_s
        self.verifications: dict[int, FloatArray] = {}  # drafts per verify -> verify passes by drafts accepted
        self._in_system = 0

    def arrival(self, t: float) -> None:
        if not self.details:
            return
        self._in_system += 1
        self.in_system.record(t, self._in_system)

    def departure(self, t: float, record: RequestRecord) -> None:
        if not self.details:
            return
        self._in_system -= 1
        self.in_system.record(t, self._in_system)
        self.requests.extend(record)

    def dropped(self, record: RequestRecord) -> None:
        if self.details:
            self.requests.extend(record)

    def task_started(self, task: int, start_s: float, klass: int, waits: int) -> RunningTask:
        """A top-level task began with ``waits`` tool waits ahead (seen by a run's stop rule until
        :meth:`task` records its end); the agent counts its waits down on what this returns."""
        running = RunningTask(start_s, klass, waits)
        self.running[task] = running
        return running

    def gave_up(self, t: float, record: RequestRecord) -> None:
        """A request that arrived and leaves unanswered (an API refused it until its retries ran out)."""
        if not self.details:
            return
        self._in_system -= 1
        self.in_system.record(t, self._in_system)
        self.requests.extend(record)

    def task(self, record: TaskRecord) -> None:
        self.tasks.extend(record)
        self.running.pop(int(record.task), None)

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def _itl_bin(self, gap_s: float) -> int:
        """The histogram bin of an inter-token gap: the last edge at or below it
        (``searchsorted(edges, gap, side="right") - 1``), clipped to the bins."""
        return min(max(bisect_right(self._itl_edges, gap_s) - 1, 0), len(self._itl_counts) - 1)

    def inter_token(self, durations_s: Sequence[float], weights: Sequence[float]) -> None:
        """Add inter-token gaps to the histogram: gap ``durations_s[i]``, ``weights[i]`` times."""
        counts = self._itl_counts
        for gap_s, weight in zip(durations_s, weights, strict=True):
            counts[self._itl_bin(gap_s)] += weight

    def inter_token_steps(self, durations_s: list[float], steps: int, weight: float) -> None:
        """The first ``steps`` gaps of ``durations_s``, each ``weight`` times (a decode jump: one gap
        per step for each of its sequences).

        A jump's steps mostly share a bin with the step before, so a run of them is added at
        once, ``weight x run``: the weights are whole tokens, so every count is a whole number
        below 2^53 and the sum is exact in any order (as the histogram of the gaps one by one)."""
        edges, counts = self._itl_edges, self._itl_counts
        low = high = 0.0  # the edges of the bin of the run (none yet)
        current, run = 0, 0
        for step in range(steps):
            gap_s = durations_s[step]
            if low <= gap_s < high:
                run += 1
                continue
            if run:
                counts[current] += weight * run
            current, run = self._itl_bin(gap_s), 1
            low, high = edges[current], edges[current + 1]
        if run:
            counts[current] += weight * run

    def inter_token_gaps(self, duration_s: float, count: float) -> None:
        """``count`` inter-token gaps of ``duration_s`` each (one iteration's one-token decodes)."""
        self._itl_counts[self._itl_bin(duration_s)] += count

    def verified(self, drafts: int, emitted: FloatArray) -> None:
        """Speculative verify passes of ``drafts`` drafted tokens each, one per sequence, that
        emitted ``emitted`` tokens (1 + the drafts accepted before the first rejection, as drawn)."""
        counts = self.verifications.get(drafts)
        if counts is None:
            counts = self.verifications[drafts] = np.zeros(drafts + 1)
        counts += np.bincount(emitted.astype(np.int64) - 1, minlength=drafts + 1)

    def iteration(self, replica: int, duration_s: float, flops: float, bytes_moved: float, count: int = 1) -> None:
        """``count`` iterations that took ``duration_s`` and did ``flops`` and ``bytes_moved`` in all."""
        totals = self.totals[replica]
        totals.busy_s += duration_s
        totals.iterations += count
        totals.flops += flops
        totals.bytes_moved += bytes_moved

    def freeze(
        self,
        end_s: float,
        warmup_s: float,
        backends: list[BackendRecord],
        in_flight: int,
        capacity_requests_per_s: float,
        offered_requests_per_s: float | None,
    ) -> RunRecords:
        """The records as arrays (requests and tasks sorted by id), once, after the run.

        Requests that streamed stay where they are (``RunRecords.streamed``; ``requests`` is empty).
        """
        rows = self.requests
        table = rows.in_memory()[:0] if rows.streamed else rows.in_memory()  # a view
        order = np.argsort(table[:, 0], kind="stable")
        requests = {name: table[order, i] for i, name in enumerate(REQUEST_COLUMNS)}
        task_table = np.frombuffer(self.tasks, dtype=np.float64).reshape(-1, len(TASK_COLUMNS))
        task_order = np.argsort(task_table[:, 0], kind="stable")
        tasks = {name: task_table[task_order, i] for i, name in enumerate(TASK_COLUMNS)}
        return RunRecords(
            requests=requests,
            tasks=tasks,
            in_system=self.in_system,
            queue=self.queue,
            batch=self.batch,
            kv_blocks=self.kv_blocks,
            totals=self.totals,
            itl_counts=np.array(self._itl_counts),
            tokens=self.tokens,
            end_s=end_s,
            warmup_s=warmup_s,
            backends=backends,
            in_flight=in_flight,
            capacity_requests_per_s=capacity_requests_per_s,
            offered_requests_per_s=offered_requests_per_s,
            verifications={drafts: counts.copy() for drafts, counts in self.verifications.items()},
            streamed=rows if rows.streamed else None,
        )
