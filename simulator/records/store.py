"""What a run leaves behind: the records the engine writes and the metrics read.

The contract between :mod:`simulator.engine` (which fills these while it runs) and
:mod:`simulator.results` (which derives metrics from them afterwards): neither imports the other.

- A request is one :class:`RequestRecord` and an agent task one :class:`TaskRecord`: named
  fields, stored flat as float64 (120 bytes a request); times are seconds of simulated time,
  NaN where an event never happened (a dropped request has no first token). Past
  :data:`REQUEST_ROWS_KEPT` requests the rows stream to a temporary file (:class:`RequestRows`)
  and the metrics digest them chunk by chunk (:mod:`simulator.results.requests`).
- Levels (batch size, queue length, KV blocks in use) are piecewise constant
  (:class:`LevelMonitor`), so time-weighted means are exact integrals.
- Output and input token counts are cumulative per replica (:class:`TokenCounter`), linear
  within an iteration, so a window's tokens exclude the parts of iterations outside it.
- Both keep every point up to a bound, then bucket the past (:mod:`simulator.records.series` states
  the resolution and what stays exact: the integrals and counts over ``[warmup, end]``).
- Inter-token gaps are a histogram over :data:`ITL_BIN_EDGES_S` (200 log bins per decade).
"""

from __future__ import annotations

import io
import tempfile
import weakref
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, NamedTuple

import numpy as np
import numpy.typing as npt

from simulator.analytic.economics import Pricing
from simulator.analytic.power import ChipPower
from simulator.config.hardware import HardwareProfile
from simulator.records.series import LevelMonitor as LevelMonitor  # re-exported: part of the records' contract
from simulator.records.series import TokenCounter as TokenCounter

FloatArray = npt.NDArray[np.float64]

#: Rows per piece when a CSV file is written piece by piece.
CSV_CHUNK_ROWS = 8192

#: Request rows a run keeps in memory; a run with more streams them all to a temporary file and
#: its latency percentiles come from log-binned histograms (:mod:`simulator.results.requests`).
REQUEST_ROWS_KEPT = 16384

#: Inter-token latency histogram: log-spaced bins from 1 us to 1000 s, 200 per decade.
ITL_BIN_EDGES_S = np.logspace(-6, 3, 9 * 200 + 1)


class RequestRecord(NamedTuple):
    """One model call as the client saw it (the first token is stamped when the client sees it)."""

    id: float
    replica: float
    user: float
    arrival_s: float
    admitted_s: float
    first_token_s: float
    second_token_s: float  # NaN for a 1-token answer
    done_s: float
    input_tokens: float
    output_tokens: float
    preemptions: float
    dropped: float  # 0 served, DROPPED_TOO_LONG, DROPPED_OVER_BUDGET
    cached_tokens: float
    task: float  # the agent task it belongs to (-1: none)
    class_: float  # workload class index (column "class")


class TaskRecord(NamedTuple):
    """One finished agent task: its span and where the time went (seconds)."""

    task: float
    agent: float
    start_s: float
    end_s: float
    calls: float
    model_s: float
    queue_s: float
    tool_s: float
    subagent_s: float
    network_s: float
    input_tokens: float
    output_tokens: float
    cached_tokens: float
    failed: float  # 1.0 when a call was refused
    parent: float  # the task that spawned it (-1: top level)
    class_: float  # workload class index (column "class")


def columns(record: type[tuple[float, ...]]) -> tuple[str, ...]:
    """Column names of a record type: its fields, a trailing ``_`` (a Python keyword's escape) dropped."""
    return tuple(name.rstrip("_") for name in record._fields)  # type: ignore[attr-defined]


REQUEST_COLUMNS = columns(RequestRecord)
TASK_COLUMNS = columns(TaskRecord)

