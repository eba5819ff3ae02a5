"""RunRecords: the frozen, numpy form of everything a run recorded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simulator.analytic.economics import Pricing
from simulator.config.hardware import HardwareProfile
from simulator.engine.build import Simulation
from simulator.engine.recorder import (
    ITL_BIN_EDGES_S,
    REQUEST_FIELDS,
    TASK_FIELDS,
    LevelMonitor,
    ReplicaTotals,
    TokenCounter,
)

FloatArray = npt.NDArray[np.float64]


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


@dataclass(frozen=True)
class RunRecords:
    requests: dict[str, FloatArray]  # one array per field of REQUEST_FIELDS
    tasks: dict[str, FloatArray]  # one array per field of TASK_FIELDS (agent runs)
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
        """Batch size, queue length and KV occupancy (% of blocks) of a replica: (times s, values)."""
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
        rows = ["replica,level,t_s,value"]
        for replica in range(len(self.batch)):
            for name, (times, values) in self.levels(replica).items():
                rows += [f"{replica},{name},{t!r},{v!r}" for t, v in zip(times.tolist(), values.tolist(), strict=True)]
        return "\n".join(rows) + "\n"

    def to_csv(self) -> str:
        """One row per request; times are exact (shortest round-trip decimal), counts integers."""
        rows = [",".join(REQUEST_FIELDS)]
        columns = [self.requests[f].tolist() for f in REQUEST_FIELDS]
        rows += [",".join(_csv_number(v) for v in values) for values in zip(*columns, strict=True)]
        return "\n".join(rows) + "\n"


def _csv_number(value: float) -> str:
    """An integer-valued float as an integer, NaN as empty, anything else exactly."""
    if value != value:
        return ""
    return str(int(value)) if abs(value) < 2**53 and value == int(value) else repr(value)


def freeze(simulation: Simulation, end_s: float) -> RunRecords:
    """Convert the recorder's lists to arrays, once, after the run."""
    from simulator.analytic.precision import matmul_precision

    rec = simulation.recorder
    rec.flush_inter_tokens()
    table = np.frombuffer(rec.requests, dtype=np.float64).reshape(-1, len(REQUEST_FIELDS)).copy()
    order = np.argsort(table[:, 0], kind="stable")
    requests = {name: table[order, i] for i, name in enumerate(REQUEST_FIELDS)}
    task_table = np.frombuffer(rec.tasks, dtype=np.float64).reshape(-1, len(TASK_FIELDS)).copy()
    task_order = np.argsort(task_table[:, 0], kind="stable")
    tasks = {name: task_table[task_order, i] for i, name in enumerate(TASK_FIELDS)}
    backends = []
    for b in simulation.backends:
        d, hw = b.deployment, b.deployment.hardware
        backends.append(BackendRecord(
            name=b.name, hardware=hw, model_id=d.model.id, chips_per_replica=d.chips,
            replicas=[r.index for r in b.replicas], kv_blocks_per_replica=b.kv_blocks, max_batch_size=b.batch_cap,
            peak_flops_per_chip=hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value,
            peak_bandwidth_per_chip=d.weights_tier.bandwidth.value,
            pricing=b.pricing,
        ))  # fmt: skip
    return RunRecords(
        requests=requests,
        tasks=tasks,
        in_system=rec.in_system,
        queue=rec.queue,
        batch=rec.batch,
        kv_blocks=rec.kv_blocks,
        totals=rec.totals,
        itl_counts=rec.itl_counts.copy(),
        tokens=rec.tokens,
        end_s=end_s,
        warmup_s=simulation.scenario.run.warmup,
        backends=backends,
        in_flight=simulation.factory.count - rec.request_count,
        capacity_requests_per_s=simulation.capacity_requests_per_s,
        offered_requests_per_s=simulation.offered_requests_per_s,
    )
