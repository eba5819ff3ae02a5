"""KV that outlives the serving tier: a replica's evicted prefix blocks go down a hierarchy of
slower tiers (host DRAM, CXL, SSD, remote) instead of vanishing, and come back up when a later
call's prefix finds them there; a preempted sequence's KV swaps out to the first tier below and
back. Every move between tiers is timed here, by the tier the blocks move between.

Assumptions:

- **The time of a move** is the tier's: ``transfer_s(blocks) = blocks x block_bytes / bandwidth
  + latency`` (:meth:`KVTier.transfer_s`), ``bandwidth`` the tier's to the serving tier (the
  replica's chips in parallel, :func:`simulator.plan.resolve._tier_plan`) and ``latency`` its fixed
  time a transfer. A new kind of tier (another eviction order, compression) is a
  :class:`~simulator.config.batching.KVTierSpec` subclass and one builder registered with
  ``@kv_tier.register``; it may time its moves its own way.
- **Placement.** A block lives in one place: the serving tier (the paged KV of
  :mod:`simulator.engine.kv.blocks`), one lower tier, or in flight between them. When the serving
  tier reclaims an unreferenced cached block (LRU), the block enters the first lower tier as its
  most recent; a full tier pushes its least recent block one tier down; the last tier drops it.
  A newer copy of a block replaces an older one wherever it is.
- **Write-back is free.** Copying a block down (LMCache and vLLM's offloading connector copy
  as the block is freed, asynchronously) is overlapped with serving and not charged.
- **Prefix loads up are charged.** When a call is routed to its replica (the replica's arrival
  hook, :meth:`~simulator.engine.replica.Replica.arrive`), the leading prompt blocks that are
  not resident but sit in lower tiers (contiguously after the resident prefix) are loaded if
  that is faster than computing them again: ``load = sum over the tiers read of blocks x
  block_bytes / bandwidth + the largest latency among them`` (the tiers' latencies overlap, their
  bytes share the way up) against ``recompute`` = the cost model's pass over those tokens alone
  at that context. The call reaches the replica's queue ``load`` later (the load overlaps other
  sequences' iterations, as asynchronous KV connectors run), and the loaded blocks join the
  serving tier's cache as its most recent, so its admission finds them as a prefix hit. Loaded
  blocks that find no free block there (all held by running sequences) are lost and computed
  again.
- **Swaps are charged.** A swap-preempted sequence's KV moves to the *swap tier* (the scenario's
  first KV tier, else the hardware profile's next memory tier slower than the serving one) and
  back when it is re-admitted; the blocks moved in or out since the last iteration that ran move
  as one transfer, which that iteration waits for: ``swap_s = swap tier's transfer_s(blocks)``.
  Swapped KV takes no room in the tier (its capacity holds the prefix blocks).
- ``ttft_saved_s`` is the sum over loads of ``recompute - load``: an estimate (each pass is
  timed alone; in a batch the recompute would share iterations).

Tier figures for a scenario's own tiers (per replica; from the hardware profile otherwise):
NVMe Gen4 x4 SSD ~7 GB/s sequential read, ~80-100 us read latency (vendor datasheets, e.g.
Samsung 990 PRO: 7.45 GB/s; datasheet); Gen5 x4 ~14 GB/s (datasheet); CXL 2.0 memory expander
on PCIe 5 x16 ~63 GB/s, ~0.2-0.4 us (Sun et al., MICRO 2023; measured); remote KV over
InfiniBand NDR 50 GB/s a port (:mod:`simulator.analytic.kv_transfer`; datasheet).
"""

from __future__ import annotations

import functools
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from simulator.analytic.step_time import BatchAggregates, CostModel
from simulator.config.batching import KVTierSpec
from simulator.engine.kv.blocks import BlockKey, BlockManager
from simulator.engine.request import Request
from simulator.plan.resolve import BackendPlan, TierPlan
from simulator.records.store import KVTierRecords, LevelMonitor


