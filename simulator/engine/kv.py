"""Paged KV: a replica's KV budget in blocks, and a prefix cache of reusable full blocks.

The budget is ``floor(kv_budget / (block_tokens * kv bytes per token))`` blocks; a sequence
holding ``n`` tokens of KV owns ``ceil(n / block_tokens)`` blocks. (Sliding-window layers
are charged like full ones: conservative for gpt-oss.)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BlockKey = Hashable


class BlockManager:
    """Paged KV: free blocks, blocks in use, and a prefix cache of reusable full blocks.

    A cached block is identified by its key (a block hash, or ``(session, index)``); blocks in
    use by running sequences are reference-counted, so sequences sharing a prefix share its
    blocks. Unreferenced cached blocks are kept in LRU order and are reclaimed, oldest first,
    only when an allocation finds no free block.
    """

    def __init__(self, total_blocks: int, block_tokens: int, caching: bool = False) -> None:
        self.total = total_blocks
        self.free = total_blocks
        self.block_tokens = block_tokens
        self.caching = caching
        self.evictable: OrderedDict[BlockKey, None] = OrderedDict()
        self.in_use: dict[BlockKey, int] = {}
        self.on_evict: Callable[[list[BlockKey]], None] | None = None  # where reclaimed cached blocks go (KV tiers)
        self.version = 0  # changes whenever the set of resident cached blocks may have changed

    def blocks_for(self, tokens: FloatArray) -> FloatArray:
        return np.ceil(tokens / self.block_tokens)

    def blocks_of(self, tokens: float) -> float:
        """:meth:`blocks_for` of one sequence, in plain Python."""
        return float(math.ceil(tokens / self.block_tokens))

    @property
    def used(self) -> int:
        """Blocks holding KV of running sequences (cached, unreferenced blocks excluded)."""
        return self.total - self.free - len(self.evictable)

    @property
    def available(self) -> int:
        return self.free + len(self.evictable)

    def allocate(self, blocks: int) -> bool:
        """Take ``blocks`` free blocks, reclaiming LRU cached ones if needed."""
        if blocks > self.available:
            return False
        reclaimed = [self.evictable.popitem(last=False)[0] for _ in range(blocks - self.free)]
        self.free += len(reclaimed)
        if reclaimed:
            self.version += 1
            if self.on_evict is not None:
                self.on_evict(reclaimed)
        self.free -= blocks
        return True

    def acquire(self, keys: Sequence[BlockKey]) -> None:
        """Reference resident blocks for a sequence that reuses them."""
        self.version += 1
        evictable, in_use = self.evictable, self.in_use
        for key in keys:
            if evictable.pop(key, False) is None:  # an idle cached block (never also in use)
                in_use[key] = 1
            else:
                in_use[key] = in_use.get(key, 0) + 1

    def cache_loaded(self, keys: Sequence[BlockKey]) -> int:
        """Blocks loaded from a lower tier join the cache as its most recent, as many as there is
        room for; returns how many did."""
        room = min(len(keys), self.available)
        self.allocate(room)
        self.version += 1
        for key in keys[:room]:
            self.evictable[key] = None
        return room

    def publish(self, keys: Sequence[BlockKey | None]) -> list[BlockKey]:
        """Make freshly computed full blocks shareable; returns the keys now referenced.

        A key another sequence already published stays that sequence's; this copy remains a
        private block of its owner (it was computed twice).
        """
        published = []
        self.version += 1
        for key in keys:
            if key is None or key in self.in_use or key in self.evictable:
                break
            self.in_use[key] = 1
            published.append(key)
        return published

    def release(self, shared: Sequence[BlockKey], owned: int, keys: Sequence[BlockKey | None]) -> None:
        """A sequence leaves: drop its references, cache its full ``keys`` blocks, free the rest.

        ``keys`` names the owned full blocks in order (None: not cacheable); owned blocks beyond
        them (a partial last block) are freed. Blocks enter the LRU tail first (as vLLM frees
        them in reverse), so eviction trims a cached context from its end and keeps its prefix.
        """
        cached = 0
        self.version += 1
        evictable, in_use = self.evictable, self.in_use
        if self.caching:
            for key in reversed(keys[:owned]):
                if key is not None and key not in evictable and key not in in_use:
                    evictable[key] = None
                    cached += 1
        for key in reversed(shared):
            count = in_use[key] - 1
            if count:
                in_use[key] = count
            else:
                del in_use[key]
                evictable[key] = None
        self.free += owned - cached
