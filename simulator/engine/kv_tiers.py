"""KV that outlives the serving tier: a replica's evicted prefix blocks go down a hierarchy of
slower tiers (host DRAM, CXL, SSD, remote) instead of vanishing, and come back up when a later
call's prefix finds them there.

Assumptions:

- **Placement.** A block lives in one place: the serving tier (the paged KV of
  :mod:`simulator.engine.kv`), one lower tier, or in flight between them. When the serving
  tier reclaims an unreferenced cached block (LRU), the block enters the first lower tier as its
  most recent; a full tier pushes its least recent block one tier down; the last tier drops it.
  A newer copy of a block replaces an older one wherever it is.
- **Write-back is free.** Copying a block down (LMCache and vLLM's offloading connector copy
  as the block is freed, asynchronously) is overlapped with serving and not charged.
- **Loads up are charged.** When a call reaches its replica, the leading prompt blocks that are
  not resident but sit in lower tiers (contiguously after the resident prefix) are loaded if
  that is faster than computing them again: ``load = sum over blocks of s_per_block(tier) +
  max latency of the tiers read`` against ``recompute`` = the cost model's pass over those
  tokens alone at that context. The call then reaches the replica's queue ``load`` later (the
  load overlaps other sequences' iterations, as asynchronous KV connectors run), and the loaded
  blocks join the serving tier's cache as its most recent, so its admission finds them as a
  prefix hit. Loaded blocks that find no free block there (all held by running sequences) are
  lost and computed again. ``s_per_block = block tokens x KV bytes per token / tier bandwidth``
  (the replica's chips in parallel, :func:`simulator.resolve._tier_plan`).
- ``ttft_saved_s`` is the sum over loads of ``recompute - load``: an estimate (each pass is
  timed alone; in a batch the recompute would share iterations).

Tier figures for a scenario's own tiers (per replica; from the hardware profile otherwise):
NVMe Gen4 x4 SSD ~7 GB/s sequential read, ~80-100 us read latency (vendor datasheets, e.g.
Samsung 990 PRO: 7.45 GB/s; datasheet); Gen5 x4 ~14 GB/s (datasheet); CXL 2.0 memory expander
on PCIe 5 x16 ~63 GB/s, ~0.2-0.4 us (Sun et al., MICRO 2023; measured); remote KV over
InfiniBand NDR 50 GB/s a port (:mod:`simulator.analytic.kv_transfer`; datasheet).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from simulator.analytic.step_time import BatchAggregates, CostModel
from simulator.engine.kv import BlockKey, BlockManager
from simulator.engine.request import Request
from simulator.records import KVTierRecords, LevelMonitor
from simulator.resolve import TierPlan


class KVTiers:
    """One replica's tiers below its serving tier, fed by the serving tier's evictions."""

    def __init__(self, plans: tuple[TierPlan, ...], blocks: BlockManager, cost: CostModel, window: int | None,
                 block_bytes: float) -> None:  # fmt: skip
        self.plans, self.blocks, self.cost, self.window, self.block_bytes = plans, blocks, cost, window, block_bytes
        self.tiers: list[OrderedDict[BlockKey, None]] = [OrderedDict() for _ in plans]
        self.where: dict[BlockKey, int] = {}  # the tier holding each block below the serving tier
        self.occupancy = [LevelMonitor() for _ in plans]
        self.demoted = np.zeros(len(plans))  # blocks that entered each tier
        self.loaded = np.zeros(len(plans))  # blocks loaded up from each tier
        self.replaced = np.zeros(len(plans))  # blocks superseded by a newer copy
        self.load_pairs = array("d")  # (load s, recompute s) of each load made
        self.dropped = 0  # blocks pushed off the last tier
        self.lost = 0  # loaded blocks that found no room in the serving tier
        self.declined = 0  # prefixes found below but computed again (faster)
        self._landing: dict[int, list[Hashable]] = {}
        self._now = 0.0
        blocks.on_evict = self.demote

    def demote(self, keys: list[BlockKey]) -> None:
        """Cached blocks the serving tier reclaimed enter the first tier, oldest first (a newer copy wins)."""
        for key in keys:
            self._forget(key)
        self._insert(0, keys)

    def _forget(self, key: BlockKey) -> None:
        """An older copy of ``key`` below, if any, is superseded."""
        older = self.where.pop(key, None)
        if older is not None:
            del self.tiers[older][key]
            self.replaced[older] += 1
            self.occupancy[older].record(self._now, len(self.tiers[older]))

    def _insert(self, index: int, keys: list[BlockKey]) -> None:
        """Blocks enter tier ``index`` as its most recent; its overflow goes one tier down (or out)."""
        tier = self.tiers[index]
        for key in keys:
            tier[key] = None
            self.where[key] = index
        self.demoted[index] += len(keys)
        overflow = [tier.popitem(last=False)[0] for _ in range(len(tier) - self.plans[index].blocks)]
        self.occupancy[index].record(self._now, len(tier))
        if not overflow:
            return
        if index + 1 < len(self.tiers):
            self._insert(index + 1, overflow)
        else:
            self.dropped += len(overflow)
            for key in overflow:
                del self.where[key]

    def fetch(self, request: Request, now: float) -> float:
        """Seconds to load the request's prefix blocks found below (0: none, or computing them is faster)."""
        self._now = now
        kv = self.blocks
        if not kv.caching or not request.cacheable or request.swapped is not None:
            return 0.0
        full = int((request.input_tokens + request.generated - 1) // kv.block_tokens)
        keys = request.block_keys(0, full)
        first, _ = kv.leading(keys)
        found: list[tuple[Hashable, int]] = []
        for key in keys[first:]:
            tier = self.where.get(key)
            if tier is None:
                break
            found.append((key, tier))
        if not found:
            return 0.0
        used = {t for _, t in found}
        load_s = sum(self.plans[t].s_per_block for _, t in found) + max(self.plans[t].latency_s for t in used)
        tokens = float(len(found) * kv.block_tokens)
        batch = BatchAggregates.of([tokens], [float(first * kv.block_tokens)], self.window)
        recompute_s = float(self.cost.iteration_times(batch).total_s[0])
        if load_s >= recompute_s:
            self.declined += 1
            return 0.0
        for key, tier in found:
            del self.tiers[tier][key]
            del self.where[key]
            self.loaded[tier] += 1
        for t in used:
            self.occupancy[t].record(now, len(self.tiers[t]))
        self.load_pairs.extend((load_s, recompute_s))
        self._landing[request.id] = [key for key, _ in found]
        return load_s

    def land(self, request: Request, now: float) -> None:
        """The loaded blocks join the serving tier's cache as its most recent (as many as fit)."""
        self._now = now
        keys = [k for k in self._landing.pop(request.id, []) if not self.blocks.resident(k)]
        room = self.blocks.cache_loaded(keys)
        for key in keys[:room]:
            self._forget(key)  # a copy demoted while this one was in flight
        self.lost += len(keys) - room

    def freeze(self, backend: str, replica: int) -> KVTierRecords:
        return KVTierRecords(
            backend=backend,
            replica=replica,
            names=tuple(p.name for p in self.plans),
            capacity_blocks=tuple(p.blocks for p in self.plans),
            block_tokens=self.blocks.block_tokens,
            block_bytes=self.block_bytes,
            occupancy=self.occupancy,
            demoted=self.demoted.copy(),
            loaded=self.loaded.copy(),
            replaced=self.replaced.copy(),
            dropped=self.dropped,
            lost=self.lost,
            declined=self.declined,
            load_pairs_s=np.frombuffer(self.load_pairs, dtype=np.float64).reshape(-1, 2).copy(),
        )