class KVTier:
    """One tier below the serving tier (the bundled kind): the blocks it holds, least recent
    first, and the time a move between it and the serving tier takes."""

    def __init__(self, plan: TierPlan) -> None:
        self.name = plan.name
        self.capacity_blocks = plan.blocks
        self.s_per_block = plan.s_per_block  # block_bytes / bandwidth
        self.latency_s = plan.latency_s
        self.blocks: OrderedDict[BlockKey, None] = OrderedDict()

    def stream_s(self, blocks: float) -> float:
        """Seconds ``blocks`` take on the tier's way to the serving tier: ``blocks x block_bytes / bandwidth``."""
        return blocks * self.s_per_block

    def transfer_s(self, blocks: float) -> float:
        """Seconds one move of ``blocks`` takes: ``blocks x block_bytes / bandwidth + latency``."""
        return self.stream_s(blocks) + self.latency_s

    def insert(self, keys: Sequence[BlockKey]) -> list[BlockKey]:
        """Blocks enter as the most recent; returns those pushed out (least recent first) beyond its capacity."""
        for key in keys:
            self.blocks[key] = None
        return [self.blocks.popitem(last=False)[0] for _ in range(len(self.blocks) - self.capacity_blocks)]

    def remove(self, key: BlockKey) -> None:
        """A block leaves (loaded up, or superseded by a newer copy)."""
        del self.blocks[key]

    def __len__(self) -> int:
        return len(self.blocks)


@functools.singledispatch
def kv_tier(spec: object, plan: TierPlan) -> KVTier:
    """The tier a replica keeps for ``plan``, chosen by the class of its config ``spec``.

    A new kind of tier is a :class:`~simulator.config.batching.KVTierSpec` subclass and one builder
    registered with ``@kv_tier.register``.
    """
    raise TypeError(f"no KV tier is registered for {type(spec).__name__} (@kv_tier.register one)")


@kv_tier.register
def _lru_tier(spec: KVTierSpec, plan: TierPlan) -> KVTier:
    return KVTier(plan)


def replica_tiers(backend: BackendPlan, blocks: BlockManager) -> KVTiers | None:
    """The tiers below one replica's serving tier ``blocks`` (None: it has none and never swaps)."""
    if not backend.kv_tiers and backend.swap_tier is None:
        return None
    swap = None if backend.swap_tier is None else kv_tier(backend.swap_tier.spec, backend.swap_tier)
    block_bytes = backend.kv_block_tokens * backend.deployment.kv_bytes_per_token
    tiers = [kv_tier(plan.spec, plan) for plan in backend.kv_tiers]
    return KVTiers(tiers, blocks, backend.cost, backend.window, block_bytes, swap)