#: ``RequestRecord.dropped``: too long for every backend its class may use.
DROPPED_TOO_LONG = 1
#: ``RequestRecord.dropped``: only over-budget (API) backends could serve it.
DROPPED_OVER_BUDGET = 2
#: ``RequestRecord.dropped``: its replica failed and it was not sent to another (``failures.on_failure:
#: fail``, or no replica was up to take it), or it arrived while every replica that could serve it was down.
DROPPED_REPLICA_FAILED = 3
#: ``RequestRecord.dropped``: an API refused it (429) until the client's retries ran out.
DROPPED_THROTTLED = 4


class RequestRows:
    """Request rows as a run writes them: in memory up to ``kept`` rows, then streamed.

    Past ``kept`` rows, the rows held so far and every later batch of ``kept`` go to an
    anonymous temporary file (deleted when the rows are), so memory stays bounded; the rows read
    back in the order they were written (requests in the order they left).
    """

    def __init__(self, width: int, kept: int | None = REQUEST_ROWS_KEPT) -> None:
        self.width, self.kept = width, kept
        self.buffer = array("d")
        self._file: IO[bytes] | None = None
        self.streamed_rows = 0

    def extend(self, record: tuple[float, ...]) -> None:
        self.buffer.extend(record)
        if self.kept is not None and len(self.buffer) >= self.kept * self.width:
            self._stream()

    def _stream(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the rows
            weakref.finalize(self, self._file.close)
        self._file.seek(0, io.SEEK_END)
        self._file.write(self.buffer.tobytes())
        self.streamed_rows += len(self.buffer) // self.width
        self.buffer = array("d")

    @property
    def streamed(self) -> bool:
        return self._file is not None

    def __len__(self) -> int:
        return self.streamed_rows + len(self.buffer) // self.width

    def in_memory(self) -> FloatArray:
        """The rows held in memory, one per line (a view)."""
        return np.frombuffer(self.buffer, dtype=np.float64).reshape(-1, self.width)

    def chunks(self, rows: int = REQUEST_ROWS_KEPT) -> Iterator[FloatArray]:
        """Every row, ``rows`` at a time (the streamed ones read back from the file first)."""
        if self._file is not None:
            self._file.seek(0)
            while block := self._file.read(rows * self.width * 8):
                yield np.frombuffer(block, dtype=np.float64).reshape(-1, self.width)
        if self.buffer:
            yield self.in_memory()


@dataclass
class ReplicaTotals:
    busy_s: float = 0.0
    iterations: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0


@dataclass(frozen=True)
class BackendRecord:
    """What the metrics need to know about one backend of the fleet."""

    name: str
    hardware: HardwareProfile
    model_id: str
    chips_per_replica: int
    replicas: list[int]  # global replica indices
    kv_blocks_per_replica: int
    max_batch_size: int
    peak_flops_per_chip: float
    peak_bandwidth_per_chip: float
    pricing: Pricing
    power: ChipPower | None = None  # its chips' draw under a power cap (None: uncapped)


#: Columns of a KV handoff (:mod:`simulator.engine.disaggregated`): the request, when it was
#: routed to the prefill pool, when its prefill ended, when its last byte left, when it
#: reached the decode pool, the bytes moved, the decode replica.
KV_TRANSFER_COLUMNS = ("request", "routed_s", "prefill_end_s", "wire_end_s", "arrival_s", "bytes", "decode_replica")


@dataclass(frozen=True)
class ApiRecords:
    """What one rate-limited API backend saw (:mod:`simulator.engine.api_gate`): each accepted request's
    send time, tokens and id, each 429's time, and the client's retries, failures and spills."""

    backend: str
    accepted_s: FloatArray
    accepted_tokens: FloatArray
    accepted_ids: FloatArray  # the request each acceptance is of
    refused_s: FloatArray
    retries: int
    failed: int
    spilled: int  # requests the router sent elsewhere because these limits would have refused them
    requests_per_minute: int | None
    tokens_per_minute: int | None
    concurrent_requests: int | None


@dataclass(frozen=True)
class KVTransferRecords:
    """The handoffs from one prefill backend to its decode backend, one row per delivered handoff."""

    prefill_backend: str
    decode_backend: str
    kind: str  # "kv" or "prompt"
    columns: dict[str, FloatArray]  # one array per KV_TRANSFER_COLUMNS name
    in_prefill: LevelMonitor  # requests routed to the prefill pool and not yet prefilled
    in_transfer: LevelMonitor  # requests whose KV is crossing the link
    prefilling: int  # still prefilling when the run ended
    crossing: int  # still crossing when the run ended


@dataclass(frozen=True)
class KVTierRecords:
    """One replica's KV tiers over the whole run (:mod:`simulator.engine.kv.tiers`), fastest first."""

    backend: str
    replica: int
    names: tuple[str, ...]
    capacity_blocks: tuple[int, ...]
    block_tokens: int
    block_bytes: float
    occupancy: list[LevelMonitor]  # blocks held in each tier
    demoted: FloatArray  # blocks that entered each tier
    loaded: FloatArray  # blocks loaded up from each tier
    replaced: FloatArray  # blocks of each tier superseded by a newer copy
    dropped: int  # blocks pushed off the last tier
    lost: int  # loaded blocks that found no room in the serving tier
    declined: int  # prefixes found below but computed again (faster)
    load_pairs_s: FloatArray  # one row per load: (load s, recompute s alone)

    def held(self, tier: int) -> int:
        """Blocks tier ``tier`` held when the run ended."""
        return int(self.occupancy[tier].values[-1])


@dataclass(frozen=True)
class FailureRecords:
    """What failed in a run (:mod:`simulator.engine.failures`): each replica's spans down, and the requests hit."""

    down: dict[int, list[tuple[float, float]]]  # replica index -> its (failed at, back at) spans, in time order
    failures: int  # replicas that failed (drawn failures and outages), over the whole run
    retried: int  # requests a failure lost that were sent to another replica
    failed: int  # requests a failure lost that were answered with an error (not retried, or no replica up)
    expected_availability: dict[int, float]  # replica index -> MTBF / (MTBF + MTTR) (drawn failures only)
    stragglers: tuple[int, ...]  # replicas slowed for the run

    def up_fraction(self, replica: int, t0: float, t1: float) -> float:
        """Share of ``[t0, t1]`` the replica was up (its spans down may overlap; their union counts)."""
        down, reach = 0.0, t0
        for start, end in self.down.get(replica, []):
            lo, hi = max(start, reach), min(end, t1)
            if hi > lo:
                down += hi - lo
            reach = max(reach, min(end, t1))
        return 1.0 - down / (t1 - t0) if t1 > t0 else 1.0


@dataclass(frozen=True)
class RunRecords:
    requests: dict[str, FloatArray]  # one array per column of REQUEST_COLUMNS
    tasks: dict[str, FloatArray]  # one array per column of TASK_COLUMNS (agent runs)
    in_system: LevelMonitor
    queue: list[LevelMonitor]
    batch: list[LevelMonitor]
    kv_blocks: list[LevelMonitor]
    totals: list[ReplicaTotals]
    itl_counts: FloatArray
    tokens: list[TokenCounter]
    end_s: float
    warmup_s: float
    backends: list[BackendRecord]
    in_flight: int
    capacity_requests_per_s: float
    offered_requests_per_s: float | None
    kv_transfers: tuple[KVTransferRecords, ...] = ()  # one per disaggregated backend
    kv_tiers: tuple[KVTierRecords, ...] = ()  # one per replica with KV tiers
    api: tuple[ApiRecords, ...] = ()  # one per backend with an api section
    # drafts per verify -> speculative verify passes ended after the warm-up, by drafts accepted (0..drafts)
    verifications: dict[int, FloatArray] = field(default_factory=dict)
    streamed: RequestRows | None = None  # every request row, when there were too many to keep (``requests`` empty)
    failures: FailureRecords | None = None  # with ``failures`` in the scenario

    def tokens_in_window(self, t0: float, t1: float, replicas: list[int] | None = None) -> tuple[float, float]:
        """(output, input) tokens the replicas (default: all) processed over ``[t0, t1]``."""
        chosen = range(len(self.tokens)) if replicas is None else replicas
        pairs = [self.tokens[i].in_window(t0, t1) for i in chosen]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def backend_of(self, replica: int) -> BackendRecord:
        return next(b for b in self.backends if replica in b.replicas)

    @property
    def itl_bin_edges_s(self) -> FloatArray:
        return ITL_BIN_EDGES_S

    def levels(self, replica: int = 0) -> dict[str, tuple[FloatArray, FloatArray]]:
        """Batch size, queue length and KV occupancy (% of blocks) of a replica: (times s, values).

        Every change while the level kept every point; once compacted, time-weighted means over
        buckets (``level.bucket_s`` wide) up to ``level.exact_from_s``, every change after it.
        """
        kv_scale = 100.0 / max(self.backend_of(replica).kv_blocks_per_replica, 1)
        out = {}
        for name, level, scale in (("batch size", self.batch[replica], 1.0), ("queue", self.queue[replica], 1.0),
                                   ("KV occupancy %", self.kv_blocks[replica], kv_scale)):  # fmt: skip
            times = np.append(np.frombuffer(level.times, dtype=np.float64), self.end_s)
            values = np.frombuffer(level.values, dtype=np.float64)
            out[name] = (times, np.append(values, values[-1]) * scale)
        return out

    def levels_csv(self) -> str:
        """:meth:`levels` of every replica in long form: ``replica,level,t_s,value`` (exact floats)."""
        return "".join(self.levels_csv_chunks())

    def levels_csv_chunks(self) -> Iterator[str]:
        """:meth:`levels_csv` in pieces of at most ``CSV_CHUNK_ROWS`` rows (to write it without holding it)."""
        yield "replica,level,t_s,value\n"
        for replica in range(len(self.batch)):
            for name, (times, values) in self.levels(replica).items():
                for start in range(0, times.size, CSV_CHUNK_ROWS):
                    part = zip(times[start : start + CSV_CHUNK_ROWS].tolist(),
                               values[start : start + CSV_CHUNK_ROWS].tolist(), strict=True)  # fmt: skip
                    yield "".join(f"{replica},{name},{t!r},{v!r}\n" for t, v in part)

    @property
    def request_count(self) -> int:
        """Rows recorded (requests that left or were dropped), kept or streamed."""
        return len(self.streamed) if self.streamed is not None else self.requests[REQUEST_COLUMNS[0]].size

    def request_chunks(self) -> Iterator[dict[str, FloatArray]]:
        """Every request row, a bounded number at a time, as one array per column (sorted by id
        when every row was kept; in the order requests left when they streamed)."""
        if self.streamed is None:
            yield self.requests
            return
        for table in self.streamed.chunks():
            yield {name: table[:, i] for i, name in enumerate(REQUEST_COLUMNS)}

    def to_csv(self) -> str:
        """One row per request; times are exact (shortest round-trip decimal), counts integers."""
        return "".join(self.csv_chunks())

    def csv_chunks(self) -> Iterator[str]:
        """:meth:`to_csv` in pieces of at most ``CSV_CHUNK_ROWS`` rows (to write it without holding it)."""
        yield ",".join(REQUEST_COLUMNS) + "\n"
        for chunk in self.request_chunks():
            for start in range(0, chunk[REQUEST_COLUMNS[0]].size, CSV_CHUNK_ROWS):
                columns = [_csv_cells(chunk[f][start : start + CSV_CHUNK_ROWS]) for f in REQUEST_COLUMNS]
                yield "".join(f"{','.join(row)}\n" for row in zip(*columns, strict=True))


def _csv_cells(values: FloatArray) -> list[str]:
    """Each value as a cell: an integer-valued float as an integer, NaN as empty, anything else
    exactly (shortest round-trip decimal). Decided for the whole column at once, so a column of
    counts takes no per-value test."""
    whole = np.abs(values) < 2**53  # False for NaN and infinities
    whole &= values == np.trunc(values)
    if whole.all():
        return list(map(str, values.astype(np.int64).tolist()))
    cells = zip(values.tolist(), whole.tolist(), strict=True)
    return [str(int(v)) if w else repr(v) if v == v else "" for v, w in cells]