class KVTiers:
    """One replica's tiers below its serving tier, fed by the serving tier's evictions, and the
    tier its preempted KV swaps to."""

    def __init__(self, tiers: Sequence[KVTier], blocks: BlockManager, cost: CostModel, window: int | None,
                 block_bytes: float, swap: KVTier | None = None) -> None:  # fmt: skip
        self.tiers, self.blocks, self.cost, self.window = list(tiers), blocks, cost, window
        self.block_bytes = block_bytes
        self.swap = swap
        self.where: dict[BlockKey, int] = {}  # the tier holding each block below the serving tier
        self.occupancy = [LevelMonitor() for _ in self.tiers]
        self.demoted = np.zeros(len(self.tiers))  # blocks that entered each tier
        self.loaded = np.zeros(len(self.tiers))  # blocks loaded up from each tier
        self.replaced = np.zeros(len(self.tiers))  # blocks superseded by a newer copy
        self.load_pairs = array("d")  # (load s, recompute s) of each load made
        self.dropped = 0  # blocks pushed off the last tier
        self.lost = 0  # loaded blocks that found no room in the serving tier
        self.declined = 0  # prefixes found below but computed again (faster)
        self._landing: dict[int, list[Hashable]] = {}
        self._now = 0.0
        if self.tiers:
            blocks.on_evict = self.demote

    def swap_s(self, blocks: float) -> float:
        """Seconds an iteration waits for ``blocks`` swapped between the serving tier and the swap tier
        (0 without one: KV a disaggregated link delivered is in place when admitted, its link timed it)."""
        return 0.0 if self.swap is None else self.swap.transfer_s(blocks)

    def demote(self, keys: list[BlockKey]) -> None:
        """Cached blocks the serving tier reclaimed enter the first tier, oldest first (a newer copy wins)."""
        for key in keys:
            self._forget(key)
        self._insert(0, keys)

    def _forget(self, key: BlockKey) -> None:
        """An older copy of ``key`` below, if any, is superseded."""
        older = self.where.pop(key, None)
        if older is not None:
            self.tiers[older].remove(key)
            self.replaced[older] += 1
            self.occupancy[older].record(self._now, len(self.tiers[older]))

    def _insert(self, index: int, keys: list[BlockKey]) -> None:
        """Blocks enter tier ``index`` as its most recent; its overflow goes one tier down (or out)."""
        tier = self.tiers[index]
        for key in keys:
            self.where[key] = index
        self.demoted[index] += len(keys)
        overflow = tier.insert(keys)
        self.occupancy[index].record(self._now, len(tier))
        if not overflow:
            return
        if index + 1 < len(self.tiers):
            self._insert(index + 1, overflow)
        else:
            self.dropped += len(overflow)
            for key in overflow:
                del self.where[key]

    def load_s(self, found: Sequence[tuple[Hashable, int]]) -> float:
        """Seconds to load ``found`` blocks (key, tier) up: each tier's stream plus the largest latency."""
        counts: dict[int, int] = {}
        for _, tier in found:
            counts[tier] = counts.get(tier, 0) + 1
        streams = sum(self.tiers[t].stream_s(float(n)) for t, n in counts.items())
        return streams + max(self.tiers[t].latency_s for t in counts)

    def fetch(self, request: Request, now: float) -> float:
        """Seconds to load the request's prefix blocks found below (0: none, or computing them is faster)."""
        self._now = now
        kv = self.blocks
        if not self.tiers or not kv.caching or not request.cacheable or request.swapped is not None:
            return 0.0
        full = int((request.input_tokens + request.generated - 1) // kv.block_tokens)
        keys = request.block_keys(0, full)
        first, _ = kv.leading(keys)
        found = self._found_below(keys[first:])
        if not found:
            return 0.0
        load_s = self.load_s(found)
        tokens = float(len(found) * kv.block_tokens)
        batch = BatchAggregates.of([tokens], [float(first * kv.block_tokens)], self.window)
        recompute_s = float(self.cost.iteration_times(batch).total_s[0])
        if load_s >= recompute_s:
            self.declined += 1
            return 0.0
        self._take_up(found, now)
        self.load_pairs.extend((load_s, recompute_s))
        self._landing[request.id] = [key for key, _ in found]
        return load_s

    def _found_below(self, keys: Sequence[Hashable]) -> list[tuple[Hashable, int]]:
        """``(key, tier)`` of the leading run of ``keys`` held in a tier below (up to the first missing)."""
        found: list[tuple[Hashable, int]] = []
        for key in keys:
            tier = self.where.get(key)
            if tier is None:
                break
            found.append((key, tier))
        return found

    def _take_up(self, found: list[tuple[Hashable, int]], now: float) -> None:
        """Take the ``found`` blocks out of their tiers (counted as loaded) and record each tier's
        occupancy after."""
        for key, tier in found:
            self.tiers[tier].remove(key)
            del self.where[key]
            self.loaded[tier] += 1
        for t in {t for _, t in found}:
            self.occupancy[t].record(now, len(self.tiers[t]))

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
            names=tuple(t.name for t in self.tiers),
            capacity_blocks=tuple(t.capacity_blocks for t in self.tiers),
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
